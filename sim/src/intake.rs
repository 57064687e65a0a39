//! How the fake API's deliveries reach the engine: through `engine::runtime::Loop` (and its
//! `engine::intake`), the sans-IO loop `lifecycle run` drives with tokio, so the simulator keeps
//! no second copy of it: the batching, the journal-before-apply rule, the in-flight caps, the
//! priority and eviction order and the tick spacing are the loop's. Watching a
//! resource type is listing it (`Init`, `InitApply` of each object, `InitDone`, as kube's
//! `watcher` reports a list), then handing each write of that type over as a watch event;
//! answers go in as they come back. What the intake makes of them (the first list of a cluster
//! once every stream listed, a relist of one kind when its stream lists again, one
//! batch for whatever arrived together) is what the engine is fed.

use crate::api::{ObjKey, Written};
use crate::sim::Sim;
use engine::intake::Arrival;
use engine::intake::mirror::StreamEvent;
use engine::intake::streams::stream_id;
use engine::model::Scope;
use engine::runtime::{Loop, LoopOptions, Output};

impl Sim {
    /// Knobs of the controller's loop (before the run starts).
    pub fn set_loop_options(&mut self, options: LoopOptions) {
        self.lp = Loop::new(Engine::new(), options);
    }
}
use engine::time::Timestamp;
use engine::{ApiOutcome, Engine, Input};
use serde_json::Value;

impl Sim {
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
            self.report_unreadable();
            match self.lp.poll_output(self.clock.now) {
                Output::Wait(_) => break,
                Output::Append { at, input } => self.append(at, input),
                Output::Send(command) => self
                    .clock
                    .work
                    .push_back(crate::event::Work::Command(command)),
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
    fn append(&mut self, at: Timestamp, input: Input) {
        let input = match self.process.feeder.filter {
            Some(filter) => self.lp.rewrite_appending(filter),
            None => input,
        };
        self.note_synced(&input);
        let seq = self.process.feeder.inputs + 1;
        self.checks.invariants.repeats.observe(&input, seq);
        let described = self.process.feeder.journal(at, &input);
        self.lp.appended(at, Ok(()));
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
        let objects: Vec<Value> = self
            .api
            .store(scope)
            .map(|s| s.list(group, kind).map(|(_, v)| v.clone()).collect())
            .unwrap_or_default();
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
        for stream in self.streams_of(scope) {
            self.list_stream(scope, &stream);
        }
        for stream in deferred {
            self.start_watch(scope, stream);
        }
        self.pump();
    }

    /// The streams `scope` is watched by.
    pub(crate) fn streams_of(&self, scope: &Scope) -> Vec<String> {
        self.process
            .watched
            .iter()
            .filter(|(s, _)| s == scope)
            .map(|(_, id)| id.clone())
            .collect()
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
            (Some(object), _) => StreamEvent::Apply(object),
            (None, Some(last)) => StreamEvent::Delete(last),
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

    fn report_unreadable(&mut self) {
        for u in self.lp.intake_mut().take_unreadable() {
            let key = ObjKey::of(&u.object);
            self.report_malformed(&u.scope, &key, &u.error);
        }
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
}
