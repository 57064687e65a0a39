use super::*;
use crate::command::{Action, Command, ControllerId};
use crate::model::{Kind, ObjectKey};
use crate::{BATCH_INPUTS_MAX, Target};
use serde_json::json;

fn outputs(intake: &mut Intake) -> Vec<Output> {
    std::iter::from_fn(|| intake.poll_output()).collect()
}

fn c1() -> Scope {
    Scope::Workload(ClusterName::new("default", "c1"))
}

fn management(event: StreamEvent, stream: &str) -> Arrival {
    Arrival::Watch {
        scope: Scope::Management,
        stream: stream.to_string(),
        event,
    }
}

fn cluster() -> serde_json::Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
           "metadata": {"name": "c1", "namespace": "default", "uid": "u1", "resourceVersion": "5"}})
}

fn cordon(id: u64) -> Command {
    Command {
        id,
        cause: 1,
        controller: ControllerId::Deletion,
        owner: ObjectKey::management(Kind::Machine, "default", "m1"),
        action: Action::Cordon {
            node: Target {
                key: ObjectKey::new(c1(), Kind::Node, "", "n1"),
                api_version: "v1".into(),
            },
        },
        reason: String::new(),
        series: None,
    }
}

/// Lists every management stream: the first list of the cluster goes out once all have.
fn list_management(intake: &mut Intake, objects: &[serde_json::Value]) -> Option<Input> {
    for key in management_streams() {
        intake.push(management(StreamEvent::Init, &key.id()));
        for o in objects {
            if o["kind"] == key.kind.as_str() {
                intake.push(management(
                    StreamEvent::InitApply(o.clone().into()),
                    &key.id(),
                ));
            }
        }
        intake.push(management(StreamEvent::InitDone, &key.id()));
    }
    intake.next_input(BATCH_INPUTS_MAX)
}

#[test]
fn the_management_kinds_are_watched_from_the_start() {
    let mut intake = Intake::new();
    let watched: Vec<String> = outputs(&mut intake)
        .into_iter()
        .map(|o| match o {
            Output::Watch(k) if k.scope == Scope::Management => k.kind,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(watched.len(), 7);
    assert!(watched.contains(&"Machine".to_string()));
}

#[test]
fn a_cluster_is_connected_then_watched_and_commands_before_that_are_unreachable() {
    let mut intake = Intake::new();
    outputs(&mut intake);
    let relist = list_management(&mut intake, &[cluster()]);
    assert!(matches!(relist, Some(Input::Relist { .. })), "{relist:?}");
    assert_eq!(outputs(&mut intake), [Output::Connect(c1())]);
    // No connection yet: a command for c1 is answered at once.
    match intake.dispatch(&cordon(7)) {
        Some(Input::ApiResult {
            command: 7,
            outcome: ApiOutcome::Unreachable { .. },
        }) => {}
        other => panic!("{other:?}"),
    }
    intake.push(Arrival::Connected { scope: c1() });
    assert_eq!(intake.next_input(BATCH_INPUTS_MAX), None);
    let watches = outputs(&mut intake);
    assert_eq!(watches.len(), workload_streams(&c1()).len());
    assert!(
        watches
            .iter()
            .all(|o| matches!(o, Output::Watch(k) if k.scope == c1()))
    );
    assert_eq!(intake.dispatch(&cordon(8)), None);
    // Seen again (a relist, an update): no second connection.
    intake.push(management(
        StreamEvent::Apply(cluster().into()),
        "cluster.x-k8s.io/Cluster",
    ));
    intake.next_input(BATCH_INPUTS_MAX);
    assert!(outputs(&mut intake).is_empty());
    // The Cluster goes: so does the connection.
    intake.push(management(
        StreamEvent::Delete(cluster().into()),
        "cluster.x-k8s.io/Cluster",
    ));
    intake.next_input(BATCH_INPUTS_MAX);
    assert_eq!(outputs(&mut intake), [Output::Disconnect(c1())]);
    assert!(intake.dispatch(&cordon(9)).is_some());
}

#[test]
fn provider_kinds_are_watched_once_when_first_named() {
    let mut intake = Intake::new();
    outputs(&mut intake);
    let machine = |name: &str| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"clusterName": "c1",
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name}}})
    };
    list_management(&mut intake, &[machine("m1"), machine("m2")]);
    assert_eq!(
        outputs(&mut intake),
        [Output::WatchProvider {
            group: "infrastructure.cluster.x-k8s.io".into(),
            version: None,
            kind: "DockerMachine".into()
        }]
    );
}

