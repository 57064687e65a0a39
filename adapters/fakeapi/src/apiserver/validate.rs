//! Structural-schema validation and pruning of custom resources written over HTTP, as the real
//! API server does it for CRDs (the vendored `openAPIV3Schema`s of [`super::crds`]).
//!
//! Checked: `type` (with `nullable`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-preserve-unknown-fields`), `required`, `enum`, `pattern`, `minLength` /
//! `maxLength`, `minimum` / `maximum`, `minItems` / `maxItems`, `minProperties` /
//! `maxProperties`, `format: date-time`, and unique keys of `x-kubernetes-list-type: map` /
//! `set` lists. Unknown fields are pruned (`fieldValidation=Strict` refuses them, `Warn`, the
//! default, names them in `Warning` headers). `null` in a field that is not `nullable` is
//! dropped, as the real server drops it. An update is ratcheted: a problem at a field whose
//! value the write did not change is not reported (so objects stored before validation, by a
//! scenario or a fault, can still be written to).
//!
//! Not checked: CEL rules (`x-kubernetes-validations`), `allOf`/`anyOf`/`oneOf`/`not`, other
//! formats, `metadata` beyond its names (see `names.rs`); no defaulting.

use super::crds;
use serde_json::{Map, Value};

/// At most this many causes are reported for one write (the real server caps its list too).
pub(super) const CAUSES_MAX: usize = 100;

/// One problem, as a `metav1.StatusCause`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, …
    pub reason: &'static str,
    pub message: String,
    /// `spec.conditions[0].type`.
    pub field: String,
    /// The same place as a JSON pointer (for ratcheting).
    pub pointer: String,
}

/// What validating one object found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub causes: Vec<Cause>,
    /// Fields pruned because the schema does not declare them, as `spec.foo`.
    pub unknown: Vec<String>,
}

/// How the request asked unknown fields to be treated (`?fieldValidation=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// The query value: unset or empty is `Warn`, the real server's default.
    pub fn parse(v: Option<&str>) -> Result<Self, String> {
        match v.unwrap_or_default() {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            )),
        }
    }
}

/// Validates `obj` against `schema` and prunes its unknown fields in place. `old` is the stored
/// object an update replaces (problems at unchanged fields are not reported, nor are unknown
/// fields it already had).
pub fn check(schema: &Value, obj: &mut Value, old: Option<&Value>) -> Outcome {
    let mut out = Outcome::default();
    walk(schema, obj, &Path::root(), true, &mut out);
    if let Some(old) = old {
        out.causes.retain(|c| {
            // Ratcheting: a field the write left as it was keeps whatever problem it had.
            // A missing required field is judged by the object that lacks it.
            let at = if c.reason == "FieldValueRequired" {
                c.pointer.rsplit_once('/').map_or("", |(parent, _)| parent)
            } else {
                c.pointer.as_str()
            };
            // List items are matched by value, not position: a condition that moved when
            // another was added is still the condition that was stored.
            let unchanged = obj
                .pointer(at)
                .is_some_and(|now| any_at(old, &segments(at), &|was| was == now));
            !unchanged
        });
        out.unknown
            .retain(|field| old.pointer(&field_to_pointer(field)).is_none());
    }
    out.causes.truncate(CAUSES_MAX);
    out
}

/// The unescaped segments of a JSON pointer.
fn segments(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Whether `test` holds for a value of `v` at `path`, where an index into a list may be any
/// index of that list.
fn any_at(v: &Value, path: &[String], test: &dyn Fn(&Value) -> bool) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return test(v);
    };
    match v {
        Value::Object(m) => m.get(first).is_some_and(|c| any_at(c, rest, test)),
        Value::Array(items) if first.parse::<usize>().is_ok() => {
            items.iter().any(|c| any_at(c, rest, test))
        }
        _ => false,
    }
}

/// The schema for a custom resource of `group`/`kind` at `version`, if the server has its CRD.
pub fn schema_for(group: &str, kind: &str, version: &str) -> Option<&'static Value> {
    crds::version(group, kind, version)
        .map(|v| &v.schema)
        .filter(|s| s.is_object())
}

/// A place in the object, as a field path and as a JSON pointer.
#[derive(Clone)]
struct Path {
    field: String,
    pointer: String,
}

impl Path {
    fn root() -> Self {
        Path {
            field: String::new(),
            pointer: String::new(),
        }
    }

