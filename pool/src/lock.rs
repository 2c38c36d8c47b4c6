//! Port lock files shared by every browserpool server on a host.
//!
//! One file per CDP port, `port-<N>.lock`, holding the owner server's PID. Whoever holds the
//! lock owns the port and the matching profile directory. A lock whose PID is no longer alive is
//! stale and taken over. Check-and-create runs under an exclusive `flock` on a guard file so
//! two servers reclaiming the same stale lock cannot both win.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// An inclusive range of CDP ports, written `9300-9399`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub start: u16,
    /// Last port, inclusive.
    pub end: u16,
}

impl FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, b) = s.split_once('-').ok_or_else(|| format!("port range {s:?} is not START-END"))?;
        let start: u16 = a.trim().parse().map_err(|_| format!("bad start port {a:?}"))?;
        let end: u16 = b.trim().parse().map_err(|_| format!("bad end port {b:?}"))?;
        if start == 0 || end < start {
            return Err(format!("port range {s:?} is empty or starts at 0"));
        }
        Ok(PortRange { start, end })
    }
}

impl PortRange {
    /// Its ports, first to last.
    pub fn ports(self) -> std::ops::RangeInclusive<u16> {
        self.start..=self.end
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// A held port lock; dropping it removes the file (only if it still names this process).
#[derive(Debug)]
pub struct PortLock {
    port: u16,
    path: PathBuf,
    pid: u32,
}

impl PortLock {
    /// Tries to take the lock for `port` in `dir` on behalf of process `pid`.
    ///
    /// Returns `Ok(None)` when a live process holds it. A lock naming a dead PID, or an
    /// unreadable one, is reclaimed.
    pub fn try_acquire(dir: &Path, port: u16, pid: u32) -> io::Result<Option<PortLock>> {
        fs::create_dir_all(dir)?;
        let _guard = Guard::lock(dir)?;
        let path = dir.join(format!("port-{port}.lock"));
        match read_pid(&path)? {
            Some(owner) if owner == pid || pid_alive(owner) => return Ok(None),
            Some(owner) => {
                tracing::info!(port, stale_pid = owner, "reclaiming stale port lock");
                fs::remove_file(&path)?;
            }
            None if path.exists() => {
                tracing::warn!(port, "reclaiming unreadable port lock");
                fs::remove_file(&path)?;
            }
            None => {}
        }
        let mut file = OpenOptions::new().write(true).create_new(true).open(&path)?;
        writeln!(file, "{pid}")?;
        file.sync_all()?;
        Ok(Some(PortLock { port, path, pid }))
    }

    /// The locked port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PortLock {
    fn drop(&mut self) {
        // Only remove a file that still names us: never delete another server's lock.
        if let Ok(Some(owner)) = read_pid(&self.path) {
            if owner == self.pid {
                let _ = fs::remove_file(&self.path);
            }
        }
    }
}

/// Reads the PID in a lock file; `None` when the file is missing or does not hold a PID.
pub fn read_pid(path: &Path) -> io::Result<Option<u32>> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_string(&mut text)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(text.trim().parse().ok())
}

/// Whether a process with this PID exists (signal 0 probes without sending anything).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// An I/O error about `path` in words for an operator: "permission denied" said plainly,
/// with who owns `path` (or the nearest directory above it that exists, where it would be
/// made) and who this process runs as; any other error as the OS words it, without its
/// number.
pub fn explain_io(e: &io::Error, path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    if e.kind() == io::ErrorKind::PermissionDenied {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let owner = path.ancestors().find_map(|p| fs::metadata(p).ok().map(|m| (p, m)));
        return match owner {
            Some((p, m)) => format!(
                "permission denied: {} is owned by uid {} with mode {:o}, and this server runs as uid {uid}",
                p.display(),
                m.uid(),
                m.mode() & 0o7777
            ),
            None => format!("permission denied (this server runs as uid {uid})"),
        };
    }
    let text = e.to_string();
    let text = match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => &text[..at],
        _ => &text,
    };
    let mut chars = text.chars();
    chars.next().map(|first| first.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

/// Checks that this server may take port locks in `dir` (created if missing): a lock dir it
/// may not write would fail every worker's boot, which is better said at start.
pub fn check_lock_dir(dir: &Path) -> io::Result<()> {
    let named = |e: io::Error| {
        io::Error::new(e.kind(), format!("lock dir {} (--lock-dir): {}", dir.display(), explain_io(&e, dir)))
    };
    fs::create_dir_all(dir).map_err(named)?;
    Guard::lock(dir).map_err(named)?;
    Ok(())
}

/// Exclusive flock on `<dir>/.guard`, released on drop (closing the fd releases it).
struct Guard {
    _file: File,
}

/// One server per data dir: an exclusive `flock` on `<dir>/server.lock`, held for the
/// server's life and let go by the kernel when the process dies, however it dies. Holding it
/// proves that whatever a previous server left in the dir (Chromium processes, profiles,
/// sessions) has no live owner.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock, or says which process holds it, or why it cannot be taken.
    pub fn acquire(dir: &Path) -> io::Result<DirLock> {
        let path = dir.join("server.lock");
        let mut file =
            OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path).map_err(|e| {
                let why = explain_io(&e, &path);
                io::Error::new(e.kind(), format!("data dir {}: cannot open server.lock: {why}", dir.display()))
            })?;
        // SAFETY: flock on a valid fd owned by `file` for the lock's lifetime.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = io::Error::last_os_error();
            let mut owner = String::new();
            let _ = file.read_to_string(&mut owner);
            return Err(io::Error::new(
                err.kind(),
                format!("{}: another browserpool (pid {}) serves this data dir: {err}", path.display(), owner.trim()),
            ));
        }
        file.set_len(0)?;
        writeln!(file, "{}", std::process::id())?;
        Ok(DirLock { _file: file })
    }
}

