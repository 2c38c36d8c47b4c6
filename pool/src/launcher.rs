//! Finding and launching Chromium: one process group, one profile and one CDP port per worker.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::Browser;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tracing::Instrument;

use crate::cgroup::{Cgroups, WorkerCgroup};
use crate::error::PoolError;
use crate::lock::PortLock;
use crate::lock::PortRange;
use crate::netns::{Gate, NetNs};
use crate::procfs::{group_pids, pid_exited};
use crate::sandbox::{kill_uid, UidRange};
use crate::sync::lock;
use crate::task::OwnedTask;

/// Executable names tried on PATH when `--chrome` is not given, in order.
pub const CHROME_NAMES: &[&str] = &["chromium", "chromium-browser", "google-chrome"];

/// The literal of [`DISABLED_FEATURES`], for `concat!` in [`CHROME_FLAGS`].
macro_rules! disabled_features {
    () => {
        "WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup,SpareRendererForSitePerProcess"
    };
}

/// The Chromium features every worker runs without (its `--disable-features`). Headless
/// Chromium is the whole browser with its windows unseen: every window (each browser context
/// of a shared browser opens one, as does every worker at boot) preloads the omnibox's WebUI
/// popups in a renderer of their own, about 300 ms of CPU on a 2-core host, more than the
/// page itself; nobody can type into that omnibox. The spare renderer Chromium keeps ready
/// for the next navigation is thrown away whenever the next navigation is in another browser
/// context, as it is from one session to the next; a session's tab is opened ahead, so its
/// first navigation has a renderer already.
pub const DISABLED_FEATURES: &str = disabled_features!();

/// Flags every worker gets. The background-networking ones keep Chromium from calling out
/// (these machines have no network, and a pool must not phone home anyway).
pub const CHROME_FLAGS: &[&str] = &[
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    // Chromium keeps only the last `--disable-features`: this is the only one.
    concat!("--disable-features=", disabled_features!()),
];

/// Written into every profile before launch: no preconnect or DNS prefetch (a page must not
/// open connections it did not ask for), and WebRTC only through the proxy, never over
/// non-proxied UDP, so ICE cannot reach an address the egress proxy would refuse.
const PREFERENCES: &str = r#"{"net":{"network_prediction_options":2},"webrtc":{"ip_handling_policy":"disable_non_proxied_udp","multiple_routes_enabled":false,"nonproxied_udp_enabled":false}}"#;

/// Finds the Chromium executable: `explicit` if given, else the first of [`CHROME_NAMES`]
/// on PATH.
pub fn find_chrome(explicit: Option<&Path>) -> Result<PathBuf, PoolError> {
    if let Some(path) = explicit {
        if is_executable(path) {
            return Ok(path.to_path_buf());
        }
        if path.components().count() == 1 {
            if let Some(found) = search_path(&path.to_string_lossy()) {
                return Ok(found);
            }
        }
        return Err(PoolError::BadChromium(path.display().to_string()));
    }
    CHROME_NAMES
        .iter()
        .find_map(|name| search_path(name))
        .ok_or_else(|| PoolError::NoChromium { tried: CHROME_NAMES.join(", ") })
}

fn search_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// How workers are launched.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    /// The Chromium executable.
    pub chrome: PathBuf,
    /// Profiles live under `<profiles_dir>/port-<N>`.
    pub profiles_dir: PathBuf,
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
}

