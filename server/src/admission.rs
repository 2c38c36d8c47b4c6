//! Admission: per-tenant slots and a fair queue in front of the pool.
//!
//! A session needs a slot of its tenant (`max_slots`) and a slot of the server
//! (`--max-workers`). When either is taken, `Acquire` waits: FIFO within a tenant, round-robin
//! across tenants, so a tenant with a hundred queued requests delays another tenant's first one
//! by at most one turn. A full tenant queue answers at once. Dropping a waiting future leaves
//! the queue; dropping a [`Slot`] frees it and admits the next waiter.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Why admission refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    #[error("tenant {tenant} queue is full ({queued} waiting, max_queue {max_queue}); retry later with backoff, or ask an admin to raise max_queue")]
    QueueFull { tenant: String, queued: usize, max_queue: u32 },
    #[error("tenant {0} has max_slots 0: it may run no session; ask an admin to raise max_slots")]
    NoSlots(String),
}

/// One tenant's limits as admission sees them.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    pub max_slots: u32,
    pub max_queue: u32,
}

/// A caller's place in its tenant's queue, for whoever reports on the wait: [`Admission::admit`]
/// fills it when the caller queues. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Ticket(Arc<AtomicU64>);

struct Waiter {
    id: u64,
    max_slots: u32,
    tx: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    active: HashMap<String, u32>,
    queues: HashMap<String, VecDeque<Waiter>>,
    /// Tenants with waiters, in turn order.
    turns: VecDeque<String>,
    used: u32,
    next_id: u64,
}

/// The admission controller. Cheap to clone.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

struct Inner {
    capacity: u32,
    state: Mutex<State>,
}

/// A held slot; dropping it frees the slot and admits the next waiter.
pub struct Slot {
    inner: Arc<Inner>,
    tenant: String,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("tenant", &self.tenant).finish()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        if let Some(n) = state.active.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
        }
        state.used = state.used.saturating_sub(1);
        self.inner.dispatch(&mut state);
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Grants queued waiters while capacity allows, one per tenant per turn.
    fn dispatch(&self, state: &mut State) {
        let mut stalled = 0;
        while state.used < self.capacity && stalled < state.turns.len() {
            let Some(tenant) = state.turns.pop_front() else { break };
            let active = state.active.get(&tenant).copied().unwrap_or(0);
            let queue = state.queues.entry(tenant.clone()).or_default();
            let granted = match queue.front() {
                Some(w) if active < w.max_slots => {
                    let w = queue.pop_front().expect("front exists");
                    // A waiter whose receiver is gone (cancelled) is skipped, not charged.
                    if w.tx.send(()).is_ok() {
                        *state.active.entry(tenant.clone()).or_default() += 1;
                        state.used += 1;
                        true
                    } else {
                        // Try the same tenant again on its next turn.
                        false
                    }
                }
                _ => false,
            };
            let has_more = state.queues.get(&tenant).is_some_and(|q| !q.is_empty());
            if has_more {
                state.turns.push_back(tenant);
            } else {
                state.queues.remove(&tenant);
            }
            stalled = if granted { 0 } else { stalled + 1 };
        }
    }
}

/// Removes a cancelled waiter from its queue (or gives back a grant that raced the cancel).
struct Waiting {
    inner: Arc<Inner>,
    tenant: String,
    id: u64,
    rx: Option<oneshot::Receiver<()>>,
    /// Set once the grant is taken: nothing to undo.
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.inner.lock();
        let before = state.queues.get(&self.tenant).map(|q| q.len()).unwrap_or(0);
        if let Some(q) = state.queues.get_mut(&self.tenant) {
            q.retain(|w| w.id != self.id);
        }
        let after = state.queues.get(&self.tenant).map(|q| q.len()).unwrap_or(0);
        if before == after {
            // Not in the queue: it was granted. If nobody took the grant, give the slot back.
            if let Some(mut rx) = self.rx.take() {
                if rx.try_recv().is_ok() {
                    if let Some(n) = state.active.get_mut(&self.tenant) {
                        *n = n.saturating_sub(1);
                    }
                    state.used = state.used.saturating_sub(1);
                }
            }
        }
        if state.queues.get(&self.tenant).is_some_and(|q| q.is_empty()) {
            state.queues.remove(&self.tenant);
            state.turns.retain(|t| t != &self.tenant);
        }
        self.inner.dispatch(&mut state);
    }
}

impl Admission {
    /// A controller for a server of `capacity` sessions.
    pub fn new(capacity: u32) -> Admission {
        Admission { inner: Arc::new(Inner { capacity: capacity.max(1), state: Mutex::new(State::default()) }) }
    }

