//! Forwarding between replicas sharing one database. Behind a Kubernetes Service a client's
//! calls land on any replica, but only the replica that acquired a session holds its browser.
//! A call naming a session another live replica holds is sent there whole: headers
//! (credentials, deadline, `traceparent`) and body as they stream, the answer coming back
//! unchanged, so the caller cannot tell. The owner checks the credentials again and writes
//! the call's one audit record; this replica writes none for it.
//!
//! - gRPC: [`ForwardLayer`], outermost, reads the first request message of the rpcs in
//!   [`SESSION_RPCS`] (unary or streaming), takes the session id out of it and either lets
//!   the call through or relays it over HTTP/2 to the owner's gRPC listener.
//! - CDP: [`cdp_forward`] relays a `/cdp/{session}` upgrade to the owner's HTTP listener and
//!   then splices the two upgraded connections.
//!
//! A forwarded call carries [`HOP_HEADER`], and a call that carries it is never forwarded
//! again (its receiver answers from what it holds). Between replicas TLS is on when the
//! listeners have it ([`crate::tls::Tls::peer_connector`]). An owner that cannot be reached
//! within the connect timeout gives UNAVAILABLE saying so; an owner whose heartbeat is stale
//! is swept at once, so the call gets the CRASHED answer.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{Request as AxumRequest, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response as AxumResponse};
use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tower::{Service, ServiceExt};

use crate::app::App;
use crate::auth::Claims;
use crate::auth::TokenCheck;
use crate::sessions::Sessions;
use crate::store::{ReplicaRecord, SessionOwner, Store};

/// Set on every forwarded request, to the forwarding replica's id: its receiver never
/// forwards it again.
pub const HOP_HEADER: &str = "x-browserpool-forwarded-by";

/// Most bytes of a first request message read to find its session id. Larger ones (an
/// envelope or a document near the message cap) are let through to this replica's handler.
const MAX_PEEK: usize = 8 << 20;

/// How often an idle connection to a peer is pinged, and how long the answer may take.
const PEER_KEEPALIVE: Duration = Duration::from_secs(5);

/// Cached session -> owner answers kept at most (a session never changes replica).
const OWNER_CACHE: usize = 16_384;

/// The one list of the rpcs about one session, with their request message, whose
/// `session_id` is field 1 (of the first message, for a stream). Forwarding reads the paths
/// ([`SESSION_RPCS`]); the gRPC adapters' `AboutSession`, which names the session in the
/// rpc's audit record, is implemented for each message from it (`session_rpcs!(then)` calls
/// `then!` with the list). A test checks it against the descriptor set: an rpc whose request
/// has a `session_id` is either here or in [`ANSWERED_HERE`], with the reason.
macro_rules! session_rpcs {
    ($then:ident) => {
        $then! {
            "/browserpool.v1.Sessions/Release" => ReleaseRequest,
            "/browserpool.v1.Sessions/Renew" => RenewRequest,
            "/browserpool.v1.Sessions/Get" => GetSessionRequest,
            "/browserpool.v1.Sessions/Drive" => DriveRequest,
            "/browserpool.v1.Sessions/Act" => ActRequest,
            "/browserpool.v1.Sessions/Batch" => BatchRequest,
            "/browserpool.v1.Sessions/Events" => EventsRequest,
            "/browserpool.v1.Sessions/ExportContext" => ExportContextRequest,
            "/browserpool.v1.Sessions/ImportContext" => ImportContextRequest,
            "/browserpool.v1.Admin/KillSession" => KillSessionRequest,
        }
    };
}
pub(crate) use session_rpcs;

macro_rules! paths {
    ($($path:literal => $message:ident),* $(,)?) => {
        &[$($path),*]
    };
}

/// The paths of [`session_rpcs`]: the rpcs forwarded to the replica holding their session.
pub const SESSION_RPCS: &[&str] = session_rpcs!(paths);

/// Rpcs whose request has a `session_id` that are answered by the replica that receives
/// them, and why.
pub const ANSWERED_HERE: &[(&str, &str)] = &[(
    "/browserpool.v1.Admin/QueryAudit",
    "its session_id is a filter, and the audit trail is the shared database's: any replica answers for every session",
)];

/// The field number of `session_id` in the (first) request message of an rpc about one
/// session. `List`, `Acquire` and the other Admin rpcs are answered here, from the database
/// or by fanning out ([`Peers::each_other`]).
pub fn session_field(path: &str) -> Option<u32> {
    SESSION_RPCS.contains(&path).then_some(1)
}

