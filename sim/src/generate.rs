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
