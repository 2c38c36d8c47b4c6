//! The listeners' side: TLS handshakes in tasks of their own under a deadline, the HTTP
//! listener's service with each request's [`ClientCert`] and peer address, and the gate on
//! paths that need a client certificate.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{ClientCert, PeerAddr, TlsMode, HANDSHAKE_TIMEOUT, MAX_HANDSHAKES};

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

/// Which requests [`client_cert_gate`] guards: those whose path starts with one of
/// `prefixes`, while `mode` is mutual TLS.
#[derive(Clone, Copy, Debug)]
pub struct ClientCertGate {
    pub prefixes: &'static [&'static str],
    pub mode: TlsMode,
}

impl ClientCertGate {
    /// The guarded prefix `path` is under, if any.
    fn guarding(&self, path: &str) -> Option<&'static str> {
        self.prefixes.iter().copied().find(|p| path.starts_with(p))
    }

    /// Whether a request for `path` with these extensions may go on.
    pub fn allows(&self, path: &str, extensions: &axum::http::Extensions) -> bool {
        !self.mode.client_cert_required() || self.guarding(path).is_none() || ClientCert::of(extensions).verified
    }

    /// The answer to a request for `path` the gate does not allow: 403, naming what is missing.
    pub fn refusal(&self, path: &str) -> Response {
        let prefix = self.guarding(path).unwrap_or(path);
        (StatusCode::FORBIDDEN, format!("{prefix} needs a verified client certificate (mutual TLS)\n")).into_response()
    }
}

/// Middleware: refuses requests under the gate's prefix that came without a verified client
/// certificate while mutual TLS is on. Use with
/// `router.layer(axum::middleware::from_fn_with_state(gate, client_cert_gate))`.
pub async fn client_cert_gate(State(gate): State<ClientCertGate>, req: Request, next: Next) -> Response {
    if gate.allows(req.uri().path(), req.extensions()) {
        next.run(req).await
    } else {
        gate.refusal(req.uri().path())
    }
}
