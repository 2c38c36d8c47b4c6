//! Session management: acquire a lease, record it, run actions in order, end it exactly once.
//!
//! Invariants: a session in the live map holds a lease until it ends; ending removes it from
//! the map, records the terminal state, then kills the worker. A session id is only ever
//! answered to its owner (same tenant and subject, or `sessions:shared`, or `admin`); anyone
//! else gets NOT_FOUND.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use browserpool_pool::{
    canonicalize, Access, ActionCall, ActionFailure, ActionOutput, CaptureOptions, ContextState, EventKind,
    EventReader, FailureCode, Lease, NavPolicy, Pool, PoolError, Viewport,
};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, AdmissionError, Quota, Slot};
use crate::audit::{AuditLog, Place};
use crate::auth::{Claims, Scope};
use crate::clock::{now_ms, Clock};
use crate::deadlines::{self, Deadlines};
use crate::error::{Result, ServiceError};
pub use crate::model::SessionState;
use crate::model::{ReplicaAddrs, SessionRecord, TenantRecord};
use crate::store::{SessionFilter, Store};

/// Default and maximum per-action deadline.
pub const DEFAULT_ACTION_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_ACTION_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest viewport side accepted.
pub const MAX_VIEWPORT_SIDE: u32 = 16384;
/// Largest page of a listing.
pub const MAX_PAGE_SIZE: u32 = 500;
/// Most actions in one `Batch`.
pub const MAX_BATCH: usize = 50;
/// How often a replica beats its heartbeat, and after how long without one it counts as gone
/// (its sessions are marked CRASHED and its tenant slots freed for the other replicas).
pub const HEARTBEAT: Duration = Duration::from_secs(1);
pub const REPLICA_STALE: Duration = Duration::from_secs(10);
/// How often a request admitted here asks again for a tenant slot held by other replicas.
const CLAIM_RETRY: Duration = Duration::from_millis(100);

/// Server-wide session limits (a tenant's own quotas come with tenancy).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_session_ttl: Duration,
    pub idle_timeout: Duration,
}

/// What `Acquire` asks for, already unwrapped from the wire.
#[derive(Debug, Clone, Default)]
pub struct AcquireSpec {
    pub wait_ms: u32,
    pub ttl_ms: u32,
    pub idle_timeout_ms: u32,
    pub viewport: Option<Viewport>,
    pub labels: BTreeMap<String, String>,
}

/// One action as the client sent it.
#[derive(Debug, Clone, Default)]
pub struct ActionInput {
    pub action: String,
    pub selector: String,
    pub payload: Value,
    pub timeout_ms: u32,
    pub tab_index: Option<i32>,
    pub id: String,
}

/// One action's outcome, ready to be put on the wire.
#[derive(Debug, Clone)]
pub struct ActionReport {
    pub id: String,
    /// Canonical name when it resolved, else what the client sent.
    pub action: String,
    pub alias_of: String,
    pub outcome: std::result::Result<ActionOutput, ActionFailure>,
    pub duration_ms: u32,
}

struct Live {
    record: Mutex<SessionRecord>,
    /// The slots (this server's, and the tenant's in the database); freed after the worker is
    /// killed.
    slot: Mutex<Option<(Slot, Claim)>>,
    idle_timeout: Duration,
    /// Held for the whole of each action, so a session's actions run one at a time in order.
    lease: tokio::sync::Mutex<Option<Lease>>,
    /// Cancelled when the session starts to end: a running action stops at once (its caller
    /// gets `SESSION_CLOSED`, or `SESSION_CRASHED`) instead of holding the end up.
    stop: CancellationToken,
    /// How the session ended, for the action it interrupted.
    ended_as: Mutex<Option<SessionState>>,
    /// Cancelled once its end is complete: recorded, worker killed, slot freed.
    finished: CancellationToken,
    /// What the CDP proxy needs, readable without the action lock (an action may hold it for
    /// minutes while a CDP client attaches).
    cdp: CdpTarget,
}

/// A session's browser as the CDP proxy reaches it.
struct CdpTarget {
    devtools_url: String,
    download_dir: std::path::PathBuf,
    net: Arc<browserpool_pool::egress::WorkerNet>,
    /// The capability in `cdp_url`: 256 random bits, bound to this session, gone with it.
    ticket: String,
    /// CDP connections open now.
    clients: std::sync::atomic::AtomicUsize,
}

impl Live {
    /// Why a running action was cut short: the session's end.
    fn interrupted(&self, id: &str) -> ActionFailure {
        match *self.ended_as.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(SessionState::Crashed) => {
                ActionFailure::new(FailureCode::SessionCrashed, "the browser of this session crashed")
            }
            state => ActionFailure::new(
                FailureCode::SessionClosed,
                format!("session {id} ended ({}) while the action ran", state.unwrap_or(SessionState::Closed).as_str()),
            ),
        }
    }

    /// Runs `work` unless the session ends first.
    async fn unless_ended<T>(
        &self,
        id: &str,
        work: impl std::future::Future<Output = std::result::Result<T, ActionFailure>>,
    ) -> std::result::Result<T, ActionFailure> {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => Err(self.interrupted(id)),
            out = work => out,
        }
    }
}

/// The session manager. Cheap to clone.
#[derive(Clone)]
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// This server's id among the replicas sharing the database.
    replica: String,
    pool: Pool,
    admission: Admission,
    audit: AuditLog,
    /// Ends under way (see [`Sessions::end`]), a tracker token each, and a signal as each ends.
    ending: TaskTracker,
    ended: tokio::sync::Notify,
    /// Each live session's earliest deadline, on the sessions' clock.
    deadlines: Deadlines,
    /// Actions running now, a tracker token each (shutdown waits for them in its grace period).
    acting: TaskTracker,
    /// While true, Acquire answers UNAVAILABLE; live sessions go on.
    draining: std::sync::atomic::AtomicBool,
    limits: Limits,
    live: Mutex<HashMap<String, Arc<Live>>>,
    /// Sessions out of `live` whose end is under way, until it is done: `Get` reads their
    /// terminal state here, and a second `end` waits for the first.
    ending_now: Mutex<HashMap<String, Arc<Live>>>,
    metrics: crate::metrics::Metrics,
    /// Where `cdp_url`s point (set once at start).
    cdp_base: std::sync::OnceLock<String>,
    /// Where the other replicas reach this one (set once at start, by [`Sessions::recover`]).
    addrs: std::sync::OnceLock<ReplicaAddrs>,
}

