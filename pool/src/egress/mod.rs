//! The egress proxy: every connection a worker's pages open leaves through here.
//!
//! Each worker runs Chromium with `--proxy-server` pointing at its own listener on 127.0.0.1
//! and nothing bypassed (`<-loopback>`), so popups, workers, WebSockets, preconnects and
//! redirects of every target reach the network only through [`serve_conn`]. There the host is
//! resolved once, every address is judged by the session's [`NavPolicy`] and the [`Egress`]
//! guard, and the connection goes to exactly the address that passed: a name that resolves to
//! a private address is caught, and DNS rebinding cannot swap the address after the check.
//!
//! Invariants: no byte reaches an upstream before its address passed; a plain-HTTP connection
//! is bound to its first upstream (the request goes out with `Connection: close`), so a second
//! request on it can never reach another host unchecked; every task of a worker's proxy ends
//! when the worker's [`Proxy`] is dropped.
//!
//! Whoever drives Chromium over CDP can undo this (`Target.createBrowserContext` takes its own
//! `proxyServer`); a CDP proxy for clients must refuse that parameter.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::policy::{private_ip, NavPolicy};
use crate::sync::lock;
use crate::task::OwnedTask;
use head::{read_any_head, request_body_len, rewrite, Head};

mod head;
mod meter;
mod upstream;

pub(crate) use head::read_head;
pub use meter::{Meter, Metered};
use upstream::Dialled;
pub use upstream::{Credentials, Upstream, UpstreamKind};

/// A connection upstream: a TCP stream, or TLS over one (an https upstream proxy).
pub trait AsyncStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> AsyncStream for T {}
pub type Conn = Box<dyn AsyncStream>;

/// How long a client may take to send its request head, and an upstream its response head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long resolving and connecting upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Name lookups one worker may have running at once: a lookup blocks a thread until the
/// resolver gives up, so a page asking for names nobody answers must not take them all.
const LOOKUPS_PER_WORKER: usize = 8;
/// Connections one worker's proxy carries at once (each costs the server two descriptors).
const CONNECTIONS_PER_WORKER: usize = 256;

/// What every worker's proxy refuses whatever the tenant's policy, and how it resolves names.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// Ports of this host no page may reach (the server's listeners; the pool adds its CDP
    /// range).
    pub reserved_ports: Vec<RangeInclusive<u16>>,
    /// Fixed answers that win over the system resolver (`--resolve NAME=IP`).
    pub hosts: HashMap<String, IpAddr>,
}

/// The guard built from an [`EgressConfig`]: one per pool, shared by its workers' proxies.
#[derive(Debug)]
pub struct Egress {
    /// Ports of this host no page may reach: the workers' DevTools range and the server's own
    /// listeners. Refused on every address of this host and every private one.
    reserved: Vec<RangeInclusive<u16>>,
    /// Ports the pool's own listeners hold on the host's loopback right now (workers' proxies
    /// and DevTools gates): no page may borrow another worker's proxy or knock on its gate.
    live: Mutex<HashSet<u16>>,
    /// Fixed answers that win over the system resolver (`--resolve NAME=IP`).
    hosts: HashMap<String, IpAddr>,
    /// Proves an [`ERROR_HEADER`] came from this proxy: a site cannot forge one.
    token: String,
}

impl Default for Egress {
    fn default() -> Self {
        Egress::new(EgressConfig::default())
    }
}

