//! CAPI kinds in both API versions, from manifests shaped like `kubectl get -o json` output.

use super::*;
use crate::model::*;
use crate::time::{Duration, Timestamp};
use serde_json::{Value, json};

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn convert(value: Value) -> Object {
    object_from_json(&value)
        .unwrap_or_else(|e| panic!("conversion failed: {e}"))
        .expect("a modelled kind")
}

fn convert_err(value: Value) -> String {
    object_from_json(&value)
        .expect_err("conversion must fail")
        .to_string()
}

fn machine_of(value: Value) -> Machine {
    match convert(value) {
        Object::Machine(m) => m,
        other => panic!("expected a Machine, got {other:?}"),
    }
}

fn metadata() -> Value {
    json!({
        "name": "m1",
        "namespace": "default",
        "uid": "8e0f2a6c-1",
        "resourceVersion": "4711",
        "generation": 3,
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "deletionTimestamp": "2024-01-01T00:01:00Z",
        "labels": {"cluster.x-k8s.io/cluster-name": "c1", "cluster.x-k8s.io/set-name": "ms1"},
        "annotations": {"pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate": "ctl"},
        "finalizers": ["machine.cluster.x-k8s.io"],
        "ownerReferences": [{
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "name": "ms1",
            "uid": "uid-ms1", "controller": true, "blockOwnerDeletion": true
        }]
    })
}

fn v1beta1_machine() -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": metadata(),
        "spec": {
            "clusterName": "c1",
            "bootstrap": {
                "configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": "m1-boot", "namespace": "default"},
                "dataSecretName": "m1-boot-data"
            },
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachine", "name": "m1-infra"},
            "providerID": "docker:////c1-m1",
            "version": "v1.31.0",
            "nodeDrainTimeout": "10m",
            "nodeVolumeDetachTimeout": "5m30s",
            "nodeDeletionTimeout": "10s"
        },
        "status": {
            "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"},
            "phase": "Deleting",
            "bootstrapReady": true,
            "infrastructureReady": true,
            "failureReason": "UpdateError",
            "failureMessage": "instance gone",
            "deletion": {
                "nodeDrainStartTime": "2024-01-01T00:01:00Z",
                "waitForNodeVolumeDetachStartTime": "2024-01-01T00:02:00Z",
                "waitForPreDrainHookStartTime": "2024-01-01T00:01:00Z",
                "waitForPreTerminateHookStartTime": "2024-01-01T00:03:00Z"
            },
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:30Z"},
                {"type": "DrainingSucceeded", "status": "False", "severity": "Info", "reason": "Draining",
                 "message": "Draining Node n1", "lastTransitionTime": "2024-01-01T00:01:00Z"}
            ],
            "v1beta2": {"conditions": [
                {"type": "Deleting", "status": "True", "reason": "DrainingNode",
                 "message": "Drain not completed yet", "lastTransitionTime": "2024-01-01T00:01:00Z",
                 "observedGeneration": 3}
            ]}
        }
    })
}

fn v1beta2_machine() -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": metadata(),
        "spec": {
            "clusterName": "c1",
            "bootstrap": {
                "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "m1-boot"},
                "dataSecretName": "m1-boot-data"
            },
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "m1-infra"},
            "providerID": "docker:////c1-m1",
            "version": "v1.31.0",
            "minReadySeconds": 0,
            "deletion": {
                "nodeDrainTimeoutSeconds": 600,
                "nodeVolumeDetachTimeoutSeconds": 330,
                "nodeDeletionTimeoutSeconds": 10
            }
        },
        "status": {
            "nodeRef": {"name": "n1"},
            "phase": "Deleting",
            "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
            "deletion": {
                "nodeDrainStartTime": "2024-01-01T00:01:00Z",
                "waitForNodeVolumeDetachStartTime": "2024-01-01T00:02:00Z",
                "waitForPreDrainHookStartTime": "2024-01-01T00:01:00Z",
                "waitForPreTerminateHookStartTime": "2024-01-01T00:03:00Z"
            },
            "conditions": [
                {"type": "Deleting", "status": "True", "reason": "DrainingNode",
                 "message": "Drain not completed yet", "lastTransitionTime": "2024-01-01T00:01:00Z",
                 "observedGeneration": 3}
            ],
            "deprecated": {"v1beta1": {
                "failureReason": "UpdateError",
                "failureMessage": "instance gone",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:30Z"},
                    {"type": "DrainingSucceeded", "status": "False", "severity": "Info", "reason": "Draining",
                     "message": "Draining Node n1", "lastTransitionTime": "2024-01-01T00:01:00Z"}
                ]
            }}
        }
    })
}

fn expected_conditions() -> Conditions {
    let mut ready = Condition::new("Ready", ConditionStatus::True, "", "");
    ready.last_transition_time = Some(ts("2024-01-01T00:00:30Z"));
    let mut draining = Condition::new(
        "DrainingSucceeded",
        ConditionStatus::False,
        "Draining",
        "Draining Node n1",
    )
    .with_severity(Severity::Info);
    draining.last_transition_time = Some(ts("2024-01-01T00:01:00Z"));
    let mut deleting = Condition::new(
        "Deleting",
        ConditionStatus::True,
        "DrainingNode",
        "Drain not completed yet",
    );
    deleting.last_transition_time = Some(ts("2024-01-01T00:01:00Z"));
    Conditions {
        current: vec![deleting],
        legacy: vec![ready, draining],
    }
}

