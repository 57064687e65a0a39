//! MachineSet owner remediation (`engine/docs/capi.md` §2.7, decision 8): a MachineSet deletes
//! its Machines that an MHC marked `OwnerRemediated=False`, at most `maxInFlight` at a time.
//!
//! Expected flow per MachineSet reconcile: clean up stale `OwnerRemediated` conditions of
//! healthy Machines; collect candidates (v1beta2 `HealthCheckSucceeded` and `OwnerRemediated`
//! both False, not deleting); hold them all when the MachineSet is from an outdated
//! MachineDeployment revision; otherwise mark the first `maxInFlight` (remediate-machine
//! annotation first, then newest) `MachineDeleting` and defer the rest.
//! Guarantees: a Machine is deleted only once its `OwnerRemediated=False (MachineDeleting)` has
//! been observed, so every deletion in progress is counted against `maxInFlight` even if the
//! status write failed. Not done: upstream's MachineSet preflight checks (§2.7 step 6) and the
//! rollout "move" of step 8.

use crate::command::{Action, ControllerId};
use crate::controller::Cx;
use crate::model::{
    Condition, ConditionStatus, Kind, Machine, MachineDeployment, MachineSet, Object, ObjectKey,
    PAUSED_ANNOTATION, REMEDIATE_MACHINE_ANNOTATION, Scope, Severity,
};
use crate::shared::conditions::{Edit, List, apply};
use crate::shared::scaled::scaled_round_up;
use crate::shared::{HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED, capi_target};
use crate::store::{Change, Store};
use crate::time::Timestamp;
use std::cmp::Reverse;

pub const REVISION_ANNOTATION: &str = "machinedeployment.clusters.x-k8s.io/revision";
pub const MACHINE_DELETING_REASON: &str = "MachineDeleting";
pub const REMEDIATION_DEFERRED_REASON: &str = "RemediationDeferred";
pub const CANNOT_BE_REMEDIATED_REASON: &str = "CannotBeRemediated";

fn controlled_by<'a>(meta: &'a crate::model::ObjectMeta, kind: &str) -> Option<&'a str> {
    meta.controller()
        .filter(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.as_str())
}

/// The MachineSet that controls `machine`, if any.
pub fn owner_key(machine: &Machine) -> Option<ObjectKey> {
    controlled_by(&machine.meta, "MachineSet")
        .map(|ms| ObjectKey::management(Kind::MachineSet, &machine.meta.namespace, ms))
}

/// What owner remediation reads of a Machine; a change elsewhere does not concern it.
fn facts(m: &Machine) -> impl PartialEq + '_ {
    (
        m.conditions.current(HEALTH_CHECK_SUCCEEDED),
        m.conditions.current(OWNER_REMEDIATED),
        m.conditions.legacy(HEALTH_CHECK_SUCCEEDED),
        m.conditions.legacy(OWNER_REMEDIATED),
        m.meta.deletion_timestamp,
        m.meta.has_annotation(REMEDIATE_MACHINE_ANNOTATION),
        m.meta.creation_timestamp,
        m.meta.controller(),
    )
}

/// MachineSet keys a change concerns: the owners of a changed Machine (before and after) when
/// a remediation fact changed, a MachineSet itself, the MachineSets of a changed
/// MachineDeployment, and every MachineSet of a Cluster whose pause changed.
pub fn affected(store: &Store, change: &Change, out: &mut Vec<ObjectKey>) {
    let key = change.key;
    if key.scope != Scope::Management {
        return;
    }
    match (&key.kind, change.before, change.after) {
        (Kind::Machine, before, after) => {
            let b = before.and_then(Object::as_machine);
            let a = after.and_then(Object::as_machine);
            let relevant = match (b, a) {
                (Some(b), Some(a)) => facts(b) != facts(a),
                _ => true,
            };
            if relevant {
                for m in b.into_iter().chain(a) {
                    if let Some(k) = owner_key(m)
                        && !out.contains(&k)
                    {
                        out.push(k);
                    }
                }
            }
        }
        (Kind::MachineSet, _, _) => out.push(key.clone()),
        (Kind::MachineDeployment, _, _) => {
            for (k, o) in store.iter_kind(&Scope::Management, &Kind::MachineSet) {
                if let Object::MachineSet(ms) = o
                    && k.namespace == key.namespace
                    && controlled_by(&ms.meta, "MachineDeployment") == Some(key.name.as_str())
                {
                    out.push(k.clone());
                }
            }
        }
        (Kind::Cluster, before, after) => {
            let paused = |o: Option<&Object>| o.and_then(Object::as_cluster).map(|c| c.paused);
            if paused(before) == paused(after) {
                return;
            }
            for (k, o) in store.iter_kind(&Scope::Management, &Kind::MachineSet) {
                if let Object::MachineSet(ms) = o
                    && k.namespace == key.namespace
                    && ms.cluster_name == key.name
                {
                    out.push(k.clone());
                }
            }
        }
        _ => {}
    }
}

