//! Command line and environment: one clap struct per command; doc comments are the `--help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use browserpool_pool::sandbox::{UidRange, DEFAULT_WORKER_UIDS};
use browserpool_pool::PortRange;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

/// A pool of warm headless Chromium workers leased over gRPC.
#[derive(Debug, Parser)]
#[command(
    name = "browserpool",
    version = crate::LONG_VERSION,
    about = "A pool of warm headless Chromium workers, leased over gRPC",
    after_help = "`browserpool session --help` and `browserpool admin --help` list the client commands and their exit codes."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

// `Serve` is far larger than the rest; the value is parsed once per process, so boxing buys
// nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (the default when no command is given).
    Serve(ServeArgs),
    /// Mint tokens offline from the data dir's signing key and the database's tenants (a
    /// data dir without a key is refused: start the server on it once).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Create or upgrade the database schema, then exit.
    Migrate(StoreArgs),
    /// Signing keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Lease and drive browsers on a running server: acquire, act, batch, release, list,
    /// get, export, import.
    Session(browserpool_client::cli::SessionArgs),
    /// Operate a running server: status, sessions, kill, drain, tenants, tokens, audit,
    /// verify (a token with scope admin).
    Admin(browserpool_client::cli::AdminArgs),
    /// MCP over stdio for agents' clients that spawn a local process: relays to a server's
    /// /mcp with the token from the usual places (--token, BROWSERPOOL_TOKEN, ...). Nothing but
    /// MCP on stdout.
    Mcp(McpArgs),
}

/// The HTTP listener's default port (`--http-listen`), where `browserpool mcp` finds `/mcp`
/// when given no `--url`.
pub const DEFAULT_HTTP_PORT: u16 = 50052;

/// `browserpool mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The server's MCP endpoint, e.g. https://pool.example:50052/mcp. Default: --server's
    /// scheme and host, the HTTP listener's default port 50052, /mcp.
    #[arg(long, env = "BROWSERPOOL_MCP_URL")]
    pub url: Option<String>,
    /// Bind the MCP session to this session (one the token's subject owns) instead of leasing
    /// a browser at the first call.
    #[arg(long)]
    pub session: Option<String>,
    #[command(flatten)]
    pub connect: browserpool_client::cli::ConnectArgs,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Retire the signing key (it keeps verifying its tokens) and create a new one. A server
    /// running on this data dir takes both within a second, no restart: it signs with the new
    /// key and verifies the retired one's tokens (one signed with the new key is accepted at
    /// once). A data dir without a signing key is refused.
    Rotate(KeyRotateArgs),
}

/// Settings of `browserpool key rotate`.
#[derive(Debug, Clone, Args)]
pub struct KeyRotateArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Algorithm of the new key.
    #[arg(long, env = "BROWSERPOOL_JWT_ALG", value_enum, default_value = "hs256")]
    pub jwt_alg: JwtAlg,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a signed JWT for a tenant and subject.
    Issue(TokenIssueArgs),
}

/// Where state lives; shared by every command.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Directory for the SQLite file, the signing key, the admin token and worker profiles.
    #[arg(long, env = "BROWSERPOOL_DATA_DIR", default_value = ".browserpool")]
    pub data_dir: PathBuf,
    /// Database URL: `sqlite://path` (default `sqlite://<data-dir>/browserpool.db`) or
    /// `postgres://user:password@host:port/db`. Replicas sharing one database share tenant quotas.
    #[arg(long, env = "BROWSERPOOL_DATABASE_URL")]
    pub database_url: Option<String>,
    /// File where audit records wait, durably, while the database refuses them (an outage, a
    /// full disk), so live sessions keep working meanwhile; default
    /// `<data-dir>/audit-spool.jsonl`. Holds at most 100,000 records: past that, or when it
    /// cannot be written either, actions are refused.
    #[arg(long, env = "BROWSERPOOL_AUDIT_SPOOL")]
    pub audit_spool: Option<PathBuf>,
}

impl StoreArgs {
    /// The database URL, defaulting to a SQLite file in the data dir.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("browserpool.db").display()))
    }
}

