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
//!
//! A server that is not root may not create a network namespace, nor join one, itself. Where
//! the kernel lets unprivileged users create user namespaces, a [`Broker`] does it instead: a
//! process forked from the server makes a user namespace (mapping the server's own uid and
//! gid, nothing else) with a network namespace in it, and creates the sockets that must live
//! inside on request, handing them back over a unix socket. Chromium joins both namespaces
//! before it execs, as a child of the namespace's owner may.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
#[cfg(test)]
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::egress::{accept_loop, read_head, Egress};
use crate::sync::lock;
use crate::task::OwnedTask;

/// A network namespace with only `lo`, up. It lives while this handle (or a process in it) does.
#[derive(Debug)]
pub(crate) struct NetNs {
    fd: OwnedFd,
    /// Where the namespace is an unprivileged one: the process that owns it and makes its
    /// sockets.
    broker: Option<Broker>,
}

/// Whether this server may create network namespaces of its own (root with `CAP_SYS_ADMIN`):
/// one is made and dropped. A root server that may not cannot put a worker in one as a uid of
/// its own: inside the unprivileged user namespace a server that is not root uses instead,
/// only the server's uid is mapped, and no other can be taken.
pub fn may_create() -> io::Result<()> {
    NetNs::create().map(drop)
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
        Ok(NetNs { fd, broker: None })
    }

    /// A new namespace inside a user namespace of its own, for a server that is not root (see
    /// [`Broker`]); why not where the kernel refuses unprivileged user namespaces.
    pub(crate) fn create_unprivileged() -> io::Result<NetNs> {
        let broker = Broker::start()?;
        let fd = OwnedFd::from(std::fs::File::open(format!("/proc/{}/ns/net", broker.pid))?);
        Ok(NetNs { fd, broker: Some(broker) })
    }

    /// The namespace's descriptor, for `setns` in a child before it execs.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The user namespace a child must join first (its descriptor), when the namespace is an
    /// unprivileged one.
    pub(crate) fn user_fd(&self) -> Option<RawFd> {
        self.broker.as_ref().map(|b| b.user.as_raw_fd())
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

    /// A listener on 127.0.0.1:0 inside the namespace. Blocking.
    pub(crate) fn bind_loopback(&self) -> io::Result<std::net::TcpListener> {
        match &self.broker {
            Some(broker) => Ok(std::net::TcpListener::from(broker.socket(Request::Listen)?)),
            None => self.run(|| std::net::TcpListener::bind(("127.0.0.1", 0))),
        }
    }

    /// A connection to 127.0.0.1:`port` inside the namespace. Blocking.
    fn connect_blocking(&self, port: u16) -> io::Result<std::net::TcpStream> {
        match &self.broker {
            Some(broker) => Ok(std::net::TcpStream::from(broker.socket(Request::Connect(port))?)),
            None => self.run(move || std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), CONNECT)),
        }
    }

    /// A connection to 127.0.0.1:`port` inside the namespace.
    async fn connect(self: &Arc<Self>, port: u16) -> io::Result<TcpStream> {
        let ns = self.clone();
        let stream =
            tokio::task::spawn_blocking(move || ns.connect_blocking(port)).await.map_err(io::Error::other)??;
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

/// What a [`Broker`] makes inside its namespace.
#[derive(Clone, Copy)]
enum Request {
    /// A listener on 127.0.0.1:0.
    Listen,
    /// A connection to 127.0.0.1:port (at most [`CONNECT`] to connect).
    Connect(u16),
}

/// The owner of an unprivileged network namespace: a process forked from the server that
/// made a user namespace (the server's uid and gid mapped to themselves, `setgroups` denied)
/// and a network namespace in it, brought `lo` up, and then makes sockets inside on request.
/// It runs only system calls (no allocation: the server it was forked from has other
/// threads), holds no descriptor of the server's but its own end of the socket, ends when the
/// server's end closes (the server died: not `PR_SET_PDEATHSIG`, which would fire when the
/// short-lived thread that forked it ends) and is killed with the namespace.
#[derive(Debug)]
struct Broker {
    pid: libc::pid_t,
    /// The server's end of the `SOCK_SEQPACKET` pair; one request at a time.
    sock: std::sync::Mutex<OwnedFd>,
    /// The user namespace, which a child joins before the network namespace.
    user: OwnedFd,
}

impl Broker {
    fn start() -> io::Result<Broker> {
        let mut pair = [0 as RawFd; 2];
        // SAFETY: socketpair writes two descriptors into `pair`, which we then own.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, pair.as_mut_ptr()) }
            != 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just created and are ours.
        let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        // Everything the child needs is made before the fork: it may not allocate.
        // SAFETY: getuid and getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let uid_map = format!("{uid} {uid} 1\n");
        let gid_map = format!("{gid} {gid} 1\n");
        // SAFETY: the child runs `broker_main`, which makes only system calls and never
        // returns; the parent goes on as usual.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the child of fork; see above.
            unsafe { broker_main(theirs.as_raw_fd(), uid_map.as_bytes(), gid_map.as_bytes()) }
        }
        drop(theirs);
        // The child's first word says whether it made its namespaces.
        let ready = set_timeout(ours.as_raw_fd(), libc::SO_RCVTIMEO, CONNECT * 2)
            .and_then(|()| recv_reply(ours.as_raw_fd()))
            .and_then(|_| std::fs::File::open(format!("/proc/{pid}/ns/user")));
        match ready {
            Ok(user) => Ok(Broker { pid, sock: std::sync::Mutex::new(ours), user: user.into() }),
            Err(e) => {
                // SAFETY: our own child, killed and reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
                Err(e)
            }
        }
    }

    /// A socket made inside the namespace.
    fn socket(&self, request: Request) -> io::Result<OwnedFd> {
        let (op, port) = match request {
            Request::Listen => (b'L', 0u16),
            Request::Connect(port) => (b'C', port),
        };
        let sock = lock(&self.sock);
        let msg = [op, (port >> 8) as u8, port as u8];
        // SAFETY: sends 3 bytes from `msg` on our descriptor.
        if unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), libc::MSG_NOSIGNAL) } != 3 {
            return Err(io::Error::last_os_error());
        }
        recv_reply(sock.as_raw_fd())?.ok_or_else(|| io::Error::other("the namespace broker sent no socket"))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // SAFETY: our own child; waitpid reaps it so no zombie is left.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

