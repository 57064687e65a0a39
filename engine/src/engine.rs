//! The core loop: `handle(now, input)`, `poll_command()`, `next_deadline()`.

use crate::codec;
use crate::command::{Action, Command, ControllerId};
use crate::connection::Unreachable;
use crate::controller::{Controller, Cx, Effects};
use crate::deletion::MachineDeletion;
use crate::health::HealthChecks;
use crate::input::{ApiOutcome, Input};
use crate::model::{Kind, Object, ObjectKey, Scope};
use crate::ownership::Ownership;
use crate::pool::Pools;
use crate::remediation::OwnerRemediation;
use crate::store::{Change, Replaced, Store};
use crate::time::Timestamp;
use crate::timer::FiredTimer;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Bound on reconciles per input, so one input cannot hold the loop for ever. Reaching it is
/// a bug (debug builds stop); release builds log it, count it and carry the keys left to the
/// next input ([`Engine::next_deadline`] asks for that input at once).
const RECONCILES_PER_INPUT_MAX: usize = 1_000_000;

mod checks;
#[cfg(test)]
mod tests;

/// The registry: every controller the engine runs, each in the slot of its [`ControllerId`].
/// Adding one means a variant there, a field here and a line in [`Controllers::all_mut`]; the
/// loop in [`Engine::handle`] does not change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controllers {
    pub deletion: MachineDeletion,
    pub remediation: OwnerRemediation,
    pub health: HealthChecks,
    pub pool: Pools,
}

impl Controllers {
    fn all_mut(&mut self) -> [&mut dyn Controller; ControllerId::COUNT] {
        [
            &mut self.deletion,
            &mut self.remediation,
            &mut self.health,
            &mut self.pool,
        ]
    }

    fn all(&self) -> [&dyn Controller; ControllerId::COUNT] {
        [&self.deletion, &self.remediation, &self.health, &self.pool]
    }
}

/// Keys to reconcile per registry slot, each once, in key order. A batch that touches one
/// Machine a thousand times keeps one key.
#[derive(Default)]
struct Dirty {
    slots: [BTreeSet<ObjectKey>; ControllerId::COUNT],
    /// Where controllers push the keys a change affects (reused between changes).
    routed: Vec<ObjectKey>,
}

impl Dirty {
    fn push(&mut self, slot: usize, key: ObjectKey) {
        self.slots[slot].insert(key);
    }

    /// Moves what was pushed into `routed` into `slot`.
    fn absorb(&mut self, slot: usize) {
        self.slots[slot].extend(self.routed.drain(..));
    }
}

