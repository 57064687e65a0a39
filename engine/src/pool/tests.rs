//! Engine-level tests: drive `Engine::handle` with observed objects and assert the exact
//! commands the pool controller issues.

use super::*;
use crate::command::{Action, Command};
use crate::input::{ApiOutcome, Input};
use crate::model::*;
use crate::testing::*;
use crate::time::{Duration, Timestamp};
use crate::{Engine, Target};

const T0: Timestamp = Timestamp(1_700_000_000_000);

fn secs(s: i64) -> Timestamp {
    T0 + Duration::from_secs(s)
}

fn pool_key(name: &str) -> ObjectKey {
    ObjectKey::management(Kind::MachinePool, "default", name)
}

/// A provider object already adopted by pool `pool` (controller ref + cluster-name label).
fn adopted(mut e: External, pool: &str) -> External {
    e.meta.labels.insert(CLUSTER_NAME_LABEL.into(), "c1".into());
    e.meta.owner_references.push(OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "MachinePool".into(),
        name: pool.into(),
        uid: format!("uid-default-{pool}"),
        controller: true,
    });
    e
}

/// A Node that just joined: providerID and kubelet version, nothing from the pool yet.
fn bare_node(name: &str) -> Node {
    let mut n = node(name);
    n.meta.uid = format!("uid-{name}");
    n.provider_id = Some(format!("sim://c1/{name}"));
    n.kubelet_version = Some("v1.33.0".into());
    n
}

/// A Node of pool `p1` as the pool left it (annotated, no uninitialized taint).
fn pool_node(name: &str) -> Node {
    let mut n = bare_node(name);
    for (k, v) in [
        ("cluster.x-k8s.io/cluster-name", "c1"),
        ("cluster.x-k8s.io/cluster-namespace", "default"),
        ("cluster.x-k8s.io/owner-kind", "MachinePool"),
        ("cluster.x-k8s.io/owner-name", "p1"),
    ] {
        n.meta.annotations.insert(k.into(), v.into());
    }
    n
}

fn ids(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("sim://c1/{n}")).collect()
}

fn refs(names: &[&str]) -> Vec<NodeReference> {
    names
        .iter()
        .map(|n| NodeReference {
            name: n.to_string(),
            uid: format!("uid-{n}"),
        })
        .collect()
}

/// Bootstrap config ready with a data secret, infra pool ready listing `nodes`.
fn world(pool: MachinePool, nodes: &[&str]) -> Vec<(Scope, Object)> {
    let mut config = adopted(bootstrap_config("p1"), "p1");
    config.data_secret_name = Some("p1-bootstrap".into());
    let mut infra = adopted(infra_machine_pool("p1"), "p1");
    infra.provider_id_list = Some(ids(nodes));
    infra.status_replicas = Some(nodes.len() as i32);
    let mut objects = vec![
        (Scope::Management, Object::Cluster(cluster("c1"))),
        (Scope::Management, Object::MachinePool(pool)),
        (Scope::Management, Object::External(config)),
        (Scope::Management, Object::External(infra)),
    ];
    for n in nodes {
        objects.push((workload("c1"), Object::Node(pool_node(n))));
    }
    // A control-plane Node outside the pool, so the workload cluster is always relisted.
    objects.push((workload("c1"), Object::Node(node("cp-0"))));
    objects
}

/// The world's provider object of kind `kind` (`KubeadmConfig`, `DockerMachinePool`).
fn external_mut<'a>(objects: &'a mut [(Scope, Object)], kind: &str) -> &'a mut External {
    objects
        .iter_mut()
        .find_map(|(_, o)| match o {
            Object::External(e) if e.group_kind.kind == kind => Some(e),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {kind} in the world"))
}

fn bootstrap_mut(objects: &mut [(Scope, Object)]) -> &mut External {
    external_mut(objects, "KubeadmConfig")
}

fn infra_mut(objects: &mut [(Scope, Object)]) -> &mut External {
    external_mut(objects, "DockerMachinePool")
}

fn cluster_mut(objects: &mut [(Scope, Object)]) -> &mut Cluster {
    objects
        .iter_mut()
        .find_map(|(_, o)| match o {
            Object::Cluster(c) => Some(c),
            _ => None,
        })
        .expect("a Cluster in the world")
}

fn node_mut<'a>(objects: &'a mut [(Scope, Object)], name: &str) -> &'a mut Node {
    objects
        .iter_mut()
        .find_map(|(_, o)| match o {
            Object::Node(n) if n.meta.name == name => Some(n),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Node {name} in the world"))
}

/// The pool as it looks once everything the controller wrote for `world` has landed.
fn settled_pool(nodes: &[&str]) -> MachinePool {
    let n = nodes.len() as i32;
    let mut mp = machine_pool("c1", "p1", n);
    mp.bootstrap_data_secret_name = Some("p1-bootstrap".into());
    mp.provider_id_list = ids(nodes);
    mp.status = MachinePoolStatus {
        replicas: Some(n),
        legacy_ready_replicas: Some(n),
        legacy_available_replicas: Some(n),
        legacy_unavailable_replicas: Some(0),
        ready_replicas: Some(n),
        available_replicas: Some(n),
        up_to_date_replicas: Some(n),
        node_refs: refs(nodes),
        phase: Some("Running".into()),
        bootstrap_data_secret_created: true,
        infrastructure_provisioned: true,
        failure_reason: None,
        failure_message: None,
        versions: if n == 0 {
            vec![]
        } else {
            vec![("v1.33.0".into(), n)]
        },
    };
    let mut legacy = Vec::new();
    for t in [
        "Ready",
        "BootstrapReady",
        "InfrastructureReady",
        "ReplicasReady",
    ] {
        let mut c = Condition::new(t, ConditionStatus::True, "", "");
        c.last_transition_time = Some(T0);
        legacy.push(c);
    }
    let mut current = Vec::new();
    for t in ["BootstrapReady", "InfrastructureReady", "ReplicasReady"] {
        let mut c = Condition::new(t, ConditionStatus::True, "Ready", "");
        c.last_transition_time = Some(T0);
        current.push(c);
    }
    mp.conditions = Conditions { current, legacy };
    mp
}

/// A running system in which the pools of `objects` are then created: caches synced first,
/// then one upsert per pool. Returns the commands of the pool upserts.
fn started(now: Timestamp, objects: Vec<(Scope, Object)>) -> (Engine, Vec<Command>) {
    let (pools, others): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|(_, o)| matches!(o, Object::MachinePool(_)));
    let (mut engine, _) = synced_engine(now, others);
    let mut commands = Vec::new();
    for (scope, pool) in pools {
        commands.extend(upsert(&mut engine, now, scope, pool));
    }
    (engine, commands)
}

/// `Action target detail` per command, without ids.
fn lines(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .map(|c| {
            let detail = c.action.detail();
            if detail.is_empty() {
                format!("{} {}", c.action.name(), c.action.target().key)
            } else {
                format!("{} {} {}", c.action.name(), c.action.target().key, detail)
            }
        })
        .collect()
}

fn merge_of(c: &Command) -> String {
    match &c.action {
        Action::PatchStatus { merge, .. }
        | Action::PatchSpec { merge, .. }
        | Action::SetOwnerReference { merge, .. } => merge.0.clone(),
        Action::CreateMachine { object, .. } => object.0.clone(),
        other => panic!("no merge in {other:?}"),
    }
}

fn find<'a>(commands: &'a [Command], name: &str, target: &str) -> &'a Command {
    commands
        .iter()
        .find(|c| c.action.name() == name && c.action.target().key.to_string() == target)
        .unwrap_or_else(|| panic!("no {name} on {target} in {:#?}", lines(commands)))
}

fn upsert(engine: &mut Engine, now: Timestamp, scope: Scope, object: Object) -> Vec<Command> {
    engine.handle(
        now,
        Input::Upsert {
            scope,
            object: Box::new(object),
        },
    );
    drain_commands(engine)
}

fn answer(engine: &mut Engine, now: Timestamp, c: &Command, outcome: ApiOutcome) -> Vec<Command> {
    engine.handle(
        now,
        Input::ApiResult {
            command: c.id,
            outcome,
        },
    );
    drain_commands(engine)
}

