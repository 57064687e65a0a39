//! The controller's loop, sans-IO: everything between what reaches the controller (watch
//! events, answers) and what it does (journal appends, requests, watches), but the I/O itself.
//! `lifecycle run` drives it with tokio and HTTP (`adapters/controller/src/kube/adapter.rs`); the
//! simulator drives the same loop against its fake clusters, so a sweep exercises the batching,
//! the journal-before-apply rule, the in-flight caps, the priority order, the eviction order
//! and the tick spacing production runs.
//!
//! *Expected flow* (as str0m's): [`Loop::push`] every [`Arrival`] as it comes (a driver that
//! finds several waiting pushes them all before polling: they become one batch), call
//! [`Loop::handle_timeout`] when the last [`Output::Wait`] deadline passes, then call
//! [`Loop::poll_output`] until it returns [`Output::Wait`]:
//! * [`Output::Append`]: journal the input durably, then hand it back with [`Loop::appended`]
//!   before polling again (the input is applied only once journaled; the loop keeps no copy);
//! * [`Output::Reopen`]: the journal failed; try to reopen it, report with [`Loop::reopened`];
//! * [`Output::Send`]: send the command (it holds one of its cluster's slots until its answer
//!   is pushed as [`Arrival::Result`]);
//! * watch, unwatch, connect, disconnect: the intake's (see [`crate::intake`]);
//! * [`Output::Unreadable`]: an object delivered that does not read, to report and drop (the
//!   engine already holds it as unknown);
//! * [`Output::Wait`]: nothing more to do until an arrival or the deadline it names.
//!
//! *Guarantees:* no input is applied unless journaled first; while the journal cannot be
//! written nothing is applied, sent or ticked (inputs are held in order and applied once it is
//! reopened, after what the reopened journal holds beyond the last acknowledged append); at
//! most [`LoopOptions::commands_in_flight_max`] commands per cluster are in flight; two `Tick`s
//! are at least [`LoopOptions::tick_spacing_min`] apart, so a deadline kept in the past cannot
//! spin.

mod admission;
mod priority;
#[cfg(test)]
mod tests;

pub use priority::Priority;

use crate::command::Command;
use crate::engine::Engine;
use crate::input::{ApiOutcome, BATCH_INPUTS_MAX, Input, Withheld};
use crate::intake::mirror::Unreadable;
use crate::intake::streams::StreamKey;
use crate::intake::{Arrival, Intake};
use crate::model::Scope;
use crate::time::{Duration, Timestamp};
use admission::Admission;
use std::collections::VecDeque;

/// What the loop drives: [`Engine`] in production, a scripted stand-in in tests.
pub trait Core {
    fn handle(&mut self, now: Timestamp, input: Input);
    /// The next command to execute; called until `None` after every `handle`.
    fn poll_command(&mut self) -> Option<Command>;
    /// When the core wants an [`Input::Tick`].
    fn next_deadline(&self) -> Option<Timestamp>;
    /// The engine, for snapshots and metrics (`None` for a stand-in).
    fn engine(&self) -> Option<&Engine>;
}

impl Core for Engine {
    fn handle(&mut self, now: Timestamp, input: Input) {
        Engine::handle(self, now, input);
    }
    fn poll_command(&mut self) -> Option<Command> {
        Engine::poll_command(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        Engine::next_deadline(self)
    }
    fn engine(&self) -> Option<&Engine> {
        Some(self)
    }
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Journal `input` durably, then call [`Loop::appended`].
    Append { at: Timestamp, input: Input },
    /// The journal could not be written: reopen it, then call [`Loop::reopened`].
    Reopen,
    /// Send this command; push its answer as [`Arrival::Result`].
    Send(Command),
    /// A command the loop did not hand out to send ([`Mode::Shadow`]): its answer,
    /// [`ApiOutcome::NotSent`], is the loop's own. For the driver to tell, never to send.
    Withheld(Command),
    /// Start watching a resource type.
    Watch(StreamKey),
    /// Stop watching a resource type.
    Unwatch(StreamKey),
    /// Watch a provider kind of the management cluster (`version: None`: ask discovery).
    WatchProvider {
        group: String,
        version: Option<String>,
        kind: String,
    },
    /// Connect to a workload cluster; push [`Arrival::Connected`] once connected, and
    /// [`Arrival::ConnectFailed`] when an attempt fails (the loop tells the engine each change
    /// of reason once).
    Connect(Scope),
    /// Stop connecting to and watching a workload cluster.
    Disconnect(Scope),
    /// An object a watch or list delivered that the controllers cannot read, handed out once
    /// as it is read (the loop keeps no copy; see [`Loop::unreadable_dropped`]).
    Unreadable(Unreadable),
    /// Nothing to do until an arrival, or until this instant (`None`: only an arrival).
    Wait(Option<Timestamp>),
}

/// Knobs of the loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopOptions {
    /// Per cluster: commands sent and not answered yet (the most urgent waiting one goes
    /// first when one is answered).
    pub commands_in_flight_max: usize,
    /// Shortest time between two `Tick`s.
    pub tick_spacing_min: Duration,
    /// How often an unwritable journal is reopened.
    pub journal_retry: Duration,
    /// The most inputs in one [`Input::Batch`].
    pub batch_inputs_max: usize,
    /// Whether commands are sent at all.
    pub mode: Mode,
    /// In [`Mode::Takeover`], the Machines it owns (`--own-machines`; `None`: a MachineSet's).
    pub own_machines: Option<crate::model::LabelSelector>,
    /// A bug planted on purpose, to prove a sweep finds bugs in the loop (tests only).
    #[cfg(feature = "testing")]
    pub planted: Option<PlantedBug>,
}

