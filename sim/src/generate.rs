//! Generated fleets for benchmarks and sweeps: many clusters, machines, nodes and pods, with
//! seeded churn (machine deletions and node failures).

use crate::scenario::{Manifest, ObjRef, Scenario, Step, StepAction, WorldKnobs};
use engine::time::Duration;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The shape of a generated fleet.
#[derive(Clone, Debug)]
pub struct FleetSpec {
    pub clusters: usize,
    /// Machines per cluster, including one control-plane Machine.
    pub machines_per_cluster: usize,
    pub pods_per_node: usize,
    /// Share of worker Machines deleted during the run.
    pub delete_fraction: f64,
    /// Share of Nodes whose Ready condition turns False during the run.
    pub fail_fraction: f64,
    pub duration: Duration,
    pub seed: u64,
}

fn manifest(value: Value) -> Manifest {
    Manifest { line: 0, value }
}

fn machine(cluster: &str, name: &str, control_plane: bool, owner: Option<&str>) -> Value {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    let mut meta = json!({"name": name, "namespace": "default", "labels": labels,
                          "finalizers": ["machine.cluster.x-k8s.io"]});
    if let Some(ms) = owner {
        meta["ownerReferences"] = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                                          "name": ms, "uid": format!("uid-{ms}"), "controller": true}]);
    }
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta,
        "spec": {"clusterName": cluster,
                 "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name},
                 "providerID": format!("sim://{cluster}/{name}")},
        "status": {"nodeRef": {"name": name}, "phase": "Running",
                   "initialization": {"infrastructureProvisioned": true, "bootstrapDataSecretCreated": true}}
    })
}

/// Builds the fleet scenario: no expectations (invariants still apply).
pub fn fleet(spec: &FleetSpec) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let mut management = Vec::new();
    let mut workload = BTreeMap::new();
    let mut timeline = Vec::new();
    let span = spec.duration.as_millis().max(1);
    for c in 0..spec.clusters {
        let cluster = format!("c{c}");
        let ms = format!("{cluster}-md");
        management.push(manifest(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster, "namespace": "default"},
            "spec": {},
            "status": {"conditions": [
                {"type": "ControlPlaneInitialized", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "InfrastructureReady", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
        })));
        management.push(manifest(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"name": ms, "namespace": "default", "uid": format!("uid-{ms}")},
            "spec": {"clusterName": cluster, "replicas": spec.machines_per_cluster.saturating_sub(1),
                     "selector": {"matchLabels": {"cluster.x-k8s.io/set-name": ms}},
                     "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                                  "spec": {"clusterName": cluster,
                                           "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "t"}},
                                           "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "t"}}}}
        })));
        management.push(manifest(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
            "metadata": {"name": format!("{cluster}-workers"), "namespace": "default"},
            "spec": {"clusterName": cluster,
                     "selector": {"matchLabels": {"cluster.x-k8s.io/set-name": ms}},
                     "checks": {"unhealthyNodeConditions": [
                         {"type": "Ready", "status": "False", "timeoutSeconds": 300},
                         {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300}]},
                     "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "40%"}}}
        })));
        let mut objects = Vec::new();
        for m in 0..spec.machines_per_cluster {
            let control_plane = m == 0;
            let name = format!("{cluster}-m{m}");
            let mut mach = machine(
                &cluster,
                &name,
                control_plane,
                (!control_plane).then_some(ms.as_str()),
            );
            if !control_plane {
                mach["metadata"]["labels"]["cluster.x-k8s.io/set-name"] = json!(ms);
            }
            management.push(manifest(mach));
            objects.push(manifest(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name},
                "spec": {"providerID": format!("sim://{cluster}/{name}")},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
            })));
            for p in 0..spec.pods_per_node {
                let pod = format!("{name}-p{p}");
                objects.push(manifest(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod, "namespace": "app", "labels": {"app": format!("app{p}")},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("app{p}"), "uid": format!("rs-{p}"), "controller": true}]},
                    "spec": {"nodeName": name, "containers": [{"name": "c", "image": "i"}]}
                })));
            }
            if !control_plane {
                let at = Duration(1000 * (rng.random_range(0..span) / 1000));
                if rng.random_bool(spec.delete_fraction.clamp(0.0, 1.0)) {
                    timeline.push(Step {
                        at,
                        line: 0,
                        cluster: None,
                        action: StepAction::Delete(ObjRef {
                            kind: "Machine".into(),
                            name: name.clone(),
                            namespace: "default".into(),
                            api_version: None,
                            cluster: None,
                        }),
                    });
                } else if rng.random_bool(spec.fail_fraction.clamp(0.0, 1.0)) {
                    timeline.push(Step {
                        at,
                        line: 0,
                        cluster: Some(cluster.clone()),
                        action: StepAction::NodeCondition {
                            node: name.clone(),
                            type_: "Ready".into(),
                            status: "False".into(),
                            reason: Some("KubeletDown".into()),
                            message: None,
                        },
                    });
                }
            }
        }
        workload.insert(cluster, objects);
    }
    timeline.sort_by_key(|s| s.at);
    Scenario {
        name: "fleet".into(),
        description: "generated fleet".into(),
        seed: spec.seed,
        duration: spec.duration,
        world: WorldKnobs::default(),
        mode: engine::runtime::Mode::Alone,
        management,
        workload,
        timeline,
        expect: Vec::new(),
        file: "<generated fleet>".into(),
    }
}

