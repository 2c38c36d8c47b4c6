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
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::policy::{private_ip, NavPolicy};

/// Largest request head the proxy reads (request line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long resolving and connecting upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
#[derive(Debug, Default)]
pub struct Egress {
    /// Ports of this host no page may reach: the workers' DevTools range and the server's own
    /// listeners. Refused on every loopback, private and unspecified address.
    reserved: Vec<RangeInclusive<u16>>,
    /// Ports of the live workers' proxies (a page must not borrow another worker's policy).
    proxies: Mutex<HashSet<u16>>,
    /// Fixed answers that win over the system resolver (`--resolve NAME=IP`).
    hosts: HashMap<String, IpAddr>,
}

impl Egress {
    /// A guard refusing the reserved port ranges on local addresses, resolving `hosts` first.
    pub fn new(cfg: EgressConfig) -> Egress {
        let hosts =
            cfg.hosts.into_iter().map(|(name, ip)| (name.trim_end_matches('.').to_ascii_lowercase(), ip)).collect();
        Egress { reserved: cfg.reserved_ports, proxies: Mutex::new(HashSet::new()), hosts }
    }

    fn reserved_port(&self, port: u16) -> bool {
        self.reserved.iter().any(|r| r.contains(&port))
            || self.proxies.lock().unwrap_or_else(|e| e.into_inner()).contains(&port)
    }

    /// The addresses `host` stands for: itself when it is an address, else the fixed answer
    /// or the system resolver's.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(ip) = self.hosts.get(&name) {
            return Ok(vec![SocketAddr::new(*ip, port)]);
        }
        let found = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((name.as_str(), port)))
            .await
            .map_err(|_| format!("resolving {name} timed out"))?
            .map_err(|e| format!("{name} does not resolve: {e}"))?;
        Ok(found.collect())
    }

    /// The first of `addrs` a page under `policy` may connect to, or why none may.
    pub fn judge(&self, policy: &NavPolicy, host: &str, addrs: &[SocketAddr]) -> Result<SocketAddr, String> {
        let mut why = format!("{host} has no address");
        for addr in addrs {
            let ip = canonical(addr.ip());
            let local = private_ip(ip);
            if local && self.reserved_port(addr.port()) {
                why =
                    format!("port {} of this host belongs to browserpool (worker devtools or the server)", addr.port());
            } else if local && !policy.allow_private_networks {
                why = format!(
                    "{host} resolves to {ip}, a private, loopback or link-local address, and this tenant does not allow private networks"
                );
            } else {
                return Ok(SocketAddr::new(ip, addr.port()));
            }
        }
        Err(why)
    }

    /// Resolves and judges the destination of `url` (a name-level [`NavPolicy::check`] first).
    pub async fn check_url(&self, policy: &NavPolicy, url: &str) -> Result<(), String> {
        policy.check(url)?;
        let Ok(parsed) = url::Url::parse(url) else { return Ok(()) };
        let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else { return Ok(()) };
        let addrs = self.resolve(host, port).await?;
        self.judge(policy, host, &addrs).map(|_| ())
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// One worker's proxy: its listener and every connection it carries. Dropping it ends them all.
pub(crate) struct Proxy {
    port: u16,
    /// Whether the port is on the host's loopback (refused to pages while it lives); a proxy
    /// inside a worker's own network namespace is out of every page's reach anyway.
    on_host: bool,
    egress: Arc<Egress>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Serves connections on `listener` (127.0.0.1:0, in the worker's network namespace when
    /// it has one) under `policy`, read per connection so a lease's policy applies from the
    /// lease on.
    pub(crate) fn start(
        egress: Arc<Egress>,
        policy: Arc<RwLock<NavPolicy>>,
        listener: std::net::TcpListener,
        on_host: bool,
        worker: &str,
    ) -> std::io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let port = listener.local_addr()?.port();
        if on_host {
            egress.proxies.lock().unwrap_or_else(|e| e.into_inner()).insert(port);
        }
        let shared = egress.clone();
        let task = tokio::spawn(
            async move {
                let mut conns = JoinSet::new();
                loop {
                    tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) => {
                                let (egress, policy) = (shared.clone(), policy.clone());
                                conns.spawn(async move { serve_conn(stream, &egress, &policy).await }.in_current_span());
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "egress proxy accept failed");
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        },
                        Some(_) = conns.join_next(), if !conns.is_empty() => {}
                    }
                }
            }
            .instrument(tracing::debug_span!("egress_proxy", worker = %worker)),
        );
        Ok(Proxy { port, on_host, egress, task })
    }

    /// The `--proxy-server` value for Chromium.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every connection.
        self.task.abort();
        if self.on_host {
            self.egress.proxies.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.port);
        }
    }
}

