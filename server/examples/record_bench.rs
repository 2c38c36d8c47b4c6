//! What recording costs: the host CPU of a recorded session against the same session
//! unrecorded, and the bytes of video a recorded minute makes.
//!
//! `cargo run --release -p browserpool-server --example record_bench [-- SESSIONS SECONDS]`
//!
//! Starts a server in-process on 127.0.0.1:0 and runs SESSIONS sessions one after another
//! (default 10) of the bench workload (acquire, navigate to a loopback page, type, click, read
//! the heading, PNG screenshot, release) three ways: not recorded, RECORD_ON (the video encoded
//! at the end and fetched, so the encoding is counted) and RECORD_RETAIN_ON_FAILURE on passing
//! jobs (frames captured, then dropped unencoded). It prints the whole host's CPU time per
//! session (Chromium, ffmpeg and the server together, from /proc/stat) and the extra of each
//! recorded way. Then it records one session of SECONDS (default 20) on a page that changes
//! every 100 ms and one on a still page, and prints each video's bytes per recorded minute.

use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};

mod common;
use common::{cpu_ms, serve_page, InProcess};

const PAGE: &str = r#"<title>bench</title><h1 id="h">ready</h1><input id="q"><button id="b"
onclick="document.getElementById('h').textContent = 'clicked ' + document.getElementById('q').value">go</button>"#;

const MOVING: &str = r#"<title>moving</title><h1 id="t" style="font-size:80px">0</h1>
<script>let n = 0; setInterval(() => { document.getElementById('t').textContent = n++;
document.body.style.background = 'hsl(' + (n * 7 % 360) + ',60%,80%)'; }, 100);</script>"#;

const STILL: &str = "<title>still</title><h1>nothing moves here</h1>";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let sessions: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(10);
    let seconds: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(20);
    let server = InProcess::start(1, 2).await?;
    let site = format!("{}/", serve_page(PAGE).await?);
    let client = Client::connect(server.endpoint.clone(), &server.token).await?;

    println!("{sessions} sessions each way, one at a time; host CPU per session (ms)");
    // One unmeasured round first: the first sessions of a fresh pool pay for its start.
    workload(&client, &site, pb::Record::Off, 2).await?;
    let mut base = 0.0;
    for (name, record) in [
        ("not recorded", pb::Record::Off),
        ("RECORD_ON, encoded", pb::Record::On),
        ("RETAIN_ON_FAILURE, passing", pb::Record::RetainOnFailure),
    ] {
        let (before, t) = (cpu_ms().1, Instant::now());
        workload(&client, &site, record, sessions).await?;
        let per_session = (cpu_ms().1 - before) / sessions as f64;
        let wall = t.elapsed().as_secs_f64() * 1000.0 / sessions as f64;
        if record == pb::Record::Off {
            base = per_session;
            println!("  {name:<28} host_cpu {per_session:>7.0}  wall {wall:>6.0}");
        } else {
            let extra = (per_session / base - 1.0) * 100.0;
            println!("  {name:<28} host_cpu {per_session:>7.0}  wall {wall:>6.0}  extra {extra:>+5.1}%");
        }
    }

    println!("video of {seconds} s sessions (WebM, VP8, 1280x720)");
    for (name, html) in [("a page changing every 100 ms", MOVING), ("a still page", STILL)] {
        let (bytes, length) = record_for(&client, html, Duration::from_secs(seconds)).await?;
        let per_minute = bytes as f64 / length.as_secs_f64() * 60.0 / (1 << 20) as f64;
        println!("  {name:<30} {bytes:>9} bytes, {per_minute:>6.2} MiB per recorded minute");
    }
    server.stop().await
}

/// `n` sessions of the workload, one after another; a recorded one's video is fetched (which
/// waits for its encoding) when it is kept.
async fn workload(client: &Client, site: &str, record: pb::Record, n: usize) -> anyhow::Result<()> {
    for _ in 0..n {
        let req = pb::AcquireRequest { wait_ms: 60_000, record: record as i32, ..Default::default() };
        let id = client.acquire_with(req).await?.session_id;
        for a in [
            action("navigate", "", site),
            action("type", "#q", "bench"),
            action("click", "#b", serde_json::Value::Null),
            action("extract", "#h", serde_json::Value::Null),
            action("screenshot", "", serde_json::Value::Null),
        ] {
            let r = client.act(&id, a).await?;
            anyhow::ensure!(r.ok, "action failed: {:?}", r.error);
        }
        client.release(&id).await?;
        match record {
            pb::Record::On => anyhow::ensure!(!client.get_recording(&id).await?.1.is_empty(), "no video"),
            // Not kept: Get waits for the session's teardown, so the next one starts after it.
            _ => drop(client.get(&id).await?),
        }
    }
    Ok(())
}

/// Records one session showing `html` for `length`; the video's size and the session's length.
async fn record_for(client: &Client, html: &str, length: Duration) -> anyhow::Result<(u64, Duration)> {
    let req = pb::AcquireRequest { wait_ms: 60_000, record: pb::Record::On as i32, ..Default::default() };
    let id = client.acquire_with(req).await?.session_id;
    let began = Instant::now();
    let r = client.act(&id, action("load_html", "", html)).await?;
    anyhow::ensure!(r.ok, "load_html failed: {:?}", r.error);
    tokio::time::sleep(length).await;
    client.release(&id).await?;
    let took = began.elapsed();
    let (artifact, _) = client.get_recording(&id).await?;
    Ok((artifact.size, took))
}
