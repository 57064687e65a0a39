//! One test per validation rule (exact messages), the contract's example, and defaults.

use super::*;
use engine::time::{Duration, Timestamp};
use serde_json::json;

const EXAMPLE: &str = include_str!("../../tests/fixtures/pre-drain-hook-holds-drain.yaml");

fn err_of(text: &str) -> String {
    match parse("x.yaml", text) {
        Ok(s) => panic!("expected an error, parsed {s:#?}"),
        Err(e) => e.to_string(),
    }
}

/// A scenario with one workload cluster `c1` (lines 1-3) followed by `rest` from line 4.
fn with_c1(rest: &str) -> String {
    format!("name: t\nworkload:\n  c1: []\n{rest}")
}

fn mins(m: i64) -> Duration {
    Duration::from_mins(m)
}

fn machine_m1() -> ObjRef {
    ObjRef {
        kind: "Machine".into(),
        name: "m1".into(),
        namespace: "default".into(),
        api_version: None,
        cluster: None,
    }
}

// ---- the contract's example and defaults ----

#[test]
fn the_contract_example_parses_with_typed_values_and_defaults() {
    let s = parse("scenarios/pre-drain-hook-holds-drain.yaml", EXAMPLE).unwrap();
    assert_eq!(s.name, "pre-drain-hook-holds-drain");
    assert!(s.description.starts_with("A pre-drain hook keeps"));
    assert_eq!(s.seed, 0);
    assert_eq!(s.duration, mins(20));
    assert_eq!(s.world, WorldKnobs::default());
    assert_eq!(s.file, "scenarios/pre-drain-hook-holds-drain.yaml");

    let ids: Vec<(&str, &str, usize)> = s
        .management
        .iter()
        .map(|m| (m.kind(), m.name(), m.line))
        .collect();
    assert_eq!(
        ids,
        [
            ("Cluster", "c1", 5),
            ("Machine", "cp-1", 9),
            ("Machine", "m1", 23)
        ]
    );
    assert_eq!(s.management[2].api_version(), "cluster.x-k8s.io/v1beta1");
    assert_eq!(s.management[2].namespace(), Some("default"));
    assert_eq!(
        s.management[1].value["metadata"]["labels"],
        json!({"cluster.x-k8s.io/cluster-name": "c1", "cluster.x-k8s.io/control-plane": ""})
    );
    assert_eq!(
        s.management[2].value["metadata"]["annotations"],
        json!({"pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate-app": "my-migration-controller"})
    );
    // Key order is the file's.
    let keys: Vec<&String> = s.management[2].value.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec", "status"]);

    assert_eq!(s.workload.keys().collect::<Vec<_>>(), ["c1"]);
    let c1 = &s.workload["c1"];
    assert_eq!(c1.len(), 3);
    assert_eq!(
        c1[0].value["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    assert_eq!(c1[2].namespace(), Some("app"));

    assert_eq!(s.timeline.len(), 2);
    assert_eq!(
        s.timeline[0],
        Step {
            at: mins(1),
            line: 56,
            cluster: None,
            action: StepAction::Delete(machine_m1()),
        }
    );
    assert_eq!(s.timeline[1].at, mins(5));
    assert_eq!(s.timeline[1].line, 57);
    assert_eq!(
        s.timeline[1].action,
        StepAction::Patch {
            r: machine_m1(),
            merge: json!({"metadata": {"annotations": {"pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate-app": null}}}),
        }
    );

    let expect: Vec<(usize, ExpectKind)> = s.expect.into_iter().map(|e| (e.line, e.kind)).collect();
    assert_eq!(
        expect,
        [
            (
                63,
                ExpectKind::ActionNotBefore {
                    name: "Cordon".into(),
                    target: None,
                    not_before: mins(5),
                }
            ),
            (
                64,
                ExpectKind::Action {
                    name: "Evict".into(),
                    target: Some(ObjRef {
                        kind: "Pod".into(),
                        name: "web-0".into(),
                        namespace: "app".into(),
                        api_version: None,
                        cluster: Some("c1".into()),
                    }),
                    count: CountSpec::Exactly(1),
                    within: None,
                }
            ),
            (
                65,
                ExpectKind::At {
                    at: mins(3),
                    object: machine_m1(),
                    check: Check::Condition {
                        type_: "PreDrainDeleteHookSucceeded".into(),
                        status: "False".into(),
                        reason: None,
                        message: None,
                    },
                }
            ),
            (
                66,
                ExpectKind::Gone {
                    at: mins(10),
                    object: machine_m1()
                }
            ),
        ]
    );
}

#[test]
fn world_defaults_match_the_contract() {
    let w = WorldKnobs::default();
    assert_eq!(
        w.start,
        Timestamp::parse_rfc3339("2024-01-01T00:00:00Z").unwrap()
    );
    assert_eq!(w.node_monitor_grace_period, Duration::from_secs(40));
    assert_eq!(w.pod_shutdown, Duration::from_secs(5));
    assert_eq!(w.volume_detach, Duration::from_secs(5));
    assert_eq!(w.infra_provision, Duration::from_secs(30));
    assert_eq!(w.infra_delete, Duration::from_secs(10));
    assert_eq!(w.node_join, Duration::from_secs(60));
    assert_eq!(w.machine_sets, MachineSetsMode::Replace);
    assert!(w.reschedule);
    assert_eq!(w.pod_startup, Duration::from_secs(10));
    assert_eq!(w.capi_release, CapiRelease("v1.12.0".into()));
}

#[test]
fn a_capi_release_is_a_world_knob_and_a_step() {
    let s = parse(
        "x.yaml",
        "name: t\nworld: {capiManager: true, capiRelease: v1.11.3}\ntimeline:\n  - {at: 1m, capiRelease: v1.15.0}\n  - {at: 2m, capiRelease: \"sha256:0123abcd\"}\n",
    )
    .unwrap();
    assert_eq!(s.world.capi_release, CapiRelease("v1.11.3".into()));
    let releases: Vec<&StepAction> = s.timeline.iter().map(|t| &t.action).collect();
    assert_eq!(
        releases,
        [
            &StepAction::CapiRelease(CapiRelease("v1.15.0".into())),
            &StepAction::CapiRelease(CapiRelease("sha256:0123abcd".into())),
        ]
    );
    assert_eq!(
        CapiRelease("sha256:0123abcd".into()).image(),
        "registry.k8s.io/cluster-api/cluster-api-controller@sha256:0123abcd"
    );
    assert!(
        err_of("name: t\ntimeline:\n  - {at: 1m, capiRelease: latest}\n")
            .contains("is not a release")
    );
    let w = crate::scenario::to_yaml(&s);
    let again = parse("y.yaml", &w).unwrap();
    assert_eq!((again.world, again.timeline.len()), (s.world, 2));
}

#[test]
fn a_minimal_scenario_gets_every_default() {
    let s = parse("x.yaml", "name: t\n").unwrap();
    assert_eq!(
        (s.description.as_str(), s.seed, s.duration),
        ("", 0, Duration::from_mins(60))
    );
    assert_eq!(s.world, WorldKnobs::default());
    assert!(s.management.is_empty() && s.workload.is_empty());
    assert!(s.timeline.is_empty() && s.expect.is_empty());
}

#[test]
fn a_namespaced_manifest_without_a_namespace_gets_default_as_kubectl_gives_it() {
    let s = parse(
        "x.yaml",
        "name: t\nmanagement:\n  - {apiVersion: cluster.x-k8s.io/v1beta2, kind: MachineHealthCheck, metadata: {name: mhc}}\n  - {apiVersion: v1, kind: Namespace, metadata: {name: apps}}\n  - {apiVersion: v1, kind: Secret, metadata: {name: s, namespace: kube-system}}\n",
    )
    .unwrap();
    let namespaces: Vec<Option<&str>> = s
        .management
        .iter()
        .map(|m| m.value["metadata"]["namespace"].as_str())
        .collect();
    assert_eq!(namespaces, [Some("default"), None, Some("kube-system")]);
}

#[test]
fn world_knobs_are_read() {
    let s = parse(
        "x.yaml",
        "name: t\nseed: 42\nworld:\n  start: 2025-06-01T12:00:00Z\n  nodeMonitorGracePeriod: 1m\n  podShutdown: 250ms\n  volumeDetach: 0\n  infraProvision: 1h30m\n  infraDelete: 2s\n  nodeJoin: 3s\n  machineSets: none\n  reschedule: false\n  podStartup: 4s\n",
    )
    .unwrap();
    assert_eq!(s.seed, 42);
    let w = s.world;
    assert_eq!(
        w.start,
        Timestamp::parse_rfc3339("2025-06-01T12:00:00Z").unwrap()
    );
    assert_eq!(w.node_monitor_grace_period, Duration::from_secs(60));
    assert_eq!(w.pod_shutdown, Duration(250));
    assert_eq!(w.volume_detach, Duration::ZERO);
    assert_eq!(w.infra_provision, Duration::from_mins(90));
    assert_eq!(
        (w.infra_delete, w.node_join, w.pod_startup),
        (Duration(2000), Duration(3000), Duration(4000))
    );
    assert_eq!(w.machine_sets, MachineSetsMode::None);
    assert!(!w.reschedule);
}

#[test]
fn quoted_false_in_a_manifest_stays_a_string() {
    let s = parse(
        "x.yaml",
        "name: t\nmanagement:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: cm}\n    data: {a: \"False\", b: False, c: \"3\", d: 3, e: 1.5, f: ~, g: plain}\n",
    )
    .unwrap();
    assert_eq!(
        s.management[0].value["data"],
        json!({"a": "False", "b": false, "c": "3", "d": 3, "e": 1.5, "f": null, "g": "plain"})
    );
}

#[test]
fn object_content_is_not_validated() {
    let s = parse(
        "x.yaml",
        "name: t\nmanagement:\n  - apiVersion: cluster.x-k8s.io/v1beta1\n    kind: MachineHealthCheck\n    metadata: {name: mhc}\n    spec: {maxUnhealthy: abcdef, unhealthyRange: \"[2-1]\"}\n",
    )
    .unwrap();
    assert_eq!(s.management[0].value["spec"]["maxUnhealthy"], "abcdef");
}

// ---- every step action ----

#[test]
fn every_step_action_parses() {
    let s = parse(
        "x.yaml",
        &with_c1(concat!(
            "timeline:\n",
            "  - {at: 0, cluster: c1, apply: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: app}}}\n",
            "  - {at: 1s, cluster: c1, delete: {kind: Pod, name: p, namespace: app, apiVersion: v1}}\n",
            "  - {at: 2s, patch: {kind: Node, name: n1, cluster: c1, merge: {spec: {unschedulable: true}}}}\n",
            "  - {at: 3s, nodeCondition: {node: n1, type: Ready, status: Unknown, reason: R, message: M}}\n",
            "  - {at: 4s, kubelet: {node: n1, state: stopped}}\n",
            "  - {at: 5s, cluster: c1, kubelet: {node: n1, state: running}}\n",
            "  - {at: 6s, fault: {kind: controller-restart}}\n",
            "  - {at: 7s, cluster: c1, fault: {kind: api-errors, rate: 0.5, for: 1m}}\n",
            "  - {at: 8s, fault: {kind: partition, for: 30s}}\n",
            "  - {at: 9s, fault: {kind: watch-gap, for: 10s}}\n",
            "  - {at: 10s, fault: {kind: slow-api, for: 1m, latency: 2s, verbs: [get, list]}}\n",
        )),
    )
    .unwrap();
    let t = &s.timeline;
    assert_eq!(t.len(), 11);
    assert_eq!(t[0].cluster.as_deref(), Some("c1"));
    let StepAction::Apply(m) = &t[0].action else {
        panic!("{:?}", t[0])
    };
    assert_eq!((m.kind(), m.name(), m.line), ("Pod", "p", 5));
    let pod = ObjRef {
        kind: "Pod".into(),
        name: "p".into(),
        namespace: "app".into(),
        api_version: Some("v1".into()),
        cluster: Some("c1".into()),
    };
    assert_eq!(t[1].action, StepAction::Delete(pod));
    // A reference that names its cluster sets the step's.
    assert_eq!(t[2].cluster.as_deref(), Some("c1"));
    let StepAction::Patch { r, merge } = &t[2].action else {
        panic!()
    };
    assert_eq!(
        (r.cluster.as_deref(), r.namespace.as_str()),
        (Some("c1"), "default")
    );
    assert_eq!(merge, &json!({"spec": {"unschedulable": true}}));
    // nodeCondition and kubelet without cluster: the only workload cluster.
    assert_eq!(t[3].cluster.as_deref(), Some("c1"));
    assert_eq!(
        t[3].action,
        StepAction::NodeCondition {
            node: "n1".into(),
            type_: "Ready".into(),
            status: "Unknown".into(),
            reason: Some("R".into()),
            message: Some("M".into()),
        }
    );
    assert_eq!(t[4].cluster.as_deref(), Some("c1"));
    assert_eq!(
        t[4].action,
        StepAction::Kubelet {
            node: "n1".into(),
            state: KubeletState::Stopped
        }
    );
    assert_eq!(
        t[5].action,
        StepAction::Kubelet {
            node: "n1".into(),
            state: KubeletState::Running
        }
    );
    let fault = |i: usize| match &t[i].action {
        StepAction::Fault(f) => f.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(fault(6).kind, FaultKind::ControllerRestart);
    assert_eq!(
        (fault(7).kind, fault(7).rate, fault(7).for_),
        (FaultKind::ApiErrors, Some(0.5), Some(mins(1)))
    );
    assert_eq!(t[7].cluster.as_deref(), Some("c1"));
    assert_eq!(
        (fault(8).kind, fault(8).for_),
        (FaultKind::Partition, Some(Duration::from_secs(30)))
    );
    assert_eq!(fault(9).kind, FaultKind::WatchGap);
    let slow = fault(10);
    assert_eq!((slow.kind, slow.for_), (FaultKind::SlowApi, Some(mins(1))));
    assert_eq!(
        slow.extra.into_iter().collect::<Vec<_>>(),
        [
            ("latency".to_string(), json!("2s")),
            ("verbs".to_string(), json!(["get", "list"]))
        ]
    );
}

#[test]
fn every_fault_kind_name_round_trips() {
    let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "controller-restart",
            "api-errors",
            "partition",
            "watch-gap",
            "torn-journal",
            "conflicts",
            "slow-api",
            "kubelet-stop",
            "node-flap",
            "node-never-joins",
            "infra-provision-failure",
            "eviction-429",
            "stuck-hook",
            "cache-unsynced",
            "reordered-delivery",
            "coalesced-events",
            "watch-expired",
            "relist-duplicates",
            "write-timeout",
            "backlog-batches",
            "corrupt-object",
            "journal-damage",
            "kubeconfig",
        ]
    );
    for k in FaultKind::ALL {
        assert_eq!(FaultKind::from_name(k.as_str()), Some(k));
        let text = format!(
            "name: t\ntimeline:\n  - {{at: 1s, fault: {{kind: {}, rate: 1, for: 1s}}}}\n",
            k.as_str()
        );
        let parsed = parse("x.yaml", &text);
        let params_fixed = matches!(
            k,
            FaultKind::ControllerRestart | FaultKind::Partition | FaultKind::WatchGap
        );
        assert_eq!(parsed.is_err(), params_fixed, "{k:?}: {parsed:?}");
    }
}

// ---- every expectation form ----

#[test]
fn every_expectation_form_parses() {
    let s = parse(
        "x.yaml",
        &with_c1(concat!(
            "expect:\n",
            "  - {at: 1m, object: {kind: Machine, name: m1}, condition: {type: Ready, status: \"True\", reason: R, message: sub}}\n",
            "  - {at: 1m, object: {kind: Machine, name: m1}, condition: {type: Deleting, absent: true}}\n",
            "  - {during: [1m, 2m], object: {kind: Node, name: n1, cluster: c1}, fields: {\"status.phase\": Running, \"spec.replicas\": 3, /metadata/x: null}}\n",
            "  - {at: 2m, object: {kind: Machine, name: m1}, present: [status.nodeRef]}\n",
            "  - {at: 2m, object: {kind: Machine, name: m1}, absent: [metadata.deletionTimestamp]}\n",
            "  - {at: 3m, exists: {kind: Machine, name: m1, namespace: ns}}\n",
            "  - {action: Evict, atLeast: 2, within: [1m, 5m]}\n",
            "  - {action: Evict, atMost: 3}\n",
            "  - {action: Evict, atLeast: 1, atMost: 3}\n",
            "  - {action: DeleteNode, target: {kind: Node, name: n1, cluster: c1}, never: true}\n",
            "  - {order: [{action: Cordon}, {action: Evict, target: {kind: Pod, name: p, cluster: c1}}]}\n",
            "  - {event: MachineDrained, object: {kind: Machine, name: m1}, count: 1}\n",
            "  - {event: Evicted, atLeast: 1}\n",
        )),
    )
    .unwrap();
    let kinds: Vec<ExpectKind> = s.expect.into_iter().map(|e| e.kind).collect();
    let node_n1 = ObjRef {
        kind: "Node".into(),
        name: "n1".into(),
        namespace: "default".into(),
        api_version: None,
        cluster: Some("c1".into()),
    };
    assert_eq!(
        kinds[0],
        ExpectKind::At {
            at: mins(1),
            object: machine_m1(),
            check: Check::Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("R".into()),
                message: Some("sub".into()),
            },
        }
    );
    assert_eq!(
        kinds[1],
        ExpectKind::At {
            at: mins(1),
            object: machine_m1(),
            check: Check::ConditionAbsent {
                type_: "Deleting".into()
            }
        }
    );
    assert_eq!(
        kinds[2],
        ExpectKind::During {
            from: mins(1),
            to: mins(2),
            object: node_n1.clone(),
            check: Check::Fields(vec![
                ("status.phase".into(), json!("Running")),
                ("spec.replicas".into(), json!(3)),
                ("/metadata/x".into(), json!(null)),
            ]),
        }
    );
    assert_eq!(
        kinds[3],
        ExpectKind::At {
            at: mins(2),
            object: machine_m1(),
            check: Check::Present(vec!["status.nodeRef".into()])
        }
    );
    assert_eq!(
        kinds[4],
        ExpectKind::At {
            at: mins(2),
            object: machine_m1(),
            check: Check::Absent(vec!["metadata.deletionTimestamp".into()])
        }
    );
    assert_eq!(
        kinds[5],
        ExpectKind::Exists {
            at: mins(3),
            object: ObjRef {
                namespace: "ns".into(),
                ..machine_m1()
            }
        }
    );
    assert_eq!(
        kinds[6],
        ExpectKind::Action {
            name: "Evict".into(),
            target: None,
            count: CountSpec::AtLeast(2),
            within: Some((mins(1), mins(5))),
        }
    );
    assert_eq!(
        kinds[7],
        ExpectKind::Action {
            name: "Evict".into(),
            target: None,
            count: CountSpec::AtMost(3),
            within: None
        }
    );
    assert_eq!(
        kinds[8],
        ExpectKind::Action {
            name: "Evict".into(),
            target: None,
            count: CountSpec::Between(1, 3),
            within: None
        }
    );
    assert_eq!(
        kinds[9],
        ExpectKind::ActionNever {
            name: "DeleteNode".into(),
            target: Some(node_n1)
        }
    );
    let ExpectKind::Order(order) = &kinds[10] else {
        panic!()
    };
    assert_eq!(
        order
            .iter()
            .map(|(a, t)| (a.as_str(), t.is_some()))
            .collect::<Vec<_>>(),
        [("Cordon", false), ("Evict", true)]
    );
    assert_eq!(
        kinds[11],
        ExpectKind::Event {
            reason: "MachineDrained".into(),
            object: Some(machine_m1()),
            count: CountSpec::Exactly(1)
        }
    );
    assert_eq!(
        kinds[12],
        ExpectKind::Event {
            reason: "Evicted".into(),
            object: None,
            count: CountSpec::AtLeast(1)
        }
    );
    assert!(CountSpec::Between(1, 3).holds(2) && !CountSpec::Exactly(1).holds(2));
}

