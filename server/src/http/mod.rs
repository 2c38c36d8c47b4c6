//! The HTTP side listener: `/healthz` (process up), `/readyz` (fit to take sessions: not
//! draining, the database takes writes, the audit trail is written, workers boot),
//! `/metrics` (Prometheus text), `/cdp/<session>`, the CDP proxy's WebSocket (see
//! [`crate::cdp`]), a session's files ([`files`]) and `/mcp`, MCP for agents ([`crate::mcp`]). Request paths are never logged: a
//! `cdp_url` carries its ticket.

mod files;
mod live;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Path, Query, State, WebSocketUpgrade};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::app::App;
use crate::cdp::{relay, CdpError, CdpLimits, CdpStats, Conn};
use crate::sessions::CdpAccess;
use crate::tls::{client_cert_gate, ClientCertGate};

pub use crate::cdp::CDP_PREFIX;

/// What the handlers read: the application's state and the CDP proxy's own.
#[derive(Clone)]
pub struct HttpState {
    pub app: App,
    /// `/cdp/{session}` of a session another replica holds is relayed there.
    pub peers: crate::forward::Peers,
    pub cdp_limits: CdpLimits,
    pub cdp_stats: Arc<CdpStats>,
    /// Most live viewers a session may have at once.
    pub live_max_viewers: usize,
    /// Ends the MCP sessions (and so their browsers) when the listener stops.
    pub stop: tokio_util::sync::CancellationToken,
    /// Largest MCP request body; past it, 413.
    pub mcp_max_body: usize,
}

/// The router of the side listener.
pub fn router(state: HttpState) -> Router {
    let gate = ClientCertGate { prefixes: &[CDP_PREFIX, crate::mcp::MCP_PATH], mode: state.app.tls };
    let sessions = crate::mcp::sessions(&state.app);
    let mcp = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state((state.clone(), sessions.clone()), mcp_auth))
        .layer(axum::middleware::from_fn_with_state(state.peers.clone(), crate::forward::mcp_forward))
        .service(crate::mcp::service(
            state.app.clone(),
            state.peers.clone(),
            sessions,
            state.stop.child_token(),
            state.mcp_max_body,
        ));
    Router::new()
        .route_service(crate::mcp::MCP_PATH, mcp)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/cdp/{session}",
            get(cdp).layer(axum::middleware::from_fn_with_state(state.peers.clone(), crate::forward::session_forward)),
        )
        .route(
            "/sessions/{session}/files/{name}",
            get(files::file)
                .layer(axum::middleware::from_fn_with_state(state.peers.clone(), crate::forward::session_forward)),
        )
        .route(
            "/sessions/{session}/recording",
            get(files::recording)
                .layer(axum::middleware::from_fn_with_state(state.peers.clone(), crate::forward::session_forward)),
        )
        .route(
            "/sessions/{session}/files.zip",
            get(files::zip)
                .layer(axum::middleware::from_fn_with_state(state.peers.clone(), crate::forward::session_forward)),
        )
        .route(
            "/live/{session}/{secret}",
            get(live::page)
                .layer(axum::middleware::from_fn_with_state(state.peers.clone(), crate::forward::session_forward)),
        )
        .route(
            "/live/{session}/{secret}/ws",
            get(live::socket)
                .layer(axum::middleware::from_fn_with_state(state.peers.clone(), crate::forward::session_forward)),
        )
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(gate, client_cert_gate))
}

#[derive(serde::Deserialize)]
struct CdpQuery {
    ticket: Option<String>,
}

