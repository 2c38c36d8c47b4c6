//! How a session's browser presents itself, chosen at acquire: locale, time zone, user agent
//! (with its client hints), geolocation, colour scheme and headers added to every request.
//! Checked here once ([`Emulation::check`]); applied to each tab of the session before it is
//! handed out, new tabs and popups included ([`apply`]).

use serde_json::{json, Value};

use crate::rawcdp::RawCdp;

/// Longest user agent taken; Chromium's own are about 120 bytes.
pub const MAX_USER_AGENT: usize = 512;
/// Most extra headers a session may ask for, and the longest value.
pub const MAX_HEADERS: usize = 32;
const MAX_HEADER_VALUE: usize = 4096;

/// `prefers-color-scheme` as the session's pages see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColorScheme {
    Light,
    Dark,
}

/// Where the session's pages are, for the Geolocation API (granted to them without asking).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Geolocation {
    pub latitude: f64,
    pub longitude: f64,
    /// Metres; 0 is taken as 1.
    pub accuracy: f64,
}

/// A session's emulation; every field unset is Chromium's own.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Emulation {
    /// BCP 47 (`de-DE`): `navigator.language`, `Intl`, and `Accept-Language`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    /// IANA time zone id (`Europe/Berlin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geolocation: Option<Geolocation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color_scheme: Option<ColorScheme>,
    /// Sent on every request of the session, names as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_headers: Vec<(String, String)>,
    /// Every request fails as with no network.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offline: bool,
    /// A slower network than the host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Throttle>,
}

/// A network's latency and throughput, as the pages see it; 0 throughput: not limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Throttle {
    pub latency_ms: u32,
    pub download_bytes_per_s: u64,
    pub upload_bytes_per_s: u64,
}

/// The longest latency a throttle may add.
pub const MAX_LATENCY_MS: u32 = 60_000;

/// Headers a session may not set: the ones that route or authenticate (`Host`, `Cookie`,
/// `Proxy-*`), and the hop-by-hop ones the egress proxy rewrites.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "cookie",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

impl Emulation {
    /// Whether nothing is emulated.
    pub fn is_empty(&self) -> bool {
        *self == Emulation::default()
    }

    /// The first field that is not valid, as `field: why; what is taken`.
    pub fn check(&self) -> Result<(), String> {
        if let Some(locale) = &self.locale {
            let ok = (2..=35).contains(&locale.len())
                && locale
                    .split('-')
                    .all(|p| !p.is_empty() && p.len() <= 8 && p.chars().all(|c| c.is_ascii_alphanumeric()))
                && locale
                    .split('-')
                    .next()
                    .is_some_and(|l| (2..=3).contains(&l.len()) && l.chars().all(|c| c.is_ascii_alphabetic()));
            if !ok {
                return Err(format!("locale: {locale:?} is not a BCP 47 language tag; give one like de-DE or en"));
            }
        }
        if let Some(tz) = &self.timezone {
            let ok = (1..=64).contains(&tz.len())
                && tz
                    .split('/')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "_+-".contains(c)));
            if !ok {
                return Err(format!(
                    "timezone: {tz:?} is not an IANA time zone id; give one like Europe/Berlin or UTC"
                ));
            }
        }
        if let Some(ua) = &self.user_agent {
            if ua.is_empty() || ua.len() > MAX_USER_AGENT || ua.chars().any(char::is_control) {
                return Err(format!(
                    "user_agent: 1 to {MAX_USER_AGENT} bytes without control characters; give the string a browser sends"
                ));
            }
        }
        if let Some(g) = &self.geolocation {
            let ok = (-90.0..=90.0).contains(&g.latitude)
                && (-180.0..=180.0).contains(&g.longitude)
                && g.accuracy.is_finite()
                && g.accuracy >= 0.0;
            if !ok {
                return Err(format!(
                    "geolocation: latitude {} and longitude {} must be within ±90 and ±180, accuracy ({}) 0 or more metres",
                    g.latitude, g.longitude, g.accuracy
                ));
            }
        }
        if let Some(t) = &self.network {
            if t.latency_ms > MAX_LATENCY_MS {
                return Err(format!("network: latency_ms {} is over {MAX_LATENCY_MS}; give less", t.latency_ms));
            }
        }
        if self.extra_headers.len() > MAX_HEADERS {
            return Err(format!("extra_headers: {} given, at most {MAX_HEADERS}", self.extra_headers.len()));
        }
        for (name, value) in &self.extra_headers {
            check_header(name, value)?;
        }
        Ok(())
    }
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(format!("extra_headers: {name:?} is not a header name; give letters, digits and - only"));
    }
    let lower = name.to_ascii_lowercase();
    if FORBIDDEN_HEADERS.contains(&lower.as_str()) || lower.starts_with("proxy-") {
        return Err(format!(
            "extra_headers: {name} may not be set (Host, Cookie, Proxy-* and hop-by-hop headers are the browser's); \
             set cookies with the context import instead"
        ));
    }
    if value.len() > MAX_HEADER_VALUE || value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(format!(
            "extra_headers: the value of {name} must be at most {MAX_HEADER_VALUE} bytes without line breaks"
        ));
    }
    Ok(())
}

