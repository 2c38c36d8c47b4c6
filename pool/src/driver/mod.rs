//! The session driver: tabs, dialogs and events of one worker, and the dispatch of canonical
//! actions to the active tab.
//!
//! Invariants: at most one dialog is open per worker (Chromium blocks a tab on its dialog, and
//! a basic-auth challenge is held by us); every action races its work against a new dialog
//! opening and ends with `DIALOG_OPEN` at once when one does; while a dialog is open, only
//! the `dialog::` grammar runs. A failure never poisons the driver.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::emulation::{SetDeviceMetricsOverrideParams, SetTouchEmulationEnabledParams};
use chromiumoxide::cdp::browser_protocol::target::{
    CloseTargetParams, EventTargetCreated, EventTargetDestroyed, GetTargetsParams, TargetId,
};
use chromiumoxide::error::CdpError;
use chromiumoxide::{Browser, Page};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::actions::{ActionKind, Canonical};
use crate::egress::WorkerNet;
use crate::emulation::{Applied, Emulation};
use crate::error::PoolError;
use crate::events::{EventHub, EventKind, EventReader, Ring};
use crate::outcome::{ActResult, ActionFailure, ActionOutput, Deadline, FailureCode, Viewport};
use crate::policy::NavPolicy;
use crate::rawcdp::{RawCdp, RawEvent};
use crate::sync::lock;
use dialog::wait_dialog_after;
use state::{OpenDialog, Shared, Tab, Tabs};
use watchers::{raw_events, watch_targets};

mod context;
mod dialog;
pub mod live;
pub(crate) mod ops;
mod pacing;
mod recorder;
pub(crate) mod state;
mod watchers;

/// One action to run, already canonicalized and scope-checked by the caller.
#[derive(Debug, Clone)]
pub struct ActionCall {
    pub action: Canonical,
    pub selector: String,
    pub payload: Value,
    /// The action's whole budget; element waits use all of it.
    pub timeout: Duration,
    /// Whether `timeout` is the server's default (the client sent no `timeout_ms`); messages
    /// about a wait that ran out say which it was.
    pub default_timeout: bool,
}

/// How far past its `timeout_ms` an action that waits for no element may answer (see
/// [`Driver::run`]).
const OUTER_GRACE: Duration = Duration::from_millis(50);

/// The same for an action that waits for elements: room for its last check, which ends its
/// wait before `timeout_ms` unless the page (or the host) is slow to answer it.
const ELEMENT_GRACE: Duration = Duration::from_millis(500);

/// Driver limits.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Deadline of each CDP call the driver makes outside an action's own budget.
    pub cdp_timeout: Duration,
    /// Largest `load_html` document, in bytes.
    pub max_html_bytes: usize,
    /// Most tabs a session may have open, popups included.
    pub max_tabs: usize,
    /// The worker's cgroup, when it has one: a renderer the kernel killed at its memory limit
    /// is reported as such.
    pub cgroup: Option<Arc<crate::cgroup::WorkerCgroup>>,
}

/// Drives one worker's tabs. Actions of one session must be serialized by the caller.
pub struct Driver {
    pub(crate) browser: Arc<Browser>,
    pub(crate) raw: RawCdp,
    pub(crate) cfg: DriverConfig,
    pub(crate) shared: Arc<Shared>,
    viewport: Mutex<Option<Viewport>>,
    /// The session's files directory, where `set_input_files` finds its files.
    files: Mutex<Option<std::path::PathBuf>>,
    /// A context session's own egress listener (its browser context's `proxyServer`): it
    /// ends with the driver.
    _egress: Option<Box<crate::egress::Proxy>>,
}

impl Drop for Driver {
    /// Ends every task of the driver (see [`Shared::spawn`]).
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

impl Driver {
    /// The session's screen, for live view.
    pub fn screen(&self) -> live::Screen {
        live::Screen { shared: self.shared.clone(), raw: self.raw.clone() }
    }

