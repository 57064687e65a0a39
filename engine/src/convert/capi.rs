//! The core CAPI kinds (`cluster.x-k8s.io`), in both API versions. Field paths follow
//! `engine/docs/capi.md` §1.8, §2.8, §3.9 and the CRDs vendored in `adapters/fakeapi/src/apiserver/crds/`.

use super::ConvertError;
use super::common::{
    capi_conditions, label_selector, object_meta, object_reference, opt_label_selector,
    provider_reference,
};
use super::field::At;
use crate::model::{
    ApiVersion, Cluster, DeletionTimes, Machine, MachineDeployment, MachineDrainRule,
    MachineHealthCheck, MachineHealthCheckStatus, MachinePool, MachinePoolStatus,
    MachineSelectorEntry, MachineSet, NodeReference, PodSelectorEntry, UnhealthyCondition,
};
use crate::time::Duration;

pub(crate) fn cluster(root: &At, version: ApiVersion) -> Result<Cluster, ConvertError> {
    let meta = object_meta(root)?;
    let spec = root.get("spec").object()?;
    let control_plane_ref =
        provider_reference(&spec.get("controlPlaneRef"), version, &meta.namespace)?;
    Ok(Cluster {
        version,
        paused: spec.get("paused").bool_or_false()?,
        control_plane_ref,
        conditions: capi_conditions(root, version)?,
        meta,
    })
}

/// A timeout in the object's version: a Go duration string in v1beta1 (`spec.nodeDrainTimeout`),
/// whole seconds in v1beta2 (`spec.deletion.nodeDrainTimeoutSeconds`).
fn timeout(
    spec: &At,
    version: ApiVersion,
    v1beta1_name: &'static str,
    v1beta2_name: &'static str,
) -> Result<Option<Duration>, ConvertError> {
    match version {
        ApiVersion::V1Beta1 => spec.get(v1beta1_name).opt_go_duration(),
        ApiVersion::V1Beta2 => spec
            .get("deletion")
            .object()?
            .get(v1beta2_name)
            .opt_seconds(),
    }
}

pub(crate) fn machine(root: &At, version: ApiVersion) -> Result<Machine, ConvertError> {
    let meta = object_meta(root)?;
    let spec = root.get("spec").object()?;
    let status = root.get("status").object()?;
    let bootstrap = spec.get("bootstrap").object()?;
    let infra_at = spec.get("infrastructureRef");
    let infrastructure_ref = provider_reference(&infra_at, version, &meta.namespace)?
        .ok_or_else(|| infra_at.error("required"))?;
    let deletion = status.get("deletion").object()?;
    let (infrastructure_ready, failure) = match version {
        ApiVersion::V1Beta1 => (status.get("infrastructureReady"), status.clone()),
        ApiVersion::V1Beta2 => (
            status.at("initialization.infrastructureProvisioned"),
            status.at("deprecated.v1beta1"),
        ),
    };
    Ok(Machine {
        version,
        cluster_name: spec.get("clusterName").required_str()?,
        bootstrap_config_ref: provider_reference(
            &bootstrap.get("configRef"),
            version,
            &meta.namespace,
        )?,
        bootstrap_data_secret_name: bootstrap.get("dataSecretName").opt_str()?,
        infrastructure_ref,
        provider_id: spec.get("providerID").opt_str()?,
        kubernetes_version: spec.get("version").opt_str()?,
        node_drain_timeout: timeout(
            &spec,
            version,
            "nodeDrainTimeout",
            "nodeDrainTimeoutSeconds",
        )?,
        node_volume_detach_timeout: timeout(
            &spec,
            version,
            "nodeVolumeDetachTimeout",
            "nodeVolumeDetachTimeoutSeconds",
        )?,
        node_deletion_timeout: timeout(
            &spec,
            version,
            "nodeDeletionTimeout",
            "nodeDeletionTimeoutSeconds",
        )?,
        node_ref: status.get("nodeRef").object()?.get("name").opt_str()?,
        phase: status.get("phase").opt_str()?,
        deletion: DeletionTimes {
            node_drain_start: deletion.get("nodeDrainStartTime").opt_timestamp()?,
            wait_for_node_volume_detach_start: deletion
                .get("waitForNodeVolumeDetachStartTime")
                .opt_timestamp()?,
            wait_for_pre_drain_hook_start: deletion
                .get("waitForPreDrainHookStartTime")
                .opt_timestamp()?,
            wait_for_pre_terminate_hook_start: deletion
                .get("waitForPreTerminateHookStartTime")
                .opt_timestamp()?,
        },
        infrastructure_ready: infrastructure_ready.bool_or_false()?,
        failure_reason: failure.object()?.get("failureReason").opt_str()?,
        failure_message: failure.get("failureMessage").opt_str()?,
        conditions: capi_conditions(root, version)?,
        meta,
    })
}

