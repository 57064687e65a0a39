//! Shadow mode's comparison: what this controller decided (and did not send) against what the
//! objects show someone else did, for each deleting Machine, step by step: cordon, each
//! eviction, infrastructure, bootstrap and Node deletion, the finalizer's release; and for each
//! Machine a MachineHealthCheck marks unhealthy (`HealthCheckSucceeded=False`).
//!
//! Where this product decides otherwise than upstream on purpose, a disagreement carries the
//! decision as a [`Deviation`]: expected, not a surprise.
//!
//! Sans-IO and deterministic: it is fed the applied inputs (after the store took them) and the
//! commands withheld, with their journal times, so `lifecycle run` (for its metric) and
//! `lifecycle shadow report` (replaying the journal) find the same disagreements.
//!
//! A step agrees when both sides take it within [`AGREEMENT_WINDOW`] of each other, at least
//! CAPI's own pacing (its drain is requeued every 20 s). Otherwise, once the window has passed
//! (noticed at the next input), one side took it alone. Evictions are seen only as a Pod's
//! deletionTimestamp, so a refused eviction is invisible to both sides alike, and a pod someone
//! else deletes on a Node this controller drains counts as its eviction too (its drain waits
//! for a pod already going), unless its drain leaves that pod alone by choice.

use crate::command::{Action, Command, ControllerId};
use crate::drain;
use crate::input::Input;
use crate::model::{
    ClusterName, ConditionStatus, Kind, MACHINE_FINALIZER, Object, ObjectKey, Scope,
};
use crate::store::Store;
use crate::time::{Duration, Timestamp};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How far apart the two sides may take a step and still agree.
pub const AGREEMENT_WINDOW: Duration = Duration::from_secs(30);

/// A step of a Machine's deletion both sides can be seen to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Step {
    Cordon,
    Evict,
    DeleteInfrastructure,
    DeleteBootstrap,
    DeleteNode,
    RemoveFinalizer,
    /// A MachineHealthCheck marks the Machine `HealthCheckSucceeded=False`.
    MarkUnhealthy,
    /// A MachineHealthCheck asks for the Machine's remediation: `OwnerRemediated=False` for
    /// its owner, or `ExternallyRemediated=False` with a request for an external controller.
    RequestRemediation,
    /// The Machine's owner (its MachineSet) deletes it for its failed health check: marked
    /// `OwnerRemediated=False (MachineDeleting)` and deleted.
    DeleteUnhealthy,
    /// A MachineHealthCheck's counts (`expectedMachines`, `currentHealthy`,
    /// `remediationsAllowed`): this controller would write values the object does not show.
    StatusCounts,
    /// A MachinePool's status (`replicas`, the ready, available and up-to-date counts, the
    /// `nodeRefs`, `phase`): this controller would write values the object does not show.
    PoolStatus,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Cordon => "Cordon",
            Step::Evict => "Evict",
            Step::DeleteInfrastructure => "DeleteInfrastructure",
            Step::DeleteBootstrap => "DeleteBootstrap",
            Step::DeleteNode => "DeleteNode",
            Step::RemoveFinalizer => "RemoveFinalizer",
            Step::MarkUnhealthy => "MarkUnhealthy",
            Step::RequestRemediation => "RequestRemediation",
            Step::DeleteUnhealthy => "DeleteUnhealthy",
            Step::StatusCounts => "StatusCounts",
            Step::PoolStatus => "PoolStatus",
        }
    }

    /// The controller the step belongs to (the metric's `controller` label).
    pub fn controller(self) -> &'static str {
        match self {
            Step::MarkUnhealthy | Step::RequestRemediation | Step::StatusCounts => {
                "machinehealthcheck"
            }
            Step::PoolStatus => "machinepool",
            Step::DeleteUnhealthy => "machineset",
            _ => "machine",
        }
    }
}

/// A product decision that differs from upstream on purpose (the design's numbered decisions):
/// a disagreement it explains is a known deviation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Deviation {
    /// Decision 3: a Machine whose `failureReason` or `failureMessage` is set is unhealthy at
    /// once (upstream HEAD no longer marks it).
    MachineFailure,
    /// Decision 14: a negative or too short timeout is an invalid spec (upstream's webhook
    /// rejects it): nothing is remediated and what it would time is not judged healthy.
    InvalidTimeout,
    /// Decision 5: once a MachinePool's provider failure fields are set its phase is `Failed`
    /// and stays so (upstream HEAD never sets it).
    PoolFailed,
    /// Decision 16: a MachinePool is reconciled when one of its Machines changes (upstream's
    /// controller does not watch Machines, so its counts of them wait for another event).
    PoolMachinesWatched,
}

impl Deviation {
    pub fn decision(self) -> u8 {
        match self {
            Deviation::MachineFailure => 3,
            Deviation::InvalidTimeout => 14,
            Deviation::PoolFailed => 5,
            Deviation::PoolMachinesWatched => 16,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Deviation::MachineFailure => {
                "a Machine's failureReason or failureMessage makes it unhealthy at once"
            }
            Deviation::InvalidTimeout => {
                "an invalid timeout makes the MachineHealthCheck's spec invalid: nothing is remediated"
            }
            Deviation::PoolFailed => "a MachinePool whose provider failed is Failed for good",
            Deviation::PoolMachinesWatched => {
                "a MachinePool's counts of its Machines follow every change of them"
            }
        }
    }
}

/// Which side took a step the other did not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Side {
    /// This controller would have; nobody did within the window.
    OnlyOurs,
    /// Someone else (CAPI's manager, a person) did; this controller would not have, within
    /// the window.
    OnlyTheirs,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::OnlyOurs => "only-ours",
            Side::OnlyTheirs => "only-theirs",
        }
    }
}

/// One disagreement, with both sides' evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Disagreement {
    /// The deleting Machine it is about.
    pub machine: ObjectKey,
    pub step: Step,
    pub target: ObjectKey,
    pub side: Side,
    /// When this controller decided it (`None`: it did not).
    pub ours: Option<Timestamp>,
    /// When the objects showed it done (`None`: they did not).
    pub theirs: Option<Timestamp>,
    /// The controller that decided it (`deletion`, `drain`), when ours.
    pub controller: &'static str,
    /// The product decision that explains it, when one does.
    pub deviation: Option<Deviation>,
    /// For values compared (status counts): what this controller would write, and what the
    /// object showed when the window closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<(String, String)>,
}

impl Disagreement {
    /// One line: `Machine default/m1: Cordon Node n1@c1 decided at … (not sent), not done by anyone within 30s`,
    /// and the decision that explains it.
    pub fn describe(&self) -> String {
        match self.deviation {
            Some(d) => format!(
                "{} (known deviation, decision {}: {})",
                self.evidence(),
                d.decision(),
                d.describe()
            ),
            None => self.evidence(),
        }
    }

    fn evidence(&self) -> String {
        let what = format!("{} {}", self.step.as_str(), self.target);
        let window = AGREEMENT_WINDOW.as_secs();
        if let (Some((ours, theirs)), Some(at)) = (&self.values, self.ours) {
            return format!(
                "{what}: this controller would write {ours} since {} (not sent); the object shows {theirs} {window}s on",
                at.to_rfc3339()
            );
        }
        match (self.side, self.ours, self.theirs) {
            (Side::OnlyOurs, Some(ours), theirs) => format!(
                "{what}: this controller decided it at {} (not sent); {}",
                ours.to_rfc3339(),
                match theirs {
                    Some(t) => format!(
                        "it was done only at {}, more than {window}s later",
                        t.to_rfc3339()
                    ),
                    None => format!("nobody did it within {window}s"),
                }
            ),
            (_, ours, Some(theirs)) => format!(
                "{what}: done by someone else at {}; {}",
                theirs.to_rfc3339(),
                match ours {
                    Some(o) => format!(
                        "this controller decided it only at {}, more than {window}s later",
                        o.to_rfc3339()
                    ),
                    None => format!("this controller would not have within {window}s"),
                }
            ),
            _ => what,
        }
    }
}

