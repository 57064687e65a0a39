//! The simulation's driver: a virtual clock with an ordered event queue, the controller's loop
//! over the engine, and the parts it plays against (the fake API of every cluster, the fake
//! world reacting to writes, the network, the faults, the checks, the timeline).
//!
//! The fake API's deliveries reach the engine through `engine::runtime::Loop` (and its
//! `engine::intake`), the sans-IO loop `lifecycle run` drives with tokio, so the simulator keeps
//! no second copy of it: the batching, the journal-before-apply rule, the in-flight caps, the
//! priority and eviction order and the tick spacing are the loop's. Watching a resource type is
//! listing it (`Init`, `InitApply` of each object, `InitDone`, as kube's `watcher` reports a
//! list), then handing each write of that type over as a watch event; answers go in as they
//! come back. What the intake makes of them (the first list of a cluster once every stream
//! listed, a relist of one kind when its stream lists again, one batch for whatever arrived
//! together) is what the engine is fed.

use crate::api::{FakeApi, ObjKey, Written};
use crate::checks::Checks;
use crate::clock::Clock;
use crate::env::Env;
use crate::event::{Delivery, Event, Work};
use crate::expect::View;
pub(crate) use crate::process::External;
pub use crate::process::Process;
use crate::scenario::Scenario;
use crate::scenario::{FaultKind, FaultSpec, StepAction};
use crate::timeline::Timeline;
use crate::world::WorldState;
use engine::convert::ApiRequest;
use engine::intake::Arrival;
use engine::intake::mirror::{Delivered, StreamEvent};
use engine::intake::streams::stream_id;
use engine::model::{ClusterName, ObjectKey, Scope};
use engine::runtime::{Loop, LoopOptions, Output};
use engine::time::{Duration, Timestamp};
use engine::{ApiOutcome, Command, Withheld};
use engine::{Engine, Input};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The [`Env`] of a `Sim`'s parts, borrowing only the fields it names (so the world, the
/// faults or the network can be borrowed beside it).
macro_rules! env_of {
    ($sim:ident) => {
        Env {
            clock: &mut $sim.clock,
            api: &mut $sim.api,
            timeline: &mut $sim.timeline,
            checks: &mut $sim.checks,
        }
    };
}

/// Bound on work items handled at one simulated instant (a controller/world feedback loop
/// that never settles is a bug, reported instead of hanging).
pub const WORK_PER_INSTANT_MAX: usize = 200_000;
/// Bound on ticks in a row after which the engine's deadline is still due (a deadline kept in
/// the past is reported, and time moves on, instead of ticking forever).
pub const TICKS_PER_INSTANT_MAX: u32 = 1_000;

pub struct Sim {
    pub scenario: Scenario,
    pub seed: u64,
    /// Simulated time: the span, the instant, what is scheduled and this instant's work.
    pub clock: Clock,
    /// The fake API of every cluster.
    pub api: FakeApi,
    /// The controller's loop (`engine::runtime`) over the engine, as `lifecycle run` drives it.
    pub(crate) lp: Loop<Engine>,
    pub timeline: Timeline,
    pub(crate) world: WorldState,
    pub(crate) faults: crate::faults::Faults,
    /// What the run is judged by.
    pub checks: Checks,
    pub(crate) net: crate::network::Network,
    /// How the controller process meets the world: its journal, watches and connections.
    pub process: Process,
}

impl Sim {
    pub fn new(scenario: Scenario, seed: u64, feeder: crate::feed::Feeder) -> Self {
        let knobs = scenario.world.clone();
        let start = knobs.start;
        let end = start + scenario.duration;
        let expect = crate::expect::Tracker::new(&scenario);

        Sim {
            seed,
            clock: Clock::new(start, end),
            api: FakeApi::default(),
            lp: Loop::new(Engine::new(), LoopOptions::default()),
            timeline: Timeline::default(),
            world: WorldState {
                capi: crate::capi::CapiModel::new(knobs.capi_manager, knobs.capi_release.clone()),
                knobs,
                ..Default::default()
            },
            faults: crate::faults::Faults::new(seed),
            checks: Checks {
                expect,
                invariants: Default::default(),
            },
            net: crate::network::Network::new(seed),
            process: Process {
                feeder,
                watched: BTreeSet::new(),
                deferred_watches: BTreeSet::new(),
                connecting: BTreeSet::new(),
                malformed: BTreeSet::new(),
                batching: false,
                ticks_stuck: (None, 0),
                external: None,
                lost_writes: None,
            },
            scenario,
        }
    }

    pub fn schedule(&mut self, at: Timestamp, event: Event) {
        self.clock.schedule(at, event);
    }

    pub fn schedule_in(&mut self, after: Duration, event: Event) {
        self.clock.schedule_in(after, event);
    }

    /// Records a timeline line at the current time.
    pub fn line(&mut self, actor: &str, action: &str, object: String, detail: String) {
        self.env().line(actor, action, object, detail);
    }

    /// The world, and what it acts through.
    pub(crate) fn world_env(&mut self) -> (&mut WorldState, Env<'_>) {
        let env = env_of!(self);
        (&mut self.world, env)
    }

