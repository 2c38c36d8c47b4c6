//! Forking Chromium into its fences: its cgroup, made first; between fork and exec, the
//! cgroup, idle priority, the network namespace, the uid and a parent-death SIGKILL; every
//! fork from one long-lived thread.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use tokio::process::{Child, Command};

use super::group::idle_boots;
use super::LaunchConfig;
use crate::cgroup::WorkerCgroup;
use crate::error::PoolError;
use crate::netns::NetNs;
use crate::sync::lock;

/// The worker's cgroup on `port`, when the pool has cgroups: made before the spawn so that
/// Chromium's first instruction already runs inside its fences.
pub(super) async fn create_cgroup(cfg: &LaunchConfig, port: u16) -> Result<Option<Arc<WorkerCgroup>>, PoolError> {
    match &cfg.cgroups {
        Some(cgroups) => {
            let cgroups = cgroups.clone();
            let made = tokio::task::spawn_blocking(move || cgroups.create(port))
                .await
                .map_err(|e| PoolError::Launch(format!("cgroup task: {e}")))?
                .map_err(|e| PoolError::Launch(format!("worker cgroup: {e}")))?;
            Ok(Some(Arc::new(made)))
        }
        None => Ok(None),
    }
}

/// Starts `cmd` (the executable `chrome`) inside `cgroup` and `netns`, as `uid` (see
/// [`confine`]); the cgroup is removed when the spawn fails.
pub(super) async fn spawn(
    mut cmd: Command,
    chrome: &Path,
    cgroup: Option<&Arc<WorkerCgroup>>,
    netns: Option<&NetNs>,
    uid: Option<u32>,
) -> Result<Child, PoolError> {
    // Kept open until the spawn returns: the child writes to them before it execs.
    let procs = cgroup.map(|c| c.open_procs()).transpose()?.unwrap_or_default();
    confine(&mut cmd, &procs, netns, uid);
    let spawn = spawn_on_keeper(cmd).await;
    drop(procs);
    if let (Ok(_), Some(cgroup)) = (&spawn, cgroup) {
        // Chromium runs (the spawn returns after its exec): it joined its cgroup at a leased
        // worker's weight, and a spare's is the lowest. Raised again when it is waited for.
        let cgroup = cgroup.clone();
        let lowered = tokio::task::spawn_blocking(move || cgroup.set_cpu_weight(crate::cgroup::SPARE_WEIGHT)).await;
        if let Ok(Err(e)) = lowered {
            tracing::warn!(error = %e, "could not lower a spare's cpu weight");
        }
    }
    // A failed spawn's cgroup and directories are removed by `launch`, the one place that
    // undoes a launch that never ran.
    spawn.map_err(|e| PoolError::Launch(format!("spawn {}: {e}", chrome.display())))
}

/// What the child does between fork and exec, in order: joining its cgroup (by writing to
/// `procs`, its cgroup's open process lists), idle priority, its network namespace, then its
/// uid, and last the parent-death signal.
fn confine(cmd: &mut Command, procs: &[OwnedFd], netns: Option<&NetNs>, uid: Option<u32>) {
    if !procs.is_empty() {
        let fds: Vec<std::os::fd::RawFd> = procs.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        // First, at normal priority: joining is a move between cgroups, which holds a lock
        // every fork and exit on the host waits for; at idle priority on a busy host the child
        // could be kept off the CPU while it holds it.
        // SAFETY: write is async-signal-safe; it runs in the child between fork and exec, on
        // descriptors it inherited, while it is still root (joining needs it).
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &fds {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    // Every boot starts at idle priority (SCHED_IDLE, which every process and thread Chromium
    // starts inherits, and which its own nice values do not undo): a spare booting on a busy
    // host takes only CPU the sessions leave. The pool raises it when a caller waits for it,
    // and when it is leased ([`Spawned::raise`](super::group::Spawned::raise)); where it could
    // not, boots run at normal priority ([`idle_boots`]).
    if idle_boots() {
        // SAFETY: sched_setscheduler is async-signal-safe; it runs in the child before exec.
        unsafe {
            cmd.pre_exec(|| {
                let param = libc::sched_param { sched_priority: 0 };
                // Where the policy may not be set, the boot simply runs at normal priority.
                let _ = libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
                Ok(())
            });
        }
    }
    if let Some(ns) = netns {
        let (fd, user) = (ns.raw_fd(), ns.user_fd());
        // SAFETY: setns is async-signal-safe; it runs in the child between fork and exec, on
        // descriptors the child inherited. An unprivileged namespace's user namespace first:
        // the server's uid owns it, so the child may join it, and inside it the network one.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(user) = user {
                    if libc::setns(user, libc::CLONE_NEWUSER) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    if let Some(uid) = uid {
        // SAFETY: setgroups, setgid and setuid are async-signal-safe; they run in the child
        // between fork and exec, after it joined its namespace (which needs root), in the
        // order that leaves no supplementary group and no way back to root.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid as libc::gid_t) != 0
                    || libc::setuid(uid as libc::uid_t) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    // Last, after every credential change (which clears it): Chromium is SIGKILLed by the
    // kernel when the server dies, however it dies (see [`spawn_on_keeper`]).
    let server = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe; they run in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The server died between the fork and the prctl: nobody would signal us.
            if libc::getppid() != server {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Forks `cmd` on the one thread of the process that forks Chromium, which lives as long
/// as the process. The kernel sends a child its parent-death signal when the *thread* that
/// forked it ends, not the process: forked from a runtime thread that can be retired (or from
/// a blocking-pool thread, retired after 10 s idle), a worker would be killed in the middle of
/// a session; forked here, it is killed exactly when the server dies (kill -9 included), so a
/// dead server never leaves a browser running with nobody to reap it.
async fn spawn_on_keeper(mut cmd: Command) -> std::io::Result<Child> {
    type Job = Box<dyn FnOnce() + Send>;
    static KEEPER: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        // The thread never returns: the sender lives in a static, so `recv` never fails.
        std::thread::Builder::new()
            .name("chromium-forker".into())
            .spawn(move || {
                for job in rx {
                    // A panic must not end the thread: that would kill every worker.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .expect("a thread to fork Chromium from");
        std::sync::Mutex::new(tx)
    });
    let runtime = tokio::runtime::Handle::current();
    let (done, spawned) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        // The child is registered with the caller's runtime, which reaps it.
        let _entered = runtime.enter();
        let _ = done.send(cmd.spawn());
    });
    lock(keeper).send(job).map_err(|_| std::io::Error::other("forker thread gone"))?;
    spawned.await.map_err(|_| std::io::Error::other("forker thread dropped the spawn"))?
}
