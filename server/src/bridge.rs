//! `browserpool mcp`: MCP over stdio for clients that only spawn local processes, relayed to a
//! server's `/mcp` (Streamable HTTP) with the token from the usual places. Each line read is a
//! JSON-RPC message, POSTed in the MCP session the server named at `initialize`; each message
//! the server answers (JSON, or each event of an event stream) is written as one line.
//! Nothing but MCP goes to stdout; what goes wrong is said on stderr, and a request the server
//! refused is answered with a JSON-RPC error so the client does not wait. At the end of stdin
//! the MCP session is ended (DELETE), which releases its browser.

use std::sync::{Arc, Mutex};

use browserpool_client::cli::CliError;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::config::McpArgs;

/// Longest line (one JSON-RPC message) read from stdin.
const MAX_LINE: usize = 16 << 20;

/// What every relayed request carries.
struct Relay {
    http: reqwest::Client,
    url: String,
    headers: reqwest::header::HeaderMap,
    /// The MCP session and protocol revision, once `initialize` named them.
    session: Mutex<Option<(String, String)>>,
    stdout: tokio::sync::Mutex<tokio::io::Stdout>,
}

/// `browserpool mcp` with `args`: see the module's docs.
pub async fn run(args: McpArgs) -> Result<(), CliError> {
    args.run().await
}

impl McpArgs {
    /// The endpoint: `--url`, else `--server`'s host with the default HTTP port.
    fn endpoint(&self) -> Result<String, CliError> {
        if let Some(url) = &self.url {
            return match url.split_once("://") {
                Some(("http" | "https", rest)) if !rest.is_empty() => Ok(url.clone()),
                _ => Err(CliError::usage(format!("--url {url:?}: give http://HOST:PORT/mcp or https://HOST:PORT/mcp"))),
            };
        }
        let server = self.connect.server_url()?;
        let (scheme, rest) = server.split_once("://").unwrap_or(("http", &server));
        let host = match rest.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => rest,
        };
        Ok(format!("{scheme}://{host}:{}/mcp", crate::config::DEFAULT_HTTP_PORT))
    }

    fn client(&self, https: bool) -> Result<reqwest::Client, CliError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder().connect_timeout(self.connect.connect_timeout);
        let read = |path: &std::path::Path, what: &str| {
            std::fs::read(path).map_err(|e| CliError::usage(format!("{what} {}: {e}", path.display())))
        };
        if let Some(ca) = self.connect.ca_file.as_deref() {
            let certs = reqwest::Certificate::from_pem_bundle(&read(ca, "--ca-file")?)
                .map_err(|e| CliError::usage(format!("--ca-file {}: {e}", ca.display())))?;
            http = http.tls_certs_only(certs);
        } else if https {
            return Err(CliError::usage("an https:// endpoint needs --ca-file: the CA its certificate chains to"));
        }
        match (self.connect.cert_file.as_deref(), self.connect.key_file.as_deref()) {
            (Some(cert), Some(key)) => {
                let mut pem = read(cert, "--cert-file")?;
                pem.extend(read(key, "--key-file")?);
                let identity = reqwest::Identity::from_pem(&pem)
                    .map_err(|e| CliError::usage(format!("--cert-file/--key-file: {e}")))?;
                http = http.identity(identity);
            }
            (None, None) => {}
            _ => return Err(CliError::usage("--cert-file and --key-file go together")),
        }
        http.build().map_err(|e| CliError::usage(format!("HTTP client: {e}")))
    }

    /// Relays stdin to the endpoint until stdin ends, then ends the MCP session.
    async fn run(self) -> Result<(), CliError> {
        let url = self.endpoint()?;
        let http = self.client(url.starts_with("https://"))?;
        let (token, _) = self.connect.token()?;
        let mut headers = reqwest::header::HeaderMap::new();
        let bearer = format!("Bearer {}", token.trim());
        headers.insert(
            "authorization",
            bearer.parse().map_err(|_| CliError::usage("the token is not a valid header value"))?,
        );
        if let Some(session) = &self.session {
            let value = session.parse().map_err(|_| CliError::usage("--session: not a valid header value"))?;
            headers.insert(crate::mcp::BIND_HEADER, value);
        }
        let relay = Arc::new(Relay {
            http,
            url,
            headers,
            session: Mutex::new(None),
            stdout: tokio::sync::Mutex::new(tokio::io::stdout()),
        });
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        let mut calls = tokio::task::JoinSet::new();
        loop {
            let line = match lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    eprintln!("browserpool mcp: stdin: {e}");
                    break;
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            if line.len() > MAX_LINE {
                eprintln!("browserpool mcp: a line of {} bytes is over the {MAX_LINE} limit; skipped", line.len());
                continue;
            }
            let message: Value = match serde_json::from_str(&line) {
                Ok(m) => m,
                Err(e) => {
                    relay.write(&json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": format!("parse error: {e}")}})).await;
                    continue;
                }
            };
            // `initialize` first, alone: the session it opens carries every later message.
            if message.get("method").and_then(Value::as_str) == Some("initialize") {
                relay.post(message).await;
            } else {
                let relay = relay.clone();
                calls.spawn(async move { relay.post(message).await });
            }
        }
        while calls.join_next().await.is_some() {}
        relay.end().await;
        Ok(())
    }
}

