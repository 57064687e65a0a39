//! What the pool does while an object it decides on cannot be read: it waits, and says so.

use super::conditions::{self as cond};
use super::reconcile::{Ctx, Plan};
use crate::command::{Action, ControllerId, EventType};
use crate::decision::Decision;
use crate::model::{Condition, ConditionStatus, Conditions, Kind, ObjectKey};

/// The first object the pool's decisions depend on that the API shows but the controllers
/// cannot read: the pool, its Cluster, its bootstrap config and infrastructure pool.
pub(super) fn unreadable_dependency(cx: &Ctx<'_>) -> Option<(ObjectKey, String)> {
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
pub(super) fn wait_for_readable(cx: &Ctx<'_>, unknown: (ObjectKey, String), plan: &mut Plan) {
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
    // The pool's own conditions are not written from a reading it distrusts (its answer
    // would not change the reading the store keeps: a write at every answer).
    let mp = cx.mp;
    if unknown.0 == *cx.key {
        plan.unreadable = Some(unknown);
        return;
    }
    let mut conditions = mp.conditions.clone();
    let condition = Condition::new(
        crate::store::OBJECTS_READABLE,
        ConditionStatus::False,
        crate::store::OBJECT_UNREADABLE,
        &message,
    );
    cond::set(&mut conditions.current, condition, cx.now);
    let readable = conditions.current(crate::store::OBJECTS_READABLE).cloned();
    let decided = Conditions {
        current: readable.into_iter().collect(),
        legacy: Vec::new(),
    };
    plan.decided = Some(Decision::whole(
        ControllerId::Pool,
        cx.key.clone(),
        decided,
        Vec::new(),
    ));
    let written = mp.conditions.current(crate::store::OBJECTS_READABLE);
    if written.is_none_or(|c| c.reason != crate::store::OBJECT_UNREADABLE || c.message != message) {
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
