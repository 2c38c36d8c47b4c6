//! Tokens and scopes over real gRPC.

use base64::Engine;
use browserpool_client::{action, pb, Client};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

use std::time::Duration;

use crate::helpers::{err_code, eventually, ok, BinaryServer, TestServer};

fn secret(server: &TestServer) -> Vec<u8> {
    let text = std::fs::read_to_string(server.data_dir.path().join("jwt-hs256.key")).unwrap();
    base64::engine::general_purpose::STANDARD.decode(text.trim()).unwrap()
}

/// A token signed with the server's own secret but with the given claims and algorithm.
fn forge(server: &TestServer, alg: Algorithm, claims: serde_json::Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), &claims, &EncodingKey::from_secret(&secret(server))).unwrap()
}

/// The `default` tenant's epoch, read from the admin token the server wrote.
fn default_epoch(server: &TestServer) -> String {
    let payload = server.admin_token.split('.').nth(1).unwrap();
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap();
    let claims: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    claims["tenant_epoch"].as_str().unwrap().to_string()
}

fn claims(server: &TestServer, exp_offset: i64, aud: &str) -> serde_json::Value {
    let now = browserpool_server::auth::now_s() as i64;
    json!({
        "iss": "browserpool", "aud": aud, "sub": "ci", "tenant": "default",
        "tenant_epoch": default_epoch(server), "scopes": ["sessions:read", "sessions:write"],
        "exp": now + exp_offset, "nbf": now - 1, "iat": now - 1, "jti": "t-1"
    })
}

async fn code_of_get(server: &TestServer, token: Option<&str>) -> tonic::Code {
    status_of_get(server, token).await.code()
}

async fn status_of_get(server: &TestServer, token: Option<&str>) -> tonic::Status {
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint()).unwrap().connect().await.unwrap();
    let mut raw = pb::sessions_client::SessionsClient::new(channel);
    let mut req = tonic::Request::new(pb::GetSessionRequest { session_id: "s-none".into() });
    if let Some(t) = token {
        req.metadata_mut().insert("authorization", t.parse().unwrap());
    }
    raw.get(req).await.unwrap_err()
}

