//! The fences that hold whatever a CDP method list forgot, seen from `/proc` and from a
//! worker's own uid: workers run as uids of their own (a root server) with Chromium's sandbox
//! on, own their profiles and can read nothing of the server.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use browserpool_client::{pb, Client};

use crate::helpers::{act, group_members, ok, TestServer};
use crate::lifecycle::http_get;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// A `/proc/<pid>/status` field (after its name), trimmed.
fn proc_status(pid: i32, name: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_string()
}

/// The real uid of `pid`, `u32::MAX` when it is gone.
fn real_uid(pid: i32) -> u32 {
    browserpool_pool::sandbox::process_uid(pid as u32).unwrap_or(u32::MAX)
}

/// The live (not zombie) processes whose real uid is `uid`.
fn running_as(uid: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| real_uid(*pid) == uid && !proc_status(*pid, "State:").starts_with('Z'))
        .collect()
}

/// Runs `argv` as uid (and gid) `uid` with no groups; whether it succeeded, and its stderr.
fn as_uid(uid: u32, argv: &[&str]) -> (bool, String) {
    let out = Command::new("setpriv")
        .args(["--reuid", &uid.to_string(), "--regid", &uid.to_string(), "--clear-groups", "--"])
        .args(argv)
        .output()
        .expect("setpriv (util-linux) runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

async fn worker(admin: &Client, id: &str) -> pb::Worker {
    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    status.workers.into_iter().find(|w| w.worker_id == id).expect("the session's worker is listed")
}

/// `pid`'s `Seccomp:` once it has one (`2`, a filter) or after 10 s; `None` when it ended
/// first. A renderer forked a moment ago (a spare context's tab starting one, say) sets its
/// filter up itself as it starts; one still without it after 10 s runs without it.
async fn seccomp_once_started(pid: i32) -> Option<String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mode = proc_status(pid, "Seccomp:");
        if mode.is_empty() || proc_status(pid, "State:").starts_with('Z') {
            return None;
        }
        if mode == "2" || tokio::time::Instant::now() >= deadline {
            return Some(mode);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Checks every fence of the worker serving `session` and returns its uid.
async fn check_worker(server: &TestServer, w: &pb::Worker) -> u32 {
    let pgid = w.pid as i32;
    let members = group_members(pgid, "");
    assert!(members.len() >= 3, "the worker's group: {members:?}");
    let uid = real_uid(pgid);
    if euid() == 0 {
        assert_eq!(
            uid,
            1_800_000_000 + w.cdp_port,
            "a root server runs a worker as the first worker uid plus its port"
        );
        for pid in &members {
            assert_eq!(real_uid(*pid), uid, "process {pid} of the worker runs as another uid");
        }
    } else {
        assert_eq!(uid, euid(), "a server that is not root runs workers as itself");
    }
    let own_ns = std::fs::read_link("/proc/self/ns/user").unwrap();
    let renderers = group_members(pgid, "--type=renderer");
    assert!(!renderers.is_empty(), "the worker has a renderer");
    let mut checked = 0;
    for pid in renderers {
        let Some(mode) = seccomp_once_started(pid).await else { continue };
        assert_eq!(mode, "2", "renderer {pid} runs under a seccomp filter");
        // Gone since (its tab closed): nothing more to see of it.
        let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/user")) else { continue };
        assert_ne!(ns, own_ns, "renderer {pid}'s user namespace");
        checked += 1;
    }
    assert!(checked > 0, "every renderer of the worker ended before it could be checked");
    for pid in &members {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&cmdline).contains("--no-sandbox"), "process {pid} runs with --no-sandbox");
    }
    let profile = server.profiles_dir().join(format!("port-{}", w.cdp_port));
    let meta = std::fs::metadata(&profile).unwrap();
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (uid, 0o700), "{}", profile.display());
    let root_mode = std::fs::metadata(server.profiles_dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(root_mode, 0o711, "workers pass through the profiles dir but cannot list it");
    uid
}

/// Nothing of the server is readable, writable or listable by a worker's uid, nor another
/// worker's profile.
fn check_uid_reaches_nothing(server: &TestServer, uid: u32, other_profile: &Path) {
    let data = server.data_dir.path();
    let key = std::fs::read_dir(data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("jwt-")))
        .expect("the signing key is in the data dir");
    let db = data.join("browserpool.db");
    let token = data.join("admin.token");
    for (what, argv) in [
        ("the signing key", vec!["cat", key.to_str().unwrap()]),
        ("the admin token", vec!["cat", token.to_str().unwrap()]),
        ("the database", vec!["cat", db.to_str().unwrap()]),
        ("the data dir", vec!["ls", data.to_str().unwrap()]),
        ("the profiles dir", vec!["ls", server.profiles_dir().to_str().unwrap()]),
        ("another worker's profile", vec!["ls", other_profile.to_str().unwrap()]),
        ("a file in the data dir", vec!["touch", data.join("planted").to_str().unwrap()]),
    ] {
        let (ok, stderr) = as_uid(uid, &argv);
        assert!(!ok, "uid {uid} could use {what}: {argv:?}");
        assert!(stderr.contains("Permission denied"), "{what}: {stderr}");
    }
    assert!(!data.join("planted").exists());
}

