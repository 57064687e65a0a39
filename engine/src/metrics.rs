//! What the engine knows that an operator alerts on, read out for `/metrics`: reconciles per
//! controller, and from the cache the deleting Machines by phase and each MHC's counts. Not
//! state: counters are not encoded and compare equal, so replay equality ignores them.

use crate::Refusal;
use crate::command::Action;
use crate::command::ControllerId;
use crate::deletion::{MachineDeletion, reason};
use crate::drain::EvictionAttempt;
use crate::input::ApiOutcome;
use crate::model::ObjectKey;
use crate::model::{Kind, Object, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, Scope};
use crate::store::Store;
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// The controllers as `controller_runtime_*` series name them (upstream's names), in
/// [`ControllerId`] slot order.
pub const CONTROLLER_NAMES: [&str; ControllerId::COUNT] =
    ["machine", "machineset", "machinehealthcheck", "machinepool"];

/// Watches reconciles without taking part in them: the adapter times each one for
/// `controller_runtime_reconcile_time_seconds`. It hands nothing back to the engine, so what
/// it sees cannot change a decision and replay stays exact.
pub trait ReconcileObserver: std::fmt::Debug + Send + Sync {
    /// A reconcile of controller slot `controller` ([`CONTROLLER_NAMES`] order) begins.
    fn began(&self, controller: usize);
    /// The reconcile that began last has ended.
    fn ended(&self, controller: usize);
}

/// Reconciles per controller slot ([`CONTROLLER_NAMES`] order), and of them the errors.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub reconciles: [u64; ControllerId::COUNT],
    /// Reconciles that handled a command of theirs that failed with an API error
    /// ([`is_reconcile_error`]): controller-runtime's `result="error"`.
    pub errors: [u64; ControllerId::COUNT],
    /// Keys whose next reconcile handles such a failure (emptied as they are reconciled).
    pub(crate) failing: [BTreeSet<ObjectKey>; ControllerId::COUNT],
    /// Inputs whose reconciles ran out of budget (a bug): their keys left were carried on.
    pub reconcile_budget_exhausted: u64,
    pub observer: Option<std::sync::Arc<dyn ReconcileObserver>>,
}

/// Whether `outcome` makes the reconcile that handles it an error, as a controller-runtime
/// reconciler returns the error of an API call that failed. The engine's reconciles are pure:
/// the command goes out after the pass that decided it, and its answer comes back as an input
/// that makes the command's owner dirty, so the owner's next pass is the one that fails.
/// Not errors: 2xx; 404 (the object is gone: what a deletion wants, and what the cache learns);
/// an eviction refused by a PodDisruptionBudget (429) or a terminating namespace (the drain
/// waits and retries, as CAPI's drain requeues without an error).
pub fn is_reconcile_error(action: &Action, outcome: &ApiOutcome) -> bool {
    match outcome {
        ApiOutcome::Ok { .. } | ApiOutcome::NotSent { .. } | ApiOutcome::NotFound => false,
        ApiOutcome::Refused { refusal, .. } => {
            let drain_waits = match refusal {
                Refusal::DisruptionBudget { .. }
                | Refusal::TooManyRequests { .. }
                | Refusal::NamespaceTerminating => true,
                Refusal::Forbidden => false,
            };
            !(drain_waits && matches!(action, Action::Evict { .. }))
        }
        ApiOutcome::Conflict { .. } | ApiOutcome::Error { .. } | ApiOutcome::Unreachable { .. } => {
            true
        }
    }
}

impl PartialEq for Counters {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Counters {}

/// Deleting Machines in one phase (the `Deleting` condition's reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseGauge {
    pub machines: u64,
    /// Seconds since the oldest of them started deleting.
    pub oldest_seconds: i64,
}

/// One MHC's status as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MhcGauge {
    pub name: String,
    pub expected: i64,
    pub healthy: i64,
    pub remediations_allowed: i64,
}