/// A running Chromium process: its group, its port lock and its profile. Dropping it kills
/// the whole group and deletes the profile, so a worker can never outlive its owner's handle.
#[derive(Debug)]
pub(crate) struct Process {
    child: Child,
    pgid: libc::pid_t,
    pub(crate) lock: Option<PortLock>,
    /// The only way into DevTools when the worker has its own network namespace.
    gate: Option<Gate>,
    /// Drains Chromium's stderr; ends with the pipe, or with the process value.
    stderr: Option<OwnedTask>,
    pub(crate) profile: PathBuf,
    tmp: PathBuf,
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
    pub(crate) fn pid(&self) -> u32 {
        self.pgid as u32
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
    pub(crate) async fn kill(mut self) {
        // Everything the browser started is in its cgroup, which its uid may not leave: kill
        // and wait on the cgroup's own list. Without one (or if that list does not empty),
        // every process naming the profile or of the uid, found in `/proc`. One hop to a
        // blocking thread for all of it: on a busy host each hop waits for a turn.
        let spawned = self.spawned();
        let left = tokio::task::spawn_blocking(move || {
            spawned.condemn();
            kill_group(spawned.pgid as libc::pid_t);
            spawned.cgroup.map(|cgroup| cgroup.kill_and_wait(Duration::from_secs(5)))
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
        let (profile, tmp, cgroup, lock) =
            (self.profile.clone(), self.tmp.clone(), self.cgroup.take(), self.lock.take());
        let cleanup = move || {
            for dir in [profile, tmp] {
                remove_dir_retried(&dir);
            }
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            drop(lock);
        };
        match &self.cleanups {
            Some(tracker) => drop(tracker.spawn_blocking(cleanup)),
            None => cleanup(),
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

    fn signal_all(&self) {
        if let Some(cgroup) = &self.cgroup {
            let _ = cgroup.condemn();
        }
        kill_group(self.pgid);
        kill_strays(&self.profile);
        if let Some(uid) = self.uid {
            kill_uid(uid, false);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.killed {
            self.signal_all();
            let _ = std::fs::remove_dir_all(&self.profile);
            let _ = std::fs::remove_dir_all(&self.tmp);
            // The cgroup goes once the killed processes have left it (which takes a moment):
            // on a thread of its own, as drop may not wait.
            if let Some(cgroup) = self.cgroup.take() {
                let _ = std::thread::Builder::new().name("cgroup-remove".into()).spawn(move || cgroup.remove());
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

/// Reads Chromium's stderr up to its `DevTools listening on` line, and returns the endpoint;
/// the other lines (but dbus noise) go to `seen`, for the error when there is none.
async fn devtools_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    seen: &mut Vec<String>,
) -> Option<String> {
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(rest) = line.split("DevTools listening on ").nth(1) {
            return Some(rest.trim().to_string());
        }
        if !line.contains("dbus") {
            seen.push(line);
        }
    }
    None
}

/// Kills every Chromium a previous server left under `profiles_dir` (a server killed without
/// cleaning up: SIGKILL, OOM, power loss) and deletes their profiles and temp dirs. Call only
/// while holding the data dir's [`crate::lock::DirLock`], before any worker starts. Returns
/// how many processes it killed.
pub fn reap_orphans(profiles_dir: &Path) -> usize {
    let mut needle = profiles_dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    let killed = kill_naming(&needle);
    if killed > 0 {
        // SIGKILL is delivered at once, but a process exits when the kernel gets to it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while count_naming(&needle) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for entry in std::fs::read_dir(profiles_dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if let Some(port) = name.to_str().and_then(|n| n.strip_prefix("port-")).and_then(|p| p.parse::<u16>().ok()) {
            let _ = std::fs::remove_dir_all(worker_tmp(port));
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
    killed
}

/// The pids whose command line contains `needle`.
fn pids_naming(needle: &[u8]) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id() as libc::pid_t;
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (pid != me && cmdline.windows(needle.len()).any(|w| w == needle)).then_some(pid)
        })
        .collect()
}

fn count_naming(needle: &[u8]) -> usize {
    pids_naming(needle).into_iter().filter(|pid| !pid_exited(*pid as u32)).count()
}

/// SIGKILLs every process whose command line contains `needle`, and its process group (a
/// worker's renderers need not name its profile, but share its group); returns how many
/// processes named it.
fn kill_naming(needle: &[u8]) -> usize {
    let pids = pids_naming(needle);
    // SAFETY: getpgid/kill/killpg on pids we just read; a race with pid reuse would need the
    // new process to name the same browserpool directory. Our own group is never signalled.
    unsafe {
        let ours = libc::getpgid(0);
        for pid in &pids {
            let group = libc::getpgid(*pid);
            if group > 1 && group != ours {
                libc::killpg(group, libc::SIGKILL);
            }
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    pids.len()
}

/// Kills processes outside the group that still name this profile (Chromium's crashpad
/// handlers start their own sessions; `HOME` points into the profile so they name it).
fn kill_strays(profile: &Path) {
    // With the trailing slash `.../port-930/` never matches `.../port-9300/`.
    let mut needle = profile.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    kill_naming(&needle);
}

/// Deletes a worker's directory, retrying a failed delete (a file still held open by a
/// process on its way out, a transient I/O error) for up to [`REMOVE_TRIES`] attempts, and
/// counts every retry in [`CLEANUP_RETRIES`].
fn remove_dir_retried(dir: &Path) {
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
        raise_priority(self.pgid);
        if let Some(cgroup) = &self.cgroup {
            if let Err(e) = cgroup.set_cpu_weight(crate::cgroup::LEASED_WEIGHT) {
                tracing::warn!(error = %e, "could not raise a worker's cpu weight");
            }
        }
    }

    /// Readies the group for its kill: every process moves to the cgroup of the dying, or,
    /// where there are no cgroups (or the move failed), every thread back to normal
    /// scheduling. Blocking.
    pub(crate) fn condemn(&self) {
        let moved = self.cgroup.as_ref().map(|cgroup| cgroup.condemn());
        match moved {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "could not move a killed worker to the cgroup of the dying");
                raise_priority(self.pgid);
            }
            None => raise_priority(self.pgid),
        }
    }
}

/// Puts every thread of process group `pgid` back at normal priority (`SCHED_OTHER`; see
/// [`launch`]). Twice over `/proc`, for threads started while the first pass ran.
/// Blocking.
pub(crate) fn raise_priority(pgid: u32) {
    let param = libc::sched_param { sched_priority: 0 };
    for _ in 0..2 {
        for pid in group_pids(pgid) {
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

/// The worker temp dir of a port: `/tmp/browserpool-w<port>`.
fn worker_tmp(port: u16) -> PathBuf {
    PathBuf::from(format!("/tmp/browserpool-w{port}"))
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
/// Chromium runs inside that namespace and CDP is reached through a [`Gate`].
pub(crate) async fn launch(
    cfg: &LaunchConfig,
    worker: &str,
    proxy: &str,
    netns: Option<NetNs>,
    egress: &std::sync::Arc<crate::egress::Egress>,
    spawned: &(dyn Fn(Spawned) + Send + Sync),
    cleanups: &tokio_util::task::TaskTracker,
) -> Result<Launched, PoolError> {
    crate::sandbox::prepare_profiles_dir(&cfg.profiles_dir, cfg.worker_uids.is_some()).map_err(PoolError::Launch)?;
    let lock = take_port(cfg).await?;
    let port = lock.port();
    let uid = cfg.worker_uids.map(|uids| uids.uid_for_port(port));
    let profile = cfg.profiles_dir.join(format!("port-{port}"));
    // A profile left by a crashed server that held this port is stale: start clean.
    if profile.exists() {
        tokio::fs::remove_dir_all(&profile).await?;
    }
    // Owner only: profiles hold a tenant's cookies and storage, the temp dir Chromium's sockets.
    let private = || {
        let mut b = tokio::fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b
    };
    let home = profile.join("home");
    private().create(&home).await?;
    let default_profile = profile.join("chrome").join("Default");
    private().create(&default_profile).await?;
    tokio::fs::write(default_profile.join("Preferences"), PREFERENCES).await?;
    // Chromium puts unix sockets in TMPDIR, and a socket path must fit in 108 bytes, so the
    // worker's own temp dir is short and fixed per port (the port lock makes it ours).
    let tmp = worker_tmp(port);
    if tmp.exists() {
        tokio::fs::remove_dir_all(&tmp).await?;
    }
    private().create(&tmp).await?;
    // Its cgroup, made before the spawn so that Chromium's first instruction already runs
    // inside its fences.
    let cgroup = match &cfg.cgroups {
        Some(cgroups) => {
            let cgroups = cgroups.clone();
            let made = tokio::task::spawn_blocking(move || cgroups.create(port))
                .await
                .map_err(|e| PoolError::Launch(format!("cgroup task: {e}")))?
                .map_err(|e| PoolError::Launch(format!("worker cgroup: {e}")))?;
            Some(std::sync::Arc::new(made))
        }
        None => None,
    };
    // Everything the worker writes is its own uid's, and nobody else's (owner only, above).
    if let Some(uid) = uid {
        let chrome = profile.join("chrome");
        for path in [&profile, &home, &chrome, &default_profile, &default_profile.join("Preferences"), &tmp] {
            std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
        }
    }

    let mut cmd = Command::new(&cfg.chrome);
    if cfg.allow_unsandboxed {
        cmd.arg("--no-sandbox");
    }
    cmd.args(CHROME_FLAGS)
        .arg(format!("--user-data-dir={}", profile.join("chrome").display()))
        .arg(format!("--remote-debugging-port={port}"))
        .arg("--remote-debugging-address=127.0.0.1")
        // Nothing bypasses the proxy, loopback included (Chromium bypasses it by default).
        .arg(format!("--proxy-server={proxy}"))
        .arg("--proxy-bypass-list=<-loopback>")
        .arg("--force-webrtc-ip-handling-policy=disable_non_proxied_udp")
        .arg("about:blank")
        // Keep everything Chromium writes outside its user-data-dir inside the profile too.
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Every boot starts at idle priority (SCHED_IDLE, which every process and thread Chromium
    // starts inherits, and which its own nice values do not undo): a spare booting on a busy
    // host takes only CPU the sessions leave. The pool raises it when a caller waits for it,
    // and when it is leased ([`raise_priority`]).
    // SAFETY: sched_setscheduler is async-signal-safe; it runs in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let param = libc::sched_param { sched_priority: 0 };
            // Where the policy may not be set, the boot simply runs at normal priority.
            let _ = libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
            Ok(())
        });
    }
    // Kept open until the spawn returns: the child writes to them before it execs.
    let procs = cgroup.as_ref().map(|c| c.open_procs()).transpose()?.unwrap_or_default();
    if !procs.is_empty() {
        let fds: Vec<std::os::fd::RawFd> = procs.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
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
    if let Some(ns) = &netns {
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
    let spawn = spawn_on_keeper(cmd).await;
    drop(procs);
    let mut child = match spawn {
        Ok(child) => child,
        Err(e) => {
            if let Some(cgroup) = cgroup {
                let _ = tokio::task::spawn_blocking(move || cgroup.remove()).await;
            }
            return Err(PoolError::Launch(format!("spawn {}: {e}", cfg.chrome.display())));
        }
    };
    let pgid = child.id().map(|p| p as libc::pid_t).unwrap_or(0);
    spawned(Spawned { pgid: pgid as u32, cgroup: cgroup.clone() });
    let stderr = child.stderr.take();
    let mut process = Process {
        child,
        pgid,
        lock: Some(lock),
        gate: None,
        stderr: None,
        profile,
        tmp,
        uid,
        cgroup,
        cleanups: Some(cleanups.clone()),
        killed: false,
    };

    let Some(stderr) = stderr else {
        process.kill().await;
        return Err(PoolError::Launch("no stderr pipe".into()));
    };
    let mut lines = BufReader::new(stderr).lines();
    let mut seen: Vec<String> = Vec::new();
    let child = &mut process.child;
    let found = tokio::time::timeout(cfg.launch_timeout, async {
        // The browser's exit ends the wait even while a helper it started (crashpad) keeps
        // stderr open; what it wrote before is still read, briefly, for the error.
        tokio::select! {
            found = devtools_line(&mut lines, &mut seen) => found,
            _ = child.wait() => {
                tokio::time::timeout(Duration::from_millis(200), devtools_line(&mut lines, &mut seen)).await.ok().flatten()
            }
        }
    })
    .await;
    let mut ws_url = match found {
        Ok(Some(url)) => url,
        Ok(None) => {
            process.kill().await;
            let tail = seen.iter().rev().take(3).rev().cloned().collect::<Vec<_>>().join(" | ");
            return Err(PoolError::Launch(format!("chromium exited before printing its devtools endpoint: {tail}")));
        }
        Err(_) => {
            process.kill().await;
            return Err(PoolError::Launch(format!("no devtools endpoint within {:?}", cfg.launch_timeout)));
        }
    };
    if let Some(ns) = netns {
        // Chromium's port is inside the namespace: CDP goes through the gate, by the browser's
        // own path, which only this process has seen.
        let path = ws_url.find("/devtools/browser/").map(|i| ws_url[i..].to_string()).unwrap_or_default();
        match Gate::open(ns, port, path.clone(), egress.clone(), worker).await {
            Ok(gate) if !path.is_empty() => {
                ws_url = format!("ws://127.0.0.1:{}{path}", gate.port());
                process.gate = Some(gate);
            }
            Ok(_) => {
                process.kill().await;
                return Err(PoolError::Launch(format!("unexpected devtools endpoint {ws_url:?}")));
            }
            Err(e) => {
                process.kill().await;
                return Err(PoolError::Launch(format!("devtools gate: {e}")));
            }
        }
    }
    // Keep draining stderr so Chromium never blocks on a full pipe; ends when the process dies.
    process.stderr = Some(OwnedTask::spawn(
        async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::trace!(%line, "chromium stderr");
            }
        }
        .instrument(tracing::debug_span!("chromium_stderr", worker = %worker)),
    ));

    let handler_cfg = HandlerConfig {
        viewport: None,
        // Actions carry their own deadlines (up to 300 s, e.g. an awaited evaluate); the
        // handler's per-command timeout must not cut them short.
        request_timeout: Duration::from_secs(330),
        ..HandlerConfig::default()
    };
    let connected =
        tokio::time::timeout(cfg.cdp_timeout, Browser::connect_with_config(ws_url.clone(), handler_cfg)).await;
    let (browser, mut handler) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => {
            process.kill().await;
            return Err(PoolError::Cdp(format!("connect: {e}")));
        }
        Err(_) => {
            process.kill().await;
            return Err(PoolError::CdpTimeout { what: "connect", after: cfg.cdp_timeout });
        }
    };
    // The handler drives the CDP connection; it ends when the websocket closes, which is
    // how a browser that died is noticed at once.
    let (died_tx, died) = tokio::sync::watch::channel(None);
    let handler_task = OwnedTask::spawn(
        async move {
            while let Some(event) = handler.next().await {
                if let Err(e) = event {
                    tracing::debug!(error = %e, "cdp handler");
                }
            }
            died_tx.send_replace(Some("its DevTools connection closed".to_string()));
        }
        .instrument(tracing::debug_span!("cdp_handler", worker = %worker)),
    );
    Ok(Launched { process, browser, ws_url, handler_task, died })
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

async fn take_port(cfg: &LaunchConfig) -> Result<PortLock, PoolError> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || {
        let pid = std::process::id();
        for port in cfg.ports.start..=cfg.ports.end {
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

    #[test]
    fn explicit_missing_chrome_is_a_clear_error() {
        let err = find_chrome(Some(Path::new("/nonexistent/chrome"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/chrome"), "{err}");
    }
}