impl Relay {
    /// Writes one message as one line.
    async fn write(&self, message: &Value) {
        let mut out = self.stdout.lock().await;
        let line = format!("{message}\n");
        if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
            eprintln!("browserpool mcp: stdout closed");
        }
    }

    /// Answers request `message` (when it is one) with a JSON-RPC error saying `why`.
    async fn fail(&self, message: &Value, why: String) {
        eprintln!("browserpool mcp: {why}");
        if let Some(id) = message.get("id").filter(|_| message.get("method").is_some()) {
            self.write(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": why}})).await;
        }
    }

    /// A request in the MCP session, at the revision `message` names in its `_meta` (as the
    /// transport requires the header to repeat it), else the session's.
    fn request(&self, method: reqwest::Method, message: Option<&Value>) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, &self.url).headers(self.headers.clone());
        let named = message.and_then(|m| m.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion"));
        let session = self.session.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some((id, _)) = &session {
            req = req.header(crate::mcp::SESSION_HEADER, id);
        }
        let version = named.and_then(Value::as_str).map(str::to_string).or(session.map(|(_, v)| v));
        match version {
            Some(version) => req.header("mcp-protocol-version", version),
            None => req,
        }
    }

    /// POSTs one message and writes what comes back.
    async fn post(&self, message: Value) {
        let sent = self
            .request(reqwest::Method::POST, Some(&message))
            .header("content-type", "application/json")
            // Later revisions route on the method from a header of its own.
            .header("mcp-method", message.get("method").and_then(Value::as_str).unwrap_or_default())
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string())
            .send()
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(e) => return self.fail(&message, format!("{} cannot be reached: {e}", self.url)).await,
        };
        let status = answer.status();
        if !status.is_success() {
            let body = answer.text().await.unwrap_or_default();
            // A JSON-RPC error goes on as the server wrote it (the client may retry otherwise).
            return match serde_json::from_str::<Value>(&body).ok().filter(|b| b.get("jsonrpc").is_some()) {
                Some(reply) => self.answered(&reply).await,
                None => self.fail(&message, format!("{} answered {status}: {}", self.url, body.trim())).await,
            };
        }
        if let Some(session) = answer.headers().get(crate::mcp::SESSION_HEADER).and_then(|v| v.to_str().ok()) {
            let mut named = self.session.lock().unwrap_or_else(|e| e.into_inner());
            if named.is_none() {
                *named = Some((session.to_string(), "2025-11-25".to_string()));
            }
        }
        let events = answer
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if !events {
            match answer.bytes().await {
                Ok(body) if body.is_empty() => {}
                Ok(body) => match serde_json::from_slice::<Value>(&body) {
                    Ok(reply) => self.answered(&reply).await,
                    Err(e) => self.fail(&message, format!("the answer is not JSON: {e}")).await,
                },
                Err(e) => self.fail(&message, format!("the answer broke off: {e}")).await,
            }
            return;
        }
        let mut stream = answer.bytes_stream();
        let mut buffer = String::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => buffer.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n")),
                Err(e) => return self.fail(&message, format!("the answer's stream broke off: {e}")).await,
            }
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                let data: Vec<&str> =
                    event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
                if data.is_empty() || data.iter().all(|d| d.is_empty()) {
                    continue;
                }
                match serde_json::from_str::<Value>(&data.join("\n")) {
                    Ok(reply) => self.answered(&reply).await,
                    Err(e) => eprintln!("browserpool mcp: an event that is not JSON: {e}"),
                }
            }
        }
    }

    /// Writes a message of the server's; an `initialize` result names the revision to send.
    async fn answered(&self, reply: &Value) {
        if let Some(version) = reply.pointer("/result/protocolVersion").and_then(Value::as_str) {
            if let Some((_, v)) = self.session.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                *v = version.to_string();
            }
        }
        self.write(reply).await;
    }

    /// Ends the MCP session (its leased browser is released).
    async fn end(&self) {
        if self.session.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            return;
        }
        if let Err(e) = self.request(reqwest::Method::DELETE, None).send().await {
            eprintln!("browserpool mcp: could not end the MCP session: {e}; it ends at its idle timeout");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        mcp: McpArgs,
    }

    #[test]
    fn the_endpoint_is_the_url_or_the_servers_host_on_the_http_port() {
        let endpoint = |args: &[&str]| Cmd::try_parse_from([&["mcp"], args].concat()).unwrap().mcp.endpoint();
        assert_eq!(endpoint(&["--server", "http://10.0.0.5:50051"]).unwrap(), "http://10.0.0.5:50052/mcp");
        assert_eq!(endpoint(&["--server", "pool.internal:9000"]).unwrap(), "http://pool.internal:50052/mcp");
        assert_eq!(endpoint(&["--server", "https://[::1]:50051/"]).unwrap(), "https://[::1]:50052/mcp");
        assert_eq!(endpoint(&["--url", "https://pool:8443/mcp"]).unwrap(), "https://pool:8443/mcp");
        assert!(endpoint(&["--url", "ftp://pool/mcp"]).unwrap_err().to_string().contains("give http://"));
    }
}
