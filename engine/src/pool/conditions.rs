//! The MachinePool's conditions: upstream's v1beta1 `BootstrapReady`, `InfrastructureReady`,
//! `ReplicasReady` and their `Ready` summary, written in both lists (the v1beta2 list carries
//! the same three types with v1beta2-style reasons) so either API version shows them.

use crate::model::{Condition, ConditionStatus, Conditions, Severity};
use crate::shared::conditions::List;
use crate::time::Timestamp;

pub const READY: &str = "Ready";
pub const BOOTSTRAP_READY: &str = "BootstrapReady";
pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
pub const REPLICAS_READY: &str = "ReplicasReady";

pub const WAITING_FOR_DATA_SECRET: &str = "WaitingForDataSecret";
pub const WAITING_FOR_INFRASTRUCTURE: &str = "WaitingForInfrastructure";
pub const INCORRECT_EXTERNAL_REF: &str = "IncorrectExternalRef";
pub const WAITING_FOR_REPLICAS_READY: &str = "WaitingForReplicasReady";

/// Reason of a True condition in the v1beta2 list (v1beta2 conditions always carry a reason).
const READY_REASON: &str = "Ready";

/// The summarized types, in upstream's `SetSummary` order.
const SUMMARIZED: [&str; 3] = [BOOTSTRAP_READY, INFRASTRUCTURE_READY, REPLICAS_READY];

/// A v1beta1 condition: True (no reason), or False with reason, severity and message.
pub fn legacy_true(type_: &str) -> Condition {
    Condition::new(type_, ConditionStatus::True, "", "")
}

pub fn legacy_false(type_: &str, reason: &str, severity: Severity, message: &str) -> Condition {
    Condition::new(type_, ConditionStatus::False, reason, message).with_severity(severity)
}

pub use crate::model::set_condition as set;

/// Upstream v1beta1 list order: `Ready` first, then by type.
fn sort_legacy(list: &mut [Condition]) {
    list.sort_by(|a, b| (a.type_ != READY, &a.type_).cmp(&(b.type_ != READY, &b.type_)));
}

/// v1beta1 merge priority of a condition group (lower wins the summary).
fn merge_priority(c: &Condition) -> u8 {
    match (c.status, c.severity) {
        (ConditionStatus::False, Severity::Error) => 0,
        (ConditionStatus::False, Severity::Warning) => 1,
        (ConditionStatus::False, Severity::Info | Severity::None) => 2,
        (ConditionStatus::True, _) => 3,
        (ConditionStatus::Unknown, _) => 4,
    }
}

/// Upstream's v1beta1 `SetSummary` over the three pool conditions: the status of the
/// highest-priority group, with reason, severity and message of its first member in order.
fn summary(legacy: &[Condition]) -> Option<Condition> {
    let members: Vec<&Condition> = SUMMARIZED
        .iter()
        .filter_map(|t| legacy.iter().find(|c| c.type_ == *t))
        .collect();
    let best = members.iter().map(|c| merge_priority(c)).min()?;
    let first = members.iter().find(|c| merge_priority(c) == best)?;
    Some(match first.status {
        ConditionStatus::True => legacy_true(READY),
        status => Condition::new(READY, status, &first.reason, &first.message)
            .with_severity(first.severity),
    })
}

/// The full desired condition lists: `legacy` as computed by the reconcile steps plus the
/// `Ready` summary, and `current` mirroring the three types. Conditions of other types that
/// someone else wrote are kept.
pub fn finish(observed: &Conditions, mut legacy: Vec<Condition>, now: Timestamp) -> Conditions {
    if let Some(ready) = summary(&legacy) {
        set(&mut legacy, ready, now);
    }
    sort_legacy(&mut legacy);
    let mut current = observed.current.clone();
    // Called only once every dependency reads.
    current.retain(|c| c.type_ != crate::store::OBJECTS_READABLE);
    for type_ in SUMMARIZED {
        let Some(l) = legacy.iter().find(|c| c.type_ == type_) else {
            continue;
        };
        let reason = match l.status {
            ConditionStatus::True => READY_REASON,
            ConditionStatus::False | ConditionStatus::Unknown => l.reason.as_str(),
        };
        set(
            &mut current,
            Condition::new(type_, l.status, reason, &l.message),
            now,
        );
    }
    current.sort_by(|a, b| a.type_.cmp(&b.type_));
    Conditions { current, legacy }
}

