use super::Name;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Where an object lives: the management cluster, or the workload cluster of a CAPI Cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scope {
    Management,
    /// The workload cluster of the Cluster `namespace/name` in the management cluster.
    Workload(ClusterName),
}

/// A CAPI Cluster's identity in the management cluster. Shared like [`ObjectKey`]: every
/// key of a workload cluster holds one, so a clone is one reference count and two clones
/// compare equal by pointer. Fields read through [`ClusterParts`].
#[derive(Clone)]
pub struct ClusterName(Arc<ClusterParts>);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterParts {
    pub namespace: Name,
    pub name: Name,
}

impl ClusterName {
    pub fn new(namespace: impl Into<Name>, name: impl Into<Name>) -> Self {
        ClusterName(Arc::new(ClusterParts {
            namespace: namespace.into(),
            name: name.into(),
        }))
    }
}

impl std::ops::Deref for ClusterName {
    type Target = ClusterParts;
    fn deref(&self) -> &ClusterParts {
        &self.0
    }
}

impl PartialEq for ClusterName {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for ClusterName {}

impl Ord for ClusterName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for ClusterName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::hash::Hash for ClusterName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl fmt::Debug for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterName")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl Serialize for ClusterName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ClusterName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ClusterParts::deserialize(deserializer).map(|parts| ClusterName(Arc::new(parts)))
    }
}

/// API group and kind of a provider object (`infrastructure.cluster.x-k8s.io`, `DockerMachine`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupKind {
    pub group: String,
    pub kind: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    Cluster,
    Machine,
    MachineSet,
    MachineDeployment,
    MachineHealthCheck,
    MachinePool,
    MachineDrainRule,
    External(GroupKind),
    Node,
    Pod,
    PodDisruptionBudget,
    DaemonSet,
    Namespace,
    PersistentVolume,
    PersistentVolumeClaim,
    VolumeAttachment,
}

/// The API group of each kind this product names, known to the engine or not (the apps kinds
/// that own pods): the one kind → group table. Provider kinds are not in it.
pub const KIND_GROUPS: [(&str, &str); 18] = [
    ("Cluster", "cluster.x-k8s.io"),
    ("Machine", "cluster.x-k8s.io"),
    ("MachineSet", "cluster.x-k8s.io"),
    ("MachineDeployment", "cluster.x-k8s.io"),
    ("MachineHealthCheck", "cluster.x-k8s.io"),
    ("MachinePool", "cluster.x-k8s.io"),
    ("MachineDrainRule", "cluster.x-k8s.io"),
    ("Node", ""),
    ("Pod", ""),
    ("Namespace", ""),
    ("PersistentVolume", ""),
    ("PersistentVolumeClaim", ""),
    ("PodDisruptionBudget", "policy"),
    ("DaemonSet", "apps"),
    ("ReplicaSet", "apps"),
    ("StatefulSet", "apps"),
    ("Deployment", "apps"),
    ("VolumeAttachment", "storage.k8s.io"),
];

/// The group of a kind in [`KIND_GROUPS`].
pub fn group_of_kind(kind: &str) -> Option<&'static str> {
    KIND_GROUPS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, group)| *group)
}

impl Kind {
    /// The kinds only a Machine's drain and volume-detach wait read in a workload cluster.
    /// They are watched there only while one of its Machines is being deleted: they are most
    /// of what a cluster holds (ten pods per Node), and nothing else needs them.
    pub const DRAIN_ONLY: [Kind; 7] = [
        Kind::Pod,
        Kind::Namespace,
        Kind::PersistentVolume,
        Kind::PersistentVolumeClaim,
        Kind::DaemonSet,
        Kind::PodDisruptionBudget,
        Kind::VolumeAttachment,
    ];

