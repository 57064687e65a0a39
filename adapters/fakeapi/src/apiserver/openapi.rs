//! OpenAPI v3 (`/openapi/v3` and `/openapi/v3/{api/v1 | apis/G/V}`), what kubectl ≥ 1.27
//! reads for `explain` and to learn that the server validates fields (`fieldValidation` on the
//! PATCH operations), so `apply`, `create` and `edit` validate server-side.
//!
//! Schemas: the CAPI kinds from their vendored CRDs' `openAPIV3Schema` (named like
//! `io.x-k8s.cluster.v1beta2.Machine`), built-in kinds from the hand-kept subset of
//! `builtin_schemas`, provider kinds without a CRD as open objects. Every kind schema
//! carries `x-kubernetes-group-version-kind`. `/openapi/v2` (kubectl before 1.27) is written from
//! the same schemas by `openapi_v2.rs`.

use super::builtin_schemas::{self, OBJECT_META, STATUS};
use super::crds;
use super::resources::ResourceType;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// `io.k8s.api.core.v1.Node`, `io.k8s.api.policy.v1.PodDisruptionBudget`,
/// `io.x-k8s.cluster.v1beta2.Machine` (a CRD's group reversed, as the real server names them).
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let prefix = match group {
        "" => "io.k8s.api.core".to_string(),
        g if !g.contains('.') || g.ends_with(".k8s.io") => {
            format!("io.k8s.api.{}", g.split('.').next().unwrap_or(g))
        }
        g => g.split('.').rev().collect::<Vec<_>>().join("."),
    };
    format!("{prefix}.{version}.{kind}")
}

/// The key of a group version in the index: `api/v1` or `apis/{group}/{version}`.
fn key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every served group version, sorted, with its types.
fn group_versions(types: &[ResourceType]) -> BTreeMap<String, Vec<(&ResourceType, String)>> {
    let mut out: BTreeMap<String, Vec<(&ResourceType, String)>> = BTreeMap::new();
    for t in types {
        for v in &t.versions {
            out.entry(key(&t.group, v))
                .or_default()
                .push((t, v.clone()));
        }
    }
    out
}

