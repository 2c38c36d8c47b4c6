//! The CDP proxy: a client's WebSocket (Puppeteer, Playwright, any raw CDP client) relayed to
//! its session's browser.
//!
//! Every message the client sends is judged first ([`judge`]): methods that would reach
//! outside the session are refused with a CDP error, download paths are rewritten into the
//! session's own directory, and the URLs a client names are checked against the tenant's
//! policy (the worker's egress proxy still judges every connection the browser opens, so a
//! request the client sets up any other way is refused there); what goes on is the message as
//! judged, written anew (a key given twice cannot read one way here and another in Chromium).
//! Messages from the browser are relayed as they are. Both directions apply backpressure: nothing is buffered beyond a few
//! messages and the socket buffers, each bounded.
//!
//! When the session is one browser context of a browser shared with other sessions of its
//! tenant ([`Conn::context`]), a [`Scope`] keeps the client to that context: its messages are
//! judged by it too (after `judge`), and the browser's are parsed and judged
//! by it: other contexts' targets, sessions and listings never reach the client, and an
//! auto-attach to another session's target is detached by the proxy itself. A client that
//! leaves messages unread for 30 s is then closed, since the proxy reading no further would
//! stop those detaches. Without a context nothing of the browser's is parsed.

pub mod scope;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::{self, protocol::WebSocketConfig};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use browserpool_pool::egress::WorkerNet;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub use scope::Scope;

/// Paths under it need a verified client certificate while mutual TLS is on (probes and
/// metrics stay open to kubelet and Prometheus).
pub const CDP_PREFIX: &str = "/cdp/";

/// Limits of the proxy (flags `--cdp-*`).
#[derive(Debug, Clone)]
pub struct CdpLimits {
    /// Largest message either way, in bytes.
    pub max_message: usize,
    /// Most CDP connections to one session at once.
    pub per_session: usize,
    /// Most CDP connections to this server at once.
    pub per_server: usize,
}

/// Why a CDP connection is refused before the upgrade; [`CdpError::status`] is the one
/// mapping to HTTP.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("credentials required: an Authorization: Bearer token with sessions:write, or the ticket of the session's cdp_url")]
    NoCredentials,
    #[error("invalid token: {0}")]
    BadToken(String),
    #[error("this token lacks scope sessions:write")]
    Scope,
    #[error("no live session {0} here")]
    NotFound(String),
    #[error("the token that acquired this session was revoked: its cdp_url no longer opens")]
    TicketRevoked,
    #[error("session {0} is served by another replica")]
    OtherReplica(String),
    #[error("session {id} already has {cap} CDP connections (--cdp-max-clients)")]
    SessionFull { id: String, cap: usize },
    #[error("this server already relays {0} CDP connections (--cdp-max-connections)")]
    ServerFull(usize),
    #[error("a WebSocket upgrade is required")]
    NotUpgrade,
    #[error("the audit trail cannot take a record: {0}")]
    Audit(String),
}

impl CdpError {
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode as S;
        match self {
            CdpError::NoCredentials | CdpError::BadToken(_) | CdpError::TicketRevoked => S::UNAUTHORIZED,
            CdpError::Scope => S::FORBIDDEN,
            // Another tenant's session is answered like an unknown one.
            CdpError::NotFound(_) => S::NOT_FOUND,
            CdpError::OtherReplica(_) => S::CONFLICT,
            CdpError::SessionFull { .. } => S::TOO_MANY_REQUESTS,
            CdpError::ServerFull(_) | CdpError::Audit(_) => S::SERVICE_UNAVAILABLE,
            CdpError::NotUpgrade => S::BAD_REQUEST,
        }
    }
}

/// Methods refused whatever their parameters, and why.
pub const REFUSED: &[(&str, &str)] = &[
    ("Browser.close", "the browser belongs to the pool: release the session instead"),
    ("Browser.crash", "the browser belongs to the pool"),
    ("Browser.crashGpuProcess", "the browser belongs to the pool"),
    ("Browser.executeBrowserCommand", "browser commands act on the host's browser window"),
    ("Target.exposeDevToolsProtocol", "it hands the protocol to the page's own scripts, past this proxy"),
    ("Target.sendMessageToTarget", "messages wrapped in it would pass unchecked: attach with flatten: true"),
    ("Target.setRemoteLocations", "it makes the browser connect to other hosts"),
];

/// Methods refused when they carry one of these parameters (present and not null).
pub const REFUSED_PARAMS: &[(&str, &[&str], &str)] = &[(
    "Target.createBrowserContext",
    &["proxyServer", "proxyBypassList"],
    // A context with its own proxy would bypass the worker's egress proxy, and with it the
    // navigation policy; one without inherits it.
    "a browser context with its own proxy would bypass the session's network policy",
)];

/// Domains refused whole, and why.
pub const REFUSED_DOMAINS: &[(&str, &str)] = &[
    ("Extensions.", "extensions load from the server's file system"),
    ("PWA.", "installing web apps touches the host"),
    ("Cast.", "cast discovery reaches the local network"),
    ("Tethering.", "it opens listening sockets on the browser's host"),
];

/// What the proxy does with a CDP parameter that can name a file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileParam {
    /// A message carrying it (present and not empty) is refused: the browser would read the
    /// host's files with the worker's rights.
    Refused,
    /// It becomes the session's own download directory.
    SessionDir,
    /// Its name says path or file, but it names no host file (why, in words).
    NotAHostPath(&'static str),
}