/// Authenticates, then upgrades to the CDP relay. Every attempt is audited; refusals before
/// the upgrade answer plain HTTP (401 without credentials, 404 for a session that is not the
/// caller's or not live, 429 at the session's cap, 503 at the server's).
async fn cdp(
    State(state): State<HttpState>,
    Path(session): Path<String>,
    Query(query): Query<CdpQuery>,
    peer: Option<axum::Extension<crate::tls::PeerAddr>>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let started = std::time::Instant::now();
    let source = source(peer);
    let header = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let claims = match header.map(|h| state.app.tokens.verify_header(Some(h))) {
        Some(Ok(claims)) => Some(claims),
        Some(Err(e)) => return refuse_cdp(&state, &source, None, &session, CdpError::BadToken(e.to_string())),
        None => None,
    };
    let opened = (|| {
        let upgrade = upgrade.map_err(|_| CdpError::NotUpgrade)?;
        let place = state.app.audit.reserve_call().map_err(|e| CdpError::Audit(e.to_string()))?;
        let access = state.app.sessions.cdp_open(
            claims.as_ref(),
            query.ticket.as_deref(),
            &session,
            state.cdp_limits.per_session,
        )?;
        if claims.is_none() && state.app.tokens.withdrawn(access.acquired_by(), None).is_some() {
            return Err(CdpError::TicketRevoked);
        }
        let open = &state.cdp_stats.open;
        let cap = state.cdp_limits.per_server;
        let server_slot = open.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < cap).then_some(n + 1));
        if server_slot.is_err() {
            return Err(CdpError::ServerFull(cap));
        }
        Ok((upgrade, place, access))
    })();
    let (upgrade, place, access) = match opened {
        Ok(opened) => opened,
        Err(e) => return refuse_cdp(&state, &source, claims.as_ref(), &session, e),
    };
    let record = access.record().clone();
    let (tenant, subject, jti_hash) = match &claims {
        Some(c) => (c.tenant.clone(), c.sub.clone(), c.jti_hash()),
        None => (record.tenant.clone(), format!("{} (ticket)", record.subject), String::new()),
    };
    tracing::info!(session = %record.id, tenant = %tenant, "cdp client attached");
    let limits = state.cdp_limits.clone();
    let stats = state.cdp_stats.clone();
    let tokens = state.app.tokens.clone();
    upgrade
        .max_message_size(limits.max_message)
        .max_frame_size(limits.max_message)
        .on_upgrade(move |socket| async move {
            // Held (with the session's CDP place) until the relay ends.
            let access = Arc::new(access);
            let opened_by = claims.map(|c| (c.jti, c.tenant, c.tenant_epoch));
            let conn = relay_conn(&access, tokens, opened_by, limits, stats.clone());
            let summary = relay(socket, conn).await;
            stats.open.fetch_sub(1, Ordering::SeqCst);
            tracing::info!(session = %record.id, close = %summary.close, frames_in = summary.frames_in, frames_out = summary.frames_out, "cdp client detached");
            let refused: Vec<&str> = summary.refused.iter().map(String::as_str).collect();
            place.record(crate::audit::Entry {
                tenant,
                subject,
                jti_hash,
                session_id: record.id.clone(),
                rpc: CDP_RPC.into(),
                target: format!(
                    "frames in {} out {}; refused: {}",
                    summary.frames_in,
                    summary.frames_out,
                    if refused.is_empty() { "none".to_string() } else { refused.join(" ") }
                ),
                outcome: if summary.failed { "error".into() } else { "ok".into() },
                code: summary.close,
                duration_ms: started.elapsed().as_millis().min(u32::MAX as u128) as u32,
                ..Default::default()
            });
        })
}

/// What the relay needs of its session. `opened_by` is the token the connection was opened
/// with (jti, tenant, epoch); by ticket, the one that acquired the session is checked.
fn relay_conn(
    access: &Arc<CdpAccess>,
    tokens: crate::auth::TokenCheck,
    opened_by: Option<(String, String, String)>,
    limits: CdpLimits,
    stats: Arc<CdpStats>,
) -> Conn {
    Conn {
        devtools_url: access.devtools_url().to_string(),
        // Downloads a CDP client asks for land in the session's files.
        download_dir: access.files_dir(),
        net: access.net(),
        stop: access.stop(),
        stop_reason: Box::new({
            let access = access.clone();
            move || access.end_reason()
        }),
        on_activity: Box::new({
            let access = access.clone();
            move || access.touch()
        }),
        withdrawn: Box::new({
            let access = access.clone();
            move || {
                let why = match &opened_by {
                    Some((jti, tenant, epoch)) => tokens.withdrawn(jti, Some((tenant, epoch))),
                    None => tokens.withdrawn(access.acquired_by(), None),
                };
                why.map(|e| format!("credentials withdrawn: {e}"))
            }
        }),
        limits,
        stats,
        context: access.context(),
    }
}

/// The address a request came from, for its audit record and its address's budget.
fn source(peer: Option<axum::Extension<crate::tls::PeerAddr>>) -> String {
    peer.map_or_else(|| "an unknown address".to_string(), |p| p.0 .0.ip().to_string())
}

/// The `rpc` of an MCP request's refusal record.
pub const MCP_RPC: &str = "MCP /mcp";

