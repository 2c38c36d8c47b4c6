//! Startup and shutdown: [`bind`] prepares everything and binds both sockets (port 0 works,
//! for tests); [`Bound::serve`] runs until the shutdown future resolves, then closes sessions,
//! kills workers and returns.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use browserpool_pool::{find_chrome, DirLock, Pool};
use tokio::net::TcpListener;

use crate::audit::{AuditLog, Writer};
use crate::auth::{write_admin_token, Keys};
use crate::cdp::CdpLimits;
use crate::clock::now_ms;
use crate::config::ServeArgs;
use crate::metrics::Metrics;
use crate::objects::{ObjectError, ObjectStore};
use crate::sessions::{KeepFiles, Limits, Sessions};
use crate::shutdown::Stages;
use crate::store::{Isolation, ReplicaAddrs, Store, TenantRecord};
use crate::tls::{Tls, TlsMode};

pub use crate::model::DEFAULT_TENANT;
use workers::{check_sandbox, pool_config, raise_open_files_limit, worker_cgroups, worker_uids};
pub use workers::{profiles_dir, profiles_dir_in, tmpfs_free};

mod serving;
mod workers;

/// Why this server cannot record sessions, if it cannot: it keeps nothing after a session, or
/// ffmpeg does not run here.
fn cannot_record(args: &ServeArgs) -> Option<String> {
    if args.artifact_ttl.is_zero() {
        return Some("this server keeps nothing after a session ends (--artifact-ttl 0s)".into());
    }
    match browserpool_pool::video::find_encoder() {
        Ok(path) => {
            tracing::info!(encoder = %path.display(), "sessions may be recorded");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "sessions cannot be recorded");
            Some(e.to_string())
        }
    }
}

