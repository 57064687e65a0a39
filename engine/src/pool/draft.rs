//! The pool as the reconcile wants it (spec fields it owns, status, v1beta1 conditions), built
//! step by step like upstream mutates its in-memory object, then diffed against the observed pool
//! into merge patches at the field paths of the pool's API version (`engine/docs/capi.md` §3.9).

use crate::model::{ApiVersion, Condition, MachinePool, NodeReference};
use serde_json::{Map, Value, json};

/// Desired values; `None` in the `Option<Vec<..>>` fields means "as observed" (no copy of
/// large lists unless they change).
#[derive(Clone, Debug)]
pub struct Draft {
    pub data_secret_name: Option<String>,
    pub provider_id_list: Option<Vec<String>>,
    pub replicas: Option<i32>,
    pub legacy_ready: Option<i32>,
    pub legacy_available: Option<i32>,
    pub legacy_unavailable: Option<i32>,
    pub ready: Option<i32>,
    pub available: Option<i32>,
    pub up_to_date: Option<i32>,
    pub node_refs: Option<Vec<NodeReference>>,
    pub bootstrap_created: bool,
    pub infra_provisioned: bool,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    pub versions: Vec<(String, i32)>,
    pub phase: Option<String>,
    pub legacy_conditions: Vec<Condition>,
}

impl Draft {
    pub fn of(mp: &MachinePool) -> Self {
        let s = &mp.status;
        Draft {
            data_secret_name: mp.bootstrap_data_secret_name.clone(),
            provider_id_list: None,
            replicas: s.replicas,
            legacy_ready: s.legacy_ready_replicas,
            legacy_available: s.legacy_available_replicas,
            legacy_unavailable: s.legacy_unavailable_replicas,
            ready: s.ready_replicas,
            available: s.available_replicas,
            up_to_date: s.up_to_date_replicas,
            node_refs: None,
            bootstrap_created: s.bootstrap_data_secret_created,
            infra_provisioned: s.infrastructure_provisioned,
            failure_reason: s.failure_reason.clone(),
            failure_message: s.failure_message.clone(),
            versions: s.versions.clone(),
            phase: s.phase.clone(),
            legacy_conditions: mp.conditions.legacy.clone(),
        }
    }

    pub fn node_refs<'a>(&'a self, mp: &'a MachinePool) -> &'a [NodeReference] {
        self.node_refs.as_deref().unwrap_or(&mp.status.node_refs)
    }

    /// The merge patch of the pool's main resource, with what changed (for the timeline).
    pub fn spec_patch(&self, mp: &MachinePool) -> Option<(Value, String)> {
        let mut spec = Map::new();
        let mut what = Vec::new();
        if self.data_secret_name != mp.bootstrap_data_secret_name {
            spec.insert(
                "template".into(),
                json!({"spec": {"bootstrap": {"dataSecretName": self.data_secret_name}}}),
            );
            what.push(format!(
                "spec.template.spec.bootstrap.dataSecretName={}",
                self.data_secret_name.as_deref().unwrap_or("null")
            ));
        }
        if let Some(list) = &self.provider_id_list
            && list != &mp.provider_id_list
        {
            spec.insert("providerIDList".into(), json!(list));
            what.push(format!("spec.providerIDList ({} IDs)", list.len()));
        }
        if spec.is_empty() {
            return None;
        }
        Some((json!({ "spec": spec }), what.join(", ")))
    }

