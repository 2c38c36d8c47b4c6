//! A session's files: the downloads its pages made and the files clients uploaded, in the
//! files directory its lease made (read and written through [`crate::files`] only). When the
//! session ends they are moved to `<data dir>/artifacts/<session>/` (the server's, owner only)
//! and kept, read-only, for `--artifact-ttl`; a sweep deletes them after.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::*;
use crate::files::{FileError, FileInfo, SessionDir, Upload};
use browserpool_pool::sync::lock;
use browserpool_pool::video::{self, Frames};

/// The largest file `PutFile` takes.
pub const MAX_FILE_BYTES: u64 = 100 << 20;

/// In a kept directory: the names clients uploaded, one a line (dot names are never files).
const UPLOADS: &str = ".uploads";
/// In a kept directory: when it expires, in ms since the epoch.
const EXPIRES: &str = ".expires";
/// In a kept directory: its session's tenant (whose cap its bytes count against).
const TENANT: &str = ".tenant";
/// In a kept directory: why what its session left was not kept.
const REFUSED: &str = ".refused";
/// In a kept directory: the session's recording, and the name it is shown under.
const RECORDING: &str = ".recording.webm";
pub const RECORDING_NAME: &str = "recording.webm";
/// The least time an encoding is given before it is stopped.
const ENCODE_MIN: Duration = Duration::from_secs(120);

/// What a session may leave behind, from its tenant's limits within the server's.
#[derive(Debug, Clone)]
pub(super) struct ArtifactTerms {
    /// How long what it leaves is kept.
    pub ttl: Duration,
    /// Largest upload.
    pub max_file_bytes: u64,
    /// Most bytes its tenant may keep on this replica; `None`: no cap.
    pub max_tenant_bytes: Option<u64>,
}

impl ArtifactTerms {
    pub(super) fn of(tenant: &TenantRecord, keep: Option<&KeepFiles>) -> ArtifactTerms {
        let server_ttl = keep.map_or(Duration::ZERO, |k| k.ttl);
        ArtifactTerms {
            ttl: match tenant.artifact_ttl_s {
                0 => server_ttl,
                s => Duration::from_secs(s as u64).min(server_ttl),
            },
            max_file_bytes: match tenant.max_file_mb {
                0 => MAX_FILE_BYTES,
                mb => (mb as u64) << 20,
            },
            max_tenant_bytes: (tenant.max_artifact_mb != 0).then_some((tenant.max_artifact_mb as u64) << 20),
        }
    }
}

/// Where ended sessions' files are kept, and for how long.
#[derive(Debug, Clone)]
pub struct KeepFiles {
    pub dir: PathBuf,
    pub ttl: Duration,
}

/// One file of a session, whether a client uploaded it (else a page downloaded it), and when
/// it is deleted once its session has ended.
#[derive(Debug, Clone)]
pub struct SessionFile {
    pub info: FileInfo,
    pub kind: FileKind,
    pub expires_ms: Option<i64>,
}

/// Where a session's file came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Download,
    Upload,
    Recording,
}

impl SessionFile {
    /// What an audit record names of it: name, size and hash, never the content.
    pub fn audit_target(&self) -> String {
        format!("name={} size={} sha256={}", self.info.name, self.info.size, self.info.sha256)
    }
}

/// A session's files as one call finds them: live (then `live` to record uploads) or kept.
struct Found {
    dir: SessionDir,
    live: Option<Arc<Live>>,
    uploads: std::collections::BTreeSet<String>,
    expires_ms: Option<i64>,
}

impl Found {
    fn file(&self, info: FileInfo) -> SessionFile {
        let kind = if self.uploads.contains(&info.name) { FileKind::Upload } else { FileKind::Download };
        SessionFile { kind, info, expires_ms: self.expires_ms }
    }
}

impl Sessions {
    /// The bytes of artifacts each tenant keeps on this replica (read from the disk).
    pub async fn artifact_bytes(&self) -> std::collections::BTreeMap<String, u64> {
        let Some(keep) = self.inner.limits.keep_files.clone() else { return Default::default() };
        tokio::task::spawn_blocking(move || bytes_by_tenant(&keep.dir, None)).await.unwrap_or_default()
    }