/// A deleting Machine's objects.
#[derive(Clone, Debug)]
struct Watched {
    node: Option<ObjectKey>,
    had_finalizer: bool,
    /// When it was seen gone: its objects' deletions are still its steps for a while (they
    /// may be seen after it, on another cluster's stream).
    gone_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default)]
struct Sides {
    ours: Option<(Timestamp, &'static str)>,
    theirs: Option<Timestamp>,
    /// An eviction's Node, unless this controller's drain leaves the pod alone by someone's
    /// choice (not known: assumed not).
    node: Option<ObjectKey>,
    /// The product decision behind ours, when it is one that differs from upstream.
    deviation: Option<Deviation>,
}

/// The comparison; see the module doc.
#[derive(Debug, Default)]
pub struct Comparator {
    machines: BTreeMap<ObjectKey, Watched>,
    /// Node, infrastructure and bootstrap keys → the Machine they belong to, and the step
    /// their deletion is.
    targets: BTreeMap<ObjectKey, (ObjectKey, Step)>,
    /// Nodes seen schedulable, Pods seen not deleting, Machines seen not marked unhealthy: a
    /// change from there is someone's act.
    schedulable: BTreeSet<ObjectKey>,
    running: BTreeSet<ObjectKey>,
    unmarked: BTreeSet<ObjectKey>,
    /// Machines, Nodes and provider objects seen not deleting: their deletion from there is
    /// someone's act; one first seen deleting was deleted before this controller looked.
    standing: BTreeSet<ObjectKey>,
    /// Machines seen with no remediation asked of anyone.
    unrequested: BTreeSet<ObjectKey>,
    steps: BTreeMap<(Step, ObjectKey), (ObjectKey, Sides)>,
    /// Steps judged, with their Machine (kept so a late sighting is not judged again).
    settled: BTreeMap<(Step, ObjectKey), ObjectKey>,
    /// When this controller decided each Node's deletion, and its cordon (kept once judged).
    node_deleted: BTreeMap<ObjectKey, Timestamp>,
    cordoned: BTreeMap<ObjectKey, Timestamp>,
    /// When this controller decided each Machine's `DeletionCompleted` (its finalizer goes
    /// once that write lands, which in shadow it never does).
    completed: BTreeMap<ObjectKey, Timestamp>,
    /// Each MHC's counts as observed, and those this controller would write (since when).
    counts_seen: BTreeMap<ObjectKey, Counts>,
    counts_wanted: BTreeMap<ObjectKey, (Timestamp, Counts)>,
    /// Why this controller's counts of an MHC differ from upstream's on purpose: Machines it
    /// marks for their failure, or its spec's invalid timeout.
    failed_targets: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    invalid_timeout: BTreeSet<ObjectKey>,
    /// MachinePools seen controlling a Machine (MachinePool Machines).
    pools_with_machines: BTreeSet<ObjectKey>,
    found: Vec<Disagreement>,
}

/// An MHC's `RemediationAllowed` a health check's withheld write sets: whether its reason is an
/// invalid timeout.
fn invalid_timeout_of(command: &Command) -> Option<(&ObjectKey, bool)> {
    match &command.action {
        Action::SetCondition {
            target, conditions, ..
        } if command.controller == ControllerId::Health
            && target.key.kind == Kind::MachineHealthCheck =>
        {
            let c = conditions.current("RemediationAllowed")?;
            let invalid = c.status == ConditionStatus::False
                && matches!(
                    c.reason.as_str(),
                    "InvalidNodeStartupTimeout" | "InvalidUnhealthyConditionTimeout"
                );
            Some((&target.key, invalid))
        }
        _ => None,
    }
}

/// The status values compared of an MHC or a MachinePool, by field name (only those known).
type Counts = BTreeMap<&'static str, String>;

const COUNT_FIELDS: [&str; 3] = ["expectedMachines", "currentHealthy", "remediationsAllowed"];
const POOL_FIELDS: [&str; 6] = [
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "upToDateReplicas",
    "nodeRefs",
    "phase",
];

/// The fields compared of an object of `kind`.
fn fields_of(kind: &Kind) -> &'static [&'static str] {
    match kind {
        Kind::MachinePool => &POOL_FIELDS,
        _ => &COUNT_FIELDS,
    }
}

fn counts_of(status: &crate::model::MachineHealthCheckStatus) -> Counts {
    [
        status.expected_machines,
        status.current_healthy,
        status.remediations_allowed,
    ]
    .into_iter()
    .zip(COUNT_FIELDS)
    .filter_map(|(v, f)| Some((f, v?.to_string())))
    .collect()
}

fn pool_values_of(status: &crate::model::MachinePoolStatus) -> Counts {
    let counts = [
        status.replicas,
        status.ready_replicas,
        status.available_replicas,
        status.up_to_date_replicas,
    ];
    let mut values: Counts = counts
        .into_iter()
        .zip(POOL_FIELDS)
        .filter_map(|(v, f)| Some((f, v?.to_string())))
        .collect();
    let refs: Vec<&str> = status.node_refs.iter().map(|r| r.name.as_str()).collect();
    values.insert("nodeRefs", format!("[{}]", refs.join(",")));
    if let Some(phase) = &status.phase {
        values.insert("phase", phase.clone());
    }
    values
}

fn describe_counts(kind: &Kind, counts: &Counts) -> String {
    let shown: Vec<String> = fields_of(kind)
        .iter()
        .map(|f| match counts.get(f) {
            Some(v) => format!("{f}={v}"),
            None => format!("{f}=unset"),
        })
        .collect();
    shown.join(" ")
}

/// Why a MachinePool's status differs from upstream's on purpose: its `Failed` phase, or counts
/// of its Machines upstream has not caught up with.
fn pool_deviation(wanted: &Counts, seen: &Counts, has_machines: bool) -> Option<Deviation> {
    const MACHINE_COUNTS: [&str; 3] = ["readyReplicas", "availableReplicas", "upToDateReplicas"];
    let differs: Vec<&str> = POOL_FIELDS
        .iter()
        .copied()
        .filter(|f| wanted.get(f) != seen.get(f))
        .collect();
    if wanted.get("phase").map(String::as_str) == Some("Failed") && differs.contains(&"phase") {
        return Some(Deviation::PoolFailed);
    }
    (has_machines && differs.iter().all(|f| MACHINE_COUNTS.contains(f)))
        .then_some(Deviation::PoolMachinesWatched)
}

/// The values a withheld status write sets: a health check's on its MHC, a pool's on its
/// MachinePool (either API version's layout: v1beta1 keeps the new counters in `v1beta2`).
fn writes_counts(command: &Command) -> Option<(&ObjectKey, Counts)> {
    let Action::PatchStatus { target, merge, .. } = &command.action else {
        return None;
    };
    let merge = merge.to_value();
    let status = merge.get("status")?;
    let counts: Counts = match (command.controller, &target.key.kind) {
        (ControllerId::Health, Kind::MachineHealthCheck) => COUNT_FIELDS
            .iter()
            .filter_map(|f| Some((*f, status.get(*f)?.as_i64()?.to_string())))
            .collect(),
        (ControllerId::Pool, Kind::MachinePool) => {
            let newer = status.get("v1beta2");
            let mut values: Counts = POOL_FIELDS[..4]
                .iter()
                .filter_map(|f| {
                    let v = match (*f, newer) {
                        ("replicas", _) | (_, None) => status.get(*f),
                        (_, Some(n)) => n.get(*f),
                    };
                    Some((*f, v?.as_i64()?.to_string()))
                })
                .collect();
            if let Some(refs) = status.get("nodeRefs").and_then(|r| r.as_array()) {
                let names: Vec<&str> = refs.iter().filter_map(|r| r["name"].as_str()).collect();
                values.insert("nodeRefs", format!("[{}]", names.join(",")));
            }
            if let Some(phase) = status.get("phase").and_then(|p| p.as_str()) {
                values.insert("phase", phase.to_string());
            }
            values
        }
        _ => return None,
    };
    (!counts.is_empty()).then_some((&target.key, counts))
}

