//! One MachineHealthCheck's reconcile: evaluate targets (all, or only the dirty and due ones),
//! decide the gate on the complete counts, write what differs from what is observed.

use crate::shared::conditions::{Edit, List, apply, legacy};
use super::targets::{Selection, select, selector_problem, timeout_problem};
use super::trigger::{self, restricted_message};
use super::verdict::{
    Checks, ClusterGates, Gate, HEALTH_CHECK_SUCCEEDED, NODE_STARTUP_TIMEOUT_DEFAULT,
    NodeObservation, TargetClass, Verdict, evaluate, failed_conditions,
};
use super::view::{Cached, TargetView, VIEW_CHECKS_MAX, ViewContext, judge_view};
use super::{HealthChecks, NodeSlot, TargetIndex};
use crate::command::{Action, ControllerId, EventType, JsonText, Target};
use crate::controller::{Cx, Issued};
use crate::model::{
    CLUSTER_NAME_LABEL, Cluster, ClusterName, ConditionStatus, Conditions, External, Kind,
    LabelSelector, Machine, MachineHealthCheck, Node, Object, ObjectKey, ObjectRef,
    PAUSED_ANNOTATION, Scope, Severity, UnhealthyCondition,
};
use crate::remediation::external::{request_key, request_object, request_target, template_key};
use crate::shared::{EXTERNALLY_REMEDIATED, OWNER_REMEDIATED, capi_target};
use crate::store::{Store, unreadable_message};
use crate::time::{Duration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// How often an MHC waiting for a workload cluster's cache looks again.
pub const WORKLOAD_SYNC_RECHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Above this many dirty targets (or an eighth of the targets) a reconcile judges them all in
/// one ordered pass instead of looking each up.
const DIRTY_TARGETS_FULL_PASS_MIN: usize = 64;

const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
const TEMPLATE_AVAILABLE: &str = "ExternalRemediationTemplateAvailable";
const REQUEST_AVAILABLE: &str = "ExternalRemediationRequestAvailable";

/// Everything a verdict depends on besides the target itself. When it changes, every verdict
/// is stale and the next reconcile evaluates all targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Facts {
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
    fn of(mhc: &MachineHealthCheck, gates: ClusterGates, template: Option<&External>) -> Facts {
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
struct TargetMemo {
    class: TargetClass,
    /// When to look again: the next check, or a retry of a failed request creation.
    deadline: Option<Timestamp>,
    node_ref: Option<String>,
    /// `MachineMarkedUnhealthy` was emitted for the current unhealthy spell.
    marked: bool,
    /// Healthy, and `HealthCheckSucceeded=True` was seen written on the Machine. Until the
    /// Machine changes (which marks it dirty) a full evaluation need not look again.
    written: bool,
    /// What the last verdict read from the Machine and Node (a cache, not state).
    #[serde(skip)]
    view: Cached<TargetView>,
}

/// Counts and deadlines kept in step with the targets' classes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Tally {
    healthy: u32,
    unhealthy: BTreeSet<String>,
    deadlines: BTreeSet<(Timestamp, String)>,
    /// The observed `status.targets` was last seen equal to the target names.
    status_targets_match: bool,
}

impl Tally {
    fn count(&mut self, class: TargetClass, name: &str, add: bool) {
        match class {
            TargetClass::Healthy => {
                if add {
                    self.healthy += 1
                } else {
                    self.healthy -= 1
                }
            }
            TargetClass::Unhealthy => {
                if add {
                    self.unhealthy.insert(name.to_string());
                } else {
                    self.unhealthy.remove(name);
                }
            }
            TargetClass::Pending | TargetClass::Unevaluated => {}
        }
    }

    fn move_deadline(&mut self, name: &str, old: Option<Timestamp>, new: Option<Timestamp>) {
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
}

/// What the controller remembers of one MHC: the last verdict class of every target (so counts
/// are O(1) to maintain), target deadlines, dirty targets, and what was already reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct MhcMemo {
    /// `None`: verdicts are stale (never evaluated, paused, or inputs changed).
    facts: Option<Facts>,
    targets: BTreeMap<String, TargetMemo>,
    tally: Tally,
    dirty: BTreeSet<String>,
    allowed: bool,
    restriction_reported: bool,
    problem_reported: Option<String>,
    request_retry_at: BTreeMap<String, Timestamp>,
    request_error: Option<String>,
    /// Requests whose deletion the API accepted: not deleted again while a cache that has not
    /// caught up still shows them.
    requests_deleted: BTreeSet<String>,
    /// Waiting for this workload cluster's cache to sync before judging anything.
    waiting_for: Option<ClusterName>,
    /// Unreadable objects a Warning event was recorded for, with the problem it named.
    unreadable_reported: BTreeMap<ObjectKey, String>,
    /// What the targets' views were read with; `None` until a full evaluation from the store
    /// (a cache, not state).
    #[serde(skip)]
    views_read_with: Cached<ViewContext>,
    /// Full evaluations made from the views (for tests that must know which pass ran).
    #[cfg(test)]
    #[serde(skip)]
    passes_from_views: Cached<usize>,
}

/// Where a target's Node is indexed.
fn node_slot(m: &Machine, cluster_name: &str) -> Option<NodeSlot> {
    m.node_ref
        .as_ref()
        .map(|n| (ClusterName::new(&m.meta.namespace, cluster_name), n.clone()))
}

/// Applies a fresh verdict to a known target: class counts, deadline, node index. Allocates
/// nothing when nothing changed.
#[allow(clippy::too_many_arguments)]
fn update_target(
    t: &mut TargetMemo,
    tally: &mut Tally,
    index: &mut TargetIndex,
    retry_at: Option<Timestamp>,
    mhc_key: &ObjectKey,
    cluster_name: &str,
    e: &Evaluated<'_>,
    now: Timestamp,
) {
    let m = e.machine;
    let name = m.meta.name.as_str();
    let deadline = earliest(e.verdict.next_check, retry_at.filter(|r| *r > now));
    t.view = Cached(e.view);
    if t.node_ref != m.node_ref {
        t.node_ref = m.node_ref.clone();
        let mkey = ObjectKey::management(Kind::Machine, &m.meta.namespace, name);
        index.set_node(&mkey, node_slot(m, cluster_name));
    }
    if t.class != e.class {
        tally.count(t.class, name, false);
        tally.count(e.class, name, true);
        t.class = e.class;
        t.written = false;
        log_transition(mhc_key, m, e, now);
    }
    if e.class != TargetClass::Unhealthy {
        t.marked = false;
    }
    tally.move_deadline(name, t.deadline, deadline);
    t.deadline = deadline;
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
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

    /// Only through [`HealthChecks::set_waiting`], which keeps its index in step.
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

    /// Records a fresh verdict for one target (new or known).
    fn record(
        &mut self,
        index: &mut TargetIndex,
        mhc_key: &ObjectKey,
        cluster_name: &str,
        e: &Evaluated<'_>,
        now: Timestamp,
    ) {
        let name = e.machine.meta.name.as_str();
        if !e.is_unhealthy_class() {
            self.request_retry_at.remove(name);
        }
        let retry_at = self.request_retry_at.get(name).copied();
        match self.targets.get_mut(name) {
            Some(t) => update_target(
                t,
                &mut self.tally,
                index,
                retry_at,
                mhc_key,
                cluster_name,
                e,
                now,
            ),
            None => self.insert_target(index, mhc_key, cluster_name, e, now),
        }
    }

    fn insert_target(
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
        log_transition(mhc_key, m, e, now);
    }

    fn drop_target(&mut self, index: &mut TargetIndex, mhc_key: &ObjectKey, name: &str) {
        let Some(t) = self.targets.remove(name) else {
            return;
        };
        self.tally.count(t.class, name, false);
        self.tally.move_deadline(name, t.deadline, None);
        self.request_retry_at.remove(name);
        self.tally.status_targets_match = false;
        let mkey = ObjectKey::management(Kind::Machine, &mhc_key.namespace, name);
        index.unlink(&mkey, mhc_key);
        tracing::info!(mhc = %mhc_key, machine = %mkey, "Machine is no longer a target");
    }

    fn set_written(&mut self, name: &str, written: bool) {
        if let Some(t) = self.targets.get_mut(name)
            && t.written != written
        {
            t.written = written;
        }
    }

    fn is_marked(&self, name: &str) -> bool {
        self.targets.get(name).is_some_and(|t| t.marked)
    }

    fn set_marked(&mut self, name: &str) {
        if let Some(t) = self.targets.get_mut(name) {
            t.marked = true;
        }
    }
}

fn log_transition(mhc: &ObjectKey, m: &Machine, e: &Evaluated<'_>, now: Timestamp) {
    let machine = format!("{}/{}", m.meta.namespace, m.meta.name);
    match e.class {
        TargetClass::Unhealthy => {
            let why: Vec<String> = e.verdict.findings.iter().map(|f| f.message()).collect();
            tracing::info!(mhc = %mhc, machine, "Target is unhealthy: {}", why.join("; "));
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

/// One target judged at `now`.
struct Evaluated<'a> {
    machine: &'a Machine,
    verdict: Verdict,
    class: TargetClass,
    /// What the verdict read (`None` when the MHC has more checks than a view holds).
    view: Option<TargetView>,
}

/// What a full evaluation found besides the verdicts it keeps.
#[derive(Default)]
struct Found<'a> {
    /// Evaluations that may need a write.
    out: Vec<Evaluated<'a>>,
    /// Evaluations of Machines that were not targets.
    new: Vec<Evaluated<'a>>,
    /// Targets that are no longer.
    gone: Vec<String>,
}

impl Evaluated<'_> {
    fn is_unhealthy_class(&self) -> bool {
        self.class == TargetClass::Unhealthy
    }
}

/// The Nodes of one workload cluster in name order, for a full evaluation: found by a cursor
/// when Node names sort like Machine names (the usual case), else by binary search. Either way
/// no store lookup per target.
struct NodeDirectory<'a> {
    nodes: Vec<(&'a str, &'a Node)>,
    cursor: usize,
}

