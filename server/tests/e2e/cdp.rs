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
pub async fn node(script: &str, cdp_url: &str, token: Option<&str>, site: &str) -> Value {
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

/// Runs a Node script of `tests/cdp` with `env`; its last line of output, as JSON.
pub async fn node_env(script: &str, env: &[(&str, &str)]) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cdp");
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(script).current_dir(&dir).envs(env.iter().copied()).kill_on_drop(true);
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

pub(crate) fn without_ticket(cdp_url: &str) -> String {
    cdp_url.split('?').next().unwrap().to_string()
}

pub(crate) type Ws = async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>;

pub(crate) async fn connect(url: &str) -> Ws {
    async_tungstenite::tokio::connect_async(url).await.expect("cdp connection").0
}

/// Sends a command and returns its answer, error or not (events in between are skipped).
pub(crate) async fn reply_to(ws: &mut Ws, msg: Value) -> Value {
    let id = msg["id"].clone();
    ws.send(Message::text(msg.to_string())).await.unwrap();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), ws.next()).await;
        let frame = next.unwrap_or_else(|_| panic!("no answer to {} within 10 s", msg["method"])).unwrap().unwrap();
        let v: Value = serde_json::from_str(frame.to_text().unwrap()).unwrap();
        if v["id"] == id {
            return v;
        }
    }
}

/// [`reply_to`], whose answer must not be an error.
pub(crate) async fn answer_to(ws: &mut Ws, msg: Value) -> Value {
    let v = reply_to(ws, msg).await;
    assert!(v.get("error").is_none(), "{v}");
    v
}

