//! `browserpool.v1.Sessions`.

use std::pin::Pin;

use browserpool_proto::v1 as pb;
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::{claims, not_yet};
use crate::convert::{labels_from_pb, report_to_pb, session_to_pb, state_from_pb, to_json, viewport_from_pb};
use crate::error::ServiceError;
use crate::sessions::{require, AcquireSpec, ActionInput, Sessions};
use crate::auth::Scope;

/// Adapter from the generated `Sessions` service to [`Sessions`].
pub struct SessionsApi {
    sessions: Sessions,
    shutdown: watch::Receiver<bool>,
}

impl SessionsApi {
    pub fn new(sessions: Sessions, shutdown: watch::Receiver<bool>) -> Self {
        SessionsApi { sessions, shutdown }
    }
}

fn action_input(a: pb::Action) -> ActionInput {
    ActionInput {
        action: a.action,
        selector: a.selector,
        payload: a.payload.as_ref().map(to_json).unwrap_or(serde_json::Value::Null),
        timeout_ms: a.timeout_ms,
        tab_index: a.tab_index,
        id: a.id,
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::sessions_server::Sessions for SessionsApi {
    async fn acquire(&self, req: Request<pb::AcquireRequest>) -> Result<Response<pb::Session>, Status> {
        let claims = claims(&req)?;
        let r = req.into_inner();
        if r.context.is_some() {
            return not_yet("AcquireRequest.context (context import) arrives with context envelopes");
        }
        let spec = AcquireSpec {
            wait_ms: r.wait_ms,
            ttl_ms: r.ttl_ms,
            idle_timeout_ms: r.idle_timeout_ms,
            viewport: viewport_from_pb(r.viewport),
            labels: labels_from_pb(r.labels),
        };
        let record = self.sessions.acquire(&claims, spec).await?;
        Ok(Response::new(session_to_pb(&record)))
    }

    async fn release(&self, req: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        let claims = claims(&req)?;
        let (released, state) = self.sessions.release(&claims, &req.get_ref().session_id).await?;
        Ok(Response::new(pb::ReleaseResponse { released, state: crate::convert::state_to_pb(state) as i32 }))
    }

    async fn renew(&self, _req: Request<pb::RenewRequest>) -> Result<Response<pb::Session>, Status> {
        not_yet("Renew arrives with tenant quotas and TTLs")
    }

    async fn get(&self, req: Request<pb::GetSessionRequest>) -> Result<Response<pb::Session>, Status> {
        let claims = claims(&req)?;
        require(&claims, Scope::SessionsRead)?;
        let record = self.sessions.get(&claims, &req.get_ref().session_id).await?;
        Ok(Response::new(session_to_pb(&record)))
    }

    async fn list(&self, req: Request<pb::ListSessionsRequest>) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let claims = claims(&req)?;
        let r = req.into_inner();
        let state = state_from_pb(pb::SessionState::try_from(r.state).unwrap_or(pb::SessionState::Unspecified));
        let (rows, next_page_token) = self.sessions.list(&claims, state, r.page_size, &r.page_token).await?;
        Ok(Response::new(pb::ListSessionsResponse { sessions: rows.iter().map(session_to_pb).collect(), next_page_token }))
    }

    type DriveStream = BoxStream<pb::DriveEvent>;

    /// The first message names the session; the server answers `attached`, then one `result`
    /// per action, in order. The stream ends when the client closes its side or the server
    /// shuts down; a bad action only produces a failed result.
    async fn drive(&self, req: Request<Streaming<pb::DriveRequest>>) -> Result<Response<Self::DriveStream>, Status> {
        let claims = claims(&req)?;
        let mut inbound = req.into_inner();
        let first = match inbound.next().await {
            Some(Ok(m)) => m,
            Some(Err(status)) => return Err(status),
            None => return Err(Status::invalid_argument("drive: the first message must name session_id")),
        };
        if first.session_id.is_empty() {
            return Err(Status::invalid_argument("drive: the first message must name session_id"));
        }
        let session_id = first.session_id.clone();
        let record = self.sessions.attach(&claims, &session_id).await?;
        let (tx, rx) = mpsc::channel::<Result<pb::DriveEvent, Status>>(16);
        let attached = pb::DriveEvent { kind: Some(pb::drive_event::Kind::Attached(session_to_pb(&record))) };
        tx.send(Ok(attached)).await.map_err(|_| Status::cancelled("client went away"))?;
        let sessions = self.sessions.clone();
        let mut shutdown = self.shutdown.clone();
        let span = tracing::info_span!("drive", session = %session_id);
        tokio::spawn(
            async move {
                let mut pending = first.action;
                loop {
                    if let Some(action) = pending.take() {
                        let report = sessions.act(&claims, &session_id, action_input(action)).await;
                        let event = pb::DriveEvent { kind: Some(pb::drive_event::Kind::Result(report_to_pb(report))) };
                        if tx.send(Ok(event)).await.is_err() {
                            break;
                        }
                    }
                    let next = tokio::select! {
                        m = inbound.next() => m,
                        _ = shutdown.changed() => {
                            let _ = tx.send(Err(Status::unavailable("server is shutting down"))).await;
                            break;
                        }
                    };
                    match next {
                        None => break,
                        Some(Err(status)) => {
                            tracing::debug!(%status, "drive: client stream error");
                            break;
                        }
                        Some(Ok(m)) => {
                            if !m.session_id.is_empty() && m.session_id != session_id {
                                let _ = tx.send(Err(Status::invalid_argument("drive: session_id differs from the first message"))).await;
                                break;
                            }
                            pending = m.action;
                        }
                    }
                }
                tracing::debug!("drive stream ended");
            }
            .instrument(span),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn act(&self, req: Request<pb::ActRequest>) -> Result<Response<pb::ActionResult>, Status> {
        let claims = claims(&req)?;
        let r = req.into_inner();
        self.sessions.attach(&claims, &r.session_id).await?;
        let action = r.action.ok_or_else(|| Status::from(ServiceError::InvalidArgument("action: required".into())))?;
        let report = self.sessions.act(&claims, &r.session_id, action_input(action)).await;
        Ok(Response::new(report_to_pb(report)))
    }

    async fn batch(&self, _req: Request<pb::BatchRequest>) -> Result<Response<pb::BatchResponse>, Status> {
        not_yet("Batch arrives with the full action table")
    }

    type EventsStream = BoxStream<pb::Event>;

    async fn events(&self, _req: Request<pb::EventsRequest>) -> Result<Response<Self::EventsStream>, Status> {
        not_yet("Events arrives with tabs and dialogs")
    }

    async fn export_context(&self, _req: Request<pb::ExportContextRequest>) -> Result<Response<pb::ContextEnvelope>, Status> {
        not_yet("ExportContext arrives with context envelopes")
    }

    async fn import_context(&self, _req: Request<pb::ImportContextRequest>) -> Result<Response<pb::ImportContextResponse>, Status> {
        not_yet("ImportContext arrives with context envelopes")
    }
}
