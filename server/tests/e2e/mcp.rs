//! MCP at `/mcp`, driven by real clients: the official Python SDK (PyPI `mcp`, installed by
//! scripts/test.sh) over Streamable HTTP and through the `browserpool mcp` stdio bridge, the
//! TypeScript SDK, and `@playwright/mcp` attached to a session's `cdp_url`. Every tool on a
//! fixture page; scopes, tenants and tokens as over gRPC; one browser per MCP session, released
//! when it ends or idles; progress while queued; a session bound by a CI job's id; MCP
//! sessions forwarded between replicas.

use std::time::{Duration, Instant};

use browserpool_client::pb;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::helpers::{eventually, fixture_site, skip, BinaryServer, TestServer};

/// A running tests/mcp/agent.py: its step lines as they come, then its report.
struct Agent {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Agent {
    /// Starts agent.py with `scenario`; `None` (the test skipped) without the SDK.
    fn start(test: &str, scenario: Value) -> Option<Agent> {
        let Ok(python) = std::env::var("BROWSERPOOL_TEST_MCP_PYTHON") else {
            skip(test, "BROWSERPOOL_TEST_MCP_PYTHON is not set (scripts/test.sh installs the MCP SDK and sets it)");
            return None;
        };
        let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/agent.py");
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .env("SCENARIO", scenario.to_string())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Some(Agent { child, lines })
    }

    /// The next line it prints: a step's answer, or at the end its report.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(120), self.lines.next_line()).await;
        let line = line
            .expect("the agent answered within 120 s")
            .unwrap()
            .expect("the agent printed a line (see its stderr above)");
        serde_json::from_str(&line).unwrap()
    }

    /// Its report, once it exits.
    async fn report(mut self) -> Value {
        let mut last = Value::Null;
        while let Ok(Some(line)) = self.lines.next_line().await {
            last = serde_json::from_str(&line).unwrap();
        }
        let status = self.child.wait().await.unwrap();
        assert!(status.success(), "agent.py failed ({status}): see its stderr above");
        last
    }
}

/// Runs a scenario to its end; its report.
pub(crate) async fn agent(test: &str, scenario: Value) -> Option<Value> {
    Some(Agent::start(test, scenario)?.report().await)
}

pub(crate) fn call(tool: &str, args: Value) -> Value {
    json!({"tool": tool, "args": args})
}

pub(crate) fn browser(action: &str, selector: &str, payload: Value) -> Value {
    call("browser", json!({"action": action, "selector": selector, "payload": payload}))
}

pub(crate) fn text(step: &Value) -> &str {
    step["content"][0]["text"].as_str().unwrap_or_default()
}

pub(crate) fn ok(step: &Value) -> &str {
    assert_eq!(step["is_error"], false, "{step}");
    text(step)
}

pub(crate) fn err(step: &Value) -> &str {
    assert_eq!(step["is_error"], true, "{step}");
    text(step)
}

/// The session `browser_session` status reported.
pub(crate) fn session_of(step: &Value) -> Value {
    serde_json::from_str(ok(step)).unwrap()
}

/// Sessions labelled `mcp=true`.
pub(crate) async fn mcp_sessions(admin: &browserpool_client::Client) -> Vec<pb::Session> {
    let listed = admin.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner();
    listed.sessions.into_iter().filter(|s| s.labels.get("mcp").map(String::as_str) == Some("true")).collect()
}