    pub fn name(&self) -> &str {
        match self {
            Kind::Cluster => "Cluster",
            Kind::Machine => "Machine",
            Kind::MachineSet => "MachineSet",
            Kind::MachineDeployment => "MachineDeployment",
            Kind::MachineHealthCheck => "MachineHealthCheck",
            Kind::MachinePool => "MachinePool",
            Kind::MachineDrainRule => "MachineDrainRule",
            Kind::External(gk) => &gk.kind,
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
            Kind::DaemonSet => "DaemonSet",
            Kind::Namespace => "Namespace",
            Kind::PersistentVolume => "PersistentVolume",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::VolumeAttachment => "VolumeAttachment",
        }
    }

    pub fn is_cluster_scoped(&self) -> bool {
        matches!(
            self,
            Kind::Node | Kind::Namespace | Kind::PersistentVolume | Kind::VolumeAttachment
        )
    }

    /// The namespace an object of this kind is keyed by: none when the kind is cluster-scoped,
    /// whatever its metadata says.
    pub fn key_namespace<'a>(&self, namespace: &'a str) -> &'a str {
        if self.is_cluster_scoped() {
            ""
        } else {
            namespace
        }
    }

    /// The kind named by `kind` in `group`, as a known kind when it is one.
    pub fn from_group_kind(group: &str, kind: &str) -> Kind {
        Kind::known(group, kind).unwrap_or_else(|| {
            Kind::External(GroupKind {
                group: group.to_string(),
                kind: kind.to_string(),
            })
        })
    }

    /// Whether this is the kind named by `kind` in `group` (what [`Kind::from_group_kind`]
    /// would give), without building one.
    pub fn is(&self, group: &str, kind: &str) -> bool {
        match Kind::known(group, kind) {
            Some(known) => *self == known,
            None => matches!(self, Kind::External(gk) if gk.group == group && gk.kind == kind),
        }
    }

    /// The known kind named `kind`, if `group` is its group in [`KIND_GROUPS`].
    pub fn known(group: &str, kind: &str) -> Option<Kind> {
        if group_of_kind(kind)? != group {
            return None;
        }
        Some(match kind {
            "Cluster" => Kind::Cluster,
            "Machine" => Kind::Machine,
            "MachineSet" => Kind::MachineSet,
            "MachineDeployment" => Kind::MachineDeployment,
            "MachineHealthCheck" => Kind::MachineHealthCheck,
            "MachinePool" => Kind::MachinePool,
            "MachineDrainRule" => Kind::MachineDrainRule,
            "Node" => Kind::Node,
            "Pod" => Kind::Pod,
            "PodDisruptionBudget" => Kind::PodDisruptionBudget,
            "DaemonSet" => Kind::DaemonSet,
            "Namespace" => Kind::Namespace,
            "PersistentVolume" => Kind::PersistentVolume,
            "PersistentVolumeClaim" => Kind::PersistentVolumeClaim,
            "VolumeAttachment" => Kind::VolumeAttachment,
            _ => return None,
        })
    }

    /// The kind's API group (`""` for the core group).
    pub fn group(&self) -> &str {
        match self {
            Kind::External(gk) => &gk.group,
            known => group_of_kind(known.name()).unwrap_or_default(),
        }
    }
}

/// Identity of an observed object: cluster, kind, namespace ("" when cluster-scoped), name.
///
/// Shared: a clone is one reference-count increment (keys are cloned on every routed change
/// and every command), and two clones compare equal by pointer. Fields read through
/// [`KeyParts`]; order, equality, hashing and encoding are those of the parts.
#[derive(Clone)]
pub struct ObjectKey(Arc<KeyParts>);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeyParts {
    pub scope: Scope,
    pub kind: Kind,
    pub namespace: Name,
    pub name: Name,
    /// [`key_hash`] of the parts above, computed once (not encoded; last, so it never
    /// decides an order).
    #[serde(skip)]
    hash: u64,
}

