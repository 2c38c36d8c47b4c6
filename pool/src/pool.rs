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
use crate::task::OwnedTask;

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
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaseSpec {
    /// How long to wait for a free worker.
    pub wait: Duration,
    /// The session's viewport, set before the lease is handed out.
    pub viewport: Viewport,
    /// Its memory limit in bytes, where workers have cgroups; `None`: the server's default,
    /// which every spare has.
    pub memory: Option<u64>,
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

/// A booted Chromium with its CDP connection and the page sessions drive.
struct Worker {
    id: WorkerId,
    process: Process,
    /// Dropped (ending every connection it carries) with the worker.
    _proxy: Proxy,
    handler_task: OwnedTask,
    /// Turns `Some(why)` when the browser dies (see [`watch_death`]).
    died: watch::Receiver<Option<String>>,
    death_watch: OwnedTask,
    /// The browser's DevTools websocket (through its gate when it has a network namespace).
    devtools_url: String,
    driver: Driver,
    started_at: SystemTime,
}

impl Worker {
    fn status(&self, state: WorkerState) -> WorkerStatus {
        WorkerStatus {
            id: self.id.clone(),
            state,
            pid: self.process.pid(),
            cdp_port: self.process.port(),
            started_at: self.started_at,
        }
    }

    async fn kill(self) {
        // Killing it is no death to report.
        self.death_watch.abort();
        self.handler_task.abort();
        self.process.kill().await;
    }
}

/// Reports a worker's death as soon as its CDP connection closes, its main process is seen
/// exited (polled every [`DEATH_POLL`]), or it leaves a DevTools probe unanswered for
/// `unresponsive_after` (see [`unanswered`]).
async fn watch_death(
    pid: u32,
    cgroup: Option<Arc<WorkerCgroup>>,
    mut connection: watch::Receiver<Option<String>>,
    tx: watch::Sender<Option<String>>,
    browser: Arc<chromiumoxide::Browser>,
    unresponsive_after: Duration,
) {
    let mut tick = tokio::time::interval(DEATH_POLL);
    let frozen = unanswered(&browser, unresponsive_after);
    tokio::pin!(frozen);
    let why = loop {
        tokio::select! {
            closed = connection.wait_for(Option::is_some) => {
                break closed.ok().and_then(|why| why.clone()).unwrap_or_else(|| "its DevTools connection closed".into());
            }
            _ = tick.tick() => if crate::procfs::pid_exited(pid) {
                break "its browser process exited".into();
            },
            why = &mut frozen => break why,
        }
    };
    // Killed by the kernel at its memory limit: the reason names it.
    let why = match cgroup.and_then(|c| c.limit_reached()) {
        Some(limit) => format!("{why}: {}", crate::cgroup::limit_words(limit)),
        None => why,
    };
    tracing::warn!(pid, reason = %why, "worker died");
    tx.send_replace(Some(why));
}

/// How often a worker's process is looked at for an exit its connection did not report.
const DEATH_POLL: Duration = Duration::from_millis(200);

/// How often a browser is asked for its version (see [`unanswered`]).
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Returns once the browser has answered no probe for `after`: a browser that is stopped
/// (SIGSTOP), deadlocked or starved keeps its process and its connection, and would otherwise
/// hold its session and slot until the TTL. `Browser.getVersion` is answered by the browser
/// process itself, so a page spinning in its renderer does not delay it.
async fn unanswered(browser: &chromiumoxide::Browser, after: Duration) -> String {
    use chromiumoxide::cdp::browser_protocol::browser::GetVersionParams;
    let mut answered = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let left = after.saturating_sub(answered.elapsed()).max(PROBE_EVERY);
        if let Ok(Ok(_)) = tokio::time::timeout(left, browser.execute(GetVersionParams::default())).await {
            answered = tokio::time::Instant::now();
        }
        let silent = answered.elapsed();
        if silent >= after {
            return format!("browser stopped answering: no reply to a DevTools probe for {} s", silent.as_secs());
        }
    }
}

/// How often, at most, a shared browser's memory is read against its ceiling.
const MEMORY_READ_EVERY: Duration = Duration::from_secs(1);

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
    /// While boots fail, no boot starts before this (see [`boot_backoff`]).
    retry_at: Option<tokio::time::Instant>,
}

