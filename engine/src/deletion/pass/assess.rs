//! The facts of one pass: what each step of the deletion shows, read in the steps' order
//! without issuing anything, and what the steps' actions need of it ([`Findings`]). A step
//! after one that holds is not assessed.

use super::Pass;
use crate::deletion::gates::{
    self, ControlPlaneFact, InfrastructureFact, NodeDeletionBlocked, NodeDeletionFacts,
    WaitGateFacts, WaitSkipped,
};
use crate::deletion::phase::{PhaseFacts, Step};
use crate::deletion::pods::{CachedPod, NodePods};
use crate::deletion::volumes::{VolumeWait, volumes_to_wait_for};
use crate::deletion::{NodeDeletion, NodeDeletionOutcome};
use crate::drain::{self, DrainBehavior, DrainContext, DrainPlan};
use crate::model::{
    EXCLUDE_DRAIN_ANNOTATION, EXCLUDE_VOLUME_DETACH_ANNOTATION, Kind, Object, ObjectKey,
    PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX,
};
use crate::time::Timestamp;
use std::collections::BTreeSet;
use std::fmt;

/// What the steps' actions need of the assessment.
#[derive(Debug)]
pub(super) struct Findings<'c> {
    /// isDeleteNodeAllowed: the Node to drain and delete, or why not (assessed once the
    /// workload cache is known to be needed and synced).
    pub node: Result<String, NodeDeletionBlocked>,
    pub unreadable: Option<(ObjectKey, String)>,
    pub drain: Option<DrainFinding<'c>>,
    pub volumes: Option<VolumeFinding>,
    pub node_deletion: Option<NodeDeletionFinding>,
}

impl Findings<'_> {
    /// What became of the Machine's Node, for the reason of its infrastructure's deletion.
    pub(super) fn node_outcome(&self) -> NodeOutcome {
        match (&self.node, &self.drain) {
            (Err(NodeDeletionBlocked::NilNodeRef), _) => NodeOutcome::NoNode,
            (Err(blocked), _) => NodeOutcome::LeftAlone(*blocked),
            // The hooks come after the drain: it was over (done or skipped) before they began.
            (Ok(_), Some(DrainFinding::Skipped(WaitSkipped::PreTerminateHooksStarted))) => {
                NodeOutcome::DrainOver
            }
            (Ok(_), Some(DrainFinding::Skipped(skipped))) => NodeOutcome::DrainSkipped(*skipped),
            (Ok(_), Some(DrainFinding::NodeGone)) => NodeOutcome::Gone,
            (Ok(_), _) => NodeOutcome::Drained,
        }
    }
}

/// What became of a Machine's Node before its infrastructure is deleted: "drained" only when
/// it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeOutcome {
    NoNode,
    /// Upstream's `isDeleteNodeAllowed` refused: no drain, no Node deletion.
    LeftAlone(NodeDeletionBlocked),
    /// The pre-terminate hooks started, so the drain had ended before.
    DrainOver,
    DrainSkipped(WaitSkipped),
    Gone,
    Drained,
}

impl fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeOutcome::NoNode => f.write_str("it has no Node"),
            NodeOutcome::LeftAlone(blocked) => {
                write!(f, "its Node is neither drained nor deleted ({blocked})")
            }
            NodeOutcome::DrainOver => {
                f.write_str("its Node's drain is over (pre-terminate hooks already started)")
            }
            NodeOutcome::DrainSkipped(skipped) => {
                write!(f, "its Node's drain was skipped ({skipped})")
            }
            NodeOutcome::Gone => f.write_str("its Node is gone"),
            NodeOutcome::Drained => f.write_str("its Node is drained"),
        }
    }
}

/// Where the drain stands.
#[derive(Debug)]
pub(super) enum DrainFinding<'c> {
    Skipped(WaitSkipped),
    /// The Node is gone: nothing left to drain.
    NodeGone,
    /// A nodeRef newer than the workload cluster's cache.
    NodeNotCached,
    /// Not cordoned yet.
    Schedulable,
    UnreadablePod(ObjectKey, String),
    RulesFailed(String),
    Planned {
        /// Boxed: the plan is many lists, the other findings a word or two.
        plan: Box<DrainPlan<'c>>,
        /// The Node's classified pods, in key order.
        cached: &'c [CachedPod],
        grace_period_seconds: Option<i64>,
    },
}

