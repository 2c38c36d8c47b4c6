//! The MCP tools: their descriptions and schemas, the `browser` tool's written from the action
//! catalog (a new action appears with no change here), and results sized for a model.
//! `docs/mcp.md` is [`markdown`]'s output; a test fails when the two differ.

use browserpool_pool::ActionKind;
use browserpool_proto::v1 as pb;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{json, Value};

/// Most characters of text a result carries; the cut is said, with how to get the rest.
pub const MAX_TEXT: usize = 32 * 1024;
/// Most steps a `browser_batch` call runs (as over gRPC).
pub const MAX_STEPS: usize = 50;

/// The four parameters of an action, as the `browser` tool and each batch step take them.
fn action_properties() -> Value {
    json!({
        "action": {"type": "string", "description": "The action's name or an alias (see the tool's description)"},
        "selector": {"type": "string", "description": "What the action acts on, when it takes a selector: CSS, text=..., role=..., xpath=..., or dialog::accept / dialog::dismiss"},
        "payload": {"description": "The action's argument: a URL, text, a number or an options object"},
        "timeout": {"type": "integer", "minimum": 0, "description": "Milliseconds; 0 or absent for 30000"}
    })
}

fn tool(name: &'static str, description: String, schema: Value) -> Tool {
    let Value::Object(schema) = schema else { unreachable!("a JSON object literal") };
    Tool::new(name, description, schema)
}

/// Every tool, in the order they are listed.
pub fn all() -> Vec<Tool> {
    vec![
        browser(),
        tool(
            "browser_batch",
            format!(
                "Run up to {MAX_STEPS} browser actions in order in one call, each as the browser tool takes it; \
                 one result per step. A failed step does not stop the rest unless stop_on_error."
            ),
            json!({
                "type": "object",
                "properties": {
                    "steps": {"type": "array", "maxItems": MAX_STEPS, "items": {"type": "object", "properties": action_properties(), "required": ["action"]}},
                    "stop_on_error": {"type": "boolean", "description": "Stop at the first failed step (default false)"}
                },
                "required": ["steps"]
            }),
        ),
        tool(
            "browser_screenshot",
            "A screenshot of this session's page as an image: the viewport, the full page, or one element.".into(),
            json!({
                "type": "object",
                "properties": {
                    "selector": {"type": "string", "description": "Crop to this element"},
                    "full_page": {"type": "boolean", "description": "The whole scrollable page (default false)"},
                    "format": {"type": "string", "enum": ["png", "jpeg"], "description": "Default png"},
                    "quality": {"type": "integer", "minimum": 0, "maximum": 100, "description": "jpeg only"}
                }
            }),
        ),
        tool(
            "browser_context_export",
            "Export one origin's cookies and storage of this session's browser as a signed envelope \
             (JSON, the CLI's envelope file format), to carry a signed-in state into another session. \
             Needs scope context:export."
                .into(),
            json!({
                "type": "object",
                "properties": {
                    "origin": {"type": "string", "description": "e.g. https://example.com; default the active tab's"},
                    "include_storage": {"type": "boolean", "description": "localStorage and sessionStorage too (default true)"}
                }
            }),
        ),
        tool(
            "browser_context_import",
            "Apply an envelope from browser_context_export (or `browserpool session export`) to this \
             session's browser: its origin's cookies and storage are replaced. Its integrity is checked. \
             Needs scope context:import."
                .into(),
            json!({
                "type": "object",
                "properties": {
                    "envelope": {"type": "object", "description": "The envelope, as exported"},
                    "strict_origin": {"type": "boolean", "description": "Refuse unless the active tab is on the envelope's origin"}
                },
                "required": ["envelope"]
            }),
        ),
        tool(
            "browser_session",
            "This MCP session's browser: `status` (its id, state, tenant, times), `renew` (push its idle \
             timeout), `release` (end it now; the next browser call leases another), or `bind` (use a \
             session you already own, by session_id, instead of leasing one)."
                .into(),
            json!({
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["status", "renew", "release", "bind"]},
                    "session_id": {"type": "string", "description": "For bind: the session to use"},
                    "idle_timeout_ms": {"type": "integer", "minimum": 0, "description": "For renew: the new idle timeout; 0 keeps it"}
                },
                "required": ["op"]
            }),
        ),
    ]
}

