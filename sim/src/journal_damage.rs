//! The `journal-damage` fault: while the controller is down for a restart, its journal is
//! damaged on disk (a flipped byte, a truncated file, a lost `conf`, `commits`, blob, `snap.*`
//! or `db` file). The restart must either recover every committed record or refuse to start
//! with an error naming the damage — never come back with fewer records and no error.
//!
//! *How:* the journal is flushed (every record committed) and closed; a copy is kept; the
//! damage is applied; the journal is opened and read back as a restarting controller would
//! (open, latest snapshot, every record). The outcome is judged against the records read before
//! the damage. The run then carries on from the intact copy (an operator restoring a backup, or
//! `log repair`), so the rest of the run is a plain restart and stays deterministic.
//!
//! *Deterministic:* the damage kind and where it lands come from the run's seed and the time.
//! sled's file layout may differ between runs (its flusher is timed), so which bytes a flip
//! hits, and whether the journal recovers or refuses, is counted (`journal-damage:*` in the
//! sweep's "faults fired") but never printed in the timeline.

use engine::journal::{Journal, JournalOptions};
use engine::recovery;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::scenario::DAMAGE_KINDS;

/// Outcome counters (in the sweep's "faults fired").
pub const RECOVERED: &str = "journal-damage:recovered";
pub const REFUSED: &str = "journal-damage:refused";

/// How long the check waits for sled to open the damaged journal (it can spin on some damage).
const OPEN_WAIT_S: u64 = 30;

/// What one damage did and how the restart took it.
#[derive(Debug)]
pub struct DamageReport {
    /// `journal-damage:<kind>` of the damage actually applied (a kind whose file does not exist
    /// falls back to a flip in `db`).
    pub applied: &'static str,
    /// What was damaged (file and offset), for messages.
    pub detail: String,
    /// The restart refused to start: the error it gave.
    pub refused: Option<String>,
    /// The restart came back with fewer or different committed records and no error.
    pub silent_loss: Option<String>,
}

/// The counter name of a damage kind.
pub fn counter(kind: &str) -> &'static str {
    match kind {
        "flip" => "journal-damage:flip",
        "truncate" => "journal-damage:truncate",
        "lose-conf" => "journal-damage:lose-conf",
        "lose-commits" => "journal-damage:lose-commits",
        "lose-blob" => "journal-damage:lose-blob",
        "lose-snap" => "journal-damage:lose-snap",
        "lose-db" => "journal-damage:lose-db",
        _ => "journal-damage:flip-instead (no such file)",
    }
}

/// Every record as `(seq, crc of time and payload)`, or why it cannot be read.
fn fingerprints(journal: &Journal) -> Result<Vec<(u64, u32)>, String> {
    let mut out = Vec::new();
    journal
        .for_each_record(journal.first_kept_seq(), |r| {
            let mut h = crc32fast::Hasher::new();
            h.update(&r.at.0.to_le_bytes());
            h.update(r.payload);
            out.push((r.seq, h.finalize()));
            ControlFlow::Continue(())
        })
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// Flushes and closes `journal`, damages its directory with `kind` at a place drawn from
/// `roll`, judges the restart, and puts the intact journal back. Returns the report; `Err`
/// only when the simulator itself could not do its part (copying files).
pub fn damage_and_check(
    journal: Journal,
    dir: &Path,
    options: &JournalOptions,
    kind: &str,
    roll: u64,
) -> Result<DamageReport, String> {
    let mut journal = journal;
    journal.flush().map_err(|e| format!("flushing: {e}"))?;
    let before = fingerprints(&journal)?;
    drop(journal);
    let backup = tempfile::tempdir().map_err(|e| format!("backup directory: {e}"))?;
    copy_dir(dir, backup.path()).map_err(|e| format!("backing up the journal: {e}"))?;
    let (applied, detail) = apply(dir, kind, roll).map_err(|e| format!("damaging: {e}"))?;
    let mut report = DamageReport {
        applied,
        detail,
        refused: None,
        silent_loss: None,
    };
    match restart_reads(dir, options.clone()) {
        Err(e) => report.refused = Some(e),
        Ok(after) => report.silent_loss = compare(&before, &after),
    }
    std::fs::remove_dir_all(dir).map_err(|e| format!("removing the damaged journal: {e}"))?;
    copy_dir(backup.path(), dir).map_err(|e| format!("restoring the journal: {e}"))?;
    Ok(report)
}

/// What a restarting controller reads: open, rebuild the engine (latest snapshot + tail), and
/// every record (what `log verify` and `explain` would read). Bounded: sled may spin.
fn restart_reads(dir: &Path, options: JournalOptions) -> Result<Vec<(u64, u32)>, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = dir.to_path_buf();
    std::thread::spawn(move || {
        let read = Journal::open(&path, options)
            .map_err(|e| e.to_string())
            .and_then(|(journal, _)| {
                recovery::restore(&journal).map_err(|e| e.to_string())?;
                fingerprints(&journal)
            });
        let _ = tx.send(read);
    });
    rx.recv_timeout(Duration::from_secs(OPEN_WAIT_S))
        .unwrap_or_else(|_| Err(format!("opening did not finish within {OPEN_WAIT_S} s")))
}

