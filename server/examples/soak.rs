//! Soak: many whole sessions in a row, watching for anything that grows or is left behind.
//!
//! `cargo run --release -p browserpool-server --example soak [-- SESSIONS [CLIENTS
//! [ISOLATION]]]` (defaults: 200 sessions, 2 clients at once, `process` isolation; `context`
//! puts the tenant in context isolation, its sessions contexts of one shared Chromium).
//!
//! Starts a server in-process on 127.0.0.1:0 with a fresh data dir (SQLite), serves a small
//! form on loopback, and runs SESSIONS sessions split over CLIENTS concurrent clients; each
//! acquires, navigates, types, clicks, reads the heading, takes a PNG screenshot and releases.
//! It prints errors, the process's RSS and open file descriptors, and the PSS of the server's
//! Chromium processes (warm workers, or the shared browser), at the start, at every 10% and at
//! the end; then, with the server stopped, the Chromium processes and profile dirs left behind
//! and the database's size. The process's figures include this client, which is small and does
//! not grow.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use browserpool_client::{action, Client};

mod common;
use common::{processes_naming, pss_kib, serve_page, use_context_isolation, InProcess};

const FORM: &str = r#"<!doctype html><title>Soak</title><h1 id="h">Hello</h1>
<input id="name"><button id="go" onclick="document.getElementById('h').textContent = 'Hello, ' + document.getElementById('name').value">Go</button>"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut argv = std::env::args().skip(1);
    let sessions: usize = argv.next().map(|s| s.parse()).transpose()?.unwrap_or(200);
    let clients: usize = argv.next().map(|s| s.parse()).transpose()?.unwrap_or(2).max(1);
    let isolation = argv.next().unwrap_or_else(|| "process".into());
    let context = match isolation.as_str() {
        "process" => false,
        "context" => true,
        other => anyhow::bail!("isolation {other:?}: `process` or `context`"),
    };
    // In context isolation one warm worker becomes the tenant's shared browser.
    let server = InProcess::start(if context { 1 } else { clients }, clients + 1).await?;
    let page = format!("{}/", serve_page(FORM).await?);

    let client = Client::connect(server.endpoint.clone(), &server.token).await?;
    if context {
        use_context_isolation(&client).await?;
    }
    let profiles: Arc<str> = server.profiles.display().to_string().into();
    println!("soak: {sessions} sessions, {clients} clients at once, {isolation} isolation");
    println!("{:>6} {:>9} {:>5} {:>12} {:>7} {:>9}", "done", "rss_mib", "fds", "chromium_mib", "errors", "elapsed_s");
    let started = Instant::now();
    let report = move |done: usize, errors: usize| {
        let chromium_kib: u64 = processes_naming(&profiles).into_iter().filter_map(pss_kib).sum();
        println!(
            "{done:>6} {:>9.1} {:>5} {:>12.1} {errors:>7} {:>9.1}",
            rss_bytes() as f64 / (1 << 20) as f64,
            open_fds(),
            chromium_kib as f64 / 1024.0,
            started.elapsed().as_secs_f64()
        );
    };
    report(0, 0);

    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let step = (sessions / 10).max(1);
    let mut workers = Vec::new();
    for _ in 0..clients {
        let (client, page, next, done, errors, report) =
            (client.clone(), page.clone(), next.clone(), done.clone(), errors.clone(), report.clone());
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < sessions {
                if let Err(e) = one_session(&client, &page).await {
                    eprintln!("error: {e:#}");
                    errors.fetch_add(1, Ordering::SeqCst);
                }
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                if n % step == 0 || n == sessions {
                    report(n, errors.load(Ordering::SeqCst));
                }
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    let elapsed = started.elapsed();

    // The data dir outlives the server, for the leftover checks below.
    let profiles_dir = server.profiles.clone();
    let dir = server.stop_keeping_dir().await?;
    let dir = dir.path();
    let chromiums = processes_naming(&profiles_dir.display().to_string()).len();
    // What is left in the profiles dir (the server removes the dir itself at stop).
    let dirs_left = std::fs::read_dir(&profiles_dir).map(|d| d.count()).unwrap_or(0);
    let db_bytes: u64 = ["browserpool.db", "browserpool.db-wal", "browserpool.db-shm"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "sessions: {sessions} in {:.1} s ({:.2}/s)",
        elapsed.as_secs_f64(),
        sessions as f64 / elapsed.as_secs_f64()
    );
    println!("errors: {}", errors.load(Ordering::SeqCst));
    println!("chromium processes left: {chromiums}");
    println!("profile dirs left: {dirs_left}");
    println!("database: {:.1} KiB (file, WAL and shared memory)", db_bytes as f64 / 1024.0);
    Ok(())
}

async fn one_session(client: &Client, page: &str) -> anyhow::Result<()> {
    let session = client.acquire(60_000).await?;
    let id = session.session_id.as_str();
    let steps = [
        action("navigate", "", page),
        action("type", "#name", "soak"),
        action("click", "#go", serde_json::Value::Null),
        action("extract", "#h", serde_json::Value::Null),
        action("screenshot", "", serde_json::Value::Null),
    ];
    let mut outcome = Ok(());
    for step in steps {
        let r = client.act(id, step).await?;
        if !r.ok {
            outcome = Err(anyhow::anyhow!("{} failed: {:?}", r.action, r.error));
            break;
        }
        if r.action == "extract" {
            let text = r.value.as_ref().map(browserpool_client::to_json).unwrap_or_default();
            if text != serde_json::json!("Hello, soak") {
                outcome = Err(anyhow::anyhow!("extract read {text}"));
                break;
            }
        }
        if r.action == "screenshot" && !r.data.starts_with(b"\x89PNG") {
            outcome = Err(anyhow::anyhow!("screenshot is not a PNG"));
        }
    }
    client.release(id).await?;
    outcome
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}
