//! `Peers`: which replica holds a session (the database, a bounded cache, the sweep of a
//! replica gone stale), and connections to the other replicas (TLS when on, under the
//! connect timeout).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::Service;

use super::{HOP_HEADER, OWNER_CACHE, PEER_KEEPALIVE};
use crate::app::App;
use crate::auth::Claims;
use crate::auth::TokenCheck;
use crate::sessions::Sessions;
use crate::store::{ReplicaRecord, SessionOwner, Store, StoreError};

/// Where a call naming a session goes.
pub(super) enum Route {
    /// This replica answers: it holds the session, or nobody live does.
    Here,
    /// Another live replica holds it.
    Owner(ReplicaRecord),
    /// The session ended, and another live replica keeps what it left; with an object store,
    /// this replica answers from it when that one cannot be reached.
    Keeper(ReplicaRecord),
    /// Which replica holds it cannot be known now (the database is away): UNAVAILABLE, so the
    /// caller retries.
    Unavailable(String),
}

/// What forwarding needs: this replica's sessions (and the shared store), the token check,
/// connections to the other replicas, and which replica holds which session.
#[derive(Clone)]
pub struct Peers {
    pub(super) inner: Arc<PeersInner>,
}

pub(super) struct PeersInner {
    pub(super) sessions: Sessions,
    pub(super) store: Store,
    pub(super) tokens: TokenCheck,
    pub(super) connect_timeout: Duration,
    /// Bound on looking up which replica holds a session.
    pub(super) forward_timeout: Duration,
    /// TLS to the other replicas' gRPC (`h2`) and HTTP (`http/1.1`) listeners.
    pub(super) tls: Option<(tokio_rustls::TlsConnector, tokio_rustls::TlsConnector)>,
    pub(super) channels: Mutex<HashMap<String, tonic::transport::Channel>>,
    pub(super) owners: Mutex<HashMap<String, SessionOwner>>,
    /// Spliced CDP connections end when this turns true.
    pub(super) shutdown: CancellationToken,
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
    pub(super) async fn route(&self, id: &str, caller: Option<&Claims>, kept_files: bool) -> Route {
        let sessions = &self.inner.sessions;
        if sessions.holds(id) {
            return Route::Here;
        }
        let cached = self.inner.owners.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned();
        let owner = match cached {
            Some(owner) => owner,
            None => match self.owner_of(id).await {
                Ok(Some(owner)) => owner,
                // Ended: a read of its files goes to the replica that keeps them.
                Ok(None) if kept_files => return self.keeper(id, caller).await,
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

    /// Where an ended session's kept files are read: the replica that held it, while it is
    /// registered and its heartbeat fresh, else here (the handler reads the object store, or
    /// says which replica that was).
    async fn keeper(&self, id: &str, caller: Option<&Claims>) -> Route {
        let lookup = tokio::time::timeout(self.inner.forward_timeout, self.inner.store.session_keeper(id)).await;
        let alive = |heartbeat_ms: i64| self.inner.sessions.stale_before().is_none_or(|before| heartbeat_ms >= before);
        match lookup {
            Ok(Ok(Some(keeper)))
                if keeper.replica.id != self.inner.sessions.replica_id()
                    && !keeper.replica.grpc_addr.is_empty()
                    && alive(keeper.replica.heartbeat_ms)
                    && caller.is_none_or(|c| crate::sessions::may_use_session(c, &keeper.tenant, &keeper.subject)) =>
            {
                Route::Keeper(keeper.replica)
            }
            _ => Route::Here,
        }
    }

    /// Replica `id`, when it is registered and beating (judged as [`Peers::route`] judges).
    pub(super) async fn replica(&self, id: &str) -> Result<Option<ReplicaRecord>, String> {
        let since = self.inner.sessions.stale_before().unwrap_or(0);
        let all = self.bounded(self.inner.store.replicas(since)).await?;
        Ok(all.into_iter().find(|r| r.id == id && !r.http_addr.is_empty()))
    }

    /// Which replica holds session `id`, from the database, within the forward timeout.
    pub(super) async fn owner_of(&self, id: &str) -> Result<Option<SessionOwner>, String> {
        self.bounded(self.inner.store.session_owner(id)).await
    }

    /// A database lookup within the forward timeout; why not, in words.
    async fn bounded<T>(&self, lookup: impl Future<Output = Result<T, StoreError>>) -> Result<T, String> {
        match tokio::time::timeout(self.inner.forward_timeout, lookup).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(e)) => Err(format!("the database: {e}")),
            Err(_) => Err(format!("the database did not answer within {:?}", self.inner.forward_timeout)),
        }
    }

    pub(super) fn remember(&self, id: &str, owner: SessionOwner) -> Route {
        let mut owners = self.inner.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.len() >= OWNER_CACHE {
            owners.clear();
        }
        let replica = owner.replica.clone();
        owners.insert(id.to_string(), owner);
        Route::Owner(replica)
    }

    pub(super) fn forget(&self, id: &str) {
        self.inner.owners.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// This replica's id, sent in [`HOP_HEADER`].
    pub(super) fn me(&self) -> http::HeaderValue {
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
}

/// A connection to a peer, TLS or not.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// TCP to `addr` under `timeout`, then TLS when configured.
pub(super) async fn connect(
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
