//! A worker's own network namespace, and the gate that is the only way into its DevTools.
//!
//! Where the server may create network namespaces (root, or `CAP_SYS_ADMIN`), each Chromium
//! runs in a namespace of its own that has nothing but a loopback interface. Its DevTools port
//! and its egress proxy's listener live on that loopback, so no other process on the host (and
//! no page of another worker) can connect to the DevTools port at all, and the proxy is the
//! only way out of the namespace for anything Chromium sends. The server reaches DevTools
//! through a [`Gate`] on the host's loopback, which forwards only a websocket upgrade to the
//! browser's own path (`/devtools/browser/<guid>`, printed on Chromium's stderr, known to no
//! one else); `/json/*`, page paths and anything else get 404.
//!
//! Sockets belong to the namespace of the thread that creates them, so everything that must
//! live inside is created on a short-lived thread that first joins the namespace.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::egress::{accept_loop, read_head, Egress};
use crate::task::OwnedTask;

/// A network namespace with only `lo`, up. It lives while this handle (or a process in it) does.
#[derive(Debug)]
pub(crate) struct NetNs {
    fd: OwnedFd,
}

impl NetNs {
    /// A new namespace, or why the server may not create one (`EPERM` without privilege).
    pub(crate) fn create() -> io::Result<NetNs> {
        let fd = on_thread(|| {
            // SAFETY: unshare(CLONE_NEWNET) moves only this thread, which ends right after.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            loopback_up()?;
            Ok(OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/net")?))
        })?;
        Ok(NetNs { fd })
    }

    /// The namespace's descriptor, for `setns` in a child before it execs.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Runs `f` on a new thread inside the namespace.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
        let fd = self.fd.try_clone()?;
        on_thread(move || {
            // SAFETY: setns on a descriptor we own; it moves only this thread, which ends after `f`.
            if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
    }

    /// A listener on 127.0.0.1:0 inside the namespace.
    pub(crate) fn bind_loopback(&self) -> io::Result<std::net::TcpListener> {
        self.run(|| std::net::TcpListener::bind(("127.0.0.1", 0)))
    }

    /// A connection to 127.0.0.1:`port` inside the namespace.
    async fn connect(&self, port: u16) -> io::Result<TcpStream> {
        let fd = self.fd.try_clone()?;
        let stream = tokio::task::spawn_blocking(move || {
            NetNs { fd }.run(move || std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), CONNECT))
        })
        .await
        .map_err(io::Error::other)??;
        stream.set_nonblocking(true)?;
        TcpStream::from_std(stream)
    }
}

const CONNECT: Duration = Duration::from_secs(5);

fn on_thread<T: Send + 'static>(f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    std::thread::Builder::new()
        .name("netns".into())
        .spawn(f)?
        .join()
        .map_err(|_| io::Error::other("network namespace thread panicked"))?
}

/// Sets `lo` up in the calling thread's namespace (a new namespace starts with it down).
fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain datagram socket used only for the two ioctls below, closed by OwnedFd.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just opened and own.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write `req`, which outlives both calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The host-side door to a worker's DevTools: forwards only the browser's own websocket path
/// into the namespace. Dropping it ends every connection it carries.
#[derive(Debug)]
pub(crate) struct Gate {
    port: u16,
    /// Holds the gate's port refused to every page while it lives.
    egress: Arc<Egress>,
    /// Dropping it ends the accept loop and every connection it carries.
    _task: OwnedTask,
}

impl Gate {
    /// Serves 127.0.0.1:0 on the host; a request for exactly `path` is forwarded to
    /// 127.0.0.1:`cdp_port` in `ns`, anything else answered 404.
    pub(crate) async fn open(
        ns: NetNs,
        cdp_port: u16,
        path: String,
        egress: Arc<Egress>,
        worker: &str,
    ) -> io::Result<Gate> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        egress.hold(port);
        let ns = Arc::new(ns);
        let span = tracing::debug_span!("devtools_gate", worker = %worker);
        let task = accept_loop(listener, span, move |stream| {
            let (ns, path) = (ns.clone(), path.clone());
            async move { forward(stream, &ns, cdp_port, &path).await }
        });
        Ok(Gate { port, egress, _task: task })
    }

    /// The gate's port on the host's loopback.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.egress.unhold(self.port);
    }
}

async fn forward(mut client: TcpStream, ns: &NetNs, cdp_port: u16, path: &str) {
    let head = match tokio::time::timeout(CONNECT, read_head(&mut client)).await {
        Ok(Ok(head)) => head,
        _ => return,
    };
    if !head.method.eq_ignore_ascii_case("GET") || head.target != path {
        // The path is never echoed: it could be a guess at the real one.
        tracing::info!(method = %head.method, "devtools gate refused a request");
        let _ = client.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        return;
    }
    let mut upstream = match ns.connect(cdp_port).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "devtools gate could not reach chromium");
            return;
        }
    };
    // CDP messages are small and latency-bound: never hold them back.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    if upstream.write_all(&head.raw).await.is_err() || upstream.write_all(&head.rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
