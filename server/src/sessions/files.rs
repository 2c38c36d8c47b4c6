//! A session's files: the downloads its pages made and the files clients uploaded, in the
//! files directory its lease made (read and written through [`crate::files`] only). When the
//! session ends they are moved to `<data dir>/artifacts/<session>/` (the server's, owner only)
//! and kept, read-only, for `--artifact-ttl`; a sweep deletes them after. With an object store
//! (`--artifact-store`) they are copied there too (see [`super::stored`]), and read from there
//! once the replica that kept them is gone.

use std::path::PathBuf;

use super::kept::{
    bytes_by_tenant, read_meta, sweep, Keeping, NotKept, EXPIRES, RECORDING, RECORDING_NAME, REFUSED, UPLOADS,
};
use super::stored::{Manifest, StoredFile};
use super::*;
use crate::files::{FileError, FileInfo, SessionDir, Upload};
use browserpool_pool::sync::lock;
use browserpool_pool::video::Frames;

/// The largest file `PutFile` takes.
pub const MAX_FILE_BYTES: u64 = 100 << 20;

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

/// A session's files as one call finds them: live (then `live` to record uploads) or kept, on
/// this replica or in the object store.
struct Found {
    held: Held,
    live: Option<Arc<Live>>,
    uploads: std::collections::BTreeSet<String>,
    expires_ms: Option<i64>,
}

/// Where a call finds a session's files.
enum Held {
    /// A directory of this replica's.
    Dir(SessionDir),
    /// The object store, as its manifest lists them.
    Stored(Manifest),
}

