//! `Acquire` and `AcquireWatched`: one lease, and for the second a report on its wait.

use browserpool_proto::v1 as pb;
use pb::acquire_progress::Progress;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::Instrument;

use super::BoxStream;
use crate::audit::RpcTarget;
use crate::auth::{Claims, Scope};
use crate::convert::{labels_from_pb, session_to_pb, viewport_from_pb};
use crate::envelope;
use crate::error::ServiceError;
use crate::sessions::{require, AcquireSpec, AcquireWatch, SessionState, Sessions};

/// How often AcquireWatched says how its wait stands.
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The session, its context imported when one came with it.
pub(super) async fn acquire(
    sessions: &Sessions,
    claims: &Claims,
    target: &RpcTarget,
    r: pb::AcquireRequest,
    watch: Option<AcquireWatch>,
) -> Result<pb::Session, Status> {
    // An envelope to import is checked before any browser is leased; its emulation holds for
    // each field the request leaves unset.
    let mut r = r;
    if let Some(env) = r.context.clone() {
        require(claims, Scope::ContextImport)?;
        envelope::check_bounds(&env)?;
        envelope::verify(&env).map_err(|e| ServiceError::InvalidArgument(format!("context: {e}")))?;
        r = envelope::emulation_defaults(r, &env);
    }
    let emulation = crate::convert::emulation_from_pb(&r).map_err(ServiceError::InvalidArgument)?;
    let spec = AcquireSpec {
        wait_ms: r.wait_ms,
        ttl_ms: r.ttl_ms,
        idle_timeout_ms: r.idle_timeout_ms,
        viewport: viewport_from_pb(r.viewport),
        labels: labels_from_pb(r.labels),
        record: crate::convert::record_from_pb(r.record),
        watch,
        emulation,
        proxy_id: r.proxy_id.clone(),
    };
    let record = sessions.acquire(claims, spec).await?;
    target.set(&record.id);
    if let Some(env) = &r.context {
        if let Err(e) = sessions.import_context(claims, &record.id, envelope::open(env), false).await {
            sessions.end_detached(&record.id, SessionState::Closed, "context import failed").await;
            return Err(e.into());
        }
        tracing::info!(session = %record.id, origin = %env.origin, cookies = env.cookies.len(), integrity = %env.integrity, "context imported at acquire");
    }
    Ok(pb::Session { cdp_url: sessions.cdp_url(claims, &record), ..session_to_pb(&record) })
}

/// [`acquire`] on a task of its own, reporting its wait every [`REPORT_EVERY`] on the stream,
/// then the session. The caller going away drops the call (and its place in the queue); a
/// session nobody took is ended.
pub(super) fn watched(
    sessions: &Sessions,
    shutdown: &CancellationToken,
    claims: Claims,
    target: RpcTarget,
    req: pb::AcquireRequest,
) -> BoxStream<pb::AcquireProgress> {
    let (sessions, shutdown) = (sessions.clone(), shutdown.clone());
    let (tx, rx) = mpsc::channel::<Result<pb::AcquireProgress, Status>>(4);
    let watch = AcquireWatch::default();
    let task = {
        let sessions = sessions.clone();
        async move {
            let call = acquire(&sessions, &claims, &target, req, Some(watch.clone()));
            tokio::pin!(call);
            let mut every = tokio::time::interval_at(tokio::time::Instant::now() + REPORT_EVERY, REPORT_EVERY);
            let last = loop {
                let status = tokio::select! {
                    done = &mut call => break done.map(|s| pb::AcquireProgress { progress: Some(Progress::Session(s)) }),
                    _ = every.tick() => sessions.wait_status(&watch),
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => break Err(ServiceError::Draining.into()),
                };
                let Some(w) = status else { continue };
                let waiting = pb::AcquireWait {
                    tenant: w.tenant,
                    position: w.position,
                    queued: w.queued,
                    waited_ms: w.waited_ms,
                    reason: w.reason,
                };
                let _ = tx.send(Ok(pb::AcquireProgress { progress: Some(Progress::Waiting(waiting)) })).await;
            };
            if let Err(mpsc::error::SendError(Ok(pb::AcquireProgress { progress: Some(Progress::Session(s)) }))) =
                tx.send(last).await
            {
                let why = "the caller left before taking its session";
                sessions.end_detached(&s.session_id, SessionState::Closed, why).await;
            }
        }
    };
    sessions.spawn(task.instrument(tracing::info_span!("acquire_watched")));
    Box::pin(ReceiverStream::new(rx))
}
