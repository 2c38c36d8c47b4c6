//! What a user does with mouse and keyboard: `click`, `type`, `fill`, `press`, `hover`,
//! `focus`, `select`, `set_input_files`, `scroll`.

use chromiumoxide::cdp::browser_protocol::dom::SetFileInputFilesParams;
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchMouseEventParams, DispatchMouseEventType, InsertTextParams, MouseButton,
};
use chromiumoxide::Page;
use serde_json::{json, Value};
use std::path::Path;

use super::{element, json_result, value};
use crate::actions::{Button, ScrollTo};
use crate::keys::PressChord;
use crate::outcome::Deadline;
use crate::outcome::{ActResult, ActionFailure, ActionOutput, FailureCode};

pub(super) async fn click(
    page: &Page,
    selector: &str,
    button: Button,
    count: i64,
    until: Deadline,
) -> ActResult<ActionOutput> {
    let button = match button {
        Button::Left => MouseButton::Left,
        Button::Right => MouseButton::Right,
        Button::Middle => MouseButton::Middle,
    };
    let el = element(page, selector, until).await?;
    el.scroll_into_view().await.map_err(ActionFailure::cdp)?;
    let point = el
        .clickable_point()
        .await
        .map_err(|e| ActionFailure::new(FailureCode::ElementNotFound, format!("{selector} is not clickable: {e}")))?;
    page.execute(DispatchMouseEventParams::new(DispatchMouseEventType::MouseMoved, point.x, point.y))
        .await
        .map_err(ActionFailure::cdp)?;
    // One press and release per click. If a handler opens a dialog, the release waits behind
    // it and the action ends with DIALOG_OPEN; there is deliberately no fallback click.
    for n in 1..=count {
        for kind in [DispatchMouseEventType::MousePressed, DispatchMouseEventType::MouseReleased] {
            let mut params = DispatchMouseEventParams::new(kind, point.x, point.y);
            params.button = Some(button.clone());
            params.click_count = Some(n);
            page.execute(params).await.map_err(ActionFailure::cdp)?;
        }
    }
    Ok(ActionOutput::default())
}

pub(super) async fn type_text(page: &Page, selector: &str, text: &str, until: Deadline) -> ActResult<ActionOutput> {
    element(page, selector, until).await?.focus().await.map_err(ActionFailure::cdp)?;
    for c in text.chars() {
        let s = c.to_string();
        match chromiumoxide::keys::get_key_definition(&s) {
            Some(_) if c != '\n' => page.press_key_chord(&s).await?,
            _ => {
                page.execute(InsertTextParams::new(s)).await.map_err(ActionFailure::cdp)?;
            }
        }
    }
    Ok(ActionOutput::default())
}

pub(super) async fn fill(page: &Page, selector: &str, text: &str, until: Deadline) -> ActResult<ActionOutput> {
    let el = element(page, selector, until).await?;
    let cleared = el
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
        page.execute(InsertTextParams::new(text)).await.map_err(ActionFailure::cdp)?;
    }
    el.call_js_fn("function() { this.dispatchEvent(new Event('change', {bubbles: true})); }", false)
        .await
        .map_err(ActionFailure::cdp)?;
    Ok(ActionOutput::default())
}

pub(super) async fn press(
    page: &Page,
    selector: Option<&str>,
    chord: &str,
    until: Deadline,
) -> ActResult<ActionOutput> {
    if let Some(selector) = selector {
        element(page, selector, until).await?.focus().await.map_err(ActionFailure::cdp)?;
    }
    page.press_key_chord(chord).await?;
    Ok(ActionOutput::default())
}

pub(super) async fn hover(page: &Page, selector: &str, until: Deadline) -> ActResult<ActionOutput> {
    element(page, selector, until).await?.hover().await.map_err(ActionFailure::cdp)?;
    Ok(ActionOutput::default())
}

pub(super) async fn focus(page: &Page, selector: &str, until: Deadline) -> ActResult<ActionOutput> {
    element(page, selector, until).await?.focus().await.map_err(ActionFailure::cdp)?;
    Ok(ActionOutput::default())
}

