//! Chaos: the faults of a fleet, on demand, against real server processes and real Chromium,
//! printing for each what callers saw and how long recovery took.
//!
//! ```sh
//! cargo build --release -p browserpool-server --bin browserpool --example chaos
//! target/release/examples/chaos [FAULT ...] [--postgres URL]
//! ```
//!
//! FAULT is any of `browser-stop` (SIGSTOP of a leased browser), `browser-kill` (SIGKILL of
//! it), `server-kill` (SIGKILL of a server with two sessions, not restarted, then restarted),
//! `sigterm` (one busy and one idle session), `store-outage` (two replicas on PostgreSQL, the
//! database unreachable for 20 s; needs `--postgres` with a URL that may create databases);
//! all of them by default. Servers run from the `browserpool` binary next to this program's
//! directory (`target/release/`), each on 127.0.0.1:0 with a data dir of its own.

use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};

mod common;
use common::{copy_signing_keys, processes_naming, ServerProcess as Server};

/// A `browserpool serve` process of its own, with one warm worker and up to three.
fn start(dir: tempfile::TempDir, database_url: &str, extra: &[&str]) -> anyhow::Result<Server> {
    let mut args = vec!["--warm", "1", "--max-workers", "3"];
    args.extend_from_slice(extra);
    Server::start(dir, Some(database_url), &args)
}

/// A server on SQLite in its own data dir.
fn sqlite() -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("browserpool.db").display());
    start(dir, &url, &[])
}

/// A session on `server`: its client, its id and its browser's main process id.
async fn leased(server: &Server) -> anyhow::Result<(Client, String, i32)> {
    let client = server.client().await?;
    let id = client.acquire(30_000).await?.session_id;
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await?.into_inner();
    let worker = status.workers.iter().find(|w| w.session_id == id).ok_or_else(|| anyhow::anyhow!("no worker"))?;
    let pid = worker.pid as i32;
    Ok((client, id, pid))
}

/// What a call answered, in a word: `ok`, the action's error code, or the status code.
fn said(answer: &Result<pb::ActionResult, browserpool_client::Error>) -> String {
    match answer {
        Ok(r) => r
            .error
            .as_ref()
            .map_or("ok".into(), |e| format!("{:?}", pb::ErrorCode::try_from(e.code).unwrap_or_default())),
        Err(browserpool_client::Error::Status(s)) => format!("{:?}", s.code()),
        Err(e) => format!("{e}"),
    }
}

async fn state(client: &Client, id: &str) -> String {
    match client.get(id).await {
        Ok(s) => format!("{:?}", pb::SessionState::try_from(s.state).unwrap_or_default()),
        Err(e) => format!("{e}"),
    }
}

/// Polls `id` until its state is not READY (at most `within`): the state and when.
async fn until_ended(client: &Client, id: &str, within: Duration) -> (String, Duration) {
    let started = Instant::now();
    loop {
        let now = state(client, id).await;
        if now != "Ready" || started.elapsed() > within {
            return (now, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn browser_stop() -> anyhow::Result<()> {
    let server = sqlite()?;
    let (client, id, pid) = leased(&server).await?;
    // SAFETY: stopping a process group our server started.
    unsafe { libc::killpg(pid, libc::SIGSTOP) };
    let mut a = action("evaluate", "", "1 + 1");
    a.timeout_ms = 1_000;
    let started = Instant::now();
    let answer = client.act(&id, a).await;
    println!("  an action with timeout_ms 1000: {} after {:?}", said(&answer), started.elapsed());
    let (ended, after) = until_ended(&client, &id, Duration::from_secs(30)).await;
    println!(
        "  with nobody calling: the session {ended} {after:?} after the stop (bound: --browser-unresponsive-after 10s)"
    );
    let next = client.acquire(30_000).await;
    println!("  the next acquire: {}", if next.is_ok() { "served" } else { "failed" });
    Ok(())
}

async fn browser_kill() -> anyhow::Result<()> {
    let server = sqlite()?;
    let (client, id, pid) = leased(&server).await?;
    // SAFETY: killing a process our server started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let (ended, after) = until_ended(&client, &id, Duration::from_secs(30)).await;
    println!("  with nobody calling: the session {ended} {after:?} after the kill");
    let answer = client.act(&id, action("title", "", serde_json::Value::Null)).await;
    println!("  an action on it: {}", said(&answer));
    Ok(())
}

async fn server_kill() -> anyhow::Result<()> {
    let mut server = sqlite()?;
    let client = server.client().await?;
    let ids = [client.acquire(30_000).await?.session_id, client.acquire(30_000).await?.session_id];
    let profiles = browserpool_server::server::profiles_dir(server.dir.path()).display().to_string();
    let before = processes_naming(&profiles).len();
    server.signal(libc::SIGKILL);
    server.wait();
    let killed = Instant::now();
    let mut left = before;
    while left > 0 && killed.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        left = processes_naming(&profiles).len();
    }
    println!(
        "  kill -9 with 2 sessions, no restart: {before} processes naming its profiles, {left} left after {:?}",
        killed.elapsed()
    );
    let dir = std::mem::replace(&mut server.dir, tempfile::tempdir()?);
    let url = server.database_url.clone().expect("chaos servers name their database");
    let restarted = Instant::now();
    let again = start(dir, &url, &[])?;
    let client = again.client().await?;
    println!("  restarted on its data dir: serving after {:?}", restarted.elapsed());
    for id in &ids {
        println!("    {id}: {}", state(&client, id).await);
    }
    Ok(())
}

async fn sigterm() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("browserpool.db").display());
    let mut server = start(dir, &url, &["--shutdown-grace", "2s"])?;
    let client = server.client().await?;
    let busy = client.acquire(30_000).await?.session_id;
    let idle = client.acquire(30_000).await?.session_id;
    let running = {
        let (client, busy) = (client.clone(), busy.clone());
        let mut a = action("evaluate", "", "new Promise(r => setTimeout(r, 60000))");
        a.timeout_ms = 90_000;
        tokio::spawn(async move { client.act(&busy, a).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.signal(libc::SIGTERM);
    // The server handles the signal a moment later: what /readyz says first after 200 (a 503
    // while it drains, or refused once it stopped listening), and when.
    let signalled = Instant::now();
    let mut ready = readyz(&server.http).await;
    while ready == "HTTP/1.1 200 OK" && signalled.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        ready = readyz(&server.http).await;
    }
    let not_ready = signalled.elapsed();
    let (code, took) = tokio::task::block_in_place(|| server.wait());
    println!("  SIGTERM, --shutdown-grace 2s: /readyz {ready} after {not_ready:?}; exit {code:?} after {took:?}");
    println!("  the busy session's action: {}", said(&running.await?));
    let store = browserpool_server::store::Store::open(&url).await?;
    for (what, id) in [("busy", &busy), ("idle", &idle)] {
        let record = store.session(id).await?.ok_or_else(|| anyhow::anyhow!("no record"))?;
        println!("    {what}: {} ({})", record.state.as_str(), record.end_reason.unwrap_or_default());
    }
    store.close().await;
    Ok(())
}

/// The status line of `/readyz`, or why there was none.
async fn readyz(http: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut conn) = tokio::net::TcpStream::connect(http).await else { return "refused".into() };
    let _ =
        conn.write_all(format!("GET /readyz HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n").as_bytes()).await;
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_to_string(&mut out)).await;
    out.lines().next().unwrap_or("no answer").to_string()
}

/// A relay in front of PostgreSQL that can be held down: connections are cut and new ones
/// hang, as a database host gone from the network.
async fn gate(upstream: String) -> anyhow::Result<(u16, tokio::sync::watch::Sender<bool>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let (up, _) = tokio::sync::watch::channel(true);
    let gate = up.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let mut watch = gate.subscribe();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if !*watch.borrow() {
                    let _ = watch.wait_for(|up| *up).await;
                    return drop(client);
                }
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    _ = watch.wait_for(|up| !*up) => {}
                }
            });
        }
    });
    Ok((port, up))
}

