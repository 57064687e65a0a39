//! Rebuilding the engine from its journal: the latest good snapshot, then the tail replayed.
//!
//! *Expected flow:* a process opens the journal, calls [`restore`], feeds [`crate::Input::Restarted`]
//! and relists every cluster. [`verify`] is the offline check behind `lifecycle log verify`.
//! *Guarantees:* the engine after `restore` equals the live engine that had applied the same
//! inputs (state hashes prove it); a record that fails its checksum or does not decode stops the
//! replay with an error naming its sequence number — nothing after it is applied.

use crate::codec;
use crate::journal::{Journal, JournalError, Snapshot, SnapshotProblem};
use crate::{Engine, Input};
use std::fmt;
use std::ops::ControlFlow;

/// What [`restore`] rebuilt and from where.
#[derive(Debug)]
pub struct Restored {
    pub engine: Engine,
    /// The snapshot the replay started from (`None`: from the first record).
    pub snapshot_seq: Option<u64>,
    /// Records replayed after the snapshot.
    pub replayed: u64,
    /// Newer snapshots that failed their checks and were passed over.
    pub skipped_snapshots: Vec<SnapshotProblem>,
}

#[derive(Debug)]
pub enum RecoveryError {
    Journal(JournalError),
    /// A record's payload is not an engine input.
    Undecodable {
        seq: u64,
        reason: String,
    },
    /// Replay needs record `expected` but the journal goes on at `found` (records retired
    /// behind a snapshot this build cannot read).
    Gap {
        expected: u64,
        found: u64,
    },
    /// A snapshot's state is not an engine state.
    BadSnapshot {
        through_seq: u64,
        reason: String,
    },
    /// Records `1..=retired_through` were retired and no kept snapshot is usable, so the
    /// engine cannot be rebuilt (replaying from the first kept record would start mid-history).
    NoSnapshotForRetained {
        retired_through: u64,
        reason: String,
    },
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryError::Journal(e) => write!(f, "{e}"),
            RecoveryError::Undecodable { seq, reason } => {
                write!(f, "record {seq} is not an engine input: {reason}")
            }
            RecoveryError::Gap { expected, found } => write!(
                f,
                "replay needs record {expected} but the journal goes on at record {found}: the \
                 records before it were retired behind a snapshot this build cannot read"
            ),
            RecoveryError::BadSnapshot {
                through_seq,
                reason,
            } => write!(
                f,
                "snapshot through record {through_seq} is not an engine state: {reason}"
            ),
            RecoveryError::NoSnapshotForRetained {
                retired_through,
                reason,
            } => write!(
                f,
                "records 1..{retired_through} were retired and no kept snapshot is usable ({reason}): the engine cannot be rebuilt"
            ),
        }
    }
}

impl std::error::Error for RecoveryError {}

impl From<JournalError> for RecoveryError {
    fn from(e: JournalError) -> Self {
        RecoveryError::Journal(e)
    }
}

/// The journal payload of an input.
pub fn encode_input(input: &Input) -> Vec<u8> {
    codec::encode(input).expect("inputs always encode: ordered maps, no floats")
}

pub fn decode_input(seq: u64, payload: &[u8]) -> Result<Input, RecoveryError> {
    codec::decode(payload).map_err(|e| RecoveryError::Undecodable {
        seq,
        reason: e.to_string(),
    })
}

