//! TLS for both listeners (rustls with the ring provider): the certificate files, checked at
//! start and re-read when they change on disk; the gRPC listener's handshakes (ALPN `h2`, a
//! client certificate required under mutual TLS); the HTTP listener's (ALPN `http/1.1`, so
//! websocket upgrades work; a client certificate optional, so probes and scrapers need none),
//! with [`ClientCert`] in every request and [`client_cert_gate`] for the paths that need one.
//!
//! Handshakes run in tasks of their own with a deadline, so a silent or plaintext client holds
//! neither the accept loop nor anything past [`HANDSHAKE_TIMEOUT`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use axum::Router;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
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

    /// Connections to another replica's listener (ALPN `alpn`): the peer must present the
    /// very certificate this replica serves, proving it holds the same key (every replica
    /// mounts the same Secret), so pod IPs need no place in the certificate; this replica
    /// presents it too, for a peer under mutual TLS (whose client CA must then have issued
    /// it, with the `clientAuth` usage).
    pub fn peer_connector(&self, alpn: &[u8]) -> tokio_rustls::TlsConnector {
        let verifier = Arc::new(SameCert { ours: self.resolver.clone(), provider: self.provider.clone() });
        let mut config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_cert_resolver(Arc::new(PresentOurs(self.resolver.clone())));
        config.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}

/// Accepts a server certificate only when it is the one this replica serves (re-read as the
/// files change), and its handshake signature verifies, proving the peer holds the key.
#[derive(Debug)]
struct SameCert {
    ours: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for SameCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self.ours.current().cert.first() {
            Some(ours) if ours.as_ref() == end_entity.as_ref() => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            _ => Err(rustls::Error::General(
                "the other replica serves a different certificate than this one (replicas share one; mid-rotation, retry)".into(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The serving pair, presented as this replica's client certificate.
#[derive(Debug)]
struct PresentOurs(Arc<ReloadingCert>);

impl rustls::client::ResolvesClientCert for PresentOurs {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A [`TcpListener`] whose connections come out TLS: each handshake runs in a task of its own
/// under [`HANDSHAKE_TIMEOUT`]; failed ones are logged (debug) and dropped, never returned.
/// Handshakes still running end when the listener is dropped.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> TlsListener {
        TlsListener::with_timeout(tcp, acceptor, HANDSHAKE_TIMEOUT)
    }

    /// [`TlsListener::new`] with another handshake deadline (tests).
    pub fn with_timeout(tcp: TcpListener, acceptor: TlsAcceptor, handshake_timeout: Duration) -> TlsListener {
        TlsListener { tcp, acceptor, handshake_timeout, handshakes: JoinSet::new() }
    }

    /// The next connection whose handshake succeeded. Cancel-safe: the handshakes under way
    /// live in the listener.
    pub async fn accept_tls(&mut self) -> (TlsStream<TcpStream>, SocketAddr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept(), if self.handshakes.len() < MAX_HANDSHAKES => match accepted {
                    Ok((tcp, peer)) => {
                        let _ = tcp.set_nodelay(true);
                        let acceptor = self.acceptor.clone();
                        let deadline = self.handshake_timeout;
                        self.handshakes.spawn(async move {
                            match tokio::time::timeout(deadline, acceptor.accept(tcp)).await {
                                Ok(Ok(tls)) => Some((tls, peer)),
                                Ok(Err(e)) => {
                                    tracing::debug!(%peer, error = %e, "tls handshake failed");
                                    None
                                }
                                Err(_) => {
                                    tracing::debug!(%peer, timeout = ?deadline, "tls handshake timed out");
                                    None
                                }
                            }
                        });
                    }
                    Err(e) => accept_error(e).await,
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(conn)) = done {
                        return conn;
                    }
                }
            }
        }
    }
}

/// As axum does for plain TCP: errors of one connection are skipped; others (out of
/// descriptors) are logged and retried after a pause rather than spun on.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.accept_tls().await
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// The gRPC listener's connections, for tonic's `serve_with_incoming_shutdown`. Never ends by
/// itself; dropping it ends the handshakes under way.
pub fn incoming(listener: TlsListener) -> impl futures::Stream<Item = std::io::Result<TlsStream<TcpStream>>> {
    futures::stream::unfold(listener, |mut listener| async move {
        let (conn, _) = listener.accept_tls().await;
        Some((Ok(conn), listener))
    })
}

/// Serves the HTTP listener's router, over TLS when `acceptor` is given, until `shutdown`
/// resolves (then graceful, as `axum::serve`). Every request carries its connection's
/// [`ClientCert`] in its extensions.
pub async fn serve_http(
    listener: TcpListener,
    router: Router,
    acceptor: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = WithClientCert(router);
    match acceptor {
        None => {
            use axum::serve::ListenerExt;
            // CDP is many small frames each way: none may wait on a delayed ACK.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, router).with_graceful_shutdown(shutdown).await
        }
        Some(acceptor) => {
            axum::serve(TlsListener::new(listener, acceptor), router).with_graceful_shutdown(shutdown).await
        }
    }
}

/// A connection that may carry a verified client certificate.
pub trait PeerCert {
    fn client_cert(&self) -> ClientCert;
}

impl PeerCert for TcpStream {
    fn client_cert(&self) -> ClientCert {
        ClientCert { verified: false }
    }
}

impl PeerCert for TlsStream<TcpStream> {
    fn client_cert(&self) -> ClientCert {
        // rustls only reports peer certificates its verifier accepted: a presented certificate
        // that does not chain to the client CA fails the handshake instead.
        ClientCert { verified: self.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()) }
    }
}

