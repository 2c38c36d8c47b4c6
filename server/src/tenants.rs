//! Tenant rules, so the Admin adapter only converts: what a valid tenant is, saving one (its
//! tokens work here at once), deleting one (never the embedded default; refused while it has
//! live sessions on any replica unless forced, when they are killed first), and the lifetime a
//! token may have.

use std::future::Future;
use std::time::Duration;

use crate::auth::{Epochs, Keys};
use crate::clock::now_ms;
use crate::error::{Result, ServiceError};
use crate::model::{is_host_pattern, is_id, SessionState, TenantRecord, DEFAULT_TENANT};
use crate::sessions::Sessions;
use crate::store::Store;

/// Longest lifetime `IssueToken` grants.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Lifetime when `ttl_s` is 0.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// The tenants of the shared database, as this replica manages them.
pub struct Tenants {
    sessions: Sessions,
    store: Store,
    epochs: Epochs,
    max_token_ttl: Duration,
}

impl Tenants {
    pub fn new(sessions: Sessions, store: Store, epochs: Epochs, max_token_ttl: Duration) -> Tenants {
        Tenants { sessions, store, epochs, max_token_ttl }
    }

    /// Creates or replaces a tenant after [`validate`]; true when it was created.
    pub async fn put(&self, record: &TenantRecord) -> Result<bool> {
        validate(record)?;
        let (created, epoch) = self.store.put_tenant(record, now_ms()).await?;
        // A new tenant's tokens work here at once; other replicas learn it on their next refresh.
        self.epochs.set(&record.id, &epoch);
        tracing::info!(tenant = %record.id, created, max_slots = record.max_slots, "tenant saved");
        Ok(created)
    }

    /// Deletes tenant `id`; false when there was none. Its live sessions, on any replica,
    /// refuse the delete unless `force`: then those held here end KILLED, and
    /// `kill_elsewhere` ends the others (`(session, replica)` pairs) before anything is deleted.
    pub async fn delete<F, Fut>(&self, id: &str, force: bool, kill_elsewhere: F) -> Result<bool>
    where
        F: FnOnce(Vec<(String, String)>) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        if id == DEFAULT_TENANT {
            return Err(ServiceError::FailedPrecondition("the embedded default tenant cannot be deleted".into()));
        }
        // Live on any replica: the database knows them all.
        let live = self.store.live_sessions_of(id).await?;
        if !live.is_empty() && !force {
            return Err(ServiceError::FailedPrecondition(format!(
                "tenant {id:?} has {} live session(s); set force to kill them",
                live.len()
            )));
        }
        let mut elsewhere = Vec::new();
        for (session, replica) in live {
            if self.sessions.holds(&session) || replica == self.sessions.replica_id() {
                self.sessions.end_detached(&session, SessionState::Killed, "tenant deleted").await;
            } else {
                elsewhere.push((session, replica));
            }
        }
        if !elsewhere.is_empty() {
            kill_elsewhere(elsewhere).await?;
        }
        let deleted = self.store.delete_tenant(id).await?;
        // Its tokens stop here at once; on other replicas within a second (their refresh).
        self.epochs.remove(id);
        tracing::info!(tenant = %id, deleted, "tenant deleted");
        Ok(deleted)
    }

    /// Mints a token for an existing tenant, `ttl_s` 0 meaning [`DEFAULT_TOKEN_TTL`], at most
    /// `--max-token-ttl` (and [`MAX_TOKEN_TTL`]).
    pub async fn issue_token(
        &self,
        keys: &Keys,
        tenant: &str,
        subject: &str,
        scopes: &[String],
        ttl_s: u32,
    ) -> Result<(String, crate::auth::Claims)> {
        let Some(epoch) = self.store.tenant_epoch(tenant).await? else {
            return Err(ServiceError::NotFound(format!("tenant {tenant:?}")));
        };
        let ttl = token_ttl(ttl_s, self.max_token_ttl)?;
        let (token, claims) = keys.issue(tenant, &epoch, subject, scopes, ttl)?;
        // The store's epoch is newer than this replica's cache when another replica has just
        // created the tenant: the token must work here at once.
        self.epochs.set(tenant, &epoch);
        tracing::info!(tenant = %claims.tenant, subject = %claims.sub, jti_hash = %claims.jti_hash(), "token issued");
        Ok((token, claims))
    }
}

