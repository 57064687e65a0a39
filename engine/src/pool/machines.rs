//! The pool's Machines (§3.7): one per infrastructure machine, kept labelled and marked
//! `UpToDate`.

use super::conditions::{self as cond};
use super::ownership::owner_ref_json;
use super::reconcile::{Ctx, Plan};
use crate::command::{Action, JsonText, Target};
use crate::model::*;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// The pool-name label value: the pool's name, hashed when it is not a valid label value.
fn pool_label_value(name: &str) -> std::borrow::Cow<'_, str> {
    crate::model::format_label_value(name)
}

/// Machines that belong to the pool: labelled with its name and cluster, not controlled by
/// some other owner.
pub(super) fn pool_machines<'c, 'a>(cx: &'c Ctx<'a>) -> &'c [&'a Machine] {
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
pub(super) fn reconcile_machines(cx: &Ctx<'_>, infra: &External, plan: &mut Plan) {
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
        if let Some(m) = cx.store.machine(&machine_key) {
            if let Some((merge, summary)) = machine_update(mp, m, version().as_deref()) {
                plan.issue(
                    Action::PatchSpec {
                        target: Target::capi(machine_key, m.version),
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
                target: Target::capi(machine_key, mp.version),
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
        let target = Target::capi(
            ObjectKey::management(Kind::Machine, &m.meta.namespace, &m.meta.name),
            m.version,
        );
        let summary = format!("{UP_TO_DATE}={} ({reason})", status.as_str());
        // An adopted pool's Machines are still CAPI's Machine controller's, which writes their
        // other conditions: the lists as read, with their resourceVersion as a precondition.
        let guard = crate::ownership::adopted(&cx.mp.meta).then_some(m.meta.resource_version);
        let action = Action::conditions_write(target, conditions, summary, guard);
        plan.issue(
            action,
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
