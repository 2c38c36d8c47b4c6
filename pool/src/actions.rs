//! The action catalog: one table lists every action once (canonical name, aliases, the
//! access it needs, the parser of its arguments), and yields [`ActionKind`], the typed
//! [`Action`], `canonicalize` with its `did_you_mean` suggestions, and each action's audit
//! target. Pure logic, no browser: `ops` runs what is parsed here.
//!
//! Invariant: a payload is judged here, before anything runs, with the messages and codes its
//! handler used to give; what needs the browser (the policy, the open tabs, the page's
//! origin, a size limit from the config) stays with the handler.

use serde_json::Value;

use crate::driver::{ActionFailure, FailureCode, Viewport, MAX_SIDE};

/// The table. One line per action: variant with its typed arguments, canonical name,
/// aliases (exact spellings), access, and the parser of `(selector, payload)`; an action
/// without arguments names no parser and ignores both.
macro_rules! actions {
    (@access ($f:path) $p:ident) => { $f($p) };
    (@access $a:ident $p:ident) => { Access::$a };
    (@parse $v:ident [$f:path] $s:ident $p:ident) => { $f($s, $p) };
    (@parse $v:ident [] $s:ident $p:ident) => { Ok(Action::$v) };
    ($(
        $(#[$meta:meta])*
        $variant:ident $({ $($field:ident : $ty:ty),* $(,)? })?
            = $name:literal $([$($alias:literal),* $(,)?])?, $access:tt $(, $parse:path)?;
    )*) => {
        /// An action with its arguments, parsed from what the client sent.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Action<'a> {
            $( $(#[$meta])* $variant $({ $($field: $ty),* })?, )*
        }

        /// Which action, without its arguments.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ActionKind {
            $( $variant, )*
        }

        impl ActionKind {
            /// Every action of the v1 contract, in table order.
            pub const ALL: &'static [ActionKind] = &[$(ActionKind::$variant),*];

            /// The canonical name, e.g. `navigate`.
            pub const fn name(self) -> &'static str {
                match self { $(ActionKind::$variant => $name,)* }
            }

            /// Other names the client may use, spelled exactly.
            pub const fn aliases(self) -> &'static [&'static str] {
                match self { $(ActionKind::$variant => &[$($($alias),*)?],)* }
            }

            /// The access this action needs; `cookies` depends on its `op`.
            pub fn access(self, payload: &Value) -> Access {
                match self { $(ActionKind::$variant => actions!(@access $access payload),)* }
            }
        }

        impl<'a> Action<'a> {
            /// Which action this is.
            pub fn kind(&self) -> ActionKind {
                match self { $(Action::$variant { .. } => ActionKind::$variant,)* }
            }

            /// Parses the arguments of `kind` from the call's selector and payload.
            pub fn parse(kind: ActionKind, selector: &'a str, payload: &'a Value) -> Result<Action<'a>, ActionFailure> {
                match kind { $(ActionKind::$variant => actions!(@parse $variant [$($parse)?] selector payload),)* }
            }
        }
    };
}

