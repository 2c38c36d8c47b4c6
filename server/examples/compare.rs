//! Compare: one browser workload through browserpool and through Chromium directly, on this
//! machine, in one run, so the figures can be compared with each other.
//!
//! `cargo run --release -p browserpool-server --example compare [-- SESSIONS [JSON_PATH
//! [SYSTEM,...]]]` (defaults: 16 sessions per measurement, JSON written to `compare.json`,
//! every system below).
//!
//! `cargo run --release -p browserpool-server --example compare -- lifecycle [SESSIONS
//! [SYSTEM,... [PAUSE_MS]]]` (defaults: 50 sessions; both isolations, `direct/context-tuned`
//! and `direct/launch`; no pause): the whole life of a session, one after another: acquire,
//! navigate to the loopback page, read its title, release; p50, p95 and p99 of each step and
//! of the whole. PAUSE_MS between sessions shows what a session costs when the work its
//! predecessor left (a context or worker made ahead, a disposal) is done before it starts.
//!
//! The workload, one session: acquire a browser, navigate to a page served on loopback, type
//! into a field, click a button, read the heading it changed, take a PNG screenshot, release.
//! The systems:
//! - `browserpool/process`: this repository's server in-process (SQLite, loopback gRPC), each
//!   session a Chromium of its own from the warm pool (the default isolation);
//! - `browserpool/context`: the same server with the tenant in context isolation: each
//!   session a fresh browser context in a Chromium only the tenant's sessions share;
//! - `direct/launch`: chromiumoxide launching a Chromium per session (what a Puppeteer script
//!   doing `launch()` per test does);
//! - `direct/context`: one Chromium, a fresh browser context per session, disposed after (the
//!   in-process best case: no isolation between sessions but the context);
//! - `direct/context-tuned`: the same, with the Chromium features browserpool's workers run
//!   without switched off too (`browserpool_pool::launcher::DISABLED_FEATURES`: most of what a
//!   context costs Chromium otherwise is a renderer for each window's omnibox popups), to
//!   tell what our own code costs from what those features cost.
//!
//! The direct systems run with chromiumoxide's default flags (much what Puppeteer's are) and
//! the ones this machine needs.
//!
//! Each system runs SESSIONS sessions one after another (latency p50/p95 and each step's
//! p50), then SESSIONS sessions at 1, 4 and 8 clients at once (sessions per second). The
//! proportional set size (PSS, shared pages split between the processes sharing them) of
//! this process and of the Chromium processes it started is sampled every 250 ms during the
//! sequential sessions and during one more pass at 8 clients, never during the throughput
//! passes (a read walks the page tables of every process read: there, its CPU was counted as
//! the system's own, more for a system with more processes, such as a pool's warm workers);
//! the peaks are printed. At 8 clients, the CPU time per session is printed too (ms): this
//! process's (`own_cpu`: the server and its client, or chromiumoxide) and the whole host's
//! (`host_cpu`: Chromium's processes included), the figure that bounds throughput on a busy
//! host. A table goes to stdout, the same figures as JSON to JSON_PATH.
//!
//! `BROWSERPOOL_PROFILES_IN=/dev/shm` runs the server's workers with their profiles on a
//! tmpfs, as the server's `--profiles-in` does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use browserpool_client::Client;
use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::cdp::browser_protocol::target::{CreateBrowserContextParams, CreateTargetParams};
use chromiumoxide::page::ScreenshotParams;
use futures::StreamExt;
use serde_json::json;

mod common;
use common::{cpu_ms, processes_naming, pss_kib, quantile, serve_page, use_context_isolation, InProcess};

const FORM: &str = r#"<!doctype html><title>Compare</title><h1 id="h">Hello</h1>
<input id="name"><button id="go" onclick="document.getElementById('h').textContent = 'Hello, ' + document.getElementById('name').value">Go</button>"#;

const STEPS: [&str; 7] = ["acquire", "navigate", "type", "click", "extract", "screenshot", "release"];
const CLIENTS: [usize; 3] = [1, 4, 8];

