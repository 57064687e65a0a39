//! The plug-in surface for controllers, and the context a reconcile gets.

use crate::command::{Action, ActionKind, Command, ControllerId, EventSeries};
use crate::input::ApiOutcome;
use crate::model::{Conditions, ObjectKey, Scope};
use crate::store::{Change, Store};
use crate::time::{Duration, Timestamp};
use crate::timer::{FiredTimer, TimerKind, TimerTable};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod checks;

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
    /// Removes the timers due at `now`, pushing each onto `fired` (its owner is reconciled).
    fn take_due(&mut self, now: Timestamp, fired: &mut Vec<FiredTimer>);
    fn next_deadline(&self) -> Option<Timestamp>;
    /// Reconcile keys that were waiting for `scope`'s cache, which has just synced (a relist
    /// with nothing new in it changes no object, so `affected` alone would not wake them).
    fn on_synced(&self, _store: &Store, _scope: &Scope, _out: &mut Vec<ObjectKey>) {}
    /// Reconcile keys that wait on workload cluster `scope`, whose connector has just failed
    /// for a new reason or connected after failing ([`Store::unreachable`]): they say why they
    /// wait. By default the keys that wait for its cache to sync.
    fn on_reachability(&self, store: &Store, scope: &Scope, out: &mut Vec<ObjectKey>) {
        self.on_synced(store, scope, out);
    }
    /// The process restarted: no answer to a command it sent before will ever come.
    fn on_restarted(&mut self) {}
}

/// What keeps two commands from doing the same thing at once: the action and its target.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Intent {
    pub action: ActionKind,
    pub target: ObjectKey,
}

impl Intent {
    /// Events are never deduplicated (each is its own record); everything else is.
    fn of(action: &Action) -> Option<Intent> {
        match action {
            Action::RecordEvent { .. } => None,
            _ => Some(Intent {
                action: action.kind(),
                target: action.target().key.clone(),
            }),
        }
    }
}

/// State version 5 keys intents by [`ActionKind`]; version 4 wrote the action's name.
impl<'de> Deserialize<'de> for Intent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Current {
            action: ActionKind,
            target: ObjectKey,
        }
        #[derive(Deserialize)]
        struct ByName {
            action: String,
            target: ObjectKey,
        }
        if crate::codec::layout_before(5) {
            let v4 = ByName::deserialize(d)?;
            let action = ActionKind::from_name(&v4.action).ok_or_else(|| {
                serde::de::Error::custom(format!("no action is named {:?}", v4.action))
            })?;
            return Ok(Intent {
                action,
                target: v4.target,
            });
        }
        let c = Current::deserialize(d)?;
        Ok(Intent {
            action: c.action,
            target: c.target,
        })
    }
}

/// A repeat of an (object, reason) event within this long of the last one updates the same
/// Event (`count`, `lastTimestamp`), as Kubernetes' event recorder does.
pub const EVENT_SERIES_WINDOW: Duration = Duration::from_secs(600);
/// An (object, reason) Event is written at most once per this long; repeats in between are
/// counted into the next write.
pub const EVENT_WRITE_INTERVAL: Duration = Duration::from_secs(60);

/// One (object, reason) run of events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Series {
    first: u64,
    count: u32,
    last: Timestamp,
    written: Timestamp,
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
    /// The same intent failed recently; the owner is reconciled again when the backoff ends.
    Backoff,
    /// An event counted into its series' next write (its Event was written less than
    /// [`EVENT_WRITE_INTERVAL`] ago).
    Folded,
    /// The same intent was decided and withheld (shadow) while its target was as it is now:
    /// deciding it again would change nothing.
    Withheld,
    /// Another writer keeps undoing this controller's writes to the target: they are held for
    /// a while ([`crate::fight`]); the owner is reconciled again when the hold ends.
    Held,
}

impl Issued {
    /// Whether an event is on record: queued, or counted into its series.
    pub fn recorded(self) -> bool {
        matches!(self, Issued::Queued(_) | Issued::Folded)
    }
}

/// First wait after a failed API call for the same intent; doubles per failure up to the max.
pub const RETRY_BACKOFF_FIRST: Duration = Duration::from_secs(1);
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The timer of a reconcile held back by a write's backoff: which controller retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WriteRetry(pub ControllerId);

impl TimerKind for WriteRetry {
    fn name(self) -> &'static str {
        "WriteRetry"
    }

    fn controller(self) -> ControllerId {
        self.0
    }
}

/// Failures of one intent in a row, and when it may be tried again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Backoff {
    failures: u32,
    until: Timestamp,
}

