//! Live view links: capabilities to watch (VIEW) or drive (CONTROL) a live session from a web
//! page. Each is 256 random bits, bound to one session and mode, kept in the memory of the
//! replica holding the session (only its SHA-256), and dead at its TTL, at the session's end,
//! or when revoked.

use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::Digest;

use super::*;
use browserpool_pool::sync::lock;
use browserpool_pool::{LiveInput, Screen, Watching};

/// How long a link works when the caller does not say.
pub const DEFAULT_LINK_TTL: Duration = Duration::from_secs(15 * 60);
/// Most links a session holds at once; past it the oldest is dropped.
const MAX_LINKS: usize = 32;

/// What a link allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveMode {
    View,
    Control,
}

impl LiveMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LiveMode::View => "view",
            LiveMode::Control => "control",
        }
    }
}

/// A session's live view: its screen, its links and who watches.
pub(super) struct LiveViews {
    screen: Option<Screen>,
    links: Mutex<Vec<Link>>,
    viewers: AtomicUsize,
    /// Moved at each revocation: open pages check their link again.
    revoked: watch::Sender<u64>,
}

impl LiveViews {
    pub(super) fn new(screen: Option<Screen>) -> LiveViews {
        LiveViews { screen, links: Mutex::default(), viewers: AtomicUsize::new(0), revoked: watch::channel(0).0 }
    }
}

struct Link {
    id: String,
    secret_sha256: String,
    mode: LiveMode,
    expires_ms: i64,
}

/// A link just issued.
#[derive(Debug, Clone)]
pub struct IssuedLink {
    pub url: String,
    pub mode: LiveMode,
    pub expires_ms: i64,
    pub link_id: String,
}

/// Why a live view page or socket is refused.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Unknown, garbled, expired or revoked, or its session is not live here: one answer.
    #[error("this live view link is unknown, expired or revoked")]
    NotFound,
    #[error("session {id} has {cap} live viewers already (--live-max-viewers)")]
    Full { id: String, cap: usize },
}

/// A link secret's SHA-256, hex: all that is kept of it.
fn sha256(secret: &str) -> String {
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

impl Sessions {
    /// Issues a live view link to session `id` for `claims` (VIEW: `sessions:read`, CONTROL:
    /// `sessions:write`), working for `ttl` (0: 15 minutes), never past the session's end.
    pub async fn live_view(&self, claims: &Claims, id: &str, mode: LiveMode, ttl: Duration) -> Result<IssuedLink> {
        require(claims, if mode == LiveMode::Control { Scope::SessionsWrite } else { Scope::SessionsRead })?;
        let record = self.get(claims, id).await?;
        let ended = || ServiceError::NotReady { id: id.into(), state: record.state.as_str(), detail: record.ended() };
        if record.state.is_terminal() {
            return Err(ended());
        }
        self.here(&record)?;
        let live = self.live_map().get(id).cloned().ok_or_else(ended)?;
        if live.live_views.screen.is_none() {
            return Err(ServiceError::FailedPrecondition(format!("session {id} has no screen to show")));
        }
        let ttl = if ttl.is_zero() { DEFAULT_LINK_TTL } else { ttl };
        let ends_ms = lock(&live.record).expires_at_ms;
        let expires_ms = (self.now() + ttl.as_millis().min(i64::MAX as u128) as i64).min(ends_ms);
        let (secret, link_id) = (random_hex(32)?, format!("lv-{}", random_hex(8)?));
        {
            let mut links = lock(&live.live_views.links);
            if links.len() >= MAX_LINKS {
                links.remove(0);
            }
            links.push(Link { id: link_id.clone(), secret_sha256: sha256(&secret), mode, expires_ms });
        }
        let base = self.inner.cdp_base.get().map(String::as_str).unwrap_or_default();
        let base = base.strip_prefix("ws").map_or_else(|| base.to_string(), |rest| format!("http{rest}"));
        tracing::info!(session = %id, link = %link_id, mode = mode.as_str(), "live view link issued");
        Ok(IssuedLink { url: format!("{base}/live/{id}/{secret}"), mode, expires_ms, link_id })
    }

    /// Revokes link `link_id` of session `id` (every link when empty); how many. Pages open
    /// through them close at once.
    pub async fn revoke_live_view(&self, claims: &Claims, id: &str, link_id: &str) -> Result<u32> {
        require(claims, Scope::SessionsWrite)?;
        let record = self.get(claims, id).await?;
        if record.state.is_terminal() {
            return Ok(0);
        }
        self.here(&record)?;
        let Some(live) = self.live_map().get(id).cloned() else { return Ok(0) };
        let revoked = {
            let mut links = lock(&live.live_views.links);
            let before = links.len();
            links.retain(|l| !(link_id.is_empty() || l.id == link_id));
            before - links.len()
        };
        if link_id.is_empty() || revoked > 0 {
            live.live_views.revoked.send_modify(|n| *n += 1);
        } else {
            return Err(ServiceError::NotFound(format!("live view link {link_id} of session {id}")));
        }
        Ok(revoked as u32)
    }

    /// The link `secret` of session `id`, if it is live: checked for the page.
    pub fn live_link(&self, id: &str, secret: &str) -> std::result::Result<(LiveMode, i64), LiveError> {
        let live = self.live_map().get(id).cloned().ok_or(LiveError::NotFound)?;
        find_link(&live, &sha256(secret), self.now()).map(|(_, mode, expires_ms)| (mode, expires_ms))
    }

    /// Opens a viewer on session `id` through link `secret`, within `cap` viewers a session.
    pub fn live_open(&self, id: &str, secret: &str, cap: usize) -> std::result::Result<LiveAccess, LiveError> {
        let live = self.live_map().get(id).cloned().ok_or(LiveError::NotFound)?;
        let hash = sha256(secret);
        let (link_id, mode, expires_ms) = find_link(&live, &hash, self.now())?;
        let screen = live.live_views.screen.clone().ok_or(LiveError::NotFound)?;
        let viewers = &live.live_views.viewers;
        if viewers.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < cap).then_some(n + 1)).is_err() {
            return Err(LiveError::Full { id: id.into(), cap });
        }
        let record = lock(&live.record).clone();
        Ok(LiveAccess { sessions: self.clone(), live, hash, link_id, mode, expires_ms, screen, record })
    }
}

