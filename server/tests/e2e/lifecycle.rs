//! Process-level behaviour: the real binary, signals, lock files, unimplemented rpcs.

use std::process::Command;

use browserpool_client::{action, pb, Client};

use crate::helpers::{act, fixture_site, ok, BinaryServer, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_sessions_kills_workers_and_exits_zero() {
    let mut server = BinaryServer::spawn().await;
    let (dir, grpc, http, token) =
        (server.dir.path().to_path_buf(), server.grpc.clone(), server.http.clone(), server.token.clone());
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join("admin.token")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "admin token is private");

    let client = Client::connect(format!("http://{grpc}"), &token).await.unwrap();
    let session = client.acquire(30_000).await.unwrap();
    let health = http_get(&format!("http://{http}/healthz")).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let metrics = http_get(&format!("http://{http}/metrics")).await;
    assert!(metrics.contains("browserpool_workers_leased 1"), "{metrics}");

    let (status, log) = server.terminate();
    assert_eq!(status.code(), Some(0), "exit 0 on sigterm");
    for line in log {
        assert!(!line.contains("eyJ"), "a token leaked into the log: {line}");
    }

    let profiles = browserpool_server::server::profiles_dir(&dir);
    assert!(
        !profiles.exists(),
        "profiles removed, and their dir: {:?}",
        std::fs::read_dir(&profiles).map(|d| d.count())
    );
    let store = browserpool_server::store::Store::open(&server.database_url).await.unwrap();
    let record = store.session(&session.session_id).await.unwrap().unwrap();
    assert_eq!(record.state.as_str(), "CLOSED");
    let transitions = store.transitions(&session.session_id).await.unwrap();
    assert_eq!(transitions.iter().map(|t| t.state.as_str()).collect::<Vec<_>>(), ["READY", "CLOSED"]);
    assert_eq!(transitions[1].reason, "server shutdown");
}

/// A tiny HTTP/1.1 GET over a raw socket (no client crate needed for three lines).
pub(crate) async fn http_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_skip_live_locks_and_reclaim_dead_ones() {
    let locks = tempfile::tempdir().unwrap();
    // Port 9590 is held by a live process, 9591 to 9593 by dead ones.
    let mut live = Command::new("sleep").arg("60").spawn().unwrap();
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    std::fs::write(locks.path().join("port-9590.lock"), format!("{}\n", live.id())).unwrap();
    std::fs::write(locks.path().join("port-9591.lock"), format!("{dead}\n")).unwrap();
    std::fs::write(locks.path().join("port-9592.lock"), format!("{dead}\n")).unwrap();
    std::fs::write(locks.path().join("port-9593.lock"), format!("{dead}\n")).unwrap();
    // Worker cgroups, as a server killed with SIGKILL leaves them (empty): the dead owner's is
    // removed at start (9592, where no worker boots: one is the most), the live one's kept, and
    // so is one outside the server's range (9593, its lock dead too). Where this process may
    // make them.
    let parent = worker_cgroups_parent();
    let made = RemovedAtEnd(
        parent
            .iter()
            .flat_map(|p| [p.join("w9590"), p.join("w9592"), p.join("w9593")])
            .filter_map(|dir| {
                let made = std::fs::create_dir(&dir).or_else(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(e),
                });
                made.ok().map(|()| (dir.clone(), inode(&dir).unwrap()))
            })
            .collect(),
    );
    if made.0.len() < 3 {
        eprintln!("no worker cgroups here: the cgroup sweep is not checked");
    }
    let lock_dir = locks.path().to_path_buf();
    let server = TestServer::start_with(move |a| {
        a.lock_dir = lock_dir;
        a.port_range = "9590-9592".parse().unwrap();
        a.max_workers = 1;
    })
    .await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let worker = status.workers.iter().find(|w| w.worker_id == session.worker_id).unwrap();
    assert_eq!(worker.cdp_port, 9591, "the dead owner's port is reclaimed, the live one skipped");
    let owner = std::fs::read_to_string(locks.path().join("port-9591.lock")).unwrap();
    assert_eq!(owner.trim(), std::process::id().to_string());
    let untouched = std::fs::read_to_string(locks.path().join("port-9590.lock")).unwrap();
    assert_eq!(untouched.trim(), live.id().to_string());
    for (dir, before) in &made.0 {
        let want = !dir.ends_with("w9592");
        assert_eq!((inode(dir) == Some(*before), dir.exists()), (want, want), "{}", dir.display());
    }
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
    assert!(!locks.path().join("port-9591.lock").exists(), "lock released at shutdown");
    live.kill().unwrap();
    live.wait().unwrap();
}