/// The `browser` tool, described from the catalog.
pub fn browser() -> Tool {
    let actions: Vec<String> = ActionKind::ALL
        .iter()
        .map(|a| {
            let aliases = match a.aliases() {
                [] => String::new(),
                aliases => format!(" (or {})", aliases.join(", ")),
            };
            format!("- {}{aliases}: {}", a.name(), a.reference().summary)
        })
        .collect();
    let description = format!(
        "Drive this MCP session's browser (leased at the first call, kept for the session). \
         `action` names what to do, `selector` what to do it on, `payload` its argument, `timeout` \
         how long it may take. An open dialog comes back in the error with how to answer it \
         (selector dialog::accept or dialog::dismiss). The actions:\n{}",
        actions.join("\n")
    );
    let schema = json!({"type": "object", "properties": action_properties(), "required": ["action"]});
    tool("browser", description, schema)
}

/// An `ActRequest`'s action from the four parameters; `Err` says which one is wrong.
pub fn action(args: &JsonObject) -> Result<pb::Action, String> {
    let Some(name) = args.get("action").and_then(Value::as_str).filter(|a| !a.is_empty()) else {
        return Err("action: required (e.g. navigate)".into());
    };
    let selector = match args.get("selector") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s,
        Some(_) => return Err("selector: a string is required".into()),
    };
    let timeout_ms = match args.get("timeout") {
        None | Some(Value::Null) => 0,
        Some(t) => t.as_u64().filter(|t| *t <= u32::MAX as u64).ok_or("timeout: milliseconds, a whole number")? as u32,
    };
    let payload = args.get("payload").filter(|p| !p.is_null()).map(browserpool_proto::json::from_json);
    Ok(pb::Action { action: name.into(), selector: selector.into(), payload, timeout_ms, ..Default::default() })
}

/// A failed gRPC call as a tool error: the status's code and message, as a gRPC client sees them.
pub fn status_error(status: &tonic::Status) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(status_text(status))])
}

/// `NOT_FOUND: message`.
pub fn status_text(status: &tonic::Status) -> String {
    let mut code = String::new();
    for (i, c) in format!("{:?}", status.code()).chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            code.push('_');
        }
        code.push(c.to_ascii_uppercase());
    }
    format!("{code}: {}", status.message())
}

/// A tool error of bad arguments, worded as gRPC's INVALID_ARGUMENT.
pub fn invalid(why: impl std::fmt::Display) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("INVALID_ARGUMENT: {why}"))])
}

/// An action's result as MCP content: an image as an image, other bytes said, a value as JSON
/// text (capped at [`MAX_TEXT`], the cut said); a failure as a tool error with its code.
pub fn render(r: pb::ActionResult) -> CallToolResult {
    let ok = r.ok;
    let content = contents(r);
    if ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

/// A batch's results: a line per step, then each step's content.
pub fn render_batch(b: pb::BatchResponse) -> CallToolResult {
    let mut content =
        vec![ContentBlock::text(format!("{} of {} steps succeeded", b.succeeded, b.succeeded + b.failed))];
    for (i, r) in b.results.into_iter().enumerate() {
        let mut step = contents(r);
        let said = step.first().and_then(|c| c.as_text()).map(|t| format!("step {i}: {}", t.text));
        match said {
            Some(said) => step[0] = ContentBlock::text(said),
            None => content.push(ContentBlock::text(format!("step {i}:"))),
        }
        content.extend(step);
    }
    if b.failed == 0 {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

fn contents(r: pb::ActionResult) -> Vec<ContentBlock> {
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
        return vec![ContentBlock::text(text)];
    }
    if !r.data.is_empty() {
        use base64::Engine;
        if r.mime_type.starts_with("image/") {
            let data = base64::engine::general_purpose::STANDARD.encode(&r.data);
            return vec![ContentBlock::image(data, r.mime_type)];
        }
        let said =
            format!("{} bytes of {}: fetch them over gRPC (Sessions/Act) to keep them", r.data.len(), r.mime_type);
        return vec![ContentBlock::text(said)];
    }
    let value = r.value.as_ref().map(crate::convert::to_json).unwrap_or(Value::Null);
    vec![ContentBlock::text(capped(&value.to_string()))]
}

/// A JSON value as text content, capped.
pub fn json_text(value: &Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(capped(&value.to_string()))])
}

/// `text` cut to [`MAX_TEXT`] characters, the cut said with how to get the rest.
pub fn capped(text: &str) -> String {
    let total = text.chars().count();
    if total <= MAX_TEXT {
        return text.to_string();
    }
    let kept: String = text.chars().take(MAX_TEXT).collect();
    format!("{kept}\n[cut at {MAX_TEXT} of {total} characters: narrow the selector, or extract a part of the page]")
}

