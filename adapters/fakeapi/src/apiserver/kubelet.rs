//! The controllers a fake cluster needs so deletions finish: a "kubelet" that removes pods
//! whose grace period has passed, a namespace controller that empties and removes
//! terminating namespaces, and a disruption controller that keeps PDB status current.
//! All of them write through the store, so watches see their changes.

use super::state::SharedCluster;
use engine::{Duration, Timestamp};
use serde_json::{Value, json};
use sim::api::{ClusterStore, ObjKey, Part, eviction, json as sjson};

/// What the controllers remember between passes, so that a cluster where nothing happened
/// costs nothing: every pass walks the cluster's pods, and a thousand clusters' passes five
/// times a second took a quarter of the fake servers' CPU and held requests behind them.
#[derive(Debug, Default)]
pub struct Controllers {
    /// The resource version of the last pass that wrote nothing.
    settled_at: Option<u64>,
    /// When the next terminating pod's grace period ends.
    next_due: Option<Timestamp>,
}

/// Whether [`Controllers::tick`] walked the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    Ran,
    Skipped,
}

impl Controllers {
    /// One pass over the store at `now`, unless nothing was written since a pass that changed
    /// nothing and no pod's grace period has ended since. `pod_shutdown_max` caps every pod's
    /// grace period, so a demo does not wait 30 s per pod.
    pub fn tick(
        &mut self,
        cluster: &SharedCluster,
        now: Timestamp,
        pod_shutdown_max: Duration,
    ) -> Pass {
        let version = cluster.read(|s| s.store.resource_version());
        let due = self.next_due.is_some_and(|at| at <= now);
        if self.settled_at == Some(version) && !due {
            return Pass::Skipped;
        }
        let (next_due, written) = cluster.write(|store| {
            let next_due = remove_terminated_pods(store, now, pod_shutdown_max);
            empty_terminating_namespaces(store, now);
            update_pdb_status(store);
            (next_due, store.resource_version() != version)
        });
        self.next_due = next_due;
        // A pass that wrote may have made work for the next one (a namespace's pods deleted).
        self.settled_at = (!written).then_some(version);
        Pass::Ran
    }
}

/// Removes the pods whose grace period has ended; returns when the next one's ends.
fn remove_terminated_pods(
    store: &mut ClusterStore,
    now: Timestamp,
    cap: Duration,
) -> Option<Timestamp> {
    let mut next_due: Option<Timestamp> = None;
    let mut done: Vec<ObjKey> = Vec::new();
    for (key, pod) in store.list("", "Pod") {
        if !sjson::finalizers(pod).is_empty() {
            continue;
        }
        let Some(since) = sjson::str_at(pod, "metadata.deletionTimestamp")
            .and_then(|t| Timestamp::parse_rfc3339(t).ok())
        else {
            continue;
        };
        let grace = pod
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let wait = Duration::from_secs(grace).min(cap);
        if now.since(since) >= wait {
            done.push(key.clone());
        } else {
            let at = since + wait;
            next_due = Some(next_due.map_or(at, |n| n.min(at)));
        }
    }
    for key in done {
        store.remove(&key);
    }
    next_due
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "app"}, "spec": {"nodeName": "n1"}})
    }

    fn cluster_with(pods: &[&str]) -> SharedCluster {
        let mut store = ClusterStore::new("t");
        for name in pods {
            store.create(pod(name), Timestamp(0)).unwrap();
        }
        SharedCluster::new(store)
    }

    fn pods(cluster: &SharedCluster) -> Vec<String> {
        cluster.read(|s| {
            s.store
                .list("", "Pod")
                .map(|(k, _)| k.name.clone())
                .collect()
        })
    }

    #[test]
    fn a_cluster_where_nothing_happened_is_not_walked_again() {
        let cluster = cluster_with(&["p1"]);
        let mut controllers = Controllers::default();
        let cap = Duration::from_secs(60);
        assert_eq!(controllers.tick(&cluster, Timestamp(1_000), cap), Pass::Ran);
        assert_eq!(
            controllers.tick(&cluster, Timestamp(2_000), cap),
            Pass::Skipped
        );
        cluster.write(|s| s.create(pod("p2"), Timestamp(2_000)).unwrap());
        assert_eq!(controllers.tick(&cluster, Timestamp(3_000), cap), Pass::Ran);
        assert_eq!(
            controllers.tick(&cluster, Timestamp(4_000), cap),
            Pass::Skipped
        );
    }

    #[test]
    fn a_terminating_pod_is_removed_when_its_grace_ends_though_nothing_else_changes() {
        let cluster = cluster_with(&["p1", "p2"]);
        let key = ObjKey::new("", "Pod", "app", "p1");
        // Deleted at 10 s with 5 s of grace: due at 15 s.
        let deleted = Timestamp::parse_rfc3339("1970-01-01T00:00:10Z").unwrap();
        cluster.write(|s| s.mark_deleting(&key, deleted, Some(5)).unwrap());
        let mut controllers = Controllers::default();
        let cap = Duration::from_secs(60);
        let at = |s: i64| deleted + Duration::from_secs(s);
        assert_eq!(controllers.tick(&cluster, at(1), cap), Pass::Ran);
        assert_eq!(controllers.tick(&cluster, at(2), cap), Pass::Skipped);
        assert_eq!(pods(&cluster), ["p1", "p2"]);
        assert_eq!(controllers.tick(&cluster, at(5), cap), Pass::Ran);
        assert_eq!(pods(&cluster), ["p2"]);
        // The removal was a write: one more pass settles it.
        assert_eq!(controllers.tick(&cluster, at(6), cap), Pass::Ran);
        assert_eq!(controllers.tick(&cluster, at(7), cap), Pass::Skipped);
    }

    #[test]
    fn the_grace_period_is_capped() {
        let cluster = cluster_with(&["p1"]);
        let key = ObjKey::new("", "Pod", "app", "p1");
        cluster.write(|s| s.mark_deleting(&key, Timestamp(0), Some(30)).unwrap());
        let mut controllers = Controllers::default();
        let cap = Duration::from_secs(2);
        controllers.tick(&cluster, Timestamp(1_000), cap);
        assert_eq!(pods(&cluster), ["p1"]);
        assert_eq!(controllers.tick(&cluster, Timestamp(2_000), cap), Pass::Ran);
        assert!(pods(&cluster).is_empty());
    }
}