impl Sessions {
    pub fn new(store: Store, pool: Pool, limits: Limits, capacity: u32, audit: AuditLog) -> Sessions {
        let admission = Admission::new(capacity);
        Sessions {
            inner: Arc::new(Inner {
                store,
                replica: format!("r-{}", uuid::Uuid::new_v4().simple()),
                pool,
                admission,
                audit,
                ending: TaskTracker::new(),
                ended: tokio::sync::Notify::new(),
                acting: TaskTracker::new(),
                deadlines: Deadlines::new(Clock::new()),
                draining: std::sync::atomic::AtomicBool::new(false),
                limits,
                live: Mutex::new(HashMap::new()),
                ending_now: Mutex::new(HashMap::new()),
                cdp_base: std::sync::OnceLock::new(),
                addrs: std::sync::OnceLock::new(),
                metrics: Default::default(),
            }),
        }
    }

    /// Starts or stops draining; returns the new state.
    pub fn set_draining(&self, drain: bool) -> bool {
        self.inner.draining.store(drain, std::sync::atomic::Ordering::SeqCst);
        tracing::info!(draining = drain, "drain state changed");
        drain
    }

    /// Whether this server refuses new sessions.
    pub fn draining(&self) -> bool {
        self.inner.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Sessions of one tenant or all (admin), oldest first; `page_token` is an opaque offset.
    pub async fn list_all(
        &self,
        tenant: Option<String>,
        state: Option<SessionState>,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<SessionRecord>, String)> {
        let offset: u64 = if page_token.is_empty() {
            0
        } else {
            page_token
                .parse::<u32>()
                .map_err(|_| ServiceError::InvalidArgument("page_token: not a token from a previous page".into()))?
                as u64
        };
        let limit = if page_size == 0 { 100 } else { page_size.min(MAX_PAGE_SIZE) };
        let mut rows = self.inner.store.sessions(&SessionFilter { tenant, state, limit: limit + 1, offset }).await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        // Live sessions carry fresher idle deadlines in memory.
        for row in rows.iter_mut() {
            if let Some(live) = self.live_map().get(&row.id) {
                *row = live.record.lock().unwrap_or_else(|e| e.into_inner()).clone();
            }
        }
        let next = if more { (offset + limit as u64).to_string() } else { String::new() };
        Ok((rows, next))
    }

    /// The service's counters and histograms.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.inner.metrics
    }

    /// Callers waiting in each tenant's queue here (tenants with none left out).
    pub fn queue_depths(&self) -> Vec<(String, u32)> {
        self.inner.admission.queue_depths()
    }

    /// (active, queued) sessions of a tenant on this server.
    pub fn usage(&self, tenant: &str) -> (u32, u32) {
        self.inner.admission.usage(tenant)
    }

    /// Worker id -> (tenant, session id) of every live session here.
    pub fn worker_owners(&self) -> HashMap<String, (String, String)> {
        self.live_map()
            .values()
            .map(|l| {
                let r = l.record.lock().unwrap_or_else(|e| e.into_inner());
                (r.worker_id.clone(), (r.tenant.clone(), r.id.clone()))
            })
            .collect()
    }

    /// Ids of the live sessions of a tenant.
    pub fn live_ids_of(&self, tenant: &str) -> Vec<String> {
        self.live_map()
            .values()
            .filter_map(|l| {
                let r = l.record.lock().unwrap_or_else(|e| e.into_inner());
                (r.tenant == tenant).then(|| r.id.clone())
            })
            .collect()
    }

    /// A session live on this server; one that ended meanwhile is not READY.
    fn live(&self, id: &str) -> Result<Arc<Live>> {
        self.live_map().get(id).cloned().ok_or_else(|| ServiceError::NotReady { id: id.into(), state: "CLOSED" })
    }

    fn live_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.inner.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ending_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.inner.ending_now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool behind the sessions.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Number of live sessions.
    pub fn live_count(&self) -> usize {
        self.live_map().len()
    }

    /// Registers this replica, then marks CRASHED the sessions of replicas that are gone (a
    /// previous run of this server, or another replica that stopped beating): their workers
    /// died with them. Their tenant slots are freed too.
    /// `previous` is the replica id of the last server on this data dir, known dead: it
    /// leaves the replica set at once, so its sessions are swept now. `addrs` is where the
    /// other replicas reach this one.
    pub async fn recover(&self, previous: Option<&str>, addrs: ReplicaAddrs) -> Result<usize> {
        if let Some(previous) = previous.filter(|p| *p != self.inner.replica) {
            self.inner.store.deregister(previous).await?;
        }
        let addrs = self.inner.addrs.get_or_init(|| addrs);
        self.inner.store.heartbeat(&self.inner.replica, addrs, now_ms()).await?;
        self.sweep().await
    }

    /// Where the other replicas reach this one.
    pub fn addrs(&self) -> ReplicaAddrs {
        self.inner.addrs.get().cloned().unwrap_or_default()
    }

    /// Whether this replica holds session `id` (live, or its end under way).
    pub fn holds(&self, id: &str) -> bool {
        self.live_map().contains_key(id) || self.ending_map().contains_key(id)
    }

    /// The store every replica shares.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// This server's id among the replicas.
    pub fn replica_id(&self) -> &str {
        &self.inner.replica
    }

    /// Forgets replicas that are gone and marks their live sessions CRASHED.
    pub async fn sweep(&self) -> Result<usize> {
        let stale_before = now_ms() - REPLICA_STALE.as_millis() as i64;
        let ids = self.inner.store.sweep_replicas(&self.inner.replica, stale_before).await?;
        for id in &ids {
            self.inner.store.end_session(id, SessionState::Crashed, now_ms(), "its server is gone").await?;
        }
        if !ids.is_empty() {
            tracing::warn!(count = ids.len(), "sessions of a server that is gone marked crashed");
        }
        Ok(ids.len())
    }

