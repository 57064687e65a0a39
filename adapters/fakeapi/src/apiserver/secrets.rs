//! Secret `stringData`: write-only. The real server folds it into `data` (base64-encoded, a
//! key in both taking the `stringData` value) on every create and update, and never stores it.

use super::resources::ResourceType;
use super::status::Failure;
use base64::Engine as _;
use serde_json::{Map, Value};

fn is_secret(t: &ResourceType) -> bool {
    t.group.is_empty() && t.kind == "Secret"
}

/// Moves `stringData` of a Secret into `data`; 400 when it is not a map of strings (the real
/// server cannot decode it).
pub fn fold_string_data(t: &ResourceType, object: &mut Value) -> Result<(), Failure> {
    if !is_secret(t) {
        return Ok(());
    }
    let Some(object) = object.as_object_mut() else {
        return Ok(());
    };
    let strings = match object.remove("stringData") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(strings)) => strings,
        Some(other) => return Err(undecodable("", &other)),
    };
    let mut encoded = Map::new();
    for (key, value) in strings {
        let Value::String(text) = value else {
            return Err(undecodable(&format!(".{key}"), &value));
        };
        let text = base64::engine::general_purpose::STANDARD.encode(text);
        encoded.insert(key, Value::String(text));
    }
    if encoded.is_empty() {
        return Ok(());
    }
    let data = object
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        data.extend(encoded);
    }
    Ok(())
}

fn undecodable(at: &str, value: &Value) -> Failure {
    let wanted = if at.is_empty() {
        "map[string]string"
    } else {
        "string"
    };
    let got = match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    Failure::bad_request(format!(
        "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal {got} into Go struct field Secret.stringData{at} of type {wanted}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret_type() -> ResourceType {
        ResourceType {
            group: String::new(),
            versions: vec!["v1".into()],
            kind: "Secret".into(),
            plural: "secrets".into(),
            namespaced: true,
            status: false,
            short_names: Vec::new(),
            custom: false,
        }
    }

    #[test]
    fn string_data_is_encoded_into_data_and_wins_over_it() {
        let mut s =
            json!({"data": {"a": "b2xk", "b": "Yg=="}, "stringData": {"a": "new", "c": "ü"}});
        fold_string_data(&secret_type(), &mut s).unwrap();
        assert_eq!(s, json!({"data": {"a": "bmV3", "b": "Yg==", "c": "w7w="}}));
        let mut only = json!({"stringData": {"k": "v"}});
        fold_string_data(&secret_type(), &mut only).unwrap();
        assert_eq!(only, json!({"data": {"k": "dg=="}}));
    }

    #[test]
    fn string_data_that_is_not_strings_is_400_and_other_kinds_are_untouched() {
        for bad in [
            json!({"stringData": {"k": 1}}),
            json!({"stringData": ["k"]}),
        ] {
            let err = fold_string_data(&secret_type(), &mut bad.clone()).unwrap_err();
            assert_eq!(err.code, 400, "{bad}");
        }
        let config_map = ResourceType {
            kind: "ConfigMap".into(),
            ..secret_type()
        };
        let mut cm = json!({"stringData": {"k": "v"}});
        fold_string_data(&config_map, &mut cm).unwrap();
        assert_eq!(cm, json!({"stringData": {"k": "v"}}));
    }
}
