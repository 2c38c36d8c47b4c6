//! The audit chain: appended under the `audit` lock so replicas extend one chain, queried
//! newest first, read in order for verification.

use super::*;

/// Rows per `INSERT`: 15 values each, well under SQLite's and PostgreSQL's bind limits.
const INSERT_ROWS: usize = 256;

impl Store {
    /// Appends `entries` to the chain, in order, in one transaction: under the `audit` lock it
    /// reads the tail, so writers of several replicas extend one chain and never fork it.
    pub async fn append_audit(&self, entries: &[Entry], at_ms: i64) -> Result<(), StoreError> {
        self.append_audit_groups(&[(at_ms, entries)]).await
    }

    /// [`Store::append_audit`] for groups of entries each with the time it happened (the
    /// audit spool's, written while the database was away), in one transaction.
    pub async fn append_audit_groups(&self, groups: &[(i64, &[Entry])]) -> Result<(), StoreError> {
        self.noted(async {
            with_pool!(self, pool => {
                let mut tx = pool.begin().await?;
                sqlx::query(LOCK).bind("audit").execute(&mut *tx).await?;
                let (mut seq, mut prev) = match sqlx::query("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
                    .fetch_optional(&mut *tx)
                    .await?
                {
                    Some(r) => (Cols(&r).get::<i64>("seq")? as u64, Cols(&r).get::<String>("hash")?),
                    None => (0, String::new()),
                };
                let records = groups.iter().flat_map(|(at_ms, entries)| {
                    let records = crate::audit::chain::chain(seq, prev.clone(), entries, *at_ms);
                    if let Some(last) = records.last() {
                        (seq, prev) = (last.seq, last.hash.clone());
                    }
                    records
                });
                // One statement per chunk of rows, not one per row: the chain's lock is held
                // (by one replica of the fleet at a time) for a round trip per chunk.
                for chunk in records.collect::<Vec<_>>().chunks(INSERT_ROWS) {
                    let mut insert = sqlx::QueryBuilder::new(
                        "INSERT INTO audit (seq, at_ms, tenant, subject, jti_hash, session_id, rpc, action, alias_of, \
                         target, outcome, code, duration_ms, prev_hash, hash) ",
                    );
                    insert.push_values(chunk, |mut row, r| {
                        let e = &r.entry;
                        row.push_bind(r.seq as i64)
                            .push_bind(r.at_ms)
                            .push_bind(&e.tenant)
                            .push_bind(&e.subject)
                            .push_bind(&e.jti_hash)
                            .push_bind(&e.session_id)
                            .push_bind(&e.rpc)
                            .push_bind(&e.action)
                            .push_bind(&e.alias_of)
                            .push_bind(&e.target)
                            .push_bind(&e.outcome)
                            .push_bind(&e.code)
                            .push_bind(e.duration_ms as i64)
                            .push_bind(&r.prev_hash)
                            .push_bind(&r.hash);
                    });
                    insert.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
            });
            Ok(())
        }
        .await)
    }

    /// Audit records matching the filter, newest first, at most `limit`.
    pub async fn audit_query(&self, f: &AuditFilter) -> Result<Vec<Record>, StoreError> {
        with_pool!(self, pool => sqlx::query(
            "SELECT * FROM audit WHERE ($1 IS NULL OR tenant = $1) AND ($2 IS NULL OR session_id = $2) \
             AND ($3 IS NULL OR action = $3) AND ($4 IS NULL OR at_ms >= $4) ORDER BY seq DESC LIMIT $5",
        )
        .bind(f.tenant.as_deref())
        .bind(f.session_id.as_deref())
        .bind(f.action.as_deref())
        .bind(f.since_ms)
        .bind(f.limit as i64)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Cols(r).audit())
        .collect())
    }

    /// Up to `limit` records of the chain after `after_seq`, in order (verification reads it
    /// a page at a time).
    pub async fn audit_after(&self, after_seq: u64, limit: u32) -> Result<Vec<Record>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT * FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2")
            .bind(after_seq as i64)
            .bind(limit as i64)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| Cols(r).audit())
            .collect())
    }
}