    /// Beats this replica's heartbeat until shutdown, sweeping up after replicas that are gone
    /// every few beats; then leaves the replica set (freeing its tenant slots at once).
    pub async fn heartbeat_loop(self, shutdown: CancellationToken) {
        let mut beats = 0u32;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT) => {}
                _ = shutdown.cancelled() => break,
            }
            beats += 1;
            match self.inner.store.beat(&self.inner.replica, now_ms()).await {
                Ok(true) => {}
                // Swept as gone (silent too long): its sessions are CRASHED in the database and
                // their slots handed out again, so its browsers must not run on uncounted.
                Ok(false) => {
                    tracing::error!(replica = %self.inner.replica, "this server was dropped from the replica set; ending its sessions and joining again");
                    self.close_all_as(SessionState::Crashed, "its server lost its place in the replica set").await;
                    if let Err(e) = self.inner.store.heartbeat(&self.inner.replica, &self.addrs(), now_ms()).await {
                        tracing::warn!(error = %e, "could not join the replica set again");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "replica heartbeat failed"),
            }
            if beats.is_multiple_of(5) {
                if let Err(e) = self.sweep().await {
                    tracing::warn!(error = %e, "replica sweep failed");
                }
            }
        }
        tracing::debug!("heartbeat ended");
    }

    /// Leaves the replica set: this server's row and tenant slots go. Call after every
    /// session has ended.
    pub async fn deregister(&self) {
        if let Err(e) = self.inner.store.deregister(&self.inner.replica).await {
            tracing::warn!(error = %e, "could not leave the replica set; it expires with its heartbeat");
        }
    }

    /// Takes one of the tenant's slots in the database, which every replica counts, asking
    /// again until `deadline` while other replicas hold them all.
    async fn claim(&self, id: &str, tenant: &TenantRecord, deadline: tokio::time::Instant) -> Result<Option<Claim>> {
        let store = &self.inner.store;
        // Held before asking: a caller that goes away while the claim commits still frees it.
        let claim = Claim { store: store.clone(), id: id.to_string(), released: false };
        loop {
            let now = now_ms();
            let stale_before = now - REPLICA_STALE.as_millis() as i64;
            if store.claim_slot(id, &tenant.id, &self.inner.replica, tenant.max_slots, now, stale_before).await? {
                return Ok(Some(claim));
            }
            if tokio::time::Instant::now() + CLAIM_RETRY > deadline {
                return Ok(None);
            }
            tokio::time::sleep(CLAIM_RETRY).await;
        }
    }

    /// Leases a warm worker for `claims`' tenant and subject and records the session.
    pub async fn acquire(&self, claims: &Claims, spec: AcquireSpec) -> Result<SessionRecord> {
        let started = Instant::now();
        let result = self.acquire_inner(claims, spec).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(ServiceError::QueueFull(_)) => "queue_full",
            Err(ServiceError::WaitElapsed(_)) => "timeout",
            Err(ServiceError::Draining | ServiceError::Pool(_)) => "unavailable",
            Err(ServiceError::PermissionDenied(_) | ServiceError::InvalidArgument(_)) => "refused",
            Err(_) => "error",
        };
        self.inner.metrics.acquired(outcome, started.elapsed());
        result
    }

    async fn acquire_inner(&self, claims: &Claims, spec: AcquireSpec) -> Result<SessionRecord> {
        require(claims, Scope::SessionsWrite)?;
        if self.draining() {
            return Err(ServiceError::Draining);
        }
        let viewport = validate_viewport(spec.viewport)?;
        let limits = &self.inner.limits;
        let tenant = self
            .inner
            .store
            .tenant(&claims.tenant)
            .await?
            .ok_or_else(|| ServiceError::PermissionDenied(format!("tenant {:?} does not exist", claims.tenant)))?;
        let or_default = |ms: u32, d: Duration| if ms == 0 { d } else { Duration::from_millis(ms as u64) };
        let max_ttl = or_default(tenant.max_session_ttl_ms, limits.max_session_ttl).min(limits.max_session_ttl);
        let default_idle = or_default(tenant.idle_timeout_ms, limits.idle_timeout);
        let ttl = match spec.ttl_ms {
            0 => max_ttl,
            ms => Duration::from_millis(ms as u64).min(max_ttl),
        };
        let idle = match spec.idle_timeout_ms {
            0 => default_idle,
            ms => Duration::from_millis(ms as u64),
        }
        .min(ttl);
        for (k, v) in &spec.labels {
            if k.len() > 63 || v.len() > 256 || spec.labels.len() > 32 {
                return Err(ServiceError::InvalidArgument(
                    "labels: at most 32, keys up to 63 bytes, values up to 256 bytes".into(),
                ));
            }
        }

        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(spec.wait_ms as u64);
        let quota = Quota { max_slots: tenant.max_slots, max_queue: tenant.max_queue };
        let slot = match tokio::time::timeout_at(deadline, self.inner.admission.admit(&claims.tenant, quota)).await {
            Ok(Ok(slot)) => slot,
            Ok(Err(e @ AdmissionError::QueueFull { .. })) => return Err(ServiceError::QueueFull(e.to_string())),
            Ok(Err(e)) => return Err(ServiceError::FailedPrecondition(e.to_string())),
            Err(_) => return Err(ServiceError::WaitElapsed(spec.wait_ms as u64)),
        };
        // The local queue keeps order among this server's callers; the database counts the
        // tenant's slots across every replica sharing it.
        let id = format!("s-{}", uuid::Uuid::new_v4().simple());
        let Some(claim) = self.claim(&id, &tenant, deadline).await? else {
            return Err(ServiceError::WaitElapsed(spec.wait_ms as u64));
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let lease = self.inner.pool.lease(left, viewport).await.map_err(|e| match e {
            PoolError::Exhausted(_) => ServiceError::WaitElapsed(spec.wait_ms as u64),
            other => ServiceError::Pool(other),
        })?;
        // The tenant's navigation policy holds for every request the session's pages make.
        lease.driver().set_policy(NavPolicy {
            allow_private_networks: tenant.allow_private_networks,
            allow_hosts: tenant.allow_hosts.clone(),
        });
        let queue_wait_ms = started.elapsed().as_millis().min(u32::MAX as u128) as u32;
        let now = self.now();
        let record = SessionRecord {
            id,
            tenant: claims.tenant.clone(),
            subject: claims.sub.clone(),
            worker_id: lease.worker_id().to_string(),
            state: SessionState::Ready,
            labels: spec.labels,
            created_at_ms: now,
            expires_at_ms: now + ttl.as_millis() as i64,
            idle_deadline_ms: now + idle.as_millis() as i64,
            queue_wait_ms,
            ended_at_ms: None,
            end_reason: None,
            replica: self.inner.replica.clone(),
        };
        // Recording and registering run in their own task: a caller that goes away now cannot
        // leave a READY row without a live session (an unclaimed session idles out instead).
        // If recording fails the lease drops and kills the worker.
        let this = self.clone();
        tokio::spawn(async move {
            this.inner.store.insert_session(&record, "acquired").await?;
            let died = lease.died();
            let cdp = CdpTarget {
                devtools_url: lease.devtools_url().to_string(),
                download_dir: lease.download_dir(),
                net: lease.driver().net(),
                ticket: new_ticket()?,
                clients: std::sync::atomic::AtomicUsize::new(0),
            };
            let live = Arc::new(Live {
                record: Mutex::new(record.clone()),
                slot: Mutex::new(Some((slot, claim))),
                idle_timeout: idle,
                lease: tokio::sync::Mutex::new(Some(lease)),
                stop: CancellationToken::new(),
                ended_as: Mutex::new(None),
                finished: CancellationToken::new(),
                cdp,
            });
            tokio::spawn(this.clone().watch_browser(record.id.clone(), live.stop.clone(), died));
            this.live_map().insert(record.id.clone(), live);
            this.schedule(&record.id, record.expires_at_ms.min(record.idle_deadline_ms));
            tracing::info!(session = %record.id, tenant = %record.tenant, worker = %record.worker_id, queue_wait_ms, "session acquired");
            Ok(record)
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("acquire task: {e}")))?
    }

    /// The session's `cdp_url` (with its ticket) while it is live here; empty otherwise.
    pub fn cdp_url(&self, record: &SessionRecord) -> String {
        let Some(live) = self.live_map().get(&record.id).cloned() else { return String::new() };
        let base = self.inner.cdp_base.get().map(String::as_str).unwrap_or_default();
        format!("{base}/cdp/{}?ticket={}", record.id, live.cdp.ticket)
    }

    /// The browser's own DevTools websocket of a session live here. Never put on the wire:
    /// only in-process callers (the CDP benchmark, measuring what the proxy adds) read it.
    pub fn devtools_url(&self, id: &str) -> Option<String> {
        self.live_map().get(id).map(|live| live.cdp.devtools_url.clone())
    }

    /// Sets the base `cdp_url`s are built on (`ws://host:port` or `--public-url`).
    pub fn set_cdp_base(&self, base: String) {
        let _ = self.inner.cdp_base.set(base.trim_end_matches('/').to_string());
    }

    /// Opens a CDP connection to session `id` for the holder of `claims` (a bearer token) or
    /// of `ticket`, within the per-session cap; the slot is held until the returned
    /// [`CdpAccess`] drops.
    pub fn cdp_open(
        &self,
        claims: Option<&Claims>,
        ticket: Option<&str>,
        id: &str,
        per_session: usize,
    ) -> std::result::Result<CdpAccess, crate::cdp::CdpError> {
        use crate::cdp::CdpError;
        let live = self.live_map().get(id).cloned();
        let Some(live) = live else {
            return Err(CdpError::NotFound(id.into()));
        };
        let record = live.record.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match (claims, ticket) {
            (Some(claims), _) => {
                if !may_use(claims, &record) {
                    return Err(CdpError::NotFound(id.into()));
                }
                if !claims.has(Scope::SessionsWrite) {
                    return Err(CdpError::Scope);
                }
            }
            (None, Some(ticket)) if same_secret(ticket, &live.cdp.ticket) => {}
            (None, Some(_)) => return Err(CdpError::NotFound(id.into())),
            (None, None) => return Err(CdpError::NoCredentials),
        }
        let clients = &live.cdp.clients;
        let taken =
            clients.fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |n| {
                (n < per_session).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(CdpError::SessionFull { id: id.into(), cap: per_session });
        }
        Ok(CdpAccess { sessions: self.clone(), live, record })
    }

    /// Ends the session as CRASHED as soon as its browser dies, with nobody calling: its slot
    /// is freed and its event readers get `SessionEnded`. Ends with the session.
    async fn watch_browser(self, id: String, stop: CancellationToken, mut died: watch::Receiver<Option<String>>) {
        let why = tokio::select! {
            _ = stop.cancelled() => return,
            why = died.wait_for(Option::is_some) => match why {
                Ok(why) => why.clone().unwrap_or_default(),
                Err(_) => return,
            },
        };
        tracing::warn!(session = %id, reason = %why, "the browser of a session died");
        if let Err(e) = self.end(&id, SessionState::Crashed, &format!("chromium died: {why}")).await {
            tracing::warn!(session = %id, error = %e, "could not record a crash");
        }
    }

    /// Ends the caller's session (idempotent). Returns whether this call ended it, and its state.
    pub async fn release(&self, claims: &Claims, id: &str) -> Result<(bool, SessionState)> {
        require(claims, Scope::SessionsWrite)?;
        let record = self.get(claims, id).await?;
        if record.state.is_terminal() {
            return Ok((false, record.state));
        }
        self.here(&record)?;
        let ended = self.end_detached(id, SessionState::Closed, "released").await;
        Ok((ended, SessionState::Closed))
    }

    /// The caller's session, live or ended.
    pub async fn get(&self, claims: &Claims, id: &str) -> Result<SessionRecord> {
        let live = self.live_map().get(id).cloned().or_else(|| self.ending_map().get(id).cloned());
        let record = match live {
            Some(live) => live.record.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => self.inner.store.session(id).await?.ok_or_else(|| ServiceError::SessionNotFound(id.into()))?,
        };
        if !may_use(claims, &record) {
            return Err(ServiceError::SessionNotFound(id.into()));
        }
        Ok(record)
    }

    /// The caller tenant's sessions, oldest first. `page_token` is an opaque offset.
    pub async fn list(
        &self,
        claims: &Claims,
        state: Option<SessionState>,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<SessionRecord>, String)> {
        require(claims, Scope::SessionsRead)?;
        let (rows, next) = self.list_all(Some(claims.tenant.clone()), state, page_size, page_token).await?;
        Ok((rows.into_iter().filter(|r| may_use(claims, r)).collect(), next))
    }

    /// Pushes the idle deadline of the caller's session (never past its TTL).
    pub async fn renew(&self, claims: &Claims, id: &str, idle_timeout_ms: u32) -> Result<SessionRecord> {
        require(claims, Scope::SessionsWrite)?;
        self.attach(claims, id).await?;
        let live = self.live(id)?;
        let idle = match idle_timeout_ms {
            0 => live.idle_timeout,
            ms => Duration::from_millis(ms as u64),
        };
        let (record, deadline) = {
            let mut rec = live.record.lock().unwrap_or_else(|e| e.into_inner());
            rec.idle_deadline_ms = (self.now() + idle.as_millis() as i64).min(rec.expires_at_ms);
            (rec.clone(), rec.idle_deadline_ms)
        };
        self.inner.store.touch(id, deadline).await?;
        // A shorter idle timeout can move the deadline earlier than the scheduled look.
        self.schedule(id, deadline);
        Ok(record)
    }

    /// Checks that the caller may drive session `id` and that it is READY.
    pub async fn attach(&self, claims: &Claims, id: &str) -> Result<SessionRecord> {
        let record = self.get(claims, id).await?;
        if record.state.is_terminal() {
            return Err(ServiceError::NotReady { id: id.into(), state: record.state.as_str() });
        }
        self.here(&record)?;
        Ok(record)
    }

    /// A live session not in this server's map is live on another replica: only that one
    /// holds its browser.
    pub fn here(&self, record: &SessionRecord) -> Result<()> {
        if !record.state.is_terminal() && !self.live_map().contains_key(&record.id) {
            return Err(ServiceError::OnAnotherReplica(record.id.clone()));
        }
        Ok(())
    }

    /// Runs one action on the caller's session. Never fails as a whole: every problem is in
    /// the report, so a stream survives a bad action. Its record goes into `place`, taken
    /// before (see [`AuditLog::reserve`]).
    pub async fn act(&self, claims: &Claims, id: &str, input: ActionInput, rpc: &str, place: Place) -> ActionReport {
        let started = Instant::now();
        // Only what identifies the target: a URL without its query, a selector, never text.
        // Taken before the input moves into the action (a payload may be megabytes of HTML).
        let target = match browserpool_pool::Action::parse_named(&input.action, &input.selector, &input.payload) {
            Ok((action, _)) => match action.audit_target() {
                browserpool_pool::Target::Url(url) => crate::redact::url_target(url),
                browserpool_pool::Target::Selector(selector) => selector.to_string(),
                browserpool_pool::Target::None => String::new(),
            },
            // Refused before it runs: the selector as sent, if any.
            Err(_) => input.selector.clone(),
        };
        let mut report = ActionReport {
            id: input.id.clone(),
            action: input.action.clone(),
            alias_of: String::new(),
            outcome: Ok(ActionOutput::default()),
            duration_ms: 0,
        };
        let canonical = canonicalize(&input.action).ok().map(|c| c.name);
        let known = canonical.is_some();
        let span = crate::telemetry::action_span(&claims.tenant, id, canonical.unwrap_or("unknown"));
        report.outcome =
            tracing::Instrument::instrument(self.act_inner(claims, id, input, &mut report), span.clone()).await;
        report.duration_ms = started.elapsed().as_millis().min(u32::MAX as u128) as u32;
        // Unknown names are the client's strings: counted together, never as labels.
        let label = if known { report.action.as_str() } else { "unknown" };
        self.inner.metrics.acted(label, report.outcome.is_ok(), started.elapsed());
        if let Err(f) = &report.outcome {
            tracing::debug!(session = %id, action = %report.action, code = ?f.code, "action failed");
        }
        crate::telemetry::record_outcome(
            &span,
            report.outcome.as_ref().err().map(|f| format!("{:?}", f.code)).as_deref(),
        );
        place.record(crate::audit::Entry {
            tenant: claims.tenant.clone(),
            subject: claims.sub.clone(),
            jti_hash: claims.jti_hash(),
            session_id: id.to_string(),
            rpc: rpc.to_string(),
            action: report.action.clone(),
            alias_of: report.alias_of.clone(),
            target,
            outcome: if report.outcome.is_ok() { "ok".into() } else { "error".into() },
            code: report.outcome.as_ref().err().map(|f| format!("{:?}", f.code)).unwrap_or_default(),
            duration_ms: report.duration_ms,
        });
        report
    }

    async fn act_inner(
        &self,
        claims: &Claims,
        id: &str,
        input: ActionInput,
        report: &mut ActionReport,
    ) -> std::result::Result<ActionOutput, ActionFailure> {
        let canonical = canonicalize(&input.action).map_err(|u| ActionFailure {
            code: FailureCode::UnknownAction,
            message: format!("unknown action {:?}", u.name),
            did_you_mean: u.did_you_mean,
            dialog: None,
        })?;
        report.action = canonical.name.to_string();
        report.alias_of = canonical.alias_of.clone();
        // The scope check runs on the canonical action, so an alias can never widen it.
        let scope = match canonical.access(&input.payload) {
            Access::Read => Scope::SessionsRead,
            Access::Write => Scope::SessionsWrite,
            Access::ContextExport => Scope::ContextExport,
            Access::ContextImport => Scope::ContextImport,
        };
        if !claims.has(scope) {
            return Err(ActionFailure::new(
                FailureCode::PermissionDenied,
                format!("{} needs scope {}", canonical.name, scope.as_str()),
            ));
        }
        let timeout = match input.timeout_ms {
            0 => DEFAULT_ACTION_TIMEOUT,
            ms if Duration::from_millis(ms as u64) > MAX_ACTION_TIMEOUT => {
                return Err(ActionFailure::new(
                    FailureCode::InvalidArgument,
                    format!("timeout_ms: {ms} exceeds the maximum of {}", MAX_ACTION_TIMEOUT.as_millis()),
                ))
            }
            ms => Duration::from_millis(ms as u64),
        };
        let closed = |state: &str| match state {
            "CRASHED" => ActionFailure::new(FailureCode::SessionCrashed, "the browser of this session crashed"),
            _ => ActionFailure::new(FailureCode::SessionClosed, format!("session {id} is {state}")),
        };
        let live = match self.get(claims, id).await {
            Ok(r) if r.state.is_terminal() => return Err(closed(r.state.as_str())),
            Ok(_) => self.live_map().get(id).cloned().ok_or_else(|| closed("CLOSED"))?,
            Err(_) => return Err(ActionFailure::new(FailureCode::SessionClosed, format!("session {id} not found"))),
        };
        let call = ActionCall { action: canonical, selector: input.selector, payload: input.payload, timeout };
        let mut guard = live.lease.lock().await;
        let Some(lease) = guard.as_mut() else {
            return Err(closed("CLOSED"));
        };
        if lease.crashed() {
            drop(guard);
            self.end_detached(id, SessionState::Crashed, "chromium exited").await;
            return Err(ActionFailure::new(FailureCode::SessionCrashed, "the browser of this session crashed"));
        }
        let _acting = self.inner.acting.token();
        let run = async {
            // The legacy tab_index is never dropped: it goes through switch_tab first (sticky).
            if let Some(tab) = input.tab_index {
                let switch = ActionCall {
                    action: canonicalize("switch_tab").expect("switch_tab is in the catalog"),
                    selector: String::new(),
                    payload: serde_json::json!(tab),
                    timeout,
                };
                lease.driver().run(&switch).await.map_err(|mut f| {
                    f.message = format!("tab_index: {}", f.message);
                    f
                })?;
            }
            lease.driver().run(&call).await
        };
        let outcome = live.unless_ended(id, run).await;
        let crashed = outcome.is_err() && lease.crashed();
        drop(guard);
        if crashed {
            self.end_detached(id, SessionState::Crashed, "chromium exited").await;
            return Err(ActionFailure::new(FailureCode::SessionCrashed, "the browser of this session crashed"));
        }
        self.touch(&live).await;
        outcome
    }

    /// Runs up to [`MAX_BATCH`] actions in order, each isolated: a failure does not stop the
    /// rest unless `stop_on_error`. Returns one report per action run.
    pub async fn batch(
        &self,
        claims: &Claims,
        id: &str,
        actions: Vec<ActionInput>,
        stop_on_error: bool,
    ) -> Result<Vec<ActionReport>> {
        if actions.len() > MAX_BATCH {
            return Err(ServiceError::InvalidArgument(format!(
                "actions: {} exceeds the maximum of {MAX_BATCH}",
                actions.len()
            )));
        }
        if let Some(i) = actions.iter().position(|a| a.action.eq_ignore_ascii_case("batch")) {
            return Err(ServiceError::InvalidArgument(format!("actions[{i}]: a batch cannot contain a batch")));
        }
        self.attach(claims, id).await?;
        let places = self.inner.audit.reserve_many(actions.len())?;
        let mut reports = Vec::with_capacity(actions.len());
        for (input, place) in actions.into_iter().zip(places) {
            let report = self.act(claims, id, input, "/browserpool.v1.Sessions/Batch", place).await;
            let failed = report.outcome.is_err();
            reports.push(report);
            if failed && stop_on_error {
                break;
            }
        }
        Ok(reports)
    }

    /// Runs `f` with the session's lease held (actions of the session wait meanwhile), within
    /// [`DEFAULT_ACTION_TIMEOUT`] and unless the session ends first.
    async fn with_lease<T>(
        &self,
        id: &str,
        what: &str,
        f: impl for<'a> FnOnce(&'a Lease) -> futures::future::BoxFuture<'a, std::result::Result<T, ActionFailure>>,
    ) -> Result<T> {
        let live = self.live(id)?;
        let guard = live.lease.lock().await;
        let lease = guard.as_ref().ok_or_else(|| ServiceError::NotReady { id: id.into(), state: "CLOSED" })?;
        let _acting = self.inner.acting.token();
        let bounded = async {
            tokio::time::timeout(DEFAULT_ACTION_TIMEOUT, f(lease)).await.unwrap_or_else(|_| {
                Err(ActionFailure::new(
                    FailureCode::Timeout,
                    format!("{what} did not finish within {} ms", DEFAULT_ACTION_TIMEOUT.as_millis()),
                ))
            })
        };
        let out = live.unless_ended(id, bounded).await.map_err(ServiceError::Action)?;
        drop(guard);
        self.touch(&live).await;
        Ok(out)
    }

    /// Captures one origin's state of the caller's session.
    pub async fn export_context(&self, claims: &Claims, id: &str, opts: CaptureOptions) -> Result<ContextState> {
        require(claims, Scope::ContextExport)?;
        self.attach(claims, id).await?;
        self.with_lease(id, "export", |lease| Box::pin(async move { lease.driver().export_context(&opts).await })).await
    }

    /// Applies a verified state to the caller's session (strict replace for its origin).
    pub async fn import_context(
        &self,
        claims: &Claims,
        id: &str,
        state: ContextState,
        strict_origin: bool,
    ) -> Result<(u32, u32)> {
        require(claims, Scope::ContextImport)?;
        self.attach(claims, id).await?;
        self.with_lease(id, "import", |lease| {
            Box::pin(async move { lease.driver().import_context(&state, strict_origin).await })
        })
        .await
    }

    /// The audit trail (adapters check its health before running actions, and record
    /// context transfers).
    pub fn audit(&self) -> &AuditLog {
        &self.inner.audit
    }

    /// A reader of the session's live events from now on.
    pub async fn events(&self, claims: &Claims, id: &str) -> Result<EventReader> {
        require(claims, Scope::SessionsRead)?;
        self.attach(claims, id).await?;
        let live = self.live(id)?;
        let guard = live.lease.lock().await;
        match guard.as_ref() {
            Some(lease) => Ok(lease.driver().events()),
            None => Err(ServiceError::NotReady { id: id.into(), state: "CLOSED" }),
        }
    }

    async fn touch(&self, live: &Live) {
        let (id, deadline) = {
            let mut rec = live.record.lock().unwrap_or_else(|e| e.into_inner());
            rec.idle_deadline_ms = (self.now() + live.idle_timeout.as_millis() as i64).min(rec.expires_at_ms);
            (rec.id.clone(), rec.idle_deadline_ms)
        };
        if let Err(e) = self.inner.store.touch(&id, deadline).await {
            tracing::warn!(session = %id, error = %e, "could not record idle deadline");
        }
    }

    /// [`Sessions::end`] in its own task, so a caller that goes away cannot leave it half done.
    pub async fn end_detached(&self, id: &str, state: SessionState, reason: impl Into<String>) -> bool {
        let this = self.clone();
        let id = id.to_string();
        let reason = reason.into();
        match tokio::spawn(async move { this.end(&id, state, &reason).await }).await {
            Ok(Ok(ended)) => ended,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not record session end");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "session end task failed");
                false
            }
        }
    }

    /// Ends a live session: out of the map, terminal state recorded, worker killed. Returns
    /// false when it had already ended.
    /// An end already under way elsewhere is waited for, so a caller that then reports the
    /// end (an action that found its browser dead, say) never runs ahead of its record.
    pub async fn end(&self, id: &str, state: SessionState, reason: &str) -> Result<bool> {
        let taken = {
            let mut live = self.live_map();
            let taken = live.remove(id);
            if let Some(taken) = &taken {
                self.ending_map().insert(id.to_string(), taken.clone());
            }
            taken
        };
        let Some(live) = taken else {
            let under_way = self.ending_map().get(id).cloned();
            if let Some(other) = under_way {
                other.finished.cancelled().await;
            }
            return Ok(false);
        };
        // Counted until the worker is gone, so shutdown can wait for ends already under way
        // (the reaper's, say) and never return with a worker or profile still alive.
        let _ending = Ending::new(&self.inner, id, &live);
        let at = self.now();
        {
            let mut rec = live.record.lock().unwrap_or_else(|e| e.into_inner());
            rec.state = state;
            rec.ended_at_ms = Some(at);
            rec.end_reason = Some(reason.to_string());
        }
        // A running action answers at once and lets go of the lease.
        *live.ended_as.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
        live.stop.cancel();
        let recorded = self.inner.store.end_session(id, state, at, reason).await;
        let lease = live.lease.lock().await.take();
        if let Some(lease) = lease {
            // The last event readers see; they end when the worker (and its hub) is gone.
            lease.driver().emit(EventKind::SessionEnded { state: state.as_str().into(), reason: reason.into() });
            lease.release().await;
        }
        // Only now, with the worker gone, may the next waiter (here or on another replica) be
        // admitted.
        let slots = live.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((slot, claim)) = slots {
            claim.release().await;
            drop(slot);
        }
        tracing::info!(session = %id, state = state.as_str(), reason, "session ended");
        recorded?;
        Ok(true)
    }

    /// Ends sessions past their TTL or idle deadline until shutdown. It sleeps until the
    /// earliest deadline (see [`Deadlines`]), so it looks only at sessions that may be due: an
    /// entry whose session was touched since is scheduled again with its new deadline (idle
    /// deadlines only move later, so touching needs no heap work).
    pub async fn reap_loop(self, shutdown: CancellationToken) {
        while let Some(due) = self.inner.deadlines.next_due(&shutdown).await {
            let now = self.now();
            for id in due {
                let Some(live) = self.live_map().get(&id).cloned() else { continue };
                let (expires, idle) = {
                    let rec = live.record.lock().unwrap_or_else(|e| e.into_inner());
                    (rec.expires_at_ms, rec.idle_deadline_ms)
                };
                let Some(reason) = deadlines::verdict(now, expires, idle) else {
                    self.inner.deadlines.schedule(&id, expires.min(idle));
                    continue;
                };
                // One task each: ending waits for a running action, which must not hold up others.
                let this = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = this.end(&id, SessionState::Expired, reason).await {
                        tracing::warn!(session = %id, error = %e, "could not record expiry");
                    }
                });
            }
        }
        tracing::debug!("reaper ended");
    }

    /// Now on the sessions' clock (which deadlines are kept on).
    fn now(&self) -> i64 {
        self.inner.deadlines.clock().now_ms()
    }

    /// Schedules a look at session `id` at `at_ms` (its earliest deadline).
    fn schedule(&self, id: &str, at_ms: i64) {
        self.inner.deadlines.schedule(id, at_ms);
    }

    /// Waits until no session is live here, at most `timeout`; returns how many still are.
    pub async fn wait_sessions(&self, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.inner.ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let live = self.live_count();
            if live == 0 || tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.live_count();
            }
        }
    }

    /// Waits until no action runs, at most `grace`; returns how many still run then.
    pub async fn wait_actions(&self, grace: Duration) -> usize {
        // Closed only for the wait: actions still start (and count) until the sessions end.
        self.inner.acting.close();
        let _ = tokio::time::timeout(grace, self.inner.acting.wait()).await;
        self.inner.acting.reopen();
        self.inner.acting.len()
    }

    /// Ends every live session as `state` (a shutdown whose grace ran out kills them).
    pub async fn end_all(&self, state: SessionState, reason: &str) {
        self.close_all_as(state, reason).await
    }

    /// Ends every live session (server shutdown).
    pub async fn close_all(&self, reason: &str) {
        self.close_all_as(SessionState::Closed, reason).await
    }

    async fn close_all_as(&self, state: SessionState, reason: &str) {
        let ids: Vec<String> = self.live_map().keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.end(&id, state, reason).await {
                tracing::warn!(session = %id, error = %e, "could not record close");
            }
        }
        // Ends started elsewhere (reaper, release) finish before shutdown goes on. Each waits at
        // most for its session's running action, which has a deadline.
        self.inner.ending.close();
        self.inner.ending.wait().await;
        self.inner.ending.reopen();
    }
}