/// The layout of the encoded [`Engine`] (journal snapshots). Bump it with any change to what
/// the state encodes or how: a snapshot of a version this build does not read is passed over
/// and the journal's records are replayed instead (bincode is not self-describing, so an old
/// layout could otherwise decode into the wrong meaning); one it reads is migrated.
/// 1: typed timer tables, one controller per slot (MachineSet remediation its own).
/// 2: deletion and pool memos as enums of their possible states (`Attempt`, `Landing`,
///    `PoolNodeDeletion`).
/// 3: eviction attempts as an enum of their possible states (`EvictionAttempt`).
/// 4: the store keeps which kinds were listed on their own (drain kinds are watched on demand).
///    Still 4 with the table of unreachable workload clusters ([`Store::unreachable`]): an
///    engine with none encodes byte for byte as before, and the table, when there is one, is
///    appended after everything else ([`Engine`]'s `Serialize`).
/// 5: in-flight intents keyed by [`crate::ActionKind`] (4: by the action's name), and the
///    deletion memo's phase as a [`crate::deletion::DeletionPhase`] (4: the `Deleting` reason),
///    an eviction's failure with its refusal ([`crate::drain::EvictionFailure`]; 4: the text).
///    Version 4 snapshots are read and migrated ([`Engine::decode_state_of`]), so a journal
///    whose early records were retired behind one resumes.
/// 6: the deletion controller's [`crate::ownership::Ownership`] (absent before: alone).
/// 7: the deletion controller's `--own-machines` selector (absent before: none, a MachineSet's
///    Machines), and the intents withheld in shadow mode (absent before: none).
/// 8: withheld intents kept per controller (7: one per intent, dropped on reading).
/// 9: the deletion memo's conditions decided and not observed yet (absent before: none).
/// 10: the deletion controller's judgement of CAPI's release (absent before: supported).
/// 11: the store's tombstones of an earlier window, kept while something refers to them
///     (absent before: none, every tombstone counts as seen in the current window).
/// 12: the writes other writers undo or refuse, and the objects held for it
///     ([`crate::fight::Fights`]; absent before: none).
/// 13: the Machines a takeover gave back for a fight ([`crate::fight::GivenBack`]; absent
///     before: none).
pub const STATE_VERSION: u16 = 13;
/// The first state version that keeps the writes that landed lately ([`crate::fight`]).
pub const STATE_VERSION_WRITE_HISTORY: u16 = 12;
/// The first state version that keeps the Machines a takeover gave back for a fight.
pub const STATE_VERSION_GIVEN_BACK: u16 = 13;
/// The oldest state layout this build reads (and migrates to [`STATE_VERSION`]).
pub const STATE_VERSION_OLDEST_READ: u16 = 4;

/// The whole engine: observed objects, controller state, commands in flight.
///
/// Expected flow: append each input to the journal, then `handle(now, input)`; drain
/// `poll_command()` and execute each command, feeding the answer back as
/// [`Input::ApiResult`]; when `next_deadline()` passes, feed [`Input::Tick`].
/// Guarantees: the state after a sequence of inputs depends only on those inputs and their
/// timestamps, so replaying a journal rebuilds it exactly ([`Engine::state_hash`] proves it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "Encoded")]
pub struct Engine {
    applied_seq: u64,
    now: Timestamp,
    store: Store,
    controllers: Controllers,
    effects: Effects,
    /// Keys per registry slot that a pass left unreconciled when its budget ran out; the next
    /// `handle` reconciles them with its own.
    carried: [BTreeSet<ObjectKey>; ControllerId::COUNT],
    #[serde(skip)]
    counters: crate::metrics::Counters,
    /// The timers the last input fired: a report, not state (not hashed, not snapshotted).
    #[serde(skip)]
    fired: Fired,
    #[cfg(test)]
    #[serde(skip)]
    budget: tests::Budget,
}

/// The encoded form of an [`Engine`]: its fields in order, then the table of unreachable
/// workload clusters (the store's), present only when it is not empty.
impl Serialize for Engine {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("Engine", 7)?;
        s.serialize_field("applied_seq", &self.applied_seq)?;
        s.serialize_field("now", &self.now)?;
        s.serialize_field("store", &self.store)?;
        s.serialize_field("controllers", &self.controllers)?;
        s.serialize_field("effects", &self.effects)?;
        s.serialize_field("carried", &self.carried)?;
        let unreachable = self.store.unreachable_clusters();
        if unreachable.is_empty() {
            // Nothing written: the state of a fleet that reaches every cluster encodes as it
            // did before the table existed (the codec writes no field names or counts).
            s.skip_field("unreachable")?;
        } else {
            s.serialize_field("unreachable", &(TAIL_MARK, unreachable))?;
        }
        s.end()
    }
}

/// The byte the appended part starts with (a later addition would take another).
const TAIL_MARK: u8 = 1;

#[derive(Deserialize)]
#[serde(rename = "Engine")]
struct Encoded {
    applied_seq: u64,
    now: Timestamp,
    store: Store,
    controllers: Controllers,
    effects: Effects,
    carried: [BTreeSet<ObjectKey>; ControllerId::COUNT],
    #[serde(deserialize_with = "absent_at_the_end")]
    unreachable: BTreeMap<Scope, Unreachable>,
}

