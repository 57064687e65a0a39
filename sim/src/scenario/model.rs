//! The typed scenario: what `sim/docs/scenario-format.md` describes, with defaults filled in and
//! references checked.

use engine::time::{Duration, Timestamp};
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// One scenario file, validated. Offsets (`at`, windows, `duration`) are from the simulation's start.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub seed: u64,
    pub duration: Duration,
    pub world: WorldKnobs,
    /// How the controller under test runs (`sim run --mode` overrides it).
    pub mode: engine::runtime::Mode,
    pub management: Vec<Manifest>,
    /// Workload cluster (the `Cluster`'s name) -> its objects.
    pub workload: BTreeMap<String, Vec<Manifest>>,
    pub timeline: Vec<Step>,
    pub expect: Vec<Expectation>,
    /// The file name errors and reports use.
    pub file: String,
}

/// Knobs of the fake world; `Default` is the contract's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldKnobs {
    /// Wall-clock time of offset 0.
    pub start: Timestamp,
    pub node_monitor_grace_period: Duration,
    pub pod_shutdown: Duration,
    pub volume_detach: Duration,
    pub infra_provision: Duration,
    pub infra_delete: Duration,
    pub node_join: Duration,
    pub machine_sets: MachineSetsMode,
    pub reschedule: bool,
    pub pod_startup: Duration,
    /// The world also plays Cluster API's own core manager (`capiManager`).
    pub capi_manager: bool,
    /// The release its manager Deployment's image names (`capiRelease`).
    pub capi_release: CapiRelease,
}

/// A release of Cluster API as its manager's image names it: a tag (`v1.12.0`) or a digest
/// (`sha256:…`, an image pinned by digest, whose release is unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapiRelease(pub String);

impl CapiRelease {
    /// The manager's image, as upstream's manifests name it, for this release.
    pub fn image(&self) -> String {
        const REPOSITORY: &str = "registry.k8s.io/cluster-api/cluster-api-controller";
        if self.0.starts_with("sha256:") {
            format!("{REPOSITORY}@{}", self.0)
        } else {
            format!("{REPOSITORY}:{}", self.0)
        }
    }
}

impl Default for CapiRelease {
    fn default() -> Self {
        CapiRelease("v1.12.0".into())
    }
}

impl std::fmt::Display for CapiRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `2024-01-01T00:00:00Z` in milliseconds since the epoch.
pub const DEFAULT_START: Timestamp = Timestamp(1_704_067_200_000);
pub const DEFAULT_DURATION: Duration = Duration::from_mins(60);

impl Default for WorldKnobs {
    fn default() -> Self {
        WorldKnobs {
            start: DEFAULT_START,
            node_monitor_grace_period: Duration::from_secs(40),
            pod_shutdown: Duration::from_secs(5),
            volume_detach: Duration::from_secs(5),
            infra_provision: Duration::from_secs(30),
            infra_delete: Duration::from_secs(10),
            node_join: Duration::from_secs(60),
            machine_sets: MachineSetsMode::Replace,
            reschedule: true,
            pod_startup: Duration::from_secs(10),
            capi_manager: false,
            capi_release: CapiRelease::default(),
        }
    }
}

/// `world.machineSets`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineSetsMode {
    /// A MachineSet recreates a Machine it lost.
    Replace,
    /// It does not.
    None,
}

/// A Kubernetes object as the file wrote it (JSON, key order kept). Guaranteed: an object with
/// string `apiVersion`, `kind` and `metadata.name` (and a string `metadata.namespace` if any).
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub line: usize,
    pub value: Json,
}

impl Manifest {
    pub fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<&str> {
        self.value["metadata"]["namespace"].as_str()
    }
}

/// A reference to an object. `cluster: None` is the management cluster; `namespace` defaults to
/// `default` (cluster-scoped kinds ignore it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjRef {
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub api_version: Option<String>,
    pub cluster: Option<String>,
}

