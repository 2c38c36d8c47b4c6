//! Ended sessions' artifacts in the object store (`--artifact-store`): copied there at the
//! session's end (and by the sweep, until that works), so any replica serves them once the
//! replica that made them is gone; deleted there at their expiry or by `DeleteArtifacts`.
//!
//! Keys, below the store's prefix: `<session>/files/<name>`, `<session>/recording.webm`,
//! `<session>/manifest.json` (written last: what it lists is whole) and
//! `expiry/<ms, 16 digits>/<session>` (written first, listed in time order by the sweep).

use std::collections::BTreeSet;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::kept::{read_meta, KeepFiles, EXPIRES, RECORDING, RECORDING_NAME, REFUSED, TENANT, UPLOADS};
use super::*;
use crate::files::{mime_type, FileError, FileInfo, SessionDir};
use crate::objects::{ObjectError, ObjectStore};

/// In a kept directory: present once what it holds is in the object store.
const STORED: &str = ".stored";
/// The largest manifest read (a session's file list).
const MAX_MANIFEST: u64 = 4 << 20;

/// What the object store holds of one ended session.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Manifest {
    pub tenant: String,
    pub expires_ms: i64,
    /// Why what the session left was not kept, if it was not.
    #[serde(default)]
    pub refused: String,
    pub files: Vec<StoredFile>,
    pub recording: Option<StoredFile>,
}

/// One object of a [`Manifest`], as the replica that kept it saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StoredFile {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub modified_ms: i64,
    /// A client uploaded it (else a page downloaded it).
    #[serde(default)]
    pub upload: bool,
}

impl StoredFile {
    fn of(info: &FileInfo, upload: bool) -> StoredFile {
        StoredFile {
            name: info.name.clone(),
            size: info.size,
            sha256: info.sha256.clone(),
            modified_ms: info.modified_ms,
            upload,
        }
    }

    pub(super) fn info(&self) -> FileInfo {
        FileInfo {
            name: self.name.clone(),
            size: self.size,
            mime_type: mime_type(&self.name),
            sha256: self.sha256.clone(),
            modified_ms: self.modified_ms,
        }
    }
}

impl Manifest {
    /// How many artifacts it lists (files and the recording).
    pub(super) fn count(&self) -> usize {
        self.files.len() + usize::from(self.recording.is_some())
    }

    /// The names clients uploaded.
    pub(super) fn uploads(&self) -> BTreeSet<String> {
        self.files.iter().filter(|f| f.upload).map(|f| f.name.clone()).collect()
    }
}

fn manifest_key(id: &str) -> String {
    format!("{id}/manifest.json")
}

fn object_key(id: &str, file: &StoredFile, recording: bool) -> String {
    match recording {
        true => format!("{id}/{}", RECORDING_NAME),
        false => format!("{id}/files/{}", file.name),
    }
}

const EXPIRY: &str = "expiry/";

fn expiry_key(expires_ms: i64, id: &str) -> String {
    format!("{EXPIRY}{expires_ms:016}/{id}")
}

/// The expiry and session of an expiry key.
fn expiry_of(key: &str) -> Option<(i64, &str)> {
    let (at, id) = key.strip_prefix(EXPIRY)?.split_once('/')?;
    Some((at.parse().ok()?, id))
}

/// What kept directory `dir` holds, as a manifest lists it (its files are read to be hashed).
fn manifest_of(dir: &Path) -> Result<Manifest, FileError> {
    let kept = SessionDir::open(dir)?;
    let uploads: BTreeSet<String> = read_meta(dir, UPLOADS).unwrap_or_default().lines().map(String::from).collect();
    let files = kept.list()?.iter().map(|info| StoredFile::of(info, uploads.contains(&info.name))).collect();
    let recording = kept.open_meta(RECORDING, RECORDING_NAME).ok().map(|(_, info)| StoredFile::of(&info, false));
    let expires_ms = read_meta(dir, EXPIRES)
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| FileError::Io(format!("{}: no expiry", dir.display())))?;
    Ok(Manifest {
        tenant: read_meta(dir, TENANT).unwrap_or_default(),
        expires_ms,
        refused: kept.read_meta(REFUSED).unwrap_or_default(),
        files,
        recording,
    })
}

