//! Tenants (quotas, policy, the epoch their tokens carry) and revoked tokens.

use super::*;

impl Store {
    /// Creates the tenant if it does not exist; an existing one is left as it is.
    pub async fn ensure_tenant(&self, t: &TenantRecord, now_ms: i64) -> Result<(), StoreError> {
        self.write_tenant(t, now_ms, "DO NOTHING").await?;
        Ok(())
    }

    /// Creates or replaces a tenant's quotas and policy; returns whether it was new, and its
    /// epoch: a fresh one when created, the one it had when replaced (its tokens live on).
    pub async fn put_tenant(&self, t: &TenantRecord, now_ms: i64) -> Result<(bool, String), StoreError> {
        let fresh = new_epoch();
        let epoch = self
            .write_tenant_with(
                t,
                &fresh,
                now_ms,
                "DO UPDATE SET max_slots = excluded.max_slots, max_queue = excluded.max_queue, \
                 max_session_ttl_ms = excluded.max_session_ttl_ms, idle_timeout_ms = excluded.idle_timeout_ms, \
                 allow_hosts = excluded.allow_hosts, allow_private_networks = excluded.allow_private_networks, \
                 isolation = excluded.isolation, max_memory_mb = excluded.max_memory_mb, \
                 default_record = excluded.default_record, max_file_mb = excluded.max_file_mb, \
                 max_artifact_mb = excluded.max_artifact_mb, artifact_ttl_s = excluded.artifact_ttl_s, \
                 default_proxy = excluded.default_proxy, max_session_bytes = excluded.max_session_bytes",
            )
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("tenant {} upsert returned no row", t.id)))?;
        // The row kept its epoch unless this statement inserted it: one statement, no race
        // with another replica's put.
        Ok((epoch == fresh, epoch))
    }

    /// Inserts `t` with a fresh epoch; `on_conflict` says what an existing row does. Returns the
    /// row's epoch, or `None` when the conflict clause wrote nothing.
    async fn write_tenant(
        &self,
        t: &TenantRecord,
        now_ms: i64,
        on_conflict: &str,
    ) -> Result<Option<String>, StoreError> {
        self.write_tenant_with(t, &new_epoch(), now_ms, on_conflict).await
    }

    async fn write_tenant_with(
        &self,
        t: &TenantRecord,
        epoch: &str,
        now_ms: i64,
        on_conflict: &str,
    ) -> Result<Option<String>, StoreError> {
        self.noted(
            async {
                let sql = format!(
                    "INSERT INTO tenants (id, max_slots, max_queue, max_session_ttl_ms, idle_timeout_ms, allow_hosts, \
                 allow_private_networks, created_at_ms, epoch, isolation, max_memory_mb, default_record, \
                 max_file_mb, max_artifact_mb, artifact_ttl_s, default_proxy, max_session_bytes) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
                 ON CONFLICT (id) {on_conflict} RETURNING epoch"
                );
                let hosts = serde_json::to_string(&t.allow_hosts).unwrap_or_else(|_| "[]".into());
                with_pool!(self, pool => sqlx::query(&sql)
                .bind(&t.id)
                .bind(t.max_slots as i64)
                .bind(t.max_queue as i64)
                .bind(t.max_session_ttl_ms as i64)
                .bind(t.idle_timeout_ms as i64)
                .bind(&hosts)
                .bind(t.allow_private_networks)
                .bind(now_ms)
                .bind(epoch)
                .bind(t.isolation.as_str())
                .bind(t.max_memory_mb as i64)
                .bind(t.default_record.as_i64())
                .bind(t.max_file_mb as i64)
                .bind(t.max_artifact_mb as i64)
                .bind(t.artifact_ttl_s as i64)
                .bind(&t.default_proxy)
                .bind(t.max_session_bytes.min(i64::MAX as u64) as i64)
                .fetch_optional(pool)
                .await?
                .map(|r| r.try_get::<String, _>("epoch"))
                .transpose()
                .map_err(StoreError::from))
            }
            .await,
        )
    }

    /// The tenant's epoch, if the tenant exists.
    pub async fn tenant_epoch(&self, id: &str) -> Result<Option<String>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT epoch FROM tenants WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|r| r.try_get::<String, _>("epoch"))
            .transpose()
            .map_err(StoreError::from))
    }

    /// Every tenant's id and epoch.
    pub async fn tenant_epochs(&self) -> Result<Vec<(String, String)>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT id, epoch FROM tenants")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| Ok((r.try_get::<String, _>("id")?, r.try_get::<String, _>("epoch")?)))
            .collect())
    }

    /// Every tenant, by id.
    pub async fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT * FROM tenants ORDER BY id")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| Cols(r).tenant())
            .collect())
    }

    /// Deletes a tenant; returns whether it existed.
    pub async fn delete_tenant(&self, id: &str) -> Result<bool, StoreError> {
        self.noted(async {
            let done = with_pool!(self, pool => sqlx::query("DELETE FROM tenants WHERE id = $1").bind(id).execute(pool).await?.rows_affected());
            Ok(done > 0)
        }
        .await)
    }

    /// The tenant, if it exists.
    pub async fn tenant(&self, id: &str) -> Result<Option<TenantRecord>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT * FROM tenants WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|r| Cols(&r).tenant())
            .transpose())
    }

    /// Puts a token id on the deny-list; returns false when it already was.
    pub async fn revoke(&self, jti: &str, at_ms: i64) -> Result<bool, StoreError> {
        self.noted(async {
            let done = with_pool!(self, pool => sqlx::query("INSERT INTO revoked_tokens (jti, revoked_at_ms) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING")
                .bind(jti)
                .bind(at_ms)
                .execute(pool)
                .await?
                .rows_affected());
            Ok(done > 0)
        }
        .await)
    }

    /// Every revoked token id.
    pub async fn revoked(&self) -> Result<Vec<String>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT jti FROM revoked_tokens")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| Cols(r).get("jti"))
            .collect())
    }
}
