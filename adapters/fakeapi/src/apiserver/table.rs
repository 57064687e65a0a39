//! Table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), what `kubectl get`
//! prints: the CRDs' `additionalPrinterColumns` (a JSONPath subset: `.a.b`, `[n]`, `[*]`,
//! `[?(@.k=="v")]`), kubectl's usual columns for Nodes, Pods, PodDisruptionBudgets, Namespaces,
//! Events, Secrets, ConfigMaps and Leases, `Name`/`Age` for the rest. Rows carry the object as
//! `PartialObjectMetadata` (default), whole (`includeObject=Object`) or not at all (`None`).

use super::crds::{self, PrinterColumn};
use super::resources::ResourceType;
use engine::Timestamp;
use serde_json::{Value, json};
use sim::api::json as sjson;

/// The Table version an `Accept` header asks for (`v1` preferred), if any.
pub fn wanted(accept: &str) -> Option<&'static str> {
    let mut found = None;
    for range in accept.split(',') {
        let params: Vec<(&str, &str)> = range
            .split(';')
            .skip(1)
            .filter_map(|p| p.trim().split_once('='))
            .collect();
        let has = |k: &str, v: &str| params.iter().any(|(pk, pv)| *pk == k && *pv == v);
        if has("as", "Table") && has("g", "meta.k8s.io") {
            if has("v", "v1") {
                return Some("v1");
            }
            if has("v", "v1beta1") {
                found = Some("v1beta1");
            }
        }
    }
    found
}

/// What each row carries (`?includeObject=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(v: Option<&str>) -> Result<Self, String> {
        match v.unwrap_or_default() {
            "" | "Metadata" => Ok(Include::Metadata),
            "None" => Ok(Include::None),
            "Object" => Ok(Include::Object),
            other => Err(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"None\", \"Metadata\", \"Object\""
            )),
        }
    }
}

/// One column: definition and how to compute its cell.
struct Column {
    name: String,
    type_: &'static str,
    format: &'static str,
    description: String,
    priority: i64,
    cell: Cell,
}

