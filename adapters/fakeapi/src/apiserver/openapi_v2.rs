//! `/openapi/v2` as kubectl before 1.27 reads it: the gnostic `openapi.v2.Document` protobuf
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), written by hand from the
//! same schemas as OpenAPI v3 ([`super::openapi`]): definitions (`$ref`s rewritten to
//! `#/definitions/`, `x-kubernetes-group-version-kind` as a YAML vendor extension) and, for each
//! kind, the PATCH operation with its `dryRun` and `fieldValidation` parameters (kubectl 1.20
//! looks for `dryRun` there before `--dry-run=server`). Schema keywords kept: `$ref`,
//! `description`, `type`, `format`, `required`, `properties`, `items`, `additionalProperties`,
//! `enum`; the rest is left to the server's own validation. Field numbers are those of gnostic's
//! `openapiv2/OpenAPIv2.proto`.

use super::openapi;
use super::resources::ResourceType;
use serde_json::Value;
use std::collections::BTreeMap;

/// The media type of the answer (kubectl asks for `…spec.v2@v1.0+protobuf`, which Go's media
/// type parser refuses in a Content-Type; the real server answers with this spelling).
pub const MEDIA_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// A protobuf message being written.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn message(&mut self, field: u32, m: Msg) {
        self.bytes(field, &m.0);
    }

    fn boolean(&mut self, field: u32, b: bool) {
        if b {
            self.key(field, 0);
            self.varint(1);
        }
    }
}

/// `NamedAny{name, Any{yaml}}`: a vendor extension or an enum value, as YAML (JSON is YAML).
fn named_any(name: &str, value: &Value) -> Msg {
    let mut any = Msg::default();
    any.string(2, &yaml_of(value));
    let mut m = Msg::default();
    m.string(1, name);
    m.message(2, any);
    m
}

/// A value as YAML kubectl's YAML reader takes: the GVK extension as a block mapping (or a
/// list of them), anything else as JSON.
fn yaml_of(v: &Value) -> String {
    let mapping = |m: &serde_json::Map<String, Value>, indent: &str| -> String {
        m.iter()
            .map(|(k, v)| {
                format!(
                    "{indent}{k}: {}\n",
                    v.as_str().map_or(v.to_string(), |s| format!("{s:?}"))
                )
            })
            .collect::<String>()
    };
    match v {
        Value::Object(m) => mapping(m, ""),
        Value::Array(items) if items.iter().all(Value::is_object) && !items.is_empty() => items
            .iter()
            .filter_map(Value::as_object)
            .map(|m| {
                let body = mapping(m, "  ");
                format!("- {}", body.trim_start())
            })
            .collect(),
        other => other.to_string(),
    }
}

fn schema(s: &Value) -> Msg {
    let mut m = Msg::default();
    let Some(obj) = s.as_object() else {
        return m;
    };
    // `allOf: [{$ref}]` (how v3 documents point `metadata` at ObjectMeta) is a plain `$ref` here.
    let reference = obj.get("$ref").and_then(Value::as_str).or_else(|| {
        obj.get("allOf")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 1)
            .and_then(|a| a[0].get("$ref"))
            .and_then(Value::as_str)
    });
    if let Some(r) = reference {
        m.string(1, &r.replace("#/components/schemas/", "#/definitions/"));
    }
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
    m.string(2, text("format"));
    m.string(4, text("description"));
    // v2 cannot say "these fields and any others": an open object is published without its
    // fields (kubectl then takes it as a map of anything and accepts any field).
    let open = obj
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let required = obj.get("required").filter(|_| !open);
    for r in required.and_then(Value::as_array).into_iter().flatten() {
        m.string(19, r.as_str().unwrap_or_default());
    }
    for e in obj
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut any = Msg::default();
        any.string(2, &e.to_string());
        m.message(20, any);
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut a = Msg::default();
            a.key(2, 0);
            a.varint(u64::from(*b));
            m.message(21, a);
        }
        Some(inner @ Value::Object(_)) => {
            let mut a = Msg::default();
            a.message(1, schema(inner));
            m.message(21, a);
        }
        _ => {}
    }
    // int-or-string has no single type: left untyped, as the real server publishes it.
    if let Some(t) = obj.get("type").and_then(Value::as_str) {
        let mut ti = Msg::default();
        ti.string(1, t);
        m.message(22, ti);
    }
    if let Some(items) = obj.get("items").filter(|i| i.is_object()) {
        let mut ii = Msg::default();
        ii.message(1, schema(items));
        m.message(23, ii);
    }
    if let Some(props) = obj
        .get("properties")
        .and_then(Value::as_object)
        .filter(|_| !open)
    {
        let mut p = Msg::default();
        for (name, s) in props {
            let mut named = Msg::default();
            named.string(1, name);
            named.message(2, schema(s));
            p.message(1, named);
        }
        m.message(25, p);
    }
    if let Some(gvk) = obj.get("x-kubernetes-group-version-kind") {
        m.message(31, named_any("x-kubernetes-group-version-kind", gvk));
    }
    m
}