    /// The files of session `id` for a caller holding `scope` on it: a live session's, or an
    /// ended one's kept files, which only read (a foreign or unknown session is NOT_FOUND; an
    /// ended one FAILED_PRECONDITION to a write, or when it kept nothing).
    async fn files_of(&self, claims: &Claims, id: &str, scope: Scope) -> Result<Found> {
        require(claims, scope)?;
        let record = self.get(claims, id).await?;
        let ended = || ServiceError::NotReady { id: id.into(), state: record.state.as_str() };
        if !record.state.is_terminal() {
            self.here(&record)?;
            let live = self.live_map().get(id).cloned().ok_or_else(ended)?;
            let path = live.cdp.files_dir.clone();
            let dir = blocking(move || SessionDir::open(&path)).await?;
            let uploads = lock(&live.uploads).clone();
            return Ok(Found { dir, live: Some(live), uploads, expires_ms: None });
        }
        let kept = match scope {
            Scope::SessionsRead => self.kept_dir(&record).await?.ok_or_else(ended)?,
            _ => return Err(ended()),
        };
        let now = self.now();
        let found = blocking(move || {
            let expires_ms = read_meta(&kept, EXPIRES).and_then(|t| t.trim().parse::<i64>().ok());
            match expires_ms {
                Some(at) if at > now => {}
                _ => return Ok(None),
            }
            let uploads = read_meta(&kept, UPLOADS).unwrap_or_default().lines().map(str::to_string).collect();
            Ok(Some(Found { dir: SessionDir::open(&kept)?, live: None, uploads, expires_ms }))
        })
        .await?;
        found.ok_or_else(ended)
    }

    /// Where ended session `record` keeps what it left, once its teardown (which keeps it) is
    /// over; `None` when this server keeps nothing. A session that ended on another replica
    /// is FAILED_PRECONDITION: calls about it are forwarded there while that replica is
    /// registered.
    async fn kept_dir(&self, record: &SessionRecord) -> Result<Option<PathBuf>> {
        let Some(keep) = &self.inner.limits.keep_files else { return Ok(None) };
        if record.replica != self.replica_id() {
            return Err(ServiceError::FailedPrecondition(format!(
                "session {} ended on replica {}, which kept its files and recording and is no longer registered",
                record.id, record.replica
            )));
        }
        // Release answers once the end is recorded; what it leaves is kept during the
        // teardown after it, which a call right after the release waits for.
        let ending = self.ending_map().get(&record.id).cloned();
        if let Some(ending) = ending {
            ending.finished.cancelled().await;
        }
        Ok(Some(keep.dir.join(&record.id)))
    }

    /// The session's files, by name.
    pub async fn list_files(&self, claims: &Claims, id: &str) -> Result<Vec<SessionFile>> {
        let found = self.files_of(claims, id, Scope::SessionsRead).await?;
        let (found, files) = blocking(move || {
            let files = found.dir.list()?;
            Ok((found, files))
        })
        .await?;
        Ok(files.into_iter().map(|info| found.file(info)).collect())
    }

    /// Opens one file of the session to read.
    pub async fn open_file(&self, claims: &Claims, id: &str, name: &str) -> Result<(std::fs::File, SessionFile)> {
        let found = self.files_of(claims, id, Scope::SessionsRead).await?;
        let owned = name.to_string();
        let (found, (file, info)) = blocking(move || {
            let opened = found.dir.open_file(&owned)?;
            Ok((found, opened))
        })
        .await?;
        Ok((file, found.file(info)))
    }

