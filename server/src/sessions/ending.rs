//! Ending a session exactly once (release, kill, TTL, idle, crash, the stop), the reaper, and
//! the stop's waits for sessions and actions.

use super::*;

/// How long after a release's record its killed worker takes the weight of the dying (see
/// `Lease::release_after`): the answer's connection task writes it meanwhile, and the killed
/// processes exit at the weight they ran at.
const ANSWER_WRITTEN: Duration = Duration::from_millis(10);

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

impl Sessions {
    /// The session's end in the audit trail: its state, its upstream proxy and the bytes its
    /// pages carried (never a URL), and the same bytes on `/metrics`.
    fn audit_end(&self, r: &SessionRecord) {
        self.inner.metrics.network_bytes(&r.tenant, &r.proxy_id, r.bytes);
        let target = format!(
            "state={} proxy={} bytes_sent={} bytes_received={}",
            r.state.as_str(),
            if r.proxy_id.is_empty() { "none" } else { &r.proxy_id },
            r.bytes.0,
            r.bytes.1
        );
        match self.inner.audit.reserve_call() {
            Ok(place) => place.record(crate::audit::Entry {
                tenant: r.tenant.clone(),
                subject: r.subject.clone(),
                session_id: r.id.clone(),
                rpc: "SESSION ENDED".into(),
                target,
                outcome: "ok".into(),
                ..Default::default()
            }),
            Err(e) => tracing::warn!(session = %r.id, error = %e, "the session's end was not audited"),
        }
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
        let bytes = live.bytes();
        let ended = {
            let mut rec = live.record.lock().unwrap_or_else(|e| e.into_inner());
            rec.bytes = bytes;
            rec.state = state;
            rec.ended_at_ms = Some(at);
            rec.end_reason = Some(reason.to_string());
            rec.clone()
        };
        self.audit_end(&ended);
        // A running action answers at once and lets go of the lease.
        *live.ended_as.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
        live.stop.cancel();
        // The record and the kill go side by side: on a host whose disk is busy the write may
        // take a while, and a tenant's browser should not run on meanwhile.
        let began = Instant::now();
        // Whether a caller waits for the record to answer: the kill gives the dying their
        // weight, which outweighs the server's threads, only once that answer is out.
        let (answered_tx, answered) = tokio::sync::oneshot::channel::<()>();
        let waited_for = recorded_tx.is_some();
        let record = async {
            let recorded = self.inner.store.end_session(id, state, at, reason, bytes).await;
            if recorded.is_err() {
                // Other replicas would take it for live: written once the database answers.
                let end = HeldBack::End { id: id.to_string(), state, at_ms: at, reason: reason.to_string(), bytes };
                self.inner.unwritten.keep(end);
            }
            let took = began.elapsed();
            if let (Some(tx), Ok(_)) = (recorded_tx, &recorded) {
                let _ = tx.send(true);
                // The caller waiting for the record was woken onto this thread's next-task
                // slot, which no other thread may take: let it answer.
                tokio::task::yield_now().await;
            }
            drop(answered_tx);
            (recorded, took)
        };
        let answered = async move {
            if waited_for {
                let _ = answered.await;
                // The answer is handed to the connection's own task, which writes it.
                tokio::time::sleep(ANSWER_WRITTEN).await;
            }
        };
        let kill = async {
            let killed = self.put_down(id, &live, state, reason, Box::pin(answered)).await;
            killed.map_or_else(|| began.elapsed(), |at| at - began)
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

    /// An ended session's lease, if it still has one: its last events said, its recording
    /// taken, its browser killed (given the weight of the dying once `answered`), what it
    /// leaves kept. Returns when its browser was gone.
    async fn put_down(
        &self,
        id: &str,
        live: &Live,
        state: SessionState,
        reason: &str,
        answered: futures::future::BoxFuture<'static, ()>,
    ) -> Option<Instant> {
        let mut lease = live.lease.lock().await.take()?;
        // What it leaves, refused by its tenant's cap, is said while readers listen.
        let refused = self.refused_artifacts(id, live, state).await;
        if let Some(why) = &refused {
            lease.emit(EventKind::ArtifactsRefused { reason: why.clone() });
        }
        // The last event readers see; they end when the worker (and its hub) is gone.
        lease.emit(EventKind::SessionEnded { state: state.as_str().into(), reason: reason.into() });
        // Its files outlive it (for --artifact-ttl): kept once its browser is gone.
        let files = self.inner.limits.keep_files.is_some().then(|| lease.take_files_dir());
        let frames = lease.take_recording().await;
        lease.release(answered).await;
        let killed = Instant::now();
        if let Some(files) = files {
            self.keep_files(id, live, files, refused.clone()).await;
        }
        if let Some(frames) = frames {
            self.keep_recording(id, live, (state, refused), frames).await;
        }
        self.left_behind(id).await;
        Some(killed)
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
                let terms = {
                    let rec = live.record.lock().unwrap_or_else(|e| e.into_inner());
                    deadlines::Terms {
                        created_at_ms: rec.created_at_ms,
                        expires_at_ms: rec.expires_at_ms,
                        idle_deadline_ms: rec.idle_deadline_ms,
                        idle_timeout_ms: live.idle_timeout.as_millis() as i64,
                    }
                };
                let Some(reason) = deadlines::verdict(now, &terms) else {
                    self.inner.deadlines.schedule(&id, terms.expires_at_ms.min(terms.idle_deadline_ms));
                    continue;
                };
                // One task each: ending waits for a running action, which must not hold up others.
                let this = self.clone();
                self.spawn(async move {
                    if let Err(e) = this.end(&id, SessionState::Expired, &reason).await {
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
