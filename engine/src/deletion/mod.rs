//! Machine deletion: CAPI's `reconcileDelete` as a sans-IO state machine.
//!
//! Expected flow, for a Machine with a deletionTimestamp and the `machine.cluster.x-k8s.io`
//! finalizer, in a Cluster that is not paused: pre-drain hooks → cordon and drain →
//! volume-detach wait → pre-terminate hooks → delete the InfrastructureMachine and wait →
//! delete the BootstrapConfig and wait → delete the Node → remove the finalizer. Each pass
//! ([`pass`]) recomputes where the Machine stands from the store and a small memory of what
//! was asked of the API ([`Memo`]), and issues only what differs.
//!
//! Guarantees: a failed eviction of a pod is retried 20 s after it was issued, never earlier;
//! a drain completes at the input that removes the last pod it waits for; the Node gets at
//! least one real deletion attempt (Part 1 decision 10). Timers are a closed enum
//! ([`DeletionTimer`]) kept in one [`TimerTable`].

mod checks;
mod gates;
mod memo;
mod pass;
mod phase;
mod pods;
mod status;
mod volumes;

#[cfg(test)]
mod tests;

pub use gates::{
    ControlPlaneFact, InfrastructureFact, MACHINE_NODE_DELETION_RETRY_INTERVAL,
    NODE_DELETION_RETRY_WINDOW, NODE_DELETION_TIMEOUT_DEFAULT, NodeDeletionBlocked,
    NodeDeletionFacts, WaitGateFacts, WaitSkipped, is_delete_node_allowed, keep_deleting_node,
    timeout_exceeded, wait_allowed,
};
pub use memo::{Attempt, Landing, Memo, NodeDeletion, NodeDeletionOutcome, Pending, Phase};
pub use phase::DeletionPhase;
pub use status::{StatusFields, legacy, reason};
pub use volumes::{VolumeWait, volumes_to_wait_for};

use crate::command::{Action, Command, ControllerId};
use crate::controller::{Controller, Cx};
use crate::drain::{EvictionAttempt, EvictionOutcome, eviction_failure_message};
use crate::input::ApiOutcome;
use crate::model::{ClusterName, Kind, Object, ObjectKey, ObjectRef, Pod, Scope};
use crate::ownership::{OwnHooks, Ownership};
use crate::store::{Change, Store};
use crate::time::{Duration, Timestamp};
use crate::timer::{FiredTimer, TimerKind, TimerTable};
use memo::written_resource_version;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Pause before re-issuing a delete or cordon the API refused (upstream backs off and retries;
/// a fixed pace keeps a failing API from being hammered).
pub const API_RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// Why a deleting Machine asked to be woken (the closed set of deletion timers, the drain's
/// included: the drain is a phase of the deletion and reconciles the same Machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DeletionTimer {
    /// A failed eviction may be retried (20 s after it was issued).
    EvictionRetry,
    /// A deleted pod on an unreachable Node starts being skipped.
    SkipDeletedPod,
    DrainTimeout,
    VolumeDetachTimeout,
    /// A refused cordon, InfrastructureMachine or BootstrapConfig deletion may be retried.
    ApiRetry,
    NodeDeletionRetry,
    /// A deletion phase has lasted [`PHASE_STALL_WARNING_AFTER`]: time to say so.
    PhaseStalled,
}

impl TimerKind for DeletionTimer {
    fn name(self) -> &'static str {
        match self {
            DeletionTimer::EvictionRetry => "EvictionRetry",
            DeletionTimer::SkipDeletedPod => "SkipDeletedPod",
            DeletionTimer::DrainTimeout => "DrainTimeout",
            DeletionTimer::VolumeDetachTimeout => "VolumeDetachTimeout",
            DeletionTimer::ApiRetry => "ApiRetry",
            DeletionTimer::NodeDeletionRetry => "NodeDeletionRetry",
            DeletionTimer::PhaseStalled => "PhaseStalled",
        }
    }

    fn controller(self) -> ControllerId {
        ControllerId::Deletion
    }
}