/// Where an ended session's artifacts are.
enum Kept {
    /// Its kept directory here (which may be gone: expired or deleted).
    Dir(PathBuf),
    /// The object store.
    Stored(Manifest),
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
        let ended = || ServiceError::NotReady { id: id.into(), state: record.state.as_str(), detail: record.ended() };
        if !record.state.is_terminal() {
            self.here(&record)?;
            let live = self.live_map().get(id).cloned().ok_or_else(ended)?;
            let path = live.cdp.files_dir.clone();
            let dir = blocking(move || SessionDir::open(&path)).await?;
            let uploads = lock(&live.uploads).clone();
            return Ok(Found { held: Held::Dir(dir), live: Some(live), uploads, expires_ms: None });
        }
        let kept = match scope {
            Scope::SessionsRead => self.kept(&record).await?.ok_or_else(ended)?,
            _ => return Err(ended()),
        };
        let now = self.now();
        let kept = match kept {
            Kept::Stored(manifest) if manifest.expires_ms > now => {
                let (uploads, expires_ms) = (manifest.uploads(), Some(manifest.expires_ms));
                return Ok(Found { held: Held::Stored(manifest), live: None, uploads, expires_ms });
            }
            Kept::Stored(_) => return Err(ended()),
            Kept::Dir(dir) => dir,
        };
        let found = blocking(move || {
            let expires_ms = read_meta(&kept, EXPIRES).and_then(|t| t.trim().parse::<i64>().ok());
            match expires_ms {
                Some(at) if at > now => {}
                _ => return Ok(None),
            }
            let uploads = read_meta(&kept, UPLOADS).unwrap_or_default().lines().map(str::to_string).collect();
            Ok(Some(Found { held: Held::Dir(SessionDir::open(&kept)?), live: None, uploads, expires_ms }))
        })
        .await?;
        found.ok_or_else(ended)
    }

    /// Where ended session `record` keeps what it left, once its teardown (which keeps it) is
    /// over; `None` when this server keeps nothing. Calls about a session that ended on another
    /// replica are forwarded there while that replica is registered and alive; past that its
    /// artifacts are read from the object store, and without one the call is
    /// FAILED_PRECONDITION.
    async fn kept(&self, record: &SessionRecord) -> Result<Option<Kept>> {
        let Some(keep) = &self.inner.limits.keep_files else { return Ok(None) };
        if record.replica != self.replica_id() {
            if keep.store.is_some() {
                return Ok(self.stored_manifest(&record.id).await?.map(Kept::Stored));
            }
            return Err(ServiceError::FailedPrecondition(format!(
                "session {} ended on replica {}, which kept its files and recording and is no longer reachable \
                 (an --artifact-store shared by the replicas keeps them past their replica)",
                record.id, record.replica
            )));
        }
        // Release answers once the end is recorded; what it leaves is kept during the
        // teardown after it, which a call right after the release waits for.
        let ending = self.ending_map().get(&record.id).cloned();
        if let Some(ending) = ending {
            ending.finished.cancelled().await;
        }
        Ok(Some(Kept::Dir(keep.dir.join(&record.id))))
    }

    /// The session's files, by name.
    pub async fn list_files(&self, claims: &Claims, id: &str) -> Result<Vec<SessionFile>> {
        let found = self.files_of(claims, id, Scope::SessionsRead).await?;
        let files = match &found.held {
            Held::Stored(manifest) => manifest.files.iter().map(StoredFile::info).collect(),
            Held::Dir(dir) => {
                let dir = dir.try_clone()?;
                blocking(move || dir.list()).await?
            }
        };
        Ok(files.into_iter().map(|info| found.file(info)).collect())
    }

    /// Opens one file of the session to read.
    pub async fn open_file(&self, claims: &Claims, id: &str, name: &str) -> Result<(std::fs::File, SessionFile)> {
        let found = self.files_of(claims, id, Scope::SessionsRead).await?;
        let (file, info) = match &found.held {
            Held::Stored(manifest) => {
                crate::files::judge_name(name)?;
                let stored =
                    manifest.files.iter().find(|f| f.name == name).ok_or_else(|| FileError::NotFound(name.into()))?;
                (self.fetch_stored(id, stored, false).await?, stored.info())
            }
            Held::Dir(dir) => {
                let (dir, owned) = (dir.try_clone()?, name.to_string());
                blocking(move || dir.open_file(&owned)).await?
            }
        };
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
        let (file, info) = match found.held {
            Held::Stored(manifest) => {
                let stored = manifest.recording.ok_or_else(|| FileError::NotFound(RECORDING_NAME.into()))?;
                (self.fetch_stored(id, &stored, true).await?, stored.info())
            }
            Held::Dir(dir) => blocking(move || dir.open_meta(RECORDING, RECORDING_NAME)).await?,
        };
        Ok((file, SessionFile { info, kind: FileKind::Recording, expires_ms }))
    }

    /// What session `id` leaves behind, for `Get`: a live session's files; an ended one's
    /// kept files and recording, and why what it left was not kept, if it was not; nothing
    /// when nothing was kept or the caller may not read it.
    pub async fn artifacts(&self, claims: &Claims, id: &str) -> (Vec<SessionFile>, String) {
        let Ok(found) = self.files_of(claims, id, Scope::SessionsRead).await else { return Default::default() };
        let listed = match &found.held {
            Held::Stored(manifest) => Ok((
                manifest.files.iter().map(StoredFile::info).collect(),
                manifest.recording.as_ref().map(StoredFile::info),
                Some(manifest.refused.clone()).filter(|r| !r.is_empty()),
            )),
            Held::Dir(dir) => match dir.try_clone() {
                Ok(dir) => {
                    let live = found.live.is_some();
                    blocking(move || {
                        let files = dir.list()?;
                        let (recording, refused) = match live {
                            true => (None, None),
                            false => (
                                dir.open_meta(RECORDING, RECORDING_NAME).ok().map(|(_, info)| info),
                                dir.read_meta(REFUSED),
                            ),
                        };
                        Ok((files, recording, refused))
                    })
                    .await
                }
                Err(e) => Err(e.into()),
            },
        };
        let Ok((files, recording, refused)) = listed else { return Default::default() };
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
        let dir = match self.kept(&record).await? {
            None => return Ok(0),
            Some(Kept::Stored(manifest)) => {
                self.delete_stored(id, Some(manifest.expires_ms)).await?;
                return Ok(manifest.count() as u32);
            }
            Some(Kept::Dir(dir)) => dir,
        };
        let expires_ms = read_meta(&dir, EXPIRES).and_then(|t| t.trim().parse::<i64>().ok());
        let count = blocking(move || {
            // Counted by their sizes: nothing is read of what goes.
            let count = match SessionDir::open(&dir) {
                Ok(kept) => kept.sizes()?.len() + usize::from(kept.has_meta(RECORDING)),
                Err(_) => return Ok(0),
            };
            std::fs::remove_dir_all(&dir).map_err(|e| FileError::Io(format!("delete {}: {e}", dir.display())))?;
            Ok(count as u32)
        })
        .await?;
        // The copy in the object store too (a no-op without one).
        self.delete_stored(id, expires_ms).await?;
        Ok(count)
    }

    /// Starts an upload of `name` into the session; [`Sessions::uploaded`] once it is whole.
    pub async fn put_file(&self, claims: &Claims, id: &str, name: &str) -> Result<Upload> {
        let found = self.files_of(claims, id, Scope::SessionsWrite).await?;
        let owned = name.to_string();
        let limit = found.live.as_ref().map_or(MAX_FILE_BYTES, |live| live.terms.max_file_bytes);
        let Held::Dir(dir) = found.held else {
            return Err(ServiceError::Internal("an upload into a kept session".into()));
        };
        blocking(move || dir.create(&owned, limit)).await
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
        let Held::Dir(dir) = found.held else {
            return Err(ServiceError::Internal("a delete in a kept session".into()));
        };
        blocking(move || dir.delete(&owned)).await?;
        if let Some(live) = live {
            lock(&live.uploads).remove(name);
        }
        Ok(())
    }

    /// Where and how session `id` keeps what it leaves, or `None` when nothing is kept here.
    fn keeping(&self, id: &str, live: &Live, refused: Option<String>) -> Option<Keeping> {
        let keep = self.inner.limits.keep_files.as_ref()?;
        let tenant = lock(&live.record).tenant.clone();
        Some(Keeping {
            root: keep.dir.clone(),
            to: keep.dir.join(id),
            tenant,
            uploads: lock(&live.uploads).iter().cloned().collect(),
            expires_ms: self.now() + live.terms.ttl.as_millis() as i64,
            cap: live.terms.max_tenant_bytes,
            refused,
        })
    }

    /// Whether what session `id`, ending as `state`, leaves is refused already by its
    /// tenant's cap (see [`Keeping::precheck`]): the reason, for its events, before its browser
    /// is gone.
    pub(super) async fn refused_artifacts(&self, id: &str, live: &Live, state: SessionState) -> Option<String> {
        let keeping = self.keeping(id, live, None).filter(|k| k.cap.is_some())?;
        let failed = live.failed.load(std::sync::atomic::Ordering::SeqCst);
        let recording = live.record_mode.keeps(state, failed);
        let files_dir = live.cdp.files_dir.clone();
        tokio::task::spawn_blocking(move || keeping.precheck(&files_dir, recording)).await.ok().flatten()
    }

    /// Keeps an ended session's files, once its browser is gone: moved (or copied, across file
    /// systems) from `from`, its files directory, into its kept directory, with what clients
    /// uploaded and when they expire, unless its tenant's stored bytes would pass its cap;
    /// then `from` is removed. Nothing is kept for a session without files.
    pub(super) async fn keep_files(&self, id: &str, live: &Live, from: PathBuf, refused: Option<String>) {
        if from.as_os_str().is_empty() {
            return;
        }
        let keeping = self.keeping(id, live, refused);
        let kept = tokio::task::spawn_blocking(move || {
            let kept = keeping.map(|k| k.files(&from));
            if let Err(e) = browserpool_pool::remove_files_dir(&from) {
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
    pub(super) async fn keep_recording(
        &self,
        id: &str,
        live: &Live,
        (state, refused): (SessionState, Option<String>),
        frames: Frames,
    ) {
        let failed = live.failed.load(std::sync::atomic::Ordering::SeqCst);
        let keeping = self.keeping(id, live, refused).filter(|_| live.record_mode.keeps(state, failed));
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
    /// every `--artifact-ttl`, when shorter), here and in the object store; copies to the
    /// store that failed are tried again every 5 s.
    pub async fn sweep_kept_files(self, shutdown: CancellationToken) {
        let Some(keep) = self.inner.limits.keep_files.clone() else { return };
        let every = keep.ttl.clamp(Duration::from_secs(1), Duration::from_secs(60));
        let retry = every.min(Duration::from_secs(5));
        let mut swept_at: Option<std::time::Instant> = None;
        loop {
            if swept_at.is_none_or(|at| at.elapsed() >= every) {
                swept_at = Some(std::time::Instant::now());
                let (dir, now) = (keep.dir.clone(), self.now());
                match tokio::task::spawn_blocking(move || sweep(&dir, now)).await {
                    Ok(0) | Err(_) => {}
                    Ok(swept) => tracing::info!(sessions = swept, "expired session files deleted"),
                }
                self.sweep_store().await;
            }
            self.store_pending().await;
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }
}

/// Runs a file operation off the async threads (hashing a file reads all of it).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, FileError> + Send + 'static) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => Ok(result?),
        Err(e) => Err(ServiceError::Internal(format!("file task: {e}"))),
    }
}
