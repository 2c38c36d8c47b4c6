//! TLS for both listeners (rustls with the ring provider): the certificate files, checked at
//! start and re-read when they change on disk; the gRPC listener's handshakes (ALPN `h2`, a
//! client certificate required under mutual TLS); the HTTP listener's (ALPN `http/1.1`, so
//! websocket upgrades work; a client certificate optional, so probes and scrapers need none),
//! with [`ClientCert`] in every request and [`client_cert_gate`] for the paths that need one.
//!
//! Handshakes run in tasks of their own with a deadline, so a silent or plaintext client holds
//! neither the accept loop nor anything past [`HANDSHAKE_TIMEOUT`].

mod certs;
mod listener;
mod peers;

use certs::{load_client_ca, warn_if_key_readable, ReloadingCert};

pub use listener::{client_cert_gate, incoming, serve_http, ClientCertGate, PeerCert, TlsListener};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// Longest a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once per listener; past it, new connections wait in the backlog.
const MAX_HANDSHAKES: usize = 1024;
/// How often, at most, the certificate and key files are looked at for a change.
const RECHECK: Duration = Duration::from_secs(1);

/// What is wrong with the TLS flags or files; each names the flag, the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert and --tls-key go together: {0} is missing")]
    Incomplete(&'static str),
    #[error("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS with client certificates")]
    ClientCaWithoutTls,
    #[error("{flag} {}: file does not exist", path.display())]
    Missing { flag: &'static str, path: PathBuf },
    #[error("{flag} {}: cannot read: {source}", path.display())]
    Read { flag: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{flag} {}: not PEM (no -----BEGIN line)", path.display())]
    NotPem { flag: &'static str, path: PathBuf },
    #[error("{flag} {}: bad PEM: {reason}", path.display())]
    BadPem { flag: &'static str, path: PathBuf, reason: String },
    #[error("{flag} {}: no certificate in it (PEM CERTIFICATE block expected)", path.display())]
    NoCertificate { flag: &'static str, path: PathBuf },
    #[error("{flag} {}: certificate {index} is not a valid X.509 certificate", path.display())]
    BadCertificate { flag: &'static str, path: PathBuf, index: usize },
    #[error("{flag} {}: certificate {index} expired at {not_after}", path.display())]
    Expired { flag: &'static str, path: PathBuf, index: usize, not_after: String },
    #[error("{flag} {}: certificate {index} is not valid before {not_before}", path.display())]
    NotYetValid { flag: &'static str, path: PathBuf, index: usize, not_before: String },
    #[error("--tls-key {}: no private key in it (PKCS#8, PKCS#1 or SEC1 PEM expected)", path.display())]
    NoKey { path: PathBuf },
    #[error("--tls-key {}: unusable private key: {reason}", path.display())]
    BadKey { path: PathBuf, reason: String },
    #[error("--tls-key {} does not match the certificate in --tls-cert {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("--tls-client-ca {}: {reason}", path.display())]
    BadClientCa { path: PathBuf, reason: String },
    #[error("tls setup: {0}")]
    Setup(String),
}

/// Whether the listeners speak TLS, and whether clients must present certificates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// Plaintext (no `--tls-cert`).
    #[default]
    Off,
    /// TLS, no client certificates.
    Tls,
    /// TLS with client certificates (`--tls-client-ca`): required on gRPC, optional at the
    /// TLS level on the HTTP listener (see [`client_cert_gate`]).
    Mutual,
}

impl TlsMode {
    /// Both listeners speak TLS.
    pub fn enabled(self) -> bool {
        self != TlsMode::Off
    }

    /// Mutual TLS is on: paths that need a client certificate refuse requests without one.
    pub fn client_cert_required(self) -> bool {
        self == TlsMode::Mutual
    }

    /// `https` with TLS, `http` without: the HTTP listener's URL scheme.
    pub fn http_scheme(self) -> &'static str {
        if self.enabled() {
            "https"
        } else {
            "http"
        }
    }

    /// `wss` with TLS, `ws` without: the scheme of websocket URLs on the HTTP listener
    /// (`cdp_url`).
    pub fn ws_scheme(self) -> &'static str {
        if self.enabled() {
            "wss"
        } else {
            "ws"
        }
    }
}

/// In every request's extensions on the HTTP listener: whether its connection presented a
/// client certificate that chains to `--tls-client-ca` (always false without mutual TLS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCert {
    pub verified: bool,
}

/// In every request's extensions on the HTTP listener: the address its connection came from.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

impl ClientCert {
    /// The request's [`ClientCert`]; not verified when the serving code put none there.
    pub fn of(extensions: &axum::http::Extensions) -> ClientCert {
        extensions.get::<ClientCert>().copied().unwrap_or_default()
    }
}

/// The TLS setup of a server: one certificate resolver both listeners share, and a rustls
/// config for each.
#[derive(Clone)]
pub struct Tls {
    mode: TlsMode,
    grpc: Arc<ServerConfig>,
    http: Arc<ServerConfig>,
    /// The serving pair, which replica-to-replica connections also present and expect.
    resolver: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl Tls {
    /// Checks the flags and files and builds the listeners' configs: `None` without
    /// `--tls-cert`/`--tls-key`. Every problem with a file is an error naming it; a key file
    /// that group or others may read is a warning.
    pub fn from_files(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<Tls>, TlsError> {
        let (cert, key) = match (cert, key, client_ca) {
            (None, None, None) => return Ok(None),
            (None, None, Some(_)) => return Err(TlsError::ClientCaWithoutTls),
            (Some(_), None, _) => return Err(TlsError::Incomplete("--tls-key")),
            (None, Some(_), _) => return Err(TlsError::Incomplete("--tls-cert")),
            (Some(cert), Some(key), _) => (cert, key),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let resolver = Arc::new(ReloadingCert::load(cert, key, provider.clone())?);
        warn_if_key_readable(key);
        let roots = client_ca.map(load_client_ca).transpose()?;
        let mode = if roots.is_some() { TlsMode::Mutual } else { TlsMode::Tls };
        let config = |client_cert_optional: bool, alpn: &[u8]| -> Result<Arc<ServerConfig>, TlsError> {
            let builder = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| TlsError::Setup(e.to_string()))?;
            let builder = match &roots {
                None => builder.with_no_client_auth(),
                Some(roots) => {
                    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
                    let verifier = if client_cert_optional { verifier.allow_unauthenticated() } else { verifier };
                    builder.with_client_cert_verifier(verifier.build().map_err(|e| TlsError::BadClientCa {
                        path: client_ca.unwrap_or(Path::new("")).to_path_buf(),
                        reason: e.to_string(),
                    })?)
                }
            };
            let mut config = builder.with_cert_resolver(resolver.clone());
            config.alpn_protocols = vec![alpn.to_vec()];
            Ok(Arc::new(config))
        };
        Ok(Some(Tls { mode, grpc: config(false, b"h2")?, http: config(true, b"http/1.1")?, resolver, provider }))
    }

    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Handshakes of the gRPC listener: ALPN `h2`; under mutual TLS a client certificate
    /// chaining to the client CA is required.
    pub fn grpc_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.grpc.clone())
    }

    /// Handshakes of the HTTP listener: ALPN `http/1.1` (websocket upgrades); under mutual TLS
    /// a client certificate is verified when presented, never required.
    pub fn http_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.http.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Instant, SystemTime, UNIX_EPOCH};

    use axum::http::StatusCode;
    use rustls::RootCertStore;
    use tokio::net::{TcpListener, TcpStream};

    use super::certs::{load_certs, validity};
    use super::*;
    use rcgen::{CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            Files { dir: tempfile::tempdir().unwrap() }
        }

        fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, contents).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
            path
        }
    }

    type Ca = CertifiedIssuer<'static, KeyPair>;

    fn ca() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "test ca");
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    /// A leaf for localhost, signed by `ca`, valid from `from` to `to` (unix seconds).
    fn leaf(ca: &Ca, from: i64, to: i64) -> (String, String) {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(from as u64);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(to as u64);
        let key = KeyPair::generate().unwrap();
        (params.signed_by(&key, ca).unwrap().pem(), key.serialize_pem())
    }

    fn now() -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
    }

    fn valid_pair(files: &Files) -> (PathBuf, PathBuf) {
        let (cert, key) = leaf(&ca(), now() - 3600, now() + 86_400);
        (files.write("cert.pem", cert), files.write("key.pem", key))
    }

    fn err(cert: &Path, key: &Path, ca: Option<&Path>) -> String {
        Tls::from_files(Some(cert), Some(key), ca).expect_err("refused").to_string()
    }

    #[test]
    fn a_good_pair_loads_and_validity_is_read() {
        let files = Files::new();
        let (cert, key) = valid_pair(&files);
        let tls = Tls::from_files(Some(&cert), Some(&key), None).unwrap().unwrap();
        assert_eq!(tls.mode(), TlsMode::Tls);
        assert_eq!(tls.mode().ws_scheme(), "wss");
        let certs = load_certs("--tls-cert", &cert, SystemTime::now()).unwrap();
        let (nb, na) = validity::of(&certs[0]).unwrap();
        // The pair was made a moment ago: allow a second or two between then and now.
        assert!((nb.unix - (now() - 3600)).abs() <= 2, "not before {}", nb.text);
        assert!((na.unix - (now() + 86_400)).abs() <= 2, "not after {}", na.text);
    }

    #[test]
    fn flags_must_come_in_the_right_sets() {
        let p = Path::new("/nonexistent");
        assert!(Tls::from_files(None, None, None).unwrap().is_none());
        assert!(Tls::from_files(Some(p), None, None).unwrap_err().to_string().contains("--tls-key is missing"));
        assert!(Tls::from_files(None, Some(p), None).unwrap_err().to_string().contains("--tls-cert is missing"));
        assert!(matches!(Tls::from_files(None, None, Some(p)), Err(TlsError::ClientCaWithoutTls)));
        assert_eq!(TlsMode::Off.http_scheme(), "http");
        assert!(!TlsMode::Tls.client_cert_required());
        assert!(TlsMode::Mutual.client_cert_required());
    }

    #[test]
    fn each_bad_file_is_named_with_its_problem() {
        let files = Files::new();
        let (cert, key) = valid_pair(&files);
        let missing = files.dir.path().join("nope.pem");
        let e = err(&missing, &key, None);
        assert!(e.contains("--tls-cert") && e.contains("nope.pem") && e.contains("does not exist"), "{e}");
        let e = err(&cert, &missing, None);
        assert!(e.contains("--tls-key") && e.contains("nope.pem") && e.contains("does not exist"), "{e}");

        let garbage = files.write("garbage.pem", "hello, not a certificate\n");
        let e = err(&garbage, &key, None);
        assert!(e.contains("--tls-cert") && e.contains("garbage.pem") && e.contains("not PEM"), "{e}");
        let e = err(&cert, &garbage, None);
        assert!(e.contains("--tls-key") && e.contains("garbage.pem") && e.contains("not PEM"), "{e}");

        // The key file given as the certificate: PEM, but no certificate in it; and back.
        let e = err(&key, &key, None);
        assert!(e.contains("--tls-cert") && e.contains("key.pem") && e.contains("no certificate"), "{e}");
        let e = err(&cert, &cert, None);
        assert!(e.contains("--tls-key") && e.contains("cert.pem") && e.contains("no private key"), "{e}");

        let other_key = files.write("other-key.pem", KeyPair::generate().unwrap().serialize_pem());
        let e = err(&cert, &other_key, None);
        assert!(
            e.contains("--tls-key")
                && e.contains("other-key.pem")
                && e.contains("does not match")
                && e.contains("cert.pem"),
            "{e}"
        );

        let ca = ca();
        let (old, old_key) = leaf(&ca, now() - 86_400 * 10, now() - 86_400);
        let (old, old_key) = (files.write("old.pem", old), files.write("old-key.pem", old_key));
        let e = err(&old, &old_key, None);
        assert!(e.contains("--tls-cert") && e.contains("old.pem") && e.contains("expired at"), "{e}");
        // The instant as written, to the second: 2024-02-29 12:34:56 UTC is 1709210096.
        let (leap, leap_key) = leaf(&ca, 1_709_210_000, 1_709_210_096);
        let (leap, leap_key) = (files.write("leap.pem", leap), files.write("leap-key.pem", leap_key));
        let e = err(&leap, &leap_key, None);
        assert!(e.ends_with("certificate 0 expired at 2024-02-29 12:34:56 UTC"), "{e}");
        let (early, early_key) = leaf(&ca, now() + 86_400, now() + 86_400 * 10);
        let (early, early_key) = (files.write("early.pem", early), files.write("early-key.pem", early_key));
        let e = err(&early, &early_key, None);
        assert!(e.contains("early.pem") && e.contains("not valid before"), "{e}");

        let bad_der = files.write("bad-der.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
        let e = err(&bad_der, &key, None);
        assert!(e.contains("bad-der.pem") && e.contains("not a valid X.509"), "{e}");

        let e = err(&cert, &key, Some(&garbage));
        assert!(e.contains("--tls-client-ca") && e.contains("garbage.pem") && e.contains("not PEM"), "{e}");
        let e = err(&cert, &key, Some(&missing));
        assert!(e.contains("--tls-client-ca") && e.contains("does not exist"), "{e}");
    }

    #[test]
    fn a_readable_key_is_only_a_warning() {
        let files = Files::new();
        let (cert, key) = valid_pair(&files);
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert!(Tls::from_files(Some(&cert), Some(&key), None).unwrap().is_some());
    }

    #[test]
    fn a_changed_pair_is_reloaded_and_a_bad_one_refused() {
        let files = Files::new();
        let (cert, key) = valid_pair(&files);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let resolver = ReloadingCert::load(&cert, &key, provider).unwrap();
        let first = resolver.current().cert[0].clone();
        // Within RECHECK the files are not looked at.
        let (cert2, key2) = leaf(&ca(), now() - 60, now() + 86_400);
        std::fs::write(&cert, &cert2).unwrap();
        std::fs::write(&key, &key2).unwrap();
        assert_eq!(resolver.current().cert[0], first);
        let age = |r: &ReloadingCert| r.current.lock().unwrap().checked -= RECHECK;
        age(&resolver);
        let second = resolver.current().cert[0].clone();
        assert_ne!(second, first, "the new pair is served");
        // A key that does not match: refused, the previous pair kept.
        std::fs::write(&key, KeyPair::generate().unwrap().serialize_pem()).unwrap();
        age(&resolver);
        assert_eq!(resolver.current().cert[0], second);
        // The next good pair, written over the same paths, is served.
        let (cert3, key3) = leaf(&ca(), now() - 60, now() + 86_400);
        std::fs::write(&cert, &cert3).unwrap();
        std::fs::write(&key, &key3).unwrap();
        age(&resolver);
        let third = resolver.current().cert[0].clone();
        assert!(third != second && third != first, "the third pair is served");
    }

    #[test]
    fn the_gate_guards_its_prefix_under_mutual_tls_only() {
        let verified = {
            let mut e = axum::http::Extensions::new();
            e.insert(ClientCert { verified: true });
            e
        };
        let none = axum::http::Extensions::new();
        let gate = ClientCertGate { prefixes: &["/cdp/", "/mcp"], mode: TlsMode::Mutual };
        assert!(!gate.allows("/cdp/abc", &none));
        assert!(!gate.allows("/mcp", &none));
        assert_eq!(gate.refusal("/mcp").status(), StatusCode::FORBIDDEN);
        assert!(gate.allows("/cdp/abc", &verified));
        assert!(gate.allows("/mcp", &verified));
        assert!(gate.allows("/healthz", &none));
        for mode in [TlsMode::Off, TlsMode::Tls] {
            assert!(ClientCertGate { prefixes: &["/cdp/", "/mcp"], mode }.allows("/cdp/abc", &none));
        }
    }

    #[tokio::test]
    async fn a_silent_or_plaintext_client_holds_nothing_up() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let files = Files::new();
        let ca = ca();
        let (cert, key) = leaf(&ca, now() - 60, now() + 86_400);
        let (cert, key) = (files.write("cert.pem", cert), files.write("key.pem", key));
        let tls = Tls::from_files(Some(&cert), Some(&key), None).unwrap().unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut listener = TlsListener::with_timeout(tcp, tls.http_acceptor(), Duration::from_millis(300));

        // Connected before the good client, neither ever completes a handshake.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut plain = TcpStream::connect(addr).await.unwrap();
        plain.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n").await.unwrap();

        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let client = tokio::spawn(async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            connector.connect("localhost".try_into().unwrap(), tcp).await
        });
        let (conn, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept_tls())
            .await
            .expect("the good client gets through while the others hang");
        assert!(!conn.client_cert().verified);
        client.await.unwrap().expect("client handshake");

        // The plaintext client gets no HTTP answer, and its connection is closed.
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer))
            .await
            .expect("the plaintext connection is closed");
        assert!(!answer.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&answer));
        // The silent one is closed at the handshake deadline.
        let started = Instant::now();
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
            .await
            .expect("the silent connection is closed at the handshake deadline");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
