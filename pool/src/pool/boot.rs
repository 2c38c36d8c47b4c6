//! Keeping spares warm: the refill loop, each boot (ended where it stands by the stop),
//! and the backoff while boots fail.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::worker::boot_worker;
use super::{take_idle_shared, Pool, State, WorkerId};
use crate::error::PoolError;
use crate::launcher::Spawned;

/// The wait before the first boot after one that failed; it doubles with each failure in a
/// row, up to [`BOOT_BACKOFF_MAX`], and a boot that succeeds resets it.
const BOOT_BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BOOT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long to wait before booting again after `failed` boots failed in a row: a missing or
/// broken Chromium is not relaunched in a tight loop, and one fixed again is tried within
/// [`BOOT_BACKOFF_MAX`].
fn boot_backoff(failed: u32) -> Duration {
    match failed {
        0 => Duration::ZERO,
        n => BOOT_BACKOFF_FIRST.saturating_mul(1 << (n - 1).min(16)).min(BOOT_BACKOFF_MAX),
    }
}

impl Pool {
    pub(super) async fn refill_loop(self, shutdown: CancellationToken) {
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let notified = self.inner.refill.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (to_boot, backing_off) = {
                let mut state = self.inner.state();
                if state.closed {
                    break;
                }
                match state.retry_at.filter(|at| *at > tokio::time::Instant::now()) {
                    Some(at) => (0, Some(at)),
                    None => {
                        let max = self.inner.cfg.max_workers;
                        // A caller waits for a worker while idle shared browsers hold every
                        // place: the longest idle one gives its place up.
                        if state.pending > state.warm.len() + state.booting && state.leased.len() >= max {
                            if let Some(idle) = take_idle_shared(&mut state) {
                                let pool = self.clone();
                                self.inner.tasks.spawn(async move { pool.retire(&idle, "its place is needed") });
                            }
                        }
                        let target = (self.inner.cfg.warm + state.pending).min(max.saturating_sub(state.leased.len()));
                        let n = boots_to_start(target, Counts::of(&state));
                        state.booting += n;
                        (n, None)
                    }
                }
            };
            for _ in 0..to_boot {
                let pool = self.clone();
                let id = WorkerId::new();
                let span = tracing::info_span!("worker_boot", worker = %id);
                self.inner.tasks.spawn(pool.boot(id).instrument(span));
            }
            let backoff_over = async {
                match backing_off {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = notified => {}
                _ = backoff_over => {}
                _ = shutdown.cancelled() => break,
            }
        }
        tracing::debug!("refill loop ended");
    }

    async fn boot(self, id: WorkerId) {
        let started = Instant::now();
        // Turns true once Chromium is forked: from then on the launch owns a `Process`, whose
        // drop kills the group and removes its directories, so the boot may be dropped.
        let (forked_tx, mut forked) = watch::channel(false);
        let spawned = {
            let (pool, id) = (self.clone(), id.clone());
            move |spawned: Spawned| {
                let waited_for = {
                    let mut state = pool.inner.state();
                    state.booting_groups.insert(id.clone(), spawned.clone());
                    waited_for(&state)
                };
                if waited_for {
                    raise_aside(spawned);
                }
                forked_tx.send_replace(true);
            }
        };
        let mut booting = {
            let (pool, id) = (self.clone(), id.clone());
            Box::pin(async move {
                let inner = &pool.inner;
                boot_worker(&inner.cfg, &inner.egress, &inner.sandbox, id, &spawned, &inner.cleanups).await
            })
        };
        // The stop ends a boot where it stands: on a busy host a spare booting at idle
        // priority may not finish within the whole launch timeout, which the stop would wait
        // out. Dropped, its CDP calls go with it (none is left waiting for its timeout).
        let stopped = async {
            self.inner.closing.cancelled().await;
            if forked.wait_for(|forked| *forked).await.is_err() {
                // The launch ended before forking: its own result comes.
                std::future::pending::<()>().await;
            }
        };
        let result = tokio::select! {
            result = &mut booting => result,
            _ = stopped => {
                let spawned = self.inner.state().booting_groups.get(&id).cloned();
                abandon(booting, spawned).await;
                Err(PoolError::ShuttingDown)
            }
        };
        // Decide under the lock, act (await) after it is released.
        let orphan = {
            let mut state = self.inner.state();
            state.booting_groups.remove(&id);
            match result {
                Ok(worker) if !state.closed => {
                    state.booting -= 1;
                    tracing::debug!(worker = %id, pid = worker.process.pid(), port = worker.process.port(), ms = started.elapsed().as_millis() as u64, "worker warm");
                    if state.failed_boots > 0 {
                        tracing::info!(failed_before = state.failed_boots, "workers boot again");
                    }
                    state.last_boot_error = None;
                    state.failed_boots = 0;
                    state.retry_at = None;
                    state.warm.push_back(worker);
                    None
                }
                // Still counted as booting until killed, so shutdown waits for it.
                Ok(worker) => Some(worker),
                Err(e) if state.closed || self.inner.closing.is_cancelled() => {
                    state.booting -= 1;
                    tracing::debug!(worker = %id, error = %e, "boot ended by the stop");
                    None
                }
                Err(e) => {
                    state.booting -= 1;
                    state.failed_boots += 1;
                    // Back off so a missing or broken Chromium is not relaunched in a tight loop.
                    let backoff = boot_backoff(state.failed_boots);
                    state.retry_at = Some(tokio::time::Instant::now() + backoff);
                    tracing::error!(worker = %id, error = %e, failed_in_a_row = state.failed_boots, retry_in = ?backoff, "worker failed to boot");
                    state.last_boot_error = Some(e.to_string());
                    None
                }
            }
        };
        self.inner.warm_ready.notify_waiters();
        if let Some(worker) = orphan {
            worker.kill().await;
            self.inner.state().booting -= 1;
        }
        self.inner.refill.notify_one();
    }
}

