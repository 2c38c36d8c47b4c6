//! Acquire, act, drive and release against a real Chromium.

use std::time::Duration;

use browserpool_client::{action, pb};
use serde_json::json;
use tokio_stream::StreamExt;

use crate::helpers::{err_code, eventually, fixture_site, ok, queued, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_navigate_type_click_extract_screenshot_release() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;

    let session = client.acquire(30_000).await.unwrap();
    assert_eq!(pb::SessionState::try_from(session.state).unwrap(), pb::SessionState::Ready);
    assert!(!session.worker_id.is_empty());
    let id = session.session_id.clone();

    let nav = client.act(&id, action("navigate", "", format!("{site}/"))).await.unwrap();
    assert_eq!(ok(&nav)["url"], json!(format!("{site}/")));
    assert_eq!(ok(&client.act(&id, action("title", "", json!(null))).await.unwrap()), json!("Greeter"));
    ok(&client.act(&id, action("type", "#name", "Ada")).await.unwrap());
    ok(&client.act(&id, action("click", "#go", json!(null))).await.unwrap());
    let h1 = client.act(&id, action("extract", "#greeting", json!(null))).await.unwrap();
    assert_eq!(ok(&h1), json!("Hello, Ada"));

    // fill replaces what is there; press Enter does not break anything.
    ok(&client.act(&id, action("fill", "#name", "Grace")).await.unwrap());
    ok(&client.act(&id, action("press", "#name", "End")).await.unwrap());
    let value = client.act(&id, action("extract", "#name", "value")).await.unwrap();
    assert_eq!(ok(&value), json!("Grace"));
    let attr = client.act(&id, action("extract", "#about", "attr:data-kind")).await.unwrap();
    assert_eq!(ok(&attr), json!("link"));
    let sum = client.act(&id, action("evaluate", "", "Promise.resolve(20 + 22)")).await.unwrap();
    assert_eq!(ok(&sum), json!(42));

    let shot = client.act(&id, action("screenshot", "", json!(null))).await.unwrap();
    ok(&shot);
    assert_eq!(shot.mime_type, "image/png");
    assert_eq!(&shot.data[..8], b"\x89PNG\r\n\x1a\n", "png signature");
    // IHDR width and height: the default 1280x720 viewport.
    let w = u32::from_be_bytes(shot.data[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(shot.data[20..24].try_into().unwrap());
    assert_eq!((w, h), (1280, 720));

    ok(&client.act(&id, action("click", "#about", json!(null))).await.unwrap());
    ok(&client.act(&id, action("wait_for", "", json!({"url": "/about"}))).await.unwrap());
    assert_eq!(ok(&client.act(&id, action("url", "", json!(null))).await.unwrap()), json!(format!("{site}/about")));

    let released = client.release(&id).await.unwrap();
    assert!(released.released);
    let after = client.get(&id).await.unwrap();
    assert_eq!(pb::SessionState::try_from(after.state).unwrap(), pb::SessionState::Closed);
    // Idempotent: a second release changes nothing and says so.
    let again = client.release(&id).await.unwrap();
    assert!(!again.released);
    assert_eq!(pb::SessionState::try_from(again.state).unwrap(), pb::SessionState::Closed);
    // Acting on a closed session is a precondition failure, not a hang.
    let browserpool_client::Error::Status(status) =
        client.act(&id, action("title", "", json!(null))).await.unwrap_err()
    else {
        panic!("expected a status")
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    // It says why and when it ended, and what to do.
    let said = status.message();
    assert!(said.starts_with(&format!("session {id} is CLOSED (released, at 20")), "{status:?}");
    assert!(said.ends_with("): its browser is gone; acquire a new session"), "{status:?}");

    // The session and its transitions are in the listing.
    let listed = client.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner();
    assert!(listed.sessions.iter().any(|s| s.session_id == id));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_errors_are_results_not_failures() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&client.act(&id, action("navigate", "", format!("{site}/"))).await.unwrap());

    let mut missing = action("click", "#nope", json!(null));
    missing.timeout_ms = 300;
    let started = std::time::Instant::now();
    assert_eq!(err_code(&client.act(&id, missing).await.unwrap()), pb::ErrorCode::ElementNotFound);
    assert!(started.elapsed() < Duration::from_secs(5), "element wait honours timeout_ms");

    let thrown = client.act(&id, action("evaluate", "", "throw new Error('kaput')")).await.unwrap();
    assert_eq!(err_code(&thrown), pb::ErrorCode::JsException);
    assert!(thrown.error.unwrap().message.contains("kaput"));

    let blocked = client.act(&id, action("navigate", "", "file:///etc/passwd")).await.unwrap();
    assert_eq!(err_code(&blocked), pb::ErrorCode::BlockedByPolicy);

    // A closed port on loopback: the navigation fails with the browser's reason.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let refused = client.act(&id, action("navigate", "", format!("http://127.0.0.1:{dead}/"))).await.unwrap();
    assert_eq!(err_code(&refused), pb::ErrorCode::NavigationFailed);
    assert!(refused.error.unwrap().message.contains("ERR_CONNECTION_REFUSED"));

    let no_selector = client.act(&id, action("click", "", json!(null))).await.unwrap();
    assert_eq!(err_code(&no_selector), pb::ErrorCode::InvalidArgument);
    let bad_selector = client.act(&id, action("click", "##", json!(null))).await.unwrap();
    assert_eq!(err_code(&bad_selector), pb::ErrorCode::InvalidArgument);

    let mut slow = action("evaluate", "", "new Promise(r => setTimeout(r, 10000))");
    slow.timeout_ms = 300;
    assert_eq!(err_code(&client.act(&id, slow).await.unwrap()), pb::ErrorCode::Timeout);

    let mut huge = action("title", "", json!(null));
    huge.timeout_ms = 301_000;
    assert_eq!(err_code(&client.act(&id, huge).await.unwrap()), pb::ErrorCode::InvalidArgument);

    let mut other_tab = action("title", "", json!(null));
    other_tab.tab_index = Some(3);
    let r = client.act(&id, other_tab).await.unwrap();
    assert_eq!(err_code(&r), pb::ErrorCode::InvalidArgument);
    assert!(r.error.unwrap().message.contains("tab_index"), "the legacy field is named");

    // After all that the session still works.
    ok(&client.act(&id, action("navigate", "", format!("{site}/"))).await.unwrap());
    assert_eq!(ok(&client.act(&id, action("title", "", json!(null))).await.unwrap()), json!("Greeter"));
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_stream_survives_unknown_action_and_reports_aliases() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;

    let (tx, rx) = tokio::sync::mpsc::channel::<pb::DriveRequest>(8);
    let step = |n: &str, a: pb::Action| pb::DriveRequest {
        session_id: String::new(),
        action: Some(pb::Action { id: n.into(), ..a }),
    };
    tx.send(pb::DriveRequest {
        session_id: id.clone(),
        action: Some(pb::Action { id: "1".into(), ..action("goto", "", format!("{site}/")) }),
    })
    .await
    .unwrap();
    tx.send(step("2", action("clikc", "#go", json!(null)))).await.unwrap();
    tx.send(step("3", action("text", "#greeting", json!(null)))).await.unwrap();
    tx.send(step("4", action("js", "", "document.title"))).await.unwrap();
    let mut events =
        client.sessions().drive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();

    let attached = events.next().await.unwrap().unwrap();
    match attached.kind {
        Some(pb::drive_event::Kind::Attached(s)) => assert_eq!(s.session_id, id),
        other => panic!("first event must be attached, got {other:?}"),
    }
    let mut results = Vec::new();
    while results.len() < 4 {
        match events.next().await.unwrap().unwrap().kind {
            Some(pb::drive_event::Kind::Result(r)) => results.push(r),
            _ => continue,
        }
    }
    assert_eq!(results.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["1", "2", "3", "4"], "in order, ids echoed");
    assert_eq!((results[0].action.as_str(), results[0].alias_of.as_str()), ("navigate", "goto"));
    ok(&results[0]);
    assert_eq!(err_code(&results[1]), pb::ErrorCode::UnknownAction);
    assert_eq!(results[1].error.as_ref().unwrap().did_you_mean, vec!["click".to_string()]);
    assert_eq!((results[2].action.as_str(), results[2].alias_of.as_str()), ("extract", "text"));
    assert_eq!(ok(&results[2]), json!("Hello, nobody"));
    assert_eq!(ok(&results[3]), json!("Greeter"));

    // Closing our side ends the stream cleanly.
    drop(tx);
    assert!(events.next().await.is_none());
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// The natural tonic pattern works: await the `Drive` call, then send. The headers come before
/// the first message; what is wrong with that message ends the stream with its status, while a
/// bad token is still refused at the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_answers_before_the_first_message() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let open = |client: browserpool_client::Client, which: &'static str| async move {
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::DriveRequest>(4);
        let mut stub = client.sessions();
        let call = stub.drive(tokio_stream::wrappers::ReceiverStream::new(rx));
        let stream = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .unwrap_or_else(|_| panic!("{which}: Drive answers its headers before the first message"));
        (tx, stream)
    };

    let (tx, stream) = open(client.clone(), "a session").await;
    let mut stream = stream.unwrap().into_inner();
    tx.send(pb::DriveRequest { session_id: id.clone(), action: Some(action("evaluate", "", "6 * 7")) }).await.unwrap();
    let attached = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(attached.kind, Some(pb::drive_event::Kind::Attached(ref s)) if s.session_id == id),
        "{attached:?}"
    );
    let result = loop {
        match stream.next().await.unwrap().unwrap().kind {
            Some(pb::drive_event::Kind::Result(r)) => break r,
            _ => continue,
        }
    };
    assert_eq!(ok(&result), json!(42));
    drop(tx);
    assert!(stream.next().await.is_none(), "closing our side ends the stream");

    // A first message without a session, or with one this token may not use: the stream ends
    // with the status, after the headers.
    let (tx, stream) = open(client.clone(), "no session").await;
    let mut stream = stream.unwrap().into_inner();
    tx.send(pb::DriveRequest { session_id: String::new(), action: None }).await.unwrap();
    let status = stream.next().await.unwrap().unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(status.message(), "drive: the first message must name session_id");

    let (tx, stream) = open(client.clone(), "unknown session").await;
    let mut stream = stream.unwrap().into_inner();
    tx.send(pb::DriveRequest { session_id: "s-nobody".into(), action: None }).await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap_err().code(), tonic::Code::NotFound);

    let stranger = browserpool_client::Client::connect(server.endpoint(), "not-a-token").await.unwrap();
    let (_tx, refused) = open(stranger, "bad token").await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::Unauthenticated);
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// `List` answers what `Get` would for the same token: a subject without sessions:shared
/// (with sessions:write) sees its own sessions only, never another subject's (a listed session
/// carries its `cdp_url`, a ticket to drive it), and its pages are not padded with sessions it
/// may not see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_a_subject_only_its_own_sessions_without_sessions_shared() {
    let server = TestServer::start_with(|a| a.warm = 0).await;
    let client = |subject: &'static str, scopes: &'static [&'static str]| {
        let server = &server;
        async move { server.client(&server.token("default", subject, scopes).await).await }
    };
    let alice = client("alice", &["sessions:read", "sessions:write"]).await;
    let bob = client("bob", &["sessions:read", "sessions:write"]).await;
    let hers = alice.acquire(30_000).await.unwrap().session_id;
    let his = bob.acquire(30_000).await.unwrap().session_id;
    let list = |client: browserpool_client::Client, page_size: u32| async move {
        let page = client
            .sessions()
            .list(pb::ListSessionsRequest { page_size, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        (page.sessions.into_iter().map(|s| s.session_id).collect::<Vec<_>>(), page.next_page_token)
    };

    // Alice's session is the older one, yet Bob's first page of one is his own, and the last.
    assert_eq!(list(bob.clone(), 1).await, (vec![his.clone()], String::new()));
    assert_eq!(list(alice.clone(), 0).await, (vec![hers.clone()], String::new()));
    // sessions:shared alone does not show the others: using them needs sessions:write too.
    let shared_reader = client("carol", &["sessions:read", "sessions:shared"]).await;
    assert_eq!(list(shared_reader, 0).await, (vec![], String::new()));
    let shared = client("dave", &["sessions:read", "sessions:write", "sessions:shared"]).await;
    assert_eq!(list(shared, 0).await, (vec![hers.clone(), his.clone()], String::new()));
    assert_eq!(list(server.admin().await, 0).await.0, [hers.clone(), his.clone()]);

    alice.release(&hers).await.unwrap();
    bob.release(&his).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_pool_times_out_then_serves_after_release() {
    let server = TestServer::start_with(|a| a.max_workers = 1).await;
    let client = server.admin().await;
    let first = client.acquire(30_000).await.unwrap();

    let started = std::time::Instant::now();
    let err = client.acquire(300).await.unwrap_err();
    let browserpool_client::Error::Status(status) = err else { panic!("expected a status") };
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // It says what is full: here both the default tenant's quota (seeded from --max-workers)
    // and the server.
    assert_eq!(
        status.message(),
        "no browser became free within 300 ms: tenant default is at its quota: 1 of its max_slots 1 sessions \
         in use, and this server is at capacity: 1 of its --max-workers 1 browsers in use; retry, or wait longer (a \
         larger wait_ms)"
    );

    // A waiter is served once the holder releases.
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(60_000).await })
    };
    eventually("the waiter to queue", Duration::from_secs(10), || async {
        (queued(&client, "default").await == 1).then_some(())
    })
    .await;
    client.release(&first.session_id).await.unwrap();
    let second = waiter.await.unwrap().expect("waiter served after release");
    assert_ne!(second.session_id, first.session_id);
    assert!(second.queue_wait_ms > 0);
    client.release(&second.session_id).await.unwrap();
    server.stop().await;
}