/// JWT signing algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JwtAlg {
    /// HMAC-SHA256 with a 32-byte secret.
    Hs256,
    /// Ed25519 signatures.
    Eddsa,
}

/// Settings of `browserpool serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// gRPC listen address.
    #[arg(long, env = "BROWSERPOOL_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// HTTP listen address for /healthz, /readyz and /metrics.
    #[arg(long, env = "BROWSERPOOL_HTTP_LISTEN", default_value = "127.0.0.1:50052")]
    pub http_listen: SocketAddr,
    /// Chromium executable; default: the first of chromium-headless-shell, chromium,
    /// chromium-browser, google-chrome on PATH (`--chrome chromium` for the full browser).
    #[arg(long, env = "BROWSERPOOL_CHROME")]
    pub chrome: Option<PathBuf>,
    /// Directory the workers' profiles are made in (a `browserpool-profiles-<hash>` of it per
    /// data dir); default the temp dir ($TMPDIR, else /tmp). On a tmpfs (`/dev/shm`) no profile
    /// write reaches a disk, and a session in process isolation took about 13% less host CPU here;
    /// what pages store in their profile (cookies, local storage, IndexedDB) is then memory,
    /// counted in the worker's memory limit where workers have cgroups (else only in the tmpfs's
    /// size). HTTP caches and the sessions' files stay in the temp dir either way.
    #[arg(long, env = "BROWSERPOOL_PROFILES_IN")]
    pub profiles_in: Option<PathBuf>,
    /// Workers kept booted and idle, ready to lease.
    #[arg(long, env = "BROWSERPOOL_WARM", default_value_t = 2)]
    pub warm: usize,
    /// Cap on Chromium processes (warm + booting + leased). Also the `default` tenant's
    /// max_slots: set from this when the tenant is created and, when this flag or its variable
    /// is given, again at every start (logged); left as stored when it is not given.
    #[arg(long, env = "BROWSERPOOL_MAX_WORKERS", default_value_t = 8)]
    pub max_workers: usize,
    /// The `default` tenant's isolation: `process` (a Chromium per session) or `context` (a
    /// browser context per session in a Chromium its sessions share). Set when the tenant is
    /// created (`process` when not given) and, when given, again at every start.
    #[arg(long, env = "BROWSERPOOL_DEFAULT_ISOLATION", value_parser = ["process", "context"])]
    pub default_isolation: Option<String>,
    /// CDP ports for workers, START-END; each is bound on 127.0.0.1 only.
    #[arg(long, env = "BROWSERPOOL_PORT_RANGE", default_value = "9300-9399")]
    pub port_range: PortRange,
    /// Uids (each also the gid) that workers run as when the server runs as root, START-END:
    /// a worker runs as START plus its CDP port, so END must be at least START plus the last
    /// port of --port-range. The server refuses a range that holds a user or group of this
    /// host, anyone's subordinate ids, or its own uid. A server that is not root runs workers
    /// as itself.
    #[arg(long, env = "BROWSERPOOL_WORKER_UIDS", default_value = DEFAULT_WORKER_UIDS)]
    pub worker_uids: UidRange,
    /// Run workers without Chromium's sandbox (--no-sandbox), for hosts where it cannot
    /// start. Never on a host that serves untrusted pages: a renderer exploit then runs with
    /// every right of the worker's uid. Loud in the log, /readyz and PoolStatus.
    #[arg(long, env = "BROWSERPOOL_ALLOW_UNSANDBOXED")]
    pub allow_unsandboxed: bool,
    /// Memory limit of each worker (every process its Chromium starts), in MiB, where the
    /// server manages cgroups; a tenant's max_memory_mb replaces it for its sessions. A page
    /// past it is killed and its action fails naming the limit.
    #[arg(long, env = "BROWSERPOOL_WORKER_MEMORY_MB", default_value_t = 1536, value_parser = clap::value_parser!(u32).range(256..=65536))]
    pub worker_memory_mb: u32,
    /// Most MiB of the tmpfs each worker's profile is, and each session's files directory,
    /// where the server may mount one (as root): all a page can store (IndexedDB, the
    /// origin-private file system, caches) and download, in memory counted in the worker's
    /// memory limit, of which each takes at most a quarter where workers have cgroups; 0
    /// leaves them on the filesystem under them, where a page may store up to Chromium's
    /// quota, most of that disk.
    #[arg(long, env = "BROWSERPOOL_WORKER_DISK_MB", default_value_t = 512, value_parser = worker_disk_mb)]
    pub worker_disk_mb: u32,
    /// Most tasks (processes and threads) each worker may have, where the server manages
    /// cgroups.
    #[arg(long, env = "BROWSERPOOL_WORKER_PIDS_MAX", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(256..))]
    pub worker_pids_max: u64,
    /// Do not put each worker in a cgroup of its own (memory, tasks, CPU weight), even where
    /// the server could.
    #[arg(long, env = "BROWSERPOOL_NO_WORKER_CGROUPS")]
    pub no_worker_cgroups: bool,
    /// Host-wide directory of port lock files, shared by every browserpool on the host.
    #[arg(long, env = "BROWSERPOOL_LOCK_DIR", default_value = "/tmp/browserpool-locks")]
    pub lock_dir: PathBuf,
    /// JWT algorithm used when the signing key is first created (later starts reuse the key).
    #[arg(long, env = "BROWSERPOOL_JWT_ALG", value_enum, default_value = "hs256")]
    pub jwt_alg: JwtAlg,
    /// Clock skew tolerated on a token's expiry and not-before times (a token keeps working
    /// this long past its expiry), between the clock that issued it and this server's.
    #[arg(long, env = "BROWSERPOOL_TOKEN_LEEWAY", default_value = "5s", value_parser = humantime::parse_duration)]
    pub token_leeway: Duration,
    /// Longest a session may live, unless its tenant says less. Also the `default` tenant's
    /// max_session_ttl_ms, set like its max_slots (see --max-workers).
    #[arg(long, env = "BROWSERPOOL_MAX_SESSION_TTL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub max_session_ttl: Duration,
    /// Idle timeout of a session that does not ask for one, in tenants whose idle_timeout_ms
    /// is 0. Also the `default` tenant's idle_timeout_ms, set like its max_slots (see
    /// --max-workers).
    #[arg(long, env = "BROWSERPOOL_IDLE_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// Base URL clients reach the HTTP listener at, when it is not the listener's own address
    /// (behind an ingress or a load balancer): `cdp_url`s are built on it. http(s):// is
    /// turned into ws(s)://. Default: ws://<the HTTP listener's address> (wss:// with TLS).
    #[arg(long, env = "BROWSERPOOL_PUBLIC_URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,
    /// Host (name or IP) the other replicas sharing the database reach this one at; calls
    /// naming a session this replica holds are forwarded here. Default: the listen address's
    /// host when it is a concrete address, else this machine's host name. The Helm chart sets
    /// the pod IP.
    #[arg(long, env = "BROWSERPOOL_ADVERTISE_HOST", value_parser = parse_advertise_host)]
    pub advertise_host: Option<String>,
    /// How long a replica forwarding a call waits to connect to the replica holding the
    /// session before answering UNAVAILABLE.
    #[arg(long, env = "BROWSERPOOL_FORWARD_CONNECT_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub forward_connect_timeout: Duration,
    /// How long a replica forwarding a call may take to find which replica holds its session
    /// (a database lookup) before answering UNAVAILABLE: a database outage never holds a
    /// forwarded call for its whole length.
    #[arg(long, env = "BROWSERPOOL_FORWARD_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    pub forward_timeout: Duration,
    /// Most CDP connections one session may have open at once.
    #[arg(long, env = "BROWSERPOOL_CDP_MAX_CLIENTS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub cdp_max_clients: u32,
    /// Most CDP connections this server relays at once.
    #[arg(long, env = "BROWSERPOOL_CDP_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub cdp_max_connections: u32,
    /// Most people watching one session at once through live view links (then 429).
    #[arg(long, env = "BROWSERPOOL_LIVE_MAX_VIEWERS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub live_max_viewers: u32,
    /// Largest CDP message either way, in bytes (a full-page screenshot is one message).
    #[arg(long, env = "BROWSERPOOL_CDP_MAX_MESSAGE", default_value_t = 64 << 20)]
    pub cdp_max_message: usize,
    /// On SIGTERM (or Ctrl-C), first drain for up to this long: /readyz answers 503 and
    /// Acquire UNAVAILABLE (clients go to other replicas) while live sessions keep working
    /// until they end; those still live after it are ended as KILLED. 0 skips the drain.
    #[arg(long, env = "BROWSERPOOL_DRAIN_TIMEOUT", default_value = "0s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// On SIGTERM (or Ctrl-C), after the drain: actions already running get this long to
    /// finish; then every session still open is ended (KILLED when an action was cut short),
    /// and the server exits 0. Keep drain and grace together under the orchestrator's kill
    /// grace period.
    #[arg(long, env = "BROWSERPOOL_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// How long an ended session's files (its downloads and uploads) are kept, read-only, in
    /// `<data dir>/artifacts/`, fetched as a live session's are; 0 deletes them with it.
    #[arg(long, env = "BROWSERPOOL_ARTIFACT_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    pub artifact_ttl: Duration,
    /// An S3-compatible bucket (`s3://bucket/prefix`) that ended sessions' files and
    /// recordings are copied to at their end, so any replica serves them once the one that made
    /// them is gone, until `--artifact-ttl`. Endpoint, region and credentials come from
    /// `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
    /// `AWS_SESSION_TOKEN` (`AWS_CA_BUNDLE`: extra CA certificates). The bucket is checked at
    /// start. Unset: they stay on the local disk only.
    #[arg(long, env = "BROWSERPOOL_ARTIFACT_STORE")]
    pub artifact_store: Option<String>,
    /// TLS certificate chain (PEM), leaf first. With --tls-key, both listeners serve TLS (gRPC
    /// over h2, the HTTP listener https/wss). The files are re-read when they change on disk
    /// (new connections get the new pair; a bad new pair is logged and the old one kept).
    /// Missing, non-PEM, expired or mismatched files stop the server at start.
    #[arg(long, env = "BROWSERPOOL_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert; a key readable by group or
    /// others is warned about.
    #[arg(long, env = "BROWSERPOOL_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA bundle (PEM) for client certificates: turns on mutual TLS. gRPC then refuses, at the
    /// handshake, clients without a certificate chaining to it; on the HTTP listener only
    /// /cdp/ needs one (/healthz, /readyz and /metrics stay open to probes). Read once at start.
    #[arg(long, env = "BROWSERPOOL_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// Longest lifetime `Admin/IssueToken` grants.
    #[arg(long, env = "BROWSERPOOL_MAX_TOKEN_TTL", default_value = "30d", value_parser = humantime::parse_duration)]
    pub max_token_ttl: Duration,
    /// OTLP/gRPC endpoint to send traces to, e.g. http://otel-collector:4317: a span per RPC
    /// and per action, continuing the caller's W3C traceparent. Unset, the standard
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is used; with none of
    /// them, traces are off. Plain http:// only (a collector beside the server).
    #[arg(long, env = "BROWSERPOOL_OTLP_ENDPOINT", value_parser = parse_otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
    /// Largest document `load_html` accepts, in bytes (gRPC messages may be this plus 1 MiB).
    #[arg(long, env = "BROWSERPOOL_MAX_HTML_BYTES", default_value_t = 10 << 20)]
    pub max_html_bytes: usize,
    /// Most tabs a session may have open; popups its pages open count too (ones over the cap
    /// are closed at once).
    #[arg(long, env = "BROWSERPOOL_MAX_TABS", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tabs: u32,
    /// Sessions a context-isolated tenant's shared Chromium serves before a fresh one takes
    /// its place (it is killed once its last session ends).
    #[arg(long, env = "BROWSERPOOL_CONTEXT_RECYCLE_AFTER", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    pub context_recycle_after: u64,
    /// Memory (in MiB) past which a context-isolated tenant's shared Chromium is replaced: the
    /// anonymous and shared memory its cgroup holds, read as each of its sessions ends (without
    /// cgroups, the PSS of its processes, read at most once a second). Three
    /// quarters of its cgroup's memory limit, when that is lower, is the ceiling instead.
    #[arg(long, env = "BROWSERPOOL_CONTEXT_MEMORY_CEILING_MIB", default_value_t = 2048, value_parser = clap::value_parser!(u64).range(64..))]
    pub context_memory_ceiling_mib: u64,
    /// How long a context-isolated tenant's shared Chromium is kept without a session before
    /// it is killed (it also gives its place up at once when a caller needs it).
    #[arg(long, env = "BROWSERPOOL_CONTEXT_IDLE", default_value = "5m", value_parser = humantime::parse_duration)]
    pub context_idle: Duration,
    /// How long a browser may leave the server's DevTools probe (sent every 2 s) unanswered
    /// before it counts as dead: its session ends CRASHED ("browser stopped answering"), its
    /// processes are killed and its slot freed. A frozen browser would otherwise hold its
    /// session until the TTL. Time the server itself stood still (stopped, or a stalled host)
    /// is not counted.
    #[arg(long, env = "BROWSERPOOL_BROWSER_UNRESPONSIVE_AFTER", default_value = "10s", value_parser = parse_unresponsive)]
    pub browser_unresponsive_after: Duration,
    /// How long Chromium may take to start.
    #[arg(long, env = "BROWSERPOOL_LAUNCH_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub launch_timeout: Duration,
    /// Fixed answers for the egress proxy's resolver, NAME=IP (repeat, or comma-separated in
    /// the environment); they win over DNS, and the navigation policy judges the IP given.
    #[arg(long = "resolve", env = "BROWSERPOOL_RESOLVE", value_delimiter = ',', value_parser = parse_resolve)]
    pub resolve: Vec<(String, std::net::IpAddr)>,
    /// Which of the settings the `default` tenant takes were given rather than defaulted.
    #[arg(skip)]
    pub given: Given,
}