/// Waits for the close frame; returns its code and reason.
pub(crate) async fn close_of(ws: &mut Ws, within: Duration) -> (u16, String) {
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

/// The CDP records of a session once `done` holds for them (records are written off the hot
/// path, so a query right after the fact may miss the last ones); panics after 10 s.
async fn cdp_records_when(
    server: &TestServer,
    session: &str,
    done: impl Fn(&[pb::AuditRecord]) -> bool,
) -> Vec<pb::AuditRecord> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records = cdp_records(server, session).await;
        if done(&records) {
            return records;
        }
        assert!(Instant::now() < deadline, "the expected CDP records never came: {records:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
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
    let records = cdp_records_when(&server, &session.session_id, |r| r.len() >= 2).await;
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
    let denied_codes = |records: &[pb::AuditRecord]| -> Vec<String> {
        records.iter().filter(|r| r.outcome == "denied").map(|r| r.code.clone()).collect()
    };
    // 2 x 401 (callers without credentials: the first recorded, the second counted into the
    // window's closing record), 3 x 404 (one names no live session, so it is not among this
    // session's), 1 x 403.
    let records = cdp_records_when(&server, &session.session_id, |r| denied_codes(r).len() >= 4).await;
    let denied = denied_codes(&records);
    for code in ["401", "404", "403"] {
        assert!(denied.iter().any(|d| d == code), "{code} not in {denied:?}");
    }
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
    let addr = crate::helpers::serve_loopback(app).await;
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
    refused("fileInput", "only the session's own files");
    refused("navigateFile", "scheme `file`");
    refused("browserClose", "release the session instead");
    assert_eq!(seen["fetchDisable"], "ok", "a client may drop its own interception");
    assert_eq!(seen["stillThere"], "ok", "the browser survived Browser.close");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the loopback fixture got a request");
    let state = pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap();
    assert_eq!(state, pb::SessionState::Ready);

    let records = cdp_records_when(&server, &session.session_id, |r| r.iter().any(|r| r.outcome == "ok")).await;
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
    eprintln!("release -> both CDP connections closed in {:?}", released.elapsed());
    assert!(released.elapsed() < Duration::from_secs(1), "{:?}", released.elapsed());

    // KillSession and the TTL close them too, each saying so.
    let session = client.acquire(30_000).await.unwrap();
    let mut ws = connect(&session.cdp_url).await;
    let kill = pb::KillSessionRequest { session_id: session.session_id.clone(), reason: "runaway".into() };
    client.admin().kill_session(kill).await.unwrap();
    let (code, reason) = close_of(&mut ws, Duration::from_secs(3)).await;
    assert!(code == 1001 && reason.contains("KILLED"), "{code} {reason}");
    let req = pb::AcquireRequest { wait_ms: 30_000, ttl_ms: 1_500, ..Default::default() };
    let session = client.acquire_with(req).await.unwrap();
    let mut ws = connect(&session.cdp_url).await;
    let (code, reason) = close_of(&mut ws, Duration::from_secs(5)).await;
    assert!(code == 1001 && reason.contains("EXPIRED"), "{code} {reason}");

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
    // CDP traffic touches the session at most once a second: an idle timeout of 2 s leaves a
    // second of margin (1.5 s left half a second, which a loaded host once took).
    let req = pb::AcquireRequest { wait_ms: 30_000, idle_timeout_ms: 2_000, ..Default::default() };
    let session = client.acquire_with(req).await.unwrap();
    let mut ws = connect(&session.cdp_url).await;
    // 4 s of traffic, twice the idle timeout: the session must not expire meanwhile, and only
    // traffic spread over that long can show it does not.
    for id in 0..14 {
        let answer = answer_to(&mut ws, json!({"id": id, "method": "Browser.getVersion"})).await;
        assert!(answer["result"]["product"].as_str().unwrap().contains("Chrome"), "{answer}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let state = pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap();
    assert_eq!(state, pb::SessionState::Ready, "CDP traffic kept the session alive");
    // Gone and back: the session lives on, and the same URL attaches again.
    ws.close(None).await.unwrap();
    let mut again = connect(&session.cdp_url).await;
    let answer = answer_to(&mut again, json!({"id": 1, "method": "Target.getTargets"})).await;
    assert!(answer["result"]["targetInfos"].is_array(), "{answer}");
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

    // From the browser: an answer over the cap, on a page of the client's own.
    let mut ws = connect(&session.cdp_url).await;
    let created =
        answer_to(&mut ws, json!({"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}})).await;
    let page = created["result"]["targetId"].clone();
    let attach = json!({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": page, "flatten": true}});
    let attached = answer_to(&mut ws, attach).await;
    let session_id = attached["result"]["sessionId"].clone();
    assert!(session_id.is_string(), "{attached}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_metrics_public_url_downloads_and_actions_beside_a_client() {
    let server = TestServer::start_with(|a| {
        a.cdp_max_connections = 1;
        a.public_url = Some("wss://pool.example.test/bp".into());
    })
    .await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let id = session.session_id.clone();
    let prefix = format!("wss://pool.example.test/bp/cdp/{id}?ticket=");
    assert!(session.cdp_url.starts_with(&prefix), "{}", session.cdp_url);
    let local = format!("ws://{}/cdp/{id}?ticket={}", server.http, &session.cdp_url[prefix.len()..]);

    // One connection fills the server's cap; the next is refused with 503.
    let mut ws = connect(&local).await;
    match async_tungstenite::tokio::connect_async(local.as_str()).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 503),
        other => panic!("a second connection over the server's cap of 1: {:?}", other.map(|_| ())),
    }
    let metrics = crate::lifecycle::http_get(&format!("http://{}/metrics", server.http)).await;
    assert!(metrics.contains("browserpool_cdp_connections 1"), "{metrics}");

    // A download the client points at a path of its choosing lands in the session's own dir.
    let elsewhere = tempfile::tempdir().unwrap();
    let set = json!({"id": 1, "method": "Browser.setDownloadBehavior",
        "params": {"behavior": "allow", "downloadPath": elsewhere.path(), "eventsEnabled": true}});
    answer_to(&mut ws, set).await;
    // gRPC actions run while the client is attached.
    let page = r#"<a id="d" href="data:text/plain,hello" download="report.txt">get</a>"#;
    ok(&act(&client, &id, action("load_html", "", page)).await);
    ok(&act(&client, &id, action("click", "#d", json!(null))).await);
    // It is one of the session's files (in either isolation mode).
    crate::helpers::eventually("the download among the session's files", Duration::from_secs(10), || async {
        // Chromium reserves the name with an empty file, then moves the download over it.
        client.list_files(&id).await.unwrap().into_iter().find(|f| f.name == "report.txt" && f.size > 0)
    })
    .await;
    assert_eq!(client.get_file(&id, "report.txt").await.unwrap().1, b"hello");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0, "the client's path stayed empty");
    drop(ws);
    client.release(&id).await.unwrap();
    let metrics = crate::lifecycle::http_get(&format!("http://{}/metrics", server.http)).await;
    assert!(metrics.contains("browserpool_cdp_frames_total{direction=\"to_browser\"}"), "{metrics}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_holds_the_browser_back_and_loses_nothing() {
    let server = TestServer::start_with(|a| a.cdp_max_message = 1 << 20).await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let mut ws = connect(&session.cdp_url).await;
    let created =
        answer_to(&mut ws, json!({"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}})).await;
    let attach = json!({"id": 2, "method": "Target.attachToTarget",
        "params": {"targetId": created["result"]["targetId"], "flatten": true}});
    let session_id = answer_to(&mut ws, attach).await["result"]["sessionId"].clone();
    let relayed = || async {
        let metrics = crate::lifecycle::http_get(&format!("http://{}/metrics", server.http)).await;
        let line =
            metrics.lines().find(|l| l.starts_with("browserpool_cdp_frames_total{direction=\"to_client\"}")).unwrap();
        line.rsplit(' ').next().unwrap().parse::<u64>().unwrap()
    };
    let before = relayed().await;

    // 40 answers of 0.9 MB each (36 MB) asked for, none read for 3 s.
    const ASKED: u64 = 40;
    for id in 0..ASKED {
        let msg = json!({"id": 100 + id, "sessionId": session_id, "method": "Runtime.evaluate",
            "params": {"expression": "'z'.repeat(900000)", "returnByValue": true}});
        ws.send(Message::text(msg.to_string())).await.unwrap();
    }
    // What the proxy does not read cannot be waited for: a 3 s window shows it stopped reading.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let while_stalled = relayed().await - before;
    eprintln!("a client not reading: {while_stalled} of {ASKED} answers of 0.9 MB left the browser");
    assert!(while_stalled < ASKED * 3 / 4, "the proxy kept reading for a client that does not: {while_stalled}");

    // Reading again, every answer arrives, whole.
    let mut answered = 0;
    while answered < ASKED {
        let frame = tokio::time::timeout(Duration::from_secs(20), ws.next()).await.unwrap().unwrap().unwrap();
        let v: Value = serde_json::from_str(frame.to_text().unwrap()).unwrap();
        if v["id"].as_u64().is_some_and(|id| id >= 100) {
            assert_eq!(v["result"]["result"]["value"].as_str().map(str::len), Some(900_000), "id {}", v["id"]);
            answered += 1;
        }
    }
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_and_tokens_never_reach_the_log() {
    let mut server = crate::helpers::BinaryServer::spawn().await;
    let client = server.client().await;
    let session = client.acquire(30_000).await.unwrap();
    let ticket = session.cdp_url.rsplit("ticket=").next().unwrap().to_string();
    assert_eq!(ticket.len(), 64);
    // Attached by ticket and by token, refused once with a wrong ticket.
    let mut ws = connect(&session.cdp_url).await;
    answer_to(&mut ws, json!({"id": 1, "method": "Browser.getVersion"})).await;
    drop(ws);
    let wrong = format!("{}?ticket={}", without_ticket(&session.cdp_url), "f".repeat(64));
    assert!(async_tungstenite::tokio::connect_async(wrong.as_str()).await.is_err());
    client.release(&session.session_id).await.unwrap();
    let token = server.token.clone();
    let (status, log) = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(log.iter().any(|l| l.contains("cdp client attached")), "the attach is logged");
    for line in &log {
        assert!(!line.contains(&ticket) && !line.contains(&"f".repeat(64)), "a ticket in the log: {line}");
        assert!(!line.contains(&token) && !line.contains("eyJ"), "a token in the log: {line}");
    }
}