/// One timeline step: at offset `at`, do `action` in `cluster` (None = management cluster).
/// For `NodeCondition` and `Kubelet`, `cluster` is always set (filled in when the file has
/// exactly one workload cluster). For `Patch` and `Delete`, the reference's `cluster` equals it.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub at: Duration,
    pub line: usize,
    pub cluster: Option<String>,
    pub action: StepAction,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StepAction {
    /// Create or replace the object.
    Apply(Manifest),
    /// JSON merge patch (null removes) on the whole object, `status` included. `merge` is an object.
    Patch {
        r: ObjRef,
        merge: Json,
    },
    /// Delete as the API would.
    Delete(ObjRef),
    NodeCondition {
        node: String,
        type_: String,
        /// `True`, `False` or `Unknown`.
        status: String,
        reason: Option<String>,
        message: Option<String>,
    },
    Kubelet {
        node: String,
        state: KubeletState,
    },
    Fault(FaultSpec),
    /// Cluster API is upgraded (or downgraded) to this release: the model's manager Deployment
    /// names it in its image and the manager restarts.
    CapiRelease(CapiRelease),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeletState {
    Stopped,
    Running,
}

/// A fault. The contract's kinds are checked for their parameters (`api-errors`: `rate` and
/// `for`; `partition`, `watch-gap`: `for`; `controller-restart`: none) and take no other keys;
/// the other kinds keep any further keys in `extra` for the fault injector to judge.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    pub kind: FaultKind,
    /// In `0.0..=1.0`.
    pub rate: Option<f64>,
    pub for_: Option<Duration>,
    pub extra: BTreeMap<String, Json>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    ControllerRestart,
    ApiErrors,
    Partition,
    WatchGap,
    TornJournal,
    Conflicts,
    SlowApi,
    KubeletStop,
    NodeFlap,
    NodeNeverJoins,
    InfraProvisionFailure,
    Eviction429,
    StuckHook,
    CacheUnsynced,
    ReorderedDelivery,
    CoalescedEvents,
    WatchExpired,
    RelistDuplicates,
    WriteTimeout,
    BacklogBatches,
    CorruptObject,
    JournalDamage,
    Kubeconfig,
}

impl FaultKind {
    pub const ALL: [FaultKind; 23] = [
        FaultKind::ControllerRestart,
        FaultKind::ApiErrors,
        FaultKind::Partition,
        FaultKind::WatchGap,
        FaultKind::TornJournal,
        FaultKind::Conflicts,
        FaultKind::SlowApi,
        FaultKind::KubeletStop,
        FaultKind::NodeFlap,
        FaultKind::NodeNeverJoins,
        FaultKind::InfraProvisionFailure,
        FaultKind::Eviction429,
        FaultKind::StuckHook,
        FaultKind::CacheUnsynced,
        FaultKind::ReorderedDelivery,
        FaultKind::CoalescedEvents,
        FaultKind::WatchExpired,
        FaultKind::RelistDuplicates,
        FaultKind::WriteTimeout,
        FaultKind::BacklogBatches,
        FaultKind::CorruptObject,
        FaultKind::JournalDamage,
        FaultKind::Kubeconfig,
    ];

    /// The name used in scenario files.
    pub const fn as_str(self) -> &'static str {
        match self {
            FaultKind::ControllerRestart => "controller-restart",
            FaultKind::ApiErrors => "api-errors",
            FaultKind::Partition => "partition",
            FaultKind::WatchGap => "watch-gap",
            FaultKind::TornJournal => "torn-journal",
            FaultKind::Conflicts => "conflicts",
            FaultKind::SlowApi => "slow-api",
            FaultKind::KubeletStop => "kubelet-stop",
            FaultKind::NodeFlap => "node-flap",
            FaultKind::NodeNeverJoins => "node-never-joins",
            FaultKind::InfraProvisionFailure => "infra-provision-failure",
            FaultKind::Eviction429 => "eviction-429",
            FaultKind::StuckHook => "stuck-hook",
            FaultKind::CacheUnsynced => "cache-unsynced",
            FaultKind::ReorderedDelivery => "reordered-delivery",
            FaultKind::CoalescedEvents => "coalesced-events",
            FaultKind::WatchExpired => "watch-expired",
            FaultKind::RelistDuplicates => "relist-duplicates",
            FaultKind::WriteTimeout => "write-timeout",
            FaultKind::BacklogBatches => "backlog-batches",
            FaultKind::CorruptObject => "corrupt-object",
            FaultKind::JournalDamage => "journal-damage",
            FaultKind::Kubeconfig => "kubeconfig",
        }
    }

    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// The controller actions of the contract (timeline, JSON output and `expect` use these names),
