//! Session deadlines: a heap on the sessions' [`Clock`] that wakes the reaper at the earliest
//! deadline, so it never scans every session each tick.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;

/// A session's deadlines, and the terms they came from (for the reason it ends).
pub struct Terms {
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub idle_deadline_ms: i64,
    pub idle_timeout_ms: i64,
}

/// Why a session is due, if it is, in the words its next caller reads: `idle for 300 s;
/// idle_timeout_ms 300000` or `ttl reached: 600 s after acquire; ttl_ms 600000`.
pub fn verdict(now_ms: i64, t: &Terms) -> Option<String> {
    if now_ms >= t.expires_at_ms {
        let ttl = t.expires_at_ms - t.created_at_ms;
        Some(format!("ttl reached: {} after acquire; ttl_ms {ttl}", seconds(ttl)))
    } else if now_ms >= t.idle_deadline_ms {
        Some(format!("idle for {}; idle_timeout_ms {}", seconds(t.idle_timeout_ms), t.idle_timeout_ms))
    } else {
        None
    }
}

/// `300 s`, `2.5 s`.
fn seconds(ms: i64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{} s", ms as f64 / 1000.0)
    }
}

/// (deadline, session id), soonest first. An entry may be stale (the session was touched or
/// ended since): whoever pops it looks at the session and schedules it again if needed.
pub struct Deadlines {
    clock: Clock,
    heap: Mutex<BinaryHeap<Reverse<(i64, String)>>>,
    changed: Notify,
}

impl Deadlines {
    pub fn new(clock: Clock) -> Deadlines {
        Deadlines { clock, heap: Mutex::new(BinaryHeap::new()), changed: Notify::new() }
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn heap(&self) -> std::sync::MutexGuard<'_, BinaryHeap<Reverse<(i64, String)>>> {
        self.heap.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Schedules a look at `id` at `at_ms`; wakes the waiter if that is sooner.
    pub fn schedule(&self, id: &str, at_ms: i64) {
        self.heap().push(Reverse((at_ms, id.to_string())));
        self.changed.notify_one();
    }

    /// Sleeps until the earliest deadline (waking early when a sooner one is scheduled), then
    /// pops every entry due by then. `None` once shutdown is signalled.
    pub async fn next_due(&self, shutdown: &CancellationToken) -> Option<Vec<String>> {
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next = self.heap().peek().map(|Reverse((at, _))| *at);
            // Nothing scheduled: sleep until something is (the minute is only a safety net).
            let wake = match next {
                Some(at) => self.clock.instant_of(at),
                None => Instant::now() + Duration::from_secs(60),
            };
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = notified => continue,
                _ = shutdown.cancelled() => return None,
            }
            let now = self.clock.now_ms();
            let mut heap = self.heap();
            let mut due = Vec::new();
            while let Some(Reverse((at, _))) = heap.peek() {
                if *at > now {
                    break;
                }
                let Reverse((_, id)) = heap.pop().expect("peeked");
                due.push(id);
            }
            if !due.is_empty() {
                return Some(due);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_prefers_ttl_and_waits_for_both() {
        let t = Terms { created_at_ms: 0, expires_at_ms: 600_000, idle_deadline_ms: 300_500, idle_timeout_ms: 300_000 };
        assert_eq!(verdict(600_000, &t).as_deref(), Some("ttl reached: 600 s after acquire; ttl_ms 600000"));
        assert_eq!(verdict(300_600, &t).as_deref(), Some("idle for 300 s; idle_timeout_ms 300000"));
        assert_eq!(verdict(300_400, &t), None);
        let short = Terms { idle_timeout_ms: 2_500, ..t };
        assert_eq!(verdict(300_600, &short).as_deref(), Some("idle for 2.5 s; idle_timeout_ms 2500"));
    }

    /// Deadlines fire at their virtual time, the soonest first; a sooner one scheduled while
    /// waiting wakes the waiter early; with nothing scheduled it returns nothing.
    #[tokio::test(start_paused = true)]
    async fn deadlines_fire_at_their_time_on_paused_virtual_time() {
        let d = std::sync::Arc::new(Deadlines::new(Clock::new()));
        let stop = CancellationToken::new();
        let t0 = Instant::now();
        let now = d.clock().now_ms();
        d.schedule("ttl", now + 5_000);
        d.schedule("idle", now + 2_000);
        assert_eq!(d.next_due(&stop).await, Some(vec!["idle".to_string()]));
        assert_eq!(t0.elapsed(), Duration::from_millis(2_000));

        // A sooner deadline scheduled while the waiter sleeps towards 5 s.
        let d2 = d.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = d2.clock().now_ms();
            d2.schedule("touched", now + 1_000);
        });
        assert_eq!(d.next_due(&stop).await, Some(vec!["touched".to_string()]));
        assert_eq!(t0.elapsed(), Duration::from_millis(3_500));
        assert_eq!(d.next_due(&stop).await, Some(vec!["ttl".to_string()]));
        assert_eq!(t0.elapsed(), Duration::from_millis(5_000));

        // Two due at once come together.
        let now = d.clock().now_ms();
        d.schedule("a", now + 100);
        d.schedule("b", now + 100);
        let mut both = d.next_due(&stop).await.unwrap();
        both.sort();
        assert_eq!(both, ["a", "b"]);

        // Nothing scheduled: an hour of virtual time passes and nothing is due; shutdown ends it.
        let d3 = d.clone();
        let stop3 = stop.clone();
        let waiter = tokio::spawn(async move { d3.next_due(&stop3).await });
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert!(!waiter.is_finished(), "woke with nothing due");
        stop.cancel();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
