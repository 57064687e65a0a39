//! Cluster API's own core manager for Machine deletion, as upstream behaves (`world:
//! capiManager: true`): a model, not this product's engine, so a shadow run is compared with
//! something that can disagree. It follows `reconcileDelete` (`engine/docs/capi.md` Part 2 §1.2,
//! none of this product's Part 1 decisions), one step per reconcile:
//!
//! | step | upstream (`core/reconcilers/machine/machine_controller.go`) |
//! |---|---|
//! | every Machine: its `Paused` condition (`capi_paused`); paused, or that condition just written: nothing more | `reconcile`: `EnsurePausedCondition` before the deletion branch |
//! | node operations only when `isDeleteNodeAllowed` (Cluster not deleting, a nodeRef, an active control-plane Machine) | §1.3 |
//! | pre-drain hooks hold: `WaitingForPreDrainHook` | §1.2 3a |
//! | drain (unless excluded, pre-terminate started, infrastructure gone or deleting, or its timeout, `nodeDrainTimeoutSeconds` or v1beta1 `nodeDrainTimeout`, passed): cordon, evict the pods of the lowest drain order (`capi_drain`: not those of a DaemonSet that exists, mirror pods, the drain label's or a MachineDrainRule's Skip and WaitCompleted), on an unreachable Node with a 1 s grace period and skipping pods deleting for over 1 s; a drain error shows as upstream's `Error draining Node` message; the next reconcile deferred 20 s; `DrainingNode` with upstream's message (pods deleting, refusals); a Node that is gone is drained | §1.2 3b, §1.4, §1.5, §1.6 |
//! | volume detach (unless excluded or timed out): `status.volumesAttached` empty, requeue 20 s: `WaitingForVolumeDetach` | §1.2 3c, §1.7 |
//! | pre-terminate hooks hold (even when node operations are not allowed): `WaitingForPreTerminateHook` | §1.2 4 |
//! | delete the infrastructure, then the bootstrap config, waiting for each to go | §1.2 5, 6 |
//! | delete the Node (when allowed), then `DeletionCompleted` and the finalizer removed | §1.2 7, 8 |
//!
//! It acts as actor `capi` on the timeline: its writes are the world's, never the controller's.
//! Also KCP's one rule that matters beside this controller: it removes its `kcp-cleanup`
//! pre-terminate hook from a deleting control-plane Machine only when no other pre-terminate
//! hook is present (actor `kcp`). At its start it reconciles every Machine already deleting.
//! Its MachineSet controller (`spec.replicas`) is played by the world (`sim/src/machine_sets.rs`).
//! Its MachineHealthCheck controller is `sim/src/capi_health.rs`, its MachinePool controller
//! `sim/src/capi_pools.rs`. Which pods its drain evicts, waits for or leaves alone (the drain
//! label, MachineDrainRules and their order) is `sim/src/capi_drain.rs`.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, eviction, json};
use crate::capi_drain;
use crate::capi_writer::writer;
use crate::env::Env;
use crate::event::Event;
use crate::scenario::CapiRelease;
use engine::model::{
    CONTROL_PLANE_LABEL, EXCLUDE_DRAIN_ANNOTATION, EXCLUDE_VOLUME_DETACH_ANNOTATION,
    MACHINE_FINALIZER, PAUSED_ANNOTATION, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, Scope,
};
use engine::time::{Duration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The timeline's actor for CAPI's manager.
pub const ACTOR: &str = "capi";
/// The timeline's actor for the KubeadmControlPlane controller's part the model plays.
pub const KCP_ACTOR: &str = "kcp";
/// KCP's pre-terminate hook on its Machines.
pub const KCP_CLEANUP_HOOK: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/kcp-cleanup";
/// How soon it reconciles after a write it watches (controller-runtime's queue, a moment).
const REACTION: Duration = Duration::from_millis(500);
/// `drainRetryInterval` and `waitForVolumeDetachRetryInterval`.
const RETRY: Duration = Duration::from_secs(20);

const LEASE_NAME: &str = "controller-leader-election-capi";
const LEASE_NAMESPACE: &str = "capi-system";
const HOLDER: &str = "capi-controller-manager-sim";
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The manager's Deployment, as upstream's manifests name it, and the release the model plays
/// (what `lifecycle preflight` reads from its image).
pub const DEPLOYMENT_NAME: &str = "capi-controller-manager";

/// What the model remembers between reconciles.
#[derive(Clone, Debug, Default)]
pub struct CapiModel {
    /// Whether the world runs it (`capiManager: true`).
    pub enabled: bool,
    /// The release its Deployment's image names (`capiRelease`, a timeline step changes it).
    release: CapiRelease,
    /// Reconciles queued: a Machine once per instant (a work queue dedups keys; a requeue
    /// later does not hold back a reaction now).
    queued: BTreeSet<(ObjKey, Timestamp)>,
    /// MachineHealthCheck reconciles queued, likewise.
    health_queued: BTreeSet<(ObjKey, Timestamp)>,
    /// MachinePool reconciles queued, likewise.
    pools_queued: BTreeSet<(ObjKey, Timestamp)>,
    /// MachineSet reconciles queued (for owner remediation), likewise.
    machine_sets_queued: BTreeSet<(ObjKey, Timestamp)>,
    /// MachineDeployment reconciles queued, likewise.
    deployments_queued: BTreeSet<(ObjKey, Timestamp)>,
    /// Machines whose unfinished drain deferred their next reconcile to this time
    /// (`DeferNextReconcileForObject`): a reconcile sooner (its own status write) returns.
    deferred: BTreeMap<ObjKey, Timestamp>,
}

/// Where one reconcile stopped.
enum Step {
    /// Held: write `Deleting` with this reason and message; try again after `retry`.
    Wait {
        reason: &'static str,
        message: String,
        retry: Option<Duration>,
    },
    /// The Machine is gone from the model's hands (finalizer removed, or not its business).
    Done,
}

impl CapiModel {
    pub fn new(enabled: bool, release: CapiRelease) -> Self {
        CapiModel {
            enabled,
            release,
            ..Default::default()
        }
    }

    /// Cluster API upgraded (or downgraded) to `release`: the Deployment's image names it and
    /// the manager restarts (its new pod lists everything and reconciles every Machine
    /// deleting, every MHC and MachinePool, as at its start). Without the model, only the
    /// Deployment a scenario lists changes.
    pub(crate) fn upgrade(&mut self, env: &mut Env<'_>, release: &CapiRelease) {
        let key = ObjKey::new("apps", "Deployment", LEASE_NAMESPACE, DEPLOYMENT_NAME);
        let before = self.release.clone();
        self.release = release.clone();
        let patch = json!({"spec": {"template": {"spec": {"containers": [container(release)]}}}});
        match env
            .api
            .store_mut(&Scope::Management)
            .patch(&key, &patch, Part::Main)
        {
            Ok(w) => {
                env.line(
                    "scenario",
                    "CapiRelease",
                    crate::api::describe(&Scope::Management, &key),
                    format!("{before} -> {release} (image {})", release.image()),
                );
                env.changed(&Scope::Management, w);
            }
            Err(e) => env.line(
                "scenario",
                "CapiRelease",
                crate::api::describe(&Scope::Management, &key),
                format!("no manager Deployment to upgrade: {e:?}"),
            ),
        }
        if self.enabled {
            self.resync(env);
        }
    }

    /// A write CAPI's manager watches: the objects its controllers reconcile for it (the
    /// Machines, MHCs, MachinePools, MachineSets and MachineDeployments it concerns) soon.
    pub(crate) fn react(
        &mut self,
        env: &mut Env<'_>,
        scope: &Scope,
        key: &ObjKey,
        removed: Option<&Value>,
    ) {
        if !self.enabled {
            return;
        }
        // Its MHC controller watches MHCs, Machines, Clusters and the workload Nodes.
        let health = match scope {
            Scope::Management
                if key.group == "cluster.x-k8s.io"
                    && matches!(
                        key.kind.as_str(),
                        "MachineHealthCheck" | "Machine" | "Cluster"
                    ) =>
            {
                crate::capi_health::mhcs_of(env, &key.namespace)
            }
            Scope::Workload(c) if key.kind == "Node" && key.group.is_empty() => {
                crate::capi_health::mhcs_of(env, &c.namespace)
            }
            _ => Vec::new(),
        };
        for mhc in health {
            self.queue_health(env, mhc, REACTION);
        }
        // Its MachinePool controller watches MachinePools, their Cluster, bootstrap and
        // infrastructure objects, and the workload Nodes.
        let pools = match scope {
            Scope::Management
                if key.kind == "MachinePool"
                    || key.kind == "Cluster"
                    || crate::api::is_provider_group(&key.group) =>
            {
                crate::capi_pools::pools(env)
                    .into_iter()
                    .filter(|p| p.namespace == key.namespace)
                    .collect()
            }
            Scope::Workload(_) if key.kind == "Node" && key.group.is_empty() => {
                crate::capi_pools::pools_of(env, scope)
            }
            _ => Vec::new(),
        };
        for pool in pools {
            self.queue_pool(env, pool, REACTION);
        }
        self.react_sets(env, scope, key, removed);
        let machines: Vec<ObjKey> = match scope {
            Scope::Management => env
                .api
                .store(scope)
                .map(|s| {
                    s.list("cluster.x-k8s.io", "Machine")
                        .filter(|(k, m)| {
                            // Any Machine written, or of a Cluster written (its Paused
                            // condition); a deleting one on a provider object's change too.
                            let of_cluster = key.kind == "Cluster"
                                && key.group == "cluster.x-k8s.io"
                                && k.namespace == key.namespace
                                && json::str_at(m, "spec.clusterName") == Some(key.name.as_str());
                            *k == key
                                || of_cluster
                                || (json::is_deleting(m)
                                    && (key.kind == "Cluster"
                                        || crate::api::is_provider_group(&key.group)))
                        })
                        .map(|(k, _)| k.clone())
                        .collect()
                })
                .unwrap_or_default(),
            // In a workload cluster it watches Nodes (not Pods: a drain is requeued).
            Scope::Workload(_) if key.kind != "Node" || !key.group.is_empty() => Vec::new(),
            Scope::Workload(_) => env
                .api
                .store(&Scope::Management)
                .map(|s| {
                    s.list("cluster.x-k8s.io", "Machine")
                        .filter(|(_, m)| json::is_deleting(m))
                        .filter(|(_, m)| {
                            json::str_at(m, "spec.clusterName")
                                .is_some_and(|c| env.api.workload_scope(c) == *scope)
                        })
                        .map(|(k, _)| k.clone())
                        .collect()
                })
                .unwrap_or_default(),
        };
        for machine in machines {
            self.queue(env, machine, REACTION);
        }
    }

    /// CAPI's manager holds its leader Lease (`capi-system/controller-leader-election-capi`,
    /// renewed every 10 s), so a controller started `--mode alone` against `sim serve` finds it
    /// active.
    pub(crate) fn start(&mut self, env: &mut Env<'_>) {
        if !self.enabled {
            return;
        }
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE},
            "spec": {"holderIdentity": HOLDER, "leaseDurationSeconds": 15,
                "acquireTime": env.clock.now.to_rfc3339(), "renewTime": env.clock.now.to_rfc3339()}
        });
        let now = env.clock.now;
        let store = env.api.store_mut(&Scope::Management);
        // Created with the Lease; only a release change (`capiRelease`) changes it.
        let _ = store.create(deployment(&self.release), now);
        if store.create(lease, now).is_ok() {
            env.schedule_in(LEASE_RENEW, Event::CapiLeaseRenew);
        }
        self.resync(env);
    }

    /// Its first list: every Machine (its `Paused` condition, the deletion of one already being
    /// deleted), every MHC and every MachinePool is reconciled at once.
    fn resync(&mut self, env: &mut Env<'_>) {
        let machines: Vec<ObjKey> = env
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list("cluster.x-k8s.io", "Machine")
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        for machine in machines {
            self.queue(env, machine, REACTION);
        }
        let namespaces: BTreeSet<String> = env
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list("cluster.x-k8s.io", "MachineHealthCheck")
                    .map(|(k, _)| k.namespace.to_string())
                    .collect()
            })
            .unwrap_or_default();
        for namespace in namespaces {
            for mhc in crate::capi_health::mhcs_of(env, &namespace) {
                self.queue_health(env, mhc, REACTION);
            }
        }
        for pool in crate::capi_pools::pools(env) {
            self.queue_pool(env, pool, REACTION);
        }
        let deployments: Vec<ObjKey> = env
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list("cluster.x-k8s.io", "MachineDeployment")
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        for md in deployments {
            self.queue_deployment(env, md);
        }
    }

    /// Its MachineSet and MachineDeployment controllers' share of a write.
    fn react_sets(
        &mut self,
        env: &mut Env<'_>,
        scope: &Scope,
        key: &ObjKey,
        removed: Option<&Value>,
    ) {
        if *scope != Scope::Management || key.group != "cluster.x-k8s.io" {
            return;
        }
        // Its MachineSet controller watches the Machines it controls (their health conditions
        // start owner remediation, `sim/src/capi_remediation.rs`).
        if key.kind == "Machine" {
            // A Machine gone is mapped to its MachineSet from its last state (a watch's delete).
            let ms = env.api.get(scope, key).or(removed).and_then(|m| {
                json::controller(m)
                    .filter(|(kind, _)| *kind == "MachineSet")
                    .map(|(_, name)| {
                        ObjKey::new("cluster.x-k8s.io", "MachineSet", &key.namespace, name)
                    })
            });
            if let Some(ms) = ms {
                let at = env.clock.now + REACTION;
                if self.machine_sets_queued.insert((ms.clone(), at)) {
                    env.schedule(at, Event::CapiMachineSetReconcile { ms: ms.clone() });
                }
                self.queue_deployment_of(env, &ms);
            }
        }
        // Its MachineDeployment controller watches MachineDeployments and the MachineSets
        // they control (a MachineSet's Machines bring it back through their MachineSet).
        match key.kind.as_str() {
            "MachineDeployment" => self.queue_deployment(env, key.clone()),
            "MachineSet" => self.queue_deployment_of(env, key),
            _ => {}
        }
    }

    /// Queues the reconcile of the MachineDeployment that controls MachineSet `ms`, if any.
    fn queue_deployment_of(&mut self, env: &mut Env<'_>, ms: &ObjKey) {
        let md = env.api.get(&Scope::Management, ms).and_then(|ms_obj| {
            json::controller(ms_obj)
                .filter(|(kind, _)| *kind == "MachineDeployment")
                .map(|(_, name)| {
                    ObjKey::new("cluster.x-k8s.io", "MachineDeployment", &ms.namespace, name)
                })
        });
        if let Some(md) = md {
            self.queue_deployment(env, md);
        }
    }

    fn queue_deployment(&mut self, env: &mut Env<'_>, md: ObjKey) {
        let at = env.clock.now + REACTION;
        if self.deployments_queued.insert((md.clone(), at)) {
            env.schedule(at, Event::CapiDeploymentReconcile { md });
        }
    }

    /// One reconcile of a MachineDeployment by CAPI's manager (`capi_deployments`).
    pub(crate) fn reconcile_deployment(&mut self, env: &mut Env<'_>, md: &ObjKey) {
        self.deployments_queued.remove(&(md.clone(), env.clock.now));
        crate::capi_deployments::reconcile(env, ACTOR, md);
    }

    /// A queued MachineSet reconcile is due (the world runs it: remediation, then replicas).
    pub(crate) fn machine_set_dequeued(&mut self, env: &Env<'_>, ms: &ObjKey) {
        self.machine_sets_queued
            .remove(&(ms.clone(), env.clock.now));
    }

    fn queue_pool(&mut self, env: &mut Env<'_>, pool: ObjKey, after: Duration) {
        let at = env.clock.now + after;
        if self.pools_queued.insert((pool.clone(), at)) {
            env.schedule(at, Event::CapiPoolReconcile { pool });
        }
    }

    /// One reconcile of a MachinePool by CAPI's manager; requeued when upstream requeues.
    pub(crate) fn reconcile_pool(&mut self, env: &mut Env<'_>, pool: &ObjKey) {
        self.pools_queued.remove(&(pool.clone(), env.clock.now));
        if let Some(after) = crate::capi_pools::reconcile(env, ACTOR, pool) {
            self.queue_pool(env, pool.clone(), after.max(REACTION));
        }
    }

    fn queue_health(&mut self, env: &mut Env<'_>, mhc: ObjKey, after: Duration) {
        let at = env.clock.now + after;
        if self.health_queued.insert((mhc.clone(), at)) {
            env.schedule(at, Event::CapiHealthCheck { mhc });
        }
    }

    /// One reconcile of a MachineHealthCheck by CAPI's manager; requeued at the next timeout.
    pub(crate) fn check_health(&mut self, env: &mut Env<'_>, mhc: &ObjKey) {
        self.health_queued.remove(&(mhc.clone(), env.clock.now));
        if let Some(at) = crate::capi_health::reconcile(env, ACTOR, mhc) {
            let after = at.since(env.clock.now);
            self.queue_health(env, mhc.clone(), after);
        }
    }

    pub(crate) fn renew_lease(&mut self, env: &mut Env<'_>) {
        let key = ObjKey::new("coordination.k8s.io", "Lease", LEASE_NAMESPACE, LEASE_NAME);
        let renewed = json!({"spec": {"renewTime": env.clock.now.to_rfc3339()}});
        if let Ok(w) = env
            .api
            .store_mut(&Scope::Management)
            .patch(&key, &renewed, Part::Main)
        {
            env.changed(&Scope::Management, w);
        }
        env.schedule_in(LEASE_RENEW, Event::CapiLeaseRenew);
    }

    fn queue(&mut self, env: &mut Env<'_>, machine: ObjKey, after: Duration) {
        let at = env.clock.now + after;
        if self.queued.insert((machine.clone(), at)) {
            env.schedule(at, Event::CapiReconcile { machine });
        }
    }

    /// One reconcile of a Machine by CAPI's manager: its `Paused` condition, then, unless it
    /// is paused or that condition just changed, its deletion.
    pub(crate) fn reconcile(&mut self, env: &mut Env<'_>, key: &ObjKey) {
        self.queued.remove(&(key.clone(), env.clock.now));
        let Some(machine) = env.api.get(&Scope::Management, key).cloned() else {
            return;
        };
        if crate::capi_paused::ensure(env, ACTOR, key, &machine) {
            return;
        }
        if !json::is_deleting(&machine)
            || !json::finalizers(&machine)
                .iter()
                .any(|f| f == MACHINE_FINALIZER)
        {
            return;
        }
        if self.deferred.get(key).is_some_and(|&t| env.clock.now < t) {
            return;
        }
        self.deferred.remove(key);
        match self.delete_step(env, key, &machine) {
            Step::Wait {
                reason,
                message,
                retry,
            } => {
                self.deleting_condition(env, key, &machine, reason, &message);
                if let Some(after) = retry {
                    self.queue(env, key.clone(), after);
                }
            }
            Step::Done => {}
        }
    }

    fn delete_step(&mut self, env: &mut Env<'_>, key: &ObjKey, machine: &Value) -> Step {
        let cluster_name = json::str_at(machine, "spec.clusterName")
            .unwrap_or_default()
            .to_string();
        let cluster = env
            .api
            .get(
                &Scope::Management,
                &ObjKey::new("cluster.x-k8s.io", "Cluster", &key.namespace, &cluster_name),
            )
            .cloned();
        let annotations = json::annotations(machine);
        let paused = cluster
            .as_ref()
            .is_some_and(|c| c.at_pointer("/spec/paused").and_then(Value::as_bool) == Some(true))
            || annotations.contains_key(PAUSED_ANNOTATION);
        if paused {
            return Step::Done;
        }
        let scope = env.api.workload_scope(&cluster_name);
        let node_name = json::str_at(machine, "status.nodeRef.name").map(str::to_string);
        let node_allowed = !cluster.as_ref().is_some_and(json::is_deleting)
            && node_name.is_some()
            && self.active_control_planes(env, &key.namespace, &cluster_name) > 0;
        let infra = machine
            .at_pointer("/spec/infrastructureRef")
            .and_then(|r| json::ref_target(r, &key.namespace))
            .map(|(k, _)| k);
        let infra_obj = infra
            .as_ref()
            .and_then(|k| env.api.get(&Scope::Management, k))
            .cloned();
        let pre_terminate_started = machine
            .at_pointer("/status/deletion/waitForPreTerminateHookStartTime")
            .is_some_and(|v| !v.is_null());
        if node_allowed {
            let hooks = hooks(&annotations, PRE_DRAIN_HOOK_PREFIX);
            if !hooks.is_empty() {
                self.start_time(env, key, "waitForPreDrainHookStartTime");
                return Step::Wait {
                    reason: "WaitingForPreDrainHook",
                    message: format!(
                        "Waiting for pre-drain hooks to succeed (hooks: {})",
                        hooks.join(",")
                    ),
                    retry: None,
                };
            }
            let node = node_name.as_deref().unwrap_or_default();
            let infra_present = infra_obj.as_ref().is_some_and(|o| !json::is_deleting(o));
            let v1beta1 = json::api_version(machine).ends_with("v1beta1");
            let drain_timeout = if v1beta1 {
                json::str_at(machine, "spec.nodeDrainTimeout").and_then(json::go_duration)
            } else {
                seconds_at(machine, "/spec/deletion/nodeDrainTimeoutSeconds")
            };
            if !annotations.contains_key(EXCLUDE_DRAIN_ANNOTATION)
                && !pre_terminate_started
                && infra_present
                && !timed_out(machine, "nodeDrainStartTime", drain_timeout, env.clock.now)
            {
                let started = self.start_time(env, key, "nodeDrainStartTime");
                match self.drain(env, machine, &scope, node) {
                    Drain::Finished => {}
                    Drain::Unfinished(lines) => {
                        self.deferred.insert(key.clone(), env.clock.now + RETRY);
                        return Step::Wait {
                            reason: "DrainingNode",
                            message: format!(
                                "Drain not completed yet (started at {started}):{lines}"
                            ),
                            retry: Some(RETRY),
                        };
                    }
                    Drain::Failed(error) => {
                        env.line(
                            ACTOR,
                            "DrainFailed",
                            crate::api::describe(&Scope::Management, key),
                            error,
                        );
                        return Step::Wait {
                            reason: "DrainingNode",
                            message: "Error draining Node, please check controller logs for errors"
                                .into(),
                            retry: Some(RETRY),
                        };
                    }
                }
            }
            let detach_timeout = if v1beta1 {
                json::str_at(machine, "spec.nodeVolumeDetachTimeout").and_then(json::go_duration)
            } else {
                seconds_at(machine, "/spec/deletion/nodeVolumeDetachTimeoutSeconds")
            };
            if !annotations.contains_key(EXCLUDE_VOLUME_DETACH_ANNOTATION)
                && !pre_terminate_started
                && infra_present
                && !timed_out(
                    machine,
                    "waitForNodeVolumeDetachStartTime",
                    detach_timeout,
                    env.clock.now,
                )
            {
                let attached = env
                    .api
                    .get(&scope, &ObjKey::new("", "Node", "", node))
                    .and_then(|n| n.at_pointer("/status/volumesAttached"))
                    .and_then(Value::as_array)
                    .is_some_and(|v| !v.is_empty());
                if attached {
                    let started = self.start_time(env, key, "waitForNodeVolumeDetachStartTime");
                    return Step::Wait {
                        reason: "WaitingForVolumeDetach",
                        message: format!(
                            "Waiting for Node volumes to be detached (started at {started})"
                        ),
                        retry: Some(RETRY),
                    };
                }
            }
        }
        let hooks = hooks(&annotations, PRE_TERMINATE_HOOK_PREFIX);
        // KCP's rule (its reconcileDelete): it removes its own kcp-cleanup hook from a deleting
        // control-plane Machine only when no other pre-terminate hook is present.
        if hooks == [KCP_CLEANUP_HOOK] && machine_is_control_plane(machine) {
            let patch = json!({"metadata": {"annotations": {KCP_CLEANUP_HOOK: null}}});
            if let Ok(w) = env
                .api
                .store_mut(&Scope::Management)
                .patch(key, &patch, Part::Main)
            {
                env.line(
                    KCP_ACTOR,
                    "RemoveHook",
                    crate::api::describe(&Scope::Management, key),
                    format!("{KCP_CLEANUP_HOOK}: no other pre-terminate hook is present"),
                );
                env.changed(&Scope::Management, w);
            }
            return Step::Wait {
                reason: "WaitingForPreTerminateHook",
                message: format!(
                    "Waiting for pre-terminate hooks to succeed (hooks: {KCP_CLEANUP_HOOK})"
                ),
                retry: Some(REACTION),
            };
        }
        if !hooks.is_empty() {
            self.start_time(env, key, "waitForPreTerminateHookStartTime");
            return Step::Wait {
                reason: "WaitingForPreTerminateHook",
                message: format!(
                    "Waiting for pre-terminate hooks to succeed (hooks: {})",
                    hooks.join(",")
                ),
                retry: None,
            };
        }
        let bootstrap = machine
            .at_pointer("/spec/bootstrap/configRef")
            .and_then(|r| json::ref_target(r, &key.namespace))
            .map(|(k, _)| k);
        for (target, action, reason) in [
            (
                infra,
                "DeleteInfrastructure",
                "WaitingForInfrastructureDeletion",
            ),
            (bootstrap, "DeleteBootstrap", "WaitingForBootstrapDeletion"),
        ] {
            let Some(target) = target else { continue };
            let Some(obj) = env.api.get(&Scope::Management, &target).cloned() else {
                continue;
            };
            if !json::is_deleting(&obj) {
                self.delete(env, &Scope::Management, &target, action);
            }
            if env.api.get(&Scope::Management, &target).is_some() {
                return Step::Wait {
                    reason,
                    message: format!("Waiting for {} to be deleted", target.kind),
                    retry: None,
                };
            }
        }
        if node_allowed {
            let node = ObjKey::new("", "Node", "", node_name.as_deref().unwrap_or_default());
            if env.api.get(&scope, &node).is_some() {
                self.delete(env, &scope, &node, "DeleteNode");
            }
        }
        self.deleting_condition(env, key, machine, "DeletionCompleted", "Deletion completed");
        let rest: Vec<String> = json::finalizers(machine)
            .into_iter()
            .filter(|f| f != MACHINE_FINALIZER)
            .collect();
        let now = env.clock.now;
        if let Ok(w) = env.api.store_mut(&Scope::Management).patch_by(
            key,
            &json!({"metadata": {"finalizers": rest}}),
            Part::Main,
            &writer(Part::Main),
            now,
        ) {
            env.line(
                ACTOR,
                "RemoveFinalizer",
                key.to_string(),
                format!("{MACHINE_FINALIZER} | Deletion completed"),
            );
            env.changed(&Scope::Management, w);
        }
        Step::Done
    }

    /// Active (not deleting) control-plane Machines of a Cluster.
    fn active_control_planes(&self, env: &Env<'_>, namespace: &str, cluster: &str) -> usize {
        env.api.store(&Scope::Management).map_or(0, |s| {
            s.list("cluster.x-k8s.io", "Machine")
                .filter(|(k, m)| {
                    k.namespace == namespace
                        && json::str_at(m, "spec.clusterName") == Some(cluster)
                        && !json::is_deleting(m)
                        && json::labels(m).contains_key(CONTROL_PLANE_LABEL)
                })
                .count()
        })
    }

    /// Cordons the Node and evicts what a drain evicts now (`capi_drain`): finished once
    /// nothing is left to wait for (or the Node is gone), else the lines upstream's condition
    /// message lists (`EvictionResult.ConditionMessage`, §1.6).
    fn drain(&mut self, env: &mut Env<'_>, machine: &Value, scope: &Scope, node: &str) -> Drain {
        let node_key = ObjKey::new("", "Node", "", node);
        let Some(node_obj) = env.api.get(scope, &node_key).cloned() else {
            return Drain::Finished;
        };
        if node_obj
            .at_pointer("/spec/unschedulable")
            .and_then(Value::as_bool)
            != Some(true)
            && let Ok(w) = env.api.store_mut(scope).patch(
                &node_key,
                &json!({"spec": {"unschedulable": true}}),
                Part::Main,
            )
        {
            env.line(
                ACTOR,
                "Cordon",
                crate::api::describe(scope, &node_key),
                "spec.unschedulable=true".into(),
            );
            env.changed(scope, w);
        }
        let cluster_labels = env
            .api
            .get(
                &Scope::Management,
                &ObjKey::new(
                    "cluster.x-k8s.io",
                    "Cluster",
                    json::namespace(machine),
                    json::str_at(machine, "spec.clusterName").unwrap_or_default(),
                ),
            )
            .map(json::labels)
            .unwrap_or_default();
        let management = env.api.store(&Scope::Management);
        let rules = match management
            .map(|m| capi_drain::Rules::for_machine(m, machine, &cluster_labels))
            .transpose()
        {
            Ok(rules) => rules,
            Err(e) => return Drain::Failed(e),
        };
        // An unreachable Node (Ready Unknown): pods deleting for over a second are skipped and
        // evictions ask a one-second grace period.
        let unreachable = node_obj
            .at_pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "Unknown");
        let now = env.clock.now;
        let mut waited: Vec<(ObjKey, capi_drain::Behavior, i32, bool)> = Vec::new();
        let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if let (Some(s), Some(rules)) = (env.api.store(scope), &rules) {
            for (key, pod) in s.list("", "Pod") {
                if json::str_at(pod, "spec.nodeName") != Some(node) {
                    continue;
                }
                match capi_drain::classify(s, pod, rules, unreachable, now) {
                    capi_drain::Verdict::Decided {
                        behavior: capi_drain::Behavior::Skip,
                        ..
                    } => {}
                    capi_drain::Verdict::Decided { behavior, order } => {
                        waited.push((key.clone(), behavior, order, json::is_deleting(pod)))
                    }
                    capi_drain::Verdict::Error(e) => errors
                        .entry(e)
                        .or_default()
                        .push(format!("{}/{}", key.namespace, key.name)),
                }
            }
        }
        if !errors.is_empty() {
            let pods: Vec<String> = errors
                .iter()
                .map(|(e, pods)| format!("Pods with error {e:?}: {}", pods.join(", ")))
                .collect();
            return Drain::Failed(format!(
                "failed to get Pods for eviction: {}",
                pods.join(", ")
            ));
        }
        let Some(min_order) = waited.iter().map(|(_, _, order, _)| *order).min() else {
            return Drain::Finished;
        };
        let grace = unreachable.then_some(1);
        let mut lines = Unfinished::default();
        for (pod, behavior, order, deleting) in &waited {
            let named = format!("{}/{}", pod.namespace, pod.name);
            let now_turn = *order == min_order;
            match behavior {
                capi_drain::Behavior::WaitCompleted if now_turn => lines.wait_now.push(named),
                capi_drain::Behavior::WaitCompleted => lines.wait_later.push(named),
                _ if *deleting => lines.deleting.push(named),
                _ if !now_turn => lines.evict_later.push(named),
                _ => evict(env, (scope, node, grace), pod, named, &mut lines),
            }
        }
        Drain::Unfinished(lines.message())
    }

    /// Deletes an object as CAPI's manager does (NotFound is fine).
    fn delete(&mut self, env: &mut Env<'_>, scope: &Scope, key: &ObjKey, action: &str) {
        let now = env.clock.now;
        if let Ok(w) = env.api.store_mut(scope).delete(key, now) {
            env.line(
                ACTOR,
                action,
                crate::api::describe(scope, key),
                String::new(),
            );
            env.changed(scope, w);
        }
    }

    /// Sets `status.deletion.<field>` once; returns its value (RFC 3339).
    fn start_time(&mut self, env: &mut Env<'_>, key: &ObjKey, field: &str) -> String {
        let now = env.clock.now.to_rfc3339();
        let Some(machine) = env.api.get(&Scope::Management, key) else {
            return now;
        };
        if let Some(set) = machine
            .at_pointer(&format!("/status/deletion/{field}"))
            .and_then(Value::as_str)
        {
            return set.to_string();
        }
        if let Ok(w) = env.api.store_mut(&Scope::Management).patch_by(
            key,
            &json!({"status": {"deletion": {field: now}}}),
            Part::Status,
            &writer(Part::Status),
            env.clock.now,
        ) {
            env.changed(&Scope::Management, w);
        }
        now
    }

    /// Writes upstream's `Deleting` condition (and phase) when it changed.
    fn deleting_condition(
        &mut self,
        env: &mut Env<'_>,
        key: &ObjKey,
        machine: &Value,
        reason: &str,
        message: &str,
    ) {
        let Some(current) = env.api.get(&Scope::Management, key).cloned() else {
            return;
        };
        let v1beta1 = json::api_version(machine).ends_with("v1beta1");
        let path = if v1beta1 {
            "/status/v1beta2/conditions"
        } else {
            "/status/conditions"
        };
        let mut conditions: Vec<Value> = current
            .at_pointer(path)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let existing = conditions
            .iter()
            .position(|c| c.get("type").and_then(Value::as_str) == Some("Deleting"));
        if let Some(i) = existing {
            let c = &conditions[i];
            if c.get("reason").and_then(Value::as_str) == Some(reason)
                && c.get("message").and_then(Value::as_str) == Some(message)
            {
                return;
            }
        }
        // The time it turned True is kept while it stays True.
        let transition = existing
            .map(|i| &conditions[i])
            .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(env.clock.now.to_rfc3339()));
        let condition = json!({"type": "Deleting", "status": "True", "reason": reason,
            "message": message, "lastTransitionTime": transition});
        match existing {
            Some(i) => conditions[i] = condition,
            None => conditions.push(condition),
        }
        let patch = if v1beta1 {
            json!({"status": {"phase": "Deleting", "v1beta2": {"conditions": conditions}}})
        } else {
            json!({"status": {"phase": "Deleting", "conditions": conditions}})
        };
        let now = env.clock.now;
        if let Ok(w) = env.api.store_mut(&Scope::Management).patch_by(
            key,
            &patch,
            Part::Status,
            &writer(Part::Status),
            now,
        ) {
            env.line(
                ACTOR,
                "SetCondition",
                key.to_string(),
                format!("Deleting=True ({reason}) | {message}"),
            );
            env.changed(&Scope::Management, w);
        }
    }
}

