//! The generated Python and TypeScript clients (`clients/`) against a real server: each
//! language's script acquires through its helper, navigates to the loopback fixture page,
//! fills and clicks, reads the heading, takes a screenshot and releases (also when the block
//! throws), meets a bad token as UNAUTHENTICATED, and speaks mutual TLS with a CA file. The
//! scripts print one JSON line; the assertions are here. Their dependencies come from
//! `ensure_client_deps` in `scripts/lib.sh` (a venv and `npm ci`), run by `scripts/test.sh`.

use std::path::PathBuf;
use std::time::Duration;

use browserpool_client::pb;
use serde_json::{json, Value};

use crate::helpers::{fixture_site, TestServer};
use crate::tls::{write_private, Ca};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The venv's python, with grpcio and protobuf; panics saying how to install them.
fn python() -> PathBuf {
    let venv = std::env::var("BROWSERPOOL_PYVENV").unwrap_or_else(|_| "/var/tmp/browserpool-tools/pyvenv".into());
    let python = PathBuf::from(venv).join("bin/python");
    let ready = std::process::Command::new(&python)
        .args(["-c", "import grpc, google.protobuf"])
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        ready,
        "the Python client's dependencies are not installed ({} with grpcio and protobuf): run scripts/test.sh \
         (or `source scripts/lib.sh && ensure_client_deps`)",
        python.display()
    );
    python
}

/// `node`, once `npm ci` has run in clients/typescript; panics saying how otherwise.
fn node() -> PathBuf {
    let modules = repo().join("clients/typescript/node_modules/@connectrpc/connect-node");
    assert!(
        modules.exists(),
        "the TypeScript client's dependencies are not installed ({} is missing): run scripts/test.sh \
         (or `npm ci` in clients/typescript)",
        modules.display()
    );
    PathBuf::from("node")
}

/// Runs `program script` from the repository root with `env`; returns the JSON line it printed
/// last.
async fn run(program: PathBuf, script: &str, env: &[(&str, String)]) -> Value {
    let mut cmd = tokio::process::Command::new(&program);
    cmd.arg(script)
        .current_dir(repo())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("script finished").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script} failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{script}: {e}: {stdout}"))
}

/// What both e2e scripts report, in each language's own names for codes and states.
struct Names {
    element_not_found: &'static str,
    ready: &'static str,
    closed: &'static str,
    unauthenticated: &'static str,
}