/// A parsed request head: method, target, and the raw header lines to forward.
pub(crate) struct Head {
    pub(crate) method: String,
    pub(crate) target: String,
    headers: Vec<(String, Vec<u8>)>,
    /// The head as received.
    pub(crate) raw: Vec<u8>,
    /// Bytes after the head already read (the start of a body or tunnel data).
    pub(crate) rest: Vec<u8>,
}

/// Reads one HTTP/1 request head (at most [`MAX_HEAD`] bytes).
pub(crate) async fn read_head(stream: &mut TcpStream) -> Result<Head, String> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("client closed before sending a request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                return Ok(Head {
                    method: req.method.unwrap_or_default().to_string(),
                    target: req.path.unwrap_or_default().to_string(),
                    headers: req.headers.iter().map(|h| (h.name.to_string(), h.value.to_vec())).collect(),
                    raw: buf[..len].to_vec(),
                    rest: buf[len..].to_vec(),
                });
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err("request head too large".into()),
            Err(e) => return Err(format!("bad request head: {e}")),
        }
    }
}

/// The header of the proxy's own answers, naming the network error Chromium would have seen
/// without a proxy as a CDP `Network.ErrorReason` (`BlockedByClient`, `ConnectionRefused`...);
/// the request hook turns a document's answer back into that error.
pub(crate) const ERROR_HEADER: &str = "x-browserpool-egress";

