//! A session's life up to its end: acquire (a tenant slot, a lease, the record), the watch
//! on its browser, get/list/renew/release (its end is `ending`, its CDP side `cdp_access`).

use super::waiting::{note, quota_across_replicas, Stage};
use super::*;

/// What an acquired session holds until it is registered.
struct Held {
    lease: Box<dyn Leased>,
    slot: Slot,
    claim: Claim,
    idle: Duration,
    acquired_by: String,
    record: RecordMode,
    terms: ArtifactTerms,
}

/// A session's TTL and idle timeout: what it asked for, within its tenant's and the server's
/// limits; and its labels checked.
fn terms(limits: &Limits, tenant: &TenantRecord, spec: &AcquireSpec) -> Result<(Duration, Duration)> {
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
        let control = k.chars().chain(v.chars()).any(char::is_control);
        if k.is_empty() || k.len() > 63 || v.len() > 256 || spec.labels.len() > 32 || control {
            return Err(ServiceError::InvalidArgument(
                "labels: at most 32, keys of 1 to 63 bytes, values up to 256 bytes, no control characters".into(),
            ));
        }
    }
    Ok((ttl, idle))
}

/// The longest an `Acquire` with `wait_ms: 0` waits for the sessions ending on this replica to
/// free their slots (a worker is killed and its profile deleted in well under a second).
const ENDING_GRACE: Duration = Duration::from_secs(5);

impl Sessions {
    /// Sessions of one tenant or all (admin), oldest first; `page_token` is an opaque offset.
    pub async fn list_all(
        &self,
        tenant: Option<String>,
        state: Option<SessionState>,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<SessionRecord>, String)> {
        self.list_where(tenant, None, state, page_size, page_token).await
    }

    /// [`Sessions::list_all`], of one subject only when `subject` is given.
    async fn list_where(
        &self,
        tenant: Option<String>,
        subject: Option<String>,
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
        let filter = SessionFilter { tenant, state, subject, limit: limit + 1, offset };
        let mut rows = self.inner.store.sessions(&filter).await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        // Live sessions carry fresher idle deadlines in memory.
        for row in rows.iter_mut() {
            if let Some(live) = self.live_map().get(&row.id) {
                *row = live.record_now();
            }
        }
        let next = if more { (offset + limit as u64).to_string() } else { String::new() };
        Ok((rows, next))
    }

