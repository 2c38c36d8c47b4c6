//! The tab list: `new_tab` (under `--max-tabs`), `switch_tab`, `close_tab`, `list_tabs`, and
//! bringing the active tab to the front.

use chromiumoxide::cdp::browser_protocol::page::BringToFrontParams;
use chromiumoxide::cdp::browser_protocol::target::CloseTargetParams;
use serde_json::{json, Value};

use crate::actions::{TabRef, WaitUntil};
use crate::driver::apply_viewport;
use crate::driver::state::Tab;
use crate::driver::Driver;
use crate::outcome::{ActResult, ActionFailure, ActionOutput, Deadline, FailureCode};
use crate::sync::lock;

impl Driver {
    /// Puts `tab` in front unless it already is (one CDP call, only after another tab came up).
    pub(super) async fn bring_to_front(&self, tab: &Tab) {
        if lock(&self.shared.front).as_ref() == Some(&tab.target) {
            return;
        }
        if tab.page.execute(BringToFrontParams::default()).await.is_ok() {
            *lock(&self.shared.front) = Some(tab.target.clone());
        }
    }

    pub(super) async fn new_tab(&self, url: Option<&str>, until: Deadline) -> ActResult<ActionOutput> {
        let url = url.unwrap_or("about:blank");
        self.check_url(url)?;
        let cap = self.cfg.max_tabs;
        if lock(&self.shared.tabs).open() >= cap {
            return Err(crate::driver::state::tab_cap(cap));
        }
        // A popup may take the last place meanwhile; the watcher then closes this page.
        let mut params = chromiumoxide::cdp::browser_protocol::target::CreateTargetParams::new("about:blank");
        params.browser_context_id = self.shared.context.clone().map(Into::into);
        let page = match self.browser.new_page(params).await {
            Ok(page) => page,
            Err(_) if lock(&self.shared.tabs).open() >= cap => return Err(crate::driver::state::tab_cap(cap)),
            Err(e) => return Err(ActionFailure::cdp(e)),
        };
        let target = page.target_id().clone();
        let registered = self
            .when_tabs(until.at, |tabs| match tabs.list.iter().position(|t| t.target == target) {
                Some(i) => Some(Ok(i)),
                None => tabs.refused.contains(&target).then_some(Err(())),
            })
            .await;
        let index = match registered {
            Some(Ok(index)) => index,
            Some(Err(())) => return Err(crate::driver::state::tab_cap(cap)),
            None => return Err(ActionFailure::new(FailureCode::Timeout, "the new tab did not come up in time")),
        };
        apply_viewport(&page, self.current_viewport()).await?;
        lock(&self.shared.tabs).active = index;
        let (tab, _) = self.active()?;
        if url != "about:blank" {
            self.navigate(&tab, url, WaitUntil::Load, false).await?;
        }
        Ok(ActionOutput {
            value: json!({ "tab_index": index, "url": url }),
            tab_index: index as i32,
            ..ActionOutput::default()
        })
    }

    pub(super) async fn switch_tab(&self, tab: TabRef<'_>) -> ActResult<ActionOutput> {
        let index = match tab {
            TabRef::Index(i) => {
                let len = lock(&self.shared.tabs).list.len();
                if i as usize >= len {
                    return Err(ActionFailure::invalid(format!("payload: no tab {i}; {len} tab(s) open")));
                }
                i as usize
            }
            TabRef::Matching(needle) => {
                let tabs: Vec<Tab> = lock(&self.shared.tabs).list.clone();
                let mut found = None;
                for (i, tab) in tabs.iter().enumerate() {
                    let url = tab.page.url().await.ok().flatten().unwrap_or_default();
                    let title = tab.page.get_title().await.ok().flatten().unwrap_or_default();
                    if url.contains(needle) || title.contains(needle) {
                        found = Some(i);
                        break;
                    }
                }
                found.ok_or_else(|| {
                    ActionFailure::invalid(format!("payload: no tab's title or url contains {needle:?}"))
                })?
            }
        };
        let tab = {
            let mut tabs = lock(&self.shared.tabs);
            tabs.active = index;
            tabs.list[index].clone()
        };
        self.bring_to_front(&tab).await;
        let url = tab.page.url().await.ok().flatten().unwrap_or_default();
        let title = tab.page.get_title().await.ok().flatten().unwrap_or_default();
        Ok(ActionOutput {
            value: json!({ "tab_index": index, "url": url, "title": title }),
            tab_index: index as i32,
            ..Default::default()
        })
    }

    /// Closes tab `index`, the active one when `None`.
    pub(super) async fn close_tab(&self, index: Option<usize>, until: Deadline) -> ActResult<ActionOutput> {
        let (len, active) = {
            let tabs = lock(&self.shared.tabs);
            (tabs.list.len(), tabs.active)
        };
        let index = index.unwrap_or(active);
        if index >= len {
            return Err(ActionFailure::invalid(format!("payload: no tab {index}; {len} tab(s) open")));
        }
        if len == 1 {
            return Err(ActionFailure::invalid("the last tab cannot be closed; release the session instead"));
        }
        let target = lock(&self.shared.tabs).list[index].target.clone();
        self.browser.execute(CloseTargetParams::new(target.clone())).await.map_err(ActionFailure::cdp)?;
        // Wait for the watcher to drop it, so indices are settled when we answer.
        let gone = |tabs: &crate::driver::state::Tabs| (!tabs.list.iter().any(|t| t.target == target)).then_some(());
        if self.when_tabs(until.at, gone).await.is_none() {
            return Err(ActionFailure::new(FailureCode::Timeout, "the tab did not close in time"));
        }
        let (count, active) = {
            let tabs = lock(&self.shared.tabs);
            (tabs.list.len(), tabs.active)
        };
        Ok(ActionOutput {
            value: json!({ "closed": index, "tabs": count, "active": active }),
            tab_index: active as i32,
            ..Default::default()
        })
    }

    pub(super) async fn list_tabs(&self) -> ActResult<ActionOutput> {
        let (tabs, active) = {
            let t = lock(&self.shared.tabs);
            (t.list.clone(), t.active)
        };
        let mut out = Vec::new();
        for (i, tab) in tabs.iter().enumerate() {
            let url = tab.page.url().await.ok().flatten().unwrap_or_default();
            let title = tab.page.get_title().await.ok().flatten().unwrap_or_default();
            out.push(json!({ "index": i, "url": url, "title": title, "active": i == active }));
        }
        Ok(ActionOutput { value: Value::Array(out), tab_index: active as i32, ..Default::default() })
    }
}