/// Bugs a test can plant in the loop ([`LoopOptions::planted`]).
#[cfg(feature = "testing")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// A batch of several inputs loses its last one: the arrivals behind it were taken from
    /// the intake and never applied (a batching bug only a backlog shows).
    DropLastOfBatch,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            commands_in_flight_max: 32,
            tick_spacing_min: Duration::from_millis(10),
            journal_retry: Duration::from_secs(1),
            batch_inputs_max: BATCH_INPUTS_MAX,
            mode: Mode::Alone,
            own_machines: None,
            #[cfg(feature = "testing")]
            planted: None,
        }
    }
}

/// How the controller runs beside others that may act on the same objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// It owns the objects: every command is sent.
    #[default]
    Alone,
    /// It watches, journals and decides, and sends nothing: each command is answered at once
    /// with [`ApiOutcome::NotSent`], journaled like any answer.
    Shadow,
    /// Beside CAPI's manager, it owns worker Machines' deletion through its hooks
    /// ([`crate::ownership`]); every command is sent.
    Takeover,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Alone, Mode::Shadow, Mode::Takeover];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Alone => "alone",
            Mode::Shadow => "shadow",
            Mode::Takeover => "takeover",
        }
    }

    /// Whose hands worker Machines' deletion is in: a shadow decides as if alone.
    pub fn ownership(self) -> crate::ownership::Ownership {
        match self {
            Mode::Alone | Mode::Shadow => crate::ownership::Ownership::Alone,
            Mode::Takeover => crate::ownership::Ownership::Takeover,
        }
    }

    /// Why commands are not sent in this mode (`None`: they are).
    pub fn withholds(self) -> Option<Withheld> {
        match self {
            Mode::Alone | Mode::Takeover => None,
            Mode::Shadow => Some(Withheld::Shadow),
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
                format!("unknown mode {s:?}: one of {}", known.join(", "))
            })
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the journal stands.
#[derive(Debug)]
enum Journal {
    Writable,
    /// An [`Output::Append`] was handed out at this time; [`Loop::appended`] has not answered
    /// yet. The driver holds the input meanwhile.
    Appending(Timestamp),
    /// It cannot be written: nothing is applied until it is reopened.
    Down(Down),
}

#[derive(Debug)]
struct Down {
    /// The first error.
    error: String,
    /// When the next [`Output::Reopen`] is due.
    retry_at: Timestamp,
    /// An [`Output::Reopen`] was handed out and not answered.
    reopening: bool,
}

/// The controller's loop; see the module doc.
pub struct Loop<C: Core> {
    core: C,
    intake: Intake,
    admission: Admission,
    journal: Journal,
    /// Inputs to journal before what the intake holds: the loop's own (answers for clusters
    /// with no connection, ticks), the driver's ([`Loop::feed`]), and those held while the
    /// journal was down, oldest first.
    own: VecDeque<Input>,
    /// Requests, watches and connections to hand out, in order.
    outputs: VecDeque<Output>,
    last_tick: Option<Timestamp>,
    options: LoopOptions,
    /// [`Mode::Shadow`]: its decisions against what the objects show was done.
    comparator: Option<crate::shadow::Comparator>,
}

