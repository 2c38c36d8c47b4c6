//! Test server and fixture site.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::response::Html;
use axum::routing::get;
use browserpool_client::{pb, Client};
use browserpool_server::config::ServeArgs;
use tokio::sync::oneshot;

/// The database of a new test server: `None` (the embedded SQLite file in its data dir), or,
/// when `BROWSERPOOL_TEST_POSTGRES` names a PostgreSQL server (the README test command sets it
/// for the suite's PostgreSQL half), a fresh empty database there.
pub async fn test_database() -> Option<String> {
    let admin = std::env::var("BROWSERPOOL_TEST_POSTGRES").ok().filter(|u| !u.is_empty())?;
    Some(browserpool_server::store::scratch_postgres(&admin).await.expect("create a scratch PostgreSQL database"))
}

/// A direct connection to a test server's database, behind its back (tamper tests).
pub enum Db {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Db {
    pub async fn connect(url: &str) -> Db {
        if url.starts_with("sqlite:") {
            Db::Sqlite(sqlx::SqlitePool::connect(url).await.unwrap())
        } else {
            Db::Postgres(sqlx::PgPool::connect(url).await.unwrap())
        }
    }

    /// Runs the statement of this backend (`sqlite`, `postgres`): DDL differs between them.
    pub async fn exec(&self, sqlite: &str, postgres: &str) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Db::Sqlite(pool) => sqlx::query(sqlite).execute(pool).await?.rows_affected(),
            Db::Postgres(pool) => sqlx::query(postgres).execute(pool).await?.rows_affected(),
        })
    }

    pub async fn close(self) {
        match self {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
    }
}

/// A browserpool server on 127.0.0.1:0 with its own data dir and a small pool.
pub struct TestServer {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub data_dir: tempfile::TempDir,
    /// Its database (see [`test_database`]).
    pub database_url: String,
    pub admin_token: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    /// One warm worker, at most two: keeps concurrent Chromium processes bounded.
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    pub async fn start_with(tune: impl FnOnce(&mut ServeArgs)) -> TestServer {
        // Warnings only (or RUST_LOG), through the test writer so passing tests stay quiet; a CDP
        // message chromiumoxide cannot parse is shown whole, so a failure it causes can be read.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,chromiumoxide::conn::raw_ws::parse_errors=debug")
            }))
            .with_test_writer()
            .try_init();
        let data_dir = tempfile::tempdir().unwrap();
        let mut args = ServeArgs::for_tests(data_dir.path());
        args.warm = 1;
        args.max_workers = 2;
        args.store.database_url = test_database().await;
        tune(&mut args);
        let database_url = args.store.database_url();
        let bound = browserpool_server::bind(args).await.expect("server binds");
        let (grpc, http) = (bound.grpc_addr, bound.http_addr);
        let admin_token = std::fs::read_to_string(&bound.admin_token_path).unwrap().trim().to_string();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(bound.serve(async move {
            let _ = rx.await;
        }));
        TestServer { grpc, http, data_dir, database_url, admin_token, stop: Some(tx), task: Some(task) }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// A client with the admin token of the `default` tenant.
    pub async fn admin(&self) -> Client {
        self.client(&self.admin_token.clone()).await
    }

    pub async fn client(&self, token: &str) -> Client {
        Client::connect(self.endpoint(), token).await.expect("connect")
    }

    /// Mints a token through `Admin/IssueToken`.
    pub async fn token(&self, tenant: &str, subject: &str, scopes: &[&str]) -> String {
        let req = pb::IssueTokenRequest {
            tenant: tenant.into(),
            subject: subject.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            ttl_s: 600,
        };
        self.admin().await.admin().issue_token(req).await.expect("issue token").into_inner().token
    }

    pub fn profiles_dir(&self) -> PathBuf {
        browserpool_server::server::profiles_dir(self.data_dir.path())
    }

    /// Stops the server and checks it left no profile behind.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("server stops within a minute")
                .expect("server task")
                .expect("server exits cleanly");
        }
        // Each entry with what it holds one level down (whose files directory it was).
        let list = |dir: &std::path::Path| -> Vec<PathBuf> {
            std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
        };
        let left: Vec<_> = list(&self.profiles_dir()).into_iter().map(|p| (list(&p), p)).collect();
        assert!(left.is_empty(), "profiles left behind: {left:?}");
        assert!(!self.profiles_dir().exists(), "the profiles dir is removed with its last profile");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // A failed test still stops its server; workers die with their leases.
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// `browserpool serve` on loopback (port 0, no warm worker) in a new data dir with `flags`
/// and `env`, expected to stop at once (within 30 s): its exit status, its stderr, and the
/// data dir.
pub async fn serve_stops<S: AsRef<std::ffi::OsStr>>(
    flags: &[S],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_browserpool"))
            .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--warm", "0"])
            .arg("--data-dir")
            .arg(data.path())
            .args(flags)
            .envs(env.iter().copied())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the server stops at once")
    .unwrap();
    (output.status, String::from_utf8_lossy(&output.stderr).into_owned(), data)
}

