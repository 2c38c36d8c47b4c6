//! Background tasks of a worker: the target watcher (tabs and popups come and go), one
//! watcher per tab (JavaScript dialogs, console, navigations) and the raw connection's event
//! loop (paused requests, basic-auth challenges, lifecycle). All end when the browser's
//! connection closes; the driver also aborts them when it is dropped.

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::page::{
    DialogType, EventFrameNavigated, EventJavascriptDialogClosed, EventJavascriptDialogOpening,
};
use chromiumoxide::cdp::browser_protocol::target::{
    CloseTargetParams, EventTargetCreated, EventTargetDestroyed, TargetId,
};
use chromiumoxide::cdp::js_protocol::runtime::EventConsoleApiCalled;
use chromiumoxide::listeners::EventStream;
use chromiumoxide::{Browser, Page};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::driver::state::{grammar, settle_permission, Answer, DocAnswer, Shared, Tab};
use crate::egress::ERROR_HEADER;
use crate::events::{DialogInfo, DialogKind, EventKind};
use crate::rawcdp::{RawCdp, RawEvent};
use crate::sync::lock;

/// Registers every page target as a tab, drops tabs whose target is destroyed, and makes sure
/// every new service worker runs (see [`resume_worker`]).
pub(crate) async fn watch_targets(
    shared: Arc<Shared>,
    raw: RawCdp,
    browser: Arc<Browser>,
    mut created: EventStream<EventTargetCreated>,
    mut destroyed: EventStream<EventTargetDestroyed>,
    cdp_timeout: Duration,
) {
    loop {
        tokio::select! {
            ev = created.next() => {
                let Some(ev) = ev else { break };
                if !shared.owns(ev.target_info.browser_context_id.as_ref().map(|c| c.as_ref())) {
                    continue;
                }
                if ev.target_info.r#type == "service_worker" {
                    shared.spawn(resume_worker(raw.clone(), ev.target_info.target_id.clone(), cdp_timeout).in_current_span());
                    continue;
                }
                if ev.target_info.r#type != "page" {
                    continue;
                }
                let target = ev.target_info.target_id.clone();
                // A new page comes up in front, even one closed at the cap below.
                *lock(&shared.front) = Some(target.clone());
                // Admitted here, in event order; a page over the cap (a popup, most likely) is
                // closed rather than registered.
                let admitted = lock(&shared.tabs).admit(&target);
                if let Err(cap) = admitted {
                    tracing::info!(max_tabs = cap, "page closed: the session is at its tab cap");
                    shared.tabs_changed.notify_waiters();
                    let browser = browser.clone();
                    shared.spawn(async move {
                        let close = browser.execute(CloseTargetParams::new(target.clone()));
                        if !matches!(tokio::time::timeout(cdp_timeout, close).await, Ok(Ok(_))) {
                            tracing::debug!(target = ?target, "page over the tab cap did not close");
                        }
                    }.in_current_span());
                    continue;
                }
                let url = ev.target_info.url.clone();
                let (shared, raw, browser) = (shared.clone(), raw.clone(), browser.clone());
                // Registering waits on CDP; do it aside so later events are not held up.
                let tasks = shared.clone();
                tasks.spawn(async move {
                    let registered = tokio::time::timeout(cdp_timeout, register_tab(&shared, &raw, &browser, target.clone(), url, cdp_timeout));
                    let registered = registered.await.unwrap_or_else(|_| Err(format!("not registered within {cdp_timeout:?}")));
                    if let Err(e) = registered {
                        lock(&shared.tabs).pending.remove(&target);
                        shared.tabs_changed.notify_waiters();
                        // Neither handed out nor left running: a page we cannot watch would
                        // hide its dialogs and escape the tab cap.
                        tracing::warn!(target = ?target, error = %e, "a page could not be set up as a tab; closing it");
                        let close = browser.execute(CloseTargetParams::new(target.clone()));
                        let _ = tokio::time::timeout(cdp_timeout, close).await;
                    }
                }.in_current_span());
            }
            ev = destroyed.next() => {
                let Some(ev) = ev else { break };
                let removed = {
                    let mut tabs = lock(&shared.tabs);
                    tabs.pending.remove(&ev.target_id);
                    match tabs.list.iter().position(|t| t.target == ev.target_id) {
                        Some(i) => {
                            tabs.list.remove(i);
                            if tabs.active > i || (tabs.active == i && tabs.active >= tabs.list.len()) {
                                tabs.active = tabs.active.saturating_sub(1);
                            }
                            Some(i)
                        }
                        None => None,
                    }
                };
                if let Some(i) = removed {
                    lock(&shared.loaded_html).remove(&ev.target_id);
                    shared.events.emit(EventKind::TabClosed { tab_index: i as i32 });
                    shared.tabs_changed.notify_waiters();
                }
            }
        }
    }
}

