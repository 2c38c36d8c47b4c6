//! A running Chromium: its process group, port lock, directories, uid and cgroup, killed
//! whole on kill or drop, with its directories and cgroup removed after.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Child;

use super::cleanup::kill_strays;
use super::group::Spawned;
use super::profile::remove_dir_retried;
use super::profile::Dirs;
use crate::cgroup::WorkerCgroup;
use crate::lock::PortLock;
use crate::netns::Gate;
use crate::sandbox::kill_uid;
use crate::task::OwnedTask;

/// How long a kill waits for the killed processes to leave their cgroup.
const EXIT_BOUND: Duration = Duration::from_secs(5);

/// The longest a kill waits for its caller's answer before its processes take the weight of
/// the dying ([`Process::kill_after`]).
const ANSWER_FIRST: Duration = Duration::from_secs(1);

/// A running Chromium process: its group, its port lock and its profile. Dropping it kills
/// the whole group and deletes the profile, so a worker can never outlive its owner's handle.
#[derive(Debug)]
pub(crate) struct Process {
    pub(super) child: Child,
    pgid: libc::pid_t,
    /// The main process's exit, opened before anything could reap it.
    exit: std::sync::Arc<crate::procfs::ExitWatch>,
    pub(crate) lock: Option<PortLock>,
    /// The only way into DevTools when the worker has its own network namespace.
    pub(super) gate: Option<Gate>,
    /// Drains Chromium's stderr; ends with the pipe, or with the process value.
    pub(super) stderr: Option<OwnedTask>,
    pub(crate) profile: PathBuf,
    /// Its directories outside the profile: its temp dir, and its cache when it has one.
    outside: Vec<PathBuf>,
    /// The worker's own uid, when it has one: every process left running as it is killed
    /// before the port (and with it the uid) is free again.
    pub(crate) uid: Option<u32>,
    /// The worker's cgroup, when it has one: removed once its processes are gone.
    pub(crate) cgroup: Option<std::sync::Arc<WorkerCgroup>>,
    /// Where a kill's directory removal runs, so the pool's shutdown can wait for it.
    cleanups: Option<tokio_util::task::TaskTracker>,
    killed: bool,
}

impl Process {
    /// The worker's own network namespace, when it has one.
    pub(crate) fn netns(&self) -> Option<std::sync::Arc<crate::netns::NetNs>> {
        self.gate.as_ref().map(Gate::netns)
    }