/// The settings of `serve` that the `default` tenant takes, each `true` when it was given on
/// the command line or in its environment variable rather than left at its default: a given
/// one is applied to the tenant at every start, one left at its default only when the tenant
/// is created. Filled by [`Cli::parse_noting_sources`]; a `ServeArgs` built in code gives none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Given {
    pub max_workers: bool,
    pub max_session_ttl: bool,
    pub idle_timeout: bool,
}

impl Given {
    fn from_matches(serve: &ArgMatches) -> Given {
        let given =
            |id: &str| matches!(serve.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable));
        Given {
            max_workers: given("max_workers"),
            max_session_ttl: given("max_session_ttl"),
            idle_timeout: given("idle_timeout"),
        }
    }
}

/// At least two probes' worth: a busy browser on a loaded host answers late, not never.
fn parse_unresponsive(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(4) {
        return Err(format!("{s} is too short: a browser is probed every 2 s, so at least 4s"));
    }
    Ok(d)
}

/// 0 (profiles on the filesystem), or 16 MiB to 64 GiB: less than 16 does not hold a profile.
fn worker_disk_mb(s: &str) -> Result<u32, String> {
    let mb: u32 = s.trim().parse().map_err(|_| format!("{s:?} is not a number of MiB"))?;
    match mb {
        0 | 16..=65536 => Ok(mb),
        _ => Err(format!("{mb} MiB: give 0 (no tmpfs) or 16 to 65536 (a profile needs 16 MiB to start)")),
    }
}