// ---- validation: one test per rule, exact messages ----

#[test]
fn yaml_syntax_error_names_file_and_line() {
    let e = err_of("name: t\ntimeline:\n  - {at: 1m, delete: {kind: Machine\n");
    assert!(e.starts_with("x.yaml:4: "), "{e}");
}

#[test]
fn duplicate_keys_are_rejected() {
    assert_eq!(
        err_of("name: t\nseed: 1\nseed: 2\n"),
        "x.yaml:3: duplicated key in mapping"
    );
}

#[test]
fn more_than_one_document_is_rejected() {
    assert_eq!(
        err_of("name: t\n---\nname: u\n"),
        "x.yaml:3: more than one YAML document (a scenario is one document)"
    );
}

#[test]
fn the_top_level_must_be_a_map() {
    assert_eq!(
        err_of("- name: t\n"),
        "x.yaml:1: expected a map of scenario keys, got a list"
    );
}

#[test]
fn name_is_required() {
    assert_eq!(err_of("seed: 1\n"), "x.yaml:1: name: missing");
    assert_eq!(err_of(""), "x.yaml:1: name: missing");
    assert_eq!(err_of("name: \"\"\n"), "x.yaml:1: name: must not be empty");
}

#[test]
fn unknown_top_level_key_is_rejected() {
    assert_eq!(
        err_of("name: t\ntimelines: []\n"),
        "x.yaml:2: timelines: unknown key (expected one of: name, description, seed, duration, world, mode, management, workload, timeline, expect)"
    );
}

