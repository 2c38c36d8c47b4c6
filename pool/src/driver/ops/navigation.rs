//! Where the active tab is: `navigate` (via lifecycle events), `back`/`forward`, `reload`,
//! `load_html`, and reading its `url` and `title`.

use chromiumoxide::cdp::browser_protocol::page::{
    GetNavigationHistoryParams, NavigateToHistoryEntryParams, SetDocumentContentParams,
};
use chromiumoxide::Page;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::{poll, value, wait_lifecycle};
use crate::actions::WaitUntil;
use crate::driver::state::{DocAnswer, Tab};
use crate::driver::Driver;
use crate::outcome::{ActResult, ActionFailure, ActionOutput, Deadline, FailureCode};
use crate::sync::lock;

impl Driver {
    /// `url` is a URL or `about:blank` (checked by the parser); the policy is checked here.
    /// Answers the URL the tab is on and the main document's HTTP status (`null` when there
    /// was no HTTP response); with `fail_on_status`, 400..599 is `NAVIGATION_FAILED`.
    pub(crate) async fn navigate(
        &self,
        tab: &Tab,
        url: &str,
        wait_until: WaitUntil,
        fail_on_status: bool,
    ) -> ActResult<ActionOutput> {
        self.check_destination(url).await?;
        let mut lifecycle = self.shared.lifecycle.subscribe();
        let mut statuses = self.shared.doc_status.subscribe();
        let nav =
            self.raw.call(&tab.session, "Page.navigate", json!({ "url": url })).await.map_err(ActionFailure::raw)?;
        if let Some(text) = nav.get("errorText").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            // Our request hook fails what the policy refuses (a redirect hop, say).
            let code = if text.contains("ERR_BLOCKED_BY_CLIENT") {
                FailureCode::BlockedByPolicy
            } else {
                FailureCode::NavigationFailed
            };
            let loader = nav.get("loaderId").and_then(Value::as_str).unwrap_or_default();
            let message = match last_answer(&mut statuses, &tab.session, loader) {
                Some(DocAnswer::Status(status)) => format!("{url}: HTTP status {status} ({text})"),
                // The egress proxy's own words: a proxy that refused, a budget spent...
                Some(DocAnswer::Refused(why)) => format!("{url}: {text}: {why}"),
                // A tunnel (https, wss) the egress proxy refused: Chromium only says it failed.
                None => match self.shared.net.tunnel_refusal(url) {
                    Some(why) => format!("{url}: {text}: {why}"),
                    None => format!("{url}: {text}"),
                },
            };
            return Err(ActionFailure::new(code, message));
        }
        let loader = nav.get("loaderId").and_then(Value::as_str).unwrap_or_default().to_string();
        // A real navigation replaces anything load_html put there.
        lock(&self.shared.loaded_html).remove(&tab.target);
        if let (Some(event), false) = (wait_until.event(), loader.is_empty()) {
            wait_lifecycle(&mut lifecycle, &tab.session, Some(&loader), event).await;
        }
        // The browser's own view: the library's cached URL may still be the last page's.
        let now = current_url(&tab.page).await.ok().filter(|u| !u.is_empty()).unwrap_or_else(|| url.to_string());
        let status = match last_answer(&mut statuses, &tab.session, &loader) {
            Some(DocAnswer::Status(status)) => Some(status),
            _ => None,
        };
        if let Some(code @ 400..=599) = status.filter(|_| fail_on_status) {
            return Err(ActionFailure::new(FailureCode::NavigationFailed, format!("{now}: HTTP status {code}")));
        }
        Ok(value(json!({ "url": now, "status": status })))
    }

    pub(super) async fn history(&self, tab: &Tab, delta: i64, until: Deadline) -> ActResult<ActionOutput> {
        let history = tab.page.execute(GetNavigationHistoryParams::default()).await.map_err(ActionFailure::cdp)?;
        let target = history.result.current_index + delta;
        let Some(entry) = usize::try_from(target).ok().and_then(|i| history.result.entries.get(i)) else {
            let which = if delta < 0 { "previous" } else { "next" };
            return Err(ActionFailure::invalid(format!("no {which} page in this tab's history")));
        };
        let url = entry.url.clone();
        tab.page.execute(NavigateToHistoryEntryParams::new(entry.id)).await.map_err(ActionFailure::cdp)?;
        lock(&self.shared.loaded_html).remove(&tab.target);
        let check = format!("location.href === {} && document.readyState === 'complete'", json!(url));
        poll(&tab.page, &check, until, || format!("history navigation to {url} did not finish"), FailureCode::Timeout)
            .await?;
        Ok(value(json!({ "url": url })))
    }

    pub(super) async fn reload(&self, tab: &Tab) -> ActResult<ActionOutput> {
        let mut lifecycle = self.shared.lifecycle.subscribe();
        self.raw.call(&tab.session, "Page.reload", json!({})).await.map_err(ActionFailure::raw)?;
        lock(&self.shared.loaded_html).remove(&tab.target);
        wait_lifecycle(&mut lifecycle, &tab.session, None, "load").await;
        let now = tab.page.url().await.map_err(ActionFailure::cdp)?.unwrap_or_default();
        Ok(value(json!({ "url": now })))
    }

    /// The size limit (this driver's config) is checked before the shape, as it always was.
    pub(super) async fn load_html(&self, tab: &Tab, html: &str) -> ActResult<ActionOutput> {
        if html.len() > self.cfg.max_html_bytes {
            return Err(ActionFailure::new(
                FailureCode::PayloadTooLarge,
                format!("payload: {} bytes of html exceed the limit of {}", html.len(), self.cfg.max_html_bytes),
            ));
        }
        if !html.trim_start_matches('\u{feff}').trim_start().starts_with('<') {
            return Err(ActionFailure::invalid("payload: does not look like html (it must start with `<`)"));
        }
        let marker = uuid::Uuid::new_v4().simple().to_string();
        self.set_document(tab, html, &marker).await?;
        let url = tab.page.url().await.ok().flatten().unwrap_or_default();
        lock(&self.shared.loaded_html).insert(tab.target.clone(), (html.to_string(), marker, url));
        Ok(value(json!({ "bytes": html.len() })))
    }

    pub(super) async fn set_document(&self, tab: &Tab, html: &str, marker: &str) -> ActResult<()> {
        let frame = tab
            .page
            .mainframe()
            .await
            .map_err(ActionFailure::cdp)?
            .ok_or_else(|| ActionFailure::new(FailureCode::Internal, "the tab has no main frame"))?;
        self.call_tab(tab, SetDocumentContentParams::new(frame, html)).await?;
        self.eval_in(tab, format!("window.__browserpool_html = {}", json!(marker))).await?;
        Ok(())
    }
}

