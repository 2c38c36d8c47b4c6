//! Sessions through an upstream proxy, against real proxies from the distribution on loopback:
//! tinyproxy (HTTP, Basic auth) and microsocks (SOCKS5, user and password), both sending their
//! own connections from 127.0.0.2, so the fixture site (on 127.0.0.1) tells by the peer address
//! whether a request came through the upstream or straight from the egress proxy. Wrong
//! credentials, an unreachable upstream, a private upstream a tenant may not reach and a host
//! the policy refuses each give an error a user can act on; bytes are metered, capped, audited
//! and on `/metrics`; the password shows in no answer, error, record or metric.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::response::Html;
use axum::routing::get;
use browserpool_client::{action, pb, Client};
use serde_json::json;

use crate::helpers::{act, eventually, ok, skip, TestServer};

const SECRET: &str = "up-s3cr3t-9c2e";
/// The body of `/big`: large enough that heads and framing are well under 5% of it.
const BIG: usize = 1 << 20;
/// Where both upstreams send their own connections from.
const UPSTREAM_SOURCE: &str = "127.0.0.2";

/// A proxy daemon of the test, killed when dropped.
struct Daemon {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `program` (or says why the test cannot run) and waits until it listens on `port`.
async fn daemon(
    test: &str,
    program: &str,
    args: &[String],
    port: u16,
    dir: tempfile::TempDir,
    log: PathBuf,
) -> Option<Daemon> {
    let Ok(child) = Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn() else {
        skip(test, &format!("{program} is not installed (apt-get install -y tinyproxy microsocks)"));
        return None;
    };
    let daemon = Daemon { child, port, log, _dir: dir };
    eventually(&format!("{program} to listen on {port}"), Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ())
    })
    .await;
    Some(daemon)
}

/// tinyproxy on 127.0.0.1 with Basic auth `ci:SECRET`, every port allowed for CONNECT.
async fn tinyproxy(test: &str) -> Option<Daemon> {
    let dir = tempfile::tempdir().unwrap();
    let (port, log) = (free_port(), dir.path().join("tinyproxy.log"));
    let conf = format!(
        "Port {port}\nListen 127.0.0.1\nBind {UPSTREAM_SOURCE}\nTimeout 30\nMaxClients 50\nLogFile \"{}\"\n\
         LogLevel Info\nBasicAuth ci {SECRET}\nUser nobody\nGroup nogroup\n",
        log.display()
    );
    let path = dir.path().join("tinyproxy.conf");
    std::fs::write(&path, conf).unwrap();
    // It drops to nobody: it must be able to write its log.
    std::fs::write(&log, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = vec!["-d".to_string(), "-c".to_string(), path.display().to_string()];
    daemon(test, "tinyproxy", &args, port, dir, log).await
}

/// microsocks on 127.0.0.1 with user `ci` and password SECRET.
async fn microsocks(test: &str) -> Option<Daemon> {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args: Vec<String> =
        ["-i", "127.0.0.1", "-p", &port.to_string(), "-b", UPSTREAM_SOURCE, "-u", "ci", "-P", SECRET]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let log = dir.path().join("none");
    daemon(test, "microsocks", &args, port, dir, log).await
}

/// A page of [`BIG`] bytes that asks for nothing else (no favicon: the metered bytes are
/// the page's).
fn big_page() -> String {
    let head = "<link rel=icon href=\"data:,\"><title>Big</title><pre>";
    format!("{head}{}</pre>", "x".repeat(BIG - head.len() - 6))
}

/// Who asked for what: (peer address, path).
type Seen = Arc<Mutex<Vec<(IpAddr, String)>>>;

/// `/page` (a title) and `/big` ([`BIG`] bytes), each request's peer recorded.
async fn site() -> (u16, Seen) {
    let seen: Seen = Arc::default();
    let note = |seen: Seen, path: &'static str| {
        move |ConnectInfo(peer): ConnectInfo<SocketAddr>| {
            seen.lock().unwrap().push((peer.ip(), path.to_string()));
            async move {
                match path {
                    "/big" => Html(big_page()),
                    _ => Html("<title>Through</title><p>page</p>".to_string()),
                }
            }
        }
    };
    let app = axum::Router::new()
        .route("/page", get(note(seen.clone(), "/page")))
        .route("/big", get(note(seen.clone(), "/big")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
    });
    (port, seen)
}