impl<'a> NodeDirectory<'a> {
    fn of(store: &'a Store, scope: &'a Scope) -> Self {
        let nodes = store
            .iter_kind(scope, &Kind::Node)
            .filter_map(|(k, o)| match o {
                Object::Node(n) => Some((k.name.as_str(), n)),
                _ => None,
            })
            .collect();
        NodeDirectory { nodes, cursor: 0 }
    }

    fn find(&mut self, name: &str) -> Option<&'a Node> {
        if let Some((n, node)) = self.nodes.get(self.cursor)
            && *n == name
        {
            self.cursor += 1;
            return Some(node);
        }
        let i = self.nodes.binary_search_by(|(n, _)| (*n).cmp(name)).ok()?;
        self.cursor = i + 1;
        Some(self.nodes[i].1)
    }
}

/// Judges targets of one MHC at one time, reusing a Node key buffer so a lookup does not
/// allocate.
struct Judge<'a> {
    store: &'a Store,
    mhc: &'a MachineHealthCheck,
    gates: ClusterGates,
    checks: Checks<'a>,
    workload: Option<&'a Scope>,
    node_key: Option<ObjectKey>,
    directory: Option<NodeDirectory<'a>>,
    now: Timestamp,
    /// Objects a verdict depended on that cannot be read, with the problem.
    unknown: Vec<(ObjectKey, String)>,
}

