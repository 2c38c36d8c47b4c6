//! What the example programs share: a server in-process on 127.0.0.1:0 with a fresh data dir,
//! and a page served on loopback. Each example compiles this module on its own and uses part
//! of it.
#![allow(dead_code)]

use browserpool_server::config::ServeArgs;
use browserpool_server::sessions::Sessions;

/// A server running in this process until [`InProcess::stop`].
pub struct InProcess {
    pub endpoint: String,
    /// The HTTP listener, `host:port`.
    pub http: String,
    pub token: String,
    pub sessions: Sessions,
    /// The Chromium pool under the sessions.
    pub pool: browserpool_pool::Pool,
    /// Its data dir (deleted on drop).
    pub dir: tempfile::TempDir,
    /// Its workers' profiles dir, as the server chose it (`--profiles-in`, else the temp dir):
    /// every Chromium process it starts names it on its command line.
    pub profiles: std::path::PathBuf,
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
        // As the server reads it: where the workers' profiles go (`/dev/shm` for a tmpfs).
        args.profiles_in = std::env::var_os("BROWSERPOOL_PROFILES_IN").map(Into::into);
        InProcess::serve(dir, args).await
    }

    /// Another replica of `first`: its database and signing key, a data dir of its own.
    pub async fn replica_of(first: &InProcess, warm: usize, max_workers: usize) -> anyhow::Result<InProcess> {
        let dir = tempfile::tempdir()?;
        copy_signing_keys(first.dir.path(), dir.path())?;
        let mut args = ServeArgs::for_tests(dir.path());
        args.warm = warm;
        args.max_workers = max_workers;
        args.store.database_url = Some(format!("sqlite://{}", first.dir.path().join("browserpool.db").display()));
        InProcess::serve(dir, args).await
    }

    async fn serve(dir: tempfile::TempDir, args: ServeArgs) -> anyhow::Result<InProcess> {
        use browserpool_server::server::{profiles_dir, profiles_dir_in};
        let profiles_in = args.profiles_in.clone();
        let bound = browserpool_server::bind(args).await?;
        // Once bound: the server has made `--profiles-in` if it was missing.
        let profiles = match profiles_in {
            Some(parent) => profiles_dir_in(&parent.canonicalize()?, dir.path()),
            None => profiles_dir(dir.path()),
        };
        let endpoint = format!("http://{}", bound.grpc_addr);
        let http = bound.http_addr.to_string();
        let token = std::fs::read_to_string(&bound.admin_token_path)?;
        let sessions = bound.sessions().clone();
        let pool = bound.pool().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bound.serve(async move {
            let _ = stopped.await;
        }));
        Ok(InProcess { endpoint, http, token, sessions, pool, dir, profiles, stop, task })
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

/// Puts the `default` tenant (the one the in-process server's token names) in context
/// isolation: its sessions are browser contexts in a Chromium only its sessions share.
pub async fn use_context_isolation(client: &browserpool_client::Client) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use browserpool_client::pb;
    let mut admin = client.admin();
    let tenants = admin.list_tenants(pb::ListTenantsRequest {}).await?.into_inner();
    let mut default = tenants.tenants.into_iter().find(|t| t.id == "default").context("no default tenant")?;
    default.isolation = pb::Isolation::Context as i32;
    admin.put_tenant(pb::PutTenantRequest { tenant: Some(default) }).await?;
    Ok(())
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

/// The `q` quantile (0..=1) of `samples`, nearest rank; zero (the default) when there are
/// none.
pub fn quantile<T: Ord + Copy + Default>(samples: &[T], q: f64) -> T {
    let mut sorted = samples.to_vec();
    sorted.sort();
    match sorted.len() {
        0 => T::default(),
        n => sorted[((n as f64 - 1.0) * q).round() as usize],
    }
}

/// Copies the signing keys of data dir `from` into `to`: replicas behind one Service share
/// them (and their database).
pub fn copy_signing_keys(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    for key in std::fs::read_dir(from)?.flatten() {
        if key.file_name().to_string_lossy().starts_with("jwt-") {
            std::fs::copy(key.path(), to.join(key.file_name()))?;
        }
    }
    Ok(())
}

