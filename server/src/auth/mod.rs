//! Tokens: the signing key in the data dir, minting, validation, scopes, and the tower layer
//! that checks every RPC except health and reflection.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use browserpool_pool::lock::explain_io;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::audit::{AuditedBody, CallRecord};
use crate::config::JwtAlg;

/// Issuer and audience of every token this server mints and accepts.
pub const ISSUER: &str = "browserpool";
pub const AUDIENCE: &str = "browserpool";
/// Clock skew tolerated on `exp` and `nbf` unless `--token-leeway` says otherwise.
pub const DEFAULT_LEEWAY: std::time::Duration = std::time::Duration::from_secs(5);

/// A permission a token can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    SessionsRead,
    SessionsWrite,
    SessionsShared,
    ContextExport,
    ContextImport,
    /// Manage the tenant's own upstream proxies (`Admin/PutProxy`, `ListProxies`,
    /// `DeleteProxy`, scoped to the tenant).
    ProxiesWrite,
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 7] = [
        Scope::SessionsRead,
        Scope::SessionsWrite,
        Scope::SessionsShared,
        Scope::ContextExport,
        Scope::ContextImport,
        Scope::ProxiesWrite,
        Scope::Admin,
    ];

    /// A refusal for lacking this scope, with where to get a token that has it.
    pub fn missing(self) -> String {
        format!(
            "this call needs scope {}; use a token with it (an admin issues one: `browserpool admin tokens issue`)",
            self.as_str()
        )
    }

    /// The wire spelling, e.g. `sessions:read`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::SessionsRead => "sessions:read",
            Scope::SessionsWrite => "sessions:write",
            Scope::SessionsShared => "sessions:shared",
            Scope::ContextExport => "context:export",
            Scope::ContextImport => "context:import",
            Scope::ProxiesWrite => "proxies:write",
            Scope::Admin => "admin",
        }
    }

    /// Parses a wire spelling.
    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == s)
    }
}

/// The claims of a browserpool JWT; every field is required.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Claims {
    pub iss: String,
    pub aud: String,
    pub sub: String,
    pub tenant: String,
    /// The tenant's epoch when the token was minted (see [`Epochs`]): the token is good only
    /// while the tenant lives, not after it is deleted, nor once it is created again.
    pub tenant_epoch: String,
    pub scopes: Vec<String>,
    pub exp: u64,
    pub nbf: u64,
    pub iat: u64,
    pub jti: String,
}

impl Claims {
    /// Whether the token carries `scope`. `admin` carries every scope.
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.iter().any(|s| s == scope.as_str() || s == Scope::Admin.as_str())
    }

    /// Whether the token carries `admin` (acts across tenants).
    pub fn is_admin(&self) -> bool {
        self.scopes.iter().any(|s| s == Scope::Admin.as_str())
    }

    /// SHA-256 of the jti, hex; what logs and records may show instead of the token.
    pub fn jti_hash(&self) -> String {
        hex::encode(Sha256::digest(self.jti.as_bytes()))
    }

    /// The audit record of this caller's `rpc` on `session`, naming `target`, with `outcome`.
    pub fn entry(&self, session: &str, rpc: &str, target: String, outcome: &str) -> crate::audit::Entry {
        crate::audit::Entry {
            tenant: self.tenant.clone(),
            subject: self.sub.clone(),
            jti_hash: self.jti_hash(),
            session_id: session.to_string(),
            rpc: rpc.to_string(),
            target,
            outcome: outcome.to_string(),
            ..Default::default()
        }
    }
}

/// The longest subject a token may name, in bytes.
pub const MAX_SUBJECT: usize = 128;

/// Why a token was refused. Messages are safe to send: they never echo the token.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    #[error("missing authorization metadata: send `authorization: Bearer <jwt>`")]
    Missing,
    #[error("authorization metadata is not `Bearer <jwt>`")]
    NotBearer,
    /// Why the token is refused, said whole (see `refusal.rs`).
    #[error("{0}")]
    Invalid(String),
    #[error("token's tenant was deleted (or deleted and created again) since the token was issued: issue a new one for the tenant as it is now")]
    TenantGone,
    #[error("token lacks scope {0}")]
    MissingScope(&'static str),
    #[error("unknown scope {0:?}")]
    UnknownScope(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("signing key: {0}")]
    Key(String),
    /// The data dir has no signing key: nothing may be signed or rotated there, since no
    /// server would check it.
    #[error(
        "no signing key in {0} (no jwt-hs256.key or jwt-ed25519.key): tokens must be signed with the key of \
         the server that checks them; give that server's data dir (--data-dir), or start `browserpool serve` \
         on this one once to create its key"
    )]
    NoKey(String),
}

mod caches;
mod keys;
mod layer;
mod refusal;

pub use caches::*;
pub use keys::*;
pub use layer::*;