/// How many boots to start towards `target` warm workers. Spares nobody waits for boot at
/// idle priority (see `launch`) one at a time, so refilling never crowds the sessions running,
/// and two at a time once the warm set is empty: the next caller would wait, and one boot
/// leaves part of the two cores unused (measured with `compare`, the sequential p95 went from
/// 2.0-2.7 to 1.2-1.7 times the p50). While boots fail, one at a time finds out whether they
/// work again.
fn boots_to_start(target: usize, c: Counts) -> usize {
    let missing = target.saturating_sub(c.warm + c.booting);
    if c.failed_boots == 0 && c.pending > 0 {
        return missing;
    }
    let at_once: usize = if c.failed_boots == 0 && c.warm == 0 { 2 } else { 1 };
    missing.min(at_once.saturating_sub(c.booting))
}

/// What [`boots_to_start`] reads of the pool's state.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    warm: usize,
    booting: usize,
    pending: usize,
    failed_boots: u32,
}

impl Counts {
    fn of(state: &State) -> Counts {
        Counts {
            warm: state.warm.len(),
            booting: state.booting,
            pending: state.pending,
            failed_boots: state.failed_boots,
        }
    }
}

/// Drops a boot the stop ended, on a blocking thread (the launch's `Process` kills its
/// group and removes its directories as it drops, reading `/proc`), and waits, bounded,
/// for its processes to be gone.
async fn abandon<F: Send + 'static>(boot: F, spawned: Option<Spawned>) {
    let _ = tokio::task::spawn_blocking(move || {
        drop(boot);
        if let Some(cgroup) = spawned.and_then(|spawned| spawned.cgroup) {
            cgroup.kill_and_wait(Duration::from_secs(5));
        }
    })
    .await;
}

/// Whether a caller waits for the boots in flight: those run at normal priority. Boots
/// nobody waits for (even the next caller's, with no warm worker left) stay at idle, so they
/// take only CPU the running sessions leave: measured with `compare`, raising the next
/// caller's boot ahead of time doubled the sequential session p50 on 2 cores.
pub(super) fn waited_for(state: &State) -> bool {
    state.pending > 0
}

/// Raises a worker from the idle priority and CPU weight it booted at, on a blocking thread
/// (it reads `/proc`), without waiting for it.
pub(super) fn raise_aside(spawned: Spawned) {
    tokio::task::spawn_blocking(move || spawned.raise());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_boot_one_at_a_time_and_two_once_none_is_warm() {
        let c = |warm, booting, pending, failed_boots| Counts { warm, booting, pending, failed_boots };
        // Nobody waiting: one at a time while a spare is warm.
        assert_eq!(boots_to_start(2, c(1, 0, 0, 0)), 1);
        assert_eq!(boots_to_start(4, c(1, 1, 0, 0)), 0);
        // None warm: two at a time, never past the target.
        assert_eq!(boots_to_start(2, c(0, 0, 0, 0)), 2);
        assert_eq!(boots_to_start(4, c(0, 1, 0, 0)), 1);
        assert_eq!(boots_to_start(4, c(0, 2, 0, 0)), 0);
        assert_eq!(boots_to_start(1, c(0, 0, 0, 0)), 1);
        // Callers waiting: everything missing at once.
        assert_eq!(boots_to_start(5, c(0, 1, 3, 0)), 4);
        // Boots failing: one at a time, waiting callers or not.
        assert_eq!(boots_to_start(5, c(0, 0, 3, 2)), 1);
        assert_eq!(boots_to_start(5, c(0, 1, 3, 2)), 0);
        // At the target: nothing.
        assert_eq!(boots_to_start(2, c(2, 0, 0, 0)), 0);
    }

    #[test]
    fn boot_backoff_doubles_up_to_its_cap() {
        let waits: Vec<u64> = (0..9).map(|n| boot_backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [0, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
        assert_eq!(boot_backoff(u32::MAX), BOOT_BACKOFF_MAX);
    }
}
