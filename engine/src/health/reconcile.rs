//! One MachineHealthCheck's reconcile: make sure it can judge, judge the targets (all, or only
//! the dirty and due ones), decide the gate on the complete counts, write what differs from
//! what is observed, and wake at the earliest target deadline.

use super::judge::{Evaluated, Judge, JudgeInputs, Sweep};
use super::memo::{Facts, MhcMemo};
use super::spec::SpecProblems;
use super::trigger;
use super::verdict::{Checks, ClusterGates, Gate, NODE_STARTUP_TIMEOUT_DEFAULT};
use super::view::{Cached, VIEW_CHECKS_MAX, ViewContext};
use super::{HealthChecks, TargetIndex};
use crate::command::{Action, ControllerId, EventType, JsonText};
use crate::controller::Cx;
use crate::model::{
    CLUSTER_NAME_LABEL, Cluster, ClusterName, External, Kind, MachineHealthCheck, ObjectKey,
    ObjectRef, Scope,
};
use crate::remediation::external::template_key;
use crate::shared::capi_target;
use crate::store::{Store, unreadable_message};
use crate::time::{Duration, Timestamp};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// How often an MHC waiting for a workload cluster's cache looks again.
pub const WORKLOAD_SYNC_RECHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Above this many dirty targets (or an eighth of the targets) a reconcile judges them all in
/// one ordered pass instead of looking each up.
const DIRTY_TARGETS_FULL_PASS_MIN: usize = 64;

/// An MHC that can be judged now, and what it is judged with.
struct Ready<'s> {
    mhc: &'s MachineHealthCheck,
    gates: ClusterGates,
    /// The workload cluster whose Nodes are read (none before the control plane is up).
    workload: Option<ClusterName>,
    template: Option<(&'s ObjectRef, Option<&'s External>)>,
}

/// The remediation gate, decided on the complete counts.
pub(super) struct Decision {
    pub(super) gate: Result<trigger::Gate, SpecProblems>,
    pub(super) expected: u32,
    pub(super) healthy: u32,
    /// Targets whose verdict is unhealthy.
    pub(super) listed: u32,
    /// Every target was judged (the status target list is compared then).
    pub(super) full: bool,
}

impl Decision {
    fn of(mhc: &MachineHealthCheck, memo: &MhcMemo, full: bool) -> Decision {
        let expected = u32::try_from(memo.targets.len()).unwrap_or(u32::MAX);
        let healthy = memo.tally.healthy;
        let listed = u32::try_from(memo.tally.unhealthy.len()).unwrap_or(u32::MAX);
        let gate = match SpecProblems::of(mhc) {
            Some(problems) => Err(problems),
            None => trigger::decide(
                mhc.max_unhealthy.as_ref(),
                mhc.unhealthy_range.as_deref(),
                expected,
                // `Tally::check` reports a healthy count above the targets.
                expected.saturating_sub(healthy),
            )
            .map_err(SpecProblems::from),
        };
        Decision {
            gate,
            expected,
            healthy,
            listed,
            full,
        }
    }

    pub(super) fn allowed(&self) -> bool {
        self.gate.as_ref().is_ok_and(|g| g.allowed)
    }
}

/// What target and MHC writes need, for one reconcile.
pub(super) struct SyncCx<'a> {
    pub(super) store: &'a Store,
    pub(super) mhc: &'a MachineHealthCheck,
    pub(super) mhc_key: &'a ObjectKey,
    pub(super) allowed: bool,
    pub(super) template: Option<(&'a ObjectRef, Option<&'a External>)>,
    pub(super) now: Timestamp,
}

impl SyncCx<'_> {
    pub(super) fn mhc_name(&self) -> String {
        format!("{}/{}", self.mhc.meta.namespace, self.mhc.meta.name)
    }
}

impl HealthChecks {
    pub(super) fn forget_mhc(&mut self, key: &ObjectKey) {
        self.set_waiting(key, None);
        if let Some(memo) = self.mhcs.remove(key) {
            memo.unlink_all(&mut self.index, key);
        }
        self.timers.cancel(key);
    }

    /// Stops judging until the next reconcile that can (all verdicts become stale). While
    /// waiting for a workload cache, look again every [`WORKLOAD_SYNC_RECHECK_INTERVAL`]: a
    /// relist of an empty cluster changes no object, so no change would wake the MHC.
    fn suspend(&mut self, key: &ObjectKey, waiting_for: Option<ClusterName>, now: Timestamp) {
        let memo = self.mhcs.entry(key.clone()).or_default();
        memo.invalidate();
        self.timers.cancel(key);
        if waiting_for.is_some() {
            self.timers.set(
                key,
                super::HealthTimer::WorkloadSyncRecheck,
                now.saturating_add(WORKLOAD_SYNC_RECHECK_INTERVAL),
                None,
            );
        }
        self.set_waiting(key, waiting_for);
    }