fn ok() -> ApiOutcome {
    ApiOutcome::Ok { object: None }
}

#[test]
fn finalizer_is_added_first_and_alone() {
    let mut mp = machine_pool("c1", "p1", 1);
    mp.meta.finalizers.clear();
    let (_, commands) = synced_engine(T0, world(mp, &["p1-0"]));
    assert_eq!(
        lines(&commands),
        ["AddFinalizer MachinePool default/p1 machinepool.cluster.x-k8s.io"]
    );
}

#[test]
fn paused_cluster_or_pool_does_nothing() {
    let mut mp = machine_pool("c1", "p1", 1);
    mp.meta
        .annotations
        .insert(PAUSED_ANNOTATION.into(), String::new());
    let (_, commands) = synced_engine(T0, world(mp, &["p1-0"]));
    assert_eq!(lines(&commands), Vec::<String>::new());

    let mut objects = world(machine_pool("c1", "p1", 1), &["p1-0"]);
    cluster_mut(&mut objects).paused = true;
    let (_, commands) = synced_engine(T0, objects);
    assert_eq!(lines(&commands), Vec::<String>::new());
}

#[test]
fn settled_pool_issues_nothing() {
    let (_, commands) = synced_engine(
        T0,
        world(settled_pool(&["p1-0", "p1-1"]), &["p1-0", "p1-1"]),
    );
    assert_eq!(lines(&commands), Vec::<String>::new());
}

#[test]
fn owner_references_and_labels_on_pool_bootstrap_and_infra() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.meta.labels.clear();
    mp.meta.owner_references.clear();
    let mut objects = world(mp, &["p1-0"]);
    for (_, o) in &mut objects {
        if let Object::External(e) = o {
            e.meta.labels.clear();
            e.meta.owner_references.clear();
        }
    }
    let (_, commands) = synced_engine(T0, objects);
    assert_eq!(
        lines(&commands),
        [
            "SetOwnerReference MachinePool default/p1 owner Cluster c1",
            "SetOwnerReference KubeadmConfig default/p1 controller MachinePool p1",
            "SetOwnerReference DockerMachinePool default/p1 controller MachinePool p1",
        ]
    );
    assert_eq!(
        merge_of(&commands[0]),
        r#"{"metadata":{"labels":{"cluster.x-k8s.io/cluster-name":"c1"},"ownerReferences":[{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster","name":"c1","uid":"uid-default-c1"}]}}"#
    );
    assert_eq!(
        merge_of(&commands[2]),
        r#"{"metadata":{"labels":{"cluster.x-k8s.io/cluster-name":"c1"},"ownerReferences":[{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"MachinePool","name":"p1","uid":"uid-default-p1","controller":true,"blockOwnerDeletion":true}]}}"#
    );
    assert_eq!(
        commands[2].action.target().api_version,
        "infrastructure.cluster.x-k8s.io/v1beta2"
    );
}

#[test]
fn provider_object_owned_by_another_controller_is_not_stolen() {
    let mut objects = world(settled_pool(&["p1-0"]), &["p1-0"]);
    bootstrap_mut(&mut objects).meta.owner_references[0].name = "someone-else".into();
    let (_, commands) = synced_engine(T0, objects);
    assert_eq!(lines(&commands), Vec::<String>::new());
}

/// Upstream's `TestReconcileMachinePoolBootstrap` rows, over both bootstrap contracts.
#[test]
fn bootstrap_reconciliation_table() {
    struct Case {
        name: &'static str,
        ready: Option<bool>,
        data_secret_created: Option<bool>,
        secret: Option<&'static str>,
        want_spec: Option<&'static str>,
        want_created: bool,
    }
    let cases = [
        Case {
            name: "v1beta1 contract: status.ready copies the secret name",
            ready: Some(true),
            data_secret_created: None,
            secret: Some("secret-data"),
            want_spec: Some(
                r#"{"spec":{"template":{"spec":{"bootstrap":{"dataSecretName":"secret-data"}}}}}"#,
            ),
            want_created: true,
        },
        Case {
            name: "v1beta2 contract: initialization.dataSecretCreated copies the secret name",
            ready: None,
            data_secret_created: Some(true),
            secret: Some("secret-data"),
            want_spec: Some(
                r#"{"spec":{"template":{"spec":{"bootstrap":{"dataSecretName":"secret-data"}}}}}"#,
            ),
            want_created: true,
        },
        Case {
            name: "not created: nothing copied, waiting",
            ready: Some(false),
            data_secret_created: Some(false),
            secret: Some("secret-data"),
            want_spec: None,
            want_created: false,
        },
        Case {
            name: "created but no secret name: error, nothing copied",
            ready: Some(true),
            data_secret_created: None,
            secret: None,
            want_spec: None,
            want_created: false,
        },
    ];
    for case in cases {
        let mut mp = machine_pool("c1", "p1", 1);
        mp.status.phase = Some("Pending".into());
        let mut objects = world(mp, &[]);
        {
            let e = bootstrap_mut(&mut objects);
            e.ready = case.ready;
            e.data_secret_created = case.data_secret_created;
            e.data_secret_name = case.secret.map(str::to_string);
        }
        // Keep infrastructure out of the way.
        {
            let e = infra_mut(&mut objects);
            e.ready = Some(false);
            e.provisioned = Some(false);
        }
        let (engine, commands) = synced_engine(T0, objects);
        let spec = commands
            .iter()
            .find(|c| c.action.name() == "PatchSpec")
            .map(merge_of);
        assert_eq!(spec.as_deref(), case.want_spec, "{}", case.name);
        let status = merge_of(find(&commands, "PatchStatus", "MachinePool default/p1"));
        assert_eq!(
            status.contains(r#""bootstrapDataSecretCreated":true"#),
            case.want_created,
            "{}: {status}",
            case.name
        );
        let _ = engine;
        let Some(Action::SetCondition { conditions, .. }) = commands
            .iter()
            .find(|c| c.action.name() == "SetCondition")
            .map(|c| &c.action)
        else {
            panic!("{}: no SetCondition", case.name);
        };
        let bootstrap = conditions.legacy("BootstrapReady").unwrap();
        match case.ready.or(case.data_secret_created) {
            Some(true) => assert!(bootstrap.is_true(), "{}", case.name),
            _ => {
                assert_eq!(bootstrap.reason, "WaitingForDataSecret", "{}", case.name);
                assert_eq!(bootstrap.severity, Severity::Info, "{}", case.name);
            }
        }
    }
}

#[test]
fn user_provided_data_secret_without_config_ref_is_left_alone() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.bootstrap_config_ref = None;
    mp.bootstrap_data_secret_name = Some("my-own-data".into());
    let mut objects = world(mp, &["p1-0"]);
    objects.remove(2);
    let (_, commands) = synced_engine(T0, objects);
    assert_eq!(lines(&commands), Vec::<String>::new());
}