enum Cell {
    Name,
    Age(&'static str),
    Path(String, String),
    Fn(fn(&Value, Timestamp) -> Value),
}

fn col(name: &str, type_: &'static str, priority: i64, cell: Cell) -> Column {
    Column {
        name: name.to_string(),
        type_,
        format: "",
        description: String::new(),
        priority,
        cell,
    }
}

fn name_column() -> Column {
    Column {
        format: "name",
        description: "Name must be unique within a namespace.".to_string(),
        ..col("Name", "string", 0, Cell::Name)
    }
}

fn age_column() -> Column {
    Column {
        description: "CreationTimestamp is a timestamp representing the server time when this object was created.".to_string(),
        ..col("Age", "string", 0, Cell::Age("/metadata/creationTimestamp"))
    }
}

fn crd_column(c: &PrinterColumn) -> Column {
    let type_ = match c.type_.as_str() {
        "integer" => "integer",
        "number" => "number",
        "boolean" => "boolean",
        "date" => "date",
        _ => "string",
    };
    Column {
        name: c.name.clone(),
        type_,
        format: "",
        description: c.description.clone(),
        priority: c.priority,
        cell: Cell::Path(c.json_path.clone(), c.type_.clone()),
    }
}

fn columns(t: &ResourceType, version: &str) -> Vec<Column> {
    if let Some(v) = crds::version(&t.group, &t.kind, version) {
        let mut out = vec![name_column()];
        out.extend(v.printer_columns.iter().map(crd_column));
        if v.printer_columns.is_empty() {
            out.push(age_column());
        }
        return out;
    }
    match (t.group.as_str(), t.kind.as_str()) {
        ("", "Node") => vec![
            name_column(),
            col("Status", "string", 0, Cell::Fn(node_status)),
            col("Roles", "string", 0, Cell::Fn(node_roles)),
            age_column(),
            col(
                "Version",
                "string",
                0,
                Cell::Path(".status.nodeInfo.kubeletVersion".into(), "string".into()),
            ),
            col(
                "Internal-IP",
                "string",
                1,
                Cell::Path(
                    ".status.addresses[?(@.type==\"InternalIP\")].address".into(),
                    "string".into(),
                ),
            ),
            col(
                "OS-Image",
                "string",
                1,
                Cell::Path(".status.nodeInfo.osImage".into(), "string".into()),
            ),
        ],
        ("", "Pod") => vec![
            name_column(),
            col("Ready", "string", 0, Cell::Fn(pod_ready)),
            col("Status", "string", 0, Cell::Fn(pod_status)),
            col("Restarts", "string", 0, Cell::Fn(pod_restarts)),
            age_column(),
            col(
                "IP",
                "string",
                1,
                Cell::Path(".status.podIP".into(), "string".into()),
            ),
            col(
                "Node",
                "string",
                1,
                Cell::Path(".spec.nodeName".into(), "string".into()),
            ),
        ],
        ("policy", "PodDisruptionBudget") => vec![
            name_column(),
            col(
                "Min Available",
                "string",
                0,
                Cell::Fn(|o, _| budget(o, "minAvailable")),
            ),
            col(
                "Max Unavailable",
                "string",
                0,
                Cell::Fn(|o, _| budget(o, "maxUnavailable")),
            ),
            col(
                "Allowed Disruptions",
                "integer",
                0,
                Cell::Fn(|o, _| {
                    json!(
                        o.pointer("/status/disruptionsAllowed")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                    )
                }),
            ),
            age_column(),
        ],
        ("", "Namespace") => vec![
            name_column(),
            col(
                "Status",
                "string",
                0,
                Cell::Fn(|o, _| json!(sjson::str_at(o, "status.phase").unwrap_or("Active"))),
            ),
            age_column(),
        ],
        ("", "Event") => vec![
            col("Last Seen", "string", 0, Cell::Fn(event_last_seen)),
            col(
                "Type",
                "string",
                0,
                Cell::Path(".type".into(), "string".into()),
            ),
            col(
                "Reason",
                "string",
                0,
                Cell::Path(".reason".into(), "string".into()),
            ),
            col("Object", "string", 0, Cell::Fn(event_object)),
            col(
                "Message",
                "string",
                0,
                Cell::Path(".message".into(), "string".into()),
            ),
            Column {
                priority: 1,
                ..name_column()
            },
        ],
        ("", "Secret") => vec![
            name_column(),
            col(
                "Type",
                "string",
                0,
                Cell::Path(".type".into(), "string".into()),
            ),
            col(
                "Data",
                "string",
                0,
                Cell::Fn(|o, _| json!(count(o, "data") + count(o, "stringData"))),
            ),
            age_column(),
        ],
        ("", "ConfigMap") => vec![
            name_column(),
            col(
                "Data",
                "string",
                0,
                Cell::Fn(|o, _| json!(count(o, "data") + count(o, "binaryData"))),
            ),
            age_column(),
        ],
        ("coordination.k8s.io", "Lease") => vec![
            name_column(),
            col(
                "Holder",
                "string",
                0,
                Cell::Path(".spec.holderIdentity".into(), "string".into()),
            ),
            age_column(),
        ],
        _ => vec![name_column(), age_column()],
    }
}

fn count(o: &Value, key: &str) -> usize {
    o.get(key).and_then(Value::as_object).map_or(0, |m| m.len())
}

/// `duration.HumanDuration` of the real server: `45s`, `3m20s`, `5h10m`, `3d4h`, `2y`.
pub fn human_duration(ms: i64) -> String {
    if ms < -1000 {
        return "<invalid>".to_string();
    }
    let seconds = ms.max(0) / 1000;
    let minutes = seconds / 60;
    let hours = minutes / 60;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        let d = days % 365;
        if d == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{d}d")
        }
    } else {
        format!("{years}y")
    }
}