#[test]
fn mode_is_alone_shadow_or_takeover() {
    let parse = |text: &str| super::parse("x.yaml", text);
    assert_eq!(
        parse("name: t\n").unwrap().mode,
        engine::runtime::Mode::Alone
    );
    assert_eq!(
        parse("name: t\nmode: shadow\n").unwrap().mode,
        engine::runtime::Mode::Shadow
    );
    assert_eq!(
        parse("name: t\nmode: takeover\n").unwrap().mode,
        engine::runtime::Mode::Takeover
    );
    assert!(err_of("name: t\nmode: owner\n").contains("is not one of"));
}

#[test]
fn unknown_world_knob_is_rejected() {
    assert_eq!(
        err_of("name: t\nworld:\n  podShutdown: 1s\n  nodeGrace: 1s\n"),
        "x.yaml:4: world.nodeGrace: unknown key (expected one of: start, nodeMonitorGracePeriod, podShutdown, volumeDetach, infraProvision, infraDelete, nodeJoin, machineSets, reschedule, podStartup, capiManager, capiRelease)"
    );
}

#[test]
fn wrong_types_are_rejected() {
    assert_eq!(
        err_of("name: [a]\n"),
        "x.yaml:1: name: expected a string, got a list"
    );
    assert_eq!(
        err_of("name: t\nseed: -1\n"),
        "x.yaml:2: seed: -1 is negative"
    );
    assert_eq!(
        err_of("name: t\nseed: abc\n"),
        "x.yaml:2: seed: expected a non-negative integer, got \"abc\""
    );
    assert_eq!(
        err_of("name: t\nworld: {reschedule: yes}\n"),
        "x.yaml:2: world.reschedule: expected true or false, got \"yes\""
    );
    assert_eq!(
        err_of("name: t\nmanagement: {}\n"),
        "x.yaml:2: management: expected a list of objects, got a map"
    );
    assert_eq!(
        err_of("name: t\ntimeline: {at: 1s}\n"),
        "x.yaml:2: timeline: expected a list of steps, got a map"
    );
    assert_eq!(
        err_of("name: t\nworld: {machineSets: always}\n"),
        "x.yaml:2: world.machineSets: \"always\" is not one of \"replace\", \"none\""
    );
    assert_eq!(
        err_of("name: t\nworld: {start: yesterday}\n"),
        "x.yaml:2: world.start: \"yesterday\" is not an RFC 3339 timestamp (use 2024-01-01T00:00:00Z)"
    );
}

