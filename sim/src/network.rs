//! The network between the fake API servers and the controller: how watch events, command
//! results and relists reach the engine.
//!
//! Outside delivery faults everything arrives at once, in one canonical order (a command's
//! result, then the watch events of its write), so plain `sim run` timelines stay stable.
//! Under a delivery fault each arrival travels with its own latency (milliseconds, so the
//! controller's clock leaves whole seconds as it does in production) and lands in a backlog
//! that is fed the way `lifecycle run` feeds its channel: whatever has arrived, as one batch.
//! The kinds, each counted when it changes what the controller sees:
//!
//! - `reordered-delivery`: a write's result and its watch event in either order, in one batch
//!   or in separate ones (`event-before-result`, `result-before-event`, `same-batch`);
//! - `coalesced-events`: a slow consumer; several writes to one object reach it as the last
//!   state only;
//! - `watch-expired`: one stream's watch ends with 410 Gone and lists again (its events written
//!   meanwhile are in the list, not delivered on their own; the intake relists the cluster);
//! - `relist-duplicates`: after a relist, the watch repeats the current state of objects the
//!   list already carried;
//! - `write-timeout`: a request times out although the write happened (its watch event still
//!   arrives);
//! - `backlog-batches`: the backlog is fed in batches of random size.

use crate::api::{ObjKey, Written};
use crate::env::Env;
use crate::event::{Delivery, Event};
use crate::faults::Faults;
use crate::process::Process;
use crate::scenario::FaultKind;
use crate::wire::{DELIVERY_KINDS, DELIVERY_ORDERS};
use engine::intake::streams::stream_id;
use engine::model::Scope;
use engine::time::{Duration, Timestamp};
use engine::{ApiOutcome, BATCH_INPUTS_MAX};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};

/// Per watch event under `watch-expired`: the chance that the watch ends with 410 instead.
const WATCH_EXPIRY_PER_EVENT: f64 = 0.05;
/// How many recently changed objects a `relist-duplicates` watch repeats.
const DUPLICATES_MAX: usize = 5;
/// The chance that an answer takes 0.1 to 2 s instead of a few milliseconds.
const RESULT_TAIL_CHANCE: f64 = 0.1;
/// Longest a slow consumer holds events under `coalesced-events`, in ms.
const COALESCE_HOLD_MAX_MS: i64 = 1500;
/// Largest backlog batch under `backlog-batches`.
const RANDOM_BATCH_MAX: usize = 6;

#[derive(Debug)]
pub struct Network {
    rng: ChaCha8Rng,
    /// Arrivals the controller has not read yet, in arrival order.
    backlog: VecDeque<Delivery>,
    /// A controller restart drops what was in flight to the old process.
    pub epoch: u64,
    /// Held events of a slow consumer, latest state per object, in first-arrival order.
    coalescing: BTreeMap<Scope, Vec<Written>>,
    /// Streams `(cluster, group/Kind)` whose watch expired: their events are dropped until
    /// their list lands.
    relisting: BTreeMap<(Scope, String), Timestamp>,
    /// The last objects each scope's watch delivered (for duplicates after a relist).
    recent: BTreeMap<Scope, VecDeque<ObjKey>>,
    /// Arrivals sent and not arrived yet.
    in_transit: usize,
    /// When each watch stream's last event arrives: a watch is one ordered stream, so a later
    /// event never overtakes an earlier one of the same stream.
    stream_tail: BTreeMap<(Scope, String), Timestamp>,
    /// Under `backlog-batches` the loop reads its backlog only when it wakes: whether a wake
    /// is scheduled, and whether it has come.
    wake_scheduled: bool,
    awake: bool,
    /// Results sent, by command: the written object and whether its watch event was read
    /// before the result.
    results_in_flight: BTreeMap<u64, (Scope, ObjKey, bool)>,
}

impl Network {
    pub fn new(seed: u64) -> Self {
        Network {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6e65_7477_6f72_6b00),
            backlog: VecDeque::new(),
            epoch: 0,
            coalescing: BTreeMap::new(),
            relisting: BTreeMap::new(),
            recent: BTreeMap::new(),
            in_transit: 0,
            stream_tail: BTreeMap::new(),
            wake_scheduled: false,
            awake: false,
            results_in_flight: BTreeMap::new(),
        }
    }

    /// The process died: nothing in flight reaches the new one.
    pub fn reset(&mut self) {
        self.epoch += 1;
        self.backlog.clear();
        self.coalescing.clear();
        self.relisting.clear();
        self.results_in_flight.clear();
        self.stream_tail.clear();
        self.wake_scheduled = false;
        self.awake = false;
    }

    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    fn latency(&mut self, max_ms: i64) -> Duration {
        Duration(self.rng.random_range(1..=max_ms))
    }

    fn remember(&mut self, scope: &Scope, key: &ObjKey) {
        let recent = self.recent.entry(scope.clone()).or_default();
        recent.retain(|k| k != key);
        recent.push_back(key.clone());
        if recent.len() > DUPLICATES_MAX {
            recent.pop_front();
        }
    }
}