fn age_of(text: Option<&str>, now: Timestamp) -> Value {
    match text.map(Timestamp::parse_rfc3339) {
        Some(Ok(t)) => json!(human_duration(now.0 - t.0)),
        Some(Err(_)) => json!("<invalid>"),
        None => json!("<unknown>"),
    }
}

fn node_status(o: &Value, _: Timestamp) -> Value {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str());
    let mut status = match ready {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

fn node_roles(o: &Value, _: Timestamp) -> Value {
    let mut roles: Vec<String> = sjson::labels(o)
        .iter()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                Some(if role.is_empty() {
                    v.clone()
                } else {
                    role.to_string()
                })
            } else {
                (k == "kubernetes.io/role").then(|| v.clone())
            }
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    roles.dedup();
    json!(if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    })
}

fn container_statuses(o: &Value) -> &[Value] {
    o.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn pod_ready(o: &Value, _: Timestamp) -> Value {
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = container_statuses(o)
        .iter()
        .filter(|c| c["ready"] == json!(true))
        .count();
    json!(format!("{ready}/{total}"))
}

fn pod_status(o: &Value, _: Timestamp) -> Value {
    let mut reason = sjson::str_at(o, "status.reason")
        .or_else(|| sjson::str_at(o, "status.phase"))
        .unwrap_or("Unknown")
        .to_string();
    for c in container_statuses(o) {
        if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
            reason = r.to_string();
        } else if let Some(r) = c
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            reason = r.to_string();
        }
    }
    if sjson::is_deleting(o) {
        reason = if sjson::str_at(o, "status.reason") == Some("NodeLost") {
            "Unknown".to_string()
        } else {
            "Terminating".to_string()
        };
    }
    json!(reason)
}

fn pod_restarts(o: &Value, _: Timestamp) -> Value {
    let restarts: i64 = container_statuses(o)
        .iter()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    json!(restarts)
}

fn budget(o: &Value, field: &str) -> Value {
    match o.pointer(&format!("/spec/{field}")) {
        Some(Value::Number(n)) => json!(n.to_string()),
        Some(Value::String(s)) => json!(s),
        _ => json!("N/A"),
    }
}

fn event_last_seen(o: &Value, now: Timestamp) -> Value {
    let at = sjson::str_at(o, "series.lastObservedTime")
        .or_else(|| sjson::str_at(o, "lastTimestamp"))
        .or_else(|| sjson::str_at(o, "eventTime"))
        .or_else(|| sjson::str_at(o, "metadata.creationTimestamp"));
    age_of(at, now)
}

fn event_object(o: &Value, _: Timestamp) -> Value {
    let kind = sjson::str_at(o, "involvedObject.kind").unwrap_or_default();
    let name = sjson::str_at(o, "involvedObject.name").unwrap_or_default();
    json!(format!("{}/{name}", kind.to_lowercase()))
}

/// The values a JSONPath (`.a.b`, `.a[0]`, `.a[*].b`, `.a[?(@.k=="v")].b`) selects.
pub fn select<'a>(v: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut current = vec![v];
    let mut rest = path.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            current = current.into_iter().filter_map(|c| c.get(field)).collect();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Vec::new();
            };
            let inside = &after[..end];
            rest = &after[end + 1..];
            // A filter's closing `)]` ends at the first `)]`.
            let (inside, tail) = if inside.starts_with("?(") {
                match after.find(")]") {
                    Some(e) => (&after[..e + 1], &after[e + 2..]),
                    None => return Vec::new(),
                }
            } else {
                (inside, rest)
            };
            rest = tail;
            current = index(current, inside);
        } else {
            return Vec::new();
        }
    }
    current
}