/// How long a deletion phase (a hook, the drain, the volume detach, a provider object's
/// deletion) may last before a Warning event says what holds it.
pub const PHASE_STALL_WARNING_AFTER: crate::time::Duration = crate::time::Duration::from_secs(600);

/// One deleting Machine and what routes changes to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tracked {
    pub cluster: ClusterName,
    pub node: Option<String>,
    pub provider_id: Option<String>,
    pub infrastructure: ObjectKey,
    pub bootstrap: Option<ObjectKey>,
    pub control_plane: Option<ObjectKey>,
    pub memo: Memo,
    /// The Node's classified pods from the last drain pass (a cache, not state).
    #[serde(skip)]
    pub pods: pods::PodCache,
}

/// The Machine deletion controller (registry slot 0; issues `deletion` and `drain` commands).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineDeletion {
    machines: BTreeMap<ObjectKey, Tracked>,
    by_cluster: BTreeMap<ClusterName, BTreeSet<ObjectKey>>,
    /// Tracked Machines by cluster and [`Tracked::node`]: a pod change is routed to the Machines
    /// of its Node without looking at the others (a cluster may delete hundreds at once).
    by_node: BTreeMap<ClusterName, BTreeMap<String, BTreeSet<ObjectKey>>>,
    timers: TimerTable<DeletionTimer>,
    /// Alone, or beside CAPI's manager owning worker Machines' deletion through its hooks.
    #[serde(deserialize_with = "crate::codec::added_in_6")]
    ownership: Ownership,
    /// In takeover, the Machines it owns (`None`: a MachineSet's).
    #[serde(deserialize_with = "crate::codec::added_in_7")]
    own_machines: Option<crate::model::LabelSelector>,
    /// CAPI's release as last judged: an unsupported one stops a takeover taking Machines.
    #[serde(deserialize_with = "crate::codec::added_in_10")]
    capi_release: crate::ownership::CapiRelease,
}

/// Points `key` at what `r` references, keeping it (no allocation) when it already does.
fn refresh_ref_key(key: &mut ObjectKey, r: &ObjectRef, namespace: &str) {
    let (group, ns) = r.group_and_namespace(namespace);
    let same = key.scope == Scope::Management
        && key.kind.is(group, &r.kind)
        && key.namespace == ns
        && key.name == r.name.as_str();
    if !same {
        *key = r.key_in(namespace);
    }
}

fn refresh_optional_ref_key(key: &mut Option<ObjectKey>, r: Option<&ObjectRef>, namespace: &str) {
    match (key.as_mut(), r) {
        (Some(k), Some(r)) => refresh_ref_key(k, r, namespace),
        (_, r) => *key = r.map(|r| r.key_in(namespace)),
    }
}

/// Whether a pod change can matter to a drain or volume wait (readiness flips do not).
fn pod_change_matters(before: Option<&Pod>, after: Option<&Pod>) -> bool {
    match (before, after) {
        (Some(a), Some(b)) => {
            a.meta.deletion_timestamp != b.meta.deletion_timestamp
                || a.node_name != b.node_name
                || a.phase != b.phase
                || a.meta.labels != b.meta.labels
                || a.meta.annotations != b.meta.annotations
                || a.meta.owner_references != b.meta.owner_references
                || a.has_empty_dir != b.has_empty_dir
                || a.pvc_names != b.pvc_names
        }
        _ => true,
    }
}

fn as_pod(o: Option<&Object>) -> Option<&Pod> {
    o.and_then(Object::as_pod)
}

impl MachineDeletion {
    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    /// Sets the ownership ([`crate::Input::Ownership`]); the caller reconciles every Machine.
    pub fn set_ownership(&mut self, ownership: Ownership) {
        self.ownership = ownership;
    }

    pub fn own_machines(&self) -> Option<&crate::model::LabelSelector> {
        self.own_machines.as_ref()
    }

