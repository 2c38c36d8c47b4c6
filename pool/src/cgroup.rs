//! Resource fences: each worker's Chromium (every process and thread it starts) in a cgroup of
//! its own, with a memory limit, a task limit and a CPU weight, where the server may manage
//! cgroups (root on a host, or a subtree delegated to it). The unified hierarchy (v2) is used
//! when its controllers are there; a host whose controllers are still on v1 hierarchies gets
//! the same fences through them.
//!
//! Worker cgroups are named after their CDP port (`w<port>`), like their uid: the port lock is
//! host-wide, so two servers never share one. One left by a killed server is removed by the
//! next server to start in the same cgroup with that port in its range, or emptied and reused
//! by the next holder of the port.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lock::{explain_io, PortLock, PortRange};
use crate::sync::lock;

/// Name of the directory, under the server's own cgroup, that holds the worker cgroups.
const PARENT: &str = "browserpool";
/// Where a v2 server moves itself when its own cgroup may not have children with
/// controllers while it holds a process (the "no internal processes" rule).
const SERVER_LEAF: &str = "browserpool-server";
/// CPU weight of a worker nobody uses yet (v2 `cpu.weight`, 1-10000): a spare booting takes
/// only CPU the leased workers leave.
pub const SPARE_WEIGHT: u32 = 1;
/// CPU weight of a leased worker, or of a boot a caller waits for (the v2 default).
pub const LEASED_WEIGHT: u32 = 100;
/// CPU weight of the parent of all workers, against the server and the rest of the host
/// (the default, written so a weight left by an older server does not linger).
const PARENT_WEIGHT: u32 = 100;
/// CPU weight of the dying (the most there is), given to a worker about to be killed and,
/// while any kill runs, to the parent of all workers: a killed process's exit (unmapping its
/// memory) runs on its own cgroup's share, and a worker's is one process's among all the
/// host's at most; on a busy host that left killed browsers exiting for seconds, holding
/// their memory and their slot.
const DYING_WEIGHT: u32 = 10_000;
/// Where an older server moved the processes it killed (into a `w<port>` of their own): a
/// move between cgroups waits for every fork and exit on the host to leave the kernel, and
/// a spare's, at idle priority on a busy host, took seconds to. Removed at start when empty.
const OLD_DYING: &str = "browserpool-dying";

/// Which hierarchy the fences are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The fences every worker gets, and where their cgroups live.
#[derive(Debug)]
pub struct Cgroups {
    version: Version,
    /// v2: the one parent; v1: the parents under the memory, pids and cpu hierarchies, in that
    /// order.
    parents: Vec<PathBuf>,
    /// Memory limit of a worker nobody has leased, and of one whose tenant sets none.
    pub default_memory: u64,
    /// Most tasks (processes and threads) a worker may have.
    pub pids_max: u64,
    /// The parent's CPU weight, raised while a kill runs.
    boost: Arc<ParentBoost>,
}

/// One worker's cgroup (one per hierarchy on v1).
#[derive(Debug)]
pub struct WorkerCgroup {
    version: Version,
    /// v2: one dir; v1: memory, pids, cpu.
    dirs: Vec<PathBuf>,
    /// The memory limit set now, in bytes.
    limit: AtomicU64,
    /// OOM kills counted when the limit was last set: more since means the limit was reached.
    oom_base: AtomicU64,
    /// The parent's weight, raised while this worker is killed ([`WorkerCgroup::condemn`]).
    boost: Arc<ParentBoost>,
}

/// The workers' parent in the cpu hierarchy, at [`DYING_WEIGHT`] while any kill runs (one
/// [`Condemned`] or more alive, each only while its processes exit: the raise lifts every
/// worker against the server) and at [`PARENT_WEIGHT`] otherwise. Counted per server: two
/// servers started in one cgroup share the parent, and the end of one's kills lowers it under
/// the other's.
#[derive(Debug)]
struct ParentBoost {
    dir: PathBuf,
    version: Version,
    kills: Mutex<usize>,
}

impl ParentBoost {
    fn raise(self: &Arc<Self>) -> io::Result<Condemned> {
        let mut kills = lock(&self.kills);
        if *kills == 0 {
            write_weight(&self.dir, self.version, DYING_WEIGHT)?;
        }
        *kills += 1;
        Ok(Condemned(self.clone()))
    }
}

