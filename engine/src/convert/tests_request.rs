//! Commands → API requests, paths, plurals and condition JSON.

use super::*;
use crate::command::{Action, Command, ControllerId, EventType, JsonText, Target};
use crate::model::*;
use crate::testing::workload;
use crate::time::Timestamp;
use serde_json::json;

fn machine_target(version: &str) -> Target {
    Target {
        key: ObjectKey::management(Kind::Machine, "default", "m1"),
        api_version: format!("cluster.x-k8s.io/{version}"),
    }
}

fn node_target() -> Target {
    Target {
        key: ObjectKey::new(workload("c1"), Kind::Node, "", "n1"),
        api_version: "v1".into(),
    }
}

fn pod_target() -> Target {
    Target {
        key: ObjectKey::new(workload("c1"), Kind::Pod, "app", "web-0"),
        api_version: "v1".into(),
    }
}

fn infra_target() -> Target {
    Target {
        key: ObjectKey::management(
            Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "DockerMachine"),
            "default",
            "m1",
        ),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
    }
}

fn command(action: Action) -> Command {
    Command {
        id: 42,
        cause: 7,
        controller: ControllerId::Deletion,
        owner: ObjectKey::management(Kind::Machine, "default", "m1"),
        action,
        reason: "test".into(),
        series: None,
    }
}

fn request(action: Action) -> ApiRequest {
    request_for(&command(action))
}

#[test]
fn cordon_is_a_merge_patch_of_unschedulable() {
    let r = request(Action::Cordon {
        node: node_target(),
    });
    assert_eq!(
        r,
        ApiRequest::MergePatch {
            target: node_target(),
            subresource: None,
            patch: json!({"spec": {"unschedulable": true}}),
        }
    );
    assert_eq!(r.method(), "PATCH");
    assert_eq!(r.path(), "/api/v1/nodes/n1");
    assert_eq!(r.content_type(), Some("application/merge-patch+json"));
}

#[test]
fn evict_posts_a_policy_v1_eviction() {
    let r = request(Action::Evict {
        pod: pod_target(),
        grace_period_seconds: Some(30),
    });
    assert_eq!(
        r,
        ApiRequest::Evict {
            pod: pod_target(),
            grace_period_seconds: Some(30)
        }
    );
    assert_eq!(r.method(), "POST");
    assert_eq!(r.path(), "/api/v1/namespaces/app/pods/web-0/eviction");
    assert_eq!(
        r.body(),
        Some(json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "web-0", "namespace": "app"},
            "deleteOptions": {"gracePeriodSeconds": 30}
        }))
    );
    assert_eq!(
        eviction_body(&pod_target(), None),
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": "app"}})
    );
}

#[test]
fn every_delete_action_is_a_delete_of_its_target() {
    let remediation = Target {
        key: ObjectKey::management(
            Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "Metal3Remediation"),
            "default",
            "m1",
        ),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
    };
    let cases = vec![
        (
            Action::DeleteInfrastructure {
                target: infra_target(),
            },
            "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/default/dockermachines/m1",
        ),
        (
            Action::DeleteBootstrap {
                target: Target {
                    key: ObjectKey::management(
                        Kind::from_group_kind("bootstrap.cluster.x-k8s.io", "KubeadmConfig"),
                        "default",
                        "m1",
                    ),
                    api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
                },
            },
            "/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/default/kubeadmconfigs/m1",
        ),
        (
            Action::DeleteNode {
                node: node_target(),
            },
            "/api/v1/nodes/n1",
        ),
        (
            Action::DeleteRemediation {
                target: remediation,
            },
            "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/default/metal3remediations/m1",
        ),
        (
            Action::DeleteMachine {
                target: machine_target("v1beta2"),
            },
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines/m1",
        ),
    ];
    for (action, path) in cases {
        let target = action.target().clone();
        let r = request(action);
        assert_eq!(r, ApiRequest::Delete { target });
        assert_eq!(r.method(), "DELETE");
        assert_eq!(r.path(), path);
        assert_eq!(r.body(), None);
    }
}

