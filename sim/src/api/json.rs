//! Small helpers over `serde_json::Value`: paths, merge patch (RFC 7386), metadata access.

use serde_json::{Map, Value};

/// JSON pointers read without an allocation per token ([`engine::convert::pointer`]; each token
/// of `Value::pointer` allocates): the simulator reads them on every write.
pub trait Pointer {
    fn at_pointer(&self, pointer: &str) -> Option<&Value>;
}

impl Pointer for Value {
    fn at_pointer(&self, pointer: &str) -> Option<&Value> {
        engine::convert::pointer(self, pointer)
    }
}

/// RFC 7386 JSON merge patch: objects merge, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    merge_patch_changed(target, patch);
}

/// [`merge_patch`], telling whether `target` changed.
pub fn merge_patch_changed(target: &mut Value, patch: &Value) -> bool {
    let Value::Object(patch_map) = patch else {
        if target == patch {
            return false;
        }
        *target = patch.clone();
        return true;
    };
    let mut changed = false;
    if !target.is_object() {
        *target = Value::Object(Map::new());
        changed = true;
    }
    for (k, v) in patch_map {
        changed |= merge_member(target, k, v);
    }
    changed
}

/// Merges the member `k` of a merge patch into `target` (made an object when it is not):
/// whether `target` changed.
pub fn merge_member(target: &mut Value, k: &str, v: &Value) -> bool {
    let mut changed = false;
    if !target.is_object() {
        *target = Value::Object(Map::new());
        changed = true;
    }
    if v.is_null() {
        changed |= target
            .as_object_mut()
            .and_then(|map| map.remove(k))
            .is_some();
    } else if let Some(existing) = engine::convert::member_mut(target, k) {
        changed |= merge_patch_changed(existing, v);
    } else {
        let mut added = Value::Null;
        merge_patch_changed(&mut added, v);
        target
            .as_object_mut()
            .map(|map| map.insert(k.to_string(), added));
        changed = true;
    }
    changed
}

/// The value at a dotted path (`status.phase`, `spec.providerIDList.0`) or a JSON Pointer
/// (`/metadata/annotations/a~1b`).
pub fn get_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    if path.starts_with('/') {
        return engine::convert::pointer(value, path);
    }
    let mut cur = value;
    for seg in engine::convert::split_ascii(path, b'.') {
        cur = match cur {
            Value::Object(_) => engine::convert::member(cur, seg)?,
            Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

pub fn str_at<'a>(value: &'a Value, path: &str) -> Option<&'a str> {
    get_path(value, path).and_then(Value::as_str)
}

/// The object at `path`, created (as `{}`) along the way when missing.
pub fn object_at<'a>(value: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let cur = path.iter().fold(value, |cur, seg| {
        member_entry(cur, seg, || Value::Object(Map::new()))
    });
    as_object(cur)
}

pub fn set_path(value: &mut Value, path: &[&str], v: Value) {
    let (last, parents) = path.split_last().expect("non-empty path");
    let parent = parents.iter().fold(value, |cur, seg| {
        member_entry(cur, seg, || Value::Object(Map::new()))
    });
    *member_entry(parent, last, || Value::Null) = v;
}

/// `value` as an object, made one (`{}`) when it is not.
fn as_object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    value.as_object_mut().expect("made an object above")
}

/// The member `name` of `value` (made an object when it is not), inserted as `new()` at the
/// end when missing. Found by a scan: `Map::entry` allocates the key and hashes it on every
/// call, present or not, and most calls find the member.
fn member_entry<'a>(
    value: &'a mut Value,
    name: &str,
    new: impl FnOnce() -> Value,
) -> &'a mut Value {
    if engine::convert::member(value, name).is_none() {
        as_object(value).insert(name.to_string(), new());
    }
    engine::convert::member_mut(value, name).expect("present, or inserted above")
}

