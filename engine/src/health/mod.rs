//! MachineHealthCheck (`engine/docs/capi.md` §2 with the product's decisions): select targets,
//! judge each against its Machine and Node conditions and timeouts, gate remediation on
//! `maxUnhealthy` / `unhealthyRange`, then remediate through the owner (conditions) or an
//! external remediation request. The MachineSet side of owner remediation is its own
//! controller ([`crate::remediation::OwnerRemediation`]).
//!
//! Expected flow: reconcile keys are MachineHealthChecks and Machines. A Machine key does no
//! work of its own: it marks that target dirty in every MHC that covers (or may now cover) it. Keys are reconciled in key order and Machine
//! sorts before MachineHealthCheck, so within one input every changed target is marked before its
//! MHC is reconciled; the MHC then re-judges only its dirty and due targets and decides on the
//! complete counts at one common `now`. A change to the MHC's spec, its Cluster's gates or its
//! remediation template invalidates every verdict and brings a full evaluation: each target is
//! judged again from a view of what its last verdict read of its Machine and Node
//! (`view.rs`), and read from the store only when it changed (is dirty), when the view cannot
//! settle it, or when the selector or checked condition types changed.
//! Guarantees: each MHC asks for the exact next deadline among its targets (`expiry + 1s`), so a
//! timeout is acted on within one second, and it keeps that clock while short-circuited
//! (decision 11). Reconciling with nothing changed issues nothing.
//!
//! Where things are: which Machines are targets in `targets`; what is remembered per MHC in
//! `memo`; judging in `judge` (one pass over the targets a reconcile looks at, each settled by
//! its view or read from the store) with the verdict in `verdict` and views in `view`; the
//! order of a reconcile and the gate decision in `reconcile` (the gate itself in `trigger`, the
//! spec's invalid fields in `spec`);
//! writes to the MHC in `status` and to its targets, remediation included, in `remediate`.

mod judge;
mod memo;
mod reconcile;
mod remediate;
pub mod spec;
mod status;
pub mod targets;
mod timers;
pub mod trigger;
pub mod verdict;
mod view;

use crate::command::{Action, Command, ControllerId};
use crate::controller::{Controller, Cx};
use crate::input::ApiOutcome;
use crate::model::{
    CLUSTER_NAME_LABEL, ClusterName, GroupKind, Kind, Machine, Object, ObjectKey, Scope,
};
use crate::store::{Change, Store};
use crate::time::{Duration, Timestamp};
use crate::timer::{FiredTimer, TimerTable};
use memo::MhcMemo;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
pub use timers::HealthTimer;

/// How long to wait before creating an external remediation request again after the API
/// refused one (upstream retries through the controller's error backoff).
pub const REMEDIATION_REQUEST_RETRY_INTERVAL: Duration = Duration::from_secs(10);

/// A workload-cluster Node, by cluster and name.
type NodeSlot = (ClusterName, String);

/// The MachineHealthChecks this controller knows, and the reverse indexes that let a Machine or
/// Node change find them in O(log n).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Encoded")]
pub struct HealthChecks {
    mhcs: BTreeMap<ObjectKey, MhcMemo>,
    index: TargetIndex,
    /// Per MHC: its earliest target deadline, or a look at an unsynced workload cache.
    timers: TimerTable<HealthTimer>,
    /// The MHCs waiting for each workload cluster's cache to sync (their memos'
    /// `waiting_for`), so that a workload change finds them without walking every MHC.
    /// Derived: not encoded, rebuilt when decoded.
    #[serde(skip)]
    waiting: BTreeMap<ClusterName, BTreeSet<ObjectKey>>,
}

/// The encoded form of [`HealthChecks`]: the same fields without the derived `waiting`.
#[derive(Deserialize)]
struct Encoded {
    mhcs: BTreeMap<ObjectKey, MhcMemo>,
    index: TargetIndex,
    timers: TimerTable<HealthTimer>,
}

