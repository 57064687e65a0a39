//! Builders for tests and benchmarks: minimal valid model objects with sensible defaults.
//! Not part of the engine's contract.

use crate::model::*;
use crate::time::Timestamp;
use std::collections::BTreeMap;

/// The workload cluster of Cluster `default/c1`.
pub fn workload(cluster: &str) -> Scope {
    Scope::Workload(ClusterName::new("default", cluster))
}

pub fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.to_string(),
        namespace: namespace.to_string(),
        uid: format!("uid-{namespace}-{name}"),
        resource_version: 1,
        creation_timestamp: Some(Timestamp(0)),
        ..Default::default()
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn cluster(name: &str) -> Cluster {
    Cluster {
        meta: meta("default", name),
        version: ApiVersion::V1Beta2,
        paused: false,
        control_plane_ref: None,
        conditions: Conditions::default(),
    }
}

fn provider_ref(group: &str, kind: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_group: group.to_string(),
        api_version: Some(format!("{group}/v1beta2")),
        kind: kind.to_string(),
        name: name.to_string(),
        namespace: "default".to_string(),
    }
}

/// A v1beta2 worker Machine of cluster `cluster` with node `node`, finalizer set, infra
/// `DockerMachine/<name>` and bootstrap `KubeadmConfig/<name>`.
pub fn machine(cluster: &str, name: &str, node: Option<&str>) -> Machine {
    let mut m = meta("default", name);
    m.labels = labels(&[(CLUSTER_NAME_LABEL, cluster)]);
    m.finalizers = vec![MACHINE_FINALIZER.to_string()];
    Machine {
        meta: m,
        version: ApiVersion::V1Beta2,
        cluster_name: cluster.to_string(),
        bootstrap_config_ref: Some(provider_ref(
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfig",
            name,
        )),
        bootstrap_data_secret_name: None,
        infrastructure_ref: provider_ref("infrastructure.cluster.x-k8s.io", "DockerMachine", name),
        provider_id: Some(format!("sim://{cluster}/{name}")),
        kubernetes_version: None,
        node_drain_timeout: None,
        node_volume_detach_timeout: None,
        node_deletion_timeout: None,
        node_ref: node.map(str::to_string),
        phase: Some("Running".to_string()),
        deletion: DeletionTimes::default(),
        infrastructure_ready: true,
        failure_reason: None,
        failure_message: None,
        conditions: Conditions::default(),
    }
}

/// A control-plane Machine (label `cluster.x-k8s.io/control-plane`).
pub fn control_plane_machine(cluster: &str, name: &str, node: Option<&str>) -> Machine {
    let mut m = machine(cluster, name, node);
    m.meta
        .labels
        .insert(CONTROL_PLANE_LABEL.to_string(), String::new());
    m
}

/// A provider object (`group`, `kind`, `name`) in namespace `default`, ready.
pub fn external(group: &str, kind: &str, name: &str) -> External {
    External {
        meta: meta("default", name),
        group_kind: GroupKind {
            group: group.to_string(),
            kind: kind.to_string(),
        },
        api_version: format!("{group}/v1beta2"),
        provider_id: None,
        ready: Some(true),
        provisioned: Some(true),
        data_secret_created: Some(true),
        data_secret_name: None,
        provider_id_list: None,
        status_replicas: None,
        infrastructure_machine_kind: None,
        failure_reason: None,
        failure_message: None,
        external_managed_control_plane: false,
        template_json: None,
    }
}

pub fn infra_machine(name: &str) -> External {
    let mut e = external("infrastructure.cluster.x-k8s.io", "DockerMachine", name);
    e.provider_id = Some(format!("sim://c1/{name}"));
    e
}

pub fn bootstrap_config(name: &str) -> External {
    external("bootstrap.cluster.x-k8s.io", "KubeadmConfig", name)
}

pub fn ready_condition(status: ConditionStatus, since: Timestamp) -> NodeCondition {
    NodeCondition {
        type_: "Ready".to_string(),
        status,
        reason: String::new(),
        message: String::new(),
        last_transition_time: Some(since),
    }
}

/// A Ready, schedulable Node.
pub fn node(name: &str) -> Node {
    Node {
        meta: meta("", name),
        provider_id: None,
        unschedulable: false,
        taints: Vec::new(),
        conditions: vec![ready_condition(ConditionStatus::True, Timestamp(0))],
        volumes_attached: Vec::new(),
        kubelet_version: None,
    }
}

/// A running Pod on `node`, controlled by ReplicaSet `rs-<name>`.
pub fn pod(namespace: &str, name: &str, node: &str) -> Pod {
    let mut m = meta(namespace, name);
    m.owner_references = vec![OwnerReference {
        api_version: "apps/v1".to_string(),
        kind: "ReplicaSet".to_string(),
        name: format!("rs-{name}"),
        uid: format!("uid-rs-{name}"),
        controller: true,
    }];
    Pod {
        meta: m,
        node_name: Some(node.to_string()),
        phase: "Running".to_string(),
        has_empty_dir: false,
        termination_grace_period_seconds: Some(30),
        pvc_names: Vec::new(),
        ready: true,
    }
}