#[test]
fn a_backlog_is_one_input_of_at_most_the_cap_and_a_lone_answer_is_itself() {
    let mut intake = Intake::new();
    let ok = || ApiOutcome::Ok { object: None };
    intake.push(Arrival::Result {
        command: 1,
        outcome: ok(),
    });
    assert!(matches!(
        intake.next_input(BATCH_INPUTS_MAX),
        Some(Input::ApiResult { command: 1, .. })
    ));
    for command in 0..10 {
        intake.push(Arrival::Result {
            command,
            outcome: ok(),
        });
    }
    let sizes: Vec<usize> = std::iter::from_fn(|| intake.next_input(4))
        .map(|i| match i {
            Input::Batch { inputs } => inputs.len(),
            _ => 1,
        })
        .collect();
    assert_eq!(sizes, [4, 4, 2]);
}

fn machine(name: &str, deleting: bool) -> serde_json::Value {
    let mut m = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
           "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": "7"},
           "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "s"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name}}});
    if deleting {
        m["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        m["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    }
    m
}

const MACHINES: &str = "cluster.x-k8s.io/Machine";

fn workload_event(stream: &str, event: StreamEvent) -> Arrival {
    Arrival::Watch {
        scope: c1(),
        stream: stream.to_string(),
        event,
    }
}

/// Lists `stream` of c1 with `objects`; what the intake makes of it.
fn list_c1(intake: &mut Intake, stream: &str, objects: &[serde_json::Value]) -> Vec<Input> {
    intake.push(workload_event(stream, StreamEvent::Init));
    for o in objects {
        intake.push(workload_event(
            stream,
            StreamEvent::InitApply(o.clone().into()),
        ));
    }
    intake.push(workload_event(stream, StreamEvent::InitDone));
    flat(intake.next_input(BATCH_INPUTS_MAX))
}

fn flat(input: Option<Input>) -> Vec<Input> {
    match input {
        Some(Input::Batch { inputs }) => inputs,
        Some(one) => vec![one],
        None => Vec::new(),
    }
}

fn drain_outputs(outputs: &[Output]) -> (usize, usize) {
    let drain: Vec<String> = drain_streams(&c1()).iter().map(StreamKey::id).collect();
    let count = |f: fn(&Output) -> Option<&StreamKey>| {
        outputs
            .iter()
            .filter_map(f)
            .filter(|k| k.scope == c1() && drain.contains(&k.id()))
            .count()
    };
    (
        count(|o| match o {
            Output::Watch(k) => Some(k),
            _ => None,
        }),
        count(|o| match o {
            Output::Unwatch(k) => Some(k),
            _ => None,
        }),
    )
}

