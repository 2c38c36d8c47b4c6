//! `browserpool.v1.Admin`. Every rpc needs the `admin` scope: [`crate::auth::AuthLayer`]
//! checks it once for the whole service, so the handlers here do not.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use browserpool_pool::{Pool, WorkerState};
use browserpool_proto::v1 as pb;
use futures::Stream;
use tonic::{Request, Response, Status};

use super::{claims, fanout};
use crate::app::App;
use crate::auth::{Keys, Revocations};
use crate::clock::now_ms;
use crate::convert::{session_to_pb, state_from_pb, state_to_pb, tenant_from_pb, tenant_to_pb, timestamp};
use crate::error::ServiceError;
use crate::forward::Peers;
use crate::sessions::{drain_reach, DrainReach, SessionState, Sessions};
use crate::store::Store;
use crate::tenants::Tenants;
use sha2::Digest;

/// Adapter from the generated `Admin` service.
pub struct AdminApi {
    sessions: Sessions,
    pool: Pool,
    keys: Arc<Keys>,
    store: Store,
    revoked: Revocations,
    /// The tenant rules (validation, deletion, token lifetimes).
    tenants: Tenants,
    /// The other replicas, for the whole-service calls.
    peers: Peers,
    /// The upstream proxies.
    proxies: crate::proxies::Proxies,
}

impl AdminApi {
    pub fn new(app: &App, max_token_ttl: Duration, peers: Peers) -> Self {
        let tenants = Tenants::new(app.sessions.clone(), app.store.clone(), app.epochs.clone(), max_token_ttl);
        AdminApi {
            sessions: app.sessions.clone(),
            pool: app.pool.clone(),
            keys: app.keys.clone(),
            store: app.store.clone(),
            revoked: app.revoked.clone(),
            tenants,
            peers,
            proxies: crate::proxies::Proxies::new(app.store.clone(), app.sealer.clone()),
        }
    }

