//! The fake world's duties: kubelet, node lifecycle, volumes, rescheduling, pod GC, providers,
//! the fake MachineSet and the provisioning half of the Machine controller.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, Written, json};
use crate::defaults::PROVIDER_FINALIZER;
use crate::env::Env;
use crate::event::Event;
use crate::faults::Faults;
use crate::scenario::{FaultKind, MachineSetsMode, WorldKnobs};
use engine::model::Scope;
use engine::time::{Duration, parse_go_duration};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub const POD_GC_DELAY: Duration = Duration::from_secs(40);
pub const SHUTDOWN_ANNOTATION: &str = "sim.lifecycle.x-k8s.io/shutdown";
/// The label of the controller's own pod (a self-hosted management cluster): when it starts
/// terminating, the controller process dies and is started again.
pub const CONTROLLER_POD_LABEL: &str = "sim.lifecycle.x-k8s.io/controller";

#[derive(Clone, Debug, Default)]
pub struct WorldState {
    /// How the world behaves (the scenario's `world:`).
    pub knobs: WorldKnobs,
    /// Nodes whose kubelet is stopped.
    pub kubelet_stopped: BTreeSet<(Scope, String)>,
    /// Replacement counters per MachineSet and reschedule counters per pod base name.
    pub replacements: BTreeMap<ObjKey, u32>,
    pub reschedules: BTreeMap<(Scope, ObjKey), u32>,
    /// Pods waiting for a node to be scheduled on, with the node they must avoid (the one
    /// their predecessor left).
    pub unscheduled: BTreeMap<(Scope, ObjKey), Option<String>>,
    /// Machines the world provisions (created during the run).
    pub provisioning: BTreeSet<ObjKey>,
    /// Provider objects whose deletion has been scheduled.
    pub provider_deleting: BTreeSet<ObjKey>,
    /// InfraMachinePools played by the fake pool provider, with the replicas provisioned.
    pub managed_pools: BTreeMap<ObjKey, ObjKey>,
    /// Replicas a pool resize is heading to, per MachinePool.
    pub pool_targets: BTreeMap<ObjKey, i64>,
    /// Pod deletions already scheduled with the kubelet.
    pub shutting_down: BTreeSet<(Scope, ObjKey)>,
    /// Cluster API's own manager (`capiManager: true`).
    pub capi: crate::capi::CapiModel,
    /// The controller's own pod started terminating: the driver restarts the controller.
    pub controller_pod_evicted: bool,
}

fn controller_of(obj: &Value) -> Option<(String, String)> {
    obj.at_pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|o| {
            (
                o.get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                o.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            )
        })
}

/// How soon a provider tries a provisioning step again when the Machine cannot be read.
const PROVIDER_RETRY: engine::Duration = engine::Duration::from_secs(10);

impl WorldState {
    /// Reacts to a write as the world's controllers would.
    pub(crate) fn react(&mut self, env: &mut Env<'_>, scope: &Scope, written: &Written) {
        let key = &written.key;
        self.capi.react(env, scope, key, written.removed.as_deref());
        match (&written.object, key.group.as_str(), key.kind.as_str()) {
            (Some(pod), "", "Pod") if json::is_deleting(pod) => {
                self.pod_deleting(env, scope, key, pod.clone())
            }
            (None, "", "Pod") => self.pod_gone(env, scope, key, written.removed.as_deref()),
            (None, "", "Node") => {
                env.schedule_in(
                    POD_GC_DELAY,
                    Event::PodGc {
                        scope: scope.clone(),
                        node: key.name.clone(),
                    },
                );
            }
            (Some(node), "", "Node") if !json::is_deleting(node) => {
                self.schedule_pending_pods(env, scope);
            }
            (Some(m), "cluster.x-k8s.io", "Machine") if json::is_deleting(m) => {
                self.replace_machine(env, key, m.clone());
                if let Some(("MachineSet", ms)) =
                    controller_of(m).as_ref().map(|(k, n)| (k.as_str(), n))
                {
                    let ms_key = ObjKey::new("cluster.x-k8s.io", "MachineSet", &key.namespace, ms);
                    self.scale(env, &ms_key);
                }
            }
            (Some(_), "cluster.x-k8s.io", "MachineSet") => self.scale(env, key),
            (Some(obj), g, _) if crate::api::is_provider_group(g) && json::is_deleting(obj) => {
                self.provider_deleting(env, key, obj)
            }
            (Some(pool), "cluster.x-k8s.io", "MachinePool") => {
                self.follow_pool(env, key, pool.clone())
            }
            _ => {}
        }
    }

