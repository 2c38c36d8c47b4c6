//! An ended session's kept directory, `<data dir>/artifacts/<session>/` (the server's, owner
//! only): what it holds besides the files (dot files: expiry, tenant, uploads, the recording,
//! why something was not kept), how it is made within its tenant's cap, the bytes each tenant
//! keeps, and the sweep of expired ones.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::files::{FileError, SessionDir};
use browserpool_pool::video::{self, Frames};

/// In a kept directory: the names clients uploaded, one a line (dot names are never files).
pub(super) const UPLOADS: &str = ".uploads";
/// In a kept directory: when it expires, in ms since the epoch.
pub(super) const EXPIRES: &str = ".expires";
/// In a kept directory: its session's tenant (whose cap its bytes count against).
pub(super) const TENANT: &str = ".tenant";
/// In a kept directory: why what its session left was not kept.
pub(super) const REFUSED: &str = ".refused";
/// In a kept directory: the session's recording, and the name it is shown under.
pub(super) const RECORDING: &str = ".recording.webm";
pub const RECORDING_NAME: &str = "recording.webm";
/// The least time an encoding is given before it is stopped.
const ENCODE_MIN: Duration = Duration::from_secs(120);

/// Where ended sessions' files are kept, for how long, and the object store they are copied
/// to, if any.
#[derive(Debug, Clone)]
pub struct KeepFiles {
    pub dir: PathBuf,
    pub ttl: Duration,
    pub store: Option<Arc<crate::objects::ObjectStore>>,
}

/// Why what an ended session left was not kept.
#[derive(Debug, thiserror::Error)]
pub(super) enum NotKept {
    /// Its tenant's `max_artifact_mb` would be passed.
    #[error("{0}")]
    Refused(String),
    /// Encoding, or the disk, failed.
    #[error("{0}")]
    Failed(String),
}

impl From<FileError> for NotKept {
    fn from(e: FileError) -> NotKept {
        match e {
            // Not a session's files directory (whose words those are): the server's own disk,
            // whose free bytes are not the tenant's to know.
            FileError::Full { name, .. } => {
                let name = if name == RECORDING { RECORDING_NAME } else { name.as_str() };
                NotKept::Failed(format!(
                    "no room left for {name:?} on the server's disk for kept artifacts (--data-dir)"
                ))
            }
            e => NotKept::Failed(e.to_string()),
        }
    }
}

/// Where an ended session's artifacts go: its kept directory `to` in `root`, made on first
/// use with its tenant, uploads and expiry; `cap`, the most bytes its tenant may keep here.
pub(super) struct Keeping {
    pub root: PathBuf,
    pub to: PathBuf,
    pub tenant: String,
    pub uploads: Vec<String>,
    pub expires_ms: i64,
    pub cap: Option<u64>,
    /// Why nothing is kept, when that was decided before the browser was gone (see
    /// [`Keeping::precheck`]).
    pub refused: Option<String>,
}

/// One lock a tenant, held while a kept directory's bytes are judged against that tenant's cap
/// and written, so its sessions ending at once cannot together pass it. Only a tenant's own
/// ends wait for each other: a large copy holds up no other tenant's (whose sessions keep
/// their slots until what they leave is kept). An entry lives while someone holds or waits
/// for it.
static TURNS: std::sync::Mutex<std::collections::BTreeMap<String, Arc<std::sync::Mutex<()>>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Runs `f` while no other session of `tenant` is admitted (see [`TURNS`]).
fn in_turn<T>(tenant: &str, f: impl FnOnce() -> T) -> T {
    let turn = Turn::take(tenant);
    let _held = turn.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    f()
}

/// A tenant's entry in [`TURNS`], removed by the last to let go of it.
struct Turn<'a> {
    tenant: &'a str,
    lock: Arc<std::sync::Mutex<()>>,
}

