//! The tower layer that checks every RPC's token (health and reflection excepted), scope
//! `admin` for the whole Admin service, and writes each call's RPC-level audit record.

use super::*;

/// The metadata key the MCP tools' own calls name their MCP session with: the call's record
/// carries it as its target (`mcp_session=<id>`). A client could set it on its own calls too;
/// it only labels that client's own records.
pub const MCP_SESSION_METADATA: &str = "x-browserpool-mcp-session";

/// The target of a call's record: the MCP session it was made for, when it names one that
/// reads as an id.
fn call_target<B>(req: &http::Request<B>) -> String {
    let named = req.headers().get(MCP_SESSION_METADATA).and_then(|v| v.to_str().ok());
    match named {
        Some(id) if id.len() <= 80 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) => {
            format!("mcp_session={id}")
        }
        _ => String::new(),
    }
}

/// Tower layer: validates the bearer token of every request except health and reflection and
/// puts the [`Claims`] in the request extensions. A bad token (revoked, or its tenant deleted
/// or re-created since) never reaches a handler, nor does a token without scope `admin` reach
/// an `Admin` handler.
///
/// It also appends the RPC-level audit record of every call it sees: refusals at once, other
/// calls when their response ends (streams included), with the final status. A call takes
/// its place in the audit queue before it runs; when the queue is full it is refused
/// (UNAVAILABLE).
#[derive(Clone)]
pub struct AuthLayer {
    tokens: TokenCheck,
    audit: crate::audit::AuditLog,
    throttle: crate::throttle::Throttle,
}

impl AuthLayer {
    pub fn new(keys: Arc<Keys>, revoked: Revocations, epochs: Epochs, audit: crate::audit::AuditLog) -> Self {
        AuthLayer { tokens: TokenCheck { keys, revoked, epochs }, audit, throttle: Default::default() }
    }

    /// Counts calls without a valid token against `throttle`, which the HTTP listener's CDP
    /// endpoint shares: one budget per address across both listeners.
    pub fn with_throttle(self, throttle: crate::throttle::Throttle) -> Self {
        AuthLayer { throttle, ..self }
    }
}

/// Everything a bearer token is checked against: signature and claims, the revoked-jti
/// deny-list and its tenant's epoch. The gRPC layer and the CDP proxy share it.
#[derive(Clone)]
pub struct TokenCheck {
    keys: Arc<Keys>,
    revoked: Revocations,
    epochs: Epochs,
}

impl TokenCheck {
    pub fn new(keys: Arc<Keys>, revoked: Revocations, epochs: Epochs) -> Self {
        TokenCheck { keys, revoked, epochs }
    }

    /// The claims of an `Authorization: Bearer <jwt>` header value.
    pub fn verify_header(&self, header: Option<&str>) -> Result<Claims, AuthError> {
        let claims = self.keys.verify_header(header)?;
        match self.withdrawn(&claims.jti, Some((&claims.tenant, &claims.tenant_epoch))) {
            Some(e) => Err(e),
            None => Ok(claims),
        }
    }

    /// Why a token verified earlier no longer holds: its `jti` revoked, or (given its tenant
    /// and epoch) its tenant deleted or made again. Read from the in-memory caches, so cheap
    /// enough to ask often (a CDP connection asks twice a second).
    pub fn withdrawn(&self, jti: &str, tenant: Option<(&str, &str)>) -> Option<AuthError> {
        if self.revoked.contains(jti) {
            Some(AuthError::Invalid("token revoked (`browserpool admin tokens revoke`): issue a new one".into()))
        } else if tenant.is_some_and(|(tenant, epoch)| !self.epochs.is_current(tenant, epoch)) {
            Some(AuthError::TenantGone)
        } else {
            None
        }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        AuthService { inner, tokens: self.tokens.clone(), audit: self.audit.clone(), throttle: self.throttle.clone() }
    }
}

/// The service [`AuthLayer`] wraps around the gRPC routes.
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    tokens: TokenCheck,
    audit: crate::audit::AuditLog,
    throttle: crate::throttle::Throttle,
}

/// RPC paths that need no token.
pub(super) fn is_public(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.") || path.starts_with("/grpc.reflection.")
}

/// The method of an rpc of the `Admin` service, if `path` is one. Every one needs scope
/// `admin`, checked here once for the whole service, so an rpc added later cannot forget it;
/// the proxy rpcs also take `proxies:write` (see [`may_call`]).
pub(crate) fn admin_method(path: &str) -> Option<&str> {
    path.strip_prefix('/')
        .and_then(|p| p.strip_prefix(browserpool_proto::v1::admin_server::SERVICE_NAME))
        .and_then(|method| method.strip_prefix('/'))
}

