//! Kubernetes built-in kinds, and the example scenario's manifests.

use super::*;
use crate::model::*;
use crate::time::Timestamp;
use serde_json::{Value, json};

fn convert(value: Value) -> Object {
    object_from_json(&value)
        .unwrap_or_else(|e| panic!("conversion failed: {e}"))
        .expect("a modelled kind")
}

#[test]
fn node_maps_spec_and_status() {
    let Object::Node(node) = convert(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {
            "providerID": "sim://c1/m1",
            "unschedulable": true,
            "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2024-01-01T00:01:00Z"},
                {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}
            ]
        },
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.", "lastTransitionTime": "2024-01-01T00:02:00Z"}
            ],
            "volumesAttached": [{"name": "kubernetes.io/csi/ebs.csi.aws.com^vol-1", "devicePath": ""}],
            "nodeInfo": {"kubeletVersion": "v1.31.0"}
        }
    })) else {
        panic!("expected a Node")
    };
    assert_eq!(node.meta.name, "n1");
    assert_eq!(node.provider_id.as_deref(), Some("sim://c1/m1"));
    assert!(node.unschedulable);
    assert_eq!(
        node.taints,
        vec![
            Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                value: String::new(),
                effect: "NoSchedule".into()
            },
            Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: "NoExecute".into()
            },
        ]
    );
    assert!(node.is_unreachable());
    let ready = node.condition("Ready").unwrap();
    assert_eq!(ready.reason, "NodeStatusUnknown");
    assert_eq!(ready.message, "Kubelet stopped posting node status.");
    assert_eq!(
        ready.last_transition_time,
        Some(Timestamp::parse_rfc3339("2024-01-01T00:02:00Z").unwrap())
    );
    assert_eq!(
        node.volumes_attached,
        vec!["kubernetes.io/csi/ebs.csi.aws.com^vol-1".to_string()]
    );
    assert_eq!(node.kubelet_version.as_deref(), Some("v1.31.0"));
}

#[test]
fn node_condition_with_bad_status_is_an_error() {
    let err = object_from_json(&json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}
    }))
    .unwrap_err();
    assert_eq!(err.path, "status.conditions[0].status");
}

#[test]
fn pod_maps_volumes_phase_and_readiness() {
    let Object::Pod(pod) = convert(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "app",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u", "controller": true}]
        },
        "spec": {
            "nodeName": "n1",
            "terminationGracePeriodSeconds": 45,
            "containers": [{"name": "web", "image": "nginx"}],
            "volumes": [
                {"name": "cache", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                {"name": "cfg", "configMap": {"name": "cfg"}}
            ]
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"}
            ]
        }
    })) else {
        panic!("expected a Pod")
    };
    assert_eq!(pod.node_name.as_deref(), Some("n1"));
    assert_eq!(pod.phase, "Running");
    assert!(pod.has_empty_dir);
    assert_eq!(pod.termination_grace_period_seconds, Some(45));
    assert_eq!(pod.pvc_names, vec!["data-web-0".to_string()]);
    assert!(pod.ready);
    assert_eq!(pod.meta.controller().unwrap().kind, "StatefulSet");
}

#[test]
fn pod_without_status_is_pending_and_not_ready() {
    let Object::Pod(pod) = convert(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    })) else {
        panic!("expected a Pod")
    };
    assert_eq!(pod.phase, "Pending");
    assert!(!pod.ready);
    assert!(!pod.has_empty_dir);
    assert_eq!(pod.node_name, None);
    assert_eq!(pod.termination_grace_period_seconds, None);
}

#[test]
fn pod_with_string_grace_period_is_an_error() {
    let err = object_from_json(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"terminationGracePeriodSeconds": "30"}
    }))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.terminationGracePeriodSeconds: expected an integer, got \"30\""
    );
}

