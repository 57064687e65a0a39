//! The world's MachineSets: the Machine a MachineSet creates from its template, and, with the
//! model of CAPI's manager (`capiManager: true`), what its MachineSet controller does about
//! `spec.replicas` (so `kubectl scale machineset` works against `sim serve`).

use crate::api::json::Pointer as _;
use crate::api::{FakeApi, ObjKey, json};
use engine::model::Scope;
use serde_json::{Value, json};

/// The Machine `ms` creates, named `name`, from its template (labels, spec, the MachineSet as
/// controller), in the MachineSet's apiVersion.
pub(crate) fn machine_from_template(
    ms: &Value,
    namespace: &str,
    ms_name: &str,
    name: &str,
) -> Value {
    let api_version = json::api_version(ms).to_string();
    let template = ms
        .at_pointer("/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
    spec["clusterName"] = json!(json::str_at(ms, "spec.clusterName").unwrap_or_default());
    // The MachineSet clones each template into an object of its own, named after the Machine
    // (a `DockerMachineTemplate` gives a `DockerMachine`).
    for path in ["/infrastructureRef", "/bootstrap/configRef"] {
        if let Some(r) = spec.pointer_mut(path) {
            r["name"] = json!(name);
            let kind = r["kind"].as_str().unwrap_or_default();
            if let Some(cloned) = kind.strip_suffix("Template") {
                r["kind"] = json!(cloned);
            }
        }
    }
    let mut labels = template
        .at_pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    labels["cluster.x-k8s.io/set-name"] = json!(ms_name);
    json!({
        "apiVersion": api_version,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "finalizers": [engine::model::MACHINE_FINALIZER],
            "ownerReferences": [{
                "apiVersion": api_version, "kind": "MachineSet", "name": ms_name,
                "uid": ms.at_pointer("/metadata/uid").cloned().unwrap_or(json!("")),
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": spec,
        "status": {"phase": "Provisioning"}
    })
}

/// What CAPI's MachineSet controller does about a MachineSet's replicas now.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scaling {
    /// Machines to create.
    pub create: usize,
    /// Machines to delete, in upstream's priority ([`deletion_priority`]).
    pub delete: Vec<ObjKey>,
}

/// The Machines `ms_key` owns (its controller reference) that are not being deleted, against
/// its `spec.replicas`. A MachineSet being deleted, or without replicas, is left alone.
pub(crate) fn scaling(api: &FakeApi, ms_key: &ObjKey) -> Scaling {
    let Some(ms) = api.get(&Scope::Management, ms_key) else {
        return Scaling::default();
    };
    let replicas = ms.at_pointer("/spec/replicas").and_then(Value::as_u64);
    let Some(replicas) = replicas.filter(|_| !json::is_deleting(ms)) else {
        return Scaling::default();
    };
    let order = DeletionOrder::of(ms);
    let mut owned: Vec<(DeletionRank, ObjKey)> = api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "Machine")
                .filter(|(k, m)| {
                    k.namespace == ms_key.namespace
                        && !json::is_deleting(m)
                        && owned_by(m, &ms_key.name)
                })
                .map(|(k, m)| (deletion_priority(m, order), k.clone()))
                .collect()
        })
        .unwrap_or_default();
    let want = usize::try_from(replicas).unwrap_or(usize::MAX);
    if owned.len() < want {
        return Scaling {
            create: want - owned.len(),
            delete: Vec::new(),
        };
    }
    owned.sort();
    let extra = owned.len() - want;
    Scaling {
        create: 0,
        delete: owned.into_iter().take(extra).map(|(_, k)| k).collect(),
    }
}

/// `spec.deletion.order` (v1beta1 `spec.deletePolicy`) of a MachineSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeletionOrder {
    /// Upstream picks at random among equals; the model takes the newest, so a run is
    /// deterministic.
    Random,
    Newest,
    Oldest,
}

impl DeletionOrder {
    pub(crate) fn of(ms: &Value) -> DeletionOrder {
        let written = json::str_at(ms, "spec.deletion.order")
            .or_else(|| json::str_at(ms, "spec.deletePolicy"))
            .unwrap_or_default();
        match written {
            "Newest" => DeletionOrder::Newest,
            "Oldest" => DeletionOrder::Oldest,
            _ => DeletionOrder::Random,
        }
    }
}

