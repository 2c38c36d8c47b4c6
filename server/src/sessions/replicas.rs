//! The replica set: registering with the addresses other replicas reach this one at, the
//! heartbeat, sweeping replicas that are gone (their sessions CRASHED), and the writes a
//! database outage held back, made once it answers again.

use super::*;

/// A write the database refused that must still be made, or the replica set would count what
/// is gone: a session's end (other replicas would take it for live), what it left (`List`
/// and `Get` would not show its files and recording), or a tenant slot given back (the
/// tenant would stay a session short until this replica leaves). Each is idempotent: a
/// write whose answer was lost may be made again.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum HeldBack {
    End { id: String, state: SessionState, at_ms: i64, reason: String, bytes: (u64, u64) },
    Artifacts { id: String, manifest: String },
    Slot(String),
}

/// The writes held back, in order. Cheap to clone.
#[derive(Clone, Default)]
pub(super) struct Unwritten(Arc<Mutex<Vec<HeldBack>>>);

impl Unwritten {
    /// Keeps `write` for the next heartbeat the database answers.
    pub(super) fn keep(&self, write: HeldBack) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(write);
    }

    /// Makes the writes held back, in order, keeping the ones still refused (from the first
    /// the database refuses as a whole: it is away again); how many were made. One refused on
    /// its own (not for an outage) would be refused forever: it is dropped, and logged.
    async fn write(&self, store: &Store) -> usize {
        let held = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        let mut made = 0;
        let mut refused = Vec::new();
        for write in held {
            if !refused.is_empty() {
                refused.push(write);
                continue;
            }
            let result = match &write {
                HeldBack::End { id, state, at_ms, reason, bytes } => {
                    store.end_session(id, *state, *at_ms, reason, *bytes).await.map(|_| ())
                }
                HeldBack::Artifacts { id, manifest } => store.set_session_artifacts(id, Some(manifest)).await,
                HeldBack::Slot(claim) => store.release_slot(claim).await,
            };
            match result {
                Ok(()) => made += 1,
                Err(e) if e.refuses_writes() => refused.push(write),
                Err(e) => {
                    tracing::error!(?write, error = %e, "a write held back during an outage is refused on its own; dropped")
                }
            }
        }
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        refused.append(&mut kept);
        *kept = refused;
        made
    }
}

impl Sessions {
    /// Registers this replica, then marks CRASHED the sessions of replicas that are gone (a
    /// previous run of this server, or another replica that stopped beating): their workers
    /// died with them. Their tenant slots are freed too.
    /// `previous` is the replica id of the last server on this data dir, known dead: it
    /// leaves the replica set at once, so its sessions are swept now. `addrs` is where the
    /// other replicas reach this one.
    pub async fn recover(&self, previous: Option<&str>, addrs: ReplicaAddrs) -> Result<usize> {
        if let Some(previous) = previous.filter(|p| *p != self.inner.replica) {
            self.inner.store.deregister(previous).await?;
        }
        let addrs = self.inner.addrs.get_or_init(|| addrs);
        self.inner.store.heartbeat(&self.inner.replica, addrs, now_ms()).await?;
        self.sweep().await
    }

    /// Where the other replicas reach this one.
    pub fn addrs(&self) -> ReplicaAddrs {
        self.inner.addrs.get().cloned().unwrap_or_default()
    }

    /// This server's id among the replicas.
    pub fn replica_id(&self) -> &str {
        &self.inner.replica
    }

    /// The heartbeat time before which another replica is gone, or `None` while this replica
    /// may not judge: it has not reached the database without a gap for [`REPLICA_STALE`]. A
    /// database outage stops every replica's heartbeat alike; judged by its clock alone, the
    /// first replica back would take all the others for gone and end their sessions. Counted
    /// from its own reconnection instead, every replica that is alive beats again before any
    /// other judges it, and one that does not (dead, or cut off from a database the others
    /// reach) is gone.
    pub fn stale_before(&self) -> Option<i64> {
        let seen = *self.inner.store_seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.may_judge(std::time::Instant::now()).then(|| now_ms() - REPLICA_STALE.as_millis() as i64)
    }

    /// Notes how a heartbeat went (see [`Sessions::stale_before`]).
    fn beat_went(&self, ok: bool) {
        let mut seen = self.inner.store_seen.lock().unwrap_or_else(|e| e.into_inner());
        let was = *seen;
        seen.went(ok, std::time::Instant::now());
        if seen.since != was.since {
            match seen.since {
                None => tracing::warn!("the database cannot be reached: live sessions stay, new ones are refused, and no other replica is judged until it is back"),
                Some(_) => tracing::info!(silent_for = ?seen.last_ok.saturating_duration_since(was.last_ok), "the database is back; other replicas are judged again once it has stayed up {REPLICA_STALE:?}"),
            }
        }
    }

    /// Forgets replicas that are gone and marks their live sessions CRASHED. While this
    /// replica may not judge heartbeats, only the sessions of replicas that left (whose row is
    /// gone: a previous run on this data dir, or a replica that deregistered) are swept.
    pub async fn sweep(&self) -> Result<usize> {
        let stale_before = self.stale_before().unwrap_or(i64::MIN);
        let ids = self.inner.store.sweep_replicas(&self.inner.replica, stale_before).await?;
        for id in &ids {
            self.inner.store.end_session(id, SessionState::Crashed, now_ms(), "its server is gone", (0, 0)).await?;
        }
        if !ids.is_empty() {
            tracing::warn!(count = ids.len(), "sessions of a server that is gone marked crashed");
        }
        Ok(ids.len())
    }

