//! Damage to a stored journal on purpose, so tests (and the simulator's torn-journal fault,
//! through the `testing` feature) can prove damage is detected. Not in production builds.

use super::batch::{self, BatchView, seq_key};
use super::{Journal, JournalError, META_FORMAT_VERSION, TREE_META, commit};

/// Ways to damage a stored journal, so tests can prove damage is detected.
#[derive(Clone, Debug)]
pub enum Damage {
    /// Flip one bit in the record's payload (or its checksum if the payload is empty).
    FlipRecord { seq: u64 },
    /// Cut the batch holding `seq` to half its length, as a torn write would.
    TearBatch { seq: u64 },
    /// Remove the batch holding `seq`, leaving a gap.
    RemoveBatch { seq: u64 },
    /// Rewrite the batch holding `seq` with another format version (valid checksum).
    BatchFormatVersion { seq: u64, version: u16 },
    /// Rewrite the journal's meta format version.
    MetaFormatVersion { version: u16 },
    /// Flip one bit in the state of the snapshot through `through_seq`.
    FlipSnapshot { through_seq: u64 },
    /// Cut the commit record back to the entries that end before `seq`, as a crash between
    /// sled's flush and the commit write would (records from `seq` on become unacknowledged).
    UncommitFrom { seq: u64 },
}

impl Journal {
    /// Damages stored data on purpose.
    pub fn damage_for_test(&mut self, damage: Damage) -> Result<(), JournalError> {
        let batch_holding = |seq: u64| -> Result<(sled::Tree, u64, Vec<u8>), JournalError> {
            let (tree, first, value) =
                self.chunks
                    .batch_at_or_before(seq)?
                    .ok_or(JournalError::Corrupt {
                        seq,
                        reason: "no batch holds it".into(),
                    })?;
            Ok((tree, first, value.to_vec()))
        };
        match damage {
            Damage::FlipRecord { seq } => {
                let (tree, first, mut value) = batch_holding(seq)?;
                let view = BatchView::parse(first, &value)?;
                let mut offset = batch::BATCH_HEADER_BYTES;
                for record in view.records() {
                    let record = record?;
                    if record.seq == seq {
                        let at = if record.payload.is_empty() {
                            offset + 12
                        } else {
                            offset + batch::RECORD_HEADER_BYTES
                        };
                        value[at] ^= 0x01;
                        break;
                    }
                    offset += batch::RECORD_HEADER_BYTES + record.payload.len();
                }
                tree.insert(seq_key(first), value)
                    .map_err(JournalError::storage("damage"))?;
            }
            Damage::TearBatch { seq } => {
                let (tree, first, mut value) = batch_holding(seq)?;
                value.truncate(value.len() / 2);
                tree.insert(seq_key(first), value)
                    .map_err(JournalError::storage("damage"))?;
            }
            Damage::RemoveBatch { seq } => {
                let (tree, first, _) = batch_holding(seq)?;
                self.chunks.remove_batch(&tree, first)?;
            }
            Damage::BatchFormatVersion { seq, version } => {
                let (tree, first, mut value) = batch_holding(seq)?;
                value[0..2].copy_from_slice(&version.to_le_bytes());
                let crc = crc32fast::hash(&value[..20]);
                value[20..24].copy_from_slice(&crc.to_le_bytes());
                tree.insert(seq_key(first), value)
                    .map_err(JournalError::storage("damage"))?;
            }
            Damage::MetaFormatVersion { version } => {
                let meta = self
                    .db
                    .open_tree(TREE_META)
                    .map_err(JournalError::storage("damage"))?;
                meta.insert(META_FORMAT_VERSION, &version.to_le_bytes())
                    .map_err(JournalError::storage("damage"))?;
            }
            Damage::UncommitFrom { seq } => {
                for name in commit::COMMIT_COPIES {
                    let path = self.dir.join(name);
                    let commit::CopyState::Read(l) = commit::load_copy(&path) else {
                        continue;
                    };
                    let keep = u64::from(l.header)
                        + u64::from(l.retired.is_some())
                        + l.entries.iter().filter(|e| e.last_seq < seq).count() as u64;
                    let io = |source| JournalError::CommitIo {
                        path: path.clone(),
                        source,
                    };
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(io)?;
                    f.set_len(keep * commit::ENTRY_BYTES as u64).map_err(io)?;
                }
                let dir = self.dir.clone();
                let writer = self.writer_mut()?;
                writer.commits.reopen(&dir)?;
                writer.pending_dirty = true;
                // Leave the tail unacknowledged: no flush (it would commit it again).
                return Ok(());
            }
            Damage::FlipSnapshot { through_seq } => {
                let key = seq_key(through_seq);
                let snapshots = self.snapshots.clone().expect("a writable journal");
                let mut value = snapshots
                    .get(key)
                    .map_err(JournalError::storage("damage"))?
                    .ok_or(JournalError::CorruptSnapshot {
                        through_seq,
                        reason: "no such snapshot".into(),
                    })?
                    .to_vec();
                let last = value.len() - 1;
                value[last] ^= 0x01;
                snapshots
                    .insert(key, value)
                    .map_err(JournalError::storage("damage"))?;
            }
        }
        // Damage models a crash: what was not acknowledged yet stays unacknowledged (no commit
        // entry), so a torn unacknowledged tail is still truncated on reopen.
        self.db
            .flush()
            .map(|_| ())
            .map_err(JournalError::storage("flushing damage"))
    }
}
