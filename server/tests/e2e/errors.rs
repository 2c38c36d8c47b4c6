//! Every error a user meets names its cause and the next step: each action `ErrorCode` and
//! each gRPC status the server answers with, provoked as a user would and read back.
//!
//! Two codes are provoked where that is tested already, with the same check:
//! `SESSION_CLOSED` in `chaos::ending_a_session_interrupts_its_action_at_once` (kill, release,
//! TTL), `TAB_CRASHED` in `chaos::a_killed_renderer_fails_its_action_at_once_and_the_tab_comes_back`.
//! `INTERNAL` (a server bug) cannot be provoked; it says "see the server log".

use std::time::Duration;

use browserpool_client::{action, pb, Client};
use serde_json::json;

use crate::helpers::{fixture_site, next_step_missing, TestServer};

/// One error as the user saw it.
struct Seen {
    what: &'static str,
    code: String,
    message: String,
}

/// The action's error (it must have failed with `want`).
async fn failed(client: &Client, id: &str, a: pb::Action, want: pb::ErrorCode, what: &'static str) -> Seen {
    let r = client.act(id, a).await.unwrap();
    let e = r.error.unwrap_or_else(|| panic!("{what}: the action succeeded"));
    assert_eq!(pb::ErrorCode::try_from(e.code).unwrap(), want, "{what}: {}", e.message);
    let mut message = e.message;
    if !e.did_you_mean.is_empty() {
        message = format!("{message} (did you mean: {})", e.did_you_mean.join(", "));
    }
    Seen { what, code: want.as_str_name().into(), message }
}

/// The call's status (it must have failed with `want`).
fn refused<T: std::fmt::Debug>(r: Result<T, browserpool_client::Error>, want: tonic::Code, what: &'static str) -> Seen {
    match r {
        Err(browserpool_client::Error::Status(s)) => {
            assert_eq!(s.code(), want, "{what}: {s:?}");
            Seen { what, code: format!("{want:?}"), message: s.message().into() }
        }
        other => panic!("{what}: expected {want:?}, got {other:?}"),
    }
}

