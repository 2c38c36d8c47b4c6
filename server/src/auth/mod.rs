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
/// Clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY_S: u64 = 30;

/// A permission a token can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    SessionsRead,
    SessionsWrite,
    SessionsShared,
    ContextExport,
    ContextImport,
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 6] = [
        Scope::SessionsRead,
        Scope::SessionsWrite,
        Scope::SessionsShared,
        Scope::ContextExport,
        Scope::ContextImport,
        Scope::Admin,
    ];

    /// The wire spelling, e.g. `sessions:read`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::SessionsRead => "sessions:read",
            Scope::SessionsWrite => "sessions:write",
            Scope::SessionsShared => "sessions:shared",
            Scope::ContextExport => "context:export",
            Scope::ContextImport => "context:import",
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
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("token's tenant was deleted or re-created")]
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

/// One key: its pinned algorithm, id, and both halves.
struct KeyEntry {
    alg: Algorithm,
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
}

/// The signing key and the retired keys that still verify (by `kid`), as loaded at once.
struct KeySet {
    current: KeyEntry,
    retired: Vec<KeyEntry>,
}

/// The data dir's signing key, the retired keys that still verify (by `kid`), and the
/// validation rules. The key files are read again when they change on disk (`browserpool key
/// rotate` beside a running server): see [`Keys::refresh_loop`]; a token naming a key id not
/// loaded also makes it look, so one signed right after a rotation is never refused.
pub struct Keys {
    dir: PathBuf,
    set: std::sync::RwLock<Arc<KeySet>>,
    /// What the key files looked like at the last look.
    seen: std::sync::Mutex<Vec<FileStamp>>,
    /// When a token naming an unknown key id last made it look (see [`UNKNOWN_KID_LOOK`]).
    looked_for_kid: std::sync::Mutex<Option<std::time::Instant>>,
}

/// One key file as a look at the data dir sees it: a change to any of these is a change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// Tokens naming unknown key ids make it look at the key files at most this often (the
/// timer looks every second anyway): a flood of made-up ids costs a few `stat`s a second.
const UNKNOWN_KID_LOOK: Duration = Duration::from_millis(100);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.set();
        f.debug_struct("Keys")
            .field("alg", &set.current.alg)
            .field("kid", &set.current.kid)
            .field("retired", &set.retired.len())
            .finish_non_exhaustive()
    }
}

const HS256_FILE: &str = "jwt-hs256.key";
const ED25519_FILE: &str = "jwt-ed25519.key";
/// Retired keys, `<kid>.<hs256|ed25519>.key`: they verify tokens they signed, sign nothing.
const RETIRED_DIR: &str = "retired-keys";

impl Keys {
    /// Loads the data dir's signing key, creating one (mode 0600) on first use, and every
    /// retired key. An existing key wins over `alg`, so restarting with another flag never
    /// invalidates live tokens silently. What `serve` does.
    pub fn load_or_create(data_dir: &Path, alg: JwtAlg) -> Result<Keys, AuthError> {
        create_private_dir(data_dir)
            .map_err(|e| AuthError::Key(format!("create {}: {}", data_dir.display(), explain_io(&e, data_dir))))?;
        if current_key_file(data_dir).is_none() {
            create_key(data_dir, alg)?;
        }
        Keys::load(data_dir)
    }

    /// Loads the data dir's signing key and every retired key; a data dir without a signing
    /// key is [`AuthError::NoKey`] (what `token issue` and `key rotate` need: a key made there
    /// would be one no server knows).
    pub fn load(data_dir: &Path) -> Result<Keys, AuthError> {
        let stamps = key_files(data_dir);
        let set = KeySet::read(data_dir)?;
        Ok(Keys {
            dir: data_dir.to_path_buf(),
            set: std::sync::RwLock::new(Arc::new(set)),
            seen: std::sync::Mutex::new(stamps),
            looked_for_kid: std::sync::Mutex::new(None),
        })
    }