    /// Sets the Machines takeover owns ([`crate::Input::OwnMachines`]); the caller reconciles
    /// every Machine.
    pub fn set_own_machines(&mut self, selector: Option<crate::model::LabelSelector>) {
        self.own_machines = selector;
    }

    pub fn capi_release(&self) -> &crate::ownership::CapiRelease {
        &self.capi_release
    }

    /// Sets CAPI's release ([`crate::Input::CapiRelease`]); the caller reconciles every Machine.
    pub fn set_capi_release(&mut self, release: crate::ownership::CapiRelease) {
        self.capi_release = release;
    }

    /// The release that stops a takeover taking Machines, if CAPI's manager runs one.
    fn halted_by(&self) -> Option<&str> {
        (self.capi_release.support == crate::ownership::ReleaseSupport::Unsupported)
            .then_some(self.capi_release.release.as_str())
    }

    /// The deleting Machine `key`, if this controller is working on it.
    pub fn tracked_machine(&self, key: &ObjectKey) -> Option<&Tracked> {
        self.machines.get(key)
    }

    /// Deleting Machines this controller is working on.
    pub fn tracked(&self) -> impl Iterator<Item = (&ObjectKey, &Tracked)> {
        self.machines.iter()
    }

    fn in_cluster<'a>(&'a self, cluster: &ClusterName) -> impl Iterator<Item = &'a ObjectKey> {
        self.by_cluster.get(cluster).into_iter().flatten()
    }

    fn untrack(&mut self, key: &ObjectKey) {
        if let Some(t) = self.machines.remove(key) {
            self.route_node(key, &t.cluster, t.node.as_deref(), None);
            if let Some(set) = self.by_cluster.get_mut(&t.cluster) {
                set.remove(key);
                if set.is_empty() {
                    self.by_cluster.remove(&t.cluster);
                }
            }
        }
        self.timers.cancel(key);
    }

    /// Moves `key` in [`MachineDeletion::by_node`] from Node `from` to Node `to`.
    fn route_node(
        &mut self,
        key: &ObjectKey,
        cluster: &ClusterName,
        from: Option<&str>,
        to: Option<&str>,
    ) {
        if from == to {
            return;
        }
        if let Some(from) = from
            && let Some(nodes) = self.by_node.get_mut(cluster)
        {
            if let Some(set) = nodes.get_mut(from) {
                set.remove(key);
                if set.is_empty() {
                    nodes.remove(from);
                }
            }
            if nodes.is_empty() {
                self.by_node.remove(cluster);
            }
        }
        if let Some(to) = to {
            self.by_node
                .entry(cluster.clone())
                .or_default()
                .entry(to.to_string())
                .or_default()
                .insert(key.clone());
        }
    }

    /// Tracked Machines of `cluster` whose Node is `node`.
    fn on_node<'a>(
        &'a self,
        cluster: &ClusterName,
        node: &str,
    ) -> impl Iterator<Item = &'a ObjectKey> + use<'a> {
        self.by_node
            .get(cluster)
            .and_then(|nodes| nodes.get(node))
            .into_iter()
            .flatten()
    }
}

impl Controller for MachineDeletion {
    fn id(&self) -> ControllerId {
        ControllerId::Deletion
    }