fn http(server: &TestServer, token: &str, steps: Vec<Value>) -> Value {
    json!({"url": format!("http://{}/mcp", server.http), "token": token, "steps": steps})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_drives_one_browser_through_every_tool() {
    const TEST: &str = "mcp::an_agent_drives_one_browser_through_every_tool";
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let token = server
        .token("default", "agent", &["sessions:read", "sessions:write", "context:export", "context:import"])
        .await;
    let too_many: Vec<Value> = (0..51).map(|_| json!({"action": "title"})).collect();
    let steps = vec![
        browser("navigate", "", json!(format!("{site}/"))),
        browser("type", "#name", json!("Ada")),
        browser("click", "#go", Value::Null),
        browser("extract", "#greeting", Value::Null),
        browser("set_viewport", "", json!({"width": 800, "height": 600})),
        call("browser_screenshot", json!({})),
        call("browser_screenshot", json!({"format": "jpeg", "quality": 40})),
        call("browser_screenshot", json!({"full_page": true, "selector": "#go"})),
        browser("navigte", "", json!(format!("{site}/"))),
        browser("navigate", "", json!(format!("{site}/dialogs"))),
        // 10
        browser("click", "#confirm", Value::Null),
        browser("click", "dialog::accept", Value::Null),
        browser("extract", "#out", Value::Null),
        call(
            "browser_batch",
            json!({"steps": [{"action": "navigate", "payload": format!("{site}/about")}, {"action": "title"}, {"action": "extract", "selector": "#nope", "timeout": 300}, {"action": "url"}]}),
        ),
        call("browser_batch", json!({"steps": too_many})),
        browser("navigate", "", json!(format!("{site}/set-cookies"))),
        call("browser_context_export", json!({})),
        call("browser_session", json!({"op": "status"})),
        call("browser_session", json!({"op": "renew", "idle_timeout_ms": 120000})),
        call("browser", json!({"action": "click", "selector": 3})),
        // 20
        call("browser_nothing", json!({})),
        call("browser_session", json!({"op": "explode"})),
        browser("evaluate", "", json!("'x'.repeat(40000)")),
    ];
    let Some(report) = agent(TEST, http(&server, &token, steps)).await else { return };

    let tools: Vec<&str> = report["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        [
            "browser",
            "browser_batch",
            "browser_screenshot",
            "browser_context_export",
            "browser_context_import",
            "browser_session"
        ]
    );
    let description = report["tools"][0]["description"].as_str().unwrap();
    for action in browserpool_pool::ActionKind::ALL {
        assert!(description.contains(&format!("- {}", action.name())), "{} is described: {description}", action.name());
    }
    let schema = &report["tools"][0]["schema"]["properties"];
    for key in ["action", "selector", "payload", "timeout"] {
        assert!(schema.get(key).is_some(), "{key} in {schema}");
    }

    let s = report["steps"].as_array().unwrap();
    for step in &s[..5] {
        ok(step);
    }
    assert_eq!(text(&s[3]), "\"Hello, Ada\"", "typed, clicked and read in one browser");
    let png = &s[5]["content"][0];
    assert_eq!((png["type"].as_str(), png["mime"].as_str()), (Some("image"), Some("image/png")), "{png}");
    assert_eq!((png["width"].as_u64(), png["height"].as_u64()), (Some(800), Some(600)), "the viewport's size: {png}");
    assert_eq!(s[6]["content"][0]["mime"], "image/jpeg", "{}", s[6]);
    assert!(err(&s[7]).starts_with("INVALID_ARGUMENT: payload.full_page: conflicts with a selector"), "{}", s[7]);
    let unknown = err(&s[8]);
    assert!(unknown.starts_with("UNKNOWN_ACTION: ") && unknown.contains("did you mean: navigate"), "{unknown}");
    ok(&s[9]);
    let dialog = err(&s[10]);
    assert!(
        dialog.starts_with("DIALOG_OPEN: ") && dialog.contains("\"Proceed?\"") && dialog.contains("dialog::accept"),
        "{dialog}"
    );
    ok(&s[11]);
    assert_eq!(ok(&s[12]), "\"answer=true\"");

    // A batch: one line, then each step; a failed step makes the result an error, the rest ran.
    let batch = &s[13]["content"];
    assert_eq!(s[13]["is_error"], true, "{}", s[13]);
    assert_eq!(batch[0]["text"], "3 of 4 steps succeeded");
    assert_eq!(batch[2]["text"], "step 1: \"About\"");
    assert!(batch[3]["text"].as_str().unwrap().starts_with("step 2: ELEMENT_NOT_FOUND: "), "{batch}");
    assert_eq!(batch[4]["text"], format!("step 3: \"{site}/about\""));
    assert_eq!(err(&s[14]), "INVALID_ARGUMENT: steps: 51 exceeds the maximum of 50");

    // Export: the whole envelope, as the CLI writes it.
    let envelope: Value = serde_json::from_str(ok(&s[16])).unwrap();
    assert_eq!(envelope["origin"], site.as_str());
    let cookies: Vec<&str> =
        envelope["cookies"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(cookies.contains(&"session") && cookies.contains(&"user"), "{envelope}");
    let status = session_of(&s[17]);
    assert_eq!(status["state"], "READY");
    assert_eq!(status["tenant"], "default");
    assert_eq!(status["labels"]["mcp"], "true");
    assert!(status["cdp_url"].as_str().unwrap().contains(status["session_id"].as_str().unwrap()));
    let renewed = session_of(&s[18]);
    assert_eq!(renewed["session_id"], status["session_id"]);
    assert_eq!(err(&s[19]), "INVALID_ARGUMENT: selector: a string is required");
    assert!(s[20]["exception"].as_str().unwrap().contains("unknown tool \"browser_nothing\""), "{}", s[20]);
    assert!(err(&s[21]).starts_with("INVALID_ARGUMENT: op: \"explode\" is not status"), "{}", s[21]);
    // Text sized for a model: 40,002 characters (the string's JSON) cut at 32 KiB, the cut said.
    let long = ok(&s[22]);
    let (kept, said) = long.split_once('\n').unwrap();
    assert_eq!(kept.chars().count(), 32 * 1024, "{said}");
    assert_eq!(said, "[cut at 32768 of 40002 characters: narrow the selector, or extract a part of the page]");

    // The import round trip, in a second MCP session: the envelope applied, a changed one
    // refused.
    let mut tampered = envelope.clone();
    tampered["cookies"][0]["value"] = json!("forged");
    let steps = vec![
        browser("navigate", "", json!(format!("{site}/about"))),
        call("browser_context_import", json!({"envelope": envelope})),
        browser("navigate", "", json!(format!("{site}/echo-cookies"))),
        browser("extract", "body", Value::Null),
        call("browser_context_import", json!({"envelope": tampered})),
        call("browser_context_import", json!({"envelope": {"origin": 3}})),
    ];
    let Some(second) = agent(TEST, http(&server, &token, steps)).await else { return };
    let s = second["steps"].as_array().unwrap();
    let applied: Value = serde_json::from_str(ok(&s[1])).unwrap();
    assert_eq!(applied["applied_cookies"], 2, "{applied}");
    assert!(ok(&s[3]).contains("session=abc123"), "{}", s[3]);
    assert!(err(&s[4]).starts_with("INTEGRITY_MISMATCH: "), "{}", s[4]);
    assert!(err(&s[5]).starts_with("INVALID_ARGUMENT: envelope: "), "{}", s[5]);

    // Each MCP session leased one browser, released when the client ended the session; the
    // audit names the MCP session on each of its calls.
    let admin = server.admin().await;
    let ended = eventually("both agents' browsers to be released", Duration::from_secs(20), || async {
        let mcp = mcp_sessions(&admin).await;
        (mcp.len() == 2 && mcp.iter().all(|s| s.state != pb::SessionState::Ready as i32)).then_some(mcp)
    })
    .await;
    assert!(ended.iter().all(|s| s.subject == "agent"));
    let first = status["session_id"].as_str().unwrap();
    let calls = eventually("the agent's calls in the audit trail", Duration::from_secs(20), || async {
        let records = crate::helpers::action_records(&admin, first, "").await;
        let calls: Vec<_> =
            records.into_iter().filter(|r| r.rpc == "/browserpool.v1.Sessions/Act" && r.action.is_empty()).collect();
        (calls.len() >= 10).then_some(calls)
    })
    .await;
    assert!(calls.iter().all(|r| r.target.starts_with("mcp_session=r-")), "each call names its MCP session: {calls:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_tenants_and_tokens_hold_as_over_grpc_and_a_ci_job_shares_its_browser() {
    const TEST: &str = "mcp::scopes_tenants_and_tokens_hold_as_over_grpc_and_a_ci_job_shares_its_browser";
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let admin = server.admin().await;
    let other = pb::Tenant { id: "other".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(other) }).await.unwrap();

    // A CI job leases a session and opens a page; an agent of the same subject, with a read
    // token, binds to it by header: it reads the job's page, and may not click.
    let ci = server.client(&server.token("default", "ci", &["sessions:read", "sessions:write"]).await).await;
    let job = ci.acquire(30_000).await.unwrap();
    let nav = pb::Action {
        action: "navigate".into(),
        payload: Some(browserpool_client::from_json(&json!(format!("{site}/")))),
        ..Default::default()
    };
    assert!(ci.act(&job.session_id, nav).await.unwrap().ok);
    let read = server.token("default", "ci", &["sessions:read"]).await;
    let steps = vec![
        browser("extract", "#greeting", Value::Null),
        browser("click", "#go", Value::Null),
        call("browser_session", json!({"op": "status"})),
    ];
    let mut scenario = http(&server, &read, steps);
    scenario["headers"] = json!({"X-Browserpool-Session": job.session_id});
    let Some(report) = agent(TEST, scenario).await else { return };
    let s = report["steps"].as_array().unwrap();
    assert_eq!(ok(&s[0]), "\"Hello, nobody\"", "the job's page");
    let refused = err(&s[1]);
    assert!(refused.starts_with("PERMISSION_DENIED: ") && refused.contains("sessions:write"), "{refused}");
    assert_eq!(session_of(&s[2])["session_id"], job.session_id.as_str());
    // The agent's end leaves the job's session alone: it was bound, not leased.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ci.get(&job.session_id).await.unwrap().state, pb::SessionState::Ready as i32);

    // Another tenant's token: the job's session is NOT_FOUND, by header or by bind.
    let foreign = server.token("other", "ci", &["sessions:read", "sessions:write"]).await;
    let steps = vec![call("browser_session", json!({"op": "bind", "session_id": job.session_id}))];
    let Some(report) = agent(TEST, http(&server, &foreign, steps)).await else { return };
    assert!(err(&report["steps"][0]).starts_with("NOT_FOUND: "), "{}", report["steps"][0]);
    let mut scenario = http(&server, &foreign, vec![browser("title", "", Value::Null)]);
    scenario["headers"] = json!({"X-Browserpool-Session": job.session_id});
    let Some(report) = agent(TEST, scenario).await else { return };
    assert!(err(&report["steps"][0]).starts_with("NOT_FOUND: "), "{}", report["steps"][0]);
    ci.release(&job.session_id).await.unwrap();

    // A revoked token stops working mid-session within a second, as over gRPC.
    let issued = admin
        .admin()
        .issue_token(pb::IssueTokenRequest {
            tenant: "default".into(),
            subject: "agent".into(),
            scopes: vec!["sessions:read".into(), "sessions:write".into()],
            ttl_s: 600,
        })
        .await
        .unwrap()
        .into_inner();
    let steps = vec![browser("title", "", Value::Null), json!({"sleep": 2}), browser("title", "", Value::Null)];
    let Some(mut agent) = Agent::start(TEST, http(&server, &issued.token, steps)) else { return };
    ok(&agent.next().await);
    admin.admin().revoke_token(pb::RevokeTokenRequest { jti: issued.jti }).await.unwrap();
    agent.next().await;
    let after = agent.next().await;
    assert!(after["exception"].is_string(), "the revoked token is refused: {after}");
    drop(agent);
    eventually("the revoked token's refusal in the audit trail", Duration::from_secs(20), || async {
        let records = crate::helpers::action_records(&admin, "", "").await;
        records.iter().any(|r| r.rpc == "MCP /mcp" && r.code == "401").then_some(())
    })
    .await;

    // A bad token, over and over: 401, then 429 from the same budget as gRPC's and CDP's.
    let mut codes = Vec::new();
    for _ in 0..200 {
        let (code, _) = raw_initialize(&server, "Authorization: Bearer not-a-token\r\n").await;
        codes.push(code);
        if code == 429 {
            break;
        }
    }
    assert_eq!(codes[0], 401, "{codes:?}");
    assert_eq!(codes.last(), Some(&429), "a bad token's address is throttled: {codes:?}");
    server.stop().await;
}

/// POSTs an `initialize` with `auth` (a header line or nothing); the status and the answer.
async fn raw_initialize(server: &TestServer, auth: &str) -> (u16, String) {
    raw_post(server, auth, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#).await
}

/// POSTs `body` to /mcp with `headers` (header lines); the status and the answer.
async fn raw_post(server: &TestServer, headers: &str, body: &str) -> (u16, String) {
    raw_request(server, "POST", headers, body).await
}

/// Sends `method` /mcp with `headers` (header lines) and `body`; the status and the answer.
async fn raw_request(server: &TestServer, method: &str, headers: &str, body: &str) -> (u16, String) {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(server.http).await.unwrap();
    let req = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {}\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.http,
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    // The server may answer (and close) before reading a body it refuses.
    let _ = stream.write_all(body.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let code = answer.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_precise_answers_and_no_token_is_401_audited() {
    let server = TestServer::start_with(|args| args.max_html_bytes = 64 << 10).await;
    for auth in ["", "Authorization: Bearer not-a-token\r\n"] {
        let (code, answer) = raw_initialize(&server, auth).await;
        assert_eq!(code, 401, "{auth:?}: {answer}");
        assert!(answer.to_ascii_lowercase().contains("www-authenticate: bearer realm=\"browserpool\""), "{answer}");
    }
    let admin = server.admin().await;
    eventually("the refusal in the audit trail", Duration::from_secs(20), || async {
        let records = crate::helpers::action_records(&admin, "", "").await;
        records.iter().any(|r| r.rpc == "MCP /mcp" && r.outcome == "denied" && r.code == "401").then_some(())
    })
    .await;

    let token = server.token("default", "agent", &["sessions:read", "sessions:write"]).await;
    let auth = format!("Authorization: Bearer {token}\r\n");
    // Past twice the largest gRPC message (here 2 x (64 KiB + 1 MiB)): 413, the body unread.
    let huge =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"x":"{}"}}}}"#, "a".repeat(3 << 20));
    let (code, answer) = raw_post(&server, &auth, &huge).await;
    assert_eq!(code, 413, "{}", &answer[..answer.len().min(300)]);
    // Not JSON: refused, naming where it stopped parsing.
    let (code, answer) = raw_post(&server, &auth, "{not json").await;
    assert!(
        code == 415 && answer.contains("fail to deserialize request body") && answer.contains("column 2"),
        "{answer}"
    );
    // An MCP session of this replica that does not exist: 404 (start a new one).
    let unknown = format!("{auth}Mcp-Session-Id: r-0000.nope\r\nMcp-Protocol-Version: 2025-11-25\r\n");
    let (code, answer) = raw_post(&server, &unknown, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await;
    assert_eq!(code, 404, "{answer}");
    server.stop().await;
}

/// An MCP session's id is all its client sends: anyone else holding it (another tenant, or
/// another subject of the same one) gets 404, as for a session that does not exist, and
/// cannot end it (its DELETE would release the opener's browser).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_answers_only_the_tenant_and_subject_that_opened_it() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let other = pb::Tenant { id: "other-tenant".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(other) }).await.unwrap();
    let scopes = ["sessions:read", "sessions:write"];
    let auth = |token: String| format!("Authorization: Bearer {token}\r\n");
    let owner = auth(server.token("default", "agent", &scopes).await);
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (code, answer) = raw_post(&server, &owner, init).await;
    assert_eq!(code, 200, "{answer}");
    let id = answer
        .lines()
        .find_map(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:").then(|| l[15..].trim().to_string()))
        .unwrap_or_else(|| panic!("a session id: {answer}"));
    let in_session = |auth: &str| format!("{auth}Mcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-11-25\r\n");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(raw_post(&server, &in_session(&owner), initialized).await.0, 202);
    let eval = |n: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"browser","arguments":{{"action":"evaluate","payload":"6 * 7"}}}}}}"#
        )
    };
    let (code, answer) = raw_post(&server, &in_session(&owner), &eval(2)).await;
    assert!(code == 200 && answer.contains("42"), "{answer}");
    let live = |admin: browserpool_client::Client| async move {
        let mcp = mcp_sessions(&admin).await;
        mcp.iter().filter(|s| s.state == pb::SessionState::Ready as i32).count()
    };
    assert_eq!(live(admin.clone()).await, 1, "the opener's browser");

    let foreign = auth(server.token("other-tenant", "agent", &scopes).await);
    let neighbour = auth(server.token("default", "someone-else", &scopes).await);
    for (who, caller) in [("another tenant", &foreign), ("another subject", &neighbour)] {
        for (method, body) in [("POST", eval(3)), ("GET", String::new()), ("DELETE", String::new())] {
            let (code, answer) = raw_request(&server, method, &in_session(caller), &body).await;
            assert_eq!(code, 404, "{who} {method}: {answer}");
            assert!(answer.contains(&format!("no MCP session {id}: start a new one")), "{answer}");
        }
    }
    // Nothing of the opener's went: the same browser answers it.
    assert_eq!(live(admin.clone()).await, 1, "the opener's browser is still there");
    let (code, answer) = raw_post(&server, &in_session(&owner), &eval(4)).await;
    assert!(code == 200 && answer.contains("42"), "{answer}");
    eventually("the refusals in the audit trail", Duration::from_secs(20), || async {
        let records = crate::helpers::action_records(&admin, "", "").await;
        let refused = records.iter().filter(|r| r.rpc == "MCP /mcp" && r.outcome == "denied" && r.code == "404");
        (refused.count() >= 6).then_some(())
    })
    .await;
    // Its opener ends it: 204, and the browser goes.
    assert_eq!(raw_request(&server, "DELETE", &in_session(&owner), "").await.0, 204);
    eventually("the browser released", Duration::from_secs(10), || async {
        (live(admin.clone()).await == 0).then_some(())
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_agents_get_their_own_browsers_and_a_queued_one_hears_how_it_waits() {
    const TEST: &str = "mcp::parallel_agents_get_their_own_browsers_and_a_queued_one_hears_how_it_waits";
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let admin = server.admin().await;
    let tenant = pb::Tenant {
        id: "agents".into(),
        max_slots: 1,
        max_queue: 4,
        allow_private_networks: true,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();

    // Two agents of the default tenant at once: two browsers.
    let token = server.token("default", "agent", &["sessions:read", "sessions:write"]).await;
    let steps = || {
        vec![browser("navigate", "", json!(format!("{site}/about"))), call("browser_session", json!({"op": "status"}))]
    };
    let (a, b) = tokio::join!(agent(TEST, http(&server, &token, steps())), agent(TEST, http(&server, &token, steps())));
    let (Some(a), Some(b)) = (a, b) else { return };
    let (a, b) = (session_of(&a["steps"][1]), session_of(&b["steps"][1]));
    assert_ne!(a["session_id"], b["session_id"], "two MCP sessions, two browsers");

    // A tenant of one slot: the first agent holds it; the second waits, hearing progress,
    // and gets a browser as soon as the first ends its MCP session (its DELETE frees it).
    let token = server.token("agents", "agent", &["sessions:read", "sessions:write"]).await;
    let holder = vec![browser("title", "", Value::Null), json!({"sleep": 4})];
    let Some(mut first) = Agent::start(TEST, http(&server, &token, holder)) else { return };
    ok(&first.next().await);
    let mut waiter = http(&server, &token, vec![]);
    waiter["steps"] = json!([{"tool": "browser", "args": {"action": "title"}, "progress": true}]);
    let second = tokio::spawn(async move {
        let agent = Agent::start(TEST, waiter).unwrap();
        let report = agent.report().await;
        (report, Instant::now())
    });
    first.next().await;
    let first_done = first.report().await;
    let freed = Instant::now();
    assert_eq!(first_done["steps"].as_array().unwrap().len(), 2);
    let (report, served) = second.await.unwrap();
    let step = &report["steps"][0];
    ok(step);
    let progress: Vec<&str> = step["progress"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(!progress.is_empty(), "progress while queued: {step}");
    assert!(progress[0].starts_with("waiting for a browser of tenant agents, 1 of 1 in the queue: "), "{progress:?}");
    let waited = served.saturating_duration_since(freed);
    assert!(waited < Duration::from_secs(10), "served {waited:?} after the first agent ended");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_s_browser_ends_at_the_tenant_s_idle_timeout_and_the_next_call_leases_another() {
    const TEST: &str =
        "mcp::an_idle_agent_s_browser_ends_at_the_tenant_s_idle_timeout_and_the_next_call_leases_another";
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let tenant = pb::Tenant {
        id: "idle".into(),
        max_slots: 2,
        max_queue: 2,
        idle_timeout_ms: 2_000,
        allow_private_networks: true,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    let token = server.token("idle", "agent", &["sessions:read", "sessions:write"]).await;
    let steps = vec![
        call("browser_session", json!({"op": "status"})),
        browser("title", "", Value::Null),
        call("browser_session", json!({"op": "status"})),
        json!({"sleep": 5}),
        browser("title", "", Value::Null),
        browser("title", "", Value::Null),
        call("browser_session", json!({"op": "status"})),
    ];
    let Some(report) = agent(TEST, http(&server, &token, steps)).await else { return };
    let s = report["steps"].as_array().unwrap();
    assert!(ok(&s[0]).contains("no browser yet"), "{}", s[0]);
    let first = session_of(&s[2]);
    let ended = err(&s[4]);
    assert!(
        ended.contains(&format!(
            "session {} has ended: the next browser call leases a new browser",
            first["session_id"].as_str().unwrap()
        )),
        "{ended}"
    );
    ok(&s[5]);
    let second = session_of(&s[6]);
    assert_ne!(first["session_id"], second["session_id"]);
    let was = admin.get(first["session_id"].as_str().unwrap()).await.unwrap();
    assert_eq!(was.state, pb::SessionState::Expired as i32, "{was:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdio_bridge_carries_an_agent_and_says_what_the_server_refused() {
    const TEST: &str = "mcp::the_stdio_bridge_carries_an_agent_and_says_what_the_server_refused";
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let token = server.token("default", "agent", &["sessions:read", "sessions:write"]).await;
    let bin = env!("CARGO_BIN_EXE_browserpool");
    let url = format!("http://{}/mcp", server.http);

    // A bad token: the first request is answered with a JSON-RPC error naming the 401, on
    // stdout; stderr says it too.
    let mut bridge = tokio::process::Command::new(bin)
        .args(["mcp", "--url", &url, "--token", "not-a-token"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = bridge.stdin.take().unwrap();
    stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\nnot json\n").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(30), bridge.wait_with_output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("only JSON on stdout")).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["id"], 7);
    assert!(lines[0]["error"]["message"].as_str().unwrap().contains("401"), "{}", lines[0]);
    assert_eq!(lines[1]["error"]["code"], -32700, "{}", lines[1]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"), "{}", String::from_utf8_lossy(&out.stderr));

    // The Python SDK spawns the bridge as its server and drives a browser through it.
    let scenario = json!({
        "transport": "stdio",
        "command": bin,
        "args": ["mcp", "--url", url],
        "env": {"BROWSERPOOL_TOKEN": token},
        "steps": [
            browser("navigate", "", json!(format!("{site}/"))),
            browser("type", "#name", json!("Grace")),
            browser("click", "#go", Value::Null),
            browser("extract", "#greeting", Value::Null),
            call("browser_screenshot", json!({})),
        ],
    });
    let Some(report) = agent(TEST, scenario).await else { return };
    let s = report["steps"].as_array().unwrap();
    assert_eq!(ok(&s[3]), "\"Hello, Grace\"");
    assert_eq!(s[4]["content"][0]["mime"], "image/png", "{}", s[4]);
    assert!(s[4]["content"][0]["width"].as_u64().unwrap() > 100);
    // At the end of stdin the bridge ended the MCP session: its browser is released.
    let admin = server.admin().await;
    eventually("the bridged agent's browser to be released", Duration::from_secs(20), || async {
        let mcp = mcp_sessions(&admin).await;
        (mcp.len() == 1 && mcp[0].state != pb::SessionState::Ready as i32).then_some(())
    })
    .await;

    // --session binds the bridged agent to a session its subject leased over gRPC.
    let job = server.client(&token).await.acquire(30_000).await.unwrap();
    let scenario = json!({
        "transport": "stdio",
        "command": bin,
        "args": ["mcp", "--url", url, "--session", job.session_id],
        "env": {"BROWSERPOOL_TOKEN": token},
        "steps": [call("browser_session", json!({"op": "status"}))],
    });
    let Some(report) = agent(TEST, scenario).await else { return };
    assert_eq!(session_of(&report["steps"][0])["session_id"], job.session_id.as_str());
    server.stop().await;
}

/// A TCP front that sends each new connection to the next of `backends`, round robin; how
/// many each got.
async fn round_robin(backends: Vec<String>) -> (String, std::sync::Arc<Vec<std::sync::atomic::AtomicUsize>>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = std::sync::Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
    let counted = counts.clone();
    tokio::spawn(async move {
        for i in 0.. {
            let Ok((mut inbound, _)) = listener.accept().await else { return };
            counted[i % backends.len()].fetch_add(1, Ordering::Relaxed);
            let backend = backends[i % backends.len()].clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr.to_string(), counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_is_served_whichever_replica_its_requests_reach() {
    const TEST: &str = "mcp::an_mcp_session_is_served_whichever_replica_its_requests_reach";
    let first = BinaryServer::spawn().await;
    let second = BinaryServer::replica_of(&first);
    let site = fixture_site().await;
    let (front, reached) = round_robin(vec![first.http.clone(), second.http.clone()]).await;
    let steps = vec![
        browser("navigate", "", json!(format!("{site}/"))),
        browser("type", "#name", json!("Lin")),
        browser("click", "#go", Value::Null),
        browser("extract", "#greeting", Value::Null),
        call("browser_session", json!({"op": "status"})),
    ];
    // A new connection per request, so each lands on the next replica.
    let scenario =
        json!({"url": format!("http://{front}/mcp"), "token": first.token, "steps": steps, "fresh_connections": true});
    let Some(report) = agent(TEST, scenario).await else { return };
    let s = report["steps"].as_array().unwrap();
    assert_eq!(ok(&s[3]), "\"Hello, Lin\"", "one browser across both replicas");
    let held = session_of(&s[4]);
    let reached: Vec<usize> = reached.iter().map(|n| n.load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert!(reached.iter().all(|n| *n >= 3), "both replicas got requests of the one MCP session: {reached:?}");
    let client = first.client().await;
    eventually("the browser released through whichever replica got the DELETE", Duration::from_secs(20), || async {
        let s = client.get(held["session_id"].as_str().unwrap()).await.unwrap();
        (s.state != pb::SessionState::Ready as i32).then_some(())
    })
    .await;

    // An MCP session of a replica that is gone: 404, which tells a client to start again.
    let gone = "r-0123456789abcdef0123456789abcdef.0123";
    let mut stream = tokio::net::TcpStream::connect(&second.http).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nMcp-Session-Id: {gone}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        first.token,
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 404") && answer.contains("start a new MCP session"), "{answer}");
}

/// Runs tests/mcp/node/agent.mjs with `env`; its report.
async fn node_agent(env: &[(&str, &str)]) -> Value {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/node");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").exists()
            && dir.join("node_modules/@playwright/mcp").exists(),
        "the Node MCP clients are not installed in {}: run scripts/test.sh, or `npm ci` there",
        dir.display()
    );
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg("agent.mjs").current_dir(&dir).envs(env.iter().copied()).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("node finished").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "agent.mjs failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_drives_the_tools_and_ends_its_session() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let token = server.token("default", "ts-agent", &["sessions:read", "sessions:write"]).await;
    let url = format!("http://{}/mcp", server.http);
    let report = node_agent(&[("MODE", "browserpool"), ("URL", &url), ("TOKEN", &token), ("SITE", &site)]).await;
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
    assert_eq!(report["tools"].as_array().unwrap().len(), 6, "{report}");
    let calls = report["calls"].as_array().unwrap();
    assert!(calls[..5].iter().all(|c| c["isError"] == false), "{calls:?}");
    assert_eq!(calls[3]["content"][0]["text"], "\"Hello, Kay\"");
    assert_eq!(calls[4]["content"][0]["mimeType"], "image/jpeg");
    assert!(calls[4]["content"][0]["bytes"].as_u64().unwrap() > 1000);
    assert_eq!(calls[5]["isError"], true);
    assert!(calls[5]["content"][0]["text"].as_str().unwrap().contains("did you mean: click"), "{}", calls[5]);
    let admin = server.admin().await;
    eventually("the TypeScript agent's browser to be released", Duration::from_secs(20), || async {
        let mcp = mcp_sessions(&admin).await;
        (mcp.len() == 1 && mcp[0].state != pb::SessionState::Ready as i32 && mcp[0].subject == "ts-agent").then_some(())
    })
    .await;
    server.stop().await;
}

/// The compatibility row: users who prefer @playwright/mcp's tools attach it to a leased
/// session's cdp_url with the token as a header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playwright_mcp_drives_a_leased_session_through_its_cdp_url() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let token = server.token("default", "ci", &["sessions:read", "sessions:write"]).await;
    let client = server.client(&token).await;
    let session = client.acquire(30_000).await.unwrap();
    let cdp_url = session.cdp_url.split('?').next().unwrap().to_string();
    let report = node_agent(&[("MODE", "playwright"), ("CDP_URL", &cdp_url), ("TOKEN", &token), ("SITE", &site)]).await;
    let tools: Vec<&str> = report["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"browser_navigate") && tools.contains(&"browser_snapshot"), "{tools:?}");
    let calls = report["calls"].as_array().unwrap();
    assert!(calls.iter().all(|c| c["isError"] == false), "{calls:?}");
    let snapshot = calls[1]["content"][0]["text"].as_str().unwrap();
    assert!(snapshot.contains("Hello, nobody") && snapshot.contains("Greet"), "{snapshot}");
    // The page it opened is the session's: read back over gRPC.
    let title = pb::Action { action: "title".into(), ..Default::default() };
    let read = client.act(&session.session_id, title).await.unwrap();
    assert_eq!(browserpool_client::to_json(read.value.as_ref().unwrap()), json!("Greeter"));
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}