/// The steps of the lifecycle workload.
const LIFECYCLE: [&str; 4] = ["acquire", "navigate", "title", "release"];

/// The time each step of one session took, in `STEPS` (or `LIFECYCLE`) order.
type Times = Vec<Duration>;

/// A clock for the steps of one session.
struct Lap {
    at: Instant,
    times: Times,
}

impl Lap {
    fn start() -> Lap {
        Lap { at: Instant::now(), times: Vec::with_capacity(STEPS.len()) }
    }

    fn step(&mut self) {
        let now = Instant::now();
        self.times.push(now - self.at);
        self.at = now;
    }
}

/// One system under test, started for at most `clients` sessions at once.
// One value per measurement: boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
enum System {
    Pool { server: InProcess, client: Client },
    Launch { chrome: PathBuf, dir: tempfile::TempDir },
    Contexts { browser: Arc<Browser>, handler: tokio::task::JoinHandle<()>, _dir: tempfile::TempDir },
}

/// Flags for a Chromium run as root on a closed network (as the pool's workers get), and
/// with `tuned`, without the features the pool's workers run without.
fn chrome_config(chrome: &Path, profile: &Path, tuned: bool) -> anyhow::Result<BrowserConfig> {
    // chromiumoxide takes flag names without their dashes (it adds them), and merges the
    // values of a flag given twice (its defaults disable `TranslateUI`).
    let features = if tuned { browserpool_pool::launcher::DISABLED_FEATURES } else { "TranslateUI" };
    BrowserConfig::builder()
        .chrome_executable(chrome)
        .user_data_dir(profile)
        .no_sandbox()
        .args([
            "disable-gpu",
            "disable-quic",
            "no-first-run",
            "disable-background-networking",
            "disable-component-update",
            "disable-sync",
        ])
        .arg(("disable-features", features))
        .window_size(1280, 720)
        // The same screen as a browserpool session's default (chromiumoxide's own is 800x600,
        // which would make its screenshots cheaper than ours for fewer pixels).
        .viewport(chromiumoxide::handler::viewport::Viewport { width: 1280, height: 720, ..Default::default() })
        .build()
        .map_err(anyhow::Error::msg)
}

async fn launch(chrome: &Path, profile: &Path, tuned: bool) -> anyhow::Result<(Browser, tokio::task::JoinHandle<()>)> {
    let (browser, mut handler) = Browser::launch(chrome_config(chrome, profile, tuned)?).await?;
    let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
    Ok((browser, handler))
}

impl System {
    async fn start(name: &str, clients: usize) -> anyhow::Result<System> {
        let chrome = browserpool_pool::find_chrome(None)?;
        match name {
            "browserpool/process" => {
                // At least the server's default `--warm` (2): one worker for the next session
                // and one spare, as a server started with its defaults keeps; and at least its
                // default `--max-workers` (8), so a released browser still being killed (it
                // counts until gone) does not hold up the boots.
                let warm = clients.max(2);
                let server = InProcess::start(warm, (warm + 1).max(8)).await?;
                let client = Client::connect(server.endpoint.clone(), &server.token).await?;
                // Measured from a warm pool, as a server that has been up a while is.
                wait_warm(&server, warm).await;
                Ok(System::Pool { server, client })
            }
            "browserpool/context" => {
                let server = InProcess::start(1, clients + 1).await?;
                let client = Client::connect(server.endpoint.clone(), &server.token).await?;
                use_context_isolation(&client).await?;
                // Measured with the tenant's browser up, as on a server that has been up a
                // while: one session makes it (from the warm worker), and the spare booted in
                // that worker's place is waited for, so its boot is not counted against the
                // sessions measured.
                wait_warm(&server, 1).await;
                client.session().await?.release().await?;
                wait_warm(&server, 1).await;
                Ok(System::Pool { server, client })
            }
            "direct/launch" => Ok(System::Launch { chrome, dir: tempfile::tempdir()? }),
            "direct/context" | "direct/context-tuned" => {
                let dir = tempfile::tempdir()?;
                let tuned = name == "direct/context-tuned";
                let (browser, handler) = launch(&chrome, &dir.path().join("profile"), tuned).await?;
                Ok(System::Contexts { browser: Arc::new(browser), handler, _dir: dir })
            }
            other => anyhow::bail!("no system {other}"),
        }
    }

