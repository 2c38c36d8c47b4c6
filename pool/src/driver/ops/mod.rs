//! The actions themselves, on the active tab (or on the tab list), one module per concern.
//! Each runs inside the deadline and dialog race of [`Driver::run`]; its arguments were parsed
//! by [`Action::parse`], so a handler only does what needs the browser.

use std::time::Duration;

use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::error::CdpError;
use chromiumoxide::{Element, Page};
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::actions::Action;
use crate::driver::state::Tab;
use crate::driver::{ActionCall, Driver};
use crate::outcome::Deadline;
use crate::outcome::{ActResult, ActionFailure, ActionOutput, FailureCode};

mod capture;
mod cookies;
mod dom;
mod input;
mod navigation;
mod select;
mod tabs;

/// How often element and condition waits poll the page.
const POLL: Duration = Duration::from_millis(50);

impl Driver {
    /// Parses a canonical action's arguments and runs its handler. The `match` is exhaustive:
    /// an action in the table without a handler here does not compile.
    pub(crate) async fn dispatch(&self, call: &ActionCall, until: Deadline) -> ActResult<ActionOutput> {
        let action = Action::parse(call.action.kind, &call.selector, &call.payload)?;
        // Runs on the active tab, brought to the front; the answer names that tab.
        macro_rules! on_tab {
            ($tab:ident => $run:expr) => {{
                let ($tab, index) = self.active()?;
                self.bring_to_front(&$tab).await;
                let mut out = $run.await?;
                out.tab_index = index;
                Ok(out)
            }};
        }
        match action {
            // Tab-list actions choose the tab rather than run on it.
            Action::NewTab { url } => self.new_tab(url, until).await,
            Action::SwitchTab { tab } => self.switch_tab(tab).await,
            Action::CloseTab { index } => self.close_tab(index, until).await,
            Action::ListTabs => self.list_tabs().await,
            Action::Navigate { url, wait_until, fail_on_status } => {
                on_tab!(tab => self.navigate(&tab, url, wait_until, fail_on_status))
            }
            Action::Back => on_tab!(tab => self.history(&tab, -1, until)),
            Action::Forward => on_tab!(tab => self.history(&tab, 1, until)),
            Action::Reload => on_tab!(tab => self.reload(&tab)),
            Action::LoadHtml { html } => on_tab!(tab => self.load_html(&tab, html)),
            Action::Url => on_tab!(tab => navigation::url(&tab.page)),
            Action::Title => on_tab!(tab => navigation::title(&tab.page)),
            Action::Click { selector, button, click_count } => {
                on_tab!(tab => input::click(&tab.page, selector, button, click_count, until))
            }
            Action::Type { selector, text } => on_tab!(tab => input::type_text(&tab.page, selector, text, until)),
            Action::Fill { selector, text } => on_tab!(tab => input::fill(&tab.page, selector, text, until)),
            Action::Press { selector, chord } => on_tab!(tab => input::press(&tab.page, selector, chord, until)),
            Action::Hover { selector } => on_tab!(tab => input::hover(&tab.page, selector, until)),
            Action::Focus { selector } => on_tab!(tab => input::focus(&tab.page, selector, until)),
            Action::Select { selector, values } => on_tab!(tab => input::select(&tab.page, selector, &values, until)),
            Action::SetInputFiles { selector, names } => {
                let dir = self.files_dir();
                on_tab!(tab => input::set_input_files(&tab.page, dir.as_deref(), selector, &names, until))
            }
            Action::Scroll { to } => on_tab!(tab => input::scroll(&tab.page, to, until)),
            Action::WaitFor { until: condition } => on_tab!(tab => dom::wait_for(&tab.page, condition, until)),
            Action::Extract { selector, format } => on_tab!(tab => dom::extract(&tab.page, selector, format, until)),
            Action::Attr { selector, name } => on_tab!(tab => dom::attr(&tab.page, selector, name, until)),
            Action::Evaluate { expression } => on_tab!(tab => self.evaluate(&tab, expression)),
            Action::Screenshot { format, quality, region } => {
                on_tab!(tab => self.screenshot(&tab, format, quality, region, until))
            }
            Action::Pdf { options } => on_tab!(tab => self.pdf(&tab, options)),
            Action::SetViewport { viewport } => on_tab!(tab => self.set_viewport_action(&tab, viewport, until)),
            Action::Cookies { op } => on_tab!(tab => self.cookies(&tab, op)),
        }
    }

    /// Runs a CDP command on a tab over the raw connection. chromiumoxide ends every page
    /// command after a fixed 30 s; commands that may rightly take longer (an awaited script, a
    /// document whose scripts run long, a huge capture) go this way, bounded by the action's
    /// own deadline instead.
    pub(crate) async fn call_tab<C: chromiumoxide::Command>(&self, tab: &Tab, cmd: C) -> ActResult<C::Response> {
        let method = cmd.identifier();
        let params = serde_json::to_value(&cmd)
            .map_err(|e| ActionFailure::new(FailureCode::Internal, format!("encode {method}: {e}")))?;
        let result = self.raw.call(&tab.session, &method, params).await.map_err(ActionFailure::raw)?;
        C::response_from_value(result)
            .map_err(|e| ActionFailure::new(FailureCode::Internal, format!("decode the answer to {method}: {e}")))
    }