fn peers(seen: &Seen, path: &str) -> Vec<IpAddr> {
    seen.lock().unwrap().iter().filter(|(_, p)| p == path).map(|(ip, _)| *ip).collect()
}

async fn put_proxy(admin: &Client, id: &str, url: String, password: &str, tenants: &[&str]) {
    let proxy = pb::Proxy {
        id: id.into(),
        url,
        username: "ci".into(),
        password: password.into(),
        direct_hosts: vec!["localhost".into()],
        tenants: tenants.iter().map(|t| t.to_string()).collect(),
        has_password: false,
    };
    admin.admin().put_proxy(pb::PutProxyRequest { proxy: Some(proxy) }).await.unwrap();
}

async fn through(client: &Client, proxy: &str) -> pb::Session {
    let req = pb::AcquireRequest { wait_ms: 30_000, proxy_id: proxy.into(), ..Default::default() };
    client.acquire_with(req).await.unwrap()
}

/// The failed navigation's message (its code checked).
async fn navigate_fails(client: &Client, id: &str, url: &str, code: pb::ErrorCode) -> String {
    let r = act(client, id, action("navigate", "", url)).await;
    assert_eq!(crate::helpers::err_code(&r), code, "{url}: {:?}", r.error);
    r.error.unwrap().message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_leaves_through_its_http_proxy_with_the_servers_credentials() {
    const TEST: &str = "upstream::a_session_leaves_through_its_http_proxy_with_the_servers_credentials";
    let Some(tiny) = tinyproxy(TEST).await else { return };
    // A public-looking name for the tenant that may not reach private addresses.
    let server = TestServer::start_with(|a| a.resolve = vec![("public.test".into(), "8.8.8.8".parse().unwrap())]).await;
    let admin = server.admin().await;
    let (port, seen) = site().await;
    let up = format!("http://127.0.0.1:{}", tiny.port);
    put_proxy(&admin, "eu-1", up.clone(), SECRET, &[]).await;
    put_proxy(&admin, "bad-pass", up.clone(), "wrong", &[]).await;
    put_proxy(&admin, "gone", format!("http://127.0.0.1:{}", free_port()), SECRET, &[]).await;
    put_proxy(&admin, "theirs", up.clone(), SECRET, &["someone-else"]).await;

    // Through the upstream: the fixture sees the upstream's address, the upstream logs the
    // request, and the session's bytes match what the fixture served.
    let session = through(&admin, "eu-1").await;
    assert_eq!(session.proxy_id, "eu-1");
    let id = session.session_id.clone();
    let big = format!("http://127.0.0.1:{port}/big");
    ok(&act(&admin, &id, action("navigate", "", big.as_str())).await);
    assert_eq!(peers(&seen, "/big"), vec![UPSTREAM_SOURCE.parse::<IpAddr>().unwrap()]);
    assert!(tiny.log().contains(&format!("GET {big}")), "tinyproxy's log: {}", tiny.log());
    let got = admin.get(&id).await.unwrap();
    eprintln!("http: {} bytes received, {} sent, for {BIG} served", got.bytes_received, got.bytes_sent);
    let within = |n: u64, of: usize| (n as f64 - of as f64).abs() <= of as f64 * 0.05;
    assert!(within(got.bytes_received, BIG), "received {} of {BIG} served", got.bytes_received);
    assert!(got.bytes_sent > 100 && got.bytes_sent < 10_000, "sent {}", got.bytes_sent);
    // A direct host goes straight out.
    ok(&act(&admin, &id, action("navigate", "", format!("http://localhost:{port}/page"))).await);
    assert_eq!(peers(&seen, "/page"), vec!["127.0.0.1".parse::<IpAddr>().unwrap()], "localhost is a direct host");
    assert!(!tiny.log().contains("localhost"), "a direct host never reaches the upstream");
    admin.release(&id).await.unwrap();

    // Wrong credentials: proxy authentication failed, naming the proxy, in the navigate
    // error. (An https page: its tunnel's answer is the proxy's own; tinyproxy answers a plain
    // request's bad credentials with a 401 that reads as the site's.)
    let bad = through(&admin, "bad-pass").await;
    let why = navigate_fails(
        &admin,
        &bad.session_id,
        &format!("https://127.0.0.1:{port}/page"),
        pb::ErrorCode::NavigationFailed,
    )
    .await;
    assert!(why.contains("proxy authentication failed for proxy \"bad-pass\""), "{why}");
    assert!(why.contains("check its username and password") && !why.contains(SECRET), "{why}");
    admin.release(&bad.session_id).await.unwrap();
    // An upstream nobody listens on: ERR_PROXY_CONNECTION_FAILED naming it, at once.
    let gone = through(&admin, "gone").await;
    let started = std::time::Instant::now();
    let why = navigate_fails(
        &admin,
        &gone.session_id,
        &format!("http://127.0.0.1:{port}/page"),
        pb::ErrorCode::NavigationFailed,
    )
    .await;
    assert!(why.contains("ERR_PROXY_CONNECTION_FAILED") && why.contains("proxy \"gone\""), "{why}");
    assert!(started.elapsed() < Duration::from_secs(20), "no hang: {:?}", started.elapsed());
    admin.release(&gone.session_id).await.unwrap();

    // A proxy the tenant may not use, or none by that id: NOT_FOUND before any browser.
    for missing in ["theirs", "no-such-proxy"] {
        let req = pb::AcquireRequest { wait_ms: 1_000, proxy_id: missing.into(), ..Default::default() };
        let e = admin.sessions().acquire(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "{missing}: {e:?}");
        assert!(e.message().contains(&format!("proxy {missing:?} does not exist or may not be used")), "{e:?}");
    }

    // A tenant whose policy refuses private networks: the upstream's own address (loopback)
    // is judged too, and the host's name first, before the upstream sees anything.
    let locked = pb::Tenant {
        id: "locked".into(),
        max_slots: 1,
        max_queue: 1,
        default_proxy: "eu-1".into(),
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(locked) }).await.unwrap();
    let token = server.token("locked", "ci", &["sessions:read", "sessions:write"]).await;
    let tenant = server.client(&token).await;
    let s = tenant.acquire(30_000).await.unwrap();
    assert_eq!(s.proxy_id, "eu-1", "the tenant's default_proxy");
    let before = tiny.log();
    let why = navigate_fails(&tenant, &s.session_id, "http://public.test/", pb::ErrorCode::BlockedByPolicy).await;
    assert!(why.contains("proxy \"eu-1\"") && why.contains("may not be used by this session"), "{why}");
    let why = navigate_fails(
        &tenant,
        &s.session_id,
        &format!("http://127.0.0.1:{port}/page"),
        pb::ErrorCode::BlockedByPolicy,
    )
    .await;
    assert!(why.contains("private"), "{why}");
    assert_eq!(tiny.log(), before, "nothing reached the upstream");
    tenant.release(&s.session_id).await.unwrap();

    // The end is audited with the bytes and the proxy, and counted on /metrics; the password
    // is nowhere.
    let records = eventually("the session's end in the audit trail", Duration::from_secs(10), || async {
        let query = pb::QueryAuditRequest { limit: 10_000, ..Default::default() };
        let mut stream = admin.admin().query_audit(query).await.unwrap().into_inner();
        let mut records = Vec::new();
        while let Some(record) = stream.message().await.unwrap() {
            records.push(format!("{record:?}"));
        }
        records
            .iter()
            .any(|r| r.contains("SESSION ENDED") && r.contains(&id) && r.contains("proxy=eu-1 bytes_sent="))
            .then_some(records)
    })
    .await;
    assert!(records.iter().all(|r| !r.contains(SECRET)));
    let metrics = crate::lifecycle::http_get(&format!("http://{}/metrics", server.http)).await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("browserpool_network_bytes_total{")
                && l.contains("tenant=\"default\",proxy=\"eu-1\"")
                && l.contains("direction=\"received\"")
        })
        .unwrap_or_else(|| panic!("no bytes on /metrics: {metrics}"));
    let counted: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(counted >= got.bytes_received as f64, "{line}");
    assert!(!metrics.contains(SECRET));
    let listed = admin.admin().list_proxies(pb::ListProxiesRequest {}).await.unwrap().into_inner();
    assert!(!format!("{listed:?}").contains(SECRET));
    let ended = admin.get(&id).await.unwrap();
    assert!(ended.bytes_received >= got.bytes_received, "kept after the end: {ended:?}");
    assert!(!format!("{ended:?}").contains(SECRET));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_leaves_through_a_socks5_proxy_and_a_spent_budget_stops_its_requests() {
    const TEST: &str = "upstream::a_session_leaves_through_a_socks5_proxy_and_a_spent_budget_stops_its_requests";
    let Some(socks) = microsocks(TEST).await else { return };
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let (port, seen) = site().await;
    let up = format!("socks5://127.0.0.1:{}", socks.port);
    put_proxy(&admin, "socks", up.clone(), SECRET, &["default", "capped", "dense"]).await;
    put_proxy(&admin, "socks-bad", up, "wrong", &[]).await;

    // Through the Rust SDK's builder.
    let leased = admin.session().proxy("socks").await.unwrap();
    assert_eq!(leased.info().proxy_id, "socks");
    let s = leased.info().clone();
    ok(&act(&admin, &s.session_id, action("navigate", "", format!("http://127.0.0.1:{port}/page"))).await);
    assert_eq!(peers(&seen, "/page"), vec![UPSTREAM_SOURCE.parse::<IpAddr>().unwrap()]);
    assert_eq!(ok(&act(&admin, &s.session_id, action("title", "", json!(null))).await), json!("Through"));
    leased.release().await.unwrap();

    let bad = through(&admin, "socks-bad").await;
    let why = navigate_fails(
        &admin,
        &bad.session_id,
        &format!("http://127.0.0.1:{port}/page"),
        pb::ErrorCode::NavigationFailed,
    )
    .await;
    assert!(why.contains("SOCKS5 proxy authentication failed for proxy \"socks-bad\""), "{why}");
    admin.release(&bad.session_id).await.unwrap();

    // A tenant whose sessions may carry 200 kB: the big page is cut, then every request of
    // the session fails saying why.
    let capped = pb::Tenant {
        id: "capped".into(),
        max_slots: 1,
        max_queue: 1,
        allow_private_networks: true,
        default_proxy: "socks".into(),
        max_session_bytes: 200_000,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(capped) }).await.unwrap();
    let token = server.token("capped", "ci", &["sessions:read", "sessions:write"]).await;
    let tenant = server.client(&token).await;
    let s = tenant.acquire(30_000).await.unwrap();
    let _ = act(&tenant, &s.session_id, action("navigate", "", format!("http://127.0.0.1:{port}/big"))).await;
    let why = navigate_fails(
        &tenant,
        &s.session_id,
        &format!("http://127.0.0.1:{port}/page"),
        pb::ErrorCode::BlockedByPolicy,
    )
    .await;
    assert!(why.contains("max_session_bytes"), "{why}");
    let got = tenant.get(&s.session_id).await.unwrap();
    let total = got.bytes_sent + got.bytes_received;
    assert!((200_000..BIG as u64).contains(&total), "stopped past the budget, well before the page's end: {total}");
    tenant.release(&s.session_id).await.unwrap();

    // Context isolation: two sessions sharing the tenant's browser, one through the proxy and
    // one straight out; each context has its own egress, so each counts its own bytes.
    let dense = crate::isolation::context_tenant(&server, &admin, &[]).await;
    let a = through(&dense, "socks").await;
    let b = dense.acquire(30_000).await.unwrap();
    assert_eq!(a.worker_id, b.worker_id, "one shared browser");
    for (s, from) in [(&a, UPSTREAM_SOURCE), (&b, "127.0.0.1")] {
        seen.lock().unwrap().clear();
        ok(&act(&dense, &s.session_id, action("navigate", "", format!("http://127.0.0.1:{port}/page"))).await);
        assert_eq!(peers(&seen, "/page"), vec![from.parse::<IpAddr>().unwrap()], "{}", s.session_id);
    }
    let (a_bytes, b_bytes) = (dense.get(&a.session_id).await.unwrap(), dense.get(&b.session_id).await.unwrap());
    assert!(a_bytes.bytes_received > 0 && b_bytes.bytes_received > 0, "{a_bytes:?} {b_bytes:?}");
    ok(&act(&dense, &b.session_id, action("navigate", "", format!("http://127.0.0.1:{port}/big"))).await);
    let a_after = dense.get(&a.session_id).await.unwrap().bytes_received;
    assert_eq!(a_after, a_bytes.bytes_received, "b's page is not counted on a");
    for s in [&a, &b] {
        dense.release(&s.session_id).await.unwrap();
    }
    server.stop().await;
}