/// Makes, per connection, the router tagged with that connection's [`ClientCert`].
#[derive(Clone)]
struct WithClientCert(Router);

impl<'a, L> tower::Service<IncomingStream<'a, L>> for WithClientCert
where
    L: Listener<Addr = SocketAddr>,
    L::Io: PeerCert,
{
    type Response = Tagged;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Tagged, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: IncomingStream<'a, L>) -> Self::Future {
        let peer = PeerAddr(*stream.remote_addr());
        std::future::ready(Ok(Tagged { router: self.0.clone(), cert: stream.io().client_cert(), peer }))
    }
}

/// The router of one connection: puts the connection's [`ClientCert`] in every request.
#[derive(Clone)]
struct Tagged {
    router: Router,
    cert: ClientCert,
    peer: PeerAddr,
}

impl tower::Service<Request> for Tagged {
    type Response = Response;
    type Error = Infallible;
    type Future = axum::routing::future::RouteFuture<Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower::Service::<Request>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        req.extensions_mut().insert(self.cert);
        req.extensions_mut().insert(self.peer);
        self.router.call(req)
    }
}

/// Which requests [`client_cert_gate`] guards: those whose path starts with `prefix`, while
/// `mode` is mutual TLS.
#[derive(Clone, Copy, Debug)]
pub struct ClientCertGate {
    pub prefix: &'static str,
    pub mode: TlsMode,
}

impl ClientCertGate {
    /// Whether a request for `path` with these extensions may go on.
    pub fn allows(&self, path: &str, extensions: &axum::http::Extensions) -> bool {
        !self.mode.client_cert_required() || !path.starts_with(self.prefix) || ClientCert::of(extensions).verified
    }

    /// The answer to a request the gate does not allow: 403, naming what is missing.
    pub fn refusal(&self) -> Response {
        (StatusCode::FORBIDDEN, format!("{} needs a verified client certificate (mutual TLS)\n", self.prefix))
            .into_response()
    }
}

/// Middleware: refuses requests under the gate's prefix that came without a verified client
/// certificate while mutual TLS is on. Use with
/// `router.layer(axum::middleware::from_fn_with_state(gate, client_cert_gate))`.
pub async fn client_cert_gate(State(gate): State<ClientCertGate>, req: Request, next: Next) -> Response {
    if gate.allows(req.uri().path(), req.extensions()) {
        next.run(req).await
    } else {
        gate.refusal()
    }
}

/// The certificate and key, re-read on the next handshake at least [`RECHECK`] after the last
/// look when either file changed (inode, size or modification time: a rewrite or a symlink
/// swap, as a Kubernetes Secret update does). A new pair that fails the checks is logged and
/// the previous one kept. No task of its own: handshakes drive it.
#[derive(Debug)]
struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    /// The files as last looked at (loaded or refused), so a refused pair is logged once.
    stamp: Option<(FileStamp, FileStamp)>,
    checked: Instant,
}

/// What changes when a file is rewritten or replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileStamp {
    /// Follows symlinks: a swapped link target is a change.
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        })
    }
}

impl ReloadingCert {
    fn load(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<ReloadingCert, TlsError> {
        let stamp = FileStamp::of(cert).zip(FileStamp::of(key));
        let loaded = load_pair(cert, key, &provider, SystemTime::now())?;
        Ok(ReloadingCert {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            provider,
            current: Mutex::new(Current { key: Arc::new(loaded), stamp, checked: Instant::now() }),
        })
    }

    /// The pair to serve, after a look at the files if [`RECHECK`] has passed. The look (two
    /// `stat`s, and two small reads when they changed) runs under the lock, at most once a
    /// second; handshakes meanwhile wait that long.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.checked.elapsed() >= RECHECK {
            current.checked = Instant::now();
            // A file missing for a moment (mid-swap) is looked at again next time.
            let stamp = FileStamp::of(&self.cert_path).zip(FileStamp::of(&self.key_path));
            if stamp.is_some() && stamp != current.stamp {
                current.stamp = stamp;
                match load_pair(&self.cert_path, &self.key_path, &self.provider, SystemTime::now()) {
                    Ok(loaded) => {
                        tracing::info!(cert = %self.cert_path.display(), "tls certificate reloaded; new connections use it");
                        current.key = Arc::new(loaded);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "new tls certificate or key refused; serving the previous pair")
                    }
                }
            }
        }
        current.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Reads a file named by `flag`; a missing file says so.
fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => TlsError::Missing { flag, path: path.to_path_buf() },
        _ => TlsError::Read { flag, path: path.to_path_buf(), source },
    })
}

fn has_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

/// Every certificate of a PEM file, each a valid X.509 certificate valid at `now`.
fn load_certs(flag: &'static str, path: &Path, now: SystemTime) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(flag, path)?;
    if !has_pem(&bytes) {
        return Err(TlsError::NotPem { flag, path: path.to_path_buf() });
    }
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem { flag, path: path.to_path_buf(), reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { flag, path: path.to_path_buf() });
    }
    let now = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    for (index, cert) in certs.iter().enumerate() {
        let (not_before, not_after) =
            validity::of(cert).ok_or_else(|| TlsError::BadCertificate { flag, path: path.to_path_buf(), index })?;
        if now > not_after.unix {
            return Err(TlsError::Expired { flag, path: path.to_path_buf(), index, not_after: not_after.text });
        }
        if now < not_before.unix {
            return Err(TlsError::NotYetValid { flag, path: path.to_path_buf(), index, not_before: not_before.text });
        }
    }
    Ok(certs)
}

/// The certificate chain and its key, checked: both parse, the certificates are valid now, the
/// key is the first certificate's.
fn load_pair(cert: &Path, key: &Path, provider: &CryptoProvider, now: SystemTime) -> Result<CertifiedKey, TlsError> {
    let chain = load_certs("--tls-cert", cert, now)?;
    let bytes = read("--tls-key", key)?;
    if !has_pem(&bytes) {
        return Err(TlsError::NotPem { flag: "--tls-key", path: key.to_path_buf() });
    }
    let der = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey { path: key.to_path_buf() },
        e => TlsError::BadPem { flag: "--tls-key", path: key.to_path_buf(), reason: e.to_string() },
    })?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsError::BadKey { path: key.to_path_buf(), reason: e.to_string() })?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        Ok(()) => Ok(pair),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch { cert: cert.to_path_buf(), key: key.to_path_buf() })
        }
        // The provider cannot derive this key's public half: nothing to compare, as rustls does.
        Err(rustls::Error::InconsistentKeys(_)) => Ok(pair),
        Err(e) => Err(TlsError::BadCertificate { flag: "--tls-cert", path: cert.to_path_buf(), index: 0 })
            .inspect_err(|_| tracing::debug!(error = %e, "leaf certificate does not parse")),
    }
}

fn load_client_ca(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let certs = load_certs("--tls-client-ca", path, SystemTime::now())?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::BadClientCa { path: path.to_path_buf(), reason: e.to_string() })?;
    }
    Ok(Arc::new(roots))
}

/// A private key should be the server's alone; Kubernetes mounts Secrets 0644 unless
/// `defaultMode` says otherwise.
fn warn_if_key_readable(key: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(key) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                key = %key.display(),
                mode = format!("{mode:o}"),
                "the tls private key is readable by group or others; make it 0600 (or 0400)"
            );
        }
    }
}

/// A certificate's validity, read with `x509-parser` (rustls checks the rest of it).
mod validity {
    use x509_parser::time::ASN1Time;

    /// An instant from a certificate, as seconds since the epoch and as written.
    pub struct Time {
        pub unix: i64,
        pub text: String,
    }

    /// `(notBefore, notAfter)` of an X.509 certificate; `None` when it does not parse.
    pub fn of(cert: &[u8]) -> Option<(Time, Time)> {
        let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
        let validity = cert.validity();
        Some((time(&validity.not_before), time(&validity.not_after)))
    }

    fn time(t: &ASN1Time) -> Time {
        let d = t.to_datetime();
        let text = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            d.year(),
            u8::from(d.month()),
            d.day(),
            d.hour(),
            d.minute(),
            d.second()
        );
        Time { unix: t.timestamp(), text }
    }
}

#[cfg(test)]
mod tests {
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
        let gate = ClientCertGate { prefix: "/cdp/", mode: TlsMode::Mutual };
        assert!(!gate.allows("/cdp/abc", &none));
        assert_eq!(gate.refusal().status(), StatusCode::FORBIDDEN);
        assert!(gate.allows("/cdp/abc", &verified));
        assert!(gate.allows("/healthz", &none));
        for mode in [TlsMode::Off, TlsMode::Tls] {
            assert!(ClientCertGate { prefix: "/cdp/", mode }.allows("/cdp/abc", &none));
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
