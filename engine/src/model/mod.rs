//! The engine's version-neutral domain model: only the fields the three controllers decide on.
//!
//! Objects are converted from Kubernetes JSON (either CAPI API version) by [`crate::convert`],
//! so the simulator and the kube adapter share one mapping. Everything here is plain data with
//! ordered collections, so the engine state encodes canonically for hashing and snapshots.

mod capi;
mod core;
mod label_value;
mod meta;
mod name;
mod selector;

pub use capi::*;
pub use core::*;
pub use label_value::{format_label_value, is_dns_label, is_valid_label_value, label_key_problem};
pub use meta::*;
pub use name::Name;
pub use selector::*;

use serde::{Deserialize, Serialize};

/// Every object kind the engine observes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Object {
    Cluster(Cluster),
    Machine(Machine),
    MachineSet(MachineSet),
    MachineDeployment(MachineDeployment),
    MachineHealthCheck(MachineHealthCheck),
    MachinePool(MachinePool),
    MachineDrainRule(MachineDrainRule),
    /// Provider objects: InfrastructureMachine(Pool), BootstrapConfig, control planes,
    /// remediation templates and requests.
    External(External),
    Node(Node),
    Pod(Pod),
    PodDisruptionBudget(PodDisruptionBudget),
    DaemonSet(DaemonSet),
    Namespace(Namespace),
    PersistentVolume(PersistentVolume),
    PersistentVolumeClaim(PersistentVolumeClaim),
    VolumeAttachment(VolumeAttachment),
    /// An object the API delivered in a form the controllers cannot read. It stands for the
    /// object's existence only: the store keeps the last good reading and marks the key
    /// unknown ([`crate::store::Store::unreadable`]); it is never stored itself.
    Unreadable(Unreadable),
}

/// `Object::as_machine` and the like, and the [`crate::store::Store`] getters of the same
/// names without `as_`: the one place a stored object is taken for its kind.
macro_rules! object_accessors {
    ($(($variant:ident, $as_fn:ident, $get_fn:ident)),* $(,)?) => {
        impl Object {
            $(
                pub fn $as_fn(&self) -> Option<&$variant> {
                    match self {
                        Object::$variant(o) => Some(o),
                        _ => None,
                    }
                }
            )*
        }

        impl crate::store::Store {
            $(
                pub fn $get_fn(&self, key: &ObjectKey) -> Option<&$variant> {
                    self.get(key).and_then(Object::$as_fn)
                }
            )*
        }
    };
}

object_accessors!(
    (Cluster, as_cluster, cluster),
    (Machine, as_machine, machine),
    (MachineSet, as_machine_set, machine_set),
    (MachineDeployment, as_machine_deployment, machine_deployment),
    (
        MachineHealthCheck,
        as_machine_health_check,
        machine_health_check
    ),
    (MachinePool, as_machine_pool, machine_pool),
    (MachineDrainRule, as_machine_drain_rule, machine_drain_rule),
    (External, as_external, external),
    (Node, as_node, node),
    (Pod, as_pod, pod),
    (
        PodDisruptionBudget,
        as_pod_disruption_budget,
        pod_disruption_budget
    ),
    (DaemonSet, as_daemon_set, daemon_set),
    (Namespace, as_namespace, namespace),
    (PersistentVolume, as_persistent_volume, persistent_volume),
    (
        PersistentVolumeClaim,
        as_persistent_volume_claim,
        persistent_volume_claim
    ),
    (VolumeAttachment, as_volume_attachment, volume_attachment),
);

/// What is known of an object that did not convert: its key and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    pub kind: Kind,
    pub meta: ObjectMeta,
    /// The field and the problem (`status.conditions[0].type: expected a string`).
    pub problem: String,
}

impl Object {
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Object::Cluster(o) => &o.meta,
            Object::Machine(o) => &o.meta,
            Object::MachineSet(o) => &o.meta,
            Object::MachineDeployment(o) => &o.meta,
            Object::MachineHealthCheck(o) => &o.meta,
            Object::MachinePool(o) => &o.meta,
            Object::MachineDrainRule(o) => &o.meta,
            Object::External(o) => &o.meta,
            Object::Node(o) => &o.meta,
            Object::Pod(o) => &o.meta,
            Object::PodDisruptionBudget(o) => &o.meta,
            Object::DaemonSet(o) => &o.meta,
            Object::Namespace(o) => &o.meta,
            Object::PersistentVolume(o) => &o.meta,
            Object::PersistentVolumeClaim(o) => &o.meta,
            Object::VolumeAttachment(o) => &o.meta,
            Object::Unreadable(o) => &o.meta,
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Object::Cluster(_) => Kind::Cluster,
            Object::Machine(_) => Kind::Machine,
            Object::MachineSet(_) => Kind::MachineSet,
            Object::MachineDeployment(_) => Kind::MachineDeployment,
            Object::MachineHealthCheck(_) => Kind::MachineHealthCheck,
            Object::MachinePool(_) => Kind::MachinePool,
            Object::MachineDrainRule(_) => Kind::MachineDrainRule,
            Object::External(o) => Kind::External(o.group_kind.clone()),
            Object::Node(_) => Kind::Node,
            Object::Pod(_) => Kind::Pod,
            Object::PodDisruptionBudget(_) => Kind::PodDisruptionBudget,
            Object::DaemonSet(_) => Kind::DaemonSet,
            Object::Namespace(_) => Kind::Namespace,
            Object::PersistentVolume(_) => Kind::PersistentVolume,
            Object::PersistentVolumeClaim(_) => Kind::PersistentVolumeClaim,
            Object::VolumeAttachment(_) => Kind::VolumeAttachment,
            Object::Unreadable(o) => o.kind.clone(),
        }
    }

    /// The key under which this object is stored, given the cluster it was observed in.
    pub fn key(&self, scope: &Scope) -> ObjectKey {
        let meta = self.meta();
        let kind = self.kind();
        ObjectKey::new(scope.clone(), kind, &meta.namespace, &meta.name)
    }
}
