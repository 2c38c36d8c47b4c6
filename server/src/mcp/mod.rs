//! MCP for agents at `/mcp` on the HTTP listener: Streamable HTTP through the official Rust
//! SDK (`rmcp`), the same Bearer tokens as gRPC (a missing or bad one is 401 with
//! `WWW-Authenticate` before MCP sees the request), and one `browser` tool of four parameters
//! (`action`, `selector`, `payload`, `timeout`) over the whole action catalog, aliases and
//! did-you-mean included. Each MCP session (its `Mcp-Session-Id`) leases a browserpool
//! session at its first browser call, in the token's tenant, released when the MCP session
//! ends (DELETE, or its idle timeout). The protocol revisions served are pinned to 2025-11-25
//! and earlier: 2026-07-28 has no sessions, so a browser could not outlive a call.

mod tool;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::app::App;
use crate::auth::Claims;

/// Where the MCP endpoint is mounted.
pub const MCP_PATH: &str = "/mcp";
/// How long an MCP session may go without a message before it ends (and its browser with it).
const IDLE: Duration = Duration::from_secs(300);

/// The MCP service: one [`tool::McpSession`] per MCP session.
pub fn service(
    app: App,
    shutdown: tokio_util::sync::CancellationToken,
) -> StreamableHttpService<tool::McpSession, LocalSessionManager> {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(IDLE);
    // Every request carries a token, so a page on a rebound name has nothing to send: the
    // SDK's loopback-only Host check would only refuse remote clients.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts().with_cancellation_token(shutdown);
    StreamableHttpService::new(move || Ok(tool::McpSession::new(app.clone())), Arc::new(sessions), config)
}

/// Verifies the Bearer token before MCP sees the request; the claims go on as an extension
/// (the tool reads them from the request's parts). 401 with `WWW-Authenticate` otherwise.
pub async fn authenticate(State(app): State<App>, mut req: Request, next: Next) -> Response {
    let header = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match app.tokens.verify_header(header) {
        Ok(claims) => {
            req.extensions_mut().insert::<Claims>(claims);
            next.run(req).await
        }
        Err(e) => {
            let mut resp = (StatusCode::UNAUTHORIZED, format!("{e}\n")).into_response();
            let challenge = HeaderValue::from_static("Bearer realm=\"browserpool\"");
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
            resp
        }
    }
}

/// The browserpool session an MCP session holds, once it has one.
#[derive(Default)]
struct Held(Mutex<Option<(String, Claims)>>);
