//! The fake pool provider: an InfraMachinePool that follows its MachinePool's `spec.replicas`.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, json};
use crate::env::Env;
use crate::event::Event;
use crate::world::WorldState;
use engine::model::Scope;
use serde_json::{Value, json};

impl WorldState {
    /// The InfraMachinePool a MachinePool references, when the fake provider plays it.
    fn managed_infra_of(&self, pool: &Value) -> Option<ObjKey> {
        let r = pool.at_pointer("/spec/template/spec/infrastructureRef")?;
        let (key, _) = json::ref_target(r, json::namespace(pool))?;
        self.managed_pools.contains_key(&key).then_some(key)
    }

    /// Called on every MachinePool write: schedule a resize when `spec.replicas` changed.
    pub(crate) fn follow_pool(
        &mut self,
        env: &mut Env<'_>,
        pool_key: &ObjKey,
        pool: std::sync::Arc<Value>,
    ) {
        if json::is_deleting(&pool) {
            return;
        }
        let Some(infra) = self.managed_infra_of(&pool) else {
            return;
        };
        let want = pool
            .at_pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let have = env
            .api
            .get(&Scope::Management, &infra)
            .and_then(|i| i.at_pointer("/status/replicas"))
            .and_then(Value::as_i64);
        let pending = self.pool_targets.get(pool_key).copied();
        if have == Some(want) && pending.is_none() || pending == Some(want) {
            return;
        }
        self.pool_targets.insert(pool_key.clone(), want);
        env.schedule_in(
            self.knobs.infra_provision,
            Event::PoolProvisioned {
                pool: pool_key.clone(),
            },
        );
    }

    pub(crate) fn pool_provisioned(&mut self, env: &mut Env<'_>, pool_key: &ObjKey) {
        let Some(want) = self.pool_targets.remove(pool_key) else {
            return;
        };
        let Some(pool) = env.api.get(&Scope::Management, pool_key).cloned() else {
            return;
        };
        let Some(infra) = self.managed_infra_of(&pool) else {
            return;
        };
        let step = Event::PoolProvisioned {
            pool: pool_key.clone(),
        };
        let Some(cluster) = self.cluster_or_retry(env, &pool, step) else {
            self.pool_targets.insert(pool_key.clone(), want);
            return;
        };
        let have = env
            .api
            .get(&Scope::Management, &infra)
            .and_then(|i| i.at_pointer("/status/replicas"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let ids: Vec<String> = (0..want)
            .map(|i| format!("sim://{cluster}/{}-{i}", pool_key.name))
            .collect();
        if let Ok(w) = env.api.store_mut(&Scope::Management).patch(
            &infra,
            &json!({"spec": {"providerIDList": ids},
                    "status": {"replicas": want, "ready": true, "initialization": {"provisioned": true}}}),
            Part::Whole,
        ) {
            env.line("world", "PoolProvisioned", infra.to_string(), format!("{want} instances (was {have})"));
            env.changed(&Scope::Management, w);
        }
        for index in have..want {
            env.schedule_in(
                self.knobs.node_join,
                Event::PoolNodeJoin {
                    pool: pool_key.clone(),
                    index: index as u32,
                },
            );
        }
    }

    pub(crate) fn pool_node_join(&mut self, env: &mut Env<'_>, pool_key: &ObjKey, index: u32) {
        let Some(pool) = env.api.get(&Scope::Management, pool_key).cloned() else {
            return;
        };
        let Some(infra) = self.managed_infra_of(&pool) else {
            return;
        };
        let replicas = env
            .api
            .get(&Scope::Management, &infra)
            .and_then(|i| i.at_pointer("/status/replicas"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if i64::from(index) >= replicas || json::is_deleting(&pool) {
            return;
        }
        let step = Event::PoolNodeJoin {
            pool: pool_key.clone(),
            index,
        };
        let Some(cluster) = self.cluster_or_retry(env, &pool, step) else {
            return;
        };
        let scope = env.api.workload_scope(&cluster);
        let name = format!("{}-{index}", pool_key.name);
        let mut node =
            crate::world::ready_node(&name, &format!("sim://{cluster}/{name}"), env.clock.now);
        node["spec"]["taints"] =
            json!([{"key": engine::model::UNINITIALIZED_TAINT, "effect": "NoSchedule"}]);
        node["status"]["nodeInfo"] = json!({"kubeletVersion": "v1.31.0"});
        let why = format!("instance {index} of MachinePool {}", pool_key.name);
        self.node_joins(env, &scope, node, why);
    }
}