async fn store_outage(postgres: Option<&str>) -> anyhow::Result<()> {
    let Some(admin) = postgres else {
        println!("  skipped: needs --postgres URL (a PostgreSQL the program may create a database on)");
        return Ok(());
    };
    let database = browserpool_server::store::scratch_postgres(admin).await?;
    let mut url = url::Url::parse(&database)?;
    let upstream = format!("{}:{}", url.host_str().unwrap_or("127.0.0.1"), url.port().unwrap_or(5432));
    let (port, up) = gate(upstream).await?;
    url.set_host(Some("127.0.0.1"))?;
    let _ = url.set_port(Some(port));
    let a = start(tempfile::tempdir()?, url.as_str(), &[])?;
    let b_dir = tempfile::tempdir()?;
    copy_signing_keys(a.dir.path(), b_dir.path())?;
    let b = start(b_dir, url.as_str(), &[])?;
    let (on_a, on_b) = (a.client().await?, b.client().await?);
    let (sa, sb) = (on_a.acquire(30_000).await?.session_id, on_b.acquire(30_000).await?.session_id);
    up.send_replace(false);
    let outage = Instant::now();
    let mut seen = std::collections::BTreeMap::<String, (usize, Duration)>::new();
    while outage.elapsed() < Duration::from_secs(20) {
        for (via, client, id) in [("A", &on_a, &sa), ("B", &on_b, &sb), ("B", &on_b, &sa)] {
            let started = Instant::now();
            let answer = client.act(id, action("evaluate", "", "1")).await;
            let owner = if id == &sa { "A" } else { "B" };
            let entry =
                seen.entry(format!("{} (session on {owner}, called through {via})", said(&answer))).or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("  during 20 s without the database (/readyz on A: {}):", readyz(&a.http).await);
    for (what, (n, slowest)) in &seen {
        println!("    {n:>3} x {what} (slowest {slowest:?})");
    }
    up.send_replace(true);
    let back = Instant::now();
    while readyz(&a.http).await != "HTTP/1.1 200 OK" && back.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("  back: /readyz 200 after {:?}; 15 s later:", back.elapsed());
    tokio::time::sleep(Duration::from_secs(15)).await;
    for (name, id) in [("A's", &sa), ("B's", &sb)] {
        let answer = on_b.act(id, action("evaluate", "", "1")).await;
        println!("    {name} session {}: an action {}", state(&on_b, id).await, said(&answer));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut faults = Vec::new();
    let mut postgres = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--postgres" => postgres = Some(args.next().ok_or_else(|| anyhow::anyhow!("--postgres needs a URL"))?),
            "browser-stop" | "browser-kill" | "server-kill" | "sigterm" | "store-outage" => faults.push(arg),
            other => {
                anyhow::bail!("unknown fault {other:?}: browser-stop, browser-kill, server-kill, sigterm, store-outage")
            }
        }
    }
    if faults.is_empty() {
        faults = ["browser-stop", "browser-kill", "server-kill", "sigterm", "store-outage"].map(String::from).to_vec();
    }
    for fault in &faults {
        println!("== {fault}");
        let ran = match fault.as_str() {
            "browser-stop" => browser_stop().await,
            "browser-kill" => browser_kill().await,
            "server-kill" => server_kill().await,
            "sigterm" => sigterm().await,
            _ => store_outage(postgres.as_deref()).await,
        };
        if let Err(e) = ran {
            println!("  failed: {e:#}");
        }
    }
    Ok(())
}
