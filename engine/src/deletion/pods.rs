//! The classified pods of a draining Machine's Node, kept between passes: a pass then costs a
//! key comparison per unchanged pod instead of a store lookup and a classification.
//!
//! Guarantees: [`NodePods::sync`] returns exactly what classifying every pod on the Node now
//! would. A pod's classification depends on the pod, known unchanged while the store's change
//! number for it ([`Store::pods_on_node_versions`]) is the one recorded; and on what the
//! filters read besides the pod: the MachineDrainRules that apply (compared by value with the
//! ones the entries were made with) and the Namespaces (any change to one, as the store counts
//! it, [`Store::namespaces_changed_at`]; either drops every entry),
//! DaemonSets (a pod with a DaemonSet controller is classified on every pass), and the clock
//! (read only with a skip threshold, on an unreachable Node: then every pod is classified on
//! every pass).

use crate::drain::{self, DrainContext, PodDeleteStatus};
use crate::model::{MachineDrainRule, Object, ObjectKey, Pod, Scope};
use crate::store::Store;
use crate::time::Timestamp;
use std::cmp::Ordering;

/// One pod on the Node, as the drain plan needs it.
#[derive(Clone, Debug)]
pub struct CachedPod {
    pub key: ObjectKey,
    pub deletion_timestamp: Option<Timestamp>,
    pub status: PodDeleteStatus,
    /// The store's change number of the pod when it was classified.
    version: u64,
    /// Classified with something that can change while the pod does not (a DaemonSet, the
    /// clock).
    volatile: bool,
}

/// The pods of one Node with their classifications, in key order.
#[derive(Clone, Debug, Default)]
pub struct NodePods {
    /// What the entries were classified with, besides the pods.
    rules: Vec<MachineDrainRule>,
    /// [`Store::namespaces_changed_at`] when the entries were classified.
    namespaces_changed_at: u64,
    pods: Vec<CachedPod>,
}

/// A [`NodePods`] kept in a deletion's memory without being state: not serialized (a decoded
/// engine rebuilds it on its first pass) and equal to any other (it never changes what a pass
/// does, only what it costs). So replay equality cannot see it drift: debug builds check each
/// [`NodePods::sync`] against a classification from scratch instead, which also checks the
/// store's Namespace change numbers it relies on.
#[derive(Clone, Debug, Default)]
pub struct PodCache(pub NodePods);

impl PartialEq for PodCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PodCache {}

impl NodePods {
    /// Brings the entries up to date with the pods bound to `node` and returns them.
    /// `dcx` must have been made with `rules`.
    pub fn sync(
        &mut self,
        store: &Store,
        scope: &Scope,
        node: &str,
        dcx: &DrainContext<'_>,
        rules: &[&MachineDrainRule],
    ) -> &[CachedPod] {
        self.update(store, scope, node, dcx, rules);
        debug_assert!(
            self.drift(store, scope, node, dcx).is_none(),
            "pod cache of Node {node} drifted: {}",
            self.drift(store, scope, node, dcx).unwrap_or_default()
        );
        &self.pods
    }

    /// The first entry that differs from classifying every pod on `node` now, if any.
    fn drift(
        &self,
        store: &Store,
        scope: &Scope,
        node: &str,
        dcx: &DrainContext<'_>,
    ) -> Option<String> {
        let mut fresh = store
            .pods_on_node(scope, node)
            .filter_map(|k| match store.get(k) {
                Some(Object::Pod(p)) => {
                    Some((k, p.meta.deletion_timestamp, drain::classify(p, dcx)))
                }
                _ => None,
            });
        let mut kept = self.pods.iter();
        loop {
            match (kept.next(), fresh.next()) {
                (None, None) => return None,
                (Some(c), Some((key, deletion_timestamp, status)))
                    if c.key == *key
                        && c.deletion_timestamp == deletion_timestamp
                        && c.status == status => {}
                (c, f) => {
                    return Some(format!(
                        "kept {:?}, now {:?}",
                        c.map(|c| (&c.key, c.deletion_timestamp, &c.status)),
                        f
                    ));
                }
            }
        }
    }

