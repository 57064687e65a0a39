//! The resource types the fake server serves, and the discovery documents that describe them
//! (`/api`, `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`).
//!
//! Built-in types come from a fixed table; provider kinds (`*.cluster.x-k8s.io` groups) are
//! served when the store holds an object of them or they were registered, in every version seen.
//! There is no version conversion: an object is served in the apiVersion it was written in.

use serde_json::{Value, json};
use sim::api::ClusterStore;
use std::collections::{BTreeMap, BTreeSet};

/// One served resource type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    pub group: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Whether `.status` is a subresource (main writes leave it alone).
    pub status: bool,
    pub short_names: Vec<String>,
    /// Whether this is a custom resource (no strategic merge patch).
    pub custom: bool,
}

impl ResourceType {
    /// `group/version` for the group and version a request used.
    pub fn group_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// `machines.cluster.x-k8s.io` / `pods`, as error messages name resources.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

const CAPI: &str = "cluster.x-k8s.io";
const RBAC: &str = "rbac.authorization.k8s.io";

/// `(group, versions, kind, namespaced, status subresource, short names)`.
type Row = (
    &'static str,
    &'static [&'static str],
    &'static str,
    bool,
    bool,
    &'static [&'static str],
);

const BUILT_IN: &[Row] = &[
    ("", &["v1"], "Namespace", false, true, &["ns"]),
    ("", &["v1"], "Node", false, true, &["no"]),
    ("", &["v1"], "Pod", true, true, &["po"]),
    ("", &["v1"], "PersistentVolume", false, true, &["pv"]),
    ("", &["v1"], "PersistentVolumeClaim", true, true, &["pvc"]),
    ("", &["v1"], "Event", true, false, &["ev"]),
    ("", &["v1"], "Secret", true, false, &[]),
    ("", &["v1"], "ConfigMap", true, false, &["cm"]),
    ("", &["v1"], "ServiceAccount", true, false, &["sa"]),
    ("", &["v1"], "Service", true, true, &["svc"]),
    ("apps", &["v1"], "DaemonSet", true, true, &["ds"]),
    ("apps", &["v1"], "ReplicaSet", true, true, &["rs"]),
    ("apps", &["v1"], "Deployment", true, true, &["deploy"]),
    ("apps", &["v1"], "StatefulSet", true, true, &["sts"]),
    (
        "policy",
        &["v1"],
        "PodDisruptionBudget",
        true,
        true,
        &["pdb"],
    ),
    (
        "storage.k8s.io",
        &["v1"],
        "VolumeAttachment",
        false,
        true,
        &[],
    ),
    ("coordination.k8s.io", &["v1"], "Lease", true, false, &[]),
    // RBAC: what SubjectAccessReviews are answered by (`rbac.rs`).
    (RBAC, &["v1"], "ClusterRole", false, false, &[]),
    (RBAC, &["v1"], "ClusterRoleBinding", false, false, &[]),
    (RBAC, &["v1"], "Role", true, false, &[]),
    (RBAC, &["v1"], "RoleBinding", true, false, &[]),
    // A view of the core Events (see `events.rs`), served from the same store.
    ("events.k8s.io", &["v1"], "Event", true, false, &[]),
    (
        CAPI,
        &["v1beta2", "v1beta1"],
        "Cluster",
        true,
        true,
        &["cl"],
    ),
    (
        CAPI,
        &["v1beta2", "v1beta1"],
        "Machine",
        true,
        true,
        &["ma"],
    ),
    (
        CAPI,
        &["v1beta2", "v1beta1"],
        "MachineSet",
        true,
        true,
        &["ms"],
    ),
    (
        CAPI,
        &["v1beta2", "v1beta1"],
        "MachineDeployment",
        true,
        true,
        &["md"],
    ),
    (
        CAPI,
        &["v1beta2", "v1beta1"],
        "MachineHealthCheck",
        true,
        true,
        &["mhc"],
    ),
    (
        CAPI,
        &["v1beta2", "v1beta1"],
        "MachinePool",
        true,
        true,
        &["mp"],
    ),
    (
        CAPI,
        &["v1beta2", "v1beta1"],
        "MachineDrainRule",
        true,
        false,
        &["mdr"],
    ),
];