/// The message a refused bearer token gets, which must say what to do (never a library's name
/// for the error).
async fn refusal(server: &TestServer, token: &str) -> String {
    let status = status_of_get(server, Some(&format!("Bearer {token}"))).await;
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let message = status.message().to_string();
    for name in ["InvalidToken", "ExpiredSignature", "InvalidSignature", "Base64 error", "ImmatureSignature"] {
        assert!(!message.contains(name), "{message}");
    }
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_unauthenticated() {
    let server = TestServer::start_with(|a| a.warm = 0).await;
    use tonic::Code::{NotFound, Unauthenticated};

    assert_eq!(code_of_get(&server, None).await, Unauthenticated, "missing");
    assert_eq!(code_of_get(&server, Some("Bearer not-a-jwt")).await, Unauthenticated, "malformed");
    assert_eq!(code_of_get(&server, Some("Token abc")).await, Unauthenticated, "not bearer");
    let expired = forge(&server, Algorithm::HS256, claims(&server, -120, "browserpool"));
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {expired}"))).await, Unauthenticated, "expired");
    let audience = forge(&server, Algorithm::HS256, claims(&server, 600, "someone-else"));
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {audience}"))).await, Unauthenticated, "wrong audience");
    let algorithm = forge(&server, Algorithm::HS384, claims(&server, 600, "browserpool"));
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {algorithm}"))).await, Unauthenticated, "wrong algorithm");
    let mut no_sub = claims(&server, 600, "browserpool");
    no_sub.as_object_mut().unwrap().remove("sub");
    let no_sub = forge(&server, Algorithm::HS256, no_sub);
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {no_sub}"))).await, Unauthenticated, "no sub");
    // Signed by this server's key but without the tenant's epoch (as before the claim), or
    // with another epoch (the tenant's previous life).
    let mut no_epoch = claims(&server, 600, "browserpool");
    no_epoch.as_object_mut().unwrap().remove("tenant_epoch");
    let no_epoch = forge(&server, Algorithm::HS256, no_epoch);
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {no_epoch}"))).await, Unauthenticated, "no epoch");
    let mut old_epoch = claims(&server, 600, "browserpool");
    old_epoch["tenant_epoch"] = json!("0".repeat(32));
    let old_epoch = forge(&server, Algorithm::HS256, old_epoch);
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {old_epoch}"))).await, Unauthenticated, "old epoch");
    // Another server's key: valid shape, wrong signature.
    let other = TestServer::start_with(|a| a.warm = 0).await;
    let foreign = forge(&other, Algorithm::HS256, claims(&server, 600, "browserpool"));
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {foreign}"))).await, Unauthenticated, "foreign key");

    // Each says what is wrong and what to do.
    assert!(refusal(&server, "not-a-jwt").await.contains("a JWT is three base64url parts"));
    // A last character mistyped makes the signature bad base64url ("Invalid last symbol 120").
    let typo = format!("{}x", &expired[..expired.len() - 1]);
    assert!(refusal(&server, &typo).await.contains("its signature (part 3 of 3) is not base64url"));
    let said = refusal(&server, &expired).await;
    assert!(said.starts_with("token expired at 20") && said.contains("issue a new one"), "{said}");
    assert!(refusal(&server, &foreign).await.contains("signed by another server's key"));
    let said = refusal(&server, &no_sub).await;
    assert!(said.contains("lacks the \"sub\" claim"), "{said}");
    assert!(refusal(&server, &audience).await.contains("not issued for browserpool"));
    // The clock leeway is 5 s by default (it was 30 s): 10 s past its expiry is too late.
    let just_expired = forge(&server, Algorithm::HS256, claims(&server, -10, "browserpool"));
    assert!(refusal(&server, &just_expired).await.contains("clock skew allowed: 5 s"));

    // The control: a good token gets past auth (and the unknown session is NOT_FOUND).
    let good = forge(&server, Algorithm::HS256, claims(&server, 600, "browserpool"));
    assert_eq!(code_of_get(&server, Some(&format!("Bearer {good}"))).await, NotFound);

    // Health and reflection need no token.
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint()).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let resp =
        health.check(tonic_health::pb::HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    assert_eq!(resp.status(), tonic_health::pb::health_check_response::ServingStatus::Serving);
    other.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_are_checked_per_rpc_and_per_canonical_action() {
    let server = TestServer::start().await;
    let read_only = server.token("default", "ci", &["sessions:read"]).await;
    let writer = server.token("default", "ci", &["sessions:read", "sessions:write"]).await;

    let reader = server.client(&read_only).await;
    let browserpool_client::Error::Status(status) = reader.acquire(1000).await.unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");
    let browserpool_client::Error::Status(status) = reader
        .admin()
        .pool_status(pb::PoolStatusRequest {})
        .await
        .map_err(browserpool_client::Error::from)
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "admin rpc needs admin");

    let id = server.client(&writer).await.acquire(30_000).await.unwrap().session_id;
    // Same subject, read-only token: `text` (extract) is read, `js` (evaluate) needs write.
    let text = reader.act(&id, action("text", "body", json!(null))).await.unwrap();
    ok(&text);
    let js = reader.act(&id, action("js", "", "1")).await.unwrap();
    assert_eq!(err_code(&js), pb::ErrorCode::PermissionDenied);
    assert_eq!((js.action.as_str(), js.alias_of.as_str()), ("evaluate", "js"));
    assert!(js.error.unwrap().message.contains("sessions:write"));
    let browserpool_client::Error::Status(status) = reader.release(&id).await.unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::PermissionDenied);

    // Another subject of the tenant without sessions:shared, and another tenant: NOT_FOUND.
    let stranger = server.client(&server.token("default", "someone", &["sessions:read", "sessions:write"]).await).await;
    let browserpool_client::Error::Status(status) = stranger.get(&id).await.unwrap_err() else { panic!() };
    assert_eq!(status.code(), tonic::Code::NotFound);
    let other = pb::Tenant { id: "other-tenant".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    server.admin().await.admin().put_tenant(pb::PutTenantRequest { tenant: Some(other) }).await.unwrap();
    let foreign: Client =
        server.client(&server.token("other-tenant", "ci", &["sessions:read", "sessions:write"]).await).await;
    let browserpool_client::Error::Status(status) =
        foreign.act(&id, action("title", "", json!(null))).await.unwrap_err()
    else {
        panic!()
    };
    assert_eq!(status.code(), tonic::Code::NotFound, "foreign tenant never learns the id exists");
    // With sessions:shared another subject may drive it.
    let shared = server
        .client(&server.token("default", "someone", &["sessions:read", "sessions:write", "sessions:shared"]).await)
        .await;
    ok(&shared.act(&id, action("title", "", json!(null))).await.unwrap());

    // Issue-time validation of IssueToken itself.
    let bad_scope =
        pb::IssueTokenRequest { tenant: "default".into(), subject: "x".into(), scopes: vec!["root".into()], ttl_s: 60 };
    let status = server.admin().await.admin().issue_token(bad_scope).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let no_tenant = pb::IssueTokenRequest { tenant: "ghost".into(), subject: "x".into(), scopes: vec![], ttl_s: 60 };
    assert_eq!(server.admin().await.admin().issue_token(no_tenant).await.unwrap_err().code(), tonic::Code::NotFound);

    server.client(&writer).await.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_token_is_refused_within_a_second_and_ttl_is_capped() {
    let server = TestServer::start_with(|a| {
        a.warm = 0;
        a.max_token_ttl = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut console = server.admin().await.admin();
    let issued = console
        .issue_token(pb::IssueTokenRequest {
            tenant: "default".into(),
            subject: "ci".into(),
            scopes: vec!["sessions:read".into()],
            ttl_s: 600,
        })
        .await
        .unwrap()
        .into_inner();
    let user = server.client(&issued.token).await;
    let listed = user.sessions().list(pb::ListSessionsRequest::default()).await;
    assert!(listed.is_ok(), "the fresh token works");

    let revoked = console.revoke_token(pb::RevokeTokenRequest { jti: issued.jti.clone() }).await.unwrap().into_inner();
    assert!(revoked.revoked);
    let started = std::time::Instant::now();
    let code = loop {
        match user.sessions().list(pb::ListSessionsRequest::default()).await {
            Err(status) => break status.code(),
            Ok(_) if started.elapsed() < std::time::Duration::from_secs(1) => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            Ok(_) => panic!("a revoked token still works after a second"),
        }
    };
    assert_eq!(code, tonic::Code::Unauthenticated);
    let again = console.revoke_token(pb::RevokeTokenRequest { jti: issued.jti }).await.unwrap().into_inner();
    assert!(!again.revoked, "revoking twice is idempotent");

    let too_long =
        pb::IssueTokenRequest { tenant: "default".into(), subject: "ci".into(), scopes: vec![], ttl_s: 7200 };
    let status = console.issue_token(too_long).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("exceeds the maximum"), "{status}");
    server.stop().await;
}

/// Every rpc of `browserpool.v1.Admin`, as paths, read from the descriptor set the server
/// serves for reflection: an rpc added to admin.proto later is covered without editing this.
fn admin_rpc_paths() -> Vec<String> {
    use prost::Message;
    let set = prost_types::FileDescriptorSet::decode(browserpool_proto::FILE_DESCRIPTOR_SET).unwrap();
    let paths: Vec<String> = set
        .file
        .iter()
        .filter(|f| f.package() == "browserpool.v1")
        .flat_map(|f| f.service.iter())
        .filter(|s| s.name() == "Admin")
        .flat_map(|s| s.method.iter().map(|m| format!("/browserpool.v1.Admin/{}", m.name())))
        .collect();
    assert!(paths.iter().any(|p| p.ends_with("/QueryAudit")), "streaming rpcs are listed too: {paths:?}");
    paths
}

/// Calls `path` with an empty request message and reads the whole answer. Every rpc kind
/// (unary, server stream) is one request stream and one response stream on the wire, so one
/// generic streaming call serves them all; `()` (an empty message) encodes the empty request
/// and decodes any answer, skipping its fields.
async fn raw_call(channel: tonic::transport::Channel, path: &str, token: &str) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut req = tonic::Request::new(tokio_stream::once(()));
    req.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let path = http::uri::PathAndQuery::try_from(path).unwrap();
    let mut answers = grpc.streaming(req, path, codec).await?.into_inner();
    while answers.message().await?.is_some() {}
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_rpc_needs_scope_admin_and_refusals_are_audited() {
    let server = TestServer::start_with(|a| a.warm = 0).await;
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint()).unwrap().connect().await.unwrap();
    let paths = admin_rpc_paths();
    let others = ["sessions:read", "sessions:write", "sessions:shared", "context:export", "context:import"];
    // Every subset of the other scopes: none, each alone, all five, and everything between.
    for mask in 0u32..(1 << others.len()) {
        let scopes: Vec<&str> =
            others.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, s)| *s).collect();
        let token = server.token("default", "no-admin", &scopes).await;
        for path in &paths {
            let status = raw_call(channel.clone(), path, &token).await.expect_err(path);
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{path} with {scopes:?}: {status:?}");
            assert!(
                status.message().starts_with("this call needs scope admin; use a token with it"),
                "{path}: {status:?}"
            );
        }
    }
    // The control: an admin token is let through (whatever the empty request then earns).
    for path in &paths {
        if let Err(status) = raw_call(channel.clone(), path, &server.admin_token).await {
            assert_ne!(status.code(), tonic::Code::PermissionDenied, "admin refused {path}: {status:?}");
            assert_ne!(status.code(), tonic::Code::Unimplemented, "{path} is not served");
        }
    }

    // Each refusal is recorded before any handler runs, as a denial naming the caller.
    let mut console = server.admin().await.admin();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut stream = console
            .query_audit(pb::QueryAuditRequest { tenant: "default".into(), limit: 10_000, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let mut denied = std::collections::BTreeMap::<String, usize>::new();
        while let Some(r) = stream.message().await.unwrap() {
            if r.subject == "no-admin" && r.rpc.starts_with("/browserpool.v1.Admin/") {
                assert_eq!((r.outcome.as_str(), r.code.as_str()), ("denied", "PermissionDenied"), "{r:?}");
                assert!(!r.jti_hash.is_empty());
                *denied.entry(r.rpc).or_default() += 1;
            }
        }
        if paths.iter().all(|p| denied.get(p) == Some(&(1 << others.len()))) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "refusals not all audited: {denied:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.stop().await;
}

/// `browserpool token issue` offline, as an operator runs it: a data dir no server made (a
/// typo, another directory) is refused, naming it, and left as it was, rather than given a
/// new key no server knows; on the server's data dir `default` works (the tenant is created
/// as `serve` would when missing), an unknown tenant is a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_token_issue_needs_the_servers_key_and_the_tenant_and_its_tokens_work() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let database_url = crate::helpers::test_database()
        .await
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("browserpool.db").display()));
    let browserpool = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_browserpool"))
            .args(args)
            .arg("--data-dir")
            .arg(&dir)
            .arg("--database-url")
            .arg(&database_url)
            .output()
            .unwrap()
    };
    let issue = |tenant: &str| {
        browserpool(&["token", "issue", "--subject", "ci", "--scopes", "sessions:read", "--tenant", tenant])
    };
    let keyless = issue("default");
    assert!(!keyless.status.success());
    assert!(keyless.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&keyless.stderr);
    assert!(stderr.contains(&format!("no signing key in {}", dir.display())), "{stderr}");
    assert!(stderr.contains("start `browserpool serve` on this one once"), "{stderr}");
    let rotate = browserpool(&["key", "rotate"]);
    assert!(!rotate.status.success());
    assert!(String::from_utf8_lossy(&rotate.stderr).contains("no signing key in"));
    assert!(!dir.exists(), "nothing was made in a data dir without a key");

    let server = TestServer::start_with(|a| {
        a.warm = 0;
        a.store.data_dir = dir.clone();
        a.store.database_url = Some(database_url.clone());
    })
    .await;
    let ghost = issue("ghost");
    assert!(!ghost.status.success());
    let stderr = String::from_utf8_lossy(&ghost.stderr);
    assert!(stderr.contains("tenant \"ghost\" does not exist"), "{stderr}");
    assert!(ghost.stdout.is_empty());

    let issued = issue("default");
    assert!(issued.status.success(), "{}", String::from_utf8_lossy(&issued.stderr));
    let token = String::from_utf8(issued.stdout).unwrap().trim().to_string();
    let listed = server.client(&token).await.sessions().list(pb::ListSessionsRequest::default()).await;
    assert!(listed.is_ok(), "the offline token works on the server of that data dir: {listed:?}");
    server.stop().await;
}