/// Every command parameter of the protocol that can name a host file or directory, as the
/// browser's own protocol description lists them (parameters, and fields of their types, named
/// like a path, file or directory): a test reads `/json/protocol` of the Chromium the suite
/// runs and fails on one missing here. Dotted names are fields of a parameter's object.
pub const FILE_PARAMS: &[(&str, &str, FileParam)] = &[
    ("DOM.setFileInputFiles", "files", FileParam::Refused),
    ("Input.dispatchDragEvent", "data.files", FileParam::Refused),
    ("Extensions.loadUnpacked", "path", FileParam::Refused),
    ("PWA.launchFilesInApp", "files", FileParam::Refused),
    ("Browser.setDownloadBehavior", "downloadPath", FileParam::SessionDir),
    ("Page.setDownloadBehavior", "downloadPath", FileParam::SessionDir),
    ("CacheStorage.requestEntries", "pathFilter", FileParam::NotAHostPath("a cached request's URL path")),
    ("DOM.pushNodeByPathToFrontend", "path", FileParam::NotAHostPath("a node's path in the DOM")),
    (
        "FileSystem.getDirectory",
        "bucketFileSystemLocator",
        FileParam::NotAHostPath("the origin's own bucket file system"),
    ),
    (
        "FileSystem.getDirectory",
        "bucketFileSystemLocator.pathComponents",
        FileParam::NotAHostPath("a path inside the origin's own bucket file system"),
    ),
    ("Network.deleteCookies", "path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Network.setCookie", "path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Network.setCookies", "cookies.path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Storage.setCookies", "cookies.path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Network.enable", "reportDirectSocketTraffic", FileParam::NotAHostPath("a flag")),
    ("Page.enable", "enableFileChooserOpenedEvent", FileParam::NotAHostPath("a flag")),
];

/// The value at a dotted `path` of `params`, through arrays (`cookies.path` is every cookie's
/// `path`): whether any is present and not empty.
fn carries(params: Option<&Value>, path: &str) -> bool {
    fn walk(value: &Value, keys: &[&str]) -> bool {
        match (value, keys) {
            (Value::Array(items), _) => items.iter().any(|v| walk(v, keys)),
            (_, []) => match value {
                Value::Null => false,
                Value::String(s) => !s.is_empty(),
                Value::Object(o) => !o.is_empty(),
                _ => true,
            },
            (Value::Object(fields), [key, rest @ ..]) => fields.get(*key).is_some_and(|v| walk(v, rest)),
            _ => false,
        }
    }
    let keys: Vec<&str> = path.split('.').collect();
    params.is_some_and(|p| walk(p, &keys))
}

/// What happens to one message a client sends.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Forward,
    /// Forward with these parameters instead.
    Rewrite(Value),
    /// Answer the client with a CDP error saying why; the browser never sees it.
    Refuse(String),
}

/// Judges one client message by its method and parameters. `check_url` says why the
/// session's policy refuses a URL, if it does; `download_dir` is the session's own.
pub fn judge(
    method: &str,
    params: Option<&Value>,
    download_dir: &str,
    check_url: &dyn Fn(&str) -> Result<(), String>,
) -> Verdict {
    if let Some((_, why)) = REFUSED.iter().find(|(m, _)| *m == method) {
        return Verdict::Refuse(why.to_string());
    }
    if let Some((_, why)) = REFUSED_DOMAINS.iter().find(|(d, _)| method.starts_with(d)) {
        return Verdict::Refuse(why.to_string());
    }
    let reads_files =
        FILE_PARAMS.iter().any(|(m, path, how)| *m == method && *how == FileParam::Refused && carries(params, path));
    if reads_files {
        return Verdict::Refuse("it reads files from the server's file system".into());
    }
    let param = |name: &str| params.and_then(|p| p.get(name));
    let carried = REFUSED_PARAMS
        .iter()
        .find(|(m, names, _)| *m == method && names.iter().any(|k| param(k).is_some_and(|v| !v.is_null())));
    if let Some((_, _, why)) = carried {
        return Verdict::Refuse((*why).into());
    }
    match method {
        "Target.createTarget" | "Page.navigate" => match param("url").and_then(Value::as_str) {
            Some(url) => match check_url(url) {
                Ok(()) => Verdict::Forward,
                Err(why) => Verdict::Refuse(format!("blocked by policy: {why}")),
            },
            None => Verdict::Forward,
        },
        // Kept (Playwright sends its own machine's artifacts dir on every connect), but the
        // files land in the session's directory, never at a path of the server's choosing.
        "Browser.setDownloadBehavior" | "Page.setDownloadBehavior" => {
            let mut rewritten = params.cloned().unwrap_or_else(|| json!({}));
            let allows = matches!(rewritten.get("behavior").and_then(Value::as_str), Some("allow" | "allowAndName"));
            if allows || rewritten.get("downloadPath").is_some() {
                rewritten["downloadPath"] = json!(download_dir);
                Verdict::Rewrite(rewritten)
            } else {
                Verdict::Forward
            }
        }
        _ => Verdict::Forward,
    }
}