/// The hook annotations with `prefix`, sorted (as upstream lists them).
/// The manager's Deployment as upstream's `config/manager` ships it, with the model's release
/// in the image tag and the MachinePool feature gate on.
fn deployment(release: &CapiRelease) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT_NAME, "namespace": LEASE_NAMESPACE,
            "labels": {"cluster.x-k8s.io/provider": "cluster-api", "control-plane": "controller-manager"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"cluster.x-k8s.io/provider": "cluster-api", "control-plane": "controller-manager"}},
            "template": {
                "metadata": {"labels": {"cluster.x-k8s.io/provider": "cluster-api", "control-plane": "controller-manager"}},
                "spec": {"containers": [container(release)]},
            },
        },
        // Running: what `lifecycle run --mode alone` looks for besides the Lease.
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
            "readyReplicas": 1, "availableReplicas": 1},
    })
}

/// The manager container: the release's image and upstream's arguments.
fn container(release: &CapiRelease) -> Value {
    json!({
        "name": "manager",
        "image": release.image(),
        "args": ["--leader-elect", "--diagnostics-address=:8443",
            "--feature-gates=MachinePool=true,ClusterTopology=false"],
    })
}

fn machine_is_control_plane(machine: &Value) -> bool {
    json::labels(machine).contains_key(CONTROL_PLANE_LABEL)
}

