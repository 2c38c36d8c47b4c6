//! The session driver: runs canonical actions against a worker's page over CDP.
//!
//! Every CDP await runs under a deadline. Failures are [`ActionFailure`]s with a code the wire
//! understands; a failure never poisons the driver, so the next action runs normally.

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::emulation::{
    SetDeviceMetricsOverrideParams, SetTouchEmulationEnabledParams,
};
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchKeyEventParams, DispatchKeyEventType, DispatchMouseEventParams, DispatchMouseEventType,
    InsertTextParams, MouseButton,
};
use chromiumoxide::cdp::browser_protocol::page::{CaptureScreenshotFormat, NavigateParams};
use chromiumoxide::cdp::browser_protocol::target::{CloseTargetParams, GetTargetsParams};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::error::CdpError;
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, Element, Page};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::actions::Canonical;
use crate::error::PoolError;

/// How often element and condition waits poll the page.
const POLL: Duration = Duration::from_millis(50);

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

/// One action to run, already canonicalized and scope-checked by the caller.
#[derive(Debug, Clone)]
pub struct ActionCall {
    pub action: Canonical,
    pub selector: String,
    pub payload: Value,
    /// The action's whole budget; element waits use all of it.
    pub timeout: Duration,
}

/// What a successful action returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionOutput {
    /// JSON result (`evaluate` value, extracted text, url, title...).
    pub value: Value,
    /// Binary result (PNG screenshot).
    pub data: Vec<u8>,
    /// MIME type of `data`.
    pub mime_type: String,
}

/// Why one action failed; maps 1:1 to the wire's `ErrorCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCode {
    InvalidArgument,
    UnknownAction,
    ElementNotFound,
    Timeout,
    NavigationFailed,
    BlockedByPolicy,
    PermissionDenied,
    JsException,
    SessionClosed,
    SessionCrashed,
    Internal,
}

/// A failed action: code, a message for the client, and suggestions for unknown names.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionFailure {
    pub code: FailureCode,
    pub message: String,
    pub did_you_mean: Vec<String>,
}

impl ActionFailure {
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        ActionFailure { code, message: message.into(), did_you_mean: Vec::new() }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(FailureCode::InvalidArgument, message)
    }

    fn cdp(e: CdpError) -> Self {
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
}

type ActResult<T> = Result<T, ActionFailure>;

/// Drives one worker's page. Actions of one session must be serialized by the caller.
pub struct Driver {
    page: Page,
    cdp_timeout: Duration,
    /// The viewport last applied, so a lease asking for the same one costs no CDP call.
    viewport: std::sync::Mutex<Option<Viewport>>,
}