impl DrainFinding<'_> {
    pub(super) fn step(&self) -> Step {
        match self {
            DrainFinding::Skipped(_) => Step::Skipped,
            DrainFinding::NodeGone => Step::Done,
            DrainFinding::Planned { plan, .. } if plan.errors.is_empty() && plan.is_complete() => {
                Step::Done
            }
            DrainFinding::NodeNotCached
            | DrainFinding::Schedulable
            | DrainFinding::UnreadablePod(..)
            | DrainFinding::RulesFailed(_)
            | DrainFinding::Planned { .. } => Step::Holds,
        }
    }
}

/// Where the wait for the Node's volumes to detach stands.
#[derive(Debug)]
pub(super) enum VolumeFinding {
    Skipped(WaitSkipped),
    /// Nothing attached is waited for (or nothing will ever report it detached).
    Detached,
    Failed(String),
    Waiting(VolumeWait),
}

impl VolumeFinding {
    pub(super) fn step(&self) -> Step {
        match self {
            VolumeFinding::Skipped(_) => Step::Skipped,
            VolumeFinding::Detached => Step::Done,
            VolumeFinding::Failed(_) | VolumeFinding::Waiting(_) => Step::Holds,
        }
    }
}

/// Where the Node's deletion stands (Part 1 decision 10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum NodeDeletionFinding {
    /// No Node to delete.
    Absent,
    /// Deleted, or given up earlier.
    Over,
    /// The last attempt failed and `nodeDeletionTimeout` has passed: continue without it.
    GiveUp { error: String },
    /// Issue an attempt: the first (`previous` is `None`) or another after a lost answer.
    Request { previous: Option<NodeDeletion> },
    /// The first or a repeated attempt is unanswered.
    InFlight,
    /// The last attempt failed: retry at `due`.
    Paced { error: String, due: Timestamp },
    /// The last attempt failed and a retry is due.
    Retry {
        error: String,
        previous: NodeDeletion,
    },
}

impl NodeDeletionFinding {
    pub(super) fn step(&self) -> Step {
        match self {
            NodeDeletionFinding::Absent => Step::Skipped,
            NodeDeletionFinding::Over | NodeDeletionFinding::GiveUp { .. } => Step::Done,
            NodeDeletionFinding::Request { .. }
            | NodeDeletionFinding::InFlight
            | NodeDeletionFinding::Paced { .. }
            | NodeDeletionFinding::Retry { .. } => Step::Holds,
        }
    }
}

/// Records `step` as `slot` and says whether the assessment stops there.
fn holds(slot: &mut Step, step: Step) -> bool {
    *slot = step;
    step.stops()
}