pub fn namespace(name: &str) -> Namespace {
    Namespace {
        meta: meta("", name),
        terminating: false,
    }
}

/// An engine whose caches are synced with `objects` (one relist per scope, management first),
/// with the commands of that first pass drained and returned.
pub fn synced_engine(
    now: Timestamp,
    objects: Vec<(Scope, Object)>,
) -> (crate::Engine, Vec<crate::Command>) {
    synced(crate::Engine::new(), now, objects)
}

/// [`synced_engine`] from `engine` (one told something first, such as its ownership).
pub fn synced(
    mut engine: crate::Engine,
    now: Timestamp,
    objects: Vec<(Scope, Object)>,
) -> (crate::Engine, Vec<crate::Command>) {
    let mut by_scope: BTreeMap<Scope, Vec<Object>> = BTreeMap::new();
    by_scope.entry(Scope::Management).or_default();
    for (scope, object) in objects {
        by_scope.entry(scope).or_default().push(object);
    }
    for (scope, objects) in by_scope {
        engine.handle(now, listed(scope, objects));
    }
    let commands = drain_commands(&mut engine);
    (engine, commands)
}

/// A first list of `scope` with `objects`, as the intake delivers it while a drain watches a
/// workload cluster: one relist of its other kinds, then one relist of each drain kind.
pub fn listed(scope: Scope, objects: Vec<Object>) -> crate::Input {
    if scope == Scope::Management {
        return crate::Input::Relist { scope, objects };
    }
    let (drain, rest): (Vec<Object>, Vec<Object>) = objects
        .into_iter()
        .partition(|o| Kind::DRAIN_ONLY.contains(&o.kind()));
    let mut inputs = vec![crate::Input::Relist {
        scope: scope.clone(),
        objects: rest,
    }];
    for kind in Kind::DRAIN_ONLY {
        let objects = drain.iter().filter(|o| o.kind() == kind).cloned().collect();
        inputs.push(crate::Input::RelistKind {
            scope: scope.clone(),
            kind,
            objects,
        });
    }
    crate::Input::batch(inputs)
}

pub fn drain_commands(engine: &mut crate::Engine) -> Vec<crate::Command> {
    std::iter::from_fn(|| engine.poll_command()).collect()
}

/// A v1beta2 MachinePool of cluster `cluster` (Cluster `default/<cluster>`), adopted (finalizer,
/// cluster-name label, Cluster owner reference), with bootstrap `KubeadmConfig/<name>` and
/// infrastructure `DockerMachinePool/<name>`, and an empty status.
pub fn machine_pool(cluster: &str, name: &str, replicas: i32) -> MachinePool {
    let mut m = meta("default", name);
    m.labels = labels(&[(CLUSTER_NAME_LABEL, cluster)]);
    m.finalizers = vec![MACHINE_POOL_FINALIZER.to_string()];
    m.owner_references = vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".to_string(),
        kind: "Cluster".to_string(),
        name: cluster.to_string(),
        uid: format!("uid-default-{cluster}"),
        controller: false,
    }];
    MachinePool {
        meta: m,
        version: ApiVersion::V1Beta2,
        cluster_name: cluster.to_string(),
        replicas: Some(replicas),
        bootstrap_config_ref: Some(provider_ref(
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfig",
            name,
        )),
        bootstrap_data_secret_name: None,
        infrastructure_ref: provider_ref(
            "infrastructure.cluster.x-k8s.io",
            "DockerMachinePool",
            name,
        ),
        provider_id_list: Vec::new(),
        min_ready_seconds: None,
        node_deletion_timeout: None,
        template_labels: BTreeMap::new(),
        template_annotations: BTreeMap::new(),
        status: MachinePoolStatus::default(),
        conditions: Conditions::default(),
    }
}

/// An InfrastructureMachinePool `DockerMachinePool/<name>`, ready, with no providerIDs yet.
pub fn infra_machine_pool(name: &str) -> External {
    external("infrastructure.cluster.x-k8s.io", "DockerMachinePool", name)
}

/// A Cluster whose `ControlPlaneInitialized` and `InfrastructureReady` are True since
/// `Timestamp(0)` (v1beta2 conditions).
pub fn ready_cluster(name: &str) -> Cluster {
    let mut c = cluster(name);
    for type_ in ["ControlPlaneInitialized", "InfrastructureReady"] {
        c.conditions.current.push(Condition {
            last_transition_time: Some(Timestamp(0)),
            ..Condition::new(type_, ConditionStatus::True, type_, "")
        });
    }
    c
}

