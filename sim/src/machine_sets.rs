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
    for path in ["/infrastructureRef", "/bootstrap/configRef"] {
        if let Some(r) = spec.pointer_mut(path) {
            r["name"] = json!(name);
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
    /// Machines to delete: the newest first (by creation, then name), so a run is
    /// deterministic (upstream's default `deletePolicy` is Random).
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
    let mut owned: Vec<(String, ObjKey)> = api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "Machine")
                .filter(|(k, m)| {
                    k.namespace == ms_key.namespace
                        && !json::is_deleting(m)
                        && owned_by(m, &ms_key.name)
                })
                .map(|(k, m)| {
                    let created = json::str_at(m, "metadata.creationTimestamp")
                        .unwrap_or_default()
                        .to_string();
                    (created, k.clone())
                })
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
    owned.sort_by(|a, b| b.cmp(a));
    let extra = owned.len() - want;
    Scaling {
        create: 0,
        delete: owned.into_iter().take(extra).map(|(_, k)| k).collect(),
    }
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
