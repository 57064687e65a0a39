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
                intake.push(management(StreamEvent::InitApply(o.clone()), &key.id()));
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
        StreamEvent::Apply(cluster()),
        "cluster.x-k8s.io/Cluster",
    ));
    intake.next_input(BATCH_INPUTS_MAX);
    assert!(outputs(&mut intake).is_empty());
    // The Cluster goes: so does the connection.
    intake.push(management(
        StreamEvent::Delete(cluster()),
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