/// The appended part ([`TAIL_MARK`], then the value), or empty when the bytes end before it (a
/// state with no unreachable cluster, or one written before the table existed). Once the mark
/// is read, the value must decode: a damaged or cut table is an error, never an empty one.
fn absent_at_the_end<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    struct Tail<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de> + Default> serde::de::Visitor<'de> for Tail<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "the mark {TAIL_MARK} and the appended state, or nothing")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            use serde::de::Error;
            match seq.next_element::<u8>() {
                // A byte cannot fail to decode but at the end of the bytes.
                Err(_) | Ok(None) => Ok(T::default()),
                Ok(Some(TAIL_MARK)) => seq
                    .next_element()?
                    .ok_or_else(|| Error::invalid_length(1, &self)),
                Ok(Some(other)) => Err(Error::custom(format!(
                    "unknown mark {other} of an appended state part"
                ))),
            }
        }
    }
    deserializer.deserialize_tuple(2, Tail(std::marker::PhantomData))
}

impl From<Encoded> for Engine {
    fn from(e: Encoded) -> Engine {
        let mut store = e.store;
        store.restore_unreachable(e.unreachable);
        Engine {
            applied_seq: e.applied_seq,
            now: e.now,
            store,
            controllers: e.controllers,
            effects: e.effects,
            carried: e.carried,
            ..Engine::default()
        }
    }
}

/// [`Engine::fired_timers`]: equal whatever it holds, so a rebuilt engine equals the live one.
#[derive(Clone, Debug, Default)]
struct Fired(Vec<FiredTimer>);

impl PartialEq for Fired {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Fired {}

impl Engine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sequence number of the last applied input (journal sequence numbers start at 1).
    pub fn applied_seq(&self) -> u64 {
        self.applied_seq
    }

