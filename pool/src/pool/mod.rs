//! The warm pool: keeps `warm` workers booted with a blank page, hands them out as leases,
//! and kills and replaces each worker when its lease ends. At most `max_workers` Chromium
//! processes exist at once (warm + booting + leased).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::cgroup::WorkerCgroup;
use crate::driver::{Driver, DriverConfig};
use crate::egress::{Egress, EgressConfig, Proxy, WorkerNet};
use crate::error::PoolError;
use crate::launcher::{launch, LaunchConfig, Process, Spawned};
use crate::netns::NetNs;
use crate::outcome::Viewport;
use crate::sandbox::SandboxReport;
use crate::sync::lock;
use crate::task::OwnedTask;

mod boot;
mod files;
mod lease;
mod shared;
mod worker;

use boot::{raise_aside, waited_for};
pub use files::remove_files_dir;
pub use lease::Lease;
use lease::{ContextLease, Held, Pending};
use shared::{take_idle_shared, SharedBrowser};
use worker::Worker;

/// Identifies one Chromium worker for its whole life (boot to kill).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub String);

impl WorkerId {
    fn new() -> Self {
        WorkerId(format!("w-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]))
    }
}

impl std::fmt::Display for WorkerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a session asks of the worker it leases.
#[derive(Debug, Clone, Default)]
pub struct LeaseSpec {
    /// How long to wait for a free worker.
    pub wait: Duration,
    /// The session's viewport, set before the lease is handed out.
    pub viewport: Viewport,
    /// Its memory limit in bytes, where workers have cgroups; `None`: the server's default,
    /// which every spare has.
    pub memory: Option<u64>,
    /// Whether the session is recorded (see [`Lease::take_recording`]).
    pub record: bool,
    /// How its browser presents itself (checked by the caller with `Emulation::check`).
    pub emulation: crate::emulation::Emulation,
}

/// Pool sizing and launch settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// How workers are launched.
    pub launch: LaunchConfig,
    /// Workers kept booted and idle, ready to lease.
    pub warm: usize,
    /// Cap on Chromium processes (warm + booting + leased).
    pub max_workers: usize,
    /// Largest `load_html` document, in bytes.
    pub max_html_bytes: usize,
    /// What every worker's egress proxy refuses whatever the policy, and fixed name answers.
    /// The pool adds its own CDP port range to the refused ports.
    pub egress: EgressConfig,
    /// Most tabs a session may have open, popups included.
    pub max_tabs: usize,
    /// When a tenant's shared browser (context isolation) is replaced.
    pub shared: SharedConfig,
    /// How long a browser may leave a DevTools probe unanswered before it counts as dead
    /// (frozen: stopped, deadlocked, or starved beyond use).
    pub unresponsive_after: Duration,
}

/// When a Chromium that a tenant's context sessions share is replaced by a fresh one. A
/// browser being replaced takes no new session and is killed once its last session ends.
#[derive(Debug, Clone)]
pub struct SharedConfig {
    /// Sessions it serves before it is replaced (its heap and caches only grow).
    pub recycle_after: u64,
    /// Its memory (PSS over its processes) past which it is replaced, read as each session
    /// ends.
    pub memory_ceiling: u64,
    /// How long it is kept with no session before it is killed.
    pub idle: Duration,
}

impl Default for SharedConfig {
    fn default() -> Self {
        SharedConfig { recycle_after: 200, memory_ceiling: 2 << 30, idle: Duration::from_secs(300) }
    }
}

/// Where a worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// Booted, blank page loaded, waiting for a lease.
    Warm,
    /// Handed to a session.
    Leased,
}

/// One worker as the ops console sees it.
#[derive(Debug, Clone)]
pub struct WorkerStatus {
    pub id: WorkerId,
    pub state: WorkerState,
    pub pid: u32,
    pub cdp_port: u16,
    pub started_at: SystemTime,
}

/// A snapshot of the pool.
#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub workers: Vec<WorkerStatus>,
    pub warm: usize,
    pub booting: usize,
    pub leased: usize,
    pub capacity: usize,
}

#[derive(Default)]
struct State {
    warm: VecDeque<Worker>,
    /// Each context-isolated tenant's current shared browser (one being replaced is no
    /// longer here; its sessions hold it until they end).
    shared: HashMap<String, Arc<SharedBrowser>>,
    booting: usize,
    /// Callers holding a slot but not yet a worker.
    pending: usize,
    /// Process groups of the boots in flight, once spawned: raised from idle priority when a
    /// caller waits for them.
    booting_groups: HashMap<WorkerId, Spawned>,
    leased: HashMap<WorkerId, WorkerStatus>,
    closed: bool,
    /// Why the last boot failed, while boots fail (cleared by the next that succeeds).
    last_boot_error: Option<String>,
    /// Boots that failed in a row; 0 once one succeeds.
    failed_boots: u32,
    /// While boots fail, no boot starts before this (see [`boot::boot_backoff`]).
    retry_at: Option<tokio::time::Instant>,
}

