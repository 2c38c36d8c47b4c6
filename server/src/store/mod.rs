//! Durable records behind one boundary: callers use [`Store`]'s methods and never see SQL or
//! the backend. Two backends, SQLite (WAL, the embedded default) and PostgreSQL, each with its
//! own migrations; every query is written once with `$n` placeholders both understand and runs
//! on whichever pool [`with_pool!`] hands it.
//!
//! Replicas that share one database coordinate through it: each registers itself and beats a
//! heartbeat; tenant slots are rows of `slot_claims`, counted and taken inside one transaction
//! that holds the tenant's row in `locks`; the audit chain is extended under the `audit` lock,
//! so replicas append to one chain that never forks.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Decode, Row, Type};

use crate::audit::chain::{Batch, Entry, Record};
pub use crate::model::{
    Isolation, RecordMode, ReplicaAddrs, ReplicaRecord, SessionOwner, SessionRecord, SessionState, TenantRecord,
    Transition,
};

/// Store failures; mapped to gRPC `INTERNAL`/`UNAVAILABLE` by the error module.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database url scheme {0:?} is not supported (use sqlite:// or postgres://)")]
    UnsupportedUrl(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("corrupt record: {0}")]
    Corrupt(String),
    #[error("database file {path}: {}", browserpool_pool::lock::explain_io(.source, std::path::Path::new(.path)))]
    File { path: String, source: std::io::Error },
    /// The database could not be opened: `url` names it, without its password, and `why`
    /// is the error that stopped it.
    #[error("open database {url}: {why}")]
    Open { url: String, why: String },
}

impl StoreError {
    /// Whether the database refused the write as a whole (full disk, lock held elsewhere, I/O
    /// error, lost connection, no connection in time), rather than this one request (a
    /// duplicate id, a check): only the first kind makes the store unfit to serve.
    pub fn refuses_writes(&self) -> bool {
        match self {
            StoreError::Db(sqlx::Error::Database(e)) => matches!(e.kind(), sqlx::error::ErrorKind::Other),
            StoreError::Db(e) => matches!(
                e,
                sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::Protocol(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::WorkerCrashed
            ),
            StoreError::File { .. } => true,
            _ => false,
        }
    }
}

/// `url` as messages and logs may show it: without the password of its user info, nor a
/// query that names one (`postgres://bp:secret@db/x` is `postgres://bp@db/x`).
pub fn url_without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => format!("{}@{host}", userinfo.split(':').next().unwrap_or_default()),
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) if query.to_ascii_lowercase().contains("password") => format!("{path}?..."),
        _ => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// Which sessions a listing wants.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only this tenant; `None` = all (admin).
    pub tenant: Option<String>,
    /// Only this state; `None` = all.
    pub state: Option<SessionState>,
    /// Only sessions acquired by this subject; `None` = every subject.
    pub subject: Option<String>,
    /// Page size, already capped by the caller.
    pub limit: u32,
    /// Rows to skip (the page token).
    pub offset: u64,
}

/// Which audit records a query wants.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub tenant: Option<String>,
    pub session_id: Option<String>,
    pub action: Option<String>,
    pub since_ms: Option<i64>,
    pub limit: u32,
}

#[derive(Clone)]
enum Backend {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The durable store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// Why the last write failed, while the database refuses writes; shared by the clones.
    write_fault: Arc<Mutex<Option<String>>>,
}

/// The schema, one series per backend. Up to SQLite 0008 and PostgreSQL 0005 the two were
/// numbered apart; those numbers are recorded in every database made since, so they stay.
/// From [`SHARED_MIGRATIONS_FROM`] on, a change is one migration with the same number and
/// name in both series (a test holds it).
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");
/// The first migration number both series share.
#[cfg(test)]
const SHARED_MIGRATIONS_FROM: i64 = 9;

/// Runs `$body` with `$pool` bound to whichever backend's pool the store has: the body is
/// written once and compiled for each backend.
macro_rules! with_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.backend {
            Backend::Sqlite($pool) => $body,
            Backend::Postgres($pool) => $body,
        }
    };
}

mod audit;
mod proxies;
mod replicas;
mod sessions;
mod tenants;

pub use proxies::ProxyRecord;

