//! How inputs reach the engine in a simulation: appended to the journal first, then applied.

use engine::time::Timestamp;
use engine::{Engine, Input};

/// Journals and applies inputs. Keeps a count so reports can say how much was journaled.
pub struct Feeder {
    pub journal: Option<crate::journaling::SimJournal>,
    pub inputs: u64,
    /// Input descriptions by sequence number, so timelines can say what caused an action.
    pub causes: Vec<String>,
    /// Changes every input before it is journaled: lets a test plant a bug from the outside
    /// (for example, hide an annotation from the controllers) and show the checks catch it.
    pub filter: Option<fn(&mut Input)>,
}

impl Feeder {
    pub fn new(journal: Option<crate::journaling::SimJournal>) -> Self {
        Feeder {
            journal,
            inputs: 0,
            causes: Vec::new(),
            filter: None,
        }
    }

    /// Journals `input` (the loop applies it next); returns how it is described, `None` for a
    /// tick (told by the timers it fires, known once it is applied).
    pub fn journal(&mut self, now: Timestamp, input: &Input) -> Option<String> {
        if let Some(j) = &mut self.journal {
            j.append(now, input);
        }
        self.inputs += 1;
        (!matches!(input, Input::Tick)).then(|| input.describe())
    }

    /// The loop applied the input journaled last.
    pub fn applied(&mut self, engine: &Engine, described: Option<String>) {
        self.causes.push(
            described.unwrap_or_else(|| engine::timer::describe_fired(engine.fired_timers())),
        );
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
    /// A crash that tears the journal's tail (see `SimJournal::crash_with_torn_tail`).
    pub fn crash_with_torn_tail(&mut self) -> Result<Option<u64>, String> {
        let Some(journal) = self.journal.take() else {
            return Err("no journal to crash".into());
        };
        let (journal, lost) = journal.crash_with_torn_tail()?;
        self.journal = Some(journal);
        Ok(lost)
    }

    /// The `journal-damage` fault (see `SimJournal::crash_with_damage`); `None` without a
    /// journal.
    pub fn crash_with_damage(
        &mut self,
        kind: &str,
        roll: u64,
    ) -> Result<Option<crate::journal_damage::DamageReport>, String> {
        let Some(journal) = self.journal.take() else {
            return Ok(None);
        };
        let (journal, report) = journal.crash_with_damage(kind, roll)?;
        self.journal = Some(journal);
        Ok(Some(report))
    }

    /// After a crash that lost the journal's tail: forget the inputs the rebuilt engine never
    /// saw, so sequence numbers continue from the journal.
    pub fn truncate_to(&mut self, applied_seq: u64) {
        self.inputs = applied_seq;
        self.causes.truncate(applied_seq as usize);
    }

    /// The engine as a restarted process would rebuild it: from the journal when there is one
    /// (snapshot + replay), else from a snapshot of the live state.
    pub fn rebuild(&mut self, live: &Engine) -> Result<Engine, String> {
        match &mut self.journal {
            Some(j) => j.rebuild(),
            None => Engine::decode_state(&live.encode_state()).map_err(|e| e.to_string()),
        }
    }
}