actions! {
    /// Loads `url` in the active tab and waits for `wait_until`.
    Navigate { url: &'a str, wait_until: WaitUntil } = "navigate" ["goto", "open", "visit"], Write, parse::navigate;
    Back = "back", Write;
    Forward = "forward", Write;
    Reload = "reload", Write;
    Click { selector: &'a str, button: Button, click_count: i64 } = "click", Write, parse::click;
    /// Types `text` key by key into the element.
    Type { selector: &'a str, text: &'a str } = "type", Write, parse::type_text;
    /// Replaces the element's value with `text`.
    Fill { selector: &'a str, text: &'a str } = "fill", Write, parse::fill;
    /// Presses a key chord, on the element when a selector is given.
    Press { selector: Option<&'a str>, chord: &'a str } = "press", Write, parse::press;
    Hover { selector: &'a str } = "hover", Write, parse::hover;
    Focus { selector: &'a str } = "focus", Write, parse::focus;
    Select { selector: &'a str, values: Vec<&'a str> } = "select", Write, parse::select;
    Scroll { to: ScrollTo<'a> } = "scroll", Write, parse::scroll;
    WaitFor { until: Condition<'a> } = "wait_for" ["wait"], Read, parse::wait_for;
    /// Reads the element (`body` when no selector is given).
    Extract { selector: Option<&'a str>, format: ExtractFormat<'a> } = "extract" ["text"], Read, parse::extract;
    Attr { selector: &'a str, name: &'a str } = "attr", Read, parse::attr;
    Evaluate { expression: &'a str } = "evaluate" ["eval", "js"], Write, parse::evaluate;
    Screenshot { format: ImageFormat, quality: Option<i64>, region: Region<'a> } = "screenshot", Read, parse::screenshot;
    Pdf { options: PdfOptions<'a> } = "pdf", Read, parse::pdf;
    SetViewport { viewport: Viewport } = "set_viewport" ["viewport"], Write, parse::set_viewport;
    /// Replaces the document; its size limit is the driver's config, checked by the handler.
    LoadHtml { html: &'a str } = "load_html" ["setcontent", "set-content", "setContent", "set_content"], Write,
        parse::load_html;
    /// Opens a tab, on `about:blank` when no URL is given.
    NewTab { url: Option<&'a str> } = "new_tab", Write, parse::new_tab;
    SwitchTab { tab: TabRef<'a> } = "switch_tab", Read, parse::switch_tab;
    /// Closes a tab, the active one when no index is given.
    CloseTab { index: Option<usize> } = "close_tab", Write, parse::close_tab;
    ListTabs = "list_tabs", Read;
    Url = "url", Read;
    Title = "title", Read;
    Cookies { op: CookieOp<'a> } = "cookies", (cookies_access), parse::cookies;
}

/// What an action needs from the caller's token. The server maps these to scope strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `sessions:read`
    Read,
    /// `sessions:write`
    Write,
    /// `context:export`
    ContextExport,
    /// `context:import`
    ContextImport,
}

/// `cookies get` exports the jar; `set` and `clear` change it. The op is read from either
/// form (`"clear"` or `{op: "clear"}`), and anything but a plain get needs the import scope,
/// so a payload that parses as a change can never pass with the export scope alone.
fn cookies_access(payload: &Value) -> Access {
    let op = match payload {
        Value::Null => Some("get"),
        Value::String(op) => Some(op.as_str()),
        Value::Object(m) => m.get("op").map_or(Some("get"), Value::as_str),
        _ => None,
    };
    if op == Some("get") {
        Access::ContextExport
    } else {
        Access::ContextImport
    }
}

/// The lifecycle event `navigate` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitUntil {
    Load,
    DomContentLoaded,
    NetworkIdle,
    /// Answers once the navigation is committed.
    NoWait,
}

impl WaitUntil {
    /// The CDP lifecycle event's name, none for `NoWait`.
    pub fn event(self) -> Option<&'static str> {
        match self {
            WaitUntil::Load => Some("load"),
            WaitUntil::DomContentLoaded => Some("DOMContentLoaded"),
            WaitUntil::NetworkIdle => Some("networkIdle"),
            WaitUntil::NoWait => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Button {
    Left,
    Right,
    Middle,
}

/// Where `scroll` goes: an element into view, or the window to a point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScrollTo<'a> {
    Element(&'a str),
    Point { x: f64, y: f64 },
}

/// What `wait_for` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition<'a> {
    /// The element matching the selector has a visible box.
    Visible(&'a str),
    /// A fixed time, within the action's deadline.
    Ms(u64),
    /// The page's text contains this.
    Text(&'a str),
    /// The page's URL contains this.
    Url(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtractFormat<'a> {
    Text,
    Html,
    Value,
    Attr(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
}

/// A rectangle in CSS pixels of the document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// What a screenshot captures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Region<'a> {
    Viewport,
    FullPage,
    Clip(Rect),
    /// The element's box (an element crop).
    Element(&'a str),
}

/// `pdf` print options; unset ones are Chromium's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PdfOptions<'a> {
    pub landscape: Option<bool>,
    pub print_background: Option<bool>,
    pub scale: Option<f64>,
    pub paper_width: Option<f64>,
    pub paper_height: Option<f64>,
    pub page_ranges: Option<&'a str>,
    /// All four margins, in inches.
    pub margin: Option<f64>,
}

/// Which tab `switch_tab` goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TabRef<'a> {
    Index(u64),
    /// The first tab whose title or URL contains this.
    Matching(&'a str),
}

/// The `cookies` operation; a `set` list is judged cookie by cookie against the page's origin
/// and the policy by the handler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CookieOp<'a> {
    Get,
    Clear,
    Set(&'a [Value]),
}

/// What identifies an action's target in the audit trail: never text, values or scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// An address as the client wrote it; whoever records it strips userinfo, query and fragment.
    Url(&'a str),
    /// The element selector.
    Selector(&'a str),
    /// The action names no page or element (the tab list, the session's cookies...).
    None,
}

impl<'a> Action<'a> {
    /// Resolves `name` (canonical or alias) and parses its arguments.
    pub fn parse_named(
        name: &str,
        selector: &'a str,
        payload: &'a Value,
    ) -> Result<(Action<'a>, Canonical), ActionFailure> {
        let canonical = canonicalize(name).map_err(UnknownAction::into_failure)?;
        Ok((Action::parse(canonical.kind, selector, payload)?, canonical))
    }

    /// Only what identifies the target, for the audit trail.
    pub fn audit_target(&self) -> Target<'a> {
        match *self {
            Action::Navigate { url, .. } | Action::NewTab { url: Some(url) } => Target::Url(url),
            Action::Click { selector, .. }
            | Action::Type { selector, .. }
            | Action::Fill { selector, .. }
            | Action::Press { selector: Some(selector), .. }
            | Action::Hover { selector }
            | Action::Focus { selector }
            | Action::Select { selector, .. }
            | Action::Scroll { to: ScrollTo::Element(selector) }
            | Action::WaitFor { until: Condition::Visible(selector) }
            | Action::Extract { selector: Some(selector), .. }
            | Action::Attr { selector, .. }
            | Action::Screenshot { region: Region::Element(selector), .. } => Target::Selector(selector),
            _ => Target::None,
        }
    }
}

/// A canonical action name, resolved from what the client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    pub kind: ActionKind,
    /// The canonical name, e.g. `navigate`.
    pub name: &'static str,
    /// The alias the client used, empty when it used the canonical name.
    pub alias_of: String,
}

impl Canonical {
    /// `kind` under its canonical name.
    pub fn of(kind: ActionKind) -> Canonical {
        Canonical { kind, name: kind.name(), alias_of: String::new() }
    }

    /// The access this action needs; `cookies` depends on its `op`.
    pub fn access(&self, payload: &Value) -> Access {
        self.kind.access(payload)
    }
}

/// An action name that is neither canonical nor an alias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAction {
    /// What the client sent.
    pub name: String,
    /// Canonical names and aliases within edit distance 2 (only for inputs of 4+ characters),
    /// closest first, ties alphabetical.
    pub did_you_mean: Vec<String>,
}

impl UnknownAction {
    /// `UNKNOWN_ACTION`, with the suggestions.
    pub fn into_failure(self) -> ActionFailure {
        ActionFailure {
            code: FailureCode::UnknownAction,
            message: format!("unknown action {:?}", self.name),
            did_you_mean: self.did_you_mean,
            dialog: None,
        }
    }
}

/// Resolves a client's action name to its canonical form.
pub fn canonicalize(name: &str) -> Result<Canonical, UnknownAction> {
    if let Some(kind) = ActionKind::ALL.iter().copied().find(|k| k.name() == name) {
        return Ok(Canonical::of(kind));
    }
    if let Some(kind) = ActionKind::ALL.iter().copied().find(|k| k.aliases().contains(&name)) {
        return Ok(Canonical { kind, name: kind.name(), alias_of: name.to_string() });
    }
    Err(UnknownAction { name: name.to_string(), did_you_mean: suggestions(name) })
}

fn suggestions(name: &str) -> Vec<String> {
    if name.chars().count() < 4 {
        return Vec::new();
    }
    let mut scored: Vec<(usize, &str)> = ActionKind::ALL
        .iter()
        .flat_map(|k| std::iter::once(k.name()).chain(k.aliases().iter().copied()))
        .map(|candidate| (levenshtein(name, candidate), candidate))
        .filter(|(d, _)| *d <= 2)
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().map(|(_, c)| c.to_string()).collect()
}

/// Edit distance (insertions, deletions, substitutions) over Unicode scalar values.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Parses and validates `{width, height, scale, mobile}`.
pub fn parse_viewport(payload: &Value) -> Result<Viewport, ActionFailure> {
    let map = payload
        .as_object()
        .ok_or_else(|| ActionFailure::invalid("payload: {width, height, scale, mobile} is required"))?;
    let side = |k: &str| -> Result<u32, ActionFailure> {
        let v = map.get(k).ok_or_else(|| ActionFailure::invalid(format!("payload.{k}: required")))?;
        match v.as_u64() {
            Some(n @ 1..) if n <= MAX_SIDE as u64 => Ok(n as u32),
            _ => Err(ActionFailure::invalid(format!("payload.{k}: {v} is not 1..{MAX_SIDE}"))),
        }
    };
    let (width, height) = (side("width")?, side("height")?);
    let scale = match map.get("scale") {
        None | Some(Value::Null) => 1.0,
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        // JSON has no NaN or infinity; accept their spellings so the error can name them.
        Some(Value::String(s)) => s.parse::<f64>().unwrap_or(f64::NAN),
        Some(other) => return Err(ActionFailure::invalid(format!("payload.scale: {other} is not a number"))),
    };
    if !scale.is_finite() || !(1.0..=3.0).contains(&scale) {
        let shown = map.get("scale").map(|v| v.to_string()).unwrap_or_default();
        return Err(ActionFailure::invalid(format!("payload.scale: {shown} is not within 1..3")));
    }
    let mobile = match map.get("mobile") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(ActionFailure::invalid(format!("payload.mobile: {other} is not a boolean"))),
    };
    Ok(Viewport { width, height, scale, mobile })
}

/// One parser per action with arguments: `(selector, payload)` to the typed action, with the
/// messages clients already get.
mod parse {
    use serde_json::{Map, Value};

    use super::*;

    type Parsed<'a> = Result<Action<'a>, ActionFailure>;

    fn require_selector(kind: ActionKind, selector: &str) -> Result<&str, ActionFailure> {
        if selector.trim().is_empty() {
            return Err(ActionFailure::invalid(format!("selector: {} needs a css selector", kind.name())));
        }
        Ok(selector)
    }

    fn require_text(payload: &Value) -> Result<&str, ActionFailure> {
        payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: a string is required"))
    }

    fn optional(selector: &str) -> Option<&str> {
        (!selector.is_empty()).then_some(selector)
    }

    pub(super) fn navigate<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        let (url, wait_until) = match payload {
            Value::String(url) => (url.as_str(), "load"),
            Value::Object(map) => {
                let url = map
                    .get("url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ActionFailure::invalid("payload.url: a url string is required"))?;
                let wait = match map.get("wait_until") {
                    None | Some(Value::Null) => "load",
                    Some(Value::String(s)) => s.as_str(),
                    Some(_) => return Err(ActionFailure::invalid("payload.wait_until: a string is required")),
                };
                (url, wait)
            }
            _ => return Err(ActionFailure::invalid("payload: a url string or {url, wait_until} is required")),
        };
        if url::Url::parse(url).is_err() && url != "about:blank" {
            return Err(ActionFailure::invalid(format!("payload.url: {url:?} is not a url")));
        }
        let wait_until = match wait_until {
            "load" => WaitUntil::Load,
            "domcontentloaded" => WaitUntil::DomContentLoaded,
            "networkidle" => WaitUntil::NetworkIdle,
            "none" => WaitUntil::NoWait,
            other => {
                return Err(ActionFailure::invalid(format!(
                    "payload.wait_until: `{other}` is not one of load, domcontentloaded, networkidle, none"
                )))
            }
        };
        Ok(Action::Navigate { url, wait_until })
    }

    pub(super) fn click<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        let selector = require_selector(ActionKind::Click, selector)?;
        let map = match payload {
            Value::Null => return Ok(Action::Click { selector, button: Button::Left, click_count: 1 }),
            Value::Object(map) => map,
            _ => return Err(ActionFailure::invalid("payload: expected {button, click_count} or nothing")),
        };
        let button = match map.get("button").map(|b| b.as_str()) {
            None | Some(Some("left")) => Button::Left,
            Some(Some("right")) => Button::Right,
            Some(Some("middle")) => Button::Middle,
            Some(other) => {
                return Err(ActionFailure::invalid(format!("payload.button: {other:?} is not left, right or middle")))
            }
        };
        let click_count = match map.get("click_count") {
            None => 1,
            Some(v) => match v.as_i64() {
                Some(n @ 1..=3) => n,
                _ => return Err(ActionFailure::invalid("payload.click_count: must be 1, 2 or 3")),
            },
        };
        Ok(Action::Click { selector, button, click_count })
    }

    pub(super) fn type_text<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        let selector = require_selector(ActionKind::Type, selector)?;
        Ok(Action::Type { selector, text: require_text(payload)? })
    }

    pub(super) fn fill<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        let selector = require_selector(ActionKind::Fill, selector)?;
        Ok(Action::Fill { selector, text: require_text(payload)? })
    }

    pub(super) fn press<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        Ok(Action::Press { chord: require_text(payload)?, selector: optional(selector) })
    }

    pub(super) fn hover<'a>(selector: &'a str, _: &'a Value) -> Parsed<'a> {
        Ok(Action::Hover { selector: require_selector(ActionKind::Hover, selector)? })
    }

    pub(super) fn focus<'a>(selector: &'a str, _: &'a Value) -> Parsed<'a> {
        Ok(Action::Focus { selector: require_selector(ActionKind::Focus, selector)? })
    }

    pub(super) fn select<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        let selector = require_selector(ActionKind::Select, selector)?;
        let values = match payload {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a
                .iter()
                .map(Value::as_str)
                .collect::<Option<_>>()
                .ok_or_else(|| ActionFailure::invalid("payload: a value or a list of value strings"))?,
            _ => return Err(ActionFailure::invalid("payload: a value or a list of value strings")),
        };
        Ok(Action::Select { selector, values })
    }

    /// A selector scrolls its element into view and the payload is not read.
    pub(super) fn scroll<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        if !selector.is_empty() {
            return Ok(Action::Scroll { to: ScrollTo::Element(selector) });
        }
        let (x, y) = match payload {
            Value::Null => (0.0, 0.0),
            Value::Object(m) => {
                let get = |k: &str| match m.get(k) {
                    None | Some(Value::Null) => Ok(0.0),
                    Some(v) => v
                        .as_f64()
                        .filter(|f| f.is_finite())
                        .ok_or_else(|| ActionFailure::invalid(format!("payload.{k}: a number"))),
                };
                (get("x")?, get("y")?)
            }
            _ => return Err(ActionFailure::invalid("payload: optional {x, y}")),
        };
        Ok(Action::Scroll { to: ScrollTo::Point { x, y } })
    }

    /// A selector waits for its element to be visible and the payload is not read.
    pub(super) fn wait_for<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        if !selector.is_empty() {
            return Ok(Action::WaitFor { until: Condition::Visible(selector) });
        }
        let until = match payload {
            Value::Object(map) if map.contains_key("ms") => Condition::Ms(
                map["ms"]
                    .as_u64()
                    .ok_or_else(|| ActionFailure::invalid("payload.ms: a number of milliseconds is required"))?,
            ),
            Value::Object(map) if map.contains_key("text") => Condition::Text(
                map["text"].as_str().ok_or_else(|| ActionFailure::invalid("payload.text: a string is required"))?,
            ),
            Value::Object(map) if map.contains_key("url") => Condition::Url(
                map["url"].as_str().ok_or_else(|| ActionFailure::invalid("payload.url: a string is required"))?,
            ),
            _ => return Err(ActionFailure::invalid("wait_for needs a selector, or a payload {ms}, {text} or {url}")),
        };
        Ok(Action::WaitFor { until })
    }

    pub(super) fn extract<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        let format = match payload {
            Value::Null => "text",
            Value::String(s) if s.is_empty() => "text",
            Value::String(s) => s.as_str(),
            Value::Object(map) => map.get("format").and_then(Value::as_str).unwrap_or("text"),
            _ => {
                return Err(ActionFailure::invalid(
                    "payload: a format string (text, html, value, attr:<name>) is expected",
                ))
            }
        };
        let format = match format {
            "text" => ExtractFormat::Text,
            "html" => ExtractFormat::Html,
            "value" => ExtractFormat::Value,
            f if f.starts_with("attr:") && f.len() > 5 => ExtractFormat::Attr(&f[5..]),
            other => {
                return Err(ActionFailure::invalid(format!(
                    "payload: format `{other}` is not one of text, html, value, attr:<name>"
                )))
            }
        };
        Ok(Action::Extract { selector: optional(selector), format })
    }

    pub(super) fn attr<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        let selector = require_selector(ActionKind::Attr, selector)?;
        let name = match payload {
            Value::String(s) if !s.is_empty() => s.as_str(),
            Value::Object(m) if m.get("name").is_some_and(Value::is_string) => m["name"].as_str().unwrap_or_default(),
            _ => return Err(ActionFailure::invalid("payload: an attribute name string is required")),
        };
        Ok(Action::Attr { selector, name })
    }

    pub(super) fn evaluate<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        match payload {
            Value::String(s) if !s.trim().is_empty() => Ok(Action::Evaluate { expression: s }),
            _ => Err(ActionFailure::invalid("payload: a JavaScript expression string is required")),
        }
    }

    /// Everything but the size in device pixels, which needs the current viewport's scale.
    pub(super) fn screenshot<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
        let format_only;
        let empty = Map::new();
        let opts = match payload {
            Value::Null => &empty,
            Value::Object(m) => m,
            Value::String(_) => {
                format_only = Map::from_iter([("format".to_string(), payload.clone())]);
                &format_only
            }
            _ => return Err(ActionFailure::invalid("payload: screenshot options {full_page, clip, format, quality}")),
        };
        for key in opts.keys() {
            if !["full_page", "clip", "format", "quality"].contains(&key.as_str()) {
                return Err(ActionFailure::invalid(format!("payload.{key}: unknown screenshot option")));
            }
        }
        let format = match opts.get("format").and_then(Value::as_str).unwrap_or("png") {
            "png" => ImageFormat::Png,
            "jpeg" | "jpg" => ImageFormat::Jpeg,
            other => return Err(ActionFailure::invalid(format!("payload.format: `{other}` is not png or jpeg"))),
        };
        let quality = match opts.get("quality") {
            None | Some(Value::Null) => None,
            Some(q) => match q.as_i64() {
                Some(q @ 0..=100) if format == ImageFormat::Jpeg => Some(q),
                Some(0..=100) => return Err(ActionFailure::invalid("payload.quality: only applies to jpeg")),
                _ => return Err(ActionFailure::invalid(format!("payload.quality: {q} is not 0..100"))),
            },
        };
        let full_page = opts.get("full_page").and_then(Value::as_bool).unwrap_or(false);
        let clip = opts.get("clip").filter(|c| !c.is_null());
        if clip.is_some() && !selector.is_empty() {
            return Err(ActionFailure::invalid(
                "payload.clip: conflicts with a selector (element crop); give one or the other",
            ));
        }
        if clip.is_some() && full_page {
            return Err(ActionFailure::invalid("payload.clip: conflicts with full_page"));
        }
        let region = if let Some(c) = clip {
            let num = |k: &str| {
                c.get(k).and_then(Value::as_f64).filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| {
                    ActionFailure::invalid(format!("payload.clip.{k}: a non-negative number is required"))
                })
            };
            let (x, y, width, height) = (num("x")?, num("y")?, num("width")?, num("height")?);
            if width < 1.0 || height < 1.0 {
                return Err(ActionFailure::invalid("payload.clip: width and height must be at least 1"));
            }
            Region::Clip(Rect { x, y, width, height })
        } else if !selector.is_empty() {
            Region::Element(selector)
        } else if full_page {
            Region::FullPage
        } else {
            Region::Viewport
        };
        Ok(Action::Screenshot { format, quality, region })
    }

    pub(super) fn pdf<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        let opts = match payload {
            Value::Null => None,
            Value::Object(m) => Some(m),
            _ => return Err(ActionFailure::invalid("payload: optional print options object")),
        };
        let mut options = PdfOptions::default();
        for (k, v) in opts.into_iter().flatten() {
            let bad = || ActionFailure::invalid(format!("payload.{k}: {v} is not valid"));
            match k.as_str() {
                "landscape" => options.landscape = Some(v.as_bool().ok_or_else(bad)?),
                "print_background" => options.print_background = Some(v.as_bool().ok_or_else(bad)?),
                "scale" => options.scale = Some(v.as_f64().filter(|s| (0.1..=2.0).contains(s)).ok_or_else(bad)?),
                "paper_width" => {
                    options.paper_width = Some(v.as_f64().filter(|s| *s > 0.0 && *s < 200.0).ok_or_else(bad)?)
                }
                "paper_height" => {
                    options.paper_height = Some(v.as_f64().filter(|s| *s > 0.0 && *s < 200.0).ok_or_else(bad)?)
                }
                "page_ranges" => options.page_ranges = Some(v.as_str().ok_or_else(bad)?),
                "margin" => options.margin = Some(v.as_f64().filter(|s| *s >= 0.0 && *s < 20.0).ok_or_else(bad)?),
                _ => return Err(ActionFailure::invalid(format!("payload.{k}: unknown print option"))),
            }
        }
        Ok(Action::Pdf { options })
    }

    pub(super) fn set_viewport<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        Ok(Action::SetViewport { viewport: parse_viewport(payload)? })
    }

    pub(super) fn load_html<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        let html = payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: an html string is required"))?;
        Ok(Action::LoadHtml { html })
    }

    pub(super) fn new_tab<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        let url = match payload {
            Value::Null => None,
            Value::String(s) if s.is_empty() => None,
            Value::String(s) => Some(s.as_str()),
            Value::Object(m) if m.get("url").is_some_and(Value::is_string) => m["url"].as_str(),
            _ => return Err(ActionFailure::invalid("payload: an optional url string")),
        };
        Ok(Action::NewTab { url })
    }

    pub(super) fn switch_tab<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        let tab = match payload {
            Value::Number(n) => TabRef::Index(n.as_u64().ok_or_else(|| {
                ActionFailure::invalid(format!("payload: tab index {n} is not a non-negative integer"))
            })?),
            Value::String(needle) if !needle.is_empty() => TabRef::Matching(needle),
            _ => return Err(ActionFailure::invalid("payload: a tab index (number) or a title/url substring (string)")),
        };
        Ok(Action::SwitchTab { tab })
    }

    pub(super) fn close_tab<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        let index = match payload {
            Value::Null => None,
            Value::Number(n) => {
                Some(n.as_u64().map(|i| i as usize).ok_or_else(|| ActionFailure::invalid("payload: a tab index"))?)
            }
            _ => return Err(ActionFailure::invalid("payload: an optional tab index (number)")),
        };
        Ok(Action::CloseTab { index })
    }

    pub(super) fn cookies<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
        let op = match payload {
            Value::Null => "get",
            Value::String(op) => op.as_str(),
            Value::Object(m) => m.get("op").and_then(Value::as_str).unwrap_or("get"),
            _ => return Err(ActionFailure::invalid("payload: {op: get|set|clear, cookies: [...]}")),
        };
        let op = match op {
            "get" => CookieOp::Get,
            "clear" => CookieOp::Clear,
            "set" => {
                let list = payload
                    .get("cookies")
                    .and_then(Value::as_array)
                    .ok_or_else(|| ActionFailure::invalid("payload.cookies: a list is required"))?;
                if list.len() > crate::context::MAX_COOKIES {
                    return Err(ActionFailure::new(
                        FailureCode::PayloadTooLarge,
                        format!(
                            "payload.cookies: {} cookies exceed the limit of {}",
                            list.len(),
                            crate::context::MAX_COOKIES
                        ),
                    ));
                }
                CookieOp::Set(list)
            }
            other => return Err(ActionFailure::invalid(format!("payload.op: `{other}` is not get, set or clear"))),
        };
        Ok(Action::Cookies { op })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_names_resolve_to_themselves() {
        let c = canonicalize("navigate").unwrap();
        assert_eq!(c.name, "navigate");
        assert_eq!(c.alias_of, "");
        for kind in ActionKind::ALL {
            assert_eq!(canonicalize(kind.name()).unwrap(), Canonical::of(*kind));
        }
    }

    #[test]
    fn every_alias_of_the_contract_resolves() {
        for (alias, canonical) in [
            ("goto", "navigate"),
            ("open", "navigate"),
            ("visit", "navigate"),
            ("setcontent", "load_html"),
            ("set-content", "load_html"),
            ("setContent", "load_html"),
            ("set_content", "load_html"),
            ("eval", "evaluate"),
            ("js", "evaluate"),
            ("wait", "wait_for"),
            ("text", "extract"),
            ("viewport", "set_viewport"),
        ] {
            let c = canonicalize(alias).unwrap();
            assert_eq!((c.name, c.alias_of.as_str()), (canonical, alias));
        }
    }

    #[test]
    fn names_and_aliases_are_unique() {
        let mut all: Vec<&str> =
            ActionKind::ALL.iter().flat_map(|k| std::iter::once(k.name()).chain(k.aliases().iter().copied())).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "a name or alias is listed twice");
    }

    #[test]
    fn alias_never_widens_access() {
        // `text` is read-only like `extract`; `js` needs write like `evaluate`.
        assert_eq!(canonicalize("text").unwrap().access(&Value::Null), Access::Read);
        assert_eq!(canonicalize("js").unwrap().access(&Value::Null), Access::Write);
        assert_eq!(canonicalize("wait").unwrap().access(&Value::Null), Access::Read);
    }

    #[test]
    fn cookies_access_depends_on_op() {
        let c = canonicalize("cookies").unwrap();
        assert_eq!(c.access(&json!({"op": "get"})), Access::ContextExport);
        assert_eq!(c.access(&json!({"op": "set"})), Access::ContextImport);
        assert_eq!(c.access(&json!({"op": "clear"})), Access::ContextImport);
        // The string form is judged the same way: `"clear"` changes the jar.
        assert_eq!(c.access(&json!("clear")), Access::ContextImport);
        assert_eq!(c.access(&json!("set")), Access::ContextImport);
        assert_eq!(c.access(&json!("get")), Access::ContextExport);
        assert_eq!(c.access(&json!(null)), Access::ContextExport);
        assert_eq!(c.access(&json!({})), Access::ContextExport);
        // Anything else needs the stronger scope (it is refused as malformed anyway).
        assert_eq!(c.access(&json!(7)), Access::ContextImport);
        assert_eq!(c.access(&json!({"op": 7})), Access::ContextImport);
    }

    #[test]
    fn unknown_action_suggests_close_names_sorted() {
        // closest first: "click" is 1 away, "back" 2 away.
        let e = canonicalize("clck").unwrap_err();
        assert_eq!(e.did_you_mean, vec!["click", "back"]);
        let e = canonicalize("naviagte").unwrap_err();
        assert_eq!(e.did_you_mean, vec!["navigate"]);
        // ties at one distance are alphabetical: "type" and "title"... "tipe" is 1 from "type"
        // and 2 from "title", "text", "wait", "pdf"? only names within 2 are listed.
        let e = canonicalize("tipe").unwrap_err();
        assert_eq!(e.did_you_mean[0], "type");
        let rest = e.did_you_mean[1..].to_vec();
        let mut sorted = rest.clone();
        sorted.sort();
        assert_eq!(rest, sorted, "equal distances must be alphabetical");
        assert!(rest.iter().all(|n| levenshtein("tipe", n) == 2), "{rest:?}");
    }

    #[test]
    fn short_inputs_get_no_suggestions() {
        assert!(canonicalize("clk").unwrap_err().did_you_mean.is_empty());
        assert!(canonicalize("").unwrap_err().did_you_mean.is_empty());
    }

    #[test]
    fn levenshtein_basics() {
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
        assert_eq!(levenshtein("é", "e"), 1);
    }

    fn parse(name: &str, selector: &str, payload: Value) -> Result<Action<'static>, ActionFailure> {
        // Leaked: the tests' inputs live as long as the test binary.
        let selector: &'static str = Box::leak(selector.to_string().into_boxed_str());
        let payload: &'static Value = Box::leak(Box::new(payload));
        Action::parse_named(name, selector, payload).map(|(action, _)| action)
    }

    /// Every action parses its documented forms, names and aliases alike, to its own kind.
    #[test]
    fn each_action_parses_its_documented_forms() {
        use Action as A;
        let cookies = json!([{"name": "a", "value": "1"}]);
        let cookie_list: &'static [Value] = Box::leak(cookies.as_array().unwrap().clone().into_boxed_slice());
        let page = |url| A::Navigate { url, wait_until: WaitUntil::Load };
        let shot = |format, quality, region| A::Screenshot { format, quality, region };
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, Value, Action<'static>)> = vec![
            ("navigate", "", json!("https://a.test/"), page("https://a.test/")),
            ("goto", "", json!({"url": "about:blank", "wait_until": "none"}), A::Navigate { url: "about:blank", wait_until: WaitUntil::NoWait }),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": null}), page("https://a.test/")),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": "networkidle"}), A::Navigate { url: "https://a.test/", wait_until: WaitUntil::NetworkIdle }),
            ("visit", "", json!({"url": "https://a.test/", "wait_until": "domcontentloaded"}), A::Navigate { url: "https://a.test/", wait_until: WaitUntil::DomContentLoaded }),
            ("back", "ignored", json!(42), A::Back),
            ("forward", "", Value::Null, A::Forward),
            ("reload", "", Value::Null, A::Reload),
            ("click", "#b", Value::Null, A::Click { selector: "#b", button: Button::Left, click_count: 1 }),
            ("click", "#b", json!({"button": "right", "click_count": 2}), A::Click { selector: "#b", button: Button::Right, click_count: 2 }),
            ("click", "dialog::accept", json!({"button": "middle"}), A::Click { selector: "dialog::accept", button: Button::Middle, click_count: 1 }),
            ("type", "#q", json!("hi"), A::Type { selector: "#q", text: "hi" }),
            ("fill", "#q", json!(""), A::Fill { selector: "#q", text: "" }),
            ("press", "", json!("Control+A"), A::Press { selector: None, chord: "Control+A" }),
            ("press", "#q", json!("Enter"), A::Press { selector: Some("#q"), chord: "Enter" }),
            ("hover", "#m", Value::Null, A::Hover { selector: "#m" }),
            ("focus", "#m", json!("ignored"), A::Focus { selector: "#m" }),
            ("select", "#s", json!("b"), A::Select { selector: "#s", values: vec!["b"] }),
            ("select", "#s", json!(["a", "c"]), A::Select { selector: "#s", values: vec!["a", "c"] }),
            ("scroll", "#far", json!("ignored"), A::Scroll { to: ScrollTo::Element("#far") }),
            ("scroll", "", Value::Null, A::Scroll { to: ScrollTo::Point { x: 0.0, y: 0.0 } }),
            ("scroll", "", json!({"y": 500}), A::Scroll { to: ScrollTo::Point { x: 0.0, y: 500.0 } }),
            ("wait_for", "#late", json!({"ms": "ignored"}), A::WaitFor { until: Condition::Visible("#late") }),
            ("wait", "", json!({"ms": 10}), A::WaitFor { until: Condition::Ms(10) }),
            ("wait_for", "", json!({"text": "done"}), A::WaitFor { until: Condition::Text("done") }),
            ("wait_for", "", json!({"url": "/next"}), A::WaitFor { until: Condition::Url("/next") }),
            ("extract", "", Value::Null, A::Extract { selector: None, format: ExtractFormat::Text }),
            ("text", "h1", json!(""), A::Extract { selector: Some("h1"), format: ExtractFormat::Text }),
            ("extract", "h1", json!("html"), A::Extract { selector: Some("h1"), format: ExtractFormat::Html }),
            ("extract", "#i", json!({"format": "value"}), A::Extract { selector: Some("#i"), format: ExtractFormat::Value }),
            ("extract", "a", json!("attr:href"), A::Extract { selector: Some("a"), format: ExtractFormat::Attr("href") }),
            ("extract", "a", json!({"format": 5}), A::Extract { selector: Some("a"), format: ExtractFormat::Text }),
            ("attr", "a", json!("href"), A::Attr { selector: "a", name: "href" }),
            ("attr", "a", json!({"name": "id"}), A::Attr { selector: "a", name: "id" }),
            ("evaluate", "", json!("1 + 1"), A::Evaluate { expression: "1 + 1" }),
            ("js", "", json!("document.title"), A::Evaluate { expression: "document.title" }),
            ("screenshot", "", Value::Null, shot(ImageFormat::Png, None, Region::Viewport)),
            ("screenshot", "", json!("jpg"), shot(ImageFormat::Jpeg, None, Region::Viewport)),
            ("screenshot", "", json!({"format": "jpeg", "quality": 50, "full_page": true}), shot(ImageFormat::Jpeg, Some(50), Region::FullPage)),
            ("screenshot", "#box", json!({"full_page": true}), shot(ImageFormat::Png, None, Region::Element("#box"))),
            ("screenshot", "", json!({"clip": {"x": 1, "y": 2, "width": 3, "height": 4}}), shot(ImageFormat::Png, None, Region::Clip(Rect { x: 1.0, y: 2.0, width: 3.0, height: 4.0 }))),
            ("pdf", "", Value::Null, A::Pdf { options: PdfOptions::default() }),
            ("pdf", "", json!({"landscape": true, "margin": 1, "page_ranges": "1-2"}), A::Pdf { options: PdfOptions { landscape: Some(true), margin: Some(1.0), page_ranges: Some("1-2"), ..PdfOptions::default() } }),
            ("viewport", "", json!({"width": 800, "height": 600, "scale": 2}), A::SetViewport { viewport: Viewport { width: 800, height: 600, scale: 2.0, mobile: false } }),
            ("setContent", "", json!("<p>hi</p>"), A::LoadHtml { html: "<p>hi</p>" }),
            ("load_html", "", json!("not html"), A::LoadHtml { html: "not html" }),
            ("new_tab", "", Value::Null, A::NewTab { url: None }),
            ("new_tab", "", json!(""), A::NewTab { url: None }),
            ("new_tab", "", json!("https://a.test/"), A::NewTab { url: Some("https://a.test/") }),
            ("new_tab", "", json!({"url": "https://a.test/"}), A::NewTab { url: Some("https://a.test/") }),
            ("switch_tab", "", json!(1), A::SwitchTab { tab: TabRef::Index(1) }),
            ("switch_tab", "", json!("Docs"), A::SwitchTab { tab: TabRef::Matching("Docs") }),
            ("close_tab", "", Value::Null, A::CloseTab { index: None }),
            ("close_tab", "", json!(2), A::CloseTab { index: Some(2) }),
            ("list_tabs", "", Value::Null, A::ListTabs),
            ("url", "", Value::Null, A::Url),
            ("title", "", Value::Null, A::Title),
            ("cookies", "", Value::Null, A::Cookies { op: CookieOp::Get }),
            ("cookies", "", json!("clear"), A::Cookies { op: CookieOp::Clear }),
            ("cookies", "", json!({"op": "get"}), A::Cookies { op: CookieOp::Get }),
            ("cookies", "", json!({"op": "set", "cookies": cookies}), A::Cookies { op: CookieOp::Set(cookie_list) }),
        ];
        let mut seen = std::collections::HashSet::new();
        for (name, selector, payload, want) in cases {
            let got = parse(name, selector, payload.clone());
            assert_eq!(got.as_ref().ok(), Some(&want), "{name} {selector:?} {payload}: {got:?}");
            assert_eq!(canonicalize(name).unwrap().kind, want.kind(), "{name}");
            seen.insert(want.kind());
        }
        let missing: Vec<_> = ActionKind::ALL.iter().filter(|k| !seen.contains(*k)).collect();
        assert!(missing.is_empty(), "actions without a parse case: {missing:?}");
    }

    /// Bad payloads give the codes and messages the handlers gave before the table.
    #[test]
    fn bad_payloads_keep_their_codes_and_messages() {
        use FailureCode::{InvalidArgument, PayloadTooLarge, UnknownAction};
        let max = crate::context::MAX_COOKIES;
        let too_many = json!({"op": "set", "cookies": vec![json!({}); max + 1]});
        let too_many_message = &*format!("payload.cookies: {} cookies exceed the limit of {max}", max + 1).leak();
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, Value, FailureCode, &str)> = vec![
            ("naviagte", "", json!("https://a.test/"), UnknownAction, "unknown action \"naviagte\""),
            ("navigate", "", Value::Null, InvalidArgument, "payload: a url string or {url, wait_until} is required"),
            ("navigate", "", json!({"url": 5}), InvalidArgument, "payload.url: a url string is required"),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": 1}), InvalidArgument, "payload.wait_until: a string is required"),
            ("navigate", "", json!("not a url"), InvalidArgument, "payload.url: \"not a url\" is not a url"),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": "soon"}), InvalidArgument, "payload.wait_until: `soon` is not one of load, domcontentloaded, networkidle, none"),
            ("click", " ", Value::Null, InvalidArgument, "selector: click needs a css selector"),
            ("click", "#b", json!("left"), InvalidArgument, "payload: expected {button, click_count} or nothing"),
            ("click", "#b", json!({"button": "fourth"}), InvalidArgument, "payload.button: Some(\"fourth\") is not left, right or middle"),
            ("click", "#b", json!({"button": 1}), InvalidArgument, "payload.button: None is not left, right or middle"),
            ("click", "#b", json!({"click_count": 9}), InvalidArgument, "payload.click_count: must be 1, 2 or 3"),
            ("type", "", json!("x"), InvalidArgument, "selector: type needs a css selector"),
            ("type", "#q", json!(5), InvalidArgument, "payload: a string is required"),
            ("fill", "#q", Value::Null, InvalidArgument, "payload: a string is required"),
            ("press", "", Value::Null, InvalidArgument, "payload: a string is required"),
            ("hover", "", Value::Null, InvalidArgument, "selector: hover needs a css selector"),
            ("focus", "", Value::Null, InvalidArgument, "selector: focus needs a css selector"),
            ("select", "", json!("a"), InvalidArgument, "selector: select needs a css selector"),
            ("select", "#s", json!(["a", 1]), InvalidArgument, "payload: a value or a list of value strings"),
            ("select", "#s", Value::Null, InvalidArgument, "payload: a value or a list of value strings"),
            ("scroll", "", json!({"x": "far"}), InvalidArgument, "payload.x: a number"),
            ("scroll", "", json!(3), InvalidArgument, "payload: optional {x, y}"),
            ("wait_for", "", json!({"ms": -1}), InvalidArgument, "payload.ms: a number of milliseconds is required"),
            ("wait_for", "", json!({"text": 1}), InvalidArgument, "payload.text: a string is required"),
            ("wait_for", "", json!({"url": null}), InvalidArgument, "payload.url: a string is required"),
            ("wait", "", Value::Null, InvalidArgument, "wait_for needs a selector, or a payload {ms}, {text} or {url}"),
            ("extract", "", json!(1), InvalidArgument, "payload: a format string (text, html, value, attr:<name>) is expected"),
            ("extract", "", json!("attr:"), InvalidArgument, "payload: format `attr:` is not one of text, html, value, attr:<name>"),
            ("attr", "", json!("href"), InvalidArgument, "selector: attr needs a css selector"),
            ("attr", "a", json!(""), InvalidArgument, "payload: an attribute name string is required"),
            ("evaluate", "", json!("  "), InvalidArgument, "payload: a JavaScript expression string is required"),
            ("screenshot", "", json!(1), InvalidArgument, "payload: screenshot options {full_page, clip, format, quality}"),
            ("screenshot", "", json!({"size": 1}), InvalidArgument, "payload.size: unknown screenshot option"),
            ("screenshot", "", json!("webp"), InvalidArgument, "payload.format: `webp` is not png or jpeg"),
            ("screenshot", "", json!({"quality": 50}), InvalidArgument, "payload.quality: only applies to jpeg"),
            ("screenshot", "", json!({"format": "jpeg", "quality": 101}), InvalidArgument, "payload.quality: 101 is not 0..100"),
            ("screenshot", "#box", json!({"clip": {"x": 0, "y": 0, "width": 10, "height": 10}}), InvalidArgument, "payload.clip: conflicts with a selector (element crop); give one or the other"),
            ("screenshot", "", json!({"full_page": true, "clip": {}}), InvalidArgument, "payload.clip: conflicts with full_page"),
            ("screenshot", "", json!({"clip": {"x": 0, "y": -1}}), InvalidArgument, "payload.clip.y: a non-negative number is required"),
            ("screenshot", "", json!({"clip": {"x": 0, "y": 0, "width": 0.5, "height": 9}}), InvalidArgument, "payload.clip: width and height must be at least 1"),
            ("pdf", "", json!("A4"), InvalidArgument, "payload: optional print options object"),
            ("pdf", "", json!({"paper": "A4"}), InvalidArgument, "payload.paper: unknown print option"),
            ("pdf", "", json!({"scale": 3}), InvalidArgument, "payload.scale: 3 is not valid"),
            ("set_viewport", "", Value::Null, InvalidArgument, "payload: {width, height, scale, mobile} is required"),
            ("load_html", "", json!({"html": "<p>"}), InvalidArgument, "payload: an html string is required"),
            ("new_tab", "", json!({"url": 1}), InvalidArgument, "payload: an optional url string"),
            ("switch_tab", "", json!(-1), InvalidArgument, "payload: tab index -1 is not a non-negative integer"),
            ("switch_tab", "", json!(""), InvalidArgument, "payload: a tab index (number) or a title/url substring (string)"),
            ("close_tab", "", json!(1.5), InvalidArgument, "payload: a tab index"),
            ("close_tab", "", json!("1"), InvalidArgument, "payload: an optional tab index (number)"),
            ("cookies", "", json!(1), InvalidArgument, "payload: {op: get|set|clear, cookies: [...]}"),
            ("cookies", "", json!("set"), InvalidArgument, "payload.cookies: a list is required"),
            ("cookies", "", json!({"op": "eat"}), InvalidArgument, "payload.op: `eat` is not get, set or clear"),
            ("cookies", "", too_many, PayloadTooLarge, too_many_message),
        ];
        for (name, selector, payload, code, message) in cases {
            let err = parse(name, selector, payload.clone()).unwrap_err();
            assert_eq!((err.code, err.message.as_str()), (code, message), "{name} {selector:?} {payload}");
        }
    }

    #[test]
    fn audit_targets_name_the_page_or_element_only() {
        #[rustfmt::skip]
        let cases = [
            ("navigate", "", json!("https://a.test/?q=1"), Target::Url("https://a.test/?q=1")),
            ("navigate", "", json!({"url": "https://a.test/x"}), Target::Url("https://a.test/x")),
            ("new_tab", "", json!("https://a.test/y"), Target::Url("https://a.test/y")),
            ("new_tab", "", json!({"url": "https://a.test/z"}), Target::Url("https://a.test/z")),
            ("new_tab", "", Value::Null, Target::None),
            ("click", "#b", Value::Null, Target::Selector("#b")),
            ("type", "#q", json!("secret text"), Target::Selector("#q")),
            ("screenshot", "#box", Value::Null, Target::Selector("#box")),
            ("extract", "", Value::Null, Target::None),
            ("evaluate", "", json!("secret()"), Target::None),
            ("cookies", "", json!("get"), Target::None),
        ];
        for (name, selector, payload, want) in cases {
            let action = parse(name, selector, payload).unwrap();
            assert_eq!(action.audit_target(), want, "{name}");
        }
    }

    #[test]
    fn viewport_payloads() {
        let v = parse_viewport(&json!({"width": 800, "height": 600, "scale": 2})).unwrap();
        assert_eq!(v, Viewport { width: 800, height: 600, scale: 2.0, mobile: false });
        for (bad, named) in [
            (json!({"width": 800, "height": 600, "scale": 0.5}), "0.5"),
            (json!({"width": 800, "height": 600, "scale": 4}), "4"),
            (json!({"width": 800, "height": 600, "scale": "NaN"}), "NaN"),
            (json!({"width": 800, "height": 600, "scale": "inf"}), "inf"),
        ] {
            let err = parse_viewport(&bad).unwrap_err();
            assert_eq!(err.code, FailureCode::InvalidArgument);
            assert!(err.message.contains(named), "{} should name {named}", err.message);
        }
        assert!(parse_viewport(&json!({"width": 0, "height": 600})).is_err());
        assert!(parse_viewport(&json!({"width": 20000, "height": 600})).is_err());
        assert!(parse_viewport(&json!({"width": 10, "height": 10, "mobile": "yes"})).is_err());
    }
}
