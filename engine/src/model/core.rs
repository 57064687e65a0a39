use super::{ConditionStatus, LabelSelector, ObjectMeta};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub const UNINITIALIZED_TAINT: &str = "node.cluster.x-k8s.io/uninitialized";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCondition {
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub last_transition_time: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub meta: ObjectMeta,
    pub provider_id: Option<String>,
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
    pub conditions: Vec<NodeCondition>,
    /// `status.volumesAttached[].name`.
    pub volumes_attached: Vec<String>,
    pub kubelet_version: Option<String>,
}

impl Node {
    pub fn condition(&self, type_: &str) -> Option<&NodeCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
    /// Upstream's "unreachable": a `Ready` condition with status `Unknown` (absent is not).
    pub fn is_unreachable(&self) -> bool {
        self.condition("Ready")
            .is_some_and(|c| c.status == ConditionStatus::Unknown)
    }
    pub fn is_ready(&self) -> bool {
        self.condition("Ready")
            .is_some_and(|c| c.status == ConditionStatus::True)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    pub meta: ObjectMeta,
    pub node_name: Option<String>,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, ...).
    pub phase: String,
    pub has_empty_dir: bool,
    pub termination_grace_period_seconds: Option<i64>,
    /// Names of PersistentVolumeClaims the pod mounts.
    pub pvc_names: Vec<String>,
    pub ready: bool,
}

impl Pod {
    pub fn is_finished(&self) -> bool {
        self.phase == "Succeeded" || self.phase == "Failed"
    }
    pub fn is_mirror(&self) -> bool {
        self.meta.has_annotation(MIRROR_POD_ANNOTATION)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodDisruptionBudget {
    pub meta: ObjectMeta,
    pub selector: LabelSelector,
    pub min_available: Option<super::IntOrString>,
    pub max_unavailable: Option<super::IntOrString>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonSet {
    pub meta: ObjectMeta,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    pub meta: ObjectMeta,
    pub terminating: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistentVolume {
    pub meta: ObjectMeta,
    /// `(driver, volumeHandle)` of a CSI volume.
    pub csi: Option<(String, String)>,
    pub claim_ref: Option<ClaimRef>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistentVolumeClaim {
    pub meta: ObjectMeta,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeAttachment {
    pub meta: ObjectMeta,
    pub node_name: String,
    pub persistent_volume_name: Option<String>,
    pub attached: bool,
}
