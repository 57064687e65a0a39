//! The production [`InputLog`]: the engine's sled journal, durable before an input is applied.

use super::core::InputLog;
use engine::journal::{Durability, Journal, JournalError, JournalOptions, OpenReport};
use engine::recovery::{self, Restored};
use engine::{Engine, Input, Timestamp};
use std::path::{Path, PathBuf};
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

/// How [`open_bounded`] opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// [`Journal::open`]: checked read-only in place, then opened for appending.
    Write,
    /// [`Journal::open_read_only`]: nothing in the directory is written.
    Read,
}

/// [`Journal::open`] (or [`Journal::open_read_only`]) on a thread, waiting at most
/// `timeout_s`. After a timeout the thread may still be spinning: the process must exit.
pub fn open_bounded(
    dir: &Path,
    options: JournalOptions,
    timeout_s: u64,
    access: Access,
) -> Result<(Journal, OpenReport), OpenFailure> {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(match access {
            Access::Write => Journal::open(&dir, options),
            Access::Read => Journal::open_read_only(&dir, options),
        });
    });
    match rx.recv_timeout(Duration::from_secs(timeout_s)) {
        Ok(opened) => opened.map_err(OpenFailure::Journal),
        Err(_) => Err(OpenFailure::TimedOut { after_s: timeout_s }),
    }
}

/// A snapshot of the engine is written after this many inputs, bounding restart time.
pub const SNAPSHOT_EVERY_INPUTS: u64 = 10_000;

/// What the controller's journal keeps (`lifecycle run --journal-keep-snapshots K`,
/// `--journal-keep-all`): the newest `snapshots_kept` snapshots and the records after the oldest
/// of them; older records are retired unless `retire_records` is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub snapshots_kept: usize,
    pub retire_records: bool,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            snapshots_kept: engine::journal::SNAPSHOTS_KEPT_MAX,
            retire_records: true,
        }
    }
}

/// The controller's journal. After a storage error (a full disk) sled keeps failing, so the
/// journal is closed and [`InputLog::recover`] reopens it.
pub struct SledLog {
    dir: PathBuf,
    options: JournalOptions,
    /// `None` after a storage error, until a reopen succeeds.
    journal: Option<Journal>,
    since_snapshot: u64,
    /// The last seq acknowledged to the caller (applied or about to be).
    acked_seq: u64,
    /// The thread closing the journal that failed (see [`SledLog::needs_restart`]).
    closing: Option<std::thread::JoinHandle<()>>,
    /// Consecutive `recover` calls that found space on the disk but the old journal not closed.
    wedged_checks: u32,
}

/// Checks `recover` makes before it judges a failed journal that will not close wedged.
const WEDGED_CHECKS_MIN: u32 = 3;
/// Bytes written (and removed) to see whether the journal's filesystem has space again.
const SPACE_PROBE_BYTES: usize = 64 << 10;

/// Whether `dir` can take [`SPACE_PROBE_BYTES`] more (written, fsynced and removed).
fn has_space(dir: &Path) -> bool {
    engine::journal::probe_space(dir, SPACE_PROBE_BYTES).is_ok()
}

impl SledLog {
    /// Opens (or creates) the journal in `dir` with the default [`Retention`] and rebuilds the
    /// engine from it.
    pub fn open(dir: &Path) -> Result<(SledLog, Restored), String> {
        SledLog::open_with(dir, Retention::default())
    }

    pub fn open_with(dir: &Path, retention: Retention) -> Result<(SledLog, Restored), String> {
        let options = JournalOptions {
            durability: Durability::Flush,
            snapshots_kept: retention.snapshots_kept,
            retire_records: retention.retire_records,
            ..Default::default()
        };
        let journal = open_journal(dir, options.clone())?;
        let restored = recovery::restore(&journal)
            .map_err(|e| format!("journal {}: cannot rebuild the engine: {e}", dir.display()))?;
        for p in &restored.skipped_snapshots {
            tracing::warn!(through_seq = p.through_seq, reason = %p.reason, "skipped a bad snapshot");
        }
        tracing::info!(
            snapshot = ?restored.snapshot_seq,
            replayed = restored.replayed,
            retired_through = journal.retired_through(),
            state = format!("{:016x}", restored.engine.state_hash()),
            "engine rebuilt from the journal"
        );
        Ok((
            SledLog {
                dir: dir.to_path_buf(),
                options,
                acked_seq: journal.last_seq().unwrap_or(0),
                journal: Some(journal),
                since_snapshot: restored.replayed,
                closing: None,
                wedged_checks: 0,
            },
            restored,
        ))
    }

    /// The open journal (`None` while closed after a storage error).
    pub fn journal(&self) -> Option<&Journal> {
        self.journal.as_ref()
    }

    fn journal_mut(&mut self) -> Result<&mut Journal, String> {
        self.journal.as_mut().ok_or_else(|| {
            "the journal is closed after a storage error (waiting to reopen it)".to_string()
        })
    }

