//! Building the starting world from a scenario: its manifests, the namespaces its pods imply,
//! and the provider objects of its MachinePools.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, json};
use crate::defaults::{PROVIDER_FINALIZER, apply_defaults};
use crate::env::Env;
use crate::world::WorldState;
use engine::model::Scope;
use serde_json::{Value, json};

impl WorldState {
    pub(crate) fn create_initial(&mut self, env: &mut Env<'_>, scope: &Scope, mut obj: Value) {
        apply_defaults(&mut obj);
        let group = json::group_of(json::api_version(&obj)).to_string();
        if group.ends_with(".cluster.x-k8s.io") && group != "cluster.x-k8s.io" {
            json::object_at(&mut obj, &["metadata"])
                .entry("finalizers")
                .or_insert(json!([]));
            if let Some(list) = obj
                .pointer_mut("/metadata/finalizers")
                .and_then(Value::as_array_mut)
                && !list.iter().any(|f| f == PROVIDER_FINALIZER)
            {
                list.push(json!(PROVIDER_FINALIZER));
            }
        }
        let now = env.clock.now;
        let key = ObjKey::of(&obj);
        if let Err(e) = env.api.store_mut(scope).apply(obj, now) {
            let object = crate::api::describe(scope, &key);
            env.line("world", "Setup", object, format!("refused: {e:?}"));
        }
    }

    pub(crate) fn implied_namespaces(&mut self, env: &mut Env<'_>, scope: &Scope) {
        let namespaces: std::collections::BTreeSet<String> = env
            .api
            .store(scope)
            .map(|s| {
                s.list("", "Pod")
                    .map(|(k, _)| k.namespace.to_string())
                    .collect()
            })
            .unwrap_or_default();
        for ns in namespaces {
            let key = ObjKey::new("", "Namespace", "", &ns);
            if env.api.get(scope, &key).is_none() {
                let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
                                 "status": {"phase": "Active"}});
                let now = env.clock.now;
                let _ = env.api.store_mut(scope).create(obj, now);
            }
        }
    }

    /// A MachinePool's InfraMachinePool and BootstrapConfig, created by the fake providers when
    /// the scenario does not list them.
    pub(crate) fn ensure_pool_objects(&mut self, env: &mut Env<'_>, pool: &Value) {
        let ns = json::namespace(pool).to_string();
        let cluster = json::str_at(pool, "spec.clusterName")
            .unwrap_or_default()
            .to_string();
        for (path, infra) in [
            ("/spec/template/spec/infrastructureRef", true),
            ("/spec/template/spec/bootstrap/configRef", false),
        ] {
            let Some(r) = pool.at_pointer(path) else {
                continue;
            };
            let Some((key, api_version)) = json::ref_target(r, &ns) else {
                continue;
            };
            if env.api.get(&Scope::Management, &key).is_some() {
                continue;
            }
            let (kind, name) = (key.kind.clone(), key.name.clone());
            let status = if infra {
                json!({})
            } else {
                json!({"ready": true, "dataSecretName": format!("{name}-bootstrap"),
                       "initialization": {"dataSecretCreated": true}})
            };
            let obj = json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "namespace": ns, "finalizers": [PROVIDER_FINALIZER],
                             "labels": {engine::model::CLUSTER_NAME_LABEL: cluster}},
                "spec": {}, "status": status
            });
            let now = env.clock.now;
            if let Ok(w) = env.api.store_mut(&Scope::Management).create(obj, now) {
                if infra {
                    self.managed_pools.insert(key.clone(), ObjKey::of(pool));
                }
                env.changed(&Scope::Management, w);
            }
        }
    }
}
