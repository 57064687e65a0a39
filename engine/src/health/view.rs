//! A target's view: what its verdict reads from its Machine and Node, kept between passes, so
//! that a full evaluation (after a change to the Cluster's gates, the MHC's timeouts or
//! `maxUnhealthy`) walks the remembered targets instead of every Machine and Node in the store.
//!
//! Guarantees: [`judge_view`] gives the class and next check that [`evaluate`] and
//! [`TargetClass::of`] give for the Machine and Node the view was read from, or `None` when
//! the target has findings (their messages are built from the objects). A view stays valid
//! while its Machine and Node do not change (a change to either marks the target dirty, and a
//! dirty target is read again) and while the MHC's [`ViewContext`] is the one it was read with:
//! the namespace, cluster and selector decide which Machines are targets, the check types
//! which conditions were read, the workload cluster whether Nodes were. A full evaluation
//! trusts a view only to confirm that a target's verdict stays what was recorded (same class,
//! same deadline, nothing to write); anything else is judged from the objects. Views are not
//! state ([`Cached`]): a decoded engine has none and reads the store on its first full
//! evaluation.
//!
//! [`evaluate`]: super::verdict::evaluate

use super::verdict::{
    Checks, ClusterGates, Held, NEXT_CHECK_MARGIN, NodeObservation, TargetClass, earliest, held,
    startup_base_of, startup_reference_of,
};
use crate::model::{
    ClusterName, ConditionStatus, LabelSelector, Machine, MachineHealthCheck,
    REMEDIATE_MACHINE_ANNOTATION, UnhealthyCondition,
};
use crate::time::Timestamp;

/// At most this many checks (Machine and Node conditions together) are read into a view; an
/// MHC with more is always evaluated from the store.
pub(super) const VIEW_CHECKS_MAX: usize = 4;

/// Something kept in a memo without being state: not serialized (a field holding it is
/// `#[serde(skip)]`, so a decoded engine starts without it) and equal to any other (it never
/// changes what a reconcile does, only what it costs).
#[derive(Clone, Debug)]
pub(super) struct Cached<T>(pub Option<T>);

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Cached(None)
    }
}

impl<T> PartialEq for Cached<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Cached<T> {}

/// Whether the Node was looked at, and what was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeSeen {
    NotRead,
    Missing,
    Unreadable,
    Found,
}

/// What [`evaluate`](super::verdict::evaluate) reads from one target, without the texts its
/// findings quote. Compact (56 bytes): a full evaluation walks one per target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TargetView {
    remediate_annotation: bool,
    control_plane: bool,
    deleting: bool,
    /// `failureReason` or `failureMessage` is set.
    failed: bool,
    node: NodeSeen,
    /// Per check, Machine checks first, then Node checks: the status of the condition of that
    /// type, `None` when there is no such condition...
    statuses: [Option<ConditionStatus>; VIEW_CHECKS_MAX],
    /// ...and its last transition time (absent counts as the epoch, as in `held`).
    since: [Timestamp; VIEW_CHECKS_MAX],
    /// What the startup timeout counts from, before the Cluster's gates are taken into
    /// account (read only without a Node).
    startup_base: Timestamp,
}

impl TargetView {
    /// Reads a target; `None` when the MHC has more checks than a view holds.
    pub(super) fn read(
        machine: &Machine,
        node: NodeObservation<'_>,
        checks: &Checks<'_>,
    ) -> Option<TargetView> {
        let machine_checks = checks.unhealthy_machine_conditions;
        let node_checks = checks.unhealthy_node_conditions;
        if machine_checks.len() + node_checks.len() > VIEW_CHECKS_MAX {
            return None;
        }
        let mut statuses = [None; VIEW_CHECKS_MAX];
        let mut since = [Timestamp::default(); VIEW_CHECKS_MAX];
        let mut slot = 0;
        for check in machine_checks {
            if let Some(c) = machine.conditions.current(&check.type_) {
                statuses[slot] = Some(c.status);
                since[slot] = c.last_transition_time.unwrap_or_default();
            }
            slot += 1;
        }
        let mut startup_base = Timestamp::default();
        let node_seen = match node {
            NodeObservation::NotRead => {
                startup_base = startup_base_of(machine);
                NodeSeen::NotRead
            }
            NodeObservation::Missing => NodeSeen::Missing,
            NodeObservation::Unreadable => NodeSeen::Unreadable,
            NodeObservation::Found(n) => {
                for check in node_checks {
                    if let Some(c) = n.condition(&check.type_) {
                        statuses[slot] = Some(c.status);
                        since[slot] = c.last_transition_time.unwrap_or_default();
                    }
                    slot += 1;
                }
                NodeSeen::Found
            }
        };
        Some(TargetView {
            remediate_annotation: machine.meta.has_annotation(REMEDIATE_MACHINE_ANNOTATION),
            control_plane: machine.is_control_plane(),
            deleting: machine.meta.is_deleting(),
            failed: machine.failure_reason.is_some() || machine.failure_message.is_some(),
            node: node_seen,
            statuses,
            since,
            startup_base,
        })
    }
}

