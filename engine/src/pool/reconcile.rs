//! One reconcile of one MachinePool, as a pure function of the store, the controller's memory of
//! the pool and `now`: it returns the commands to issue (only what differs from what is observed)
//! and when to wake up again.

use super::conditions::{self as cond};
use super::deletion::{NodeDeleteFacts, NodeDeleteStep, node_delete_step};
use super::draft::Draft;
use super::noderefs::{self, NoAvailableNodes, node_patch, node_references};
use super::nodes::{FnvSet, NodeIndex};
use super::phase::{PhaseFacts, next_phase, replicas_managed_externally};
use super::{PoolMemory, PoolNodeDeletion, PoolWake};
use crate::command::{Action, EventType, JsonText, Target};
use crate::model::*;
use crate::store::Store;
use crate::time::{Duration, Timestamp};
use serde_json::{Map, Value, json};
use std::cell::OnceCell;
use std::collections::BTreeSet;

/// Owner references written by the pool name the hub version; GC only looks at the group.
const CAPI_HUB_API_VERSION: &str = "cluster.x-k8s.io/v1beta2";

/// One command the reconcile wants, with its operator-facing reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub action: Action,
    pub reason: String,
    /// For `DeleteNode`: the Node's name, so the attempt is remembered when queued.
    pub node_deletion: Option<String>,
}

/// The outcome of one reconcile.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub commands: Vec<Planned>,
    /// Clock-driven changes: (timer, when, the object it is about when not the pool).
    pub wakes: Vec<(PoolWake, Timestamp, Option<ObjectKey>)>,
    /// Node deletion attempts to forget (the Node is gone).
    pub forget_nodes: Vec<String>,
    /// Node refs announced with `SuccessfulSetNodeRefs` (their hash), when an event is planned.
    pub announced_node_refs: Option<u64>,
    /// Nodes could not be matched: the workload cluster cache is not synced yet.
    pub awaiting_workload_cache: bool,
    /// The pool waits for this object to become readable (see [`PoolMemory::unreadable`]).
    pub unreadable: Option<(ObjectKey, String)>,
}

impl Plan {
    fn issue(&mut self, action: Action, reason: impl Into<String>) {
        self.commands.push(Planned {
            action,
            reason: reason.into(),
            node_deletion: None,
        });
    }

    fn wake_at(&mut self, at: Timestamp, why: PoolWake, about: Option<ObjectKey>) {
        self.wakes.push((why, at, about));
    }
}

/// Everything one reconcile reads.
pub struct Ctx<'a> {
    pub store: &'a Store,
    pub now: Timestamp,
    pub key: &'a ObjectKey,
    pub mp: &'a MachinePool,
    pub memory: &'a PoolMemory,
    pub workload: &'a Scope,
    nodes: NodeIndex<'a>,
    /// Nodes matched to this pass's nodeRefs, in order (when nodeRefs were computed).
    matched: OnceCell<Vec<&'a Node>>,
    /// The pool's Machines ([`pool_machines`]), found once per reconcile.
    machines: OnceCell<Vec<&'a Machine>>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        store: &'a Store,
        now: Timestamp,
        key: &'a ObjectKey,
        mp: &'a MachinePool,
        memory: &'a PoolMemory,
        workload: &'a Scope,
    ) -> Self {
        Ctx {
            store,
            now,
            key,
            mp,
            memory,
            workload,
            nodes: NodeIndex::new(store, workload),
            matched: OnceCell::new(),
            machines: OnceCell::new(),
        }
    }

    fn nodes(&self) -> &NodeIndex<'a> {
        &self.nodes
    }

    fn pool_target(&self) -> Target {
        Target {
            key: self.key.clone(),
            api_version: self.mp.version.capi().to_string(),
        }
    }

    fn workload(&self) -> Scope {
        self.workload.clone()
    }

    fn pool_name(&self) -> String {
        format!("{}/{}", self.mp.meta.namespace, self.mp.meta.name)
    }

    fn external(&self, r: &ObjectRef) -> (ObjectKey, Option<&External>) {
        let key = r.key_in(&self.mp.meta.namespace);
        let found = match self.store.get(&key) {
            Some(Object::External(e)) => Some(e),
            _ => None,
        };
        (key, found)
    }

    fn node_by_name(&self, name: &str) -> Option<&'a Node> {
        self.nodes().by_name(name)
    }

    fn node_by_provider_id(&self, provider_id: &str) -> Option<&'a Node> {
        self.nodes().by_provider_id(provider_id)
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn owner_ref_json(o: &OwnerReference) -> Value {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!(o.api_version));
    m.insert("kind".into(), json!(o.kind));
    m.insert("name".into(), json!(o.name));
    m.insert("uid".into(), json!(o.uid));
    if o.controller {
        m.insert("controller".into(), json!(true));
        m.insert("blockOwnerDeletion".into(), json!(true));
    }
    Value::Object(m)
}

fn same_owner(a: &OwnerReference, b: &OwnerReference) -> bool {
    group_of(&a.api_version) == group_of(&b.api_version) && a.kind == b.kind && a.name == b.name
}