/// The client hints (`userAgentMetadata`) that go with `ua`, so `Sec-CH-UA` and
/// `navigator.userAgentData` tell the same story: the brand and major version of a
/// Chrome-like agent, its platform and whether it is mobile. `None` for other agents.
pub fn client_hints(ua: &str) -> Option<Value> {
    let version = ua.split("Chrome/").nth(1)?.split([' ', ';']).next()?;
    let major = version.split('.').next().filter(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit()))?;
    let platform = if ua.contains("Android") {
        "Android"
    } else if ua.contains("Windows") {
        "Windows"
    } else if ua.contains("Mac OS X") || ua.contains("Macintosh") {
        "macOS"
    } else if ua.contains("CrOS") {
        "Chrome OS"
    } else {
        "Linux"
    };
    let brand = if ua.contains("Edg/") { "Microsoft Edge" } else { "Google Chrome" };
    let brands = json!([
        { "brand": "Chromium", "version": major },
        { "brand": brand, "version": major },
        { "brand": "Not_A Brand", "version": "24" },
    ]);
    Some(json!({
        "brands": brands,
        "fullVersion": version,
        "platform": platform,
        "platformVersion": "",
        "architecture": "",
        "model": "",
        "mobile": ua.contains("Mobile"),
    }))
}

/// The CDP calls that set `e` up on a tab's session, in order, each with the field it is
/// about. `default_ua` is the browser's own user agent, for a locale without a user agent
/// (the `Accept-Language` override goes with one).
fn commands(e: &Emulation, default_ua: &str) -> Vec<(&'static str, &'static str, Value)> {
    let mut out = Vec::new();
    if e.user_agent.is_some() || e.locale.is_some() {
        let ua = e.user_agent.as_deref().unwrap_or(default_ua);
        let mut params = json!({ "userAgent": ua });
        if let Some(locale) = &e.locale {
            params["acceptLanguage"] = json!(accept_language(locale));
        }
        if let Some(hints) = e.user_agent.as_deref().and_then(client_hints) {
            params["userAgentMetadata"] = hints;
        }
        out.push(("user_agent", "Emulation.setUserAgentOverride", params));
    }
    if let Some(locale) = &e.locale {
        out.push(("locale", "Emulation.setLocaleOverride", json!({ "locale": locale })));
    }
    if let Some(tz) = &e.timezone {
        out.push(("timezone", "Emulation.setTimezoneOverride", json!({ "timezoneId": tz })));
    }
    if let Some(scheme) = e.color_scheme {
        let value = match scheme {
            ColorScheme::Light => "light",
            ColorScheme::Dark => "dark",
        };
        let features = json!([{ "name": "prefers-color-scheme", "value": value }]);
        out.push(("color_scheme", "Emulation.setEmulatedMedia", json!({ "features": features })));
    }
    if let Some(g) = e.geolocation {
        let params = json!({ "latitude": g.latitude, "longitude": g.longitude, "accuracy": g.accuracy.max(1.0) });
        out.push(("geolocation", "Emulation.setGeolocationOverride", params));
    }
    if e.offline || e.network.is_some() {
        let t = e.network.unwrap_or(Throttle { latency_ms: 0, download_bytes_per_s: 0, upload_bytes_per_s: 0 });
        // -1: not limited, as Chromium reads it.
        let rate = |r: u64| if r == 0 { -1.0 } else { r as f64 };
        let params = json!({
            "offline": e.offline,
            "latency": t.latency_ms,
            "downloadThroughput": rate(t.download_bytes_per_s),
            "uploadThroughput": rate(t.upload_bytes_per_s),
        });
        out.push(("network", "Network.emulateNetworkConditions", params));
    }
    out
}

