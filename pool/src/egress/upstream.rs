//! Upstream proxies: once a worker's egress proxy has judged a connection by the session's
//! policy, it may leave through the session's upstream proxy instead of going straight to the
//! site: a tunnel (`CONNECT`) or an absolute-form request through an HTTP proxy (over TLS for
//! an `https://` one, verified against the system's roots), or a SOCKS5 tunnel, with the
//! credentials the server adds (a page never sees them). The upstream's own
//! address is judged by the same policy, so a tenant cannot reach a private address by naming
//! it as its proxy.
//!
//! The destination's name goes to the upstream, which resolves it itself (its network, not
//! this host's, decides where the site is); the policy judged it by this host's resolution.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::head::read_any_head;
use super::{Conn, Refusal, WorkerNet, CONNECT_TIMEOUT, HEAD_TIMEOUT};
use crate::policy::{host_matches, NavPolicy};

/// How a session's connections reach an upstream proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKind {
    /// An HTTP proxy: `CONNECT` for tunnels, absolute-form for plain http.
    Http,
    /// The same, spoken over TLS to the proxy.
    Https,
    /// A SOCKS5 proxy (RFC 1928), names resolved by the proxy.
    Socks5,
}

/// A user name and password an upstream asks for. Its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({:?}, ..)", self.username)
    }
}

/// A session's upstream proxy, as the egress proxy uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The proxy's id, named in every error it causes.
    pub id: String,
    pub kind: UpstreamKind,
    pub host: String,
    pub port: u16,
    pub credentials: Option<Credentials>,
    /// Hosts (or `*.suffix`) reached directly, not through the upstream.
    pub direct_hosts: Vec<String>,
}

impl Upstream {
    /// The upstream `url` names (`http://host:port` or `socks5://host:port`).
    pub fn parse(
        id: &str,
        url: &str,
        credentials: Option<Credentials>,
        direct_hosts: Vec<String>,
    ) -> Result<Upstream, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("proxy {id:?}: url {url:?}: {e}"))?;
        let kind = match parsed.scheme() {
            "http" => UpstreamKind::Http,
            "https" => UpstreamKind::Https,
            "socks5" => UpstreamKind::Socks5,
            other => return Err(format!("proxy {id:?}: scheme {other:?} is not supported (http, https or socks5)")),
        };
        let host = parsed.host_str().filter(|h| !h.is_empty()).ok_or_else(|| format!("proxy {id:?}: no host"))?;
        let port = parsed.port_or_known_default().ok_or_else(|| format!("proxy {id:?}: no port"))?;
        Ok(Upstream { id: id.to_string(), kind, host: host.to_string(), port, credentials, direct_hosts })
    }

    /// Whether connections to `host` skip the upstream.
    pub(super) fn direct(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.direct_hosts.iter().any(|pattern| host_matches(pattern, &host))
    }

    /// How errors name it: `proxy "eu-1" (socks5://10.0.0.1:1080)`.
    fn label(&self) -> String {
        let scheme = match self.kind {
            UpstreamKind::Http => "http",
            UpstreamKind::Https => "https",
            UpstreamKind::Socks5 => "socks5",
        };
        format!("proxy {:?} ({scheme}://{}:{})", self.id, self.host, self.port)
    }

    /// The `Proxy-Authorization` header line an HTTP upstream gets, if it has credentials.
    pub(super) fn authorization(&self) -> String {
        match &self.credentials {
            Some(c) => {
                let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.username, c.password));
                format!("Proxy-Authorization: Basic {basic}\r\n")
            }
            None => String::new(),
        }
    }

    /// The refusal for an upstream that asked for (other) credentials.
    fn auth_failed(&self, how: &str) -> Refusal {
        let what =
            if self.credentials.is_some() { "its username and password" } else { "that it needs no credentials" };
        Refusal::new(
            "502 Bad Gateway",
            "AccessDenied",
            format!(
                "{how} proxy authentication failed for {}: check {what} (browserpool admin proxies put)",
                self.label()
            ),
        )
    }

    /// The refusal for an upstream HTTP proxy's 407 to a forwarded request.
    pub(super) fn refused_forward(&self, status: u16) -> Option<Refusal> {
        (status == 407).then(|| self.auth_failed("407"))
    }
}

/// What a connection through an upstream is, once dialled.
pub(super) enum Dialled {
    /// A tunnel to the destination: use it as a direct connection.
    Tunnel(Conn),
    /// A connection to an HTTP proxy that takes the plain-http request in absolute form.
    Forward(Conn),
}

