//! MCP for agents at `/mcp` on the HTTP listener: Streamable HTTP through the official Rust
//! SDK (`rmcp`) behind the same Bearer tokens as gRPC (checked, throttled and audited before
//! MCP sees the request: see `http`), and tools described from the action catalog
//! ([`tools`]). Each MCP session (its `Mcp-Session-Id`) leases a browserpool session at its
//! first browser call, in the token's tenant, released when the MCP session ends (DELETE, or
//! its idle timeout); or it binds to a session its caller already owns.
//!
//! The tools call this server's own gRPC API with the caller's token ([`session`]), so scopes,
//! codes, messages, audit and forwarding to the replica holding a bound session are those of
//! gRPC by construction. An MCP session lives in one replica's memory: its id starts with that
//! replica's id, and another replica relays its requests there (`forward`).
//!
//! The protocol revisions served are pinned to 2025-11-25 and earlier: 2026-07-28 has no
//! sessions, so a browser could not outlive a call.

mod session;
mod sessions;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

pub use self::session::McpSession;
pub use self::sessions::{Access, Opener, ReplicaSessions};
use crate::app::App;
use crate::forward::Peers;

/// Where the MCP endpoint is mounted.
pub const MCP_PATH: &str = "/mcp";
/// The header naming an MCP session (the transport's).
pub const SESSION_HEADER: &str = crate::forward::MCP_SESSION_HEADER;
/// A header a client may send to bind its MCP session to a browserpool session it owns.
pub const BIND_HEADER: &str = "x-browserpool-session";
/// How long an MCP session may go without a message before it ends (and its browser with it).
const IDLE: Duration = Duration::from_secs(300);

/// This replica's MCP sessions, which end after [`IDLE`] without a message.
pub fn sessions(app: &App) -> Arc<ReplicaSessions> {
    Arc::new(ReplicaSessions::new(app.sessions.replica_id(), IDLE))
}

/// The MCP service over `sessions`: one [`McpSession`] per MCP session.
pub fn service(
    app: App,
    peers: Peers,
    sessions: Arc<ReplicaSessions>,
    shutdown: tokio_util::sync::CancellationToken,
    max_body: usize,
) -> McpService {
    // Every request carries a token, so a page on a rebound name has nothing to send: the
    // SDK's loopback-only Host check would only refuse remote clients.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(max_body);
    StreamableHttpService::new(move || Ok(McpSession::new(app.clone(), peers.clone())), sessions, config)
}

/// The tower service mounted at [`MCP_PATH`].
pub type McpService = StreamableHttpService<McpSession, ReplicaSessions>;