impl Egress {
    /// A guard refusing the reserved port ranges on local addresses, resolving `hosts` first.
    pub fn new(cfg: EgressConfig) -> Egress {
        let hosts =
            cfg.hosts.into_iter().map(|(name, ip)| (name.trim_end_matches('.').to_ascii_lowercase(), ip)).collect();
        Egress {
            reserved: cfg.reserved_ports,
            live: Mutex::new(HashSet::new()),
            hosts,
            token: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    fn reserved_port(&self, port: u16) -> bool {
        self.reserved.iter().any(|r| r.contains(&port)) || lock(&self.live).contains(&port)
    }

    /// Marks a port of the pool's own on the host's loopback as refused while it lives.
    pub(crate) fn hold(&self, port: u16) {
        lock(&self.live).insert(port);
    }

    pub(crate) fn unhold(&self, port: u16) {
        lock(&self.live).remove(&port);
    }

    /// The first of `addrs` a page under `policy` may connect to, or why none may. The reason
    /// names the host, never the address it resolved to (that would map internal names).
    pub fn judge(&self, policy: &NavPolicy, host: &str, addrs: &[SocketAddr]) -> Result<SocketAddr, String> {
        let mut why = format!("{host} has no address");
        for addr in addrs {
            let ip = canonical(addr.ip());
            // The host's own addresses count as local even when public: a connection to them
            // is delivered over loopback, past any firewall.
            let local = private_ip(ip) || is_host_address(ip);
            if local && self.reserved_port(addr.port()) {
                why =
                    format!("port {} of this host belongs to browserpool (worker devtools or the server)", addr.port());
            } else if local && !policy.allow_private_networks {
                why = format!(
                    "{host} is or resolves to a private, loopback or link-local address, or one of this host's, and {}",
                    crate::policy::NO_PRIVATE
                );
            } else {
                return Ok(SocketAddr::new(ip, addr.port()));
            }
        }
        Err(why)
    }
}

/// Whether `ip` is an address of this host (binding to it succeeds). With
/// `net.ipv4.ip_nonlocal_bind` every address binds, which fails closed.
fn is_host_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// One worker's side of the egress: the policy of the session it serves (set at lease,
/// read per connection) and its own share of lookups and connections, so one tenant's page
/// cannot starve another's.
#[derive(Debug)]
pub struct WorkerNet {
    pub(crate) egress: Arc<Egress>,
    pub(crate) policy: RwLock<NavPolicy>,
    /// The session's upstream proxy, if it has one (set at lease with the policy).
    pub(crate) upstream: RwLock<Option<Arc<Upstream>>>,
    /// Bytes to and from the network since the lease, and the session's budget.
    pub meter: Arc<Meter>,
    /// Why the last tunnels were refused, by `host:port` (a tunnel's refusal never reaches
    /// the page: Chromium only says the tunnel failed), for the navigation that asked.
    refused_tunnels: Mutex<HashMap<String, String>>,
    lookups: Arc<Semaphore>,
    connections: Arc<Semaphore>,
}

impl WorkerNet {
    /// A worker's egress under the warm policy (nothing private) until a lease sets its own.
    pub fn new(egress: Arc<Egress>) -> Arc<WorkerNet> {
        Arc::new(WorkerNet {
            egress,
            policy: RwLock::new(NavPolicy::default()),
            upstream: RwLock::new(None),
            meter: Arc::new(Meter::default()),
            refused_tunnels: Mutex::new(HashMap::new()),
            lookups: Arc::new(Semaphore::new(LOOKUPS_PER_WORKER)),
            connections: Arc::new(Semaphore::new(CONNECTIONS_PER_WORKER)),
        })
    }

    /// A copy of the current policy, for judging across awaits.
    pub(crate) fn policy(&self) -> NavPolicy {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sets how the session's connections leave once its policy passed them (straight, or
    /// through `upstream`) and its budget of bytes (0: none), counting from zero. Set at lease,
    /// with the policy.
    pub fn set_route(&self, upstream: Option<Upstream>, budget: u64) {
        *self.upstream.write().unwrap_or_else(|e| e.into_inner()) = upstream.map(Arc::new);
        self.meter.reset(budget);
    }

    /// Why the last tunnel to `url`'s host and port was refused, if it was (taken: asked once).
    pub(crate) fn tunnel_refusal(&self, url: &str) -> Option<String> {
        let parsed = url::Url::parse(url).ok()?;
        let key = format!("{}:{}", parsed.host_str()?, parsed.port_or_known_default()?);
        lock(&self.refused_tunnels).remove(&key)
    }

    fn note_tunnel_refusal(&self, target: &str, why: &str) {
        let mut refused = lock(&self.refused_tunnels);
        // A handful of recent ones is all a navigation needs.
        if refused.len() >= 64 {
            refused.clear();
        }
        refused.insert(target.to_ascii_lowercase(), why.to_string());
    }

    /// The upstream proxy connections go through now, if any.
    pub(crate) fn upstream(&self) -> Option<Arc<Upstream>> {
        self.upstream.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// [`NavPolicy::check`] under the current policy, without copying it (the request hook
    /// calls this for every request).
    pub fn check_as_written(&self, url: &str) -> Result<(), String> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).check(url)
    }

    /// The addresses `host` stands for: itself when it is an address, else the fixed answer
    /// or the system resolver's (at most [`LOOKUPS_PER_WORKER`] at once).
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(ip) = self.egress.hosts.get(&name) {
            return Ok(vec![SocketAddr::new(*ip, port)]);
        }
        let timed_out = || format!("resolving {name} timed out");
        let permit = tokio::time::timeout(CONNECT_TIMEOUT, self.lookups.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| "the worker is shutting down".to_string())?;
        // The permit goes with the lookup, so a lookup abandoned at the deadline still counts
        // until the resolver returns.
        let lookup = {
            let name = name.clone();
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                (name.as_str(), port).to_socket_addrs().map(Iterator::collect::<Vec<_>>)
            })
        };
        tokio::time::timeout(CONNECT_TIMEOUT, lookup)
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| format!("resolving {name}: {e}"))?
            .map_err(|e| format!("{name} does not resolve: {e}"))
    }

    /// Resolves and judges the destination of `url` under the current policy (a name-level
    /// [`NavPolicy::check`] first).
    pub(crate) async fn check_url(&self, url: &str) -> Result<(), String> {
        let policy = self.policy();
        policy.check(url)?;
        let Ok(parsed) = url::Url::parse(url) else { return Ok(()) };
        let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else { return Ok(()) };
        let addrs = self.resolve(host, port).await?;
        self.egress.judge(&policy, host, &addrs).map(|_| ())
    }

    /// The error reason an [`ERROR_HEADER`] value names and why, if this proxy wrote it.
    pub(crate) fn error_reason<'a>(&self, header: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = header.strip_prefix(self.egress.token.as_str())?.strip_prefix(' ')?;
        Some(rest.split_once(' ').unwrap_or((rest, "")))
    }
}