/// Resumes a service worker that may have been left paused at its start.
///
/// chromiumoxide's page sessions auto-attach new workers paused (waiting for a debugger), and
/// from a service worker they send `Runtime.runIfWaitingForDebugger` and detach at once, on two
/// sessions; when Chromium takes the detach first, the resume is dropped and the worker never
/// runs (`navigator.serviceWorker.ready` never settles). A session of our own resumes it,
/// waiting for the answer before it detaches; on a worker already running the call is a no-op.
async fn resume_worker(raw: RawCdp, target: TargetId, cdp_timeout: Duration) {
    let resumed = tokio::time::timeout(cdp_timeout, async {
        let attached =
            raw.call("", "Target.attachToTarget", json!({ "targetId": target.as_ref(), "flatten": true })).await?;
        let session = attached["sessionId"].as_str().ok_or("attach answered no session id")?.to_string();
        let resumed = raw.call(&session, "Runtime.runIfWaitingForDebugger", json!({})).await;
        raw.call("", "Target.detachFromTarget", json!({ "sessionId": session })).await?;
        resumed.map(drop)
    });
    match resumed.await {
        Ok(Ok(())) => {}
        // A worker that ended first (its context disposed, its registration dropped) is gone.
        Ok(Err(e)) => tracing::debug!(target = ?target, error = %e, "service worker not resumed"),
        Err(_) => tracing::debug!(target = ?target, "service worker not resumed in time"),
    }
}

async fn register_tab(
    shared: &Arc<Shared>,
    raw: &RawCdp,
    browser: &Browser,
    target: TargetId,
    url: String,
    cdp_timeout: Duration,
) -> Result<(), String> {
    // chromiumoxide attaches to new targets itself; its page handle appears shortly after.
    let deadline = tokio::time::Instant::now() + cdp_timeout;
    let page = loop {
        match browser.get_page(target.clone()).await {
            Ok(page) => break page,
            Err(_) if tokio::time::Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => return Err(format!("page handle: {e}")),
        }
    };
    let attached =
        raw.call("", "Target.attachToTarget", json!({ "targetId": target.as_ref(), "flatten": true })).await?;
    let session = attached["sessionId"].as_str().ok_or("attach answered no session id")?.to_string();
    // Every request pauses here (and is continued at once) so auth challenges can be held.
    // Documents pause again at their response, so the egress proxy's own error answers become
    // the network errors they stand for.
    let patterns = json!([
        { "urlPattern": "*" },
        { "urlPattern": "*", "resourceType": "Document", "requestStage": "Response" },
    ]);
    raw.call(&session, "Fetch.enable", json!({ "handleAuthRequests": true, "patterns": patterns })).await?;
    raw.call(&session, "Page.enable", json!({})).await?;
    // Reports the renderer's death as `Inspector.targetCrashed`.
    raw.call(&session, "Inspector.enable", json!({})).await?;
    raw.call(&session, "Page.setLifecycleEventsEnabled", json!({ "enabled": true })).await?;
    // Permission prompts: headless Chromium would deny them silently; the shim asks us instead.
    raw.call(&session, "Runtime.enable", json!({})).await?;
    raw.call(&session, "Runtime.addBinding", json!({ "name": PERMISSION_BINDING })).await?;
    raw.call(&session, "Page.addScriptToEvaluateOnNewDocument", json!({ "source": PERMISSION_SHIM })).await?;
    let emulated = lock(&shared.emulation).clone();
    if let Some(applied) = emulated {
        applied.apply(raw, &session).await?;
    }
    let events = listen_tab(&page).await?;
    // A recorded session's new tab is recorded too (when it comes to the front).
    let recording = lock(&shared.recording).clone();
    if let Some(recording) = recording {
        let viewport = recording.viewport();
        super::pacing::screencast(raw, &session, Some((viewport.width, viewport.height))).await;
    } else if lock(&shared.live).is_some() {
        super::pacing::screencast(raw, &session, None).await;
    }
    let tab = Tab { target: target.clone(), page: page.clone(), session };
    let index = {
        let mut tabs = lock(&shared.tabs);
        tabs.pending.remove(&target);
        if tabs.list.iter().any(|t| t.target == target) {
            return Ok(());
        }
        tabs.list.push(tab.clone());
        tabs.list.len() - 1
    };
    shared.spawn(watch_tab(shared.clone(), tab, events).instrument(tracing::debug_span!("tab_watcher")));
    if index > 0 {
        shared.events.emit(EventKind::TabOpened { tab_index: index as i32, url });
    }
    shared.tabs_changed.notify_waiters();
    Ok(())
}

