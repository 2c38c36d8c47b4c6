//! Context capture and apply on a worker: reads one origin's cookies, storage, credentials,
//! user agent and viewport out of Chromium, or writes them in as a strict replace (the
//! records and their checks are `crate::context`'s).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::state::Tab;
use super::Driver;
use crate::context::{
    anchored_at_domain, cookie_from_cdp, cookie_to_cdp, domain_matches, host_of, normalize_origin, validate_cookie,
    CaptureOptions, ContextState, CookieRecord,
};
use crate::outcome::{ActResult, ActionFailure, FailureCode};
use crate::sync::lock;

impl Driver {
    /// All cookies of this worker's browser, sorted by (domain, path, name).
    pub(crate) async fn all_cookies(&self) -> ActResult<Vec<CookieRecord>> {
        let got =
            self.raw.call("", "Storage.getCookies", self.shared.scoped(json!({}))).await.map_err(ActionFailure::raw)?;
        let mut cookies: Vec<CookieRecord> =
            got["cookies"].as_array().map(|a| a.iter().map(cookie_from_cdp).collect()).unwrap_or_default();
        cookies.sort_by(|a, b| (&a.domain, &a.path, &a.name).cmp(&(&b.domain, &b.path, &b.name)));
        Ok(cookies)
    }

    /// Replaces the whole cookie jar.
    pub(crate) async fn replace_cookies(&self, cookies: &[(CookieRecord, String)]) -> ActResult<()> {
        self.raw.call("", "Storage.clearCookies", self.shared.scoped(json!({}))).await.map_err(ActionFailure::raw)?;
        if cookies.is_empty() {
            return Ok(());
        }
        let params: Vec<Value> = cookies.iter().map(|(c, origin)| cookie_to_cdp(c, origin)).collect();
        self.raw
            .call("", "Storage.setCookies", self.shared.scoped(json!({ "cookies": params })))
            .await
            .map_err(ActionFailure::raw)?;
        Ok(())
    }

    async fn tab_origin(&self, tab: &Tab) -> String {
        let url = tab.page.url().await.ok().flatten().unwrap_or_default();
        url::Url::parse(&url).map(|u| u.origin().ascii_serialization()).unwrap_or_default()
    }

    /// A tab whose document is on `origin`, the active one first.
    async fn tab_on(&self, origin: &str) -> Option<Tab> {
        let (tabs, active) = {
            let t = lock(&self.shared.tabs);
            (t.list.clone(), t.active)
        };
        let mut order: Vec<&Tab> = tabs.get(active).into_iter().collect();
        order.extend(tabs.iter().enumerate().filter(|(i, _)| *i != active).map(|(_, t)| t));
        for tab in order {
            if self.tab_origin(tab).await == origin {
                return Some(tab.clone());
            }
        }
        None
    }

    /// Reads the state of one origin.
    pub async fn export_context(&self, opts: &CaptureOptions) -> ActResult<ContextState> {
        let (active, _) = self.active()?;
        let origin = if opts.origin.is_empty() {
            let origin = self.tab_origin(&active).await;
            normalize_origin(&origin).map_err(|_| {
                ActionFailure::invalid(format!(
                    "origin: the active tab is on {origin:?}, which is not an http(s) origin; name one"
                ))
            })?
        } else {
            normalize_origin(&opts.origin)?
        };
        let host = host_of(&origin);
        let cookies = self.all_cookies().await?.into_iter().filter(|c| domain_matches(&c.domain, &host)).collect();
        let (mut local_storage, mut session_storage) = (BTreeMap::new(), BTreeMap::new());
        if opts.include_storage {
            let tab = self.tab_on(&origin).await.ok_or_else(|| {
                ActionFailure::new(
                    FailureCode::InvalidArgument,
                    format!("origin: no tab is on {origin}; storage is read from a page of the origin (or set include_storage=false)"),
                )
            })?;
            let read = tab
                .page
                .evaluate_expression(
                    "JSON.stringify([Object.fromEntries(Object.entries(localStorage)), Object.fromEntries(Object.entries(sessionStorage))])",
                )
                .await
                .map_err(ActionFailure::cdp)?;
            let text = read.value().and_then(Value::as_str).unwrap_or("[{},{}]").to_string();
            let (l, s): (BTreeMap<String, String>, BTreeMap<String, String>) = serde_json::from_str(&text)
                .map_err(|e| ActionFailure::new(FailureCode::Internal, format!("storage: {e}")))?;
            local_storage = l;
            session_storage = s;
        }
        let http_auth =
            if opts.include_http_auth { lock(&self.shared.credentials).get(&origin).cloned() } else { None };
        let user_agent = if opts.capture_user_agent {
            let ua = active.page.evaluate_expression("navigator.userAgent").await.map_err(ActionFailure::cdp)?;
            ua.value().and_then(Value::as_str).unwrap_or_default().to_string()
        } else {
            String::new()
        };
        Ok(ContextState {
            origin,
            user_agent,
            viewport: Some(self.current_viewport()),
            cookies,
            local_storage,
            session_storage,
            http_auth,
        })
    }