/// Creates the SQLite file owner-only (0600) before SQLite opens it, or narrows an existing
/// one: whatever the data dir's mode and the umask, sessions, tenants and the audit trail are
/// readable by the server's user only. SQLite gives the `-wal` and `-shm` files it creates the
/// database file's mode; ones left by an earlier version (and a rollback journal) are narrowed
/// here too.
fn owner_only(db: &std::path::Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let narrow = |path: &std::path::Path, create: bool| -> std::io::Result<()> {
        let file = std::fs::OpenOptions::new().append(true).create(create).mode(0o600).open(path)?;
        // An existing file keeps its mode on open.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
    };
    let failed = |path: &std::path::Path| {
        let path = path.display().to_string();
        move |source| StoreError::File { path, source }
    };
    narrow(db, true).map_err(failed(db))?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let sibling = std::path::PathBuf::from(name);
        match narrow(&sibling, false) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.map_err(failed(&sibling))?,
        }
    }
    Ok(())
}

/// The connection settings of every SQLite connection: WAL, foreign keys, and a busy timeout
/// so a writer waits for another one (of this or another process) instead of failing at once.
fn sqlite_options(options: SqliteConnectOptions) -> SqliteConnectOptions {
    options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5))
}

/// The SQLite pool. A connection that comes back still inside a transaction is closed, never
/// reused: when a write fails with SQLITE_FULL or SQLITE_IOERR, SQLite rolls the transaction
/// back by itself, sqlx's own `ROLLBACK` then fails ("no transaction is active") and sqlx goes
/// on counting the connection as inside one. Reused, its next `begin` would issue
/// `SAVEPOINT` instead of `BEGIN` and a failed write would be undone with `ROLLBACK TO`, which
/// leaves the transaction open: the connection keeps the database's write lock for good
/// ("database is locked" for everyone else) and its later "commits" only release a savepoint,
/// so writes that answered ok are never durable. Closing the connection ends whatever SQLite
/// still holds for it.
fn sqlite_pool(max_connections: u32) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(max_connections)
        // Bounded like PostgreSQL's: a caller waits at most this long for a connection.
        .acquire_timeout(Duration::from_secs(5))
        .after_release(|conn, _| {
            Box::pin(async move {
                use sqlx::Connection;
                // Runs the rollback a dropped transaction queued before looking.
                conn.ping().await?;
                if conn.is_in_transaction() {
                    tracing::warn!("sqlite connection left inside a transaction by a failed write; closing it");
                    return Ok(false);
                }
                Ok(true)
            })
        })
}

/// Takes the named lock (the row's write lock) until the transaction ends. Both backends block
/// a second writer of the same row until the first commits.
const LOCK: &str = "INSERT INTO locks (name, n) VALUES ($1, 1) ON CONFLICT (name) DO UPDATE SET n = locks.n + 1";

const TRANSITION: &str = "INSERT INTO session_transitions (session_id, state, at_ms, reason) VALUES ($1, $2, $3, $4)";

impl Store {
    /// Opens (creating a SQLite file if missing) the database at `url` and applies pending
    /// migrations.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let opened = async {
            let store = Store::connect(url).await?;
            store.migrate().await?;
            Ok(store)
        };
        opened.await.map_err(|e: StoreError| StoreError::Open { url: url_without_password(url), why: e.to_string() })
    }

    /// Opens without migrating.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?;
            // An in-memory database has no file to narrow.
            if !(url.contains(":memory:") || url.contains("mode=memory")) {
                owner_only(options.get_filename())?;
            }
            let pool = sqlite_pool(4).connect_with(sqlite_options(options)).await?;
            return Ok(Store::with(Backend::Sqlite(pool)));
        }
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            // One connection first, on its own: the pool would retry a refused connection until
            // its acquire timeout and then report only the timeout, not why.
            use sqlx::Connection;
            let first = tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(url)).await;
            match first {
                Ok(connected) => connected?.close().await?,
                Err(_) => {
                    let late = std::io::Error::new(std::io::ErrorKind::TimedOut, "no connection within 5 s");
                    return Err(StoreError::Db(sqlx::Error::Io(late)));
                }
            }
            let pool =
                PgPoolOptions::new().max_connections(8).acquire_timeout(Duration::from_secs(5)).connect(url).await?;
            return Ok(Store::with(Backend::Postgres(pool)));
        }
        Err(StoreError::UnsupportedUrl(url.split("://").next().unwrap_or(url).to_string()))
    }

    fn with(backend: Backend) -> Store {
        Store { backend, write_fault: Arc::default() }
    }

    /// Why the database refuses writes, as the last write found it (the replica heartbeat
    /// writes every second, so this is never older than that); `None` while writes succeed.
    pub fn write_fault(&self) -> Option<String> {
        self.write_fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Notes the outcome of a write for [`Store::write_fault`] and passes it on.
    fn noted<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let mut fault = self.write_fault.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(_) => *fault = None,
            Err(e) if e.refuses_writes() => *fault = Some(e.to_string().replace('\n', " ")),
            Err(_) => {}
        }
        result
    }

    /// `sqlite` or `postgres`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Applies the embedded migrations of this backend.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(pool) => SQLITE_MIGRATIONS.run(pool).await?,
            Backend::Postgres(pool) => POSTGRES_MIGRATIONS.run(pool).await?,
        }
        Ok(())
    }

    /// Closes the connections.
    pub async fn close(&self) {
        with_pool!(self, pool => pool.close().await)
    }
}