/// A host name or an IP address, nothing else (no port, scheme or path).
fn parse_advertise_host(s: &str) -> Result<String, String> {
    let host = s.trim();
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return Ok(bare.to_string());
    }
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if valid {
        Ok(host.to_ascii_lowercase())
    } else {
        Err(format!("{s:?} is not a host name or an IP address (give no port or scheme)"))
    }
}

fn parse_public_url(s: &str) -> Result<String, String> {
    let url = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    let scheme = match url.scheme() {
        "ws" | "http" => "ws",
        "wss" | "https" => "wss",
        other => return Err(format!("{s:?}: scheme {other} is not http, https, ws or wss")),
    };
    if url.query().is_some() || url.fragment().is_some() || url.host_str().is_none() {
        return Err(format!("{s:?}: a base URL has a host and no query or fragment"));
    }
    let rest = &url.as_str()[url.scheme().len()..];
    Ok(format!("{scheme}{}", rest.trim_end_matches('/')))
}

fn parse_otlp_endpoint(s: &str) -> Result<String, String> {
    let url = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    match url.scheme() {
        "http" if url.host_str().is_some() => Ok(s.to_string()),
        "http" => Err(format!("{s:?} has no host")),
        "https" => Err(format!("{s:?}: https is not supported; send to a collector over http://")),
        other => Err(format!("{s:?}: scheme {other} is not http")),
    }
}