    /// Retires the current signing key (it keeps verifying the tokens it signed, by `kid`) and
    /// creates a new one. Returns (old kid, new kid). At every step the files hold a whole
    /// key set (the old key is copied to `retired-keys/` before the new one replaces it, each
    /// file written in full before it is renamed into place), so a server reading them
    /// meanwhile never sees a missing or half-written key.
    pub fn rotate(data_dir: &Path, alg: JwtAlg) -> Result<(String, String), AuthError> {
        let keys = Keys::load(data_dir)?;
        let (path, kind) =
            current_key_file(data_dir).ok_or_else(|| AuthError::NoKey(data_dir.display().to_string()))?;
        let retired_dir = data_dir.join(RETIRED_DIR);
        create_private_dir(&retired_dir).map_err(|e| {
            AuthError::Key(format!("create {}: {}", retired_dir.display(), explain_io(&e, &retired_dir)))
        })?;
        let suffix = match kind {
            JwtAlg::Hs256 => "hs256",
            JwtAlg::Eddsa => "ed25519",
        };
        let old_kid = keys.kid();
        let target = retired_dir.join(format!("{old_kid}.{suffix}.key"));
        let old = fs::read(&path)
            .map_err(|e| AuthError::Key(format!("read {}: {}", path.display(), explain_io(&e, &path))))?;
        write_private_atomically(&target, &old)
            .map_err(|e| AuthError::Key(format!("write {}: {}", target.display(), explain_io(&e, &target))))?;
        let new = create_key(data_dir, alg)?;
        let new_path = data_dir.join(key_file_name(alg));
        if new_path != path {
            fs::remove_file(&path)
                .map_err(|e| AuthError::Key(format!("remove {}: {}", path.display(), explain_io(&e, &path))))?;
        }
        Ok((old_kid, new.kid))
    }

