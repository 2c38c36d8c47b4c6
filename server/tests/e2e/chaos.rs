//! Faults, as an attacker or bad luck brings them: a browser or renderer killed, a page that
//! spins or eats memory, a slow page, a caller that vanishes, a session ended mid-action, a
//! server killed or stopped with work in flight. Each case is bounded in time, and each says
//! how long the answer took.

use std::time::{Duration, Instant};

use axum::response::Html;
use axum::routing::get;
use browserpool_client::{action, pb, Client};
use serde_json::json;

use crate::helpers::{act, err_code, eventually, group_members, next_step_missing, ok, BinaryServer, TestServer};

/// The URIs `/slow/<ms>` was asked for, by every chaos site of the process (tests tell theirs
/// apart by a query string).
static SLOW_ASKED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Waits until the session's page logs `text` (seen on its event stream): the action whose
/// script logs it is running in the browser.
async fn until_console(events: &mut tonic::codec::Streaming<pb::Event>, text: &str) {
    let seen = async {
        while let Some(event) = events.message().await.unwrap() {
            if matches!(event.kind, Some(pb::event::Kind::Console(c)) if c.text == text) {
                return;
            }
        }
        panic!("the event stream ended before the page logged {text:?}");
    };
    tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .unwrap_or_else(|_| panic!("the page never logged {text:?}"));
}

/// Pages that misbehave: `/slow/<ms>` answers after that long, `/spin` never finishes its
/// script, `/` is a plain page.
async fn chaos_site() -> String {
    let app = axum::Router::new()
        .route("/", get(|| async { Html("<title>Plain</title><h1 id=h>plain</h1>") }))
        .route(
            "/slow/{ms}",
            get(|axum::extract::Path(ms): axum::extract::Path<u64>, uri: axum::http::Uri| async move {
                SLOW_ASKED.lock().unwrap().push(uri.to_string());
                // The page's slowness, not a wait of the test's.
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Html("<title>Slow</title><p>finally</p>")
            }),
        )
        .route("/spin", get(|| async { Html("<title>Spin</title><script>while (true) {}</script>") }));
    let addr = crate::helpers::serve_loopback(app).await;
    format!("http://{addr}")
}

fn timed(name: &str, selector: &str, payload: impl Into<serde_json::Value>, timeout_ms: u32) -> pb::Action {
    let mut a = action(name, selector, payload);
    a.timeout_ms = timeout_ms;
    a
}

/// The leased worker's browser pid (its process group) from `PoolStatus`, which names the
/// session it serves.
async fn browser_pid(client: &Client, session_id: &str) -> i32 {
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let worker = status.workers.iter().find(|w| w.session_id == session_id).expect("PoolStatus names the session");
    assert_eq!(worker.tenant, "default");
    assert!(worker.pss_bytes > 0 && worker.pss_bytes <= worker.rss_bytes, "{worker:?}");
    worker.pid as i32
}

/// Polls `state` of a session until it is `want`; returns how long that took.
async fn until_state(client: &Client, id: &str, want: pb::SessionState, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let state = pb::SessionState::try_from(client.get(id).await.unwrap().state).unwrap();
        if state == want {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "session still {state:?} after {within:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_browser_is_a_dead_browser_even_to_a_caller_that_keeps_retrying() {
    // One slot: the next acquire proves the frozen session's slot was freed.
    let server = TestServer::start_with(|a| {
        a.warm = 1;
        a.max_workers = 1;
        a.browser_unresponsive_after = Duration::from_secs(4);
    })
    .await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("evaluate", "", "1 + 1")).await);
    let pid = browser_pid(&client, &id).await;
    let processes = worker_processes(pid);
    assert!(processes.len() > 1, "a browser and its helpers: {processes:?}");
    let mut events = client.sessions().events(pb::EventsRequest { session_id: id.clone() }).await.unwrap().into_inner();
    // SAFETY: stopping the worker's process group, which this test's server started.
    unsafe { libc::killpg(pid, libc::SIGSTOP) };
    let frozen = Instant::now();
    // `url` is asked of the browser, not of a cache: a frozen browser cannot answer it.
    let mut url = action("url", "", json!(null));
    url.timeout_ms = 500;
    assert_eq!(err_code(&act(&client, &id, url).await), pb::ErrorCode::Timeout);
    // A caller that retries timed-out actions keeps nothing alive.
    let ended = loop {
        let session = client.get(&id).await.unwrap();
        if session.state != pb::SessionState::Ready as i32 {
            break session;
        }
        assert!(frozen.elapsed() < Duration::from_secs(15), "the frozen session is still READY after 15 s");
        let mut eval = action("evaluate", "", "1 + 1");
        eval.timeout_ms = 300;
        let _ = client.act(&id, eval).await;
    };
    let took = frozen.elapsed();
    eprintln!("SIGSTOP of the browser (unanswered after 4 s) -> CRASHED in {took:?}");
    assert_eq!(pb::SessionState::try_from(ended.state).unwrap(), pb::SessionState::Crashed);
    // Silence counts from the last answered probe, up to one probe interval (2 s) before the
    // stop: never sooner than that.
    assert!(took >= Duration::from_secs(2), "ended before the bound: {took:?}");
    let mut reason = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), events.message()).await.unwrap().unwrap() {
        if let Some(pb::event::Kind::SessionEnded(e)) = event.kind {
            reason = Some(e.reason);
        }
    }
    let reason = reason.expect("Events got SessionEnded");
    assert!(reason.contains("browser stopped answering"), "{reason}");
    // Every process of the browser is killed, stopped as it was.
    eventually("the frozen browser's processes to be killed", Duration::from_secs(5), || async {
        (!processes.iter().any(|pid| alive(*pid))).then_some(())
    })
    .await;
    // The only slot is free again.
    let next = client.acquire(30_000).await.expect("the frozen session's slot is free");
    ok(&act(&client, &next.session_id, action("evaluate", "", "1 + 1")).await);
    client.release(&next.session_id).await.unwrap();
    server.stop().await;
}