/// [`manifest_of`] off the async threads; `None` when `dir` is not there.
async fn read_manifest(dir: &Path) -> Option<Result<Manifest, String>> {
    let dir = dir.to_path_buf();
    match tokio::task::spawn_blocking(move || dir.is_dir().then(|| manifest_of(&dir))).await {
        Ok(read) => read.map(|m| m.map_err(|e| e.to_string())),
        Err(e) => Some(Err(e.to_string())),
    }
}

/// Copies kept directory `dir` of session `id`, as `manifest` lists it, to `store`: its expiry
/// key first (so even a half copy is swept), each file and the recording, the manifest last;
/// then marks the directory stored. How many objects were written.
async fn upload(store: &ObjectStore, id: &str, dir: PathBuf, manifest: &Manifest) -> Result<usize, String> {
    let put = |e: ObjectError| e.to_string();
    store.put_bytes(&expiry_key(manifest.expires_ms, id), Vec::new()).await.map_err(put)?;
    for file in &manifest.files {
        store.put_file(&object_key(id, file, false), &dir.join(&file.name)).await.map_err(put)?;
    }
    if let Some(recording) = &manifest.recording {
        store.put_file(&object_key(id, recording, true), &dir.join(RECORDING)).await.map_err(put)?;
    }
    let json = serde_json::to_vec(manifest).map_err(|e| e.to_string())?;
    store.put_bytes(&manifest_key(id), json).await.map_err(put)?;
    let mark = dir.clone();
    match tokio::task::spawn_blocking(move || SessionDir::open(&mark)?.write_meta(STORED, b"")).await {
        Ok(marked) => marked.map_err(|e| e.to_string())?,
        Err(e) => return Err(e.to_string()),
    }
    Ok(manifest.count() + 2)
}

/// Deletes what `store` holds of session `id`: the manifest first (readers then find
/// nothing), then its other objects, and its expiry key when `expires_ms` is known.
async fn delete_stored(store: &ObjectStore, id: &str, expires_ms: Option<i64>) -> Result<(), ObjectError> {
    store.delete(&manifest_key(id)).await?;
    for object in store.list(&format!("{id}/")).await? {
        store.delete(&object.key).await?;
    }
    if let Some(at) = expires_ms {
        store.delete(&expiry_key(at, id)).await?;
    }
    Ok(())
}

/// An object store failure as callers see it: retryable.
fn unavailable(e: ObjectError) -> ServiceError {
    ServiceError::Unreachable(format!("{e}; retry shortly"))
}

impl Sessions {
    /// Whether ended sessions' artifacts are copied to an object store, from which any
    /// replica serves them.
    pub fn stores_artifacts(&self) -> bool {
        self.object_store().is_some()
    }

    fn object_store(&self) -> Option<(&KeepFiles, Arc<ObjectStore>)> {
        let keep = self.inner.limits.keep_files.as_ref()?;
        Some((keep, keep.store.clone()?))
    }

    /// Once ended session `id`'s artifacts are kept here: what they are goes to its database
    /// row (so `List` shows them on any replica), and they are copied to the object store, if
    /// one is set.
    pub(super) async fn left_behind(&self, id: &str) {
        let Some(keep) = self.inner.limits.keep_files.as_ref() else { return };
        let dir = keep.dir.join(id);
        let manifest = match read_manifest(&dir).await {
            None => return,
            Some(Ok(manifest)) => manifest,
            Some(Err(e)) => {
                tracing::warn!(session = %id, error = %e, "what a session left cannot be listed");
                return;
            }
        };
        let json = serde_json::to_string(&manifest).unwrap_or_default();
        if let Err(e) = self.inner.store.set_session_artifacts(id, Some(&json)).await {
            tracing::warn!(session = %id, error = %e, "what a session left is not in the database yet: List shows it once the database answers again");
            self.inner.unwritten.keep(HeldBack::Artifacts { id: id.to_string(), manifest: json });
        }
        if let Some(store) = keep.store.clone() {
            self.store_artifacts(&store, id, dir, &manifest, false).await;
        }
    }

