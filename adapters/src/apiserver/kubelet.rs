//! The controllers a fake cluster needs so deletions finish: a "kubelet" that removes pods
//! whose grace period has passed, a namespace controller that empties and removes
//! terminating namespaces, and a disruption controller that keeps PDB status current.
//! All of them write through the store, so watches see their changes.

use super::state::SharedCluster;
use engine::{Duration, Timestamp};
use serde_json::{Value, json};
use sim::api::{ClusterStore, ObjKey, Part, eviction, json as sjson};

/// One pass over the store at `now`. `pod_shutdown_max` caps every pod's grace period, so a
/// demo does not wait 30 s per pod.
pub fn tick(cluster: &SharedCluster, now: Timestamp, pod_shutdown_max: Duration) {
    cluster.write(|store| {
        remove_terminated_pods(store, now, pod_shutdown_max);
        empty_terminating_namespaces(store, now);
        update_pdb_status(store);
    });
}

fn remove_terminated_pods(store: &mut ClusterStore, now: Timestamp, cap: Duration) {
    let done: Vec<ObjKey> = store
        .list("", "Pod")
        .filter(|(_, pod)| sjson::finalizers(pod).is_empty())
        .filter(|(_, pod)| {
            let Some(since) = sjson::str_at(pod, "metadata.deletionTimestamp")
                .and_then(|t| Timestamp::parse_rfc3339(t).ok())
            else {
                return false;
            };
            let grace = pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let wait = Duration::from_secs(grace).min(cap);
            now.since(since) >= wait
        })
        .map(|(k, _)| k.clone())
        .collect();
    for key in done {
        store.remove(&key);
    }
}

fn empty_terminating_namespaces(store: &mut ClusterStore, now: Timestamp) {
    let terminating: Vec<String> = store
        .list("", "Namespace")
        .filter(|(_, ns)| sjson::is_deleting(ns))
        .map(|(k, _)| k.name.clone())
        .collect();
    for ns in terminating {
        let contents: Vec<(ObjKey, bool)> = store
            .iter()
            .filter(|(k, _)| k.namespace == ns)
            .map(|(k, o)| (k.clone(), sjson::is_deleting(o)))
            .collect();
        if contents.is_empty() {
            store.remove(&ObjKey::new("", "Namespace", "", &ns));
            continue;
        }
        for (key, deleting) in contents {
            if !deleting {
                let _ = store.delete(&key, now);
            }
        }
    }
}

fn update_pdb_status(store: &mut ClusterStore) {
    let pdbs: Vec<(ObjKey, Value)> = store
        .list("policy", "PodDisruptionBudget")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, pdb) in pdbs {
        let s = eviction::pdb_status(store, &pdb);
        let status = json!({
            "currentHealthy": s.current_healthy,
            "desiredHealthy": s.desired_healthy,
            "disruptionsAllowed": s.disruptions_allowed,
            "expectedPods": s.expected_pods,
            "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        });
        let current = pdb.get("status").cloned().unwrap_or(json!({}));
        let unchanged = status
            .as_object()
            .expect("built as an object")
            .iter()
            .all(|(k, v)| current.get(k) == Some(v));
        if !unchanged {
            let _ = store.patch(&key, &json!({"status": status}), Part::Status);
        }
    }
}