const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
const DELETING: &str = "Deleting";

/// The pods an unfinished drain's `Deleting` message says it failed to evict (upstream's
/// `* Pod(s) <ns/name, …>: <failure>` lines): an eviction tried and refused, which a Pod alone
/// never shows.
fn refused_evictions(message: &str) -> impl Iterator<Item = (&str, &str)> {
    message
        .lines()
        .filter_map(|line| {
            let rest = line
                .strip_prefix("* Pods ")
                .or_else(|| line.strip_prefix("* Pod "))?;
            let (pods, why) = rest.split_once(": ")?;
            let refused =
                why.starts_with("cannot evict pod") || why.starts_with("failed to evict Pod");
            refused.then_some(pods)
        })
        .flat_map(|pods| pods.split(", "))
        .filter_map(|pod| pod.split_once('/'))
}

const OWNER_REMEDIATED: &str = "OwnerRemediated";
const EXTERNALLY_REMEDIATED: &str = "ExternallyRemediated";

/// Whether the conditions ask for the Machine's remediation (of its owner or of an external
/// controller).
fn remediation_asked(conditions: &crate::model::Conditions) -> bool {
    [OWNER_REMEDIATED, EXTERNALLY_REMEDIATED].iter().any(|t| {
        conditions
            .current(t)
            .is_some_and(|c| c.status == ConditionStatus::False)
    })
}

/// The Machine a health check's withheld condition write asks remediation for, and the
/// product decision behind its verdict.
fn requests_remediation(command: &Command) -> Option<(&ObjectKey, Option<Deviation>)> {
    if command.controller != ControllerId::Health {
        return None;
    }
    match &command.action {
        Action::SetCondition {
            target, conditions, ..
        }
        | Action::SetOwnCondition {
            target, conditions, ..
        } if target.key.kind == Kind::Machine && remediation_asked(conditions) => {
            Some((&target.key, deviation_of(conditions)))
        }
        _ => None,
    }
}

/// The Machine owner remediation decides to delete: its `OwnerRemediated=False
/// (MachineDeleting)` mark (written before the deletion, which waits to see it), or the deletion.
fn deletes_unhealthy(command: &Command) -> Option<&ObjectKey> {
    if command.controller != ControllerId::Remediation {
        return None;
    }
    match &command.action {
        Action::SetCondition {
            target, conditions, ..
        } if target.key.kind == Kind::Machine && marked_for_deletion(conditions) => {
            Some(&target.key)
        }
        Action::DeleteMachine { target } => Some(&target.key),
        _ => None,
    }
}

const MACHINE_DELETING: &str = "MachineDeleting";

/// `OwnerRemediated=False (MachineDeleting)`: the owner deletes the Machine.
fn marked_for_deletion(conditions: &crate::model::Conditions) -> bool {
    conditions
        .current(OWNER_REMEDIATED)
        .is_some_and(|c| c.status == ConditionStatus::False && c.reason == MACHINE_DELETING)
}

/// The Machine whose deletion this controller would finish with the finalizer's release.
fn completes(command: &Command) -> Option<&ObjectKey> {
    if command.controller != ControllerId::Deletion {
        return None;
    }
    match &command.action {
        Action::SetCondition {
            target, conditions, ..
        } if conditions
            .current(DELETING)
            .is_some_and(|c| c.reason == "DeletionCompleted") =>
        {
            Some(&target.key)
        }
        _ => None,
    }
}

/// The Machine a health check's withheld decision marks unhealthy, and the product decision
/// behind it when it differs from upstream. Its `MachineMarkedUnhealthy` event counts too: it is
/// decided even when someone else wrote the condition first (the write is then not needed).
fn marks_unhealthy(command: &Command) -> Option<(ObjectKey, Option<Deviation>)> {
    if command.controller != ControllerId::Health {
        return None;
    }
    let (target, conditions) = match &command.action {
        Action::SetCondition {
            target, conditions, ..
        }
        | Action::SetOwnCondition {
            target, conditions, ..
        } => (target, conditions),
        Action::RecordEvent {
            regarding, reason, ..
        } if reason == "MachineMarkedUnhealthy" && regarding.key.kind == Kind::Machine => {
            return Some((regarding.key.clone(), None));
        }
        _ => return None,
    };
    if target.key.kind != Kind::Machine {
        return None;
    }
    let c = conditions.current(HEALTH_CHECK_SUCCEEDED)?;
    (c.status == ConditionStatus::False).then(|| (target.key.clone(), deviation_of(conditions)))
}

/// The product decision behind a health check's verdict, when it differs from upstream.
fn deviation_of(conditions: &crate::model::Conditions) -> Option<Deviation> {
    conditions
        .current(HEALTH_CHECK_SUCCEEDED)
        .filter(|c| c.reason == "MachineHasFailure")
        .map(|_| Deviation::MachineFailure)
}

impl Comparator {
    pub fn new() -> Self {
        Comparator::default()
    }

    /// A command this controller decided and did not send.
    pub fn withheld(&mut self, at: Timestamp, command: &Command) {
        if let Some((mhc, invalid)) = invalid_timeout_of(command) {
            if invalid {
                self.invalid_timeout.insert(mhc.clone());
            } else {
                self.invalid_timeout.remove(mhc);
            }
        }
        if let Some((mhc, counts)) = writes_counts(command) {
            let mut wanted = self.counts_seen.get(mhc).cloned().unwrap_or_default();
            wanted.extend(counts);
            match self.counts_wanted.get_mut(mhc) {
                Some((_, values)) => *values = wanted,
                None => {
                    self.counts_wanted.insert(mhc.clone(), (at, wanted));
                }
            }
            return;
        }
        if let Some(machine) = completes(command) {
            self.completed.entry(machine.clone()).or_insert(at);
        }
        if let Some(machine) = deletes_unhealthy(command) {
            self.ours(at, Step::DeleteUnhealthy, machine, command, None);
            return;
        }
        if let Some((machine, deviation)) = requests_remediation(command) {
            self.ours(at, Step::RequestRemediation, machine, command, deviation);
        }
        if let Some((machine, deviation)) = marks_unhealthy(command) {
            if deviation == Some(Deviation::MachineFailure) {
                self.failed_targets
                    .entry(command.owner.clone())
                    .or_default()
                    .insert(machine.clone());
            }
            self.ours(at, Step::MarkUnhealthy, &machine, command, deviation);
            return;
        }
        let step = match &command.action {
            Action::Cordon { node } => Some((Step::Cordon, &node.key)),
            Action::Evict { pod, .. } => Some((Step::Evict, &pod.key)),
            Action::DeleteInfrastructure { target } => {
                Some((Step::DeleteInfrastructure, &target.key))
            }
            Action::DeleteBootstrap { target } => Some((Step::DeleteBootstrap, &target.key)),
            Action::DeleteNode { node } => Some((Step::DeleteNode, &node.key)),
            Action::RemoveFinalizer { target, finalizer } if finalizer == MACHINE_FINALIZER => {
                Some((Step::RemoveFinalizer, &target.key))
            }
            _ => None,
        };
        let Some((step, target)) = step else {
            return;
        };
        match step {
            Step::DeleteNode => {
                self.node_deleted.entry(target.clone()).or_insert(at);
            }
            Step::Cordon => {
                self.cordoned.entry(target.clone()).or_insert(at);
            }
            _ => {}
        }
        if command.owner.kind != Kind::Machine || self.settled.contains_key(&(step, target.clone()))
        {
            return;
        }
        let entry = self
            .steps
            .entry((step, target.clone()))
            .or_insert_with(|| (command.owner.clone(), Sides::default()));
        entry
            .1
            .ours
            .get_or_insert((at, command.controller.as_str()));
    }