/// A v1beta2 MachineHealthCheck `default/<name>` for cluster `cluster`, selecting its Machines
/// by the cluster-name label, with upstream's usual checks (`Ready` `Unknown` or `False` for
/// 5m), labelled and owned by its Cluster.
pub fn machine_health_check(cluster: &str, name: &str) -> MachineHealthCheck {
    let mut m = meta("default", name);
    m.labels = labels(&[(CLUSTER_NAME_LABEL, cluster)]);
    m.owner_references = vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".to_string(),
        kind: "Cluster".to_string(),
        name: cluster.to_string(),
        uid: format!("uid-default-{cluster}"),
        controller: false,
    }];
    let check = |status: &str| UnhealthyCondition {
        type_: "Ready".to_string(),
        status: status.to_string(),
        timeout: crate::time::Duration::from_mins(5),
    };
    MachineHealthCheck {
        meta: m,
        version: ApiVersion::V1Beta2,
        cluster_name: cluster.to_string(),
        selector: LabelSelector {
            match_labels: labels(&[(CLUSTER_NAME_LABEL, cluster)]),
            ..Default::default()
        },
        unhealthy_node_conditions: vec![check("Unknown"), check("False")],
        unhealthy_machine_conditions: Vec::new(),
        node_startup_timeout: None,
        max_unhealthy: None,
        unhealthy_range: None,
        remediation_template: None,
        conditions: Conditions::default(),
        status: MachineHealthCheckStatus::default(),
    }
}

/// A v1beta2 MachineSet `default/<name>` of cluster `cluster`.
pub fn machine_set(cluster: &str, name: &str, replicas: i32) -> MachineSet {
    let mut m = meta("default", name);
    m.labels = labels(&[(CLUSTER_NAME_LABEL, cluster)]);
    MachineSet {
        meta: m,
        version: ApiVersion::V1Beta2,
        cluster_name: cluster.to_string(),
        replicas: Some(replicas),
        selector: LabelSelector {
            match_labels: labels(&[(CLUSTER_NAME_LABEL, cluster)]),
            ..Default::default()
        },
    }
}

/// A v1beta2 MachineDeployment `default/<name>` of cluster `cluster`.
pub fn machine_deployment(cluster: &str, name: &str, replicas: i32) -> MachineDeployment {
    let mut m = meta("default", name);
    m.labels = labels(&[(CLUSTER_NAME_LABEL, cluster)]);
    MachineDeployment {
        meta: m,
        version: ApiVersion::V1Beta2,
        cluster_name: cluster.to_string(),
        replicas: Some(replicas),
        remediation_max_in_flight: None,
    }
}

/// Makes `owner` (kind, name) the controller of `meta`.
pub fn controlled_by(meta: &mut ObjectMeta, kind: &str, name: &str) {
    meta.owner_references.push(OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        uid: format!("uid-{}-{name}", meta.namespace),
        controller: true,
    });
}

/// Runs one reconcile of `key` on a controller outside an engine (tests and benchmarks), with
/// nothing in flight; returns the commands it issued.
pub fn reconcile(
    controller: &mut dyn crate::controller::Controller,
    store: &crate::store::Store,
    key: &ObjectKey,
    now: Timestamp,
) -> Vec<crate::Command> {
    let mut effects = crate::controller::Effects::default();
    let mut cx = crate::controller::Cx {
        now,
        store,
        cause: 0,
        owner: key.clone(),
        effects: &mut effects,
    };
    controller.reconcile(key, &mut cx);
    std::iter::from_fn(|| effects.poll()).collect()
}

/// An object of `kind` the API shows but the controllers cannot read (`problem` says why).
pub fn unreadable(kind: Kind, namespace: &str, name: &str, problem: &str) -> Object {
    Object::Unreadable(crate::model::Unreadable {
        kind,
        meta: ObjectMeta {
            name: name.to_string(),
            namespace: namespace.to_string(),
            ..ObjectMeta::default()
        },
        problem: problem.to_string(),
    })
}

/// A 429 answer whose whole text is `message`, typed as a record of it written before refusals
/// were typed decodes ([`crate::outcome::Refusal::of_v4_429`]): a PodDisruptionBudget's
/// refusal when it begins with [`crate::outcome::PDB_PHRASE`], load shedding otherwise.
pub fn too_many_requests(message: impl Into<String>) -> crate::ApiOutcome {
    let message = message.into();
    crate::ApiOutcome::Refused {
        refusal: crate::Refusal::of_v4_429(&message),
        message,
    }
}

/// A 403 answer, refused for a terminating namespace or for another reason.
pub fn forbidden(message: impl Into<String>, namespace_terminating: bool) -> crate::ApiOutcome {
    crate::ApiOutcome::Refused {
        refusal: if namespace_terminating {
            crate::Refusal::NamespaceTerminating
        } else {
            crate::Refusal::Forbidden
        },
        message: message.into(),
    }
}