    fn affected(&self, _store: &Store, change: &Change, out: &mut Vec<ObjectKey>) {
        let key = change.key;
        match (&key.scope, &key.kind) {
            (Scope::Management, Kind::Machine) => {
                let machines = [change.before, change.after];
                let mut control_plane_of = None;
                for m in machines.into_iter().flatten() {
                    let Object::Machine(m) = m else { continue };
                    let lacks_finalizer = !m
                        .meta
                        .finalizers
                        .iter()
                        .any(|f| f == crate::model::MACHINE_FINALIZER);
                    // In takeover: hooks to add, or to remove from a Machine it no longer owns
                    // (and the annotation that names their holder with them).
                    let hooks_to_change = self.ownership == Ownership::Takeover && {
                        let owned = self.halted_by().is_none()
                            && crate::ownership::takes_over(m, self.own_machines.as_ref());
                        !crate::ownership::hooks_settled(&m.meta, OwnHooks::all(owned))
                    };
                    if m.meta.is_deleting() || lacks_finalizer || hooks_to_change {
                        out.push(key.clone());
                    }
                    if m.is_control_plane() {
                        control_plane_of =
                            Some(ClusterName::new(&m.meta.namespace, &m.cluster_name));
                    }
                }
                if self.machines.contains_key(key) {
                    out.push(key.clone());
                }
                // Control-plane Machines coming and going decide isDeleteNodeAllowed.
                if let Some(cluster) = control_plane_of {
                    out.extend(self.in_cluster(&cluster).cloned());
                }
            }
            (Scope::Management, Kind::Cluster) => {
                let cluster = ClusterName::new(&key.namespace, &key.name);
                out.extend(self.in_cluster(&cluster).cloned());
            }
            (Scope::Management, Kind::MachineDrainRule) => {
                out.extend(
                    self.machines
                        .keys()
                        .filter(|m| m.namespace == key.namespace)
                        .cloned(),
                );
            }
            (Scope::Management, Kind::External(_)) => {
                out.extend(
                    self.machines
                        .iter()
                        .filter(|(_, t)| {
                            &t.infrastructure == key
                                || t.bootstrap.as_ref() == Some(key)
                                || t.control_plane.as_ref() == Some(key)
                        })
                        .map(|(k, _)| k.clone()),
                );
            }
            (Scope::Workload(cluster), Kind::Pod) => {
                let (before, after) = (as_pod(change.before), as_pod(change.after));
                if !pod_change_matters(before, after) {
                    return;
                }
                let node_before = before.and_then(|p| p.node_name.as_deref());
                let node_after = after.and_then(|p| p.node_name.as_deref());
                if let Some(node) = node_before {
                    out.extend(self.on_node(cluster, node).cloned());
                }
                if let Some(node) = node_after.filter(|n| Some(*n) != node_before) {
                    out.extend(self.on_node(cluster, node).cloned());
                }
            }
            (Scope::Workload(cluster), Kind::Node) => {
                let provider_ids: BTreeSet<&str> = [change.before, change.after]
                    .into_iter()
                    .flatten()
                    .filter_map(|o| match o {
                        Object::Node(n) => n.provider_id.as_deref(),
                        _ => None,
                    })
                    .collect();
                out.extend(
                    self.in_cluster(cluster)
                        .filter(|m| {
                            let t = &self.machines[*m];
                            t.node.as_deref() == Some(key.name.as_str())
                                || t.provider_id
                                    .as_deref()
                                    .is_some_and(|p| provider_ids.contains(p))
                        })
                        .cloned(),
                );
            }
            (
                Scope::Workload(cluster),
                Kind::Namespace
                | Kind::DaemonSet
                | Kind::VolumeAttachment
                | Kind::PersistentVolume
                | Kind::PersistentVolumeClaim,
            ) => out.extend(self.in_cluster(cluster).cloned()),
            _ => {}
        }
    }

    fn on_synced(&self, store: &Store, scope: &Scope, out: &mut Vec<ObjectKey>) {
        let Scope::Workload(cluster) = scope else {
            return;
        };
        out.extend(
            store
                .machines_of_cluster(&cluster.namespace, &cluster.name)
                .filter(|k| store.get(k).is_some_and(|o| o.meta().is_deleting()))
                .cloned(),
        );
    }