/// The server stands still (SIGSTOP, as a host stall or a debugger would), its browsers do not:
/// on waking, each browser's probe has gone unanswered for three times the bound at once, and
/// none of that silence is theirs, so no session ends for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stood_still_keeps_its_sessions_when_it_wakes() {
    let mut server = BinaryServer::spawn_with(&["--browser-unresponsive-after", "4s", "--warm", "2"]).await;
    let client = server.client().await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let id = client.acquire(30_000).await.unwrap().session_id;
        ok(&act(&client, &id, action("evaluate", "", "1 + 1")).await);
        ids.push(id);
    }
    // SAFETY: signalling our own child, the server alone (its browsers run on).
    unsafe { libc::kill(server.pid() as i32, libc::SIGSTOP) };
    crate::helpers::until_stopped(server.pid()).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    // SAFETY: as above.
    unsafe { libc::kill(server.pid() as i32, libc::SIGCONT) };
    // Past the bound again with the server running: the browsers answer, so nothing ends.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for id in &ids {
        let session = client.get(id).await.unwrap();
        assert_eq!(pb::SessionState::try_from(session.state).unwrap(), pb::SessionState::Ready, "{id}");
        assert_eq!(ok(&act(&client, id, action("evaluate", "", "2 + 2")).await), json!(4));
        client.release(id).await.unwrap();
    }
    let (status, log) = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    let died: Vec<_> = log.iter().filter(|l| l.contains("worker died")).collect();
    assert!(died.is_empty(), "a browser was declared dead for the server's own stall: {died:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_actions_do_not_hold_a_session_past_its_idle_timeout() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let req = pb::AcquireRequest { wait_ms: 30_000, idle_timeout_ms: 2_000, ..Default::default() };
    let id = client.acquire_with(req).await.unwrap().session_id;
    let pid = browser_pid(&client, &id).await;
    // SAFETY: stopping the worker's process group, which this test's server started.
    unsafe { libc::killpg(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let ended = loop {
        let session = client.get(&id).await.unwrap();
        if session.state != pb::SessionState::Ready as i32 {
            break session;
        }
        assert!(started.elapsed() < Duration::from_secs(8), "timed-out actions kept the session READY");
        let mut eval = action("evaluate", "", "1 + 1");
        eval.timeout_ms = 300;
        // The last one may meet the session's end instead.
        let code = err_code(&act(&client, &id, eval).await);
        assert!(matches!(code, pb::ErrorCode::Timeout | pb::ErrorCode::SessionClosed), "{code:?}");
    };
    eprintln!(
        "idle timeout 2 s with timed-out actions every 0.3 s -> {:?} after {:?}",
        pb::SessionState::try_from(ended.state).unwrap(),
        started.elapsed()
    );
    assert_eq!(pb::SessionState::try_from(ended.state).unwrap(), pb::SessionState::Expired);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_browser_ends_its_session_at_once_with_nobody_calling() {
    // One slot: the next acquire proves the dead session's slot was freed.
    let server = TestServer::start_with(|a| {
        a.warm = 1;
        a.max_workers = 1;
    })
    .await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let id = session.session_id.clone();
    let mut events = client.sessions().events(pb::EventsRequest { session_id: id.clone() }).await.unwrap().into_inner();
    let (drive_tx, drive_rx) = tokio::sync::mpsc::channel(4);
    drive_tx.send(pb::DriveRequest { session_id: id.clone(), action: None }).await.unwrap();
    let mut drive =
        client.sessions().drive(tokio_stream::wrappers::ReceiverStream::new(drive_rx)).await.unwrap().into_inner();
    assert!(matches!(drive.message().await.unwrap().unwrap().kind, Some(pb::drive_event::Kind::Attached(_))));

    let pid = browser_pid(&client, &id).await;
    // SAFETY: the worker's main browser process, which this test's server started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let took = until_state(&client, &id, pb::SessionState::Crashed, Duration::from_secs(5)).await;
    eprintln!("kill -9 of the browser -> CRASHED in {took:?}");
    assert!(took < Duration::from_secs(3), "noticed after {took:?}");

    // Both streams get the end and then end.
    let mut ended = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), events.message()).await.unwrap().unwrap() {
        if let Some(pb::event::Kind::SessionEnded(e)) = event.kind {
            ended = Some(e);
        }
    }
    let ended = ended.expect("Events got SessionEnded");
    assert_eq!(pb::SessionState::try_from(ended.state).unwrap(), pb::SessionState::Crashed);
    assert!(ended.reason.contains("chromium died"), "{}", ended.reason);
    let mut drive_ended = false;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), drive.message()).await.unwrap().unwrap() {
        if let Some(pb::drive_event::Kind::Event(e)) = event.kind {
            drive_ended |= matches!(e.kind, Some(pb::event::Kind::SessionEnded(_)));
        }
    }
    assert!(drive_ended, "Drive got SessionEnded before it ended");

    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    assert!(status.workers.iter().all(|w| w.session_id != id), "{:?}", status.workers);
    // The only slot is free again.
    let next = client.acquire(30_000).await.expect("the crashed session's slot is free");
    ok(&act(&client, &next.session_id, action("evaluate", "", "1 + 1")).await);
    client.release(&next.session_id).await.unwrap();
    drop(drive_tx);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_renderer_fails_its_action_at_once_and_the_tab_comes_back() {
    let server = TestServer::start().await;
    let site = chaos_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);
    let pid = browser_pid(&client, &id).await;

    let mut events = client.sessions().events(pb::EventsRequest { session_id: id.clone() }).await.unwrap().into_inner();
    let waiting = {
        let (client, id) = (client.clone(), id.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let script = "console.log('waiting'); new Promise(r => setTimeout(r, 60000))";
            let r = act(&client, &id, timed("evaluate", "", script, 90_000)).await;
            (r, started.elapsed())
        })
    };
    // The renderers die under the running action, not before it starts.
    until_console(&mut events, "waiting").await;
    let renderers = group_members(pid, "--type=renderer");
    assert!(!renderers.is_empty(), "the worker has renderers");
    let killed = Instant::now();
    for renderer in renderers {
        // SAFETY: renderers of this test's worker.
        unsafe { libc::kill(renderer, libc::SIGKILL) };
    }
    let (r, _) = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("answered").unwrap();
    let took = killed.elapsed();
    eprintln!("renderers killed -> TAB_CRASHED in {took:?}");
    assert_eq!(err_code(&r), pb::ErrorCode::TabCrashed, "{:?}", r.error);
    assert!(!next_step_missing(&r.error.as_ref().unwrap().message), "no next step in {:?}", r.error);
    assert!(took < Duration::from_secs(3), "{took:?}");

    // The next action on the tab says so at once; a navigation brings it back.
    let started = Instant::now();
    let r = act(&client, &id, timed("title", "", json!(null), 10_000)).await;
    assert_eq!(err_code(&r), pb::ErrorCode::TabCrashed, "{:?}", r.error);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("Plain"));
    let state = pb::SessionState::try_from(client.get(&id).await.unwrap().state).unwrap();
    assert_eq!(state, pb::SessionState::Ready);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_eating_memory_is_a_crashed_tab_not_a_long_timeout() {
    let server = TestServer::start().await;
    let site = chaos_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);
    let started = Instant::now();
    let eat = "const keep = []; while (true) { keep.push(new Array(1 << 20).fill(1.5)); } 0";
    let r = act(&client, &id, timed("evaluate", "", eat, 120_000)).await;
    eprintln!("allocating until out of memory -> {:?} after {:?}", r.error.as_ref().map(|e| e.code), started.elapsed());
    assert_eq!(err_code(&r), pb::ErrorCode::TabCrashed, "{:?}", r.error);
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("Plain"));
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// Every action after a stuck one answers promptly and right.
async fn tab_answers(client: &Client, id: &str, site: &str) {
    let started = Instant::now();
    assert_eq!(ok(&act(client, id, timed("evaluate", "", "6 * 7", 5_000)).await), json!(42));
    ok(&act(client, id, timed("navigate", "", format!("{site}/"), 5_000)).await);
    assert_eq!(ok(&act(client, id, timed("title", "", json!(null), 5_000)).await), json!("Plain"));
    assert!(started.elapsed() < Duration::from_secs(5), "the tab answered slowly: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_script_times_out_and_leaves_its_tab_usable() {
    let server = TestServer::start().await;
    let site = chaos_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);

    let started = Instant::now();
    let r = act(&client, &id, timed("evaluate", "", "while (true) {}", 2_000)).await;
    assert_eq!(err_code(&r), pb::ErrorCode::Timeout, "{:?}", r.error);
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    tab_answers(&client, &id, &site).await;

    // A page whose own script spins while it loads, navigated to and loaded as HTML.
    let r = act(&client, &id, timed("navigate", "", format!("{site}/spin"), 2_000)).await;
    assert_eq!(err_code(&r), pb::ErrorCode::Timeout, "{:?}", r.error);
    tab_answers(&client, &id, &site).await;
    let r = act(&client, &id, timed("load_html", "", "<title>x</title><script>while (true) {}</script>", 2_000)).await;
    assert_eq!(err_code(&r), pb::ErrorCode::Timeout, "{:?}", r.error);
    tab_answers(&client, &id, &site).await;
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_are_the_callers_and_a_late_page_blocks_nothing() {
    let server = TestServer::start().await;
    let site = chaos_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;

    // Past the fixed inner deadlines there were (10 s for a navigation, 30 s for any command
    // chromiumoxide sends): the caller's deadline holds.
    let started = Instant::now();
    ok(&act(&client, &id, timed("navigate", "", format!("{site}/slow/11000"), 30_000)).await);
    assert!(started.elapsed() >= Duration::from_secs(11));
    let busy = "const t = Date.now(); while (Date.now() - t < 31000) {}";
    let html = format!("<title>Busy</title><script>{busy}</script>");
    let started = Instant::now();
    ok(&act(&client, &id, timed("load_html", "", html, 45_000)).await);
    eprintln!("load_html of a page busy for 31 s -> ok after {:?}", started.elapsed());

    // A navigation slower than its deadline times out on time, and leaves nothing behind.
    let started = Instant::now();
    let r = act(&client, &id, timed("navigate", "", format!("{site}/slow/20000"), 2_000)).await;
    assert_eq!(err_code(&r), pb::ErrorCode::Timeout, "{:?}", r.error);
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    tab_answers(&client, &id, &site).await;

    // A caller that vanishes mid-navigation leaves nothing behind either.
    let vanishing = {
        let (client, id, site) = (client.clone(), id.clone(), site.clone());
        tokio::spawn(async move {
            client.act(&id, timed("navigate", "", format!("{site}/slow/20000?vanishing"), 60_000)).await
        })
    };
    // The caller vanishes once its navigation is under way: the page was asked for.
    eventually("the vanishing navigation to reach the page", Duration::from_secs(10), || async {
        SLOW_ASKED.lock().unwrap().iter().any(|u| u.ends_with("?vanishing")).then_some(())
    })
    .await;
    vanishing.abort();
    tab_answers(&client, &id, &site).await;
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// Starts a minute-long action on `id` and returns once it runs in the page; the handle gives
/// its answer and when that came.
async fn long_action(client: &Client, id: &str) -> tokio::task::JoinHandle<(pb::ActionResult, Instant)> {
    let mut events = client.sessions().events(pb::EventsRequest { session_id: id.into() }).await.unwrap().into_inner();
    let running = {
        let (client, id) = (client.clone(), id.to_string());
        tokio::spawn(async move {
            let script = "console.log('long action running'); new Promise(r => setTimeout(r, 60000))";
            let r = client.act(&id, timed("evaluate", "", script, 90_000)).await.unwrap();
            (r, Instant::now())
        })
    };
    until_console(&mut events, "long action running").await;
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_interrupts_its_action_at_once() {
    let server = TestServer::start_with(|a| a.max_workers = 2).await;
    let client = server.admin().await;
    let console = client.admin();

    for how in ["kill", "release", "ttl"] {
        let req =
            pb::AcquireRequest { wait_ms: 30_000, ttl_ms: if how == "ttl" { 2_000 } else { 0 }, ..Default::default() };
        let id = client.acquire_with(req).await.unwrap().session_id;
        let running = long_action(&client, &id).await;
        let ended_at = Instant::now();
        match how {
            "kill" => {
                let req = pb::KillSessionRequest { session_id: id.clone(), reason: "runaway".into() };
                console.clone().kill_session(req).await.unwrap();
            }
            "release" => {
                client.release(&id).await.unwrap();
            }
            _ => {}
        }
        let (r, answered) = tokio::time::timeout(Duration::from_secs(10), running).await.expect("answered").unwrap();
        let took = answered.duration_since(ended_at);
        eprintln!("{how} with an action running -> answered in {took:?}");
        assert_eq!(err_code(&r), pb::ErrorCode::SessionClosed, "{how}: {:?}", r.error);
        let said = &r.error.as_ref().unwrap().message;
        assert!(!next_step_missing(said), "{how}: no next step in {said:?}");
        let bound = if how == "ttl" { Duration::from_secs(4) } else { Duration::from_secs(2) };
        assert!(took < bound, "{how}: {took:?}");
        let want = match how {
            "kill" => pb::SessionState::Killed,
            "release" => pb::SessionState::Closed,
            _ => pb::SessionState::Expired,
        };
        until_state(&client, &id, want, Duration::from_secs(5)).await;
    }
    server.stop().await;
}

/// SIGTERM, and the wait for the exit, off the async threads; the server comes back for its
/// database URL.
async fn terminate(mut server: BinaryServer) -> (std::process::ExitStatus, BinaryServer) {
    tokio::task::spawn_blocking(move || {
        let (status, _) = server.terminate();
        (status, server)
    })
    .await
    .unwrap()
}

/// Pids of processes whose command line contains `needle`.
fn pids_naming(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline).contains(needle).then_some(pid)
        })
        .collect()
}

