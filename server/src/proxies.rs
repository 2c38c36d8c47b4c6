//! Upstream proxies as objects an admin manages: what a valid one is, saving one with its
//! password sealed (`secrets.rs`; never returned, logged or audited), listing and deleting,
//! and the upstream a session of a tenant leaves through (its password opened only then).

use std::sync::Arc;

use crate::clock::now_ms;
use crate::error::{Result, ServiceError};
use crate::model::{is_host_pattern, is_id};
use crate::secrets::Sealer;
use crate::store::{ProxyRecord, Store};
use browserpool_pool::{Credentials, Upstream};

/// What a client asks to save. `password` empty keeps the stored one (a client never reads it
/// back, so a put over a listed proxy must not lose it); `username` empty drops both.
#[derive(Debug, Clone, Default)]
pub struct ProxySpec {
    pub id: String,
    pub url: String,
    pub username: String,
    pub password: String,
    pub direct_hosts: Vec<String>,
    pub tenants: Vec<String>,
}

/// The proxies of the shared database.
pub struct Proxies {
    store: Store,
    sealer: Arc<Sealer>,
}

impl Proxies {
    pub fn new(store: Store, sealer: Arc<Sealer>) -> Proxies {
        Proxies { store, sealer }
    }

    /// Creates or replaces a proxy after [`validate`]; true when it was created. With an
    /// `owner` (a tenant managing its own, `proxies:write`), the proxy is that tenant's alone,
    /// and one of another's is not replaced.
    pub async fn put(&self, mut spec: ProxySpec, owner: Option<&str>) -> Result<(ProxyRecord, bool)> {
        validate(&spec)?;
        let old = self.store.proxy(&spec.id).await?;
        if let Some(tenant) = owner {
            if spec.tenants.iter().any(|t| t != tenant) {
                return Err(ServiceError::PermissionDenied(format!(
                    "proxy.tenants: a proxies:write token of tenant {tenant} may name only its own tenant; \
                     ask an admin to share a proxy between tenants"
                )));
            }
            spec.tenants = vec![tenant.to_string()];
            if old.as_ref().is_some_and(|old| !owned_by(old, tenant)) {
                return Err(ServiceError::PermissionDenied(format!(
                    "proxy id {:?} is taken by a proxy that is not tenant {tenant}'s own: choose another id",
                    spec.id
                )));
            }
        }
        let password_sealed = if spec.username.is_empty() {
            None
        } else if spec.password.is_empty() {
            old.filter(|old| old.username == spec.username).and_then(|old| old.password_sealed)
        } else {
            Some(self.sealer.seal(&spec.password, &spec.id).map_err(ServiceError::Internal)?)
        };
        let record = ProxyRecord {
            id: spec.id,
            url: spec.url,
            username: spec.username,
            password_sealed,
            direct_hosts: spec.direct_hosts,
            tenants: spec.tenants,
        };
        let created = self.store.put_proxy(&record, now_ms()).await?;
        // The URL, never the credentials.
        tracing::info!(proxy = %record.id, url = %record.url, created, "proxy saved");
        Ok((record, created))
    }

    /// Every proxy, by id (passwords still sealed); with an `owner`, that tenant's own.
    pub async fn list(&self, owner: Option<&str>) -> Result<Vec<ProxyRecord>> {
        let all = self.store.proxies().await?;
        Ok(all.into_iter().filter(|p| owner.is_none_or(|tenant| owned_by(p, tenant))).collect())
    }

    /// The upstream `id` names, its password opened, for a session of `tenant`: NOT_FOUND
    /// when there is no such proxy or the tenant is not among those that may use it (a tenant
    /// does not learn the ids of proxies it may not use).
    pub async fn upstream_for(&self, id: &str, tenant: &str, default: bool) -> Result<Upstream> {
        let whose = if default { format!("tenant {tenant}'s default_proxy ") } else { String::new() };
        let missing = || {
            ServiceError::NotFound(format!(
                "{whose}proxy {id:?} does not exist or may not be used by tenant {tenant}: see `browserpool admin proxies list`"
            ))
        };
        let record = self.store.proxy(id).await?.ok_or_else(missing)?;
        if !record.tenants.is_empty() && !record.tenants.iter().any(|t| t == tenant) {
            return Err(missing());
        }
        let credentials = match &record.password_sealed {
            Some(sealed) => Some(Credentials {
                username: record.username.clone(),
                password: self.sealer.open(sealed, &record.id).map_err(|e| {
                    ServiceError::FailedPrecondition(format!(
                        "{e}; give this replica the secrets.key the others have, or save the proxy's password again \
                         (browserpool admin proxies put {} --password-file F)",
                        record.id
                    ))
                })?,
            }),
            None if record.username.is_empty() => None,
            None => Some(Credentials { username: record.username.clone(), password: String::new() }),
        };
        Upstream::parse(&record.id, &record.url, credentials, record.direct_hosts)
            .map_err(ServiceError::FailedPrecondition)
    }