/// One CDP connection's hold on its session: what the relay needs, and a place among the
/// session's connections until dropped.
pub struct CdpAccess {
    sessions: Sessions,
    live: Arc<Live>,
    record: SessionRecord,
}

impl CdpAccess {
    /// The session as it was when the connection opened.
    pub fn record(&self) -> &SessionRecord {
        &self.record
    }

    /// The browser's own DevTools websocket.
    pub fn devtools_url(&self) -> &str {
        &self.live.cdp.devtools_url
    }

    /// The session's download directory (created, owner only).
    pub fn download_dir(&self) -> std::io::Result<String> {
        let dir = &self.live.cdp.download_dir;
        crate::auth::create_private_dir(dir)?;
        Ok(dir.display().to_string())
    }

    pub fn net(&self) -> Arc<browserpool_pool::egress::WorkerNet> {
        self.live.cdp.net.clone()
    }

    /// Cancelled when the session ends.
    pub fn stop(&self) -> CancellationToken {
        self.live.stop.clone()
    }

    /// Why the session ended, once it has.
    pub fn end_reason(&self) -> String {
        let state = self.live.ended_as.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(SessionState::Closed);
        let rec = self.live.record.lock().unwrap_or_else(|e| e.into_inner());
        format!("session ended ({}): {}", state.as_str(), rec.end_reason.clone().unwrap_or_default())
    }

