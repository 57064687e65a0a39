//! The plug-in surface for controllers, and the context a reconcile gets.

use crate::command::{Action, Command, ControllerId};
use crate::input::ApiOutcome;
use crate::model::{ObjectKey, Scope};
use crate::store::{Change, Store};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A level-triggered, sans-IO controller.
///
/// Expected flow: the engine tells it about every observed change (`affected` names the keys to
/// reconcile), calls `reconcile` for each such key with a [`Cx`] to issue commands through, feeds
/// it the results of its commands (`on_result`, then a reconcile of the command's owner), and asks
/// for due timers on [`crate::Input::Tick`].
/// Guarantees asked of implementors: `reconcile` is deterministic in (store, own state, now) and
/// idempotent: reconciling twice with nothing changed issues nothing new.
pub trait Controller {
    fn id(&self) -> ControllerId;
    /// Reconcile keys (of this controller) that a change to one object affects, pushed onto
    /// `out` (which may hold keys of earlier changes of the same input; repeats are fine).
    fn affected(&self, store: &Store, change: &Change, out: &mut Vec<ObjectKey>);
    fn reconcile(&mut self, key: &ObjectKey, cx: &mut Cx<'_>);
    /// The API's answer to a command this controller issued.
    fn on_result(&mut self, command: &Command, outcome: &ApiOutcome, now: Timestamp);
    /// Removes and returns the keys whose timers are due at `now`.
    fn take_due(&mut self, now: Timestamp, out: &mut Vec<ObjectKey>);
    fn next_deadline(&self) -> Option<Timestamp>;
}

/// What keeps two commands from doing the same thing at once: the action name and its target.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Intent {
    pub action: String,
    pub target: ObjectKey,
}

impl Intent {
    /// Events are never deduplicated (each is its own record); everything else is.
    fn of(action: &Action) -> Option<Intent> {
        match action {
            Action::RecordEvent { .. } => None,
            _ => Some(Intent {
                action: action.name().to_string(),
                target: action.target().key.clone(),
            }),
        }
    }
}

/// Outcome of [`Cx::issue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issued {
    /// Queued with this command id.
    Queued(u64),
    /// The same intent is already in flight; the owner is reconciled again when it completes.
    InFlight,
    /// The target's cluster cache has not synced yet; destructive actions wait for it.
    NotSynced,
}

/// Commands in flight and queued, shared by all controllers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    next_command_id: u64,
    in_flight: BTreeMap<u64, Command>,
    intents: BTreeMap<Intent, u64>,
    /// Reconciles to repeat when an intent completes: (controller, owner).
    waiting: BTreeMap<Intent, BTreeSet<(ControllerId, ObjectKey)>>,
    /// Commands not yet polled. Transient: not part of the state hash or snapshots.
    #[serde(skip)]
    outbox: VecDeque<Command>,
}

impl Effects {
    pub fn poll(&mut self) -> Option<Command> {
        self.outbox.pop_front()
    }

    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Completes a command; returns it with the reconciles that waited on its intent.
    pub fn complete(&mut self, id: u64) -> Option<(Command, Vec<(ControllerId, ObjectKey)>)> {
        let command = self.in_flight.remove(&id)?;
        let mut waiters = Vec::new();
        if let Some(intent) = Intent::of(&command.action) {
            if self.intents.get(&intent) == Some(&id) {
                self.intents.remove(&intent);
            }
            if let Some(w) = self.waiting.remove(&intent) {
                waiters.extend(w);
            }
        }
        Some((command, waiters))
    }

    /// Forgets everything in flight (after a restart nothing is known to be running).
    pub fn forget_in_flight(&mut self) -> Vec<(ControllerId, ObjectKey)> {
        let owners = self
            .in_flight
            .values()
            .map(|c| (c.controller, c.owner.clone()))
            .chain(self.waiting.values().flatten().cloned())
            .collect();
        self.in_flight.clear();
        self.intents.clear();
        self.waiting.clear();
        self.outbox.clear();
        owners
    }
}

/// What a reconcile sees and how it acts: the time, the store, and a way to issue commands.
pub struct Cx<'a> {
    pub now: Timestamp,
    pub store: &'a Store,
    /// Journal sequence number of the input being handled.
    pub cause: u64,
    pub(crate) owner: ObjectKey,
    pub(crate) effects: &'a mut Effects,
}

impl<'a> Cx<'a> {
    pub fn owner(&self) -> &ObjectKey {
        &self.owner
    }