/// The string in field `field` (wire type 2) of a protobuf message, when present and UTF-8;
/// the last occurrence wins, as protobuf decoding has it. `None` for a malformed message:
/// the handler then refuses it with the decoder's own error.
pub fn string_field(mut msg: &[u8], field: u32) -> Option<String> {
    fn varint(buf: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = buf.split_first()?;
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut found = None;
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(&mut msg)?;
            }
            1 => msg = msg.get(8..)?,
            2 => {
                let len = usize::try_from(varint(&mut msg)?).ok()?;
                let value = msg.get(..len)?;
                if number == u64::from(field) {
                    found = Some(std::str::from_utf8(value).ok()?.to_string());
                }
                msg = &msg[len..];
            }
            5 => msg = msg.get(4..)?,
            _ => return None,
        }
    }
    found
}

/// Where a call naming a session goes.
enum Route {
    /// This replica answers: it holds the session, or nobody live does.
    Here,
    /// Another live replica holds it.
    Owner(ReplicaRecord),
    /// Which replica holds it cannot be known now (the database is away): UNAVAILABLE, so the
    /// caller retries.
    Unavailable(String),
}

/// What forwarding needs: this replica's sessions (and the shared store), the token check,
/// connections to the other replicas, and which replica holds which session.
#[derive(Clone)]
pub struct Peers {
    inner: Arc<PeersInner>,
}

struct PeersInner {
    sessions: Sessions,
    store: Store,
    tokens: TokenCheck,
    connect_timeout: Duration,
    /// Bound on looking up which replica holds a session.
    forward_timeout: Duration,
    /// TLS to the other replicas' gRPC (`h2`) and HTTP (`http/1.1`) listeners.
    tls: Option<(tokio_rustls::TlsConnector, tokio_rustls::TlsConnector)>,
    channels: Mutex<HashMap<String, tonic::transport::Channel>>,
    owners: Mutex<HashMap<String, SessionOwner>>,
    /// Spliced CDP connections end when this turns true.
    shutdown: CancellationToken,
}

impl Peers {
    pub fn new(
        app: &App,
        tls: Option<&crate::tls::Tls>,
        connect_timeout: Duration,
        forward_timeout: Duration,
        shutdown: CancellationToken,
    ) -> Peers {
        Peers {
            inner: Arc::new(PeersInner {
                sessions: app.sessions.clone(),
                store: app.store.clone(),
                tokens: app.tokens.clone(),
                connect_timeout,
                forward_timeout,
                tls: tls.map(|t| (t.peer_connector(b"h2"), t.peer_connector(b"http/1.1"))),
                channels: Mutex::new(HashMap::new()),
                owners: Mutex::new(HashMap::new()),
                shutdown,
            }),
        }
    }

    /// The live replica other than this one that holds session `id`, if any and if `caller`
    /// (when known) may use the session: a session of another tenant is answered here, as not
    /// found, never sent on. An owner whose heartbeat is stale is gone: the sweep runs now,
    /// ending its sessions as CRASHED, and this replica answers.
    async fn route(&self, id: &str, caller: Option<&Claims>) -> Route {
        let sessions = &self.inner.sessions;
        if sessions.holds(id) {
            return Route::Here;
        }
        let cached = self.inner.owners.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned();
        let owner = match cached {
            Some(owner) => owner,
            None => match self.owner_of(id).await {
                Ok(Some(owner)) => owner,
                // Unknown, ended, or its replica gone: the handler answers from the database.
                Ok(None) => return Route::Here,
                // Which replica holds it cannot be known now: retryable, never a hang.
                Err(why) => {
                    tracing::warn!(session = %id, error = %why, "cannot look up which replica holds a session");
                    return Route::Unavailable(format!(
                        "cannot find which replica holds session {id}: {why}; retry shortly"
                    ));
                }
            },
        };
        if caller.is_some_and(|c| !crate::sessions::may_use_session(c, &owner.tenant, &owner.subject)) {
            return Route::Here;
        }
        if owner.replica.id == sessions.replica_id() || owner.replica.grpc_addr.is_empty() {
            return Route::Here;
        }
        // An owner is judged gone by its heartbeat only while this replica may judge (it has
        // reached the database without a gap for a while); otherwise the call goes to it, and
        // if it cannot be reached the caller gets UNAVAILABLE.
        let Some(stale_before) = sessions.stale_before() else { return self.remember(id, owner) };
        if owner.replica.heartbeat_ms < stale_before {
            // Re-read: a cached heartbeat may be old while the owner is well.
            let fresh = match self.owner_of(id).await {
                Ok(fresh) => fresh,
                // The database went away meanwhile: nothing can be judged; try the owner.
                Err(_) => return self.remember(id, owner),
            };
            self.forget(id);
            match fresh {
                Some(fresh) if fresh.replica.heartbeat_ms >= stale_before => return self.remember(id, fresh),
                _ => {}
            }
            if let Err(e) = sessions.sweep().await {
                tracing::warn!(error = %e, "sweeping a replica that is gone failed");
            }
            return Route::Here;
        }
        self.remember(id, owner)
    }