    /// Where this system's Chromium profiles live: its processes name it on their command line.
    fn marker(&self) -> PathBuf {
        match self {
            // The server's profiles dir (not under its data dir).
            System::Pool { server, .. } => server.profiles.clone(),
            System::Launch { dir, .. } => dir.path().to_path_buf(),
            System::Contexts { _dir, .. } => _dir.path().to_path_buf(),
        }
    }

    async fn session(&self, page: &str, n: u64) -> anyhow::Result<Times> {
        let mut lap = Lap::start();
        match self {
            System::Pool { client, .. } => {
                let session = client.session().await?;
                lap.step();
                session.navigate(page).await?;
                lap.step();
                session.type_text("#name", "Ada").await?;
                lap.step();
                session.click("#go").await?;
                lap.step();
                let heading = session.extract("#h").await?;
                lap.step();
                anyhow::ensure!(heading.as_deref() == Some("Hello, Ada"), "heading {heading:?}");
                let png = session.screenshot().await?;
                check_png(&png)?;
                lap.step();
                session.release().await?;
                lap.step();
            }
            System::Launch { chrome, dir } => {
                let profile = dir.path().join(format!("s{n}"));
                let (mut browser, handler) = launch(chrome, &profile, false).await?;
                let tab = browser.new_page("about:blank").await?;
                lap.step();
                workload(&tab, page, &mut lap).await?;
                browser.close().await?;
                browser.wait().await?;
                handler.abort();
                std::fs::remove_dir_all(&profile)?;
                lap.step();
            }
            System::Contexts { browser, .. } => {
                let (context, tab) = context_tab(browser).await?;
                lap.step();
                workload(&tab, page, &mut lap).await?;
                tab.close().await?;
                browser.dispose_browser_context(context).await?;
                lap.step();
            }
        }
        Ok(lap.times)
    }

    /// The lifecycle workload: acquire, navigate, title, release.
    async fn lifecycle(&self, page: &str, n: u64) -> anyhow::Result<Times> {
        let mut lap = Lap::start();
        let title = match self {
            System::Pool { client, .. } => {
                let session = client.session().await?;
                lap.step();
                session.navigate(page).await?;
                lap.step();
                let title = session.title().await?;
                lap.step();
                session.release().await?;
                title
            }
            System::Launch { chrome, dir } => {
                let profile = dir.path().join(format!("l{n}"));
                let (mut browser, handler) = launch(chrome, &profile, false).await?;
                let tab = browser.new_page("about:blank").await?;
                lap.step();
                let title = title_of(&tab, page, &mut lap).await?;
                browser.close().await?;
                browser.wait().await?;
                handler.abort();
                std::fs::remove_dir_all(&profile)?;
                title
            }
            System::Contexts { browser, .. } => {
                let (context, tab) = context_tab(browser).await?;
                lap.step();
                let title = title_of(&tab, page, &mut lap).await?;
                tab.close().await?;
                browser.dispose_browser_context(context).await?;
                title
            }
        };
        lap.step();
        anyhow::ensure!(title == "Compare", "title {title:?}");
        Ok(lap.times)
    }

    async fn stop(self) -> anyhow::Result<()> {
        match self {
            System::Pool { server, .. } => server.stop().await,
            System::Launch { .. } => Ok(()),
            System::Contexts { browser, handler, .. } => {
                let mut browser = Arc::try_unwrap(browser).map_err(|_| anyhow::anyhow!("browser still shared"))?;
                browser.close().await?;
                browser.wait().await?;
                handler.abort();
                Ok(())
            }
        }
    }
}