    fn update(
        &mut self,
        store: &Store,
        scope: &Scope,
        node: &str,
        dcx: &DrainContext<'_>,
        rules: &[&MachineDrainRule],
    ) {
        let namespaces_changed_at = store.namespaces_changed_at(scope);
        let same_context = self.rules.iter().eq(rules.iter().copied())
            && self.namespaces_changed_at == namespaces_changed_at;
        if !same_context {
            self.rules = rules.iter().map(|r| (*r).clone()).collect();
            self.namespaces_changed_at = namespaces_changed_at;
            self.pods.clear();
        }
        let clock = dcx.skip_wait_for_delete_timeout_seconds > 0;
        let classified = |key: &ObjectKey, version: u64| match store.get(key) {
            Some(Object::Pod(pod)) => Some(CachedPod {
                key: key.clone(),
                deletion_timestamp: pod.meta.deletion_timestamp,
                status: drain::classify(pod, dcx),
                version,
                volatile: clock || reads_daemon_set(pod),
            }),
            _ => None,
        };
        // Entries are updated in place, walking them with the store's index (both in key
        // order); pods new to the Node are collected and merged in after the walk.
        let mut on_node = store.pods_on_node_versions(scope, node).peekable();
        let mut added = Vec::new();
        self.pods.retain_mut(|entry| {
            while let Some((key, version)) = on_node.peek().copied() {
                match key.cmp(&entry.key) {
                    Ordering::Less => {
                        added.extend(classified(key, version));
                        on_node.next();
                    }
                    Ordering::Equal => {
                        on_node.next();
                        if entry.version == version && !entry.volatile && !clock {
                            return true;
                        }
                        return match classified(key, version) {
                            Some(fresh) => {
                                *entry = fresh;
                                true
                            }
                            None => false,
                        };
                    }
                    // The entry's pod left the Node.
                    Ordering::Greater => return false,
                }
            }
            false
        });
        added.extend(on_node.filter_map(|(key, version)| classified(key, version)));
        if !added.is_empty() {
            self.pods.append(&mut added);
            self.pods.sort_by(|a, b| a.key.cmp(&b.key));
        }
    }
}

/// Whether classifying `pod` looks its DaemonSet up in the store.
fn reads_daemon_set(pod: &Pod) -> bool {
    pod.meta.controller().is_some_and(|o| o.kind == "DaemonSet")
}

impl crate::drain::PodFacts for CachedPod {
    fn key(&self) -> &ObjectKey {
        &self.key
    }
    fn deletion_timestamp(&self) -> Option<Timestamp> {
        self.deletion_timestamp
    }
    fn status(&self) -> &crate::drain::PodDeleteStatus {
        &self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DaemonSet, LabelSelector, OwnerReference, PodSelectorEntry};
    use crate::testing::{labels, meta, namespace, pod, workload};

    const NOW: Timestamp = Timestamp(1_000_000);

    struct World {
        store: Store,
        scope: Scope,
        rules: Vec<MachineDrainRule>,
        cache: NodePods,
        rv: u64,
    }

    impl World {
        fn new() -> World {
            let mut w = World {
                store: Store::default(),
                scope: workload("c1"),
                rules: Vec::new(),
                cache: NodePods::default(),
                rv: 1,
            };
            w.put(Object::Namespace(namespace("app")));
            w
        }

        fn put(&mut self, mut object: Object) {
            self.rv += 1;
            match &mut object {
                Object::Pod(p) => p.meta.resource_version = self.rv,
                Object::Namespace(n) => n.meta.resource_version = self.rv,
                _ => {}
            }
            self.store.upsert(&self.scope, object);
        }

        /// Syncs the cache with `skip_seconds` and checks it against a full classification.
        fn check(&mut self, skip_seconds: i64) {
            let rules: Vec<&MachineDrainRule> = self.rules.iter().collect();
            let dcx = DrainContext::new(&self.store, &self.scope, NOW, skip_seconds, &rules);
            let got: Vec<_> = self
                .cache
                .sync(&self.store, &self.scope, "n1", &dcx, &rules)
                .iter()
                .map(|c| (c.key.clone(), c.deletion_timestamp, c.status.clone()))
                .collect();
            let want: Vec<_> = self
                .store
                .pods_on_node(&self.scope, "n1")
                .map(|k| match self.store.get(k) {
                    Some(Object::Pod(p)) => (
                        k.clone(),
                        p.meta.deletion_timestamp,
                        drain::classify(p, &dcx),
                    ),
                    other => panic!("not a pod: {other:?}"),
                })
                .collect();
            assert_eq!(got, want);
        }
    }