/// Why a drain cannot evict a pod now: the values of the `reason` label of
/// `lifecycle_drain_blocked_pods`, always exported (0 when none) so an alert has a series.
pub const DRAIN_BLOCKED_REASONS: [&str; 4] = [
    "PodDisruptionBudget",
    "NamespaceTerminating",
    "EvictionFailed",
    "WaitingForDeletion",
];

/// The gauges at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    pub deleting: BTreeMap<String, PhaseGauge>,
    pub mhcs: Vec<MhcGauge>,
    /// Pods still on a draining Node that the drain cannot evict now, by
    /// [`DRAIN_BLOCKED_REASONS`].
    pub drain_blocked: BTreeMap<&'static str, u64>,
    /// Machines a lifecycle hook holds now, by (`pre-drain` or `pre-terminate`, hook name).
    pub hooks_waiting: BTreeMap<(&'static str, String), u64>,
    /// Machines that carry this controller's own hooks ([`crate::ownership`]): CAPI's manager
    /// waits at them for whoever finishes them.
    pub own_hooked: OwnHooked,
    /// Objects whose writes a fight with another writer holds ([`crate::fight`]), by kind.
    pub writes_held: BTreeMap<String, u64>,
}

/// Machines carrying this controller's own hooks, deleting or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnHooked {
    /// Being deleted: CAPI's manager is held at a hook until this controller removes it (or
    /// `lifecycle release` does).
    pub deleting: u64,
    /// Not being deleted yet: held the moment they are.
    pub not_deleting: u64,
}

/// The phase a deleting Machine is counted under: in takeover, for a Machine this controller
/// holds at its hooks, its own condition's reason ([`crate::ownership::OWN_CONDITION`], as last
/// decided, written or not; `Pending` before the first), since CAPI's `Deleting` then only says
/// it waits at this controller's hook. Otherwise the `Deleting` condition's reason.
fn phase_of(m: &crate::model::Machine, key: &ObjectKey, deletion: &MachineDeletion) -> String {
    use crate::ownership::{OWN_CONDITION, OwnHooks, Ownership};
    let own = deletion.ownership() == Ownership::Takeover && OwnHooks::of(&m.meta).any();
    let condition = if own {
        // Decided and held back, else in flight, else as the Machine shows it.
        let memo = deletion.tracked_machine(key).map(|t| &t.memo);
        let held = memo.and_then(|memo| memo.unobserved.current(OWN_CONDITION));
        let sent = memo.and_then(|memo| memo.pending_conditions.as_ref());
        held.or_else(|| sent.and_then(|p| p.value.current(OWN_CONDITION)))
            .or_else(|| m.conditions.current(OWN_CONDITION))
    } else {
        m.conditions.current("Deleting")
    };
    condition
        .map_or("Pending", |c| c.reason.as_str())
        .to_string()
}