    /// Takes one of the tenant's slots in the database, which every replica counts, asking
    /// again until `deadline` while other replicas hold them all.
    pub(super) async fn claim(
        &self,
        id: &str,
        tenant: &TenantRecord,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Claim>> {
        let store = &self.inner.store;
        // Held before asking: a caller that goes away while the claim commits still frees it.
        let claim = Claim {
            store: store.clone(),
            unwritten: self.inner.unwritten.clone(),
            id: id.to_string(),
            released: false,
        };
        loop {
            let now = now_ms();
            // While this replica may not judge heartbeats, every claim counts.
            let stale_before = self.stale_before().unwrap_or(i64::MIN);
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
            Err(ServiceError::WaitElapsed { .. }) => "timeout",
            Err(ServiceError::Draining | ServiceError::Pool(_)) => "unavailable",
            Err(ServiceError::PermissionDenied(_) | ServiceError::InvalidArgument(_)) => "refused",
            Err(_) => "error",
        };
        self.inner.metrics.acquired(outcome, started.elapsed());
        result
    }

    /// The upstream proxy a session of `tenant` leaves through: the one it asked for, else the
    /// tenant's default, if any.
    async fn upstream(&self, tenant: &TenantRecord, asked: &str) -> Result<Option<Upstream>> {
        let (id, default) = if asked.is_empty() { (tenant.default_proxy.as_str(), true) } else { (asked, false) };
        if id.is_empty() {
            return Ok(None);
        }
        self.inner.proxies.upstream_for(id, &tenant.id, default).await.map(Some)
    }

    /// How the session is recorded: as asked, else the tenant's default; refused when this
    /// server cannot record.
    fn record_mode(&self, tenant: &TenantRecord, asked: Option<RecordMode>) -> Result<RecordMode> {
        let mode = asked.unwrap_or(tenant.default_record);
        if let (true, Some(why)) = (mode != RecordMode::Off, &self.inner.limits.cannot_record) {
            let whose =
                if asked.is_none() { format!(" (tenant {}'s default_record)", tenant.id) } else { String::new() };
            return Err(ServiceError::FailedPrecondition(format!(
                "this server cannot record sessions{whose}: {why}; acquire with record RECORD_OFF"
            )));
        }
        Ok(mode)
    }

    pub(super) async fn acquire_inner(&self, claims: &Claims, spec: AcquireSpec) -> Result<SessionRecord> {
        require(claims, Scope::SessionsWrite)?;
        if self.draining() {
            return Err(ServiceError::Draining);
        }
        let viewport = validate_viewport(spec.viewport)?;
        let tenant = self
            .inner
            .store
            .tenant(&claims.tenant)
            .await?
            .ok_or_else(|| ServiceError::PermissionDenied(format!("tenant {:?} does not exist", claims.tenant)))?;
        let (ttl, idle) = terms(&self.inner.limits, &tenant, &spec)?;
        spec.emulation.check().map_err(ServiceError::InvalidArgument)?;
        let upstream = self.upstream(&tenant, &spec.proxy_id).await?;
        let record_mode = self.record_mode(&tenant, spec.record)?;

        let started = Instant::now();
        // A session ending here frees its slot once its worker is gone, a moment after its
        // Release answered: a caller that would not wait at all still gets that moment.
        let wait = match spec.wait_ms {
            0 if !self.ending_map().is_empty() => ENDING_GRACE,
            ms => Duration::from_millis(ms as u64),
        };
        let deadline = tokio::time::Instant::now() + wait;
        let quota = Quota { max_slots: tenant.max_slots, max_queue: tenant.max_queue };
        let waited = |cause: String| ServiceError::WaitElapsed { waited_ms: spec.wait_ms as u64, cause };
        let mut drain = self.inner.draining.subscribe();
        let watch = spec.watch.as_ref();
        note(watch, || Stage::Queued { tenant: tenant.id.clone(), quota });
        let admit = self.inner.admission.admit(&claims.tenant, quota, watch.map(AcquireWatch::ticket));
        let admitted = tokio::select! {
            admitted = tokio::time::timeout_at(deadline, admit) => admitted,
            // A queued caller is not served by a replica that is draining: it retries elsewhere.
            _ = drain.wait_for(|draining| *draining) => return Err(ServiceError::Draining),
        };
        let slot = match admitted {
            Ok(Ok(slot)) => slot,
            Ok(Err(e @ AdmissionError::QueueFull { .. })) => return Err(ServiceError::QueueFull(e.to_string())),
            Ok(Err(e)) => return Err(ServiceError::FailedPrecondition(e.to_string())),
            Err(_) => return Err(waited(self.inner.admission.why_waiting(&claims.tenant, quota))),
        };
        // The local queue keeps order among this server's callers; the database counts the
        // tenant's slots across every replica sharing it.
        let id = format!("s-{}", uuid::Uuid::new_v4().simple());
        note(watch, || Stage::Claiming { tenant: tenant.id.clone(), max_slots: tenant.max_slots });
        let Some(claim) = self.claim(&id, &tenant, deadline).await? else {
            return Err(waited(quota_across_replicas(&tenant.id, tenant.max_slots)));
        };
        note(watch, || Stage::Leasing { tenant: tenant.id.clone() });
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // 0: the worker keeps the server's default limit, which every spare has.
        let memory = (tenant.max_memory_mb != 0).then_some((tenant.max_memory_mb as u64) << 20);
        let emulation = spec.emulation.clone();
        let wanted = LeaseSpec { wait: left, viewport, memory, record: record_mode != RecordMode::Off, emulation };
        let leased = self.inner.browsers.lease(&tenant.id, tenant.isolation, wanted).await;
        let lease = leased.map_err(|e| match e {
            PoolError::Exhausted(_) => waited(format!(
                "this server is at capacity: its --max-workers {} browsers are in use",
                self.inner.browsers.capacity()
            )),
            PoolError::NotBooted(bound) => waited(format!("no worker finished booting within {bound:?}")),
            other => ServiceError::Pool(other),
        })?;
        let proxy_id = set_network(lease.as_ref(), &tenant, upstream);
        let queue_wait_ms = started.elapsed().as_millis().min(u32::MAX as u128) as u32;
        let now = self.now();
        let record = SessionRecord {
            id,
            tenant: claims.tenant.clone(),
            subject: claims.sub.clone(),
            worker_id: lease.worker_id(),
            state: SessionState::Ready,
            labels: spec.labels,
            created_at_ms: now,
            expires_at_ms: now + ttl.as_millis() as i64,
            idle_deadline_ms: now + idle.as_millis() as i64,
            queue_wait_ms,
            ended_at_ms: None,
            end_reason: None,
            replica: self.inner.replica.clone(),
            artifacts: None,
            emulation: spec.emulation,
            proxy_id,
            bytes: (0, 0),
        };
        // Recording and registering run in their own task: a caller that goes away now cannot
        // leave a READY row without a live session (an unclaimed session idles out instead).
        // If recording fails the lease drops and kills the worker.
        let this = self.clone();
        let terms = ArtifactTerms::of(&tenant, self.inner.limits.keep_files.as_ref());
        let held = Held { lease, slot, claim, idle, acquired_by: claims.jti.clone(), record: record_mode, terms };
        self.spawn(async move { this.register(record, held).await })
            .await
            .map_err(|e| ServiceError::Internal(format!("acquire task: {e}")))?
    }

    /// Records a session acquired and makes it live here, watched and scheduled.
    async fn register(&self, record: SessionRecord, held: Held) -> Result<SessionRecord> {
        let Held { lease, slot, claim, idle, acquired_by, record: mode, terms } = held;
        if let Err(e) = self.inner.store.insert_session(&record, "acquired").await {
            // Cut while committing, the row may be in: ended once the database answers, so no
            // replica takes it for live (a row that is not there is left as it is).
            let end = "its acquire failed to record it".to_string();
            let at_ms = self.now();
            self.inner.unwritten.keep(HeldBack::End {
                id: record.id,
                state: SessionState::Crashed,
                at_ms,
                reason: end,
                bytes: (0, 0),
            });
            return Err(e.into());
        }
        let died = lease.died();
        let screen = lease.screen();
        let cdp = CdpTarget {
            devtools_url: lease.devtools_url(),
            files_dir: lease.files_dir(),
            net: lease.net(),
            context: lease.context(),
            ticket: new_ticket()?,
            acquired_by,
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
            uploads: Mutex::default(),
            record_mode: mode,
            terms,
            failed: std::sync::atomic::AtomicBool::new(false),
            live_views: super::live_view::LiveViews::new(screen),
            idle_written_ms: std::sync::atomic::AtomicI64::new(record.idle_deadline_ms),
        });
        self.spawn(self.clone().watch_browser(record.id.clone(), live.stop.clone(), died));
        self.live_map().insert(record.id.clone(), live);
        self.schedule(&record.id, record.expires_at_ms.min(record.idle_deadline_ms));
        tracing::info!(session = %record.id, tenant = %record.tenant, worker = %record.worker_id, queue_wait_ms = record.queue_wait_ms, "session acquired");
        Ok(record)
    }