enum TabEvent {
    DialogOpening(Arc<EventJavascriptDialogOpening>),
    DialogClosed(Arc<EventJavascriptDialogClosed>),
    Console(Arc<EventConsoleApiCalled>),
    Navigated(Arc<EventFrameNavigated>),
}

/// A tab's event streams, set up before the tab is registered: a tab whose dialogs could not
/// be watched would block on its first one with nobody told, so it is never handed out.
type TabEvents = std::pin::Pin<Box<dyn futures::Stream<Item = TabEvent> + Send>>;

async fn listen_tab(page: &Page) -> Result<TabEvents, String> {
    let failed = |what: &str, e: chromiumoxide::error::CdpError| format!("listen for {what}: {e}");
    let opening = page.event_listener::<EventJavascriptDialogOpening>().await.map_err(|e| failed("dialogs", e))?;
    let closed = page.event_listener::<EventJavascriptDialogClosed>().await.map_err(|e| failed("dialogs", e))?;
    let console = page.event_listener::<EventConsoleApiCalled>().await.map_err(|e| failed("console", e))?;
    let navigated = page.event_listener::<EventFrameNavigated>().await.map_err(|e| failed("navigations", e))?;
    Ok(Box::pin(futures::stream::select(
        futures::stream::select(opening.map(TabEvent::DialogOpening), closed.map(TabEvent::DialogClosed)),
        futures::stream::select(console.map(TabEvent::Console), navigated.map(TabEvent::Navigated)),
    )))
}

