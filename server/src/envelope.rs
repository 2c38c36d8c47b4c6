//! Context envelopes on the wire: RFC 8785 (JCS) canonical JSON, the integrity hash, bounds,
//! and conversion to and from the pool's [`ContextState`].
//!
//! The canonical form is rebuilt from the protobuf alone, so anyone can recompute
//! `integrity` with an off-the-shelf JCS library: keys camelCase, `capturedAt` in ms, cookie
//! `expires` in seconds (-1 for a session cookie); `version`, `origin`, `capturedAt` and
//! `cookies` always present; every other member omitted exactly when empty in the message
//! (so envelopes made before the emulation members existed verify as they did).

use std::collections::BTreeMap;

use browserpool_pool::{ContextState, CookieRecord, Viewport, MAX_COOKIES};
use browserpool_proto::prost::Message;
use browserpool_proto::v1 as pb;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::error::ServiceError;
use crate::jcs::jcs;

/// The only envelope version this server reads and writes.
pub const VERSION: u32 = 1;
/// Largest encoded envelope accepted.
pub const MAX_ENVELOPE_BYTES: usize = 1 << 20;

/// The canonical JSON object of an envelope (without `integrity`).
pub fn canonical_value(env: &pb::ContextEnvelope) -> Value {
    let mut m = Map::new();
    m.insert("version".into(), json!(env.version));
    m.insert("origin".into(), json!(env.origin));
    m.insert("capturedAt".into(), json!(env.captured_at_ms));
    if !env.user_agent.is_empty() {
        m.insert("userAgent".into(), json!(env.user_agent));
    }
    if let Some(v) = &env.viewport {
        m.insert(
            "viewport".into(),
            json!({ "width": v.width, "height": v.height, "scale": v.scale, "mobile": v.mobile }),
        );
    }
    let cookies: Vec<Value> = env
        .cookies
        .iter()
        .map(|c| {
            let mut o = json!({
                "name": c.name, "value": c.value, "domain": c.domain, "path": c.path,
                "expires": c.expires, "httpOnly": c.http_only, "secure": c.secure,
            });
            if !c.same_site.is_empty() {
                o["sameSite"] = json!(c.same_site);
            }
            o
        })
        .collect();
    m.insert("cookies".into(), Value::Array(cookies));
    for (key, map) in [("localStorage", &env.local_storage), ("sessionStorage", &env.session_storage)] {
        if !map.is_empty() {
            m.insert(key.into(), json!(map.iter().collect::<BTreeMap<_, _>>()));
        }
    }
    if let Some(a) = &env.http_auth {
        m.insert("httpAuth".into(), json!({ "username": a.username, "password": a.password }));
    }
    for (key, value) in [("locale", &env.locale), ("timezone", &env.timezone)] {
        if !value.is_empty() {
            m.insert(key.into(), json!(value));
        }
    }
    if let Some(g) = &env.geolocation {
        m.insert(
            "geolocation".into(),
            json!({ "latitude": g.latitude, "longitude": g.longitude, "accuracy": g.accuracy }),
        );
    }
    match pb::ColorScheme::try_from(env.color_scheme) {
        Ok(pb::ColorScheme::Light) => _ = m.insert("colorScheme".into(), json!("light")),
        Ok(pb::ColorScheme::Dark) => _ = m.insert("colorScheme".into(), json!("dark")),
        // Unset; an unknown number keeps its number, so it still counts.
        Ok(pb::ColorScheme::Unspecified) => {}
        Err(_) => _ = m.insert("colorScheme".into(), json!(env.color_scheme)),
    }
    Value::Object(m)
}

/// What of a session's emulation an envelope carries: who browses (locale, time zone,
/// position, colour scheme), never its headers or network conditions.
pub fn carry_emulation(env: &mut pb::ContextEnvelope, e: &browserpool_pool::Emulation) {
    env.locale = e.locale.clone().unwrap_or_default();
    env.timezone = e.timezone.clone().unwrap_or_default();
    env.geolocation =
        e.geolocation.map(|g| pb::Geolocation { latitude: g.latitude, longitude: g.longitude, accuracy: g.accuracy });
    env.color_scheme = match e.color_scheme {
        None => pb::ColorScheme::Unspecified,
        Some(browserpool_pool::ColorScheme::Light) => pb::ColorScheme::Light,
        Some(browserpool_pool::ColorScheme::Dark) => pb::ColorScheme::Dark,
    } as i32;
    env.integrity = integrity(env);
}

