//! Live view over real HTTP and websockets: a person in a Chromium of their own opens a CONTROL
//! link, sees the session's page and drives it; a VIEW link shows frames and takes no input;
//! bad, revoked and ended links get nothing.

use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use browserpool_client::{action, pb, Client};
use futures::StreamExt;

use crate::files::http_fetch;
use crate::helpers::{act, eventually, ok, TestServer};

/// The session's page: a red block, a button, an input, a button that asks confirm() and one
/// that animates the block through 40 colours, ending blue, at known places of 1280x720.
const PAGE: &str = r#"<body style="margin:0;background:#fff">
<div id="k" style="position:absolute;left:0;top:0;width:400px;height:300px;background:rgb(255,0,0)"></div>
<button id="b" style="position:absolute;left:500px;top:50px;width:200px;height:100px;font-size:30px"
  onclick="this.textContent='clicked'">press</button>
<input id="t" style="position:absolute;left:500px;top:200px;width:300px;height:50px;font-size:30px">
<button id="c" style="position:absolute;left:500px;top:300px;width:200px;height:40px"
  onclick="this.textContent = confirm('sure?') ? 'yes' : 'no'">ask</button>
<button style="position:absolute;left:900px;top:400px;width:200px;height:100px" onclick="let n = 0;
  (function f() { const blue = ++n >= 40; document.getElementById('k').style.background = blue
    ? 'rgb(0,0,255)' : 'hsl(' + (n * 37 % 360) + ',100%,50%)'; if (!blue) requestAnimationFrame(f); })()">burst</button>
</body>"#;

async fn session(client: &Client) -> String {
    let req = pb::AcquireRequest {
        wait_ms: 30_000,
        viewport: Some(pb::Viewport { width: 1280, height: 720, ..Default::default() }),
        ..Default::default()
    };
    let id = client.acquire_with(req).await.unwrap().session_id;
    ok(&act(client, &id, action("load_html", "", PAGE)).await);
    id
}

async fn link(client: &Client, id: &str, mode: pb::LiveViewMode, ttl_ms: u32) -> pb::LiveViewLink {
    let req = pb::LiveViewRequest { session_id: id.into(), mode: mode as i32, ttl_ms };
    client.sessions().live_view(req).await.unwrap().into_inner()
}

fn ws_url(link: &str) -> String {
    format!("{}/ws", link.replacen("http://", "ws://", 1))
}

type Socket = async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>;

