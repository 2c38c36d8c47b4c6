//! The audit trail: one record per RPC and per action, hash-chained, written off the hot path.
//!
//! One writer task per server takes entries from a bounded channel in order, batches what is
//! waiting, and appends the batch in one transaction that holds the database's audit lock,
//! reads the tail and assigns `seq` and `hash = SHA-256(prev_hash || canonical record)`:
//! replicas sharing one database extend one chain, which cannot fork. Results do not wait for
//! their record to be durable (see ARCHITECTURE.md), but no record is ever dropped:
//!
//! - work takes its place in the queue ([`Place`]) before it starts, so its record always has
//!   room; a full queue refuses the work (UNAVAILABLE) instead;
//! - a batch the database refuses goes to the local [`spool`] (durable, bounded) and so does
//!   every record after it, in order, until the spool has moved into the chain: actions go on
//!   while the database is away, and `/readyz` says the trail is behind;
//! - a batch neither the database nor the spool takes is kept, in order, and retried with
//!   backoff until it is written; meanwhile the log is unhealthy and new actions are refused,
//!   and it turns healthy again only once nothing written before the fault is still waiting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::clock::now_ms;
use crate::store::{AuditFilter, Store, StoreError};

pub mod chain;
pub mod refusals;
pub mod spool;
mod writer;
pub use chain::{chain, verify_chain, Batch, ChainCheck, Entry, Record};
pub use refusals::rpc_name;
pub use spool::Spool;
pub use writer::{Sink, Writer};

/// How many records may wait in the queue for the writer (besides the batch it is writing).
/// A place is taken when work starts: every call in flight holds one for its RPC-level
/// record, every running action one for its action record. Entries are a few hundred bytes,
/// so a full queue is about a megabyte; at the writer's pace (a batch of [`writer::BATCH`] per
/// transaction) it fills only while the database is slow or refuses writes, and then new calls
/// are refused rather than recorded late or not at all.
pub const QUEUE_CAPACITY: usize = 4096;

/// Why the trail refuses new work; every variant is UNAVAILABLE on the wire.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AuditError {
    /// A write failed and records are still waiting: an action now would run unrecorded.
    #[error("the audit trail cannot be written; actions are refused until it recovers; retry later (the server log says why)")]
    Unwritable,
    #[error("the audit queue is full ({0} records waiting for the database); calls are refused until it drains; retry in a few seconds")]
    QueueFull(usize),
    #[error("the audit trail is closed: the server is shutting down")]
    Closed,
}

/// The sending side of the trail. Cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    tx: mpsc::Sender<Entry>,
    state: Arc<State>,
}

/// What the log and its writer share.
#[derive(Default)]
struct State {
    /// Why the trail is behind, from a failed write until nothing from before it waits.
    fault: Mutex<Option<String>>,
    /// Records of refused calls that found the queue full (they are logged instead).
    lost_refusals: AtomicU64,
    /// Refused calls counted per source and reason (see [`refusals`]).
    refusals: Mutex<refusals::Refusals>,
    /// Why records go to the spool (the database's error), while it holds any.
    spooling: Mutex<Option<String>>,
    /// Records in the spool.
    spooled: AtomicU64,
}

impl State {
    fn refusals(&self) -> std::sync::MutexGuard<'_, refusals::Refusals> {
        self.refusals.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_fault(&self, fault: Option<String>) {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }
}

/// A place in the audit queue, taken before the work it records starts: recording into it
/// cannot fail or wait. Dropped unused, the place is given back.
#[derive(Debug)]
pub struct Place(mpsc::OwnedPermit<Entry>);

impl Place {
    pub fn record(self, entry: Entry) {
        self.0.send(entry);
    }
}

impl AuditLog {
    /// The log and its writer, which keeps in `spool` what the database refuses; run the
    /// writer with [`Writer::run`].
    pub fn new(store: Store, spool: Option<Spool>) -> (AuditLog, Writer<Store>) {
        AuditLog::with_sink(store, QUEUE_CAPACITY, spool)
    }