    /// Waits for a slot of `tenant`. The caller bounds the wait (e.g. with a timeout); dropping
    /// the future leaves the queue and leaks nothing. `ticket`, when given, is where
    /// [`Admission::position`] finds the caller while it queues.
    pub async fn admit(&self, tenant: &str, quota: Quota, ticket: Option<&Ticket>) -> Result<Slot, AdmissionError> {
        if quota.max_slots == 0 {
            return Err(AdmissionError::NoSlots(tenant.into()));
        }
        let waiting = {
            let mut state = self.inner.lock();
            let queued = state.queues.get(tenant).map(|q| q.len()).unwrap_or(0);
            let active = state.active.get(tenant).copied().unwrap_or(0);
            if queued == 0 && active < quota.max_slots && state.used < self.inner.capacity && state.turns.is_empty() {
                *state.active.entry(tenant.into()).or_default() += 1;
                state.used += 1;
                return Ok(Slot { inner: self.inner.clone(), tenant: tenant.into() });
            }
            if queued >= quota.max_queue as usize {
                return Err(AdmissionError::QueueFull { tenant: tenant.into(), queued, max_queue: quota.max_queue });
            }
            state.next_id += 1;
            let id = state.next_id;
            if let Some(ticket) = ticket {
                ticket.0.store(id, Ordering::Relaxed);
            }
            let (tx, rx) = oneshot::channel();
            state.queues.entry(tenant.into()).or_default().push_back(Waiter { id, max_slots: quota.max_slots, tx });
            if !state.turns.iter().any(|t| t == tenant) {
                state.turns.push_back(tenant.into());
            }
            self.inner.dispatch(&mut state);
            // The receiver lives in the guard, so a cancel right after a grant can give it back.
            Waiting { inner: self.inner.clone(), tenant: tenant.into(), id, rx: Some(rx), done: false }
        };
        let mut waiting = waiting;
        let granted = match waiting.rx.as_mut() {
            Some(rx) => rx.await.is_ok(),
            None => false,
        };
        if granted {
            // Ours now: the guard must not give it back (nor touch the queue it already left).
            waiting.rx = None;
            waiting.done = true;
            return Ok(Slot { inner: self.inner.clone(), tenant: tenant.into() });
        }
        drop(waiting);
        Err(AdmissionError::NoSlots(tenant.into()))
    }

    /// Why a caller of `tenant` with `quota` would wait now, in words for the caller: the
    /// tenant's quota, the server's capacity (both when both are full), or else the callers
    /// queued before it.
    pub fn why_waiting(&self, tenant: &str, quota: Quota) -> String {
        let state = self.inner.lock();
        let active = state.active.get(tenant).copied().unwrap_or(0);
        let mut full = Vec::new();
        if active >= quota.max_slots {
            full.push(format!(
                "tenant {tenant} is at its quota: {active} of its max_slots {} sessions in use",
                quota.max_slots
            ));
        }
        if state.used >= self.inner.capacity {
            full.push(format!(
                "this server is at capacity: {} of its --max-workers {} browsers in use",
                state.used, self.inner.capacity
            ));
        }
        if full.is_empty() {
            let queued: usize = state.queues.values().map(VecDeque::len).sum();
            full.push(format!("{queued} callers queued before it are still waiting for a browser"));
        }
        full.join(", and ")
    }

    /// Callers waiting in each tenant's queue, by tenant; empty queues left out.
    pub fn queue_depths(&self) -> Vec<(String, u32)> {
        let state = self.inner.lock();
        let mut depths: Vec<(String, u32)> =
            state.queues.iter().filter(|(_, q)| !q.is_empty()).map(|(t, q)| (t.clone(), q.len() as u32)).collect();
        depths.sort();
        depths
    }

    /// (place from 1, queue length) of the caller holding `ticket` in `tenant`'s queue; `None`
    /// when it is not queued (not yet, or no longer).
    pub fn position(&self, tenant: &str, ticket: &Ticket) -> Option<(u32, u32)> {
        let id = ticket.0.load(Ordering::Relaxed);
        let state = self.inner.lock();
        let queue = state.queues.get(tenant)?;
        let place = queue.iter().position(|w| w.id == id)?;
        Some((place as u32 + 1, queue.len() as u32))
    }