#[test]
fn bare_integer_durations_are_rejected() {
    assert_eq!(
        err_of(
            "name: t\ntimeline:\n  - {at: 1m, fault: {kind: controller-restart}}\n  - {at: 2m, fault: {kind: controller-restart}}\n  - at: 30\n    fault: {kind: controller-restart}\n"
        ),
        "x.yaml:5: timeline[2].at: \"30\" is not a duration (use 30s)"
    );
    assert_eq!(
        err_of("name: t\nduration: \"30\"\n"),
        "x.yaml:2: duration: \"30\" is not a duration (use 30s)"
    );
    assert_eq!(
        err_of("name: t\nworld:\n  podShutdown: 5\n"),
        "x.yaml:3: world.podShutdown: \"5\" is not a duration (use 5s)"
    );
}

#[test]
fn malformed_and_negative_durations_are_rejected() {
    assert_eq!(
        err_of("name: t\nduration: 5x\n"),
        "x.yaml:2: duration: \"5x\" is not a duration: unknown unit \"x\""
    );
    assert_eq!(
        err_of("name: t\nduration: -5s\n"),
        "x.yaml:2: duration: \"-5s\" is negative"
    );
    assert_eq!(
        err_of("name: t\nduration: [1s]\n"),
        "x.yaml:2: duration: expected a duration like 30s, got a list"
    );
}

