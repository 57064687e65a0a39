//! The Events part of the rule. An (object, reason) series of emissions is one Event (named
//! for the series' first command): its first write creates it, a repeat updates its `count`
//! and `message`, and a repeat within a minute of the series' last write is only counted into
//! the next ([`engine::controller::EVENT_WRITE_INTERVAL`]). An Event has converged when it
//! shows the last emission of its series the API accepted, or a later one the API did not
//! refuse (its answer lost to a timeout or a restart): the same regarding object, type,
//! reason, message and count. An emission the API refused is not required: nothing retries
//! an Event, as client-go's recorder does not retry one a server rejects.

use engine::convert::ApiRequest;
use engine::model::Scope;
use engine::time::Duration;
use engine::{Action, ApiOutcome, Command, Input};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Where an Event is kept: its cluster, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventKey {
    pub scope: Scope,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for EventKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = crate::api::ObjKey::new("", "Event", &self.namespace, &self.name);
        f.write_str(&crate::api::describe(&self.scope, &key))
    }
}

/// What the rule reads of an Event: what the controller writes, its times aside (the adapter
/// stamps them with its own clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// `Kind namespace/name` of `involvedObject`.
    pub regarding: String,
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: u64,
}

impl Shown {
    /// A core/v1 Event as the rule reads it.
    pub fn of_json(event: &Value) -> Shown {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let involved = &event["involvedObject"];
        let namespace = involved["namespace"].as_str().unwrap_or_default();
        Shown {
            regarding: format!(
                "{} {namespace}/{}",
                text(&involved["kind"]),
                text(&involved["name"])
            ),
            type_: text(&event["type"]),
            reason: text(&event["reason"]),
            message: text(&event["message"]),
            count: event["count"].as_u64().unwrap_or(0),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} {} about {}, count {}: {:?}",
            self.type_, self.reason, self.regarding, self.count, self.message
        )
    }
}

/// The Event a command writes, and what it writes there, as the adapter sends it.
pub fn of_command(command: &Command) -> Option<(EventKey, Shown)> {
    if !matches!(command.action, Action::RecordEvent { .. }) {
        return None;
    }
    let ApiRequest::Create { target, body } = engine::convert::request_for(command) else {
        return None;
    };
    let key = EventKey {
        scope: target.key.scope.clone(),
        namespace: target.key.namespace.to_string(),
        name: target.key.name.to_string(),
    };
    Some((key, Shown::of_json(&body)))
}

/// What became of an emission's write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Awaited,
    Accepted,
    Refused,
    /// No answer says whether it was written (a timeout, a restart).
    Lost,
}

impl Answer {
    fn of(outcome: &ApiOutcome) -> Answer {
        match outcome {
            ApiOutcome::Ok { .. } => Answer::Accepted,
            // Sent, but whether it was written is not known: the connection dropped, or the
            // server's own request timeout answered.
            ApiOutcome::Unreachable { .. } | ApiOutcome::Error { code: 504, .. } => Answer::Lost,
            ApiOutcome::NotSent { .. }
            | ApiOutcome::NotFound
            | ApiOutcome::Conflict { .. }
            | ApiOutcome::Refused { .. }
            | ApiOutcome::Error { .. } => Answer::Refused,
        }
    }
}

#[derive(Clone, Debug)]
struct Emission {
    command: u64,
    shown: Shown,
    answer: Answer,
}

/// The emissions the controller sent, per Event, and what the API answered.
#[derive(Clone, Debug, Default)]
pub struct EventLedger {
    /// Per Event, in the order sent: its emissions from the last the API accepted on.
    events: BTreeMap<EventKey, Vec<Emission>>,
    /// Emissions whose answer has not come: command → its Event.
    awaiting: BTreeMap<u64, EventKey>,
    /// Each Event is reported once.
    reported: BTreeSet<EventKey>,
}

impl EventLedger {
    /// A command the controller sent (not withheld).
    pub fn sent(&mut self, command: &Command) {
        let Some((key, shown)) = of_command(command) else {
            return;
        };
        self.awaiting.insert(command.id, key.clone());
        self.events.entry(key).or_default().push(Emission {
            command: command.id,
            shown,
            answer: Answer::Awaited,
        });
    }

    /// An input of the controller: the answers it carries, or its restart.
    pub fn input(&mut self, input: &Input) {
        match input {
            Input::ApiResult { command, outcome } => self.answered(*command, Answer::of(outcome)),
            Input::Batch { inputs } => inputs.iter().for_each(|i| self.input(i)),
            Input::Restarted => {
                for (command, _) in std::mem::take(&mut self.awaiting) {
                    self.answered_as(command, Answer::Lost);
                }
            }
            _ => {}
        }
    }

    fn answered(&mut self, command: u64, answer: Answer) {
        if self.awaiting.contains_key(&command) {
            self.answered_as(command, answer);
        }
    }

