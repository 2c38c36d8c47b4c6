//! The action catalog: one table lists every action once (canonical name, aliases, the
//! access it needs, the parser of its arguments), and yields [`ActionKind`], the typed
//! [`Action`], `canonicalize` with its `did_you_mean` suggestions, and each action's audit
//! target. Pure logic, no browser: `ops` runs what is parsed here.
//!
//! Invariant: a payload is judged here, before anything runs, with the messages and codes its
//! handler used to give; what needs the browser (the policy, the open tabs, the page's
//! origin, a size limit from the config) stays with the handler.

use serde_json::Value;

use crate::outcome::{ActionFailure, FailureCode, Viewport, MAX_SIDE};

/// The table. One line per action: variant with its typed arguments, canonical name,
/// aliases (exact spellings), access, audit target (`url(field)`, `selector(field)` or
/// `none`: what its audit record names), and the parser of `(selector, payload)`; an action
/// without arguments names no parser and refuses both. Its reference entry (what the docs
/// say, and the option keys its parser accepts) is [`ActionKind::reference`].
macro_rules! actions {
    (@access ($f:path) $p:ident) => { $f($p) };
    (@access $a:ident $p:ident) => { Access::$a };
    (@parse $v:ident [$f:path] $s:ident $p:ident) => { $f($s, $p) };
    (@parse $v:ident [] $s:ident $p:ident) => { parse::nothing(ActionKind::$v, $p).map(|()| Action::$v) };
    ($(
        $(#[$meta:meta])*
        $variant:ident $({ $($field:ident : $ty:ty),* $(,)? })?
            = $name:literal $([$($alias:literal),* $(,)?])?, $access:tt,
            $target:ident $(($target_field:ident))? $(, $parse:path)?;
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
                parse::common(kind, selector)?;
                match kind { $(ActionKind::$variant => actions!(@parse $variant [$($parse)?] selector payload),)* }
            }

            /// Only what identifies the target, for the audit trail (the table's target column).
            pub fn audit_target(&self) -> Target<'a> {
                match self { $(Action::$variant { $($target_field,)? .. } => targets::$target($($target_field)?),)* }
            }
        }
    };
}

