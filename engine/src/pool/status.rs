//! The pool's status counters (§3.6) and the write of what differs from what is observed.

use super::conditions::{self as cond};
use super::draft::Draft;
use super::machines::pool_machines;
use super::reconcile::Ctx;
use super::reconcile::Plan;
use crate::command::{Action, ControllerId, EventType, JsonText};
use crate::decision::Decision;
use crate::model::{Condition, ConditionStatus, Conditions, External, Scope};

/// §3.6 `updateStatus`: the v1beta2 counters and `versions`.
pub(super) fn update_status(cx: &Ctx<'_>, infra: &External, draft: &mut Draft) {
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

/// Pool spec, status and conditions: only what differs from what is observed.
pub(super) fn write_pool(cx: &Ctx<'_>, mut draft: Draft, plan: &mut Plan) {
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
    let mut conditions = cond::finish(&mp.conditions, legacy, cx.now);
    let unreachable = reachability(cx, plan.waits_on_workload, &mut conditions);
    let (set, absent) = cond::decided(&conditions);
    plan.decided = Some(Decision::whole(
        ControllerId::Pool,
        cx.key.clone(),
        set,
        absent,
    ));
    if conditions != mp.conditions {
        let summary = cond::summary_of_change(&mp.conditions, &conditions);
        plan.issue(
            Action::SetCondition {
                target: target.clone(),
                conditions,
                summary: summary.clone(),
            },
            format!("MachinePool {}: {summary}", cx.pool_name()),
        );
        if let Some(message) = unreachable {
            tracing::warn!(pool = %cx.pool_name(), "{message}");
            plan.issue_with_condition(
                Action::RecordEvent {
                    regarding: target,
                    type_: EventType::Warning,
                    reason: crate::connection::EVENT_REASON.to_string(),
                    message: message.clone(),
                },
                message,
            );
        }
    }
}

/// `WorkloadClusterReachable=False` while what `waits` for the workload cluster's cache cannot
/// have it because the cluster cannot be reached, removed otherwise. Returns the message when
/// that condition is news (its Warning event goes with it).
fn reachability(cx: &Ctx<'_>, waits: bool, conditions: &mut Conditions) -> Option<String> {
    use crate::connection::{EVENT_REASON, REACHABLE_CONDITION};
    let why = cx.store.unreachable(cx.workload).filter(|_| waits);
    let Some((why, Scope::Workload(cluster))) = why.zip(Some(cx.workload)) else {
        conditions
            .current
            .retain(|c| c.type_ != REACHABLE_CONDITION);
        return None;
    };
    let message = format!(
        "{}; the MachinePool's Nodes wait until it can be reached",
        why.message(cluster)
    );
    let news = conditions
        .current(REACHABLE_CONDITION)
        .is_none_or(|c| c.status != ConditionStatus::False || c.message != message);
    let condition = Condition::new(
        REACHABLE_CONDITION,
        ConditionStatus::False,
        EVENT_REASON,
        &message,
    );
    cond::set(&mut conditions.current, condition, cx.now);
    news.then_some(message)
}