impl<'p, 'a> Pass<'p, 'a> {
    /// The facts of this pass, in the steps' order; `pods` is the Node's pod cache, which the
    /// drain finding borrows.
    pub(super) fn assess<'c>(&mut self, pods: &'c mut NodePods) -> (PhaseFacts, Findings<'c>) {
        let mut facts = PhaseFacts {
            finalizer_released: self.tracked.memo.finalizer_released,
            workload_cache: Step::NotReached,
            dependencies_readable: Step::NotReached,
            pre_drain_hooks: Step::NotReached,
            drain: Step::NotReached,
            volume_detach: Step::NotReached,
            pre_terminate_hooks: Step::NotReached,
            infrastructure: Step::NotReached,
            bootstrap: Step::NotReached,
            node: Step::NotReached,
        };
        let mut found = Findings {
            node: Err(NodeDeletionBlocked::NilNodeRef),
            unreadable: None,
            drain: None,
            volumes: None,
            node_deletion: None,
        };
        if facts.finalizer_released {
            return (facts, found);
        }
        let synced = self.store.is_synced(&self.scope);
        let needs_workload = !self.cluster.meta.is_deleting()
            && (self.m.node_ref.is_some() || self.provider_id().is_some());
        // Node operations (and the providerID lookup) need the workload cluster's cache.
        if holds(
            &mut facts.workload_cache,
            step_if(needs_workload && !synced),
        ) {
            return (facts, found);
        }
        found.node = self.node_deletion_allowed();
        // A Node or pod missing from an unsynced cache proves nothing: wait for the relist,
        // and for the drain kinds, watched from the Machine's deletion on, to be listed.
        let drain_kinds_listed = || {
            Kind::DRAIN_ONLY
                .iter()
                .all(|kind| self.store.kind_listed(&self.scope, kind))
        };
        if holds(
            &mut facts.workload_cache,
            step_if(found.node.is_ok() && !(synced && drain_kinds_listed())),
        ) {
            return (facts, found);
        }
        found.unreadable = self.unreadable_dependency();
        if holds(
            &mut facts.dependencies_readable,
            step_if(found.unreadable.is_some()),
        ) {
            return (facts, found);
        }
        if let Ok(node) = found.node.clone() {
            let hooks = step_if(!self.hooks(PRE_DRAIN_HOOK_PREFIX).is_empty());
            if holds(&mut facts.pre_drain_hooks, hooks) {
                return (facts, found);
            }
            let drain = self.assess_drain(&node, pods);
            let stops = holds(&mut facts.drain, drain.step());
            found.drain = Some(drain);
            if stops {
                return (facts, found);
            }
            let volumes = self.assess_volumes(&node);
            let stops = holds(&mut facts.volume_detach, volumes.step());
            found.volumes = Some(volumes);
            if stops {
                return (facts, found);
            }
        } else {
            facts.pre_drain_hooks = Step::Skipped;
            facts.drain = Step::Skipped;
            facts.volume_detach = Step::Skipped;
        }
        let hooks = step_if(!self.hooks(PRE_TERMINATE_HOOK_PREFIX).is_empty());
        if holds(&mut facts.pre_terminate_hooks, hooks) {
            return (facts, found);
        }
        let infrastructure = step_if(!self.gone(&self.tracked.infrastructure));
        if holds(&mut facts.infrastructure, infrastructure) {
            return (facts, found);
        }
        let bootstrap = match (&self.tracked.bootstrap, &self.m.bootstrap_config_ref) {
            (Some(key), Some(_)) => step_if(!self.gone(key)),
            _ => Step::Skipped,
        };
        if holds(&mut facts.bootstrap, bootstrap) {
            return (facts, found);
        }
        let node_deletion = match found.node.clone() {
            Ok(node) => self.assess_node_deletion(&node),
            Err(_) => NodeDeletionFinding::Absent,
        };
        facts.node = node_deletion.step();
        found.node_deletion = Some(node_deletion);
        (facts, found)
    }

    /// A provider object the cache saw deleted (not in the cache yet is not gone).
    pub(super) fn gone(&self, key: &ObjectKey) -> bool {
        self.store.get(key).is_none() && self.store.seen_gone(key, self.key)
    }

    pub(super) fn assess_drain<'c>(
        &mut self,
        node_name: &str,
        pods: &'c mut NodePods,
    ) -> DrainFinding<'c> {
        let timeout = self.m.node_drain_timeout;
        let started = self.status.deletion.node_drain_start;
        if let Err(skipped) = self.wait_gate(EXCLUDE_DRAIN_ANNOTATION, started, timeout) {
            return DrainFinding::Skipped(skipped);
        }
        let Some(node) = self.node(node_name) else {
            let node_key = ObjectKey::new(self.scope.clone(), Kind::Node, "", node_name);
            if !self.store.node_seen_gone(&node_key, self.key) {
                // A nodeRef newer than the workload cluster's cache: a Node never seen is
                // not a deleted Node, and skipping its drain would be a guess.
                return DrainFinding::NodeNotCached;
            }
            return DrainFinding::NodeGone;
        };
        if !node.unschedulable {
            return DrainFinding::Schedulable;
        }
        if let Some((key, problem)) = self.unreadable_pod(node_name) {
            return DrainFinding::UnreadablePod(key, problem);
        }
        let rules = match self.drain_rules() {
            Ok(r) => r,
            Err(e) => {
                return DrainFinding::RulesFailed(format!("failed to get Pods for eviction: {e}"));
            }
        };
        let unreachable = node.is_unreachable();
        let skip_seconds = if unreachable {
            drain::UNREACHABLE_SKIP_WAIT_FOR_DELETE_TIMEOUT_SECONDS
        } else {
            0
        };
        let grace_period_seconds = unreachable.then_some(drain::UNREACHABLE_GRACE_PERIOD_SECONDS);
        let dcx = DrainContext::new(self.store, &self.scope, self.now, skip_seconds, &rules);
        let cached = pods.sync(self.store, &self.scope, node_name, &dcx, &rules);
        let effects_view = &*self.cx;
        let plan = DrainPlan::build(
            cached,
            &self.tracked.memo.evictions,
            self.now,
            skip_seconds,
            |k| effects_view.is_in_flight(crate::ActionKind::Evict, k),
        );
        DrainFinding::Planned {
            plan: Box::new(plan),
            cached,
            grace_period_seconds,
        }
    }

    pub(super) fn assess_volumes(&mut self, node_name: &str) -> VolumeFinding {
        let timeout = self.m.node_volume_detach_timeout;
        let started = self.status.deletion.wait_for_node_volume_detach_start;
        if let Err(skipped) = self.wait_gate(EXCLUDE_VOLUME_DETACH_ANNOTATION, started, timeout) {
            return VolumeFinding::Skipped(skipped);
        }
        let wait = match self.node(node_name) {
            // NotFound, or unreachable: nothing will ever report the volumes detached.
            None => Ok(VolumeWait::default()),
            Some(node) if node.is_unreachable() => Ok(VolumeWait::default()),
            Some(node) => self
                .ignored_claims(node_name)
                .and_then(|ignored| volumes_to_wait_for(self.store, &self.scope, node, &ignored)),
        };
        match wait {
            Err(error) => VolumeFinding::Failed(error),
            Ok(w) if w.is_empty() => VolumeFinding::Detached,
            Ok(w) => VolumeFinding::Waiting(w),
        }
    }

    pub(super) fn assess_node_deletion(&mut self, node_name: &str) -> NodeDeletionFinding {
        if self.node(node_name).is_none() {
            return NodeDeletionFinding::Absent;
        }
        let Some(previous) = self.tracked.memo.node_deletion.clone() else {
            return NodeDeletionFinding::Request { previous: None };
        };
        let error = match &previous.outcome {
            NodeDeletionOutcome::Deleted | NodeDeletionOutcome::GaveUp(_) => {
                return NodeDeletionFinding::Over;
            }
            NodeDeletionOutcome::Pending => {
                let node_key = self.node_key(node_name);
                return match self
                    .cx
                    .is_in_flight(crate::ActionKind::DeleteNode, &node_key)
                {
                    true => NodeDeletionFinding::InFlight,
                    false => NodeDeletionFinding::Request {
                        previous: Some(previous),
                    },
                };
            }
            NodeDeletionOutcome::Failed(error) => error.clone(),
        };
        let deleted_at = self.m.meta.deletion_timestamp.unwrap_or(self.now);
        if !gates::keep_deleting_node(
            previous.first_at,
            deleted_at,
            self.m.node_deletion_timeout,
            self.now,
        ) {
            return NodeDeletionFinding::GiveUp { error };
        }
        let due = previous
            .last_at
            .saturating_add(gates::MACHINE_NODE_DELETION_RETRY_INTERVAL);
        if self.now < due {
            return NodeDeletionFinding::Paced { error, due };
        }
        NodeDeletionFinding::Retry { error, previous }
    }
}

