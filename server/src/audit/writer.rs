//! The audit trail's writer: takes entries from the queue in order, appends them in batches
//! (to the chain, or to the spool while the database refuses), retries what neither takes,
//! and drains what is left at shutdown.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Batch, Entry, Spool, State};
use crate::clock::now_ms;
use crate::store::{Store, StoreError};

/// Where the writer appends batches: the store, or a fake in unit tests.
pub trait Sink: Send + Sync + 'static {
    /// Appends `batches` to the chain in one transaction: all of them or none. With `retry`
    /// (they were offered before and that write's outcome is unknown), a batch whose id the
    /// chain already has is skipped.
    fn append(&self, batches: &[Batch], retry: bool) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl Sink for Store {
    fn append(&self, batches: &[Batch], retry: bool) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.append_audit(batches, retry)
    }
}

/// Owns the chain; the only code that appends to the audit table.
pub struct Writer<S = Store> {
    pub(super) sink: S,
    pub(super) rx: mpsc::Receiver<Entry>,
    pub(super) state: Arc<State>,
    pub(super) spool: Option<Spool>,
}

/// Records per transaction.
pub(super) const BATCH: usize = 256;

/// How long a batch waits for more records after its first (measured with
/// `examples/fleet_sim.rs`, 1000 clients on three replicas: 18 transactions per session
/// without it; 10.1 at 20 ms, audit lag p99 24 ms; 8.8 at 50 ms, lag p99 53 ms). A record
/// waits at most this long (and the batch's write) before it is durable; results never wait.
pub(super) const LINGER: Duration = Duration::from_millis(50);

/// How long shutdown waits for the last records (and their retries) before giving up.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Delays between attempts at a batch the database refused: doubling from 100 ms, at most
/// 2 s, so the trail is written again within about 2 s of the database taking writes.
#[derive(Debug)]
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(super) const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(2);

    pub(super) fn new() -> Backoff {
        Backoff { next: Backoff::FIRST }
    }

    pub(super) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (delay * 2).min(Backoff::MAX);
        delay
    }
}

