use super::{ApiVersion, Conditions, LabelSelector, ObjectMeta, ObjectRef};
use crate::time::{Duration, Timestamp};
use serde::{Deserialize, Serialize};

pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
pub const MACHINE_POOL_FINALIZER: &str = "machinepool.cluster.x-k8s.io";
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
pub const POOL_NAME_LABEL: &str = "cluster.x-k8s.io/pool-name";
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
pub const SKIP_REMEDIATION_ANNOTATION: &str = "cluster.x-k8s.io/skip-remediation";
pub const REMEDIATE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/remediate-machine";
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io";
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
pub const EXCLUDE_DRAIN_ANNOTATION: &str = "machine.cluster.x-k8s.io/exclude-node-draining";
pub const EXCLUDE_VOLUME_DETACH_ANNOTATION: &str =
    "machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach";
pub const REPLICAS_MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/replicas-managed-by";
pub const DRAIN_LABEL: &str = "cluster.x-k8s.io/drain";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub meta: ObjectMeta,
    pub version: ApiVersion,
    pub paused: bool,
    pub control_plane_ref: Option<ObjectRef>,
    pub conditions: Conditions,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionTimes {
    pub node_drain_start: Option<Timestamp>,
    pub wait_for_node_volume_detach_start: Option<Timestamp>,
    pub wait_for_pre_drain_hook_start: Option<Timestamp>,
    pub wait_for_pre_terminate_hook_start: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub meta: ObjectMeta,
    pub version: ApiVersion,
    pub cluster_name: String,
    pub bootstrap_config_ref: Option<ObjectRef>,
    pub bootstrap_data_secret_name: Option<String>,
    pub infrastructure_ref: ObjectRef,
    pub provider_id: Option<String>,
    pub kubernetes_version: Option<String>,
    /// Drain and volume-detach timeouts: `None` or zero means no limit.
    pub node_drain_timeout: Option<Duration>,
    pub node_volume_detach_timeout: Option<Duration>,
    /// `None` means the product default (10 s); zero means retry forever.
    pub node_deletion_timeout: Option<Duration>,
    pub node_ref: Option<String>,
    pub phase: Option<String>,
    pub deletion: DeletionTimes,
    pub infrastructure_ready: bool,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    pub conditions: Conditions,
}

impl Machine {
    pub fn is_control_plane(&self) -> bool {
        self.meta.has_label(CONTROL_PLANE_LABEL)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineSet {
    pub meta: ObjectMeta,
    pub version: ApiVersion,
    pub cluster_name: String,
    pub replicas: Option<i32>,
    pub selector: LabelSelector,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineDeployment {
    pub meta: ObjectMeta,
    pub version: ApiVersion,
    pub cluster_name: String,
    pub replicas: Option<i32>,
    /// `spec.remediation.maxInFlight` (v1beta1 `spec.strategy.remediation.maxInFlight`).
    pub remediation_max_in_flight: Option<IntOrString>,
}

/// Kubernetes `IntOrString`, kept as written so messages can quote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IntOrString {
    Int(i64),
    String(String),
}

impl std::fmt::Display for IntOrString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntOrString::Int(i) => write!(f, "{i}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnhealthyCondition {
    pub type_: String,
    pub status: String,
    pub timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineHealthCheck {
    pub meta: ObjectMeta,
    pub version: ApiVersion,
    pub cluster_name: String,
    pub selector: LabelSelector,
    pub unhealthy_node_conditions: Vec<UnhealthyCondition>,
    pub unhealthy_machine_conditions: Vec<UnhealthyCondition>,
    /// `None` means the default of 10 minutes; zero disables the startup check.
    pub node_startup_timeout: Option<Duration>,
    pub max_unhealthy: Option<IntOrString>,
    pub unhealthy_range: Option<String>,
    pub remediation_template: Option<ObjectRef>,
    pub conditions: Conditions,
    pub status: MachineHealthCheckStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineHealthCheckStatus {
    pub expected_machines: Option<i32>,
    pub current_healthy: Option<i32>,
    pub remediations_allowed: Option<i32>,
    pub targets: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReference {
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachinePool {
    pub meta: ObjectMeta,
    pub version: ApiVersion,
    pub cluster_name: String,
    pub replicas: Option<i32>,
    pub bootstrap_config_ref: Option<ObjectRef>,
    pub bootstrap_data_secret_name: Option<String>,
    pub infrastructure_ref: ObjectRef,
    pub provider_id_list: Vec<String>,
    pub min_ready_seconds: Option<i32>,
    pub node_deletion_timeout: Option<Duration>,
    /// Template labels and annotations, copied onto MachinePool Machines.
    pub template_labels: std::collections::BTreeMap<String, String>,
    pub template_annotations: std::collections::BTreeMap<String, String>,
    pub status: MachinePoolStatus,
    pub conditions: Conditions,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachinePoolStatus {
    pub replicas: Option<i32>,
    /// v1beta1 counters (`status.deprecated.v1beta1.*` in v1beta2).
    pub legacy_ready_replicas: Option<i32>,
    pub legacy_available_replicas: Option<i32>,
    pub legacy_unavailable_replicas: Option<i32>,
    /// v1beta2 counters (`status.v1beta2.*` in v1beta1).
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    pub up_to_date_replicas: Option<i32>,
    pub node_refs: Vec<NodeReference>,
    pub phase: Option<String>,
    pub bootstrap_data_secret_created: bool,
    pub infrastructure_provisioned: bool,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    pub versions: Vec<(String, i32)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineDrainRule {
    pub meta: ObjectMeta,
    /// `Drain`, `Skip`, `WaitCompleted`, or anything else (an error when matched).
    pub behavior: String,
    pub order: Option<i32>,
    pub machines: Vec<MachineSelectorEntry>,
    pub pods: Vec<PodSelectorEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineSelectorEntry {
    pub selector: Option<LabelSelector>,
    pub cluster_selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSelectorEntry {
    pub selector: Option<LabelSelector>,
    pub namespace_selector: Option<LabelSelector>,
}

/// A provider object the engine reads only through contract fields: infrastructure machines
/// and pools, bootstrap configs, control planes, remediation templates and requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct External {
    pub meta: ObjectMeta,
    pub group_kind: super::GroupKind,
    pub api_version: String,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// `status.ready` (v1beta1 contract).
    pub ready: Option<bool>,
    /// `status.initialization.provisioned` (infrastructure, v1beta2 contract).
    pub provisioned: Option<bool>,
    /// `status.initialization.dataSecretCreated` (bootstrap, v1beta2 contract).
    pub data_secret_created: Option<bool>,
    pub data_secret_name: Option<String>,
    pub provider_id_list: Option<Vec<String>>,
    pub status_replicas: Option<i32>,
    pub infrastructure_machine_kind: Option<String>,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    /// `status.externalManagedControlPlane` of a control plane object.
    pub external_managed_control_plane: bool,
    /// `spec.template` of a `*Template` object, as JSON text, for remediation requests.
    pub template_json: Option<String>,
}