#[test]
fn v1beta1_machine_maps_every_field() {
    let m = machine_of(v1beta1_machine());
    assert_eq!(m.version, ApiVersion::V1Beta1);
    assert_eq!(m.meta.name, "m1");
    assert_eq!(m.meta.namespace, "default");
    assert_eq!(m.meta.uid, "8e0f2a6c-1");
    assert_eq!(m.meta.resource_version, 4711);
    assert_eq!(m.meta.generation, 3);
    assert_eq!(m.meta.creation_timestamp, Some(ts("2024-01-01T00:00:00Z")));
    assert_eq!(m.meta.deletion_timestamp, Some(ts("2024-01-01T00:01:00Z")));
    assert_eq!(m.meta.labels[CLUSTER_NAME_LABEL], "c1");
    assert!(
        m.meta
            .has_annotation("pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate")
    );
    assert_eq!(m.meta.finalizers, vec![MACHINE_FINALIZER.to_string()]);
    assert_eq!(
        m.meta.owner_references,
        vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "MachineSet".into(),
            name: "ms1".into(),
            uid: "uid-ms1".into(),
            controller: true,
        }]
    );
    assert_eq!(m.cluster_name, "c1");
    assert_eq!(
        m.bootstrap_config_ref,
        Some(ObjectRef {
            api_group: "bootstrap.cluster.x-k8s.io".into(),
            api_version: Some("bootstrap.cluster.x-k8s.io/v1beta1".into()),
            kind: "KubeadmConfig".into(),
            name: "m1-boot".into(),
            namespace: "default".into(),
        })
    );
    assert_eq!(
        m.bootstrap_data_secret_name.as_deref(),
        Some("m1-boot-data")
    );
    assert_eq!(
        m.infrastructure_ref,
        ObjectRef {
            api_group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: Some("infrastructure.cluster.x-k8s.io/v1beta1".into()),
            kind: "DockerMachine".into(),
            name: "m1-infra".into(),
            // No namespace in the reference: the Machine's.
            namespace: "default".into(),
        }
    );
    assert_eq!(m.provider_id.as_deref(), Some("docker:////c1-m1"));
    assert_eq!(m.kubernetes_version.as_deref(), Some("v1.31.0"));
    assert_eq!(m.node_drain_timeout, Some(Duration::from_mins(10)));
    assert_eq!(m.node_volume_detach_timeout, Some(Duration::from_secs(330)));
    assert_eq!(m.node_deletion_timeout, Some(Duration::from_secs(10)));
    assert_eq!(m.node_ref.as_deref(), Some("n1"));
    assert_eq!(m.phase.as_deref(), Some("Deleting"));
    assert_eq!(
        m.deletion,
        DeletionTimes {
            node_drain_start: Some(ts("2024-01-01T00:01:00Z")),
            wait_for_node_volume_detach_start: Some(ts("2024-01-01T00:02:00Z")),
            wait_for_pre_drain_hook_start: Some(ts("2024-01-01T00:01:00Z")),
            wait_for_pre_terminate_hook_start: Some(ts("2024-01-01T00:03:00Z")),
        }
    );
    assert!(m.infrastructure_ready);
    assert_eq!(m.failure_reason.as_deref(), Some("UpdateError"));
    assert_eq!(m.failure_message.as_deref(), Some("instance gone"));
    assert_eq!(m.conditions, expected_conditions());
}

#[test]
fn v1beta2_machine_reads_the_same_as_its_v1beta1_form() {
    let old = machine_of(v1beta1_machine());
    let new = machine_of(v1beta2_machine());
    assert_eq!(new.version, ApiVersion::V1Beta2);
    // v1beta2 references carry the group only.
    assert_eq!(new.infrastructure_ref.api_version, None);
    assert_eq!(
        new.bootstrap_config_ref
            .as_ref()
            .map(|r| r.api_version.clone()),
        Some(None)
    );
    let strip = |mut m: Machine| {
        m.version = ApiVersion::V1Beta2;
        m.infrastructure_ref.api_version = None;
        if let Some(r) = m.bootstrap_config_ref.as_mut() {
            r.api_version = None;
        }
        m
    };
    assert_eq!(strip(old), new);
}

#[test]
fn machine_without_status_or_optional_fields_has_empty_defaults() {
    let m = machine_of(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m2", "namespace": "ns"},
        "spec": {
            "clusterName": "c1",
            "bootstrap": {"dataSecretName": "s"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "m2"}
        }
    }));
    assert_eq!(m.bootstrap_config_ref, None);
    assert_eq!(m.infrastructure_ref.namespace, "ns");
    assert_eq!(m.node_drain_timeout, None);
    assert_eq!(m.node_deletion_timeout, None);
    assert_eq!(m.node_ref, None);
    assert_eq!(m.phase, None);
    assert!(!m.infrastructure_ready);
    assert_eq!(m.conditions, Conditions::default());
    assert_eq!(m.meta.resource_version, 0);
    assert_eq!(m.meta.creation_timestamp, None);
}