    /// Ends the session as CRASHED as soon as its browser dies, with nobody calling: its slot
    /// is freed and its event readers get `SessionEnded`. Ends with the session.
    pub(super) async fn watch_browser(
        self,
        id: String,
        stop: CancellationToken,
        mut died: watch::Receiver<Option<String>>,
    ) {
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
    /// `failed`: the job that used it failed (its recording is kept).
    pub async fn release(&self, claims: &Claims, id: &str, failed: bool) -> Result<(bool, SessionState)> {
        require(claims, Scope::SessionsWrite)?;
        let record = self.get(claims, id).await?;
        if record.state.is_terminal() {
            return Ok((false, record.state));
        }
        self.here(&record)?;
        if failed {
            if let Some(live) = self.live_map().get(id) {
                live.failed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let ended = self.end_once_recorded(id, SessionState::Closed, "released").await;
        Ok((ended, SessionState::Closed))
    }

    /// The caller's session, live or ended.
    pub async fn get(&self, claims: &Claims, id: &str) -> Result<SessionRecord> {
        let live = self.live_map().get(id).cloned().or_else(|| self.ending_map().get(id).cloned());
        let record = match live {
            Some(live) => live.record_now(),
            None => self.inner.store.session(id).await?.ok_or_else(|| ServiceError::SessionNotFound(id.into()))?,
        };
        if !may_use(claims, &record) {
            return Err(ServiceError::SessionNotFound(id.into()));
        }
        Ok(record)
    }

    /// The caller's tenant's sessions that `Get` would answer for the same token, oldest
    /// first: its own subject's, or every subject's with `sessions:shared` and
    /// `sessions:write` (or `admin`). Another subject's sessions stay hidden because a listed
    /// session carries its `cdp_url`, a ticket to drive it. Filtered in the database, so a
    /// page is never short for rows the caller may not see. `page_token` is an opaque offset.
    pub async fn list(
        &self,
        claims: &Claims,
        state: Option<SessionState>,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<SessionRecord>, String)> {
        require(claims, Scope::SessionsRead)?;
        let subject = (!uses_every_subject(claims)).then(|| claims.sub.clone());
        let (rows, next) = self.list_where(Some(claims.tenant.clone()), subject, state, page_size, page_token).await?;
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
        live.idle_written_ms.store(deadline, std::sync::atomic::Ordering::Relaxed);
        // A shorter idle timeout can move the deadline earlier than the scheduled look.
        self.schedule(id, deadline);
        Ok(record)
    }

    /// Checks that the caller may drive session `id` and that it is READY.
    pub async fn attach(&self, claims: &Claims, id: &str) -> Result<SessionRecord> {
        let record = self.get(claims, id).await?;
        if record.state.is_terminal() {
            return Err(ServiceError::NotReady { id: id.into(), state: record.state.as_str(), detail: record.ended() });
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
}

/// A tenant slot held in the database. Released explicitly when its session ends; dropped
/// unreleased (a failed acquire), it is released in the background. One the database does
/// not take back now is given back once it answers again.
pub(super) struct Claim {
    store: Store,
    unwritten: Unwritten,
    id: String,
    released: bool,
}

impl Claim {
    pub(super) async fn release(mut self) {
        self.released = true;
        free_slot(&self.store, &self.unwritten, std::mem::take(&mut self.id)).await;
    }
}

async fn free_slot(store: &Store, unwritten: &Unwritten, claim: String) {
    if let Err(e) = store.release_slot(&claim).await {
        tracing::warn!(%claim, error = %e, "could not free a tenant slot now; it is freed once the database answers again");
        unwritten.keep(HeldBack::Slot(claim));
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (store, unwritten, id) = (self.store.clone(), self.unwritten.clone(), std::mem::take(&mut self.id));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { free_slot(&store, &unwritten, id).await });
        }
    }
}

/// The tenant's navigation policy for every request the session's pages make, its upstream
/// proxy, if any, and its byte budget, on the session's own egress (a context session has
/// one too). Answers the proxy's id.
fn set_network(lease: &dyn Leased, tenant: &TenantRecord, upstream: Option<Upstream>) -> String {
    lease.set_policy(NavPolicy {
        allow_private_networks: tenant.allow_private_networks,
        allow_hosts: tenant.allow_hosts.clone(),
    });
    let proxy_id = upstream.as_ref().map(|up| up.id.clone()).unwrap_or_default();
    lease.net().set_route(upstream, tenant.max_session_bytes);
    proxy_id
}
