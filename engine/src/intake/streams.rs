//! Which resource types the controllers watch, in which cluster.

use crate::model::{Kind, Scope};

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
    [group, "/", kind].concat()
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

/// The kinds the engine always reads from a workload cluster.
pub fn workload_streams(scope: &Scope) -> Vec<StreamKey> {
    vec![workload_stream(scope, &Kind::Node)]
}

/// The kinds a workload cluster is watched for while one of its Machines is being deleted
/// ([`Kind::DRAIN_ONLY`]).
pub fn drain_streams(scope: &Scope) -> Vec<StreamKey> {
    Kind::DRAIN_ONLY
        .iter()
        .map(|kind| workload_stream(scope, kind))
        .collect()
}

fn workload_stream(scope: &Scope, kind: &Kind) -> StreamKey {
    StreamKey::new(scope, kind.group(), "v1", kind.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_drain_stream_names_its_kind_and_none_is_always_watched() {
        let scope = Scope::Workload(crate::model::ClusterName::new("default", "c1"));
        let kinds: Vec<Kind> = drain_streams(&scope)
            .iter()
            .map(|k| Kind::from_group_kind(&k.group, &k.kind))
            .collect();
        assert_eq!(kinds, Kind::DRAIN_ONLY);
        let always: Vec<Kind> = workload_streams(&scope)
            .iter()
            .map(|k| Kind::from_group_kind(&k.group, &k.kind))
            .collect();
        assert_eq!(always, [Kind::Node]);
    }
}