#[test]
fn zero_timeouts_are_kept_as_zero_not_absent() {
    let mut v = v1beta2_machine();
    v["spec"]["deletion"] = json!({"nodeDeletionTimeoutSeconds": 0, "nodeDrainTimeoutSeconds": 0});
    let m = machine_of(v);
    assert_eq!(m.node_deletion_timeout, Some(Duration::ZERO));
    assert_eq!(m.node_drain_timeout, Some(Duration::ZERO));
    assert_eq!(m.node_volume_detach_timeout, None);
}

#[test]
fn bad_drain_timeout_names_its_path() {
    let mut v = v1beta1_machine();
    v["spec"]["nodeDrainTimeout"] = json!("10x");
    let err = object_from_json(&v).unwrap_err();
    assert_eq!(err.path, "spec.nodeDrainTimeout");
    assert_eq!(
        err.to_string(),
        "spec.nodeDrainTimeout: \"10x\" is not a duration: unknown unit \"x\""
    );
}

#[test]
fn bare_integer_duration_is_an_error_with_a_hint() {
    let mut v = v1beta1_machine();
    v["spec"]["nodeDeletionTimeout"] = json!("30");
    assert_eq!(
        convert_err(v),
        "spec.nodeDeletionTimeout: \"30\" is not a duration (use 30s)"
    );
}

#[test]
fn condition_with_unknown_status_is_an_error() {
    let mut v = v1beta1_machine();
    v["status"]["v1beta2"]["conditions"][0]["status"] = json!("maybe");
    assert_eq!(
        convert_err(v),
        "status.v1beta2.conditions[0].status: \"maybe\" is not a condition status (use True, False or Unknown)"
    );
}

#[test]
fn condition_with_unknown_severity_is_an_error() {
    let mut v = v1beta1_machine();
    v["status"]["conditions"][1]["severity"] = json!("Fatal");
    assert_eq!(
        convert_err(v),
        "status.conditions[1].severity: \"Fatal\" is not a condition severity (use Info, Warning or Error)"
    );
}

#[test]
fn wrong_json_types_name_the_field() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"spec": {"deletion": {"nodeDrainTimeoutSeconds": "600"}}}),
            "spec.deletion.nodeDrainTimeoutSeconds: expected an integer, got \"600\"",
        ),
        (
            json!({"spec": {"deletion": {"nodeDrainTimeoutSeconds": 1.5}}}),
            "spec.deletion.nodeDrainTimeoutSeconds: expected an integer, got 1.5",
        ),
        (
            json!({"spec": {"providerID": 7}}),
            "spec.providerID: expected a string, got 7",
        ),
        (
            json!({"spec": {"deletion": "soon"}}),
            "spec.deletion: expected an object, got \"soon\"",
        ),
        (
            json!({"metadata": {"labels": {"a": 1}}}),
            "metadata.labels.a: expected a string, got 1",
        ),
        (
            json!({"metadata": {"finalizers": "machine.cluster.x-k8s.io"}}),
            "metadata.finalizers: expected a list, got \"machine.cluster.x-k8s.io\"",
        ),
        (
            json!({"metadata": {"creationTimestamp": "yesterday"}}),
            "metadata.creationTimestamp: \"yesterday\" is not an RFC 3339 timestamp (use 2024-01-01T00:00:00Z)",
        ),
        (
            json!({"status": {"initialization": {"infrastructureProvisioned": "yes"}}}),
            "status.initialization.infrastructureProvisioned: expected true or false, got \"yes\"",
        ),
        (
            json!({"status": {"conditions": [{"status": "True"}]}}),
            "status.conditions[0].type: required",
        ),
    ];
    for (patch, expected) in cases {
        let mut v = v1beta2_machine();
        merge(&mut v, &patch);
        assert_eq!(convert_err(v), expected, "patch {patch}");
    }
}

/// RFC 7386 merge, enough to vary fixtures.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[test]
fn machine_without_infrastructure_ref_is_an_error() {
    let mut v = v1beta2_machine();
    merge(&mut v, &json!({"spec": {"infrastructureRef": null}}));
    assert_eq!(convert_err(v), "spec.infrastructureRef: required");
}

#[test]
fn missing_name_kind_or_api_version_is_an_error() {
    assert_eq!(
        convert_err(json!({"kind": "Machine", "metadata": {"name": "m"}})),
        "apiVersion: required"
    );
    assert_eq!(
        convert_err(json!({"apiVersion": "v1", "metadata": {"name": "m"}})),
        "kind: required"
    );
    assert_eq!(
        convert_err(json!({"apiVersion": "v1", "kind": "Node", "metadata": {}})),
        "metadata.name: required"
    );
    assert_eq!(convert_err(json!([1])), "expected an object, got a list");
}

