//! The model of CAPI's MachineDeployment controller (`capiManager: true`): a RollingUpdate
//! rollout, as upstream's `machinedeployment_rolling.go` does it, for a MachineDeployment
//! that is not paused (its annotation, its `spec.paused`, or its Cluster's `spec.paused`):
//!
//! | step | upstream |
//! |---|---|
//! | the new MachineSet: the one whose template is the MachineDeployment's; none: one is created, `<md>-<revision>`, revision one past the highest, on the MachineSet and the MachineDeployment (`machinedeployment.clusters.x-k8s.io/revision`) | `getAllMachineSetsAndSyncRevision` |
//! | `maxSurge` (default 1, a percentage rounded up) and `maxUnavailable` (default 0, rounded down; 1 when both are 0) against `spec.replicas` | `ResolveFenceposts` |
//! | the new MachineSet scaled up while the replicas of all do not exceed `replicas + maxSurge` | `reconcileNewMachineSet`, `NewMSNewReplicas` |
//! | the old ones, oldest revision first, once the replicas of all exceed `replicas - maxUnavailable` plus the new one's unavailable: first by their unavailable Machines (within that excess), then while the available Machines (a Node that is Ready, not deleting) stay at least `replicas - maxUnavailable` | `reconcileOldMachineSets`, `cleanupUnhealthyReplicas`, `scaleDownOldMachineSetsForRollingUpdate` |
//! | which Machines of an old MachineSet go: its own scale-down's priority (`machine_sets::scaling`: the delete-machine annotation, unhealthy ones, then `spec.deletion.order`), the MachineDeployment's order copied onto the new MachineSet | `delete_policy.go` |
//!
//! Not modelled: `OnDelete`, `rollout.after`, `minReadySeconds`, proportional scaling of a resize mid-rollout, the cleanup of old MachineSets, in-place
//! propagation of labels and annotations, and the MachineDeployment's status.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, json};
use crate::env::Env;
use engine::model::{PAUSED_ANNOTATION, Scope};
use serde_json::{Value, json};

const REVISION_ANNOTATION: &str = "machinedeployment.clusters.x-k8s.io/revision";

/// One reconcile of a MachineDeployment.
pub(crate) fn reconcile(env: &mut Env<'_>, actor: &str, md_key: &ObjKey) {
    let Some(md) = env.api.get(&Scope::Management, md_key).cloned() else {
        return;
    };
    if json::is_deleting(&md) || paused(env, &md) {
        return;
    }
    let v1beta1 = json::api_version(&md).ends_with("v1beta1");
    let replicas = md
        .at_pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    // A MachineDeployment without a template (the API requires one) is not rolled out.
    let Some(template) = md
        .at_pointer("/spec/template")
        .filter(|t| t.get("spec").is_some())
    else {
        return;
    };
    let template = template.clone();
    let mut sets = machine_sets(env, md_key);
    let new_index = sets.iter().position(|(_, ms)| same_template(ms, &template));
    let new_index = match new_index {
        Some(i) => i,
        None => {
            let Some(created) = create_new(env, actor, md_key, &md, &sets) else {
                return;
            };
            sets.push(created);
            sets.len() - 1
        }
    };
    let new_revision = revision(&sets[new_index].1).to_string();
    if json::annotations(&md).get(REVISION_ANNOTATION) != Some(&new_revision) {
        mark_revision(env, md_key, &new_revision);
    }
    let (surge, unavailable) = fenceposts(&md, v1beta1, replicas);
    let spec_replicas = |ms: &Value| {
        ms.at_pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let total: i64 = sets.iter().map(|(_, ms)| spec_replicas(ms)).sum();
    let new_replicas = spec_replicas(&sets[new_index].1);
    if new_replicas < replicas && total < replicas + surge {
        let to = (new_replicas + replicas + surge - total).min(replicas);
        scale(
            env,
            actor,
            &sets[new_index].0,
            new_replicas,
            to,
            "scales up the new",
        );
        sets[new_index].1["spec"]["replicas"] = json!(to);
    } else if new_replicas > replicas {
        scale(
            env,
            actor,
            &sets[new_index].0,
            new_replicas,
            replicas,
            "scales down the new",
        );
        sets[new_index].1["spec"]["replicas"] = json!(replicas);
    }
    let all: i64 = sets.iter().map(|(_, ms)| spec_replicas(ms)).sum();
    let new_available = available_machines(env, &sets[new_index].0);
    let new_unavailable = (spec_replicas(&sets[new_index].1) - new_available).max(0);
    let min_available = replicas - unavailable;
    let max_scaled_down = all - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return;
    }
    let mut old: Vec<(ObjKey, i64, u64)> = sets
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != new_index)
        .map(|(_, (k, ms))| (k.clone(), spec_replicas(ms), revision(ms)))
        .collect();
    old.sort_by_key(|(k, _, revision)| (*revision, k.name.to_string()));
    // Unhealthy replicas first (`cleanupUnhealthyReplicas`): they would block the rollout.
    let mut cleaned = 0;
    for (key, current, _) in &mut old {
        let unavailable_here = *current - available_machines(env, key);
        let down = unavailable_here.min(max_scaled_down - cleaned);
        if down > 0 {
            scale(
                env,
                actor,
                key,
                *current,
                *current - down,
                "scales down the unavailable of the old",
            );
            *current -= down;
            cleaned += down;
        }
    }
    // Then as many as keep `minAvailable` (`scaleDownOldMachineSetsForRollingUpdate`).
    let available: i64 = sets.iter().map(|(k, _)| available_machines(env, k)).sum();
    let mut budget = (available - min_available).max(0);
    for (key, current, _) in &old {
        let down = (*current).min(budget);
        if down > 0 {
            scale(
                env,
                actor,
                key,
                *current,
                current - down,
                "scales down the old",
            );
            budget -= down;
        }
    }
}

