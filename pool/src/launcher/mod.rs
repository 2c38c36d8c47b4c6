//! Finding and launching Chromium: one process group, one profile and one CDP port per worker.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chromiumoxide::Browser;

use crate::cgroup::Cgroups;
use crate::egress::Egress;
use crate::error::PoolError;
use crate::lock::PortLock;
use crate::lock::PortRange;
use crate::netns::NetNs;
use crate::sandbox::{kill_uid, UidRange};
use crate::task::OwnedTask;
use chrome::command;
use cleanup::kill_strays;
use devtools::{connect_cdp, drain_stderr, endpoint, through_gate};
use profile::Dirs;
use spawn::{create_cgroup, spawn};

mod chrome;
mod cleanup;
mod devtools;
mod group;
mod process;
mod profile;
mod spawn;

pub(crate) use chrome::search_path;
pub use chrome::{find_chrome, CHROME_FLAGS, CHROME_NAMES, DISABLED_FEATURES};
pub use cleanup::{claim_profiles, reap_abandoned, reap_orphans, unclaim_profiles, PROFILES_PREFIX};
pub(crate) use group::Spawned;
pub use group::{group_memory, idle_boots, GroupMemory};
pub(crate) use process::Process;
pub(crate) use profile::{check_mounts, mount_tmpfs, resize_tmpfs, unmount_under};
pub use profile::{profiles_capped, CLEANUP_RETRIES};

/// How workers are launched.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    /// The Chromium executable.
    pub chrome: PathBuf,
    /// Profiles live under `<profiles_dir>/port-<N>`.
    pub profiles_dir: PathBuf,
    /// The directory on the disk for what a session's pages can grow: its files (`files/`)
    /// and, when `profiles_dir` is another directory (a tmpfs), each worker's HTTP cache
    /// (`cache-<N>`). Usually `profiles_dir` itself.
    pub disk_dir: PathBuf,
    /// Host-wide directory of port lock files, shared by every server on the host.
    pub lock_dir: PathBuf,
    /// CDP ports to use.
    pub ports: PortRange,
    /// How long Chromium may take to print its DevTools endpoint.
    pub launch_timeout: Duration,
    /// Deadline for each CDP call made by the pool itself.
    pub cdp_timeout: Duration,
    /// Each worker's own uid (and gid), by its port; `None` runs workers as the server's uid
    /// (a server that is not root cannot switch).
    pub worker_uids: Option<UidRange>,
    /// Launch Chromium with `--no-sandbox` (`--allow-unsandboxed`): for hosts where its
    /// sandbox cannot start; a renderer exploit then runs with the worker's uid's rights.
    pub allow_unsandboxed: bool,
    /// Where each worker gets a cgroup of its own (memory, tasks, CPU weight); `None` where
    /// the server may not manage cgroups.
    pub cgroups: Option<std::sync::Arc<Cgroups>>,
    /// The most MiB of the tmpfs each worker's profile is, and each session's files directory
    /// (`--worker-disk-mb`): what its pages can store, and download; 0 leaves both on the
    /// filesystem under them. See [`LaunchConfig::disk_mb`].
    pub profile_mb: u32,
}

/// The least MiB [`LaunchConfig::disk_mb`] gives (`--worker-disk-mb`'s least).
const DISK_MB_MIN: u32 = 16;

impl LaunchConfig {
    /// The MiB of a worker's profile tmpfs, and of each of its sessions' files directories,
    /// under a memory limit of `limit` bytes (`None`: a spare's, the server's default where
    /// workers have cgroups): `profile_mb`, or a quarter of the limit when less. Both are
    /// memory counted in that limit, so what a page stores and downloads, at most half of it
    /// together, ends in a quota error or a full disk before its tab is killed at the limit.
    /// 0 when profiles are not tmpfs.
    pub fn disk_mb(&self, limit: Option<u64>) -> u32 {
        let limit = limit.or_else(|| self.cgroups.as_ref().map(|c| c.default_memory));
        match (self.profile_mb, limit) {
            (0, _) => 0,
            (mb, None) => mb,
            (mb, Some(bytes)) => mb.min(u32::try_from((bytes >> 20) / 4).unwrap_or(u32::MAX).max(DISK_MB_MIN)),
        }
    }

    /// `disk_dir` when it is not `profiles_dir` (the profiles are on a tmpfs): each worker's
    /// HTTP cache then goes there.
    pub(crate) fn separate_disk_dir(&self) -> Option<&Path> {
        (self.disk_dir != self.profiles_dir).then_some(self.disk_dir.as_path())
    }
}

/// A launched, connected browser.
pub(crate) struct Launched {
    pub(crate) process: Process,
    pub(crate) browser: Browser,
    pub(crate) ws_url: String,
    pub(crate) handler_task: OwnedTask,
    /// Turns `Some(why)` when the browser's CDP connection closes.
    pub(crate) died: tokio::sync::watch::Receiver<Option<String>>,
}