#[test]
fn unsupported_capi_version_is_an_error() {
    let mut v = v1beta2_machine();
    v["apiVersion"] = json!("cluster.x-k8s.io/v1alpha4");
    assert_eq!(
        convert_err(v),
        "apiVersion: \"v1alpha4\" is not a supported version of cluster.x-k8s.io (use v1beta1 or v1beta2)"
    );
}

#[test]
fn cluster_in_both_versions() {
    let old = convert(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": "default"},
        "spec": {
            "paused": true,
            "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": "c1-cp", "namespace": "default"},
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerCluster", "name": "c1"}
        },
        "status": {
            "conditions": [{"type": "ControlPlaneInitialized", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "v1beta2": {"conditions": [{"type": "ControlPlaneInitialized", "status": "True", "reason": "Initialized", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
        }
    }));
    let new = convert(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": "default"},
        "spec": {
            "paused": true,
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"}
        },
        "status": {
            "conditions": [{"type": "ControlPlaneInitialized", "status": "True", "reason": "Initialized", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "deprecated": {"v1beta1": {"conditions": [{"type": "ControlPlaneInitialized", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}
        }
    }));
    let (Object::Cluster(old), Object::Cluster(new)) = (old, new) else {
        panic!("expected Clusters");
    };
    assert_eq!(old.version, ApiVersion::V1Beta1);
    assert_eq!(new.version, ApiVersion::V1Beta2);
    assert!(old.paused && new.paused);
    let cp = old.control_plane_ref.clone().unwrap();
    assert_eq!(cp.api_group, "controlplane.cluster.x-k8s.io");
    assert_eq!(
        cp.api_version.as_deref(),
        Some("controlplane.cluster.x-k8s.io/v1beta1")
    );
    assert_eq!(cp.kind, "KubeadmControlPlane");
    assert_eq!(
        new.control_plane_ref,
        Some(ObjectRef {
            api_version: None,
            ..cp
        })
    );
    assert_eq!(old.conditions, new.conditions);
    assert_eq!(
        old.conditions
            .current("ControlPlaneInitialized")
            .unwrap()
            .reason,
        "Initialized"
    );
    assert_eq!(
        old.conditions
            .legacy("ControlPlaneInitialized")
            .unwrap()
            .reason,
        ""
    );
}

#[test]
fn machine_set_and_deployment_in_both_versions() {
    for version in ["v1beta1", "v1beta2"] {
        let ms = convert(json!({
            "apiVersion": format!("cluster.x-k8s.io/{version}"),
            "kind": "MachineSet",
            "metadata": {"name": "ms1", "namespace": "default"},
            "spec": {
                "clusterName": "c1",
                "replicas": 3,
                "selector": {"matchLabels": {"cluster.x-k8s.io/set-name": "ms1"}},
                "template": {"spec": {"clusterName": "c1"}}
            }
        }));
        let Object::MachineSet(ms) = ms else {
            panic!("expected a MachineSet")
        };
        assert_eq!(ms.cluster_name, "c1");
        assert_eq!(ms.replicas, Some(3));
        assert_eq!(ms.selector.match_labels["cluster.x-k8s.io/set-name"], "ms1");
        assert_eq!(ms.selector.invalid, None);
    }
    let old = convert(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": "md1", "namespace": "default"},
        "spec": {"clusterName": "c1", "replicas": 5, "strategy": {"type": "RollingUpdate", "remediation": {"maxInFlight": "40%"}}}
    }));
    let new = convert(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": "md1", "namespace": "default"},
        "spec": {"clusterName": "c1", "replicas": 5, "remediation": {"maxInFlight": 2}}
    }));
    let (Object::MachineDeployment(old), Object::MachineDeployment(new)) = (old, new) else {
        panic!("expected MachineDeployments");
    };
    assert_eq!(old.version, ApiVersion::V1Beta1);
    assert_eq!(old.replicas, Some(5));
    assert_eq!(
        old.remediation_max_in_flight,
        Some(IntOrString::String("40%".into()))
    );
    assert_eq!(new.remediation_max_in_flight, Some(IntOrString::Int(2)));
    assert_eq!(new.cluster_name, "c1");
}

fn mhc_of(value: Value) -> MachineHealthCheck {
    match convert(value) {
        Object::MachineHealthCheck(m) => m,
        other => panic!("expected a MachineHealthCheck, got {other:?}"),
    }
}

#[test]
fn machine_health_check_in_both_versions() {
    let old = mhc_of(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc1", "namespace": "default"},
        "spec": {
            "clusterName": "c1",
            "selector": {"matchLabels": {"nodepool": "a"}},
            "unhealthyConditions": [
                {"type": "Ready", "status": "Unknown", "timeout": "300s"},
                {"type": "Ready", "status": "False", "timeout": "5m"}
            ],
            "unhealthyMachineConditions": [{"type": "EtcdHealthy", "status": "False", "timeout": "1m"}],
            "nodeStartupTimeout": "10m",
            "maxUnhealthy": "40%",
            "unhealthyRange": "[1-3]",
            "remediationTemplate": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3RemediationTemplate", "name": "rt"}
        },
        "status": {
            "expectedMachines": 3, "currentHealthy": 2, "remediationsAllowed": 1,
            "targets": ["m1", "m2", "m3"],
            "conditions": [{"type": "RemediationAllowed", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "v1beta2": {"conditions": [{"type": "RemediationAllowed", "status": "True", "reason": "RemediationAllowed", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
        }
    }));
    let new = mhc_of(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc1", "namespace": "default"},
        "spec": {
            "clusterName": "c1",
            "selector": {"matchLabels": {"nodepool": "a"}},
            "checks": {
                "nodeStartupTimeoutSeconds": 600,
                "unhealthyNodeConditions": [
                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300},
                    {"type": "Ready", "status": "False", "timeoutSeconds": 300}
                ],
                "unhealthyMachineConditions": [{"type": "EtcdHealthy", "status": "False", "timeoutSeconds": 60}]
            },
            "remediation": {
                "triggerIf": {"unhealthyLessThanOrEqualTo": "40%", "unhealthyInRange": "[1-3]"},
                "templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3RemediationTemplate", "name": "rt"}
            }
        },
        "status": {
            "expectedMachines": 3, "currentHealthy": 2, "remediationsAllowed": 1,
            "targets": ["m1", "m2", "m3"],
            "conditions": [{"type": "RemediationAllowed", "status": "True", "reason": "RemediationAllowed", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "deprecated": {"v1beta1": {"conditions": [{"type": "RemediationAllowed", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}
        }
    }));
    assert_eq!(old.version, ApiVersion::V1Beta1);
    assert_eq!(old.cluster_name, "c1");
    assert_eq!(
        old.unhealthy_node_conditions,
        vec![
            UnhealthyCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                timeout: Duration::from_secs(300)
            },
            UnhealthyCondition {
                type_: "Ready".into(),
                status: "False".into(),
                timeout: Duration::from_secs(300)
            },
        ]
    );
    assert_eq!(
        old.unhealthy_machine_conditions[0].timeout,
        Duration::from_secs(60)
    );
    assert_eq!(old.node_startup_timeout, Some(Duration::from_mins(10)));
    assert_eq!(old.max_unhealthy, Some(IntOrString::String("40%".into())));
    assert_eq!(old.unhealthy_range.as_deref(), Some("[1-3]"));
    assert_eq!(
        old.remediation_template,
        Some(ObjectRef {
            api_group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: Some("infrastructure.cluster.x-k8s.io/v1beta1".into()),
            kind: "Metal3RemediationTemplate".into(),
            name: "rt".into(),
            namespace: "default".into(),
        })
    );
    assert_eq!(
        old.status,
        MachineHealthCheckStatus {
            expected_machines: Some(3),
            current_healthy: Some(2),
            remediations_allowed: Some(1),
            targets: vec!["m1".into(), "m2".into(), "m3".into()],
        }
    );
    let mut as_new = old.clone();
    as_new.version = ApiVersion::V1Beta2;
    assert_eq!(as_new, new);
}

#[test]
fn machine_health_check_int_thresholds_and_absent_fields() {
    let mhc = mhc_of(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc1", "namespace": "default"},
        "spec": {"clusterName": "c1", "selector": {}, "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": 2}}}
    }));
    assert_eq!(mhc.max_unhealthy, Some(IntOrString::Int(2)));
    assert_eq!(mhc.node_startup_timeout, None);
    assert_eq!(mhc.unhealthy_range, None);
    assert_eq!(mhc.remediation_template, None);
    assert!(mhc.selector.is_empty());
    assert_eq!(mhc.status, MachineHealthCheckStatus::default());
    // Content the controller judges is kept, not rejected.
    let odd = mhc_of(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc2", "namespace": "default"},
        "spec": {"clusterName": "c1", "selector": {"matchLabels": {"a": "b"}}, "maxUnhealthy": "abcdef", "unhealthyRange": "[2-1]",
                 "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "-1s"}]}
    }));
    assert_eq!(
        odd.max_unhealthy,
        Some(IntOrString::String("abcdef".into()))
    );
    assert_eq!(odd.unhealthy_range.as_deref(), Some("[2-1]"));
    // A negative timeout stays negative (invalid), never zero.
    assert_eq!(
        odd.unhealthy_node_conditions[0].timeout,
        Duration::from_secs(-1)
    );
}

