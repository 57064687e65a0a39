//! The Eviction subresource with PodDisruptionBudgets, answering as the real API does.

use super::json;
use super::store::{ApiError, ClusterStore, ObjKey, Written, not_found};
use crate::api::json::Pointer as _;
use engine::time::Timestamp;
use serde_json::Value;

pub const PDB_VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// What an eviction did: the pod write (a graceful deletion), or nothing.
pub enum Evicted {
    /// The pod was marked for deletion; the kubelet removes it after its grace period.
    Deleting(Written),
}

/// PDB status computed from the pods, as the disruption controller would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PdbStatus {
    pub expected_pods: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub disruptions_allowed: i64,
}

pub fn selector_matches(
    selector: Option<&Value>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let Some(sel) = selector.and_then(Value::as_object) else {
        return false;
    };
    let match_labels = sel.get("matchLabels").and_then(Value::as_object);
    let exprs = sel.get("matchExpressions").and_then(Value::as_array);
    if match_labels.is_none_or(|m| m.is_empty()) && exprs.is_none_or(|e| e.is_empty()) {
        // A PDB with an empty selector matches nothing.
        return false;
    }
    let labels_ok = match_labels.is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
    });
    let exprs_ok = exprs.is_none_or(|list| {
        list.iter().all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let v = labels.get(key).map(String::as_str);
            match e
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or_default()
            {
                "In" => v.is_some_and(|v| values.contains(&v)),
                "NotIn" => v.is_none_or(|v| !values.contains(&v)),
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

fn pod_is_healthy(pod: &Value) -> bool {
    !json::is_deleting(pod)
        && json::str_at(pod, "status.phase") == Some("Running")
        && pod
            .at_pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_none_or(|conds| {
                conds
                    .iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                    .is_none_or(|c| c.get("status").and_then(Value::as_str) == Some("True"))
            })
}

/// An IntOrString scaled against `total`: ints as they are, percentages rounded up.
fn scaled(v: &Value, total: i64) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) => (p * total + 99) / 100,
            None => s.parse::<i64>().unwrap_or(0),
        },
        _ => 0,
    }
}

pub fn pdb_status(store: &ClusterStore, pdb: &Value) -> PdbStatus {
    let ns = json::namespace(pdb);
    let selector = pdb.at_pointer("/spec/selector");
    let pods: Vec<&Value> = store
        .list("", "Pod")
        .filter(|(k, _)| k.namespace == ns)
        .map(|(_, p)| p)
        .filter(|p| selector_matches(selector, &json::labels(p)))
        .collect();
    let expected = pods.len() as i64;
    let healthy = pods.iter().filter(|p| pod_is_healthy(p)).count() as i64;
    let desired = if let Some(min) = pdb.at_pointer("/spec/minAvailable") {
        scaled(min, expected)
    } else if let Some(max) = pdb.at_pointer("/spec/maxUnavailable") {
        (expected - scaled(max, expected)).max(0)
    } else {
        0
    };
    PdbStatus {
        expected_pods: expected,
        current_healthy: healthy,
        desired_healthy: desired,
        disruptions_allowed: (healthy - desired).max(0),
    }
}

/// POST `pods/{name}/eviction`.
pub fn evict(
    store: &mut ClusterStore,
    pod_key: &ObjKey,
    grace_seconds: Option<i64>,
    now: Timestamp,
) -> Result<Evicted, ApiError> {
    let pod = store
        .get(pod_key)
        .ok_or_else(|| not_found(pod_key))?
        .clone();
    let ns_key = ObjKey::new("", "Namespace", "", &pod_key.namespace);
    if let Some(ns) = store.get(&ns_key)
        && (json::is_deleting(ns) || json::str_at(ns, "status.phase") == Some("Terminating"))
    {
        return Err(ApiError::Forbidden {
            message: format!(
                "pods {:?} is forbidden: unable to create new content in namespace {} because it is being terminated",
                pod_key.name, pod_key.namespace
            ),
            namespace_terminating: true,
        });
    }
    let grace = grace_seconds.or_else(|| {
        pod.at_pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    });
    let phase = json::str_at(&pod, "status.phase").unwrap_or("Pending");
    let bypass_pdb = json::is_deleting(&pod) || matches!(phase, "Succeeded" | "Failed" | "Pending");
    if !bypass_pdb {
        let labels = json::labels(&pod);
        let pdbs: Vec<Value> = store
            .list("policy", "PodDisruptionBudget")
            .filter(|(k, _)| k.namespace == pod_key.namespace)
            .filter(|(_, p)| selector_matches(p.at_pointer("/spec/selector"), &labels))
            .map(|(_, p)| p.clone())
            .collect();
        if pdbs.len() > 1 {
            return Err(ApiError::Internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
            ));
        }
        if let Some(pdb) = pdbs.first() {
            let status = pdb_status(store, pdb);
            let unhealthy_pod_ok = !pod_is_healthy(&pod)
                && status.current_healthy >= status.desired_healthy
                && status.desired_healthy > 0;
            if status.disruptions_allowed == 0 && !unhealthy_pod_ok {
                return Err(ApiError::TooManyRequests {
                    message: PDB_VIOLATION.to_string(),
                    causes: vec![format!(
                        "The disruption budget {} needs {} healthy pods and has {} currently",
                        json::name(pdb),
                        status.desired_healthy,
                        status.current_healthy
                    )],
                });
            }
        }
    }
    let written = store.mark_deleting(pod_key, now, grace)?;
    Ok(Evicted::Deleting(written))
}