/// Dialogs, console and main-frame navigations of one tab.
async fn watch_tab(shared: Arc<Shared>, tab: Tab, mut events: TabEvents) {
    while let Some(ev) = events.next().await {
        let tab_index = shared.tab_index(&tab.target);
        match ev {
            TabEvent::DialogOpening(d) => {
                let kind = match d.r#type {
                    DialogType::Alert => DialogKind::Alert,
                    DialogType::Confirm => DialogKind::Confirm,
                    DialogType::Prompt => DialogKind::Prompt,
                    DialogType::Beforeunload => DialogKind::BeforeUnload,
                };
                let info = DialogInfo {
                    kind,
                    message: d.message.clone(),
                    url: d.url.clone(),
                    default_prompt: d.default_prompt.clone().unwrap_or_default(),
                    grammar: grammar(kind),
                    tab_index,
                };
                shared.open_dialog(info, tab.target.clone(), Answer::Js);
            }
            TabEvent::DialogClosed(c) => {
                // Whoever clears the dialog (this watcher or the answering action) reports it.
                let open = shared.dialog.borrow().clone();
                if let Some(open) = open.filter(|o| o.target == tab.target && matches!(o.answer, Answer::Js)) {
                    if shared.close_dialog(open.seq).is_some() {
                        shared.events.emit(EventKind::DialogClosed {
                            kind: open.info.kind,
                            accepted: c.result,
                            tab_index,
                        });
                    }
                }
            }
            TabEvent::Console(c) => {
                let text = c
                    .args
                    .iter()
                    .map(|a| match (&a.value, &a.description) {
                        (Some(Value::String(s)), _) => s.clone(),
                        (Some(v), _) => v.to_string(),
                        (None, Some(d)) => d.clone(),
                        (None, None) => String::new(),
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                let level = serde_json::to_value(&c.r#type)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                shared.events.emit(EventKind::Console { level, text, tab_index });
            }
            TabEvent::Navigated(n) => {
                if n.frame.parent_id.is_none() {
                    let url = format!("{}{}", n.frame.url, n.frame.url_fragment.clone().unwrap_or_default());
                    shared.events.emit(EventKind::Navigated { url, tab_index });
                }
            }
        }
    }
}

/// The raw connection's events: paused requests are continued at once; basic-auth challenges
/// are answered from remembered credentials or held open as a dialog.
pub(crate) async fn raw_events(shared: Arc<Shared>, raw: RawCdp, mut rx: mpsc::UnboundedReceiver<RawEvent>) {
    while let Some(ev) = rx.recv().await {
        match ev.method.as_str() {
            // A document's response from the egress proxy itself: fail the request with the
            // network error the proxy names, so navigations report it as Chromium would.
            "Fetch.requestPaused" if ev.params.get("responseStatusCode").is_some() => {
                let id = ev.params["requestId"].clone();
                let reason = ev.params["responseHeaders"].as_array().and_then(|headers| {
                    headers.iter().find_map(|h| {
                        h["name"].as_str().filter(|n| n.eq_ignore_ascii_case(ERROR_HEADER)).and(h["value"].as_str())
                    })
                });
                let reason = reason.and_then(|value| shared.net.error_reason(value));
                let network_id = ev.params["networkId"].as_str();
                match reason.filter(|(r, _)| NETWORK_ERRORS.contains(r)) {
                    Some((reason, why)) => {
                        if let Some(request) = network_id.filter(|_| !why.is_empty()) {
                            let refused = DocAnswer::Refused(why.to_string());
                            shared.doc_status.send_with(|| (ev.session_id.clone(), request.to_string(), refused));
                        }
                        raw.send(&ev.session_id, "Fetch.failRequest", json!({ "requestId": id, "errorReason": reason }))
                    }
                    None => {
                        // Before the document may go on, so a navigation that waits for it
                        // finds its status already sent.
                        let status = ev.params["responseStatusCode"].as_u64().and_then(|s| u16::try_from(s).ok());
                        if let (Some(status), Some(request)) = (status, network_id) {
                            let answer = DocAnswer::Status(status);
                            shared.doc_status.send_with(|| (ev.session_id.clone(), request.to_string(), answer));
                        }
                        raw.send(&ev.session_id, "Fetch.continueRequest", json!({ "requestId": id }))
                    }
                }
            }
            "Fetch.requestPaused" => {
                let id = ev.params["requestId"].clone();
                let url = ev.params["request"]["url"].as_str().unwrap_or_default();
                match shared.check(url) {
                    Ok(()) => {
                        let mut go_on = json!({ "requestId": id });
                        let emulated = lock(&shared.emulation).clone();
                        let request = &ev.params["request"]["headers"];
                        if let Some(headers) = emulated.and_then(|applied| applied.request_headers(request)) {
                            go_on["headers"] = headers;
                        }
                        raw.send(&ev.session_id, "Fetch.continueRequest", go_on)
                    }
                    Err(why) => {
                        tracing::info!(reason = %why, "request blocked by policy");
                        raw.send(
                            &ev.session_id,
                            "Fetch.failRequest",
                            json!({ "requestId": id, "errorReason": "BlockedByClient" }),
                        );
                    }
                }
            }
            "Fetch.authRequired" => on_auth_required(&shared, &raw, &ev),
            // Only targets auto-attached paused: our own attaches (`register_tab`) say so too.
            "Target.attachedToTarget" if ev.session_id.is_empty() && ev.params["waitingForDebugger"] == true => {
                on_attached(&shared, &raw, &ev)
            }
            "Page.screencastFrame" => super::pacing::on_frame(&shared, &raw, &ev),
            // The tab's renderer died (killed, or out of memory): actions on it end at once.
            "Inspector.targetCrashed" => {
                if let Some(tab) = shared.tab_by_session(&ev.session_id) {
                    tracing::warn!(target = ?tab.target, "a tab's renderer crashed");
                    shared.crashed.send_modify(|set| {
                        set.insert(tab.target);
                    });
                }
            }
            "Runtime.bindingCalled" if ev.params["name"] == PERMISSION_BINDING => on_permission(&shared, &raw, &ev),
            "Page.lifecycleEvent" => {
                shared.lifecycle.send_with(|| {
                    let field = |name: &str| ev.params[name].as_str().unwrap_or_default().to_string();
                    (ev.session_id.clone(), field("loaderId"), field("name"))
                });
            }
            _ => {}
        }
    }
}

/// `Network.ErrorReason`s the egress proxy may name (anything else is continued as is).
const NETWORK_ERRORS: &[&str] = &[
    "Failed",
    "TimedOut",
    "ConnectionReset",
    "ConnectionRefused",
    "ConnectionFailed",
    "NameNotResolved",
    "BlockedByClient",
    "AccessDenied",
];

/// The binding the permission shim calls with `{id, name, origin}`.
pub(crate) const PERMISSION_BINDING: &str = "__browserpoolPermissionAsk";

/// Replaces the permission-requesting APIs with ones that ask the session (through the
/// binding) and wait for `window.__browserpoolPermission.settle(id, accepted)`.
const PERMISSION_SHIM: &str = r#"(() => {
  if (window.__browserpoolPermission || typeof window.__browserpoolPermissionAsk !== 'function') return;
  const ask = window.__browserpoolPermissionAsk;
  const pending = new Map();
  let next = 0;
  const request = (name) => new Promise(resolve => {
    const id = ++next;
    pending.set(id, resolve);
    ask(JSON.stringify({ id, name, origin: location.origin }));
  });
  Object.defineProperty(window, '__browserpoolPermission', { value: {
    settle(id, ok) { const r = pending.get(id); if (r) { pending.delete(id); r(ok); } }
  } });
  if (window.Notification) {
    Notification.requestPermission = function (cb) {
      return request('notifications').then(ok => { const p = ok ? 'granted' : 'denied'; if (cb) cb(p); return p; });
    };
  }
  if (navigator.geolocation) {
    const get = navigator.geolocation.getCurrentPosition.bind(navigator.geolocation);
    navigator.geolocation.getCurrentPosition = function (success, error, options) {
      request('geolocation').then(ok => ok ? get(success, error, options)
        : error && error({ code: 1, PERMISSION_DENIED: 1, message: 'User denied Geolocation' }));
    };
  }
  if (navigator.mediaDevices && navigator.mediaDevices.getUserMedia) {
    const gum = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
    navigator.mediaDevices.getUserMedia = function (c) {
      return request(c && c.video ? 'camera' : 'microphone')
        .then(ok => ok ? gum(c) : Promise.reject(new DOMException('Permission denied', 'NotAllowedError')));
    };
  }
})();"#;