#[test]
fn a_selector_with_an_invalid_label_key_or_value_is_kept_as_invalid() {
    let of = |selector: serde_json::Value| {
        mhc_of(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineHealthCheck",
            "metadata": {"name": "mhc1", "namespace": "default"},
            "spec": {"clusterName": "c1", "selector": selector}
        }))
        .selector
        .invalid
    };
    assert_eq!(
        of(json!({"matchLabels": {"bad key!!/x/y": "a"}})).as_deref(),
        Some(
            "spec.selector.matchLabels: \"bad key!!/x/y\": prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters"
        )
    );
    assert!(of(json!({"matchLabels": {"a": "not a value"}})).is_some());
    assert!(of(json!({"matchExpressions": [{"key": "a b", "operator": "Exists"}]})).is_some());
    assert_eq!(
        of(json!({"matchLabels": {"cluster.x-k8s.io/cluster-name": "c1"}})),
        None
    );
}

#[test]
fn machine_health_check_bad_timeout_names_its_path() {
    let err = convert_err(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc1", "namespace": "default"},
        "spec": {"clusterName": "c1", "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "timeout": "5 minutes"}]}
    }));
    assert!(
        err.starts_with("spec.unhealthyConditions[0].timeout: \"5 minutes\" is not a duration"),
        "{err}"
    );
    let err = convert_err(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc1", "namespace": "default"},
        "spec": {"clusterName": "c1", "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": true}}}
    }));
    assert_eq!(
        err,
        "spec.remediation.triggerIf.unhealthyLessThanOrEqualTo: expected an integer or a string, got true"
    );
}

