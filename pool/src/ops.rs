//! The actions themselves, on the active tab (or on the tab list). Each runs inside the
//! deadline and dialog race of [`Driver::run`].

use std::time::Duration;

use base64::Engine;
use chromiumoxide::cdp::browser_protocol::emulation::{SetDeviceMetricsOverrideParams, SetTouchEmulationEnabledParams};
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchMouseEventParams, DispatchMouseEventType, InsertTextParams, MouseButton,
};
use chromiumoxide::cdp::browser_protocol::page::{
    BringToFrontParams, CaptureScreenshotFormat, CaptureScreenshotParams, GetLayoutMetricsParams,
    GetNavigationHistoryParams, NavigateToHistoryEntryParams, PrintToPdfParams, SetDocumentContentParams,
    Viewport as Clip,
};
use chromiumoxide::cdp::browser_protocol::target::CloseTargetParams;
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::error::CdpError;
use chromiumoxide::{Element, Page};
use serde_json::{json, Map, Value};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::driver::{
    lock, ActResult, ActionCall, ActionFailure, ActionOutput, Driver, FailureCode, Tab, Viewport, MAX_SIDE,
};
use crate::keys::PressChord;

/// How often element and condition waits poll the page.
const POLL: Duration = Duration::from_millis(50);

impl Driver {
    /// Routes a canonical action to its implementation.
    pub(crate) async fn dispatch(&self, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        // Tab-list actions first: they choose the tab rather than run on it.
        match call.action.name {
            "new_tab" => return self.new_tab(&call.payload, until).await,
            "switch_tab" => return self.switch_tab(&call.payload).await,
            "close_tab" => return self.close_tab(&call.payload, until).await,
            "list_tabs" => return self.list_tabs().await,
            _ => {}
        }
        let (tab, index) = self.active()?;
        self.bring_to_front(&tab).await;
        let page = &tab.page;
        let mut out = match call.action.name {
            "navigate" => self.navigate(&tab, &call.payload).await?,
            "back" => self.history(&tab, -1, until).await?,
            "forward" => self.history(&tab, 1, until).await?,
            "reload" => self.reload(&tab).await?,
            "click" => click(page, call, until).await?,
            "type" => type_text(page, call, until).await?,
            "fill" => fill(page, call, until).await?,
            "press" => press(page, call, until).await?,
            "hover" => {
                element(page, require_selector(call)?, until).await?.hover().await.map_err(ActionFailure::cdp)?;
                ActionOutput::default()
            }
            "focus" => {
                element(page, require_selector(call)?, until).await?.focus().await.map_err(ActionFailure::cdp)?;
                ActionOutput::default()
            }
            "select" => select(page, call, until).await?,
            "scroll" => scroll(page, call, until).await?,
            "wait_for" => wait_for(page, call, until).await?,
            "extract" => extract(page, call, until).await?,
            "attr" => attr(page, call, until).await?,
            "evaluate" => self.evaluate(&tab, &call.payload).await?,
            "screenshot" => self.screenshot(&tab, call, until).await?,
            "pdf" => self.pdf(&tab, &call.payload).await?,
            "set_viewport" => self.set_viewport_action(&tab, &call.payload, until).await?,
            "load_html" => self.load_html(&tab, &call.payload).await?,
            "cookies" => self.cookies(&tab, &call.payload).await?,
            "url" => value(json!(page.url().await.map_err(ActionFailure::cdp)?.unwrap_or_default())),
            "title" => value(json!(page.get_title().await.map_err(ActionFailure::cdp)?.unwrap_or_default())),
            other => return Err(ActionFailure::new(FailureCode::Internal, format!("no handler for `{other}`"))),
        };
        out.tab_index = index;
        Ok(out)
    }

    /// Puts `tab` in front unless it already is (one CDP call, only after another tab came up).
    async fn bring_to_front(&self, tab: &Tab) {
        if lock(&self.shared.front).as_ref() == Some(&tab.target) {
            return;
        }
        if tab.page.execute(BringToFrontParams::default()).await.is_ok() {
            *lock(&self.shared.front) = Some(tab.target.clone());
        }
    }