/// Verifies the Bearer token before MCP sees the request (or another replica is asked to):
/// the claims go on as an extension, which the tools read. Without a valid one: 401 with
/// `WWW-Authenticate`, audited and counted against the address like a bad gRPC or CDP call.
/// An MCP session answers only the tenant and subject that opened it: to anyone else it is
/// 404, as one that does not exist (audited).
async fn mcp_auth(
    State((state, sessions)): State<(HttpState, Arc<crate::mcp::ReplicaSessions>)>,
    peer: Option<axum::Extension<crate::tls::PeerAddr>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let header = req.headers().get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match state.app.tokens.verify_header(header) {
        Ok(claims) => {
            let caller = crate::mcp::Opener { tenant: claims.tenant.clone(), subject: claims.sub.clone() };
            let named = req.headers().get(crate::mcp::SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
            if let Some(id) = &named {
                if sessions.access(id, &caller) == crate::mcp::Access::Foreign {
                    tracing::info!(mcp_session = %id, tenant = %claims.tenant, "mcp session of another caller refused");
                    let refusal = Refusal {
                        source: &source(peer),
                        claims: Some(&claims),
                        session: "",
                        rpc: MCP_RPC,
                        unproven: false,
                    };
                    return refuse(
                        &state,
                        refusal,
                        StatusCode::NOT_FOUND,
                        format!("no MCP session {id}: start a new one"),
                    );
                }
            }
            req.extensions_mut().insert(claims);
            let ending = req.method() == axum::http::Method::DELETE;
            let mut response = next.run(req).await;
            if named.is_none() {
                // An initialize answered: the session it opened is its caller's.
                let opened = response.headers().get(crate::mcp::SESSION_HEADER).and_then(|v| v.to_str().ok());
                if let Some(id) = opened {
                    sessions.opened(id, caller);
                }
            }
            // The SDK answers an ended session 202; clients (the Python SDK) take only 200 or
            // 204 for "ended" and warn otherwise, though it did end.
            if ending && response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            response
        }
        Err(e) => {
            let source = source(peer);
            tracing::info!(reason = %e, "mcp request refused");
            let refusal = Refusal { source: &source, claims: None, session: "", rpc: MCP_RPC, unproven: true };
            refuse(&state, refusal, StatusCode::UNAUTHORIZED, e.to_string())
        }
    }
}

/// The `rpc` of a CDP connection's audit record.
pub const CDP_RPC: &str = "CDP /cdp/{session}";

/// A refused CDP connection: audited (counted per `source` address when the caller showed no
/// valid token), and past that address's budget of such refusals, 429 with when to retry.
fn refuse_cdp(
    state: &HttpState,
    source: &str,
    claims: Option<&crate::auth::Claims>,
    session: &str,
    e: CdpError,
) -> Response {
    // Without a valid token: no credentials, a bad token, or a ticket that opened nothing.
    let unproven = claims.is_none()
        && matches!(
            e,
            CdpError::NoCredentials | CdpError::BadToken(_) | CdpError::TicketRevoked | CdpError::NotFound(_)
        );
    tracing::info!(session = %session, reason = %e, "cdp connection refused");
    let refusal = Refusal { source, claims, session, rpc: CDP_RPC, unproven };
    refuse(state, refusal, e.status(), e.to_string())
}

/// A request refused before it was served, and whether its caller showed no valid token.
struct Refusal<'a> {
    source: &'a str,
    claims: Option<&'a crate::auth::Claims>,
    session: &'a str,
    rpc: &'a str,
    unproven: bool,
}

/// Answers a refused request with `status` and `message`: audited (counted per source
/// address when the caller showed no valid token), and past that address's budget of such
/// refusals, 429 with when to retry.
fn refuse(state: &HttpState, r: Refusal<'_>, status: StatusCode, message: String) -> Response {
    let Refusal { source, claims, session, rpc, unproven } = r;
    let throttled = unproven.then(|| state.app.throttle.spend(source, std::time::Instant::now()).err()).flatten();
    let (status, e) = match throttled {
        Some(wait) => (StatusCode::TOO_MANY_REQUESTS, state.app.throttle.words(source, wait)),
        None => (status, message),
    };
    let entry = crate::audit::Entry {
        tenant: claims.map(|c| c.tenant.clone()).unwrap_or_default(),
        subject: claims.map(|c| c.sub.clone()).unwrap_or_default(),
        jti_hash: claims.map(|c| c.jti_hash()).unwrap_or_default(),
        // A client chooses the path: a session id of ours, or its length.
        session_id: crate::audit::refusals::id_name(session),
        rpc: rpc.into(),
        outcome: "denied".into(),
        code: status.as_u16().to_string(),
        ..Default::default()
    };
    state.app.audit.record_refusal(source, entry);
    let mut response = (status, format!("{e}\n")).into_response();
    if let Some(wait) = throttled {
        let secs = wait.as_secs().max(1).to_string();
        response.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from_str(&secs).expect("digits"));
    }
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(axum::http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"browserpool\""));
    }
    response
}