impl From<Encoded> for HealthChecks {
    fn from(e: Encoded) -> HealthChecks {
        let mut waiting: BTreeMap<ClusterName, BTreeSet<ObjectKey>> = BTreeMap::new();
        for (key, memo) in &e.mhcs {
            if let Some(cluster) = memo.waiting_for() {
                waiting
                    .entry(cluster.clone())
                    .or_default()
                    .insert(key.clone());
            }
        }
        HealthChecks {
            mhcs: e.mhcs,
            index: e.index,
            timers: e.timers,
            waiting,
        }
    }
}

/// Which MHCs cover a Machine, and which Machines name a Node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct TargetIndex {
    links: BTreeMap<ObjectKey, TargetLink>,
    nodes: BTreeMap<NodeSlot, BTreeSet<ObjectKey>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct TargetLink {
    node: Option<NodeSlot>,
    mhcs: BTreeSet<ObjectKey>,
}

impl TargetIndex {
    fn link(&mut self, machine: &ObjectKey, mhc: &ObjectKey, node: Option<NodeSlot>) {
        let link = self.links.entry(machine.clone()).or_default();
        link.mhcs.insert(mhc.clone());
        self.set_node(machine, node);
    }

    fn set_node(&mut self, machine: &ObjectKey, node: Option<NodeSlot>) {
        let Some(link) = self.links.get_mut(machine) else {
            return;
        };
        if link.node == node {
            return;
        }
        if let Some(old) = link.node.take()
            && let Some(set) = self.nodes.get_mut(&old)
        {
            set.remove(machine);
            if set.is_empty() {
                self.nodes.remove(&old);
            }
        }
        if let Some(new) = &node {
            self.nodes
                .entry(new.clone())
                .or_default()
                .insert(machine.clone());
        }
        link.node = node;
    }

    fn unlink(&mut self, machine: &ObjectKey, mhc: &ObjectKey) {
        let Some(link) = self.links.get_mut(machine) else {
            return;
        };
        link.mhcs.remove(mhc);
        if link.mhcs.is_empty() {
            self.set_node(machine, None);
            self.links.remove(machine);
        }
    }
}

impl HealthChecks {
    /// MHCs that cover `machine_key` or may cover it now: those linked to it, and those of its
    /// namespace and cluster (the MHC reconcile applies the exact selection).
    fn mhcs_of_machine(
        &self,
        store: &Store,
        machine_key: &ObjectKey,
        machine: Option<&Machine>,
        out: &mut Vec<ObjectKey>,
    ) {
        if let Some(link) = self.index.links.get(machine_key) {
            crate::work::mhcs_examined(link.mhcs.len());
            out.extend(link.mhcs.iter().cloned());
        }
        let Some(m) = machine else { return };
        let Some(cluster) = m.meta.labels.get(CLUSTER_NAME_LABEL) else {
            return;
        };
        for k in store.health_checks_of_cluster(&machine_key.namespace, cluster) {
            crate::work::mhcs_examined(1);
            if !out.contains(k) {
                out.push(k.clone());
            }
        }
    }

    /// A Machine key: mark the target dirty in every MHC that may cover it.
    fn mark_dirty(&mut self, key: &ObjectKey, store: &Store) {
        let machine = store.machine(key);
        let mut mhcs = Vec::new();
        self.mhcs_of_machine(store, key, machine, &mut mhcs);
        for mhc in mhcs {
            if let Some(memo) = self.mhcs.get_mut(&mhc) {
                memo.mark_dirty(&key.name);
            }
        }
    }

    fn mhcs_of_cluster(store: &Store, cluster: &ObjectKey, out: &mut Vec<ObjectKey>) {
        let before = out.len();
        out.extend(
            store
                .health_checks_of_cluster(&cluster.namespace, &cluster.name)
                .cloned(),
        );
        crate::work::mhcs_examined(out.len() - before);
    }