/// A stable 64-bit hash of a key's parts (the same on every platform and run): what the
/// store's probe-only index hashes with. Eight bytes at a time, multiply-rotate.
pub fn key_hash(scope: &Scope, kind: &Kind, namespace: &str, name: &str) -> u64 {
    let mut h = KeyHasher(0);
    match scope {
        Scope::Management => h.add(0),
        Scope::Workload(c) => {
            h.add(1);
            h.bytes(c.namespace.as_bytes());
            h.bytes(c.name.as_bytes());
        }
    }
    if let Kind::External(gk) = kind {
        h.bytes(gk.group.as_bytes());
    }
    h.bytes(kind.name().as_bytes());
    h.bytes(namespace.as_bytes());
    h.bytes(name.as_bytes());
    h.0
}

struct KeyHasher(u64);

impl KeyHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    /// The bytes and their length (so "ab","c" and "a","bc" differ).
    fn bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(tail));
        self.add(bytes.len() as u64);
    }
}

impl ObjectKey {
    pub fn new(scope: Scope, kind: Kind, namespace: &str, name: &str) -> Self {
        let namespace = kind.key_namespace(namespace);
        let hash = key_hash(&scope, &kind, namespace, name);
        ObjectKey(Arc::new(KeyParts {
            scope,
            kind,
            namespace: Name::interned(namespace),
            name: Name::from(name),
            hash,
        }))
    }

    /// [`key_hash`] of this key.
    pub fn hash64(&self) -> u64 {
        self.0.hash
    }

    pub fn management(kind: Kind, namespace: &str, name: &str) -> Self {
        Self::new(Scope::Management, kind, namespace, name)
    }
}

impl std::ops::Deref for ObjectKey {
    type Target = KeyParts;
    fn deref(&self) -> &KeyParts {
        &self.0
    }
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || (self.0.hash == other.0.hash && self.0 == other.0)
    }
}

impl Eq for ObjectKey {}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectKey")
            .field("scope", &self.scope)
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl Serialize for ObjectKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ObjectKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut parts = KeyParts::deserialize(deserializer)?;
        parts.hash = key_hash(&parts.scope, &parts.kind, &parts.namespace, &parts.name);
        Ok(ObjectKey(Arc::new(parts)))
    }
}

impl fmt::Display for ObjectKey {
    /// `Machine default/m1`, `Node n1@c1`, `Pod app/web-0@c1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.kind.name())?;
        if !self.namespace.is_empty() {
            write!(f, "{}/", self.namespace)?;
        }
        write!(f, "{}", self.name)?;
        if let Scope::Workload(c) = &self.scope {
            write!(f, "@{}", c.name)?;
        }
        Ok(())
    }
}

/// A reference to a provider object, as a Machine or MachinePool spec holds it.
/// v1beta1 refs carry `apiVersion`; v1beta2 refs carry only `apiGroup`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub api_group: String,
    /// Full `apiVersion` when the reference names one.
    pub api_version: Option<String>,
    pub kind: String,
    pub name: String,
    /// Namespace of the reference; the referrer's namespace when empty.
    pub namespace: String,
}

impl ObjectRef {
    pub fn kind(&self) -> Kind {
        Kind::from_group_kind(&self.api_group, &self.kind)
    }

    /// The referenced object's group (from `apiVersion` when a v1beta1 ref names no
    /// `apiGroup`) and namespace (the referrer's, `namespace`, when the ref names none).
    pub fn group_and_namespace<'r>(&'r self, namespace: &'r str) -> (&'r str, &'r str) {
        let group = if self.api_group.is_empty() {
            self.api_version
                .as_deref()
                .and_then(|v| v.rsplit_once('/').map(|(g, _)| g))
                .unwrap_or("")
        } else {
            self.api_group.as_str()
        };
        let ns = if self.namespace.is_empty() {
            namespace
        } else {
            self.namespace.as_str()
        };
        (group, ns)
    }

    /// The store key of the referenced management-cluster object, for a referrer in
    /// `namespace`.
    pub fn key_in(&self, namespace: &str) -> ObjectKey {
        let (group, ns) = self.group_and_namespace(namespace);
        ObjectKey::management(Kind::from_group_kind(group, &self.kind), ns, &self.name)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// Parsed `metadata.resourceVersion` (0 when absent or not a number).
    pub resource_version: u64,
    pub generation: i64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub finalizers: Vec<String>,
    pub owner_references: Vec<OwnerReference>,
    pub creation_timestamp: Option<Timestamp>,
    pub deletion_timestamp: Option<Timestamp>,
}