/// Where traces go: `flag` (`--otlp-endpoint` or its env), else the standard OpenTelemetry
/// variables `env` looks up, the traces-only one first. `None`: traces are off.
pub fn otlp_endpoint(flag: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    if let Some(flag) = flag {
        return Ok(Some(flag.to_string()));
    }
    for var in ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            return parse_otlp_endpoint(&value).map(Some).map_err(|e| format!("{var}: {e}"));
        }
    }
    Ok(None)
}

fn parse_resolve(s: &str) -> Result<(String, std::net::IpAddr), String> {
    let (name, ip) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=IP"))?;
    let ip = ip.trim().parse().map_err(|_| format!("{ip:?} is not an IP address"))?;
    let name = name.trim();
    if name.is_empty() || name.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!("{name:?} is not a host name"));
    }
    Ok((name.to_string(), ip))
}

/// The client's connection flags (`ConnectArgs`'s, read from its definition), and whether
/// each takes a value: accepted before the command too (`browserpool --token T session
/// acquire`), as after it.
fn leading_flags() -> Vec<(String, bool)> {
    use clap::Args;
    let connect = browserpool_client::cli::ConnectArgs::augment_args(clap::Command::new("connect"));
    connect
        .get_arguments()
        .filter_map(|a| Some((format!("--{}", a.get_long()?), a.get_action().takes_values())))
        .collect()
}

