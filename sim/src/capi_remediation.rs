//! The model of CAPI's MachineSet owner remediation (`capiManager: true`), upstream's
//! `reconcileUnhealthyMachines` (`core/reconcilers/machineset/machineset_controller.go`,
//! `engine/docs/capi.md` §2.7), for a MachineSet that is not paused (its annotation, or its
//! Cluster's `spec.paused`):
//!
//! | step | upstream |
//! |---|---|
//! | a Machine not deleting with `HealthCheckSucceeded=True` loses a stale `OwnerRemediated=False` | §2.7 1 |
//! | candidates: not deleting, `HealthCheckSucceeded=False` and `OwnerRemediated=False` | §2.7 2 |
//! | a MachineSet of an outdated MachineDeployment revision: `CannotBeRemediated`, nothing deleted | §2.7 3 |
//! | the MachineDeployment's `maxInFlight` (round up against its replicas, unset: unlimited), less the Machines deleting with `MachineDeleting`; none left: `RemediationDeferred` | §2.7 4 |
//! | the remediate-machine annotation first, then newest, then by name; beyond `maxInFlight`: `RemediationDeferred` | §2.7 5 |
//! | `OwnerRemediated=False (MachineDeleting)` written, then the Machine deleted | §2.7 7 |
//!
//! Not modelled: the preflight checks (§2.7 6), the v1beta1 conditions (the model's MHC writes
//! none either), the rollout's move of unhealthy Machines (§2.7 8).

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, json};
use crate::capi_conditions::{condition, set_conditions};
use crate::env::Env;
use engine::model::{PAUSED_ANNOTATION, REMEDIATE_MACHINE_ANNOTATION, Scope};
use serde_json::Value;
use std::cmp::Reverse;

const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
const OWNER_REMEDIATED: &str = "OwnerRemediated";
const MACHINE_DELETING: &str = "MachineDeleting";
const REVISION_ANNOTATION: &str = "machinedeployment.clusters.x-k8s.io/revision";

/// The status of the Machine's v1beta2 condition of `type_`, and its reason.
fn current<'a>(machine: &'a Value, type_: &str) -> Option<(&'a str, &'a str)> {
    let v1beta1 = json::api_version(machine).ends_with("v1beta1");
    let list = if v1beta1 {
        "/status/v1beta2/conditions"
    } else {
        "/status/conditions"
    };
    machine
        .at_pointer(list)
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
            )
        })
}

fn is(machine: &Value, type_: &str, status: &str) -> bool {
    current(machine, type_).is_some_and(|(s, _)| s == status)
}

