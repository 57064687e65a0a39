//! The conditions part of the rule: what the controllers last decided, per object and
//! condition, folded from their decisions ([`engine::decision`]) in the controller's mode, and
//! compared with what the object shows.

use engine::ControllerId;
use engine::decision::{Decision, Extent};
use engine::model::{Condition, Conditions, ObjectKey};
use engine::runtime::Mode;
use engine::shared::conditions::List;
use engine::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

/// Per condition (its list, then its type): who decided it, and what (`None`: absent).
type Decided = BTreeMap<List, BTreeMap<String, (ControllerId, Option<Condition>)>>;

#[derive(Clone, Debug, Default)]
pub struct DecidedConditions {
    decided: BTreeMap<ObjectKey, Decided>,
    /// Each (object, condition type) is reported once.
    reported: BTreeSet<(ObjectKey, String)>,
}

/// Whether a controller in `mode` sends this condition: alone, every one; in takeover, the
/// deletion's own `LifecycleDeleting` (CAPI's manager writes the rest of a Machine's) and
/// whatever the health check and the MachinePool decide (they decide only for what takeover
/// adopted); in shadow, none.
fn sent_in(mode: Mode, controller: ControllerId, list: List, type_: &str) -> bool {
    match mode {
        Mode::Alone => true,
        Mode::Takeover => match controller {
            ControllerId::Deletion => {
                list == List::Current && type_ == engine::ownership::OWN_CONDITION
            }
            ControllerId::Health | ControllerId::Pool => true,
            ControllerId::Remediation => false,
        },
        Mode::Shadow => false,
    }
}

fn list_of(conditions: &Conditions, list: List) -> &[Condition] {
    match list {
        List::Current => &conditions.current,
        List::Legacy => &conditions.legacy,
    }
}

/// How timelines name a list: by the API version whose types it holds.
fn list_name(list: List) -> &'static str {
    match list {
        List::Current => "v1beta2",
        List::Legacy => "v1beta1",
    }
}

impl DecidedConditions {
    /// Folds in one input's decisions. A decision that repeats what is held (most of a
    /// health check's, reconcile after reconcile) changes nothing and copies nothing.
    pub fn note(&mut self, mode: Mode, decisions: &[Decision]) {
        for d in decisions {
            let set = [
                (List::Current, &d.conditions.current),
                (List::Legacy, &d.conditions.legacy),
            ];
            let named = || {
                let set = set.into_iter().flat_map(|(list, cs)| {
                    cs.iter().map(move |c| (list, c.type_.as_str(), Some(c)))
                });
                let absent = d.absent.iter().map(|(list, t)| (*list, *t, None));
                set.chain(absent)
                    .filter(|(list, type_, _)| sent_in(mode, d.controller, *list, type_))
            };
            if !self.decided.contains_key(&d.target) {
                if named().next().is_none() {
                    continue;
                }
                self.decided.insert(d.target.clone(), Decided::default());
            }
            let Some(entry) = self.decided.get_mut(&d.target) else {
                continue;
            };
            if d.extent == Extent::Whole {
                for (list, types) in entry.iter_mut() {
                    types.retain(|t, (by, _)| {
                        *by != d.controller || named().any(|(l, n, _)| l == *list && n == t)
                    });
                }
            }
            for (list, type_, c) in named() {
                let types = entry.entry(list).or_default();
                match types.get_mut(type_) {
                    Some(held) if held.0 == d.controller && held.1.as_ref() == c => {}
                    Some(held) => *held = (d.controller, c.cloned()),
                    None => {
                        types.insert(type_.to_string(), (d.controller, c.cloned()));
                    }
                }
            }
            entry.retain(|_, types| !types.is_empty());
            if entry.is_empty() {
                self.decided.remove(&d.target);
            }
        }
    }

    /// Compares the decisions with what the API shows: `served(key)` is `None` for an object
    /// gone (its decisions are dropped), `Some(None)` for one that does not read. Returns a
    /// message per condition that differs, reported once each.
    pub fn check<'a>(
        &mut self,
        served: impl Fn(&ObjectKey) -> Option<Option<&'a Conditions>>,
        quiet: Duration,
    ) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut gone = Vec::new();
        for (key, wanted) in &self.decided {
            let have = match served(key) {
                None => {
                    gone.push(key.clone());
                    continue;
                }
                Some(None) => continue,
                Some(Some(have)) => have,
            };
            let wanted = wanted
                .iter()
                .flat_map(|(list, types)| types.iter().map(move |(t, held)| (list, t, held)));
            for (list, type_, (_, want)) in wanted {
                let seen = engine::model::find_condition(list_of(have, *list), type_);
                if seen == want.as_ref() || self.reported.contains(&(key.clone(), type_.clone())) {
                    continue;
                }
                self.reported.insert((key.clone(), type_.clone()));
                found.push((
                    key.to_string(),
                    unconverged(key, *list, type_, seen, want.as_ref(), quiet),
                ));
            }
        }
        for key in gone {
            self.decided.remove(&key);
        }
        found
    }
}

/// The message for a condition that shows `seen` where `want` was decided.
fn unconverged(
    key: &ObjectKey,
    list: List,
    type_: &str,
    seen: Option<&Condition>,
    want: Option<&Condition>,
    quiet: Duration,
) -> String {
    let list = list_name(list);
    let either = |c: Option<&Condition>, other: Option<&Condition>| match c {
        None => format!("no {type_} condition"),
        Some(c) => describe(c, other.unwrap_or(c)),
    };
    format!(
        "status did not converge: {key} shows {} in its {list} conditions where the controllers last decided {} (nothing pending for {quiet})",
        either(seen, want),
        either(want, seen),
    )
}

