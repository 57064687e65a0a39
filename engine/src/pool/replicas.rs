//! The pool's nodeRefs and ready/available counts from the workload Nodes (§3.4), the Nodes'
//! metadata, and the deletion of Nodes whose providerID left the list.

use super::conditions::{self as cond};
use super::draft::Draft;
use super::noderefs::{self, NoAvailableNodes, node_patch, node_references};
use super::nodes::FnvSet;
use super::reconcile::{Ctx, Plan};
use super::{PoolNodeDeletion, PoolWake};
use crate::command::{Action, EventType, JsonText, Target};
use crate::model::{Kind, NodeReference, ObjectKey, Scope, Severity};
use crate::time::Duration;

/// §3.4: nodeRefs and ready/available counts from the workload Nodes, Node metadata, and the
/// deletion of Nodes whose providerID left the list.
pub(super) fn reconcile_node_refs(cx: &Ctx<'_>, draft: &mut Draft, plan: &mut Plan) {
    let mp = cx.mp;
    let workload = cx.workload();
    if !cx.store.is_synced(&workload) {
        plan.awaiting_workload_cache = true;
        plan.waits_on_workload = true;
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
        plan.delete_node(
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