actions! {
    /// Loads `url` in the active tab and waits for `wait_until`; with `fail_on_status`, an
    /// HTTP error status of the main document fails it.
    Navigate { url: &'a str, wait_until: WaitUntil, fail_on_status: bool } = "navigate" ["goto", "open", "visit"], Write, url(url), parse::navigate;
    Back = "back", Write, none;
    Forward = "forward", Write, none;
    Reload = "reload", Write, none;
    Click { selector: &'a str, button: Button, click_count: i64 } = "click", Write, selector(selector), parse::click;
    /// Types `text` key by key into the element.
    Type { selector: &'a str, text: &'a str } = "type", Write, selector(selector), parse::type_text;
    /// Replaces the element's value with `text`.
    Fill { selector: &'a str, text: &'a str } = "fill", Write, selector(selector), parse::fill;
    /// Presses a key chord, on the element when a selector is given.
    Press { selector: Option<&'a str>, chord: &'a str } = "press", Write, selector(selector), parse::press;
    Hover { selector: &'a str } = "hover", Write, selector(selector), parse::hover;
    Focus { selector: &'a str } = "focus", Write, selector(selector), parse::focus;
    Select { selector: &'a str, values: Vec<&'a str> } = "select", Write, selector(selector), parse::select;
    /// Sets files of the session (uploaded with `PutFile`, or downloaded) on a file input.
    SetInputFiles { selector: &'a str, names: Vec<&'a str> } = "set_input_files" ["setInputFiles", "set-input-files"],
        Write, selector(selector), parse::set_input_files;
    Scroll { to: ScrollTo<'a> } = "scroll", Write, selector(to), parse::scroll;
    WaitFor { until: Condition<'a> } = "wait_for" ["wait"], Read, selector(until), parse::wait_for;
    /// Reads the element (`body` when no selector is given).
    Extract { selector: Option<&'a str>, format: ExtractFormat<'a> } = "extract" ["text"], Read, selector(selector), parse::extract;
    Attr { selector: &'a str, name: &'a str } = "attr", Read, selector(selector), parse::attr;
    Evaluate { expression: &'a str } = "evaluate" ["eval", "js"], Write, none, parse::evaluate;
    Screenshot { format: ImageFormat, quality: Option<i64>, region: Region<'a> } = "screenshot", Read, selector(region), parse::screenshot;
    Pdf { options: PdfOptions<'a> } = "pdf", Read, none, parse::pdf;
    SetViewport { viewport: Viewport } = "set_viewport" ["viewport"], Write, none, parse::set_viewport;
    /// Replaces the document; its size limit is the driver's config, checked by the handler.
    LoadHtml { html: &'a str } = "load_html" ["setcontent", "set-content", "setContent", "set_content"], Write, none,
        parse::load_html;
    /// Opens a tab, on `about:blank` when no URL is given.
    NewTab { url: Option<&'a str> } = "new_tab", Write, url(url), parse::new_tab;
    SwitchTab { tab: TabRef<'a> } = "switch_tab", Read, none, parse::switch_tab;
    /// Closes a tab, the active one when no index is given.
    CloseTab { index: Option<usize> } = "close_tab", Write, none, parse::close_tab;
    ListTabs = "list_tabs", Read, none;
    Url = "url", Read, none;
    Title = "title", Read, none;
    Cookies { op: CookieOp<'a> } = "cookies", (cookies_access), none, parse::cookies;
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

/// The table's target column: `url(field)`, `selector(field)` or `none`. Every row must
/// name one, so a new action cannot compile without saying what its audit record names.
mod targets {
    use super::{Condition, Region, ScrollTo, Target};

    /// A field that may name a URL or an element.
    pub(super) trait Names<'a> {
        fn named(&self) -> Option<&'a str>;
    }

    impl<'a> Names<'a> for &'a str {
        fn named(&self) -> Option<&'a str> {
            Some(self)
        }
    }

    impl<'a> Names<'a> for Option<&'a str> {
        fn named(&self) -> Option<&'a str> {
            *self
        }
    }

    impl<'a> Names<'a> for ScrollTo<'a> {
        fn named(&self) -> Option<&'a str> {
            match *self {
                ScrollTo::Element(selector) => Some(selector),
                ScrollTo::Point { .. } => None,
            }
        }
    }

    impl<'a> Names<'a> for Condition<'a> {
        /// Only an element: a text or URL part waited for is content, not a target.
        fn named(&self) -> Option<&'a str> {
            match *self {
                Condition::Visible(selector) => Some(selector),
                Condition::Ms(_) | Condition::Text(_) | Condition::Url(_) => None,
            }
        }
    }

    impl<'a> Names<'a> for Region<'a> {
        fn named(&self) -> Option<&'a str> {
            match *self {
                Region::Element(selector) => Some(selector),
                Region::Viewport | Region::FullPage | Region::Clip(_) => None,
            }
        }
    }

    pub(super) fn url<'a>(field: &impl Names<'a>) -> Target<'a> {
        field.named().map_or(Target::None, Target::Url)
    }

    pub(super) fn selector<'a>(field: &impl Names<'a>) -> Target<'a> {
        field.named().map_or(Target::None, Target::Selector)
    }

    pub(super) fn none<'a>() -> Target<'a> {
        Target::None
    }
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
        .filter_map(|candidate| within_two(name, candidate).map(|d| (d, candidate)))
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().map(|(_, c)| c.to_string()).collect()
}