/// How https upstreams are verified: the system's roots (`SSL_CERT_FILE`, `SSL_CERT_DIR`),
/// loaded once.
fn tls_roots() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(format!("no trusted root certificates on this host ({:?})", found.errors));
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// TLS to an https upstream, its certificate checked for its host.
async fn tls_to(up: &Upstream, stream: TcpStream) -> Result<Conn, String> {
    let name =
        rustls_pki_types::ServerName::try_from(up.host.trim_start_matches('[').trim_end_matches(']').to_string())
            .map_err(|e| format!("{:?} is not a TLS server name: {e}", up.host))?;
    let connector = tokio_rustls::TlsConnector::from(tls_roots()?);
    let tls = connector.connect(name, stream).await.map_err(|e| format!("TLS: {e}"))?;
    Ok(Box::new(tls))
}

/// Connects through `up` to `host:port` (a tunnel), or to `up` itself for a plain-http request
/// through an HTTP proxy (`tunnel` false). The upstream's address is judged by `policy` first.
pub(super) async fn dial(
    net: &WorkerNet,
    policy: &NavPolicy,
    up: &Arc<Upstream>,
    host: &str,
    port: u16,
    tunnel: bool,
) -> Result<Dialled, Refusal> {
    let unreachable = |why: String| {
        Refusal::new(
            "502 Bad Gateway",
            "ConnectionFailed",
            format!("ERR_PROXY_CONNECTION_FAILED: {}: {why}", up.label()),
        )
    };
    let addrs = net.resolve(&up.host, up.port).await.map_err(unreachable)?;
    let addr: SocketAddr = net.egress.judge(policy, &up.host, &addrs).map_err(|why| {
        Refusal::new(
            "403 Forbidden",
            "BlockedByClient",
            format!("{} may not be used by this session: {why}", up.label()),
        )
    })?;
    let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(unreachable(e.to_string())),
        Err(_) => return Err(unreachable(format!("no connection within {CONNECT_TIMEOUT:?}"))),
    };
    let _ = tcp.set_nodelay(true);
    let handshake = async {
        let mut stream: Conn = match up.kind {
            UpstreamKind::Https => tls_to(up, tcp).await.map_err(unreachable)?,
            UpstreamKind::Http | UpstreamKind::Socks5 => Box::new(tcp),
        };
        match (up.kind, tunnel) {
            (UpstreamKind::Http | UpstreamKind::Https, false) => Ok(Dialled::Forward(stream)),
            (UpstreamKind::Http | UpstreamKind::Https, true) => {
                http_connect(&mut stream, up, host, port).await?;
                Ok(Dialled::Tunnel(stream))
            }
            (UpstreamKind::Socks5, _) => {
                socks5_connect(&mut stream, up, host, port).await?;
                Ok(Dialled::Tunnel(stream))
            }
        }
    };
    match tokio::time::timeout(HEAD_TIMEOUT, handshake).await {
        Ok(done) => done,
        Err(_) => Err(Refusal::new(
            "504 Gateway Timeout",
            "TimedOut",
            format!("{} did not answer within {HEAD_TIMEOUT:?}", up.label()),
        )),
    }
}

/// Asks an HTTP proxy for a tunnel. Its answer is read a byte at a time up to the blank line,
/// so nothing of the tunnel's first bytes is taken.
async fn http_connect(stream: &mut Conn, up: &Upstream, host: &str, port: u16) -> Result<(), Refusal> {
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{}\r\n", up.authorization());
    let broken = |why: String| Refusal::new("502 Bad Gateway", "ConnectionFailed", format!("{}: {why}", up.label()));
    stream.write_all(request.as_bytes()).await.map_err(|e| broken(format!("write: {e}")))?;
    let head = read_any_head(&mut ByteReader(stream), false).await.map_err(broken)?;
    match head.status {
        200..=299 => Ok(()),
        // A tunnel's answer is the proxy's own, never a site's: a 401 is its too (tinyproxy
        // answers wrong credentials so).
        status @ (401 | 407) => Err(up.auth_failed(&status.to_string())),
        status => {
            let line =
                String::from_utf8_lossy(head.raw.split(|b| *b == b'\n').next().unwrap_or_default()).trim().to_string();
            Err(broken(format!("refused the tunnel to {target}: {line} ({status})")))
        }
    }
}

/// Reads one byte per read call, so a head reader never takes bytes past the head.
struct ByteReader<'a, S>(&'a mut S);