#[test]
fn provider_ids_and_replicas_copied_from_infra_with_node_refs_set() {
    let mut mp = machine_pool("c1", "p1", 2);
    mp.status.phase = Some("Provisioning".into());
    let mut objects = world(mp, &["p1-0", "p1-1"]);
    for (_, o) in &mut objects {
        if let Object::Node(n) = o {
            *n = bare_node(&n.meta.name);
        }
    }
    let (_, commands) = started(T0, objects);
    assert_eq!(
        lines(&commands),
        [
            "RecordEvent MachinePool default/p1 Normal SuccessfulSetNodeRefs: [{Kind:Node Namespace: Name:p1-0 UID:uid-p1-0 APIVersion:v1 ResourceVersion: FieldPath:} {Kind:Node Namespace: Name:p1-1 UID:uid-p1-1 APIVersion:v1 ResourceVersion: FieldPath:}]",
            "PatchSpec Node p1-0@c1 MachinePool annotations, uninitialized taint removed",
            "PatchSpec Node p1-1@c1 MachinePool annotations, uninitialized taint removed",
            "PatchSpec MachinePool default/p1 spec.template.spec.bootstrap.dataSecretName=p1-bootstrap, spec.providerIDList (2 IDs)",
            "PatchStatus MachinePool default/p1 replicas=2, deprecated.v1beta1.readyReplicas=2, deprecated.v1beta1.availableReplicas=2, deprecated.v1beta1.unavailableReplicas=0, readyReplicas=2, availableReplicas=2, upToDateReplicas=2, nodeRefs (2 Nodes), initialization.bootstrapDataSecretCreated=true, initialization.infrastructureProvisioned=true, versions, phase=Running",
            "SetCondition MachinePool default/p1 Ready=True, BootstrapReady=True, InfrastructureReady=True, ReplicasReady=True",
        ]
    );
    assert_eq!(
        merge_of(&commands[1]),
        r#"{"metadata":{"annotations":{"cluster.x-k8s.io/cluster-name":"c1","cluster.x-k8s.io/cluster-namespace":"default","cluster.x-k8s.io/owner-kind":"MachinePool","cluster.x-k8s.io/owner-name":"p1"}}}"#
    );
    assert_eq!(
        merge_of(&commands[3]),
        r#"{"spec":{"template":{"spec":{"bootstrap":{"dataSecretName":"p1-bootstrap"}}},"providerIDList":["sim://c1/p1-0","sim://c1/p1-1"]}}"#
    );
    assert_eq!(
        merge_of(&commands[4]),
        r#"{"status":{"replicas":2,"deprecated":{"v1beta1":{"readyReplicas":2,"availableReplicas":2,"unavailableReplicas":0}},"readyReplicas":2,"availableReplicas":2,"upToDateReplicas":2,"nodeRefs":[{"apiVersion":"v1","kind":"Node","name":"p1-0","uid":"uid-p1-0"},{"apiVersion":"v1","kind":"Node","name":"p1-1","uid":"uid-p1-1"}],"initialization":{"bootstrapDataSecretCreated":true,"infrastructureProvisioned":true},"versions":[{"version":"v1.33.0","replicas":2}],"phase":"Running"}}"#
    );
}

#[test]
fn empty_provider_id_list_with_nonzero_replicas_is_not_copied() {
    let mut mp = settled_pool(&[]);
    mp.replicas = Some(2);
    mp.status.phase = Some("ScalingUp".into());
    let mut objects = world(mp, &[]);
    infra_mut(&mut objects).status_replicas = Some(2);
    let (_, commands) = synced_engine(T0, objects);
    let status = merge_of(find(&commands, "PatchStatus", "MachinePool default/p1"));
    assert!(!commands.iter().any(|c| c.action.name() == "PatchSpec"));
    assert_eq!(
        status,
        r#"{"status":{"replicas":2,"readyReplicas":2,"availableReplicas":2,"upToDateReplicas":2}}"#
    );
}

#[test]
fn infra_ready_through_initialization_provisioned_alone() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.status.infrastructure_provisioned = false;
    let mut objects = world(mp, &["p1-0"]);
    {
        let e = infra_mut(&mut objects);
        e.ready = None;
        e.provisioned = Some(true);
    }
    let (_, commands) = synced_engine(T0, objects);
    assert_eq!(
        lines(&commands),
        ["PatchStatus MachinePool default/p1 initialization.infrastructureProvisioned=true"]
    );
}

#[test]
fn scale_down_deletes_the_retired_node_and_resets_counters() {
    let mut mp = settled_pool(&["p1-0", "p1-1"]);
    mp.replicas = Some(1);
    mp.status.up_to_date_replicas = Some(1);
    mp.status.phase = Some("ScalingDown".into());
    let (mut engine, commands) = synced_engine(T0, world(mp, &["p1-0", "p1-1"]));
    assert_eq!(lines(&commands), Vec::<String>::new());
    let mut infra = adopted(infra_machine_pool("p1"), "p1");
    infra.provider_id_list = Some(ids(&["p1-0"]));
    infra.status_replicas = Some(1);
    infra.meta.resource_version = 2;
    let commands = upsert(
        &mut engine,
        secs(5),
        Scope::Management,
        Object::External(infra),
    );
    assert_eq!(
        lines(&commands),
        [
            "DeleteNode Node p1-1@c1",
            "RecordEvent MachinePool default/p1 Normal SuccessfulSetNodeRefs: [{Kind:Node Namespace: Name:p1-0 UID:uid-p1-0 APIVersion:v1 ResourceVersion: FieldPath:}]",
            "PatchSpec MachinePool default/p1 spec.providerIDList (1 IDs)",
            "PatchStatus MachinePool default/p1 replicas=1, deprecated.v1beta1.readyReplicas=1, deprecated.v1beta1.availableReplicas=1, readyReplicas=1, availableReplicas=1, nodeRefs (1 Nodes), versions, phase=Running",
        ]
    );
    // The Node deletion is not repeated while the answer and the watch catch up.
    let delete = commands[0].clone();
    assert_eq!(
        lines(&answer(&mut engine, secs(6), &delete, ok())),
        Vec::<String>::new()
    );
    // Once the Node is gone, so is the pool's memory of its deletion: an autoscaled pool
    // retires Nodes of new names for as long as it lives.
    let node = ObjectKey::new(workload("c1"), Kind::Node, "", "p1-1");
    engine.handle(secs(7), Input::Delete { key: node });
    drain_commands(&mut engine);
    let memory = engine.controllers().pool.memory(&pool_key("p1"));
    assert_eq!(memory.map(|m| m.node_deletions.len()), Some(0));
}

#[test]
fn scale_to_zero_deletes_every_node_and_empties_node_refs() {
    let mut mp = settled_pool(&["p1-0", "p1-1"]);
    mp.replicas = Some(0);
    mp.status.up_to_date_replicas = Some(0);
    mp.status.phase = Some("ScalingDown".into());
    let (mut engine, commands) = synced_engine(T0, world(mp, &["p1-0", "p1-1"]));
    assert_eq!(lines(&commands), Vec::<String>::new());
    let mut infra = adopted(infra_machine_pool("p1"), "p1");
    infra.provider_id_list = Some(vec![]);
    infra.status_replicas = Some(0);
    infra.meta.resource_version = 2;
    let commands = upsert(
        &mut engine,
        secs(5),
        Scope::Management,
        Object::External(infra),
    );
    assert_eq!(
        lines(&commands),
        [
            "DeleteNode Node p1-0@c1",
            "DeleteNode Node p1-1@c1",
            "RecordEvent MachinePool default/p1 Normal SuccessfulSetNodeRefs: []",
            "PatchSpec MachinePool default/p1 spec.providerIDList (0 IDs)",
            "PatchStatus MachinePool default/p1 replicas=0, deprecated.v1beta1.readyReplicas=0, deprecated.v1beta1.availableReplicas=0, readyReplicas=0, availableReplicas=0, nodeRefs (0 Nodes), versions, phase=Running",
        ]
    );
}

#[test]
fn scale_from_zero_picks_up_new_nodes_as_they_join() {
    let mut mp = settled_pool(&[]);
    mp.replicas = Some(1);
    let mut objects = world(mp, &[]);
    {
        let e = infra_mut(&mut objects);
        e.provider_id_list = Some(ids(&["p1-0"]));
        e.status_replicas = Some(1);
    }
    let (mut engine, commands) = synced_engine(T0, objects);
    // The list is copied; no Node yet: counters reset, nodeRefs untouched.
    assert_eq!(
        lines(&commands),
        [
            "PatchSpec MachinePool default/p1 spec.providerIDList (1 IDs)",
            "PatchStatus MachinePool default/p1 replicas=1, deprecated.v1beta1.unavailableReplicas=1, readyReplicas=1, availableReplicas=1, upToDateReplicas=1, phase=ScalingUp",
        ]
    );
    // The patches land (the API answers with the patched pool); then the Node joins.
    let mut mp = settled_pool(&[]);
    mp.replicas = Some(1);
    mp.provider_id_list = ids(&["p1-0"]);
    mp.status.replicas = Some(1);
    mp.status.legacy_unavailable_replicas = Some(1);
    (
        mp.status.ready_replicas,
        mp.status.available_replicas,
        mp.status.up_to_date_replicas,
    ) = (Some(1), Some(1), Some(1));
    mp.status.phase = Some("ScalingUp".into());
    mp.meta.resource_version = 2;
    for c in &commands {
        let landed = ApiOutcome::Ok {
            object: Some(Box::new(Object::MachinePool(mp.clone()))),
        };
        assert_eq!(
            lines(&answer(&mut engine, secs(1), c, landed)),
            Vec::<String>::new()
        );
    }
    let commands = upsert(
        &mut engine,
        secs(60),
        workload("c1"),
        Object::Node(bare_node("p1-0")),
    );
    assert_eq!(
        lines(&commands)[..2],
        [
            "RecordEvent MachinePool default/p1 Normal SuccessfulSetNodeRefs: [{Kind:Node Namespace: Name:p1-0 UID:uid-p1-0 APIVersion:v1 ResourceVersion: FieldPath:}]",
            "PatchSpec Node p1-0@c1 MachinePool annotations, uninitialized taint removed",
        ]
    );
    assert!(
        lines(&commands)[2].contains("phase=Running"),
        "{:#?}",
        lines(&commands)
    );
}