    /// Connects the driver to a freshly launched browser: starts the watchers, opens the page
    /// sessions will drive and closes any other tab Chromium started with.
    pub(crate) async fn attach(
        browser: Browser,
        ws_url: &str,
        cfg: DriverConfig,
        net: Arc<WorkerNet>,
    ) -> Result<Driver, PoolError> {
        let t = cfg.cdp_timeout;
        let timeout = |what| PoolError::CdpTimeout { what, after: t };
        let (raw_tx, raw_rx) = mpsc::unbounded_channel();
        let raw = RawCdp::connect(ws_url, t, raw_tx).await.map_err(PoolError::Cdp)?;
        let driver = Driver::start(Arc::new(browser), (raw, raw_rx), cfg, net, None).await?;
        let page = tokio::time::timeout(t, driver.browser.new_page("about:blank"))
            .await
            .map_err(|_| timeout("new page"))?
            .map_err(|e| PoolError::Cdp(format!("new page: {e}")))?;
        let targets = tokio::time::timeout(t, driver.browser.execute(GetTargetsParams::default()))
            .await
            .map_err(|_| timeout("get targets"))?
            .map_err(|e| PoolError::Cdp(format!("get targets: {e}")))?;
        for info in &targets.result.target_infos {
            if info.r#type == "page" && &info.target_id != page.target_id() {
                let close = driver.browser.execute(CloseTargetParams::new(info.target_id.clone()));
                let _ = tokio::time::timeout(t, close).await;
            }
        }
        driver.wait_tab(page.target_id(), Instant::now() + t).await.map_err(|f| PoolError::Cdp(f.message))?;
        // The tabs closed above may have been registered first: wait for the watcher to drop
        // them, and drop them ourselves if it does not in time, so ours is tab 0.
        let only_ours = |tabs: &Tabs| tabs.list.iter().all(|tab| &tab.target == page.target_id()).then_some(());
        if driver.when_tabs(Instant::now() + t, only_ours).await.is_none() {
            let mut tabs = lock(&driver.shared.tabs);
            tabs.list.retain(|tab| &tab.target == page.target_id());
            tabs.pending.clear();
            tabs.active = 0;
        }
        driver.ready().await
    }

    /// A driver for one session that is the browser context `context` of a browser shared
    /// with other sessions of its tenant: the browser's raw connection scoped to the context
    /// (for Fetch and lifecycle), and one blank tab opened in the context. Nothing outside the
    /// context is its tab.
    pub(crate) async fn attach_context(
        browser: Arc<Browser>,
        raw: &RawCdp,
        context: String,
        cfg: DriverConfig,
        (net, egress): (Arc<WorkerNet>, crate::egress::Proxy),
    ) -> Result<Driver, PoolError> {
        let t = cfg.cdp_timeout;
        let (raw_tx, raw_rx) = mpsc::unbounded_channel();
        let raw = raw.scoped(&context, raw_tx);
        let mut driver = Driver::start(browser, (raw, raw_rx), cfg, net, Some(context.clone())).await?;
        driver._egress = Some(Box::new(egress));
        let params = chromiumoxide::cdp::browser_protocol::target::CreateTargetParams::builder()
            .url("about:blank")
            .browser_context_id(chromiumoxide::cdp::browser_protocol::browser::BrowserContextId::from(context))
            .build()
            .map_err(PoolError::Cdp)?;
        let page = tokio::time::timeout(t, driver.browser.new_page(params))
            .await
            .map_err(|_| PoolError::CdpTimeout { what: "new page", after: t })?
            .map_err(|e| PoolError::Cdp(format!("new page: {e}")))?;
        driver.wait_tab(page.target_id(), Instant::now() + t).await.map_err(|f| PoolError::Cdp(f.message))?;
        driver.ready().await
    }

