//! One reconcile of one MachinePool, as a pure function of the store, the controller's memory of
//! the pool and `now`: facts about the pool decide its [`PoolFlow`], the flow's steps fill a
//! [`Plan`] (the commands to issue, only what differs from what is observed, and when to wake
//! up again), and the controller turns the plan into commands.

use super::draft::Draft;
use super::nodes::NodeIndex;
use super::ownership::set_owner_and_labels;
use super::phase::{PhaseFacts, next_phase, replicas_managed_externally};
use super::provider::{reconcile_bootstrap, reconcile_infrastructure};
use super::replicas::reconcile_node_refs;
use super::status::{update_status, write_pool};
use super::teardown::reconcile_delete;
use super::unreadable::{unreadable_dependency, wait_for_readable};
use super::{PoolMemory, PoolWake};
use crate::command::{Action, Target};
use crate::model::*;
use crate::store::Store;
use crate::time::Timestamp;
use std::cell::OnceCell;

/// One command the reconcile wants, with its operator-facing reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub action: Action,
    pub reason: String,
    /// For `DeleteNode`: the Node's name, so the attempt is remembered when queued.
    pub node_deletion: Option<String>,
    /// An event that goes with the condition write planned before it: issued only when that
    /// write is (a write already in flight carries the news).
    pub with_condition: bool,
}

/// The outcome of one reconcile.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub commands: Vec<Planned>,
    /// Clock-driven changes: (timer, when, the object it is about when not the pool).
    pub wakes: Vec<(PoolWake, Timestamp, Option<ObjectKey>)>,
    /// Node refs announced with `SuccessfulSetNodeRefs` (their hash), when an event is planned.
    pub announced_node_refs: Option<u64>,
    /// Nodes could not be matched: the workload cluster cache is not synced yet.
    pub awaiting_workload_cache: bool,
    /// Something waits for the workload cluster's cache (the nodeRefs, or the Nodes to delete
    /// at the pool's deletion): if the cluster cannot be reached, the pool says why.
    pub waits_on_workload: bool,
    /// The pool waits for this object to become readable (see [`PoolMemory::unreadable`]).
    pub unreadable: Option<(ObjectKey, String)>,
    /// What it decides of the pool's conditions (`None`: none of them).
    pub decided: Option<crate::decision::Decision>,
}

impl Plan {
    pub(super) fn issue(&mut self, action: Action, reason: impl Into<String>) {
        self.commands.push(Planned {
            action,
            reason: reason.into(),
            node_deletion: None,
            with_condition: false,
        });
    }

    /// An event issued only when the condition write planned just before it is.
    pub(super) fn issue_with_condition(&mut self, action: Action, reason: impl Into<String>) {
        self.commands.push(Planned {
            action,
            reason: reason.into(),
            node_deletion: None,
            with_condition: true,
        });
    }

    pub(super) fn wake_at(&mut self, at: Timestamp, why: PoolWake, about: Option<ObjectKey>) {
        self.wakes.push((why, at, about));
    }

    /// A Node deletion, remembered as an attempt once queued.
    pub(super) fn delete_node(&mut self, workload: &Scope, name: &str, reason: String) {
        self.commands.push(Planned {
            action: Action::DeleteNode {
                node: Target {
                    key: ObjectKey::new(workload.clone(), Kind::Node, "", name),
                    api_version: "v1".to_string(),
                },
            },
            reason,
            node_deletion: Some(name.to_string()),
            with_condition: false,
        });
    }
}

/// Everything one reconcile reads.
pub struct Ctx<'a> {
    pub store: &'a Store,
    pub now: Timestamp,
    pub key: &'a ObjectKey,
    pub mp: &'a MachinePool,
    pub memory: &'a PoolMemory,
    pub workload: &'a Scope,
    nodes: NodeIndex<'a>,
    /// Nodes matched to this pass's nodeRefs, in order (when nodeRefs were computed).
    pub(super) matched: OnceCell<Vec<&'a Node>>,
    /// The pool's Machines ([`pool_machines`]), found once per reconcile.
    pub(super) machines: OnceCell<Vec<&'a Machine>>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        store: &'a Store,
        now: Timestamp,
        key: &'a ObjectKey,
        mp: &'a MachinePool,
        memory: &'a PoolMemory,
        workload: &'a Scope,
    ) -> Self {
        Ctx {
            store,
            now,
            key,
            mp,
            memory,
            workload,
            nodes: NodeIndex::new(store, workload),
            matched: OnceCell::new(),
            machines: OnceCell::new(),
        }
    }

    pub(super) fn nodes(&self) -> &NodeIndex<'a> {
        &self.nodes
    }

    pub(super) fn pool_target(&self) -> Target {
        Target::capi(self.key.clone(), self.mp.version)
    }

    pub(super) fn workload(&self) -> Scope {
        self.workload.clone()
    }

    pub(super) fn pool_name(&self) -> String {
        format!("{}/{}", self.mp.meta.namespace, self.mp.meta.name)
    }

    pub(super) fn external(&self, r: &ObjectRef) -> (ObjectKey, Option<&External>) {
        let key = r.key_in(&self.mp.meta.namespace);
        let found = self.store.external(&key);
        (key, found)
    }

    pub(super) fn node_by_name(&self, name: &str) -> Option<&'a Node> {
        self.nodes().by_name(name)
    }

    pub(super) fn node_by_provider_id(&self, provider_id: &str) -> Option<&'a Node> {
        self.nodes().by_provider_id(provider_id)
    }
}

