//! A scenario's starting world served over HTTP: one fake API server for the management
//! cluster and one per workload cluster, with the `<cluster>-kubeconfig` Secrets (key `value`)
//! in the management cluster pointing at the workload servers, as CAPI stores them.

use crate::apiserver::faults::ServedFaults;
use crate::apiserver::{ApiServer, ServerOptions, SharedCluster, kubeconfig_yaml};
use base64::Engine as _;
use engine::model::Scope;
use serde_json::{Value, json};
use sim::api::ClusterStore;
use sim::live::Live;
use sim::scenario::Scenario;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The servers of one scenario's world.
pub struct ServedWorld {
    pub management: ApiServer,
    /// By workload cluster name, as the scenario writes it.
    pub workloads: BTreeMap<String, ApiServer>,
    /// Each workload cluster's scope, by name.
    scopes: BTreeMap<String, Scope>,
}

/// The Secret CAPI keeps a workload cluster's kubeconfig in (`<cluster>-kubeconfig`, key
/// `value`, type `cluster.x-k8s.io/secret`).
pub fn kubeconfig_secret(namespace: &str, cluster: &str, kubeconfig: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
        "metadata": {"name": format!("{cluster}-kubeconfig"), "namespace": namespace,
                     "labels": {engine::model::CLUSTER_NAME_LABEL: cluster}},
        "data": {"value": base64::engine::general_purpose::STANDARD.encode(kubeconfig)},
    })
}

/// The scenario's starting stores (its manifests plus what the simulator's setup implies:
/// provider objects, namespaces), by scope, with each workload's cluster name.
pub fn starting_world(scenario: &Scenario) -> (ClusterStore, Vec<(String, Scope, ClusterStore)>) {
    let mut sim = sim::sim::Sim::new(
        scenario.clone(),
        scenario.seed,
        sim::feed::Feeder::new(None),
    );
    sim.setup();
    split_stores(std::mem::take(&mut sim.api.clusters), &sim.api.workloads)
}

/// The management store and each workload's (name, scope, store).
fn split_stores(
    mut stores: BTreeMap<Scope, ClusterStore>,
    workloads: &BTreeMap<String, Scope>,
) -> (ClusterStore, Vec<(String, Scope, ClusterStore)>) {
    let management = stores.remove(&Scope::Management).unwrap_or_default();
    let workloads = workloads
        .iter()
        .map(|(name, scope)| {
            let store = stores
                .remove(scope)
                .unwrap_or_else(|| ClusterStore::new(name));
            (name.clone(), scope.clone(), store)
        })
        .collect();
    (management, workloads)
}

/// A real cluster has a provider's CRDs installed before any object of theirs exists: serve the
/// kind a provider template stamps out (`XTemplate` -> `X`, same group and version), and the
/// template kinds MachineHealthChecks refer to, even while no such object is stored.
fn register_implied_kinds(cluster: &SharedCluster) {
    let kinds: Vec<(String, String)> = cluster.read(|state| {
        let mut kinds = Vec::new();
        for (_, obj) in state.store.iter() {
            let api_version = sim::api::json::api_version(obj);
            let kind = sim::api::json::kind(obj);
            if let Some(base) = kind.strip_suffix("Template")
                && api_version.contains(".cluster.x-k8s.io/")
            {
                kinds.push((api_version.to_string(), base.to_string()));
            }
            let template_ref = obj.pointer("/spec/remediation/templateRef");
            let ref_version = template_ref
                .and_then(|r| r.get("apiVersion"))
                .and_then(Value::as_str);
            let ref_kind = template_ref
                .and_then(|r| r.get("kind"))
                .and_then(Value::as_str);
            if let (Some(v), Some(k)) = (ref_version, ref_kind) {
                kinds.push((v.to_string(), k.to_string()));
                if let Some(base) = k.strip_suffix("Template") {
                    kinds.push((v.to_string(), base.to_string()));
                }
            }
        }
        kinds
    });
    for (api_version, kind) in kinds {
        cluster.register_kind(&api_version, &kind);
    }
}