/// Why `after` is not every record of `before` (in order, unchanged), if it is not.
fn compare(before: &[(u64, u32)], after: &[(u64, u32)]) -> Option<String> {
    if after.len() < before.len() {
        return Some(format!(
            "{} of {} committed records read back with no error",
            after.len(),
            before.len()
        ));
    }
    before
        .iter()
        .zip(after)
        .find(|(b, a)| b != a)
        .map(|(b, _)| format!("record {} reads back different with no error", b.0))
}

/// Applies the damage; a kind whose file does not exist becomes a flip in `db`.
fn apply(dir: &Path, kind: &str, roll: u64) -> std::io::Result<(&'static str, String)> {
    let files = files_of(dir)?;
    let named = |pred: &dyn Fn(&str) -> bool| -> Option<PathBuf> {
        let mut matching: Vec<&PathBuf> = files
            .iter()
            .filter(|f| pred(&f.to_string_lossy()))
            .collect();
        matching.sort();
        // The newest blob or snapshot: the one recovery reads.
        matching.last().map(|f| (*f).clone())
    };
    let lost = match kind {
        "lose-conf" => named(&|f| f == "conf"),
        "lose-commits" => named(&|f| f == engine::journal::COMMITS_FILE),
        "lose-blob" => named(&|f| f.starts_with("blobs/")),
        "lose-snap" => named(&|f| f.starts_with("snap.")),
        "lose-db" => named(&|f| f == "db"),
        _ => None,
    };
    if let Some(file) = lost {
        std::fs::remove_file(dir.join(&file))?;
        return Ok((counter(kind), format!("{} deleted", file.display())));
    }
    let (kind, file) = match kind {
        "truncate" => ("truncate", pick(&files, roll)),
        "flip" => ("flip", pick(&files, roll)),
        // The file to lose does not exist (simulation journals use 1 MiB segments, so batches
        // stay in sled's log and blob files are rare): counted apart, never as the kind asked.
        _ => ("flip-instead", Some(PathBuf::from("db"))),
    };
    let Some(file) = file else {
        return Ok((counter(kind), "no file to damage".into()));
    };
    let path = dir.join(&file);
    let mut bytes = std::fs::read(&path)?;
    if bytes.is_empty() {
        return Ok((counter(kind), format!("{} is empty", file.display())));
    }
    let at = (roll >> 8) as usize % bytes.len();
    if kind == "truncate" {
        bytes.truncate(at);
    } else {
        bytes[at] ^= 1 << (roll % 8);
    }
    std::fs::write(&path, &bytes)?;
    Ok((counter(kind), format!("{} at byte {at}", file.display())))
}

/// A file drawn from `roll` (sorted names: the same roll picks the same name).
fn pick(files: &[PathBuf], roll: u64) -> Option<PathBuf> {
    (!files.is_empty()).then(|| files[(roll % files.len() as u64) as usize].clone())
}

/// The journal's files, relative to it, sorted (sled's `blobs/` one level down).
fn files_of(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            for inner in std::fs::read_dir(entry.path())? {
                let inner = inner?;
                out.push(PathBuf::from(entry.file_name()).join(inner.file_name()));
            }
        } else {
            out.push(PathBuf::from(entry.file_name()));
        }
    }
    out.sort();
    Ok(out)
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::journal::Durability;
    use engine::time::Timestamp;

    fn journal(dir: &Path) -> (Journal, JournalOptions) {
        let options = JournalOptions {
            durability: Durability::Buffered,
            segment_bytes: crate::journaling::SIM_SEGMENT_BYTES,
            ..JournalOptions::default()
        };
        let (mut j, _) = Journal::open(dir, options.clone()).unwrap();
        for i in 0..40u64 {
            let p = format!("record {i} ").repeat(20);
            j.append_batch(&[(Timestamp(i as i64), p.as_bytes())])
                .unwrap();
        }
        (j, options)
    }

    /// Every kind at several places: each either recovers every record or refuses, and the
    /// journal is intact afterwards.
    #[test]
    fn every_damage_recovers_or_refuses_and_the_journal_is_put_back() {
        let mut refused = 0;
        for kind in DAMAGE_KINDS {
            for roll in [3u64, 977, 40_111, 1 << 40] {
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("j");
                let (j, options) = journal(&dir);
                let report = damage_and_check(j, &dir, &options, kind, roll).unwrap();
                assert_eq!(report.silent_loss, None, "{kind} {roll}: {report:?}");
                refused += usize::from(report.refused.is_some());
                let (j, _) = Journal::open(&dir, options).unwrap();
                assert_eq!(j.last_seq(), Some(40));
                assert!(j.verify().is_clean());
            }
        }
        assert!(refused > 0, "some damage was detected");
    }

    #[test]
    fn fewer_records_with_no_error_is_a_silent_loss() {
        let before = [(1, 10), (2, 20), (3, 30)];
        assert_eq!(compare(&before, &before), None);
        assert_eq!(
            compare(&before, &[(1, 10), (2, 20), (3, 30), (4, 40)]),
            None
        );
        assert_eq!(
            compare(&before, &[(1, 10), (2, 20)]).as_deref(),
            Some("2 of 3 committed records read back with no error")
        );
        assert_eq!(
            compare(&before, &[(1, 10), (2, 21), (3, 30)]).as_deref(),
            Some("record 2 reads back different with no error")
        );
    }
}