/// The real `browserpool` binary on 127.0.0.1:0 with its own data dir, as a user runs it.
pub struct BinaryServer {
    pub dir: tempfile::TempDir,
    pub database_url: String,
    pub grpc: String,
    pub http: String,
    pub token: String,
    child: std::process::Child,
    log: std::sync::mpsc::Receiver<String>,
    /// What it logged up to `serving`.
    pub startup_log: Vec<String>,
    exited: bool,
    /// Flags given after the defaults (kept for [`BinaryServer::restart`]).
    extra: Vec<String>,
    /// Environment variables it was started with (kept for restarts and replicas).
    env: Vec<(String, String)>,
}

/// Returns once the kernel says every thread of `pid` is stopped (state `T`), so none of them
/// can still be answering (at most 5 s).
pub async fn until_stopped(pid: u32) {
    let stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| {
            tasks.flatten().all(|t| {
                std::fs::read_to_string(t.path().join("stat"))
                    .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('T')))
            })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stopped() {
        assert!(Instant::now() < deadline, "process {pid} did not stop within 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl BinaryServer {
    /// A server on its own database (see [`test_database`]).
    pub async fn spawn() -> BinaryServer {
        let dir = tempfile::tempdir().unwrap();
        let database_url = test_database()
            .await
            .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("browserpool.db").display()));
        BinaryServer::spawn_in(dir, database_url, Vec::new())
    }

    /// [`BinaryServer::spawn`] with more flags.
    pub async fn spawn_with(extra: &[&str]) -> BinaryServer {
        let dir = tempfile::tempdir().unwrap();
        let database_url = test_database()
            .await
            .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("browserpool.db").display()));
        BinaryServer::spawn_in(dir, database_url, extra.iter().map(|s| s.to_string()).collect())
    }

    /// SIGKILL of the server alone, as an OOM kill would (its Chromiums die with it: the
    /// kernel sends them their parent-death signal).
    pub fn kill_server_only(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.exited = true;
    }

    /// A new server on the same data dir, database and flags (after a kill).
    pub fn restart(mut self) -> BinaryServer {
        let extra = std::mem::take(&mut self.extra);
        self.restart_as(extra)
    }

    /// A new server on the same data dir and database with other flags (after an exit).
    pub fn restart_with(self, extra: &[&str]) -> BinaryServer {
        self.restart_as(extra.iter().map(|s| s.to_string()).collect())
    }

    fn restart_as(mut self, extra: Vec<String>) -> BinaryServer {
        assert!(self.exited, "restart after the server exited");
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        let env = std::mem::take(&mut self.env);
        BinaryServer::spawn_full(dir, self.database_url.clone(), extra, None, env)
    }

    /// A second replica of `first`: the same database, signing key and `secrets.key` (as the
    /// chart's keys Secret gives every replica), its own data dir.
    pub fn replica_of(first: &BinaryServer) -> BinaryServer {
        BinaryServer::replica_of_with(first, &[])
    }

    /// [`BinaryServer::replica_of`] with more flags.
    pub fn replica_of_with(first: &BinaryServer, extra: &[&str]) -> BinaryServer {
        let dir = tempfile::tempdir().unwrap();
        for key in std::fs::read_dir(first.dir.path()).unwrap().flatten() {
            let name = key.file_name().to_string_lossy().into_owned();
            if name.starts_with("jwt-") || name == "secrets.key" {
                std::fs::copy(key.path(), dir.path().join(key.file_name())).unwrap();
            }
        }
        let extra = extra.iter().map(|s| s.to_string()).collect();
        BinaryServer::spawn_full(dir, first.database_url.clone(), extra, None, first.env.clone())
    }

    /// A server in `dir` on the database at `database_url`, with `extra` flags (`--warm 1` and
    /// `--max-workers 2` unless they say otherwise).
    pub fn spawn_in(dir: tempfile::TempDir, database_url: String, extra: Vec<String>) -> BinaryServer {
        BinaryServer::spawn_full(dir, database_url, extra, None, Vec::new())
    }

    /// [`BinaryServer::spawn_with`] with environment variables (kept for its replicas).
    pub async fn spawn_env(extra: &[&str], env: &[(&str, &str)]) -> BinaryServer {
        let dir = tempfile::tempdir().unwrap();
        let database_url = test_database()
            .await
            .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("browserpool.db").display()));
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        BinaryServer::spawn_full(dir, database_url, extra, None, env)
    }

    /// A server that is not root: it runs as `uid` (and gid; no groups, no passwd entry) on a
    /// SQLite data dir of its own, its temp dir in it, with `extra` flags.
    pub fn spawn_as(uid: u32, extra: &[&str]) -> BinaryServer {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        for path in [dir.path().to_path_buf(), dir.path().join("tmp")] {
            std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
        }
        // The suite's temp dir above it is passable, not listable (0711).
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let database_url = format!("sqlite://{}", dir.path().join("browserpool.db").display());
        // The host-wide lock dir is root's: its own, so `extra` must give a port range of its own.
        let locks = dir.path().join("tmp").join("locks").display().to_string();
        let extra = ["--lock-dir", &locks].into_iter().chain(extra.iter().copied()).map(String::from).collect();
        BinaryServer::spawn_full(dir, database_url, extra, Some(uid), Vec::new())
    }

    fn spawn_full(
        dir: tempfile::TempDir,
        database_url: String,
        extra: Vec<String>,
        uid: Option<u32>,
        env: Vec<(String, String)>,
    ) -> BinaryServer {
        use std::io::{BufRead, BufReader};
        use std::os::unix::process::CommandExt;
        let small: Vec<&str> = [("--warm", "1"), ("--max-workers", "2")]
            .into_iter()
            .filter(|(flag, _)| !extra.iter().any(|e| e == flag))
            .flat_map(|(flag, value)| [flag, value])
            .collect();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_browserpool"));
        if let Some(uid) = uid {
            command.uid(uid).gid(uid).env("TMPDIR", dir.path().join("tmp"));
        }
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .args(&small)
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--database-url")
            .arg(&database_url)
            .args(&extra)
            .env("BROWSERPOOL_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Read the bound addresses from the log line `serving grpc_addr=... http_addr=...`.
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut startup_log = Vec::new();
        let (grpc, http) = loop {
            let line = log.recv_timeout(deadline - std::time::Instant::now()).expect("server logs `serving`");
            assert!(!line.contains("eyJ"), "a token leaked into the log: {line}");
            startup_log.push(line.clone());
            if line.contains("serving") {
                let field = |name: &str| {
                    line.split(&format!("{name}=")).nth(1).unwrap().split_whitespace().next().unwrap().to_string()
                };
                break (field("grpc_addr"), field("http_addr"));
            }
        };
        let token = std::fs::read_to_string(dir.path().join("admin.token")).unwrap().trim().to_string();
        BinaryServer { dir, database_url, grpc, http, token, child, log, startup_log, exited: false, extra, env }
    }

    pub async fn client(&self) -> Client {
        Client::connect(format!("http://{}", self.grpc), &self.token).await.unwrap()
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash or an OOM kill would: no cleanup runs. Its Chromium workers (found
    /// by their profile path) are killed too, and their profiles deleted (the server that would
    /// have reaped them on this data dir never starts), so the test leaves nothing behind.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.exited = true;
        let profiles = browserpool_server::server::profiles_dir(self.dir.path());
        let _ = std::process::Command::new("pkill").arg("-9").arg("-f").arg(profiles.as_os_str()).status();
        let _ = std::fs::remove_dir_all(&profiles);
    }

    /// SIGTERM, then wait (at most a minute) for the exit; returns it with the log lines.
    pub fn terminate(&mut self) -> (std::process::ExitStatus, Vec<String>) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.terminate_wait()
    }

    /// Waits (at most a minute) for the exit of a server already sent SIGTERM; returns it
    /// with the log lines.
    pub fn terminate_wait(&mut self) -> (std::process::ExitStatus, Vec<String>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("server did not exit within a minute");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.exited = true;
        (status, self.log.try_iter().collect())
    }
}