    /// A provider object started deleting: the provider finishes after `infraDelete`.
    pub(crate) fn provider_deleting(&mut self, env: &mut Env<'_>, key: &ObjKey, obj: &Value) {
        let ours = json::finalizers(obj)
            .iter()
            .any(|f| f == PROVIDER_FINALIZER);
        if ours && self.provider_deleting.insert(key.clone()) {
            env.schedule_in(
                self.knobs.infra_delete,
                Event::ProviderGone { key: key.clone() },
            );
        }
    }

    /// The world's own scheduled events.
    pub(crate) fn world_event(&mut self, env: &mut Env<'_>, faults: &mut Faults, event: Event) {
        match event {
            Event::PodGone { scope, pod } => {
                let node = env.api
                    .get(&scope, &pod)
                    .and_then(|p| json::str_at(p, "spec.nodeName"))
                    .map(str::to_string);
                if node.is_some_and(|n| self.kubelet_stopped.contains(&(scope.clone(), n))) {
                    // A stopped kubelet leaves its pods terminating; it resumes when it returns.
                    self.shutting_down.remove(&(scope.clone(), pod));
                    return;
                }
                self.shutting_down.remove(&(scope.clone(), pod.clone()));
                if env.api.get(&scope, &pod).is_some() {
                    let w = env.api.store_mut(&scope).remove(&pod);
                    let object = crate::api::describe(&scope, &pod);
                    env.line("world", "PodGone", object, "the kubelet finished shutting it down".into());
                    env.changed(&scope, w);
                }
            }
            Event::PodReady { scope, pod } => {
                if let Ok(w) = env.api.store_mut(&scope).patch(
                    &pod,
                    &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
                    Part::Whole,
                ) {
                    let object = crate::api::describe(&scope, &pod);
                    env.line("world", "PodReady", object, "the rescheduled replica is Ready".into());
                    env.changed(&scope, w);
                }
            }
            Event::NodeUnreachable { scope, node } => {
                if self.kubelet_stopped.contains(&(scope.clone(), node.clone())) {
                    env.set_node_condition( &scope, &node, "Ready", "Unknown", Some("NodeStatusUnknown"), Some("Kubelet stopped posting node status."));
                }
            }
            Event::VolumesDetached { scope, node } => self.detach_volumes(env, &scope, &node),
            Event::PodGc { scope, node } => {
                let node_key = ObjKey::new("", "Node", "", &node);
                if env.api.get(&scope, &node_key).is_some() {
                    return;
                }
                let orphans: Vec<ObjKey> = env.api
                    .store(&scope)
                    .map(|s| {
                        s.list("", "Pod")
                            .filter(|(_, p)| json::str_at(p, "spec.nodeName") == Some(node.as_str()))
                            .map(|(k, _)| k.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                for pod in orphans {
                    let w = env.api.store_mut(&scope).remove(&pod);
                    let object = crate::api::describe(&scope, &pod);
                    env.line("world", "PodGc", object, format!("its Node {node} is gone"));
                    env.changed(&scope, w);
                }
            }
            Event::ProviderGone { key } => {
                let Some(obj) = env.api.get(&Scope::Management, &key).cloned() else {
                    return;
                };
                let rest: Vec<String> = json::finalizers(&obj)
                    .into_iter()
                    .filter(|f| f != PROVIDER_FINALIZER)
                    .collect();
                let held = !rest.is_empty();
                if let Ok(w) = env.api.store_mut(&Scope::Management).patch(
                    &key,
                    &json!({"metadata": {"finalizers": rest}}),
                    Part::Main,
                ) {
                    let object = key.to_string();
                    let detail = if held {
                        "the provider finished; other finalizers still hold it".to_string()
                    } else {
                        "the provider finished deleting it".to_string()
                    };
                    env.line("world", "ProviderDeleted", object, detail);
                    env.changed(&Scope::Management, w);
                }
            }
            Event::InfraReady { machine } => self.infra_ready(env, faults, &machine),
            Event::NodeJoin { machine } => self.node_join(env, faults, &machine),
            Event::PoolProvisioned { pool } => self.pool_provisioned(env, &pool),
            Event::PoolNodeJoin { pool, index } => self.pool_node_join(env, &pool, index),
            Event::KubeletResume { scope, node } => self.kubelet(env, &scope, &node, true),
            Event::CapiReconcile { machine } => self.capi.reconcile(env, &machine),
            Event::CapiLeaseRenew => self.capi.renew_lease(env),
            Event::CapiHealthCheck { mhc } => self.capi.check_health(env, &mhc),
            Event::CapiPoolReconcile { pool } => self.capi.reconcile_pool(env, &pool),
            Event::CapiDeploymentReconcile { md } => self.capi.reconcile_deployment(env, &md),
            Event::CapiMachineSetReconcile { ms } => {
                self.capi.machine_set_dequeued(env, &ms);
                self.scale(env, &ms);
            }
            Event::FaultEnds { .. }
            | Event::CacheSynced { .. }
            | Event::Uncorrupt { .. }
            | Event::NodeFlap { .. }
            | Event::KubeconfigRestored { .. }
            | Event::DelayedCommand { .. }
            | Event::Step(_)
            | Event::EngineTick
            | Event::Checkpoint
            | Event::Arrive { .. } => {}
        }
    }

    fn pod_deleting(&mut self, env: &mut Env<'_>, scope: &Scope, key: &ObjKey, pod: Arc<Value>) {
        if !self.shutting_down.insert((scope.clone(), key.clone())) {
            return;
        }
        let node = json::str_at(&pod, "spec.nodeName")
            .unwrap_or_default()
            .to_string();
        if self.kubelet_stopped.contains(&(scope.clone(), node)) {
            self.shutting_down.remove(&(scope.clone(), key.clone()));
            return;
        }
        if json::labels(&pod).contains_key(CONTROLLER_POD_LABEL) {
            self.controller_pod_evicted = true;
            env.line(
                "world",
                "ControllerPodTerminating",
                crate::api::describe(scope, key),
                "the controller's own pod is terminating: its process dies".into(),
            );
        }
        let shutdown = json::annotations(&pod)
            .get(SHUTDOWN_ANNOTATION)
            .and_then(|d| parse_go_duration(d).ok())
            .unwrap_or_else(|| {
                let grace = pod
                    .at_pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(30);
                self.knobs.pod_shutdown.min(Duration::from_secs(grace))
            });
        env.schedule_in(
            shutdown,
            Event::PodGone {
                scope: scope.clone(),
                pod: key.clone(),
            },
        );
    }

    fn pod_gone(&mut self, env: &mut Env<'_>, scope: &Scope, key: &ObjKey, last: Option<&Value>) {
        self.maybe_detach_volumes(env, scope, key);
        if let Some(last) = last {
            self.reschedule(env, scope, key, last.clone());
        }
    }

    /// When the last pod (other than DaemonSet and mirror pods) leaves a node, its volumes
    /// detach after `volumeDetach`.
    fn maybe_detach_volumes(&mut self, env: &mut Env<'_>, scope: &Scope, _pod: &ObjKey) {
        let Some(store) = env.api.store(scope) else {
            return;
        };
        let mut busy: BTreeSet<String> = BTreeSet::new();
        for (_, p) in store.list("", "Pod") {
            let ds = controller_of(p).is_some_and(|(k, _)| k == "DaemonSet");
            let mirror = json::annotations(p).contains_key("kubernetes.io/config.mirror");
            if let Some(n) = json::str_at(p, "spec.nodeName")
                && !ds
                && !mirror
            {
                busy.insert(n.to_string());
            }
        }
        let mut to_detach = Vec::new();
        for (_, n) in store.list("", "Node") {
            let name = json::name(n).to_string();
            let attached = n
                .at_pointer("/status/volumesAttached")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
            let va = store
                .list("storage.k8s.io", "VolumeAttachment")
                .any(|(_, v)| {
                    json::str_at(v, "spec.nodeName") == Some(name.as_str())
                        && v.at_pointer("/status/attached").and_then(Value::as_bool) == Some(true)
                });
            if (attached || va) && !busy.contains(&name) {
                to_detach.push(name);
            }
        }
        for node in to_detach {
            let already = self.shutting_down.contains(&(
                scope.clone(),
                ObjKey::new("", "Node", "", &format!("detach:{node}")),
            ));
            if !already {
                self.shutting_down.insert((
                    scope.clone(),
                    ObjKey::new("", "Node", "", &format!("detach:{node}")),
                ));
                env.schedule_in(
                    self.knobs.volume_detach,
                    Event::VolumesDetached {
                        scope: scope.clone(),
                        node,
                    },
                );
            }
        }
    }

    fn detach_volumes(&mut self, env: &mut Env<'_>, scope: &Scope, node: &str) {
        self.shutting_down.remove(&(
            scope.clone(),
            ObjKey::new("", "Node", "", &format!("detach:{node}")),
        ));
        let node_key = ObjKey::new("", "Node", "", node);
        if let Some(n) = env.api.get(scope, &node_key)
            && n.at_pointer("/status/volumesAttached")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
            && let Ok(w) = env.api.store_mut(scope).patch(
                &node_key,
                &json!({"status": {"volumesAttached": null}}),
                Part::Status,
            )
        {
            let object = crate::api::describe(scope, &node_key);
            env.line(
                "world",
                "VolumesDetached",
                object,
                "status.volumesAttached emptied".into(),
            );
            env.changed(scope, w);
        }
        let vas: Vec<ObjKey> = env
            .api
            .store(scope)
            .map(|s| {
                s.list("storage.k8s.io", "VolumeAttachment")
                    .filter(|(_, v)| json::str_at(v, "spec.nodeName") == Some(node))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        for va in vas {
            if let Ok(w) = env.api.store_mut(scope).patch(
                &va,
                &json!({"status": {"attached": false}}),
                Part::Status,
            ) {
                let object = crate::api::describe(scope, &va);
                env.line(
                    "world",
                    "VolumesDetached",
                    object,
                    "status.attached=false".into(),
                );
                env.changed(scope, w);
            }
        }
    }

    /// A pod of a ReplicaSet or StatefulSet that went away gets a replacement elsewhere.
    fn reschedule(&mut self, env: &mut Env<'_>, scope: &Scope, key: &ObjKey, last: Value) {
        if !self.knobs.reschedule {
            return;
        }
        if !controller_of(&last).is_some_and(|(k, _)| k == "ReplicaSet" || k == "StatefulSet") {
            return;
        }
        let base = base_pod_name(&key.name).to_string();
        let counter_key = (scope.clone(), ObjKey::new("", "Pod", &key.namespace, &base));
        let n = self.reschedules.entry(counter_key).or_insert(0);
        *n += 1;
        let name = format!("{base}-r{n}");
        let mut pod = last.clone();
        let meta = json::object_at(&mut pod, &["metadata"]);
        meta.insert("name".into(), json!(name));
        for f in [
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "creationTimestamp",
            "generation",
        ] {
            meta.remove(f);
        }
        let left = json::object_at(&mut pod, &["spec"]).remove("nodeName");
        pod["status"] = json!({"phase": "Pending"});
        let new_key = ObjKey::of(&pod);
        let now = env.clock.now;
        if let Ok(w) = env.api.store_mut(scope).create(pod, now) {
            env.changed(scope, w);
            let avoid = left.and_then(|v| v.as_str().map(str::to_string));
            self.unscheduled.insert((scope.clone(), new_key), avoid);
            self.schedule_pending_pods(env, scope);
        }
    }

    /// Binds pending pods to the first schedulable Ready node (by name) whose NoSchedule taints
    /// they tolerate.
    fn schedule_pending_pods(&mut self, env: &mut Env<'_>, scope: &Scope) {
        let pending: Vec<(ObjKey, Option<String>)> = self
            .unscheduled
            .iter()
            .filter(|((s, _), _)| s == scope)
            .map(|((_, k), avoid)| (k.clone(), avoid.clone()))
            .collect();
        for (pod_key, avoid) in pending {
            let Some(pod) = env.api.get(scope, &pod_key).cloned() else {
                self.unscheduled.remove(&(scope.clone(), pod_key));
                continue;
            };
            let Some(node) = self.pick_node(env, scope, &pod, avoid.as_deref()) else {
                continue;
            };
            self.unscheduled.remove(&(scope.clone(), pod_key.clone()));
            if let Ok(w) = env.api.store_mut(scope).patch(
                &pod_key,
                &json!({"spec": {"nodeName": node}}),
                Part::Whole,
            ) {
                let object = crate::api::describe(scope, &pod_key);
                env.line(
                    "world",
                    "PodScheduled",
                    object,
                    format!("rescheduled onto {node}"),
                );
                env.changed(scope, w);
                env.schedule_in(
                    self.knobs.pod_startup,
                    Event::PodReady {
                        scope: scope.clone(),
                        pod: pod_key,
                    },
                );
            }
        }
    }

    fn pick_node(
        &self,
        env: &Env<'_>,
        scope: &Scope,
        pod: &Value,
        avoid: Option<&str>,
    ) -> Option<String> {
        let tolerations: Vec<String> = pod
            .at_pointer("/spec/tolerations")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.get("key").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        env.api.store(scope)?.list("", "Node").find_map(|(_, n)| {
            let ready = n
                .at_pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| {
                    c.iter()
                        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                })
                .and_then(|c| c.get("status").and_then(Value::as_str))
                == Some("True");
            let unschedulable =
                n.at_pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true);
            let tainted = n
                .at_pointer("/spec/taints")
                .and_then(Value::as_array)
                .is_some_and(|ts| {
                    ts.iter().any(|t| {
                        t.get("effect").and_then(Value::as_str) == Some("NoSchedule")
                            && !t
                                .get("key")
                                .and_then(Value::as_str)
                                .is_some_and(|k| tolerations.iter().any(|x| x == k))
                    })
                });
            let other = avoid != Some(json::name(n));
            (ready && !unschedulable && !tainted && other && !json::is_deleting(n))
                .then(|| json::name(n).to_string())
        })
    }

    pub(crate) fn kubelet(&mut self, env: &mut Env<'_>, scope: &Scope, node: &str, running: bool) {
        let k = (scope.clone(), node.to_string());
        if running {
            if !self.kubelet_stopped.remove(&k) {
                return;
            }
            env.set_node_condition(
                scope,
                node,
                "Ready",
                "True",
                Some("KubeletReady"),
                Some("kubelet is posting ready status"),
            );
            let terminating: Vec<(ObjKey, Arc<Value>)> = env
                .api
                .store(scope)
                .map(|s| {
                    s.list_shared("", "Pod")
                        .filter(|(_, p)| {
                            json::str_at(p, "spec.nodeName") == Some(node) && json::is_deleting(p)
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            for (key, pod) in terminating {
                self.pod_deleting(env, scope, &key, pod);
            }
        } else if self.kubelet_stopped.insert(k) {
            env.schedule_in(
                self.knobs.node_monitor_grace_period,
                Event::NodeUnreachable {
                    scope: scope.clone(),
                    node: node.to_string(),
                },
            );
        }
    }

    /// The fake MachineSet replaces a Machine it owns as soon as it starts deleting (with the
    /// CAPI model, its MachineSet controller keeps the replicas instead: [`Self::scale`]).
    fn replace_machine(&mut self, env: &mut Env<'_>, key: &ObjKey, machine: Arc<Value>) {
        if self.knobs.machine_sets != MachineSetsMode::Replace || self.capi.enabled {
            return;
        }
        if !self
            .provider_deleting
            .insert(ObjKey::new("sim", "Replaced", &key.namespace, &key.name))
        {
            return;
        }
        let Some((kind, ms_name)) = controller_of(&machine) else {
            return;
        };
        if kind != "MachineSet" {
            return;
        }
        let ms_key = ObjKey::new("cluster.x-k8s.io", "MachineSet", &key.namespace, &ms_name);
        let Some(ms) = env.api.get(&Scope::Management, &ms_key).cloned() else {
            return;
        };
        if json::is_deleting(&ms) {
            return;
        }
        let n = self.replacements.entry(ms_key.clone()).or_insert(0);
        *n += 1;
        let name = format!("{ms_name}-r{n}");
        let machine =
            crate::machine_sets::machine_from_template(&ms, &key.namespace, &ms_name, &name);
        self.create_machine_for_provisioning(
            env,
            machine,
            &format!("replaces {} for MachineSet {ms_name}", key.name),
        );
    }

    /// With the CAPI model, its MachineSet controller: `spec.replicas` Machines not being
    /// deleted, creating the missing ones (provisioned by the world) and deleting the newest
    /// extra ones.
    pub(crate) fn scale(&mut self, env: &mut Env<'_>, ms_key: &ObjKey) {
        if !self.capi.enabled {
            return;
        }
        crate::capi_remediation::reconcile(env, crate::capi::ACTOR, ms_key);
        let plan = crate::machine_sets::scaling(env.api, ms_key);
        let now = env.clock.now;
        for machine in plan.delete {
            if let Ok(w) = env.api.store_mut(&Scope::Management).delete(&machine, now) {
                let detail = format!("MachineSet {} scales down", ms_key.name);
                env.line(
                    crate::capi::ACTOR,
                    "DeleteMachine",
                    machine.to_string(),
                    detail,
                );
                env.changed(&Scope::Management, w);
            }
        }
        for _ in 0..plan.create {
            let Some(ms) = env.api.get(&Scope::Management, ms_key).cloned() else {
                return;
            };
            let n = self.replacements.entry(ms_key.clone()).or_insert(0);
            *n += 1;
            let name = format!("{}-r{n}", ms_key.name);
            let machine = crate::machine_sets::machine_from_template(
                &ms,
                &ms_key.namespace,
                &ms_key.name,
                &name,
            );
            let why = format!(
                "MachineSet {} has fewer Machines than spec.replicas",
                ms_key.name
            );
            self.create_machine_for_provisioning(env, machine, &why);
        }
    }

    /// Creates a Machine the world provisions: provider objects, then infrastructure, then Node.
    pub(crate) fn create_machine_for_provisioning(
        &mut self,
        env: &mut Env<'_>,
        mut machine: Value,
        why: &str,
    ) {
        crate::defaults::apply_defaults(&mut machine);
        let key = ObjKey::of(&machine);
        let now = env.clock.now;
        let Ok(w) = env
            .api
            .store_mut(&Scope::Management)
            .create(machine.clone(), now)
        else {
            return;
        };
        env.line("world", "CreateMachine", key.to_string(), why.to_string());
        env.changed(&Scope::Management, w);
        self.start_provisioning(env, &key, &machine);
    }

    pub(crate) fn start_provisioning(&mut self, env: &mut Env<'_>, key: &ObjKey, machine: &Value) {
        self.ensure_provider_objects(env, machine, false);
        self.provisioning.insert(key.clone());
        env.schedule_in(
            self.knobs.infra_provision,
            Event::InfraReady {
                machine: key.clone(),
            },
        );
    }

    /// Creates the InfrastructureMachine and BootstrapConfig a Machine references when missing.
    pub(crate) fn ensure_provider_objects(
        &mut self,
        env: &mut Env<'_>,
        machine: &Value,
        ready: bool,
    ) {
        let ns = json::namespace(machine).to_string();
        let cluster = json::str_at(machine, "spec.clusterName")
            .unwrap_or_default()
            .to_string();
        let machine_name = json::name(machine).to_string();
        let provider_id = json::str_at(machine, "spec.providerID")
            .map(str::to_string)
            .unwrap_or_else(|| format!("sim://{cluster}/{machine_name}"));
        for (path, is_infra) in [
            ("/spec/infrastructureRef", true),
            ("/spec/bootstrap/configRef", false),
        ] {
            let Some(r) = machine.at_pointer(path) else {
                continue;
            };
            let Some((key, api_version)) = json::ref_target(r, &ns) else {
                continue;
            };
            if env.api.get(&Scope::Management, &key).is_some() {
                continue;
            }
            let (kind, name) = (&key.kind, &key.name);
            let mut obj = json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "namespace": ns, "finalizers": [PROVIDER_FINALIZER],
                             "labels": {engine::model::CLUSTER_NAME_LABEL: cluster}},
                "spec": {}, "status": {}
            });
            if is_infra {
                if ready {
                    obj["spec"]["providerID"] = json!(provider_id);
                    obj["status"] = json!({"ready": true, "initialization": {"provisioned": true}});
                }
            } else {
                obj["status"] = json!({"ready": true, "dataSecretName": format!("{name}-bootstrap"),
                                       "initialization": {"dataSecretCreated": true}});
            }
            let now = env.clock.now;
            if let Ok(w) = env.api.store_mut(&Scope::Management).create(obj, now) {
                env.changed(&Scope::Management, w);
            }
        }
    }

    /// The cluster a Machine being provisioned belongs to; a provider cannot go on without
    /// it (a corrupted Machine), so the step is tried again a little later.
    pub(crate) fn cluster_or_retry(
        &mut self,
        env: &mut Env<'_>,
        machine: &Value,
        step: Event,
    ) -> Option<String> {
        let cluster = json::str_at(machine, "spec.clusterName").filter(|c| !c.is_empty());
        if cluster.is_none() {
            env.schedule_in(PROVIDER_RETRY, step);
        }
        cluster.map(str::to_string)
    }

    /// A Machine still being provisioned, unless it is gone or deleting; a world fault of
    /// `kind` in effect stops the step (and counts as fired).
    fn provisioning(
        &mut self,
        env: &mut Env<'_>,
        faults: &mut Faults,
        machine_key: &ObjKey,
        kind: FaultKind,
    ) -> Result<Value, Option<Value>> {
        let machine = env
            .api
            .get(&Scope::Management, machine_key)
            .filter(|m| !json::is_deleting(m))
            .cloned()
            .ok_or(None)?;
        if faults.world_active(env.clock.now, kind) {
            faults.fire(kind);
            return Err(Some(machine));
        }
        Ok(machine)
    }

    fn infra_ready(&mut self, env: &mut Env<'_>, faults: &mut Faults, machine_key: &ObjKey) {
        let machine =
            match self.provisioning(env, faults, machine_key, FaultKind::InfraProvisionFailure) {
                Ok(m) => m,
                Err(Some(m)) => return self.provisioning_failed(env, machine_key, &m),
                Err(None) => return,
            };
        let Some(cluster) = self.cluster_or_retry(
            env,
            &machine,
            Event::InfraReady {
                machine: machine_key.clone(),
            },
        ) else {
            return;
        };
        let provider_id = format!("sim://{cluster}/{}", machine_key.name);
        let infra = machine
            .at_pointer("/spec/infrastructureRef")
            .and_then(|r| json::ref_target(r, &machine_key.namespace));
        let ready = json!({"spec": {"providerID": provider_id},
                           "status": {"ready": true, "initialization": {"provisioned": true}}});
        if let Some((key, _)) = infra
            && let Ok(w) = env
                .api
                .store_mut(&Scope::Management)
                .patch(&key, &ready, Part::Whole)
        {
            let detail = format!("providerID {provider_id}");
            env.line("world", "InfraReady", key.to_string(), detail);
            env.changed(&Scope::Management, w);
        }
        let v1beta1 = json::api_version(&machine).ends_with("v1beta1");
        let status = if v1beta1 {
            json!({"phase": "Provisioned", "infrastructureReady": true, "bootstrapReady": true})
        } else {
            json!({"phase": "Provisioned", "initialization": {"infrastructureProvisioned": true, "bootstrapDataSecretCreated": true}})
        };
        if let Ok(w) = env.api.store_mut(&Scope::Management).patch(
            machine_key,
            &json!({"spec": {"providerID": provider_id}, "status": status}),
            Part::Whole,
        ) {
            env.changed(&Scope::Management, w);
        }
        env.schedule_in(
            self.knobs.node_join,
            Event::NodeJoin {
                machine: machine_key.clone(),
            },
        );
    }

    fn node_join(&mut self, env: &mut Env<'_>, faults: &mut Faults, machine_key: &ObjKey) {
        let machine = match self.provisioning(env, faults, machine_key, FaultKind::NodeNeverJoins) {
            Ok(m) => m,
            Err(Some(_)) => {
                let why = "its Node never joins the workload cluster".to_string();
                env.line("world", "NodeNeverJoins", machine_key.to_string(), why);
                return;
            }
            Err(None) => return,
        };
        let Some(cluster) = self.cluster_or_retry(
            env,
            &machine,
            Event::NodeJoin {
                machine: machine_key.clone(),
            },
        ) else {
            return;
        };
        let scope = env.api.workload_scope(&cluster);
        let provider_id = json::str_at(&machine, "spec.providerID")
            .unwrap_or_default()
            .to_string();
        let node_name = machine_key.name.clone();
        let node = ready_node(&node_name, &provider_id, env.clock.now);
        self.node_joins(
            env,
            &scope,
            node,
            format!("Machine {} joined", machine_key.name),
        );
        let v1beta1 = json::api_version(&machine).ends_with("v1beta1");
        let node_ref = if v1beta1 {
            json!({"apiVersion": "v1", "kind": "Node", "name": node_name})
        } else {
            json!({"name": node_name})
        };
        if let Ok(w) = env.api.store_mut(&Scope::Management).patch(
            machine_key,
            &json!({"status": {"nodeRef": node_ref, "phase": "Running"}}),
            Part::Status,
        ) {
            env.changed(&Scope::Management, w);
        }
        self.provisioning.remove(machine_key);
    }
}

/// A Node that has just joined: Ready, with its providerID.
pub(crate) fn ready_node(name: &str, provider_id: &str, now: engine::time::Timestamp) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {"providerID": provider_id},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "lastTransitionTime": now.to_rfc3339()}]}
    })
}