async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    if state.app.sessions.draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string());
    }
    // Not ready while sessions could not be recorded, nor actions audited: both recover by
    // themselves once the database takes writes again (the heartbeat writes every second).
    if let Some(fault) = state.app.store.write_fault() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("database refuses writes: {fault}\n"));
    }
    if let Some(fault) = state.app.audit.fault() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("audit trail not written: {fault}\n"));
    }
    // Live sessions go on meanwhile; new ones would not start.
    if let Some(spooling) = state.app.audit.spooling() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("audit trail behind: {spooling}\n"));
    }
    // Not ready while workers fail to boot: new sessions could not be served.
    let pool = &state.app.pool;
    match pool.last_boot_error() {
        // Ready, but loudly so when --allow-unsandboxed let workers run without the sandbox.
        None => match pool.sandbox().filter(|r| !r.sandboxed) {
            Some(r) => (
                StatusCode::OK,
                format!("ready\nwarning: workers run without chromium's sandbox (--allow-unsandboxed): {}\n", r.detail),
            ),
            None => (StatusCode::OK, "ready\n".to_string()),
        },
        Some(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("workers fail to boot: {e}\n")),
    }
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    use crate::metrics::Scrape;
    use prometheus_client::encoding::EncodeLabelSet;
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct ByState {
        state: &'static str,
    }
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Tenant {
        tenant: String,
    }
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Build {
        version: &'static str,
        revision: &'static str,
    }
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Direction {
        direction: &'static str,
    }
    let status = &state.app.pool.status();
    let audit = &state.app.audit;
    let mut scrape = Scrape::default();
    for (name, help, value) in [
        ("browserpool_workers_warm", "Workers booted and idle", status.warm),
        ("browserpool_workers_booting", "Workers starting", status.booting),
        ("browserpool_workers_leased", "Workers leased to sessions", status.leased),
        ("browserpool_workers_capacity", "Cap on Chromium processes", status.capacity),
        ("browserpool_sessions_live", "Sessions not yet ended", state.app.sessions.live_count()),
        ("browserpool_audit_queued", "Audit records waiting to be written (places taken included)", audit.queued()),
        (
            "browserpool_audit_writable",
            "1 while the audit trail is written, 0 after a failed write",
            audit.healthy() as usize,
        ),
        (
            "browserpool_audit_spooled",
            "Audit records kept in the local spool while the database refuses them",
            audit.spooled() as usize,
        ),
        (
            "browserpool_store_writable",
            "1 while the database takes writes",
            state.app.store.write_fault().is_none() as usize,
        ),
    ] {
        scrape.gauge(name, help, value as u64);
    }
    let build = Build { version: crate::VERSION, revision: crate::REVISION };
    scrape.gauges("browserpool_build_info", "This build's version and git revision", [(build, 1)]);
    let by_state = [("warm", status.warm), ("booting", status.booting), ("leased", status.leased)];
    scrape.gauges(
        "browserpool_workers",
        "Chromium workers by state",
        by_state.map(|(state, n)| (ByState { state }, n as u64)),
    );
    let depths = state.app.sessions.queue_depths().into_iter().map(|(tenant, depth)| (Tenant { tenant }, depth as u64));
    scrape.gauges("browserpool_queue_depth", "Acquire calls waiting in each tenant's queue on this server", depths);
    state.app.metrics.scraped(&mut scrape);
    let kept = state.app.sessions.artifact_bytes().await.into_iter().map(|(tenant, bytes)| (Tenant { tenant }, bytes));
    scrape.gauges(
        "browserpool_artifact_bytes",
        "Bytes of ended sessions' files and recordings kept here, by tenant",
        kept,
    );
    scrape.counter(
        "browserpool_worker_cleanup_retries",
        "Deletes of a killed worker's directories that failed and were tried again",
        browserpool_pool::launcher::CLEANUP_RETRIES.load(Ordering::Relaxed),
    );
    let cdp = &state.cdp_stats;
    scrape.gauge("browserpool_cdp_connections", "CDP proxy connections open", cdp.open.load(Ordering::Relaxed) as u64);
    let frames = [("to_browser", &cdp.frames_in), ("to_client", &cdp.frames_out)];
    let frames = frames.map(|(direction, n)| (Direction { direction }, n.load(Ordering::Relaxed)));
    scrape.counters("browserpool_cdp_frames", "CDP messages relayed, by direction", frames);
    scrape.counter("browserpool_cdp_refused", "CDP messages refused by the proxy", cdp.refused.load(Ordering::Relaxed));
    scrape.counter(
        "browserpool_audit_refusals_lost",
        "Records of refused calls that found the audit queue full (logged instead)",
        audit.lost_refusals(),
    );
    ([(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], scrape.encode())
}