impl Drop for BinaryServer {
    fn drop(&mut self) {
        if !self.exited {
            // SAFETY: signalling our own child, not yet reaped; a clean stop kills its workers.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}

/// The page the browser tests drive: a form that greets by name.
const FORM: &str = r#"<!doctype html>
<html><head><title>Greeter</title></head>
<body>
  <h1 id="greeting">Hello, nobody</h1>
  <input id="name" value="">
  <button id="go" onclick="document.getElementById('greeting').textContent = 'Hello, ' + document.getElementById('name').value">Greet</button>
  <a id="about" href="/about" data-kind="link">about</a>
</body></html>"#;

const DIALOGS: &str = r#"<!doctype html><title>Dialogs</title>
<p id="out">none</p>
<button id="confirm" onclick="window.confirms = (window.confirms || 0) + 1; document.getElementById('out').textContent = 'answer=' + confirm('Proceed?')">confirm</button>
<button id="prompt" onclick="document.getElementById('out').textContent = 'name=' + prompt('Your name?', 'anon')">prompt</button>
<button id="alert" onclick="alert('hi there'); document.getElementById('out').textContent = 'alerted'">alert</button>"#;

const LEAVE: &str = r#"<!doctype html><title>Leave</title>
<script>window.addEventListener('beforeunload', e => { e.preventDefault(); e.returnValue = 'sure?'; });</script>
<button id="touch" onclick="this.textContent = 'touched'">touch</button>"#;

const POPUP: &str = r#"<!doctype html><title>Popup</title>
<a id="blank" href="/about" target="_blank">open about</a>
<button id="open" onclick="window.open('/second')">window.open</button>"#;

const WIDGETS: &str = r#"<!doctype html><title>Widgets</title>
<style>body { margin: 0 } #tall { height: 3000px; background: linear-gradient(red, blue) } #box { width: 120px; height: 80px; background: green }</style>
<div id="box" onmouseover="this.dataset.hovered = 'yes'" data-kind="square"></div>
<input id="field" onfocus="this.dataset.focused = 'yes'">
<select id="color"><option value="r">Red</option><option value="g">Green</option></select>
<select id="many" multiple><option value="a">A</option><option value="b">B</option><option value="c">C</option></select>
<div id="tall"></div><p id="bottom">bottom</p>
<script>console.log('widgets ready', 42)</script>"#;

const PERMISSIONS: &str = r#"<!doctype html><title>Permissions</title><p id="out">none</p>
<button id="notify" onclick="Notification.requestPermission().then(p => document.getElementById('out').textContent = 'perm=' + p)">notify</button>"#;

/// Sets `session=abc123` (session cookie) and `user=alice` (HttpOnly, Lax, one hour), and a
/// localStorage key from the page.
async fn set_cookies() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::response::AppendHeaders([
            ("set-cookie", "session=abc123; Path=/"),
            ("set-cookie", "user=alice; Path=/; HttpOnly; SameSite=Lax; Max-Age=3600"),
        ]),
        Html("<title>Signed in</title><script>localStorage.setItem('k', 'v')</script><p>signed in</p>"),
    )
        .into_response()
}

/// Tests that measure time (deadlines, the stop's grace) hold this for reading, and the one that
/// busies every core holds it for writing, so they never run side by side.
pub static TIMING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

static PIXEL_HITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many times any fixture site served `/pixel` (tests compare before and after).
pub fn pixel_hits() -> usize {
    PIXEL_HITS.load(std::sync::atomic::Ordering::SeqCst)
}

async fn pixel() -> &'static str {
    PIXEL_HITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    ""
}

