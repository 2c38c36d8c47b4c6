//! What the example programs share: a server in-process on 127.0.0.1:0 with a fresh data dir,
//! and a page served on loopback. Each example compiles this module on its own and uses part
//! of it.
#![allow(dead_code)]

use browserpool_server::config::ServeArgs;
use browserpool_server::sessions::Sessions;

/// A server running in this process until [`InProcess::stop`].
pub struct InProcess {
    pub endpoint: String,
    pub token: String,
    pub sessions: Sessions,
    /// The Chromium pool under the sessions.
    pub pool: browserpool_pool::Pool,
    /// Its data dir (deleted on drop).
    pub dir: tempfile::TempDir,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl InProcess {
    /// Binds and serves with `warm` workers kept warm and at most `max_workers`.
    pub async fn start(warm: usize, max_workers: usize) -> anyhow::Result<InProcess> {
        let dir = tempfile::tempdir()?;
        let mut args = ServeArgs::for_tests(dir.path());
        args.warm = warm;
        args.max_workers = max_workers;
        InProcess::serve(dir, args).await
    }

    /// Another replica of `first`: its database and signing key, a data dir of its own.
    pub async fn replica_of(first: &InProcess, warm: usize, max_workers: usize) -> anyhow::Result<InProcess> {
        let dir = tempfile::tempdir()?;
        for key in std::fs::read_dir(first.dir.path())?.flatten() {
            if key.file_name().to_string_lossy().starts_with("jwt-") {
                std::fs::copy(key.path(), dir.path().join(key.file_name()))?;
            }
        }
        let mut args = ServeArgs::for_tests(dir.path());
        args.warm = warm;
        args.max_workers = max_workers;
        args.store.database_url = Some(format!("sqlite://{}", first.dir.path().join("browserpool.db").display()));
        InProcess::serve(dir, args).await
    }

    async fn serve(dir: tempfile::TempDir, args: ServeArgs) -> anyhow::Result<InProcess> {
        let bound = browserpool_server::bind(args).await?;
        let endpoint = format!("http://{}", bound.grpc_addr);
        let token = std::fs::read_to_string(&bound.admin_token_path)?;
        let sessions = bound.sessions().clone();
        let pool = bound.pool().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bound.serve(async move {
            let _ = stopped.await;
        }));
        Ok(InProcess { endpoint, token, sessions, pool, dir, stop, task })
    }

    /// Stops the server and waits until it has (workers killed, profiles removed).
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop_keeping_dir().await.map(drop)
    }

    /// [`InProcess::stop`], handing back the data dir for a look at what is left in it.
    pub async fn stop_keeping_dir(self) -> anyhow::Result<tempfile::TempDir> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(self.dir)
    }
}

/// Serves `html` at `/` on 127.0.0.1:0 until the program ends; returns `http://host:port`.
pub async fn serve_page(html: &'static str) -> anyhow::Result<String> {
    let site = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", site.local_addr()?);
    let app = axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(html) }));
    tokio::spawn(async move { axum::serve(site, app).await });
    Ok(base)
}

/// CPU time used so far, in ms: this process's (its threads, not its children) and the whole
/// host's (every process, so Chromium's renderers are counted even after they exit).
pub fn cpu_ms() -> (f64, f64) {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    let own = tv(usage.ru_utime) + tv(usage.ru_stime);
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    let busy: f64 = ticks.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum();
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (own, busy * 1000.0 / hz)
}