/// The class and next check of a target from its view, step for step as `evaluate` decides
/// them; `None` when the target has a finding (is unhealthy).
pub(super) fn judge_view(
    view: &TargetView,
    gates: &ClusterGates,
    checks: &Checks<'_>,
    now: Timestamp,
) -> Option<(TargetClass, Option<Timestamp>)> {
    if checks.has_invalid_timeout() {
        // What is unknown is left to `evaluate`, which says why.
        return None;
    }
    let next_check = next_check(view, gates, checks, now)?;
    let class = if next_check.is_some() {
        TargetClass::Pending
    } else if !view.deleting && view.node == NodeSeen::Found {
        TargetClass::Healthy
    } else {
        TargetClass::Unevaluated
    };
    Some((class, next_check))
}

/// `evaluate`'s next check, or `None` when it would find something.
fn next_check(
    view: &TargetView,
    gates: &ClusterGates,
    checks: &Checks<'_>,
    now: Timestamp,
) -> Option<Option<Timestamp>> {
    if view.remediate_annotation {
        return None;
    }
    if !gates.control_plane_initialized.is_true && !view.control_plane {
        return Some(None);
    }
    if !gates.infrastructure_ready.is_true {
        return Some(None);
    }
    let machine_checks = checks.unhealthy_machine_conditions;
    let mut next = None;
    let conditions = view.statuses.iter().zip(&view.since);
    if past_a_check(machine_checks, conditions.clone(), now, &mut next) {
        return None;
    }
    if view.failed {
        return None;
    }
    match view.node {
        NodeSeen::Missing => return None,
        NodeSeen::Unreadable => {}
        NodeSeen::NotRead => {
            let timeout = checks.node_startup_timeout;
            if !timeout.is_zero() {
                let since = startup_reference_of(view.startup_base, gates);
                let expiry = since.saturating_add(timeout);
                if expiry < now {
                    return None;
                }
                next = earliest(next, expiry.saturating_add(NEXT_CHECK_MARGIN));
            }
        }
        NodeSeen::Found => {
            let node_conditions = conditions.skip(machine_checks.len());
            if past_a_check(
                checks.unhealthy_node_conditions,
                node_conditions,
                now,
                &mut next,
            ) {
                return None;
            }
        }
    }
    Some(next)
}

/// What views were read with. Views of one MHC are used only while this is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ViewContext {
    namespace: String,
    cluster_name: String,
    selector: LabelSelector,
    machine_check_types: Vec<String>,
    node_check_types: Vec<String>,
    workload: Option<ClusterName>,
}

impl ViewContext {
    pub(super) fn of(mhc: &MachineHealthCheck, workload: Option<&ClusterName>) -> ViewContext {
        let types = |checks: &[crate::model::UnhealthyCondition]| {
            checks.iter().map(|c| c.type_.clone()).collect()
        };
        ViewContext {
            namespace: mhc.meta.namespace.clone(),
            cluster_name: mhc.cluster_name.clone(),
            selector: mhc.selector.clone(),
            machine_check_types: types(&mhc.unhealthy_machine_conditions),
            node_check_types: types(&mhc.unhealthy_node_conditions),
            workload: workload.cloned(),
        }
    }

    /// Whether views read with this context hold for `mhc` now (compared in place: no
    /// allocation per reconcile).
    pub(super) fn holds_for(
        &self,
        mhc: &MachineHealthCheck,
        workload: Option<&ClusterName>,
    ) -> bool {
        self.namespace == mhc.meta.namespace
            && self.cluster_name == mhc.cluster_name
            && self.selector == mhc.selector
            && self
                .machine_check_types
                .iter()
                .eq(mhc.unhealthy_machine_conditions.iter().map(|c| &c.type_))
            && self
                .node_check_types
                .iter()
                .eq(mhc.unhealthy_node_conditions.iter().map(|c| &c.type_))
            && self.workload.as_ref() == workload
    }
}