/// A workload cluster's server records as `workload` (the identity in its kubeconfig Secret is
/// granted the same on every workload cluster) and plays the faults of its own cluster.
fn workload_options(options: &ServerOptions, scope: &Scope) -> ServerOptions {
    ServerOptions {
        record: options.record.as_ref().map(|r| r.for_cluster("workload")),
        faults: options.faults.as_ref().map(|f| f.for_scope(scope.clone())),
        ..options.clone()
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

impl ServedWorld {
    /// Serves the scenario's starting world, standing still (no world is played: tests drive
    /// it), on 127.0.0.1: management on `first_port`, the workload clusters on the following
    /// ports (all on free ports when `first_port` is 0).
    pub async fn start(
        scenario: &Scenario,
        first_port: u16,
        options: ServerOptions,
    ) -> std::io::Result<ServedWorld> {
        let (management, workloads) = starting_world(scenario);
        Self::serve(management, workloads, first_port, options).await
    }

    /// Serves a live world's stores (see [`crate::play`]), which it then plays; its servers
    /// play the faults of API calls and deliveries its scenario opens (unless `options`
    /// brings faults of its own).
    pub async fn start_live(
        live: &mut Live,
        first_port: u16,
        mut options: ServerOptions,
    ) -> std::io::Result<ServedWorld> {
        if options.faults.is_none() {
            let wire = std::sync::Arc::new(std::sync::Mutex::new(live.wire()));
            options.faults = Some(ServedFaults::new(wire));
        }
        let (management, workloads) = split_stores(live.take_stores(), live.workloads());
        Self::serve(management, workloads, first_port, options).await
    }

    /// How often each fault of API calls and deliveries fired so far, by kind (and, under
    /// `reordered-delivery`, the orders answers took).
    pub fn faults_fired(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.management
            .faults()
            .map(|f| f.lock().fired.clone())
            .unwrap_or_default()
    }

    async fn serve(
        mut management_store: ClusterStore,
        stores: Vec<(String, Scope, ClusterStore)>,
        first_port: u16,
        options: ServerOptions,
    ) -> std::io::Result<ServedWorld> {
        let mut workloads = BTreeMap::new();
        let mut scopes = BTreeMap::new();
        let mut secrets = Vec::new();
        for (i, (name, scope, store)) in stores.into_iter().enumerate() {
            let port = if first_port == 0 {
                0
            } else {
                first_port.saturating_add(1 + i as u16)
            };
            let cluster = SharedCluster::new(store);
            register_implied_kinds(&cluster);
            let server =
                ApiServer::start(cluster, addr(port), workload_options(&options, &scope)).await?;
            let namespace = match &scope {
                Scope::Workload(c) => c.namespace.to_string(),
                Scope::Management => "default".to_string(),
            };
            secrets.push(kubeconfig_secret(
                &namespace,
                &name,
                &kubeconfig_yaml(&name, &server.url()),
            ));
            scopes.insert(name.clone(), scope);
            workloads.insert(name, server);
        }
        let now = crate::clock::wall_now();
        for secret in secrets {
            if let Err(e) = management_store.apply(secret, now) {
                tracing::warn!("kubeconfig secret refused: {e:?}");
            }
        }
        let management_cluster = SharedCluster::new(management_store);
        register_implied_kinds(&management_cluster);
        let management = ApiServer::start(management_cluster, addr(first_port), options).await?;
        Ok(ServedWorld {
            management,
            workloads,
            scopes,
        })
    }

    /// Every served cluster by scope, management first (the order locks are taken in).
    pub fn clusters(&self) -> BTreeMap<Scope, SharedCluster> {
        let mut out = BTreeMap::new();
        out.insert(Scope::Management, self.management.cluster().clone());
        for (name, server) in &self.workloads {
            if let Some(scope) = self.scopes.get(name) {
                out.insert(scope.clone(), server.cluster().clone());
            }
        }
        out
    }

    /// Writes `management.kubeconfig` and `<cluster>.kubeconfig` into `dir`; returns
    /// `(cluster name, path)` with `management` first.
    pub fn write_kubeconfigs(&self, dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
        std::fs::create_dir_all(dir)?;
        let mut out = Vec::new();
        let all = std::iter::once(("management", &self.management))
            .chain(self.workloads.iter().map(|(n, s)| (n.as_str(), s)));
        for (name, server) in all {
            let path = dir.join(format!("{name}.kubeconfig"));
            std::fs::write(&path, server.kubeconfig(name))?;
            out.push((name.to_string(), path));
        }
        Ok(out)
    }

    /// Takes every served store out (the servers then serve empty clusters): the world as it
    /// ends, to be judged.
    pub fn take_stores(&self) -> BTreeMap<Scope, ClusterStore> {
        self.clusters()
            .into_iter()
            .map(|(scope, cluster)| {
                let store = std::mem::take(&mut *cluster.lock_store());
                (scope, store)
            })
            .collect()
    }

    pub async fn shutdown(self) {
        self.management.shutdown().await;
        for (_, server) in self.workloads {
            server.shutdown().await;
        }
    }
}
