//! What live view costs and how it feels: frames a second a viewer gets of an animating page
//! at 1280x720, the time from a click sent to the first frame showing its effect, the host
//! CPU one viewer adds, and how much slower the bench workload's actions run while someone
//! watches.
//!
//! `cargo run --release -p browserpool-server --example live_bench [-- SECONDS CLICKS]`
//!
//! Starts a server in-process on 127.0.0.1:0 with one session at 1280x720. Frames: a VIEW
//! viewer on a page animating every frame, counted for SECONDS (default 10). Latency: a
//! CONTROL viewer on a still page that changes colour on each click (frames come only when
//! the page changes, so the first frame after a click is its effect), CLICKS times (default
//! 50), p50 and p95. CPU: the whole host's CPU time (from /proc/stat) over SECONDS on the
//! animating page without a viewer and with one, as cores. Slowdown: the workload's actions
//! (type, click, extract, screenshot) 20 times each way on the animating page.

use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use browserpool_client::{action, pb, Client};
use futures::StreamExt;

mod common;
use common::{cpu_ms, InProcess};

const ANIMATED: &str = r#"<body style="margin:0"><h1 id="h" style="font-size:120px">0</h1><input id="q"><button id="b">go</button>
<script>let n = 0; (function f() { document.getElementById('h').textContent = n++;
document.body.style.background = 'hsl(' + (n * 3 % 360) + ',60%,80%)'; requestAnimationFrame(f); })();</script></body>"#;

const STILL: &str = r#"<body style="margin:0;background:#000"
onmousedown="document.body.style.background = document.body.style.background === 'rgb(255, 255, 255)' ? '#000' : '#fff'"></body>"#;

type Socket = async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(10);
    let clicks: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(50);
    let server = InProcess::start(1, 2).await?;
    let client = Client::connect(server.endpoint.clone(), &server.token).await?;
    let req = pb::AcquireRequest {
        wait_ms: 60_000,
        viewport: Some(pb::Viewport { width: 1280, height: 720, ..Default::default() }),
        ..Default::default()
    };
    let id = client.acquire_with(req).await?.session_id;
    let window = Duration::from_secs(seconds);

    act(&client, &id, action("load_html", "", ANIMATED)).await?;
    let idle_cores = cores_over(window, async { tokio::time::sleep(window).await }).await;
    let view = client.live_view(&id, false, None).await?;
    let mut viewer = open(&view.url).await?;
    let mut frames = 0u64;
    let watched_cores = cores_over(window, async {
        let until = Instant::now() + window;
        while let Ok(Some(Ok(m))) = tokio::time::timeout_at(until.into(), viewer.next()).await {
            frames += u64::from(matches!(m, Message::Binary(_)));
        }
    })
    .await;
    let fps = frames as f64 / seconds as f64;
    println!("frames at 1280x720, page animating every frame: {fps:.1} a second ({frames} in {seconds} s)");
    println!(
        "host CPU over {seconds} s: {idle_cores:.2} cores unwatched, {watched_cores:.2} watched: one viewer adds {:.2} cores",
        watched_cores - idle_cores
    );

    let plain = workload(&client, &id, 20).await?;
    let watched = {
        let reading = tokio::spawn(async move { while let Some(Ok(_)) = viewer.next().await {} });
        let took = workload(&client, &id, 20).await?;
        reading.abort();
        took
    };
    println!(
        "workload actions (type, click, extract, screenshot) x20: {:.0} ms unwatched, {:.0} ms watched: {:+.1}%",
        plain.as_secs_f64() * 1000.0,
        watched.as_secs_f64() * 1000.0,
        (watched.as_secs_f64() / plain.as_secs_f64() - 1.0) * 100.0
    );

    act(&client, &id, action("load_html", "", STILL)).await?;
    let control = client.live_view(&id, true, None).await?;
    let mut person = open(&control.url).await?;
    let mut latencies = Vec::with_capacity(clicks);
    for _ in 0..clicks {
        // Let the page settle: no frame for 300 ms.
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), person.next()).await {}
        let down = r#"{"type":"mouse","action":"down","x":0.5,"y":0.5,"button":"left","clicks":1}"#;
        let up = r#"{"type":"mouse","action":"up","x":0.5,"y":0.5,"button":"left","clicks":1}"#;
        let sent = Instant::now();
        person.send(Message::Text(down.into())).await?;
        person.send(Message::Text(up.into())).await?;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), person.next()).await {
                Ok(Some(Ok(Message::Binary(_)))) => break,
                Ok(Some(Ok(_))) => {}
                _ => anyhow::bail!("no frame within 5 s of a click"),
            }
        }
        latencies.push(sent.elapsed());
    }
    latencies.sort();
    let at =
        |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)].as_secs_f64() * 1000.0;
    println!("click to the first frame showing it, {clicks} clicks: p50 {:.0} ms, p95 {:.0} ms", at(0.5), at(0.95));
    client.release(&id).await?;
    server.stop().await
}

async fn act(client: &Client, id: &str, a: pb::Action) -> anyhow::Result<()> {
    let r = client.act(id, a).await?;
    anyhow::ensure!(r.ok, "action failed: {:?}", r.error);
    Ok(())
}

async fn open(url: &str) -> anyhow::Result<Socket> {
    let ws = format!("{}/ws", url.replacen("http://", "ws://", 1));
    Ok(async_tungstenite::tokio::connect_async(ws).await?.0)
}

/// The host's CPU, in cores, while `work` runs for `window`.
async fn cores_over(window: Duration, work: impl std::future::Future<Output = ()>) -> f64 {
    let (before, t) = (cpu_ms().1, Instant::now());
    work.await;
    let _ = window;
    (cpu_ms().1 - before) / (t.elapsed().as_secs_f64() * 1000.0)
}

/// `n` rounds of the workload's actions on session `id`; how long they took.
async fn workload(client: &Client, id: &str, n: usize) -> anyhow::Result<Duration> {
    let began = Instant::now();
    for _ in 0..n {
        for a in [
            action("type", "#q", "bench"),
            action("click", "#b", serde_json::Value::Null),
            action("extract", "#h", serde_json::Value::Null),
            action("screenshot", "", serde_json::Value::Null),
        ] {
            act(client, id, a).await?;
        }
    }
    Ok(began.elapsed())
}