impl ObjectMeta {
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
    pub fn has_annotation(&self, key: &str) -> bool {
        self.annotations.contains_key(key)
    }
    pub fn has_label(&self, key: &str) -> bool {
        self.labels.contains_key(key)
    }
    pub fn controller(&self) -> Option<&OwnerReference> {
        self.owner_references.iter().find(|o| o.controller)
    }
}

/// Which CAPI API version an object was read in; commands write back in the same one.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum ApiVersion {
    V1Beta1,
    #[default]
    V1Beta2,
}

impl ApiVersion {
    /// The `apiVersion` a CAPI object read in this version is written in.
    pub fn capi(self) -> &'static str {
        match self {
            ApiVersion::V1Beta1 => "cluster.x-k8s.io/v1beta1",
            ApiVersion::V1Beta2 => "cluster.x-k8s.io/v1beta2",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "True" => Some(ConditionStatus::True),
            "False" => Some(ConditionStatus::False),
            "Unknown" => Some(ConditionStatus::Unknown),
            _ => None,
        }
    }
}

/// v1beta1 CAPI condition severity (empty when the status is True).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    None,
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::None => "",
            Severity::Info => "Info",
            Severity::Warning => "Warning",
            Severity::Error => "Error",
        }
    }
}

/// One condition, in either API version's shape (`severity` is only written for v1beta1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub severity: Severity,
    pub last_transition_time: Option<Timestamp>,
}

/// Inserts or replaces `c` in a list, keeping the last transition time while the status holds;
/// a new transition time is `now` at the API's precision.
pub fn set_condition(list: &mut Vec<Condition>, mut c: Condition, now: Timestamp) {
    let now = now.to_api_precision();
    match list.iter_mut().find(|x| x.type_ == c.type_) {
        Some(existing) => {
            c.last_transition_time = if existing.status == c.status {
                existing.last_transition_time.or(Some(now))
            } else {
                Some(now)
            };
            *existing = c;
        }
        None => {
            c.last_transition_time = Some(now);
            list.push(c);
        }
    }
}

impl Condition {
    pub fn new(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Self {
        Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: message.to_string(),
            severity: Severity::None,
            last_transition_time: None,
        }
    }
    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Condition lists of a CAPI object: `current` holds the v1beta2 types (e.g. `Deleting`),
/// `legacy` the v1beta1 types (e.g. `DrainingSucceeded`), whatever version the object was read in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conditions {
    pub current: Vec<Condition>,
    pub legacy: Vec<Condition>,
}

pub fn find_condition<'a>(list: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    list.iter().find(|c| c.type_ == type_)
}

impl Conditions {
    pub fn current(&self, type_: &str) -> Option<&Condition> {
        find_condition(&self.current, type_)
    }
    pub fn legacy(&self, type_: &str) -> Option<&Condition> {
        find_condition(&self.legacy, type_)
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn every_kind_in_the_table_is_known_in_its_group_only_and_reads_its_group_back() {
        let mut known = 0;
        for (name, group) in KIND_GROUPS {
            let kind = Kind::from_group_kind(group, name);
            assert_eq!((kind.name(), kind.group()), (name, group));
            if !matches!(kind, Kind::External(_)) {
                known += 1;
                assert!(kind.is(group, name));
                assert!(matches!(
                    Kind::from_group_kind("example.com", name),
                    Kind::External(_)
                ));
            }
        }
        // Every variant but `External`; the apps kinds that only own pods stay external.
        assert_eq!(known, 15);
        let provider = Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "DockerMachine");
        assert_eq!(provider.group(), "infrastructure.cluster.x-k8s.io");
        assert_eq!(group_of_kind("DockerMachine"), None);
    }
}