fn is(c: Option<&Condition>, status: ConditionStatus) -> bool {
    c.is_some_and(|c| c.status == status)
}

/// Remediation order: Machines already committed to (`MachineDeleting`) first so a decision is
/// never taken back, then those with the remediate-machine annotation, then newest first, then
/// by name.
pub fn sort_for_remediation(candidates: &mut [&Machine]) {
    candidates.sort_by_key(|m| {
        (
            !is_marked_deleting(m),
            !m.meta.has_annotation(REMEDIATE_MACHINE_ANNOTATION),
            Reverse(m.meta.creation_timestamp.unwrap_or(Timestamp(0))),
            m.meta.name.clone(),
        )
    });
}

fn is_marked_deleting(m: &Machine) -> bool {
    m.conditions
        .current(OWNER_REMEDIATED)
        .is_some_and(|c| c.status == ConditionStatus::False && c.reason == MACHINE_DELETING_REASON)
}

/// `maxInFlight` of the owning MachineDeployment, scaled against its replicas (round up), as
/// written and as a number. `Ok(None)` means unlimited.
fn max_in_flight(md: Option<&MachineDeployment>) -> Result<Option<(String, i64)>, String> {
    let Some(md) = md else { return Ok(None) };
    let Some(v) = &md.remediation_max_in_flight else {
        return Ok(None);
    };
    let replicas = u32::try_from(md.replicas.unwrap_or(1)).unwrap_or(0);
    scaled_round_up(v, replicas).map(|n| Some((v.to_string(), n)))
}

pub fn deferred_message(max_in_flight: &str) -> String {
    format!(
        "Waiting because there are already too many remediations in progress (spec.strategy.remediation.maxInFlight is {max_in_flight})"
    )
}

/// One MachineSet reconcile of §2.7.
pub fn reconcile(key: &ObjectKey, cx: &mut Cx<'_>) {
    let store = cx.store;
    let Some(ms) = store.machine_set(key) else {
        return;
    };
    let cluster_key = ObjectKey::management(Kind::Cluster, &ms.meta.namespace, &ms.cluster_name);
    let cluster_paused = store.cluster(&cluster_key).is_some_and(|c| c.paused);
    if cluster_paused || ms.meta.has_annotation(PAUSED_ANNOTATION) {
        tracing::debug!(machineset = %key, "Reconciliation is paused for this object");
        return;
    }
    // A MachineSet's Machines belong to its Cluster: the store's per-cluster index finds them
    // without walking every Machine of the management cluster.
    let machines: Vec<&Machine> = store
        .machines_of_cluster(&ms.meta.namespace, &ms.cluster_name)
        .filter_map(|k| match store.get(k) {
            Some(Object::Machine(m))
                if controlled_by(&m.meta, "MachineSet") == Some(&ms.meta.name) =>
            {
                Some(m)
            }
            _ => None,
        })
        .collect();
    // Decide only on settled observations: a condition write or deletion still in flight (ours
    // or the MHC's) would make this pass count a mark twice or miss one. Its answer brings
    // this MachineSet back (the watch event of the write may have come first; found over
    // HTTP: remediation stalled after the MHC's mark).
    let unsettled = machines.iter().find(|m| {
        let mkey = ObjectKey::management(Kind::Machine, &m.meta.namespace, &m.meta.name);
        cx.wait_if_in_flight(
            ControllerId::Remediation,
            crate::ActionKind::SetCondition,
            &mkey,
        ) || cx.wait_if_in_flight(
            ControllerId::Remediation,
            crate::ActionKind::DeleteMachine,
            &mkey,
        )
    });
    if let Some(m) = unsettled {
        tracing::debug!(machineset = %key, machine = %m.meta.name, "Waiting for a write in flight before deciding on remediation");
        return;
    }
    let plan = plan(ms, store, &machines);
    for (machine, edits, why) in &plan.edits {
        let Some((conditions, summary)) = apply(&machine.conditions, edits, cx.now) else {
            continue;
        };
        let mkey =
            ObjectKey::management(Kind::Machine, &machine.meta.namespace, &machine.meta.name);
        cx.issue(
            ControllerId::Remediation,
            Action::SetCondition {
                target: capi_target(mkey, machine.version),
                conditions,
                summary,
            },
            why.clone(),
        );
    }
    for (machine, why) in &plan.deletions {
        let mkey =
            ObjectKey::management(Kind::Machine, &machine.meta.namespace, &machine.meta.name);
        tracing::info!(machineset = %key, machine = %mkey, "Deleting unhealthy Machine: {why}");
        cx.issue(
            ControllerId::Remediation,
            Action::DeleteMachine {
                target: capi_target(mkey, machine.version),
            },
            why.clone(),
        );
    }
}