    /// Deletes a proxy; false when there was none. With an `owner`, only that tenant's own.
    pub async fn delete(&self, id: &str, owner: Option<&str>) -> Result<bool> {
        if let Some(tenant) = owner {
            match self.store.proxy(id).await? {
                None => return Ok(false),
                Some(p) if !owned_by(&p, tenant) => {
                    return Err(ServiceError::PermissionDenied(format!(
                        "proxy {id:?} is not tenant {tenant}'s own: ask an admin to delete it"
                    )))
                }
                Some(_) => {}
            }
        }
        let deleted = self.store.delete_proxy(id).await?;
        tracing::info!(proxy = %id, deleted, "proxy deleted");
        Ok(deleted)
    }
}

/// Whether `p` is `tenant`'s own: usable by it alone.
fn owned_by(p: &ProxyRecord, tenant: &str) -> bool {
    p.tenants.len() == 1 && p.tenants[0] == tenant
}

/// Longest user name or password taken.
const MAX_CREDENTIAL: usize = 256;

/// An id like a tenant's; an `http://`, `https://` or `socks5://` URL with a host and a port
/// and nothing else (credentials go in their own fields); credentials without control
/// characters; each direct host a host or `*.suffix`; each tenant an id.
pub fn validate(p: &ProxySpec) -> Result<()> {
    let bad = |field: &str, why: String| Err(ServiceError::InvalidArgument(format!("proxy.{field}: {why}")));
    if !is_id(&p.id) {
        return bad("id", format!("{:?} must be 1-63 characters of a-z, 0-9, '-', '_', '.'", p.id));
    }
    let Ok(url) = url::Url::parse(&p.url) else {
        return bad("url", format!("{:?} is not a url; give one like http://proxy.example:3128", p.url));
    };
    if !["http", "https", "socks5"].contains(&url.scheme()) {
        return bad("url", format!("scheme {:?} is not http, https or socks5", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) || url.port_or_known_default().is_none() {
        return bad("url", format!("{:?} needs a host and a port, like http://proxy.example:3128", p.url));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return bad("url", "carries credentials: give them as username and password, which are kept sealed".into());
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return bad("url", format!("{:?} has a path, query or fragment; give scheme://host:port only", p.url));
    }
    for (field, value) in [("username", &p.username), ("password", &p.password)] {
        if value.len() > MAX_CREDENTIAL || value.chars().any(char::is_control) {
            return bad(field, format!("at most {MAX_CREDENTIAL} bytes without control characters"));
        }
    }
    if p.username.is_empty() && !p.password.is_empty() {
        return bad("password", "given without a username".into());
    }
    for (i, host) in p.direct_hosts.iter().enumerate() {
        if !is_host_pattern(host) {
            return bad(&format!("direct_hosts[{i}]"), format!("{host:?} is not a host or *.suffix"));
        }
    }
    for (i, tenant) in p.tenants.iter().enumerate() {
        if !is_id(tenant) {
            return bad(&format!("tenants[{i}]"), format!("{tenant:?} is not a tenant id"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ProxySpec {
        ProxySpec {
            id: "eu-1".into(),
            url: "http://proxy.test:3128".into(),
            username: "ci".into(),
            password: "hunter2".into(),
            direct_hosts: vec!["*.internal.test".into()],
            tenants: vec!["team-a".into()],
        }
    }

    #[test]
    fn a_proxy_is_checked_field_by_field() {
        assert!(validate(&spec()).is_ok());
        for url in ["socks5://10.0.0.1:1080", "http://[::1]:3128", "https://proxy.test:443"] {
            assert!(validate(&ProxySpec { url: url.into(), ..spec() }).is_ok(), "{url}");
        }
        let refused = |p: ProxySpec| match validate(&p) {
            Err(ServiceError::InvalidArgument(m)) => m,
            other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
        };
        assert!(refused(ProxySpec { id: "EU 1".into(), ..spec() }).starts_with("proxy.id: "));
        assert!(refused(ProxySpec { url: "proxy.test:3128".into(), ..spec() }).starts_with("proxy.url: "));
        assert!(
            refused(ProxySpec { url: "ftp://proxy.test:21".into(), ..spec() }).contains("not http, https or socks5")
        );
        assert!(refused(ProxySpec { url: "socks5://proxy.test".into(), ..spec() }).contains("needs a host and a port"));
        let inline = refused(ProxySpec { url: "http://ci:hunter2@proxy.test:3128".into(), ..spec() });
        assert!(inline.contains("carries credentials") && !inline.contains("hunter2"), "{inline}");
        assert!(refused(ProxySpec { url: "http://proxy.test:3128/x".into(), ..spec() }).contains("path"));
        assert!(refused(ProxySpec { password: "a\nb".into(), ..spec() }).starts_with("proxy.password: "));
        assert!(refused(ProxySpec { username: String::new(), ..spec() }).contains("without a username"));
        assert!(refused(ProxySpec { direct_hosts: vec!["a/b".into()], ..spec() }).starts_with("proxy.direct_hosts[0]"));
        assert!(refused(ProxySpec { tenants: vec!["Team A".into()], ..spec() }).starts_with("proxy.tenants[0]"));
    }

    #[tokio::test]
    async fn the_password_is_stored_sealed_kept_when_not_given_and_dropped_with_the_username() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await.unwrap();
        let sealer = Arc::new(Sealer::from_key(&[3; 32]));
        let proxies = Proxies::new(store.clone(), sealer.clone());
        let (saved, created) = proxies.put(spec(), None).await.unwrap();
        assert!(created);
        let sealed = saved.password_sealed.clone().unwrap();
        assert!(!sealed.contains("hunter2"));
        assert_eq!(sealer.open(&sealed, "eu-1").unwrap(), "hunter2");
        // Put again without the password (as over a listed proxy): the sealed one stays.
        let (kept, created) = proxies.put(ProxySpec { password: String::new(), ..spec() }, None).await.unwrap();
        assert_eq!((kept.password_sealed.as_deref(), created), (Some(sealed.as_str()), false));
        // Another user name without a password: the old password is not carried over.
        let (other, _) =
            proxies.put(ProxySpec { username: "bot".into(), password: String::new(), ..spec() }, None).await.unwrap();
        assert_eq!(other.password_sealed, None);
        let (none, _) =
            proxies.put(ProxySpec { username: String::new(), password: String::new(), ..spec() }, None).await.unwrap();
        assert_eq!(none.password_sealed, None);
        // Nothing in the database's files (the WAL included) holds the password in the clear.
        store.close().await;
        for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
            // The WAL's side files go away as the database closes: one listed may be gone.
            let Ok(bytes) = std::fs::read(entry.path()) else { continue };
            assert!(!bytes.windows(7).any(|w| w == b"hunter2"), "{}", entry.path().display());
        }
    }

    #[tokio::test]
    async fn a_tenant_with_proxies_write_manages_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await.unwrap();
        let proxies = Proxies::new(store, Arc::new(Sealer::from_key(&[3; 32])));
        // An admin's proxy shared by two tenants.
        proxies.put(ProxySpec { tenants: vec!["team-a".into(), "team-b".into()], ..spec() }, None).await.unwrap();
        fn denied<T: std::fmt::Debug>(r: Result<T>) -> String {
            match r {
                Err(ServiceError::PermissionDenied(m)) => m,
                other => panic!("expected PERMISSION_DENIED, got {other:?}"),
            }
        }
        let taken = denied(proxies.put(spec(), Some("team-a")).await);
        assert!(taken.contains("is taken") && taken.contains("choose another id"), "{taken}");
        let shared = ProxySpec { id: "mine".into(), tenants: vec!["team-b".into()], ..spec() };
        assert!(denied(proxies.put(shared, Some("team-a")).await).starts_with("proxy.tenants: "));
        // Its own: the tenants list is forced to it.
        let own = ProxySpec { id: "mine".into(), tenants: vec![], ..spec() };
        let (saved, created) = proxies.put(own, Some("team-a")).await.unwrap();
        assert_eq!((saved.tenants, created), (vec!["team-a".to_string()], true));
        let listed: Vec<String> = proxies.list(Some("team-a")).await.unwrap().into_iter().map(|p| p.id).collect();
        assert_eq!(listed, ["mine"], "the shared proxy is the admin's, not listed");
        assert_eq!(proxies.list(None).await.unwrap().len(), 2);
        assert!(denied(proxies.delete("eu-1", Some("team-a")).await).contains("ask an admin"));
        assert!(!proxies.delete("nope", Some("team-a")).await.unwrap());
        assert!(denied(proxies.delete("mine", Some("team-b")).await).contains("not tenant team-b's own"));
        assert!(proxies.delete("mine", Some("team-a")).await.unwrap());
    }
}
