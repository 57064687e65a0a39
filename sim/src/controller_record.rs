//! One journal record of a controller process, as replayed from its journal: what the live
//! world, the convergence rule and `explain` read.

use engine::time::Timestamp;
use engine::{Command, Input};
use std::collections::BTreeMap;

/// One journal record of the controller: the input and the commands it caused.
#[derive(Clone, Debug)]
pub struct ControllerRecord {
    pub seq: u64,
    pub at: Timestamp,
    pub input: Input,
    pub commands: Vec<Command>,
    /// The timers the input fired (a tick's; empty for other inputs).
    pub fired: Vec<engine::FiredTimer>,
    /// Those of `commands` never sent (their answer, journaled later, is `NotSent`).
    pub withheld: BTreeMap<u64, engine::Withheld>,
    /// The conditions the controllers decided handling the input, written or not.
    pub decisions: Vec<engine::decision::Decision>,
}

impl ControllerRecord {
    /// The input as a cause: a tick names the timers it fired.
    pub fn describe(&self) -> String {
        match self.input {
            Input::Tick => engine::timer::describe_fired(&self.fired),
            _ => self.input.describe(),
        }
    }
}