/// A kill running: the workers' parent keeps the weight of the dying until the last is
/// dropped. Dropping it writes a cgroup file (blocking).
#[derive(Debug)]
pub struct Condemned(Arc<ParentBoost>);

impl Drop for Condemned {
    fn drop(&mut self) {
        let mut kills = lock(&self.0.kills);
        *kills -= 1;
        if *kills == 0 {
            if let Err(e) = write_weight(&self.0.dir, self.0.version, PARENT_WEIGHT) {
                tracing::warn!(error = %e, "could not lower the workers' cpu weight after a kill");
            }
        }
    }
}

impl Cgroups {
    /// Finds the hierarchy this process may manage and makes the parent of worker cgroups in
    /// it; `Err` says why there are no fences (said once at start by the caller).
    pub fn detect(default_memory: u64, pids_max: u64) -> Result<Cgroups, String> {
        let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
        let own = read("/proc/self/cgroup")?;
        let mounts = read("/proc/self/mountinfo")?;
        let (version, parents) = locate(&own, &mounts, Path::new("/"))?;
        let parents = match version {
            Version::V2 => vec![setup_v2(&parents[0])?],
            Version::V1 => parents
                .into_iter()
                .map(|own| {
                    let parent = own.join(PARENT);
                    std::fs::create_dir_all(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
                    Ok(parent)
                })
                .collect::<Result<_, String>>()?,
        };
        // The parent may exist already (another server's, root's): that is no sign this one
        // may make cgroups in it.
        // Named per call, not only per process: two servers in one process (tests, the fleet
        // simulation) may start at once.
        static PROBES: AtomicU64 = AtomicU64::new(0);
        let probe_name = format!("probe-{}-{}", std::process::id(), PROBES.fetch_add(1, Ordering::Relaxed));
        for parent in &parents {
            let probe = parent.join(&probe_name);
            std::fs::create_dir(&probe).map_err(|e| format!("{}: {e}", parent.display()))?;
            let _ = std::fs::remove_dir(&probe);
        }
        let cpu = of(&parents, version, Controller::Cpu).to_path_buf();
        remove_old_dying(&cpu);
        let boost = Arc::new(ParentBoost { dir: cpu, version, kills: Mutex::new(0) });
        let cgroups = Cgroups { version, parents, default_memory, pids_max, boost };
        // Grouped, the workers together weigh as much as one ordinary process (on v1, one
        // thread of the server's cgroup), whatever a tenant spins in them: the server (its
        // gRPC, its egress proxies, its database) is served first. Measured: at ten times the
        // default, 24 spinning threads in one tenant's browser made another tenant's navigate
        // 29 times slower, the server's own database calls waiting 5 s.
        if let Err(e) = write_weight(of(&cgroups.parents, version, Controller::Cpu), version, PARENT_WEIGHT) {
            tracing::warn!(error = %e, "could not weigh the workers' cgroup against the host");
        }
        Ok(cgroups)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The fences in words, for status pages.
    pub fn describe(&self) -> String {
        let version = match self.version {
            Version::V1 => "v1",
            Version::V2 => "v2",
        };
        format!(
            "cgroup {version}: memory {} MiB (a tenant's max_memory_mb replaces it), {} tasks, cpu weight {SPARE_WEIGHT} while spare",
            self.default_memory >> 20,
            self.pids_max
        )
    }

    /// Where the worker cgroups live (the v2 parent, or the v1 memory one).
    pub fn parent(&self) -> &Path {
        &self.parents[0]
    }

    /// A fresh cgroup for the worker on `port`, with a spare's memory and task limits, at a
    /// leased worker's CPU weight: its first process joins it at that weight (a move between
    /// cgroups holds a lock every fork and exit on the host waits for, so it must not be
    /// starved while it does), and the launcher lowers it to [`SPARE_WEIGHT`] once Chromium
    /// runs. Whatever a killed server left in it is killed first.
    pub fn create(&self, port: u16) -> io::Result<WorkerCgroup> {
        let dirs: Vec<PathBuf> = self.parents.iter().map(|p| p.join(format!("w{port}"))).collect();
        for dir in &dirs {
            if dir.exists() {
                empty(dir, self.version);
                remove_dir(dir)?;
            }
        }
        for dir in &dirs {
            std::fs::create_dir(dir)?;
        }
        let cgroup = WorkerCgroup {
            version: self.version,
            dirs,
            limit: AtomicU64::new(0),
            oom_base: AtomicU64::new(0),
            boost: self.boost.clone(),
        };
        cgroup.set_memory(self.default_memory)?;
        cgroup.write(Controller::Pids, "pids.max", &self.pids_max.to_string())?;
        cgroup.set_cpu_weight(LEASED_WEIGHT)?;
        Ok(cgroup)
    }

    /// Removes the worker cgroups a dead server left here (a server killed with SIGKILL
    /// removes none of its workers'): each `w<port>` of `ports` whose port lock in `lock_dir`
    /// this server can take, so no live server holds it; the lock is held while the cgroup
    /// goes, so no server boots on that port meanwhile. Only empty cgroups go (the kernel
    /// refuses one with a process in it: the next boot on that port kills what it finds).
    /// Servers whose ranges overlap must share a lock dir. Blocking; call at start, before any
    /// worker boots. Returns how many ports' cgroups went.
    pub fn remove_dead_servers(&self, lock_dir: &Path, ports: PortRange) -> usize {
        let pid = std::process::id();
        self.remove_unheld(|port| {
            if !ports.ports().contains(&port) {
                return None;
            }
            PortLock::try_acquire(lock_dir, port, pid).unwrap_or_else(|e| {
                let why = explain_io(&e, lock_dir);
                tracing::warn!(port, error = %why, "could not take a port's lock to remove its worker cgroup");
                None
            })
        })
    }

    /// [`Cgroups::remove_dead_servers`] with the lock taken by `hold` (`None`: held elsewhere).
    fn remove_unheld<L>(&self, mut hold: impl FnMut(u16) -> Option<L>) -> usize {
        let named = |e: std::fs::DirEntry| {
            let name = e.file_name().into_string().ok()?;
            let port: u16 = name.strip_prefix('w')?.parse().ok()?;
            (name == format!("w{port}")).then_some(port)
        };
        let mut ports: Vec<u16> = self
            .parents
            .iter()
            .filter_map(|parent| std::fs::read_dir(parent).ok())
            .flat_map(|entries| entries.flatten())
            .filter_map(named)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        let mut removed = 0;
        for port in ports {
            let Some(lock) = hold(port) else { continue };
            let mut gone = true;
            for dir in self.parents.iter().map(|p| p.join(format!("w{port}"))) {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        gone = false;
                        tracing::info!(dir = %dir.display(), error = %e, "a dead server's worker cgroup is left to the next boot on its port");
                    }
                }
            }
            drop(lock);
            removed += usize::from(gone);
        }
        removed
    }
}