/// One MachineSet reconcile's remediation of its unhealthy Machines.
pub(crate) fn reconcile(env: &mut Env<'_>, actor: &str, ms_key: &ObjKey) {
    let Some(ms) = env.api.get(&Scope::Management, ms_key).cloned() else {
        return;
    };
    let cluster = json::str_at(&ms, "spec.clusterName").unwrap_or_default();
    let cluster_paused = env
        .api
        .get(
            &Scope::Management,
            &ObjKey::new("cluster.x-k8s.io", "Cluster", &ms_key.namespace, cluster),
        )
        .is_some_and(|c| c.at_pointer("/spec/paused").and_then(Value::as_bool) == Some(true));
    if cluster_paused || json::annotations(&ms).contains_key(PAUSED_ANNOTATION) {
        return;
    }
    let machines: Vec<(ObjKey, Value)> = env
        .api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "Machine")
                .filter(|(k, m)| {
                    k.namespace == ms_key.namespace
                        && json::controller(m) == Some(("MachineSet", ms_key.name.as_str()))
                })
                .map(|(k, m)| (k.clone(), m.clone()))
                .collect()
        })
        .unwrap_or_default();
    for (key, machine) in &machines {
        if !json::is_deleting(machine)
            && is(machine, HEALTH_CHECK_SUCCEEDED, "True")
            && is(machine, OWNER_REMEDIATED, "False")
        {
            remove_owner_remediated(env, actor, key, machine);
        }
    }
    let mut candidates: Vec<&(ObjKey, Value)> = machines
        .iter()
        .filter(|(_, m)| {
            !json::is_deleting(m)
                && is(m, HEALTH_CHECK_SUCCEEDED, "False")
                && is(m, OWNER_REMEDIATED, "False")
        })
        .collect();
    if candidates.is_empty() {
        return;
    }
    let now = env.clock.now;
    let md = json::controller(&ms)
        .filter(|(kind, _)| *kind == "MachineDeployment")
        .and_then(|(_, name)| {
            env.api.get(
                &Scope::Management,
                &ObjKey::new(
                    "cluster.x-k8s.io",
                    "MachineDeployment",
                    &ms_key.namespace,
                    name,
                ),
            )
        })
        .cloned();
    let revision = |o: &Value| json::annotations(o).get(REVISION_ANNOTATION).cloned();
    if let Some(md) = &md
        && revision(md) != revision(&ms)
    {
        let c = condition(
            OWNER_REMEDIATED,
            "False",
            "CannotBeRemediated",
            "Machine won't be remediated because it is pending removal due to rollout",
            now,
        );
        for (key, machine) in candidates {
            set_conditions(env, actor, key, machine, std::slice::from_ref(&c));
        }
        return;
    }
    let limit = md.as_ref().and_then(max_in_flight);
    let in_flight = machines
        .iter()
        .filter(|(_, m)| {
            json::is_deleting(m)
                && current(m, OWNER_REMEDIATED) == Some(("False", MACHINE_DELETING))
        })
        .count() as i64;
    candidates.sort_by_key(|(k, m)| {
        (
            !json::annotations(m).contains_key(REMEDIATE_MACHINE_ANNOTATION),
            Reverse(
                json::str_at(m, "metadata.creationTimestamp")
                    .unwrap_or_default()
                    .to_string(),
            ),
            k.name.to_string(),
        )
    });
    let take = match &limit {
        None => candidates.len(),
        Some((_, n)) => usize::try_from((n - in_flight).max(0))
            .unwrap_or(0)
            .min(candidates.len()),
    };
    let (remediate, deferred) = candidates.split_at(take);
    if let Some((written, _)) = &limit {
        let c = condition(
            OWNER_REMEDIATED,
            "False",
            "RemediationDeferred",
            &format!(
                "Waiting because there are already too many remediations in progress (spec.strategy.remediation.maxInFlight is {written})"
            ),
            now,
        );
        for (key, machine) in deferred {
            set_conditions(env, actor, key, machine, std::slice::from_ref(&c));
        }
    }
    let c = condition(
        OWNER_REMEDIATED,
        "False",
        MACHINE_DELETING,
        "Machine is deleting",
        now,
    );
    for (key, machine) in remediate {
        set_conditions(env, actor, key, machine, std::slice::from_ref(&c));
        if let Ok(w) = env.api.store_mut(&Scope::Management).delete(key, now) {
            env.line(
                actor,
                "DeleteMachine",
                key.to_string(),
                format!("MachineSet {} remediates an unhealthy Machine", ms_key.name),
            );
            env.changed(&Scope::Management, w);
        }
    }
}

/// The MachineDeployment's remediation `maxInFlight` as written and scaled against its replicas
/// (unset replicas: 1), rounded up; `None`: unlimited (unset, or unreadable).
fn max_in_flight(md: &Value) -> Option<(String, i64)> {
    let v1beta1 = json::api_version(md).ends_with("v1beta1");
    let pointer = if v1beta1 {
        "/spec/strategy/remediation/maxInFlight"
    } else {
        "/spec/remediation/maxInFlight"
    };
    let value = md.at_pointer(pointer)?;
    let replicas = md
        .at_pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    match value {
        Value::Number(n) => n.as_i64().map(|n| (n.to_string(), n)),
        Value::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            let product = pct * replicas;
            Some((s.clone(), product / 100 + i64::from(product % 100 != 0)))
        }
        _ => None,
    }
}

/// Deletes a healthy Machine's stale `OwnerRemediated` condition (§2.7 1).
fn remove_owner_remediated(env: &mut Env<'_>, actor: &str, key: &ObjKey, machine: &Value) {
    let v1beta1 = json::api_version(machine).ends_with("v1beta1");
    let kept: Vec<Value> = machine
        .at_pointer(if v1beta1 {
            "/status/v1beta2/conditions"
        } else {
            "/status/conditions"
        })
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["type"] != OWNER_REMEDIATED)
        .cloned()
        .collect();
    crate::capi_conditions::write_list(
        env,
        actor,
        key,
        v1beta1,
        kept,
        "RemoveCondition",
        "OwnerRemediated (the Machine is healthy again)".into(),
    );
}