#[test]
fn uid_mismatch_reassigns_node_refs() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.status.node_refs[0].uid = "uid-old".into();
    let (_, commands) = synced_engine(T0, world(mp, &["p1-0"]));
    assert_eq!(
        lines(&commands),
        [
            "RecordEvent MachinePool default/p1 Normal SuccessfulSetNodeRefs: [{Kind:Node Namespace: Name:p1-0 UID:uid-p1-0 APIVersion:v1 ResourceVersion: FieldPath:}]",
            "PatchStatus MachinePool default/p1 nodeRefs (1 Nodes)",
        ]
    );
}

#[test]
fn min_ready_seconds_expiry_wakes_the_pool_and_counts_the_node_available() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.min_ready_seconds = Some(30);
    mp.status.legacy_available_replicas = Some(0);
    mp.status.legacy_unavailable_replicas = Some(1);
    let mut objects = world(mp, &["p1-0"]);
    node_mut(&mut objects, "p1-0").conditions =
        vec![ready_condition(ConditionStatus::True, secs(0))];
    let (mut engine, commands) = synced_engine(secs(10), objects);
    assert_eq!(lines(&commands), Vec::<String>::new());
    assert_eq!(
        engine.next_deadline(),
        Some(secs(30) + Duration::from_millis(1))
    );
    engine.handle(secs(31), Input::Tick);
    let commands = drain_commands(&mut engine);
    assert_eq!(
        lines(&commands),
        [
            "PatchStatus MachinePool default/p1 deprecated.v1beta1.availableReplicas=1, deprecated.v1beta1.unavailableReplicas=0"
        ]
    );
    assert_eq!(engine.next_deadline(), None);
}

#[test]
fn replicas_managed_by_annotation_makes_the_phase_scaling() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.replicas = Some(3);
    mp.meta
        .annotations
        .insert(REPLICAS_MANAGED_BY_ANNOTATION.into(), String::new());
    let (_, commands) = synced_engine(T0, world(mp, &["p1-0"]));
    assert_eq!(
        lines(&commands),
        ["PatchStatus MachinePool default/p1 upToDateReplicas=3, phase=Scaling"]
    );
}

#[test]
fn infra_failure_surfaces_and_failed_is_terminal() {
    let mut objects = world(settled_pool(&["p1-0"]), &["p1-0"]);
    {
        let e = infra_mut(&mut objects);
        e.failure_reason = Some("UpdateError".into());
        e.failure_message = Some("instance group is broken".into());
    }
    let (_, commands) = synced_engine(T0, objects);
    assert_eq!(
        merge_of(&commands[0]),
        r#"{"status":{"deprecated":{"v1beta1":{"failureReason":"UpdateError","failureMessage":"Failure detected from referenced resource infrastructure.cluster.x-k8s.io/v1beta2, Kind=DockerMachinePool with name \"p1\": instance group is broken"}},"phase":"Failed"}}"#
    );
    // Failure cleared on the provider, pool already Failed: stays Failed, nothing written.
    let mut mp = settled_pool(&["p1-0"]);
    mp.status.phase = Some("Failed".into());
    let (_, commands) = synced_engine(T0, world(mp, &["p1-0"]));
    assert_eq!(lines(&commands), Vec::<String>::new());
}

#[test]
fn infra_deleted_after_ready_is_invalid_configuration() {
    let mut objects = world(settled_pool(&["p1-0"]), &["p1-0"]);
    objects.remove(3);
    let (_, commands) = synced_engine(T0, objects);
    assert_eq!(
        merge_of(find(&commands, "PatchStatus", "MachinePool default/p1")),
        r#"{"status":{"deprecated":{"v1beta1":{"failureReason":"InvalidConfiguration","failureMessage":"MachinePool infrastructure resource DockerMachinePool default/p1 has been deleted after being ready"}},"phase":"Failed"}}"#
    );
    let Action::SetCondition { conditions, .. } =
        &find(&commands, "SetCondition", "MachinePool default/p1").action
    else {
        unreachable!()
    };
    let infra = conditions.legacy("InfrastructureReady").unwrap();
    assert_eq!(
        (
            infra.reason.as_str(),
            infra.severity,
            infra.message.as_str()
        ),
        (
            "IncorrectExternalRef",
            Severity::Error,
            "could not find infra reference of kind DockerMachinePool with name p1"
        )
    );
    assert_eq!(
        conditions.legacy("Ready").unwrap().reason,
        "IncorrectExternalRef"
    );
    assert_eq!(
        conditions.current("InfrastructureReady").unwrap().reason,
        "IncorrectExternalRef"
    );
}

/// The same absence when the pool reached the cache after the last list (its infrastructure
/// pool may simply not have arrived yet, each kind being its own watch): no terminal failure
/// on that guess; it waits, saying what it could not find.
#[test]
fn an_infra_pool_not_yet_in_the_cache_is_no_terminal_failure() {
    let mut objects = world(settled_pool(&["p1-0"]), &["p1-0"]);
    objects.remove(3);
    let pool = objects
        .iter()
        .position(|(_, o)| matches!(o, Object::MachinePool(_)));
    let (_, pool) = objects.remove(pool.expect("the world has the pool"));
    let (mut engine, _) = synced_engine(T0, objects);
    let commands = upsert(&mut engine, secs(1), Scope::Management, pool);
    assert!(
        lines(&commands)
            .iter()
            .all(|l| !l.contains("InvalidConfiguration") && !l.contains("Failed")),
        "{:#?}",
        lines(&commands)
    );
    assert!(
        commands.iter().all(|c| !matches!(
            &c.action,
            Action::PatchStatus { merge, .. } if merge.0.contains("InvalidConfiguration")
        )),
        "{:#?}",
        lines(&commands)
    );
}

#[test]
fn v1beta1_pool_gets_its_own_paths_and_both_condition_lists() {
    let mut mp = machine_pool("c1", "p1", 1);
    mp.version = ApiVersion::V1Beta1;
    let mut objects = world(mp, &["p1-0"]);
    *node_mut(&mut objects, "p1-0") = bare_node("p1-0");
    let (_, commands) = started(T0, objects);
    let status = find(&commands, "PatchStatus", "MachinePool default/p1");
    assert_eq!(
        status.action.target().api_version,
        "cluster.x-k8s.io/v1beta1"
    );
    assert_eq!(
        merge_of(status),
        r#"{"status":{"replicas":1,"readyReplicas":1,"availableReplicas":1,"unavailableReplicas":0,"v1beta2":{"readyReplicas":1,"availableReplicas":1,"upToDateReplicas":1},"nodeRefs":[{"apiVersion":"v1","kind":"Node","name":"p1-0","uid":"uid-p1-0"}],"bootstrapReady":true,"infrastructureReady":true,"versions":[{"version":"v1.33.0","replicas":1}],"phase":"Running"}}"#
    );
    let Action::SetCondition { conditions, .. } =
        &find(&commands, "SetCondition", "MachinePool default/p1").action
    else {
        unreachable!()
    };
    for t in ["BootstrapReady", "InfrastructureReady", "ReplicasReady"] {
        assert!(conditions.legacy(t).unwrap().is_true(), "{t}");
        assert!(conditions.current(t).unwrap().is_true(), "{t}");
    }
}