/// Milliseconds, as the benches print them.
pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A `browserpool serve` process of its own: the binary next to this program's `examples/`
/// directory (`cargo build --release -p browserpool-server --bin browserpool` first), on
/// 127.0.0.1:0 for gRPC and HTTP (the addresses read from its `serving` log line), with data
/// dir `dir`. Dropped while it runs, it gets SIGTERM and is waited for.
pub struct ServerProcess {
    pub child: std::process::Child,
    pub dir: tempfile::TempDir,
    /// The gRPC and HTTP listeners, `host:port`.
    pub grpc: String,
    pub http: String,
    /// The admin token of the `default` tenant.
    pub token: String,
    /// `--database-url`, when one was given (else SQLite in `dir`).
    pub database_url: Option<String>,
}

impl ServerProcess {
    /// `browserpool serve` with `args` after the listeners and the data dir.
    pub fn start(dir: tempfile::TempDir, database_url: Option<&str>, args: &[&str]) -> anyhow::Result<ServerProcess> {
        use std::io::{BufRead, BufReader};
        let mut command = std::process::Command::new(browserpool_binary()?);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path());
        if let Some(url) = database_url {
            command.args(["--database-url", url]);
        }
        let mut child = command
            .args(args)
            .env("BROWSERPOOL_LOG", "warn,browserpool_server::server=info")
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let serving = loop {
            match lines.next() {
                Some(line) if line.as_ref().is_ok_and(|l| l.contains("serving")) => break line?,
                Some(_) => continue,
                None => anyhow::bail!("the server exited before serving"),
            }
        };
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let field = |name: &str| {
            serving
                .split(&format!("{name}="))
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or("")
                .to_string()
        };
        let token = std::fs::read_to_string(dir.path().join("admin.token"))?.trim().to_string();
        Ok(ServerProcess {
            grpc: field("grpc_addr"),
            http: field("http_addr"),
            child,
            dir,
            token,
            database_url: database_url.map(str::to_string),
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub async fn client(&self) -> anyhow::Result<browserpool_client::Client> {
        Ok(browserpool_client::Client::connect(self.endpoint(), &self.token).await?)
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits (at most a minute, then SIGKILL) for the exit: its code and how long it took.
    pub fn wait(&mut self) -> (Option<i32>, std::time::Duration) {
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(60) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (status.code(), started.elapsed());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.child.kill();
        (None, started.elapsed())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGTERM);
            self.wait();
        }
    }
}

/// `target/<profile>/browserpool`, next to this program's `examples/` directory.
pub fn browserpool_binary() -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe.parent().and_then(std::path::Path::parent).map(|d| d.join("browserpool"));
    match bin {
        Some(bin) if bin.exists() => Ok(bin),
        _ => anyhow::bail!(
            "no browserpool binary next to {}: cargo build --release -p browserpool-server --bin browserpool",
            exe.display()
        ),
    }
}

/// The proportional set size of process `pid` (a number, or `self`) alone, its threads but not
/// its children, in KiB.
pub fn pss_kib(pid: impl std::fmt::Display) -> Option<u64> {
    rollup_kib(pid, "Pss:")
}

/// Of [`pss_kib`], the anonymous part (heap, stacks), in KiB.
pub fn anon_pss_kib(pid: impl std::fmt::Display) -> Option<u64> {
    rollup_kib(pid, "Pss_Anon:")
}

fn rollup_kib(pid: impl std::fmt::Display, field: &str) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Of [`pss_kib`], the part that is the process's own executable mapped (its code and
/// read-only data paged in), in KiB: what it costs to have run code, not what it keeps.
pub fn exe_pss_kib(pid: impl std::fmt::Display) -> Option<u64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_str()?;
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let (mut ours, mut total) = (false, 0);
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("Pss:") if ours => total += fields.next()?.parse::<u64>().ok()?,
            // A mapping's header: `start-end perms offset dev inode [path]`.
            Some(range) if range.contains('-') && !range.ends_with(':') => ours = fields.nth(4) == Some(exe),
            _ => {}
        }
    }
    Some(total)
}

/// The live processes (not zombies) whose command line names `needle`, e.g. a profiles dir.
pub fn processes_naming(needle: &str) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path())))
        .filter(|(_, path)| {
            let live = std::fs::read_to_string(path.join("stat"))
                .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| !r.trim_start().starts_with('Z')));
            live && std::fs::read(path.join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .map(|(pid, _)| pid)
        .collect()
}