    /// The log and a writer appending to `sink` through a queue of `capacity`.
    pub fn with_sink<S: Sink>(sink: S, capacity: usize, spool: Option<Spool>) -> (AuditLog, Writer<S>) {
        let (tx, rx) = mpsc::channel(capacity);
        let state = Arc::new(State::default());
        state.spooled.store(spool.as_ref().map_or(0, |s| s.len() as u64), Ordering::Relaxed);
        (AuditLog { tx, state: state.clone() }, Writer { sink, rx, state, spool })
    }

    /// A place for the record of an action about to run. Refused while the trail cannot be
    /// written (the action would run unrecorded) and while the queue is full.
    pub fn reserve(&self) -> Result<Place, AuditError> {
        if !self.healthy() {
            return Err(AuditError::Unwritable);
        }
        self.reserve_call()
    }

    /// `n` places at once (a batch of actions), or none.
    pub fn reserve_many(&self, n: usize) -> Result<Vec<Place>, AuditError> {
        (0..n).map(|_| self.reserve()).collect()
    }

    /// A place for the RPC-level record of a call. Refused only when the queue is full: a
    /// call that runs no action (release, get) goes on while the trail catches up.
    pub fn reserve_call(&self) -> Result<Place, AuditError> {
        match self.tx.clone().try_reserve_owned() {
            Ok(permit) => Ok(Place(permit)),
            Err(TrySendError::Full(_)) => {
                tracing::warn!(capacity = self.tx.max_capacity(), "audit queue full; refusing the call");
                Err(AuditError::QueueFull(self.tx.max_capacity()))
            }
            Err(TrySendError::Closed(_)) => Err(AuditError::Closed),
        }
    }

