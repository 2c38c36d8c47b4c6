//! A second, minimal CDP connection owned by the pool, for the `Fetch` domain.
//!
//! chromiumoxide answers every `Fetch.authRequired` it sees on its own connection at once, so
//! a basic-auth challenge could never be held open for the client to answer. Fetch events are
//! delivered only to the session that enabled the domain, so enabling it on a session of this
//! connection keeps chromiumoxide out: here a challenge waits until the client answers it,
//! and every other paused request is continued immediately.
//!
//! A worker has one such connection. A shared browser's sessions (context isolation) use its
//! one connection too, each through a handle scoped to its browser context
//! ([`RawCdp::scoped`]): a CDP session it attached (or that was auto-attached in its context)
//! sends its events to that handle's channel alone, by session id.

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

type Events = mpsc::UnboundedSender<RawEvent>;

/// A call waiting for its answer, and the scoped handle that made it: a CDP session its
/// answer names (`Target.attachToTarget`) is routed to that handle before any of its events.
struct Waiting {
    answer: oneshot::Sender<Result<Value, String>>,
    route: Option<(u64, Events)>,
}

type Pending = Arc<Mutex<HashMap<u64, Waiting>>>;

/// Where events go: a CDP session's to the scoped handle it belongs to, the rest to the
/// connection's own channel.
#[derive(Default)]
struct Routes {
    /// By CDP session id: the route's id and channel.
    sessions: HashMap<String, (u64, Events)>,
    /// Scoped handles by browser context id: the route's id and channel.
    contexts: HashMap<String, (u64, Events)>,
}

/// A scoped handle's registration, removed (its CDP sessions detached) with its last clone.
struct Route {
    id: u64,
    context: String,
    events: Events,
    routes: Arc<Mutex<Routes>>,
    out: mpsc::UnboundedSender<String>,
    next_id: Arc<AtomicU64>,
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut routes = lock(&self.routes);
        if routes.contexts.get(&self.context).is_some_and(|(id, _)| *id == self.id) {
            routes.contexts.remove(&self.context);
        }
        let ours: Vec<String> =
            routes.sessions.iter().filter(|(_, (id, _))| *id == self.id).map(|(s, _)| s.clone()).collect();
        for session in ours {
            routes.sessions.remove(&session);
            // Nothing of it stays attached: a request it paused would wait for nobody.
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let detach = json!({ "id": id, "method": "Target.detachFromTarget", "params": { "sessionId": session } });
            let _ = self.out.send(detach.to_string());
        }
    }
}