/// Accepts on `listener` until the returned task is dropped, serving each connection with
/// `serve` in a task of its own. Those tasks live in the loop's `JoinSet`, so ending the loop
/// ends every connection too.
pub(crate) fn accept_loop<F, Fut>(listener: TcpListener, span: tracing::Span, serve: F) -> OwnedTask
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    OwnedTask::spawn(
        async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            conns.spawn(serve(stream).in_current_span());
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        }
        .instrument(span),
    )
}

/// One worker's proxy: its listener and every connection it carries. Dropping it ends them all.
pub(crate) struct Proxy {
    port: u16,
    /// Whether the port is on the host's loopback (refused to pages while it lives); a proxy
    /// inside a worker's own network namespace is out of every page's reach anyway.
    on_host: bool,
    egress: Arc<Egress>,
    /// Dropping it ends the accept loop and, with its `JoinSet`, every connection.
    _task: OwnedTask,
}

impl Proxy {
    /// Serves connections on `listener` (127.0.0.1:0, in the worker's network namespace when
    /// it has one) under the worker's policy, read per connection so a lease's policy applies
    /// from the lease on.
    pub(crate) fn start(
        net: Arc<WorkerNet>,
        listener: std::net::TcpListener,
        on_host: bool,
        worker: &str,
    ) -> std::io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let port = listener.local_addr()?.port();
        if on_host {
            net.egress.hold(port);
        }
        let egress = net.egress.clone();
        let span = tracing::debug_span!("egress_proxy", worker = %worker);
        let task = accept_loop(listener, span, move |mut stream| {
            let net = net.clone();
            async move {
                match net.connections.clone().try_acquire_owned() {
                    Ok(_permit) => serve_conn(stream, &net).await,
                    Err(_) => {
                        let why = format!("more than {CONNECTIONS_PER_WORKER} connections at once");
                        let refusal = Refusal::new("503 Service Unavailable", "ConnectionRefused", why);
                        refusal.send(&mut stream, &net.egress.token).await
                    }
                }
            }
        });
        Ok(Proxy { port, on_host, egress, _task: task })
    }

    /// The `--proxy-server` value for Chromium.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if self.on_host {
            self.egress.unhold(self.port);
        }
    }
}