    /// What the world's parts act through.
    pub(crate) fn env(&mut self) -> Env<'_> {
        env_of!(self)
    }

    /// Queues the watch event of a write.
    pub(crate) fn changed(&mut self, scope: &Scope, written: Written) {
        self.env().changed(scope, written);
    }

    /// The engine, as the controller's loop holds it.
    pub fn engine(&self) -> &Engine {
        self.lp.core()
    }

    /// Feeds an input of the controller's own (journaled and applied in turn), then carries
    /// out what the loop asks.
    pub(crate) fn feed(&mut self, input: Input) {
        self.lp.feed(input);
        self.pump();
    }

    /// Runs to the end of the scenario.
    pub fn run(&mut self) {
        self.run_to(self.clock.end.since(self.clock.start));
        self.clock.now = self.clock.end;
        self.finish_run();
    }

    /// Runs what is due up to `offset` from the start (never past the scenario's end): a test
    /// looks at the engine between calls, then ends the run with [`Sim::run`].
    pub fn run_to(&mut self, offset: Duration) {
        if self.process.batching {
            self.settle();
        }
        self.schedule_engine_tick();
        self.run_until(self.clock.start + offset);
    }

    /// Handles every event scheduled up to `until` (never past the scenario's end).
    pub(crate) fn run_until(&mut self, until: Timestamp) {
        let until = until.min(self.clock.end);
        while let Some(at) = self.clock.next_at().filter(|at| *at <= until) {
            self.quiet_check_before(at);
            let event = self.clock.advance(until).expect("an event is due");
            self.handle_event(event);
            self.settle();
            if !self.clock.more_now() {
                self.drain_backlog();
            }
            self.after_instant_step();
        }
    }

    /// When the next scheduled event is due.
    pub(crate) fn next_event_at(&self) -> Option<Timestamp> {
        self.clock.next_at()
    }

    /// `During` windows (and, with a tolerance, point expectations) look at the world now.
    pub(crate) fn observe_expectations(&mut self) {
        self.with_tracker(|t, sim| t.observe(sim));
    }

    /// The end-of-run checks, at the scenario's end.
    pub(crate) fn finish_run(&mut self) {
        self.clock.now = self.clock.end;
        if self.process.external.is_none() {
            self.lp.finish_comparison(self.clock.end);
            self.note_disagreements();
        }
        self.check_release();
        self.check_convergence();
        // A controller in another process may be mid-update at the end: judged only when quiet.
        self.check_mhc_differential(self.process.external.is_none());
        self.check_liveness();
        self.with_tracker(|t, sim| t.finish(sim));
    }

    /// Beside CAPI's manager (shadow, takeover) the controller follows its release, as `lifecycle
    /// run` does by reading its Deployment every 30 s: in process it is told at the upgrade.
    fn tell_capi_release(&mut self, release: &crate::scenario::CapiRelease) {
        if self.process.external.is_some() || self.lp.options().mode == engine::runtime::Mode::Alone
        {
            return;
        }
        let judged = match engine::release::Release::parse(&release.0) {
            Ok(r) => r.judged(),
            Err(e) => engine::ownership::CapiRelease {
                release: format!("unknown ({e})"),
                support: engine::ownership::ReleaseSupport::Unknown,
            },
        };
        if self
            .engine()
            .controllers()
            .deletion
            .capi_release()
            .is_news(&judged)
        {
            self.feed(Input::CapiRelease(judged));
        }
    }

    fn handle_event(&mut self, event: Event) {
        match event {
            Event::Step(i) => {
                let step = self.scenario.timeline[i].clone();
                if let StepAction::Fault(spec) = &step.action {
                    self.start_fault_step(spec, step.cluster.as_deref());
                } else {
                    let (world, mut env) = self.world_env();
                    world.play(&mut env, &step);
                    if let StepAction::CapiRelease(release) = &step.action {
                        self.tell_capi_release(release);
                    }
                }
            }
            Event::EngineTick => self.tick(),
            Event::Checkpoint => {}
            Event::Arrive { epoch, delivery } => self.net.arrive(epoch, *delivery),
            Event::FaultEnds { fault } => self.fault_ends(fault),
            Event::CacheSynced { scope } => self.cache_synced(scope),
            Event::Uncorrupt {
                scope,
                key,
                restore,
            } => self.uncorrupt(&scope, &key, &restore),
            Event::NodeFlap {
                scope,
                node,
                period,
                until,
                ready,
            } => self.node_flap(scope, node, period, until, ready),
            Event::KubeconfigRestored { scope, original } => {
                self.restore_kubeconfig(&scope, original)
            }
            Event::DelayedCommand { command } => self.execute_after_delay(*command),
            other => {
                let mut env = env_of!(self);
                self.world.world_event(&mut env, &mut self.faults, other);
            }
        }
    }

    /// Handles queued work until nothing is left at this instant.
    pub(crate) fn settle(&mut self) {
        let mut budget = WORK_PER_INSTANT_MAX;
        loop {
            let Some(work) = self.clock.work.pop_front() else {
                // Batching: the loop is polled once the instant's work runs dry.
                if self.process.batching && self.process.external.is_none() && self.lp.has_work() {
                    self.poll_loop();
                    continue;
                }
                break;
            };
            if budget == 0 {
                self.line(
                    "invariant",
                    "Violation",
                    String::new(),
                    "the world and the controllers did not settle at this instant".into(),
                );
                self.checks
                    .invariants
                    .violate("liveness: no settling at one instant".to_string());
                self.clock.work.clear();
                return;
            }
            budget -= 1;
            match work {
                Work::Changed { scope, written } => {
                    let (world, mut env) = self.world_env();
                    world.react(&mut env, &scope, &written);
                    self.deliver(&scope, written);
                    self.with_tracker(|t, sim| t.observe(sim));
                    // A self-hosted controller whose own pod terminates dies with it, and is
                    // started again (its replacement pod elsewhere).
                    if std::mem::take(&mut self.world.controller_pod_evicted) {
                        self.restart_controller(false);
                    }
                }
                Work::Command(command) => self.execute(command),
            }
        }
    }

    fn after_instant_step(&mut self) {
        let pending = self.controller_pending();
        self.checks
            .invariants
            .convergence
            .quiet
            .note(self.clock.now, pending);
        self.check_release();
        self.process.feeder.end_of_instant(self.lp.core());
        self.schedule_engine_tick();
        if !self.clock.more_now() {
            self.with_tracker(|t, sim| t.checkpoint(sim));
        }
    }

    /// The loop's wake-up: a `Tick` when the engine's deadline has come (at least the loop's
    /// tick spacing after the last one). A deadline still due after more than
    /// [`TICKS_PER_INSTANT_MAX`] ticks in a row is kept in the past: reported once, and time
    /// moves on without it.
    fn tick(&mut self) {
        // The loop's wake: the engine's deadline, or a shadow comparison's window closing.
        let due = self.lp.next_wake().filter(|d| *d <= self.clock.now);
        let Some(due) = due else {
            self.process.ticks_stuck = (None, 0);
            return;
        };
        let stuck = match self.process.ticks_stuck {
            (Some(d), n) if d == due => n + 1,
            _ => 1,
        };
        self.process.ticks_stuck = (Some(due), stuck);
        if stuck > TICKS_PER_INSTANT_MAX {
            if stuck == TICKS_PER_INSTANT_MAX + 1 {
                let message = format!(
                    "liveness: the engine asks to be woken at {} again and again (a deadline that stays in the past)",
                    self.offset_of(due)
                );
                self.line("invariant", "Violation", String::new(), message.clone());
                self.checks.invariants.violate(message);
            }
            return;
        }
        self.lp.handle_timeout(self.clock.now);
        self.pump();
    }

    /// Schedules the loop's next wake-up, when it has one.
    pub(crate) fn schedule_engine_tick(&mut self) {
        let Some(at) = self.lp.next_wake() else {
            return;
        };
        if self.process.ticks_stuck.1 > TICKS_PER_INSTANT_MAX
            && self.lp.next_wake() == self.process.ticks_stuck.0
        {
            return;
        }
        let at = at.max(self.clock.now);
        let already = self.clock.has_at(at, |e| matches!(e, Event::EngineTick));
        if !already {
            self.schedule(at, Event::EngineTick);
        }
    }

    /// Delivers a write to the engine as a watch event would, unless a fault hides it.
    fn deliver(&mut self, scope: &Scope, written: Written) {
        if self.process.external.is_some() {
            return;
        }
        if self.faults.hides_watch(scope, self.clock.now) {
            self.faults.missed_watch(scope, self.clock.now);
            return;
        }
        if self.send_watch(scope, &written) {
            return;
        }
        self.push_watch(scope, written);
        self.pump();
    }

    /// Converts the object an answer carries; a malformed one is reported once and reaches the
    /// engine as unreadable (unknown, never absent: the answer says the object is there).
    fn convert_answer(
        &mut self,
        scope: &Scope,
        key: &ObjKey,
        obj: &Value,
    ) -> Option<engine::model::Object> {
        match engine::convert::object_from_json(obj) {
            Ok(o) => o,
            Err(e) => {
                self.report_malformed(scope, key, &e.to_string());
                engine::convert::unreadable_of_json(scope, obj, &e)
            }
        }
    }

    pub(crate) fn report_malformed(&mut self, scope: &Scope, key: &ObjKey, error: &str) {
        if self.process.malformed.insert((scope.clone(), key.clone())) {
            let object = crate::api::describe(scope, key);
            self.line(
                "api",
                "Malformed",
                object,
                format!("the controllers cannot read this object and treat it as unknown: {error}"),
            );
        }
    }

    fn with_tracker(&mut self, f: impl FnOnce(&mut crate::expect::Tracker, &View<'_>)) {
        let view = View {
            scenario: &self.scenario,
            clock: &self.clock,
            api: &self.api,
            timeline: &self.timeline,
        };
        f(&mut self.checks.expect, &view);
    }

    pub fn offset_of(&self, t: Timestamp) -> Duration {
        self.clock.offset_of(t)
    }

    /// Checks the release rule at the end of an instant (and at the end of the run).
    pub(crate) fn check_release(&mut self) {
        if !self.checks.invariants.release.waits() {
            return;
        }
        // A controller that has not listed every cluster yet waits for it, by design.
        let unsynced = self.checks.invariants.synced.len() <= self.api.workloads.len()
            || !self.faults.unsynced.is_empty();
        let faulted = unsynced
            || crate::release::API_FAULTS.iter().any(|k| {
                self.faults
                    .is_active(&Scope::Management, self.clock.now, *k)
            });
        for (key, waited) in self
            .checks
            .invariants
            .release
            .overdue(self.clock.now, faulted)
        {
            let message = format!(
                "finalizer held: Machine {key} says DeletionCompleted but still has finalizer {} after {waited}",
                engine::model::MACHINE_FINALIZER
            );
            self.line("invariant", "Violation", key.to_string(), message.clone());
            self.checks.invariants.violate(message);
        }
    }

    /// Before the world moves on to `next`: if it was quiet for the differential's quiet
    /// period before then, check at that moment (nothing changed in between, and no engine
    /// deadline fell there, or it would be the next event).
    pub(crate) fn quiet_check_before(&mut self, next: Timestamp) {
        let now = self.clock.now;
        let converged_at = self
            .checks
            .invariants
            .convergence
            .quiet
            .due_before(now, next);
        let quiet_at = self.checks.invariants.differential.quiet_before(now, next);
        if let Some(at) = converged_at.filter(|c| quiet_at.is_none_or(|q| *c <= q)) {
            self.clock.now = at;
            self.check_convergence();
        }
        if let Some(quiet_at) = quiet_at {
            self.clock.now = quiet_at;
            self.check_mhc_differential(false);
        }
        if let Some(at) = converged_at.filter(|c| quiet_at.is_some_and(|q| *c > q)) {
            self.clock.now = at;
            self.check_convergence();
        }
    }

    /// Whether the controller has listed every cluster, no watch is blind and its writes get
    /// through: otherwise a stale status is expected, and fixed when the fault ends.
    fn controller_sees_everything(&self) -> bool {
        let now = self.clock.now;
        let blind = [FaultKind::WatchGap, FaultKind::Partition]
            .iter()
            .any(|k| self.faults.any_active(now, *k));
        let watching = self.checks.invariants.synced.len() > self.api.workloads.len()
            && self.faults.unsynced.is_empty()
            && !blind
            && !self.net.relisting_any();
        let writes = [
            FaultKind::ApiErrors,
            FaultKind::Conflicts,
            FaultKind::WriteTimeout,
        ]
        .iter()
        .all(|k| !self.faults.is_active(&Scope::Management, now, *k));
        watching && writes
    }

    /// The MHC status differential, when the controller is idle and sees everything and the
    /// world has been quiet long enough (`at_end`: now, regardless of the quiet period).
    pub(crate) fn check_mhc_differential(&mut self, at_end: bool) {
        // A shadow writes no status: there is nothing of its own to be stale. Alone beside
        // CAPI's manager, two managers write it (the misconfiguration a fight holds): neither
        // status is a fresh controller's.
        let alone_beside_capi = self.world.capi.enabled
            && self.engine().controllers().deletion.ownership()
                == engine::ownership::Ownership::Alone;
        if self.lp.options().mode.withholds().is_some() || alone_beside_capi {
            return;
        }
        let now = self.clock.now;
        let idle = self.engine().in_flight_len() == 0
            && self.lp.commands_in_flight() == 0
            && self.lp.commands_waiting() == 0
            && !self.net.busy();
        if !idle
            || !self.checks.invariants.differential.due(now, at_end)
            || !self.controller_sees_everything()
        {
            return;
        }
        let ownership = self.engine().controllers().deletion.ownership();
        let stale =
            self.checks
                .invariants
                .differential
                .check(&mut self.api, now, ownership, at_end);
        for (mhc, detail) in stale {
            let message = format!(
                "stale MHC status: {mhc} is not what a controller freshly listing the API computes ({detail})"
            );
            self.line("invariant", "Violation", mhc, message.clone());
            self.checks.invariants.violate(message);
        }
    }

    /// Whether anything the controller sent is pending: in flight, waiting to be sent or for
    /// a retry, or an answer or watch event on its way.
    fn controller_pending(&self) -> bool {
        self.engine().writes_pending()
            || self.lp.commands_in_flight() > 0
            || self.lp.commands_waiting() > 0
            || self.net.busy()
    }

    /// The status convergence rule ([`crate::convergence`]), in process: when nothing has been
    /// pending for its period and the controller sees everything.
    pub(crate) fn check_convergence(&mut self) {
        if self.process.external.is_some() || self.controller_pending() {
            return;
        }
        let now = self.clock.now;
        let quiet = self.checks.invariants.convergence.quiet.lasted(now);
        let Some(quiet) = quiet.filter(|_| self.controller_sees_everything()) else {
            return;
        };
        let found = self.checks.invariants.convergence.check(&self.api, quiet);
        for (object, message) in found {
            self.line("invariant", "Violation", object, message.clone());
            self.checks.invariants.violate(message);
        }
    }

    /// Checks a command against the world as it is when the command is issued.
    pub(crate) fn invariants_before(&mut self, command: &Command) {
        let broken = self.checks.invariants.before(
            &self.api,
            self.lp.core().store(),
            self.clock.now,
            command,
        );
        self.report_broken(&command.owner, broken);
    }

    /// The rules for a write a controller outside the simulator made, seen landing.
    pub(crate) fn check_landed(&mut self, command: &Command) {
        let broken = self.checks.invariants.landed(
            &self.api,
            self.lp.core().store(),
            self.clock.now,
            command,
        );
        self.report_broken(&command.owner, broken);
    }

    fn report_broken(&mut self, owner: &ObjectKey, broken: Vec<String>) {
        for b in broken {
            self.line("invariant", "Violation", owner.to_string(), b.clone());
            self.checks.invariants.violate(b);
        }
    }

    /// At the end of a run: every Machine deleting for too long must say what holds it.
    pub(crate) fn check_liveness(&mut self) {
        let now = self.clock.now;
        let lines = self
            .checks
            .invariants
            .liveness(&self.api, now, self.scenario.mode);
        for (object, action, detail) in lines {
            self.line("invariant", action, object, detail);
        }
    }

    /// Creates every manifest and the objects the contract implies, schedules the timeline and
    /// the expectation checkpoints, and syncs the engine with one relist per cluster.
    pub fn setup(&mut self) {
        // The manifests are needed only here: take them rather than copy a large fleet.
        let management = std::mem::take(&mut self.scenario.management);
        let workload = std::mem::take(&mut self.scenario.workload);
        // The first Cluster of each name, as a search per workload cluster found it (one pass:
        // a search per cluster over every manifest was quadratic in the fleet's size).
        let mut cluster_namespaces = std::collections::BTreeMap::new();
        for m in management.iter().filter(|m| m.kind() == "Cluster") {
            cluster_namespaces.entry(m.name()).or_insert(m.namespace());
        }
        for name in workload.keys() {
            let namespace = cluster_namespaces
                .get(name.as_str())
                .copied()
                .flatten()
                .unwrap_or("default")
                .to_string();
            self.api.workloads.insert(
                name.clone(),
                Scope::Workload(ClusterName::new(namespace, name)),
            );
        }
        self.api.store_mut(&Scope::Management);
        for manifest in management {
            let (world, mut env) = self.world_env();
            world.create_initial(&mut env, &Scope::Management, manifest.value);
        }
        // A provider object already deleting in the scenario is one its provider is finishing.
        let deleting: Vec<(ObjKey, Value)> = self
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.iter()
                    .filter(|(k, o)| {
                        crate::api::is_provider_group(&k.group) && crate::api::json::is_deleting(o)
                    })
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (key, object) in deleting {
            let (world, mut env) = self.world_env();
            world.provider_deleting(&mut env, &key, &object);
        }
        let (world, mut env) = self.world_env();
        world.capi.start(&mut env);
        for (cluster, manifests) in workload {
            let scope = self.api.workload_scope(&cluster);
            self.api.store_mut(&scope);
            for manifest in manifests {
                let (world, mut env) = self.world_env();
                world.create_initial(&mut env, &scope, manifest.value);
            }
            let (world, mut env) = self.world_env();
            world.implied_namespaces(&mut env, &scope);
        }
        let machines: Vec<Arc<Value>> = self
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list_shared("cluster.x-k8s.io", "Machine")
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        for machine in machines {
            let (world, mut env) = self.world_env();
            world.ensure_provider_objects(&mut env, &machine, true);
        }
        let pools: Vec<(ObjKey, Arc<Value>)> = self
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list_shared("cluster.x-k8s.io", "MachinePool")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (key, pool) in pools {
            let (world, mut env) = self.world_env();
            world.ensure_pool_objects(&mut env, &pool);
            world.follow_pool(&mut env, &key, pool);
        }
        let machines: Vec<(ObjKey, Arc<Value>)> = self
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list_shared("cluster.x-k8s.io", "Machine")
                    .chain(s.list_shared("cluster.x-k8s.io", "MachineHealthCheck"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (key, object) in machines {
            self.env().index(&crate::api::Written {
                key,
                object: Some(object),
                removed: None,
            });
        }
        // The setup writes are the initial state, not watch events: the relists carry them.
        self.clock.work.clear();
        let steps: Vec<Duration> = self.scenario.timeline.iter().map(|s| s.at).collect();
        for (i, at) in steps.into_iter().enumerate() {
            self.schedule(self.clock.start + at, Event::Step(i));
        }
        for at in crate::expect::checkpoints(&self.scenario) {
            self.schedule(self.clock.start + at, Event::Checkpoint);
        }
        if self.process.external.is_none() {
            self.pump();
        }
        let start_line_at = self.timeline.lines.len();
        self.line(
            "world",
            "Start",
            String::new(),
            format!(
                "{} objects in {} clusters; {}",
                self.api.clusters.values().map(|c| c.len()).sum::<usize>(),
                self.api.clusters.len(),
                if self.process.external.is_none() {
                    "engine synced"
                } else {
                    "served over HTTP"
                }
            ),
        );
        debug_assert_eq!(self.timeline.lines.len(), start_line_at + 1);
        // What the controllers do with the starting world happens at time zero.
        self.settle();
        self.process.feeder.end_of_instant(self.lp.core());
    }

    /// A fault step: said on the timeline, then started.
    fn start_fault_step(&mut self, spec: &FaultSpec, cluster: Option<&str>) {
        let target = cluster.unwrap_or("management");
        let mut detail = format!("{} on {target}", spec.kind.as_str());
        if let Some(r) = spec.rate {
            detail.push_str(&format!(", rate {r}"));
        }
        if let Some(f) = spec.for_ {
            detail.push_str(&format!(", for {f}"));
        }
        self.line("scenario", "Fault", String::new(), detail);
        self.start_fault(spec, cluster);
    }

    pub(crate) fn execute(&mut self, command: Command) {
        self.record(&command);
        self.invariants_before(&command);
        self.carry_out(command, false);
    }

    /// A command a slow API held back reaches the server now.
    pub(crate) fn execute_after_delay(&mut self, command: Command) {
        self.carry_out(command, true);
    }

    fn carry_out(&mut self, command: Command, delayed: bool) {
        let target = command.action.target().clone();
        let scope = target.key.scope.clone();
        let request = engine::convert::request_for(&command);
        let hit = crate::wire::Hit::of_request(&request);
        let attempt = self.faults.attempt(&scope, &hit, delayed);
        let intercept = self
            .faults
            .intercept(&scope, &hit, attempt, self.clock.now, delayed);
        let (outcome, wrote) = match intercept {
            crate::faults::Intercept::Pass => {
                let outcome = self.apply_request(&scope, &command, request);
                let wrote = outcome.is_success();
                (outcome, wrote)
            }
            crate::faults::Intercept::Fail(outcome) => (outcome, false),
            crate::faults::Intercept::Delay(delay) => {
                let command = Box::new(command);
                self.schedule_in(delay, crate::event::Event::DelayedCommand { command });
                return;
            }
        };
        self.checks.invariants.after(&command, wrote);
        if !outcome.is_success() {
            let object = target.key.to_string();
            let detail = format!(
                "{} #{}: {}",
                command.action.name(),
                command.id,
                outcome.summary()
            );
            self.line("api", "Rejected", object, detail);
        }
        let timeout = if wrote {
            self.faults
                .write_timeout(&scope, &hit, attempt, self.clock.now)
        } else {
            None
        };
        if let Some(outcome) = self.send_result(
            &scope,
            &crate::exec::obj_key(&target),
            command.id,
            outcome,
            timeout,
        ) {
            self.push_result(command.id, outcome);
            self.pump();
        }
    }

    fn record(&mut self, command: &Command) {
        let cause = self.process.feeder.cause(command.cause).to_string();
        self.record_command(command, self.clock.now, &cause, None);
    }

    /// A command the loop did not send (shadow mode): a timeline line, not an action.
    pub(crate) fn record_withheld(&mut self, command: &Command, why: Withheld) {
        let cause = self.process.feeder.cause(command.cause).to_string();
        self.record_command(command, self.clock.now, &cause, Some(why));
    }

    /// Adds a controller command to the timeline (see [`Timeline::record_command`]).
    pub(crate) fn record_command(
        &mut self,
        command: &Command,
        at: Timestamp,
        cause: &str,
        withheld: Option<Withheld>,
    ) {
        let start = self.clock.start;
        self.timeline
            .record_command(start, command, at, cause, withheld);
    }

    /// Executes the request; returns the outcome, queuing the watch events of what it wrote.
    fn apply_request(
        &mut self,
        scope: &Scope,
        command: &Command,
        request: ApiRequest,
    ) -> ApiOutcome {
        let now = self.clock.now;
        if self.process.lost_writes.is_some_and(|lost| lost(&request)) {
            return self.lose_write(scope, command, request);
        }
        match crate::exec::apply(&mut self.api, scope, request, now) {
            Ok((written, answers_removed)) => {
                let request_key = crate::exec::obj_key(command.action.target());
                let answered = written.as_ref().and_then(|w| {
                    w.object
                        .as_ref()
                        .or(w.removed.as_ref().filter(|_| answers_removed))
                });
                let object = answered
                    .and_then(|o| self.convert_answer(scope, &request_key, o))
                    .map(Box::new);
                if let Some(w) = written {
                    self.changed(scope, w);
                }
                ApiOutcome::Ok { object }
            }
            Err(outcome) => outcome,
        }
    }

    /// A planted bug ([`crate::process::LostWrites`]): the request is carried out on a copy of
    /// its cluster, so it is answered as written, and the copy is dropped.
    fn lose_write(&mut self, scope: &Scope, command: &Command, request: ApiRequest) -> ApiOutcome {
        let mut copy = crate::api::FakeApi::default();
        if let Some(store) = self.api.store(scope) {
            copy.clusters.insert(scope.clone(), store.clone());
        }
        match crate::exec::apply(&mut copy, scope, request, self.clock.now) {
            Ok((written, _)) => {
                let key = crate::exec::obj_key(command.action.target());
                let object = written
                    .and_then(|w| w.object)
                    .and_then(|o| self.convert_answer(scope, &key, &o))
                    .map(Box::new);
                ApiOutcome::Ok { object }
            }
            Err(outcome) => outcome,
        }
    }

    /// Knobs of the controller's loop (before the run starts).
    pub fn set_loop_options(&mut self, options: LoopOptions) {
        self.lp = Loop::new(Engine::new(), options);
    }
    /// A controller process starts on `engine`: a fresh loop, whose watches list every cluster
    /// they may.
    pub(crate) fn start_controller(&mut self, engine: Engine) {
        self.lp = Loop::new(engine, self.lp.options().clone());
        self.process.watched.clear();
        self.process.deferred_watches.clear();
        self.process.connecting.clear();
    }

    /// Carries out what the loop asks for until it waits: unless batching, where the loop is
    /// polled once the instant's work runs dry (see `settle`).
    pub(crate) fn pump(&mut self) {
        if !self.process.batching {
            self.poll_loop();
        }
    }

    /// Carries out the loop's outputs until it waits. Never when the controller runs in
    /// another process (the world is served over HTTP): the in-process loop stays idle.
    pub(crate) fn poll_loop(&mut self) {
        if self.process.external.is_some() {
            return;
        }
        loop {
            match self.lp.poll_output(self.clock.now) {
                Output::Wait(_) => break,
                Output::Append { at, input } => self.append(at, input),
                Output::Send(command) => {
                    self.checks.invariants.convergence.sent(&command);
                    self.clock
                        .work
                        .push_back(crate::event::Work::Command(command));
                }
                Output::Withheld(command) => {
                    if let Some(why) = self.lp.options().mode.withholds() {
                        self.record_withheld(&command, why);
                    }
                }
                // The simulated journal's appends do not fail.
                Output::Reopen => {
                    let _ = self.lp.reopened(self.clock.now, Ok(Vec::new()));
                }
                Output::Watch(key) => self.start_watch(&key.scope, key.id()),
                Output::Unwatch(key) => {
                    let watch = (key.scope.clone(), key.id());
                    self.process.watched.remove(&watch);
                    self.process.deferred_watches.remove(&watch);
                }
                Output::WatchProvider { group, kind, .. } => {
                    self.start_watch(&Scope::Management, stream_id(&group, &kind))
                }
                Output::Connect(scope) => self.connect(scope),
                Output::Disconnect(scope) => {
                    self.process.connecting.remove(&scope);
                    self.process.watched.retain(|(s, _)| *s != scope);
                    self.process.deferred_watches.retain(|(s, _)| *s != scope);
                }
                Output::Unreadable(u) => {
                    let key = ObjKey::of(&u.object);
                    self.report_malformed(&u.scope, &key, &u.error.to_string());
                }
            }
        }
    }

    /// The connector of a workload cluster: connected at once, unless a `kubeconfig` fault
    /// breaks its Secret; then it reports why (as the real connector does, once: its retries
    /// meet the same Secret) and connects when the fault ends.
    fn connect(&mut self, scope: Scope) {
        match self.faults.kubeconfig.get(&scope) {
            Some(reason) => {
                let reason = reason.clone();
                self.process.connecting.insert(scope.clone());
                self.lp.push(Arrival::ConnectFailed { scope, reason });
            }
            None => self.lp.push(Arrival::Connected { scope }),
        }
    }

    /// Journals what the loop hands out (after a test's filter, if any), then lets it apply it.
    fn append(&mut self, at: Timestamp, mut input: Input) {
        if let Some(filter) = self.process.feeder.filter {
            filter(&mut input);
        }
        self.note_synced(&input);
        let seq = self.process.feeder.inputs + 1;
        self.checks.invariants.repeats.observe(&input, seq);
        let described = self.process.feeder.journal(at, &input);
        self.checks.invariants.convergence.input(&input);
        self.lp.appended(at, input, Ok(()));
        let mode = self.lp.options().mode;
        let decisions = self.lp.core().decisions();
        self.checks.invariants.convergence.note(mode, decisions);
        self.process.feeder.applied(self.lp.core(), described);
        self.note_disagreements();
    }

    /// Shadow mode's disagreements as timeline lines (actor `shadow`).
    pub(crate) fn note_disagreements(&mut self) {
        for d in self.lp.take_disagreements() {
            let object = d.machine.to_string();
            self.line("shadow", "Disagreement", object, d.describe());
        }
    }

    /// A watcher starts by listing; a cluster whose cache a fault holds unsynced lists later.
    fn start_watch(&mut self, scope: &Scope, stream: String) {
        if self.faults.unsynced.contains(scope) {
            self.process
                .deferred_watches
                .insert((scope.clone(), stream));
            return;
        }
        self.list_stream(scope, &stream);
        self.process.watched.insert((scope.clone(), stream));
    }

    /// One stream's list, as kube's `watcher` reports it.
    pub(crate) fn list_stream(&mut self, scope: &Scope, stream: &str) {
        let (group, kind) = stream.split_once('/').unwrap_or(("", stream));
        let objects: Vec<Delivered> = self
            .api
            .existing_store_mut(scope)
            .map(|s| s.list_handed(group, kind))
            .unwrap_or_default()
            .into_iter()
            .map(|(value, reading)| match reading {
                Some(reading) => Delivered::read(value, reading),
                None => value.into(),
            })
            .collect();
        let push = |sim: &mut Sim, event| {
            sim.lp.push(Arrival::Watch {
                scope: scope.clone(),
                stream: stream.to_string(),
                event,
            })
        };
        push(self, StreamEvent::Init);
        for object in objects {
            push(self, StreamEvent::InitApply(object));
        }
        push(self, StreamEvent::InitDone);
    }

    /// Every watcher of `scope` lists again (its watch missed events), and the ones a fault held
    /// back start; then what that makes is fed.
    pub(crate) fn relist(&mut self, scope: &Scope) {
        let deferred: Vec<String> = self
            .process
            .deferred_watches
            .iter()
            .filter(|(s, _)| s == scope)
            .map(|(_, id)| id.clone())
            .collect();
        self.process.deferred_watches.retain(|(s, _)| s != scope);
        for stream in self.process.streams_of(scope) {
            self.list_stream(scope, &stream);
        }
        for stream in deferred {
            self.start_watch(scope, stream);
        }
        self.pump();
    }

    /// The watch event of a write, when its type is watched in that cluster.
    pub(crate) fn push_watch(&mut self, scope: &Scope, written: Written) {
        let stream = stream_id(&written.key.group, &written.key.kind);
        if !self
            .process
            .watched
            .contains(&(scope.clone(), stream.clone()))
        {
            return;
        }
        let event = match (written.object, written.removed) {
            (Some(object), _) => {
                let reading = self
                    .api
                    .store_mut(scope)
                    .take_reading(&written.key, &object);
                StreamEvent::Apply(match reading {
                    Some(reading) => Delivered::read(object, reading),
                    None => object.into(),
                })
            }
            (None, Some(last)) => StreamEvent::Delete(last.into()),
            (None, None) => return,
        };
        self.lp.push(Arrival::Watch {
            scope: scope.clone(),
            stream,
            event,
        });
    }

    /// A command's answer.
    pub(crate) fn push_result(&mut self, command: u64, outcome: ApiOutcome) {
        self.lp.push(Arrival::Result { command, outcome });
    }

    /// Marks the clusters an input relists as listed since the controller started.
    pub(crate) fn note_synced(&mut self, input: &Input) {
        match input {
            Input::Relist { scope, .. } | Input::RelistKind { scope, .. } => {
                self.checks.invariants.synced.insert(scope.clone());
            }
            Input::Batch { inputs } => inputs.iter().for_each(|i| self.note_synced(i)),
            _ => {}
        }
    }

    /// A watch event leaves the API server. Returns `false` when it takes the canonical path.
    fn send_watch(&mut self, scope: &Scope, written: &Written) -> bool {
        let mut env = env_of!(self);
        self.net
            .send_watch(&mut env, &mut self.faults, &self.process, scope, written)
    }

    /// A command's answer leaves the API server (see [`crate::network::Network::send_result`]).
    fn send_result(
        &mut self,
        scope: &Scope,
        key: &ObjKey,
        command: u64,
        outcome: ApiOutcome,
        timeout: Option<crate::wire::Timeout>,
    ) -> Option<ApiOutcome> {
        let mut env = env_of!(self);
        self.net.send_result(
            &mut env,
            &self.faults,
            scope,
            key,
            command,
            outcome,
            timeout,
        )
    }

    /// One watch of `scope` (`stream`, or one drawn) ends with 410 Gone: its watcher lists again.
    pub(crate) fn expire_watch(&mut self, scope: &Scope, stream: Option<String>) {
        let mut env = env_of!(self);
        self.net
            .expire_watch(&mut env, &mut self.faults, &self.process, scope, stream);
    }

    /// `relist-duplicates` starting: the watch of its cluster restarts at once.
    pub(crate) fn restart_watch(&mut self, scope: &Scope) {
        let mut env = env_of!(self);
        self.net.restart_watch(&mut env, &self.process, scope);
    }

    /// Hands the backlog to the intake as `lifecycle run` reads its channel, reconciling after
    /// each batch.
    pub(crate) fn drain_backlog(&mut self) {
        let busy = self
            .faults
            .any_active(self.clock.now, FaultKind::BacklogBatches);
        let mut env = env_of!(self);
        if !self.net.ready_to_read(&mut env, busy) {
            return;
        }
        while let Some(batch) = self.net.take_batch(&mut self.faults, busy) {
            for delivery in batch {
                self.read_delivery(delivery);
            }
            self.pump();
            self.settle();
        }
    }

    fn read_delivery(&mut self, delivery: Delivery) {
        match delivery {
            Delivery::Watch { scope, written } => {
                self.net.read_watch(&scope, &written.key);
                self.push_watch(&scope, *written);
            }
            Delivery::Result { command, outcome } => self.push_result(command, outcome),
            Delivery::Relist { scope, stream } => {
                self.net.relisted(&scope, &stream);
                // One watcher's watch ended: it lists again, and the intake relists the whole
                // cluster from what every stream last reported.
                self.list_stream(&scope, &stream);
                if self
                    .faults
                    .is_active(&scope, self.clock.now, FaultKind::RelistDuplicates)
                {
                    self.duplicates(&scope);
                }
            }
            Delivery::Coalesced { .. } | Delivery::Wake => {}
        }
    }

    /// The watch after a relist repeats the current state of recently changed objects.
    fn duplicates(&mut self, scope: &Scope) {
        for key in self.net.recent(scope) {
            let Some(value) = self.api.get_shared(scope, &key).cloned() else {
                continue;
            };
            self.faults.fire(FaultKind::RelistDuplicates);
            let written = Written {
                key,
                object: Some(value),
                removed: None,
            };
            self.push_watch(scope, written);
        }
    }

    pub(crate) fn start_fault(&mut self, spec: &FaultSpec, cluster: Option<&str>) {
        if self.process.external.is_some() && !crate::wire::plays_over_http(spec.kind) {
            self.line(
                "scenario",
                "Fault",
                String::new(),
                format!(
                    "{} is not played over HTTP (the controller's journal belongs to its own process)",
                    spec.kind.as_str()
                ),
            );
            return;
        }
        let scope = cluster.map(|c| self.api.workload_scope(c));
        let until = self.clock.now + spec.for_.unwrap_or(crate::wire::FAULT_FOR_DEFAULT);
        match spec.kind {
            FaultKind::ControllerRestart => self.restart_controller(false),
            FaultKind::TornJournal => self.restart_controller(true),
            FaultKind::JournalDamage => self.damage_journal_and_restart(spec),
            FaultKind::CacheUnsynced => {
                let scope = scope.unwrap_or_else(|| self.api.first_workload());
                self.faults.unsynced.insert(scope.clone());
                self.restart_controller(false);
                self.schedule(until, Event::CacheSynced { scope });
            }
            FaultKind::StuckHook => {
                let (faults, mut env) = self.faults_env();
                faults.stick_hook(&mut env, spec);
            }
            FaultKind::Kubeconfig => {
                let scope = scope.unwrap_or_else(|| self.api.first_workload());
                let (faults, mut env) = self.faults_env();
                if let Some(original) = faults.break_kubeconfig(&mut env, spec, &scope, until) {
                    self.restart_controller_as(FaultKind::Kubeconfig);
                    self.schedule(until, Event::KubeconfigRestored { scope, original });
                }
            }
            FaultKind::CorruptObject => {
                let scope = scope.unwrap_or_else(|| self.api.first_workload());
                let (faults, mut env) = self.faults_env();
                if let Some((scope, key)) = faults.corruption_target(&env, spec, scope)
                    && let Some(restore) = faults.corrupt(&mut env, &scope, &key, spec)
                {
                    self.schedule(
                        until,
                        Event::Uncorrupt {
                            scope,
                            key,
                            restore,
                        },
                    );
                }
            }
            FaultKind::KubeletStop => {
                let scope = scope.unwrap_or_else(|| self.api.first_workload());
                let (faults, env) = self.faults_env();
                if let Some(node) = faults.fault_node(&env, spec, &scope) {
                    self.faults.fire(FaultKind::KubeletStop);
                    let (world, mut env) = self.world_env();
                    world.kubelet(&mut env, &scope, &node, false);
                    self.schedule(until, Event::KubeletResume { scope, node });
                }
            }
            FaultKind::NodeFlap => {
                let scope = scope.unwrap_or_else(|| self.api.first_workload());
                let (faults, env) = self.faults_env();
                if let Some(node) = faults.fault_node(&env, spec, &scope) {
                    let period = crate::faults::extra_duration(spec, "period")
                        .unwrap_or(crate::faults::NODE_FLAP_PERIOD_DEFAULT);
                    self.schedule(
                        self.clock.now,
                        Event::NodeFlap {
                            scope,
                            node,
                            period,
                            until,
                            ready: false,
                        },
                    );
                }
            }
            FaultKind::ApiErrors
            | FaultKind::Partition
            | FaultKind::WatchGap
            | FaultKind::Conflicts
            | FaultKind::SlowApi
            | FaultKind::Eviction429
            | FaultKind::NodeNeverJoins
            | FaultKind::InfraProvisionFailure
            | FaultKind::ReorderedDelivery
            | FaultKind::CoalescedEvents
            | FaultKind::WatchExpired
            | FaultKind::RelistDuplicates
            | FaultKind::WriteTimeout
            | FaultKind::BacklogBatches => {
                let scope = crate::wire::fault_scope(spec.kind, scope);
                let window = crate::wire::Window::of(spec, scope.clone(), self.clock.now);
                let id = self.faults.open(spec.kind, scope.clone(), &window, until);
                self.schedule(until, Event::FaultEnds { fault: id });
                if self.process.external.is_some() && crate::wire::WIRE_KINDS.contains(&spec.kind) {
                    // The fake API servers play it, from the same window ([`crate::wire::windows`]).
                    let which = scope.as_ref().map_or_else(
                        || "every fake API server".to_string(),
                        |s| match s {
                            Scope::Management => "the management cluster's fake API server".into(),
                            Scope::Workload(c) => format!("{}'s fake API server", c.name),
                        },
                    );
                    let rate = spec
                        .rate
                        .map(|r| format!(" at rate {r}"))
                        .unwrap_or_default();
                    self.line(
                        "world",
                        "Fault",
                        String::new(),
                        format!(
                            "{} played by {which}{rate} until {}",
                            spec.kind.as_str(),
                            crate::timeline::clock(until.since(self.clock.start))
                        ),
                    );
                    return;
                }
                if matches!(
                    spec.kind,
                    FaultKind::RelistDuplicates | FaultKind::WatchExpired
                ) {
                    let scopes = match &scope {
                        None => self.api.scopes(),
                        Some(s) => vec![s.clone()],
                    };
                    for s in scopes {
                        if spec.kind == FaultKind::WatchExpired {
                            self.expire_watch(&s, None);
                        } else {
                            self.restart_watch(&s);
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn fault_ends(&mut self, id: usize) {
        let Some(fault) = self.faults.active.remove(&id) else {
            return;
        };
        // The controller's writes get through again: its retries are due from now on.
        let now = self.clock.now;
        self.checks.invariants.differential.note_change(now);
        let scope_name = fault
            .scope
            .as_ref()
            .map(crate::api::scope_name)
            .unwrap_or_default();
        self.line(
            "world",
            "FaultEnds",
            scope_name,
            format!("{} is over", fault.kind.as_str()),
        );
        if let Some(scope) = &fault.scope
            && matches!(fault.kind, FaultKind::WatchGap | FaultKind::Partition)
            && self.faults.needs_relist.remove(scope)
        {
            self.relist(scope);
        }
    }

    /// A cluster whose cache was held unsynced after a restart finally lists.
    pub(crate) fn cache_synced(&mut self, scope: Scope) {
        if self.faults.unsynced.remove(&scope) {
            self.faults.fire(FaultKind::CacheUnsynced);
            self.faults.needs_relist.remove(&scope);
            self.line(
                "world",
                "CacheSynced",
                crate::api::scope_name(&scope),
                "the controller's cache of this cluster synced".into(),
            );
            self.relist(&scope);
        }
    }

    /// The `journal-damage` fault: the controller dies, its journal is damaged on disk while it
    /// is down (`damage:` in the step, else a kind drawn from the seed), and the restart must
    /// recover every committed record or refuse with an error; the run then goes on from the
    /// intact journal as after a plain restart (see `journal_damage.rs`).
    pub(crate) fn damage_journal_and_restart(&mut self, spec: &FaultSpec) {
        use crate::journal_damage::{DAMAGE_KINDS, RECOVERED, REFUSED};
        self.faults.fire(FaultKind::JournalDamage);
        let roll = crate::faults::damage_roll(self.faults.seed, self.clock.now);
        let kind = match crate::faults::extra_str(spec, "damage") {
            Some(k) if DAMAGE_KINDS.contains(&k) => k,
            Some(k) => {
                self.checks.invariants.violate(format!(
                    "journal-damage: unknown damage {k:?} (expected one of: {})",
                    DAMAGE_KINDS.join(", ")
                ));
                return;
            }
            None => DAMAGE_KINDS[(roll % DAMAGE_KINDS.len() as u64) as usize],
        };
        match self.process.feeder.crash_with_damage(kind, roll >> 3) {
            Ok(Some(report)) => {
                self.faults.fire_order(report.applied);
                self.faults.fire_order(if report.refused.is_some() {
                    REFUSED
                } else {
                    RECOVERED
                });
                if let Some(loss) = report.silent_loss {
                    self.checks.invariants.violate(format!(
                        "journal damage ({}): the restart lost committed records silently: {loss}",
                        report.detail
                    ));
                }
                if let Some(error) = &report.refused
                    && error.contains("is locked")
                {
                    self.checks.invariants.violate(format!(
                        "journal damage ({}): the check could not open the journal: {error}",
                        report.detail
                    ));
                }
            }
            Ok(None) => {}
            Err(e) => {
                self.checks.invariants.violate(format!(
                    "journal damage: the simulator could not damage the journal: {e}"
                ));
                return;
            }
        }
        self.line(
            "world",
            "JournalDamage",
            String::new(),
            format!(
                "while the controller was down its journal was damaged on disk ({kind}); the restart checked it, then ran from an intact copy"
            ),
        );
        self.restart_controller_as(FaultKind::JournalDamage);
    }

    /// The controller process dies and restarts: the engine is rebuilt from its journal, told it
    /// restarted, and relists every cluster whose cache is not held back by a fault. With
    /// `torn`, the crash also loses uncommitted records and tears the last batch.
    pub(crate) fn restart_controller(&mut self, torn: bool) {
        let kind = if torn {
            FaultKind::TornJournal
        } else {
            FaultKind::ControllerRestart
        };
        self.faults.fire(kind);
        self.restart_controller_as(kind);
    }

    /// The restart itself; `kind` says which fault asked for it (counted by the caller).
    fn restart_controller_as(&mut self, kind: FaultKind) {
        let torn = kind == FaultKind::TornJournal;
        if let Some(external) = &mut self.process.external {
            external.restarts += 1;
            self.line(
                "scenario",
                "Fault",
                String::new(),
                "the controller process is killed (SIGKILL) and restarted from its journal".into(),
            );
            return;
        }
        let before = self.engine().state_hash();
        let mut lost_from = None;
        if torn {
            match self.process.feeder.crash_with_torn_tail() {
                Ok(lost) => lost_from = lost,
                Err(e) => {
                    self.checks.invariants.violate(format!(
                        "recovery: the journal cannot be reopened after a crash: {e}"
                    ));
                    return;
                }
            }
        }
        let rebuilt = match self.process.feeder.rebuild(self.lp.core()) {
            Ok(engine) => engine,
            Err(e) => {
                self.checks.invariants.violate(format!(
                    "recovery: the engine cannot be rebuilt from its journal: {e}"
                ));
                return;
            }
        };
        self.process.feeder.truncate_to(rebuilt.applied_seq());
        self.checks
            .invariants
            .repeats
            .forget_after(rebuilt.applied_seq());
        let after = rebuilt.state_hash();
        if !torn && before != after {
            self.checks.invariants.violate(format!(
                "recovery: the engine rebuilt from its journal differs from the live one ({before:016x} vs {after:016x})"
            ));
        }
        let detail = match lost_from {
            Some(seq) => format!(
                "crash tore the journal's tail: records from #{seq} lost; engine rebuilt from the journal; relisting"
            ),
            None => "engine rebuilt from the journal; relisting".to_string(),
        };
        self.line(
            "world",
            if torn { "Crash" } else { "ControllerRestart" },
            String::new(),
            detail,
        );
        // Commands still queued died with the process, and its caches with it.
        self.clock
            .work
            .retain(|w| !matches!(w, crate::event::Work::Command(_)));
        self.net.reset();
        self.checks.invariants.synced.clear();
        self.start_controller(rebuilt);
        self.feed(Input::Restarted);
    }

    /// The faults, and what they act through.
    fn faults_env(&mut self) -> (&mut crate::faults::Faults, Env<'_>) {
        let env = env_of!(self);
        (&mut self.faults, env)
    }

    /// Undoes a corruption: the object reads again.
    pub(crate) fn uncorrupt(&mut self, scope: &Scope, key: &ObjKey, restore: &Value) {
        crate::faults::Faults::uncorrupt(&mut self.env(), scope, key, restore);
    }

    /// A `kubeconfig` fault ends: the Secret is as it was, and a connector still trying connects.
    pub(crate) fn restore_kubeconfig(&mut self, scope: &Scope, original: Option<Value>) {
        let (faults, mut env) = self.faults_env();
        faults.restore_kubeconfig(&mut env, scope, original);
        if self.process.connecting.remove(scope) {
            self.lp.push(engine::intake::Arrival::Connected {
                scope: scope.clone(),
            });
            self.pump();
        }
    }

    pub(crate) fn node_flap(
        &mut self,
        scope: Scope,
        node: String,
        period: Duration,
        until: Timestamp,
        ready: bool,
    ) {
        let (faults, mut env) = self.faults_env();
        faults.node_flap(&mut env, scope, node, period, until, ready);
    }
}