#[test]
fn manifests_must_be_objects_with_identity() {
    let head = "name: t\nmanagement:\n  - {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n";
    assert_eq!(
        err_of(&format!("{head}  - just-a-string\n")),
        "x.yaml:4: management[1]: expected a Kubernetes object (a map), got \"just-a-string\""
    );
    assert_eq!(
        err_of(&format!(
            "{head}  - {{kind: Namespace, metadata: {{name: b}}}}\n"
        )),
        "x.yaml:4: management[1].apiVersion: missing"
    );
    assert_eq!(
        err_of(&format!(
            "{head}  - {{apiVersion: v1, metadata: {{name: b}}}}\n"
        )),
        "x.yaml:4: management[1].kind: missing"
    );
    assert_eq!(
        err_of(&format!("{head}  - {{apiVersion: v1, kind: Namespace}}\n")),
        "x.yaml:4: management[1].metadata: missing"
    );
    assert_eq!(
        err_of(&format!(
            "{head}  - apiVersion: v1\n    kind: Namespace\n    metadata:\n      labels: {{a: b}}\n"
        )),
        "x.yaml:7: management[1].metadata.name: missing"
    );
    assert_eq!(
        err_of(&format!(
            "{head}  - {{apiVersion: v1, kind: 3, metadata: {{name: b}}}}\n"
        )),
        "x.yaml:4: management[1].kind: expected a string, got 3"
    );
    assert_eq!(
        err_of(
            "name: t\nworkload:\n  c1:\n    - {apiVersion: v1, kind: Node, metadata: {namespace: x}}\n"
        ),
        "x.yaml:4: workload.c1[0].metadata.name: missing"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, apply: {apiVersion: v1, kind: Pod}}\n"),
        "x.yaml:3: timeline[0].apply.metadata: missing"
    );
}

