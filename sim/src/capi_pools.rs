//! The model of CAPI's MachinePool controller (`capiManager: true`), as upstream behaves
//! (`core/reconcilers/machinepool/`, `engine/docs/capi.md` Part 2 §3), for a MachinePool that
//! is not paused (its annotation, or its Cluster's `spec.paused`):
//!
//! | step | upstream |
//! |---|---|
//! | its finalizer first | §3.1 |
//! | bootstrap: the config's `status.dataSecretName` copied to the template once the config says the secret exists (`initialization.dataSecretCreated`, or `ready` of the v1beta1 contract); a user-provided `dataSecretName` as is | §3.2 |
//! | infrastructure: provisioned by `status.ready` only; `spec.providerIDList` and `status.replicas` copied (a changed list resets the v1beta1 counters) | §3.3 |
//! | nodeRefs: each listed providerID's Node, in list order, ready and available counted; retired Nodes deleted; the Nodes annotated and untainted | §3.4 |
//! | phase rules 1–7, sticky | §3.5 |
//! | the replica counters without MachinePool Machines | §3.6 |
//! | deletion: the bootstrap config and the infrastructure deleted, then retired Nodes, then the finalizer | §3.8 |
//!
//! Not modelled: MachinePool Machines (§3.7), owner references, conditions, `versions`, events.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, json};
use crate::env::Env;
use engine::model::{MACHINE_POOL_FINALIZER, Scope, UNINITIALIZED_TAINT};
use engine::time::Duration;
use serde_json::{Map, Value, json};

/// `RequeueAfter` while the replicas are not all ready (§3.4's completion check).
const WAITING_FOR_REPLICAS: Duration = Duration::from_secs(30);
/// How soon a failed step (a referenced object missing) is tried again: controller-runtime's
/// backoff, played as a fixed step.
const ERROR_RETRY: Duration = Duration::from_secs(10);

