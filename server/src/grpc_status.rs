//! The gRPC status of a call as its response body streams, a leaf: what the audit record and
//! the trace span of a call read, and forwarding checks.

use std::pin::Pin;
use std::task::{Context, Poll};

/// The `grpc-status` of headers or trailers, when there is one.
pub fn of(headers: &http::HeaderMap) -> Option<i32> {
    headers.get("grpc-status").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

/// Whether a polled response frame ends the call, and with which status: `Some(Some(code))`
/// at the trailers (where gRPC puts it) or on a body error (`Internal`), `Some(None)` at the
/// end of a body without trailers (a trailers-only answer: the status was in the headers),
/// `None` while the call goes on.
pub fn end_of_call<D, E>(polled: &Poll<Option<Result<http_body::Frame<D>, E>>>) -> Option<Option<i32>> {
    match polled {
        Poll::Ready(Some(Ok(frame))) => frame.trailers_ref().map(of),
        Poll::Ready(Some(Err(_))) => Some(Some(tonic::Code::Internal as i32)),
        Poll::Ready(None) => Some(None),
        Poll::Pending => None,
    }
}

/// What a [`WatchedBody`] tells when its call ends.
pub trait CallEnd: Unpin {
    /// The call ended: with the status its trailers carried, or `None` at the end of a body
    /// without trailers (a trailers-only answer, whose status was in the headers).
    fn ended(&mut self, code: Option<i32>);
    /// The body was dropped before its end: the client went away.
    fn dropped(&mut self);
}

/// A response body that tells its [`CallEnd`] when the call ends, once.
pub struct WatchedBody<B, W: CallEnd> {
    inner: Pin<Box<B>>,
    watcher: W,
    done: bool,
}

impl<B, W: CallEnd> WatchedBody<B, W> {
    pub fn new(inner: B, watcher: W) -> Self {
        WatchedBody { inner: Box::pin(inner), watcher, done: false }
    }
}

impl<B: http_body::Body, W: CallEnd> http_body::Body for WatchedBody<B, W> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = this.inner.as_mut().poll_frame(cx);
        if let (false, Some(code)) = (this.done, end_of_call(&polled)) {
            this.done = true;
            this.watcher.ended(code);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B, W: CallEnd> Drop for WatchedBody<B, W> {
    fn drop(&mut self) {
        if !self.done {
            self.watcher.dropped();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A polled frame of a test body.
    type Polled = Poll<Option<Result<http_body::Frame<&'static [u8]>, ()>>>;

    #[test]
    fn a_call_ends_at_its_trailers_its_end_or_an_error() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "5".parse().unwrap());
        let done: Polled = Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))));
        assert_eq!(end_of_call(&done), Some(Some(5)));
        let data: Polled = Poll::Ready(Some(Ok(http_body::Frame::data(&b"x"[..]))));
        assert_eq!(end_of_call(&data), None);
        let failed: Polled = Poll::Ready(Some(Err(())));
        assert_eq!(end_of_call(&failed), Some(Some(tonic::Code::Internal as i32)));
        let ended: Polled = Poll::Ready(None);
        assert_eq!(end_of_call(&ended), Some(None));
        let pending: Polled = Poll::Pending;
        assert_eq!(end_of_call(&pending), None);
    }
}