fn pool_of(value: Value) -> MachinePool {
    match convert(value) {
        Object::MachinePool(p) => p,
        other => panic!("expected a MachinePool, got {other:?}"),
    }
}

#[test]
fn machine_pool_in_both_versions() {
    let old = pool_of(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachinePool",
        "metadata": {"name": "mp1", "namespace": "default", "finalizers": ["machinepool.cluster.x-k8s.io"]},
        "spec": {
            "clusterName": "c1",
            "replicas": 2,
            "minReadySeconds": 15,
            "providerIDList": ["sim://c1/mp1-0", "sim://c1/mp1-1"],
            "template": {
                "metadata": {"labels": {"pool": "a"}, "annotations": {"note": "x"}},
                "spec": {
                    "clusterName": "c1",
                    "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": "mp1"}},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachinePool", "name": "mp1"},
                    "nodeDeletionTimeout": "10s"
                }
            }
        },
        "status": {
            "replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1,
            "phase": "ScalingUp",
            "bootstrapReady": true, "infrastructureReady": true,
            "failureReason": "InvalidConfiguration", "failureMessage": "bad",
            "nodeRefs": [{"apiVersion": "v1", "kind": "Node", "name": "mp1-0", "uid": "u0"}],
            "versions": [{"version": "v1.31.0", "replicas": 2}],
            "conditions": [{"type": "Ready", "status": "False", "severity": "Warning", "reason": "ScalingUp", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "v1beta2": {
                "readyReplicas": 1, "availableReplicas": 1, "upToDateReplicas": 2,
                "conditions": [{"type": "Available", "status": "False", "reason": "NotAvailable", "lastTransitionTime": "2024-01-01T00:00:00Z"}]
            }
        }
    }));
    let new = pool_of(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachinePool",
        "metadata": {"name": "mp1", "namespace": "default", "finalizers": ["machinepool.cluster.x-k8s.io"]},
        "spec": {
            "clusterName": "c1",
            "replicas": 2,
            "providerIDList": ["sim://c1/mp1-0", "sim://c1/mp1-1"],
            "template": {
                "metadata": {"labels": {"pool": "a"}, "annotations": {"note": "x"}},
                "spec": {
                    "clusterName": "c1",
                    "minReadySeconds": 15,
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "mp1"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachinePool", "name": "mp1"},
                    "deletion": {"nodeDeletionTimeoutSeconds": 10}
                }
            }
        },
        "status": {
            "replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "upToDateReplicas": 2,
            "phase": "ScalingUp",
            "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
            "nodeRefs": [{"apiVersion": "v1", "kind": "Node", "name": "mp1-0", "uid": "u0"}],
            "versions": [{"version": "v1.31.0", "replicas": 2}],
            "conditions": [{"type": "Available", "status": "False", "reason": "NotAvailable", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "deprecated": {"v1beta1": {
                "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1,
                "failureReason": "InvalidConfiguration", "failureMessage": "bad",
                "conditions": [{"type": "Ready", "status": "False", "severity": "Warning", "reason": "ScalingUp", "lastTransitionTime": "2024-01-01T00:00:00Z"}]
            }}
        }
    }));
    assert_eq!(old.version, ApiVersion::V1Beta1);
    assert_eq!(old.cluster_name, "c1");
    assert_eq!(old.replicas, Some(2));
    assert_eq!(old.min_ready_seconds, Some(15));
    assert_eq!(old.node_deletion_timeout, Some(Duration::from_secs(10)));
    assert_eq!(old.provider_id_list.len(), 2);
    assert_eq!(old.template_labels["pool"], "a");
    assert_eq!(old.template_annotations["note"], "x");
    assert_eq!(old.infrastructure_ref.kind, "DockerMachinePool");
    assert_eq!(
        old.status,
        MachinePoolStatus {
            replicas: Some(2),
            legacy_ready_replicas: Some(1),
            legacy_available_replicas: Some(1),
            legacy_unavailable_replicas: Some(1),
            ready_replicas: Some(1),
            available_replicas: Some(1),
            up_to_date_replicas: Some(2),
            node_refs: vec![NodeReference {
                name: "mp1-0".into(),
                uid: "u0".into()
            }],
            phase: Some("ScalingUp".into()),
            bootstrap_data_secret_created: true,
            infrastructure_provisioned: true,
            failure_reason: Some("InvalidConfiguration".into()),
            failure_message: Some("bad".into()),
            versions: vec![("v1.31.0".into(), 2)],
        }
    );
    assert_eq!(
        old.conditions.legacy("Ready").unwrap().severity,
        Severity::Warning
    );
    assert_eq!(
        old.conditions.current("Available").unwrap().reason,
        "NotAvailable"
    );
    let mut as_new = old.clone();
    as_new.version = ApiVersion::V1Beta2;
    as_new.infrastructure_ref.api_version = None;
    if let Some(r) = as_new.bootstrap_config_ref.as_mut() {
        r.api_version = None;
    }
    assert_eq!(as_new, new);
}