struct Inner {
    cfg: PoolConfig,
    egress: Arc<Egress>,
    state: Mutex<State>,
    /// One permit per lease, FIFO, so waiters are served in arrival order.
    slots: Arc<Semaphore>,
    /// Signalled when a worker turns warm.
    warm_ready: Notify,
    /// Signalled when the refill loop should look again.
    refill: Notify,
    /// Turns true when the server stops; waiting leases give up at once.
    shutdown: CancellationToken,
    /// Cancelled by [`Pool::shutdown`] too (a child of `shutdown`): ends the shared browsers'
    /// idle timers, so shutdown does not wait them out.
    closing: CancellationToken,
    /// The refill loop and every boot: shutdown waits for them.
    tasks: TaskTracker,
    /// Killed workers' directory and cgroup removals: shutdown waits for them, bounded.
    cleanups: TaskTracker,
    /// What the check of the first worker booted found (`None` until one has booted).
    sandbox: watch::Sender<Option<SandboxReport>>,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock is a bug; the state itself stays consistent.
        lock(&self.state)
    }
}

/// The warm pool. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Creates the pool and starts its refill loop, which ends when `shutdown` is cancelled.
    pub fn start(cfg: PoolConfig, shutdown: CancellationToken) -> Pool {
        // Decided (and said) once, before the first boot.
        crate::launcher::idle_boots();
        match files::reset_root(&cfg.launch.disk_dir) {
            // Said here; each lease then fails naming the directory it could not make.
            Err(e) => {
                tracing::error!(dir = %cfg.launch.disk_dir.display(), error = %e, "sessions' files directory cannot be made")
            }
            // Whether this server may mount its workers' tmpfs, decided (and said) before the first boot.
            Ok(root) if cfg.launch.profile_mb > 0 => crate::launcher::check_mounts(&root),
            Ok(_) => {}
        }
        let max = cfg.max_workers.max(1);
        let mut egress = cfg.egress.clone();
        egress.reserved_ports.push(cfg.launch.ports.ports());
        let egress = Arc::new(Egress::new(egress));
        let inner = Arc::new(Inner {
            egress,
            cfg: PoolConfig { max_workers: max, ..cfg },
            state: Mutex::new(State::default()),
            slots: Arc::new(Semaphore::new(max)),
            warm_ready: Notify::new(),
            refill: Notify::new(),
            closing: shutdown.child_token(),
            shutdown: shutdown.clone(),
            tasks: TaskTracker::new(),
            cleanups: TaskTracker::new(),
            sandbox: watch::channel(None).0,
        });
        let pool = Pool { inner };
        let looped = pool.clone();
        let tasks = looped.inner.tasks.clone();
        tasks.spawn(looped.refill_loop(shutdown).instrument(tracing::info_span!("pool_refill")));
        pool
    }

    /// Leases a warm worker, waiting up to `spec.wait` for one to be free.
    ///
    /// Dropping the returned future while it waits leaks nothing: the slot is returned and the
    /// worker it would have taken stays warm.
    pub async fn lease(&self, spec: LeaseSpec) -> Result<Lease, PoolError> {
        tokio::select! {
            result = self.lease_inner(spec) => result,
            _ = self.inner.shutdown.cancelled() => Err(PoolError::ShuttingDown),
        }
    }

    async fn lease_inner(
        &self,
        LeaseSpec { wait, viewport, memory, record, emulation }: LeaseSpec,
    ) -> Result<Lease, PoolError> {
        let deadline = tokio::time::Instant::now() + wait;
        let permit = match tokio::time::timeout_at(deadline, self.inner.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(PoolError::ShuttingDown),
            Err(_) => return Err(PoolError::Exhausted(wait)),
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let worker = self.take_warm(left).await?;
        let fenced = self.fence_memory(&worker, memory);
        let lease = Lease {
            pool: self.clone(),
            held: Some(Held::Own(Box::new(worker))),
            files: Default::default(),
            recording: None,
            _permit: permit,
        };
        fenced?;
        let lease = lease.with_files().await?.with_viewport(viewport).await?.with_emulation(emulation).await?;
        lease.with_recording(record, viewport).await
    }

    /// Takes a warm worker (counted as leased from then on), waiting up to `wait` for one,
    /// and past it for one booting for the caller. The caller holds a slot.
    async fn take_warm(&self, wait: Duration) -> Result<Worker, PoolError> {
        let deadline = tokio::time::Instant::now() + wait;
        // Counted as pending (so refill boots one for us) only once no warm worker is there;
        // counting earlier would make refill boot a spare on every lease.
        let mut pending: Option<Pending<'_>> = None;
        // With a slot ours, a worker booting for us is waited for past `wait` (so `wait` 0 on
        // a pool with room gets a browser, not a refusal), for as long as a boot may take;
        // unless boots fail, which the caller is told once its own wait is over.
        let boot_bound = self.inner.cfg.launch.launch_timeout + self.inner.cfg.launch.cdp_timeout;
        let mut boot_deadline = None;
        loop {
            let notified = self.inner.warm_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (worker, failing) = {
                let mut state = self.inner.state();
                if state.closed {
                    return Err(PoolError::ShuttingDown);
                }
                let mut found = None;
                while let Some(mut w) = state.warm.pop_front() {
                    if w.process.exited() {
                        tracing::warn!(worker = %w.id, "warm worker died while idle");
                        self.inner.tasks.spawn(w.kill());
                        continue;
                    }
                    state.leased.insert(w.id.clone(), w.status(WorkerState::Leased));
                    found = Some(w);
                    break;
                }
                (found, state.last_boot_error.clone())
            };
            if let Some(worker) = worker {
                self.inner.refill.notify_one();
                // It booted at idle priority; serving a session, it runs at normal.
                raise_aside(worker.process.spawned());
                let state = self.inner.state();
                if waited_for(&state) {
                    state.booting_groups.values().cloned().for_each(raise_aside);
                }
                return Ok(worker);
            }
            if pending.is_none() {
                pending = Some(Pending::new(&self.inner));
                // A caller waits: the boots in flight are no longer spares.
                let groups: Vec<Spawned> = self.inner.state().booting_groups.values().cloned().collect();
                groups.into_iter().for_each(raise_aside);
                self.inner.refill.notify_one();
            }
            let now = tokio::time::Instant::now();
            let boot_deadline = *boot_deadline.get_or_insert(deadline.max(now + boot_bound));
            if now >= deadline {
                if let Some(error) = failing {
                    return Err(PoolError::BootFailing(error));
                }
                if now >= boot_deadline {
                    return Err(PoolError::NotBooted(boot_bound));
                }
            }
            // Woken by every boot that ends, warm or failed.
            let _ = tokio::time::timeout_at(if now < deadline { deadline } else { boot_deadline }, notified).await;
        }
    }

    /// What caps each worker's memory, tasks and CPU (its cgroup), and what its pages can
    /// store (its profile's tmpfs), in words; `None` with neither.
    pub fn resource_fence(&self) -> Option<String> {
        let launch = &self.inner.cfg.launch;
        let disk =
            (launch.profile_mb > 0 && crate::launcher::profiles_capped().is_ok()).then(|| match &launch.cgroups {
                Some(_) => format!(
                    "profile: a tmpfs of {} MiB (a quarter of the worker's memory limit, at most {} MiB)",
                    launch.disk_mb(None),
                    launch.profile_mb
                ),
                None => format!("profile: a tmpfs of {} MiB", launch.profile_mb),
            });
        let fences: Vec<String> = launch.cgroups.as_ref().map(|c| c.describe()).into_iter().chain(disk).collect();
        (!fences.is_empty()).then(|| fences.join("; "))
    }

    /// What the check of the first worker booted found, once one has booted.
    pub fn sandbox(&self) -> Option<SandboxReport> {
        self.inner.sandbox.borrow().clone()
    }

    /// Waits up to `within` for [`Pool::sandbox`], or for a boot to fail; for startup.
    pub async fn sandbox_checked(&self, within: Duration) -> Option<SandboxReport> {
        let mut report = self.inner.sandbox.subscribe();
        let failed = async {
            loop {
                let notified = self.inner.warm_ready.notified();
                if self.last_boot_error().is_some() {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(within, async {
            tokio::select! {
                _ = report.wait_for(Option::is_some) => {}
                _ = failed => {}
            }
        })
        .await;
        self.sandbox()
    }

    /// Why the last boot failed, if the last boot failed (for readiness and logs).
    pub fn last_boot_error(&self) -> Option<String> {
        self.inner.state().last_boot_error.clone()
    }

    /// A snapshot of every worker.
    pub fn status(&self) -> PoolStatus {
        let state = self.inner.state();
        let mut workers: Vec<WorkerStatus> = state.warm.iter().map(|w| w.status(WorkerState::Warm)).collect();
        workers.extend(state.leased.values().cloned());
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        PoolStatus {
            warm: state.warm.len(),
            booting: state.booting,
            leased: state.leased.len(),
            capacity: self.inner.cfg.max_workers,
            workers,
        }
    }

    /// Waits until `n` workers are warm (or the deadline passes); for startup and benches.
    pub async fn wait_warm(&self, n: usize, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.inner.warm_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.state().warm.len() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// Stops leasing, kills every warm worker and ends the boots in flight where they stand.
    /// Leases still held are killed when their holders release or drop them.
    pub async fn shutdown(&self) {
        self.inner.slots.close();
        self.inner.closing.cancel();
        let (warm_workers, shared): (Vec<Worker>, Vec<Arc<SharedBrowser>>) = {
            let mut state = self.inner.state();
            state.closed = true;
            (state.warm.drain(..).collect(), state.shared.drain().map(|(_, b)| b).collect())
        };
        // Shared browsers without a session go now; the others with their last session.
        for browser in shared {
            self.retire(&browser, "the server stops");
        }
        self.inner.warm_ready.notify_waiters();
        // The refill loop sees `closed` and ends.
        self.inner.refill.notify_one();
        // Boots in flight end where they stand (`boot` watches `closing`).
        let started = Instant::now();
        // Side by side: each kill waits for its browser's exit.
        let warm = warm_workers.len();
        futures::future::join_all(warm_workers.into_iter().map(Worker::kill)).await;
        let killed_ms = started.elapsed().as_millis() as u64;
        self.inner.tasks.close();
        let bound = self.inner.cfg.launch.launch_timeout + Duration::from_secs(5);
        if tokio::time::timeout(bound, self.inner.tasks.wait()).await.is_err() {
            tracing::warn!(booting = self.inner.state().booting, "worker boots still running after {bound:?}");
        }
        // Killed workers' directories (each removal retries for about 5 s).
        self.inner.cleanups.close();
        if tokio::time::timeout(Duration::from_secs(10), self.inner.cleanups.wait()).await.is_err() {
            tracing::warn!("worker directories still being removed after 10 s");
        }
        // The profiles dir goes too once its last profile has (a lease still held keeps it).
        let launch = &self.inner.cfg.launch;
        files::remove_root(&launch.disk_dir);
        let _ = std::fs::remove_dir(&launch.profiles_dir);
        let _ = std::fs::remove_dir(&launch.disk_dir);
        // What is left stays claimed, for a server to reap once this one is gone.
        if !launch.profiles_dir.exists() && !launch.disk_dir.exists() {
            crate::launcher::unclaim_profiles(
                &launch.lock_dir,
                &[launch.profiles_dir.clone(), launch.disk_dir.clone()],
            );
        }
        tracing::info!(warm, killed_ms, ms = started.elapsed().as_millis() as u64, "pool stopped");
    }

    /// Sets a leased worker's memory limit (`None`: the server's default, which every spare
    /// has), where workers have cgroups, and sizes its profile and files directory within it
    /// (see [`LaunchConfig::disk_mb`](crate::launcher::LaunchConfig::disk_mb)).
    fn fence_memory(&self, worker: &Worker, memory: Option<u64>) -> Result<(), PoolError> {
        let Some(cgroup) = &worker.process.cgroup else { return Ok(()) };
        let bytes = memory.unwrap_or(cgroup.memory_limit());
        let launch = &self.inner.cfg.launch;
        let (spare, leased) = (launch.disk_mb(None), launch.disk_mb(Some(bytes)));
        if leased != spare {
            let dirs =
                std::iter::once(worker.process.profile.as_path()).chain(worker.files.as_ref().and_then(|f| f.dir()));
            for dir in dirs {
                if let Err(e) = crate::launcher::resize_tmpfs(dir, leased) {
                    tracing::warn!(dir = %dir.display(), size_mb = leased, error = %e, "a worker's tmpfs could not be resized");
                    return Err(PoolError::Launch(format!("the worker's disk could not be made {leased} MiB: {e}")));
                }
            }
        }
        cgroup.set_memory(bytes).map_err(|e| PoolError::MemoryLimit(format!("{} MB: {e}", bytes >> 20)))
    }

    fn finish_lease(&self, id: &WorkerId) {
        self.inner.state().leased.remove(id);
        self.inner.refill.notify_one();
    }
}
