//! Timeline steps: the scenario playing users, providers and hook controllers.

use crate::api::{ObjKey, Part, json};
use crate::scenario::{KubeletState, ObjRef, StepAction};
use crate::sim::Sim;
use engine::model::Scope;
use serde_json::Value;

impl Sim {
    fn step_scope(&self, cluster: Option<&str>) -> Scope {
        cluster.map_or(Scope::Management, |c| self.api.workload_scope(c))
    }

    fn resolve(&self, scope: &Scope, r: &ObjRef) -> Option<ObjKey> {
        let (key, _) = self.api.find(scope, &r.kind, &r.namespace, &r.name)?;
        Some(key)
    }

    pub(crate) fn run_step(&mut self, index: usize) {
        let step = self.scenario.timeline[index].clone();
        let scope = self.step_scope(step.cluster.as_deref());
        match &step.action {
            StepAction::Apply(manifest) => {
                let mut obj = manifest.value.clone();
                crate::defaults::apply_defaults(&mut obj);
                let key = ObjKey::of(&obj);
                let existed = self.api.get(&scope, &key).is_some();
                let object = crate::api::describe(&scope, &key);
                let now = self.clock.now;
                match self.api.store_mut(&scope).apply(obj.clone(), now) {
                    Ok(w) => {
                        self.line(
                            "scenario",
                            "Apply",
                            object,
                            if existed { "replaced" } else { "created" }.into(),
                        );
                        self.changed(&scope, w);
                        if !existed && scope == Scope::Management {
                            self.provision_new(&key, &obj);
                        }
                    }
                    Err(e) => self.line("scenario", "Apply", object, format!("refused: {e:?}")),
                }
            }
            StepAction::Patch { r, merge } => {
                let Some(key) = self.resolve(&scope, r) else {
                    let object = format!("{} {}/{}", r.kind, r.namespace, r.name);
                    self.line("scenario", "Patch", object, "no such object".into());
                    return;
                };
                let object = crate::api::describe(&scope, &key);
                match self.api.store_mut(&scope).patch(&key, merge, Part::Whole) {
                    Ok(w) => {
                        self.line("scenario", "Patch", object, compact(merge));
                        self.changed(&scope, w);
                    }
                    Err(e) => self.line("scenario", "Patch", object, format!("refused: {e:?}")),
                }
            }
            StepAction::Delete(r) => {
                let Some(key) = self.resolve(&scope, r) else {
                    let object = format!("{} {}/{}", r.kind, r.namespace, r.name);
                    self.line("scenario", "Delete", object, "no such object".into());
                    return;
                };
                let object = crate::api::describe(&scope, &key);
                let now = self.clock.now;
                let result = if key.kind == "Pod" {
                    let grace = self
                        .api
                        .get(&scope, &key)
                        .and_then(|p| p.pointer("/spec/terminationGracePeriodSeconds"))
                        .and_then(Value::as_i64);
                    self.api.store_mut(&scope).mark_deleting(&key, now, grace)
                } else {
                    self.api.store_mut(&scope).delete(&key, now)
                };
                match result {
                    Ok(w) => {
                        let detail = match &w.object {
                            None => "deleted".to_string(),
                            Some(_) if key.kind == "Pod" => format!(
                                "terminating (grace period {}s)",
                                grace_of(w.object.as_ref())
                            ),
                            Some(o) => format!(
                                "deletionTimestamp set; finalizers {:?} hold it",
                                json::finalizers(o)
                            ),
                        };
                        self.line("scenario", "Delete", object, detail);
                        self.changed(&scope, w);
                    }
                    Err(e) => self.line("scenario", "Delete", object, format!("refused: {e:?}")),
                }
            }
            StepAction::NodeCondition {
                node,
                type_,
                status,
                reason,
                message,
            } => {
                crate::world::set_node_condition(
                    &mut self.env(),
                    &scope,
                    node,
                    type_,
                    status,
                    reason.as_deref(),
                    message.as_deref(),
                );
            }
            StepAction::Kubelet { node, state } => {
                let running = *state == KubeletState::Running;
                let object = crate::api::describe(&scope, &ObjKey::new("", "Node", "", node));
                self.line(
                    "scenario",
                    "Kubelet",
                    object,
                    if running { "running" } else { "stopped" }.into(),
                );
                let (world, mut env) = self.world_env();
                world.kubelet(&mut env, &scope, node, running);
            }
            StepAction::Fault(spec) => {
                let target = step.cluster.clone().unwrap_or_else(|| "management".into());
                let mut detail = format!("{} on {target}", spec.kind.as_str());
                if let Some(r) = spec.rate {
                    detail.push_str(&format!(", rate {r}"));
                }
                if let Some(f) = spec.for_ {
                    detail.push_str(&format!(", for {f}"));
                }
                self.line("scenario", "Fault", String::new(), detail);
                self.start_fault(spec, step.cluster.as_deref());
            }
        }
    }

    /// A Machine or MachinePool created during the run is provisioned by the fake world.
    fn provision_new(&mut self, key: &ObjKey, obj: &Value) {
        match (key.group.as_str(), key.kind.as_str()) {
            ("cluster.x-k8s.io", "Machine") if json::str_at(obj, "spec.providerID").is_none() => {
                let (world, mut env) = self.world_env();
                world.start_provisioning(&mut env, key, obj);
            }
            ("cluster.x-k8s.io", "MachinePool") => {
                self.ensure_pool_objects(obj);
                let (world, mut env) = self.world_env();
                world.follow_pool(&mut env, key, obj.clone());
            }
            _ => {}
        }
    }
}

fn grace_of(pod: Option<&Value>) -> i64 {
    pod.and_then(|p| p.pointer("/metadata/deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
