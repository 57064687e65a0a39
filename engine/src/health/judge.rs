//! Judging an MHC's targets: one pass over the targets a reconcile must look at, each judged
//! from its view when the pass may trust one, else from its Machine and Node in the store.

use super::TargetIndex;
use super::memo::{Ledger, MhcMemo, TargetMemo};
use super::remediate::healthy_written;
use super::targets::{Selection, select, selector_problem};
use super::verdict::{Checks, ClusterGates, NodeObservation, TargetClass, Verdict, evaluate};
use super::view::{Cached, TargetView, judge_view};
use crate::model::{Kind, Machine, MachineHealthCheck, Node, Object, ObjectKey, Scope};
use crate::store::Store;
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// Which targets a pass judges, and what it reads them from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sweep {
    /// Every Machine labelled for the MHC's cluster, from the store (a merge of those Machines
    /// with the known targets, both in name order: it costs the cluster's Machines, whatever
    /// the size of the namespace); known targets not among them are dropped.
    Store,
    /// Every known target, from its view unless it is dirty or its view cannot settle it
    /// (then from the store), and the dirty Machines from the store (one may have become a
    /// target). Machines that are not targets and did not change are not looked at.
    Views,
    /// Only the dirty targets and those whose deadline has come, from the store.
    Changed,
}

/// One target judged at `now`.
pub(super) struct Evaluated<'a> {
    pub(super) machine: &'a Machine,
    pub(super) verdict: Verdict,
    pub(super) class: TargetClass,
    /// What the verdict read (`None` when the MHC has more checks than a view holds).
    pub(super) view: Option<TargetView>,
}

impl Evaluated<'_> {
    pub(super) fn is_unhealthy_class(&self) -> bool {
        self.class == TargetClass::Unhealthy
    }
}

/// What a pass found besides the verdicts it recorded in place.
#[derive(Default)]
struct Found<'a> {
    /// Evaluations that may need a write.
    out: Vec<Evaluated<'a>>,
    /// Evaluations of Machines that were not targets.
    new: Vec<Evaluated<'a>>,
    /// Targets that are no longer.
    gone: Vec<String>,
}

/// The parts of an MHC's memory one pass writes to while it walks the targets.
struct Pass<'p, 'a> {
    sweep: Sweep,
    dirty: &'p BTreeSet<String>,
    ledger: Ledger<'p>,
    request_retry_at: &'p mut BTreeMap<String, Timestamp>,
    found: Found<'a>,
}

/// The Nodes of one workload cluster in name order, for a pass over the store: found by a
/// cursor when Node names sort like Machine names (the usual case), else by binary search.
/// Either way no store lookup per target.
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
pub(super) struct Judge<'a> {
    store: &'a Store,
    mhc: &'a MachineHealthCheck,
    mhc_key: &'a ObjectKey,
    gates: ClusterGates,
    checks: Checks<'a>,
    has_template: bool,
    workload: Option<&'a Scope>,
    node_key: Option<ObjectKey>,
    directory: Option<NodeDirectory<'a>>,
    now: Timestamp,
    /// Objects a verdict depended on that cannot be read, with the problem.
    pub(super) unknown: Vec<(ObjectKey, String)>,
}

/// What a [`Judge`] judges with.
pub(super) struct JudgeInputs<'a> {
    pub(super) store: &'a Store,
    pub(super) mhc: &'a MachineHealthCheck,
    pub(super) mhc_key: &'a ObjectKey,
    pub(super) gates: ClusterGates,
    pub(super) checks: Checks<'a>,
    pub(super) has_template: bool,
    /// The workload cluster whose Nodes are read (none before the control plane is up).
    pub(super) workload: Option<&'a Scope>,
    pub(super) now: Timestamp,
}