    pub fn now(&self) -> Timestamp {
        self.now
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The engine's store, the engine taken apart (see [`Store::into_objects`]).
    #[cfg(feature = "testing")]
    pub fn into_store(self) -> Store {
        self.store
    }

    /// Reconciles and reconcile errors per controller since this process started.
    pub fn counters(&self) -> &crate::metrics::Counters {
        &self.counters
    }

    /// The gauges at `now` ([`crate::metrics::gauges`]), with the objects a fight holds.
    pub fn gauges(&self, now: Timestamp) -> crate::metrics::Gauges {
        let mut gauges = crate::metrics::gauges(&self.store, &self.controllers.deletion, now);
        for (key, _) in self.effects.held_in_fight(now) {
            *gauges
                .writes_held
                .entry(key.kind.name().to_string())
                .or_default() += 1;
        }
        gauges
    }

    /// Tells `observer` when each reconcile begins and ends (for timing; it cannot answer).
    pub fn observe_reconciles(
        &mut self,
        observer: std::sync::Arc<dyn crate::metrics::ReconcileObserver>,
    ) {
        self.counters.observer = Some(observer);
    }

    pub fn controllers(&self) -> &Controllers {
        &self.controllers
    }

    pub fn in_flight_len(&self) -> usize {
        self.effects.in_flight_len()
    }

    /// Forgets the writes that landed lately and the fights they showed, as a state migrated
    /// from before version 12 starts: what a migrated state is compared with.
    pub fn forget_write_history(&mut self) {
        self.effects.forget_write_history();
    }

    /// Forgets the Machines a takeover gave back for a fight, as a state migrated from before
    /// version 13 starts.
    pub fn forget_given_back(&mut self) {
        self.effects.forget_given_back();
    }

    /// Whether a command is in flight or a failed write waits to be tried again.
    pub fn writes_pending(&self) -> bool {
        self.effects.in_flight_len() > 0 || self.effects.retries_pending()
    }

    /// The conditions the controllers decided while handling the last input, written or not
    /// ([`crate::decision`]).
    pub fn decisions(&self) -> &[crate::decision::Decision] {
        self.effects.decisions()
    }

    /// Applies one input at time `now` (a clock that goes backwards is held at its maximum),
    /// then reconciles every key it affected, each once.
    pub fn handle(&mut self, now: Timestamp, input: Input) {
        let before = self.check_preconditions();
        let is_tick = matches!(input, Input::Tick);
        let previous = self.now;
        self.now = self.now.max(now);
        self.applied_seq += 1;
        self.fired.0.clear();
        self.effects.clear_decisions();
        self.effects.expire_fights(self.now);
        let mut dirty = Dirty {
            slots: std::mem::take(&mut self.carried),
            ..Default::default()
        };
        self.apply(input, &mut dirty);
        self.store.forget_unreachable_without_cluster();
        self.store.pass_time(previous, self.now);
        self.reconcile(dirty);
        self.check_postconditions(&before, is_tick);
    }

    /// Updates the store and the controllers' memory for one input; collects affected keys.
    fn apply(&mut self, input: Input, dirty: &mut Dirty) {
        match input {
            Input::Upsert { scope, object } => {
                if let Some(replaced) = self.store.upsert(&scope, object) {
                    self.route_replaced(&replaced, dirty);
                }
            }
            Input::Delete { key } => {
                if let Some(replaced) = self.store.remove(&key) {
                    self.route_replaced(&replaced, dirty);
                }
            }
            Input::Relist { scope, objects } => self.relist(&scope, None, objects, dirty),
            Input::RelistKind {
                scope,
                kind,
                objects,
            } => self.relist(&scope, Some(&kind), objects, dirty),
            Input::Unlisted {
                scope,
                kind,
                problem,
            } => {
                // Whatever depends on an object of that kind must look again, including what
                // refers to one the cache never had.
                if self.store.set_unlisted(&scope, &kind, problem) {
                    self.route_unchanged(&scope, &BTreeSet::new(), dirty);
                    if scope != Scope::Management {
                        self.route_unchanged(&Scope::Management, &BTreeSet::new(), dirty);
                    }
                }
            }
            Input::Unwatched { scope, kind } => self.store.forget_kind(&scope, &kind),
            Input::ClusterUnreachable { scope, reason } => {
                // What waits on the cluster says why (or stops saying it) at once.
                if self.store.set_unreachable(&scope, reason) {
                    for (slot, controller) in self.controllers.all().into_iter().enumerate() {
                        controller.on_reachability(&self.store, &scope, &mut dirty.routed);
                        dirty.absorb(slot);
                    }
                }
            }
            Input::ApiResult { command, outcome } => {
                self.complete(command, &outcome, dirty);
            }
            Input::Tick => {
                let now = self.now;
                let fired = &mut self.fired.0;
                let from = fired.len();
                self.effects.take_due_retries(now, fired);
                for controller in self.controllers.all_mut() {
                    controller.take_due(now, fired);
                }
                for f in &fired[from..] {
                    dirty.push(f.controller.slot(), f.owner.clone());
                }
                fired[from..].sort();
            }
            Input::Restarted => {
                for (id, owner) in self.effects.forget_in_flight() {
                    dirty.push(id.slot(), owner);
                }
                for controller in self.controllers.all_mut() {
                    controller.on_restarted();
                }
                self.store.mark_unsynced_all();
            }
            Input::Batch { inputs } => {
                for input in inputs {
                    self.apply(input, dirty);
                }
            }
            Input::Ownership(ownership) => {
                if self.controllers.deletion.ownership() != ownership {
                    self.controllers.deletion.set_ownership(ownership);
                    self.every_machine_dirty(dirty);
                }
            }
            Input::OwnMachines(selector) => {
                if self.controllers.deletion.own_machines() != selector.as_ref() {
                    self.controllers.deletion.set_own_machines(selector);
                    self.every_machine_dirty(dirty);
                }
            }
            Input::Overridden { .. } => {}
            Input::CapiRelease(release) => {
                if self.controllers.deletion.capi_release() != &release {
                    self.controllers.deletion.set_capi_release(release);
                    self.every_machine_dirty(dirty);
                }
            }
        }
    }

    /// Replaces the cache of `scope` (or of one kind there) with a list's answer. Routed
    /// besides the changes: every unchanged object of the scope, since a synced cache may
    /// unblock destructive commands that were held back while it was not.
    fn relist(
        &mut self,
        scope: &Scope,
        kind: Option<&Kind>,
        objects: Vec<Object>,
        dirty: &mut Dirty,
    ) {
        let replaced = self.store.replace(scope, kind, objects);
        for (slot, controller) in self.controllers.all().into_iter().enumerate() {
            controller.on_synced(&self.store, scope, &mut dirty.routed);
            dirty.absorb(slot);
        }
        for r in &replaced {
            self.route_replaced(r, dirty);
        }
        let changed: BTreeSet<&ObjectKey> = replaced
            .iter()
            .map(|r| self.store.replaced_key(r))
            .collect();
        self.route_unchanged(scope, &changed, dirty);
    }

    /// The timers the last input fired (a [`Input::Tick`], or a batch holding ticks), sorted
    /// by kind, then the object they are about; [`crate::timer::describe_fired`] words them.
    pub fn fired_timers(&self) -> &[FiredTimer] {
        &self.fired.0
    }

    /// The next command to execute, if any. Call until `None` after every `handle`.
    #[must_use]
    pub fn poll_command(&mut self) -> Option<Command> {
        self.effects.poll()
    }

    /// The earliest time the engine wants a [`Input::Tick`]: now, when a pass left keys to
    /// reconcile.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if self.carried.iter().any(|keys| !keys.is_empty()) {
            return Some(self.now);
        }
        self.controllers
            .all()
            .iter()
            .filter_map(|c| c.next_deadline())
            .chain(self.effects.next_retry())
            .min()
    }

    /// A stable hash of the canonical encoding of the whole state (FNV-1a, 64 bits).
    pub fn state_hash(&self) -> u64 {
        Engine::hash_of_state(&self.encode_state())
    }

    /// [`Engine::state_hash`] of a state already encoded by [`Engine::encode_state`].
    pub fn hash_of_state(encoded: &[u8]) -> u64 {
        fnv1a(encoded)
    }

    /// The canonical encoding (for snapshots).
    pub fn encode_state(&self) -> Vec<u8> {
        codec::encode(self).expect("engine state always encodes: ordered maps, no floats")
    }

    pub fn decode_state(bytes: &[u8]) -> Result<Engine, codec::CodecError> {
        codec::decode(bytes)
    }

    /// Decodes a state written in layout `state_version` (from [`STATE_VERSION_OLDEST_READ`]
    /// to [`STATE_VERSION`]) into the current one.
    pub fn decode_state_of(state_version: u16, bytes: &[u8]) -> Result<Engine, codec::CodecError> {
        if !(STATE_VERSION_OLDEST_READ..=STATE_VERSION).contains(&state_version) {
            return Err(codec::CodecError::Decode(format!(
                "state version {state_version} is not one this build reads \
                 ({STATE_VERSION_OLDEST_READ} to {STATE_VERSION})"
            )));
        }
        codec::decode_layout(bytes, state_version)
    }

    /// Routes every object of `scope` not in `except` as a change from itself to itself.
    fn route_unchanged(&self, scope: &Scope, except: &BTreeSet<&ObjectKey>, dirty: &mut Dirty) {
        for (key, object) in self.store.iter_scope(scope) {
            if !except.contains(key) {
                let same = Change {
                    key,
                    before: Some(object),
                    after: Some(object),
                };
                self.route(same, dirty);
            }
        }
    }

    /// Routes what a write replaced. A removed object takes the backoffs of the writes to it
    /// along: nothing writes to it any more.
    fn route_replaced(&mut self, replaced: &Replaced, dirty: &mut Dirty) {
        let change = self.store.change(replaced);
        self.route(change, dirty);
        if change.after.is_none() {
            self.effects.forget_backoffs(change.key);
        }
    }

    fn route(&self, change: Change<'_>, dirty: &mut Dirty) {
        for (slot, controller) in self.controllers.all().into_iter().enumerate() {
            controller.affected(&self.store, &change, &mut dirty.routed);
            dirty.absorb(slot);
        }
    }

    fn complete(&mut self, id: u64, sent: &ApiOutcome, dirty: &mut Dirty) {
        let outcome = &*sent.as_answered();
        let Some((command, waiters)) = self.effects.complete(id, outcome, self.now) else {
            crate::mark::hit("result_for_a_command_not_in_flight");
            tracing::debug!(
                command = id,
                "result for a command not in flight (after a restart?)"
            );
            return;
        };
        let target = &command.action.target().key;
        let replaced = match sent {
            ApiOutcome::Ok {
                object: Some(object),
            } if keeps_answer(&command.action, object, self.store.get(target).is_some()) => {
                self.store.upsert(&target.scope, Object::clone(object))
            }
            // The API says the object does not exist: the cache learns it now, not when a
            // (possibly lost) watch event catches up, so no controller keeps writing to it.
            ApiOutcome::NotFound if !matches!(command.action, Action::RecordEvent { .. }) => {
                crate::mark::hit("not_found_answer_removes_the_object");
                self.store.remove(target)
            }
            // A DELETE that removed an object the cache never had: gone, and now known to be.
            ApiOutcome::Ok { object: None } if is_deletion(&command.action) => {
                self.store.note_gone(target);
                None
            }
            _ => None,
        };
        if let Some(replaced) = replaced {
            self.route_replaced(&replaced, dirty);
        }
        let slot = command.controller.slot();
        if crate::metrics::is_reconcile_error(&command.action, outcome) {
            self.counters.failing[slot].insert(command.owner.clone());
        }
        self.controllers.all_mut()[slot].on_result(&command, outcome, self.now);
        // A withheld command (shadow) changed nothing a decision reads: the same decision
        // about the same object is not made again ([`crate::controller::Issued::Withheld`]),
        // and a withheld Event (no intent to hold it) does not wake its owner at all, or the
        // owner would decide it again at the same instant for ever.
        let withheld = matches!(sent, ApiOutcome::NotSent { .. });
        if withheld {
            let version = crate::controller::target_version(&self.store, target);
            self.effects.note_withheld(&command, version, &self.store);
        }
        if !(withheld && matches!(command.action, Action::RecordEvent { .. })) {
            dirty.push(slot, command.owner.clone());
        }
        for (controller, owner) in waiters {
            dirty.push(controller.slot(), owner);
        }
    }

    /// Reconciles each dirty key once, in slot then key order, up to the budget; what is left
    /// is carried to the next input.
    fn reconcile(&mut self, mut dirty: Dirty) {
        let mut budget = self.reconciles_per_input_max();
        for slot in 0..dirty.slots.len() {
            while let Some(key) = dirty.slots[slot].pop_first() {
                if budget == 0 {
                    dirty.push(slot, key);
                    self.carry(dirty);
                    return;
                }
                budget -= 1;
                self.reconcile_key(slot, &key);
            }
        }
    }

    /// The deletion controller reconciles every Machine (its ownership changed).
    fn every_machine_dirty(&self, dirty: &mut Dirty) {
        let slot = ControllerId::Deletion.slot();
        for (key, _) in self.store.iter_kind(&Scope::Management, &Kind::Machine) {
            dirty.push(slot, key.clone());
        }
    }

    fn reconcile_key(&mut self, slot: usize, key: &ObjectKey) {
        // Beside CAPI's manager, the MachineSet remediation is CAPI's, and so are the health
        // checks and MachinePools this controller has not adopted: it writes nothing for them.
        if self.controllers.deletion.ownership() == Ownership::Takeover
            && slot != ControllerId::Deletion.slot()
        {
            let adoptable =
                slot == ControllerId::Health.slot() || slot == ControllerId::Pool.slot();
            // Other keys (a Machine or Node whose change an MHC or pool must see) only route
            // to the MHCs and pools, which are gated themselves.
            let ours = match key.kind {
                Kind::MachineHealthCheck | Kind::MachinePool => self
                    .store
                    .get(key)
                    .is_some_and(|o| crate::ownership::adopted(o.meta())),
                _ => true,
            };
            if !(adoptable && ours) {
                // Its conditions are CAPI's again (given back, or never adopted).
                if adoptable && matches!(key.kind, Kind::MachineHealthCheck | Kind::MachinePool) {
                    let controller = self.controllers.all()[slot].id();
                    let none = crate::decision::Decision::none(controller, key.clone());
                    self.effects.report(none);
                }
                return;
            }
        }
        let mut cx = Cx {
            now: self.now,
            store: &self.store,
            cause: self.applied_seq,
            owner: key.clone(),
            effects: &mut self.effects,
        };
        if let Some(observer) = &self.counters.observer {
            observer.began(slot);
        }
        self.controllers.all_mut()[slot].reconcile(key, &mut cx);
        if let Some(observer) = &self.counters.observer {
            observer.ended(slot);
        }
        self.counters.reconciles[slot] += 1;
        if self.counters.failing[slot].remove(key) {
            self.counters.errors[slot] += 1;
        }
    }

    #[cfg(not(test))]
    fn reconciles_per_input_max(&self) -> usize {
        RECONCILES_PER_INPUT_MAX
    }

    #[cfg(not(test))]
    fn budget_exhaustion_expected(&self) -> bool {
        false
    }

    /// The budget ran out with `left` still dirty: a bug, or an input far beyond any fleet
    /// this was sized for. The keys are not dropped: the next input reconciles them.
    fn carry(&mut self, left: Dirty) {
        let keys: usize = left.slots.iter().map(BTreeSet::len).sum();
        tracing::error!(
            input = self.applied_seq,
            keys,
            "reconcile budget exhausted: the keys left are carried to the next input"
        );
        self.counters.reconcile_budget_exhausted += 1;
        crate::mark::hit("reconcile_budget_exhausted");
        debug_assert!(
            self.budget_exhaustion_expected(),
            "reconcile budget exhausted for input #{} with {keys} keys left",
            self.applied_seq
        );
        for (carried, keys) in self.carried.iter_mut().zip(left.slots) {
            carried.extend(keys);
        }
    }
}

/// Whether the object a write answered with goes into the cache. An answer may arrive after
/// the watch reported the object deleted (or carry the last state of an object the write just
/// released): it must not bring back what is gone. Only a create adds an object the cache
/// does not hold.
fn is_deletion(action: &Action) -> bool {
    matches!(
        action,
        Action::DeleteInfrastructure { .. }
            | Action::DeleteBootstrap { .. }
            | Action::DeleteNode { .. }
            | Action::DeleteRemediation { .. }
    )
}

/// Whether the cache takes a write's answer as the object's new state: not an object the
/// write released (its last finalizer removed while it is being deleted: it is gone), and
/// only for an object it holds, unless the write created it. `lifecycle explain` reads
/// answers by the same rule.
pub fn keeps_answer(action: &Action, object: &Object, cached: bool) -> bool {
    let meta = object.meta();
    let released = matches!(action, Action::RemoveFinalizer { .. })
        && meta.is_deleting()
        && meta.finalizers.is_empty();
    if released {
        crate::mark::hit("released_object_not_brought_back");
        return false;
    }
    cached
        || matches!(
            action,
            Action::CreateMachine { .. } | Action::CreateRemediation { .. }
        )
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