/// Everything a relay needs about its session.
pub struct Conn {
    /// The browser's own DevTools websocket.
    pub devtools_url: String,
    pub download_dir: String,
    pub net: Arc<WorkerNet>,
    /// Cancelled when the session ends (release, expiry, kill, crash) or the server stops.
    pub stop: CancellationToken,
    /// Why `stop` fired, for the close frame.
    pub stop_reason: Box<dyn Fn() -> String + Send + Sync>,
    /// Called at most once a second while frames flow: CDP traffic is activity.
    pub on_activity: Box<dyn Fn() + Send + Sync>,
    /// Why the credentials the connection was opened with no longer hold (the token revoked,
    /// its tenant gone), if they do not: asked every [`REVOCATION_CHECK`], the connection is
    /// then closed.
    pub withdrawn: Box<dyn Fn() -> Option<String> + Send + Sync>,
    pub limits: CdpLimits,
    pub stats: Arc<CdpStats>,
    /// The session's browserContextId when it is one context of a browser shared with other
    /// sessions of its tenant (isolation mode `context`); `None` when the browser is the
    /// session's alone.
    pub context: Option<String>,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct CdpStats {
    pub open: AtomicUsize,
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    pub refused: AtomicU64,
}

/// How one connection went, for its audit record (never payloads).
#[derive(Debug, Default)]
pub struct Summary {
    pub frames_in: u64,
    pub frames_out: u64,
    pub refused: BTreeSet<String>,
    /// The close code and reason the client was sent (or saw).
    pub close: String,
    /// Whether the connection ended for a reason other than a close by either peer or the
    /// session's end.
    pub failed: bool,
}

/// How often a connection asks whether its credentials still hold. With the revocation cache
/// reloaded twice a second, a revoked token's connections close within about a second, as its
/// gRPC calls start failing.
pub const REVOCATION_CHECK: Duration = Duration::from_millis(500);

/// Close codes (RFC 6455).
const GOING_AWAY: u16 = 1001;
const UNSUPPORTED: u16 = 1003;
const POLICY: u16 = 1008;
const TOO_BIG: u16 = 1009;
const INTERNAL: u16 = 1011;

/// How long a client in a shared browser may leave the proxy's messages unread. While it does,
/// the proxy stops reading the browser (backpressure), and with it stops detaching the client's
/// auto-attach from other sessions' new targets, which wait paused for that detach.
const STALL_LIMIT: Duration = Duration::from_secs(30);

enum End {
    ClientClosed,
    BrowserClosed,
    Stopped,
    /// Close the client with this code and reason.
    Fail(u16, String),
}

/// What becomes of one text message from the client.
#[derive(Debug, PartialEq)]
enum Upstream {
    /// Send this to the browser.
    Send(String),
    /// Answer the client with `reply`; the browser never sees the message.
    Refuse {
        method: String,
        why: String,
        reply: String,
    },
    NotJson,
}

/// Judges one client message ([`judge`], then the scope's rules when there is one) and says
/// what the browser or the client gets.
fn upstream(
    text: &str,
    download_dir: &str,
    check_url: &dyn Fn(&str) -> Result<(), String>,
    scope: Option<&mut Scope>,
) -> Upstream {
    let Ok(mut msg) = serde_json::from_str::<Value>(text) else { return Upstream::NotJson };
    let method = msg.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
    let mut verdict = judge(&method, msg.get("params"), download_dir, check_url);
    if let Some(scope) = scope {
        verdict = scope.on_client(&msg, verdict);
    }
    match verdict {
        // What was judged is what goes: the message as parsed, written anew, so a key given
        // twice (which Chromium's parser may read the other way) cannot show the proxy one
        // thing and the browser another: `"proxyServer": "http://x", "proxyServer": null`
        // would otherwise pass as a context without its own proxy.
        Verdict::Forward => Upstream::Send(msg.to_string()),
        Verdict::Rewrite(params) => {
            if let Some(fields) = msg.as_object_mut() {
                fields.insert("params".into(), params);
            }
            Upstream::Send(msg.to_string())
        }
        Verdict::Refuse(why) => refused(&msg, method, why),
    }
}

/// The client's CDP error for `msg`, refused for `why`.
fn refused(msg: &Value, method: String, why: String) -> Upstream {
    let mut reply = json!({
        "id": msg.get("id").cloned().unwrap_or(Value::Null),
        "error": { "code": -32000, "message": format!("browserpool refuses {method}: {why}") },
    });
    if let Some(session) = msg.get("sessionId") {
        reply["sessionId"] = session.clone();
    }
    Upstream::Refuse { method, why, reply: reply.to_string() }
}

/// [`refused`] for a message already judged and written anew (`text` parses).
fn refusal(text: &str, method: &str, why: &str) -> Upstream {
    let msg = serde_json::from_str::<Value>(text).unwrap_or_default();
    refused(&msg, method.to_string(), why.to_string())
}

/// What becomes of one message from the browser.
#[derive(Debug, PartialEq)]
enum Downstream {
    /// Send this to the client.
    Send(Message),
    Drop,
    /// Send these to the browser (the proxy's own); the client gets nothing.
    Inject(Vec<String>),
    /// End the connection with this reason.
    Close(String),
}

/// Without a scope, the browser's messages go to the client as they are, unread. With one,
/// each is parsed and judged by it; anything it cannot read is dropped.
fn downstream(msg: Message, scope: Option<&mut Scope>) -> Downstream {
    let Some(scope) = scope else { return Downstream::Send(msg) };
    let Message::Text(text) = &msg else { return Downstream::Drop };
    let Ok(mut value) = serde_json::from_str::<Value>(text.as_str()) else { return Downstream::Drop };
    match scope.on_browser(&mut value) {
        scope::Down::Forward => Downstream::Send(msg),
        scope::Down::Rewritten => Downstream::Send(Message::Text(value.to_string().into())),
        scope::Down::Drop => Downstream::Drop,
        scope::Down::Inject(out) => Downstream::Inject(out.iter().map(Value::to_string).collect()),
        scope::Down::Close(why) => Downstream::Close(why),
    }
}

/// Calls whose answer the proxy edits: `SystemInfo.getInfo`, whose `commandLine` would show a
/// client the worker's flags and paths. Keyed by the call's session and id; bounded, since a
/// client may send them faster than the browser answers.
#[derive(Default)]
struct Edits {
    pending: std::collections::HashSet<(String, i64)>,
}

/// Most `SystemInfo.getInfo` calls one connection may have in flight.
const EDITS_IN_FLIGHT: usize = 16;

impl Edits {
    fn key(msg: &Value) -> Option<(String, i64)> {
        let session = msg.get("sessionId").and_then(Value::as_str).unwrap_or_default().to_string();
        Some((session, msg.get("id")?.as_i64()?))
    }