    fn reconcile(&mut self, key: &ObjectKey, cx: &mut Cx<'_>) {
        self.check(key, cx.now);
        let store: &Store = cx.store;
        let machine = match store.machine(key) {
            Some(m) => m,
            None => {
                self.untrack(key);
                return;
            }
        };
        let holds_finalizer = machine
            .meta
            .finalizers
            .iter()
            .any(|f| f == crate::model::MACHINE_FINALIZER);
        let cluster = match store.get_parts(
            &Scope::Management,
            &Kind::Cluster,
            &machine.meta.namespace,
            &machine.cluster_name,
        ) {
            Some((_, Object::Cluster(c))) => Some(c),
            _ => None,
        };
        let ours = match self.ownership {
            Ownership::Alone => {
                if !machine.meta.is_deleting() && !holds_finalizer {
                    ensure_finalizer(machine, cluster, key, cx);
                }
                holds_finalizer
            }
            // CAPI's manager holds the finalizer; a deletion is this controller's while one of
            // its hooks holds CAPI's (never added once the Machine is deleting).
            Ownership::Takeover => {
                if !machine.meta.is_deleting() {
                    let own = Owning {
                        selector: self.own_machines.as_ref(),
                        halted_by: self.halted_by(),
                    };
                    ensure_hooks(machine, cluster, key, own, cx);
                }
                holds_finalizer && OwnHooks::of(&machine.meta).any()
            }
        };
        // A deletion it holds when a fight starts is finished and handed back, as for a
        // release it does not support: never mid-drain.
        let handing_back = match (self.ownership, self.halted_by()) {
            (Ownership::Alone, _) => None,
            (Ownership::Takeover, Some(release)) => {
                Some(pass::HandingBack::Release(release.to_string()))
            }
            (Ownership::Takeover, None) => cx
                .fought_over(key)
                .map(|why| pass::HandingBack::Fight(why.to_string())),
        };
        if matches!(handing_back, Some(pass::HandingBack::Fight(_))) && ours {
            cx.give_back(key);
        }
        if !machine.meta.is_deleting() || !ours {
            self.untrack(key);
            return;
        }
        let cluster_name = ClusterName::new(&machine.meta.namespace, &machine.cluster_name);
        // A Machine whose clusterName changed (a bad write, corrected) is tracked afresh under
        // its cluster, whose cache holds its Node and pods; what it did so far is kept. Found
        // by the corrupt-object fault: the old cluster's unsynced cache held it forever.
        let moved = match self.machines.get(key) {
            Some(t) if t.cluster != cluster_name => Some(t.memo.clone()),
            _ => None,
        };
        if moved.is_some() {
            self.untrack(key);
        }
        if !self.machines.contains_key(key) {
            let infrastructure = machine.infrastructure_ref.key_in(&machine.meta.namespace);
            let fresh = Tracked {
                cluster: cluster_name.clone(),
                node: None,
                provider_id: None,
                infrastructure,
                bootstrap: None,
                control_plane: None,
                memo: moved.unwrap_or_default(),
                pods: Default::default(),
            };
            self.machines.insert(key.clone(), fresh);
        }
        if !self
            .by_cluster
            .get(&cluster_name)
            .is_some_and(|machines| machines.contains(key))
        {
            self.by_cluster
                .entry(cluster_name.clone())
                .or_default()
                .insert(key.clone());
        }
        // Updated in place: a `Tracked` is large, and moving it out of the map and back
        // shifted B-tree nodes on every pass.
        let tracked = self.machines.get_mut(key).expect("tracked above");
        let routed_node = tracked.node.clone();
        refresh_ref_key(
            &mut tracked.infrastructure,
            &machine.infrastructure_ref,
            &machine.meta.namespace,
        );
        refresh_optional_ref_key(
            &mut tracked.bootstrap,
            machine.bootstrap_config_ref.as_ref(),
            &machine.meta.namespace,
        );
        // Routing facts known before any pass (the pass refines the node by providerID).
        tracked.node = tracked.node.take().or_else(|| machine.node_ref.clone());
        tracked.provider_id = machine.provider_id.clone().or_else(|| {
            store
                .external(&tracked.infrastructure)
                .and_then(|e| e.provider_id.clone())
        });
        refresh_optional_ref_key(
            &mut tracked.control_plane,
            cluster.and_then(|c| c.control_plane_ref.as_ref()),
            &cluster_name.namespace,
        );

        let wakes = match cluster {
            None => {
                tracing::debug!(machine = %key, "waiting for Cluster {} to be observed", cluster_name.name);
                Vec::new()
            }
            Some(c) if c.paused || machine.meta.has_annotation(crate::model::PAUSED_ANNOTATION) => {
                tracing::debug!(machine = %key, "Reconciliation is paused for this object");
                Vec::new()
            }
            Some(c) => {
                let mut p = pass::Pass::new(key, machine, c, tracked, cx, self.ownership);
                p.handing_back = handing_back;
                p.run();
                p.wakes
            }
        };
        if routed_node != tracked.node {
            let (cluster, node) = (tracked.cluster.clone(), tracked.node.clone());
            self.route_node(key, &cluster, routed_node.as_deref(), node.as_deref());
        }
        for (timer, at, about) in wakes {
            tracing::trace!(machine = %key, ?timer, at = %at, "deletion timer");
            self.timers.set(key, timer, at, about.as_ref());
        }
        self.check(key, cx.now);
    }

