//! The fake Kubernetes API of every simulated cluster: objects with real write semantics,
//! PDB-enforcing eviction, and the changes a watch would report.

pub mod events;
pub mod eviction;
pub mod fake;
pub mod json;
pub mod managed;
pub mod store;

pub use fake::FakeApi;
pub use store::{ApiError, Change, ChangeType, ClusterStore, ObjKey, Part, TooOld, Written};

/// The API group of a kind the simulator knows (`Machine` → `cluster.x-k8s.io`, `Pod` → ``);
/// provider kinds are not known and get ``.
pub fn default_group(kind: &str) -> &'static str {
    engine::model::group_of_kind(kind).unwrap_or_default()
}

pub use engine::convert::plural;

use engine::model::{Kind, ObjectKey, Scope};

/// Whether `group` is a provider's (infrastructure, bootstrap), not CAPI's own.
pub fn is_provider_group(group: &str) -> bool {
    group.ends_with(".cluster.x-k8s.io") && group != "cluster.x-k8s.io"
}

/// A short name for a scope, as timelines print it.
pub fn scope_name(scope: &Scope) -> String {
    match scope {
        Scope::Management => String::new(),
        Scope::Workload(c) => c.name.to_string(),
    }
}

/// `Pod app/web-0@c1`.
pub fn describe(scope: &Scope, key: &ObjKey) -> String {
    match scope {
        Scope::Management => key.to_string(),
        Scope::Workload(c) => format!("{key}@{}", c.name),
    }
}

/// The engine key of an API object key.
pub fn engine_key(scope: &Scope, key: &ObjKey) -> ObjectKey {
    ObjectKey::new(
        scope.clone(),
        Kind::from_group_kind(&key.group, &key.kind),
        &key.namespace,
        &key.name,
    )
}

#[cfg(test)]
mod tests {
    use super::eviction::{self, PDB_VIOLATION};
    use super::json::Pointer as _;
    use super::*;
    use engine::time::Timestamp;
    use serde_json::json;

    const NOW: Timestamp = Timestamp(1_704_067_200_000);