    fn set(&self) -> Arc<KeySet> {
        self.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the key files again if they changed since the last look; returns whether a new
    /// set was loaded. A set that does not load (a key file that is not a key) is logged and
    /// the one in use kept until the files change again.
    pub fn reload_if_changed(&self) -> bool {
        let stamps = key_files(&self.dir);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if *seen == stamps {
                return false;
            }
            *seen = stamps;
        }
        match KeySet::read(&self.dir) {
            Ok(set) => {
                tracing::info!(kid = %set.current.kid, alg = ?set.current.alg, retired = set.retired.len(), "signing keys reloaded");
                *self.set.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "the key files changed but do not load; the keys in use are kept");
                false
            }
        }
    }

    /// Looks at the key files every `every` until shutdown (see [`Keys::reload_if_changed`]).
    pub async fn refresh_loop(self: Arc<Self>, every: Duration, shutdown: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            self.reload_if_changed();
        }
    }

    /// The pinned algorithm of the signing key.
    pub fn algorithm(&self) -> Algorithm {
        self.set().current.alg
    }

    /// The id of the signing key.
    pub fn kid(&self) -> String {
        self.set().current.kid.clone()
    }

    /// Mints a token for `tenant` at its current `tenant_epoch` (from the store). Scopes must
    /// be known; `ttl` must be positive.
    pub fn issue(
        &self,
        tenant: &str,
        tenant_epoch: &str,
        subject: &str,
        scopes: &[String],
        ttl: Duration,
    ) -> Result<(String, Claims), AuthError> {
        for s in scopes {
            if Scope::parse(s).is_none() {
                return Err(AuthError::UnknownScope(s.clone()));
            }
        }
        if tenant.is_empty() || subject.is_empty() || tenant_epoch.is_empty() {
            return Err(AuthError::BadRequest("tenant, tenant epoch and subject must not be empty".into()));
        }
        // A subject goes into every record and log line of its calls: bounded, one line.
        if subject.len() > MAX_SUBJECT || subject.chars().any(char::is_control) {
            return Err(AuthError::BadRequest(format!(
                "subject: at most {MAX_SUBJECT} bytes and no control characters (got {} bytes)",
                subject.len()
            )));
        }
        let now = now_s();
        let claims = Claims {
            iss: ISSUER.into(),
            aud: AUDIENCE.into(),
            sub: subject.into(),
            tenant: tenant.into(),
            tenant_epoch: tenant_epoch.into(),
            scopes: scopes.to_vec(),
            exp: now + ttl.as_secs().max(1),
            nbf: now,
            iat: now,
            jti: uuid::Uuid::new_v4().to_string(),
        };
        let set = self.set();
        let mut header = Header::new(set.current.alg);
        header.kid = Some(set.current.kid.clone());
        let token =
            jsonwebtoken::encode(&header, &claims, &set.current.encoding).map_err(|e| AuthError::Key(e.to_string()))?;
        Ok((token, claims))
    }

    /// Validates a bare JWT: pinned algorithm, signature, `exp`, `nbf`, `iss`, `aud`, `sub`.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        // The key is chosen by `kid` (current or retired); each key pins its own algorithm.
        let header = jsonwebtoken::decode_header(token).map_err(|e| AuthError::Invalid(e.to_string()))?;
        let mut set = self.set();
        if let Some(kid) = header.kid.as_deref() {
            // A key rotated in since the last look: look now rather than refuse the token.
            if set.find(kid).is_none() && self.may_look_for_kid() && self.reload_if_changed() {
                set = self.set();
            }
        }
        let key = match header.kid.as_deref() {
            Some(kid) => set.find(kid).ok_or_else(|| AuthError::Invalid(format!("unknown key id {kid:?}")))?,
            None => &set.current,
        };
        let mut v = Validation::new(key.alg);
        v.leeway = LEEWAY_S;
        v.validate_nbf = true;
        v.validate_exp = true;
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[AUDIENCE]);
        v.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        let data =
            jsonwebtoken::decode::<Claims>(token, &key.decoding, &v).map_err(|e| AuthError::Invalid(e.to_string()))?;
        Ok(data.claims)
    }

    /// Whether a token naming an unknown key id may make it look at the key files now (none
    /// did within [`UNKNOWN_KID_LOOK`]); if so, this is that look's time.
    fn may_look_for_kid(&self) -> bool {
        let mut last = self.looked_for_kid.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| at.elapsed() < UNKNOWN_KID_LOOK) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        true
    }

    /// Validates an `authorization` header value.
    pub fn verify_header(&self, header: Option<&str>) -> Result<Claims, AuthError> {
        let value = header.ok_or(AuthError::Missing)?;
        let token =
            value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).ok_or(AuthError::NotBearer)?;
        self.verify(token.trim())
    }
}

impl KeySet {
    /// The signing key and every retired key of `data_dir`.
    fn read(data_dir: &Path) -> Result<KeySet, AuthError> {
        let (path, kind) =
            current_key_file(data_dir).ok_or_else(|| AuthError::NoKey(data_dir.display().to_string()))?;
        let current = entry(kind, &read_secret(&path)?)?;
        let mut retired = Vec::new();
        if let Ok(dir) = fs::read_dir(data_dir.join(RETIRED_DIR)) {
            for file in dir.flatten() {
                let Some(kind) = retired_kind(&file.file_name().to_string_lossy()) else { continue };
                retired.push(entry(kind, &read_secret(&file.path())?)?);
            }
        }
        Ok(KeySet { current, retired })
    }

    fn find(&self, kid: &str) -> Option<&KeyEntry> {
        std::iter::once(&self.current).chain(self.retired.iter()).find(|k| k.kid == kid)
    }
}

/// The algorithm of a file in `retired-keys/` by its name, `None` for other files.
fn retired_kind(name: &str) -> Option<JwtAlg> {
    if name.ends_with(".hs256.key") {
        Some(JwtAlg::Hs256)
    } else if name.ends_with(".ed25519.key") {
        Some(JwtAlg::Eddsa)
    } else {
        None
    }
}