fn deleting_world(timeout: Option<Duration>) -> (Engine, Vec<Command>) {
    let mut mp = settled_pool(&["p1-0", "p1-1"]);
    mp.meta.deletion_timestamp = Some(T0);
    mp.node_deletion_timeout = timeout;
    mp.status.phase = Some("Deleting".into());
    synced_engine(T0, world(mp, &["p1-0", "p1-1"]))
}

fn remove(engine: &mut Engine, now: Timestamp, key: ObjectKey) -> Vec<Command> {
    engine.handle(now, Input::Delete { key });
    drain_commands(engine)
}

fn external_key(kind: &str, group: &str) -> ObjectKey {
    ObjectKey::management(
        Kind::External(GroupKind {
            group: group.into(),
            kind: kind.into(),
        }),
        "default",
        "p1",
    )
}

#[test]
fn deletion_removes_providers_then_every_node_then_the_finalizer() {
    let (mut engine, commands) = deleting_world(None);
    assert_eq!(
        lines(&commands),
        [
            "DeleteBootstrap KubeadmConfig default/p1",
            "DeleteInfrastructure DockerMachinePool default/p1",
        ]
    );
    assert!(answer(&mut engine, secs(1), &commands[0], ok()).is_empty());
    assert!(answer(&mut engine, secs(1), &commands[1], ok()).is_empty());
    let bootstrap = external_key("KubeadmConfig", "bootstrap.cluster.x-k8s.io");
    let infra = external_key("DockerMachinePool", "infrastructure.cluster.x-k8s.io");
    assert!(remove(&mut engine, secs(10), bootstrap).is_empty());
    let commands = remove(&mut engine, secs(20), infra);
    // Decision 9: every Node in nodeRefs, although their providerIDs are still listed.
    assert_eq!(
        lines(&commands),
        ["DeleteNode Node p1-0@c1", "DeleteNode Node p1-1@c1"]
    );
    assert!(answer(&mut engine, secs(21), &commands[0], ok()).is_empty());
    let last = answer(&mut engine, secs(21), &commands[1], ApiOutcome::NotFound);
    assert_eq!(
        lines(&last),
        ["RemoveFinalizer MachinePool default/p1 machinepool.cluster.x-k8s.io"]
    );
}

