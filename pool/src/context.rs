//! Context capture and apply: the cookies, storage, credentials, user agent and viewport of
//! one origin, read out of a worker or written into it as a strict replace.
//!
//! Canonical JSON and integrity belong to the wire format and live with the server; this
//! module only moves state in and out of Chromium, deterministically (cookies sorted by
//! domain, path, name; maps ordered by key).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::outcome::{ActResult, ActionFailure, Viewport};

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
pub(crate) fn domain_matches(domain: &str, host: &str) -> bool {
    match domain.strip_prefix('.') {
        Some(suffix) => host == suffix || host.ends_with(&format!(".{suffix}")),
        None => host == domain,
    }
}

pub(crate) fn host_of(origin: &str) -> String {
    url::Url::parse(origin).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default()
}

pub(crate) fn cookie_from_cdp(c: &Value) -> CookieRecord {
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
pub(crate) fn cookie_to_cdp(c: &CookieRecord, origin: &str) -> Value {
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
