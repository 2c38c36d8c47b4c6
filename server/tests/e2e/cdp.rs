//! The CDP proxy as its users meet it: Puppeteer and Playwright (from npm, pinned in
//! `server/tests/cdp/package.json`) through `cdp_url`, credentials checked before the upgrade,
//! a hostile client contained by the proxy and the egress policy, connections closed when
//! the session ends, limits, and the audit record of each connection.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::{self, Message};
use browserpool_client::{action, pb};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::helpers::{act, fixture_site, ok, TestServer};

/// Runs one of the Node scripts next to `package.json`; returns the JSON line it printed.
async fn node(script: &str, cdp_url: &str, token: Option<&str>, site: &str) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cdp");
    assert!(
        dir.join("node_modules/puppeteer-core").exists() && dir.join("node_modules/playwright-core").exists(),
        "the CDP clients are not installed in {}: run scripts/test.sh, or `npm ci` there",
        dir.display()
    );
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(script).current_dir(&dir).env("CDP_URL", cdp_url).env("SITE", site).kill_on_drop(true);
    if let Some(token) = token {
        cmd.env("TOKEN", token);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output()).await.expect("node finished").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script} failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{script}: {e}: {stdout}"))
}

/// The status code of a WebSocket upgrade request to the HTTP listener.
async fn upgrade_status(http: std::net::SocketAddr, path: &str, token: Option<&str>, upgrade: bool) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(http).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {http}\r\n");
    if upgrade {
        req.push_str("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n");
        req.push_str("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n");
    }
    if let Some(token) = token {
        req.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await.unwrap().unwrap();
        assert_eq!(n, 1, "connection closed before the response head: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    head.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn session_path(cdp_url: &str) -> String {
    cdp_url.split_once("/cdp/").map(|(_, rest)| format!("/cdp/{rest}")).unwrap()
}

fn without_ticket(cdp_url: &str) -> String {
    cdp_url.split('?').next().unwrap().to_string()
}

type Ws = async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>;

async fn connect(url: &str) -> Ws {
    async_tungstenite::tokio::connect_async(url).await.expect("cdp connection").0
}

/// Waits for the close frame; returns its code and reason.
async fn close_of(ws: &mut Ws, within: Duration) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next()).await.expect("closed in time");
        match msg {
            Some(Ok(Message::Close(Some(frame)))) => return (frame.code.into(), frame.reason.to_string()),
            Some(Ok(Message::Close(None))) | None => return (0, String::new()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("no close frame: {e}"),
        }
    }
}