/// A query parameter (`ParametersItem{Parameter{NonBodyParameter{QueryParameterSubSchema}}}`).
fn query_parameter(name: &str) -> Msg {
    let mut q = Msg::default();
    q.string(2, "query");
    q.string(4, name);
    q.string(6, "string");
    q.boolean(20, true);
    let mut non_body = Msg::default();
    non_body.message(3, q);
    let mut parameter = Msg::default();
    parameter.message(2, non_body);
    let mut item = Msg::default();
    item.message(1, parameter);
    item
}

fn patch_path(t: &ResourceType, version: &str) -> (String, Msg) {
    let base = if t.group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{}/{version}", t.group)
    };
    let path = if t.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
    } else {
        format!("{base}/{}/{{name}}", t.plural)
    };
    let mut op = Msg::default();
    op.string(5, &format!("patch{}", t.kind));
    for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        op.message(8, query_parameter(p));
    }
    let gvk = serde_json::json!({"group": t.group, "kind": t.kind, "version": version});
    op.message(13, named_any("x-kubernetes-group-version-kind", &gvk));
    op.message(
        13,
        named_any("x-kubernetes-action", &Value::String("patch".into())),
    );
    let mut item = Msg::default();
    item.message(8, op);
    (path, item)
}

/// The whole document, every served kind in every served version.
pub fn document(types: &[ResourceType]) -> Vec<u8> {
    let mut definitions: BTreeMap<String, Value> = BTreeMap::new();
    let mut paths: BTreeMap<String, Msg> = BTreeMap::new();
    let index = openapi::index(types);
    let keys: Vec<String> = index["paths"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    for key in keys {
        if let Some(doc) = openapi::document(types, &key)
            && let Some(schemas) = doc
                .pointer("/components/schemas")
                .and_then(Value::as_object)
        {
            for (name, s) in schemas {
                definitions.entry(name.clone()).or_insert_with(|| s.clone());
            }
        }
    }
    for t in types {
        for v in &t.versions {
            let (path, item) = patch_path(t, v);
            paths.insert(path, item);
        }
    }
    let mut doc = Msg::default();
    doc.string(1, "2.0");
    let mut info = Msg::default();
    info.string(1, "Kubernetes (lifecycle fake API server)");
    info.string(2, "v1.32.0");
    doc.message(2, info);
    let mut p = Msg::default();
    for (path, item) in paths {
        let mut named = Msg::default();
        named.string(1, &path);
        named.message(2, item);
        p.message(2, named);
    }
    doc.message(8, p);
    let mut defs = Msg::default();
    for (name, s) in &definitions {
        let mut named = Msg::default();
        named.string(1, name);
        named.message(2, schema(s));
        defs.message(1, named);
    }
    doc.message(9, defs);
    doc.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn varints_and_fields() {
        let mut m = Msg::default();
        m.varint(300);
        assert_eq!(m.0, [0xac, 0x02]);
        let mut m = Msg::default();
        m.string(1, "2.0");
        assert_eq!(m.0, [0x0a, 3, b'2', b'.', b'0']);
    }

    #[test]
    fn gvk_extensions_are_yaml() {
        let gvk = json!([{"group": "cluster.x-k8s.io", "kind": "Machine", "version": "v1beta2"}]);
        assert_eq!(
            yaml_of(&gvk),
            "- group: \"cluster.x-k8s.io\"\n  kind: \"Machine\"\n  version: \"v1beta2\"\n"
        );
    }
}
