//! MCP at `/mcp`, driven by the official Python SDK (PyPI `mcp`, installed by scripts/test.sh)
//! over Streamable HTTP: the `browser` tool from the action catalog, one browser for the MCP
//! session (typing then reading it back), a screenshot as an image, an unknown action with
//! did-you-mean, a `confirm()` surfaced and answered, the browser released when the client
//! ends its session; no token is 401 with `WWW-Authenticate`.

use std::time::Duration;

use browserpool_client::pb;
use serde_json::Value;

use crate::helpers::{eventually, fixture_site, skip, TestServer};

/// Runs tests/mcp/agent.py against `url` with `token`; its report.
async fn agent(test: &str, url: &str, token: &str, site: &str) -> Option<Value> {
    let Ok(python) = std::env::var("BROWSERPOOL_TEST_MCP_PYTHON") else {
        skip(test, "BROWSERPOOL_TEST_MCP_PYTHON is not set (scripts/test.sh installs the MCP SDK and sets it)");
        return None;
    };
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/agent.py");
    let run = tokio::process::Command::new(python)
        .arg(script)
        .env("URL", url)
        .env("TOKEN", token)
        .env("SITE", site)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run).await.expect("the agent finished").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "agent.py failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap())
}

fn text(call: &Value) -> &str {
    call["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_drives_one_browser_through_the_browser_tool() {
    const TEST: &str = "mcp::an_agent_drives_one_browser_through_the_browser_tool";
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let url = format!("http://{}/mcp", server.http);
    let token = server.token("default", "agent", &["sessions:read", "sessions:write"]).await;
    let Some(report) = agent(TEST, &url, &token, &site).await else { return };

    let tools = report["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["name"], "browser");
    let description = tools[0]["description"].as_str().unwrap();
    for action in browserpool_pool::ActionKind::ALL {
        assert!(description.contains(action.name()), "{} is described: {description}", action.name());
    }
    let schema = &tools[0]["schema"]["properties"];
    for key in ["action", "selector", "payload", "timeout"] {
        assert!(schema.get(key).is_some(), "{key} in {schema}");
    }

    let calls = report["calls"].as_array().unwrap();
    for (i, call) in calls.iter().enumerate().take(5) {
        assert_eq!(call["is_error"], false, "call {i}: {call}");
    }
    assert_eq!(text(&calls[3]), "\"Hello, Ada\"", "typed, clicked and read in one browser");
    let shot = &calls[4]["content"][0];
    assert_eq!((shot["type"].as_str(), shot["mime"].as_str()), (Some("image"), Some("image/png")), "{shot}");
    assert!(shot["width"].as_u64().unwrap() > 100 && shot["height"].as_u64().unwrap() > 100, "{shot}");
    assert_eq!(calls[5]["is_error"], true);
    assert!(
        text(&calls[5]).starts_with("UNKNOWN_ACTION: ") && text(&calls[5]).contains("did you mean: navigate"),
        "{}",
        text(&calls[5])
    );
    assert_eq!(calls[7]["is_error"], true, "the confirm() is surfaced: {}", calls[7]);
    assert!(
        text(&calls[7]).contains("\"Proceed?\"") && text(&calls[7]).contains("dialog::accept"),
        "{}",
        text(&calls[7])
    );
    assert_eq!(calls[8]["is_error"], false, "{}", calls[8]);
    assert_eq!(text(&calls[9]), "\"answer=true\"");

    // One session was leased for the agent, and its end (the client's DELETE) released it.
    let admin = server.admin().await;
    let ended = eventually("the agent's browser to be released", Duration::from_secs(20), || async {
        let listed = admin.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner();
        let mcp: Vec<_> =
            listed.sessions.into_iter().filter(|s| s.labels.get("mcp").map(String::as_str) == Some("true")).collect();
        (mcp.len() == 1 && mcp[0].state != pb::SessionState::Ready as i32).then_some(mcp)
    })
    .await;
    assert_eq!(ended[0].subject, "agent");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_without_a_valid_token_is_401_with_a_challenge() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start().await;
    for auth in ["", "Authorization: Bearer not-a-token\r\n"] {
        let mut stream = tokio::net::TcpStream::connect(server.http).await.unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            server.http,
            body.len()
        );
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{auth:?}: {answer}");
        assert!(answer.to_ascii_lowercase().contains("www-authenticate: bearer realm=\"browserpool\""), "{answer}");
    }
    server.stop().await;
}
