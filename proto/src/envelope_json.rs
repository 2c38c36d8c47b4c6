//! Context envelopes as JSON files, in the protobuf JSON mapping of `ContextEnvelope`
//! (lowerCamelCase names, `capturedAtMs` an int64 written as a string), so `grpcurl` and other
//! protobuf JSON tools read and write the same files. Every field round-trips exactly, which
//! `integrity` needs: the server recomputes it from the fields on import.
//!
//! Reading follows the mapping's parser rules: the proto names (`captured_at_ms`) are accepted
//! too, int64 as a number or a string, absent fields are their defaults; an unknown field is
//! refused, so a mistyped one never silently drops state.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::v1 as pb;

/// An envelope as its JSON object.
pub fn to_json(env: &pb::ContextEnvelope) -> Value {
    let mut m = Map::new();
    m.insert("version".into(), json!(env.version));
    m.insert("origin".into(), json!(env.origin));
    m.insert("capturedAtMs".into(), json!(env.captured_at_ms.to_string()));
    m.insert("userAgent".into(), json!(env.user_agent));
    if let Some(v) = &env.viewport {
        m.insert(
            "viewport".into(),
            json!({"width": v.width, "height": v.height, "scale": v.scale, "mobile": v.mobile}),
        );
    }
    let cookies: Vec<Value> = env
        .cookies
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "value": c.value, "domain": c.domain, "path": c.path, "expires": c.expires,
                "httpOnly": c.http_only, "secure": c.secure, "sameSite": c.same_site,
            })
        })
        .collect();
    m.insert("cookies".into(), Value::Array(cookies));
    let sorted = |map: &HashMap<String, String>| json!(map.iter().collect::<std::collections::BTreeMap<_, _>>());
    m.insert("localStorage".into(), sorted(&env.local_storage));
    m.insert("sessionStorage".into(), sorted(&env.session_storage));
    if let Some(a) = &env.http_auth {
        m.insert("httpAuth".into(), json!({"username": a.username, "password": a.password}));
    }
    m.insert("integrity".into(), json!(env.integrity));
    // The emulation members only when set (a printer omits defaults).
    for (key, value) in [("locale", &env.locale), ("timezone", &env.timezone)] {
        if !value.is_empty() {
            m.insert(key.into(), json!(value));
        }
    }
    if let Some(g) = &env.geolocation {
        m.insert(
            "geolocation".into(),
            json!({"latitude": g.latitude, "longitude": g.longitude, "accuracy": g.accuracy}),
        );
    }
    if env.color_scheme != 0 {
        let name = pb::ColorScheme::try_from(env.color_scheme).map(|c| json!(c.as_str_name()));
        m.insert("colorScheme".into(), name.unwrap_or_else(|_| json!(env.color_scheme)));
    }
    Value::Object(m)
}

/// The `geolocation` member, if there is one.
fn geolocation(f: &Fields) -> Result<Option<pb::Geolocation>, String> {
    f.get("geolocation", "geolocation")
        .map(|g| {
            let names = [("latitude", "latitude"), ("longitude", "longitude"), ("accuracy", "accuracy")];
            let g = Fields::new("envelope.geolocation", g, &names)?;
            Ok(pb::Geolocation {
                latitude: g.double("latitude", "latitude")?,
                longitude: g.double("longitude", "longitude")?,
                accuracy: g.double("accuracy", "accuracy")?,
            })
        })
        .transpose()
}

/// An enum field: its name (`COLOR_SCHEME_DARK`) or its number, as the mapping allows.
fn color_scheme(f: &Fields) -> Result<i32, String> {
    match f.get("colorScheme", "color_scheme") {
        None => Ok(0),
        Some(Value::String(name)) => pb::ColorScheme::from_str_name(name)
            .map(|c| c as i32)
            .ok_or_else(|| format!("envelope.colorScheme: {name:?} is not a ColorScheme")),
        Some(_) => f.integer("colorScheme", "color_scheme"),
    }
}