/// The real uid of a process, if it still exists.
fn uid_of(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// The live processes of the worker whose browser (or one of whose processes) is `pid`: every
/// process of its uid where the worker has a uid of its own (a root server); where it runs as
/// the suite's own uid (a server that is not root), those of its process group.
fn worker_processes(pid: i32) -> Vec<i32> {
    let Some(uid) = uid_of(pid) else { return Vec::new() };
    // SAFETY: geteuid has no preconditions.
    if uid != unsafe { libc::geteuid() } {
        return processes_of(&[uid]);
    }
    // SAFETY: getpgid has no preconditions; a vanished pid answers -1.
    let pgid = unsafe { libc::getpgid(pid) };
    if pgid <= 0 {
        return Vec::new();
    }
    crate::helpers::group_members(pgid, "").into_iter().filter(|p| alive(*p)).collect()
}

/// Live processes (not zombies) whose real uid is one of `uids`.
fn processes_of(uids: &[u32]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| uid_of(*pid).is_some_and(|uid| uid != 0 && uids.contains(&uid)) && alive(*pid))
        .collect()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_hard_takes_its_browsers_with_it_and_a_restart_ends_its_sessions() {
    let mut server = BinaryServer::spawn().await;
    let client = server.client().await;
    let ids = [client.acquire(30_000).await.unwrap().session_id, client.acquire(30_000).await.unwrap().session_id];
    let profiles = format!("{}/", browserpool_server::server::profiles_dir(server.dir.path()).display());
    let before = pids_naming(&profiles);
    assert!(before.len() >= 2, "two leased browsers and their processes: {before:?}");
    // Renderers need not name the profile; they run as the worker's uid (or, under a server
    // that is not root, in its process group). Only processes seen now count: a later server
    // may take the freed port, and with it the uid.
    let mut of_uids: Vec<i32> = before.iter().flat_map(|pid| worker_processes(*pid)).collect();
    of_uids.sort_unstable();
    of_uids.dedup();
    assert!(!of_uids.is_empty(), "the workers' processes: {before:?}");
    let killed = Instant::now();
    server.kill_server_only();
    // Nobody restarts it: the kernel takes its browsers, every process of them.
    let gone = async {
        loop {
            let left: Vec<i32> = pids_naming(&profiles).into_iter().filter(|pid| alive(*pid)).collect();
            if left.is_empty() && !of_uids.iter().any(|pid| alive(*pid)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(2), gone).await.is_err() {
        panic!(
            "2 s after kill -9 of the server, its browsers still run: {:?}, of their uids {:?}",
            pids_naming(&profiles).into_iter().filter(|pid| alive(*pid)).collect::<Vec<_>>(),
            of_uids.iter().filter(|pid| alive(**pid)).collect::<Vec<_>>()
        );
    }
    eprintln!("kill -9 of the server -> its {} browser processes gone in {:?}", of_uids.len(), killed.elapsed());

    let restarted = server.restart();
    let client = restarted.client().await;
    for id in &ids {
        let session = client.get(id).await.unwrap();
        assert_eq!(pb::SessionState::try_from(session.state).unwrap(), pb::SessionState::Crashed, "{id}");
    }
    // The new server works on the same dirs.
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("evaluate", "", "1 + 1")).await);
    client.release(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_gives_running_actions_the_grace_then_kills_only_their_sessions_and_exits_on_time() {
    let _timing = crate::helpers::TIMING.read().await;
    let grace = Duration::from_secs(2);
    let server = BinaryServer::spawn_with(&["--shutdown-grace", "2s"]).await;
    let client = server.client().await;
    let busy = client.acquire(30_000).await.unwrap().session_id;
    let idle = client.acquire(30_000).await.unwrap().session_id;
    let running = long_action(&client, &busy).await;
    // /readyz, asked every 50 ms from the signal on: 503 each time, until the process is gone.
    let http = server.http.clone();
    let polling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let poller = {
        let polling = polling.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while polling.load(std::sync::atomic::Ordering::SeqCst) {
                let asked = Instant::now();
                let answer = match tokio::net::TcpStream::connect(&http).await {
                    Err(_) => "refused".to_string(),
                    Ok(mut conn) => {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let req = format!("GET /readyz HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n");
                        let _ = conn.write_all(req.as_bytes()).await;
                        let mut out = String::new();
                        let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_to_string(&mut out)).await;
                        out.lines().next().unwrap_or("no answer").to_string()
                    }
                };
                seen.push((asked, answer));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            seen
        })
    };
    let started = Instant::now();
    let (status, server) = terminate(server).await;
    let took = started.elapsed();
    let exited = Instant::now();
    polling.store(false, std::sync::atomic::Ordering::SeqCst);
    let seen = poller.await.unwrap();
    eprintln!(
        "SIGTERM with --shutdown-grace 2s, one busy and one idle session -> exit {:?} after {took:?}",
        status.code()
    );
    assert_eq!(status.code(), Some(0));
    assert!(took <= grace + Duration::from_millis(500), "exit after {took:?}, more than the grace plus 0.5 s");
    // From the signal to the exit, /readyz said 503 (only the listener's close in the last
    // moment refuses, or closes unanswered a connection the kernel had already taken).
    let signalled = started + Duration::from_millis(20);
    let answered: Vec<_> = seen.iter().filter(|(at, _)| *at > signalled && *at < exited).collect();
    assert!(answered.len() >= 10, "{seen:?}");
    for (at, answer) in &answered {
        let before_exit = exited.saturating_duration_since(*at);
        assert!(
            answer.starts_with("HTTP/1.1 503")
                || (["refused", "no answer"].contains(&answer.as_str()) && before_exit < Duration::from_millis(200)),
            "/readyz {before_exit:?} before the exit: {answer}"
        );
    }
    let (r, _) = running.await.unwrap();
    assert_eq!(err_code(&r), pb::ErrorCode::SessionClosed, "{:?}", r.error);
    let store = browserpool_server::store::Store::open(&server.database_url).await.unwrap();
    let record = store.session(&busy).await.unwrap().unwrap();
    assert_eq!(record.state.as_str(), "KILLED", "the session whose action was cut short");
    assert!(record.end_reason.as_deref().unwrap_or_default().contains("grace"), "{:?}", record.end_reason);
    let record = store.session(&idle).await.unwrap().unwrap();
    assert_eq!(record.state.as_str(), "CLOSED", "the session with nothing running: {:?}", record.end_reason);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_a_data_dir_is_refused_and_leaves_the_first_alone() {
    let server = BinaryServer::spawn().await;
    let client = server.client().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let second = tokio::task::spawn_blocking({
        let (dir, url) = (server.dir.path().to_path_buf(), server.database_url.clone());
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_browserpool"))
                .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
                .arg("--data-dir")
                .arg(dir)
                .arg("--database-url")
                .arg(url)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(stderr.contains("another browserpool") && stderr.contains(&server.pid().to_string()), "{stderr}");
    // The first server's browser was not reaped by the refused one.
    ok(&act(&client, &id, action("evaluate", "", "1 + 1")).await);
    client.release(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_live_sessions_keep_working_until_released() {
    let mut server = BinaryServer::spawn_with(&["--drain-timeout", "60s", "--shutdown-grace", "2s"]).await;
    let client = server.client().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let (pid, http) = (server.pid(), server.http.clone());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let readyz = format!("http://{http}/readyz");
    eventually("/readyz to turn 503", Duration::from_secs(5), || async {
        crate::lifecycle::http_get(&readyz).await.starts_with("HTTP/1.1 503").then_some(())
    })
    .await;
    // Draining: no new session, the live one works as before.
    let refused = client.acquire(1_000).await.unwrap_err();
    assert_eq!(crate::helpers::status_code(refused), tonic::Code::Unavailable);
    assert_eq!(ok(&act(&client, &id, action("evaluate", "", "6 * 7")).await), json!(42));
    // And goes on working: nothing announces that the drain will not end it, so it is watched
    // over a window, acting every 100 ms.
    let ended = tokio::time::timeout(Duration::from_millis(500), async {
        loop {
            assert_eq!(ok(&act(&client, &id, action("evaluate", "", "1 + 1")).await), json!(2));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(ended.is_err());
    // Released, the server finishes its stop at once and exits 0.
    client.release(&id).await.unwrap();
    let released = Instant::now();
    let (status, log) = tokio::task::spawn_blocking(move || server.terminate_wait()).await.unwrap();
    eprintln!("drain: exit {:?} {:?} after the last session was released", status.code(), released.elapsed());
    assert_eq!(status.code(), Some(0));
    assert!(released.elapsed() < Duration::from_secs(10), "{:?}", released.elapsed());
    assert!(log.iter().any(|l| l.contains("draining: live sessions go on")), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_runs_out_kills_what_is_left_and_exits_zero() {
    let server = BinaryServer::spawn_with(&["--drain-timeout", "1s"]).await;
    let client = server.client().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let started = Instant::now();
    let (status, server) = terminate(server).await;
    eprintln!("drain timeout 1s with a session left -> exit {:?} after {:?}", status.code(), started.elapsed());
    assert_eq!(status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let store = browserpool_server::store::Store::open(&server.database_url).await.unwrap();
    let record = store.session(&id).await.unwrap().unwrap();
    assert_eq!(record.state.as_str(), "KILLED");
    assert!(record.end_reason.as_deref().unwrap_or_default().contains("drain timeout"), "{:?}", record.end_reason);
    store.close().await;
}

/// SIGTERM while a browser boots (here a script that never prints its DevTools endpoint):
/// the boot ends where it stands, its process with it, and the server exits at once rather
/// than after the launch timeout. On a busy host a spare booting at idle priority is exactly
/// this: CI once waited 21 s for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_boot_in_flight_without_waiting_for_it() {
    use std::os::unix::fs::PermissionsExt;
    let scripts = tempfile::tempdir().unwrap();
    let pids = scripts.path().join("pids");
    let chrome = scripts.path().join("chromium");
    std::fs::write(&chrome, format!("#!/bin/sh\necho $$ >> '{}'\nexec sleep 600\n", pids.display())).unwrap();
    std::fs::set_permissions(&chrome, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The script runs as the worker's uid (a root server): it must pass, and write its pid.
    std::fs::set_permissions(scripts.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&pids, "").unwrap();
    std::fs::set_permissions(&pids, std::fs::Permissions::from_mode(0o666)).unwrap();
    let chrome = chrome.display().to_string();
    let mut server = BinaryServer::spawn_with(&["--chrome", &chrome, "--warm", "0", "--launch-timeout", "60s"]).await;
    let client = server.client().await;

    // A caller waits for the boot started for it (past its wait_ms: the boot is its).
    let waiting = tokio::spawn(async move { client.acquire(300).await });
    let booted = eventually("the boot's browser", Duration::from_secs(10), || async {
        let read = std::fs::read_to_string(&pids).unwrap();
        read.lines().next().and_then(|pid| pid.parse().ok())
    })
    .await;
    let pid: i32 = booted;
    assert!(alive(pid));

    let started = Instant::now();
    let (status, log) = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    let took = started.elapsed();
    eprintln!("SIGTERM with a boot in flight -> exit {:?} after {took:?}", status.code());
    assert_eq!(status.code(), Some(0), "{log:#?}");
    assert!(took <= Duration::from_secs(5), "exit after {took:?}: {log:#?}");
    assert!(!alive(pid), "the booting browser outlived the server");
    assert!(!log.iter().any(|l| l.contains("boots still running")), "{log:#?}");
    // Ended by the stop, not failed: no error, no backoff.
    assert!(!log.iter().any(|l| l.contains("worker failed to boot")), "{log:#?}");
    let browserpool_client::Error::Status(status) = waiting.await.unwrap().unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
}

/// A Chromium that cannot start (here a script that exits 1): `Acquire` answers UNAVAILABLE
/// with the boot's error once its wait is over, and boots back off instead of relaunching in
/// a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chromium_that_cannot_start_is_named_and_not_relaunched_in_a_loop() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let launches = dir.path().join("launches");
    let chrome = dir.path().join("chromium");
    let script = format!(
        "#!/bin/sh\necho launched >> '{}'\necho 'error while loading shared libraries: libbroken.so' >&2\nexit 1\n",
        launches.display()
    );
    std::fs::write(&chrome, script).unwrap();
    std::fs::set_permissions(&chrome, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The script runs as the worker's uid (a root server): it must pass, and write its count.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&launches, "").unwrap();
    std::fs::set_permissions(&launches, std::fs::Permissions::from_mode(0o666)).unwrap();
    let server = TestServer::start_with(|a| a.chrome = Some(chrome.clone())).await;
    let client = server.admin().await;

    let started = Instant::now();
    let browserpool_client::Error::Status(status) = client.acquire(4_000).await.unwrap_err() else { panic!() };
    let waited = started.elapsed();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("workers fail to boot"), "{status:?}");
    assert!(status.message().contains("libbroken.so"), "the boot's own error: {status:?}");
    assert!(waited >= Duration::from_secs(4), "a retry might have worked until wait_ms: {waited:?}");
    // Backing off from 0.5 s, doubling, one boot at a time: about 4 launches in 4 s (at 0,
    // 0.5, 1.5 and 3.5 s). Relaunching every second, two at a time, made 8 or more.
    let launched = std::fs::read_to_string(&launches).unwrap().lines().count();
    assert!((2..=5).contains(&launched), "{launched} launches in {waited:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chromium_that_cannot_be_executed_leaves_no_profile_behind() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let chrome = dir.path().join("chromium");
    std::fs::write(&chrome, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&chrome, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = TestServer::start_with(|a| {
        a.chrome = Some(chrome.clone());
        a.warm = 0;
    })
    .await;
    // No longer executable once the server checked it: the spawn itself fails, after the
    // worker's directories were made.
    std::fs::set_permissions(&chrome, std::fs::Permissions::from_mode(0o644)).unwrap();
    let client = server.admin().await;
    let browserpool_client::Error::Status(status) = client.acquire(1_500).await.unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("spawn"), "the boot's own error: {status:?}");
    let entries = std::fs::read_dir(server.profiles_dir()).unwrap().flatten();
    let left: Vec<_> = entries.filter(|e| e.file_name().to_string_lossy().starts_with("port-")).collect();
    assert!(left.is_empty(), "failed launches left {left:?}");
    // The stop checks the same, and that the profiles dir itself is gone.
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_deadlines_are_kept_to_within_a_hundred_milliseconds() {
    let _timing = crate::helpers::TIMING.read().await;
    let server = TestServer::start().await;
    let client = server.admin().await;
    let site = crate::helpers::fixture_site().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", json!(format!("{site}/")))).await);
    // Kept referenced, so the promise is never collected: it never settles.
    let waits: [(&str, &str, serde_json::Value); 3] = [
        ("wait_for", "#never-there", json!(null)),
        ("evaluate", "", json!("new Promise(r => { window.kept = r; })")),
        ("click", "#never-there", json!(null)),
    ];
    let mut late: Vec<(i64, String)> = Vec::new();
    for timeout_ms in [200u32, 400, 700, 1000, 1500, 2000] {
        for (name, selector, payload) in &waits {
            let mut a = action(name, selector, payload.clone());
            a.timeout_ms = timeout_ms;
            let started = Instant::now();
            let r = act(&client, &id, a).await;
            let took = started.elapsed().as_millis() as i64;
            let code = err_code(&r);
            assert!(
                matches!(code, pb::ErrorCode::Timeout | pb::ErrorCode::ElementNotFound),
                "{name} with timeout_ms {timeout_ms}: {r:?}"
            );
            late.push((took - timeout_ms as i64, format!("{name}@{timeout_ms}")));
        }
    }
    late.sort();
    let p = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize].clone();
    eprintln!(
        "answer time minus timeout_ms over {} actions: min {:?}, p50 {:?}, p95 {:?}, max {:?}",
        late.len(),
        late[0],
        p(0.5),
        p(0.95),
        late[late.len() - 1]
    );
    // Quiet, p95 is about 50 ms (the 50 ms grace of element waits' last check, and the
    // call's own round trip); the suite runs beside other tests on 2 cores, so this bounds it
    // at 250 ms, which the old 500 ms grace (every evaluate answered 505 ms late) never met.
    assert!(p(0.95).0 <= 250, "p95 lateness {:?}: {late:?}", p(0.95));
    assert!(late[0].0 >= -100, "an action answered long before its deadline: {late:?}");
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// Busy loops at normal priority, [`HOGS_PER_CORE`] per core (a load like a shared CI host's), killed
/// when dropped.
struct CpuHogs(Vec<std::process::Child>);

const HOGS_PER_CORE: usize = 12;

impl CpuHogs {
    fn start() -> CpuHogs {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        CpuHogs(
            (0..cores * HOGS_PER_CORE)
                .map(|_| std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap())
                .collect(),
        )
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_keeps_up_with_every_core_busy() {
    let _timing = crate::helpers::TIMING.write().await;
    let server = BinaryServer::spawn().await;
    let client = server.client().await;
    let site = crate::helpers::fixture_site().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", json!(format!("{site}/")))).await);
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let worker = status.workers.iter().find(|w| w.session_id == id).expect("PoolStatus names the session");
    let profile = browserpool_server::server::profiles_dir(server.dir.path()).join(format!("port-{}", worker.cdp_port));
    assert!(profile.is_dir(), "{}", profile.display());
    let processes = worker_processes(worker.pid as i32);
    assert!(processes.len() > 1, "{processes:?}");

    let hogs = CpuHogs::start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    client.release(&id).await.unwrap();
    let mut gone = None;
    let mut deleted = None;
    while (gone.is_none() || deleted.is_none()) && released.elapsed() < Duration::from_secs(10) {
        if gone.is_none() && !processes.iter().any(|pid| alive(*pid)) {
            gone = Some(released.elapsed());
        }
        if deleted.is_none() && !profile.exists() {
            deleted = Some(released.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "with {} busy loops: release -> processes gone after {gone:?}, profile deleted after {deleted:?}",
        hogs.0.len()
    );

    // Only warm (or booting) workers left: SIGTERM ends the server promptly all the same.
    let started = Instant::now();
    let (status, log) = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.terminate()
    })
    .await
    .unwrap();
    let took = started.elapsed();
    eprintln!("with {} busy loops: SIGTERM with no session -> exit {:?} after {took:?}", hogs.0.len(), status.code());
    drop(hogs);
    // Where the time went (the record and the kill each say how long they took).
    let ended: Vec<_> = log.iter().filter(|l| l.contains("session ended")).collect();
    eprintln!("{ended:?}");
    // And what the stop did, in order.
    for line in &log[log.len().saturating_sub(30)..] {
        eprintln!("  {line}");
    }
    assert!(gone.is_some_and(|t| t <= Duration::from_secs(2)), "worker processes left: {gone:?}");
    assert!(deleted.is_some_and(|t| t <= Duration::from_secs(5)), "profile left: {deleted:?}");
    assert_eq!(status.code(), Some(0));
    // A boot in flight ends where it stands instead of running out its 30 s launch timeout.
    // Killing it (and its profile's removal) under 24 busy loops on this 2-core machine took
    // up to 6.3 s in some runs (3 s in most): the bound catches a stop that waits the boot out.
    let stopped = log.iter().find(|l| l.contains("pool stopped"));
    assert!(took <= Duration::from_secs(10), "exit after {took:?}; {stopped:?}");
}