/// A fresh browser context in `browser`, and a blank tab in it.
async fn context_tab(browser: &Browser) -> anyhow::Result<(BrowserContextId, chromiumoxide::Page)> {
    let context = browser.create_browser_context(CreateBrowserContextParams::default()).await?;
    let target = CreateTargetParams::builder()
        .url("about:blank")
        .browser_context_id(context.clone())
        .build()
        .map_err(anyhow::Error::msg)?;
    Ok((context, browser.new_page(target).await?))
}

/// The workload's middle, on a chromiumoxide page, as a Puppeteer script would write it.
async fn workload(tab: &chromiumoxide::Page, page: &str, lap: &mut Lap) -> anyhow::Result<()> {
    tab.goto(page).await?;
    lap.step();
    tab.find_element("#name").await?.click().await?.type_str("Ada").await?;
    lap.step();
    tab.find_element("#go").await?.click().await?;
    lap.step();
    let heading = tab.find_element("#h").await?.inner_text().await?;
    anyhow::ensure!(heading.as_deref() == Some("Hello, Ada"), "heading {heading:?}");
    lap.step();
    let png = tab.screenshot(ScreenshotParams::builder().format(CaptureScreenshotFormat::Png).build()).await?;
    check_png(&png)?;
    lap.step();
    Ok(())
}

/// Navigates `tab` to `page` and reads its title, a step each.
async fn title_of(tab: &chromiumoxide::Page, page: &str, lap: &mut Lap) -> anyhow::Result<String> {
    tab.goto(page).await?;
    lap.step();
    let title = tab.get_title().await?.unwrap_or_default();
    lap.step();
    Ok(title)
}

/// Every system's screenshot is a PNG of the same 1280x720 screen.
fn check_png(png: &[u8]) -> anyhow::Result<()> {
    anyhow::ensure!(png.len() > 24 && png.starts_with(b"\x89PNG"), "not a PNG");
    let side = |at: usize| u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]);
    anyhow::ensure!((side(16), side(20)) == (1280, 720), "a {}x{} screenshot, not 1280x720", side(16), side(20));
    Ok(())
}

async fn wait_warm(server: &InProcess, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.pool.status().warm < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The peak PSS, in KiB, of this process and of the processes naming `marker` on their
/// command line, sampled every 250 ms until [`Sampler::peaks`]. On a thread of its own: the
/// reads block, and on the runtime they would hold up a worker thread of the server and the
/// clients being measured.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

impl Sampler {
    fn start(marker: PathBuf) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let marker = marker.to_string_lossy().into_owned();
            let (mut own, mut chromium) = (0, 0);
            while !stopped.load(Ordering::Relaxed) {
                own = own.max(pss_kib("self").unwrap_or(0));
                chromium = chromium.max(chromium_pss_kib(&marker));
                std::thread::park_timeout(Duration::from_millis(250));
            }
            (own, chromium)
        });
        Sampler { stop, thread }
    }

    fn peaks(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        self.thread.join().expect("the PSS sampler panicked")
    }
}

