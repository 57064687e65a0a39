//! Patch bodies turned into the merge patches `ClusterStore::patch` applies, so every write of
//! the fake server goes through the simulator's store semantics.
//!
//! * RFC 6902 JSON patch ([`apply_json_patch`]), with the API server's quirk that `test` of a
//!   missing path against `null` succeeds (kube's finalizer helper relies on it).
//! * [`merge_diff`]: the RFC 7386 merge patch that turns one document into another, used for
//!   PUT and JSON patch (apply to a copy, diff, hand the diff to the store).
//! * [`strip_directives`]: strategic-merge `$`-directives removed, so a strategic merge patch of
//!   a built-in kind can be applied as a plain merge patch.

use serde_json::{Map, Value};

/// Server-managed metadata a client cannot set through a write.
pub const SERVER_FIELDS: &[&str] = &[
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Copies the server-managed metadata of `current` over `desired`, so a diff never touches it.
pub fn keep_server_fields(current: &Value, desired: &mut Value) {
    let Some(meta) = desired
        .as_object_mut()
        .map(|m| {
            m.entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()))
        })
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for field in SERVER_FIELDS {
        match current.pointer(&format!("/metadata/{field}")) {
            Some(v) => meta.insert(field.to_string(), v.clone()),
            None => meta.remove(*field),
        };
    }
}

/// The RFC 7386 merge patch that turns `from` into `to` (arrays and scalars are replaced
/// whole, keys missing in `to` become `null`).
pub fn merge_diff(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for (k, va) in a {
                match b.get(k) {
                    None => {
                        out.insert(k.clone(), Value::Null);
                    }
                    Some(vb) if vb != va => {
                        let d = if va.is_object() && vb.is_object() {
                            merge_diff(va, vb)
                        } else {
                            vb.clone()
                        };
                        out.insert(k.clone(), d);
                    }
                    Some(_) => {}
                }
            }
            for (k, vb) in b {
                if !a.contains_key(k) && !vb.is_null() {
                    out.insert(k.clone(), vb.clone());
                }
            }
            Value::Object(out)
        }
        _ => to.clone(),
    }
}

/// Removes strategic-merge-patch directives (`$patch`, `$setElementOrder/...`,
/// `$retainKeys`, `$deleteFromPrimitiveList/...`) at every level.
pub fn strip_directives(patch: &mut Value) {
    match patch {
        Value::Object(map) => {
            map.retain(|k, _| !k.starts_with('$'));
            map.values_mut().for_each(strip_directives);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// `(parent pointer, last token)`; `None` for the root.
fn split_pointer(path: &str) -> Result<Option<(String, String)>, String> {
    if path.is_empty() {
        return Ok(None);
    }
    if !path.starts_with('/') {
        return Err(format!("invalid JSON pointer {path:?}"));
    }
    let (parent, last) = path.rsplit_once('/').expect("starts with /");
    Ok(Some((parent.to_string(), unescape(last))))
}

fn array_index(token: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let i: usize = token
        .parse()
        .map_err(|_| format!("invalid array index {token:?}"))?;
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > max || (!allow_end && len == 0) {
        return Err(format!("array index {i} out of bounds"));
    }
    Ok(i)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let Some((parent, last)) = split_pointer(path)? else {
        *doc = value;
        return Ok(());
    };
    match doc.pointer_mut(&parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let i = array_index(&last, items.len(), true)?;
            items.insert(i, value);
            Ok(())
        }
        _ => Err(format!("doc is missing path: {parent:?}")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let Some((parent, last)) = split_pointer(path)? else {
        return Err("cannot remove the whole document".into());
    };
    match doc.pointer_mut(&parent) {
        Some(Value::Object(map)) => map
            .remove(&last)
            .ok_or_else(|| format!("unable to remove nonexistent key: {last}")),
        Some(Value::Array(items)) => {
            let i = array_index(&last, items.len(), false)?;
            Ok(items.remove(i))
        }
        _ => Err(format!("doc is missing path: {path:?}")),
    }
}

/// Applies an RFC 6902 patch to `doc`. The error is the message of the 422 answer.
pub fn apply_json_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).unwrap_or_default();
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("operation {op} has no path"))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("operation {name} on {path:?} has no value"))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("operation {name} on {path:?} has no from"))
        };
        match name {
            "add" => add(doc, path, value()?)?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                if doc.pointer(path).is_none() {
                    return Err(format!(
                        "replace operation does not apply: doc is missing path: {path}"
                    ));
                }
                *doc.pointer_mut(path).expect("checked above") = value()?;
            }
            "move" => {
                let v = remove(doc, from()?)?;
                add(doc, path, v)?;
            }
            "copy" => {
                let v = doc.pointer(from()?).cloned().ok_or_else(|| {
                    format!("copy from a missing path {:?}", from().unwrap_or(""))
                })?;
                add(doc, path, v)?;
            }
            "test" => {
                let want = value()?;
                let got = doc.pointer(path).unwrap_or(&Value::Null);
                if *got != want {
                    return Err(format!("testing value {path} failed: test failed"));
                }
            }
            other => {
                return Err(format!(
                    "unexpected kind of JSON patch operation: {other:?}"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_ops_and_the_null_test_quirk() {
        let mut doc = json!({"metadata": {"name": "m"}});
        let add_first = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["a"]},
        ]);
        apply_json_patch(&mut doc, &add_first).unwrap();
        apply_json_patch(
            &mut doc,
            &json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "b"}]),
        )
        .unwrap();
        assert_eq!(
            doc.pointer("/metadata/finalizers"),
            Some(&json!(["a", "b"]))
        );
        let stale = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "b"},
                           {"op": "remove", "path": "/metadata/finalizers/0"}]);
        assert!(apply_json_patch(&mut doc.clone(), &stale).is_err());
        apply_json_patch(
            &mut doc,
            &json!([{"op": "remove", "path": "/metadata/finalizers/0"},
                                         {"op": "replace", "path": "/metadata/name", "value": "x"},
                                         {"op": "copy", "from": "/metadata/name", "path": "/a~1b"},
                                         {"op": "move", "from": "/a~1b", "path": "/c"}]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"name": "x", "finalizers": ["b"]}, "c": "x"})
        );
    }

    #[test]
    fn merge_diff_round_trips_through_merge_patch() {
        let from = json!({"a": {"b": 1, "c": [1]}, "d": 1, "e": {"f": 1}});
        let to = json!({"a": {"b": 2, "c": [1, 2]}, "e": {"f": 1}, "g": {"h": true}});
        let diff = merge_diff(&from, &to);
        assert_eq!(
            diff,
            json!({"a": {"b": 2, "c": [1, 2]}, "d": null, "g": {"h": true}})
        );
        let mut applied = from.clone();
        sim::api::json::merge_patch(&mut applied, &diff);
        assert_eq!(applied, to);
    }

    #[test]
    fn strategic_directives_are_dropped() {
        let mut p =
            json!({"$setElementOrder/containers": [], "spec": {"$retainKeys": ["a"], "a": 1}});
        strip_directives(&mut p);
        assert_eq!(p, json!({"spec": {"a": 1}}));
    }
}