/// `args` with the [`leading_flags`] given before the command moved after it, where clap
/// takes them (`browserpool --token T session acquire` is `browserpool session --token T
/// acquire`). Anything else is left as it is, for clap to judge.
fn flags_after_the_command<I, T>(args: I) -> Vec<std::ffi::OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let flags = leading_flags();
    let mut moved = Vec::new();
    let mut at = 1;
    while at < args.len() {
        let arg = args[at].to_string_lossy().to_string();
        let name = arg.split('=').next().unwrap_or_default();
        let Some((_, takes_value)) = flags.iter().find(|(flag, _)| flag == name) else { break };
        let width = if *takes_value && !arg.contains('=') { 2 } else { 1 };
        moved.extend(args.drain(at..(at + width).min(args.len())));
    }
    if !moved.is_empty() && at < args.len() {
        at += 1;
        args.splice(at..at, moved);
    } else {
        args.extend(moved);
    }
    args
}

impl Cli {
    /// Parses the process's arguments as [`Parser::parse`] does (a bad one exits with clap's
    /// message), noting which settings of `serve` were given (see [`Given`]).
    pub fn parse_noting_sources() -> Cli {
        Cli::try_parse_noting_sources(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// [`Cli::parse_noting_sources`] of `args`, returning clap's error.
    pub fn try_parse_noting_sources<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Cli::command().try_get_matches_from(flags_after_the_command(args))?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        if let (Some(Command::Serve(serve)), Some(("serve", sub))) = (cli.command.as_mut(), matches.subcommand()) {
            serve.given = Given::from_matches(sub);
        }
        Ok(cli)
    }

    /// Whether the command is a client of a running server (`session`, `admin`): it starts no
    /// telemetry and installs no signal handler.
    pub fn is_client(&self) -> bool {
        matches!(self.command, Some(Command::Session(_) | Command::Admin(_) | Command::Mcp(_)))
    }

    /// Where `serve` sends traces (see [`otlp_endpoint`]); `None` for the other commands. A
    /// bad `BROWSERPOOL_*` variable is left for `serve` itself to report.
    pub fn otlp_endpoint(&self) -> Result<Option<String>, String> {
        let flag = match &self.command {
            Some(Command::Serve(serve)) => serve.otlp_endpoint.clone(),
            None => ServeArgs::from_env().ok().and_then(|serve| serve.otlp_endpoint),
            Some(_) => return Ok(None),
        };
        otlp_endpoint(flag.as_deref(), |var| std::env::var(var).ok())
    }
}

impl ServeArgs {
    /// `browserpool serve` with no flags (environment variables still apply). A bad
    /// `BROWSERPOOL_*` value is an error naming it, for the caller to report; it never exits
    /// the process.
    pub fn from_env() -> Result<ServeArgs, clap::Error> {
        match Cli::try_parse_noting_sources(["browserpool", "serve"])?.command {
            Some(Command::Serve(serve)) => Ok(serve),
            _ => unreachable!("`serve` parses to Command::Serve"),
        }
    }