/// Every key file of `data_dir` as it is now, in a stable order.
fn key_files(data_dir: &Path) -> Vec<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let mut paths = vec![data_dir.join(HS256_FILE), data_dir.join(ED25519_FILE)];
    if let Ok(dir) = fs::read_dir(data_dir.join(RETIRED_DIR)) {
        paths.extend(
            dir.flatten().filter(|f| retired_kind(&f.file_name().to_string_lossy()).is_some()).map(|f| f.path()),
        );
    }
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let meta = fs::metadata(&path).ok()?;
            Some(FileStamp { len: meta.len(), modified: meta.modified().ok(), inode: meta.ino(), path })
        })
        .collect()
}

fn key_file_name(alg: JwtAlg) -> &'static str {
    match alg {
        JwtAlg::Hs256 => HS256_FILE,
        JwtAlg::Eddsa => ED25519_FILE,
    }
}

fn current_key_file(data_dir: &Path) -> Option<(PathBuf, JwtAlg)> {
    let hs = data_dir.join(HS256_FILE);
    let ed = data_dir.join(ED25519_FILE);
    if hs.exists() {
        Some((hs, JwtAlg::Hs256))
    } else if ed.exists() {
        Some((ed, JwtAlg::Eddsa))
    } else {
        None
    }
}

fn create_key(data_dir: &Path, alg: JwtAlg) -> Result<KeyEntry, AuthError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| AuthError::Key(format!("random: {e}")))?;
    let path = data_dir.join(key_file_name(alg));
    let key = entry(alg, &seed)?;
    write_private_atomically(&path, base64::engine::general_purpose::STANDARD.encode(seed).as_bytes())
        .map_err(|e| AuthError::Key(format!("write {}: {}", path.display(), explain_io(&e, &path))))?;
    tracing::info!(path = %path.display(), alg = ?key.alg, kid = %key.kid, "created signing key");
    Ok(key)
}

fn entry(alg: JwtAlg, secret: &[u8]) -> Result<KeyEntry, AuthError> {
    match alg {
        JwtAlg::Hs256 => Ok(KeyEntry {
            alg: Algorithm::HS256,
            kid: kid(secret),
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }),
        JwtAlg::Eddsa => {
            let seed: [u8; 32] =
                secret.try_into().map_err(|_| AuthError::Key("ed25519 seed must be 32 bytes".into()))?;
            let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
            let public = signing.verifying_key().to_bytes();
            // PKCS#8 v1 wrapping of an Ed25519 seed (RFC 8410).
            let mut der =
                vec![0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
            der.extend_from_slice(&seed);
            let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(public);
            Ok(KeyEntry {
                alg: Algorithm::EdDSA,
                kid: kid(&public),
                encoding: EncodingKey::from_ed_der(&der),
                decoding: DecodingKey::from_ed_components(&x).map_err(|e| AuthError::Key(e.to_string()))?,
            })
        }
    }
}

fn kid(material: &[u8]) -> String {
    hex::encode(&Sha256::digest(material)[..8])
}

fn read_secret(path: &Path) -> Result<Vec<u8>, AuthError> {
    let text = fs::read_to_string(path)
        .map_err(|e| AuthError::Key(format!("read {}: {}", path.display(), explain_io(&e, path))))?;
    let secret = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| AuthError::Key(format!("{} is not base64: {e}", path.display())))?;
    if secret.is_empty() {
        // An empty HMAC secret would sign and verify anything anyone can compute.
        return Err(AuthError::Key(format!("{} is empty", path.display())));
    }
    Ok(secret)
}

/// Creates `dir` and any missing parent owner-only (0700); an existing directory is left as
/// it is (its owner chose its mode).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Writes a file readable by its owner only (0600), replacing any previous content.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // An existing file keeps its mode on open: force 0600.
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// [`write_private`] to a temporary file beside `path`, then renamed over it: a reader sees
/// the old file or the whole new one, never a part.
fn write_private_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    write_private(&tmp, bytes)?;
    fs::rename(&tmp, path)
}

