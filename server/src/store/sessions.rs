//! Sessions: their records and the transitions they went through.

use super::*;

impl Store {
    /// Records a new session (run by `s.replica`) and its first transition, atomically.
    pub async fn insert_session(&self, s: &SessionRecord, reason: &str) -> Result<(), StoreError> {
        self.noted(async {
            let labels = serde_json::to_string(&s.labels).unwrap_or_else(|_| "{}".into());
            let emulation = (!s.emulation.is_empty()).then(|| serde_json::to_string(&s.emulation).unwrap_or_default());
            with_pool!(self, pool => {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "INSERT INTO sessions (id, tenant, subject, worker_id, state, labels, created_at_ms, expires_at_ms, \
                     idle_deadline_ms, queue_wait_ms, replica, emulation, proxy_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
                     $9, $10, $11, $12, $13)",
                )
                .bind(&s.id)
                .bind(&s.tenant)
                .bind(&s.subject)
                .bind(&s.worker_id)
                .bind(s.state.as_str())
                .bind(&labels)
                .bind(s.created_at_ms)
                .bind(s.expires_at_ms)
                .bind(s.idle_deadline_ms)
                .bind(s.queue_wait_ms as i64)
                .bind(&s.replica)
                .bind(emulation.as_deref())
                .bind((!s.proxy_id.is_empty()).then_some(s.proxy_id.as_str()))
                .execute(&mut *tx)
                .await?;
                sqlx::query(TRANSITION).bind(&s.id).bind(s.state.as_str()).bind(s.created_at_ms).bind(reason).execute(&mut *tx).await?;
                tx.commit().await?;
            });
            Ok(())
        }
        .await)
    }

    /// Moves a session to a terminal state (CLOSED, EXPIRED, CRASHED, KILLED) with the network
    /// bytes (sent, received) it carried, and records the transition. Returns false, changing
    /// nothing, when it already was terminal.
    pub async fn end_session(
        &self,
        id: &str,
        state: SessionState,
        at_ms: i64,
        reason: &str,
        bytes: (u64, u64),
    ) -> Result<bool, StoreError> {
        self.noted(async {
            with_pool!(self, pool => {
                let mut tx = pool.begin().await?;
                let changed = sqlx::query(
                    "UPDATE sessions SET state = $1, ended_at_ms = $2, end_reason = $3, bytes_sent = $4, bytes_received = $5 \
                     WHERE id = $6 AND ended_at_ms IS NULL",
                )
                .bind(state.as_str())
                .bind(at_ms)
                .bind(reason)
                .bind(bytes.0.min(i64::MAX as u64) as i64)
                .bind(bytes.1.min(i64::MAX as u64) as i64)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if changed == 0 {
                    return Ok(false);
                }
                sqlx::query(TRANSITION).bind(id).bind(state.as_str()).bind(at_ms).bind(reason).execute(&mut *tx).await?;
                tx.commit().await?;
            });
            Ok(true)
        }
        .await)
    }

    /// Records what ended session `id` left (JSON; `None`: nothing, or it was deleted).
    pub async fn set_session_artifacts(&self, id: &str, artifacts: Option<&str>) -> Result<(), StoreError> {
        with_pool!(self, pool => {
            sqlx::query("UPDATE sessions SET artifacts = $1 WHERE id = $2").bind(artifacts).bind(id).execute(pool).await?;
        });
        Ok(())
    }

    /// Pushes the idle deadline of a live session.
    pub async fn touch(&self, id: &str, idle_deadline_ms: i64) -> Result<(), StoreError> {
        self.noted(async {
            with_pool!(self, pool => { sqlx::query("UPDATE sessions SET idle_deadline_ms = $1 WHERE id = $2 AND ended_at_ms IS NULL")
                .bind(idle_deadline_ms)
                .bind(id)
                .execute(pool)
                .await?; });
            Ok(())
        }
        .await)
    }

    /// One session by id.
    pub async fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT * FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|r| Cols(&r).session())
            .transpose())
    }

    /// Sessions matching the filter, oldest first.
    pub async fn sessions(&self, f: &SessionFilter) -> Result<Vec<SessionRecord>, StoreError> {
        with_pool!(self, pool => sqlx::query(
            "SELECT * FROM sessions WHERE ($1 IS NULL OR tenant = $1) AND ($2 IS NULL OR state = $2) \
             AND ($5 IS NULL OR subject = $5) ORDER BY created_at_ms, id LIMIT $3 OFFSET $4",
        )
        .bind(f.tenant.as_deref())
        .bind(f.state.map(|s| s.as_str()))
        .bind(f.limit as i64)
        .bind(f.offset as i64)
        .bind(f.subject.as_deref())
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Cols(r).session())
        .collect())
    }

    /// Every recorded state change of a session, in order.
    pub async fn transitions(&self, id: &str) -> Result<Vec<Transition>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT state, at_ms, reason FROM session_transitions WHERE session_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| {
                let r = Cols(r);
                Ok(Transition { state: parse_state(&r.get::<String>("state")?)?, at_ms: r.get("at_ms")?, reason: r.get("reason")? })
            })
            .collect())
    }
}
