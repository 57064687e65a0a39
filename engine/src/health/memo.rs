//! What the controller remembers of one MHC between reconciles: the inputs its verdicts were
//! made with, each target's last class and deadline, and the counts kept in step with them.

use super::judge::Evaluated;
use super::verdict::{ClusterGates, TargetClass};
use super::view::{Cached, TargetView, ViewContext};
use super::{NodeSlot, TargetIndex};
use crate::model::{
    ClusterName, External, Kind, LabelSelector, Machine, MachineHealthCheck, ObjectKey, ObjectRef,
    UnhealthyCondition,
};
use crate::time::{Duration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Up to this many targets, every reconcile of a debug build recounts the tally from the
/// targets (above it the recount would make large debug runs quadratic).
const TALLY_RECOUNT_TARGETS_MAX: usize = 256;

/// Everything a verdict depends on besides the target itself. When it changes, every verdict
/// is stale and the next reconcile evaluates all targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Facts {
    cluster_name: String,
    selector: LabelSelector,
    node_checks: Vec<UnhealthyCondition>,
    machine_checks: Vec<UnhealthyCondition>,
    node_startup_timeout: Option<Duration>,
    gates: ClusterGates,
    template_ref: Option<ObjectRef>,
    /// The template's apiVersion and body, when it exists.
    template: Option<(String, Option<String>)>,
}