#[test]
fn unknown_step_action_is_rejected() {
    assert_eq!(
        err_of(
            "name: t\ntimeline:\n  - at: 1s\n    scale: {kind: MachineSet, name: ms, replicas: 2}\n"
        ),
        "x.yaml:4: timeline[0].scale: unknown step action (expected at, cluster and one of: apply, patch, delete, nodeCondition, kubelet, fault, capiRelease)"
    );
}

#[test]
fn a_step_needs_exactly_one_action() {
    assert_eq!(
        err_of("name: t\ntimeline:\n  - at: 1s\n"),
        "x.yaml:3: timeline[0]: no action (a step has exactly one of: apply, patch, delete, nodeCondition, kubelet, fault, capiRelease)"
    );
    assert_eq!(
        err_of(
            "name: t\ntimeline:\n  - at: 1s\n    delete: {kind: Machine, name: m1}\n    fault: {kind: controller-restart}\n"
        ),
        "x.yaml:5: timeline[0]: more than one action (delete, fault); a step has exactly one"
    );
}

#[test]
fn a_step_needs_at() {
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {delete: {kind: Machine, name: m1}}\n"),
        "x.yaml:3: timeline[0].at: missing"
    );
}

#[test]
fn step_action_keys_are_checked() {
    assert_eq!(
        err_of(
            "name: t\ntimeline:\n  - {at: 1s, delete: {kind: Machine, name: m1, force: true}}\n"
        ),
        "x.yaml:3: timeline[0].delete.force: unknown key (expected one of: kind, name, namespace, apiVersion, cluster)"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, patch: {kind: Machine, name: m1}}\n"),
        "x.yaml:3: timeline[0].patch.merge: missing"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, patch: {kind: Machine, name: m1, merge: [1]}}\n"),
        "x.yaml:3: timeline[0].patch.merge: expected a map (a JSON merge patch), got a list"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, delete: {name: m1}}\n"),
        "x.yaml:3: timeline[0].delete.kind: missing"
    );
    assert_eq!(
        err_of(&with_c1(
            "timeline:\n  - {at: 1s, kubelet: {node: n1, state: paused}}\n"
        )),
        "x.yaml:5: timeline[0].kubelet.state: \"paused\" is not one of \"stopped\", \"running\""
    );
    assert_eq!(
        err_of(&with_c1(
            "timeline:\n  - {at: 1s, nodeCondition: {node: n1, type: Ready, status: False}}\n"
        )),
        "x.yaml:5: timeline[0].nodeCondition.status: expected a string, got false (quote it to make it a string)"
    );
    assert_eq!(
        err_of(&with_c1(
            "timeline:\n  - {at: 1s, nodeCondition: {node: n1, type: Ready, status: \"false\"}}\n"
        )),
        "x.yaml:5: timeline[0].nodeCondition.status: \"false\" is not one of \"True\", \"False\", \"Unknown\""
    );
}

#[test]
fn step_cluster_must_exist() {
    assert_eq!(
        err_of(&with_c1(
            "timeline:\n  - {at: 1s, cluster: c9, delete: {kind: Pod, name: p}}\n"
        )),
        "x.yaml:5: timeline[0].cluster: workload cluster \"c9\" does not exist (workload has: c1)"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, delete: {kind: Pod, name: p, cluster: c1}}\n"),
        "x.yaml:3: timeline[0].delete.cluster: workload cluster \"c1\" does not exist (workload is empty)"
    );
}

#[test]
fn a_reference_cluster_must_agree_with_the_step() {
    let text = "name: t\nworkload: {c1: [], c2: []}\ntimeline:\n  - {at: 1s, cluster: c1, delete: {kind: Pod, name: p, cluster: c2}}\n";
    assert_eq!(
        err_of(text),
        "x.yaml:4: timeline[0].delete.cluster: \"c2\" conflicts with the step's cluster \"c1\""
    );
}

#[test]
fn node_steps_need_a_cluster_unless_there_is_exactly_one() {
    assert_eq!(
        err_of(
            "name: t\nworkload: {c1: [], c2: []}\ntimeline:\n  - {at: 1s, kubelet: {node: n1, state: stopped}}\n"
        ),
        "x.yaml:4: timeline[0].cluster: missing: a kubelet step needs cluster: unless there is exactly one workload cluster (workload has: c1, c2)"
    );
    assert_eq!(
        err_of(
            "name: t\ntimeline:\n  - {at: 1s, nodeCondition: {node: n1, type: Ready, status: \"False\"}}\n"
        ),
        "x.yaml:3: timeline[0].cluster: missing: a nodeCondition step needs cluster: unless there is exactly one workload cluster (workload is empty)"
    );
    let ok = parse("x.yaml", "name: t\nworkload: {c1: [], c2: []}\ntimeline:\n  - {at: 1s, cluster: c2, kubelet: {node: n1, state: stopped}}\n").unwrap();
    assert_eq!(ok.timeline[0].cluster.as_deref(), Some("c2"));
}

