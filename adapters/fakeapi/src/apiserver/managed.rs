//! How the served lists merge, for `metadata.managedFields` ([`sim::api::managed`]): a custom
//! resource's lists as its CRD schema says (`x-kubernetes-list-type`, `-list-map-keys`),
//! metadata's and built-in kinds' as the simulator knows them.

use super::crds;
use serde_json::Value;
use sim::api::managed::{ListType, known_list_type};

/// The list type at `path` (field names from the root) of an object of `api_version`/`kind`.
pub fn list_type(api_version: &str, kind: &str, path: &[&str]) -> ListType {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let schema = match path {
        ["metadata", ..] => None,
        _ => crds::version(group, kind, version).map(|v| &v.schema),
    };
    let Some(mut node) = schema else {
        return known_list_type(api_version, kind, path);
    };
    for (i, name) in path.iter().enumerate() {
        let Some(field) = node.pointer(&format!("/properties/{name}")) else {
            return ListType::Atomic;
        };
        node = field;
        // A list's element schema holds the fields below it.
        if i + 1 < path.len() && node.get("type").and_then(Value::as_str) == Some("array") {
            node = node.get("items").unwrap_or(&Value::Null);
        }
    }
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListType::Set,
        Some("map") => ListType::Map(
            node.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        ),
        _ => ListType::Atomic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capi_conditions_are_keyed_by_type_as_its_crd_says() {
        let conditions = list_type(
            "cluster.x-k8s.io/v1beta2",
            "Machine",
            &["status", "conditions"],
        );
        assert_eq!(conditions, ListType::Map(vec!["type".to_string()]));
        let finalizers = list_type(
            "cluster.x-k8s.io/v1beta2",
            "Machine",
            &["metadata", "finalizers"],
        );
        assert_eq!(finalizers, ListType::Set);
        let unknown = list_type("cluster.x-k8s.io/v1beta2", "Machine", &["spec", "nothing"]);
        assert_eq!(unknown, ListType::Atomic);
    }
}
