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

use crate::driver::{Driver, DriverConfig, Viewport};
use crate::egress::{Egress, EgressConfig, Proxy, WorkerNet};
use crate::error::PoolError;
use crate::launcher::{launch, LaunchConfig, Process};
use crate::netns::NetNs;
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

/// Reports a worker's death as soon as its CDP connection closes or, should the connection
/// linger, its main process is seen exited (polled every [`DEATH_POLL`]).
async fn watch_death(pid: u32, mut connection: watch::Receiver<Option<String>>, tx: watch::Sender<Option<String>>) {
    let mut tick = tokio::time::interval(DEATH_POLL);
    let why = loop {
        tokio::select! {
            closed = connection.wait_for(Option::is_some) => {
                break closed.ok().and_then(|why| why.clone()).unwrap_or_else(|| "its DevTools connection closed".into());
            }
            _ = tick.tick() => if Process::pid_exited(pid) {
                break "its browser process exited".into();
            },
        }
    };
    tracing::warn!(pid, reason = %why, "worker died");
    tx.send_replace(Some(why));
}

/// How often a worker's process is looked at for an exit its connection did not report.
const DEATH_POLL: Duration = Duration::from_millis(200);

#[derive(Default)]
struct State {
    warm: VecDeque<Worker>,
    booting: usize,
    /// Callers holding a slot but not yet a worker.
    pending: usize,
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
    /// The refill loop and every boot: shutdown waits for them.
    tasks: TaskTracker,
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
            shutdown: shutdown.clone(),
            tasks: TaskTracker::new(),
        });
        let pool = Pool { inner };
        let looped = pool.clone();
        let tasks = looped.inner.tasks.clone();
        tasks.spawn(looped.refill_loop(shutdown).instrument(tracing::info_span!("pool_refill")));
        pool
    }

    /// Leases a warm worker, waiting up to `wait` for one to be free.
    ///
    /// Dropping the returned future while it waits leaks nothing: the slot is returned and the
    /// worker it would have taken stays warm.
    pub async fn lease(&self, wait: Duration, viewport: Viewport) -> Result<Lease, PoolError> {
        tokio::select! {
            result = self.lease_inner(wait, viewport) => result,
            _ = self.inner.shutdown.cancelled() => Err(PoolError::ShuttingDown),
        }
    }

    async fn lease_inner(&self, wait: Duration, viewport: Viewport) -> Result<Lease, PoolError> {
        let deadline = tokio::time::Instant::now() + wait;
        let permit = match tokio::time::timeout_at(deadline, self.inner.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(PoolError::ShuttingDown),
            Err(_) => return Err(PoolError::Exhausted(wait)),
        };
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
                let lease = Lease { pool: self.clone(), worker: Some(worker), _permit: permit };
                // Apply the session's viewport; a worker that cannot take it is not usable.
                lease
                    .driver()
                    .set_viewport(viewport, self.inner.cfg.launch.cdp_timeout)
                    .await
                    .map_err(|e| PoolError::Cdp(format!("set viewport: {}", e.message)))?;
                return Ok(lease);
            }
            if pending.is_none() {
                pending = Some(Pending::new(&self.inner));
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
        let warm: Vec<Worker> = {
            let mut state = self.inner.state();
            state.closed = true;
            state.warm.drain(..).collect()
        };
        self.inner.warm_ready.notify_waiters();
        // The refill loop sees `closed` and ends.
        self.inner.refill.notify_one();
        for worker in warm {
            worker.kill().await;
        }
        // The refill loop ends on `closed`; each boot in flight kills its browser when it sees
        // it.
        self.inner.tasks.close();
        let bound = self.inner.cfg.launch.launch_timeout + Duration::from_secs(5);
        if tokio::time::timeout(bound, self.inner.tasks.wait()).await.is_err() {
            tracing::warn!(booting = self.inner.state().booting, "worker boots still running after {bound:?}");
        }
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
                        let target = (self.inner.cfg.warm + state.pending).min(max.saturating_sub(state.leased.len()));
                        let have = state.warm.len() + state.booting;
                        let mut n = target.saturating_sub(have);
                        // While boots fail, one boot at a time finds out whether they work again.
                        if state.failed_boots > 0 {
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
        let result = boot_worker(&self.inner.cfg, &self.inner.egress, id.clone()).await;
        // Decide under the lock, act (await) after it is released.
        let orphan = {
            let mut state = self.inner.state();
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

    fn finish_lease(&self, id: &WorkerId) {
        self.inner.state().leased.remove(id);
        self.inner.refill.notify_one();
    }
}

async fn boot_worker(cfg: &PoolConfig, egress: &Arc<Egress>, id: WorkerId) -> Result<Worker, PoolError> {
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
    let launched = launch(&cfg.launch, &id.0, &proxy.url(), netns, egress).await?;
    let driver_cfg = DriverConfig {
        cdp_timeout: cfg.launch.cdp_timeout,
        max_html_bytes: cfg.max_html_bytes,
        max_tabs: cfg.max_tabs,
    };
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
        watch_death(launched.process.pid(), launched.died, died_tx)
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

/// A new network namespace for a worker, or `None` where the server may not create one (it
/// is not root and lacks `CAP_SYS_ADMIN`): said once, at warn, since it leaves the DevTools
/// ports reachable by every local process.
fn worker_netns() -> Option<NetNs> {
    static WARNED: std::sync::Once = std::sync::Once::new();
    match NetNs::create() {
        Ok(ns) => Some(ns),
        Err(e) => {
            WARNED.call_once(|| {
                tracing::warn!(error = %e, "workers share the host's network namespace (creating one needs root or CAP_SYS_ADMIN): their devtools ports are reachable by local processes")
            });
            None
        }
    }
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

/// A worker handed to one session. [`Lease::release`] kills it and frees the slot; dropping a
/// lease does the same synchronously, so no code path can leak a Chromium.
pub struct Lease {
    pool: Pool,
    worker: Option<Worker>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    /// The worker's id.
    pub fn worker_id(&self) -> &WorkerId {
        &self.worker.as_ref().expect("lease holds its worker until release").id
    }

    /// The driver for this worker's pages.
    pub fn driver(&self) -> &Driver {
        &self.worker.as_ref().expect("lease holds its worker until release").driver
    }

    /// Whether Chromium has exited under this lease.
    pub fn crashed(&mut self) -> bool {
        self.worker.as_mut().map(|w| w.process.exited() || w.died.borrow().is_some()).unwrap_or(true)
    }

    /// The browser's own DevTools websocket, for the server's CDP proxy alone: never hand it
    /// out (it is reachable only from this host, and only through the worker's gate).
    pub fn devtools_url(&self) -> &str {
        &self.worker.as_ref().expect("lease holds its worker until release").devtools_url
    }

    /// The directory the session's downloads go to (inside the worker's profile, deleted with
    /// it); not created until asked for.
    pub fn download_dir(&self) -> std::path::PathBuf {
        self.worker.as_ref().expect("lease holds its worker until release").process.profile.join("downloads")
    }

    /// Turns `Some(why)` as soon as the worker's browser dies (its process exits or its
    /// DevTools connection closes); a release is not a death.
    pub fn died(&self) -> watch::Receiver<Option<String>> {
        self.worker.as_ref().expect("lease holds its worker until release").died.clone()
    }

    /// Kills the worker's process group, deletes its profile and lets the pool refill.
    pub async fn release(mut self) {
        if let Some(worker) = self.worker.take() {
            let id = worker.id.clone();
            worker.kill().await;
            self.pool.finish_lease(&id);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            let id = worker.id.clone();
            worker.death_watch.abort();
            worker.handler_task.abort();
            // Process's own Drop kills the group and removes the profile synchronously.
            drop(worker);
            self.pool.finish_lease(&id);
        }
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
