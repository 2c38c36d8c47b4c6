//! Tenants, per-tenant slots, the fair queue's refusals, Renew and forced deletion.

use std::time::Duration;

use browserpool_client::{pb, Client};

use crate::helpers::{clock_passes, eventually, now_ms, queued, status_code, BinaryServer, TestServer};

fn tenant(id: &str, max_slots: u32, max_queue: u32) -> pb::Tenant {
    pb::Tenant {
        id: id.into(),
        max_slots,
        max_queue,
        max_session_ttl_ms: 600_000,
        idle_timeout_ms: 60_000,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_slots_queue_overflow_renew_and_forced_delete() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let admin = server.admin().await;
    let mut console = admin.admin();

    let put =
        console.put_tenant(pb::PutTenantRequest { tenant: Some(tenant("team-a", 1, 1)) }).await.unwrap().into_inner();
    assert!(put.created);
    let again =
        console.put_tenant(pb::PutTenantRequest { tenant: Some(tenant("team-a", 1, 1)) }).await.unwrap().into_inner();
    assert!(!again.created, "put replaces");
    let bad = console.put_tenant(pb::PutTenantRequest { tenant: Some(tenant("Team A!", 1, 1)) }).await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    let listed = console.list_tenants(pb::ListTenantsRequest {}).await.unwrap().into_inner();
    let ids: Vec<_> = listed.tenants.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["default", "team-a"]);

    let token = server.token("team-a", "ci", &["sessions:read", "sessions:write"]).await;
    let a: Client = server.client(&token).await;
    let first = a.acquire(30_000).await.unwrap();
    assert_eq!(first.tenant, "team-a");

    // The server has room, the tenant does not: its next request waits, then times out,
    // saying it is the tenant's quota.
    let browserpool_client::Error::Status(status) = a.acquire(300).await.unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert_eq!(
        status.message(),
        "no browser became free within 300 ms: tenant team-a is at its quota: 1 of its max_slots 1 sessions in use; \
         retry, or wait longer (a larger wait_ms)"
    );
    // One waiter fills max_queue=1; the next is refused at once with the queue length.
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire(60_000).await })
    };
    eventually("the waiter to join team-a's queue", Duration::from_secs(10), || async {
        (queued(&admin, "team-a").await == 1).then_some(())
    })
    .await;
    // From here the waiter is known to wait: its reported wait is at least what follows.
    let seen_waiting = std::time::Instant::now();
    let status = match a.acquire(60_000).await.unwrap_err() {
        browserpool_client::Error::Status(s) => s,
        other => panic!("{other}"),
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(status.message().contains("1 waiting"), "{status}");
    let usage = console.pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let team = usage.tenants.iter().find(|t| t.tenant == "team-a").unwrap();
    assert_eq!((team.active, team.queued, team.max_slots), (1, 1, 1));

    // Another tenant is not held up by team-a's queue.
    let other = admin.acquire(30_000).await.unwrap();
    admin.release(&other.session_id).await.unwrap();

    // Release serves the waiter, which reports its wait.
    let waited_at_least = seen_waiting.elapsed().as_millis() as u32;
    a.release(&first.session_id).await.unwrap();
    let second = waiter.await.unwrap().expect("queued request served after release");
    let served_ms = now_ms();
    assert!(
        second.queue_wait_ms >= waited_at_least.max(1),
        "queue_wait_ms {} but the waiter was seen queued {waited_at_least} ms before the release",
        second.queue_wait_ms
    );

    // Renew pushes the idle deadline, never past the TTL. Deadlines have millisecond
    // resolution: a renew in the acquire's own millisecond could not move it.
    let before = second.idle_deadline.unwrap();
    clock_passes(served_ms).await;
    let renewed = a
        .sessions()
        .renew(pb::RenewRequest { session_id: second.session_id.clone(), idle_timeout_ms: 0 })
        .await
        .unwrap()
        .into_inner();
    let after = renewed.idle_deadline.unwrap();
    assert!((after.seconds, after.nanos) > (before.seconds, before.nanos), "renew moves the idle deadline");
    let capped = a
        .sessions()
        .renew(pb::RenewRequest { session_id: second.session_id.clone(), idle_timeout_ms: u32::MAX })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(capped.idle_deadline, capped.expires_at, "capped at the TTL");

    // Deleting a tenant with live sessions is refused unless forced; forcing kills them.
    let refused =
        console.delete_tenant(pb::DeleteTenantRequest { id: "team-a".into(), force: false }).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let deleted =
        console.delete_tenant(pb::DeleteTenantRequest { id: "team-a".into(), force: true }).await.unwrap().into_inner();
    assert!(deleted.deleted);
    let killed = admin.get(&second.session_id).await.unwrap();
    assert_eq!(pb::SessionState::try_from(killed.state).unwrap(), pb::SessionState::Killed);
    assert_eq!(
        status_code(a.acquire(1000).await.unwrap_err()),
        tonic::Code::Unauthenticated,
        "a deleted tenant's token does nothing"
    );
    let default =
        console.delete_tenant(pb::DeleteTenantRequest { id: "default".into(), force: true }).await.unwrap_err();
    assert_eq!(default.code(), tonic::Code::FailedPrecondition);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigation_policy_holds_for_the_first_url_and_for_subresources() {
    use browserpool_client::action;
    use serde_json::json;

    use crate::helpers::{act, err_code, fixture_site, ok, pixel_hits};

    let server = TestServer::start().await;
    let site = fixture_site().await;
    let admin = server.admin().await;
    let mut console = admin.admin();
    // A new tenant reaches no private network unless told.
    console.put_tenant(pb::PutTenantRequest { tenant: Some(tenant("locked", 2, 2)) }).await.unwrap();
    let hosts = pb::Tenant {
        allow_private_networks: true,
        allow_hosts: vec!["*.example.test".into()],
        ..tenant("listed", 2, 2)
    };
    console.put_tenant(pb::PutTenantRequest { tenant: Some(hosts) }).await.unwrap();

    let locked = server.client(&server.token("locked", "job", &["sessions:read", "sessions:write"]).await).await;
    let id = locked.acquire(30_000).await.unwrap().session_id;
    for url in [format!("{site}/"), "http://localhost:9/".into(), "http://169.254.169.254/latest/meta-data/".into()] {
        let r = act(&locked, &id, action("navigate", "", url.clone())).await;
        assert_eq!(err_code(&r), pb::ErrorCode::BlockedByPolicy, "{url}");
    }
    // A subresource of an allowed document is held to the policy too: the request never leaves.
    let before = pixel_hits();
    ok(&act(&locked, &id, action("load_html", "", format!("<img src=\"{site}/pixel?locked\">"))).await);
    // A request that never happens has no event to wait on: watching for 500 ms is the only way
    // to observe its absence.
    ok(&act(&locked, &id, action("wait_for", "", json!({"ms": 500}))).await);
    assert_eq!(pixel_hits(), before, "a blocked subresource must not reach the fixture");
    locked.release(&id).await.unwrap();

    // allow_hosts narrows even an allowed private network to the listed names.
    let listed = server.client(&server.token("listed", "job", &["sessions:read", "sessions:write"]).await).await;
    let id = listed.acquire(30_000).await.unwrap().session_id;
    let r = act(&listed, &id, action("navigate", "", format!("{site}/"))).await;
    assert_eq!(err_code(&r), pb::ErrorCode::BlockedByPolicy);
    listed.release(&id).await.unwrap();

    // The control: the default tenant (local development) loads it all, subresource included.
    let id = admin.acquire(30_000).await.unwrap().session_id;
    ok(&act(&admin, &id, action("navigate", "", format!("{site}/"))).await);
    ok(&act(&admin, &id, action("load_html", "", format!("<img src=\"{site}/pixel?default\">"))).await);
    eventually("the default tenant's subresource to be fetched", Duration::from_secs(5), || async {
        (pixel_hits() > before).then_some(())
    })
    .await;
    admin.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_tenants_tokens_die_and_stay_dead_when_it_is_created_again() {
    let server = TestServer::start_with(|a| a.warm = 0).await;
    let mut console = server.admin().await.admin();
    let put = |max_slots| pb::PutTenantRequest { tenant: Some(tenant("team-z", max_slots, 1)) };
    assert!(console.put_tenant(put(1)).await.unwrap().into_inner().created);
    let old = server.client(&server.token("team-z", "ci", &["sessions:read"]).await).await;
    let get = |c: &Client| {
        let mut s = c.sessions();
        async move { s.get(pb::GetSessionRequest { session_id: "s-none".into() }).await.unwrap_err().code() }
    };
    assert!(old.sessions().list(pb::ListSessionsRequest::default()).await.is_ok(), "the fresh token works");
    assert_eq!(get(&old).await, tonic::Code::NotFound, "Get gets past auth");
    // Updating the tenant keeps its epoch: its tokens live on.
    assert!(!console.put_tenant(put(2)).await.unwrap().into_inner().created);
    assert!(old.sessions().list(pb::ListSessionsRequest::default()).await.is_ok(), "an update keeps tokens");

    let deleted = console.delete_tenant(pb::DeleteTenantRequest { id: "team-z".into(), force: false }).await;
    assert!(deleted.unwrap().into_inner().deleted);
    let status = old.sessions().list(pb::ListSessionsRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(status.message().starts_with("token's tenant was deleted (or deleted and created again)"), "{status:?}");
    assert_eq!(get(&old).await, tonic::Code::Unauthenticated);

    // The same id again is another tenant: the old token stays dead, a new one works.
    assert!(console.put_tenant(put(1)).await.unwrap().into_inner().created);
    let status = old.sessions().list(pb::ListSessionsRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "re-creation must not revive: {status:?}");
    assert_eq!(get(&old).await, tonic::Code::Unauthenticated);
    let new = server.client(&server.token("team-z", "ci", &["sessions:read"]).await).await;
    assert!(new.sessions().list(pb::ListSessionsRequest::default()).await.is_ok(), "a new token works");
    assert_eq!(get(&new).await, tonic::Code::NotFound);
    server.stop().await;
}

/// --max-workers, --idle-timeout and --max-session-ttl give the `default` tenant its quotas
/// when it is created; one given again at a later start sets them again (logged), one not
/// given leaves what is stored, an operator's `PutTenant` included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_tenant_takes_the_flags_given_at_every_start() {
    async fn default_tenant(server: &BinaryServer) -> (u32, u32, u32) {
        let listed = server.client().await.admin().list_tenants(pb::ListTenantsRequest {}).await.unwrap();
        let t = listed.into_inner().tenants.into_iter().find(|t| t.id == "default").unwrap();
        (t.max_slots, t.idle_timeout_ms, t.max_session_ttl_ms)
    }
    let mut first = BinaryServer::spawn_with(&["--warm", "0", "--idle-timeout", "7m"]).await;
    assert_eq!(default_tenant(&first).await, (2, 420_000, 3_600_000), "seeded from the first start's flags");
    let mine = pb::Tenant {
        id: "default".into(),
        max_slots: 5,
        max_queue: 100,
        max_session_ttl_ms: 600_000,
        idle_timeout_ms: 60_000,
        allow_private_networks: true,
        ..Default::default()
    };
    first.client().await.admin().put_tenant(pb::PutTenantRequest { tenant: Some(mine) }).await.unwrap();
    let (status, _) = first.terminate();
    assert!(status.success(), "{status:?}");

    let mut second = first.restart_with(&["--warm", "0", "--max-workers", "3"]);
    assert_eq!(
        default_tenant(&second).await,
        (3, 60_000, 600_000),
        "--max-workers given sets max_slots; the idle timeout and TTL, not given, stay as put"
    );
    let logged = second.startup_log.iter().find(|l| l.contains("default tenant set from the flags given"));
    let logged = logged.unwrap_or_else(|| panic!("no log line of the change: {:#?}", second.startup_log));
    assert!(logged.contains("max_slots (--max-workers) 5 -> 3"), "{logged}");
    second.terminate();
}