/// Folds each check's next deadline into `next`; true when a condition has held past its
/// timeout, or against an invalid one (the view then settles nothing). `conditions` are the
/// view's (status, since) pairs for `checks`, in order.
fn past_a_check<'v>(
    checks: &[UnhealthyCondition],
    conditions: impl Iterator<Item = (&'v Option<ConditionStatus>, &'v Timestamp)>,
    now: Timestamp,
    next: &mut Option<Timestamp>,
) -> bool {
    for (check, (status, since)) in checks.iter().zip(conditions) {
        let Some(status) = *status else {
            continue;
        };
        match held(check, status, Some(*since), now) {
            Held::Past | Held::Unknown => return true,
            Held::Until(t) => *next = earliest(*next, t),
            Held::NotInStatus => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::verdict::{Gate, evaluate};
    use crate::model::{Condition, Node, NodeCondition, UnhealthyCondition};
    use crate::testing;
    use crate::time::Duration;
    use proptest::prelude::*;

    const T0: Timestamp = Timestamp(1_000_000_000);

    fn status(i: u8) -> ConditionStatus {
        [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ][usize::from(i % 3)]
    }

    fn minutes(m: u8) -> Timestamp {
        T0.saturating_add(Duration::from_mins(i64::from(m)))
    }

    fn check(type_: &str, status: &str, mins: i64) -> UnhealthyCondition {
        UnhealthyCondition {
            type_: type_.into(),
            status: status.into(),
            timeout: Duration::from_mins(mins),
        }
    }

    /// A condition (status, since in minutes after T0), or none.
    fn condition() -> impl Strategy<Value = Option<(u8, u8)>> {
        proptest::option::of((0u8..3, 0u8..30))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// The view decides what `evaluate` decides: the same class and next check, or
        /// "unhealthy" exactly when `evaluate` has findings.
        #[test]
        fn a_view_judges_like_evaluate(
            // Mostly targets that reach the condition checks (no annotation, gates True).
            flags in (prop::bool::weighted(0.1), any::<bool>(), any::<bool>(), prop_oneof![4 => Just(0u8), 1 => 1u8..3]),
            machine_ready in condition(),
            machine_infra in condition(),
            node_kind in 0u8..3,
            node_ready in condition(),
            node_disk in condition(),
            gates in ((prop::bool::weighted(0.8), 0u8..30), (prop::bool::weighted(0.8), 0u8..30)),
            check_sets in (0usize..3, 0usize..4, any::<bool>()),
            now in 0u32..(40 * 60),
        ) {
            let (remediate, control_plane, deleting, failure) = flags;
            let mut m = if control_plane {
                testing::control_plane_machine("c1", "m1", None)
            } else {
                testing::machine("c1", "m1", None)
            };
            m.meta.creation_timestamp = Some(minutes(3));
            if remediate {
                m.meta.annotations.insert(REMEDIATE_MACHINE_ANNOTATION.into(), String::new());
            }
            if deleting {
                m.meta.deletion_timestamp = Some(minutes(1));
            }
            match failure {
                1 => m.failure_reason = Some("CreateError".into()),
                2 => m.failure_message = Some("boom".into()),
                _ => {}
            }
            for (type_, c) in [("Ready", machine_ready), ("InfrastructureReady", machine_infra)] {
                if let Some((s, since)) = c {
                    m.conditions.current.push(Condition {
                        last_transition_time: Some(minutes(since)),
                        ..Condition::new(type_, status(s), "Why", "")
                    });
                }
            }
            let mut node: Node = testing::node("n1");
            node.conditions.clear();
            for (type_, c) in [("Ready", node_ready), ("DiskPressure", node_disk)] {
                if let Some((s, since)) = c {
                    node.conditions.push(NodeCondition {
                        last_transition_time: Some(minutes(since)),
                        ..testing::ready_condition(status(s), T0)
                    });
                    node.conditions.last_mut().unwrap().type_ = type_.into();
                }
            }
            let observed = match node_kind {
                0 => NodeObservation::NotRead,
                1 => NodeObservation::Missing,
                _ => NodeObservation::Found(&node),
            };
            let gate = |(is_true, since): (bool, u8)| Gate { is_true, since: Some(minutes(since)) };
            let gates = ClusterGates {
                control_plane_initialized: gate(gates.0),
                infrastructure_ready: gate(gates.1),
            };
            let machine_checks = [check("Ready", "False", 10), check("Ready", "Unknown", 0)];
            let node_checks = [
                check("Ready", "Unknown", 5),
                check("Ready", "False", 5),
                check("DiskPressure", "True", 1),
            ];
            let (machine_n, node_n, startup) = check_sets;
            let checks = Checks {
                unhealthy_machine_conditions: &machine_checks[..machine_n],
                unhealthy_node_conditions: &node_checks[..node_n],
                node_startup_timeout: if startup { Duration::from_mins(10) } else { Duration::ZERO },
            };
            let now = T0.saturating_add(Duration::from_secs(i64::from(now)));

            let verdict = evaluate(&m, observed, &gates, &checks, now);
            let want = (!verdict.is_unhealthy())
                .then(|| (TargetClass::of(&verdict, &m, observed), verdict.next_check));
            let view = TargetView::read(&m, observed, &checks);
            if machine_n + node_n > VIEW_CHECKS_MAX {
                prop_assert!(view.is_none());
            } else {
                let view = view.expect("the checks fit");
                prop_assert_eq!(judge_view(&view, &gates, &checks, now), want);
            }
        }
    }
}