fn step_if(holding: bool) -> Step {
    if holding { Step::Holds } else { Step::Done }
}

impl<'p, 'a> Pass<'p, 'a> {
    /// The first object this deletion decides on that the API shows but the controllers
    /// cannot read: the Machine, its Cluster, Node, provider objects and control plane.
    pub(super) fn unreadable_dependency(&self) -> Option<(ObjectKey, String)> {
        let store = self.store;
        if !store.has_unreadable() {
            return None;
        }
        let cluster = ObjectKey::management(
            Kind::Cluster,
            &self.cluster.meta.namespace,
            &self.cluster.meta.name,
        );
        let node = self
            .tracked
            .node
            .as_ref()
            .map(|n| ObjectKey::new(self.scope.clone(), Kind::Node, "", n));
        let t = &*self.tracked;
        [
            Some(self.key.clone()),
            Some(cluster),
            node,
            Some(t.infrastructure.clone()),
        ]
        .into_iter()
        .chain([t.bootstrap.clone(), t.control_plane.clone()])
        .flatten()
        .find_map(|k| store.unreadable(&k).map(|p| (k.clone(), p.to_string())))
    }

    /// A pod the drain of `node_name` cannot judge: unreadable, and last seen on that Node or
    /// never read at all (it may be on it).
    pub(super) fn unreadable_pod(&self, node_name: &str) -> Option<(ObjectKey, String)> {
        let store = self.store;
        if !store.has_unreadable() {
            return None;
        }
        store
            .unreadable_of_kind(&self.scope, &Kind::Pod)
            .find(|(k, _)| match store.get(k) {
                Some(Object::Pod(p)) => p.node_name.as_deref() == Some(node_name),
                _ => true,
            })
            .map(|(k, p)| (k.clone(), p.to_string()))
    }

