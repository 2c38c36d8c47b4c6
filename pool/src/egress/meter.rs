//! Bytes a session's pages exchange with the network, counted where they leave this host:
//! on the egress proxy's upstream side of every connection (direct or through an upstream
//! proxy), so TLS records and HTTP heads count as the network carried them. A session may have
//! a budget: past it, new connections are refused and open ones cut.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Conn;

/// A session's byte counts and budget.
#[derive(Debug, Default)]
pub struct Meter {
    sent: AtomicU64,
    received: AtomicU64,
    /// 0: no budget.
    budget: AtomicU64,
}

impl Meter {
    /// Counts from zero under `budget` (0 for none): a lease starts here.
    pub fn reset(&self, budget: u64) {
        self.sent.store(0, Ordering::Relaxed);
        self.received.store(0, Ordering::Relaxed);
        self.budget.store(budget, Ordering::Relaxed);
    }

    /// Bytes sent and received so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.sent.load(Ordering::Relaxed), self.received.load(Ordering::Relaxed))
    }

    /// Why the session may not carry more, once its budget is spent.
    pub(crate) fn spent(&self) -> Option<String> {
        let budget = self.budget.load(Ordering::Relaxed);
        let (sent, received) = self.totals();
        (budget != 0 && sent + received >= budget).then(|| {
            format!(
                "this session has used its {budget} bytes of network traffic (the tenant's max_session_bytes): \
                 acquire a new session, or ask an admin to raise max_session_bytes"
            )
        })
    }
}

/// A connection whose reads and writes count on a [`Meter`], cut once its budget is spent.
pub struct Metered {
    inner: Conn,
    meter: Arc<Meter>,
}

impl Metered {
    pub fn new(inner: Conn, meter: Arc<Meter>) -> Metered {
        Metered { inner, meter }
    }

    fn over(&self) -> Option<io::Error> {
        self.meter.spent().map(|why| io::Error::new(io::ErrorKind::ConnectionAborted, why))
    }
}

impl AsyncRead for Metered {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.over() {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.meter.received.fetch_add(n as u64, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for Metered {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(e) = self.over() {
            return Poll::Ready(Err(e));
        }
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.meter.sent.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_are_counted_both_ways_and_a_spent_budget_cuts_the_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = [0u8; 5];
            s.read_exact(&mut got).await.unwrap();
            s.write_all(&[7u8; 1000]).await.unwrap();
            s
        });
        let meter = Arc::new(Meter::default());
        meter.reset(1200);
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut conn = Metered::new(Box::new(tcp), meter.clone());
        conn.write_all(b"hello").await.unwrap();
        let mut answer = [0u8; 1000];
        conn.read_exact(&mut answer).await.unwrap();
        assert_eq!(meter.totals(), (5, 1000));
        assert_eq!(meter.spent(), None);
        let _keep = server.await.unwrap();
        conn.write_all(&[1u8; 300]).await.unwrap();
        let why = meter.spent().expect("1305 bytes of a 1200-byte budget");
        assert!(why.contains("max_session_bytes"), "{why}");
        let cut = conn.write_all(b"more").await.unwrap_err();
        assert_eq!(cut.kind(), io::ErrorKind::ConnectionAborted);
        meter.reset(0);
        assert_eq!((meter.totals(), meter.spent()), ((0, 0), None));
    }
}
