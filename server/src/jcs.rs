//! RFC 8785 canonical JSON (JCS), a leaf: what envelopes' integrity and the audit chain hash.

use serde_json::Value;

/// RFC 8785 serialization: members sorted by UTF-16 code units, ECMAScript number and string
/// forms, no whitespace.
pub fn jcs(v: &Value) -> String {
    let mut out = String::new();
    write_jcs(v, &mut out);
    out
}

fn write_jcs(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => out.push_str(&es_number(i as f64)),
            (_, Some(u)) => out.push_str(&es_number(u as f64)),
            _ => out.push_str(&es_number(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => write_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_jcs(item, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_jcs(&o[k], out);
            }
            out.push('}');
        }
    }
}

/// ECMAScript `Number.prototype.toString` for finite doubles (what JCS prescribes).
fn es_number(n: f64) -> String {
    if n == 0.0 || !n.is_finite() {
        return "0".into();
    }
    let abs = n.abs();
    if !(1e-6..1e21).contains(&abs) {
        // Rust writes `1.5e21` / `1e-7`; ECMAScript writes `1.5e+21` / `1e-7`.
        let s = format!("{n:e}");
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    if n.fract() == 0.0 {
        return format!("{}", n as i128);
    }
    // Display gives the shortest digits that round-trip, without an exponent in this range.
    format!("{n}")
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn jcs_numbers_strings_and_key_order() {
        assert_eq!(es_number(1e21), "1e+21");
        assert_eq!(es_number(1.5e-7), "1.5e-7");
        assert_eq!(es_number(0.000001), "0.000001");
        assert_eq!(es_number(-0.0), "0");
        assert_eq!(es_number(123456789012.0), "123456789012");
        assert_eq!(es_number(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(jcs(&json!("a\"b\\c\n\u{1}é")), r#""a\"b\\c\n\u0001é""#);
        // UTF-16 order: U+FFFD sorts after an astral character's high surrogate? No: "\u{1F600}"
        // starts with 0xD83D, which sorts before 0xFFFD.
        assert_eq!(jcs(&json!({"\u{fffd}": 1, "\u{1F600}": 2, "b": 3})), "{\"b\":3,\"\u{1F600}\":2,\"\u{fffd}\":1}");
    }
}
