//! Relaying to the replica that holds the session: a gRPC call sent whole, a `/cdp/` upgrade
//! relayed and its two connections spliced.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{Request as AxumRequest, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response as AxumResponse};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use hyper_util::rt::TokioIo;
use tonic::body::Body;
use tower::{Service, ServiceExt};

use super::layer::{status_trailers, UNREACHABLE_MARK};
use super::peers::{connect, Peers, Route};
use super::{error_chain, HOP_HEADER};
use crate::store::ReplicaRecord;

impl Peers {
    /// Relays a gRPC call to `owner`; a transport failure becomes UNAVAILABLE naming it.
    pub(super) async fn forward_grpc(
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

    /// Relays a request about session `id` to `owner`'s HTTP listener, its body streamed (an
    /// MCP request's; a GET's is empty): an answer that is not an upgrade goes back as it
    /// streams (an MCP answer's event stream too); a `/cdp/{id}` upgrade, once both sides
    /// upgraded, is spliced until either closes or this server stops.
    pub(super) async fn forward_http(&self, mut req: AxumRequest, owner: &ReplicaRecord, id: &str) -> AxumResponse {
        // Nothing checked the caller yet: the answer names no address; the log does.
        let unreachable = |e: &dyn std::fmt::Display| {
            tracing::warn!(session = %id, replica = %owner.id, addr = %owner.http_addr, error = %e, "could not relay a request to the replica holding its session");
            (
                http::StatusCode::SERVICE_UNAVAILABLE,
                [(UNREACHABLE_MARK, "1")],
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
        let (parts, body) = req.into_parts();
        let mut upstream = http::Request::builder()
            .method(parts.method)
            .uri(parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .body(body)
            .expect("method and path of a request we received");
        *upstream.headers_mut() = parts.headers;
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

/// The session a request of the HTTP listener is about: `/cdp/{session}`, or
/// `/sessions/{session}/...`.
fn http_session(path: &str) -> Option<&str> {
    let id = match path.strip_prefix(crate::cdp::CDP_PREFIX) {
        Some(id) => id,
        None => path.strip_prefix("/sessions/").or_else(|| path.strip_prefix("/live/"))?.split('/').next()?,
    };
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// Axum middleware on `/cdp/{session}` and `/sessions/{session}/...`: relays the request to
/// the replica holding the session, or lets this replica's handler answer.
pub async fn session_forward(State(peers): State<Peers>, req: AxumRequest, next: Next) -> AxumResponse {
    let Some(id) = http_session(req.uri().path()).map(str::to_string) else { return next.run(req).await };
    if req.headers().contains_key(HOP_HEADER) {
        return next.run(req).await;
    }
    // The ticket or token is checked by the owner alone (a ticket lives in its memory).
    // A file of an ended session is read where it is kept.
    let kept_files = req.uri().path().starts_with("/sessions/");
    match peers.route(&id, None, kept_files).await {
        // With an object store, this replica serves them when their keeper cannot be reached.
        Route::Keeper(owner) if peers.inner.sessions.stores_artifacts() => {
            let mut copy = http::Request::new(axum::body::Body::empty());
            *copy.method_mut() = req.method().clone();
            *copy.uri_mut() = req.uri().clone();
            *copy.headers_mut() = req.headers().clone();
            *copy.extensions_mut() = req.extensions().clone();
            let answer = peers.forward_http(req, &owner, &id).await;
            match answer.headers().contains_key(UNREACHABLE_MARK) {
                true => next.run(copy).await,
                false => answer,
            }
        }
        Route::Owner(owner) | Route::Keeper(owner) => peers.forward_http(req, &owner, &id).await,
        // Nothing checked the caller yet: the answer names no database error; the log does.
        Route::Unavailable(_) => (
            http::StatusCode::SERVICE_UNAVAILABLE,
            format!("which replica holds session {id} cannot be found now; retry, or see the server log\n"),
        )
            .into_response(),
        Route::Here => next.run(req).await,
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

/// The header naming an MCP session (the Streamable HTTP transport's).
pub const MCP_SESSION_HEADER: &str = "mcp-session-id";

/// The replica an MCP session id names: ids are `<replica>.<uuid>` (see `mcp`).
pub fn mcp_replica(mcp_session: &str) -> Option<&str> {
    let (replica, rest) = mcp_session.split_once('.')?;
    (replica.starts_with("r-") && !rest.is_empty()).then_some(replica)
}

/// Axum middleware on `/mcp`: a request of an MCP session another replica keeps (in its
/// memory, with the browser it leased) is relayed there; one of a replica that is gone is 404,
/// which tells an MCP client to start a new session.
pub async fn mcp_forward(State(peers): State<Peers>, req: AxumRequest, next: Next) -> AxumResponse {
    let named = req.headers().get(MCP_SESSION_HEADER).and_then(|v| v.to_str().ok());
    let Some((id, replica)) = named.and_then(|id| Some((id.to_string(), mcp_replica(id)?.to_string()))) else {
        return next.run(req).await;
    };
    if replica == peers.inner.sessions.replica_id() || req.headers().contains_key(HOP_HEADER) {
        return next.run(req).await;
    }
    match peers.replica(&replica).await {
        Ok(Some(owner)) => peers.forward_http(req, &owner, &format!("(MCP) {id}")).await,
        Ok(None) => (
            http::StatusCode::NOT_FOUND,
            format!("MCP session {id} ended with replica {replica}, which is gone: start a new MCP session\n"),
        )
            .into_response(),
        Err(why) => {
            tracing::warn!(replica = %replica, error = %why, "cannot look up the replica keeping an MCP session");
            (
                http::StatusCode::SERVICE_UNAVAILABLE,
                format!("which replica keeps MCP session {id} cannot be found now; retry, or see the server log\n"),
            )
                .into_response()
        }
    }
}
