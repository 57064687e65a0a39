//! The MachinePool controller (`engine/docs/capi.md` §3 with decisions 5, 6, 9 and 10).
//!
//! Expected flow: every change to a pool, its Cluster, its BootstrapConfig or
//! InfrastructureMachinePool, its infrastructure machines and Machines, or a workload Node it
//! lists makes [`Pools::affected`] name the pool; [`Pools::reconcile`] then computes the whole
//! desired pool (owner references, bootstrap data secret, providerIDList, nodeRefs, counters,
//! phase, conditions, MachinePool Machines, deletion) and issues only what differs from what is
//! observed.
//! Guarantees: reconciling twice with nothing changed issues nothing; Node changes wake the pool
//! (no 30 s polling); a timer only covers `minReadySeconds` expiry and Node deletion retries.

mod checks;
mod conditions;
mod deletion;
mod draft;
mod machines;
mod noderefs;
mod nodes;
mod ownership;
mod phase;
mod provider;
mod reconcile;
mod replicas;
mod status;
mod teardown;
mod unreadable;

#[cfg(test)]
mod tests;

pub use crate::node_deletion::NODE_DELETION_TIMEOUT_DEFAULT;
pub use deletion::{NODE_DELETION_RETRY_WINDOW, POOL_NODE_DELETION_RETRY_INTERVAL};
pub use machines::machine_pool_machine;
pub use phase::PoolPhase;

use crate::command::{Action, Command, ControllerId};
use crate::controller::{Controller, Cx, Issued};
use crate::decision::Decision;
use crate::input::ApiOutcome;
use crate::model::{Kind, MachinePool, Object, ObjectKey, POOL_NAME_LABEL, Scope};
use crate::store::{Change, Store};
use crate::time::Timestamp;
use crate::timer::{FiredTimer, TimerKind, TimerTable};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Why a pool asked to be woken (the closed set of pool timers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PoolWake {
    /// A ready Node becomes available when `minReadySeconds` have passed.
    MinReadySeconds,
    /// A failed Node deletion may be retried.
    NodeDeletionRetry,
}

impl TimerKind for PoolWake {
    fn name(self) -> &'static str {
        match self {
            PoolWake::MinReadySeconds => "MinReadySeconds",
            PoolWake::NodeDeletionRetry => "NodeDeletionRetry",
        }
    }

    fn controller(self) -> ControllerId {
        ControllerId::Pool
    }
}

/// What the pool controller remembers about one Node it deletes (the Machine controller's
/// record, [`crate::deletion::NodeDeletion`], keeps each attempt's outcome instead: upstream's
/// two controllers pace and give up differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolNodeDeletion {
    /// An attempt was queued and no failure has come back since (its answer may be lost).
    Requested { first_try: Timestamp },
    /// The last attempt failed: the next one waits until `retry_not_before`.
    Failed {
        first_try: Timestamp,
        retry_not_before: Timestamp,
    },
    /// The API answered 2xx or 404.
    Deleted { first_try: Timestamp },
}

impl PoolNodeDeletion {
    /// The record after an attempt is queued at `now`, given the record before it, if any.
    pub fn queued(previous: Option<Self>, now: Timestamp) -> Self {
        match previous {
            None => PoolNodeDeletion::Requested { first_try: now },
            Some(PoolNodeDeletion::Deleted { first_try }) => {
                PoolNodeDeletion::Deleted { first_try }
            }
            Some(
                PoolNodeDeletion::Requested { first_try }
                | PoolNodeDeletion::Failed { first_try, .. },
            ) => PoolNodeDeletion::Requested { first_try },
        }
    }

    /// The API answered 2xx or 404.
    pub fn succeeded(&mut self) {
        *self = PoolNodeDeletion::Deleted {
            first_try: self.first_try(),
        };
    }

    /// An attempt failed: retry at `retry_not_before`. A Node already deleted stays so.
    pub fn failed(&mut self, retry_not_before: Timestamp) {
        if let PoolNodeDeletion::Requested { first_try }
        | PoolNodeDeletion::Failed { first_try, .. } = *self
        {
            *self = PoolNodeDeletion::Failed {
                first_try,
                retry_not_before,
            };
        }
    }