/// Reads the gauges from the cache and the deletion controller's memory at `now`. A deleting
/// Machine with no condition yet counts as phase `Pending` ([`phase_of`]).
pub fn gauges(store: &Store, deletion: &MachineDeletion, now: Timestamp) -> Gauges {
    let mut out = Gauges::default();
    for (key, object) in store.iter_kind(&Scope::Management, &Kind::Machine) {
        let Object::Machine(m) = object else { continue };
        let hooked = crate::ownership::OwnHooks::of(&m.meta).any();
        let Some(since) = m.meta.deletion_timestamp else {
            out.own_hooked.not_deleting += u64::from(hooked);
            continue;
        };
        out.own_hooked.deleting += u64::from(hooked);
        let phase = phase_of(m, key, deletion);
        let g = out.deleting.entry(phase.clone()).or_default();
        g.machines += 1;
        g.oldest_seconds = g.oldest_seconds.max(now.since(since).as_millis() / 1000);
        let hook = match phase.as_str() {
            reason::WAITING_FOR_PRE_DRAIN_HOOK => Some(("pre-drain", PRE_DRAIN_HOOK_PREFIX)),
            reason::WAITING_FOR_PRE_TERMINATE_HOOK => {
                Some(("pre-terminate", PRE_TERMINATE_HOOK_PREFIX))
            }
            _ => None,
        };
        if let Some((label, prefix)) = hook {
            // This controller's own hook is not someone else's holding the deletion: it is
            // counted in `own_hooked`.
            let foreign = m
                .meta
                .annotations
                .keys()
                .filter(|a| crate::ownership::is_foreign_hook(a, prefix));
            for annotation in foreign {
                if let Some(name) = annotation
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('/'))
                {
                    *out.hooks_waiting
                        .entry((label, name.to_string()))
                        .or_default() += 1;
                }
            }
        }
    }
    for (_, tracked) in deletion.tracked() {
        for (pod, attempt) in &tracked.memo.evictions {
            if store.get(pod).is_none() {
                continue;
            }
            let reason = match attempt {
                EvictionAttempt::Evicted { .. } => "WaitingForDeletion",
                EvictionAttempt::NotFound { .. } => continue,
                EvictionAttempt::Requested { .. } | EvictionAttempt::Failed { .. } => {
                    match attempt.failure() {
                        Some(failure) => failure.refusal.blocked_reason(),
                        None => continue,
                    }
                }
            };
            *out.drain_blocked.entry(reason).or_default() += 1;
        }
    }
    for (key, object) in store.iter_kind(&Scope::Management, &Kind::MachineHealthCheck) {
        let Object::MachineHealthCheck(h) = object else {
            continue;
        };
        let n = |v: Option<i32>| i64::from(v.unwrap_or(0));
        out.mhcs.push(MhcGauge {
            name: format!("{}/{}", key.namespace, key.name),
            expected: n(h.status.expected_machines),
            healthy: n(h.status.current_healthy),
            remediations_allowed: n(h.status.remediations_allowed),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Condition, ConditionStatus};
    use crate::testing::{cluster, machine, machine_health_check};
    use crate::time::Duration;

    #[test]
    fn deleting_machines_by_phase_with_the_oldest_age_and_each_mhcs_counts() {
        let t0 = Timestamp(1_704_067_200_000);
        let deleting = |name: &str, since: i64, phase: Option<&str>| {
            let mut m = machine("c1", name, None);
            m.meta.deletion_timestamp = Some(t0.saturating_add(Duration::from_secs(since)));
            if let Some(reason) = phase {
                m.conditions.current.push(Condition::new(
                    "Deleting",
                    ConditionStatus::True,
                    reason,
                    "",
                ));
            }
            Object::Machine(m)
        };
        let mut mhc = machine_health_check("c1", "mhc");
        mhc.status.expected_machines = Some(3);
        mhc.status.current_healthy = Some(2);
        mhc.status.remediations_allowed = Some(1);
        let objects = vec![
            Object::Cluster(cluster("c1")),
            deleting("a", 0, Some("DrainingNode")),
            deleting("b", 300, Some("DrainingNode")),
            deleting("c", 60, None),
            Object::Machine(machine("c1", "d", None)),
            Object::MachineHealthCheck(mhc),
        ];
        let mut store = Store::default();
        store.replace_scope(&Scope::Management, objects);
        let g = gauges(
            &store,
            &MachineDeletion::default(),
            t0.saturating_add(Duration::from_secs(600)),
        );
        assert_eq!(
            g.deleting,
            BTreeMap::from([
                (
                    "DrainingNode".to_string(),
                    PhaseGauge {
                        machines: 2,
                        oldest_seconds: 600
                    }
                ),
                (
                    "Pending".to_string(),
                    PhaseGauge {
                        machines: 1,
                        oldest_seconds: 540
                    }
                ),
            ])
        );
        assert_eq!(
            g.mhcs,
            [MhcGauge {
                name: "default/mhc".into(),
                expected: 3,
                healthy: 2,
                remediations_allowed: 1
            }]
        );
    }
}