/// `Type=Status (Reason)`, and what else differs from `other` when that is the same.
fn describe(c: &Condition, other: &Condition) -> String {
    let mut s = format!("{}={}", c.type_, c.status.as_str());
    if !c.reason.is_empty() {
        s.push_str(&format!(" ({})", c.reason));
    }
    if c != other && c.status == other.status && c.reason == other.reason {
        if c.message != other.message {
            s.push_str(&format!(" message {:?}", c.message));
        } else if c.last_transition_time != other.last_transition_time {
            let at = c.last_transition_time.map(|t| t.to_rfc3339());
            s.push_str(&format!(" since {}", at.unwrap_or_default()));
        } else {
            s.push_str(&format!(" severity {:?}", c.severity));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::{ConditionStatus, Kind};

    fn mhc() -> ObjectKey {
        ObjectKey::management(Kind::MachineHealthCheck, "default", "mhc")
    }

    fn allowed(status: ConditionStatus, reason: &str) -> Conditions {
        Conditions {
            current: vec![Condition::new("RemediationAllowed", status, reason, "")],
            legacy: Vec::new(),
        }
    }

    fn whole(conditions: Conditions, absent: &[&'static str]) -> Decision {
        let absent = absent.iter().map(|t| (List::Current, *t)).collect();
        Decision::whole(ControllerId::Health, mhc(), conditions, absent)
    }

    #[test]
    fn a_whole_decision_replaces_what_its_controller_decided_before() {
        let mut d = DecidedConditions::default();
        let mut readable = allowed(ConditionStatus::True, "RemediationAllowed");
        readable.current.push(Condition::new(
            "ObjectsReadable",
            ConditionStatus::False,
            "ObjectUnreadable",
            "m",
        ));
        d.note(Mode::Alone, &[whole(readable, &[])]);
        // The next reconcile no longer decides ObjectsReadable (nor writes it): not judged.
        let now = allowed(ConditionStatus::True, "RemediationAllowed");
        d.note(Mode::Alone, &[whole(now.clone(), &[])]);
        assert!(
            d.check(|_| Some(Some(&now)), Duration::from_secs(30))
                .is_empty()
        );
        // A reconcile that decides none (paused) withdraws them all.
        d.note(Mode::Alone, &[Decision::none(ControllerId::Health, mhc())]);
        assert!(d.decided.is_empty());
    }

    #[test]
    fn a_condition_decided_absent_that_shows_is_reported_with_its_list_and_the_quiet() {
        let mut d = DecidedConditions::default();
        d.note(
            Mode::Alone,
            &[whole(
                allowed(ConditionStatus::False, "TooManyUnhealthy"),
                &["ObjectsReadable"],
            )],
        );
        let mut shown = allowed(ConditionStatus::True, "RemediationAllowed");
        shown.current.push(Condition::new(
            "ObjectsReadable",
            ConditionStatus::False,
            "ObjectUnreadable",
            "m",
        ));
        let found = d.check(|_| Some(Some(&shown)), Duration::from_secs(42));
        let messages: Vec<&str> = found.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(
            messages,
            [
                "status did not converge: MachineHealthCheck default/mhc shows ObjectsReadable=False (ObjectUnreadable) in its v1beta2 conditions where the controllers last decided no ObjectsReadable condition (nothing pending for 42s)",
                "status did not converge: MachineHealthCheck default/mhc shows RemediationAllowed=True (RemediationAllowed) in its v1beta2 conditions where the controllers last decided RemediationAllowed=False (TooManyUnhealthy) (nothing pending for 42s)",
            ]
        );
        // Once each.
        assert!(
            d.check(|_| Some(Some(&shown)), Duration::from_secs(50))
                .is_empty()
        );
    }

    #[test]
    fn in_shadow_nothing_is_judged_and_in_takeover_only_what_takeover_sends() {
        let machine = ObjectKey::management(Kind::Machine, "default", "m1");
        let deleting = Conditions {
            current: vec![
                Condition::new("Deleting", ConditionStatus::True, "DrainingNode", ""),
                Condition::new(
                    engine::ownership::OWN_CONDITION,
                    ConditionStatus::True,
                    "DrainingNode",
                    "",
                ),
            ],
            legacy: Vec::new(),
        };
        let decisions = [
            Decision::part(ControllerId::Deletion, machine.clone(), deleting),
            whole(allowed(ConditionStatus::True, "RemediationAllowed"), &[]),
        ];
        let mut shadow = DecidedConditions::default();
        shadow.note(Mode::Shadow, &decisions);
        assert!(shadow.decided.is_empty());
        let mut takeover = DecidedConditions::default();
        takeover.note(Mode::Takeover, &decisions);
        let judged: Vec<(String, &str)> = takeover
            .decided
            .iter()
            .flat_map(|(k, d)| {
                d.values()
                    .flat_map(|types| types.keys())
                    .map(move |t| (k.to_string(), t.as_str()))
            })
            .collect();
        assert_eq!(
            judged,
            [
                ("Machine default/m1".to_string(), "LifecycleDeleting"),
                (
                    "MachineHealthCheck default/mhc".to_string(),
                    "RemediationAllowed"
                ),
            ]
        );
    }
}