    /// Which replica holds session `id`, from the database, within the forward timeout.
    async fn owner_of(&self, id: &str) -> Result<Option<SessionOwner>, String> {
        let lookup = self.inner.store.session_owner(id);
        match tokio::time::timeout(self.inner.forward_timeout, lookup).await {
            Ok(Ok(owner)) => Ok(owner),
            Ok(Err(e)) => Err(format!("the database: {e}")),
            Err(_) => Err(format!("the database did not answer within {:?}", self.inner.forward_timeout)),
        }
    }

    fn remember(&self, id: &str, owner: SessionOwner) -> Route {
        let mut owners = self.inner.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.len() >= OWNER_CACHE {
            owners.clear();
        }
        let replica = owner.replica.clone();
        owners.insert(id.to_string(), owner);
        Route::Owner(replica)
    }

    fn forget(&self, id: &str) {
        self.inner.owners.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// This replica's id, sent in [`HOP_HEADER`].
    fn me(&self) -> http::HeaderValue {
        http::HeaderValue::from_str(self.inner.sessions.replica_id()).expect("replica ids are ASCII")
    }

    /// A channel to the gRPC listener at `addr` (one per peer, connected on first use and
    /// again after a failure), under the connect timeout.
    pub fn channel(&self, addr: &str) -> tonic::transport::Channel {
        let mut channels = self.inner.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(addr) {
            return channel.clone();
        }
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("a host:port from the replica table is a valid authority")
            .connect_timeout(self.inner.connect_timeout)
            .tcp_nodelay(true)
            // A peer that accepted the connection and then froze fails it within 10 s: the
            // calls on it end UNAVAILABLE instead of hanging.
            .http2_keep_alive_interval(PEER_KEEPALIVE)
            .keep_alive_timeout(PEER_KEEPALIVE)
            .keep_alive_while_idle(true);
        let connector = Connector {
            tls: self.inner.tls.as_ref().map(|(grpc, _)| grpc.clone()),
            timeout: self.inner.connect_timeout,
        };
        let channel = endpoint.connect_with_connector_lazy(connector);
        channels.insert(addr.to_string(), channel.clone());
        channel
    }

    /// Every other live replica, for calls about the whole service.
    pub async fn others(&self) -> Result<Vec<ReplicaRecord>, crate::store::StoreError> {
        let stale_before = crate::clock::now_ms() - crate::sessions::REPLICA_STALE.as_millis() as i64;
        let me = self.inner.sessions.replica_id();
        Ok(self
            .inner
            .store
            .replicas(stale_before)
            .await?
            .into_iter()
            .filter(|r| r.id != me && !r.grpc_addr.is_empty())
            .collect())
    }

    /// A request to another replica's Admin service on behalf of the caller: its
    /// credentials and trace context, and [`HOP_HEADER`], so the peer answers for itself.
    pub fn on_behalf<T>(&self, caller: &tonic::metadata::MetadataMap, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        for key in ["authorization", "traceparent", "tracestate"] {
            if let Some(v) = caller.get(key) {
                req.metadata_mut().insert(key, v.clone());
            }
        }
        req.metadata_mut().insert(
            HOP_HEADER,
            tonic::metadata::MetadataValue::try_from(self.inner.sessions.replica_id()).expect("replica ids are ASCII"),
        );
        req.set_timeout(Duration::from_secs(10));
        req
    }

    /// Whether a call came from another replica (and must be answered here alone).
    pub fn forwarded(metadata: &tonic::metadata::MetadataMap) -> bool {
        metadata.contains_key(HOP_HEADER)
    }

    /// Relays a gRPC call to `owner`; a transport failure becomes UNAVAILABLE naming it.
    async fn forward_grpc(
        &self,
        mut req: http::Request<Body>,
        owner: &ReplicaRecord,
        id: &str,
    ) -> http::Response<Body> {
        req.headers_mut().insert(HOP_HEADER, self.me());
        // The owner's spans are children of this replica's span for the call.
        crate::telemetry::inject_traceparent(req.headers_mut());
        let channel = self.channel(&owner.grpc_addr);
        let sent = match channel.ready_oneshot().await {
            Ok(mut channel) => channel.call(req).await,
            Err(e) => Err(e),
        };
        match sent {
            // A stream (or a long call) whose owner dies midway ends UNAVAILABLE, naming it.
            Ok(response) => {
                let lost = format!(
                    "the connection to replica {} at {}, which holds session {id}, broke mid-call",
                    owner.id, owner.grpc_addr
                );
                response.map(|body| Body::new(EndsUnavailable { body: Some(body), lost }))
            }
            Err(e) => {
                self.forget(id);
                tracing::warn!(session = %id, replica = %owner.id, addr = %owner.grpc_addr, error = %e, "could not forward a call to the replica holding its session");
                let mut answer = tonic::Status::from(crate::error::ServiceError::Unreachable(format!(
                    "session {id} is held by replica {} at {}, which cannot be reached: {}",
                    owner.id,
                    owner.grpc_addr,
                    error_chain(&e)
                )))
                .into_http();
                answer.headers_mut().insert(UNREACHABLE_MARK, http::HeaderValue::from_static("1"));
                answer
            }
        }
    }

    /// Relays a `/cdp/{id}` upgrade to `owner`'s HTTP listener; once both sides upgraded,
    /// splices them until either closes or this server stops.
    async fn forward_cdp(&self, mut req: AxumRequest, owner: &ReplicaRecord, id: &str) -> AxumResponse {
        // Nothing checked the caller yet: the answer names no address; the log does.
        let unreachable = |e: &dyn std::fmt::Display| {
            tracing::warn!(session = %id, replica = %owner.id, addr = %owner.http_addr, error = %e, "could not relay a cdp connection to the replica holding its session");
            (
                http::StatusCode::SERVICE_UNAVAILABLE,
                format!("the replica holding session {id} cannot be reached; retry, or see the server log\n"),
            )
                .into_response()
        };
        let io =
            match connect(&owner.http_addr, self.inner.tls.as_ref().map(|(_, http)| http), self.inner.connect_timeout)
                .await
            {
                Ok(io) => io,
                Err(e) => {
                    self.forget(id);
                    return unreachable(&e);
                }
            };
        let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
            Ok(pair) => pair,
            Err(e) => return unreachable(&e),
        };
        let shutdown = self.inner.shutdown.clone();
        self.inner.sessions.spawn(async move {
            tokio::select! {
                r = conn.with_upgrades() => if let Err(e) = r { tracing::debug!(error = %e, "forwarded cdp connection ended") },
                _ = shutdown.cancelled() => {}
            }
        });
        let client_upgrade = hyper::upgrade::on(&mut req);
        let mut upstream = http::Request::builder()
            .method(req.method())
            .uri(req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("method and path of a request we received");
        *upstream.headers_mut() = req.headers().clone();
        upstream.headers_mut().insert(HOP_HEADER, self.me());
        let mut answer = match sender.send_request(upstream).await {
            Ok(answer) => answer,
            Err(e) => return unreachable(&e),
        };
        if answer.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            // The owner's refusal (401, 404, 429...) goes back as it is.
            let (parts, body) = answer.into_parts();
            return AxumResponse::from_parts(parts, axum::body::Body::new(body));
        }
        let upstream_upgrade = hyper::upgrade::on(&mut answer);
        let shutdown = self.inner.shutdown.clone();
        let session = id.to_string();
        self.inner.sessions.spawn(async move {
            let (up, down) = match tokio::join!(upstream_upgrade, client_upgrade) {
                (Ok(up), Ok(down)) => (up, down),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::debug!(session = %session, error = %e, "forwarded cdp upgrade failed");
                    return;
                }
            };
            let (mut up, mut down) = (TokioIo::new(up), TokioIo::new(down));
            tokio::select! {
                r = tokio::io::copy_bidirectional(&mut down, &mut up) => {
                    if let Err(e) = r { tracing::debug!(session = %session, error = %e, "forwarded cdp connection ended") }
                }
                _ = shutdown.cancelled() => {}
            }
        });
        let (parts, _) = answer.into_parts();
        AxumResponse::from_parts(parts, axum::body::Body::empty())
    }
}