/// The next message that is neither a frame nor a status (tabs, dialog), and how many frames
/// came before it.
async fn next_text(socket: &mut Socket, within: Duration) -> (Option<Message>, usize) {
    let mut frames = 0;
    let deadline = Instant::now() + within;
    let status = |text: &str| {
        let kind = serde_json::from_str::<serde_json::Value>(text).map(|v| v["type"].clone()).unwrap_or_default();
        kind == "tabs" || kind == "dialog"
    };
    loop {
        match tokio::time::timeout_at(deadline.into(), socket.next()).await {
            Ok(Some(Ok(Message::Binary(_)))) => frames += 1,
            Ok(Some(Ok(Message::Text(t)))) if status(&t) => {}
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
            Ok(Some(Ok(other))) => return (Some(other), frames),
            Ok(Some(Err(_)) | None) | Err(_) => return (None, frames),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sees_the_page_and_drives_it_through_a_control_link() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = session(&client).await;
    let control = link(&client, &id, pb::LiveViewMode::Control, 0).await;
    assert!(control.url.starts_with(&format!("http://{}/live/{id}/", server.http)), "{}", control.url);
    assert_eq!(control.mode, pb::LiveViewMode::Control as i32);
    let left = control.expires_at.unwrap().seconds * 1000 - crate::helpers::now_ms() as i64;
    assert!((14 * 60_000..=15 * 60_000).contains(&left), "the default TTL is 15 minutes: {left} ms");

    let seen = crate::cdp::node_env("live_view.mjs", &[("LIVE_URL", control.url.as_str())]).await;
    assert_eq!(seen["mode"], "control", "{seen}");
    let rgb: Vec<u64> = seen["rgb"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(rgb[0] > 200 && rgb[1] < 60 && rgb[2] < 60, "the session's red block is not in the viewer: {seen}");
    eprintln!("the viewer showed the burst's last picture {} ms after the click", seen["settledMs"]);
    let settled: Vec<u64> = seen["settled"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(
        settled[0] < 60 && settled[1] < 60 && settled[2] > 200,
        "after a burst of animation the viewer shows the page's last picture (a blue block): {seen}"
    );
    let done = ok(&act(
        &client,
        &id,
        action(
            "evaluate",
            "",
            "['b', 't', 'c'].map(id => document.getElementById(id).value || document.getElementById(id).textContent)",
        ),
    )
    .await);
    assert_eq!(
        done,
        serde_json::json!(["clicked", "hi ther", "yes"]),
        "the click, the typing and the answer reached the page"
    );
    assert!(seen["dialogText"].as_str().unwrap().contains("sure?"), "{seen}");

    // The viewer's input was audited as a count, never its text.
    let records = eventually("the viewer's audit record", Duration::from_secs(10), || async {
        let all = crate::helpers::action_records(&client, &id, "").await;
        let live: Vec<_> = all.into_iter().filter(|r| r.rpc == "LIVE /live/{session}").collect();
        Some(live).filter(|r| !r.is_empty())
    })
    .await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].target.contains("mode control") && records[0].target.contains("inputs "), "{records:?}");
    assert!(!records[0].target.contains("hi ther"), "{records:?}");
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_link_takes_no_input_and_dead_links_get_nothing() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = session(&client).await;
    let view = link(&client, &id, pb::LiveViewMode::View, 60_000).await;

    // The page is served for a live link only; a garbled or foreign one is 404.
    let path = view.url.split(&server.http.to_string()).nth(1).unwrap().to_string();
    let (status, head, body) = http_fetch(&server.http.to_string(), &path, None).await;
    assert!(status.contains("200"), "{status}");
    assert!(head.contains("content-security-policy") && String::from_utf8_lossy(&body).contains("<img id=\"screen\""));
    for bad in
        [format!("/live/{id}/00"), format!("/live/{id}/{}", "a".repeat(64)), format!("/live/s-nope/{}", "a".repeat(64))]
    {
        let (status, _, _) = http_fetch(&server.http.to_string(), &bad, None).await;
        assert!(status.contains("404"), "{bad}: {status}");
        assert!(async_tungstenite::tokio::connect_async(ws_url(&format!("http://{}{bad}", server.http)))
            .await
            .is_err());
    }

    // VIEW: frames come; input is refused and does nothing.
    let (mut socket, _) = async_tungstenite::tokio::connect_async(ws_url(&view.url)).await.unwrap();
    let (hello, _) = next_text(&mut socket, Duration::from_secs(10)).await;
    let hello: serde_json::Value = serde_json::from_str(hello.unwrap().to_text().unwrap()).unwrap();
    assert_eq!(hello["mode"], "view");
    let click = r#"{"type":"mouse","action":"down","x":0.46,"y":0.14,"button":"left","clicks":1}"#;
    socket.send(Message::Text(click.into())).await.unwrap();
    let (refused, mut frames) = next_text(&mut socket, Duration::from_secs(10)).await;
    assert!(refused.unwrap().to_text().unwrap().contains("only views"));
    // The picture comes too (before the refusal or after it: the first is a screenshot).
    while frames == 0 {
        match tokio::time::timeout(Duration::from_secs(10), socket.next()).await {
            Ok(Some(Ok(Message::Binary(_)))) => frames += 1,
            Ok(Some(Ok(_))) => {}
            other => panic!("no picture for a VIEW viewer: {other:?}"),
        }
    }
    let text = ok(&act(&client, &id, action("evaluate", "", "document.getElementById('b').textContent")).await);
    assert_eq!(text, "press");

    // Revoked: the open socket closes, the page is gone.
    let revoke = pb::RevokeLiveViewRequest { session_id: id.clone(), link_id: view.link_id.clone() };
    assert_eq!(client.sessions().revoke_live_view(revoke).await.unwrap().into_inner().revoked, 1);
    let (closed, _) = next_text(&mut socket, Duration::from_secs(5)).await;
    assert!(matches!(closed, Some(Message::Close(Some(ref f))) if f.reason.contains("revoked")), "{closed:?}");
    let (status, _, _) = http_fetch(&server.http.to_string(), &path, None).await;
    assert!(status.contains("404"), "{status}");

    // Released: a viewer's socket closes within a second.
    let control = link(&client, &id, pb::LiveViewMode::Control, 0).await;
    let (mut socket, _) = async_tungstenite::tokio::connect_async(ws_url(&control.url)).await.unwrap();
    next_text(&mut socket, Duration::from_secs(10)).await;
    let released = Instant::now();
    client.release(&id).await.unwrap();
    let (closed, _) = next_text(&mut socket, Duration::from_secs(5)).await;
    assert!(matches!(closed, Some(Message::Close(_)) | None), "{closed:?}");
    assert!(released.elapsed() < Duration::from_secs(1), "closed {:?} after the release", released.elapsed());

    // A read-only token of the session's subject may view but not control; another
    // tenant's session is NOT_FOUND.
    let writer = server.client(&server.token("default", "ci", &["sessions:read", "sessions:write"]).await).await;
    let id = session(&writer).await;
    let reader = server.client(&server.token("default", "ci", &["sessions:read"]).await).await;
    let req = pb::LiveViewRequest { session_id: id.clone(), mode: pb::LiveViewMode::Control as i32, ttl_ms: 0 };
    assert_eq!(reader.sessions().live_view(req).await.unwrap_err().code(), tonic::Code::PermissionDenied);
    link(&reader, &id, pb::LiveViewMode::View, 0).await;
    let admin = server.admin().await;
    admin
        .admin()
        .put_tenant(pb::PutTenantRequest {
            tenant: Some(pb::Tenant { id: "other".into(), max_slots: 1, ..Default::default() }),
        })
        .await
        .unwrap();
    let other = server.client(&server.token("other", "x", &["sessions:read", "sessions:write"]).await).await;
    let req = pb::LiveViewRequest { session_id: id.clone(), mode: pb::LiveViewMode::View as i32, ttl_ms: 0 };
    assert_eq!(other.sessions().live_view(req).await.unwrap_err().code(), tonic::Code::NotFound);
    writer.release(&id).await.unwrap();
    server.stop().await;
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_that_stops_reading_costs_bounded_memory_and_is_let_go() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Busy for a while: never beside the tests that measure time.
    let _timing = crate::helpers::TIMING.write().await;
    // A server process of its own: its memory is the server's alone, not that of the tests
    // running beside this one in the test binary.
    let server = crate::helpers::BinaryServer::spawn().await;
    let client = server.client().await;
    let req = pb::AcquireRequest {
        wait_ms: 30_000,
        viewport: Some(pb::Viewport { width: 1280, height: 720, ..Default::default() }),
        ..Default::default()
    };
    let id = client.acquire_with(req).await.unwrap().session_id;
    // Noise, new ten times a second: every screencast frame is different, and large.
    let noise = r#"<body style="margin:0"><canvas id="c" width="320" height="180" style="width:1280px;height:720px"></canvas>
<script>const g = document.getElementById('c').getContext('2d');
function f() { const d = g.createImageData(320, 180);
  for (let i = 0; i < d.data.length; i += 4) { d.data[i] = Math.random() * 255; d.data[i + 1] = Math.random() * 255; d.data[i + 3] = 255; }
  g.putImageData(d, 0, 0); }
setInterval(f, 100);</script></body>"#;
    ok(&act(&client, &id, action("load_html", "", noise)).await);
    let view = link(&client, &id, pb::LiveViewMode::View, 0).await;
    let path = format!("{}/ws", view.url.split(server.http.as_str()).nth(1).unwrap());
    let before = rss_kib(server.pid());

    // A viewer that upgrades, then never reads again.
    let mut stuck = tokio::net::TcpStream::connect(&server.http).await.unwrap();
    let handshake = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        server.http
    );
    stuck.write_all(handshake.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    stuck.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 101", "upgraded");
    let metrics_url = format!("http://{}/metrics", server.http);
    let sent = |metrics: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with("browserpool_live_frames_total")).unwrap_or("x 0");
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    let early = sent(&crate::lifecycle::http_get(&metrics_url).await);
    // A reading viewer beside it keeps getting frames.
    let (mut reader, _) = async_tungstenite::tokio::connect_async(ws_url(&view.url)).await.unwrap();
    let (hello, _) = next_text(&mut reader, Duration::from_secs(10)).await;
    assert!(hello.unwrap().to_text().unwrap().contains("hello"));
    let (_, got) = next_text(&mut reader, Duration::from_secs(3)).await;
    assert!(got >= 5, "the reading viewer got {got} frames in 3 s");
    tokio::time::sleep(Duration::from_secs(9)).await;
    let grown_kib = rss_kib(server.pid()).saturating_sub(before);
    let metrics = crate::lifecycle::http_get(&metrics_url).await;
    let viewers = metrics.lines().find(|l| l.starts_with("browserpool_live_viewers")).unwrap().to_string();
    println!("stuck viewer: {early} frames sent in its first 4 s; memory grew {grown_kib} KiB in 13 s; {viewers}");
    assert!(grown_kib < 64 << 10, "memory grew {grown_kib} KiB with a viewer that does not read");
    // The stuck viewer was let go after 10 s without taking a frame; the reader stays.
    assert!(viewers.ends_with(" 1"), "{viewers}");
    let dropped = metrics.lines().find(|l| l.starts_with("browserpool_live_frames_dropped_total")).unwrap();
    let dropped: f64 = dropped.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(dropped >= 20.0, "the frames the stuck viewer never took are counted as dropped: {dropped}");
    drop(stuck);
    drop(reader);
    client.release(&id).await.unwrap();
    let mut server = server;
    let (status, log) = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    assert!(status.success(), "{status}: {log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_past_the_cap_get_429() {
    let server = TestServer::start_with(|a| a.live_max_viewers = 1).await;
    let client = server.admin().await;
    let id = session(&client).await;
    let view = link(&client, &id, pb::LiveViewMode::View, 0).await;
    let (mut first, _) = async_tungstenite::tokio::connect_async(ws_url(&view.url)).await.unwrap();
    let (hello, _) = next_text(&mut first, Duration::from_secs(10)).await;
    assert!(hello.unwrap().to_text().unwrap().contains("hello"));
    match async_tungstenite::tokio::connect_async(ws_url(&view.url)).await {
        Err(async_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 429),
        other => panic!("a second viewer past --live-max-viewers 1: {:?}", other.map(|_| "connected")),
    }
    // Once the first leaves, there is room again.
    drop(first);
    let again = crate::helpers::eventually("room for a viewer", Duration::from_secs(10), || async {
        async_tungstenite::tokio::connect_async(ws_url(&view.url)).await.ok()
    })
    .await;
    drop(again);
    client.release(&id).await.unwrap();
    server.stop().await;
}
