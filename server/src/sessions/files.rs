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
/// In a kept directory: the session's recording, and the name it is shown under.
const RECORDING: &str = ".recording.webm";
pub const RECORDING_NAME: &str = "recording.webm";
/// The least time an encoding is given before it is stopped.
const ENCODE_MIN: Duration = Duration::from_secs(120);

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
        let kept = match (&self.inner.limits.keep_files, scope) {
            (Some(_), Scope::SessionsRead) if record.replica != self.replica_id() => {
                // Reads are forwarded to the replica that kept the files while it is registered.
                return Err(ServiceError::FailedPrecondition(format!(
                    "session {id} ended on replica {}, which kept its files and is no longer registered",
                    record.replica
                )));
            }
            (Some(keep), Scope::SessionsRead) => keep.dir.join(id),
            _ => return Err(ended()),
        };
        // Release answers once the end is recorded; its files are kept during the teardown
        // after it, which a read right after the release waits for.
        let ending = self.ending_map().get(id).cloned();
        if let Some(ending) = ending {
            ending.finished.cancelled().await;
        }
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
    /// kept files and recording; nothing when nothing was kept or the caller may not read it.
    pub async fn artifacts(&self, claims: &Claims, id: &str) -> Vec<SessionFile> {
        let Ok(found) = self.files_of(claims, id, Scope::SessionsRead).await else { return Vec::new() };
        let listed = blocking(move || {
            let files = found.dir.list()?;
            let recording = match found.live {
                Some(_) => None,
                None => found.dir.open_meta(RECORDING, RECORDING_NAME).ok().map(|(_, info)| info),
            };
            Ok((found, files, recording))
        })
        .await;
        let Ok((found, files, recording)) = listed else { return Vec::new() };
        let mut all: Vec<SessionFile> = files.into_iter().map(|info| found.file(info)).collect();
        all.extend(recording.map(|info| SessionFile { info, kind: FileKind::Recording, expires_ms: found.expires_ms }));
        all
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
        let Some(keep) = self.inner.limits.keep_files.clone() else { return Ok(0) };
        if record.replica != self.replica_id() {
            return Err(ServiceError::FailedPrecondition(format!(
                "session {id} ended on replica {}, which kept its artifacts and is no longer registered",
                record.replica
            )));
        }
        let ending = self.ending_map().get(id).cloned();
        if let Some(ending) = ending {
            ending.finished.cancelled().await;
        }
        let dir = keep.dir.join(id);
        blocking(move || {
            let count = match SessionDir::open(&dir) {
                Ok(kept) => kept.list()?.len() + usize::from(kept.open_meta(RECORDING, RECORDING_NAME).is_ok()),
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
        blocking(move || found.dir.create(&owned, MAX_FILE_BYTES)).await
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

    /// Keeps an ended session's files, once its browser is gone: moved (or copied, across file
    /// systems) from `from`, its files directory, into its kept directory, with what clients
    /// uploaded and when they expire; then `from` is removed. Nothing is kept for a session
    /// without files.
    pub(super) async fn keep_files(&self, id: &str, live: &Live, from: PathBuf) {
        let Some(keep) = self.inner.limits.keep_files.clone().filter(|_| !from.as_os_str().is_empty()) else { return };
        let uploads: Vec<String> = lock(&live.uploads).iter().cloned().collect();
        let expires_ms = self.now() + keep.ttl.as_millis() as i64;
        let to = keep.dir.join(id);
        let kept = tokio::task::spawn_blocking(move || {
            let kept = keep_dir(&from, &keep.dir, &to, &uploads, expires_ms);
            if let Err(e) = std::fs::remove_dir_all(&from) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %from.display(), error = %e, "a session's files directory could not be removed");
                }
            }
            kept
        })
        .await;
        match kept {
            Ok(Ok(0)) => {}
            Ok(Ok(files)) => tracing::info!(session = %id, files, "session files kept"),
            Ok(Err(e)) => tracing::warn!(session = %id, error = %e, "session files could not be kept"),
            Err(e) => tracing::warn!(session = %id, error = %e, "session files could not be kept"),
        }
    }

    /// Keeps an ended session's recording, if its mode keeps it for this end: encoded into a
    /// video (see [`browserpool_pool::video`]) in its kept directory. The frames are removed
    /// either way.
    pub(super) async fn keep_recording(&self, id: &str, live: &Live, state: SessionState, frames: Frames) {
        let failed = live.failed.load(std::sync::atomic::Ordering::SeqCst);
        let keep = self.inner.limits.keep_files.clone().filter(|_| live.record_mode.keeps(state, failed));
        let expires_ms = self.now() + keep.as_ref().map_or(0, |k| k.ttl.as_millis() as i64);
        let uploads: Vec<String> = lock(&live.uploads).iter().cloned().collect();
        let to = keep.as_ref().map(|k| k.dir.join(id));
        let began = std::time::Instant::now();
        let kept = tokio::task::spawn_blocking(move || {
            let kept = keep.zip(to).map(|(keep, to)| {
                if let Some(why) = &frames.stopped {
                    tracing::warn!(error = %why, "the recording stopped early");
                }
                // Encoding runs far faster than real time; past this it is stuck.
                let video = video::encode(&frames, ENCODE_MIN.max(frames.end * 2)).map_err(|e| e.to_string())?;
                let dst = kept_dir(&keep.dir, &to, &uploads, expires_ms).map_err(|e| e.to_string())?;
                let size = dst.write_meta_from(RECORDING, &video.path).map_err(|e| e.to_string())?;
                Ok::<_, String>((video.frames, size))
            });
            if let Err(e) = std::fs::remove_dir_all(&frames.dir) {
                tracing::warn!(dir = %frames.dir.display(), error = %e, "a recording's frames could not be removed");
            }
            kept
        })
        .await;
        match kept {
            Ok(None) => tracing::debug!(session = %id, "recording not kept"),
            Ok(Some(Ok((frames, bytes)))) => {
                let took_ms = began.elapsed().as_millis() as u64;
                tracing::info!(session = %id, frames, bytes, took_ms, "recording kept");
            }
            Ok(Some(Err(e))) => tracing::warn!(session = %id, error = %e, "the recording could not be kept"),
            Err(e) => tracing::warn!(session = %id, error = %e, "the recording could not be kept"),
        }
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

/// Moves the files of `from` into `to` (made in `root`, owner only); how many.
fn keep_dir(from: &Path, root: &Path, to: &Path, uploads: &[String], expires_ms: i64) -> Result<usize, FileError> {
    let src = SessionDir::open(from)?;
    let files = src.list()?;
    if files.is_empty() {
        return Ok(0);
    }
    let dst = kept_dir(root, to, uploads, expires_ms)?;
    let mut moved = 0;
    for file in files {
        match src.move_to(&dst, &file.name) {
            Ok(()) => moved += 1,
            // Gone or replaced meanwhile: not one of the session's files any more.
            Err(FileError::NotFound(_) | FileError::NotAFile(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(moved)
}

/// Session `to`'s kept directory in `root`: opened if its files were kept already, else made
/// (owner only) with its expiry and uploads.
fn kept_dir(root: &Path, to: &Path, uploads: &[String], expires_ms: i64) -> Result<SessionDir, FileError> {
    let io = |what: &str, e: std::io::Error| FileError::Io(format!("{what} {}: {e}", to.display()));
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(root).map_err(|e| io("create", e))?;
    match std::fs::DirBuilder::new().mode(0o700).create(to) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return SessionDir::open(to),
        made => made.map_err(|e| io("create", e))?,
    }
    let dst = SessionDir::open(to)?;
    // The expiry first: a directory without one is swept as expired.
    dst.write_meta(EXPIRES, expires_ms.to_string().as_bytes())?;
    dst.write_meta(UPLOADS, uploads.join("\n").as_bytes())?;
    Ok(dst)
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
