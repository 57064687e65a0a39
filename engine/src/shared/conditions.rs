//! Writing owned conditions into an object's two condition lists without touching the rest.
//!
//! Comparisons are done in place (no allocation) so a full evaluation over many healthy targets
//! whose conditions are already right costs only lookups.

use crate::model::{Condition, ConditionStatus, Conditions, Severity};
use crate::time::Timestamp;

/// Which list a condition lives in: v1beta2 types (`current`) or v1beta1 types (`legacy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum List {
    Current,
    Legacy,
}

/// One desired change to a condition list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    Set(List, Condition),
    Remove(List, &'static str),
}

impl Edit {
    pub fn set(
        list: List,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> Edit {
        Edit::Set(list, Condition::new(type_, status, reason, message))
    }

    pub fn set_with(list: List, condition: Condition) -> Edit {
        Edit::Set(list, condition)
    }

    fn type_(&self) -> &str {
        match self {
            Edit::Set(_, c) => &c.type_,
            Edit::Remove(_, t) => t,
        }
    }
}

fn list(conditions: &Conditions, which: List) -> &Vec<Condition> {
    match which {
        List::Current => &conditions.current,
        List::Legacy => &conditions.legacy,
    }
}

fn list_mut(conditions: &mut Conditions, which: List) -> &mut Vec<Condition> {
    match which {
        List::Current => &mut conditions.current,
        List::Legacy => &mut conditions.legacy,
    }
}

/// Whether `observed` already says what `want` says (transition time aside).
pub fn same(observed: &Condition, want: &Condition) -> bool {
    observed.status == want.status
        && observed.reason == want.reason
        && observed.message == want.message
        && observed.severity == want.severity
}

fn is_noop(conditions: &Conditions, edit: &Edit) -> bool {
    let l = list(
        conditions,
        match edit {
            Edit::Set(l, _) | Edit::Remove(l, _) => *l,
        },
    );
    match edit {
        Edit::Set(_, want) => l.iter().any(|c| c.type_ == want.type_ && same(c, want)),
        Edit::Remove(_, t) => !l.iter().any(|c| c.type_ == *t),
    }
}

/// Applies `edits` to a copy of `observed`, keeping each condition's last transition time unless
/// its status changes (then `now`). Returns the new lists and a summary of what changed, or
/// `None` when nothing would.
pub fn apply(
    observed: &Conditions,
    edits: &[Edit],
    now: Timestamp,
) -> Option<(Conditions, String)> {
    if edits.iter().all(|e| is_noop(observed, e)) {
        return None;
    }
    let mut out = observed.clone();
    let mut summary: Vec<String> = Vec::new();
    for edit in edits {
        if is_noop(&out, edit) {
            continue;
        }
        let line = match edit {
            Edit::Set(which, want) => {
                crate::model::set_condition(list_mut(&mut out, *which), want.clone(), now);
                if want.reason.is_empty() {
                    format!("{}={}", want.type_, want.status.as_str())
                } else {
                    format!("{}={} ({})", want.type_, want.status.as_str(), want.reason)
                }
            }
            Edit::Remove(which, t) => {
                list_mut(&mut out, *which).retain(|c| c.type_ != *t);
                format!("{t} removed")
            }
        };
        // Both lists usually change together; say it once.
        if !summary.contains(&line) {
            summary.push(line);
        }
        debug_assert!(is_noop(&out, edit), "edit {:?} applied", edit.type_());
    }
    Some((out, summary.join(", ")))
}

/// What `edits` decide of an object's conditions ([`crate::decision`]): each condition set, as
/// `written` (what [`apply`] returns, or the observed lists when it returns `None`) has it,
/// and each type removed.
pub fn decided(written: &Conditions, edits: &[Edit]) -> (Conditions, Vec<(List, &'static str)>) {
    let mut set = Conditions::default();
    let mut absent = Vec::new();
    for edit in edits {
        match edit {
            Edit::Set(which, want) => {
                if let Some(c) = list(written, *which).iter().find(|c| c.type_ == want.type_) {
                    list_mut(&mut set, *which).push(c.clone());
                }
            }
            Edit::Remove(which, t) => absent.push((*which, *t)),
        }
    }
    (set, absent)
}

/// A v1beta1-style condition with a severity.
pub fn legacy(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    severity: Severity,
) -> Condition {
    Condition::new(type_, status, reason, message).with_severity(severity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus as S;

    #[test]
    fn transition_time_moves_only_with_status() {
        let mut observed = Conditions::default();
        observed.current.push(Condition {
            last_transition_time: Some(Timestamp(5_000)),
            ..Condition::new("A", S::False, "X", "old")
        });
        let edits = [Edit::set(List::Current, "A", S::False, "Y", "new")];
        let (out, summary) = apply(&observed, &edits, Timestamp(9_000)).expect("changes");
        assert_eq!(out.current[0].last_transition_time, Some(Timestamp(5_000)));
        assert_eq!(summary, "A=False (Y)");
        let edits = [Edit::set(List::Current, "A", S::True, "Y", "new")];
        let (out, _) = apply(&observed, &edits, Timestamp(9_000)).expect("changes");
        assert_eq!(out.current[0].last_transition_time, Some(Timestamp(9_000)));
        assert!(
            apply(&out, &edits, Timestamp(10_000)).is_none(),
            "idempotent"
        );
    }

    #[test]
    fn what_edits_decide_is_what_apply_writes_whether_or_not_it_writes() {
        let mut observed = Conditions::default();
        observed.current.push(Condition {
            last_transition_time: None,
            ..Condition::new("A", S::True, "X", "")
        });
        let edits = [
            Edit::set(List::Current, "A", S::True, "X", ""),
            Edit::set(List::Legacy, "B", S::False, "Y", "m"),
            Edit::Remove(List::Current, "C"),
        ];
        let (written, _) = apply(&observed, &edits, Timestamp(9_000)).expect("changes");
        let (set, absent) = decided(&written, &edits);
        // Unchanged, A is not rewritten: it stays as observed, transition time and all.
        assert_eq!(set.current, observed.current);
        assert_eq!(set.legacy[0].last_transition_time, Some(Timestamp(9_000)));
        assert_eq!(absent, [(List::Current, "C")]);
        assert!(apply(&observed, &edits[..1], Timestamp(9_000)).is_none());
        let (set, _) = decided(&observed, &edits[..1]);
        assert_eq!(set.current, observed.current);
    }

    #[test]
    fn removal_of_absent_condition_is_a_noop() {
        let observed = Conditions::default();
        assert!(apply(&observed, &[Edit::Remove(List::Legacy, "B")], Timestamp(1)).is_none());
    }
}