#[test]
fn faults_are_checked() {
    let known = "controller-restart, api-errors, partition, watch-gap, torn-journal, conflicts, slow-api, kubelet-stop, node-flap, node-never-joins, infra-provision-failure, eviction-429, stuck-hook, cache-unsynced, reordered-delivery, coalesced-events, watch-expired, relist-duplicates, write-timeout, backlog-batches, corrupt-object, journal-damage, kubeconfig";
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: kubeconfig, problem: lost}}\n"),
        "x.yaml:3: timeline[0].fault.problem: \"lost\" is not one of \"missing\", \"no-value\", \"unparsable\""
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: journal-damage, damage: fire}}\n"),
        "x.yaml:3: timeline[0].fault.damage: \"fire\" is not one of \"flip\", \"truncate\", \"lose-conf\", \"lose-commits\", \"lose-blob\", \"lose-snap\", \"lose-db\""
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: meteor}}\n"),
        format!(
            "x.yaml:3: timeline[0].fault.kind: unknown fault kind \"meteor\" (expected one of: {known})"
        )
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: api-errors, rate: 1.5, for: 1m}}\n"),
        "x.yaml:3: timeline[0].fault.rate: 1.5 is not between 0.0 and 1.0"
    );
    assert_eq!(
        err_of(
            "name: t\ntimeline:\n  - {at: 1s, fault: {kind: api-errors, rate: \"half\", for: 1m}}\n"
        ),
        "x.yaml:3: timeline[0].fault.rate: expected a number from 0.0 to 1.0, got \"half\""
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: api-errors, rate: 0.1}}\n"),
        "x.yaml:3: timeline[0].fault.for: missing"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: partition, for: 60}}\n"),
        "x.yaml:3: timeline[0].fault.for: \"60\" is not a duration (use 60s)"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: watch-gap, for: 1s, rate: 0.5}}\n"),
        "x.yaml:3: timeline[0].fault.rate: unknown key (expected one of: kind, for)"
    );
    assert_eq!(
        err_of("name: t\ntimeline:\n  - {at: 1s, fault: {kind: node-flap, rate: 2}}\n"),
        "x.yaml:3: timeline[0].fault.rate: 2 is not between 0.0 and 1.0"
    );
}

#[test]
fn unrecognised_expectation_is_rejected() {
    assert_eq!(
        err_of("name: t\nexpect:\n  - {at: 1m, condition: {type: Ready, status: \"True\"}}\n"),
        "x.yaml:3: expect[0]: not an expectation: it needs object:, gone:, exists:, action:, order: or event:"
    );
}

#[test]
fn expectation_keys_are_checked() {
    assert_eq!(
        err_of(
            "name: t\nexpect:\n  - {at: 1m, object: {kind: Machine, name: m1}, condition: {type: Ready, status: \"True\"}, within: [1m, 2m]}\n"
        ),
        "x.yaml:3: expect[0].within: unknown key (expected one of: at, during, object, condition, fields, present, absent)"
    );
    assert_eq!(
        err_of(
            "name: t\nexpect:\n  - {at: 1m, object: {kind: Machine, name: m1, uid: x}, present: [spec]}\n"
        ),
        "x.yaml:3: expect[0].object.uid: unknown key (expected one of: kind, name, namespace, apiVersion, cluster)"
    );
    assert_eq!(
        err_of(
            "name: t\nexpect:\n  - {at: 1m, object: {kind: Machine, name: m1}, condition: {type: Ready, state: \"True\"}}\n"
        ),
        "x.yaml:3: expect[0].condition.state: unknown key (expected one of: type, status, reason, message)"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {at: 1m, gone: {kind: Machine, name: m1}, count: 1}\n"),
        "x.yaml:3: expect[0].count: unknown key (expected one of: at, gone)"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict, count: 1, object: {kind: Pod, name: p}}\n"),
        "x.yaml:3: expect[0].object: unknown key (expected one of: action, target, count, atLeast, atMost, within, notBefore, never)"
    );
}

#[test]
fn expectation_shapes_are_checked() {
    let obj = "object: {kind: Machine, name: m1}";
    assert_eq!(
        err_of(&format!("name: t\nexpect:\n  - {{at: 1m, {obj}}}\n")),
        "x.yaml:3: expect[0]: missing what to check (one of: condition, fields, present, absent)"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{at: 1m, {obj}, present: [a], absent: [b]}}\n"
        )),
        "x.yaml:3: expect[0].absent: only one of condition, fields, present, absent per expectation"
    );
    assert_eq!(
        err_of(&format!("name: t\nexpect:\n  - {{{obj}, present: [a]}}\n")),
        "x.yaml:3: expect[0].at: missing (or during: [T1, T2])"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{at: 1m, during: [1m, 2m], {obj}, present: [a]}}\n"
        )),
        "x.yaml:3: expect[0].during: use at: or during:, not both"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{during: [2m], {obj}, present: [a]}}\n"
        )),
        "x.yaml:3: expect[0].during: expected a window [T1, T2], got 1 items"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{during: [2m, 1m], {obj}, present: [a]}}\n"
        )),
        "x.yaml:3: expect[0].during: the window ends (1m0s) before it starts (2m0s)"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{at: 1m, {obj}, condition: {{type: Ready}}}}\n"
        )),
        "x.yaml:3: expect[0].condition.status: missing"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{at: 1m, {obj}, condition: {{type: Ready, absent: true, status: \"True\"}}}}\n"
        )),
        "x.yaml:3: expect[0].condition.status: unknown key (expected one of: type, absent)"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{at: 1m, {obj}, present: []}}\n"
        )),
        "x.yaml:3: expect[0].present: lists no paths"
    );
    assert_eq!(
        err_of(&format!(
            "name: t\nexpect:\n  - {{at: 1m, {obj}, fields: [status.phase]}}\n"
        )),
        "x.yaml:3: expect[0].fields: expected a map of path to value, got a list"
    );
}