/// A target auto-attached to, paused before its first request, for a session with an
/// emulation (see `Driver::set_emulation`): a page of the session (a popup, say) gets the
/// emulation before it runs; anything else is let go at once.
fn on_attached(shared: &Arc<Shared>, raw: &RawCdp, ev: &RawEvent) {
    let session = ev.params["sessionId"].as_str().unwrap_or_default().to_string();
    let info = &ev.params["targetInfo"];
    let ours = info["type"] == "page" && shared.owns(info["browserContextId"].as_str());
    let emulated = lock(&shared.emulation).clone();
    let (true, Some(applied)) = (ours, emulated) else {
        raw.send(&session, "Runtime.runIfWaitingForDebugger", json!({}));
        return raw.send("", "Target.detachFromTarget", json!({ "sessionId": session }));
    };
    // Kept attached: an emulation lasts as long as the session that set it.
    applied.apply_paused(raw, &session);
}

fn on_permission(shared: &Arc<Shared>, raw: &RawCdp, ev: &RawEvent) {
    let Ok(ask) = serde_json::from_str::<Value>(ev.params["payload"].as_str().unwrap_or_default()) else { return };
    let Some(tab) = shared.tab_by_session(&ev.session_id) else { return };
    let permission = ask["name"].as_str().unwrap_or("permission").to_string();
    // A session given a geolocation at acquire has it granted (at its lease): nobody is asked.
    let located = lock(&shared.emulation).as_deref().is_some_and(|a| a.emulation.geolocation.is_some());
    if located && permission == "geolocation" {
        let context = ev.params["executionContextId"].as_i64().unwrap_or(0);
        let settle = settle_permission(ask["id"].as_i64().unwrap_or(0), context, true);
        return raw.send(&ev.session_id, "Runtime.evaluate", settle);
    }
    let origin = ask["origin"].as_str().unwrap_or_default().to_string();
    let info = DialogInfo {
        kind: DialogKind::Permission,
        message: format!("{origin} wants to use {permission}"),
        url: origin.clone(),
        default_prompt: String::new(),
        grammar: grammar(DialogKind::Permission),
        tab_index: shared.tab_index(&tab.target),
    };
    let answer = Answer::Permission {
        session: ev.session_id.clone(),
        context: ev.params["executionContextId"].as_i64().unwrap_or(0),
        id: ask["id"].as_i64().unwrap_or(0),
        permission,
        origin,
    };
    shared.open_dialog(info, tab.target.clone(), answer);
}