/// Both isolations: a session's Chromium (its own, or the tenant's shared one) runs as a uid of
/// its own, sandboxed, owning its profile, blind to the server and to other workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_as_their_own_uids_with_the_sandbox_on_and_reach_nothing_of_the_server() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let admin = server.admin().await;
    let context_client = crate::isolation::context_tenant(&server, &admin, &[]).await;
    let own = admin.acquire(30_000).await.unwrap();
    let shared = context_client.acquire(30_000).await.unwrap();
    let (own_worker, shared_worker) = (worker(&admin, &own.worker_id).await, worker(&admin, &shared.worker_id).await);
    assert_ne!(own_worker.cdp_port, shared_worker.cdp_port);
    let own_uid = check_worker(&server, &own_worker).await;
    let shared_uid = check_worker(&server, &shared_worker).await;
    if euid() == 0 {
        assert_ne!(own_uid, shared_uid, "two workers never share a uid");
        let profile = |w: &pb::Worker| server.profiles_dir().join(format!("port-{}", w.cdp_port));
        check_uid_reaches_nothing(&server, own_uid, &profile(&shared_worker));
        check_uid_reaches_nothing(&server, shared_uid, &profile(&own_worker));
    }

    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    assert!(!status.unsandboxed);
    assert!(status.replicas[0].sandbox.starts_with("sandboxed: workers run as"), "{:?}", status.replicas[0].sandbox);
    let ready = http_get(&format!("http://{}/readyz", server.http)).await;
    assert!(ready.starts_with("HTTP/1.1 200") && !ready.contains("warning"), "{ready}");

    admin.release(&own.session_id).await.unwrap();
    context_client.release(&shared.session_id).await.unwrap();
    // A released worker's uid has nothing left running.
    crate::helpers::eventually("the released uid's processes end", std::time::Duration::from_secs(10), || async {
        (euid() != 0 || running_as(own_uid).is_empty()).then_some(())
    })
    .await;
    server.stop().await;
}

/// A Chromium that runs without its sandbox (here a wrapper adding `--no-sandbox`, as some
/// distributions' and images' wrappers do) stops the server at start, unless
/// `--allow-unsandboxed` is given: then it serves, and says so in `/readyz` and `PoolStatus`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chromium_without_its_sandbox_is_refused_unless_allowed() {
    let bin = tempfile::tempdir().unwrap();
    // The worker's uid runs the wrapper: it must reach it.
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let chrome = browserpool_pool::find_chrome(None).unwrap();
    let wrapper = bin.path().join("chromium-no-sandbox");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec {} --no-sandbox \"$@\"\n", chrome.display())).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();

    let data_dir = tempfile::tempdir().unwrap();
    let mut args = browserpool_server::config::ServeArgs::for_tests(data_dir.path());
    args.warm = 1;
    args.max_workers = 1;
    args.chrome = Some(wrapper.clone());
    args.store.database_url = crate::helpers::test_database().await;
    let err = match browserpool_server::bind(args).await {
        Ok(_) => panic!("a server whose workers run without the sandbox started"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("--no-sandbox") && err.contains("--allow-unsandboxed"), "{err}");
    // Gone with the stop (on a loaded host its removal may still be retrying as bind returns).
    let profiles = browserpool_server::server::profiles_dir(data_dir.path());
    let entries = || -> Vec<std::ffi::OsString> {
        std::fs::read_dir(&profiles).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default()
    };
    let waited = std::time::Instant::now();
    while !entries().is_empty() {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(15),
            "the refused worker's profile is left: {:?}",
            entries()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let server = TestServer::start_with(|a| {
        a.chrome = Some(wrapper.clone());
        a.allow_unsandboxed = true;
    })
    .await;
    let admin = server.admin().await;
    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    assert!(status.unsandboxed, "PoolStatus says so");
    assert!(
        status.replicas[0].unsandboxed && status.replicas[0].sandbox.contains("--no-sandbox"),
        "{:?}",
        status.replicas
    );
    let ready = http_get(&format!("http://{}/readyz", server.http)).await;
    assert!(ready.starts_with("HTTP/1.1 200") && ready.contains("without chromium's sandbox"), "{ready}");
    let session = admin.acquire(30_000).await.unwrap();
    admin.release(&session.session_id).await.unwrap();
    server.stop().await;
}

/// The protocol description (`/json/protocol`) of the Chromium the suite runs: from a
/// throwaway browser of the test's own (as a uid of its own when the test is root, sandbox
/// on), killed before this returns.
async fn chromium_protocol() -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let profile = dir.path().join("p");
    std::fs::create_dir(&profile).unwrap();
    let mut cmd = tokio::process::Command::new("setpriv");
    if euid() == 0 {
        // Below --worker-uids, named by no user.
        let uid = "1799999999";
        std::os::unix::fs::chown(&profile, Some(1_799_999_999), Some(1_799_999_999)).unwrap();
        cmd.args(["--reuid", uid, "--regid", uid, "--clear-groups"]);
    } else {
        cmd.arg("--reset-env");
    }
    let chrome = browserpool_pool::find_chrome(None).unwrap();
    cmd.arg("--")
        .arg(chrome)
        .args(browserpool_pool::launcher::CHROME_FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--remote-debugging-port=0")
        .arg("about:blank")
        .env("HOME", &profile)
        .env("TMPDIR", &profile)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn().unwrap();
    let pgid = child.id().unwrap() as i32;
    let port_file = profile.join("DevToolsActivePort");
    let port: u16 =
        crate::helpers::eventually("chromium's DevToolsActivePort", std::time::Duration::from_secs(30), || async {
            std::fs::read_to_string(&port_file).ok()?.lines().next()?.parse().ok()
        })
        .await;
    let body = get_with_length(port, "/json/protocol").await;
    // SAFETY: the group of the browser this test started.
    unsafe { libc::killpg(pgid, libc::SIGKILL) };
    drop(child);
    serde_json::from_slice(&body).expect("the protocol is JSON")
}

/// A GET to 127.0.0.1:`port` whose body is read by its Content-Length (DevTools' HTTP server
/// keeps the connection open).
async fn get_with_length(port: u16, path: &str) -> Vec<u8> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes()).await.unwrap();
    let mut reader = tokio::io::BufReader::new(stream);
    let mut length = None;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            }
        }
    }
    let mut body = vec![0; length.expect("a Content-Length")];
    reader.read_exact(&mut body).await.unwrap();
    body
}

