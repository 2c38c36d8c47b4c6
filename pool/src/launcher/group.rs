//! A worker's process group: what the pool raises from a spare's idle priority ([`Spawned`])
//! and what the group's memory is.

use crate::cgroup::WorkerCgroup;
use crate::procfs::group_pids;

/// Memory of a whole process group (Chromium's browser, renderers, GPU and utility
/// processes), from /proc; zeros when the group is gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupMemory {
    /// Resident set summed over the processes: pages they share count once per process, so
    /// it overstates what the group costs (several times over for Chromium).
    pub rss_bytes: u64,
    /// Proportional set size summed over the processes (`Pss` of `smaps_rollup`): a shared
    /// page is split among its sharers, so this is what killing the group gives back.
    pub pss_bytes: u64,
}

/// A worker's process group and cgroup, as soon as it is spawned: what the pool raises from
/// a spare's priority when someone waits for it or leases it.
#[derive(Debug, Clone)]
pub(crate) struct Spawned {
    pub(crate) pgid: u32,
    pub(crate) cgroup: Option<std::sync::Arc<WorkerCgroup>>,
}

impl Spawned {
    /// Normal scheduling for every thread, and a leased worker's CPU weight. Blocking.
    pub(crate) fn raise(&self) {
        raise_priority(|| self.pids());
        if let Some(cgroup) = &self.cgroup {
            if let Err(e) = cgroup.set_cpu_weight(crate::cgroup::LEASED_WEIGHT) {
                tracing::warn!(error = %e, "could not raise a worker's cpu weight");
            }
        }
    }

    /// Readies the group for its kill: its cgroup (and, while the kill runs, the workers'
    /// parent) at the weight of the dying until the returned guard is dropped, or, where there
    /// are no cgroups (or that failed), every thread back at normal scheduling. Blocking.
    pub(crate) fn condemn(&self) -> Option<crate::cgroup::Condemned> {
        match self.cgroup.as_ref().map(|cgroup| cgroup.condemn()) {
            Some(Ok(condemned)) => return Some(condemned),
            Some(Err(e)) => tracing::warn!(error = %e, "could not give a killed worker the weight of the dying"),
            None => {}
        }
        raise_priority(|| self.pids());
        None
    }

    /// Its processes: its cgroup's own list where it has one (every process Chromium started,
    /// read from one file), else its process group's, found in `/proc` (every process's
    /// `stat` read, which on a busy host costs the server milliseconds it then lacks).
    fn pids(&self) -> Vec<u32> {
        match self.cgroup.as_ref().map(|cgroup| cgroup.pids()) {
            Some(pids) if !pids.is_empty() => pids,
            _ => group_pids(self.pgid),
        }
    }
}

/// Whether spares may boot at idle priority: only where this server may raise a thread from
/// `SCHED_IDLE` again (root, `CAP_SYS_NICE`, or an `RLIMIT_NICE` that allows nice 0). A
/// server that is not root usually may not, and its leased browsers would then run at idle
/// priority for good: there every boot runs at normal priority. Tried once, on a thread of
/// its own, and said once in the log.
pub fn idle_boots() -> bool {
    static IDLE_BOOTS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IDLE_BOOTS.get_or_init(|| {
        let reversible = std::thread::spawn(|| {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: sched_setscheduler on the calling thread (0) has no memory preconditions.
            unsafe {
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0
                    && libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) == 0
            }
        })
        .join()
        .unwrap_or(false);
        if !reversible {
            tracing::info!("spares boot at normal priority: this server may not raise a thread from idle priority again (it needs root, CAP_SYS_NICE or RLIMIT_NICE)");
        }
        reversible
    })
}

/// Puts every thread of the processes `pids` lists back at normal priority (`SCHED_OTHER`;
/// see [`launch`](super::launch)). Twice, for threads started while the first pass ran.
/// Blocking.
fn raise_priority(pids: impl Fn() -> Vec<u32>) {
    let param = libc::sched_param { sched_priority: 0 };
    for _ in 0..2 {
        for pid in pids() {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
            for task in tasks.flatten() {
                if let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<libc::pid_t>().ok()) {
                    // SAFETY: sched_setscheduler has no memory preconditions; a thread gone
                    // meanwhile only makes it fail.
                    unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
                }
            }
        }
    }
}

/// [`GroupMemory`] of process group `pgid`.
pub fn group_memory(pgid: u32) -> GroupMemory {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let mut memory = GroupMemory::default();
    for pid in group_pids(pgid) {
        if let Ok(statm) = std::fs::read_to_string(format!("/proc/{pid}/statm")) {
            memory.rss_bytes += page * statm.split_whitespace().nth(1).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        }
        if let Ok(rollup) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
            memory.pss_bytes += 1024 * rollup_kib(&rollup, "Pss:");
        }
    }
    memory
}

/// A `Name:   123 kB` line's number from `/proc/<pid>/smaps_rollup`.
fn rollup_kib(rollup: &str, name: &str) -> u64 {
    rollup
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollup_lines_parse() {
        let rollup = "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  120 kB\nPss:   48 kB\nPss_Anon: 40 kB\n";
        assert_eq!((rollup_kib(rollup, "Rss:"), rollup_kib(rollup, "Pss:")), (120, 48));
        assert_eq!(rollup_kib(rollup, "Swap:"), 0);
    }

    #[test]
    fn our_own_group_has_memory_and_pss_is_at_most_rss() {
        // SAFETY: getpgid(0) has no preconditions.
        let memory = group_memory(unsafe { libc::getpgid(0) } as u32);
        assert!(memory.pss_bytes > 0 && memory.pss_bytes <= memory.rss_bytes, "{memory:?}");
    }
}
