//! A worker's directories: its profile (with the preferences every worker gets), its home, its
//! temp dir and, when the profiles are not on the disk, its HTTP cache, made fresh for each
//! launch, owner only, and owned by the worker's uid. The profile is a tmpfs of its own, of a
//! fixed size, where the server may mount one ([`mount_tmpfs`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Written into every profile before launch: no preconnect or DNS prefetch (a page must not
/// open connections it did not ask for), and WebRTC only through the proxy, never over
/// non-proxied UDP, so ICE cannot reach an address the egress proxy would refuse.
const PREFERENCES: &str = r#"{"net":{"network_prediction_options":2},"webrtc":{"ip_handling_policy":"disable_non_proxied_udp","multiple_routes_enabled":false,"nonproxied_udp_enabled":false}}"#;

/// The directories of the worker on one port.
pub(super) struct Dirs {
    /// `<profiles_dir>/port-<N>`, Chromium's user-data-dir (`chrome`) and its home inside.
    pub(super) profile: PathBuf,
    pub(super) home: PathBuf,
    default_profile: PathBuf,
    pub(super) tmp: PathBuf,
    /// `<disk_dir>/cache-<N>`, Chromium's HTTP cache, when the profile is elsewhere (a tmpfs):
    /// what a page's loads grow it by stays on the disk, not in memory.
    pub(super) cache: Option<PathBuf>,
}

impl Dirs {
    /// Makes the directories of the worker on `port` under `profiles_dir` (its cache under
    /// `disk_dir`, when there is one apart), in place of any a crashed server left; on failure,
    /// removes what it made.
    /// With `size_mb`, the profile is a tmpfs of that size where the server may mount one.
    pub(super) async fn create(
        profiles_dir: &Path,
        disk_dir: Option<&Path>,
        port: u16,
        size_mb: u32,
    ) -> std::io::Result<Dirs> {
        let profile = profiles_dir.join(format!("port-{port}"));
        let tmp = worker_tmp(port);
        let cache = disk_dir.map(|dir| dir.join(format!("cache-{port}")));
        let all = || [Some(profile.clone()), Some(tmp.clone()), cache.clone()].into_iter().flatten().collect();
        // A profile left by a crashed server that held this port is stale: start clean.
        remove_all(all()).await;
        let made = Self::make(profile.clone(), tmp.clone(), cache.clone(), size_mb).await;
        if made.is_err() {
            remove_all(all()).await;
        }
        made
    }

    async fn make(profile: PathBuf, tmp: PathBuf, cache: Option<PathBuf>, size_mb: u32) -> std::io::Result<Dirs> {
        // Owner only: profiles hold a tenant's cookies and storage, the temp dir Chromium's sockets.
        let private = || {
            let mut b = tokio::fs::DirBuilder::new();
            b.recursive(true).mode(0o700);
            b
        };
        if size_mb > 0 {
            private().create(&profile).await?;
            // In place (one system call): a boot dropped at shutdown leaves no mount made after it.
            mount_tmpfs(&profile, size_mb)?;
        }
        let home = profile.join("home");
        private().create(&home).await?;
        let default_profile = profile.join("chrome").join("Default");
        private().create(&default_profile).await?;
        tokio::fs::write(default_profile.join("Preferences"), PREFERENCES).await?;
        // Chromium puts unix sockets in TMPDIR, and a socket path must fit in 108 bytes, so the
        // worker's own temp dir is short and fixed per port (the port lock makes it ours).
        private().create(&tmp).await?;
        if let Some(cache) = &cache {
            private().create(cache).await?;
        }
        Ok(Dirs { profile, home, default_profile, tmp, cache })
    }

    /// The directories outside the profile: the temp dir and the cache, if any.
    pub(super) fn outside(&self) -> Vec<PathBuf> {
        [Some(self.tmp.clone()), self.cache.clone()].into_iter().flatten().collect()
    }

    /// Removes the directories: a launch that failed before its process owned them leaves
    /// nothing behind.
    pub(super) async fn remove(&self) {
        let mut all = self.outside();
        all.push(self.profile.clone());
        remove_all(all).await;
    }