    fn key(&self, k: &str, map_entry: bool) -> Path {
        let field = if map_entry {
            format!("{}[{k}]", self.field)
        } else if self.field.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.field)
        };
        Path {
            field,
            pointer: format!(
                "{}/{}",
                self.pointer,
                k.replace('~', "~0").replace('/', "~1")
            ),
        }
    }

    fn index(&self, i: usize) -> Path {
        Path {
            field: format!("{}[{i}]", self.field),
            pointer: format!("{}/{i}", self.pointer),
        }
    }

    /// `spec.x`, or `<root>` for the object itself.
    fn shown(&self) -> &str {
        if self.field.is_empty() {
            "<root>"
        } else {
            &self.field
        }
    }
}

/// `spec.foo.bar` as `/spec/foo/bar` (unknown-field paths have no indexes or map keys with
/// dots that matter for the ratcheting lookup; an inexact lookup only reports more).
fn field_to_pointer(field: &str) -> String {
    field
        .split('.')
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as the real server's messages quote it.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".to_string(),
        Value::Array(_) => "\"array\"".to_string(),
        other => other.to_string(),
    }
}

fn push(out: &mut Outcome, path: &Path, reason: &'static str, message: String) {
    if out.causes.len() < CAUSES_MAX {
        out.causes.push(Cause {
            reason,
            message,
            field: path.field.clone(),
            pointer: path.pointer.clone(),
        });
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The largest magnitude a number decoded as a float still counts as an integer at (2^53 - 1,
/// go-openapi's `IsFloat64AJSONInteger`).
const FLOAT_INTEGER_MAX: f64 = 9_007_199_254_740_991.0;

/// Whether the real server takes `v` as an integer: a number that decodes as a 64-bit
/// integer, or a float with no fraction within ±(2^53 - 1). `1e+99`, `1.5` and a number beyond the
/// 64-bit range (which it decodes as a float) are not.
fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) if n.is_i64() => true,
        Value::Number(n) => n
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() <= FLOAT_INTEGER_MAX),
        _ => false,
    }
}

/// Whether `v` has the schema's `type`; pushes the type error otherwise.
fn type_ok(schema: &Value, v: &Value, path: &Path, out: &mut Outcome) -> bool {
    let wanted = schema.get("type").and_then(Value::as_str);
    let ok = if flag(schema, "x-kubernetes-int-or-string") {
        is_integer(v) || v.is_string()
    } else {
        match wanted {
            None => true,
            Some("object") => v.is_object(),
            Some("array") => v.is_array(),
            Some("string") => v.is_string(),
            Some("integer") => is_integer(v),
            Some("number") => v.is_number(),
            Some("boolean") => v.is_boolean(),
            Some(_) => true,
        }
    };
    if !ok {
        let wanted = if flag(schema, "x-kubernetes-int-or-string") {
            "integer,string"
        } else {
            wanted.unwrap_or_default()
        };
        push(
            out,
            path,
            "FieldValueTypeInvalid",
            format!(
                "Invalid value: \"{}\": {} in body must be of type {wanted}: {}",
                type_name(v),
                path.shown(),
                shown(v)
            ),
        );
    }
    ok
}

fn walk(schema: &Value, v: &mut Value, path: &Path, root: bool, out: &mut Outcome) {
    if !schema.is_object() {
        return;
    }
    if v.is_null() {
        if !flag(schema, "nullable") {
            push(
                out,
                path,
                "FieldValueTypeInvalid",
                format!(
                    "Invalid value: \"null\": {} in body must be of type {}: \"null\"",
                    path.shown(),
                    schema
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("object")
                ),
            );
        }
        return;
    }
    if !type_ok(schema, v, path, out) {
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        push(
            out,
            path,
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {}: supported values: {}",
                shown(v),
                list.join(", ")
            ),
        );
    }
    match v {
        Value::Object(map) => object(schema, map, path, root, out),
        Value::Array(items) => array(schema, items, path, out),
        Value::String(s) => string(schema, s, path, out),
        Value::Number(_) => number(schema, v, path, out),
        _ => {}
    }
}

