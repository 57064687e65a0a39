//! Status converges: once nothing the controller sent is pending (no request in flight, no
//! refused condition write waiting to be tried again) for [`QUIET_FOR`], every condition it
//! sends in its mode shows what the controllers last decided. Alone, that is every condition
//! a controller reported deciding (the deletion's, [`engine::decision`]); in takeover only its
//! own `LifecycleDeleting` (the rest are CAPI's manager's); in shadow nothing (it sends
//! nothing). A decision is what a reconcile set, written or not: a step's condition decided
//! once and never written (a drain's success while another write was out) is what this
//! catches. An object decided absent is not modelled (the deletion never removes one).
//!
//! In process the rule is checked at the quiet moments the MHC differential uses; over HTTP
//! from the controller's journal (its decisions and when its commands were answered) against
//! the conditions the served world showed over time.

use crate::controller_record::ControllerRecord;
use engine::decision::Decision;
use engine::model::{Condition, Conditions, ObjectKey};
use engine::runtime::Mode;
use engine::time::{Duration, Timestamp};
use engine::{Action, Input};
use std::collections::{BTreeMap, BTreeSet};

/// How long nothing may be pending before the API must show the decisions.
pub const QUIET_FOR: Duration = crate::differential::QUIET_FOR;

/// Which list of an object's conditions: v1beta2 (`current`) or v1beta1 (`legacy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum List {
    Current,
    Legacy,
}

impl List {
    fn of(self, conditions: &Conditions) -> &[Condition] {
        match self {
            List::Current => &conditions.current,
            List::Legacy => &conditions.legacy,
        }
    }
}

/// Per condition (its list and type): the condition decided.
type Decided = BTreeMap<(List, String), Condition>;

/// What the controllers last decided, per object and condition, in the controller's mode.
#[derive(Clone, Debug, Default)]
pub struct Convergence {
    decided: BTreeMap<ObjectKey, Decided>,
    /// Each (object, condition type) is reported once.
    reported: BTreeSet<(ObjectKey, String)>,
}

/// Whether a controller in `mode` sends this condition.
fn sent_in(mode: Mode, list: List, type_: &str) -> bool {
    match mode {
        Mode::Alone => true,
        Mode::Takeover => list == List::Current && type_ == engine::ownership::OWN_CONDITION,
        Mode::Shadow => false,
    }
}

impl Convergence {
    /// Folds in one input's decisions.
    pub fn note(&mut self, mode: Mode, decisions: &[Decision]) {
        for d in decisions {
            let lists = [
                (List::Current, &d.conditions.current),
                (List::Legacy, &d.conditions.legacy),
            ];
            for (list, conditions) in lists {
                for c in conditions.iter().filter(|c| sent_in(mode, list, &c.type_)) {
                    let entry = self.decided.entry(d.target.clone()).or_default();
                    entry.insert((list, c.type_.clone()), c.clone());
                }
            }
        }
    }

    /// Compares the decisions with what the API shows: `served(key)` is `None` for an object
    /// gone (its decisions are dropped), `Some(None)` for one that does not read. Returns a
    /// message per condition that differs, reported once each.
    pub fn check(
        &mut self,
        served: impl Fn(&ObjectKey) -> Option<Option<Conditions>>,
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
            for ((list, type_), want) in wanted {
                let seen = engine::model::find_condition(list.of(&have), type_);
                if seen == Some(want) || self.reported.contains(&(key.clone(), type_.clone())) {
                    continue;
                }
                self.reported.insert((key.clone(), type_.clone()));
                let shows = match seen {
                    None => format!("no {type_} condition"),
                    Some(s) => describe(s, want),
                };
                let decided = describe(want, seen.unwrap_or(want));
                found.push((
                    key.to_string(),
                    format!(
                        "status did not converge: {key} shows {shows} where the controllers last decided {decided} (nothing pending for {QUIET_FOR})"
                    ),
                ));
            }
        }
        for key in gone {
            self.decided.remove(&key);
        }
        found
    }
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

/// The conditions of a served object's JSON (`None`: it does not read).
pub fn conditions_of_json(value: &serde_json::Value) -> Option<Conditions> {
    let object = engine::convert::object_from_json(value).ok()??;
    engine::decision::conditions_of(&object).cloned()
}

/// The conditions each management object showed over a run (over HTTP), sampled as the world
/// stepped: `(when, its conditions; None once gone)`.
#[derive(Clone, Debug, Default)]
pub struct Served {
    history: BTreeMap<ObjectKey, Vec<(Timestamp, Option<Conditions>)>>,
    versions: BTreeMap<ObjectKey, String>,
}

