//! Timers as a closed table (after quinn's `TimerTable`): each controller names its timers in
//! one enum, and a [`TimerTable`] keeps them per (owner, kind) with an index by deadline.
//!
//! *Expected flow*: a reconcile `set`s the timers its owner waits for; on [`crate::Input::Tick`]
//! the engine calls `take_due`, reconciles each fired owner and reports the fired timers
//! ([`FiredTimer`]) so timelines can say which timer caused what.
//!
//! *Guarantees*: a later `set` of the same (owner, kind) keeps the earlier deadline; an owner
//! fires as a whole (see [`TimerTable::take_due`]); `next_deadline` is O(log n).

use crate::command::ControllerId;
use crate::model::ObjectKey;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A controller's closed set of timer kinds.
pub trait TimerKind: Copy + Ord + fmt::Debug {
    /// The name timelines print (`EvictionRetry`).
    fn name(self) -> &'static str;
    /// The controller the timer belongs to (whose registry slot reconciles its owner).
    fn controller(self) -> ControllerId;
}

/// One pending timer: when, and the object it is about when that is not its owner (the Pod
/// whose eviction is retried, the Machine whose Node is late).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Pending<K> {
    kind: K,
    at: Timestamp,
    about: Option<ObjectKey>,
}

/// Pending timers per (owner, kind), and each owner's earliest deadline in deadline order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerTable<K> {
    /// An owner's timers, one per kind, in kind order (a handful: a scan beats a map).
    by_owner: BTreeMap<ObjectKey, Vec<Pending<K>>>,
    queue: BTreeSet<(Timestamp, ObjectKey)>,
}

impl<K> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable {
            by_owner: BTreeMap::new(),
            queue: BTreeSet::new(),
        }
    }
}

/// A timer that fired, as a [`crate::Input::Tick`] reports it: `EvictionRetry Pod app/web-1`.
/// Ordered by what it prints, so a report lists them in a stable order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FiredTimer {
    pub kind: &'static str,
    /// The object the timer is about (its owner unless it names another).
    pub about: ObjectKey,
    pub controller: ControllerId,
    /// The key its controller reconciles.
    pub owner: ObjectKey,
}

impl fmt::Display for FiredTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.about)
    }
}

/// How many fired timers a cause names before it says "and N more".
pub const FIRED_SHOWN_MAX: usize = 5;

/// `timer EvictionRetry Pod app/web-1, NodeStartupTimeout Machine default/w3`: the cause text of
/// a tick that fired `fired` (sorted, deduplicated, at most [`FIRED_SHOWN_MAX`] named); plain
/// `timer` when nothing is known to have fired.
pub fn describe_fired(fired: &[FiredTimer]) -> String {
    let mut names: Vec<String> = fired.iter().map(FiredTimer::to_string).collect();
    names.sort();
    names.dedup();
    let mut text = String::from("timer");
    for (i, name) in names.iter().take(FIRED_SHOWN_MAX).enumerate() {
        text.push_str(if i == 0 { " " } else { ", " });
        text.push_str(name);
    }
    if names.len() > FIRED_SHOWN_MAX {
        text.push_str(&format!(" and {} more", names.len() - FIRED_SHOWN_MAX));
    }
    text
}

impl<K: TimerKind> TimerTable<K> {
    /// Wakes `owner` at `at` for `kind`, about `about` (`None`: the owner itself). A pending
    /// timer of the same kind that is due no later is kept as it is: the earliest wins, as a
    /// wake-up that comes early only costs a reconcile that finds nothing to do.
    pub fn set(&mut self, owner: &ObjectKey, kind: K, at: Timestamp, about: Option<&ObjectKey>) {
        let about = about.filter(|a| *a != owner);
        if !self.by_owner.contains_key(owner) {
            self.by_owner.insert(owner.clone(), Vec::new());
        }
        let Some(timers) = self.by_owner.get_mut(owner) else {
            return;
        };
        let earliest_before = earliest(timers);
        match timers.binary_search_by(|p| p.kind.cmp(&kind)) {
            Ok(i) if timers[i].at <= at => return,
            Ok(i) => {
                timers[i].at = at;
                timers[i].about = about.cloned();
            }
            Err(i) => timers.insert(
                i,
                Pending {
                    kind,
                    at,
                    about: about.cloned(),
                },
            ),
        }
        if earliest_before.is_some_and(|e| e <= at) {
            return;
        }
        if let Some(e) = earliest_before {
            self.queue.remove(&(e, owner.clone()));
        }
        self.queue.insert((at, owner.clone()));
    }