    /// Beats this replica's heartbeat until shutdown, sweeping up after replicas that are gone
    /// every few beats; then leaves the replica set (freeing its tenant slots at once).
    pub async fn heartbeat_loop(self, shutdown: CancellationToken) {
        let mut beats = 0u32;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT) => {}
                _ = shutdown.cancelled() => break,
            }
            beats += 1;
            let beat = self.inner.store.beat(&self.inner.replica, now_ms()).await;
            self.beat_went(beat.is_ok());
            match beat {
                Ok(true) => {
                    let made = self.inner.unwritten.write(&self.inner.store).await;
                    if made > 0 {
                        tracing::info!(writes = made, "writes held back while the database was away are made");
                    }
                }
                // Swept as gone (silent too long): its sessions are CRASHED in the database and
                // their slots handed out again, so its browsers must not run on uncounted.
                Ok(false) => {
                    tracing::error!(replica = %self.inner.replica, "this server was dropped from the replica set; ending its sessions and joining again");
                    self.close_all_as(SessionState::Crashed, "its server lost its place in the replica set").await;
                    if let Err(e) = self.inner.store.heartbeat(&self.inner.replica, &self.addrs(), now_ms()).await {
                        tracing::warn!(error = %e, "could not join the replica set again");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "replica heartbeat failed"),
            }
            if beats.is_multiple_of(5) {
                if let Err(e) = self.sweep().await {
                    tracing::warn!(error = %e, "replica sweep failed");
                }
            }
        }
        tracing::debug!("heartbeat ended");
    }

    /// Leaves the replica set: this server's row and tenant slots go. Call after every
    /// session has ended. Ends and artifact lists still held back are written first, if the
    /// database takes them (else the next start on this data dir marks those sessions
    /// CRASHED).
    pub async fn deregister(&self) {
        self.inner.unwritten.write(&self.inner.store).await;
        if let Err(e) = self.inner.store.deregister(&self.inner.replica).await {
            tracing::warn!(error = %e, "could not leave the replica set; it expires with its heartbeat");
        }
    }
}

/// Which replicas a `Drain` reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainReach {
    /// This replica alone (no replica named, this one named, or a call another replica
    /// forwarded here).
    Here,
    /// Another replica, by id.
    Named(String),
    /// Every replica, this one included.
    All,
}

/// Reads a `Drain`'s target: `replica` (empty: none) or `all_replicas`, never both, as seen by
/// replica `me`; a call `forwarded` by another replica reaches this one alone.
pub fn drain_reach(all_replicas: bool, replica: &str, me: &str, forwarded: bool) -> Result<DrainReach> {
    if all_replicas && !replica.is_empty() {
        return Err(ServiceError::InvalidArgument("give replica or all_replicas, not both".into()));
    }
    Ok(match () {
        _ if forwarded || (!all_replicas && (replica.is_empty() || replica == me)) => DrainReach::Here,
        _ if all_replicas => DrainReach::All,
        _ => DrainReach::Named(replica.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_reaches_this_replica_another_or_all() {
        use DrainReach::*;
        assert_eq!(drain_reach(false, "", "r-1", false).unwrap(), Here);
        assert_eq!(drain_reach(false, "r-1", "r-1", false).unwrap(), Here);
        assert_eq!(drain_reach(false, "r-2", "r-1", false).unwrap(), Named("r-2".into()));
        assert_eq!(drain_reach(true, "", "r-1", false).unwrap(), All);
        // Forwarded by another replica: this one alone, whatever it says.
        assert_eq!(drain_reach(true, "", "r-1", true).unwrap(), Here);
        assert_eq!(drain_reach(false, "r-2", "r-1", true).unwrap(), Here);
        let both = drain_reach(true, "r-2", "r-1", false).unwrap_err();
        assert!(both.to_string().contains("not both"), "{both}");
    }

    /// Writes held back stay, in order, while the database refuses them as a whole (here: its
    /// pool closed), and go once it takes them.
    #[tokio::test]
    async fn held_back_writes_wait_in_order_for_a_database_that_takes_them() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let unwritten = Unwritten::default();
        unwritten.keep(HeldBack::Slot("c-1".into()));
        unwritten.keep(HeldBack::Artifacts { id: "s-1".into(), manifest: "{}".into() });
        let closed = Store::open(&url).await.unwrap();
        closed.close().await;
        assert_eq!(unwritten.write(&closed).await, 0);
        unwritten.keep(HeldBack::Slot("c-2".into()));
        let kept = unwritten.0.lock().unwrap().clone();
        assert_eq!(
            kept,
            [
                HeldBack::Slot("c-1".into()),
                HeldBack::Artifacts { id: "s-1".into(), manifest: "{}".into() },
                HeldBack::Slot("c-2".into())
            ]
        );
        assert_eq!(unwritten.write(&Store::open(&url).await.unwrap()).await, 3);
        assert!(unwritten.0.lock().unwrap().is_empty());
    }
}
