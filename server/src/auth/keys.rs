//! The signing keys in the data dir: created 0600 on first use, rotated, retired keys that
//! still verify, read again when their files change; minting and checking tokens; the admin
//! token file.

use super::*;

/// One key: its pinned algorithm, id, and both halves.
pub(super) struct KeyEntry {
    alg: Algorithm,
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
}

/// The signing key and the retired keys that still verify (by `kid`), as loaded at once.
pub(super) struct KeySet {
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
    /// Clock skew tolerated on `exp` and `nbf`, in seconds (`--token-leeway`).
    leeway_s: std::sync::atomic::AtomicU64,
}

/// One key file as a look at the data dir sees it: a change to any of these is a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileStamp {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// Tokens naming unknown key ids make it look at the key files at most this often (the
/// timer looks every second anyway): a flood of made-up ids costs a few `stat`s a second.
pub(super) const UNKNOWN_KID_LOOK: Duration = Duration::from_millis(100);

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

pub(super) const HS256_FILE: &str = "jwt-hs256.key";
pub(super) const ED25519_FILE: &str = "jwt-ed25519.key";
/// Retired keys, `<kid>.<hs256|ed25519>.key`: they verify tokens they signed, sign nothing.
pub(super) const RETIRED_DIR: &str = "retired-keys";

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
            leeway_s: std::sync::atomic::AtomicU64::new(DEFAULT_LEEWAY.as_secs()),
        })
    }

    /// The clock skew tolerated on a token's `exp` and `nbf` from now on (`--token-leeway`).
    pub fn set_leeway(&self, leeway: std::time::Duration) {
        self.leeway_s.store(leeway.as_secs(), std::sync::atomic::Ordering::Relaxed);
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

    pub(super) fn set(&self) -> Arc<KeySet> {
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
        let leeway = self.leeway_s.load(std::sync::atomic::Ordering::Relaxed);
        let refused = |e: jsonwebtoken::errors::Error| AuthError::Invalid(super::refusal::explain(&e, token, leeway));
        let header = jsonwebtoken::decode_header(token).map_err(refused)?;
        let mut set = self.set();
        if let Some(kid) = header.kid.as_deref() {
            // A key rotated in since the last look: look now rather than refuse the token.
            if set.find(kid).is_none() && self.may_look_for_kid() && self.reload_if_changed() {
                set = self.set();
            }
        }
        let key = match header.kid.as_deref() {
            Some(kid) => set.find(kid).ok_or_else(|| {
                AuthError::Invalid(format!(
                    "token names key id {kid:?}, which this server does not have: it was signed by another server, or \
                     by a key since retired and deleted; issue a new one"
                ))
            })?,
            None => &set.current,
        };
        let mut v = Validation::new(key.alg);
        v.leeway = leeway;
        v.validate_nbf = true;
        v.validate_exp = true;
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[AUDIENCE]);
        v.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key.decoding, &v).map_err(refused)?;
        Ok(data.claims)
    }

    /// Whether a token naming an unknown key id may make it look at the key files now (none
    /// did within [`UNKNOWN_KID_LOOK`]); if so, this is that look's time.
    pub(super) fn may_look_for_kid(&self) -> bool {
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
    pub(super) fn read(data_dir: &Path) -> Result<KeySet, AuthError> {
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

    pub(super) fn find(&self, kid: &str) -> Option<&KeyEntry> {
        std::iter::once(&self.current).chain(self.retired.iter()).find(|k| k.kid == kid)
    }
}

/// The algorithm of a file in `retired-keys/` by its name, `None` for other files.
pub(super) fn retired_kind(name: &str) -> Option<JwtAlg> {
    if name.ends_with(".hs256.key") {
        Some(JwtAlg::Hs256)
    } else if name.ends_with(".ed25519.key") {
        Some(JwtAlg::Eddsa)
    } else {
        None
    }
}

/// Every key file of `data_dir` as it is now, in a stable order.
pub(super) fn key_files(data_dir: &Path) -> Vec<FileStamp> {
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

pub(super) fn key_file_name(alg: JwtAlg) -> &'static str {
    match alg {
        JwtAlg::Hs256 => HS256_FILE,
        JwtAlg::Eddsa => ED25519_FILE,
    }
}

pub(super) fn current_key_file(data_dir: &Path) -> Option<(PathBuf, JwtAlg)> {
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

pub(super) fn create_key(data_dir: &Path, alg: JwtAlg) -> Result<KeyEntry, AuthError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| AuthError::Key(format!("random: {e}")))?;
    let path = data_dir.join(key_file_name(alg));
    let key = entry(alg, &seed)?;
    write_private_atomically(&path, base64::engine::general_purpose::STANDARD.encode(seed).as_bytes())
        .map_err(|e| AuthError::Key(format!("write {}: {}", path.display(), explain_io(&e, &path))))?;
    tracing::info!(path = %path.display(), alg = ?key.alg, kid = %key.kid, "created signing key");
    Ok(key)
}

pub(super) fn entry(alg: JwtAlg, secret: &[u8]) -> Result<KeyEntry, AuthError> {
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

pub(super) fn kid(material: &[u8]) -> String {
    hex::encode(&Sha256::digest(material)[..8])
}

pub(super) fn read_secret(path: &Path) -> Result<Vec<u8>, AuthError> {
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
pub(super) fn write_private_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    write_private(&tmp, bytes)?;
    fs::rename(&tmp, path)
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