impl<'a> Turn<'a> {
    fn take(tenant: &'a str) -> Turn<'a> {
        let mut turns = TURNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Turn { tenant, lock: turns.entry(tenant.to_string()).or_default().clone() }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut turns = TURNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The table's and this one: nobody else holds or waits (taking one needs the table).
        if Arc::strong_count(&self.lock) == 2 {
            turns.remove(self.tenant);
        }
    }
}

impl Keeping {
    /// Moves the plain files of `from` into the kept directory; how many.
    pub fn files(&self, from: &Path) -> Result<usize, NotKept> {
        let src = SessionDir::open(from)?;
        let files = src.sizes()?;
        if files.is_empty() {
            return Ok(0);
        }
        let bytes = files.iter().map(|(_, size)| size).sum();
        self.admitted(bytes, |dst| {
            let (mut moved, mut failed) = (0, None);
            for (name, _) in files {
                match src.move_to(dst, &name) {
                    Ok(()) => moved += 1,
                    // Gone or replaced meanwhile: not one of the session's files any more.
                    Err(FileError::NotFound(_) | FileError::NotAFile(_)) => {}
                    // The others may still fit (a smaller one on a full disk).
                    Err(e) => failed = failed.or(Some(NotKept::from(e))),
                }
            }
            match failed {
                None => Ok(moved),
                Some(NotKept::Failed(why) | NotKept::Refused(why)) if moved > 0 => {
                    let files = if moved == 1 { "file" } else { "files" };
                    Err(NotKept::Failed(format!("{why} ({moved} other {files} kept)")))
                }
                Some(e) => Err(e),
            }
        })
    }

    /// Encodes `frames` and keeps the video; its frame count and size.
    pub fn recording(&self, frames: &Frames) -> Result<(usize, u64), NotKept> {
        if let Some(why) = &frames.stopped {
            tracing::warn!(error = %why, "the recording stopped early");
        }
        // Encoding runs far faster than real time; past this it is stuck.
        let video =
            video::encode(frames, ENCODE_MIN.max(frames.end * 2)).map_err(|e| NotKept::Failed(e.to_string()))?;
        let size = std::fs::symlink_metadata(&video.path).map_err(|e| NotKept::Failed(e.to_string()))?.len();
        let size = self.admitted(size, |dst| Ok(dst.write_meta_from(RECORDING, &video.path)?))?;
        Ok((video.frames, size))
    }

    /// `write` into the kept directory, `bytes` more, while no other session of its tenant is
    /// admitted (so that a cap set meanwhile holds too): refused (and the reason kept in it,
    /// for `Get`) when they would take the tenant past its cap, or when that was decided
    /// already. A write that fails (a full disk) keeps its reason too.
    fn admitted<T>(&self, bytes: u64, write: impl FnOnce(&SessionDir) -> Result<T, NotKept>) -> Result<T, NotKept> {
        let dst = self.dir()?;
        let written = match (&self.refused, self.cap) {
            (Some(why), _) => Err(NotKept::Refused(why.clone())),
            (None, cap) => in_turn(&self.tenant, || {
                let held = cap.map(|_| tenant_bytes(&self.root, &self.tenant));
                if let (Some(cap), Some(held)) = (cap, held) {
                    if held + bytes > cap {
                        return Err(NotKept::Refused(refusal(&self.tenant, held, bytes, cap)));
                    }
                }
                write(&dst)
            }),
        };
        if let Err(NotKept::Refused(why) | NotKept::Failed(why)) = &written {
            note_reason(&dst, why);
        }
        written
    }

    /// Whether what a session leaves, before its browser is gone, is refused already: the
    /// files in `files_dir` would take its tenant past its cap, or it keeps a recording and the
    /// tenant is at its cap. The reason, for the session's events. (A recording is judged
    /// again once encoded, when its size is known.)
    pub fn precheck(&self, files_dir: &Path, recording: bool) -> Option<String> {
        let cap = self.cap?;
        let bytes: u64 =
            SessionDir::open(files_dir).and_then(|d| d.sizes()).map_or(0, |f| f.iter().map(|(_, s)| s).sum());
        if bytes == 0 && !recording {
            return None;
        }
        let held = tenant_bytes(&self.root, &self.tenant);
        (held + bytes > cap || (recording && held >= cap)).then(|| refusal(&self.tenant, held, bytes, cap))
    }