#[test]
fn pdb_daemonset_namespace_and_storage_kinds() {
    let Object::PodDisruptionBudget(pdb) = convert(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "app"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0}
    })) else {
        panic!("expected a PDB")
    };
    assert_eq!(pdb.min_available, Some(IntOrString::Int(3)));
    assert_eq!(pdb.max_unavailable, None);
    assert_eq!(pdb.selector.match_labels["app"], "web");
    let Object::PodDisruptionBudget(pdb) = convert(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "any", "namespace": "app"},
        "spec": {"maxUnavailable": "10%"}
    })) else {
        panic!("expected a PDB")
    };
    assert_eq!(pdb.max_unavailable, Some(IntOrString::String("10%".into())));
    assert!(pdb.selector.is_empty());

    let ds = convert(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system", "uid": "ds-uid"}
    }));
    assert!(matches!(&ds, Object::DaemonSet(d) if d.meta.uid == "ds-uid"));

    let Object::Namespace(active) = convert(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}, "status": {"phase": "Active"}
    })) else {
        panic!("expected a Namespace")
    };
    assert!(!active.terminating);
    let Object::Namespace(by_phase) = convert(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}, "status": {"phase": "Terminating"}
    })) else {
        panic!("expected a Namespace")
    };
    assert!(by_phase.terminating);
    let Object::Namespace(by_deletion) = convert(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "old", "deletionTimestamp": "2024-01-01T00:00:00Z"}
    })) else {
        panic!("expected a Namespace")
    };
    assert!(by_deletion.terminating);

    let Object::PersistentVolume(pv) = convert(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-1"},
        "spec": {
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "app", "name": "data-web-0"}
        }
    })) else {
        panic!("expected a PV")
    };
    assert_eq!(
        pv.csi,
        Some(("ebs.csi.aws.com".to_string(), "vol-1".to_string()))
    );
    assert_eq!(
        pv.claim_ref,
        Some(ClaimRef {
            kind: "PersistentVolumeClaim".into(),
            namespace: "app".into(),
            name: "data-web-0".into()
        })
    );
    let Object::PersistentVolume(host_path) = convert(json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-2"},
        "spec": {"hostPath": {"path": "/data"}}
    })) else {
        panic!("expected a PV")
    };
    assert_eq!(host_path.csi, None);
    assert_eq!(host_path.claim_ref, None);

    let pvc = convert(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-0", "namespace": "app"}
    }));
    assert!(matches!(&pvc, Object::PersistentVolumeClaim(c) if c.meta.namespace == "app"));

    let Object::VolumeAttachment(va) = convert(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": "csi-123"},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}},
        "status": {"attached": true}
    })) else {
        panic!("expected a VolumeAttachment")
    };
    assert_eq!(va.node_name, "n1");
    assert_eq!(va.persistent_volume_name.as_deref(), Some("pv-1"));
    assert!(va.attached);
}

#[test]
fn cluster_scoped_kinds_have_keys_without_namespace() {
    let scope = crate::testing::workload("c1");
    let node = convert(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "namespace": "stray"}}),
    );
    assert_eq!(
        node.key(&scope),
        ObjectKey::new(scope.clone(), Kind::Node, "", "n1")
    );
}

