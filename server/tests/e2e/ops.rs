//! The ops console: list across tenants, kill, drain.

use std::time::Duration;

use browserpool_client::{action, pb};
use serde_json::json;

use crate::helpers::{act, ok, Db, TestServer};
use crate::lifecycle::http_get;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_kill_and_drain() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let mut console = admin.admin();
    console
        .put_tenant(pb::PutTenantRequest {
            tenant: Some(pb::Tenant { id: "ops".into(), max_slots: 2, max_queue: 2, ..Default::default() }),
        })
        .await
        .unwrap();
    let owner = server.client(&server.token("ops", "job", &["sessions:read", "sessions:write"]).await).await;
    let victim = owner.acquire(30_000).await.unwrap();
    let mut events = owner
        .sessions()
        .events(pb::EventsRequest { session_id: victim.session_id.clone() })
        .await
        .unwrap()
        .into_inner();

    // ListSessions crosses tenants, filters by tenant and state, and pages.
    let mine = admin.acquire(30_000).await.unwrap();
    let all = console
        .list_sessions(pb::AdminListSessionsRequest { page_size: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.sessions.len(), 1);
    assert!(!all.next_page_token.is_empty());
    let page2 = console
        .list_sessions(pb::AdminListSessionsRequest {
            page_size: 1,
            page_token: all.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_ne!(page2.sessions[0].session_id, all.sessions[0].session_id);
    let ops_only = console
        .list_sessions(pb::AdminListSessionsRequest { tenant: "ops".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        ops_only.sessions.iter().map(|s| s.session_id.as_str()).collect::<Vec<_>>(),
        [victim.session_id.as_str()]
    );
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
    assert_eq!(
        pb::SessionState::try_from(owner.get(&victim.session_id).await.unwrap().state).unwrap(),
        pb::SessionState::Killed
    );
    let again = console
        .kill_session(pb::KillSessionRequest { session_id: victim.session_id.clone(), reason: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.killed, "killing twice changes nothing");

    // Drain: readiness fails, Acquire is UNAVAILABLE, live sessions go on; undrain resumes.
    let drained = console.drain(pb::DrainRequest { drain: true, ..Default::default() }).await.unwrap().into_inner();
    assert!(drained.draining);
    assert!(http_get(&format!("http://{}/readyz", server.http)).await.starts_with("HTTP/1.1 503"));
    let status = match admin.acquire(1000).await.unwrap_err() {
        browserpool_client::Error::Status(s) => s,
        other => panic!("{other}"),
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    ok(&act(&admin, &mine.session_id, action("evaluate", "", "1 + 1")).await);
    let status = console.pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    assert!(status.draining);
    assert!(
        status.workers.iter().all(|w| w.rss_bytes > 10 << 20),
        "each Chromium group uses memory: {:?}",
        status.workers
    );
    console.drain(pb::DrainRequest { drain: false, ..Default::default() }).await.unwrap();
    assert!(http_get(&format!("http://{}/readyz", server.http)).await.starts_with("HTTP/1.1 200"));
    let after = admin.acquire(30_000).await.unwrap();
    ok(&act(&admin, &after.session_id, action("title", "", json!(null))).await);
    admin.release(&after.session_id).await.unwrap();
    admin.release(&mine.session_id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_records_every_call_and_detects_tampering() {
    use crate::helpers::fixture_site;

    let server = TestServer::start().await;
    let site = fixture_site().await;
    let admin = server.admin().await;
    let mut console = admin.admin();
    let id = admin.acquire(30_000).await.unwrap().session_id;
    ok(&act(&admin, &id, action("goto", "", format!("{site}/?token=secret#frag"))).await);
    ok(&act(&admin, &id, action("type", "#name", "typed-secret-text")).await);
    admin.release(&id).await.unwrap();
    // A refused call is recorded too.
    let stranger = browserpool_client::Client::connect(server.endpoint(), "not-a-token").await.unwrap();
    assert!(stranger.get(&id).await.is_err());

    // Records are written off the hot path: poll (bounded) until the session's are in.
    let query = |session: String| pb::QueryAuditRequest { session_id: session, limit: 50, ..Default::default() };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let records = loop {
        let mut stream = console.query_audit(query(id.clone())).await.unwrap().into_inner();
        let mut got = Vec::new();
        while let Some(r) = stream.message().await.unwrap() {
            got.push(r);
        }
        if got.len() >= 7 || std::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // RPC-level records name the session too (Acquire the one it created), newest first; its
    // end is recorded as it ends, within Release.
    let calls: Vec<_> = records.iter().filter(|r| r.action.is_empty()).map(|r| r.rpc.as_str()).collect();
    assert_eq!(
        calls,
        [
            "/browserpool.v1.Sessions/Release",
            "SESSION ENDED",
            "/browserpool.v1.Sessions/Act",
            "/browserpool.v1.Sessions/Act",
            "/browserpool.v1.Sessions/Acquire"
        ]
    );
    // Action records, newest first: type, then navigate.
    let records: Vec<_> = records.into_iter().filter(|r| !r.action.is_empty()).collect();
    assert_eq!(records.iter().map(|r| r.action.as_str()).collect::<Vec<_>>(), ["type", "navigate"]);
    let nav = &records[1];
    assert_eq!((nav.alias_of.as_str(), nav.rpc.as_str()), ("goto", "/browserpool.v1.Sessions/Act"));
    assert_eq!(nav.target, format!("{site}/"), "the query and fragment never reach the trail");
    assert_eq!(records[0].target, "#name", "the selector, never the typed text");
    assert!(records.iter().all(|r| r.tenant == "default" && r.jti_hash.len() == 64 && r.outcome == "ok"));

    // The refused call names no session: poll (bounded) for it on its own, since its record
    // is written off the hot path like the others and may come after them.
    let denied = |rpcs: &[(String, String, String)]| {
        rpcs.iter().any(|(rpc, o, c)| rpc == "/browserpool.v1.Sessions/Get" && o == "denied" && c == "Unauthenticated")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let rpcs = loop {
        let mut all = console
            .query_audit(pb::QueryAuditRequest { limit: 1000, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let mut rpcs = Vec::new();
        while let Some(r) = all.message().await.unwrap() {
            assert!(!r.target.contains("typed-secret-text") && !r.target.contains("token=secret"));
            rpcs.push((r.rpc, r.outcome, r.code));
        }
        if denied(&rpcs) || std::time::Instant::now() > deadline {
            break rpcs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(rpcs.iter().any(|(rpc, _, _)| rpc == "/browserpool.v1.Sessions/Acquire"));
    assert!(denied(&rpcs), "the refused Get is recorded: {rpcs:?}");

    let verified = console.verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(verified.ok && verified.records_checked >= 4, "{verified:?}");

    // Behind the server's back: the database refuses edits, and once the trigger is dropped an
    // edit is named by VerifyAudit.
    let db = Db::connect(&server.database_url).await;
    let refused = db.exec("UPDATE audit SET target = 'x' WHERE seq = 2", "UPDATE audit SET target = 'x' WHERE seq = 2");
    assert!(refused.await.is_err(), "the trigger refuses UPDATE");
    let refused = db.exec("DELETE FROM audit WHERE seq = 2", "DELETE FROM audit WHERE seq = 2").await;
    assert!(refused.is_err(), "and DELETE");
    db.exec("DROP TRIGGER audit_no_update", "DROP TRIGGER audit_no_update ON audit").await.unwrap();
    let forged = "UPDATE audit SET target = 'forged' WHERE seq = 2";
    assert_eq!(db.exec(forged, forged).await.unwrap(), 1);
    let verified = console.verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(!verified.ok);
    assert_eq!(verified.first_bad_seq, 2, "{verified:?}");
    db.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_targets_never_carry_url_credentials() {
    use crate::helpers::fixture_site;

    let server = TestServer::start().await;
    let site = fixture_site().await;
    let with_credentials = site.replacen("http://", "http://user:secret@", 1);
    let admin = server.admin().await;
    let mut console = admin.admin();
    let id = admin.acquire(30_000).await.unwrap().session_id;
    ok(&act(&admin, &id, action("navigate", "", format!("{with_credentials}/"))).await);
    ok(&act(&admin, &id, action("navigate", "", json!({"url": format!("{with_credentials}/about")}))).await);
    ok(&act(&admin, &id, action("new_tab", "", format!("{with_credentials}/second"))).await);
    // An envelope's origin is the client's text: a refused one is recorded, its userinfo not.
    let env = pb::ContextEnvelope {
        version: 1,
        origin: with_credentials.clone(),
        integrity: "0".repeat(64),
        ..Default::default()
    };
    let req = pb::ImportContextRequest { session_id: id.clone(), envelope: Some(env), strict_origin: false };
    assert!(!admin.sessions().import_context(req).await.unwrap().into_inner().ok);
    admin.release(&id).await.unwrap();

    let query = pb::QueryAuditRequest { session_id: id.clone(), limit: 50, ..Default::default() };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let records = loop {
        let mut stream = console.query_audit(query.clone()).await.unwrap().into_inner();
        let mut got = Vec::new();
        while let Some(r) = stream.message().await.unwrap() {
            got.push(r);
        }
        if got.iter().any(|r| r.rpc.ends_with("/Release")) || std::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let targets: Vec<&str> = records.iter().map(|r| r.target.as_str()).collect();
    for target in [format!("{site}/"), format!("{site}/about"), format!("{site}/second")] {
        assert!(targets.contains(&target.as_str()), "{target} recorded: {targets:?}");
    }
    assert!(targets.iter().any(|t| t.starts_with(&format!("origin={site} "))), "{targets:?}");
    assert!(!targets.iter().any(|t| t.contains("secret") || t.contains("user:")), "{targets:?}");
    server.stop().await;
}

/// The audit table refuses rows (a trigger): actions go on, their records wait in the local
/// spool and `/readyz` says the trail is behind; once the table takes rows again every record
/// is in the chain, which verifies. (With nowhere to keep a record, actions are refused:
/// `faults::a_full_disk_fails_closed_and_recovers_with_every_record`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_go_on_while_the_audit_table_refuses_rows_and_every_record_arrives() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let id = admin.acquire(30_000).await.unwrap().session_id;
    let spool = server.data_dir.path().join("audit-spool.jsonl");
    let readyz_url = format!("http://{}/readyz", server.http);
    let db = Db::connect(&server.database_url).await;
    db.exec(
        "CREATE TRIGGER audit_broken BEFORE INSERT ON audit BEGIN SELECT RAISE(ABORT, 'disk on fire'); END",
        "CREATE TRIGGER audit_broken BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION audit_append_only()",
    )
    .await
    .unwrap();
    let mut answered = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&spool).unwrap_or_default().lines().count() < 5 {
        assert!(std::time::Instant::now() < deadline, "no record reached {} after {answered} actions", spool.display());
        match admin.act(&id, action("title", "", json!(null))).await {
            Ok(r) => {
                ok(&r);
                answered += 1;
            }
            Err(e) => panic!("an action was refused while the spool could keep its record: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // 503 throughout; the reason alternates with `database refuses writes` (each retry of
    // the spool fails again, each heartbeat succeeds).
    crate::helpers::eventually("/readyz to say the trail is behind", Duration::from_secs(10), || async {
        let body = http_get(&readyz_url).await;
        assert!(body.contains(" 503 "), "{body}");
        body.contains("audit trail behind").then_some(())
    })
    .await;
    db.exec("DROP TRIGGER audit_broken", "DROP TRIGGER audit_broken ON audit").await.unwrap();
    // The spool goes into the chain by itself.
    crate::helpers::eventually("the spool to be in the chain", Duration::from_secs(10), || async {
        http_get(&readyz_url).await.contains("200 OK").then_some(())
    })
    .await;
    assert_eq!(std::fs::read_to_string(&spool).unwrap(), "");
    let verified = admin.admin().verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(verified.ok, "{verified:?}");
    let records = crate::helpers::ok_records(&admin, &id, "title", answered).await;
    assert_eq!(records, answered, "one record per action that answered");
    db.close().await;
    admin.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_an_autoscaler_can_use() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let tenant = pb::Tenant { id: "scaled".into(), max_slots: 1, max_queue: 5, ..Default::default() };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    let token = server.token("scaled", "ci", &["sessions:read", "sessions:write"]).await;
    let client = server.client(&token).await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("evaluate", "", "1 + 1")).await);
    let failed = act(&client, &id, action("evaluate", "", "throw new Error('no')")).await;
    assert!(!failed.ok);
    let _ = act(&client, &id, action("no_such_action", "", json!(null))).await;
    // A second caller of the tenant waits in its queue.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(30_000).await })
    };
    let metrics_url = format!("http://{}/metrics", server.http);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let metrics = http_get(&metrics_url).await;
        if metrics.contains("browserpool_queue_depth{tenant=\"scaled\"} 1") {
            break metrics;
        }
        assert!(std::time::Instant::now() < deadline, "no queue depth: {metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for line in [
        "browserpool_workers{state=\"leased\"} 1",
        "browserpool_workers_capacity 2",
        "browserpool_acquires_total{outcome=\"ok\"} 1",
        "browserpool_acquire_wait_seconds_count 1",
        "browserpool_actions_total{action=\"evaluate\",outcome=\"ok\"} 1",
        "browserpool_actions_total{action=\"evaluate\",outcome=\"error\"} 1",
        "browserpool_actions_total{action=\"unknown\",outcome=\"error\"} 1",
        "browserpool_action_duration_seconds_count{action=\"evaluate\"} 2",
        "# TYPE browserpool_action_duration_seconds histogram",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    assert!(!metrics.contains("no_such_action"), "a client's string became a label");
    client.release(&id).await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    client.release(&next.session_id).await.unwrap();
    server.stop().await;
}