    /// Copies what ended session `id` left on this replica (`dir`, as `manifest` lists it) to
    /// `store` (a failure is counted, and logged unless `retry`; the sweep tries again while
    /// it is kept here).
    async fn store_artifacts(&self, store: &ObjectStore, id: &str, dir: PathBuf, manifest: &Manifest, retry: bool) {
        match upload(store, id, dir, manifest).await {
            Ok(objects) => {
                tracing::info!(session = %id, objects, store = %store.url(), "artifacts stored");
                self.inner.metrics.stored("stored");
            }
            Err(e) if retry => {
                tracing::debug!(session = %id, error = %e, "artifacts still not stored");
                self.inner.metrics.stored("failed");
            }
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "artifacts not stored yet: kept here, and tried again");
                self.inner.metrics.stored("failed");
            }
        }
    }

    /// What the object store holds of ended session `id`; `None` when no store is set or it
    /// holds nothing of it (UNAVAILABLE when it cannot be read).
    pub(super) async fn stored_manifest(&self, id: &str) -> Result<Option<Manifest>> {
        let Some((_, store)) = self.object_store() else { return Ok(None) };
        match store.get_bytes(&manifest_key(id), MAX_MANIFEST).await {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ServiceError::Internal(format!("the manifest of session {id} in {} does not parse: {e}", store.url()))
            }),
            Err(ObjectError::NotFound(_)) => Ok(None),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// One artifact of ended session `id` from the object store, in an unnamed file of this
    /// replica's artifacts directory (gone when closed), checked against its manifest's size
    /// and SHA-256 before it is served.
    pub(super) async fn fetch_stored(&self, id: &str, file: &StoredFile, recording: bool) -> Result<std::fs::File> {
        let Some((keep, store)) = self.object_store() else {
            return Err(FileError::NotFound(file.name.clone()).into());
        };
        let root = keep.dir.clone();
        let temp = tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&root)?;
            tempfile::tempfile_in(&root)
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("file task: {e}")))?
        .map_err(|e| FileError::Io(format!("a temporary file for {}: {e}", file.name)))?;
        let mut temp = tokio::fs::File::from_std(temp);
        let key = object_key(id, file, recording);
        let (size, sha256) = match store.get_into(&key, &mut temp).await {
            Err(ObjectError::NotFound(_)) => return Err(FileError::NotFound(file.name.clone()).into()),
            got => got.map_err(unavailable)?,
        };
        if size != file.size || sha256 != file.sha256 {
            return Err(ServiceError::Internal(format!(
                "{key} in {} is {size} bytes with sha256 {sha256}, not what its manifest lists: not served",
                store.url()
            )));
        }
        let mut temp = temp.into_std().await;
        temp.seek(SeekFrom::Start(0)).map_err(|e| FileError::Io(format!("{}: {e}", file.name)))?;
        Ok(temp)
    }

    /// Deletes what the object store holds of ended session `id`, if a store is set, and what
    /// its database row says it left.
    pub(super) async fn delete_stored(&self, id: &str, expires_ms: Option<i64>) -> Result<()> {
        if let Some((_, store)) = self.object_store() {
            delete_stored(&store, id, expires_ms).await.map_err(unavailable)?;
        }
        self.inner.store.set_session_artifacts(id, None).await?;
        Ok(())
    }

    /// What ended session `record` left, as its row says (for `List`): its files and
    /// recording until they expire, and why anything was refused.
    pub fn listed_artifacts(&self, record: &SessionRecord) -> (Vec<SessionFile>, String) {
        let Some(manifest) = record.artifacts.as_deref().and_then(|j| serde_json::from_str::<Manifest>(j).ok()) else {
            return Default::default();
        };
        if manifest.expires_ms <= self.now() {
            return Default::default();
        }
        let expires_ms = Some(manifest.expires_ms);
        let kind = |f: &StoredFile| if f.upload { FileKind::Upload } else { FileKind::Download };
        let mut files: Vec<SessionFile> =
            manifest.files.iter().map(|f| SessionFile { info: f.info(), kind: kind(f), expires_ms }).collect();
        if let Some(recording) = &manifest.recording {
            files.push(SessionFile { info: recording.info(), kind: FileKind::Recording, expires_ms });
        }
        (files, manifest.refused)
    }

    /// Copies the kept directories not in the object store yet (but those of sessions still
    /// ending, which copy their own).
    pub(super) async fn store_pending(&self) {
        let Some((keep, store)) = self.object_store() else { return };
        let (root, now) = (keep.dir.clone(), self.now());
        let pending = tokio::task::spawn_blocking(move || not_stored(&root, now)).await.unwrap_or_default();
        for id in pending {
            if self.ending_map().contains_key(&id) {
                continue;
            }
            let dir = keep.dir.join(&id);
            if let Some(Ok(manifest)) = read_manifest(&dir).await {
                self.store_artifacts(&store, &id, dir, &manifest, true).await;
            }
        }
    }

    /// Deletes from the object store the sessions past their expiry, whichever replica kept
    /// them.
    pub(super) async fn sweep_store(&self) {
        let Some((_, store)) = self.object_store() else { return };
        let now = self.now();
        let expired = match store.list(EXPIRY).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the object store's expiries");
                return;
            }
        };
        let mut deleted = 0;
        for key in expired {
            let Some((at, id)) = expiry_of(&key.key) else { continue };
            if at > now {
                break;
            }
            match delete_stored(&store, id, Some(at)).await {
                Ok(()) => deleted += 1,
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "expired artifacts could not be deleted from the object store");
                    return;
                }
            }
        }
        if deleted > 0 {
            tracing::info!(sessions = deleted, store = %store.url(), "expired artifacts deleted from the object store");
        }
    }
}

