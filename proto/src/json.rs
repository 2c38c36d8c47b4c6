//! `google.protobuf.Value` <-> JSON, the mapping every payload and result uses on the wire.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use serde_json::Value as Json;

/// Protobuf `Value` to JSON. Whole-number doubles become JSON integers, so `1` stays `1`.
pub fn to_json(v: &Value) -> Json {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => Json::from(*n as i64),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map(Json::Number).unwrap_or(Json::Null),
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(to_json).collect()),
        Some(Kind::StructValue(s)) => Json::Object(s.fields.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

/// JSON to protobuf `Value`.
pub fn from_json(v: &Json) -> Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(a) => Kind::ListValue(ListValue { values: a.iter().map(from_json).collect() }),
        Json::Object(o) => {
            Kind::StructValue(Struct { fields: o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect() })
        }
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trips_through_protobuf_value() {
        let v = json!({"a": [1, 2.5, "x", null, true], "b": {"c": "d"}, "n": -7});
        assert_eq!(to_json(&from_json(&v)), v);
    }
}
