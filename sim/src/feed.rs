//! How inputs reach the engine in a simulation: appended to the journal first, then applied.

use engine::time::Timestamp;
use engine::{Engine, Input};

/// Journals and applies inputs. Keeps a count so reports can say how much was journaled.
pub struct Feeder {
    pub journal: Option<crate::journaling::SimJournal>,
    pub inputs: u64,
    /// Input descriptions by sequence number, so timelines can say what caused an action.
    pub causes: Vec<String>,
}

impl Feeder {
    pub fn new(journal: Option<crate::journaling::SimJournal>) -> Self {
        Feeder {
            journal,
            inputs: 0,
            causes: Vec::new(),
        }
    }

    pub fn feed(&mut self, engine: &mut Engine, now: Timestamp, input: Input) {
        if let Some(j) = &mut self.journal {
            j.append(now, &input);
        }
        self.inputs += 1;
        self.causes.push(input.describe());
        engine.handle(now, &input);
        debug_assert_eq!(engine.applied_seq(), self.inputs);
    }

    /// What the input with this sequence number was.
    pub fn cause(&self, seq: u64) -> &str {
        seq.checked_sub(1)
            .and_then(|i| self.causes.get(i as usize))
            .map_or("", String::as_str)
    }

    /// Group commit at the end of a simulated instant.
    pub fn end_of_instant(&mut self, engine: &Engine) {
        if let Some(j) = &mut self.journal {
            j.commit_and_maybe_snapshot(engine);
        }
    }
}

impl Feeder {
    /// The engine as a restarted process would rebuild it: from the journal when there is one
    /// (snapshot + replay), else from a snapshot of the live state.
    pub fn rebuild(&mut self, live: &Engine) -> Result<Engine, String> {
        match &mut self.journal {
            Some(j) => j.rebuild(),
            None => Engine::decode_state(&live.encode_state()).map_err(|e| e.to_string()),
        }
    }
}