/// The sessions whose kept directories in `root` are not expired and not in the store yet.
fn not_stored(root: &Path, now_ms: i64) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| {
            let dir = entry.path();
            let live =
                read_meta(&dir, EXPIRES).and_then(|t| t.trim().parse::<i64>().ok()).is_some_and(|at| at > now_ms);
            live && !dir.join(STORED).exists()
        })
        .filter_map(|entry| entry.file_name().to_str().map(String::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_keys_sort_by_time_and_read_back() {
        let (early, late) = (expiry_key(999, "s-b"), expiry_key(1_700_000_000_000, "s-a"));
        assert!(early < late, "{early} sorts before {late}");
        assert_eq!(expiry_of(&late), Some((1_700_000_000_000, "s-a")));
        assert_eq!(expiry_of("expiry/x/s"), None);
        assert_eq!(expiry_of("s/manifest.json"), None);
    }

    #[test]
    fn a_manifest_lists_a_kept_directory_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let kept = SessionDir::open(dir.path()).unwrap();
        std::fs::write(dir.path().join("report.csv"), b"a,b\n").unwrap();
        std::fs::write(dir.path().join("in.txt"), b"hello").unwrap();
        kept.write_meta(EXPIRES, b"1234").unwrap();
        kept.write_meta(TENANT, b"team").unwrap();
        kept.write_meta(UPLOADS, b"in.txt").unwrap();
        kept.write_meta(RECORDING, b"webm").unwrap();
        let manifest = manifest_of(dir.path()).unwrap();
        let json = serde_json::to_vec(&manifest).unwrap();
        let back: Manifest = serde_json::from_slice(&json).unwrap();
        assert_eq!((back.tenant.as_str(), back.expires_ms, back.count()), ("team", 1234, 3));
        assert_eq!(back.uploads().into_iter().collect::<Vec<_>>(), ["in.txt"]);
        let csv = back.files.iter().find(|f| f.name == "report.csv").unwrap().info();
        assert_eq!((csv.size, csv.mime_type), (4, "text/csv"));
        assert_eq!(csv.sha256, hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"a,b\n")));
        assert_eq!(back.recording.unwrap().size, 4);
        // A directory without an expiry is never stored: the sweep would not know when to delete it.
        std::fs::remove_file(dir.path().join(EXPIRES)).unwrap();
        assert!(manifest_of(dir.path()).is_err());
    }
}
