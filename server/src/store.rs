//! Durable records behind one boundary: callers use [`Store`]'s methods and never see SQL or
//! the backend. SQLite (WAL) is built; a Postgres backend slots in as another `Backend` arm
//! with its own migrations, without touching callers.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::sessions::SessionState;

/// Store failures; mapped to gRPC `INTERNAL`/`UNAVAILABLE` by the error module.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database url {0:?} is not supported (only sqlite:// is built so far)")]
    UnsupportedUrl(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

/// A session row.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    pub tenant: String,
    pub subject: String,
    pub worker_id: String,
    pub state: SessionState,
    pub labels: BTreeMap<String, String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub idle_deadline_ms: i64,
    pub queue_wait_ms: u32,
    pub ended_at_ms: Option<i64>,
    pub end_reason: Option<String>,
}

/// One state change of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub state: SessionState,
    pub at_ms: i64,
    pub reason: String,
}

/// A tenant's quotas and policy.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantRecord {
    pub id: String,
    pub max_slots: u32,
    pub max_queue: u32,
    pub max_session_ttl_ms: u32,
    pub idle_timeout_ms: u32,
    pub allow_hosts: Vec<String>,
    pub allow_private_networks: bool,
}

/// Which sessions a listing wants.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only this tenant; `None` = all (admin).
    pub tenant: Option<String>,
    /// Only this state; `None` = all.
    pub state: Option<SessionState>,
    /// Page size, already capped by the caller.
    pub limit: u32,
    /// Rows to skip (the page token).
    pub offset: u64,
}

#[derive(Clone)]
enum Backend {
    Sqlite(SqlitePool),
}

/// The durable store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

