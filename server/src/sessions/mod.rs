//! Session management: acquire a lease, record it, run actions in order, end it exactly once.
//! This module holds the types and the shared state; `lifecycle` a session's life from
//! acquire to end, `act` what runs on a live session, `replicas` the replica set.
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
    EventReader, FailureCode, LeaseSpec, NavPolicy, PoolError, Upstream, Viewport,
};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, AdmissionError, Quota, Slot};
use crate::audit::{AuditLog, Place};
use crate::auth::{Claims, Scope};
use crate::browsers::{Browsers, Leased};
use crate::clock::{now_ms, Clock};
use crate::deadlines::{self, Deadlines};
use crate::error::{Result, ServiceError};
pub use crate::model::SessionState;
use crate::model::{RecordMode, ReplicaAddrs, SessionRecord, TenantRecord};
use crate::store::{SessionFilter, Store};

mod act;
mod cdp_access;
mod ending;
mod files;
mod kept;
mod lifecycle;
mod live_view;
mod replicas;
mod stored;
mod waiting;

pub use cdp_access::CdpAccess;
use files::ArtifactTerms;
pub use files::{FileKind, SessionFile, MAX_FILE_BYTES};
pub use kept::{KeepFiles, RECORDING_NAME};
use lifecycle::Claim;
pub use live_view::{IssuedLink, LiveAccess, LiveError, LiveMode, DEFAULT_LINK_TTL};
pub use replicas::{drain_reach, DrainReach};
use replicas::{HeldBack, Unwritten};
pub use waiting::{AcquireWatch, WaitStatus};

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
/// The longest time between two heartbeats that went through that still counts as no gap.
pub const BEAT_GAP: Duration = Duration::from_secs(3);
/// How often a request admitted here asks again for a tenant slot held by other replicas.
const CLAIM_RETRY: Duration = Duration::from_millis(100);

/// Server-wide session limits (a tenant's own quotas come with tenancy).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_session_ttl: Duration,
    pub idle_timeout: Duration,
    /// Where ended sessions' files are kept, and how long; `None`: they go with the session.
    pub keep_files: Option<KeepFiles>,
    /// Why sessions cannot be recorded here, if they cannot (no ffmpeg, nothing kept).
    pub cannot_record: Option<String>,
}

/// What `Acquire` asks for, already unwrapped from the wire.
#[derive(Debug, Clone, Default)]
pub struct AcquireSpec {
    pub wait_ms: u32,
    pub ttl_ms: u32,
    pub idle_timeout_ms: u32,
    pub viewport: Option<Viewport>,
    pub labels: BTreeMap<String, String>,
    /// `None`: the tenant's default.
    pub record: Option<RecordMode>,
    /// Where the call notes how its wait goes (`AcquireWatched`).
    pub watch: Option<AcquireWatch>,
    /// How the browser presents itself (checked before the call queues).
    pub emulation: browserpool_pool::Emulation,
    /// The upstream proxy to leave through; empty: the tenant's default.
    pub proxy_id: String,
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
    lease: tokio::sync::Mutex<Option<Box<dyn Leased>>>,
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
    /// The names of the files clients uploaded (the others in its files directory are
    /// downloads).
    uploads: Mutex<std::collections::BTreeSet<String>>,
    /// Whether it is recorded, and when its recording is kept.
    record_mode: RecordMode,
    /// What its tenant allows it to leave behind.
    terms: ArtifactTerms,
    /// The job failed: an action failed, or the client said so at release.
    failed: std::sync::atomic::AtomicBool,
    /// Its live view: screen, links, viewers.
    live_views: live_view::LiveViews,
    /// The idle deadline the database has (see `touch`).
    idle_written_ms: std::sync::atomic::AtomicI64,
}

/// A session's browser as the CDP proxy reaches it.
struct CdpTarget {
    devtools_url: String,
    files_dir: std::path::PathBuf,
    net: Arc<browserpool_pool::egress::WorkerNet>,
    /// The session's browser context when it shares its tenant's browser: the proxy keeps
    /// its clients to it.
    context: Option<String>,
    /// The capability in `cdp_url`: 256 random bits, bound to this session, gone with it, and
    /// with the revocation of the token that acquired it.
    ticket: String,
    /// The `jti` of the token that acquired the session: its ticket dies with it.
    acquired_by: String,
    /// CDP connections open now.
    clients: std::sync::atomic::AtomicUsize,
}

impl Live {
    /// Network bytes (sent, received) its pages carried so far (a context session's egress is
    /// its own too).
    fn bytes(&self) -> (u64, u64) {
        self.cdp.net.meter.totals()
    }

    /// Its record as of now: the live byte counts included.
    fn record_now(&self) -> SessionRecord {
        let mut record = self.record.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if record.ended_at_ms.is_none() {
            record.bytes = self.bytes();
        }
        record
    }