    /// Opens the recording of an ended session to read (FAILED_PRECONDITION while it is live:
    /// the video is made at its end; NOT_FOUND when none was kept).
    pub async fn open_recording(&self, claims: &Claims, id: &str) -> Result<(std::fs::File, SessionFile)> {
        let found = match self.files_of(claims, id, Scope::SessionsRead).await {
            Err(ServiceError::NotReady { .. }) => return Err(FileError::NotFound(RECORDING_NAME.into()).into()),
            found => found?,
        };
        if found.live.is_some() {
            return Err(ServiceError::FailedPrecondition(format!(
                "session {id} is live: its recording is made when it ends"
            )));
        }
        let expires_ms = found.expires_ms;
        let (file, info) = blocking(move || found.dir.open_meta(RECORDING, RECORDING_NAME)).await?;
        Ok((file, SessionFile { info, kind: FileKind::Recording, expires_ms }))
    }

    /// What session `id` leaves behind, for `Get`: a live session's files; an ended one's
    /// kept files and recording, and why what it left was not kept, if it was not; nothing
    /// when nothing was kept or the caller may not read it.
    pub async fn artifacts(&self, claims: &Claims, id: &str) -> (Vec<SessionFile>, String) {
        let Ok(found) = self.files_of(claims, id, Scope::SessionsRead).await else { return Default::default() };
        let listed = blocking(move || {
            let files = found.dir.list()?;
            let (recording, refused) = match found.live {
                Some(_) => (None, None),
                None => (
                    found.dir.open_meta(RECORDING, RECORDING_NAME).ok().map(|(_, info)| info),
                    found.dir.read_meta(REFUSED),
                ),
            };
            Ok((found, files, recording, refused))
        })
        .await;
        let Ok((found, files, recording, refused)) = listed else { return Default::default() };
        let mut all: Vec<SessionFile> = files.into_iter().map(|info| found.file(info)).collect();
        all.extend(recording.map(|info| SessionFile { info, kind: FileKind::Recording, expires_ms: found.expires_ms }));
        (all, refused.unwrap_or_default())
    }

    /// Deletes what was kept of an ended session (its files and recording) now; how many
    /// there were. FAILED_PRECONDITION while it is live.
    pub async fn delete_artifacts(&self, claims: &Claims, id: &str) -> Result<u32> {
        require(claims, Scope::SessionsWrite)?;
        let record = self.get(claims, id).await?;
        if !record.state.is_terminal() {
            return Err(ServiceError::FailedPrecondition(format!(
                "session {id} is live: delete its files one by one (DeleteFile), or end it first"
            )));
        }
        let Some(dir) = self.kept_dir(&record).await? else { return Ok(0) };
        blocking(move || {
            // Counted by their sizes: nothing is read of what goes.
            let count = match SessionDir::open(&dir) {
                Ok(kept) => kept.sizes()?.len() + usize::from(kept.has_meta(RECORDING)),
                Err(_) => return Ok(0),
            };
            std::fs::remove_dir_all(&dir).map_err(|e| FileError::Io(format!("delete {}: {e}", dir.display())))?;
            Ok(count as u32)
        })
        .await
    }

    /// Starts an upload of `name` into the session; [`Sessions::uploaded`] once it is whole.
    pub async fn put_file(&self, claims: &Claims, id: &str, name: &str) -> Result<Upload> {
        let found = self.files_of(claims, id, Scope::SessionsWrite).await?;
        let owned = name.to_string();
        let limit = found.live.as_ref().map_or(MAX_FILE_BYTES, |live| live.terms.max_file_bytes);
        blocking(move || found.dir.create(&owned, limit)).await
    }

    /// Puts a finished upload in place; the file is the client's from then on.
    pub async fn uploaded(&self, id: &str, upload: Upload) -> Result<SessionFile> {
        let info = blocking(move || upload.finish()).await?;
        if let Some(live) = self.live_map().get(id).cloned() {
            lock(&live.uploads).insert(info.name.clone());
        }
        Ok(SessionFile { info, kind: FileKind::Upload, expires_ms: None })
    }

    /// Deletes one file of the session.
    pub async fn delete_file(&self, claims: &Claims, id: &str, name: &str) -> Result<()> {
        let found = self.files_of(claims, id, Scope::SessionsWrite).await?;
        let owned = name.to_string();
        let live = found.live.clone();
        blocking(move || found.dir.delete(&owned)).await?;
        if let Some(live) = live {
            lock(&live.uploads).remove(name);
        }
        Ok(())
    }

