//! A session's files directory as the server reads and writes it. The directory is the
//! worker's uid's (Chromium writes its downloads there), so whatever is in it may have been put
//! there by a hostile page: a link to the server's key, a FIFO that blocks a reader, a name
//! with a newline. So names are judged before use, every entry is opened relative to the
//! directory's descriptor and never through a link, and a file is only a regular file with one
//! link; anything else is left where it is, never opened, never listed.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sha2::Digest;

/// The most files a listing names (a page may download many more; the rest are left out).
pub const MAX_LISTED: usize = 1000;

/// Why a file operation was refused or failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FileError {
    #[error("file name {name:?} {why}")]
    BadName { name: String, why: &'static str },
    #[error("file {0:?} not found")]
    NotFound(String),
    /// A link, a directory, a FIFO or a file with several links: a page may have planted it.
    #[error("{0:?} is not a regular file of the session (a link, a directory, or a file with other links); it is never opened")]
    NotAFile(String),
    #[error("file {name:?} is larger than the limit of {limit} bytes")]
    TooLarge { name: String, limit: u64 },
    /// The directory's filesystem is full: a session's files directory is a tmpfs of
    /// `--worker-disk-mb` where the server mounts one, shared by its downloads and uploads.
    #[error("no room left for {name:?} in the session's files (its downloads and uploads share --worker-disk-mb of room, {free} bytes free now): delete files it no longer needs, or ask the operator for more")]
    Full { name: String, free: u64 },
    #[error("session files: {0}")]
    Io(String),
}

impl FileError {
    fn io(what: &str, e: impl std::fmt::Display) -> FileError {
        FileError::Io(format!("{what}: {e}"))
    }

    /// A write of `name` into `dir` that failed: [`FileError::Full`] when its filesystem is.
    fn write(dir: &impl std::os::fd::AsFd, name: &str, e: std::io::Error) -> FileError {
        if e.raw_os_error() != Some(libc::ENOSPC) {
            return FileError::io(&format!("write {name:?}"), e);
        }
        let free = rustix::fs::fstatvfs(dir).map(|st| st.f_bavail * st.f_frsize).unwrap_or(0);
        FileError::Full { name: name.to_string(), free }
    }
}

/// Checks `name` as a client gives it (see [`browserpool_pool::filenames`]).
pub fn judge_name(name: &str) -> Result<(), FileError> {
    match browserpool_pool::filenames::name_fault(name) {
        None => Ok(()),
        Some(why) => Err(FileError::BadName { name: browserpool_pool::filenames::shown(name), why }),
    }
}

/// One file of the session.
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    pub name: String,
    pub size: u64,
    pub mime_type: &'static str,
    /// Hex SHA-256 of its content.
    pub sha256: String,
    /// When it was last written, in ms since the epoch.
    pub modified_ms: i64,
}

/// The media type of a file, by its name's extension.
pub fn mime_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" => "text/plain",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "xml" => "application/xml",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "webm" => "video/webm",
        "mp4" => "video/mp4",
        _ => "application/octet-stream",
    }
}

fn modified_ms(st: &rustix::fs::Stat) -> i64 {
    st.st_mtime * 1000 + (st.st_mtime_nsec / 1_000_000) as i64
}

/// A session's files directory, opened once: every operation is relative to it.
#[derive(Debug)]
pub struct SessionDir {
    fd: OwnedFd,
    /// The directory's owner (the worker's uid), who gets the files the server writes.
    owner: (u32, u32),
}

/// How a file of the directory is opened: never through a link, never blocking on a FIFO.
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