    pub(super) fn node_deletion_allowed(&mut self) -> Result<String, gates::NodeDeletionBlocked> {
        let cluster_deleting = self.cluster.meta.is_deleting();
        let mut node_name = self.m.node_ref.clone();
        if !cluster_deleting && node_name.is_none() {
            node_name = self.node_by_provider_id();
        }
        self.tracked.node = node_name.clone();
        self.tracked.provider_id = self.provider_id();
        let control_plane = match &self.tracked.control_plane {
            None => ControlPlaneFact::Absent,
            Some(key) => match self.store.get(key) {
                None => ControlPlaneFact::Absent,
                Some(o) if o.meta().is_deleting() => ControlPlaneFact::Deleting,
                Some(Object::External(e)) if e.external_managed_control_plane => {
                    ControlPlaneFact::ExternallyManaged
                }
                Some(_) => ControlPlaneFact::Managed,
            },
        };
        let facts = NodeDeletionFacts {
            cluster_deleting,
            has_node_ref: node_name.is_some(),
            control_plane,
            active_control_plane_machines: self.active_control_plane_machines(),
        };
        let verdict = gates::is_delete_node_allowed(&facts);
        match (verdict, node_name) {
            (Ok(()), Some(name)) => Ok(name),
            (Ok(()), None) => Err(gates::NodeDeletionBlocked::NilNodeRef),
            (Err(blocked), _) => {
                tracing::debug!(machine = %self.key, "Skipping node deletion: {blocked}");
                Err(blocked)
            }
        }
    }

    pub(super) fn provider_id(&self) -> Option<String> {
        self.m.provider_id.clone().or_else(|| {
            self.store
                .external(&self.tracked.infrastructure)
                .and_then(|e| e.provider_id.clone())
        })
    }

    /// Upstream's best-effort lookup of the Node by providerID when `status.nodeRef` is unset.
    pub(super) fn node_by_provider_id(&mut self) -> Option<String> {
        let provider_id = self.provider_id()?;
        let key = self
            .store
            .nodes_by_provider_id(&self.scope, &provider_id)
            .next()?
            .clone();
        let uid = self
            .store
            .get(&key)
            .map(|o| o.meta().uid.clone())
            .unwrap_or_default();
        self.status.node_ref = Some((key.name.to_string(), uid));
        Some(key.name.to_string())
    }

    pub(super) fn active_control_plane_machines(&self) -> usize {
        let c = &self.cluster.meta;
        self.store
            .active_control_plane_machines(&c.namespace, &c.name)
    }

    pub(super) fn hooks(&self, prefix: &str) -> Vec<&'a str> {
        self.m
            .meta
            .annotations
            .keys()
            .filter(|k| crate::ownership::is_foreign_hook(k, prefix))
            .map(String::as_str)
            .collect()
    }

    /// Claims (`ns/name`) of pods the drain would skip: their volumes may stay attached.
    /// Pods merely being deleted are not skipped here (upstream uses no skip threshold).
    pub(super) fn ignored_claims(&self, node_name: &str) -> Result<BTreeSet<String>, String> {
        let rules = self.drain_rules().map_err(|e| e.to_string())?;
        let dcx = DrainContext::new(self.store, &self.scope, self.now, 0, &rules);
        let mut ignored = BTreeSet::new();
        for key in self.store.pods_on_node(&self.scope, node_name) {
            let Some(pod) = self.store.pod(key) else {
                continue;
            };
            if pod.pvc_names.is_empty() {
                continue;
            }
            if drain::classify(pod, &dcx).behavior == DrainBehavior::Skip {
                for claim in &pod.pvc_names {
                    ignored.insert(format!("{}/{claim}", pod.meta.namespace));
                }
            }
        }
        Ok(ignored)
    }

    pub(super) fn infrastructure_fact(&self) -> InfrastructureFact {
        let key = &self.tracked.infrastructure;
        match self.store.get(key) {
            None if self.store.seen_gone(key, self.key) => InfrastructureFact::Gone,
            // Not in the cache yet is not gone: nothing is skipped on that guess.
            None => InfrastructureFact::Present,
            Some(o) if o.meta().is_deleting() => InfrastructureFact::Deleting,
            Some(_) => InfrastructureFact::Present,
        }
    }

    pub(super) fn wait_gate(
        &self,
        exclude_annotation: &str,
        start: Option<Timestamp>,
        timeout: Option<crate::time::Duration>,
    ) -> Result<(), gates::WaitSkipped> {
        gates::wait_allowed(&WaitGateFacts {
            excluded: self.m.meta.has_annotation(exclude_annotation),
            pre_terminate_hooks_started: self
                .status
                .deletion
                .wait_for_pre_terminate_hook_start
                .is_some(),
            infrastructure: self.infrastructure_fact(),
            timed_out: gates::timeout_exceeded(start, timeout, self.now),
        })
    }
}
