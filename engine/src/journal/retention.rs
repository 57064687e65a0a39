//! Retention: a journal that runs forever keeps its newest snapshots and the records after the
//! oldest kept one, and retires (drops) whole chunk trees of older records.
//!
//! *Order* (each step durable before the next, so a crash anywhere leaves a journal that opens):
//! 1. flush: the snapshots and every record are durable and committed;
//! 2. the journal's format becomes 3 in `meta` (a build that knows no retention refuses it);
//! 3. the commit record is replaced by one starting with the retention entry for `1..=N`
//!    (see `commit.rs`): from here on records `1..=N` are retired, not missing;
//! 4. the chunk trees ending at or before `N` are dropped, and sled flushed. A crash before
//!    this is finished leaves chunks open drops ([`super::Journal::open`]).
//!
//! `N` is the end of a chunk (never the last one) at or before both the oldest kept snapshot
//! and the last committed record, so replay always starts from a kept snapshot, and only once
//! [`super::JournalOptions::snapshots_kept`] snapshots exist (a single bad snapshot always has
//! an older one to fall back to). The oldest kept snapshot must pass its checks.

use super::{
    JOURNAL_FORMAT_VERSION, Journal, JournalError, META_FORMAT_VERSION, commit, key_seq, snapshot,
};

/// What one [`Journal::retire`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    /// Records `1..=through` are now retired.
    pub through: u64,
    /// Chunk trees dropped.
    pub chunks_dropped: usize,
}

impl Journal {
    /// Retires what retention allows; `Ok(None)` when nothing (retention off, too few
    /// snapshots, no whole chunk before the oldest kept snapshot). Called by
    /// [`Journal::write_snapshot`]; callers need not call it.
    ///
    /// *Errors:* storage errors; [`JournalError::RecordsDamaged`] if the records a split commit
    /// entry vouches for no longer match it (nothing is retired then).
    pub fn retire(&mut self) -> Result<Option<Retired>, JournalError> {
        if !self.opts.retire_records {
            return Ok(None);
        }
        let Some(oldest_kept) = self.oldest_kept_snapshot()? else {
            return Ok(None);
        };
        // Cheap check before the flush: is there a whole chunk to retire at all?
        if self
            .chunks
            .retirable_end(self.retired_through, oldest_kept)
            .is_none()
        {
            return Ok(None);
        }
        self.flush()?;
        let limit = oldest_kept.min(self.writer()?.commits.committed_through());
        let Some(through) = self.chunks.retirable_end(self.retired_through, limit) else {
            return Ok(None);
        };
        let meta = self.meta_tree()?;
        meta.insert(META_FORMAT_VERSION, &JOURNAL_FORMAT_VERSION.to_le_bytes())
            .map_err(JournalError::storage("writing meta"))?;
        self.db
            .flush()
            .map_err(JournalError::storage("flushing before retiring"))?;
        let written = commit::load_written(&self.dir)?;
        let (retention, kept) =
            commit::after_retiring(&self.chunks, &written.entries, written.retired, through)?;
        commit::replace(&self.dir, Some(retention), &kept)?;
        let dir = self.dir.clone();
        self.writer_mut()?.commits.reopen(&dir)?;
        self.retired_through = through;
        let chunks_dropped = self.chunks.retire_through(through)?;
        self.db
            .flush()
            .map_err(JournalError::storage("flushing after retiring"))?;
        tracing::debug!(through, chunks_dropped, "retired journal records");
        Ok(Some(Retired {
            through,
            chunks_dropped,
        }))
    }

    /// The oldest of the kept snapshots when there are `snapshots_kept` of them and it passes
    /// its checks; `None` otherwise (nothing may be retired then).
    fn oldest_kept_snapshot(&self) -> Result<Option<u64>, JournalError> {
        let Some(snapshots) = &self.snapshots else {
            return Ok(None);
        };
        let keys: Vec<sled::IVec> = snapshots
            .iter()
            .keys()
            .collect::<Result<_, _>>()
            .map_err(JournalError::storage("listing snapshots"))?;
        if keys.len() < self.opts.snapshots_kept {
            return Ok(None);
        }
        let key = &keys[keys.len() - self.opts.snapshots_kept];
        let seq = key_seq(key, 0)?;
        let value = snapshots
            .get(key)
            .map_err(JournalError::storage("reading a snapshot"))?;
        match value.map(|v| snapshot::decode(seq, &v).map(|_| ())) {
            Some(Ok(())) => Ok(Some(seq)),
            Some(Err(e)) => {
                tracing::warn!(through_seq = seq, error = %e, "oldest kept snapshot fails its checks: retiring nothing");
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Through-seqs of the stored snapshots, oldest first (checked or not).
    pub fn snapshot_seqs(&self) -> Result<Vec<u64>, JournalError> {
        self.snapshot_entries()
            .map(|kv| {
                kv.map_err(JournalError::storage("listing snapshots"))
                    .and_then(|(k, _)| key_seq(&k, 0))
            })
            .collect()
    }

    /// The snapshot through `through_seq`, checked.
    ///
    /// *Errors:* [`JournalError::CorruptSnapshot`] when it is absent or fails its checks.
    pub fn snapshot(&self, through_seq: u64) -> Result<snapshot::Snapshot, JournalError> {
        let value = self
            .snapshots
            .as_ref()
            .map(|t| t.get(super::seq_key(through_seq)))
            .transpose()
            .map_err(JournalError::storage("reading a snapshot"))?
            .flatten()
            .ok_or(JournalError::CorruptSnapshot {
                through_seq,
                reason: "no such snapshot".into(),
            })?;
        let (at, state_version, state) = snapshot::decode(through_seq, &value)?;
        Ok(snapshot::Snapshot {
            through_seq,
            state_version,
            at,
            state: state.to_vec(),
            skipped: Vec::new(),
        })
    }
}
