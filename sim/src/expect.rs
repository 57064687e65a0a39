//! Evaluating a scenario's `expect` entries against the run.

use crate::api::json::Pointer as _;
use crate::api::{FakeApi, json};
use crate::clock::Clock;
use crate::scenario::{Check, ExpectKind, ObjRef, Scenario};
use crate::timeline::{ActionRecord, Timeline};
use engine::model::{ObjectKey, Scope};
use engine::time::{Duration, Timestamp};
use serde_json::Value;
use std::collections::BTreeSet;

/// A failed expectation: the file line it was written on and what was seen instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub line: usize,
    pub message: String,
}

#[derive(Clone, Debug, Default)]
pub struct Tracker {
    /// Indexes of `During` expectations already satisfied.
    satisfied: BTreeSet<usize>,
    /// For each `During`, the last thing seen (for the failure message).
    last_seen: Vec<String>,
    pub failures: Vec<Failure>,
    /// `At` results by expectation index.
    evaluated: BTreeSet<usize>,
    /// How late the controller may be (zero in process; over HTTP, scheduling and network
    /// latency scaled by the clock's speed): `{at: T}` holds if it holds at some moment in
    /// `[T, T + tolerance]`, `during` windows stay open that much longer, and an action seen at
    /// `t` counts as due anywhere in `[t - tolerance, t]`.
    pub tolerance: Duration,
}

impl Tracker {
    pub fn new(scenario: &Scenario) -> Self {
        Tracker {
            last_seen: vec![String::new(); scenario.expect.len()],
            ..Default::default()
        }
    }

    /// Called after every applied change: `During` windows look at every state.
    pub fn observe(&mut self, sim: &View<'_>) {
        let offset = sim.offset_of(sim.clock.now);
        if !self.tolerance.is_zero() {
            self.observe_late_points(sim, offset);
        }
        for (i, e) in sim.scenario.expect.iter().enumerate() {
            let ExpectKind::During {
                from,
                to,
                object,
                check,
            } = &e.kind
            else {
                continue;
            };
            if self.satisfied.contains(&i) || offset < *from || offset > *to + self.tolerance {
                continue;
            }
            match sim.check(object, check) {
                Ok(()) => {
                    self.satisfied.insert(i);
                }
                Err(seen) => self.last_seen[i] = seen,
            }
        }
    }

    /// With a tolerance, a point expectation passes as soon as it holds inside its window.
    fn observe_late_points(&mut self, sim: &View<'_>, offset: Duration) {
        for (i, e) in sim.scenario.expect.iter().enumerate() {
            let Some(at) = point_of(&e.kind) else {
                continue;
            };
            if offset < at || offset > at + self.tolerance || self.evaluated.contains(&i) {
                continue;
            }
            match check_point(sim, &e.kind) {
                Ok(()) => {
                    self.evaluated.insert(i);
                }
                Err(seen) => self.last_seen[i] = seen,
            }
        }
    }

    /// Called when the clock is about to leave an instant: `{at: T}` entries due now (with a
    /// tolerance: those whose window `[T, T + tolerance]` closes now).
    pub fn checkpoint(&mut self, sim: &View<'_>) {
        self.observe(sim);
        let offset = sim.offset_of(sim.clock.now);
        for (i, e) in sim.scenario.expect.iter().enumerate() {
            let Some(at) = point_of(&e.kind) else {
                continue;
            };
            let due = if self.tolerance.is_zero() {
                at == offset
            } else {
                offset >= at + self.tolerance
            };
            if !due || !self.evaluated.insert(i) {
                continue;
            }
            if let Err(seen) = check_point(sim, &e.kind) {
                let when = if self.tolerance.is_zero() {
                    crate::timeline::clock(at)
                } else {
                    format!(
                        "{} (+{} tolerance)",
                        crate::timeline::clock(at),
                        crate::timeline::clock(self.tolerance)
                    )
                };
                self.fail(
                    e.line,
                    format!("at {when}: {}; saw: {seen}", summary(&e.kind)),
                );
            }
        }
    }