    /// The kept directory: opened if something was kept already, else made (owner only) with
    /// its expiry, tenant and uploads.
    fn dir(&self) -> Result<SessionDir, FileError> {
        let io = |what: &str, e: std::io::Error| FileError::Io(format!("{what} {}: {e}", self.to.display()));
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.root).map_err(|e| io("create", e))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&self.to) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return SessionDir::open(&self.to),
            made => made.map_err(|e| io("create", e))?,
        }
        let dst = SessionDir::open(&self.to)?;
        // The expiry first: a directory without one is swept as expired.
        let meta = dst
            .write_meta(EXPIRES, self.expires_ms.to_string().as_bytes())
            .and_then(|()| dst.write_meta(TENANT, self.tenant.as_bytes()))
            .and_then(|()| dst.write_meta(UPLOADS, self.uploads.join("\n").as_bytes()));
        if let Err(e) = meta {
            // Without its tenant, what it held would count against no cap.
            let _ = std::fs::remove_dir_all(&self.to);
            return Err(e);
        }
        Ok(dst)
    }
}

/// Adds `why` to the reasons the kept directory `dst` gives for what it does not hold (its
/// files', then its recording's), once.
fn note_reason(dst: &SessionDir, why: &str) {
    let had = dst.read_meta(REFUSED).unwrap_or_default();
    if had.contains(why) {
        return;
    }
    let all = if had.is_empty() { why.to_string() } else { format!("{had}; {why}") };
    if let Err(e) = dst.replace_meta(REFUSED, all.as_bytes()) {
        tracing::warn!(error = %e, reason = why, "why a session's artifacts were not kept could not be written");
    }
}

/// Why a session's artifacts are not kept: `held` bytes kept, `bytes` more, the tenant's `cap`.
fn refusal(tenant: &str, held: u64, bytes: u64, cap: u64) -> String {
    format!(
        "tenant {tenant} keeps {} MiB of artifacts, and {} MiB more would pass its max_artifact_mb of {} MiB",
        held.div_ceil(1 << 20),
        bytes.div_ceil(1 << 20),
        cap >> 20
    )
}

/// The bytes each tenant's kept directories in `root` hold (`only` that tenant's, when
/// given; read from their sizes, nothing opened).
pub(super) fn bytes_by_tenant(root: &Path, only: Option<&str>) -> std::collections::BTreeMap<String, u64> {
    let mut by_tenant = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(root) else { return by_tenant };
    for entry in entries.flatten() {
        let dir = entry.path();
        let Some(tenant) = read_meta(&dir, TENANT) else { continue };
        if only.is_none_or(|only| only == tenant) {
            *by_tenant.entry(tenant).or_default() += dir_bytes(&dir);
        }
    }
    by_tenant
}

/// The bytes of the plain files in `dir` (sizes read, nothing opened).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(files) = std::fs::read_dir(dir) else { return 0 };
    files.flatten().filter_map(|f| f.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// The bytes `tenant`'s kept directories in `root` hold (files and recordings).
fn tenant_bytes(root: &Path, tenant: &str) -> u64 {
    bytes_by_tenant(root, Some(tenant)).remove(tenant).unwrap_or(0)
}

/// Deletes every kept directory in `root` whose expiry is before `now_ms` (or unreadable);
/// how many.
pub(super) fn sweep(root: &Path, now_ms: i64) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else { return 0 };
    let mut swept = 0;
    for entry in entries.flatten() {
        let dir = entry.path();
        let expires = read_meta(&dir, EXPIRES).and_then(|t| t.trim().parse::<i64>().ok());
        if expires.is_some_and(|at| at > now_ms) {
            continue;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => swept += 1,
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "expired session files could not be deleted"),
        }
    }
    swept
}

