//! What [`Effects`] keeps consistent between its maps, checked by the engine before and after
//! each input in debug builds.

use super::{Effects, Intent};

impl Effects {
    /// The first broken invariant, if any:
    /// - every command in flight is under its own id, not beyond the last id handed out, and
    ///   (unless it is an event) is the one its intent points to;
    /// - every intent points to a command in flight with that intent;
    /// - reconciles wait only on intents in flight (a completed one woke them all);
    /// - every queued command is in flight; every backoff counts at least one failure.
    pub(crate) fn violation(&self) -> Option<String> {
        for (id, command) in &self.in_flight {
            if command.id != *id || *id > self.next_command_id {
                return Some(format!(
                    "command {} in flight under id {id} (last id {})",
                    command.id, self.next_command_id
                ));
            }
            if let Some(intent) = Intent::of(&command.action)
                && self.intents.get(&intent) != Some(id)
            {
                return Some(format!(
                    "command {id} in flight without its intent {intent:?}"
                ));
            }
        }
        for (intent, id) in &self.intents {
            let action = self.in_flight.get(id).map(|c| &c.action);
            if action.and_then(Intent::of).as_ref() != Some(intent) {
                return Some(format!(
                    "intent {intent:?} points to command {id}, not in flight"
                ));
            }
        }
        for (intent, waiters) in &self.waiting {
            if waiters.is_empty() || !self.intents.contains_key(intent) {
                return Some(format!(
                    "{waiters:?} wait on {intent:?}, which is not in flight"
                ));
            }
        }
        if let Some(command) = self
            .outbox
            .0
            .iter()
            .find(|c| !self.in_flight.contains_key(&c.id))
        {
            return Some(format!("command {} queued but not in flight", command.id));
        }
        if let Some((intent, _)) = self.backoffs.iter().find(|(_, b)| b.failures == 0) {
            return Some(format!("backoff of {intent:?} without a failure"));
        }
        None
    }

    /// Reconciles of `owner` said to wait on `intent`, whether or not it is in flight.
    #[cfg(test)]
    pub(crate) fn corrupt_wait(
        &mut self,
        intent: Intent,
        owner: (crate::command::ControllerId, crate::model::ObjectKey),
    ) {
        self.waiting.entry(intent).or_default().insert(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Action, Command, ControllerId, JsonText, Target};
    use crate::model::{Kind, ObjectKey};

    fn key(name: &str) -> ObjectKey {
        ObjectKey::management(Kind::Machine, "default", name)
    }

    fn command(id: u64) -> Command {
        Command {
            id,
            cause: 1,
            controller: ControllerId::Deletion,
            owner: key("m1"),
            action: Action::PatchStatus {
                target: Target {
                    key: key("m1"),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                merge: JsonText("{}".into()),
                summary: String::new(),
            },
            reason: "test".into(),
            series: None,
        }
    }

    /// One command in flight, as `Cx::issue` leaves it.
    fn consistent() -> Effects {
        let mut effects = Effects {
            next_command_id: 1,
            ..Default::default()
        };
        let c = command(1);
        effects
            .intents
            .insert(Intent::of(&c.action).expect("not an event"), 1);
        effects.in_flight.insert(1, Box::new(c.clone()));
        effects.outbox.0.push_back(Box::new(c));
        effects
    }

    fn intent() -> Intent {
        Intent::of(&command(1).action).expect("not an event")
    }

    #[test]
    fn each_broken_invariant_is_named() {
        assert_eq!(consistent().violation(), None);
        type Corruption = fn(&mut Effects);
        let broken: [(&str, Corruption); 6] = [
            ("under id", |e| e.next_command_id = 0),
            ("without its intent", |e| e.intents.clear()),
            ("not in flight", |e| drop(e.in_flight.remove(&1))),
            ("wait on", |e| {
                e.intents.clear();
                e.in_flight.clear();
                e.outbox.0.clear();
                e.corrupt_wait(intent(), (ControllerId::Deletion, key("m2")));
            }),
            ("queued but not in flight", |e| {
                e.outbox.0.push_back(Box::new(command(7)));
            }),
            ("without a failure", |e| {
                e.backoffs.insert(
                    intent(),
                    super::super::Backoff {
                        failures: 0,
                        until: crate::Timestamp(0),
                    },
                );
            }),
        ];
        for (expected, corrupt) in broken {
            let mut effects = consistent();
            corrupt(&mut effects);
            let violation = effects.violation().unwrap_or_default();
            assert!(violation.contains(expected), "{expected}: {violation:?}");
        }
    }
}
