//! The pool's deletion (§3.8 with Part 1 decisions 9 and 10): provider objects first, then
//! every Node in nodeRefs, then the finalizer.

use super::deletion::{NodeDeleteFacts, NodeDeleteStep, node_delete_step};
use super::reconcile::{Ctx, Plan};
use super::{PoolNodeDeletion, PoolWake};
use crate::command::{Action, Target};
use crate::model::{Kind, MACHINE_POOL_FINALIZER, ObjectKey};
use crate::time::Duration;

/// §3.8 with Part 1 decisions 9 and 10: provider objects first, then every Node in nodeRefs,
/// then the finalizer.
pub(super) fn reconcile_delete(cx: &Ctx<'_>, plan: &mut Plan) {
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
        plan.waits_on_workload = true;
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
        let Some(node) = cx.node_by_name(&r.name) else {
            continue;
        };
        let attempt = cx.memory.node_deletions.get(&r.name);
        let facts = NodeDeleteFacts {
            node_deleting: node.meta.is_deleting(),
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
                plan.delete_node(
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