    /// Everything the worker writes is its own uid's, and nobody else's (owner only, see
    /// [`Dirs::create`]).
    pub(super) fn chown(&self, uid: u32) -> std::io::Result<()> {
        let chrome = self.profile.join("chrome");
        let preferences = self.default_profile.join("Preferences");
        let mut all = vec![&self.profile, &self.home, &chrome, &self.default_profile, &preferences, &self.tmp];
        all.extend(&self.cache);
        for path in all {
            std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
        }
        Ok(())
    }
}

/// Deletes `dirs` on a blocking thread, each tried again while it fails (a file of a process
/// on its way out); one already gone is fine.
async fn remove_all(dirs: Vec<PathBuf>) {
    let _ = tokio::task::spawn_blocking(move || {
        for dir in dirs {
            remove_dir_retried(&dir);
        }
    })
    .await;
}

/// The worker temp dir of a port: `/tmp/browserpool-w<port>`.
pub(super) fn worker_tmp(port: u16) -> PathBuf {
    PathBuf::from(format!("/tmp/browserpool-w{port}"))
}

/// Why a profile could not be a tmpfs of its own, once a mount was refused: later launches
/// do not try again, and their profiles are plain directories of the filesystem under them.
static UNCAPPED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Whether profiles are capped: `Err` says why not, once a mount was refused.
pub fn profiles_capped() -> Result<(), String> {
    UNCAPPED.get().map_or(Ok(()), |why| Err(why.clone()))
}

/// Mounts a tmpfs of `size_mb` MiB on `dir` (no devices, no set-uid, nothing executable): a
/// worker's profile, or a session's files directory (its downloads). Whatever a worker's
/// pages store (IndexedDB, the origin-private file system, the Cache API, blobs, the HTTP
/// cache) or download ends at its size with a full disk, however it is written, and what it
/// holds is memory, counted in the worker's memory limit where it has a cgroup. A server that
/// may not mount (a root server whose mounts a security module refuses; one without
/// `CAP_SYS_ADMIN` stops at start for its network namespaces) warns once and leaves them on
/// the filesystem under them from then on; any other failure is the caller's (the
/// launch fails rather than run a worker without its fence).
pub(crate) fn mount_tmpfs(dir: &Path, size_mb: u32) -> std::io::Result<()> {
    if UNCAPPED.get().is_some() {
        return Ok(());
    }
    match try_mount(dir, size_mb) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
            let why = format!("mount a tmpfs on {}: {e}", dir.display());
            if UNCAPPED.set(why.clone()).is_ok() {
                tracing::warn!(reason = %why, "workers' profiles and downloads are not capped in size: a page can store as much as Chromium's quota lets it (most of the disk the profiles are on); let the server mount (CAP_SYS_ADMIN, and no security module refusing mount), or pass --worker-disk-mb 0 to say so");
            }
            Ok(())
        }
        Err(e) => Err(std::io::Error::new(e.kind(), format!("mount a tmpfs on {}: {e}", dir.display()))),
        Ok(()) => Ok(()),
    }
}

/// Mounts a tmpfs once in `dir` (a directory of this server's) and takes it off, at start: a
/// server that may not mount says so then, and reports no tmpfs in its status, rather than at
/// its first boot.
pub(crate) fn check_mounts(dir: &Path) {
    let probe = dir.join(format!(".mount-check-{}", std::process::id()));
    if let Err(e) = std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&probe) {
        tracing::warn!(dir = %probe.display(), error = %e, "could not check whether this server may mount");
        return;
    }
    if let Err(e) = mount_tmpfs(&probe, 1) {
        tracing::warn!(error = %e, "a tmpfs could not be mounted: workers will fail to boot while that lasts");
    }
    unmount_under(&probe);
    let _ = std::fs::remove_dir(&probe);
}

/// The mount itself (see [`mount_tmpfs`]), on a directory of this process's uid that is not a
/// link (its parent is this server's: nobody else can swap it in between).
fn try_mount(dir: &Path, size_mb: u32) -> std::io::Result<()> {
    if !crate::sandbox::own_dir(&std::fs::symlink_metadata(dir)?) {
        return Err(std::io::Error::other("not a directory of this server's own"));
    }
    tmpfs_mount(dir, 0, &format!("size={size_mb}m,mode=0700"))
}

