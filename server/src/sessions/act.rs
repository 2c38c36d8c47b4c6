//! Acting on a session: one action or a batch, in order under the session's lock and raced
//! against its end; context export and import; the event stream; keeping it from idling out.

use super::*;

/// How long an action that failed for no known reason waits for its browser's death to be
/// noticed, so a browser killed under it answers SESSION_CRASHED.
const DEATH_NOTICE: Duration = Duration::from_secs(2);

/// Whether the browser died under a failed action. A connection that closed under it is most
/// often the browser dying, which its death watch says a moment later: that, not "internal",
/// is the answer.
async fn died_under(lease: &mut dyn Leased, outcome: &Result<ActionOutput, ActionFailure>) -> bool {
    match outcome {
        Err(f) if f.code == FailureCode::Internal => {
            let mut died = lease.died();
            let _ = tokio::time::timeout(DEATH_NOTICE, died.wait_for(Option::is_some)).await;
            lease.crashed()
        }
        Err(_) => lease.crashed(),
        Ok(_) => false,
    }
}

impl Sessions {
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
        if report.outcome.is_err() {
            if let Some(live) = self.live_map().get(id) {
                live.failed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
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

    pub(super) async fn act_inner(
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
            "CRASHED" => ActionFailure::browser_crashed(),
            _ => ActionFailure::new(
                FailureCode::SessionClosed,
                format!("session {id} is {state}; acquire a new session"),
            ),
        };
        let live = match self.get(claims, id).await {
            Ok(r) if r.state.is_terminal() => return Err(closed(r.state.as_str())),
            Ok(_) => self.live_map().get(id).cloned().ok_or_else(|| closed("CLOSED"))?,
            Err(_) => return Err(closed("not found")),
        };
        let default_timeout = input.timeout_ms == 0;
        let call = ActionCall {
            action: canonical,
            selector: input.selector,
            payload: input.payload,
            timeout,
            default_timeout,
        };
        let mut guard = live.lease.lock().await;
        let Some(lease) = guard.as_mut() else {
            return Err(closed("CLOSED"));
        };
        if lease.crashed() {
            drop(guard);
            self.end_detached(id, SessionState::Crashed, "chromium exited").await;
            return Err(ActionFailure::browser_crashed());
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
                    default_timeout,
                };
                lease.run(&switch).await.map_err(|mut f| {
                    f.message = format!("tab_index: {}", f.message);
                    f
                })?;
            }
            lease.run(&call).await
        };
        let outcome = live.unless_ended(id, run).await;
        let crashed = died_under(lease.as_mut(), &outcome).await;
        drop(guard);
        if crashed {
            self.end_detached(id, SessionState::Crashed, "chromium exited").await;
            return Err(ActionFailure::browser_crashed());
        }
        // A timed-out action is no sign of life: retrying one on a browser that stopped
        // answering must not hold the session (and its slot) until the TTL.
        if !matches!(&outcome, Err(f) if f.code == FailureCode::Timeout) {
            self.touch(&live).await;
        }
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
    pub(super) async fn with_lease<T>(
        &self,
        id: &str,
        what: &str,
        f: impl for<'a> FnOnce(&'a dyn Leased) -> futures::future::BoxFuture<'a, std::result::Result<T, ActionFailure>>,
    ) -> Result<T> {
        let live = self.live(id)?;
        let guard = live.lease.lock().await;
        let lease = guard.as_ref().ok_or_else(|| ServiceError::NotReady {
            id: id.into(),
            state: "CLOSED",
            detail: String::new(),
        })?;
        let _acting = self.inner.acting.token();
        let bounded = async {
            tokio::time::timeout(DEFAULT_ACTION_TIMEOUT, f(lease.as_ref())).await.unwrap_or_else(|_| {
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
        self.with_lease(id, "export", |lease| Box::pin(async move { lease.export_context(&opts).await })).await
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
            Box::pin(async move { lease.import_context(&state, strict_origin).await })
        })
        .await
    }

    /// A reader of the session's live events from now on.
    pub async fn events(&self, claims: &Claims, id: &str) -> Result<EventReader> {
        require(claims, Scope::SessionsRead)?;
        self.attach(claims, id).await?;
        let live = self.live(id)?;
        let guard = live.lease.lock().await;
        match guard.as_ref() {
            Some(lease) => Ok(lease.events()),
            None => Err(ServiceError::NotReady { id: id.into(), state: "CLOSED", detail: String::new() }),
        }
    }

    /// Pushes the session's idle deadline. The reaper, and `Get` (any replica's is forwarded
    /// to the owner), read the one in memory; the database's copy (for `List`) is written
    /// aside, only once it is behind by a tenth of the idle timeout (at least a second), and
    /// not at all while the database refuses writes: an answer never waits on it, and a
    /// session's actions cost no write each (measured with `examples/fleet_sim.rs`: 20 of a
    /// session's 39 transactions were these).
    pub(super) async fn touch(&self, live: &Live) {
        let (id, deadline) = {
            let mut rec = live.record.lock().unwrap_or_else(|e| e.into_inner());
            rec.idle_deadline_ms = (self.now() + live.idle_timeout.as_millis() as i64).min(rec.expires_at_ms);
            (rec.id.clone(), rec.idle_deadline_ms)
        };
        let step = (live.idle_timeout.as_millis() as i64 / 10).max(1000);
        let written = live.idle_written_ms.load(std::sync::atomic::Ordering::Relaxed);
        if deadline - written < step || self.inner.store.write_fault().is_some() {
            return;
        }
        live.idle_written_ms.fetch_max(deadline, std::sync::atomic::Ordering::Relaxed);
        let store = self.inner.store.clone();
        self.spawn(async move {
            if let Err(e) = store.touch(&id, deadline).await {
                tracing::warn!(session = %id, error = %e, "could not record idle deadline");
            }
        });
    }
}