/// The soak's churning world (`adapters/soak/world.py`, the same text) for `duration`: one
/// workload cluster `c1`, a MachineSet of six workers under an MHC (a worker Node fails every
/// 10 minutes, is remediated and replaced: `md-0-r1`, `md-0-r2`, ... in turn), a standalone
/// Machine created every 2 minutes and deleted 6 minutes later, two Nodes flapping every 45 s,
/// six pods the drains move, and Node `zz-bad` malformed and updated every 5 s. Everything that
/// comes also goes: the world's size stays flat however long it runs.
pub fn churn(duration: Duration) -> Scenario {
    let text = churn_yaml(duration.as_millis() / 1000);
    crate::scenario::parse("<generated churn>", &text).expect("the churn world parses")
}

const T0: &str = "2024-01-01T00:00:00Z";

fn churn_machine(name: &str, pool: &str, owned: bool) -> Value {
    let mut meta = json!({"name": name, "namespace": "default",
                          "labels": {"pool": pool, "cluster.x-k8s.io/cluster-name": "c1"},
                          "finalizers": ["machine.cluster.x-k8s.io"]});
    if owned {
        meta["ownerReferences"] = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                                          "name": "md-0", "uid": "ms-uid", "controller": true}]);
    }
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta,
           "spec": {"clusterName": "c1",
                    "bootstrap": {"dataSecretName": format!("{name}-data")},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                          "kind": "DockerMachine", "name": name}}})
}

fn ready_node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": T0}]}})
}

/// One list item of [`churn`]'s scenario text: an object or a step as one line of JSON (YAML's
/// flow form).
fn item(out: &mut String, indent: &str, v: &Value) {
    out.push_str(indent);
    out.push_str("- ");
    out.push_str(&v.to_string());
    out.push('\n');
}

/// [`churn`]'s scenario text.
fn churn_yaml(seconds: i64) -> String {
    let workers: Vec<String> = (1..=6).map(|i| format!("w{i}")).collect();
    let mut out = format!(
        "name: soak-churn\ndescription: the soak's churning world\nduration: {seconds}s\nmanagement:\n"
    );
    for m in churn_management(&workers) {
        item(&mut out, "  ", &m);
    }
    out.push_str("workload:\n  c1:\n");
    for o in churn_workload(&workers) {
        item(&mut out, "    ", &o);
    }
    out.push_str("timeline:\n");
    for (at, _, step) in churn_steps(seconds, &workers) {
        let mut timed = json!({"at": format!("{at}s")});
        for (k, v) in step.as_object().expect("a step is a map") {
            timed[k] = v.clone();
        }
        item(&mut out, "  ", &timed);
    }
    out
}