/// Replicas sharing a database and `secrets.key` (as the chart's keys Secret gives them): a
/// proxy saved through one carries a session on another; a replica with a key of its own says
/// what to do. The password, and its Basic encoding, appear in no log line (at debug) and no
/// file of either data dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_saved_through_one_replica_carries_a_session_on_another_and_is_never_logged() {
    const TEST: &str = "upstream::a_proxy_saved_through_one_replica_carries_a_session_on_another_and_is_never_logged";
    let Some(tiny) = tinyproxy(TEST).await else { return };
    let (port, seen) = site().await;
    let mut first = crate::helpers::BinaryServer::spawn_env(&[], &[("RUST_LOG", "debug")]).await;
    put_proxy(&first.client().await, "eu-1", format!("http://127.0.0.1:{}", tiny.port), SECRET, &[]).await;
    let mut second = crate::helpers::BinaryServer::replica_of(&first);
    let client = browserpool_client::Client::connect(format!("http://{}", second.grpc), &first.token).await.unwrap();
    let session = through(&client, "eu-1").await;
    assert_eq!(session.replica, client.get(&session.session_id).await.unwrap().replica);
    ok(&act(&client, &session.session_id, action("navigate", "", format!("http://127.0.0.1:{port}/page"))).await);
    assert_eq!(peers(&seen, "/page"), vec![UPSTREAM_SOURCE.parse::<IpAddr>().unwrap()]);
    client.release(&session.session_id).await.unwrap();

    // A replica whose data dir has the signing key but a secrets.key of its own.
    let dir = tempfile::tempdir().unwrap();
    for key in std::fs::read_dir(first.dir.path()).unwrap().flatten() {
        if key.file_name().to_string_lossy().starts_with("jwt-") {
            std::fs::copy(key.path(), dir.path().join(key.file_name())).unwrap();
        }
    }
    let mut third = crate::helpers::BinaryServer::spawn_in(dir, first.database_url.clone(), vec![]);
    let stranger = browserpool_client::Client::connect(format!("http://{}", third.grpc), &first.token).await.unwrap();
    let req = pb::AcquireRequest { wait_ms: 1_000, proxy_id: "eu-1".into(), ..Default::default() };
    let refused = stranger.sessions().acquire(req).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("give this replica the secrets.key the others have"), "{refused:?}");
    assert!(!refused.message().contains(SECRET));

    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("ci:{SECRET}"));
    let mut read = 0;
    for server in [&mut first, &mut second, &mut third] {
        let (_, mut lines) = server.terminate();
        lines.extend(server.startup_log.iter().cloned());
        read += lines.len();
        for line in &lines {
            assert!(!line.contains(SECRET) && !line.contains(&basic), "the password in the log: {line}");
        }
        let mut files = vec![server.dir.path().to_path_buf()];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().flatten().map(|e| e.path()));
            } else {
                for needle in [SECRET.as_bytes(), basic.as_bytes()] {
                    let file = std::fs::File::open(&path);
                    assert!(
                        !file.is_ok_and(|f| crate::proxies::holds(f, needle)),
                        "the password in {}",
                        path.display()
                    );
                }
            }
        }
    }
    assert!(read > 50, "the logs were read ({read} lines at debug)");
}