#[test]
fn action_names_must_be_controller_actions() {
    let known = "Cordon, Evict, DeleteInfrastructure, DeleteBootstrap, DeleteNode, RemoveFinalizer, SetCondition, CreateRemediation, DeleteRemediation, DeleteMachine, CreateMachine, PatchSpec, PatchStatus, SetOwnerReference, AddFinalizer, SetOwnCondition";
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Drain, count: 1}\n"),
        format!("x.yaml:3: expect[0].action: unknown action \"Drain\" (expected one of: {known})")
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - order:\n      - {action: Cordon}\n      - {action: evict}\n"),
        format!(
            "x.yaml:5: expect[0].order[1].action: unknown action \"evict\" (expected one of: {known})"
        )
    );
}

#[test]
fn action_expectations_need_exactly_one_form() {
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict}\n"),
        "x.yaml:3: expect[0]: missing count:, atLeast:, atMost:, notBefore: or never:"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict, count: 1, never: true}\n"),
        "x.yaml:3: expect[0]: use one of count:/atLeast:/atMost:, notBefore: or never:"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict, count: 1, atLeast: 1}\n"),
        "x.yaml:3: expect[0].atLeast: use count: or atLeast:/atMost:, not both"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict, atLeast: 3, atMost: 1}\n"),
        "x.yaml:3: expect[0].atMost: atMost 1 is below atLeast 3"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict, notBefore: 1m, within: [0, 1m]}\n"),
        "x.yaml:3: expect[0].within: within: goes with count:, atLeast: or atMost:"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict, never: false}\n"),
        "x.yaml:3: expect[0].never: only never: true is meaningful"
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {action: Evict, count: one}\n"),
        "x.yaml:3: expect[0].count: expected a non-negative integer, got \"one\""
    );
    assert_eq!(
        err_of("name: t\nexpect:\n  - {event: Drained}\n"),
        "x.yaml:3: expect[0].count: missing (or one of: atLeast, atMost)"
    );
}

#[test]
fn expectation_references_must_name_existing_clusters() {
    assert_eq!(
        err_of(&with_c1(
            "expect:\n  - {action: Evict, target: {kind: Pod, name: p, cluster: c2}, count: 1}\n"
        )),
        "x.yaml:5: expect[0].target.cluster: workload cluster \"c2\" does not exist (workload has: c1)"
    );
    assert_eq!(
        err_of(&with_c1(
            "expect:\n  - {at: 1m, gone: {kind: Pod, name: p, cluster: c3}}\n"
        )),
        "x.yaml:5: expect[0].gone.cluster: workload cluster \"c3\" does not exist (workload has: c1)"
    );
    assert_eq!(
        err_of(&with_c1(
            "expect:\n  - {event: E, object: {kind: Pod, name: p, cluster: x}, count: 0}\n"
        )),
        "x.yaml:5: expect[0].object.cluster: workload cluster \"x\" does not exist (workload has: c1)"
    );
}

#[test]
fn load_reads_a_file_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(&path, "name: t\nduration: 30\n").unwrap();
    let e = load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:2: duration: \"30\" is not a duration (use 30s)",
            path.display()
        )
    );
    let missing = load(&dir.path().join("nope.yaml")).unwrap_err();
    assert!(
        missing.to_string().contains("nope.yaml: cannot read: "),
        "{missing}"
    );
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pre-drain-hook-holds-drain.yaml");
    assert_eq!(load(&fixture).unwrap().name, "pre-drain-hook-holds-drain");
}

#[test]
fn a_written_scenario_reads_back_the_same() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pre-drain-hook-holds-drain.yaml"
    ))
    .unwrap();
    let original = parse("x.yaml", &text).unwrap();
    let written = to_yaml(&original);
    let back = parse("y.yaml", &written).unwrap_or_else(|e| panic!("{e}\n{written}"));
    assert_eq!(back.name, original.name);
    assert_eq!(back.duration, original.duration);
    assert_eq!(back.world, original.world);
    let values = |s: &Scenario| {
        s.management
            .iter()
            .map(|m| m.value.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(values(&back), values(&original));
    let steps = |s: &Scenario| {
        s.timeline
            .iter()
            .map(|t| (t.at, t.cluster.clone(), t.action.clone()))
            .collect::<Vec<_>>()
    };
    let fix_lines = |mut v: Vec<(engine::time::Duration, Option<String>, StepAction)>| {
        for (_, _, a) in &mut v {
            if let StepAction::Apply(m) = a {
                m.line = 0;
            }
        }
        v
    };
    assert_eq!(fix_lines(steps(&back)), fix_lines(steps(&original)));
    assert!(back.expect.is_empty());
}