/// The example of `sim/docs/scenario-format.md`, its manifests written as JSON.
#[test]
fn scenario_example_manifests_convert() {
    let management = json!([
        {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
         "metadata": {"name": "c1", "namespace": "default"}, "spec": {}},
        {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
         "metadata": {"name": "cp-1", "namespace": "default",
                      "labels": {"cluster.x-k8s.io/cluster-name": "c1", "cluster.x-k8s.io/control-plane": ""},
                      "finalizers": ["machine.cluster.x-k8s.io"]},
         "spec": {"clusterName": "c1",
                  "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": "cp-1"}},
                  "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachine", "name": "cp-1"}},
         "status": {"nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "cp-1"}}},
        {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
         "metadata": {"name": "m1", "namespace": "default",
                      "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                      "annotations": {"pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate-app": "my-migration-controller"},
                      "finalizers": ["machine.cluster.x-k8s.io"]},
         "spec": {"clusterName": "c1",
                  "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": "m1"}},
                  "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachine", "name": "m1"}},
         "status": {"nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}}
    ]);
    let workload = json!([
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cp-1"},
         "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "app"},
         "spec": {"nodeName": "n1", "containers": [{"name": "web", "image": "nginx"}]}}
    ]);
    let management: Vec<Object> = management
        .as_array()
        .unwrap()
        .iter()
        .map(|v| convert(v.clone()))
        .collect();
    let workload: Vec<Object> = workload
        .as_array()
        .unwrap()
        .iter()
        .map(|v| convert(v.clone()))
        .collect();

    let Object::Cluster(cluster) = &management[0] else {
        panic!("expected a Cluster")
    };
    assert_eq!(cluster.version, ApiVersion::V1Beta1);
    assert!(!cluster.paused);
    let Object::Machine(cp) = &management[1] else {
        panic!("expected a Machine")
    };
    assert!(cp.is_control_plane());
    assert_eq!(cp.node_ref.as_deref(), Some("cp-1"));
    let Object::Machine(m1) = &management[2] else {
        panic!("expected a Machine")
    };
    assert!(!m1.is_control_plane());
    assert_eq!(
        m1.infrastructure_ref.kind(),
        Kind::External(GroupKind {
            group: "infrastructure.cluster.x-k8s.io".into(),
            kind: "DockerMachine".into(),
        })
    );
    assert_eq!(m1.node_ref.as_deref(), Some("n1"));
    assert_eq!(m1.node_deletion_timeout, None);
    assert!(
        m1.meta
            .annotations
            .keys()
            .any(|k| k.starts_with(PRE_DRAIN_HOOK_PREFIX))
    );

    assert!(matches!(&workload[1], Object::Node(n) if n.is_ready()));
    let Object::Pod(pod) = &workload[2] else {
        panic!("expected a Pod")
    };
    assert_eq!(pod.meta.namespace, "app");
    assert_eq!(pod.node_name.as_deref(), Some("n1"));
    assert_eq!(pod.phase, "Pending");
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    /// Field names the converters read, so random documents reach deep into every kind.
    const KEYS: &[&str] = &[
        "metadata",
        "name",
        "namespace",
        "labels",
        "finalizers",
        "ownerReferences",
        "resourceVersion",
        "creationTimestamp",
        "spec",
        "status",
        "conditions",
        "type",
        "status",
        "severity",
        "lastTransitionTime",
        "v1beta2",
        "deprecated",
        "v1beta1",
        "infrastructureRef",
        "bootstrap",
        "configRef",
        "apiVersion",
        "apiGroup",
        "kind",
        "deletion",
        "nodeDrainTimeout",
        "nodeDrainTimeoutSeconds",
        "nodeRef",
        "selector",
        "matchLabels",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "template",
        "checks",
        "unhealthyNodeConditions",
        "timeoutSeconds",
        "timeout",
        "remediation",
        "triggerIf",
        "unhealthyLessThanOrEqualTo",
        "providerIDList",
        "nodeRefs",
        "versions",
        "replicas",
        "drain",
        "machines",
        "pods",
        "volumes",
        "emptyDir",
        "taints",
        "initialization",
        "csi",
        "claimRef",
        "source",
        "attached",
    ];

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            prop_oneof![
                Just("True".to_string()),
                Just("10m".to_string()),
                Just("2024-01-01T00:00:00Z".to_string()),
                Just("In".to_string()),
                "[a-zA-Z0-9%./:-]{0,12}",
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(
                    |pairs| {
                        Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                    }
                ),
            ]
        })
    }

    const TYPES: &[(&str, &str)] = &[
        ("cluster.x-k8s.io/v1beta1", "Machine"),
        ("cluster.x-k8s.io/v1beta2", "Machine"),
        ("cluster.x-k8s.io/v1beta1", "Cluster"),
        ("cluster.x-k8s.io/v1beta2", "MachineHealthCheck"),
        ("cluster.x-k8s.io/v1beta1", "MachineHealthCheck"),
        ("cluster.x-k8s.io/v1beta1", "MachinePool"),
        ("cluster.x-k8s.io/v1beta2", "MachinePool"),
        ("cluster.x-k8s.io/v1beta2", "MachineSet"),
        ("cluster.x-k8s.io/v1beta1", "MachineDeployment"),
        ("cluster.x-k8s.io/v1beta2", "MachineDrainRule"),
        (
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "DockerMachineTemplate",
        ),
        ("v1", "Node"),
        ("v1", "Pod"),
        ("v1", "Namespace"),
        ("v1", "PersistentVolume"),
        ("policy/v1", "PodDisruptionBudget"),
        ("storage.k8s.io/v1", "VolumeAttachment"),
    ];

    proptest! {
        #[test]
        fn random_documents_convert_or_fail_with_a_path(
            (api_version, kind) in prop::sample::select(TYPES),
            spec in json_value(),
            status in json_value(),
            metadata in json_value(),
        ) {
            let mut doc = json!({"apiVersion": api_version, "kind": kind,
                                 "metadata": {"name": "x", "namespace": "default"},
                                 "spec": spec, "status": status});
            if metadata.is_object() {
                doc["metadata"] = metadata;
            }
            match object_from_json(&doc) {
                Ok(_) => {}
                Err(e) => prop_assert!(!e.path.is_empty() && !e.message.is_empty(), "{e:?}"),
            }
        }
    }
}