fn object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &Path,
    root: bool,
    out: &mut Outcome,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            let declared = properties.and_then(|p| p.get(&k));
            if k != "metadata"
                && let (Some(s), Some(child)) = (declared, map.get_mut(&k))
            {
                walk(s, child, &path.key(&k, false), false, out);
            }
            continue;
        }
        let (child_schema, map_entry) = match properties.and_then(|p| p.get(&k)) {
            Some(s) => (Some(s), false),
            None => match additional {
                Some(s) if s.is_object() => (Some(s), true),
                Some(Value::Bool(true)) => continue,
                _ if preserve => continue,
                _ => (None, false),
            },
        };
        let child_path = path.key(&k, map_entry);
        let Some(child_schema) = child_schema else {
            out.unknown.push(child_path.field);
            map.remove(&k);
            continue;
        };
        if map.get(&k).is_some_and(Value::is_null) && !flag(child_schema, "nullable") {
            map.remove(&k);
            continue;
        }
        if let Some(child) = map.get_mut(&k) {
            walk(child_schema, child, &child_path, false, out);
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(name) {
                push(
                    out,
                    &path.key(name, false),
                    "FieldValueRequired",
                    "Required value".to_string(),
                );
            }
        }
    }
    let count = map.len();
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && (count as u64) < min
    {
        push(
            out,
            path,
            "FieldValueInvalid",
            format!(
                "Invalid value: {count}: {} in body should have at least {min} properties",
                path.shown()
            ),
        );
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && (count as u64) > max
    {
        push(
            out,
            path,
            "FieldValueTooMany",
            format!("Too many: {count}: must have at most {max} items"),
        );
    }
}

fn array(schema: &Value, items: &mut [Value], path: &Path, out: &mut Outcome) {
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter_mut().enumerate() {
            walk(item_schema, item, &path.index(i), false, out);
        }
    }
    let count = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && count < min
    {
        push(
            out,
            path,
            "FieldValueInvalid",
            format!(
                "Invalid value: {count}: {} in body should have at least {min} items",
                path.shown()
            ),
        );
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && count > max
    {
        push(
            out,
            path,
            "FieldValueTooMany",
            format!("Too many: {count}: must have at most {max} items"),
        );
    }
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let identity = |item: &Value| -> Value {
        match list_type {
            Some("map") => Value::Object(
                keys.iter()
                    .filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone())))
                    .collect(),
            ),
            _ => item.clone(),
        }
    };
    if matches!(list_type, Some("map" | "set")) {
        let mut seen: Vec<Value> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let id = identity(item);
            if seen.contains(&id) {
                push(
                    out,
                    &path.index(i),
                    "FieldValueDuplicate",
                    format!("Duplicate value: {id}"),
                );
            } else {
                seen.push(id);
            }
        }
    }
}

fn string(schema: &Value, s: &str, path: &Path, out: &mut Outcome) {
    let chars = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        push(
            out,
            path,
            "FieldValueInvalid",
            format!(
                "Invalid value: {s:?}: {} in body should be at least {min} chars long",
                path.shown()
            ),
        );
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        push(
            out,
            path,
            "FieldValueTooLong",
            format!("Too long: may not be more than {max} bytes"),
        );
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str)
        && let Some(re) = crds::pattern(p)
        && !re.is_match(s)
    {
        push(
            out,
            path,
            "FieldValueInvalid",
            format!(
                "Invalid value: {s:?}: {} in body should match '{p}'",
                path.shown()
            ),
        );
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time") && !is_date_time(s) {
        push(
            out,
            path,
            "FieldValueInvalid",
            format!(
                "Invalid value: {s:?}: {} in body must be of type date-time: {s:?}",
                path.shown()
            ),
        );
    }
}

/// RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn is_date_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .is_some_and(|d| d.len() == r.len() && d.iter().all(u8::is_ascii_digit))
    };
    let fixed = digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && matches!(b.get(10), Some(b'T' | b't' | b' '))
        && digits(11..13)
        && b.get(13) == Some(&b':')
        && digits(14..16)
        && b.get(16) == Some(&b':')
        && digits(17..19);
    if !fixed {
        return false;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match b.get(i) {
        Some(b'Z' | b'z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            digits(i + 1..i + 3)
                && b.get(i + 3) == Some(&b':')
                && digits(i + 4..i + 6)
                && i + 6 == b.len()
        }
        _ => false,
    }
}