impl<'a> Judge<'a> {
    fn node_of(&mut self, m: &Machine) -> NodeObservation<'a> {
        let (Some(key), Some(name)) = (&mut self.node_key, &m.node_ref) else {
            return NodeObservation::NotRead;
        };
        if self.store.has_unreadable() {
            if key.name != name.as_str() {
                *key = ObjectKey::new(key.scope.clone(), Kind::Node, "", name);
            }
            if let Some(problem) = self.store.unreadable(key) {
                self.unknown.push((key.clone(), problem.to_string()));
                return NodeObservation::Unreadable;
            }
        }
        if let Some(dir) = &mut self.directory
            && let Some(n) = dir.find(name)
        {
            return NodeObservation::Found(n);
        }
        if key.name != name.as_str() {
            *key = ObjectKey::new(key.scope.clone(), Kind::Node, "", name);
        }
        let store: &'a Store = self.store;
        if let Some(Object::Node(n)) = store.get(key) {
            return NodeObservation::Found(n);
        }
        let machine = ObjectKey::management(Kind::Machine, &m.meta.namespace, &m.meta.name);
        if store.node_seen_gone(key, &machine) {
            NodeObservation::Missing
        } else {
            // Not in the cache yet: judged as a Node that has not joined (found over HTTP: a
            // replacement Machine's nodeRef arrived before its Node and it was remediated).
            NodeObservation::NotRead
        }
    }

    fn judge(&mut self, m: &'a Machine) -> Evaluated<'a> {
        if self.store.has_unreadable() {
            let key = ObjectKey::management(Kind::Machine, &m.meta.namespace, &m.meta.name);
            if let Some(problem) = self.store.unreadable(&key) {
                // Its last good reading may say anything: nothing is judged by it.
                self.unknown.push((key, problem.to_string()));
                return Evaluated {
                    machine: m,
                    verdict: Verdict::default(),
                    class: TargetClass::Unevaluated,
                    view: None,
                };
            }
        }
        let node = self.node_of(m);
        let verdict = evaluate(m, node, &self.gates, &self.checks, self.now);
        let class = TargetClass::of(&verdict, m, node);
        Evaluated {
            machine: m,
            verdict,
            class,
            view: TargetView::read(m, node, &self.checks),
        }
    }

    fn target(&self, name: &str) -> Option<&'a Machine> {
        let key = ObjectKey::management(Kind::Machine, &self.mhc.meta.namespace, name);
        let store: &'a Store = self.store;
        match store.get(&key) {
            Some(Object::Machine(m))
                if selector_problem(self.mhc).is_none()
                    && select(self.mhc, m) == Selection::Target =>
            {
                Some(m)
            }
            _ => None,
        }
    }

    /// Judges every target and records each verdict in one merge of the Machines labelled for
    /// the MHC's cluster with the known targets (both in name order); drops the targets not
    /// seen. Costs the cluster's Machines, whatever the size of the namespace.
    /// Returns only the evaluations that may need a write (unhealthy, or healthy but not yet
    /// marked so, or with a remediation request to withdraw), in name order.
    fn all(
        &mut self,
        memo: &mut MhcMemo,
        index: &mut TargetIndex,
        mhc_key: &ObjectKey,
        has_template: bool,
        dirty: &BTreeSet<String>,
    ) -> Vec<Evaluated<'a>> {
        let mut found = Found::default();
        let valid = selector_problem(self.mhc).is_none();
        let ns = self.mhc.meta.namespace.as_str();
        let store: &'a Store = self.store;
        if let Some(scope) = self.workload {
            self.directory = Some(NodeDirectory::of(store, scope));
        }
        {
            let MhcMemo {
                targets,
                tally,
                request_retry_at,
                ..
            } = memo;
            let mut known = targets.iter_mut().peekable();
            // Only Machines labelled for the MHC's cluster can be selected: the walk costs the
            // cluster's Machines, not the namespace's.
            let machines = store
                .machines_labelled_for_cluster(ns, &self.mhc.cluster_name)
                .filter(|_| valid)
                .filter_map(|k| store.get(k));
            for o in machines {
                let Object::Machine(m) = o else { continue };
                let name = m.meta.name.as_str();
                while let Some((t, _)) = known.peek()
                    && t.as_str() < name
                {
                    found.gone.push(t.to_string());
                    known.next();
                }
                let entry = match known.peek() {
                    Some((t, _)) if t.as_str() == name => known.next().map(|(_, t)| t),
                    _ => None,
                };
                let clean = dirty.is_empty() || !dirty.contains(name);
                let visit = Visit {
                    clean,
                    has_template,
                    mhc_key,
                };
                self.visit(m, entry, &visit, tally, request_retry_at, index, &mut found);
            }
            found.gone.extend(known.map(|(k, _)| k.clone()));
        }
        self.finish(memo, index, mhc_key, found)
    }

    /// What [`Judge::all`] does, from the targets' views instead of the store: the Machines
    /// of the namespace that are not targets are not looked at (one that became a target
    /// changed, so it is dirty), and a target is read from the store only when it is dirty or
    /// its view cannot settle it (no view, unhealthy, or something to update or write).
    /// Requires views read with the MHC's current [`ViewContext`] and no remediation template
    /// (with one, every healthy target is written to, which needs its Machine).
    fn all_from_views(
        &mut self,
        memo: &mut MhcMemo,
        index: &mut TargetIndex,
        mhc_key: &ObjectKey,
        dirty: &BTreeSet<String>,
    ) -> Vec<Evaluated<'a>> {
        let now = self.now;
        let mut again = Vec::new();
        {
            let MhcMemo {
                targets,
                request_retry_at,
                ..
            } = &mut *memo;
            for (name, t) in targets.iter_mut() {
                if !dirty.is_empty() && dirty.contains(name) {
                    continue;
                }
                let judged = t
                    .view
                    .0
                    .as_ref()
                    .and_then(|v| judge_view(v, &self.gates, &self.checks, now));
                let Some((class, next_check)) = judged else {
                    again.push(name.clone());
                    continue;
                };
                // Not unhealthy: a pending request retry is dropped, as `visit` does.
                if !request_retry_at.is_empty() {
                    request_retry_at.remove(name);
                }
                // What `visit` would leave as it is: a healthy target whose condition was seen
                // written, or a pending or unjudged one whose deadline stays.
                let unchanged = match class {
                    TargetClass::Healthy => t.class == TargetClass::Healthy && t.written,
                    TargetClass::Pending | TargetClass::Unevaluated => {
                        t.class == class && t.deadline == next_check && !t.marked
                    }
                    TargetClass::Unhealthy => false,
                };
                if !unchanged {
                    again.push(name.clone());
                }
            }
        }
        let mut found = Found::default();
        let namespace = &self.mhc.meta.namespace;
        let store: &'a Store = self.store;
        let MhcMemo {
            targets,
            tally,
            request_retry_at,
            ..
        } = &mut *memo;
        for name in dirty.iter().chain(&again) {
            let key = ObjectKey::management(Kind::Machine, namespace, name);
            let entry = targets.get_mut(name.as_str());
            match store.get(&key) {
                Some(Object::Machine(m)) => {
                    let visit = Visit {
                        clean: !dirty.contains(name),
                        has_template: false,
                        mhc_key,
                    };
                    self.visit(m, entry, &visit, tally, request_retry_at, index, &mut found);
                }
                _ if entry.is_some() => found.gone.push(name.clone()),
                _ => {}
            }
        }
        found
            .out
            .sort_by(|a, b| a.machine.meta.name.cmp(&b.machine.meta.name));
        self.finish(memo, index, mhc_key, found)
    }

    /// One Machine of the namespace in a full evaluation: select, judge, and record the
    /// verdict of a known target (or collect a new or lost one in `found`).
    #[allow(clippy::too_many_arguments)]
    fn visit(
        &mut self,
        m: &'a Machine,
        entry: Option<&mut TargetMemo>,
        visit: &Visit<'_>,
        tally: &mut Tally,
        request_retry_at: &mut BTreeMap<String, Timestamp>,
        index: &mut TargetIndex,
        found: &mut Found<'a>,
    ) {
        let name = m.meta.name.as_str();
        match select(self.mhc, m) {
            Selection::Target => {}
            Selection::Skipped(why) => {
                if entry.is_some() {
                    let key = ObjectKey::management(Kind::Machine, &m.meta.namespace, name);
                    tracing::info!(machine = %key, "Skipping remediation: {why}");
                    found.gone.push(name.to_string());
                }
                return;
            }
            Selection::NotSelected => {
                if entry.is_some() {
                    found.gone.push(name.to_string());
                }
                return;
            }
        }
        let e = self.judge(m);
        if !e.is_unhealthy_class() && !request_retry_at.is_empty() {
            request_retry_at.remove(name);
        }
        let Some(t) = entry else {
            found.new.push(e);
            return;
        };
        // A healthy target still healthy, whose Machine did not change since its condition
        // was seen written, has nothing to update or write.
        if visit.clean
            && t.written
            && t.class == TargetClass::Healthy
            && e.class == TargetClass::Healthy
            && !visit.has_template
        {
            t.view = Cached(e.view);
            return;
        }
        let retry_at = request_retry_at.get(name).copied();
        let cluster_name = self.mhc.cluster_name.as_str();
        update_target(
            t,
            tally,
            index,
            retry_at,
            visit.mhc_key,
            cluster_name,
            &e,
            self.now,
        );
        let needs_write = match e.class {
            TargetClass::Unhealthy => true,
            TargetClass::Healthy => {
                t.written = healthy_written(&m.conditions);
                visit.has_template || !t.written
            }
            TargetClass::Pending | TargetClass::Unevaluated => false,
        };
        if needs_write {
            found.out.push(e);
        }
    }

    /// Drops the lost targets and records the new ones; returns the evaluations to write, in
    /// name order.
    fn finish(
        &self,
        memo: &mut MhcMemo,
        index: &mut TargetIndex,
        mhc_key: &ObjectKey,
        found: Found<'a>,
    ) -> Vec<Evaluated<'a>> {
        let Found { mut out, new, gone } = found;
        for name in gone {
            memo.drop_target(index, mhc_key, &name);
        }
        if !new.is_empty() {
            let cluster_name = self.mhc.cluster_name.as_str();
            for e in &new {
                memo.insert_target(index, mhc_key, cluster_name, e, self.now);
            }
            out.extend(new);
            out.sort_by(|a, b| a.machine.meta.name.cmp(&b.machine.meta.name));
        }
        out
    }
}