fn set_timeout(fd: RawFd, option: libc::c_int, d: Duration) -> io::Result<()> {
    let tv = libc::timeval { tv_sec: d.as_secs() as libc::time_t, tv_usec: d.subsec_micros() as libc::suseconds_t };
    // SAFETY: setsockopt reads `tv`, which outlives the call.
    let r = unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, option, (&tv as *const libc::timeval).cast(), size_of_val(&tv) as _)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Room for one descriptor in a control message, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 32]);

/// A reply: a 4-byte errno (0: success), with a descriptor attached on success.
fn recv_reply(fd: RawFd) -> io::Result<Option<OwnedFd>> {
    let mut errno = [0u8; 4];
    let mut iov = libc::iovec { iov_base: errno.as_mut_ptr().cast(), iov_len: 4 };
    let mut control = Control([0; 32]);
    // SAFETY: msghdr is plain old data; all-zero is valid, and the pointers set below
    // outlive recvmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: see above; MSG_CMSG_CLOEXEC makes a received descriptor close-on-exec.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n != 4 {
        return Err(io::Error::other("the namespace broker is gone"));
    }
    // SAFETY: the CMSG macros walk the control buffer recvmsg filled, within its length.
    let received = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (!cmsg.is_null() && (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS)
            .then(|| OwnedFd::from_raw_fd(std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>())))
    };
    match i32::from_ne_bytes(errno) {
        0 => Ok(received),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// The broker's whole life, in the child of `fork`: only system calls, no allocation, never
/// returns. `sock` is its end of the pair; `uid_map` and `gid_map` are the lines to write.
unsafe fn broker_main(sock: RawFd, uid_map: &[u8], gid_map: &[u8]) -> ! {
    unsafe fn errno() -> i32 {
        *libc::__errno_location()
    }
    unsafe fn write_file(path: &[u8], data: &[u8]) -> i32 {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return errno();
        }
        let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
        let e = if ok { 0 } else { errno() };
        libc::close(fd);
        e
    }
    unsafe fn reply(sock: RawFd, e: i32, fd: RawFd) {
        let bytes = e.to_ne_bytes();
        let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut _, iov_len: 4 };
        let mut control = Control([0; 32]);
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if fd >= 0 {
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        }
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
    }
    // Nothing of the server's is kept open (its sockets and locks must close when the server
    // closes them), only `sock`, moved to descriptor 3: its end of file is the server's end.
    if sock != 3 && libc::dup2(sock, 3) != 3 {
        libc::_exit(1);
    }
    let sock = 3;
    if libc::close_range(4, u32::MAX, 0) != 0 {
        for fd in 4..65536 {
            libc::close(fd);
        }
    }
    let mut e = 0;
    if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
        e = errno();
    }
    if e == 0 {
        e = write_file(b"/proc/self/setgroups\0", b"deny");
    }
    if e == 0 {
        e = write_file(b"/proc/self/uid_map\0", uid_map);
    }
    if e == 0 {
        e = write_file(b"/proc/self/gid_map\0", gid_map);
    }
    if e == 0 {
        e = match loopback_up() {
            Ok(()) => 0,
            Err(err) => err.raw_os_error().unwrap_or(libc::EIO),
        };
    }
    reply(sock, e, -1);
    if e != 0 {
        libc::_exit(1);
    }
    loop {
        let mut req = [0u8; 3];
        if libc::recv(sock, req.as_mut_ptr().cast(), 3, 0) != 3 {
            // The server closed its end (or is gone): so is the namespace, once Chromium is.
            libc::_exit(0);
        }
        let port = u16::from_be_bytes([req[1], req[2]]);
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            reply(sock, errno(), -1);
            continue;
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        addr.sin_port = port.to_be();
        let addr_ptr = (&addr as *const libc::sockaddr_in).cast::<libc::sockaddr>();
        let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let ok = match req[0] {
            b'L' => libc::bind(fd, addr_ptr, len) == 0 && libc::listen(fd, 1024) == 0,
            b'C' => {
                let tv = libc::timeval { tv_sec: CONNECT.as_secs() as libc::time_t, tv_usec: 0 };
                let tv_ptr = (&tv as *const libc::timeval).cast();
                let tv_len = size_of::<libc::timeval>() as libc::socklen_t;
                libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDTIMEO, tv_ptr, tv_len);
                libc::connect(fd, addr_ptr, len) == 0
            }
            _ => {
                *libc::__errno_location() = libc::EINVAL;
                false
            }
        };
        if ok {
            reply(sock, 0, fd);
        } else {
            reply(sock, errno(), -1);
        }
        libc::close(fd);
    }
}