#[test]
fn finalizer_actions_are_read_modify_write_requests() {
    let add = request(Action::AddFinalizer {
        target: machine_target("v1beta1"),
        finalizer: MACHINE_FINALIZER.into(),
    });
    assert_eq!(
        add,
        ApiRequest::AddFinalizer {
            target: machine_target("v1beta1"),
            finalizer: MACHINE_FINALIZER.into()
        }
    );
    assert_eq!(add.content_type(), Some("application/json-patch+json"));
    let remove = request(Action::RemoveFinalizer {
        target: machine_target("v1beta1"),
        finalizer: MACHINE_FINALIZER.into(),
    });
    assert_eq!(
        remove,
        ApiRequest::RemoveFinalizer {
            target: machine_target("v1beta1"),
            finalizer: MACHINE_FINALIZER.into()
        }
    );
    assert_eq!(
        remove.path(),
        "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/machines/m1"
    );
    assert_eq!(remove.body(), None);
}

#[test]
fn finalizer_json_patches_test_what_was_read() {
    let none = json!({"metadata": {"name": "m1"}});
    assert_eq!(
        finalizer_json_patch(&none, "f", FinalizerChange::Add),
        Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
        ]))
    );
    assert_eq!(
        finalizer_json_patch(&none, "f", FinalizerChange::Remove),
        None
    );
    let some = json!({"metadata": {"finalizers": ["a", "f"]}});
    assert_eq!(finalizer_json_patch(&some, "f", FinalizerChange::Add), None);
    assert_eq!(
        finalizer_json_patch(&some, "g", FinalizerChange::Add),
        Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["a", "f"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "g"}
        ]))
    );
    assert_eq!(
        finalizer_json_patch(&some, "f", FinalizerChange::Remove),
        Some(json!([
            {"op": "test", "path": "/metadata/finalizers/1", "value": "f"},
            {"op": "remove", "path": "/metadata/finalizers/1"}
        ]))
    );
}

fn conditions() -> Conditions {
    let mut deleting = Condition::new(
        "Deleting",
        ConditionStatus::True,
        "DrainingNode",
        "Drain not completed yet",
    );
    deleting.last_transition_time = Some(Timestamp::parse_rfc3339("2024-01-01T00:01:00Z").unwrap());
    let mut draining = Condition::new("DrainingSucceeded", ConditionStatus::False, "Draining", "")
        .with_severity(Severity::Info);
    draining.last_transition_time = Some(Timestamp::parse_rfc3339("2024-01-01T00:01:00Z").unwrap());
    let ready = Condition::new("Ready", ConditionStatus::True, "", "");
    Conditions {
        current: vec![deleting],
        legacy: vec![ready, draining],
    }
}

#[test]
fn set_condition_patches_status_in_the_targets_version() {
    let v1beta1 = request(Action::SetCondition {
        target: machine_target("v1beta1"),
        conditions: conditions(),
        summary: "DrainingSucceeded=False (Draining)".into(),
    });
    assert_eq!(
        v1beta1,
        ApiRequest::MergePatch {
            target: machine_target("v1beta1"),
            subresource: Some(Subresource::Status),
            patch: json!({"status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "DrainingSucceeded", "status": "False", "severity": "Info",
                     "lastTransitionTime": "2024-01-01T00:01:00Z", "reason": "Draining"}
                ],
                "v1beta2": {"conditions": [
                    {"type": "Deleting", "status": "True", "lastTransitionTime": "2024-01-01T00:01:00Z",
                     "reason": "DrainingNode", "message": "Drain not completed yet"}
                ]}
            }}),
        }
    );
    assert_eq!(
        v1beta1.path(),
        "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/machines/m1/status"
    );
    let v1beta2 = request(Action::SetCondition {
        target: machine_target("v1beta2"),
        conditions: conditions(),
        summary: String::new(),
    });
    assert_eq!(
        v1beta2.body(),
        Some(json!({"status": {
            "conditions": [
                {"type": "Deleting", "status": "True", "lastTransitionTime": "2024-01-01T00:01:00Z",
                 "reason": "DrainingNode", "message": "Drain not completed yet"}
            ],
            "deprecated": {"v1beta1": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DrainingSucceeded", "status": "False", "severity": "Info",
                 "lastTransitionTime": "2024-01-01T00:01:00Z", "reason": "Draining"}
            ]}}
        }}))
    );
}

#[test]
fn conditions_json_round_trips_through_object_from_json() {
    for version in [ApiVersion::V1Beta1, ApiVersion::V1Beta2] {
        let api_version = match version {
            ApiVersion::V1Beta1 => "cluster.x-k8s.io/v1beta1",
            ApiVersion::V1Beta2 => "cluster.x-k8s.io/v1beta2",
        };
        let cluster = json!({
            "apiVersion": api_version, "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "default"},
            "status": conditions_json(version, &conditions()),
        });
        let Some(Object::Cluster(c)) = object_from_json(&cluster).unwrap() else {
            panic!("expected a Cluster")
        };
        assert_eq!(c.conditions, conditions(), "{api_version}");
    }
}