/// How [`Judge::visit`] treats one Machine.
struct Visit<'k> {
    /// Not marked dirty since the last reconcile.
    clean: bool,
    has_template: bool,
    mhc_key: &'k ObjectKey,
}

impl HealthChecks {
    pub(super) fn forget_mhc(&mut self, key: &ObjectKey) {
        self.set_waiting(key, None);
        if let Some(memo) = self.mhcs.remove(key) {
            for name in memo.targets.keys() {
                let mkey = ObjectKey::management(Kind::Machine, &key.namespace, name);
                self.index.unlink(&mkey, key);
            }
        }
        self.timers.cancel(key);
    }

    /// Stops judging until the next reconcile that can (all verdicts become stale). While
    /// waiting for a workload cache, look again every [`WORKLOAD_SYNC_RECHECK_INTERVAL`]: a
    /// relist of an empty cluster changes no object, so no change would wake the MHC.
    fn suspend(&mut self, key: &ObjectKey, waiting_for: Option<ClusterName>, now: Timestamp) {
        let memo = self.mhcs.entry(key.clone()).or_default();
        memo.facts = None;
        self.timers.cancel(key);
        if waiting_for.is_some() {
            self.timers
                .wake_at(key, now.saturating_add(WORKLOAD_SYNC_RECHECK_INTERVAL));
        }
        self.set_waiting(key, waiting_for);
    }