/// Every command parameter (and field of its object types) named like a path, file or
/// directory, as `Domain.command` and a dotted parameter name.
fn file_like_params(protocol: &serde_json::Value) -> std::collections::BTreeSet<(String, String)> {
    use serde_json::Value;
    let named = |n: &str| {
        let n = n.to_ascii_lowercase();
        n.contains("path") || n.contains("file") || n.contains("dir")
    };
    let mut types = std::collections::HashMap::new();
    for domain in protocol["domains"].as_array().unwrap() {
        let name = domain["domain"].as_str().unwrap();
        for t in domain["types"].as_array().into_iter().flatten() {
            types.insert(format!("{name}.{}", t["id"].as_str().unwrap()), t.clone());
        }
    }
    fn walk(
        domain: &str,
        params: &Value,
        prefix: &str,
        seen: &mut Vec<String>,
        types: &std::collections::HashMap<String, Value>,
        named: &dyn Fn(&str) -> bool,
        out: &mut Vec<String>,
    ) {
        for param in params.as_array().into_iter().flatten() {
            let full = format!("{prefix}{}", param["name"].as_str().unwrap());
            if named(param["name"].as_str().unwrap()) {
                out.push(full.clone());
            }
            let reference = param["$ref"].as_str().or(param["items"]["$ref"].as_str());
            let Some(reference) = reference else { continue };
            let key = if reference.contains('.') { reference.to_string() } else { format!("{domain}.{reference}") };
            if seen.contains(&key) {
                continue;
            }
            if let Some(t) = types.get(&key) {
                seen.push(key.clone());
                let of = key.split('.').next().unwrap().to_string();
                walk(&of, &t["properties"], &format!("{full}."), seen, types, named, out);
                seen.pop();
            }
        }
    }
    let mut found = std::collections::BTreeSet::new();
    for domain in protocol["domains"].as_array().unwrap() {
        let name = domain["domain"].as_str().unwrap();
        for command in domain["commands"].as_array().into_iter().flatten() {
            let mut out = Vec::new();
            walk(name, &command["parameters"], "", &mut Vec::new(), &types, &named, &mut out);
            for param in out {
                found.insert((format!("{name}.{}", command["name"].as_str().unwrap()), param));
            }
        }
    }
    found
}

/// Params with `value` at the dotted `path`.
fn params_at(path: &str, value: serde_json::Value) -> serde_json::Value {
    path.rsplit('.').fold(value, |inner, key| serde_json::json!({ key: inner }))
}

/// Not a list found one method at a time: every parameter the browser's own protocol shows
/// that can name a host file is in `cdp::FILE_PARAMS`, refused or rewritten into the
/// session's own directory (or named as no host path, with why). A Chromium upgrade that adds
/// one fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cdp_parameter_that_can_name_a_host_file_is_judged() {
    use browserpool_server::cdp::{judge, FileParam, Verdict, FILE_PARAMS};
    let protocol = chromium_protocol().await;
    let found = file_like_params(&protocol);
    assert!(found.contains(&("DOM.setFileInputFiles".to_string(), "files".to_string())), "{found:?}");
    let known: std::collections::BTreeSet<(String, String)> =
        FILE_PARAMS.iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    let unjudged: Vec<_> = found.difference(&known).collect();
    assert!(unjudged.is_empty(), "parameters that may name a host file, not in cdp::FILE_PARAMS: {unjudged:?}");
    let stale: Vec<_> = known.difference(&found).collect();
    assert!(stale.is_empty(), "cdp::FILE_PARAMS names parameters this Chromium does not have: {stale:?}");
    let allow = |_: &str| Ok(());
    for (method, path, how) in FILE_PARAMS {
        let params = params_at(path, serde_json::json!(["/var/lib/browserpool/jwt-hs256.key"]));
        match (how, judge(method, Some(&params), "/session/downloads", &allow)) {
            (FileParam::Refused | FileParam::SessionFiles, Verdict::Refuse(_)) | (FileParam::NotAHostPath(_), _) => {}
            (FileParam::SessionDir, Verdict::Rewrite(p)) => assert_eq!(p[path], "/session/downloads", "{method}"),
            (how, verdict) => panic!("{method} {path} ({how:?}) was judged {verdict:?}"),
        }
    }
    eprintln!("{} file-like parameters in the protocol, every one judged", found.len());
}