/// The pool's reconcile: paused and missing-Cluster gates, then the normal or deletion flow.
pub fn reconcile(cx: &Ctx<'_>) -> Plan {
    let mut plan = Plan::default();
    if let Some(unknown) = unreadable_dependency(cx) {
        wait_for_readable(cx, unknown, &mut plan);
        return plan;
    }
    let mp = cx.mp;
    let deleting = mp.meta.is_deleting();
    let has_finalizer = mp
        .meta
        .finalizers
        .iter()
        .any(|f| f == MACHINE_POOL_FINALIZER);
    match (deleting, has_finalizer) {
        (true, false) => return plan,
        (false, false) => {
            plan.issue(
                Action::AddFinalizer {
                    target: cx.pool_target(),
                    finalizer: MACHINE_POOL_FINALIZER.to_string(),
                },
                format!("MachinePool {} has no finalizer yet", cx.pool_name()),
            );
            return plan;
        }
        (_, true) => {}
    }
    let cluster_key = ObjectKey::management(Kind::Cluster, &mp.meta.namespace, &mp.cluster_name);
    let Some(Object::Cluster(cluster)) = cx.store.get(&cluster_key) else {
        tracing::info!(
            pool = %cx.pool_name(),
            "Failed to get Cluster {}/{} for MachinePool",
            mp.meta.namespace,
            mp.cluster_name
        );
        return plan;
    };
    if cluster.paused || mp.meta.has_annotation(PAUSED_ANNOTATION) {
        tracing::debug!(pool = %cx.pool_name(), "Reconciliation is paused for this object");
        return plan;
    }
    set_owner_and_labels(cx, cluster, &mut plan);
    let mut draft = Draft::of(mp);
    let mut infra_loaded = None;
    if deleting {
        reconcile_delete(cx, &mut plan);
    } else {
        reconcile_bootstrap(cx, &mut draft, &mut plan);
        infra_loaded = reconcile_infrastructure(cx, &mut draft, &mut plan);
        reconcile_node_refs(cx, &mut draft, &mut plan);
    }
    if let Some(infra) = infra_loaded {
        update_status(cx, infra, &mut draft);
    }
    draft.phase = Some(next_phase(&PhaseFacts {
        previous: mp.status.phase.as_deref(),
        bootstrap_data_secret_created: draft.bootstrap_created,
        infrastructure_provisioned: draft.infra_provisioned,
        node_refs: draft.node_refs(mp).len(),
        spec_replicas: mp.replicas,
        legacy_ready_replicas: draft.legacy_ready.unwrap_or(0),
        replicas_managed_externally: replicas_managed_externally(
            mp.meta
                .annotations
                .get(REPLICAS_MANAGED_BY_ANNOTATION)
                .map(String::as_str),
        ),
        deleting,
        failure_surfaced: draft.failure_reason.is_some() || draft.failure_message.is_some(),
    }));
    write_pool(cx, draft, &mut plan);
    plan
}

/// `reconcileSetOwnerAndLabels`: cluster-name label and a Cluster owner reference on the pool.
fn set_owner_and_labels(cx: &Ctx<'_>, cluster: &Cluster, plan: &mut Plan) {
    let mp = cx.mp;
    let want = OwnerReference {
        api_version: CAPI_HUB_API_VERSION.to_string(),
        kind: "Cluster".to_string(),
        name: cluster.meta.name.clone(),
        uid: cluster.meta.uid.clone(),
        controller: false,
    };
    let label_ok = mp.meta.labels.get(CLUSTER_NAME_LABEL) == Some(&mp.cluster_name);
    let owner_ok = mp
        .meta
        .owner_references
        .iter()
        .any(|o| same_owner(o, &want) && o.uid == want.uid);
    if label_ok && owner_ok {
        return;
    }
    let merge = ownership_patch(&mp.meta.owner_references, want, &mp.cluster_name);
    plan.issue(
        Action::SetOwnerReference {
            target: cx.pool_target(),
            merge,
            summary: format!("owner Cluster {}", cluster.meta.name),
        },
        format!(
            "MachinePool {} belongs to Cluster {}",
            cx.pool_name(),
            cluster.meta.name
        ),
    );
}

/// The merge patch that sets the cluster-name label and puts `want` among `refs` (replacing a
/// reference to the same owner): merge patches replace lists, so the whole list is sent.
fn ownership_patch(refs: &[OwnerReference], want: OwnerReference, cluster: &str) -> JsonText {
    let mut refs = refs.to_vec();
    match refs.iter_mut().find(|o| same_owner(o, &want)) {
        Some(existing) => *existing = want,
        None => refs.push(want),
    }
    JsonText::from_value(&json!({"metadata": {
        "labels": {CLUSTER_NAME_LABEL: cluster},
        "ownerReferences": refs.iter().map(owner_ref_json).collect::<Vec<_>>(),
    }}))
}

/// Controller reference to the pool and the cluster-name label on a provider object
/// (`reconcileExternal`). Never steals an object another controller owns.
fn adopt(cx: &Ctx<'_>, key: &ObjectKey, obj: &External, plan: &mut Plan) {
    let mp = cx.mp;
    let want = OwnerReference {
        api_version: CAPI_HUB_API_VERSION.to_string(),
        kind: "MachinePool".to_string(),
        name: mp.meta.name.clone(),
        uid: mp.meta.uid.clone(),
        controller: true,
    };
    if let Some(other) = obj.meta.controller()
        && !same_owner(other, &want)
    {
        tracing::warn!(
            pool = %cx.pool_name(),
            "{} {}/{} is already owned by {} {}; not adopting it",
            obj.group_kind.kind,
            obj.meta.namespace,
            obj.meta.name,
            other.kind,
            other.name
        );
        return;
    }
    let label_ok = obj.meta.labels.get(CLUSTER_NAME_LABEL) == Some(&mp.cluster_name);
    let owner_ok = obj
        .meta
        .owner_references
        .iter()
        .any(|o| same_owner(o, &want) && o.uid == want.uid && o.controller);
    if label_ok && owner_ok {
        return;
    }
    let merge = ownership_patch(&obj.meta.owner_references, want, &mp.cluster_name);
    plan.issue(
        Action::SetOwnerReference {
            target: Target {
                key: key.clone(),
                api_version: obj.api_version.clone(),
            },
            merge,
            summary: format!("controller MachinePool {}", mp.meta.name),
        },
        format!(
            "{} {} is part of MachinePool {}",
            obj.group_kind.kind,
            obj.meta.name,
            cx.pool_name()
        ),
    );
}