/// Release answers once the end is recorded; the worker is killed and its profile deleted
/// right after, and the slot stays taken until then (an Acquire that would not wait is given
/// that moment, see below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_answers_then_the_worker_and_profile_go() {
    // No refill after the release: a new worker could take the same port, and its profile dir.
    let server = TestServer::start_with(|a| {
        a.warm = 0;
        a.max_workers = 1;
    })
    .await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let worker =
        status.workers.iter().find(|w| w.worker_id == session.worker_id).expect("the session's worker").clone();
    let released = client.release(&session.session_id).await.unwrap();
    assert!(released.released);
    assert_eq!(
        pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap(),
        pb::SessionState::Closed
    );
    eventually("the released worker to be gone", Duration::from_secs(10), || async {
        (!browserpool_pool::lock::pid_alive(worker.pid)).then_some(())
    })
    .await;
    let profile = server.profiles_dir().join(format!("port-{}", worker.cdp_port));
    eventually("its profile to be deleted", Duration::from_secs(10), || async { (!profile.exists()).then_some(()) })
        .await;
    server.stop().await;
}

/// `wait_ms: 0` on a server with a slot free but no worker warm waits for the worker booting
/// for it instead of failing at once: here no worker is kept warm, and after a release the
/// only slot's next worker boots on demand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_without_waiting_takes_the_worker_booting_for_it() {
    let server = TestServer::start_with(|a| {
        a.warm = 0;
        a.max_workers = 1;
    })
    .await;
    let client = server.admin().await;
    let first = client.acquire(0).await.expect("the worker booted for the call");
    client.release(&first.session_id).await.unwrap();
    let second = client.acquire(0).await.expect("right after a release, the worker booted for the call");
    client.release(&second.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_leaks_nothing() {
    let server = TestServer::start_with(|a| a.max_workers = 1).await;
    let client = server.admin().await;
    let first = client.acquire(30_000).await.unwrap();

    // The client gives up after 300 ms on a 60 s wait: the server must stop waiting.
    let gave_up = tokio::time::timeout(Duration::from_millis(300), client.acquire(60_000)).await;
    assert!(gave_up.is_err(), "acquire should still be waiting");
    client.release(&first.session_id).await.unwrap();

    // The slot the cancelled call waited for goes to the next caller, and nothing is leaked.
    let next = client.acquire(60_000).await.expect("slot free after cancel");
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    assert_eq!((status.leased, status.capacity), (1, 1));
    assert_eq!(status.workers.len(), 1, "one process at most: {:?}", status.workers);
    client.release(&next.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewport_is_applied_and_validated() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let req = pb::AcquireRequest {
        wait_ms: 30_000,
        viewport: Some(pb::Viewport { width: 800, height: 600, scale: 2.0, mobile: false }),
        ..Default::default()
    };
    let id = client.acquire_with(req).await.unwrap().session_id;
    let dims = client.act(&id, action("evaluate", "", "[innerWidth, innerHeight, devicePixelRatio]")).await.unwrap();
    assert_eq!(ok(&dims), json!([800, 600, 2]));
    let shot = client.act(&id, action("screenshot", "", json!(null))).await.unwrap();
    let w = u32::from_be_bytes(shot.data[16..20].try_into().unwrap());
    assert_eq!(w, 1600, "scale 2 doubles the pixels");
    client.release(&id).await.unwrap();

    let bad = pb::AcquireRequest {
        wait_ms: 1000,
        viewport: Some(pb::Viewport { width: 800, height: 600, scale: 4.0, mobile: false }),
        ..Default::default()
    };
    let browserpool_client::Error::Status(status) = client.acquire_with(bad).await.unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("viewport.scale"), "{status}");
    server.stop().await;
}

async fn worker_pid(client: &browserpool_client::Client, worker_id: &str) -> i32 {
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    status.workers.iter().find(|w| w.worker_id == worker_id).expect("leased worker listed").pid as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_browser_is_reported_and_session_marked_crashed() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let pid = worker_pid(&client, &session.worker_id).await;
    // SAFETY: killing the worker's process group, which this test's server started.
    unsafe { libc::killpg(pid, libc::SIGKILL) };
    // The death watch ends the session as CRASHED with nobody calling: wait for that state,
    // so the action below meets a session known to be ended and has one right answer.
    let state = eventually("the death watch to end the session", Duration::from_secs(15), || async {
        let s = pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap();
        (s != pb::SessionState::Ready).then_some(s)
    })
    .await;
    assert_eq!(state, pb::SessionState::Crashed);
    let mut title = action("title", "", json!(null));
    title.timeout_ms = 5000;
    let browserpool_client::Error::Status(s) = client.act(&session.session_id, title).await.unwrap_err() else {
        panic!("expected a status")
    };
    assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s:?}");
    let said = s.message();
    assert!(said.starts_with(&format!("session {} is CRASHED (chromium ", session.session_id)), "{s:?}");
    assert!(said.ends_with("acquire a new session"), "{s:?}");
    // The pool replaces the dead worker: a new session works.
    let next = client.acquire(30_000).await.unwrap();
    ok(&client.act(&next.session_id, action("evaluate", "", "1")).await.unwrap());
    client.release(&next.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_browser_times_out_and_release_still_cleans_up() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let pid = worker_pid(&client, &session.worker_id).await;
    // SAFETY: freezing the worker's process group, which this test's server started.
    unsafe { libc::killpg(pid, libc::SIGSTOP) };
    let mut eval = action("evaluate", "", "1 + 1");
    eval.timeout_ms = 500;
    let started = std::time::Instant::now();
    let r = client.act(&session.session_id, eval).await.unwrap();
    assert_eq!(err_code(&r), pb::ErrorCode::Timeout);
    assert!(started.elapsed() < Duration::from_secs(5), "deadline honoured: {:?}", started.elapsed());
    // SIGKILL works on a stopped process group: release ends the session, and the hung worker
    // is killed right after the answer.
    assert!(client.release(&session.session_id).await.unwrap().released);
    eventually("the hung worker to be killed", Duration::from_secs(10), || async {
        (!browserpool_pool::lock::pid_alive(pid as u32) || is_zombie(pid)).then_some(())
    })
    .await;
    server.stop().await;
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(true)
}

/// AcquireWatched says where each waiting call stands: its place in the tenant's queue and
/// what is full; a caller that leaves gives its place up; the session is the last message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_acquire_reports_its_place_in_the_queue_then_its_session() {
    use pb::acquire_progress::Progress;
    let server = TestServer::start_with(|a| a.max_workers = 1).await;
    let client = server.admin().await;
    let holder = client.acquire(30_000).await.unwrap();
    let watched = || async {
        let req = pb::AcquireRequest { wait_ms: 60_000, ..Default::default() };
        client.sessions().acquire_watched(req).await.unwrap().into_inner()
    };
    let mut first = watched().await;
    let w = next_wait(&mut first).await;
    assert_eq!((w.tenant.as_str(), w.position, w.queued), ("default", 1, 1), "{w:?}");
    assert!(w.reason.contains("1 of its --max-workers 1 browsers in use"), "{w:?}");
    let mut second = watched().await;
    let mut w = next_wait(&mut second).await;
    for _ in 0..10 {
        if w.queued == 2 {
            break;
        }
        w = next_wait(&mut second).await;
    }
    assert_eq!((w.position, w.waited_ms >= 900), (2, true), "{w:?}");
    // The first caller leaves: the second moves up.
    drop(first);
    let mut w = next_wait(&mut second).await;
    for _ in 0..10 {
        if w.position == 1 {
            break;
        }
        w = next_wait(&mut second).await;
    }
    assert_eq!((w.position, w.queued), (1, 1), "{w:?}");
    client.release(&holder.session_id).await.unwrap();
    let session = loop {
        match tokio::time::timeout(Duration::from_secs(30), second.message()).await.unwrap().unwrap() {
            Some(pb::AcquireProgress { progress: Some(Progress::Session(s)) }) => break s,
            Some(_) => continue,
            None => panic!("the stream ended without a session"),
        }
    };
    assert_eq!(pb::SessionState::try_from(session.state).unwrap(), pb::SessionState::Ready);
    assert!(second.message().await.unwrap().is_none(), "the session is the last message");
    ok(&client.act(&session.session_id, action("evaluate", "", "1")).await.unwrap());
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}