/// The attack of issue 25, through a session's `cdp_url`: a drop of the server's signing key
/// onto the page is refused before the browser sees it, as are listeners on the browser's
/// host (`Tethering.bind`), and `SystemInfo.getInfo` answers without the command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdp_client_cannot_drop_host_files_listen_or_read_the_command_line() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let mut ws = crate::cdp::connect(&session.cdp_url).await;
    let targets = crate::cdp::reply_to(&mut ws, serde_json::json!({"id": 1, "method": "Target.getTargets"})).await;
    let page = targets["result"]["targetInfos"].as_array().unwrap().iter().find(|t| t["type"] == "page").unwrap()
        ["targetId"]
        .clone();
    let attach =
        serde_json::json!({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": page, "flatten": true}});
    let attached = crate::cdp::reply_to(&mut ws, attach).await;
    let sid = attached["result"]["sessionId"].clone();
    let key = server.data_dir.path().join("jwt-hs256.key");
    let dropped = serde_json::json!({"id": 3, "sessionId": sid, "method": "Input.dispatchDragEvent", "params": {
        "type": "drop", "x": 10, "y": 10,
        "data": {"items": [], "files": [key.to_str().unwrap()], "dragOperationsMask": 1}}});
    let answer = crate::cdp::reply_to(&mut ws, dropped).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("browserpool refuses Input.dispatchDragEvent") && message.contains("file"), "{answer}");
    let bind = serde_json::json!({"id": 4, "method": "Tethering.bind", "params": {"port": 5432}});
    let answer = crate::cdp::reply_to(&mut ws, bind).await;
    assert!(
        answer["error"]["message"].as_str().unwrap_or_default().contains("browserpool refuses Tethering.bind"),
        "{answer}"
    );
    let info = crate::cdp::reply_to(&mut ws, serde_json::json!({"id": 5, "method": "SystemInfo.getInfo"})).await;
    assert!(info["result"]["gpu"].is_object(), "the rest of the answer is kept: {info}");
    assert_eq!(info["result"]["commandLine"], "", "{info}");
    // A text drag (no files) still reaches the page.
    let text = serde_json::json!({"id": 6, "sessionId": sid, "method": "Input.dispatchDragEvent", "params": {
        "type": "dragEnter", "x": 10, "y": 10,
        "data": {"items": [{"mimeType": "text/plain", "data": "hello"}], "dragOperationsMask": 1}}});
    let answer = crate::cdp::reply_to(&mut ws, text).await;
    assert!(answer.get("error").is_none(), "{answer}");
    drop(ws);
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}

/// A capability is shown only to whoever could use it: `cdp_url` (its ticket drives the
/// browser) reaches `sessions:write` callers only, never a read token of the same owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_sees_no_cdp_url() {
    let server = TestServer::start().await;
    let writer = server.client(&server.token("default", "ci", &["sessions:read", "sessions:write"]).await).await;
    let reader = server.client(&server.token("default", "ci", &["sessions:read"]).await).await;
    let session = writer.acquire(30_000).await.unwrap();
    assert!(session.cdp_url.contains("ticket="), "the owner with sessions:write gets it: {session:?}");
    assert!(writer.get(&session.session_id).await.unwrap().cdp_url.contains("ticket="));
    let got = reader.get(&session.session_id).await.unwrap();
    assert_eq!((got.session_id.as_str(), got.cdp_url.as_str()), (session.session_id.as_str(), ""));
    let listed = reader.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner().sessions;
    let mine = listed.iter().find(|s| s.session_id == session.session_id).expect("listed");
    assert_eq!(mine.cdp_url, "", "List shows no ticket to a read token");
    writer.release(&session.session_id).await.unwrap();
    server.stop().await;
}

/// What the database holds for a server's audit trail, in bytes (SQLite: the file and its WAL;
/// PostgreSQL: the table with its indexes).
async fn audit_bytes(server: &TestServer) -> u64 {
    if let Some(path) = server.database_url.strip_prefix("sqlite://") {
        let size = |p: String| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        return size(path.to_string()) + size(format!("{path}-wal"));
    }
    let pool = sqlx::PgPool::connect(&server.database_url).await.unwrap();
    let (bytes,): (i64,) = sqlx::query_as("SELECT pg_total_relation_size('audit')").fetch_one(&pool).await.unwrap();
    pool.close().await;
    bytes as u64
}