/// Where ended sessions' artifacts are kept (`None` with `--artifact-ttl 0s`), with the object
/// store of `--artifact-store`, checked: a bad URL, a missing bucket or refused credentials
/// stop the server; a store that cannot be reached now is warned about (copies are tried
/// again until it answers).
async fn keep_files(args: &ServeArgs, data_dir: &Path) -> anyhow::Result<Option<KeepFiles>> {
    let keep = |store| KeepFiles { dir: data_dir.join("artifacts"), ttl: args.artifact_ttl, store };
    let Some(url) = &args.artifact_store else { return Ok((!args.artifact_ttl.is_zero()).then(|| keep(None))) };
    if args.artifact_ttl.is_zero() {
        anyhow::bail!("--artifact-store {url} keeps nothing with --artifact-ttl 0s: give a TTL, or drop the store");
    }
    let store = ObjectStore::new(url, |name| std::env::var(name).ok())?;
    match store.check().await {
        Ok(()) => tracing::info!(store = %url, "ended sessions' artifacts are copied to the object store"),
        Err(ObjectError::Unreachable { url: at, why }) => {
            tracing::warn!(store = %url, endpoint = %at, error = %why, "the object store does not answer yet; copies are tried again")
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Some(keep(Some(Arc::new(store)))))
}

/// A server with its sockets bound, ready to serve.
pub struct Bound {
    audit: AuditLog,
    audit_writer: Writer,
    grpc: TcpListener,
    http: TcpListener,
    /// Where gRPC listens (the real port when 0 was asked).
    pub grpc_addr: SocketAddr,
    /// Where the HTTP side listener listens.
    pub http_addr: SocketAddr,
    /// `<data-dir>/admin.token`.
    pub admin_token_path: PathBuf,
    keys: Arc<Keys>,
    /// Seals and opens secrets at rest with the data dir's `secrets.key`.
    sealer: Arc<crate::secrets::Sealer>,
    store: Store,
    sessions: Sessions,
    metrics: Arc<Metrics>,
    /// The Chromium pool the sessions lease from (the sessions see it as [`crate::browsers::Browsers`]).
    pool: Pool,
    /// The stop, in stages (see [`Stages`]).
    stages: Stages,
    settings: Settings,
    /// Both listeners' TLS, when `--tls-cert` is given.
    tls: Option<Tls>,
    /// Held while serving: no second server on this data dir.
    _dir_lock: DirLock,
}

/// What serving takes from the flags once bound.
struct Settings {
    max_html_bytes: usize,
    max_token_ttl: Duration,
    shutdown_grace: Duration,
    drain_timeout: Duration,
    forward_connect_timeout: Duration,
    forward_timeout: Duration,
    cdp_limits: CdpLimits,
    live_max_viewers: usize,
}

/// `<data-dir>/replica.id`: the replica id of the last server on this data dir, so the next
/// one can end that run's sessions at once (holding the data dir's lock proves it is dead).
const REPLICA_FILE: &str = "replica.id";

/// Opens the store, loads keys, writes the admin token, starts the pool and binds sockets.
pub async fn bind(args: ServeArgs) -> anyhow::Result<Bound> {
    bind_with(args, None).await
}

/// [`bind`], with the sessions leasing from `browsers` when given rather than from the
/// Chromium pool (which then boots only what `--warm` asks: give 0). For the fleet
/// simulation (`examples/fleet_sim.rs`), whose replicas lease in-memory fakes.
pub async fn bind_with(args: ServeArgs, browsers: Option<Arc<dyn crate::browsers::Browsers>>) -> anyhow::Result<Bound> {
    // Bad TLS files or a bad artifact store stop the server before it takes the data dir or
    // starts a browser.
    let tls = Tls::from_files(args.tls_cert.as_deref(), args.tls_key.as_deref(), args.tls_client_ca.as_deref())?;
    let data_dir = args.store.data_dir.clone();
    let keep_files = keep_files(&args, &data_dir).await?;
    create_data_dir(&data_dir)?;
    let dir_lock = DirLock::acquire(&data_dir)?;
    browserpool_pool::lock::check_lock_dir(&args.lock_dir)?;
    let dirs = [workers::chosen_profiles_dir(&args, &data_dir)?, profiles_dir(&data_dir)];
    let worker_uids = worker_uids(&args)?;
    workers::reap_left_behind(&dirs, &args.lock_dir).await?;
    raise_open_files_limit();
    let chrome = find_chrome(args.chrome.as_deref())?;
    let store = Store::open(&args.store.database_url()).await?;
    let default_epoch = ensure_default_tenant(&store, &args).await?;
    apply_given_to_default_tenant(&store, &args).await?;
    let keys = Arc::new(Keys::load_or_create(&data_dir, args.jwt_alg)?);
    keys.set_leeway(args.token_leeway);
    let sealer = Arc::new(crate::secrets::Sealer::load_or_create(&data_dir).map_err(anyhow::Error::msg)?);
    let admin_token_path = write_admin_token(&keys, &data_dir, DEFAULT_TENANT, &default_epoch)?;
    tracing::info!(path = %admin_token_path.display(), "admin token written");

    let grpc = TcpListener::bind(args.listen).await.with_context(|| format!("bind grpc {}", args.listen))?;
    let http = TcpListener::bind(args.http_listen).await.with_context(|| format!("bind http {}", args.http_listen))?;
    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;

    let stages = Stages::new();
    let cgroups = tokio::task::spawn_blocking({
        let args = args.clone();
        move || worker_cgroups(&args)
    })
    .await?;
    let cfg = pool_config(&args, chrome, dirs, worker_uids, cgroups, [grpc_addr.port(), http_addr.port()]);
    let pool = Pool::start(cfg, stages.serving.clone());
    let spool = open_spool(&args, &data_dir)?;
    let (audit, audit_writer) = AuditLog::new(store.clone(), Some(spool));
    let metrics = Arc::new(Metrics::default());
    let browsers = browsers.unwrap_or_else(|| Arc::new(pool.clone()));
    let capacity = browsers.capacity() as u32;
    let sessions = Sessions::new(
        store.clone(),
        browsers,
        Limits {
            max_session_ttl: args.max_session_ttl,
            idle_timeout: args.idle_timeout,
            keep_files,
            cannot_record: cannot_record(&args),
        },
        capacity,
        audit.clone(),
        metrics.clone(),
        sealer.clone(),
    );
    // The previous run on this data dir is dead (we hold its lock): its sessions end now, as
    // CRASHED, rather than when its heartbeat goes stale.
    let replica_file = data_dir.join(REPLICA_FILE);
    let previous = std::fs::read_to_string(&replica_file).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let host = advertise_host(args.advertise_host.as_deref(), grpc_addr);
    let addrs =
        ReplicaAddrs { grpc: join_host_port(&host, grpc_addr.port()), http: join_host_port(&host, http_addr.port()) };
    tracing::info!(grpc = %addrs.grpc, http = %addrs.http, "other replicas reach this one here");
    sessions.recover(previous.as_deref(), addrs).await?;
    let scheme = tls.as_ref().map_or(TlsMode::Off, Tls::mode).ws_scheme();
    sessions.set_cdp_base(args.public_url.clone().unwrap_or_else(|| format!("{scheme}://{http_addr}")));
    std::fs::write(&replica_file, sessions.replica_id()).map_err(|e| {
        anyhow::anyhow!("write {}: {}", replica_file.display(), browserpool_pool::lock::explain_io(&e, &replica_file))
    })?;
    check_sandbox(&args, &pool, &stages).await?;
    Ok(Bound {
        audit,
        audit_writer,
        grpc,
        http,
        grpc_addr,
        http_addr,
        admin_token_path,
        keys,
        sealer,
        store,
        sessions,
        metrics,
        pool,
        stages,
        settings: settings(&args),
        tls,
        _dir_lock: dir_lock,
    })
}

/// The settings the serving side reads of the flags.
fn settings(args: &ServeArgs) -> Settings {
    Settings {
        max_html_bytes: args.max_html_bytes,
        max_token_ttl: args.max_token_ttl,
        shutdown_grace: args.shutdown_grace,
        drain_timeout: args.drain_timeout,
        forward_connect_timeout: args.forward_connect_timeout,
        forward_timeout: args.forward_timeout,
        live_max_viewers: args.live_max_viewers as usize,
        cdp_limits: CdpLimits {
            max_message: args.cdp_max_message,
            per_session: args.cdp_max_clients as usize,
            per_server: args.cdp_max_connections as usize,
        },
    }
}

/// The audit spool: what the database refuses of the audit trail waits there, on this
/// server's own disk; what a previous run left in it goes into the chain first.
fn open_spool(args: &ServeArgs, data_dir: &Path) -> anyhow::Result<crate::audit::Spool> {
    let spool_path = args.store.audit_spool.clone().unwrap_or_else(|| data_dir.join(crate::audit::spool::SPOOL_FILE));
    let spool =
        crate::audit::Spool::open(&spool_path).with_context(|| format!("audit spool {}", spool_path.display()))?;
    if !spool.is_empty() {
        tracing::warn!(
            records = spool.len(),
            "a previous run left audit records in the local spool; they go into the chain first"
        );
    }
    Ok(spool)
}

/// The host other replicas reach this one at: `--advertise-host`, else the listen address's
/// host when it is a concrete address, else this machine's host name.
fn advertise_host(flag: Option<&str>, listen: SocketAddr) -> String {
    if let Some(host) = flag {
        return host.to_string();
    }
    if !listen.ip().is_unspecified() {
        return listen.ip().to_string();
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let n = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if n == 0 { buf.iter().position(|&b| b == 0).map(|end| &buf[..end]) } else { None };
    match name.and_then(|n| std::str::from_utf8(n).ok()).filter(|n| !n.is_empty()) {
        Some(name) => name.to_string(),
        None => {
            tracing::warn!("no host name to advertise to other replicas; set --advertise-host");
            "localhost".into()
        }
    }
}

/// `host:port`, with an IPv6 address in brackets.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Creates the data dir if missing, owner only: the database, keys and tokens live there
/// (workers' profiles do not: see [`profiles_dir`]).
pub fn create_data_dir(data_dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let failed = |what: &str, e: std::io::Error| {
        let why = browserpool_pool::lock::explain_io(&e, data_dir);
        anyhow::anyhow!("{what} data dir {}: {why}", data_dir.display())
    };
    crate::auth::create_private_dir(data_dir).map_err(|e| failed("create", e))?;
    // One made before (by hand, or a tool's 0755 temp dir) is made owner only too: workers and
    // other local users must not even list it.
    let mode = std::fs::metadata(data_dir).map_err(|e| failed("stat", e))?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| failed("chmod", e))?;
        tracing::info!(dir = %data_dir.display(), was = format!("{mode:o}"), "made the data dir owner-only (0700)");
    }
    Ok(())
}