    /// Notes a client message going to the browser; false to refuse it (too many in flight).
    fn sent(&mut self, text: &str) -> bool {
        if !text.contains("SystemInfo.getInfo") {
            return true;
        }
        let Ok(msg) = serde_json::from_str::<Value>(text) else { return true };
        if msg.get("method").and_then(Value::as_str) != Some("SystemInfo.getInfo") {
            return true;
        }
        if self.pending.len() >= EDITS_IN_FLIGHT {
            return false;
        }
        self.pending.extend(Edits::key(&msg));
        true
    }

    /// The browser's answer to a noted call, edited; `None` for every other message.
    fn answer(&mut self, text: &str) -> Option<String> {
        if self.pending.is_empty() || !text.contains("\"commandLine\"") {
            return None;
        }
        let mut msg = serde_json::from_str::<Value>(text).ok()?;
        if !self.pending.remove(&Edits::key(&msg)?) {
            return None;
        }
        if let Some(line) = msg.get_mut("result").and_then(|r| r.get_mut("commandLine")) {
            *line = json!("");
        }
        Some(msg.to_string())
    }
}

/// Relays `client` to the session's browser until either side closes or the session ends.
pub async fn relay(client: WebSocket, conn: Conn) -> Summary {
    let mut summary = Summary::default();
    let (mut client_tx, mut client_rx) = client.split();
    let config = WebSocketConfig::default()
        .max_message_size(Some(conn.limits.max_message))
        .max_frame_size(Some(conn.limits.max_message));
    let browser = tokio::select! {
        biased;
        _ = conn.stop.cancelled() => None,
        browser = browserpool_pool::rawcdp::connect_websocket(&conn.devtools_url, Some(config)) => Some(browser),
    };
    let (browser_tx, mut browser_rx) = match browser {
        Some(Ok((ws, _))) => ws.split(),
        failed => {
            // The session ending (its browser killed) is the usual reason; say so when it is.
            let ended = match failed {
                None => true,
                Some(_) => tokio::time::timeout(Duration::from_secs(1), conn.stop.cancelled()).await.is_ok(),
            };
            let (code, reason) = if ended {
                (GOING_AWAY, (conn.stop_reason)())
            } else {
                tracing::warn!("cdp proxy: the session's browser cannot be reached");
                summary.failed = true;
                (INTERNAL, "the session's browser cannot be reached".to_string())
            };
            let _ = client_tx.send(close(code, &reason)).await;
            summary.close = format!("{code} {reason}");
            return summary;
        }
    };
    // One writer to the client: the browser's messages and our refusals share it. What waits
    // for it is bounded in bytes (one largest message), so a client that does not read stops
    // the proxy reading from the browser, whose own sends then wait: nothing piles up here.
    let (to_client, mut outbox) = tokio::sync::mpsc::channel::<(Message, Option<OwnedSemaphorePermit>)>(16);
    let budget = Arc::new(Semaphore::new(conn.limits.max_message));
    let writer = async move {
        while let Some((msg, _held_until_written)) = outbox.recv().await {
            let closing = matches!(msg, Message::Close(_));
            if client_tx.send(msg).await.is_err() || closing {
                break;
            }
        }
        let _ = client_tx.close().await;
    };
    let last_activity = std::sync::Mutex::new(Instant::now() - Duration::from_secs(1));
    let activity = || {
        let mut last = last_activity.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= Duration::from_secs(1) {
            *last = Instant::now();
            (conn.on_activity)();
        }
    };
    let (mut frames_in, mut frames_out) = (0u64, 0u64);
    let mut refused = BTreeSet::new();
    // Shared by both directions (never locked across an await): what the browser tells it, the
    // client's messages are judged by.
    let scope = conn.context.clone().map(|context| std::sync::Mutex::new(Scope::new(context)));
    let scope_of = || scope.as_ref().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()));
    // Both directions write to the browser: the client's messages, and the proxy's own detaches.
    let browser_tx = tokio::sync::Mutex::new(browser_tx);
    let edits = std::sync::Mutex::new(Edits::default());
    let edits = || edits.lock().unwrap_or_else(|e| e.into_inner());
    let main = async {
        let up = async {
            let replies = to_client.clone();
            loop {
                let text = match client_rx.next().await {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_))) | None => return End::ClientClosed,
                    Some(Ok(Message::Binary(_))) => {
                        return End::Fail(UNSUPPORTED, "CDP messages are JSON text frames".into())
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return client_error(e),
                };
                frames_in += 1;
                conn.stats.frames_in.fetch_add(1, Ordering::Relaxed);
                activity();
                let check = |url: &str| conn.net.check_as_written(url);
                let mut step = upstream(text.as_str(), &conn.download_dir, &check, scope_of().as_deref_mut());
                if let Upstream::Send(out) = &step {
                    if !edits().sent(out) {
                        step = refusal(out, "SystemInfo.getInfo", "too many of its calls are unanswered");
                    }
                }
                let out = match step {
                    Upstream::Send(out) => out,
                    Upstream::NotJson => return End::Fail(UNSUPPORTED, "a message is not JSON".into()),
                    Upstream::Refuse { method, why, reply } => {
                        let method = note_refused(&mut refused, &method);
                        tracing::info!(method = %method, reason = %why, "cdp proxy: method refused");
                        conn.stats.refused.fetch_add(1, Ordering::Relaxed);
                        if replies.send((Message::Text(reply.into()), None)).await.is_err() {
                            return End::ClientClosed;
                        }
                        continue;
                    }
                };
                if browser_tx.lock().await.send(tungstenite::Message::text(out)).await.is_err() {
                    return End::BrowserClosed;
                }
            }
        };
        let down = async {
            loop {
                let msg = match browser_rx.next().await {
                    Some(Ok(tungstenite::Message::Text(text))) => Message::Text(text.as_str().into()),
                    Some(Ok(tungstenite::Message::Binary(data))) => Message::Binary(data),
                    Some(Ok(tungstenite::Message::Close(_))) | None => return End::BrowserClosed,
                    Some(Ok(_)) => continue,
                    Some(Err(tungstenite::Error::Capacity(_))) => {
                        return End::Fail(TOO_BIG, "a message from the browser exceeds --cdp-max-message".into())
                    }
                    Some(Err(_)) => return End::BrowserClosed,
                };
                let msg = match &msg {
                    Message::Text(text) => edits().answer(text.as_str()).map_or(msg, |t| Message::Text(t.into())),
                    _ => msg,
                };
                let step = downstream(msg, scope_of().as_deref_mut());
                let msg = match step {
                    Downstream::Send(msg) => msg,
                    // Other sessions' traffic is not this session's activity.
                    Downstream::Drop => continue,
                    Downstream::Inject(out) => {
                        let mut browser_tx = browser_tx.lock().await;
                        for out in out {
                            if browser_tx.send(tungstenite::Message::text(out)).await.is_err() {
                                return End::BrowserClosed;
                            }
                        }
                        continue;
                    }
                    Downstream::Close(why) => return End::Fail(POLICY, why),
                };
                frames_out += 1;
                conn.stats.frames_out.fetch_add(1, Ordering::Relaxed);
                activity();
                let size = match &msg {
                    Message::Text(text) => text.len(),
                    Message::Binary(data) => data.len(),
                    _ => 0,
                };
                let bytes = size.clamp(1, conn.limits.max_message).min(u32::MAX as usize) as u32;
                let deliver = async {
                    let Ok(permit) = budget.clone().acquire_many_owned(bytes).await else { return false };
                    to_client.send((msg, Some(permit))).await.is_ok()
                };
                let delivered = if scope.is_some() {
                    match tokio::time::timeout(STALL_LIMIT, deliver).await {
                        Ok(delivered) => delivered,
                        Err(_) => {
                            return End::Fail(
                                POLICY,
                                format!(
                                    "the client left messages unread for {} s, holding up the shared browser",
                                    STALL_LIMIT.as_secs()
                                ),
                            )
                        }
                    }
                } else {
                    deliver.await
                };
                if !delivered {
                    return End::ClientClosed;
                }
            }
        };
        let withdrawn = async {
            let mut tick = tokio::time::interval(REVOCATION_CHECK);
            loop {
                tick.tick().await;
                if let Some(why) = (conn.withdrawn)() {
                    return End::Fail(POLICY, why);
                }
            }
        };
        let end = tokio::select! {
            end = up => end,
            end = down => end,
            end = withdrawn => end,
            _ = conn.stop.cancelled() => End::Stopped,
        };
        let (code, reason) = match end {
            End::ClientClosed => (1000, "closed by the client".to_string()),
            // The browser going away is most often its death, which ends the session within
            // moments: say that, when it comes.
            End::BrowserClosed => match tokio::time::timeout(Duration::from_secs(1), conn.stop.cancelled()).await {
                Ok(()) => (GOING_AWAY, (conn.stop_reason)()),
                Err(_) => (GOING_AWAY, "the session's browser closed the connection".to_string()),
            },
            End::Stopped => (GOING_AWAY, (conn.stop_reason)()),
            End::Fail(code, reason) => (code, reason),
        };
        let _ = to_client.send((close(code, &reason), None)).await;
        drop(to_client);
        let _ = SinkExt::close(&mut *browser_tx.lock().await).await;
        (code, reason)
    };
    let ((code, reason), ()) = tokio::join!(main, writer);
    // The closing handshake: the client's own close (or anything else it still sends) is
    // read for a moment, so the socket is not torn down under data in flight, which would
    // reset it before the client reads our close frame.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(Ok(msg)) = client_rx.next().await {
            if matches!(msg, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
    summary.frames_in = frames_in;
    summary.frames_out = frames_out;
    summary.refused = refused;
    summary.failed = !matches!(code, 1000 | GOING_AWAY);
    summary.close = format!("{code} {reason}");
    summary
}

