//! `browserpool.v1.Sessions`.

use browserpool_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::{acquire, claims, claims_about, rpc_target, BoxStream};
use crate::app::App;
use crate::audit::{AuditLog, Place};
use crate::auth::Scope;
use crate::clock::now_ms;
use crate::convert::{artifact_to_pb, event_to_pb, report_to_pb, session_to_pb, state_from_pb, to_json};
use crate::envelope;
use crate::error::ServiceError;
use crate::sessions::{require, ActionInput, LiveMode, Sessions};
use browserpool_pool::CaptureOptions;

/// Adapter from the generated `Sessions` service to [`Sessions`].
pub struct SessionsApi {
    sessions: Sessions,
    /// The application's state (the audit trail, for each action's record).
    app: App,
    shutdown: CancellationToken,
}

impl SessionsApi {
    pub fn new(app: &App, shutdown: CancellationToken) -> Self {
        SessionsApi { sessions: app.sessions.clone(), app: app.clone(), shutdown }
    }

    /// A session on the wire, with its `cdp_url` while it is live here and the caller may
    /// drive it (every caller of these rpcs passed the ownership check).
    fn session(&self, claims: &crate::auth::Claims, record: &crate::store::SessionRecord) -> pb::Session {
        pb::Session { cdp_url: self.sessions.cdp_url(claims, record), ..session_to_pb(record) }
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

type DriveTx = mpsc::Sender<Result<pb::DriveEvent, Status>>;

/// A `Drive` stream once attached: the session's events flow on a task of their own, so a
/// long action never holds them back; actions run one at a time, in order. Ends when the
/// client closes its side, the session ends (its events end, `SessionEnded` last), or the
/// server shuts down.
#[allow(clippy::too_many_arguments)]
async fn drive_session(
    app: App,
    claims: crate::auth::Claims,
    session_id: String,
    mut pending: Option<pb::Action>,
    mut inbound: Streaming<pb::DriveRequest>,
    mut events: browserpool_pool::EventReader,
    tx: DriveTx,
    shutdown: CancellationToken,
) {
    let sessions = &app.sessions;
    let event_tx = tx.clone();
    let event_session = session_id.clone();
    let (ended_tx, mut ended) = tokio::sync::oneshot::channel::<()>();
    let forward = sessions.spawn(
        async move {
            while let Some((event, dropped)) = events.next().await {
                let event = pb::DriveEvent {
                    kind: Some(pb::drive_event::Kind::Event(event_to_pb(&event_session, event, dropped))),
                };
                if event_tx.send(Ok(event)).await.is_err() {
                    break;
                }
            }
            let _ = ended_tx.send(());
        }
        .in_current_span(),
    );
    loop {
        if let Some(action) = pending.take() {
            let place = match audit_place(&app.audit) {
                Ok(place) => place,
                Err(status) => {
                    let _ = tx.send(Err(status)).await;
                    break;
                }
            };
            let report =
                sessions.act(&claims, &session_id, action_input(action), "/browserpool.v1.Sessions/Drive", place).await;
            let event = pb::DriveEvent { kind: Some(pb::drive_event::Kind::Result(report_to_pb(report))) };
            if tx.send(Ok(event)).await.is_err() {
                break;
            }
        }
        let next = tokio::select! {
            m = inbound.next() => m,
            _ = &mut ended => break,
            _ = shutdown.cancelled() => {
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
                    let _ = tx
                        .send(Err(Status::invalid_argument("drive: session_id differs from the first message")))
                        .await;
                    break;
                }
                pending = m.action;
            }
        }
    }
    forward.abort();
    tracing::debug!("drive stream ended");
}

/// A place for an action's record; refused (UNAVAILABLE) while the audit trail cannot be
/// written or its queue is full, so no action runs unrecorded.
fn audit_place(audit: &AuditLog) -> Result<Place, Status> {
    Ok(audit.reserve().map_err(ServiceError::from)?)
}

/// Records a context transfer: origin, counts and the integrity hash, never the envelope.
/// The origin is the client's text until an import canonicalizes it: its userinfo is dropped.
fn audit_context(
    place: Place,
    claims: &crate::auth::Claims,
    rpc: &str,
    session: &str,
    env: &pb::ContextEnvelope,
    outcome: &str,
) {
    let target = format!(
        "origin={} cookies={} storage_keys={} integrity={}",
        crate::redact::origin_target(&env.origin),
        env.cookies.len(),
        env.local_storage.len() + env.session_storage.len(),
        env.integrity
    );
    place.record(claims.entry(session, rpc, target, outcome));
}

/// Records a file put, fetched or deleted: its name, size and hash, never its content.
fn audit_file(place: Place, claims: &crate::auth::Claims, rpc: &str, session: &str, target: String) {
    place.record(claims.entry(session, rpc, target, "ok"));
}

/// The size of each `FileChunk` of a `GetFile` stream.
const FILE_CHUNK: usize = 64 << 10;

/// How long a `Drive` stream may stay silent before naming its session.
const FIRST_MESSAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[tonic::async_trait]
impl pb::sessions_server::Sessions for SessionsApi {
    async fn acquire(&self, req: Request<pb::AcquireRequest>) -> Result<Response<pb::Session>, Status> {
        let (claims, target) = (claims(&req)?, rpc_target(&req));
        Ok(Response::new(acquire::acquire(&self.sessions, &claims, &target, req.into_inner(), None).await?))
    }