/// An Acquire's request with the envelope's emulation for each field it leaves unset.
pub fn emulation_defaults(mut r: pb::AcquireRequest, env: &pb::ContextEnvelope) -> pb::AcquireRequest {
    if r.locale.is_empty() {
        r.locale = env.locale.clone();
    }
    if r.timezone.is_empty() {
        r.timezone = env.timezone.clone();
    }
    r.geolocation = r.geolocation.or(env.geolocation);
    if r.color_scheme == 0 {
        r.color_scheme = env.color_scheme;
    }
    r
}

/// Lowercase hex SHA-256 of the canonical form.
pub fn integrity(env: &pb::ContextEnvelope) -> String {
    hex::encode(Sha256::digest(jcs(&canonical_value(env)).as_bytes()))
}

/// Size, count and version bounds, checked before anything else.
pub fn check_bounds(env: &pb::ContextEnvelope) -> Result<(), ServiceError> {
    let size = env.encoded_len();
    if size > MAX_ENVELOPE_BYTES {
        return Err(ServiceError::InvalidArgument(format!(
            "envelope: payload too large: {size} bytes exceed the limit of {MAX_ENVELOPE_BYTES}"
        )));
    }
    if env.cookies.len() > MAX_COOKIES {
        return Err(ServiceError::InvalidArgument(format!(
            "envelope.cookies: {} cookies exceed the limit of {MAX_COOKIES}",
            env.cookies.len()
        )));
    }
    if env.version != VERSION {
        return Err(ServiceError::InvalidArgument(format!(
            "envelope.version: {} is not supported (this server reads version {VERSION})",
            env.version
        )));
    }
    Ok(())
}

/// Verifies `integrity`; the error text says what was expected.
pub fn verify(env: &pb::ContextEnvelope) -> Result<(), String> {
    let computed = integrity(env);
    if computed == env.integrity {
        Ok(())
    } else {
        Err(format!("integrity mismatch: the envelope says {:?}, its content hashes to {computed}", env.integrity))
    }
}

/// A captured state as a sealed envelope.
pub fn seal(state: ContextState, captured_at_ms: i64) -> pb::ContextEnvelope {
    let mut env = pb::ContextEnvelope {
        version: VERSION,
        origin: state.origin,
        captured_at_ms,
        user_agent: state.user_agent,
        viewport: state.viewport.map(|v| pb::Viewport {
            width: v.width,
            height: v.height,
            scale: v.scale,
            mobile: v.mobile,
        }),
        cookies: state
            .cookies
            .into_iter()
            .map(|c| pb::Cookie {
                name: c.name,
                value: c.value,
                domain: c.domain,
                path: c.path,
                expires: c.expires,
                http_only: c.http_only,
                secure: c.secure,
                same_site: c.same_site,
            })
            .collect(),
        local_storage: state.local_storage.into_iter().collect(),
        session_storage: state.session_storage.into_iter().collect(),
        http_auth: state.http_auth.map(|(username, password)| pb::HttpAuth { username, password }),
        integrity: String::new(),
        ..Default::default()
    };
    env.integrity = integrity(&env);
    env
}