/// The link whose secret hashes to `hash`, while it works.
fn find_link(live: &Live, hash: &str, now_ms: i64) -> std::result::Result<(String, LiveMode, i64), LiveError> {
    if live.stop.is_cancelled() {
        return Err(LiveError::NotFound);
    }
    let links = lock(&live.live_views.links);
    // Every link is compared whole, so the time taken tells nothing of the secret.
    let found = links.iter().fold(None, |found, l| {
        if same_secret(&l.secret_sha256, hash) {
            Some((l.id.clone(), l.mode, l.expires_ms))
        } else {
            found
        }
    });
    found.filter(|(_, _, expires_ms)| *expires_ms > now_ms).ok_or(LiveError::NotFound)
}

/// One viewer's hold on a session, through one link; its place among the viewers until
/// dropped.
pub struct LiveAccess {
    sessions: Sessions,
    live: Arc<Live>,
    hash: String,
    link_id: String,
    mode: LiveMode,
    expires_ms: i64,
    screen: Screen,
    record: SessionRecord,
}

impl LiveAccess {
    pub fn mode(&self) -> LiveMode {
        self.mode
    }

    pub fn link_id(&self) -> &str {
        &self.link_id
    }

    /// The session as it was when the viewer opened.
    pub fn record(&self) -> &SessionRecord {
        &self.record
    }

    /// How long until the link expires.
    pub fn time_left(&self) -> Duration {
        Duration::from_millis((self.expires_ms - self.sessions.now()).max(0) as u64)
    }

    pub fn expires_ms(&self) -> i64 {
        self.expires_ms
    }

    /// Cancelled when the session ends.
    pub fn stop(&self) -> CancellationToken {
        self.live.stop.clone()
    }

    /// Changes at each revocation of one of the session's links.
    pub fn revocations(&self) -> watch::Receiver<u64> {
        self.live.live_views.revoked.subscribe()
    }

    /// Whether the link still works (not revoked, not expired, the session live).
    pub fn works(&self) -> bool {
        find_link(&self.live, &self.hash, self.sessions.now()).is_ok()
    }

    /// Starts watching the session's picture.
    pub async fn watch(&self) -> Watching {
        self.screen.watch().await
    }

    /// A person's input, for a CONTROL link; the session's idle deadline moves with it.
    pub fn input(&self, input: &LiveInput) -> std::result::Result<(), String> {
        self.controls()?;
        self.screen.input(input)?;
        let (sessions, live) = (self.sessions.clone(), self.live.clone());
        sessions.clone().spawn(async move { sessions.touch(&live).await });
        Ok(())
    }

    /// Runs `steps` (action, selector, payload) for a CONTROL link's person, one after the
    /// other in turn with the session's other actions, on a task of the session's; the first
    /// failure, or success, goes to `done`.
    pub fn act_in_turn(
        self: &Arc<Self>,
        steps: Vec<(&'static str, &'static str, serde_json::Value)>,
        done: tokio::sync::mpsc::Sender<std::result::Result<(), String>>,
    ) -> std::result::Result<(), String> {
        self.controls()?;
        let access = self.clone();
        self.sessions.spawn(async move {
            let mut result = Ok(());
            for (action, selector, payload) in steps {
                result = access.act(action, selector, payload).await;
                if result.is_err() {
                    break;
                }
            }
            let _ = done.send(result).await;
        });
        Ok(())
    }

    fn controls(&self) -> std::result::Result<(), String> {
        match self.mode {
            LiveMode::Control => Ok(()),
            LiveMode::View => Err("this link only views: input is refused".into()),
        }
    }

    /// The session's tabs and the one in front.
    pub async fn tabs(&self) -> (Vec<browserpool_pool::TabInfo>, usize) {
        self.screen.tabs().await
    }

    /// The session's open dialog, watched.
    pub fn dialogs(&self) -> browserpool_pool::Dialogs {
        self.screen.dialogs()
    }

    /// Runs one action for a CONTROL link's person (switching tabs, answering a dialog), in
    /// turn with the session's other actions, as the gRPC `Act` would.
    pub async fn act(
        &self,
        action: &str,
        selector: &str,
        payload: serde_json::Value,
    ) -> std::result::Result<(), String> {
        self.controls()?;
        let canonical = browserpool_pool::canonicalize(action).map_err(|_| format!("unknown action {action}"))?;
        let call = browserpool_pool::ActionCall {
            action: canonical,
            selector: selector.into(),
            payload,
            timeout: Duration::from_secs(10),
            default_timeout: false,
        };
        let done = self
            .sessions
            .with_lease(&self.record.id, action, move |lease| Box::pin(async move { lease.run(&call).await.map(drop) }))
            .await;
        done.map_err(|e| e.to_string())
    }
}

impl Drop for LiveAccess {
    fn drop(&mut self) {
        self.live.live_views.viewers.fetch_sub(1, Ordering::SeqCst);
    }
}
