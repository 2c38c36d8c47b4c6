//! The scope of one CDP connection in context isolation mode: the session is one browser
//! context of a Chromium shared with other sessions of its tenant, and its client, speaking to
//! the browser-level endpoint (which sees every context), is kept to that context.
//!
//! [`Scope`] learns which targets and sessions are the context's from what the browser says
//! (target events, attachments, replies) and holds the client to them:
//!
//! - at the browser level (no `sessionId`) only [`ROOT_METHODS`] pass: the others act on every
//!   context at once (tracing, `Fetch`, certificate errors, storage by origin...); within a
//!   session of one of the context's targets they act on that target;
//! - a `browserContextId` naming another context is refused, and the methods that default to
//!   the browser's default context ([`CONTEXT_METHODS`]) are given the session's;
//! - a `targetId`, a `windowId`, a `Target.*` method's `sessionId`, and the `sessionId` a
//!   message is sent in must each be one the client was shown as the context's;
//! - creating or disposing contexts, a browser target session, and the few methods that act on
//!   every process are refused ([`REFUSED_IN_CONTEXT`]).
//!
//! From the browser, target events and attachments of other contexts are dropped; a session
//! the client's auto-attach opened on another context's target is detached by the proxy itself
//! (ids in [`INJECTED_IDS`], their replies swallowed), so the client never holds that target
//! paused; anything in a session not the client's is dropped; `Target.getTargets` and
//! `Target.getBrowserContexts` answers show the session's context only.
//!
//! What a scope remembers is bounded ([`CAP`] entries of each kind) and forgotten as targets and
//! sessions go.

use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;

use serde_json::{json, Map, Value};

use super::Verdict;

/// Most targets, sessions, windows, and requests awaiting a reply one connection keeps, each.
/// Past it a request is refused; a target or session the browser announces past it ends the
/// connection, since forwarding one the scope cannot remember would show the client a target
/// it cannot use.
pub const CAP: usize = 10_000;

/// Ids of the messages the proxy itself sends the browser. Chromium takes only 32-bit ids, so
/// the proxy keeps the top of that range, which clients counting from 1 never reach; a client
/// id in it is refused, so every reply in it is the proxy's.
pub const INJECTED_IDS: RangeInclusive<i64> = 2_000_000_000..=i32::MAX as i64;

const ONE_CONTEXT: &str = "this session is one browser context of a shared browser; use its own context (Playwright: browser.contexts()[0]; Puppeteer: the default context)";

/// Methods refused in a shared browser whatever their parameters, and why.
pub const REFUSED_IN_CONTEXT: &[(&str, &str)] = &[
    ("Target.createBrowserContext", ONE_CONTEXT),
    ("Target.disposeBrowserContext", ONE_CONTEXT),
    ("Target.attachToBrowserTarget", "a browser target session reaches every context of the shared browser"),
    ("Memory.setPressureNotificationsSuppressed", "it acts on every process of the shared browser"),
    ("Memory.simulatePressureNotification", "it acts on every process of the shared browser"),
    ("Tracing.", "a trace records the browser process, and with it every context's URLs and ids"),
    ("Memory.getBrowserSamplingProfile", "it profiles the browser process every context shares"),
    ("Memory.getAllTimeSamplingProfile", "it profiles the browser process every context shares"),
    ("SystemInfo.getProcessInfo", "it lists every process of the shared browser"),
    ("Browser.getHistograms", "the browser's histograms count every context's activity"),
    ("Browser.getHistogram", "the browser's histograms count every context's activity"),
    ("Browser.setGlobalPrivacyControl", "it acts on every context of the shared browser"),
];

/// Whether `method` is refused in a shared browser: named in [`REFUSED_IN_CONTEXT`], or of a
/// domain named there (`Tracing.`).
fn refused_in_context(method: &str) -> Option<&'static str> {
    REFUSED_IN_CONTEXT
        .iter()
        .find(|(m, _)| if m.ends_with('.') { method.starts_with(m) } else { *m == method })
        .map(|(_, why)| *why)
}

/// How an event that reaches a shared browser's connection at the browser level (no session)
/// is kept to the context. Every event of a domain with a method in [`ROOT_METHODS`] is
/// listed (a test reads the running Chromium's protocol); any other event at the browser level
/// is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootEvent {
    /// Forwarded only when its target is the context's (`Target.*`).
    ContextTargets,
    /// Forwarded only for a download a page of the context began (`frameId` a context's
    /// target; its progress by the download's `guid`).
    ContextDownloads,
    /// Never sent at the browser level: the methods that turn it on are refused there.
    NotAtRoot,
}

/// See [`RootEvent`].
pub const ROOT_EVENTS: &[(&str, RootEvent)] = &[
    ("Browser.downloadWillBegin", RootEvent::ContextDownloads),
    ("Browser.downloadProgress", RootEvent::ContextDownloads),
    ("Target.attachedToTarget", RootEvent::ContextTargets),
    ("Target.detachedFromTarget", RootEvent::ContextTargets),
    ("Target.receivedMessageFromTarget", RootEvent::ContextTargets),
    ("Target.targetCreated", RootEvent::ContextTargets),
    ("Target.targetDestroyed", RootEvent::ContextTargets),
    ("Target.targetCrashed", RootEvent::ContextTargets),
    ("Target.targetInfoChanged", RootEvent::ContextTargets),
    ("Storage.cacheStorageContentUpdated", RootEvent::NotAtRoot),
    ("Storage.cacheStorageListUpdated", RootEvent::NotAtRoot),
    ("Storage.indexedDBContentUpdated", RootEvent::NotAtRoot),
    ("Storage.indexedDBListUpdated", RootEvent::NotAtRoot),
    ("Storage.privateVerificationTokensUpdated", RootEvent::NotAtRoot),
    ("Storage.storageBucketCreatedOrUpdated", RootEvent::NotAtRoot),
    ("Storage.storageBucketDeleted", RootEvent::NotAtRoot),
];

/// Methods allowed at the browser level, each kept within the context by the checks of its
/// parameters. Anything else is sent in a session of one of the context's targets.
pub const ROOT_METHODS: &[&str] = &[
    "Browser.cancelDownload",
    "Browser.getBrowserCommandLine",
    "Browser.getVersion",
    "Browser.getWindowBounds",
    "Browser.getWindowForTarget",
    "Browser.grantPermissions",
    "Browser.resetPermissions",
    "Browser.setContentsSize",
    "Browser.setDownloadBehavior",
    "Browser.setPermission",
    "Browser.setWindowBounds",
    "Schema.getDomains",
    "Storage.clearCookies",
    "Storage.getCookies",
    "Storage.setCookies",
    "SystemInfo.getFeatureState",
    "SystemInfo.getInfo",
    "Target.activateTarget",
    "Target.attachToTarget",
    "Target.autoAttachRelated",
    "Target.closeTarget",
    "Target.createTarget",
    "Target.detachFromTarget",
    "Target.getBrowserContexts",
    "Target.getTargetInfo",
    "Target.getTargets",
    "Target.setAutoAttach",
    "Target.setDiscoverTargets",
];

