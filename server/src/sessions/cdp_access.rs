//! A session's CDP side: its `cdp_url` and ticket, and each CDP connection's hold on it.

use super::*;

impl Sessions {
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

    /// The session's files directory, where its downloads go (made with the lease, owned by
    /// the worker's uid, owner only).
    pub fn files_dir(&self) -> String {
        self.live.cdp.files_dir.display().to_string()
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