/// What one reconcile writes: condition edits per Machine, then the deletions.
#[derive(Debug, Default)]
pub struct Plan<'a> {
    pub edits: Vec<(&'a Machine, Vec<Edit>, String)>,
    pub deletions: Vec<(&'a Machine, String)>,
}

impl<'a> Plan<'a> {
    fn edit(&mut self, m: &'a Machine, edit: Edit, why: String) {
        match self.edits.iter_mut().find(|(x, _, _)| std::ptr::eq(*x, m)) {
            Some((_, edits, w)) => {
                edits.push(edit);
                *w = why;
            }
            None => self.edits.push((m, vec![edit], why)),
        }
    }
}

/// The decisions of §2.7 for `machines` (those `ms` controls), without issuing anything.
pub fn plan<'a>(ms: &MachineSet, store: &Store, machines: &[&'a Machine]) -> Plan<'a> {
    let mut plan = Plan::default();
    plan.clear_stale(machines);
    let mut candidates = candidates(machines);
    if candidates.is_empty() {
        return plan;
    }
    let md = owning_deployment(ms, store);
    if let Some(md) = md
        && revision(&ms.meta) != revision(&md.meta)
    {
        plan.go_with_rollout(ms, &candidates);
        return plan;
    }
    // Step 4: maxInFlight, less the remediations already deleting.
    let limit = match max_in_flight(md) {
        Ok(limit) => limit,
        Err(why) => {
            tracing::error!(
                machineset = %ms.meta.name,
                "Not remediating: the MachineDeployment's remediation maxInFlight is invalid: {why}"
            );
            return plan;
        }
    };
    let in_flight = machines
        .iter()
        .filter(|m| m.meta.is_deleting() && is_marked_deleting(m))
        .count() as i64;
    let budget = limit.as_ref().map(|(_, n)| n - in_flight);
    sort_for_remediation(&mut candidates);
    let take = match budget {
        None => candidates.len(),
        Some(b) => usize::try_from(b.max(0)).unwrap_or(0).min(candidates.len()),
    };
    let (now, later) = candidates.split_at(take);
    if let Some((written, _)) = &limit {
        plan.defer(later, in_flight, written);
    }
    plan.remediate(now);
    plan
}

/// Step 2, the Machines to remediate: not deleting, with v1beta2 `HealthCheckSucceeded`
/// and `OwnerRemediated` both False.
fn candidates<'a>(machines: &[&'a Machine]) -> Vec<&'a Machine> {
    machines
        .iter()
        .copied()
        .filter(|m| {
            !m.meta.is_deleting()
                && is(
                    m.conditions.current(HEALTH_CHECK_SUCCEEDED),
                    ConditionStatus::False,
                )
                && is(
                    m.conditions.current(OWNER_REMEDIATED),
                    ConditionStatus::False,
                )
        })
        .collect()
}

fn owning_deployment<'s>(ms: &MachineSet, store: &'s Store) -> Option<&'s MachineDeployment> {
    let name = controlled_by(&ms.meta, "MachineDeployment")?;
    store.machine_deployment(&ObjectKey::management(
        Kind::MachineDeployment,
        &ms.meta.namespace,
        name,
    ))
}

fn revision(meta: &crate::model::ObjectMeta) -> String {
    meta.annotations
        .get(REVISION_ANNOTATION)
        .cloned()
        .unwrap_or_default()
}