    /// Pushes the session's idle deadline (CDP traffic is activity); in the background.
    pub fn touch(&self) {
        let (sessions, live) = (self.sessions.clone(), self.live.clone());
        tokio::spawn(async move { sessions.touch(&live).await });
    }
}

impl Drop for CdpAccess {
    fn drop(&mut self) {
        self.live.cdp.clients.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A tenant slot held in the database. Released explicitly when its session ends; dropped
/// unreleased (a failed acquire), it is released in the background.
struct Claim {
    store: Store,
    id: String,
    released: bool,
}

impl Claim {
    async fn release(mut self) {
        self.released = true;
        if let Err(e) = self.store.release_slot(&self.id).await {
            tracing::warn!(claim = %self.id, error = %e, "could not free a tenant slot; it goes with this replica");
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (store, id) = (self.store.clone(), std::mem::take(&mut self.id));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = store.release_slot(&id).await {
                    tracing::warn!(claim = %id, error = %e, "could not free a tenant slot; it goes with this replica");
                }
            });
        }
    }
}

/// An end under way, counted by its tracker token; dropping it (even by cancellation)
/// un-counts it, forgets the session and tells whoever waits for that end.
struct Ending<'a> {
    inner: &'a Inner,
    id: String,
    live: Arc<Live>,
    _counted: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl<'a> Ending<'a> {
    fn new(inner: &'a Inner, id: &str, live: &Arc<Live>) -> Self {
        Ending { inner, id: id.to_string(), live: live.clone(), _counted: inner.ending.token() }
    }
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.inner.ending_now.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
        self.live.finished.cancel();
        self.inner.ended.notify_waiters();
    }
}

