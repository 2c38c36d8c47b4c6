//! The driver's shared state: its tabs, the open dialog and what the watcher tasks share
//! with the actions.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chromiumoxide::cdp::browser_protocol::target::TargetId;
use chromiumoxide::Page;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::egress::WorkerNet;
use crate::emulation::Applied;
use crate::events::{DialogInfo, DialogKind, EventHub, EventKind, Ring};
use crate::outcome::{ActionFailure, FailureCode};
use crate::sync::lock;

/// One tab: its target, chromiumoxide's page and our raw session on it (Fetch, lifecycle).
#[derive(Clone)]
pub(crate) struct Tab {
    pub target: TargetId,
    pub page: Page,
    pub session: String,
}

#[derive(Default)]
pub(crate) struct Tabs {
    pub list: Vec<Tab>,
    /// Sticky: later actions go here until `switch_tab` or `close_tab` moves it.
    pub active: usize,
    /// Page targets admitted by the target watcher and still registering: they count against
    /// the cap, so a burst of popups cannot all pass while the first ones register.
    pub pending: HashSet<TargetId>,
    /// The latest page targets closed for being over the cap (at most [`REFUSED_KEPT`]), so
    /// `new_tab` can tell its own page was one of them.
    pub refused: VecDeque<TargetId>,
    /// Most open tabs; `None` until the driver is attached (Chromium's start-up tab is not the
    /// session's).
    pub cap: Option<usize>,
}

const REFUSED_KEPT: usize = 64;

impl Tabs {
    /// Tabs open or opening.
    pub fn open(&self) -> usize {
        self.list.len() + self.pending.len()
    }

    /// Admits a new page target, or returns the cap it would exceed.
    pub fn admit(&mut self, target: &TargetId) -> Result<(), usize> {
        match self.cap {
            Some(cap) if self.open() >= cap => {
                if self.refused.len() == REFUSED_KEPT {
                    self.refused.pop_front();
                }
                self.refused.push_back(target.clone());
                Err(cap)
            }
            _ => {
                self.pending.insert(target.clone());
                Ok(())
            }
        }
    }
}

/// `new_tab` beyond the cap.
pub(crate) fn tab_cap(cap: usize) -> ActionFailure {
    ActionFailure::new(
        FailureCode::BlockedByPolicy,
        format!("this session already has {cap} tabs, the most --max-tabs allows"),
    )
}

/// How an open dialog is answered.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// A JavaScript dialog of a tab: `Page.handleJavaScriptDialog`.
    Js,
    /// A held basic-auth challenge: `Fetch.continueWithAuth` on our raw session.
    Auth { session: String, request_id: String, origin: String },
    /// A permission request held by the page shim: settle it in its context, grant if accepted.
    Permission { session: String, context: i64, id: i64, permission: String, origin: String },
}

#[derive(Debug, Clone)]
pub(crate) struct OpenDialog {
    pub seq: u64,
    pub info: DialogInfo,
    pub target: TargetId,
    pub answer: Answer,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) prompt: Option<String>,
}

/// `Runtime.evaluate` params that settle the permission request `id` the page shim holds in
/// execution context `context` (see `watchers::PERMISSION_SHIM`), granted or not.
pub(crate) fn settle_permission(id: i64, context: i64, accept: bool) -> Value {
    json!({
        "expression": format!("window.__browserpoolPermission && window.__browserpoolPermission.settle({id}, {accept})"),
        "contextId": context,
    })
}

/// State shared with the watcher tasks.
pub(crate) struct Shared {
    pub(crate) tabs: Mutex<Tabs>,
    pub(crate) tabs_changed: tokio::sync::Notify,
    pub(crate) dialog: watch::Sender<Option<OpenDialog>>,
    pub(crate) dialog_seq: AtomicU64,
    pub(crate) events: EventHub,
    /// Basic-auth credentials accepted in this session, per origin.
    pub(crate) credentials: Mutex<HashMap<String, (String, String)>>,
    /// Auth requests already answered with credentials (a second challenge means they failed).
    pub(crate) answered: Mutex<HashSet<String>>,
    /// HTML set by `load_html`, per tab: (html, marker that proves it is still there, the
    /// document URL it was loaded over). A different URL later means a real navigation.
    pub(crate) loaded_html: Mutex<HashMap<TargetId, (String, String, String)>>,
    /// `Page.lifecycleEvent`s of our raw sessions: (session, loader id, name).
    pub(crate) lifecycle: Ring<(String, String, String)>,
    /// What documents' requests were answered, seen paused at their response stage: (session,
    /// network request id, answer). A main-frame navigation's request id is its loader id.
    pub(crate) doc_status: Ring<(String, String, DocAnswer)>,
    /// The tab Chromium shows in front, as far as we know: a new tab or popup comes up in
    /// front, and a tab in the background gets no frames, so input to it waits forever.
    pub(crate) front: Mutex<Option<TargetId>>,
    /// What the session's pages may load, shared with the worker's egress proxy (which judges
    /// every connection); checked early here for every request of a registered tab.
    pub(crate) net: Arc<WorkerNet>,
    /// Tabs whose renderer died (`Inspector.targetCrashed`) and that no navigation has
    /// brought back yet.
    pub(crate) crashed: watch::Sender<HashSet<TargetId>>,
    /// Held while an [`Unstick`] runs: the next action waits for it, or the late
    /// `Page.stopLoading` would abort the navigation that action starts.
    pub(crate) unsticking: Arc<tokio::sync::Mutex<()>>,
    /// Every task of this driver (watchers, tab registrations), tracked; they end when the
    /// driver is dropped (`stop`).
    pub(crate) tasks: TaskTracker,
    pub(crate) stop: CancellationToken,
    /// The browser context this driver's session is, when the session shares its browser
    /// with others of its tenant (context isolation): only its targets are its tabs, and
    /// every browser-wide call names it. `None`: the whole browser is the session's.
    pub(crate) context: Option<String>,
    /// The session's recording, while it is recorded.
    pub(crate) recording: Mutex<Option<Arc<super::recorder::Recording>>>,
    /// The live view's screencast, while someone watches (see `live.rs`).
    pub(crate) live: Mutex<Option<Arc<super::live::LiveCast>>>,
    /// When the screencast's next frame may be acknowledged (see `pacing.rs`).
    pub(crate) pace: Mutex<super::pacing::Pace>,
    /// The session's emulation and the browser's own user agent, once its lease set one:
    /// applied to every tab as it is registered.
    pub(crate) emulation: Mutex<Option<Arc<Applied>>>,
}