async fn cdp_records(server: &TestServer, session: &str) -> Vec<pb::AuditRecord> {
    let req = pb::QueryAuditRequest { session_id: session.into(), limit: 100, ..Default::default() };
    let mut stream = server.admin().await.admin().query_audit(req).await.unwrap().into_inner();
    let mut records = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        if r.rpc.starts_with("CDP") {
            records.push(r);
        }
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puppeteer_and_playwright_drive_a_session_through_cdp_url() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let token = server.token("default", "ci", &["sessions:read", "sessions:write"]).await;
    let client = server.client(&token).await;
    let session = client.acquire(30_000).await.unwrap();
    let url = session.cdp_url.clone();
    let prefix = format!("ws://{}/cdp/{}?ticket=", server.http, session.session_id);
    assert!(url.starts_with(&prefix), "{url}");
    let ticket = &url[prefix.len()..];
    assert!(ticket.len() == 64 && ticket.bytes().all(|b| b.is_ascii_hexdigit()), "256-bit ticket: {ticket}");
    assert_eq!(client.get(&session.session_id).await.unwrap().cdp_url, url, "Get hands it to the owner too");

    // Puppeteer with the capability URL alone, then Playwright with the bare URL and a token.
    let seen = node("puppeteer_flow.mjs", &url, None, &site).await;
    assert_eq!(seen["heading"], "Hello, puppeteer", "{seen}");
    assert_eq!(seen["pngSignature"], "PNG", "{seen}");
    let seen = node("playwright_flow.mjs", &without_ticket(&url), Some(&token), &site).await;
    assert_eq!(seen["heading"], "Hello, playwright", "{seen}");
    assert_eq!(seen["pngSignature"], "PNG", "{seen}");

    // Both pages are the session's tabs, and gRPC actions drive them.
    let tabs = ok(&act(&client, &session.session_id, action("list_tabs", "", json!(null))).await);
    let on_site = tabs.as_array().unwrap().iter().filter(|t| t["url"].as_str().unwrap().starts_with(&site)).count();
    assert_eq!(on_site, 2, "{tabs}");
    let switched = act(&client, &session.session_id, action("switch_tab", "", json!(1))).await;
    ok(&switched);
    let heading = ok(&act(&client, &session.session_id, action("extract", "#greeting", json!(null))).await);
    assert_eq!(heading, json!("Hello, puppeteer"));

    // One record per connection: who, frames, nothing refused; never the ticket or token.
    let records = cdp_records(&server, &session.session_id).await;
    assert_eq!(records.len(), 2, "{records:?}");
    for r in &records {
        assert_eq!((r.tenant.as_str(), r.outcome.as_str()), ("default", "ok"), "{r:?}");
        assert!(r.target.starts_with("frames in ") && r.target.ends_with("refused: none"), "{r:?}");
        let text = format!("{r:?}");
        assert!(!text.contains(ticket) && !text.contains(&token), "a secret reached the audit trail: {text}");
    }
    assert!(records.iter().any(|r| r.subject == "ci (ticket)"), "the ticket connection names its session's subject");
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdp_credentials_are_checked_before_the_upgrade() {
    let server = TestServer::start().await;
    let token = server.token("default", "ci", &["sessions:read", "sessions:write"]).await;
    let read_only = server.token("default", "ci", &["sessions:read"]).await;
    let admin = server.admin().await;
    let other = pb::PutTenantRequest {
        tenant: Some(pb::Tenant { id: "other".into(), max_slots: 1, max_queue: 1, ..Default::default() }),
    };
    admin.admin().put_tenant(other).await.unwrap();
    let foreign = server.token("other", "ci", &["sessions:read", "sessions:write"]).await;
    let session = server.client(&token).await.acquire(30_000).await.unwrap();
    let path = session_path(&session.cdp_url);
    let bare = without_ticket(&path);
    let http = server.http;

    assert_eq!(upgrade_status(http, &bare, None, true).await, 401, "no credentials");
    assert_eq!(upgrade_status(http, &bare, Some("not.a.jwt"), true).await, 401, "a bad token");
    assert_eq!(upgrade_status(http, &bare, Some(&foreign), true).await, 404, "another tenant's token: as unknown");
    assert_eq!(upgrade_status(http, "/cdp/s-unknown", Some(&token), true).await, 404, "an unknown session");
    assert_eq!(
        upgrade_status(http, &format!("{bare}?ticket={}", "0".repeat(64)), None, true).await,
        404,
        "wrong ticket"
    );
    assert_eq!(upgrade_status(http, &bare, Some(&read_only), true).await, 403, "no sessions:write");
    assert_eq!(upgrade_status(http, &path, None, false).await, 400, "not an upgrade");
    assert_eq!(upgrade_status(http, &path, None, true).await, 101, "the ticket");
    assert_eq!(upgrade_status(http, &bare, Some(&token), true).await, 101, "the owner's token");

    // Refusals are audited as denied, naming the session, never the ticket.
    let records = cdp_records(&server, &session.session_id).await;
    let denied: Vec<&str> = records.iter().filter(|r| r.outcome == "denied").map(|r| r.code.as_str()).collect();
    assert!(denied.contains(&"401") && denied.contains(&"404") && denied.contains(&"403"), "{denied:?}");
    server.stop().await;
}

/// A fixture site that counts every request it gets.
async fn counting_site() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            axum::response::Html("<title>Reached</title>")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_cdp_client_is_contained_and_recorded() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let locked = pb::PutTenantRequest {
        tenant: Some(pb::Tenant { id: "locked".into(), max_slots: 1, max_queue: 1, ..Default::default() }),
    };
    admin.admin().put_tenant(locked).await.unwrap();
    let token = server.token("locked", "ci", &["sessions:read", "sessions:write"]).await;
    let client = server.client(&token).await;
    let session = client.acquire(30_000).await.unwrap();
    let (site, hits) = counting_site().await;

    let seen = node("attack.mjs", &session.cdp_url, None, &site).await;
    let refused = |key: &str, why: &str| {
        let got = seen[key].as_str().unwrap_or_default();
        assert!(got.starts_with("error:") && got.contains(why), "{key}: {got}");
    };
    refused("goto", "blocked by policy");
    refused("gotoAfterFetchDisable", "blocked by policy");
    refused("fetchFromPage", "Failed to fetch");
    refused("createTarget", "blocked by policy");
    refused("proxyContext", "its own proxy");
    refused("fileInput", "file system");
    refused("navigateFile", "scheme `file`");
    refused("browserClose", "release the session instead");
    assert_eq!(seen["fetchDisable"], "ok", "a client may drop its own interception");
    assert_eq!(seen["stillThere"], "ok", "the browser survived Browser.close");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the loopback fixture got a request");
    let state = pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap();
    assert_eq!(state, pb::SessionState::Ready);

    let records = cdp_records(&server, &session.session_id).await;
    let record = records.iter().find(|r| r.outcome == "ok").expect("the connection's record");
    for method in ["Browser.close", "DOM.setFileInputFiles", "Page.navigate", "Target.createBrowserContext"] {
        assert!(record.target.contains(method), "{method} not in {record:?}");
    }
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_closes_its_cdp_connections_with_a_reason() {
    let server = TestServer::start_with(|a| a.cdp_max_clients = 2).await;
    let client = server.admin().await;

    // Release: every connection gets a close frame saying so, at once.
    let session = client.acquire(30_000).await.unwrap();
    let mut first = connect(&session.cdp_url).await;
    let mut second = connect(&session.cdp_url).await;
    let over = async_tungstenite::tokio::connect_async(session.cdp_url.as_str()).await;
    match over {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 429),
        other => panic!("a third connection over the cap of 2: {:?}", other.map(|_| ())),
    }
    let released = Instant::now();
    client.release(&session.session_id).await.unwrap();
    for ws in [&mut first, &mut second] {
        let (code, reason) = close_of(ws, Duration::from_secs(5)).await;
        assert_eq!(code, 1001);
        assert!(reason.contains("CLOSED") && reason.contains("released"), "{reason}");
    }
    println!("release -> both CDP connections closed in {:?}", released.elapsed());
    assert!(released.elapsed() < Duration::from_secs(1), "{:?}", released.elapsed());

    // A crash closes them too, saying so.
    let session = client.acquire(30_000).await.unwrap();
    let mut ws = connect(&session.cdp_url).await;
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let pid = status.workers.iter().find(|w| w.session_id == session.session_id).unwrap().pid as i32;
    // SAFETY: the worker's browser, started by this test's server.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let (code, reason) = close_of(&mut ws, Duration::from_secs(3)).await;
    assert!(code == 1001 && reason.contains("CRASHED"), "{code} {reason}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdp_traffic_is_activity_and_a_client_may_come_back() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let req = pb::AcquireRequest { wait_ms: 30_000, idle_timeout_ms: 1_500, ..Default::default() };
    let session = client.acquire_with(req).await.unwrap();
    let mut ws = connect(&session.cdp_url).await;
    // 3 s of traffic, twice the idle timeout.
    for id in 0..10 {
        ws.send(Message::text(json!({"id": id, "method": "Browser.getVersion"}).to_string())).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
        let answer: Value = serde_json::from_str(answer.to_text().unwrap()).unwrap();
        assert_eq!(answer["id"], id);
        assert!(answer["result"]["product"].as_str().unwrap().contains("Chrome"), "{answer}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let state = pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap();
    assert_eq!(state, pb::SessionState::Ready, "CDP traffic kept the session alive");
    // Gone and back: the session lives on, and the same URL attaches again.
    ws.close(None).await.unwrap();
    let mut again = connect(&session.cdp_url).await;
    again.send(Message::text(json!({"id": 1, "method": "Target.getTargets"}).to_string())).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), again.next()).await.unwrap().unwrap().unwrap();
    assert!(answer.to_text().unwrap().contains("targetInfos"), "{answer}");
    drop(again);
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_over_the_size_cap_close_the_connection_with_a_reason() {
    let server = TestServer::start_with(|a| a.cdp_max_message = 64 << 10).await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();

    // From the client: a message over the cap.
    let mut ws = connect(&session.cdp_url).await;
    let huge = json!({"id": 1, "method": "Runtime.evaluate", "params": {"expression": "'x'".repeat(40_000)}});
    let _ = ws.send(Message::text(huge.to_string())).await;
    let (code, reason) = close_of(&mut ws, Duration::from_secs(5)).await;
    assert_eq!(code, 1009, "{reason}");

    // From the browser: an answer over the cap.
    let mut ws = connect(&session.cdp_url).await;
    let target = json!({"id": 1, "method": "Target.getTargets"}).to_string();
    ws.send(Message::text(target)).await.unwrap();
    let targets: Value = serde_json::from_str(
        tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap().to_text().unwrap(),
    )
    .unwrap();
    let page = targets["result"]["targetInfos"].as_array().unwrap().iter().find(|t| t["type"] == "page").unwrap()
        ["targetId"]
        .clone();
    let attach = json!({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": page, "flatten": true}});
    ws.send(Message::text(attach.to_string())).await.unwrap();
    let session_id = loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
        let v: Value = serde_json::from_str(msg.to_text().unwrap()).unwrap();
        if v["id"] == 2 {
            break v["result"]["sessionId"].clone();
        }
    };
    let big = json!({"id": 3, "sessionId": session_id, "method": "Runtime.evaluate", "params": {"expression": "'y'.repeat(200000)", "returnByValue": true}});
    ws.send(Message::text(big.to_string())).await.unwrap();
    let (code, reason) = close_of(&mut ws, Duration::from_secs(10)).await;
    assert_eq!(code, 1009, "{reason}");
    assert!(reason.contains("--cdp-max-message"), "{reason}");
    // The session is unharmed.
    ok(&act(&client, &session.session_id, action("evaluate", "", "1 + 1")).await);
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}