impl Facts {
    pub(super) fn of(
        mhc: &MachineHealthCheck,
        gates: ClusterGates,
        template: Option<&External>,
    ) -> Facts {
        Facts {
            cluster_name: mhc.cluster_name.clone(),
            selector: mhc.selector.clone(),
            node_checks: mhc.unhealthy_node_conditions.clone(),
            machine_checks: mhc.unhealthy_machine_conditions.clone(),
            node_startup_timeout: mhc.node_startup_timeout,
            gates,
            template_ref: mhc.remediation_template.clone(),
            template: template.map(|t| (t.api_version.clone(), t.template_json.clone())),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TargetMemo {
    pub(super) class: TargetClass,
    /// When to look again: the next check, or a retry of a failed request creation.
    pub(super) deadline: Option<Timestamp>,
    pub(super) node_ref: Option<String>,
    /// `MachineMarkedUnhealthy` was emitted for the current unhealthy spell.
    pub(super) marked: bool,
    /// Healthy, and `HealthCheckSucceeded=True` was seen written on the Machine. Until the
    /// Machine changes (which marks it dirty) a full evaluation need not look again.
    pub(super) written: bool,
    /// What the last verdict read from the Machine and Node (a cache, not state).
    #[serde(skip)]
    pub(super) view: Cached<TargetView>,
}

/// Counts and deadlines kept in step with the targets' classes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Tally {
    pub(super) healthy: u32,
    pub(super) unhealthy: BTreeSet<String>,
    pub(super) deadlines: BTreeSet<(Timestamp, String)>,
    /// The observed `status.targets` was last seen equal to the target names.
    pub(super) status_targets_match: bool,
}

impl Tally {
    /// Adds a target of `class` to the counts, or takes it out.
    pub(super) fn count(&mut self, class: TargetClass, name: &str, add: bool) {
        match class {
            TargetClass::Healthy if add => self.healthy += 1,
            TargetClass::Healthy => match self.healthy.checked_sub(1) {
                Some(n) => self.healthy = n,
                None => {
                    // Taking out a healthy target the count never had: the tally drifted
                    // from the targets. Keep counting (from zero) rather than wrap.
                    debug_assert!(false, "healthy count underflow taking out {name}");
                    tracing::error!(machine = name, "MHC healthy count would go below zero");
                }
            },
            TargetClass::Unhealthy if add => {
                self.unhealthy.insert(name.to_string());
            }
            TargetClass::Unhealthy => {
                self.unhealthy.remove(name);
            }
            TargetClass::Pending | TargetClass::Unevaluated => {}
        }
    }

    pub(super) fn move_deadline(
        &mut self,
        name: &str,
        old: Option<Timestamp>,
        new: Option<Timestamp>,
    ) {
        if old == new {
            return;
        }
        if let Some(t) = old {
            self.deadlines.remove(&(t, name.to_string()));
        }
        if let Some(t) = new {
            self.deadlines.insert((t, name.to_string()));
        }
    }

    /// The counts and deadlines `targets` add up to (what this tally must equal).
    fn recount(&self, targets: &BTreeMap<String, TargetMemo>) -> Tally {
        let mut tally = Tally {
            status_targets_match: self.status_targets_match,
            ..Tally::default()
        };
        for (name, t) in targets {
            tally.count(t.class, name, true);
            tally.move_deadline(name, None, t.deadline);
        }
        tally
    }

    /// Postcondition of a judging pass: the classes partition the targets (checked always, it
    /// is O(1)), and in a debug build of a small MHC the whole tally equals a recount.
    pub(super) fn check(&self, targets: &BTreeMap<String, TargetMemo>) {
        let listed = self.unhealthy.len() as u64;
        if u64::from(self.healthy) + listed > targets.len() as u64 {
            debug_assert!(
                false,
                "{} healthy and {listed} unhealthy of {} targets",
                self.healthy,
                targets.len()
            );
            tracing::error!(
                healthy = self.healthy,
                unhealthy = listed,
                targets = targets.len(),
                "MHC counts more classified targets than it has"
            );
        }
        if cfg!(debug_assertions) && targets.len() <= TALLY_RECOUNT_TARGETS_MAX {
            debug_assert_eq!(*self, self.recount(targets), "the tally drifted");
        }
    }
}

/// What the controller remembers of one MHC: the last verdict class of every target (so counts
/// are O(1) to maintain), target deadlines, dirty targets, and what was already reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct MhcMemo {
    /// `None`: verdicts are stale (never evaluated, paused, or inputs changed).
    pub(super) facts: Option<Facts>,
    pub(super) targets: BTreeMap<String, TargetMemo>,
    pub(super) tally: Tally,
    pub(super) dirty: BTreeSet<String>,
    pub(super) allowed: bool,
    pub(super) restriction_reported: bool,
    /// The messages of the invalid spec fields a Warning event was recorded for. Encoded as
    /// the `Option<String>` of one message it replaced was (bincode: a count, then each), so a
    /// state written before reads back as the same report.
    pub(super) problems_reported: BTreeSet<String>,
    pub(super) request_retry_at: BTreeMap<String, Timestamp>,
    pub(super) request_error: Option<String>,
    /// Requests whose deletion the API accepted: not deleted again while a cache that has not
    /// caught up still shows them.
    pub(super) requests_deleted: BTreeSet<String>,
    /// Waiting for this workload cluster's cache to sync before judging anything.
    waiting_for: Option<ClusterName>,
    /// Unreadable objects a Warning event was recorded for, with the problem it named.
    pub(super) unreadable_reported: BTreeMap<ObjectKey, String>,
    /// What the targets' views were read with; `None` until a full evaluation from the store
    /// (a cache, not state).
    #[serde(skip)]
    pub(super) views_read_with: Cached<ViewContext>,
    /// Full evaluations made from the views (for tests that must know which pass ran).
    #[cfg(test)]
    #[serde(skip)]
    pub(super) passes_from_views: Cached<usize>,
}

/// Where a target's Node is indexed.
fn node_slot(m: &Machine, cluster_name: &str) -> Option<NodeSlot> {
    m.node_ref
        .as_ref()
        .map(|n| (ClusterName::new(&m.meta.namespace, cluster_name), n.clone()))
}

pub(super) fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Records fresh verdicts of known targets: the parts of an MHC's memory a verdict moves
/// besides the target itself, and what it is recorded for.
pub(super) struct Ledger<'m> {
    pub(super) tally: &'m mut Tally,
    pub(super) index: &'m mut TargetIndex,
    pub(super) mhc_key: &'m ObjectKey,
    pub(super) cluster_name: &'m str,
    pub(super) now: Timestamp,
}

impl Ledger<'_> {
    /// Applies a fresh verdict to a known target: class counts, deadline, node index.
    /// Allocates nothing when nothing changed.
    pub(super) fn update(
        &mut self,
        t: &mut TargetMemo,
        retry_at: Option<Timestamp>,
        e: &Evaluated<'_>,
    ) {
        let m = e.machine;
        let name = m.meta.name.as_str();
        let deadline = earliest(e.verdict.next_check, retry_at.filter(|r| *r > self.now));
        t.view = Cached(e.view);
        if t.node_ref != m.node_ref {
            t.node_ref = m.node_ref.clone();
            let mkey = ObjectKey::management(Kind::Machine, &m.meta.namespace, name);
            self.index.set_node(&mkey, node_slot(m, self.cluster_name));
        }
        if t.class != e.class {
            self.tally.count(t.class, name, false);
            self.tally.count(e.class, name, true);
            t.class = e.class;
            t.written = false;
            log_transition(self.mhc_key, e, self.now);
        }
        if e.class != TargetClass::Unhealthy {
            t.marked = false;
        }
        self.tally.move_deadline(name, t.deadline, deadline);
        t.deadline = deadline;
    }
}

