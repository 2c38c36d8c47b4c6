//! A second, minimal CDP connection owned by the pool, for the `Fetch` domain.
//!
//! chromiumoxide answers every `Fetch.authRequired` it sees on its own connection at once, so
//! a basic-auth challenge could never be held open for the client to answer. Fetch events are
//! delivered only to the session that enabled the domain, so enabling it on a session of this
//! connection keeps chromiumoxide out: here a challenge waits until the client answers it,
//! and every other paused request is continued immediately.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::sync::lock;
use crate::task::OwnedTask;

/// An event of the raw connection: method, params and the session it came from.
#[derive(Debug, Clone)]
pub(crate) struct RawEvent {
    pub method: String,
    pub params: Value,
    pub session_id: String,
}

/// Longest any call waits for its answer: past the longest action deadline (300 s), so only
/// the caller's own deadline ever ends a call early.
const CALL_CEILING: Duration = Duration::from_secs(330);

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// Sends commands and receives events over one browser websocket. Cheap to clone. The
/// connection task ends when the browser closes the socket or every handle is dropped.
#[derive(Clone)]
pub(crate) struct RawCdp {
    out: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    timeout: Duration,
    /// The connection task, ended when the last handle is dropped.
    _conn: Arc<OwnedTask>,
}

/// A websocket to `url` (`ws://host:port/...`) over a TCP connection with Nagle off: CDP is
/// small messages, often several in a row, and none may wait on the peer's delayed ACK
/// (40 ms on Linux).
pub async fn connect_websocket(
    url: &str,
    config: Option<async_tungstenite::tungstenite::protocol::WebSocketConfig>,
) -> Result<
    (
        async_tungstenite::WebSocketStream<async_tungstenite::tokio::TokioAdapter<tokio::net::TcpStream>>,
        async_tungstenite::tungstenite::handshake::client::Response,
    ),
    async_tungstenite::tungstenite::Error,
> {
    use async_tungstenite::tungstenite::client::IntoClientRequest;
    let request = url.into_client_request()?;
    let host = request.uri().host().unwrap_or("127.0.0.1").to_string();
    let port = request.uri().port_u16().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    tcp.set_nodelay(true)?;
    async_tungstenite::tokio::client_async_with_config(request, tcp, config).await
}

impl RawCdp {
    /// Connects to the browser endpoint (within `timeout`); events go to `events`. Calls wait
    /// at most [`CALL_CEILING`]: an action's own deadline bounds them, and callers outside an
    /// action bound them with theirs.
    pub async fn connect(
        ws_url: &str,
        timeout: Duration,
        events: mpsc::UnboundedSender<RawEvent>,
    ) -> Result<RawCdp, String> {
        let (ws, _) = tokio::time::timeout(timeout, connect_websocket(ws_url, None))
            .await
            .map_err(|_| "raw cdp connect timed out".to_string())?
            .map_err(|e| format!("raw cdp connect: {e}"))?;
        let (mut sink, mut stream) = ws.split();
        let (out, mut out_rx) = mpsc::unbounded_channel::<String>();
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let task_pending = pending.clone();
        let conn = OwnedTask::spawn(
            async move {
                loop {
                    tokio::select! {
                        msg = out_rx.recv() => match msg {
                            Some(text) => if sink.send(Message::text(text)).await.is_err() { break },
                            None => break,
                        },
                        msg = stream.next() => match msg {
                            Some(Ok(Message::Text(text))) => dispatch(&text, &task_pending, &events),
                            Some(Ok(_)) => {}
                            Some(Err(_)) | None => break,
                        },
                    }
                }
                // Fail whatever still waits for an answer.
                lock(&task_pending).clear();
            }
            .instrument(tracing::debug_span!("raw_cdp")),
        );
        Ok(RawCdp { out, pending, next_id: Arc::new(AtomicU64::new(1)), timeout: CALL_CEILING, _conn: Arc::new(conn) })
    }

    /// Sends a command (on `session_id` when not empty) and waits for its answer.
    pub async fn call(&self, session_id: &str, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if !session_id.is_empty() {
            msg["sessionId"] = json!(session_id);
        }
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        if self.out.send(msg.to_string()).is_err() {
            lock(&self.pending).remove(&id);
            return Err("raw cdp connection closed".into());
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err("raw cdp connection closed".into()),
            Err(_) => {
                lock(&self.pending).remove(&id);
                Err(format!("{method} timed out"))
            }
        }
    }

    /// Sends a command without waiting for its answer.
    pub fn send(&self, session_id: &str, method: &str, params: Value) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({ "id": id, "sessionId": session_id, "method": method, "params": params });
        let _ = self.out.send(msg.to_string());
    }
}

fn dispatch(text: &str, pending: &Pending, events: &mpsc::UnboundedSender<RawEvent>) {
    let Ok(msg) = serde_json::from_str::<Value>(text) else { return };
    if let Some(id) = msg.get("id").and_then(Value::as_u64) {
        if let Some(tx) = lock(pending).remove(&id) {
            let result = match msg.get("error") {
                Some(err) => Err(err.get("message").and_then(Value::as_str).unwrap_or("cdp error").to_string()),
                None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
            };
            let _ = tx.send(result);
        }
        return;
    }
    if let Some(method) = msg.get("method").and_then(Value::as_str) {
        let _ = events.send(RawEvent {
            method: method.to_string(),
            params: msg.get("params").cloned().unwrap_or(Value::Null),
            session_id: msg.get("sessionId").and_then(Value::as_str).unwrap_or_default().to_string(),
        });
    }
}