    /// This controller decided a health check's step about `machine`.
    fn ours(
        &mut self,
        at: Timestamp,
        step: Step,
        machine: &ObjectKey,
        command: &Command,
        deviation: Option<Deviation>,
    ) {
        if self.settled.contains_key(&(step, machine.clone())) {
            return;
        }
        let entry = self
            .steps
            .entry((step, machine.clone()))
            .or_insert_with(|| (machine.clone(), Sides::default()));
        entry
            .1
            .ours
            .get_or_insert((at, command.controller.as_str()));
        entry.1.deviation = entry.1.deviation.or(deviation);
    }

    /// An input was applied at `at`; `store` is the engine's after it (what tells whether this
    /// controller's drain would evict a pod someone else evicted).
    pub fn observe(&mut self, at: Timestamp, input: &Input, store: &Store) {
        match input {
            Input::Upsert { scope, object } => {
                self.seen(at, &object.key(scope), Some(object), store)
            }
            Input::Delete { key } => self.seen(at, key, None, store),
            Input::Batch { inputs } => {
                for i in inputs {
                    self.observe(at, i, store);
                }
                return;
            }
            other => {
                if let Some(relist) = other.as_relist() {
                    for o in relist.objects {
                        self.seen(at, &o.key(relist.scope), Some(o), store);
                    }
                }
            }
        }
        self.expire(at);
    }

    /// Disagreements found since the last call, in the order they were noticed.
    pub fn take(&mut self) -> Vec<Disagreement> {
        std::mem::take(&mut self.found)
    }

    /// The end of what is known (a run's end): every window still open is judged as of `at`.
    pub fn finish(&mut self, at: Timestamp) {
        self.expire(at);
    }

    fn seen(&mut self, at: Timestamp, key: &ObjectKey, object: Option<&Object>, store: &Store) {
        match (key.kind.clone(), object) {
            (Kind::Machine, Some(Object::Machine(m))) => {
                if let Some(owner) = m.meta.controller().filter(|c| c.kind == "MachinePool") {
                    self.pools_with_machines.insert(ObjectKey::management(
                        Kind::MachinePool,
                        &m.meta.namespace,
                        &owner.name,
                    ));
                }
                let marked = m
                    .conditions
                    .current(HEALTH_CHECK_SUCCEEDED)
                    .is_some_and(|c| c.status == ConditionStatus::False);
                if !marked {
                    // Healthy again: a later spell is compared afresh.
                    for failed in self.failed_targets.values_mut() {
                        failed.remove(key);
                    }
                    self.unmarked.insert(key.clone());
                    self.settled.remove(&(Step::MarkUnhealthy, key.clone()));
                } else if self.unmarked.remove(key) {
                    self.theirs(at, Step::MarkUnhealthy, key, key);
                }
                if !remediation_asked(&m.conditions) {
                    self.unrequested.insert(key.clone());
                    self.settled
                        .remove(&(Step::RequestRemediation, key.clone()));
                } else if self.unrequested.remove(key) {
                    self.theirs(at, Step::RequestRemediation, key, key);
                }
                let has_finalizer = m.meta.finalizers.iter().any(|f| f == MACHINE_FINALIZER);
                if m.meta.deletion_timestamp.is_none() {
                    self.standing.insert(key.clone());
                    return;
                }
                if self.standing.remove(key) && marked_for_deletion(&m.conditions) {
                    self.theirs(at, Step::DeleteUnhealthy, key, key);
                }
                let watched = self.machines.entry(key.clone()).or_insert_with(|| Watched {
                    node: None,
                    had_finalizer: has_finalizer,
                    gone_at: None,
                });
                if watched.had_finalizer && !has_finalizer {
                    watched.had_finalizer = false;
                    self.released(at, key);
                }
                let ns = &key.namespace;
                let workload = Scope::Workload(ClusterName::new(ns.as_str(), &m.cluster_name));
                if let Some(deleting) = m.conditions.current(DELETING) {
                    for (namespace, name) in refused_evictions(&deleting.message) {
                        let pod = ObjectKey::new(workload.clone(), Kind::Pod, namespace, name);
                        self.theirs(at, Step::Evict, &pod, key);
                    }
                }
                if let Some(node) = &m.node_ref {
                    let node = ObjectKey::new(workload, Kind::Node, "", node);
                    self.targets
                        .insert(node.clone(), (key.clone(), Step::DeleteNode));
                    if let Some(w) = self.machines.get_mut(key) {
                        w.node = Some(node);
                    }
                }
                let infra = m.infrastructure_ref.key_in(ns);
                self.targets
                    .insert(infra, (key.clone(), Step::DeleteInfrastructure));
                if let Some(b) = &m.bootstrap_config_ref {
                    self.targets
                        .insert(b.key_in(ns), (key.clone(), Step::DeleteBootstrap));
                }
            }
            (Kind::Machine, None) => {
                self.standing.remove(key);
                self.unmarked.remove(key);
                self.unrequested.remove(key);
                if self.machines.get(key).is_some_and(|w| w.had_finalizer) {
                    self.released(at, key);
                }
                if let Some(w) = self.machines.get_mut(key) {
                    w.had_finalizer = false;
                    w.gone_at.get_or_insert(at);
                }
            }
            (Kind::Node, Some(Object::Node(n))) => {
                if !n.unschedulable {
                    self.schedulable.insert(key.clone());
                } else if self.schedulable.remove(key)
                    && let Some(machine) = self.machine_of_node(key)
                {
                    self.theirs(at, Step::Cordon, key, &machine);
                }
                if n.meta.deletion_timestamp.is_some() {
                    self.target_gone(at, key);
                } else {
                    self.standing.insert(key.clone());
                }
            }
            (Kind::Pod, Some(Object::Pod(p))) => {
                if p.meta.deletion_timestamp.is_none() {
                    self.running.insert(key.clone());
                } else if self.running.remove(key) {
                    let node = p
                        .node_name
                        .as_deref()
                        .map(|n| ObjectKey::new(key.scope.clone(), Kind::Node, "", n));
                    if let Some(node) = node
                        && let Some(machine) = self.machine_of_node(&node)
                    {
                        self.theirs(at, Step::Evict, key, &machine);
                        // A pod this controller's drain leaves alone by someone's choice (the
                        // drain label, a MachineDrainRule) is not one it waits for in place of
                        // evicting. A pod it waits to complete is deleted by its own end, every
                        // pod of a Node going away by the garbage collector.
                        let node_going = !matches!(
                            store.get(&node),
                            Some(Object::Node(n)) if n.meta.deletion_timestamp.is_none()
                        );
                        let ours_too = node_going
                            || drain::skipped_by_choice(store, &machine, key, at) != Some(true);
                        if let Some((_, sides)) = self.steps.get_mut(&(Step::Evict, key.clone()))
                            && ours_too
                        {
                            sides.node = Some(node);
                        }
                    }
                }
            }
            (Kind::Pod, None) => {
                self.running.remove(key);
            }
            (Kind::MachineHealthCheck, Some(Object::MachineHealthCheck(mhc))) => {
                self.values_seen(key, counts_of(&mhc.status));
            }
            (Kind::MachinePool, Some(Object::MachinePool(pool))) => {
                self.values_seen(key, pool_values_of(&pool.status));
            }
            (Kind::MachinePool, None) => {
                self.counts_seen.remove(key);
                self.counts_wanted.remove(key);
            }
            (Kind::MachineHealthCheck, None) => {
                self.counts_seen.remove(key);
                self.counts_wanted.remove(key);
                self.failed_targets.remove(key);
                self.invalid_timeout.remove(key);
            }
            (_, Some(o)) if o.meta().deletion_timestamp.is_some() => self.target_gone(at, key),
            (_, None) => self.target_gone(at, key),
            (Kind::External(_), Some(_)) => {
                self.standing.insert(key.clone());
            }
            _ => {}
        }
    }