impl Served {
    /// Notes the conditions of every object of `store` (the management cluster's) that changed.
    pub fn sample(&mut self, now: Timestamp, store: &crate::api::ClusterStore) {
        let mut present = BTreeSet::new();
        for kind in ["Machine", "MachineHealthCheck", "MachinePool", "Cluster"] {
            for (key, value) in store.list("cluster.x-k8s.io", kind) {
                let key = crate::api::engine_key(&engine::model::Scope::Management, key);
                let version =
                    crate::api::json::str_at(value, "metadata.resourceVersion").unwrap_or_default();
                present.insert(key.clone());
                if self.versions.get(&key).map(String::as_str) == Some(version) {
                    continue;
                }
                self.versions.insert(key.clone(), version.to_string());
                let conditions = conditions_of_json(value).unwrap_or_default();
                self.history
                    .entry(key)
                    .or_default()
                    .push((now, Some(conditions)));
            }
        }
        let gone: Vec<ObjectKey> = self
            .versions
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            self.versions.remove(&key);
            self.history.entry(key).or_default().push((now, None));
        }
    }

    /// What `key` showed at `at`: `None` when it did not exist.
    fn at(&self, key: &ObjectKey, at: Timestamp) -> Option<Option<Conditions>> {
        let seen = self.history.get(key)?;
        let (_, conditions) = seen.iter().rev().find(|(t, _)| *t <= at)?;
        conditions.clone().map(Some)
    }
}

/// Requests in flight and condition writes refused and not tried again, from the journal.
#[derive(Default)]
struct Pending {
    in_flight: BTreeSet<u64>,
    refused: BTreeSet<ObjectKey>,
    conditions_of: BTreeMap<u64, ObjectKey>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.in_flight.is_empty() && self.refused.is_empty()
    }

    fn record(&mut self, record: &ControllerRecord) {
        self.input(&record.input);
        for c in &record.commands {
            if record.withheld.contains_key(&c.id) {
                continue;
            }
            self.in_flight.insert(c.id);
            if let Action::SetCondition { target, .. } | Action::SetOwnCondition { target, .. } =
                &c.action
            {
                self.refused.remove(&target.key);
                self.conditions_of.insert(c.id, target.key.clone());
            }
        }
    }

    fn input(&mut self, input: &Input) {
        match input {
            Input::Restarted => *self = Pending::default(),
            Input::ApiResult { command, outcome } => {
                self.in_flight.remove(command);
                if let Some(target) = self.conditions_of.remove(command)
                    && !outcome.is_success()
                    && !matches!(outcome, engine::ApiOutcome::NotFound)
                {
                    self.refused.insert(target);
                }
            }
            Input::Batch { inputs } => inputs.iter().for_each(|i| self.input(i)),
            _ => {}
        }
    }
}

/// The rule over a controller's journal (over HTTP): checked when nothing has been pending for
/// [`QUIET_FOR`], and at each decision after that while nothing is. Returns `(when, object,
/// message)`.
pub fn judge_journal(
    mode: Mode,
    records: &[ControllerRecord],
    served: &Served,
    end: Timestamp,
) -> Vec<(Timestamp, String, String)> {
    if mode == Mode::Shadow {
        return Vec::new();
    }
    let mut convergence = Convergence::default();
    let mut pending = Pending::default();
    let mut quiet_since: Option<Timestamp> = None;
    let mut checked_quiet = false;
    let mut found = Vec::new();
    let mut check = |convergence: &mut Convergence, at: Timestamp| {
        for (object, message) in convergence.check(|k| served.at(k, at)) {
            found.push((at, object, message));
        }
    };
    for record in records {
        if let Some(since) = quiet_since
            && !checked_quiet
            && record.at >= since + QUIET_FOR
        {
            check(&mut convergence, since + QUIET_FOR);
            checked_quiet = true;
        }
        convergence.note(mode, &record.decisions);
        pending.record(record);
        match (pending.is_empty(), quiet_since) {
            (false, _) => quiet_since = None,
            (true, None) => {
                quiet_since = Some(record.at);
                checked_quiet = false;
            }
            (true, Some(_)) if checked_quiet && !record.decisions.is_empty() => {
                check(&mut convergence, record.at);
            }
            (true, Some(_)) => {}
        }
    }
    if let Some(since) = quiet_since
        && !checked_quiet
        && end >= since + QUIET_FOR
    {
        check(&mut convergence, since + QUIET_FOR);
    }
    found
}