/// Every MachinePool of the management cluster.
pub(crate) fn pools(env: &Env<'_>) -> Vec<ObjKey> {
    env.api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "MachinePool")
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The MachinePools of the workload cluster `scope` (a Node's change concerns them).
pub(crate) fn pools_of(env: &Env<'_>, scope: &Scope) -> Vec<ObjKey> {
    env.api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "MachinePool")
                .filter(|(_, p)| {
                    json::str_at(p, "spec.clusterName")
                        .is_some_and(|c| env.api.workload_scope(c) == *scope)
                })
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// One reconcile; when to reconcile again, if upstream requeues.
pub(crate) fn reconcile(env: &mut Env<'_>, actor: &str, key: &ObjKey) -> Option<Duration> {
    let pool = env.api.get(&Scope::Management, key)?.clone();
    let has_finalizer = json::finalizers(&pool)
        .iter()
        .any(|f| f == MACHINE_POOL_FINALIZER);
    if !json::is_deleting(&pool) && !has_finalizer {
        let mut finalizers = json::finalizers(&pool);
        finalizers.push(MACHINE_POOL_FINALIZER.to_string());
        write_finalizers(env, actor, key, finalizers);
        return Some(Duration::ZERO);
    }
    if crate::capi_paused::ensure(env, actor, key, &pool) {
        return None;
    }
    let cluster = json::str_at(&pool, "spec.clusterName")?.to_string();
    let scope = env.api.workload_scope(&cluster);
    if json::is_deleting(&pool) {
        if has_finalizer {
            delete(env, actor, key, &pool, &scope);
        }
        return None;
    }
    let v1beta1 = json::api_version(&pool).ends_with("/v1beta1");
    let mut status = Status::read(&pool, v1beta1);
    let mut spec = Map::new();
    // A phase that fails skips the phases after it (upstream collects the error and goes on
    // only while there is none); status and phase are computed either way.
    let mut requeue = bootstrap(env, &pool, &mut status, &mut spec);
    let infra = if requeue.is_none() {
        infrastructure(env, &pool, &mut status, &mut spec)
    } else {
        None
    };
    if let Some(infra) = infra {
        let machine_kind = json::str_at(&infra, "status.infrastructureMachineKind")
            .filter(|k| !k.is_empty())
            .map(str::to_string);
        if let Some(kind) = &machine_kind {
            pool_machines(env, actor, &pool, &infra, kind, &scope);
        }
        let ids = provider_ids(&pool, spec.get("providerIDList"));
        requeue = node_refs(env, actor, &pool, &ids, &scope, &mut status);
        // §3.6: only with the InfraMachinePool loaded.
        if machine_kind.is_some() {
            let machines = machines_of(env, &pool);
            let count =
                |type_: &str| machines.iter().filter(|m| condition_true(m, type_)).count() as i64;
            status.ready = Some(count("Ready"));
            status.available = Some(count("Available"));
            status.up_to_date = Some(count("UpToDate"));
        } else {
            status.ready = status.replicas;
            status.available = status.replicas;
            status.up_to_date = pool.at_pointer("/spec/replicas").and_then(Value::as_i64);
        }
    }
    status.phase = phase(&pool, &status);
    if !spec.is_empty() {
        write(
            env,
            actor,
            key,
            json!({"spec": Value::Object(spec)}),
            Part::Main,
        );
    }
    let current = Status::read(&pool, v1beta1);
    if status != current {
        write(env, actor, key, status.patch(v1beta1), Part::Status);
    }
    requeue
}

/// What the model writes of a MachinePool's status, in the v1beta2 sense.
#[derive(Clone, Debug, Default, PartialEq)]
struct Status {
    replicas: Option<i64>,
    legacy_ready: Option<i64>,
    legacy_available: Option<i64>,
    legacy_unavailable: Option<i64>,
    ready: Option<i64>,
    available: Option<i64>,
    up_to_date: Option<i64>,
    node_refs: Vec<Value>,
    phase: Option<String>,
    bootstrap_data_secret_created: bool,
    infrastructure_provisioned: bool,
}

impl Status {
    fn read(pool: &Value, v1beta1: bool) -> Status {
        let int = |path: &str| json::get_path(pool, path).and_then(Value::as_i64);
        let flag = |path: &str| {
            json::get_path(pool, path)
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let (legacy, new) = if v1beta1 {
            ("status", "status.v1beta2")
        } else {
            ("status.deprecated.v1beta1", "status")
        };
        Status {
            replicas: int("status.replicas"),
            legacy_ready: int(&format!("{legacy}.readyReplicas")),
            legacy_available: int(&format!("{legacy}.availableReplicas")),
            legacy_unavailable: int(&format!("{legacy}.unavailableReplicas")),
            ready: int(&format!("{new}.readyReplicas")),
            available: int(&format!("{new}.availableReplicas")),
            up_to_date: int(&format!("{new}.upToDateReplicas")),
            node_refs: json::get_path(pool, "status.nodeRefs")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            phase: json::str_at(pool, "status.phase").map(str::to_string),
            bootstrap_data_secret_created: if v1beta1 {
                flag("status.bootstrapReady")
            } else {
                flag("status.initialization.bootstrapDataSecretCreated")
            },
            infrastructure_provisioned: if v1beta1 {
                flag("status.infrastructureReady")
            } else {
                flag("status.initialization.infrastructureProvisioned")
            },
        }
    }

    /// The whole status as a merge patch, in the stored version's layout.
    fn patch(&self, v1beta1: bool) -> Value {
        let counters = |ready, available, unavailable: Option<i64>| {
            let mut m = json!({"readyReplicas": ready, "availableReplicas": available});
            if let Some(u) = unavailable {
                m["unavailableReplicas"] = json!(u);
            }
            m
        };
        let legacy = counters(
            self.legacy_ready,
            self.legacy_available,
            self.legacy_unavailable,
        );
        let mut new = counters(self.ready, self.available, None);
        new["upToDateReplicas"] = json!(self.up_to_date);
        let mut status = json!({
            "replicas": self.replicas,
            "nodeRefs": self.node_refs,
            "phase": self.phase,
        });
        if v1beta1 {
            json::merge_patch(&mut status, &legacy);
            status["v1beta2"] = new;
            status["bootstrapReady"] = json!(self.bootstrap_data_secret_created);
            status["infrastructureReady"] = json!(self.infrastructure_provisioned);
        } else {
            json::merge_patch(&mut status, &new);
            status["deprecated"] = json!({"v1beta1": legacy});
            status["initialization"] = json!({
                "bootstrapDataSecretCreated": self.bootstrap_data_secret_created,
                "infrastructureProvisioned": self.infrastructure_provisioned,
            });
        }
        json!({ "status": status })
    }
}

fn write(env: &mut Env<'_>, actor: &str, key: &ObjKey, patch: Value, part: Part) {
    if let Ok(w) = env
        .api
        .store_mut(&Scope::Management)
        .patch(key, &patch, part)
    {
        env.line(actor, "PatchMachinePool", key.to_string(), String::new());
        env.changed(&Scope::Management, w);
    }
}

fn write_finalizers(env: &mut Env<'_>, actor: &str, key: &ObjKey, finalizers: Vec<String>) {
    let patch = json!({"metadata": {"finalizers": finalizers}});
    write(env, actor, key, patch, Part::Main);
}

/// The object a template reference of `pool` names, with its key.
fn referenced(env: &Env<'_>, pool: &Value, path: &str) -> Option<(ObjKey, Option<Value>)> {
    let r = json::get_path(pool, path)?;
    let (key, _) = json::ref_target(r, json::namespace(pool))?;
    let object = env.api.get(&Scope::Management, &key).cloned();
    Some((key, object))
}

/// §3.2; a retry when the config is missing.
fn bootstrap(
    env: &Env<'_>,
    pool: &Value,
    status: &mut Status,
    spec: &mut Map<String, Value>,
) -> Option<Duration> {
    let data_secret = json::str_at(pool, "spec.template.spec.bootstrap.dataSecretName");
    let Some((_, config)) = referenced(env, pool, "spec.template.spec.bootstrap.configRef") else {
        status.bootstrap_data_secret_created |= data_secret.is_some();
        return None;
    };
    let Some(config) = config else {
        return Some(ERROR_RETRY);
    };
    if json::is_deleting(&config) {
        return None;
    }
    let created = json::get_path(&config, "status.initialization.dataSecretCreated")
        .or_else(|| json::get_path(&config, "status.ready"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    status.bootstrap_data_secret_created = created;
    if !created {
        return None;
    }
    let Some(name) = json::str_at(&config, "status.dataSecretName") else {
        return Some(ERROR_RETRY);
    };
    if data_secret != Some(name) {
        spec.insert(
            "template".into(),
            json!({"spec": {"bootstrap": {"dataSecretName": name}}}),
        );
    }
    None
}

/// §3.3: the InfraMachinePool, when it exists (is loaded).
fn infrastructure(
    env: &Env<'_>,
    pool: &Value,
    status: &mut Status,
    spec: &mut Map<String, Value>,
) -> Option<Value> {
    let Some((_, Some(infra))) = referenced(env, pool, "spec.template.spec.infrastructureRef")
    else {
        return None;
    };
    if json::is_deleting(&infra) {
        return Some(infra);
    }
    status.infrastructure_provisioned = json::get_path(&infra, "status.ready")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !status.infrastructure_provisioned {
        return Some(infra);
    }
    let list = json::get_path(&infra, "spec.providerIDList")
        .cloned()
        .unwrap_or_else(|| json!([]));
    if let Some(replicas) = json::get_path(&infra, "status.replicas").and_then(Value::as_i64) {
        status.replicas = Some(replicas);
    }
    let empty = list.as_array().is_none_or(Vec::is_empty);
    if empty && status.replicas.unwrap_or(0) != 0 {
        return Some(infra);
    }
    let current = json::get_path(pool, "spec.providerIDList")
        .cloned()
        .unwrap_or_else(|| json!([]));
    if list != current {
        spec.insert("providerIDList".into(), list);
        status.legacy_ready = Some(0);
        status.legacy_available = Some(0);
        status.legacy_unavailable = status.replicas;
    }
    Some(infra)
}

const POOL_NAME_LABEL: &str = "cluster.x-k8s.io/pool-name";
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Whether `object`'s v1beta2 condition `type_` is True (v1beta1 objects keep those under
/// `status.v1beta2`).
fn condition_true(object: &Value, type_: &str) -> bool {
    let path = if json::api_version(object).ends_with("/v1beta1") {
        "status.v1beta2.conditions"
    } else {
        "status.conditions"
    };
    json::get_path(object, path)
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// `getMachinesForMachinePool`: the Machines labelled with the pool and its Cluster, but those
/// another owner controls.
fn machines_of(env: &Env<'_>, pool: &Value) -> Vec<Value> {
    let cluster = json::str_at(pool, "spec.clusterName").unwrap_or_default();
    env.api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "Machine")
                .map(|(_, m)| m)
                .filter(|m| json::namespace(m) == json::namespace(pool))
                .filter(|m| {
                    let labels = json::labels(m);
                    labels.get(POOL_NAME_LABEL).map(String::as_str) == Some(json::name(pool))
                        && labels.get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(cluster)
                })
                .filter(|m| {
                    let controller = m
                        .at_pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .and_then(|rs| rs.iter().find(|r| r["controller"] == true));
                    controller
                        .is_none_or(|c| c["kind"] == "MachinePool" && c["name"] == json::name(pool))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// §3.7: a Machine for each infrastructure machine of the pool that has none, then
/// `setMachinesUptoDate`.
fn pool_machines(
    env: &mut Env<'_>,
    actor: &str,
    pool: &Value,
    infra: &Value,
    kind: &str,
    scope: &Scope,
) {
    let namespace = json::namespace(pool).to_string();
    let cluster = json::str_at(pool, "spec.clusterName")
        .unwrap_or_default()
        .to_string();
    let group = json::group_of(json::api_version(infra)).to_string();
    let infra_machines: Vec<Value> = env
        .api
        .store(&Scope::Management)
        .map(|s| {
            s.list(&group, kind)
                .map(|(_, m)| m)
                .filter(|m| json::namespace(m) == namespace)
                .filter(|m| {
                    let labels = json::labels(m);
                    labels.get(POOL_NAME_LABEL).map(String::as_str) == Some(json::name(pool))
                        && labels.get(CLUSTER_NAME_LABEL) == Some(&cluster)
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let existing: Vec<String> = machines_of(env, pool)
        .iter()
        .filter_map(|m| json::str_at(m, "spec.infrastructureRef.name").map(str::to_string))
        .collect();
    for im in infra_machines {
        let name = json::name(&im).to_string();
        if existing.contains(&name) {
            continue;
        }
        let version = json::str_at(&im, "spec.providerID").and_then(|id| {
            env.api.store(scope)?.list("", "Node").find_map(|(_, n)| {
                (json::str_at(n, "spec.providerID") == Some(id))
                    .then(|| json::str_at(n, "status.nodeInfo.kubeletVersion"))
                    .flatten()
                    .map(str::to_string)
            })
        });
        let mut labels = json::get_path(pool, "spec.template.metadata.labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        labels[POOL_NAME_LABEL] = json!(json::name(pool));
        labels[CLUSTER_NAME_LABEL] = json!(cluster);
        let machine = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                "annotations": json::get_path(pool, "spec.template.metadata.annotations"),
                "ownerReferences": [{"apiVersion": json::api_version(pool), "kind": "MachinePool",
                    "name": json::name(pool), "uid": pool.at_pointer("/metadata/uid"),
                    "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": ""},
                "infrastructureRef": {"apiGroup": group, "kind": kind, "name": name},
                "version": version},
        });
        if let Ok(w) = env
            .api
            .store_mut(&Scope::Management)
            .create(machine, env.clock.now)
        {
            env.line(actor, "CreateMachine", w.key.to_string(), String::new());
            env.changed(&Scope::Management, w);
        }
    }
    for machine in machines_of(env, pool) {
        let (status, reason, message) = if json::is_deleting(&machine) {
            ("False", "NotUpToDate", "Machine is being deleted")
        } else {
            ("True", "UpToDate", "")
        };
        let path = if json::api_version(&machine).ends_with("/v1beta1") {
            "status.v1beta2.conditions"
        } else {
            "status.conditions"
        };
        let mut conditions: Vec<Value> = json::get_path(&machine, path)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if conditions
            .iter()
            .any(|c| c["type"] == "UpToDate" && c["status"] == status && c["reason"] == reason)
        {
            continue;
        }
        conditions.retain(|c| c["type"] != "UpToDate");
        conditions.push(
            json!({"type": "UpToDate", "status": status, "reason": reason,
            "message": message, "lastTransitionTime": env.clock.now.to_rfc3339()}),
        );
        let patch = if path == "status.conditions" {
            json!({"status": {"conditions": conditions}})
        } else {
            json!({"status": {"v1beta2": {"conditions": conditions}}})
        };
        let key = ObjKey::of(&machine);
        if let Ok(w) = env
            .api
            .store_mut(&Scope::Management)
            .patch(&key, &patch, Part::Status)
        {
            env.line(
                actor,
                "SetCondition",
                key.to_string(),
                format!("UpToDate={status}"),
            );
            env.changed(&Scope::Management, w);
        }
    }
}

/// The provider IDs `pool` lists now (its own spec, as upstream reads it after the copy above
/// lands: the copy and the status go in one reconcile's patches).
fn provider_ids(pool: &Value, spec: Option<&Value>) -> Vec<String> {
    spec.or_else(|| json::get_path(pool, "spec.providerIDList"))
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// §3.4; the completion check's requeue.
fn node_refs(
    env: &mut Env<'_>,
    actor: &str,
    pool: &Value,
    ids: &[String],
    scope: &Scope,
    status: &mut Status,
) -> Option<Duration> {
    let nodes: Vec<Value> = env
        .api
        .store(scope)
        .map(|s| s.list("", "Node").map(|(_, n)| n.clone()).collect())
        .unwrap_or_default();
    fn provider_id(n: &Value) -> &str {
        json::str_at(n, "spec.providerID").unwrap_or_default()
    }
    let same = |r: &Value| {
        nodes.iter().any(|n| {
            !provider_id(n).is_empty()
                && Some(json::name(n)) == r["name"].as_str()
                && n.at_pointer("/metadata/uid") == r.get("uid")
        })
    };
    let ready_count = status.legacy_ready.unwrap_or(0);
    if status.replicas.unwrap_or(0) == ready_count
        && status.node_refs.len() as i64 == ready_count
        && status.node_refs.iter().all(same)
    {
        return None;
    }
    let spec_replicas = pool.at_pointer("/spec/replicas").and_then(Value::as_i64);
    if ids.is_empty() && spec_replicas != Some(0) {
        return None;
    }
    for r in status.node_refs.clone() {
        let name = r["name"].as_str().unwrap_or_default();
        let Some(node) = nodes.iter().find(|n| json::name(n) == name) else {
            continue;
        };
        let id = provider_id(node);
        if !id.is_empty() && !ids.iter().any(|i| i == id) {
            let key = ObjKey::new("", "Node", "", name);
            if let Ok(w) = env.api.store_mut(scope).delete(&key, env.clock.now) {
                env.line(actor, "DeleteNode", key.to_string(), "retired".into());
                env.changed(scope, w);
            }
        }
    }
    let min_ready = pool
        .at_pointer("/spec/template/spec/minReadySeconds")
        .or_else(|| pool.at_pointer("/spec/minReadySeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let (mut refs, mut ready, mut available) = (Vec::new(), 0, 0);
    for id in ids {
        let Some(node) = nodes.iter().find(|n| provider_id(n) == id) else {
            continue;
        };
        refs.push(
            json!({"apiVersion": "v1", "kind": "Node", "name": json::name(node),
                         "uid": node.at_pointer("/metadata/uid")}),
        );
        let condition = node
            .at_pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
        if condition.is_some_and(|c| c["status"] == "True") {
            ready += 1;
            let since = condition
                .and_then(|c| c["lastTransitionTime"].as_str())
                .and_then(|t| engine::time::Timestamp::parse_rfc3339(t).ok());
            let past = since.is_some_and(|t| t + Duration::from_secs(min_ready) < env.clock.now);
            if min_ready == 0 || past {
                available += 1;
            }
        }
    }
    if refs.is_empty() && !ids.is_empty() {
        return None;
    }
    status.legacy_ready = Some(ready);
    status.legacy_available = Some(available);
    status.legacy_unavailable = Some(status.replicas.unwrap_or(0) - available);
    status.node_refs = refs.clone();
    for r in &refs {
        annotate(
            env,
            actor,
            pool,
            scope,
            r["name"].as_str().unwrap_or_default(),
        );
    }
    let all_ready = status.replicas.unwrap_or(0) == ready && refs.len() as i64 == ready;
    (!all_ready).then_some(WAITING_FOR_REPLICAS)
}

/// The annotations upstream puts on a pool's Node, and the uninitialized taint removed.
fn annotate(env: &mut Env<'_>, actor: &str, pool: &Value, scope: &Scope, node: &str) {
    let key = ObjKey::new("", "Node", "", node);
    let Some(current) = env.api.get(scope, &key).cloned() else {
        return;
    };
    let taints: Vec<Value> = current
        .at_pointer("/spec/taints")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter(|t| t["key"] != UNINITIALIZED_TAINT)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let patch = json!({
        "metadata": {"annotations": {
            "cluster.x-k8s.io/cluster-name": json::str_at(pool, "spec.clusterName"),
            "cluster.x-k8s.io/cluster-namespace": json::namespace(pool),
            "cluster.x-k8s.io/owner-kind": "MachinePool",
            "cluster.x-k8s.io/owner-name": json::name(pool),
        }},
        "spec": {"taints": if taints.is_empty() { Value::Null } else { json!(taints) }},
    });
    if let Ok(w) = env.api.store_mut(scope).patch(&key, &patch, Part::Main)
        && w.object.as_deref() != Some(&current)
    {
        env.line(actor, "PatchNode", key.to_string(), String::new());
        env.changed(scope, w);
    }
}

/// §3.5: the rules in order, later ones winning; sticky when none fires.
fn phase(pool: &Value, status: &Status) -> Option<String> {
    let mut phase = status.phase.clone().filter(|p| !p.is_empty());
    let infra = status.infrastructure_provisioned;
    if phase.is_none() {
        phase = Some("Pending".into());
    }
    if status.bootstrap_data_secret_created && !infra {
        phase = Some("Provisioning".into());
    }
    if !status.node_refs.is_empty() {
        phase = Some("Provisioned".into());
    }
    let ready = status.legacy_ready.unwrap_or(0);
    let managed = json::annotations(pool)
        .get("cluster.x-k8s.io/replicas-managed-by")
        .is_some_and(|v| v != "false");
    if infra && let Some(want) = pool.at_pointer("/spec/replicas").and_then(Value::as_i64) {
        if want == ready {
            phase = Some("Running".into());
        } else if want > ready {
            phase = Some(if managed { "Scaling" } else { "ScalingUp" }.into());
        } else {
            phase = Some(if managed { "Scaling" } else { "ScalingDown" }.into());
        }
    }
    if json::is_deleting(pool) {
        phase = Some("Deleting".into());
    }
    phase
}

/// §3.8.
fn delete(env: &mut Env<'_>, actor: &str, key: &ObjKey, pool: &Value, scope: &Scope) {
    let mut waiting = false;
    for path in [
        "spec.template.spec.bootstrap.configRef",
        "spec.template.spec.infrastructureRef",
    ] {
        let Some((child, Some(object))) = referenced(env, pool, path) else {
            continue;
        };
        waiting = true;
        if !json::is_deleting(&object)
            && let Ok(w) = env
                .api
                .store_mut(&Scope::Management)
                .delete(&child, env.clock.now)
        {
            env.line(actor, "Delete", child.to_string(), String::new());
            env.changed(&Scope::Management, w);
        }
    }
    if waiting {
        return;
    }
    let ids = provider_ids(pool, None);
    let refs: Vec<String> = json::get_path(pool, "status.nodeRefs")
        .and_then(Value::as_array)
        .map(|rs| {
            rs.iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for name in refs {
        let node_key = ObjKey::new("", "Node", "", &name);
        let Some(node) = env.api.get(scope, &node_key) else {
            continue;
        };
        let id = json::str_at(node, "spec.providerID").unwrap_or_default();
        if !id.is_empty()
            && !ids.iter().any(|i| i == id)
            && let Ok(w) = env.api.store_mut(scope).delete(&node_key, env.clock.now)
        {
            env.line(actor, "DeleteNode", node_key.to_string(), "retired".into());
            env.changed(scope, w);
        }
    }
    let finalizers: Vec<String> = json::finalizers(pool)
        .into_iter()
        .filter(|f| f != MACHINE_POOL_FINALIZER)
        .collect();
    write_finalizers(env, actor, key, finalizers);
}