    /// The tab cap on, and the default screen emulated.
    async fn ready(self) -> Result<Driver, PoolError> {
        lock(&self.shared.tabs).cap = Some(self.cfg.max_tabs);
        // Warm workers already emulate the default screen, so most leases skip this call.
        self.set_viewport(Viewport::default(), self.cfg.cdp_timeout)
            .await
            .map_err(|f| PoolError::Cdp(format!("set viewport: {}", f.message)))?;
        Ok(self)
    }

    /// The shared state and the watchers, on `raw` and its events; no tab yet.
    async fn start(
        browser: Arc<Browser>,
        (raw, raw_rx): (RawCdp, mpsc::UnboundedReceiver<RawEvent>),
        cfg: DriverConfig,
        net: Arc<WorkerNet>,
        context: Option<String>,
    ) -> Result<Driver, PoolError> {
        let t = cfg.cdp_timeout;
        let timeout = |what| PoolError::CdpTimeout { what, after: t };
        let shared = Arc::new(Shared {
            tabs: Mutex::new(Tabs::default()),
            tabs_changed: tokio::sync::Notify::new(),
            dialog: watch::channel(None).0,
            dialog_seq: AtomicU64::new(0),
            events: EventHub::default(),
            credentials: Mutex::new(HashMap::new()),
            answered: Mutex::new(HashSet::new()),
            loaded_html: Mutex::new(HashMap::new()),
            lifecycle: Ring::new(1024),
            doc_status: Ring::new(256),
            front: Mutex::new(None),
            net,
            crashed: watch::channel(HashSet::new()).0,
            unsticking: Arc::default(),
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
            context,
            recording: Mutex::new(None),
            live: Mutex::new(None),
            pace: Mutex::default(),
            emulation: Mutex::new(None),
        });
        let listen = |e: CdpError| PoolError::Cdp(format!("listen targets: {e}"));
        let created = tokio::time::timeout(t, browser.event_listener::<EventTargetCreated>())
            .await
            .map_err(|_| timeout("listen targets"))?
            .map_err(listen)?;
        let destroyed = tokio::time::timeout(t, browser.event_listener::<EventTargetDestroyed>())
            .await
            .map_err(|_| timeout("listen targets"))?
            .map_err(listen)?;
        shared.spawn(raw_events(shared.clone(), raw.clone(), raw_rx).instrument(tracing::debug_span!("raw_events")));
        shared.spawn(
            watch_targets(shared.clone(), raw.clone(), browser.clone(), created, destroyed, t)
                .instrument(tracing::debug_span!("target_watcher")),
        );
        Ok(Driver { browser, raw, cfg, shared, viewport: Mutex::new(None), files: Mutex::new(None), _egress: None })
    }

    /// Ends the driver's watchers now, before it is dropped: a warm worker turned into a
    /// tenant's shared browser keeps its process but no longer serves a session itself.
    pub(crate) fn stop(&self) {
        self.shared.stop.cancel();
    }

    /// Sets the navigation policy of the session this worker serves.
    pub fn set_policy(&self, policy: NavPolicy) {
        *self.shared.net.policy.write().unwrap_or_else(|e| e.into_inner()) = policy;
    }

    /// The session's network policy, shared with its egress proxy: the CDP proxy checks the
    /// URLs a client names (`Target.createTarget`, `Page.navigate`) against it without taking
    /// the session's action lock.
    pub fn net(&self) -> Arc<WorkerNet> {
        self.shared.net.clone()
    }

    /// Checks a URL a client asked for against the policy, as written.
    pub(crate) fn check_url(&self, url: &str) -> ActResult<()> {
        self.shared.check(url).map_err(|why| ActionFailure::new(FailureCode::BlockedByPolicy, why))
    }

    /// [`Driver::check_url`] for a URL taken from a payload field, named in the refusal.
    pub(crate) fn check_field(&self, field: &str, url: &str) -> ActResult<()> {
        self.shared
            .check(url)
            .map_err(|why| ActionFailure::new(FailureCode::BlockedByPolicy, format!("{field}: {why}")))
    }