impl MhcMemo {
    pub(super) fn mark_dirty(&mut self, name: &str) {
        if !self.dirty.contains(name) {
            self.dirty.insert(name.to_string());
        }
    }

    pub(super) fn invalidate(&mut self) {
        self.facts = None;
    }

    pub(super) fn forget_views(&mut self) {
        self.views_read_with = Cached(None);
    }

    #[cfg(test)]
    pub(super) fn passes_from_views(&self) -> usize {
        self.passes_from_views.0.unwrap_or(0)
    }

    pub(super) fn waiting_for(&self) -> Option<&ClusterName> {
        self.waiting_for.as_ref()
    }

    /// Only through [`super::HealthChecks::set_waiting`], which keeps its index in step.
    pub(super) fn set_waiting_for(&mut self, cluster: Option<ClusterName>) {
        self.waiting_for = cluster;
    }

    pub(super) fn request_deleted(&mut self, machine: &str) {
        self.requests_deleted.insert(machine.to_string());
    }

    pub(super) fn request_created(&mut self, machine: &str) {
        self.requests_deleted.remove(machine);
        self.request_retry_at.remove(machine);
        if self.request_retry_at.is_empty() {
            self.request_error = None;
        }
    }

    pub(super) fn request_failed(&mut self, machine: &str, error: String, retry_at: Timestamp) {
        self.request_retry_at.insert(machine.to_string(), retry_at);
        self.request_error = Some(error);
        self.mark_dirty(machine);
    }

    /// Records a Machine that just became a target, with its first verdict.
    pub(super) fn insert_target(
        &mut self,
        index: &mut TargetIndex,
        mhc_key: &ObjectKey,
        cluster_name: &str,
        e: &Evaluated<'_>,
        now: Timestamp,
    ) {
        let m = e.machine;
        let name = &m.meta.name;
        let retry_at = self.request_retry_at.get(name).copied();
        let deadline = earliest(e.verdict.next_check, retry_at.filter(|r| *r > now));
        self.targets.insert(
            name.clone(),
            TargetMemo {
                class: e.class,
                deadline,
                node_ref: m.node_ref.clone(),
                marked: false,
                written: false,
                view: Cached(e.view),
            },
        );
        self.tally.count(e.class, name, true);
        self.tally.move_deadline(name, None, deadline);
        self.tally.status_targets_match = false;
        let mkey = ObjectKey::management(Kind::Machine, &m.meta.namespace, name);
        index.link(&mkey, mhc_key, node_slot(m, cluster_name));
        log_transition(mhc_key, e, now);
    }

    pub(super) fn drop_target(&mut self, index: &mut TargetIndex, mhc_key: &ObjectKey, name: &str) {
        let Some(t) = self.targets.remove(name) else {
            return;
        };
        self.tally.count(t.class, name, false);
        self.tally.move_deadline(name, t.deadline, None);
        self.request_retry_at.remove(name);
        self.requests_deleted.remove(name);
        self.tally.status_targets_match = false;
        let mkey = ObjectKey::management(Kind::Machine, &mhc_key.namespace, name);
        index.unlink(&mkey, mhc_key);
        tracing::info!(mhc = %mhc_key, machine = %mkey, "Machine is no longer a target");
    }

    /// Drops the targets of a MHC that is gone from the index.
    pub(super) fn unlink_all(&self, index: &mut TargetIndex, mhc_key: &ObjectKey) {
        for name in self.targets.keys() {
            let mkey = ObjectKey::management(Kind::Machine, &mhc_key.namespace, name);
            index.unlink(&mkey, mhc_key);
        }
    }

    pub(super) fn set_written(&mut self, name: &str, written: bool) {
        if let Some(t) = self.targets.get_mut(name)
            && t.written != written
        {
            t.written = written;
        }
    }

    pub(super) fn is_marked(&self, name: &str) -> bool {
        self.targets.get(name).is_some_and(|t| t.marked)
    }