fn hooks(annotations: &std::collections::BTreeMap<String, String>, prefix: &str) -> Vec<String> {
    annotations
        .keys()
        .filter(|k| k.starts_with(prefix))
        .cloned()
        .collect()
}

/// A refused eviction as upstream's drain words it in the condition message.
fn failure_message(e: &crate::api::ApiError) -> String {
    const PDB: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
    match e {
        crate::api::ApiError::TooManyRequests { message, causes } => {
            let full = if causes.is_empty() {
                message.clone()
            } else {
                format!("{message} {}", causes.join(","))
            };
            let full = full.replace(PDB, &PDB.to_lowercase());
            if full.starts_with(&PDB.to_lowercase()) {
                full
            } else {
                format!("failed to evict Pod, {full}")
            }
        }
        crate::api::ApiError::Forbidden {
            namespace_terminating: true,
            ..
        } => "failed to evict Pod, Cannot evict pod from terminating namespace: unable to create eviction (kube-controller-manager should set deletionTimestamp)".into(),
        other => format!("failed to evict Pod, {other:?}"),
    }
}

/// Evicts one pod of the drain of a Node (its cluster, name and the eviction grace period);
/// its line goes where upstream's message puts it.
fn evict(
    env: &mut Env<'_>,
    (scope, node, grace): (&Scope, &str, Option<i64>),
    pod: &ObjKey,
    named: String,
    lines: &mut Unfinished,
) {
    match eviction::evict(env.api.store_mut(scope), pod, grace, env.clock.now) {
        Ok(eviction::Evicted::Deleting(w)) => {
            env.line(
                ACTOR,
                "Evict",
                crate::api::describe(scope, pod),
                format!("draining Node {node}"),
            );
            env.changed(scope, w);
            lines.deleting.push(named);
        }
        Err(e) => {
            let why = match &e {
                crate::api::ApiError::TooManyRequests { message, causes } => {
                    format!("{message} {}", causes.join(","))
                }
                other => format!("{other:?}"),
            };
            let detail = format!("draining Node {node}: {} {why}", e.code());
            env.line(
                ACTOR,
                "EvictRefused",
                crate::api::describe(scope, pod),
                detail,
            );
            lines
                .failed
                .entry(failure_message(&e))
                .or_default()
                .push(named);
        }
    }
}