    /// Drops every timer of `owner`.
    pub fn cancel(&mut self, owner: &ObjectKey) {
        if let Some(timers) = self.by_owner.remove(owner)
            && let Some(e) = earliest(&timers)
        {
            self.queue.remove(&(e, owner.clone()));
        }
    }

    /// Removes the owners whose earliest timer is due at `now`, reporting each of their timers
    /// due by then. An owner fires as a whole: its later timers are dropped with it, because
    /// the reconcile that follows is level-triggered and sets again whatever it still waits
    /// for (keeping them would add wake-ups, and ticks, that one deadline per owner never had).
    pub fn take_due(&mut self, now: Timestamp, fired: &mut Vec<FiredTimer>) {
        while let Some((at, _)) = self.queue.first() {
            if *at > now {
                break;
            }
            let Some((_, owner)) = self.queue.pop_first() else {
                break;
            };
            for p in self.by_owner.remove(&owner).into_iter().flatten() {
                if p.at <= now {
                    fired.push(FiredTimer {
                        kind: p.kind.name(),
                        about: p.about.unwrap_or_else(|| owner.clone()),
                        controller: p.kind.controller(),
                        owner: owner.clone(),
                    });
                }
            }
        }
    }

    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// Pending timers of `owner`: (kind, deadline), in kind order.
    pub fn pending(&self, owner: &ObjectKey) -> impl Iterator<Item = (K, Timestamp)> + '_ {
        self.by_owner
            .get(owner)
            .into_iter()
            .flatten()
            .map(|p| (p.kind, p.at))
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

fn earliest<K>(timers: &[Pending<K>]) -> Option<Timestamp> {
    timers.iter().map(|p| p.at).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum T {
        A,
        B,
    }

    impl TimerKind for T {
        fn name(self) -> &'static str {
            match self {
                T::A => "A",
                T::B => "B",
            }
        }
        fn controller(self) -> ControllerId {
            ControllerId::Deletion
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::management(Kind::Machine, "default", name)
    }

    fn fired_names(fired: &[FiredTimer]) -> Vec<String> {
        fired.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_earliest_deadline_of_an_owner_and_kind_wins() {
        let mut t = TimerTable::default();
        t.set(&key("a"), T::A, Timestamp(50), None);
        t.set(&key("a"), T::A, Timestamp(80), None);
        t.set(&key("b"), T::A, Timestamp(60), None);
        t.set(&key("a"), T::A, Timestamp(10), None);
        assert_eq!(t.next_deadline(), Some(Timestamp(10)));
        assert_eq!(
            t.pending(&key("a")).collect::<Vec<_>>(),
            [(T::A, Timestamp(10))]
        );
        let mut fired = Vec::new();
        t.take_due(Timestamp(60), &mut fired);
        assert_eq!(
            fired_names(&fired),
            ["A Machine default/a", "A Machine default/b"]
        );
        assert_eq!(t.next_deadline(), None);
        assert!(t.is_empty());
    }

    #[test]
    fn an_owner_fires_with_every_kind_due_and_drops_the_later_ones() {
        let mut t = TimerTable::default();
        let pod = ObjectKey::management(Kind::Pod, "app", "web-1");
        t.set(&key("a"), T::B, Timestamp(30), Some(&pod));
        t.set(&key("a"), T::A, Timestamp(30), None);
        t.set(&key("a"), T::A, Timestamp(100), None);
        t.set(&key("c"), T::B, Timestamp(100), None);
        let mut fired = Vec::new();
        t.take_due(Timestamp(29), &mut fired);
        assert!(fired.is_empty());
        t.take_due(Timestamp(30), &mut fired);
        assert_eq!(
            fired_names(&fired),
            ["A Machine default/a", "B Pod app/web-1"]
        );
        assert_eq!(fired[1].owner, key("a"));
        assert_eq!(t.next_deadline(), Some(Timestamp(100)));
        t.cancel(&key("c"));
        assert_eq!(t.next_deadline(), None);
    }

    /// Against a model of what the table replaced (one deadline per owner, the earliest set
    /// since it last fired or was cancelled), over every short sequence of operations on two
    /// owners and two kinds: the same deadlines, the same owners fired.
    #[test]
    fn fires_exactly_like_one_deadline_per_owner() {
        #[derive(Clone, Copy, Debug)]
        enum Op {
            Set(usize, T, i64),
            Cancel(usize),
            Tick(i64),
        }
        let mut ops = Vec::new();
        for owner in 0..2 {
            for kind in [T::A, T::B] {
                for at in [10, 20, 30] {
                    ops.push(Op::Set(owner, kind, at));
                }
            }
            ops.push(Op::Cancel(owner));
        }
        for at in [10, 20, 30] {
            ops.push(Op::Tick(at));
        }
        let keys = [key("a"), key("b")];
        let n = ops.len();
        let mut checked = 0;
        for a in 0..n {
            for b in 0..n {
                for c in 0..n {
                    for d in 0..n {
                        let mut table = TimerTable::default();
                        let mut model: BTreeMap<usize, i64> = BTreeMap::new();
                        for op in [ops[a], ops[b], ops[c], ops[d], Op::Tick(30)] {
                            match op {
                                Op::Set(o, k, at) => {
                                    table.set(&keys[o], k, Timestamp(at), None);
                                    let e = model.entry(o).or_insert(at);
                                    *e = (*e).min(at);
                                }
                                Op::Cancel(o) => {
                                    table.cancel(&keys[o]);
                                    model.remove(&o);
                                }
                                Op::Tick(now) => {
                                    let mut fired = Vec::new();
                                    table.take_due(Timestamp(now), &mut fired);
                                    let mut owners: Vec<ObjectKey> =
                                        fired.into_iter().map(|f| f.owner).collect();
                                    owners.sort();
                                    owners.dedup();
                                    let due: Vec<ObjectKey> = model
                                        .iter()
                                        .filter(|(_, at)| **at <= now)
                                        .map(|(o, _)| keys[*o].clone())
                                        .collect();
                                    model.retain(|_, at| *at > now);
                                    assert_eq!(owners, due, "{:?}", [a, b, c, d]);
                                }
                            }
                            assert_eq!(
                                table.next_deadline(),
                                model.values().min().map(|at| Timestamp(*at)),
                                "after {op:?} in {:?}",
                                [ops[a], ops[b], ops[c], ops[d]]
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, n.pow(4));
    }

    #[test]
    fn a_tick_names_its_timers_sorted_and_capped() {
        let fire = |kind: &'static str, name: &str| FiredTimer {
            kind,
            about: key(name),
            controller: ControllerId::Deletion,
            owner: key(name),
        };
        assert_eq!(describe_fired(&[]), "timer");
        assert_eq!(
            describe_fired(&[fire("B", "m1"), fire("A", "m2"), fire("A", "m2")]),
            "timer A Machine default/m2, B Machine default/m1"
        );
        let many: Vec<FiredTimer> = (0..8).map(|i| fire("A", &format!("m{i}"))).collect();
        assert_eq!(
            describe_fired(&many),
            "timer A Machine default/m0, A Machine default/m1, A Machine default/m2, \
             A Machine default/m3, A Machine default/m4 and 3 more"
        );
    }
}
