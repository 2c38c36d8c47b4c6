//! A session's life: acquire (a tenant slot, a lease, the record), the CDP ticket and
//! connections, get/list/renew, ending it exactly once (release, kill, TTL, crash, shutdown)
//! and the reaper.

use super::*;

/// Whether an end task ended the session: a failed record still ended it (logged), a task
/// that failed did not.
fn ended(task: std::result::Result<Result<bool>, tokio::task::JoinError>) -> bool {
    match task {
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
                *row = live.record.lock().unwrap_or_else(|e| e.into_inner()).clone();
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
        let claim = Claim { store: store.clone(), id: id.to_string(), released: false };
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

    pub(super) async fn acquire_inner(&self, claims: &Claims, spec: AcquireSpec) -> Result<SessionRecord> {
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
            let control = k.chars().chain(v.chars()).any(char::is_control);
            if k.is_empty() || k.len() > 63 || v.len() > 256 || spec.labels.len() > 32 || control {
                return Err(ServiceError::InvalidArgument(
                    "labels: at most 32, keys of 1 to 63 bytes, values up to 256 bytes, no control characters".into(),
                ));
            }
        }

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
        let slot = match tokio::time::timeout_at(deadline, self.inner.admission.admit(&claims.tenant, quota)).await {
            Ok(Ok(slot)) => slot,
            Ok(Err(e @ AdmissionError::QueueFull { .. })) => return Err(ServiceError::QueueFull(e.to_string())),
            Ok(Err(e)) => return Err(ServiceError::FailedPrecondition(e.to_string())),
            Err(_) => return Err(waited(self.inner.admission.why_waiting(&claims.tenant, quota))),
        };
        // The local queue keeps order among this server's callers; the database counts the
        // tenant's slots across every replica sharing it.
        let id = format!("s-{}", uuid::Uuid::new_v4().simple());
        let Some(claim) = self.claim(&id, &tenant, deadline).await? else {
            return Err(waited(format!(
                "tenant {} is at its quota: its max_slots {} sessions are in use across the replicas sharing the database",
                tenant.id, tenant.max_slots
            )));
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // 0: the worker keeps the server's default limit, which every spare has.
        let memory = (tenant.max_memory_mb != 0).then_some((tenant.max_memory_mb as u64) << 20);
        let wanted = LeaseSpec { wait: left, viewport, memory };
        let leased = match tenant.isolation {
            Isolation::Process => self.inner.pool.lease(wanted).await,
            Isolation::Context => self.inner.pool.lease_context(&tenant.id, wanted).await,
        };
        let lease = leased.map_err(|e| match e {
            PoolError::Exhausted(_) => waited(format!(
                "this server is at capacity: its --max-workers {} browsers are in use",
                self.inner.pool.status().capacity
            )),
            PoolError::NotBooted(bound) => waited(format!("no worker finished booting within {bound:?}")),
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
        let acquired_by = claims.jti.clone();
        self.spawn(async move {
            this.inner.store.insert_session(&record, "acquired").await?;
            let died = lease.died();
            let cdp = CdpTarget {
                devtools_url: lease.devtools_url().to_string(),
                download_dir: lease.download_dir(),
                net: lease.driver().net(),
                context: lease.context().map(str::to_string),
                ticket: new_ticket()?,
                acquired_by: acquired_by.clone(),
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
            this.spawn(this.clone().watch_browser(record.id.clone(), live.stop.clone(), died));
            this.live_map().insert(record.id.clone(), live);
            this.schedule(&record.id, record.expires_at_ms.min(record.idle_deadline_ms));
            tracing::info!(session = %record.id, tenant = %record.tenant, worker = %record.worker_id, queue_wait_ms, "session acquired");
            Ok(record)
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("acquire task: {e}")))?
    }

    /// The session's `cdp_url` (with its ticket) while it is live here, for a caller who may
    /// drive it (`sessions:write`; the caller passed the ownership check); empty otherwise. The
    /// ticket alone drives the browser, so a `sessions:read` caller never sees it.
    pub fn cdp_url(&self, claims: &Claims, record: &SessionRecord) -> String {
        if !claims.has(Scope::SessionsWrite) {
            return String::new();
        }
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
    pub async fn release(&self, claims: &Claims, id: &str) -> Result<(bool, SessionState)> {
        require(claims, Scope::SessionsWrite)?;
        let record = self.get(claims, id).await?;
        if record.state.is_terminal() {
            return Ok((false, record.state));
        }
        self.here(&record)?;
        let ended = self.end_once_recorded(id, SessionState::Closed, "released").await;
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

    /// [`Sessions::end`] in its own task, so a caller that goes away cannot leave it half done.
    pub async fn end_detached(&self, id: &str, state: SessionState, reason: impl Into<String>) -> bool {
        let this = self.clone();
        let id = id.to_string();
        let reason = reason.into();
        ended(self.spawn(async move { this.end(&id, state, &reason).await }).await)
    }

    /// [`Sessions::end_detached`] that answers as soon as the end is in the store: killing the
    /// worker and deleting its profile go on after the answer (still counted against the
    /// tenant's and the server's capacity until done, and waited for by shutdown), so
    /// `Release` does not keep its caller waiting for them.
    pub async fn end_once_recorded(&self, id: &str, state: SessionState, reason: impl Into<String>) -> bool {
        let this = self.clone();
        let (id, reason) = (id.to_string(), reason.into());
        let (recorded_tx, recorded) = tokio::sync::oneshot::channel();
        let task = self.spawn(async move { this.end_reporting(&id, state, &reason, Some(recorded_tx)).await });
        match recorded.await {
            Ok(ended) => ended,
            // Nothing to record (already ended), or the end failed before its record: the
            // task's own answer says which.
            Err(_) => ended(task.await),
        }
    }

    /// Ends a live session: out of the map, terminal state recorded, worker killed. Returns
    /// false when it had already ended.
    /// An end already under way elsewhere is waited for, so a caller that then reports the
    /// end (an action that found its browser dead, say) never runs ahead of its record.
    pub async fn end(&self, id: &str, state: SessionState, reason: &str) -> Result<bool> {
        self.end_reporting(id, state, reason, None).await
    }

    /// [`Sessions::end`], telling `recorded` once the end is in the store.
    async fn end_reporting(
        &self,
        id: &str,
        state: SessionState,
        reason: &str,
        recorded_tx: Option<tokio::sync::oneshot::Sender<bool>>,
    ) -> Result<bool> {
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
        // The record and the kill go side by side: on a host whose disk is busy the write may
        // take a while, and a tenant's browser should not run on meanwhile.
        let began = std::time::Instant::now();
        let record = async {
            let recorded = self.inner.store.end_session(id, state, at, reason).await;
            let took = began.elapsed();
            if let (Some(tx), Ok(_)) = (recorded_tx, &recorded) {
                let _ = tx.send(true);
                // The caller waiting for the record was woken onto this thread's next-task
                // slot, which no other thread may take: let it answer.
                tokio::task::yield_now().await;
            }
            (recorded, took)
        };
        let kill = async {
            let lease = live.lease.lock().await.take();
            if let Some(lease) = lease {
                // The last event readers see; they end when the worker (and its hub) is gone.
                lease.driver().emit(EventKind::SessionEnded { state: state.as_str().into(), reason: reason.into() });
                lease.release().await;
            }
            began.elapsed()
        };
        let ((recorded, record_took), kill_took) = tokio::join!(record, kill);
        // Only now, with the worker gone, may the next waiter (here or on another replica) be
        // admitted.
        let slots = live.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((slot, claim)) = slots {
            claim.release().await;
            drop(slot);
        }
        tracing::info!(
            session = %id,
            state = state.as_str(),
            reason,
            recorded_ms = record_took.as_millis() as u64,
            killed_ms = kill_took.as_millis() as u64,
            "session ended"
        );
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
                self.spawn(async move {
                    if let Err(e) = this.end(&id, SessionState::Expired, reason).await {
                        tracing::warn!(session = %id, error = %e, "could not record expiry");
                    }
                });
            }
        }
        tracing::debug!("reaper ended");
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

    /// Ends every live session as `state` (a shutdown whose drain timeout ran out kills them).
    pub async fn end_all(&self, state: SessionState, reason: &str) {
        self.close_all_as(state, reason).await
    }

    /// Ends as `state` the live sessions with an action still running (its lease held): a
    /// shutdown whose grace ran out kills those, and closes the others as usual.
    pub async fn end_busy(&self, state: SessionState, reason: &str) {
        let busy: Vec<String> = self
            .live_map()
            .iter()
            .filter(|(_, live)| live.lease.try_lock().is_err())
            .map(|(id, _)| id.clone())
            .collect();
        for id in &busy {
            if let Err(e) = self.end(id, state, reason).await {
                tracing::warn!(session = %id, error = %e, "could not record end");
            }
        }
    }

    /// Ends every live session (server shutdown).
    pub async fn close_all(&self, reason: &str) {
        self.close_all_as(SessionState::Closed, reason).await
    }

    pub(super) async fn close_all_as(&self, state: SessionState, reason: &str) {
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

    /// The session's download directory (created, owned by the worker's uid, owner only).
    pub fn download_dir(&self) -> std::io::Result<String> {
        let dir = &self.live.cdp.download_dir;
        browserpool_pool::sandbox::create_worker_dir(dir)?;
        Ok(dir.display().to_string())
    }

    pub fn net(&self) -> Arc<browserpool_pool::egress::WorkerNet> {
        self.live.cdp.net.clone()
    }

    /// The session's browser context when it shares its tenant's browser (context isolation).
    pub fn context(&self) -> Option<String> {
        self.live.cdp.context.clone()
    }

    /// The `jti` of the token that acquired the session (its ticket dies with it).
    pub fn acquired_by(&self) -> &str {
        &self.live.cdp.acquired_by
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
        sessions.clone().spawn(async move { sessions.touch(&live).await });
    }
}

impl Drop for CdpAccess {
    fn drop(&mut self) {
        self.live.cdp.clients.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A tenant slot held in the database. Released explicitly when its session ends; dropped
/// unreleased (a failed acquire), it is released in the background.
pub(super) struct Claim {
    store: Store,
    id: String,
    released: bool,
}

impl Claim {
    pub(super) async fn release(mut self) {
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
    pub(super) fn new(inner: &'a Inner, id: &str, live: &Arc<Live>) -> Self {
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