/// Every type served right now: the built-ins, then provider kinds found in `store` or in
/// `registered` (`(group, version, kind)`), sorted by group then kind.
pub fn served_types(
    store: &ClusterStore,
    registered: &BTreeSet<(String, String, String)>,
) -> Vec<ResourceType> {
    let mut out: Vec<ResourceType> = BUILT_IN
        .iter()
        .map(
            |(group, versions, kind, namespaced, status, short)| ResourceType {
                group: group.to_string(),
                versions: versions.iter().map(|v| v.to_string()).collect(),
                kind: kind.to_string(),
                plural: sim::api::plural(kind),
                namespaced: *namespaced,
                status: *status,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                custom: *group == CAPI,
            },
        )
        .collect();
    let mut provider: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let stored = store
        .versions_stored()
        .map(|(g, v, k)| (g.to_string(), v.to_string(), k.to_string()));
    for (group, version, kind) in stored.chain(registered.iter().cloned()) {
        let is_provider = group.ends_with(".cluster.x-k8s.io");
        let known = out.iter().any(|t| t.group == group && t.kind == kind);
        if is_provider && !known && !kind.is_empty() && !version.is_empty() {
            provider.entry((group, kind)).or_default().insert(version);
        }
    }
    for ((group, kind), versions) in provider {
        // Newest first: v1beta2 before v1beta1 before v1alpha4.
        let versions: Vec<String> = versions.into_iter().rev().collect();
        out.push(ResourceType {
            plural: sim::api::plural(&kind),
            namespaced: !sim::api::store::is_cluster_scoped(&kind),
            status: true,
            short_names: Vec::new(),
            custom: true,
            group,
            versions,
            kind,
        });
    }
    out
}

/// The type served at `group/version/plural`, if any.
pub fn resolve<'a>(
    types: &'a [ResourceType],
    group: &str,
    version: &str,
    plural: &str,
) -> Option<&'a ResourceType> {
    types
        .iter()
        .find(|t| t.group == group && t.plural == plural && t.versions.iter().any(|v| v == version))
}

fn verbs(t: &ResourceType) -> Value {
    let _ = t;
    json!([
        "create", "delete", "get", "list", "patch", "update", "watch"
    ])
}

/// `APIResourceList` for `group/version`, with the `status` and `eviction` subresources.
pub fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in types
        .iter()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
    {
        let mut entry = json!({
            "name": t.plural, "singularName": t.kind.to_lowercase(), "namespaced": t.namespaced,
            "kind": t.kind, "verbs": verbs(t), "shortNames": t.short_names,
            "storageVersionHash": "",
        });
        if let Some(crd) = super::crds::find(&t.group, &t.kind) {
            // `kubectl get cluster-api` lists every kind of the category.
            entry["categories"] = json!(crd.categories);
            entry["shortNames"] = json!(crd.short_names);
        }
        resources.push(entry);
        if t.status {
            resources.push(json!({
                "name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": t.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if super::crds::version(&t.group, &t.kind, version).is_some_and(|v| v.scale.is_some()) {
            resources.push(json!({
                "name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if t.kind == "Pod" {
            resources.push(json!({
                "name": "pods/eviction", "singularName": "", "namespaced": true,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
        "resources": resources,
    }))
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
}

/// The named groups and their versions (preferred first), sorted by group.
fn groups(types: &[ResourceType]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        let versions = out.entry(t.group.clone()).or_default();
        for v in &t.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    out
}

/// `APIGroupList` for `/apis`.
pub fn group_list(types: &[ResourceType]) -> Value {
    let groups: Vec<Value> = groups(types)
        .iter()
        .map(|(g, versions)| group_json(g, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `APIGroup` for `/apis/{group}`.
pub fn group(types: &[ResourceType], group: &str) -> Option<Value> {
    let groups = groups(types);
    let versions = groups.get(group)?;
    let mut g = group_json(group, versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// `APIVersions` for `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The served types and the engine's kind → group table agree on every kind both name.
    #[test]
    fn every_kind_the_engine_names_is_served_in_its_group() {
        let types = served_types(&ClusterStore::new("t"), &BTreeSet::new());
        for (kind, group) in engine::model::KIND_GROUPS {
            let served: Vec<&str> = types
                .iter()
                .filter(|t| t.kind == kind)
                .map(|t| t.group.as_str())
                .collect();
            assert_eq!(served, [group], "{kind}");
        }
    }

    #[test]
    fn provider_kinds_come_from_the_store() {
        let mut store = ClusterStore::new("t");
        let now = engine::Timestamp(0);
        for api_version in [
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "infrastructure.cluster.x-k8s.io/v1beta2",
        ] {
            let name = api_version.rsplit('/').next().unwrap();
            store
                .create(
                    json!({"apiVersion": api_version, "kind": "DockerMachine",
                               "metadata": {"name": name, "namespace": "default"}}),
                    now,
                )
                .unwrap();
        }
        let types = served_types(&store, &BTreeSet::new());
        let t = resolve(
            &types,
            "infrastructure.cluster.x-k8s.io",
            "v1beta1",
            "dockermachines",
        )
        .unwrap();
        assert_eq!(t.versions, ["v1beta2", "v1beta1"]);
        assert!(resolve(&types, CAPI, "v1beta2", "machines").is_some());
        assert!(resolve(&types, CAPI, "v1alpha4", "machines").is_none());
        let g = group(&types, "infrastructure.cluster.x-k8s.io").unwrap();
        assert_eq!(g["preferredVersion"]["version"], "v1beta2");
        let list = resource_list(&types, "", "v1").unwrap();
        assert!(
            list["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "pods/eviction")
        );
    }
}
