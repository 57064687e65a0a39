//! Status converges: once nothing the controller sent is pending (no request in flight, no
//! refused condition write waiting to be tried again) for [`QUIET_FOR`], what it sends in its
//! mode shows what the controllers last decided. Alone, that is every condition a controller
//! reported deciding ([`engine::decision`]: the deletion's steps, the health check's and the
//! MachinePool's conditions of their object) and every Event; in takeover, the deletion's own
//! `LifecycleDeleting`, the conditions of the health checks and MachinePools it adopted, and
//! its Events (CAPI's manager writes the rest); in shadow nothing (it sends nothing).
//!
//! A condition has converged when the object shows it as last decided, written or not (a
//! step's condition decided once and never written is what this catches), or shows none of a
//! type decided absent ([`conditions`]). An Event has converged when it shows the last
//! emission of its series the API accepted, or a later one it did not refuse ([`events`]).
//!
//! In process the rule is checked once nothing has been pending for [`QUIET_FOR`]; over HTTP
//! from the controller's journal (its decisions, commands and when they were answered) against
//! what the served world showed over time ([`journal`]).

pub mod conditions;
pub mod events;
pub mod journal;

pub use events::{EventKey, Shown};
pub use journal::{Served, judge_journal};

use engine::decision::Decision;
use engine::model::{Conditions, ObjectKey};
use engine::runtime::Mode;
use engine::time::{Duration, Timestamp};
use engine::{Command, Input};

/// How long nothing may be pending before the API must show the decisions.
pub const QUIET_FOR: Duration = crate::differential::QUIET_FOR;

/// What the API shows, as the rule reads it.
pub trait Shows {
    /// An object's conditions: `None` when it is gone, `Some(None)` when it does not read.
    fn conditions(&self, key: &ObjectKey) -> Option<Option<&Conditions>>;
    /// An Event, when it exists.
    fn event(&self, key: &EventKey) -> Option<Shown>;
}

/// What the controllers last decided and the Events they sent, folded from what the
/// controller handled and sent.
#[derive(Clone, Debug, Default)]
pub struct Convergence {
    conditions: conditions::DecidedConditions,
    events: events::EventLedger,
    /// In process: since when nothing has been pending.
    pub quiet: Quiet,
}

/// In process: since when the controller has had nothing pending, and whether that spell has
/// been checked. The world may change meanwhile (CAPI's manager renews its Lease every 10 s):
/// what the controller decides of a change without writing is judged with the rest.
#[derive(Clone, Debug, Default)]
pub struct Quiet {
    since: Option<Timestamp>,
    checked: bool,
}

impl Quiet {
    /// A command went out: what it changes is pending, answered or not by the instant's end.
    fn busy(&mut self) {
        self.since = None;
    }

    /// After an instant: whether anything is pending now.
    pub fn note(&mut self, now: Timestamp, pending: bool) {
        match (pending, self.since) {
            (true, _) => self.since = None,
            (false, None) => {
                self.since = Some(now);
                self.checked = false;
            }
            (false, Some(_)) => {}
        }
    }

    /// When the spell reaches [`QUIET_FOR`] before the world moves on at `next` (once per
    /// spell; `None` if it does not, or did before `now`).
    pub fn due_before(&mut self, now: Timestamp, next: Timestamp) -> Option<Timestamp> {
        let due = self.since? + QUIET_FOR;
        if self.checked || due >= next || due < now {
            return None;
        }
        self.checked = true;
        Some(due)
    }

    /// How long nothing has been pending at `now`, once that is at least [`QUIET_FOR`].
    pub fn lasted(&self, now: Timestamp) -> Option<Duration> {
        self.since
            .map(|since| now.since(since))
            .filter(|d| *d >= QUIET_FOR)
    }
}

impl Convergence {
    /// Folds in one input's decisions, in the controller's mode.
    pub fn note(&mut self, mode: Mode, decisions: &[Decision]) {
        self.conditions.note(mode, decisions);
    }

    /// An input the controller handled (the answers it carries).
    pub fn input(&mut self, input: &Input) {
        self.events.input(input);
    }

    /// A command the controller sent (not withheld).
    pub fn sent(&mut self, command: &Command) {
        self.quiet.busy();
        self.events.sent(command);
    }

    /// Compares what was decided and sent with what `api` shows after `quiet`: a message per
    /// object condition or Event that differs, each reported once, with the object it is about.
    pub fn check(&mut self, api: &impl Shows, quiet: Duration) -> Vec<(String, String)> {
        let mut found = self.conditions.check(|k| api.conditions(k), quiet);
        found.extend(self.events.check(|k| api.event(k), quiet));
        found
    }
}

/// The conditions of a served object's JSON (`None`: it does not read).
pub fn conditions_of_json(value: &serde_json::Value) -> Option<Conditions> {
    let object = engine::convert::object_from_json(value).ok()??;
    engine::decision::conditions_of(&object).cloned()
}

/// In process: the simulator's API as it is now.
impl Shows for crate::api::FakeApi {
    fn conditions(&self, key: &ObjectKey) -> Option<Option<&Conditions>> {
        let obj =
            crate::api::ObjKey::new(key.kind.group(), key.kind.name(), &key.namespace, &key.name);
        let reading = self.store(&key.scope)?.read(&obj)?;
        let object = reading.as_ref().ok().and_then(Option::as_ref);
        Some(object.and_then(engine::decision::conditions_of))
    }

    fn event(&self, key: &EventKey) -> Option<Shown> {
        self.events
            .get(&key.scope, &key.namespace, &key.name)
            .map(Shown::of_json)
    }
}