    /// The process of `child`, which leads its own group, holding the worker's port `lock`,
    /// its directories, uid and cgroup; its kill removes the directories on `cleanups`.
    pub(super) fn new(
        child: Child,
        lock: PortLock,
        dirs: Dirs,
        uid: Option<u32>,
        cgroup: Option<std::sync::Arc<WorkerCgroup>>,
        cleanups: tokio_util::task::TaskTracker,
    ) -> Process {
        let pgid = child.id().map(|p| p as libc::pid_t).unwrap_or(0);
        Process {
            child,
            pgid,
            exit: std::sync::Arc::new(crate::procfs::ExitWatch::open(pgid as u32)),
            lock: Some(lock),
            gate: None,
            stderr: None,
            outside: dirs.outside(),
            profile: dirs.profile,
            uid,
            cgroup,
            cleanups: Some(cleanups),
            killed: false,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pgid as u32
    }

    /// The main Chromium process's exit, for watchers that do not own the process.
    pub(crate) fn exit_watch(&self) -> std::sync::Arc<crate::procfs::ExitWatch> {
        self.exit.clone()
    }

    pub(crate) fn port(&self) -> u16 {
        self.lock.as_ref().map(PortLock::port).unwrap_or(0)
    }

    pub(crate) fn spawned(&self) -> Spawned {
        Spawned { pgid: self.pgid as u32, cgroup: self.cgroup.clone() }
    }

    /// Whether the main Chromium process has exited.
    pub(crate) fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the group, its strays and every process of its uid, and returns once they are
    /// gone (bounded), so the caller may free the slot at once; the profile, the temp dir and
    /// the cgroup are removed after, on a thread the pool's shutdown waits for, which keeps
    /// the port (and with it the uid and the profile's path) until they are.
    ///
    /// Killing is not background work: a killed Chromium's exit (unmapping its memory) runs at
    /// its threads' own priority and its cgroup's weight, and a spare's are `SCHED_IDLE` and 1,
    /// which a busy host never gets to. So the group is condemned first ([`Spawned::condemn`]).
    pub(crate) async fn kill(self) {
        self.kill_after(std::future::ready(())).await
    }

    /// [`Process::kill`], with the weight of the dying given only once `answered` is ready (at
    /// most [`ANSWER_FIRST`] later): the group is sent SIGKILL at once, and exits at the weight it
    /// ran at until then. The dying's weight outweighs the server's own threads many times
    /// over, and a caller releasing the worker waits for an answer the server has yet to write:
    /// measured with `acquire_bench 30 process`, that answer took 1.7-11 ms p50 and 20-71 ms p90
    /// (six runs) while the exits came first, 1.3-1.4 ms and 5-12 ms since.
    pub(crate) async fn kill_after(mut self, answered: impl std::future::Future<Output = ()>) {
        // The browser stops now, whatever the wait: a released tenant's page never runs on.
        kill_group(self.pgid);
        let _ = tokio::time::timeout(ANSWER_FIRST, answered).await;
        // Everything the browser started is in its cgroup, which its uid may not leave: kill
        // and wait on the cgroup's own list. Without one (or if that list does not empty),
        // every process naming the profile or of the uid, found in `/proc`. One hop to a
        // blocking thread for all of it: on a busy host each hop waits for a turn.
        let spawned = self.spawned();
        let left = tokio::task::spawn_blocking(move || {
            let condemned = spawned.condemn();
            kill_group(spawned.pgid as libc::pid_t);
            let left = spawned.cgroup.map(|cgroup| cgroup.kill_and_wait(EXIT_BOUND));
            drop(condemned);
            left
        })
        .await;
        if let Ok(Some(left @ 1..)) = left {
            tracing::warn!(pid = self.pgid, left, "worker processes did not exit after sigkill");
        }
        let emptied = matches!(left, Ok(Some(0)));
        if !emptied {
            // All at once first, so they exit side by side rather than each after the browser.
            self.kill_others(false).await;
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            tracing::warn!(pid = self.pgid, "chromium did not exit after sigkill");
        }
        if !emptied {
            // Strays (crashpad starts sessions of its own) and the uid's leftovers, until gone.
            self.kill_others(true).await;
        }
        self.gate.take();
        self.killed = true;
        let cleanup = self.cleanup();
        match &self.cleanups {
            Some(tracker) => drop(tracker.spawn_blocking(cleanup)),
            None => cleanup(),
        }
    }

    /// What is left once the processes are killed: the directories (retried while a dying
    /// process still writes), then the cgroup, then the port lock, in that order, so the next
    /// boot on the port finds none of them.
    fn cleanup(&mut self) -> impl FnOnce() + Send + 'static {
        let mut dirs = vec![self.profile.clone()];
        dirs.extend(self.outside.iter().cloned());
        let (cgroup, lock) = (self.cgroup.take(), self.lock.take());
        move || {
            for dir in dirs {
                remove_dir_retried(&dir);
            }
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            drop(lock);
        }
    }

    /// SIGKILL to the processes outside the group: those naming the profile, and every one
    /// of the worker's uid (with `wait`, until they are gone, at most 5 s).
    async fn kill_others(&self, wait: bool) {
        let (profile, uid) = (self.profile.clone(), self.uid);
        let _ = tokio::task::spawn_blocking(move || {
            kill_strays(&profile);
            if let Some(uid) = uid {
                kill_uid(uid, wait);
            }
        })
        .await;
    }

    /// SIGKILL to all of it, not waiting; the weight of the dying is kept until the returned
    /// guard is dropped.
    fn signal_all(&self) -> Option<crate::cgroup::Condemned> {
        let condemned = self.cgroup.as_ref().and_then(|cgroup| cgroup.condemn().ok());
        kill_group(self.pgid);
        kill_strays(&self.profile);
        if let Some(uid) = self.uid {
            kill_uid(uid, false);
        }
        condemned
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.killed {
            let condemned = self.signal_all();
            // The directories go once the killed processes stop writing into them, and the
            // cgroup once they have left it (each takes a moment): on another thread, as drop
            // may not wait. The port stays locked until then: the next boot on it makes
            // directories and a cgroup of the same names, which this removal would otherwise
            // empty and remove under it. On the cleanups the pool's shutdown waits for where
            // there is a runtime (a boot ended where it stood), so no lock outlives it. The
            // weight of the dying is kept only while the killed processes exit (it lifts every
            // worker's share against the server and the host).
            let cgroup = self.cgroup.clone();
            let cleanup = self.cleanup();
            let remove = move || {
                if let Some(cgroup) = cgroup {
                    cgroup.kill_and_wait(EXIT_BOUND);
                }
                drop(condemned);
                cleanup();
            };
            match (&self.cleanups, tokio::runtime::Handle::try_current()) {
                (Some(tracker), Ok(handle)) => drop(tracker.spawn_blocking_on(remove, &handle)),
                _ => drop(std::thread::Builder::new().name("worker-cleanup".into()).spawn(remove)),
            }
        }
    }
}

/// SIGKILL to process group `pgid`, one a worker's Chromium leads.
fn kill_group(pgid: libc::pid_t) {
    // SAFETY: killpg on a group we created with process_group(0); ESRCH is harmless.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}