const AT_ROOT: &str = "at the browser level it reaches every context of the shared browser; send it in a session attached to one of this context's targets";

/// Methods whose `browserContextId` defaults to the browser's default context: the session's
/// is put in when the client names none.
pub const CONTEXT_METHODS: &[&str] = &[
    "Browser.cancelDownload",
    "Browser.grantPermissions",
    "Browser.resetPermissions",
    "Browser.setDownloadBehavior",
    "Browser.setPermission",
    "Storage.clearCookies",
    "Storage.getCookies",
    "Storage.setCookies",
    "Target.createTarget",
];

const NOT_A_SESSION: &str = "sessionId is not a session of this context's targets on this connection";
const NOT_A_TARGET: &str =
    "targetId is not a target of this context known to this connection (list them with Target.getTargets or Target.setDiscoverTargets)";
const NOT_A_WINDOW: &str = "windowId is not a window of this context's targets (ask Browser.getWindowForTarget first)";

/// What one connection knows of its context, learned from the browser's messages.
#[derive(Debug)]
pub struct Scope {
    context: String,
    /// The context's targets the client has been shown, by id.
    targets: HashMap<String, Known>,
    /// The client's sessions, by id: only these may be sent in, or heard from.
    sessions: HashMap<String, Session>,
    /// Windows of the context's targets, by id, with the target each was asked for.
    windows: HashMap<i64, String>,
    /// Downloads a page of the context began, by `guid`, until they end.
    downloads: HashSet<String>,
    /// Requests whose reply teaches the scope something, by the session they were sent in
    /// and their id.
    pending: HashMap<(Option<String>, i64), Pending>,
    next_injected: i64,
}

#[derive(Debug)]
struct Known {
    /// Seen in a listing, a target event or a `createTarget` reply: kept until the browser
    /// reports it gone or the client closes it. A target seen only by attaching (workers,
    /// frames, the pages of a client without target discovery, whose end no event reports)
    /// is forgotten with its last session.
    listed: bool,
}

#[derive(Debug)]
struct Session {
    target: String,
    /// The session it was attached in (auto-attach within a page); gone with it.
    parent: Option<String>,
}

#[derive(Debug)]
enum Pending {
    /// The reply names the session.
    Attach { target: String },
    /// The reply names the target.
    Create,
    /// A reply means the target is gone.
    Close { target: String },
    /// The reply names the target's window.
    Window { target: String },
}

/// What happens to one message from the browser.
#[derive(Debug, PartialEq)]
pub enum Down {
    /// Forward it as it came.
    Forward,
    /// Forward it as rewritten in place.
    Rewritten,
    /// The client never sees it.
    Drop,
    /// Drop it, and send these to the browser: the proxy's own detach from another context's
    /// target.
    Inject(Vec<Value>),
    /// End the connection with this reason.
    Close(String),
}

impl Scope {
    /// A scope for the browser context `context`, knowing nothing of it yet.
    pub fn new(context: impl Into<String>) -> Scope {
        Scope {
            context: context.into(),
            targets: HashMap::new(),
            sessions: HashMap::new(),
            windows: HashMap::new(),
            downloads: HashSet::new(),
            pending: HashMap::new(),
            next_injected: *INJECTED_IDS.start(),
        }
    }

    pub fn context(&self) -> &str {
        &self.context
    }

    /// Judges one client message after [`judge`](super::judge) did (`judged`): a refusal
    /// stands, and the scope's rules apply to the parameters as `judge` left them.
    pub fn on_client(&mut self, msg: &Value, judged: Verdict) -> Verdict {
        let rewritten = match judged {
            Verdict::Refuse(why) => return Verdict::Refuse(why),
            Verdict::Rewrite(params) => Some(params),
            Verdict::Forward => None,
        };
        let params = rewritten.as_ref().or_else(|| msg.get("params"));
        match self.client(msg, params) {
            Err(why) => Verdict::Refuse(why),
            Ok(Some(forced)) => Verdict::Rewrite(forced),
            Ok(None) => rewritten.map_or(Verdict::Forward, Verdict::Rewrite),
        }
    }

    /// The scope's rules for a client message: `Ok(Some(params))` to send these parameters
    /// instead.
    fn client(&mut self, msg: &Value, params: Option<&Value>) -> Result<Option<Value>, String> {
        let Some(msg) = msg.as_object() else {
            return Err("a CDP message is a JSON object".into());
        };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or_default();
        let id = msg.get("id");
        if id.and_then(Value::as_f64).is_some_and(|id| id >= *INJECTED_IDS.start() as f64) {
            return Err(format!("ids from {} up are the proxy's own", INJECTED_IDS.start()));
        }
        let session = match msg.get("sessionId") {
            None => None,
            Some(Value::String(s)) if self.sessions.contains_key(s) => Some(s.as_str()),
            Some(_) => return Err(NOT_A_SESSION.into()),
        };
        if let Some(why) = refused_in_context(method) {
            return Err(why.to_string());
        }
        if session.is_none() && !ROOT_METHODS.contains(&method) {
            return Err(AT_ROOT.into());
        }
        let params = match params {
            None | Some(Value::Null) => None,
            Some(Value::Object(params)) => Some(params),
            Some(_) => return Err("params must be a JSON object".into()),
        };
        let param = |name: &str| params.and_then(|p| p.get(name));
        // Checked whatever the method: a parameter of these names means the same in every
        // domain that has it (a page's `Page.screencastFrameAck` has a numeric `sessionId` of
        // another kind, hence `Target.*` only there).
        if param("browserContextId").is_some_and(|id| id.as_str() != Some(self.context.as_str())) {
            return Err(format!("browserContextId names another context: {ONE_CONTEXT}"));
        }
        if param("targetId").is_some_and(|id| !id.as_str().is_some_and(|id| self.targets.contains_key(id))) {
            return Err(NOT_A_TARGET.into());
        }
        if method.starts_with("Target.")
            && param("sessionId").is_some_and(|id| !id.as_str().is_some_and(|id| self.sessions.contains_key(id)))
        {
            return Err(NOT_A_SESSION.into());
        }
        if param("windowId").is_some_and(|id| !id.as_i64().is_some_and(|id| self.windows.contains_key(&id))) {
            return Err(NOT_A_WINDOW.into());
        }
        let target = param("targetId").and_then(Value::as_str).map(str::to_string);
        let pending = match method {
            "Target.attachToTarget" => target.map(|target| Pending::Attach { target }),
            "Target.createTarget" => Some(Pending::Create),
            "Target.closeTarget" => target.map(|target| Pending::Close { target }),
            // Within a session it names the session's target.
            "Browser.getWindowForTarget" => target
                .or_else(|| session.and_then(|s| self.sessions.get(s)).map(|s| s.target.clone()))
                .map(|target| Pending::Window { target }),
            _ => None,
        };
        // Chromium answers only integer ids; any other gets an error naming no id, so there is
        // nothing to wait for.
        if let (Some(pending), Some(id)) = (pending, id.and_then(Value::as_i64)) {
            let key = (session.map(str::to_string), id);
            if self.pending.contains_key(&key) {
                return Err(format!("id {id} is still awaiting its reply"));
            }
            if self.pending.len() >= CAP {
                return Err(format!("{CAP} requests are already awaiting their replies"));
            }
            self.pending.insert(key, pending);
        }
        if CONTEXT_METHODS.contains(&method) && param("browserContextId").is_none() {
            let mut forced = params.cloned().unwrap_or_default();
            forced.insert("browserContextId".into(), json!(self.context));
            return Ok(Some(Value::Object(forced)));
        }
        Ok(None)
    }