/// Echoes the request's Cookie header.
async fn echo_cookies(headers: axum::http::HeaderMap) -> Html<String> {
    let cookies = headers.get("cookie").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    Html(format!("<title>Echo</title><pre id=cookies>{cookies}</pre>"))
}

/// 401 with a Basic challenge unless the request carries alice:secret.
async fn auth(headers: axum::http::HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse;
    // "alice:secret" in base64.
    let ok = headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Basic YWxpY2U6c2VjcmV0");
    if ok {
        Html("<title>Welcome</title><h1>welcome alice</h1>").into_response()
    } else {
        (
            axum::http::StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Basic realm=\"fixture\"")],
            Html("<h1>denied</h1>"),
        )
            .into_response()
    }
}

/// Serves the fixture pages on 127.0.0.1:0; returns the base URL. Lives until the test ends.
pub async fn fixture_site() -> String {
    let app = axum::Router::new()
        .route("/", get(|| async { Html(FORM) }))
        .route("/about", get(|| async { Html("<title>About</title><p>about page</p>") }))
        .route("/second", get(|| async { Html("<title>Second</title><p>second page</p>") }))
        .route("/dialogs", get(|| async { Html(DIALOGS) }))
        .route(
            "/alert-on-load",
            get(|| async { Html("<title>Alerting</title><script>alert('loaded!')</script><p>after</p>") }),
        )
        .route("/leave", get(|| async { Html(LEAVE) }))
        .route("/popup", get(|| async { Html(POPUP) }))
        .route("/widgets", get(|| async { Html(WIDGETS) }))
        .route("/auth", get(auth))
        .route("/permissions", get(|| async { Html(PERMISSIONS) }))
        .route("/pixel", get(pixel))
        .route("/set-cookies", get(set_cookies))
        .route("/echo-cookies", get(echo_cookies))
        .route(
            "/missing",
            get(|| async { (axum::http::StatusCode::NOT_FOUND, Html("<title>Not here</title><p>no such page</p>")) }),
        )
        .route("/moved", get(|| async { axum::response::Redirect::temporary("/about") }))
        .route(
            "/broken",
            get(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, Html("<title>Broken</title><p>oops</p>")) }),
        );
    let addr = serve_loopback(app).await;
    format!("http://{addr}")
}