    pub fn finish(&mut self, sim: &View<'_>) {
        let end = sim.offset_of(sim.clock.end);
        for (i, e) in sim.scenario.expect.iter().enumerate() {
            match &e.kind {
                ExpectKind::At { at, .. }
                | ExpectKind::Gone { at, .. }
                | ExpectKind::Exists { at, .. } => {
                    if !self.evaluated.contains(&i) && !self.tolerance.is_zero() && *at <= end {
                        // Its tolerance window reaches past the end: the end is its last chance.
                        self.evaluated.insert(i);
                        if let Err(seen) = check_point(sim, &e.kind) {
                            self.fail(
                                e.line,
                                format!(
                                    "at {} (late by up to the end): {}; saw: {seen}",
                                    crate::timeline::clock(*at),
                                    summary(&e.kind)
                                ),
                            );
                        }
                    } else if !self.evaluated.contains(&i) {
                        self.fail(
                            e.line,
                            format!(
                                "{}: the run ended at {} before {}",
                                summary(&e.kind),
                                crate::timeline::clock(end),
                                crate::timeline::clock(*at)
                            ),
                        );
                    }
                }
                ExpectKind::During { from, to, .. } => {
                    if !self.satisfied.contains(&i) {
                        let seen = if self.last_seen[i].is_empty() {
                            "no state in the window".to_string()
                        } else {
                            self.last_seen[i].clone()
                        };
                        self.fail(
                            e.line,
                            format!(
                                "between {} and {}: {}; last saw: {seen}",
                                crate::timeline::clock(*from),
                                crate::timeline::clock(*to),
                                summary(&e.kind)
                            ),
                        );
                    }
                }
                ExpectKind::Action {
                    name,
                    target,
                    count,
                    within,
                } => {
                    // An action seen at t was due somewhere in [t - tolerance, t]: it is
                    // surely in the window, or possibly. Any count in between may be the truth.
                    let tolerance = self.tolerance;
                    let (mut surely, mut possibly) = (0u64, 0u64);
                    for a in sim.matching_actions(name, target.as_ref()) {
                        let t = sim.offset_of(a.at);
                        let (sure, maybe) = match within {
                            None => (true, true),
                            Some((lo, hi)) => (
                                t >= *lo + tolerance && t <= *hi,
                                t >= *lo && t <= *hi + tolerance,
                            ),
                        };
                        surely += u64::from(sure);
                        possibly += u64::from(maybe);
                    }
                    if !(surely..=possibly).any(|n| count.holds(n)) {
                        let saw = if surely == possibly {
                            surely.to_string()
                        } else {
                            format!("{surely} to {possibly} (within the tolerance)")
                        };
                        self.fail(
                            e.line,
                            format!("{}: {count:?} expected, saw {saw}", summary(&e.kind)),
                        );
                    }
                }
                ExpectKind::ActionNotBefore {
                    name,
                    target,
                    not_before,
                } => {
                    if let Some(a) = sim
                        .matching_actions(name, target.as_ref())
                        .find(|a| sim.offset_of(a.at) < *not_before)
                    {
                        self.fail(
                            e.line,
                            format!(
                                "{}: saw one at {} (command #{}) on {}",
                                summary(&e.kind),
                                crate::timeline::clock(sim.offset_of(a.at)),
                                a.command,
                                a.target
                            ),
                        );
                    }
                }
                ExpectKind::ActionNever { name, target } => {
                    if let Some(a) = sim.matching_actions(name, target.as_ref()).next() {
                        self.fail(
                            e.line,
                            format!(
                                "{}: saw one at {} (command #{}) on {}",
                                summary(&e.kind),
                                crate::timeline::clock(sim.offset_of(a.at)),
                                a.command,
                                a.target
                            ),
                        );
                    }
                }
                ExpectKind::Order(items) => {
                    let mut firsts = Vec::new();
                    for (name, target) in items {
                        match sim.matching_actions(name, target.as_ref()).next() {
                            Some(a) => firsts.push((name.clone(), a.command)),
                            None => {
                                self.fail(e.line, format!("order: {name} never happened"));
                                firsts.clear();
                                break;
                            }
                        }
                    }
                    if let Some(w) = firsts.windows(2).find(|w| w[0].1 > w[1].1) {
                        self.fail(
                            e.line,
                            format!(
                                "order: {} (command #{}) came after {} (command #{})",
                                w[0].0, w[0].1, w[1].0, w[1].1
                            ),
                        );
                    }
                }
                ExpectKind::Event {
                    reason,
                    object,
                    count,
                } => {
                    let key = object.as_ref().map(|o| sim.ref_key(o));
                    let n = sim
                        .timeline
                        .events
                        .iter()
                        .filter(|ev| {
                            ev.reason == *reason
                                && key.as_ref().is_none_or(|k| same_object(k, &ev.object))
                        })
                        .count() as u64;
                    if !count.holds(n) {
                        self.fail(
                            e.line,
                            format!("event {reason}: {count:?} expected, saw {n}"),
                        );
                    }
                }
            }
        }
    }