/// A session's emulation as its tabs and requests take it, worked out once at its lease:
/// the browser's own user agent (for a locale without one) and the client-hint headers its
/// user agent implies (set on every request, so not derived per request).
#[derive(Debug)]
pub(crate) struct Applied {
    pub(crate) emulation: Emulation,
    default_ua: String,
    /// `sec-ch-ua`, `sec-ch-ua-mobile`, `sec-ch-ua-platform` as a Chrome-like user agent's
    /// client hints say; empty for none or another agent.
    hint_headers: Vec<(&'static str, String)>,
}

impl Applied {
    pub(crate) fn new(emulation: Emulation, default_ua: String) -> Applied {
        let hint_headers = match emulation.user_agent.as_deref().and_then(client_hints) {
            Some(hints) => {
                let brands: Vec<String> = hints["brands"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|b| {
                        format!(
                            "\"{}\";v=\"{}\"",
                            b["brand"].as_str().unwrap_or(""),
                            b["version"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                let mobile = if hints["mobile"] == true { "?1" } else { "?0" };
                let platform = format!("\"{}\"", hints["platform"].as_str().unwrap_or(""));
                vec![
                    ("sec-ch-ua", brands.join(", ")),
                    ("sec-ch-ua-mobile", mobile.into()),
                    ("sec-ch-ua-platform", platform),
                ]
            }
            None => Vec::new(),
        };
        Applied { emulation, default_ua, hint_headers }
    }

    /// Applies it to the tab of `session`, before its next document and to the one it has,
    /// each call answered: Chromium's refusal names the field (`timezone: "Mars/Base": ...`).
    pub(crate) async fn apply(&self, raw: &RawCdp, session: &str) -> Result<(), String> {
        let e = &self.emulation;
        for (field, method, params) in commands(e, &self.default_ua) {
            match raw.call(session, method, params).await {
                Ok(_) => {}
                // A page set up while paused (a popup) has its locale and time zone already,
                // set by the session that paused it: Chromium takes each once per page.
                Err(why) if why.contains("already in effect") => {}
                Err(why) => return Err(format!("{field}: {:?}: {why}; {}", value_of(e, field), how(field))),
            }
        }
        Ok(())
    }

    /// Applies it to a page paused before its first request, then lets it run: the calls are
    /// sent in order without waiting for their answers (some answer only once the page runs),
    /// so they take effect before it does.
    pub(crate) fn apply_paused(&self, raw: &RawCdp, session: &str) {
        let e = &self.emulation;
        if !e.extra_headers.is_empty() || e.user_agent.is_some() {
            raw.send(session, "Fetch.enable", json!({ "patterns": [{ "urlPattern": "*" }] }));
        }
        for (_, method, params) in commands(e, &self.default_ua) {
            raw.send(session, method, params);
        }
        raw.send(session, "Runtime.runIfWaitingForDebugger", json!({}));
    }

    /// `headers` (a `Fetch.requestPaused` request's, as an object) as `Fetch.continueRequest`
    /// takes them, with the session's extra headers set and the client hints it sends made
    /// those of its user agent (a popup's first request has Chromium's own); `None`: nothing
    /// to change.
    pub(crate) fn request_headers(&self, headers: &Value) -> Option<Value> {
        let sent = |name: &str| headers.as_object().is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case(name)));
        let extra = self.emulation.extra_headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        let hints = self.hint_headers.iter().filter(|(name, _)| sent(name)).map(|(n, v)| (*n, v.as_str()));
        let set: Vec<(&str, &str)> = extra.chain(hints).collect();
        if set.is_empty() {
            return None;
        }
        let mut out: Vec<Value> = headers
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(name, _)| !set.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)))
            .map(|(name, value)| json!({ "name": name, "value": value.as_str().unwrap_or_default() }))
            .collect();
        out.extend(set.iter().map(|(name, value)| json!({ "name": name, "value": value })));
        Some(Value::Array(out))
    }
}

/// The value of `field` as given, for an error about it.
fn value_of(e: &Emulation, field: &str) -> String {
    match field {
        "locale" => e.locale.clone(),
        "timezone" => e.timezone.clone(),
        "user_agent" => e.user_agent.clone(),
        _ => None,
    }
    .unwrap_or_default()
}

/// What to give instead, per field Chromium may refuse.
fn how(field: &str) -> &'static str {
    match field {
        "user_agent" => "give the string a browser sends",
        "locale" => "give one Chromium knows, like de-DE",
        "timezone" => "give an IANA time zone id like Europe/Berlin",
        _ => "see the server log",
    }
}

