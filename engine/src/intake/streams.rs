//! Which resource types the controllers watch, in which cluster.

use crate::model::Scope;

/// One watched resource type in one cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamKey {
    pub scope: Scope,
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl StreamKey {
    pub fn new(scope: &Scope, group: &str, version: &str, kind: &str) -> Self {
        StreamKey {
            scope: scope.clone(),
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// The stream's name within its scope (`cluster.x-k8s.io/Machine`); the version is not
    /// part of it, so a provider stream is known before discovery picks its version.
    pub fn id(&self) -> String {
        stream_id(&self.group, &self.kind)
    }
}

pub fn stream_id(group: &str, kind: &str) -> String {
    format!("{group}/{kind}")
}

/// The CAPI kinds the engine reads from the management cluster (v1beta2, the storage version).
pub fn management_streams() -> Vec<StreamKey> {
    let m = Scope::Management;
    [
        "Cluster",
        "Machine",
        "MachineSet",
        "MachineDeployment",
        "MachineHealthCheck",
        "MachinePool",
        "MachineDrainRule",
    ]
    .iter()
    .map(|kind| StreamKey::new(&m, crate::convert::CAPI_GROUP, "v1beta2", kind))
    .collect()
}

/// The kinds the engine reads from a workload cluster.
pub fn workload_streams(scope: &Scope) -> Vec<StreamKey> {
    [
        ("", "v1", "Node"),
        ("", "v1", "Pod"),
        ("", "v1", "Namespace"),
        ("", "v1", "PersistentVolume"),
        ("", "v1", "PersistentVolumeClaim"),
        ("apps", "v1", "DaemonSet"),
        ("policy", "v1", "PodDisruptionBudget"),
        ("storage.k8s.io", "v1", "VolumeAttachment"),
    ]
    .iter()
    .map(|(g, v, k)| StreamKey::new(scope, g, v, k))
    .collect()
}