    /// The MHC and what it is judged with; `None` (the MHC forgotten or suspended) when it
    /// cannot be judged now: gone, its Cluster missing, paused, unreadable, or its workload
    /// cache not synced.
    fn ready<'s>(
        &mut self,
        key: &ObjectKey,
        store: &'s Store,
        cx: &mut Cx<'_>,
    ) -> Option<Ready<'s>> {
        let now = cx.now;
        let Some(mhc) = store.machine_health_check(key) else {
            self.forget_mhc(key);
            return None;
        };
        let cluster_key =
            ObjectKey::management(Kind::Cluster, &mhc.meta.namespace, &mhc.cluster_name);
        let Some(cluster) = store.cluster(&cluster_key) else {
            tracing::info!(mhc = %key, "Cluster {} not found; nothing to check", cluster_key);
            decides_none(key, cx);
            self.suspend(key, None, now);
            return None;
        };
        if cluster.paused || crate::ownership::paused_for_us(&mhc.meta) {
            tracing::debug!(mhc = %key, "Reconciliation is paused for this object");
            decides_none(key, cx);
            self.suspend(key, None, now);
            return None;
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
            decides_none(key, cx);
            self.suspend(key, None, now);
            return None;
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
            let why = store.unreachable(&Scope::Workload(c.clone()));
            report_reachability(key, mhc, c, why, cx);
            tracing::info!(mhc = %key, "Waiting for the cache of workload cluster {}/{} to sync", c.namespace, c.name);
            self.suspend(key, Some(c.clone()), now);
            return None;
        }
        let template = mhc.remediation_template.as_ref().map(|r| {
            let t = store.external(&template_key(mhc, r));
            (r, t)
        });
        Some(Ready {
            mhc,
            gates,
            workload,
            template,
        })
    }

    pub(super) fn reconcile_mhc(&mut self, key: &ObjectKey, cx: &mut Cx<'_>) {
        let store: &Store = cx.store;
        let now = cx.now;
        let Some(ready) = self.ready(key, store, cx) else {
            return;
        };
        let mhc = ready.mhc;
        self.mhcs.entry(key.clone()).or_default();
        self.set_waiting(key, None);
        let HealthChecks {
            mhcs,
            index,
            timers,
            ..
        } = self;
        let memo = mhcs.entry(key.clone()).or_default();
        let workload_scope = ready.workload.clone().map(Scope::Workload);
        let mut judge = Judge::new(JudgeInputs {
            store,
            mhc,
            mhc_key: key,
            gates: ready.gates,
            checks: checks_of(mhc),
            has_template: ready.template.is_some(),
            workload: workload_scope.as_ref(),
            now,
        });

        // 1. Judge: everything, or only what changed or fell due.
        let (evaluated, full) = judge_targets(memo, index, &mut judge, &ready);
        memo.unreadable_reported
            .retain(|k, _| store.unreadable(k).is_some());
        for (unknown, problem) in std::mem::take(&mut judge.unknown) {
            report_unreadable(memo, key, mhc, &unknown, &problem, cx);
        }
        memo.tally.check(&memo.targets);

        // 2. Decide on the complete counts.
        let decision = Decision::of(mhc, memo, full);
        let newly_allowed = decision.allowed() && !memo.allowed;
        memo.allowed = decision.allowed();

        // 3. Write the targets; 4. the MHC itself: status, conditions, events.
        let sync = SyncCx {
            store,
            mhc,
            mhc_key: key,
            allowed: decision.allowed(),
            template: ready.template,
            now,
        };
        write_targets(&sync, &mut judge, &evaluated, newly_allowed, memo, cx);
        sync.sync_mhc(memo, &decision, cx);

        // 5. Wake at the earliest target deadline, short-circuited or not (decision 11).
        timers.cancel(key);
        if let Some((at, name)) = memo.tally.deadlines.first() {
            debug_assert!(
                *at > now,
                "every deadline is in the future after a reconcile"
            );
            // The tally keeps a target's deadline, not its cause: a retry is told by its time,
            // a target without a Node is waiting for it to start.
            let kind = if memo.request_retry_at.get(name) == Some(at) {
                super::HealthTimer::RemediationRequestRetry
            } else if memo.targets.get(name).is_some_and(|t| t.node_ref.is_none()) {
                super::HealthTimer::NodeStartupTimeout
            } else {
                super::HealthTimer::UnhealthyConditionTimeout
            };
            let machine = ObjectKey::management(Kind::Machine, &key.namespace, name);
            timers.set(key, kind, *at, Some(&machine));
        }
    }
}

fn checks_of(mhc: &MachineHealthCheck) -> Checks<'_> {
    Checks {
        unhealthy_node_conditions: &mhc.unhealthy_node_conditions,
        unhealthy_machine_conditions: &mhc.unhealthy_machine_conditions,
        // A negative value is invalid (see `spec_problems`): no target is judged by it.
        node_startup_timeout: mhc
            .node_startup_timeout
            .unwrap_or(NODE_STARTUP_TIMEOUT_DEFAULT),
    }
}

