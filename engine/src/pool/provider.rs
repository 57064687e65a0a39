//! The pool's provider objects: the bootstrap config's data secret (§3.2) and the
//! InfraMachinePool's readiness, providerIDList and replicas (§3.3).

use super::conditions::{self as cond};
use super::draft::Draft;
use super::machines::reconcile_machines;
use super::ownership::adopt;
use super::reconcile::{Ctx, Plan};
use crate::model::{External, Severity};

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
pub(super) fn reconcile_bootstrap(cx: &Ctx<'_>, draft: &mut Draft, plan: &mut Plan) {
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
pub(super) fn reconcile_infrastructure<'a>(
    cx: &Ctx<'a>,
    draft: &mut Draft,
    plan: &mut Plan,
) -> Option<&'a External> {
    let mp = cx.mp;
    let infra_ref = &mp.infrastructure_ref;
    let key = infra_ref.key_in(&mp.meta.namespace);
    let Some(infra) = cx.store.external(&key) else {
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