    /// Notes a call refused before it ran (bad token, missing scope) from `source` (its
    /// address). A known caller's (its tenant named) is queued; an unknown caller's is queued
    /// when it is the first of its window, else counted into the window's closing record
    /// ([`refusals`]), so a flood costs bounded rows. Returns whether it was queued now
    /// (callers log only those). Refusals never take the last quarter of the queue, which
    /// stays for calls being served; a record that finds no room is logged instead, and
    /// counted.
    pub fn record_refusal(&self, source: &str, mut entry: Entry) -> bool {
        if entry.tenant.is_empty() {
            match self.state.refusals().refused(source, entry, now_ms()) {
                Some(first) => entry = first,
                None => return false,
            }
        }
        let room = self.tx.capacity() > self.tx.max_capacity() / 4;
        let sent = if room {
            self.tx.try_send(entry).map_err(|e| (e.to_string(), e.into_inner()))
        } else {
            Err(("audit queue three quarters full".into(), entry))
        };
        if let Err((why, entry)) = sent {
            self.state.lost_refusals.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                tenant = %entry.tenant, subject = %entry.subject, rpc = %entry.rpc, code = %entry.code,
                "{why}: the record of this refused call is only in this log"
            );
        }
        true
    }

    /// False from a failed write until every record queued before it is written: new
    /// actions must not run.
    pub fn healthy(&self) -> bool {
        self.fault().is_none()
    }

    /// Why the trail is unhealthy (one line), if it is.
    pub fn fault(&self) -> Option<String> {
        self.state.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Why records go to the local spool instead of the database, while it holds any (a
    /// spool left by a previous run, before the writer moves it, says so too).
    pub fn spooling(&self) -> Option<String> {
        let spooled = self.spooled();
        (spooled > 0).then(|| {
            let why = self.state.spooling.lock().unwrap_or_else(|e| e.into_inner()).clone();
            format!(
                "{spooled} records kept in the local spool until the database takes them: {}",
                why.unwrap_or_else(|| "left by a previous run".into())
            )
        })
    }

    /// Records in the local spool.
    pub fn spooled(&self) -> u64 {
        self.state.spooled.load(Ordering::Relaxed)
    }

    /// Records waiting in the queue, places taken for work still running included.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Records of refused calls that found the queue full.
    pub fn lost_refusals(&self) -> u64 {
        self.state.lost_refusals.load(Ordering::Relaxed)
    }
}

/// The session an RPC is about: the auth layer puts one in each request's extensions, the
/// handler names the session (from the request, or the one Acquire created), and the layer's
/// RPC-level record carries it once the call returns.
#[derive(Debug, Clone, Default)]
pub struct RpcTarget(Arc<std::sync::Mutex<String>>);

impl RpcTarget {
    pub fn set(&self, session_id: &str) {
        // Handlers name it while their RPC's span is current: the span names it too.
        crate::telemetry::record_session(session_id);
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = session_id.to_string();
    }

    pub fn take(&self) -> String {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The RPC-level record of one call, written when its response ends: a stream is recorded
/// with the status it ended with, not the one it started with. Holds the call's place in the
/// queue from the start.
pub struct CallRecord {
    place: Place,
    entry: Entry,
    target: RpcTarget,
    started: Instant,
}

impl CallRecord {
    /// `entry` names the caller and the rpc; outcome, code, session and duration are filled
    /// in at the end.
    pub fn new(place: Place, entry: Entry, target: RpcTarget, started: Instant) -> CallRecord {
        CallRecord { place, entry, target, started }
    }

    /// Records the call as ended with gRPC status `code` (0 is OK), or as failed with `code`
    /// `Unknown` when none is known.
    fn finish(self, code: Option<i32>) {
        let code = code.unwrap_or(tonic::Code::Unknown as i32);
        let (outcome, code) =
            if code == 0 { ("ok", String::new()) } else { ("error", format!("{:?}", tonic::Code::from_i32(code))) };
        self.place.record(Entry {
            outcome: outcome.into(),
            code,
            duration_ms: self.started.elapsed().as_millis().min(u32::MAX as u128) as u32,
            session_id: self.target.take(),
            ..self.entry
        });
    }
}

/// A response body that writes its call's [`CallRecord`] when it ends: at the trailers
/// (where gRPC puts the final status), at the end of a body without them (a trailers-only
/// response: the status was in the headers), or when it is dropped before its end (the client
/// went away: `Cancelled`).
pub type AuditedBody<B> = crate::grpc_status::WatchedBody<B, AuditEnd>;

/// The record an [`AuditedBody`] writes when its call ends.
pub struct AuditEnd {
    call: Option<CallRecord>,
    /// The status of a trailers-only response, from its headers.
    header_status: Option<i32>,
}

impl<B> AuditedBody<B> {
    /// A body whose call is recorded when it ends; `headers` are the response's.
    pub fn audited(inner: B, call: CallRecord, headers: &http::HeaderMap) -> AuditedBody<B> {
        Self::new(inner, AuditEnd { call: Some(call), header_status: crate::grpc_status::of(headers) })
    }

    /// A body with no record to write (public rpcs, calls refused and recorded up front).
    pub fn unaudited(inner: B) -> AuditedBody<B> {
        Self::new(inner, AuditEnd { call: None, header_status: None })
    }
}

impl crate::grpc_status::CallEnd for AuditEnd {
    fn ended(&mut self, code: Option<i32>) {
        if let Some(call) = self.call.take() {
            call.finish(code.or(self.header_status));
        }
    }

    fn dropped(&mut self) {
        // A trailers-only response is complete in its headers; anything else ended early.
        self.ended(Some(self.header_status.unwrap_or(tonic::Code::Cancelled as i32)));
    }
}

/// Records a query of the trail answers when it names no limit, and the most it may ask for.
pub const QUERY_DEFAULT: u32 = 100;
pub const QUERY_MAX: u32 = 10_000;

/// A query of the trail, newest first: an empty `tenant`, `session_id` or `action` filters
/// nothing; `limit` 0 is [`QUERY_DEFAULT`], and none goes past [`QUERY_MAX`].
pub fn query_filter(tenant: &str, session_id: &str, action: &str, since_ms: Option<i64>, limit: u32) -> AuditFilter {
    let given = |s: &str| (!s.is_empty()).then(|| s.to_string());
    AuditFilter {
        tenant: given(tenant),
        session_id: given(session_id),
        action: given(action),
        since_ms,
        limit: if limit == 0 { QUERY_DEFAULT } else { limit.min(QUERY_MAX) },
    }
}

/// Records read at a time when the stored chain is verified: memory stays bounded whatever
/// its length.
pub const VERIFY_PAGE: u32 = 1000;

/// Verifies the chain in `store`, `page` records at a time: (records checked, the first bad
/// seq and why).
pub async fn verify_stored(store: &Store, page: u32) -> Result<(u64, Option<(u64, String)>), StoreError> {
    let mut check = ChainCheck::default();
    loop {
        let records = store.audit_after(check.checked(), page).await?;
        for r in &records {
            if let Err(bad) = check.next(r) {
                return Ok((check.checked(), Some(bad)));
            }
        }
        if records.len() < page as usize {
            return Ok((check.checked(), None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::writer::{Backoff, BATCH, LINGER, SHUTDOWN_GRACE};
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    /// A sink that refuses the first `fail` appends, then keeps what it is given; the first
    /// `cut` of those it keeps answer an error all the same (a connection cut while the commit
    /// was on its way). Like the store, it skips a retried batch it has and refuses a first
    /// offer of one it has. With a gate, each append first waits for one of its permits.
    #[derive(Clone, Default)]
    struct FakeSink {
        fail: Arc<std::sync::atomic::AtomicUsize>,
        cut: Arc<std::sync::atomic::AtomicUsize>,
        attempts: Arc<std::sync::atomic::AtomicUsize>,
        written: Arc<Mutex<Vec<Entry>>>,
        ids: Arc<Mutex<std::collections::HashSet<String>>>,
        gate: Option<Arc<tokio::sync::Semaphore>>,
    }

    impl FakeSink {
        fn failing(n: usize) -> FakeSink {
            let sink = FakeSink::default();
            sink.fail.store(n, Ordering::SeqCst);
            sink
        }

        fn written(&self) -> Vec<String> {
            self.written.lock().unwrap().iter().map(|e| e.rpc.clone()).collect()
        }
    }

    impl Sink for FakeSink {
        async fn append(&self, batches: &[Batch], retry: bool) -> Result<(), StoreError> {
            if let Some(gate) = &self.gate {
                gate.acquire().await.unwrap().forget();
            }
            self.attempts.fetch_add(1, Ordering::SeqCst);
            let take = |n: &std::sync::atomic::AtomicUsize| {
                n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
            };
            if take(&self.fail) {
                return Err(StoreError::Corrupt("database or disk is full".into()));
            }
            let mut ids = self.ids.lock().unwrap();
            for batch in batches {
                if ids.contains(&batch.id) {
                    assert!(retry, "batch {} offered again as new", batch.id);
                    continue;
                }
                ids.insert(batch.id.clone());
                self.written.lock().unwrap().extend_from_slice(&batch.entries);
            }
            if take(&self.cut) {
                return Err(StoreError::Corrupt("connection reset while committing".into()));
            }
            Ok(())
        }
    }

    fn entry(rpc: &str) -> Entry {
        Entry { tenant: "t".into(), rpc: rpc.into(), outcome: "ok".into(), ..Default::default() }
    }

    /// Polls `cond` on paused time, at most `within` of it.
    async fn until(within: Duration, cond: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        while !cond() {
            assert!(tokio::time::Instant::now() < deadline, "not within {within:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[test]
    fn retries_back_off_doubling_up_to_two_seconds() {
        let mut b = Backoff::new();
        let delays: Vec<u64> = (0..7).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 2000, 2000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_batch_is_kept_and_retried_in_order_until_written() {
        let sink = FakeSink::failing(3);
        let (log, writer) = AuditLog::with_sink(sink.clone(), 16, None);
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.run(stop.clone()));
        let started = tokio::time::Instant::now();
        for rpc in ["/a", "/b", "/c"] {
            log.reserve().unwrap().record(entry(rpc));
        }
        until(Duration::from_secs(1), || !log.healthy()).await;
        // Unwritten records: no action may start, while other calls still get their place.
        assert_eq!(log.reserve().unwrap_err(), AuditError::Unwritable);
        assert!(log.fault().unwrap().contains("full"), "{:?}", log.fault());
        drop(log.reserve_call().expect("calls that run no action go on"));
        until(Duration::from_secs(5), || log.healthy()).await;
        // Three refusals (100 + 200 + 400 ms of backoff), then one write with all of them;
        // the first attempt gathers for `LINGER`, the retries offer the same batch at once.
        assert_eq!(sink.written(), ["/a", "/b", "/c"]);
        assert_eq!(sink.attempts.load(Ordering::SeqCst), 4);
        let waited = started.elapsed();
        let expected = Duration::from_millis(700) + LINGER;
        assert!(waited >= expected && waited < expected + Duration::from_millis(100), "{waited:?}");
        log.reserve().expect("healthy again").record(entry("/d"));
        until(Duration::from_secs(1), || sink.written().len() == 4).await;
        stop.cancel();
        task.await.unwrap();
        assert_eq!(sink.written(), ["/a", "/b", "/c", "/d"], "each record once, in order");
    }

    #[tokio::test(start_paused = true)]
    async fn the_log_stays_unhealthy_until_the_backlog_of_the_fault_is_written() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let sink = FakeSink { gate: Some(gate.clone()), ..FakeSink::failing(1) };
        let (log, writer) = AuditLog::with_sink(sink.clone(), 2 * BATCH, None);
        // More than one batch waits before the writer starts: the first write fails, the
        // next one writes a full batch and leaves the rest still queued.
        for i in 0..BATCH + 10 {
            log.reserve_call().unwrap().record(entry(&format!("/{i}")));
        }
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.run(stop.clone()));
        gate.add_permits(1);
        until(Duration::from_secs(1), || !log.healthy()).await;
        gate.add_permits(1);
        until(Duration::from_secs(1), || sink.written().len() == BATCH).await;
        until(Duration::from_secs(1), || log.fault().is_some_and(|f| f.contains("catching up"))).await;
        assert!(log.reserve().is_err(), "still refusing actions: 10 records from the fault wait");
        gate.add_permits(1);
        until(Duration::from_secs(1), || log.healthy()).await;
        assert_eq!(sink.written().len(), BATCH + 10);
        gate.add_permits(usize::MAX >> 4);
        stop.cancel();
        task.await.unwrap();
        let expected: Vec<String> = (0..BATCH + 10).map(|i| format!("/{i}")).collect();
        assert_eq!(sink.written(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_database_away_sends_records_to_the_spool_and_actions_go_on_until_it_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join(spool::SPOOL_FILE)).unwrap();
        let sink = FakeSink::failing(usize::MAX);
        let (log, writer) = AuditLog::with_sink(sink.clone(), 16, Some(spool));
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.run(stop.clone()));
        for rpc in ["/a", "/b"] {
            log.reserve().unwrap().record(entry(rpc));
        }
        until(Duration::from_secs(1), || log.spooled() == 2).await;
        // Durable and in order: actions go on, and the trail says it is behind, and why.
        assert!(log.healthy(), "{:?}", log.fault());
        assert!(log.spooling().is_some_and(|s| s.contains("2 records") && s.contains("full")), "{:?}", log.spooling());
        log.reserve().expect("an action may run").record(entry("/c"));
        until(Duration::from_secs(1), || log.spooled() == 3).await;
        let attempts = sink.attempts.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let retried = sink.attempts.load(Ordering::SeqCst) - attempts;
        assert!(
            (4..=10).contains(&retried),
            "the spool is offered back with backoff (100 ms doubling to 2 s): {retried} tries in 10 s"
        );
        assert!(sink.written().is_empty());
        // The database is back: the spool goes in whole, then what follows.
        sink.fail.store(0, Ordering::SeqCst);
        until(Duration::from_secs(3), || log.spooled() == 0).await;
        assert_eq!(log.spooling(), None);
        log.reserve().unwrap().record(entry("/d"));
        until(Duration::from_secs(1), || sink.written().len() == 4).await;
        stop.cancel();
        task.await.unwrap();
        assert_eq!(sink.written(), ["/a", "/b", "/c", "/d"]);
        assert!(Spool::open(&dir.path().join(spool::SPOOL_FILE)).unwrap().is_empty());
    }

    /// The database took a batch but its answer was lost (the connection cut while the commit
    /// was on its way): with a spool, the batch waits there under its id and moves as a retry;
    /// without one, it is offered again as it was. Either way each record is in once (the fake
    /// also fails a batch offered as new twice).
    #[tokio::test(start_paused = true)]
    async fn a_write_whose_answer_was_lost_is_not_written_twice() {
        for spooled in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let spool = spooled.then(|| Spool::open(&dir.path().join(spool::SPOOL_FILE)).unwrap());
            let sink = FakeSink::default();
            sink.cut.store(1, Ordering::SeqCst);
            let (log, writer) = AuditLog::with_sink(sink.clone(), 16, spool);
            let stop = tokio_util::sync::CancellationToken::new();
            let task = tokio::spawn(writer.run(stop.clone()));
            for rpc in ["/a", "/b"] {
                log.reserve().unwrap().record(entry(rpc));
            }
            until(Duration::from_secs(1), || sink.attempts.load(Ordering::SeqCst) == 2).await;
            until(Duration::from_secs(1), || log.healthy() && log.spooled() == 0).await;
            log.reserve().unwrap().record(entry("/c"));
            until(Duration::from_secs(1), || sink.attempts.load(Ordering::SeqCst) == 3).await;
            stop.cancel();
            task.await.unwrap();
            assert_eq!(sink.written(), ["/a", "/b", "/c"], "with a spool: {spooled}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_spool_that_cannot_take_a_batch_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open_bounded(&dir.path().join(spool::SPOOL_FILE), 1).unwrap();
        let sink = FakeSink::failing(usize::MAX);
        let (log, writer) = AuditLog::with_sink(sink.clone(), 16, Some(spool));
        let (a, b) = (log.reserve().unwrap(), log.reserve().unwrap());
        a.record(entry("/a"));
        b.record(entry("/b"));
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.run(stop.clone()));
        until(Duration::from_secs(1), || !log.healthy()).await;
        assert_eq!(log.reserve().unwrap_err(), AuditError::Unwritable);
        assert!(log.fault().is_some_and(|f| f.contains("spool is full")), "{:?}", log.fault());
        sink.fail.store(0, Ordering::SeqCst);
        until(Duration::from_secs(5), || log.healthy()).await;
        stop.cancel();
        task.await.unwrap();
        assert_eq!(sink.written(), ["/a", "/b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spool_left_by_a_previous_run_goes_in_first_and_a_dead_database_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(spool::SPOOL_FILE);
        Spool::open(&path).unwrap().push(&Batch::new(vec![entry("/old")], 5)).unwrap();
        let sink = FakeSink::default();
        let (log, writer) = AuditLog::with_sink(sink.clone(), 16, Some(Spool::open(&path).unwrap()));
        assert!(log.spooling().is_some_and(|s| s.contains("previous run")), "{:?}", log.spooling());
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.run(stop.clone()));
        log.reserve().unwrap().record(entry("/new"));
        until(Duration::from_secs(1), || sink.written().len() == 2).await;
        assert_eq!(sink.written(), ["/old", "/new"]);

        // Shut down while the database refuses: the last records wait in the spool.
        sink.fail.store(usize::MAX, Ordering::SeqCst);
        log.reserve().unwrap().record(entry("/last"));
        stop.cancel();
        task.await.unwrap();
        let left = Spool::open(&path).unwrap();
        assert_eq!(
            left.batches().unwrap().into_iter().flat_map(|b| b.entries).map(|e| e.rpc).collect::<Vec<_>>(),
            ["/last"]
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_work_and_gives_places_back() {
        let (log, mut writer) = AuditLog::with_sink(FakeSink::default(), 2, None);
        let first = log.reserve().unwrap();
        let second = log.reserve_call().unwrap();
        assert_eq!(log.queued(), 2);
        assert_eq!(log.reserve().unwrap_err(), AuditError::QueueFull(2));
        assert_eq!(log.reserve_call().unwrap_err(), AuditError::QueueFull(2));
        assert!(log.reserve_many(1).is_err());
        // A refused call's record cannot wait for room: it is counted (and logged).
        assert!(log.record_refusal("10.0.0.1", entry("/refused")));
        assert_eq!(log.lost_refusals(), 1);
        // An unused place is given back.
        drop(second);
        first.record(entry("/kept"));
        assert_eq!(log.reserve_many(2).unwrap_err(), AuditError::QueueFull(2), "none or all");
        let third = log.reserve().unwrap();
        assert_eq!(writer.rx.try_recv().unwrap().rpc, "/kept");
        drop(third);
        assert_eq!(log.queued(), 0);
    }

    #[tokio::test]
    async fn refusals_leave_the_last_quarter_of_the_queue_to_served_calls() {
        let (log, mut writer) = AuditLog::with_sink(FakeSink::default(), 8, None);
        let held: Vec<Place> = (0..5).map(|_| log.reserve_call().unwrap()).collect();
        assert!(log.record_refusal("10.0.0.1", entry("/a")), "room left: queued");
        assert_eq!(log.lost_refusals(), 0);
        // Two places left, a quarter of 8: refusals no longer take them, served calls do.
        assert!(log.record_refusal("10.0.0.1", entry("/b")));
        assert_eq!(log.lost_refusals(), 1);
        let served: Vec<Place> = (0..2).map(|_| log.reserve_call().unwrap()).collect();
        // An unknown caller's refusals from one source: one queued, the rest counted.
        drop(held);
        let stranger = |rpc: &str| Entry {
            rpc: rpc.into(),
            outcome: "denied".into(),
            code: "Unauthenticated".into(),
            ..Default::default()
        };
        assert!(log.record_refusal("10.9.9.9", stranger("/x")));
        assert!((0..100).all(|_| !log.record_refusal("10.9.9.9", stranger("/x"))));
        let queued: Vec<String> = std::iter::from_fn(|| writer.rx.try_recv().ok()).map(|e| e.rpc).collect();
        assert_eq!(queued, ["/a", "/x"]);
        drop(served);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_places_taken_and_gives_up_on_a_dead_database() {
        let sink = FakeSink::default();
        let (log, writer) = AuditLog::with_sink(sink.clone(), 8, None);
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.run(stop.clone()));
        // A call still running at shutdown: its record comes in after the signal.
        let place = log.reserve_call().unwrap();
        stop.cancel();
        tokio::time::sleep(Duration::from_millis(100)).await;
        place.record(entry("/late"));
        task.await.unwrap();
        assert_eq!(sink.written(), ["/late"]);

        // A database that never takes the last records: the writer still ends, in bounded time.
        let sink = FakeSink::failing(usize::MAX);
        let (log, writer) = AuditLog::with_sink(sink.clone(), 8, None);
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.run(stop.clone()));
        log.reserve().unwrap().record(entry("/lost"));
        until(Duration::from_secs(1), || !log.healthy()).await;
        let stopping = tokio::time::Instant::now();
        stop.cancel();
        task.await.unwrap();
        assert!(stopping.elapsed() <= SHUTDOWN_GRACE, "{:?}", stopping.elapsed());
        assert!(sink.written().is_empty());
    }

    /// A body of the given frames, then its end.
    struct Frames(std::collections::VecDeque<http_body::Frame<&'static [u8]>>);

    impl http_body::Body for Frames {
        type Data = &'static [u8];
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    fn trailers(code: tonic::Code) -> http_body::Frame<&'static [u8]> {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", (code as i32).to_string().parse().unwrap());
        http_body::Frame::trailers(t)
    }

    #[tokio::test]
    async fn a_call_is_recorded_with_the_status_its_response_ends_with() {
        use http_body::Body;
        let (log, mut writer) = AuditLog::with_sink(FakeSink::default(), 8, None);
        let call = |rpc: &str| {
            let target = RpcTarget::default();
            target.set("s-1");
            CallRecord::new(log.reserve_call().unwrap(), entry(rpc), target, Instant::now())
        };
        let drain = |mut body: AuditedBody<Frames>| async move {
            while std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await.is_some() {}
        };
        let none = http::HeaderMap::new();
        // A stream that started well (data first) and ended with an error in its trailers.
        let frames = [http_body::Frame::data(&b"event"[..]), trailers(tonic::Code::Unavailable)];
        drain(AuditedBody::audited(Frames(frames.into()), call("/stream"), &none)).await;
        // A stream that ended well.
        let frames = [http_body::Frame::data(&b"event"[..]), trailers(tonic::Code::Ok)];
        drain(AuditedBody::audited(Frames(frames.into()), call("/fine"), &none)).await;
        // A trailers-only refusal: the status is in the headers, the body is empty.
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-status", (tonic::Code::NotFound as i32).to_string().parse().unwrap());
        drop(AuditedBody::audited(Frames(Default::default()), call("/refused"), &headers));
        // The client went away mid-stream.
        let mut gone =
            AuditedBody::audited(Frames([http_body::Frame::data(&b"event"[..])].into()), call("/gone"), &none);
        assert!(std::future::poll_fn(|cx| Pin::new(&mut gone).poll_frame(cx)).await.is_some());
        drop(gone);
        let got: Vec<(String, String, String, String)> = std::iter::from_fn(|| writer.rx.try_recv().ok())
            .map(|e| (e.rpc, e.outcome, e.code, e.session_id))
            .collect();
        let want = [
            ("/stream", "error", "Unavailable"),
            ("/fine", "ok", ""),
            ("/refused", "error", "NotFound"),
            ("/gone", "error", "Cancelled"),
        ];
        assert_eq!(
            got,
            want.map(|(r, o, c)| (r.to_string(), o.to_string(), c.to_string(), "s-1".to_string())),
            "one record per call, at its end"
        );
        assert_eq!(log.queued(), 0, "every place was used");
    }

    #[tokio::test]
    async fn the_stored_chain_is_verified_a_page_at_a_time_and_an_edit_is_named() {
        use sqlx::Connection;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("audit.db").display());
        let store = Store::open(&url).await.unwrap();
        for batch in 0..10 {
            let entries: Vec<Entry> = (0..5)
                .map(|n| Entry { tenant: "t".into(), rpc: format!("/r{batch}-{n}"), ..Default::default() })
                .collect();
            store.append_audit(&[Batch::new(entries, 1000 + batch)], false).await.unwrap();
        }
        // Pages that end inside the chain, at its end, and past it.
        for page in [7, 10, 50, 1000] {
            assert_eq!(verify_stored(&store, page).await.unwrap(), (50, None), "page {page}");
        }
        // Someone with the database's password edits record 23 (the append-only trigger
        // dropped first).
        let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("DROP TRIGGER audit_no_update").execute(&mut db).await.unwrap();
        sqlx::query("UPDATE audit SET target = 'nothing to see' WHERE seq = 23").execute(&mut db).await.unwrap();
        db.close().await.unwrap();
        let (checked, bad) = verify_stored(&store, 7).await.unwrap();
        assert_eq!((checked, bad), (22, Some((23, "hash does not match the record".to_string()))));
        store.close().await;
    }
}