/// The host-side door to a worker's DevTools: forwards only the browser's own websocket path
/// into the namespace. Dropping it ends every connection it carries.
#[derive(Debug)]
pub(crate) struct Gate {
    port: u16,
    /// The worker's namespace: a shared browser's contexts get egress listeners inside it.
    ns: Arc<NetNs>,
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
        let inside = ns.clone();
        let task = accept_loop(listener, span, move |stream| {
            let (ns, path) = (inside.clone(), path.clone());
            async move { forward(stream, &ns, cdp_port, &path).await }
        });
        Ok(Gate { port, ns, egress, _task: task })
    }

    /// The worker's network namespace.
    pub(crate) fn netns(&self) -> Arc<NetNs> {
        self.ns.clone()
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

async fn forward(mut client: TcpStream, ns: &Arc<NetNs>, cdp_port: u16, path: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// As the server that is not root uses it (here, whoever runs the tests): sockets made
    /// inside reach each other and nothing on the host reaches them; the broker keeps none of
    /// the server's descriptors and ends with the namespace.
    #[test]
    fn an_unprivileged_namespace_makes_its_sockets_inside() {
        // Made on a thread that ends at once, as the pool's blocking threads do.
        let ns = match std::thread::spawn(NetNs::create_unprivileged).join().unwrap() {
            Ok(ns) => ns,
            // A kernel without unprivileged user namespaces: the server falls back, and says so.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return eprintln!("not here: {e}"),
            Err(e) => panic!("{e}"),
        };
        let broker = ns.broker.as_ref().unwrap().pid;
        assert_ne!(
            std::fs::read_link(format!("/proc/{broker}/ns/net")).unwrap(),
            std::fs::read_link("/proc/self/ns/net").unwrap()
        );
        let fds = std::fs::read_dir(format!("/proc/{broker}/fd")).unwrap().count();
        assert!(fds <= 4, "the broker holds {fds} descriptors");
        std::thread::sleep(Duration::from_millis(200));
        let listener = ns.bind_loopback().unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut inside = ns.connect_blocking(port).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        inside.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        accepted.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        // The host's 127.0.0.1:port is another socket altogether (if anything listens there).
        listener.set_nonblocking(true).unwrap();
        let _ = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200));
        assert_eq!(listener.accept().unwrap_err().kind(), io::ErrorKind::WouldBlock, "the host reached inside");
        let refused = ns.connect_blocking(port.wrapping_add(1).max(1)).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused, "{refused}");
        drop(ns);
        assert!(!Path::new(&format!("/proc/{broker}")).exists(), "the broker outlived its namespace");
    }
}