    /// Queues `action` unless the same intent is in flight or its cluster is not synced.
    pub fn issue(
        &mut self,
        controller: ControllerId,
        action: Action,
        reason: impl Into<String>,
    ) -> Issued {
        let scope: &Scope = &action.target().key.scope;
        if action.is_destructive() && !self.store.is_synced(scope) {
            return Issued::NotSynced;
        }
        let intent = Intent::of(&action);
        if let Some(intent) = &intent
            && self.effects.intents.contains_key(intent)
        {
            self.wait_for(controller, intent.clone());
            return Issued::InFlight;
        }
        self.effects.next_command_id += 1;
        let id = self.effects.next_command_id;
        let command = Command {
            id,
            cause: self.cause,
            controller,
            owner: self.owner.clone(),
            action,
            reason: reason.into(),
        };
        if let Some(intent) = intent {
            self.effects.intents.insert(intent, id);
        }
        self.effects.in_flight.insert(id, command.clone());
        self.effects.outbox.push_back(command);
        Issued::Queued(id)
    }

    /// What [`Cx::issue`] does for a non-destructive action whose intent is in flight, without
    /// building the action: the owner waits for it (and is reconciled when it completes).
    /// Returns whether it was in flight. Saves building large actions (a condition list) that
    /// could not be issued anyway.
    pub fn wait_if_in_flight(
        &mut self,
        controller: ControllerId,
        action: &str,
        target: &ObjectKey,
    ) -> bool {
        let intent = Intent {
            action: action.to_string(),
            target: target.clone(),
        };
        if !self.effects.intents.contains_key(&intent) {
            return false;
        }
        self.wait_for(controller, intent);
        true
    }

    /// Reconciles the owner again when `intent` completes. A reconcile repeats while it waits,
    /// so the owner is usually registered already: checked first, without cloning its key (by
    /// a scan: the waiters of one intent are the few owners acting on the same target).
    fn wait_for(&mut self, controller: ControllerId, intent: Intent) {
        let waiters = self.effects.waiting.entry(intent).or_default();
        if !waiters
            .iter()
            .any(|(c, o)| *c == controller && *o == self.owner)
        {
            waiters.insert((controller, self.owner.clone()));
        }
    }

    /// Whether an action with this name on this target is in flight.
    pub fn is_in_flight(&self, action: &str, target: &ObjectKey) -> bool {
        self.effects.intents.contains_key(&Intent {
            action: action.to_string(),
            target: target.clone(),
        })
    }
}

/// A deadline table for one controller: at most one pending wake-up per key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timers {
    by_key: BTreeMap<ObjectKey, Timestamp>,
    queue: BTreeSet<(Timestamp, ObjectKey)>,
}

impl Timers {
    /// Wakes `key` at `at`, or earlier if it already has an earlier wake-up.
    pub fn wake_at(&mut self, key: &ObjectKey, at: Timestamp) {
        if let Some(existing) = self.by_key.get(key) {
            if *existing <= at {
                return;
            }
            self.queue.remove(&(*existing, key.clone()));
        }
        self.by_key.insert(key.clone(), at);
        self.queue.insert((at, key.clone()));
    }

    pub fn cancel(&mut self, key: &ObjectKey) {
        if let Some(at) = self.by_key.remove(key) {
            self.queue.remove(&(at, key.clone()));
        }
    }

    pub fn take_due(&mut self, now: Timestamp, out: &mut Vec<ObjectKey>) {
        while let Some((at, _)) = self.queue.first() {
            if *at > now {
                break;
            }
            let (_, key) = self.queue.pop_first().expect("non-empty");
            self.by_key.remove(&key);
            out.push(key);
        }
    }

    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.queue.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::management(Kind::Machine, "default", name)
    }

    #[test]
    fn timers_keep_the_earliest_wake_up_per_key() {
        let mut t = Timers::default();
        t.wake_at(&key("a"), Timestamp(50));
        t.wake_at(&key("a"), Timestamp(80));
        t.wake_at(&key("b"), Timestamp(60));
        t.wake_at(&key("a"), Timestamp(10));
        assert_eq!(t.next_deadline(), Some(Timestamp(10)));
        let mut due = Vec::new();
        t.take_due(Timestamp(60), &mut due);
        assert_eq!(due, vec![key("a"), key("b")]);
        assert_eq!(t.next_deadline(), None);
    }
}