#[test]
fn node_deletion_gets_one_real_try_then_stops_after_the_timeout() {
    // 30 s after deletion: the 10 s timeout passed long ago, yet each Node gets a real try.
    let (mut engine, commands) = deleting_nodes();
    assert_eq!(
        lines(&commands),
        ["DeleteNode Node p1-0@c1", "DeleteNode Node p1-1@c1"]
    );
    let unreachable = || ApiOutcome::Unreachable {
        message: "connection refused".into(),
    };
    assert!(answer(&mut engine, secs(30), &commands[0], ok()).is_empty());
    assert!(answer(&mut engine, secs(30), &commands[1], unreachable()).is_empty());
    // Retries are paced and continue for 10 s after the first try.
    let mut retries = 0;
    let mut now = secs(30);
    let finalizer = loop {
        let deadline = engine.next_deadline().expect("a retry is scheduled");
        assert!(deadline > now);
        now = deadline;
        engine.handle(now, Input::Tick);
        let commands = drain_commands(&mut engine);
        match lines(&commands).as_slice() {
            [one] if one == "DeleteNode Node p1-1@c1" => {
                retries += 1;
                assert!(answer(&mut engine, now, &commands[0], unreachable()).is_empty());
            }
            [one] if one.starts_with("RemoveFinalizer") => break now,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(retries, 9);
    assert_eq!(finalizer, secs(40));
}

#[test]
fn node_deletion_timeout_zero_retries_forever() {
    let (mut engine, commands) = deleting_world(Some(Duration::ZERO));
    answer(&mut engine, secs(1), &commands[0], ok());
    answer(&mut engine, secs(1), &commands[1], ok());
    remove(
        &mut engine,
        secs(2),
        external_key("KubeadmConfig", "bootstrap.cluster.x-k8s.io"),
    );
    let commands = remove(
        &mut engine,
        secs(2),
        external_key("DockerMachinePool", "infrastructure.cluster.x-k8s.io"),
    );
    let refused = crate::testing::forbidden("nope", false);
    answer(&mut engine, secs(2), &commands[0], ok());
    let mut pending = commands[1].clone();
    let mut now = secs(2);
    for _ in 0..30 {
        assert!(answer(&mut engine, now, &pending, refused.clone()).is_empty());
        now = engine.next_deadline().unwrap();
        engine.handle(now, Input::Tick);
        let commands = drain_commands(&mut engine);
        assert_eq!(lines(&commands), ["DeleteNode Node p1-1@c1"]);
        pending = commands[0].clone();
    }
    assert!(now > secs(30));
}

#[test]
fn machine_pool_machines_are_created_per_infrastructure_machine() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.template_labels = labels(&[("team", "blue")]);
    mp.template_annotations = labels(&[("note", "x")]);
    let mut objects = world(mp, &["p1-0"]);
    infra_mut(&mut objects).infrastructure_machine_kind = Some("DockerMachinePoolMachine".into());
    let mut im = external(
        "infrastructure.cluster.x-k8s.io",
        "DockerMachinePoolMachine",
        "p1-0",
    );
    im.meta.labels = labels(&[(POOL_NAME_LABEL, "p1"), (CLUSTER_NAME_LABEL, "c1")]);
    im.provider_id = Some("sim://c1/p1-0".into());
    objects.push((Scope::Management, Object::External(im)));
    let (mut engine, commands) = synced_engine(T0, objects);
    let create = find(&commands, "CreateMachine", "Machine default/p1-0");
    assert_eq!(
        create.action.target().api_version,
        "cluster.x-k8s.io/v1beta2"
    );
    assert_eq!(
        merge_of(create),
        r#"{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Machine","metadata":{"name":"p1-0","namespace":"default","labels":{"team":"blue","cluster.x-k8s.io/pool-name":"p1","cluster.x-k8s.io/cluster-name":"c1"},"annotations":{"note":"x"},"ownerReferences":[{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"MachinePool","name":"p1","uid":"uid-default-p1","controller":true,"blockOwnerDeletion":true}]},"spec":{"clusterName":"c1","bootstrap":{"dataSecretName":""},"infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"DockerMachinePoolMachine","name":"p1-0"},"version":"v1.33.0"}}"#
    );
    // Counters now come from the Machines' conditions: none is Ready yet.
    assert!(
        merge_of(find(&commands, "PatchStatus", "MachinePool default/p1"))
            .contains(r#""readyReplicas":0,"availableReplicas":0,"upToDateReplicas":0"#)
    );
    // Once the Machine exists, nothing more is created.
    let mut m = machine("c1", "p1-0", Some("p1-0"));
    m.meta.labels = labels(&[(POOL_NAME_LABEL, "p1"), (CLUSTER_NAME_LABEL, "c1")]);
    m.infrastructure_ref.name = "p1-0".into();
    let commands = upsert(
        &mut engine,
        secs(1),
        Scope::Management,
        Object::Machine(m.clone()),
    );
    assert!(!commands.iter().any(|c| c.action.name() == "CreateMachine"));
    // It gets what the pool applies and it lacks: template labels and annotations, and the
    // version of its Node.
    assert_eq!(
        merge_of(find(&commands, "PatchSpec", "Machine default/p1-0")),
        r#"{"metadata":{"labels":{"team":"blue"},"annotations":{"note":"x"}},"spec":{"version":"v1.33.0"}}"#
    );
    // §3.7: the pool's Machine is marked UpToDate, with its other conditions kept.
    let written_by = |c: &Command| -> Conditions {
        match &c.action {
            Action::SetCondition { conditions, .. } => conditions.clone(),
            _ => unreachable!(),
        }
    };
    let write = find(&commands, "SetCondition", "Machine default/p1-0").clone();
    let conditions = written_by(&write);
    let up = conditions.current("UpToDate").expect("UpToDate written");
    assert_eq!(
        (up.status, up.reason.as_str(), up.message.as_str()),
        (ConditionStatus::True, "UpToDate", "")
    );
    assert_eq!(conditions.current.len(), m.conditions.current.len() + 1);
    // Written (the API answers with the Machine as written): nothing more to say.
    let mut written = m.clone();
    written.meta.resource_version += 1;
    written.conditions = conditions;
    let as_written = |m: &Machine| ApiOutcome::Ok {
        object: Some(Box::new(Object::Machine(m.clone()))),
    };
    let commands = answer(&mut engine, secs(2), &write, as_written(&written));
    assert!(
        !commands.iter().any(|c| c.action.name() == "SetCondition"),
        "{:?}",
        lines(&commands)
    );
    // A deleting Machine is not up to date. The deletion controller writes first (one
    // condition write per Machine at a time); the pool's follows its answer and keeps it.
    let mut deleting = written;
    deleting.meta.resource_version += 1;
    deleting.meta.deletion_timestamp = Some(secs(3));
    deleting.meta.finalizers = vec![MACHINE_FINALIZER.to_string()];
    let commands = upsert(
        &mut engine,
        secs(3),
        Scope::Management,
        Object::Machine(deleting.clone()),
    );
    let first = find(&commands, "SetCondition", "Machine default/p1-0").clone();
    assert_eq!(first.controller, ControllerId::Deletion);
    deleting.meta.resource_version += 1;
    deleting.conditions = written_by(&first);
    let commands = answer(&mut engine, secs(3), &first, as_written(&deleting));
    let write = find(&commands, "SetCondition", "Machine default/p1-0");
    assert_eq!(write.controller, ControllerId::Pool);
    let conditions = written_by(write);
    let up = conditions.current("UpToDate").expect("UpToDate written");
    assert_eq!(
        (up.status, up.reason.as_str(), up.message.as_str()),
        (
            ConditionStatus::False,
            "NotUpToDate",
            "Machine is being deleted"
        )
    );
    assert!(
        conditions.current("Deleting").is_some(),
        "kept: {conditions:?}"
    );
}

#[test]
fn node_events_wake_only_the_pool_that_lists_them() {
    let (mut engine, _) = synced_engine(T0, world(settled_pool(&["p1-0"]), &["p1-0"]));
    let mut stranger = node("other");
    stranger.provider_id = Some("sim://c1/other".into());
    let commands = upsert(&mut engine, secs(1), workload("c1"), Object::Node(stranger));
    assert!(commands.is_empty());
    // The pool's Node goes NotReady: counters follow at once (no 30 s requeue).
    let mut n = pool_node("p1-0");
    n.conditions = vec![ready_condition(ConditionStatus::False, secs(2))];
    n.meta.resource_version = 2;
    let commands = upsert(&mut engine, secs(2), workload("c1"), Object::Node(n));
    assert_eq!(
        lines(&commands),
        [
            "PatchStatus MachinePool default/p1 deprecated.v1beta1.readyReplicas=0, deprecated.v1beta1.availableReplicas=0, deprecated.v1beta1.unavailableReplicas=1, phase=ScalingUp",
            "SetCondition MachinePool default/p1 Ready=False (WaitingForReplicasReady), ReplicasReady=False (WaitingForReplicasReady)",
        ]
    );
}

#[test]
fn reconciling_twice_issues_nothing_new_while_patches_are_in_flight() {
    let mut engine = Engine::new();
    for (scope, objects) in [
        (Scope::Management, vec![]),
        (workload("c1"), vec![Object::Node(pool_node("p1-0"))]),
    ] {
        engine.handle(T0, Input::Relist { scope, objects });
    }
    let mp = machine_pool("c1", "p1", 1);
    let mut objects: Vec<Object> = world(mp, &["p1-0"])
        .into_iter()
        .filter(|(s, _)| *s == Scope::Management)
        .map(|(_, o)| o)
        .collect();
    engine.handle(
        T0,
        Input::Relist {
            scope: Scope::Management,
            objects: objects.clone(),
        },
    );
    let first = drain_commands(&mut engine);
    assert!(!first.is_empty());
    // The same objects again (a relist): everything is in flight, nothing new is queued.
    objects.reverse();
    engine.handle(
        secs(1),
        Input::Relist {
            scope: Scope::Management,
            objects,
        },
    );
    assert_eq!(lines(&drain_commands(&mut engine)), Vec::<String>::new());
    let _ = Target {
        key: pool_key("p1"),
        api_version: String::new(),
    };
}

#[test]
fn a_pool_name_too_long_for_a_label_is_hashed_in_its_machines_and_routed_back() {
    let long = format!("pool-{}", "x".repeat(70));
    let mut mp = settled_pool(&["p1-0"]);
    mp.meta.name = long.clone();
    let im = external(
        "infrastructure.cluster.x-k8s.io",
        "DockerMachinePoolMachine",
        "m-0",
    );
    let machine = machines::machine_pool_machine(&mp, &im, None);
    let label = machine["metadata"]["labels"][POOL_NAME_LABEL]
        .as_str()
        .expect("a pool-name label")
        .to_string();
    assert_eq!(label, format_label_value(&long));
    assert!(label.starts_with("hash_") && label.len() <= 63, "{label}");

    // A Machine or infrastructure machine with that label wakes the pool it came from.
    let mut store = crate::store::Store::default();
    store.upsert(&Scope::Management, Object::MachinePool(mp));
    store.upsert(&Scope::Management, Object::MachinePool(settled_pool(&[])));
    let mut out = Vec::new();
    Pools::pools_labelled(&store, "default", &label, &mut out);
    assert_eq!(
        out,
        [ObjectKey::management(Kind::MachinePool, "default", &long)]
    );
    out.clear();
    Pools::pools_labelled(&store, "default", "p1", &mut out);
    assert_eq!(
        out,
        [ObjectKey::management(Kind::MachinePool, "default", "p1")]
    );
}

#[test]
fn existing_pool_machines_are_updated_only_when_they_lack_something_and_are_the_pools() {
    let mut mp = settled_pool(&["p1-0"]);
    mp.template_labels = labels(&[("team", "blue")]);
    let mut m = machine("c1", "p1-0", Some("p1-0"));
    m.meta.owner_references.clear();
    m.meta.labels = labels(&[
        ("team", "blue"),
        (POOL_NAME_LABEL, "p1"),
        (CLUSTER_NAME_LABEL, "c1"),
    ]);
    m.kubernetes_version = Some("v1.33.0".into());
    assert_eq!(machines::machine_update(&mp, &m, Some("v1.33.0")), None);
    let (merge, summary) = machines::machine_update(&mp, &m, Some("v1.34.0")).unwrap();
    assert_eq!(merge.to_string(), r#"{"spec":{"version":"v1.34.0"}}"#);
    assert_eq!(summary, "spec.version=v1.34.0");
    let mut relabelled = m.clone();
    relabelled.meta.labels.insert("team".into(), "red".into());
    let (merge, _) = machines::machine_update(&mp, &relabelled, None).unwrap();
    assert_eq!(
        merge.to_string(),
        r#"{"metadata":{"labels":{"team":"blue"}}}"#
    );
    // Deleting, or controlled by another owner: left alone.
    let mut deleting = relabelled.clone();
    deleting.meta.deletion_timestamp = Some(T0);
    assert_eq!(machines::machine_update(&mp, &deleting, None), None);
    let mut owned = relabelled;
    owned.meta.owner_references = vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "MachineSet".into(),
        name: "ms".into(),
        uid: "u".into(),
        controller: true,
    }];
    assert_eq!(machines::machine_update(&mp, &owned, None), None);
}

#[test]
fn an_unreadable_infrastructure_pool_or_node_deletes_nothing() {
    let mut mp = settled_pool(&["p1-0", "p1-1"]);
    mp.replicas = Some(1);
    mp.status.up_to_date_replicas = Some(1);
    mp.status.phase = Some("ScalingDown".into());
    let (mut engine, commands) = synced_engine(T0, world(mp, &["p1-0", "p1-1"]));
    assert_eq!(lines(&commands), Vec::<String>::new());
    let problem = "spec.providerIDList: expected a list";
    let bad_infra = unreadable(
        Object::External(infra_machine_pool("p1")).kind(),
        "default",
        "p1",
        problem,
    );
    let commands = upsert(&mut engine, secs(5), Scope::Management, bad_infra.clone());
    assert_eq!(
        lines(&commands),
        [
            "RecordEvent MachinePool default/p1 Warning ObjectUnreadable: DockerMachinePool default/p1 in the management cluster cannot be read: spec.providerIDList: expected a list; the MachinePool waits until it can be read",
            "SetCondition MachinePool default/p1 ObjectsReadable=False (ObjectUnreadable)",
        ]
    );
    // Ticks and other changes add nothing, not even the same warning again.
    engine.handle(secs(600), Input::Tick);
    assert_eq!(lines(&drain_commands(&mut engine)), Vec::<String>::new());

    // The infrastructure pool reads again, but retired Node p1-1 does not: it is not deleted.
    let workload = workload("c1");
    let bad_node = unreadable(Kind::Node, "", "p1-1", "status: expected an object");
    upsert(&mut engine, secs(601), workload.clone(), bad_node);
    let mut infra = adopted(infra_machine_pool("p1"), "p1");
    infra.provider_id_list = Some(ids(&["p1-0"]));
    infra.status_replicas = Some(1);
    infra.meta.resource_version = 2;
    let commands = upsert(
        &mut engine,
        secs(602),
        Scope::Management,
        Object::External(infra),
    );
    assert!(
        lines(&commands)
            .iter()
            .all(|l| !l.starts_with("DeleteNode")),
        "{:#?}",
        lines(&commands)
    );
    // Once it reads, it is.
    let mut n = pool_node("p1-1");
    n.meta.resource_version = 3;
    let commands = upsert(&mut engine, secs(603), workload, Object::Node(n));
    assert_eq!(lines(&commands)[..1], ["DeleteNode Node p1-1@c1"]);
}

/// The deleting pool's Nodes being deleted: `DeleteNode` for p1-0 and p1-1 in flight at 30 s.
fn deleting_nodes() -> (Engine, Vec<Command>) {
    let (mut engine, commands) = deleting_world(None);
    answer(&mut engine, secs(1), &commands[0], ok());
    answer(&mut engine, secs(1), &commands[1], ok());
    remove(
        &mut engine,
        secs(30),
        external_key("KubeadmConfig", "bootstrap.cluster.x-k8s.io"),
    );
    let commands = remove(
        &mut engine,
        secs(30),
        external_key("DockerMachinePool", "infrastructure.cluster.x-k8s.io"),
    );
    assert_eq!(commands.len(), 2, "{:?}", lines(&commands));
    (engine, commands)
}

/// `corrupt` bends p1-0's deletion memory; the answer for p1-1 then checks the pool's memory.
fn node_deletion_corrupted(corrupt: impl FnOnce(&mut PoolNodeDeletion)) {
    let (mut engine, commands) = deleting_nodes();
    let memory = engine
        .controllers_mut()
        .pool
        .memory
        .get_mut(&pool_key("p1"))
        .expect("the pool remembers its Node deletions");
    corrupt(memory.node_deletions.get_mut("p1-0").expect("p1-0 tried"));
    answer(&mut engine, secs(30), &commands[1], ok());
}

#[test]
fn the_pool_checks_pass_on_an_uncorrupted_deletion() {
    node_deletion_corrupted(|_| {});
}

#[test]
#[should_panic(expected = "MachinePool MachinePool default/p1: Node p1-0 deletion")]
fn a_node_deletion_retried_before_its_first_try_fails_the_check() {
    node_deletion_corrupted(|d| {
        *d = PoolNodeDeletion::Failed {
            first_try: secs(20),
            retry_not_before: secs(10),
        };
    });
}

#[test]
#[should_panic(expected = "Node p1-0 deletion: Requested")]
fn a_node_deletion_first_tried_in_the_future_fails_the_check() {
    node_deletion_corrupted(|d| {
        *d = PoolNodeDeletion::Requested {
            first_try: secs(3600),
        }
    });
}

#[test]
fn a_pool_node_deletion_moves_between_its_states() {
    let queued = PoolNodeDeletion::queued(None, secs(1));
    assert_eq!(queued, PoolNodeDeletion::Requested { first_try: secs(1) });
    let mut failed = queued;
    failed.failed(secs(6));
    assert_eq!(
        failed,
        PoolNodeDeletion::Failed {
            first_try: secs(1),
            retry_not_before: secs(6)
        }
    );
    assert_eq!(failed.retry_not_before(), Some(secs(6)));
    // A retry keeps the first try and forgets the pacing.
    let retried = PoolNodeDeletion::queued(Some(failed), secs(7));
    assert_eq!(retried, PoolNodeDeletion::Requested { first_try: secs(1) });
    let mut deleted = retried;
    deleted.succeeded();
    assert_eq!(deleted, PoolNodeDeletion::Deleted { first_try: secs(1) });
    assert!(deleted.is_deleted() && !retried.is_deleted());
    // A deletion is never undone by a late failure or another queued attempt.
    deleted.failed(secs(9));
    assert_eq!(deleted, PoolNodeDeletion::Deleted { first_try: secs(1) });
    assert_eq!(
        PoolNodeDeletion::queued(Some(deleted), secs(9)),
        PoolNodeDeletion::Deleted { first_try: secs(1) }
    );
    assert_eq!(deleted.retry_not_before(), None);
}

#[test]
fn impossible_node_counts_are_named() {
    let node = pool_node("p1-0");
    let result =
        |ready: i32, available: i32, nodes: Vec<&'static Node>| super::noderefs::NodeRefsResult {
            references: refs(&["p1-0"]),
            nodes,
            ready,
            available,
            next_available_at: None,
        };
    let node: &'static Node = Box::leak(Box::new(node));
    assert_eq!(result(1, 1, vec![node]).violation(), None);
    for bad in [
        result(1, 2, vec![node]),
        result(2, 1, vec![node]),
        result(1, -1, vec![node]),
        result(1, 1, vec![]),
    ] {
        assert!(
            bad.violation().is_some(),
            "{:?}",
            (bad.ready, bad.available)
        );
    }
}