impl WorldState {
    /// Creates a joining Node in a workload cluster.
    pub(crate) fn node_joins(
        &mut self,
        env: &mut Env<'_>,
        scope: &Scope,
        node: Value,
        why: String,
    ) {
        let now = env.clock.now;
        if let Ok(w) = env.api.store_mut(scope).create(node, now) {
            let object = crate::api::describe(scope, &w.key);
            env.line("world", "NodeJoin", object, why);
            env.changed(scope, w);
        }
    }

    /// The infrastructure provider gives up: the Machine reports a failure, and no Node will
    /// ever join.
    fn provisioning_failed(&mut self, env: &mut Env<'_>, machine_key: &ObjKey, machine: &Value) {
        let reason = "CreateError";
        let message = "simulated: the provider could not create the instance";
        let failure = if json::api_version(machine).ends_with("v1beta1") {
            json!({"status": {"failureReason": reason, "failureMessage": message}})
        } else {
            json!({"status": {"deprecated": {"v1beta1": {"failureReason": reason, "failureMessage": message}}}})
        };
        if let Ok(w) =
            env.api
                .store_mut(&Scope::Management)
                .patch(machine_key, &failure, Part::Whole)
        {
            env.line(
                "world",
                "InfraFailed",
                machine_key.to_string(),
                message.into(),
            );
            env.changed(&Scope::Management, w);
        }
    }
}

/// `web-0-r2` → `web-0`.
fn base_pod_name(name: &str) -> &str {
    match name.rsplit_once("-r") {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}
