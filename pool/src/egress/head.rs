//! HTTP/1 heads as the proxy reads and writes them: parsed within a bound, rewritten without
//! hop-by-hop headers, and the body length a request head gives.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::ERROR_HEADER;

/// Largest request or response head the proxy reads (start line and headers).
pub(super) const MAX_HEAD: usize = 64 * 1024;

/// A parsed HTTP/1 head: for a request its method and target, for a response its status.
pub(crate) struct Head {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(super) status: u16,
    headers: Vec<(String, Vec<u8>)>,
    /// The head as received.
    pub(crate) raw: Vec<u8>,
    /// Bytes after the head already read (the start of a body or tunnel data).
    pub(crate) rest: Vec<u8>,
}

/// Reads one HTTP/1 request head (at most [`MAX_HEAD`] bytes).
pub(crate) async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> Result<Head, String> {
    read_any_head(stream, true).await
}

pub(super) async fn read_any_head(stream: &mut (impl AsyncRead + Unpin), request: bool) -> Result<Head, String> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before sending a complete head".into());
        }
        // Parse only once the blank line that ends a head has arrived (a head sent a byte at
        // a time must not cost a parse per byte).
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if !buf[from..].windows(4).any(|w| w == b"\r\n\r\n") {
            if buf.len() >= MAX_HEAD {
                return Err("head too large".into());
            }
            continue;
        }
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let parsed = if request {
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => Ok(Some((
                    req.method.unwrap_or_default().to_string(),
                    req.path.unwrap_or_default().to_string(),
                    0,
                    len,
                ))),
                Ok(httparse::Status::Partial) => Ok(None),
                Err(e) => Err(e),
            }
        } else {
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    Ok(Some((String::new(), String::new(), resp.code.unwrap_or(0), len)))
                }
                Ok(httparse::Status::Partial) => Ok(None),
                Err(e) => Err(e),
            }
        };
        match parsed {
            Ok(Some((method, target, status, len))) => {
                let headers = headers
                    .iter()
                    .take_while(|h| !h.name.is_empty())
                    .map(|h| (h.name.to_string(), h.value.to_vec()))
                    .collect();
                return Ok(Head {
                    method,
                    target,
                    status,
                    headers,
                    raw: buf[..len].to_vec(),
                    rest: buf[len..].to_vec(),
                });
            }
            Ok(None) if buf.len() < MAX_HEAD => {}
            Ok(None) => return Err("head too large".into()),
            Err(e) => return Err(format!("bad head: {e}")),
        }
    }
}

/// Writes `head` without the hop-by-hop headers, with `Connection: close` (and, for a
/// response, `Proxy-Connection: close`) instead.
pub(super) fn rewrite(start: &str, head: &Head, response: bool) -> Vec<u8> {
    let mut out = start.as_bytes().to_vec();
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("proxy-") || lower == "connection" || lower == "keep-alive" || lower == ERROR_HEADER {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n");
    if response {
        out.extend_from_slice(b"Proxy-Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// How many body bytes follow a request head: its `Content-Length`, or none. `None` for a
/// body this proxy does not relay (chunked, which Chromium does not send over HTTP/1.1, a
/// malformed length, or `Content-Length` given twice: upstream might read the other one, and
/// take what follows the body as a request of its own).
pub(super) fn request_body_len(head: &Head) -> Option<u64> {
    let mut len = None;
    for (name, value) in &head.headers {
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return None;
        }
        if name.eq_ignore_ascii_case("content-length") {
            if len.is_some() {
                return None;
            }
            len = Some(std::str::from_utf8(value).ok()?.trim().parse().ok()?);
        }
    }
    Some(len.unwrap_or(0))
}