    /// (active, queued) of a tenant.
    pub fn usage(&self, tenant: &str) -> (u32, u32) {
        let state = self.inner.lock();
        (state.active.get(tenant).copied().unwrap_or(0), state.queues.get(tenant).map(|q| q.len() as u32).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const Q: Quota = Quota { max_slots: 10, max_queue: 100 };

    /// Lets spawned waiters run up to their await (virtual time: costs nothing).
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn immediate_when_free_and_bounded_by_tenant_slots() {
        let adm = Admission::new(4);
        let one = Quota { max_slots: 1, max_queue: 5 };
        let a1 = adm.admit("a", one, None).await.unwrap();
        assert_eq!(adm.usage("a"), (1, 0));
        let waiter = tokio::spawn({
            let adm = adm.clone();
            async move { adm.admit("a", one, None).await.map(|_s| ()) }
        });
        settle().await;
        assert_eq!(adm.usage("a"), (1, 1), "second waits for the tenant's only slot");
        // Another tenant is not held up by a's quota.
        let b1 = adm.admit("b", one, None).await.unwrap();
        drop(a1);
        waiter.await.unwrap().unwrap();
        drop(b1);
    }

    #[tokio::test(start_paused = true)]
    async fn round_robin_across_tenants_fifo_within() {
        let adm = Admission::new(1);
        let holder = adm.admit("a", Q, None).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Tenant a queues five, then b queues one: b must be served second, not sixth.
        for (tenant, n) in [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 0)] {
            let (adm, order) = (adm.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let slot = adm.admit(tenant, Q, None).await.unwrap();
                order.lock().unwrap().push(format!("{tenant}{n}"));
                tokio::time::sleep(Duration::from_millis(2)).await;
                drop(slot);
            }));
            settle().await;
        }
        drop(holder);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["a0", "b0", "a1", "a2", "a3", "a4"]);
    }

    /// A ticket finds its caller's place while it queues, moving up as those before it are
    /// served; none before it queues or once it has its slot or gave up.
    #[tokio::test(start_paused = true)]
    async fn a_ticket_tells_its_place_in_the_queue() {
        let adm = Admission::new(1);
        let holder = adm.admit("a", Q, None).await.unwrap();
        let (first, second) = (Ticket::default(), Ticket::default());
        assert_eq!(adm.position("a", &second), None, "not queued yet");
        let queue = |ticket: Ticket| {
            let adm = adm.clone();
            tokio::spawn(async move { adm.admit("a", Q, Some(&ticket)).await.map(drop) })
        };
        let a = queue(first.clone());
        settle().await;
        let b = queue(second.clone());
        settle().await;
        assert_eq!((adm.position("a", &first), adm.position("a", &second)), (Some((1, 2)), Some((2, 2))));
        assert_eq!(adm.position("b", &second), None, "another tenant's queue");
        drop(holder);
        a.await.unwrap().unwrap();
        assert_eq!(adm.position("a", &first), None, "served");
        b.await.unwrap().unwrap();
        assert_eq!(adm.position("a", &second), None);
    }

    #[tokio::test(start_paused = true)]
    async fn full_queue_is_refused_at_once_with_its_length() {
        let adm = Admission::new(1);
        let _holder = adm.admit("a", Q, None).await.unwrap();
        let small = Quota { max_slots: 10, max_queue: 1 };
        let _waiter = tokio::spawn({
            let adm = adm.clone();
            async move { adm.admit("a", small, None).await.map(|_s| ()) }
        });
        settle().await;
        let err = adm.admit("a", small, None).await.unwrap_err();
        assert_eq!(err, AdmissionError::QueueFull { tenant: "a".into(), queued: 1, max_queue: 1 });
        assert!(err.to_string().contains("1 waiting"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_told_what_is_full() {
        let adm = Admission::new(2);
        let one = Quota { max_slots: 1, max_queue: 5 };
        let _a = adm.admit("a", one, None).await.unwrap();
        assert_eq!(adm.why_waiting("a", one), "tenant a is at its quota: 1 of its max_slots 1 sessions in use");
        let _b = adm.admit("b", Q, None).await.unwrap();
        assert_eq!(adm.why_waiting("b", Q), "this server is at capacity: 2 of its --max-workers 2 browsers in use");
        assert_eq!(
            adm.why_waiting("a", one),
            "tenant a is at its quota: 1 of its max_slots 1 sessions in use, \
             and this server is at capacity: 2 of its --max-workers 2 browsers in use"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_waiter_leaves_the_queue_and_leaks_nothing() {
        let adm = Admission::new(1);
        let holder = adm.admit("a", Q, None).await.unwrap();
        let gave_up = tokio::time::timeout(Duration::from_millis(20), adm.admit("b", Q, None)).await;
        assert!(gave_up.is_err());
        assert_eq!(adm.usage("b"), (0, 0), "the cancelled waiter is gone");
        drop(holder);
        assert_eq!(adm.usage("a"), (0, 0));
        let next = tokio::time::timeout(Duration::from_millis(100), adm.admit("c", Q, None)).await.expect("slot free");
        assert!(next.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn zero_slots_is_refused() {
        let adm = Admission::new(1);
        assert!(matches!(
            adm.admit("a", Quota { max_slots: 0, max_queue: 1 }, None).await,
            Err(AdmissionError::NoSlots(_))
        ));
    }
}