#[test]
fn patch_status_spec_and_owner_reference_are_merge_patches() {
    let status = request(Action::PatchStatus {
        target: machine_target("v1beta2"),
        merge: JsonText::from_value(
            &json!({"status": {"deletion": {"nodeDrainStartTime": "2024-01-01T00:01:00Z"}}}),
        ),
        summary: "nodeDrainStartTime".into(),
    });
    assert_eq!(
        status,
        ApiRequest::MergePatch {
            target: machine_target("v1beta2"),
            subresource: Some(Subresource::Status),
            patch: json!({"status": {"deletion": {"nodeDrainStartTime": "2024-01-01T00:01:00Z"}}}),
        }
    );
    let spec = request(Action::PatchSpec {
        target: machine_target("v1beta2"),
        merge: JsonText::from_value(&json!({"metadata": {"annotations": {"a": null}}})),
        summary: String::new(),
    });
    assert_eq!(
        spec,
        ApiRequest::MergePatch {
            target: machine_target("v1beta2"),
            subresource: None,
            patch: json!({"metadata": {"annotations": {"a": null}}}),
        }
    );
    let owner = request(Action::SetOwnerReference {
        target: machine_target("v1beta2"),
        merge: JsonText::from_value(
            &json!({"metadata": {"ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool", "name": "mp1", "uid": "u"}]}}),
        ),
        summary: String::new(),
    });
    assert!(matches!(
        owner,
        ApiRequest::MergePatch {
            subresource: None,
            ..
        }
    ));
}

#[test]
fn a_merge_patch_that_is_not_an_object_becomes_a_no_op() {
    let r = request(Action::PatchSpec {
        target: machine_target("v1beta2"),
        merge: JsonText("not json".into()),
        summary: String::new(),
    });
    assert_eq!(r.body(), Some(json!({})));
    let r = request(Action::PatchStatus {
        target: machine_target("v1beta2"),
        merge: JsonText("null".into()),
        summary: String::new(),
    });
    assert_eq!(r.body(), Some(json!({})));
}

#[test]
fn create_actions_post_the_object_to_its_collection() {
    let object = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Remediation",
                        "metadata": {"name": "m1", "namespace": "default"}, "spec": {"strategy": {"type": "Reboot"}}});
    let target = Target {
        key: ObjectKey::management(
            Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "Metal3Remediation"),
            "default",
            "m1",
        ),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
    };
    let r = request(Action::CreateRemediation {
        target: target.clone(),
        object: JsonText::from_value(&object),
    });
    assert_eq!(
        r,
        ApiRequest::Create {
            target,
            body: object.clone()
        }
    );
    assert_eq!(r.method(), "POST");
    assert_eq!(
        r.path(),
        "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/default/metal3remediations"
    );
    let machine = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": {"name": "mp1-0", "namespace": "default"}});
    let r = request(Action::CreateMachine {
        target: machine_target("v1beta2"),
        object: JsonText::from_value(&machine),
    });
    assert_eq!(
        r.path(),
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines"
    );
    assert_eq!(r.body(), Some(machine));
}

#[test]
fn record_event_creates_a_deterministic_core_event() {
    let action = Action::RecordEvent {
        regarding: machine_target("v1beta2"),
        type_: EventType::Normal,
        reason: "MachineMarkedUnhealthy".into(),
        message: "Machine default/m1 has been marked as unhealthy".into(),
    };
    let first = request(action.clone());
    let again = request(action.clone());
    assert_eq!(first, again, "same command, same Event");
    let ApiRequest::Create { target, body } = &first else {
        panic!("expected a Create, got {first:?}")
    };
    let name = target.key.name.clone();
    let suffix = name.strip_prefix("m1.").expect("name is <object>.<hash>");
    assert_eq!(suffix.len(), 16);
    assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(target.key.scope, Scope::Management);
    assert_eq!(target.key.namespace, "default");
    assert_eq!(target.api_version, "v1");
    assert_eq!(first.path(), "/api/v1/namespaces/default/events");
    assert_eq!(
        body,
        &json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1", "namespace": "default"},
            "reason": "MachineMarkedUnhealthy",
            "message": "Machine default/m1 has been marked as unhealthy",
            "type": "Normal",
            "source": {"component": "lifecycle"},
            "count": 1
        })
    );
    // Another command id names another Event.
    let mut other = command(action);
    other.id = 43;
    let ApiRequest::Create { target: t2, .. } = request_for(&other) else {
        panic!("expected a Create")
    };
    assert_ne!(t2.key.name, name);
}

