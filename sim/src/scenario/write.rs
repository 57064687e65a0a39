//! Writing a scenario back to a file the loader reads (used by `sweep --shrink`). Manifests,
//! patches and steps are written as JSON flow collections, which are valid YAML.

use super::model::*;
use serde_json::{Map, Value, json};

fn obj_ref(r: &ObjRef, with_cluster: bool) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("kind".into(), json!(r.kind));
    m.insert("name".into(), json!(r.name));
    m.insert("namespace".into(), json!(r.namespace));
    if let Some(v) = &r.api_version {
        m.insert("apiVersion".into(), json!(v));
    }
    if with_cluster && let Some(c) = &r.cluster {
        m.insert("cluster".into(), json!(c));
    }
    m
}

fn step_json(step: &Step) -> Value {
    let mut m = Map::new();
    m.insert("at".into(), json!(step.at.to_string()));
    if let Some(c) = &step.cluster
        && !matches!(
            step.action,
            StepAction::Patch { .. } | StepAction::Delete(_)
        )
    {
        m.insert("cluster".into(), json!(c));
    }
    let (key, value) = match &step.action {
        StepAction::Apply(manifest) => ("apply", manifest.value.clone()),
        StepAction::Patch { r, merge } => {
            let mut p = obj_ref(r, true);
            p.insert("merge".into(), merge.clone());
            ("patch", Value::Object(p))
        }
        StepAction::Delete(r) => ("delete", Value::Object(obj_ref(r, true))),
        StepAction::NodeCondition {
            node,
            type_,
            status,
            reason,
            message,
        } => {
            let mut c = json!({"node": node, "type": type_, "status": status});
            if let Some(r) = reason {
                c["reason"] = json!(r);
            }
            if let Some(msg) = message {
                c["message"] = json!(msg);
            }
            ("nodeCondition", c)
        }
        StepAction::Kubelet { node, state } => {
            let state = match state {
                KubeletState::Stopped => "stopped",
                KubeletState::Running => "running",
            };
            ("kubelet", json!({"node": node, "state": state}))
        }
        StepAction::Fault(f) => {
            let mut c = Map::new();
            c.insert("kind".into(), json!(f.kind.as_str()));
            if let Some(r) = f.rate {
                c.insert("rate".into(), json!(r));
            }
            if let Some(d) = f.for_ {
                c.insert("for".into(), json!(d.to_string()));
            }
            for (k, v) in &f.extra {
                c.insert(k.clone(), v.clone());
            }
            ("fault", Value::Object(c))
        }
        StepAction::CapiRelease(release) => ("capiRelease", json!(release.0)),
    };
    m.insert(key.into(), value);
    Value::Object(m)
}

fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// The scenario as a file: expectations are left out (a shrunk scenario demonstrates an
/// invariant violation, which every run checks).
pub fn to_yaml(s: &Scenario) -> String {
    let w = &s.world;
    let mut out = String::new();
    out.push_str(&format!("name: {}\n", yaml_string(&s.name)));
    out.push_str(&format!("description: {}\n", yaml_string(&s.description)));
    out.push_str(&format!("seed: {}\n", s.seed));
    out.push_str(&format!("duration: {}\n", s.duration));
    out.push_str(&format!("mode: {}\n", s.mode));
    out.push_str("world:\n");
    out.push_str(&format!("  start: {}\n", w.start.to_rfc3339()));
    for (k, d) in [
        ("nodeMonitorGracePeriod", w.node_monitor_grace_period),
        ("podShutdown", w.pod_shutdown),
        ("volumeDetach", w.volume_detach),
        ("infraProvision", w.infra_provision),
        ("infraDelete", w.infra_delete),
        ("nodeJoin", w.node_join),
        ("podStartup", w.pod_startup),
    ] {
        out.push_str(&format!("  {k}: {d}\n"));
    }
    let sets = match w.machine_sets {
        MachineSetsMode::Replace => "replace",
        MachineSetsMode::None => "none",
    };
    out.push_str(&format!(
        "  machineSets: {sets}\n  reschedule: {}\n  capiManager: {}\n  capiRelease: {}\n",
        w.reschedule,
        w.capi_manager,
        yaml_string(&w.capi_release.0)
    ));
    out.push_str("management:\n");
    for m in &s.management {
        out.push_str(&format!("  - {}\n", m.value));
    }
    out.push_str("workload:\n");
    for (cluster, manifests) in &s.workload {
        if manifests.is_empty() {
            out.push_str(&format!("  {}: []\n", yaml_string(cluster)));
            continue;
        }
        out.push_str(&format!("  {}:\n", yaml_string(cluster)));
        for m in manifests {
            out.push_str(&format!("    - {}\n", m.value));
        }
    }
    if s.timeline.is_empty() {
        out.push_str("timeline: []\n");
    } else {
        out.push_str("timeline:\n");
        for step in &s.timeline {
            out.push_str(&format!("  - {}\n", step_json(step)));
        }
    }
    out
}