/// Unauthenticated calls cost bounded rows: a flood of calls with 8 KiB paths and no token,
/// for 10 s, grows the store by at most a few MB, and a legitimate caller meanwhile is never
/// refused for want of room in the audit queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_flood_costs_bounded_rows_and_legitimate_callers_are_served() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let server = TestServer::start_with(|a| a.warm = 0).await;
    let admin = server.admin().await;
    let before = audit_bytes(&server).await;
    let sent = Arc::new(AtomicU64::new(0));
    let throttled = Arc::new(AtomicU64::new(0));
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut flood = Vec::new();
    for worker in 0..4 {
        let channel = tonic::transport::Endpoint::from_shared(server.endpoint()).unwrap().connect().await.unwrap();
        let (sent, throttled) = (sent.clone(), throttled.clone());
        flood.push(tokio::spawn(async move {
            let mut n = 0u64;
            while tokio::time::Instant::now() < until {
                let mut grpc = tonic::client::Grpc::new(channel.clone());
                grpc.ready().await.unwrap();
                let path = format!("/browserpool.v1.Admin/{}{worker}{n}", "A".repeat(8192));
                let path = http::uri::PathAndQuery::try_from(path.as_str()).unwrap();
                let codec = tonic_prost::ProstCodec::<(), ()>::default();
                let status = grpc.unary(tonic::Request::new(()), path, codec).await.expect_err("refused");
                match status.code() {
                    tonic::Code::Unauthenticated => {}
                    tonic::Code::ResourceExhausted => {
                        assert!(status.message().contains("retry in"), "{status:?}");
                        throttled.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => panic!("{status:?}"),
                }
                n += 1;
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut served = 0u32;
    while tokio::time::Instant::now() < until {
        admin
            .admin()
            .pool_status(pb::PoolStatusRequest {})
            .await
            .expect("a legitimate call is served during the flood");
        served += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for task in flood {
        task.await.unwrap();
    }
    let sent = sent.load(Ordering::Relaxed);
    let throttled = throttled.load(Ordering::Relaxed);
    assert!(sent > 1000, "the flood sent only {sent} calls");
    // 50 at once, then 10 a second: the rest of the flood is throttled, while the legitimate
    // caller above, from the same address, was served throughout.
    assert!(sent - throttled <= 50 + 10 * 11, "{sent} sent, only {throttled} throttled");
    // Each window (refused calls, throttled calls) closes within WINDOW_MS, then its closing
    // record names its count: wait for every one of them, not the first.
    let counted = |denied: &[pb::AuditRecord]| -> u64 {
        denied.iter().filter_map(|r| r.target.split_whitespace().next()?.parse::<u64>().ok()).sum::<u64>()
            + denied.iter().filter(|r| r.target.starts_with("refused call")).count() as u64
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let closing = loop {
        let req = pb::QueryAuditRequest { limit: 10_000, ..Default::default() };
        let mut stream = admin.admin().query_audit(req).await.unwrap().into_inner();
        let mut denied = Vec::new();
        while let Some(r) = stream.message().await.unwrap() {
            if r.code == "Unauthenticated" || r.code == "ResourceExhausted" {
                denied.push(r);
            }
        }
        if counted(&denied) >= sent || tokio::time::Instant::now() > deadline {
            break denied;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    for r in &closing {
        assert!(r.rpc.len() < 100, "a refused call's rpc is bounded: {} bytes", r.rpc.len());
        assert!(r.rpc.starts_with("unknown ("), "{:?}", r.rpc);
    }
    assert!(closing.iter().any(|r| r.target.contains("more refused calls from 127.0.0.1")), "{closing:?}");
    assert_eq!(counted(&closing), sent, "every refused call is counted: {closing:?}");
    let grown = audit_bytes(&server).await.saturating_sub(before);
    eprintln!(
        "flood: {sent} unauthenticated calls with 8 KiB paths in 10 s ({throttled} throttled) -> {} audit records, store grew {grown} bytes; {served} legitimate calls from the same address served, none refused",
        closing.len()
    );
    assert!(grown < 4 << 20, "the store grew {grown} bytes");
    server.stop().await;
}

/// Revoking a token closes the CDP connections it opened within about a second (the bound of
/// gRPC revocation), and the session's ticket dies with the token that acquired it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_s_cdp_connections_close_and_its_session_s_ticket_dies() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let issue = |subject: &str| pb::IssueTokenRequest {
        tenant: "default".into(),
        subject: subject.into(),
        scopes: vec!["sessions:read".into(), "sessions:write".into()],
        ttl_s: 600,
    };
    let owner = admin.admin().issue_token(issue("ci")).await.unwrap().into_inner();
    let client = server.client(&owner.token).await;
    let session = client.acquire(30_000).await.unwrap();
    let mut by_ticket = crate::cdp::connect(&session.cdp_url).await;
    let bare = session.cdp_url.split('?').next().unwrap().to_string();
    let mut request =
        async_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(bare.as_str()).unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {}", owner.token).parse().unwrap());
    let (mut by_token, _) = async_tungstenite::tokio::connect_async(request).await.unwrap();
    crate::cdp::reply_to(&mut by_token, serde_json::json!({"id": 1, "method": "Browser.getVersion"})).await;

    let revoked = std::time::Instant::now();
    admin.admin().revoke_token(pb::RevokeTokenRequest { jti: owner.jti.clone() }).await.unwrap();
    for ws in [&mut by_ticket, &mut by_token] {
        let (code, reason) = crate::cdp::close_of(ws, std::time::Duration::from_secs(5)).await;
        assert_eq!(code, 1008, "{reason}");
        assert!(reason.contains("revoked"), "{reason}");
    }
    eprintln!("revoke -> the token's CDP connections closed in {:?}", revoked.elapsed());
    assert!(revoked.elapsed() < std::time::Duration::from_secs(3), "{:?}", revoked.elapsed());
    match async_tungstenite::tokio::connect_async(session.cdp_url.as_str()).await {
        Err(async_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("the ticket of a revoked token's session opened: {:?}", other.map(|_| ())),
    }
    admin.release(&session.session_id).await.unwrap();
    server.stop().await;
}

/// Every event of a domain a client may use at the browser level of a shared browser is kept
/// to the session's context, or never sent there: read from the running Chromium's protocol,
/// so an upgrade adding one fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_browser_level_event_of_a_shared_browser_is_kept_to_its_context() {
    use browserpool_server::cdp::scope::{ROOT_EVENTS, ROOT_METHODS};
    let protocol = chromium_protocol().await;
    let root_domains: std::collections::BTreeSet<&str> =
        ROOT_METHODS.iter().filter_map(|m| m.split('.').next()).collect();
    let mut events = std::collections::BTreeSet::new();
    for domain in protocol["domains"].as_array().unwrap() {
        let name = domain["domain"].as_str().unwrap();
        if root_domains.contains(name) {
            for event in domain["events"].as_array().into_iter().flatten() {
                events.insert(format!("{name}.{}", event["name"].as_str().unwrap()));
            }
        }
    }
    let listed: std::collections::BTreeSet<String> = ROOT_EVENTS.iter().map(|(e, _)| e.to_string()).collect();
    let unlisted: Vec<_> = events.difference(&listed).collect();
    assert!(unlisted.is_empty(), "browser-level events not in scope::ROOT_EVENTS: {unlisted:?}");
    let stale: Vec<_> = listed.difference(&events).collect();
    assert!(stale.is_empty(), "scope::ROOT_EVENTS names events this Chromium does not have: {stale:?}");
    eprintln!("{} events of the browser-level domains {root_domains:?}, every one kept to its context", events.len());
}

/// Waits up to `within` for an event `method` on `ws`; what it carried, if one came.
async fn event_within(ws: &mut crate::cdp::Ws, method: &str, within: std::time::Duration) -> Option<serde_json::Value> {
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let frame = match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(frame))) => frame,
            _ => return None,
        };
        let Ok(text) = frame.to_text() else { continue };
        let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        if v["method"] == method {
            return Some(v);
        }
    }
}

/// Two sessions of one tenant in one shared browser: A's connection hears of none of B's
/// downloads (B's own connection does), and A cannot trace the browser process from its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_session_hears_nothing_of_its_neighbour_s_downloads_or_traces() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let admin = server.admin().await;
    let client = crate::isolation::context_tenant(&server, &admin, &[]).await;
    let a = client.acquire(30_000).await.unwrap();
    let b = client.acquire(30_000).await.unwrap();
    assert_eq!(a.worker_id, b.worker_id, "one shared browser");
    let events = serde_json::json!({"id": 1, "method": "Browser.setDownloadBehavior", "params": {"behavior": "allow", "eventsEnabled": true}});
    let mut ws_a = crate::cdp::connect(&a.cdp_url).await;
    let mut ws_b = crate::cdp::connect(&b.cdp_url).await;
    for ws in [&mut ws_a, &mut ws_b] {
        let answer = crate::cdp::reply_to(ws, events.clone()).await;
        assert!(answer.get("error").is_none(), "{answer}");
        // Listing the targets shows each connection its context's page.
        crate::cdp::reply_to(ws, serde_json::json!({"id": 2, "method": "Target.getTargets"})).await;
    }
    let page = r#"<a id="d" href="data:text/plain,neighbour" download="b-report.txt">get</a>"#;
    let step = |name: &str, selector: &str, payload: serde_json::Value| pb::Action {
        action: name.into(),
        selector: selector.into(),
        payload: Some(browserpool_proto::json::from_json(&payload)),
        ..Default::default()
    };
    crate::helpers::ok(
        &crate::helpers::act(&client, &b.session_id, step("load_html", "", serde_json::json!(page))).await,
    );
    crate::helpers::ok(
        &crate::helpers::act(&client, &b.session_id, step("click", "#d", serde_json::Value::Null)).await,
    );
    let own = event_within(&mut ws_b, "Browser.downloadWillBegin", std::time::Duration::from_secs(10)).await;
    let own = own.expect("B's own connection hears of B's download");
    assert_eq!(own["params"]["suggestedFilename"], "b-report.txt", "{own}");
    let leaked = event_within(&mut ws_a, "Browser.downloadWillBegin", std::time::Duration::from_secs(2)).await;
    assert!(leaked.is_none(), "A heard of B's download: {leaked:?}");

    let targets = crate::cdp::reply_to(&mut ws_a, serde_json::json!({"id": 3, "method": "Target.getTargets"})).await;
    let page = targets["result"]["targetInfos"].as_array().unwrap().iter().find(|t| t["type"] == "page").unwrap()
        ["targetId"]
        .clone();
    let attached = crate::cdp::reply_to(
        &mut ws_a,
        serde_json::json!({"id": 4, "method": "Target.attachToTarget", "params": {"targetId": page, "flatten": true}}),
    )
    .await;
    let sid = attached["result"]["sessionId"].clone();
    let trace = crate::cdp::reply_to(
        &mut ws_a,
        serde_json::json!({"id": 5, "sessionId": sid, "method": "Tracing.start", "params": {}}),
    )
    .await;
    assert!(
        trace["error"]["message"].as_str().unwrap_or_default().contains("browserpool refuses Tracing.start"),
        "{trace}"
    );
    drop((ws_a, ws_b));
    client.release(&a.session_id).await.unwrap();
    client.release(&b.session_id).await.unwrap();
    server.stop().await;
}

/// The memory cgroup dir of `pid`: its v1 memory hierarchy's where the host has one, else its
/// unified one.
fn memory_cgroup(pid: i32) -> std::path::PathBuf {
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = |p: &str| p.trim_start_matches('/').to_string();
    let v1 = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, p) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "memory").then(|| Path::new("/sys/fs/cgroup/memory").join(path(p)))
    });
    v1.or_else(|| own.lines().find_map(|l| l.strip_prefix("0::")).map(|p| Path::new("/sys/fs/cgroup").join(path(p))))
        .unwrap_or_else(|| panic!("no memory cgroup for {pid}: {own}"))
}