    pub fn first_try(&self) -> Timestamp {
        match *self {
            PoolNodeDeletion::Requested { first_try }
            | PoolNodeDeletion::Failed { first_try, .. }
            | PoolNodeDeletion::Deleted { first_try } => first_try,
        }
    }

    /// After a failed attempt: not before this.
    pub fn retry_not_before(&self) -> Option<Timestamp> {
        match *self {
            PoolNodeDeletion::Failed {
                retry_not_before, ..
            } => Some(retry_not_before),
            PoolNodeDeletion::Requested { .. } | PoolNodeDeletion::Deleted { .. } => None,
        }
    }

    pub fn is_deleted(&self) -> bool {
        matches!(self, PoolNodeDeletion::Deleted { .. })
    }
}

/// The controller's own memory of one pool (everything else is read from the store).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolMemory {
    /// Hash of the nodeRefs last announced with `SuccessfulSetNodeRefs`, so the event is
    /// emitted once per change even while the status patch is on its way.
    pub announced_node_refs: Option<u64>,
    pub node_deletions: BTreeMap<String, PoolNodeDeletion>,
    /// Provider objects whose deletion the API accepted, so the delete is not repeated while
    /// the watch catches up.
    pub deleted_externals: BTreeSet<ObjectKey>,
    /// The finalizer removal was accepted: the pool is on its way out and a cache that still
    /// shows it must not trigger the removal again.
    pub finalizer_released: bool,
    /// The last reconcile could not match Nodes because the workload cache was not synced:
    /// any Node of that cluster wakes the pool.
    pub awaiting_workload_cache: bool,
    /// The object the pool last waited for because it cannot be read, and the problem (its
    /// Warning event is recorded once per problem).
    pub unreadable: Option<(ObjectKey, String)>,
}

/// Whether the workload cache holds Node `name`, or knows it exists but cannot read it.
fn node_known(store: &Store, workload: &Scope, name: &str) -> bool {
    store.get_parts(workload, &Kind::Node, "", name).is_some()
        || store.has_unreadable()
            && store
                .unreadable(&ObjectKey::new(workload.clone(), Kind::Node, "", name))
                .is_some()
}

/// The MachinePool controller (registry slot 2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pools {
    timers: TimerTable<PoolWake>,
    memory: BTreeMap<ObjectKey, PoolMemory>,
}

impl Pools {
    pub fn memory(&self, pool: &ObjectKey) -> Option<&PoolMemory> {
        self.memory.get(pool)
    }

    /// The pools of `namespace` whose pool-name label value is `label`: the pool of that name,
    /// or, for a hashed value (a name too long for a label), the pools whose names hash to it.
    fn pools_labelled(store: &Store, namespace: &str, label: &str, out: &mut Vec<ObjectKey>) {
        if !label.starts_with("hash_") {
            out.push(ObjectKey::management(Kind::MachinePool, namespace, label));
            return;
        }
        out.extend(
            store
                .iter_kind(&Scope::Management, &Kind::MachinePool)
                .filter(|(k, _)| {
                    k.namespace == namespace && crate::model::format_label_value(&k.name) == label
                })
                .map(|(k, _)| k.clone()),
        );
    }

    fn pools_of_cluster<'a>(
        store: &'a Store,
        namespace: &'a str,
        cluster: &'a str,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a MachinePool)> + 'a {
        store
            .iter_kind(&Scope::Management, &Kind::MachinePool)
            .filter_map(|(k, o)| match o {
                Object::MachinePool(mp) => Some((k, mp)),
                _ => None,
            })
            .filter(move |(_, mp)| mp.meta.namespace == namespace && mp.cluster_name == cluster)
    }