/// The Admin rpcs a tenant holding `proxies:write` may call, on its own proxies only (the
/// handlers scope them to its tenant).
const TENANT_PROXY_RPCS: [&str; 3] = ["PutProxy", "ListProxies", "DeleteProxy"];

/// Whether `claims` may call `path` at all: anything but an Admin rpc; an Admin rpc with
/// scope `admin`; a proxy rpc with `proxies:write`.
pub(crate) fn may_call(path: &str, claims: &Claims) -> bool {
    match admin_method(path) {
        None => true,
        Some(_) if claims.is_admin() => true,
        Some(method) => TENANT_PROXY_RPCS.contains(&method) && claims.has(Scope::ProxiesWrite),
    }
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for AuthService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<AuditedBody<ResBody>>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<ReqBody>) -> Self::Future {
        // The path as a record or a log line may hold it: an rpc of this service, or a fixed
        // word with the length (a client chooses the path, 8 KiB of it if it likes).
        let path = crate::audit::rpc_name(req.uri().path());
        if is_public(req.uri().path()) {
            let fut = self.inner.call(req);
            return Box::pin(async move { Ok(fut.await?.map(AuditedBody::unaudited)) });
        }
        let header = req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let verified = self.tokens.verify_header(header);
        match verified {
            Ok(claims) if !may_call(req.uri().path(), &claims) => {
                crate::telemetry::record_tenant(&claims.tenant);
                let entry = crate::audit::Entry {
                    tenant: claims.tenant.clone(),
                    subject: claims.sub.clone(),
                    jti_hash: claims.jti_hash(),
                    rpc: path.clone(),
                    outcome: "denied".into(),
                    code: "PermissionDenied".into(),
                    ..Default::default()
                };
                if self.audit.record_refusal(&source_of(&req), entry) {
                    tracing::info!(path = %path, tenant = %claims.tenant, subject = %claims.sub, "request refused: needs scope admin");
                }
                refuse(crate::error::ServiceError::PermissionDenied(Scope::Admin.missing()))
            }
            Ok(claims) => {
                crate::telemetry::record_tenant(&claims.tenant);
                let place = match self.audit.reserve_call() {
                    Ok(place) => place,
                    Err(e) => {
                        tracing::warn!(path = %path, tenant = %claims.tenant, subject = %claims.sub, reason = %e, "request refused: no room to audit it");
                        return refuse(e.into());
                    }
                };
                let started = std::time::Instant::now();
                let entry = crate::audit::Entry {
                    tenant: claims.tenant.clone(),
                    subject: claims.sub.clone(),
                    jti_hash: claims.jti_hash(),
                    rpc: path,
                    target: call_target(&req),
                    ..Default::default()
                };
                req.extensions_mut().insert(claims);
                let target = crate::audit::RpcTarget::default();
                req.extensions_mut().insert(target.clone());
                let call = CallRecord::new(place, entry, target, started);
                let fut = self.inner.call(req);
                Box::pin(async move {
                    // The record is written when the response body ends (see AuditedBody).
                    let (parts, body) = fut.await?.into_parts();
                    let body = AuditedBody::audited(body, call, &parts.headers);
                    Ok(http::Response::from_parts(parts, body))
                })
            }
            Err(e) => {
                let source = source_of(&req);
                let throttled = self.throttle.spend(&source, std::time::Instant::now()).err();
                let entry = crate::audit::Entry {
                    rpc: path.clone(),
                    outcome: "denied".into(),
                    code: if throttled.is_some() { "ResourceExhausted" } else { "Unauthenticated" }.into(),
                    ..Default::default()
                };
                if self.audit.record_refusal(&source, entry) {
                    tracing::info!(path = %path, reason = %e, throttled = throttled.is_some(), "request refused: unauthenticated (more from its address within 10 s are counted, not logged)");
                }
                match throttled {
                    Some(wait) => refuse(crate::error::ServiceError::Throttled(self.throttle.words(&source, wait))),
                    None => refuse(crate::error::ServiceError::Unauthenticated(e.to_string())),
                }
            }
        }
    }
}

/// The address a call came from, for counting its refusals: the peer of its connection (TCP,
/// or TCP under TLS).
pub(super) fn source_of<B>(req: &http::Request<B>) -> String {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    let addr = ext
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| ext.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|i| i.get_ref().remote_addr()));
    addr.map_or_else(|| "an unknown address".to_string(), |a| a.ip().to_string())
}

/// The answer to a call refused in the layer, before any handler.
pub(super) fn refuse<B, E>(
    e: crate::error::ServiceError,
) -> futures::future::BoxFuture<'static, Result<http::Response<AuditedBody<B>>, E>>
where
    B: Default + Send + 'static,
    E: Send + 'static,
{
    let response = tonic::Status::from(e).into_http::<B>().map(AuditedBody::unaudited);
    Box::pin(futures::future::ready(Ok(response)))
}