/// The memory limit of cgroup `dir`, in MiB.
fn memory_limit_mb(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("memory.max"))
        .or_else(|_| std::fs::read_to_string(dir.join("memory.limit_in_bytes")))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    text.trim().parse::<u64>().unwrap_or_else(|_| panic!("{}: {text:?}", dir.display())) >> 20
}

/// Whether `pid` is gone or a zombie within 300 ms.
fn exiting(pid: i32) -> bool {
    std::thread::sleep(std::time::Duration::from_millis(300));
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Checks that every process of worker `w` is in its own cgroup `.../browserpool/w<port>`
/// with a memory limit of `mb`; returns that cgroup.
fn check_fenced(w: &pb::Worker, mb: u64) -> std::path::PathBuf {
    let dir = memory_cgroup(w.pid as i32);
    assert!(dir.ends_with(format!("browserpool/w{}", w.cdp_port)), "worker {} is in {}", w.worker_id, dir.display());
    for pid in group_members(w.pid as i32, "") {
        if std::fs::metadata(format!("/proc/{pid}/cgroup")).is_err() {
            continue; // gone since it was listed
        }
        let cgroup = memory_cgroup(pid);
        // A process on its way out (a killed tab's renderer) reads as the root cgroup for a
        // moment: only one still alive after that moment counts.
        if cgroup != dir && exiting(pid) {
            continue;
        }
        assert_eq!(cgroup, dir, "process {pid} of worker {} left its cgroup", w.worker_id);
    }
    assert_eq!(memory_limit_mb(&dir), mb, "{}", dir.display());
    dir
}

fn median(mut v: Vec<std::time::Duration>) -> std::time::Duration {
    v.sort();
    v[v.len() / 2]
}

/// A tenant's page that allocates without bound is killed at the tenant's `max_memory_mb`,
/// inside its own worker's cgroup: its action fails naming the memory limit, its tab comes back
/// with a navigation, and another tenant's session keeps navigating (both latencies printed).
/// A context tenant's shared browser carries its tenant's limit too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_ends_its_own_tab_at_its_tenant_s_limit_and_spares_the_neighbour() {
    use browserpool_client::action;
    use std::time::{Duration, Instant};

    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let admin = server.admin().await;
    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let fence = status.replicas[0].resource_fence.clone();
    if fence.is_empty() {
        assert_ne!(euid(), 0, "a root server on this host manages cgroups");
        crate::helpers::skip(
            "fences::a_memory_bomb_ends_its_own_tab_at_its_tenant_s_limit_and_spares_the_neighbour",
            "no cgroup per worker: the server is not root",
        );
        server.stop().await;
        return;
    }
    assert!(fence.contains("memory 1536 MiB") && fence.contains("4096 tasks"), "{fence}");
    let site = crate::helpers::fixture_site().await;
    for (id, isolation, mb) in [("bomb", pb::Isolation::Process, 384), ("dense", pb::Isolation::Context, 512)] {
        let tenant = pb::Tenant {
            id: id.into(),
            max_slots: 1,
            max_queue: 1,
            allow_private_networks: true,
            isolation: isolation as i32,
            max_memory_mb: mb,
            ..Default::default()
        };
        admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    }
    let too_small = pb::Tenant { id: "tiny".into(), max_slots: 1, max_memory_mb: 100, ..Default::default() };
    let e = admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(too_small) }).await.unwrap_err();
    assert!(e.message().contains("max_memory_mb: 100 is not 0"), "{e:?}");
    let bomb = server.client(&server.token("bomb", "ci", &["sessions:read", "sessions:write"]).await).await;
    let dense = server.client(&server.token("dense", "ci", &["sessions:read", "sessions:write"]).await).await;

    let a = bomb.acquire(30_000).await.unwrap().session_id;
    let b = admin.acquire(30_000).await.unwrap().session_id;
    let c = dense.acquire(30_000).await.unwrap();
    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let of = |s: &str| status.workers.iter().find(|w| w.session_id == s).cloned().expect("the session's worker");
    let a_cgroup = check_fenced(&of(&a), 384);
    // The cgroup is named after the port: once removed, the next spare on that port makes one
    // of the same name, so "removed" is "not the same directory any more".
    let a_inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&a_cgroup).unwrap());
    check_fenced(&of(&b), 1536);
    check_fenced(&worker(&admin, &c.worker_id).await, 512);
    dense.release(&c.session_id).await.unwrap();

    ok(&act(&bomb, &a, action("navigate", "", format!("{site}/about"))).await);
    let navigate = || async {
        let started = Instant::now();
        ok(&act(&admin, &b, action("navigate", "", format!("{site}/second"))).await);
        started.elapsed()
    };
    let mut quiet = Vec::new();
    for _ in 0..7 {
        quiet.push(navigate().await);
    }
    // 4 MiB every 20 ms, touched, kept: about two seconds to the limit.
    // The promise is kept on `window`: one nothing refers to is collected, ending the call.
    let eat = "window.keep = []; window.pending = new Promise(() => setInterval(() => { \
               const b = new Uint8Array(4 << 20); b.fill(1); window.keep.push(b); }, 20))";
    let mut eating = Box::pin(async {
        let started = Instant::now();
        let mut bomb_action = action("evaluate", "", eat);
        bomb_action.timeout_ms = 60_000;
        (act(&bomb, &a, bomb_action).await, started.elapsed())
    });
    let mut during = Vec::new();
    let (result, took) = loop {
        tokio::select! {
            done = &mut eating => break done,
            took = navigate() => during.push(took),
        }
    };
    let error = result.error.clone().expect("the bomb's action fails");
    eprintln!("memory bomb at 384 MB: {:?} after {took:?}: {}", error.code(), error.message);
    assert_eq!(error.code(), pb::ErrorCode::TabCrashed, "{error:?}");
    assert!(error.message.contains("memory limit of 384 MB"), "{}", error.message);
    let oom = std::fs::read_to_string(a_cgroup.join("memory.oom_control"))
        .or_else(|_| std::fs::read_to_string(a_cgroup.join("memory.events")))
        .unwrap();
    assert!(oom.lines().any(|l| l.starts_with("oom_kill ") && l != "oom_kill 0"), "{oom}");
    assert!(!during.is_empty(), "the neighbour navigated while the bomb ran");
    let (q, d) = (median(quiet), median(during.clone()));
    eprintln!(
        "neighbour navigate p50: quiet {q:?}, during the bomb {d:?} ({} navigations), ratio {:.2}",
        during.len(),
        d.as_secs_f64() / q.as_secs_f64()
    );
    // Only the tab ended: a navigation brings it back, and the session lives on.
    ok(&act(&bomb, &a, action("navigate", "", format!("{site}/about"))).await);
    for (client, id) in [(&bomb, &a), (&admin, &b)] {
        let state = client.get(id).await.unwrap().state;
        assert_eq!(pb::SessionState::try_from(state).unwrap(), pb::SessionState::Ready, "{id}");
    }
    // CPU: 24 spinning threads in A's browser weigh as much as B's browser, no more.
    let spin = "for (let i = 0; i < 24; i++) new Worker(URL.createObjectURL(new Blob(['for (;;) {}']))); 'spinning'";
    assert_eq!(ok(&act(&bomb, &a, action("evaluate", "", spin)).await), "spinning");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut spinning = Vec::new();
    for _ in 0..7 {
        spinning.push(navigate().await);
    }
    let s = median(spinning);
    eprintln!(
        "neighbour navigate p50: quiet {q:?}, with 24 spinning workers in another tenant's browser {s:?}, ratio {:.2}",
        s.as_secs_f64() / q.as_secs_f64()
    );
    bomb.release(&a).await.unwrap();
    admin.release(&b).await.unwrap();
    crate::helpers::eventually("a released worker's cgroup is removed", Duration::from_secs(10), || async {
        let same = std::fs::metadata(&a_cgroup).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == a_inode);
        (!same).then_some(())
    })
    .await;
    server.stop().await;
}

