//! Recordings over real gRPC and HTTP: a recorded session's video plays in Chromium at the
//! session's length and viewport, RECORD_RETAIN_ON_FAILURE keeps only failed jobs' videos, and
//! what is kept is listed on the session and deleted on demand.

use std::time::{Duration, Instant};

use axum::response::{Html, IntoResponse};
use axum::routing::get;
use browserpool_client::{action, pb, Client};
use futures::StreamExt;

use crate::files::http_fetch;
use crate::helpers::{act, ok, status_code, BinaryServer, TestServer};

/// A page that changes when typed into and clicked, so the video's frames differ.
const PAGE: &str = r#"<body style="margin:0;background:#fff">
<input id="name" style="font-size:40px"><button id="go" style="font-size:40px">go</button>
<div id="out" style="width:100%;height:300px"></div>
<script>document.getElementById('go').onclick = () => {
  document.body.style.background = '#c00'; document.getElementById('out').textContent = 'clicked';
};</script></body>"#;

async fn recorded(client: &Client, record: pb::Record, width: u32, height: u32) -> String {
    let req = pb::AcquireRequest {
        wait_ms: 30_000,
        record: record as i32,
        viewport: Some(pb::Viewport { width, height, ..Default::default() }),
        ..Default::default()
    };
    client.acquire_with(req).await.unwrap().session_id
}

/// Serves `video` at `/v.webm` and a page that plays it at `/`, on loopback.
async fn video_site(video: Vec<u8>) -> String {
    let page = r#"<video id="v" muted preload="auto"></video>"#;
    let app = axum::Router::new().route("/", get(move || async move { Html(page) })).route(
        "/v.webm",
        get(move || {
            let video = video.clone();
            async move { ([(axum::http::header::CONTENT_TYPE, "video/webm")], video).into_response() }
        }),
    );
    let addr = crate::helpers::serve_loopback(app).await;
    format!("http://{addr}/")
}

