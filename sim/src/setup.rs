//! Building the starting world from a scenario.

use crate::api::{ObjKey, json};
use crate::defaults::{PROVIDER_FINALIZER, apply_defaults};
use crate::event::Event;
use crate::sim::Sim;
use engine::model::{ClusterName, Scope};
use engine::time::Duration;
use serde_json::{Value, json};

impl Sim {
    /// Creates every manifest and the objects the contract implies, schedules the timeline and
    /// the expectation checkpoints, and syncs the engine with one relist per cluster.
    pub fn setup(&mut self) {
        // The manifests are needed only here: take them rather than copy a large fleet.
        let management = std::mem::take(&mut self.scenario.management);
        let workload = std::mem::take(&mut self.scenario.workload);
        for name in workload.keys() {
            let namespace = management
                .iter()
                .find(|m| m.kind() == "Cluster" && m.name() == name)
                .and_then(|m| m.namespace())
                .unwrap_or("default")
                .to_string();
            self.api.workloads.insert(
                name.clone(),
                Scope::Workload(ClusterName::new(namespace, name)),
            );
        }
        self.api.store_mut(&Scope::Management);
        for manifest in management {
            self.create_initial(&Scope::Management, manifest.value);
        }
        let (world, mut env) = self.world_env();
        world.capi_start(&mut env);
        for (cluster, manifests) in workload {
            let scope = self.api.workload_scope(&cluster);
            self.api.store_mut(&scope);
            for manifest in manifests {
                self.create_initial(&scope, manifest.value);
            }
            self.implied_namespaces(&scope);
        }
        let machines: Vec<Value> = self
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list("cluster.x-k8s.io", "Machine")
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        for machine in machines {
            let (world, mut env) = self.world_env();
            world.ensure_provider_objects(&mut env, &machine, true);
        }
        let pools: Vec<(ObjKey, Value)> = self
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list("cluster.x-k8s.io", "MachinePool")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (key, pool) in pools {
            self.ensure_pool_objects(&pool);
            let (world, mut env) = self.world_env();
            world.follow_pool(&mut env, &key, pool);
        }
        let machines: Vec<(ObjKey, Value)> = self
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list("cluster.x-k8s.io", "Machine")
                    .chain(s.list("cluster.x-k8s.io", "MachineHealthCheck"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (key, object) in machines {
            self.env().index(&crate::api::Written {
                key,
                object: Some(object),
                removed: None,
            });
        }
        // The setup writes are the initial state, not watch events: the relists carry them.
        self.clock.work.clear();
        let steps: Vec<Duration> = self.scenario.timeline.iter().map(|s| s.at).collect();
        for (i, at) in steps.into_iter().enumerate() {
            self.schedule(self.clock.start + at, Event::Step(i));
        }
        for at in crate::expect::checkpoints(&self.scenario) {
            self.schedule(self.clock.start + at, Event::Checkpoint);
        }
        if self.process.external.is_none() {
            self.pump();
        }
        let start_line_at = self.timeline.lines.len();
        self.line(
            "world",
            "Start",
            String::new(),
            format!(
                "{} objects in {} clusters; {}",
                self.api.clusters.values().map(|c| c.len()).sum::<usize>(),
                self.api.clusters.len(),
                if self.process.external.is_none() {
                    "engine synced"
                } else {
                    "served over HTTP"
                }
            ),
        );
        debug_assert_eq!(self.timeline.lines.len(), start_line_at + 1);
        // What the controllers do with the starting world happens at time zero.
        self.settle();
        self.process.feeder.end_of_instant(self.lp.core());
    }

    fn create_initial(&mut self, scope: &Scope, mut obj: Value) {
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
        let now = self.clock.now;
        let key = ObjKey::of(&obj);
        if let Err(e) = self.api.store_mut(scope).apply(obj, now) {
            let object = crate::api::describe(scope, &key);
            self.line("world", "Setup", object, format!("refused: {e:?}"));
        }
    }

    fn implied_namespaces(&mut self, scope: &Scope) {
        let namespaces: std::collections::BTreeSet<String> = self
            .api
            .store(scope)
            .map(|s| {
                s.list("", "Pod")
                    .map(|(k, _)| k.namespace.clone())
                    .collect()
            })
            .unwrap_or_default();
        for ns in namespaces {
            let key = ObjKey::new("", "Namespace", "", &ns);
            if self.api.get(scope, &key).is_none() {
                let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
                                 "status": {"phase": "Active"}});
                let now = self.clock.now;
                let _ = self.api.store_mut(scope).create(obj, now);
            }
        }
    }

    /// A MachinePool's InfraMachinePool and BootstrapConfig, created by the fake providers when
    /// the scenario does not list them.
    pub(crate) fn ensure_pool_objects(&mut self, pool: &Value) {
        let ns = json::namespace(pool).to_string();
        let cluster = json::str_at(pool, "spec.clusterName")
            .unwrap_or_default()
            .to_string();
        for (path, infra) in [
            ("/spec/template/spec/infrastructureRef", true),
            ("/spec/template/spec/bootstrap/configRef", false),
        ] {
            let Some(r) = pool.pointer(path) else {
                continue;
            };
            let Some((key, api_version)) = json::ref_target(r, &ns) else {
                continue;
            };
            if self.api.get(&Scope::Management, &key).is_some() {
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
            let now = self.clock.now;
            if let Ok(w) = self.api.store_mut(&Scope::Management).create(obj, now) {
                if infra {
                    self.world
                        .managed_pools
                        .insert(key.clone(), ObjKey::of(pool));
                }
                self.changed(&Scope::Management, w);
            }
        }
    }
}
