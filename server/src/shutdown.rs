//! The stop, in order and in one place: the stages a running server stops in (each a
//! cancellation token), and what happens from the signal to the end of the grace period.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::model::SessionState;
use crate::sessions::Sessions;

/// The stop, in order: each stage's token is a child of the next one's, so cancelling a later
/// stage also stops everything of the earlier ones, and nothing outlives `writers`.
pub(crate) struct Stages {
    /// The gRPC listener, streams, relays, the reaper, the pool's refill and the cache
    /// refreshes: cancelled once the drain and the grace period are over.
    pub(crate) serving: CancellationToken,
    /// The replica heartbeat: cancelled once every session has ended, so other replicas do
    /// not take this one for gone while it closes them.
    pub(crate) beating: CancellationToken,
    /// The audit writer and the HTTP listener: cancelled last, after every session's records
    /// were queued.
    pub(crate) writers: CancellationToken,
}

impl Stages {
    pub(crate) fn new() -> Stages {
        let writers = CancellationToken::new();
        let beating = writers.child_token();
        let serving = beating.child_token();
        Stages { serving, beating, writers }
    }

    /// From `signal` on: refuses new sessions; with a drain timeout, lets live sessions go on
    /// until they end or it runs out; then cancels [`Stages::serving`] (streams and loops end)
    /// and gives running actions `grace`, ending the sessions of those still running as
    /// KILLED (and, after a drain that ran out, every session left) so the graceful stop never
    /// waits on an action's own, longer deadline.
    pub(crate) fn stop_sessions(
        &self,
        signal: impl Future<Output = ()> + Send + 'static,
        sessions: Sessions,
        drain_timeout: Duration,
        grace: Duration,
    ) -> impl Future<Output = ()> + Send + 'static {
        let serving = self.serving.clone();
        async move {
            signal.await;
            sessions.set_draining(true);
            // Draining: /readyz answers 503 and Acquire UNAVAILABLE, while live sessions go
            // on as usual until they end or the drain timeout runs out.
            if !drain_timeout.is_zero() && sessions.live_count() > 0 {
                tracing::info!(timeout = ?drain_timeout, sessions = sessions.live_count(), "draining: live sessions go on until they end");
                let left = sessions.wait_sessions(drain_timeout).await;
                if left > 0 {
                    tracing::warn!(sessions = left, "the drain timeout ran out with sessions live");
                }
            }
            tracing::info!(grace = ?grace, "shutting down: running actions get the grace period");
            // Streams and loops watch this; they end so the graceful stop can finish.
            serving.cancel();
            let running = sessions.wait_actions(grace).await;
            if running > 0 {
                tracing::warn!(running, "actions still running after the grace period: their sessions are killed");
                sessions.end_busy(SessionState::Killed, "server shutdown: the grace period ran out").await;
            }
            if !drain_timeout.is_zero() && sessions.live_count() > 0 {
                sessions.end_all(SessionState::Killed, "server shutdown: the drain timeout ran out").await;
            }
        }
    }
}