/// Seconds since the epoch.
pub fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// How a token problem reaches the caller (see [`ServiceError`] for the gRPC codes).
impl From<AuthError> for crate::error::ServiceError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::MissingScope(_) => crate::error::ServiceError::PermissionDenied(e.to_string()),
            AuthError::UnknownScope(_) | AuthError::BadRequest(_) => {
                crate::error::ServiceError::InvalidArgument(e.to_string())
            }
            AuthError::Key(_) | AuthError::NoKey(_) => crate::error::ServiceError::Internal(e.to_string()),
            _ => crate::error::ServiceError::Unauthenticated(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(alg: JwtAlg) -> (tempfile::TempDir, Keys) {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::load_or_create(dir.path(), alg).unwrap();
        (dir, keys)
    }

    #[test]
    fn issued_tokens_verify_for_both_algorithms() {
        for alg in [JwtAlg::Hs256, JwtAlg::Eddsa] {
            let (_dir, keys) = keys(alg);
            let (token, claims) =
                keys.issue("default", "e", "ci", &["sessions:read".into()], Duration::from_secs(60)).unwrap();
            assert_eq!(keys.verify(&token).unwrap(), claims);
            assert_eq!(keys.verify_header(Some(&format!("Bearer {token}"))).unwrap(), claims);
        }
    }

    #[test]
    fn key_dirs_are_private() {
        let parent = tempfile::tempdir().unwrap();
        let data = parent.path().join("a/b");
        Keys::load_or_create(&data, JwtAlg::Hs256).unwrap();
        Keys::rotate(&data, JwtAlg::Hs256).unwrap();
        for d in [parent.path().join("a"), data.clone(), data.join(RETIRED_DIR)] {
            let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
    }

    #[test]
    fn key_file_is_private_and_reused() {
        let (dir, keys) = keys(JwtAlg::Hs256);
        let mode = fs::metadata(dir.path().join(HS256_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (token, _) = keys.issue("t", "e", "s", &[], Duration::from_secs(60)).unwrap();
        // A restart (even asking for EdDSA) reuses the existing key, so old tokens still verify.
        let again = Keys::load_or_create(dir.path(), JwtAlg::Eddsa).unwrap();
        assert_eq!(again.algorithm(), Algorithm::HS256);
        assert!(again.verify(&token).is_ok());
    }

    #[test]
    fn rotation_keeps_old_tokens_valid_and_signs_with_the_new_key() {
        let (dir, keys) = keys(JwtAlg::Hs256);
        let (old_token, _) = keys.issue("t", "e", "s", &[], Duration::from_secs(60)).unwrap();
        let (old_kid, new_kid) = Keys::rotate(dir.path(), JwtAlg::Eddsa).unwrap();
        assert_ne!(old_kid, new_kid);
        let rotated = Keys::load_or_create(dir.path(), JwtAlg::Hs256).unwrap();
        assert_eq!((rotated.kid(), rotated.algorithm()), (new_kid.clone(), Algorithm::EdDSA));
        assert!(rotated.verify(&old_token).is_ok(), "a retired key still verifies its tokens");
        let (new_token, _) = rotated.issue("t", "e", "s", &[], Duration::from_secs(60)).unwrap();
        assert!(rotated.verify(&new_token).is_ok());
        // A server that loaded the old keys looks again when a token names a kid it does not
        // know: the rotated key verifies at once, and it signs with it from then on.
        assert!(keys.verify(&new_token).is_ok());
        assert_eq!(keys.kid(), new_kid);
        let (signed_now, _) = keys.issue("t", "e", "s", &[], Duration::from_secs(60)).unwrap();
        assert!(rotated.verify(&signed_now).is_ok());
        assert!(keys.verify(&old_token).is_ok(), "the retired key still verifies");
    }

    #[test]
    fn a_data_dir_without_a_key_signs_and_rotates_nothing() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("typo");
        for err in [Keys::load(&dir).unwrap_err(), Keys::rotate(&dir, JwtAlg::Hs256).unwrap_err()] {
            assert!(matches!(&err, AuthError::NoKey(d) if d == &dir.display().to_string()), "{err}");
            assert!(err.to_string().contains("start `browserpool serve` on this one once"), "{err}");
        }
        assert!(!dir.exists(), "nothing was created");
    }

    #[test]
    fn changed_key_files_are_reloaded_and_bad_ones_kept_out() {
        let (dir, keys) = keys(JwtAlg::Hs256);
        assert!(!keys.reload_if_changed(), "nothing changed");
        let before = keys.kid();
        // A key file that is not a key (empty, or half-written by hand) is refused; the keys
        // in use stay.
        fs::write(dir.path().join(HS256_FILE), "").unwrap();
        assert!(!keys.reload_if_changed());
        assert_eq!(keys.kid(), before);
        assert!(Keys::rotate(dir.path(), JwtAlg::Hs256).is_err(), "a bad key is not rotated either");
        // Written whole again (here another data dir's key), it loads.
        let other = tempfile::tempdir().unwrap();
        let after = Keys::load_or_create(other.path(), JwtAlg::Hs256).unwrap().kid();
        fs::copy(other.path().join(HS256_FILE), dir.path().join(HS256_FILE)).unwrap();
        assert!(keys.reload_if_changed());
        assert_eq!(keys.kid(), after);
    }

    #[test]
    fn unknown_scopes_are_refused_at_issue() {
        let (_dir, keys) = keys(JwtAlg::Hs256);
        let err = keys.issue("t", "e", "s", &["sessions:everything".into()], Duration::from_secs(60)).unwrap_err();
        assert_eq!(err, AuthError::UnknownScope("sessions:everything".into()));
    }

    #[test]
    fn header_shapes() {
        let (_dir, keys) = keys(JwtAlg::Hs256);
        assert_eq!(keys.verify_header(None).unwrap_err(), AuthError::Missing);
        assert_eq!(keys.verify_header(Some("Basic abc")).unwrap_err(), AuthError::NotBearer);
        assert!(matches!(keys.verify_header(Some("Bearer not.a.jwt")).unwrap_err(), AuthError::Invalid(_)));
    }

    /// The `admin` scope is the layer's to check: behind it, a handler that forgets the check
    /// (here, one that answers every call) still never serves a token without `admin`.
    #[tokio::test]
    async fn the_layer_refuses_every_admin_rpc_without_scope_admin() {
        use tower::{Layer, ServiceExt};
        let (dir, keys) = keys(JwtAlg::Hs256);
        let keys = Arc::new(keys);
        let store =
            crate::store::Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await.unwrap();
        let (audit, _writer) = crate::audit::AuditLog::new(store, None);
        let handler = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        });
        let epochs = Epochs::default();
        epochs.set("t", "e");
        let service = AuthLayer::new(keys.clone(), Revocations::default(), epochs, audit).layer(handler);
        let call = |token: String, path: &'static str| {
            let service = service.clone();
            async move {
                let req = http::Request::builder()
                    .uri(format!("http://localhost{path}"))
                    .header("authorization", format!("Bearer {token}"))
                    .body(())
                    .unwrap();
                let resp = service.oneshot(req).await.unwrap();
                tonic::Status::from_header_map(resp.headers())
            }
        };
        let everything_but_admin: Vec<String> =
            Scope::ALL.iter().filter(|s| **s != Scope::Admin).map(|s| s.as_str().to_string()).collect();
        let (user, _) = keys.issue("t", "e", "s", &everything_but_admin, Duration::from_secs(60)).unwrap();
        let (admin, _) = keys.issue("t", "e", "s", &["admin".into()], Duration::from_secs(60)).unwrap();
        // proxies:write reaches the proxy rpcs (the handlers scope them to its tenant), and
        // nothing else of the Admin service.
        let (proxies, _) = keys.issue("t", "e", "s", &["proxies:write".into()], Duration::from_secs(60)).unwrap();
        for path in
            ["/browserpool.v1.Admin/PutProxy", "/browserpool.v1.Admin/ListProxies", "/browserpool.v1.Admin/DeleteProxy"]
        {
            assert!(call(proxies.clone(), path).await.is_none(), "proxies:write reaches {path}");
        }
        let (sessions, _) = keys.issue("t", "e", "s", &["sessions:write".into()], Duration::from_secs(60)).unwrap();
        assert!(call(sessions, "/browserpool.v1.Admin/PutProxy").await.is_some());
        assert!(call(proxies, "/browserpool.v1.Admin/PutTenant").await.is_some());
        // An rpc the service does not have yet is refused all the same.
        for path in ["/browserpool.v1.Admin/PoolStatus", "/browserpool.v1.Admin/SomeFutureRpc"] {
            let refused = call(user.clone(), path).await.expect("refused");
            assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{path}");
            assert_eq!(refused.message(), Scope::Admin.missing());
            assert!(call(admin.clone(), path).await.is_none(), "admin reaches {path}");
        }
        assert!(call(user, "/browserpool.v1.Sessions/List").await.is_none(), "other services are not affected");
        assert!(admin_method("/browserpool.v1.AdminTools/PoolStatus").is_none());
        assert!(admin_method("/other.Admin/PoolStatus").is_none());
    }

    #[test]
    fn tokens_carry_the_tenant_epoch_and_need_it() {
        let (dir, keys) = keys(JwtAlg::Hs256);
        let (token, claims) = keys.issue("t", "e-1", "s", &[], Duration::from_secs(60)).unwrap();
        assert_eq!((claims.tenant.as_str(), claims.tenant_epoch.as_str()), ("t", "e-1"));
        assert_eq!(keys.verify(&token).unwrap().tenant_epoch, "e-1");
        assert!(matches!(keys.issue("t", "", "s", &[], Duration::from_secs(60)), Err(AuthError::BadRequest(_))));
        // A token minted without the claim (as before it existed) is refused.
        let mut old = serde_json::to_value(&claims).unwrap();
        old.as_object_mut().unwrap().remove("tenant_epoch");
        let secret = read_secret(&dir.path().join(HS256_FILE)).unwrap();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(keys.kid());
        let old = jsonwebtoken::encode(&header, &old, &EncodingKey::from_secret(&secret)).unwrap();
        assert!(matches!(keys.verify(&old), Err(AuthError::Invalid(m)) if m.contains("tenant_epoch")));
    }

    #[test]
    fn epochs_match_only_the_live_tenant_and_survive_a_stale_reload() {
        let epochs = Epochs::default();
        epochs.replace(vec![("t".into(), "e-1".into())]);
        assert!(epochs.is_current("t", "e-1"));
        assert!(!epochs.is_current("t", "e-0"), "another epoch");
        assert!(!epochs.is_current("u", "e-1"), "another tenant");
        epochs.set("blank", "");
        assert!(!epochs.is_current("blank", ""), "an empty epoch never matches");

        // Deleted, then created again: the old epoch is gone for good.
        epochs.remove("t");
        assert!(!epochs.is_current("t", "e-1"));
        epochs.set("t", "e-2");
        assert!(epochs.is_current("t", "e-2") && !epochs.is_current("t", "e-1"));

        // A reload read before a local change must not undo it; one read after it applies.
        let seen = epochs.map.local_changes();
        epochs.remove("t");
        epochs.map.replace_unless_changed([("t".to_string(), "e-2".to_string())].into(), seen);
        assert!(!epochs.is_current("t", "e-2"), "stale reload dropped");
        epochs.replace(vec![("u".into(), "e-9".into())]);
        assert!(epochs.is_current("u", "e-9") && !epochs.is_current("t", "e-2"));

        // The same holds for revocations: a stale reload never un-revokes a token.
        let revoked = Revocations::default();
        let seen = revoked.set.local_changes();
        revoked.insert("jti-1");
        revoked.set.replace_unless_changed(Default::default(), seen);
        assert!(revoked.contains("jti-1"), "stale reload dropped");
    }

    /// The layer refuses a token whose tenant is gone, or was created again since it was minted.
    #[tokio::test]
    async fn the_layer_refuses_tokens_of_a_deleted_or_recreated_tenant() {
        use tower::{Layer, ServiceExt};
        let (dir, keys) = keys(JwtAlg::Hs256);
        let keys = Arc::new(keys);
        let store =
            crate::store::Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await.unwrap();
        let (audit, _writer) = crate::audit::AuditLog::new(store, None);
        let handler = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        });
        let epochs = Epochs::default();
        let service = AuthLayer::new(keys.clone(), Revocations::default(), epochs.clone(), audit).layer(handler);
        let call = |token: String| {
            let service = service.clone();
            async move {
                let req = http::Request::builder()
                    .uri("http://localhost/browserpool.v1.Sessions/List")
                    .header("authorization", format!("Bearer {token}"))
                    .body(())
                    .unwrap();
                tonic::Status::from_header_map(service.oneshot(req).await.unwrap().headers())
            }
        };
        let read = ["sessions:read".to_string()];
        epochs.set("t", "e-1");
        let (old, _) = keys.issue("t", "e-1", "s", &read, Duration::from_secs(60)).unwrap();
        assert!(call(old.clone()).await.is_none(), "the live tenant's token works");
        epochs.remove("t");
        let gone = call(old.clone()).await.expect("refused");
        assert_eq!(gone.code(), tonic::Code::Unauthenticated);
        assert!(gone.message().starts_with("token's tenant was deleted (or deleted and created again)"), "{gone:?}");
        epochs.set("t", "e-2");
        assert_eq!(call(old).await.expect("refused").code(), tonic::Code::Unauthenticated, "not revived");
        let (new, _) = keys.issue("t", "e-2", "s", &read, Duration::from_secs(60)).unwrap();
        assert!(call(new).await.is_none(), "a token of the new tenant works");
    }

    #[test]
    fn admin_implies_every_scope() {
        let (_dir, keys) = keys(JwtAlg::Hs256);
        let (_, claims) = keys.issue("t", "e", "s", &["admin".into()], Duration::from_secs(60)).unwrap();
        assert!(Scope::ALL.iter().all(|s| claims.has(*s)));
        let (_, claims) = keys.issue("t", "e", "s", &["sessions:read".into()], Duration::from_secs(60)).unwrap();
        assert!(claims.has(Scope::SessionsRead) && !claims.has(Scope::SessionsWrite));
    }
}