pub(crate) fn machine_set(root: &At, version: ApiVersion) -> Result<MachineSet, ConvertError> {
    let spec = root.get("spec").object()?;
    Ok(MachineSet {
        meta: object_meta(root)?,
        version,
        cluster_name: spec.get("clusterName").str_or_empty()?,
        replicas: spec.get("replicas").opt_i32()?,
        selector: label_selector(&spec.get("selector"))?,
    })
}

pub(crate) fn machine_deployment(
    root: &At,
    version: ApiVersion,
) -> Result<MachineDeployment, ConvertError> {
    let spec = root.get("spec").object()?;
    let max_in_flight = match version {
        ApiVersion::V1Beta1 => spec.at("strategy.remediation.maxInFlight"),
        ApiVersion::V1Beta2 => spec.at("remediation.maxInFlight"),
    };
    Ok(MachineDeployment {
        meta: object_meta(root)?,
        version,
        cluster_name: spec.get("clusterName").str_or_empty()?,
        replicas: spec.get("replicas").opt_i32()?,
        remediation_max_in_flight: max_in_flight.opt_int_or_string()?,
    })
}

/// `unhealthyConditions[]`-style lists: `{type, status, timeout}` in v1beta1 (Go duration),
/// `{type, status, timeoutSeconds}` in v1beta2. An absent timeout reads as zero.
fn unhealthy_conditions(
    at: &At,
    version: ApiVersion,
) -> Result<Vec<UnhealthyCondition>, ConvertError> {
    at.items()?
        .iter()
        .map(|item| {
            let item = item.object()?;
            let timeout = match version {
                ApiVersion::V1Beta1 => item.get("timeout").opt_go_duration()?,
                ApiVersion::V1Beta2 => item.get("timeoutSeconds").opt_seconds()?,
            };
            Ok(UnhealthyCondition {
                type_: item.get("type").str_or_empty()?,
                status: item.get("status").str_or_empty()?,
                timeout: timeout.unwrap_or(Duration::ZERO),
            })
        })
        .collect()
}

pub(crate) fn machine_health_check(
    root: &At,
    version: ApiVersion,
) -> Result<MachineHealthCheck, ConvertError> {
    let meta = object_meta(root)?;
    let spec = root.get("spec").object()?;
    let status = root.get("status").object()?;
    let (node_conditions, machine_conditions, startup, max_unhealthy, range, template) =
        match version {
            ApiVersion::V1Beta1 => (
                spec.get("unhealthyConditions"),
                spec.get("unhealthyMachineConditions"),
                spec.get("nodeStartupTimeout").opt_go_duration()?,
                spec.get("maxUnhealthy"),
                spec.get("unhealthyRange"),
                spec.get("remediationTemplate"),
            ),
            ApiVersion::V1Beta2 => {
                let checks = spec.get("checks").object()?;
                let remediation = spec.get("remediation").object()?;
                let trigger_if = remediation.get("triggerIf").object()?;
                (
                    checks.get("unhealthyNodeConditions"),
                    checks.get("unhealthyMachineConditions"),
                    checks.get("nodeStartupTimeoutSeconds").opt_seconds()?,
                    trigger_if.get("unhealthyLessThanOrEqualTo"),
                    trigger_if.get("unhealthyInRange"),
                    remediation.get("templateRef"),
                )
            }
        };
    Ok(MachineHealthCheck {
        version,
        cluster_name: spec.get("clusterName").required_str()?,
        selector: label_selector(&spec.get("selector"))?,
        unhealthy_node_conditions: unhealthy_conditions(&node_conditions, version)?,
        unhealthy_machine_conditions: unhealthy_conditions(&machine_conditions, version)?,
        node_startup_timeout: startup,
        max_unhealthy: max_unhealthy.opt_int_or_string()?,
        unhealthy_range: range.opt_str()?,
        // Both versions name the template by apiVersion; its namespace is the MHC's.
        remediation_template: object_reference(&template, &meta.namespace)?,
        conditions: capi_conditions(root, version)?,
        status: MachineHealthCheckStatus {
            expected_machines: status.get("expectedMachines").opt_i32()?,
            current_healthy: status.get("currentHealthy").opt_i32()?,
            remediations_allowed: status.get("remediationsAllowed").opt_i32()?,
            targets: status.get("targets").str_list()?,
        },
        meta,
    })
}