fn chromium_pss_kib(marker: &str) -> u64 {
    processes_naming(marker).into_iter().filter_map(pss_kib).sum()
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// What one system measured.
struct Figures {
    sequential_p50: Duration,
    sequential_p95: Duration,
    steps_p50: Vec<Duration>,
    per_second: BTreeMap<usize, f64>,
    peak_own_kib: u64,
    peak_chromium_kib: u64,
    /// CPU time per session at 8 clients: this process's, and the whole host's.
    cpu_own_ms: f64,
    cpu_host_ms: f64,
    errors: usize,
}

async fn measure(name: &str, page: &str, sessions: usize) -> anyhow::Result<Figures> {
    let mut errors = 0;
    // Sequential: one client, SESSIONS sessions in a row.
    let system = System::start(name, 1).await?;
    let sampler = Sampler::start(system.marker());
    let mut totals = Vec::new();
    let mut steps: Vec<Vec<Duration>> = vec![Vec::new(); STEPS.len()];
    for n in 0..sessions as u64 {
        match system.session(page, n).await {
            Ok(times) => {
                totals.push(times.iter().sum::<Duration>());
                for (i, t) in times.iter().enumerate() {
                    steps[i].push(*t);
                }
            }
            Err(e) => {
                eprintln!("{name}: {e:#}");
                errors += 1;
            }
        }
    }
    let (mut own, mut chromium) = sampler.peaks();
    system.stop().await?;
    totals.sort();
    let steps_p50 = steps
        .iter_mut()
        .map(|s| {
            s.sort();
            quantile(s, 0.5)
        })
        .collect();

    // Throughput: SESSIONS sessions split over `clients` at once, not sampled: a PSS read
    // walks the page tables of every process read, CPU the workload would not have.
    let mut per_second = BTreeMap::new();
    let (mut cpu_own_ms, mut cpu_host_ms) = (0.0, 0.0);
    for clients in CLIENTS {
        let system = Arc::new(System::start(name, clients).await?);
        let cpu_before = cpu_ms();
        let started = Instant::now();
        errors += at_once(&system, clients, sessions, page).await?;
        per_second.insert(clients, sessions as f64 / started.elapsed().as_secs_f64());
        let cpu_after = cpu_ms();
        (cpu_own_ms, cpu_host_ms) =
            ((cpu_after.0 - cpu_before.0) / sessions as f64, (cpu_after.1 - cpu_before.1) / sessions as f64);
        stop_shared(system).await?;
    }
    // The peak memory at the most clients, in a pass of its own.
    let clients = CLIENTS[CLIENTS.len() - 1];
    let system = Arc::new(System::start(name, clients).await?);
    let sampler = Sampler::start(system.marker());
    errors += at_once(&system, clients, sessions, page).await?;
    let (o, c) = sampler.peaks();
    (own, chromium) = (own.max(o), chromium.max(c));
    stop_shared(system).await?;
    Ok(Figures {
        sequential_p50: quantile(&totals, 0.5),
        sequential_p95: quantile(&totals, 0.95),
        steps_p50,
        per_second,
        peak_own_kib: own,
        peak_chromium_kib: chromium,
        cpu_own_ms,
        cpu_host_ms,
        errors,
    })
}

/// Runs `sessions` sessions on `system` from `clients` clients at once; how many failed.
async fn at_once(system: &Arc<System>, clients: usize, sessions: usize, page: &str) -> anyhow::Result<usize> {
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..clients {
        let (system, next, page) = (system.clone(), next.clone(), page.to_string());
        workers.push(tokio::spawn(async move {
            let mut failed = 0;
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= sessions as u64 {
                    return failed;
                }
                if let Err(e) = system.session(&page, 1_000 + n).await {
                    eprintln!("{e:#}");
                    failed += 1;
                }
            }
        }));
    }
    let mut errors = 0;
    for w in workers {
        errors += w.await?;
    }
    Ok(errors)
}

async fn stop_shared(system: Arc<System>) -> anyhow::Result<()> {
    let system = Arc::try_unwrap(system).map_err(|_| anyhow::anyhow!("system still shared"))?;
    system.stop().await
}