/// Runs one language's e2e script against a fresh server and checks what it saw, then what
/// the server says about the sessions it used.
async fn drives_a_session(program: PathBuf, script: &str, lang: &str, names: Names) -> serde_json::Value {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let token = server.token("default", lang, &["sessions:read", "sessions:write"]).await;
    let env = [("SERVER", server.endpoint()), ("TOKEN", token.clone()), ("SITE", site)];
    let seen = run(program, script, &env).await;

    assert_eq!(seen["title"], "Greeter", "{seen}");
    assert_eq!(seen["heading_before"], "Hello, nobody", "{seen}");
    assert_eq!(seen["heading"], format!("Hello, {lang}"), "fill and click went through: {seen}");
    assert_eq!(seen["evaluated"], json!({"n": 2, "list": [true, "x", null], "half": 0.5}), "{seen}");
    assert_eq!(seen["png"], true, "PNG signature: {seen}");
    assert_eq!(seen["mime"], "image/png", "{seen}");
    assert!(seen["png_bytes"].as_u64().unwrap() > 1000, "{seen}");
    assert_eq!(seen["action_error"], names.element_not_found, "{seen}");
    assert_eq!(seen["state_inside"], names.ready, "{seen}");
    assert_eq!(seen["state_after"], names.closed, "released on leaving the block: {seen}");
    assert_eq!(seen["raised"], "boom", "the block's own error propagates: {seen}");
    assert_eq!(seen["raised_state_after"], names.closed, "released although the block threw: {seen}");
    assert_eq!(seen["bad_token"], names.unauthenticated, "{seen}");
    assert_eq!(seen["bad_token_is_status"], true, "{seen}");
    // Files and recordings through the language's helpers, kept after the session ended.
    assert_eq!(seen["kept_file"], "hi there", "{seen}");
    assert_eq!(seen["kept_sha256"], seen["uploaded_sha256"], "{seen}");
    assert_eq!(seen["recording"], json!(["recording.webm", "video/webm", true, true]), "{seen}");
    // A live view link through the helpers, revoked by its id.
    assert_eq!(seen["live"], json!([seen["session"], "CONTROL"]), "{seen}");
    assert_eq!(seen["live_revoked"], 1, "{seen}");

    // The server agrees: both sessions were this subject's, labelled, and are closed.
    let client = server.client(&token).await;
    for key in ["session", "raised_session"] {
        let session = client.get(seen[key].as_str().unwrap()).await.unwrap();
        assert_eq!(session.subject, lang, "{session:?}");
        assert_eq!(session.state(), pb::SessionState::Closed, "{session:?}");
    }
    let first = client.get(seen["session"].as_str().unwrap()).await.unwrap();
    assert_eq!(first.labels.get("client").map(String::as_str), Some(lang), "labels reach Acquire: {first:?}");
    server.stop().await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_drives_a_session_and_surfaces_a_bad_token() {
    let names = Names {
        element_not_found: "ERROR_CODE_ELEMENT_NOT_FOUND",
        ready: "SESSION_STATE_READY",
        closed: "SESSION_STATE_CLOSED",
        unauthenticated: "UNAUTHENTICATED",
    };
    let seen = drives_a_session(python(), "clients/python/tests/e2e.py", "python", names).await;
    // Errors a Python user can act on: the suggestion, the field of a wrong type, names.
    assert_eq!(seen["did_you_mean"], json!([["navigate"], true]), "{seen}");
    assert_eq!(seen["type_error"], "AcquireRequest.wait_ms: expected an int (milliseconds), got str '30s'", "{seen}");
    assert_eq!(seen["released_state"], "CLOSED", "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_client_drives_a_session_and_surfaces_a_bad_token() {
    let names = Names {
        element_not_found: "ELEMENT_NOT_FOUND",
        ready: "READY",
        closed: "CLOSED",
        unauthenticated: "Unauthenticated",
    };
    let seen = drives_a_session(node(), "clients/typescript/test/e2e.mjs", "typescript", names).await;
    assert_eq!(seen["did_you_mean"], json!([["navigate"], true, "ERROR_CODE_UNKNOWN_ACTION"]), "{seen}");
    assert_eq!(seen["type_error"], r#"timeoutMs: expected a number (milliseconds), got string "500""#, "{seen}");
    assert_eq!(seen["released_state"], "CLOSED", "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_clients_speak_mutual_tls_with_a_ca_file() {
    let (python, node) = (python(), node());
    let ca = Ca::new("clients-ca");
    let files = tempfile::tempdir().unwrap();
    let path = |name: &str| files.path().join(name);
    let (server_pair, client_pair) = (ca.server("localhost"), ca.client("ci"));
    write_private(&path("server.pem"), &server_pair.cert);
    write_private(&path("server.key"), &server_pair.key);
    write_private(&path("client.pem"), &client_pair.cert);
    write_private(&path("client.key"), &client_pair.key);
    std::fs::write(path("ca.pem"), ca.pem()).unwrap();
    let (cert, key, client_ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    let server = TestServer::start_with(move |args| {
        args.warm = 0;
        args.tls_cert = Some(cert);
        args.tls_key = Some(key);
        args.tls_client_ca = Some(client_ca);
    })
    .await;
    let env = [
        ("SERVER", format!("https://{}", server.grpc)),
        ("TOKEN", server.admin_token.clone()),
        ("CA_FILE", path("ca.pem").display().to_string()),
        ("CERT_FILE", path("client.pem").display().to_string()),
        ("KEY_FILE", path("client.key").display().to_string()),
    ];

    let seen = run(python, "clients/python/tests/tls.py", &env).await;
    assert_eq!(seen["with_identity"], json!({"sessions": 0}), "{seen}");
    assert_eq!(seen["without_identity"], "UNAVAILABLE", "no client certificate, no call: {seen}");

    let seen = run(node, "clients/typescript/test/tls.mjs", &env).await;
    assert_eq!(seen["with_identity"], json!({"sessions": 0}), "{seen}");
    // Node reports the handshake alert as the stream's error: connect-node calls it INTERNAL.
    assert!(seen["without_identity"].as_str().is_some_and(|c| c != "answered?!"), "{seen}");
    assert!(
        seen["without_identity_message"].as_str().is_some_and(|m| m.contains("certificate required")),
        "no client certificate, no call: {seen}"
    );
    server.stop().await;
}
