//! Typed actions: one method per action on [`Session`], each returning a [`Step`] whose
//! option setters match `docs/actions.md` and whose `.await` gives a typed result. A failed
//! action is [`Error::Action`], carrying its code, the dialog if one is open, and
//! `did_you_mean`.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::session::millis;
use crate::{from_json, pb, to_json, Error, Session};

/// A failed action, as the server reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionError {
    /// The canonical name of the action that failed.
    pub action: String,
    /// Why: `ELEMENT_NOT_FOUND`, `TIMEOUT`, `DIALOG_OPEN`...
    pub code: pb::ErrorCode,
    /// What went wrong, in words (never the typed text or a script).
    pub message: String,
    /// For an unknown action or option: what it is close to.
    pub did_you_mean: Vec<String>,
    /// For `DIALOG_OPEN`: the dialog blocking the page, answered with its `grammar` selectors.
    pub dialog: Option<pb::Dialog>,
}

impl std::fmt::Display for ActionError {
    /// `click failed: ELEMENT_NOT_FOUND: no element matches #go within 400 ms (...)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let code = self.code.as_str_name().trim_start_matches("ERROR_CODE_");
        write!(f, "{} failed: {code}: {}", self.action, self.message)?;
        if let Some(near) = self.did_you_mean.first() {
            write!(f, " (did you mean {near}?)")?;
        }
        Ok(())
    }
}

impl std::error::Error for ActionError {}

/// `r` when it succeeded, else its failure as [`Error::Action`].
pub(crate) fn checked(r: pb::ActionResult) -> Result<pb::ActionResult, Error> {
    if r.ok {
        return Ok(r);
    }
    let error = r.error.unwrap_or_default();
    Err(Error::Action(Box::new(ActionError {
        action: r.action,
        code: pb::ErrorCode::try_from(error.code).unwrap_or(pb::ErrorCode::Unspecified),
        message: error.message,
        did_you_mean: error.did_you_mean,
        dialog: error.dialog,
    })))
}

/// What an action's result becomes when it succeeds.
pub trait Output: Sized + Send + 'static {
    /// Reads the successful result.
    fn read(r: pb::ActionResult) -> Result<Self, Error>;
}

impl Output for () {
    fn read(_: pb::ActionResult) -> Result<(), Error> {
        Ok(())
    }
}

impl Output for Value {
    fn read(r: pb::ActionResult) -> Result<Value, Error> {
        Ok(r.value.as_ref().map(to_json).unwrap_or(Value::Null))
    }
}

impl Output for String {
    fn read(r: pb::ActionResult) -> Result<String, Error> {
        match Value::read(r)? {
            Value::String(s) => Ok(s),
            other => Err(Error::Unexpected(format!("expected a string, got {other}"))),
        }
    }
}

impl Output for Option<String> {
    fn read(r: pb::ActionResult) -> Result<Option<String>, Error> {
        match Value::read(r)? {
            Value::String(s) => Ok(Some(s)),
            Value::Null => Ok(None),
            other => Err(Error::Unexpected(format!("expected a string or null, got {other}"))),
        }
    }
}

impl Output for Vec<u8> {
    /// Screenshot and PDF bytes.
    fn read(r: pb::ActionResult) -> Result<Vec<u8>, Error> {
        Ok(r.data)
    }
}

impl Output for Vec<String> {
    fn read(r: pb::ActionResult) -> Result<Vec<String>, Error> {
        let value = Value::read(r)?;
        serde_json::from_value(value.clone()).map_err(|_| Error::Unexpected(format!("expected strings, got {value}")))
    }
}

/// Where a navigation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Navigated {
    /// The URL the tab is on.
    pub url: String,
    /// The main document's HTTP status; `None` without an HTTP response (`about:blank`, a
    /// history or same-document navigation).
    pub status: Option<u16>,
}

impl Output for Navigated {
    fn read(r: pb::ActionResult) -> Result<Navigated, Error> {
        let v = Value::read(r)?;
        let url = v["url"].as_str().ok_or_else(|| Error::Unexpected(format!("no url in {v}")))?.to_string();
        Ok(Navigated { url, status: v["status"].as_u64().and_then(|s| u16::try_from(s).ok()) })
    }
}

/// One tab, from [`Session::list_tabs`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct TabInfo {
    /// Its index, for [`Session::switch_tab`].
    pub index: usize,
    /// The URL it is on.
    pub url: String,
    /// Its document's title.
    pub title: String,
    /// Whether actions run on it.
    pub active: bool,
}