/// Smallest and largest `max_memory_mb` other than 0: a fresh Chromium with a blank page
/// already uses about 150 MiB.
pub const MEMORY_MB: std::ops::RangeInclusive<u32> = 256..=65536;

/// Largest `max_file_mb`.
pub const MAX_FILE_MB: u32 = 1024;

/// A tenant id is 1-63 characters of a-z, 0-9, '-', '_', '.'; each `allow_hosts` entry a host
/// or `*.suffix`; `max_memory_mb` 0 or within [`MEMORY_MB`].
pub fn validate(t: &TenantRecord) -> Result<()> {
    if !is_id(&t.id) {
        return Err(ServiceError::InvalidArgument(format!(
            "tenant.id: {:?} must be 1-63 characters of a-z, 0-9, '-', '_', '.'",
            t.id
        )));
    }
    if t.max_memory_mb != 0 && !MEMORY_MB.contains(&t.max_memory_mb) {
        return Err(ServiceError::InvalidArgument(format!(
            "tenant.max_memory_mb: {} is not 0 (the server's --worker-memory-mb) or {}-{}",
            t.max_memory_mb,
            MEMORY_MB.start(),
            MEMORY_MB.end()
        )));
    }
    if t.max_file_mb > MAX_FILE_MB {
        return Err(ServiceError::InvalidArgument(format!(
            "tenant.max_file_mb: {} is over {MAX_FILE_MB} (0 means 100)",
            t.max_file_mb
        )));
    }
    for (i, host) in t.allow_hosts.iter().enumerate() {
        if !is_host_pattern(host) {
            return Err(ServiceError::InvalidArgument(format!(
                "tenant.allow_hosts[{i}]: {host:?} is not a host or *.suffix"
            )));
        }
    }
    Ok(())
}

/// A token's lifetime: `ttl_s` seconds (0: [`DEFAULT_TOKEN_TTL`]), refused above `max` or
/// [`MAX_TOKEN_TTL`].
pub fn token_ttl(ttl_s: u32, max: Duration) -> Result<Duration> {
    let ttl = match ttl_s {
        0 => DEFAULT_TOKEN_TTL,
        s => Duration::from_secs(s as u64),
    };
    let max = max.min(MAX_TOKEN_TTL);
    if ttl > max {
        return Err(ServiceError::InvalidArgument(format!(
            "ttl_s: {} exceeds the maximum of {}",
            ttl.as_secs(),
            max.as_secs()
        )));
    }
    Ok(ttl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str, hosts: &[&str]) -> TenantRecord {
        TenantRecord {
            id: id.into(),
            max_slots: 1,
            max_queue: 1,
            max_session_ttl_ms: 0,
            idle_timeout_ms: 0,
            allow_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allow_private_networks: false,
            isolation: Default::default(),
            max_memory_mb: 0,
            default_record: Default::default(),
            max_file_mb: 0,
            max_artifact_mb: 0,
            artifact_ttl_s: 0,
            default_proxy: String::new(),
            max_session_bytes: 0,
        }
    }

    #[test]
    fn tenant_ids_and_hosts_are_checked() {
        assert!(validate(&tenant("team-a_1.x", &["example.com", "*.example.org"])).is_ok());
        for bad in ["", "Team", "a b", &"x".repeat(64)] {
            assert!(validate(&tenant(bad, &[])).is_err(), "{bad:?}");
        }
        for (mb, ok) in [(0, true), (256, true), (65536, true), (255, false), (65537, false)] {
            let t = TenantRecord { max_memory_mb: mb, ..tenant("t", &[]) };
            assert_eq!(validate(&t).is_ok(), ok, "{mb}");
        }
        for bad in ["", "*.", "a/b", "a:80", "*.*.x", "a b"] {
            let e = validate(&tenant("t", &[bad])).unwrap_err().to_string();
            assert!(e.contains("allow_hosts[0]"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn token_lifetimes_default_and_cap() {
        let day = Duration::from_secs(86_400);
        assert_eq!(token_ttl(0, day).unwrap(), DEFAULT_TOKEN_TTL);
        assert_eq!(token_ttl(60, day).unwrap(), Duration::from_secs(60));
        assert!(token_ttl(86_401, day).unwrap_err().to_string().contains("exceeds the maximum of 86400"));
        assert!(token_ttl(u32::MAX, MAX_TOKEN_TTL * 2).is_err(), "never past a year, whatever the flag");
    }
}