/// An https site on 127.0.0.1 (a certificate of its own, which the browser does not trust)
/// serving [`BIG`] bytes at `/big` and a 404 elsewhere, each request's peer recorded; answers
/// its port.
async fn tls_site(seen: Seen) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, peer)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let path = String::from_utf8_lossy(&head).split(' ').nth(1).unwrap_or_default().to_string();
                let (status, body) =
                    if path == "/big" { ("200 OK", big_page()) } else { ("404 Not Found", String::new()) };
                seen.lock().unwrap().push((peer.ip(), path));
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).await;
                let _ = tls.write_all(body.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

/// Bytes of an https page through a CONNECT tunnel of the upstream are metered as the network
/// carried them: within 5% of what the site served (its TLS records around the page).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_page_through_the_upstream_is_metered_within_five_percent() {
    const TEST: &str = "upstream::an_https_page_through_the_upstream_is_metered_within_five_percent";
    let Some(tiny) = tinyproxy(TEST).await else { return };
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let seen: Seen = Arc::default();
    let port = tls_site(seen.clone()).await;
    put_proxy(&admin, "eu-1", format!("http://127.0.0.1:{}", tiny.port), SECRET, &[]).await;
    let session = through(&admin, "eu-1").await;
    let url = format!("https://127.0.0.1:{port}/big");
    let page = crate::cdp::node("https_page.mjs", &session.cdp_url, None, &url).await;
    assert_eq!((page["status"].as_u64(), page["title"].as_str()), (Some(200), Some("Big")), "{page}");
    assert!(page["length"].as_u64().unwrap() >= (BIG - 100) as u64, "{page}");
    let big: Vec<IpAddr> = seen.lock().unwrap().iter().filter(|(_, p)| p == "/big").map(|(ip, _)| *ip).collect();
    assert_eq!(big, vec![UPSTREAM_SOURCE.parse::<IpAddr>().unwrap()], "through the upstream's tunnel");
    assert!(tiny.log().contains(&format!("CONNECT 127.0.0.1:{port}")), "{}", tiny.log());
    let got = admin.get(&session.session_id).await.unwrap();
    let off = (got.bytes_received as f64 - BIG as f64).abs() / BIG as f64;
    eprintln!("https: {} bytes received, {} sent, for {BIG} served", got.bytes_received, got.bytes_sent);
    assert!(off <= 0.05, "received {} for {BIG} served ({:.1}% off)", got.bytes_received, off * 100.0);
    admin.release(&session.session_id).await.unwrap();
    server.stop().await;
}