/// The lifecycle workload, `sessions` in a row on one system started for one client (after
/// three not counted), `pause` between them; prints p50, p95 and p99 of each step and of the
/// whole.
async fn lifecycle(name: &str, page: &str, sessions: usize, pause: Duration) -> anyhow::Result<()> {
    let system = System::start(name, 1).await?;
    for n in 0..3 {
        system.lifecycle(page, n).await?;
    }
    let mut steps: Vec<Vec<Duration>> = vec![Vec::new(); LIFECYCLE.len() + 1];
    for n in 0..sessions as u64 {
        tokio::time::sleep(pause).await;
        let times = system.lifecycle(page, 10 + n).await?;
        steps[LIFECYCLE.len()].push(times.iter().sum());
        for (i, t) in times.into_iter().enumerate() {
            steps[i].push(t);
        }
    }
    system.stop().await?;
    print!("{name:<20}");
    for s in &mut steps {
        s.sort();
        print!("  {:>6.1} {:>6.1} {:>6.1}", ms(quantile(s, 0.5)), ms(quantile(s, 0.95)), ms(quantile(s, 0.99)));
    }
    println!();
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("lifecycle") {
        argv.next();
        let sessions: usize = argv.next().map(|s| s.parse()).transpose()?.unwrap_or(50).max(1);
        let systems = argv
            .next()
            .unwrap_or_else(|| "browserpool/process,browserpool/context,direct/context-tuned,direct/launch".into());
        let pause = Duration::from_millis(argv.next().map(|s| s.parse()).transpose()?.unwrap_or(0));
        let page = format!("{}/", serve_page(FORM).await?);
        println!("lifecycle: {sessions} sessions in a row per system, {pause:?} between; p50 p95 p99 in ms");
        print!("{:<20}", "system");
        for step in LIFECYCLE.iter().chain(&["whole"]) {
            print!("  {step:>20}");
        }
        println!();
        for name in systems.split(',') {
            lifecycle(name, &page, sessions, pause).await?;
        }
        return Ok(());
    }
    let sessions: usize = argv.next().map(|s| s.parse()).transpose()?.unwrap_or(16).max(1);
    let json_path = argv.next().unwrap_or_else(|| "compare.json".into());
    let page = format!("{}/", serve_page(FORM).await?);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("compare: {sessions} sessions per measurement, {cores} cores");

    let all = ["browserpool/process", "browserpool/context", "direct/launch", "direct/context", "direct/context-tuned"];
    let systems: Vec<&str> = match argv.next() {
        Some(list) => list
            .split(',')
            .map(|s| all.iter().find(|a| **a == s).copied().context(format!("no system {s}; the systems: {all:?}")))
            .collect::<anyhow::Result<_>>()?,
        None => all.to_vec(),
    };
    let mut results = Vec::new();
    for name in systems {
        eprintln!("measuring {name}...");
        results.push((name, measure(name, &page, sessions).await?));
    }

    println!();
    println!(
        "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>9} {:>9} {:>6}",
        "system",
        "seq_p50",
        "seq_p95",
        "1c_s/s",
        "4c_s/s",
        "8c_s/s",
        "own_mib",
        "chrome_mib",
        "own_cpu",
        "host_cpu",
        "errors"
    );
    for (name, f) in &results {
        println!(
            "{:<20} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>10.1} {:>10.1} {:>9.1} {:>9.1} {:>6}",
            name,
            ms(f.sequential_p50),
            ms(f.sequential_p95),
            f.per_second[&1],
            f.per_second[&4],
            f.per_second[&8],
            f.peak_own_kib as f64 / 1024.0,
            f.peak_chromium_kib as f64 / 1024.0,
            f.cpu_own_ms,
            f.cpu_host_ms,
            f.errors
        );
    }
    println!();
    print!("{:<20}", "step p50 (ms)");
    for step in STEPS {
        print!(" {step:>10}");
    }
    println!();
    for (name, f) in &results {
        print!("{name:<20}");
        for t in &f.steps_p50 {
            print!(" {:>10.1}", ms(*t));
        }
        println!();
    }

    let json = json!({
        "sessions": sessions,
        "cores": cores,
        "systems": results.iter().map(|(name, f)| json!({
            "system": name,
            "sequential_p50_ms": ms(f.sequential_p50),
            "sequential_p95_ms": ms(f.sequential_p95),
            "sessions_per_second": f.per_second.iter().map(|(c, v)| (c.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "step_p50_ms": STEPS.iter().zip(&f.steps_p50).map(|(s, t)| (s.to_string(), json!(ms(*t)))).collect::<serde_json::Map<_, _>>(),
            "peak_own_pss_mib": f.peak_own_kib as f64 / 1024.0,
            "peak_chromium_pss_mib": f.peak_chromium_kib as f64 / 1024.0,
            "cpu_ms_per_session_8_clients": { "own": f.cpu_own_ms, "host": f.cpu_host_ms },
            "errors": f.errors,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)?)?;
    println!("\nwrote {json_path}");
    Ok(())
}