    /// Why a running action was cut short: the session's end.
    fn interrupted(&self, id: &str) -> ActionFailure {
        match *self.ended_as.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(SessionState::Crashed) => ActionFailure::browser_crashed(),
            state => ActionFailure::new(
                FailureCode::SessionClosed,
                format!(
                    "session {id} ended ({}) while the action ran; acquire a new session",
                    state.unwrap_or(SessionState::Closed).as_str()
                ),
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
    browsers: Arc<dyn Browsers>,
    admission: Admission,
    audit: AuditLog,
    /// Ends under way (see [`Sessions::end`]), a tracker token each, and a signal as each ends.
    ending: TaskTracker,
    ended: tokio::sync::Notify,
    /// Each live session's earliest deadline, on the sessions' clock.
    deadlines: Deadlines,
    /// Actions running now, a tracker token each (shutdown waits for them in its grace period).
    acting: TaskTracker,
    /// Every task spawned for a session, a stream or a relay; shutdown joins them.
    tasks: TaskTracker,
    /// While true, Acquire answers UNAVAILABLE, callers already queued included (they retry
    /// on another replica); live sessions go on.
    draining: watch::Sender<bool>,
    limits: Limits,
    live: Mutex<HashMap<String, Arc<Live>>>,
    /// Sessions out of `live` whose end is under way, until it is done: `Get` reads their
    /// terminal state here, and a second `end` waits for the first.
    ending_now: Mutex<HashMap<String, Arc<Live>>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The upstream proxies sessions may leave through.
    proxies: crate::proxies::Proxies,
    /// Where `cdp_url`s point (set once at start).
    cdp_base: std::sync::OnceLock<String>,
    /// Where the other replicas reach this one (set once at start, by [`Sessions::recover`]).
    addrs: std::sync::OnceLock<ReplicaAddrs>,
    /// How this replica has reached the database lately: whether it may judge other replicas
    /// by their heartbeats (see [`Sessions::stale_before`]).
    store_seen: Mutex<StoreSeen>,
    /// Writes the database refused that must still be made: retried after each heartbeat it
    /// answers.
    unwritten: Unwritten,
}

/// This replica's own view of the database, from its heartbeats.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoreSeen {
    /// Since when its beats have gone through without a gap; `None` while they fail.
    pub(crate) since: Option<std::time::Instant>,
    /// Its last beat that went through.
    pub(crate) last_ok: std::time::Instant,
}

impl StoreSeen {
    /// A replica that has just reached the database, at `now` (it starts counting).
    pub(crate) fn started(now: std::time::Instant) -> StoreSeen {
        StoreSeen { since: Some(now), last_ok: now }
    }

    /// Notes a heartbeat that went through (`ok`) or failed, at `now`. A beat after a gap
    /// (failed beats, or none for longer than [`BEAT_GAP`]) starts the count again.
    pub(crate) fn went(&mut self, ok: bool, now: std::time::Instant) {
        if !ok {
            self.since = None;
            return;
        }
        if self.since.is_none() || now.saturating_duration_since(self.last_ok) > BEAT_GAP {
            self.since = Some(now);
        }
        self.last_ok = now;
    }

    /// Whether, at `now`, this replica may judge others by their heartbeats: it reaches the
    /// database, and has without a gap for [`REPLICA_STALE`].
    pub(crate) fn may_judge(&self, now: std::time::Instant) -> bool {
        now.saturating_duration_since(self.last_ok) <= BEAT_GAP
            && self.since.is_some_and(|since| now.saturating_duration_since(since) >= REPLICA_STALE)
    }
}

#[cfg(test)]
mod store_seen_tests {
    use super::*;
    use std::time::Instant;

    fn beating(from: Instant, secs: std::ops::Range<u64>, seen: &mut StoreSeen) {
        for s in secs {
            seen.went(true, from + Duration::from_secs(s));
        }
    }

    #[test]
    fn a_replica_judges_only_after_ten_seconds_of_beats_without_a_gap() {
        let t0 = Instant::now();
        let mut seen = StoreSeen::started(t0);
        assert!(!seen.may_judge(t0 + Duration::from_secs(5)), "just started");
        beating(t0, 1..11, &mut seen);
        assert!(seen.may_judge(t0 + Duration::from_secs(10)));
        // Beats fail for 15 s: no judging during the outage...
        seen.went(false, t0 + Duration::from_secs(11));
        assert!(!seen.may_judge(t0 + Duration::from_secs(12)));
        // ...nor for 10 s after the first beat that goes through again.
        beating(t0, 26..35, &mut seen);
        assert!(!seen.may_judge(t0 + Duration::from_secs(34)));
        seen.went(true, t0 + Duration::from_secs(36));
        assert!(seen.may_judge(t0 + Duration::from_secs(36)));
    }