    /// Defaults rooted at `data_dir`, both listeners on port 0; for tests and benches.
    pub fn for_tests(data_dir: impl Into<PathBuf>) -> ServeArgs {
        let mut serve = ServeArgs::from_env().expect("the BROWSERPOOL_* environment parses");
        serve.store.data_dir = data_dir.into();
        serve.store.database_url = None;
        serve.listen = ([127, 0, 0, 1], 0).into();
        serve.http_listen = ([127, 0, 0, 1], 0).into();
        serve
    }
}

/// Settings of `browserpool token issue`. The token is signed with the data dir's key, which
/// a server made there (a data dir without one is refused rather than given a key no server
/// knows).
#[derive(Debug, Clone, Args)]
pub struct TokenIssueArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Tenant the token acts for. It must exist (`default` is created if missing); the token
    /// dies with it, and re-creating the tenant does not revive it.
    #[arg(long, env = "BROWSERPOOL_TOKEN_TENANT")]
    pub tenant: String,
    /// Subject (user or job) the token names.
    #[arg(long, env = "BROWSERPOOL_TOKEN_SUBJECT")]
    pub subject: String,
    /// Comma-separated scopes: sessions:read, sessions:write, sessions:shared, context:export,
    /// context:import, admin.
    #[arg(long, env = "BROWSERPOOL_TOKEN_SCOPES", value_delimiter = ',', required = true)]
    pub scopes: Vec<String>,
    /// Lifetime, e.g. 30m, 1h, 7d.
    #[arg(long, env = "BROWSERPOOL_TOKEN_TTL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_disk_mb_is_zero_or_enough_for_a_profile() {
        assert_eq!(worker_disk_mb("0"), Ok(0));
        assert_eq!(worker_disk_mb("512"), Ok(512));
        assert!(worker_disk_mb("8").unwrap_err().contains("16 to 65536"));
        assert!(worker_disk_mb("70000").is_err());
        assert!(worker_disk_mb("1g").unwrap_err().contains("not a number of MiB"));
        let cli = Cli::try_parse_noting_sources(["bp", "serve"]).unwrap();
        let Some(Command::Serve(serve)) = cli.command else { panic!("serve") };
        assert_eq!(serve.worker_disk_mb, 512, "capped by default");
    }

    #[test]
    fn connection_flags_before_the_command_are_taken_as_after_it() {
        let moved = |args: &[&str]| -> Vec<String> {
            flags_after_the_command(args.iter().copied()).iter().map(|a| a.to_string_lossy().to_string()).collect()
        };
        assert_eq!(
            moved(&["bp", "--token", "T", "--json", "session", "acquire"]),
            ["bp", "session", "--token", "T", "--json", "acquire"]
        );
        assert_eq!(
            moved(&["bp", "--server=http://h:1", "admin", "status"]),
            ["bp", "admin", "--server=http://h:1", "status"]
        );
        assert_eq!(moved(&["bp", "session", "acquire", "--token", "T"]), ["bp", "session", "acquire", "--token", "T"]);
        assert_eq!(moved(&["bp", "--warm", "2"]), ["bp", "--warm", "2"], "anything else is clap's to judge");
        let cli = Cli::try_parse_noting_sources(["bp", "--token", "T", "session", "list"]).unwrap();
        assert!(cli.is_client());
        let cli = Cli::try_parse_noting_sources(["bp", "--data-dir", "/d", "serve"]).unwrap();
        let Some(Command::Serve(serve)) = cli.command else { panic!("serve") };
        assert_eq!(serve.store.data_dir, PathBuf::from("/d"));
    }

    /// The README's table of `serve` flags is the parser's: every flag with its variable, and
    /// no row for a flag that is gone.
    #[test]
    fn the_readme_lists_exactly_the_serve_flags() {
        let readme = include_str!("../../README.md");
        let table = &readme[readme.find("## `browserpool serve` flags").expect("the README's flags section")..];
        let rows: Vec<(String, String)> = table
            .lines()
            .skip_while(|l| !l.starts_with("| `--"))
            .take_while(|l| l.starts_with("| `--"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(|c| c.trim().trim_matches('`')).collect();
                (cells[1].to_string(), cells[2].to_string())
            })
            .collect();
        let command = Cli::command();
        let serve = command.find_subcommand("serve").expect("the serve command");
        let flags: Vec<(String, String)> = serve
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| {
                let env = a.get_env()?.to_str()?.to_string();
                Some((format!("--{}", a.get_long()?), env))
            })
            .collect();
        assert!(flags.len() > 30, "{flags:?}");
        for flag in &flags {
            assert!(rows.contains(flag), "README's flags table has no row `{}` | `{}`", flag.0, flag.1);
        }
        for row in &rows {
            assert!(flags.contains(row), "README's flags table lists {row:?}, which `serve` does not take");
        }
    }

    #[test]
    fn advertise_hosts_are_bare_names_or_addresses() {
        assert_eq!(parse_advertise_host("10.1.2.3").unwrap(), "10.1.2.3");
        assert_eq!(parse_advertise_host("[fd00::7]").unwrap(), "fd00::7");
        assert_eq!(parse_advertise_host("Pool-0.browserpool.svc").unwrap(), "pool-0.browserpool.svc");
        for bad in ["", "10.1.2.3:50051", "http://x", "a..b", "-x", "x/y"] {
            assert!(parse_advertise_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn public_urls_become_websocket_bases() {
        assert_eq!(parse_public_url("https://pool.example.com/").unwrap(), "wss://pool.example.com");
        assert_eq!(parse_public_url("http://10.0.0.5:8080/bp").unwrap(), "ws://10.0.0.5:8080/bp");
        assert_eq!(parse_public_url("wss://pool.example.com").unwrap(), "wss://pool.example.com");
        assert!(parse_public_url("ftp://x").is_err());
        assert!(parse_public_url("https://x/?a=1").is_err());
        assert!(parse_public_url("pool.example.com").is_err());
    }

    #[test]
    fn given_settings_are_told_from_defaults() {
        let serve = |args: &[&str]| match Cli::try_parse_noting_sources(args).unwrap().command {
            Some(Command::Serve(serve)) => serve,
            other => panic!("{other:?}"),
        };
        let defaults = serve(&["browserpool", "serve"]);
        assert_eq!(defaults.given, Given::default(), "with no BROWSERPOOL_* variables set");
        assert_eq!(defaults.max_workers, 8);
        let given = serve(&["browserpool", "serve", "--max-workers", "3", "--idle-timeout", "7m"]);
        assert_eq!(given.given, Given { max_workers: true, max_session_ttl: false, idle_timeout: true });
        assert_eq!((given.max_workers, given.idle_timeout), (3, Duration::from_secs(420)));
    }

    #[test]
    fn otlp_endpoint_flag_then_standard_variables() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(otlp_endpoint(None, env(&[])).unwrap(), None);
        assert_eq!(otlp_endpoint(None, env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")])).unwrap(), None);
        let both = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4317"),
        ]);
        assert_eq!(otlp_endpoint(Some("http://flag:4317"), both).unwrap().as_deref(), Some("http://flag:4317"));
        assert_eq!(otlp_endpoint(None, both).unwrap().as_deref(), Some("http://b:4317"));
        let generic = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317")]);
        assert_eq!(otlp_endpoint(None, generic).unwrap().as_deref(), Some("http://a:4317"));
        let bad = otlp_endpoint(None, env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")])).unwrap_err();
        assert!(bad.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: "), "{bad}");
        assert!(parse_otlp_endpoint("https://collector:4317").is_err());
        assert!(parse_otlp_endpoint("http://collector:4317").is_ok());
    }
}