async fn refuse(stream: &mut TcpStream, status: &str, reason: &str, why: &str) {
    let body = format!("browserpool egress: {why}\n");
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{ERROR_HEADER}: {reason}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(resp.as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn blocked(client: &mut TcpStream, host: &str, port: u16, why: &str) {
    // Host and port only: paths and queries may carry secrets.
    tracing::info!(%host, port, reason = %why, "connection blocked by policy");
    refuse(client, "403 Forbidden", "BlockedByClient", why).await
}

/// Serves one client connection: a CONNECT tunnel (https, ws, wss) or one plain-HTTP request
/// in absolute form, each only to an address the policy allows.
async fn serve_conn(mut client: TcpStream, egress: &Egress, policy: &RwLock<NavPolicy>) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(head)) => head,
        Ok(Err(why)) => return refuse(&mut client, "400 Bad Request", "Failed", &why).await,
        Err(_) => return,
    };
    let tunnel = head.method.eq_ignore_ascii_case("CONNECT");
    // The URL the name-level policy judges: CONNECT carries `host:port` only.
    let url = if tunnel { format!("https://{}/", head.target) } else { head.target.clone() };
    let parsed = match url::Url::parse(&url) {
        Ok(u) if tunnel || u.scheme() == "http" => u,
        _ => {
            return refuse(
                &mut client,
                "400 Bad Request",
                "Failed",
                "expected CONNECT host:port or an absolute http url",
            )
            .await
        }
    };
    let (Some(host), Some(port)) = (parsed.host_str().map(str::to_string), parsed.port_or_known_default()) else {
        return refuse(&mut client, "400 Bad Request", "Failed", "no host in the request target").await;
    };
    let policy = policy.read().unwrap_or_else(|e| e.into_inner()).clone();
    if let Err(why) = policy.check(&url) {
        return blocked(&mut client, &host, port, &why).await;
    }
    let addrs = match egress.resolve(&host, port).await {
        Ok(addrs) => addrs,
        Err(why) => return refuse(&mut client, "502 Bad Gateway", "NameNotResolved", &why).await,
    };
    let addr = match egress.judge(&policy, &host, &addrs) {
        Ok(addr) => addr,
        Err(why) => return blocked(&mut client, &host, port, &why).await,
    };
    let mut upstream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let reason = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "ConnectionRefused",
                std::io::ErrorKind::ConnectionReset => "ConnectionReset",
                _ => "ConnectionFailed",
            };
            return refuse(&mut client, "502 Bad Gateway", reason, &format!("connect {host}:{port}: {e}")).await;
        }
        Err(_) => {
            return refuse(&mut client, "504 Gateway Timeout", "TimedOut", &format!("connect {host}:{port} timed out"))
                .await
        }
    };
    // Relayed writes are small (request heads, websocket frames): never hold them back.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    if tunnel {
        if client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await.is_err() {
            return;
        }
    } else {
        let path = &parsed[url::Position::BeforePath..url::Position::AfterQuery];
        let mut out = format!("{} {} HTTP/1.1\r\n", head.method, if path.is_empty() { "/" } else { path }).into_bytes();
        for (name, value) in &head.headers {
            let lower = name.to_ascii_lowercase();
            if lower.starts_with("proxy-") || lower == "connection" || lower == "keep-alive" {
                continue;
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        if upstream.write_all(&out).await.is_err() {
            return;
        }
    }
    if !head.rest.is_empty() && upstream.write_all(&head.rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
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
        assert!(err.contains("evil.test resolves to 127.0.0.1"), "{err}");
        assert!(e.judge(&locked, "x", &[addr("[::ffff:10.1.2.3]:80")]).is_err());
        let mixed = [addr("127.0.0.1:80"), addr("93.184.216.34:80")];
        assert_eq!(e.judge(&locked, "x", &mixed).unwrap(), addr("93.184.216.34:80"));
    }

    #[test]
    fn proxy_ports_are_reserved_while_they_live() {
        let e = Egress::new(EgressConfig::default());
        e.proxies.lock().unwrap().insert(40001);
        let open = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        assert!(e.judge(&open, "x", &[addr("127.0.0.1:40001")]).is_err());
    }

    /// Sends `request` to a proxy under `policy` and returns everything it answers.
    async fn exchange(egress: Arc<Egress>, policy: NavPolicy, request: &[u8]) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Proxy::start(egress, Arc::new(RwLock::new(policy)), listener, true, "test").unwrap();
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
        let huge = format!("GET http://a/ HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD));
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
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = upstream.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = upstream.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi").await.unwrap();
            String::from_utf8_lossy(&buf[..n]).to_string()
        });
        let open = NavPolicy { allow_private_networks: true, allow_hosts: vec![] };
        let req = format!(
            "GET http://127.0.0.1:{up}/p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\nProxy-Connection: keep-alive\r\n\r\n"
        );
        let answer = exchange(Arc::new(Egress::default()), open, req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hi"), "{answer}");
        let seen = server.await.unwrap();
        assert!(seen.starts_with("GET /p?q=1 HTTP/1.1\r\n"), "{seen}");
        assert!(seen.contains("Connection: close\r\n") && !seen.to_ascii_lowercase().contains("proxy-"), "{seen}");
    }

    #[tokio::test]
    async fn fixed_answers_win_over_the_resolver() {
        let hosts = HashMap::from([("Evil.Test".to_string(), "127.0.0.1".parse().unwrap())]);
        let e = Egress::new(EgressConfig { reserved_ports: vec![], hosts });
        assert_eq!(e.resolve("evil.test.", 80).await.unwrap(), vec![addr("127.0.0.1:80")]);
        assert_eq!(e.resolve("[::1]", 81).await.unwrap(), vec![addr("[::1]:81")]);
        let err = e.check_url(&NavPolicy::default(), "http://evil.test/x").await.unwrap_err();
        assert!(err.contains("resolves to 127.0.0.1"), "{err}");
    }
}