    #[test]
    fn a_beat_that_took_long_is_a_gap_and_silence_stops_judging() {
        let t0 = Instant::now();
        let mut seen = StoreSeen::started(t0);
        beating(t0, 1..12, &mut seen);
        assert!(seen.may_judge(t0 + Duration::from_secs(11)));
        // No beat for 5 s (one stuck on the database) is not judging time...
        assert!(!seen.may_judge(t0 + Duration::from_secs(16)));
        // ...and the beat that ends it starts the count again.
        seen.went(true, t0 + Duration::from_secs(16));
        assert_eq!(seen.since, Some(t0 + Duration::from_secs(16)));
        assert!(!seen.may_judge(t0 + Duration::from_secs(17)));
    }
}

impl Sessions {
    pub fn new(
        store: Store,
        browsers: Arc<dyn Browsers>,
        limits: Limits,
        capacity: u32,
        audit: AuditLog,
        metrics: Arc<crate::metrics::Metrics>,
        sealer: Arc<crate::secrets::Sealer>,
    ) -> Sessions {
        let admission = Admission::new(capacity);
        Sessions {
            inner: Arc::new(Inner {
                proxies: crate::proxies::Proxies::new(store.clone(), sealer),
                store,
                replica: format!("r-{}", uuid::Uuid::new_v4().simple()),
                browsers,
                admission,
                audit,
                ending: TaskTracker::new(),
                ended: tokio::sync::Notify::new(),
                acting: TaskTracker::new(),
                tasks: TaskTracker::new(),
                deadlines: Deadlines::new(Clock::new()),
                draining: watch::channel(false).0,
                limits,
                live: Mutex::new(HashMap::new()),
                ending_now: Mutex::new(HashMap::new()),
                cdp_base: std::sync::OnceLock::new(),
                addrs: std::sync::OnceLock::new(),
                store_seen: Mutex::new(StoreSeen::started(std::time::Instant::now())),
                unwritten: Unwritten::default(),
                metrics,
            }),
        }
    }

    /// Spawns a task on the sessions' tracker (per-session watchers and ends, streams, relays),
    /// which [`Sessions::join_tasks`] waits for at shutdown.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.tasks.spawn(task)
    }

    /// Waits, at most `within`, for every task spawned by [`Sessions::spawn`]; call once the
    /// sessions are closed and the streams told to stop. Returns how many are still running.
    pub async fn join_tasks(&self, within: Duration) -> usize {
        self.inner.tasks.close();
        let _ = tokio::time::timeout(within, self.inner.tasks.wait()).await;
        self.inner.tasks.len()
    }

    /// Starts or stops draining; returns the new state.
    pub fn set_draining(&self, drain: bool) -> bool {
        self.inner.draining.send_replace(drain);
        tracing::info!(draining = drain, "drain state changed");
        drain
    }

    /// Whether this server refuses new sessions.
    pub fn draining(&self) -> bool {
        *self.inner.draining.borrow()
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
        self.live_map().get(id).cloned().ok_or_else(|| ServiceError::NotReady {
            id: id.into(),
            state: "CLOSED",
            detail: String::new(),
        })
    }

    fn live_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.inner.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ending_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.inner.ending_now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of live sessions.
    pub fn live_count(&self) -> usize {
        self.live_map().len()
    }

    /// Whether this replica holds session `id` (live, or its end under way).
    pub fn holds(&self, id: &str) -> bool {
        self.live_map().contains_key(id) || self.ending_map().contains_key(id)
    }

    /// Now on the sessions' clock (which deadlines are kept on).
    fn now(&self) -> i64 {
        self.inner.deadlines.clock().now_ms()
    }

    /// Schedules a look at session `id` at `at_ms` (its earliest deadline).
    fn schedule(&self, id: &str, at_ms: i64) {
        self.inner.deadlines.schedule(id, at_ms);
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
    tenant == claims.tenant && (subject == claims.sub || uses_every_subject(claims))
}

/// Whether `claims` may use the sessions of every subject of its tenant: another subject's
/// session needs sessions:shared plus sessions:write (`admin` carries both).
fn uses_every_subject(claims: &Claims) -> bool {
    claims.has(Scope::SessionsShared) && claims.has(Scope::SessionsWrite)
}

/// RPC-level scope check.
pub fn require(claims: &Claims, scope: Scope) -> Result<()> {
    if claims.has(scope) {
        Ok(())
    } else {
        Err(ServiceError::PermissionDenied(scope.missing()))
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
            "viewport: {}x{} exceeds {MAX_VIEWPORT_SIDE} px a side; give a smaller one",
            v.width, v.height
        )));
    }
    Ok(v)
}

/// A CDP ticket: 32 random bytes, hex.
fn new_ticket() -> Result<String> {
    random_hex(32)
}

/// `bytes` random bytes, hex (tickets, live view secrets and link ids).
fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| ServiceError::Internal(format!("random: {e}")))?;
    Ok(hex::encode(buf))
}

/// Compares two secrets in time that does not depend on where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