/// Creates the `default` tenant from `args` if it does not exist (an existing one is left as
/// it is) and returns its epoch. Every `serve` calls it at start, and `token issue` before it
/// mints a token for `default`, so that works on a fresh data dir too.
pub async fn ensure_default_tenant(store: &Store, args: &ServeArgs) -> anyhow::Result<String> {
    let default = TenantRecord {
        id: DEFAULT_TENANT.into(),
        max_slots: args.max_workers as u32,
        max_queue: 100,
        max_session_ttl_ms: millis(args.max_session_ttl),
        idle_timeout_ms: millis(args.idle_timeout),
        allow_hosts: Vec::new(),
        // The embedded single-user default allows loopback so local development works.
        allow_private_networks: true,
        isolation: default_isolation(args).unwrap_or_default(),
        max_memory_mb: 0,
        default_record: Default::default(),
        max_file_mb: 0,
        max_artifact_mb: 0,
        artifact_ttl_s: 0,
        default_proxy: String::new(),
        max_session_bytes: 0,
    };
    store.ensure_tenant(&default, now_ms()).await?;
    store.tenant_epoch(DEFAULT_TENANT).await?.context("the default tenant vanished right after it was ensured")
}

/// Sets the `default` tenant's quotas that `serve` was given (see [`crate::config::Given`]) and
/// logs each change: a flag given is meant to hold now, not only on the data dir's first
/// start. Quotas not given keep what is stored (an operator's `PutTenant` among them).
async fn apply_given_to_default_tenant(store: &Store, args: &ServeArgs) -> anyhow::Result<()> {
    let Some(stored) = store.tenant(DEFAULT_TENANT).await? else { return Ok(()) };
    let mut wanted = stored.clone();
    let mut changes = Vec::new();
    let mut set = |given: bool, field: &mut u32, value: u32, what: &str| {
        if given && *field != value {
            changes.push(format!("{what} {field} -> {value}"));
            *field = value;
        }
    };
    set(args.given.max_workers, &mut wanted.max_slots, args.max_workers as u32, "max_slots (--max-workers)");
    let ttl = millis(args.max_session_ttl);
    set(args.given.max_session_ttl, &mut wanted.max_session_ttl_ms, ttl, "max_session_ttl_ms (--max-session-ttl)");
    let idle = millis(args.idle_timeout);
    set(args.given.idle_timeout, &mut wanted.idle_timeout_ms, idle, "idle_timeout_ms (--idle-timeout)");
    if let Some(isolation) = default_isolation(args).filter(|i| *i != wanted.isolation) {
        changes.push(format!(
            "isolation {} -> {} (--default-isolation)",
            wanted.isolation.as_str(),
            isolation.as_str()
        ));
        wanted.isolation = isolation;
    }
    if changes.is_empty() {
        return Ok(());
    }
    store.put_tenant(&wanted, now_ms()).await?;
    tracing::info!(tenant = DEFAULT_TENANT, changes = %changes.join(", "), "default tenant set from the flags given");
    Ok(())
}

