//! Actions as the command line takes them: a payload argument (JSON when it parses, else the
//! string itself) and a batch file (a JSON list of steps).

use serde_json::{Map, Value};

use crate::{from_json, pb};

/// A payload given on the command line: JSON when the text parses as JSON (`{"full_page":
/// true}`, `3`, `true`), else the text itself as a string (`http://x/`, `document.title`).
/// `as_string` takes it as a string either way. `None` (no argument) sends no payload.
pub fn payload_arg(text: Option<&str>, as_string: bool) -> Option<Value> {
    let text = text?;
    if as_string {
        return Some(Value::String(text.to_string()));
    }
    Some(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string())))
}

/// The keys a step may have; anything else is refused, so a typo is never ignored.
const STEP_KEYS: [&str; 6] = ["action", "selector", "payload", "timeout_ms", "id", "tab_index"];

/// Steps of a batch file: a JSON list of `{action, selector?, payload?, timeout_ms?, id?,
/// tab_index?}`. The payload is JSON already, so a string payload stays a string. Errors
/// name the step (from 1) and the key.
pub fn parse_steps(text: &str) -> Result<Vec<pb::Action>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Array(steps) = doc else {
        return Err("expected a JSON list of steps ([{\"action\": ...}, ...])".into());
    };
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| match step {
            Value::Object(fields) => parse_step(fields).map_err(|e| format!("step {}: {e}", i + 1)),
            _ => Err(format!("step {}: expected an object with \"action\"", i + 1)),
        })
        .collect()
}

fn parse_step(fields: &Map<String, Value>) -> Result<pb::Action, String> {
    if let Some(key) = fields.keys().find(|k| !STEP_KEYS.contains(&k.as_str())) {
        return Err(format!("unknown key {key:?} (a step has {})", STEP_KEYS.join(", ")));
    }
    let string = |key: &str| -> Result<String, String> {
        match fields.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            // A numeric id is as good a correlation id as a string.
            Some(Value::Number(n)) if key == "id" => Ok(n.to_string()),
            Some(other) => Err(format!("{key}: expected a string, got {other}")),
        }
    };
    let action = string("action")?;
    if action.is_empty() {
        return Err("\"action\" is required".into());
    }
    let timeout_ms = match fields.get("timeout_ms") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("timeout_ms: expected milliseconds (a whole number), got {v}"))?,
    };
    let tab_index = match fields.get("tab_index") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| format!("tab_index: expected a whole number, got {v}"))?,
        ),
    };
    Ok(pb::Action {
        action,
        selector: string("selector")?,
        payload: fields.get("payload").map(from_json),
        timeout_ms,
        tab_index,
        id: string("id")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::to_json;
    use serde_json::json;

    #[test]
    fn payloads_are_json_when_they_parse_else_strings() {
        let cases: &[(&str, Value)] = &[
            ("http://127.0.0.1:8000/", json!("http://127.0.0.1:8000/")),
            (r#"{"full_page": true}"#, json!({"full_page": true})),
            ("3", json!(3)),
            ("true", json!(true)),
            (r#""quoted""#, json!("quoted")),
            ("document.title", json!("document.title")),
            ("", json!("")),
            ("{not json", json!("{not json")),
        ];
        for (text, want) in cases {
            assert_eq!(payload_arg(Some(text), false).as_ref(), Some(want), "{text:?}");
        }
        assert_eq!(payload_arg(Some("3"), true), Some(json!("3")));
        assert_eq!(payload_arg(None, false), None);
    }

    #[test]
    fn steps_read_every_field() {
        let steps = parse_steps(
            r##"[{"action": "navigate", "payload": "http://x/", "id": "go"},
                {"action": "click", "selector": "#b", "timeout_ms": 500, "tab_index": 1, "id": 7},
                {"action": "screenshot", "payload": {"full_page": true}}]"##,
        )
        .unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0].action, "navigate");
        assert_eq!(to_json(steps[0].payload.as_ref().unwrap()), json!("http://x/"));
        assert_eq!(steps[0].id, "go");
        assert_eq!((steps[1].selector.as_str(), steps[1].timeout_ms, steps[1].tab_index), ("#b", 500, Some(1)));
        assert_eq!(steps[1].id, "7");
        assert!(steps[1].payload.is_none());
        assert_eq!(to_json(steps[2].payload.as_ref().unwrap()), json!({"full_page": true}));
    }

    #[test]
    fn bad_steps_name_the_step_and_the_key() {
        let err = |text: &str| parse_steps(text).unwrap_err();
        assert!(err("{}").contains("JSON list"));
        assert!(err("[1]").starts_with("step 1: "));
        assert!(err(r#"[{"action": "url"}, {"selector": "a"}]"#).starts_with("step 2: \"action\" is required"));
        let typo = err(r#"[{"action": "click", "selecter": "a"}]"#);
        assert!(typo.contains("unknown key \"selecter\""), "{typo}");
        assert!(err(r#"[{"action": "click", "timeout_ms": -1}]"#).contains("timeout_ms"));
        assert!(err(r#"[{"action": 3}]"#).contains("action: expected a string"));
        assert!(err("[").starts_with("not JSON"));
    }
}