/// A failure and its causes, on one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A connection to a peer, TLS or not.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// TCP to `addr` under `timeout`, then TLS when configured.
async fn connect(
    addr: &str,
    tls: Option<&tokio_rustls::TlsConnector>,
    timeout: Duration,
) -> Result<Box<dyn Io>, std::io::Error> {
    let connected = async {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        Ok::<_, std::io::Error>(match tls {
            None => Box::new(tcp) as Box<dyn Io>,
            Some(tls) => {
                // The peer is checked by its certificate (see `SameCert`), not its name.
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
                let name = rustls_pki_types::ServerName::try_from(host.to_string())
                    .unwrap_or_else(|_| rustls_pki_types::ServerName::try_from("replica").expect("a valid DNS name"));
                Box::new(tls.connect(name, tcp).await?)
            }
        })
    };
    tokio::time::timeout(timeout, connected).await.map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {}", humantime::format_duration(timeout)),
        )
    })?
}

/// The channels' connector: [`connect`] for a URI's authority.
#[derive(Clone)]
struct Connector {
    tls: Option<tokio_rustls::TlsConnector>,
    timeout: Duration,
}

impl Service<http::Uri> for Connector {
    type Response = TokioIo<Box<dyn Io>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let addr = uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
            Ok(TokioIo::new(connect(&addr, this.tls.as_ref(), this.timeout).await?))
        })
    }
}

