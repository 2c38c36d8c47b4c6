//! The HTTP side listener: `/healthz` (process up), `/readyz` (fit to take sessions: not
//! draining, the database takes writes, the audit trail is written, workers boot) and
//! `/metrics` (Prometheus text).

use std::fmt::Write;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::sessions::Sessions;
use crate::store::Store;
use crate::tls::{client_cert_gate, ClientCertGate, TlsMode};

/// Paths under it need a verified client certificate while mutual TLS is on (probes and
/// metrics stay open to kubelet and Prometheus).
pub const CDP_PREFIX: &str = "/cdp/";

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    pub sessions: Sessions,
    pub store: Store,
    /// TLS on this listener: the scheme of URLs pointing at it, whether mTLS is on.
    pub tls: TlsMode,
}

/// The router of the side listener.
pub fn router(state: HttpState) -> Router {
    let gate = ClientCertGate { prefix: CDP_PREFIX, mode: state.tls };
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(gate, client_cert_gate))
}

async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    if state.sessions.draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string());
    }
    // Not ready while sessions could not be recorded, nor actions audited: both recover by
    // themselves once the database takes writes again (the heartbeat writes every second).
    if let Some(fault) = state.store.write_fault() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("database refuses writes: {fault}\n"));
    }
    if let Some(fault) = state.sessions.audit().fault() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("audit trail not written: {fault}\n"));
    }
    // Not ready while workers fail to boot: new sessions could not be served.
    match state.sessions.pool().last_boot_error() {
        None => (StatusCode::OK, "ready\n".to_string()),
        Some(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("workers fail to boot: {e}\n")),
    }
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    let status = state.sessions.pool().status();
    let mut out = String::new();
    let gauges = [
        ("browserpool_workers_warm", "Workers booted and idle.", status.warm),
        ("browserpool_workers_booting", "Workers starting.", status.booting),
        ("browserpool_workers_leased", "Workers leased to sessions.", status.leased),
        ("browserpool_workers_capacity", "Cap on Chromium processes.", status.capacity),
        ("browserpool_sessions_live", "Sessions not yet ended.", state.sessions.live_count()),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
    }
    let audit = state.sessions.audit();
    let store_gauges = [
        ("browserpool_audit_queued", "Audit records waiting to be written (places taken included).", audit.queued()),
        (
            "browserpool_audit_writable",
            "1 while the audit trail is written, 0 after a failed write.",
            audit.healthy() as usize,
        ),
        (
            "browserpool_store_writable",
            "1 while the database takes writes.",
            state.store.write_fault().is_none() as usize,
        ),
    ];
    for (name, help, value) in store_gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
    }
    let name = "browserpool_audit_refusals_lost_total";
    let _ = writeln!(
        out,
        "# HELP {name} Records of refused calls that found the audit queue full (logged instead).\n# TYPE {name} counter\n{name} {}",
        audit.lost_refusals()
    );
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