    fn on_result(&mut self, command: &Command, outcome: &ApiOutcome, now: Timestamp) {
        let Some(tracked) = self.machines.get_mut(&command.owner) else {
            return;
        };
        let memo = &mut tracked.memo;
        let failure = match outcome {
            ApiOutcome::Ok { .. } | ApiOutcome::NotFound => None,
            other => Some(failure_text(other)),
        };
        match &command.action {
            Action::Evict { pod, .. } => {
                let outcome = eviction_failure_message(outcome);
                if let EvictionOutcome::Failed(message) = &outcome {
                    tracing::info!(
                        pod = %pod.key,
                        "Eviction failed, will be retried in {}: {message}",
                        crate::drain::EVICTION_RETRY_INTERVAL
                    );
                }
                memo.evictions
                    .entry(pod.key.clone())
                    .or_insert_with(|| EvictionAttempt::requested(None, now))
                    .answer(outcome);
            }
            Action::Cordon { .. } => answer(&mut memo.cordon, failure),
            Action::DeleteInfrastructure { .. } => answer(&mut memo.infrastructure_delete, failure),
            Action::DeleteBootstrap { .. } => answer(&mut memo.bootstrap_delete, failure),
            Action::DeleteNode { node } => {
                if let Some(d) = &mut memo.node_deletion {
                    d.outcome = match failure {
                        None => NodeDeletionOutcome::Deleted,
                        Some(f) => {
                            tracing::info!(node = %node.key, "Node deletion failed: {f}");
                            NodeDeletionOutcome::Failed(f)
                        }
                    };
                }
            }
            Action::SetCondition { .. } | Action::SetOwnCondition { .. } => match failure {
                // Not written after all (or not known to be): the next pass compares with what
                // is observed, and what it decided still stands in `unobserved`.
                Some(_) => {
                    memo.pending_conditions = None;
                    if let Action::SetCondition { conditions, .. } = &command.action {
                        memo.not_written(conditions);
                    }
                }
                None => {
                    if let Some(p) = &mut memo.pending_conditions {
                        p.answered(written_resource_version(outcome));
                    }
                    if let Action::SetCondition { conditions, .. } = &command.action {
                        memo.carried(conditions);
                    }
                }
            },
            Action::PatchStatus { .. } => match failure {
                Some(_) => memo.pending_status = None,
                None => {
                    if let Some(p) = &mut memo.pending_status {
                        p.answered(written_resource_version(outcome));
                    }
                }
            },
            Action::RemoveFinalizer { .. } => {
                memo.finalizer_released =
                    matches!(outcome, ApiOutcome::Ok { .. } | ApiOutcome::NotFound);
            }
            Action::AddFinalizer { .. }
            | Action::PatchSpec { .. }
            | Action::SetOwnerReference { .. }
            | Action::CreateRemediation { .. }
            | Action::DeleteRemediation { .. }
            | Action::DeleteMachine { .. }
            | Action::CreateMachine { .. }
            | Action::RecordEvent { .. } => {}
        }
        self.check(&command.owner, now);
    }