    /// The merge patch of the status subresource (conditions go through `SetCondition`).
    pub fn status_patch(&self, mp: &MachinePool) -> Option<(Value, String)> {
        let s = &mp.status;
        let v1beta2 = mp.version == ApiVersion::V1Beta2;
        let mut status = Map::new();
        let mut what: Vec<String> = Vec::new();
        let mut put = |path: &[&str], value: Value, label: String| {
            insert_path(&mut status, path, value);
            what.push(label);
        };
        let mut int = |path_b2: &[&str], path_b1: &[&str], want: Option<i32>, seen: Option<i32>| {
            if want != seen {
                let path = if v1beta2 { path_b2 } else { path_b1 };
                put(
                    path,
                    json!(want),
                    format!("{}={}", path.join("."), opt(want)),
                );
            }
        };
        int(&["replicas"], &["replicas"], self.replicas, s.replicas);
        let dep = ["deprecated", "v1beta1"];
        int(
            &[dep[0], dep[1], "readyReplicas"],
            &["readyReplicas"],
            self.legacy_ready,
            s.legacy_ready_replicas,
        );
        int(
            &[dep[0], dep[1], "availableReplicas"],
            &["availableReplicas"],
            self.legacy_available,
            s.legacy_available_replicas,
        );
        int(
            &[dep[0], dep[1], "unavailableReplicas"],
            &["unavailableReplicas"],
            self.legacy_unavailable,
            s.legacy_unavailable_replicas,
        );
        int(
            &["readyReplicas"],
            &["v1beta2", "readyReplicas"],
            self.ready,
            s.ready_replicas,
        );
        int(
            &["availableReplicas"],
            &["v1beta2", "availableReplicas"],
            self.available,
            s.available_replicas,
        );
        int(
            &["upToDateReplicas"],
            &["v1beta2", "upToDateReplicas"],
            self.up_to_date,
            s.up_to_date_replicas,
        );
        if let Some(refs) = &self.node_refs
            && refs != &s.node_refs
        {
            let value: Vec<Value> = refs
                .iter()
                .map(|r| json!({"apiVersion": "v1", "kind": "Node", "name": r.name, "uid": r.uid}))
                .collect();
            put(
                &["nodeRefs"],
                Value::Array(value),
                format!("nodeRefs ({} Nodes)", refs.len()),
            );
        }
        if self.bootstrap_created != s.bootstrap_data_secret_created {
            let path: &[&str] = if v1beta2 {
                &["initialization", "bootstrapDataSecretCreated"]
            } else {
                &["bootstrapReady"]
            };
            put(
                path,
                json!(self.bootstrap_created),
                format!("{}={}", path.join("."), self.bootstrap_created),
            );
        }
        if self.infra_provisioned != s.infrastructure_provisioned {
            let path: &[&str] = if v1beta2 {
                &["initialization", "infrastructureProvisioned"]
            } else {
                &["infrastructureReady"]
            };
            put(
                path,
                json!(self.infra_provisioned),
                format!("{}={}", path.join("."), self.infra_provisioned),
            );
        }
        for (want, seen, field) in [
            (&self.failure_reason, &s.failure_reason, "failureReason"),
            (&self.failure_message, &s.failure_message, "failureMessage"),
        ] {
            if want != seen {
                let path: Vec<&str> = if v1beta2 {
                    vec![dep[0], dep[1], field]
                } else {
                    vec![field]
                };
                put(&path, json!(want), path.join("."));
            }
        }
        if self.versions != s.versions {
            let value = if self.versions.is_empty() {
                Value::Null
            } else {
                Value::Array(
                    self.versions
                        .iter()
                        .map(|(v, n)| json!({"version": v, "replicas": n}))
                        .collect(),
                )
            };
            put(&["versions"], value, "versions".to_string());
        }
        if self.phase != s.phase {
            put(
                &["phase"],
                json!(self.phase),
                format!("phase={}", self.phase.as_deref().unwrap_or("")),
            );
        }
        if status.is_empty() {
            return None;
        }
        Some((json!({ "status": status }), what.join(", ")))
    }
}

fn opt(v: Option<i32>) -> String {
    v.map_or_else(|| "null".to_string(), |v| v.to_string())
}

fn insert_path(root: &mut Map<String, Value>, path: &[&str], value: Value) {
    let (last, parents) = path.split_last().expect("non-empty path");
    let mut cursor = root;
    for p in parents {
        let entry = cursor
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        cursor = entry.as_object_mut().expect("paths never overlap a leaf");
    }
    cursor.insert(last.to_string(), value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::machine_pool;

    #[test]
    fn status_patch_uses_the_pools_api_version_paths() {
        let mut mp = machine_pool("c1", "p1", 2);
        let mut d = Draft::of(&mp);
        d.legacy_ready = Some(2);
        d.ready = Some(2);
        d.infra_provisioned = true;
        d.failure_reason = Some("InvalidConfiguration".into());
        let (v, _) = d.status_patch(&mp).unwrap();
        assert_eq!(
            v.to_string(),
            r#"{"status":{"deprecated":{"v1beta1":{"readyReplicas":2,"failureReason":"InvalidConfiguration"}},"readyReplicas":2,"initialization":{"infrastructureProvisioned":true}}}"#
        );
        mp.version = ApiVersion::V1Beta1;
        let (v, _) = d.status_patch(&mp).unwrap();
        assert_eq!(
            v.to_string(),
            r#"{"status":{"readyReplicas":2,"v1beta2":{"readyReplicas":2},"infrastructureReady":true,"failureReason":"InvalidConfiguration"}}"#
        );
    }

    #[test]
    fn unchanged_draft_patches_nothing() {
        let mp = machine_pool("c1", "p1", 2);
        let d = Draft::of(&mp);
        assert_eq!(d.status_patch(&mp), None);
        assert_eq!(d.spec_patch(&mp), None);
    }
}