/// How long an intent waits after its `failures`-th failure in a row. Destructive actions are
/// paced by their controllers (evictions every 20 s, Node deletion every 2 s), so they only get
/// a floor that stops a same-instant loop; every other write backs off exponentially.
fn backoff_after(action: &Action, failures: u32) -> Duration {
    if action.is_destructive() {
        return RETRY_BACKOFF_FIRST;
    }
    Duration(
        RETRY_BACKOFF_FIRST
            .as_millis()
            .saturating_mul(1 << (failures - 1).min(16))
            .min(RETRY_BACKOFF_MAX.as_millis()),
    )
}

/// Whether an answer means the call should be paced before it is tried again. A 404 is an
/// answer (the object is gone), not a failure to reach the API.
/// What an action decides, as a number (FNV-1a over its encoding): the same on every machine.
pub(crate) fn fingerprint(action: &Action) -> u64 {
    crate::codec::encode(action)
        .unwrap_or_default()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The resourceVersion of `key` as the cache holds it (0: not there).
pub(crate) fn target_version(store: &Store, key: &ObjectKey) -> u64 {
    store.get(key).map_or(0, |o| o.meta().resource_version)
}

fn is_failure(outcome: &ApiOutcome) -> bool {
    !matches!(outcome, ApiOutcome::Ok { .. } | ApiOutcome::NotFound)
}

/// Commands in flight and queued, shared by all controllers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    next_command_id: u64,
    /// Boxed: B-tree nodes of 160-byte commands were large allocations, and each one made
    /// the allocator consolidate its free lists.
    in_flight: BTreeMap<u64, Box<Command>>,
    intents: BTreeMap<Intent, u64>,
    /// Reconciles to repeat when an intent completes: (controller, owner).
    waiting: BTreeMap<Intent, BTreeSet<(ControllerId, ObjectKey)>>,
    /// Intents whose last call failed, so a failing API is not hammered in a loop.
    backoffs: BTreeMap<Intent, Backoff>,
    /// Reconciles to repeat when a backoff ends, per owner (about the intent's target).
    retries: TimerTable<WriteRetry>,
    /// Recent events per (object, reason and message shape), so repeats update one Event
    /// (see [`Cx::issue`]).
    events: BTreeMap<(ObjectKey, String), Series>,
    /// Commands not yet polled. Transient: not part of the state hash or snapshots.
    #[serde(skip)]
    outbox: Outbox,
    /// Intents withheld (shadow), with their target's resourceVersion then and the action's
    /// fingerprint: the same decision about the same object is not made again, so a
    /// level-based controller that never sees its write land does not decide it for ever.
    /// Per controller: two controllers deciding about one object (the health check's and the
    /// remediation's conditions on a Machine) each keep theirs.
    #[serde(deserialize_with = "withheld_of_layout")]
    withheld: Withheld,
    /// The conditions decided since the engine's input began. Transient, as the outbox.
    #[serde(skip)]
    decided: crate::decision::Decisions,
    /// Writes another writer keeps undoing or refusing, and the objects held for it.
    #[serde(deserialize_with = "crate::codec::added_in_12")]
    fights: crate::fight::Fights,
}

/// Per controller and intent: the target's resourceVersion when withheld, the action's
/// fingerprint.
type Withheld = BTreeMap<(ControllerId, Intent), (u64, u64)>;

/// Version 7 kept one withheld entry per intent, which two controllers overwrote in turn;
/// they are dropped on reading (a restart forgets them anyway: at worst a withheld decision
/// is made once more).
fn withheld_of_layout<'de, D>(d: D) -> Result<Withheld, D::Error>
where
    D: serde::Deserializer<'de>,
{
    if crate::codec::layout_before(7) {
        return Ok(BTreeMap::new());
    }
    if crate::codec::layout_before(8) {
        BTreeMap::<Intent, (u64, u64)>::deserialize(d)?;
        return Ok(BTreeMap::new());
    }
    BTreeMap::deserialize(d)
}

/// Commands not yet polled, with room for a burst reserved up front: one input can complete
/// a hundred drains, and growing the queue mid-burst made allocations large enough for the
/// allocator to consolidate its free lists on each. A clone keeps the room.
#[derive(Debug, PartialEq, Eq)]
struct Outbox(VecDeque<Box<Command>>);

const OUTBOX_RESERVED: usize = 256;

impl Default for Outbox {
    fn default() -> Self {
        Outbox(VecDeque::with_capacity(OUTBOX_RESERVED))
    }
}

impl Clone for Outbox {
    fn clone(&self) -> Self {
        let mut queue = VecDeque::with_capacity(self.0.capacity().max(OUTBOX_RESERVED));
        queue.extend(self.0.iter().cloned());
        Outbox(queue)
    }
}