/// Takes a free port, starts Chromium on it with a fresh profile and connects CDP. Every
/// connection its pages open goes through `proxy` (the worker's egress proxy). With `netns`,
/// Chromium runs inside that namespace and CDP is reached through a
/// [`Gate`](crate::netns::Gate).
pub(crate) async fn launch(
    cfg: &LaunchConfig,
    worker: &str,
    proxy: &str,
    mut netns: Option<NetNs>,
    egress: &std::sync::Arc<Egress>,
    spawned: &(dyn Fn(Spawned) + Send + Sync),
    cleanups: &tokio_util::task::TaskTracker,
) -> Result<Launched, PoolError> {
    for dir in std::iter::once(cfg.profiles_dir.as_path()).chain(cfg.separate_disk_dir()) {
        crate::sandbox::prepare_profiles_dir(dir, cfg.worker_uids.is_some()).map_err(PoolError::Launch)?;
    }
    let lock = take_port(cfg).await?;
    let port = lock.port();
    let uid = cfg.worker_uids.map(|uids| uids.uid_for_port(port));
    let dirs = Dirs::create(&cfg.profiles_dir, cfg.separate_disk_dir(), port, cfg.disk_mb(None)).await?;
    let cgroup = match create_cgroup(cfg, port).await {
        Ok(cgroup) => cgroup,
        Err(e) => {
            dirs.remove().await;
            return Err(e);
        }
    };
    let started = async {
        if let Some(uid) = uid {
            dirs.chown(uid)?;
        }
        let cmd = command(cfg, port, proxy, &dirs);
        spawn(cmd, &cfg.chrome, cgroup.as_ref(), netns.as_ref(), uid).await
    };
    let mut child = match started.await {
        Ok(child) => child,
        Err(e) => {
            // Nothing runs yet: a failed launch leaves no directory or cgroup behind.
            if let Some(cgroup) = cgroup {
                let _ = tokio::task::spawn_blocking(move || cgroup.remove()).await;
            }
            dirs.remove().await;
            return Err(e);
        }
    };
    let stderr = child.stderr.take();
    let mut process = Process::new(child, lock, dirs, uid, cgroup, cleanups.clone());
    spawned(process.spawned());
    let connected = async {
        let (mut ws_url, lines) = endpoint(&mut process.child, stderr, cfg.launch_timeout).await?;
        if let Some(ns) = netns.take() {
            ws_url = through_gate(&mut process, ns, port, &ws_url, egress, worker).await?;
        }
        process.stderr = Some(drain_stderr(lines, worker));
        let (browser, handler_task, died) = connect_cdp(&ws_url, cfg.cdp_timeout, worker).await?;
        Ok::<_, PoolError>((browser, ws_url, handler_task, died))
    }
    .await;
    match connected {
        Ok((browser, ws_url, handler_task, died)) => Ok(Launched { process, browser, ws_url, handler_task, died }),
        Err(e) => {
            process.kill().await;
            Err(e)
        }
    }
}

async fn take_port(cfg: &LaunchConfig) -> Result<PortLock, PoolError> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || {
        let pid = std::process::id();
        for port in cfg.ports.ports() {
            let lock = PortLock::try_acquire(&cfg.lock_dir, port, pid).map_err(|e| {
                let why = crate::lock::explain_io(&e, &cfg.lock_dir);
                PoolError::Launch(format!("lock dir {} (--lock-dir): {why}", cfg.lock_dir.display()))
            })?;
            let Some(lock) = lock else { continue };
            // A server that died without cleaning up leaves its Chromium running on this port:
            // kill what still names this port's profile, then give the port a moment to free.
            kill_strays(&cfg.profiles_dir.join(format!("port-{port}")));
            // Its uid too: a uid is handed out again only once no process of it is left.
            if let Some(uids) = cfg.worker_uids {
                if !kill_uid(uids.uid_for_port(port), true) {
                    drop(lock);
                    continue;
                }
            }
            let free = (0..20).any(|_| {
                let ok = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
                if !ok {
                    std::thread::sleep(Duration::from_millis(50));
                }
                ok
            });
            // Something outside browserpool may hold the port: skip it rather than fail later.
            if !free {
                drop(lock);
                continue;
            }
            return Ok(lock);
        }
        Err(PoolError::NoFreePort(cfg.ports.to_string()))
    })
    .await
    .map_err(|e| PoolError::Launch(format!("port task: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's profile and files directory get `--worker-disk-mb`, or a quarter of its
    /// memory limit when less (so a tenant's small limit is met by a full disk first).
    #[test]
    fn the_disk_is_a_quarter_of_the_memory_limit_at_most() {
        let cfg = |profile_mb| LaunchConfig {
            chrome: PathBuf::new(),
            profiles_dir: PathBuf::new(),
            disk_dir: PathBuf::new(),
            lock_dir: PathBuf::new(),
            ports: PortRange { start: 1, end: 2 },
            launch_timeout: Duration::ZERO,
            cdp_timeout: Duration::ZERO,
            worker_uids: None,
            allow_unsandboxed: false,
            cgroups: None,
            profile_mb,
        };
        let mib = |n: u64| Some(n << 20);
        assert_eq!(cfg(512).disk_mb(mib(1536)), 384);
        assert_eq!(cfg(512).disk_mb(mib(256)), 64, "a tenant's least max_memory_mb");
        assert_eq!(cfg(512).disk_mb(mib(4096)), 512, "never past --worker-disk-mb");
        assert_eq!(cfg(512).disk_mb(mib(40)), 16, "at least --worker-disk-mb's least");
        assert_eq!(cfg(512).disk_mb(None), 512, "no cgroups: no limit to stay within");
        assert_eq!(cfg(0).disk_mb(mib(256)), 0, "no tmpfs");
    }
}