mod members {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A member is found as the map's own lookup finds it, in small objects (scanned) and
        /// large ones (looked up), present or not; keys of one length are common here.
        #[test]
        fn a_member_is_what_the_map_holds_under_that_name(
            names in prop::collection::vec("[ab]{1,5}", 0..40),
            probe in "[ab]{1,5}",
        ) {
            let object: serde_json::Map<String, Value> = names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), json!(i)))
                .collect();
            let value = Value::Object(object);
            for name in names.iter().chain([&probe]) {
                prop_assert_eq!(member(&value, name), value.get(name.as_str()));
                let mut changed = value.clone();
                if let Some(v) = member_mut(&mut changed, name) {
                    *v = json!("changed");
                }
                let mut expected = value.clone();
                if let Some(v) = expected.get_mut(name.as_str()) {
                    *v = json!("changed");
                }
                prop_assert_eq!(changed, expected);
            }
        }
    }

    #[test]
    fn what_is_not_an_object_has_no_members() {
        for value in [
            json!(null),
            json!("metadata"),
            json!(["metadata"]),
            json!(3),
        ] {
            assert_eq!(member(&value, "metadata"), None);
        }
    }
}

mod pointers {
    use super::*;
    use proptest::prelude::*;

    /// Nested objects and arrays whose keys hold the characters a pointer escapes.
    fn document() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![Just(Value::Null), any::<u8>().prop_map(|n| json!(n))];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a~/01]{0,3}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The pointer to every value in `doc`, its keys escaped.
    fn every_pointer(doc: &Value, at: String, out: &mut Vec<String>) {
        match doc {
            Value::Object(map) => {
                for (key, value) in map {
                    let escaped = key.replace('~', "~0").replace('/', "~1");
                    every_pointer(value, format!("{at}/{escaped}"), out);
                }
            }
            Value::Array(items) => {
                for (i, value) in items.iter().enumerate() {
                    every_pointer(value, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
        out.push(at);
    }

    proptest! {
        /// Every pointer, escaped or not, to a member, an index or nothing, finds what
        /// `Value::pointer` finds: those to each value of the document, and random ones.
        #[test]
        fn a_pointer_finds_what_serde_json_finds(
            doc in document(),
            tokens in prop::collection::vec("[a~/01+]{0,3}|~0|~1|0|1|01|\\+1", 0..4),
            leading_slash in any::<bool>(),
        ) {
            let joined = tokens.join("/");
            let mut paths = vec![if leading_slash { format!("/{joined}") } else { joined }];
            every_pointer(&doc, String::new(), &mut paths);
            for path in &paths {
                prop_assert_eq!(pointer(&doc, path), doc.pointer(path), "{}", path);
            }
        }
    }

    proptest! {
        /// Splitting at an ASCII byte gives the pieces `str::split` gives, beside multi-byte
        /// characters and with empty pieces at either end or between two separators.
        #[test]
        fn split_ascii_splits_as_str_split(s in "[./a\u{e9}\u{2f}\u{1f600}]{0,12}", dot in any::<bool>()) {
            let separator = if dot { b'.' } else { b'/' };
            let ours: Vec<&str> = split_ascii(&s, separator).collect();
            let std: Vec<&str> = s.split(separator as char).collect();
            prop_assert_eq!(ours, std);
        }
    }

    #[test]
    fn escaped_tokens_name_members_with_slashes_and_tildes() {
        let doc = json!({"a/b": {"c~d": [10, 11]}});
        assert_eq!(pointer(&doc, "/a~1b/c~0d/1"), Some(&json!(11)));
        assert_eq!(pointer(&doc, ""), Some(&doc));
        assert_eq!(pointer(&doc, "/a~1b/c~0d/01"), None);
    }
}