impl Guard {
    fn lock(dir: &Path) -> io::Result<Guard> {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(".guard"))?;
        // Held only for a check-and-create; if someone sits on it longer, fail rather than hang.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // SAFETY: flock on a valid fd owned by `file` for the guard's lifetime.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(Guard { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) || std::time::Instant::now() > deadline {
                return Err(io::Error::new(err.kind(), format!("lock guard {}: {err}", dir.join(".guard").display())));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_range_parses_and_rejects() {
        assert_eq!("9300-9399".parse::<PortRange>().unwrap(), PortRange { start: 9300, end: 9399 });
        assert!("9399-9300".parse::<PortRange>().is_err());
        assert!("9300".parse::<PortRange>().is_err());
        assert!("0-10".parse::<PortRange>().is_err());
        assert!("a-b".parse::<PortRange>().is_err());
    }

    #[test]
    fn io_errors_are_said_plainly() {
        let missing = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(explain_io(&missing, Path::new("/nonexistent/x")), "no such file or directory");
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        // The nearest directory that exists is the one named.
        let said = explain_io(&denied, Path::new("/nonexistent/x"));
        assert!(said.starts_with("permission denied: / is owned by uid "), "{said}");
        assert!(said.contains(" with mode ") && said.contains(", and this server runs as uid "), "{said}");
    }

    fn dead_pid() -> u32 {
        // A child that has exited and been reaped: its PID is free.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn fresh_lock_is_taken_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let lock = PortLock::try_acquire(dir.path(), 9300, std::process::id()).unwrap().unwrap();
        assert_eq!(read_pid(&dir.path().join("port-9300.lock")).unwrap(), Some(std::process::id()));
        assert!(PortLock::try_acquire(dir.path(), 9300, std::process::id()).unwrap().is_none());
        drop(lock);
        assert!(!dir.path().join("port-9300.lock").exists());
    }

    #[test]
    fn stale_lock_of_dead_pid_is_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        assert!(!pid_alive(dead));
        fs::write(dir.path().join("port-9301.lock"), format!("{dead}\n")).unwrap();
        let lock = PortLock::try_acquire(dir.path(), 9301, std::process::id()).unwrap();
        assert!(lock.is_some(), "a lock left by a dead pid must be taken over");
        assert_eq!(read_pid(&dir.path().join("port-9301.lock")).unwrap(), Some(std::process::id()));
    }

    #[test]
    fn lock_of_live_process_is_respected() {
        let dir = tempfile::tempdir().unwrap();
        let mut other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        fs::write(dir.path().join("port-9302.lock"), format!("{}\n", other.id())).unwrap();
        let lock = PortLock::try_acquire(dir.path(), 9302, std::process::id()).unwrap();
        assert!(lock.is_none(), "a lock held by a live process must not be taken");
        assert_eq!(read_pid(&dir.path().join("port-9302.lock")).unwrap(), Some(other.id()));
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(PortLock::try_acquire(dir.path(), 9302, std::process::id()).unwrap().is_some());
    }

    #[test]
    fn garbage_lock_is_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("port-9303.lock"), "not a pid").unwrap();
        assert!(PortLock::try_acquire(dir.path(), 9303, std::process::id()).unwrap().is_some());
    }
}