/// Where a Machine stands in a scale-down (lowest first): upstream's `delete_policy.go` tiers,
/// the `cluster.x-k8s.io/delete-machine` annotation first, then unhealthy Machines (no Node,
/// `HealthCheckSucceeded=False`, a failure reason or message), then the others by the order,
/// then by name (the newest first: the last name first).
type DeletionRank = (u8, std::cmp::Reverse<(String, String)>, (String, String));

pub(crate) const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";

fn deletion_priority(machine: &Value, order: DeletionOrder) -> DeletionRank {
    let tier = if json::annotations(machine).contains_key(DELETE_MACHINE_ANNOTATION) {
        0
    } else if !healthy(machine) {
        1
    } else {
        2
    };
    let created = json::str_at(machine, "metadata.creationTimestamp")
        .unwrap_or_default()
        .to_string();
    let name = json::str_at(machine, "metadata.name")
        .unwrap_or_default()
        .to_string();
    let none = (String::new(), String::new());
    match order {
        DeletionOrder::Oldest => (tier, std::cmp::Reverse(none), (created, name)),
        DeletionOrder::Newest | DeletionOrder::Random => {
            (tier, std::cmp::Reverse((created, name)), none)
        }
    }
}

/// `isMachineHealthy` of upstream's delete policy.
fn healthy(machine: &Value) -> bool {
    let has_node = machine.at_pointer("/status/nodeRef/name").is_some();
    let failed = ["failureReason", "failureMessage"].iter().any(|f| {
        machine.at_pointer(&format!("/status/{f}")).is_some()
            || machine
                .at_pointer(&format!("/status/deprecated/v1beta1/{f}"))
                .is_some()
    });
    let marked = crate::capi_conditions::conditions(machine)
        .any(|c| c["type"] == "HealthCheckSucceeded" && c["status"] == "False");
    has_node && !failed && !marked
}

fn owned_by(machine: &Value, ms_name: &str) -> bool {
    machine
        .at_pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter().any(|o| {
                o["controller"] == true && o["kind"] == "MachineSet" && o["name"] == ms_name
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, created: &str, node: bool, annotated: bool) -> Value {
        let mut m = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "creationTimestamp": created}});
        if node {
            m["status"] = json!({"nodeRef": {"name": name}});
        }
        if annotated {
            m["metadata"]["annotations"] = json!({DELETE_MACHINE_ANNOTATION: ""});
        }
        m
    }

    fn order_of(order: DeletionOrder) -> Vec<String> {
        let machines = [
            machine("old", "2024-01-01T00:00:00Z", true, false),
            machine("new", "2024-01-01T00:02:00Z", true, false),
            machine("no-node", "2024-01-01T00:01:00Z", false, false),
            machine("marked", "2024-01-01T00:00:30Z", true, true),
            machine("mid", "2024-01-01T00:01:00Z", true, false),
        ];
        let mut ranked: Vec<(DeletionRank, String)> = machines
            .iter()
            .map(|m| {
                (
                    deletion_priority(m, order),
                    m["metadata"]["name"].as_str().unwrap().into(),
                )
            })
            .collect();
        ranked.sort();
        ranked.into_iter().map(|(_, n)| n).collect()
    }

    /// Upstream's tiers (`delete_policy.go`): the delete-machine annotation, then unhealthy
    /// Machines (no Node here), then the MachineSet's order.
    #[test]
    fn a_scale_down_takes_marked_then_unhealthy_then_by_order() {
        assert_eq!(
            order_of(DeletionOrder::Newest),
            ["marked", "no-node", "new", "mid", "old"]
        );
        assert_eq!(
            order_of(DeletionOrder::Oldest),
            ["marked", "no-node", "old", "mid", "new"]
        );
        assert_eq!(
            order_of(DeletionOrder::Random),
            order_of(DeletionOrder::Newest)
        );
        let oldest = json!({"spec": {"deletion": {"order": "Oldest"}}});
        let legacy = json!({"spec": {"deletePolicy": "Newest"}});
        assert_eq!(DeletionOrder::of(&oldest), DeletionOrder::Oldest);
        assert_eq!(DeletionOrder::of(&legacy), DeletionOrder::Newest);
        assert_eq!(DeletionOrder::of(&json!({})), DeletionOrder::Random);
    }
}