    fn affected_by(
        &self,
        store: &Store,
        key: &ObjectKey,
        object: &Object,
        out: &mut Vec<ObjectKey>,
    ) {
        let pool_key = |ns: &str, name: &str| ObjectKey::management(Kind::MachinePool, ns, name);
        match object {
            Object::MachinePool(_) => out.push(key.clone()),
            Object::Cluster(c) if key.scope == Scope::Management => {
                out.extend(
                    Self::pools_of_cluster(store, &c.meta.namespace, &c.meta.name)
                        .map(|(k, _)| k.clone()),
                );
            }
            Object::External(e) if key.scope == Scope::Management => {
                // Infrastructure machines of a pool carry its name.
                if let Some(label) = e.meta.labels.get(POOL_NAME_LABEL) {
                    Self::pools_labelled(store, &e.meta.namespace, label, out);
                }
                let matches = |r: &crate::model::ObjectRef, ns: &str| &r.key_in(ns) == key;
                for (k, o) in store.iter_kind(&Scope::Management, &Kind::MachinePool) {
                    let Object::MachinePool(mp) = o else { continue };
                    let ns = &mp.meta.namespace;
                    if matches(&mp.infrastructure_ref, ns)
                        || mp
                            .bootstrap_config_ref
                            .as_ref()
                            .is_some_and(|r| matches(r, ns))
                    {
                        out.push(k.clone());
                    }
                }
            }
            Object::Machine(m) => {
                if let Some(label) = m.meta.labels.get(POOL_NAME_LABEL) {
                    Self::pools_labelled(store, &m.meta.namespace, label, out);
                }
            }
            Object::Node(n) => {
                let Scope::Workload(cluster) = &key.scope else {
                    return;
                };
                // A Node the pool annotated names its pool; others are matched by providerID
                // or by the pool's nodeRefs.
                let a = &n.meta.annotations;
                if a.get(noderefs::OWNER_KIND_ANNOTATION).map(String::as_str) == Some("MachinePool")
                    && a.get(noderefs::CLUSTER_NAMESPACE_ANNOTATION)
                        .map(String::as_str)
                        == Some(cluster.namespace.as_str())
                    && let Some(owner) = a.get(noderefs::OWNER_NAME_ANNOTATION)
                {
                    out.push(pool_key(&cluster.namespace, owner));
                    return;
                }
                let pid = n.provider_id.as_deref().filter(|p| !p.is_empty());
                for (k, mp) in Self::pools_of_cluster(store, &cluster.namespace, &cluster.name) {
                    let listed = pid.is_some_and(|p| mp.provider_id_list.iter().any(|x| x == p));
                    let waiting = self
                        .memory
                        .get(k)
                        .is_some_and(|m| m.awaiting_workload_cache);
                    if waiting
                        || listed
                        || mp.status.node_refs.iter().any(|r| r.name == n.meta.name)
                    {
                        out.push(k.clone());
                    }
                }
            }
            _ => {}
        }
    }

    /// Pools that could not match Nodes until `scope`'s cache synced.
    fn waiting_for(&self, store: &Store, scope: &Scope, out: &mut Vec<ObjectKey>) {
        let Scope::Workload(cluster) = scope else {
            return;
        };
        for (k, _) in Self::pools_of_cluster(store, &cluster.namespace, &cluster.name) {
            if self
                .memory
                .get(k)
                .is_some_and(|m| m.awaiting_workload_cache)
            {
                out.push(k.clone());
            }
        }
    }
}

impl Controller for Pools {
    fn id(&self) -> ControllerId {
        ControllerId::Pool
    }

    fn on_synced(&self, store: &Store, scope: &Scope, out: &mut Vec<ObjectKey>) {
        self.waiting_for(store, scope, out);
    }

    /// Every pool of the cluster: any may wait on it (for its nodeRefs, or for the Nodes to
    /// delete at its deletion) and say why.
    fn on_reachability(&self, store: &Store, scope: &Scope, out: &mut Vec<ObjectKey>) {
        if let Scope::Workload(cluster) = scope {
            out.extend(
                Self::pools_of_cluster(store, &cluster.namespace, &cluster.name)
                    .map(|(k, _)| k.clone()),
            );
        }
    }

    fn affected(&self, store: &Store, change: &Change, out: &mut Vec<ObjectKey>) {
        for object in [change.before, change.after].into_iter().flatten() {
            self.affected_by(store, change.key, object, out);
        }
    }