impl Output for Vec<TabInfo> {
    fn read(r: pb::ActionResult) -> Result<Vec<TabInfo>, Error> {
        let value = Value::read(r)?;
        serde_json::from_value(value.clone()).map_err(|e| Error::Unexpected(format!("tab list {value}: {e}")))
    }
}

/// The tab an action left active (`new_tab`, `switch_tab`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TabIndex(pub usize);

impl Output for TabIndex {
    fn read(r: pb::ActionResult) -> Result<TabIndex, Error> {
        Ok(TabIndex(usize::try_from(r.tab_index).unwrap_or_default()))
    }
}

/// The lifecycle event `navigate` waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitUntil {
    /// The `load` event (the default).
    Load,
    /// The `DOMContentLoaded` event: the HTML is parsed, subresources may still load.
    DomContentLoaded,
    /// No network activity for a moment.
    NetworkIdle,
    /// Answer once the navigation commits.
    None,
}

impl WaitUntil {
    fn as_str(self) -> &'static str {
        match self {
            WaitUntil::Load => "load",
            WaitUntil::DomContentLoaded => "domcontentloaded",
            WaitUntil::NetworkIdle => "networkidle",
            WaitUntil::None => "none",
        }
    }
}

/// A mouse button for [`Session::click`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Button {
    /// The primary button.
    Left,
    /// The context-menu button.
    Right,
    /// The wheel button.
    Middle,
}

/// Marker types naming which options a [`Step`] has.
pub mod kind {
    /// `navigate`.
    pub struct Navigate;
    /// `click`.
    pub struct Click;
    /// `screenshot`.
    pub struct Screenshot;
    /// `pdf`.
    pub struct Pdf;
    /// `set_viewport`.
    pub struct Viewport;
    /// Actions without options; `O` is what they return.
    pub struct Plain<O>(std::marker::PhantomData<O>);
}

/// What a step of kind `K` returns.
pub trait StepKind {
    /// The typed result of a successful step.
    type Output: Output;
}
impl StepKind for kind::Navigate {
    type Output = Navigated;
}
impl StepKind for kind::Click {
    type Output = ();
}
impl StepKind for kind::Screenshot {
    type Output = Vec<u8>;
}
impl StepKind for kind::Pdf {
    type Output = Vec<u8>;
}
impl StepKind for kind::Viewport {
    type Output = ();
}
impl<O: Output> StepKind for kind::Plain<O> {
    type Output = O;
}

/// One action on a session, with its options; `.await` runs it. Build one with the
/// session's methods, e.g. [`Session::navigate`].
#[must_use = "a Step does nothing until awaited"]
pub struct Step<'s, K> {
    session: &'s Session,
    action: pb::Action,
    /// The payload when it is not an options object (a URL, a text, a selector's value).
    plain: Value,
    options: Map<String, Value>,
    kind: PhantomData<K>,
}

impl<'s, K: StepKind> Step<'s, K> {
    fn new(session: &'s Session, name: &str, selector: &str, plain: Value) -> Self {
        let action = pb::Action { action: name.into(), selector: selector.into(), ..Default::default() };
        Step { session, action, plain, options: Map::new(), kind: PhantomData }
    }

    fn option(mut self, key: &str, value: Value) -> Self {
        self.options.insert(key.into(), value);
        self
    }

    /// How long this action may take (the server's default is 30 s, its maximum 300 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.action.timeout_ms = millis(timeout);
        self
    }

    /// A correlation id, echoed in the result (useful on a `Drive` stream).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.action.id = id.into();
        self
    }

    /// The action on the wire, for [`crate::DriveSender::send`] or a `Batch`.
    pub fn into_action(self) -> pb::Action {
        let payload = if self.options.is_empty() { self.plain } else { Value::Object(self.options) };
        pb::Action { payload: (!payload.is_null()).then(|| from_json(&payload)), ..self.action }
    }
}

impl<'s, K: StepKind + 's> IntoFuture for Step<'s, K> {
    type Output = Result<K::Output, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 's>>;

    fn into_future(self) -> Self::IntoFuture {
        let session = self.session;
        let action = self.into_action();
        Box::pin(async move { K::Output::read(session.act(action).await?) })
    }
}

