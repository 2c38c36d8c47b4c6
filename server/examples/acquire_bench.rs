//! Acquire latency from a warm pool, measured over real gRPC against a real Chromium pool.
//!
//! `cargo run --release -p browserpool-server --example acquire_bench [-- ROUNDS]`
//!
//! Starts a server in-process on 127.0.0.1:0 with a fresh data dir, waits until the pool is
//! warm before every round (so each acquire finds a booted browser), and prints the
//! distribution of `Acquire` round-trip times as the client sees them, plus the first action,
//! a navigation to a page served on loopback (through the worker's egress proxy), how long
//! a `confirm()` opened by a click takes to end that click with DIALOG_OPEN, and `Release`.

use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};

mod common;
use common::{serve_page, InProcess};

const WARM: usize = 2;
const SETTLE: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(30);
    let server = InProcess::start(WARM, WARM + 1).await?;
    let page = format!("{}/", serve_page("<title>x</title>").await?);

    let client = Client::connect(server.endpoint.clone(), &server.token).await?;
    let mut acquire = Vec::with_capacity(rounds);
    let mut first_action = Vec::with_capacity(rounds);
    let mut navigate = Vec::with_capacity(rounds);
    let mut dialog = Vec::with_capacity(rounds);
    let mut release = Vec::with_capacity(rounds);
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

    server.stop().await?;
    Ok(())
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
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "{what}: n={} min={:.2} ms median={:.2} ms p90={:.2} ms max={:.2} ms",
        samples.len(),
        ms(samples[0]),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(samples[samples.len() - 1])
    );
}