/// Copies a provider object's failure fields onto the pool (upstream's intent; its inverted nil
/// checks are not copied). The pool then reports `Failed` for good.
fn surface_failures(obj: &External, draft: &mut Draft) {
    let reason = obj.failure_reason.as_deref().filter(|s| !s.is_empty());
    let message = obj.failure_message.as_deref().filter(|s| !s.is_empty());
    if let Some(r) = reason {
        draft.failure_reason = Some(r.to_string());
    }
    if let Some(m) = message {
        let (group, version) = obj
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", obj.api_version.as_str()));
        let gvk = if group.is_empty() {
            format!("/{version}, Kind={}", obj.group_kind.kind)
        } else {
            format!("{group}/{version}, Kind={}", obj.group_kind.kind)
        };
        draft.failure_message = Some(format!(
            "Failure detected from referenced resource {gvk} with name {:?}: {m}",
            obj.meta.name
        ));
    }
}

/// §3.2: the bootstrap config's data secret name goes into the pool's spec once created.
fn reconcile_bootstrap(cx: &Ctx<'_>, draft: &mut Draft, plan: &mut Plan) {
    let mp = cx.mp;
    let Some(config_ref) = &mp.bootstrap_config_ref else {
        if mp.bootstrap_data_secret_name.is_some() {
            // The user brought their own bootstrap data: never touched.
            draft.bootstrap_created = true;
            cond::set(
                &mut draft.legacy_conditions,
                cond::legacy_true(cond::BOOTSTRAP_READY),
                cx.now,
            );
        } else {
            tracing::error!(
                pool = %cx.pool_name(),
                "neither .spec.bootstrap.configRef nor .spec.bootstrap.dataSecretName are set for MachinePool {:?} in namespace {:?}",
                mp.meta.name,
                mp.meta.namespace
            );
        }
        return;
    };
    let (key, found) = cx.external(config_ref);
    let Some(config) = found else {
        tracing::info!(
            pool = %cx.pool_name(),
            "could not find {} {}/{} for MachinePool {}, requeuing",
            config_ref.kind,
            key.namespace,
            key.name,
            cx.pool_name()
        );
        return;
    };
    adopt(cx, &key, config, plan);
    surface_failures(config, draft);
    if config.meta.is_deleting() {
        return;
    }
    // Either contract: v1beta1 `status.ready`, v1beta2 `status.initialization.dataSecretCreated`.
    let created = config.ready == Some(true) || config.data_secret_created == Some(true);
    let condition = if created {
        cond::legacy_true(cond::BOOTSTRAP_READY)
    } else {
        cond::legacy_false(
            cond::BOOTSTRAP_READY,
            cond::WAITING_FOR_DATA_SECRET,
            Severity::Info,
            "",
        )
    };
    cond::set(&mut draft.legacy_conditions, condition, cx.now);
    if !created {
        tracing::info!(
            pool = %cx.pool_name(),
            "Waiting for bootstrap provider to generate data secret and report status.ready"
        );
        draft.bootstrap_created = false;
        return;
    }
    match config.data_secret_name.as_deref() {
        Some(name) if !name.is_empty() => {
            draft.data_secret_name = Some(name.to_string());
            draft.bootstrap_created = true;
        }
        Some(_) | None => tracing::error!(
            pool = %cx.pool_name(),
            "retrieved empty dataSecretName from bootstrap provider for MachinePool {:?} in namespace {:?}",
            mp.meta.name,
            mp.meta.namespace
        ),
    }
}

/// §3.3: readiness, providerIDList and replicas from the InfraMachinePool, and MachinePool
/// Machines. Returns the InfraMachinePool when it was loaded (status counters need it).
fn reconcile_infrastructure<'a>(
    cx: &Ctx<'a>,
    draft: &mut Draft,
    plan: &mut Plan,
) -> Option<&'a External> {
    let mp = cx.mp;
    let infra_ref = &mp.infrastructure_ref;
    let key = infra_ref.key_in(&mp.meta.namespace);
    let Some(Object::External(infra)) = cx.store.get(&key) else {
        // Not in the cache yet is not deleted: the failure is terminal, so it needs proof.
        if mp.status.infrastructure_provisioned && cx.store.seen_gone(&key, cx.key) {
            tracing::error!(
                pool = %cx.pool_name(),
                "infrastructure reference has been deleted after being ready, setting failure state"
            );
            draft.failure_reason = Some("InvalidConfiguration".to_string());
            draft.failure_message = Some(format!(
                "MachinePool infrastructure resource {} {}/{} has been deleted after being ready",
                infra_ref.kind, key.namespace, infra_ref.name
            ));
        }
        cond::set(
            &mut draft.legacy_conditions,
            cond::legacy_false(
                cond::INFRASTRUCTURE_READY,
                cond::INCORRECT_EXTERNAL_REF,
                Severity::Error,
                &format!(
                    "could not find infra reference of kind {} with name {}",
                    infra_ref.kind, infra_ref.name
                ),
            ),
            cx.now,
        );
        return None;
    };
    adopt(cx, &key, infra, plan);
    surface_failures(infra, draft);
    if infra.meta.is_deleting() {
        return Some(infra);
    }
    // Part 1, decision 6: either contract's readiness field.
    let provisioned = infra.ready == Some(true) || infra.provisioned == Some(true);
    draft.infra_provisioned = provisioned;
    let condition = if provisioned {
        cond::legacy_true(cond::INFRASTRUCTURE_READY)
    } else {
        cond::legacy_false(
            cond::INFRASTRUCTURE_READY,
            cond::WAITING_FOR_INFRASTRUCTURE,
            Severity::Info,
            "",
        )
    };
    cond::set(&mut draft.legacy_conditions, condition, cx.now);
    // MachinePool Machines take their version from the workload Nodes: wait for that cache.
    // (Upstream fails this whole step without it; the providerIDList does not need Nodes.)
    if cx.store.is_synced(&cx.workload()) {
        reconcile_machines(cx, infra, plan);
    }
    if !provisioned {
        tracing::info!(pool = %cx.pool_name(), "Infrastructure provider is not yet ready");
        return Some(infra);
    }
    if let Some(r) = infra.status_replicas {
        draft.replicas = Some(r);
    }
    let list = infra.provider_id_list.as_deref().unwrap_or_default();
    if list.is_empty() && draft.replicas.unwrap_or(0) != 0 {
        tracing::info!(
            pool = %cx.pool_name(),
            replicas = draft.replicas.unwrap_or(0),
            "Retrieved empty spec.providerIDList from infrastructure provider but status.replicas is not zero."
        );
        return Some(infra);
    }
    if list != mp.provider_id_list.as_slice() {
        draft.provider_id_list = Some(list.to_vec());
        draft.legacy_ready = Some(0);
        draft.legacy_available = Some(0);
        draft.legacy_unavailable = Some(draft.replicas.unwrap_or(0));
    }
    Some(infra)
}