/// Seconds since the epoch.
pub fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Writes a fresh admin token of `tenant` (the `default` one) at its epoch to
/// `<data-dir>/admin.token` (0600). The path is logged, never the token.
pub fn write_admin_token(keys: &Keys, data_dir: &Path, tenant: &str, tenant_epoch: &str) -> Result<PathBuf, AuthError> {
    let scopes: Vec<String> = Scope::ALL.iter().map(|s| s.as_str().to_string()).collect();
    let (token, _) = keys.issue(tenant, tenant_epoch, "admin", &scopes, Duration::from_secs(30 * 24 * 3600))?;
    let path = data_dir.join("admin.token");
    write_private(&path, format!("{token}\n").as_bytes())
        .map_err(|e| AuthError::Key(format!("write {}: {}", path.display(), explain_io(&e, &path))))?;
    Ok(path)
}

/// A copy of a store table shared by every request: reloaded by a refresh loop, so a change
/// on any replica holds within a second, and changed at once by this replica's own writes;
/// never a query per call. A reload read before a local change never undoes it.
struct Reloaded<T> {
    /// The copy, and how many local changes it has had.
    inner: Arc<std::sync::RwLock<(T, u64)>>,
}

impl<T> Clone for Reloaded<T> {
    fn clone(&self) -> Self {
        Reloaded { inner: self.inner.clone() }
    }
}

impl<T: Default> Default for Reloaded<T> {
    fn default() -> Self {
        Reloaded { inner: Arc::default() }
    }
}

impl<T> Reloaded<T> {
    fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.inner.read().unwrap_or_else(|e| e.into_inner()).0)
    }

    /// A local change (the store is the source of truth; the next reload agrees).
    fn change(&self, f: impl FnOnce(&mut T)) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.1 += 1;
        f(&mut inner.0);
    }

    fn local_changes(&self) -> u64 {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).1
    }

    /// Replaces the copy with one read when the local change count was `seen`, unless a local
    /// change came since: the copy may predate it. The next reload has it anyway.
    fn replace_unless_changed(&self, all: T, seen: u64) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if inner.1 == seen {
            inner.0 = all;
        }
    }

    /// Reloads with `load` every `every` until shutdown.
    async fn refresh_loop<Fut>(
        self,
        what: &'static str,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
        mut load: impl FnMut() -> Fut,
    ) where
        Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
    {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            let seen = self.local_changes();
            match load().await {
                Ok(all) => self.replace_unless_changed(all, seen),
                Err(e) => tracing::warn!(error = %e, "could not refresh {what}"),
            }
        }
    }
}

/// Revoked token ids (see [`Reloaded`]), so a revocation on any replica holds within a second.
#[derive(Clone, Default)]
pub struct Revocations {
    set: Reloaded<std::collections::HashSet<String>>,
}

impl Revocations {
    /// Whether `jti` is revoked.
    pub fn contains(&self, jti: &str) -> bool {
        self.set.read(|set| set.contains(jti))
    }

    /// Marks `jti` revoked locally.
    pub fn insert(&self, jti: &str) {
        self.set.change(|set| {
            set.insert(jti.to_string());
        });
    }

    /// Replaces the cache with the store's list.
    pub fn replace(&self, all: Vec<String>) {
        self.set.replace_unless_changed(all.into_iter().collect(), self.set.local_changes());
    }

    /// Reloads the deny-list every `every` until shutdown.
    pub async fn refresh_loop(
        self,
        store: crate::store::Store,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        self.set
            .refresh_loop("revoked tokens", every, shutdown, || async {
                store.revoked().await.map(|all| all.into_iter().collect())
            })
            .await
    }
}