/// `mount(2)` of a tmpfs on `dir` with `options`: a new one, or with `MS_REMOUNT` in
/// `extra_flags` the one there. Always no devices, no set-uid, nothing executable (a remount
/// sets the flags to these too).
fn tmpfs_mount(dir: &Path, extra_flags: libc::c_ulong, options: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let options = std::ffi::CString::new(options)?;
    let flags = extra_flags | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: every pointer is to a NUL-terminated string that outlives the call.
    let mounted =
        unsafe { libc::mount(c"tmpfs".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), flags, options.as_ptr().cast()) };
    if mounted != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Resizes the tmpfs on `dir` (mounted by [`mount_tmpfs`]) to `size_mb` MiB, its flags kept:
/// a lease's memory limit leaves less room than a spare's. Nothing where mounts were refused.
pub(crate) fn resize_tmpfs(dir: &Path, size_mb: u32) -> std::io::Result<()> {
    if UNCAPPED.get().is_some() {
        return Ok(());
    }
    tmpfs_mount(dir, libc::MS_REMOUNT, &format!("size={size_mb}m"))
}

/// Unmounts every mount at or below `dir` (a worker's profile tmpfs, a session's files
/// directory, or the profiles dir of a server that was killed), detached, so its removal can
/// go on; not following a link.
pub(crate) fn unmount_under(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    // As `/proc/self/mountinfo` names mounts: its parent resolved (a temp dir behind a link),
    // its own name not followed.
    let resolved = match (dir.parent().map(Path::canonicalize), dir.file_name()) {
        (Some(Ok(parent)), Some(name)) => parent.join(name),
        _ => dir.to_path_buf(),
    };
    for point in crate::procfs::mounts_under(&resolved) {
        let Ok(target) = std::ffi::CString::new(point.as_os_str().as_bytes()) else { continue };
        // SAFETY: a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } != 0 {
            let e = std::io::Error::last_os_error();
            tracing::warn!(dir = %point.display(), error = %e, "could not unmount a worker's profile");
        }
    }
}

/// Deletes a worker's directory, retrying a failed delete (a file still held open by a
/// process on its way out, a transient I/O error) for up to [`REMOVE_TRIES`] attempts, and
/// counts every retry in [`CLEANUP_RETRIES`].
pub(super) fn remove_dir_retried(dir: &Path) {
    unmount_under(dir);
    for attempt in 1..=REMOVE_TRIES {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) if attempt == REMOVE_TRIES => {
                tracing::error!(dir = %dir.display(), error = %e, attempts = attempt, "could not remove worker directory");
            }
            Err(e) => {
                CLEANUP_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(dir = %dir.display(), error = %e, attempt, "could not remove worker directory; retrying");
                std::thread::sleep(Duration::from_millis(100 * attempt as u64));
            }
        }
    }
}

/// How many times a worker directory's delete is tried (about 4.5 s of waits in all).
const REMOVE_TRIES: u32 = 10;