/// A JSON object's fields by JSON name or proto name; refuses any other key.
struct Fields<'a> {
    what: &'a str,
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    /// `names`: (JSON name, proto name) of every field the message has.
    fn new(what: &'a str, value: &'a Value, names: &[(&str, &str)]) -> Result<Fields<'a>, String> {
        let Value::Object(map) = value else {
            return Err(format!("{what}: expected an object, got {value}"));
        };
        if let Some(key) = map.keys().find(|k| !names.iter().any(|(json, proto)| k == json || k == proto)) {
            return Err(format!("{what}: unknown field {key:?}"));
        }
        Ok(Fields { what, map })
    }

    fn get(&self, json: &str, proto: &str) -> Option<&'a Value> {
        self.map.get(json).or_else(|| self.map.get(proto)).filter(|v| !v.is_null())
    }

    fn string(&self, json: &str, proto: &str) -> Result<String, String> {
        match self.get(json, proto) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(format!("{}.{json}: expected a string, got {v}", self.what)),
        }
    }

    fn boolean(&self, json: &str, proto: &str) -> Result<bool, String> {
        match self.get(json, proto) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(format!("{}.{json}: expected true or false, got {v}", self.what)),
        }
    }

    /// An integer field: a JSON number or a decimal string, as the mapping allows.
    fn integer<T: TryFrom<i64>>(&self, json: &str, proto: &str) -> Result<T, String> {
        let zero = Value::from(0);
        let v = self.get(json, proto).unwrap_or(&zero);
        let n = match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse::<i64>().ok(),
            _ => None,
        };
        n.and_then(|n| T::try_from(n).ok()).ok_or_else(|| format!("{}.{json}: expected an integer, got {v}", self.what))
    }

    fn double(&self, json: &str, proto: &str) -> Result<f64, String> {
        let Some(v) = self.get(json, proto) else { return Ok(0.0) };
        let n = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.parse::<f64>().ok(),
            _ => None,
        };
        n.ok_or_else(|| format!("{}.{json}: expected a number, got {v}", self.what))
    }

    fn string_map(&self, json: &str, proto: &str) -> Result<HashMap<String, String>, String> {
        match self.get(json, proto) {
            None => Ok(HashMap::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    _ => Err(format!("{}.{json}[{k:?}]: expected a string, got {v}", self.what)),
                })
                .collect(),
            Some(v) => Err(format!("{}.{json}: expected an object of strings, got {v}", self.what)),
        }
    }
}