/// `--default-isolation`, when given.
fn default_isolation(args: &ServeArgs) -> Option<Isolation> {
    args.default_isolation.as_deref().and_then(Isolation::parse)
}

/// A duration in whole milliseconds, as the tenant records keep them (at most u32::MAX).
fn millis(d: std::time::Duration) -> u32 {
    d.as_millis().min(u32::MAX as u128) as u32
}

/// Binds and serves until `shutdown` resolves; once bound, says on stderr what to do next
/// (with text logs: a JSON log stays JSON lines only).
pub async fn run(args: ServeArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    let data_dir = args.store.data_dir.clone();
    let bound = bind(args).await?;
    if matches!(crate::telemetry::LogFormat::from_env(), Ok(crate::telemetry::LogFormat::Text)) {
        eprintln!("{}", next_steps(&bound, &data_dir));
    }
    bound.serve(shutdown).await
}

/// What a person who just started the server does next: where it listens, where the admin
/// token is, and the first client commands (with the flags they need from where it runs).
fn next_steps(bound: &Bound, data_dir: &Path) -> String {
    let scheme = if bound.tls_mode() == TlsMode::Off { "http" } else { "https" };
    let grpc = format!("{scheme}://{}", bound.grpc_addr);
    let mut flags = String::new();
    if grpc != "http://127.0.0.1:50051" {
        flags.push_str(&format!(" --server {grpc}"));
    }
    if data_dir != Path::new(".browserpool") {
        flags.push_str(&format!(" --token-file {}", bound.admin_token_path.display()));
    }
    let bin = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.display().to_string()));
    let path = bin.map(|dir| format!("\n    export PATH=\"{dir}:$PATH\"")).unwrap_or_default();
    format!(
        "browserpool is ready: gRPC {grpc}, HTTP {scheme}://{http} (/readyz, /metrics)\n  \
         admin token of the default tenant: {token}\n  \
         try it from this directory, in another terminal:{path}\n    \
         S=$(browserpool session acquire -q{flags})\n    \
         browserpool session act \"$S\" navigate \"\" https://example.com/{flags}\n    \
         browserpool session act \"$S\" screenshot --out shot.png{flags}\n    \
         browserpool session release \"$S\"{flags}\n  \
         Ctrl-C stops it (live sessions are ended first).",
        http = bound.http_addr,
        token = bound.admin_token_path.display(),
    )
}

impl Bound {
    /// The session manager.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The Chromium pool (benches wait for its spares).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Whether both listeners speak TLS, and mutual TLS; `tls_mode().ws_scheme()` is the
    /// scheme of websocket URLs on the HTTP listener.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls.as_ref().map_or(TlsMode::Off, Tls::mode)
    }
}
