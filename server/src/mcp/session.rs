//! One MCP session: the browserpool session it holds (leased at its first browser call, or
//! bound to one its caller owns), and its tools, each run as a call to this server's own gRPC
//! API with the caller's token: scopes, quotas, codes, messages and the audit are gRPC's, and a
//! bound session another replica holds is reached through the forwarding layer like any call.

use std::borrow::Cow;
use std::sync::Mutex;

use browserpool_proto::envelope_json;
use browserpool_proto::v1 as pb;
use pb::sessions_client::SessionsClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use super::tools::{self, invalid, status_error, MAX_STEPS};
use crate::app::App;
use crate::auth::{Claims, MCP_SESSION_METADATA};
use crate::forward::Peers;

/// How long the first browser call waits for a browser in the tenant's queue (progress
/// notifications say how the wait stands, every second).
const ACQUIRE_WAIT_MS: u32 = 60_000;
/// Largest answer the tools read from gRPC (a full-page screenshot).
const MAX_ANSWER: usize = 64 << 20;

/// The browserpool session an MCP session holds.
#[derive(Clone)]
struct Held {
    id: String,
    claims: Claims,
    /// Leased for this MCP session (released when it ends), or bound (its owner's to end).
    leased: bool,
}

/// Who calls, as one tools/call request says.
struct Caller {
    claims: Claims,
    authorization: MetadataValue<Ascii>,
    mcp_session: Option<MetadataValue<Ascii>>,
    bind: Option<String>,
}

impl Caller {
    fn of(cx: &RequestContext<RoleServer>) -> Option<Caller> {
        let parts = cx.extensions.get::<http::request::Parts>()?;
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        Some(Caller {
            claims: parts.extensions.get::<Claims>()?.clone(),
            authorization: header("authorization")?.parse().ok()?,
            mcp_session: header(super::SESSION_HEADER).and_then(|v| v.parse().ok()),
            bind: header(super::BIND_HEADER).filter(|v| !v.is_empty()).map(str::to_string),
        })
    }

    /// A gRPC request carrying the caller's token and naming the MCP session for the audit.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        req.metadata_mut().insert("authorization", self.authorization.clone());
        if let Some(id) = &self.mcp_session {
            req.metadata_mut().insert(MCP_SESSION_METADATA, id.clone());
        }
        req
    }
}

/// One MCP session's state.
pub struct McpSession {
    app: App,
    peers: Peers,
    held: Mutex<Option<Held>>,
    /// One lease at a time: parallel first calls must not lease twice.
    leasing: tokio::sync::Mutex<()>,
}

impl McpSession {
    pub fn new(app: App, peers: Peers) -> McpSession {
        McpSession { app, peers, held: Mutex::new(None), leasing: tokio::sync::Mutex::new(()) }
    }