    /// Where and how session `id` keeps what it leaves, or `None` when nothing is kept here.
    fn keeping(&self, id: &str, live: &Live) -> Option<Keeping> {
        let keep = self.inner.limits.keep_files.as_ref()?;
        let tenant = lock(&live.record).tenant.clone();
        Some(Keeping {
            root: keep.dir.clone(),
            to: keep.dir.join(id),
            tenant,
            uploads: lock(&live.uploads).iter().cloned().collect(),
            expires_ms: self.now() + live.terms.ttl.as_millis() as i64,
            cap: live.terms.max_tenant_bytes,
        })
    }

    /// Keeps an ended session's files, once its browser is gone: moved (or copied, across file
    /// systems) from `from`, its files directory, into its kept directory, with what clients
    /// uploaded and when they expire, unless its tenant's stored bytes would pass its cap;
    /// then `from` is removed. Nothing is kept for a session without files.
    pub(super) async fn keep_files(&self, id: &str, live: &Live, from: PathBuf) {
        if from.as_os_str().is_empty() {
            return;
        }
        let keeping = self.keeping(id, live);
        let kept = tokio::task::spawn_blocking(move || {
            let kept = keeping.map(|k| k.files(&from));
            if let Err(e) = std::fs::remove_dir_all(&from) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %from.display(), error = %e, "a session's files directory could not be removed");
                }
            }
            kept
        })
        .await;
        match kept {
            Ok(None | Some(Ok(0))) => {}
            Ok(Some(Ok(files))) => tracing::info!(session = %id, files, "session files kept"),
            Ok(Some(Err(e))) => tracing::warn!(session = %id, error = %e, "session files not kept"),
            Err(e) => tracing::warn!(session = %id, error = %e, "session files not kept"),
        }
    }

    /// Keeps an ended session's recording, if its mode keeps it for this end: encoded into a
    /// video (see [`browserpool_pool::video`]) in its kept directory, within its tenant's cap.
    /// The frames are removed either way.
    pub(super) async fn keep_recording(&self, id: &str, live: &Live, state: SessionState, frames: Frames) {
        let failed = live.failed.load(std::sync::atomic::Ordering::SeqCst);
        let keeping = self.keeping(id, live).filter(|_| live.record_mode.keeps(state, failed));
        let began = std::time::Instant::now();
        let length = frames.end;
        let kept = tokio::task::spawn_blocking(move || {
            let kept = keeping.map(|k| k.recording(&frames));
            if let Err(e) = std::fs::remove_dir_all(&frames.dir) {
                tracing::warn!(dir = %frames.dir.display(), error = %e, "a recording's frames could not be removed");
            }
            kept
        })
        .await;
        let outcome = match kept {
            Ok(None) => "dropped",
            Ok(Some(Ok((frames, bytes)))) => {
                let took_ms = began.elapsed().as_millis() as u64;
                tracing::info!(session = %id, frames, bytes, took_ms, "recording kept");
                "kept"
            }
            Ok(Some(Err(e))) => {
                tracing::warn!(session = %id, error = %e, "recording not kept");
                match e {
                    NotKept::Refused(_) => "refused",
                    NotKept::Failed(_) => "failed",
                }
            }
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "recording not kept");
                "failed"
            }
        };
        self.inner.metrics.recorded(length, outcome);
    }

    /// Deletes kept files past their expiry until shutdown: at once, then every minute (or
    /// every `--artifact-ttl`, when shorter).
    pub async fn sweep_kept_files(self, shutdown: CancellationToken) {
        let Some(keep) = self.inner.limits.keep_files.clone() else { return };
        let every = keep.ttl.clamp(Duration::from_secs(1), Duration::from_secs(60));
        loop {
            let (dir, now) = (keep.dir.clone(), self.now());
            match tokio::task::spawn_blocking(move || sweep(&dir, now)).await {
                Ok(0) | Err(_) => {}
                Ok(swept) => tracing::info!(sessions = swept, "expired session files deleted"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }
}

/// Why what an ended session left was not kept.
#[derive(Debug, thiserror::Error)]
enum NotKept {
    /// Its tenant's `max_artifact_mb` would be passed.
    #[error("{0}")]
    Refused(String),
    /// Encoding, or the disk, failed.
    #[error("{0}")]
    Failed(String),
}

impl From<FileError> for NotKept {
    fn from(e: FileError) -> NotKept {
        NotKept::Failed(e.to_string())
    }
}

/// Where an ended session's artifacts go: its kept directory `to` in `root`, made on first
/// use with its tenant, uploads and expiry; `cap`, the most bytes its tenant may keep here.
struct Keeping {
    root: PathBuf,
    to: PathBuf,
    tenant: String,
    uploads: Vec<String>,
    expires_ms: i64,
    cap: Option<u64>,
}

impl Keeping {
    /// Moves the plain files of `from` into the kept directory; how many.
    fn files(&self, from: &Path) -> Result<usize, NotKept> {
        let src = SessionDir::open(from)?;
        let files = src.sizes()?;
        if files.is_empty() {
            return Ok(0);
        }
        let dst = self.admit(files.iter().map(|(_, size)| size).sum())?;
        let mut moved = 0;
        for (name, _) in files {
            match src.move_to(&dst, &name) {
                Ok(()) => moved += 1,
                // Gone or replaced meanwhile: not one of the session's files any more.
                Err(FileError::NotFound(_) | FileError::NotAFile(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(moved)
    }

    /// Encodes `frames` and keeps the video; its frame count and size.
    fn recording(&self, frames: &Frames) -> Result<(usize, u64), NotKept> {
        if let Some(why) = &frames.stopped {
            tracing::warn!(error = %why, "the recording stopped early");
        }
        // Encoding runs far faster than real time; past this it is stuck.
        let video =
            video::encode(frames, ENCODE_MIN.max(frames.end * 2)).map_err(|e| NotKept::Failed(e.to_string()))?;
        let size = std::fs::symlink_metadata(&video.path).map_err(|e| NotKept::Failed(e.to_string()))?.len();
        let dst = self.admit(size)?;
        let size = dst.write_meta_from(RECORDING, &video.path)?;
        Ok((video.frames, size))
    }

    /// The kept directory, ready for `bytes` more: refused (and the reason kept in it, for
    /// `Get`) when they would take the tenant past its cap.
    fn admit(&self, bytes: u64) -> Result<SessionDir, NotKept> {
        let dst = self.dir()?;
        let Some(cap) = self.cap else { return Ok(dst) };
        let held = tenant_bytes(&self.root, &self.tenant);
        if held + bytes <= cap {
            return Ok(dst);
        }
        let why = format!(
            "tenant {} keeps {} MiB of artifacts, and {} MiB more would pass its max_artifact_mb of {} MiB",
            self.tenant,
            held.div_ceil(1 << 20),
            bytes.div_ceil(1 << 20),
            cap >> 20
        );
        let _ = dst.write_meta(REFUSED, why.as_bytes());
        Err(NotKept::Refused(why))
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
        dst.write_meta(EXPIRES, self.expires_ms.to_string().as_bytes())?;
        dst.write_meta(TENANT, self.tenant.as_bytes())?;
        dst.write_meta(UPLOADS, self.uploads.join("\n").as_bytes())?;
        Ok(dst)
    }
}

/// The bytes each tenant's kept directories in `root` hold (`only` that tenant's, when
/// given; read from their sizes, nothing opened).
fn bytes_by_tenant(root: &Path, only: Option<&str>) -> std::collections::BTreeMap<String, u64> {
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
fn sweep(root: &Path, now_ms: i64) -> usize {
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
fn read_meta(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

/// Runs a file operation off the async threads (hashing a file reads all of it).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, FileError> + Send + 'static) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => Ok(result?),
        Err(e) => Err(ServiceError::Internal(format!("file task: {e}"))),
    }
}