/// Each tenant's epoch (see [`Reloaded`]). A token is good only while its `tenant_epoch`
/// is its tenant's current one: deleting the tenant kills its tokens, and creating it again
/// (a new epoch) does not revive them; a change on any replica holds within a second.
#[derive(Clone, Default)]
pub struct Epochs {
    map: Reloaded<std::collections::HashMap<String, String>>,
}

impl Epochs {
    /// Whether `epoch` is `tenant`'s current epoch. An empty epoch never is (the column's
    /// default, which no insert leaves).
    pub fn is_current(&self, tenant: &str, epoch: &str) -> bool {
        !epoch.is_empty() && self.map.read(|map| map.get(tenant).map(String::as_str) == Some(epoch))
    }

    /// Records `tenant`'s epoch locally.
    pub fn set(&self, tenant: &str, epoch: &str) {
        self.map.change(|map| {
            map.insert(tenant.to_string(), epoch.to_string());
        });
    }

    /// Forgets a deleted tenant locally: its tokens stop at once on this replica.
    pub fn remove(&self, tenant: &str) {
        self.map.change(|map| {
            map.remove(tenant);
        });
    }

    /// Replaces the cache with the store's list.
    pub fn replace(&self, all: Vec<(String, String)>) {
        self.map.replace_unless_changed(all.into_iter().collect(), self.map.local_changes());
    }

    /// Reloads every tenant's epoch every `every` until shutdown.
    pub async fn refresh_loop(
        self,
        store: crate::store::Store,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        self.map
            .refresh_loop("tenant epochs", every, shutdown, || async {
                store.tenant_epochs().await.map(|all| all.into_iter().collect())
            })
            .await
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
            Some(AuthError::Invalid("token revoked".into()))
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
fn is_public(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.") || path.starts_with("/grpc.reflection.")
}

/// Whether `path` is an rpc of the `Admin` service. Every one needs scope `admin`, checked
/// here once for the whole service, so an rpc added later cannot forget it.
pub(crate) fn is_admin_rpc(path: &str) -> bool {
    path.strip_prefix('/')
        .and_then(|p| p.strip_prefix(browserpool_proto::v1::admin_server::SERVICE_NAME))
        .is_some_and(|method| method.starts_with('/'))
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
            Ok(claims) if is_admin_rpc(req.uri().path()) && !claims.is_admin() => {
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
                refuse(crate::error::ServiceError::PermissionDenied(format!(
                    "this call needs scope {}",
                    Scope::Admin.as_str()
                )))
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
fn source_of<B>(req: &http::Request<B>) -> String {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    let addr = ext
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| ext.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|i| i.get_ref().remote_addr()));
    addr.map_or_else(|| "an unknown address".to_string(), |a| a.ip().to_string())
}

/// The answer to a call refused in the layer, before any handler.
fn refuse<B, E>(
    e: crate::error::ServiceError,
) -> futures::future::BoxFuture<'static, Result<http::Response<AuditedBody<B>>, E>>
where
    B: Default + Send + 'static,
    E: Send + 'static,
{
    let response = tonic::Status::from(e).into_http::<B>().map(AuditedBody::unaudited);
    Box::pin(futures::future::ready(Ok(response)))
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
        // An rpc the service does not have yet is refused all the same.
        for path in ["/browserpool.v1.Admin/PoolStatus", "/browserpool.v1.Admin/SomeFutureRpc"] {
            let refused = call(user.clone(), path).await.expect("refused");
            assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{path}");
            assert_eq!(refused.message(), "this call needs scope admin");
            assert!(call(admin.clone(), path).await.is_none(), "admin reaches {path}");
        }
        assert!(call(user, "/browserpool.v1.Sessions/List").await.is_none(), "other services are not affected");
        assert!(!is_admin_rpc("/browserpool.v1.AdminTools/PoolStatus"));
        assert!(!is_admin_rpc("/other.Admin/PoolStatus"));
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
        assert_eq!(gone.message(), "token's tenant was deleted or re-created");
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