    fn held(&self) -> Option<Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn hold(&self, held: Option<Held>) -> Option<Held> {
        std::mem::replace(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()), held)
    }

    /// This server's gRPC API, reached as other replicas reach it.
    fn grpc(&self) -> SessionsClient<Channel> {
        SessionsClient::new(self.peers.channel(&self.app.sessions.addrs().grpc))
            .max_decoding_message_size(MAX_ANSWER)
            .max_encoding_message_size(MAX_ANSWER)
    }

    /// The session's browser: the one it holds, the one the bind header names, or one leased
    /// now in the token's tenant (the wait reported as progress when the client asked).
    async fn browser(&self, caller: &Caller, cx: &RequestContext<RoleServer>) -> Result<String, CallToolResult> {
        let _one = self.leasing.lock().await;
        if let Some(id) = self.held_or_bound(caller).await? {
            return Ok(id);
        }
        let labels = [("mcp".to_string(), "true".to_string())].into();
        let req = pb::AcquireRequest { wait_ms: ACQUIRE_WAIT_MS, labels, ..Default::default() };
        let mut progress =
            self.grpc().acquire_watched(caller.request(req)).await.map_err(|s| status_error(&s))?.into_inner();
        let token = cx.meta.get_progress_token();
        while let Some(next) = progress.message().await.map_err(|s| status_error(&s))? {
            match next.progress {
                Some(pb::acquire_progress::Progress::Waiting(w)) => {
                    let Some(token) = token.clone() else { continue };
                    let place = match w.position {
                        0 => String::new(),
                        p => format!(", {p} of {} in the queue", w.queued),
                    };
                    let said = format!("waiting for a browser of tenant {}{place}: {}", w.tenant, w.reason);
                    let note = ProgressNotificationParam::new(token, w.waited_ms as f64).with_message(said);
                    let _ = cx.peer.notify_progress(note).await;
                }
                Some(pb::acquire_progress::Progress::Session(s)) => {
                    tracing::info!(session = %s.session_id, tenant = %caller.claims.tenant, "an MCP session leased a browser");
                    let held = Held { id: s.session_id.clone(), claims: caller.claims.clone(), leased: true };
                    self.hold(Some(held));
                    return Ok(s.session_id);
                }
                None => {}
            }
        }
        Err(CallToolResult::error(vec![ContentBlock::text("UNAVAILABLE: the acquire ended without a session; retry")]))
    }

    /// The session held, else the one the bind header names (bound now: a bind header holds
    /// from the first call, whichever tool it is); `None` when neither. Called under `leasing`.
    async fn held_or_bound(&self, caller: &Caller) -> Result<Option<String>, CallToolResult> {
        if let Some(held) = self.held() {
            return Ok(Some(held.id));
        }
        match &caller.bind {
            Some(id) => self.bind(caller, id).await.map(|_| Some(id.clone())),
            None => Ok(None),
        }
    }

    /// Binds to `id`, a session the caller owns (NOT_FOUND otherwise, as over gRPC).
    async fn bind(&self, caller: &Caller, id: &str) -> Result<pb::Session, CallToolResult> {
        if let Some(held) = self.held().filter(|h| h.leased && h.id != id) {
            return Err(CallToolResult::error(vec![ContentBlock::text(format!(
                "FAILED_PRECONDITION: this MCP session holds session {} it leased; release it first (browser_session op release)",
                held.id
            ))]));
        }
        let req = pb::GetSessionRequest { session_id: id.to_string() };
        let session = self.grpc().get(caller.request(req)).await.map_err(|s| status_error(&s))?.into_inner();
        self.hold(Some(Held { id: id.to_string(), claims: caller.claims.clone(), leased: false }));
        Ok(session)
    }

    /// Notes a failed call on the held session: when the session has ended (idle timeout, TTL,
    /// crash), it is forgotten so the next browser call leases another, and the error says so.
    async fn failed(&self, caller: &Caller, id: &str, status: tonic::Status) -> CallToolResult {
        let mut text = tools::status_text(&status);
        let req = pb::GetSessionRequest { session_id: id.to_string() };
        if let Ok(s) = self.grpc().get(caller.request(req)).await.map(tonic::Response::into_inner) {
            let live =
                matches!(pb::SessionState::try_from(s.state), Ok(pb::SessionState::Ready | pb::SessionState::Queued));
            if !live && self.held().is_some_and(|h| h.id == id) {
                self.hold(None);
                text.push_str(&format!("\n(session {id} has ended: the next browser call leases a new browser)"));
            }
        }
        CallToolResult::error(vec![ContentBlock::text(text)])
    }

    async fn act(&self, caller: &Caller, cx: &RequestContext<RoleServer>, action: pb::Action) -> CallToolResult {
        let id = match self.browser(caller, cx).await {
            Ok(id) => id,
            Err(refused) => return refused,
        };
        let req = pb::ActRequest { session_id: id.clone(), action: Some(action) };
        match self.grpc().act(caller.request(req)).await {
            Ok(result) => tools::render(result.into_inner()),
            Err(status) => self.failed(caller, &id, status).await,
        }
    }

    async fn batch(&self, caller: &Caller, cx: &RequestContext<RoleServer>, args: &JsonObject) -> CallToolResult {
        let Some(steps) = args.get("steps").and_then(Value::as_array) else {
            return invalid("steps: an array of actions is required");
        };
        if steps.len() > MAX_STEPS {
            return invalid(format!("steps: {} exceeds the maximum of {MAX_STEPS}", steps.len()));
        }
        let mut actions = Vec::with_capacity(steps.len());
        for (i, step) in steps.iter().enumerate() {
            match step.as_object().ok_or_else(|| "an object is required".to_string()).and_then(tools::action) {
                Ok(a) => actions.push(a),
                Err(why) => return invalid(format!("steps[{i}].{why}")),
            }
        }
        let id = match self.browser(caller, cx).await {
            Ok(id) => id,
            Err(refused) => return refused,
        };
        let stop_on_error = args.get("stop_on_error").and_then(Value::as_bool).unwrap_or(false);
        let req = pb::BatchRequest { session_id: id.clone(), actions, stop_on_error };
        match self.grpc().batch(caller.request(req)).await {
            Ok(b) => tools::render_batch(b.into_inner()),
            Err(status) => self.failed(caller, &id, status).await,
        }
    }

    async fn export(&self, caller: &Caller, cx: &RequestContext<RoleServer>, args: &JsonObject) -> CallToolResult {
        let id = match self.browser(caller, cx).await {
            Ok(id) => id,
            Err(refused) => return refused,
        };
        let req = pb::ExportContextRequest {
            session_id: id.clone(),
            origin: args.get("origin").and_then(Value::as_str).unwrap_or_default().to_string(),
            include_storage: args.get("include_storage").and_then(Value::as_bool),
            ..Default::default()
        };
        match self.grpc().export_context(caller.request(req)).await {
            // Whole, never cut: an envelope cut short cannot be imported.
            Ok(env) => {
                CallToolResult::success(vec![ContentBlock::text(envelope_json::to_json(&env.into_inner()).to_string())])
            }
            Err(status) => self.failed(caller, &id, status).await,
        }
    }

    async fn import(&self, caller: &Caller, cx: &RequestContext<RoleServer>, args: &JsonObject) -> CallToolResult {
        let envelope = match args.get("envelope").map(envelope_json::from_json) {
            Some(Ok(env)) => env,
            Some(Err(why)) => return invalid(format!("envelope: {why}")),
            None => return invalid("envelope: required (what browser_context_export returned)"),
        };
        let id = match self.browser(caller, cx).await {
            Ok(id) => id,
            Err(refused) => return refused,
        };
        let strict_origin = args.get("strict_origin").and_then(Value::as_bool).unwrap_or(false);
        let req = pb::ImportContextRequest { session_id: id.clone(), envelope: Some(envelope), strict_origin };
        match self.grpc().import_context(caller.request(req)).await {
            Ok(r) if r.get_ref().ok => {
                let r = r.into_inner();
                tools::json_text(
                    &json!({"applied_cookies": r.applied_cookies, "applied_storage_keys": r.applied_storage_keys}),
                )
            }
            Ok(r) => CallToolResult::error(vec![ContentBlock::text(format!(
                "INTEGRITY_MISMATCH: {}: export the envelope again, unchanged",
                r.into_inner().integrity_error
            ))]),
            Err(status) => self.failed(caller, &id, status).await,
        }
    }

    async fn session(&self, caller: &Caller, args: &JsonObject) -> CallToolResult {
        let op = args.get("op").and_then(Value::as_str).unwrap_or_default();
        if !["status", "renew", "release", "bind"].contains(&op) {
            return invalid(format!("op: {op:?} is not status, renew, release or bind"));
        }
        let wanted = args.get("session_id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let id = {
            let _one = self.leasing.lock().await;
            if op == "bind" {
                let Some(id) = wanted else { return invalid("session_id: required for bind") };
                return match self.bind(caller, id).await {
                    Ok(s) => tools::json_text(&session_json(&s)),
                    Err(refused) => refused,
                };
            }
            match self.held_or_bound(caller).await {
                Ok(Some(bound)) => bound,
                Ok(None) => {
                    return tools::json_text(&json!({
                        "session_id": null,
                        "said": "no browser yet: the first browser call leases one (or bind to a session you own)"
                    }))
                }
                Err(refused) => return refused,
            }
        };
        let grpc = &mut self.grpc();
        let answer = match op {
            "status" => grpc
                .get(caller.request(pb::GetSessionRequest { session_id: id.clone() }))
                .await
                .map(|s| session_json(s.get_ref())),
            "renew" => {
                let idle_timeout_ms =
                    args.get("idle_timeout_ms").and_then(Value::as_u64).unwrap_or(0).min(u32::MAX as u64) as u32;
                let req = pb::RenewRequest { session_id: id.clone(), idle_timeout_ms };
                grpc.renew(caller.request(req)).await.map(|s| session_json(s.get_ref()))
            }
            // `release`: the op was checked above.
            _ => {
                let req = pb::ReleaseRequest { session_id: id.clone(), failed: false };
                let released = grpc.release(caller.request(req)).await;
                if released.is_ok() {
                    self.hold(None);
                }
                released.map(|r| json!({"session_id": id, "released": r.get_ref().released, "said": "the next browser call leases a new browser"}))
            }
        };
        match answer {
            Ok(value) => tools::json_text(&value),
            Err(status) => self.failed(caller, &id, status).await,
        }
    }
}