#[test]
fn events_about_cluster_scoped_objects_go_to_default() {
    let r = request(Action::RecordEvent {
        regarding: node_target(),
        type_: EventType::Warning,
        reason: "DeletionFailed".into(),
        message: "x".into(),
    });
    let ApiRequest::Create { target, body } = &r else {
        panic!("expected a Create")
    };
    assert_eq!(target.key.namespace, "default");
    assert_eq!(target.key.scope, workload("c1"));
    assert_eq!(body["type"], "Warning");
    assert_eq!(body["involvedObject"].get("namespace"), None);
}

#[test]
fn plural_follows_english_rules() {
    for (kind, expected) in [
        ("Node", "nodes"),
        ("Pod", "pods"),
        ("Policy", "policies"),
        ("Ingress", "ingresses"),
        ("Gateway", "gateways"),
        ("Machine", "machines"),
        ("MachineHealthCheck", "machinehealthchecks"),
        ("KubeadmControlPlane", "kubeadmcontrolplanes"),
        ("DockerMachinePool", "dockermachinepools"),
        ("PodDisruptionBudget", "poddisruptionbudgets"),
        ("VolumeAttachment", "volumeattachments"),
        ("Box", "boxes"),
        ("Patch", "patches"),
        ("Mesh", "meshes"),
    ] {
        assert_eq!(plural(kind), expected, "{kind}");
    }
}

#[test]
fn api_paths_for_core_group_and_cluster_scoped_objects() {
    assert_eq!(
        api_path(&pod_target(), None),
        "/api/v1/namespaces/app/pods/web-0"
    );
    assert_eq!(
        api_path(&node_target(), Some("status")),
        "/api/v1/nodes/n1/status"
    );
    assert_eq!(
        api_path(&machine_target("v1beta1"), Some("status")),
        "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/machines/m1/status"
    );
    let pdb = Target {
        key: ObjectKey::new(workload("c1"), Kind::PodDisruptionBudget, "app", "web"),
        api_version: "policy/v1".into(),
    };
    assert_eq!(
        api_path(&pdb, None),
        "/apis/policy/v1/namespaces/app/poddisruptionbudgets/web"
    );
    let va = Target {
        key: ObjectKey::new(workload("c1"), Kind::VolumeAttachment, "", "csi-1"),
        api_version: "storage.k8s.io/v1".into(),
    };
    assert_eq!(
        api_path(&va, None),
        "/apis/storage.k8s.io/v1/volumeattachments/csi-1"
    );
    assert_eq!(collection_path(&node_target()), "/api/v1/nodes");
}

#[test]
fn capi_version_of_target_api_versions() {
    assert_eq!(
        capi_version_of("cluster.x-k8s.io/v1beta1"),
        ApiVersion::V1Beta1
    );
    assert_eq!(
        capi_version_of("cluster.x-k8s.io/v1beta2"),
        ApiVersion::V1Beta2
    );
    assert_eq!(capi_version_of("v1"), ApiVersion::V1Beta2);
}

#[test]
fn event_names_stay_valid_for_long_object_names() {
    let long = "m".repeat(253);
    let r = request(Action::RecordEvent {
        regarding: Target {
            key: ObjectKey::management(Kind::Machine, "default", &long),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
        },
        type_: EventType::Normal,
        reason: "R".into(),
        message: "M".into(),
    });
    let name = &r.target().key.name;
    assert_eq!(name.len(), 253);
    assert!(name.starts_with("mmm") && name.as_bytes()[236] == b'.');
}

/// A condition patch is written in one member order (the order a reader of the wire or a
/// timeline sees): `status` holds the version's own list first, each condition `type`,
/// `status`, `severity`, `lastTransitionTime`, `reason`, `message`.
#[test]
fn condition_patches_keep_their_member_order() {
    let body = request(Action::SetCondition {
        target: machine_target("v1beta1"),
        conditions: conditions(),
        summary: String::new(),
    })
    .body()
    .expect("a merge patch");
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        concat!(
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"},"#,
            r#"{"type":"DrainingSucceeded","status":"False","severity":"Info","lastTransitionTime":"2024-01-01T00:01:00Z","reason":"Draining"}],"#,
            r#""v1beta2":{"conditions":[{"type":"Deleting","status":"True","lastTransitionTime":"2024-01-01T00:01:00Z","reason":"DrainingNode","message":"Drain not completed yet"}]}}}"#
        )
    );
}