/// The answer to the last response seen for `loader`'s request on `session` (earlier ones
/// were redirects), from statuses sent before the document was let through.
fn last_answer(
    statuses: &mut broadcast::Receiver<(String, String, DocAnswer)>,
    session: &str,
    loader: &str,
) -> Option<DocAnswer> {
    let mut status = None;
    loop {
        match statuses.try_recv() {
            Ok((s, request, answer)) if s == session && request == loader => status = Some(answer),
            Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return status,
        }
    }
}

/// Asked of the browser, not read from the library's cache: an answer proves the browser is
/// alive (the browser process answers, even while the page spins).
pub(super) async fn url(page: &Page) -> ActResult<ActionOutput> {
    Ok(value(json!(current_url(page).await?)))
}

/// The URL the browser says the page is on (`Target.getTargetInfo`).
async fn current_url(page: &Page) -> ActResult<String> {
    use chromiumoxide::cdp::browser_protocol::target::GetTargetInfoParams;
    let info = GetTargetInfoParams::builder().target_id(page.target_id().clone()).build();
    let answer = page.execute(info).await.map_err(ActionFailure::cdp)?;
    Ok(answer.result.target_info.url)
}

pub(super) async fn title(page: &Page) -> ActResult<ActionOutput> {
    Ok(value(json!(page.get_title().await.map_err(ActionFailure::cdp)?.unwrap_or_default())))
}