/// The pool-name label value: the pool's name, hashed when it is not a valid label value.
fn pool_label_value(name: &str) -> std::borrow::Cow<'_, str> {
    crate::model::format_label_value(name)
}

/// Machines that belong to the pool: labelled with its name and cluster, not controlled by
/// some other owner.
fn pool_machines<'c, 'a>(cx: &'c Ctx<'a>) -> &'c [&'a Machine] {
    cx.machines.get_or_init(|| find_pool_machines(cx))
}

fn find_pool_machines<'a>(cx: &Ctx<'a>) -> Vec<&'a Machine> {
    let mp = cx.mp;
    let label = pool_label_value(&mp.meta.name);
    cx.store
        .iter_kind(&Scope::Management, &Kind::Machine)
        .filter_map(|(_, o)| match o {
            Object::Machine(m) => Some(m),
            _ => None,
        })
        .filter(|m| m.meta.namespace == mp.meta.namespace)
        .filter(|m| {
            m.meta.labels.get(POOL_NAME_LABEL).map(String::as_str) == Some(label.as_ref())
                && m.meta.labels.get(CLUSTER_NAME_LABEL) == Some(&mp.cluster_name)
        })
        .filter(|m| {
            m.meta
                .controller()
                .is_none_or(|c| c.kind == "MachinePool" && c.name == mp.meta.name)
        })
        .collect()
}

/// §3.7: one Machine per infrastructure machine of `status.infrastructureMachineKind`.
fn reconcile_machines(cx: &Ctx<'_>, infra: &External, plan: &mut Plan) {
    let Some(kind) = infra
        .infrastructure_machine_kind
        .as_deref()
        .filter(|k| !k.is_empty())
    else {
        return;
    };
    let mp = cx.mp;
    let infra_kind = Kind::External(GroupKind {
        group: infra.group_kind.group.clone(),
        kind: kind.to_string(),
    });
    let label = pool_label_value(&mp.meta.name);
    let existing: BTreeSet<&str> = cx
        .store
        .iter_kind(&Scope::Management, &Kind::Machine)
        .filter_map(|(_, o)| match o {
            Object::Machine(m) if m.meta.namespace == mp.meta.namespace => Some(m),
            _ => None,
        })
        .filter(|m| m.meta.labels.get(POOL_NAME_LABEL).map(String::as_str) == Some(&*label))
        .map(|m| m.infrastructure_ref.name.as_str())
        .collect();
    for (_, o) in cx.store.iter_kind(&Scope::Management, &infra_kind) {
        let Object::External(im) = o else { continue };
        if im.meta.namespace != mp.meta.namespace
            || im.meta.labels.get(POOL_NAME_LABEL).map(String::as_str) != Some(&*label)
            || im.meta.labels.get(CLUSTER_NAME_LABEL) != Some(&mp.cluster_name)
        {
            continue;
        }
        let machine_key = ObjectKey::management(Kind::Machine, &mp.meta.namespace, &im.meta.name);
        let version = || {
            im.provider_id
                .as_deref()
                .and_then(|p| cx.node_by_provider_id(p))
                .and_then(|n| n.kubelet_version.clone())
                .filter(|v| !v.is_empty())
        };
        if let Some(Object::Machine(m)) = cx.store.get(&machine_key) {
            if let Some((merge, summary)) = machine_update(mp, m, version().as_deref()) {
                plan.issue(
                    Action::PatchSpec {
                        target: Target {
                            key: machine_key,
                            api_version: m.version.capi().to_string(),
                        },
                        merge: JsonText::from_value(&merge),
                        summary: summary.clone(),
                    },
                    format!(
                        "Machine {} of MachinePool {} differs from what the pool applies: {summary}",
                        m.meta.name,
                        cx.pool_name()
                    ),
                );
            }
            continue;
        }
        if existing.contains(im.meta.name.as_str()) {
            continue;
        }
        let version = version();
        let object = machine_pool_machine(mp, im, version);
        plan.issue(
            Action::CreateMachine {
                target: Target {
                    key: machine_key,
                    api_version: mp.version.capi().to_string(),
                },
                object: JsonText::from_value(&object),
            },
            format!(
                "{} {} of MachinePool {} has no Machine",
                kind,
                im.meta.name,
                cx.pool_name()
            ),
        );
    }
    mark_machines_up_to_date(cx, plan);
}