/// The edit distance of `a` and `b` when it is at most 2. Strings whose lengths differ by more
/// are answered without computing it, so a huge name or key from a client costs a length
/// count, not a table of its length times the candidate's.
pub fn within_two(a: &str, b: &str) -> Option<usize> {
    let b_len = b.chars().count();
    // Counting stops past b's length: a longer `a` is only counted that far.
    if a.chars().take(b_len + 3).count().abs_diff(b_len) > 2 {
        return None;
    }
    Some(levenshtein(a, b)).filter(|d| *d <= 2)
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
    let known: Vec<&str> = ActionKind::SetViewport.reference().options.iter().map(|o| o.name).collect();
    parse::check_keys("payload", "set_viewport has no option", map, &known)?;
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

mod parse;
mod reference;

pub use reference::{markdown as reference_markdown, OptionDoc, Reference, SelectorUse};

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
        let page = |url| A::Navigate { url, wait_until: WaitUntil::Load, fail_on_status: false };
        let shot = |format, quality, region| A::Screenshot { format, quality, region };
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, Value, Action<'static>)> = vec![
            ("navigate", "", json!("https://a.test/"), page("https://a.test/")),
            ("goto", "", json!({"url": "about:blank", "wait_until": "none"}), A::Navigate { url: "about:blank", wait_until: WaitUntil::NoWait, fail_on_status: false }),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": null}), page("https://a.test/")),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": "networkidle"}), A::Navigate { url: "https://a.test/", wait_until: WaitUntil::NetworkIdle, fail_on_status: false }),
            ("visit", "", json!({"url": "https://a.test/", "wait_until": "domcontentloaded"}), A::Navigate { url: "https://a.test/", wait_until: WaitUntil::DomContentLoaded, fail_on_status: false }),
            ("navigate", "", json!({"url": "https://a.test/", "fail_on_status": true}), A::Navigate { url: "https://a.test/", wait_until: WaitUntil::Load, fail_on_status: true }),
            ("back", "", json!(""), A::Back),
            ("back", "", json!({}), A::Back),
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
            ("focus", "#m", Value::Null, A::Focus { selector: "#m" }),
            ("select", "#s", json!("b"), A::Select { selector: "#s", values: vec!["b"] }),
            ("select", "#s", json!(["a", "c"]), A::Select { selector: "#s", values: vec!["a", "c"] }),
            ("set_input_files", "#f", json!("a.pdf"), A::SetInputFiles { selector: "#f", names: vec!["a.pdf"] }),
            ("set_input_files", "#f", json!(["a", "b c"]), A::SetInputFiles { selector: "#f", names: vec!["a", "b c"] }),
            ("set_input_files", "#f", json!([]), A::SetInputFiles { selector: "#f", names: vec![] }),
            ("scroll", "#far", Value::Null, A::Scroll { to: ScrollTo::Element("#far") }),
            ("scroll", "", Value::Null, A::Scroll { to: ScrollTo::Point { x: 0.0, y: 0.0 } }),
            ("scroll", "", json!({"y": 500}), A::Scroll { to: ScrollTo::Point { x: 0.0, y: 500.0 } }),
            ("wait_for", "#late", Value::Null, A::WaitFor { until: Condition::Visible("#late") }),
            ("wait", "", json!({"ms": 10}), A::WaitFor { until: Condition::Ms(10) }),
            ("wait_for", "", json!({"text": "done"}), A::WaitFor { until: Condition::Text("done") }),
            ("wait_for", "", json!({"url": "/next"}), A::WaitFor { until: Condition::Url("/next") }),
            ("extract", "", Value::Null, A::Extract { selector: None, format: ExtractFormat::Text }),
            ("text", "h1", json!(""), A::Extract { selector: Some("h1"), format: ExtractFormat::Text }),
            ("extract", "h1", json!("html"), A::Extract { selector: Some("h1"), format: ExtractFormat::Html }),
            ("extract", "#i", json!({"format": "value"}), A::Extract { selector: Some("#i"), format: ExtractFormat::Value }),
            ("extract", "a", json!("attr:href"), A::Extract { selector: Some("a"), format: ExtractFormat::Attr("href") }),
            ("attr", "a", json!("href"), A::Attr { selector: "a", name: "href" }),
            ("attr", "a", json!({"name": "id"}), A::Attr { selector: "a", name: "id" }),
            ("evaluate", "", json!("1 + 1"), A::Evaluate { expression: "1 + 1" }),
            ("js", "", json!("document.title"), A::Evaluate { expression: "document.title" }),
            ("screenshot", "", Value::Null, shot(ImageFormat::Png, None, Region::Viewport)),
            ("screenshot", "", json!("jpg"), shot(ImageFormat::Jpeg, None, Region::Viewport)),
            ("screenshot", "", json!({"format": "jpeg", "quality": 50, "full_page": true}), shot(ImageFormat::Jpeg, Some(50), Region::FullPage)),
            ("screenshot", "#box", json!({"format": "png"}), shot(ImageFormat::Png, None, Region::Element("#box"))),
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

    /// An option spelled another way, or misspelled, is refused with the option it meant.
    #[test]
    fn unknown_options_are_refused_with_the_option_they_meant() {
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, Value, &str, &[&str])> = vec![
            ("screenshot", "", json!({"fullPage": true}), "payload.fullPage: screenshot has no option `fullPage`; did you mean `full_page`?", &["full_page"]),
            ("navigate", "", json!({"url": "https://a.test/", "waitUntil": "load"}), "payload.waitUntil: navigate has no option `waitUntil`; did you mean `wait_until`?", &["wait_until"]),
            ("navigate", "", json!({"url": "https://a.test/", "wait_untill": "load"}), "payload.wait_untill: navigate has no option `wait_untill`; did you mean `wait_until`?", &["wait_until"]),
            ("click", "#b", json!({"clickCount": 2}), "payload.clickCount: click has no option `clickCount`; did you mean `click_count`?", &["click_count"]),
            ("click", "#b", json!({"click-count": 2}), "payload.click-count: click has no option `click-count`; did you mean `click_count`?", &["click_count"]),
            ("pdf", "", json!({"printBackground": true}), "payload.printBackground: pdf has no option `printBackground`; did you mean `print_background`?", &["print_background"]),
            ("set_viewport", "", json!({"width": 10, "height": 10, "Mobile": true}), "payload.Mobile: set_viewport has no option `Mobile`; did you mean `mobile`?", &["mobile"]),
            ("extract", "", json!({"fromat": "html"}), "payload.fromat: extract has no option `fromat`; did you mean `format`?", &["format"]),
            ("new_tab", "", json!({"href": "https://a.test/"}), "payload.href: new_tab has no option `href` (it has: url)", &[]),
        ];
        for (name, selector, payload, message, near) in cases {
            let err = parse(name, selector, payload.clone()).unwrap_err();
            assert_eq!(err.code, FailureCode::InvalidArgument, "{name} {payload}");
            assert_eq!(err.message, message, "{name} {payload}");
            assert_eq!(err.did_you_mean, near, "{name} {payload}");
        }
    }

    /// A hostile client's megabyte-long key or action name is refused without an edit-distance
    /// table of its length (`within_two` answers on lengths), and named by its start only.
    #[test]
    fn huge_keys_and_names_are_cheap_to_refuse_and_clipped() {
        let huge = "k".repeat(1 << 20);
        let err = parse("screenshot", "", json!({ huge.clone(): true })).unwrap_err();
        assert_eq!(err.code, FailureCode::InvalidArgument);
        assert!(err.message.len() < 300, "{} bytes", err.message.len());
        assert!(err.message.starts_with(&format!("payload.{}...", "k".repeat(40))), "{}", &err.message[..80]);
        assert!(err.did_you_mean.is_empty());
        let err = parse(&huge, "", Value::Null).unwrap_err();
        assert_eq!(err.code, FailureCode::UnknownAction);
        assert!(err.did_you_mean.is_empty());
        assert_eq!(within_two("full_page", "fullpage"), Some(1));
        assert_eq!(within_two("navigate", "navigateeee"), None);
        assert_eq!(within_two("ab", "abcd"), Some(2));
    }

    /// Every option the reference lists is accepted by its action's parser (a reference that
    /// names an option the parser refuses would be a lie).
    #[test]
    fn every_documented_option_is_accepted() {
        #[rustfmt::skip]
        let samples: Vec<(&str, &str, Value)> = vec![
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": "load", "fail_on_status": true})),
            ("click", "#b", json!({"button": "left", "click_count": 1})),
            ("scroll", "", json!({"x": 1, "y": 2})),
            ("wait_for", "", json!({"ms": 1})),
            ("wait_for", "", json!({"text": "a"})),
            ("wait_for", "", json!({"url": "a"})),
            ("extract", "", json!({"format": "text"})),
            ("attr", "a", json!({"name": "href"})),
            ("screenshot", "", json!({"full_page": false, "format": "jpeg", "quality": 5, "clip": {"x": 0, "y": 0, "width": 1, "height": 1}})),
            ("pdf", "", json!({"landscape": true, "print_background": true, "scale": 1, "paper_width": 8, "paper_height": 11, "page_ranges": "1", "margin": 0})),
            ("set_viewport", "", json!({"width": 10, "height": 10, "scale": 1, "mobile": false})),
            ("new_tab", "", json!({"url": "https://a.test/"})),
            ("cookies", "", json!({"op": "set", "cookies": []})),
        ];
        let mut covered = std::collections::HashSet::new();
        for (name, selector, payload) in &samples {
            let got = parse(name, selector, payload.clone());
            assert!(got.is_ok(), "{name} {payload}: {got:?}");
            for key in payload.as_object().unwrap().keys() {
                covered.insert((name.to_string(), key.clone()));
            }
        }
        for kind in ActionKind::ALL {
            for o in kind.reference().options {
                assert!(
                    covered.contains(&(kind.name().to_string(), o.name.to_string())),
                    "{}.{} untested",
                    kind.name(),
                    o.name
                );
            }
        }
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
            ("navigate", "", Value::Null, InvalidArgument, "payload: a url string or {url, wait_until, fail_on_status} is required"),
            ("navigate", "", json!({"url": "https://a.test/", "fail_on_status": "yes"}), InvalidArgument, "payload.fail_on_status: true or false is required"),
            ("navigate", "", json!({"url": 5}), InvalidArgument, "payload.url: a url string is required"),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": 1}), InvalidArgument, "payload.wait_until: a string is required"),
            ("navigate", "", json!("not a url"), InvalidArgument, "payload.url: \"not a url\" is not a url (give an absolute URL such as https://example.com/)"),
            ("navigate", "", json!("example.com"), InvalidArgument, "payload.url: \"example.com\" is not a url (no scheme): give https://example.com/"),
            ("navigate", "", json!({"url": "https://a.test/", "wait_until": "soon"}), InvalidArgument, "payload.wait_until: `soon` is not one of load, domcontentloaded, networkidle, none"),
            ("click", " ", Value::Null, InvalidArgument, "selector: click needs a selector"),
            ("click", "#b", json!("left"), InvalidArgument, "payload: expected {button, click_count} or nothing"),
            ("click", "#b", json!({"button": "fourth"}), InvalidArgument, "payload.button: Some(\"fourth\") is not left, right or middle"),
            ("click", "#b", json!({"button": 1}), InvalidArgument, "payload.button: None is not left, right or middle"),
            ("click", "#b", json!({"click_count": 9}), InvalidArgument, "payload.click_count: must be 1, 2 or 3"),
            ("type", "", json!("x"), InvalidArgument, "selector: type needs a selector"),
            ("type", "#q", json!(5), InvalidArgument, "payload: a string is required"),
            ("fill", "#q", Value::Null, InvalidArgument, "payload: a string is required"),
            ("press", "", Value::Null, InvalidArgument, "payload: a string is required"),
            ("hover", "", Value::Null, InvalidArgument, "selector: hover needs a selector"),
            ("focus", "", Value::Null, InvalidArgument, "selector: focus needs a selector"),
            ("select", "", json!("a"), InvalidArgument, "selector: select needs a selector"),
            ("select", "#s", json!(["a", 1]), InvalidArgument, "payload: a value or a list of value strings"),
            ("select", "#s", Value::Null, InvalidArgument, "payload: a value or a list of value strings"),
            ("set_input_files", "", json!("a"), InvalidArgument, "selector: set_input_files needs a selector"),
            ("set_input_files", "#f", Value::Null, InvalidArgument, "payload: a file name or a list of file names"),
            ("set_input_files", "#f", json!([1]), InvalidArgument, "payload: a file name or a list of file names"),
            ("set_input_files", "#f", json!("../key"), InvalidArgument, "payload: file name \"../key\" has a path separator: give the name alone"),
            ("set_input_files", "#f", json!(["ok", ".x"]), InvalidArgument, "payload: file name \".x\" starts with a dot (the browser's partial and hidden files do)"),
            ("scroll", "", json!({"x": "far"}), InvalidArgument, "payload.x: a number"),
            ("scroll", "", json!(3), InvalidArgument, "payload: optional {x, y}"),
            ("wait_for", "", json!({"ms": -1}), InvalidArgument, "payload.ms: a number of milliseconds is required"),
            ("wait_for", "", json!({"text": 1}), InvalidArgument, "payload.text: a string is required"),
            ("wait_for", "", json!({"url": null}), InvalidArgument, "payload.url: a string is required"),
            ("wait", "", Value::Null, InvalidArgument, "wait_for needs a selector, or a payload {ms}, {text} or {url}"),
            ("extract", "", json!(1), InvalidArgument, "payload: a format string (text, html, value, attr:<name>) is expected"),
            ("extract", "", json!("attr:"), InvalidArgument, "payload: format `attr:` is not one of text, html, value, attr:<name>"),
            ("attr", "", json!("href"), InvalidArgument, "selector: attr needs a selector"),
            ("attr", "a", json!(""), InvalidArgument, "payload: an attribute name string is required"),
            ("evaluate", "", json!("  "), InvalidArgument, "payload: a JavaScript expression string is required"),
            ("screenshot", "", json!(1), InvalidArgument, "payload: screenshot options {full_page, clip, format, quality}"),
            ("screenshot", "", json!({"size": 1}), InvalidArgument, "payload.size: screenshot has no option `size` (it has: full_page, clip, format, quality)"),
            ("screenshot", "", json!("webp"), InvalidArgument, "payload.format: `webp` is not png or jpeg"),
            ("screenshot", "", json!({"quality": 50}), InvalidArgument, "payload.quality: only applies to jpeg"),
            ("screenshot", "", json!({"format": "jpeg", "quality": 101}), InvalidArgument, "payload.quality: 101 is not 0..100"),
            ("screenshot", "#box", json!({"clip": {"x": 0, "y": 0, "width": 10, "height": 10}}), InvalidArgument, "payload.clip: conflicts with a selector (element crop); give one or the other"),
            ("screenshot", "", json!({"full_page": true, "clip": {}}), InvalidArgument, "payload.clip: conflicts with full_page"),
            ("screenshot", "", json!({"clip": {"x": 0, "y": -1}}), InvalidArgument, "payload.clip.y: a non-negative number is required"),
            ("screenshot", "", json!({"clip": {"x": 0, "y": 0, "width": 0.5, "height": 9}}), InvalidArgument, "payload.clip: width and height must be at least 1"),
            ("pdf", "", json!("A4"), InvalidArgument, "payload: optional print options object"),
            ("pdf", "", json!({"paper": "A4"}), InvalidArgument, "payload.paper: pdf has no option `paper` (it has: landscape, print_background, scale, paper_width, paper_height, page_ranges, margin)"),
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
            // Nothing is silently ignored.
            ("back", "", json!(42), InvalidArgument, "payload: back takes no payload, got 42"),
            ("title", "", json!({"x": 1}), InvalidArgument, "payload: title takes no payload, got {\"x\":1}"),
            ("navigate", "#a", json!("https://a.test/"), InvalidArgument, "selector: navigate takes no selector"),
            ("list_tabs", "x", Value::Null, InvalidArgument, "selector: list_tabs takes no selector"),
            ("focus", "#m", json!("x"), InvalidArgument, "payload: focus takes no payload, got \"x\""),
            ("hover", "#m", json!(1), InvalidArgument, "payload: hover takes no payload, got 1"),
            ("scroll", "#far", json!({"y": 1}), InvalidArgument, "payload: conflicts with the selector; scroll to an element or to {x, y}"),
            ("wait_for", "#late", json!({"ms": 5}), InvalidArgument, "payload: conflicts with the selector; wait for an element, or for {ms}, {text} or {url}"),
            ("wait_for", "", json!({"ms": 5, "text": "a"}), InvalidArgument, "payload: give one of ms, text, url, not ms and text"),
            ("extract", "a", json!({"format": 5}), InvalidArgument, "payload.format: 5 is not one of text, html, value, attr:<name>"),
            ("screenshot", "#box", json!({"full_page": true}), InvalidArgument, "payload.full_page: conflicts with a selector (element crop); give one or the other"),
            ("screenshot", "", json!({"full_page": "yes"}), InvalidArgument, "payload.full_page: true or false is required"),
            ("screenshot", "", json!({"clip": {"x": 0, "y": 0, "w": 5, "height": 5}}), InvalidArgument, "payload.clip.w: a clip has no field `w` (it has: x, y, width, height)"),
            ("set_viewport", "", json!({"width": 10, "height": 10, "dpr": 2}), InvalidArgument, "payload.dpr: set_viewport has no option `dpr` (it has: width, height, scale, mobile)"),
            ("cookies", "", json!({"op": 1}), InvalidArgument, "payload.op: 1 is not get, set or clear"),
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
            ("screenshot", "", Value::Null, Target::None),
            ("scroll", "#far", Value::Null, Target::Selector("#far")),
            ("scroll", "", json!({"x": 0, "y": 10}), Target::None),
            ("wait_for", "#late", Value::Null, Target::Selector("#late")),
            ("wait_for", "", json!({"text": "secret"}), Target::None),
            ("press", "#q", json!("Enter"), Target::Selector("#q")),
            ("press", "", json!("Enter"), Target::None),
            ("extract", "h1", Value::Null, Target::Selector("h1")),
            ("back", "", Value::Null, Target::None),
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