    pub(super) fn set_marked(&mut self, name: &str) {
        if let Some(t) = self.targets.get_mut(name) {
            t.marked = true;
        }
    }
}

/// `namespace/name`, written only when a log line is.
struct NamespacedName<'a>(&'a str, &'a str);

impl std::fmt::Display for NamespacedName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0, self.1)
    }
}

fn log_transition(mhc: &ObjectKey, e: &Evaluated<'_>, now: Timestamp) {
    let m = e.machine;
    // Written only when logged: a reconcile judges every target of its MHC.
    let machine = tracing::field::display(NamespacedName(&m.meta.namespace, &m.meta.name));
    match e.class {
        TargetClass::Unhealthy => {
            if tracing::enabled!(tracing::Level::INFO) {
                let why: Vec<String> = e.verdict.findings.iter().map(|f| f.message()).collect();
                tracing::info!(mhc = %mhc, machine, "Target is unhealthy: {}", why.join("; "));
            }
        }
        TargetClass::Pending => {
            let next = e
                .verdict
                .next_check
                .map(|t| t.since(now))
                .unwrap_or_default();
            tracing::info!(mhc = %mhc, machine, "Target is likely to go unhealthy: checking again in {next}");
        }
        TargetClass::Healthy => tracing::debug!(mhc = %mhc, machine, "Target is healthy"),
        TargetClass::Unevaluated => {
            tracing::debug!(mhc = %mhc, machine, "Target is not judged (deleting, no Node yet, or the Cluster is not ready)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(class: TargetClass, deadline: Option<Timestamp>) -> TargetMemo {
        TargetMemo {
            class,
            deadline,
            node_ref: None,
            marked: false,
            written: false,
            view: Cached(None),
        }
    }

    /// `problems_reported` replaced an `Option<String>` without a new state version: a state
    /// written before (none or one message) encodes the same bytes and reads back the same.
    #[test]
    fn reported_problems_read_a_state_that_held_one_message() {
        let message = "Remediation is not allowed: maxUnhealthy \"abcdef\" is invalid".to_string();
        let old_forms = [None, Some(message.clone())];
        for old in old_forms {
            let new: BTreeSet<String> = old.iter().cloned().collect();
            let bytes = crate::codec::encode(&old).unwrap();
            assert_eq!(bytes, crate::codec::encode(&new).unwrap());
            assert_eq!(
                crate::codec::decode::<BTreeSet<String>>(&bytes).unwrap(),
                new
            );
        }
    }

    /// Taking out a healthy target the count never had stops at zero in a release build
    /// (logged), and fails a debug build.
    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "healthy count underflow"))]
    fn taking_out_a_healthy_target_the_count_never_had_is_caught() {
        let mut tally = Tally::default();
        tally.count(TargetClass::Healthy, "m1", false);
        assert_eq!(tally.healthy, 0);
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "1 healthy and 1 unhealthy of 1 targets")
    )]
    fn a_tally_with_more_classified_targets_than_targets_is_caught() {
        let targets = BTreeMap::from([("m1".to_string(), target(TargetClass::Healthy, None))]);
        let mut tally = Tally::default();
        tally.count(TargetClass::Healthy, "m1", true);
        tally.count(TargetClass::Unhealthy, "m2", true);
        tally.check(&targets);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "the tally drifted")]
    fn a_tally_whose_deadlines_drifted_from_the_targets_is_caught() {
        let due = Timestamp(5_000);
        let targets = BTreeMap::from([
            ("m1".to_string(), target(TargetClass::Pending, Some(due))),
            ("m2".to_string(), target(TargetClass::Healthy, None)),
        ]);
        let mut tally = Tally::default();
        tally.count(TargetClass::Healthy, "m2", true);
        tally.move_deadline("m2", None, Some(due));
        tally.check(&targets);
    }

    #[test]
    fn a_tally_kept_in_step_passes_its_check() {
        let due = Timestamp(5_000);
        let targets = BTreeMap::from([
            ("m1".to_string(), target(TargetClass::Pending, Some(due))),
            ("m2".to_string(), target(TargetClass::Healthy, None)),
            ("m3".to_string(), target(TargetClass::Unhealthy, None)),
        ]);
        let mut tally = Tally::default();
        for (name, t) in &targets {
            tally.count(t.class, name, true);
            tally.move_deadline(name, None, t.deadline);
        }
        tally.check(&targets);
        assert_eq!(tally.recount(&targets), tally);
    }
}