/// A server that is not root keeps its workers' DevTools out of every other process's reach:
/// each Chromium runs in a network namespace inside an unprivileged user namespace the
/// server's uid owns, sandboxed, and its CDP port does not exist on the host's loopback; the
/// server still drives it (through its gate) and pages still load (through its egress proxy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_root_keeps_devtools_in_a_namespace_of_its_own() {
    if euid() != 0 {
        return crate::helpers::skip(
            "fences::a_server_that_is_not_root_keeps_devtools_in_a_namespace_of_its_own",
            "starting a server as another uid needs root",
        );
    }
    let uid = 1_799_990_000;
    let site = crate::helpers::fixture_site().await;
    // Ports of its own: its port locks are in a lock dir of its own.
    let mut server = crate::helpers::BinaryServer::spawn_as(uid, &["--port-range", "19400-19409"]);
    assert!(
        server.startup_log.iter().any(|l| l.contains("inside an unprivileged user namespace")),
        "{:#?}",
        server.startup_log
    );
    let client = server.client().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, browserpool_client::action("navigate", "", format!("{site}/about"))).await);
    let title = ok(&act(&client, &id, browserpool_client::action("title", "", serde_json::Value::Null)).await);
    assert_eq!(title, "About");
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let w = status.workers.iter().find(|w| w.session_id == id).expect("the session's worker");
    assert!(status.replicas[0].sandbox.starts_with("sandboxed"), "{:?}", status.replicas[0].sandbox);
    let ns = |pid: i32, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap();
    let server_pid = server.pid() as i32;
    for pid in group_members(w.pid as i32, "") {
        assert_eq!(real_uid(pid), uid, "process {pid} runs as the server's uid");
        assert_ne!(ns(pid, "net"), ns(server_pid, "net"), "process {pid} is in the server's network namespace");
        assert_ne!(ns(pid, "user"), ns(server_pid, "user"), "process {pid} is in the server's user namespace");
    }
    // Nothing listens on its CDP port on the host: no local process, of any uid, gets in.
    let reached = std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], w.cdp_port as u16).into(),
        std::time::Duration::from_secs(1),
    );
    assert!(reached.is_err(), "the CDP port {} is open on the host's loopback", w.cdp_port);
    client.release(&id).await.unwrap();
    let (exit, _) = server.terminate();
    assert!(exit.success(), "{exit:?}");
    // Killed as it stopped; a process the kernel is still tearing down (a browser freeing its
    // memory) may show for a moment, one left running would still be there after seconds.
    let lingering = || {
        let left: Vec<_> = running_as(uid).into_iter().map(|pid| (pid, proc_status(pid, "State:"))).collect();
        left.is_empty().then_some(()).ok_or(left)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while let Err(left) = lingering() {
        assert!(std::time::Instant::now() < deadline, "processes of the server's uid outlived it by 5 s: {left:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The CDP endpoint shares the gRPC listener's budget of calls without a valid token per
/// address: past it, 429 with Retry-After and when to retry; a session's own `cdp_url` (its
/// ticket) still opens from the same address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdp_calls_without_a_valid_token_are_throttled_per_address() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let session = admin.acquire(30_000).await.unwrap();
    // A websocket upgrade (a plain GET is refused before credentials are looked at).
    let bare = session.cdp_url.split('?').next().unwrap().to_string();
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    let mut throttled = None;
    let started = std::time::Instant::now();
    for _ in 0..80 {
        let refused = match async_tungstenite::tokio::connect_async(bare.as_str()).await {
            Err(async_tungstenite::tungstenite::Error::Http(response)) => response,
            other => panic!("a CDP call without credentials was not refused: {:?}", other.map(|_| ())),
        };
        let status = refused.status().as_u16();
        if status == 429 && throttled.is_none() {
            throttled = Some(refused);
        }
        *statuses.entry(status).or_default() += 1;
    }
    let took = started.elapsed();
    eprintln!("80 CDP calls without credentials from one address in {took:?}: {statuses:?}");
    // The burst of 50 is answered as it is, and 10 more a second of the time the calls took.
    let answered = statuses.get(&401).copied().unwrap_or(0) as f64;
    let refilled = (took.as_secs_f64() * 10.0).ceil() + 1.0;
    assert!((50.0..=50.0 + refilled).contains(&answered), "{statuses:?} in {took:?}");
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), [401, 429], "{statuses:?}");
    let throttled = throttled.unwrap();
    let body = String::from_utf8_lossy(throttled.body().as_deref().unwrap_or_default()).into_owned();
    assert!(throttled.headers().contains_key("retry-after") && body.contains("retry in"), "{throttled:?} {body}");
    // The session's own link is a valid credential: never counted, never held back.
    let mut ws = crate::cdp::connect(&session.cdp_url).await;
    let version = crate::cdp::reply_to(&mut ws, serde_json::json!({"id": 1, "method": "Browser.getVersion"})).await;
    assert!(version["result"]["product"].as_str().is_some_and(|p| p.contains("Chrome")), "{version}");
    drop(ws);
    admin.release(&session.session_id).await.unwrap();
    server.stop().await;
}