/// Serves `app` on 127.0.0.1:0 for as long as the test runs; its address.
pub async fn serve_loopback(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// Width and height from a PNG's IHDR.
pub fn png_size(data: &[u8]) -> (u32, u32) {
    assert_eq!(&data[..8], b"\x89PNG\r\n\x1a\n", "png signature");
    (u32::from_be_bytes(data[16..20].try_into().unwrap()), u32::from_be_bytes(data[20..24].try_into().unwrap()))
}

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// Polls `f` until it returns `Some`, and returns that; panics naming `what` when `within`
/// passes first. Tests wait on the state they need with this, never on a fixed sleep: a sleep
/// is too short on a loaded machine and needlessly long on an idle one.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = f().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Waits for `/readyz` to answer 200, at most `within` after `cleared` (when a fault was
/// taken away); the panic says what it answered last.
pub async fn ready_again(http: &str, cleared: Instant, within: Duration) {
    let url = format!("http://{http}/readyz");
    loop {
        let left = within.saturating_sub(cleared.elapsed());
        let answer = tokio::time::timeout(left, crate::lifecycle::http_get(&url)).await.unwrap_or_default();
        if answer.starts_with("HTTP/1.1 200 ") {
            return;
        }
        assert!(
            cleared.elapsed() < within,
            "still not ready {:?} after the fault cleared: {answer:?}",
            cleared.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Says why a test could not run: on stderr, and as a `SKIP: <test>: <why>` line in the file
/// `BROWSERPOOL_TEST_SKIP_LOG` names (scripts/test.sh sets it, and its summary lists every
/// such line), so a test that cannot run here never passes silently.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("SKIP: {test}: {why}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("BROWSERPOOL_TEST_SKIP_LOG").filter(|p| !p.is_empty()) {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
        if let Ok(mut file) = file {
            let _ = writeln!(file, "{line}");
        }
    }
}

/// Wall-clock milliseconds since the epoch, the resolution of the server's deadlines.
pub fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}

/// Waits until the wall clock has moved to a later millisecond than `since_ms`, so a deadline
/// the server computes from "now" must differ from one it computed at `since_ms`.
pub async fn clock_passes(since_ms: u128) {
    eventually("the clock to tick past a millisecond", Duration::from_secs(1), || async {
        (now_ms() > since_ms).then_some(())
    })
    .await
}

/// How many requests of `tenant` wait in its queue, as PoolStatus reports.
pub async fn queued(client: &Client, tenant: &str) -> u32 {
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    status.tenants.iter().find(|t| t.tenant == tenant).map(|t| t.queued).unwrap_or(0)
}

/// The gRPC code of a refused call.
pub fn status_code(e: browserpool_client::Error) -> tonic::Code {
    match e {
        browserpool_client::Error::Status(s) => s.code(),
        other => panic!("not a status: {other}"),
    }
}

/// Runs one action; the RPC itself must succeed.
pub async fn act(client: &Client, id: &str, a: pb::Action) -> pb::ActionResult {
    client.act(id, a).await.unwrap()
}

/// Asserts an action succeeded and returns its JSON value.
pub fn ok(r: &pb::ActionResult) -> serde_json::Value {
    assert!(r.ok, "action {} failed: {:?}", r.action, r.error);
    r.value.as_ref().map(browserpool_client::to_json).unwrap_or_default()
}

/// The error code of a failed action.
pub fn err_code(r: &pb::ActionResult) -> pb::ErrorCode {
    assert!(!r.ok, "action {} unexpectedly succeeded", r.action);
    pb::ErrorCode::try_from(r.error.as_ref().expect("failed result has an error").code).unwrap()
}

/// Pids of a process group's members whose command line contains `needle`.
pub fn group_members(pgid: i32, needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        // SAFETY: getpgid has no preconditions; a vanished pid answers -1.
        if unsafe { libc::getpgid(pid) } != pgid {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// A TCP relay in front of a database, which the test can take down: every connection through
/// it is cut, and new ones are accepted but never answered (a database host gone from the
/// network: each attempt waits for its client's timeout), until it is brought up again. Servers given [`DbGate::url`] reach the database only through
/// it, so a test can stop "the database" without touching the one other tests share. A trap
/// ([`DbGate::cut_at_commit`]) takes it down at the one moment whose outcome the client cannot
/// know: a COMMIT on its way.
pub struct DbGate {
    port: u16,
    up: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    trap: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl DbGate {
    /// A gate in front of the database at `url` (a `postgres://` URL).
    pub async fn open(url: &str) -> DbGate {
        let parsed = url::Url::parse(url).unwrap();
        let upstream = format!("{}:{}", parsed.host_str().unwrap(), parsed.port().unwrap_or(5432));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = std::sync::Arc::new(tokio::sync::watch::channel(true).0);
        let trap = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (gate, traps) = (up.clone(), trap.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !*gate.borrow() {
                    let mut up = gate.subscribe();
                    tokio::spawn(async move {
                        let _ = up.wait_for(|up| *up).await;
                        drop(client);
                    });
                    continue;
                }
                let (gate, trap, upstream) = (gate.clone(), traps.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                    DbGate::relay(client, server, gate, trap).await;
                });
            }
        });
        DbGate { port, up, trap, accept }
    }

    /// Relays one connection until either side ends or the gate goes down; past a trap's
    /// bytes, the connection's next COMMIT is sent and then the gate goes down.
    async fn relay(
        client: tokio::net::TcpStream,
        server: tokio::net::TcpStream,
        gate: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
        trap: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let has = |chunk: &[u8], needle: &[u8]| chunk.windows(needle.len()).any(|w| w == needle);
        let mut down = gate.subscribe();
        let ((mut from_client, mut to_client), (mut from_server, mut to_server)) =
            (client.into_split(), server.into_split());
        let requests = async {
            let (mut buf, mut marked) = (vec![0u8; 64 * 1024], false);
            while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                let chunk = &buf[..n];
                marked |= trap.lock().unwrap().as_deref().is_some_and(|needle| has(chunk, needle));
                if to_server.write_all(chunk).await.is_err() {
                    return;
                }
                if marked && has(chunk, b"COMMIT") {
                    trap.lock().unwrap().take();
                    gate.send_replace(false);
                    return;
                }
            }
        };
        tokio::select! {
            _ = requests => {}
            _ = tokio::io::copy(&mut from_server, &mut to_client) => {}
            _ = down.wait_for(|up| !*up) => {}
        }
    }

    /// `url` with its host and port replaced by the gate's.
    pub fn url(&self, url: &str) -> String {
        let mut parsed = url::Url::parse(url).unwrap();
        parsed.set_host(Some("127.0.0.1")).unwrap();
        parsed.set_port(Some(self.port)).unwrap();
        parsed.to_string()
    }

    /// Cuts every connection and refuses new ones (`false`), or lets them through again.
    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }

    /// Sets a trap: the first transaction that sends `needle` (a bound value, say) is cut
    /// right after its COMMIT went to the database, and the gate goes down. The database has
    /// committed; the client sees its connection lost and cannot know.
    pub fn cut_at_commit(&self, needle: &[u8]) {
        *self.trap.lock().unwrap() = Some(needle.to_vec());
    }

    /// Whether the trap went off.
    pub fn sprung(&self) -> bool {
        self.trap.lock().unwrap().is_none() && !*self.up.borrow()
    }
}

