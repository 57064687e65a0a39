//! Timeline steps: the scenario playing users, providers and hook controllers.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, json};
use crate::env::Env;
use crate::scenario::{KubeletState, ObjRef, Step, StepAction};
use crate::world::WorldState;
use engine::model::Scope;
use serde_json::Value;

/// The cluster a step acts on.
pub(crate) fn step_scope(env: &Env<'_>, cluster: Option<&str>) -> Scope {
    cluster.map_or(Scope::Management, |c| env.api.workload_scope(c))
}

fn resolve(env: &Env<'_>, scope: &Scope, r: &ObjRef) -> Option<ObjKey> {
    let (key, _) = env.api.find(scope, &r.kind, &r.namespace, &r.name)?;
    Some(key)
}

impl WorldState {
    /// Plays a timeline step that acts on the world (a fault step is the driver's).
    pub(crate) fn play(&mut self, env: &mut Env<'_>, step: &Step) {
        let scope = step_scope(env, step.cluster.as_deref());
        match &step.action {
            StepAction::Apply(manifest) => {
                let mut obj = manifest.value.clone();
                crate::defaults::apply_defaults(&mut obj);
                let key = ObjKey::of(&obj);
                let existed = env.api.get(&scope, &key).is_some();
                let object = crate::api::describe(&scope, &key);
                let now = env.clock.now;
                match env.api.store_mut(&scope).apply(obj.clone(), now) {
                    Ok(w) => {
                        env.line(
                            "scenario",
                            "Apply",
                            object,
                            if existed { "replaced" } else { "created" }.into(),
                        );
                        env.changed(&scope, w);
                        if !existed && scope == Scope::Management {
                            self.provision_new(env, &key, &obj);
                        }
                    }
                    Err(e) => env.line("scenario", "Apply", object, format!("refused: {e:?}")),
                }
            }
            StepAction::Patch { r, merge } => {
                let Some(key) = resolve(env, &scope, r) else {
                    let object = format!("{} {}/{}", r.kind, r.namespace, r.name);
                    env.line("scenario", "Patch", object, "no such object".into());
                    return;
                };
                let object = crate::api::describe(&scope, &key);
                match env.api.store_mut(&scope).patch(&key, merge, Part::Whole) {
                    Ok(w) => {
                        env.line("scenario", "Patch", object, compact(merge));
                        env.changed(&scope, w);
                    }
                    Err(e) => env.line("scenario", "Patch", object, format!("refused: {e:?}")),
                }
            }
            StepAction::Delete(r) => {
                let Some(key) = resolve(env, &scope, r) else {
                    let object = format!("{} {}/{}", r.kind, r.namespace, r.name);
                    env.line("scenario", "Delete", object, "no such object".into());
                    return;
                };
                let object = crate::api::describe(&scope, &key);
                let now = env.clock.now;
                let result = if key.kind == "Pod" {
                    let grace = env
                        .api
                        .get(&scope, &key)
                        .and_then(|p| p.at_pointer("/spec/terminationGracePeriodSeconds"))
                        .and_then(Value::as_i64);
                    env.api.store_mut(&scope).mark_deleting(&key, now, grace)
                } else {
                    env.api.store_mut(&scope).delete(&key, now)
                };
                match result {
                    Ok(w) => {
                        let detail = match &w.object {
                            None => "deleted".to_string(),
                            Some(_) if key.kind == "Pod" => format!(
                                "terminating (grace period {}s)",
                                grace_of(w.object.as_deref())
                            ),
                            Some(o) => format!(
                                "deletionTimestamp set; finalizers {:?} hold it",
                                json::finalizers(o)
                            ),
                        };
                        env.line("scenario", "Delete", object, detail);
                        env.changed(&scope, w);
                    }
                    Err(e) => env.line("scenario", "Delete", object, format!("refused: {e:?}")),
                }
            }
            StepAction::NodeCondition {
                node,
                type_,
                status,
                reason,
                message,
            } => {
                env.set_node_condition(
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
                env.line(
                    "scenario",
                    "Kubelet",
                    object,
                    if running { "running" } else { "stopped" }.into(),
                );
                self.kubelet(env, &scope, node, running);
            }
            StepAction::Fault(_) => {}
            StepAction::CapiRelease(release) => self.capi.upgrade(env, release),
        }
    }

    /// A Machine or MachinePool created during the run is provisioned by the fake world.
    fn provision_new(&mut self, env: &mut Env<'_>, key: &ObjKey, obj: &Value) {
        match (key.group.as_str(), key.kind.as_str()) {
            ("cluster.x-k8s.io", "Machine") if json::str_at(obj, "spec.providerID").is_none() => {
                self.start_provisioning(env, key, obj);
            }
            ("cluster.x-k8s.io", "MachinePool") => {
                self.ensure_pool_objects(env, obj);
                self.follow_pool(env, key, std::sync::Arc::new(obj.clone()));
            }
            _ => {}
        }
    }
}

fn grace_of(pod: Option<&Value>) -> i64 {
    pod.and_then(|p| p.at_pointer("/metadata/deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
