//! Two real server processes sharing one database, as replicas behind a load balancer.

use std::time::{Duration, Instant};

use browserpool_client::{pb, Client};

use crate::helpers::BinaryServer;

fn code(r: Result<pb::Session, browserpool_client::Error>) -> tonic::Code {
    match r {
        Err(browserpool_client::Error::Status(s)) => s.code(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_quota_holds_across_replicas_sharing_one_database() {
    let mut a = BinaryServer::spawn().await;
    let mut b = BinaryServer::replica_of(&a);
    let (admin_a, admin_b) = (a.client().await, b.client().await);
    let tenant = pb::Tenant { id: "team".into(), max_slots: 1, max_queue: 4, ..Default::default() };
    admin_a.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    // Replicas share the signing key: a token minted on A works on B.
    let req = pb::IssueTokenRequest {
        tenant: "team".into(),
        subject: "ci".into(),
        scopes: vec!["sessions:read".into(), "sessions:write".into()],
        ttl_s: 600,
    };
    let token = admin_a.admin().issue_token(req).await.unwrap().into_inner().token;
    let on_a = Client::connect(format!("http://{}", a.grpc), &token).await.unwrap();
    let on_b = Client::connect(format!("http://{}", b.grpc), &token).await.unwrap();

    // The tenant's one slot is taken on A: B's Acquire queues, then its wait elapses.
    let first = on_a.acquire(30_000).await.unwrap();
    let started = Instant::now();
    assert_eq!(code(on_b.acquire(1_500).await), tonic::Code::DeadlineExceeded);
    assert!(started.elapsed() >= Duration::from_millis(1_400), "B waited for the slot: {:?}", started.elapsed());
    // Only A holds that session's browser: B says so instead of pretending.
    let elsewhere = on_b.release(&first.session_id).await.unwrap_err();
    assert!(elsewhere.to_string().contains("another replica"), "{elsewhere}");
    let elsewhere = on_b.act(&first.session_id, browserpool_client::action("title", "", serde_json::json!(null)));
    match elsewhere.await {
        Err(browserpool_client::Error::Status(s)) => assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s}"),
        other => panic!("act on the wrong replica: {other:?}"),
    }
    // Another tenant (default, on B) is not held up by team's quota.
    let other = admin_b.acquire(30_000).await.unwrap();
    admin_b.release(&other.session_id).await.unwrap();

    // B queues again and is served once A's session is released.
    let waiting = tokio::spawn(async move {
        let got = on_b.acquire(30_000).await;
        (on_b, got)
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!waiting.is_finished(), "B must not get a slot A holds");
    on_a.release(&first.session_id).await.unwrap();
    let (on_b, second) = waiting.await.unwrap();
    let second = second.expect("served after A released");
    assert!(second.queue_wait_ms >= 700, "it queued: {}", second.queue_wait_ms);
    // Now A is the one that waits.
    assert_eq!(code(on_a.acquire(700).await), tonic::Code::DeadlineExceeded);
    // Both replicas see both sessions in the shared store.
    let seen = on_a.sessions().get(pb::GetSessionRequest { session_id: second.session_id.clone() }).await.unwrap();
    assert_eq!(seen.into_inner().tenant, "team");
    on_b.release(&second.session_id).await.unwrap();
    assert!(on_a.acquire(30_000).await.is_ok(), "free again");

    // The audit of both replicas is one chain.
    let verified = admin_b.admin().verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(verified.ok && verified.records_checked > 10, "{verified:?}");
    let (sa, _) = a.terminate();
    let (sb, _) = b.terminate();
    assert_eq!((sa.code(), sb.code()), (Some(0), Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_dies_frees_its_slots_and_its_sessions_are_marked_crashed() {
    let mut a = BinaryServer::spawn().await;
    let mut b = BinaryServer::replica_of(&a);
    let (admin_a, admin_b) = (a.client().await, b.client().await);
    let tenant = pb::Tenant { id: "solo".into(), max_slots: 1, max_queue: 4, ..Default::default() };
    admin_a.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    let req = pb::IssueTokenRequest {
        tenant: "solo".into(),
        subject: "ci".into(),
        scopes: vec!["sessions:read".into(), "sessions:write".into()],
        ttl_s: 600,
    };
    let token = admin_a.admin().issue_token(req).await.unwrap().into_inner().token;
    let on_a = Client::connect(format!("http://{}", a.grpc), &token).await.unwrap();
    let on_b = Client::connect(format!("http://{}", b.grpc), &token).await.unwrap();
    let held = on_a.acquire(30_000).await.unwrap();

    // A dies without a word: its slot is free once its heartbeat is stale (10 s), not before.
    a.kill_hard();
    let started = Instant::now();
    let got = on_b.acquire(30_000).await.expect("served once the dead replica's slot expired");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(7), "the slot was freed too early: {waited:?}");
    // And B marks the dead replica's session CRASHED (it sweeps every 5 s).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let s = admin_b.get(&held.session_id).await.unwrap();
        if s.state == pb::SessionState::Crashed as i32 {
            break;
        }
        assert!(Instant::now() < deadline, "still {:?}", s.state);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    on_b.release(&got.session_id).await.unwrap();
    let (status, _) = b.terminate();
    assert_eq!(status.code(), Some(0));
}