/// Tower layer putting [`ForwardService`] around the gRPC routes (outermost: a forwarded
/// call is checked and audited by its owner, not here).
#[derive(Clone)]
pub struct ForwardLayer {
    peers: Peers,
}

impl ForwardLayer {
    pub fn new(peers: Peers) -> ForwardLayer {
        ForwardLayer { peers }
    }
}

impl<S> tower::Layer<S> for ForwardLayer {
    type Service = ForwardService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ForwardService { inner, peers: self.peers.clone() }
    }
}

/// See [`ForwardLayer`].
#[derive(Clone)]
pub struct ForwardService<S> {
    inner: S,
    peers: Peers,
}

impl<S, B> Service<http::Request<Body>> for ForwardService<S>
where
    S: Service<http::Request<Body>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // The clone that was made ready is the one that serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let field = session_field(req.uri().path()).filter(|_| !req.headers().contains_key(HOP_HEADER));
        let Some(field) = field else {
            return Box::pin(async move { Ok(inner.call(req).await?.map(Body::new)) });
        };
        let peers = self.peers.clone();
        // A Drive client may wait for the response headers before it sends the message that
        // names the session: answer them at once and route when the message comes. A call
        // this replica refuses itself (a bad token) is answered as before.
        let early = req.uri().path() == DRIVE_PATH;
        if early && peers.forwardable(req.headers(), req.uri().path()).is_none() {
            return Box::pin(async move { Ok(inner.call(req).await?.map(Body::new)) });
        }
        let routed = async move {
            let (parts, body) = req.into_parts();
            let (first, body) = first_message(body).await;
            let id = first.as_deref().and_then(|m| string_field(m, field)).filter(|id| !id.is_empty());
            // A session held here goes straight on: the auth layer checks its token, once.
            // Otherwise only calls this replica would let through are forwarded: a bad token,
            // or a non-admin KillSession, is refused (and audited) here.
            let route = match &id {
                Some(id) if !peers.inner.sessions.holds(id) => {
                    match peers.forwardable(&parts.headers, parts.uri.path()) {
                        Some(claims) => peers.route(id, Some(&claims)).await,
                        None => Route::Here,
                    }
                }
                _ => Route::Here,
            };
            match (route, id) {
                (Route::Owner(owner), Some(id)) => {
                    // Get can be answered from the database when the owner cannot be reached
                    // (its message is the whole body, so it can be sent again here).
                    let again = (parts.uri.path() == GET_PATH).then(|| (copy_head(&parts), first.clone()));
                    let answer = peers.forward_grpc(http::Request::from_parts(parts, body), &owner, &id).await;
                    match again {
                        Some((head, Some(message))) if unreachable(&answer) => {
                            let req =
                                http::Request::from_parts(head, Body::new(http_body_util::Full::new(frame(&message))));
                            Ok(inner.call(req).await?.map(Body::new))
                        }
                        _ => Ok(answer),
                    }
                }
                (Route::Unavailable(why), _) => {
                    Ok(tonic::Status::from(crate::error::ServiceError::Unreachable(why)).into_http())
                }
                _ => Ok(inner.call(http::Request::from_parts(parts, body)).await?.map(Body::new)),
            }
        };
        if early {
            let routed = async move {
                match routed.await {
                    Ok(answer) => answer,
                    Err(never) => match never {},
                }
            };
            return Box::pin(async move { Ok(answer_early(Box::pin(routed))) });
        }
        Box::pin(routed)
    }
}