    type AcquireWatchedStream = BoxStream<pb::AcquireProgress>;

    /// Acquire, with a report on its wait every second while it waits; the session last.
    async fn acquire_watched(
        &self,
        req: Request<pb::AcquireRequest>,
    ) -> Result<Response<Self::AcquireWatchedStream>, Status> {
        let (claims, target) = (claims(&req)?, rpc_target(&req));
        let stream = acquire::watched(&self.sessions, &self.shutdown, claims, target, req.into_inner());
        Ok(Response::new(stream))
    }

    async fn release(&self, req: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        let claims = claims_about(&req)?;
        let r = req.get_ref();
        let (released, state) = self.sessions.release(&claims, &r.session_id, r.failed).await?;
        Ok(Response::new(pb::ReleaseResponse { released, state: crate::convert::state_to_pb(state) as i32 }))
    }

    async fn renew(&self, req: Request<pb::RenewRequest>) -> Result<Response<pb::Session>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        let record = self.sessions.renew(&claims, &r.session_id, r.idle_timeout_ms).await?;
        Ok(Response::new(self.session(&claims, &record)))
    }

    async fn get(&self, req: Request<pb::GetSessionRequest>) -> Result<Response<pb::Session>, Status> {
        let claims = claims_about(&req)?;
        require(&claims, Scope::SessionsRead)?;
        let record = self.sessions.get(&claims, &req.get_ref().session_id).await?;
        let mut session = self.session(&claims, &record);
        let (artifacts, refused) = self.sessions.artifacts(&claims, &record.id).await;
        session.artifacts = artifacts.iter().map(artifact_to_pb).collect();
        session.artifacts_refused = refused;
        Ok(Response::new(session))
    }

