//! The audit chain: appended under the `audit` lock so replicas extend one chain, queried
//! newest first, read in order for verification.

use super::*;

/// Rows per `INSERT` (16 values each) and batch ids per lookup, well under SQLite's and PostgreSQL's bind limits.
const INSERT_ROWS: usize = 256;

impl Store {
    /// Appends `batches` to the chain, in order, in one transaction: under the `audit` lock it
    /// reads the tail, so writers of several replicas extend one chain and never fork it. Each
    /// batch's id goes on its first record. With `retry` (the batches were offered before and
    /// that write's outcome is unknown: a connection cut while committing) a batch whose id the
    /// chain already has is skipped, so no record goes in twice.
    pub async fn append_audit(&self, batches: &[Batch], retry: bool) -> Result<(), StoreError> {
        self.noted(async {
            with_pool!(self, pool => {
                let mut tx = pool.begin().await?;
                sqlx::query(LOCK).bind("audit").execute(&mut *tx).await?;
                let mut written = std::collections::HashSet::new();
                if retry {
                    let ids: Vec<&str> = batches.iter().map(|b| b.id.as_str()).filter(|id| !id.is_empty()).collect();
                    for chunk in ids.chunks(INSERT_ROWS) {
                        let mut query = sqlx::QueryBuilder::new("SELECT batch FROM audit WHERE batch IN (");
                        let mut list = query.separated(", ");
                        for id in chunk {
                            list.push_bind(*id);
                        }
                        query.push(")");
                        written.extend(query.build_query_scalar::<String>().fetch_all(&mut *tx).await?);
                    }
                }
                let (mut seq, mut prev) = match sqlx::query("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
                    .fetch_optional(&mut *tx)
                    .await?
                {
                    Some(r) => (Cols(&r).get::<i64>("seq")? as u64, Cols(&r).get::<String>("hash")?),
                    None => (0, String::new()),
                };
                let mut records = Vec::new();
                for batch in batches.iter().filter(|b| !written.contains(&b.id)) {
                    let chained = crate::audit::chain::chain(seq, prev.clone(), &batch.entries, batch.at_ms);
                    if let Some(last) = chained.last() {
                        (seq, prev) = (last.seq, last.hash.clone());
                    }
                    let id = (!batch.id.is_empty()).then_some(batch.id.as_str());
                    records.extend(chained.into_iter().enumerate().map(|(i, r)| (id.filter(|_| i == 0), r)));
                }
                // One statement per chunk of rows, not one per row: the chain's lock is held
                // (by one replica of the fleet at a time) for a round trip per chunk.
                for chunk in records.chunks(INSERT_ROWS) {
                    let mut insert = sqlx::QueryBuilder::new(
                        "INSERT INTO audit (seq, at_ms, tenant, subject, jti_hash, session_id, rpc, action, alias_of, \
                         target, outcome, code, duration_ms, prev_hash, hash, batch) ",
                    );
                    insert.push_values(chunk, |mut row, (batch, r)| {
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
                            .push_bind(&r.hash)
                            .push_bind(*batch);
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