impl Driver {
    /// Opens the page sessions will drive and closes any other tab Chromium started with.
    pub(crate) async fn attach(browser: &Browser, cdp_timeout: Duration) -> Result<Driver, PoolError> {
        let timeout = |what| PoolError::CdpTimeout { what, after: cdp_timeout };
        let page = tokio::time::timeout(cdp_timeout, browser.new_page("about:blank"))
            .await
            .map_err(|_| timeout("new page"))?
            .map_err(|e| PoolError::Cdp(format!("new page: {e}")))?;
        let targets = tokio::time::timeout(cdp_timeout, browser.execute(GetTargetsParams::default()))
            .await
            .map_err(|_| timeout("get targets"))?
            .map_err(|e| PoolError::Cdp(format!("get targets: {e}")))?;
        for info in &targets.result.target_infos {
            if info.r#type == "page" && &info.target_id != page.target_id() {
                let close = browser.execute(CloseTargetParams::new(info.target_id.clone()));
                let _ = tokio::time::timeout(cdp_timeout, close).await;
            }
        }
        let driver = Driver { page, cdp_timeout, viewport: std::sync::Mutex::new(None) };
        // Warm workers already emulate the default screen, so most leases skip this call.
        driver
            .set_viewport(Viewport::default(), cdp_timeout)
            .await
            .map_err(|f| PoolError::Cdp(format!("set viewport: {}", f.message)))?;
        Ok(driver)
    }

    /// Emulates the given screen (and turns off chromiumoxide's default touch emulation).
    pub async fn set_viewport(&self, v: Viewport, within: Duration) -> ActResult<()> {
        if *self.viewport.lock().unwrap_or_else(|e| e.into_inner()) == Some(v) {
            return Ok(());
        }
        let params = SetDeviceMetricsOverrideParams::new(v.width, v.height, v.scale, v.mobile);
        deadline(within, async {
            self.page.execute(params).await.map_err(ActionFailure::cdp)?;
            self.page
                .execute(SetTouchEmulationEnabledParams::new(v.mobile))
                .await
                .map_err(ActionFailure::cdp)?;
            Ok(())
        })
        .await?;
        *self.viewport.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        Ok(())
    }

    /// Runs one action under its deadline.
    pub async fn run(&self, call: &ActionCall) -> ActResult<ActionOutput> {
        if !call.action.implemented() {
            return Err(ActionFailure::invalid(format!(
                "action `{}` is part of the v1 contract but not available in this build yet",
                call.action.name
            )));
        }
        let until = Instant::now() + call.timeout;
        // Element waits use the whole budget; the grace lets them report ELEMENT_NOT_FOUND
        // before the outer deadline turns the result into TIMEOUT.
        let outer = call.timeout + Duration::from_millis(500);
        let fut = async {
            match call.action.name {
                "navigate" => self.navigate(&call.payload).await,
                "click" => self.click(call, until).await,
                "type" => self.type_text(call, until).await,
                "fill" => self.fill(call, until).await,
                "press" => self.press(call, until).await,
                "extract" => self.extract(call, until).await,
                "evaluate" => self.evaluate(&call.payload).await,
                "screenshot" => self.screenshot(&call.payload).await,
                "url" => Ok(value(json!(self.page.url().await.map_err(ActionFailure::cdp)?.unwrap_or_default()))),
                "title" => Ok(value(json!(self.page.get_title().await.map_err(ActionFailure::cdp)?.unwrap_or_default()))),
                "wait_for" => self.wait_for(call, until).await,
                other => Err(ActionFailure::new(FailureCode::Internal, format!("no handler for `{other}`"))),
            }
        };
        match tokio::time::timeout(outer, fut).await {
            Ok(result) => result,
            Err(_) => Err(ActionFailure::new(
                FailureCode::Timeout,
                format!("{} did not finish within {} ms", call.action.name, call.timeout.as_millis()),
            )),
        }
    }

    async fn navigate(&self, payload: &Value) -> ActResult<ActionOutput> {
        let (url, wait_until) = match payload {
            Value::String(url) => (url.clone(), "load".to_string()),
            Value::Object(map) => {
                let url = map
                    .get("url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ActionFailure::invalid("payload.url: a url string is required"))?;
                let wait = map.get("wait_until").and_then(Value::as_str).unwrap_or("load");
                (url.to_string(), wait.to_string())
            }
            _ => return Err(ActionFailure::invalid("payload: a url string or {url, wait_until} is required")),
        };
        check_url(&url)?;
        match wait_until.as_str() {
            "load" => {}
            "domcontentloaded" | "networkidle" | "none" => {
                return Err(ActionFailure::invalid(format!(
                    "payload.wait_until: `{wait_until}` is not available in this build yet (only `load`)"
                )))
            }
            other => {
                return Err(ActionFailure::invalid(format!(
                    "payload.wait_until: `{other}` is not one of load, domcontentloaded, networkidle, none"
                )))
            }
        }
        match self.page.goto(NavigateParams::new(url.clone())).await {
            Ok(_) => {}
            Err(CdpError::ChromeMessage(text)) => {
                return Err(ActionFailure::new(FailureCode::NavigationFailed, format!("{url}: {text}")))
            }
            Err(e) => return Err(ActionFailure::cdp(e)),
        }
        let now = self.page.url().await.map_err(ActionFailure::cdp)?.unwrap_or(url);
        Ok(value(json!({ "url": now })))
    }

    async fn click(&self, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        let selector = require_selector(call)?;
        let (button, count) = click_options(&call.payload)?;
        let element = self.element(selector, until).await?;
        element.scroll_into_view().await.map_err(ActionFailure::cdp)?;
        let point = element.clickable_point().await.map_err(|e| {
            ActionFailure::new(FailureCode::ElementNotFound, format!("{selector} is not clickable: {e}"))
        })?;
        self.page
            .execute(DispatchMouseEventParams::new(DispatchMouseEventType::MouseMoved, point.x, point.y))
            .await
            .map_err(ActionFailure::cdp)?;
        for n in 1..=count {
            for kind in [DispatchMouseEventType::MousePressed, DispatchMouseEventType::MouseReleased] {
                let mut params = DispatchMouseEventParams::new(kind, point.x, point.y);
                params.button = Some(button.clone());
                params.click_count = Some(n);
                self.page.execute(params).await.map_err(ActionFailure::cdp)?;
            }
        }
        Ok(ActionOutput::default())
    }

    async fn type_text(&self, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        let selector = require_selector(call)?;
        let text = require_text(&call.payload)?;
        let element = self.element(selector, until).await?;
        element.focus().await.map_err(ActionFailure::cdp)?;
        for c in text.chars() {
            let s = c.to_string();
            match chromiumoxide::keys::get_key_definition(&s) {
                Some(_) if c != '\n' => {
                    self.page.press_key_chord(&s).await?;
                }
                _ => {
                    self.page.execute(InsertTextParams::new(s)).await.map_err(ActionFailure::cdp)?;
                }
            }
        }
        Ok(ActionOutput::default())
    }

    async fn fill(&self, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        let selector = require_selector(call)?;
        let text = require_text(&call.payload)?;
        let element = self.element(selector, until).await?;
        let cleared = element
            .call_js_fn(
                "function() { if (!('value' in this)) return false; this.focus(); this.value = ''; \
                 this.dispatchEvent(new Event('input', {bubbles: true})); return true; }",
                false,
            )
            .await
            .map_err(ActionFailure::cdp)?;
        if cleared.result.value != Some(json!(true)) {
            return Err(ActionFailure::invalid(format!("selector: {selector} is not an input, textarea or select")));
        }
        if !text.is_empty() {
            self.page.execute(InsertTextParams::new(text)).await.map_err(ActionFailure::cdp)?;
        }
        element
            .call_js_fn("function() { this.dispatchEvent(new Event('change', {bubbles: true})); }", false)
            .await
            .map_err(ActionFailure::cdp)?;
        Ok(ActionOutput::default())
    }

    async fn press(&self, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        let chord = require_text(&call.payload)?;
        if !call.selector.is_empty() {
            let element = self.element(&call.selector, until).await?;
            element.focus().await.map_err(ActionFailure::cdp)?;
        }
        self.page.press_key_chord(chord).await?;
        Ok(ActionOutput::default())
    }

    async fn extract(&self, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        let selector = if call.selector.is_empty() { "body" } else { call.selector.as_str() };
        let format = match &call.payload {
            Value::Null => "text".to_string(),
            Value::String(s) if s.is_empty() => "text".to_string(),
            Value::String(s) => s.clone(),
            Value::Object(map) => map.get("format").and_then(Value::as_str).unwrap_or("text").to_string(),
            _ => return Err(ActionFailure::invalid("payload: a format string (text, html, value, attr:<name>) is expected")),
        };
        let getter = match format.as_str() {
            "text" => "function() { return this.innerText ?? this.textContent; }".to_string(),
            "html" => "function() { return this.outerHTML; }".to_string(),
            "value" => "function() { return this.value ?? null; }".to_string(),
            f if f.starts_with("attr:") && f.len() > 5 => {
                format!("function() {{ return this.getAttribute({}); }}", json!(&f[5..]))
            }
            other => {
                return Err(ActionFailure::invalid(format!(
                    "payload: format `{other}` is not one of text, html, value, attr:<name>"
                )))
            }
        };
        let element = self.element(selector, until).await?;
        let out = element.call_js_fn(getter, false).await.map_err(ActionFailure::cdp)?;
        Ok(value(out.result.value.unwrap_or(Value::Null)))
    }

    async fn evaluate(&self, payload: &Value) -> ActResult<ActionOutput> {
        let expression = match payload {
            Value::String(s) if !s.trim().is_empty() => s.clone(),
            _ => return Err(ActionFailure::invalid("payload: a JavaScript expression string is required")),
        };
        let params = EvaluateParams::builder()
            .expression(expression)
            .await_promise(true)
            .return_by_value(true)
            .build()
            .map_err(ActionFailure::invalid)?;
        let result = self.page.evaluate_expression(params).await.map_err(ActionFailure::cdp)?;
        Ok(value(result.value().cloned().unwrap_or(Value::Null)))
    }

    async fn screenshot(&self, payload: &Value) -> ActResult<ActionOutput> {
        match payload {
            Value::Null => {}
            Value::Object(map) if map.is_empty() => {}
            Value::Object(map) if map.len() == 1 && map.get("format") == Some(&json!("png")) => {}
            _ => {
                return Err(ActionFailure::invalid(
                    "payload: screenshot options (full_page, clip, jpeg) are not available in this build yet",
                ))
            }
        }
        let params = ScreenshotParams::builder().format(CaptureScreenshotFormat::Png).build();
        let data = self.page.screenshot(params).await.map_err(ActionFailure::cdp)?;
        Ok(ActionOutput { value: Value::Null, data, mime_type: "image/png".into() })
    }

    async fn wait_for(&self, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        if !call.selector.is_empty() {
            let check = format!(
                "(() => {{ const e = document.querySelector({}); if (!e) return false; \
                 const r = e.getBoundingClientRect(); const s = getComputedStyle(e); \
                 return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'; }})()",
                json!(call.selector)
            );
            return self.poll(&check, until, || format!("{} did not become visible", call.selector), FailureCode::Timeout).await;
        }
        match &call.payload {
            Value::Object(map) if map.contains_key("ms") => {
                let ms = map["ms"].as_u64().ok_or_else(|| ActionFailure::invalid("payload.ms: a number of milliseconds is required"))?;
                if Instant::now() + Duration::from_millis(ms) > until {
                    return Err(ActionFailure::new(FailureCode::Timeout, format!("wait of {ms} ms exceeds the action timeout")));
                }
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(ActionOutput::default())
            }
            Value::Object(map) if map.contains_key("text") => {
                let text = map["text"].as_str().ok_or_else(|| ActionFailure::invalid("payload.text: a string is required"))?;
                let check = format!("(document.body ? document.body.innerText : '').includes({})", json!(text));
                self.poll(&check, until, || format!("text {text:?} did not appear"), FailureCode::Timeout).await
            }
            Value::Object(map) if map.contains_key("url") => {
                let url = map["url"].as_str().ok_or_else(|| ActionFailure::invalid("payload.url: a string is required"))?;
                let check = format!("location.href.includes({})", json!(url));
                self.poll(&check, until, || format!("url did not come to contain {url:?}"), FailureCode::Timeout).await
            }
            _ => Err(ActionFailure::invalid("wait_for needs a selector, or a payload {ms}, {text} or {url}")),
        }
    }

    /// Polls a boolean expression until it is true or `until` passes.
    async fn poll(
        &self,
        check: &str,
        until: Instant,
        what: impl Fn() -> String,
        code: FailureCode,
    ) -> ActResult<ActionOutput> {
        loop {
            match self.page.evaluate_expression(check).await {
                Ok(r) if r.value() == Some(&json!(true)) => return Ok(ActionOutput::default()),
                Ok(_) => {}
                Err(CdpError::JavascriptException(details)) => {
                    let msg = ActionFailure::cdp(CdpError::JavascriptException(details)).message;
                    return Err(ActionFailure::invalid(format!("selector: {msg}")));
                }
                // The page may be between documents (navigating); try again.
                Err(_) => {}
            }
            if Instant::now() + POLL > until {
                return Err(ActionFailure::new(code, what()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until `selector` matches, then returns the element.
    async fn element(&self, selector: &str, until: Instant) -> ActResult<Element> {
        let check = format!("document.querySelector({}) !== null", json!(selector));
        self.poll(&check, until, || format!("no element matches {selector}"), FailureCode::ElementNotFound)
            .await?;
        self.page.find_element(selector).await.map_err(|e| {
            ActionFailure::new(FailureCode::ElementNotFound, format!("{selector}: {e}"))
        })
    }

    /// The deadline every CDP call made outside an action uses.
    pub fn cdp_timeout(&self) -> Duration {
        self.cdp_timeout
    }
}

fn value(v: Value) -> ActionOutput {
    ActionOutput { value: v, ..ActionOutput::default() }
}

async fn deadline<T>(within: Duration, fut: impl std::future::Future<Output = ActResult<T>>) -> ActResult<T> {
    tokio::time::timeout(within, fut)
        .await
        .unwrap_or_else(|_| Err(ActionFailure::new(FailureCode::Timeout, "browser did not answer in time")))
}

fn require_selector(call: &ActionCall) -> ActResult<&str> {
    if call.selector.trim().is_empty() {
        return Err(ActionFailure::invalid(format!("selector: {} needs a css selector", call.action.name)));
    }
    Ok(&call.selector)
}

fn require_text(payload: &Value) -> ActResult<&str> {
    payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: a string is required"))
}

fn click_options(payload: &Value) -> ActResult<(MouseButton, i64)> {
    let map = match payload {
        Value::Null => return Ok((MouseButton::Left, 1)),
        Value::Object(map) => map,
        _ => return Err(ActionFailure::invalid("payload: expected {button, click_count} or nothing")),
    };
    let button = match map.get("button").map(|b| b.as_str()) {
        None | Some(Some("left")) => MouseButton::Left,
        Some(Some("right")) => MouseButton::Right,
        Some(Some("middle")) => MouseButton::Middle,
        Some(other) => {
            return Err(ActionFailure::invalid(format!("payload.button: {other:?} is not left, right or middle")))
        }
    };
    let count = match map.get("click_count") {
        None => 1,
        Some(v) => match v.as_i64() {
            Some(n @ 1..=3) => n,
            _ => return Err(ActionFailure::invalid("payload.click_count: must be 1, 2 or 3")),
        },
    };
    Ok((button, count))
}

/// Navigation policy for this build: http(s) and about:blank only.
fn check_url(url: &str) -> ActResult<()> {
    if url == "about:blank" {
        return Ok(());
    }
    let parsed = url::Url::parse(url).map_err(|e| ActionFailure::invalid(format!("payload.url: {url:?} is not a url: {e}")))?;
    match parsed.scheme() {
        "http" | "https" => Ok(()),
        scheme => Err(ActionFailure::new(
            FailureCode::BlockedByPolicy,
            format!("scheme `{scheme}` is not allowed: only http, https and about:blank"),
        )),
    }
}

/// Key chords such as `Enter` or `Control+A`.
trait PressChord {
    async fn press_key_chord(&self, chord: &str) -> ActResult<()>;
}

impl PressChord for Page {
    async fn press_key_chord(&self, chord: &str) -> ActResult<()> {
        let (modifiers, key) = parse_chord(chord)?;
        let def = chromiumoxide::keys::get_key_definition(key)
            .ok_or_else(|| ActionFailure::invalid(format!("payload: unknown key `{key}`")))?;
        let mut mask = 0i64;
        for m in &modifiers {
            let mdef = chromiumoxide::keys::get_key_definition(m.name()).expect("modifier keys are in the table");
            mask |= m.bit();
            let mut down = DispatchKeyEventParams::new(DispatchKeyEventType::RawKeyDown);
            down.key = Some(mdef.key.to_string());
            down.code = Some(mdef.code.to_string());
            down.windows_virtual_key_code = Some(mdef.key_code);
            down.modifiers = Some(mask);
            self.execute(down).await.map_err(ActionFailure::cdp)?;
        }
        // Text is produced only without Control/Alt/Meta, as on a real keyboard.
        let text = if mask & !Modifier::Shift.bit() == 0 {
            def.text.map(str::to_string).or_else(|| (def.key.chars().count() == 1).then(|| def.key.to_string()))
        } else {
            None
        };
        let mut down = DispatchKeyEventParams::new(if text.is_some() {
            DispatchKeyEventType::KeyDown
        } else {
            DispatchKeyEventType::RawKeyDown
        });
        down.key = Some(def.key.to_string());
        down.code = Some(def.code.to_string());
        down.windows_virtual_key_code = Some(def.key_code);
        down.native_virtual_key_code = Some(def.key_code);
        down.modifiers = Some(mask);
        down.text = text.clone();
        down.unmodified_text = text;
        let mut up = down.clone();
        up.r#type = DispatchKeyEventType::KeyUp;
        up.text = None;
        up.unmodified_text = None;
        self.execute(down).await.map_err(ActionFailure::cdp)?;
        self.execute(up).await.map_err(ActionFailure::cdp)?;
        for m in modifiers.iter().rev() {
            let mdef = chromiumoxide::keys::get_key_definition(m.name()).expect("modifier keys are in the table");
            mask &= !m.bit();
            let mut up = DispatchKeyEventParams::new(DispatchKeyEventType::KeyUp);
            up.key = Some(mdef.key.to_string());
            up.code = Some(mdef.code.to_string());
            up.windows_virtual_key_code = Some(mdef.key_code);
            up.modifiers = Some(mask);
            self.execute(up).await.map_err(ActionFailure::cdp)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Modifier {
    Alt,
    Control,
    Meta,
    Shift,
}

impl Modifier {
    fn bit(self) -> i64 {
        match self {
            Modifier::Alt => 1,
            Modifier::Control => 2,
            Modifier::Meta => 4,
            Modifier::Shift => 8,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Modifier::Alt => "Alt",
            Modifier::Control => "Control",
            Modifier::Meta => "Meta",
            Modifier::Shift => "Shift",
        }
    }
}

/// Splits `Control+Shift+A` into modifiers and the main key. `+` alone is the plus key.
fn parse_chord(chord: &str) -> ActResult<(Vec<Modifier>, &str)> {
    if chord.is_empty() {
        return Err(ActionFailure::invalid("payload: a key such as `Enter` or `Control+A` is required"));
    }
    if chord == "+" {
        return Ok((Vec::new(), "+"));
    }
    let parts: Vec<&str> = chord.split('+').collect();
    let (key, mods) = parts.split_last().expect("split yields at least one part");
    if key.is_empty() {
        return Err(ActionFailure::invalid(format!("payload: `{chord}` has no key after its modifiers")));
    }
    let mut out = Vec::new();
    for m in mods {
        let m = match m.to_ascii_lowercase().as_str() {
            "alt" => Modifier::Alt,
            "control" | "ctrl" => Modifier::Control,
            "meta" | "cmd" | "command" => Modifier::Meta,
            "shift" => Modifier::Shift,
            _ => return Err(ActionFailure::invalid(format!("payload: `{m}` is not a modifier (Alt, Control, Meta, Shift)"))),
        };
        out.push(m);
    }
    Ok((out, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chords_parse() {
        assert_eq!(parse_chord("Enter").unwrap(), (vec![], "Enter"));
        assert_eq!(parse_chord("Control+A").unwrap(), (vec![Modifier::Control], "A"));
        assert_eq!(parse_chord("ctrl+Shift+z").unwrap(), (vec![Modifier::Control, Modifier::Shift], "z"));
        assert_eq!(parse_chord("+").unwrap(), (vec![], "+"));
        assert_eq!(parse_chord("Hyper+A").unwrap_err().code, FailureCode::InvalidArgument);
        assert_eq!(parse_chord("Control+").unwrap_err().code, FailureCode::InvalidArgument);
        assert_eq!(parse_chord("").unwrap_err().code, FailureCode::InvalidArgument);
    }

    #[test]
    fn url_policy() {
        assert!(check_url("http://127.0.0.1:8080/").is_ok());
        assert!(check_url("https://example.test/").is_ok());
        assert!(check_url("about:blank").is_ok());
        assert_eq!(check_url("file:///etc/passwd").unwrap_err().code, FailureCode::BlockedByPolicy);
        assert_eq!(check_url("javascript:alert(1)").unwrap_err().code, FailureCode::BlockedByPolicy);
        assert_eq!(check_url("not a url").unwrap_err().code, FailureCode::InvalidArgument);
    }

    #[test]
    fn click_options_validate() {
        assert_eq!(click_options(&Value::Null).unwrap().1, 1);
        assert_eq!(click_options(&json!({"click_count": 2})).unwrap().1, 2);
        assert!(click_options(&json!({"click_count": 9})).is_err());
        assert!(click_options(&json!({"button": "fourth"})).is_err());
        assert!(click_options(&json!("left")).is_err());
    }
}