    /// A storage error: sled keeps failing after one, so close it (reopened by `recover`).
    ///
    /// The journal is dropped on a thread of its own: sled flushes on drop, and after an I/O
    /// error that flush can wait forever (measured with sled 0.34.7 on a full tmpfs: it waits
    /// for a log buffer no thread will write, even after space returns), holding the
    /// directory's lock. See [`SledLog::needs_restart`].
    fn failed(&mut self, e: JournalError) -> String {
        if let Some(journal) = self.journal.take() {
            let spawned = std::thread::Builder::new()
                .name("journal-close".into())
                .spawn(move || drop(journal));
            match spawned {
                Ok(handle) => self.closing = Some(handle),
                Err(e) => tracing::error!(error = %e, "cannot start a thread to close the journal"),
            }
        }
        e.to_string()
    }

    /// The disk has space again but the failed journal never finished closing, so its lock
    /// is held for good: only ending the process (or `exec`, which closes sled's files) frees
    /// it. `lifecycle run` then re-executes itself, and the new process opens the journal as
    /// any restart does (every committed record checked against the commit record).
    pub fn needs_restart(&self) -> bool {
        self.wedged_checks >= WEDGED_CHECKS_MIN
    }

    /// Writes a snapshot when enough inputs have passed since the last one.
    pub fn maybe_snapshot(&mut self, engine: &Engine) -> Result<(), String> {
        if self.since_snapshot < SNAPSHOT_EVERY_INPUTS {
            return Ok(());
        }
        let written = self.journal_mut()?.write_snapshot(
            engine.applied_seq(),
            engine.now(),
            &engine.encode_state(),
        );
        written.map_err(|e| self.failed(e))?;
        // The identity file witnesses how far the commit record reached (see `Journal::seal`).
        let sealed = self.journal_mut()?.seal();
        sealed.map_err(|e| self.failed(e))?;
        self.since_snapshot = 0;
        Ok(())
    }
}

fn open_journal(dir: &Path, options: JournalOptions) -> Result<Journal, String> {
    let (journal, report) =
        open_bounded(dir, options, JOURNAL_OPEN_TIMEOUT_S, Access::Write).map_err(|e| match e {
            OpenFailure::Journal(e) if e.is_damage() => format!(
                "journal {}: {e}. Nothing was changed; `lifecycle log repair --journal {} --dry-run` lists what a repair would do",
                dir.display(),
                dir.display()
            ),
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
    for copy in &report.recovered_commit_copies {
        tracing::warn!(copy = %copy, "a copy of the journal's commit record was lost or damaged: written again from the other copy (no record lost)");
    }
    Ok(journal)
}

impl InputLog for SledLog {
    fn append(&mut self, now: Timestamp, input: &Input) -> Result<u64, String> {
        let payload = recovery::encode_input(input);
        let appended = self.journal_mut()?.append(now, &payload);
        let seq = appended.map_err(|e| self.failed(e))?;
        self.acked_seq = seq;
        self.since_snapshot += 1;
        Ok(seq)
    }

    fn after_handle(&mut self, engine: Option<&Engine>) -> Result<(), String> {
        match engine {
            Some(e) => self.maybe_snapshot(e),
            None => Ok(()),
        }
    }

    fn needs_restart(&self) -> bool {
        SledLog::needs_restart(self)
    }

    fn close(&mut self) -> Result<(), String> {
        if let Some(mut journal) = self.journal.take() {
            journal.seal().map_err(|e| self.failed(e))?;
        }
        Ok(())
    }

    /// Reopens the journal; returns the records it holds beyond the last acknowledged one
    /// (an append whose flush failed may have reached the disk: it is journaled, so it must
    /// be applied).
    fn recover(&mut self) -> Result<Vec<(Timestamp, Input)>, String> {
        if self.journal.is_some() {
            return Ok(Vec::new());
        }
        if let Some(closing) = &self.closing {
            if !closing.is_finished() {
                if has_space(&self.dir) {
                    self.wedged_checks += 1;
                } else {
                    self.wedged_checks = 0;
                }
                return Err(format!(
                    "journal {}: the journal that failed has not closed yet (its lock is held)",
                    self.dir.display()
                ));
            }
            self.closing = None;
        }
        let journal = open_journal(&self.dir, self.options.clone())?;
        let last = journal.last_seq().unwrap_or(0);
        if last < self.acked_seq {
            return Err(format!(
                "journal {}: reopened with records 1..{last} but 1..{} were acknowledged",
                self.dir.display(),
                self.acked_seq
            ));
        }
        let mut unapplied = Vec::new();
        let mut failure = None;
        if last > self.acked_seq {
            journal
                .for_each_record(self.acked_seq + 1, |r| {
                    match recovery::decode_input(r.seq, r.payload) {
                        Ok(input) => unapplied.push((r.at, input)),
                        Err(e) => failure = Some(e.to_string()),
                    }
                    if failure.is_some() {
                        std::ops::ControlFlow::Break(())
                    } else {
                        std::ops::ControlFlow::Continue(())
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        self.since_snapshot += unapplied.len() as u64;
        self.acked_seq = last;
        self.journal = Some(journal);
        Ok(unapplied)
    }
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
                log.after_handle(Some(&engine)).unwrap();
            }
            engine.state_hash()
        };
        let (_log, restored) = SledLog::open(dir.path()).unwrap();
        assert_eq!(restored.replayed, inputs.len() as u64);
        assert_eq!(restored.engine.state_hash(), live_hash);
    }
}