/// `docs/mcp.md`: the tools, their parameters and descriptions, as a client lists them.
pub fn markdown() -> String {
    let mut out = String::from(
        "# MCP tools\n\n\
         Written from the server's tool list (`server/src/mcp/tools.rs`) and the action catalog by\n\
         `BROWSERPOOL_BLESS=1 cargo test -p browserpool-server --lib mcp::tools`; a test fails when\n\
         this file and the server differ. How to connect: the README's \"MCP for agents\".\n",
    );
    for t in all() {
        out.push_str(&format!(
            "\n## `{}`\n\n{}\n\n| parameter | type | required | meaning |\n|---|---|---|---|\n",
            t.name,
            t.description.as_deref().unwrap_or_default()
        ));
        let required: Vec<&str> = t
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let props = t.input_schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        for (name, p) in props {
            let ty = match (p.get("type").and_then(Value::as_str), p.get("enum")) {
                (_, Some(Value::Array(values))) => {
                    values.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" \\| ")
                }
                (Some(ty), _) => ty.to_string(),
                (None, _) => "any".to_string(),
            };
            let meaning = p.get("description").and_then(Value::as_str).unwrap_or("see below");
            let yes = if required.contains(&name.as_str()) { "yes" } else { "" };
            out.push_str(&format!("| `{name}` | {ty} | {yes} | {} |\n", meaning.replace('|', "\\|")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/mcp.md` is what the tools render; `BROWSERPOOL_BLESS=1` rewrites it.
    #[test]
    fn the_doc_matches_the_tools() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/mcp.md");
        let want = markdown();
        if std::env::var_os("BROWSERPOOL_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/mcp.md is stale: run `BROWSERPOOL_BLESS=1 cargo test -p browserpool-server --lib mcp::tools` and commit it"
        );
    }

    #[test]
    fn every_action_of_the_catalog_is_described_with_its_aliases() {
        let description = browser().description.unwrap_or_default().to_string();
        for a in ActionKind::ALL {
            assert!(description.contains(&format!("- {}", a.name())), "{}", a.name());
            for alias in a.aliases() {
                assert!(description.contains(alias), "{alias}");
            }
        }
    }

    #[test]
    fn the_four_parameters_are_checked_before_any_call() {
        let args = |v: Value| v.as_object().cloned().unwrap();
        let a = action(&args(json!({"action": "click", "selector": "#go", "timeout": 500}))).unwrap();
        assert_eq!((a.action.as_str(), a.selector.as_str(), a.timeout_ms, a.payload), ("click", "#go", 500, None));
        let a = action(&args(json!({"action": "navigate", "payload": "http://x/"}))).unwrap();
        assert_eq!(a.payload.map(|p| browserpool_proto::json::to_json(&p)), Some(json!("http://x/")));
        assert_eq!(action(&args(json!({}))).unwrap_err(), "action: required (e.g. navigate)");
        assert_eq!(action(&args(json!({"action": ""}))).unwrap_err(), "action: required (e.g. navigate)");
        assert_eq!(
            action(&args(json!({"action": "click", "selector": 3}))).unwrap_err(),
            "selector: a string is required"
        );
        assert!(action(&args(json!({"action": "click", "timeout": -1}))).unwrap_err().starts_with("timeout:"));
        assert!(action(&args(json!({"action": "click", "timeout": 1u64 << 40}))).is_err());
    }

    #[test]
    fn statuses_read_as_grpc_names_them() {
        assert_eq!(status_text(&tonic::Status::not_found("session s-1")), "NOT_FOUND: session s-1");
        assert_eq!(status_text(&tonic::Status::permission_denied("x")), "PERMISSION_DENIED: x");
        assert_eq!(status_text(&tonic::Status::resource_exhausted("q")), "RESOURCE_EXHAUSTED: q");
    }

    #[test]
    fn long_text_is_cut_and_the_cut_said() {
        let long = "é".repeat(MAX_TEXT + 10);
        let cut = capped(&long);
        assert!(cut.starts_with(&"é".repeat(MAX_TEXT)));
        assert!(cut.ends_with(&format!(
            "[cut at {MAX_TEXT} of {} characters: narrow the selector, or extract a part of the page]",
            MAX_TEXT + 10
        )));
        assert_eq!(capped("short"), "short");
    }

    #[test]
    fn a_failed_result_is_a_tool_error_with_its_code_and_dialog() {
        let failed = pb::ActionResult {
            ok: false,
            error: Some(pb::ActionError {
                code: pb::ErrorCode::DialogOpen as i32,
                message: "a dialog is open".into(),
                dialog: Some(pb::Dialog {
                    message: "Proceed?".into(),
                    grammar: vec!["dialog::accept".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = render(failed);
        assert_eq!(r.is_error, Some(true));
        let text = r.content[0].as_text().unwrap().text.clone();
        assert!(
            text.starts_with("DIALOG_OPEN: a dialog is open\nopen dialog: \"Proceed?\"; answer with: dialog::accept"),
            "{text}"
        );
    }
}