/// plus `AddFinalizer`, which this product issues as an action of its own.
pub const CONTROLLER_ACTIONS: [&str; 16] = [
    "Cordon",
    "Evict",
    "DeleteInfrastructure",
    "DeleteBootstrap",
    "DeleteNode",
    "RemoveFinalizer",
    "SetCondition",
    "CreateRemediation",
    "DeleteRemediation",
    "DeleteMachine",
    "CreateMachine",
    "PatchSpec",
    "PatchStatus",
    "SetOwnerReference",
    "AddFinalizer",
    "SetOwnCondition",
];

/// One `expect` entry and the line it starts on.
#[derive(Clone, Debug, PartialEq)]
pub struct Expectation {
    pub line: usize,
    pub kind: ExpectKind,
}

/// The forms of `expect`. Action names are from [`CONTROLLER_ACTIONS`]; windows include both ends.
#[derive(Clone, Debug, PartialEq)]
pub enum ExpectKind {
    /// At offset `at` (after everything scheduled then), `object` passes `check`.
    At {
        at: Duration,
        object: ObjRef,
        check: Check,
    },
    /// At some state in `[from, to]`, `object` passes `check`.
    During {
        from: Duration,
        to: Duration,
        object: ObjRef,
        check: Check,
    },
    Gone {
        at: Duration,
        object: ObjRef,
    },
    Exists {
        at: Duration,
        object: ObjRef,
    },
    /// The controller took `count` such actions (on `target`, within the window).
    Action {
        name: String,
        target: Option<ObjRef>,
        count: CountSpec,
        within: Option<(Duration, Duration)>,
    },
    /// No such action before `not_before` (one exactly then is allowed).
    ActionNotBefore {
        name: String,
        target: Option<ObjRef>,
        not_before: Duration,
    },
    ActionNever {
        name: String,
        target: Option<ObjRef>,
    },
    /// Each action happened, first occurrences in this order.
    Order(Vec<(String, Option<ObjRef>)>),
    /// The controller emitted `count` Events with `reason` (on `object`).
    Event {
        reason: String,
        object: Option<ObjRef>,
        count: CountSpec,
    },
}

/// What must hold of an object.
#[derive(Clone, Debug, PartialEq)]
pub enum Check {
    /// The condition exists with this status (and reason; `message` matches as a substring).
    Condition {
        type_: String,
        status: String,
        reason: Option<String>,
        message: Option<String>,
    },
    ConditionAbsent {
        type_: String,
    },
    /// Each path equals the value (`null` = absent). Paths are dotted or JSON Pointers (`/...`).
    Fields(Vec<(String, Json)>),
    /// Each path has a non-null value.
    Present(Vec<String>),
    /// Each path is missing or null.
    Absent(Vec<String>),
}

/// How many: `count: N`, `atLeast: N`, `atMost: N`, or `atLeast` and `atMost` together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountSpec {
    Exactly(u64),
    AtLeast(u64),
    AtMost(u64),
    Between(u64, u64),
}

impl CountSpec {
    pub fn holds(self, n: u64) -> bool {
        match self {
            CountSpec::Exactly(c) => n == c,
            CountSpec::AtLeast(c) => n >= c,
            CountSpec::AtMost(c) => n <= c,
            CountSpec::Between(lo, hi) => lo <= n && n <= hi,
        }
    }
}

/// The damage kinds, as scenario files name them (`fault: {kind: journal-damage, damage: …}`).
pub const DAMAGE_KINDS: [&str; 7] = [
    "flip",
    "truncate",
    "lose-conf",
    "lose-commits",
    "lose-blob",
    "lose-snap",
    "lose-db",
];

/// What a `kubeconfig` fault does to the cluster's `<cluster>-kubeconfig` Secret (`problem:`).
pub const KUBECONFIG_PROBLEMS: [&str; 3] = ["missing", "no-value", "unparsable"];