/// Where an in-process server makes its workers' cgroups (the memory hierarchy's, on v1), if
/// it makes them here.
fn worker_cgroups_parent() -> Option<std::path::PathBuf> {
    browserpool_pool::Cgroups::detect(1 << 30, 100).ok().map(|c| c.parent().to_path_buf())
}

/// Cgroup dirs a test made, removed when it ends, passed or not.
struct RemovedAtEnd(Vec<(std::path::PathBuf, u64)>);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        self.0.iter().for_each(|(dir, _)| drop(std::fs::remove_dir(dir)));
    }
}

fn inode(path: &std::path::Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_services_without_a_token() {
    let server = TestServer::start_with(|a| a.warm = 0).await;
    // Reflection (v1) without a token lists both services.
    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient, server_reflection_request::MessageRequest,
        server_reflection_response::MessageResponse, ServerReflectionRequest,
    };
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint()).unwrap().connect().await.unwrap();
    let mut reflection = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = reflection.server_reflection_info(tokio_stream::iter([req])).await.unwrap().into_inner();
    let resp = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else { panic!("{resp:?}") };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for want in ["browserpool.v1.Sessions", "browserpool.v1.Admin", "grpc.health.v1.Health"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    server.stop().await;
}

#[test]
fn a_bad_environment_value_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // No subcommand: `serve` from the environment alone, as a container entrypoint runs it.
    let out = Command::new(env!("CARGO_BIN_EXE_browserpool"))
        .env("BROWSERPOOL_DATA_DIR", dir.path())
        .env("BROWSERPOOL_SHUTDOWN_GRACE", "soon")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--shutdown-grace") && stderr.contains("soon"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!browserpool_server::server::profiles_dir(dir.path()).exists(), "nothing started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_revision_and_json_logs() {
    let version = Command::new(env!("CARGO_BIN_EXE_browserpool")).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let revision = browserpool_server::REVISION;
    assert_eq!(version, format!("browserpool {} (rev {revision})", env!("CARGO_PKG_VERSION")));
    assert!(revision == "unknown" || revision.bytes().all(|b| b.is_ascii_hexdigit()), "{revision}");

    let bad = Command::new(env!("CARGO_BIN_EXE_browserpool")).env("BROWSERPOOL_LOG_FORMAT", "xml").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("BROWSERPOOL_LOG_FORMAT: `xml` is not text or json"));

    // JSON lines, the serving line naming the build; /metrics says the same.
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_browserpool"))
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--warm", "0"])
        .arg("--data-dir")
        .arg(dir.path())
        .env("BROWSERPOOL_LOG_FORMAT", "json")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = loop {
        let line = lines.next().expect("the server logs `serving`").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{line}");
        if v["fields"]["message"] == "serving" {
            break v;
        }
    };
    assert_eq!(serving["fields"]["revision"], revision);
    let http = serving["fields"]["http_addr"].as_str().unwrap().to_string();
    let metrics = http_get(&format!("http://{http}/metrics")).await;
    let info = format!("browserpool_build_info{{version=\"{}\",revision=\"{revision}\"}} 1", env!("CARGO_PKG_VERSION"));
    assert!(metrics.contains(&info), "{metrics}");
    // With the default filter, a session's page loads leave no line per CDP message the CDP
    // library cannot parse (one for nearly every request with current Chromium).
    let token = std::fs::read_to_string(dir.path().join("admin.token")).unwrap();
    let grpc = serving["fields"]["grpc_addr"].as_str().unwrap();
    let client = Client::connect(format!("http://{grpc}"), token.trim()).await.unwrap();
    let session = client.acquire(60_000).await.unwrap();
    let site = fixture_site().await;
    for page in ["/", "/about", "/second"] {
        ok(&act(&client, &session.session_id, action("navigate", "", format!("{site}{page}"))).await);
    }
    client.release(&session.session_id).await.unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {rest:#?}");
    let unparsed: Vec<&String> = rest.iter().filter(|l| l.contains("Invalid message")).collect();
    assert!(unparsed.is_empty(), "{unparsed:#?}");
}

