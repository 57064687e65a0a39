//! The rule over HTTP: from the controller's journal (its decisions, the commands it sent and
//! their answers) against what the served world showed over time ([`Served`]).

use super::events::{EventKey, Shown};
use super::{Convergence, QUIET_FOR, Shows};
use crate::controller_record::ControllerRecord;
use engine::model::{Conditions, ObjectKey, Scope};
use engine::runtime::Mode;
use engine::time::Timestamp;
use engine::{Action, Input};
use std::collections::{BTreeMap, BTreeSet};

/// What a served thing showed over a run: `(since when, what; None once gone)`, each change.
type History<K, V> = BTreeMap<K, Vec<(Timestamp, Option<V>)>>;

/// The management objects' conditions and every cluster's Events over a run (over HTTP),
/// sampled as the world stepped.
#[derive(Clone, Debug, Default)]
pub struct Served {
    conditions: History<ObjectKey, Conditions>,
    events: History<EventKey, Shown>,
    /// The resourceVersion last sampled of each object and Event.
    versions: BTreeMap<ObjectKey, String>,
    event_versions: BTreeMap<EventKey, String>,
}

/// Notes in `history` what changed since `versions` (`read` of a new version), and what is gone.
fn sample_into<'a, K: Ord + Clone, V>(
    history: &mut History<K, V>,
    versions: &mut BTreeMap<K, String>,
    now: Timestamp,
    present: impl Iterator<Item = (K, &'a serde_json::Value)>,
    in_sample: impl Fn(&K) -> bool,
    read: impl Fn(&serde_json::Value) -> V,
) {
    let mut seen = BTreeSet::new();
    for (key, value) in present {
        let version =
            crate::api::json::str_at(value, "metadata.resourceVersion").unwrap_or_default();
        seen.insert(key.clone());
        if versions.get(&key).map(String::as_str) == Some(version) {
            continue;
        }
        versions.insert(key.clone(), version.to_string());
        history
            .entry(key)
            .or_default()
            .push((now, Some(read(value))));
    }
    let gone: Vec<K> = versions
        .keys()
        .filter(|k| in_sample(k) && !seen.contains(*k))
        .cloned()
        .collect();
    for key in gone {
        versions.remove(&key);
        history.entry(key).or_default().push((now, None));
    }
}

impl Served {
    /// Notes the conditions of every object of `store` (the management cluster's) that changed.
    pub fn sample(&mut self, now: Timestamp, store: &crate::api::ClusterStore) {
        let present = ["Machine", "MachineHealthCheck", "MachinePool", "Cluster"]
            .into_iter()
            .flat_map(|kind| store.list("cluster.x-k8s.io", kind))
            .map(|(key, value)| {
                let key = crate::api::engine_key(&Scope::Management, key);
                (key, value)
            });
        sample_into(
            &mut self.conditions,
            &mut self.versions,
            now,
            present,
            |_| true,
            |value| super::conditions_of_json(value).unwrap_or_default(),
        );
    }

    /// Notes the Events of cluster `scope` (its `store`) that changed.
    pub fn sample_events(
        &mut self,
        now: Timestamp,
        scope: &Scope,
        store: &crate::api::ClusterStore,
    ) {
        let present = store.list("", "Event").map(|(key, value)| {
            let key = EventKey {
                scope: scope.clone(),
                namespace: key.namespace.to_string(),
                name: key.name.to_string(),
            };
            (key, value)
        });
        sample_into(
            &mut self.events,
            &mut self.event_versions,
            now,
            present,
            |k| k.scope == *scope,
            Shown::of_json,
        );
    }

    /// What was served at `at`.
    fn at(&self, at: Timestamp) -> ServedAt<'_> {
        ServedAt { served: self, at }
    }
}

/// The last of `history` at or before `at`: `None` when there was none then.
fn last_at<V>(history: Option<&Vec<(Timestamp, Option<V>)>>, at: Timestamp) -> Option<&V> {
    let (_, value) = history?.iter().rev().find(|(t, _)| *t <= at)?;
    value.as_ref()
}

/// What was served at one moment.
struct ServedAt<'a> {
    served: &'a Served,
    at: Timestamp,
}

impl Shows for ServedAt<'_> {
    fn conditions(&self, key: &ObjectKey) -> Option<Option<&Conditions>> {
        last_at(self.served.conditions.get(key), self.at).map(Some)
    }

    fn event(&self, key: &EventKey) -> Option<Shown> {
        last_at(self.served.events.get(key), self.at).cloned()
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
        for c in sent(record) {
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

/// The commands of a record that were sent (not withheld).
fn sent(record: &ControllerRecord) -> impl Iterator<Item = &engine::Command> {
    record
        .commands
        .iter()
        .filter(|c| !record.withheld.contains_key(&c.id))
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
    let mut check = |convergence: &mut Convergence, at: Timestamp, since: Timestamp| {
        for (object, message) in convergence.check(&served.at(at), at.since(since)) {
            found.push((at, object, message));
        }
    };
    for record in records {
        if let Some(since) = quiet_since
            && !checked_quiet
            && record.at >= since + QUIET_FOR
        {
            check(&mut convergence, since + QUIET_FOR, since);
            checked_quiet = true;
        }
        convergence.input(&record.input);
        convergence.note(mode, &record.decisions);
        sent(record).for_each(|c| convergence.sent(c));
        pending.record(record);
        match (pending.is_empty(), quiet_since) {
            (false, _) => quiet_since = None,
            (true, None) => {
                quiet_since = Some(record.at);
                checked_quiet = false;
            }
            (true, Some(since)) if checked_quiet && !record.decisions.is_empty() => {
                check(&mut convergence, record.at, since);
            }
            (true, Some(_)) => {}
        }
    }
    if let Some(since) = quiet_since
        && !checked_quiet
        && end >= since + QUIET_FOR
    {
        check(&mut convergence, since + QUIET_FOR, since);
    }
    found
}
