//! The ops console: list across tenants, kill, drain.

use std::time::Duration;

use browserpool_client::{action, pb};
use serde_json::json;

use crate::helpers::{act, ok, TestServer};
use crate::lifecycle::reqwest_get;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_kill_and_drain() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let mut console = admin.admin();
    console
        .put_tenant(pb::PutTenantRequest { tenant: Some(pb::Tenant { id: "ops".into(), max_slots: 2, max_queue: 2, ..Default::default() }) })
        .await
        .unwrap();
    let owner = server.client(&server.token("ops", "job", &["sessions:read", "sessions:write"]).await).await;
    let victim = owner.acquire(30_000).await.unwrap();
    let mut events = owner.sessions().events(pb::EventsRequest { session_id: victim.session_id.clone() }).await.unwrap().into_inner();

    // ListSessions crosses tenants, filters by tenant and state, and pages.
    let mine = admin.acquire(30_000).await.unwrap();
    let all = console.list_sessions(pb::AdminListSessionsRequest { page_size: 1, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(all.sessions.len(), 1);
    assert!(!all.next_page_token.is_empty());
    let page2 = console
        .list_sessions(pb::AdminListSessionsRequest { page_size: 1, page_token: all.next_page_token, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_ne!(page2.sessions[0].session_id, all.sessions[0].session_id);
    let ops_only = console.list_sessions(pb::AdminListSessionsRequest { tenant: "ops".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(ops_only.sessions.iter().map(|s| s.session_id.as_str()).collect::<Vec<_>>(), [victim.session_id.as_str()]);
    // The owner's own List shows only its tenant.
    let owner_list = owner.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner();
    assert!(owner_list.sessions.iter().all(|s| s.tenant == "ops"));

    // Kill: state KILLED, the owner's stream ends with SessionEnded, the worker is replaced.
    let killed = console
        .kill_session(pb::KillSessionRequest { session_id: victim.session_id.clone(), reason: "runaway".into() })
        .await
        .unwrap()
        .into_inner();
    assert!(killed.killed);
    let mut last = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), events.message()).await.unwrap().unwrap() {
        last = e.kind;
    }
    match last {
        Some(pb::event::Kind::SessionEnded(end)) => {
            assert_eq!(pb::SessionState::try_from(end.state).unwrap(), pb::SessionState::Killed);
            assert!(end.reason.contains("runaway"), "{}", end.reason);
        }
        other => panic!("the last event must be session_ended, got {other:?}"),
    }
    assert_eq!(pb::SessionState::try_from(owner.get(&victim.session_id).await.unwrap().state).unwrap(), pb::SessionState::Killed);
    let again = console.kill_session(pb::KillSessionRequest { session_id: victim.session_id.clone(), reason: String::new() }).await.unwrap().into_inner();
    assert!(!again.killed, "killing twice changes nothing");

    // Drain: readiness fails, Acquire is UNAVAILABLE, live sessions go on; undrain resumes.
    let drained = console.drain(pb::DrainRequest { drain: true }).await.unwrap().into_inner();
    assert!(drained.draining);
    assert!(reqwest_get(&format!("http://{}/readyz", server.http)).await.starts_with("HTTP/1.1 503"));
    let status = match admin.acquire(1000).await.unwrap_err() {
        browserpool_client::Error::Status(s) => s,
        other => panic!("{other}"),
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    ok(&act(&admin, &mine.session_id, action("evaluate", "", "1 + 1")).await);
    let status = console.pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    assert!(status.draining);
    console.drain(pb::DrainRequest { drain: false }).await.unwrap();
    assert!(reqwest_get(&format!("http://{}/readyz", server.http)).await.starts_with("HTTP/1.1 200"));
    let after = admin.acquire(30_000).await.unwrap();
    ok(&act(&admin, &after.session_id, action("title", "", json!(null))).await);
    admin.release(&after.session_id).await.unwrap();
    admin.release(&mine.session_id).await.unwrap();
    server.stop().await;
}
