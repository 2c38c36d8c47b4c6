//! Acquire latency from a warm pool, measured over real gRPC against a real Chromium pool.
//!
//! `cargo run --release -p browserpool-server --example acquire_bench [-- ROUNDS [process]]`
//!
//! Starts a server in-process on 127.0.0.1:0 with a fresh data dir (with `process`: the
//! `browserpool` binary beside this program's directory, `cargo build --release -p
//! browserpool-server` first, as a process of its own), waits until the pool is
//! warm before every round (so each acquire finds a booted browser), and prints the
//! distribution of `Acquire` round-trip times as the client sees them, plus the first action,
//! a navigation to a page served on loopback (through the worker's egress proxy), how long
//! a `confirm()` opened by a click takes to end that click with DIALOG_OPEN, and `Release`;
//! with `process`, also the server process's own PSS while idle, before and after the rounds,
//! how much of it is its own code paged in and how much anonymous memory (heap, stacks).

use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};

mod common;
use common::{anon_pss_kib, exe_pss_kib, ms, pss_kib, quantile, serve_page, InProcess, ServerProcess};

const WARM: usize = 2;
const SETTLE: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(30);
    let server = match std::env::args().nth(2).as_deref() {
        None => Server::InProcess(InProcess::start(WARM, WARM + 1).await?),
        Some("process") => {
            let (warm, max) = (WARM.to_string(), (WARM + 1).to_string());
            Server::Process(ServerProcess::start(
                tempfile::tempdir()?,
                None,
                &["--warm", &warm, "--max-workers", &max],
            )?)
        }
        Some(other) => anyhow::bail!("unknown server kind {other:?}: omit it (in-process) or say `process`"),
    };
    let page = format!("{}/", serve_page("<title>x</title>").await?);
    let (endpoint, token) = server.endpoint_and_token();
    println!(
        "server: {}",
        if matches!(server, Server::InProcess(_)) { "in this process" } else { "a process of its own" }
    );

    let client = Client::connect(endpoint, &token).await?;
    let mut acquire = Vec::with_capacity(rounds);
    let mut first_action = Vec::with_capacity(rounds);
    let mut navigate = Vec::with_capacity(rounds);
    let mut dialog = Vec::with_capacity(rounds);
    let mut release = Vec::with_capacity(rounds);
    // The server's own memory (Chromium's processes are not counted), idle with its warm
    // workers booted, before any session and after them all.
    let server_pss = || match &server {
        Server::Process(p) => {
            let mib = |kib: u64| kib as f64 / 1024.0;
            let (all, exe) = (pss_kib(p.child.id())?, exe_pss_kib(p.child.id()).unwrap_or(0));
            let anon = anon_pss_kib(p.child.id()).unwrap_or(0);
            Some(format!("{:.1} MiB ({:.1} its code, {:.1} anonymous)", mib(all), mib(exe), mib(anon)))
        }
        Server::InProcess(_) => None,
    };
    wait_warm(&client, WARM).await?;
    tokio::time::sleep(SETTLE).await;
    let idle_before = server_pss();
    for _ in 0..rounds {
        wait_warm(&client, WARM).await?;
        // A Chromium that just printed its endpoint keeps starting up for a moment; measure the
        // steady warm pool, not the CPU contention of a boot still settling on 2 cores.
        tokio::time::sleep(SETTLE).await;
        let t = Instant::now();
        let session = client.acquire(30_000).await?;
        acquire.push(t.elapsed());
        let t = Instant::now();
        let r = client.act(&session.session_id, action("evaluate", "", "1 + 1")).await?;
        first_action.push(t.elapsed());
        anyhow::ensure!(r.ok, "evaluate failed: {:?}", r.error);
        let t = Instant::now();
        let r = client.act(&session.session_id, action("navigate", "", page.clone())).await?;
        navigate.push(t.elapsed());
        anyhow::ensure!(r.ok, "navigate failed: {:?}", r.error);
        // A click whose handler calls confirm(): how long until the action ends DIALOG_OPEN.
        let page = "<button id=b onclick=\"confirm('go?')\">b</button>";
        let r = client.act(&session.session_id, action("load_html", "", page)).await?;
        anyhow::ensure!(r.ok, "load_html failed: {:?}", r.error);
        let t = Instant::now();
        let r = client.act(&session.session_id, action("click", "#b", serde_json::Value::Null)).await?;
        dialog.push(t.elapsed());
        let code = r.error.as_ref().map(|e| e.code).unwrap_or_default();
        anyhow::ensure!(code == pb::ErrorCode::DialogOpen as i32, "click did not surface the dialog: {:?}", r.error);
        let t = Instant::now();
        client.release(&session.session_id).await?;
        release.push(t.elapsed());
    }
    report("acquire (warm pool)", &mut acquire);
    report("first action (evaluate)", &mut first_action);
    report("navigate to a loopback page (via the egress proxy)", &mut navigate);
    report("confirm() surfaced as DIALOG_OPEN (click)", &mut dialog);
    report("release (the worker killed after the answer)", &mut release);
    wait_warm(&client, WARM).await?;
    tokio::time::sleep(SETTLE).await;
    if let (Some(before), Some(after)) = (idle_before, server_pss()) {
        println!(
            "server PSS, idle with {WARM} warm workers (its own process): {before} before the rounds, {after} after"
        );
    }

    server.stop().await?;
    Ok(())
}

enum Server {
    InProcess(InProcess),
    Process(ServerProcess),
}

impl Server {
    fn endpoint_and_token(&self) -> (String, String) {
        match self {
            Server::InProcess(s) => (s.endpoint.clone(), s.token.clone()),
            Server::Process(p) => (p.endpoint(), p.token.clone()),
        }
    }

    async fn stop(self) -> anyhow::Result<()> {
        match self {
            Server::InProcess(s) => s.stop().await,
            Server::Process(mut p) => {
                // It kills its workers first, then exits 0.
                p.signal(libc::SIGTERM);
                let (code, _) = tokio::task::block_in_place(|| p.wait());
                anyhow::ensure!(code == Some(0), "the server exited with {code:?}");
                Ok(())
            }
        }
    }
}

async fn wait_warm(client: &Client, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = client.admin().pool_status(pb::PoolStatusRequest {}).await?.into_inner();
        if status.warm as usize >= n {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "pool did not turn warm within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |q: f64| quantile(samples, q);
    println!(
        "{what}: n={} min={:.2} ms median={:.2} ms p90={:.2} ms max={:.2} ms",
        samples.len(),
        ms(samples[0]),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(samples[samples.len() - 1])
    );
}