/// The wait before the first boot after one that failed; it doubles with each failure in a
/// row, up to [`BOOT_BACKOFF_MAX`], and a boot that succeeds resets it.
const BOOT_BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BOOT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long to wait before booting again after `failed` boots failed in a row: a missing or
/// broken Chromium is not relaunched in a tight loop, and one fixed again is tried within
/// [`BOOT_BACKOFF_MAX`].
fn boot_backoff(failed: u32) -> Duration {
    match failed {
        0 => Duration::ZERO,
        n => BOOT_BACKOFF_FIRST.saturating_mul(1 << (n - 1).min(16)).min(BOOT_BACKOFF_MAX),
    }
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
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
        let max = cfg.max_workers.max(1);
        let mut egress = cfg.egress.clone();
        egress.reserved_ports.push(cfg.launch.ports.start..=cfg.launch.ports.end);
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

    async fn lease_inner(&self, LeaseSpec { wait, viewport, memory }: LeaseSpec) -> Result<Lease, PoolError> {
        let deadline = tokio::time::Instant::now() + wait;
        let permit = match tokio::time::timeout_at(deadline, self.inner.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(PoolError::ShuttingDown),
            Err(_) => return Err(PoolError::Exhausted(wait)),
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let worker = self.take_warm(left).await?;
        let fenced = self.fence_memory(&worker, memory);
        let lease = Lease { pool: self.clone(), held: Some(Held::Own(Box::new(worker))), _permit: permit };
        fenced?;
        // Apply the session's viewport; a worker that cannot take it is not usable.
        lease
            .driver()
            .set_viewport(viewport, self.inner.cfg.launch.cdp_timeout)
            .await
            .map_err(|e| PoolError::Cdp(format!("set viewport: {}", e.message)))?;
        Ok(lease)
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

    /// What caps each worker's memory, tasks and CPU, in words; `None` without cgroups.
    pub fn resource_fence(&self) -> Option<String> {
        self.inner.cfg.launch.cgroups.as_ref().map(|c| c.describe())
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

    /// Stops leasing, kills every warm worker and waits for boots in flight to be killed.
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
        // Boots in flight are raised to normal priority (a spare boots at idle priority, which
        // a busy host may not give a turn for the whole launch timeout) and killed when they
        // are done. Not killed where they stand: a browser killed in the middle of its
        // attach leaves CDP calls waiting for their timeout.
        let started = Instant::now();
        let booting: Vec<Spawned> = self.inner.state().booting_groups.values().cloned().collect();
        for spawned in booting {
            raise_aside(spawned);
        }
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
        let _ = std::fs::remove_dir(&self.inner.cfg.launch.profiles_dir);
        tracing::info!(warm, killed_ms, ms = started.elapsed().as_millis() as u64, "pool stopped");
    }

    async fn refill_loop(self, shutdown: CancellationToken) {
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let notified = self.inner.refill.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (to_boot, backing_off) = {
                let mut state = self.inner.state();
                if state.closed {
                    break;
                }
                match state.retry_at.filter(|at| *at > tokio::time::Instant::now()) {
                    Some(at) => (0, Some(at)),
                    None => {
                        let max = self.inner.cfg.max_workers;
                        // A caller waits for a worker while idle shared browsers hold every
                        // place: the longest idle one gives its place up.
                        if state.pending > state.warm.len() + state.booting && state.leased.len() >= max {
                            if let Some(idle) = take_idle_shared(&mut state) {
                                let pool = self.clone();
                                self.inner.tasks.spawn(async move { pool.retire(&idle, "its place is needed") });
                            }
                        }
                        let target = (self.inner.cfg.warm + state.pending).min(max.saturating_sub(state.leased.len()));
                        let have = state.warm.len() + state.booting;
                        let mut n = target.saturating_sub(have);
                        // Spares nobody waits for boot one at a time (and at idle priority, see
                        // `launch`), so refilling never crowds the sessions running; while boots
                        // fail, one at a time finds out whether they work again.
                        if state.failed_boots > 0 || state.pending == 0 {
                            n = n.min(1usize.saturating_sub(state.booting));
                        }
                        state.booting += n;
                        (n, None)
                    }
                }
            };
            for _ in 0..to_boot {
                let pool = self.clone();
                let id = WorkerId::new();
                let span = tracing::info_span!("worker_boot", worker = %id);
                self.inner.tasks.spawn(pool.boot(id).instrument(span));
            }
            let backoff_over = async {
                match backing_off {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = notified => {}
                _ = backoff_over => {}
                _ = shutdown.cancelled() => break,
            }
        }
        tracing::debug!("refill loop ended");
    }

    async fn boot(self, id: WorkerId) {
        let started = Instant::now();
        let spawned = {
            let (pool, id) = (self.clone(), id.clone());
            move |spawned: Spawned| {
                let waited_for = {
                    let mut state = pool.inner.state();
                    state.booting_groups.insert(id.clone(), spawned.clone());
                    waited_for(&state)
                };
                if waited_for {
                    raise_aside(spawned);
                }
            }
        };
        let inner = &self.inner;
        let result =
            boot_worker(&inner.cfg, &inner.egress, &inner.sandbox, id.clone(), &spawned, &inner.cleanups).await;
        // Decide under the lock, act (await) after it is released.
        let orphan = {
            let mut state = self.inner.state();
            state.booting_groups.remove(&id);
            match result {
                Ok(worker) if !state.closed => {
                    state.booting -= 1;
                    tracing::debug!(worker = %id, pid = worker.process.pid(), port = worker.process.port(), ms = started.elapsed().as_millis() as u64, "worker warm");
                    if state.failed_boots > 0 {
                        tracing::info!(failed_before = state.failed_boots, "workers boot again");
                    }
                    state.last_boot_error = None;
                    state.failed_boots = 0;
                    state.retry_at = None;
                    state.warm.push_back(worker);
                    None
                }
                // Still counted as booting until killed, so shutdown waits for it.
                Ok(worker) => Some(worker),
                Err(e) if state.closed => {
                    state.booting -= 1;
                    tracing::debug!(worker = %id, error = %e, "boot ended by the stop");
                    None
                }
                Err(e) => {
                    state.booting -= 1;
                    state.failed_boots += 1;
                    // Back off so a missing or broken Chromium is not relaunched in a tight loop.
                    let backoff = boot_backoff(state.failed_boots);
                    state.retry_at = Some(tokio::time::Instant::now() + backoff);
                    tracing::error!(worker = %id, error = %e, failed_in_a_row = state.failed_boots, retry_in = ?backoff, "worker failed to boot");
                    state.last_boot_error = Some(e.to_string());
                    None
                }
            }
        };
        self.inner.warm_ready.notify_waiters();
        if let Some(worker) = orphan {
            worker.kill().await;
            self.inner.state().booting -= 1;
        }
        self.inner.refill.notify_one();
    }

    /// Sets a leased worker's memory limit (`None`: the server's default, which every spare
    /// has), where workers have cgroups.
    fn fence_memory(&self, worker: &Worker, memory: Option<u64>) -> Result<(), PoolError> {
        let Some(cgroup) = &worker.process.cgroup else { return Ok(()) };
        let bytes = memory.unwrap_or(cgroup.memory_limit());
        cgroup.set_memory(bytes).map_err(|e| PoolError::MemoryLimit(format!("{} MB: {e}", bytes >> 20)))
    }

    fn finish_lease(&self, id: &WorkerId) {
        self.inner.state().leased.remove(id);
        self.inner.refill.notify_one();
    }
}

/// Whether a caller waits for the boots in flight: those run at normal priority. Boots
/// nobody waits for (even the next caller's, with no warm worker left) stay at idle, so they
/// take only CPU the running sessions leave: measured with `compare`, raising the next
/// caller's boot ahead of time doubled the sequential session p50 on 2 cores.
fn waited_for(state: &State) -> bool {
    state.pending > 0
}

/// Raises a worker from the idle priority and CPU weight it booted at, on a blocking thread
/// (it reads `/proc`), without waiting for it.
fn raise_aside(spawned: Spawned) {
    tokio::task::spawn_blocking(move || spawned.raise());
}

async fn boot_worker(
    cfg: &PoolConfig,
    egress: &Arc<Egress>,
    sandbox: &watch::Sender<Option<SandboxReport>>,
    id: WorkerId,
    spawned: &(dyn Fn(Spawned) + Send + Sync),
    cleanups: &TaskTracker,
) -> Result<Worker, PoolError> {
    let checked = sandbox.borrow().clone();
    if let Some(report) = checked.as_ref().filter(|r| !r.sandboxed && !cfg.launch.allow_unsandboxed) {
        return Err(PoolError::Unsandboxed(report.detail.clone()));
    }
    // The proxy reads the policy per connection, so `Driver::set_policy` at lease time holds
    // for every connection opened after it; until then, nothing private.
    let net = WorkerNet::new(egress.clone());
    // Namespaces are made on threads of their own; keep that off the runtime's workers.
    let (netns, listener) = tokio::task::spawn_blocking(|| {
        let netns = worker_netns();
        let listener = match &netns {
            Some(ns) => ns.bind_loopback(),
            None => std::net::TcpListener::bind(("127.0.0.1", 0)),
        };
        listener.map(|l| (netns, l))
    })
    .await
    .map_err(|e| PoolError::Launch(format!("network namespace task: {e}")))??;
    let proxy = Proxy::start(net.clone(), listener, netns.is_none(), &id.0)?;
    let launched = launch(&cfg.launch, &id.0, &proxy.url(), netns, egress, spawned, cleanups).await?;
    // The first worker is looked at in /proc (its uid, a renderer's seccomp filter and user
    // namespace): the flags say the sandbox is on, this sees whether it is.
    if checked.is_none() {
        let (pgid, uid) = (launched.process.pid(), launched.process.uid);
        let report = tokio::task::spawn_blocking(move || crate::sandbox::inspect(pgid, uid))
            .await
            .map_err(|e| PoolError::Launch(format!("sandbox check task: {e}")))?;
        if report.sandboxed {
            tracing::info!(detail = %report.detail, "chromium's sandbox is on");
        } else if cfg.launch.allow_unsandboxed {
            tracing::error!(detail = %report.detail, "WORKERS RUN WITHOUT CHROMIUM'S SANDBOX (--allow-unsandboxed): a renderer exploit runs with the worker's rights");
        }
        sandbox.send_replace(Some(report.clone()));
        if !report.sandboxed && !cfg.launch.allow_unsandboxed {
            launched.handler_task.abort();
            launched.process.kill().await;
            return Err(PoolError::Unsandboxed(report.detail));
        }
    }
    let driver_cfg = driver_config(cfg, launched.process.cgroup.clone());
    let devtools_url = launched.ws_url.clone();
    let driver = match Driver::attach(launched.browser, &launched.ws_url, driver_cfg, net).await {
        Ok(driver) => driver,
        Err(e) => {
            launched.handler_task.abort();
            launched.process.kill().await;
            return Err(e);
        }
    };
    let (died_tx, died) = watch::channel(None);
    let death_watch = OwnedTask::spawn(
        watch_death(
            launched.process.pid(),
            launched.process.cgroup.clone(),
            launched.died,
            died_tx,
            driver.browser.clone(),
            cfg.unresponsive_after,
        )
        .instrument(tracing::debug_span!("death_watch", worker = %id)),
    );
    Ok(Worker {
        id,
        process: launched.process,
        _proxy: proxy,
        handler_task: launched.handler_task,
        died,
        death_watch,
        devtools_url,
        driver,
        started_at: SystemTime::now(),
    })
}

/// A new network namespace for a worker: the server's own where it may create one (root or
/// `CAP_SYS_ADMIN`), else one inside an unprivileged user namespace. `None` where neither is
/// possible: said once, at warn, since it leaves the DevTools ports reachable by every local
/// process. Which kind is said once too.
fn worker_netns() -> Option<NetNs> {
    static SAID: std::sync::Once = std::sync::Once::new();
    let privileged = NetNs::create();
    let made = privileged.as_ref().err().map(|_| NetNs::create_unprivileged());
    match (privileged, made) {
        (Ok(ns), _) => Some(ns),
        (Err(_), Some(Ok(ns))) => {
            SAID.call_once(|| {
                tracing::info!("each worker runs in a network namespace of its own, inside an unprivileged user namespace (the server is not root)")
            });
            Some(ns)
        }
        (Err(e), unprivileged) => {
            let why = unprivileged.and_then(Result::err).map(|u| u.to_string()).unwrap_or_default();
            SAID.call_once(|| {
                tracing::warn!(error = %e, unprivileged = %why, "workers share the host's network namespace (creating one needs root, CAP_SYS_ADMIN or unprivileged user namespaces): their devtools ports are reachable by local processes")
            });
            None
        }
    }
}

fn driver_config(cfg: &PoolConfig, cgroup: Option<Arc<WorkerCgroup>>) -> DriverConfig {
    DriverConfig {
        cdp_timeout: cfg.launch.cdp_timeout,
        max_html_bytes: cfg.max_html_bytes,
        max_tabs: cfg.max_tabs,
        cgroup,
    }
}

/// Removes from the map a shared browser no session uses, if there is one.
fn take_idle_shared(state: &mut State) -> Option<Arc<SharedBrowser>> {
    let tenant = state.shared.iter().find(|(_, b)| b.usage().contexts == 0).map(|(t, _)| t.clone())?;
    state.shared.remove(&tenant)
}

/// Counts a caller holding a slot without a worker yet; the count drops with the guard, so a
/// cancelled `lease` future un-counts itself.
struct Pending<'a>(&'a Inner);

impl<'a> Pending<'a> {
    fn new(inner: &'a Inner) -> Self {
        inner.state().pending += 1;
        Pending(inner)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.state().pending -= 1;
    }
}

/// A worker handed to one session. [`Lease::release`] kills it (or, for a session that is a
/// browser context of its tenant's shared browser, disposes the context) and frees the slot;
/// dropping a lease does the same, so no code path can leak a Chromium or a context.
pub struct Lease {
    pool: Pool,
    held: Option<Held>,
    _permit: OwnedSemaphorePermit,
}

enum Held {
    /// A Chromium of the session's own (process isolation).
    Own(Box<Worker>),
    /// A browser context in the tenant's shared Chromium (context isolation).
    Context(ContextLease),
}

struct ContextLease {
    browser: Arc<SharedBrowser>,
    context: String,
    driver: Driver,
}

impl Lease {
    fn held(&self) -> &Held {
        self.held.as_ref().expect("lease holds its worker until release")
    }

    /// The worker's id (for a context session, its shared browser's).
    pub fn worker_id(&self) -> &WorkerId {
        match self.held() {
            Held::Own(w) => &w.id,
            Held::Context(c) => &c.browser.id,
        }
    }

    /// The driver for this session's pages.
    pub fn driver(&self) -> &Driver {
        match self.held() {
            Held::Own(w) => &w.driver,
            Held::Context(c) => &c.driver,
        }
    }

    /// The session's browser context when it shares its tenant's browser; `None` when the
    /// whole browser is the session's.
    pub fn context(&self) -> Option<&str> {
        match self.held() {
            Held::Own(_) => None,
            Held::Context(c) => Some(&c.context),
        }
    }

    /// Whether Chromium has exited under this lease.
    pub fn crashed(&mut self) -> bool {
        match self.held.as_mut() {
            Some(Held::Own(w)) => w.process.exited() || w.died.borrow().is_some(),
            Some(Held::Context(c)) => c.browser.dead(),
            None => true,
        }
    }

    /// The browser's own DevTools websocket, for the server's CDP proxy alone: never hand it
    /// out (it is reachable only from this host, and only through the worker's gate). A
    /// context session's proxy must keep its client to [`Lease::context`].
    pub fn devtools_url(&self) -> &str {
        match self.held() {
            Held::Own(w) => &w.devtools_url,
            Held::Context(c) => &c.browser.devtools_url,
        }
    }

    /// The directory the session's downloads go to (inside the worker's profile, deleted with
    /// it, or with the context); not created until asked for.
    pub fn download_dir(&self) -> std::path::PathBuf {
        match self.held() {
            Held::Own(w) => w.process.profile.join("downloads"),
            Held::Context(c) => c.browser.profile.join("downloads").join(&c.context),
        }
    }

    /// Turns `Some(why)` as soon as the worker's browser dies (its process exits or its
    /// DevTools connection closes); a release is not a death. A shared browser's death ends
    /// every session of its tenant in it, and no other.
    pub fn died(&self) -> watch::Receiver<Option<String>> {
        match self.held() {
            Held::Own(w) => w.died.clone(),
            Held::Context(c) => c.browser.died.clone(),
        }
    }

    /// Kills the worker's process group and deletes its profile (or disposes the session's
    /// browser context and its downloads) and lets the pool refill.
    pub async fn release(mut self) {
        match self.held.take() {
            Some(Held::Own(worker)) => {
                let id = worker.id.clone();
                worker.kill().await;
                self.pool.finish_lease(&id);
            }
            Some(Held::Context(c)) => self.pool.clone().end_context(c).await,
            None => {}
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        match self.held.take() {
            Some(Held::Own(worker)) => {
                let id = worker.id.clone();
                worker.death_watch.abort();
                worker.handler_task.abort();
                // Process's own Drop kills the group and removes the profile synchronously.
                drop(worker);
                self.pool.finish_lease(&id);
            }
            Some(Held::Context(c)) => {
                // Disposing takes a CDP call: done aside, on the pool's tracker.
                let pool = self.pool.clone();
                if tokio::runtime::Handle::try_current().is_ok() {
                    self.pool.inner.tasks.spawn(pool.end_context(c));
                } else {
                    // No runtime left: the server is gone, and the shared browser with it.
                    pool.context_gone(&c.browser);
                }
            }
            None => {}
        }
    }
}

/// A Chromium that one tenant's context sessions share (context isolation). It came from the
/// warm pool, so it was booted like any worker; its own driver is stopped, and each session
/// has a driver of its own, scoped to its browser context.
struct SharedBrowser {
    tenant: String,
    id: WorkerId,
    browser: Arc<chromiumoxide::Browser>,
    devtools_url: String,
    profile: std::path::PathBuf,
    pid: u32,
    net: Arc<WorkerNet>,
    cgroup: Option<Arc<WorkerCgroup>>,
    died: watch::Receiver<Option<String>>,
    /// Taken when it is killed.
    worker: Mutex<Option<Worker>>,
    usage: Mutex<Usage>,
    /// A context made ahead, blank, with its driver attached: the next session takes it, so
    /// creating one is off the caller's path.
    spare: Mutex<Option<(String, Driver)>>,
}

#[derive(Default)]
struct Usage {
    /// Sessions in it now.
    contexts: usize,
    /// Sessions it was handed, ever.
    served: u64,
    /// No longer the tenant's current browser: killed once `contexts` is 0.
    retiring: bool,
    /// Bumped whenever a session starts, so an idle timer started before knows it is stale.
    generation: u64,
    /// A spare context is being made.
    preparing: bool,
    /// When its memory was last read against the ceiling.
    memory_read: Option<Instant>,
}

impl SharedBrowser {
    fn usage(&self) -> MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dead(&self) -> bool {
        self.died.borrow().is_some() || crate::procfs::pid_exited(self.pid)
    }

    fn take_spare(&self) -> Option<(String, Driver)> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    async fn kill(&self) {
        drop(self.take_spare());
        let worker = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(worker) = worker {
            tracing::info!(worker = %self.id, tenant = %self.tenant, "shared browser killed");
            worker.kill().await;
        }
    }
}

impl Pool {
    /// Leases a fresh browser context in `tenant`'s shared Chromium (context isolation),
    /// taking a warm worker as that Chromium when the tenant has none (or has one being
    /// replaced), waiting as [`Pool::lease`] does. `spec.memory` limits a Chromium that
    /// becomes the tenant's shared browser here, as a whole.
    pub async fn lease_context(&self, tenant: &str, spec: LeaseSpec) -> Result<Lease, PoolError> {
        tokio::select! {
            result = self.lease_context_inner(tenant, spec) => result,
            _ = self.inner.shutdown.cancelled() => Err(PoolError::ShuttingDown),
        }
    }

    async fn lease_context_inner(
        &self,
        tenant: &str,
        LeaseSpec { wait, viewport, memory }: LeaseSpec,
    ) -> Result<Lease, PoolError> {
        let deadline = tokio::time::Instant::now() + wait;
        let permit = match tokio::time::timeout_at(deadline, self.inner.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(PoolError::ShuttingDown),
            Err(_) => return Err(PoolError::Exhausted(wait)),
        };
        let browser = match self.current_shared(tenant) {
            Some(browser) => browser,
            None => {
                // A warm worker becomes the tenant's browser; leasing it waits like any lease.
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let worker = self.take_warm(left).await?;
                // Another session of the tenant may have made one meanwhile: use it, and give
                // the worker back, no longer counted as leased.
                if let Some(browser) = self.current_shared(tenant) {
                    let mut state = self.inner.state();
                    state.leased.remove(&worker.id);
                    state.warm.push_front(worker);
                    drop(state);
                    self.inner.warm_ready.notify_waiters();
                    browser
                } else {
                    // The limit holds for the shared browser as a whole: its sessions share
                    // its processes.
                    if let Err(e) = self.fence_memory(&worker, memory) {
                        let id = worker.id.clone();
                        worker.kill().await;
                        self.finish_lease(&id);
                        return Err(e);
                    }
                    worker.driver.stop();
                    let browser = Arc::new(SharedBrowser {
                        tenant: tenant.to_string(),
                        id: worker.id.clone(),
                        browser: worker.driver.browser.clone(),
                        devtools_url: worker.devtools_url.clone(),
                        profile: worker.process.profile.clone(),
                        pid: worker.process.pid(),
                        net: worker.driver.net(),
                        cgroup: worker.process.cgroup.clone(),
                        died: worker.died.clone(),
                        worker: Mutex::new(Some(worker)),
                        usage: Mutex::new(Usage { contexts: 1, served: 1, generation: 1, ..Usage::default() }),
                        spare: Mutex::new(None),
                    });
                    self.inner.state().shared.insert(tenant.to_string(), browser.clone());
                    tracing::info!(tenant, worker = %browser.id, "a warm worker became the tenant's shared browser");
                    browser
                }
            }
        };
        let opened = match browser.take_spare() {
            Some(spare) => Ok(spare),
            None => self.open_context(&browser).await,
        };
        self.prepare_spare(&browser);
        match opened {
            Ok((context, driver)) => {
                let lease = Lease {
                    pool: self.clone(),
                    held: Some(Held::Context(ContextLease { browser, context, driver })),
                    _permit: permit,
                };
                lease
                    .driver()
                    .set_viewport(viewport, self.inner.cfg.launch.cdp_timeout)
                    .await
                    .map_err(|e| PoolError::Cdp(format!("set viewport: {}", e.message)))?;
                Ok(lease)
            }
            Err(e) => {
                self.context_gone(&browser);
                Err(e)
            }
        }
    }

    /// The tenant's current shared browser with one more session counted in it, if it has
    /// one still usable. The session that reaches `recycle_after` is its last.
    fn current_shared(&self, tenant: &str) -> Option<Arc<SharedBrowser>> {
        let mut state = self.inner.state();
        let browser = state.shared.get(tenant)?.clone();
        if browser.dead() {
            state.shared.remove(tenant);
            drop(state);
            self.retire(&browser, "it died");
            return None;
        }
        let mut usage = browser.usage();
        usage.contexts += 1;
        usage.served += 1;
        usage.generation += 1;
        if usage.served >= self.inner.cfg.shared.recycle_after {
            usage.retiring = true;
            state.shared.remove(tenant);
            tracing::info!(tenant, worker = %browser.id, served = usage.served, "shared browser replaced after its last session");
        }
        drop(usage);
        Some(browser)
    }

    /// Makes the next session's context ahead, aside, unless one is there or being made, or
    /// the browser is being replaced.
    fn prepare_spare(&self, browser: &Arc<SharedBrowser>) {
        {
            let mut usage = browser.usage();
            if usage.preparing || usage.retiring || browser.spare.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                return;
            }
            usage.preparing = true;
        }
        let (pool, browser) = (self.clone(), browser.clone());
        self.inner.tasks.spawn(async move {
            let made = pool.open_context(&browser).await;
            let keep = {
                let mut usage = browser.usage();
                usage.preparing = false;
                !usage.retiring && !browser.dead()
            };
            match made {
                Ok(spare) if keep => *browser.spare.lock().unwrap_or_else(|e| e.into_inner()) = Some(spare),
                Ok((context, driver)) => {
                    drop(driver);
                    let _ = pool.dispose(&browser, &context).await;
                }
                Err(e) => tracing::warn!(worker = %browser.id, error = %e, "a spare browser context could not be made"),
            }
        });
    }

    /// Disposes `context` in `browser` (nothing to do in a dead one); why not, if it could not.
    async fn dispose(&self, browser: &SharedBrowser, context: &str) -> Result<(), String> {
        use chromiumoxide::cdp::browser_protocol::target::DisposeBrowserContextParams;
        if browser.dead() {
            return Ok(());
        }
        let t = self.inner.cfg.launch.cdp_timeout;
        match tokio::time::timeout(t, browser.browser.execute(DisposeBrowserContextParams::new(context.to_string())))
            .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("could not be disposed: {e}")),
            Err(_) => Err(format!("was not disposed within {t:?}")),
        }
    }

    /// A fresh browser context in `browser`, and a driver scoped to it.
    async fn open_context(&self, browser: &SharedBrowser) -> Result<(String, Driver), PoolError> {
        use chromiumoxide::cdp::browser_protocol::target::CreateBrowserContextParams;
        let t = self.inner.cfg.launch.cdp_timeout;
        let created = tokio::time::timeout(t, browser.browser.execute(CreateBrowserContextParams::default()))
            .await
            .map_err(|_| PoolError::CdpTimeout { what: "create browser context", after: t })?
            .map_err(|e| PoolError::Cdp(format!("create browser context: {e}")))?;
        let context: String = created.result.browser_context_id.into();
        match Driver::attach_context(
            browser.browser.clone(),
            &browser.devtools_url,
            context.clone(),
            driver_config(&self.inner.cfg, browser.cgroup.clone()),
            browser.net.clone(),
        )
        .await
        {
            Ok(driver) => Ok((context, driver)),
            Err(e) => {
                let _ = self.dispose(browser, &context).await;
                Err(e)
            }
        }
    }

    /// Disposes a session's browser context (its pages, cookies, storage, cache, service
    /// workers and permissions go with it) and its downloads; the shared browser is replaced
    /// once past its memory ceiling.
    async fn end_context(self, c: ContextLease) {
        let ContextLease { browser, context, driver } = c;
        drop(driver);
        if let Err(why) = self.dispose(&browser, &context).await {
            tracing::warn!(worker = %browser.id, "a browser context {why}; replacing its browser");
            browser.usage().retiring = true;
        }
        let downloads = browser.profile.join("downloads").join(&context);
        let (pid, ceiling) = (browser.pid, self.inner.cfg.shared.memory_ceiling);
        // Reading PSS walks every page table of every process of the browser (about 10 ms of
        // CPU for a busy one), so it is read at most once a second, not at every session end.
        let read_memory = {
            let mut usage = browser.usage();
            let due = usage.memory_read.is_none_or(|at| at.elapsed() >= MEMORY_READ_EVERY);
            if due {
                usage.memory_read = Some(Instant::now());
            }
            due
        };
        let pss = tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(downloads);
            if read_memory {
                crate::launcher::group_memory(pid).pss_bytes
            } else {
                0
            }
        })
        .await
        .unwrap_or(0);
        if pss > ceiling {
            tracing::info!(worker = %browser.id, pss_mib = pss >> 20, ceiling_mib = ceiling >> 20, "shared browser past its memory ceiling; replacing it");
            browser.usage().retiring = true;
        }
        self.context_gone(&browser);
    }

    /// One session fewer in `browser`: a browser being replaced (or dead) goes with its last
    /// session; the tenant's current one is kept, and killed after `idle` without a session.
    fn context_gone(&self, browser: &Arc<SharedBrowser>) {
        let (last, retiring, generation) = {
            let mut usage = browser.usage();
            usage.contexts = usage.contexts.saturating_sub(1);
            if browser.dead() {
                usage.retiring = true;
            }
            (usage.contexts == 0, usage.retiring, usage.generation)
        };
        if retiring {
            let mut state = self.inner.state();
            if state.shared.get(&browser.tenant).is_some_and(|b| Arc::ptr_eq(b, browser)) {
                state.shared.remove(&browser.tenant);
            }
        }
        if !last {
            return;
        }
        if retiring {
            self.retire(browser, "replaced");
            return;
        }
        let (pool, browser, idle) = (self.clone(), browser.clone(), self.inner.cfg.shared.idle);
        let closing = self.inner.closing.clone();
        self.inner.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(idle) => {}
                _ = closing.cancelled() => {}
            }
            let idle = {
                let mut state = pool.inner.state();
                let usage = browser.usage();
                let current = state.shared.get(&browser.tenant).is_some_and(|b| Arc::ptr_eq(b, &browser));
                let idle = usage.contexts == 0 && usage.generation == generation;
                if idle && current {
                    state.shared.remove(&browser.tenant);
                }
                idle
            };
            if idle {
                pool.retire(&browser, "idle");
            }
        });
    }

    /// Kills a shared browser that no session uses any more (aside, on the pool's tracker) and
    /// frees its place among the workers; one still in use is marked to go with its last
    /// session.
    fn retire(&self, browser: &Arc<SharedBrowser>, why: &'static str) {
        {
            let mut usage = browser.usage();
            usage.retiring = true;
            if usage.contexts > 0 {
                return;
            }
        }
        tracing::debug!(worker = %browser.id, tenant = %browser.tenant, why, "retiring a shared browser");
        let (pool, browser) = (self.clone(), browser.clone());
        self.inner.tasks.spawn(async move {
            browser.kill().await;
            pool.finish_lease(&browser.id);
        });
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_backoff_doubles_up_to_its_cap() {
        let waits: Vec<u64> = (0..9).map(|n| boot_backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [0, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
        assert_eq!(boot_backoff(u32::MAX), BOOT_BACKOFF_MAX);
    }
}