    fn take_due(&mut self, now: Timestamp, fired: &mut Vec<FiredTimer>) {
        self.timers.take_due(now, fired);
    }

    fn next_deadline(&self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }

    fn on_restarted(&mut self) {
        for tracked in self.machines.values_mut() {
            tracked.memo.forget_unanswered();
        }
    }
}

/// §1.1: the finalizer comes first, so that the Machine's deletion waits for this controller.
/// Nothing is written for a paused Cluster or Machine.
fn ensure_finalizer(
    machine: &crate::model::Machine,
    cluster: Option<&crate::model::Cluster>,
    key: &ObjectKey,
    cx: &mut Cx<'_>,
) {
    let paused = cluster.is_some_and(|c| c.paused)
        || machine.meta.has_annotation(crate::model::PAUSED_ANNOTATION);
    if paused {
        return;
    }
    cx.issue(
        ControllerId::Deletion,
        Action::AddFinalizer {
            target: crate::command::Target::capi(key.clone(), machine.version),
            finalizer: crate::model::MACHINE_FINALIZER.to_string(),
        },
        format!(
            "Machine {} has no {} finalizer yet: adding it so that its deletion waits for drain and cleanup",
            machine.meta.name,
            crate::model::MACHINE_FINALIZER
        ),
    );
}

/// What a takeover owns: the Machines `selector` chooses (`None`: a MachineSet's), none while
/// CAPI's manager runs a release it does not support (`halted_by`).
#[derive(Clone, Copy)]
struct Owning<'a> {
    selector: Option<&'a crate::model::LabelSelector>,
    halted_by: Option<&'a str>,
}

/// Takeover: this controller's hooks go on the worker Machines it owns, before they are
/// deleted, with the Machine's resourceVersion as a precondition (a Machine deleted meanwhile
/// is left to CAPI's manager), and come off the others; the annotation naming their holder
/// goes with them. Nothing is written for a paused Cluster or Machine. A Machine fought over
/// ([`crate::fight`]) is given back: its hooks come off in one write that passes the hold,
/// and it is not hooked again for [`crate::fight::GIVEN_BACK_FOR`].
fn ensure_hooks(
    machine: &crate::model::Machine,
    cluster: Option<&crate::model::Cluster>,
    key: &ObjectKey,
    own: Owning<'_>,
    cx: &mut Cx<'_>,
) {
    let paused = cluster.is_none_or(|c| c.paused)
        || machine.meta.has_annotation(crate::model::PAUSED_ANNOTATION);
    if paused {
        return;
    }
    let fought = cx.fought_over(key).is_some();
    let issued = hook_once(machine, key, own, cx);
    // The hooks' own write was held: a fight starts now, and the Machine is given back at once.
    if issued == Some(crate::controller::Issued::Held) && !fought {
        hook_once(machine, key, own, cx);
    }
}