pub fn name(obj: &Value) -> &str {
    str_at(obj, "metadata.name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    str_at(obj, "metadata.namespace").unwrap_or("")
}

pub fn kind(obj: &Value) -> &str {
    str_at(obj, "kind").unwrap_or("")
}

pub fn api_version(obj: &Value) -> &str {
    str_at(obj, "apiVersion").unwrap_or("")
}

/// The API group of an apiVersion (`apps/v1` → `apps`, `v1` → ``).
/// The group of an apiVersion (`apps/v1` → `apps`, `v1` → ``); a group alone (what the engine
/// sends for a provider object it has not seen, `infrastructure.cluster.x-k8s.io`) is itself.
pub fn group_of(api_version: &str) -> &str {
    match api_version.split_once('/') {
        Some((g, _)) => g,
        None if api_version.contains('.') => api_version,
        None => "",
    }
}

pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    string_map(obj, "metadata.labels")
}

pub fn annotations(obj: &Value) -> std::collections::BTreeMap<String, String> {
    string_map(obj, "metadata.annotations")
}

fn string_map(obj: &Value, path: &str) -> std::collections::BTreeMap<String, String> {
    get_path(obj, path)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    get_path(obj, "metadata.finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `finalizers` would be non-empty, without collecting them.
pub fn has_finalizers(obj: &Value) -> bool {
    get_path(obj, "metadata.finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(Value::is_string))
}

/// The controller (kind, name) of an object, from its owner references.
pub fn controller(obj: &Value) -> Option<(&str, &str)> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|o| o["controller"] == true)
        .and_then(|o| Some((o["kind"].as_str()?, o["name"].as_str()?)))
}

pub fn is_deleting(obj: &Value) -> bool {
    get_path(obj, "metadata.deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// The object a reference names (`{apiVersion|apiGroup, kind, name}`) in `namespace`, with the
/// apiVersion to create it in (a v1beta2 reference has only a group: its `v1beta2` is assumed).
pub fn ref_target(r: &Value, namespace: &str) -> Option<(super::ObjKey, String)> {
    let api_version = r
        .get("apiVersion")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            r.get("apiGroup")
                .and_then(Value::as_str)
                .map(|g| format!("{g}/v1beta2"))
        })?;
    let kind = r
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())?;
    let name = r.get("name").and_then(Value::as_str)?;
    let key = super::ObjKey::new(group_of(&api_version), kind, namespace, name);
    Some((key, api_version))
}

/// A v1beta1 Go duration (`1m`, `90s`, `1h30m`) as a duration (0: no limit).
pub fn go_duration(text: &str) -> Option<engine::time::Duration> {
    let mut total = 0i64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: i64 = std::mem::take(&mut number).parse().ok()?;
        total += n * match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
    }
    (number.is_empty() && total > 0).then(|| engine::time::Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_name_their_object_in_either_api_version() {
        let v1 = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachine", "name": "m1"});
        let v2 = json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "m1"});
        let (k1, a1) = ref_target(&v1, "ns").unwrap();
        let (k2, a2) = ref_target(&v2, "ns").unwrap();
        assert_eq!(k1, k2);
        assert_eq!(
            (a1.as_str(), a2.as_str()),
            (
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "infrastructure.cluster.x-k8s.io/v1beta2"
            )
        );
        assert!(ref_target(&json!({"name": "x"}), "ns").is_none());
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut doc = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(doc, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn paths_support_dots_indexes_and_pointers() {
        let doc = json!({"spec": {"list": ["x", "y"]}, "metadata": {"annotations": {"a/b": "v"}}});
        assert_eq!(get_path(&doc, "spec.list.1"), Some(&json!("y")));
        assert_eq!(
            get_path(&doc, "/metadata/annotations/a~1b"),
            Some(&json!("v"))
        );
        assert_eq!(get_path(&doc, "spec.missing"), None);
    }

    #[test]
    fn go_durations_read_as_upstream_writes_them() {
        let secs = |t: &str| go_duration(t).map(|d| d.as_millis() / 1000);
        assert_eq!(secs("1m"), Some(60));
        assert_eq!(secs("1h30m5s"), Some(5405));
        assert_eq!(secs("0s"), None, "0 is no limit");
        assert_eq!(secs("-1s"), None, "a negative timeout judges nothing");
        assert_eq!(secs("10"), None, "a unit is required");
    }
}
