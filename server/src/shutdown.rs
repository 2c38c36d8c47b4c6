//! The stop, in order and in one place: the stages a running server stops in (each a
//! cancellation token), what happens from the signal to the end of the grace period, and what
//! follows once the gRPC listener has returned.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::App;
use crate::model::SessionState;
use crate::sessions::Sessions;

/// The background tasks of a running server that the stop waits for by name (the rest are
/// only tracked in `tasks`).
pub(crate) struct Running {
    /// Every background task; joined last.
    pub(crate) tasks: TaskTracker,
    /// [`Stages::stop_sessions`]: the drain and the grace period.
    pub(crate) stopper: JoinHandle<()>,
    pub(crate) reaper: JoinHandle<()>,
    pub(crate) heartbeat: JoinHandle<()>,
    pub(crate) audit_writer: JoinHandle<()>,
    pub(crate) http: JoinHandle<std::io::Result<()>>,
}

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

    /// The rest of the stop, once the gRPC listener has returned (`served`: it stopped on the
    /// signal, not on an error): waits for the drain and the grace period, closes every
    /// session, kills every worker, then stops the heartbeat (and leaves the replica set), the
    /// audit writer and the HTTP listener, joins every task and closes the store.
    pub(crate) async fn finish(&self, served: bool, running: Running, app: &App, grace: Duration) {
        self.serving.cancel();
        // Every call has returned, so no action runs and the grace wait is over at once; a
        // serve that failed before any signal leaves nothing to wait for.
        if served {
            let _ = running.stopper.await;
        } else {
            running.stopper.abort();
        }
        tracing::info!("closing sessions");
        app.sessions.close_all("server shutdown").await;
        app.pool.shutdown().await;
        let left = app.sessions.join_tasks(grace + Duration::from_secs(5)).await;
        if left > 0 {
            tracing::warn!(tasks = left, "session tasks still running at the end of the stop");
        }
        let _ = running.reaper.await;
        self.beating.cancel();
        let _ = running.heartbeat.await;
        app.sessions.deregister().await;
        self.writers.cancel();
        running.tasks.close();
        running.tasks.wait().await;
        if let Err(e) = running.audit_writer.await {
            tracing::warn!(error = %e, "audit writer panicked");
        }
        match running.http.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "http listener failed"),
            Err(e) => tracing::warn!(error = %e, "http listener panicked"),
            Ok(Ok(())) => {}
        }
        app.store.close().await;
        tracing::info!("stopped");
    }
}