fn timed(name: &str, selector: &str, payload: impl Into<serde_json::Value>, timeout_ms: u32) -> pb::Action {
    pb::Action { timeout_ms, ..action(name, selector, payload) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_names_its_cause_and_the_next_step() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let admin = server.admin().await;
    let mut seen = Vec::new();
    let id = admin.acquire(30_000).await.unwrap().session_id;
    admin.act(&id, action("navigate", "", format!("{site}/"))).await.unwrap();

    // Action errors: a result with ok=false and its code.
    use pb::ErrorCode as E;
    seen.push(failed(&admin, &id, action("click", "h1[", json!(null)), E::InvalidArgument, "bad selector").await);
    seen.push(failed(&admin, &id, action("navigate", "", json!(5)), E::InvalidArgument, "bad payload").await);
    seen.push(failed(&admin, &id, action("naviagte", "", json!(null)), E::UnknownAction, "misspelt action").await);
    let missing = timed("click", "#missing", json!(null), 300);
    seen.push(failed(&admin, &id, missing, E::ElementNotFound, "no such element").await);
    let forever = timed("evaluate", "", "new Promise(() => {})", 300);
    seen.push(failed(&admin, &id, forever, E::Timeout, "action timed out").await);
    seen.push(
        failed(&admin, &id, action("evaluate", "", "throw new Error('boom')"), E::JsException, "page threw").await,
    );
    let closed = format!("http://127.0.0.1:{}/", closed_port());
    seen.push(failed(&admin, &id, action("navigate", "", closed), E::NavigationFailed, "nothing listening").await);
    let huge = json!({"clip": {"x": 0, "y": 0, "width": 20000, "height": 10}});
    seen.push(failed(&admin, &id, action("screenshot", "", huge), E::PayloadTooLarge, "result too large").await);
    seen.push(crashed_under_an_action(&admin).await);
    admin.act(&id, timed("evaluate", "", "setTimeout(() => alert('hi'), 0); 1", 5000)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    seen.push(failed(&admin, &id, action("title", "", json!(null)), E::DialogOpen, "a dialog is open").await);
    assert!(admin.act(&id, action("click", "dialog::accept", json!(null))).await.unwrap().ok);

    // A tenant of its own: no private networks, a queue of one, and a token that may only read.
    let tenant = pb::Tenant {
        id: "strict".into(),
        max_slots: 1,
        max_queue: 1,
        max_session_ttl_ms: 600_000,
        idle_timeout_ms: 60_000,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    let strict = server.client(&server.token("strict", "ci", &["sessions:write", "sessions:read"]).await).await;
    let sid = strict.acquire(30_000).await.unwrap().session_id;
    let blocked = action("navigate", "", format!("{site}/"));
    seen.push(failed(&strict, &sid, blocked, E::BlockedByPolicy, "private network").await);
    let reader = server.client(&server.token("strict", "ci", &["sessions:read"]).await).await;
    seen.push(failed(&reader, &sid, action("click", "h1", json!(null)), E::PermissionDenied, "read-only token").await);

    // Whole-call errors: a gRPC status.
    let nobody = Client::connect(server.endpoint(), "not-a-token").await.unwrap();
    seen.push(refused(nobody.acquire(1000).await, tonic::Code::Unauthenticated, "malformed token"));
    seen.push(refused(reader.acquire(1000).await, tonic::Code::PermissionDenied, "scope missing"));
    seen.push(refused(strict.get(&id).await, tonic::Code::NotFound, "another tenant's session"));
    let bad_viewport = pb::AcquireRequest {
        wait_ms: 1000,
        viewport: Some(pb::Viewport { width: 100_000, height: 1, ..Default::default() }),
        ..Default::default()
    };
    seen.push(refused(strict.acquire_with(bad_viewport).await, tonic::Code::InvalidArgument, "bad viewport"));
    seen.push(refused(strict.acquire(300).await, tonic::Code::DeadlineExceeded, "every slot in use"));
    let queued = {
        let strict = strict.clone();
        tokio::spawn(async move { strict.acquire(20_000).await })
    };
    crate::helpers::eventually("the queue to fill", Duration::from_secs(10), || async {
        (crate::helpers::queued(&admin, "strict").await == 1).then_some(())
    })
    .await;
    let full = match strict.acquire(20_000).await {
        Err(browserpool_client::Error::Status(s)) if s.code() == tonic::Code::ResourceExhausted => s,
        other => panic!("queue full: expected RESOURCE_EXHAUSTED, got {other:?}"),
    };
    seen.push(Seen { what: "queue full", code: "ResourceExhausted".into(), message: full.message().into() });
    queued.abort();
    strict.release(&sid).await.unwrap();
    seen.push(refused(
        strict.act(&sid, action("title", "", json!(null))).await,
        tonic::Code::FailedPrecondition,
        "released session",
    ));
    admin.admin().drain(pb::DrainRequest { drain: true, ..Default::default() }).await.unwrap();
    seen.push(refused(admin.acquire(1000).await, tonic::Code::Unavailable, "draining server"));
    admin.admin().drain(pb::DrainRequest { drain: false, ..Default::default() }).await.unwrap();
    admin.release(&id).await.unwrap();

    for s in &seen {
        eprintln!("{:<24} {:<22} {}", s.what, s.code, s.message);
    }
    let without: Vec<String> = seen
        .iter()
        .filter(|s| next_step_missing(&s.message))
        .map(|s| format!("{} ({}): {}", s.what, s.code, s.message))
        .collect();
    assert!(without.is_empty(), "these errors name no next step:\n{}", without.join("\n"));
    server.stop().await;
}

/// A loopback port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// SESSION_CRASHED: the browser killed while an action waits on its page.
async fn crashed_under_an_action(client: &Client) -> Seen {
    let session = client.acquire(30_000).await.unwrap();
    let running = {
        let (client, id) = (client.clone(), session.session_id.clone());
        tokio::spawn(async move { client.act(&id, timed("evaluate", "", "new Promise(() => {})", 30_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let worker = status.workers.iter().find(|w| w.worker_id == session.worker_id).expect("the session's worker");
    // SAFETY: killing the process group of a worker this test's server started.
    unsafe { libc::killpg(worker.pid as i32, libc::SIGKILL) };
    let r = tokio::time::timeout(Duration::from_secs(15), running).await.expect("answered").unwrap().unwrap();
    let e = r.error.expect("the action failed");
    assert_eq!(pb::ErrorCode::try_from(e.code).unwrap(), pb::ErrorCode::SessionCrashed, "{}", e.message);
    Seen { what: "browser crashed", code: "ERROR_CODE_SESSION_CRASHED".into(), message: e.message }
}