/// §3.7 `setMachinesUptoDate`: each Machine of the pool is `UpToDate`, unless it is being
/// deleted. Written with the Machine's other conditions (a status merge patch replaces the
/// list); a write of another controller in flight makes this one wait.
fn mark_machines_up_to_date(cx: &Ctx<'_>, plan: &mut Plan) {
    const UP_TO_DATE: &str = "UpToDate";
    for m in pool_machines(cx).iter().copied() {
        let (status, reason, message) = if m.meta.is_deleting() {
            (
                ConditionStatus::False,
                "NotUpToDate",
                "Machine is being deleted",
            )
        } else {
            (ConditionStatus::True, "UpToDate", "")
        };
        let current = m.conditions.current(UP_TO_DATE);
        if current.is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
        {
            continue;
        }
        let mut conditions = m.conditions.clone();
        let condition = Condition::new(UP_TO_DATE, status, reason, message);
        cond::set(&mut conditions.current, condition, cx.now);
        plan.issue(
            Action::SetCondition {
                target: Target {
                    key: ObjectKey::management(Kind::Machine, &m.meta.namespace, &m.meta.name),
                    api_version: m.version.capi().to_string(),
                },
                conditions,
                summary: format!("{UP_TO_DATE}={} ({reason})", status.as_str()),
            },
            format!(
                "Machine {} belongs to MachinePool {}: {}",
                m.meta.name,
                cx.pool_name(),
                if m.meta.is_deleting() {
                    "it is being deleted, so it is not up to date"
                } else {
                    "it is up to date"
                }
            ),
        );
    }
}

/// What the pool applies to an existing Machine of its own that the Machine lacks: the
/// template's labels and annotations, the pool and cluster labels, and its Node's version.
/// Upstream applies the whole desired Machine (server-side apply); fields the pool stops
/// setting are not removed here. Deleting Machines and Machines of other owners are left alone.
pub(super) fn machine_update(
    mp: &MachinePool,
    m: &Machine,
    version: Option<&str>,
) -> Option<(Value, String)> {
    if m.meta.is_deleting()
        || m.meta
            .controller()
            .is_some_and(|c| c.kind != "MachinePool" || c.name != mp.meta.name)
    {
        return None;
    }
    let pool_label = pool_label_value(&mp.meta.name);
    let pool_labels = [
        (POOL_NAME_LABEL, pool_label.as_ref()),
        (CLUSTER_NAME_LABEL, mp.cluster_name.as_str()),
    ];
    let template_labels = mp
        .template_labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let labels = lacking(template_labels.chain(pool_labels), &m.meta.labels);
    let annotations = lacking(
        mp.template_annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        &m.meta.annotations,
    );
    let version = version.filter(|v| m.kubernetes_version.as_deref() != Some(*v));
    let mut metadata = Map::new();
    let mut summary = Vec::new();
    if !labels.is_empty() {
        summary.push(format!(
            "labels {}",
            labels.keys().cloned().collect::<Vec<_>>().join(",")
        ));
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        summary.push(format!(
            "annotations {}",
            annotations.keys().cloned().collect::<Vec<_>>().join(",")
        ));
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    let mut merge = Map::new();
    if !metadata.is_empty() {
        merge.insert("metadata".into(), Value::Object(metadata));
    }
    if let Some(v) = version {
        summary.push(format!("spec.version={v}"));
        merge.insert("spec".into(), json!({ "version": v }));
    }
    (!merge.is_empty()).then(|| (Value::Object(merge), summary.join(", ")))
}

/// The entries of `wanted` that `have` lacks or holds with another value.
fn lacking<'w>(
    wanted: impl Iterator<Item = (&'w str, &'w str)>,
    have: &std::collections::BTreeMap<String, String>,
) -> Map<String, Value> {
    wanted
        .filter(|(k, v)| have.get(*k).map(String::as_str) != Some(*v))
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect()
}

/// The Machine that mirrors an infrastructure machine, in the pool's API version.
pub fn machine_pool_machine(mp: &MachinePool, im: &External, version: Option<String>) -> Value {
    let mut labels = Map::new();
    for (k, v) in &mp.template_labels {
        labels.insert(k.clone(), json!(v));
    }
    labels.insert(
        POOL_NAME_LABEL.into(),
        json!(pool_label_value(&mp.meta.name)),
    );
    labels.insert(CLUSTER_NAME_LABEL.into(), json!(mp.cluster_name));
    let annotations: Map<String, Value> = mp
        .template_annotations
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let owner = OwnerReference {
        api_version: mp.version.capi().to_string(),
        kind: "MachinePool".into(),
        name: mp.meta.name.clone(),
        uid: mp.meta.uid.clone(),
        controller: true,
    };
    let infra_ref = match mp.version {
        ApiVersion::V1Beta2 => json!({
            "apiGroup": im.group_kind.group,
            "kind": im.group_kind.kind,
            "name": im.meta.name,
        }),
        ApiVersion::V1Beta1 => json!({
            "apiVersion": im.api_version,
            "kind": im.group_kind.kind,
            "name": im.meta.name,
            "namespace": im.meta.namespace,
        }),
    };
    let mut spec = Map::new();
    spec.insert("clusterName".into(), json!(mp.cluster_name));
    spec.insert("bootstrap".into(), json!({"dataSecretName": ""}));
    spec.insert("infrastructureRef".into(), infra_ref);
    if let Some(v) = version {
        spec.insert("version".into(), json!(v));
    }
    json!({
        "apiVersion": mp.version.capi().to_string(),
        "kind": "Machine",
        "metadata": {
            "name": im.meta.name,
            "namespace": mp.meta.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_ref_json(&owner)],
        },
        "spec": spec,
    })
}