    /// Judges one message from the browser, rewriting `msg` in place when it says
    /// [`Down::Rewritten`].
    pub fn on_browser(&mut self, msg: &mut Value) -> Down {
        let Some(msg) = msg.as_object_mut() else { return Down::Drop };
        let session = match msg.get("sessionId") {
            None => None,
            Some(Value::String(s)) if self.sessions.contains_key(s) => Some(s.clone()),
            Some(_) => return Down::Drop,
        };
        if msg.contains_key("id") {
            let id = msg.get("id").and_then(Value::as_i64);
            if id.is_some_and(|id| INJECTED_IDS.contains(&id)) {
                return Down::Drop;
            }
            return self.reply(session, id, msg);
        }
        let Some(method) = msg.get("method").and_then(Value::as_str) else { return Down::Forward };
        let params = msg.get("params");
        let param = |name: &str| params.and_then(|p| p.get(name)).and_then(Value::as_str);
        match method {
            "Target.targetCreated" | "Target.targetInfoChanged" => {
                match params.and_then(|p| p.get("targetInfo")).and_then(|info| self.ours(info)) {
                    Some(target) => self.learn_target(target, true).map_or_else(Down::Close, |()| Down::Forward),
                    None => Down::Drop,
                }
            }
            "Target.targetDestroyed" | "Target.targetCrashed" => match param("targetId") {
                Some(target) if self.targets.contains_key(target) => {
                    if method == "Target.targetDestroyed" {
                        let target = target.to_string();
                        self.forget_target(&target);
                    }
                    Down::Forward
                }
                _ => Down::Drop,
            },
            "Target.attachedToTarget" => {
                let Some(child) = param("sessionId") else { return Down::Drop };
                match params.and_then(|p| p.get("targetInfo")).and_then(|info| self.ours(info)) {
                    Some(target) => {
                        let learnt =
                            self.learn_target(target, false).and_then(|()| self.learn_session(child, target, session));
                        learnt.map_or_else(Down::Close, |()| Down::Forward)
                    }
                    None => {
                        let waiting = params.and_then(|p| p.get("waitingForDebugger")) == Some(&Value::Bool(true));
                        let child = child.to_string();
                        Down::Inject(self.detach(&child, session, waiting))
                    }
                }
            }
            "Target.detachedFromTarget" => match param("sessionId") {
                Some(child) if self.sessions.contains_key(child) => {
                    let child = child.to_string();
                    self.forget_sessions(vec![child]);
                    Down::Forward
                }
                _ => Down::Drop,
            },
            // Non-flat sessions: only the client's own are heard from.
            "Target.receivedMessageFromTarget" => match param("sessionId") {
                Some(child) if self.sessions.contains_key(child) => Down::Forward,
                _ => Down::Drop,
            },
            // Every context's downloads are announced to every browser-level session that
            // asked for events: only the context's own pages' go on.
            "Browser.downloadWillBegin" if session.is_none() => match (param("frameId"), param("guid")) {
                (Some(frame), Some(guid)) if self.targets.contains_key(frame) && self.downloads.len() < CAP => {
                    self.downloads.insert(guid.to_string());
                    Down::Forward
                }
                _ => Down::Drop,
            },
            "Browser.downloadProgress" if session.is_none() => match param("guid") {
                Some(guid) if self.downloads.contains(guid) => {
                    if matches!(param("state"), Some("completed" | "canceled")) {
                        let guid = guid.to_string();
                        self.downloads.remove(&guid);
                    }
                    Down::Forward
                }
                _ => Down::Drop,
            },
            // In one of the client's sessions, an event is about that session's target.
            _ if session.is_some() => Down::Forward,
            // At the browser level, an event not kept to the context above could be about
            // any context: none goes on.
            _ => Down::Drop,
        }
    }

    /// A reply (in `session`, already known to be the client's): what its request teaches,
    /// and listings cut to the context. Listings are recognised by their shape, not their
    /// request's id, so no reuse of ids can slip one through whole.
    fn reply(&mut self, session: Option<String>, id: Option<i64>, msg: &mut Map<String, Value>) -> Down {
        let pending = id.and_then(|id| self.pending.remove(&(session.clone(), id)));
        let Some(result) = msg.get_mut("result").and_then(Value::as_object_mut) else { return Down::Forward };
        let str_of =
            |result: &Map<String, Value>, name: &str| result.get(name).and_then(Value::as_str).map(str::to_string);
        let learnt = match pending {
            Some(Pending::Attach { target }) => match str_of(result, "sessionId") {
                Some(child) if !self.sessions.contains_key(&child) => self.learn_session(&child, &target, session),
                _ => Ok(()),
            },
            Some(Pending::Create) => match str_of(result, "targetId") {
                Some(target) => self.learn_target(&target, true),
                None => Ok(()),
            },
            Some(Pending::Close { target }) => {
                if result.get("success") != Some(&Value::Bool(false)) {
                    self.forget_target(&target);
                }
                Ok(())
            }
            Some(Pending::Window { target }) => match result.get("windowId").and_then(Value::as_i64) {
                Some(window) if self.targets.contains_key(&target) => self.learn_window(window, target),
                _ => Ok(()),
            },
            None => Ok(()),
        };
        if let Err(why) = learnt {
            return Down::Close(why);
        }
        let mut rewritten = false;
        if let Some(infos) = result.get_mut("targetInfos").and_then(Value::as_array_mut) {
            infos.retain(|info| self.ours(info).is_some());
            let listed: Vec<String> = infos.iter().filter_map(|info| self.ours(info).map(str::to_string)).collect();
            for target in listed {
                if let Err(why) = self.learn_target(&target, true) {
                    return Down::Close(why);
                }
            }
            rewritten = true;
        }
        if result.contains_key("browserContextIds") || result.contains_key("defaultBrowserContextId") {
            // The default context is another session's as much as any: not named.
            result.remove("defaultBrowserContextId");
            result.insert("browserContextIds".into(), json!([self.context]));
            rewritten = true;
        }
        if rewritten {
            Down::Rewritten
        } else {
            Down::Forward
        }
    }