    pub(super) fn reconcile_mhc(&mut self, key: &ObjectKey, cx: &mut Cx<'_>) {
        let store: &Store = cx.store;
        let now = cx.now;
        let Some(Object::MachineHealthCheck(mhc)) = store.get(key) else {
            self.forget_mhc(key);
            return;
        };
        let cluster_key =
            ObjectKey::management(Kind::Cluster, &mhc.meta.namespace, &mhc.cluster_name);
        let Some(Object::Cluster(cluster)) = store.get(&cluster_key) else {
            tracing::info!(mhc = %key, "Cluster {} not found; nothing to check", cluster_key);
            self.suspend(key, None, now);
            return;
        };
        if cluster.paused || mhc.meta.has_annotation(PAUSED_ANNOTATION) {
            tracing::debug!(mhc = %key, "Reconciliation is paused for this object");
            self.suspend(key, None, now);
            return;
        }
        if store.has_unreadable()
            && let Some((unknown, problem)) = [key, &cluster_key]
                .into_iter()
                .find_map(|k| store.unreadable(k).map(|p| (k.clone(), p.to_string())))
        {
            // Its spec or the Cluster's gates may say anything: no target is judged.
            tracing::warn!(mhc = %key, "{}", unreadable_message(&unknown, &problem));
            let memo = self.mhcs.entry(key.clone()).or_default();
            report_unreadable(memo, key, mhc, &unknown, &problem, cx);
            self.suspend(key, None, now);
            return;
        }
        ensure_cluster_owner(key, mhc, cluster, cx);
        let gates = ClusterGates {
            control_plane_initialized: Gate::read(&cluster.conditions, "ControlPlaneInitialized"),
            infrastructure_ready: Gate::read(&cluster.conditions, "InfrastructureReady"),
        };
        // Nodes are read only once the control plane is initialized (upstream has no workload
        // client before), and never from a cache that has not synced: a Node missing from an
        // unsynced cache is not a deleted Node.
        let workload = gates
            .control_plane_initialized
            .is_true
            .then(|| ClusterName::new(&mhc.meta.namespace, &mhc.cluster_name));
        if let Some(c) = &workload
            && !store.is_synced(&Scope::Workload(c.clone()))
        {
            tracing::info!(mhc = %key, "Waiting for the cache of workload cluster {}/{} to sync", c.namespace, c.name);
            self.suspend(key, Some(c.clone()), now);
            return;
        }
        let template = mhc.remediation_template.as_ref().map(|r| {
            let t = match store.get(&template_key(mhc, r)) {
                Some(Object::External(t)) => Some(t),
                _ => None,
            };
            (r, t)
        });
        let facts = Facts::of(mhc, gates, template.and_then(|(_, t)| t));

        self.mhcs.entry(key.clone()).or_default();
        self.set_waiting(key, None);
        let HealthChecks {
            mhcs,
            index,
            timers,
            ..
        } = self;
        let memo = mhcs.entry(key.clone()).or_default();
        let views_hold = template.is_none()
            && mhc.unhealthy_machine_conditions.len() + mhc.unhealthy_node_conditions.len()
                <= VIEW_CHECKS_MAX
            && (memo.views_read_with.0.as_ref())
                .is_some_and(|c| c.holds_for(mhc, workload.as_ref()));
        let workload_scope = workload.clone().map(Scope::Workload);
        // Many dirty targets at once (a relist) are cheaper to judge in one ordered pass than
        // by one store lookup each.
        let many_dirty = memo.dirty.len() > DIRTY_TARGETS_FULL_PASS_MIN.max(memo.targets.len() / 8);
        let full = memo.facts.as_ref() != Some(&facts) || many_dirty;
        let mut judge = Judge {
            store,
            mhc,
            gates,
            checks: Checks {
                unhealthy_node_conditions: &mhc.unhealthy_node_conditions,
                unhealthy_machine_conditions: &mhc.unhealthy_machine_conditions,
                // An invalid negative value (see `timeout_problem`) judges nothing by it.
                node_startup_timeout: mhc
                    .node_startup_timeout
                    .unwrap_or(NODE_STARTUP_TIMEOUT_DEFAULT)
                    .max(Duration::ZERO),
            },
            workload: workload_scope.as_ref(),
            node_key: workload_scope
                .as_ref()
                .map(|scope| ObjectKey::new(scope.clone(), Kind::Node, "", "")),
            directory: None,
            now,
            unknown: Vec::new(),
        };

        // 1. Judge: everything, or only what changed or fell due.
        let evaluated = if full {
            memo.facts = Some(facts);
            let dirty = std::mem::take(&mut memo.dirty);
            if views_hold && !many_dirty {
                // A change of the gates, timeouts or limits: every target is judged again,
                // from what was read of it unless it changed.
                #[cfg(test)]
                {
                    *memo.passes_from_views.0.get_or_insert(0) += 1;
                }
                judge.all_from_views(memo, index, key, &dirty)
            } else {
                let out = judge.all(memo, index, key, template.is_some(), &dirty);
                if !views_hold {
                    memo.views_read_with = Cached(Some(ViewContext::of(mhc, workload.as_ref())));
                }
                out
            }
        } else {
            let mut names = std::mem::take(&mut memo.dirty);
            for (t, name) in &memo.tally.deadlines {
                if *t > now {
                    break;
                }
                names.insert(name.clone());
            }
            let mut out = Vec::new();
            for name in names {
                match judge.target(&name) {
                    Some(m) => out.push(judge.judge(m)),
                    None => memo.drop_target(index, key, &name),
                }
            }
            for e in &out {
                memo.record(index, key, &mhc.cluster_name, e, now);
            }
            out
        };

        memo.unreadable_reported
            .retain(|k, _| store.unreadable(k).is_some());
        for (unknown, problem) in std::mem::take(&mut judge.unknown) {
            report_unreadable(memo, key, mhc, &unknown, &problem, cx);
        }

        // 2. Decide on the complete counts.
        let expected = memo.targets.len() as u32;
        let healthy = memo.tally.healthy;
        let listed = memo.tally.unhealthy.len() as u32;
        debug_assert!(
            healthy + listed <= expected,
            "classes partition the targets"
        );
        let spec_problem = selector_problem(mhc)
            .map(|why| {
                (
                    "InvalidSelector",
                    format!("Remediation is not allowed: the selector is invalid ({why})"),
                )
            })
            .or_else(|| timeout_problem(mhc));
        let gate = match spec_problem {
            Some(problem) => Err(problem),
            None => trigger::decide(
                mhc.max_unhealthy.as_ref(),
                mhc.unhealthy_range.as_deref(),
                expected,
                expected - healthy,
            )
            .map_err(|e| (e.reason(), e.message())),
        };
        let allowed = gate.as_ref().is_ok_and(|g| g.allowed);
        let newly_allowed = allowed && !memo.allowed;
        memo.allowed = allowed;

        // 3. Write the targets: the judged ones, and every unhealthy one when remediation has
        //    just become allowed.
        let mut extra = Vec::new();
        if newly_allowed {
            let judged: BTreeSet<&str> = evaluated
                .iter()
                .map(|e| e.machine.meta.name.as_str())
                .collect();
            let pending: Vec<String> = memo
                .tally
                .unhealthy
                .iter()
                .filter(|n| !judged.contains(n.as_str()))
                .cloned()
                .collect();
            for name in pending {
                if let Some(m) = judge.target(&name) {
                    extra.push(judge.judge(m));
                }
            }
        }
        let ctx = SyncCx {
            store,
            mhc,
            mhc_key: key,
            allowed,
            template,
            now,
        };
        for e in evaluated.iter().chain(&extra) {
            ctx.sync_target(e, memo, cx);
        }

        // 4. The MHC itself: status, conditions, events.
        ctx.sync_mhc(memo, &gate, expected, healthy, listed, full, cx);

        // 5. Wake at the earliest target deadline, short-circuited or not (decision 11).
        timers.cancel(key);
        if let Some((at, _)) = memo.tally.deadlines.first() {
            debug_assert!(
                *at > now,
                "every deadline is in the future after a reconcile"
            );
            timers.wake_at(key, *at);
        }
    }
}