/// How a drain pass ended.
enum Drain {
    /// Nothing left to wait for, or the Node is gone.
    Finished,
    /// The lines after the header of upstream's message.
    Unfinished(String),
    /// Upstream's drain returned this error.
    Failed(String),
}

/// The pods of an unfinished drain, as upstream's condition message groups them (§1.6).
#[derive(Default)]
struct Unfinished {
    deleting: Vec<String>,
    failed: BTreeMap<String, Vec<String>>,
    wait_now: Vec<String>,
    evict_later: Vec<String>,
    wait_later: Vec<String>,
}

impl Unfinished {
    /// Pods deleting, at most five failures sorted by message, pods waited for, then what
    /// comes after them; lists of more than three pods are cut (`ListToString`, n = 3).
    fn message(&self) -> String {
        let list = |names: &[String]| {
            let mut shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
            let more = names.len().saturating_sub(3);
            let more = format!("... ({more} more)");
            if names.len() > 3 {
                shown.push(&more);
            }
            shown.join(", ")
        };
        let pods = |names: &[String]| {
            let word = if names.len() == 1 { "Pod" } else { "Pods" };
            format!("{word} {}", list(names))
        };
        let mut out = String::new();
        if !self.deleting.is_empty() {
            out.push_str(&format!(
                "\n* {}: deletionTimestamp set, but still not removed from the Node",
                pods(&self.deleting)
            ));
        }
        for (message, names) in self.failed.iter().take(5) {
            out.push_str(&format!("\n* {}: {message}", pods(names)));
        }
        let others: usize = self.failed.values().skip(5).map(Vec::len).sum();
        if others > 0 {
            let word = if others == 1 { "Pod" } else { "Pods" };
            out.push_str(&format!("\n* {others} {word} with other issues"));
        }
        if !self.wait_now.is_empty() {
            out.push_str(&format!(
                "\n* {}: waiting for completion",
                pods(&self.wait_now)
            ));
        }
        if !self.evict_later.is_empty() {
            out.push_str(&format!(
                "\nAfter above Pods have been removed from the Node, the following Pods will be evicted: {}",
                list(&self.evict_later)
            ));
        }
        if !self.wait_later.is_empty() {
            out.push_str(&format!(
                "\nAfter above Pods have been removed from the Node, waiting for the following Pods to complete without eviction: {}",
                list(&self.wait_later)
            ));
        }
        out
    }
}

/// `spec.deletion.*Seconds` as a duration (nil or 0: no limit).
fn seconds_at(machine: &Value, pointer: &str) -> Option<Duration> {
    machine
        .at_pointer(pointer)
        .and_then(Value::as_i64)
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// Upstream's timeout rule: exceeded when the start time is set and `now - start >= timeout`.
fn timed_out(
    machine: &Value,
    start_field: &str,
    timeout: Option<Duration>,
    now: Timestamp,
) -> bool {
    let start = machine
        .at_pointer(&format!("/status/deletion/{start_field}"))
        .and_then(Value::as_str)
        .and_then(|t| Timestamp::parse_rfc3339(t).ok());
    match (start, timeout) {
        (Some(start), Some(timeout)) => now.since(start) >= timeout,
        _ => false,
    }
}