/// An envelope from its JSON object (as [`to_json`] writes it, or any protobuf JSON printer).
pub fn from_json(value: &Value) -> Result<pb::ContextEnvelope, String> {
    let f = Fields::new(
        "envelope",
        value,
        &[
            ("version", "version"),
            ("origin", "origin"),
            ("capturedAtMs", "captured_at_ms"),
            ("userAgent", "user_agent"),
            ("viewport", "viewport"),
            ("cookies", "cookies"),
            ("localStorage", "local_storage"),
            ("sessionStorage", "session_storage"),
            ("httpAuth", "http_auth"),
            ("integrity", "integrity"),
            ("locale", "locale"),
            ("timezone", "timezone"),
            ("geolocation", "geolocation"),
            ("colorScheme", "color_scheme"),
        ],
    )?;
    let viewport = f
        .get("viewport", "viewport")
        .map(|v| {
            let v = Fields::new(
                "envelope.viewport",
                v,
                &[("width", "width"), ("height", "height"), ("scale", "scale"), ("mobile", "mobile")],
            )?;
            Ok::<_, String>(pb::Viewport {
                width: v.integer("width", "width")?,
                height: v.integer("height", "height")?,
                scale: v.double("scale", "scale")?,
                mobile: v.boolean("mobile", "mobile")?,
            })
        })
        .transpose()?;
    let cookies = match f.get("cookies", "cookies") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|c| {
                let c = Fields::new(
                    "envelope.cookies[]",
                    c,
                    &[
                        ("name", "name"),
                        ("value", "value"),
                        ("domain", "domain"),
                        ("path", "path"),
                        ("expires", "expires"),
                        ("httpOnly", "http_only"),
                        ("secure", "secure"),
                        ("sameSite", "same_site"),
                    ],
                )?;
                Ok(pb::Cookie {
                    name: c.string("name", "name")?,
                    value: c.string("value", "value")?,
                    domain: c.string("domain", "domain")?,
                    path: c.string("path", "path")?,
                    expires: c.double("expires", "expires")?,
                    http_only: c.boolean("httpOnly", "http_only")?,
                    secure: c.boolean("secure", "secure")?,
                    same_site: c.string("sameSite", "same_site")?,
                })
            })
            .collect::<Result<_, String>>()?,
        Some(v) => return Err(format!("envelope.cookies: expected a list, got {v}")),
    };
    let http_auth = f
        .get("httpAuth", "http_auth")
        .map(|a| {
            let a = Fields::new("envelope.httpAuth", a, &[("username", "username"), ("password", "password")])?;
            Ok::<_, String>(pb::HttpAuth {
                username: a.string("username", "username")?,
                password: a.string("password", "password")?,
            })
        })
        .transpose()?;
    Ok(pb::ContextEnvelope {
        version: f.integer("version", "version")?,
        origin: f.string("origin", "origin")?,
        captured_at_ms: f.integer("capturedAtMs", "captured_at_ms")?,
        user_agent: f.string("userAgent", "user_agent")?,
        viewport,
        cookies,
        local_storage: f.string_map("localStorage", "local_storage")?,
        session_storage: f.string_map("sessionStorage", "session_storage")?,
        http_auth,
        integrity: f.string("integrity", "integrity")?,
        locale: f.string("locale", "locale")?,
        timezone: f.string("timezone", "timezone")?,
        geolocation: geolocation(&f)?,
        color_scheme: color_scheme(&f)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> pb::ContextEnvelope {
        pb::ContextEnvelope {
            version: 1,
            origin: "http://127.0.0.1:8080".into(),
            captured_at_ms: 1_795_000_000_123,
            user_agent: "Mozilla/5.0 test".into(),
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
                    domain: ".127.0.0.1".into(),
                    path: "/app".into(),
                    expires: 1_795_003_600.123_456_7,
                    http_only: true,
                    secure: true,
                    same_site: "Lax".into(),
                },
            ],
            local_storage: [("k".to_string(), "v".to_string()), ("a".to_string(), "é\n\"q\"".to_string())].into(),
            session_storage: [("tab".to_string(), "1".to_string())].into(),
            http_auth: Some(pb::HttpAuth { username: "alice".into(), password: "s3cr:et".into() }),
            integrity: "ab".repeat(32),
            locale: "de-DE".into(),
            timezone: "Europe/Berlin".into(),
            geolocation: Some(pb::Geolocation { latitude: 52.52, longitude: 13.405, accuracy: 10.5 }),
            color_scheme: pb::ColorScheme::Dark as i32,
        }
    }

    #[test]
    fn envelopes_round_trip_exactly_through_json_text() {
        for env in [full(), pb::ContextEnvelope { version: 1, origin: "https://x".into(), ..Default::default() }] {
            let text = serde_json::to_string_pretty(&to_json(&env)).unwrap();
            let back = from_json(&serde_json::from_str(&text).unwrap()).unwrap();
            assert_eq!(back, env, "{text}");
        }
    }

    #[test]
    fn the_protobuf_json_mapping_is_what_is_written_and_read() {
        let v = to_json(&full());
        assert_eq!(v["capturedAtMs"], "1795000000123", "int64 is a string in the mapping");
        assert_eq!(v["colorScheme"], "COLOR_SCHEME_DARK", "an enum by its name");
        assert_eq!(v["cookies"][1]["httpOnly"], true);
        assert_eq!(v["httpAuth"]["password"], "s3cr:et");
        // Proto names and int64 numbers are accepted too; absent fields are defaults.
        let env = from_json(&json!({
            "version": 1, "origin": "http://a", "captured_at_ms": 42,
            "cookies": [{"name": "n", "http_only": true}], "local_storage": {"k": "v"},
        }))
        .unwrap();
        assert_eq!(env.captured_at_ms, 42);
        assert!(env.cookies[0].http_only);
        assert_eq!(env.local_storage["k"], "v");
        assert!(env.viewport.is_none() && env.http_auth.is_none());
    }

    #[test]
    fn unknown_or_mistyped_fields_are_refused() {
        let err = from_json(&json!({"version": 1, "orgin": "http://a"})).unwrap_err();
        assert!(err.contains("unknown field \"orgin\""), "{err}");
        let err = from_json(&json!({"cookies": [{"name": "n", "expiry": 1}]})).unwrap_err();
        assert!(err.contains("envelope.cookies[]: unknown field \"expiry\""), "{err}");
        let err = from_json(&json!({"capturedAtMs": "soon"})).unwrap_err();
        assert!(err.contains("capturedAtMs"), "{err}");
        assert!(from_json(&json!({"version": -1})).is_err());
        assert!(from_json(&json!([])).is_err());
    }
}
