//! TLS and mutual TLS on both listeners, with certificates made here by rcgen: the SDK over
//! https, plaintext refused, client certificates on gRPC and for `/cdp/` but not for probes,
//! a certificate rotated on disk, `wss://`, bad files at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::response::IntoResponse;
use browserpool_client::{action, pb, Client, TlsOptions};
use browserpool_server::tls::{client_cert_gate, ClientCert, ClientCertGate, Tls, TlsMode};
use futures::StreamExt;
use rcgen::{CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::TestServer;

/// A certificate authority made for one test (clients.rs uses it too).
pub(crate) struct Ca(CertifiedIssuer<'static, KeyPair>);

/// A certificate chain and its key, both PEM.
#[derive(Clone)]
pub(crate) struct Pair {
    pub(crate) cert: String,
    pub(crate) key: String,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    pub(crate) fn pem(&self) -> String {
        self.0.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub(crate) fn server(&self, cn: &str) -> Pair {
        self.leaf(cn, vec!["127.0.0.1".into(), "localhost".into()], ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate.
    pub(crate) fn client(&self, cn: &str) -> Pair {
        self.leaf(cn, Vec::new(), ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, cn: &str, names: Vec<String>, usage: ExtendedKeyUsagePurpose) -> Pair {
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        Pair { cert: params.signed_by(&key, &self.0).unwrap().pem(), key: key.serialize_pem() }
    }
}

/// Writes a file owner-only, as a key should be.
pub(crate) fn write_private(path: &Path, contents: &str) {
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

/// The server's files laid out as a Kubernetes Secret volume: `tls.crt` and `tls.key` are
/// links into `..data`, itself a link to a versioned directory, swapped atomically.
struct SecretDir {
    dir: tempfile::TempDir,
    version: u32,
}

impl SecretDir {
    fn new(pair: &Pair) -> SecretDir {
        let mut secret = SecretDir { dir: tempfile::tempdir().unwrap(), version: 0 };
        secret.publish(pair);
        std::os::unix::fs::symlink("..data/tls.crt", secret.cert()).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", secret.key()).unwrap();
        secret
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `pair` into a new version directory and swaps `..data` to it in one rename.
    fn publish(&mut self, pair: &Pair) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let dir = self.dir.path().join(&version);
        std::fs::create_dir(&dir).unwrap();
        write_private(&dir.join("tls.crt"), &pair.cert);
        write_private(&dir.join("tls.key"), &pair.key);
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("..data")).unwrap();
    }
}

/// A server with TLS from `secret` (mutual TLS with `client_ca`), no warm worker unless a
/// test acquires.
async fn tls_server(secret: &SecretDir, client_ca: Option<&Ca>, warm: usize) -> TestServer {
    let ca_path = client_ca.map(|ca| {
        let path = secret.path("client-ca.pem");
        std::fs::write(&path, ca.pem()).unwrap();
        path
    });
    let (cert, key) = (secret.cert(), secret.key());
    TestServer::start_with(move |args| {
        args.warm = warm;
        args.tls_cert = Some(cert);
        args.tls_key = Some(key);
        args.tls_client_ca = ca_path;
    })
    .await
}

fn options(ca: &Ca, identity: Option<&Pair>) -> TlsOptions {
    TlsOptions {
        ca_pem: ca.pem().into_bytes(),
        identity: identity.map(|p| (p.cert.clone().into_bytes(), p.key.clone().into_bytes())),
        domain: None,
    }
}

/// A fresh SDK connection over https; any failure (handshake, first call) is an error.
async fn tls_client(
    server: &TestServer,
    ca: &Ca,
    identity: Option<&Pair>,
) -> Result<Client, browserpool_client::Error> {
    Client::connect_tls(format!("https://{}", server.grpc), &server.admin_token, options(ca, identity)).await
}

/// `Get` of a session that does not exist: NOT_FOUND proves the call went through TLS and
/// auth; anything else is the connection failing.
async fn reaches_server(client: &Client) -> Result<(), String> {
    match client.get("no-such-session").await {
        Err(browserpool_client::Error::Status(s)) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(e) => Err(e.to_string()),
        Ok(s) => Err(format!("unexpected session {s:?}")),
    }
}

/// A rustls client config trusting `ca`, presenting `identity`, offering `alpn`.
fn client_config(ca: &Ca, identity: Option<&Pair>, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.0.der().clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(pair) => {
            let chain = rustls_pki_types::CertificateDer::pem_slice_iter(pair.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

async fn tls_connect(
    addr: SocketAddr,
    ca: &Ca,
    identity: Option<&Pair>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(client_config(ca, identity, b"http/1.1"));
    let tcp = TcpStream::connect(addr).await?;
    tokio::time::timeout(Duration::from_secs(10), connector.connect("localhost".try_into().unwrap(), tcp))
        .await
        .map_err(|_| std::io::Error::other("tls handshake timed out"))?
}

/// `GET path` over https; the whole response, or the error of the handshake or the read
/// (under TLS 1.3 a refused client certificate shows on the first read).
async fn https_get(addr: SocketAddr, path: &str, ca: &Ca, identity: Option<&Pair>) -> std::io::Result<String> {
    let mut tls = tls_connect(addr, ca, identity).await?;
    tls.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_string(&mut out))
        .await
        .map_err(|_| std::io::Error::other("response timed out"))??;
    Ok(out)
}

/// What a plaintext HTTP request to `addr` gets back (until the server closes).
async fn plaintext_get(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), tcp.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the server closes a plaintext connection to a TLS port");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_drives_a_session_over_tls_and_plaintext_is_refused() {
    let ca = Ca::new("round trip ca");
    let secret = SecretDir::new(&ca.server("browserpool"));
    let server = tls_server(&secret, None, 1).await;

    // Acquire, an action and release through the SDK over https.
    let client = tls_client(&server, &ca, None).await.expect("connect over tls");
    let session = client.acquire(30_000).await.expect("acquire over tls");
    let result = client.act(&session.session_id, action("evaluate", "", "6 * 7")).await.unwrap();
    assert!(result.ok, "{:?}", result.error);
    assert_eq!(result.value.as_ref().map(browserpool_client::to_json), Some(serde_json::json!(42)));
    client.release(&session.session_id).await.expect("release over tls");
    assert_eq!(client.get(&session.session_id).await.unwrap().state, pb::SessionState::Closed as i32);

    // Plaintext gRPC to the TLS port fails; the same call over TLS reaches the server.
    let plain = match Client::connect(format!("http://{}", server.grpc), &server.admin_token).await {
        Err(e) => Err(e.to_string()),
        Ok(c) => reaches_server(&c).await,
    };
    assert!(plain.is_err(), "plaintext gRPC to a TLS port must fail");
    reaches_server(&client).await.expect("the TLS client still works");

    // The HTTP listener: https answers, plaintext gets no HTTP answer.
    let health = https_get(server.http, "/healthz", &ca, None).await.expect("https /healthz");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let plain = plaintext_get(server.http, "/healthz").await;
    assert!(!plain.starts_with(b"HTTP/"), "plaintext got an HTTP answer: {:?}", String::from_utf8_lossy(&plain));
    // Without mutual TLS, /cdp/ is not gated on a client certificate (404: no route here yet).
    let cdp = https_get(server.http, "/cdp/anything", &ca, None).await.unwrap();
    assert!(!cdp.starts_with("HTTP/1.1 403"), "{cdp}");

    // A client that does not trust the server's CA is refused at the handshake.
    let stranger = Ca::new("someone else");
    let refused = match tls_client(&server, &stranger, None).await {
        Err(e) => Err(e.to_string()),
        Ok(c) => reaches_server(&c).await,
    };
    assert!(refused.is_err(), "a server certificate from an untrusted CA is refused");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_requires_a_client_certificate_on_grpc_cdp_and_mcp_but_not_for_probes() {
    let ca = Ca::new("server ca");
    let client_ca = Ca::new("client ca");
    let secret = SecretDir::new(&ca.server("browserpool"));
    let server = tls_server(&secret, Some(&client_ca), 0).await;
    let identity = client_ca.client("ci-runner");

    // gRPC: no client certificate, or one from another CA, is refused; the right one works.
    let without = match tls_client(&server, &ca, None).await {
        Err(e) => Err(e.to_string()),
        Ok(c) => reaches_server(&c).await,
    };
    assert!(without.is_err(), "gRPC without a client certificate must fail");
    let foreign = ca.client("not from the client ca");
    let wrong = match tls_client(&server, &ca, Some(&foreign)).await {
        Err(e) => Err(e.to_string()),
        Ok(c) => reaches_server(&c).await,
    };
    assert!(wrong.is_err(), "gRPC with a client certificate from another CA must fail");
    let client = tls_client(&server, &ca, Some(&identity)).await.expect("connect with a client certificate");
    reaches_server(&client).await.expect("gRPC with a client certificate works");

    // HTTP: probes and metrics need no client certificate.
    for path in ["/healthz", "/metrics"] {
        let answer = https_get(server.http, path, &ca, None).await.expect(path);
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    }
    // /cdp/ does: refused without one (403, named), let through with one.
    let refused = https_get(server.http, "/cdp/some-session", &ca, None).await.unwrap();
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("client certificate"), "{refused}");
    let through = https_get(server.http, "/cdp/some-session", &ca, Some(&identity)).await.unwrap();
    assert!(!through.starts_with("HTTP/1.1 403"), "{through}");
    // So does /mcp: 403 before the token is even read; with one, the token is what is missing.
    let refused = https_get(server.http, "/mcp", &ca, None).await.unwrap();
    assert!(refused.starts_with("HTTP/1.1 403") && refused.contains("/mcp needs a verified client"), "{refused}");
    let through = https_get(server.http, "/mcp", &ca, Some(&identity)).await.unwrap();
    assert!(through.starts_with("HTTP/1.1 401"), "{through}");
    // A certificate the client CA did not sign fails the handshake, even on the HTTP listener.
    let foreign_http = https_get(server.http, "/healthz", &ca, Some(&foreign)).await;
    assert!(foreign_http.is_err(), "{foreign_http:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_reaches_new_connections_and_old_ones_go_on() {
    let first_ca = Ca::new("first ca");
    let second_ca = Ca::new("second ca");
    let mut secret = SecretDir::new(&first_ca.server("browserpool v1"));
    let server = tls_server(&secret, None, 0).await;

    let old = tls_client(&server, &first_ca, None).await.expect("connect");
    reaches_server(&old).await.expect("first connection works");
    let mut old_http = tls_connect(server.http, &first_ca, None).await.expect("https connection");

    // cert-manager renews: a new pair from another CA behind the same paths (a link swap).
    secret.publish(&second_ca.server("browserpool v2"));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let attempt = match tls_client(&server, &second_ca, None).await {
            Ok(c) => reaches_server(&c).await,
            Err(e) => Err(e.to_string()),
        };
        match attempt {
            Ok(()) => break,
            Err(e) if Instant::now() > deadline => panic!("the rotated certificate was never served: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    // New connections get the new pair only...
    let stale = match tls_client(&server, &first_ca, None).await {
        Ok(c) => reaches_server(&c).await,
        Err(e) => Err(e.to_string()),
    };
    assert!(stale.is_err(), "the old certificate is no longer served to new connections");
    let health = https_get(server.http, "/healthz", &second_ca, None).await.expect("https with the new pair");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // ...and connections made before the rotation go on (a reconnect would fail: it would
    // meet the new certificate, which the first CA did not sign).
    reaches_server(&old).await.expect("the old gRPC connection goes on");
    old_http.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), old_http.read_to_string(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop().await;
}

/// A websocket echo route under `/cdp/`, as the CDP proxy will have: the upgrade by hand
/// (hyper's upgrade, tungstenite on the upgraded connection).
async fn ws_echo(mut req: axum::extract::Request) -> axum::response::Response {
    use async_tungstenite::tungstenite::protocol::Role;
    use axum::http::{header, StatusCode};
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return (StatusCode::BAD_REQUEST, "websocket only\n").into_response();
    };
    let verified = ClientCert::of(req.extensions()).verified;
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let io = async_tungstenite::tokio::TokioAdapter::new(hyper_util::rt::TokioIo::new(upgraded));
        let mut ws = async_tungstenite::WebSocketStream::from_raw_socket(io, Role::Server, None).await;
        // Echo until the client closes, prefixed with what the connection proved.
        while let Some(Ok(msg)) = ws.next().await {
            if let async_tungstenite::tungstenite::Message::Text(text) = msg {
                if ws.send(format!("verified={verified} {text}").into()).await.is_err() {
                    break;
                }
            }
        }
    });
    axum::response::Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "upgrade")
        .header(
            header::SEC_WEBSOCKET_ACCEPT,
            async_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()),
        )
        .body(axum::body::Body::empty())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_through_the_http_serving_code_and_the_cdp_gate() {
    let ca = Ca::new("wss ca");
    let client_ca = Ca::new("wss client ca");
    let secret = SecretDir::new(&ca.server("browserpool"));
    let ca_path = secret.path("client-ca.pem");
    std::fs::write(&ca_path, client_ca.pem()).unwrap();
    let tls = Tls::from_files(Some(&secret.cert()), Some(&secret.key()), Some(&ca_path)).unwrap().unwrap();
    assert_eq!(tls.mode().ws_scheme(), "wss");

    // The server's HTTP serving code and gate, with a test route where the proxy will be.
    let gate = ClientCertGate { prefixes: &["/cdp/"], mode: tls.mode() };
    let router = axum::Router::new()
        .route("/cdp/echo", axum::routing::get(ws_echo))
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn_with_state(gate, client_cert_gate));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving =
        tokio::spawn(browserpool_server::tls::serve_http(listener, router, Some(tls.http_acceptor()), async move {
            let _ = stopped.await;
        }));
    let url = format!("wss://localhost:{}/cdp/echo", addr.port());

    // Without a client certificate: the upgrade is refused with 403.
    let stream = tls_connect(addr, &ca, None).await.unwrap();
    match async_tungstenite::tokio::client_async(url.as_str(), stream).await {
        Err(async_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 403),
        Err(e) => panic!("expected a 403 refusal, got {e}"),
        Ok(_) => panic!("a /cdp/ upgrade without a client certificate was accepted"),
    }
    let health = https_get(addr, "/healthz", &ca, None).await.unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");

    // With one: wss works, and the route saw the verified certificate.
    let identity = client_ca.client("playwright");
    let stream = tls_connect(addr, &ca, Some(&identity)).await.unwrap();
    let (mut ws, response) = async_tungstenite::tokio::client_async(url.as_str(), stream).await.expect("wss handshake");
    assert_eq!(response.status(), 101);
    ws.send("hello".into()).await.unwrap();
    let echoed = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(echoed.into_text().unwrap().as_str(), "verified=true hello");
    ws.close(None).await.unwrap();

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), serving).await.expect("serving stops").unwrap().unwrap();
}

/// Writes `contents` under `dir` and returns the path.
fn file(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    write_private(&path, contents);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_files_stop_the_binary_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("start ca");
    let good = ca.server("browserpool");
    let cert = file(dir.path(), "cert.pem", &good.cert);
    let key = file(dir.path(), "key.pem", &good.key);
    let other_key = file(dir.path(), "other-key.pem", &KeyPair::generate().unwrap().serialize_pem());
    let not_pem = file(dir.path(), "notes.txt", "this is not a certificate\n");
    let missing = dir.path().join("missing.pem");
    // An expired certificate for the same key is made with a past validity.
    let expired = {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(now - 10 * 86_400);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(now - 86_400);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.0).unwrap().pem();
        (file(dir.path(), "expired.pem", &cert), file(dir.path(), "expired-key.pem", &key.serialize_pem()))
    };

    let cases: Vec<(Vec<&Path>, &str, &str)> = vec![
        (vec![&missing, &key], "missing.pem", "does not exist"),
        (vec![&not_pem, &key], "notes.txt", "not PEM"),
        (vec![&key, &key], "key.pem", "no certificate"),
        (vec![&cert, &cert], "cert.pem", "no private key"),
        (vec![&cert, &other_key], "other-key.pem", "does not match"),
        (vec![&expired.0, &expired.1], "expired.pem", "expired at"),
    ];
    for (files, name, problem) in cases {
        let flags = [std::ffi::OsStr::new("--tls-cert"), files[0].as_ref(), "--tls-key".as_ref(), files[1].as_ref()];
        let (status, stderr, data) = crate::helpers::serve_stops(&flags, &[]).await;
        assert!(!status.success(), "{name}: started anyway");
        assert!(stderr.contains(name) && stderr.contains(problem), "{name}/{problem}: {stderr}");
        // It stopped before taking the data dir or starting a browser.
        assert!(!browserpool_server::server::profiles_dir(data.path()).exists(), "{name}: the server went on to start");
    }

    // Only one of cert/key, or a client CA alone: refused by bind, naming what is missing.
    let data = tempfile::tempdir().unwrap();
    let mut args = browserpool_server::config::ServeArgs::for_tests(data.path());
    args.tls_cert = Some(cert.clone());
    let e = browserpool_server::bind(args).await.err().expect("cert without key is refused").to_string();
    assert!(e.contains("--tls-key"), "{e}");
    let mut args = browserpool_server::config::ServeArgs::for_tests(data.path());
    args.tls_client_ca = Some(cert.clone());
    let e = browserpool_server::bind(args).await.err().expect("client CA alone is refused").to_string();
    assert!(e.contains("--tls-client-ca") && e.contains("--tls-cert"), "{e}");
    assert_eq!(TlsMode::Off.ws_scheme(), "ws");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdp_url_says_wss_and_the_proxy_answers_over_mutual_tls() {
    let ca = Ca::new("cdp ca");
    let client_ca = Ca::new("cdp client ca");
    let secret = SecretDir::new(&ca.server("browserpool"));
    let server = tls_server(&secret, Some(&client_ca), 1).await;
    let identity = client_ca.client("puppeteer");
    let client = tls_client(&server, &ca, Some(&identity)).await.unwrap();
    let session = client.acquire(30_000).await.unwrap();
    let prefix = format!("wss://{}/cdp/{}?ticket=", server.http, session.session_id);
    assert!(session.cdp_url.starts_with(&prefix), "{}", session.cdp_url);

    // No client certificate: refused before the proxy sees the request.
    let stream = tls_connect(server.http, &ca, None).await.unwrap();
    match async_tungstenite::tokio::client_async(session.cdp_url.as_str(), stream).await {
        Err(async_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 403),
        other => panic!("expected 403, got {:?}", other.map(|_| ())),
    }
    // With one, the ticket attaches and the browser answers.
    let stream = tls_connect(server.http, &ca, Some(&identity)).await.unwrap();
    let (mut ws, _) = async_tungstenite::tokio::client_async(session.cdp_url.as_str(), stream).await.expect("wss");
    ws.send(r#"{"id":1,"method":"Browser.getVersion"}"#.into()).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap().unwrap().unwrap();
    assert!(answer.into_text().unwrap().contains("\"product\""), "a Browser.getVersion answer");
    ws.close(None).await.unwrap();
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}

/// A TLS replica of `first`: its database and signing key, the certificate in `secret`.
async fn tls_replica_of(first: &TestServer, secret: &SecretDir) -> TestServer {
    let (cert, key) = (secret.cert(), secret.key());
    let (keys_from, database_url) = (first.data_dir.path().to_path_buf(), first.database_url.clone());
    TestServer::start_with(move |args| {
        std::fs::create_dir_all(&args.store.data_dir).unwrap();
        for key in std::fs::read_dir(&keys_from).unwrap().flatten() {
            if key.file_name().to_string_lossy().starts_with("jwt-") {
                std::fs::copy(key.path(), args.store.data_dir.join(key.file_name())).unwrap();
            }
        }
        args.warm = 0;
        args.store.database_url = Some(database_url);
        args.tls_cert = Some(cert);
        args.tls_key = Some(key);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_forward_to_each_other_over_tls_and_only_to_the_same_certificate() {
    let ca = Ca::new("replicas ca");
    let shared = SecretDir::new(&ca.server("browserpool"));
    let a = tls_server(&shared, None, 1).await;
    let b = tls_replica_of(&a, &shared).await;
    let on_a = tls_client(&a, &ca, None).await.unwrap();
    let on_b = tls_client(&b, &ca, None).await.unwrap();
    let session = on_a.acquire(30_000).await.unwrap();

    // gRPC through B reaches A's browser over TLS.
    let result = on_b.act(&session.session_id, action("evaluate", "", "6 * 7")).await.unwrap();
    assert!(result.ok, "{result:?}");
    // So does the CDP websocket: wss to B, relayed over TLS to A.
    let path = session.cdp_url.split_once("/cdp/").unwrap().1.to_string();
    let url = format!("wss://localhost:{}/cdp/{path}", b.http.port());
    let stream = tls_connect(b.http, &ca, None).await.unwrap();
    let (mut ws, _) = async_tungstenite::tokio::client_async(url.as_str(), stream).await.expect("wss through B");
    ws.send(r#"{"id":1,"method":"Browser.getVersion"}"#.into()).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap().unwrap().unwrap();
    assert!(answer.into_text().unwrap().contains("\"product\""), "a Browser.getVersion answer");
    ws.close(None).await.unwrap();

    // A replica serving another certificate (same CA, another key) is not trusted by A's
    // peers, nor does it trust them: its forwards fail UNAVAILABLE, saying why.
    let other = SecretDir::new(&ca.server("impostor"));
    let c = tls_replica_of(&a, &other).await;
    let on_c = tls_client(&c, &ca, None).await.unwrap();
    let refused = on_c.act(&session.session_id, action("evaluate", "", "1")).await.unwrap_err().to_string();
    assert!(refused.contains("cannot be reached") && refused.contains("different certificate"), "{refused}");
    // Get still answers, from the database.
    assert_eq!(on_c.get(&session.session_id).await.unwrap().state, pb::SessionState::Ready as i32);

    on_b.release(&session.session_id).await.unwrap();
    c.stop().await;
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_drives_a_browser_over_mcp_on_https_directly_and_through_the_stdio_bridge() {
    use crate::mcp::{agent, browser, ok};
    use serde_json::{json, Value};
    const TEST: &str = "tls::an_agent_drives_a_browser_over_mcp_on_https_directly_and_through_the_stdio_bridge";
    let ca = Ca::new("mcp ca");
    let secret = SecretDir::new(&ca.server("browserpool"));
    std::fs::write(secret.path("ca.pem"), ca.pem()).unwrap();
    let ca_file = secret.path("ca.pem").display().to_string();
    let server = tls_server(&secret, None, 1).await;
    let site = crate::helpers::fixture_site().await;
    let admin = tls_client(&server, &ca, None).await.unwrap();
    let issue = pb::IssueTokenRequest {
        tenant: "default".into(),
        subject: "agent".into(),
        scopes: vec!["sessions:read".into(), "sessions:write".into()],
        ttl_s: 600,
    };
    let token = admin.admin().issue_token(issue).await.unwrap().into_inner().token;
    let url = format!("https://localhost:{}/mcp", server.http.port());
    let steps =
        || json!([browser("navigate", "", json!(format!("{site}/"))), browser("extract", "#greeting", Value::Null)]);
    let scenario = json!({"url": url, "token": token, "ca_file": ca_file, "steps": steps()});
    let Some(report) = agent(TEST, scenario).await else { return };
    assert_eq!(ok(&report["steps"][1]), "\"Hello, nobody\"");
    let scenario = json!({
        "transport": "stdio",
        "command": env!("CARGO_BIN_EXE_browserpool"),
        "args": ["mcp", "--url", url, "--ca-file", ca_file],
        "env": {"BROWSERPOOL_TOKEN": token},
        "steps": steps(),
    });
    let Some(report) = agent(TEST, scenario).await else { return };
    assert_eq!(ok(&report["steps"][1]), "\"Hello, nobody\"");
    server.stop().await;
}