impl SessionDir {
    /// Opens the directory at `path`, which must be a directory and not a link.
    pub fn open(path: &Path) -> Result<SessionDir, FileError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| FileError::io("open the directory", e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| FileError::io("stat the directory", e))?;
        Ok(SessionDir { fd, owner: (st.st_uid, st.st_gid) })
    }

    /// The same directory, on a descriptor of its own (for a task that outlives the borrow).
    pub fn try_clone(&self) -> Result<SessionDir, FileError> {
        let fd = self.fd.try_clone().map_err(|e| FileError::io("dup", e))?;
        Ok(SessionDir { fd, owner: self.owner })
    }

    /// Every file, by name (at most [`MAX_LISTED`]), with its size, type and SHA-256. Entries
    /// that are not files (see the module's doc) and names a client could not ask for are left
    /// out.
    pub fn list(&self) -> Result<Vec<FileInfo>, FileError> {
        let names = self.names()?;
        let mut files = Vec::new();
        for name in names {
            match self.open_file(&name) {
                Ok((_, info)) => files.push(info),
                // Gone meanwhile, or a file with other links: not one of the session's.
                Err(FileError::NotFound(_) | FileError::NotAFile(_)) => continue,
                Err(e) => return Err(e),
            }
            if files.len() == MAX_LISTED {
                break;
            }
        }
        Ok(files)
    }

    /// The names a listing considers, sorted.
    fn names(&self) -> Result<Vec<String>, FileError> {
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(|e| FileError::io("read the directory", e))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| FileError::io("read the directory", e))?;
            let Ok(name) = entry.file_name().to_str() else { continue };
            if judge_name(name).is_ok() && entry.file_type() == FileType::RegularFile {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Every file [`SessionDir::list`] lists, with its size alone (nothing is read).
    pub fn sizes(&self) -> Result<Vec<(String, u64)>, FileError> {
        let mut sizes = Vec::new();
        for name in self.names()? {
            match self.open_plain(&name) {
                Ok((_, st)) => sizes.push((name, st.st_size as u64)),
                Err(FileError::NotFound(_) | FileError::NotAFile(_)) => continue,
                Err(e) => return Err(e),
            }
            if sizes.len() == MAX_LISTED {
                break;
            }
        }
        Ok(sizes)
    }

    /// Opens `name` to read if it is a plain file with one link (never through a link).
    fn open_plain(&self, name: &str) -> Result<(OwnedFd, rustix::fs::Stat), FileError> {
        let fd = match rustix::fs::openat(&self.fd, name, read_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Err(FileError::NotFound(name.into())),
            // O_NOFOLLOW on a link.
            Err(rustix::io::Errno::LOOP) => return Err(FileError::NotAFile(name.into())),
            Err(e) => return Err(FileError::io(&format!("open {name:?}"), e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| FileError::io("stat", e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_nlink != 1 {
            return Err(FileError::NotAFile(name.into()));
        }
        Ok((fd, st))
    }

    /// Opens file `name` to read, with what is known of it (its hash read through the same
    /// descriptor, which is rewound).
    pub fn open_file(&self, name: &str) -> Result<(File, FileInfo), FileError> {
        judge_name(name)?;
        self.open_as(name, name)
    }

    /// Opens the directory's own file `name` (a dot name, see [`SessionDir::write_meta`]) as
    /// [`SessionDir::open_file`] does, calling it `shown`.
    pub fn open_meta(&self, name: &str, shown: &str) -> Result<(File, FileInfo), FileError> {
        self.open_as(name, shown)
    }

    fn open_as(&self, name: &str, shown: &str) -> Result<(File, FileInfo), FileError> {
        let (fd, st) = self.open_plain(name)?;
        let mut file = File::from(fd);
        let sha256 = match hashes::get(&st) {
            Some(known) => known,
            None => {
                let mut hasher = sha2::Sha256::new();
                std::io::copy(&mut file, &mut hasher).map_err(|e| FileError::io(&format!("read {name:?}"), e))?;
                use std::io::Seek;
                file.rewind().map_err(|e| FileError::io("rewind", e))?;
                let sha256 = hex::encode(hasher.finalize());
                // Kept only if the file did not change while it was read.
                if rustix::fs::fstat(&file).is_ok_and(|now| hashes::Key::of(&now) == hashes::Key::of(&st)) {
                    hashes::put(&st, &sha256);
                }
                sha256
            }
        };
        let info = FileInfo {
            name: shown.to_string(),
            size: st.st_size as u64,
            mime_type: mime_type(shown),
            sha256,
            modified_ms: modified_ms(&st),
        };
        Ok((file, info))
    }

    /// Starts writing file `name`, at most `limit` bytes. It appears under its name only once
    /// [`Upload::finish`]ed, in place of any file of that name; an upload dropped unfinished
    /// leaves nothing.
    pub fn create(self, name: &str, limit: u64) -> Result<Upload, FileError> {
        judge_name(name)?;
        let tmp = format!(".upload-{}", uuid::Uuid::new_v4().simple());
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, tmp.as_str(), flags, Mode::from_raw_mode(0o600))
            .map_err(|e| FileError::io("create", e))?;
        // Chromium (a file input) reads it as the worker's uid.
        let (uid, gid) = self.owner;
        let owned = rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)));
        let upload = Upload {
            dir: self,
            tmp,
            name: name.to_string(),
            file: Some(File::from(fd)),
            written: 0,
            limit,
            hasher: sha2::Sha256::new(),
        };
        owned.map_err(|e| FileError::io("chown", e))?;
        Ok(upload)
    }

    /// Moves file `name` into `to` (a rename, or a copy across file systems), once it is known
    /// to be a plain file; a file of that name there is replaced.
    pub fn move_to(&self, to: &SessionDir, name: &str) -> Result<(), FileError> {
        judge_name(name)?;
        let mut file = File::from(self.open_plain(name)?.0);
        match rustix::fs::renameat(&self.fd, name, &to.fd, name) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::XDEV) => {}
            Err(e) => return Err(FileError::io(&format!("move {name:?}"), e)),
        }
        let mut copy = to.try_clone()?.create(name, u64::MAX)?;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n =
                std::io::Read::read(&mut file, &mut buf).map_err(|e| FileError::io(&format!("copy {name:?}"), e))?;
            if n == 0 {
                break;
            }
            copy.write(&buf[..n])?;
        }
        copy.finish()?;
        self.delete(name)
    }

    /// Writes the directory's own file `name` (a dot name, never listed as a file), new.
    /// On failure (a full disk) nothing of it is left.
    pub fn write_meta(&self, name: &str, content: &[u8]) -> Result<(), FileError> {
        self.new_meta(name, |file| file.write_all(content), |e| FileError::io(&format!("write {name:?}"), e))
    }

    /// Creates the directory's own file `name` (owner only, new, not through a link) and has
    /// `fill` write it; when that fails (`failed` says how), nothing of it is left: a part
    /// would count against its tenant's cap.
    fn new_meta<T>(
        &self,
        name: &str,
        fill: impl FnOnce(&mut File) -> std::io::Result<T>,
        failed: impl FnOnce(std::io::Error) -> FileError,
    ) -> Result<T, FileError> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| FileError::io(&format!("create {name:?}"), e))?;
        fill(&mut File::from(fd)).map_err(|e| {
            let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
            failed(e)
        })
    }

    /// Writes the directory's own file `name` (a dot name) in place of what it held, whole or
    /// not at all.
    pub fn replace_meta(&self, name: &str, content: &[u8]) -> Result<(), FileError> {
        let tmp = format!("{name}.new-{}", uuid::Uuid::new_v4().simple());
        self.write_meta(&tmp, content)?;
        rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(|e| {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            FileError::io(&format!("rename {name:?}"), e)
        })
    }

    /// Whether the directory's own file `name` (a dot name) is there, a plain file.
    pub fn has_meta(&self, name: &str) -> bool {
        self.open_plain(name).is_ok()
    }

    /// The directory's own file `name` (a dot name) as text, if it is there (at most 64 KiB).
    pub fn read_meta(&self, name: &str) -> Option<String> {
        let (fd, _) = self.open_plain(name).ok()?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(File::from(fd), 64 << 10), &mut text).ok()?;
        Some(text)
    }

    /// Writes the directory's own file `name` (a dot name), new, from `from`: a plain file at
    /// `from_path`, opened without following a link. Returns its size.
    pub fn write_meta_from(&self, name: &str, from_path: &Path) -> Result<u64, FileError> {
        let fd = rustix::fs::open(from_path, read_flags(), Mode::empty())
            .map_err(|e| FileError::io(&format!("open {}", from_path.display()), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| FileError::io("stat", e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_nlink != 1 {
            return Err(FileError::NotAFile(from_path.display().to_string()));
        }
        self.new_meta(name, |to| std::io::copy(&mut File::from(fd), to), |e| FileError::write(&self.fd, name, e))
    }

    /// Deletes file `name` (a link of that name is removed, never followed).
    pub fn delete(&self, name: &str) -> Result<(), FileError> {
        judge_name(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::NOENT) => Err(FileError::NotFound(name.into())),
            Err(rustix::io::Errno::ISDIR) => Err(FileError::NotAFile(name.into())),
            Err(e) => Err(FileError::io(&format!("delete {name:?}"), e)),
        }
    }
}

/// A file being written into a session's directory, under a hidden name until finished.
pub struct Upload {
    dir: SessionDir,
    tmp: String,
    name: String,
    file: Option<File>,
    written: u64,
    limit: u64,
    hasher: sha2::Sha256,
}

impl Upload {
    /// Appends `chunk`; past the limit, the upload is refused (and leaves nothing).
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), FileError> {
        self.written += chunk.len() as u64;
        if self.written > self.limit {
            return Err(FileError::TooLarge { name: self.name.clone(), limit: self.limit });
        }
        self.hasher.update(chunk);
        let file = self.file.as_mut().ok_or_else(|| FileError::Io("the upload is closed".into()))?;
        file.write_all(chunk).map_err(|e| FileError::write(&self.dir.fd, &self.name, e))
    }

    /// Puts the file in place under its name and says what it is.
    pub fn finish(mut self) -> Result<FileInfo, FileError> {
        let file = self.file.take().ok_or_else(|| FileError::Io("the upload is closed".into()))?;
        file.sync_data().map_err(|e| FileError::write(&self.dir.fd, &self.name, e))?;
        let st = rustix::fs::fstat(&file).map_err(|e| FileError::io("stat", e))?;
        drop(file);
        rustix::fs::renameat(&self.dir.fd, self.tmp.as_str(), &self.dir.fd, self.name.as_str())
            .map_err(|e| FileError::io("rename", e))?;
        self.tmp.clear();
        Ok(FileInfo {
            mime_type: mime_type(&self.name),
            name: std::mem::take(&mut self.name),
            size: self.written,
            sha256: hex::encode(std::mem::take(&mut self.hasher).finalize()),
            modified_ms: modified_ms(&st),
        })
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            let _ = rustix::fs::unlinkat(&self.dir.fd, self.tmp.as_str(), AtFlags::empty());
        }
    }
}

