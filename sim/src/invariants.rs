//! Safety rules checked on every run, whatever the scenario expects.

use crate::api::{ObjKey, json};
use crate::sim::Sim;
use engine::model::{
    EXCLUDE_DRAIN_ANNOTATION, Kind, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, Scope,
};
use engine::{Action, Command};
use serde_json::Value;

#[derive(Clone, Debug, Default)]
pub struct Checker {
    pub violations: Vec<String>,
    /// How many checks were made (so a report can show they ran).
    pub checks: u64,
}

impl Checker {
    pub fn violate(&mut self, message: String) {
        self.violations.push(message);
    }
}

fn has_prefix_annotation(obj: &Value, prefix: &str) -> Vec<String> {
    json::annotations(obj)
        .into_keys()
        .filter(|k| k.starts_with(prefix))
        .collect()
}

impl Sim {
    /// Checks a command against the world as it is when the command is issued.
    pub(crate) fn invariants_before(&mut self, command: &Command) {
        self.invariants.checks += 1;
        let owner = &command.owner;
        if owner.kind != Kind::Machine {
            return;
        }
        let machine_key = ObjKey::new("cluster.x-k8s.io", "Machine", &owner.namespace, &owner.name);
        let Some(machine) = self.get(&Scope::Management, &machine_key).cloned() else {
            return;
        };
        let mut broken = Vec::new();
        match &command.action {
            Action::Cordon { .. } | Action::Evict { .. } => {
                let hooks = has_prefix_annotation(&machine, PRE_DRAIN_HOOK_PREFIX);
                if !hooks.is_empty() {
                    broken.push(format!(
                        "hook bypassed: {} on {} while pre-drain hooks {hooks:?} are present",
                        command.action.name(),
                        command.action.target().key
                    ));
                }
            }
            Action::DeleteInfrastructure { .. } => {
                let hooks = has_prefix_annotation(&machine, PRE_TERMINATE_HOOK_PREFIX);
                if !hooks.is_empty() {
                    broken.push(format!(
                        "hook bypassed: infrastructure of {owner} deleted while pre-terminate hooks {hooks:?} are present"
                    ));
                }
                if let Some(pods) = self.undrained_pods(&machine) {
                    broken.push(format!(
                        "infrastructure of {owner} deleted before its Node was drained: {} still running",
                        pods.join(", ")
                    ));
                }
            }
            _ => {}
        }
        for b in broken {
            self.line("invariant", "Violation", owner.to_string(), b.clone());
            self.invariants.violate(b);
        }
    }

    /// Pods a drain would still have to evict from the Machine's Node, when the drain applies
    /// (not excluded, no timeout configured, an active control-plane Machine exists).
    fn undrained_pods(&self, machine: &Value) -> Option<Vec<String>> {
        if json::annotations(machine).contains_key(EXCLUDE_DRAIN_ANNOTATION)
            || machine.pointer("/spec/nodeDrainTimeout").is_some()
            || machine
                .pointer("/spec/deletion/nodeDrainTimeoutSeconds")
                .and_then(Value::as_i64)
                .is_some_and(|s| s > 0)
        {
            return None;
        }
        let cluster = json::str_at(machine, "spec.clusterName")?;
        let active_cp = self
            .store(&Scope::Management)?
            .list("cluster.x-k8s.io", "Machine")
            .any(|(_, m)| {
                json::str_at(m, "spec.clusterName") == Some(cluster)
                    && json::labels(m).contains_key(engine::model::CONTROL_PLANE_LABEL)
                    && !json::is_deleting(m)
            });
        if !active_cp {
            return None;
        }
        let node = json::str_at(machine, "status.nodeRef.name")?;
        let scope = self.workload_scope(cluster);
        let pods: Vec<String> = self
            .store(&scope)?
            .list("", "Pod")
            .filter(|(_, p)| json::str_at(p, "spec.nodeName") == Some(node))
            .filter(|(_, p)| !json::is_deleting(p))
            .filter(|(_, p)| {
                !matches!(
                    json::str_at(p, "status.phase"),
                    Some("Succeeded" | "Failed")
                )
            })
            .filter(|(_, p)| !json::annotations(p).contains_key("kubernetes.io/config.mirror"))
            .filter(|(_, p)| {
                json::labels(p)
                    .get(engine::model::DRAIN_LABEL)
                    .is_none_or(|v| !v.eq_ignore_ascii_case("skip"))
            })
            .filter(|(_, p)| {
                !p.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|o| {
                        o.iter()
                            .any(|o| o.get("kind").and_then(Value::as_str) == Some("DaemonSet"))
                    })
            })
            .map(|(k, _)| format!("{}/{}", k.namespace, k.name))
            .collect();
        (!pods.is_empty()).then_some(pods)
    }
}