/// A kept directory's metadata file, if readable (the directory is the server's alone).
pub(super) fn read_meta(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_ending_at_once_never_pass_their_tenant_s_cap_together() {
        let root = tempfile::tempdir().unwrap();
        let kept = root.path().join("kept");
        // Room for three 1 MiB sessions (and their few bytes of metadata), not four.
        let cap = (3 << 20) + (64 << 10);
        let start = std::sync::Barrier::new(8);
        let results: Vec<bool> = std::thread::scope(|scope| {
            let running: Vec<_> = (0..8)
                .map(|i| {
                    let src = root.path().join(format!("src{i}"));
                    std::fs::create_dir(&src).unwrap();
                    std::fs::write(src.join("f.bin"), vec![0u8; 1 << 20]).unwrap();
                    let keeping = Keeping {
                        root: kept.clone(),
                        to: kept.join(format!("s{i}")),
                        tenant: "t".into(),
                        uploads: Vec::new(),
                        expires_ms: i64::MAX,
                        cap: Some(cap),
                        refused: None,
                    };
                    let start = &start;
                    scope.spawn(move || {
                        start.wait();
                        keeping.files(&src).is_ok()
                    })
                })
                .collect();
            running.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|kept| **kept).count(), 3, "{results:?}");
        let held = tenant_bytes(&kept, "t");
        assert!((3 << 20..cap).contains(&held), "{held} bytes kept");
    }

    #[test]
    fn a_tenant_s_sessions_wait_to_be_kept_only_for_each_other() {
        use std::sync::mpsc;
        let root = tempfile::tempdir().unwrap();
        let kept = root.path().join("kept");
        let keeping = |tenant: &str| {
            let src = root.path().join(format!("src-{tenant}"));
            std::fs::create_dir(&src).unwrap();
            std::fs::write(src.join("f.bin"), [1u8; 1024]).unwrap();
            let to = kept.join(format!("s-{tenant}"));
            let keeping = Keeping {
                root: kept.clone(),
                to,
                tenant: tenant.into(),
                uploads: Vec::new(),
                expires_ms: i64::MAX,
                cap: Some(1 << 20),
                refused: None,
            };
            (keeping, src)
        };
        let (a, b) = ("turns-a", "turns-b");
        let (held_tx, held_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|scope| {
            // A session of tenant a is being kept (a large copy, say) ...
            scope.spawn(move || {
                in_turn(a, || {
                    held_tx.send(()).unwrap();
                    // Bounded, so that a failed assertion below ends the test instead of hanging it.
                    let _ = go_rx.recv_timeout(Duration::from_secs(60));
                })
            });
            held_rx.recv().unwrap();
            for tenant in [b, a] {
                let (keeping, src) = keeping(tenant);
                let done = done_tx.clone();
                scope.spawn(move || done.send((tenant, keeping.files(&src).ok())).unwrap());
            }
            // ... which holds up tenant b's not at all, and tenant a's other session until it ends.
            let first = done_rx.recv_timeout(Duration::from_secs(30));
            assert_eq!(first, Ok((b, Some(1))));
            let early = done_rx.recv_timeout(Duration::from_millis(300));
            assert_eq!(early, Err(mpsc::RecvTimeoutError::Timeout), "tenant a's second keep waited for its turn");
            go_tx.send(()).unwrap();
            assert_eq!(done_rx.recv_timeout(Duration::from_secs(30)), Ok((a, Some(1))));
        });
        let turns = TURNS.lock().unwrap();
        assert!(!turns.contains_key(a) && !turns.contains_key(b), "the last to go removed its tenant's lock");
    }

    #[test]
    fn a_refusal_decided_before_the_end_keeps_nothing_and_says_why() {
        let root = tempfile::tempdir().unwrap();
        let src = root.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("f.bin"), b"xy").unwrap();
        let keeping = Keeping {
            root: root.path().join("kept"),
            to: root.path().join("kept/s"),
            tenant: "t".into(),
            uploads: Vec::new(),
            expires_ms: i64::MAX,
            cap: Some(1),
            refused: None,
        };
        let why = keeping.precheck(&src, false).expect("2 bytes pass a 1-byte cap");
        assert!(why.contains("max_artifact_mb"), "{why}");
        let keeping = Keeping { refused: Some(why.clone()), cap: None, ..keeping };
        assert!(matches!(keeping.files(&src), Err(NotKept::Refused(w)) if w == why));
        assert_eq!(read_meta(&keeping.to, REFUSED).as_deref(), Some(why.as_str()));
        assert!(src.join("f.bin").exists(), "nothing was moved");
        // Each reason once (the recording's refusal is the files'), another one added to it.
        assert!(matches!(keeping.files(&src), Err(NotKept::Refused(_))));
        let dst = SessionDir::open(&keeping.to).unwrap();
        note_reason(&dst, "the recording failed");
        let all = read_meta(&keeping.to, REFUSED).unwrap();
        assert_eq!(all, format!("{why}; the recording failed"));
        let names: Vec<_> = std::fs::read_dir(&keeping.to).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().all(|n| !n.to_string_lossy().contains(".new-")), "{names:?}");
    }
}