impl Network {
    /// Whether arrivals for `scope` travel through the network (some delivery fault is on).
    fn through(&self, faults: &Faults, now: Timestamp, scope: &Scope) -> bool {
        DELIVERY_KINDS
            .iter()
            .any(|k| faults.is_active(scope, now, *k))
            || self.has_backlog()
    }

    /// Whether a watch ended and its list has not landed yet.
    pub(crate) fn relisting_any(&self) -> bool {
        !self.relisting.is_empty()
    }

    /// Whether anything is on its way to the controller or waits in its backlog.
    pub(crate) fn busy(&self) -> bool {
        self.in_transit > 0 || self.has_backlog() || !self.coalescing.is_empty()
    }

    fn send(&mut self, env: &mut Env<'_>, after: Duration, delivery: Delivery) {
        self.in_transit += 1;
        let epoch = self.epoch;
        env.schedule_in(
            after,
            Event::Arrive {
                epoch,
                delivery: Box::new(delivery),
            },
        );
    }

    /// A watch event leaves the API server. Returns `false` when it takes the canonical path.
    /// A watch that expires is one of those `process` has on `scope`.
    pub(crate) fn send_watch(
        &mut self,
        env: &mut Env<'_>,
        faults: &mut Faults,
        process: &Process,
        scope: &Scope,
        written: &Written,
    ) -> bool {
        let now = env.clock.now;
        let stream = stream_id(&written.key.group, &written.key.kind);
        let key = (scope.clone(), stream);
        if self.relisting.get(&key).is_some_and(|until| now < *until) {
            // The list in progress carries this change.
            return true;
        }
        if !self.through(faults, now, scope) {
            return false;
        }
        if faults.is_active(scope, now, FaultKind::WatchExpired)
            && self.rng.random_bool(WATCH_EXPIRY_PER_EVENT)
        {
            self.expire_watch(env, faults, process, scope, Some(key.1));
            return true;
        }
        if faults.is_active(scope, now, FaultKind::CoalescedEvents) {
            let held = self.coalescing.entry(scope.clone()).or_default();
            let first = held.is_empty();
            match held.iter_mut().find(|w| w.key == written.key) {
                Some(w) => {
                    *w = written.clone();
                    faults.fire(FaultKind::CoalescedEvents);
                }
                None => held.push(written.clone()),
            }
            // Later events of this stream must not overtake the held ones.
            let latest_flush = now + Duration(COALESCE_HOLD_MAX_MS);
            let tail = self.stream_tail.entry(key).or_insert(latest_flush);
            *tail = (*tail).max(latest_flush);
            if first {
                let hold = Duration(self.rng.random_range(200..=COALESCE_HOLD_MAX_MS));
                let scope = scope.clone();
                self.send(env, hold, Delivery::Coalesced { scope });
            }
            return true;
        }
        let mut at = now + self.latency(40);
        let tail = self.stream_tail.entry(key).or_insert(at);
        at = at.max(*tail);
        *tail = at;
        let arrival = Delivery::Watch {
            scope: scope.clone(),
            written: Box::new(written.clone()),
        };
        self.send(env, at.since(now), arrival);
        true
    }

    /// One watch of `scope` (`stream`, or one drawn from those `process` has) ends with 410
    /// Gone: its watcher lists again.
    pub(crate) fn expire_watch(
        &mut self,
        env: &mut Env<'_>,
        faults: &mut Faults,
        process: &Process,
        scope: &Scope,
        stream: Option<String>,
    ) {
        let Some(stream) = stream.or_else(|| self.draw_stream(&process.streams_of(scope))) else {
            return;
        };
        faults.fire(FaultKind::WatchExpired);
        let took = Duration(self.rng.random_range(50..=800));
        self.relisting
            .insert((scope.clone(), stream.clone()), env.clock.now + took);
        env.line(
            "world",
            "WatchExpired",
            crate::api::scope_name(scope),
            format!("the watch of {stream} ended with 410 Gone: the controller lists it again"),
        );
        let scope = scope.clone();
        self.send(env, took, Delivery::Relist { scope, stream });
    }