fn churn_management(workers: &[String]) -> Vec<Value> {
    let mut cp = churn_machine("cp-1", "cp", false);
    cp["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = json!("");
    cp["status"] = json!({"nodeRef": {"name": "cp-1"}});
    let mut objects = vec![
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "default"}, "spec": {},
            "status": {"conditions": [
                {"type": "ControlPlaneInitialized", "status": "True", "lastTransitionTime": T0},
                {"type": "InfrastructureReady", "status": "True", "lastTransitionTime": T0}]}}),
        cp,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"name": "md-0", "namespace": "default", "uid": "ms-uid",
                         "annotations": {"machinedeployment.clusters.x-k8s.io/revision": "1"}},
            "spec": {"clusterName": "c1", "replicas": workers.len(), "selector": {"matchLabels": {"pool": "md-0"}},
                     "template": {"metadata": {"labels": {"pool": "md-0", "cluster.x-k8s.io/cluster-name": "c1"}},
                                  "spec": {"clusterName": "c1",
                                           "bootstrap": {"dataSecretName": "tmpl-data"},
                                           "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                                 "kind": "DockerMachine", "name": "tmpl"}}}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
            "metadata": {"name": "md-0-unhealthy", "namespace": "default"},
            "spec": {"clusterName": "c1", "selector": {"matchLabels": {"pool": "md-0"}},
                     "checks": {"nodeStartupTimeoutSeconds": 600,
                                "unhealthyNodeConditions": [
                                    {"type": "Ready", "status": "False", "timeoutSeconds": 60},
                                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": 60}]}}}),
    ];
    for w in workers {
        let mut m = churn_machine(w, "md-0", true);
        m["status"] = json!({"nodeRef": {"name": w}});
        objects.push(m);
    }
    objects
}

fn churn_workload(workers: &[String]) -> Vec<Value> {
    let mut cp = ready_node("cp-1");
    cp["spec"] = json!({"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]});
    let mut objects = vec![cp];
    objects.extend(workers.iter().map(|w| ready_node(w)));
    // After the workers by name: rescheduled pods go to workers first.
    objects.extend(["zz-bad", "zz-edge-1", "zz-edge-2"].map(ready_node));
    for (i, w) in workers.iter().enumerate() {
        objects.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": "app",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                              "uid": "rs-web", "controller": true}]},
            "spec": {"nodeName": w, "containers": [{"name": "web", "image": "nginx"}]}}));
    }
    objects
}

/// The timeline of [`churn`]: `(at seconds, order at that second, step)`, sorted.
fn churn_steps(seconds: i64, workers: &[String]) -> Vec<(i64, u8, Value)> {
    let mut steps = Vec::new();
    for n in ["zz-edge-1", "zz-edge-2"] {
        steps.push((
            1,
            0,
            json!({"cluster": "c1", "fault": {"kind": "node-flap", "node": n,
            "for": format!("{}s", seconds - 2), "period": "45s"}}),
        ));
    }
    // The malformed Node: a label whose value is a number, changed on every update.
    for (k, at) in (5..seconds).step_by(5).enumerate() {
        steps.push((
            at,
            1,
            json!({"cluster": "c1", "patch": {"kind": "Node", "name": "zz-bad",
            "merge": {"metadata": {"labels": {"soak/tick": k}}}}}),
        ));
    }
    // Remediation: one worker Node fails every 10 min; its replacement is the next to fail.
    let mut failing: Vec<String> = workers.to_vec();
    for (k, at) in (300..seconds - 300).step_by(600).enumerate() {
        let name = failing[k].clone();
        failing.push(format!("md-0-r{}", k + 1));
        steps.push((
            at,
            2,
            json!({"cluster": "c1", "nodeCondition": {"node": name, "type": "Ready",
            "status": "False", "reason": "KubeletNotReady"}}),
        ));
    }
    // Standalone Machines: one created every 2 min, each deleted 6 min later.
    for (k, at) in (60..seconds - 600).step_by(120).enumerate() {
        let name = format!("churn-{k}");
        steps.push((
            at,
            3,
            json!({"apply": churn_machine(&name, "churn", false)}),
        ));
        steps.push((
            at + 360,
            4,
            json!({"delete": {"kind": "Machine", "name": name}}),
        ));
    }
    steps.sort_by_key(|(at, order, _)| (*at, *order));
    steps
}
