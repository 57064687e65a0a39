#!/usr/bin/env python3
"""Writes the soak's churning world as a scenario: `world.py HOURS > soak.yaml`.

One workload cluster: a MachineSet of six workers under a MachineHealthCheck, six pods a
drain moves around, standalone Machines created and deleted all along, two Nodes flapping,
one Node (`zz-bad`) malformed and updated every 5 s, and a worker Node failing every 10 min
(the MHC remediates it, the MachineSet replaces it: `md-0-r1`, `md-0-r2`, ... in turn).
Everything that comes also goes, so the world's size stays flat however long it runs.
`sim::generate::churn` writes the same world in process (the test `sim/tests/state_bounded.rs`
bounds the engine's state with it): change both together.
"""
import json
import sys

hours = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
seconds = int(hours * 3600)
T0 = "2024-01-01T00:00:00Z"


def out(obj, indent="  "):
    print(indent + "- " + json.dumps(obj))


def ready(name, taints=None):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": T0}]}}
    if taints:
        node["spec"] = {"taints": taints}
    return node


def machine(name, pool, owned):
    meta = {"name": name, "namespace": "default",
            "labels": {"pool": pool, "cluster.x-k8s.io/cluster-name": "c1"},
            "finalizers": ["machine.cluster.x-k8s.io"]}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                                    "name": "md-0", "uid": "ms-uid", "controller": True}]
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta,
            "spec": {"clusterName": "c1",
                     "bootstrap": {"dataSecretName": name + "-data"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "DockerMachine", "name": name}}}


workers = [f"w{i}" for i in range(1, 7)]
print("name: soak-churn")
print("description: >-\n  The soak's churning world (adapters/soak/world.py).")
print(f"duration: {seconds}s")
print("management:")
out({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
     "metadata": {"name": "c1", "namespace": "default"}, "spec": {},
     "status": {"conditions": [
         {"type": "ControlPlaneInitialized", "status": "True", "lastTransitionTime": T0},
         {"type": "InfrastructureReady", "status": "True", "lastTransitionTime": T0}]}})
cp = machine("cp-1", "cp", False)
cp["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = ""
cp["status"] = {"nodeRef": {"name": "cp-1"}}
out(cp)
out({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
     "metadata": {"name": "md-0", "namespace": "default", "uid": "ms-uid",
                  "annotations": {"machinedeployment.clusters.x-k8s.io/revision": "1"}},
     "spec": {"clusterName": "c1", "replicas": len(workers), "selector": {"matchLabels": {"pool": "md-0"}},
              "template": {"metadata": {"labels": {"pool": "md-0", "cluster.x-k8s.io/cluster-name": "c1"}},
                           "spec": {"clusterName": "c1",
                                    "bootstrap": {"dataSecretName": "tmpl-data"},
                                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                          "kind": "DockerMachine", "name": "tmpl"}}}}})
out({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
     "metadata": {"name": "md-0-unhealthy", "namespace": "default"},
     "spec": {"clusterName": "c1", "selector": {"matchLabels": {"pool": "md-0"}},
              "checks": {"nodeStartupTimeoutSeconds": 600,
                         "unhealthyNodeConditions": [
                             {"type": "Ready", "status": "False", "timeoutSeconds": 60},
                             {"type": "Ready", "status": "Unknown", "timeoutSeconds": 60}]}}})
for w in workers:
    m = machine(w, "md-0", True)
    m["status"] = {"nodeRef": {"name": w}}
    out(m)
print("workload:")
print("  c1:")
out(ready("cp-1", [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]), "    ")
for w in workers:
    out(ready(w), "    ")
# After the workers by name: rescheduled pods go to workers first.
for n in ["zz-bad", "zz-edge-1", "zz-edge-2"]:
    out(ready(n), "    ")
for i, w in enumerate(workers):
    out({"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"web-{i}", "namespace": "app",
                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                           "uid": "rs-web", "controller": True}]},
         "spec": {"nodeName": w, "containers": [{"name": "web", "image": "nginx"}]}}, "    ")

steps = []  # (at seconds, order, step)
for n in ["zz-edge-1", "zz-edge-2"]:
    steps.append((1, 0, {"cluster": "c1", "fault": {"kind": "node-flap", "node": n,
                                                     "for": f"{seconds - 2}s", "period": "45s"}}))
# The malformed Node: a label whose value is a number, changed on every update.
for k, at in enumerate(range(5, seconds, 5)):
    steps.append((at, 1, {"cluster": "c1", "patch": {"kind": "Node", "name": "zz-bad",
                                                      "merge": {"metadata": {"labels": {"soak/tick": k}}}}}))
# Remediation: one worker Node fails every 10 min; its replacement is the next to fail.
failing = list(workers)
for k, at in enumerate(range(300, seconds - 300, 600)):
    name = failing[k] if k < len(failing) else f"md-0-r{k - len(failing) + 1}"
    failing.append(f"md-0-r{k + 1}")
    steps.append((at, 2, {"cluster": "c1", "nodeCondition": {"node": name, "type": "Ready",
                                                              "status": "False", "reason": "KubeletNotReady"}}))
# Standalone Machines: one created every 2 min, each deleted 6 min later.
for k, at in enumerate(range(60, seconds - 600, 120)):
    name = f"churn-{k}"
    steps.append((at, 3, {"apply": machine(name, "churn", False)}))
    steps.append((at + 360, 4, {"delete": {"kind": "Machine", "name": name}}))
steps.sort(key=lambda s: (s[0], s[1]))
print("timeline:")
for at, _, step in steps:
    out(dict({"at": f"{at}s"}, **step))