    /// An MHC's or a MachinePool's status values as observed: what this controller wanted of
    /// them is settled once they show it.
    fn values_seen(&mut self, key: &ObjectKey, seen: Counts) {
        if self
            .counts_wanted
            .get(key)
            .is_some_and(|(_, wanted)| *wanted == seen)
        {
            self.counts_wanted.remove(key);
        }
        self.counts_seen.insert(key.clone(), seen);
    }

    /// Someone released the Machine's finalizer. Upstream releases it in the pass that deletes
    /// the Node; this controller in the next, after its Node deletion is answered: had it
    /// decided that deletion within the window, it agrees (the Machine was gone before it
    /// could release it).
    fn released(&mut self, at: Timestamp, machine: &ObjectKey) {
        let node = self.machines.get(machine).and_then(|w| w.node.clone());
        let within = |t: Option<Timestamp>| t.is_some_and(|t| at.since(t) <= AGREEMENT_WINDOW);
        let on_track = within(node.and_then(|n| self.node_deleted.get(&n).copied()))
            || within(self.completed.get(machine).copied());
        if on_track {
            let entry = self
                .steps
                .entry((Step::RemoveFinalizer, machine.clone()))
                .or_insert_with(|| (machine.clone(), Sides::default()));
            entry.1.ours.get_or_insert((at, "deletion"));
        }
        self.theirs(at, Step::RemoveFinalizer, machine, machine);
    }