impl<'s> Step<'s, kind::Navigate> {
    /// Which lifecycle event to wait for (default [`WaitUntil::Load`]).
    pub fn wait_until(self, event: WaitUntil) -> Self {
        self.option("wait_until", json!(event.as_str()))
    }

    /// Makes an HTTP status of 400..599 a failure (`NAVIGATION_FAILED`).
    pub fn fail_on_status(self) -> Self {
        self.option("fail_on_status", json!(true))
    }
}

impl<'s> Step<'s, kind::Click> {
    /// The mouse button (default left).
    pub fn button(self, button: Button) -> Self {
        let name = match button {
            Button::Left => "left",
            Button::Right => "right",
            Button::Middle => "middle",
        };
        self.option("button", json!(name))
    }

    /// A double click.
    pub fn double(self) -> Self {
        self.option("click_count", json!(2))
    }
}

impl<'s> Step<'s, kind::Screenshot> {
    /// The whole scrollable page, not just the viewport.
    pub fn full_page(self) -> Self {
        self.option("full_page", json!(true))
    }

    /// JPEG at this quality (0..100) instead of PNG.
    pub fn jpeg(self, quality: u8) -> Self {
        self.option("format", json!("jpeg")).option("quality", json!(quality))
    }

    /// A rectangle of the document, in CSS pixels.
    pub fn clip(self, x: f64, y: f64, width: f64, height: f64) -> Self {
        self.option("clip", json!({ "x": x, "y": y, "width": width, "height": height }))
    }
}

impl<'s> Step<'s, kind::Pdf> {
    /// Landscape orientation.
    pub fn landscape(self) -> Self {
        self.option("landscape", json!(true))
    }

    /// Print background graphics.
    pub fn print_background(self) -> Self {
        self.option("print_background", json!(true))
    }

    /// Paper size in inches.
    pub fn paper(self, width: f64, height: f64) -> Self {
        self.option("paper_width", json!(width)).option("paper_height", json!(height))
    }

    /// Pages to print, e.g. `1-3, 5`.
    pub fn page_ranges(self, ranges: &str) -> Self {
        self.option("page_ranges", json!(ranges))
    }
}

impl<'s> Step<'s, kind::Viewport> {
    /// Device scale factor, 1..3.
    pub fn scale(self, scale: f64) -> Self {
        self.option("scale", json!(scale))
    }

    /// Emulate a mobile device.
    pub fn mobile(self) -> Self {
        self.option("mobile", json!(true))
    }
}

type Plain<'s, O> = Step<'s, kind::Plain<O>>;