/// In the page of `video_site`: the video's duration and size, and whether its first and last
/// frames differ (drawn on a canvas and compared pixel by pixel).
const PROBE: &str = r#"(async () => {
  const v = document.getElementById('v');
  // From a blob, which seeks (the fixture server answers no ranges).
  v.src = URL.createObjectURL(await (await fetch('/v.webm')).blob());
  if (v.readyState < 1) await new Promise((ok, fail) => { v.onloadedmetadata = ok; v.onerror = () => fail(new Error('video error ' + (v.error && v.error.code))); });
  const at = async (t) => {
    // The frame seeked to, once it is shown (or after a second).
    await new Promise(ok => { v.requestVideoFrameCallback(ok); setTimeout(ok, 1000); v.currentTime = t; });
    await new Promise(ok => setTimeout(ok, 100));
    const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
    const g = c.getContext('2d'); g.drawImage(v, 0, 0);
    return g.getImageData(0, 0, c.width, c.height).data;
  };
  let duration = v.duration;
  if (!isFinite(duration)) { v.currentTime = 1e9; await new Promise(ok => v.ondurationchange = ok); duration = v.duration; }
  const first = await at(0);
  const last = await at(Math.max(0, duration - 0.05));
  let differ = 0;
  for (let i = 0; i < first.length; i += 4) if (Math.abs(first[i] - last[i]) > 40) differ++;
  // The mean red, green and blue of the last frame.
  const rgb = [0, 1, 2].map(c => { let s = 0; for (let i = c; i < last.length; i += 4) s += last[i]; return s / (last.length / 4); });
  return { duration, width: v.videoWidth, height: v.videoHeight, differ, last_rgb: rgb };
})()"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_session_plays_in_chromium_at_its_length_and_viewport() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let began = Instant::now();
    let id = recorded(&client, pb::Record::On, 640, 360).await;
    ok(&act(&client, &id, action("load_html", "", PAGE)).await);
    ok(&act(&client, &id, action("type", "#name", "recorded")).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ok(&act(&client, &id, action("click", "#go", serde_json::Value::Null)).await);
    // A still page: the video holds its last frame for as long as the session stays.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Live, there is no video yet: it is made at the end.
    assert_eq!(status_code(client.get_recording(&id).await.unwrap_err()), tonic::Code::FailedPrecondition);
    client.release(&id).await.unwrap();
    let length = began.elapsed().as_secs_f64();

    let (artifact, video) = client.get_recording(&id).await.unwrap();
    assert_eq!(artifact.kind, pb::ArtifactKind::Recording as i32);
    assert_eq!((artifact.name.as_str(), artifact.mime_type.as_str()), ("recording.webm", "video/webm"));
    assert_eq!(artifact.size, video.len() as u64);
    assert!(video.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]), "not a WebM (EBML) file");
    assert!(artifact.expires_at.is_some(), "kept for the artifact TTL");
    // Get lists it among what the session left.
    let session = client.get(&id).await.unwrap();
    let kinds: Vec<i32> = session.artifacts.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, [pb::ArtifactKind::Recording as i32], "{:?}", session.artifacts);

    // Chromium plays it: the length of the session (within 20%), the viewport's size, and a
    // last frame unlike the first.
    let site = video_site(video).await;
    let viewer = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &viewer, action("navigate", "", site.as_str())).await);
    let probe = ok(&act(&client, &viewer, action("evaluate", "", PROBE)).await);
    client.release(&viewer).await.unwrap();
    let duration = probe["duration"].as_f64().unwrap();
    assert!((duration - length).abs() <= 0.2 * length, "video {duration:.2}s, session {length:.2}s: {probe}");
    assert_eq!((probe["width"].as_u64(), probe["height"].as_u64()), (Some(640), Some(360)), "{probe}");
    assert!(probe["differ"].as_u64().unwrap() > 1000, "first and last frames alike: {probe}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_on_failure_keeps_only_failed_jobs_videos_until_deleted() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    // One at a time (the test server has two slots): a job whose action fails, one that
    // passes, and one whose client says it failed.
    let job = |fail_action: bool, say_failed: bool| {
        let client = client.clone();
        async move {
            let id = recorded(&client, pb::Record::RetainOnFailure, 400, 300).await;
            ok(&act(&client, &id, action("load_html", "", PAGE)).await);
            if fail_action {
                let mut missing = action("click", "#nothing-here", serde_json::Value::Null);
                missing.timeout_ms = 300;
                assert!(!act(&client, &id, missing).await.ok, "the click on nothing fails");
                // A live session has no artifacts to delete yet.
                assert_eq!(
                    status_code(client.delete_artifacts(&id).await.unwrap_err()),
                    tonic::Code::FailedPrecondition
                );
            }
            client.release_as(&id, say_failed).await.unwrap();
            id
        }
    };
    let failing = job(true, false).await;
    let passing = job(false, false).await;
    let said_failed = job(false, true).await;

    assert!(!client.get_recording(&failing).await.unwrap().1.is_empty(), "a failed action keeps the video");
    assert!(!client.get_recording(&said_failed).await.unwrap().1.is_empty(), "release(failed) keeps it");
    assert_eq!(status_code(client.get_recording(&passing).await.unwrap_err()), tonic::Code::NotFound);
    assert!(client.get(&passing).await.unwrap().artifacts.is_empty());

    // Over HTTP, with the token's rules: the owner gets it, another tenant's token 404.
    let http = server.http.to_string();
    let owner = server.admin_token.clone();
    let (status, headers, body) = http_fetch(&http, &format!("/sessions/{failing}/recording"), Some(&owner)).await;
    assert!(status.contains("200"), "{status} {headers}");
    assert!(headers.contains("content-type: video/webm"), "{headers}");
    assert!(body.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]));
    let other = pb::Tenant { id: "other-tenant".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    client.admin().put_tenant(pb::PutTenantRequest { tenant: Some(other) }).await.unwrap();
    let stranger = server.token("other-tenant", "mallory", &["sessions:read", "sessions:write"]).await;
    let (status, _, _) = http_fetch(&http, &format!("/sessions/{failing}/recording"), Some(&stranger)).await;
    assert!(status.contains("404"), "{status}");
    let foreign = server.client(&stranger).await;
    assert_eq!(status_code(foreign.delete_artifacts(&failing).await.unwrap_err()), tonic::Code::NotFound);
    // A read-only token of the owner's tenant may fetch the video, not delete it.
    let reader = server.client(&server.token("default", "admin", &["sessions:read"]).await).await;
    assert!(!reader.get_recording(&failing).await.unwrap().1.is_empty());
    assert_eq!(status_code(reader.delete_artifacts(&failing).await.unwrap_err()), tonic::Code::PermissionDenied);

    // Deleted on demand: gone from Get and GetFile, and a second delete finds nothing.
    assert_eq!(client.delete_artifacts(&failing).await.unwrap(), 1);
    assert_eq!(status_code(client.get_recording(&failing).await.unwrap_err()), tonic::Code::NotFound);
    assert!(client.get(&failing).await.unwrap().artifacts.is_empty());
    assert_eq!(client.delete_artifacts(&failing).await.unwrap(), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_keeps_nothing_refuses_to_record_saying_why() {
    let server = TestServer::start_with(|a| a.artifact_ttl = Duration::ZERO).await;
    let client = server.admin().await;
    let refused = refused_to_record(&client, pb::Record::On).await;
    assert!(refused.contains("--artifact-ttl 0s"), "{refused}");
    // RECORD_OFF is served as ever.
    let req = pb::AcquireRequest { wait_ms: 30_000, record: pb::Record::Off as i32, ..Default::default() };
    let id = client.acquire_with(req).await.unwrap().session_id;
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// The message of the FAILED_PRECONDITION an `Acquire` recorded as `record` gets.
async fn refused_to_record(client: &Client, record: pb::Record) -> String {
    let req = pb::AcquireRequest { wait_ms: 30_000, record: record as i32, ..Default::default() };
    let status = match client.acquire_with(req).await.unwrap_err() {
        browserpool_client::Error::Status(s) => s,
        other => panic!("not a status: {other}"),
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    status.message().to_string()
}

/// The `browserpool` binary with no ffmpeg on its PATH (an empty directory; Chromium given by
/// path): it says so at start, refuses a recorded acquire naming ffmpeg and how to install it,
/// and serves the rest as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_ffmpeg_refuses_to_record_saying_what_to_install() {
    let empty = tempfile::tempdir().unwrap();
    let chrome = browserpool_pool::find_chrome(None).unwrap().display().to_string();
    let path = empty.path().display().to_string();
    let mut server = BinaryServer::spawn_env(&["--chrome", &chrome], &[("PATH", &path)]).await;
    assert!(
        server.startup_log.iter().any(|l| l.contains("sessions cannot be recorded") && l.contains("not found on PATH")),
        "{:?}",
        server.startup_log
    );
    let client = server.client().await;
    let refused = refused_to_record(&client, pb::Record::RetainOnFailure).await;
    assert!(refused.contains("ffmpeg") && refused.contains("apt-get install -y ffmpeg"), "{refused}");
    let req = pb::AcquireRequest { wait_ms: 30_000, record: pb::Record::Off as i32, ..Default::default() };
    let id = client.acquire_with(req).await.unwrap().session_id;
    assert_eq!(ok(&client.act(&id, action("evaluate", "", "1 + 1")).await.unwrap()), serde_json::json!(2));
    client.release(&id).await.unwrap();
    let (status, _) = server.terminate();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_s_artifact_terms_hold_defaults_upload_cap_stored_bytes_and_ttl() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let tenant = pb::Tenant {
        id: "jobs".into(),
        max_slots: 1,
        max_queue: 1,
        default_record: pb::Record::RetainOnFailure as i32,
        max_file_mb: 1,
        max_artifact_mb: 2,
        artifact_ttl_s: 60,
        ..Default::default()
    };
    let stored = admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap().into_inner();
    let stored = stored.tenant.unwrap();
    assert_eq!((stored.default_record, stored.max_file_mb), (pb::Record::RetainOnFailure as i32, 1));
    assert_eq!((stored.max_artifact_mb, stored.artifact_ttl_s), (2, 60));
    let bad = pb::Tenant { id: "jobs".into(), max_slots: 1, max_file_mb: 4096, ..Default::default() };
    let refused = admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(bad) }).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{}", refused.message());
    let client = server.client(&server.token("jobs", "ci", &["sessions:read", "sessions:write"]).await).await;

    // Recorded by the tenant's default (record unset), kept since the client says it failed;
    // kept for the tenant's 60 s, not the server's 24 h.
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("load_html", "", PAGE)).await);
    let mb = |n: usize| vec![7u8; n << 20];
    let too_big = client.put_file(&id, "big.bin", &mb(2)).await.unwrap_err();
    assert_eq!(status_code(too_big), tonic::Code::ResourceExhausted, "past max_file_mb 1");
    client.put_file(&id, "one.bin", &mb(1)).await.unwrap();
    let ended_at = crate::helpers::now_ms() as i64;
    client.release_as(&id, true).await.unwrap();
    let kept = client.get(&id).await.unwrap();
    let kinds: Vec<i32> = kept.artifacts.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, [pb::ArtifactKind::Upload as i32, pb::ArtifactKind::Recording as i32], "{kept:?}");
    let expires = kept.artifacts[0].expires_at.unwrap();
    let left_ms = expires.seconds * 1000 + expires.nanos as i64 / 1_000_000 - ended_at;
    assert!((50_000..=70_000).contains(&left_ms), "kept for {left_ms} ms, not the tenant's 60 s");
    assert!(kept.artifacts_refused.is_empty(), "{}", kept.artifacts_refused);

    // The next session's MiB would pass the tenant's 2 MiB of stored artifacts: not kept,
    // and Get says why.
    let next = client.acquire(30_000).await.unwrap().session_id;
    client.put_file(&next, "two.bin", &mb(1)).await.unwrap();
    let mut events =
        client.sessions().events(pb::EventsRequest { session_id: next.clone() }).await.unwrap().into_inner();
    client.release(&next).await.unwrap();
    // Its events say so too, just before it ends.
    let mut said = Vec::new();
    while let Ok(Some(Ok(event))) = tokio::time::timeout(Duration::from_secs(30), events.next()).await {
        match event.kind {
            Some(pb::event::Kind::ArtifactsRefused(r)) => said.push(r.reason),
            Some(pb::event::Kind::SessionEnded(_)) => break,
            _ => {}
        }
    }
    assert!(said.len() == 1 && said[0].contains("max_artifact_mb of 2 MiB"), "{said:?}");
    let refused = client.get(&next).await.unwrap();
    assert!(refused.artifacts.is_empty(), "{:?}", refused.artifacts);
    // List says so too, and lists the first session's artifacts.
    let rows = client.sessions().list(pb::ListSessionsRequest { page_size: 10, ..Default::default() }).await.unwrap();
    let rows = rows.into_inner().sessions;
    let listed = |sid: &str| rows.iter().find(|s| s.session_id == sid).unwrap().clone();
    assert!(listed(&next).artifacts_refused.contains("max_artifact_mb"), "{:?}", listed(&next));
    assert_eq!(listed(&id).artifacts.len(), 2, "{:?}", listed(&id).artifacts);
    assert!(refused.artifacts_refused.contains("max_artifact_mb of 2 MiB"), "{}", refused.artifacts_refused);
    assert_eq!(status_code(client.get_file(&next, "two.bin").await.unwrap_err()), tonic::Code::NotFound);
    // /metrics: the tenant's kept bytes (its MiB upload and the video), and the recording.
    let (_, _, body) = http_fetch(&server.http.to_string(), "/metrics", None).await;
    let metrics = String::from_utf8(body).unwrap();
    let value = |prefix: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix}:\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("browserpool_artifact_bytes{tenant=\"jobs\"}") > (1 << 20) as f64, "{metrics}");
    assert!(value("browserpool_recordings_total{outcome=\"kept\"}") >= 1.0, "{metrics}");
    assert!(value("browserpool_recording_seconds_total") > 0.0, "{metrics}");
    // Deleting the first session's artifacts frees the tenant's room.
    assert_eq!(client.delete_artifacts(&id).await.unwrap(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_is_a_browser_context_records_its_own_tab() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let shared = pb::Tenant {
        id: "shared".into(),
        max_slots: 2,
        max_queue: 2,
        isolation: pb::Isolation::Context as i32,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(shared) }).await.unwrap();
    let client = server.client(&server.token("shared", "ci", &["sessions:read", "sessions:write"]).await).await;
    // Two sessions in one Chromium: the recorded one's video shows its own page only.
    let other = client.acquire(30_000).await.unwrap().session_id;
    let id = recorded(&client, pb::Record::On, 640, 360).await;
    ok(&act(&client, &other, action("load_html", "", "<body style='background:#00f'>other</body>")).await);
    ok(&act(&client, &id, action("load_html", "", PAGE)).await);
    ok(&act(&client, &id, action("click", "#go", serde_json::Value::Null)).await);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    client.release(&id).await.unwrap();
    client.release(&other).await.unwrap();
    let (artifact, video) = client.get_recording(&id).await.unwrap();
    assert!(video.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]) && artifact.size == video.len() as u64);

    // The last frame is this session's page after its click (red), never the other's (blue).
    let viewer = admin.acquire(30_000).await.unwrap().session_id;
    ok(&act(&admin, &viewer, action("navigate", "", video_site(video).await.as_str())).await);
    let probe = ok(&act(&admin, &viewer, action("evaluate", "", PROBE)).await);
    admin.release(&viewer).await.unwrap();
    assert_eq!((probe["width"].as_u64(), probe["height"].as_u64()), (Some(640), Some(360)), "{probe}");
    let last = probe["last_rgb"].as_array().unwrap();
    assert!(last[0].as_f64().unwrap() > 150.0 && last[2].as_f64().unwrap() < 100.0, "not red: {probe}");
    server.stop().await;
}