/// Whether `claims` may see and use this session.
fn may_use(claims: &Claims, record: &SessionRecord) -> bool {
    may_use_session(claims, &record.tenant, &record.subject)
}

/// Whether `claims` may use a session of `tenant` acquired by `subject`.
pub fn may_use_session(claims: &Claims, tenant: &str, subject: &str) -> bool {
    if claims.is_admin() {
        return true;
    }
    // Another subject of the tenant needs sessions:shared plus sessions:write.
    tenant == claims.tenant
        && (subject == claims.sub || (claims.has(Scope::SessionsShared) && claims.has(Scope::SessionsWrite)))
}

/// RPC-level scope check.
pub fn require(claims: &Claims, scope: Scope) -> Result<()> {
    if claims.has(scope) {
        Ok(())
    } else {
        Err(ServiceError::PermissionDenied(format!("this call needs scope {}", scope.as_str())))
    }
}

fn validate_viewport(v: Option<Viewport>) -> Result<Viewport> {
    let Some(mut v) = v else { return Ok(Viewport::default()) };
    let d = Viewport::default();
    if v.width == 0 {
        v.width = d.width;
    }
    if v.height == 0 {
        v.height = d.height;
    }
    if v.scale == 0.0 {
        v.scale = 1.0;
    }
    if !v.scale.is_finite() || !(1.0..=3.0).contains(&v.scale) {
        return Err(ServiceError::InvalidArgument(format!("viewport.scale: {} is not within 1..3", v.scale)));
    }
    if v.width > MAX_VIEWPORT_SIDE || v.height > MAX_VIEWPORT_SIDE {
        return Err(ServiceError::InvalidArgument(format!(
            "viewport: {}x{} exceeds {MAX_VIEWPORT_SIDE} px a side",
            v.width, v.height
        )));
    }
    Ok(v)
}