/// The actions, one method each; `docs/actions.md` describes what each does.
impl Session {
    /// Loads `url` in the active tab; answers where it ended and the HTTP status.
    pub fn navigate(&self, url: &str) -> Step<'_, kind::Navigate> {
        Step::new(self, "navigate", "", Value::Null).option("url", json!(url))
    }

    /// One page back in the tab's history.
    pub fn back(&self) -> Plain<'_, Value> {
        Step::new(self, "back", "", Value::Null)
    }

    /// One page forward in the tab's history.
    pub fn forward(&self) -> Plain<'_, Value> {
        Step::new(self, "forward", "", Value::Null)
    }

    /// Reloads the active tab.
    pub fn reload(&self) -> Plain<'_, Value> {
        Step::new(self, "reload", "", Value::Null)
    }

    /// Clicks the element (waiting for it); `dialog::accept` / `dialog::dismiss` answer a dialog.
    pub fn click(&self, selector: &str) -> Step<'_, kind::Click> {
        Step::new(self, "click", selector, Value::Null)
    }

    /// Types `text` key by key into the element (or a `dialog::` field).
    pub fn type_text(&self, selector: &str, text: &str) -> Plain<'_, ()> {
        Step::new(self, "type", selector, json!(text))
    }

    /// Replaces the value of an input or textarea.
    pub fn fill(&self, selector: &str, text: &str) -> Plain<'_, ()> {
        Step::new(self, "fill", selector, json!(text))
    }

    /// Presses a key or chord (`Enter`, `Control+A`) on whatever has focus.
    pub fn press(&self, chord: &str) -> Plain<'_, ()> {
        Step::new(self, "press", "", json!(chord))
    }

    /// Presses a key or chord on the element.
    pub fn press_on(&self, selector: &str, chord: &str) -> Plain<'_, ()> {
        Step::new(self, "press", selector, json!(chord))
    }

    /// Moves the mouse over the element.
    pub fn hover(&self, selector: &str) -> Plain<'_, ()> {
        Step::new(self, "hover", selector, Value::Null)
    }

    /// Focuses the element.
    pub fn focus(&self, selector: &str) -> Plain<'_, ()> {
        Step::new(self, "focus", selector, Value::Null)
    }

    /// Selects options of a `<select>` by value; answers the values now selected.
    pub fn select(&self, selector: &str, values: &[&str]) -> Plain<'_, Vec<String>> {
        Step::new(self, "select", selector, json!(values))
    }

    /// Sets files of the session (uploaded with [`crate::Client::put_file`], or downloaded by
    /// its pages) on an `<input type=file>`; answers the names set.
    pub fn set_input_files(&self, selector: &str, names: &[&str]) -> Plain<'_, Vec<String>> {
        Step::new(self, "set_input_files", selector, json!(names))
    }

    /// Scrolls the element into view.
    pub fn scroll_to(&self, selector: &str) -> Plain<'_, Value> {
        Step::new(self, "scroll", selector, Value::Null)
    }

    /// Scrolls the window to a point.
    pub fn scroll(&self, x: f64, y: f64) -> Plain<'_, Value> {
        Step::new(self, "scroll", "", json!({ "x": x, "y": y }))
    }

    /// Waits until the element is visible.
    pub fn wait_for(&self, selector: &str) -> Plain<'_, ()> {
        Step::new(self, "wait_for", selector, Value::Null)
    }

    /// Waits until the page's text contains `text`.
    pub fn wait_for_text(&self, text: &str) -> Plain<'_, ()> {
        Step::new(self, "wait_for", "", json!({ "text": text }))
    }

    /// Waits until the page's URL contains `part`.
    pub fn wait_for_url(&self, part: &str) -> Plain<'_, ()> {
        Step::new(self, "wait_for", "", json!({ "url": part }))
    }

    /// The element's text (`body` for an empty selector); `None` when it has none.
    pub fn extract(&self, selector: &str) -> Plain<'_, Option<String>> {
        Step::new(self, "extract", selector, Value::Null)
    }

    /// The element's outer HTML.
    pub fn extract_html(&self, selector: &str) -> Plain<'_, Option<String>> {
        Step::new(self, "extract", selector, json!("html"))
    }

    /// A form element's value.
    pub fn extract_value(&self, selector: &str) -> Plain<'_, Option<String>> {
        Step::new(self, "extract", selector, json!("value"))
    }

    /// An attribute of the element; `None` when it is absent.
    pub fn attr(&self, selector: &str, name: &str) -> Plain<'_, Option<String>> {
        Step::new(self, "attr", selector, json!(name))
    }

    /// Runs a JavaScript expression (a promise is awaited) and answers its JSON value.
    pub fn evaluate(&self, expression: &str) -> Plain<'_, Value> {
        Step::new(self, "evaluate", "", json!(expression))
    }

    /// A PNG of the viewport (see the options on [`Step<kind::Screenshot>`]).
    pub fn screenshot(&self) -> Step<'_, kind::Screenshot> {
        Step::new(self, "screenshot", "", Value::Null)
    }

    /// A PNG of one element.
    pub fn screenshot_of(&self, selector: &str) -> Step<'_, kind::Screenshot> {
        Step::new(self, "screenshot", selector, Value::Null)
    }

    /// The page printed to PDF.
    pub fn pdf(&self) -> Step<'_, kind::Pdf> {
        Step::new(self, "pdf", "", Value::Null)
    }

    /// Sets the viewport of every tab, in CSS pixels.
    pub fn set_viewport(&self, width: u32, height: u32) -> Step<'_, kind::Viewport> {
        Step::new(self, "set_viewport", "", Value::Null).option("width", json!(width)).option("height", json!(height))
    }

    /// Replaces the active tab's document with `html`.
    pub fn load_html(&self, html: &str) -> Plain<'_, Value> {
        Step::new(self, "load_html", "", json!(html))
    }

    /// Opens a tab on `url` (`about:blank` when empty) and makes it active.
    pub fn new_tab(&self, url: &str) -> Plain<'_, TabIndex> {
        Step::new(self, "new_tab", "", json!(url))
    }

    /// Makes tab `index` the active one (sticky).
    pub fn switch_tab(&self, index: usize) -> Plain<'_, TabIndex> {
        Step::new(self, "switch_tab", "", json!(index))
    }

    /// Makes the first tab whose title or URL contains `part` the active one.
    pub fn switch_tab_matching(&self, part: &str) -> Plain<'_, TabIndex> {
        Step::new(self, "switch_tab", "", json!(part))
    }

    /// Closes the active tab (not the last one).
    pub fn close_tab(&self) -> Plain<'_, Value> {
        Step::new(self, "close_tab", "", Value::Null)
    }

    /// The session's tabs.
    pub fn list_tabs(&self) -> Plain<'_, Vec<TabInfo>> {
        Step::new(self, "list_tabs", "", Value::Null)
    }

    /// The active tab's URL.
    pub fn url(&self) -> Plain<'_, String> {
        Step::new(self, "url", "", Value::Null)
    }

    /// The active tab's title.
    pub fn title(&self) -> Plain<'_, String> {
        Step::new(self, "title", "", Value::Null)
    }

    /// The session's cookies (needs `context:export`).
    pub fn cookies(&self) -> Plain<'_, Value> {
        Step::new(self, "cookies", "", json!("get"))
    }

    /// Sets cookies, each `{name, value, domain, path, ...}` (needs `context:import`).
    pub fn set_cookies(&self, cookies: Vec<Value>) -> Plain<'_, Value> {
        Step::new(self, "cookies", "", json!({ "op": "set", "cookies": cookies }))
    }

    /// Deletes every cookie (needs `context:import`).
    pub fn clear_cookies(&self) -> Plain<'_, Value> {
        Step::new(self, "cookies", "", json!("clear"))
    }
}