fn hook_once(
    machine: &crate::model::Machine,
    key: &ObjectKey,
    Owning {
        selector: own,
        halted_by,
    }: Owning<'_>,
    cx: &mut Cx<'_>,
) -> Option<crate::controller::Issued> {
    let hooks = OwnHooks::of(&machine.meta);
    let takes_over = crate::ownership::takes_over(machine, own);
    let fought = cx.fought_over(key).map(str::to_string);
    // Given back from the first reconcile that finds the fight (told once, then).
    let given_back_now = fought.is_some() && (takes_over || hooks.any()) && cx.give_back(key);
    let owned = halted_by.is_none() && fought.is_none() && takes_over;
    let name = &machine.meta.name;
    let patch = crate::ownership::hooks_patch(&machine.meta, OwnHooks::all(owned));
    if patch.is_none() && !given_back_now {
        return None;
    }
    let reason = if owned && !hooks.both() {
        match own {
            Some(selector) => format!(
                "Machine {name} is selected by --own-machines {selector}: this controller's hooks hold Cluster API's manager at its deletion's steps, so that this controller performs them"
            ),
            None => format!(
                "Machine {name} belongs to a MachineSet: this controller's hooks hold Cluster API's manager at its deletion's steps, so that this controller performs them"
            ),
        }
    } else if owned {
        format!(
            "Machine {name} carries this controller's hooks: the annotation {} names who holds them and the command that lets them go",
            crate::ownership::HOOKS_HELD_BY_ANNOTATION
        )
    } else if !hooks.any() {
        format!(
            "Machine {name} carries none of this controller's hooks: the annotation {} that names their holder goes",
            crate::ownership::HOOKS_HELD_BY_ANNOTATION
        )
    } else if let Some(why) = &fought {
        crate::ownership::fight_hand_back_message(name, why, true)
    } else if let Some(release) = halted_by {
        format!(
            "Cluster API's manager runs {release}, a release this build of the controller does not support: it takes no Machine and hands Machine {name} back (its hooks go, so Cluster API's manager deletes it alone)"
        )
    } else {
        format!(
            "Machine {name} is not one this controller owns ({}): its hooks go, so Cluster API's manager deletes it alone",
            match own {
                Some(selector) =>
                    format!("not selected by --own-machines {selector}, or a control plane's"),
                None => "not a MachineSet's, or a control plane's".to_string(),
            }
        )
    };
    let target = crate::command::Target::capi(key.clone(), machine.version);
    // Handed back for the release or a fight: said where an operator looks, `kubectl describe
    // machine`.
    let told = match &fought {
        Some(why) => given_back_now
            .then(|| crate::ownership::fight_hand_back_message(name, why, hooks.any())),
        None => (!owned && hooks.any() && halted_by.is_some()).then(|| reason.clone()),
    }
    .map(|message| Action::RecordEvent {
        regarding: target.clone(),
        type_: crate::command::EventType::Warning,
        reason: crate::ownership::HANDED_BACK_EVENT.to_string(),
        message,
    });
    let issued = patch.map(|patch| {
        let mut merge = patch.merge;
        // The hand-back after a fight names no resourceVersion: the other writer changes the
        // Machine all the time, and a 409 would spend the one write that passes the hold on
        // nothing (taking annotations off is right whatever the Machine shows).
        if fought.is_none() {
            merge["metadata"]["resourceVersion"] = machine.meta.resource_version.to_string().into();
        }
        let action = Action::PatchSpec {
            target,
            merge: crate::command::JsonText::from_value(&merge),
            summary: patch.summary,
        };
        if fought.is_some() {
            let write = crate::fight::HandBackWrite::LastHook;
            cx.issue_giving_back(ControllerId::Deletion, action, reason.clone(), write)
        } else {
            cx.issue(ControllerId::Deletion, action, reason.clone())
        }
    });
    // The release's hand-back is told with its write; a fight's once, with or without one
    // (another writer may have taken the hooks off already).
    let write_queued = matches!(issued, Some(crate::controller::Issued::Queued(_)));
    if let Some(event) = told
        && (fought.is_some() || write_queued)
    {
        cx.issue(ControllerId::Deletion, event, reason);
    }
    issued
}

fn answer(attempt: &mut Option<Attempt>, failure: Option<String>) {
    if let Some(a) = attempt {
        a.answer(failure);
    }
}

/// The error text of a failed API call, as upstream's `err.Error()` would read.
fn failure_text(outcome: &ApiOutcome) -> String {
    match outcome {
        ApiOutcome::Ok { .. } | ApiOutcome::NotSent { .. } => String::new(),
        ApiOutcome::NotFound => "not found".to_string(),
        ApiOutcome::Conflict { message }
        | ApiOutcome::Refused { message, .. }
        | ApiOutcome::Error { message, .. }
        | ApiOutcome::Unreachable { message } => message.clone(),
    }
}
