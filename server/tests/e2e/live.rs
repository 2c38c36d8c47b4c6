//! Live view over real HTTP and websockets: a person in a Chromium of their own opens a CONTROL
//! link, sees the session's page and drives it; a VIEW link shows frames and takes no input;
//! bad, revoked and ended links get nothing.

use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use browserpool_client::{action, pb, Client};
use futures::StreamExt;

use crate::files::http_fetch;
use crate::helpers::{act, eventually, ok, TestServer};

/// The session's page: a red block, a button and an input at known places of 1280x720.
const PAGE: &str = r#"<body style="margin:0;background:#fff">
<div style="position:absolute;left:0;top:0;width:400px;height:300px;background:rgb(255,0,0)"></div>
<button id="b" style="position:absolute;left:500px;top:50px;width:200px;height:100px;font-size:30px"
  onclick="this.textContent='clicked'">press</button>
<input id="t" style="position:absolute;left:500px;top:200px;width:300px;height:50px;font-size:30px">
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

/// The next message that is not a frame, and how many frames came before it.
async fn next_text(socket: &mut Socket, within: Duration) -> (Option<Message>, usize) {
    let mut frames = 0;
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), socket.next()).await {
            Ok(Some(Ok(Message::Binary(_)))) => frames += 1,
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
    let done = ok(&act(
        &client,
        &id,
        action("evaluate", "", "[document.getElementById('b').textContent, document.getElementById('t').value]"),
    )
    .await);
    assert_eq!(done, serde_json::json!(["clicked", "hi ther"]), "the click and the typing reached the page");

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
    let (refused, frames) = next_text(&mut socket, Duration::from_secs(10)).await;
    assert!(frames >= 1, "a late viewer gets the picture at once");
    assert!(refused.unwrap().to_text().unwrap().contains("only views"));
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