impl<'a> Judge<'a> {
    pub(super) fn new(i: JudgeInputs<'a>) -> Judge<'a> {
        Judge {
            store: i.store,
            mhc: i.mhc,
            mhc_key: i.mhc_key,
            gates: i.gates,
            checks: i.checks,
            has_template: i.has_template,
            workload: i.workload,
            node_key: i
                .workload
                .map(|scope| ObjectKey::new(scope.clone(), Kind::Node, "", "")),
            directory: None,
            now: i.now,
            unknown: Vec::new(),
        }
    }

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
        if let Some(n) = store.node(key) {
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

    /// Judges one Machine from the store.
    pub(super) fn judge(&mut self, m: &'a Machine) -> Evaluated<'a> {
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

    /// The Machine of this name in the MHC's namespace.
    fn machine(&self, name: &str) -> Option<&'a Machine> {
        let key = ObjectKey::management(Kind::Machine, &self.mhc.meta.namespace, name);
        let store: &'a Store = self.store;
        store.machine(&key)
    }

    /// The Machine of this name when it is a target.
    pub(super) fn target(&self, name: &str) -> Option<&'a Machine> {
        self.machine(name).filter(|m| {
            selector_problem(self.mhc).is_none() && select(self.mhc, m) == Selection::Target
        })
    }

    /// Judges what `sweep` covers and records each verdict (new targets added, lost ones
    /// dropped). `dirty`: the Machines marked changed since the last reconcile. Returns the
    /// evaluations that may need a write (unhealthy, healthy but not yet marked so, or with a
    /// remediation request to withdraw), in name order.
    pub(super) fn pass(
        &mut self,
        memo: &mut MhcMemo,
        index: &mut TargetIndex,
        sweep: Sweep,
        dirty: &BTreeSet<String>,
    ) -> Vec<Evaluated<'a>> {
        let store: &'a Store = self.store;
        let mhc: &'a MachineHealthCheck = self.mhc;
        let MhcMemo {
            targets,
            tally,
            request_retry_at,
            ..
        } = &mut *memo;
        let due: BTreeSet<String> = match sweep {
            Sweep::Changed => (tally.deadlines.iter())
                .take_while(|(t, _)| *t <= self.now)
                .map(|(_, name)| name.clone())
                .collect(),
            Sweep::Store | Sweep::Views => BTreeSet::new(),
        };
        if sweep == Sweep::Store
            && let Some(scope) = self.workload
        {
            self.directory = Some(NodeDirectory::of(store, scope));
        }
        let mut pass = Pass {
            sweep,
            dirty,
            ledger: Ledger {
                tally,
                index: &mut *index,
                mhc_key: self.mhc_key,
                cluster_name: &mhc.cluster_name,
                now: self.now,
            },
            request_retry_at,
            found: Found::default(),
        };
        let mut step = |name: &str, walked, entry: Option<&mut TargetMemo>| {
            self.step(&mut pass, name, walked, entry)
        };
        match sweep {
            Sweep::Store => {
                // Only Machines labelled for the MHC's cluster can be selected.
                let valid = selector_problem(mhc).is_none();
                let machines = store
                    .machines_labelled_for_cluster(&mhc.meta.namespace, &mhc.cluster_name)
                    .filter(|_| valid)
                    .filter_map(|k| match store.get(k) {
                        Some(Object::Machine(m)) => Some((m.meta.name.as_str(), Some(m))),
                        _ => None,
                    });
                merge_with_targets(machines, targets, step);
            }
            Sweep::Views => {
                merge_with_targets(dirty.iter().map(|n| (n.as_str(), None)), targets, step);
            }
            Sweep::Changed => {
                for name in dirty.union(&due) {
                    step(name, None, targets.get_mut(name));
                }
            }
        }
        let found = pass.found;
        self.finish(memo, index, found)
    }

    /// One name of a pass: settled by the target's view, or judged from the store (`walked`:
    /// the Machine as a store sweep read it).
    fn step(
        &mut self,
        pass: &mut Pass<'_, 'a>,
        name: &str,
        walked: Option<&'a Machine>,
        mut entry: Option<&mut TargetMemo>,
    ) {
        let clean = !pass.dirty.contains(name);
        if pass.sweep == Sweep::Views
            && clean
            && let Some(t) = entry.as_deref_mut()
            && self.settled_by_view(name, t, pass.request_retry_at)
        {
            return;
        }
        let machine = match pass.sweep {
            Sweep::Store => walked,
            Sweep::Views | Sweep::Changed => self.machine(name),
        };
        match machine {
            Some(m) => self.visit(m, entry, clean, pass),
            None if entry.is_some() => pass.found.gone.push(name.to_string()),
            None => {}
        }
    }

    /// Whether a clean target's view settles it: judged from the view, it keeps the class and
    /// deadline it has and needs no write. A pending request retry of a target the view finds
    /// not unhealthy is dropped, as [`Judge::visit`] does.
    fn settled_by_view(
        &mut self,
        name: &str,
        t: &TargetMemo,
        request_retry_at: &mut BTreeMap<String, Timestamp>,
    ) -> bool {
        let judged = t
            .view
            .0
            .as_ref()
            .and_then(|v| judge_view(v, &self.gates, &self.checks, self.now));
        let Some((class, next_check)) = judged else {
            return false;
        };
        #[cfg(debug_assertions)]
        self.check_view(name, class, next_check);
        if !request_retry_at.is_empty() {
            request_retry_at.remove(name);
        }
        match class {
            TargetClass::Healthy => t.class == TargetClass::Healthy && t.written,
            TargetClass::Pending | TargetClass::Unevaluated => {
                t.class == class && t.deadline == next_check && !t.marked
            }
            TargetClass::Unhealthy => false,
        }
    }

    /// A clean target's view judges as its Machine and Node in the store do (what
    /// [`judge_view`] guarantees while neither changed and the MHC's view context holds).
    #[cfg(debug_assertions)]
    fn check_view(&mut self, name: &str, class: TargetClass, next_check: Option<Timestamp>) {
        let Some(m) = self.machine(name) else {
            return;
        };
        let unknown = self.unknown.len();
        let from_store = self.judge(m);
        self.unknown.truncate(unknown);
        debug_assert_eq!(
            (class, next_check),
            (from_store.class, from_store.verdict.next_check),
            "the view of target {name} judges unlike its Machine and Node"
        );
    }

    /// One Machine: select, judge, and record the verdict of a known target (or collect a new
    /// or lost one).
    fn visit(
        &mut self,
        m: &'a Machine,
        entry: Option<&mut TargetMemo>,
        clean: bool,
        pass: &mut Pass<'_, 'a>,
    ) {
        let name = m.meta.name.as_str();
        match select(self.mhc, m) {
            Selection::Target => {}
            Selection::Skipped(why) => {
                if entry.is_some() {
                    let key = ObjectKey::management(Kind::Machine, &m.meta.namespace, name);
                    tracing::info!(machine = %key, "Skipping remediation: {why}");
                    pass.found.gone.push(name.to_string());
                }
                return;
            }
            Selection::NotSelected => {
                if entry.is_some() {
                    pass.found.gone.push(name.to_string());
                }
                return;
            }
        }
        let e = self.judge(m);
        if !e.is_unhealthy_class() && !pass.request_retry_at.is_empty() {
            pass.request_retry_at.remove(name);
        }
        let Some(t) = entry else {
            pass.found.new.push(e);
            return;
        };
        // A healthy target still healthy, whose Machine did not change since its condition
        // was seen written, has nothing to update or write.
        if clean
            && t.written
            && t.class == TargetClass::Healthy
            && e.class == TargetClass::Healthy
            && !self.has_template
        {
            t.view = Cached(e.view);
            return;
        }
        let retry_at = pass.request_retry_at.get(name).copied();
        pass.ledger.update(t, retry_at, &e);
        let needs_write = match e.class {
            TargetClass::Unhealthy => true,
            TargetClass::Healthy => {
                t.written = healthy_written(&m.conditions);
                self.has_template || !t.written
            }
            TargetClass::Pending | TargetClass::Unevaluated => false,
        };
        if needs_write {
            pass.found.out.push(e);
        }
    }

    /// Drops the lost targets and records the new ones; returns the evaluations to write, in
    /// name order.
    fn finish(
        &self,
        memo: &mut MhcMemo,
        index: &mut TargetIndex,
        found: Found<'a>,
    ) -> Vec<Evaluated<'a>> {
        let Found { mut out, new, gone } = found;
        for name in gone {
            memo.drop_target(index, self.mhc_key, &name);
        }
        if !new.is_empty() {
            let cluster_name = self.mhc.cluster_name.as_str();
            for e in &new {
                memo.insert_target(index, self.mhc_key, cluster_name, e, self.now);
            }
            out.extend(new);
            out.sort_by(|a, b| a.machine.meta.name.cmp(&b.machine.meta.name));
        }
        out
    }
}

/// Calls `step` once per name of `source` (in name order, with the Machine when the walk
/// read it) and of `targets`, in one merge: a name in both comes with its target.
fn merge_with_targets<'s, 'a>(
    source: impl Iterator<Item = (&'s str, Option<&'a Machine>)>,
    targets: &mut BTreeMap<String, TargetMemo>,
    mut step: impl FnMut(&str, Option<&'a Machine>, Option<&mut TargetMemo>),
) {
    let mut known = targets.iter_mut().peekable();
    for (name, machine) in source {
        while let Some((t, memo)) = known.next_if(|(t, _)| t.as_str() < name) {
            step(t, None, Some(memo));
        }
        let entry = known.next_if(|(t, _)| t.as_str() == name).map(|(_, t)| t);
        step(name, machine, entry);
    }
    for (t, memo) in known {
        step(t, None, Some(memo));
    }
}
