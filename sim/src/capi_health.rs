//! The model of CAPI's MachineHealthCheck controller (`capiManager: true`), upstream's marking
//! only: for an MHC that is not paused (its annotation, or its Cluster's `spec.paused`), each
//! Machine its selector picks in its Cluster is marked `HealthCheckSucceeded` (`NodeDeleted`
//! when its Node is gone, `UnhealthyNode` when one of `unhealthyNodeConditions` has held for its
//! timeout) and, when unhealthy, `OwnerRemediated=False` for its owner to remediate; the MHC's
//! `expectedMachines` and `currentHealthy` are written. Upstream's source: the targets' health
//! (`machinehealthcheck_targets.go` `needsRemediation`), the marking and the status
//! (`machinehealthcheck_controller.go`). Not modelled: node startup timeouts, maxUnhealthy's
//! short-circuit, external remediation templates, matchExpressions selectors.

use crate::api::{ObjKey, Part, json};
use crate::env::Env;
use engine::model::{PAUSED_ANNOTATION, SKIP_REMEDIATION_ANNOTATION, Scope};
use engine::time::{Duration, Timestamp};
use serde_json::{Value, json};

/// A target's verdict: healthy, or why not, or when to look again.
enum Health {
    Healthy {
        recheck: Option<Timestamp>,
    },
    Unhealthy {
        reason: &'static str,
        message: String,
    },
}

/// The MHCs of `namespace`.
pub(crate) fn mhcs_of(env: &Env<'_>, namespace: &str) -> Vec<ObjKey> {
    env.api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "MachineHealthCheck")
                .filter(|(k, _)| k.namespace == namespace)
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// One reconcile of `mhc_key`: marks its targets; returns when to reconcile again (the
/// earliest unhealthy-condition timeout still running).
pub(crate) fn reconcile(env: &mut Env<'_>, actor: &str, mhc_key: &ObjKey) -> Option<Timestamp> {
    let mhc = env.api.get(&Scope::Management, mhc_key)?.clone();
    let cluster_name = json::str_at(&mhc, "spec.clusterName")?.to_string();
    let cluster_key = ObjKey::new(
        "cluster.x-k8s.io",
        "Cluster",
        &mhc_key.namespace,
        &cluster_name,
    );
    let cluster_paused = env
        .api
        .get(&Scope::Management, &cluster_key)
        .is_some_and(|c| c.pointer("/spec/paused").and_then(Value::as_bool) == Some(true));
    if cluster_paused || json::annotations(&mhc).contains_key(PAUSED_ANNOTATION) {
        return None;
    }
    let selector: Vec<(String, String)> = mhc
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let targets: Vec<(ObjKey, Value)> = env
        .api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "Machine")
                .filter(|(k, m)| {
                    let labels = json::labels(m);
                    k.namespace == mhc_key.namespace
                        && json::str_at(m, "spec.clusterName") == Some(cluster_name.as_str())
                        && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                        && !json::is_deleting(m)
                })
                .map(|(k, m)| (k.clone(), m.clone()))
                .collect()
        })
        .unwrap_or_default();
    let workload = env.api.workload_scope(&cluster_name);
    let conditions = unhealthy_conditions(&mhc);
    let now = env.clock.now;
    let mut healthy = 0u64;
    let mut next: Option<Timestamp> = None;
    for (key, machine) in &targets {
        let health = judge(env, &workload, machine, &conditions, now);
        let (status, reason, message, owner_remediated) = match &health {
            Health::Healthy { recheck } => {
                healthy += 1;
                next = match (next, *recheck) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                ("True", "HealthCheckSucceeded", String::new(), false)
            }
            Health::Unhealthy { reason, message } => ("False", *reason, message.clone(), true),
        };
        let skip = json::annotations(machine).contains_key(SKIP_REMEDIATION_ANNOTATION);
        let mut written = vec![condition(
            "HealthCheckSucceeded",
            status,
            reason,
            &message,
            now,
        )];
        if owner_remediated && !skip {
            written.push(condition(
                "OwnerRemediated",
                "False",
                "WaitingForRemediation",
                "Waiting for remediation",
                now,
            ));
        }
        set_conditions(env, actor, key, machine, &written);
    }
    let counts = json!({"expectedMachines": targets.len(), "currentHealthy": healthy});
    let unchanged = ["expectedMachines", "currentHealthy"]
        .iter()
        .all(|f| mhc.pointer(&format!("/status/{f}")) == counts.get(*f));
    if unchanged {
        return next;
    }
    let status = json!({"status": counts});
    if let Ok(w) = env
        .api
        .store_mut(&Scope::Management)
        .patch(mhc_key, &status, Part::Status)
    {
        env.changed(&Scope::Management, w);
    }
    next
}