    /// One of `streams`, drawn from the network's stream.
    fn draw_stream(&mut self, streams: &[String]) -> Option<String> {
        if streams.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..streams.len());
        Some(streams[i].clone())
    }

    /// A command's answer leaves the API server; `timeout`: the write happened but the request
    /// timed out (`write-timeout`, drawn by the caller). Returns the answer to hand over at once
    /// on the canonical path.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_result(
        &mut self,
        env: &mut Env<'_>,
        faults: &Faults,
        scope: &Scope,
        key: &ObjKey,
        command: u64,
        outcome: ApiOutcome,
        timeout: Option<crate::wire::Timeout>,
    ) -> Option<ApiOutcome> {
        let outcome = match timeout {
            Some(timeout) => {
                env.line(
                    "api",
                    "Timeout",
                    String::new(),
                    format!("command #{command}: the request timed out after the write happened"),
                );
                timeout.outcome()
            }
            None => outcome,
        };
        if !self.through(faults, env.clock.now, scope) {
            return Some(outcome);
        }
        self.results_in_flight
            .insert(command, (scope.clone(), key.clone(), false));
        // Answers share a connection pool with other requests: now and then one is slow.
        let latency = if self.rng.random_bool(RESULT_TAIL_CHANCE) {
            Duration(self.rng.random_range(100..=2000))
        } else {
            self.latency(80)
        };
        self.send(env, latency, Delivery::Result { command, outcome });
        None
    }

    /// An arrival reaches the controller's backlog.
    pub(crate) fn arrive(&mut self, epoch: u64, delivery: Delivery) {
        self.in_transit = self.in_transit.saturating_sub(1);
        if epoch != self.epoch {
            return;
        }
        match delivery {
            Delivery::Coalesced { scope } => {
                let held = self.coalescing.remove(&scope).unwrap_or_default();
                for written in held {
                    let scope = scope.clone();
                    let written = Box::new(written);
                    self.backlog.push_back(Delivery::Watch { scope, written });
                }
            }
            Delivery::Wake => {
                self.wake_scheduled = false;
                self.awake = true;
            }
            other => self.backlog.push_back(other),
        }
    }

    /// Whether the controller reads its backlog now, as `lifecycle run` reads its channel:
    /// at once, unless `busy` (`backlog-batches`), when only once its busy loop wakes.
    pub(crate) fn ready_to_read(&mut self, env: &mut Env<'_>, busy: bool) -> bool {
        if busy && self.has_backlog() && !std::mem::take(&mut self.awake) {
            if !self.wake_scheduled {
                self.wake_scheduled = true;
                let busy_for = Duration(self.rng.random_range(50..=500));
                self.send(env, busy_for, Delivery::Wake);
            }
            return false;
        }
        true
    }

    /// The next batch of the backlog: what has arrived, or a batch of random size when `busy`.
    pub(crate) fn take_batch(&mut self, faults: &mut Faults, busy: bool) -> Option<Vec<Delivery>> {
        if !self.has_backlog() {
            return None;
        }
        let n = if busy {
            let n = self.rng.random_range(1..=RANDOM_BATCH_MAX);
            if n < self.backlog.len() {
                faults.fire(FaultKind::BacklogBatches);
            }
            n
        } else {
            BATCH_INPUTS_MAX
        };
        let take = n.min(self.backlog.len());
        let arrivals: Vec<Delivery> = self.backlog.drain(..take).collect();
        self.count_orders(faults, &arrivals);
        Some(arrivals)
    }

    /// Counts the orders a batch shows: results read with, before or after their watch events.
    fn count_orders(&mut self, faults: &mut Faults, batch: &[Delivery]) {
        let watched: Vec<(&Scope, &ObjKey)> = batch
            .iter()
            .filter_map(|a| match a {
                Delivery::Watch { scope, written } => Some((scope, &written.key)),
                _ => None,
            })
            .collect();
        for arrival in batch {
            let Delivery::Result { command, .. } = arrival else {
                continue;
            };
            let Some((scope, key, seen)) = self.results_in_flight.remove(command) else {
                continue;
            };
            let [before, after, same] = DELIVERY_ORDERS;
            let order = if watched.contains(&(&scope, &key)) {
                same
            } else if seen {
                after
            } else {
                before
            };
            faults.fire_order(order);
            if order != before {
                // The canonical order is the result first: anything else is the fault at work.
                faults.fire(FaultKind::ReorderedDelivery);
            }
        }
        for (scope, key, seen) in self.results_in_flight.values_mut() {
            if watched.contains(&(&*scope, &*key)) {
                *seen = true;
            }
        }
    }

    /// A relist landed: its stream's events are delivered again.
    pub(crate) fn relisted(&mut self, scope: &Scope, stream: &str) {
        self.relisting.remove(&(scope.clone(), stream.to_string()));
    }

    /// The objects whose current state the watch after a relist repeats (recently changed).
    pub(crate) fn recent(&self, scope: &Scope) -> Vec<ObjKey> {
        self.recent
            .get(scope)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A watch event is read: the objects a relist's duplicates repeat follow it.
    pub(crate) fn read_watch(&mut self, scope: &Scope, key: &ObjKey) {
        self.remember(scope, key);
    }

    /// `relist-duplicates` starting: one watch of its cluster restarts at once.
    pub(crate) fn restart_watch(&mut self, env: &mut Env<'_>, process: &Process, scope: &Scope) {
        let Some(stream) = self.draw_stream(&process.streams_of(scope)) else {
            return;
        };
        let took = self.latency(200);
        let scope = scope.clone();
        self.send(env, took, Delivery::Relist { scope, stream });
    }
}
