//! `events.k8s.io/v1` served over the same stored Events as `v1` (a real server stores an
//! Event once and converts): requests are turned into core requests, answers and watch events
//! into the events.k8s.io view. Field names map as the real conversion does: `involvedObject` ↔
//! `regarding`, `message` ↔ `note`, `reportingComponent` ↔ `reportingController`, `source` ↔
//! `deprecatedSource`, `firstTimestamp`/`lastTimestamp`/`count` ↔ `deprecatedFirstTimestamp`/
//! `deprecatedLastTimestamp`/`deprecatedCount`; the rest (`reason`, `type`, `eventTime`,
//! `series`, `action`, `related`, `reportingInstance`, `metadata`) is shared.

use serde_json::{Map, Value, json};

pub const GROUP: &str = "events.k8s.io";
pub const GROUP_VERSION: &str = "events.k8s.io/v1";

/// `(core/v1 name, events.k8s.io/v1 name)`.
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(map: &Map<String, Value>, to_v1: bool) -> Map<String, Value> {
    map.iter()
        .map(|(k, v)| {
            let renamed = RENAMES.iter().find_map(|(core, v1)| {
                let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
                (k == from).then(|| to.to_string())
            });
            (renamed.unwrap_or_else(|| k.clone()), v.clone())
        })
        .collect()
}

/// A stored (core/v1) Event as events.k8s.io/v1.
pub fn to_v1(core: &Value) -> Value {
    let Some(map) = core.as_object() else {
        return core.clone();
    };
    let mut out = rename(map, true);
    out.insert("apiVersion".into(), json!(GROUP_VERSION));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// An events.k8s.io/v1 Event (or merge patch) as core/v1; `apiVersion` becomes `v1` when given.
pub fn to_core(v1: &Value) -> Value {
    let Some(map) = v1.as_object() else {
        return v1.clone();
    };
    let mut out = rename(map, false);
    if out.contains_key("apiVersion") {
        out.insert("apiVersion".into(), json!("v1"));
    }
    Value::Object(out)
}

/// A JSON patch whose paths name events.k8s.io fields, with core paths.
fn json_patch_to_core(ops: &Value) -> Value {
    let Some(ops) = ops.as_array() else {
        return ops.clone();
    };
    let fix = |path: &str| -> String {
        let rest = path.strip_prefix('/').unwrap_or(path);
        let (first, tail) = rest
            .split_once('/')
            .map_or((rest, None), |(a, b)| (a, Some(b)));
        let first = RENAMES
            .iter()
            .find(|(_, v1)| *v1 == first)
            .map_or(first, |(core, _)| core);
        match tail {
            Some(t) => format!("/{first}/{t}"),
            None => format!("/{first}"),
        }
    };
    Value::Array(
        ops.iter()
            .map(|op| {
                let mut op = op.clone();
                for key in ["path", "from"] {
                    if let Some(p) = op.get(key).and_then(Value::as_str).map(fix) {
                        op[key] = json!(p);
                    }
                }
                op
            })
            .collect(),
    )
}

/// A request body for the events.k8s.io resource as the body of the same core request.
/// Bodies that are not JSON are passed on as sent (the core handler refuses them).
pub fn request_to_core(body: &[u8], content_type: &str) -> Vec<u8> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return body.to_vec();
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return body.to_vec();
    };
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let converted = if media == "application/json-patch+json" {
        json_patch_to_core(&v)
    } else if v.get("kind").and_then(Value::as_str) == Some("DeleteOptions") {
        v
    } else {
        to_core(&v)
    };
    serde_json::to_vec(&converted).unwrap_or_else(|_| body.to_vec())
}

/// An answer of the core handler as the events.k8s.io answer: Events and Event lists
/// converted, Table rows' full objects converted, anything else (Status) as is.
pub fn present(body: Value) -> Value {
    match body.get("kind").and_then(Value::as_str) {
        Some("Event") => to_v1(&body),
        Some("EventList") => {
            let mut body = body;
            if let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) {
                for item in items.iter_mut() {
                    *item = to_v1(item);
                }
            }
            body["apiVersion"] = json!(GROUP_VERSION);
            body
        }
        Some("Table") => {
            let mut body = body;
            if let Some(rows) = body.get_mut("rows").and_then(Value::as_array_mut) {
                for row in rows.iter_mut() {
                    if row.pointer("/object/kind") == Some(&json!("Event")) {
                        row["object"] = to_v1(&row["object"]);
                    }
                }
            }
            body
        }
        _ => body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_convert_both_ways() {
        let core = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": "default"},
            "involvedObject": {"kind": "Machine", "name": "m1"}, "reason": "Drained",
            "message": "drained n1", "type": "Normal", "count": 2,
            "source": {"component": "lifecycle"}, "reportingComponent": "lifecycle"});
        let v1 = to_v1(&core);
        assert_eq!(v1["apiVersion"], GROUP_VERSION);
        assert_eq!(v1["regarding"]["name"], "m1");
        assert_eq!(v1["note"], "drained n1");
        assert_eq!(v1["deprecatedCount"], 2);
        assert_eq!(v1["reportingController"], "lifecycle");
        assert!(v1.get("message").is_none());
        assert_eq!(to_core(&v1), core);
        let ops = json!([{"op": "replace", "path": "/note", "value": "x"}]);
        assert_eq!(json_patch_to_core(&ops)[0]["path"], "/message");
    }
}