    fn web_pod(name: &str, ready: bool) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "app", "labels": {"app": "web"}},
               "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30},
               "status": {"phase": "Running",
                          "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
    }

    fn store_with_pdb(min_available: serde_json::Value) -> ClusterStore {
        let mut s = ClusterStore::new("c1");
        for (name, ready) in [("web-0", true), ("web-1", true), ("web-2", true)] {
            s.create(web_pod(name, ready), NOW).unwrap();
        }
        s.create(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "web", "namespace": "app"},
                   "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}}}),
            NOW,
        )
        .unwrap();
        s
    }

    #[test]
    fn the_versions_stored_follow_every_write() {
        let machine = |name: &str, version: &str| {
            json!({"apiVersion": format!("infrastructure.cluster.x-k8s.io/{version}"),
                   "kind": "DockerMachine", "metadata": {"name": name, "namespace": "default",
                   "finalizers": ["f"]}})
        };
        let mut s = store_with_pdb(json!(1));
        s.create(machine("a", "v1beta1"), NOW).unwrap();
        s.create(machine("b", "v1beta2"), NOW).unwrap();
        let stored = |s: &ClusterStore| {
            s.versions_stored()
                .map(|(g, v, k)| format!("{g}/{v}/{k}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            stored(&s),
            [
                "/v1/Pod",
                "infrastructure.cluster.x-k8s.io/v1beta1/DockerMachine",
                "infrastructure.cluster.x-k8s.io/v1beta2/DockerMachine",
                "policy/v1/PodDisruptionBudget"
            ]
        );
        // Deleting with a finalizer keeps the object; losing the finalizer removes it.
        let a = ObjKey::new(
            "infrastructure.cluster.x-k8s.io",
            "DockerMachine",
            "default",
            "a",
        );
        s.delete(&a, NOW).unwrap();
        assert_eq!(stored(&s).len(), 4);
        s.patch(&a, &json!({"metadata": {"finalizers": null}}), Part::Main)
            .unwrap();
        assert!(s.get(&a).is_none());
        s.apply(machine("b", "v1beta1"), NOW).unwrap();
        for pod in ["web-0", "web-1", "web-2"] {
            s.remove(&ObjKey::new("", "Pod", "app", pod));
        }
        assert_eq!(
            stored(&s),
            [
                "infrastructure.cluster.x-k8s.io/v1beta1/DockerMachine",
                "policy/v1/PodDisruptionBudget"
            ]
        );
    }

    /// A reading a list made is handed over once to a watch event of that same object, never
    /// to one of an older state; with none made, the receiver reads the object itself.
    #[test]
    fn a_reading_is_handed_over_once_and_only_for_its_version() {
        let mut s = store_with_pdb(json!(1));
        let pod = ObjKey::new("", "Pod", "app", "web-0");
        let now = s.get(&pod).unwrap().clone();
        assert_eq!(s.take_reading(&pod, &now), None, "nothing read yet");
        let listed = s.iter_read(|k| *k == pod).next().unwrap().2.clone();
        let older = now.clone();
        s.patch(
            &pod,
            &json!({"metadata": {"labels": {"a": "b"}}}),
            Part::Main,
        )
        .unwrap();
        let _ = s.iter_read(|k| *k == pod).count();
        assert_eq!(s.take_reading(&pod, &older), None, "not an older state's");
        let now = s.get(&pod).unwrap().clone();
        let taken = *s.take_reading(&pod, &now).expect("the list's reading");
        assert_eq!(taken, engine::convert::object_from_json(&now));
        assert_ne!(taken, listed);
        assert_eq!(s.take_reading(&pod, &now), None, "handed over once");
        let _ = s.iter_read(|k| *k == pod).count();
        let listed = s.list_handed("", "Pod");
        let web0 = listed.iter().find(|(v, _)| **v == now).expect("listed");
        assert_eq!(
            web0.1.as_deref(),
            Some(&taken),
            "the reading the first list made"
        );
        assert!(
            listed
                .iter()
                .filter(|(v, _)| **v != now)
                .all(|(_, r)| r.is_none()),
            "the others were never read"
        );
        assert!(
            s.list_handed("", "Pod").iter().all(|(_, r)| r.is_none()),
            "a list hands it over once too"
        );
    }

    /// A last list owns what it reads: the reading a list made is taken, any other is made,
    /// and none is left behind.
    #[test]
    fn a_last_list_takes_the_readings_and_keeps_none() {
        let mut s = store_with_pdb(json!(1));
        let pod = ObjKey::new("", "Pod", "app", "web-0");
        let made = s.iter_read(|k| *k == pod).next().unwrap().2.clone();
        let owned: Vec<_> = s
            .read_owned(|k| k.kind == "Pod")
            .map(|(k, v, r)| (k.clone(), v.clone(), r))
            .collect();
        assert_eq!(owned.len(), 3);
        for (key, value, read) in &owned {
            assert_eq!(*read, engine::convert::object_from_json(value), "{key}");
        }
        assert_eq!(owned.iter().find(|(k, ..)| *k == pod).unwrap().2, made);
        let now = s.get(&pod).unwrap().clone();
        assert_eq!(s.take_reading(&pod, &now), None, "none kept");
    }

    /// A write's answer, a list and the stored object are one JSON, shared and not copied;
    /// the next write stores a new one and leaves what was handed out as it was.
    #[test]
    fn what_a_write_and_a_list_hand_out_is_the_stored_object_itself() {
        let mut s = store_with_pdb(json!(1));
        let pod = ObjKey::new("", "Pod", "app", "web-0");
        let labels = json!({"metadata": {"labels": {"a": "b"}}});
        let written = s.patch(&pod, &labels, Part::Main).unwrap().object.unwrap();
        let stored = s.get_shared(&pod).unwrap().clone();
        assert!(std::sync::Arc::ptr_eq(&written, &stored), "the answer");
        let listed = s.list_handed("", "Pod");
        let web0 = listed.iter().find(|(v, _)| **v == *written).unwrap();
        assert!(std::sync::Arc::ptr_eq(&web0.0, &stored), "the list");
        let relabel = json!({"metadata": {"labels": {"a": "c"}}});
        s.patch(&pod, &relabel, Part::Main).unwrap();
        assert_eq!(json::str_at(&written, "metadata.labels.a"), Some("b"));
        assert_eq!(
            json::str_at(s.get(&pod).unwrap(), "metadata.labels.a"),
            Some("c")
        );
    }

    /// What the engine reads of an object is converted once and follows every write: a
    /// reading kept across a write would feed the differential a stale world.
    #[test]
    fn the_reading_of_an_object_follows_its_writes() {
        let mut s = store_with_pdb(json!(1));
        let pod = ObjKey::new("", "Pod", "app", "web-0");
        let ready = |s: &ClusterStore| {
            let (_, value, read) = s.iter_read(|k| *k == pod).next().unwrap();
            assert_eq!(read, &engine::convert::object_from_json(value));
            match read {
                Ok(Some(engine::model::Object::Pod(p))) => p.ready,
                other => panic!("{other:?}"),
            }
        };
        assert!(ready(&s));
        let before = s.get(&pod).unwrap().clone();
        s.patch(
            &pod,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            Part::Status,
        )
        .unwrap();
        assert!(!ready(&s), "the write's reading, not the first one");
        // A watch event still carrying the object as it was is not given the new reading.
        assert_eq!(s.reading_of(&pod, &before), None);
        let now = s.get(&pod).unwrap();
        assert_eq!(
            s.reading_of(&pod, now),
            Some(&engine::convert::object_from_json(now))
        );
        s.patch(&pod, &json!({"spec": {"nodeName": 7}}), Part::Whole)
            .unwrap();
        let (_, _, read) = s.iter_read(|k| *k == pod).next().unwrap();
        assert!(read.is_err(), "an unreadable write reads as unreadable");
    }

    #[test]
    fn eviction_refused_by_pdb_answers_429_with_the_budget_cause() {
        let mut s = store_with_pdb(json!(3));
        let key = ObjKey::new("", "Pod", "app", "web-0");
        let err = eviction::evict(&mut s, &key, None, NOW).err().unwrap();
        assert_eq!(
            err,
            ApiError::TooManyRequests {
                message: PDB_VIOLATION.to_string(),
                causes: vec![
                    "The disruption budget web needs 3 healthy pods and has 3 currently".into()
                ],
            }
        );
        assert_eq!(err.code(), 429);
        assert!(
            !json::is_deleting(s.get(&key).unwrap()),
            "a refused eviction changes nothing"
        );
    }

    #[test]
    fn eviction_allowed_by_pdb_marks_the_pod_deleting() {
        let mut s = store_with_pdb(json!("50%"));
        let key = ObjKey::new("", "Pod", "app", "web-0");
        assert!(eviction::evict(&mut s, &key, None, NOW).is_ok());
        let pod = s.get(&key).unwrap();
        assert!(json::is_deleting(pod));
        assert_eq!(
            pod.at_pointer("/metadata/deletionGracePeriodSeconds"),
            Some(&json!(30))
        );
        // 2 of 3 healthy left, 50% of 3 rounds up to 2: no more disruptions allowed.
        let second = ObjKey::new("", "Pod", "app", "web-1");
        assert!(matches!(
            eviction::evict(&mut s, &second, None, NOW),
            Err(ApiError::TooManyRequests { .. })
        ));
    }

    #[test]
    fn eviction_in_a_terminating_namespace_is_forbidden() {
        let mut s = ClusterStore::new("c1");
        s.create(web_pod("web-0", true), NOW).unwrap();
        s.create(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"},
                   "status": {"phase": "Terminating"}}),
            NOW,
        )
        .unwrap();
        let err = eviction::evict(&mut s, &ObjKey::new("", "Pod", "app", "web-0"), None, NOW)
            .err()
            .unwrap();
        assert!(matches!(
            err,
            ApiError::Forbidden {
                namespace_terminating: true,
                ..
            }
        ));
        assert_eq!(err.code(), 403);
    }

    #[test]
    fn eviction_of_a_missing_pod_is_404() {
        let mut s = ClusterStore::new("c1");
        let err = eviction::evict(&mut s, &ObjKey::new("", "Pod", "app", "nope"), None, NOW)
            .err()
            .unwrap();
        assert_eq!(err.code(), 404);
    }

    #[test]
    fn finished_pods_bypass_the_pdb() {
        let mut s = store_with_pdb(json!(3));
        let key = ObjKey::new("", "Pod", "app", "web-0");
        s.patch(
            &key,
            &json!({"status": {"phase": "Succeeded"}}),
            Part::Whole,
        )
        .unwrap();
        assert!(eviction::evict(&mut s, &key, None, NOW).is_ok());
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let mut s = ClusterStore::new("m");
        s.create(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                   "metadata": {"name": "m1", "namespace": "default", "finalizers": ["x"]}}),
            NOW,
        )
        .unwrap();
        let key = ObjKey::new("cluster.x-k8s.io", "Machine", "default", "m1");
        let w = s.delete(&key, NOW).unwrap();
        assert!(json::is_deleting(w.object.as_ref().unwrap()));
        let err = s
            .patch(
                &key,
                &json!({"metadata": {"finalizers": ["x", "y"]}}),
                Part::Main,
            )
            .err()
            .unwrap();
        assert_eq!(err.code(), 422);
        let w = s
            .patch(&key, &json!({"metadata": {"finalizers": null}}), Part::Main)
            .unwrap();
        assert!(w.object.is_none());
        assert!(s.get(&key).is_none());
    }

    #[test]
    fn status_subresource_writes_only_status() {
        let mut s = ClusterStore::new("m");
        s.create(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}}),
            NOW,
        )
        .unwrap();
        let key = ObjKey::new("", "Node", "", "n1");
        s.patch(
            &key,
            &json!({"spec": {"unschedulable": true}, "status": {"x": 1}}),
            Part::Status,
        )
        .unwrap();
        let n = s.get(&key).unwrap();
        assert_eq!(n.at_pointer("/status/x"), Some(&json!(1)));
        assert_eq!(n.at_pointer("/spec/unschedulable"), None);
        s.patch(
            &key,
            &json!({"spec": {"unschedulable": true}, "status": {"x": 2}}),
            Part::Main,
        )
        .unwrap();
        let n = s.get(&key).unwrap();
        assert_eq!(n.at_pointer("/status/x"), Some(&json!(1)));
        assert_eq!(n.at_pointer("/spec/unschedulable"), Some(&json!(true)));
        assert_eq!(n.at_pointer("/metadata/generation"), Some(&json!(2)));
    }

    #[test]
    fn change_log_reports_writes_in_order_and_expires_old_versions() {
        let mut s = ClusterStore::new("m");
        s.create(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "early"}}),
            NOW,
        )
        .unwrap();
        assert!(s.changes_since(0).is_err(), "the log is off by default");
        s.record_changes(3);
        let start = s.resource_version();
        assert!(
            s.changes_since(start - 1).is_err(),
            "writes before the log are unknown"
        );
        let key = ObjKey::new("", "Node", "", "n1");
        s.create(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
            NOW,
        )
        .unwrap();
        s.patch(&key, &json!({"spec": {"unschedulable": true}}), Part::Main)
            .unwrap();
        s.delete(&key, NOW).unwrap();
        let seen: Vec<(ChangeType, String)> = s
            .changes_since(start)
            .unwrap()
            .map(|c| {
                (
                    c.type_,
                    json::str_at(&c.object, "metadata.resourceVersion")
                        .unwrap()
                        .to_string(),
                )
            })
            .collect();
        let rv = |d: u64| (start + d).to_string();
        assert_eq!(
            seen,
            vec![
                (ChangeType::Added, rv(1)),
                (ChangeType::Modified, rv(2)),
                (ChangeType::Deleted, rv(3)),
            ]
        );
        assert_eq!(s.changes_since(start + 2).unwrap().count(), 1);
        // A fourth write drops the oldest: a watch from `start` is now too old.
        s.create(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}),
            NOW,
        )
        .unwrap();
        assert_eq!(
            s.changes_since(start).err(),
            Some(TooOld {
                requested: start,
                compacted: start + 1
            })
        );
        s.compact_changes();
        assert!(s.changes_since(start + 3).is_err());
        assert_eq!(s.changes_since(s.resource_version()).unwrap().count(), 0);
    }
}