/// The SHA-256 of files already read, so listing a session again (every `Get`) reads only what
/// changed: keyed by what a write or a rename changes (device, inode, size, modification and
/// change times), and only for files unchanged for [`hashes::SETTLED`], since a write within
/// the clock's tick would keep the times.
mod hashes {
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// How long a file must have been left alone before its hash is kept.
    pub const SETTLED: std::time::Duration = std::time::Duration::from_secs(1);
    /// Most hashes kept; past it the table starts again.
    const MAX: usize = 8192;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Key([i64; 7]);

    impl Key {
        pub fn of(st: &rustix::fs::Stat) -> Key {
            Key([
                st.st_dev as i64,
                st.st_ino as i64,
                st.st_size,
                st.st_mtime,
                st.st_mtime_nsec as i64,
                st.st_ctime,
                st.st_ctime_nsec as i64,
            ])
        }
    }

    static KNOWN: Mutex<Option<HashMap<Key, String>>> = Mutex::new(None);

    pub fn get(st: &rustix::fs::Stat) -> Option<String> {
        KNOWN.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(&Key::of(st)).cloned()
    }

    pub fn put(st: &rustix::fs::Stat, sha256: &str) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let changed = st.st_mtime.max(st.st_ctime);
        if now.as_secs() as i64 - changed < SETTLED.as_secs() as i64 + 1 {
            return;
        }
        let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
        let table = known.get_or_insert_with(HashMap::new);
        if table.len() >= MAX {
            table.clear();
        }
        table.insert(Key::of(st), sha256.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn read_all(mut file: File) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        file.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn a_listing_reads_again_only_what_changed_and_never_serves_a_stale_hash() {
        let (t, d) = dir();
        let path = t.path().join("a.txt");
        std::fs::write(&path, b"first").unwrap();
        // A file just written is read at every listing; one left alone is read once.
        let fresh = d.list().unwrap()[0].sha256.clone();
        let st = rustix::fs::stat(&path).unwrap();
        assert_eq!(hashes::get(&st), None, "a file written just now is not kept");
        std::thread::sleep(hashes::SETTLED * 2 + std::time::Duration::from_millis(200));
        assert_eq!(d.list().unwrap()[0].sha256, fresh);
        assert_eq!(hashes::get(&st).as_deref(), Some(fresh.as_str()), "kept once settled");
        // Rewritten in place to the same size: read again.
        std::fs::write(&path, b"after").unwrap();
        let listed = d.list().unwrap();
        assert_eq!(listed[0].sha256, hex::encode(sha2::Sha256::digest(b"after")));
        assert_ne!(listed[0].sha256, fresh);
    }

    fn dir() -> (tempfile::TempDir, SessionDir) {
        let t = tempfile::tempdir().unwrap();
        let d = SessionDir::open(t.path()).unwrap();
        (t, d)
    }

    fn put(d: &Path, name: &str, body: &[u8]) -> FileInfo {
        let mut up = SessionDir::open(d).unwrap().create(name, 1 << 20).unwrap();
        up.write(body).unwrap();
        up.finish().unwrap()
    }

    #[test]
    fn a_file_goes_in_and_comes_out_with_its_hash() {
        let (t, d) = dir();
        let info = put(t.path(), "report.csv", b"a,b\n1,2\n");
        assert_eq!(info.size, 8);
        assert_eq!(info.mime_type, "text/csv");
        assert_eq!(info.sha256, hex::encode(sha2::Sha256::digest(b"a,b\n1,2\n")));
        let (file, got) = d.open_file("report.csv").unwrap();
        assert_eq!(read_all(file).unwrap(), b"a,b\n1,2\n");
        assert_eq!(got.sha256, info.sha256);
        assert_eq!(d.list().unwrap().iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["report.csv"]);
        // A second upload of the name replaces it.
        put(t.path(), "report.csv", b"new");
        assert_eq!(read_all(d.open_file("report.csv").unwrap().0).unwrap(), b"new");
        d.delete("report.csv").unwrap();
        assert_eq!(d.delete("report.csv"), Err(FileError::NotFound("report.csv".into())));
        assert!(d.list().unwrap().is_empty());
    }

    #[test]
    fn an_upload_past_the_limit_or_dropped_leaves_nothing() {
        let (t, d) = dir();
        let mut up = SessionDir::open(t.path()).unwrap().create("big.bin", 10).unwrap();
        up.write(b"12345").unwrap();
        let e = up.write(b"678901").unwrap_err();
        assert_eq!(e, FileError::TooLarge { name: "big.bin".into(), limit: 10 });
        drop(up);
        let left: Vec<_> = std::fs::read_dir(t.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(d.list().unwrap().is_empty());
    }

    #[test]
    fn links_directories_and_fifos_planted_by_a_page_are_never_opened() {
        let (t, d) = dir();
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(secret.path(), b"the server's key").unwrap();
        symlink(secret.path(), t.path().join("key.txt")).unwrap();
        std::fs::hard_link(secret.path(), t.path().join("hard.txt")).unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        rustix::fs::mknodat(&d.fd, "pipe", FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        std::fs::write(t.path().join("ok.txt"), b"fine").unwrap();
        assert_eq!(d.list().unwrap().iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["ok.txt"]);
        for name in ["key.txt", "hard.txt", "sub", "pipe"] {
            assert_eq!(d.open_file(name).unwrap_err(), FileError::NotAFile(name.into()), "{name}");
        }
        // An upload in place of the link replaces the link, and the target is untouched.
        put(t.path(), "key.txt", b"mine");
        assert_eq!(std::fs::read(secret.path()).unwrap(), b"the server's key");
        // Deleting removes the link itself.
        d.delete("hard.txt").unwrap();
        assert!(secret.path().exists());
        // The directory itself must not be a link.
        let link = t.path().join("dir-link");
        symlink(t.path(), &link).unwrap();
        assert!(SessionDir::open(&link).is_err());
    }

    #[test]
    fn names_are_judged() {
        for (name, why) in [
            ("", "is empty"),
            ("../etc/passwd", "has a path separator"),
            ("/etc/passwd", "has a path separator"),
            ("a\\b", "has a path separator"),
            ("..", "starts with a dot"),
            (".", "starts with a dot"),
            (".bashrc", "starts with a dot"),
            ("a\nb", "has a control character"),
            ("a\0b", "has a control character"),
            ("a\u{1b}[31m", "has a control character"),
            ("x.pdf.crdownload", "is a download still in progress"),
        ] {
            match judge_name(name) {
                Err(FileError::BadName { why: got, .. }) => assert!(got.starts_with(why), "{name:?}: {got}"),
                other => panic!("{name:?}: {other:?}"),
            }
        }
        assert!(judge_name(&"a".repeat(256)).is_err());
        for name in ["report.pdf", "a b (1).txt", "été.csv", &"a".repeat(255)] {
            judge_name(name).unwrap();
        }
    }

    /// Random names, printable or not, with separators, dots and NULs: none that is accepted
    /// reaches outside the directory, and every one that is refused leaves it unchanged.
    #[test]
    fn no_name_reaches_outside_the_directory() {
        let outer = tempfile::tempdir().unwrap();
        let inner = outer.path().join("files");
        std::fs::create_dir(&inner).unwrap();
        let alphabet: Vec<char> = "ab./\\\0\n.é ~*%:".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..5000 {
            let len = (next() % 12) as usize;
            let name: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
            let d = SessionDir::open(&inner).unwrap();
            if let Ok(mut up) = d.create(&name, 100) {
                up.write(b"x").unwrap();
                up.finish().unwrap();
                let d = SessionDir::open(&inner).unwrap();
                d.open_file(&name).unwrap();
                d.delete(&name).unwrap();
            }
            let outside: Vec<_> = std::fs::read_dir(outer.path()).unwrap().flatten().map(|e| e.file_name()).collect();
            assert_eq!(outside, ["files"], "after {name:?}");
            let left: Vec<_> = std::fs::read_dir(&inner).unwrap().flatten().map(|e| e.file_name()).collect();
            assert!(left.is_empty(), "after {name:?}: {left:?}");
        }
    }
}