    /// Checks a URL a client asked to navigate to, its host resolved as the egress proxy
    /// would, so a refusal is a clear `BLOCKED_BY_POLICY` rather than the proxy's error page.
    /// The proxy still judges the connection itself (the name may resolve differently then).
    pub(crate) async fn check_destination(&self, url: &str) -> ActResult<()> {
        self.shared.net.check_url(url).await.map_err(|why| ActionFailure::new(FailureCode::BlockedByPolicy, why))
    }

    /// A reader of this worker's events from now on.
    pub fn events(&self) -> EventReader {
        self.shared.events.subscribe()
    }

    /// Publishes an event on behalf of the session owner (e.g. `SessionEnded`).
    pub fn emit(&self, kind: EventKind) {
        self.shared.events.emit(kind);
    }

    /// Waits until `ready` finds what it looks for in the tab list (re-checked whenever the
    /// list changes); `None` when `until` passes first.
    pub(crate) async fn when_tabs<T>(&self, until: Instant, mut ready: impl FnMut(&Tabs) -> Option<T>) -> Option<T> {
        loop {
            let notified = self.shared.tabs_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(found) = ready(&lock(&self.shared.tabs)) {
                return Some(found);
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Waits until the target is registered as a tab; returns its index.
    pub(crate) async fn wait_tab(&self, target: &TargetId, until: Instant) -> ActResult<usize> {
        self.when_tabs(until, |tabs| tabs.list.iter().position(|t| &t.target == target))
            .await
            .ok_or_else(|| ActionFailure::new(FailureCode::Timeout, "the new tab did not come up in time"))
    }

    /// The active tab and its index.
    pub(crate) fn active(&self) -> ActResult<(Tab, i32)> {
        let tabs = lock(&self.shared.tabs);
        tabs.list.get(tabs.active).cloned().map(|t| (t, tabs.active as i32)).ok_or_else(|| {
            ActionFailure::new(FailureCode::SessionClosed, "the session has no open tab; open one with new_tab")
        })
    }

    /// Emulates the given screen on every tab (and turns off touch emulation unless mobile).
    pub async fn set_viewport(&self, v: Viewport, within: Duration) -> ActResult<()> {
        if *lock(&self.viewport) == Some(v) {
            return Ok(());
        }
        let tabs: Vec<Tab> = lock(&self.shared.tabs).list.clone();
        let active = self.active().ok().map(|(tab, _)| tab.target);
        tokio::time::timeout(within, async {
            for tab in &tabs {
                // A tab closing right now may refuse; only the active tab's answer matters.
                match apply_viewport(&tab.page, v).await {
                    Err(e) if Some(&tab.target) == active.as_ref() => return Err(e),
                    Err(e) => tracing::debug!(error = %e.message, "viewport not applied to a closing tab"),
                    Ok(()) => {}
                }
            }
            Ok::<(), ActionFailure>(())
        })
        .await
        .unwrap_or_else(|_| Err(ActionFailure::new(FailureCode::Timeout, "browser did not answer in time")))?;
        *lock(&self.viewport) = Some(v);
        Ok(())
    }

    /// Emulates `e` on every tab now and every tab to come (see `emulation.rs`); geolocation is
    /// granted to every origin of the session. An empty emulation changes nothing.
    pub async fn set_emulation(&self, e: Emulation, within: Duration) -> ActResult<()> {
        if e.is_empty() {
            return Ok(());
        }
        tokio::time::timeout(within, async {
            let version = self.raw.call("", "Browser.getVersion", json!({})).await.map_err(ActionFailure::raw)?;
            let default_ua = version["userAgent"].as_str().unwrap_or_default().to_string();
            if e.geolocation.is_some() {
                let grant = self.shared.scoped(json!({ "permissions": ["geolocation"] }));
                self.raw.call("", "Browser.grantPermissions", grant).await.map_err(ActionFailure::raw)?;
            }
            let applied = Arc::new(Applied::new(e, default_ua));
            *lock(&self.shared.emulation) = Some(applied.clone());
            // Every new page comes up paused until the watcher has set it up, so a popup's
            // first request already has the emulation (see `watchers::on_attached`).
            let attach = json!({ "autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true });
            self.raw.auto_attach(attach).await.map_err(ActionFailure::raw)?;
            let tabs: Vec<Tab> = lock(&self.shared.tabs).list.clone();
            for tab in &tabs {
                applied.apply(&self.raw, &tab.session).await.map_err(ActionFailure::invalid)?;
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|_| Err(ActionFailure::new(FailureCode::Timeout, "browser did not answer in time")))
    }

    /// The viewport sessions see now.
    pub(crate) fn current_viewport(&self) -> Viewport {
        lock(&self.viewport).unwrap_or_default()
    }

    /// Gives the driver its session's files directory (see `pool/files.rs`).
    pub(crate) fn set_files_dir(&self, dir: std::path::PathBuf) {
        *lock(&self.files) = Some(dir);
    }

    /// The session's files directory, once its lease has one.
    pub(crate) fn files_dir(&self) -> Option<std::path::PathBuf> {
        lock(&self.files).clone()
    }

    fn open_dialog(&self) -> Option<OpenDialog> {
        self.shared.dialog.borrow().clone()
    }

    /// Runs one action. It ends at its deadline (`TIMEOUT`), as soon as a dialog opens
    /// (`DIALOG_OPEN`) or as soon as the active tab's renderer dies (`TAB_CRASHED`),
    /// whichever comes first. An action cut short at its deadline, or dropped by its caller,
    /// leaves the tab usable: see [`Unstick`].
    pub async fn run(&self, call: &ActionCall) -> ActResult<ActionOutput> {
        if call.selector.starts_with("dialog::") {
            return tokio::time::timeout(call.timeout, self.answer_dialog(call)).await.unwrap_or_else(|_| {
                Err(ActionFailure::new(
                    FailureCode::Timeout,
                    format!("the dialog was not answered within {} ms", call.timeout.as_millis()),
                ))
            });
        }
        if let Some(open) = self.open_dialog() {
            return Err(ActionFailure::dialog_open(open.info));
        }
        // An earlier action's Unstick ends first (bounded: its probe, then two sends).
        let _ = tokio::time::timeout(UNSTICK_PROBE * 4, self.shared.unsticking.lock()).await;
        let active = self.active().ok();
        let mut crashes = self.shared.crashed.subscribe();
        // Only what brings a page back (or leaves it) runs on a crashed tab; while it runs the
        // tab counts as alive, so a new crash is noticed like any other.
        let mut revived = None;
        if let Some((tab, index)) = &active {
            if crashes.borrow_and_update().contains(&tab.target) {
                if !matches!(
                    call.action.kind,
                    ActionKind::Navigate
                        | ActionKind::Reload
                        | ActionKind::NewTab
                        | ActionKind::SwitchTab
                        | ActionKind::CloseTab
                        | ActionKind::ListTabs
                        | ActionKind::LoadHtml
                ) {
                    return Err(self.tab_crashed(*index, "it crashed earlier"));
                }
                self.shared.crashed.send_if_modified(|set| set.remove(&tab.target));
                revived = Some(tab.target.clone());
            }
        }
        let baseline = self.shared.dialog_seq.load(Ordering::SeqCst);
        let mut dialogs = self.shared.dialog.subscribe();
        let until = Deadline::new(call.timeout, call.default_timeout);
        // Element waits use the whole budget, their last check starting before it ends: the
        // grace lets that check (a few ms, more on a loaded host) report ELEMENT_NOT_FOUND
        // before the outer deadline turns the result into TIMEOUT. Anything else that runs
        // over (a script, a load) answers TIMEOUT by `timeout_ms` plus a small grace.
        let waits_for_elements = !call.selector.is_empty() || call.action.kind == ActionKind::WaitFor;
        let outer = call.timeout + if waits_for_elements { ELEMENT_GRACE } else { OUTER_GRACE };
        let mut unstick = active.as_ref().map(|(tab, _)| Unstick {
            lock: self.shared.unsticking.clone(),
            raw: self.raw.clone(),
            session: tab.session.clone(),
            armed: true,
        });
        let crashed = async {
            match &active {
                Some((tab, index)) => {
                    let _ = crashes.wait_for(|set| set.contains(&tab.target)).await;
                    *index
                }
                None => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            biased;
            opened = wait_dialog_after(&mut dialogs, baseline) => Err(ActionFailure::dialog_open(opened)),
            index = crashed => Err(self.tab_crashed(index, &format!("it crashed while {} ran", call.action.name))),
            result = tokio::time::timeout(outer, self.dispatch(call, until)) => match result {
                Ok(r) => r,
                Err(_) => {
                    // Only an action that did not finish leaves a busy page behind.
                    drop(unstick.take());
                    return Err(ActionFailure::new(
                        FailureCode::Timeout,
                        format!("{} did not finish {}", call.action.name, until.ran_out()),
                    ));
                }
            },
        };
        if let Some(unstick) = unstick.as_mut() {
            unstick.armed = false;
        }
        if let (Err(_), Some(target)) = (&result, revived) {
            // Whatever failed to bring the page back left it crashed.
            if lock(&self.shared.tabs).list.iter().any(|tab| tab.target == target) {
                self.shared.crashed.send_modify(|set| {
                    set.insert(target);
                });
            }
        }
        result
    }

    /// `TAB_CRASHED` for tab `index`, naming the memory limit when the kernel killed a
    /// process of the worker at it.
    fn tab_crashed(&self, index: i32, when: &str) -> ActionFailure {
        let why = match self.cfg.cgroup.as_ref().and_then(|c| c.limit_reached()) {
            Some(limit) => crate::cgroup::limit_words(limit),
            None => "its renderer died, e.g. out of memory".to_string(),
        };
        ActionFailure::new(
            FailureCode::TabCrashed,
            format!("tab {index}'s page crashed ({when}; {why}): navigate or reload it, or close_tab"),
        )
    }
}

/// Frees a tab an action left busy: when the action timed out or its caller went away (its
/// future was dropped), a script may still spin (`while(true){}`) or a load still hang, and
/// every later action on the tab would wait behind it. Dropped while armed, it asks the page
/// for a trivial answer in the background; if none comes within [`UNSTICK_PROBE`], it
/// terminates the running script (`Runtime.terminateExecution`, which interrupts even a busy
/// main thread); then it stops any load (`Page.stopLoading`). Disarmed when the action ended
/// on its own.
struct Unstick {
    lock: Arc<tokio::sync::Mutex<()>>,
    raw: RawCdp,
    session: String,
    armed: bool,
}

const UNSTICK_PROBE: Duration = Duration::from_millis(300);

impl Drop for Unstick {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (raw, session) = (self.raw.clone(), std::mem::take(&mut self.session));
        // Taken here, not in the task: the caller's next action may start before the task does.
        let held = self.lock.clone().try_lock_owned().ok();
        rt.spawn(async move {
            let _held = held;
            let probe = raw.call(&session, "Runtime.evaluate", json!({ "expression": "1" }));
            if tokio::time::timeout(UNSTICK_PROBE, probe).await.is_err() {
                tracing::info!("an action that did not finish left its page busy: terminating the page's script");
                raw.send(&session, "Runtime.terminateExecution", json!({}));
            }
            raw.send(&session, "Page.stopLoading", json!({}));
        });
    }
}

/// Applies the emulated screen to one page (a new tab, `set_viewport`, an imported context).
pub(crate) async fn apply_viewport(page: &Page, v: Viewport) -> ActResult<()> {
    page.execute(SetDeviceMetricsOverrideParams::new(v.width, v.height, v.scale, v.mobile))
        .await
        .map_err(ActionFailure::cdp)?;
    page.execute(SetTouchEmulationEnabledParams::new(v.mobile)).await.map_err(ActionFailure::cdp)?;
    Ok(())
}