    /// Evaluates an expression in the tab's page, awaiting a promise; a thrown exception is
    /// `JS_EXCEPTION`.
    pub(crate) async fn eval_in(&self, tab: &Tab, expression: String) -> ActResult<Value> {
        let params = EvaluateParams::builder()
            .expression(expression)
            .await_promise(true)
            .return_by_value(true)
            .build()
            .map_err(ActionFailure::invalid)?;
        let answer = self.call_tab(tab, params).await?;
        if let Some(details) = answer.exception_details {
            return Err(ActionFailure::cdp(CdpError::JavascriptException(Box::new(details))));
        }
        Ok(answer.result.value.unwrap_or(Value::Null))
    }
}

/// What a selector the page refused is told: which one, why when the page said, and the
/// syntaxes that are read.
fn selector_error(msg: &str) -> String {
    let bad = msg.split_once(": '").and_then(|(_, rest)| rest.split_once("' is not a valid selector"));
    match bad {
        Some((selector, rest)) => {
            let why = rest.trim_start_matches(':').trim().trim_end_matches('.');
            let why = match why.split_once("\n") {
                Some((first, _)) => first.trim_end_matches('.'),
                None => why,
            };
            let why = if why.is_empty() || why.starts_with("at ") { String::new() } else { format!(" ({why})") };
            format!(
                "selector: {selector:?} is not a valid selector{why}; selectors are CSS (#id, .class, \
                 tag[attr=value], a > b), or text=Sign in, text=\"exact\", role=button[name=\"Sign in\"], \
                 xpath=//a (or //a), css=..., chained with >>"
            )
        }
        None => format!("selector: {msg}"),
    }
}

/// Polls a boolean expression until it is true or `until` passes.
async fn poll(
    page: &Page,
    check: &str,
    until: Deadline,
    what: impl Fn() -> String,
    code: FailureCode,
) -> ActResult<ActionOutput> {
    loop {
        match page.evaluate_expression(check).await {
            Ok(r) if r.value() == Some(&json!(true)) => return Ok(ActionOutput::default()),
            Ok(_) => {}
            Err(CdpError::JavascriptException(details)) => {
                let msg = ActionFailure::cdp(CdpError::JavascriptException(details)).message;
                return Err(ActionFailure::invalid(selector_error(&msg)));
            }
            // The page may be between documents (navigating); try again.
            Err(_) => {}
        }
        if Instant::now() + POLL > until.at {
            return Err(ActionFailure::new(code, format!("{} {}", what(), until.ran_out())));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `selector` matches, then returns the element.
async fn element(page: &Page, selector: &str, until: Deadline) -> ActResult<Element> {
    let check = select::matches(selector);
    poll(page, &check, until, || format!("no element matches {selector}"), FailureCode::ElementNotFound).await?;
    select::handle(page, selector).await
}

/// Waits for a lifecycle event of our raw session (any loader when `loader` is None).
async fn wait_lifecycle(
    rx: &mut broadcast::Receiver<(String, String, String)>,
    session: &str,
    loader: Option<&str>,
    name: &str,
) {
    loop {
        match rx.recv().await {
            Ok((s, l, n)) if s == session && n == name && loader.is_none_or(|want| want == l) => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Parses a `JSON.stringify` result handed back by the page.
fn json_result(v: Option<Value>) -> Option<Value> {
    v.and_then(|v| v.as_str().and_then(|s| serde_json::from_str(s).ok()))
}

fn value(v: Value) -> ActionOutput {
    ActionOutput { value: v, ..ActionOutput::default() }
}

#[cfg(test)]
mod tests {
    use super::selector_error;

    #[test]
    fn a_refused_selector_is_named_with_what_is_read() {
        let chrome = "SyntaxError: Failed to execute 'querySelector' on 'Document': 'h1[' is not a valid selector.\n    at <anonymous>:1:10";
        let said = selector_error(chrome);
        assert!(said.starts_with(r#"selector: "h1[" is not a valid selector; selectors are CSS"#), "{said}");
        assert!(said.contains("role=button[name=") && said.contains(">>") && !said.contains("<anonymous>"), "{said}");
        let ours = "SyntaxError: 'role=button[' is not a valid selector: write role=NAME or role=NAME[name=\"TEXT\"]";
        let said = selector_error(ours);
        assert!(said.starts_with(r#"selector: "role=button[" is not a valid selector (write role=NAME"#), "{said}");
        assert_eq!(selector_error("TypeError: x"), "selector: TypeError: x");
    }
}
