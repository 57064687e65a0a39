//! The fake API of every simulated cluster ([`FakeApi`]): one [`ClusterStore`] per cluster,
//! the scenario's names of the workload clusters, and indexes of Machines and
//! MachineHealthChecks by Cluster, so checks of one cluster do not walk the fleet.

use super::{ClusterStore, ObjKey, Written, json};
use engine::model::{ClusterName, Scope};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// `(namespace, clusterName)`.
type ClusterSlot = (String, String);

#[derive(Default)]
pub struct FakeApi {
    pub clusters: BTreeMap<Scope, ClusterStore>,
    /// The controller's Events, kept apart from the objects.
    pub events: super::events::EventLog,
    /// Workload cluster name (as the scenario writes it) → its scope.
    pub workloads: BTreeMap<String, Scope>,
    machines_by_cluster: BTreeMap<ClusterSlot, BTreeSet<ObjKey>>,
    /// By `spec.clusterName` when written (a later change of clusterName leaves a stale entry:
    /// readers check the object they find).
    mhcs_by_cluster: BTreeMap<ClusterSlot, BTreeSet<ObjKey>>,
}

impl FakeApi {
    /// Scope of a workload cluster named in the scenario.
    pub fn workload_scope(&self, cluster: &str) -> Scope {
        self.workloads
            .get(cluster)
            .cloned()
            .unwrap_or_else(|| Scope::Workload(ClusterName::new("default", cluster)))
    }

    /// Every workload scope plus the management one, management first.
    pub fn scopes(&self) -> Vec<Scope> {
        let mut v = vec![Scope::Management];
        v.extend(self.workloads.values().cloned());
        v
    }

    /// The first workload cluster (by name), or the management cluster when there is none.
    pub fn first_workload(&self) -> Scope {
        self.workloads
            .values()
            .next()
            .cloned()
            .unwrap_or(Scope::Management)
    }

    pub fn store(&self, scope: &Scope) -> Option<&ClusterStore> {
        self.clusters.get(scope)
    }

    /// The store of `scope`, when it has one.
    pub fn existing_store_mut(&mut self, scope: &Scope) -> Option<&mut ClusterStore> {
        self.clusters.get_mut(scope)
    }

    /// The store of `scope`, made empty on first use (the write path: no key built per call).
    pub fn store_mut(&mut self, scope: &Scope) -> &mut ClusterStore {
        if !self.clusters.contains_key(scope) {
            let prefix = match scope {
                Scope::Management => "mgmt",
                Scope::Workload(c) => c.name.as_str(),
            };
            let store = ClusterStore::new(prefix);
            self.clusters.insert(scope.clone(), store);
        }
        self.clusters.get_mut(scope).expect("inserted above")
    }

    pub fn get(&self, scope: &Scope, key: &ObjKey) -> Option<&Value> {
        self.clusters.get(scope).and_then(|s| s.get(key))
    }

    /// The object, shared (kept without copying its JSON).
    pub fn get_shared(&self, scope: &Scope, key: &ObjKey) -> Option<&std::sync::Arc<Value>> {
        self.clusters.get(scope).and_then(|s| s.get_shared(key))
    }

    /// Finds an object by a scenario reference (kind, name, namespace), any API group.
    pub fn find(
        &self,
        scope: &Scope,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<(ObjKey, &Value)> {
        let store = self.store(scope)?;
        let namespace = if super::store::is_cluster_scoped(kind) {
            ""
        } else {
            namespace
        };
        // Known kinds have one group: a direct lookup. Provider kinds may live in any group.
        let direct = ObjKey::new(super::default_group(kind), kind, namespace, name);
        if let Some(v) = store.get(&direct) {
            return Some((direct, v));
        }
        store
            .iter()
            .find(|(k, _)| k.kind == kind && k.namespace == namespace && k.name == name)
            .map(|(k, v)| (k.clone(), v))
    }

    /// Keeps the indexes in step with a write to the management cluster.
    pub fn index(&mut self, written: &Written) {
        let key = &written.key;
        if key.group != "cluster.x-k8s.io" {
            return;
        }
        let index = match key.kind.as_str() {
            "Machine" => &mut self.machines_by_cluster,
            "MachineHealthCheck" => &mut self.mhcs_by_cluster,
            _ => return,
        };
        let obj = written.object.as_ref().or(written.removed.as_ref());
        let cluster = obj
            .and_then(|o| json::str_at(o, "spec.clusterName"))
            .unwrap_or_default()
            .to_string();
        let slot = (key.namespace.to_string(), cluster);
        if written.object.is_some() {
            index.entry(slot).or_default().insert(key.clone());
        } else if let Some(set) = index.get_mut(&slot) {
            set.remove(key);
        }
    }

    /// The MachineHealthChecks whose `spec.clusterName` is `cluster`, in key order.
    pub fn mhcs_of(&self, namespace: &str, cluster: &str) -> Vec<&Value> {
        self.mhcs_by_cluster
            .get(&(namespace.to_string(), cluster.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|k| self.get(&Scope::Management, k))
            .filter(|mhc| json::str_at(mhc, "spec.clusterName") == Some(cluster))
            .collect()
    }

    /// The Machines of one Cluster.
    pub fn machines_of(&self, namespace: &str, cluster: &str) -> Vec<&Value> {
        self.machines_by_cluster
            .get(&(namespace.to_string(), cluster.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|k| self.get(&Scope::Management, k))
            .collect()
    }
}