/// A forwarded answer's body, whose transport failure (the owner died or froze midway: an
/// HTTP/2 reset, a closed connection) ends the call as UNAVAILABLE with `lost` and the cause,
/// which clients retry, instead of the INTERNAL a broken stream would give.
struct EndsUnavailable {
    body: Option<Body>,
    lost: String,
}

impl HttpBody for EndsUnavailable {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Some(body) = self.body.as_mut() else { return Poll::Ready(None) };
        match std::task::ready!(Pin::new(body).poll_frame(cx)) {
            Some(Err(e)) => {
                self.body = None;
                tracing::warn!(error = %e, "{}", self.lost);
                let status = tonic::Status::unavailable(format!("{}: {}; retry", self.lost, e.message()));
                let answer: http::Response<Body> = status.into_http();
                Poll::Ready(Some(Ok(Frame::trailers(status_trailers(answer.headers())))))
            }
            other => Poll::Ready(other),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(HttpBody::is_end_stream)
    }
}

/// The status of a trailers-only answer (its headers), as trailers of a body.
fn status_trailers(headers: &http::HeaderMap) -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    for name in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
        if let Some(value) = headers.get(name) {
            trailers.insert(name, value.clone());
        }
    }
    trailers
}

/// `Sessions.Drive`: its headers are answered before its first message is read.
const DRIVE_PATH: &str = "/browserpool.v1.Sessions/Drive";

/// A gRPC response whose headers go out now and whose body is `routed`'s answer once it
/// comes: its messages and trailers, or, for a trailers-only answer (an error before any
/// message), its status as the trailers.
fn answer_early(routed: futures::future::BoxFuture<'static, http::Response<Body>>) -> http::Response<Body> {
    let mut answer = http::Response::new(Body::new(Deferred::Waiting(routed)));
    answer.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    answer
}

enum Deferred {
    Waiting(futures::future::BoxFuture<'static, http::Response<Body>>),
    Streaming(Body),
    Done,
}

impl HttpBody for Deferred {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            match &mut *self {
                Deferred::Waiting(routed) => {
                    let answer = std::task::ready!(routed.as_mut().poll(cx));
                    let (head, body) = answer.into_parts();
                    if head.headers.contains_key("grpc-status") {
                        *self = Deferred::Done;
                        return Poll::Ready(Some(Ok(Frame::trailers(status_trailers(&head.headers)))));
                    }
                    *self = Deferred::Streaming(body);
                }
                Deferred::Streaming(body) => return Pin::new(body).poll_frame(cx),
                Deferred::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Deferred::Waiting(_) => false,
            Deferred::Streaming(body) => body.is_end_stream(),
            Deferred::Done => true,
        }
    }
}

/// `Sessions.Get`: answered from the database when the owner cannot be reached.
const GET_PATH: &str = "/browserpool.v1.Sessions/Get";

/// Method, URI, version and headers of a request (its extensions are not copied).
fn copy_head(parts: &http::request::Parts) -> http::request::Parts {
    let mut req = http::Request::new(());
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    req.into_parts().0
}

/// One uncompressed gRPC message frame.
fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

/// Whether a forwarded call failed because its owner could not be reached.
fn unreachable(answer: &http::Response<Body>) -> bool {
    crate::grpc_status::of(answer.headers()) == Some(tonic::Code::Unavailable as i32)
        && answer.headers().contains_key(UNREACHABLE_MARK)
}

