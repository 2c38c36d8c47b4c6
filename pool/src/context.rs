//! Context capture and apply: the cookies, storage, credentials, user agent and viewport of
//! one origin, read out of a worker or written into it as a strict replace.
//!
//! Canonical JSON and integrity belong to the wire format and live with the server; this
//! module only moves state in and out of Chromium, deterministically (cookies sorted by
//! domain, path, name; maps ordered by key).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::driver::{lock, ActResult, ActionFailure, Driver, FailureCode, Tab, Viewport};

/// Most cookies an envelope or a `cookies set` may carry.
pub const MAX_COOKIES: usize = 3000;

/// One cookie as envelopes carry it. `expires` is seconds since the epoch, -1 for a session
/// cookie; `same_site` is `Strict`, `Lax`, `None` or empty.
#[derive(Debug, Clone, PartialEq)]
pub struct CookieRecord {
    pub name: String,
    pub value: String,
    pub domain: String,
    pub path: String,
    pub expires: f64,
    pub http_only: bool,
    pub secure: bool,
    pub same_site: String,
}

/// Everything an envelope carries for one origin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextState {
    pub origin: String,
    pub user_agent: String,
    pub viewport: Option<Viewport>,
    pub cookies: Vec<CookieRecord>,
    pub local_storage: BTreeMap<String, String>,
    pub session_storage: BTreeMap<String, String>,
    pub http_auth: Option<(String, String)>,
}

/// What to capture.
#[derive(Debug, Clone, Default)]
pub struct CaptureOptions {
    /// Origin to capture; empty = the active tab's origin.
    pub origin: String,
    pub include_storage: bool,
    pub include_http_auth: bool,
    pub capture_user_agent: bool,
}

/// Normalizes `scheme://host[:port]`; only http(s) origins carry state.
pub fn normalize_origin(origin: &str) -> ActResult<String> {
    let url = url::Url::parse(origin)
        .map_err(|e| ActionFailure::invalid(format!("origin: {origin:?} is not an origin: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ActionFailure::invalid(format!("origin: {origin:?} is not an http(s) origin")));
    }
    Ok(url.origin().ascii_serialization())
}

/// Whether a cookie of `domain` applies to `host`.
fn domain_matches(domain: &str, host: &str) -> bool {
    match domain.strip_prefix('.') {
        Some(suffix) => host == suffix || host.ends_with(&format!(".{suffix}")),
        None => host == domain,
    }
}

fn host_of(origin: &str) -> String {
    url::Url::parse(origin).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default()
}

fn cookie_from_cdp(c: &Value) -> CookieRecord {
    let session = c["session"].as_bool().unwrap_or(false);
    CookieRecord {
        name: c["name"].as_str().unwrap_or_default().into(),
        value: c["value"].as_str().unwrap_or_default().into(),
        domain: c["domain"].as_str().unwrap_or_default().into(),
        path: c["path"].as_str().unwrap_or("/").into(),
        expires: if session { -1.0 } else { c["expires"].as_f64().unwrap_or(-1.0) },
        http_only: c["httpOnly"].as_bool().unwrap_or(false),
        secure: c["secure"].as_bool().unwrap_or(false),
        same_site: c["sameSite"].as_str().unwrap_or_default().into(),
    }
}

/// A cookie as `Storage.setCookies` takes it, anchored at `origin` (so host-only cookies stay
/// host-only and carry the origin's scheme and port).
fn cookie_to_cdp(c: &CookieRecord, origin: &str) -> Value {
    let mut v = json!({
        "name": c.name, "value": c.value, "path": c.path,
        "httpOnly": c.http_only, "secure": c.secure,
        "url": format!("{}{}", origin, if c.path.starts_with('/') { c.path.as_str() } else { "/" }),
    });
    if c.domain.starts_with('.') {
        v["domain"] = json!(c.domain);
    }
    if c.expires >= 0.0 {
        v["expires"] = json!(c.expires);
    }
    if !c.same_site.is_empty() {
        v["sameSite"] = json!(c.same_site);
    }
    v
}

/// A cookie from the `cookies set` payload: `name` and `value` required; `domain` defaults to
/// the page's host, `path` to `/`, `expires` to -1 (session). Returns it with the origin that
/// anchors it.
pub(crate) fn cookie_from_payload(c: &Value, i: usize, page_origin: Option<&str>) -> ActResult<(CookieRecord, String)> {
    let field = |k: &str| c.get(k).filter(|v| !v.is_null());
    let text = |k: &str| -> ActResult<Option<String>> {
        match field(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ActionFailure::invalid(format!("cookies[{i}].{k}: a string is required"))),
        }
    };
    let flag = |k: &str, alt: &str| -> ActResult<bool> {
        match field(k).or_else(|| field(alt)) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ActionFailure::invalid(format!("cookies[{i}].{k}: a boolean is required"))),
        }
    };
    let name = text("name")?.ok_or_else(|| ActionFailure::invalid(format!("cookies[{i}].name: required")))?;
    let value = text("value")?.ok_or_else(|| ActionFailure::invalid(format!("cookies[{i}].value: required")))?;
    let page_host = page_origin.map(host_of);
    let domain = match (text("domain")?, page_host) {
        (Some(d), _) => d,
        (None, Some(h)) => h,
        (None, None) => {
            return Err(ActionFailure::invalid(format!(
                "cookies[{i}].domain: required when the page has no http(s) origin"
            )))
        }
    };
    let secure = flag("secure", "secure")?;
    let origin = match page_origin {
        Some(o) if domain_matches(&domain, &host_of(o)) => o.to_string(),
        _ => format!("{}://{}", if secure { "https" } else { "http" }, domain.trim_start_matches('.')),
    };
    let expires = match field("expires") {
        None => -1.0,
        Some(v) => {
            v.as_f64().ok_or_else(|| ActionFailure::invalid(format!("cookies[{i}].expires: a number is required")))?
        }
    };
    let cookie = CookieRecord {
        name,
        value,
        domain,
        path: text("path")?.unwrap_or_else(|| "/".into()),
        expires,
        http_only: flag("http_only", "httpOnly")?,
        secure,
        same_site: text("same_site")?.or(text("sameSite")?).unwrap_or_default(),
    };
    Ok((cookie, origin))
}

