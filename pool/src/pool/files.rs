//! A session's files directory: where the downloads its pages make land, and where the server
//! puts the files a client uploads. One per lease, in `<disk_dir>/files/` (on the disk, whatever
//! holds the profiles; a tmpfs of `--worker-disk-mb` of its own where the server may mount
//! one, so downloads cannot fill the disk), outside the
//! worker's profile: the profile is the worker's uid's to rearrange, so a page could plant a
//! link there in place of the directory the server then reads or writes as root. Here the
//! parent is the server's; the directory itself is the worker's uid's (Chromium writes into
//! it), owner only, and goes with the lease.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use chromiumoxide::cdp::browser_protocol::browser::{
    BrowserContextId, SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};

use super::lease::{Held, Lease};
use super::PoolError;
use crate::outcome::Viewport;

/// The directory holding every session's files directory.
fn root(disk_dir: &Path) -> PathBuf {
    disk_dir.join("files")
}

/// Empties what a previous server on this data dir left (its sessions are gone) and makes the
/// root anew: the server's, passable by workers (0711), not listable. Returns it.
pub(super) fn reset_root(disk_dir: &Path) -> std::io::Result<PathBuf> {
    let root = root(disk_dir);
    // A killed server's sessions' files directories are still mounted.
    crate::launcher::unmount_under(&root);
    match std::fs::remove_dir_all(&root) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o711).create(disk_dir)?;
    std::fs::DirBuilder::new().mode(0o711).create(&root)?;
    Ok(root)
}

/// Removes the root once no session has files left (at the pool's stop).
pub(super) fn remove_root(disk_dir: &Path) {
    let _ = std::fs::remove_dir(root(disk_dir));
}

impl Lease {
    /// Gives the lease its files directory, owned as its worker's profile is, and sends the
    /// session's downloads there (`Browser.setDownloadBehavior`, for its context alone when it
    /// shares a browser). A browser that refuses is not usable (the lease, dropped, ends).
    pub(super) async fn with_files(mut self) -> Result<Lease, PoolError> {
        // A warm worker made its own while it booted: nothing left to do on the acquire's path.
        if let Some(Held::Own(w)) = self.held.as_mut() {
            if let Some(prepared) = w.files.take() {
                self.files = prepared.take();
                return Ok(self);
            }
        }
        let (name, profile, browser, context, cgroup) = match self.held() {
            Held::Own(w) => {
                (w.id.0.clone(), w.process.profile.clone(), w.driver.browser.clone(), None, w.process.cgroup.clone())
            }
            Held::Context(c) => (
                format!("{}-{}", c.browser.id.0, c.context),
                c.browser.profile.clone(),
                c.browser.browser.clone(),
                Some(c.context.clone()),
                c.browser.cgroup.clone(),
            ),
        };
        let launch = &self.pool.inner.cfg.launch;
        let dir = root(&launch.disk_dir).join(name);
        // Within the memory limit the browser has now (its tenant's).
        make_files_dir(&dir, &profile, launch.disk_mb(cgroup.map(|c| c.memory_limit())))?;
        self.files = dir.clone();
        send_downloads(self.driver(), &browser, context, dir, self.pool.inner.cfg.launch.cdp_timeout).await?;
        Ok(self)
    }

    /// Records the session when `record`: its frames go to a directory beside its files
    /// directory, the server's (or the encoder's uid's, see [`crate::video`]), out of the
    /// worker's reach.
    pub(super) async fn with_recording(mut self, record: bool, viewport: Viewport) -> Result<Lease, PoolError> {
        if !record {
            return Ok(self);
        }
        let mut dir = self.files.clone().into_os_string();
        dir.push(".rec");
        let dir = PathBuf::from(dir);
        // In place, as the files directory is (see `make_files_dir`): the lease owns it at once.
        crate::video::make_frames_dir(&dir)
            .map_err(|e| PoolError::Launch(format!("recording directory {}: {e}", dir.display())))?;
        self.recording = Some(dir.clone());
        self.driver().start_recording(dir, viewport).await;
        Ok(self)
    }

    /// Ends the session's recording, if it is recorded: its frames, which the caller now owns
    /// (it encodes them, then removes their directory). Call it before the release, while the
    /// browser is there to stop.
    pub async fn take_recording(&mut self) -> Option<crate::video::Frames> {
        let dir = self.recording.take()?;
        match self.driver().stop_recording().await {
            Some(frames) => Some(frames),
            None => {
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
                None
            }
        }
    }

    /// The session's files directory: its downloads, and the files uploaded to it. The
    /// directory is its worker's uid's: open what is in it without following links.
    pub fn files_dir(&self) -> &Path {
        &self.files
    }

    /// Takes the files directory out of the lease: its release then leaves it in place, and
    /// the caller removes it (after keeping what it wants of it).
    pub fn take_files_dir(&mut self) -> std::path::PathBuf {
        std::mem::take(&mut self.files)
    }

