//! The simulation's journal: the engine's real sled journal, in a temporary directory unless
//! `--journal DIR` keeps it.
//!
//! Every input is appended before it is applied. Durability is `Buffered` (a simulation needs no
//! fsync) and records are group-committed to sled once per simulated instant, or every
//! [`COMMIT_RECORDS_MAX`] records — as a controller process commits one batch per wake-up.

use engine::journal::{Damage, Durability, Journal, JournalOptions};
use engine::recovery;
use engine::time::Timestamp;
use engine::{Engine, Input};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// sled segments for simulation journals: large enough that the many small per-instant batches
/// stay in sled's log rather than each becoming a file, and no larger: sled zeroes a segment's
/// buffer at every open and recovery, and a sweep opens a journal per run and per restart (at
/// 8 MiB that was a quarter of a sweep's time; sweep runs per second doubled at 1 MiB).
pub const SIM_SEGMENT_BYTES: usize = 1 << 20;
/// How simulation journals are opened.
pub(crate) fn sim_options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Buffered,
        segment_bytes: SIM_SEGMENT_BYTES,
        ..Default::default()
    }
}

/// Records buffered before they are written to sled even within one instant.
pub const COMMIT_RECORDS_MAX: usize = 4096;
/// A state snapshot is written after this many records.
pub const SNAPSHOT_EVERY_RECORDS: u64 = 50_000;

/// What a `--journal` directory was before a run, so that a run that fails removes only what
/// it made: the directory when the run creates it (with the parents it creates), else the
/// entries it adds. A directory that already held a journal is left as it is: sled may have
/// rewritten its files, and they are not the run's to remove.
#[derive(Debug)]
pub(crate) struct JournalDirBefore {
    dir: PathBuf,
    /// The outermost directory the run creates (`None`: `dir` exists).
    created: Option<PathBuf>,
    /// What an existing `dir` held (`None`: a journal, or it could not be listed).
    entries: Option<BTreeSet<OsString>>,
}

impl JournalDirBefore {
    pub(crate) fn note(dir: &Path) -> JournalDirBefore {
        let created = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && d.symlink_metadata().is_err())
            .last()
            .map(Path::to_path_buf);
        let journal_files = [
            engine::journal::CONF_FILE,
            engine::journal::DB_FILE,
            engine::journal::IDENTITY_FILE,
            engine::journal::COMMITS_FILE,
            engine::journal::COMMITS_MIRROR_FILE,
        ];
        let entries = match &created {
            Some(_) => None,
            None => std::fs::read_dir(dir)
                .ok()
                .and_then(|list| {
                    list.map(|e| e.ok().map(|e| e.file_name()))
                        .collect::<Option<BTreeSet<_>>>()
                })
                .filter(|names| {
                    !journal_files
                        .iter()
                        .any(|f| names.contains(&OsString::from(f)))
                }),
        };
        JournalDirBefore {
            dir: dir.to_path_buf(),
            created,
            entries,
        }
    }

    /// Removes what the run made (call once its journal is closed).
    pub(crate) fn remove_created(&self) -> Result<(), String> {
        let failed =
            |path: &Path, e: std::io::Error| format!("cannot remove {}: {e}", path.display());
        if let Some(root) = &self.created {
            return match std::fs::remove_dir_all(root) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed(root, e)),
                _ => Ok(()),
            };
        }
        let (Some(before), Ok(now)) = (&self.entries, std::fs::read_dir(&self.dir)) else {
            return Ok(());
        };
        for entry in now.flatten() {
            if before.contains(&entry.file_name()) {
                continue;
            }
            let path = entry.path();
            let removed = match entry.file_type() {
                Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
            removed.map_err(|e| failed(&path, e))?;
        }
        Ok(())
    }
}

pub struct SimJournal {
    journal: Journal,
    /// The first error the journal reported; appends stop after it and the run reports it.
    pub error: Option<String>,
    dir: std::path::PathBuf,
    pending: Vec<(Timestamp, Vec<u8>)>,
    last_snapshot: u64,
    _temp: Option<tempfile::TempDir>,
}

impl SimJournal {
    /// Opens a journal in `dir` (which must hold none yet), or in a temporary directory.
    pub fn open(dir: Option<&Path>) -> Result<SimJournal, String> {
        let temp = match dir {
            Some(_) => None,
            None => Some(
                tempfile::tempdir()
                    .map_err(|e| format!("cannot create a temporary journal: {e}"))?,
            ),
        };
        let path = dir.unwrap_or_else(|| temp.as_ref().expect("set above").path());
        let options = sim_options();
        let (journal, report) =
            Journal::open(path, options).map_err(|e| format!("journal {}: {e}", path.display()))?;
        let dir = path.to_path_buf();
        if report.next_seq != 1 {
            return Err(format!(
                "journal {} already holds {} records: give `--journal` an empty directory",
                path.display(),
                report.next_seq - 1
            ));
        }
        Ok(SimJournal {
            journal,
            error: None,
            dir,
            pending: Vec::new(),
            last_snapshot: 0,
            _temp: temp,
        })
    }

