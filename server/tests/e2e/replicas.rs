//! Two real server processes sharing one database, as replicas behind a load balancer.

use std::time::{Duration, Instant};

use browserpool_client::{pb, Client};

use crate::helpers::{status_code, BinaryServer};

/// Two replicas on one database (A, and B with A's signing key), a tenant with one slot, and
/// clients of that tenant on each.
struct Replicas {
    a: BinaryServer,
    b: BinaryServer,
    admin_b: Client,
    on_a: Client,
    on_b: Client,
}

async fn replicas_with_a_one_slot_tenant(tenant: &str) -> Replicas {
    let a = BinaryServer::spawn().await;
    let b = BinaryServer::replica_of(&a);
    let (admin_a, admin_b) = (a.client().await, b.client().await);
    // Replicas share the signing key: a token minted on A works on B.
    let token = one_slot_tenant(&admin_a, tenant).await;
    let on_a = Client::connect(format!("http://{}", a.grpc), &token).await.unwrap();
    let on_b = Client::connect(format!("http://{}", b.grpc), &token).await.unwrap();
    // B learns of the new tenant (its epoch) from the database on its next refresh.
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Err(status) = on_b.sessions().list(pb::ListSessionsRequest::default()).await {
        assert!(Instant::now() < deadline, "B never took the new tenant's token: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Replicas { a, b, admin_b, on_a, on_b }
}

/// Makes `tenant` with one slot and answers a token of it (subject `ci`, sessions read and
/// write).
async fn one_slot_tenant(admin: &Client, tenant: &str) -> String {
    let one_slot = pb::Tenant { id: tenant.into(), max_slots: 1, max_queue: 4, ..Default::default() };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(one_slot) }).await.unwrap();
    let req = pb::IssueTokenRequest {
        tenant: tenant.into(),
        subject: "ci".into(),
        scopes: vec!["sessions:read".into(), "sessions:write".into()],
        ttl_s: 600,
    };
    admin.admin().issue_token(req).await.unwrap().into_inner().token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_quota_holds_across_replicas_sharing_one_database() {
    let Replicas { mut a, mut b, admin_b, on_a, on_b } = replicas_with_a_one_slot_tenant("team").await;

    // The tenant's one slot is taken on A: B's Acquire queues, then its wait elapses.
    let first = on_a.acquire(30_000).await.unwrap();
    let started = Instant::now();
    assert_eq!(status_code(on_b.acquire(1_500).await.unwrap_err()), tonic::Code::DeadlineExceeded);
    assert!(started.elapsed() >= Duration::from_millis(1_400), "B waited for the slot: {:?}", started.elapsed());
    // Only A holds that session's browser: B forwards calls about it there.
    let title = on_b.act(&first.session_id, browserpool_client::action("title", "", serde_json::json!(null)));
    assert!(title.await.unwrap().ok, "B forwarded the action to A");
    // Another tenant (default, on B) is not held up by team's quota.
    let other = admin_b.acquire(30_000).await.unwrap();
    admin_b.release(&other.session_id).await.unwrap();

    // B queues again and is served once A's session is released.
    let mut waiting = tokio::spawn(async move {
        let got = on_b.acquire(30_000).await;
        (on_b, got)
    });
    // B must not get a slot A holds. Nothing announces that a grant will not come, so B's
    // Acquire is watched over a window in which it must not complete.
    let early = tokio::time::timeout(Duration::from_millis(800), &mut waiting).await;
    assert!(early.is_err(), "B must not get a slot A holds: {:?}", early.map(|r| r.map(|(_, got)| got)));
    on_a.release(&first.session_id).await.unwrap();
    let (on_b, second) = waiting.await.unwrap();
    let second = second.expect("served after A released");
    assert!(second.queue_wait_ms >= 700, "it queued: {}", second.queue_wait_ms);
    // Now A is the one that waits.
    assert_eq!(status_code(on_a.acquire(700).await.unwrap_err()), tonic::Code::DeadlineExceeded);
    // Both replicas see both sessions in the shared store.
    let seen = on_a.sessions().get(pb::GetSessionRequest { session_id: second.session_id.clone() }).await.unwrap();
    assert_eq!(seen.into_inner().tenant, "team");
    on_b.release(&second.session_id).await.unwrap();
    assert!(on_a.acquire(30_000).await.is_ok(), "free again");

    // The audit of both replicas is one chain.
    let verified = admin_b.admin().verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(verified.ok && verified.records_checked > 10, "{verified:?}");

    // The tenant deleted on A: its token stops on B too, within a second (B's refresh).
    let mut console_a = a.client().await.admin();
    let deleted = console_a.delete_tenant(pb::DeleteTenantRequest { id: "team".into(), force: true }).await;
    assert!(deleted.unwrap().into_inner().deleted);
    let started = Instant::now();
    let code = loop {
        match on_b.sessions().list(pb::ListSessionsRequest::default()).await {
            Err(status) => break status.code(),
            Ok(_) if started.elapsed() < Duration::from_millis(1_500) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(_) => panic!("B still takes the deleted tenant's token after {:?}", started.elapsed()),
        }
    };
    assert_eq!(code, tonic::Code::Unauthenticated);
    let (sa, _) = a.terminate();
    let (sb, _) = b.terminate();
    assert_eq!((sa.code(), sb.code()), (Some(0), Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_dies_frees_its_slots_and_its_sessions_are_marked_crashed() {
    let Replicas { mut a, mut b, admin_b, on_a, on_b } = replicas_with_a_one_slot_tenant("solo").await;
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

/// An action through `client` on `id`, bounded: what it answered and how long it took.
async fn act_timed(client: &Client, id: &str) -> (Result<pb::ActionResult, tonic::Code>, Duration) {
    let started = Instant::now();
    let call = client.act(id, browserpool_client::action("evaluate", "", "1 + 1"));
    let answer = match tokio::time::timeout(Duration::from_secs(30), call).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(browserpool_client::Error::Status(s))) => Err(s.code()),
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => panic!("an action hung for 30 s"),
    };
    (answer, started.elapsed())
}

async fn readyz(http: &str) -> String {
    crate::lifecycle::http_get(&format!("http://{http}/readyz")).await.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_ends_no_session_on_any_replica() {
    let test = "replicas::a_database_outage_ends_no_session_on_any_replica";
    let Some((gate, a)) = crate::helpers::behind_a_gate(test).await else { return };
    let b = BinaryServer::replica_of(&a);
    let (on_a, on_b) = (a.client().await, b.client().await);
    let held_by_a = on_a.acquire(30_000).await.unwrap().session_id;
    let held_by_b = on_b.acquire(30_000).await.unwrap().session_id;
    for (client, id) in [(&on_a, &held_by_a), (&on_b, &held_by_b), (&on_b, &held_by_a), (&on_a, &held_by_b)] {
        let (answer, _) = act_timed(client, id).await;
        crate::helpers::ok(&answer.expect("served before the outage"));
    }
    assert_eq!(readyz(&a.http).await, "HTTP/1.1 200 OK");

    // The database goes away for 20 s.
    gate.set_up(false);
    let outage = Instant::now();
    let mut seen: Vec<String> = Vec::new();
    let mut not_ready = 0;
    let mut acquires_refused = 0;
    // Actions that answered ok, per session (before, during and after the outage).
    let mut ok_on: std::collections::HashMap<String, usize> = [(held_by_a.clone(), 2), (held_by_b.clone(), 2)].into();
    let mut owners_ok = 0;
    while outage.elapsed() < Duration::from_secs(20) {
        for (via, client, id) in [("A", &on_a, &held_by_a), ("B", &on_b, &held_by_b), ("B", &on_b, &held_by_a)] {
            let (answer, took) = act_timed(client, id).await;
            let what = match &answer {
                Ok(r) if r.error.is_none() => "ok".to_string(),
                Ok(r) => format!("action error {:?}", r.error),
                Err(code) => format!("{code:?}"),
            };
            // Never a code that tells clients not to retry, never a wait for the outage.
            assert!(what == "ok" || what == "Unavailable", "{id} via {via} during the outage: {what}");
            assert!(took < Duration::from_secs(8), "{id} via {via} took {took:?} during the outage ({what})");
            // The replica holding the session serves it all along (its records wait in its
            // spool); only a call that needs the database to find the owner is refused.
            let own = (via == "A") == (id == &held_by_a);
            assert!(!own || what == "ok", "{id} on its own replica during the outage: {what}");
            if what == "ok" {
                *ok_on.entry(id.clone()).or_default() += 1;
                owners_ok += own as usize;
            }
            seen.push(format!("{id} via {via}: {what} in {} ms", took.as_millis()));
        }
        if readyz(&a.http).await.starts_with("HTTP/1.1 503") {
            not_ready += 1;
        }
        let acquire = pb::AcquireRequest { wait_ms: 1_000, ..Default::default() };
        match tokio::time::timeout(Duration::from_secs(15), on_a.acquire_with(acquire)).await {
            Ok(Err(browserpool_client::Error::Status(s))) if s.code() == tonic::Code::Unavailable => {
                acquires_refused += 1
            }
            other => panic!("an acquire during the outage: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(not_ready > 0, "/readyz never said 503 during the outage");
    assert!(acquires_refused > 0);
    gate.set_up(true);
    let back = Instant::now();
    eprintln!(
        "during a 20 s outage: {} calls ({owners_ok} ok on the session's own replica), {not_ready} /readyz 503, {acquires_refused} acquires UNAVAILABLE",
        seen.len()
    );
    for line in seen.iter().filter(|s| !s.contains(": ok in")).take(5) {
        eprintln!("  {line}");
    }

    // Back: ready again, and past a whole judging window nothing was ended.
    crate::helpers::ready_again(&a.http, back, Duration::from_secs(20)).await;
    eprintln!("/readyz 200 again {:?} after the database came back", back.elapsed());
    tokio::time::sleep(Duration::from_secs(15)).await;
    for (client, id) in [(&on_a, &held_by_a), (&on_b, &held_by_b), (&on_b, &held_by_a), (&on_a, &held_by_b)] {
        let session = client.get(id).await.unwrap();
        assert_eq!(session.state, pb::SessionState::Ready as i32, "{id}: {session:?}");
        let (answer, _) = act_timed(client, id).await;
        crate::helpers::ok(&answer.expect("served after the outage"));
        *ok_on.entry(id.clone()).or_default() += 1;
    }
    let verified = on_a.admin().verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(verified.ok, "{verified:?}");
    // Every action that answered ok has its record, the spooled ones included.
    for (id, ok) in &ok_on {
        let records = crate::helpers::ok_records(&on_a, id, "evaluate", *ok).await;
        assert_eq!(records, *ok, "{id}: one record per action that answered ok");
    }
    on_a.release(&held_by_a).await.unwrap();
    on_b.release(&held_by_b).await.unwrap();
}

/// A session released while the database is away gives its tenant slot back, and has its
/// end and the file it left recorded, once the database is back: the tenant's next session
/// is not refused for a slot nobody holds, no replica lists the session as live, and `Get`
/// lists its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_given_back_during_a_database_outage_is_free_once_it_is_back() {
    let test = "replicas::a_slot_given_back_during_a_database_outage_is_free_once_it_is_back";
    let Some((gate, a)) = crate::helpers::behind_a_gate(test).await else { return };
    let admin = a.client().await;
    let token = one_slot_tenant(&admin, "team").await;
    let team = Client::connect(format!("http://{}", a.grpc), &token).await.unwrap();
    let first = team.acquire(30_000).await.unwrap().session_id;
    team.put_file(&first, "kept.txt", b"left behind").await.unwrap();

    gate.set_up(false);
    let released = tokio::time::timeout(Duration::from_secs(15), team.release(&first)).await;
    eprintln!("release during the outage: {released:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    gate.set_up(true);
    let back = Instant::now();
    crate::helpers::ready_again(&a.http, back, Duration::from_secs(20)).await;
    let second = team.acquire(10_000).await.expect("the slot given back during the outage is free");
    eprintln!("acquired again {:?} after the database came back", back.elapsed());
    // Its end is in the database too (written before the slot): no replica takes it for live,
    // and what it left is listed.
    let ended = admin.get(&first).await.unwrap();
    assert_eq!(ended.state, pb::SessionState::Closed as i32, "{ended:?}");
    // `List` reads the row (as any replica would), not this replica's disk.
    let listed = team.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner().sessions;
    let row = listed.iter().find(|s| s.session_id == first).expect("listed");
    let names: Vec<&str> = row.artifacts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["kept.txt"], "{row:?}");
    team.release(&second.session_id).await.unwrap();
}