    /// Records that the MHC `key` waits for `cluster`'s cache (or no longer waits).
    fn set_waiting(&mut self, key: &ObjectKey, cluster: Option<ClusterName>) {
        let Some(memo) = self.mhcs.get_mut(key) else {
            return;
        };
        if memo.waiting_for() == cluster.as_ref() {
            return;
        }
        if let Some(old) = memo.waiting_for()
            && let Some(keys) = self.waiting.get_mut(old)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.waiting.remove(old);
            }
        }
        if let Some(new) = &cluster {
            self.waiting
                .entry(new.clone())
                .or_default()
                .insert(key.clone());
        }
        memo.set_waiting_for(cluster);
    }

    /// A remediation template (the MHCs that use it), or possibly a remediation request,
    /// named after its Machine (that Machine and its MHCs).
    fn affected_by_external(
        &self,
        store: &Store,
        key: &ObjectKey,
        gk: &GroupKind,
        out: &mut Vec<ObjectKey>,
    ) {
        if gk.kind.ends_with("Template") {
            // A remediation template: the MHCs that use it.
            for (k, o) in store.iter_kind(&Scope::Management, &Kind::MachineHealthCheck) {
                crate::work::mhcs_examined(1);
                if let Object::MachineHealthCheck(mhc) = o
                    && k.namespace == key.namespace
                    && let Some(t) = &mhc.remediation_template
                    && t.name == key.name
                    && t.kind == gk.kind
                {
                    push_unique(out, k.clone());
                }
            }
        } else {
            // Possibly a remediation request, named after its Machine.
            let machine = ObjectKey::management(Kind::Machine, &key.namespace, &key.name);
            if let Some(link) = self.index.links.get(&machine) {
                let requested = link.mhcs.iter().any(|mhc| {
                    store.machine_health_check(mhc).is_some_and(|m| {
                        m.remediation_template.as_ref().is_some_and(|t| {
                            crate::remediation::external::request_group_kind(t) == *gk
                        })
                    })
                });
                if requested {
                    push_unique(out, machine);
                    for mhc in &link.mhcs {
                        push_unique(out, mhc.clone());
                    }
                }
            }
        }
    }

    /// Forgets the verdicts of `mhc`, so that its next reconcile judges every target again
    /// (benchmarks measure a full evaluation this way).
    #[doc(hidden)]
    pub fn invalidate(&mut self, mhc: &ObjectKey) {
        if let Some(memo) = self.mhcs.get_mut(mhc) {
            memo.invalidate();
        }
    }

    /// Forgets what the targets of `mhc` were read as, so that its next full evaluation reads
    /// every Machine and Node from the store (benchmarks measure that pass this way).
    #[doc(hidden)]
    pub fn forget_views(&mut self, mhc: &ObjectKey) {
        if let Some(memo) = self.mhcs.get_mut(mhc) {
            memo.forget_views();
        }
    }

    /// How many full evaluations of `mhc` were made from its targets' views.
    #[cfg(test)]
    pub(crate) fn passes_from_views(&self, mhc: &ObjectKey) -> usize {
        self.mhcs.get(mhc).map_or(0, |m| m.passes_from_views())
    }

    /// Swaps what two targets of `mhc` were read as: views that no longer match their
    /// Machines, which a full evaluation from the views must catch.
    #[cfg(test)]
    pub(crate) fn swap_views(&mut self, mhc: &ObjectKey, a: &str, b: &str) {
        let memo = self.mhcs.get_mut(mhc).expect("a known MHC");
        let view = |memo: &MhcMemo, name: &str| memo.targets[name].view.clone();
        let (va, vb) = (view(memo, a), view(memo, b));
        memo.targets.get_mut(a).expect("a target").view = vb;
        memo.targets.get_mut(b).expect("a target").view = va;
    }

    /// Number of MachineHealthChecks with state (for tests and metrics).
    pub fn len(&self) -> usize {
        self.mhcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mhcs.is_empty()
    }
}

fn push_unique(out: &mut Vec<ObjectKey>, key: ObjectKey) {
    if !out.contains(&key) {
        out.push(key);
    }
}

impl Controller for HealthChecks {
    fn id(&self) -> ControllerId {
        ControllerId::Health
    }