#[test]
fn a_clusters_drain_kinds_are_watched_while_one_of_its_machines_is_being_deleted() {
    let drain = drain_streams(&c1()).len();
    let mut intake = Intake::new();
    outputs(&mut intake);
    list_management(
        &mut intake,
        &[cluster(), machine("m1", false), machine("m2", false)],
    );
    // The Machines name DockerMachines: management's first relist waits for their list.
    let docker = "infrastructure.cluster.x-k8s.io/DockerMachine";
    intake.push(management(StreamEvent::Init, docker));
    intake.push(management(StreamEvent::InitDone, docker));
    let relist = intake.next_input(BATCH_INPUTS_MAX);
    assert!(matches!(relist, Some(Input::Relist { .. })), "{relist:?}");
    outputs(&mut intake);
    intake.push(Arrival::Connected { scope: c1() });
    intake.next_input(BATCH_INPUTS_MAX);
    // At rest: the Nodes only, and the first list of c1 is theirs.
    assert_eq!(drain_outputs(&outputs(&mut intake)), (0, 0));
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    let first = list_c1(&mut intake, "/Node", &[node]);
    assert!(
        matches!(first.as_slice(), [Input::Relist { objects, .. }] if objects.len() == 1),
        "{first:?}"
    );
    // m1 is being deleted: c1's drain kinds are watched; each list relists its kind.
    intake.push(management(
        StreamEvent::Apply(machine("m1", true).into()),
        MACHINES,
    ));
    intake.next_input(BATCH_INPUTS_MAX);
    assert_eq!(drain_outputs(&outputs(&mut intake)), (drain, 0));
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "web-0", "namespace": "app"}, "spec": {"nodeName": "n1"}});
    let pods = list_c1(&mut intake, "/Pod", std::slice::from_ref(&pod));
    assert!(
        matches!(pods.as_slice(), [Input::RelistKind { kind: Kind::Pod, objects, .. }] if objects.len() == 1),
        "{pods:?}"
    );
    // A second deletion in c1 watches nothing more; the first one ending unwatches nothing.
    intake.push(management(
        StreamEvent::Apply(machine("m2", true).into()),
        MACHINES,
    ));
    intake.push(management(
        StreamEvent::Delete(machine("m1", true).into()),
        MACHINES,
    ));
    intake.next_input(BATCH_INPUTS_MAX);
    assert_eq!(drain_outputs(&outputs(&mut intake)), (0, 0));
    // The last one gone: the drain kinds are unwatched and forgotten, after its deletion.
    intake.push(management(
        StreamEvent::Delete(machine("m2", true).into()),
        MACHINES,
    ));
    let inputs = flat(intake.next_input(BATCH_INPUTS_MAX));
    assert_eq!(drain_outputs(&outputs(&mut intake)), (0, drain));
    assert!(matches!(inputs[0], Input::Delete { .. }), "{inputs:?}");
    let forgotten: Vec<&Kind> = inputs[1..]
        .iter()
        .map(|i| match i {
            Input::Unwatched { scope, kind } if *scope == c1() => kind,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(forgotten, Kind::DRAIN_ONLY.iter().collect::<Vec<_>>());
    // What a stopped stream still delivers is dropped.
    intake.push(workload_event("/Pod", StreamEvent::Apply(pod.into())));
    assert_eq!(intake.next_input(BATCH_INPUTS_MAX), None);
    // A relist of the Machines that shows one being deleted watches them again.
    intake.push(management(StreamEvent::Init, MACHINES));
    intake.push(management(
        StreamEvent::InitApply(machine("m3", true).into()),
        MACHINES,
    ));
    intake.push(management(StreamEvent::InitDone, MACHINES));
    intake.next_input(BATCH_INPUTS_MAX);
    assert_eq!(drain_outputs(&outputs(&mut intake)), (drain, 0));
}

#[test]
fn a_machine_deleted_before_its_cluster_connects_is_drained_from_the_first_list() {
    let mut intake = Intake::new();
    outputs(&mut intake);
    list_management(&mut intake, &[cluster(), machine("m1", true)]);
    assert_eq!(drain_outputs(&outputs(&mut intake)), (0, 0));
    intake.push(Arrival::Connected { scope: c1() });
    intake.next_input(BATCH_INPUTS_MAX);
    let watches = outputs(&mut intake);
    assert_eq!(drain_outputs(&watches), (drain_streams(&c1()).len(), 0));
    assert_eq!(watches.len(), 1 + drain_streams(&c1()).len(), "{watches:?}");
    // The first relist waits for every stream started with it; the drain kinds follow it,
    // in the same input, each as its kind's relist.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "web-0", "namespace": "app"}, "spec": {"nodeName": "n1"}});
    assert!(list_c1(&mut intake, "/Pod", &[pod]).is_empty());
    assert!(list_c1(&mut intake, "/Node", &[]).is_empty());
    for key in drain_streams(&c1())
        .iter()
        .filter(|k| k.kind != "Pod" && k.kind != "VolumeAttachment")
    {
        assert!(list_c1(&mut intake, &key.id(), &[]).is_empty(), "{key:?}");
    }
    let first = list_c1(&mut intake, "storage.k8s.io/VolumeAttachment", &[]);
    assert!(matches!(first[0], Input::Relist { .. }), "{first:?}");
    let pods = first.iter().find_map(|i| match i {
        Input::RelistKind {
            kind: Kind::Pod,
            objects,
            ..
        } => Some(objects.len()),
        _ => None,
    });
    assert_eq!(pods, Some(1), "{first:?}");
    assert_eq!(first.len(), 1 + Kind::DRAIN_ONLY.len(), "{first:?}");
}

fn failed(reason: Unreachable) -> Arrival {
    Arrival::ConnectFailed {
        scope: c1(),
        reason,
    }
}

fn unreachable_inputs(input: Option<Input>) -> Vec<Option<Unreachable>> {
    let inputs = match input {
        Some(Input::Batch { inputs }) => inputs,
        Some(other) => vec![other],
        None => Vec::new(),
    };
    inputs
        .into_iter()
        .filter_map(|i| match i {
            Input::ClusterUnreachable { scope, reason } if scope == c1() => Some(reason),
            _ => None,
        })
        .collect()
}

#[test]
fn a_failing_connector_is_news_once_per_reason_and_its_connection_clears_it() {
    let mut intake = Intake::new();
    outputs(&mut intake);
    list_management(&mut intake, &[cluster()]);
    assert_eq!(outputs(&mut intake), [Output::Connect(c1())]);
    // The connector retries every few seconds: the same reason again is no input at all.
    for _ in 0..3 {
        intake.push(failed(Unreachable::SecretMissing));
    }
    assert_eq!(
        unreachable_inputs(intake.next_input(BATCH_INPUTS_MAX)),
        [Some(Unreachable::SecretMissing)]
    );
    intake.push(failed(Unreachable::SecretMissing));
    assert_eq!(intake.next_input(BATCH_INPUTS_MAX), None);
    // A new reason is news; so is the connection, once, before the cluster's watches.
    intake.push(failed(Unreachable::NoValue));
    intake.push(failed(Unreachable::NoValue));
    intake.push(Arrival::Connected { scope: c1() });
    assert_eq!(
        unreachable_inputs(intake.next_input(BATCH_INPUTS_MAX)),
        [Some(Unreachable::NoValue), None]
    );
    assert!(matches!(outputs(&mut intake).first(), Some(Output::Watch(k)) if k.scope == c1()));
    // A late report of a connector that has since connected changes nothing.
    intake.push(failed(Unreachable::SecretMissing));
    assert_eq!(intake.next_input(BATCH_INPUTS_MAX), None);
}

#[test]
fn a_cluster_connected_at_once_says_nothing_of_its_connection() {
    let mut intake = Intake::new();
    outputs(&mut intake);
    list_management(&mut intake, &[cluster()]);
    intake.push(Arrival::Connected { scope: c1() });
    assert_eq!(unreachable_inputs(intake.next_input(BATCH_INPUTS_MAX)), []);
}

#[test]
fn what_the_engine_knew_before_a_restart_is_not_news_and_a_connection_clears_it() {
    let mut intake = Intake::new();
    intake.note_unreachable(&c1(), &Unreachable::SecretMissing);
    outputs(&mut intake);
    list_management(&mut intake, &[cluster()]);
    intake.push(failed(Unreachable::SecretMissing));
    assert_eq!(intake.next_input(BATCH_INPUTS_MAX), None);
    intake.push(Arrival::Connected { scope: c1() });
    assert_eq!(
        unreachable_inputs(intake.next_input(BATCH_INPUTS_MAX)),
        [None]
    );
}

#[test]
fn a_long_error_is_bounded_and_a_cluster_no_longer_named_is_forgotten() {
    let mut intake = Intake::new();
    outputs(&mut intake);
    // Not named by any Cluster: a stray report.
    intake.push(failed(Unreachable::SecretMissing));
    assert_eq!(intake.next_input(BATCH_INPUTS_MAX), None);
    list_management(&mut intake, &[cluster()]);
    let long = "x".repeat(10 * crate::connection::ERROR_CHARS_MAX);
    intake.push(failed(Unreachable::Unparsable { error: long }));
    let reported = unreachable_inputs(intake.next_input(BATCH_INPUTS_MAX));
    let [Some(Unreachable::Unparsable { error })] = reported.as_slice() else {
        panic!("{reported:?}");
    };
    assert!(error.len() <= crate::connection::ERROR_CHARS_MAX + 3);
    intake.push(management(
        StreamEvent::Delete(cluster().into()),
        "cluster.x-k8s.io/Cluster",
    ));
    intake.next_input(BATCH_INPUTS_MAX);
    assert!(intake.unreachable.is_empty(), "{:?}", intake.unreachable);
}