#[test]
fn machine_drain_rule_maps_behavior_order_and_selectors() {
    for version in ["v1beta1", "v1beta2"] {
        let rule = convert(json!({
            "apiVersion": format!("cluster.x-k8s.io/{version}"),
            "kind": "MachineDrainRule",
            "metadata": {"name": "skip-storage", "namespace": "default"},
            "spec": {
                "drain": {"behavior": "Drain", "order": 100},
                "machines": [
                    {"selector": {"matchLabels": {"role": "worker"}}, "clusterSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}},
                    {}
                ],
                "pods": [{"selector": {"matchLabels": {"app": "storage"}}, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "storage"}}}]
            }
        }));
        let Object::MachineDrainRule(rule) = rule else {
            panic!("expected a MachineDrainRule")
        };
        assert_eq!(rule.behavior, "Drain");
        assert_eq!(rule.order, Some(100));
        assert_eq!(rule.machines.len(), 2);
        assert_eq!(
            rule.machines[0].selector.as_ref().unwrap().match_labels["role"],
            "worker"
        );
        let cluster_sel = rule.machines[0].cluster_selector.as_ref().unwrap();
        assert_eq!(
            cluster_sel.match_expressions,
            vec![SelectorRequirement {
                key: "env".into(),
                operator: SelectorOperator::In,
                values: vec!["prod".into()],
            }]
        );
        assert_eq!(rule.machines[1].selector, None);
        assert_eq!(rule.machines[1].cluster_selector, None);
        assert_eq!(
            rule.pods[0]
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_labels["kubernetes.io/metadata.name"],
            "storage"
        );
    }
}

fn selector_of(selector: Value) -> LabelSelector {
    let ms = convert(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineSet",
        "metadata": {"name": "ms1", "namespace": "default"},
        "spec": {"clusterName": "c1", "selector": selector}
    }));
    match ms {
        Object::MachineSet(ms) => ms.selector,
        other => panic!("expected a MachineSet, got {other:?}"),
    }
}

#[test]
fn selector_with_unknown_operator_is_kept_invalid_not_rejected() {
    let sel = selector_of(json!({
        "matchLabels": {"a": "b"},
        "matchExpressions": [
            {"key": "zone", "operator": "Exists"},
            {"key": "tier", "operator": "Like", "values": ["db"]}
        ]
    }));
    assert_eq!(
        sel.invalid.as_deref(),
        Some("spec.selector.matchExpressions[1]: \"Like\" is not a valid label selector operator")
    );
    assert!(!sel.matches(&crate::testing::labels(&[("a", "b"), ("zone", "z")])));
}

#[test]
fn selector_value_rules_follow_apimachinery() {
    let in_without_values =
        selector_of(json!({"matchExpressions": [{"key": "k", "operator": "In"}]}));
    assert_eq!(
        in_without_values.invalid.as_deref(),
        Some(
            "spec.selector.matchExpressions[0]: for 'in', 'notin' operators, values set can't be empty"
        )
    );
    let exists_with_values = selector_of(
        json!({"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]}),
    );
    assert_eq!(
        exists_with_values.invalid.as_deref(),
        Some(
            "spec.selector.matchExpressions[0]: values set must be empty for exists and does not exist"
        )
    );
    let good = selector_of(json!({"matchExpressions": [
        {"key": "k", "operator": "NotIn", "values": ["v"]},
        {"key": "j", "operator": "DoesNotExist"}
    ]}));
    assert_eq!(good.invalid, None);
    assert_eq!(good.match_expressions.len(), 2);
    // A wrong JSON type is still an error: that is not a selector the API would store.
    let err = convert_err(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineSet",
        "metadata": {"name": "ms1", "namespace": "default"},
        "spec": {"selector": {"matchExpressions": [{"key": "k", "operator": "In", "values": "v"}]}}
    }));
    assert_eq!(
        err,
        "spec.selector.matchExpressions[0].values: expected a list, got \"v\""
    );
}

fn external_of(value: Value) -> External {
    match convert(value) {
        Object::External(e) => e,
        other => panic!("expected an External, got {other:?}"),
    }
}