#[cfg(test)]
mod tests {
    use browserpool_pool::ActionKind;

    /// What this file sends, read from its own source: the action of every `Step::new`, and
    /// each `.option` key with the action it goes to (on the `Step::new` line, or in the
    /// `impl Step<'s, kind::K>` of the kind whose methods start that action).
    fn sent() -> (Vec<String>, Vec<(String, String)>) {
        let source = include_str!("steps.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let quoted = |line: &str, after: &str| -> Vec<String> {
            line.split(after).skip(1).filter_map(|rest| rest.split('"').next()).map(str::to_string).collect()
        };
        let (mut actions, mut options, mut kind_of) = (Vec::new(), Vec::new(), Vec::new());
        let mut returns = None;
        for line in source.lines() {
            if let Some(kind) = line.split("-> Step<'_, kind::").nth(1) {
                returns = kind.split('>').next().map(str::to_string);
            }
            if let Some(action) = quoted(line, "Step::new(self, \"").pop() {
                if let Some(kind) = returns.take() {
                    kind_of.push((kind, action.clone()));
                }
                options.extend(quoted(line, ".option(\"").into_iter().map(|o| (action.clone(), o)));
                actions.push(action);
            }
        }
        let mut block = None;
        for line in source.lines() {
            if line.starts_with("impl") {
                block = line.split("Step<'s, kind::").nth(1).and_then(|k| k.split('>').next()).map(str::to_string);
            }
            if let Some(kind) = &block {
                let action = kind_of.iter().find(|(k, _)| k == kind).map(|(_, a)| a.clone());
                let action = action.unwrap_or_else(|| panic!("no method starts a step of kind::{kind}"));
                options.extend(quoted(line, ".option(\"").into_iter().map(|o| (action.clone(), o)));
            }
        }
        (actions, options)
    }

    /// A new action without a method, a method naming no action, or an option setter for a key
    /// its action does not read, fails here.
    #[test]
    fn the_step_methods_are_the_action_catalog() {
        let (actions, options) = sent();
        assert!(actions.len() > 30 && options.len() > 15, "the source reader found {actions:?} {options:?}");
        for kind in ActionKind::ALL {
            assert!(actions.iter().any(|a| a == kind.name()), "no Session method runs `{}`", kind.name());
        }
        for action in &actions {
            assert!(ActionKind::ALL.iter().any(|k| k.name() == action), "`{action}` is not a canonical action name");
        }
        for (action, key) in &options {
            let kind = ActionKind::ALL.iter().find(|k| k.name() == action).unwrap();
            assert!(
                kind.reference().options.iter().any(|o| o.name == key),
                "`{action}` has no option `{key}` (docs/actions.md lists its options)"
            );
        }
    }
}