    pub(crate) async fn navigate(&self, tab: &Tab, payload: &Value) -> ActResult<ActionOutput> {
        let (url, wait_until) = match payload {
            Value::String(url) => (url.clone(), "load".to_string()),
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
                (url.to_string(), wait.to_string())
            }
            _ => return Err(ActionFailure::invalid("payload: a url string or {url, wait_until} is required")),
        };
        if url::Url::parse(&url).is_err() && url != "about:blank" {
            return Err(ActionFailure::invalid(format!("payload.url: {url:?} is not a url")));
        }
        self.check_destination(&url).await?;
        let event = match wait_until.as_str() {
            "load" => Some("load"),
            "domcontentloaded" => Some("DOMContentLoaded"),
            "networkidle" => Some("networkIdle"),
            "none" => None,
            other => {
                return Err(ActionFailure::invalid(format!(
                    "payload.wait_until: `{other}` is not one of load, domcontentloaded, networkidle, none"
                )))
            }
        };
        let mut lifecycle = self.shared.lifecycle.subscribe();
        let nav =
            self.raw.call(&tab.session, "Page.navigate", json!({ "url": url })).await.map_err(ActionFailure::raw)?;
        if let Some(text) = nav.get("errorText").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            // Our request hook fails what the policy refuses (a redirect hop, say).
            let code = if text.contains("ERR_BLOCKED_BY_CLIENT") {
                FailureCode::BlockedByPolicy
            } else {
                FailureCode::NavigationFailed
            };
            return Err(ActionFailure::new(code, format!("{url}: {text}")));
        }
        let loader = nav.get("loaderId").and_then(Value::as_str).unwrap_or_default().to_string();
        // A real navigation replaces anything load_html put there.
        lock(&self.shared.loaded_html).remove(&tab.target);
        if let (Some(event), false) = (event, loader.is_empty()) {
            wait_lifecycle(&mut lifecycle, &tab.session, Some(&loader), event).await;
        }
        let now = tab.page.url().await.map_err(ActionFailure::cdp)?.unwrap_or(url);
        Ok(value(json!({ "url": now })))
    }

    /// `cookies {op: get|set|clear, cookies}` on this session's browser.
    async fn cookies(&self, tab: &Tab, payload: &Value) -> ActResult<ActionOutput> {
        let op = match payload {
            Value::Null => "get",
            Value::String(op) => op.as_str(),
            Value::Object(m) => m.get("op").and_then(Value::as_str).unwrap_or("get"),
            _ => return Err(ActionFailure::invalid("payload: {op: get|set|clear, cookies: [...]}")),
        };
        match op {
            "get" => {
                let list: Vec<Value> = self
                    .all_cookies()
                    .await?
                    .into_iter()
                    .map(|c| {
                        json!({ "name": c.name, "value": c.value, "domain": c.domain, "path": c.path,
                        "expires": c.expires, "http_only": c.http_only, "secure": c.secure, "same_site": c.same_site })
                    })
                    .collect();
                Ok(value(Value::Array(list)))
            }
            "clear" => {
                let n = self.all_cookies().await?.len();
                self.replace_cookies(&[]).await?;
                Ok(value(json!({ "cleared": n })))
            }
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
                let page_url = tab.page.url().await.ok().flatten().unwrap_or_default();
                let page_origin = crate::context::normalize_origin(&page_url).ok();
                let mut set = Vec::with_capacity(list.len());
                for (i, c) in list.iter().enumerate() {
                    let (cookie, origin) = crate::context::cookie_from_payload(c, i, page_origin.as_deref())?;
                    crate::context::validate_cookie(&cookie, i)?;
                    // A tenant must not plant cookies where its pages may not go.
                    self.check_field(&format!("cookies[{i}]"), &origin)?;
                    self.check_cookie_domain(&cookie, i)?;
                    set.push((cookie, origin));
                }
                let mut jar: Vec<(crate::context::CookieRecord, String)> = self
                    .all_cookies()
                    .await?
                    .into_iter()
                    .filter(|old| {
                        !set.iter()
                            .any(|(new, _)| (&new.name, &new.domain, &new.path) == (&old.name, &old.domain, &old.path))
                    })
                    .map(crate::context::anchored_at_domain)
                    .collect();
                let n = set.len();
                jar.extend(set);
                self.replace_cookies(&jar).await?;
                Ok(value(json!({ "set": n })))
            }
            other => Err(ActionFailure::invalid(format!("payload.op: `{other}` is not get, set or clear"))),
        }
    }

    async fn history(&self, tab: &Tab, delta: i64, until: Instant) -> ActResult<ActionOutput> {
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

    async fn reload(&self, tab: &Tab) -> ActResult<ActionOutput> {
        let mut lifecycle = self.shared.lifecycle.subscribe();
        self.raw.call(&tab.session, "Page.reload", json!({})).await.map_err(ActionFailure::raw)?;
        lock(&self.shared.loaded_html).remove(&tab.target);
        wait_lifecycle(&mut lifecycle, &tab.session, None, "load").await;
        let now = tab.page.url().await.map_err(ActionFailure::cdp)?.unwrap_or_default();
        Ok(value(json!({ "url": now })))
    }

    async fn new_tab(&self, payload: &Value, until: Instant) -> ActResult<ActionOutput> {
        let url = match payload {
            Value::Null => "about:blank".to_string(),
            Value::String(s) if s.is_empty() => "about:blank".to_string(),
            Value::String(s) => s.clone(),
            Value::Object(m) if m.get("url").is_some_and(Value::is_string) => {
                m["url"].as_str().unwrap_or_default().to_string()
            }
            _ => return Err(ActionFailure::invalid("payload: an optional url string")),
        };
        self.check_url(&url)?;
        let cap = self.cfg.max_tabs;
        if lock(&self.shared.tabs).open() >= cap {
            return Err(crate::driver::tab_cap(cap));
        }
        // A popup may take the last place meanwhile; the watcher then closes this page.
        let page = match self.browser.new_page("about:blank").await {
            Ok(page) => page,
            Err(_) if lock(&self.shared.tabs).open() >= cap => return Err(crate::driver::tab_cap(cap)),
            Err(e) => return Err(ActionFailure::cdp(e)),
        };
        let target = page.target_id().clone();
        let registered = self
            .when_tabs(until, |tabs| match tabs.list.iter().position(|t| t.target == target) {
                Some(i) => Some(Ok(i)),
                None => tabs.refused.contains(&target).then_some(Err(())),
            })
            .await;
        let index = match registered {
            Some(Ok(index)) => index,
            Some(Err(())) => return Err(crate::driver::tab_cap(cap)),
            None => return Err(ActionFailure::new(FailureCode::Timeout, "the new tab did not come up in time")),
        };
        apply_viewport(&page, self.current_viewport()).await?;
        lock(&self.shared.tabs).active = index;
        let (tab, _) = self.active()?;
        if url != "about:blank" {
            self.navigate(&tab, &json!(url)).await?;
        }
        Ok(ActionOutput {
            value: json!({ "tab_index": index, "url": url }),
            tab_index: index as i32,
            ..ActionOutput::default()
        })
    }

    async fn switch_tab(&self, payload: &Value) -> ActResult<ActionOutput> {
        let index = match payload {
            Value::Number(n) => {
                let i = n.as_u64().ok_or_else(|| {
                    ActionFailure::invalid(format!("payload: tab index {n} is not a non-negative integer"))
                })?;
                let len = lock(&self.shared.tabs).list.len();
                if i as usize >= len {
                    return Err(ActionFailure::invalid(format!("payload: no tab {i}; {len} tab(s) open")));
                }
                i as usize
            }
            Value::String(needle) if !needle.is_empty() => {
                let tabs: Vec<Tab> = lock(&self.shared.tabs).list.clone();
                let mut found = None;
                for (i, tab) in tabs.iter().enumerate() {
                    let url = tab.page.url().await.ok().flatten().unwrap_or_default();
                    let title = tab.page.get_title().await.ok().flatten().unwrap_or_default();
                    if url.contains(needle.as_str()) || title.contains(needle.as_str()) {
                        found = Some(i);
                        break;
                    }
                }
                found.ok_or_else(|| {
                    ActionFailure::invalid(format!("payload: no tab's title or url contains {needle:?}"))
                })?
            }
            _ => return Err(ActionFailure::invalid("payload: a tab index (number) or a title/url substring (string)")),
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

    async fn close_tab(&self, payload: &Value, until: Instant) -> ActResult<ActionOutput> {
        let (len, active) = {
            let tabs = lock(&self.shared.tabs);
            (tabs.list.len(), tabs.active)
        };
        let index = match payload {
            Value::Null => active,
            Value::Number(n) => {
                n.as_u64().map(|i| i as usize).ok_or_else(|| ActionFailure::invalid("payload: a tab index"))?
            }
            _ => return Err(ActionFailure::invalid("payload: an optional tab index (number)")),
        };
        if index >= len {
            return Err(ActionFailure::invalid(format!("payload: no tab {index}; {len} tab(s) open")));
        }
        if len == 1 {
            return Err(ActionFailure::invalid("the last tab cannot be closed; release the session instead"));
        }
        let target = lock(&self.shared.tabs).list[index].target.clone();
        self.browser.execute(CloseTargetParams::new(target.clone())).await.map_err(ActionFailure::cdp)?;
        // Wait for the watcher to drop it, so indices are settled when we answer.
        let gone = |tabs: &crate::driver::Tabs| (!tabs.list.iter().any(|t| t.target == target)).then_some(());
        if self.when_tabs(until, gone).await.is_none() {
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

    async fn list_tabs(&self) -> ActResult<ActionOutput> {
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

    async fn set_viewport_action(&self, tab: &Tab, payload: &Value, until: Instant) -> ActResult<ActionOutput> {
        let v = parse_viewport(payload)?;
        // Force a re-apply even if equal: cheap, and the caller asked for it.
        self.set_viewport(v, until.saturating_duration_since(Instant::now())).await?;
        apply_viewport(&tab.page, v).await?;
        // State recreated by the emulation change must not lose load_html content.
        let kept = lock(&self.shared.loaded_html).get(&tab.target).cloned();
        if let Some((html, marker, loaded_over)) = kept {
            // A link click (or any navigation) since load_html replaced the document: forget it.
            let now = tab.page.url().await.ok().flatten().unwrap_or_default();
            if now != loaded_over {
                lock(&self.shared.loaded_html).remove(&tab.target);
                return Ok(value(
                    json!({ "width": v.width, "height": v.height, "scale": v.scale, "mobile": v.mobile }),
                ));
            }
            let present = tab
                .page
                .evaluate_expression(format!("window.__browserpool_html === {}", json!(marker)))
                .await
                .ok()
                .and_then(|r| r.value().cloned())
                == Some(json!(true));
            if !present {
                self.set_document(tab, &html, &marker).await?;
            }
        }
        Ok(value(json!({ "width": v.width, "height": v.height, "scale": v.scale, "mobile": v.mobile })))
    }

    async fn load_html(&self, tab: &Tab, payload: &Value) -> ActResult<ActionOutput> {
        let html = payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: an html string is required"))?;
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

    async fn set_document(&self, tab: &Tab, html: &str, marker: &str) -> ActResult<()> {
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

    async fn screenshot(&self, tab: &Tab, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
        let page = &tab.page;
        let opts = match &call.payload {
            Value::Null => Map::new(),
            Value::Object(m) => m.clone(),
            Value::String(f) => Map::from_iter([("format".to_string(), json!(f))]),
            _ => return Err(ActionFailure::invalid("payload: screenshot options {full_page, clip, format, quality}")),
        };
        for key in opts.keys() {
            if !["full_page", "clip", "format", "quality"].contains(&key.as_str()) {
                return Err(ActionFailure::invalid(format!("payload.{key}: unknown screenshot option")));
            }
        }
        let format = match opts.get("format").and_then(Value::as_str).unwrap_or("png") {
            "png" => CaptureScreenshotFormat::Png,
            "jpeg" | "jpg" => CaptureScreenshotFormat::Jpeg,
            other => return Err(ActionFailure::invalid(format!("payload.format: `{other}` is not png or jpeg"))),
        };
        let quality = match opts.get("quality") {
            None | Some(Value::Null) => None,
            Some(q) => match q.as_i64() {
                Some(q @ 0..=100) if format == CaptureScreenshotFormat::Jpeg => Some(q),
                Some(0..=100) => return Err(ActionFailure::invalid("payload.quality: only applies to jpeg")),
                _ => return Err(ActionFailure::invalid(format!("payload.quality: {q} is not 0..100"))),
            },
        };
        let full_page = opts.get("full_page").and_then(Value::as_bool).unwrap_or(false);
        let clip_opt = opts.get("clip").filter(|c| !c.is_null());
        if clip_opt.is_some() && !call.selector.is_empty() {
            return Err(ActionFailure::invalid(
                "payload.clip: conflicts with a selector (element crop); give one or the other",
            ));
        }
        if clip_opt.is_some() && full_page {
            return Err(ActionFailure::invalid("payload.clip: conflicts with full_page"));
        }
        let scale = self.current_viewport().scale;
        let mut clip: Option<Clip> = None;
        if let Some(c) = clip_opt {
            let num = |k: &str| {
                c.get(k).and_then(Value::as_f64).filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| {
                    ActionFailure::invalid(format!("payload.clip.{k}: a non-negative number is required"))
                })
            };
            let (x, y, w, h) = (num("x")?, num("y")?, num("width")?, num("height")?);
            if w < 1.0 || h < 1.0 {
                return Err(ActionFailure::invalid("payload.clip: width and height must be at least 1"));
            }
            clip = Some(Clip { x, y, width: w, height: h, scale: 1.0 });
        } else if !call.selector.is_empty() {
            let el = element(page, &call.selector, until).await?;
            el.scroll_into_view().await.map_err(ActionFailure::cdp)?;
            let rect = el
                .call_js_fn(
                    "function() { const r = this.getBoundingClientRect(); \
                     return JSON.stringify([r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]); }",
                    false,
                )
                .await
                .map_err(ActionFailure::cdp)?;
            let r: Vec<f64> =
                json_result(rect.result.value).and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default();
            if r.len() != 4 || r[2] < 1.0 || r[3] < 1.0 {
                return Err(ActionFailure::new(
                    FailureCode::ElementNotFound,
                    format!("{} has no visible box", call.selector),
                ));
            }
            clip = Some(Clip { x: r[0], y: r[1], width: r[2], height: r[3], scale: 1.0 });
        } else if full_page {
            let metrics = page.execute(GetLayoutMetricsParams::default()).await.map_err(ActionFailure::cdp)?;
            let size = &metrics.result.css_content_size;
            clip = Some(Clip { x: 0.0, y: 0.0, width: size.width.ceil(), height: size.height.ceil(), scale: 1.0 });
        }
        if let Some(c) = &clip {
            let (w, h) = ((c.width * scale).ceil(), (c.height * scale).ceil());
            if w > MAX_SIDE as f64 || h > MAX_SIDE as f64 {
                return Err(ActionFailure::new(
                    FailureCode::PayloadTooLarge,
                    format!("screenshot of {w}x{h} px exceeds {MAX_SIDE} px a side"),
                ));
            }
        }
        let mut params = CaptureScreenshotParams::builder().format(format.clone()).build();
        params.quality = quality;
        if let Some(c) = clip {
            params.clip = Some(c);
            params.capture_beyond_viewport = Some(true);
        }
        // On chromiumoxide's session, whose emulated screen the capture must use (emulation is
        // per DevTools session); so capped at its 30 s, far past any real capture.
        let shot = page.execute(params).await.map_err(ActionFailure::cdp)?;
        let data = base64::engine::general_purpose::STANDARD
            .decode(AsRef::<str>::as_ref(&shot.result.data))
            .map_err(|e| ActionFailure::new(FailureCode::Internal, format!("screenshot data: {e}")))?;
        let mime = if format == CaptureScreenshotFormat::Jpeg { "image/jpeg" } else { "image/png" };
        Ok(ActionOutput { data, mime_type: mime.into(), ..Default::default() })
    }
}

/// Applies the emulated screen to one page.
pub(crate) async fn apply_viewport(page: &Page, v: Viewport) -> ActResult<()> {
    page.execute(SetDeviceMetricsOverrideParams::new(v.width, v.height, v.scale, v.mobile))
        .await
        .map_err(ActionFailure::cdp)?;
    page.execute(SetTouchEmulationEnabledParams::new(v.mobile)).await.map_err(ActionFailure::cdp)?;
    Ok(())
}

/// Parses and validates `{width, height, scale, mobile}`.
pub fn parse_viewport(payload: &Value) -> ActResult<Viewport> {
    let map = payload
        .as_object()
        .ok_or_else(|| ActionFailure::invalid("payload: {width, height, scale, mobile} is required"))?;
    let side = |k: &str| -> ActResult<u32> {
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

fn require_selector(call: &ActionCall) -> ActResult<&str> {
    if call.selector.trim().is_empty() {
        return Err(ActionFailure::invalid(format!("selector: {} needs a css selector", call.action.name)));
    }
    Ok(&call.selector)
}

fn require_text(payload: &Value) -> ActResult<&str> {
    payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: a string is required"))
}

async fn click(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    let selector = require_selector(call)?;
    let (button, count) = click_options(&call.payload)?;
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

async fn type_text(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    let selector = require_selector(call)?;
    let text = require_text(&call.payload)?;
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

async fn fill(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    let selector = require_selector(call)?;
    let text = require_text(&call.payload)?;
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

async fn press(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    let chord = require_text(&call.payload)?;
    if !call.selector.is_empty() {
        element(page, &call.selector, until).await?.focus().await.map_err(ActionFailure::cdp)?;
    }
    page.press_key_chord(chord).await?;
    Ok(ActionOutput::default())
}

async fn select(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    let selector = require_selector(call)?;
    let values: Vec<String> = match &call.payload {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| ActionFailure::invalid("payload: a value or a list of value strings"))?,
        _ => return Err(ActionFailure::invalid("payload: a value or a list of value strings")),
    };
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

async fn scroll(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    if !call.selector.is_empty() {
        element(page, &call.selector, until).await?.scroll_into_view().await.map_err(ActionFailure::cdp)?;
    } else {
        let (x, y) = match &call.payload {
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
        page.evaluate_expression(format!("window.scrollTo({x}, {y})")).await.map_err(ActionFailure::cdp)?;
    }
    let at = page.evaluate_expression("({x: window.scrollX, y: window.scrollY})").await.map_err(ActionFailure::cdp)?;
    Ok(value(at.value().cloned().unwrap_or(Value::Null)))
}

async fn wait_for(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    if !call.selector.is_empty() {
        let check = format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return false; \
             const r = e.getBoundingClientRect(); const s = getComputedStyle(e); \
             return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'; }})()",
            json!(call.selector)
        );
        return poll(page, &check, until, || format!("{} did not become visible", call.selector), FailureCode::Timeout)
            .await;
    }
    match &call.payload {
        Value::Object(map) if map.contains_key("ms") => {
            let ms = map["ms"]
                .as_u64()
                .ok_or_else(|| ActionFailure::invalid("payload.ms: a number of milliseconds is required"))?;
            if Instant::now() + Duration::from_millis(ms) > until {
                return Err(ActionFailure::new(
                    FailureCode::Timeout,
                    format!("wait of {ms} ms exceeds the action timeout"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(ActionOutput::default())
        }
        Value::Object(map) if map.contains_key("text") => {
            let text =
                map["text"].as_str().ok_or_else(|| ActionFailure::invalid("payload.text: a string is required"))?;
            let check = format!("(document.body ? document.body.innerText : '').includes({})", json!(text));
            poll(page, &check, until, || format!("text {text:?} did not appear"), FailureCode::Timeout).await
        }
        Value::Object(map) if map.contains_key("url") => {
            let url = map["url"].as_str().ok_or_else(|| ActionFailure::invalid("payload.url: a string is required"))?;
            let check = format!("location.href.includes({})", json!(url));
            poll(page, &check, until, || format!("url did not come to contain {url:?}"), FailureCode::Timeout).await
        }
        _ => Err(ActionFailure::invalid("wait_for needs a selector, or a payload {ms}, {text} or {url}")),
    }
}

async fn extract(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    let selector = if call.selector.is_empty() { "body" } else { call.selector.as_str() };
    let format = match &call.payload {
        Value::Null => "text".to_string(),
        Value::String(s) if s.is_empty() => "text".to_string(),
        Value::String(s) => s.clone(),
        Value::Object(map) => map.get("format").and_then(Value::as_str).unwrap_or("text").to_string(),
        _ => {
            return Err(ActionFailure::invalid("payload: a format string (text, html, value, attr:<name>) is expected"))
        }
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
    let out = element(page, selector, until).await?.call_js_fn(getter, false).await.map_err(ActionFailure::cdp)?;
    Ok(value(out.result.value.unwrap_or(Value::Null)))
}

async fn attr(page: &Page, call: &ActionCall, until: Instant) -> ActResult<ActionOutput> {
    let selector = require_selector(call)?;
    let name = match &call.payload {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Object(m) if m.get("name").is_some_and(Value::is_string) => {
            m["name"].as_str().unwrap_or_default().to_string()
        }
        _ => return Err(ActionFailure::invalid("payload: an attribute name string is required")),
    };
    let out = element(page, selector, until)
        .await?
        .call_js_fn(format!("function() {{ return this.getAttribute({}); }}", json!(name)), false)
        .await
        .map_err(ActionFailure::cdp)?;
    Ok(value(out.result.value.unwrap_or(Value::Null)))
}

impl Driver {
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

    async fn evaluate(&self, tab: &Tab, payload: &Value) -> ActResult<ActionOutput> {
        let expression = match payload {
            Value::String(s) if !s.trim().is_empty() => s.clone(),
            _ => return Err(ActionFailure::invalid("payload: a JavaScript expression string is required")),
        };
        Ok(value(self.eval_in(tab, expression).await?))
    }

    async fn pdf(&self, tab: &Tab, payload: &Value) -> ActResult<ActionOutput> {
        let opts = match payload {
            Value::Null => Map::new(),
            Value::Object(m) => m.clone(),
            _ => return Err(ActionFailure::invalid("payload: optional print options object")),
        };
        let mut params = PrintToPdfParams::default();
        for (k, v) in &opts {
            let bad = || ActionFailure::invalid(format!("payload.{k}: {v} is not valid"));
            match k.as_str() {
                "landscape" => params.landscape = Some(v.as_bool().ok_or_else(bad)?),
                "print_background" => params.print_background = Some(v.as_bool().ok_or_else(bad)?),
                "scale" => params.scale = Some(v.as_f64().filter(|s| (0.1..=2.0).contains(s)).ok_or_else(bad)?),
                "paper_width" => {
                    params.paper_width = Some(v.as_f64().filter(|s| *s > 0.0 && *s < 200.0).ok_or_else(bad)?)
                }
                "paper_height" => {
                    params.paper_height = Some(v.as_f64().filter(|s| *s > 0.0 && *s < 200.0).ok_or_else(bad)?)
                }
                "page_ranges" => params.page_ranges = Some(v.as_str().ok_or_else(bad)?.to_string()),
                "margin" => {
                    let m = v.as_f64().filter(|s| *s >= 0.0 && *s < 20.0).ok_or_else(bad)?;
                    (params.margin_top, params.margin_bottom, params.margin_left, params.margin_right) =
                        (Some(m), Some(m), Some(m), Some(m));
                }
                _ => return Err(ActionFailure::invalid(format!("payload.{k}: unknown print option"))),
            }
        }
        // Like screenshots, on chromiumoxide's session and its emulation (capped at 30 s).
        let data = tab.page.pdf(params).await.map_err(ActionFailure::cdp)?;
        Ok(ActionOutput { data, mime_type: "application/pdf".into(), ..Default::default() })
    }
}

/// Polls a boolean expression until it is true or `until` passes.
async fn poll(
    page: &Page,
    check: &str,
    until: Instant,
    what: impl Fn() -> String,
    code: FailureCode,
) -> ActResult<ActionOutput> {
    loop {
        match page.evaluate_expression(check).await {
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
async fn element(page: &Page, selector: &str, until: Instant) -> ActResult<Element> {
    let check = format!("document.querySelector({}) !== null", json!(selector));
    poll(page, &check, until, || format!("no element matches {selector}"), FailureCode::ElementNotFound).await?;
    page.find_element(selector)
        .await
        .map_err(|e| ActionFailure::new(FailureCode::ElementNotFound, format!("{selector}: {e}")))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn click_options_validate() {
        assert_eq!(click_options(&Value::Null).unwrap().1, 1);
        assert_eq!(click_options(&json!({"click_count": 2})).unwrap().1, 2);
        assert!(click_options(&json!({"click_count": 9})).is_err());
        assert!(click_options(&json!({"button": "fourth"})).is_err());
        assert!(click_options(&json!("left")).is_err());
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