/// The header of the proxy's own answers: `<token> <reason> <why>`, the reason being the
/// network error Chromium would have seen without a proxy, as a CDP `Network.ErrorReason`
/// (`BlockedByClient`, `ConnectionRefused`...), and why in words (for the navigate error).
/// The request hook turns a document's answer back into that error; the token keeps a site
/// from forging one.
pub(crate) const ERROR_HEADER: &str = "x-browserpool-egress";

/// The proxy's own answer to a connection it will not carry.
pub(crate) struct Refusal {
    status: &'static str,
    reason: &'static str,
    why: String,
}

impl Refusal {
    fn new(status: &'static str, reason: &'static str, why: impl Into<String>) -> Refusal {
        Refusal { status, reason, why: why.into() }
    }

    fn bad_request(why: impl Into<String>) -> Refusal {
        Refusal::new("400 Bad Request", "Failed", why)
    }

    fn blocked(host: &str, port: u16, why: String) -> Refusal {
        // Host and port only: paths and queries may carry secrets.
        tracing::info!(%host, port, reason = %why, "connection blocked by policy");
        Refusal::new("403 Forbidden", "BlockedByClient", why)
    }

    async fn send(&self, stream: &mut (impl tokio::io::AsyncWrite + Unpin), token: &str) {
        let body = format!("browserpool egress: {}\n", self.why);
        // One line of printable ASCII: a header value cannot carry more.
        let why: String =
            self.why.chars().map(|c| if c.is_ascii() && !c.is_ascii_control() { c } else { '?' }).collect();
        let resp = format!(
            "HTTP/1.1 {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{ERROR_HEADER}: {token} {} {why}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            body.len(),
            self.reason,
        );
        let _ = stream.write_all(resp.as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

/// Serves one client connection: a CONNECT tunnel (https, ws, wss) or one plain-HTTP request
/// in absolute form, each only to an address the policy allows, straight or through the
/// session's upstream proxy.
async fn serve_conn(mut client: TcpStream, net: &WorkerNet) {
    let token = net.egress.token.as_str();
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(head)) => head,
        Ok(Err(why)) => return Refusal::bad_request(why).send(&mut client, token).await,
        Err(_) => return,
    };
    let tunnel = head.method.eq_ignore_ascii_case("CONNECT");
    // The URL the name-level policy judges: CONNECT carries `host:port` only.
    let url = if tunnel { format!("https://{}/", head.target) } else { head.target.clone() };
    let parsed = match url::Url::parse(&url) {
        Ok(u) if tunnel || u.scheme() == "http" => u,
        _ => {
            let why = "expected CONNECT host:port or an absolute http url";
            return Refusal::bad_request(why).send(&mut client, token).await;
        }
    };
    let (upstream, via) = match connect_upstream(net, &url, &parsed, tunnel).await {
        Ok(connected) => connected,
        Err(refusal) => {
            if tunnel {
                net.note_tunnel_refusal(&head.target, &refusal.why);
            }
            return refusal.send(&mut client, token).await;
        }
    };
    // Relayed writes are small (request heads, websocket frames): never hold them back (the
    // upstream side is set so where it is connected).
    let _ = client.set_nodelay(true);
    let mut upstream = Metered::new(upstream, net.meter.clone());
    if !tunnel {
        return relay_request(client, upstream, &head, &parsed, via.as_deref(), token).await;
    }
    if client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await.is_err() {
        return;
    }
    if !head.rest.is_empty() && upstream.write_all(&head.rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Connects to the host of `url` (`parsed`): judged by the policy at the one address it
/// resolved to, then straight there or through the session's upstream proxy. Also answers
/// the upstream a plain-http request must be forwarded to in absolute form, if any.
async fn connect_upstream(
    net: &WorkerNet,
    url: &str,
    parsed: &url::Url,
    tunnel: bool,
) -> Result<(Conn, Option<Arc<Upstream>>), Refusal> {
    let (Some(host), Some(port)) = (parsed.host_str().map(str::to_string), parsed.port_or_known_default()) else {
        return Err(Refusal::bad_request("no host in the request target"));
    };
    if let Some(why) = net.meter.spent() {
        return Err(Refusal::blocked(&host, port, why));
    }
    let policy = net.policy();
    policy.check(url).map_err(|why| Refusal::blocked(&host, port, why))?;
    let addrs =
        net.resolve(&host, port).await.map_err(|why| Refusal::new("502 Bad Gateway", "NameNotResolved", why))?;
    let addr = net.egress.judge(&policy, &host, &addrs).map_err(|why| Refusal::blocked(&host, port, why))?;
    if let Some(up) = net.upstream().filter(|up| !up.direct(&host)) {
        return match upstream::dial(net, &policy, &up, &host, port, tunnel).await? {
            Dialled::Tunnel(stream) => Ok((stream, None)),
            Dialled::Forward(stream) => Ok((stream, Some(up))),
        };
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok((Box::new(s), None))
        }
        Ok(Err(e)) => {
            let reason = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "ConnectionRefused",
                std::io::ErrorKind::ConnectionReset => "ConnectionReset",
                _ => "ConnectionFailed",
            };
            Err(Refusal::new("502 Bad Gateway", reason, format!("connect {host}:{port}: {e}")))
        }
        Err(_) => Err(Refusal::new("504 Gateway Timeout", "TimedOut", format!("connect {host}:{port} timed out"))),
    }
}

/// Relays the plain-HTTP request `head` (its target `parsed`) to `upstream` in origin form
/// (or in absolute form, with the proxy's credentials, to an HTTP proxy `via`), and the answer
/// back, both to close.
async fn relay_request(
    mut client: TcpStream,
    upstream: Metered,
    head: &Head,
    parsed: &url::Url,
    via: Option<&Upstream>,
    token: &str,
) {
    let start = match via {
        Some(up) => {
            let target = &parsed[..url::Position::AfterQuery];
            format!("{} {target} HTTP/1.1\r\n{}", head.method, up.authorization())
        }
        None => {
            let path = &parsed[url::Position::BeforePath..url::Position::AfterQuery];
            format!("{} {} HTTP/1.1\r\n", head.method, if path.is_empty() { "/" } else { path })
        }
    };
    let Some(body_len) = request_body_len(head) else {
        let why = "a request body without a valid Content-Length";
        return Refusal::new("411 Length Required", "Failed", why).send(&mut client, token).await;
    };
    let (mut from_up, mut to_up) = tokio::io::split(upstream);
    if to_up.write_all(&rewrite(&start, head, false)).await.is_err() {
        return;
    }
    // Exactly one request goes upstream: its head and its body, nothing after. Chromium
    // pools proxy connections across sites, so bytes after the body could be its next
    // request, for another site, which this upstream must never see.
    let (mut from_client, mut to_client) = client.into_split();
    let early = head.rest.len().min(body_len as usize);
    let request_body = async {
        if to_up.write_all(&head.rest[..early]).await.is_err() {
            return;
        }
        let mut body = (&mut from_client).take(body_len - early as u64);
        if tokio::io::copy(&mut body, &mut to_up).await.is_err() {
            return;
        }
        // Anything more the client sends is dropped; its end ends the exchange.
        let mut sink = [0u8; 4096];
        while matches!(from_client.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    // The answer says close, so Chromium never reuses the connection: the exchange ends
    // when the upstream has answered or the client has gone.
    tokio::select! {
        _ = relay_response(&mut from_up, &mut to_client, via, token) => {}
        _ = request_body => {}
    }
}

/// Relays upstream's answer: its heads rewritten to close (a site's 407 as a 502; an
/// upstream proxy's 407 as this proxy's refusal naming it), then its body as it comes.
async fn relay_response(
    from_up: &mut (impl tokio::io::AsyncRead + Unpin),
    to_client: &mut OwnedWriteHalf,
    via: Option<&Upstream>,
    token: &str,
) {
    loop {
        let resp = tokio::time::timeout(HEAD_TIMEOUT, read_any_head(from_up, false)).await;
        let Ok(Ok(resp)) = resp else { return };
        if let Some(refusal) = via.and_then(|up| up.refused_forward(resp.status)) {
            return refusal.send(to_client, token).await;
        }
        // A site's 407 would read as this proxy asking for credentials.
        let start = if resp.status == 407 {
            "HTTP/1.1 502 Bad Gateway\r\n".to_string()
        } else {
            let line = resp.raw.split(|b| *b == b'\n').next().unwrap_or_default();
            format!("{}\r\n", String::from_utf8_lossy(line).trim_end_matches('\r'))
        };
        if to_client.write_all(&rewrite(&start, &resp, true)).await.is_err()
            || to_client.write_all(&resp.rest).await.is_err()
        {
            return;
        }
        // Interim answers (100 Continue) come before the real one, head only. An upgrade
        // (101) is final and, rewritten to close, goes nowhere: Chromium tunnels
        // WebSockets with CONNECT, never through a plain-HTTP request.
        if !(100..200).contains(&resp.status) || resp.status == 101 {
            break;
        }
    }
    let _ = tokio::io::copy(from_up, to_client).await;
    let _ = to_client.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn a_request_whose_body_length_is_ambiguous_is_not_relayed() {
        async fn len(head: &str) -> Option<u64> {
            request_body_len(&read_head(&mut head.as_bytes()).await.unwrap())
        }
        assert_eq!(len("POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n").await, Some(5));
        assert_eq!(len("GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n").await, Some(0));
        let twice = "POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\n";
        assert_eq!(len(twice).await, None, "conflicting lengths");
        let same = "POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n";
        assert_eq!(len(same).await, None, "a length given twice");
        let both = "POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(len(both).await, None, "a length and chunked");
        assert_eq!(len("POST http://a/ HTTP/1.1\r\nContent-Length: x\r\n\r\n").await, None);
    }

    #[test]
    fn reserved_ports_are_refused_even_with_private_networks() {
        let e = Egress::new(EgressConfig { reserved_ports: vec![9300..=9399, 50051..=50052], hosts: HashMap::new() });
        let open = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        assert!(e.judge(&open, "x", &[addr("127.0.0.1:9301")]).unwrap_err().contains("belongs to browserpool"));
        assert!(e.judge(&open, "x", &[addr("[::ffff:127.0.0.1]:50051")]).is_err());
        assert!(e.judge(&open, "x", &[addr("0.0.0.0:9350")]).is_err());
        assert!(e.judge(&open, "x", &[addr("10.0.0.8:9300")]).is_err());
        assert_eq!(e.judge(&open, "x", &[addr("127.0.0.1:8080")]).unwrap(), addr("127.0.0.1:8080"));
        // A public address is another host: its ports are not ours.
        assert!(e.judge(&open, "x", &[addr("8.8.8.8:9300")]).is_ok());
    }

    #[test]
    fn private_addresses_need_the_tenant_flag_and_the_first_allowed_address_wins() {
        let e = Egress::new(EgressConfig::default());
        let locked = NavPolicy::default();
        let err = e.judge(&locked, "evil.test", &[addr("127.0.0.1:80")]).unwrap_err();
        assert!(err.contains("evil.test is or resolves to a private"), "{err}");
        assert!(!err.contains("127.0.0.1"), "the address a name resolves to is not told: {err}");
        assert!(e.judge(&locked, "x", &[addr("[::ffff:10.1.2.3]:80")]).is_err());
        let mixed = [addr("127.0.0.1:80"), addr("93.184.216.34:80")];
        assert_eq!(e.judge(&locked, "x", &mixed).unwrap(), addr("93.184.216.34:80"));
    }

    #[test]
    fn this_hosts_own_addresses_count_as_local() {
        assert!(is_host_address("127.0.0.1".parse().unwrap()));
        assert!(!is_host_address("8.8.8.8".parse().unwrap()));
        // Whatever address this host has on its way out is judged like loopback.
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if probe.connect("192.0.2.1:9").is_ok() {
            let own = probe.local_addr().unwrap().ip();
            let e = Egress::new(EgressConfig { reserved_ports: vec![50051..=50051], hosts: HashMap::new() });
            let open = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
            assert!(e.judge(&open, "x", &[SocketAddr::new(own, 50051)]).is_err(), "{own}");
            assert!(e.judge(&NavPolicy::default(), "x", &[SocketAddr::new(own, 80)]).is_err(), "{own}");
        }
    }

    #[test]
    fn proxy_ports_are_reserved_while_they_live() {
        let e = Egress::new(EgressConfig::default());
        e.hold(40001);
        let open = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        assert!(e.judge(&open, "x", &[addr("127.0.0.1:40001")]).is_err());
    }

    /// Sends `request` to a proxy under `policy` and returns everything it answers.
    async fn exchange(egress: Arc<Egress>, policy: NavPolicy, request: &[u8]) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let net = WorkerNet::new(egress);
        *net.policy.write().unwrap() = policy;
        let proxy = Proxy::start(net, listener, true, "test").unwrap();
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        conn.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).to_string()
    }

    #[tokio::test]
    async fn bad_requests_get_a_precise_answer_and_reach_nobody() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = upstream.local_addr().unwrap().port();
        let e = Arc::new(Egress::new(EgressConfig { reserved_ports: vec![up..=up], hosts: HashMap::new() }));
        let open = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        let garbage = exchange(e.clone(), open.clone(), b"\x00\x01 nonsense\r\n\r\n").await;
        assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
        let huge = format!("GET http://a/ HTTP/1.1\r\nX: {}\r\n", "a".repeat(head::MAX_HEAD));
        assert!(exchange(e.clone(), open.clone(), huge.as_bytes()).await.starts_with("HTTP/1.1 400"));
        let relative = exchange(e.clone(), open.clone(), b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(relative.starts_with("HTTP/1.1 400"), "{relative}");
        let ftp = exchange(e.clone(), open.clone(), b"GET ftp://127.0.0.1/ HTTP/1.1\r\n\r\n").await;
        assert!(ftp.starts_with("HTTP/1.1 400"), "{ftp}");
        let reserved = format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n");
        let refused = exchange(e.clone(), open.clone(), reserved.as_bytes()).await;
        assert!(refused.starts_with("HTTP/1.1 403") && refused.contains("belongs to browserpool"), "{refused}");
        let locked = format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", up + 1);
        let refused = exchange(e.clone(), NavPolicy::default(), locked.as_bytes()).await;
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
        // Nothing above reached the upstream.
        assert!(tokio::time::timeout(Duration::from_millis(200), upstream.accept()).await.is_err());
    }

    #[tokio::test]
    async fn an_allowed_request_goes_out_in_origin_form_and_closes() {
        let (up, server) = upstream_once(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi").await;
        let open = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        let req = format!(
            "GET http://127.0.0.1:{up}/p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\nProxy-Connection: keep-alive\r\n\r\n"
        );
        let answer = exchange(Arc::new(Egress::default()), open, req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("hi"), "{answer}");
        assert!(answer.contains("Connection: close\r\n"), "{answer}");
        let (seen, _) = server.await.unwrap();
        assert!(seen.starts_with("GET /p?q=1 HTTP/1.1\r\n"), "{seen}");
        assert!(seen.contains("Connection: close\r\n") && !seen.to_ascii_lowercase().contains("proxy-"), "{seen}");
    }

    /// An upstream on 127.0.0.1 that takes one connection, answers its first read with
    /// `reply`, and reports (what it read first, what arrived within a second after).
    async fn upstream_once(reply: &'static [u8]) -> (u16, tokio::task::JoinHandle<(String, String)>) {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = upstream.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            let first = String::from_utf8_lossy(&buf[..n]).to_string();
            s.write_all(reply).await.unwrap();
            let after = match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).to_string(),
                _ => String::new(),
            };
            (first, after)
        });
        (port, server)
    }

    /// A server that ignores `Connection: close` never gets a second request, which Chromium
    /// could otherwise send on the same proxy connection for another site.
    #[tokio::test]
    async fn a_kept_alive_upstream_never_sees_a_second_request() {
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhi";
        let (up, server) = upstream_once(reply).await;
        let net = WorkerNet::new(Arc::new(Egress::default()));
        *net.policy.write().unwrap() = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Proxy::start(net, listener, true, "test").unwrap();
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        conn.write_all(format!("GET http://127.0.0.1:{up}/a HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 4096];
        let n = conn.read(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]).to_string();
        assert!(answer.contains("Connection: close\r\n") && !answer.contains("keep-alive"), "{answer}");
        let _ = conn.write_all(b"GET http://other.test/steal HTTP/1.1\r\nHost: other.test\r\n\r\n").await;
        let (first, second) = server.await.unwrap();
        assert!(first.starts_with("GET /a HTTP/1.1\r\n"), "{first}");
        assert_eq!(second, "", "a second request reached the first upstream");
    }

    /// A plain-http request through an HTTP upstream goes in absolute form with the upstream's
    /// credentials; the upstream's 407 comes back as this proxy's refusal naming it.
    #[tokio::test]
    async fn a_request_through_an_http_upstream_carries_its_credentials_and_a_407_names_it() {
        let (up, server) =
            upstream_once(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n").await;
        let net = WorkerNet::new(Arc::new(Egress::default()));
        *net.policy.write().unwrap() = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        let creds = Some(Credentials { username: "ci".into(), password: "pw".into() });
        net.set_route(Some(Upstream::parse("eu-1", &format!("http://127.0.0.1:{up}"), creds, vec![]).unwrap()), 0);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Proxy::start(net.clone(), listener, true, "test").unwrap();
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        conn.write_all(b"GET http://127.0.0.1:9/p?q HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.read_to_string(&mut answer)).await;
        let (seen, _) = server.await.unwrap();
        assert!(seen.starts_with("GET http://127.0.0.1:9/p?q HTTP/1.1\r\n"), "{seen}");
        assert!(seen.contains("Proxy-Authorization: Basic Y2k6cHc=\r\n"), "{seen}");
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        let header = answer.lines().find(|l| l.starts_with(ERROR_HEADER)).unwrap();
        let (reason, why) = net.error_reason(header.split_once(": ").unwrap().1).unwrap();
        assert_eq!(reason, "AccessDenied");
        assert!(why.starts_with("407 proxy authentication failed for proxy \"eu-1\""), "{why}");
        assert!(!answer.contains("pw") && net.meter.totals().0 > 0, "{answer}");
    }

    #[tokio::test]
    async fn fixed_answers_win_over_the_resolver() {
        let hosts = HashMap::from([("Evil.Test".to_string(), "127.0.0.1".parse().unwrap())]);
        let net = WorkerNet::new(Arc::new(Egress::new(EgressConfig { reserved_ports: vec![], hosts })));
        assert_eq!(net.resolve("evil.test.", 80).await.unwrap(), vec![addr("127.0.0.1:80")]);
        assert_eq!(net.resolve("[::1]", 81).await.unwrap(), vec![addr("[::1]:81")]);
        let err = net.check_url("http://evil.test/x").await.unwrap_err();
        assert!(err.contains("evil.test is or resolves to a private"), "{err}");
    }
}