    fn answered_as(&mut self, command: u64, answer: Answer) {
        let Some(key) = self.awaiting.remove(&command) else {
            return;
        };
        let Some(emissions) = self.events.get_mut(&key) else {
            return;
        };
        let Some(i) = emissions
            .iter()
            .rposition(|e| e.command == command && e.answer == Answer::Awaited)
        else {
            return;
        };
        emissions[i].answer = answer;
        if answer == Answer::Accepted {
            emissions.drain(..i);
        }
    }

    /// Compares each Event the API accepted an emission of with what the API shows
    /// (`served`); returns a message per Event that differs, reported once each.
    pub fn check(
        &mut self,
        served: impl Fn(&EventKey) -> Option<Shown>,
        quiet: Duration,
    ) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for (key, emissions) in &self.events {
            let Some(accepted) = emissions.iter().find(|e| e.answer == Answer::Accepted) else {
                continue;
            };
            if self.reported.contains(key) {
                continue;
            }
            let shown = served(key);
            let converged = shown.as_ref().is_some_and(|s| {
                emissions
                    .iter()
                    .any(|e| e.answer != Answer::Refused && e.shown == *s)
            });
            if converged {
                continue;
            }
            let shows = shown.map_or_else(|| "nothing".to_string(), |s| s.describe());
            let message = format!(
                "Event did not converge: {key} shows {shows} where the API accepted {} (nothing pending for {quiet})",
                accepted.shown.describe()
            );
            found.push((key.clone(), accepted.shown.regarding.clone(), message));
        }
        found
            .into_iter()
            .map(|(key, object, message)| {
                self.reported.insert(key);
                (object, message)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::{Kind, ObjectKey};
    use engine::{ControllerId, EventSeries, EventType, Target};

    fn drained(id: u64, count: u32, message: &str) -> Command {
        Command {
            id,
            cause: 0,
            controller: ControllerId::Deletion,
            owner: ObjectKey::management(Kind::Machine, "default", "m1"),
            action: Action::RecordEvent {
                regarding: Target {
                    key: ObjectKey::management(Kind::Machine, "default", "m1"),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                type_: EventType::Warning,
                reason: "FailedDrainNode".into(),
                message: message.into(),
            },
            reason: String::new(),
            series: (count > 1).then_some(EventSeries { first: 1, count }),
        }
    }

    fn answer(command: u64, outcome: ApiOutcome) -> Input {
        Input::ApiResult { command, outcome }
    }

    fn ok() -> ApiOutcome {
        ApiOutcome::Ok { object: None }
    }

    fn refused() -> ApiOutcome {
        ApiOutcome::Error {
            code: 500,
            message: "simulated API error".into(),
        }
    }

    /// What the API shows of each Event: the emission `shown` of command `of`, or none.
    fn shows(of: Option<&Command>) -> impl Fn(&EventKey) -> Option<Shown> + '_ {
        move |_| of.and_then(of_command).map(|(_, s)| s)
    }

    const QUIET: Duration = Duration::from_secs(30);

    #[test]
    fn an_event_shows_the_last_emission_the_api_accepted_or_a_later_one_not_refused() {
        let first = drained(1, 1, "cannot evict pod web-0");
        let second = drained(2, 2, "cannot evict pod web-0 after 60s");
        let third = drained(3, 3, "cannot evict pod web-0 after 120s");
        let mut ledger = EventLedger::default();
        ledger.sent(&first);
        // Not answered yet: nothing is required.
        assert!(ledger.check(shows(None), QUIET).is_empty());
        ledger.input(&answer(1, ok()));
        ledger.sent(&second);
        ledger.input(&answer(2, refused()));
        ledger.sent(&third);
        ledger.input(&Input::Restarted);
        // The refused repeat is not required; the one whose answer the restart lost may show.
        assert!(ledger.check(shows(Some(&first)), QUIET).is_empty());
        assert!(ledger.check(shows(Some(&third)), QUIET).is_empty());
        let found = ledger.check(shows(Some(&second)), QUIET);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "Machine default/m1");
    }

    #[test]
    fn an_event_the_api_accepted_and_does_not_show_is_reported_once_with_what_was_accepted() {
        let first = drained(1, 1, "cannot evict pod web-0");
        let mut ledger = EventLedger::default();
        ledger.sent(&first);
        ledger.input(&Input::Batch {
            inputs: vec![answer(1, ok())],
        });
        let (key, _) = of_command(&first).unwrap();
        let found = ledger.check(shows(None), Duration::from_secs(42));
        assert_eq!(
            found,
            [(
                "Machine default/m1".to_string(),
                format!(
                    "Event did not converge: {key} shows nothing where the API accepted Warning FailedDrainNode about Machine default/m1, count 1: \"cannot evict pod web-0\" (nothing pending for 42s)"
                )
            )]
        );
        assert!(ledger.check(shows(None), QUIET).is_empty(), "reported once");
    }

    #[test]
    fn an_event_whose_only_write_was_refused_is_not_required() {
        let first = drained(1, 1, "cannot evict pod web-0");
        let mut ledger = EventLedger::default();
        ledger.sent(&first);
        ledger.input(&answer(1, refused()));
        assert!(ledger.check(shows(None), QUIET).is_empty());
    }
}
