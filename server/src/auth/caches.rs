//! Caches of store tables every request reads (revoked token ids, tenant epochs): reloaded
//! twice a second, changed at once by this replica's own writes.

use super::*;

/// A copy of a store table shared by every request: reloaded by a refresh loop, so a change
/// on any replica holds within a second, and changed at once by this replica's own writes;
/// never a query per call. A reload read before a local change never undoes it.
pub(super) struct Reloaded<T> {
    /// The copy, and how many local changes it has had.
    inner: Arc<std::sync::RwLock<(T, u64)>>,
}

impl<T> Clone for Reloaded<T> {
    fn clone(&self) -> Self {
        Reloaded { inner: self.inner.clone() }
    }
}

impl<T: Default> Default for Reloaded<T> {
    fn default() -> Self {
        Reloaded { inner: Arc::default() }
    }
}

impl<T> Reloaded<T> {
    pub(super) fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.inner.read().unwrap_or_else(|e| e.into_inner()).0)
    }

    /// A local change (the store is the source of truth; the next reload agrees).
    pub(super) fn change(&self, f: impl FnOnce(&mut T)) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.1 += 1;
        f(&mut inner.0);
    }

    pub(super) fn local_changes(&self) -> u64 {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).1
    }

    /// Replaces the copy with one read when the local change count was `seen`, unless a local
    /// change came since: the copy may predate it. The next reload has it anyway.
    pub(super) fn replace_unless_changed(&self, all: T, seen: u64) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if inner.1 == seen {
            inner.0 = all;
        }
    }

    /// Reloads with `load` every `every` until shutdown.
    pub(super) async fn refresh_loop<Fut>(
        self,
        what: &'static str,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
        mut load: impl FnMut() -> Fut,
    ) where
        Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
    {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            let seen = self.local_changes();
            match load().await {
                Ok(all) => self.replace_unless_changed(all, seen),
                Err(e) => tracing::warn!(error = %e, "could not refresh {what}"),
            }
        }
    }
}

/// Revoked token ids (see [`Reloaded`]), so a revocation on any replica holds within a second.
#[derive(Clone, Default)]
pub struct Revocations {
    pub(super) set: Reloaded<std::collections::HashSet<String>>,
}

impl Revocations {
    /// Whether `jti` is revoked.
    pub fn contains(&self, jti: &str) -> bool {
        self.set.read(|set| set.contains(jti))
    }

    /// Marks `jti` revoked locally.
    pub fn insert(&self, jti: &str) {
        self.set.change(|set| {
            set.insert(jti.to_string());
        });
    }

    /// Replaces the cache with the store's list.
    pub fn replace(&self, all: Vec<String>) {
        self.set.replace_unless_changed(all.into_iter().collect(), self.set.local_changes());
    }

    /// Reloads the deny-list every `every` until shutdown.
    pub async fn refresh_loop(
        self,
        store: crate::store::Store,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        self.set
            .refresh_loop("revoked tokens", every, shutdown, || async {
                store.revoked().await.map(|all| all.into_iter().collect())
            })
            .await
    }
}

/// Each tenant's epoch (see [`Reloaded`]). A token is good only while its `tenant_epoch`
/// is its tenant's current one: deleting the tenant kills its tokens, and creating it again
/// (a new epoch) does not revive them; a change on any replica holds within a second.
#[derive(Clone, Default)]
pub struct Epochs {
    pub(super) map: Reloaded<std::collections::HashMap<String, String>>,
}

impl Epochs {
    /// Whether `epoch` is `tenant`'s current epoch. An empty epoch never is (the column's
    /// default, which no insert leaves).
    pub fn is_current(&self, tenant: &str, epoch: &str) -> bool {
        !epoch.is_empty() && self.map.read(|map| map.get(tenant).map(String::as_str) == Some(epoch))
    }

    /// Records `tenant`'s epoch locally.
    pub fn set(&self, tenant: &str, epoch: &str) {
        self.map.change(|map| {
            map.insert(tenant.to_string(), epoch.to_string());
        });
    }

    /// Forgets a deleted tenant locally: its tokens stop at once on this replica.
    pub fn remove(&self, tenant: &str) {
        self.map.change(|map| {
            map.remove(tenant);
        });
    }

    /// Replaces the cache with the store's list.
    pub fn replace(&self, all: Vec<(String, String)>) {
        self.map.replace_unless_changed(all.into_iter().collect(), self.map.local_changes());
    }

    /// Reloads every tenant's epoch every `every` until shutdown.
    pub async fn refresh_loop(
        self,
        store: crate::store::Store,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        self.map
            .refresh_loop("tenant epochs", every, shutdown, || async {
                store.tenant_epochs().await.map(|all| all.into_iter().collect())
            })
            .await
    }
}