/// A new tenant epoch: 122 random bits (a v4 UUID), 32 hex digits like the migrations' ones.
fn new_epoch() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn parse_state(s: &str) -> Result<SessionState, StoreError> {
    SessionState::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown session state {s:?}")))
}

/// Reads typed columns of a row of either backend (integers are 64-bit in both schemas).
struct Cols<'r, R>(&'r R);

impl<'r, R> Cols<'r, R>
where
    R: Row,
    &'r str: sqlx::ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    bool: Decode<'r, R::Database> + Type<R::Database>,
{
    fn get<T: Decode<'r, R::Database> + Type<R::Database>>(&self, column: &'r str) -> Result<T, StoreError> {
        Ok(self.0.try_get(column)?)
    }

    fn tenant(&self) -> Result<TenantRecord, StoreError> {
        let id: String = self.get("id")?;
        let hosts: String = self.get("allow_hosts")?;
        let isolation: String = self.get("isolation")?;
        Ok(TenantRecord {
            max_slots: self.get::<i64>("max_slots")? as u32,
            max_queue: self.get::<i64>("max_queue")? as u32,
            max_session_ttl_ms: self.get::<i64>("max_session_ttl_ms")? as u32,
            idle_timeout_ms: self.get::<i64>("idle_timeout_ms")? as u32,
            allow_hosts: serde_json::from_str(&hosts)
                .map_err(|e| StoreError::Corrupt(format!("tenant {id} allow_hosts: {e}")))?,
            allow_private_networks: self.get("allow_private_networks")?,
            isolation: Isolation::parse(&isolation)
                .ok_or_else(|| StoreError::Corrupt(format!("tenant {id} isolation: {isolation:?}")))?,
            max_memory_mb: self.get::<i64>("max_memory_mb")? as u32,
            default_record: RecordMode::from_i64(self.get::<i64>("default_record")?)
                .ok_or_else(|| StoreError::Corrupt(format!("tenant {id} default_record")))?,
            max_file_mb: self.get::<i64>("max_file_mb")? as u32,
            max_artifact_mb: self.get::<i64>("max_artifact_mb")? as u32,
            artifact_ttl_s: self.get::<i64>("artifact_ttl_s")? as u32,
            default_proxy: self.get("default_proxy")?,
            max_session_bytes: self.get::<i64>("max_session_bytes")?.max(0) as u64,
            id,
        })
    }

    fn session(&self) -> Result<SessionRecord, StoreError> {
        let labels: String = self.get("labels")?;
        Ok(SessionRecord {
            id: self.get("id")?,
            tenant: self.get("tenant")?,
            subject: self.get("subject")?,
            worker_id: self.get("worker_id")?,
            state: parse_state(&self.get::<String>("state")?)?,
            labels: serde_json::from_str(&labels).map_err(|e| StoreError::Corrupt(format!("labels: {e}")))?,
            created_at_ms: self.get("created_at_ms")?,
            expires_at_ms: self.get("expires_at_ms")?,
            idle_deadline_ms: self.get("idle_deadline_ms")?,
            queue_wait_ms: self.get::<i64>("queue_wait_ms")? as u32,
            ended_at_ms: self.get("ended_at_ms")?,
            end_reason: self.get("end_reason")?,
            replica: self.get("replica")?,
            artifacts: self.get("artifacts")?,
            emulation: match self.get::<Option<String>>("emulation")? {
                Some(json) => {
                    serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("emulation: {e}")))?
                }
                None => Default::default(),
            },
            proxy_id: self.get::<Option<String>>("proxy_id")?.unwrap_or_default(),
            bytes: (self.get::<i64>("bytes_sent")?.max(0) as u64, self.get::<i64>("bytes_received")?.max(0) as u64),
        })
    }

    fn replica(&self) -> Result<ReplicaRecord, StoreError> {
        Ok(ReplicaRecord {
            id: self.get("id")?,
            grpc_addr: self.get("grpc_addr")?,
            http_addr: self.get("http_addr")?,
            heartbeat_ms: self.get("heartbeat_ms")?,
        })
    }

    fn audit(&self) -> Result<Record, StoreError> {
        Ok(Record {
            seq: self.get::<i64>("seq")? as u64,
            at_ms: self.get("at_ms")?,
            entry: Entry {
                tenant: self.get("tenant")?,
                subject: self.get("subject")?,
                jti_hash: self.get("jti_hash")?,
                session_id: self.get("session_id")?,
                rpc: self.get("rpc")?,
                action: self.get("action")?,
                alias_of: self.get("alias_of")?,
                target: self.get("target")?,
                outcome: self.get("outcome")?,
                code: self.get("code")?,
                duration_ms: self.get::<i64>("duration_ms")? as u32,
            },
            prev_hash: self.get("prev_hash")?,
            hash: self.get("hash")?,
        })
    }
}