/// Worker directory deletes that failed and were tried again, since the process started.
pub static CLEANUP_RETRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    /// A temp dir to mount in, when this test runs as root (only root mounts); `None`, said, else.
    fn root_tempdir() -> Option<tempfile::TempDir> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP: only root mounts");
            return None;
        }
        Some(tempfile::tempdir().unwrap())
    }

    /// `<top>/port-1`, a tmpfs of `mb` MiB.
    fn mounted(top: &Path, mb: u32) -> PathBuf {
        let dir = top.join("port-1");
        std::fs::create_dir(&dir).unwrap();
        try_mount(&dir, mb).unwrap();
        dir
    }

    /// The filesystem `dir` is on.
    fn statvfs(dir: &Path) -> libc::statvfs {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
        st
    }

    /// The size of the filesystem `dir` is on, in bytes.
    fn total(dir: &Path) -> u64 {
        let st = statvfs(dir);
        st.f_blocks * st.f_frsize
    }

    /// As root: a tmpfs of the size asked, that refuses a write past it (ENOSPC); unmounted
    /// with everything under it (a mount inside it too), and removable then.
    #[test]
    fn a_tmpfs_holds_its_size_and_comes_off_with_what_is_mounted_under_it() {
        let Some(top) = root_tempdir() else { return };
        let dir = mounted(top.path(), 2);
        assert_eq!(total(&dir), 2 << 20);
        let inner = dir.join("inner");
        std::fs::create_dir(&inner).unwrap();
        try_mount(&inner, 1).unwrap();
        let full = std::fs::write(dir.join("big"), vec![0u8; 3 << 20]).unwrap_err();
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
        assert_eq!(crate::procfs::mounts_under(top.path()), vec![inner.clone(), dir.clone()]);

        // A link named like the dir is not followed: nothing it points at is unmounted.
        let link = top.path().join("port-2");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        unmount_under(&link);
        assert_eq!(crate::procfs::mounts_under(top.path()).len(), 2);

        unmount_under(&dir);
        assert!(crate::procfs::mounts_under(top.path()).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// As root: a mounted tmpfs resized (a lease's memory limit) holds the new size, keeps its
    /// flags, and cannot be made smaller than what it holds.
    #[test]
    fn a_tmpfs_resized_holds_its_new_size_and_keeps_its_flags() {
        let Some(top) = root_tempdir() else { return };
        let dir = mounted(top.path(), 8);
        std::fs::write(dir.join("held"), vec![1u8; 3 << 20]).unwrap();
        resize_tmpfs(&dir, 4).unwrap();
        assert_eq!(total(&dir), 4 << 20);
        let full = std::fs::write(dir.join("more"), vec![0u8; 2 << 20]).unwrap_err();
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
        let below = resize_tmpfs(&dir, 2).unwrap_err();
        assert_eq!(below.raw_os_error(), Some(libc::EINVAL), "{below}");
        assert_eq!(total(&dir), 4 << 20);
        let (flags, kept) = (statvfs(&dir).f_flag, libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOEXEC);
        assert_eq!(flags & kept, kept, "flags {flags:#x}");
        unmount_under(&dir);
        // Not a mount point: nothing to resize.
        assert_eq!(resize_tmpfs(&dir, 4).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    }

    /// A thread without `CAP_SYS_ADMIN` (capabilities are a thread's own) is refused, as a
    /// mount a security module denies is: the refusal is the kind `mount_tmpfs` takes for "not
    /// allowed here", not a failure of the launch.
    #[test]
    fn a_mount_without_cap_sys_admin_is_refused_as_not_permitted() {
        let Some(top) = root_tempdir() else { return };
        let dir = top.path().to_path_buf();
        let refused = std::thread::spawn(move || {
            // Drops CAP_SYS_ADMIN (21) from this thread's effective set alone (capget/capset
            // with a version 3 header and two data words, as <linux/capability.h> has them).
            #[repr(C)]
            struct Header {
                version: u32,
                pid: i32,
            }
            #[repr(C)]
            #[derive(Clone, Copy)]
            struct Data {
                effective: u32,
                permitted: u32,
                inheritable: u32,
            }
            const CAP_SYS_ADMIN: u32 = 21;
            let mut header = Header { version: 0x2008_0522, pid: 0 };
            let mut caps = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
            // SAFETY: the structs are laid out as the kernel's, and outlive the calls.
            unsafe {
                assert_eq!(libc::syscall(libc::SYS_capget, &mut header, caps.as_mut_ptr()), 0);
                caps[(CAP_SYS_ADMIN / 32) as usize].effective &= !(1 << (CAP_SYS_ADMIN % 32));
                assert_eq!(libc::syscall(libc::SYS_capset, &mut header, caps.as_ptr()), 0);
            }
            try_mount(&dir, 1).unwrap_err()
        })
        .join()
        .unwrap();
        assert!(matches!(refused.raw_os_error(), Some(libc::EPERM | libc::EACCES)), "{refused}");
        assert!(crate::procfs::mounts_under(top.path()).is_empty());
    }
}