    /// Removes the files directory and the recording's frames, whichever the lease still
    /// holds (links in them are removed, never followed).
    pub(super) fn remove_files(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        let dirs: Vec<PathBuf> = [std::mem::take(&mut self.files)]
            .into_iter()
            .filter(|dir| !dir.as_os_str().is_empty())
            .chain(self.recording.take())
            .collect();
        (!dirs.is_empty()).then_some(move || remove_dirs(dirs))
    }
}

/// A files directory made ahead for a warm worker: removed when dropped (the worker killed,
/// dropped, or its boot abandoned), unless a lease took it.
pub(super) struct Prepared(Option<PathBuf>);

impl Prepared {
    /// The directory, now the lease's to remove.
    pub(super) fn take(mut self) -> PathBuf {
        self.0.take().unwrap_or_default()
    }

    /// The directory, while it is still the worker's.
    pub(super) fn dir(&self) -> Option<&Path> {
        self.0.as_deref()
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            remove_dirs(vec![dir]);
        }
    }
}

/// A warm worker's files directory, made while it boots and its downloads sent there, so
/// that leasing it has nothing of this left to do; `None` (the lease makes it, as for a
/// context) when that failed, which is logged.
pub(super) async fn prepare(
    launch: &crate::launcher::LaunchConfig,
    id: &str,
    profile: &Path,
    driver: &crate::driver::Driver,
) -> Option<Prepared> {
    let (timeout, dir) = (launch.cdp_timeout, root(&launch.disk_dir).join(id));
    let made = async {
        make_files_dir(&dir, profile, launch.disk_mb(None))?;
        let prepared = Prepared(Some(dir.clone()));
        send_downloads(driver, &driver.browser, None, dir.clone(), timeout).await?;
        Ok::<_, PoolError>(prepared)
    };
    match made.await {
        Ok(prepared) => Some(prepared),
        Err(e) => {
            tracing::warn!(worker = id, error = %e, "a warm worker's files directory could not be made ahead; its lease makes it");
            None
        }
    }
}

/// Makes a session's files directory `dir`, owned as `profile` is. In place, not on a
/// blocking thread (three metadata calls on a local disk): awaited there, a boot or acquire
/// dropped meanwhile left the directory made after it, owned by nothing, past the stop.
fn make_files_dir(dir: &Path, profile: &Path, size_mb: u32) -> Result<(), PoolError> {
    make_dir(dir, profile, size_mb).map_err(|e| PoolError::Launch(format!("files directory {}: {e}", dir.display())))
}

/// Points `driver` at `dir` and sends the downloads of `browser` (or of its `context`) there.
async fn send_downloads(
    driver: &crate::driver::Driver,
    browser: &chromiumoxide::Browser,
    context: Option<String>,
    dir: PathBuf,
    timeout: std::time::Duration,
) -> Result<(), PoolError> {
    driver.set_files_dir(dir.clone());
    let mut params = SetDownloadBehaviorParams::builder()
        .behavior(SetDownloadBehaviorBehavior::Allow)
        .download_path(dir.display().to_string())
        .events_enabled(true);
    if let Some(context) = context {
        params = params.browser_context_id(BrowserContextId::from(context));
    }
    let params = params.build().map_err(PoolError::Cdp)?;
    match tokio::time::timeout(timeout, browser.execute(params)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(PoolError::Cdp(format!("set download behavior: {e}"))),
        Err(_) => Err(PoolError::Cdp(format!("set download behavior: no answer within {timeout:?}"))),
    }
}

/// Removes `dirs` (links in them removed, never followed); a failure is logged.
pub(super) fn remove_dirs(dirs: Vec<PathBuf>) {
    for dir in dirs {
        if let Err(e) = remove_files_dir(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "a session's files directory could not be removed");
            }
        }
    }
}

/// Makes `dir`, owner only, owned as `profile` (the worker's uid) is; with `size_mb`, a tmpfs
/// of that size where the server may mount one.
fn make_dir(dir: &Path, profile: &Path, size_mb: u32) -> std::io::Result<()> {
    let owner = std::fs::symlink_metadata(profile)?;
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    let made = match size_mb {
        0 => Ok(()),
        _ => crate::launcher::mount_tmpfs(dir, size_mb),
    };
    let owned = made.and_then(|()| std::os::unix::fs::chown(dir, Some(owner.uid()), Some(owner.gid())));
    if owned.is_err() {
        // Nobody owns it yet: nothing else would remove it.
        let _ = remove_files_dir(dir);
    }
    owned
}

/// Removes a session's files directory (unmounted first: it may be a tmpfs of its own), links
/// in it removed, never followed.
pub fn remove_files_dir(dir: &Path) -> std::io::Result<()> {
    crate::launcher::unmount_under(dir);
    std::fs::remove_dir_all(dir)
}
