//! What the CDP proxy adds, measured over real sockets against a real Chromium.
//!
//! `cargo run --release -p browserpool-server --example cdp_bench [-- CALLS [FLOWS]]`
//! (defaults: 1000 calls, 5 Puppeteer workflows; the workflows need `scripts/test.sh` to have
//! installed the Node clients in `server/tests/cdp`, and are skipped, saying so, otherwise).
//!
//! 1. `Runtime.evaluate("1+1")` round trips on one page, through the session's `cdp_url` and
//!    straight to the same browser's own DevTools socket: p50 and p99 of each, and the
//!    difference.
//! 2. The Puppeteer workflow of the tests (open a page, type, click, read, screenshot,
//!    disconnect) through `cdp_url`, against the same workflow on a Chromium this program
//!    launches itself with the pool's flags: median wall time of each, Node's start included
//!    in both.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use browserpool_client::Client;

mod common;
use common::{ms, quantile, serve_page, InProcess};
use futures::StreamExt;
use serde_json::{json, Value};

const FORM: &str = r#"<!doctype html><title>Greeter</title><h1 id="greeting">Hello, nobody</h1>
<input id="name"><button id="go" onclick="document.getElementById('greeting').textContent = 'Hello, ' + document.getElementById('name').value">Go</button>"#;

type Ws = async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut argv = std::env::args().skip(1);
    let calls: usize = argv.next().map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let flows: usize = argv.next().map(|s| s.parse()).transpose()?.unwrap_or(5);
    let server = InProcess::start(1, 2).await?;
    let site_url = serve_page(FORM).await?;

    let client = Client::connect(server.endpoint.clone(), &server.token).await?;
    let session = client.acquire(30_000).await?;
    let direct = server.sessions.devtools_url(&session.session_id).expect("the session is live here");

    println!("Runtime.evaluate(\"1+1\") round trips, {calls} calls after 100 to warm up");
    let proxied = evaluate_rtts(&session.cdp_url, calls).await?;
    let own = evaluate_rtts(&direct, calls).await?;
    let (p50, p99) = (quantile(&proxied, 0.50), quantile(&proxied, 0.99));
    let (d50, d99) = (quantile(&own, 0.50), quantile(&own, 0.99));
    println!("  through cdp_url:        p50 {:>7.3} ms  p99 {:>7.3} ms", ms(p50), ms(p99));
    println!("  Chromium's own socket:  p50 {:>7.3} ms  p99 {:>7.3} ms", ms(d50), ms(d99));
    println!("  added by the proxy:     p50 {:>7.3} ms  p99 {:>7.3} ms", ms(p50) - ms(d50), ms(p99) - ms(d99));

    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cdp");
    if flows == 0 || !scripts.join("node_modules/puppeteer-core").exists() {
        println!(
            "Puppeteer workflow: skipped (run scripts/test.sh to install the Node clients in {})",
            scripts.display()
        );
    } else {
        println!("Puppeteer workflow (open, type, click, read, screenshot, disconnect), {flows} runs each");
        let mut through = Vec::new();
        for _ in 0..flows {
            through.push(puppeteer_flow(&scripts, &session.cdp_url, &site_url).await?);
        }
        let mut own = Vec::new();
        let chromium = OwnChromium::launch().await?;
        for _ in 0..flows {
            own.push(puppeteer_flow(&scripts, &chromium.ws_url, &site_url).await?);
        }
        drop(chromium);
        println!("  through cdp_url:                 median {:>7.1} ms", ms(quantile(&through, 0.50)));
        println!("  a Chromium launched by the bench: median {:>7.1} ms", ms(quantile(&own, 0.50)));
    }
    client.release(&session.session_id).await?;
    server.stop().await?;
    Ok(())
}

/// Attaches to the first page (flat session) and times `calls` evaluations.
async fn evaluate_rtts(url: &str, calls: usize) -> anyhow::Result<Vec<Duration>> {
    let (mut ws, _) = async_tungstenite::tokio::connect_async(url).await?;
    let targets = call(&mut ws, json!({"id": 1, "method": "Target.getTargets"})).await?;
    let page = targets["result"]["targetInfos"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["type"] == "page"))
        .map(|t| t["targetId"].clone())
        .ok_or_else(|| anyhow::anyhow!("no page target"))?;
    let attached = call(
        &mut ws,
        json!({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": page, "flatten": true}}),
    )
    .await?;
    let session = attached["result"]["sessionId"].clone();
    let mut rtts = Vec::with_capacity(calls);
    for i in 0..calls + 100 {
        let id = 10 + i as u64;
        let msg =
            json!({"id": id, "sessionId": session, "method": "Runtime.evaluate", "params": {"expression": "1+1"}});
        let t = Instant::now();
        let answer = call(&mut ws, msg).await?;
        let elapsed = t.elapsed();
        anyhow::ensure!(answer["result"]["result"]["value"] == 2, "unexpected answer {answer}");
        if i >= 100 {
            rtts.push(elapsed);
        }
    }
    ws.close(None).await?;
    Ok(rtts)
}

/// Sends `msg` and waits for the answer with its id (events in between are skipped).
async fn call(ws: &mut Ws, msg: Value) -> anyhow::Result<Value> {
    let id = msg["id"].clone();
    ws.send(Message::text(msg.to_string())).await?;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("connection closed"))??;
        if let Message::Text(text) = frame {
            let v: Value = serde_json::from_str(text.as_str())?;
            if v["id"] == id {
                return Ok(v);
            }
        }
    }
}

async fn puppeteer_flow(scripts: &std::path::Path, cdp_url: &str, site: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = tokio::process::Command::new("node")
        .arg("puppeteer_flow.mjs")
        .current_dir(scripts)
        .env("CDP_URL", cdp_url)
        .env("SITE", site)
        .kill_on_drop(true)
        .output()
        .await?;
    anyhow::ensure!(out.status.success(), "puppeteer failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(t.elapsed())
}

/// A Chromium of the bench's own, with the pool's flags, on a port it picks.
struct OwnChromium {
    child: tokio::process::Child,
    ws_url: String,
    _profile: tempfile::TempDir,
}

impl OwnChromium {
    async fn launch() -> anyhow::Result<OwnChromium> {
        use tokio::io::AsyncBufReadExt;
        let profile = tempfile::tempdir()?;
        let mut child = tokio::process::Command::new(browserpool_pool::find_chrome(None)?)
            .args(browserpool_pool::launcher::CHROME_FLAGS)
            .arg("--remote-debugging-port=0")
            .args(if unsafe { libc::geteuid() } == 0 { vec!["--no-sandbox"] } else { vec![] })
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
        let ws_url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    return Some(url.trim().to_string());
                }
            }
            None
        })
        .await?
        .ok_or_else(|| anyhow::anyhow!("chromium printed no DevTools endpoint"))?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(OwnChromium { child, ws_url, _profile: profile })
    }
}

impl Drop for OwnChromium {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