/// A CDP ticket: 32 random bytes, hex.
fn new_ticket() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ServiceError::Internal(format!("random: {e}")))?;
    Ok(hex::encode(bytes))
}

/// Compares two secrets in time that does not depend on where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Milliseconds since the epoch.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viewport_defaults_and_bounds() {
        assert_eq!(validate_viewport(None).unwrap(), Viewport::default());
        let v = validate_viewport(Some(Viewport { width: 0, height: 0, scale: 0.0, mobile: false })).unwrap();
        assert_eq!(v, Viewport::default());
        for bad in [0.5, 4.0, f64::NAN, f64::INFINITY] {
            let err =
                validate_viewport(Some(Viewport { width: 100, height: 100, scale: bad, mobile: false })).unwrap_err();
            assert!(err.to_string().contains("viewport.scale"), "{err}");
        }
        assert!(validate_viewport(Some(Viewport { width: 20000, height: 10, scale: 1.0, mobile: false })).is_err());
    }

    #[test]
    fn states_round_trip() {
        for s in ["QUEUED", "READY", "CLOSED", "CRASHED", "EXPIRED", "KILLED"] {
            assert_eq!(SessionState::parse(s).unwrap().as_str(), s);
        }
        assert!(SessionState::parse("ready").is_none());
        assert!(SessionState::Closed.is_terminal() && !SessionState::Ready.is_terminal());
    }
}
