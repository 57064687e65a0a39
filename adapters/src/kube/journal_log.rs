//! The production [`InputLog`]: the engine's sled journal, durable before an input is applied.

use super::core::InputLog;
use engine::journal::{Durability, Journal, JournalError, JournalOptions, OpenReport};
use engine::recovery::{self, Restored};
use engine::{Engine, Input, Timestamp};
use std::path::Path;
use std::time::Duration;

/// sled can spin forever on some damaged files (a missing newest blob) and a spinning thread
/// cannot be cancelled, so opening is bounded: past this the caller gives up and exits.
pub const JOURNAL_OPEN_TIMEOUT_S: u64 = 60;

/// Why [`open_bounded`] failed.
#[derive(Debug)]
pub enum OpenFailure {
    Journal(JournalError),
    TimedOut { after_s: u64 },
}

/// [`Journal::open`] on a thread, waiting at most `timeout_s`. After a timeout the thread may
/// still be spinning: the process must exit.
pub fn open_bounded(
    dir: &Path,
    options: JournalOptions,
    timeout_s: u64,
) -> Result<(Journal, OpenReport), OpenFailure> {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Journal::open(&dir, options));
    });
    match rx.recv_timeout(Duration::from_secs(timeout_s)) {
        Ok(opened) => opened.map_err(OpenFailure::Journal),
        Err(_) => Err(OpenFailure::TimedOut { after_s: timeout_s }),
    }
}

/// A snapshot of the engine is written after this many inputs, bounding restart time.
pub const SNAPSHOT_EVERY_INPUTS: u64 = 10_000;

pub struct SledLog {
    journal: Journal,
    since_snapshot: u64,
}

impl SledLog {
    /// Opens (or creates) the journal in `dir` and rebuilds the engine from it.
    pub fn open(dir: &Path) -> Result<(SledLog, Restored), String> {
        let options = JournalOptions {
            durability: Durability::Flush,
            ..Default::default()
        };
        let (journal, report) = open_bounded(dir, options, JOURNAL_OPEN_TIMEOUT_S).map_err(|e| match e {
            OpenFailure::Journal(e) => format!("journal {}: {e}", dir.display()),
            OpenFailure::TimedOut { after_s } => format!(
                "journal {}: opening did not finish within {after_s} s (sled is stuck on damaged files); run `lifecycle log verify --journal {}`",
                dir.display(),
                dir.display()
            ),
        })?;
        if let Some(t) = &report.truncated_tail {
            tracing::warn!(
                from_seq = t.from_seq,
                bytes = t.bytes,
                reason = %t.reason,
                "a torn last batch (from a crash) was removed from the journal"
            );
        }
        let restored = recovery::restore(&journal)
            .map_err(|e| format!("journal {}: cannot rebuild the engine: {e}", dir.display()))?;
        for p in &restored.skipped_snapshots {
            tracing::warn!(through_seq = p.through_seq, reason = %p.reason, "skipped a bad snapshot");
        }
        tracing::info!(
            snapshot = ?restored.snapshot_seq,
            replayed = restored.replayed,
            state = format!("{:016x}", restored.engine.state_hash()),
            "engine rebuilt from the journal"
        );
        Ok((
            SledLog {
                journal,
                since_snapshot: restored.replayed,
            },
            restored,
        ))
    }

    /// Writes a snapshot when enough inputs have passed since the last one.
    pub fn maybe_snapshot(&mut self, engine: &Engine) -> Result<(), String> {
        if self.since_snapshot < SNAPSHOT_EVERY_INPUTS {
            return Ok(());
        }
        self.journal
            .write_snapshot(engine.applied_seq(), engine.now(), &engine.encode_state())
            .map_err(|e| e.to_string())?;
        self.since_snapshot = 0;
        Ok(())
    }
}

impl InputLog for SledLog {
    fn append(&mut self, now: Timestamp, input: &Input) -> Result<u64, String> {
        let seq = self
            .journal
            .append(now, &recovery::encode_input(input))
            .map_err(|e| e.to_string())?;
        self.since_snapshot += 1;
        Ok(seq)
    }

    fn after_handle(&mut self, engine: &dyn SnapshotSource) -> Result<(), String> {
        match engine.engine() {
            Some(e) => self.maybe_snapshot(e),
            None => Ok(()),
        }
    }
}

/// A core that can be snapshotted (the real engine).
pub trait SnapshotSource {
    fn engine(&self) -> Option<&Engine>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::{Object, Scope};
    use engine::testing;

    #[test]
    fn a_restarted_process_rebuilds_the_same_engine_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = [
            Input::Relist {
                scope: Scope::Management,
                objects: vec![
                    Object::Cluster(testing::cluster("c1")),
                    Object::Machine(testing::machine("c1", "m1", Some("n1"))),
                ],
            },
            Input::Relist {
                scope: testing::workload("c1"),
                objects: vec![Object::Node(testing::node("n1"))],
            },
            Input::Tick,
        ];
        let live_hash = {
            let (mut log, restored) = SledLog::open(dir.path()).unwrap();
            assert_eq!(restored.replayed, 0);
            let mut engine = restored.engine;
            for (i, input) in inputs.iter().enumerate() {
                let at = Timestamp(1_000 * i as i64);
                assert_eq!(log.append(at, input).unwrap(), i as u64 + 1);
                engine.handle(at, input.clone());
                log.after_handle(&engine).unwrap();
            }
            engine.state_hash()
        };
        let (_log, restored) = SledLog::open(dir.path()).unwrap();
        assert_eq!(restored.replayed, inputs.len() as u64);
        assert_eq!(restored.engine.state_hash(), live_hash);
    }
}