/// An (already verified) envelope as state to apply.
pub fn open(env: &pb::ContextEnvelope) -> ContextState {
    ContextState {
        origin: env.origin.clone(),
        user_agent: env.user_agent.clone(),
        viewport: env.viewport.map(|v| Viewport { width: v.width, height: v.height, scale: v.scale, mobile: v.mobile }),
        cookies: env
            .cookies
            .iter()
            .map(|c| CookieRecord {
                name: c.name.clone(),
                value: c.value.clone(),
                domain: c.domain.clone(),
                path: c.path.clone(),
                expires: c.expires,
                http_only: c.http_only,
                secure: c.secure,
                same_site: c.same_site.clone(),
            })
            .collect(),
        local_storage: env.local_storage.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        session_storage: env.session_storage.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        http_auth: env.http_auth.as_ref().map(|a| (a.username.clone(), a.password.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The independently computed vector of the issue.
    fn vector() -> pb::ContextEnvelope {
        pb::ContextEnvelope {
            version: 1,
            origin: "http://127.0.0.1:8080".into(),
            captured_at_ms: 1795000000123,
            viewport: Some(pb::Viewport { width: 1280, height: 720, scale: 2.0, mobile: false }),
            cookies: vec![
                pb::Cookie {
                    name: "session".into(),
                    value: "abc123".into(),
                    domain: "127.0.0.1".into(),
                    path: "/".into(),
                    expires: -1.0,
                    ..Default::default()
                },
                pb::Cookie {
                    name: "user".into(),
                    value: "alice".into(),
                    domain: "127.0.0.1".into(),
                    path: "/".into(),
                    expires: 1795003600.5,
                    http_only: true,
                    secure: false,
                    same_site: "Lax".into(),
                },
            ],
            local_storage: [("k".to_string(), "v".to_string()), ("a".to_string(), "é".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn canonical_form_and_integrity_match_the_independent_vector() {
        let env = vector();
        let expected = r#"{"capturedAt":1795000000123,"cookies":[{"domain":"127.0.0.1","expires":-1,"httpOnly":false,"name":"session","path":"/","secure":false,"value":"abc123"},{"domain":"127.0.0.1","expires":1795003600.5,"httpOnly":true,"name":"user","path":"/","sameSite":"Lax","secure":false,"value":"alice"}],"localStorage":{"a":"é","k":"v"},"origin":"http://127.0.0.1:8080","version":1,"viewport":{"height":720,"mobile":false,"scale":2,"width":1280}}"#;
        assert_eq!(jcs(&canonical_value(&env)), expected);
        assert_eq!(integrity(&env), "4c3a8274102198fbe2906b43a4548657c623643816f63989bf99fe3b45dccbcf");
    }

    /// The emulation members, against a form and hash computed apart (Python's json with sorted
    /// keys and hashlib); an envelope without them keeps the vector above.
    #[test]
    fn the_emulation_members_are_in_the_canonical_form_when_set() {
        let mut env = vector();
        let emulation = browserpool_pool::Emulation {
            locale: Some("de-DE".into()),
            timezone: Some("Europe/Berlin".into()),
            geolocation: Some(browserpool_pool::Geolocation { latitude: 52.52, longitude: 13.405, accuracy: 10.5 }),
            color_scheme: Some(browserpool_pool::ColorScheme::Dark),
            extra_headers: vec![("Authorization".into(), "Bearer staging".into())],
            offline: true,
            ..Default::default()
        };
        carry_emulation(&mut env, &emulation);
        let expected = r#"{"capturedAt":1795000000123,"colorScheme":"dark","cookies":[{"domain":"127.0.0.1","expires":-1,"httpOnly":false,"name":"session","path":"/","secure":false,"value":"abc123"},{"domain":"127.0.0.1","expires":1795003600.5,"httpOnly":true,"name":"user","path":"/","sameSite":"Lax","secure":false,"value":"alice"}],"geolocation":{"accuracy":10.5,"latitude":52.52,"longitude":13.405},"localStorage":{"a":"é","k":"v"},"locale":"de-DE","origin":"http://127.0.0.1:8080","timezone":"Europe/Berlin","version":1,"viewport":{"height":720,"mobile":false,"scale":2,"width":1280}}"#;
        assert_eq!(jcs(&canonical_value(&env)), expected, "headers and network conditions are not carried");
        assert_eq!(env.integrity, "87d0abaca6c80ba809c76975bb5038cd50b4f92d2937e2cbf30521cca07bc78d");
        assert!(verify(&env).is_ok());
        // An Acquire takes each one it leaves unset, and keeps its own.
        let asked = pb::AcquireRequest { timezone: "Asia/Tokyo".into(), ..Default::default() };
        let r = emulation_defaults(asked, &env);
        assert_eq!((r.locale.as_str(), r.timezone.as_str()), ("de-DE", "Asia/Tokyo"));
        assert_eq!((r.geolocation.map(|g| g.latitude), r.color_scheme), (Some(52.52), pb::ColorScheme::Dark as i32));
        assert!(r.extra_headers.is_empty() && !r.offline);
    }

    #[test]
    fn tampering_breaks_verification() {
        let mut env = vector();
        env.integrity = integrity(&env);
        assert!(verify(&env).is_ok());
        env.cookies[0].value = "abc124".into();
        assert!(verify(&env).unwrap_err().contains("integrity mismatch"));
    }

    #[test]
    fn empty_members_are_omitted_and_required_ones_kept() {
        let env =
            pb::ContextEnvelope { version: 1, origin: "http://a.test".into(), captured_at_ms: 5, ..Default::default() };
        assert_eq!(
            jcs(&canonical_value(&env)),
            r#"{"capturedAt":5,"cookies":[],"origin":"http://a.test","version":1}"#
        );
        let with_auth = pb::ContextEnvelope { http_auth: Some(pb::HttpAuth::default()), ..env };
        assert!(jcs(&canonical_value(&with_auth)).contains(r#""httpAuth":{"password":"","username":""}"#));
    }

    #[test]
    fn bounds_refuse_instead_of_truncating() {
        let mut env = vector();
        env.version = 2;
        assert!(check_bounds(&env).unwrap_err().to_string().contains("version"));
        let mut env = vector();
        env.cookies = vec![env.cookies[0].clone(); MAX_COOKIES + 1];
        assert!(check_bounds(&env).unwrap_err().to_string().contains("cookies"));
        let mut env = vector();
        env.local_storage.insert("big".into(), "x".repeat(MAX_ENVELOPE_BYTES));
        assert!(check_bounds(&env).unwrap_err().to_string().contains("too large"));
    }
}