pub(super) async fn select(page: &Page, selector: &str, values: &[&str], until: Deadline) -> ActResult<ActionOutput> {
    let el = element(page, selector, until).await?;
    let out = el
        .call_js_fn(
            format!(
                "function() {{ return JSON.stringify((() => {{ if (this.tagName !== 'SELECT') return null; const want = {}; \
                 if (!this.multiple && want.length > 1) return 'multiple'; \
                 const known = Array.from(this.options).map(o => o.value); \
                 const missing = want.filter(v => !known.includes(v)); if (missing.length) return {{missing}}; \
                 for (const o of this.options) o.selected = want.includes(o.value); \
                 this.dispatchEvent(new Event('input', {{bubbles: true}})); \
                 this.dispatchEvent(new Event('change', {{bubbles: true}})); \
                 return Array.from(this.selectedOptions).map(o => o.value); }})()); }}",
                json!(values)
            ),
            false,
        )
        .await
        .map_err(ActionFailure::cdp)?;
    // Objects come back by reference unless stringified; the page hands over JSON text.
    match json_result(out.result.value).unwrap_or(Value::Null) {
        Value::Null => Err(ActionFailure::invalid(format!("selector: {selector} is not a <select>"))),
        Value::String(_) => Err(ActionFailure::invalid("payload: several values for a single <select>")),
        Value::Object(m) => Err(ActionFailure::invalid(format!(
            "payload: no option with value {}",
            m.get("missing").cloned().unwrap_or_default()
        ))),
        selected => Ok(value(selected)),
    }
}

/// Sets files of the session's files directory `dir` on a file input, as a user choosing them
/// would. Each must be a plain file there (opened without following a link, one link only):
/// what a page may have planted in the directory is refused.
pub(super) async fn set_input_files(
    page: &Page,
    dir: Option<&Path>,
    selector: &str,
    names: &[&str],
    until: Deadline,
) -> ActResult<ActionOutput> {
    let dir = dir.ok_or_else(|| ActionFailure::new(FailureCode::Internal, "the session has no files directory"))?;
    let paths = names.iter().map(|name| session_file(dir, name)).collect::<ActResult<Vec<_>>>()?;
    let el = element(page, selector, until).await?;
    let kind = el
        .call_js_fn(
            "function() { if (this.tagName !== 'INPUT' || this.type !== 'file') return 'other'; \
             if (this.multiple) return 'multiple'; return 'single'; }",
            false,
        )
        .await
        .map_err(ActionFailure::cdp)?;
    match kind.result.value.as_ref().and_then(Value::as_str) {
        Some("single") if names.len() > 1 => {
            return Err(ActionFailure::invalid("payload: several files for an input without `multiple`"))
        }
        Some("single" | "multiple") => {}
        _ => return Err(ActionFailure::invalid(format!("selector: {selector} is not an <input type=file>"))),
    }
    if paths.is_empty() {
        // DOM.setFileInputFiles takes no empty list: cleared as a user's cancel would.
        el.call_js_fn(
            "function() { this.value = ''; this.dispatchEvent(new Event('input', {bubbles: true})); \
             this.dispatchEvent(new Event('change', {bubbles: true})); }",
            false,
        )
        .await
        .map_err(ActionFailure::cdp)?;
    } else {
        let set = SetFileInputFilesParams::builder()
            .files(paths)
            .backend_node_id(el.backend_node_id)
            .build()
            .map_err(ActionFailure::invalid)?;
        page.execute(set).await.map_err(ActionFailure::cdp)?;
    }
    Ok(value(json!(names)))
}

/// The path of file `name` of the session's files directory, once it is known to be a plain
/// file of it.
fn session_file(dir: &Path, name: &str) -> ActResult<String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let path = dir.join(name);
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&path);
    match opened.and_then(|f| f.metadata()) {
        Ok(m) if m.file_type().is_file() && m.nlink() == 1 => Ok(path.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ActionFailure::invalid(format!(
            "payload: no file {name:?} among the session's files (upload it with PutFile first)"
        ))),
        _ => Err(ActionFailure::invalid(format!(
            "payload: {name:?} is not a plain file of the session (a link, a directory, or a file with other links)"
        ))),
    }
}

pub(super) async fn scroll(page: &Page, to: ScrollTo<'_>, until: Deadline) -> ActResult<ActionOutput> {
    match to {
        ScrollTo::Element(selector) => {
            element(page, selector, until).await?.scroll_into_view().await.map_err(ActionFailure::cdp)?;
        }
        ScrollTo::Point { x, y } => {
            page.evaluate_expression(format!("window.scrollTo({x}, {y})")).await.map_err(ActionFailure::cdp)?;
        }
    }
    let at = page.evaluate_expression("({x: window.scrollX, y: window.scrollY})").await.map_err(ActionFailure::cdp)?;
    Ok(value(at.value().cloned().unwrap_or(Value::Null)))
}
