//! Batches live in a series of small sled trees ("chunks") of at most
//! [`BATCHES_PER_CHUNK_MAX`] batches each.
//!
//! Why: sled 0.34 keeps values inside tree nodes. A node that keeps receiving inserts is
//! rewritten whole every 10 inserts and split at 17 entries, so in one big tree every batch
//! was written about three times and stale copies lingered (measured: 1.3x to 3x the payload on
//! disk, and a third of the durable throughput). A chunk receives fewer inserts than sled's
//! consolidation threshold, so each batch is written once, as one blob file.
//!
//! A chunk is the tree `batches.<first seq of its first batch, 20 digits>`; inside it batches
//! are keyed by their big-endian first seq, as everywhere in the journal.

use super::JournalError;
use super::batch::{key_seq, seq_key};

/// Batches per chunk tree; below sled's page consolidation threshold (10 fragments).
pub(crate) const BATCHES_PER_CHUNK_MAX: usize = 8;
const CHUNK_PREFIX: &str = "batches.";

fn chunk_name(start_seq: u64) -> String {
    format!("{CHUNK_PREFIX}{start_seq:020}")
}

pub(crate) struct Chunks {
    db: sled::Db,
    /// First seq of each chunk, ascending.
    starts: Vec<u64>,
    /// The last chunk and how many batches it holds.
    head: Option<(sled::Tree, usize)>,
    /// Batches from this seq on are passed over (a read-only view of a journal whose torn,
    /// unacknowledged last batch a writable open would remove).
    hidden_from: Option<u64>,
}

impl Chunks {
    /// Lists the chunk trees without reading them (restart time must not grow with the
    /// journal). Drops an empty last chunk: a crash between creating a chunk and storing its
    /// first batch leaves one, and only the last chunk can be in that state.
    pub(crate) fn load(db: &sled::Db) -> Result<Self, JournalError> {
        let mut chunks = Chunks::list(db)?;
        if let Some((tree, 0)) = &chunks.head {
            let name = tree.name();
            chunks
                .db
                .drop_tree(&name)
                .map_err(JournalError::storage("dropping an empty chunk"))?;
            chunks.starts.pop();
            chunks.reload_head()?;
        }
        Ok(chunks)
    }

    /// [`Chunks::load`] without writing: an empty last chunk is passed over, not dropped.
    pub(crate) fn load_read_only(db: &sled::Db) -> Result<Self, JournalError> {
        let mut chunks = Chunks::list(db)?;
        if let Some((_, 0)) = &chunks.head {
            chunks.starts.pop();
            chunks.reload_head()?;
        }
        Ok(chunks)
    }

    fn list(db: &sled::Db) -> Result<Self, JournalError> {
        let mut starts = Vec::new();
        for name in db.tree_names() {
            let Some(digits) = std::str::from_utf8(&name)
                .ok()
                .and_then(|n| n.strip_prefix(CHUNK_PREFIX))
            else {
                continue;
            };
            let start = digits.parse::<u64>().map_err(|_| JournalError::Corrupt {
                seq: 0,
                reason: format!(
                    "journal chunk tree has a malformed name {:?}",
                    String::from_utf8_lossy(&name)
                ),
            })?;
            starts.push(start);
        }
        starts.sort_unstable();
        let mut chunks = Chunks {
            db: db.clone(),
            starts,
            head: None,
            hidden_from: None,
        };
        chunks.reload_head()?;
        Ok(chunks)
    }

    fn reload_head(&mut self) -> Result<(), JournalError> {
        self.head = match self.starts.last() {
            None => None,
            Some(&start) => {
                let tree = self.open(start)?;
                // Not `Tree::len`: it counts read errors as entries and never ends on one.
                let mut batches = 0;
                for key in tree.iter().keys() {
                    key.map_err(JournalError::storage("counting a chunk's batches"))?;
                    batches += 1;
                }
                Some((tree, batches))
            }
        };
        Ok(())
    }

    pub(crate) fn open(&self, start: u64) -> Result<sled::Tree, JournalError> {
        self.db
            .open_tree(chunk_name(start))
            .map_err(JournalError::storage("opening a chunk"))
    }

    /// Passes over the batches from `seq` on (read-only views only: see `hidden_from`).
    pub(crate) fn hide_from(&mut self, seq: u64) {
        self.hidden_from = Some(seq);
    }

    pub(crate) fn starts(&self) -> &[u64] {
        &self.starts
    }

    /// Index of the chunk that would hold `seq` (the last one starting at or before it).
    pub(crate) fn index_for(&self, seq: u64) -> Option<usize> {
        self.starts.partition_point(|&s| s <= seq).checked_sub(1)
    }

    /// Stores a new batch, starting a new chunk when the head is full. Refuses to overwrite.
    pub(crate) fn insert_new(&mut self, first_seq: u64, value: &[u8]) -> Result<(), JournalError> {
        if self
            .head
            .as_ref()
            .is_none_or(|(_, n)| *n >= BATCHES_PER_CHUNK_MAX)
        {
            assert!(
                self.starts.last().is_none_or(|&s| s < first_seq),
                "chunks start in seq order"
            );
            let tree = self.open(first_seq)?;
            self.starts.push(first_seq);
            self.head = Some((tree, 0));
        }
        let (tree, batches) = self.head.as_mut().expect("head chunk exists");
        let stored = tree
            .compare_and_swap(seq_key(first_seq), None as Option<&[u8]>, Some(value))
            .map_err(JournalError::storage("storing a batch"))?;
        if stored.is_err() {
            return Err(JournalError::Corrupt {
                seq: first_seq,
                reason: "a batch is already stored at the next seq".into(),
            });
        }
        *batches += 1;
        Ok(())
    }