impl Store {
    /// Opens (creating if missing) the database at `url` and applies pending migrations.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let store = Store::connect(url).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Opens without migrating.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(5));
            let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options).await?;
            return Ok(Store { backend: Backend::Sqlite(pool) });
        }
        Err(StoreError::UnsupportedUrl(url.split("://").next().unwrap_or(url).to_string()))
    }

    /// Applies the embedded migrations of this backend.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(pool) => SQLITE_MIGRATIONS.run(pool).await?,
        }
        Ok(())
    }

    /// Closes the connections.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(pool) => pool.close().await,
        }
    }

    /// Creates the tenant if it does not exist; an existing one is left as it is.
    pub async fn ensure_tenant(&self, t: &TenantRecord, now_ms: i64) -> Result<(), StoreError> {
        self.write_tenant(t, now_ms, "DO NOTHING").await
    }

    /// Creates or replaces a tenant; returns whether it was new.
    pub async fn put_tenant(&self, t: &TenantRecord, now_ms: i64) -> Result<bool, StoreError> {
        let existed = self.tenant(&t.id).await?.is_some();
        self.write_tenant(
            t,
            now_ms,
            "DO UPDATE SET max_slots = excluded.max_slots, max_queue = excluded.max_queue, \
             max_session_ttl_ms = excluded.max_session_ttl_ms, idle_timeout_ms = excluded.idle_timeout_ms, \
             allow_hosts = excluded.allow_hosts, allow_private_networks = excluded.allow_private_networks",
        )
        .await?;
        Ok(!existed)
    }

    async fn write_tenant(&self, t: &TenantRecord, now_ms: i64, on_conflict: &str) -> Result<(), StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let sql = format!(
            "INSERT INTO tenants (id, max_slots, max_queue, max_session_ttl_ms, idle_timeout_ms, allow_hosts, \
             allow_private_networks, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) {on_conflict}"
        );
        sqlx::query(&sql)
            .bind(&t.id)
            .bind(t.max_slots as i64)
            .bind(t.max_queue as i64)
            .bind(t.max_session_ttl_ms as i64)
            .bind(t.idle_timeout_ms as i64)
            .bind(serde_json::to_string(&t.allow_hosts).unwrap_or_else(|_| "[]".into()))
            .bind(t.allow_private_networks)
            .bind(now_ms)
            .execute(pool)
            .await?;
        Ok(())
    }

    /// Every tenant, by id.
    pub async fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let ids: Vec<String> = sqlx::query("SELECT id FROM tenants ORDER BY id")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(t) = self.tenant(&id).await? {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// Deletes a tenant; returns whether it existed.
    pub async fn delete_tenant(&self, id: &str) -> Result<bool, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        Ok(sqlx::query("DELETE FROM tenants WHERE id = ?").bind(id).execute(pool).await?.rows_affected() > 0)
    }

    /// The tenant, if it exists.
    pub async fn tenant(&self, id: &str) -> Result<Option<TenantRecord>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let row = sqlx::query("SELECT * FROM tenants WHERE id = ?").bind(id).fetch_optional(pool).await?;
        row.map(|r| {
            let hosts: String = r.try_get("allow_hosts")?;
            Ok(TenantRecord {
                id: r.try_get("id")?,
                max_slots: r.try_get::<i64, _>("max_slots")? as u32,
                max_queue: r.try_get::<i64, _>("max_queue")? as u32,
                max_session_ttl_ms: r.try_get::<i64, _>("max_session_ttl_ms")? as u32,
                idle_timeout_ms: r.try_get::<i64, _>("idle_timeout_ms")? as u32,
                allow_hosts: serde_json::from_str(&hosts)
                    .map_err(|e| StoreError::Corrupt(format!("tenant {id} allow_hosts: {e}")))?,
                allow_private_networks: r.try_get("allow_private_networks")?,
            })
        })
        .transpose()
    }

    /// Records a new session and its first transition, atomically.
    pub async fn insert_session(&self, s: &SessionRecord, reason: &str) -> Result<(), StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let mut tx = pool.begin().await?;
        sqlx::query(
            "INSERT INTO sessions (id, tenant, subject, worker_id, state, labels, created_at_ms, expires_at_ms, \
             idle_deadline_ms, queue_wait_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.id)
        .bind(&s.tenant)
        .bind(&s.subject)
        .bind(&s.worker_id)
        .bind(s.state.as_str())
        .bind(serde_json::to_string(&s.labels).unwrap_or_else(|_| "{}".into()))
        .bind(s.created_at_ms)
        .bind(s.expires_at_ms)
        .bind(s.idle_deadline_ms)
        .bind(s.queue_wait_ms as i64)
        .execute(&mut *tx)
        .await?;
        record_transition(&mut tx, &s.id, s.state, s.created_at_ms, reason).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Moves a session to a terminal state (CLOSED, EXPIRED, CRASHED, KILLED) and records the
    /// transition. Returns false, changing nothing, when it already was terminal.
    pub async fn end_session(
        &self,
        id: &str,
        state: SessionState,
        at_ms: i64,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let mut tx = pool.begin().await?;
        let changed = sqlx::query(
            "UPDATE sessions SET state = ?, ended_at_ms = ?, end_reason = ? WHERE id = ? AND ended_at_ms IS NULL",
        )
        .bind(state.as_str())
        .bind(at_ms)
        .bind(reason)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        record_transition(&mut tx, id, state, at_ms, reason).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Pushes the idle deadline of a live session.
    pub async fn touch(&self, id: &str, idle_deadline_ms: i64) -> Result<(), StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        sqlx::query("UPDATE sessions SET idle_deadline_ms = ? WHERE id = ? AND ended_at_ms IS NULL")
            .bind(idle_deadline_ms)
            .bind(id)
            .execute(pool)
            .await?;
        Ok(())
    }

    /// One session by id.
    pub async fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let row = sqlx::query("SELECT * FROM sessions WHERE id = ?").bind(id).fetch_optional(pool).await?;
        row.map(|r| session_from_row(&r)).transpose()
    }

    /// Sessions matching the filter, oldest first.
    pub async fn sessions(&self, f: &SessionFilter) -> Result<Vec<SessionRecord>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let rows = sqlx::query(
            "SELECT * FROM sessions WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR state = ?2) \
             ORDER BY created_at_ms, id LIMIT ?3 OFFSET ?4",
        )
        .bind(f.tenant.as_deref())
        .bind(f.state.map(|s| s.as_str()))
        .bind(f.limit as i64)
        .bind(f.offset as i64)
        .fetch_all(pool)
        .await?;
        rows.iter().map(session_from_row).collect()
    }

    /// Every recorded state change of a session, in order.
    pub async fn transitions(&self, id: &str) -> Result<Vec<Transition>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let rows =
            sqlx::query("SELECT state, at_ms, reason FROM session_transitions WHERE session_id = ? ORDER BY seq")
                .bind(id)
                .fetch_all(pool)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(Transition {
                    state: parse_state(&r.try_get::<String, _>("state")?)?,
                    at_ms: r.try_get("at_ms")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// Puts a token id on the deny-list; returns false when it already was.
    pub async fn revoke(&self, jti: &str, at_ms: i64) -> Result<bool, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let done =
            sqlx::query("INSERT INTO revoked_tokens (jti, revoked_at_ms) VALUES (?, ?) ON CONFLICT (jti) DO NOTHING")
                .bind(jti)
                .bind(at_ms)
                .execute(pool)
                .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Every revoked token id.
    pub async fn revoked(&self) -> Result<Vec<String>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let rows = sqlx::query("SELECT jti FROM revoked_tokens").fetch_all(pool).await?;
        rows.iter().map(|r| r.try_get("jti").map_err(StoreError::from)).collect()
    }

    /// The last (seq, hash) of the audit chain; (0, "") when empty.
    pub async fn audit_tail(&self) -> Result<(u64, String), StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let row = sqlx::query("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetch_optional(pool).await?;
        Ok(match row {
            Some(r) => (r.try_get::<i64, _>("seq")? as u64, r.try_get("hash")?),
            None => (0, String::new()),
        })
    }

    /// Appends chained records in one transaction.
    pub async fn append_audit(&self, records: &[crate::audit::Record]) -> Result<(), StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let mut tx = pool.begin().await?;
        for r in records {
            let e = &r.entry;
            sqlx::query(
                "INSERT INTO audit (seq, at_ms, tenant, subject, jti_hash, session_id, rpc, action, alias_of, target, \
                 outcome, code, duration_ms, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(r.seq as i64)
            .bind(r.at_ms)
            .bind(&e.tenant)
            .bind(&e.subject)
            .bind(&e.jti_hash)
            .bind(&e.session_id)
            .bind(&e.rpc)
            .bind(&e.action)
            .bind(&e.alias_of)
            .bind(&e.target)
            .bind(&e.outcome)
            .bind(&e.code)
            .bind(e.duration_ms as i64)
            .bind(&r.prev_hash)
            .bind(&r.hash)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Audit records matching the filter, newest first, at most `limit`.
    pub async fn audit_query(
        &self,
        tenant: Option<&str>,
        session_id: Option<&str>,
        action: Option<&str>,
        since_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<crate::audit::Record>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let rows = sqlx::query(
            "SELECT * FROM audit WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR session_id = ?2) \
             AND (?3 IS NULL OR action = ?3) AND (?4 IS NULL OR at_ms >= ?4) ORDER BY seq DESC LIMIT ?5",
        )
        .bind(tenant)
        .bind(session_id)
        .bind(action)
        .bind(since_ms)
        .bind(limit as i64)
        .fetch_all(pool)
        .await?;
        rows.iter().map(audit_from_row).collect()
    }

    /// The whole chain in order (for verification).
    pub async fn audit_all(&self) -> Result<Vec<crate::audit::Record>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let rows = sqlx::query("SELECT * FROM audit ORDER BY seq").fetch_all(pool).await?;
        rows.iter().map(audit_from_row).collect()
    }

    /// Sessions a previous run left live (it crashed or was killed): ids only.
    pub async fn live_session_ids(&self) -> Result<Vec<String>, StoreError> {
        let Backend::Sqlite(pool) = &self.backend;
        let rows = sqlx::query("SELECT id FROM sessions WHERE ended_at_ms IS NULL").fetch_all(pool).await?;
        rows.iter().map(|r| r.try_get("id").map_err(StoreError::from)).collect()
    }
}

/// Appends one state change inside the caller's transaction.
async fn record_transition(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    id: &str,
    state: SessionState,
    at_ms: i64,
    reason: &str,
) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO session_transitions (session_id, state, at_ms, reason) VALUES (?, ?, ?, ?)")
        .bind(id)
        .bind(state.as_str())
        .bind(at_ms)
        .bind(reason)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn audit_from_row(r: &sqlx::sqlite::SqliteRow) -> Result<crate::audit::Record, StoreError> {
    Ok(crate::audit::Record {
        seq: r.try_get::<i64, _>("seq")? as u64,
        at_ms: r.try_get("at_ms")?,
        entry: crate::audit::Entry {
            tenant: r.try_get("tenant")?,
            subject: r.try_get("subject")?,
            jti_hash: r.try_get("jti_hash")?,
            session_id: r.try_get("session_id")?,
            rpc: r.try_get("rpc")?,
            action: r.try_get("action")?,
            alias_of: r.try_get("alias_of")?,
            target: r.try_get("target")?,
            outcome: r.try_get("outcome")?,
            code: r.try_get("code")?,
            duration_ms: r.try_get::<i64, _>("duration_ms")? as u32,
        },
        prev_hash: r.try_get("prev_hash")?,
        hash: r.try_get("hash")?,
    })
}

fn parse_state(s: &str) -> Result<SessionState, StoreError> {
    SessionState::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown session state {s:?}")))
}

fn session_from_row(r: &sqlx::sqlite::SqliteRow) -> Result<SessionRecord, StoreError> {
    let labels: String = r.try_get("labels")?;
    Ok(SessionRecord {
        id: r.try_get("id")?,
        tenant: r.try_get("tenant")?,
        subject: r.try_get("subject")?,
        worker_id: r.try_get("worker_id")?,
        state: parse_state(&r.try_get::<String, _>("state")?)?,
        labels: serde_json::from_str(&labels).map_err(|e| StoreError::Corrupt(format!("labels: {e}")))?,
        created_at_ms: r.try_get("created_at_ms")?,
        expires_at_ms: r.try_get("expires_at_ms")?,
        idle_deadline_ms: r.try_get("idle_deadline_ms")?,
        queue_wait_ms: r.try_get::<i64, _>("queue_wait_ms")? as u32,
        ended_at_ms: r.try_get("ended_at_ms")?,
        end_reason: r.try_get("end_reason")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    #[tokio::test]
    async fn sessions_and_transitions_round_trip_in_a_real_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let store = Store::open(&url).await.unwrap();
        store.insert_session(&record("s-1", "a", 10), "acquired").await.unwrap();
        store.insert_session(&record("s-2", "b", 20), "acquired").await.unwrap();
        assert!(store.end_session("s-1", SessionState::Closed, 30, "released").await.unwrap());
        assert!(!store.end_session("s-1", SessionState::Expired, 40, "late").await.unwrap(), "terminal is final");
        drop(store);

        // Reopen: everything is on disk.
        let store = Store::open(&url).await.unwrap();
        let s1 = store.session("s-1").await.unwrap().unwrap();
        assert_eq!((s1.state, s1.ended_at_ms, s1.labels["job"].as_str()), (SessionState::Closed, Some(30), "42"));
        let t = store.transitions("s-1").await.unwrap();
        assert_eq!(
            t.iter().map(|t| (t.state, t.at_ms)).collect::<Vec<_>>(),
            vec![(SessionState::Ready, 10), (SessionState::Closed, 30)]
        );
        let only_a =
            store.sessions(&SessionFilter { tenant: Some("a".into()), limit: 10, ..Default::default() }).await.unwrap();
        assert_eq!(only_a.len(), 1);
        let live = store
            .sessions(&SessionFilter { state: Some(SessionState::Ready), limit: 10, ..Default::default() })
            .await
            .unwrap();
        assert_eq!(live.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), vec!["s-2"]);
        assert_eq!(store.live_session_ids().await.unwrap(), vec!["s-2".to_string()]);
        assert!(store.session("nope").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn unsupported_urls_are_named() {
        let err = Store::open("mysql://x").await.err().unwrap();
        assert!(err.to_string().contains("mysql"), "{err}");
    }
}