/// §3.4: nodeRefs and ready/available counts from the workload Nodes, Node metadata, and the
/// deletion of Nodes whose providerID left the list.
fn reconcile_node_refs(cx: &Ctx<'_>, draft: &mut Draft, plan: &mut Plan) {
    let mp = cx.mp;
    let workload = cx.workload();
    if !cx.store.is_synced(&workload) {
        plan.awaiting_workload_cache = true;
        return;
    }
    // Borrow the desired list without copying it (it can hold thousands of IDs).
    let copied = draft.provider_id_list.take();
    let list = copied.as_deref().unwrap_or(&mp.provider_id_list);
    node_refs_from(cx, &workload, list, draft, plan);
    draft.provider_id_list = copied;
}

fn node_refs_from(
    cx: &Ctx<'_>,
    workload: &Scope,
    list: &[String],
    draft: &mut Draft,
    plan: &mut Plan,
) {
    let mp = cx.mp;
    if list.is_empty() && mp.replicas.is_none_or(|r| r != 0) {
        tracing::debug!(pool = %cx.pool_name(), "MachinePool doesn't have any ProviderIDs yet");
        return;
    }
    let min_ready = Duration::from_secs(i64::from(mp.min_ready_seconds.unwrap_or(0).max(0)));
    let matched = node_references(list, min_ready, cx.now, |p| cx.node_by_provider_id(p));
    // Retired Nodes: a nodeRef still matched through a listed providerID is not retired, so
    // only refs that dropped out need a look (none in the steady state).
    let observed = draft.node_refs(mp);
    let kept = matched
        .as_ref()
        .map_or(&[][..], |r| r.references.as_slice());
    if observed != kept {
        delete_retired_nodes(cx, workload, observed, list, plan);
    }
    let result = match matched {
        Ok(r) => r,
        Err(NoAvailableNodes) => {
            tracing::info!(
                pool = %cx.pool_name(),
                "Cannot assign NodeRefs to MachinePool, no matching Nodes"
            );
            return;
        }
    };
    let replicas = draft.replicas.unwrap_or(0);
    draft.legacy_ready = Some(result.ready);
    draft.legacy_available = Some(result.available);
    draft.legacy_unavailable = Some(replicas - result.available);
    if let Some(at) = result.next_available_at {
        plan.wake_at(at, PoolWake::MinReadySeconds, None);
    }
    if result.references != mp.status.node_refs {
        let hash = refs_hash(&result.references);
        if cx.memory.announced_node_refs != Some(hash) {
            plan.announced_node_refs = Some(hash);
            plan.issue(
                Action::RecordEvent {
                    regarding: cx.pool_target(),
                    type_: EventType::Normal,
                    reason: "SuccessfulSetNodeRefs".to_string(),
                    message: noderefs::node_refs_event_message(&result.references),
                },
                "Set MachinePool's NodeRefs",
            );
        }
    }
    for (r, node) in result.references.iter().zip(&result.nodes) {
        let key = ObjectKey::new(workload.clone(), Kind::Node, "", &r.name);
        if cx.store.has_unreadable() && cx.store.unreadable(&key).is_some() {
            // Patched by what was last read, it would be patched again at every answer: the
            // write lands, but the Node still does not read (found by the corrupt-object fault).
            continue;
        }
        if let Some(patch) = node_patch(node, &mp.cluster_name, &mp.meta.namespace, &mp.meta.name) {
            plan.issue(
                Action::PatchSpec {
                    target: Target {
                        key,
                        api_version: "v1".to_string(),
                    },
                    merge: JsonText::from_value(&patch),
                    summary: "MachinePool annotations, uninitialized taint removed".to_string(),
                },
                format!("Node {} is part of MachinePool {}", r.name, cx.pool_name()),
            );
        }
    }
    let condition = if replicas != result.ready || result.references.len() != result.ready as usize
    {
        tracing::info!(
            pool = %cx.pool_name(),
            nodeRefs = result.references.len(),
            readyReplicas = result.ready,
            replicas,
            "Not enough ready replicas or node references"
        );
        cond::legacy_false(
            cond::REPLICAS_READY,
            cond::WAITING_FOR_REPLICAS_READY,
            Severity::Info,
            "",
        )
    } else {
        cond::legacy_true(cond::REPLICAS_READY)
    };
    cond::set(&mut draft.legacy_conditions, condition, cx.now);
    let _ = cx.matched.set(result.nodes);
    draft.node_refs = Some(result.references);
}

