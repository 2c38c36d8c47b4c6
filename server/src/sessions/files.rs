//! A live session's files: the downloads its pages made and the files clients uploaded, in
//! the files directory its lease made (read and written through [`crate::files`] only). They go
//! with the session.

use super::*;
use crate::files::{FileError, FileInfo, SessionDir, Upload};
use browserpool_pool::sync::lock;

/// The largest file `PutFile` takes.
pub const MAX_FILE_BYTES: u64 = 100 << 20;

/// One file of a session, and whether a client uploaded it (else a page downloaded it).
#[derive(Debug, Clone)]
pub struct SessionFile {
    pub info: FileInfo,
    pub uploaded: bool,
}

impl Sessions {
    /// The files directory of live session `id` and the session, for a caller holding `scope`
    /// on it (a foreign or unknown session is NOT_FOUND, an ended one FAILED_PRECONDITION).
    async fn files_of(&self, claims: &Claims, id: &str, scope: Scope) -> Result<(SessionDir, Arc<Live>)> {
        require(claims, scope)?;
        self.attach(claims, id).await?;
        let live = self
            .live_map()
            .get(id)
            .cloned()
            .ok_or(ServiceError::NotReady { id: id.into(), state: SessionState::Closed.as_str() })?;
        let path = live.cdp.files_dir.clone();
        let dir = blocking(move || SessionDir::open(&path)).await?;
        Ok((dir, live))
    }

    /// The session's files, by name.
    pub async fn list_files(&self, claims: &Claims, id: &str) -> Result<Vec<SessionFile>> {
        let (dir, live) = self.files_of(claims, id, Scope::SessionsRead).await?;
        let files = blocking(move || dir.list()).await?;
        let uploads = lock(&live.uploads);
        Ok(files.into_iter().map(|info| SessionFile { uploaded: uploads.contains(&info.name), info }).collect())
    }

    /// Opens one file of the session to read.
    pub async fn open_file(&self, claims: &Claims, id: &str, name: &str) -> Result<(std::fs::File, SessionFile)> {
        let (dir, live) = self.files_of(claims, id, Scope::SessionsRead).await?;
        let owned = name.to_string();
        let (file, info) = blocking(move || dir.open_file(&owned)).await?;
        let uploaded = lock(&live.uploads).contains(name);
        Ok((file, SessionFile { info, uploaded }))
    }

    /// Starts an upload of `name` into the session; [`Sessions::uploaded`] once it is whole.
    pub async fn put_file(&self, claims: &Claims, id: &str, name: &str) -> Result<Upload> {
        let (dir, _) = self.files_of(claims, id, Scope::SessionsWrite).await?;
        let owned = name.to_string();
        blocking(move || dir.create(&owned, MAX_FILE_BYTES)).await
    }

    /// Puts a finished upload in place; the file is the client's from then on.
    pub async fn uploaded(&self, id: &str, upload: Upload) -> Result<SessionFile> {
        let info = blocking(move || upload.finish()).await?;
        if let Some(live) = self.live_map().get(id).cloned() {
            lock(&live.uploads).insert(info.name.clone());
        }
        Ok(SessionFile { info, uploaded: true })
    }

    /// Deletes one file of the session.
    pub async fn delete_file(&self, claims: &Claims, id: &str, name: &str) -> Result<()> {
        let (dir, live) = self.files_of(claims, id, Scope::SessionsWrite).await?;
        let owned = name.to_string();
        blocking(move || dir.delete(&owned)).await?;
        lock(&live.uploads).remove(name);
        Ok(())
    }
}

/// Runs a file operation off the async threads (hashing a file reads all of it).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, FileError> + Send + 'static) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => Ok(result?),
        Err(e) => Err(ServiceError::Internal(format!("file task: {e}"))),
    }
}