/// What decides the pool's flow, read before any work (upstream's gates, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FlowFacts<'a> {
    /// An object the pool decides on cannot be read, and why.
    pub unreadable: Option<(ObjectKey, String)>,
    pub deleting: bool,
    pub has_finalizer: bool,
    pub cluster: Option<&'a Cluster>,
    /// The Cluster or the pool is paused.
    pub paused: bool,
}

/// Where one reconcile of a pool goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PoolFlow<'a> {
    /// Wait (and say so) until the object reads again.
    WaitForReadable((ObjectKey, String)),
    /// Deleting with the finalizer gone: nothing is left to do.
    Released,
    /// The finalizer comes first.
    AddFinalizer,
    WaitForCluster,
    Paused,
    Delete(&'a Cluster),
    Reconcile(&'a Cluster),
}

impl<'a> PoolFlow<'a> {
    pub(super) fn of(f: FlowFacts<'a>) -> Self {
        match (
            f.unreadable,
            f.deleting,
            f.has_finalizer,
            f.cluster,
            f.paused,
        ) {
            (Some(unknown), ..) => PoolFlow::WaitForReadable(unknown),
            (None, true, false, ..) => PoolFlow::Released,
            (None, false, false, ..) => PoolFlow::AddFinalizer,
            (None, _, true, None, _) => PoolFlow::WaitForCluster,
            (None, _, true, Some(_), true) => PoolFlow::Paused,
            (None, true, true, Some(cluster), false) => PoolFlow::Delete(cluster),
            (None, false, true, Some(cluster), false) => PoolFlow::Reconcile(cluster),
        }
    }
}

fn flow_facts<'a>(cx: &Ctx<'a>) -> FlowFacts<'a> {
    let mp = cx.mp;
    let cluster_key = ObjectKey::management(Kind::Cluster, &mp.meta.namespace, &mp.cluster_name);
    let cluster = cx.store.cluster(&cluster_key);
    FlowFacts {
        unreadable: unreadable_dependency(cx),
        deleting: mp.meta.is_deleting(),
        has_finalizer: mp
            .meta
            .finalizers
            .iter()
            .any(|f| f == MACHINE_POOL_FINALIZER),
        paused: cluster.is_some_and(|c| c.paused) || crate::ownership::paused_for_us(&mp.meta),
        cluster,
    }
}

/// The pool's reconcile: its flow, then the normal or deletion steps and the status write.
pub fn reconcile(cx: &Ctx<'_>) -> Plan {
    let mut plan = Plan::default();
    let mp = cx.mp;
    let (cluster, deleting) = match PoolFlow::of(flow_facts(cx)) {
        PoolFlow::WaitForReadable(unknown) => {
            wait_for_readable(cx, unknown, &mut plan);
            return plan;
        }
        PoolFlow::Released => return plan,
        PoolFlow::AddFinalizer => {
            plan.issue(
                Action::AddFinalizer {
                    target: cx.pool_target(),
                    finalizer: MACHINE_POOL_FINALIZER.to_string(),
                },
                format!("MachinePool {} has no finalizer yet", cx.pool_name()),
            );
            return plan;
        }
        PoolFlow::WaitForCluster => {
            tracing::info!(
                pool = %cx.pool_name(),
                "Failed to get Cluster {}/{} for MachinePool",
                mp.meta.namespace,
                mp.cluster_name
            );
            return plan;
        }
        PoolFlow::Paused => {
            tracing::debug!(pool = %cx.pool_name(), "Reconciliation is paused for this object");
            return plan;
        }
        PoolFlow::Delete(cluster) => (cluster, true),
        PoolFlow::Reconcile(cluster) => (cluster, false),
    };
    set_owner_and_labels(cx, cluster, &mut plan);
    let mut draft = Draft::of(mp);
    let mut infra_loaded = None;
    if deleting {
        reconcile_delete(cx, &mut plan);
    } else {
        reconcile_bootstrap(cx, &mut draft, &mut plan);
        infra_loaded = reconcile_infrastructure(cx, &mut draft, &mut plan);
        reconcile_node_refs(cx, &mut draft, &mut plan);
    }
    if let Some(infra) = infra_loaded {
        update_status(cx, infra, &mut draft);
    }
    draft.phase = Some(next_phase(&PhaseFacts {
        previous: mp.status.phase.as_deref(),
        bootstrap_data_secret_created: draft.bootstrap_created,
        infrastructure_provisioned: draft.infra_provisioned,
        node_refs: draft.node_refs(mp).len(),
        spec_replicas: mp.replicas,
        legacy_ready_replicas: draft.legacy_ready.unwrap_or(0),
        replicas_managed_externally: replicas_managed_externally(
            mp.meta
                .annotations
                .get(REPLICAS_MANAGED_BY_ANNOTATION)
                .map(String::as_str),
        ),
        deleting,
        failure_surfaced: draft.failure_reason.is_some() || draft.failure_message.is_some(),
    }));
    write_pool(cx, draft, &mut plan);
    plan
}
