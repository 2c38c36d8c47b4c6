//! `ForwardLayer`: the tower layer that reads a gRPC call's first message for its session id
//! and lets the call through or relays it, replaying the body it read.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame};
use tonic::body::Body;
use tower::Service;

use super::peers::{Peers, Route};
use super::{session_field, string_field, HOP_HEADER, MAX_PEEK};
use crate::auth::Claims;

/// The rpcs that read (or delete) what an ended session left: forwarded to the replica that
/// keeps it (`Get` lists it on the session).
const KEPT_FILE_RPCS: &[&str] = &[
    "/browserpool.v1.Sessions/ListFiles",
    "/browserpool.v1.Sessions/GetFile",
    "/browserpool.v1.Sessions/Get",
    "/browserpool.v1.Sessions/DeleteArtifacts",
];

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
                        Some(claims) => {
                            peers.route(id, Some(&claims), KEPT_FILE_RPCS.contains(&parts.uri.path())).await
                        }
                        None => Route::Here,
                    }
                }
                _ => Route::Here,
            };
            // Get can be answered from the database when the owner cannot be reached, and an
            // ended session's artifacts from the object store, if one is set (the message is
            // the whole body, so it can be sent again here).
            let replay_get = parts.uri.path() == GET_PATH;
            let (owner, replay) = match route {
                Route::Owner(owner) => (owner, replay_get),
                Route::Keeper(owner) => (owner, replay_get || peers.inner.sessions.stores_artifacts()),
                Route::Unavailable(why) => {
                    return Ok(tonic::Status::from(crate::error::ServiceError::Unreachable(why)).into_http())
                }
                Route::Here => return Ok(inner.call(http::Request::from_parts(parts, body)).await?.map(Body::new)),
            };
            let Some(id) = id else {
                return Ok(inner.call(http::Request::from_parts(parts, body)).await?.map(Body::new));
            };
            let again = replay.then(|| (copy_head(&parts), first.clone()));
            let answer = peers.forward_grpc(http::Request::from_parts(parts, body), &owner, &id).await;
            match again {
                Some((head, Some(message))) if unreachable(&answer) => {
                    let req = http::Request::from_parts(head, Body::new(http_body_util::Full::new(frame(&message))));
                    Ok(inner.call(req).await?.map(Body::new))
                }
                _ => Ok(answer),
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

/// The status of a trailers-only answer (its headers), as trailers of a body.
pub(super) fn status_trailers(headers: &http::HeaderMap) -> http::HeaderMap {
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
pub(super) const UNREACHABLE_MARK: &str = "x-browserpool-unreachable";

impl Peers {
    /// The call's claims when its token passes this replica's own checks (and scope `admin`
    /// for an Admin rpc); `None` for calls this replica refuses itself.
    fn forwardable(&self, headers: &http::HeaderMap, path: &str) -> Option<Claims> {
        let header = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let claims = self.inner.tokens.verify_header(header).ok()?;
        crate::auth::may_call(path, &claims).then_some(claims)
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

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

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
