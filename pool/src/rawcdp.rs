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
    /// Scoped handles that turned browser-level auto-attach on ([`RawCdp::auto_attach`]):
    /// it goes off with the last of them.
    auto_attach: usize,
}

/// A scoped handle's registration, removed (its CDP sessions detached) with its last clone.
struct Route {
    id: u64,
    context: String,
    events: Events,
    routes: Arc<Mutex<Routes>>,
    out: mpsc::UnboundedSender<String>,
    next_id: Arc<AtomicU64>,
    /// It turned browser-level auto-attach on.
    auto_attach: std::sync::atomic::AtomicBool,
}

impl Route {
    fn send(&self, method: &str, params: Value) {
        let _ = self.out.send(command(self.next_id.fetch_add(1, Ordering::Relaxed), "", method, params));
    }
}

/// `Target.detachFromTarget` of `session`, as sent with `id` (no caller waits for its answer).
fn detach(id: u64, session: &str) -> String {
    command(id, "", "Target.detachFromTarget", json!({ "sessionId": session }))
}

/// A command as sent: `id`, on `session` when not empty (else the browser's own).
fn command(id: u64, session: &str, method: &str, params: Value) -> String {
    let mut msg = json!({ "id": id, "method": method, "params": params });
    if !session.is_empty() {
        msg["sessionId"] = json!(session);
    }
    msg.to_string()
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut routes = lock(&self.routes);
        if self.auto_attach.load(Ordering::Relaxed) {
            routes.auto_attach -= 1;
            // Sent under the lock: a handle turning it on now sends its call after this one.
            if routes.auto_attach == 0 {
                let off = json!({ "autoAttach": false, "waitForDebuggerOnStart": false, "flatten": true });
                self.send("Target.setAutoAttach", off);
            }
        }
        if routes.contexts.get(&self.context).is_some_and(|(id, _)| *id == self.id) {
            routes.contexts.remove(&self.context);
        }
        let ours: Vec<String> =
            routes.sessions.iter().filter(|(_, (id, _))| *id == self.id).map(|(s, _)| s.clone()).collect();
        for session in ours {
            routes.sessions.remove(&session);
            // Nothing of it stays attached: a request it paused would wait for nobody.
            let _ = self.out.send(detach(self.next_id.fetch_add(1, Ordering::Relaxed), &session));
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
        let next_id = Arc::new(AtomicU64::new(1));
        Ok(RawCdp { out, pending, routes, next_id, route: None, _conn: Arc::new(conn) })
    }

    /// Whether the connection has ended (the browser closed it, or it broke): its task, which
    /// holds the outgoing queue's receiver, is gone.
    pub fn is_closed(&self) -> bool {
        self.out.is_closed()
    }

    /// Turns browser-level auto-attach on with `params` (new targets attach to this
    /// connection). On a scoped handle it stays on while that handle, or another that turned it
    /// on, lives: the connection outlives the session that asked for it.
    pub async fn auto_attach(&self, params: Value) -> Result<Value, String> {
        if let Some(route) = &self.route {
            if !route.auto_attach.swap(true, Ordering::Relaxed) {
                lock(&self.routes).auto_attach += 1;
            }
        }
        self.call("", "Target.setAutoAttach", params).await
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
            auto_attach: Default::default(),
        };
        RawCdp { route: Some(Arc::new(route)), ..self.clone() }
    }

    /// Sends a command (on `session_id` when not empty) and waits for its answer.
    pub async fn call(&self, session_id: &str, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let route = self.route.as_ref().map(|r| (r.id, r.events.clone()));
        lock(&self.pending).insert(id, Waiting { answer: tx, route });
        if self.out.send(command(id, session_id, method, params)).is_err() {
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
        let _ = self.out.send(command(self.next_id.fetch_add(1, Ordering::Relaxed), session_id, method, params));
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
            // A session a scoped handle attached is routed to it before its first event; one
            // whose handle is gone by now (its caller dropped) is detached.
            let attached = result.as_ref().ok().and_then(|r| r.get("sessionId")).and_then(Value::as_str);
            match (attached, route) {
                (Some(session), Some(route)) if !route.1.is_closed() => {
                    lock(routes).sessions.insert(session.to_string(), route);
                }
                (Some(session), Some(_)) => {
                    let _ = out.send(detach(0, session));
                }
                _ => {}
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
        let _ = out.send(command(0, &session, "Runtime.runIfWaitingForDebugger", json!({})));
        let _ = out.send(detach(0, &session));
    }
}

/// The scoped handle an event goes to (`None`: the connection's own channel). A session
/// auto-attached in a scoped handle's context, or to one of its sessions, becomes that
/// handle's; a detached one is forgotten.
fn route(event: &RawEvent, routes: &mut Routes) -> Option<Events> {
    let session = event.params["sessionId"].as_str().unwrap_or_default();
    if !event.session_id.is_empty() {
        let owner = routes.sessions.get(&event.session_id).cloned()?;
        match event.method.as_str() {
            "Target.attachedToTarget" => {
                routes.sessions.entry(session.to_string()).or_insert(owner.clone());
            }
            "Target.detachedFromTarget" => {
                routes.sessions.remove(session);
            }
            _ => {}
        }
        return Some(owner.1);
    }
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

    /// A handle on no websocket: what it sends is read from `out_rx`, what Chromium would send
    /// is given to `dispatch` by `receive`.
    struct Conn {
        raw: RawCdp,
        own: Events,
        own_rx: mpsc::UnboundedReceiver<RawEvent>,
        out_rx: mpsc::UnboundedReceiver<String>,
    }

    impl Conn {
        fn new() -> Conn {
            let (own, own_rx) = mpsc::unbounded_channel();
            let (out, out_rx) = mpsc::unbounded_channel();
            let raw = RawCdp {
                out,
                pending: Pending::default(),
                routes: Arc::default(),
                next_id: Arc::new(AtomicU64::new(1)),
                route: None,
                _conn: Arc::new(OwnedTask::spawn(std::future::pending())),
            };
            Conn { raw, own, own_rx, out_rx }
        }

        fn scope(&self, context: &str) -> (RawCdp, mpsc::UnboundedReceiver<RawEvent>) {
            let (events, rx) = mpsc::unbounded_channel();
            (self.raw.scoped(context, events), rx)
        }

        fn receive(&self, msg: Value) {
            dispatch(&msg.to_string(), &self.raw.pending, &self.raw.routes, &self.own, &self.raw.out);
        }

        /// What was sent since the last look: method, the session it was sent on, and the
        /// session its parameters name.
        fn sent(&mut self) -> Vec<(String, String, String)> {
            std::iter::from_fn(|| self.out_rx.try_recv().ok())
                .map(|t| serde_json::from_str::<Value>(&t).unwrap())
                .map(|m| {
                    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                    (text(&m["method"]), text(&m["sessionId"]), text(&m["params"]["sessionId"]))
                })
                .collect()
        }

        /// Attaches to `target` through `handle`, answered with `session`, as Chromium does:
        /// the event first, then the answer.
        async fn attach(&mut self, handle: &RawCdp, target: &str, context: &str, session: &str) {
            let call = handle.call("", "Target.attachToTarget", json!({ "targetId": target, "flatten": true }));
            let (answer, ()) = tokio::join!(call, async {
                let sent = self.next_sent().await;
                let info = json!({ "targetId": target, "type": "page", "browserContextId": context });
                self.receive(json!({ "method": "Target.attachedToTarget",
                    "params": { "sessionId": session, "targetInfo": info, "waitingForDebugger": false } }));
                self.receive(json!({ "id": sent["id"], "result": { "sessionId": session } }));
            });
            assert_eq!(answer.unwrap(), json!({ "sessionId": session }));
        }

        /// The next command sent, waited for while the call that sends it runs beside.
        async fn next_sent(&mut self) -> Value {
            loop {
                match self.out_rx.try_recv() {
                    Ok(text) => return serde_json::from_str(&text).unwrap(),
                    Err(_) => tokio::task::yield_now().await,
                }
            }
        }
    }

    fn paused(session: &str, context: &str) -> Value {
        json!({ "method": "Target.attachedToTarget", "params": { "sessionId": session,
            "targetInfo": { "type": "page", "browserContextId": context }, "waitingForDebugger": true } })
    }

    fn on(session: &str, method: &str) -> Value {
        json!({ "method": method, "sessionId": session, "params": {} })
    }

    fn events(rx: &mut mpsc::UnboundedReceiver<RawEvent>) -> Vec<String> {
        std::iter::from_fn(|| rx.try_recv().ok()).map(|e| format!("{} {}", e.method, e.session_id)).collect()
    }

    #[tokio::test]
    async fn a_session_a_scoped_handle_attached_sends_its_events_there_alone() {
        let mut conn = Conn::new();
        let (a, mut a_rx) = conn.scope("CA");
        let (_b, mut b_rx) = conn.scope("CB");
        conn.attach(&a, "T1", "CA", "S1").await;
        conn.receive(on("S1", "Fetch.requestPaused"));
        // A session nobody scoped attached, and the browser's own events: the connection's.
        conn.receive(on("S9", "Page.lifecycleEvent"));
        conn.receive(json!({ "method": "Target.targetCreated", "params": {} }));
        assert_eq!(events(&mut a_rx), ["Target.attachedToTarget ", "Fetch.requestPaused S1"]);
        assert_eq!(events(&mut b_rx), Vec::<String>::new(), "nothing of A's reaches B");
        assert_eq!(events(&mut conn.own_rx), ["Page.lifecycleEvent S9", "Target.targetCreated "]);
        // Attached through the unscoped handle: the connection's.
        let own = conn.raw.clone();
        conn.attach(&own, "T2", "", "S2").await;
        conn.receive(on("S2", "Fetch.requestPaused"));
        assert_eq!(events(&mut conn.own_rx), ["Target.attachedToTarget ", "Fetch.requestPaused S2"]);
        // A target S1 attached to is A's too; detached, a session is forgotten.
        conn.receive(json!({ "method": "Target.attachedToTarget", "sessionId": "S1",
            "params": { "sessionId": "S1a", "targetInfo": { "type": "iframe" }, "waitingForDebugger": false } }));
        conn.receive(on("S1a", "Runtime.consoleAPICalled"));
        conn.receive(json!({ "method": "Target.detachedFromTarget", "params": { "sessionId": "S1" } }));
        conn.receive(on("S1", "Fetch.requestPaused"));
        assert_eq!(
            events(&mut a_rx),
            ["Target.attachedToTarget S1", "Runtime.consoleAPICalled S1a", "Target.detachedFromTarget "]
        );
        assert_eq!(events(&mut conn.own_rx), ["Fetch.requestPaused S1"]);
        assert_eq!(conn.sent(), Vec::<(String, String, String)>::new(), "nothing sent");
    }

    #[tokio::test]
    async fn a_target_auto_attached_paused_that_nobody_takes_is_let_go() {
        let mut conn = Conn::new();
        let (a, mut a_rx) = conn.scope("CA");
        // In A's context: A's, with the session's later events.
        conn.receive(paused("S1", "CA"));
        conn.receive(on("S1", "Fetch.requestPaused"));
        assert_eq!(events(&mut a_rx), ["Target.attachedToTarget ", "Fetch.requestPaused S1"]);
        // In a context without a handle, with the connection's own reader gone.
        conn.own_rx.close();
        conn.receive(paused("S2", "CX"));
        let resume = ("Runtime.runIfWaitingForDebugger".to_string(), "S2".to_string(), String::new());
        let detach = |s: &str| ("Target.detachFromTarget".to_string(), String::new(), s.to_string());
        assert_eq!(conn.sent(), [resume, detach("S2")]);
        // In A's context with A's reader gone (its driver stopped) but its handle alive.
        a_rx.close();
        conn.receive(paused("S3", "CA"));
        assert_eq!(conn.sent()[1], detach("S3"));
        // A's last handle gone: its context and sessions forgotten, its sessions detached.
        drop(a);
        let routes = lock(&conn.raw.routes);
        assert!(routes.contexts.is_empty() && routes.sessions.is_empty());
        drop(routes);
        let mut sent = conn.sent();
        sent.sort();
        assert_eq!(sent, [detach("S1"), detach("S3")]);
    }

    #[tokio::test]
    async fn an_answer_for_a_handle_gone_detaches_and_an_old_handle_leaves_a_newer_one_be() {
        let mut conn = Conn::new();
        let (old, old_rx) = conn.scope("CA");
        // The attach's caller and driver went before the answer came.
        let (answer, _) = oneshot::channel();
        let route = old.route.as_ref().map(|r| (r.id, r.events.clone()));
        lock(&conn.raw.pending).insert(42, Waiting { answer, route });
        drop(old_rx);
        conn.receive(json!({ "id": 42, "result": { "sessionId": "S1" } }));
        assert_eq!(conn.sent(), [("Target.detachFromTarget".to_string(), String::new(), "S1".to_string())]);
        assert!(lock(&conn.raw.routes).sessions.is_empty());
        // A handle made again for the same context outlives the old one's drop.
        let (_new, mut new_rx) = conn.scope("CA");
        drop(old);
        conn.receive(paused("S2", "CA"));
        assert_eq!(events(&mut new_rx), ["Target.attachedToTarget "]);
    }

    #[tokio::test]
    async fn auto_attach_goes_off_with_the_last_handle_that_turned_it_on() {
        let mut conn = Conn::new();
        let (a, _a_rx) = conn.scope("CA");
        let (b, _b_rx) = conn.scope("CB");
        let (c, _c_rx) = conn.scope("CC");
        let params = json!({ "autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true });
        for handle in [&a, &b, &a] {
            let call = handle.auto_attach(params.clone());
            let answered = async {
                let sent = conn.next_sent().await;
                assert_eq!(sent["params"]["autoAttach"], true);
                conn.receive(json!({ "id": sent["id"], "result": {} }));
            };
            let (result, ()) = tokio::join!(call, answered);
            result.unwrap();
        }
        assert_eq!(lock(&conn.raw.routes).auto_attach, 2, "a and b, each once");
        drop(c);
        drop(a);
        assert_eq!(conn.sent(), Vec::<(String, String, String)>::new(), "b still wants it");
        drop(b);
        let off: Value = serde_json::from_str(&conn.out_rx.try_recv().unwrap()).unwrap();
        assert_eq!((&off["method"], &off["params"]["autoAttach"]), (&json!("Target.setAutoAttach"), &json!(false)));
    }
}