impl<C: Core> Loop<C> {
    /// A loop over `core`; its first outputs are the management cluster's watches.
    pub fn new(core: C, options: LoopOptions) -> Self {
        let mut intake = Intake::new();
        let mut own = VecDeque::new();
        // A state that ran in another ownership changes first, journaled like any input.
        let ownership = options.mode.ownership();
        if core
            .engine()
            .is_some_and(|e| e.controllers().deletion.ownership() != ownership)
        {
            own.push_back(Input::Ownership(ownership));
        }
        if core.engine().is_some_and(|e| {
            e.controllers().deletion.own_machines() != options.own_machines.as_ref()
        }) {
            own.push_back(Input::OwnMachines(options.own_machines.clone()));
        }
        // The workload clusters the engine last heard could not be reached: their connectors
        // start again, and only a change (or a connection) is news.
        if let Some(engine) = core.engine() {
            for (scope, reason) in engine.store().unreachable_clusters() {
                intake.note_unreachable(scope, reason);
            }
        }
        Loop {
            core,
            intake,
            admission: Admission::new(options.commands_in_flight_max),
            journal: Journal::Writable,
            own,
            outputs: VecDeque::new(),
            last_tick: None,
            comparator: (options.mode == Mode::Shadow).then(crate::shadow::Comparator::new),
            options,
        }
    }

    /// Shadow mode's disagreements found since the last call (none in other modes).
    pub fn take_disagreements(&mut self) -> Vec<crate::shadow::Disagreement> {
        self.comparator
            .as_mut()
            .map(crate::shadow::Comparator::take)
            .unwrap_or_default()
    }

    /// The end of a run: shadow mode judges the windows still open as of `at`.
    pub fn finish_comparison(&mut self, at: Timestamp) {
        if let Some(c) = &mut self.comparator {
            c.finish(at);
        }
    }

    pub fn core(&self) -> &C {
        &self.core
    }

    pub fn core_mut(&mut self) -> &mut C {
        &mut self.core
    }

    pub fn intake(&self) -> &Intake {
        &self.intake
    }

    /// Something reached the controller. An answer frees its command's slot at once (the
    /// answer itself is applied in turn, journaled first).
    pub fn push(&mut self, arrival: Arrival) {
        if let Arrival::Result { command, .. } = &arrival {
            let granted = self.admission.answered(*command);
            self.send_all(granted);
        }
        self.intake.push(arrival);
    }

    /// An input of the driver's own (for example [`Input::Restarted`]): journaled and applied
    /// in turn, before what the intake holds.
    pub fn feed(&mut self, input: Input) {
        self.own.push_back(input);
    }