impl Shared {
    /// Spawns a task of this driver on its tracker; it ends when the driver is dropped, if it
    /// has not ended before.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = task => {}
                _ = stop.cancelled() => {}
            }
        });
    }

    /// `params` of a browser-wide call, scoped to this session's browser context if it has
    /// one.
    pub(crate) fn scoped(&self, mut params: Value) -> Value {
        if let Some(context) = &self.context {
            params["browserContextId"] = json!(context);
        }
        params
    }

    /// Whether a target of this browser context belongs to this session.
    pub(crate) fn owns(&self, target_context: Option<&str>) -> bool {
        self.context.as_deref().is_none_or(|ours| target_context == Some(ours))
    }

    /// Why the policy refuses `url`, if it does.
    pub(crate) fn check(&self, url: &str) -> Result<(), String> {
        self.net.check_as_written(url)
    }

    pub(crate) fn tab_index(&self, target: &TargetId) -> i32 {
        lock(&self.tabs).list.iter().position(|t| &t.target == target).map(|i| i as i32).unwrap_or(-1)
    }

    pub(crate) fn tab_by_session(&self, session: &str) -> Option<Tab> {
        lock(&self.tabs).list.iter().find(|t| t.session == session).cloned()
    }

    pub(crate) fn open_dialog(&self, info: DialogInfo, target: TargetId, answer: Answer) {
        let seq = self.dialog_seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.events.emit(EventKind::DialogOpened(info.clone()));
        self.dialog.send_replace(Some(OpenDialog {
            seq,
            info,
            target,
            answer,
            username: None,
            password: None,
            prompt: None,
        }));
    }

    /// Clears the dialog `seq` if it is still the open one.
    pub(crate) fn close_dialog(&self, seq: u64) -> Option<OpenDialog> {
        let mut closed = None;
        self.dialog.send_if_modified(|d| match d {
            Some(open) if open.seq == seq => {
                closed = d.take();
                true
            }
            _ => false,
        });
        closed
    }
}

/// The selector-grammar lines that answer a dialog of this kind.
pub(crate) fn grammar(kind: DialogKind) -> Vec<String> {
    let lines: &[&str] = match kind {
        DialogKind::Alert => &["click dialog::accept"],
        DialogKind::Confirm | DialogKind::BeforeUnload | DialogKind::Permission => {
            &["click dialog::accept", "click dialog::dismiss"]
        }
        DialogKind::Prompt => &["type dialog::prompt <text>", "click dialog::accept", "click dialog::dismiss"],
        DialogKind::BasicAuth => &[
            "type dialog::username <name>",
            "type dialog::password <secret>",
            "click dialog::accept",
            "click dialog::dismiss",
        ],
    };
    lines.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_counts_pending_pages_and_keeps_few_refusals() {
        let target = |i: usize| TargetId::from(format!("t-{i}"));
        let mut tabs = Tabs::default();
        assert!((0..5).all(|i| tabs.admit(&target(i)).is_ok()), "no cap until attached");
        tabs.pending.clear();
        tabs.cap = Some(2);
        assert_eq!((tabs.admit(&target(0)), tabs.admit(&target(1))), (Ok(()), Ok(())));
        assert_eq!(tabs.admit(&target(2)), Err(2), "pending pages count");
        assert!(tabs.refused.contains(&target(2)) && !tabs.pending.contains(&target(2)));
        for i in 3..3 + REFUSED_KEPT {
            assert_eq!(tabs.admit(&target(i)), Err(2));
        }
        assert_eq!(tabs.refused.len(), REFUSED_KEPT);
        assert!(!tabs.refused.contains(&target(2)), "the oldest refusal is forgotten");
    }
}

/// How a document's request was answered: an HTTP status, or the egress proxy's refusal (why,
/// in words: a navigation fails with the network error and says this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DocAnswer {
    Status(u16),
    Refused(String),
}