#[test]
fn provider_objects_are_external_with_contract_fields() {
    let infra = external_of(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "DockerMachine",
        "metadata": {"name": "m1-infra", "namespace": "default"},
        "spec": {"providerID": "docker:////c1-m1"},
        "status": {"ready": true, "failureReason": "CreateError", "failureMessage": "no"}
    }));
    assert_eq!(
        infra.group_kind,
        GroupKind {
            group: "infrastructure.cluster.x-k8s.io".into(),
            kind: "DockerMachine".into()
        }
    );
    assert_eq!(infra.api_version, "infrastructure.cluster.x-k8s.io/v1beta1");
    assert_eq!(infra.provider_id.as_deref(), Some("docker:////c1-m1"));
    assert_eq!(infra.ready, Some(true));
    assert_eq!(infra.provisioned, None);
    assert_eq!(infra.failure_reason.as_deref(), Some("CreateError"));
    assert_eq!(infra.failure_message.as_deref(), Some("no"));
    assert_eq!(infra.template_json, None);

    let boot = external_of(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": "m1-boot", "namespace": "default"},
        "status": {"initialization": {"dataSecretCreated": true}, "dataSecretName": "m1-boot-data"}
    }));
    assert_eq!(boot.data_secret_created, Some(true));
    assert_eq!(boot.data_secret_name.as_deref(), Some("m1-boot-data"));
    assert_eq!(boot.ready, None);

    let pool = external_of(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "DockerMachinePool",
        "metadata": {"name": "mp1", "namespace": "default"},
        "spec": {"providerIDList": ["sim://c1/mp1-0"]},
        "status": {"replicas": 1, "infrastructureMachineKind": "DockerMachine", "initialization": {"provisioned": true}}
    }));
    assert_eq!(pool.provider_id_list, Some(vec!["sim://c1/mp1-0".into()]));
    assert_eq!(pool.status_replicas, Some(1));
    assert_eq!(
        pool.infrastructure_machine_kind.as_deref(),
        Some("DockerMachine")
    );
    assert_eq!(pool.provisioned, Some(true));

    let cp = external_of(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "AWSManagedControlPlane",
        "metadata": {"name": "cp", "namespace": "default"},
        "status": {"externalManagedControlPlane": true}
    }));
    assert!(cp.external_managed_control_plane);
    assert_eq!(cp.provider_id_list, None);
}

#[test]
fn template_kinds_keep_their_template_as_canonical_json() {
    let template = external_of(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "Metal3RemediationTemplate",
        "metadata": {"name": "rt", "namespace": "default"},
        "spec": {"template": {"spec": {"timeout": "300s", "strategy": {"type": "Reboot", "retryLimit": 1}}}}
    }));
    assert_eq!(
        template.template_json.as_deref(),
        Some(r#"{"spec":{"strategy":{"retryLimit":1,"type":"Reboot"},"timeout":"300s"}}"#)
    );
}

#[test]
fn unmodelled_kinds_are_none_and_other_capi_groups_are_external() {
    for (api_version, kind) in [
        ("v1", "Secret"),
        ("apps/v1", "ReplicaSet"),
        ("v1", "Event"),
        ("events.k8s.io/v1", "Event"),
        ("apps/v1", "StatefulSet"),
    ] {
        let v = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "default"}});
        assert_eq!(object_from_json(&v), Ok(None), "{api_version} {kind}");
        assert_eq!(
            object_key_of_json(&Scope::Management, &v),
            Ok(None),
            "{api_version} {kind}"
        );
    }
    for (api_version, kind) in [
        ("cluster.x-k8s.io/v1beta2", "ClusterClass"),
        ("addons.cluster.x-k8s.io/v1beta2", "ClusterResourceSet"),
        (
            "remediation.cluster.x-k8s.io/v1alpha1",
            "ExternalRemediation",
        ),
    ] {
        let v = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "default"}});
        assert!(
            matches!(object_from_json(&v), Ok(Some(Object::External(_)))),
            "{api_version} {kind}"
        );
    }
}

#[test]
fn object_key_matches_the_converted_objects_key() {
    let scope = crate::testing::workload("c1");
    for v in [
        v1beta1_machine(),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "namespace": "ignored"}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine", "metadata": {"name": "d", "namespace": "ns"}}),
    ] {
        let key = object_key_of_json(&scope, &v).unwrap().unwrap();
        assert_eq!(key, convert(v).key(&scope));
    }
    // A body that no longer converts still has a key (for watch DELETE events).
    let mut broken = v1beta1_machine();
    broken["spec"]["nodeDrainTimeout"] = json!("10x");
    assert_eq!(
        object_key_of_json(&Scope::Management, &broken).unwrap(),
        Some(ObjectKey::management(Kind::Machine, "default", "m1"))
    );
}

#[test]
fn non_numeric_resource_version_reads_as_zero() {
    let mut v = v1beta2_machine();
    v["metadata"]["resourceVersion"] = json!("abc");
    assert_eq!(machine_of(v).meta.resource_version, 0);
}
