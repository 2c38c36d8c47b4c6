//! The server's browsers: the pool's settings from the flags (the uids, cgroups and profiles
//! its workers get), the browsers a killed server left reaped at start, and the checks made
//! before serving (the sandbox, the open files limit).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use browserpool_pool::sandbox::UidRange;
use browserpool_pool::{Cgroups, EgressConfig, LaunchConfig, Pool, PoolConfig, SharedConfig};

use super::Stages;
use crate::config::ServeArgs;

/// The pool's settings: `chrome` launched on `dirs` (the profiles', the disk's), as
/// `worker_uids`; pages never reach the server's own `listeners` ports, whatever the tenant
/// allows.
pub(super) fn pool_config(
    args: &ServeArgs,
    chrome: PathBuf,
    [profiles_dir, disk_dir]: [PathBuf; 2],
    worker_uids: Option<UidRange>,
    cgroups: Option<Arc<Cgroups>>,
    listeners: [u16; 2],
) -> PoolConfig {
    PoolConfig {
        launch: LaunchConfig {
            chrome,
            profiles_dir,
            disk_dir,
            lock_dir: args.lock_dir.clone(),
            ports: args.port_range,
            launch_timeout: args.launch_timeout,
            cdp_timeout: std::time::Duration::from_secs(10),
            worker_uids,
            allow_unsandboxed: args.allow_unsandboxed,
            cgroups,
            // Only root may mount (one refused, by a security module say, is found out and warns at start).
            profile_mb: if worker_uids.is_some() { args.worker_disk_mb } else { 0 },
        },
        warm: args.warm,
        max_workers: args.max_workers,
        max_html_bytes: args.max_html_bytes,
        // Pages never reach the server's own listeners, whatever the tenant allows.
        egress: EgressConfig {
            reserved_ports: listeners.iter().map(|port| *port..=*port).collect(),
            hosts: args.resolve.iter().cloned().collect(),
        },
        max_tabs: args.max_tabs as usize,
        unresponsive_after: args.browser_unresponsive_after,
        shared: SharedConfig {
            recycle_after: args.context_recycle_after,
            memory_ceiling: args.context_memory_ceiling_mib << 20,
            idle: args.context_idle,
        },
    }
}

/// Where the profiles of a data dir's workers live by default, and where their HTTP caches and
/// the sessions' files always do: a directory of the temp dir named by the data dir, not the
/// data dir itself, which workers running as uids of their own must not reach (and whose
/// parents, `/root` say, they often cannot pass).
pub fn profiles_dir(data_dir: &Path) -> PathBuf {
    profiles_dir_in(&std::env::temp_dir(), data_dir)
}

/// The data dir's directory of profiles in `parent` (`--profiles-in`): one per data dir, so
/// that no server reaps another's browsers.
pub fn profiles_dir_in(parent: &Path, data_dir: &Path) -> PathBuf {
    use sha2::Digest;
    let real = data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_path_buf());
    let name = hex::encode(&sha2::Sha256::digest(real.as_os_str().as_encoded_bytes())[..6]);
    // Named as the pool reaps another server's dirs (`reap_abandoned`) by.
    parent.join(format!("{}{name}", browserpool_pool::launcher::PROFILES_PREFIX))
}

/// Where the workers' profiles go: `--profiles-in`, which must be a directory (given as an
/// absolute path, or made one), else the temp dir. Says where, and on a tmpfs how much room
/// it has.
pub(super) fn chosen_profiles_dir(args: &ServeArgs, data_dir: &Path) -> anyhow::Result<PathBuf> {
    let Some(parent) = &args.profiles_in else { return Ok(profiles_dir(data_dir)) };
    let parent = parent
        .canonicalize()
        .ok()
        .filter(|p| p.is_dir())
        .ok_or_else(|| anyhow::anyhow!("--profiles-in {}: not a directory", parent.display()))?;
    if let Some(free) = tmpfs_free(&parent) {
        tracing::info!(dir = %parent.display(), free_mib = free >> 20, "workers' profiles on a tmpfs: what pages store there counts in each worker's memory");
    }
    Ok(profiles_dir_in(&parent, data_dir))
}

