//! RBAC rules of the deploy manifests against recorded requests, shared by the tests that
//! record (`over_http.rs`) and the one that renders the manifests (`deploy.rs`).

#![allow(dead_code)]

use adapters::apiserver::record::Request;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The label a ClusterRole carries to be aggregated into the manager's ClusterRole.
pub const AGGREGATE_LABEL: &str = "lifecycle.x-k8s.io/aggregate-to-manager";

/// One permission: API group, resource (`pods/eviction` with its subresource), verb.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub group: String,
    pub resource: String,
    pub verb: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "\"\""
        } else {
            &self.group
        };
        write!(f, "{:<32} {:<34} {}", group, self.resource, self.verb)
    }
}

pub fn deploy_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy"))
}

/// Every object in the YAML files directly in `dir` (documents separated by `---`).
pub fn objects_in(dir: &Path) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("kustomization.yaml")
        })
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| documents(&std::fs::read_to_string(f).unwrap()))
        .collect()
}

/// The objects of a multi-document YAML text.
pub fn documents(text: &str) -> Vec<Value> {
    text.split("\n---")
        .map(|doc| {
            sim::scenario::yaml::parse_document(doc)
                .expect("valid YAML")
                .to_json()
        })
        .filter(|v| !v.is_null())
        .collect()
}

pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the manifests"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// What a Role's or ClusterRole's rules grant, expanded to single permissions (a wildcard
/// stays `*`, and then matches nothing recorded: least privilege has no wildcards).
pub fn granted(role: &Value) -> BTreeSet<Grant> {
    expand(role, false)
}

/// What its rules for named objects grant (`resourceNames`), expanded likewise: recorded
/// requests carry no name, so these are pinned rule by rule in `deploy.rs` (CAPI's Lease and
/// manager Deployment).
pub fn granted_by_name(role: &Value) -> BTreeSet<Grant> {
    expand(role, true)
}

fn expand(role: &Value, named: bool) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        assert!(
            rule.get("nonResourceURLs").is_none(),
            "a rule this test does not expand: {rule}"
        );
        // A rule for named objects grants nothing else.
        if rule.get("resourceNames").is_some() != named {
            continue;
        }
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert(Grant {
                        group: group.clone(),
                        resource: resource.clone(),
                        verb,
                    });
                }
            }
        }
    }
    out
}

/// The permission a recorded request needs.
pub fn needed(r: &Request) -> Grant {
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    Grant {
        group: r.group.clone(),
        resource,
        verb: r.verb.clone(),
    }
}

/// Provider kinds: the `*.cluster.x-k8s.io` groups other than CAPI's own.
pub fn is_provider_group(group: &str) -> bool {
    group.ends_with(".cluster.x-k8s.io")
}

/// What one set has that the other lacks, both ways, for an assertion message.
pub fn difference(granted: &BTreeSet<Grant>, used: &BTreeSet<Grant>) -> String {
    let show = |s: Vec<&Grant>| {
        if s.is_empty() {
            "  (none)\n".to_string()
        } else {
            s.iter().map(|g| format!("  {g}\n")).collect()
        }
    };
    format!(
        "granted but never used:\n{}used but not granted:\n{}",
        show(granted.difference(used).collect()),
        show(used.difference(granted).collect())
    )
}

/// A table of permissions, one per line.
pub fn table(grants: &BTreeSet<Grant>) -> String {
    grants.iter().map(|g| format!("  {g}\n")).collect()
}

/// Every provider's example ClusterRole (`providers/<provider>/clusterrole.yaml`).
pub fn provider_roles() -> Vec<Value> {
    let dir = deploy_dir().join("providers");
    let mut dirs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.iter()
        .flat_map(|d| objects_in(d))
        .filter(|o| o["kind"] == "ClusterRole")
        .collect()
}

/// A request RBAC checks as a non-resource URL that every authenticated identity may GET
/// through Kubernetes' default `system:discovery` ClusterRole (discovery, `/version`).
pub fn is_discovery(r: &Request) -> bool {
    let p = r.resource.as_str();
    r.verb == "get"
        && r.group.is_empty()
        && ([
            "/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz",
        ]
        .contains(&p)
            || ["/api/", "/apis/", "/openapi/"]
                .iter()
                .any(|prefix| p.starts_with(prefix)))
}

pub fn is_non_resource(r: &Request) -> bool {
    r.resource.starts_with('/')
}

/// Whether a ClusterRole's labels match one of an aggregation rule's selectors.
pub fn aggregated_by(rule: &Value, role: &Value) -> bool {
    rule["clusterRoleSelectors"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|selector| {
            selector["matchLabels"].as_object().is_some_and(|labels| {
                labels
                    .iter()
                    .all(|(k, v)| &role["metadata"]["labels"][k] == v)
            })
        })
}

/// What a ServiceAccount may do as RBAC would decide it from `objects` (the rendered
/// manifests and any ClusterRoles installed beside them): the grants of its RoleBindings
/// (`namespaced`) and of its ClusterRoleBindings (`cluster`), aggregated ClusterRoles filled
/// from every ClusterRole whose labels they select; and what its ClusterRoleBindings grant for
/// named objects only (`by_name`: `resourceNames`, see [`granted_by_name`]).
#[derive(Debug, Default)]
pub struct Granted {
    pub namespaced: BTreeSet<Grant>,
    pub cluster: BTreeSet<Grant>,
    pub by_name: BTreeSet<Grant>,
}

pub fn granted_to(objects: &[Value], namespace: &str, name: &str) -> Granted {
    let cluster_roles: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .collect();
    let role_grants = |kind: &str, role: &str, named: bool| -> BTreeSet<Grant> {
        let role = find(objects, kind, role);
        let mut grants = expand(role, named);
        if let Some(rule) = role.get("aggregationRule") {
            for member in cluster_roles.iter().filter(|r| aggregated_by(rule, r)) {
                grants.extend(expand(member, named));
            }
        }
        grants
    };
    let mut out = Granted::default();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        let bound = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == name && s["namespace"] == namespace
            });
        if !bound {
            continue;
        }
        let role_ref = &binding["roleRef"];
        let (kind, role) = (
            role_ref["kind"].as_str().unwrap(),
            role_ref["name"].as_str().unwrap(),
        );
        if binding["kind"] == "RoleBinding" {
            out.namespaced.extend(role_grants(kind, role, false));
        } else {
            out.cluster.extend(role_grants(kind, role, false));
            out.by_name.extend(role_grants(kind, role, true));
        }
    }
    out
}