/// What `browser_session` says of a session.
fn session_json(s: &pb::Session) -> Value {
    let state = pb::SessionState::try_from(s.state)
        .map(|s| s.as_str_name().trim_start_matches("SESSION_STATE_"))
        .unwrap_or("UNKNOWN");
    let ms = |t: &Option<prost_types::Timestamp>| t.as_ref().map(crate::convert::millis);
    json!({
        "session_id": s.session_id,
        "state": state,
        "tenant": s.tenant,
        "subject": s.subject,
        "replica": s.replica,
        "labels": s.labels,
        "created_at_ms": ms(&s.created_at),
        "expires_at_ms": ms(&s.expires_at),
        "idle_deadline_ms": ms(&s.idle_deadline),
        "cdp_url": s.cdp_url,
    })
}

impl Drop for McpSession {
    /// The MCP session ended (DELETE, idle, shutdown): the browser it leased goes back; a
    /// bound one stays its owner's.
    fn drop(&mut self) {
        let Some(held) = self.hold(None).filter(|h| h.leased) else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let sessions = self.app.sessions.clone();
        runtime.spawn(async move {
            if let Err(e) = sessions.release(&held.claims, &held.id, false).await {
                tracing::warn!(session = %held.id, error = %e, "could not release an MCP session's browser; it ends at its idle timeout");
            }
        });
    }
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("browserpool", crate::VERSION))
            .with_instructions(
                "One browser per MCP session, leased at the first browser call and released when the session ends.",
            )
    }

    /// Sessions exist up to 2025-11-25; the browser lives in one.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(caller) = Caller::of(&cx) else {
            return Err(ErrorData::invalid_request("no verified token on this request", None));
        };
        let args = req.arguments.unwrap_or_default();
        let result = match req.name.as_ref() {
            "browser" => match tools::action(&args) {
                Ok(action) => self.act(&caller, &cx, action).await,
                Err(why) => invalid(why),
            },
            "browser_screenshot" => match screenshot(&args) {
                Ok(action) => self.act(&caller, &cx, action).await,
                Err(why) => invalid(why),
            },
            "browser_batch" => self.batch(&caller, &cx, &args).await,
            "browser_context_export" => self.export(&caller, &cx, &args).await,
            "browser_context_import" => self.import(&caller, &cx, &args).await,
            "browser_session" => self.session(&caller, &args).await,
            other => {
                let names: Vec<String> = tools::all().into_iter().map(|t| t.name.to_string()).collect();
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}: the tools are {}", names.join(", ")),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

/// The `screenshot` action `browser_screenshot`'s arguments make (the action checks them).
fn screenshot(args: &JsonObject) -> Result<pb::Action, String> {
    let mut options = serde_json::Map::new();
    for key in ["full_page", "format", "quality"] {
        if let Some(v) = args.get(key).filter(|v| !v.is_null()) {
            options.insert(key.to_string(), v.clone());
        }
    }
    let mut step = JsonObject::new();
    step.insert("action".into(), "screenshot".into());
    step.insert("payload".into(), Value::Object(options));
    if let Some(selector) = args.get("selector") {
        step.insert("selector".into(), selector.clone());
    }
    tools::action(&step)
}