impl Effects {
    /// Counts an (object, reason) event at `now`: `None` when it folds into its series'
    /// next write, `Some(None)` when it starts a series (a new Event, named by command `id`),
    /// `Some(Some(series))` when it updates the series' Event. Messages that differ only in
    /// numbers (elapsed times, counts) are one series; other differences are not.
    fn join_series(
        &mut self,
        object: &ObjectKey,
        reason: &str,
        message: &str,
        id: u64,
        now: Timestamp,
    ) -> Option<Option<EventSeries>> {
        let shape: String = message.chars().filter(|c| !c.is_ascii_digit()).collect();
        let key = (object.clone(), format!("{reason}\n{shape}"));
        if let Some(s) = self.events.get_mut(&key)
            && now < s.last.saturating_add(EVENT_SERIES_WINDOW)
        {
            s.count += 1;
            s.last = now;
            if now < s.written.saturating_add(EVENT_WRITE_INTERVAL) {
                return None;
            }
            s.written = now;
            return Some(Some(EventSeries {
                first: s.first,
                count: s.count,
            }));
        }
        self.events
            .retain(|_, s| now < s.last.saturating_add(EVENT_SERIES_WINDOW));
        self.events.insert(
            key,
            Series {
                first: id,
                count: 1,
                last: now,
                written: now,
            },
        );
        Some(None)
    }

    pub fn poll(&mut self) -> Option<Command> {
        self.outbox.0.pop_front().map(|c| *c)
    }

    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Completes a command; returns it with the reconciles that waited on its intent. A failed
    /// call starts (or extends) the intent's backoff.
    pub fn complete(
        &mut self,
        id: u64,
        outcome: &ApiOutcome,
        now: Timestamp,
    ) -> Option<(Command, Vec<(ControllerId, ObjectKey)>)> {
        let command = *self.in_flight.remove(&id)?;
        let mut waiters = Vec::new();
        if let Some(intent) = Intent::of(&command.action) {
            if self.intents.get(&intent) == Some(&id) {
                self.intents.remove(&intent);
            }
            // A write lands when the API answers with the object written: a command not
            // sent (shadow) is answered with nothing, and changed nothing to undo.
            self.fights
                .answered(&command.action.target().key, id, !is_failure(outcome));
            match outcome {
                ApiOutcome::Conflict { .. } => self.fights.refused(&command.action, now),
                ApiOutcome::Ok {
                    object: Some(object),
                } => self
                    .fights
                    .landed(&command.action, object.meta().resource_version, now),
                _ => {}
            }
            if is_failure(outcome) {
                let failures = self.backoffs.get(&intent).map_or(0, |b| b.failures) + 1;
                let wait = backoff_after(&command.action, failures);
                self.backoffs.insert(
                    intent.clone(),
                    Backoff {
                        failures,
                        until: now + wait,
                    },
                );
            } else {
                self.backoffs.remove(&intent);
            }
            if let Some(w) = self.waiting.remove(&intent) {
                waiters.extend(w);
            }
        }
        Some((command, waiters))
    }

    /// A command was withheld (shadow) while its target stood at `version`. Now and then
    /// (at each power of two from 1024 entries, so amortised constant) the entries of targets
    /// gone from `store` are dropped: a shadow run over weeks keeps no record of every pod it
    /// would have evicted.
    pub fn note_withheld(&mut self, command: &Command, version: u64, store: &Store) {
        if let Some(intent) = Intent::of(&command.action) {
            self.withheld.insert(
                (command.controller, intent),
                (version, fingerprint(&command.action)),
            );
        }
        let n = self.withheld.len();
        if n >= 1024 && n.is_power_of_two() {
            self.withheld
                .retain(|(_, i), _| store.get(&i.target).is_some());
        }
    }

    pub(crate) fn forget_write_history(&mut self) {
        self.fights = crate::fight::Fights::default();
    }

    pub(crate) fn forget_given_back(&mut self) {
        self.fights.forget_given_back();
    }

    /// Forgets the fights' records that expired by `now` ([`crate::fight::Fights::expire`]).
    pub(crate) fn expire_fights(&mut self, now: Timestamp) {
        self.fights.expire(now);
    }

    /// The objects a fight holds the controllers' writes to at `now`.
    pub fn held_in_fight(
        &self,
        now: Timestamp,
    ) -> impl Iterator<Item = (&ObjectKey, &crate::fight::Hold)> {
        self.fights.held(now)
    }

    /// Forgets the backoffs of writes to `target` (it is gone).
    pub fn forget_backoffs(&mut self, target: &ObjectKey) {
        if !self.backoffs.is_empty() {
            self.backoffs.retain(|intent, _| intent.target != *target);
        }
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
        self.fights.forget_sending();
        self.intents.clear();
        self.waiting.clear();
        self.backoffs.clear();
        self.withheld.clear();
        self.retries = TimerTable::default();
        self.outbox.0.clear();
        owners
    }