#[test]
fn the_pool_flow_follows_upstreams_gates_in_order() {
    use super::reconcile::{FlowFacts, PoolFlow};
    let c1 = cluster("c1");
    let unknown = (pool_key("p1"), "corrupt".to_string());
    let facts = |unreadable: bool, deleting, has_finalizer, cluster: bool, paused| FlowFacts {
        unreadable: unreadable.then(|| unknown.clone()),
        deleting,
        has_finalizer,
        cluster: cluster.then_some(&c1),
        paused,
    };
    // Every combination, so that each flow is reached and the gates' order is pinned.
    let mut reached = std::collections::BTreeSet::new();
    for bits in 0..32_u8 {
        let bit = |i: u8| bits & (1 << i) != 0;
        let f = facts(bit(0), bit(1), bit(2), bit(3), bit(4));
        let expected = if f.unreadable.is_some() {
            PoolFlow::WaitForReadable(unknown.clone())
        } else if !f.has_finalizer && f.deleting {
            PoolFlow::Released
        } else if !f.has_finalizer {
            PoolFlow::AddFinalizer
        } else if f.cluster.is_none() {
            PoolFlow::WaitForCluster
        } else if f.paused {
            PoolFlow::Paused
        } else if f.deleting {
            PoolFlow::Delete(&c1)
        } else {
            PoolFlow::Reconcile(&c1)
        };
        let flow = PoolFlow::of(f.clone());
        assert_eq!(flow, expected, "{f:?}");
        reached.insert(format!("{flow:?}").split('(').next().map(str::to_string));
    }
    assert_eq!(reached.len(), 7, "every flow is reachable: {reached:?}");
}