/// `browserpool key rotate` beside a running server: a token minted with the new key
/// (`token issue`) is accepted at once, the server signs with the new key within a second,
/// and the retired key's tokens still work, all without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_server_takes_a_rotated_key_without_a_restart() {
    let server = BinaryServer::spawn_with(&["--warm", "0"]).await;
    let kid = |token: &str| -> String {
        let header = token.split('.').next().unwrap();
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).unwrap();
        serde_json::from_slice::<serde_json::Value>(&header).unwrap()["kid"].as_str().unwrap().to_string()
    };
    let browserpool = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_browserpool"))
            .args(args)
            .arg("--data-dir")
            .arg(server.dir.path())
            .arg("--database-url")
            .arg(&server.database_url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let old_kid = kid(&server.token);
    let rotated = String::from_utf8(browserpool(&["key", "rotate"]).stderr).unwrap();
    assert!(rotated.contains(&format!("retired key {old_kid}; signing key is now ")), "{rotated}");
    assert!(rotated.contains("signs with it within a second"), "{rotated}");

    let issued =
        browserpool(&["token", "issue", "--tenant", "default", "--subject", "ci", "--scopes", "sessions:read"]);
    let token = String::from_utf8(issued.stdout).unwrap().trim().to_string();
    let new_kid = kid(&token);
    assert_ne!(new_kid, old_kid);
    let listed = server_client(&server, &token).await.sessions().list(pb::ListSessionsRequest::default()).await;
    assert!(listed.is_ok(), "a token of the new key is accepted at once: {listed:?}");

    let admin = server.client().await;
    assert!(admin.sessions().list(pb::ListSessionsRequest::default()).await.is_ok(), "the retired key still verifies");
    let old_kid = &old_kid;
    let signed_with = eventually("the server to sign with the new key", Duration::from_secs(10), || {
        let mut console = admin.admin();
        async move {
            let req = pb::IssueTokenRequest {
                tenant: "default".into(),
                subject: "job".into(),
                scopes: vec!["sessions:read".into()],
                ttl_s: 60,
            };
            let token = console.issue_token(req).await.unwrap().into_inner().token;
            Some(kid(&token)).filter(|k| k != old_kid)
        }
    })
    .await;
    assert_eq!(signed_with, new_kid);
}

async fn server_client(server: &BinaryServer, token: &str) -> Client {
    Client::connect(format!("http://{}", server.grpc), token).await.unwrap()
}