    /// Writes `state` as a strict replace for its origin: the origin's cookies and storage are
    /// cleared, the envelope's applied. With `strict_origin` the active tab must already be on
    /// the origin; otherwise it navigates there first. Returns (cookies, storage keys) applied.
    /// Refuses a cookie whose domain the policy refuses: a `.parent` cookie also reaches the
    /// parent domain, which the policy may refuse where the page's own origin is allowed.
    pub(crate) fn check_cookie_domain(&self, c: &CookieRecord, i: usize) -> ActResult<()> {
        self.check_field(&format!("cookies[{i}].domain"), &format!("https://{}/", c.domain.trim_start_matches('.')))
    }

    pub async fn import_context(&self, state: &ContextState, strict_origin: bool) -> ActResult<(u32, u32)> {
        let origin = normalize_origin(&state.origin)?;
        if origin != state.origin {
            return Err(ActionFailure::invalid(format!(
                "origin: {:?} is not in canonical form ({origin})",
                state.origin
            )));
        }
        // The tenant's policy first: a refused import must leave the jar, storage and
        // credentials as they were (the navigation at the end is too late to refuse it).
        self.check_field("origin", &origin)?;
        for (i, c) in state.cookies.iter().enumerate() {
            validate_cookie(c, i)?;
            let host = host_of(&origin);
            if !domain_matches(&c.domain, &host) {
                return Err(ActionFailure::invalid(format!(
                    "cookies[{i}].domain: {:?} does not apply to {origin}",
                    c.domain
                )));
            }
            self.check_cookie_domain(c, i)?;
        }
        if let Some(v) = state.viewport {
            crate::actions::parse_viewport(
                &json!({ "width": v.width, "height": v.height, "scale": v.scale, "mobile": v.mobile }),
            )
            .map_err(|f| ActionFailure::invalid(format!("viewport: {}", f.message)))?;
        }
        let (active, _) = self.active()?;
        let on_origin = self.tab_origin(&active).await == origin;
        if strict_origin && !on_origin {
            return Err(ActionFailure::invalid(format!(
                "strict_origin: the active tab is not on {origin}; navigate there first or set strict_origin=false"
            )));
        }
        // Credentials first, so a challenge on the way to the origin is answered with them.
        if let Some((u, p)) = &state.http_auth {
            lock(&self.shared.credentials).insert(origin.clone(), (u.clone(), p.clone()));
        }
        if !state.user_agent.is_empty() {
            let tabs: Vec<Tab> = lock(&self.shared.tabs).list.clone();
            for tab in tabs {
                self.raw
                    .call(&tab.session, "Network.setUserAgentOverride", json!({ "userAgent": state.user_agent }))
                    .await
                    .map_err(ActionFailure::raw)?;
            }
        }
        if let Some(v) = state.viewport {
            self.set_viewport(v, self.cfg.cdp_timeout).await?;
        }
        // Cookies: keep every other origin's, replace this one's.
        let host = host_of(&origin);
        let mut jar: Vec<(CookieRecord, String)> = Vec::new();
        for c in self.all_cookies().await? {
            if !domain_matches(&c.domain, &host) {
                jar.push(anchored_at_domain(c));
            }
        }
        jar.extend(state.cookies.iter().cloned().map(|c| (c, origin.clone())));
        self.replace_cookies(&jar).await?;
        if !on_origin {
            let (tab, _) = self.active()?;
            self.navigate(&tab, &format!("{origin}/"), crate::actions::WaitUntil::Load, false).await?;
        }
        let (tab, _) = self.active()?;
        let script = format!(
            "(() => {{ const [l, s] = {}; localStorage.clear(); sessionStorage.clear(); \
             for (const [k, v] of Object.entries(l)) localStorage.setItem(k, v); \
             for (const [k, v] of Object.entries(s)) sessionStorage.setItem(k, v); \
             return localStorage.length + sessionStorage.length; }})()",
            json!([state.local_storage, state.session_storage])
        );
        tab.page.evaluate_expression(script).await.map_err(ActionFailure::cdp)?;
        let keys = (state.local_storage.len() + state.session_storage.len()) as u32;
        Ok((state.cookies.len() as u32, keys))
    }
}
