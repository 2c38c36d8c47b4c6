//! What MCP adds to a call: the `browser` tool with `{"action": "url"}` over Streamable HTTP at
//! `/mcp`, against the same action over gRPC `Sessions/Act`, on one session, alternately.
//!
//! `cargo run --release -p browserpool-server --example mcp_bench [-- ROUNDS]`
//!
//! The server runs in this process on 127.0.0.1:0; the MCP client is a plain HTTP client (one
//! keep-alive connection, as an agent's SDK keeps), binding its MCP session to the gRPC
//! client's session so both paths drive one browser. Prints p50 and p95 of each path and
//! their difference.

use std::time::Instant;

use browserpool_client::{action, Client};
use serde_json::{json, Value};

mod common;
use common::{ms, quantile, InProcess};

/// A minimal MCP client over Streamable HTTP: enough to initialize and call tools.
struct Mcp {
    http: reqwest::Client,
    url: String,
    token: String,
    session: String,
    /// The browserpool session every request binds to.
    bind: String,
    next_id: u64,
}

impl Mcp {
    async fn connect(http_addr: &str, token: &str, bind: &str) -> anyhow::Result<Mcp> {
        // reqwest's rustls takes the process's provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().pool_max_idle_per_host(1).build()?;
        let mut mcp = Mcp {
            http,
            url: format!("http://{http_addr}/mcp"),
            token: token.trim().into(),
            session: String::new(),
            bind: bind.into(),
            next_id: 1,
        };
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcp_bench", "version": "1"}});
        mcp.rpc("initialize", init).await?;
        mcp.notify("notifications/initialized").await?;
        Ok(mcp)
    }

    fn post(&self, body: Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .header("x-browserpool-session", &self.bind)
            .body(body.to_string());
        if !self.session.is_empty() {
            req = req.header("mcp-session-id", &self.session);
        }
        req
    }

    async fn notify(&self, method: &str) -> anyhow::Result<()> {
        let answer = self.post(json!({"jsonrpc": "2.0", "method": method})).send().await?;
        anyhow::ensure!(answer.status().is_success(), "{method}: {}", answer.status());
        Ok(())
    }

    /// One request; its result (the answer's last `data:` event, or its JSON body).
    async fn rpc(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let answer = self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).send().await?;
        anyhow::ensure!(answer.status().is_success(), "{method}: {}", answer.status());
        if let Some(session) = answer.headers().get("mcp-session-id") {
            self.session = session.to_str()?.to_string();
        }
        let text = answer.text().await?;
        let body = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|d| !d.is_empty())
            .unwrap_or(&text);
        let reply: Value = serde_json::from_str(body)?;
        reply.get("result").cloned().ok_or_else(|| anyhow::anyhow!("{method}: {reply}"))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let server = InProcess::start(1, 1).await?;
    let grpc = Client::connect(server.endpoint.clone(), &server.token).await?;
    let session = grpc.acquire(30_000).await?.session_id;
    let mut mcp = Mcp::connect(&server.http, &server.token, &session).await?;
    let url = || action("url", "", Value::Null);
    let call = json!({"name": "browser", "arguments": {"action": "url"}});
    // Warm both paths (connections, caches) before measuring.
    for _ in 0..50 {
        grpc.act(&session, url()).await?;
        let result = mcp.rpc("tools/call", call.clone()).await?;
        anyhow::ensure!(result["isError"] != json!(true), "url failed over MCP: {result}");
    }
    let (mut over_grpc, mut over_mcp) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        anyhow::ensure!(grpc.act(&session, url()).await?.ok, "url failed over gRPC");
        over_grpc.push(t.elapsed());
        let t = Instant::now();
        let result = mcp.rpc("tools/call", call.clone()).await?;
        anyhow::ensure!(result["isError"] != json!(true), "url failed over MCP: {result}");
        over_mcp.push(t.elapsed());
    }
    grpc.release(&session).await?;
    let (g50, g95) = (quantile(&over_grpc, 0.50), quantile(&over_grpc, 0.95));
    let (m50, m95) = (quantile(&over_mcp, 0.50), quantile(&over_mcp, 0.95));
    println!("the url action x {rounds}, each path, alternating, one session");
    println!("  gRPC Sessions/Act:        p50 {:>7.3} ms  p95 {:>7.3} ms", ms(g50), ms(g95));
    println!("  MCP browser tool:         p50 {:>7.3} ms  p95 {:>7.3} ms", ms(m50), ms(m95));
    println!(
        "  MCP adds:                 p50 {:>7.3} ms  p95 {:>7.3} ms  (goal: at most 5 ms at p50)",
        ms(m50) - ms(g50),
        ms(m95) - ms(g95)
    );
    server.stop().await?;
    Ok(())
}