/// What the pool decides of its conditions when it writes `desired` ([`crate::decision`]): its
/// own types as `desired` has them (in the v1beta2 list, those it mirrors), its reachability,
/// and no `ObjectsReadable` (everything reads).
pub fn decided(desired: &Conditions) -> (Conditions, Vec<(List, &'static str)>) {
    let reachable = crate::connection::REACHABLE_CONDITION;
    let summarized = |type_: &str| SUMMARIZED.contains(&type_);
    let legacy = desired
        .legacy
        .iter()
        .filter(|c| c.type_ == READY || summarized(&c.type_))
        .cloned()
        .collect();
    let current = desired
        .current
        .iter()
        .filter(|c| {
            c.type_ == reachable || summarized(&c.type_) && desired.legacy(&c.type_).is_some()
        })
        .cloned()
        .collect();
    let mut absent = vec![(List::Current, crate::store::OBJECTS_READABLE)];
    if desired.current(reachable).is_none() {
        absent.push((List::Current, reachable));
    }
    (Conditions { current, legacy }, absent)
}

/// `Type=Status (Reason)` for each condition that differs from the observed list.
pub fn summary_of_change(observed: &Conditions, desired: &Conditions) -> String {
    let mut parts = Vec::new();
    for c in &desired.legacy {
        let before = observed.legacy(&c.type_);
        if before.is_none_or(|b| b.status != c.status || b.reason != c.reason) {
            if c.reason.is_empty() {
                parts.push(format!("{}={}", c.type_, c.status.as_str()));
            } else {
                parts.push(format!("{}={} ({})", c.type_, c.status.as_str(), c.reason));
            }
        }
    }
    // The product condition of the v1beta2 list alone (no v1beta1 twin).
    let reachable = crate::connection::REACHABLE_CONDITION;
    match (observed.current(reachable), desired.current(reachable)) {
        (Some(_), None) => parts.push(format!("{reachable} removed")),
        (before, Some(c))
            if before.is_none_or(|b| b.status != c.status || b.reason != c.reason) =>
        {
            parts.push(format!("{}={} ({})", c.type_, c.status.as_str(), c.reason))
        }
        _ => {}
    }
    if parts.is_empty() {
        "conditions refreshed".to_string()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_picks_first_condition_of_worst_group_in_order() {
        let legacy = vec![
            legacy_false(BOOTSTRAP_READY, WAITING_FOR_DATA_SECRET, Severity::Info, ""),
            legacy_false(
                INFRASTRUCTURE_READY,
                INCORRECT_EXTERNAL_REF,
                Severity::Error,
                "could not find infra reference of kind DockerMachinePool with name p1",
            ),
            legacy_true(REPLICAS_READY),
        ];
        let ready = summary(&legacy).unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, INCORRECT_EXTERNAL_REF);
        assert_eq!(ready.severity, Severity::Error);
        assert!(ready.message.contains("DockerMachinePool"));
    }

    #[test]
    fn summary_is_true_when_all_true_and_absent_when_none_set() {
        let legacy = vec![legacy_true(BOOTSTRAP_READY), legacy_true(REPLICAS_READY)];
        assert!(summary(&legacy).unwrap().is_true());
        assert_eq!(summary(&[]), None);
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut list = Vec::new();
        set(&mut list, legacy_true(REPLICAS_READY), Timestamp(10_000));
        set(&mut list, legacy_true(REPLICAS_READY), Timestamp(20_000));
        assert_eq!(list[0].last_transition_time, Some(Timestamp(10_000)));
        set(
            &mut list,
            legacy_false(
                REPLICAS_READY,
                WAITING_FOR_REPLICAS_READY,
                Severity::Info,
                "",
            ),
            Timestamp(30_000),
        );
        assert_eq!(list[0].last_transition_time, Some(Timestamp(30_000)));
    }

    #[test]
    fn the_unreadable_mark_goes_once_everything_reads_and_others_conditions_stay() {
        let mut observed = Conditions::default();
        for type_ in [crate::store::OBJECTS_READABLE, "Paused"] {
            observed
                .current
                .push(Condition::new(type_, ConditionStatus::False, "R", "m"));
        }
        let c = finish(&observed, vec![legacy_true(REPLICAS_READY)], Timestamp(5));
        let current: Vec<&str> = c.current.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(current, ["Paused", "ReplicasReady"]);
    }

    #[test]
    fn both_lists_carry_the_three_types_ready_first_in_legacy() {
        let legacy = vec![
            legacy_true(REPLICAS_READY),
            legacy_false(BOOTSTRAP_READY, WAITING_FOR_DATA_SECRET, Severity::Info, ""),
        ];
        let c = finish(&Conditions::default(), legacy, Timestamp(5));
        let legacy_types: Vec<&str> = c.legacy.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(legacy_types, ["Ready", "BootstrapReady", "ReplicasReady"]);
        let current: Vec<(&str, &str)> = c
            .current
            .iter()
            .map(|c| (c.type_.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            current,
            [
                ("BootstrapReady", "WaitingForDataSecret"),
                ("ReplicasReady", "Ready")
            ]
        );
    }
}
