//! The pool's ownership: a Cluster owner reference and cluster-name label on the pool
//! (`reconcileSetOwnerAndLabels`), a controller reference on its provider objects
//! (`reconcileExternal`).

use super::reconcile::{Ctx, Plan};
use crate::command::{Action, JsonText, Target};
use crate::model::{CLUSTER_NAME_LABEL, Cluster, External, ObjectKey, OwnerReference};
use serde_json::{Map, Value, json};

/// Owner references written by the pool name the hub version; GC only looks at the group.
const CAPI_HUB_API_VERSION: &str = "cluster.x-k8s.io/v1beta2";

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

pub(super) fn owner_ref_json(o: &OwnerReference) -> Value {
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

/// `reconcileSetOwnerAndLabels`: cluster-name label and a Cluster owner reference on the pool.
pub(super) fn set_owner_and_labels(cx: &Ctx<'_>, cluster: &Cluster, plan: &mut Plan) {
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
pub(super) fn adopt(cx: &Ctx<'_>, key: &ObjectKey, obj: &External, plan: &mut Plan) {
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