/// Sends commands and receives events over one browser websocket. Cheap to clone. The
/// connection task ends when the browser closes the socket or every handle is dropped.
#[derive(Clone)]
pub(crate) struct RawCdp {
    out: mpsc::UnboundedSender<String>,
    pending: Pending,
    routes: Arc<Mutex<Routes>>,
    next_id: Arc<AtomicU64>,
    /// Set on a handle scoped to a browser context.
    route: Option<Arc<Route>>,
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
        let routes: Arc<Mutex<Routes>> = Arc::default();
        let task_pending = pending.clone();
        let task_routes = routes.clone();
        let task_out = out.clone();
        let conn = OwnedTask::spawn(
            async move {
                loop {
                    tokio::select! {
                        msg = out_rx.recv() => match msg {
                            Some(text) => if sink.send(Message::text(text)).await.is_err() { break },
                            None => break,
                        },
                        msg = stream.next() => match msg {
                            Some(Ok(Message::Text(text))) => dispatch(&text, &task_pending, &task_routes, &events, &task_out),
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
        Ok(RawCdp { out, pending, routes, next_id: Arc::new(AtomicU64::new(1)), route: None, _conn: Arc::new(conn) })
    }

    /// A handle on the same connection for the browser context `context`: the events of the
    /// CDP sessions it attaches, and of those auto-attached in `context`, go to `events`
    /// alone. Dropping its last clone detaches them.
    pub fn scoped(&self, context: &str, events: Events) -> RawCdp {
        static ROUTES: AtomicU64 = AtomicU64::new(1);
        let id = ROUTES.fetch_add(1, Ordering::Relaxed);
        lock(&self.routes).contexts.insert(context.to_string(), (id, events.clone()));
        let route = Route {
            id,
            context: context.to_string(),
            events,
            routes: self.routes.clone(),
            out: self.out.clone(),
            next_id: self.next_id.clone(),
        };
        RawCdp { route: Some(Arc::new(route)), ..self.clone() }
    }

    /// Sends a command (on `session_id` when not empty) and waits for its answer.
    pub async fn call(&self, session_id: &str, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if !session_id.is_empty() {
            msg["sessionId"] = json!(session_id);
        }
        let (tx, rx) = oneshot::channel();
        let route = self.route.as_ref().map(|r| (r.id, r.events.clone()));
        lock(&self.pending).insert(id, Waiting { answer: tx, route });
        if self.out.send(msg.to_string()).is_err() {
            lock(&self.pending).remove(&id);
            return Err("raw cdp connection closed".into());
        }
        match tokio::time::timeout(CALL_CEILING, rx).await {
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

fn dispatch(
    text: &str,
    pending: &Pending,
    routes: &Mutex<Routes>,
    events: &Events,
    out: &mpsc::UnboundedSender<String>,
) {
    let Ok(msg) = serde_json::from_str::<Value>(text) else { return };
    if let Some(id) = msg.get("id").and_then(Value::as_u64) {
        if let Some(Waiting { answer, route }) = lock(pending).remove(&id) {
            let result = match msg.get("error") {
                Some(err) => Err(err.get("message").and_then(Value::as_str).unwrap_or("cdp error").to_string()),
                None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
            };
            // A session a scoped handle attached is routed to it before its first event.
            let attached = result.as_ref().ok().and_then(|r| r.get("sessionId")).and_then(Value::as_str);
            if let (Some(session), Some(route)) = (attached, route) {
                lock(routes).sessions.insert(session.to_string(), route);
            }
            let _ = answer.send(result);
        }
        return;
    }
    let Some(method) = msg.get("method").and_then(Value::as_str) else { return };
    let event = RawEvent {
        method: method.to_string(),
        params: msg.get("params").cloned().unwrap_or(Value::Null),
        session_id: msg.get("sessionId").and_then(Value::as_str).unwrap_or_default().to_string(),
    };
    let to = route(&event, &mut lock(routes));
    let paused = event.method == "Target.attachedToTarget" && event.params["waitingForDebugger"] == true;
    let session = event.params["sessionId"].as_str().unwrap_or_default().to_string();
    let delivered = match to {
        Some(to) => to.send(event).is_ok(),
        None => events.send(event).is_ok(),
    };
    // A target auto-attached paused that nobody takes (a context without a session, or the
    // connection's own reader gone) is let go, never left waiting.
    if paused && !delivered {
        for (method, params, on) in [
            ("Runtime.runIfWaitingForDebugger", json!({}), session.as_str()),
            ("Target.detachFromTarget", json!({ "sessionId": session }), ""),
        ] {
            let mut call = json!({ "id": 0, "method": method, "params": params });
            if !on.is_empty() {
                call["sessionId"] = json!(on);
            }
            let _ = out.send(call.to_string());
        }
    }
}

/// The scoped handle an event goes to (`None`: the connection's own channel). A session
/// auto-attached in a scoped handle's context becomes that handle's; a detached one is
/// forgotten.
fn route(event: &RawEvent, routes: &mut Routes) -> Option<Events> {
    if !event.session_id.is_empty() {
        return routes.sessions.get(&event.session_id).map(|(_, to)| to.clone());
    }
    let session = event.params["sessionId"].as_str().unwrap_or_default();
    match event.method.as_str() {
        "Target.attachedToTarget" => {
            let context = event.params["targetInfo"]["browserContextId"].as_str().unwrap_or_default();
            let (id, to) = routes.contexts.get(context)?.clone();
            routes.sessions.entry(session.to_string()).or_insert((id, to.clone()));
            Some(to)
        }
        "Target.detachedFromTarget" => routes.sessions.remove(session).map(|(_, to)| to),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Conn {
        pending: Pending,
        routes: Arc<Mutex<Routes>>,
        own: Events,
        own_rx: mpsc::UnboundedReceiver<RawEvent>,
        out: mpsc::UnboundedSender<String>,
        out_rx: mpsc::UnboundedReceiver<String>,
    }

    impl Conn {
        fn new() -> Conn {
            let (own, own_rx) = mpsc::unbounded_channel();
            let (out, out_rx) = mpsc::unbounded_channel();
            Conn { pending: Pending::default(), routes: Arc::default(), own, own_rx, out, out_rx }
        }

        /// A scoped handle's registration for `context`, as `RawCdp::scoped` makes it.
        fn scope(&self, id: u64, context: &str) -> (Route, mpsc::UnboundedReceiver<RawEvent>) {
            let (events, rx) = mpsc::unbounded_channel();
            lock(&self.routes).contexts.insert(context.to_string(), (id, events.clone()));
            let route = Route {
                id,
                context: context.to_string(),
                events,
                routes: self.routes.clone(),
                out: self.out.clone(),
                next_id: Arc::new(AtomicU64::new(100)),
            };
            (route, rx)
        }

        fn receive(&self, msg: Value) {
            dispatch(&msg.to_string(), &self.pending, &self.routes, &self.own, &self.out);
        }

        /// A call waiting for its answer, made through `route` (or the unscoped handle).
        fn call(&self, id: u64, route: Option<&Route>) -> oneshot::Receiver<Result<Value, String>> {
            let (answer, rx) = oneshot::channel();
            let route = route.map(|r| (r.id, r.events.clone()));
            lock(&self.pending).insert(id, Waiting { answer, route });
            rx
        }
    }

    fn methods(rx: &mut mpsc::UnboundedReceiver<RawEvent>) -> Vec<String> {
        std::iter::from_fn(|| rx.try_recv().ok()).map(|e| format!("{} {}", e.method, e.session_id)).collect()
    }

    #[test]
    fn a_session_a_scoped_handle_attached_sends_its_events_there_alone() {
        let mut conn = Conn::new();
        let (a, mut a_rx) = conn.scope(1, "CA");
        let (_b, mut b_rx) = conn.scope(2, "CB");
        // A's attach: the event (which Chromium sends first) and the answer both make S1 A's.
        let answer = conn.call(7, Some(&a));
        let info = json!({ "targetId": "T1", "type": "page", "browserContextId": "CA" });
        conn.receive(json!({ "method": "Target.attachedToTarget",
            "params": { "sessionId": "S1", "targetInfo": info, "waitingForDebugger": false } }));
        conn.receive(json!({ "id": 7, "result": { "sessionId": "S1" } }));
        assert_eq!(answer.blocking_recv().unwrap().unwrap(), json!({ "sessionId": "S1" }));
        conn.receive(json!({ "method": "Fetch.requestPaused", "sessionId": "S1", "params": {} }));
        // A session nobody scoped attached, and the browser's own events: the connection's.
        conn.receive(json!({ "method": "Page.lifecycleEvent", "sessionId": "S9", "params": {} }));
        conn.receive(json!({ "method": "Target.targetCreated", "params": {} }));
        assert_eq!(methods(&mut a_rx), ["Target.attachedToTarget ", "Fetch.requestPaused S1"]);
        assert_eq!(methods(&mut b_rx), Vec::<String>::new(), "nothing of A's reaches B");
        assert_eq!(methods(&mut conn.own_rx), ["Page.lifecycleEvent S9", "Target.targetCreated "]);
        // An answer naming a session made through the unscoped handle routes nothing.
        drop(conn.call(8, None));
        conn.receive(json!({ "id": 8, "result": { "sessionId": "S2" } }));
        conn.receive(json!({ "method": "Fetch.requestPaused", "sessionId": "S2", "params": {} }));
        assert_eq!(methods(&mut conn.own_rx), ["Fetch.requestPaused S2"]);
        // Detached: forgotten, told to its owner.
        conn.receive(json!({ "method": "Target.detachedFromTarget", "params": { "sessionId": "S1" } }));
        conn.receive(json!({ "method": "Fetch.requestPaused", "sessionId": "S1", "params": {} }));
        assert_eq!(methods(&mut a_rx), ["Target.detachedFromTarget "]);
        assert_eq!(methods(&mut conn.own_rx), ["Fetch.requestPaused S1"]);
        assert!(conn.out_rx.try_recv().is_err(), "nothing sent");
    }

    #[test]
    fn a_target_auto_attached_paused_that_nobody_takes_is_let_go() {
        let mut conn = Conn::new();
        let (a, mut a_rx) = conn.scope(1, "CA");
        let paused = |session: &str, context: &str| {
            json!({ "method": "Target.attachedToTarget", "params": { "sessionId": session,
                "targetInfo": { "type": "page", "browserContextId": context }, "waitingForDebugger": true } })
        };
        // In A's context: A's, with the session's later events.
        conn.receive(paused("S1", "CA"));
        conn.receive(json!({ "method": "Fetch.requestPaused", "sessionId": "S1", "params": {} }));
        assert_eq!(methods(&mut a_rx), ["Target.attachedToTarget ", "Fetch.requestPaused S1"]);
        // In a context without a handle, with the connection's own reader gone: resumed and
        // detached at once.
        conn.own_rx.close();
        conn.receive(paused("S2", "CX"));
        let sent: Vec<Value> =
            std::iter::from_fn(|| conn.out_rx.try_recv().ok()).map(|t| serde_json::from_str(&t).unwrap()).collect();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(
            (&sent[0]["method"], &sent[0]["sessionId"]),
            (&json!("Runtime.runIfWaitingForDebugger"), &json!("S2"))
        );
        assert_eq!(
            (&sent[1]["method"], &sent[1]["params"]["sessionId"]),
            (&json!("Target.detachFromTarget"), &json!("S2"))
        );
        // A's handle gone: its context and sessions are forgotten and its sessions detached.
        drop(a);
        let routes = lock(&conn.routes);
        assert!(routes.contexts.is_empty() && routes.sessions.is_empty());
        drop(routes);
        let detach: Value = serde_json::from_str(&conn.out_rx.try_recv().unwrap()).unwrap();
        assert_eq!(
            (&detach["method"], &detach["params"]["sessionId"]),
            (&json!("Target.detachFromTarget"), &json!("S1"))
        );
    }
}