    fn fail(&mut self, line: usize, message: String) {
        self.failures.push(Failure { line, message });
    }
}

/// The offset of a point expectation (`{at: T}`, `gone`, `exists`).
fn point_of(kind: &ExpectKind) -> Option<Duration> {
    match kind {
        ExpectKind::At { at, .. } | ExpectKind::Gone { at, .. } | ExpectKind::Exists { at, .. } => {
            Some(*at)
        }
        _ => None,
    }
}

/// Whether a point expectation holds now; what was seen when it does not.
fn check_point(sim: &View<'_>, kind: &ExpectKind) -> Result<(), String> {
    match kind {
        ExpectKind::At { object, check, .. } => sim.check(object, check),
        ExpectKind::Gone { object, .. } => match sim.lookup(object) {
            None => Ok(()),
            Some(obj) => Err(describe_presence(obj)),
        },
        ExpectKind::Exists { object, .. } => match sim.lookup(object) {
            Some(_) => Ok(()),
            None => Err("it does not exist".into()),
        },
        _ => Ok(()),
    }
}

fn describe_presence(obj: &Value) -> String {
    if json::is_deleting(obj) {
        format!(
            "it still exists (deleting, finalizers {:?})",
            json::finalizers(obj)
        )
    } else {
        "it still exists".to_string()
    }
}

fn summary(kind: &ExpectKind) -> String {
    let r = |o: &ObjRef| {
        let c = o
            .cluster
            .as_deref()
            .map(|c| format!("@{c}"))
            .unwrap_or_default();
        format!("{} {}/{}{c}", o.kind, o.namespace, o.name)
    };
    match kind {
        ExpectKind::At { object, check, .. } | ExpectKind::During { object, check, .. } => {
            format!("{} {}", r(object), describe_check(check))
        }
        ExpectKind::Gone { object, .. } => format!("{} gone", r(object)),
        ExpectKind::Exists { object, .. } => format!("{} exists", r(object)),
        ExpectKind::Action { name, target, .. }
        | ExpectKind::ActionNotBefore { name, target, .. }
        | ExpectKind::ActionNever { name, target } => match target {
            Some(t) => format!("{name} on {}", r(t)),
            None => name.clone(),
        },
        ExpectKind::Order(_) => "order".into(),
        ExpectKind::Event { reason, .. } => format!("event {reason}"),
    }
}