/// Chooses what to judge and judges it: every target when what verdicts depend on changed
/// (from the views when they hold, else from the store) or when many are dirty, else the
/// dirty and due ones. Returns the evaluations to write and whether every target was judged.
fn judge_targets<'a>(
    memo: &mut MhcMemo,
    index: &mut TargetIndex,
    judge: &mut Judge<'a>,
    ready: &Ready<'a>,
) -> (Vec<Evaluated<'a>>, bool) {
    let mhc = ready.mhc;
    let facts = Facts::of(mhc, ready.gates, ready.template.and_then(|(_, t)| t));
    let views_hold = ready.template.is_none()
        && mhc.unhealthy_machine_conditions.len() + mhc.unhealthy_node_conditions.len()
            <= VIEW_CHECKS_MAX
        && (memo.views_read_with.0.as_ref())
            .is_some_and(|c| c.holds_for(mhc, ready.workload.as_ref()));
    // Many dirty targets at once (a relist) are cheaper to judge in one ordered pass than by
    // one store lookup each.
    let many_dirty = memo.dirty.len() > DIRTY_TARGETS_FULL_PASS_MIN.max(memo.targets.len() / 8);
    let full = memo.facts.as_ref() != Some(&facts) || many_dirty;
    let sweep = match (full, views_hold && !many_dirty) {
        (false, _) => Sweep::Changed,
        (true, true) => Sweep::Views,
        (true, false) => Sweep::Store,
    };
    if full {
        memo.facts = Some(facts);
    }
    #[cfg(test)]
    if sweep == Sweep::Views {
        *memo.passes_from_views.0.get_or_insert(0) += 1;
    }
    let dirty = std::mem::take(&mut memo.dirty);
    let evaluated = judge.pass(memo, index, sweep, &dirty);
    if sweep == Sweep::Store && !views_hold {
        memo.views_read_with = Cached(Some(ViewContext::of(mhc, ready.workload.as_ref())));
    }
    (evaluated, full)
}

/// Writes the judged targets, and every unhealthy one when remediation has just become
/// allowed.
fn write_targets<'a>(
    sync: &SyncCx<'_>,
    judge: &mut Judge<'a>,
    evaluated: &[Evaluated<'a>],
    newly_allowed: bool,
    memo: &mut MhcMemo,
    cx: &mut Cx<'_>,
) {
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
    for e in evaluated.iter().chain(&extra) {
        sync.sync_target(e, memo, cx);
    }
}

/// While the MHC cannot be judged (no Cluster, paused, unreadable) none of its conditions is
/// decided.
fn decides_none(key: &ObjectKey, cx: &mut Cx<'_>) {
    cx.report(crate::decision::Decision::none(
        ControllerId::Health,
        key.clone(),
    ));
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

/// While the MHC waits for its workload cluster: `WorkloadClusterReachable=False` saying why it
/// cannot be reached, with a Warning event when that condition write goes out (once per
/// reason: the written condition is the memory); removed once the cluster connects.
fn report_reachability(
    mhc_key: &ObjectKey,
    mhc: &MachineHealthCheck,
    cluster: &ClusterName,
    why: Option<&crate::connection::Unreachable>,
    cx: &mut Cx<'_>,
) {
    use crate::connection::{EVENT_REASON, REACHABLE_CONDITION};
    use crate::shared::conditions::{Edit, List, apply, decided};
    let message = why.map(|why| {
        format!(
            "{}; the health checks of its Nodes wait until it can be reached",
            why.message(cluster)
        )
    });
    let edit = match &message {
        Some(message) => Edit::set(
            List::Current,
            REACHABLE_CONDITION,
            crate::model::ConditionStatus::False,
            EVENT_REASON,
            message,
        ),
        None => Edit::Remove(List::Current, REACHABLE_CONDITION),
    };
    let edits = [edit];
    let written = apply(&mhc.conditions, &edits, cx.now);
    let (set, absent) = decided(written.as_ref().map_or(&mhc.conditions, |(c, _)| c), &edits);
    cx.report(crate::decision::Decision::whole(
        ControllerId::Health,
        mhc_key.clone(),
        set,
        absent,
    ));
    let Some((conditions, summary)) = written else {
        return;
    };
    let target = capi_target(mhc_key.clone(), mhc.version);
    let issued = cx.issue(
        ControllerId::Health,
        Action::SetCondition {
            target: target.clone(),
            conditions,
            summary: summary.clone(),
        },
        format!("MachineHealthCheck {}: {summary}", mhc_key.name),
    );
    if let (Some(message), crate::controller::Issued::Queued(_)) = (message, issued) {
        tracing::warn!(mhc = %mhc_key, "{message}");
        cx.issue(
            ControllerId::Health,
            Action::RecordEvent {
                regarding: target,
                type_: EventType::Warning,
                reason: EVENT_REASON.to_string(),
                message: message.clone(),
            },
            message,
        );
    }
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
            merge: JsonText::from_value(&crate::convert::object([(
                "metadata",
                Value::Object(meta),
            )])),
            summary: summary.join(", "),
        },
        format!(
            "MachineHealthCheck {} belongs to Cluster {}/{}",
            key.name, cluster.meta.namespace, cluster.meta.name
        ),
    );
}