impl<'a> Plan<'a> {
    /// Step 1: a Machine healthy again keeps no stale OwnerRemediated (each API version on
    /// its own).
    fn clear_stale(&mut self, machines: &[&'a Machine]) {
        for m in machines.iter().copied().filter(|m| !m.meta.is_deleting()) {
            let c = &m.conditions;
            let why = || {
                format!(
                    "Machine {} is healthy again; clearing OwnerRemediated",
                    m.meta.name
                )
            };
            if is(c.current(HEALTH_CHECK_SUCCEEDED), ConditionStatus::True)
                && is(c.current(OWNER_REMEDIATED), ConditionStatus::False)
            {
                self.edit(m, Edit::Remove(List::Current, OWNER_REMEDIATED), why());
            }
            if is(c.legacy(HEALTH_CHECK_SUCCEEDED), ConditionStatus::True)
                && is(c.legacy(OWNER_REMEDIATED), ConditionStatus::False)
            {
                self.edit(m, Edit::Remove(List::Legacy, OWNER_REMEDIATED), why());
            }
        }
    }

    /// Step 3: a MachineSet of an outdated revision is being rolled away; its Machines go
    /// with it.
    fn go_with_rollout(&mut self, ms: &MachineSet, candidates: &[&'a Machine]) {
        for m in candidates.iter().copied() {
            let why = format!(
                "MachineSet {} is from an outdated revision; Machine {} goes with the rollout",
                ms.meta.name, m.meta.name
            );
            self.mark_current(
                m,
                CANNOT_BE_REMEDIATED_REASON,
                "Machine won't be remediated because it is pending removal due to rollout",
                why,
            );
        }
    }

    /// `OwnerRemediated=False` with `reason` and `message` on `m`'s current conditions.
    fn mark_current(&mut self, m: &'a Machine, reason: &str, message: &str, why: String) {
        self.edit(
            m,
            Edit::set(
                List::Current,
                OWNER_REMEDIATED,
                ConditionStatus::False,
                reason,
                message,
            ),
            why,
        );
    }

    /// Candidates beyond `maxInFlight` wait, and say why.
    fn defer(&mut self, later: &[&'a Machine], in_flight: i64, written: &str) {
        for m in later.iter().copied() {
            let why = format!(
                "{in_flight} remediation(s) in progress, maxInFlight is {written}; deferring Machine {}",
                m.meta.name
            );
            self.mark_current(
                m,
                REMEDIATION_DEFERRED_REASON,
                &deferred_message(written),
                why,
            );
        }
    }

    /// Step 7: mark, then delete once the mark is observed.
    fn remediate(&mut self, now: &[&'a Machine]) {
        for m in now.iter().copied() {
            let why = format!(
                "Machine {} failed its health check and its owner remediates it; deleting it",
                m.meta.name
            );
            self.mark_current(
                m,
                MACHINE_DELETING_REASON,
                "Machine is deleting",
                why.clone(),
            );
            self.edit(
                m,
                Edit::set_with(
                    List::Legacy,
                    Condition::new(OWNER_REMEDIATED, ConditionStatus::True, "", "")
                        .with_severity(Severity::None),
                ),
                why.clone(),
            );
            if is_marked_deleting(m) {
                self.deletions.push((m, why));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IntOrString;
    use crate::testing;

    fn unhealthy(name: &str, created: i64, reason: &str) -> Machine {
        let mut m = testing::machine("c1", name, Some(name));
        m.meta.creation_timestamp = Some(Timestamp(created));
        testing::controlled_by(&mut m.meta, "MachineSet", "ms");
        m.conditions.current.push(Condition::new(
            HEALTH_CHECK_SUCCEEDED,
            ConditionStatus::False,
            "UnhealthyNode",
            "",
        ));
        m.conditions.current.push(Condition::new(
            OWNER_REMEDIATED,
            ConditionStatus::False,
            reason,
            "",
        ));
        m
    }

    fn names(ms: &[&Machine]) -> Vec<String> {
        ms.iter().map(|m| m.meta.name.clone()).collect()
    }

    /// Mirrors upstream's `sortMachinesToRemediate` test: annotated first, then newest, then name.
    #[test]
    fn owner_remediation_ordering() {
        let a = unhealthy("a", 10, "WaitingForRemediation");
        let b = unhealthy("b", 30, "WaitingForRemediation");
        let c = unhealthy("c", 30, "WaitingForRemediation");
        let mut d = unhealthy("d", 5, "WaitingForRemediation");
        d.meta
            .annotations
            .insert(REMEDIATE_MACHINE_ANNOTATION.into(), String::new());
        let e = unhealthy("e", 1, MACHINE_DELETING_REASON);
        let mut list = vec![&a, &b, &c, &d, &e];
        sort_for_remediation(&mut list);
        assert_eq!(names(&list), ["e", "d", "b", "c", "a"]);
    }

    fn setup(max_in_flight: Option<IntOrString>) -> (MachineSet, Store) {
        let mut ms = testing::machine_set("c1", "ms", 3);
        testing::controlled_by(&mut ms.meta, "MachineDeployment", "md");
        let mut md = testing::machine_deployment("c1", "md", 4);
        md.remediation_max_in_flight = max_in_flight;
        let mut store = Store::default();
        store.upsert(&Scope::Management, Object::MachineDeployment(md));
        (ms, store)
    }

    #[test]
    fn max_in_flight_defers_the_rest_and_counts_deleting_remediations() {
        let (ms, store) = setup(Some(IntOrString::String("50%".into())));
        let old = unhealthy("old", 1, "WaitingForRemediation");
        let new = unhealthy("new", 9, MACHINE_DELETING_REASON);
        let mid = unhealthy("mid", 5, "WaitingForRemediation");
        let plan = plan(&ms, &store, &[&old, &new, &mid]);
        // 50% of 4 replicas = 2: `new` (already marked) is deleted, `mid` marked, `old` deferred.
        assert_eq!(
            names(&plan.deletions.iter().map(|(m, _)| *m).collect::<Vec<_>>()),
            ["new"]
        );
        let reasons: Vec<(String, String)> = plan
            .edits
            .iter()
            .map(|(m, edits, _)| {
                let reason = edits
                    .iter()
                    .find_map(|e| match e {
                        Edit::Set(List::Current, c) => Some(c.reason.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                (m.meta.name.clone(), reason)
            })
            .collect();
        assert!(reasons.contains(&("old".into(), REMEDIATION_DEFERRED_REASON.into())));
        assert!(reasons.contains(&("mid".into(), MACHINE_DELETING_REASON.into())));

        // With one remediation already deleting, the budget shrinks to 1.
        let mut deleting = unhealthy("deleting", 0, MACHINE_DELETING_REASON);
        deleting.meta.deletion_timestamp = Some(Timestamp(50));
        let plan2 = plan_for(&ms, &store, &[&old, &new, &mid, &deleting]);
        assert_eq!(plan2.deletions.len(), 1);
        let deferred = plan2
            .edits
            .iter()
            .filter(|(_, edits, _)| {
                edits.iter().any(|e| matches!(e, Edit::Set(List::Current, c) if c.reason == REMEDIATION_DEFERRED_REASON
                    && c.message == "Waiting because there are already too many remediations in progress (spec.strategy.remediation.maxInFlight is 50%)"))
            })
            .count();
        assert_eq!(deferred, 2);
    }

    fn plan_for<'a>(ms: &MachineSet, store: &Store, machines: &[&'a Machine]) -> Plan<'a> {
        plan(ms, store, machines)
    }

    #[test]
    fn outdated_revision_is_not_remediated() {
        let (mut ms, mut store) = setup(None);
        ms.meta
            .annotations
            .insert(REVISION_ANNOTATION.into(), "1".into());
        let mut md = testing::machine_deployment("c1", "md", 4);
        md.meta
            .annotations
            .insert(REVISION_ANNOTATION.into(), "2".into());
        md.meta.resource_version = 2;
        store.upsert(&Scope::Management, Object::MachineDeployment(md));
        let m = unhealthy("m", 1, "WaitingForRemediation");
        let plan = plan(&ms, &store, &[&m]);
        assert!(plan.deletions.is_empty());
        assert!(
            matches!(&plan.edits[0].1[0], Edit::Set(List::Current, c) if c.reason == CANNOT_BE_REMEDIATED_REASON)
        );
    }

    #[test]
    fn stale_owner_remediated_is_cleaned_per_api_version() {
        let (ms, store) = setup(None);
        let mut m = testing::machine("c1", "m", Some("m"));
        testing::controlled_by(&mut m.meta, "MachineSet", "ms");
        m.conditions.current.push(Condition::new(
            HEALTH_CHECK_SUCCEEDED,
            ConditionStatus::True,
            "HealthCheckSucceeded",
            "",
        ));
        m.conditions.current.push(Condition::new(
            OWNER_REMEDIATED,
            ConditionStatus::False,
            "WaitingForRemediation",
            "",
        ));
        m.conditions.legacy.push(Condition::new(
            OWNER_REMEDIATED,
            ConditionStatus::False,
            "WaitingForRemediation",
            "",
        ));
        let plan = plan(&ms, &store, &[&m]);
        assert_eq!(plan.edits.len(), 1);
        assert_eq!(
            plan.edits[0].1,
            vec![Edit::Remove(List::Current, OWNER_REMEDIATED)]
        );
        assert!(plan.deletions.is_empty());
    }
}
