//! `browserpool.v1.Admin`. Every rpc needs the `admin` scope.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use browserpool_pool::WorkerState;
use browserpool_proto::v1 as pb;
use futures::Stream;
use tonic::{Request, Response, Status};

use super::{claims, not_yet};
use crate::auth::{Keys, Scope};
use crate::convert::timestamp;
use crate::error::ServiceError;
use crate::sessions::{require, Sessions};
use crate::store::Store;

/// Longest lifetime `IssueToken` grants.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Lifetime when `ttl_s` is 0.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// Adapter from the generated `Admin` service.
pub struct AdminApi {
    sessions: Sessions,
    keys: Arc<Keys>,
    store: Store,
}

impl AdminApi {
    pub fn new(sessions: Sessions, keys: Arc<Keys>, store: Store) -> Self {
        AdminApi { sessions, keys, store }
    }
}

fn admin<T>(req: &Request<T>) -> Result<crate::auth::Claims, Status> {
    let claims = claims(req)?;
    if !claims.is_admin() {
        return Err(ServiceError::PermissionDenied(format!("this call needs scope {}", Scope::Admin.as_str())).into());
    }
    Ok(claims)
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminApi {
    async fn pool_status(&self, req: Request<pb::PoolStatusRequest>) -> Result<Response<pb::PoolStatusResponse>, Status> {
        admin(&req)?;
        let status = self.sessions.pool().status();
        let workers = status
            .workers
            .iter()
            .map(|w| pb::Worker {
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
                ..Default::default()
            })
            .collect();
        Ok(Response::new(pb::PoolStatusResponse {
            workers,
            warm: status.warm as u32,
            leased: status.leased as u32,
            capacity: status.capacity as u32,
            draining: false,
            tenants: Vec::new(),
        }))
    }

    async fn list_sessions(&self, _req: Request<pb::AdminListSessionsRequest>) -> Result<Response<pb::AdminListSessionsResponse>, Status> {
        not_yet("Admin.ListSessions arrives with the ops console")
    }

    async fn kill_session(&self, _req: Request<pb::KillSessionRequest>) -> Result<Response<pb::KillSessionResponse>, Status> {
        not_yet("Admin.KillSession arrives with the ops console")
    }

    async fn drain(&self, _req: Request<pb::DrainRequest>) -> Result<Response<pb::DrainResponse>, Status> {
        not_yet("Admin.Drain arrives with the ops console")
    }

    async fn list_tenants(&self, _req: Request<pb::ListTenantsRequest>) -> Result<Response<pb::ListTenantsResponse>, Status> {
        not_yet("Admin.ListTenants arrives with tenancy")
    }

    async fn put_tenant(&self, _req: Request<pb::PutTenantRequest>) -> Result<Response<pb::PutTenantResponse>, Status> {
        not_yet("Admin.PutTenant arrives with tenancy")
    }

    async fn delete_tenant(&self, _req: Request<pb::DeleteTenantRequest>) -> Result<Response<pb::DeleteTenantResponse>, Status> {
        not_yet("Admin.DeleteTenant arrives with tenancy")
    }

    async fn issue_token(&self, req: Request<pb::IssueTokenRequest>) -> Result<Response<pb::IssueTokenResponse>, Status> {
        let caller = admin(&req)?;
        let r = req.into_inner();
        require(&caller, Scope::Admin)?;
        if self.store.tenant(&r.tenant).await.map_err(ServiceError::from)?.is_none() {
            return Err(ServiceError::NotFound(format!("tenant {:?}", r.tenant)).into());
        }
        let ttl = match r.ttl_s {
            0 => DEFAULT_TOKEN_TTL,
            s => Duration::from_secs(s as u64),
        };
        if ttl > MAX_TOKEN_TTL {
            return Err(ServiceError::InvalidArgument(format!("ttl_s: at most {}", MAX_TOKEN_TTL.as_secs())).into());
        }
        let (token, claims) = self.keys.issue(&r.tenant, &r.subject, &r.scopes, ttl).map_err(ServiceError::from)?;
        tracing::info!(tenant = %claims.tenant, subject = %claims.sub, jti_hash = %claims.jti_hash(), "token issued");
        Ok(Response::new(pb::IssueTokenResponse {
            token,
            jti: claims.jti,
            expires_at: Some(timestamp(claims.exp as i64 * 1000)),
        }))
    }

    async fn revoke_token(&self, _req: Request<pb::RevokeTokenRequest>) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        not_yet("Admin.RevokeToken arrives with tenancy and revocation")
    }

    type QueryAuditStream = Pin<Box<dyn Stream<Item = Result<pb::AuditRecord, Status>> + Send + 'static>>;

    async fn query_audit(&self, _req: Request<pb::QueryAuditRequest>) -> Result<Response<Self::QueryAuditStream>, Status> {
        not_yet("Admin.QueryAudit arrives with the audit trail")
    }

    async fn verify_audit(&self, _req: Request<pb::VerifyAuditRequest>) -> Result<Response<pb::VerifyAuditResponse>, Status> {
        not_yet("Admin.VerifyAudit arrives with the audit trail")
    }
}