    /// This replica's pool status alone.
    async fn local_status(&self) -> Result<pb::PoolStatusResponse, Status> {
        let status = self.pool.status();
        let mut tenants = Vec::new();
        for t in self.store.tenants().await.map_err(ServiceError::from)? {
            let (active, queued) = self.sessions.usage(&t.id);
            tenants.push(pb::TenantUsage { tenant: t.id, active, queued, max_slots: t.max_slots });
        }
        let owners = self.sessions.worker_owners();
        let replica = self.sessions.replica_id().to_string();
        // Reading memory walks every worker's page tables: off the runtime's threads.
        let pids: Vec<u32> = status.workers.iter().map(|w| w.pid).collect();
        let memories = tokio::task::spawn_blocking(move || {
            pids.into_iter().map(browserpool_pool::launcher::group_memory).collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Status::internal(format!("reading worker memory: {e}")))?;
        let workers = status
            .workers
            .iter()
            .zip(memories)
            .map(|(w, memory)| {
                let (tenant, session_id) = owners.get(&w.id.0).cloned().unwrap_or_default();
                pb::Worker {
                    worker_id: w.id.to_string(),
                    state: match w.state {
                        WorkerState::Warm => pb::WorkerState::Warm,
                        WorkerState::Leased => pb::WorkerState::Leased,
                    } as i32,
                    pid: w.pid,
                    cdp_port: w.cdp_port as u32,
                    started_at: w
                        .started_at
                        .duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .map(|d| timestamp(d.as_millis() as i64)),
                    tenant,
                    session_id,
                    rss_bytes: memory.rss_bytes,
                    pss_bytes: memory.pss_bytes,
                    replica: replica.clone(),
                }
            })
            .collect();
        let (warm, leased, capacity, draining) =
            (status.warm as u32, status.leased as u32, status.capacity as u32, self.sessions.draining());
        let report = self.pool.sandbox();
        let unsandboxed = report.as_ref().is_some_and(|r| !r.sandboxed);
        let sandbox = report.map(|r| r.detail).unwrap_or_default();
        Ok(pb::PoolStatusResponse {
            workers,
            warm,
            leased,
            capacity,
            draining,
            tenants,
            unsandboxed,
            replicas: vec![pb::ReplicaStatus {
                replica,
                grpc_addr: self.sessions.addrs().grpc,
                draining,
                warm,
                leased,
                capacity,
                error: String::new(),
                sandbox,
                unsandboxed,
                resource_fence: self.pool.resource_fence().unwrap_or_default(),
            }],
        })
    }

    /// Drains (or resumes) this replica alone.
    fn drain_here(&self, drain: bool) -> pb::DrainResponse {
        let draining = self.sessions.set_draining(drain);
        let status = self.pool.status();
        let leased = status.leased as u32;
        pb::DrainResponse {
            draining,
            leased,
            replicas: vec![pb::ReplicaStatus {
                replica: self.sessions.replica_id().to_string(),
                grpc_addr: self.sessions.addrs().grpc,
                draining,
                warm: status.warm as u32,
                leased,
                capacity: status.capacity as u32,
                ..Default::default()
            }],
        }
    }
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminApi {
    async fn pool_status(
        &self,
        req: Request<pb::PoolStatusRequest>,
    ) -> Result<Response<pb::PoolStatusResponse>, Status> {
        let local = self.local_status().await?;
        if Peers::forwarded(req.metadata()) {
            return Ok(Response::new(local));
        }
        let others = self.peers.others().await.map_err(ServiceError::from)?;
        let answers = fanout::each(&self.peers, &others, |mut client| {
            let req = self.peers.on_behalf(req.metadata(), pb::PoolStatusRequest {});
            async move { client.pool_status(req).await }
        })
        .await;
        Ok(Response::new(fanout::merge_status(local, answers)))
    }

    async fn list_sessions(
        &self,
        req: Request<pb::AdminListSessionsRequest>,
    ) -> Result<Response<pb::AdminListSessionsResponse>, Status> {
        let r = req.into_inner();
        let tenant = (!r.tenant.is_empty()).then_some(r.tenant);
        let state = state_from_pb(pb::SessionState::try_from(r.state).unwrap_or(pb::SessionState::Unspecified));
        let (rows, next_page_token) = self.sessions.list_all(tenant, state, r.page_size, &r.page_token).await?;
        Ok(Response::new(pb::AdminListSessionsResponse {
            sessions: rows.iter().map(session_to_pb).collect(),
            next_page_token,
        }))
    }

    async fn kill_session(
        &self,
        req: Request<pb::KillSessionRequest>,
    ) -> Result<Response<pb::KillSessionResponse>, Status> {
        let caller = claims(&req)?;
        super::rpc_target(&req).set(&req.get_ref().session_id);
        let r = req.into_inner();
        let record = self.sessions.get(&caller, &r.session_id).await?;
        if record.state.is_terminal() {
            return Ok(Response::new(pb::KillSessionResponse {
                killed: false,
                state: state_to_pb(record.state) as i32,
            }));
        }
        self.sessions.here(&record)?;
        let reason = if r.reason.is_empty() {
            "killed by an operator".to_string()
        } else {
            format!("killed by an operator: {}", r.reason)
        };
        let killed = self.sessions.end_detached(&r.session_id, SessionState::Killed, reason).await;
        tracing::info!(session = %r.session_id, "session killed by an operator");
        Ok(Response::new(pb::KillSessionResponse { killed, state: state_to_pb(SessionState::Killed) as i32 }))
    }

    async fn drain(&self, req: Request<pb::DrainRequest>) -> Result<Response<pb::DrainResponse>, Status> {
        let r = req.get_ref().clone();
        let forwarded = Peers::forwarded(req.metadata());
        let reach = drain_reach(r.all_replicas, &r.replica, self.sessions.replica_id(), forwarded)?;
        let others = match &reach {
            DrainReach::Here => return Ok(Response::new(self.drain_here(r.drain))),
            _ => self.peers.others().await.map_err(ServiceError::from)?,
        };
        let targets: Vec<_> = match &reach {
            DrainReach::Named(id) => {
                let named: Vec<_> = others.into_iter().filter(|o| &o.id == id).collect();
                if named.is_empty() {
                    return Err(ServiceError::NotFound(format!("no live replica has id {id:?}")).into());
                }
                named
            }
            _ => others,
        };
        let message = pb::DrainRequest { drain: r.drain, all_replicas: false, replica: String::new() };
        let answers = fanout::each(&self.peers, &targets, |mut client| {
            let req = self.peers.on_behalf(req.metadata(), message.clone());
            async move { client.drain(req).await }
        })
        .await;
        let mine = r.all_replicas.then(|| self.drain_here(r.drain));
        let merged = fanout::merge_drain(mine, answers);
        if !r.all_replicas {
            // One named replica: its failure is the call's.
            if let Some(e) = merged.replicas.first().map(|s| &s.error).filter(|e| !e.is_empty()) {
                return Err(ServiceError::Unreachable(e.clone()).into());
            }
        }
        Ok(Response::new(merged))
    }

    async fn list_tenants(
        &self,
        _req: Request<pb::ListTenantsRequest>,
    ) -> Result<Response<pb::ListTenantsResponse>, Status> {
        let tenants = self.store.tenants().await.map_err(ServiceError::from)?.into_iter().map(tenant_to_pb).collect();
        Ok(Response::new(pb::ListTenantsResponse { tenants }))
    }

    async fn put_tenant(&self, req: Request<pb::PutTenantRequest>) -> Result<Response<pb::PutTenantResponse>, Status> {
        let t = req
            .into_inner()
            .tenant
            .ok_or_else(|| Status::from(ServiceError::InvalidArgument("tenant: required".into())))?;
        let record = tenant_from_pb(t)?;
        let created = self.tenants.put(&record).await?;
        Ok(Response::new(pb::PutTenantResponse { tenant: Some(tenant_to_pb(record)), created }))
    }

    async fn delete_tenant(
        &self,
        req: Request<pb::DeleteTenantRequest>,
    ) -> Result<Response<pb::DeleteTenantResponse>, Status> {
        let (r, metadata) = (req.get_ref(), req.metadata());
        // A replica asked by another kills only what it holds.
        let forwarded = Peers::forwarded(metadata);
        let deleted = self
            .tenants
            .delete(&r.id, r.force, |elsewhere| async move {
                if forwarded {
                    return Ok(());
                }
                fanout::kill_elsewhere(&self.peers, metadata, elsewhere, "tenant deleted").await
            })
            .await?;
        Ok(Response::new(pb::DeleteTenantResponse { deleted }))
    }

    async fn issue_token(
        &self,
        req: Request<pb::IssueTokenRequest>,
    ) -> Result<Response<pb::IssueTokenResponse>, Status> {
        let r = req.into_inner();
        let (token, claims) = self.tenants.issue_token(&self.keys, &r.tenant, &r.subject, &r.scopes, r.ttl_s).await?;
        Ok(Response::new(pb::IssueTokenResponse {
            token,
            jti: claims.jti,
            expires_at: Some(timestamp(claims.exp as i64 * 1000)),
        }))
    }

    async fn revoke_token(
        &self,
        req: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let jti = req.into_inner().jti;
        if jti.is_empty() {
            return Err(ServiceError::InvalidArgument("jti: required".into()).into());
        }
        let revoked = self.store.revoke(&jti, now_ms()).await.map_err(ServiceError::from)?;
        // Effective here at once; other replicas pick it up on their next refresh.
        self.revoked.insert(&jti);
        tracing::info!(jti_hash = %hex::encode(sha2::Sha256::digest(jti.as_bytes())), revoked, "token revoked");
        Ok(Response::new(pb::RevokeTokenResponse { revoked }))
    }

    type QueryAuditStream = Pin<Box<dyn Stream<Item = Result<pb::AuditRecord, Status>> + Send + 'static>>;

    async fn query_audit(
        &self,
        req: Request<pb::QueryAuditRequest>,
    ) -> Result<Response<Self::QueryAuditStream>, Status> {
        let r = req.into_inner();
        let since = r.since.as_ref().map(crate::convert::millis);
        let filter = crate::audit::query_filter(&r.tenant, &r.session_id, &r.action, since, r.limit);
        let records = self.store.audit_query(&filter).await.map_err(ServiceError::from)?;
        let out: Vec<Result<pb::AuditRecord, Status>> = records
            .into_iter()
            .map(|rec| {
                Ok(pb::AuditRecord {
                    seq: rec.seq,
                    at: Some(timestamp(rec.at_ms)),
                    tenant: rec.entry.tenant,
                    subject: rec.entry.subject,
                    jti_hash: rec.entry.jti_hash,
                    session_id: rec.entry.session_id,
                    rpc: rec.entry.rpc,
                    action: rec.entry.action,
                    alias_of: rec.entry.alias_of,
                    target: rec.entry.target,
                    outcome: rec.entry.outcome,
                    code: rec.entry.code,
                    duration_ms: rec.entry.duration_ms,
                    prev_hash: rec.prev_hash,
                    hash: rec.hash,
                })
            })
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(out))))
    }

    async fn verify_audit(
        &self,
        _req: Request<pb::VerifyAuditRequest>,
    ) -> Result<Response<pb::VerifyAuditResponse>, Status> {
        let (checked, bad) =
            crate::audit::verify_stored(&self.store, crate::audit::VERIFY_PAGE).await.map_err(ServiceError::from)?;
        Ok(Response::new(match bad {
            None => pb::VerifyAuditResponse {
                ok: true,
                records_checked: checked,
                first_bad_seq: 0,
                message: format!("{checked} records, chain intact"),
            },
            Some((seq, why)) => {
                pb::VerifyAuditResponse { ok: false, records_checked: checked, first_bad_seq: seq, message: why }
            }
        }))
    }

    async fn put_proxy(&self, req: Request<pb::PutProxyRequest>) -> Result<Response<pb::PutProxyResponse>, Status> {
        let caller = claims(&req)?;
        let p = req
            .into_inner()
            .proxy
            .ok_or_else(|| Status::from(ServiceError::InvalidArgument("proxy: required".into())))?;
        let spec = crate::proxies::ProxySpec {
            id: p.id,
            url: p.url,
            username: p.username,
            password: p.password,
            direct_hosts: p.direct_hosts,
            tenants: p.tenants,
        };
        let (record, created) = self.proxies.put(spec, owner(&caller)).await?;
        Ok(Response::new(pb::PutProxyResponse { proxy: Some(proxy_to_pb(record)), created }))
    }

    async fn list_proxies(
        &self,
        req: Request<pb::ListProxiesRequest>,
    ) -> Result<Response<pb::ListProxiesResponse>, Status> {
        let caller = claims(&req)?;
        let proxies = self.proxies.list(owner(&caller)).await?.into_iter().map(proxy_to_pb).collect();
        Ok(Response::new(pb::ListProxiesResponse { proxies }))
    }

    async fn delete_proxy(
        &self,
        req: Request<pb::DeleteProxyRequest>,
    ) -> Result<Response<pb::DeleteProxyResponse>, Status> {
        let caller = claims(&req)?;
        let deleted = self.proxies.delete(&req.get_ref().id, owner(&caller)).await?;
        Ok(Response::new(pb::DeleteProxyResponse { deleted }))
    }
}

/// The tenant a proxy call is scoped to: none for an admin, the caller's own for a
/// `proxies:write` token.
fn owner(caller: &crate::auth::Claims) -> Option<&str> {
    (!caller.is_admin()).then_some(caller.tenant.as_str())
}

/// A proxy on the wire: never its password, only whether one is stored.
fn proxy_to_pb(r: crate::store::ProxyRecord) -> pb::Proxy {
    pb::Proxy {
        has_password: r.password_sealed.is_some(),
        id: r.id,
        url: r.url,
        username: r.username,
        password: String::new(),
        direct_hosts: r.direct_hosts,
        tenants: r.tenants,
    }
}