/// Most refused methods a summary names, and the most characters of each: a client is refused
/// whatever method names it makes up (in a shared browser, any at the browser level), and the
/// summary goes whole into an audit record.
const REFUSED_NAMES: usize = 32;
const NAME_CHARS: usize = 64;

/// Adds a refused method to the summary's set, bounded, and returns the name as noted.
fn note_refused(refused: &mut BTreeSet<String>, method: &str) -> String {
    let name = match method.char_indices().nth(NAME_CHARS) {
        Some((at, _)) => format!("{}...", &method[..at]),
        None => method.to_string(),
    };
    if refused.len() < REFUSED_NAMES || refused.contains(&name) {
        refused.insert(name.clone());
    } else {
        refused.insert("(more)".into());
    }
    name
}

fn client_error(e: axum::Error) -> End {
    let text = e.to_string();
    if text.contains("too long") || text.contains("Space limit") || text.contains("capacity") {
        End::Fail(TOO_BIG, "a message exceeds --cdp-max-message".into())
    } else {
        End::ClientClosed
    }
}

fn close(code: u16, reason: &str) -> Message {
    // A close reason is at most 123 bytes.
    let mut reason = reason.to_string();
    while reason.len() > 123 {
        reason.pop();
    }
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's list of refused methods is the proxy's: each refused method, domain and
    /// parameter is named there, and the list names nothing else.
    #[test]
    fn the_readme_lists_exactly_the_refused_methods() {
        let readme = include_str!("../../README.md");
        let start = readme.find("- Refused with a CDP error").expect("the README's list of refused methods");
        let list = &readme[start..];
        let list = &list[..list[2..].find("\n- ").map_or(list.len(), |end| end + 2)];
        let named: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
        for (method, _) in REFUSED {
            assert!(named.contains(method), "README does not name the refused {method}");
        }
        for (domain, _) in REFUSED_DOMAINS {
            assert!(named.contains(&domain.trim_end_matches('.')), "README does not name the refused domain {domain}");
        }
        for (method, params, _) in REFUSED_PARAMS {
            assert!(named.contains(method), "README does not name {method}");
            for param in *params {
                assert!(named.contains(param), "README does not name {method}'s refused {param}");
            }
        }
        for name in named.iter().filter(|n| n.contains('.') && !n.contains(' ')) {
            let known = REFUSED.iter().any(|(m, _)| m == name) || REFUSED_PARAMS.iter().any(|(m, _, _)| m == name);
            assert!(known, "README names {name} as refused, and the proxy does not refuse it");
        }
    }

    fn allow_all(_: &str) -> Result<(), String> {
        Ok(())
    }

    fn no_loopback(url: &str) -> Result<(), String> {
        if url.contains("127.0.0.1") || url.starts_with("file:") {
            Err(format!("{url} is private"))
        } else {
            Ok(())
        }
    }

    #[test]
    fn methods_reaching_outside_the_session_are_refused() {
        for method in ["Browser.close", "Target.sendMessageToTarget", "Extensions.loadUnpacked", "Tethering.bind"] {
            assert!(matches!(judge(method, None, "/d", &allow_all), Verdict::Refuse(_)), "{method}");
        }
        assert_eq!(judge("Runtime.evaluate", Some(&json!({"expression": "1"})), "/d", &allow_all), Verdict::Forward);
        assert_eq!(judge("Browser.getVersion", None, "/d", &allow_all), Verdict::Forward);
    }

    #[test]
    fn parameters_naming_host_files_are_refused_when_they_name_one() {
        let files = |f: Value| json!({"files": f, "nodeId": 4});
        let drag = |f: Value| json!({"type": "drop", "x": 1, "y": 1, "data": {"items": [], "files": f, "dragOperationsMask": 1}});
        for (method, params) in [
            ("DOM.setFileInputFiles", files(json!(["/etc/passwd"]))),
            ("Input.dispatchDragEvent", drag(json!(["/var/lib/browserpool/jwt-hs256.key"]))),
        ] {
            match judge(method, Some(&params), "/d", &allow_all) {
                Verdict::Refuse(why) => assert!(why.contains("file"), "{method}: {why}"),
                other => panic!("{method}: {other:?}"),
            }
        }
        // Without files, the same methods read nothing: a drag of text, a cleared file input.
        let text_drag = json!({"type": "dragEnter", "x": 1, "y": 1, "data": {"items": [{"mimeType": "text/plain", "data": "hi"}], "dragOperationsMask": 1}});
        assert_eq!(judge("Input.dispatchDragEvent", Some(&text_drag), "/d", &allow_all), Verdict::Forward);
        assert_eq!(judge("Input.dispatchDragEvent", Some(&drag(json!([]))), "/d", &allow_all), Verdict::Forward);
        assert_eq!(judge("DOM.setFileInputFiles", Some(&files(json!([]))), "/d", &allow_all), Verdict::Forward);
        // A cookie's path is a URL path, nothing on disk.
        let cookies = json!({"cookies": [{"name": "a", "value": "b", "path": "/etc"}]});
        assert_eq!(judge("Network.setCookies", Some(&cookies), "/d", &allow_all), Verdict::Forward);
        assert!(carries(Some(&cookies), "cookies.path") && !carries(Some(&cookies), "cookies.domain"));
    }

    #[test]
    fn a_context_with_its_own_proxy_is_refused_one_without_is_not() {
        let with = json!({"proxyServer": "http://10.0.0.1:3128"});
        assert!(matches!(judge("Target.createBrowserContext", Some(&with), "/d", &allow_all), Verdict::Refuse(_)));
        let bypass = json!({"proxyBypassList": "<-loopback>"});
        assert!(matches!(judge("Target.createBrowserContext", Some(&bypass), "/d", &allow_all), Verdict::Refuse(_)));
        let plain = json!({"disposeOnDetach": true});
        assert_eq!(judge("Target.createBrowserContext", Some(&plain), "/d", &allow_all), Verdict::Forward);
    }

    #[test]
    fn urls_a_client_names_meet_the_policy() {
        let blocked = json!({"url": "http://127.0.0.1:8080/"});
        for method in ["Target.createTarget", "Page.navigate"] {
            match judge(method, Some(&blocked), "/d", &no_loopback) {
                Verdict::Refuse(why) => assert!(why.contains("blocked by policy"), "{why}"),
                other => panic!("{method}: {other:?}"),
            }
        }
        let file = json!({"url": "file:///etc/passwd"});
        assert!(matches!(judge("Page.navigate", Some(&file), "/d", &no_loopback), Verdict::Refuse(_)));
        let fine = json!({"url": "https://example.com/"});
        assert_eq!(judge("Page.navigate", Some(&fine), "/d", &no_loopback), Verdict::Forward);
    }

    #[test]
    fn download_paths_land_in_the_session_dir() {
        let asked = json!({"behavior": "allow", "downloadPath": "/home/ci/artifacts", "eventsEnabled": true});
        match judge("Browser.setDownloadBehavior", Some(&asked), "/srv/s1/downloads", &allow_all) {
            Verdict::Rewrite(p) => {
                assert_eq!(p["downloadPath"], "/srv/s1/downloads");
                assert_eq!(p["eventsEnabled"], true, "other parameters kept");
            }
            other => panic!("{other:?}"),
        }
        let no_path = json!({"behavior": "allowAndName"});
        assert!(matches!(judge("Page.setDownloadBehavior", Some(&no_path), "/d", &allow_all), Verdict::Rewrite(_)));
        let deny = json!({"behavior": "deny"});
        assert_eq!(judge("Browser.setDownloadBehavior", Some(&deny), "/d", &allow_all), Verdict::Forward);
    }

    /// Messages a scope would refuse or rewrite, each with its text as a client wrote it.
    fn scoped_away() -> Vec<&'static str> {
        vec![
            r#"{"id":1,"method":"Target.createBrowserContext","params":{}}"#,
            r#"{"id":2,"method":"Target.attachToTarget","params":{"targetId":"SOMEONE-ELSES","flatten":true}}"#,
            r#"{"id":3,"sessionId":"SOMEONE-ELSES","method":"Runtime.evaluate","params":{"expression":"1"}}"#,
            r#"{"id":4,  "method":"Target.createTarget","params":{"url":"https://example.com/"}}"#,
            r#"{"id":5,"method":"Fetch.enable"}"#,
            r#"{"id":2000000001,"method":"Browser.getVersion"}"#,
        ]
    }

    #[test]
    fn without_a_context_every_message_passes_as_today() {
        for text in scoped_away() {
            let Upstream::Send(sent) = upstream(text, "/d", &allow_all, None) else { panic!("{text} refused") };
            assert_eq!(serde_json::from_str::<Value>(&sent).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        }
        // A key given twice is sent once, as judged.
        let twice =
            r#"{"id":9,"method":"Target.createBrowserContext","params":{"proxyServer":"http://x","proxyServer":null}}"#;
        let Upstream::Send(sent) = upstream(twice, "/d", &allow_all, None) else { panic!("refused") };
        assert_eq!(sent.matches("proxyServer").count(), 1, "{sent}");
        assert_eq!(serde_json::from_str::<Value>(&sent).unwrap()["params"]["proxyServer"], Value::Null);
        // judge's own refusals and rewrites are unchanged.
        let close = r#"{"id":7,"sessionId":"S","method":"Browser.close"}"#;
        match upstream(close, "/d", &allow_all, None) {
            Upstream::Refuse { method, reply, .. } => {
                assert_eq!(method, "Browser.close");
                let reply: Value = serde_json::from_str(&reply).unwrap();
                assert_eq!(reply["id"], 7);
                assert_eq!(reply["sessionId"], "S");
                assert!(reply["error"]["message"].as_str().unwrap().starts_with("browserpool refuses Browser.close: "));
            }
            other => panic!("{other:?}"),
        }
        let download =
            r#"{"id":8,"method":"Browser.setDownloadBehavior","params":{"behavior":"allow","downloadPath":"/x"}}"#;
        let Upstream::Send(out) = upstream(download, "/srv/d", &allow_all, None) else { panic!("sent") };
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["params"], json!({"behavior": "allow", "downloadPath": "/srv/d"}), "no context put in");
        assert_eq!(upstream("{", "/d", &allow_all, None), Upstream::NotJson);
        // The browser's messages go through unread, whatever they say.
        let foreign = r#"{"method":"Target.attachedToTarget","params":{"sessionId":"X","targetInfo":{"targetId":"F","browserContextId":"OTHER"},"waitingForDebugger":true}}"#;
        for msg in [Message::Text(foreign.into()), Message::Text("not json".into()), Message::Binary(vec![1, 2].into())]
        {
            assert_eq!(downstream(msg.clone(), None), Downstream::Send(msg));
        }
    }

    #[test]
    fn in_a_context_the_scope_judges_after_judge() {
        let mut scope = Scope::new("CTX");
        for text in scoped_away() {
            let step = upstream(text, "/d", &allow_all, Some(&mut scope));
            match step {
                // The one rewrite: the new page lands in the session's context.
                Upstream::Send(out) if text.contains("createTarget") => {
                    let out: Value = serde_json::from_str(&out).unwrap();
                    assert_eq!(
                        out,
                        json!({"id": 4, "method": "Target.createTarget",
                        "params": {"url": "https://example.com/", "browserContextId": "CTX"}})
                    );
                }
                Upstream::Refuse { reply, .. } if !text.contains("createTarget") => {
                    let reply: Value = serde_json::from_str(&reply).unwrap();
                    assert_eq!(reply["id"], serde_json::from_str::<Value>(text).unwrap()["id"], "{text}");
                    assert!(reply["error"]["message"].as_str().unwrap().starts_with("browserpool refuses "), "{reply}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // The policy still judges the URLs a client names.
        let blocked = r#"{"id":9,"method":"Target.createTarget","params":{"url":"http://127.0.0.1:8080/"}}"#;
        match upstream(blocked, "/d", &no_loopback, Some(&mut scope)) {
            Upstream::Refuse { why, .. } => assert!(why.contains("blocked by policy"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A key given twice is read one way by serde (the last) and maybe another by the browser:
    /// in a context, the message sent is the one judged, written anew.
    #[test]
    fn in_a_context_what_was_judged_is_what_is_sent() {
        let mut scope = Scope::new("CTX");
        let listing =
            r#"{"id":1,"result":{"targetInfos":[{"targetId":"MINE","browserContextId":"CTX","type":"page"}]}}"#;
        assert!(matches!(downstream(Message::Text(listing.into()), Some(&mut scope)), Downstream::Send(_)));
        let twice = r#"{"id":2,"method":"Target.attachToTarget","params":{"targetId":"THEIRS","targetId":"MINE"}}"#;
        let Upstream::Send(out) = upstream(twice, "/d", &allow_all, Some(&mut scope)) else { panic!("sent") };
        assert!(!out.contains("THEIRS"), "{out}");
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap(),
            json!({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": "MINE"}})
        );
    }

    #[test]
    fn in_a_context_the_browser_messages_are_judged() {
        let mut scope = Scope::new("CTX");
        let foreign = r#"{"method":"Target.attachedToTarget","params":{"sessionId":"X","targetInfo":{"targetId":"F","browserContextId":"OTHER"},"waitingForDebugger":false}}"#;
        match downstream(Message::Text(foreign.into()), Some(&mut scope)) {
            Downstream::Inject(out) => {
                assert_eq!(out.len(), 1);
                let detach: Value = serde_json::from_str(&out[0]).unwrap();
                assert_eq!(detach["method"], "Target.detachFromTarget");
                assert_eq!(detach["params"]["sessionId"], "X");
            }
            other => panic!("{other:?}"),
        }
        let own =
            r#"{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":"P","browserContextId":"CTX"}}}"#;
        let msg = Message::Text(own.into());
        assert_eq!(downstream(msg.clone(), Some(&mut scope)), Downstream::Send(msg), "forwarded as it came");
        let contexts = r#"{"id":3,"result":{"browserContextIds":["OTHER","CTX"]}}"#;
        let Downstream::Send(Message::Text(out)) = downstream(Message::Text(contexts.into()), Some(&mut scope)) else {
            panic!("sent")
        };
        assert_eq!(
            serde_json::from_str::<Value>(out.as_str()).unwrap(),
            json!({"id": 3, "result": {"browserContextIds": ["CTX"]}})
        );
        // Nothing unreadable passes unread.
        for msg in [Message::Text("not json".into()), Message::Binary(vec![b'{', b'}'].into())] {
            assert_eq!(downstream(msg, Some(&mut scope)), Downstream::Drop);
        }
    }

    #[test]
    fn refused_names_are_bounded_in_number_and_length() {
        let mut refused = BTreeSet::new();
        assert_eq!(note_refused(&mut refused, "Browser.close"), "Browser.close");
        let long = format!("Extensions.{}", "x".repeat(1 << 20));
        let noted = note_refused(&mut refused, &long);
        assert_eq!(noted.chars().count(), NAME_CHARS + 3);
        assert!(refused.contains(&noted));
        for i in 0..1000 {
            note_refused(&mut refused, &format!("Made.up{i}"));
        }
        assert_eq!(refused.len(), REFUSED_NAMES + 1);
        assert!(refused.contains("(more)") && refused.contains("Browser.close"));
        note_refused(&mut refused, "Browser.close");
        assert_eq!(refused.len(), REFUSED_NAMES + 1, "a name already noted is not more");
    }

    #[test]
    fn close_reasons_fit_a_frame() {
        let Message::Close(Some(frame)) = close(1001, &"x".repeat(300)) else { panic!("a close frame") };
        assert_eq!(frame.reason.len(), 123);
    }
}