/// A TLS front on 127.0.0.1 for `to` (a proxy that speaks plain HTTP), serving `pair`.
async fn tls_front(pair: &crate::tls::Pair, to: u16) -> u16 {
    use rustls::pki_types::pem::PemObject;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(pair.cert.as_bytes()).map(Result::unwrap).collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut plain) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

/// An `https://` upstream is spoken to over TLS, its certificate verified against the
/// server's roots (`SSL_CERT_FILE` here): one from a CA the server trusts carries the session,
/// one from another CA is refused naming the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_reached_over_tls_and_its_certificate_checked() {
    const TEST: &str = "upstream::an_https_upstream_is_reached_over_tls_and_its_certificate_checked";
    let Some(tiny) = tinyproxy(TEST).await else { return };
    let (trusted, other) = (crate::tls::Ca::new("upstream ca"), crate::tls::Ca::new("someone else"));
    let good = tls_front(&trusted.server("proxy"), tiny.port).await;
    let bad = tls_front(&other.server("proxy"), tiny.port).await;
    let roots = tempfile::tempdir().unwrap();
    let ca_file = roots.path().join("ca.pem");
    std::fs::write(&ca_file, trusted.pem()).unwrap();
    let server = crate::helpers::BinaryServer::spawn_env(&[], &[("SSL_CERT_FILE", ca_file.to_str().unwrap())]).await;
    let admin = server.client().await;
    put_proxy(&admin, "tls-1", format!("https://127.0.0.1:{good}"), SECRET, &[]).await;
    put_proxy(&admin, "tls-bad", format!("https://127.0.0.1:{bad}"), SECRET, &[]).await;
    let (port, seen) = site().await;

    let s = through(&admin, "tls-1").await;
    ok(&act(&admin, &s.session_id, action("navigate", "", format!("http://127.0.0.1:{port}/page"))).await);
    assert_eq!(peers(&seen, "/page"), vec![UPSTREAM_SOURCE.parse::<IpAddr>().unwrap()]);
    assert!(tiny.log().contains(&format!("GET http://127.0.0.1:{port}/page")), "{}", tiny.log());
    admin.release(&s.session_id).await.unwrap();

    let s = through(&admin, "tls-bad").await;
    let url = format!("http://127.0.0.1:{port}/page");
    let why = navigate_fails(&admin, &s.session_id, &url, pb::ErrorCode::NavigationFailed).await;
    assert!(why.contains("ERR_PROXY_CONNECTION_FAILED: proxy \"tls-bad\"") && why.contains("TLS"), "{why}");
    admin.release(&s.session_id).await.unwrap();
}