fn describe_check(check: &Check) -> String {
    match check {
        Check::Condition {
            type_,
            status,
            reason,
            message,
        } => {
            let mut s = format!("has {type_}={status}");
            if let Some(r) = reason {
                s.push_str(&format!(" reason {r}"));
            }
            if let Some(m) = message {
                s.push_str(&format!(" message ~ {m:?}"));
            }
            s
        }
        Check::ConditionAbsent { type_ } => format!("has no {type_} condition"),
        Check::Fields(f) => format!(
            "fields {}",
            f.iter()
                .map(|(p, v)| format!("{p}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Check::Present(p) => format!("has {}", p.join(", ")),
        Check::Absent(p) => format!("lacks {}", p.join(", ")),
    }
}

/// Offsets the scenario's expectations need the clock to stop at.
pub fn checkpoints(scenario: &Scenario) -> Vec<Duration> {
    let mut v = Vec::new();
    for e in &scenario.expect {
        match &e.kind {
            ExpectKind::At { at, .. }
            | ExpectKind::Gone { at, .. }
            | ExpectKind::Exists { at, .. } => v.push(*at),
            ExpectKind::During { from, .. } => v.push(*from),
            _ => {}
        }
    }
    v.sort();
    v.dedup();
    v
}

/// What expectations read: the scenario, the time, the fake API and the timeline.
pub struct View<'a> {
    pub scenario: &'a Scenario,
    pub clock: &'a Clock,
    pub api: &'a FakeApi,
    pub timeline: &'a Timeline,
}

impl View<'_> {
    fn offset_of(&self, t: Timestamp) -> Duration {
        self.clock.offset_of(t)
    }

    fn ref_scope(&self, r: &ObjRef) -> Scope {
        r.cluster
            .as_deref()
            .map_or(Scope::Management, |c| self.api.workload_scope(c))
    }

    pub(crate) fn lookup(&self, r: &ObjRef) -> Option<&Value> {
        let scope = self.ref_scope(r);
        self.api
            .find(&scope, &r.kind, &r.namespace, &r.name)
            .map(|(_, v)| v)
    }

    pub(crate) fn ref_key(&self, r: &ObjRef) -> ObjectKey {
        let scope = self.ref_scope(r);
        let group = r
            .api_version
            .as_deref()
            .map(json::group_of)
            .map(str::to_string)
            .or_else(|| {
                self.api
                    .find(&scope, &r.kind, &r.namespace, &r.name)
                    .map(|(k, _)| k.group.to_string())
            })
            .unwrap_or_else(|| crate::api::default_group(&r.kind).to_string());
        ObjectKey::new(
            scope,
            engine::model::Kind::from_group_kind(&group, &r.kind),
            &r.namespace,
            &r.name,
        )
    }

    /// Checks one object; `Err` says what was seen instead.
    pub(crate) fn check(&self, r: &ObjRef, check: &Check) -> Result<(), String> {
        let Some(obj) = self.lookup(r) else {
            return Err("the object does not exist".into());
        };
        match check {
            Check::Condition {
                type_,
                status,
                reason,
                message,
            } => {
                let Some(c) = find_condition(obj, type_) else {
                    return Err(format!("no {type_} condition"));
                };
                let field = |k: &str| {
                    c.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let seen = format!(
                    "{type_}={} reason={:?} message={:?}",
                    field("status"),
                    field("reason"),
                    field("message")
                );
                let ok = field("status") == *status
                    && reason.as_ref().is_none_or(|r| field("reason") == *r)
                    && message
                        .as_ref()
                        .is_none_or(|m| field("message").contains(m.as_str()));
                if ok { Ok(()) } else { Err(seen) }
            }
            Check::ConditionAbsent { type_ } => match find_condition(obj, type_) {
                None => Ok(()),
                Some(c) => Err(format!("{type_} is present: {c}")),
            },
            Check::Fields(fields) => {
                for (path, want) in fields {
                    let got = json::get_path(obj, path).cloned().unwrap_or(Value::Null);
                    if !values_equal(&got, want) {
                        return Err(format!("{path} is {got}, not {want}"));
                    }
                }
                Ok(())
            }
            Check::Present(paths) => {
                for path in paths {
                    if json::get_path(obj, path).is_none_or(Value::is_null) {
                        return Err(format!("{path} is absent"));
                    }
                }
                Ok(())
            }
            Check::Absent(paths) => {
                for path in paths {
                    if let Some(v) = json::get_path(obj, path).filter(|v| !v.is_null()) {
                        return Err(format!("{path} is {v}"));
                    }
                }
                Ok(())
            }
        }
    }

    pub(crate) fn matching_actions<'a>(
        &'a self,
        name: &'a str,
        target: Option<&ObjRef>,
    ) -> impl Iterator<Item = &'a ActionRecord> + 'a {
        let key = target.map(|t| self.ref_key(t));
        self.timeline.actions.iter().filter(move |a| {
            a.name == name && key.as_ref().is_none_or(|k| same_object(k, &a.target))
        })
    }
}

/// Keys compare by scope, kind name, namespace and name (a reference may omit the group).
fn same_object(a: &ObjectKey, b: &ObjectKey) -> bool {
    a.scope == b.scope
        && a.kind.name() == b.kind.name()
        && a.namespace == b.namespace
        && a.name == b.name
}

/// The condition in `status.conditions`, else in the other API version's list.
fn find_condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    [
        "/status/conditions",
        "/status/v1beta2/conditions",
        "/status/deprecated/v1beta1/conditions",
    ]
    .iter()
    .filter_map(|p| obj.at_pointer(p).and_then(Value::as_array))
    .flatten()
    .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// YAML `3` equals JSON `3`; `"3"` does not equal `3`.
fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}