/// The next message of an AcquireWatched stream, which must be a wait report.
async fn next_wait(stream: &mut tonic::Streaming<pb::AcquireProgress>) -> pb::AcquireWait {
    let next = tokio::time::timeout(Duration::from_secs(10), stream.message());
    match next.await.expect("a report within 10 s").unwrap().and_then(|p| p.progress) {
        Some(pb::acquire_progress::Progress::Waiting(w)) => w,
        other => panic!("expected a wait report, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_expires() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let req = pb::AcquireRequest { wait_ms: 30_000, idle_timeout_ms: 500, ..Default::default() };
    let session = client.acquire_with(req).await.unwrap();
    let state = eventually("the idle timeout to end the session", Duration::from_secs(15), || async {
        let s = pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap();
        (s != pb::SessionState::Ready).then_some(s)
    })
    .await;
    assert_eq!(state, pb::SessionState::Expired);
    // The action is refused with why (how long it idled, the setting) and what to do.
    let said = refusal(&client, &session.session_id).await;
    assert!(said.contains("is EXPIRED (idle for 0.5 s; idle_timeout_ms 500, at 20"), "{said}");
    assert!(said.ends_with("ask for a longer idle_timeout_ms or ttl_ms at acquire"), "{said}");
    server.stop().await;
}

/// The message of the FAILED_PRECONDITION an action on an ended session gets.
async fn refusal(client: &browserpool_client::Client, id: &str) -> String {
    match client.act(id, action("title", "", json!(null))).await {
        Err(browserpool_client::Error::Status(s)) if s.code() == tonic::Code::FailedPrecondition => s.message().into(),
        other => panic!("expected FAILED_PRECONDITION, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_ends_a_busy_session() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let req = pb::AcquireRequest { wait_ms: 30_000, ttl_ms: 800, idle_timeout_ms: 60_000, ..Default::default() };
    let session = client.acquire_with(req).await.unwrap();
    // Keep it busy: activity moves the idle deadline, never the TTL.
    eventually("the TTL to end the busy session", Duration::from_secs(15), || async {
        let state = pb::SessionState::try_from(client.get(&session.session_id).await.unwrap().state).unwrap();
        if state == pb::SessionState::Expired {
            return Some(());
        }
        let _ = client.act(&session.session_id, action("title", "", json!(null))).await;
        None
    })
    .await;
    let said = refusal(&client, &session.session_id).await;
    assert!(said.contains("is EXPIRED (ttl reached: 0.8 s after acquire; ttl_ms 800, at 20"), "{said}");
    server.stop().await;
}
