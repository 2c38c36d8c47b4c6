//! The `browser` tool of one MCP session: its description and schema from the action catalog
//! (a new action appears with no change here), its calls run as `Sessions/Act` runs them (the
//! token's scopes, the audit, the same codes and messages), results sized for a model.

use std::borrow::Cow;

use browserpool_pool::ActionKind;
use browserpool_proto::v1 as pb;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

use super::Held;
use crate::app::App;
use crate::auth::Claims;
use crate::sessions::{AcquireSpec, ActionInput};

/// Most characters of text a result carries; the cut is said, with how to get the rest.
pub const MAX_TEXT: usize = 32 * 1024;
/// How long the first browser call waits for a browser in the tenant's queue.
const ACQUIRE_WAIT_MS: u32 = 30_000;

/// One MCP session: the browserpool session it leased, if any.
pub struct McpSession {
    app: App,
    held: Held,
    /// One lease at a time: parallel first calls must not lease twice.
    leasing: tokio::sync::Mutex<()>,
}

impl McpSession {
    pub fn new(app: App) -> McpSession {
        McpSession { app, held: Held::default(), leasing: tokio::sync::Mutex::new(()) }
    }

    /// The session's browser: the one it holds, or one leased now in the token's tenant.
    async fn browser(&self, claims: &Claims) -> Result<String, String> {
        let _one = self.leasing.lock().await;
        if let Some((id, holder)) = self.held.0.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            if holder.tenant != claims.tenant {
                return Err(format!(
                    "this MCP session's browser belongs to tenant {}; start a new MCP session",
                    holder.tenant
                ));
            }
            return Ok(id);
        }
        let spec = AcquireSpec {
            wait_ms: ACQUIRE_WAIT_MS,
            labels: [("mcp".to_string(), "true".to_string())].into(),
            ..AcquireSpec::default()
        };
        let record =
            self.app.sessions.acquire(claims, spec).await.map_err(|e| tonic::Status::from(e).message().to_string())?;
        tracing::info!(session = %record.id, tenant = %claims.tenant, "an MCP session leased a browser");
        *self.held.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((record.id.clone(), claims.clone()));
        Ok(record.id)
    }

    async fn call_browser(&self, claims: &Claims, args: JsonObject) -> CallToolResult {
        let Some(action) = args.get("action").and_then(Value::as_str).filter(|a| !a.is_empty()) else {
            return CallToolResult::error(vec![ContentBlock::text(
                "INVALID_ARGUMENT: action: required (e.g. navigate)",
            )]);
        };
        let selector = args.get("selector").and_then(Value::as_str).unwrap_or_default();
        let input = ActionInput {
            action: action.to_string(),
            selector: selector.to_string(),
            payload: args.get("payload").cloned().unwrap_or(Value::Null),
            timeout_ms: args.get("timeout").and_then(Value::as_u64).unwrap_or(0).min(u32::MAX as u64) as u32,
            ..ActionInput::default()
        };
        let id = match self.browser(claims).await {
            Ok(id) => id,
            Err(why) => return CallToolResult::error(vec![ContentBlock::text(why)]),
        };
        let place = match self.app.audit.reserve() {
            Ok(place) => place,
            Err(e) => return CallToolResult::error(vec![ContentBlock::text(format!("UNAVAILABLE: {e}; retry"))]),
        };
        let report = self.app.sessions.act(claims, &id, input, "MCP browser", place).await;
        render(crate::convert::report_to_pb(report))
    }
}