/// Runs `browserpool serve` (both listeners on port 0, no worker kept warm) with `args` until
/// it exits, at most a minute, without root's power over file modes: CAP_DAC_OVERRIDE,
/// CAP_DAC_READ_SEARCH and CAP_FOWNER leave its bounding set, so a directory's mode holds for
/// it as for any other user (as another user, the modes hold anyway). Returns its exit
/// status and what it wrote to stderr.
fn serve_until_exit(args: &[&str]) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_browserpool"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--warm", "0"])
        .args(args)
        .stderr(std::process::Stdio::piped());
    // SAFETY: prctl only, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for cap in [1, 2, 3] {
                // CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER; refused (EPERM) when not root.
                libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("browserpool serve {args:?} did not exit within a minute");
        }
        // Polling a child process for its exit: there is nothing else to wait on here.
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status, reader.join().unwrap())
}

/// A server that cannot start says what about: the data dir or lock dir by path, with
/// "permission denied" said plainly and who may write it, and the database by its URL
/// without the password.
#[test]
fn start_errors_name_the_path_or_database_and_say_permission_denied_plainly() {
    use std::os::unix::fs::PermissionsExt;
    let read_only = |dir: &tempfile::TempDir| {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
        dir.path().display().to_string()
    };
    let data = tempfile::tempdir().unwrap();
    let locked_data = read_only(&data);
    let (status, stderr) = serve_until_exit(&["--data-dir", &locked_data]);
    assert!(!status.success());
    assert!(
        stderr.contains(&format!(
            "error: data dir {locked_data}: cannot open server.lock: permission denied: {locked_data} is owned by uid"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("with mode 500, and this server runs as uid"), "{stderr}");

    let data = tempfile::tempdir().unwrap();
    let locks = tempfile::tempdir().unwrap();
    let locked_locks = read_only(&locks);
    let data_dir = data.path().display().to_string();
    let (status, stderr) = serve_until_exit(&["--data-dir", &data_dir, "--lock-dir", &locked_locks]);
    assert!(!status.success());
    assert!(stderr.contains(&format!("error: lock dir {locked_locks} (--lock-dir): permission denied: ")), "{stderr}");

    let free = tempfile::tempdir().unwrap();
    let free_locks = free.path().display().to_string();
    let unwritable = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}/browserpool.db", read_only(&unwritable));
    let (status, stderr) =
        serve_until_exit(&["--data-dir", &data_dir, "--lock-dir", &free_locks, "--database-url", &sqlite]);
    assert!(!status.success());
    assert!(stderr.contains(&format!("error: open database {sqlite}: database file ")), "{stderr}");
    assert!(stderr.contains("/browserpool.db: permission denied: "), "{stderr}");

    // Nothing listens on port 1: the answer names the database's host, never its password.
    let postgres = "postgres://bp:s3cret-pw@127.0.0.1:1/pool";
    let (status, stderr) =
        serve_until_exit(&["--data-dir", &data_dir, "--lock-dir", &free_locks, "--database-url", postgres]);
    assert!(!status.success());
    assert!(stderr.contains("error: open database postgres://bp@127.0.0.1:1/pool: "), "{stderr}");
    assert!(!stderr.contains("s3cret"), "the password leaked: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_says_where_it_listens_and_the_commands_it_prints_work() {
    let mut server = BinaryServer::spawn_with(&["--warm", "1"]).await;
    let grpc = format!("http://{}", server.grpc);
    let token = server.dir.path().join("admin.token").display().to_string();
    // Printed once it listened, before its `serving` line.
    let lines = server.startup_log.clone();
    let said = lines.join("\n");
    assert!(said.contains(&format!("browserpool is ready: gRPC {grpc}, HTTP http://{}", server.http)), "{said}");
    assert!(said.contains(&format!("admin token of the default tenant: {token}")), "{said}");
    // Its data dir is not ./.browserpool and its port not the default: the commands say so.
    let flags = format!(" --server {grpc} --token-file {token}");
    let acquire = format!("S=$(browserpool session acquire -q{flags})");
    assert!(said.contains(&acquire), "{said}");
    let release = format!("browserpool session release \"$S\"{flags}");
    assert!(said.contains(&release), "{said}");
    let path = said.lines().find(|l| l.trim_start().starts_with("export PATH=")).expect("an export PATH line").trim();

    // Run as printed, from another directory (no page is visited: no outside host here).
    let title = format!("browserpool session act \"$S\" title{flags}");
    let script = format!("set -e\n{path}\n{acquire}\n{title}\n{release}\necho \"released $S\"");
    let out = tokio::task::spawn_blocking(move || Command::new("sh").arg("-c").arg(script).current_dir("/").output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("released s-"), "{stdout}");
    let (status, _) = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}
