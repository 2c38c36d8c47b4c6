//! Reading the page and running script in it: `wait_for`, `extract`, `attr`, `evaluate`.

use std::time::Duration;

use chromiumoxide::Page;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{element, poll, value};
use crate::actions::{Condition, ExtractFormat};
use crate::driver::state::Tab;
use crate::driver::Driver;
use crate::outcome::Deadline;
use crate::outcome::{ActResult, ActionFailure, ActionOutput, FailureCode};

pub(super) async fn wait_for(page: &Page, condition: Condition<'_>, until: Deadline) -> ActResult<ActionOutput> {
    match condition {
        Condition::Visible(selector) => {
            let check = format!(
                "(() => {{ const e = {}; if (!e) return false; \
                 const r = e.getBoundingClientRect(); const s = getComputedStyle(e); \
                 return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'; }})()",
                super::select::first(selector)
            );
            poll(page, &check, until, || format!("{selector} did not become visible"), FailureCode::Timeout).await
        }
        Condition::Ms(ms) => {
            if Instant::now() + Duration::from_millis(ms) > until.at {
                return Err(ActionFailure::new(
                    FailureCode::Timeout,
                    format!("a wait of {ms} ms does not fit {}", until.budget()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(ActionOutput::default())
        }
        Condition::Text(text) => {
            let check = format!("(document.body ? document.body.innerText : '').includes({})", json!(text));
            poll(page, &check, until, || format!("text {text:?} did not appear"), FailureCode::Timeout).await
        }
        Condition::Url(url) => {
            let check = format!("location.href.includes({})", json!(url));
            poll(page, &check, until, || format!("url did not come to contain {url:?}"), FailureCode::Timeout).await
        }
    }
}

pub(super) async fn extract(
    page: &Page,
    selector: Option<&str>,
    format: ExtractFormat<'_>,
    until: Deadline,
) -> ActResult<ActionOutput> {
    let selector = selector.unwrap_or("body");
    let getter = match format {
        ExtractFormat::Text => "function() { return this.innerText ?? this.textContent; }".to_string(),
        ExtractFormat::Html => "function() { return this.outerHTML; }".to_string(),
        ExtractFormat::Value => "function() { return this.value ?? null; }".to_string(),
        ExtractFormat::Attr(name) => format!("function() {{ return this.getAttribute({}); }}", json!(name)),
    };
    let out = element(page, selector, until).await?.call_js_fn(getter, false).await.map_err(ActionFailure::cdp)?;
    Ok(value(out.result.value.unwrap_or(Value::Null)))
}

pub(super) async fn attr(page: &Page, selector: &str, name: &str, until: Deadline) -> ActResult<ActionOutput> {
    let out = element(page, selector, until)
        .await?
        .call_js_fn(format!("function() {{ return this.getAttribute({}); }}", json!(name)), false)
        .await
        .map_err(ActionFailure::cdp)?;
    Ok(value(out.result.value.unwrap_or(Value::Null)))
}

impl Driver {
    pub(super) async fn evaluate(&self, tab: &Tab, expression: &str) -> ActResult<ActionOutput> {
        Ok(value(self.eval_in(tab, expression.to_string()).await?))
    }
}