    /// The batch holding `seq` (or the last one before it): `(chunk tree, key seq, bytes)`.
    pub(crate) fn batch_at_or_before(
        &self,
        seq: u64,
    ) -> Result<Option<(sled::Tree, u64, sled::IVec)>, JournalError> {
        let Some(idx) = self.index_for(seq) else {
            return Ok(None);
        };
        let tree = self.open(self.starts[idx])?;
        let found = tree
            .range(..=seq_key(seq))
            .next_back()
            .transpose()
            .map_err(JournalError::storage("finding a batch"))?;
        match found {
            Some((key, value)) => Ok(Some((tree, key_seq(&key, seq)?, value))),
            None => Err(JournalError::Corrupt {
                seq: self.starts[idx],
                reason: format!(
                    "chunk starting at seq {} has no batch at that seq",
                    self.starts[idx]
                ),
            }),
        }
    }

    /// The last stored batch: `(chunk tree, key seq, bytes)`.
    pub(crate) fn last_batch(&self) -> Result<Option<(sled::Tree, u64, sled::IVec)>, JournalError> {
        let Some((tree, _)) = &self.head else {
            return Ok(None);
        };
        match tree
            .last()
            .map_err(JournalError::storage("reading the last batch"))?
        {
            None => Ok(None),
            Some((key, value)) => Ok(Some((tree.clone(), key_seq(&key, 0)?, value))),
        }
    }

    /// Removes one batch (tail truncation and test damage); drops its chunk if now empty.
    pub(crate) fn remove_batch(&mut self, tree: &sled::Tree, seq: u64) -> Result<(), JournalError> {
        tree.remove(seq_key(seq))
            .map_err(JournalError::storage("removing a batch"))?;
        if tree.is_empty() {
            let name = tree.name();
            self.db
                .drop_tree(&name)
                .map_err(JournalError::storage("dropping an empty chunk"))?;
            let start = std::str::from_utf8(&name)
                .ok()
                .and_then(|n| n.strip_prefix(CHUNK_PREFIX))
                .and_then(|d| d.parse::<u64>().ok());
            self.starts.retain(|&s| Some(s) != start);
        }
        self.reload_head()
    }

    /// The largest seq in `(after, at_most]` where a chunk other than the last one ends: the
    /// furthest point whole chunks can be retired to.
    pub(crate) fn retirable_end(&self, after: u64, at_most: u64) -> Option<u64> {
        self.starts
            .windows(2)
            .map(|w| w[1] - 1)
            .filter(|&end| end > after && end <= at_most)
            .max()
    }

    /// Drops every chunk that ends at or before `seq` (never the last chunk); returns how many.
    /// Used for retention, and on open to finish a retirement a crash interrupted.
    pub(crate) fn retire_through(&mut self, seq: u64) -> Result<usize, JournalError> {
        let retirable = self
            .starts
            .windows(2)
            .take_while(|w| w[1] - 1 <= seq)
            .count();
        for i in 0..retirable {
            if let Err(e) = self.db.drop_tree(chunk_name(self.starts[i])) {
                self.starts.drain(..i);
                return Err(JournalError::storage("dropping a retired chunk")(e));
            }
        }
        self.starts.drain(..retirable);
        Ok(retirable)
    }

    /// [`Chunks::retire_through`] for a read-only view: the chunks are passed over, not dropped.
    pub(crate) fn retire_view(&mut self, seq: u64) -> usize {
        let retirable = self
            .starts
            .windows(2)
            .take_while(|w| w[1] - 1 <= seq)
            .count();
        self.starts.drain(..retirable);
        retirable
    }

    /// Every stored batch in key order, across chunks: `(key, value)`.
    pub(crate) fn iter_from(&self, seq: u64) -> Result<ChunkIter, JournalError> {
        let idx = self.index_for(seq).unwrap_or(0);
        let start_key = match self.batch_at_or_before(seq)? {
            Some((_, key, _)) => key,
            None => seq,
        };
        Ok(ChunkIter {
            chunks: self.starts.clone(),
            db: self.db.clone(),
            next_idx: idx,
            current: None,
            start_key,
            hidden_from: self.hidden_from,
        })
    }
}

/// Iterates batches across chunk trees in seq order.
pub(crate) struct ChunkIter {
    db: sled::Db,
    chunks: Vec<u64>,
    next_idx: usize,
    current: Option<sled::Iter>,
    start_key: u64,
    hidden_from: Option<u64>,
}

impl Iterator for ChunkIter {
    type Item = Result<(sled::IVec, sled::IVec), JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(iter) = &mut self.current {
                match iter.next() {
                    Some(Ok((key, _)))
                        if self
                            .hidden_from
                            .is_some_and(|h| key_seq(&key, h).is_ok_and(|s| s >= h)) =>
                    {
                        self.chunks.clear();
                        self.current = None;
                        return None;
                    }
                    Some(kv) => return Some(kv.map_err(JournalError::storage("reading a batch"))),
                    None => self.current = None,
                }
            }
            let start = *self.chunks.get(self.next_idx)?;
            self.next_idx += 1;
            match self.db.open_tree(chunk_name(start)) {
                Ok(tree) => self.current = Some(tree.range(seq_key(self.start_key)..)),
                Err(e) => return Some(Err(JournalError::storage("opening a chunk")(e))),
            }
        }
    }
}