fn number(schema: &Value, v: &Value, path: &Path, out: &mut Outcome) {
    let Some(x) = v.as_f64() else { return };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMinimum");
        if x < min || (exclusive && x == min) {
            let than = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            push(
                out,
                path,
                "FieldValueInvalid",
                format!(
                    "Invalid value: {v}: {} in body should be {than} {}",
                    path.shown(),
                    schema["minimum"]
                ),
            );
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMaximum");
        if x > max || (exclusive && x == max) {
            let than = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            push(
                out,
                path,
                "FieldValueInvalid",
                format!(
                    "Invalid value: {v}: {} in body should be {than} {}",
                    path.shown(),
                    schema["maximum"]
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine_schema() -> &'static Value {
        schema_for("cluster.x-k8s.io", "Machine", "v1beta2").unwrap()
    }

    fn machine(spec: Value) -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": "m1", "namespace": "default"}, "spec": spec})
    }

    fn fields(o: &Outcome) -> Vec<(&str, &str)> {
        o.causes
            .iter()
            .map(|c| (c.field.as_str(), c.reason))
            .collect()
    }

    #[test]
    fn a_valid_machine_passes_and_keeps_its_fields() {
        let mut m = machine(json!({"clusterName": "c1",
            "bootstrap": {"dataSecretName": "s"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "d"},
            "deletion": {"nodeDrainTimeoutSeconds": 30}}));
        let before = m.clone();
        let o = check(machine_schema(), &mut m, None);
        assert_eq!(o, Outcome::default());
        assert_eq!(m, before);
    }

    #[test]
    fn problems_are_reported_with_field_paths() {
        let mut m = machine(json!({"clusterName": "",
            "bootstrap": {"dataSecretName": "s"},
            "infrastructureRef": {"apiGroup": "x", "kind": "K", "name": "d"},
            "deletion": {"nodeDrainTimeoutSeconds": "soon"},
            "bogus": 1}));
        let o = check(machine_schema(), &mut m, None);
        assert_eq!(
            fields(&o),
            [
                ("spec.clusterName", "FieldValueInvalid"),
                (
                    "spec.deletion.nodeDrainTimeoutSeconds",
                    "FieldValueTypeInvalid"
                ),
            ]
        );
        assert_eq!(o.unknown, ["spec.bogus"]);
        assert!(
            m.pointer("/spec/bogus").is_none(),
            "unknown fields are pruned"
        );
        let mut m = machine(json!({"clusterName": "c1"}));
        let o = check(machine_schema(), &mut m, None);
        assert_eq!(
            fields(&o),
            [
                ("spec.bootstrap", "FieldValueRequired"),
                ("spec.infrastructureRef", "FieldValueRequired")
            ]
        );
    }

    #[test]
    fn conditions_need_a_message_and_unique_types() {
        let c = json!({"type": "Ready", "status": "True", "reason": "Ok",
                       "lastTransitionTime": "2024-01-01T00:00:00Z"});
        let mut m = machine(json!({"clusterName": "c1"}));
        m["status"] = json!({"conditions": [c, c]});
        let o = check(machine_schema(), &mut m, None);
        let found = fields(&o);
        assert!(
            found.contains(&("status.conditions[0].message", "FieldValueRequired")),
            "{found:?}"
        );
        assert!(
            found.contains(&("status.conditions[1]", "FieldValueDuplicate")),
            "{found:?}"
        );
    }

    #[test]
    fn updates_ratchet_problems_they_did_not_touch() {
        let old = machine(json!({"clusterName": "c1"}));
        let mut new = machine(json!({"clusterName": "c1"}));
        new["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(check(machine_schema(), &mut new, Some(&old)).causes, []);
        let mut new = machine(json!({"clusterName": ""}));
        let o = check(machine_schema(), &mut new, Some(&old));
        assert_eq!(
            fields(&o),
            [
                ("spec.clusterName", "FieldValueInvalid"),
                ("spec.bootstrap", "FieldValueRequired"),
                ("spec.infrastructureRef", "FieldValueRequired")
            ],
            "the changed spec is judged whole, as the real server's ratcheting does"
        );
    }

    #[test]
    fn ratcheting_matches_list_items_by_value() {
        let stored = json!({"type": "Ready", "status": "True"});
        let mut old = machine(json!({"clusterName": "c1"}));
        old["status"] = json!({"conditions": [stored]});
        let mut new = old.clone();
        let added = json!({"type": "Paused", "status": "False", "reason": "NotPaused",
                           "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"});
        new["status"]["conditions"] = json!([added, stored]);
        let o = check(machine_schema(), &mut new, Some(&old));
        assert_eq!(
            o.causes,
            [],
            "the stored condition moved, it did not change"
        );
        new["status"]["conditions"][0]["reason"] = json!("");
        let o = check(machine_schema(), &mut new, Some(&old));
        assert_eq!(
            fields(&o),
            [("status.conditions[0].reason", "FieldValueInvalid"); 2],
            "too short and not matching the pattern"
        );
    }

    #[test]
    fn date_times() {
        for ok in ["2024-01-01T00:00:00Z", "2024-01-01T00:00:00.5+02:00"] {
            assert!(is_date_time(ok), "{ok}");
        }
        for bad in ["2024-01-01", "yesterday", "2024-01-01T00:00:00", ""] {
            assert!(!is_date_time(bad), "{bad}");
        }
    }
}