    async fn list(&self, req: Request<pb::ListSessionsRequest>) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let claims = claims(&req)?;
        let r = req.into_inner();
        let state = state_from_pb(pb::SessionState::try_from(r.state).unwrap_or(pb::SessionState::Unspecified));
        let (rows, next_page_token) = self.sessions.list(&claims, state, r.page_size, &r.page_token).await?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: rows
                .iter()
                .map(|r| {
                    let (artifacts, refused) = self.sessions.listed_artifacts(r);
                    let artifacts = artifacts.iter().map(artifact_to_pb).collect();
                    pb::Session { artifacts, artifacts_refused: refused, ..self.session(&claims, r) }
                })
                .collect(),
            next_page_token,
        }))
    }

    type DriveStream = BoxStream<pb::DriveEvent>;

    /// The first message names the session; the server answers `attached`, then one `result`
    /// per action, in order, interleaved with the session's live events. The stream ends when
    /// the client closes its side, the session ends, or the server shuts down; a bad action
    /// only produces a failed result. The response headers go out at once, before the first
    /// message is read, so a client may await the call before it sends; a bad first message
    /// or a session the token may not use ends the stream with its status.
    async fn drive(&self, req: Request<Streaming<pb::DriveRequest>>) -> Result<Response<Self::DriveStream>, Status> {
        let claims = claims(&req)?;
        let target = rpc_target(&req);
        let mut inbound = req.into_inner();
        let shutdown = self.shutdown.clone();
        let (tx, rx) = mpsc::channel::<Result<pb::DriveEvent, Status>>(64);
        let (sessions, app) = (self.sessions.clone(), self.app.clone());
        self.sessions.spawn(async move {
            let first = tokio::select! {
                m = inbound.next() => m,
                _ = shutdown.cancelled() => Some(Err(Status::unavailable("server is shutting down"))),
                _ = tokio::time::sleep(FIRST_MESSAGE_WAIT) => {
                    Some(Err(Status::deadline_exceeded("drive: no first message naming session_id")))
                }
            };
            let first = match first {
                Some(Ok(m)) if !m.session_id.is_empty() => m,
                Some(Err(status)) => {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
                Some(Ok(_)) | None => {
                    let _ =
                        tx.send(Err(Status::invalid_argument("drive: the first message must name session_id"))).await;
                    return;
                }
            };
            let session_id = first.session_id.clone();
            target.set(&session_id);
            let attached = async {
                let record = sessions.attach(&claims, &session_id).await?;
                let events = sessions.events(&claims, &session_id).await?;
                Ok::<_, Status>((record, events))
            };
            let (record, events) = match attached.await {
                Ok(pair) => pair,
                Err(status) => {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
            };
            let session = pb::Session { cdp_url: sessions.cdp_url(&claims, &record), ..session_to_pb(&record) };
            let attached = pb::DriveEvent { kind: Some(pb::drive_event::Kind::Attached(session)) };
            if tx.send(Ok(attached)).await.is_err() {
                return;
            }
            let span = tracing::info_span!("drive", session = %session_id);
            drive_session(app, claims, session_id, first.action, inbound, events, tx, shutdown).instrument(span).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn act(&self, req: Request<pb::ActRequest>) -> Result<Response<pb::ActionResult>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        self.sessions.attach(&claims, &r.session_id).await?;
        let action = r.action.ok_or_else(|| Status::from(ServiceError::InvalidArgument("action: required".into())))?;
        let place = audit_place(&self.app.audit)?;
        let report = self
            .sessions
            .act(&claims, &r.session_id, action_input(action), "/browserpool.v1.Sessions/Act", place)
            .await;
        Ok(Response::new(report_to_pb(report)))
    }

    async fn batch(&self, req: Request<pb::BatchRequest>) -> Result<Response<pb::BatchResponse>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        let started = std::time::Instant::now();
        let inputs = r.actions.into_iter().map(action_input).collect();
        let reports = self.sessions.batch(&claims, &r.session_id, inputs, r.stop_on_error).await?;
        let results: Vec<pb::ActionResult> = reports.into_iter().map(report_to_pb).collect();
        let succeeded = results.iter().filter(|r| r.ok).count() as u32;
        Ok(Response::new(pb::BatchResponse {
            failed: results.len() as u32 - succeeded,
            succeeded,
            results,
            duration_ms: started.elapsed().as_millis().min(u32::MAX as u128) as u32,
        }))
    }

    type EventsStream = BoxStream<pb::Event>;

    /// Live events of the session until it ends (its last event is `session_ended`).
    async fn events(&self, req: Request<pb::EventsRequest>) -> Result<Response<Self::EventsStream>, Status> {
        let claims = claims_about(&req)?;
        let session_id = req.into_inner().session_id;
        let mut events = self.sessions.events(&claims, &session_id).await?;
        let shutdown = self.shutdown.clone();
        let (tx, rx) = mpsc::channel::<Result<pb::Event, Status>>(64);
        self.sessions.spawn(
            async move {
                loop {
                    let next = tokio::select! {
                        e = events.next() => e,
                        _ = shutdown.cancelled() => break,
                    };
                    let Some((event, dropped)) = next else { break };
                    if tx.send(Ok(event_to_pb(&session_id, event, dropped))).await.is_err() {
                        break;
                    }
                }
            }
            .instrument(tracing::info_span!("events")),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn export_context(
        &self,
        req: Request<pb::ExportContextRequest>,
    ) -> Result<Response<pb::ContextEnvelope>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        let opts = CaptureOptions {
            origin: r.origin,
            include_storage: r.include_storage.unwrap_or(true),
            include_http_auth: r.include_http_auth,
            capture_user_agent: r.capture_user_agent,
        };
        let place = audit_place(&self.app.audit)?;
        let state = self.sessions.export_context(&claims, &r.session_id, opts).await?;
        let mut env = envelope::seal(state, now_ms());
        let emulation = self.sessions.get(&claims, &r.session_id).await?.emulation;
        envelope::carry_emulation(&mut env, &emulation);
        audit_context(place, &claims, "/browserpool.v1.Sessions/ExportContext", &r.session_id, &env, "ok");
        // Never the envelope itself: only what identifies it.
        tracing::info!(session = %r.session_id, origin = %env.origin, cookies = env.cookies.len(), integrity = %env.integrity, "context exported");
        Ok(Response::new(env))
    }

    async fn import_context(
        &self,
        req: Request<pb::ImportContextRequest>,
    ) -> Result<Response<pb::ImportContextResponse>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        require(&claims, Scope::ContextImport)?;
        let env = r.envelope.ok_or_else(|| Status::from(ServiceError::InvalidArgument("envelope: required".into())))?;
        envelope::check_bounds(&env)?;
        let place = audit_place(&self.app.audit)?;
        if let Err(integrity_error) = envelope::verify(&env) {
            // Still an owner check first, so a foreign id stays NOT_FOUND.
            self.sessions.attach(&claims, &r.session_id).await?;
            tracing::info!(session = %r.session_id, origin = %crate::redact::origin_target(&env.origin), "context refused: integrity mismatch");
            audit_context(place, &claims, "/browserpool.v1.Sessions/ImportContext", &r.session_id, &env, "error");
            return Ok(Response::new(pb::ImportContextResponse { ok: false, integrity_error, ..Default::default() }));
        }
        let (applied_cookies, applied_storage_keys) =
            self.sessions.import_context(&claims, &r.session_id, envelope::open(&env), r.strict_origin).await?;
        tracing::info!(session = %r.session_id, origin = %env.origin, cookies = applied_cookies, keys = applied_storage_keys, integrity = %env.integrity, "context imported");
        audit_context(place, &claims, "/browserpool.v1.Sessions/ImportContext", &r.session_id, &env, "ok");
        Ok(Response::new(pb::ImportContextResponse {
            ok: true,
            applied_cookies,
            applied_storage_keys,
            integrity_error: String::new(),
        }))
    }

    async fn put_file(&self, req: Request<Streaming<pb::PutFileRequest>>) -> Result<Response<pb::Artifact>, Status> {
        let claims = claims(&req)?;
        let target = rpc_target(&req);
        let mut inbound = req.into_inner();
        let first = tokio::select! {
            m = inbound.next() => m,
            _ = tokio::time::sleep(FIRST_MESSAGE_WAIT) => {
                return Err(Status::deadline_exceeded("put_file: no first message naming session_id and name"));
            }
        };
        let first = match first {
            Some(Ok(m)) if !m.session_id.is_empty() => m,
            Some(Err(status)) => return Err(status),
            Some(Ok(_)) | None => {
                return Err(
                    ServiceError::InvalidArgument("put_file: the first message must name session_id".into()).into()
                )
            }
        };
        let id = first.session_id.clone();
        target.set(&id);
        let place = audit_place(&self.app.audit)?;
        let mut upload = self.sessions.put_file(&claims, &id, &first.name).await?;
        upload.write(&first.chunk).map_err(ServiceError::from)?;
        while let Some(m) = inbound.next().await {
            let m = m?;
            if !m.session_id.is_empty() && m.session_id != id {
                return Err(ServiceError::InvalidArgument(
                    "put_file: session_id differs from the first message".into(),
                )
                .into());
            }
            if !m.name.is_empty() && m.name != first.name {
                return Err(
                    ServiceError::InvalidArgument("put_file: name differs from the first message".into()).into()
                );
            }
            upload.write(&m.chunk).map_err(ServiceError::from)?;
        }
        let file = self.sessions.uploaded(&id, upload).await?;
        audit_file(place, &claims, "/browserpool.v1.Sessions/PutFile", &id, file.audit_target());
        tracing::info!(session = %id, name = %file.info.name, size = file.info.size, "file uploaded");
        Ok(Response::new(artifact_to_pb(&file)))
    }

    async fn list_files(&self, req: Request<pb::ListFilesRequest>) -> Result<Response<pb::ListFilesResponse>, Status> {
        let claims = claims_about(&req)?;
        let files = self.sessions.list_files(&claims, &req.get_ref().session_id).await?;
        Ok(Response::new(pb::ListFilesResponse { artifacts: files.iter().map(artifact_to_pb).collect() }))
    }

    type GetFileStream = BoxStream<pb::FileChunk>;

    async fn get_file(&self, req: Request<pb::GetFileRequest>) -> Result<Response<Self::GetFileStream>, Status> {
        use tokio::io::AsyncReadExt;
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        let place = audit_place(&self.app.audit)?;
        let (file, info) = match pb::ArtifactKind::try_from(r.kind) {
            Ok(pb::ArtifactKind::Recording) => self.sessions.open_recording(&claims, &r.session_id).await?,
            _ => self.sessions.open_file(&claims, &r.session_id, &r.name).await?,
        };
        audit_file(place, &claims, "/browserpool.v1.Sessions/GetFile", &r.session_id, info.audit_target());
        let (tx, rx) = mpsc::channel::<Result<pb::FileChunk, Status>>(4);
        let shutdown = self.shutdown.clone();
        self.sessions.spawn(
            async move {
                let mut file = tokio::fs::File::from_std(file);
                let mut artifact = Some(artifact_to_pb(&info));
                let mut buf = vec![0u8; FILE_CHUNK];
                loop {
                    let read = tokio::select! {
                        n = file.read(&mut buf) => n,
                        _ = shutdown.cancelled() => Err(std::io::Error::other("server is shutting down")),
                    };
                    let chunk = match read {
                        Ok(0) if artifact.is_none() => break,
                        Ok(n) => buf[..n].to_vec(),
                        Err(e) => {
                            let _ = tx.send(Err(Status::unavailable(format!("reading the file: {e}")))).await;
                            break;
                        }
                    };
                    let last = chunk.is_empty();
                    if tx.send(Ok(pb::FileChunk { chunk, artifact: artifact.take() })).await.is_err() || last {
                        break;
                    }
                }
            }
            .instrument(tracing::info_span!("get_file")),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delete_file(
        &self,
        req: Request<pb::DeleteFileRequest>,
    ) -> Result<Response<pb::DeleteFileResponse>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        let place = audit_place(&self.app.audit)?;
        self.sessions.delete_file(&claims, &r.session_id, &r.name).await?;
        audit_file(place, &claims, "/browserpool.v1.Sessions/DeleteFile", &r.session_id, format!("name={}", r.name));
        Ok(Response::new(pb::DeleteFileResponse {}))
    }

    async fn delete_artifacts(
        &self,
        req: Request<pb::DeleteArtifactsRequest>,
    ) -> Result<Response<pb::DeleteArtifactsResponse>, Status> {
        let claims = claims_about(&req)?;
        let id = &req.get_ref().session_id;
        let place = audit_place(&self.app.audit)?;
        let deleted = self.sessions.delete_artifacts(&claims, id).await?;
        audit_file(place, &claims, "/browserpool.v1.Sessions/DeleteArtifacts", id, format!("deleted={deleted}"));
        Ok(Response::new(pb::DeleteArtifactsResponse { deleted }))
    }

    async fn live_view(&self, req: Request<pb::LiveViewRequest>) -> Result<Response<pb::LiveViewLink>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        let mode = match pb::LiveViewMode::try_from(r.mode) {
            Ok(pb::LiveViewMode::Control) => LiveMode::Control,
            Ok(pb::LiveViewMode::View | pb::LiveViewMode::Unspecified) => LiveMode::View,
            Err(_) => return Err(Status::invalid_argument(format!("mode: unknown live view mode {}", r.mode))),
        };
        let ttl = std::time::Duration::from_millis(r.ttl_ms as u64);
        let place = audit_place(&self.app.audit)?;
        let link = self.sessions.live_view(&claims, &r.session_id, mode, ttl).await?;
        let target = format!("link={} mode={} ttl_ms={}", link.link_id, mode.as_str(), r.ttl_ms);
        audit_file(place, &claims, "/browserpool.v1.Sessions/LiveView", &r.session_id, target);
        Ok(Response::new(pb::LiveViewLink {
            url: link.url,
            mode: match link.mode {
                LiveMode::View => pb::LiveViewMode::View,
                LiveMode::Control => pb::LiveViewMode::Control,
            } as i32,
            expires_at: Some(crate::convert::timestamp(link.expires_ms)),
            link_id: link.link_id,
        }))
    }

    async fn revoke_live_view(
        &self,
        req: Request<pb::RevokeLiveViewRequest>,
    ) -> Result<Response<pb::RevokeLiveViewResponse>, Status> {
        let claims = claims_about(&req)?;
        let r = req.into_inner();
        let place = audit_place(&self.app.audit)?;
        let revoked = self.sessions.revoke_live_view(&claims, &r.session_id, &r.link_id).await?;
        let target = format!("link={} revoked={revoked}", if r.link_id.is_empty() { "all" } else { &r.link_id });
        audit_file(place, &claims, "/browserpool.v1.Sessions/RevokeLiveView", &r.session_id, target);
        Ok(Response::new(pb::RevokeLiveViewResponse { revoked }))
    }
}