    /// Whether a failed write waits for its backoff to end before it is tried again.
    pub fn retries_pending(&self) -> bool {
        self.retries.next_deadline().is_some()
    }

    /// The conditions decided since [`Effects::clear_decisions`].
    pub fn decisions(&self) -> &[crate::decision::Decision] {
        &self.decided.0
    }

    /// Reports a decision made outside a reconcile (see [`Cx::report`]).
    pub fn report(&mut self, decision: crate::decision::Decision) {
        if !decision.is_empty() {
            self.decided.0.push(decision);
        }
    }

    pub fn clear_decisions(&mut self) {
        self.decided.0.clear();
    }

    /// When the earliest backoff ends.
    pub fn next_retry(&self) -> Option<Timestamp> {
        self.retries.next_deadline()
    }

    /// Reconciles whose backoff has ended by `now`, pushed onto `fired`.
    pub fn take_due_retries(&mut self, now: Timestamp, fired: &mut Vec<FiredTimer>) {
        self.retries.take_due(now, fired);
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

    /// Why Machine `key` is fought over, if it is: held in a fight, or given back for one
    /// ([`crate::fight::Fights::fought_over`]).
    pub fn fought_over(&self, key: &ObjectKey) -> Option<&str> {
        self.effects.fights.fought_over(key, self.now)
    }

    /// Machine `key`, fought over, is given back to Cluster API's manager from now (kept from
    /// the first time): not taken again for [`crate::fight::GIVEN_BACK_FOR`]. Whether it was
    /// given back now (not before).
    pub fn give_back(&mut self, key: &ObjectKey) -> bool {
        self.effects.fights.give_back(key, self.now)
    }

    /// Queues `action` unless the same intent is in flight or its cluster is not synced.
    pub fn issue(
        &mut self,
        controller: ControllerId,
        action: Action,
        reason: impl Into<String>,
    ) -> Issued {
        self.issue_past(controller, action, reason, None)
    }

    /// [`Cx::issue`] for `write`, which gives a fought-over Machine back ([`Cx::give_back`]): it
    /// passes the hold on its target once, the one write that ends the fight; the same write
    /// again is held as any other ([`crate::fight::Fights::pass`]).
    pub fn issue_giving_back(
        &mut self,
        controller: ControllerId,
        action: Action,
        reason: impl Into<String>,
        write: crate::fight::HandBackWrite,
    ) -> Issued {
        self.issue_past(controller, action, reason, Some(write))
    }

    fn issue_past(
        &mut self,
        controller: ControllerId,
        action: Action,
        reason: impl Into<String>,
        giving_back: Option<crate::fight::HandBackWrite>,
    ) -> Issued {
        let scope: &Scope = &action.target().key.scope;
        if action.is_destructive() && !self.store.is_synced(scope) {
            crate::mark::hit("destructive_action_held_until_synced");
            return Issued::NotSynced;
        }
        let intent = Intent::of(&action);
        if let Some(intent) = &intent
            && let Some(b) = self.effects.backoffs.get(intent)
            && b.until > self.now
        {
            self.effects.retries.set(
                &self.owner,
                WriteRetry(controller),
                b.until,
                Some(&intent.target),
            );
            return Issued::Backoff;
        }
        if let Some(intent) = &intent
            && self.effects.intents.contains_key(intent)
        {
            self.wait_for(controller, intent.clone());
            return Issued::InFlight;
        }
        let seen = target_version(self.store, &action.target().key);
        if let Some(conflicts) = self.effects.fights.conflicts_to_tell(&action.target().key) {
            self.issue(
                controller,
                Action::RecordEvent {
                    regarding: action.target().clone(),
                    type_: crate::command::EventType::Warning,
                    reason: crate::fight::CONFLICT_REASON.to_string(),
                    message: crate::fight::conflict_message(conflicts),
                },
                "writes to this object keep meeting 409 Conflict",
            );
        }
        let key = &action.target().key;
        let passes = giving_back.filter(|write| {
            self.effects.fights.is_held(key, self.now)
                && self.effects.fights.pass(key, *write, self.now)
        });
        if passes.is_none()
            && let Err(hold) = self.effects.fights.check(&action, seen, self.now)
        {
            let (until, tell) = (hold.until, (!hold.told).then(|| hold.why.clone()));
            let target = action.target().clone();
            self.effects.retries.set(
                &self.owner,
                WriteRetry(controller),
                until,
                Some(&target.key),
            );
            // Left as the other writer made it, knowingly: the conditions this controller
            // decided for it are not what it waits to see (the status convergence rule).
            if matches!(
                action,
                Action::SetCondition { .. } | Action::SetOwnCondition { .. }
            ) {
                self.report(crate::decision::Decision::none(
                    controller,
                    target.key.clone(),
                ));
            }
            if let Some(why) = tell {
                self.effects.fights.told(&target.key);
                self.issue(
                    controller,
                    Action::RecordEvent {
                        regarding: target,
                        type_: crate::command::EventType::Warning,
                        reason: crate::fight::EVENT_REASON.to_string(),
                        message: crate::fight::message(&why),
                    },
                    "another writer keeps undoing this controller's writes",
                );
            }
            return Issued::Held;
        }
        if let Some(intent) = &intent {
            let key = (controller, intent.clone());
            if let Some(&(rv, print)) = self.effects.withheld.get(&key) {
                if rv == target_version(self.store, &intent.target) && print == fingerprint(&action)
                {
                    return Issued::Withheld;
                }
                self.effects.withheld.remove(&key);
            }
        }
        let id = self.effects.next_command_id + 1;
        let series = match &action {
            Action::RecordEvent {
                regarding,
                reason,
                message,
                ..
            } => match self
                .effects
                .join_series(&regarding.key, reason, message, id, self.now)
            {
                Some(series) => series,
                None => return Issued::Folded,
            },
            _ => None,
        };
        self.effects.next_command_id = id;
        let command = Command {
            id,
            cause: self.cause,
            controller,
            owner: self.owner.clone(),
            action,
            reason: reason.into(),
            series,
        };
        if let Some(intent) = intent {
            self.effects.intents.insert(intent, id);
        }
        if let Some(write) = passes {
            self.effects
                .fights
                .sending(&command.action.target().key, write, id);
        }
        let command = Box::new(command);
        self.effects.in_flight.insert(id, command.clone());
        self.effects.outbox.0.push_back(command);
        Issued::Queued(id)
    }

    /// Reports conditions this controller decided for `target`, sent or not (see
    /// [`crate::decision`]).
    pub fn decide(&mut self, controller: ControllerId, target: ObjectKey, conditions: Conditions) {
        self.report(crate::decision::Decision::part(
            controller, target, conditions,
        ));
    }

    /// Reports a decision about an object's conditions, sent or not (see [`crate::decision`]).
    pub fn report(&mut self, decision: crate::decision::Decision) {
        self.effects.report(decision);
    }

    /// What [`Cx::issue`] does for a non-destructive action whose intent is in flight, without
    /// building the action: the owner waits for it (and is reconciled when it completes).
    /// Returns whether it was in flight. Saves building large actions (a condition list) that
    /// could not be issued anyway.
    pub fn wait_if_in_flight(
        &mut self,
        controller: ControllerId,
        action: ActionKind,
        target: &ObjectKey,
    ) -> bool {
        let intent = Intent {
            action,
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
    pub fn is_in_flight(&self, action: ActionKind, target: &ObjectKey) -> bool {
        self.effects.intents.contains_key(&Intent {
            action,
            target: target.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::management(Kind::Machine, "default", name)
    }

    fn status_write(name: &str) -> Action {
        Action::PatchStatus {
            target: crate::command::Target {
                key: key(name),
                api_version: "cluster.x-k8s.io/v1beta2".into(),
            },
            merge: crate::command::JsonText("{}".into()),
            summary: String::new(),
        }
    }

    fn issue_at(effects: &mut Effects, store: &Store, now: Timestamp, action: Action) -> Issued {
        issue_by(ControllerId::Deletion, effects, store, now, action)
    }

    fn issue_by(
        controller: ControllerId,
        effects: &mut Effects,
        store: &Store,
        now: Timestamp,
        action: Action,
    ) -> Issued {
        let mut cx = Cx {
            now,
            store,
            cause: 1,
            owner: key("m1"),
            effects,
        };
        cx.issue(controller, action, "test")
    }

    fn other_status_write(name: &str) -> Action {
        Action::PatchStatus {
            target: crate::command::Target {
                key: key(name),
                api_version: "cluster.x-k8s.io/v1beta2".into(),
            },
            merge: crate::command::JsonText(r#"{"status":{"phase":"Deleting"}}"#.into()),
            summary: String::new(),
        }
    }

    /// A Machine held in a fight and given back: the write that hands it back passes the hold,
    /// once; the same write again, and any other write, is held. Not given back, it is held.
    #[test]
    fn a_write_giving_back_a_held_machine_passes_the_hold_once() {
        let mut store = Store::default();
        let mut m1 = crate::testing::machine("c1", "m1", None);
        let mut effects = Effects::default();
        let write = status_write("m1");
        let secs = |s: i64| Timestamp(s * 1000);
        for (i, t) in [0, 60, 120].into_iter().enumerate() {
            let version = 10 * (i as u64 + 1);
            effects.fights.landed(&write, version, secs(t));
            let _ = effects.fights.check(&write, version + 1, secs(t + 1));
        }
        m1.meta.resource_version = 31;
        store.upsert(&Scope::Management, crate::model::Object::Machine(m1));
        let now = secs(122);
        let giving_back = |effects: &mut Effects, give: bool| {
            let mut cx = Cx {
                now,
                store: &store,
                cause: 1,
                owner: key("m1"),
                effects,
            };
            assert!(cx.fought_over(&key("m1")).is_some(), "held");
            if give {
                cx.give_back(&key("m1"));
            }
            cx.issue_giving_back(
                ControllerId::Deletion,
                other_status_write("m1"),
                "hand back",
                crate::fight::HandBackWrite::LastHook,
            )
        };
        assert_eq!(giving_back(&mut effects.clone(), false), Issued::Held);
        let Issued::Queued(id) = giving_back(&mut effects, true) else {
            panic!("the hand-back passes")
        };
        assert_eq!(giving_back(&mut effects, true), Issued::InFlight);
        effects.poll();
        let conflict = ApiOutcome::Conflict {
            message: "the object has been modified".into(),
        };
        effects.complete(id, &conflict, now);
        // Refused (the other writer wrote in between): tried again once its backoff ends.
        let later = Timestamp(now.0 + 1_000);
        let retried = |effects: &mut Effects| {
            let mut cx = Cx {
                now: later,
                store: &store,
                cause: 1,
                owner: key("m1"),
                effects,
            };
            cx.issue_giving_back(
                ControllerId::Deletion,
                other_status_write("m1"),
                "hand back",
                crate::fight::HandBackWrite::LastHook,
            )
        };
        let Issued::Queued(id) = retried(&mut effects) else {
            panic!("a refused hand-back passes again")
        };
        effects.poll();
        effects.complete(id, &ApiOutcome::Ok { object: None }, later);
        assert_eq!(
            retried(&mut effects),
            Issued::Held,
            "landed once: never again"
        );
        assert_eq!(
            issue_at(&mut effects, &store, later, status_write("m1")),
            Issued::Held
        );
    }

    /// A condition write held in a fight withdraws what the controller decided about the
    /// object: it knowingly leaves it as the other writer made it, and the status convergence
    /// rule (over HTTP, from the journal) must not wait for it.
    #[test]
    fn a_held_condition_write_withdraws_the_decisions_about_its_object() {
        let store = Store::default();
        let mut effects = Effects::default();
        let write = Action::SetCondition {
            target: crate::command::Target {
                key: key("m1"),
                api_version: "cluster.x-k8s.io/v1beta2".into(),
            },
            conditions: Conditions::default(),
            summary: String::new(),
        };
        let secs = |s: i64| Timestamp(s * 1000);
        for (i, t) in [0, 60, 120].into_iter().enumerate() {
            let version = 10 * (i as u64 + 1);
            effects.fights.landed(&write, version, secs(t));
            let _ = effects.fights.check(&write, version + 1, secs(t + 1));
        }
        assert!(effects.decisions().is_empty());
        assert_eq!(
            issue_at(&mut effects, &store, secs(122), write),
            Issued::Held
        );
        assert_eq!(
            effects.decisions(),
            [crate::decision::Decision::none(
                ControllerId::Deletion,
                key("m1")
            )]
        );
    }

    /// Shadow: a withheld decision is not made again while its target stands as it was; another
    /// decision about it is, and so is the same one once the target changed.
    #[test]
    fn a_withheld_intent_is_not_decided_again_until_its_target_changes() {
        let mut store = Store::default();
        let mut m1 = crate::testing::machine("c1", "m1", None);
        m1.meta.resource_version = 5;
        store.upsert(
            &Scope::Management,
            crate::model::Object::Machine(m1.clone()),
        );
        let mut effects = Effects::default();
        let now = Timestamp(0);
        let withhold = |effects: &mut Effects, action: Action| {
            let Issued::Queued(id) = issue_at(effects, &store, now, action) else {
                panic!("decided");
            };
            let command = effects.poll().expect("polled");
            effects.complete(id, &ApiOutcome::Ok { object: None }, now);
            effects.note_withheld(&command, 5, &Store::default());
        };
        withhold(&mut effects, status_write("m1"));
        assert_eq!(
            issue_at(&mut effects, &store, now, status_write("m1")),
            Issued::Withheld
        );
        withhold(&mut effects, other_status_write("m1"));
        assert_eq!(
            issue_at(&mut effects, &store, now, other_status_write("m1")),
            Issued::Withheld
        );
        m1.meta.resource_version = 6;
        store.upsert(&Scope::Management, crate::model::Object::Machine(m1));
        assert!(matches!(
            issue_at(&mut effects, &store, now, other_status_write("m1")),
            Issued::Queued(_)
        ));
    }

    /// Two controllers deciding one intent about one object (the health check's and the
    /// remediation's conditions on a Machine) each keep their withheld decision: overwriting
    /// each other's, they decided for ever at one instant (a shadow run with an MHC beside
    /// CAPI's marking hung).
    #[test]
    fn two_controllers_withheld_decisions_about_one_object_both_hold() {
        let mut store = Store::default();
        let mut m1 = crate::testing::machine("c1", "m1", None);
        m1.meta.resource_version = 5;
        store.upsert(&Scope::Management, crate::model::Object::Machine(m1));
        let mut effects = Effects::default();
        let now = Timestamp(0);
        let decide = |effects: &mut Effects, controller, action| {
            let issued = issue_by(controller, effects, &store, now, action);
            if let Issued::Queued(id) = issued {
                let command = effects.poll().expect("polled");
                effects.complete(id, &ApiOutcome::Ok { object: None }, now);
                effects.note_withheld(&command, 5, &Store::default());
            }
            issued
        };
        for round in 0..2 {
            let health = decide(&mut effects, ControllerId::Health, status_write("m1"));
            let remediation = decide(
                &mut effects,
                ControllerId::Remediation,
                other_status_write("m1"),
            );
            assert_eq!(
                (
                    matches!(health, Issued::Withheld),
                    matches!(remediation, Issued::Withheld)
                ),
                (round > 0, round > 0),
                "round {round}"
            );
        }
    }

    /// Version 7 bytes (one withheld entry per intent) are read and dropped; version 8 bytes
    /// are read as written.
    #[test]
    fn withheld_intents_of_version_7_are_dropped_on_reading() {
        #[derive(serde::Deserialize)]
        struct Held(#[serde(deserialize_with = "withheld_of_layout")] Withheld);
        let intent = Intent::of(&status_write("m1")).expect("an intent");
        let v7: BTreeMap<Intent, (u64, u64)> = [(intent.clone(), (5, 9))].into();
        let bytes = crate::codec::encode(&(v7,)).expect("encoded");
        let Held(read) = crate::codec::decode_layout(&bytes, 7).expect("version 7 read");
        assert!(read.is_empty());
        let v8: Withheld = [((ControllerId::Health, intent), (5, 9))].into();
        let bytes = crate::codec::encode(&(v8.clone(),)).expect("encoded");
        let Held(read) = crate::codec::decode_layout(&bytes, 8).expect("version 8 read");
        assert_eq!(read, v8);
    }

    #[test]
    fn withheld_intents_of_objects_gone_are_dropped_now_and_then() {
        let mut store = Store::default();
        let kept = crate::testing::machine("c1", "kept", None);
        store.upsert(&Scope::Management, crate::model::Object::Machine(kept));
        let mut effects = Effects::default();
        for i in 0..1023 {
            let command = Command {
                id: i,
                cause: 1,
                controller: ControllerId::Deletion,
                owner: key("m1"),
                action: status_write(&format!("gone-{i}")),
                reason: String::new(),
                series: None,
            };
            effects.note_withheld(&command, 1, &store);
        }
        assert_eq!(effects.withheld.len(), 1023);
        let kept = Command {
            id: 2000,
            cause: 1,
            controller: ControllerId::Deletion,
            owner: key("kept"),
            action: status_write("kept"),
            reason: String::new(),
            series: None,
        };
        effects.note_withheld(&kept, 1, &store);
        assert_eq!(
            effects.withheld.len(),
            1,
            "only the one whose object is still there"
        );
    }

    #[test]
    fn a_failing_write_backs_off_exponentially_instead_of_looping() {
        let store = Store::default();
        let mut effects = Effects::default();
        let unreachable = ApiOutcome::Unreachable {
            message: "down".into(),
        };
        let mut now = Timestamp(0);
        let mut waits = Vec::new();
        for _ in 0..4 {
            let Issued::Queued(id) = issue_at(&mut effects, &store, now, status_write("m1")) else {
                panic!("expected a command at {now:?}");
            };
            effects.poll();
            effects.complete(id, &unreachable, now);
            // Asked again at once: held back, and the owner is queued for the backoff's end.
            assert_eq!(
                issue_at(&mut effects, &store, now, status_write("m1")),
                Issued::Backoff
            );
            let retry_at = effects.next_retry().expect("a retry is scheduled");
            waits.push(retry_at.since(now).as_millis());
            let mut fired = Vec::new();
            effects.take_due_retries(retry_at, &mut fired);
            assert_eq!(
                fired
                    .iter()
                    .map(|f| (f.controller, f.owner.clone(), f.to_string()))
                    .collect::<Vec<_>>(),
                vec![(
                    ControllerId::Deletion,
                    key("m1"),
                    "WriteRetry Machine default/m1".to_string()
                )]
            );
            now = retry_at;
        }
        assert_eq!(waits, [1000, 2000, 4000, 8000]);
        // Success resets it.
        let Issued::Queued(id) = issue_at(&mut effects, &store, now, status_write("m1")) else {
            panic!("expected a command");
        };
        effects.complete(id, &ApiOutcome::Ok { object: None }, now);
        assert!(matches!(
            issue_at(&mut effects, &store, now, status_write("m1")),
            Issued::Queued(_)
        ));
    }

    /// Controllers wait for their caches before deciding to destroy anything; this is the
    /// guard behind them, for an action on an object of a cluster whose cache is not synced.
    #[test]
    fn a_destructive_action_waits_for_its_cluster_cache() {
        let _mark = crate::mark::check("destructive_action_held_until_synced");
        let mut store = Store::default();
        let mut effects = Effects::default();
        let remove = || Action::RemoveFinalizer {
            target: crate::command::Target {
                key: key("m1"),
                api_version: "cluster.x-k8s.io/v1beta2".into(),
            },
            finalizer: crate::model::MACHINE_FINALIZER.into(),
        };
        assert_eq!(
            issue_at(&mut effects, &store, Timestamp(0), remove()),
            Issued::NotSynced
        );
        assert!(matches!(
            issue_at(&mut effects, &store, Timestamp(0), status_write("m1")),
            Issued::Queued(_)
        ));
        store.replace_scope(&Scope::Management, Vec::new());
        assert!(matches!(
            issue_at(&mut effects, &store, Timestamp(0), remove()),
            Issued::Queued(_)
        ));
    }

    fn event(name: &str, reason: &str, message: &str) -> Action {
        Action::RecordEvent {
            regarding: crate::command::Target {
                key: key(name),
                api_version: "cluster.x-k8s.io/v1beta2".into(),
            },
            type_: crate::command::EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// Repeats of an (object, reason) within 10 minutes update one Event, at most once a
    /// minute (whatever their messages say, elapsed times included); other objects and
    /// reasons, and repeats after a quiet 10 minutes, start their own.
    #[test]
    fn repeated_events_update_one_event_at_most_once_a_minute() {
        let store = Store::default();
        let mut effects = Effects::default();
        let secs = |s: i64| Timestamp(s * 1000);
        let mut issue = |at: i64, name: &str, reason: &str, message: &str| {
            let issued = issue_at(&mut effects, &store, secs(at), event(name, reason, message));
            let command = effects.poll();
            (
                issued,
                command.and_then(|c| c.series.map(|s| (s.first, s.count))),
            )
        };
        let (first, series) = issue(0, "m1", "DrainBlocked", "blocked for 0s");
        let Issued::Queued(first) = first else {
            panic!("the first event is written: {first:?}")
        };
        assert_eq!(series, None, "a new Event");
        assert_eq!(
            issue(30, "m1", "DrainBlocked", "blocked for 30s"),
            (Issued::Folded, None)
        );
        assert!(Issued::Folded.recorded());
        // Another object or reason is its own series.
        assert!(matches!(
            issue(31, "m2", "DrainBlocked", "x").0,
            Issued::Queued(_)
        ));
        assert!(matches!(
            issue(32, "m1", "HookWaiting", "x").0,
            Issued::Queued(_)
        ));
        // Words that differ are another story, not a repeat.
        assert!(matches!(
            issue(33, "m1", "DrainBlocked", "blocked by another PDB").0,
            Issued::Queued(_)
        ));
        // A minute after the last write: the series' Event, counting the folded one.
        let (issued, series) = issue(61, "m1", "DrainBlocked", "blocked for 61s");
        assert!(matches!(issued, Issued::Queued(_)));
        assert_eq!(series, Some((first, 3)));
        // Quiet for 10 minutes: a new series.
        let (issued, series) = issue(61 + 600, "m1", "DrainBlocked", "blocked again");
        assert!(matches!(issued, Issued::Queued(_)));
        assert_eq!(series, None);
        assert!(
            effects.events.len() <= 3,
            "old series are dropped: {:?}",
            effects.events
        );
    }
}