/// Records a Warning event on the MHC for an object its checks cannot read, once per problem.
fn report_unreadable(
    memo: &mut MhcMemo,
    mhc_key: &ObjectKey,
    mhc: &MachineHealthCheck,
    unknown: &ObjectKey,
    problem: &str,
    cx: &mut Cx<'_>,
) {
    if memo.unreadable_reported.get(unknown).map(String::as_str) == Some(problem) {
        return;
    }
    let message = format!(
        "{}; the health checks that depend on it wait until it can be read",
        unreadable_message(unknown, problem)
    );
    let issued = cx.issue(
        ControllerId::Health,
        Action::RecordEvent {
            regarding: capi_target(mhc_key.clone(), mhc.version),
            type_: EventType::Warning,
            reason: crate::store::OBJECT_UNREADABLE.to_string(),
            message: message.clone(),
        },
        message,
    );
    if issued.recorded() {
        memo.unreadable_reported
            .insert(unknown.clone(), problem.to_string());
    }
}

/// `ObjectsReadable=False (ObjectUnreadable)` naming what the checks cannot read while
/// something is unknown; removed (never written True) once everything reads.
fn readable_edit(memo: &MhcMemo) -> Edit {
    let mut unknown = memo.unreadable_reported.iter();
    let Some((key, problem)) = unknown.next() else {
        return Edit::Remove(List::Current, crate::store::OBJECTS_READABLE);
    };
    let more = match unknown.len() {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    let message = format!(
        "{}{more}; the health checks that depend on it wait until it can be read",
        unreadable_message(key, problem)
    );
    Edit::set(
        List::Current,
        crate::store::OBJECTS_READABLE,
        ConditionStatus::False,
        crate::store::OBJECT_UNREADABLE,
        &message,
    )
}

/// Adds the cluster-name label and an owner reference to the Cluster when missing (upstream
/// reconcile step 2).
fn ensure_cluster_owner(
    key: &ObjectKey,
    mhc: &MachineHealthCheck,
    cluster: &Cluster,
    cx: &mut Cx<'_>,
) {
    let label_ok = mhc.meta.labels.get(CLUSTER_NAME_LABEL) == Some(&mhc.cluster_name);
    let owner_ok = mhc
        .meta
        .owner_references
        .iter()
        .any(|o| o.kind == "Cluster" && o.name == cluster.meta.name);
    if label_ok && owner_ok {
        return;
    }
    let mut meta = Map::new();
    let mut summary = Vec::new();
    if !label_ok {
        meta.insert(
            "labels".into(),
            json!({ CLUSTER_NAME_LABEL: mhc.cluster_name }),
        );
        summary.push(format!("label {CLUSTER_NAME_LABEL}={}", mhc.cluster_name));
    }
    if !owner_ok {
        let mut refs: Vec<Value> = mhc
            .meta
            .owner_references
            .iter()
            .map(|o| {
                let mut r = json!({"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid});
                if o.controller {
                    r["controller"] = Value::Bool(true);
                }
                r
            })
            .collect();
        refs.push(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "name": cluster.meta.name,
            "uid": cluster.meta.uid,
        }));
        meta.insert("ownerReferences".into(), Value::Array(refs));
        summary.push(format!("owner Cluster {}", cluster.meta.name));
    }
    cx.issue(
        ControllerId::Health,
        Action::SetOwnerReference {
            target: capi_target(key.clone(), mhc.version),
            merge: JsonText::from_value(&json!({ "metadata": meta })),
            summary: summary.join(", "),
        },
        format!(
            "MachineHealthCheck {} belongs to Cluster {}/{}",
            key.name, cluster.meta.namespace, cluster.meta.name
        ),
    );
}

fn is_false(c: Option<&crate::model::Condition>) -> bool {
    c.is_some_and(|c| c.status == ConditionStatus::False)
}

/// Whether a healthy target's `HealthCheckSucceeded` is already written (checked in place so
/// a full evaluation of healthy targets does not allocate).
fn healthy_written(c: &Conditions) -> bool {
    let ok = |x: Option<&crate::model::Condition>, reason: &str| {
        x.is_some_and(|x| {
            x.status == ConditionStatus::True
                && x.reason == reason
                && x.message.is_empty()
                && x.severity == Severity::None
        })
    };
    ok(c.current(HEALTH_CHECK_SUCCEEDED), "HealthCheckSucceeded")
        && ok(c.legacy(HEALTH_CHECK_SUCCEEDED), "")
}

/// What target and MHC writes need, for one reconcile.
struct SyncCx<'a> {
    store: &'a Store,
    mhc: &'a MachineHealthCheck,
    mhc_key: &'a ObjectKey,
    allowed: bool,
    template: Option<(&'a ObjectRef, Option<&'a External>)>,
    now: Timestamp,
}