    /// When the first open window closes (a tick then judges it).
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.steps
            .values()
            .filter_map(|(_, s)| match (s.ours, s.theirs) {
                (Some((t, _)), None) | (None, Some(t)) => Some(t),
                _ => None,
            })
            .chain(self.counts_wanted.values().map(|(t, _)| *t))
            .min()
            .map(|t| t + AGREEMENT_WINDOW + Duration::from_millis(1))
    }

    fn machine_of_node(&self, node: &ObjectKey) -> Option<ObjectKey> {
        self.targets
            .get(node)
            .filter(|(m, _)| self.machines.contains_key(m))
            .map(|(m, _)| m.clone())
    }

    /// A Node, infrastructure or bootstrap object of a deleting Machine is deleting or gone:
    /// someone's step only when it was seen standing before (not when this controller first saw
    /// it already deleting: that step was taken before it looked).
    fn target_gone(&mut self, at: Timestamp, key: &ObjectKey) {
        if !self.standing.remove(key) {
            return;
        }
        if let Some((machine, step)) = self.targets.get(key).cloned()
            && self.machines.contains_key(&machine)
        {
            self.theirs(at, step, key, &machine);
        }
    }

    fn theirs(&mut self, at: Timestamp, step: Step, target: &ObjectKey, machine: &ObjectKey) {
        if self.settled.contains_key(&(step, target.clone())) {
            return;
        }
        let entry = self
            .steps
            .entry((step, target.clone()))
            .or_insert_with(|| (machine.clone(), Sides::default()));
        entry.1.theirs.get_or_insert(at);
    }

    /// Someone else evicted a pod of a Node this controller was draining, one its drain does
    /// not leave alone by choice ([`Sides::node`]): it waits for a pod already being deleted
    /// rather than evicting it.
    fn drained_by_us(&self, sides: &Sides, theirs: Timestamp) -> bool {
        sides
            .node
            .as_ref()
            .and_then(|n| self.cordoned.get(n))
            .is_some_and(|&t| t <= theirs + AGREEMENT_WINDOW)
    }

    /// Judges every step whose window has closed (or that both sides took).
    fn expire(&mut self, now: Timestamp) {
        let mut done = Vec::new();
        for ((step, target), (machine, sides)) in &self.steps {
            let theirs_drained = *step == Step::Evict
                && sides.ours.is_none()
                && sides.theirs.is_some_and(|t| self.drained_by_us(sides, t));
            let verdict = match (sides.ours, sides.theirs) {
                (None, Some(_)) if theirs_drained => Some(None),
                (Some((ours, _)), Some(theirs)) => {
                    let apart = if ours > theirs {
                        ours.since(theirs)
                    } else {
                        theirs.since(ours)
                    };
                    if apart <= AGREEMENT_WINDOW {
                        Some(None)
                    } else if ours < theirs {
                        Some(Some(Side::OnlyOurs))
                    } else {
                        Some(Some(Side::OnlyTheirs))
                    }
                }
                (Some((ours, _)), None) if now.since(ours) > AGREEMENT_WINDOW => {
                    Some(Some(Side::OnlyOurs))
                }
                (None, Some(theirs)) if now.since(theirs) > AGREEMENT_WINDOW => {
                    Some(Some(Side::OnlyTheirs))
                }
                _ => None,
            };
            if let Some(side) = verdict {
                done.push(((*step, target.clone()), machine.clone()));
                if let Some(side) = side {
                    self.found.push(Disagreement {
                        machine: machine.clone(),
                        step: *step,
                        target: target.clone(),
                        side,
                        ours: sides.ours.map(|(t, _)| t),
                        theirs: sides.theirs,
                        controller: sides.ours.map_or("", |(_, c)| c),
                        deviation: sides.deviation.filter(|_| side == Side::OnlyOurs),
                        values: None,
                    });
                }
            }
        }
        for (key, machine) in done {
            self.steps.remove(&key);
            self.settled.insert(key, machine);
        }
        let late: Vec<ObjectKey> = self
            .counts_wanted
            .iter()
            .filter(|(_, (t, _))| now.since(*t) > AGREEMENT_WINDOW)
            .map(|(k, _)| k.clone())
            .collect();
        for mhc in late {
            let Some((since, wanted)) = self.counts_wanted.remove(&mhc) else {
                continue;
            };
            let seen = self.counts_seen.get(&mhc).cloned().unwrap_or_default();
            let deviation = if mhc.kind == Kind::MachinePool {
                pool_deviation(&wanted, &seen, self.pools_with_machines.contains(&mhc))
            } else if self.invalid_timeout.contains(&mhc) {
                Some(Deviation::InvalidTimeout)
            } else if self.failed_targets.get(&mhc).is_some_and(|f| !f.is_empty()) {
                Some(Deviation::MachineFailure)
            } else {
                None
            };
            let (step, controller) = match mhc.kind {
                Kind::MachinePool => (Step::PoolStatus, "pool"),
                _ => (Step::StatusCounts, "health"),
            };
            let values = (
                describe_counts(&mhc.kind, &wanted),
                describe_counts(&mhc.kind, &seen),
            );
            self.found.push(Disagreement {
                machine: mhc.clone(),
                step,
                target: mhc,
                side: Side::OnlyOurs,
                ours: Some(since),
                theirs: None,
                controller,
                deviation,
                values: Some(values),
            });
        }
        self.forget_gone(now);
    }

    /// Machines gone for two windows, and their objects, are forgotten (a long run keeps no
    /// history of every deletion).
    fn forget_gone(&mut self, now: Timestamp) {
        let forget: BTreeSet<ObjectKey> = self
            .machines
            .iter()
            .filter(|(_, w)| {
                w.gone_at
                    .is_some_and(|g| now.since(g) > AGREEMENT_WINDOW + AGREEMENT_WINDOW)
            })
            .map(|(k, _)| k.clone())
            .collect();
        if forget.is_empty() {
            return;
        }
        let open: BTreeSet<&ObjectKey> = self.steps.values().map(|(m, _)| m).collect();
        let forget: BTreeSet<ObjectKey> =
            forget.into_iter().filter(|m| !open.contains(m)).collect();
        let nodes: Vec<ObjectKey> = forget
            .iter()
            .filter_map(|m| self.machines.get(m).and_then(|w| w.node.clone()))
            .collect();
        self.machines.retain(|k, _| !forget.contains(k));
        self.completed.retain(|k, _| !forget.contains(k));
        self.targets.retain(|_, (m, _)| !forget.contains(m));
        for n in &nodes {
            self.node_deleted.remove(n);
            self.cordoned.remove(n);
            self.schedulable.remove(n);
        }
        self.settled.retain(|_, m| !forget.contains(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Observes `input` with nothing in the engine's store (no pod can be classified: every
    /// pod another party evicts counts as one this controller's drain evicts too).
    fn see(c: &mut Comparator, at: Timestamp, input: &Input) {
        c.observe(at, input, &Store::default());
    }
    use crate::command::{ControllerId, Target};
    use crate::testing::{machine, node, pod, workload};

    const T0: Timestamp = Timestamp(1_000_000);

    fn at(secs: i64) -> Timestamp {
        Timestamp(T0.0 + secs * 1000)
    }

    fn upsert(scope: Scope, object: Object) -> Input {
        Input::Upsert {
            scope,
            object: Box::new(object),
        }
    }

    fn deleting_m1() -> Object {
        let mut m = machine("c1", "m1", Some("n1"));
        m.meta.deletion_timestamp = Some(T0);
        Object::Machine(m)
    }

    fn m1() -> ObjectKey {
        ObjectKey::management(Kind::Machine, "default", "m1")
    }

    fn command(action: Action) -> Command {
        Command {
            id: 1,
            cause: 1,
            controller: ControllerId::Deletion,
            owner: m1(),
            action,
            reason: String::new(),
            series: None,
        }
    }

    fn n1() -> ObjectKey {
        ObjectKey::new(workload("c1"), Kind::Node, "", "n1")
    }

    fn node_target() -> Target {
        Target {
            key: n1(),
            api_version: "v1".into(),
        }
    }

    fn cordon() -> Command {
        command(Action::Cordon {
            node: node_target(),
        })
    }

    fn delete_node() -> Command {
        command(Action::DeleteNode {
            node: node_target(),
        })
    }

    /// The deleting Machine m1 on schedulable n1 with pod app/web-0 running, as observed.
    fn watching() -> Comparator {
        let mut c = Comparator::new();
        see(
            &mut c,
            T0,
            &upsert(workload("c1"), Object::Node(node("n1"))),
        );
        see(
            &mut c,
            T0,
            &upsert(workload("c1"), Object::Pod(pod("app", "web-0", "n1"))),
        );
        see(&mut c, T0, &upsert(Scope::Management, deleting_m1()));
        c
    }

    fn cordoned(secs: i64) -> Input {
        let mut n = node("n1");
        n.unschedulable = true;
        n.meta.resource_version = 2 + secs as u64;
        upsert(workload("c1"), Object::Node(n))
    }

    #[test]
    fn a_step_both_sides_take_within_the_window_agrees() {
        let mut c = watching();
        c.withheld(at(0), &cordon());
        see(&mut c, at(20), &cordoned(20));
        c.finish(at(600));
        assert_eq!(c.take(), Vec::new());
    }

    #[test]
    fn a_step_only_this_controller_decided_is_reported_when_its_window_closes() {
        let mut c = watching();
        c.withheld(at(0), &cordon());
        assert_eq!(c.next_deadline(), Some(at(30) + Duration::from_millis(1)));
        see(&mut c, at(30), &Input::Tick);
        assert_eq!(c.take(), Vec::new(), "30 s is still within the window");
        see(&mut c, at(31), &Input::Tick);
        let found = c.take();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].step, found[0].side),
            (Step::Cordon, Side::OnlyOurs)
        );
        assert_eq!((found[0].ours, found[0].theirs), (Some(at(0)), None));
        assert!(
            found[0].describe().contains("nobody did it within 30s"),
            "{}",
            found[0].describe()
        );
        see(&mut c, at(90), &cordoned(90));
        c.finish(at(600));
        assert_eq!(c.take(), Vec::new(), "a step is judged once");
    }

    /// A planted divergence: someone evicts a pod this controller would not have evicted.
    #[test]
    fn a_step_only_someone_else_took_is_reported_with_its_evidence() {
        let mut c = watching();
        let mut evicted = pod("app", "web-0", "n1");
        evicted.meta.deletion_timestamp = Some(at(5));
        see(&mut c, at(5), &upsert(workload("c1"), Object::Pod(evicted)));
        c.finish(at(60));
        let found = c.take();
        assert_eq!(found.len(), 1, "{found:?}");
        let d = &found[0];
        assert_eq!(
            (d.step, d.side, d.machine.clone()),
            (Step::Evict, Side::OnlyTheirs, m1())
        );
        assert_eq!((d.ours, d.theirs), (None, Some(at(5))));
        assert!(
            d.describe().contains("would not have within 30s"),
            "{}",
            d.describe()
        );
    }

    /// Found over HTTP: CAPI cordons and evicts at once, and this controller, seeing the pods
    /// already going, waits for them instead of evicting: its drain agrees.
    #[test]
    fn an_eviction_by_someone_else_on_a_node_this_controller_drains_agrees() {
        let mut c = watching();
        c.withheld(at(0), &cordon());
        see(&mut c, at(1), &cordoned(1));
        let mut evicted = pod("app", "web-0", "n1");
        evicted.meta.deletion_timestamp = Some(at(1));
        see(&mut c, at(1), &upsert(workload("c1"), Object::Pod(evicted)));
        c.finish(at(600));
        assert_eq!(c.take(), Vec::new());
    }

    /// What the comparison finds when someone else deletes the pod app/web-0, labelled
    /// `cluster.x-k8s.io/drain: skip`, of n1 while this controller drains it (`node_deleting`:
    /// n1 is being deleted by then).
    fn skip_labelled_pod_deleted(node_deleting: bool) -> Vec<Disagreement> {
        let mut c = watching();
        c.withheld(at(0), &cordon());
        see(&mut c, at(1), &cordoned(1));
        let mut evicted = pod("app", "web-0", "n1");
        evicted.meta.deletion_timestamp = Some(at(1));
        evicted
            .meta
            .labels
            .insert(crate::model::DRAIN_LABEL.into(), "skip".into());
        let mut n1 = node("n1");
        n1.meta.deletion_timestamp = node_deleting.then_some(at(1));
        let mut store = Store::default();
        store.upsert(&workload("c1"), Object::Node(n1));
        store.upsert(
            &Scope::Management,
            Object::Cluster(crate::testing::cluster("c1")),
        );
        store.upsert(&Scope::Management, deleting_m1());
        store.upsert(
            &workload("c1"),
            Object::Namespace(crate::testing::namespace("app")),
        );
        let input = upsert(workload("c1"), Object::Pod(evicted.clone()));
        store.upsert(&workload("c1"), Object::Pod(evicted));
        c.observe(at(1), &input, &store);
        c.finish(at(600));
        c.take()
    }

    /// A pod this controller's drain leaves alone by choice, evicted by someone else, is
    /// theirs alone: its drain would never have evicted it (an unlabelled one agrees, above).
    /// Once its Node is being deleted, the garbage collector deletes every pod of it: nobody's
    /// eviction.
    #[test]
    fn an_eviction_by_someone_else_of_a_pod_this_drain_skips_disagrees() {
        let found = skip_labelled_pod_deleted(false);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].step, found[0].side),
            (Step::Evict, Side::OnlyTheirs)
        );
        assert_eq!(skip_labelled_pod_deleted(true), Vec::new());
    }

    /// Found beside CAPI: a shadow started mid-deletion saw the infrastructure already deleting,
    /// then gone; CAPI deleted it before this controller looked, which is no disagreement. The
    /// Node it saw standing and then deleted still is someone's step.
    #[test]
    fn a_deletion_done_before_the_first_sighting_is_nobodys_step() {
        let mut c = Comparator::new();
        let mut infra = crate::testing::infra_machine("m1");
        infra.meta.deletion_timestamp = Some(T0);
        let infra = Object::External(infra);
        let infra_key = infra.key(&Scope::Management);
        see(&mut c, T0, &upsert(Scope::Management, infra));
        see(
            &mut c,
            T0,
            &upsert(workload("c1"), Object::Node(node("n1"))),
        );
        see(&mut c, T0, &upsert(Scope::Management, deleting_m1()));
        see(&mut c, at(5), &Input::Delete { key: infra_key });
        let mut node_going = node("n1");
        node_going.meta.deletion_timestamp = Some(at(8));
        see(
            &mut c,
            at(8),
            &upsert(workload("c1"), Object::Node(node_going)),
        );
        c.finish(at(600));
        let found = c.take();
        let steps: Vec<(Step, Side)> = found.iter().map(|d| (d.step, d.side)).collect();
        assert_eq!(steps, [(Step::DeleteNode, Side::OnlyTheirs)], "{found:?}");
    }

    /// Also found over HTTP: the Machine's deletion reaches the controller before its Node's,
    /// which is on another cluster's stream.
    #[test]
    fn a_node_seen_deleted_after_its_machine_is_gone_is_still_its_step() {
        let mut c = watching();
        let node_key = n1();
        c.withheld(at(10), &delete_node());
        see(&mut c, at(11), &Input::Delete { key: m1() });
        see(&mut c, at(12), &Input::Delete { key: node_key });
        c.finish(at(40));
        assert_eq!(c.take(), Vec::new());
        c.finish(at(600));
        assert!(c.machines.is_empty() && c.targets.is_empty() && c.settled.is_empty());
    }

    #[test]
    fn pods_of_machines_not_deleting_are_nobodys_step() {
        let mut c = Comparator::new();
        see(
            &mut c,
            T0,
            &upsert(workload("c1"), Object::Pod(pod("app", "web-0", "n1"))),
        );
        let mut gone = pod("app", "web-0", "n1");
        gone.meta.deletion_timestamp = Some(at(5));
        see(&mut c, at(5), &upsert(workload("c1"), Object::Pod(gone)));
        c.finish(at(600));
        assert_eq!(c.take(), Vec::new());
    }

    #[test]
    fn a_finalizer_released_in_the_pass_that_deletes_the_node_agrees() {
        let mut c = watching();
        let node_key = n1();
        c.withheld(at(10), &delete_node());
        see(&mut c, at(11), &Input::Delete { key: node_key });
        see(&mut c, at(11), &Input::Delete { key: m1() });
        c.finish(at(600));
        assert_eq!(c.take(), Vec::new());
    }

    fn health_mark(machine: &str, reason: &str) -> Command {
        let mut conditions = crate::model::Conditions::default();
        crate::model::set_condition(
            &mut conditions.current,
            crate::model::Condition::new(
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::False,
                reason,
                "",
            ),
            T0,
        );
        Command {
            controller: ControllerId::Health,
            owner: ObjectKey::management(Kind::MachineHealthCheck, "default", "mhc"),
            ..command(Action::SetCondition {
                target: Target {
                    key: ObjectKey::management(Kind::Machine, "default", machine),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                conditions,
                summary: String::new(),
            })
        }
    }

    fn w(name: &str, marked: bool) -> Input {
        let mut m = machine("c1", name, Some(name));
        if marked {
            crate::model::set_condition(
                &mut m.conditions.current,
                crate::model::Condition::new(
                    HEALTH_CHECK_SUCCEEDED,
                    ConditionStatus::False,
                    "NodeDeleted",
                    "",
                ),
                T0,
            );
        }
        upsert(Scope::Management, Object::Machine(m))
    }

    #[test]
    fn a_machine_both_sides_mark_unhealthy_agrees_and_one_only_ours_is_tagged_when_a_decision_explains_it()
     {
        let mut c = Comparator::new();
        for name in ["w1", "w2", "w3"] {
            see(&mut c, at(0), &w(name, false));
        }
        // w1: both mark it, CAPI a moment later.
        c.withheld(at(10), &health_mark("w1", "NodeDeleted"));
        see(&mut c, at(11), &w("w1", true));
        // w2: CAPI marks it; this controller never decides so.
        see(&mut c, at(12), &w("w2", true));
        // w3: only this controller, for its failureReason (decision 3).
        c.withheld(at(13), &health_mark("w3", "MachineHasFailure"));
        c.finish(at(100));
        let found: Vec<(String, Side, Option<Deviation>)> = c
            .take()
            .into_iter()
            .map(|d| (d.machine.name.to_string(), d.side, d.deviation))
            .collect();
        assert_eq!(
            found,
            [
                ("w2".to_string(), Side::OnlyTheirs, None),
                (
                    "w3".to_string(),
                    Side::OnlyOurs,
                    Some(Deviation::MachineFailure)
                ),
            ]
        );
        let w3 = Disagreement {
            machine: ObjectKey::management(Kind::Machine, "default", "w3"),
            step: Step::MarkUnhealthy,
            target: ObjectKey::management(Kind::Machine, "default", "w3"),
            side: Side::OnlyOurs,
            ours: Some(at(13)),
            theirs: None,
            controller: "health",
            deviation: Some(Deviation::MachineFailure),
            values: None,
        };
        assert!(
            w3.describe().contains("known deviation, decision 3"),
            "{}",
            w3.describe()
        );
        assert_eq!(Step::MarkUnhealthy.controller(), "machinehealthcheck");
    }

    fn with_condition(
        mut m: crate::model::Machine,
        type_: &str,
        reason: &str,
        message: &str,
    ) -> crate::model::Machine {
        crate::model::set_condition(
            &mut m.conditions.current,
            crate::model::Condition::new(type_, ConditionStatus::False, reason, message),
            T0,
        );
        m
    }

    /// The owner's deletion of an unhealthy Machine is compared per Machine: this controller
    /// marks w1 `MachineDeleting` and the MachineSet deletes it (agreed); the MachineSet alone
    /// deletes w2 (only-theirs); w3 deleted without the mark (a scale-down) is no remediation;
    /// w4, first seen already deleting with the mark, was remediated before this controller
    /// looked.
    #[test]
    fn the_owners_deletion_of_an_unhealthy_machine_is_compared_per_machine() {
        let mut c = Comparator::new();
        for name in ["w1", "w2", "w3"] {
            see(&mut c, at(0), &w(name, false));
        }
        let remediated = |name: &str, secs: i64| {
            let m = machine("c1", name, Some(name));
            let mut m = with_condition(m, HEALTH_CHECK_SUCCEEDED, "NodeDeleted", "");
            m = with_condition(m, OWNER_REMEDIATED, MACHINE_DELETING, "Machine is deleting");
            m.meta.deletion_timestamp = Some(at(secs));
            upsert(Scope::Management, Object::Machine(m))
        };
        let mut conditions = crate::model::Conditions::default();
        crate::model::set_condition(
            &mut conditions.current,
            crate::model::Condition::new(
                OWNER_REMEDIATED,
                ConditionStatus::False,
                MACHINE_DELETING,
                "",
            ),
            T0,
        );
        let mark = Command {
            controller: ControllerId::Remediation,
            owner: ObjectKey::management(Kind::MachineSet, "default", "ms"),
            ..command(Action::SetCondition {
                target: Target {
                    key: ObjectKey::management(Kind::Machine, "default", "w1"),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                conditions,
                summary: String::new(),
            })
        };
        c.withheld(at(10), &mark);
        see(&mut c, at(11), &remediated("w1", 11));
        see(&mut c, at(12), &remediated("w2", 12));
        let mut scaled_down = machine("c1", "w3", Some("w3"));
        scaled_down.meta.deletion_timestamp = Some(at(13));
        see(
            &mut c,
            at(13),
            &upsert(Scope::Management, Object::Machine(scaled_down)),
        );
        see(&mut c, at(14), &remediated("w4", 1));
        c.finish(at(100));
        let found: Vec<(String, Step, Side)> = c
            .take()
            .into_iter()
            .filter(|d| d.step == Step::DeleteUnhealthy)
            .map(|d| (d.machine.name.to_string(), d.step, d.side))
            .collect();
        assert_eq!(
            found,
            [("w2".to_string(), Step::DeleteUnhealthy, Side::OnlyTheirs)]
        );
    }

    /// The remediation a health check asks (its owner's, here) is compared like its mark:
    /// both sides agree on w1; only this controller asks for w2's.
    #[test]
    fn remediation_requests_are_compared_per_machine() {
        let mut c = Comparator::new();
        for name in ["w1", "w2"] {
            see(&mut c, at(0), &w(name, false));
        }
        let ask = |name: &str| {
            let mut command = health_mark(name, "NodeDeleted");
            if let Action::SetCondition { conditions, .. } = &mut command.action {
                crate::model::set_condition(
                    &mut conditions.current,
                    crate::model::Condition::new(
                        OWNER_REMEDIATED,
                        ConditionStatus::False,
                        "WaitingForRemediation",
                        "",
                    ),
                    T0,
                );
            }
            command
        };
        c.withheld(at(10), &ask("w1"));
        c.withheld(at(10), &ask("w2"));
        let w1 = machine("c1", "w1", Some("w1"));
        let w1 = with_condition(w1, HEALTH_CHECK_SUCCEEDED, "NodeDeleted", "");
        let w1 = with_condition(w1, OWNER_REMEDIATED, "WaitingForRemediation", "");
        see(
            &mut c,
            at(12),
            &upsert(Scope::Management, Object::Machine(w1)),
        );
        see(&mut c, at(12), &w("w2", true));
        c.finish(at(100));
        let found: Vec<(String, Step, Side)> = c
            .take()
            .into_iter()
            .map(|d| (d.machine.name.to_string(), d.step, d.side))
            .collect();
        assert_eq!(
            found,
            [("w2".to_string(), Step::RequestRemediation, Side::OnlyOurs)]
        );
    }

    /// An eviction the API refused shows on no Pod, but upstream's drain names it in its
    /// `Deleting` message: that is someone else's eviction tried, agreeing with this
    /// controller's.
    #[test]
    fn an_eviction_upstream_names_as_refused_agrees() {
        let mut c = watching();
        c.withheld(
            at(0),
            &command(Action::Evict {
                pod: Target {
                    key: ObjectKey::new(workload("c1"), Kind::Pod, "app", "web-0"),
                    api_version: "v1".into(),
                },
                grace_period_seconds: None,
            }),
        );
        let Object::Machine(m) = deleting_m1() else {
            unreachable!()
        };
        let m = with_condition(
            m,
            DELETING,
            "DrainingNode",
            "Drain not completed yet (started at 2024-01-01T00:00:00Z):\n* Pod app/web-0: cannot evict pod as it would violate the pod's disruption budget.",
        );
        see(
            &mut c,
            at(1),
            &upsert(Scope::Management, Object::Machine(m)),
        );
        c.finish(at(600));
        assert_eq!(c.take(), Vec::new());
    }

    /// With no Node to delete, this controller's last decision is `DeletionCompleted` (the
    /// finalizer goes once that write lands, which in shadow it never does): someone releasing
    /// the finalizer then agrees.
    #[test]
    fn a_release_after_this_controller_completed_the_deletion_agrees() {
        let mut c = Comparator::new();
        let mut m = machine("c1", "m1", None);
        m.meta.deletion_timestamp = Some(T0);
        see(
            &mut c,
            T0,
            &upsert(Scope::Management, Object::Machine(m.clone())),
        );
        let mut conditions = crate::model::Conditions::default();
        crate::model::set_condition(
            &mut conditions.current,
            crate::model::Condition::new(DELETING, ConditionStatus::True, "DeletionCompleted", ""),
            T0,
        );
        c.withheld(
            at(5),
            &command(Action::SetCondition {
                target: Target {
                    key: m1(),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                conditions,
                summary: String::new(),
            }),
        );
        m.meta.finalizers.clear();
        see(
            &mut c,
            at(6),
            &upsert(Scope::Management, Object::Machine(m)),
        );
        c.finish(at(600));
        assert_eq!(c.take(), Vec::new());
    }

    fn mhc_key() -> ObjectKey {
        ObjectKey::management(Kind::MachineHealthCheck, "default", "mhc")
    }

    fn mhc_seen(healthy: i32) -> Input {
        let mut mhc = crate::testing::machine_health_check("c1", "mhc");
        mhc.status.expected_machines = Some(3);
        mhc.status.current_healthy = Some(healthy);
        mhc.status.remediations_allowed = Some(3);
        upsert(Scope::Management, Object::MachineHealthCheck(mhc))
    }

    fn counts_write(healthy: i64) -> Command {
        Command {
            controller: ControllerId::Health,
            owner: mhc_key(),
            ..command(Action::PatchStatus {
                target: Target {
                    key: mhc_key(),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                merge: crate::command::JsonText(format!(
                    r#"{{"status":{{"currentHealthy":{healthy}}}}}"#
                )),
                summary: String::new(),
            })
        }
    }

    /// An MHC's counts agree when the object shows this controller's values within the
    /// window; otherwise both values are reported.
    #[test]
    fn status_counts_are_compared_by_value() {
        let mut c = Comparator::new();
        see(&mut c, at(0), &mhc_seen(3));
        c.withheld(at(1), &counts_write(2));
        see(&mut c, at(20), &mhc_seen(2));
        c.finish(at(100));
        assert_eq!(c.take(), Vec::new(), "shown within the window");
        c.withheld(at(200), &counts_write(1));
        c.finish(at(300));
        let found = c.take();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].step, found[0].deviation),
            (Step::StatusCounts, None)
        );
        assert_eq!(
            found[0].values,
            Some((
                "expectedMachines=3 currentHealthy=1 remediationsAllowed=3".to_string(),
                "expectedMachines=3 currentHealthy=2 remediationsAllowed=3".to_string()
            ))
        );
        assert!(
            found[0]
                .describe()
                .contains("would write expectedMachines=3 currentHealthy=1")
        );
    }

    #[test]
    fn a_pools_status_is_a_known_deviation_only_where_a_decision_explains_it() {
        let values = |phase: &str, up_to_date: &str| -> Counts {
            [
                ("replicas", "2"),
                ("upToDateReplicas", up_to_date),
                ("phase", phase),
            ]
            .into_iter()
            .map(|(f, v)| (f, v.to_string()))
            .collect()
        };
        let seen = values("Running", "2");
        assert_eq!(
            pool_deviation(&values("Failed", "2"), &seen, false),
            Some(Deviation::PoolFailed)
        );
        assert_eq!(
            pool_deviation(&values("Running", "1"), &seen, true),
            Some(Deviation::PoolMachinesWatched)
        );
        assert_eq!(pool_deviation(&values("Running", "1"), &seen, false), None);
        assert_eq!(pool_deviation(&values("ScalingUp", "1"), &seen, true), None);
    }
}