/// A server on a scratch PostgreSQL database it reaches through a [`DbGate`], for test
/// `test`; `None` (and the test is logged as skipped) without `BROWSERPOOL_TEST_POSTGRES`:
/// these run in the PostgreSQL half of `scripts/test.sh`.
pub async fn behind_a_gate(test: &str) -> Option<(DbGate, BinaryServer)> {
    let Some(admin) = std::env::var("BROWSERPOOL_TEST_POSTGRES").ok().filter(|u| !u.is_empty()) else {
        skip(test, "needs BROWSERPOOL_TEST_POSTGRES (it runs in the PostgreSQL half of scripts/test.sh)");
        return None;
    };
    let database = browserpool_server::store::scratch_postgres(&admin).await.unwrap();
    let gate = DbGate::open(&database).await;
    let server = BinaryServer::spawn_in(tempfile::tempdir().unwrap(), gate.url(&database), Vec::new());
    Some((gate, server))
}

impl Drop for DbGate {
    fn drop(&mut self) {
        self.accept.abort();
        self.up.send_replace(false);
    }
}

/// The audit records of `action` on session `id`, newest first (at most 10,000).
pub async fn action_records(client: &Client, id: &str, action: &str) -> Vec<pb::AuditRecord> {
    let query =
        pb::QueryAuditRequest { session_id: id.into(), action: action.into(), limit: 10_000, ..Default::default() };
    let mut stream = client.admin().query_audit(query).await.unwrap().into_inner();
    let mut got = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        got.push(r);
    }
    got
}