/// `(type, status, timeout)` of the MHC's `checks.unhealthyNodeConditions`.
fn unhealthy_conditions(mhc: &Value) -> Vec<(String, String, Duration)> {
    mhc.pointer("/spec/checks/unhealthyNodeConditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some((
                c["type"].as_str()?.to_string(),
                c["status"].as_str()?.to_string(),
                Duration::from_secs(c["timeoutSeconds"].as_i64()?),
            ))
        })
        .collect()
}

fn judge(
    env: &Env<'_>,
    workload: &Scope,
    machine: &Value,
    conditions: &[(String, String, Duration)],
    now: Timestamp,
) -> Health {
    let Some(node_name) = json::str_at(machine, "status.nodeRef.name") else {
        return Health::Healthy { recheck: None };
    };
    let Some(node) = env
        .api
        .get(workload, &ObjKey::new("", "Node", "", node_name))
    else {
        return Health::Unhealthy {
            reason: "NodeDeleted",
            message: format!("Node {node_name} has been deleted"),
        };
    };
    let mut recheck = None;
    for c in node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (type_, status, timeout) in conditions {
            if c["type"] != type_.as_str() || c["status"] != status.as_str() {
                continue;
            }
            let since = c["lastTransitionTime"]
                .as_str()
                .and_then(|t| Timestamp::parse_rfc3339(t).ok())
                .unwrap_or(now);
            let due = since + *timeout;
            if due <= now {
                return Health::Unhealthy {
                    reason: "UnhealthyNode",
                    message: format!(
                        "Condition {type_} on Node is reported as {status} for more than {}",
                        go_duration(*timeout)
                    ),
                };
            }
            recheck = Some(recheck.map_or(due, |r: Timestamp| r.min(due)));
        }
    }
    Health::Healthy { recheck }
}

/// A duration as Go prints it (`5m0s`).
fn go_duration(d: Duration) -> String {
    let s = d.as_millis() / 1000;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, now: Timestamp) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": now.to_rfc3339()})
}

/// Sets `written` in the Machine's `status.conditions` where they differ (a condition whose
/// status holds keeps its transition time), as CAPI's patch helper does for the conditions it
/// owns; the other conditions stay.
fn set_conditions(
    env: &mut Env<'_>,
    actor: &str,
    key: &ObjKey,
    machine: &Value,
    written: &[Value],
) {
    let mut list: Vec<Value> = machine
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for new in written {
        match list.iter_mut().find(|c| c["type"] == new["type"]) {
            Some(old)
                if old["status"] == new["status"]
                    && old["reason"] == new["reason"]
                    && old["message"] == new["message"] => {}
            Some(old) => {
                let mut new = new.clone();
                if old["status"] == new["status"] {
                    new["lastTransitionTime"] = old["lastTransitionTime"].clone();
                }
                *old = new;
                changed = true;
            }
            None => {
                list.push(new.clone());
                changed = true;
            }
        }
    }
    if !changed {
        return;
    }
    let summary: Vec<String> = written
        .iter()
        .map(|c| {
            format!(
                "{}={} ({})",
                c["type"].as_str().unwrap_or_default(),
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if let Ok(w) = env.api.store_mut(&Scope::Management).patch(
        key,
        &json!({"status": {"conditions": list}}),
        Part::Status,
    ) {
        env.line(
            actor,
            "SetCondition",
            crate::api::describe(&Scope::Management, key),
            summary.join(", "),
        );
        env.changed(&Scope::Management, w);
    }
}
