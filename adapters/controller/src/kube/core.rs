//! What the adapter loop drives and where it records inputs.

/// The sans-IO core the loop feeds: [`Engine`] in production, a scripted stand-in in tests.
pub use engine::runtime::Core;
use engine::{Engine, Input, Timestamp};

/// Where every input is appended before the core applies it: the sled journal
/// ([`super::journal_log::SledLog`]) in production, [`MemoryLog`] in tests.
pub trait InputLog {
    /// Appends one input; returns its sequence number (from 1). On an error the input is not
    /// applied: the adapter stops acting and calls [`InputLog::recover`] until it succeeds.
    fn append(&mut self, now: Timestamp, input: &Input) -> Result<u64, String>;
    /// Called after the core applied an input (the journal snapshots the engine now and then).
    /// An error makes the adapter stop acting as an append error does.
    fn after_handle(&mut self, _engine: Option<&Engine>) -> Result<(), String> {
        Ok(())
    }
    /// Makes the log writable again after an error (reopening it). Returns the inputs it holds
    /// beyond the last acknowledged append, oldest first, with their journaled times: they were
    /// journaled and must be applied (an append may reach the disk although it reported an
    /// error). An error: still unwritable, try again later.
    fn recover(&mut self) -> Result<Vec<(Timestamp, Input)>, String> {
        Ok(Vec::new())
    }
    /// Makes everything appended durable and closes the log (a graceful shutdown).
    fn close(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// After a failed [`InputLog::recover`]: only a new process can reopen the log (the
    /// adapter then stops and its caller re-executes itself).
    fn needs_restart(&self) -> bool {
        false
    }
}

/// Inputs kept in memory, oldest first (bounded by `capacity`, dropping the oldest).
#[derive(Debug, Default)]
pub struct MemoryLog {
    pub entries: std::collections::VecDeque<(u64, Timestamp, Input)>,
    pub capacity: usize,
    seq: u64,
}

impl MemoryLog {
    pub fn new(capacity: usize) -> Self {
        MemoryLog {
            capacity: capacity.max(1),
            ..Default::default()
        }
    }
}

impl InputLog for MemoryLog {
    fn append(&mut self, now: Timestamp, input: &Input) -> Result<u64, String> {
        self.seq += 1;
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back((self.seq, now, input.clone()));
        Ok(self.seq)
    }
}