/// Marks this replica's own UNAVAILABLE for an owner it could not reach (the owner's own
/// UNAVAILABLE answers, e.g. draining, carry no such header).
const UNREACHABLE_MARK: &str = "x-browserpool-unreachable";

impl Peers {
    /// The call's claims when its token passes this replica's own checks (and scope `admin`
    /// for an Admin rpc); `None` for calls this replica refuses itself.
    fn forwardable(&self, headers: &http::HeaderMap, path: &str) -> Option<Claims> {
        let header = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let claims = self.inner.tokens.verify_header(header).ok()?;
        (!crate::auth::is_admin_rpc(path) || claims.is_admin()).then_some(claims)
    }
}

/// Reads a gRPC request body until its first message is whole, and gives that message (when
/// uncompressed and at most [`MAX_PEEK`] bytes) and the body again, unread.
async fn first_message(mut body: Body) -> (Option<Bytes>, Body) {
    let mut seen: Vec<Frame<Bytes>> = Vec::new();
    let mut buf = BytesMut::new();
    let mut ended = false;
    let wanted = loop {
        if buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf[0] != 0 || len > MAX_PEEK {
                break None;
            }
            if buf.len() >= 5 + len {
                break Some(Bytes::copy_from_slice(&buf[5..5 + len]));
            }
        }
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    buf.extend_from_slice(data.chunk());
                }
                seen.push(frame);
            }
            Some(Err(e)) => {
                // The handler sees the same failure on its own read.
                tracing::debug!(error = %e, "request body failed before its first message");
                ended = true;
                break None;
            }
            None => {
                ended = true;
                break None;
            }
        }
    };
    let rest = if ended { None } else { Some(body) };
    (wanted, Body::new(Replayed { seen: seen.into(), rest }))
}

/// A body that gives the frames already read, then the rest of the original.
struct Replayed {
    seen: std::collections::VecDeque<Frame<Bytes>>,
    rest: Option<Body>,
}

impl HttpBody for Replayed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(frame) = self.seen.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.seen.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }
}