impl Drop for McpSession {
    /// The MCP session ended (DELETE, idle, shutdown): its browser goes back.
    fn drop(&mut self) {
        let held = self.held.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (Some((id, claims)), Ok(runtime)) = (held, tokio::runtime::Handle::try_current()) else { return };
        let sessions = self.app.sessions.clone();
        runtime.spawn(async move {
            if let Err(e) = sessions.release(&claims, &id, false).await {
                tracing::warn!(session = %id, error = %e, "could not release an MCP session's browser; it ends at its idle timeout");
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
        Ok(ListToolsResult::with_all_items(vec![browser_tool()]))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = cx.extensions.get::<http::request::Parts>();
        let Some(claims) = parts.and_then(|p| p.extensions.get::<Claims>()).cloned() else {
            return Err(ErrorData::invalid_request("no verified token on this request", None));
        };
        match req.name.as_ref() {
            "browser" => Ok(self.call_browser(&claims, req.arguments.unwrap_or_default()).await.into()),
            other => Err(ErrorData::invalid_params(format!("unknown tool {other:?}: the tool is `browser`"), None)),
        }
    }
}

/// The `browser` tool, described from the catalog.
pub fn browser_tool() -> Tool {
    let names: Vec<String> = ActionKind::ALL
        .iter()
        .map(|a| match a.aliases() {
            [] => a.name().to_string(),
            aliases => format!("{} (or {})", a.name(), aliases.join(", ")),
        })
        .collect();
    let description = format!(
        "Drive this MCP session's browser (leased at the first call, kept for the session). \
         action: one of {}. selector: CSS, text=..., role=..., xpath=..., or the dialog grammar \
         (dialog::accept) for actions that take one. payload: the action's argument (a URL, text, \
         an options object). timeout: milliseconds, 0 for 30000. An open dialog comes back in the \
         error with how to answer it. The whole reference: docs/actions.md.",
        names.join(", ")
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "description": "The action's name or an alias"},
            "selector": {"type": "string", "description": "What the action acts on, when it takes a selector"},
            "payload": {"description": "The action's argument: a string, number or object"},
            "timeout": {"type": "integer", "minimum": 0, "description": "Milliseconds; 0 for the default"}
        },
        "required": ["action"]
    });
    let Value::Object(schema) = schema else { unreachable!("a JSON object literal") };
    Tool::new("browser", description, schema)
}

/// An action's result as MCP content: an image as an image, other bytes said, a value as JSON
/// text (capped at [`MAX_TEXT`], the cut said); a failure as a tool error with its code.
pub fn render(r: pb::ActionResult) -> CallToolResult {
    if !r.ok {
        let e = r.error.unwrap_or_default();
        let code = pb::ErrorCode::try_from(e.code)
            .map(|c| c.as_str_name().trim_start_matches("ERROR_CODE_"))
            .unwrap_or("INTERNAL");
        let mut text = format!("{code}: {}", e.message);
        if !e.did_you_mean.is_empty() {
            text.push_str(&format!(" (did you mean: {})", e.did_you_mean.join(", ")));
        }
        if let Some(d) = e.dialog {
            text.push_str(&format!("\nopen dialog: {:?}; answer with: {}", d.message, d.grammar.join("; ")));
        }
        return CallToolResult::error(vec![ContentBlock::text(text)]);
    }
    if !r.data.is_empty() {
        use base64::Engine;
        if r.mime_type.starts_with("image/") {
            let data = base64::engine::general_purpose::STANDARD.encode(&r.data);
            return CallToolResult::success(vec![ContentBlock::image(data, r.mime_type)]);
        }
        let said =
            format!("{} bytes of {}: fetch them over gRPC (Sessions/Act) to keep them", r.data.len(), r.mime_type);
        return CallToolResult::success(vec![ContentBlock::text(said)]);
    }
    let value = r.value.as_ref().map(crate::convert::to_json).unwrap_or(Value::Null);
    CallToolResult::success(vec![ContentBlock::text(capped(&value.to_string()))])
}

/// `text` cut to [`MAX_TEXT`] characters, the cut said with how to get the rest.
fn capped(text: &str) -> String {
    let total = text.chars().count();
    if total <= MAX_TEXT {
        return text.to_string();
    }
    let kept: String = text.chars().take(MAX_TEXT).collect();
    format!("{kept}\n[cut at {MAX_TEXT} of {total} characters: narrow the selector, or extract a part of the page]")
}
