//! Context envelopes between two real server processes.

use browserpool_client::{action, pb, Client};
use browserpool_server::envelope::{canonical_value, integrity};
use browserpool_server::jcs::jcs;
use serde_json::json;

use crate::helpers::{act, err_code, fixture_site, ok, BinaryServer};

async fn export(client: &Client, id: &str, include_http_auth: bool) -> pb::ContextEnvelope {
    let req = pb::ExportContextRequest { session_id: id.into(), include_http_auth, ..Default::default() };
    client.sessions().export_context(req).await.unwrap().into_inner()
}

async fn import(
    client: &Client,
    id: &str,
    env: pb::ContextEnvelope,
    strict_origin: bool,
) -> Result<pb::ImportContextResponse, tonic::Status> {
    let req = pb::ImportContextRequest { session_id: id.into(), envelope: Some(env), strict_origin };
    client.sessions().import_context(req).await.map(|r| r.into_inner())
}

async fn echoed_cookies(client: &Client, id: &str, site: &str) -> String {
    ok(&act(client, id, action("navigate", "", format!("{site}/echo-cookies"))).await);
    ok(&act(client, id, action("extract", "#cookies", json!(null))).await).as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_carries_a_signed_in_state_to_another_server() {
    let site = fixture_site().await;
    let (mut a, mut b) = (BinaryServer::spawn().await, BinaryServer::spawn().await);
    let (ca, cb) = (a.client().await, b.client().await);

    // On A: sign in, then export twice.
    let on_a = ca.acquire(30_000).await.unwrap().session_id;
    ok(&act(&ca, &on_a, action("navigate", "", format!("{site}/set-cookies"))).await);
    let env = export(&ca, &on_a, false).await;
    assert_eq!(env.version, 1);
    assert_eq!(env.origin, site);
    let names: Vec<_> = env.cookies.iter().map(|c| (c.name.as_str(), c.value.as_str())).collect();
    assert_eq!(names, [("session", "abc123"), ("user", "alice")], "sorted by (domain, path, name)");
    assert_eq!(env.cookies[0].expires, -1.0, "session cookie");
    assert!(env.cookies[1].http_only && env.cookies[1].same_site == "Lax" && env.cookies[1].expires > 0.0);
    assert_eq!(env.local_storage.get("k").map(String::as_str), Some("v"));
    assert!(env.http_auth.is_none() && env.user_agent.is_empty());
    assert_eq!(env.integrity, integrity(&env), "integrity recomputes from the message alone");
    let again = export(&ca, &on_a, false).await;
    let same_time =
        pb::ContextEnvelope { captured_at_ms: env.captured_at_ms, integrity: String::new(), ..again.clone() };
    let first = pb::ContextEnvelope { integrity: String::new(), ..env.clone() };
    assert_eq!(jcs(&canonical_value(&same_time)), jcs(&canonical_value(&first)), "deterministic apart from capturedAt");

    // On B: a cookie set before the import is gone after it (strict replace).
    let on_b = cb.acquire(30_000).await.unwrap().session_id;
    ok(&act(&cb, &on_b, action("navigate", "", format!("{site}/about"))).await);
    ok(&act(&cb, &on_b, action("cookies", "", json!({"op": "set", "cookies": [{"name": "stale", "value": "1"}]})))
        .await);
    assert!(echoed_cookies(&cb, &on_b, &site).await.contains("stale=1"));
    let applied = import(&cb, &on_b, env.clone(), false).await.unwrap();
    assert!(applied.ok, "{applied:?}");
    assert_eq!((applied.applied_cookies, applied.applied_storage_keys), (2, 1));
    let echoed = echoed_cookies(&cb, &on_b, &site).await;
    assert!(echoed.contains("session=abc123") && echoed.contains("user=alice"), "{echoed}");
    assert!(!echoed.contains("stale"), "import replaces: {echoed}");
    assert_eq!(ok(&act(&cb, &on_b, action("evaluate", "", "localStorage.getItem('k')")).await), json!("v"));

    // A tampered envelope is refused and applies nothing.
    let fresh = cb.acquire(30_000).await.unwrap().session_id;
    let mut tampered = env.clone();
    tampered.cookies[0].value = "abc124".into();
    let refused = import(&cb, &fresh, tampered, false).await.unwrap();
    assert!(!refused.ok && refused.integrity_error.contains("integrity mismatch"), "{refused:?}");
    assert_eq!(ok(&act(&cb, &fresh, action("cookies", "", json!({"op": "get"}))).await), json!([]), "jar stays empty");

    // Unsupported version and strict origin are clear errors.
    let mut v2 = env.clone();
    v2.version = 2;
    assert_eq!(import(&cb, &fresh, v2, false).await.unwrap_err().code(), tonic::Code::InvalidArgument);
    assert_eq!(import(&cb, &fresh, env.clone(), true).await.unwrap_err().code(), tonic::Code::FailedPrecondition);

    // Import at Acquire: one call and the session starts signed in (B holds two workers).
    cb.release(&on_b).await.unwrap();
    cb.release(&fresh).await.unwrap();
    let req = pb::AcquireRequest { wait_ms: 30_000, context: Some(env.clone()), ..Default::default() };
    let signed_in = cb.acquire_with(req).await.unwrap().session_id;
    let echoed = echoed_cookies(&cb, &signed_in, &site).await;
    assert!(echoed.contains("session=abc123") && echoed.contains("user=alice"), "{echoed}");
    let mut bad = env.clone();
    bad.origin = "http://elsewhere.test".into();
    let req = pb::AcquireRequest { wait_ms: 30_000, context: Some(bad), ..Default::default() };
    let browserpool_client::Error::Status(status) = cb.acquire_with(req).await.unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "a tampered context fails before any browser is leased");

    for (c, id) in [(&ca, &on_a), (&cb, &signed_in)] {
        c.release(id).await.unwrap();
    }
    let (status, log) = a.terminate();
    assert_eq!(status.code(), Some(0));
    assert!(!log.iter().any(|l| l.contains("abc123") || l.contains("alice")), "cookie values never logged");
    let (status, log) = b.terminate();
    assert_eq!(status.code(), Some(0));
    assert!(!log.iter().any(|l| l.contains("abc123") || l.contains("alice")), "cookie values never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_credentials_travel_only_when_asked() {
    let site = fixture_site().await;
    let (mut a, b) = (BinaryServer::spawn().await, BinaryServer::spawn().await);
    let (ca, cb) = (a.client().await, b.client().await);
    let on_a = ca.acquire(30_000).await.unwrap().session_id;
    let r = act(&ca, &on_a, pb::Action { timeout_ms: 10_000, ..action("navigate", "", format!("{site}/auth")) }).await;
    assert_eq!(err_code(&r), pb::ErrorCode::DialogOpen);
    ok(&act(&ca, &on_a, action("type", "dialog::username", "alice")).await);
    ok(&act(&ca, &on_a, action("type", "dialog::password", "secret")).await);
    ok(&act(&ca, &on_a, pb::Action { timeout_ms: 10_000, ..action("click", "dialog::accept", json!(null)) }).await);

    let without = export(&ca, &on_a, false).await;
    assert!(without.http_auth.is_none(), "credentials only with include_http_auth");
    let with = export(&ca, &on_a, true).await;
    let auth = with.http_auth.clone().expect("credentials exported");
    assert_eq!((auth.username.as_str(), auth.password.as_str()), ("alice", "secret"));

    // On B, after import, the 401 page of that origin opens without a dialog.
    let on_b = cb.acquire(30_000).await.unwrap().session_id;
    assert!(import(&cb, &on_b, with, false).await.unwrap().ok);
    let r = act(&cb, &on_b, pb::Action { timeout_ms: 10_000, ..action("navigate", "", format!("{site}/auth")) }).await;
    ok(&r);
    assert_eq!(ok(&act(&cb, &on_b, action("extract", "h1", json!(null))).await), json!("welcome alice"));
    ca.release(&on_a).await.unwrap();
    cb.release(&on_b).await.unwrap();
    let (_, log) = a.terminate();
    assert!(!log.iter().any(|l| l.contains("secret")), "passwords never logged");
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookies_action_scopes_and_bounds() {
    let site = fixture_site().await;
    let server = crate::helpers::TestServer::start().await;
    let admin = server.admin().await;
    let id = admin.acquire(30_000).await.unwrap().session_id;
    ok(&act(&admin, &id, action("navigate", "", format!("{site}/set-cookies"))).await);
    let got = ok(&act(&admin, &id, action("cookies", "", json!({"op": "get"}))).await);
    assert_eq!(got.as_array().unwrap().len(), 2);

    let plain = server.client(&server.token("default", "admin", &["sessions:read", "sessions:write"]).await).await;
    for op in ["get", "set", "clear"] {
        let r = act(&plain, &id, action("cookies", "", json!({"op": op, "cookies": []}))).await;
        assert_eq!(err_code(&r), pb::ErrorCode::PermissionDenied, "{op} needs a context scope");
    }
    let exporter = server.client(&server.token("default", "admin", &["context:export"]).await).await;
    ok(&act(&exporter, &id, action("cookies", "", json!({"op": "get"}))).await);
    let r = act(&exporter, &id, action("cookies", "", json!({"op": "clear"}))).await;
    assert_eq!(err_code(&r), pb::ErrorCode::PermissionDenied, "clear needs context:import");
    // The string form too: it used to pass with context:export and clear the jar.
    let r = act(&exporter, &id, action("cookies", "", json!("clear"))).await;
    assert_eq!(err_code(&r), pb::ErrorCode::PermissionDenied, "\"clear\" needs context:import");
    assert_eq!(ok(&act(&exporter, &id, action("cookies", "", json!("get"))).await).as_array().unwrap().len(), 2);

    let many: Vec<_> = (0..3001).map(|i| json!({"name": format!("c{i}"), "value": "v"})).collect();
    let r = act(&admin, &id, action("cookies", "", json!({"op": "set", "cookies": many}))).await;
    assert_eq!(err_code(&r), pb::ErrorCode::PayloadTooLarge);
    let r = act(
        &admin,
        &id,
        action("cookies", "", json!({"op": "set", "cookies": [{"name": "x", "value": "1", "same_site": "Often"}]})),
    )
    .await;
    assert_eq!(err_code(&r), pb::ErrorCode::InvalidArgument);
    assert_eq!(ok(&act(&admin, &id, action("cookies", "", json!({"op": "clear"}))).await)["cleared"], json!(2));
    assert_eq!(ok(&act(&admin, &id, action("cookies", "", json!({"op": "get"}))).await), json!([]));
    admin.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_for_an_origin_the_policy_refuses_changes_nothing() {
    let site = fixture_site().await;
    let server = crate::helpers::TestServer::start().await;
    let mut console = server.admin().await.admin();
    // Neither tenant reaches loopback; `parent` reaches subdomains of example.test only.
    for (id, allow_private_networks, allow_hosts) in
        [("locked", false, vec![]), ("parent", true, vec!["*.example.test".to_string()])]
    {
        let tenant = pb::Tenant {
            id: id.into(),
            max_slots: 1,
            max_queue: 1,
            allow_private_networks,
            allow_hosts,
            ..Default::default()
        };
        console.put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    }
    let scopes = ["sessions:read", "sessions:write", "context:import", "context:export"];
    let cookie = |domain: &str| pb::Cookie {
        name: "planted".into(),
        value: "1".into(),
        domain: domain.into(),
        path: "/".into(),
        expires: -1.0,
        ..Default::default()
    };
    let cases = [
        ("locked", site.clone(), cookie("127.0.0.1"), "private"),
        // The origin is allowed, but the cookie's parent domain is not.
        ("parent", "https://www.example.test".to_string(), cookie(".example.test"), "cookies[0].domain"),
    ];
    for (tenant, origin, cookie, why) in cases {
        let client = server.client(&server.token(tenant, "job", &scopes).await).await;
        let id = client.acquire(30_000).await.unwrap().session_id;
        let mut env = pb::ContextEnvelope {
            version: 1,
            origin: origin.clone(),
            cookies: vec![cookie],
            local_storage: [("k".to_string(), "v".to_string())].into(),
            http_auth: Some(pb::HttpAuth { username: "alice".into(), password: "secret".into() }),
            ..Default::default()
        };
        env.integrity = integrity(&env);
        let refused = import(&client, &id, env, false).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{tenant}: {refused:?}");
        assert!(refused.message().contains(why), "{tenant}: {}", refused.message());

        // Nothing was applied: no cookie in the jar, no credentials for the origin.
        let jar = ok(&act(&client, &id, action("cookies", "", json!({"op": "get"}))).await);
        assert_eq!(jar, json!([]), "{tenant}: the jar stays empty");
        let req = pb::ExportContextRequest {
            session_id: id.clone(),
            origin,
            include_storage: Some(false),
            include_http_auth: true,
            ..Default::default()
        };
        let after = client.sessions().export_context(req).await.unwrap().into_inner();
        assert!(after.cookies.is_empty() && after.http_auth.is_none(), "{tenant}: {after:?}");

        // The `cookies` action is held to the same rule: nothing is planted where the policy
        // refuses the cookie's origin or domain.
        let c = &env_cookie(tenant);
        let set = act(&client, &id, action("cookies", "", json!({"op": "set", "cookies": [c]}))).await;
        assert_eq!(err_code(&set), pb::ErrorCode::BlockedByPolicy, "{tenant}: {set:?}");
        let jar = ok(&act(&client, &id, action("cookies", "", json!({"op": "get"}))).await);
        assert_eq!(jar, json!([]), "{tenant}: cookies set planted nothing");
        client.release(&id).await.unwrap();
    }
    server.stop().await;
}

/// The cookie each tenant of the test above may not plant, as a `cookies set` payload.
fn env_cookie(tenant: &str) -> serde_json::Value {
    match tenant {
        "locked" => json!({"name": "planted", "value": "1", "domain": "127.0.0.1", "path": "/"}),
        _ => json!({"name": "planted", "value": "1", "domain": ".example.test", "path": "/"}),
    }
}