/// Applies every record after the engine's last applied one to it.
pub fn replay_into(engine: &mut Engine, journal: &Journal) -> Result<u64, RecoveryError> {
    let mut failure = None;
    let mut replayed = 0;
    journal.for_each_record(engine.applied_seq() + 1, |record| {
        if record.seq != engine.applied_seq() + 1 {
            failure = Some(RecoveryError::Gap {
                expected: engine.applied_seq() + 1,
                found: record.seq,
            });
            return ControlFlow::Break(());
        }
        match decode_input(record.seq, record.payload) {
            Ok(input) => {
                // What the controllers log while an input is replayed happened at the recorded
                // time, before the restart: every line carries this span, so it never reads as
                // an action taken now (the commands are dropped below).
                let span = tracing::info_span!("replayed", seq = record.seq, at = %record.at);
                let _entered = span.enter();
                engine.handle(record.at, input);
                assert_eq!(engine.applied_seq(), record.seq, "replay stays in step");
                // Commands were executed when the input was live; their results are journaled.
                while engine.poll_command().is_some() {}
                replayed += 1;
                ControlFlow::Continue(())
            }
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(replayed),
    }
}

/// The engine a snapshot holds, checked to be as of its seq.
fn engine_from(s: &Snapshot) -> Result<Engine, RecoveryError> {
    let engine = Engine::decode_state_of(s.state_version, &s.state).map_err(|e| {
        RecoveryError::BadSnapshot {
            through_seq: s.through_seq,
            reason: e.to_string(),
        }
    })?;
    if engine.applied_seq() != s.through_seq {
        return Err(RecoveryError::BadSnapshot {
            through_seq: s.through_seq,
            reason: format!("it says it applied {} records", engine.applied_seq()),
        });
    }
    Ok(engine)
}

/// The engine rebuilt from the latest good snapshot (or from scratch) plus the journal's tail.
///
/// *Errors:* with records retired, [`RecoveryError::NoSnapshotForRetained`] when no kept
/// snapshot is usable (never a replay that starts mid-history).
pub fn restore(journal: &Journal) -> Result<Restored, RecoveryError> {
    let retired = journal.retired_through();
    let (mut engine, snapshot_seq, skipped_snapshots) = match journal.latest_snapshot() {
        Ok(Some(s)) => match Engine::decode_state_of(s.state_version, &s.state) {
            // Checksummed, so not damage: a state another build wrote (an upgrade). With every
            // record still there, they rebuild it.
            Err(e) if retired == 0 => {
                let mut skipped = s.skipped;
                skipped.push(SnapshotProblem {
                    through_seq: s.through_seq,
                    reason: format!(
                        "this build cannot read its state ({e}); replaying every record instead"
                    ),
                });
                let mut engine = Engine::new();
                let replayed = replay_into(&mut engine, journal)?;
                return Ok(Restored {
                    engine,
                    snapshot_seq: None,
                    replayed,
                    skipped_snapshots: skipped,
                });
            }
            _ => (engine_from(&s)?, Some(s.through_seq), s.skipped),
        },
        Ok(None) if retired > 0 => {
            return Err(RecoveryError::NoSnapshotForRetained {
                retired_through: retired,
                reason: "there is no snapshot".into(),
            });
        }
        Ok(None) => (Engine::new(), None, Vec::new()),
        Err(JournalError::CorruptSnapshot {
            through_seq,
            reason,
        }) if retired > 0 => {
            return Err(RecoveryError::NoSnapshotForRetained {
                retired_through: retired,
                reason: format!("snapshot through {through_seq}: {reason}"),
            });
        }
        Err(JournalError::CorruptSnapshot {
            through_seq,
            reason,
        }) => (
            Engine::new(),
            None,
            vec![SnapshotProblem {
                through_seq,
                reason,
            }],
        ),
        Err(e) => return Err(e.into()),
    };
    let replayed = replay_into(&mut engine, journal)?;
    Ok(Restored {
        engine,
        snapshot_seq,
        replayed,
        skipped_snapshots,
    })
}

/// Whether the snapshot through `seq` holds a state from before `version`.
fn predates(journal: &Journal, seq: Option<u64>, version: u16) -> bool {
    seq.and_then(|seq| journal.snapshot(seq).ok())
        .is_some_and(|s| s.state_version < version)
}

/// Whether the snapshot through `seq` holds a state from before version 12, which kept no
/// writes that landed ([`crate::fight`]).
fn predates_write_history(journal: &Journal, seq: Option<u64>) -> bool {
    predates(journal, seq, crate::engine::STATE_VERSION_WRITE_HISTORY)
}

/// The result of [`verify`].
#[derive(Debug)]
pub struct Verified {
    pub records: u64,
    pub last_seq: Option<u64>,
    /// Checksum and continuity problems found by the journal itself.
    pub problems: Vec<String>,
    /// State hash replaying every kept record: from the first, or (records retired) from the
    /// oldest usable snapshot, [`Verified::replay_base`].
    pub full_replay_hash: Option<u64>,
    /// Records `1..=retired_through` were retired by retention (0: none).
    pub retired_through: u64,
    /// The snapshot the full replay started from (`None`: from record 1).
    pub replay_base: Option<u64>,
    /// State hash restoring from the latest snapshot and replaying the tail.
    pub restored_hash: Option<u64>,
    pub snapshot_seq: Option<u64>,
}

impl Verified {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.full_replay_hash == self.restored_hash
    }
}

/// Checks every checksum, replays the whole journal, and compares the result with a restore
/// from the latest snapshot.
pub fn verify(journal: &Journal) -> Verified {
    let report = journal.verify();
    let mut problems: Vec<String> = report
        .problems
        .iter()
        .map(|p| format!("record {}: {}", p.seq, p.reason))
        .chain(
            report
                .snapshot_problems
                .iter()
                .map(|p| format!("snapshot through {}: {}", p.through_seq, p.reason)),
        )
        .collect();
    let retired_through = journal.retired_through();
    let (base, replay_base) = match oldest_base(journal) {
        Ok(b) => b,
        Err(e) => {
            problems.push(format!("full replay: {e}"));
            (None, None)
        }
    };
    let full = base.and_then(|mut full| match replay_into(&mut full, journal) {
        Ok(_) => Some(full),
        Err(e) => {
            problems.push(format!("full replay: {e}"));
            None
        }
    });
    let (restored, snapshot_seq) = match restore(journal) {
        Ok(r) => (Some(r.engine), r.snapshot_seq),
        Err(e) => {
            problems.push(format!("restore from snapshot: {e}"));
            (None, None)
        }
    };
    // A state written before version 12 kept no writes that landed: from such a snapshot the
    // replays are compared without them (they differ only while those writes are recent).
    let without_history = predates_write_history(journal, replay_base)
        || predates_write_history(journal, snapshot_seq);
    // Before version 13 no Machine given back for a fight was kept either.
    let given_back = crate::engine::STATE_VERSION_GIVEN_BACK;
    let without_given_back =
        predates(journal, replay_base, given_back) || predates(journal, snapshot_seq, given_back);
    let hash = |mut e: Engine| {
        if without_history {
            e.forget_write_history();
        }
        if without_given_back {
            e.forget_given_back();
        }
        e.state_hash()
    };
    let full_replay_hash = full.map(hash);
    let restored_hash = restored.map(hash);
    if full_replay_hash.is_some() && restored_hash.is_some() && full_replay_hash != restored_hash {
        problems.push(format!(
            "replaying from the first record gives state {:016x} but restoring from the snapshot gives {:016x}",
            full_replay_hash.unwrap_or_default(),
            restored_hash.unwrap_or_default()
        ));
    }
    Verified {
        records: report.records_checked,
        last_seq: report.last_seq,
        problems,
        full_replay_hash,
        restored_hash,
        snapshot_seq,
        retired_through,
        replay_base,
    }
}

/// Where the longest replay starts: a new engine when nothing was retired, else the oldest
/// snapshot that passes its checks (at or after the retention point).
pub fn oldest_base(journal: &Journal) -> Result<(Option<Engine>, Option<u64>), RecoveryError> {
    let retired = journal.retired_through();
    if retired == 0 {
        return Ok((Some(Engine::new()), None));
    }
    let mut reasons = Vec::new();
    for seq in journal.snapshot_seqs()? {
        if seq < retired {
            continue;
        }
        match journal
            .snapshot(seq)
            .map_err(RecoveryError::from)
            .and_then(|s| engine_from(&s))
        {
            Ok(engine) => return Ok((Some(engine), Some(seq))),
            Err(e) => reasons.push(e.to_string()),
        }
    }
    Err(RecoveryError::NoSnapshotForRetained {
        retired_through: retired,
        reason: if reasons.is_empty() {
            "there is no snapshot".into()
        } else {
            reasons.join("; ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::JournalOptions;
    use crate::time::Timestamp;

    #[test]
    fn a_snapshot_this_build_cannot_read_is_replaced_by_a_full_replay() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let mut live = Engine::new();
        for i in 0..5 {
            let at = Timestamp(1_700_000_000_000 + i * 1_000);
            journal.append(at, &encode_input(&Input::Tick)).unwrap();
            live.handle(at, Input::Tick);
        }
        journal.flush().unwrap();
        // As an older build's state would look to this one: framed and checksummed, but not
        // this build's encoding.
        journal
            .write_snapshot(5, Timestamp(1_700_000_005_000), b"an older build's state")
            .unwrap();
        let restored = restore(&journal).unwrap();
        assert_eq!(restored.snapshot_seq, None);
        assert_eq!(restored.replayed, 5);
        assert_eq!(restored.engine.state_hash(), live.state_hash());
        let reasons: Vec<&str> = restored
            .skipped_snapshots
            .iter()
            .map(|p| p.reason.as_str())
            .collect();
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("this build cannot read its state")),
            "{reasons:?}"
        );
    }
}