/// A cookie kept while the jar is rewritten, anchored at its own domain (and scheme).
pub(crate) fn anchored_at_domain(c: CookieRecord) -> (CookieRecord, String) {
    let scheme = if c.secure { "https" } else { "http" };
    let anchor = format!("{scheme}://{}", c.domain.trim_start_matches('.'));
    (c, anchor)
}

/// Checks one cookie before anything is applied.
pub fn validate_cookie(c: &CookieRecord, i: usize) -> ActResult<()> {
    let bad = |field: &str, why: &str| ActionFailure::invalid(format!("cookies[{i}].{field}: {why}"));
    if c.name.is_empty() || c.name.chars().any(|ch| ch.is_control() || ch == ';' || ch == '=') {
        return Err(bad("name", "empty or not a cookie name"));
    }
    if c.value.chars().any(|ch| ch.is_control() || ch == ';') {
        return Err(bad("value", "contains a control character or ';'"));
    }
    if !c.path.starts_with('/') {
        return Err(bad("path", "must start with '/'"));
    }
    if !(c.expires == -1.0 || (c.expires.is_finite() && c.expires >= 0.0)) {
        return Err(bad("expires", "must be seconds since the epoch, or -1 for a session cookie"));
    }
    if !["", "Strict", "Lax", "None"].contains(&c.same_site.as_str()) {
        return Err(bad("same_site", "must be Strict, Lax, None or empty"));
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalize() {
        assert_eq!(normalize_origin("http://127.0.0.1:8080/path?q").unwrap(), "http://127.0.0.1:8080");
        assert_eq!(normalize_origin("HTTPS://Example.TEST").unwrap(), "https://example.test");
        assert!(normalize_origin("file:///etc").is_err());
        assert!(normalize_origin("about:blank").is_err());
    }

    #[test]
    fn domains_match_like_cookies() {
        assert!(domain_matches("127.0.0.1", "127.0.0.1"));
        assert!(domain_matches(".example.test", "a.example.test"));
        assert!(domain_matches(".example.test", "example.test"));
        assert!(!domain_matches(".example.test", "badexample.test"));
        assert!(!domain_matches("a.example.test", "example.test"));
    }

    #[test]
    fn cookies_are_validated_by_field() {
        let ok = CookieRecord {
            name: "n".into(),
            value: "v".into(),
            domain: "127.0.0.1".into(),
            path: "/".into(),
            expires: -1.0,
            http_only: false,
            secure: false,
            same_site: String::new(),
        };
        assert!(validate_cookie(&ok, 0).is_ok());
        let bad = CookieRecord { same_site: "Sometimes".into(), ..ok.clone() };
        assert!(validate_cookie(&bad, 3).unwrap_err().message.contains("cookies[3].same_site"));
        let bad = CookieRecord { path: "x".into(), ..ok.clone() };
        assert!(validate_cookie(&bad, 0).is_err());
        let bad = CookieRecord { expires: f64::NAN, ..ok };
        assert!(validate_cookie(&bad, 0).is_err());
    }
}