    /// The target id of `info` when it is a target of the context.
    fn ours<'a>(&self, info: &'a Value) -> Option<&'a str> {
        let context = info.get("browserContextId").and_then(Value::as_str)?;
        (context == self.context).then(|| info.get("targetId").and_then(Value::as_str)).flatten()
    }

    /// The proxy's own messages leaving a session the client's auto-attach opened on another
    /// context's target: run it if it waits (as Puppeteer does for targets it ignores), then
    /// detach, in the session it was attached in.
    fn detach(&mut self, child: &str, parent: Option<String>, waiting: bool) -> Vec<Value> {
        let mut out = Vec::new();
        if waiting {
            out.push(
                json!({"id": self.injected_id(), "method": "Runtime.runIfWaitingForDebugger", "sessionId": child}),
            );
        }
        let mut detach =
            json!({"id": self.injected_id(), "method": "Target.detachFromTarget", "params": {"sessionId": child}});
        if let Some(parent) = parent {
            detach["sessionId"] = json!(parent);
        }
        out.push(detach);
        out
    }

    fn injected_id(&mut self) -> i64 {
        let id = self.next_injected;
        self.next_injected = if id >= *INJECTED_IDS.end() { *INJECTED_IDS.start() } else { id + 1 };
        id
    }

    fn learn_target(&mut self, target: &str, listed: bool) -> Result<(), String> {
        if let Some(known) = self.targets.get_mut(target) {
            known.listed |= listed;
            return Ok(());
        }
        if self.targets.len() >= CAP {
            return Err(format!("the context has more than {CAP} targets for this connection to follow"));
        }
        self.targets.insert(target.to_string(), Known { listed });
        Ok(())
    }

    fn learn_session(&mut self, session: &str, target: &str, parent: Option<String>) -> Result<(), String> {
        if self.sessions.len() >= CAP && !self.sessions.contains_key(session) {
            return Err(format!("this connection has more than {CAP} sessions open"));
        }
        self.sessions.insert(session.to_string(), Session { target: target.to_string(), parent });
        Ok(())
    }

    fn learn_window(&mut self, window: i64, target: String) -> Result<(), String> {
        if self.windows.len() >= CAP && !self.windows.contains_key(&window) {
            return Err(format!("this connection follows more than {CAP} windows"));
        }
        self.windows.insert(window, target);
        Ok(())
    }

    /// Forgets a target gone (destroyed or closed), its windows and its sessions.
    fn forget_target(&mut self, target: &str) {
        self.targets.remove(target);
        self.windows.retain(|_, t| t != target);
        let sessions = self.sessions.iter().filter(|(_, s)| s.target == target).map(|(id, _)| id.clone()).collect();
        self.forget_sessions(sessions);
    }

    /// Forgets sessions gone, with the sessions attached within them (the browser does not
    /// always report those), the requests awaiting replies in them, and the targets known only
    /// through them.
    fn forget_sessions(&mut self, roots: Vec<String>) {
        let gone: HashSet<String> = {
            let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
            for (id, session) in &self.sessions {
                if let Some(parent) = &session.parent {
                    children.entry(parent).or_default().push(id);
                }
            }
            let mut gone = HashSet::new();
            let mut stack = roots;
            while let Some(id) = stack.pop() {
                if gone.contains(&id) {
                    continue;
                }
                for kid in children.get(id.as_str()).into_iter().flatten() {
                    stack.push(kid.to_string());
                }
                gone.insert(id);
            }
            gone
        };
        let mut left: HashSet<String> = HashSet::new();
        for id in &gone {
            if let Some(session) = self.sessions.remove(id) {
                left.insert(session.target);
            }
        }
        self.pending.retain(|(session, _), _| !session.as_ref().is_some_and(|s| gone.contains(s)));
        let attached: HashSet<&str> = self.sessions.values().map(|s| s.target.as_str()).collect();
        left.retain(|t| !attached.contains(t.as_str()) && self.targets.get(t).is_some_and(|k| !k.listed));
        for target in left {
            self.targets.remove(&target);
            self.windows.retain(|_, t| *t != target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: &str = "CTX-OURS";
    const OTHER: &str = "CTX-OTHER";

    fn client(scope: &mut Scope, msg: Value) -> Verdict {
        scope.on_client(&msg, Verdict::Forward)
    }

    fn why(verdict: Verdict) -> String {
        match verdict {
            Verdict::Refuse(why) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn browser(scope: &mut Scope, mut msg: Value) -> (Down, Value) {
        let down = scope.on_browser(&mut msg);
        (down, msg)
    }

    fn info(target: &str, context: &str) -> Value {
        json!({"targetId": target, "type": "page", "title": "", "url": "about:blank", "attached": false, "browserContextId": context})
    }

    fn created(target: &str, context: &str) -> Value {
        json!({"method": "Target.targetCreated", "params": {"targetInfo": info(target, context)}})
    }

    fn attached(session: &str, target: &str, context: &str, parent: Option<&str>, waiting: bool) -> Value {
        let mut msg = json!({"method": "Target.attachedToTarget",
            "params": {"sessionId": session, "targetInfo": info(target, context), "waitingForDebugger": waiting}});
        if let Some(parent) = parent {
            msg["sessionId"] = json!(parent);
        }
        msg
    }

    fn detached(session: &str, parent: Option<&str>) -> Value {
        let mut msg = json!({"method": "Target.detachedFromTarget", "params": {"sessionId": session}});
        if let Some(parent) = parent {
            msg["sessionId"] = json!(parent);
        }
        msg
    }

    /// A scope that was shown its page P1 (listed) and attached to it as S1, and saw another
    /// context's page F1 go by.
    fn with_page() -> Scope {
        let mut scope = Scope::new(CTX);
        assert_eq!(browser(&mut scope, created("P1", CTX)).0, Down::Forward);
        assert_eq!(browser(&mut scope, created("F1", OTHER)).0, Down::Drop);
        assert_eq!(browser(&mut scope, attached("S1", "P1", CTX, None, false)).0, Down::Forward);
        scope
    }

    #[test]
    fn another_context_target_cannot_be_attached_closed_or_activated() {
        let mut scope = with_page();
        for method in [
            "Target.attachToTarget",
            "Target.closeTarget",
            "Target.activateTarget",
            "Target.getTargetInfo",
            "Target.autoAttachRelated",
            "Target.detachFromTarget",
            "Browser.getWindowForTarget",
        ] {
            for foreign in [json!("F1"), json!("NEVER-SEEN"), json!(7), json!(null)] {
                let msg = json!({"id": 1, "method": method, "params": {"targetId": foreign}});
                assert!(why(client(&mut scope, msg)).contains("targetId is not a target of this context"), "{method}");
            }
            let own = json!({"id": 2, "method": method, "params": {"targetId": "P1"}});
            assert_eq!(client(&mut scope, own), Verdict::Forward, "{method}");
            // Replies come, so nothing stays pending for the next round.
            browser(&mut scope, json!({"id": 2, "error": {"code": -32000, "message": "x"}}));
        }
        // Within the client's own session too: the parameter is checked wherever it is sent.
        let msg = json!({"id": 3, "sessionId": "S1", "method": "Target.attachToTarget", "params": {"targetId": "F1"}});
        assert!(matches!(client(&mut scope, msg), Verdict::Refuse(_)));
    }

    #[test]
    fn get_targets_replies_show_the_context_only_and_teach_its_targets() {
        let mut scope = Scope::new(CTX);
        assert_eq!(client(&mut scope, json!({"id": 4, "method": "Target.getTargets"})), Verdict::Forward);
        let reply = json!({"id": 4, "result": {"targetInfos": [
            info("P1", CTX),
            info("F1", OTHER),
            {"targetId": "B", "type": "browser", "title": "", "url": "", "attached": true},
            info("P2", CTX),
        ]}});
        let (down, reply) = browser(&mut scope, reply);
        assert_eq!(down, Down::Rewritten);
        let ids: Vec<&str> = reply["result"]["targetInfos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["targetId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["P1", "P2"]);
        let attach = |target: &str| json!({"id": 5, "method": "Target.attachToTarget", "params": {"targetId": target, "flatten": true}});
        assert_eq!(client(&mut scope, attach("P2")), Verdict::Forward, "learnt from the listing");
        assert!(matches!(client(&mut scope, attach("F1")), Verdict::Refuse(_)));
        assert!(matches!(client(&mut scope, attach("B")), Verdict::Refuse(_)), "the browser target is no one's");
        // A listing is cut whatever id it answers: reusing an id cannot bring one through whole.
        let (down, reply) =
            browser(&mut scope, json!({"id": 99, "result": {"targetInfos": [info("F1", OTHER), info("P1", CTX)]}}));
        assert_eq!(down, Down::Rewritten);
        assert_eq!(reply["result"]["targetInfos"], json!([info("P1", CTX)]));
    }

    #[test]
    fn get_browser_contexts_names_the_session_context_only() {
        let mut scope = Scope::new(CTX);
        assert_eq!(client(&mut scope, json!({"id": 1, "method": "Target.getBrowserContexts"})), Verdict::Forward);
        let reply =
            json!({"id": 1, "result": {"browserContextIds": [OTHER, CTX, "C3"], "defaultBrowserContextId": "DEFAULT"}});
        let (down, reply) = browser(&mut scope, reply);
        assert_eq!(down, Down::Rewritten);
        assert_eq!(reply, json!({"id": 1, "result": {"browserContextIds": [CTX]}}));
    }

    #[test]
    fn another_context_attachment_is_dropped_and_detached_by_the_proxy() {
        let mut scope = with_page();
        // The client's root auto-attach caught another session's new page, paused.
        let (down, _) = browser(&mut scope, attached("FS", "F2", OTHER, None, true));
        let Down::Inject(out) = down else { panic!("{down:?}") };
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["method"], "Runtime.runIfWaitingForDebugger");
        assert_eq!(out[0]["sessionId"], "FS");
        assert_eq!(out[1]["method"], "Target.detachFromTarget");
        assert_eq!(out[1]["params"], json!({"sessionId": "FS"}));
        assert!(out[1].get("sessionId").is_none(), "detached at the browser level, where it was attached");
        for msg in &out {
            assert!(INJECTED_IDS.contains(&msg["id"].as_i64().unwrap()), "{msg}");
        }
        assert_ne!(out[0]["id"], out[1]["id"]);
        // Nested in the client's own session, not waiting: detached in that session.
        let (down, _) = browser(&mut scope, attached("FS2", "F3", OTHER, Some("S1"), false));
        let Down::Inject(out) = down else { panic!("{down:?}") };
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["method"], "Target.detachFromTarget");
        assert_eq!(out[0]["params"]["sessionId"], "FS2");
        assert_eq!(out[0]["sessionId"], "S1");
        // The session stays unknown to the client: nothing of it passes either way.
        let event = json!({"sessionId": "FS", "method": "Runtime.executionContextCreated", "params": {}});
        assert_eq!(browser(&mut scope, event).0, Down::Drop);
        let msg = json!({"id": 9, "sessionId": "FS", "method": "Runtime.evaluate", "params": {"expression": "1"}});
        assert!(why(client(&mut scope, msg)).contains("sessionId is not a session"));
        // A target without a context (the browser's own) is no one's either.
        let mut browser_target = attached("BS", "B", OTHER, None, false);
        browser_target["params"]["targetInfo"].as_object_mut().unwrap().remove("browserContextId");
        assert!(matches!(browser(&mut scope, browser_target).0, Down::Inject(_)));
    }

    #[test]
    fn replies_to_the_proxy_own_messages_are_swallowed() {
        let mut scope = with_page();
        let Down::Inject(out) = browser(&mut scope, attached("FS", "F2", OTHER, Some("S1"), true)).0 else {
            panic!("a detach")
        };
        for msg in out {
            let id = msg["id"].clone();
            let session = msg["sessionId"].clone();
            let ok = json!({"id": id, "sessionId": session, "result": {}});
            assert_eq!(browser(&mut scope, ok).0, Down::Drop);
            let failed = json!({"id": id, "error": {"code": -32602, "message": "No session with given id"}});
            assert_eq!(browser(&mut scope, failed).0, Down::Drop);
        }
        // The client's own replies pass.
        assert_eq!(browser(&mut scope, json!({"id": 12, "sessionId": "S1", "result": {}})).0, Down::Forward);
    }

    #[test]
    fn the_proxy_id_range_is_refused_to_clients() {
        let mut scope = Scope::new(CTX);
        for id in [json!(2_000_000_000), json!(2_147_483_647), json!(2e9), json!(9_007_199_254_740_993u64)] {
            let msg = json!({"id": id, "method": "Browser.getVersion"});
            assert!(why(client(&mut scope, msg)).contains("proxy's own"), "{id}");
        }
        let msg = json!({"id": 1_999_999_999, "method": "Browser.getVersion"});
        assert_eq!(client(&mut scope, msg), Verdict::Forward);
    }

    #[test]
    fn own_attachments_pass_and_their_sessions_are_usable_until_detached() {
        let mut scope = with_page();
        let in_s1 = json!({"id": 3, "sessionId": "S1", "method": "Runtime.evaluate", "params": {"expression": "1"}});
        assert_eq!(client(&mut scope, in_s1.clone()), Verdict::Forward);
        // Nested auto-attach of the page's own worker.
        assert_eq!(browser(&mut scope, attached("W1", "WT1", CTX, Some("S1"), true)).0, Down::Forward);
        let in_w1 = json!({"id": 4, "sessionId": "W1", "method": "Runtime.runIfWaitingForDebugger"});
        assert_eq!(client(&mut scope, in_w1.clone()), Verdict::Forward);
        let detach = json!({"id": 5, "method": "Target.detachFromTarget", "params": {"sessionId": "S1"}});
        assert_eq!(client(&mut scope, detach), Verdict::Forward);
        assert_eq!(browser(&mut scope, detached("S1", None)).0, Down::Forward);
        assert!(matches!(client(&mut scope, in_s1), Verdict::Refuse(_)));
        assert!(matches!(client(&mut scope, in_w1), Verdict::Refuse(_)), "gone with the session it was attached in");
        assert_eq!(browser(&mut scope, detached("W1", Some("S1"))).0, Down::Drop);
        // A session learnt from an attach reply (the event may be missed by a non-flat client).
        let attach = json!({"id": 6, "method": "Target.attachToTarget", "params": {"targetId": "P1", "flatten": true}});
        assert_eq!(client(&mut scope, attach), Verdict::Forward);
        assert_eq!(browser(&mut scope, json!({"id": 6, "result": {"sessionId": "S2"}})).0, Down::Forward);
        let in_s2 = json!({"id": 7, "sessionId": "S2", "method": "Page.enable"});
        assert_eq!(client(&mut scope, in_s2), Verdict::Forward);
    }

    #[test]
    fn created_targets_land_in_the_context() {
        let mut scope = Scope::new(CTX);
        let create = json!({"id": 1, "method": "Target.createTarget", "params": {"url": "https://example.com/", "newWindow": true}});
        match client(&mut scope, create) {
            Verdict::Rewrite(params) => {
                assert_eq!(params, json!({"url": "https://example.com/", "newWindow": true, "browserContextId": CTX}))
            }
            other => panic!("{other:?}"),
        }
        let elsewhere =
            json!({"id": 2, "method": "Target.createTarget", "params": {"url": "", "browserContextId": OTHER}});
        assert!(why(client(&mut scope, elsewhere)).contains("another context"));
        let named = json!({"id": 3, "method": "Target.createTarget", "params": {"url": "", "browserContextId": CTX}});
        assert_eq!(client(&mut scope, named), Verdict::Forward);
        // The reply teaches the new target: a raw client attaches to it next.
        assert_eq!(browser(&mut scope, json!({"id": 1, "result": {"targetId": "NEW"}})).0, Down::Forward);
        let attach = json!({"id": 4, "method": "Target.attachToTarget", "params": {"targetId": "NEW"}});
        assert_eq!(client(&mut scope, attach), Verdict::Forward);
        // Closing it (confirmed) forgets it.
        let close = json!({"id": 5, "method": "Target.closeTarget", "params": {"targetId": "NEW"}});
        assert_eq!(client(&mut scope, close.clone()), Verdict::Forward);
        assert_eq!(browser(&mut scope, json!({"id": 5, "result": {"success": true}})).0, Down::Forward);
        assert!(matches!(client(&mut scope, close), Verdict::Refuse(_)));
    }

    #[test]
    fn contexts_cannot_be_made_or_disposed_nor_the_browser_attached() {
        let mut scope = with_page();
        for method in ["Target.createBrowserContext", "Target.disposeBrowserContext"] {
            for params in [json!({}), json!({"browserContextId": CTX}), json!({"disposeOnDetach": true})] {
                let text = why(client(&mut scope, json!({"id": 1, "method": method, "params": params})));
                assert!(text.contains("one browser context of a shared browser"), "{text}");
                assert!(text.contains("browser.contexts()[0]"), "{text}");
            }
        }
        let msg = json!({"id": 2, "method": "Target.attachToBrowserTarget"});
        assert!(why(client(&mut scope, msg)).contains("every context"));
        // Not from within a session either.
        let msg = json!({"id": 3, "sessionId": "S1", "method": "Target.createBrowserContext"});
        assert!(matches!(client(&mut scope, msg), Verdict::Refuse(_)));
    }

    #[test]
    fn sessions_the_client_was_not_given_are_refused() {
        let mut scope = with_page();
        for session in [json!("SOMEONE-ELSES"), json!(1), json!(null), json!({"a": 1})] {
            let msg =
                json!({"id": 1, "sessionId": session, "method": "Runtime.evaluate", "params": {"expression": "1"}});
            assert!(why(client(&mut scope, msg)).contains("sessionId is not a session"), "{session}");
        }
        let detach = json!({"id": 2, "method": "Target.detachFromTarget", "params": {"sessionId": "SOMEONE-ELSES"}});
        assert!(matches!(client(&mut scope, detach), Verdict::Refuse(_)));
        let own = json!({"id": 3, "sessionId": "S1", "method": "Runtime.evaluate", "params": {"expression": "1"}});
        assert_eq!(client(&mut scope, own), Verdict::Forward);
    }

    #[test]
    fn context_methods_are_given_the_session_context() {
        let mut scope = with_page();
        for method in CONTEXT_METHODS {
            let msg = json!({"id": 1, "method": method, "params": {"origin": "https://example.com"}});
            match client(&mut scope, msg) {
                Verdict::Rewrite(params) => {
                    assert_eq!(params["browserContextId"], CTX, "{method}");
                    assert_eq!(params["origin"], "https://example.com", "{method}: other parameters kept");
                }
                other => panic!("{method}: {other:?}"),
            }
            let msg = json!({"id": 1, "method": method, "params": {"browserContextId": OTHER}});
            assert!(matches!(client(&mut scope, msg), Verdict::Refuse(_)), "{method}");
            // Without params at all, and from within the client's own page session.
            let msg = json!({"id": 1, "sessionId": "S1", "method": method});
            assert_eq!(client(&mut scope, msg), Verdict::Rewrite(json!({"browserContextId": CTX})), "{method}");
            browser(&mut scope, json!({"id": 1, "result": {}}));
        }
        // After judge's own rewrite (the download path), both hold.
        let msg = json!({"id": 2, "method": "Browser.setDownloadBehavior", "params": {"behavior": "allow", "downloadPath": "/home/ci"}});
        let judged = super::super::judge("Browser.setDownloadBehavior", msg.get("params"), "/srv/s1/dl", &|_| Ok(()));
        match scope.on_client(&msg, judged) {
            Verdict::Rewrite(params) => {
                assert_eq!(params, json!({"behavior": "allow", "downloadPath": "/srv/s1/dl", "browserContextId": CTX}))
            }
            other => panic!("{other:?}"),
        }
        // A refusal by judge stands.
        assert_eq!(scope.on_client(&msg, Verdict::Refuse("no".into())), Verdict::Refuse("no".into()));
    }

    #[test]
    fn methods_reaching_every_context_are_refused_at_the_browser_level_only() {
        let mut scope = with_page();
        for method in [
            "Storage.clearDataForOrigin",
            "Storage.getUsageAndQuota",
            "Fetch.enable",
            "Security.setIgnoreCertificateErrors",
            "Tethering.bind",
            "Target.openDevTools",
            "Runtime.evaluate",
            "",
        ] {
            let msg = json!({"id": 1, "method": method, "params": {}});
            assert!(why(client(&mut scope, msg)).contains("at the browser level"), "{method}");
        }
        for method in ["Fetch.enable", "Storage.clearDataForOrigin", "Security.setIgnoreCertificateErrors"] {
            let msg = json!({"id": 2, "sessionId": "S1", "method": method, "params": {}});
            assert_eq!(client(&mut scope, msg), Verdict::Forward, "{method} within the page acts on the page");
        }
        for (method, _) in REFUSED_IN_CONTEXT {
            let msg = json!({"id": 3, "sessionId": "S1", "method": method, "params": {}});
            assert!(matches!(client(&mut scope, msg), Verdict::Refuse(_)), "{method}");
        }
        for method in ["Tracing.start", "Tracing.end", "Tracing.getCategories"] {
            let msg = json!({"id": 3, "sessionId": "S1", "method": method, "params": {}});
            assert!(why(client(&mut scope, msg)).contains("trace"), "{method} within a page of a shared browser");
        }
        for method in ["Browser.getVersion", "Target.setAutoAttach", "Target.setDiscoverTargets", "Target.getTargets"] {
            let msg = json!({"id": 4, "method": method, "params": {}});
            assert_eq!(client(&mut scope, msg), Verdict::Forward, "{method}");
        }
    }

    #[test]
    fn only_the_context_s_downloads_are_heard_of_and_unknown_root_events_are_dropped() {
        let mut scope = with_page();
        let begin = |frame: &str, guid: &str| json!({"method": "Browser.downloadWillBegin", "params": {"frameId": frame, "guid": guid, "url": "https://a.test/r?secret=1", "suggestedFilename": "r.txt"}});
        let progress = |guid: &str, state: &str| json!({"method": "Browser.downloadProgress", "params": {"guid": guid, "totalBytes": 2, "receivedBytes": 2, "state": state}});
        assert_eq!(browser(&mut scope, begin("P2", "other")).0, Down::Drop, "another context's page");
        assert_eq!(browser(&mut scope, progress("other", "inProgress")).0, Down::Drop);
        assert_eq!(browser(&mut scope, begin("P1", "mine")).0, Down::Forward);
        assert_eq!(browser(&mut scope, progress("mine", "inProgress")).0, Down::Forward);
        assert_eq!(browser(&mut scope, progress("mine", "completed")).0, Down::Forward);
        assert!(scope.downloads.is_empty(), "forgotten once it ended");
        let unknown =
            json!({"method": "Tracing.dataCollected", "params": {"value": [{"args": {"url": "https://b.test/"}}]}});
        assert_eq!(
            browser(&mut scope, unknown).0,
            Down::Drop,
            "an event at the browser level no rule keeps to the context"
        );
        let in_page = json!({"method": "Page.loadEventFired", "sessionId": "S1", "params": {}});
        assert_eq!(browser(&mut scope, in_page).0, Down::Forward);
    }

    #[test]
    fn other_contexts_target_events_are_dropped() {
        let mut scope = with_page();
        let changed = |target: &str, context: &str| json!({"method": "Target.targetInfoChanged", "params": {"targetInfo": info(target, context)}});
        assert_eq!(browser(&mut scope, changed("F1", OTHER)).0, Down::Drop);
        assert_eq!(browser(&mut scope, changed("P1", CTX)).0, Down::Forward);
        for method in ["Target.targetDestroyed", "Target.targetCrashed"] {
            let msg = json!({"method": method, "params": {"targetId": "F1", "status": "crashed", "errorCode": 1}});
            assert_eq!(browser(&mut scope, msg).0, Down::Drop, "{method}");
        }
        let crashed = json!({"method": "Target.targetCrashed", "params": {"targetId": "P1", "status": "crashed", "errorCode": 1}});
        assert_eq!(browser(&mut scope, crashed).0, Down::Forward);
        assert_eq!(browser(&mut scope, detached("SOMEONE-ELSES", None)).0, Down::Drop);
        let wrapped = json!({"method": "Target.receivedMessageFromTarget", "params": {"sessionId": "SOMEONE-ELSES", "message": "{}"}});
        assert_eq!(browser(&mut scope, wrapped).0, Down::Drop);
        // Anything said in a session not the client's: events and replies alike.
        assert_eq!(
            browser(&mut scope, json!({"sessionId": "X", "method": "Page.loadEventFired", "params": {}})).0,
            Down::Drop
        );
        assert_eq!(browser(&mut scope, json!({"sessionId": "X", "id": 3, "result": {}})).0, Down::Drop);
        // Its end forgets the target.
        let destroyed = json!({"method": "Target.targetDestroyed", "params": {"targetId": "P1"}});
        assert_eq!(browser(&mut scope, destroyed.clone()).0, Down::Forward);
        let activate = json!({"id": 4, "method": "Target.activateTarget", "params": {"targetId": "P1"}});
        assert!(matches!(client(&mut scope, activate), Verdict::Refuse(_)));
        assert!(matches!(
            client(&mut scope, json!({"id": 5, "sessionId": "S1", "method": "Page.enable"})),
            Verdict::Refuse(_)
        ));
        assert_eq!(browser(&mut scope, destroyed).0, Down::Drop, "reported once");
    }

    #[test]
    fn targets_known_only_by_attaching_go_with_their_last_session() {
        // A client without target discovery (Playwright): pages are known by auto-attach only,
        // and no event reports their end but the detach.
        let mut scope = Scope::new(CTX);
        assert_eq!(browser(&mut scope, attached("S1", "P1", CTX, None, true)).0, Down::Forward);
        assert_eq!(browser(&mut scope, attached("S1W", "W1", CTX, Some("S1"), false)).0, Down::Forward);
        let close =
            |id: u32, target: &str| json!({"id": id, "method": "Target.closeTarget", "params": {"targetId": target}});
        assert_eq!(client(&mut scope, close(1, "W1")), Verdict::Forward);
        let pending = json!({"id": 2, "sessionId": "S1", "method": "Browser.getWindowForTarget"});
        assert_eq!(client(&mut scope, pending), Verdict::Forward);
        assert_eq!(scope.pending.len(), 2);
        assert_eq!(browser(&mut scope, detached("S1", None)).0, Down::Forward);
        assert!(scope.sessions.is_empty(), "the nested session went with its parent");
        assert!(scope.targets.is_empty(), "{:?}", scope.targets);
        assert_eq!(scope.pending.len(), 1, "only the root-level request still awaits its reply");
        assert!(matches!(client(&mut scope, close(3, "P1")), Verdict::Refuse(_)));
        // A listed target stays known after its session goes.
        let mut scope = with_page();
        assert_eq!(browser(&mut scope, detached("S1", None)).0, Down::Forward);
        assert_eq!(client(&mut scope, close(4, "P1")), Verdict::Forward);
    }

    #[test]
    fn windows_of_other_contexts_cannot_be_moved() {
        let mut scope = with_page();
        let bounds = |window: Value| json!({"id": 1, "method": "Browser.setWindowBounds", "params": {"windowId": window, "bounds": {"width": 10}}});
        for window in [json!(1), json!(5), json!("5")] {
            assert!(why(client(&mut scope, bounds(window))).contains("windowId"));
        }
        let ask = json!({"id": 2, "method": "Browser.getWindowForTarget", "params": {"targetId": "P1"}});
        assert_eq!(client(&mut scope, ask), Verdict::Forward);
        assert_eq!(browser(&mut scope, json!({"id": 2, "result": {"windowId": 5, "bounds": {}}})).0, Down::Forward);
        assert_eq!(client(&mut scope, bounds(json!(5))), Verdict::Forward);
        // Asked within the page's session, it names the session's target's window.
        let ask = json!({"id": 3, "sessionId": "S1", "method": "Browser.getWindowForTarget"});
        assert_eq!(client(&mut scope, ask), Verdict::Forward);
        assert_eq!(
            browser(&mut scope, json!({"id": 3, "sessionId": "S1", "result": {"windowId": 6}})).0,
            Down::Forward
        );
        let size = json!({"id": 4, "method": "Browser.setContentsSize", "params": {"windowId": 6, "width": 800}});
        assert_eq!(client(&mut scope, size), Verdict::Forward);
        browser(&mut scope, json!({"method": "Target.targetDestroyed", "params": {"targetId": "P1"}}));
        assert!(matches!(client(&mut scope, bounds(json!(5))), Verdict::Refuse(_)), "gone with its target");
    }

    #[test]
    fn an_id_awaiting_its_reply_cannot_be_reused_for_another_request_that_teaches() {
        let mut scope = with_page();
        let attach = json!({"id": 8, "method": "Target.attachToTarget", "params": {"targetId": "P1"}});
        assert_eq!(client(&mut scope, attach.clone()), Verdict::Forward);
        assert!(why(client(&mut scope, attach.clone())).contains("still awaiting"));
        // The same id in another session is another request.
        let nested =
            json!({"id": 8, "sessionId": "S1", "method": "Target.attachToTarget", "params": {"targetId": "P1"}});
        assert_eq!(client(&mut scope, nested), Verdict::Forward);
        browser(&mut scope, json!({"id": 8, "result": {"sessionId": "S9"}}));
        assert_eq!(client(&mut scope, attach), Verdict::Forward);
    }

    #[test]
    fn screencast_acks_keep_their_numeric_session() {
        let mut scope = with_page();
        let ack = json!({"id": 1, "sessionId": "S1", "method": "Page.screencastFrameAck", "params": {"sessionId": 3}});
        assert_eq!(client(&mut scope, ack), Verdict::Forward);
        let frame = json!({"sessionId": "S1", "method": "Page.screencastFrame", "params": {"data": "", "metadata": {}, "sessionId": 3}});
        assert_eq!(browser(&mut scope, frame).0, Down::Forward);
    }

    #[test]
    fn what_a_scope_remembers_is_bounded() {
        let mut scope = Scope::new(CTX);
        for i in 0..CAP {
            assert_eq!(browser(&mut scope, created(&format!("T{i}"), CTX)).0, Down::Forward);
        }
        assert_eq!(browser(&mut scope, created("T0", CTX)).0, Down::Forward, "a known one costs nothing");
        match browser(&mut scope, created("ONE-MORE", CTX)).0 {
            Down::Close(why) => assert!(why.contains("10000 targets"), "{why}"),
            other => panic!("{other:?}"),
        }
        let listing = json!({"id": 1, "result": {"targetInfos": [info("ONE-MORE", CTX)]}});
        assert!(matches!(browser(&mut scope, listing).0, Down::Close(_)));
        // Requests awaiting their replies: past the cap, refused.
        for id in 0..CAP as i64 {
            let attach = json!({"id": id, "method": "Target.attachToTarget", "params": {"targetId": "T1"}});
            assert_eq!(client(&mut scope, attach), Verdict::Forward);
        }
        let attach = json!({"id": CAP, "method": "Target.attachToTarget", "params": {"targetId": "T1"}});
        assert!(why(client(&mut scope, attach)).contains("awaiting their replies"));
        // Sessions: past the cap, the connection ends.
        let mut scope = Scope::new(CTX);
        for i in 0..CAP {
            assert_eq!(browser(&mut scope, attached(&format!("S{i}"), "P", CTX, None, false)).0, Down::Forward);
        }
        assert!(matches!(browser(&mut scope, attached("S-MORE", "P", CTX, None, false)).0, Down::Close(_)));
        assert!(scope.sessions.len() <= CAP && scope.targets.len() <= CAP && scope.pending.len() <= CAP);
    }

    #[test]
    fn hostile_shapes_are_refused_or_dropped_without_panic() {
        let mut scope = with_page();
        for msg in [json!([1]), json!("x"), json!(1), json!(null)] {
            assert!(matches!(client(&mut scope, msg.clone()), Verdict::Refuse(_)), "{msg}");
            assert_eq!(browser(&mut scope, msg).0, Down::Drop);
        }
        for params in [json!([1]), json!("x"), json!(5)] {
            let msg = json!({"id": 1, "method": "Target.createTarget", "params": params});
            assert!(why(client(&mut scope, msg)).contains("params"));
        }
        for msg in [
            json!({"method": "Target.attachedToTarget"}),
            json!({"method": "Target.attachedToTarget", "params": {"sessionId": 5, "targetInfo": info("P9", CTX)}}),
            json!({"method": "Target.attachedToTarget", "params": {"sessionId": "Z", "targetInfo": "x"}}),
            json!({"method": "Target.targetCreated", "params": {"targetInfo": {"browserContextId": CTX}}}),
            json!({"method": "Target.targetDestroyed", "params": []}),
            json!({"id": "x", "result": {"targetInfos": "nope", "sessionId": 3}}),
            json!({"id": 1, "result": [1]}),
            json!({"method": 5}),
        ] {
            let _ = browser(&mut scope, msg);
        }
        assert!(!scope.targets.contains_key("P9"), "a session id that is no string teaches nothing");
    }
}
