//! Replicas (registration, heartbeats, sweeping those gone) and the tenant slots they claim.

use super::*;

impl Store {
    /// Beats a registered replica's heartbeat; false when it is not registered (any more:
    /// another replica found it silent for too long and swept it).
    pub async fn beat(&self, replica: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.noted(
            async {
                let n = with_pool!(self, pool => sqlx::query("UPDATE replicas SET heartbeat_ms = $1 WHERE id = $2")
                .bind(now_ms)
                .bind(replica)
                .execute(pool)
                .await?
                .rows_affected());
                Ok(n > 0)
            }
            .await,
        )
    }

    /// Registers a replica with the addresses other replicas reach it at (or beats its
    /// heartbeat when it is registered).
    pub async fn heartbeat(&self, replica: &str, addrs: &ReplicaAddrs, now_ms: i64) -> Result<(), StoreError> {
        self.noted(
            async {
                with_pool!(self, pool => { sqlx::query(
                "INSERT INTO replicas (id, started_at_ms, heartbeat_ms, grpc_addr, http_addr) VALUES ($1, $2, $2, $3, $4) \
                 ON CONFLICT (id) DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms, \
                 grpc_addr = excluded.grpc_addr, http_addr = excluded.http_addr",
            )
            .bind(replica)
            .bind(now_ms)
            .bind(&addrs.grpc)
            .bind(&addrs.http)
            .execute(pool)
            .await?; });
                Ok(())
            }
            .await,
        )
    }

    /// Replicas whose heartbeat is at or after `fresh_since`, by id.
    pub async fn replicas(&self, fresh_since: i64) -> Result<Vec<ReplicaRecord>, StoreError> {
        with_pool!(self, pool => sqlx::query(
            "SELECT id, grpc_addr, http_addr, heartbeat_ms FROM replicas WHERE heartbeat_ms >= $1 ORDER BY id",
        )
        .bind(fresh_since)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Cols(r).replica())
        .collect())
    }

    /// The replica holding live session `id`, with the session's tenant and subject, when the
    /// session is live and that replica is registered (whatever its heartbeat's age: the
    /// caller decides).
    pub async fn session_owner(&self, id: &str) -> Result<Option<SessionOwner>, StoreError> {
        self.replica_of_session(id, "AND s.ended_at_ms IS NULL").await
    }

    /// The replica that held session `id`, live or ended, when that replica is registered: an
    /// ended session's kept files are there.
    pub async fn session_keeper(&self, id: &str) -> Result<Option<SessionOwner>, StoreError> {
        self.replica_of_session(id, "").await
    }

    async fn replica_of_session(&self, id: &str, only: &'static str) -> Result<Option<SessionOwner>, StoreError> {
        let query = format!(
            "SELECT r.id, r.grpc_addr, r.http_addr, r.heartbeat_ms, s.tenant, s.subject \
             FROM sessions s JOIN replicas r ON r.id = s.replica WHERE s.id = $1 {only}"
        );
        with_pool!(self, pool => sqlx::query(&query)
        .bind(id)
        .fetch_optional(pool)
        .await?
        .map(|r| {
            let cols = Cols(&r);
            Ok(SessionOwner { replica: cols.replica()?, tenant: cols.get("tenant")?, subject: cols.get("subject")? })
        })
        .transpose())
    }

    /// Ids of a tenant's live sessions, on every replica, with the replica holding each.
    pub async fn live_sessions_of(&self, tenant: &str) -> Result<Vec<(String, String)>, StoreError> {
        with_pool!(self, pool => sqlx::query(
            "SELECT id, replica FROM sessions WHERE tenant = $1 AND ended_at_ms IS NULL ORDER BY created_at_ms, id",
        )
        .bind(tenant)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Ok((Cols(r).get("id")?, Cols(r).get("replica")?)))
        .collect())
    }

    /// A replica leaves: its row and its slot claims go.
    pub async fn deregister(&self, replica: &str) -> Result<(), StoreError> {
        self.noted(
            async {
                with_pool!(self, pool => {
                    let mut tx = pool.begin().await?;
                    sqlx::query("DELETE FROM slot_claims WHERE replica = $1").bind(replica).execute(&mut *tx).await?;
                    sqlx::query("DELETE FROM replicas WHERE id = $1").bind(replica).execute(&mut *tx).await?;
                    tx.commit().await?;
                });
                Ok(())
            }
            .await,
        )
    }

    /// Forgets replicas whose heartbeat is older than `stale_before` and their slot claims;
    /// returns the live sessions they (or runs before replicas were recorded) left behind, for
    /// the caller to mark crashed. Never returns sessions of `me`.
    pub async fn sweep_replicas(&self, me: &str, stale_before: i64) -> Result<Vec<String>, StoreError> {
        self.noted(
            async {
                with_pool!(self, pool => {
                    let mut tx = pool.begin().await?;
                    // Replicas first: a row beaten meanwhile is re-checked and kept (PostgreSQL), and
                    // only the claims of replicas actually removed go with them.
                    sqlx::query("DELETE FROM replicas WHERE heartbeat_ms < $1 AND id <> $2")
                        .bind(stale_before)
                        .bind(me)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("DELETE FROM slot_claims WHERE replica NOT IN (SELECT id FROM replicas)")
                        .execute(&mut *tx)
                        .await?;
                    let rows = sqlx::query(
                        "SELECT id FROM sessions WHERE ended_at_ms IS NULL AND replica <> $1 \
                         AND replica NOT IN (SELECT id FROM replicas)",
                    )
                    .bind(me)
                    .fetch_all(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    rows.iter().map(|r| Cols(r).get("id")).collect()
                })
            }
            .await,
        )
    }

    /// Takes one of `tenant`'s `max_slots`, counted over every replica whose heartbeat is not
    /// older than `stale_before`, under the tenant's lock. Returns false when all are taken.
    pub async fn claim_slot(
        &self,
        claim: &str,
        tenant: &str,
        replica: &str,
        max_slots: u32,
        now_ms: i64,
        stale_before: i64,
    ) -> Result<bool, StoreError> {
        self.noted(
            async {
                with_pool!(self, pool => {
                    let mut tx = pool.begin().await?;
                    sqlx::query(LOCK).bind(format!("tenant:{tenant}")).execute(&mut *tx).await?;
                    let row = sqlx::query(
                        "SELECT count(*) AS n FROM slot_claims c JOIN replicas r ON r.id = c.replica \
                         WHERE c.tenant = $1 AND r.heartbeat_ms >= $2",
                    )
                    .bind(tenant)
                    .bind(stale_before)
                    .fetch_one(&mut *tx)
                    .await?;
                    let held: i64 = Cols(&row).get("n")?;
                    if held >= max_slots as i64 {
                        tx.rollback().await?;
                        return Ok(false);
                    }
                    sqlx::query("INSERT INTO slot_claims (id, tenant, replica, created_at_ms) VALUES ($1, $2, $3, $4)")
                        .bind(claim)
                        .bind(tenant)
                        .bind(replica)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                });
                Ok(true)
            }
            .await,
        )
    }

    /// Gives a claimed slot back.
    pub async fn release_slot(&self, claim: &str) -> Result<(), StoreError> {
        self.noted(async {
            with_pool!(self, pool => { sqlx::query("DELETE FROM slot_claims WHERE id = $1").bind(claim).execute(pool).await?; });
            Ok(())
        }
        .await)
    }
}