fn index<'a>(current: Vec<&'a Value>, inside: &str) -> Vec<&'a Value> {
    let items = current
        .into_iter()
        .filter_map(Value::as_array)
        .flat_map(|a| a.iter());
    if inside == "*" {
        return items.collect();
    }
    if let Ok(i) = inside.parse::<usize>() {
        return items.skip(i).take(1).collect();
    }
    let Some(cond) = inside
        .strip_prefix("?(@.")
        .and_then(|c| c.strip_suffix(')'))
    else {
        return Vec::new();
    };
    let Some((key, wanted)) = cond.split_once("==") else {
        return Vec::new();
    };
    let wanted = wanted.trim().trim_matches(|c| c == '"' || c == '\'');
    let key = key.trim();
    items
        .filter(|item| match item.get(key) {
            Some(Value::String(s)) => s == wanted,
            Some(other) => {
                let text = other.to_string();
                text == wanted
            }
            None => false,
        })
        .collect()
}

fn cell(c: &Column, o: &Value, now: Timestamp) -> Value {
    match &c.cell {
        Cell::Name => json!(sjson::name(o)),
        Cell::Age(pointer) => age_of(o.pointer(pointer).and_then(Value::as_str), now),
        Cell::Fn(f) => f(o, now),
        Cell::Path(path, type_) => {
            let Some(v) = select(o, path).into_iter().next() else {
                return Value::Null;
            };
            match (type_.as_str(), v) {
                ("date", Value::String(s)) => age_of(Some(s), now),
                ("string", Value::String(s)) => json!(s),
                ("string", Value::Object(_) | Value::Array(_)) => json!(v.to_string()),
                ("string", other) => json!(other.to_string()),
                (_, other) => other.clone(),
            }
        }
    }
}

fn row_object(o: &Value, include: Include, table_version: &str) -> Option<Value> {
    match include {
        Include::None => None,
        Include::Object => Some(o.clone()),
        Include::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": format!("meta.k8s.io/{table_version}"),
            "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
        })),
    }
}

/// The Table of `objects` (`list_metadata` is the list's `metadata`: resourceVersion, continue).
pub fn table(
    t: &ResourceType,
    version: &str,
    objects: &[Value],
    list_metadata: Value,
    include: Include,
    table_version: &str,
    now: Timestamp,
) -> Value {
    let cols = columns(t, version);
    let definitions: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format,
                   "description": c.description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| cell(c, o, now)).collect();
            let mut row = json!({"cells": cells});
            if let Some(obj) = row_object(o, include, table_version) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{table_version}"),
        "metadata": list_metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers() {
        assert_eq!(
            wanted(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            ),
            Some("v1")
        );
        assert_eq!(
            wanted("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
            Some("v1beta1")
        );
        assert_eq!(wanted("application/json"), None);
        assert_eq!(wanted(""), None);
    }

    #[test]
    fn json_paths() {
        let o = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Paused", "status": "False"}]},
            "spec": {"list": [1, 2]}});
        assert_eq!(select(&o, ".status.phase"), [&json!("Running")]);
        assert_eq!(
            select(&o, ".status.conditions[?(@.type==\"Paused\")].status"),
            [&json!("False")]
        );
        assert_eq!(select(&o, ".spec.list[1]"), [&json!(2)]);
        assert_eq!(select(&o, ".spec.list[*]").len(), 2);
        assert!(select(&o, ".nope.x").is_empty());
        assert!(select(&o, ".status.conditions[?(@.type==").is_empty());
    }

    #[test]
    fn human_durations() {
        for (ms, text) in [
            (5_000, "5s"),
            (119_000, "119s"),
            (200_000, "3m20s"),
            (3_600_000, "60m"),
            (5 * 3_600_000 + 600_000, "5h10m"),
            (30 * 3_600_000, "30h"),
            (3 * 86_400_000, "3d"),
            (-5_000, "<invalid>"),
        ] {
            assert_eq!(human_duration(ms), text, "{ms}");
        }
    }
}