/// FNV-1a of the document, as the `hash` of its URL (clients cache by URL).
fn hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v3`: `{"paths": {"apis/cluster.x-k8s.io/v1beta2": {"serverRelativeURL": …}}}`.
pub fn index(types: &[ResourceType]) -> Value {
    let paths: Map<String, Value> = group_versions(types)
        .into_iter()
        .map(|(k, members)| {
            let doc = document_for(&members);
            let url = format!("/openapi/v3/{k}?hash={}", hash(&doc.to_string()));
            (k, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `/openapi/v3/{path}` (`api/v1`, `apis/G/V`), or `None` for a group version not served.
pub fn document(types: &[ResourceType], path: &str) -> Option<Value> {
    let gvs = group_versions(types);
    gvs.get(path).map(|members| document_for(members))
}

fn kind_schema(t: &ResourceType, version: &str) -> Value {
    let gvk = json!([{"group": t.group, "version": version, "kind": t.kind}]);
    let meta = json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
                      "description": "Standard object's metadata."});
    let mut schema = match crds::version(&t.group, &t.kind, version) {
        Some(v) if v.schema.is_object() => v.schema.clone(),
        _ if !t.custom => builtin_schemas::kind_schema(&t.group, &t.kind),
        _ => {
            json!({"type": "object", "description": format!("{}: no schema is known to this server.", t.kind),
                    "x-kubernetes-preserve-unknown-fields": true})
        }
    };
    let Some(obj) = schema.as_object_mut() else {
        return schema;
    };
    obj.insert("type".into(), json!("object"));
    let properties = obj
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(p) = properties {
        p.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
        );
        p.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
        );
        p.insert("metadata".into(), meta);
    }
    obj.insert("x-kubernetes-group-version-kind".into(), gvk);
    schema
}

fn parameter(name: &str, location: &str, description: &str) -> Value {
    let mut p = json!({"name": name, "in": location, "description": description,
                       "schema": {"type": "string", "uniqueItems": true}});
    if location == "path" {
        p["required"] = json!(true);
    }
    p
}

fn operation(
    t: &ResourceType,
    version: &str,
    action: &str,
    response: &str,
    params: &[Value],
) -> Value {
    let ok = json!({"description": "OK", "content": {"application/json": {"schema": {
        "$ref": format!("#/components/schemas/{response}")}}}});
    let mut op = json!({
        "operationId": format!("{action}{}", t.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": t.group, "version": version, "kind": t.kind},
        "responses": {"200": ok},
    });
    if !params.is_empty() {
        op["parameters"] = Value::Array(params.to_vec());
    }
    if matches!(action, "post" | "put" | "patch") {
        let media = if action == "patch" {
            vec![
                "application/json-patch+json",
                "application/merge-patch+json",
            ]
        } else {
            vec!["application/json"]
        };
        let content: Map<String, Value> = media
            .into_iter()
            .map(|m| {
                (
                    m.to_string(),
                    json!({"schema": {"$ref": format!("#/components/schemas/{response}")}}),
                )
            })
            .collect();
        op["requestBody"] = json!({"content": content, "required": true});
    }
    op
}

fn paths_for(t: &ResourceType, version: &str, out: &mut Map<String, Value>) {
    let name = schema_name(&t.group, version, &t.kind);
    let base = if t.group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{}/{version}", t.group)
    };
    let collection = if t.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", t.plural)
    } else {
        format!("{base}/{}", t.plural)
    };
    let dry_run = parameter(
        "dryRun",
        "query",
        "When present, modifications are not persisted. Valid value: All.",
    );
    let field_validation = parameter(
        "fieldValidation",
        "query",
        "How to handle unknown fields: Ignore, Warn (default) or Strict.",
    );
    let field_manager = parameter(
        "fieldManager",
        "query",
        "Name of the actor making the change.",
    );
    let writes = [
        dry_run.clone(),
        field_manager.clone(),
        field_validation.clone(),
    ];
    let mut path_params = vec![parameter("name", "path", "name of the object")];
    let mut collection_params = Vec::new();
    if t.namespaced {
        let ns = parameter("namespace", "path", "object name and auth scope");
        path_params.push(ns.clone());
        collection_params.push(ns);
    }
    out.insert(
        collection.clone(),
        json!({
            "get": operation(t, version, "list", &name, &[]),
            "post": operation(t, version, "post", &name, &writes),
            "parameters": collection_params,
        }),
    );
    let item = format!("{collection}/{{name}}");
    out.insert(
        item.clone(),
        json!({
            "get": operation(t, version, "get", &name, &[]),
            "put": operation(t, version, "put", &name, &writes),
            "patch": operation(t, version, "patch", &name, &[dry_run.clone(), field_manager.clone(), field_validation.clone(), parameter("force", "query", "Force is only meaningful for apply requests.")]),
            "delete": operation(t, version, "delete", STATUS, std::slice::from_ref(&dry_run)),
            "parameters": path_params,
        }),
    );
    if t.status {
        out.insert(
            format!("{item}/status"),
            json!({
                "get": operation(t, version, "get", &name, &[]),
                "put": operation(t, version, "put", &name, &writes),
                "patch": operation(t, version, "patch", &name, &writes),
                "parameters": path_params,
            }),
        );
    }
}

fn document_for(members: &[(&ResourceType, String)]) -> Value {
    let mut paths = Map::new();
    let mut schemas: BTreeMap<String, Value> =
        builtin_schemas::meta_schemas().into_iter().collect();
    for (t, version) in members {
        paths_for(t, version, &mut paths);
        schemas.insert(
            schema_name(&t.group, version, &t.kind),
            kind_schema(t, version),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (lifecycle fake API server)", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::api::ClusterStore;
    use std::collections::BTreeSet;

    #[test]
    fn names_follow_the_real_server() {
        assert_eq!(schema_name("", "v1", "Node"), "io.k8s.api.core.v1.Node");
        assert_eq!(
            schema_name("policy", "v1", "PodDisruptionBudget"),
            "io.k8s.api.policy.v1.PodDisruptionBudget"
        );
        assert_eq!(
            schema_name("coordination.k8s.io", "v1", "Lease"),
            "io.k8s.api.coordination.v1.Lease"
        );
        assert_eq!(
            schema_name("cluster.x-k8s.io", "v1beta2", "Machine"),
            "io.x-k8s.cluster.v1beta2.Machine"
        );
    }

    #[test]
    fn documents_carry_crd_schemas_and_the_field_validation_parameter() {
        let types =
            super::super::resources::served_types(&ClusterStore::new("t"), &BTreeSet::new());
        let idx = index(&types);
        let url = idx["paths"]["apis/cluster.x-k8s.io/v1beta2"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(
            url.starts_with("/openapi/v3/apis/cluster.x-k8s.io/v1beta2?hash="),
            "{url}"
        );
        assert!(idx["paths"]["api/v1"].is_object());
        let doc = document(&types, "apis/cluster.x-k8s.io/v1beta2").unwrap();
        let m = &doc["components"]["schemas"]["io.x-k8s.cluster.v1beta2.Machine"];
        assert_eq!(m["x-kubernetes-group-version-kind"][0]["kind"], "Machine");
        assert!(m["properties"]["spec"]["properties"]["clusterName"].is_object());
        let patch = &doc["paths"]["/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/machines/{name}"]
            ["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Machine");
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(document(&types, "apis/nothing/v1").is_none());
    }
}
