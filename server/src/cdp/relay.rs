//! [`relay`]: one client's WebSocket relayed to its session's browser, both directions
//! judged and under backpressure, until either side closes or the session ends.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::{self, protocol::WebSocketConfig};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use browserpool_pool::sync::lock;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::rules::{judge, Verdict};
use super::scope;
use super::{Conn, Scope, Summary, REVOCATION_CHECK};

/// Close codes (RFC 6455).
pub(super) const GOING_AWAY: u16 = 1001;
pub(super) const UNSUPPORTED: u16 = 1003;
pub(super) const POLICY: u16 = 1008;
pub(super) const TOO_BIG: u16 = 1009;
pub(super) const INTERNAL: u16 = 1011;

/// How long a client in a shared browser may leave the proxy's messages unread. While it does,
/// the proxy stops reading the browser (backpressure), and with it stops detaching the client's
/// auto-attach from other sessions' new targets, which wait paused for that detach.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(30);

pub(super) enum End {
    ClientClosed,
    BrowserClosed,
    Stopped,
    /// Close the client with this code and reason.
    Fail(u16, String),
}

/// What becomes of one text message from the client.
#[derive(Debug, PartialEq)]
pub(super) enum Upstream {
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
pub(super) fn upstream(
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
pub(super) fn refused(msg: &Value, method: String, why: String) -> Upstream {
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
pub(super) fn refusal(text: &str, method: &str, why: &str) -> Upstream {
    let msg = serde_json::from_str::<Value>(text).unwrap_or_default();
    refused(&msg, method.to_string(), why.to_string())
}

/// What becomes of one message from the browser.
#[derive(Debug, PartialEq)]
pub(super) enum Downstream {
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
pub(super) fn downstream(msg: Message, scope: Option<&mut Scope>) -> Downstream {
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
pub(super) struct Edits {
    pending: std::collections::HashSet<(String, i64)>,
}

/// Most `SystemInfo.getInfo` calls one connection may have in flight.
pub(super) const EDITS_IN_FLIGHT: usize = 16;

impl Edits {
    pub(super) fn key(msg: &Value) -> Option<(String, i64)> {
        let session = msg.get("sessionId").and_then(Value::as_str).unwrap_or_default().to_string();
        Some((session, msg.get("id")?.as_i64()?))
    }

    /// Notes a client message going to the browser; false to refuse it (too many in flight).
    pub(super) fn sent(&mut self, text: &str) -> bool {
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
    pub(super) fn answer(&mut self, text: &str) -> Option<String> {
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

/// The browser's side of a relay.
type BrowserIo = async_tungstenite::tokio::TokioAdapter<tokio::net::TcpStream>;
type BrowserTx = async_tungstenite::WebSocketSender<BrowserIo>;
type BrowserRx = async_tungstenite::WebSocketReceiver<BrowserIo>;
type ClientRx = futures::stream::SplitStream<WebSocket>;
/// A message for the client, with the share of the byte budget it holds until written.
type Outgoing = (Message, Option<OwnedSemaphorePermit>);

/// Relays `client` to the session's browser until either side closes or the session ends.
pub async fn relay(client: WebSocket, conn: Conn) -> Summary {
    let (mut client_tx, mut client_rx) = client.split();
    let (browser_tx, mut browser_rx) = match connect_browser(&conn).await {
        Ok(browser) => browser,
        Err((code, reason)) => {
            let _ = client_tx.send(close(code, &reason)).await;
            return Summary { failed: code == INTERNAL, close: format!("{code} {reason}"), ..Summary::default() };
        }
    };
    // One writer to the client: the browser's messages and our refusals share it. What waits
    // for it is bounded in bytes (one largest message), so a client that does not read stops
    // the proxy reading from the browser, whose own sends then wait: nothing piles up here.
    let (to_client, mut outbox) = tokio::sync::mpsc::channel::<Outgoing>(16);
    let writer = async move {
        while let Some((msg, _held_until_written)) = outbox.recv().await {
            let closing = matches!(msg, Message::Close(_));
            if client_tx.send(msg).await.is_err() || closing {
                break;
            }
        }
        let _ = client_tx.close().await;
    };
    let main = async {
        let both = Both::new(&conn, browser_tx, to_client);
        let end = tokio::select! {
            end = both.up(&mut client_rx) => end,
            end = both.down(&mut browser_rx) => end,
            end = withdrawn(&conn) => end,
            _ = conn.stop.cancelled() => End::Stopped,
        };
        let (code, reason) = end.close(&conn).await;
        let _ = both.to_client.send((close(code, &reason), None)).await;
        let _ = SinkExt::close(&mut *both.browser_tx.lock().await).await;
        let summary = Summary {
            frames_in: both.frames_in.load(Ordering::Relaxed),
            frames_out: both.frames_out.load(Ordering::Relaxed),
            refused: std::mem::take(&mut *lock(&both.refused)),
            failed: !matches!(code, 1000 | GOING_AWAY),
            close: format!("{code} {reason}"),
        };
        // Dropping `both` drops the last sender to the writer, which then ends.
        summary
    };
    let (summary, ()) = tokio::join!(main, writer);
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
    summary
}

/// The session's browser's own DevTools websocket, or the close the client gets instead.
async fn connect_browser(conn: &Conn) -> Result<(BrowserTx, BrowserRx), (u16, String)> {
    let config = WebSocketConfig::default()
        .max_message_size(Some(conn.limits.max_message))
        .max_frame_size(Some(conn.limits.max_message));
    let browser = tokio::select! {
        biased;
        _ = conn.stop.cancelled() => None,
        browser = browserpool_pool::rawcdp::connect_websocket(&conn.devtools_url, Some(config)) => Some(browser),
    };
    let failed = match browser {
        Some(Ok((ws, _))) => return Ok(ws.split()),
        failed => failed,
    };
    // The session ending (its browser killed) is the usual reason; say so when it is.
    let ended = match failed {
        None => true,
        Some(_) => tokio::time::timeout(Duration::from_secs(1), conn.stop.cancelled()).await.is_ok(),
    };
    if ended {
        Err((GOING_AWAY, (conn.stop_reason)()))
    } else {
        tracing::warn!("cdp proxy: the session's browser cannot be reached");
        Err((INTERNAL, "the session's browser cannot be reached".to_string()))
    }
}

/// Ends the relay once the credentials it was opened with no longer hold.
async fn withdrawn(conn: &Conn) -> End {
    let mut tick = tokio::time::interval(REVOCATION_CHECK);
    loop {
        tick.tick().await;
        if let Some(why) = (conn.withdrawn)() {
            return End::Fail(POLICY, why);
        }
    }
}

impl End {
    /// The close code and reason the client gets.
    async fn close(self, conn: &Conn) -> (u16, String) {
        match self {
            End::ClientClosed => (1000, "closed by the client".to_string()),
            // The browser going away is most often its death, which ends the session within
            // moments: say that, when it comes.
            End::BrowserClosed => match tokio::time::timeout(Duration::from_secs(1), conn.stop.cancelled()).await {
                Ok(()) => (GOING_AWAY, (conn.stop_reason)()),
                Err(_) => (GOING_AWAY, "the session's browser closed the connection".to_string()),
            },
            End::Stopped => (GOING_AWAY, (conn.stop_reason)()),
            End::Fail(code, reason) => (code, reason),
        }
    }
}

/// What both directions of one relay share; they run in one task, and nothing here is locked
/// across an await but the browser's sender (both write to the browser: the client's
/// messages, and the proxy's own detaches).
pub(super) struct Both<'a> {
    conn: &'a Conn,
    /// What the browser tells it, the client's messages are judged by.
    scope: Option<std::sync::Mutex<Scope>>,
    edits: std::sync::Mutex<Edits>,
    browser_tx: tokio::sync::Mutex<BrowserTx>,
    to_client: tokio::sync::mpsc::Sender<Outgoing>,
    /// Bytes waiting for the client: one largest message.
    budget: Arc<Semaphore>,
    last_activity: std::sync::Mutex<Instant>,
    frames_in: AtomicU64,
    frames_out: AtomicU64,
    refused: std::sync::Mutex<BTreeSet<String>>,
}

impl<'a> Both<'a> {
    fn new(conn: &'a Conn, browser_tx: BrowserTx, to_client: tokio::sync::mpsc::Sender<Outgoing>) -> Both<'a> {
        Both {
            conn,
            scope: conn.context.clone().map(|context| std::sync::Mutex::new(Scope::new(context))),
            edits: Default::default(),
            browser_tx: tokio::sync::Mutex::new(browser_tx),
            to_client,
            budget: Arc::new(Semaphore::new(conn.limits.max_message)),
            last_activity: std::sync::Mutex::new(Instant::now() - Duration::from_secs(1)),
            frames_in: AtomicU64::new(0),
            frames_out: AtomicU64::new(0),
            refused: Default::default(),
        }
    }

    /// CDP traffic is the session's activity, told at most once a second.
    fn activity(&self) {
        let mut last = lock(&self.last_activity);
        if last.elapsed() >= Duration::from_secs(1) {
            *last = Instant::now();
            (self.conn.on_activity)();
        }
    }

    fn scope(&self) -> Option<std::sync::MutexGuard<'_, Scope>> {
        self.scope.as_ref().map(lock)
    }

    /// The client's messages, judged, to the browser; refusals answered to the client.
    async fn up(&self, client_rx: &mut ClientRx) -> End {
        let conn = self.conn;
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
            self.frames_in.fetch_add(1, Ordering::Relaxed);
            conn.stats.frames_in.fetch_add(1, Ordering::Relaxed);
            self.activity();
            let check = |url: &str| conn.net.check_as_written(url);
            let mut step = upstream(text.as_str(), &conn.download_dir, &check, self.scope().as_deref_mut());
            if let Upstream::Send(out) = &step {
                if !lock(&self.edits).sent(out) {
                    step = refusal(out, "SystemInfo.getInfo", "too many of its calls are unanswered");
                }
            }
            let out = match step {
                Upstream::Send(out) => out,
                Upstream::NotJson => return End::Fail(UNSUPPORTED, "a message is not JSON".into()),
                Upstream::Refuse { method, why, reply } => {
                    let method = note_refused(&mut lock(&self.refused), &method);
                    tracing::info!(method = %method, reason = %why, "cdp proxy: method refused");
                    conn.stats.refused.fetch_add(1, Ordering::Relaxed);
                    if self.to_client.send((Message::Text(reply.into()), None)).await.is_err() {
                        return End::ClientClosed;
                    }
                    continue;
                }
            };
            if self.browser_tx.lock().await.send(tungstenite::Message::text(out)).await.is_err() {
                return End::BrowserClosed;
            }
        }
    }

    /// The browser's messages (judged by the scope, when there is one) to the client.
    async fn down(&self, browser_rx: &mut BrowserRx) -> End {
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
                Message::Text(text) => lock(&self.edits).answer(text.as_str()).map_or(msg, |t| Message::Text(t.into())),
                _ => msg,
            };
            // The scope is locked for the judging alone, never across an await.
            let step = downstream(msg, self.scope().as_deref_mut());
            let msg = match step {
                Downstream::Send(msg) => msg,
                // Other sessions' traffic is not this session's activity.
                Downstream::Drop => continue,
                Downstream::Inject(out) => {
                    let mut browser_tx = self.browser_tx.lock().await;
                    for out in out {
                        if browser_tx.send(tungstenite::Message::text(out)).await.is_err() {
                            return End::BrowserClosed;
                        }
                    }
                    continue;
                }
                Downstream::Close(why) => return End::Fail(POLICY, why),
            };
            self.frames_out.fetch_add(1, Ordering::Relaxed);
            self.conn.stats.frames_out.fetch_add(1, Ordering::Relaxed);
            self.activity();
            if let Err(end) = self.deliver(msg).await {
                return end;
            }
        }
    }

    /// One message to the client's writer, within the byte budget; in a shared browser, a
    /// client that leaves it unread past [`STALL_LIMIT`] is closed.
    async fn deliver(&self, msg: Message) -> Result<(), End> {
        let size = match &msg {
            Message::Text(text) => text.len(),
            Message::Binary(data) => data.len(),
            _ => 0,
        };
        let bytes = size.clamp(1, self.conn.limits.max_message).min(u32::MAX as usize) as u32;
        let deliver = async {
            let Ok(permit) = self.budget.clone().acquire_many_owned(bytes).await else { return false };
            self.to_client.send((msg, Some(permit))).await.is_ok()
        };
        let delivered = if self.scope.is_some() {
            tokio::time::timeout(STALL_LIMIT, deliver).await.map_err(|_| {
                let secs = STALL_LIMIT.as_secs();
                End::Fail(
                    POLICY,
                    format!("the client left messages unread for {secs} s, holding up the shared browser"),
                )
            })?
        } else {
            deliver.await
        };
        if delivered {
            Ok(())
        } else {
            Err(End::ClientClosed)
        }
    }
}

/// Most refused methods a summary names, and the most characters of each: a client is refused
/// whatever method names it makes up (in a shared browser, any at the browser level), and the
/// summary goes whole into an audit record.
pub(super) const REFUSED_NAMES: usize = 32;
pub(super) const NAME_CHARS: usize = 64;

/// Adds a refused method to the summary's set, bounded, and returns the name as noted.
pub(super) fn note_refused(refused: &mut BTreeSet<String>, method: &str) -> String {
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

pub(super) fn client_error(e: axum::Error) -> End {
    let text = e.to_string();
    if text.contains("too long") || text.contains("Space limit") || text.contains("capacity") {
        End::Fail(TOO_BIG, "a message exceeds --cdp-max-message".into())
    } else {
        End::ClientClosed
    }
}

pub(super) fn close(code: u16, reason: &str) -> Message {
    // A close reason is at most 123 bytes.
    let mut reason = reason.to_string();
    while reason.len() > 123 {
        reason.pop();
    }
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}