/// Kills the Chromiums a server killed without cleaning up left running under `dirs` (the
/// profiles' and the disk's), before any worker starts: they hold ports, memory and tenants'
/// pages. Both, when they differ: a server started with another `--profiles-in` left its
/// profiles or caches in either. First claims `dirs` in `lock_dir` for this server; last reaps
/// what other servers that are gone claimed there (the profiles of a server killed after its
/// data dir was removed, which no server would ever start on again).
pub(super) async fn reap_left_behind(dirs: &[PathBuf; 2], lock_dir: &Path) -> anyhow::Result<()> {
    let mut dirs = dirs.to_vec();
    dirs.dedup();
    let lock_dir = lock_dir.to_path_buf();
    let (claimed, reaped, abandoned) = tokio::task::spawn_blocking(move || {
        // Claimed first: a server reaping the dead owner's claim it replaces sees the change.
        let claimed = browserpool_pool::claim_profiles(&lock_dir, &dirs);
        let reaped = dirs.iter().map(|dir| browserpool_pool::reap_orphans(dir)).sum::<usize>();
        (claimed, reaped, browserpool_pool::reap_abandoned(&lock_dir, &dirs))
    })
    .await?;
    if reaped > 0 {
        tracing::warn!(processes = reaped, "killed the browsers a previous server on this data dir left running");
    }
    if abandoned > 0 {
        tracing::info!(dirs = abandoned, "removed the profiles of servers that are gone");
    }
    // Only the reaping of this server's profiles after it is gone depends on it.
    if let Err(e) = claimed {
        tracing::warn!(error = %e, "could not record this server's profiles in the lock dir");
    }
    Ok(())
}

/// The free bytes of the tmpfs `dir` is on, `None` when it is not on one.
pub fn tmpfs_free(dir: &Path) -> Option<u64> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 || st.f_type != libc::TMPFS_MAGIC {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_bsize as u64)
}

/// The uids workers run as: `--worker-uids`, checked, when the server is root; none otherwise
/// (only root can switch).
pub(super) fn worker_uids(args: &ServeArgs) -> anyhow::Result<Option<UidRange>> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        tracing::info!(
            uid = euid,
            "workers run as the server's own uid, their profiles on the filesystem, not capped in size (only a root server gives them uids and a tmpfs of their own)"
        );
        return Ok(None);
    }
    args.worker_uids.check(args.port_range, euid, Path::new("/etc")).map_err(anyhow::Error::msg)?;
    if let Err(e) = browserpool_pool::may_create_netns() {
        // Otherwise every boot fails ("Operation not permitted"), retried without end.
        anyhow::bail!(
            "the server runs as root but may not create network namespaces ({e}): each worker runs in one of \
             its own as a uid of its own, which needs CAP_SYS_ADMIN. Give the server CAP_SYS_ADMIN (a \
             container: --cap-add SYS_ADMIN), or run it as a user that is not root (workers then run as that \
             user, in an unprivileged user namespace)"
        );
    }
    Ok(Some(args.worker_uids))
}

/// Where workers get a cgroup each (memory, tasks, CPU weight), or `None`, said once, at warn,
/// with why: `--no-worker-cgroups`, or a server that may not manage cgroups. Removes the worker
/// cgroups a dead server left. Blocking.
pub(super) fn worker_cgroups(args: &ServeArgs) -> Option<Arc<Cgroups>> {
    let why = if args.no_worker_cgroups {
        "--no-worker-cgroups".to_string()
    } else {
        match Cgroups::detect((args.worker_memory_mb as u64) << 20, args.worker_pids_max) {
            Ok(cgroups) => {
                tracing::info!(
                    version = ?cgroups.version(),
                    parent = %cgroups.parent().display(),
                    memory_mb = args.worker_memory_mb,
                    pids_max = args.worker_pids_max,
                    "each worker runs in a cgroup of its own"
                );
                let removed = cgroups.remove_dead_servers(&args.lock_dir, args.port_range);
                if removed > 0 {
                    tracing::info!(ports = removed, "removed the worker cgroups a dead server left");
                }
                return Some(Arc::new(cgroups));
            }
            Err(e) => e,
        }
    };
    tracing::warn!(why = %why, "workers have no memory, task or CPU limit of their own (no cgroup per worker): one page can take the host's memory; size the host or pod for it");
    None
}

/// Refuses to serve when the first worker booted runs without Chromium's sandbox, unless
/// `--allow-unsandboxed` says to. With no warm worker to look at, the first one booted for a
/// session is checked instead (and fails to boot without the sandbox).
pub(super) async fn check_sandbox(args: &ServeArgs, pool: &Pool, stages: &Stages) -> anyhow::Result<()> {
    if args.warm == 0 {
        return Ok(());
    }
    // A boot, its DevTools connection, and the sandbox check's wait for a renderer.
    let within = args.launch_timeout + std::time::Duration::from_secs(40);
    match pool.sandbox_checked(within).await {
        Some(report) if !report.sandboxed && !args.allow_unsandboxed => {
            stages.serving.cancel();
            pool.shutdown().await;
            anyhow::bail!("{}", browserpool_pool::PoolError::Unsandboxed(report.detail))
        }
        Some(_) => Ok(()),
        // Boots fail (said in the log and /readyz); the first that succeeds is checked.
        None => Ok(()),
    }
}

/// Raises the soft limit on open descriptors to the hard one: every connection a page opens
/// costs the server two (its egress proxy relays it), up to 256 per worker.
pub(super) fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let wanted = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) != 0 {
                tracing::warn!(soft = lim.rlim_cur, "could not raise the open files limit");
            }
        }
    }
}