impl<S: Sink> Writer<S> {
    /// Appends entries until shutdown, then drains what is queued (for at most a few seconds)
    /// and returns. A batch the database refuses goes to the spool, or when that cannot take
    /// it either, is kept and retried, in order, with backoff.
    pub async fn run(mut self, shutdown: tokio_util::sync::CancellationToken) {
        let mut pending: Vec<Entry> = Vec::new();
        // A batch neither the database nor the spool took, offered again as it was (its id,
        // its time, nothing added): the refused write may have gone in all the same.
        let mut refused: Option<Batch> = None;
        let mut backoff = Backoff::new();
        let mut failures = 0u32;
        // Refusal windows that are over give their closing records (see `refusals`).
        let mut sweep = tokio::time::interval(Duration::from_secs(1));
        // When to try moving the spool into the chain next (a spool left by a previous run:
        // at once).
        let mut unspool_at = tokio::time::Instant::now();
        let mut unspool_backoff = Backoff::new();
        loop {
            if pending.is_empty() && refused.is_none() {
                let spooling = self.spool_holds_records();
                tokio::select! {
                    e = self.rx.recv() => match e {
                        Some(e) => pending.push(e),
                        None => break,
                    },
                    _ = sweep.tick() => {
                        pending.extend(self.state.refusals().sweep(now_ms(), false));
                        if pending.is_empty() {
                            continue;
                        }
                    }
                    _ = tokio::time::sleep_until(unspool_at), if spooling => {
                        if self.unspool().await {
                            unspool_backoff = Backoff::new();
                        } else {
                            unspool_at = tokio::time::Instant::now() + unspool_backoff.next_delay();
                        }
                        continue;
                    }
                    _ = shutdown.cancelled() => break,
                }
            }
            // Only a batch offered before is looked up (a new one's id cannot be in the chain).
            let (batch, retry) = match refused.take() {
                Some(batch) => (batch, true),
                None => {
                    self.gather(&mut pending).await;
                    (Batch::new(std::mem::take(&mut pending), now_ms()), false)
                }
            };
            match self.put(&batch, retry).await {
                Ok(spooled) => {
                    backoff = Backoff::new();
                    if spooled {
                        unspool_at = unspool_at.max(tokio::time::Instant::now() + Backoff::FIRST);
                    }
                    if failures > 0 {
                        // Healthy again only once nothing queued during the fault is left.
                        if self.rx.is_empty() {
                            tracing::info!(attempts = failures, "audit trail written again; actions accepted");
                            failures = 0;
                            self.state.set_fault(None);
                        } else {
                            self.state.set_fault(Some(format!(
                                "catching up: {} records queued during a write failure",
                                self.rx.len()
                            )));
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    let delay = backoff.next_delay();
                    let unwritten = batch.entries.len() + self.rx.len();
                    refused = Some(batch);
                    if failures == 1 {
                        tracing::error!(error = %e, unwritten, "audit write failed; refusing new actions and retrying until it succeeds");
                    } else {
                        tracing::warn!(error = %e, attempt = failures, unwritten, retry_in_ms = delay.as_millis() as u64, "audit write failed again");
                    }
                    self.state.set_fault(Some(e.replace('\n', " ")));
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.cancelled() => break,
                    }
                }
            }
        }
        self.finish(pending, refused).await;
        tracing::debug!("audit writer ended");
    }

    /// Records arriving within `LINGER` of the first go in the same transaction: a busy
    /// replica writes its trail in a few transactions a second, not one per call.
    async fn gather(&mut self, pending: &mut Vec<Entry>) {
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while pending.len() < BATCH {
            tokio::select! {
                biased;
                e = self.rx.recv() => match e {
                    Some(e) => pending.push(e),
                    None => break,
                },
                _ = &mut linger => break,
            }
        }
    }

    /// Writes `batch` where it goes now: behind the spool while it holds records (so the
    /// chain keeps their order), else into the chain, else into the spool. `Ok(true)` when it
    /// went to the spool; `Err` says why neither took it. With `retry`, the batch was offered
    /// before (see [`Sink::append`]).
    async fn put(&mut self, batch: &Batch, retry: bool) -> Result<bool, String> {
        if self.spool_holds_records() {
            return self.keep_in_spool(batch).map(|()| true);
        }
        let refused = match self.sink.append(std::slice::from_ref(batch), retry).await {
            Ok(()) => return Ok(false),
            Err(e) => e.to_string().replace('\n', " "),
        };
        if self.spool.is_none() {
            return Err(refused);
        }
        self.keep_in_spool(batch).map_err(|e| format!("{refused}; nor could the local spool take them: {e}"))?;
        tracing::error!(error = %refused, records = batch.entries.len(), "audit write failed; records go to the local spool until the database takes them again");
        *self.state.spooling.lock().unwrap_or_else(|e| e.into_inner()) = Some(refused);
        Ok(true)
    }

    fn spool_holds_records(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
    }

    fn keep_in_spool(&mut self, batch: &Batch) -> Result<(), String> {
        let spool = self.spool.as_mut().ok_or("no spool")?;
        spool.push(batch).map_err(|e| e.to_string())?;
        self.state.spooled.store(spool.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Moves what the spool holds into the chain, in one transaction, and empties it; true
    /// once it is empty. Always a retry: the spool's first batch may have gone in as its write
    /// was cut, and a spool moved before may not have been emptied.
    async fn unspool(&mut self) -> bool {
        let Some(spool) = self.spool.as_mut() else { return true };
        if spool.is_empty() {
            return true;
        }
        let groups = match spool.batches() {
            Ok(groups) => groups,
            Err(e) => {
                tracing::error!(error = %e, "the local audit spool cannot be read; its records stay in it");
                return false;
            }
        };
        if let Err(e) = self.sink.append(&groups, true).await {
            tracing::warn!(error = %e, records = spool.len(), "the database still refuses the spooled audit records");
            return false;
        }
        let records = spool.len();
        if let Err(e) = spool.clear() {
            // The records are in the chain and still in the file: the next move finds their
            // batches in and skips them.
            tracing::error!(error = %e, records, "spooled audit records are in the chain but the spool could not be emptied");
            return false;
        }
        self.state.spooled.store(0, Ordering::Relaxed);
        *self.state.spooling.lock().unwrap_or_else(|e| e.into_inner()) = None;
        tracing::info!(records, "audit records kept in the local spool are in the chain");
        true
    }

    /// Shutdown: what was queued still goes in, in order (into the chain, or the spool the
    /// next start on this data dir moves), retried until [`SHUTDOWN_GRACE`] is up; what
    /// neither takes then is logged as lost.
    async fn finish(&mut self, mut pending: Vec<Entry>, refused: Option<Batch>) {
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        // Places still taken (a call ending) are waited for: their records come last.
        self.rx.close();
        while let Ok(Some(e)) = tokio::time::timeout_at(deadline, self.rx.recv()).await {
            pending.push(e);
        }
        pending.extend(self.state.refusals().sweep(now_ms(), true));
        self.unspool().await;
        let mut retry = refused.is_some();
        let mut batches: std::collections::VecDeque<Batch> = refused.into_iter().collect();
        batches.extend(pending.chunks(BATCH).map(|entries| Batch::new(entries.to_vec(), now_ms())));
        let mut backoff = Backoff::new();
        while let Some(batch) = batches.front() {
            match self.put(batch, retry).await {
                Ok(_) => {
                    batches.pop_front();
                    retry = false;
                }
                Err(e) => {
                    retry = true;
                    let delay = backoff.next_delay();
                    let unwritten: usize = batches.iter().map(|b| b.entries.len()).sum();
                    if tokio::time::Instant::now() + delay > deadline {
                        tracing::error!(error = %e, lost = unwritten, "audit records lost at shutdown: the database refused them to the end");
                        return;
                    }
                    tracing::warn!(error = %e, unwritten, "audit write failed at shutdown; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
        if let Some(spool) = self.spool.as_ref().filter(|s| !s.is_empty()) {
            tracing::warn!(
                records = spool.len(),
                "audit records stay in the local spool; the next start on this data dir moves them into the chain"
            );
        }
    }
}