    fn reconcile(&mut self, key: &ObjectKey, cx: &mut Cx<'_>) {
        self.check(key, cx.now);
        self.timers.cancel(key);
        let Some(mp) = cx.store.machine_pool(key) else {
            self.memory.remove(key);
            return;
        };
        let empty = PoolMemory::default();
        let memory = self.memory.get(key).unwrap_or(&empty);
        let workload = Scope::Workload(crate::model::ClusterName::new(
            &mp.meta.namespace,
            &mp.cluster_name,
        ));
        let mut plan = reconcile::reconcile(&reconcile::Ctx::new(
            cx.store, cx.now, key, mp, memory, &workload,
        ));
        let decided = plan.decided.take();
        cx.report(decided.unwrap_or_else(|| Decision::none(ControllerId::Pool, key.clone())));
        let now = cx.now;
        let mut memory = memory.clone();
        // A Node that is gone needs no memory of its deletion: an autoscaled pool retires
        // Nodes of new names for as long as it lives.
        memory
            .node_deletions
            .retain(|name, _| node_known(cx.store, &workload, name));
        // A provider object that is gone needs no memory of its deletion.
        memory
            .deleted_externals
            .retain(|k| cx.store.get(k).is_some());
        memory.awaiting_workload_cache = plan.awaiting_workload_cache;
        memory.unreadable = plan.unreadable.clone();
        if let Some(hash) = plan.announced_node_refs {
            memory.announced_node_refs = Some(hash);
        }
        let mut condition_queued = false;
        for planned in plan.commands {
            if planned.with_condition && !condition_queued {
                continue;
            }
            let is_condition = matches!(
                planned.action,
                Action::SetCondition { .. } | Action::SetOwnCondition { .. }
            );
            let issued = cx.issue(ControllerId::Pool, planned.action, planned.reason);
            if is_condition {
                condition_queued = matches!(issued, Issued::Queued(_));
            }
            if let (Some(node), Issued::Queued(_)) = (planned.node_deletion, issued) {
                let previous = memory.node_deletions.get(&node).copied();
                memory
                    .node_deletions
                    .insert(node, PoolNodeDeletion::queued(previous, now));
            }
        }
        for (why, at, about) in &plan.wakes {
            tracing::trace!(pool = %key, ?why, at = %at, "wake-up");
            self.timers.set(key, *why, *at, about.as_ref());
        }
        if memory == PoolMemory::default() {
            self.memory.remove(key);
        } else {
            self.memory.insert(key.clone(), memory);
        }
        self.check(key, now);
    }

    fn on_result(&mut self, command: &Command, outcome: &ApiOutcome, now: Timestamp) {
        if let Action::DeleteBootstrap { target } | Action::DeleteInfrastructure { target } =
            &command.action
        {
            if matches!(outcome, ApiOutcome::Ok { .. } | ApiOutcome::NotFound) {
                self.memory
                    .entry(command.owner.clone())
                    .or_default()
                    .deleted_externals
                    .insert(target.key.clone());
            }
            return;
        }
        if let Action::RemoveFinalizer { .. } = &command.action {
            if matches!(outcome, ApiOutcome::Ok { .. } | ApiOutcome::NotFound) {
                self.memory
                    .entry(command.owner.clone())
                    .or_default()
                    .finalizer_released = true;
            }
            return;
        }
        let Action::DeleteNode { node } = &command.action else {
            return;
        };
        let Some(attempt) = self
            .memory
            .get_mut(&command.owner)
            .and_then(|m| m.node_deletions.get_mut(node.key.name.as_str()))
        else {
            return;
        };
        match outcome {
            ApiOutcome::Ok { .. } | ApiOutcome::NotSent { .. } | ApiOutcome::NotFound => {
                attempt.succeeded();
            }
            ApiOutcome::Conflict { .. }
            | ApiOutcome::Refused { .. }
            | ApiOutcome::Error { .. }
            | ApiOutcome::Unreachable { .. } => {
                tracing::info!(
                    pool = %command.owner,
                    node = %node.key.name,
                    "Failed to delete Node: {}",
                    outcome.summary()
                );
                let at = now + POOL_NODE_DELETION_RETRY_INTERVAL;
                attempt.failed(at);
                self.timers.set(
                    &command.owner,
                    PoolWake::NodeDeletionRetry,
                    at,
                    Some(&node.key),
                );
            }
        }
        self.check(&command.owner, now);
    }

    fn take_due(&mut self, now: Timestamp, fired: &mut Vec<FiredTimer>) {
        self.timers.take_due(now, fired);
    }

    fn next_deadline(&self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }
}