impl SyncCx<'_> {
    fn mhc_name(&self) -> String {
        format!("{}/{}", self.mhc.meta.namespace, self.mhc.meta.name)
    }

    fn sync_target(&self, e: &Evaluated<'_>, memo: &mut MhcMemo, cx: &mut Cx<'_>) {
        let m = e.machine;
        // Fast path: nothing to write for a target that is not judged, or healthy and already
        // marked so (most of a fleet, most of the time).
        match e.class {
            TargetClass::Pending | TargetClass::Unevaluated => return,
            TargetClass::Healthy if self.template.is_none() && healthy_written(&m.conditions) => {
                memo.set_written(&m.meta.name, true);
                return;
            }
            TargetClass::Healthy | TargetClass::Unhealthy => {}
        }
        let name = m.meta.name.as_str();
        let machine = format!("{}/{}", m.meta.namespace, name);
        let mkey = ObjectKey::management(Kind::Machine, &m.meta.namespace, name);
        let mut edits: Vec<Edit> = Vec::new();
        let mut actions: Vec<(Action, String)> = Vec::new();
        let mut mark = false;
        let why = match e.class {
            TargetClass::Healthy => {
                if !healthy_written(&m.conditions) {
                    edits.push(Edit::set(
                        List::Current,
                        HEALTH_CHECK_SUCCEEDED,
                        ConditionStatus::True,
                        "HealthCheckSucceeded",
                        "",
                    ));
                    edits.push(Edit::set(
                        List::Legacy,
                        HEALTH_CHECK_SUCCEEDED,
                        ConditionStatus::True,
                        "",
                        "",
                    ));
                }
                if let Some((tref, _)) = self.template {
                    let rkey = request_key(tref, m);
                    let request = self.store.get(&rkey);
                    if request.is_none() {
                        memo.requests_deleted.remove(&m.meta.name);
                    }
                    if let Some(Object::External(r)) = request
                        && !r.meta.is_deleting()
                        && !memo.requests_deleted.contains(&m.meta.name)
                    {
                        actions.push((
                            Action::DeleteRemediation {
                                target: Target {
                                    key: rkey,
                                    api_version: r.api_version.clone(),
                                },
                            },
                            format!("Machine {machine} is healthy again; its remediation request is no longer needed"),
                        ));
                    }
                }
                format!(
                    "Machine {machine} passed MachineHealthCheck {}",
                    self.mhc_name()
                )
            }
            TargetClass::Unhealthy => {
                let (current, legacy_c) = failed_conditions(&e.verdict.findings);
                edits.push(Edit::set_with(List::Current, current));
                edits.push(Edit::set_with(List::Legacy, legacy_c));
                let first = e.verdict.findings[0].message();
                if self.allowed {
                    self.remediate(m, memo, &mut edits, &mut actions);
                    mark = !memo.is_marked(name);
                    format!(
                        "Machine {machine} is unhealthy ({first}); MachineHealthCheck {} remediates it",
                        self.mhc_name()
                    )
                } else {
                    format!(
                        "Machine {machine} is unhealthy ({first}); remediation by MachineHealthCheck {} is not allowed now",
                        self.mhc_name()
                    )
                }
            }
            TargetClass::Pending | TargetClass::Unevaluated => return,
        };
        if let Some((conditions, summary)) = apply(&m.conditions, &edits, self.now) {
            let issued = cx.issue(
                ControllerId::Health,
                Action::SetCondition {
                    target: capi_target(mkey.clone(), m.version),
                    conditions,
                    summary,
                },
                why,
            );
            if !matches!(issued, Issued::Queued(_)) {
                memo.mark_dirty(name);
            }
        }
        for (action, why) in actions {
            if !matches!(
                cx.issue(ControllerId::Health, action, why),
                Issued::Queued(_)
            ) {
                memo.mark_dirty(name);
            }
        }
        if mark {
            let message = format!(
                "Machine {machine} has been marked as unhealthy by {}",
                self.mhc_name()
            );
            cx.issue(
                ControllerId::Health,
                Action::RecordEvent {
                    regarding: capi_target(mkey, m.version),
                    type_: EventType::Normal,
                    reason: "MachineMarkedUnhealthy".to_string(),
                    message: message.clone(),
                },
                message,
            );
            memo.set_marked(name);
        }
    }

    /// The remediation half for an unhealthy target when remediation is allowed (§2.5).
    fn remediate(
        &self,
        m: &Machine,
        memo: &mut MhcMemo,
        edits: &mut Vec<Edit>,
        actions: &mut Vec<(Action, String)>,
    ) {
        let name = m.meta.name.as_str();
        let machine = format!("{}/{}", m.meta.namespace, name);
        match self.template {
            None => {
                // Owner remediation; a False OwnerRemediated means the owner is on it already,
                // in either API version (so its MachineDeleting mark is never taken back).
                if m.meta.is_deleting() || is_false(m.conditions.current(OWNER_REMEDIATED)) {
                    return;
                }
                edits.push(Edit::set(
                    List::Current,
                    OWNER_REMEDIATED,
                    ConditionStatus::False,
                    "WaitingForRemediation",
                    "Waiting for remediation",
                ));
                if !is_false(m.conditions.legacy(OWNER_REMEDIATED)) {
                    edits.push(Edit::set_with(
                        List::Legacy,
                        legacy(
                            OWNER_REMEDIATED,
                            ConditionStatus::False,
                            "WaitingForRemediation",
                            "",
                            Severity::Warning,
                        ),
                    ));
                }
            }
            Some((tref, None)) => {
                let message = format!(
                    "Error retrieving remediation template {} {}/{}",
                    tref.kind, self.mhc.meta.namespace, tref.name
                );
                tracing::warn!(mhc = %self.mhc_key, machine, "{message}");
                edits.push(Edit::set(
                    List::Current,
                    EXTERNALLY_REMEDIATED,
                    ConditionStatus::False,
                    "RemediationTemplateNotFound",
                    &message,
                ));
            }
            Some((tref, Some(template))) => {
                let rkey = request_key(tref, m);
                let exists = self.store.get(&rkey).is_some();
                if exists && memo.request_retry_at.contains_key(name) {
                    // A create that failed, or timed out, made it after all: the request is
                    // there, so the failure no longer stands.
                    memo.request_created(name);
                }
                let retry_at = memo
                    .request_retry_at
                    .get(name)
                    .copied()
                    .filter(|t| *t > self.now);
                if !exists && retry_at.is_some() {
                    edits.push(Edit::set(
                        List::Current,
                        EXTERNALLY_REMEDIATED,
                        ConditionStatus::False,
                        "RemediationRequestCreationFailed",
                        "Please check controller logs for errors",
                    ));
                    return;
                }
                if !exists {
                    memo.request_retry_at.remove(name);
                    actions.push((
                        Action::CreateRemediation {
                            target: request_target(tref, template, m),
                            object: request_object(tref, template, m),
                        },
                        format!(
                            "Machine {machine} is unhealthy; requesting external remediation from {} {}",
                            tref.kind, tref.name
                        ),
                    ));
                }
                edits.push(Edit::set(
                    List::Current,
                    EXTERNALLY_REMEDIATED,
                    ConditionStatus::False,
                    "WaitingForRemediation",
                    "",
                ));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn sync_mhc(
        &self,
        memo: &mut MhcMemo,
        gate: &Result<trigger::Gate, (&'static str, String)>,
        expected: u32,
        healthy: u32,
        listed: u32,
        full: bool,
        cx: &mut Cx<'_>,
    ) {
        let mhc = self.mhc;
        let target = capi_target(self.mhc_key.clone(), mhc.version);
        let to_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        let remediations_allowed = gate.as_ref().map_or(0, |g| g.remediations_allowed);

        // Status counters, and the target list when it may have changed.
        let mut status = Map::new();
        if mhc.status.expected_machines != Some(to_i32(expected)) {
            status.insert("expectedMachines".into(), json!(expected));
        }
        if mhc.status.current_healthy != Some(to_i32(healthy)) {
            status.insert("currentHealthy".into(), json!(healthy));
        }
        if mhc.status.remediations_allowed != Some(remediations_allowed) {
            status.insert("remediationsAllowed".into(), json!(remediations_allowed));
        }
        if full
            || !memo.tally.status_targets_match
            || mhc.status.targets.len() != memo.targets.len()
        {
            memo.tally.status_targets_match = mhc
                .status
                .targets
                .iter()
                .map(String::as_str)
                .eq(memo.targets.keys().map(String::as_str));
            if !memo.tally.status_targets_match {
                status.insert(
                    "targets".into(),
                    json!(memo.targets.keys().collect::<Vec<_>>()),
                );
            }
        }
        if !status.is_empty() {
            let summary = format!(
                "expectedMachines={expected} currentHealthy={healthy} remediationsAllowed={remediations_allowed}"
            );
            cx.issue(
                ControllerId::Health,
                Action::PatchStatus {
                    target: target.clone(),
                    merge: JsonText::from_value(&json!({ "status": status })),
                    summary: summary.clone(),
                },
                format!("MachineHealthCheck {}: {summary}", self.mhc_name()),
            );
        }

        // Conditions.
        let mut edits = Vec::new();
        let mut event: Option<(&'static str, String)> = None;
        match gate {
            Ok(g) if g.allowed => {
                edits.push(Edit::set(
                    List::Current,
                    REMEDIATION_ALLOWED,
                    ConditionStatus::True,
                    "RemediationAllowed",
                    "",
                ));
                edits.push(Edit::set(
                    List::Legacy,
                    REMEDIATION_ALLOWED,
                    ConditionStatus::True,
                    "",
                    "",
                ));
                memo.restriction_reported = false;
                memo.problem_reported = None;
            }
            Ok(g) => {
                let message = restricted_message(&g.limit, expected, listed);
                edits.push(Edit::set(
                    List::Current,
                    REMEDIATION_ALLOWED,
                    ConditionStatus::False,
                    "TooManyUnhealthy",
                    &message,
                ));
                edits.push(Edit::set_with(
                    List::Legacy,
                    legacy(
                        REMEDIATION_ALLOWED,
                        ConditionStatus::False,
                        "TooManyUnhealthy",
                        &message,
                        Severity::Warning,
                    ),
                ));
                memo.problem_reported = None;
                if listed > 0 && !memo.restriction_reported {
                    tracing::warn!(mhc = %self.mhc_key, "{message}");
                    memo.restriction_reported = true;
                    event = Some(("RemediationRestricted", message));
                }
            }
            Err((reason, message)) => {
                edits.push(Edit::set(
                    List::Current,
                    REMEDIATION_ALLOWED,
                    ConditionStatus::False,
                    reason,
                    message,
                ));
                edits.push(Edit::set_with(
                    List::Legacy,
                    legacy(
                        REMEDIATION_ALLOWED,
                        ConditionStatus::False,
                        reason,
                        message,
                        Severity::Warning,
                    ),
                ));
                memo.restriction_reported = false;
                if memo.problem_reported.as_deref() != Some(message.as_str()) {
                    tracing::error!(mhc = %self.mhc_key, "{message}");
                    memo.problem_reported = Some(message.clone());
                    event = Some((reason, message.clone()));
                }
            }
        }
        if let Some((tref, t)) = self.template {
            match t {
                None => edits.push(Edit::set_with(
                    List::Legacy,
                    legacy(
                        TEMPLATE_AVAILABLE,
                        ConditionStatus::False,
                        "ExternalRemediationTemplateNotFound",
                        &format!(
                            "Error retrieving remediation template {} {}/{}",
                            tref.kind, mhc.meta.namespace, tref.name
                        ),
                        Severity::Error,
                    ),
                )),
                Some(_) if mhc.conditions.legacy(TEMPLATE_AVAILABLE).is_some() => {
                    edits.push(Edit::set(
                        List::Legacy,
                        TEMPLATE_AVAILABLE,
                        ConditionStatus::True,
                        "",
                        "",
                    ))
                }
                Some(_) => {}
            }
        }
        match (&memo.request_error, memo.request_retry_at.is_empty()) {
            (Some(err), false) => edits.push(Edit::set_with(
                List::Legacy,
                legacy(
                    REQUEST_AVAILABLE,
                    ConditionStatus::False,
                    "ExternalRemediationRequestCreationFailed",
                    err,
                    Severity::Error,
                ),
            )),
            _ if mhc.conditions.legacy(REQUEST_AVAILABLE).is_some() => edits.push(Edit::set(
                List::Legacy,
                REQUEST_AVAILABLE,
                ConditionStatus::True,
                "",
                "",
            )),
            _ => {}
        }
        edits.push(readable_edit(memo));
        if let Some((conditions, summary)) = apply(&mhc.conditions, &edits, self.now) {
            cx.issue(
                ControllerId::Health,
                Action::SetCondition {
                    target: target.clone(),
                    conditions,
                    summary: summary.clone(),
                },
                format!("MachineHealthCheck {}: {summary}", self.mhc_name()),
            );
        }
        if let Some((reason, message)) = event {
            cx.issue(
                ControllerId::Health,
                Action::RecordEvent {
                    regarding: target,
                    type_: EventType::Warning,
                    reason: reason.to_string(),
                    message: message.clone(),
                },
                message,
            );
        }
    }
}