/// `de-DE` -> `de-DE,de` (Chromium adds the weights: `de-DE,de;q=0.9`), as a browser set to
/// that language sends it.
fn accept_language(locale: &str) -> String {
    match locale.split_once('-') {
        Some((language, _)) => format!("{locale},{language}"),
        None => locale.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut Emulation)) -> Result<(), String> {
        let mut e = Emulation::default();
        f(&mut e);
        e.check()
    }

    #[test]
    fn each_field_is_checked_with_a_precise_error() {
        assert_eq!(with(|_| {}), Ok(()));
        assert_eq!(
            with(|e| {
                e.locale = Some("de-DE".into());
                e.timezone = Some("America/Argentina/Buenos_Aires".into());
                e.user_agent = Some("Mozilla/5.0".into());
                e.geolocation = Some(Geolocation { latitude: 52.5, longitude: 13.4, accuracy: 0.0 });
                e.extra_headers = vec![("X-Job".into(), "1234".into())];
            }),
            Ok(())
        );
        for bad in ["", "d", "de_DE", "de--DE", "123-DE", "de-DE\n"] {
            let said = with(|e| e.locale = Some(bad.into())).unwrap_err();
            assert!(said.starts_with("locale: "), "{bad:?}: {said}");
        }
        for bad in ["", "Europe/", "../etc/passwd", "Europe Berlin"] {
            let said = with(|e| e.timezone = Some(bad.into())).unwrap_err();
            assert!(said.starts_with("timezone: "), "{bad:?}: {said}");
        }
        assert!(with(|e| e.user_agent = Some("a\r\nX-Evil: 1".into())).unwrap_err().starts_with("user_agent: "));
        assert!(with(|e| e.user_agent = Some("a".repeat(MAX_USER_AGENT + 1))).is_err());
        let far = Geolocation { latitude: 91.0, longitude: 0.0, accuracy: 1.0 };
        assert!(with(|e| e.geolocation = Some(far)).unwrap_err().starts_with("geolocation: "));
        let nan = Geolocation { latitude: 0.0, longitude: 0.0, accuracy: f64::NAN };
        assert!(with(|e| e.geolocation = Some(nan)).is_err());
        for name in ["Host", "cookie", "Proxy-Authorization", "Connection", "Transfer-Encoding", "X Bad", ""] {
            let said = with(|e| e.extra_headers = vec![(name.into(), "v".into())]).unwrap_err();
            assert!(said.starts_with("extra_headers: "), "{name:?}: {said}");
        }
        assert!(with(|e| e.extra_headers = vec![("X-A".into(), "a\r\nb".into())]).is_err());
        let many = (0..=MAX_HEADERS).map(|i| (format!("X-{i}"), String::new())).collect();
        assert!(with(|e| e.extra_headers = many).is_err());
    }

    #[test]
    fn client_hints_follow_the_user_agent() {
        let win = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.71 Safari/537.36";
        let hints = client_hints(win).unwrap();
        assert_eq!((hints["platform"].as_str(), hints["mobile"].as_bool()), (Some("Windows"), Some(false)));
        assert_eq!(hints["brands"][1], json!({"brand": "Google Chrome", "version": "120"}));
        assert_eq!(hints["fullVersion"], "120.0.6099.71");
        let android = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36";
        let hints = client_hints(android).unwrap();
        assert_eq!((hints["platform"].as_str(), hints["mobile"].as_bool()), (Some("Android"), Some(true)));
        assert_eq!(client_hints("Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"), None);
    }

    #[test]
    fn extra_headers_replace_the_same_names_and_add_the_rest() {
        let headers = json!({"Accept": "*/*", "x-job": "old"});
        let extra = vec![("X-Job".to_string(), "new".to_string()), ("X-Run".to_string(), "7".to_string())];
        let e = Emulation { extra_headers: extra, ..Default::default() };
        let got = Applied::new(e, String::new()).request_headers(&headers).unwrap();
        assert_eq!(
            got,
            json!([{"name": "Accept", "value": "*/*"}, {"name": "X-Job", "value": "new"}, {"name": "X-Run", "value": "7"}])
        );
        assert_eq!(Applied::new(Emulation::default(), String::new()).request_headers(&headers), None);
        // The client hints a request carries are its user agent's; none are added.
        let ua = "Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
        let e = Emulation { user_agent: Some(ua.into()), ..Default::default() };
        let sent = json!({"sec-ch-ua-platform": "\"Linux\"", "sec-ch-ua-mobile": "?0"});
        let got = Applied::new(e, String::new()).request_headers(&sent).unwrap();
        assert_eq!(
            got,
            json!([{"name": "sec-ch-ua-mobile", "value": "?0"}, {"name": "sec-ch-ua-platform", "value": "\"Windows\""}])
        );
        assert_eq!(accept_language("de-DE"), "de-DE,de");
        assert_eq!(accept_language("fr"), "fr");
    }
}