fn refs_hash(refs: &[NodeReference]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for r in refs {
        for b in r.name.bytes().chain([0]).chain(r.uid.bytes()).chain([0]) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// `deleteRetiredNodes`: Nodes in nodeRefs whose providerID is no longer listed.
fn delete_retired_nodes(
    cx: &Ctx<'_>,
    workload: &Scope,
    node_refs: &[NodeReference],
    list: &[String],
    plan: &mut Plan,
) {
    if node_refs.is_empty() {
        return;
    }
    let listed: FnvSet<'_> = list
        .iter()
        .map(String::as_str)
        .filter(|p| !p.is_empty())
        .collect();
    for r in node_refs {
        let Some(node) = cx.node_by_name(&r.name) else {
            continue;
        };
        let Some(pid) = node.provider_id.as_deref().filter(|p| !p.is_empty()) else {
            continue;
        };
        if cx.store.has_unreadable()
            && cx
                .store
                .unreadable(&ObjectKey::new(workload.clone(), Kind::Node, "", &r.name))
                .is_some()
        {
            // Its providerID may no longer be what was last read.
            continue;
        }
        if listed.contains(pid) || node.meta.is_deleting() {
            continue;
        }
        let attempt = cx.memory.node_deletions.get(&r.name);
        if let Some(PoolNodeDeletion::Failed {
            retry_not_before: at,
            ..
        }) = attempt
            && *at > cx.now
        {
            let node = ObjectKey::new(workload.clone(), Kind::Node, "", &r.name);
            plan.wake_at(*at, PoolWake::NodeDeletionRetry, Some(node));
            continue;
        }
        if attempt.is_some_and(PoolNodeDeletion::is_deleted) {
            continue;
        }
        plan_delete_node(
            plan,
            workload,
            &r.name,
            format!(
                "providerID {pid} of Node {} left the providerIDList of MachinePool {}",
                r.name,
                cx.pool_name()
            ),
        );
    }
}

/// The first object the pool's decisions depend on that the API shows but the controllers
/// cannot read: the pool, its Cluster, its bootstrap config and infrastructure pool.
fn unreadable_dependency(cx: &Ctx<'_>) -> Option<(ObjectKey, String)> {
    let store = cx.store;
    if !store.has_unreadable() {
        return None;
    }
    let mp = cx.mp;
    let ns = &mp.meta.namespace;
    [
        Some(cx.key.clone()),
        Some(ObjectKey::management(Kind::Cluster, ns, &mp.cluster_name)),
        Some(mp.infrastructure_ref.key_in(ns)),
        mp.bootstrap_config_ref.as_ref().map(|r| r.key_in(ns)),
    ]
    .into_iter()
    .flatten()
    .find_map(|k| store.unreadable(&k).map(|p| (k.clone(), p.to_string())))
}

/// Plans nothing but a Warning event (once per problem) and the `ObjectsReadable=False`
/// condition while `unknown` cannot be read.
fn wait_for_readable(cx: &Ctx<'_>, unknown: (ObjectKey, String), plan: &mut Plan) {
    let message = format!(
        "{}; the MachinePool waits until it can be read",
        crate::store::unreadable_message(&unknown.0, &unknown.1)
    );
    tracing::warn!(pool = %cx.pool_name(), "{message}");
    if cx.memory.unreadable.as_ref() != Some(&unknown) {
        plan.issue(
            Action::RecordEvent {
                regarding: cx.pool_target(),
                type_: EventType::Warning,
                reason: crate::store::OBJECT_UNREADABLE.to_string(),
                message: message.clone(),
            },
            message.clone(),
        );
    }
    // The pool's own conditions are not written from a reading it distrusts; otherwise once
    // per problem (an answer does not change the reading the store keeps).
    let mp = cx.mp;
    let written = mp.conditions.current(crate::store::OBJECTS_READABLE);
    if unknown.0 != *cx.key
        && cx.memory.unreadable.as_ref() != Some(&unknown)
        && written
            .is_none_or(|c| c.reason != crate::store::OBJECT_UNREADABLE || c.message != message)
    {
        let mut conditions = mp.conditions.clone();
        let condition = Condition::new(
            crate::store::OBJECTS_READABLE,
            ConditionStatus::False,
            crate::store::OBJECT_UNREADABLE,
            &message,
        );
        cond::set(&mut conditions.current, condition, cx.now);
        plan.issue(
            Action::SetCondition {
                target: cx.pool_target(),
                conditions,
                summary: format!(
                    "{}=False (ObjectUnreadable)",
                    crate::store::OBJECTS_READABLE
                ),
            },
            message,
        );
    }
    plan.unreadable = Some(unknown);
}

fn plan_delete_node(plan: &mut Plan, workload: &Scope, name: &str, reason: String) {
    plan.commands.push(Planned {
        action: Action::DeleteNode {
            node: Target {
                key: ObjectKey::new(workload.clone(), Kind::Node, "", name),
                api_version: "v1".to_string(),
            },
        },
        reason,
        node_deletion: Some(name.to_string()),
    });
}

/// §3.6 `updateStatus`: the v1beta2 counters and `versions`.
fn update_status(cx: &Ctx<'_>, infra: &External, draft: &mut Draft) {
    let mp = cx.mp;
    let has_machines = infra
        .infrastructure_machine_kind
        .as_deref()
        .is_some_and(|k| !k.is_empty());
    if !has_machines {
        draft.ready = draft.replicas;
        draft.available = draft.replicas;
        draft.up_to_date = mp.replicas;
        let workload = cx.workload();
        if cx.store.is_synced(&workload) {
            let versions: Vec<String> = match cx.matched.get() {
                Some(nodes) => nodes
                    .iter()
                    .filter_map(|n| n.kubelet_version.clone())
                    .collect(),
                None => draft
                    .node_refs(mp)
                    .iter()
                    .filter_map(|r| cx.node_by_name(&r.name))
                    .filter(|n| n.provider_id.as_deref().is_some_and(|p| !p.is_empty()))
                    .filter_map(|n| n.kubelet_version.clone())
                    .collect(),
            };
            draft.versions = aggregate_versions(versions.into_iter());
        }
        return;
    }
    let machines = pool_machines(cx);
    let count = |t: &str| {
        machines
            .iter()
            .filter(|m| m.conditions.current(t).is_some_and(Condition::is_true))
            .count() as i32
    };
    draft.ready = Some(count("Ready"));
    draft.available = Some(count("Available"));
    draft.up_to_date = Some(count("UpToDate"));
    draft.versions =
        aggregate_versions(machines.iter().filter_map(|m| m.kubernetes_version.clone()));
}

/// `[{version, replicas}]` ordered by version string; empty versions are skipped.
fn aggregate_versions(versions: impl Iterator<Item = String>) -> Vec<(String, i32)> {
    let mut counts: std::collections::BTreeMap<String, i32> = Default::default();
    for v in versions.filter(|v| !v.is_empty()) {
        *counts.entry(v).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// §3.8 with Part 1 decisions 9 and 10: provider objects first, then every Node in nodeRefs,
/// then the finalizer.
fn reconcile_delete(cx: &Ctx<'_>, plan: &mut Plan) {
    let mp = cx.mp;
    let mut waiting = false;
    let refs = mp
        .bootstrap_config_ref
        .iter()
        .map(|r| (r, true))
        .chain([(&mp.infrastructure_ref, false)]);
    for (r, bootstrap) in refs {
        let (key, found) = cx.external(r);
        let Some(obj) = found else { continue };
        waiting = true;
        if obj.meta.is_deleting() || cx.memory.deleted_externals.contains(&key) {
            continue;
        }
        let target = Target {
            key,
            api_version: obj.api_version.clone(),
        };
        let reason = format!("MachinePool {} is being deleted", cx.pool_name());
        let action = if bootstrap {
            Action::DeleteBootstrap { target }
        } else {
            Action::DeleteInfrastructure { target }
        };
        plan.issue(action, reason);
    }
    if waiting {
        tracing::info!(
            pool = %cx.pool_name(),
            "Waiting for the BootstrapConfig and InfrastructureMachinePool to be deleted"
        );
        return;
    }
    let workload = cx.workload();
    let refs = &mp.status.node_refs;
    if !refs.is_empty() && !cx.store.is_synced(&workload) {
        tracing::info!(pool = %cx.pool_name(), "Waiting for the workload cluster cache to delete Nodes");
        return;
    }
    let timeout = mp
        .node_deletion_timeout
        .unwrap_or(super::NODE_DELETION_TIMEOUT_DEFAULT);
    let deleted_at = mp.meta.deletion_timestamp.unwrap_or(cx.now);
    // Zero waits forever; negative is an invalid spec and gives nothing up either.
    let timeout_passed = timeout > Duration::ZERO && deleted_at + timeout < cx.now;
    let mut pending = false;
    for r in refs {
        if cx.store.has_unreadable()
            && cx
                .store
                .unreadable(&ObjectKey::new(workload.clone(), Kind::Node, "", &r.name))
                .is_some()
        {
            // Unknown is not a Node to delete yet: the deletion waits for it to read.
            pending = true;
            continue;
        }
        let node = cx.node_by_name(&r.name);
        let attempt = cx.memory.node_deletions.get(&r.name);
        if node.is_none() {
            if attempt.is_some() {
                plan.forget_nodes.push(r.name.clone());
            }
            continue;
        }
        let facts = NodeDeleteFacts {
            node_deleting: node.is_some_and(|n| n.meta.is_deleting()),
            first_try: attempt.map(PoolNodeDeletion::first_try),
            succeeded: attempt.is_some_and(PoolNodeDeletion::is_deleted),
            retry_not_before: attempt.and_then(PoolNodeDeletion::retry_not_before),
            timeout_passed,
            now: cx.now,
        };
        match node_delete_step(&facts) {
            NodeDeleteStep::Done => {}
            NodeDeleteStep::GiveUp => tracing::info!(
                pool = %cx.pool_name(),
                node = %r.name,
                "NodeDeleteTimeout passed, skipping Node deletion"
            ),
            NodeDeleteStep::Delete => {
                pending = true;
                plan_delete_node(
                    plan,
                    &workload,
                    &r.name,
                    format!("MachinePool {} is being deleted", cx.pool_name()),
                );
            }
            NodeDeleteStep::WaitUntil(at) => {
                pending = true;
                let node = ObjectKey::new(workload.clone(), Kind::Node, "", &r.name);
                plan.wake_at(at, PoolWake::NodeDeletionRetry, Some(node));
            }
        }
    }
    if pending || cx.memory.finalizer_released {
        return;
    }
    plan.issue(
        Action::RemoveFinalizer {
            target: cx.pool_target(),
            finalizer: MACHINE_POOL_FINALIZER.to_string(),
        },
        format!(
            "BootstrapConfig, InfrastructureMachinePool and Nodes of MachinePool {} are gone",
            cx.pool_name()
        ),
    );
}

/// Pool spec, status and conditions: only what differs from what is observed.
fn write_pool(cx: &Ctx<'_>, mut draft: Draft, plan: &mut Plan) {
    let mp = cx.mp;
    let target = cx.pool_target();
    if let Some((merge, summary)) = draft.spec_patch(mp) {
        plan.issue(
            Action::PatchSpec {
                target: target.clone(),
                merge: JsonText::from_value(&merge),
                summary: summary.clone(),
            },
            format!("MachinePool {}: {summary}", cx.pool_name()),
        );
    }
    if let Some((merge, summary)) = draft.status_patch(mp) {
        plan.issue(
            Action::PatchStatus {
                target: target.clone(),
                merge: JsonText::from_value(&merge),
                summary: summary.clone(),
            },
            format!("MachinePool {}: {summary}", cx.pool_name()),
        );
    }
    let legacy = std::mem::take(&mut draft.legacy_conditions);
    let conditions = cond::finish(&mp.conditions, legacy, cx.now);
    if conditions != mp.conditions {
        let summary = cond::summary_of_change(&mp.conditions, &conditions);
        plan.issue(
            Action::SetCondition {
                target,
                conditions,
                summary: summary.clone(),
            },
            format!("MachinePool {}: {summary}", cx.pool_name()),
        );
    }
}