/// For tests and benchmarks: creates an empty database with a fresh `bp_test_…` name on the
/// PostgreSQL server of `admin_url` (whose role may create databases) and returns its URL.
/// The name carries `BROWSERPOOL_TEST_RUN` when set (`bp_test_<run>_<uuid>`), so the test
/// command drops its own run's databases and no other's.
pub async fn scratch_postgres(admin_url: &str) -> Result<String, StoreError> {
    use sqlx::Connection;
    let mut url = url::Url::parse(admin_url).map_err(|e| StoreError::UnsupportedUrl(format!("{admin_url}: {e}")))?;
    let run: String = std::env::var("BROWSERPOOL_TEST_RUN")
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(16)
        .collect();
    let uuid = uuid::Uuid::new_v4().simple();
    let name = if run.is_empty() { format!("bp_test_{uuid}") } else { format!("bp_test_{run}_{uuid}") };
    let mut conn = sqlx::PgConnection::connect(admin_url).await?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await?;
    conn.close().await?;
    url.set_path(&name);
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// From [`SHARED_MIGRATIONS_FROM`] on, each migration is in both series, under one number
    /// and one name; before it, each series counts on from its own last number.
    #[test]
    fn migrations_are_numbered_alike_in_both_series() {
        let shared = |m: &sqlx::migrate::Migrator| -> Vec<(i64, String)> {
            m.iter()
                .filter(|m| m.version >= SHARED_MIGRATIONS_FROM)
                .map(|m| (m.version, m.description.to_string()))
                .collect()
        };
        let last =
            |m: &sqlx::migrate::Migrator| m.iter().map(|m| m.version).filter(|v| *v < SHARED_MIGRATIONS_FROM).max();
        assert_eq!(
            (last(&SQLITE_MIGRATIONS), last(&POSTGRES_MIGRATIONS)),
            (Some(8), Some(5)),
            "the separate series are closed"
        );
        assert_eq!(
            shared(&SQLITE_MIGRATIONS),
            shared(&POSTGRES_MIGRATIONS),
            "a migration from {SHARED_MIGRATIONS_FROM:04} on goes in migrations/sqlite and migrations/postgres under the same name"
        );
    }

    /// One store per backend: a SQLite file always, and a scratch PostgreSQL database when
    /// `BROWSERPOOL_TEST_POSTGRES` names a server (the README test command sets it).
    pub(super) async fn backends(dir: &std::path::Path) -> Vec<String> {
        let mut urls = vec![format!("sqlite://{}", dir.join("t.db").display())];
        if let Some(admin) = std::env::var("BROWSERPOOL_TEST_POSTGRES").ok().filter(|u| !u.is_empty()) {
            urls.push(scratch_postgres(&admin).await.expect("scratch postgres database"));
        }
        urls
    }

    fn record(id: &str, tenant: &str, at: i64) -> SessionRecord {
        SessionRecord {
            id: id.into(),
            tenant: tenant.into(),
            subject: "ci".into(),
            worker_id: "w-1".into(),
            state: SessionState::Ready,
            labels: BTreeMap::from([("job".to_string(), "42".to_string())]),
            created_at_ms: at,
            expires_at_ms: at + 1000,
            idle_deadline_ms: at + 500,
            queue_wait_ms: 3,
            ended_at_ms: None,
            end_reason: None,
            replica: "r-1".into(),
            artifacts: None,
            emulation: Default::default(),
            proxy_id: String::new(),
            bytes: (0, 0),
        }
    }

    fn tenant(id: &str, max_slots: u32) -> TenantRecord {
        TenantRecord {
            id: id.into(),
            max_slots,
            max_queue: 10,
            max_session_ttl_ms: 0,
            idle_timeout_ms: 0,
            allow_hosts: vec!["a.test".into()],
            allow_private_networks: true,
            isolation: Isolation::Context,
            max_memory_mb: 512,
            default_record: RecordMode::OnFailure,
            max_file_mb: 7,
            max_artifact_mb: 9,
            artifact_ttl_s: 11,
            default_proxy: String::new(),
            max_session_bytes: 0,
        }
    }

    #[tokio::test]
    async fn sessions_tenants_and_tokens_round_trip_on_every_backend() {
        let dir = tempfile::tempdir().unwrap();
        for url in backends(dir.path()).await {
            let store = Store::open(&url).await.unwrap();
            store.insert_session(&record("s-1", "a", 10), "acquired").await.unwrap();
            store.insert_session(&record("s-2", "b", 20), "acquired").await.unwrap();
            assert!(store.end_session("s-1", SessionState::Closed, 30, "released", (0, 0)).await.unwrap());
            assert!(
                !store.end_session("s-1", SessionState::Expired, 40, "late", (0, 0)).await.unwrap(),
                "terminal is final"
            );
            let (created, epoch) = store.put_tenant(&tenant("t", 2), 1).await.unwrap();
            assert!(created, "new");
            assert_eq!(store.put_tenant(&tenant("t", 3), 2).await.unwrap(), (false, epoch.clone()), "replaced");
            assert!(store.revoke("jti-1", 5).await.unwrap());
            assert!(!store.revoke("jti-1", 6).await.unwrap(), "revoked once");
            store.close().await;

            // Reopen: everything is on disk.
            let store = Store::open(&url).await.unwrap();
            let backend = store.backend_name();
            let s1 = store.session("s-1").await.unwrap().unwrap();
            assert_eq!(
                (s1.state, s1.ended_at_ms, s1.labels["job"].as_str()),
                (SessionState::Closed, Some(30), "42"),
                "{backend}"
            );
            let t = store.transitions("s-1").await.unwrap();
            assert_eq!(
                t.iter().map(|t| (t.state, t.at_ms)).collect::<Vec<_>>(),
                vec![(SessionState::Ready, 10), (SessionState::Closed, 30)],
                "{backend}"
            );
            let only_a = store
                .sessions(&SessionFilter { tenant: Some("a".into()), limit: 10, ..Default::default() })
                .await
                .unwrap();
            assert_eq!(only_a.len(), 1, "{backend}");
            let live = store
                .sessions(&SessionFilter { state: Some(SessionState::Ready), limit: 10, ..Default::default() })
                .await
                .unwrap();
            assert_eq!(live.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), vec!["s-2"], "{backend}");
            let by = |subject: &str| SessionFilter { subject: Some(subject.into()), limit: 10, ..Default::default() };
            assert_eq!(store.sessions(&by("ci")).await.unwrap().len(), 2, "{backend}");
            assert!(store.sessions(&by("someone-else")).await.unwrap().is_empty(), "{backend}");
            assert!(store.session("nope").await.unwrap().is_none());
            assert_eq!(store.tenant("t").await.unwrap(), Some(tenant("t", 3)), "{backend}");
            assert_eq!(store.revoked().await.unwrap(), vec!["jti-1".to_string()], "{backend}");
            // r-1 never beat a heartbeat: its live session is left for the caller to crash.
            assert_eq!(store.sweep_replicas("r-2", 0).await.unwrap(), vec!["s-2".to_string()], "{backend}");
            assert_eq!(store.tenant_epoch("t").await.unwrap(), Some(epoch.clone()), "{backend}");
            assert!(store.tenant_epochs().await.unwrap().contains(&("t".to_string(), epoch.clone())));
            assert!(store.delete_tenant("t").await.unwrap());
            assert_eq!(store.tenant("t").await.unwrap(), None);
            assert_eq!(store.tenant_epoch("t").await.unwrap(), None);
            // The same id again is another tenant: a new epoch.
            let (created, again) = store.put_tenant(&tenant("t", 1), 3).await.unwrap();
            assert!(created && again != epoch && again.len() == 32, "{backend}: {again}");
        }
    }

    #[tokio::test]
    async fn a_tenant_slot_is_taken_once_across_replicas() {
        let dir = tempfile::tempdir().unwrap();
        for url in backends(dir.path()).await {
            // Two handles, as two replicas would have.
            let (one, two) = (Store::open(&url).await.unwrap(), Store::connect(&url).await.unwrap());
            let backend = one.backend_name();
            one.heartbeat("r-1", &ReplicaAddrs::default(), 1_000).await.unwrap();
            two.heartbeat("r-2", &ReplicaAddrs::default(), 1_000).await.unwrap();
            // Racing for the single slot: exactly one wins.
            let (a, b) = tokio::join!(
                one.claim_slot("c-1", "t", "r-1", 1, 1_000, 0),
                two.claim_slot("c-2", "t", "r-2", 1, 1_000, 0)
            );
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!(a ^ b, "{backend}: exactly one of two racing replicas wins the last slot ({a}, {b})");
            let (won, winner, loser_store, loser) =
                if a { ("c-1", "r-1", &two, "r-2") } else { ("c-2", "r-2", &one, "r-1") };
            assert!(!loser_store.claim_slot("c-3", "t", loser, 1, 1_000, 0).await.unwrap(), "{backend}: still taken");
            // Another tenant is not affected.
            assert!(loser_store.claim_slot("c-4", "u", loser, 1, 1_000, 0).await.unwrap(), "{backend}");
            // Released: the other replica gets it.
            one.release_slot(won).await.unwrap();
            assert!(loser_store.claim_slot("c-5", "t", loser, 1, 1_000, 0).await.unwrap(), "{backend}: freed");
            // A replica whose heartbeat is stale no longer holds its slots.
            let fresh = winner;
            one.heartbeat(fresh, &ReplicaAddrs::default(), 20_000).await.unwrap();
            assert!(!one.claim_slot("c-6", "t", fresh, 1, 20_000, 1_000).await.unwrap(), "{backend}: fresh enough");
            assert!(one.claim_slot("c-6", "t", fresh, 1, 20_000, 10_000).await.unwrap(), "{backend}: {loser} is stale");
            // Deregistering drops a replica's claims; its next beat learns it is gone.
            assert!(one.beat(fresh, 20_500).await.unwrap(), "{backend}: registered");
            one.deregister(fresh).await.unwrap();
            assert!(!one.beat(fresh, 21_000).await.unwrap(), "{backend}: swept replicas hear of it");
            one.heartbeat(fresh, &ReplicaAddrs::default(), 20_000).await.unwrap();
            assert!(one.claim_slot("c-7", "t", fresh, 1, 20_000, 10_000).await.unwrap(), "{backend}");
        }
    }

    #[tokio::test]
    async fn a_live_session_names_its_replica_and_where_to_reach_it() {
        let dir = tempfile::tempdir().unwrap();
        for url in backends(dir.path()).await {
            let store = Store::open(&url).await.unwrap();
            let backend = store.backend_name();
            let addrs = ReplicaAddrs { grpc: "10.0.0.7:50051".into(), http: "10.0.0.7:8080".into() };
            store.heartbeat("r-1", &addrs, 1_000).await.unwrap();
            store.heartbeat("r-2", &ReplicaAddrs::default(), 5_000).await.unwrap();
            store.insert_session(&record("s-1", "a", 10), "acquired").await.unwrap();
            let owner = store.session_owner("s-1").await.unwrap().expect("live session has an owner");
            assert_eq!((owner.tenant.as_str(), owner.subject.as_str()), ("a", "ci"), "{backend}");
            let owner = owner.replica;
            assert_eq!(
                (owner.id.as_str(), owner.grpc_addr.as_str(), owner.http_addr.as_str()),
                ("r-1", "10.0.0.7:50051", "10.0.0.7:8080"),
                "{backend}"
            );
            assert_eq!(store.session("s-1").await.unwrap().unwrap().replica, "r-1", "{backend}");
            assert_eq!(
                store.live_sessions_of("a").await.unwrap(),
                vec![("s-1".to_string(), "r-1".to_string())],
                "{backend}"
            );
            // A moved address is seen at once; stale replicas are left out of the live set.
            let moved = ReplicaAddrs { grpc: "10.0.0.8:50051".into(), http: "10.0.0.8:8080".into() };
            store.heartbeat("r-1", &moved, 2_000).await.unwrap();
            assert_eq!(
                store.session_owner("s-1").await.unwrap().unwrap().replica.grpc_addr,
                "10.0.0.8:50051",
                "{backend}"
            );
            let live: Vec<String> = store.replicas(3_000).await.unwrap().into_iter().map(|r| r.id).collect();
            assert_eq!(live, vec!["r-2".to_string()], "{backend}");
            // Ended, or its replica gone: no owner to forward to.
            store.end_session("s-1", SessionState::Closed, 30, "released", (0, 0)).await.unwrap();
            assert_eq!(store.session_owner("s-1").await.unwrap(), None, "{backend}");
            assert!(store.live_sessions_of("a").await.unwrap().is_empty(), "{backend}");
            store.insert_session(&record("s-2", "a", 40), "acquired").await.unwrap();
            store.deregister("r-1").await.unwrap();
            assert_eq!(store.session_owner("s-2").await.unwrap(), None, "{backend}");
        }
    }

    #[tokio::test]
    async fn concurrent_audit_writers_extend_one_chain() {
        let dir = tempfile::tempdir().unwrap();
        for url in backends(dir.path()).await {
            let (one, two) = (Store::open(&url).await.unwrap(), Store::connect(&url).await.unwrap());
            let entry = |n: usize| Entry { tenant: "t".into(), rpc: format!("/r{n}"), ..Default::default() };
            let batch: Vec<Entry> = (0..5).map(entry).collect();
            let writes = (0..10).map(|i| {
                let (store, batch) = (if i % 2 == 0 { one.clone() } else { two.clone() }, batch.clone());
                tokio::spawn(async move { store.append_audit(&[Batch::new(batch, i)], false).await })
            });
            for w in futures::future::join_all(writes).await {
                w.unwrap().unwrap();
            }
            let all = one.audit_after(0, 1000).await.unwrap();
            assert_eq!(crate::audit::chain::verify_chain(&all), (50, None), "{}", one.backend_name());
            let newest = one.audit_query(&AuditFilter { limit: 3, ..Default::default() }).await.unwrap();
            assert_eq!(newest.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![50, 49, 48]);
        }
    }

    #[tokio::test]
    async fn spooled_groups_go_in_at_once_each_with_its_time_after_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        for url in backends(dir.path()).await {
            let store = Store::open(&url).await.unwrap();
            let entry = |rpc: &str| Entry { tenant: "t".into(), rpc: rpc.into(), ..Default::default() };
            store.append_audit(&[Batch::new(vec![entry("/before")], 100)], false).await.unwrap();
            let (first, second) = (Batch::new(vec![entry("/a"), entry("/b")], 10), Batch::new(vec![entry("/c")], 20));
            store.append_audit(&[first, second], false).await.unwrap();
            let all = store.audit_after(0, 1000).await.unwrap();
            assert_eq!(crate::audit::chain::verify_chain(&all), (4, None), "{}", store.backend_name());
            let got: Vec<(u64, i64, &str)> = all.iter().map(|r| (r.seq, r.at_ms, r.entry.rpc.as_str())).collect();
            assert_eq!(got, [(1, 100, "/before"), (2, 10, "/a"), (3, 10, "/b"), (4, 20, "/c")]);
        }
    }

    /// A write cut while its commit was on its way is retried not knowing whether it went in:
    /// the batch that did is skipped, the one that did not is chained, and a batch offered as
    /// new with an id the chain has is refused (the index holds).
    #[tokio::test]
    async fn a_retried_batch_already_in_the_chain_is_not_chained_twice() {
        let dir = tempfile::tempdir().unwrap();
        for url in backends(dir.path()).await {
            let store = Store::open(&url).await.unwrap();
            let entry = |rpc: &str| Entry { tenant: "t".into(), rpc: rpc.into(), ..Default::default() };
            let went_in = Batch::new(vec![entry("/a"), entry("/b")], 10);
            store.append_audit(std::slice::from_ref(&went_in), false).await.unwrap();
            let next = Batch::new(vec![entry("/c")], 20);
            store.append_audit(&[went_in.clone(), next.clone()], true).await.unwrap();
            store.append_audit(&[went_in.clone(), next], true).await.unwrap();
            let all = store.audit_after(0, 1000).await.unwrap();
            assert_eq!(crate::audit::chain::verify_chain(&all), (3, None), "{}", store.backend_name());
            let got: Vec<(i64, &str)> = all.iter().map(|r| (r.at_ms, r.entry.rpc.as_str())).collect();
            assert_eq!(got, [(10, "/a"), (10, "/b"), (20, "/c")], "{}", store.backend_name());
            let again = store.append_audit(&[went_in], false).await.unwrap_err();
            assert!(again.to_string().to_lowercase().contains("unique"), "{}: {again}", store.backend_name());
            assert_eq!(store.audit_after(0, 1000).await.unwrap().len(), 3);
        }
    }

    #[tokio::test]
    async fn sqlite_files_are_owner_only_in_an_open_data_dir() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // The usual umask: a file created without an explicit mode would be 0644.
        // SAFETY: umask only swaps the process's file creation mask.
        let before = unsafe { libc::umask(0o022) };
        let old = dir.path().join("old.db");
        std::fs::write(&old, b"").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        for db in [dir.path().join("new.db"), old] {
            let store = Store::open(&format!("sqlite://{}", db.display())).await.unwrap();
            // A write, so the WAL and its index exist while the store is open.
            store.put_tenant(&tenant("t", 1), 1).await.unwrap();
            for suffix in ["", "-wal", "-shm"] {
                let file = std::path::PathBuf::from(format!("{}{suffix}", db.display()));
                assert_eq!(mode(&file), 0o600, "{}", file.display());
            }
            store.close().await;
        }
        // SAFETY: as above.
        unsafe { libc::umask(before) };
    }

    /// A write that fails because the disk is full must leave no transaction open on any
    /// connection: SQLite rolls the transaction back by itself on SQLITE_FULL, and a connection
    /// the pool still believes inside one would turn the next BEGIN into a SAVEPOINT whose
    /// rollback keeps the write lock. `max_page_count` makes the file "full" without a small
    /// disk; one connection makes the pool hand the failed one out again.
    #[tokio::test]
    async fn a_full_database_leaves_no_lock_held_and_loses_no_acknowledged_write() {
        use sqlx::Connection;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let setup = Store::open(&url).await.unwrap();
        setup.insert_session(&record("s-1", "a", 10), "acquired").await.unwrap();
        let pages: i64 = match &setup.backend {
            Backend::Sqlite(pool) => sqlx::query_scalar("PRAGMA page_count").fetch_one(pool).await.unwrap(),
            Backend::Postgres(_) => unreachable!(),
        };
        setup.close().await;
        let options = sqlite_options(SqliteConnectOptions::from_str(&url).unwrap())
            .pragma("max_page_count", (pages + 4).to_string());
        let store = Store::with(Backend::Sqlite(sqlite_pool(1).connect_with(options).await.unwrap()));
        let entry = |n: usize| Entry {
            tenant: "t".into(),
            target: "x".repeat(900),
            rpc: format!("/r{n}"),
            ..Default::default()
        };
        let mut written = 0;
        let full = loop {
            match store.append_audit(&[Batch::new((0..8).map(entry).collect(), 1)], false).await {
                Ok(()) => written += 8,
                Err(e) => break e,
            }
            assert!(written < 10_000, "the file never filled up");
        };
        assert!(full.to_string().contains("full"), "{full}");
        assert!(store.write_fault().is_some_and(|f| f.contains("full")), "{:?}", store.write_fault());
        // A transaction on the same connection that writes, then fails (a duplicate id): a
        // refusal of this one request, not of writes.
        let duplicate = store.insert_session(&record("s-1", "a", 20), "acquired").await.unwrap_err();
        assert!(!duplicate.refuses_writes(), "{duplicate}");
        // A write that needs no new page goes through, and the store says so.
        store.touch("s-1", 99).await.unwrap();
        assert_eq!(store.write_fault(), None);
        // Another connection can take the write lock at once: nobody holds it.
        let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("PRAGMA busy_timeout = 0").execute(&mut other).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE").execute(&mut other).await.expect("the write lock is free");
        sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
        // Every append that answered ok is on disk, as another connection sees it.
        let on_disk: i64 = sqlx::query_scalar("SELECT count(*) FROM audit").fetch_one(&mut other).await.unwrap();
        assert_eq!(on_disk, written as i64);
        other.close().await.unwrap();
        store.close().await;
    }

    #[tokio::test]
    async fn unsupported_urls_are_named() {
        let err = Store::open("mysql://x").await.err().unwrap();
        assert!(err.to_string().contains("mysql"), "{err}");
    }

    #[test]
    fn urls_are_shown_without_their_password() {
        for (url, shown) in [
            ("postgres://bp:s3cret@db.example:5432/pool", "postgres://bp@db.example:5432/pool"),
            (
                "postgresql://bp:p@ss:w@rd@10.0.0.1/pool?sslmode=require",
                "postgresql://bp@10.0.0.1/pool?sslmode=require",
            ),
            ("postgres://db/pool?user=bp&password=s3cret", "postgres://db/pool?..."),
            ("postgres://bp@db/pool", "postgres://bp@db/pool"),
            ("sqlite:///var/lib/browserpool/data/browserpool.db", "sqlite:///var/lib/browserpool/data/browserpool.db"),
            ("sqlite://.browserpool/browserpool.db", "sqlite://.browserpool/browserpool.db"),
        ] {
            assert_eq!(url_without_password(url), shown, "{url}");
        }
    }
}