/// Axum middleware on `/cdp/{session}`: relays the upgrade to the replica holding the
/// session, or lets this replica's handler answer.
pub async fn cdp_forward(State(peers): State<Peers>, req: AxumRequest, next: Next) -> AxumResponse {
    let id = req.uri().path().strip_prefix(crate::cdp::CDP_PREFIX).unwrap_or_default().to_string();
    if id.is_empty() || id.contains('/') || req.headers().contains_key(HOP_HEADER) {
        return next.run(req).await;
    }
    // The ticket or token is checked by the owner alone (a ticket lives in its memory).
    match peers.route(&id, None).await {
        Route::Owner(owner) => peers.forward_cdp(req, &owner, &id).await,
        // Nothing checked the caller yet: the answer names no database error; the log does.
        Route::Unavailable(_) => (
            http::StatusCode::SERVICE_UNAVAILABLE,
            format!("which replica holds session {id} cannot be found now; retry, or see the server log\n"),
        )
            .into_response(),
        Route::Here => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn the_session_id_is_read_from_each_rpc_that_names_one() {
        let act = browserpool_proto::v1::ActRequest {
            session_id: "s-1".into(),
            action: Some(browserpool_proto::v1::Action { action: "navigate".into(), ..Default::default() }),
        };
        assert_eq!(string_field(&act.encode_to_vec(), 1).as_deref(), Some("s-1"));
        let drive = browserpool_proto::v1::DriveRequest { session_id: "s-2".into(), action: None };
        assert_eq!(string_field(&drive.encode_to_vec(), 1).as_deref(), Some("s-2"));
        let kill = browserpool_proto::v1::KillSessionRequest { session_id: "s-3".into(), reason: "x".into() };
        assert_eq!(string_field(&kill.encode_to_vec(), 1).as_deref(), Some("s-3"));
        // Fields before and after it, of every wire type, are skipped.
        let renew = browserpool_proto::v1::RenewRequest { session_id: "s-4".into(), idle_timeout_ms: 300 };
        let mut bytes = renew.encode_to_vec();
        bytes.extend_from_slice(&[0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 1, 2, 3, 4]);
        assert_eq!(string_field(&bytes, 1).as_deref(), Some("s-4"));
        // Unset: no id. Truncated or not UTF-8: no id (the handler's decoder refuses it).
        assert_eq!(string_field(&browserpool_proto::v1::ActRequest::default().encode_to_vec(), 1), None);
        let whole = act.encode_to_vec();
        assert_eq!(string_field(&whole[..3], 1), None);
        assert_eq!(string_field(&[0x0a, 2, 0xff, 0xfe], 1), None);
        assert_eq!(string_field(&[0x0f], 1), None, "wire type 7 does not exist");
    }

    #[test]
    fn only_rpcs_about_one_session_are_forwarded() {
        for path in [
            "/browserpool.v1.Sessions/Act",
            "/browserpool.v1.Sessions/Drive",
            "/browserpool.v1.Sessions/Events",
            "/browserpool.v1.Sessions/Get",
            "/browserpool.v1.Admin/KillSession",
        ] {
            assert_eq!(session_field(path), Some(1), "{path}");
        }
        for path in [
            "/browserpool.v1.Sessions/Acquire",
            "/browserpool.v1.Sessions/List",
            "/browserpool.v1.Admin/PoolStatus",
            "/browserpool.v1.Admin/QueryAudit",
            "/grpc.health.v1.Health/Check",
            "/browserpool.v1.Sessions/Act/extra",
        ] {
            assert_eq!(session_field(path), None, "{path}");
        }
    }

    /// The list is the descriptor set's: every rpc whose request has a `session_id` is
    /// forwarded or said to be answered here, and every listed one has it as field 1.
    #[test]
    fn the_session_rpcs_are_those_of_the_descriptor_set() {
        let set = prost_types::FileDescriptorSet::decode(browserpool_proto::FILE_DESCRIPTOR_SET).unwrap();
        let messages: HashMap<String, &prost_types::DescriptorProto> = set
            .file
            .iter()
            .flat_map(|f| f.message_type.iter().map(move |m| (format!(".{}.{}", f.package(), m.name()), m)))
            .collect();
        let mut naming = Vec::new();
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let input = messages[method.input_type()];
                    if let Some(field) = input.field.iter().find(|f| f.name() == "session_id") {
                        let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                        naming.push((path, field.number()));
                    }
                }
            }
        }
        for (path, number) in &naming {
            let here = ANSWERED_HERE.iter().any(|(p, _)| p == path);
            assert!(
                SESSION_RPCS.contains(&path.as_str()) || here,
                "{path} names a session: add it to session_rpcs! (forwarded) or ANSWERED_HERE (with why)"
            );
            if !here {
                assert_eq!(*number, 1, "{path}: session_id must be field 1 to be forwarded");
            }
        }
        for path in SESSION_RPCS.iter().chain(ANSWERED_HERE.iter().map(|(p, _)| p)) {
            assert!(naming.iter().any(|(p, _)| p == path), "{path} is listed but its request names no session");
        }
    }

    #[tokio::test]
    async fn the_first_message_is_read_and_the_body_replayed_whole() {
        let msg = browserpool_proto::v1::ActRequest { session_id: "s-9".into(), action: None }.encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        framed.extend_from_slice(&msg);
        let second = framed.clone();
        // Split mid-header and mid-message, then a second message.
        let chunks: Vec<Result<Frame<Bytes>, tonic::Status>> = vec![
            Ok(Frame::data(Bytes::copy_from_slice(&framed[..3]))),
            Ok(Frame::data(Bytes::copy_from_slice(&framed[3..7]))),
            Ok(Frame::data(Bytes::copy_from_slice(&framed[7..]))),
            Ok(Frame::data(Bytes::from(second.clone()))),
        ];
        let body = Body::new(http_body_util::StreamBody::new(futures::stream::iter(chunks)));
        let (first, rest) = first_message(body).await;
        assert_eq!(first.as_deref(), Some(&msg[..]));
        let all = http_body_util::BodyExt::collect(rest).await.unwrap().to_bytes();
        assert_eq!(all.len(), framed.len() * 2, "nothing lost, nothing repeated");
        assert_eq!(&all[..framed.len()], &framed[..]);
        // Compressed or empty bodies give no message and are replayed as they were.
        let mut compressed = framed.clone();
        compressed[0] = 1;
        let (first, rest) = first_message(Body::new(http_body_util::Full::new(Bytes::from(compressed.clone())))).await;
        assert!(first.is_none());
        assert_eq!(http_body_util::BodyExt::collect(rest).await.unwrap().to_bytes(), Bytes::from(compressed));
        let (first, _) = first_message(Body::empty()).await;
        assert!(first.is_none());
    }
}