    /// Appends an input (it is written to sled at the next commit).
    pub fn append(&mut self, now: Timestamp, input: &Input) {
        self.pending.push((now, recovery::encode_input(input)));
        if self.pending.len() >= COMMIT_RECORDS_MAX {
            self.commit();
        }
    }

    /// Writes the buffered records as one batch.
    pub fn commit(&mut self) {
        if self.pending.is_empty() || self.error.is_some() {
            self.pending.clear();
            return;
        }
        let entries: Vec<(Timestamp, &[u8])> = self
            .pending
            .iter()
            .map(|(t, p)| (*t, p.as_slice()))
            .collect();
        if let Err(e) = self.journal.append_batch(&entries) {
            self.error = Some(format!("journal: {e}"));
        }
        self.pending.clear();
    }

    /// Commits (once per simulated instant, as a controller commits once per wake-up), and
    /// writes a snapshot of `engine` when enough records have passed.
    pub fn commit_and_maybe_snapshot(&mut self, engine: &Engine) {
        self.commit();
        let seq = engine.applied_seq();
        if self.error.is_none() && seq >= self.last_snapshot + SNAPSHOT_EVERY_RECORDS {
            let state = engine.encode_state();
            if let Err(e) = self.journal.write_snapshot(seq, engine.now(), &state) {
                self.error = Some(format!("journal snapshot: {e}"));
            }
            self.last_snapshot = seq;
        }
    }

    /// The engine as a restarted controller rebuilds it: latest snapshot plus replayed tail.
    pub fn rebuild(&mut self) -> Result<Engine, String> {
        self.commit();
        recovery::restore(&self.journal)
            .map(|r| r.engine)
            .map_err(|e| e.to_string())
    }

    /// A crash mid-write: records not yet committed are lost, the last batch is torn in half,
    /// and the journal is reopened (which truncates the torn batch). Returns the reopened
    /// journal and the first sequence number the crash lost, as reopening reported it.
    pub fn crash_with_torn_tail(mut self) -> Result<(SimJournal, Option<u64>), String> {
        self.pending.clear();
        if let Some(last) = self.journal.last_seq() {
            self.journal
                .damage_for_test(Damage::TearBatch { seq: last })
                .map_err(|e| e.to_string())?;
        }
        let SimJournal {
            journal,
            dir,
            _temp,
            ..
        } = self;
        // sled holds the directory lock until the journal is dropped.
        drop(journal);
        let options = sim_options();
        let (journal, report) =
            Journal::open(&dir, options).map_err(|e| format!("journal {}: {e}", dir.display()))?;
        let reopened = SimJournal {
            journal,
            error: None,
            dir,
            pending: Vec::new(),
            last_snapshot: 0,
            _temp,
        };
        Ok((reopened, report.truncated_tail.map(|t| t.from_seq)))
    }

    /// The `journal-damage` fault: the controller is down, its journal is damaged on disk and
    /// judged at the restart, then put back intact (see `journal_damage.rs`). Pending records
    /// are committed first: everything the engine applied is committed.
    pub fn crash_with_damage(
        mut self,
        kind: &str,
        roll: u64,
    ) -> Result<(SimJournal, crate::journal_damage::DamageReport), String> {
        self.commit();
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let SimJournal {
            journal,
            dir,
            _temp,
            last_snapshot,
            ..
        } = self;
        let options = sim_options();
        let report = crate::journal_damage::damage_and_check(journal, &dir, &options, kind, roll)?;
        let (journal, _) =
            Journal::open(&dir, options).map_err(|e| format!("journal {}: {e}", dir.display()))?;
        let reopened = SimJournal {
            journal,
            error: None,
            dir,
            pending: Vec::new(),
            last_snapshot,
            _temp,
        };
        Ok((reopened, report))
    }

    /// Commits and flushes; a kept journal is then complete on disk. `state`: the engine's
    /// state as [`Engine::encode_state`] encoded it, for the last snapshot.
    pub fn finish(&mut self, engine: &Engine, state: &[u8]) -> Result<(), String> {
        self.commit();
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if engine.applied_seq() > self.last_snapshot {
            self.journal
                .write_snapshot(engine.applied_seq(), engine.now(), state)
                .map_err(|e| e.to_string())?;
        }
        self.journal.seal().map_err(|e| e.to_string())
    }
}