#[derive(Clone, Copy)]
enum Controller {
    Memory = 0,
    Pids = 1,
    Cpu = 2,
}

impl WorkerCgroup {
    fn dir(&self, c: Controller) -> &Path {
        of(&self.dirs, self.version, c)
    }

    fn write(&self, c: Controller, file: &str, value: &str) -> io::Result<()> {
        let path = self.dir(c).join(file);
        std::fs::write(&path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }

    /// The `cgroup.procs` files a process joins by writing `0` to each (opened before fork,
    /// written in the child before it drops root).
    pub fn open_procs(&self) -> io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|d| Ok(std::fs::OpenOptions::new().write(true).open(d.join("cgroup.procs"))?.into()))
            .collect()
    }

    /// Sets the memory limit (swap included on v2, where there is swap accounting); the count
    /// of OOM kills from here on is what [`WorkerCgroup::limit_reached`] reports.
    pub fn set_memory(&self, bytes: u64) -> io::Result<()> {
        match self.version {
            Version::V2 => {
                self.write(Controller::Memory, "memory.max", &bytes.to_string())?;
                match self.write(Controller::Memory, "memory.swap.max", "0") {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    other => other?,
                }
            }
            Version::V1 => self.write(Controller::Memory, "memory.limit_in_bytes", &bytes.to_string())?,
        }
        self.limit.store(bytes, Ordering::SeqCst);
        self.oom_base.store(self.oom_kills(), Ordering::SeqCst);
        Ok(())
    }

    /// The memory limit set now, in bytes.
    pub fn memory_limit(&self) -> u64 {
        self.limit.load(Ordering::SeqCst)
    }

    /// The memory its processes hold that reclaim cannot drop (anonymous and shared memory,
    /// the kind the limit ends in an OOM kill), in bytes: one small file read, where the sum
    /// of every process's PSS walks all their page tables. `None` where it cannot be read.
    pub fn memory_used(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(self.dir(Controller::Memory).join("memory.stat")).ok()?;
        let anon = match self.version {
            Version::V2 => "anon",
            Version::V1 => "rss",
        };
        Some(counter(&stat, anon) + counter(&stat, "shmem"))
    }

    /// Sets the CPU weight (v2 scale, 1-10000; v1 shares scaled from it).
    pub fn set_cpu_weight(&self, weight: u32) -> io::Result<()> {
        write_weight(self.dir(Controller::Cpu), self.version, weight)
    }

    /// OOM kills the kernel made in this cgroup since it was made.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        std::fs::read_to_string(self.dir(Controller::Memory).join(file)).map(|s| counter(&s, "oom_kill")).unwrap_or(0)
    }

    /// The limit, in bytes, when the kernel killed a process of this worker for reaching it
    /// since the limit was set.
    pub fn limit_reached(&self) -> Option<u64> {
        (self.oom_kills() > self.oom_base.load(Ordering::SeqCst)).then(|| self.memory_limit())
    }

    /// Readies it for a kill: it and the workers' parent take the weight of the dying (the
    /// parent until the returned guard and every other kill's are dropped), so the killed
    /// processes' exit is served before the host's other work. Nothing moves between cgroups:
    /// a move waits for every fork and exit on the host to leave the kernel, and on a busy host
    /// a spare's, at idle priority, took seconds to. Blocking.
    pub fn condemn(&self) -> io::Result<Condemned> {
        let condemned = self.boost.raise()?;
        self.set_cpu_weight(DYING_WEIGHT)?;
        Ok(condemned)
    }

    /// The processes in it (its cpu hierarchy's list on v1); none where it cannot be read.
    pub fn pids(&self) -> Vec<u32> {
        procs(self.dir(Controller::Cpu)).into_iter().map(|pid| pid as u32).collect()
    }

    /// SIGKILL to every process in it (condemned or not), then waits until none is left or
    /// `bound` passes (zero: signal once, wait not), signalling again what a fork slipped in
    /// meanwhile. Reads only the
    /// worker's own cgroup files, not all of `/proc`: on a busy host the server's own turns
    /// are few, and each scan of `/proc` costs hundreds of milliseconds of them. Returns how
    /// many processes are left. Blocking.
    pub fn kill_and_wait(&self, bound: Duration) -> usize {
        let deadline = std::time::Instant::now() + bound;
        loop {
            let left: Vec<libc::pid_t> = self.dirs.iter().flat_map(|d| procs(d)).collect();
            if left.is_empty() {
                return 0;
            }
            for pid in &left {
                // SAFETY: kill has no memory preconditions; a pid still listed in the cgroup
                // is this worker's (an exited one leaves the list before it can be reused).
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            if std::time::Instant::now() >= deadline {
                return left.len();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills what is left in it and removes it; called once the worker's processes are gone.
    pub fn remove(&self) {
        for dir in &self.dirs {
            empty(dir, self.version);
            if let Err(e) = remove_dir(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove worker cgroup");
            }
        }
    }
}

/// The worker's memory limit reached, in words for an error, when it was.
pub fn limit_words(bytes: u64) -> String {
    format!(
        "it reached its memory limit of {} MB (the tenant's max_memory_mb, or the server's --worker-memory-mb)",
        bytes >> 20
    )
}

/// Controller `c`'s dir of `dirs`: the one dir on v2; on v1, one per hierarchy (memory, pids,
/// cpu, in that order).
fn of(dirs: &[PathBuf], version: Version, c: Controller) -> &Path {
    match version {
        Version::V2 => &dirs[0],
        Version::V1 => &dirs[c as usize],
    }
}

/// Writes a CPU weight (v2 scale) into cgroup `dir`.
fn write_weight(dir: &Path, version: Version, weight: u32) -> io::Result<()> {
    let (file, value) = match version {
        Version::V2 => ("cpu.weight", weight as u64),
        Version::V1 => ("cpu.shares", shares(weight)),
    };
    let path = dir.join(file);
    std::fs::write(&path, value.to_string()).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// v1 `cpu.shares` for a v2 weight: 1024 is the default of both scales' 100.
fn shares(weight: u32) -> u64 {
    (weight as u64 * 1024 / 100).max(2)
}

/// A `name N` line's number from `memory.events` or `memory.oom_control`.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// SIGKILL to every process in `dir` (v2 `cgroup.kill` where the kernel has it), waiting up to
/// 2 s for them to go.
fn empty(dir: &Path, version: Version) {
    if version == Version::V2 && std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
    } else {
        for pid in procs(dir) {
            // SAFETY: kill has no memory preconditions; ESRCH is harmless.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    for _ in 0..40 {
        if procs(dir).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn procs(dir: &Path) -> Vec<libc::pid_t> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// rmdir, retried briefly: a cgroup stays busy for a moment after its last process exits.
fn remove_dir(dir: &Path) -> io::Result<()> {
    let mut last = Ok(());
    for _ in 0..20 {
        last = std::fs::remove_dir(dir);
        match &last {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    last
}

/// The server's own cgroup dir(s), under `root` (the file system root; a test's fake tree):
/// the v2 one when the unified hierarchy has the memory, pids and cpu controllers, else the
/// v1 memory, pids and cpu ones.
fn locate(own: &str, mountinfo: &str, root: &Path) -> Result<(Version, Vec<PathBuf>), String> {
    let under = |mount: &str, path: &str| root.join(mount.trim_start_matches('/')).join(path.trim_start_matches('/'));
    let mounts: Vec<(&str, &str, &str)> = mountinfo
        .lines()
        .filter_map(|line| {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let superopts = right.nth(1).unwrap_or("");
            Some((point, fstype, superopts))
        })
        .collect();
    let groups: Vec<(&str, &str)> = own
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?, parts.next()?))
        })
        .collect();
    let wanted = ["memory", "pids", "cpu"];
    if let (Some((point, _, _)), Some((_, path))) =
        (mounts.iter().find(|m| m.1 == "cgroup2"), groups.iter().find(|(c, _)| c.is_empty()))
    {
        let dir = under(point, path);
        let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
        let have: Vec<&str> = controllers.split_whitespace().collect();
        if wanted.iter().all(|c| have.contains(c)) {
            return Ok((Version::V2, vec![dir]));
        }
    }
    let mut dirs = Vec::new();
    for c in wanted {
        let mount = mounts.iter().find(|(_, fstype, opts)| *fstype == "cgroup" && opts.split(',').any(|o| o == c));
        let path = groups.iter().find(|(cs, _)| cs.split(',').any(|x| x == c));
        match (mount, path) {
            (Some((point, _, _)), Some((_, path))) => dirs.push(under(point, path)),
            _ => {
                return Err(format!(
                    "no cgroup with the memory, pids and cpu controllers: not in the unified hierarchy, and no v1 {c} hierarchy"
                ))
            }
        }
    }
    Ok((Version::V1, dirs))
}

/// Removes what an older server left beside `parent` (the workers' parent in the cpu
/// hierarchy) for its killed workers, where it is empty.
fn remove_old_dying(parent: &Path) {
    let dir = parent.with_file_name(OLD_DYING);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        entries.flatten().filter(|e| e.path().is_dir()).for_each(|e| drop(std::fs::remove_dir(e.path())));
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Makes `<own>/browserpool` with the memory, pids and cpu controllers for its children. Where
/// `own` holds this server and so may not pass controllers down, the server moves into
/// `<own>/browserpool-server` first.
fn setup_v2(own: &Path) -> Result<PathBuf, String> {
    let enable = |dir: &Path| std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids +cpu");
    let at = |dir: &Path, e: io::Error| format!("{}: {e}", dir.display());
    if let Err(e) = enable(own) {
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(at(own, e));
        }
        let leaf = own.join(SERVER_LEAF);
        std::fs::create_dir_all(&leaf).map_err(|e| at(&leaf, e))?;
        std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string()).map_err(|e| at(&leaf, e))?;
        enable(own).map_err(|e| at(own, e))?;
    }
    let parent = own.join(PARENT);
    std::fs::create_dir_all(&parent).map_err(|e| at(&parent, e))?;
    enable(&parent).map_err(|e| at(&parent, e))?;
    Ok(parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/pids rw,relatime shared:10 - cgroup cgroup rw,pids
32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
33 25 0:29 / /sys/fs/cgroup/unified rw,relatime shared:12 - cgroup2 cgroup2 rw
";
    const V1_OWN: &str = "8:pids:/\n4:memory:/jobs/42\n2:cpu,cpuacct:/\n0::/\n";
    const V2_MOUNTS: &str = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

    #[test]
    fn v1_hierarchies_are_found_per_controller() {
        let root = tempfile::tempdir().unwrap();
        let (version, dirs) = locate(V1_OWN, V1_MOUNTS, root.path()).unwrap();
        assert_eq!(version, Version::V1);
        let rel: Vec<_> = dirs.iter().map(|d| d.strip_prefix(root.path()).unwrap().to_path_buf()).collect();
        assert_eq!(
            rel,
            [
                PathBuf::from("sys/fs/cgroup/memory/jobs/42"),
                PathBuf::from("sys/fs/cgroup/pids"),
                PathBuf::from("sys/fs/cgroup/cpu,cpuacct")
            ]
        );
        let e = locate(V1_OWN, &V1_MOUNTS.replace("rw,pids", "rw,blkio"), root.path()).unwrap_err();
        assert!(e.contains("no v1 pids hierarchy"), "{e}");
    }

    #[test]
    fn v2_is_used_only_with_its_controllers() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("sys/fs/cgroup/system.slice/bp.service");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("cgroup.controllers"), "cpuset cpu io memory\n").unwrap();
        let e = locate("0::/system.slice/bp.service\n", V2_MOUNTS, root.path()).unwrap_err();
        assert!(e.contains("no cgroup with the memory, pids and cpu controllers"), "{e}");
        std::fs::write(own.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        assert_eq!(locate("0::/system.slice/bp.service\n", V2_MOUNTS, root.path()).unwrap(), (Version::V2, vec![own]));
    }

    #[test]
    fn v2_setup_enables_controllers_down_to_the_workers() {
        let own = tempfile::tempdir().unwrap();
        let parent = setup_v2(own.path()).unwrap();
        assert_eq!(parent, own.path().join("browserpool"));
        for dir in [own.path(), &parent] {
            assert_eq!(std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap(), "+memory +pids +cpu");
        }
    }

    /// A fake tree stands for the kernel's files: what is written where, per version.
    fn fake(version: Version) -> (tempfile::TempDir, Cgroups) {
        let root = tempfile::tempdir().unwrap();
        let parents: Vec<PathBuf> = match version {
            Version::V2 => vec![root.path().join("browserpool")],
            Version::V1 => ["memory", "pids", "cpu"].iter().map(|c| root.path().join(c).join("browserpool")).collect(),
        };
        parents.iter().for_each(|p| std::fs::create_dir_all(p).unwrap());
        let boost =
            Arc::new(ParentBoost { dir: of(&parents, version, Controller::Cpu).into(), version, kills: Mutex::new(0) });
        let cgroups = Cgroups { version, parents, default_memory: 1536 << 20, pids_max: 4096, boost };
        (root, cgroups)
    }

    #[test]
    fn a_worker_gets_a_spares_fences_then_its_tenants() {
        for version in [Version::V2, Version::V1] {
            let (root, cgroups) = fake(version);
            let w = cgroups.create(9301).unwrap();
            let read = |rel: &str| std::fs::read_to_string(root.path().join(rel)).unwrap();
            match version {
                Version::V2 => {
                    assert_eq!(read("browserpool/w9301/memory.max"), (1536u64 << 20).to_string());
                    assert_eq!(read("browserpool/w9301/memory.swap.max"), "0");
                    assert_eq!(read("browserpool/w9301/pids.max"), "4096");
                    assert_eq!(read("browserpool/w9301/cpu.weight"), "100");
                }
                Version::V1 => {
                    assert_eq!(read("memory/browserpool/w9301/memory.limit_in_bytes"), (1536u64 << 20).to_string());
                    assert_eq!(read("pids/browserpool/w9301/pids.max"), "4096");
                    assert_eq!(read("cpu/browserpool/w9301/cpu.shares"), "1024");
                }
            }
            // A spare, once its Chromium runs, at the lowest weight.
            w.set_cpu_weight(SPARE_WEIGHT).unwrap();
            let spare = match version {
                Version::V2 => read("browserpool/w9301/cpu.weight"),
                Version::V1 => read("cpu/browserpool/w9301/cpu.shares"),
            };
            assert_eq!(spare, if version == Version::V2 { "1" } else { "10" });
            let events = match version {
                Version::V2 => "browserpool/w9301/memory.events",
                Version::V1 => "memory/browserpool/w9301/memory.oom_control",
            };
            std::fs::write(root.path().join(events), "oom 0\noom_kill 2\n").unwrap();
            w.set_memory(256 << 20).unwrap();
            assert_eq!(w.limit_reached(), None, "kills before the limit was set are not this tenant's");
            std::fs::write(root.path().join(events), "oom 1\noom_kill 3\n").unwrap();
            assert_eq!(w.limit_reached(), Some(256 << 20));
            // What it holds that reclaim cannot drop: anonymous and shared memory, not the
            // page cache (each version's own `memory.stat` names).
            let (stat, text) = match version {
                Version::V2 => ("browserpool/w9301/memory.stat", "anon 3000\nfile 9000\nkernel 7\nshmem 200\n"),
                Version::V1 => {
                    ("memory/browserpool/w9301/memory.stat", "cache 9000\nrss 3000\nrss_huge 0\nshmem 200\n")
                }
            };
            assert_eq!(w.memory_used(), None, "no memory.stat yet");
            std::fs::write(root.path().join(stat), text).unwrap();
            assert_eq!(w.memory_used(), Some(3200));
            // The kernel makes `cgroup.procs`; the fake tree must.
            w.dirs.iter().for_each(|d| std::fs::write(d.join("cgroup.procs"), "").unwrap());
            assert_eq!(w.open_procs().unwrap().len(), if version == Version::V2 { 1 } else { 3 });
            // Condemned, it and the parent take the highest weight, the parent until the last
            // kill running ends; no process moves.
            let (cpu, parent, file) = match version {
                Version::V2 => ("browserpool/w9301", "browserpool", "cpu.weight"),
                Version::V1 => ("cpu/browserpool/w9301", "cpu/browserpool", "cpu.shares"),
            };
            let (dying, default) = if version == Version::V2 { ("10000", "100") } else { ("102400", "1024") };
            let weights = || (read(&format!("{cpu}/{file}")), read(&format!("{parent}/{file}")));
            let first = w.condemn().unwrap();
            assert_eq!(weights(), (dying.to_string(), dying.to_string()));
            let other = cgroups.create(9302).unwrap().condemn().unwrap();
            drop(first);
            assert_eq!(weights().1, dying, "another kill still runs");
            drop(other);
            assert_eq!(weights().1, default);
        }
    }

    #[test]
    fn a_dead_servers_worker_cgroups_are_removed_and_a_held_ports_kept() {
        for version in [Version::V2, Version::V1] {
            let (root, cgroups) = fake(version);
            // The fake's dirs are plain: what the kernel's cgroup files would be is left out.
            for parent in &cgroups.parents {
                for name in ["w9400", "w9401", "probe-7", "wx", "w09403"] {
                    std::fs::create_dir(parent.join(name)).unwrap();
                }
            }
            // w9402 in the cpu hierarchy alone (v2's one parent is it): a server killed while
            // it made that worker's cgroups.
            std::fs::create_dir(of(&cgroups.parents, version, Controller::Cpu).join("w9402")).unwrap();
            let mut asked = Vec::new();
            let removed = cgroups.remove_unheld(|port| {
                asked.push(port);
                (port != 9401).then_some(())
            });
            assert_eq!(asked, [9400, 9401, 9402]);
            assert_eq!(removed, 2);
            for parent in &cgroups.parents {
                let mut left: Vec<String> =
                    std::fs::read_dir(parent).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
                left.sort();
                assert_eq!(left, ["probe-7", "w09403", "w9401", "wx"], "{}", parent.display());
            }
            drop(root);
        }
    }

    #[test]
    fn counters_and_shares() {
        assert_eq!(counter("low 0\nhigh 3\nmax 9\noom 2\noom_kill 1\n", "oom_kill"), 1);
        assert_eq!(counter("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n", "oom_kill"), 7);
        assert_eq!(counter("", "oom_kill"), 0);
        assert_eq!((shares(100), shares(1), shares(10000)), (1024, 10, 102400));
        assert!(limit_words(256 << 20).contains("memory limit of 256 MB"));
    }
}