    /// Time passed: a `Tick` if the core's deadline (kept at least `tick_spacing_min` after
    /// the last tick) has come, a reopen if the journal's retry is due.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if matches!(self.journal, Journal::Down(_)) {
            return;
        }
        if self.tick_due().is_some_and(|at| at <= now) && !self.own.contains(&Input::Tick) {
            self.last_tick = Some(now);
            self.own.push_back(Input::Tick);
        }
    }

    /// When the loop wants [`Loop::handle_timeout`] next: what the last [`Output::Wait`] said
    /// when nothing else is to be done (`None`: only an arrival wakes it).
    pub fn next_wake(&self) -> Option<Timestamp> {
        match &self.journal {
            Journal::Down(d) => (!d.reopening).then_some(d.retry_at),
            _ => self.tick_due(),
        }
    }

    /// When the next `Tick` is due: the core's deadline, not earlier than `tick_spacing_min`
    /// after the last one.
    fn tick_due(&self) -> Option<Timestamp> {
        let compared = self.comparator.as_ref().and_then(|c| c.next_deadline());
        let deadline = match (self.core.next_deadline(), compared) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(match self.last_tick {
            Some(last) => deadline.max(last + self.options.tick_spacing_min),
            None => deadline,
        })
    }

    /// The next thing to do at `now`; call until [`Output::Wait`].
    pub fn poll_output(&mut self, now: Timestamp) -> Output {
        loop {
            while let Some(o) = self.intake.poll_output() {
                let o = self.carry_out_intake(o);
                self.outputs.push_back(o);
            }
            let down = matches!(self.journal, Journal::Down(_));
            // While the journal is down nothing is sent: the commands wait with it.
            let ready = self
                .outputs
                .iter()
                .position(|o| !down || !matches!(o, Output::Send(_)));
            if let Some(i) = ready {
                return self.outputs.remove(i).expect("found above");
            }
            match &mut self.journal {
                Journal::Appending(..) => {
                    debug_assert!(false, "poll_output before appended()");
                    return Output::Wait(None);
                }
                Journal::Down(down) => {
                    if !down.reopening && now >= down.retry_at {
                        down.reopening = true;
                        return Output::Reopen;
                    }
                    return Output::Wait((!down.reopening).then_some(down.retry_at));
                }
                Journal::Writable => {}
            }
            let next = match self.own.pop_front() {
                Some(input) => Some(input),
                None => self.intake.next_input_for(
                    self.options.batch_inputs_max,
                    self.core.engine().map(Engine::store),
                ),
            };
            #[cfg(feature = "testing")]
            let next = self.plant(next);
            // Handed out after the append of what they were read for, before its commands.
            let unreadable = self.intake.take_unreadable();
            self.outputs
                .extend(unreadable.into_iter().map(Output::Unreadable));
            if let Some(input) = next {
                self.journal = Journal::Appending(now);
                return Output::Append { at: now, input };
            }
            // Reading what arrived may have asked for watches (a provider kind referred to):
            // the first list waits for them.
            if !self.intake.has_outputs() && self.outputs.is_empty() {
                return Output::Wait(self.tick_due());
            }
        }
    }

    #[cfg(feature = "testing")]
    fn plant(&self, next: Option<Input>) -> Option<Input> {
        match (self.options.planted, next) {
            (Some(PlantedBug::DropLastOfBatch), Some(Input::Batch { mut inputs }))
                if inputs.len() > 1 =>
            {
                inputs.pop();
                Some(Input::batch(inputs))
            }
            (_, next) => next,
        }
    }

    /// The loop's knobs.
    pub fn options(&self) -> &LoopOptions {
        &self.options
    }

    fn carry_out_intake(&mut self, o: crate::intake::Output) -> Output {
        use crate::intake::Output as I;
        match o {
            I::Watch(key) => Output::Watch(key),
            I::Unwatch(key) => Output::Unwatch(key),
            I::WatchProvider {
                group,
                version,
                kind,
            } => Output::WatchProvider {
                group,
                version,
                kind,
            },
            I::Connect(scope) => Output::Connect(scope),
            I::Disconnect(scope) => {
                for command in self.admission.drop_cluster(&scope) {
                    self.own.push_back(unreachable(&command, &scope));
                }
                Output::Disconnect(scope)
            }
        }
    }

    /// The answer to the last [`Output::Append`], with its input handed back: `Ok` once the
    /// input is durable (it is then applied and its commands dispatched), `Err` when it could
    /// not be journaled (the loop then holds it, and everything after it, until the journal is
    /// reopened).
    pub fn appended(&mut self, now: Timestamp, input: Input, result: Result<(), String>) {
        let Journal::Appending(at) = std::mem::replace(&mut self.journal, Journal::Writable) else {
            debug_assert!(false, "appended() without an Append");
            return;
        };
        match result {
            Ok(()) => self.apply(at, input),
            Err(error) => {
                self.own.push_front(input);
                self.journal_failed(now, error);
            }
        }
    }

    /// The journal failed after an input was applied (a snapshot could not be written): stop
    /// acting until it is reopened.
    pub fn journal_failed(&mut self, now: Timestamp, error: String) {
        if matches!(self.journal, Journal::Down(_)) {
            return;
        }
        tracing::error!(%error, "the journal cannot be written: not acting (NotReady) until it can be reopened");
        self.journal = Journal::Down(Down {
            error,
            retry_at: now + self.options.journal_retry,
            reopening: false,
        });
    }

    /// Whether the loop has stopped acting because the journal cannot be written, and why.
    pub fn journal_down(&self) -> Option<&str> {
        match &self.journal {
            Journal::Down(d) => Some(&d.error),
            _ => None,
        }
    }

    /// The answer to [`Output::Reopen`]: `Ok` with what the reopened journal holds beyond the
    /// last acknowledged append (journaled, so it is applied; it must be the first held
    /// inputs), or `Err` (tried again after `journal_retry`). `Err` from this call: the journal
    /// holds an input the loop never fed; nothing is applied.
    pub fn reopened(
        &mut self,
        now: Timestamp,
        result: Result<Vec<(Timestamp, Input)>, String>,
    ) -> Result<(), String> {
        let Journal::Down(down) = &mut self.journal else {
            return Ok(());
        };
        down.reopening = false;
        let unapplied = match result {
            Ok(unapplied) => unapplied,
            Err(e) => {
                tracing::debug!(error = %e, first_error = %down.error, "the journal is still unwritable");
                down.retry_at = now + self.options.journal_retry;
                return Ok(());
            }
        };
        for (_, input) in &unapplied {
            if self.own.front() != Some(input) {
                return Err(format!(
                    "the reopened journal holds an input that was never fed: {}",
                    input.describe()
                ));
            }
            self.own.pop_front();
        }
        tracing::info!(
            held = self.own.len(),
            journaled_unapplied = unapplied.len(),
            "the journal is writable again: acting again"
        );
        self.journal = Journal::Writable;
        for (at, input) in unapplied {
            self.apply(at, input);
        }
        Ok(())
    }

    /// Applies a journaled input and dispatches the commands it caused.
    fn apply(&mut self, at: Timestamp, input: Input) {
        log_relists(&input);
        let observed = self.comparator.is_some().then(|| input.clone());
        self.core.handle(at, input);
        if let (Some(c), Some(input)) = (&mut self.comparator, observed) {
            let stand_in;
            let store = match self.core.engine() {
                Some(engine) => engine.store(),
                None => {
                    stand_in = crate::store::Store::default();
                    &stand_in
                }
            };
            c.observe(at, &input, store);
        }
        while let Some(command) = self.core.poll_command() {
            if let Some(c) = &mut self.comparator {
                c.withheld(at, &command);
            }
            if let Some(why) = self.options.mode.withholds() {
                self.own.push_back(Input::ApiResult {
                    command: command.id,
                    outcome: ApiOutcome::NotSent { why },
                });
                self.outputs.push_back(Output::Withheld(command));
                continue;
            }
            if let Some(answer) = self.intake.dispatch(&command) {
                self.own.push_back(answer);
                continue;
            }
            let granted = self.admission.admit(command);
            self.send_all(granted);
        }
    }

    fn send_all(&mut self, commands: Vec<Command>) {
        self.outputs.extend(commands.into_iter().map(Output::Send));
    }

    /// Shutting down: nothing more is sent. Returns how many waiting commands were dropped.
    pub fn close(&mut self) -> usize {
        self.outputs.retain(|o| !matches!(o, Output::Send(_)));
        self.admission.close()
    }

    /// Commands sent and not answered.
    pub fn commands_in_flight(&self) -> usize {
        self.admission.in_flight()
    }

    /// Commands waiting for a slot (or for the eviction before them).
    pub fn commands_waiting(&self) -> usize {
        self.admission.waiting()
    }

    /// Whether polling now would do something (hand out an output or an append).
    pub fn has_work(&self) -> bool {
        !self.outputs.is_empty()
            || !self.own.is_empty()
            || self.intake.has_backlog()
            || self.intake.has_outputs()
    }

    /// Arrivals not turned into inputs yet.
    pub fn backlog_len(&self) -> usize {
        self.intake.backlog_len()
    }

    /// Unreadable objects read and not handed out yet.
    pub fn unreadable_retained(&self) -> usize {
        let queued = self.outputs.iter();
        self.intake.unreadable_retained()
            + queued
                .filter(|o| matches!(o, Output::Unreadable(_)))
                .count()
    }

    /// Unreadable objects dropped unreported since the start: more than
    /// [`crate::intake::mirror::UNREADABLE_OBJECTS_RETAINED_MAX`] were read at once.
    pub fn unreadable_dropped(&self) -> u64 {
        self.intake.unreadable_dropped()
    }
}

/// A cluster's relist is when its cache is synced: worth a line at `info`.
fn log_relists(input: &Input) {
    match input {
        Input::Relist { scope, objects } => tracing::info!(
            cluster = %crate::store::scope_name(scope),
            objects = objects.len(),
            "cache synced"
        ),
        Input::Batch { inputs } => inputs.iter().for_each(log_relists),
        _ => {}
    }
}

/// The answer for a command whose cluster went away before it could be sent.
fn unreachable(command: &Command, scope: &Scope) -> Input {
    Input::ApiResult {
        command: command.id,
        outcome: ApiOutcome::Unreachable {
            message: format!("the connection to the API of {scope:?} was dropped"),
        },
    }
}