/// How many `ok` records of `action` session `id` has, once it has at least `want` (or 20 s
/// have passed): a result does not wait for its record, which the writer appends just after
/// (from its replica's spool, after an outage), so the last action's may still be on its way.
pub async fn ok_records(client: &Client, id: &str, action: &str, want: usize) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ok = action_records(client, id, action).await.iter().filter(|r| r.outcome == "ok").count();
        if ok >= want || tokio::time::Instant::now() > deadline {
            return ok;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether an error message leaves the user without a next step: it must say what to do
/// (`acquire a new session`, `retry`, `raise timeout_ms`, `did you mean`, ...), read here as
/// one of the words a next step starts with, as a whole word.
pub fn next_step_missing(message: &str) -> bool {
    const NEXT: [&str; 21] = [
        "acquire",
        "retry",
        "ask",
        "give",
        "use",
        "set",
        "call",
        "navigate",
        "answer",
        "did you mean",
        "check",
        "raise",
        "release",
        "see",
        "issue",
        "reload",
        "write",
        "fix",
        "wait",
        "open",
        "go on",
    ];
    let words: String = message.to_lowercase().chars().map(|c| if c.is_alphanumeric() { c } else { ' ' }).collect();
    let words = format!(" {} ", words.split_whitespace().collect::<Vec<_>>().join(" "));
    // "in use" and "waiting" say what is, not what to do.
    let words = words.replace(" in use ", " ");
    !NEXT.iter().any(|cue| words.contains(&format!(" {cue} ")))
}