fn on_auth_required(shared: &Arc<Shared>, raw: &RawCdp, ev: &RawEvent) {
    let request_id = ev.params["requestId"].as_str().unwrap_or_default().to_string();
    let challenge = &ev.params["authChallenge"];
    let origin = challenge["origin"].as_str().unwrap_or_default().trim_end_matches('/').to_string();
    let url = ev.params["request"]["url"].as_str().unwrap_or_default().to_string();
    let first_try = lock(&shared.answered).insert(request_id.clone());
    let remembered = lock(&shared.credentials).get(&origin).cloned();
    match remembered {
        Some((username, password)) if first_try => {
            raw.send(
                &ev.session_id,
                "Fetch.continueWithAuth",
                json!({ "requestId": request_id, "authChallengeResponse": {
                    "response": "ProvideCredentials", "username": username, "password": password } }),
            );
        }
        _ => {
            if !first_try {
                // The credentials were refused: forget them and ask again.
                lock(&shared.credentials).remove(&origin);
            }
            let Some(tab) = shared.tab_by_session(&ev.session_id) else {
                raw.send(
                    &ev.session_id,
                    "Fetch.continueWithAuth",
                    json!({ "requestId": request_id, "authChallengeResponse": { "response": "CancelAuth" } }),
                );
                return;
            };
            let realm = challenge["realm"].as_str().unwrap_or_default();
            let message = if realm.is_empty() {
                format!("{origin} asks for a username and password")
            } else {
                format!("{origin} asks for a username and password (realm {realm:?})")
            };
            let info = DialogInfo {
                kind: DialogKind::BasicAuth,
                message,
                url,
                default_prompt: String::new(),
                grammar: grammar(DialogKind::BasicAuth),
                tab_index: shared.tab_index(&tab.target),
            };
            shared.open_dialog(
                info,
                tab.target.clone(),
                Answer::Auth { session: ev.session_id.clone(), request_id, origin },
            );
        }
    }
}