fn c1_unreachable(reason: Option<crate::connection::Unreachable>) -> Input {
    Input::ClusterUnreachable {
        scope: workload("c1"),
        reason,
    }
}

fn with_conditions(mut mp: MachinePool, c: &Command, rv: u64) -> MachinePool {
    // (the pool as the API holds it after the write `c`)
    if let Action::SetCondition { conditions, .. } = &c.action {
        mp.conditions = conditions.clone();
    }
    mp.meta.resource_version = rv;
    mp
}

/// Found by the kubeconfig wait (issue 26): a pool whose workload cluster cannot be reached
/// kept its nodeRefs waiting without a word.
#[test]
fn a_pool_waiting_for_an_unreachable_cluster_says_why_once_and_stops_once_it_connects() {
    use crate::connection::Unreachable;
    let mp = settled_pool(&["p1-0"]);
    let management: Vec<_> = world(mp.clone(), &["p1-0"])
        .into_iter()
        .filter(|(s, _)| *s == Scope::Management)
        .collect();
    let (mut engine, first) = synced_engine(T0, management);
    assert_eq!(lines(&first), Vec::<String>::new());

    engine.handle(T0, c1_unreachable(Some(Unreachable::SecretMissing)));
    let out = drain_commands(&mut engine);
    assert_eq!(
        lines(&out),
        [
            "SetCondition MachinePool default/p1 WorkloadClusterReachable=False (WorkloadClusterUnreachable)",
            "RecordEvent MachinePool default/p1 Warning WorkloadClusterUnreachable: cannot reach \
             workload cluster default/c1: its kubeconfig Secret default/c1-kubeconfig is missing; \
             the MachinePool's Nodes wait until it can be reached"
        ]
    );
    let condition = match &out[0].action {
        Action::SetCondition { conditions, .. } => conditions
            .current("WorkloadClusterReachable")
            .cloned()
            .unwrap(),
        _ => unreachable!(),
    };
    assert_eq!(
        condition.message,
        "cannot reach workload cluster default/c1: its kubeconfig Secret default/c1-kubeconfig is \
         missing; the MachinePool's Nodes wait until it can be reached"
    );
    // The write in flight: the pool reconciled again says nothing more.
    let again = upsert(
        &mut engine,
        T0,
        workload("c1"),
        Object::Namespace(namespace("x")),
    );
    assert_eq!(lines(&again), Vec::<String>::new());
    engine.handle(T0, c1_unreachable(Some(Unreachable::SecretMissing)));
    assert_eq!(lines(&drain_commands(&mut engine)), Vec::<String>::new());
    // Landed (the API answers with the pool as written): nothing more either.
    let landed = with_conditions(mp.clone(), &out[0], mp.meta.resource_version + 1);
    let written = ApiOutcome::Ok {
        object: Some(Box::new(Object::MachinePool(landed))),
    };
    assert_eq!(
        lines(&answer(&mut engine, T0, &out[0], written)),
        Vec::<String>::new()
    );
    // Connected: the condition goes, without an event.
    engine.handle(secs(5), c1_unreachable(None));
    let out = drain_commands(&mut engine);
    assert_eq!(
        lines(&out),
        ["SetCondition MachinePool default/p1 WorkloadClusterReachable removed"]
    );
}

/// An adopted pool (beside CAPI's manager) writes its Machines' `UpToDate` with the Machine's
/// resourceVersion as a precondition: CAPI's Machine controller writes their other conditions.
#[test]
fn an_adopted_pool_writes_its_machines_conditions_with_a_precondition() {
    let mut mp = settled_pool(&["p1-0"]);
    for (k, v) in [
        (crate::model::PAUSED_ANNOTATION, ""),
        (
            crate::ownership::ADOPTED_ANNOTATION,
            crate::ownership::HOOK_OWNER,
        ),
    ] {
        mp.meta.annotations.insert(k.into(), v.into());
    }
    let mut objects = world(mp, &["p1-0"]);
    infra_mut(&mut objects).infrastructure_machine_kind = Some("DockerMachinePoolMachine".into());
    let mut m = machine("c1", "p1-0", Some("p1-0"));
    m.meta.labels = labels(&[(POOL_NAME_LABEL, "p1"), (CLUSTER_NAME_LABEL, "c1")]);
    m.meta.resource_version = 41;
    objects.push((Scope::Management, Object::Machine(m)));
    let mut engine = crate::Engine::new();
    engine.handle(T0, Input::Ownership(crate::ownership::Ownership::Takeover));
    let (_, commands) = crate::testing::synced(engine, T0, objects);
    let write = find(&commands, "SetOwnCondition", "Machine default/p1-0");
    let Action::SetOwnCondition {
        resource_version,
        conditions,
        ..
    } = &write.action
    else {
        unreachable!()
    };
    assert_eq!(*resource_version, 41);
    assert!(conditions.current("UpToDate").is_some());
    assert!(
        !commands
            .iter()
            .any(|c| c.action.name() == "SetCondition"
                && c.action.target().key.kind == Kind::Machine),
        "{:?}",
        lines(&commands)
    );
}

/// In takeover a pool this controller has not adopted is CAPI's: nothing is written for it.
#[test]
fn a_pool_not_adopted_is_left_to_capi_in_takeover() {
    let mut objects = world(settled_pool(&["p1-0"]), &["p1-0"]);
    infra_mut(&mut objects).infrastructure_machine_kind = Some("DockerMachinePoolMachine".into());
    let mut m = machine("c1", "p1-0", Some("p1-0"));
    m.meta.labels = labels(&[(POOL_NAME_LABEL, "p1"), (CLUSTER_NAME_LABEL, "c1")]);
    objects.push((Scope::Management, Object::Machine(m)));
    let mut engine = crate::Engine::new();
    engine.handle(T0, Input::Ownership(crate::ownership::Ownership::Takeover));
    let (_, commands) = crate::testing::synced(engine, T0, objects.clone());
    assert!(commands.is_empty(), "{:?}", lines(&commands));
    let (_, alone) = crate::testing::synced(crate::Engine::new(), T0, objects);
    assert!(
        alone.iter().any(|c| c.action.name() == "SetCondition"),
        "alone, the same world is reconciled: {:?}",
        lines(&alone)
    );
}

/// A refused `ObjectsReadable=False` is written again once its backoff ends, and once written
/// it is not written again (the status convergence rule found it never was).
#[test]
fn a_refused_objects_readable_write_is_tried_again() {
    let mut mp = settled_pool(&["p1-0", "p1-1"]);
    mp.replicas = Some(1);
    let (mut engine, _) = synced_engine(T0, world(mp.clone(), &["p1-0", "p1-1"]));
    let bad_infra = unreadable(
        Object::External(infra_machine_pool("p1")).kind(),
        "default",
        "p1",
        "spec.providerIDList: expected a list",
    );
    let commands = upsert(&mut engine, secs(5), Scope::Management, bad_infra);
    let is_write = |c: &&Command| matches!(c.action, Action::SetCondition { .. });
    let write = commands.iter().find(is_write).expect("written").clone();
    let refused = ApiOutcome::Error {
        code: 500,
        message: "Internal error occurred".into(),
    };
    let commands = answer(&mut engine, secs(5), &write, refused);
    assert_eq!(
        lines(&commands),
        Vec::<String>::new(),
        "not before its backoff"
    );
    engine.handle(secs(10), Input::Tick);
    let commands = drain_commands(&mut engine);
    assert_eq!(
        lines(&commands),
        ["SetCondition MachinePool default/p1 ObjectsReadable=False (ObjectUnreadable)"]
    );
    let landed = with_conditions(mp.clone(), &commands[0], mp.meta.resource_version + 1);
    let landed = ApiOutcome::Ok {
        object: Some(Box::new(Object::MachinePool(landed))),
    };
    let written = answer(&mut engine, secs(10), &commands[0], landed);
    engine.handle(secs(100), Input::Tick);
    let later = drain_commands(&mut engine);
    assert_eq!(lines(&written), Vec::<String>::new());
    assert_eq!(lines(&later), Vec::<String>::new());
}
