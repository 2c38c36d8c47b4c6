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

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(FailureCode::InvalidArgument, message)
    }

    pub(crate) fn dialog_open(info: DialogInfo) -> Self {
        let message = format!("a {} dialog is open: {}", kind_name(info.kind), info.message);
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