    fn affected(&self, store: &Store, change: &Change, out: &mut Vec<ObjectKey>) {
        let key = change.key;
        match &key.scope {
            Scope::Management => match &key.kind {
                Kind::MachineHealthCheck => push_unique(out, key.clone()),
                Kind::Machine => {
                    push_unique(out, key.clone());
                    let mut mhcs = Vec::new();
                    for o in [change.before, change.after].into_iter().flatten() {
                        if let Object::Machine(m) = o {
                            self.mhcs_of_machine(store, key, Some(m), &mut mhcs);
                        }
                    }
                    if change.latest().is_none() {
                        self.mhcs_of_machine(store, key, None, &mut mhcs);
                    }
                    for k in mhcs {
                        push_unique(out, k);
                    }
                }
                Kind::Cluster => {
                    let mut mhcs = Vec::new();
                    Self::mhcs_of_cluster(store, key, &mut mhcs);
                    for k in mhcs {
                        push_unique(out, k);
                    }
                }
                Kind::External(gk) => self.affected_by_external(store, key, gk, out),
                _ => {}
            },
            Scope::Workload(cluster) => {
                if key.kind == Kind::Node
                    && let Some(machines) = self
                        .index
                        .nodes
                        .get(&(cluster.clone(), key.name.to_string()))
                {
                    for m in machines {
                        push_unique(out, m.clone());
                        if let Some(link) = self.index.links.get(m) {
                            for mhc in &link.mhcs {
                                push_unique(out, mhc.clone());
                            }
                        }
                    }
                }
                // MHCs that could not judge anything until this cluster's cache synced.
                for k in self.waiting.get(cluster).into_iter().flatten() {
                    crate::work::mhcs_examined(1);
                    push_unique(out, k.clone());
                }
            }
        }
    }

    /// The MHCs waiting for this cluster's cache: they say why (or stop saying it).
    fn on_reachability(&self, _store: &Store, scope: &Scope, out: &mut Vec<ObjectKey>) {
        if let Scope::Workload(cluster) = scope {
            out.extend(self.waiting.get(cluster).into_iter().flatten().cloned());
        }
    }

    fn reconcile(&mut self, key: &ObjectKey, cx: &mut Cx<'_>) {
        match key.kind {
            Kind::Machine => self.mark_dirty(key, cx.store),
            Kind::MachineHealthCheck => self.reconcile_mhc(key, cx),
            _ => {}
        }
    }

    fn on_result(&mut self, command: &Command, outcome: &ApiOutcome, now: Timestamp) {
        let Some(memo) = self.mhcs.get_mut(&command.owner) else {
            return;
        };
        match &command.action {
            Action::CreateRemediation { target, .. } => match outcome {
                // 409: it exists already, which is what was wanted.
                ApiOutcome::Ok { .. }
                | ApiOutcome::NotSent { .. }
                | ApiOutcome::Conflict { .. } => memo.request_created(&target.key.name),
                ApiOutcome::NotFound
                | ApiOutcome::Refused { .. }
                | ApiOutcome::Error { .. }
                | ApiOutcome::Unreachable { .. } => memo.request_failed(
                    &target.key.name,
                    outcome.summary(),
                    now.saturating_add(REMEDIATION_REQUEST_RETRY_INTERVAL),
                ),
            },
            // A write that failed is retried by judging the target again.
            Action::SetCondition { target, .. } | Action::SetOwnCondition { target, .. }
                if target.key.kind == Kind::Machine && !outcome.is_success() =>
            {
                memo.mark_dirty(&target.key.name)
            }
            Action::DeleteRemediation { target } => match outcome {
                ApiOutcome::Ok { .. } | ApiOutcome::NotFound => {
                    memo.request_deleted(&target.key.name)
                }
                _ => memo.mark_dirty(&target.key.name),
            },
            _ => {}
        }
    }

    fn take_due(&mut self, now: Timestamp, fired: &mut Vec<FiredTimer>) {
        self.timers.take_due(now, fired);
    }

    fn next_deadline(&self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }
}

#[cfg(test)]
mod tests;