pub(crate) fn machine_pool(root: &At, version: ApiVersion) -> Result<MachinePool, ConvertError> {
    let meta = object_meta(root)?;
    let spec = root.get("spec").object()?;
    let template = spec.get("template").object()?;
    let template_meta = template.get("metadata").object()?;
    let template_spec = template.get("spec").object()?;
    let bootstrap = template_spec.get("bootstrap").object()?;
    let infra_at = template_spec.get("infrastructureRef");
    let infrastructure_ref = provider_reference(&infra_at, version, &meta.namespace)?
        .ok_or_else(|| infra_at.error("required"))?;
    let min_ready_seconds = match version {
        ApiVersion::V1Beta1 => spec.get("minReadySeconds"),
        ApiVersion::V1Beta2 => template_spec.get("minReadySeconds"),
    };
    Ok(MachinePool {
        version,
        cluster_name: spec.get("clusterName").required_str()?,
        replicas: spec.get("replicas").opt_i32()?,
        bootstrap_config_ref: provider_reference(
            &bootstrap.get("configRef"),
            version,
            &meta.namespace,
        )?,
        bootstrap_data_secret_name: bootstrap.get("dataSecretName").opt_str()?,
        infrastructure_ref,
        provider_id_list: spec.get("providerIDList").str_list()?,
        min_ready_seconds: min_ready_seconds.opt_i32()?,
        node_deletion_timeout: timeout(
            &template_spec,
            version,
            "nodeDeletionTimeout",
            "nodeDeletionTimeoutSeconds",
        )?,
        template_labels: template_meta.get("labels").str_map()?,
        template_annotations: template_meta.get("annotations").str_map()?,
        status: machine_pool_status(&root.get("status").object()?, version)?,
        conditions: capi_conditions(root, version)?,
        meta,
    })
}

fn machine_pool_status(
    status: &At,
    version: ApiVersion,
) -> Result<MachinePoolStatus, ConvertError> {
    // `legacy` holds the v1beta1 counters and failure fields, `current` the v1beta2 counters.
    let (legacy, current, bootstrap_created, infra_provisioned) = match version {
        ApiVersion::V1Beta1 => (
            status.clone(),
            status.get("v1beta2").object()?,
            status.get("bootstrapReady"),
            status.get("infrastructureReady"),
        ),
        ApiVersion::V1Beta2 => (
            status.at("deprecated.v1beta1").object()?,
            status.clone(),
            status.at("initialization.bootstrapDataSecretCreated"),
            status.at("initialization.infrastructureProvisioned"),
        ),
    };
    let node_refs = status
        .get("nodeRefs")
        .items()?
        .iter()
        .map(|item| {
            let item = item.object()?;
            Ok(NodeReference {
                name: item.get("name").str_or_empty()?,
                uid: item.get("uid").str_or_empty()?,
            })
        })
        .collect::<Result<_, ConvertError>>()?;
    let versions = status
        .get("versions")
        .items()?
        .iter()
        .map(|item| {
            let item = item.object()?;
            Ok((
                item.get("version").str_or_empty()?,
                item.get("replicas").opt_i32()?.unwrap_or(0),
            ))
        })
        .collect::<Result<_, ConvertError>>()?;
    Ok(MachinePoolStatus {
        replicas: status.get("replicas").opt_i32()?,
        legacy_ready_replicas: legacy.get("readyReplicas").opt_i32()?,
        legacy_available_replicas: legacy.get("availableReplicas").opt_i32()?,
        legacy_unavailable_replicas: legacy.get("unavailableReplicas").opt_i32()?,
        ready_replicas: current.get("readyReplicas").opt_i32()?,
        available_replicas: current.get("availableReplicas").opt_i32()?,
        up_to_date_replicas: current.get("upToDateReplicas").opt_i32()?,
        node_refs,
        phase: status.get("phase").opt_str()?,
        bootstrap_data_secret_created: bootstrap_created.bool_or_false()?,
        infrastructure_provisioned: infra_provisioned.bool_or_false()?,
        failure_reason: legacy.get("failureReason").opt_str()?,
        failure_message: legacy.get("failureMessage").opt_str()?,
        versions,
    })
}

/// `MachineDrainRule` has the same shape in both versions.
pub(crate) fn machine_drain_rule(root: &At) -> Result<MachineDrainRule, ConvertError> {
    let spec = root.get("spec").object()?;
    let drain = spec.get("drain").object()?;
    let machines = spec
        .get("machines")
        .items()?
        .iter()
        .map(|item| {
            let item = item.object()?;
            Ok(MachineSelectorEntry {
                selector: opt_label_selector(&item.get("selector"))?,
                cluster_selector: opt_label_selector(&item.get("clusterSelector"))?,
            })
        })
        .collect::<Result<_, ConvertError>>()?;
    let pods = spec
        .get("pods")
        .items()?
        .iter()
        .map(|item| {
            let item = item.object()?;
            Ok(PodSelectorEntry {
                selector: opt_label_selector(&item.get("selector"))?,
                namespace_selector: opt_label_selector(&item.get("namespaceSelector"))?,
            })
        })
        .collect::<Result<_, ConvertError>>()?;
    Ok(MachineDrainRule {
        meta: object_meta(root)?,
        behavior: drain.get("behavior").str_or_empty()?,
        order: drain.get("order").opt_i32()?,
        machines,
        pods,
    })
}
