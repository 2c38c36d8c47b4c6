//! What an action comes to, shared by the catalog, the driver and its operations: the
//! outcome types (output, failure and its code), the deadline an action runs against, and the
//! emulated viewport. A leaf: it imports nothing of this crate but the events' dialog types.

use std::time::Duration;

use chromiumoxide::error::CdpError;
use serde_json::Value;
use tokio::time::Instant;

use crate::events::{DialogInfo, DialogKind};

/// The emulated screen of a session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Viewport {
    pub width: u32,
    pub height: u32,
    /// deviceScaleFactor, 1..=3.
    pub scale: f64,
    pub mobile: bool,
}

impl Default for Viewport {
    fn default() -> Self {
        Viewport { width: 1280, height: 720, scale: 1.0, mobile: false }
    }
}

/// Largest viewport or screenshot side, in pixels.
pub const MAX_SIDE: u32 = 16384;

/// When an action must be done by, and what set that time, for the messages of waits that
/// run out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    budget: Duration,
    default: bool,
}

impl Deadline {
    /// `timeout` from now; `default`: it is the server's default, not the caller's.
    pub(crate) fn new(timeout: Duration, default: bool) -> Deadline {
        Deadline { at: Instant::now() + timeout, budget: timeout, default }
    }

    /// Which timeout this is.
    fn which(&self) -> &'static str {
        if self.default {
            "the default action timeout"
        } else {
            "the action's timeout_ms"
        }
    }

    /// `the action's timeout_ms of 2000 ms`, or `the default action timeout of 30000 ms`.
    pub(crate) fn budget(&self) -> String {
        format!("{} of {} ms", self.which(), self.budget.as_millis())
    }

    /// How a wait that ran out ends its message: which timeout, how long, what to change.
    pub(crate) fn ran_out(&self) -> String {
        let hint = if self.default { "; set timeout_ms to wait longer" } else { "" };
        format!("within {} ms ({}{hint})", self.budget.as_millis(), self.which())
    }
}

/// What a successful action returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionOutput {
    /// JSON result (`evaluate` value, extracted text, url, title...).
    pub value: Value,
    /// Binary result (PNG/JPEG screenshot, PDF).
    pub data: Vec<u8>,
    /// MIME type of `data`.
    pub mime_type: String,
    /// The tab the action ran on.
    pub tab_index: i32,
}

/// Why one action failed; maps 1:1 to the wire's `ErrorCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCode {
    InvalidArgument,
    UnknownAction,
    ElementNotFound,
    Timeout,
    DialogOpen,
    NavigationFailed,
    BlockedByPolicy,
    PermissionDenied,
    PayloadTooLarge,
    JsException,
    SessionClosed,
    SessionCrashed,
    /// The tab's renderer died; the session and its other tabs live on.
    TabCrashed,
    Internal,
}

/// A failed action: code, a message for the client, suggestions for unknown names, and the
/// dialog for `DIALOG_OPEN`.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionFailure {
    pub code: FailureCode,
    pub message: String,
    pub did_you_mean: Vec<String>,
    /// Boxed: most failures carry none, and results stay small.
    pub dialog: Option<Box<DialogInfo>>,
}

impl ActionFailure {
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        ActionFailure { code, message: message.into(), did_you_mean: Vec::new(), dialog: None }
    }

    /// The session's browser died: the session is over.
    pub fn browser_crashed() -> Self {
        Self::new(FailureCode::SessionCrashed, "the browser of this session crashed; acquire a new session")
    }

    /// The message as the client reads it: with what to do next, for the codes whose next
    /// step does not depend on where they were raised (the others name theirs at the source).
    pub fn message_with_next_step(&self, action: &str) -> String {
        let next = match self.code {
            FailureCode::InvalidArgument => format!("see the `{action}` action in docs/actions.md"),
            FailureCode::UnknownAction if self.did_you_mean.is_empty() => "see docs/actions.md for the actions".into(),
            FailureCode::ElementNotFound => {
                "check the selector against the page (a screenshot or extract shows it), or raise timeout_ms if the \
                 element comes later"
                    .into()
            }
            FailureCode::Timeout => "raise timeout_ms if it needs longer".into(),
            FailureCode::DialogOpen => "answer it: click with selector dialog::accept or dialog::dismiss".into(),
            FailureCode::NavigationFailed => "check that the site is up and reachable from the server".into(),
            FailureCode::PermissionDenied => {
                "use a token with that scope (an admin issues one: `browserpool admin tokens issue`)".into()
            }
            FailureCode::PayloadTooLarge => "ask for less (a smaller clip, a narrower selector, a shorter text)".into(),
            FailureCode::JsException => "the page's script threw it: fix or catch it in the script".into(),
            FailureCode::Internal => "see the server log".into(),
            FailureCode::UnknownAction
            | FailureCode::BlockedByPolicy
            | FailureCode::SessionClosed
            | FailureCode::SessionCrashed
            | FailureCode::TabCrashed => return self.message.clone(),
        };
        format!("{}; {next}", self.message)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(FailureCode::InvalidArgument, message)
    }

    pub(crate) fn dialog_open(info: DialogInfo) -> Self {
        let message = format!("{} dialog is open: {:?}", kind_name(info.kind), info.message);
        ActionFailure { code: FailureCode::DialogOpen, message, did_you_mean: Vec::new(), dialog: Some(Box::new(info)) }
    }

    pub(crate) fn cdp(e: CdpError) -> Self {
        match e {
            CdpError::JavascriptException(details) => {
                let text = details
                    .exception
                    .as_ref()
                    .and_then(|o| o.description.clone())
                    .unwrap_or_else(|| details.text.clone());
                Self::new(FailureCode::JsException, text)
            }
            CdpError::Timeout => Self::new(FailureCode::Timeout, "browser did not answer in time"),
            other => Self::new(FailureCode::Internal, format!("cdp: {other}")),
        }
    }

    pub(crate) fn raw(e: String) -> Self {
        Self::new(FailureCode::Internal, format!("cdp: {e}"))
    }
}

pub(crate) type ActResult<T> = Result<T, ActionFailure>;

/// A dialog kind in words, for messages.
pub(crate) fn kind_name(kind: DialogKind) -> &'static str {
    match kind {
        DialogKind::Alert => "alert",
        DialogKind::Confirm => "confirm",
        DialogKind::Prompt => "prompt",
        DialogKind::BeforeUnload => "beforeunload",
        DialogKind::BasicAuth => "basic auth",
        DialogKind::Permission => "permission",
    }
}