fn paused(env: &Env<'_>, md: &Value) -> bool {
    let cluster = json::str_at(md, "spec.clusterName").unwrap_or_default();
    let cluster_paused = env
        .api
        .get(
            &Scope::Management,
            &ObjKey::new("cluster.x-k8s.io", "Cluster", json::namespace(md), cluster),
        )
        .is_some_and(|c| c.at_pointer("/spec/paused").and_then(Value::as_bool) == Some(true));
    cluster_paused
        || json::annotations(md).contains_key(PAUSED_ANNOTATION)
        || md.at_pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
}

/// The MachineSets the MachineDeployment controls.
fn machine_sets(env: &Env<'_>, md_key: &ObjKey) -> Vec<(ObjKey, Value)> {
    env.api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "MachineSet")
                .filter(|(k, ms)| {
                    k.namespace == md_key.namespace
                        && !json::is_deleting(ms)
                        && json::controller(ms) == Some(("MachineDeployment", md_key.name.as_str()))
                })
                .map(|(k, ms)| (k.clone(), ms.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the MachineSet's template is the MachineDeployment's (`MachineTemplateUpToDate`:
/// its spec, and its labels but the ones the controllers add).
fn same_template(ms: &Value, template: &Value) -> bool {
    let labels = |t: Option<&Value>| {
        let mut l = t
            .and_then(|t| t.at_pointer("/metadata/labels"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        l.remove("machine-template-hash");
        l.remove("cluster.x-k8s.io/deployment-name");
        l.remove("cluster.x-k8s.io/set-name");
        l
    };
    let ours = ms.at_pointer("/spec/template");
    ours.and_then(|t| t.get("spec")) == template.get("spec")
        && labels(ours) == labels(Some(template))
}

fn revision(ms: &Value) -> u64 {
    json::annotations(ms)
        .get(REVISION_ANNOTATION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Creates the new MachineSet (replicas 0: the scale-up follows) and marks the revision on
/// it and on the MachineDeployment.
fn create_new(
    env: &mut Env<'_>,
    actor: &str,
    md_key: &ObjKey,
    md: &Value,
    sets: &[(ObjKey, Value)],
) -> Option<(ObjKey, Value)> {
    let next = sets.iter().map(|(_, ms)| revision(ms)).max().unwrap_or(0) + 1;
    let name = format!("{}-{next}", md_key.name);
    let api_version = json::api_version(md).to_string();
    let v1beta1 = api_version.ends_with("v1beta1");
    let mut template = md
        .at_pointer("/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    template["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] = json!(md_key.name);
    let mut spec = json!({
        "clusterName": json::str_at(md, "spec.clusterName"),
        "replicas": 0,
        "selector": md.at_pointer("/spec/selector").cloned().unwrap_or(json!({})),
        "template": template,
    });
    let order = if v1beta1 {
        md.at_pointer("/spec/strategy/rollingUpdate/deletePolicy")
    } else {
        md.at_pointer("/spec/deletion/order")
    };
    if let Some(order) = order {
        if v1beta1 {
            spec["deletePolicy"] = order.clone();
        } else {
            spec["deletion"] = json!({"order": order});
        }
    }
    let ms = json!({
        "apiVersion": api_version, "kind": "MachineSet",
        "metadata": {"name": name, "namespace": md_key.namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": json::str_at(md, "spec.clusterName"),
                "cluster.x-k8s.io/deployment-name": md_key.name},
            "annotations": {REVISION_ANNOTATION: next.to_string()},
            "ownerReferences": [{"apiVersion": api_version, "kind": "MachineDeployment",
                "name": md_key.name, "uid": json::str_at(md, "metadata.uid"),
                "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec,
    });
    let now = env.clock.now;
    let key = ObjKey::of(&ms);
    let w = env.api.store_mut(&Scope::Management).create(ms, now).ok()?;
    env.line(
        actor,
        "CreateMachineSet",
        key.to_string(),
        format!(
            "MachineDeployment {} rolls out revision {next}",
            md_key.name
        ),
    );
    let created = w.object.as_deref().cloned()?;
    env.changed(&Scope::Management, w);
    Some((key, created))
}

/// The MachineDeployment's revision annotation follows its new MachineSet's.
fn mark_revision(env: &mut Env<'_>, md_key: &ObjKey, revision: &str) {
    let mark = json!({"metadata": {"annotations": {REVISION_ANNOTATION: revision}}});
    if let Ok(w) = env
        .api
        .store_mut(&Scope::Management)
        .patch(md_key, &mark, Part::Main)
    {
        env.changed(&Scope::Management, w);
    }
}

/// `maxSurge` and `maxUnavailable` against the replicas (`ResolveFenceposts`).
fn fenceposts(md: &Value, v1beta1: bool, replicas: i64) -> (i64, i64) {
    let base = if v1beta1 {
        "/spec/strategy/rollingUpdate"
    } else {
        "/spec/rollout/strategy/rollingUpdate"
    };
    let resolve = |field: &str, default: i64, round_up: bool| match md
        .at_pointer(&format!("{base}/{field}"))
    {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(default),
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) if round_up => (p * replicas + 99) / 100,
            Some(p) => p * replicas / 100,
            None => default,
        },
        _ => default,
    };
    let surge = resolve("maxSurge", 1, true);
    let unavailable = resolve("maxUnavailable", 0, false);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// The MachineSet's Machines that are available: not deleting, their Node Ready.
fn available_machines(env: &Env<'_>, ms_key: &ObjKey) -> i64 {
    let Some(store) = env.api.store(&Scope::Management) else {
        return 0;
    };
    store
        .list("cluster.x-k8s.io", "Machine")
        .filter(|(k, m)| {
            k.namespace == ms_key.namespace
                && !json::is_deleting(m)
                && json::controller(m) == Some(("MachineSet", ms_key.name.as_str()))
        })
        .filter(|(_, m)| {
            let Some(node) = json::str_at(m, "status.nodeRef.name") else {
                return false;
            };
            let cluster = json::str_at(m, "spec.clusterName").unwrap_or_default();
            env.api
                .get(
                    &env.api.workload_scope(cluster),
                    &ObjKey::new("", "Node", "", node),
                )
                .and_then(|n| n.at_pointer("/status/conditions"))
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
        .count() as i64
}

/// Sets a MachineSet's `spec.replicas` (its controller then creates or deletes Machines).
fn scale(env: &mut Env<'_>, actor: &str, ms: &ObjKey, from: i64, to: i64, what: &str) {
    let patch = json!({"spec": {"replicas": to}});
    if let Ok(w) = env
        .api
        .store_mut(&Scope::Management)
        .patch(ms, &patch, Part::Main)
    {
        env.line(
            actor,
            "ScaleMachineSet",
            ms.to_string(),
            format!("{what} MachineSet: replicas {from} -> {to}"),
        );
        env.changed(&Scope::Management, w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ResolveFenceposts`: a surge rounds up, unavailability down, both zero make one
    /// unavailable; defaults 1 and 0; v1beta1 keeps them under `spec.strategy`.
    #[test]
    fn surge_and_unavailability_resolve_as_upstream() {
        let md =
            |rolling: Value| json!({"spec": {"rollout": {"strategy": {"rollingUpdate": rolling}}}});
        assert_eq!(fenceposts(&md(json!({})), false, 4), (1, 0));
        assert_eq!(
            fenceposts(
                &md(json!({"maxSurge": "30%", "maxUnavailable": "30%"})),
                false,
                4
            ),
            (2, 1)
        );
        assert_eq!(
            fenceposts(&md(json!({"maxSurge": 0, "maxUnavailable": 0})), false, 4),
            (0, 1)
        );
        let legacy = json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 3}}}});
        assert_eq!(fenceposts(&legacy, true, 4), (3, 0));
    }
}