impl<S: AsyncRead + Unpin> AsyncRead for ByteReader<'_, S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let mut one = [0u8; 1];
        let mut small = tokio::io::ReadBuf::new(&mut one);
        match std::pin::Pin::new(&mut *self.0).poll_read(cx, &mut small) {
            std::task::Poll::Ready(Ok(())) => {
                buf.put_slice(small.filled());
                std::task::Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

/// The SOCKS5 handshake (RFC 1928; user name and password by RFC 1929) for a tunnel to
/// `host:port`, the name resolved by the proxy.
async fn socks5_connect(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    up: &Upstream,
    host: &str,
    port: u16,
) -> Result<(), Refusal> {
    let broken = |why: String| Refusal::new("502 Bad Gateway", "ConnectionFailed", format!("{}: {why}", up.label()));
    let io = |e: std::io::Error| broken(format!("SOCKS5 handshake: {e}"));
    let method = if up.credentials.is_some() { 0x02 } else { 0x00 };
    stream.write_all(&[0x05, 0x01, method]).await.map_err(io)?;
    let mut chosen = [0u8; 2];
    stream.read_exact(&mut chosen).await.map_err(io)?;
    match chosen {
        [0x05, m] if m == method => {}
        [0x05, 0xff] => return Err(up.auth_failed("SOCKS5")),
        other => return Err(broken(format!("not a SOCKS5 answer: {other:02x?}"))),
    }
    if let Some(c) = &up.credentials {
        let (user, pass) = (c.username.as_bytes(), c.password.as_bytes());
        if user.len() > 255 || pass.len() > 255 {
            return Err(broken("SOCKS5 credentials are longer than 255 bytes".into()));
        }
        let mut auth = vec![0x01, user.len() as u8];
        auth.extend_from_slice(user);
        auth.push(pass.len() as u8);
        auth.extend_from_slice(pass);
        stream.write_all(&auth).await.map_err(io)?;
        let mut status = [0u8; 2];
        stream.read_exact(&mut status).await.map_err(io)?;
        if status[1] != 0 {
            return Err(up.auth_failed("SOCKS5"));
        }
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let mut request = vec![0x05, 0x01, 0x00];
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => {
            request.push(0x01);
            request.extend_from_slice(&v4.octets());
        }
        Ok(std::net::IpAddr::V6(v6)) => {
            request.push(0x04);
            request.extend_from_slice(&v6.octets());
        }
        Err(_) if bare.len() <= 255 => {
            request.extend_from_slice(&[0x03, bare.len() as u8]);
            request.extend_from_slice(bare.as_bytes());
        }
        Err(_) => return Err(broken(format!("host name of {} bytes is too long for SOCKS5", bare.len()))),
    }
    request.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&request).await.map_err(io)?;
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply).await.map_err(io)?;
    if reply[1] != 0 {
        return Err(broken(format!("refused the tunnel to {bare}:{port}: {}", socks5_reply(reply[1]))));
    }
    // The bound address that follows, read and dropped.
    let skip = match reply[3] {
        0x01 => 4,
        0x04 => 16,
        0x03 => {
            let mut len = [0u8; 1];
            stream.read_exact(&mut len).await.map_err(io)?;
            len[0] as usize
        }
        other => return Err(broken(format!("SOCKS5 reply with address type {other}"))),
    };
    let mut rest = vec![0u8; skip + 2];
    stream.read_exact(&mut rest).await.map_err(io)?;
    Ok(())
}

/// RFC 1928's reply codes, as words.
fn socks5_reply(code: u8) -> &'static str {
    match code {
        0x01 => "general SOCKS server failure",
        0x02 => "connection not allowed by ruleset",
        0x03 => "network unreachable",
        0x04 => "host unreachable",
        0x05 => "connection refused",
        0x06 => "TTL expired",
        0x07 => "command not supported",
        0x08 => "address type not supported",
        _ => "unknown SOCKS5 error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_is_parsed_from_its_url_and_never_shows_its_password() {
        let creds = Some(Credentials { username: "ci".into(), password: "hunter2".into() });
        let up = Upstream::parse("eu-1", "socks5://127.0.0.1:1080", creds, vec!["*.internal.test".into()]).unwrap();
        assert_eq!((up.kind, up.host.as_str(), up.port), (UpstreamKind::Socks5, "127.0.0.1", 1080));
        assert!(up.direct("a.internal.test") && up.direct("A.Internal.Test.") && !up.direct("internal.test"));
        assert!(!format!("{up:?}").contains("hunter2"));
        assert_eq!(Upstream::parse("x", "http://p.test", None, vec![]).unwrap().port, 80);
        assert!(Upstream::parse("x", "ftp://p.test:21", None, vec![]).unwrap_err().contains("not supported"));
        assert_eq!(Upstream::parse("x", "https://p.test", None, vec![]).unwrap().kind, UpstreamKind::Https);
        let auth = up.authorization();
        assert!(auth.starts_with("Proxy-Authorization: Basic ") && !auth.contains("hunter2"), "{auth}");
    }
}