    fn ds_pod(name: &str) -> Pod {
        let mut p = pod("app", name, "n1");
        p.meta.owner_references = vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "ds".into(),
            uid: "u".into(),
            controller: true,
        }];
        p
    }

    /// A kept classification that no longer matches its pod (a missed invalidation) stops a
    /// debug build at the sync that would have used it.
    #[test]
    #[should_panic(expected = "pod cache of Node n1 drifted: kept")]
    fn a_stale_classification_is_caught_by_the_sync() {
        let mut w = World::new();
        w.put(Object::Pod(pod("app", "a", "n1")));
        w.check(0);
        w.cache.pods[0].status.behavior = drain::DrainBehavior::Skip;
        w.check(0);
    }

    /// Every change a classification depends on is seen, whether or not the pod changes.
    #[test]
    fn sync_equals_classifying_every_pod_again() {
        let mut w = World::new();
        for name in ["a", "b", "c"] {
            w.put(Object::Pod(pod("app", name, "n1")));
        }
        w.put(Object::Pod(ds_pod("d")));
        w.put(Object::Pod(pod("app", "elsewhere", "n2")));
        w.check(0);
        w.check(0);

        // The pod changes: a label, then a deletionTimestamp.
        let mut b = pod("app", "b", "n1");
        b.meta.labels = labels(&[(crate::model::DRAIN_LABEL, "skip")]);
        w.put(Object::Pod(b.clone()));
        w.check(0);
        b.meta.deletion_timestamp = Some(Timestamp(NOW.0 - 5_000));
        w.put(Object::Pod(b));
        w.check(0);

        // The clock: with a skip threshold a deleted pod is skipped without changing.
        let mut c = pod("app", "c", "n1");
        c.meta.deletion_timestamp = Some(Timestamp(NOW.0 - 5_000));
        w.put(Object::Pod(c));
        w.check(0);
        w.check(1);
        w.check(0);

        // A DaemonSet appears: its pod is skipped without changing.
        w.put(Object::DaemonSet(DaemonSet {
            meta: meta("app", "ds"),
        }));
        w.check(0);

        // A rule, then a Namespace label its namespace selector matches.
        let mut rule = MachineDrainRule {
            meta: meta("default", "r"),
            behavior: "WaitCompleted".into(),
            order: None,
            machines: vec![],
            pods: vec![PodSelectorEntry {
                selector: None,
                namespace_selector: Some(LabelSelector {
                    match_labels: labels(&[("tier", "db")]),
                    ..Default::default()
                }),
            }],
        };
        w.rules = vec![rule.clone()];
        w.check(0);
        let mut ns = namespace("app");
        ns.meta.labels = labels(&[("tier", "db")]);
        w.put(Object::Namespace(ns));
        w.check(0);
        rule.behavior = "Skip".into();
        w.rules = vec![rule];
        w.check(0);

        // Pods come, go, and move to another Node.
        w.put(Object::Pod(pod("app", "0-first", "n1")));
        w.check(0);
        w.store.remove(&ObjectKey::new(
            w.scope.clone(),
            crate::model::Kind::Pod,
            "app",
            "a",
        ));
        w.check(0);
        w.put(Object::Pod(pod("app", "c", "n2")));
        w.check(0);
        w.put(Object::Pod(pod("app", "elsewhere", "n1")));
        w.check(0);

        // A relist that brings an older version back is a change too.
        let objects: Vec<Object> = w
            .store
            .iter_scope(&w.scope)
            .map(|(_, o)| o.clone())
            .collect();
        let mut older = objects.clone();
        for o in &mut older {
            if let Object::Pod(p) = o
                && p.meta.name == "elsewhere"
            {
                p.meta.labels = labels(&[(crate::model::DRAIN_LABEL, "skip")]);
            }
        }
        w.store.replace_scope(&w.scope, older);
        w.check(0);
        w.store.replace_scope(&w.scope, objects);
        w.check(0);
    }
}
