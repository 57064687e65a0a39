//! `Journal::repair_truncate`: the operator's explicit way out of a damaged journal. It keeps
//! the records before the first one that is missing or fails its checks, removes everything
//! after, and rewrites the commit record to vouch for exactly what was kept.

use super::batch::{BatchEncoder, BatchView, FORMAT_VERSION, seq_key};
use super::chunks::Chunks;
use super::{
    JOURNAL_FORMAT_VERSION, Journal, JournalError, JournalOptions, TREE_META, TREE_SNAPSHOTS,
    commit, contain_panics, create_private_dir, key_seq, open_sled, read, read_meta_version,
    sled_config, write_meta,
};
use crate::time::Timestamp;
use std::ops::ControlFlow;
use std::path::Path;

/// What [`Journal::repair_truncate`] kept and removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairReport {
    /// Records `1..=kept_through` are intact and kept.
    pub kept_through: u64,
    /// Why the record after `kept_through` is not kept (`None`: the journal was intact).
    pub first_problem: Option<String>,
    /// What the old commit record vouched for (`None`: absent or unreadable).
    pub committed_before: Option<u64>,
    /// Stored batches removed because they lie after the first problem.
    pub batches_removed: u64,
    /// Snapshots removed because they lie beyond `kept_through`.
    pub snapshots_removed: Vec<u64>,
    /// Records `1..=retired_through` were retired by retention before (0: none). When the old
    /// commit record was unreadable, the records before the first stored chunk are taken as
    /// retired if the journal's format has retention.
    pub retired_through: u64,
}

impl Journal {
    /// Truncates the journal in `dir` to its last good record and rewrites the commit record.
    /// Writes to `dir`: for operators (`lifecycle log repair --truncate`), never on open.
    ///
    /// *Errors:* [`JournalError::Locked`], [`JournalError::UnknownFormat`] (a newer journal is
    /// never truncated), storage errors.
    pub fn repair_truncate(dir: &Path, opts: JournalOptions) -> Result<RepairReport, JournalError> {
        create_private_dir(dir)?;
        contain_panics(dir, || repair(dir, &opts))
    }
}

fn repair(dir: &Path, opts: &JournalOptions) -> Result<RepairReport, JournalError> {
    let db = open_sled(dir, &sled_config(dir, opts))?;
    let mut chunks = Chunks::load(&db)?;
    let loaded = commit::load(dir, |_| {}).ok().flatten();
    let committed_before = loaded.as_ref().map(|l| l.committed_through());
    let meta = db
        .open_tree(TREE_META)
        .map_err(JournalError::storage("opening a tree"))?;
    let retired = match &loaded {
        Some(l) => l.retired,
        None if read_meta_version(&meta)? == Some(JOURNAL_FORMAT_VERSION) => chunks
            .starts()
            .first()
            .filter(|&&s| s > 1)
            .map(|&s| commit::fresh_retention_entry(s - 1)),
        None => None,
    };
    let retired_through = retired.map_or(0, |r| r.last_seq);
    chunks.retire_through(retired_through)?;
    let (kept_through, first_problem) =
        match read::for_each(&chunks, retired_through + 1, |_| ControlFlow::Continue(())) {
            Ok(n) => (retired_through + n, None),
            Err(JournalError::Corrupt { seq, reason }) => (seq - 1, Some(reason)),
            Err(other) => return Err(other),
        };
    let mut batches_removed = 0;
    while let Some((tree, first, value)) = chunks.last_batch()? {
        if first > kept_through {
            chunks.remove_batch(&tree, first)?;
            batches_removed += 1;
            continue;
        }
        // The batch holding the first bad record keeps its good records, re-framed.
        if let Ok(view) = BatchView::parse(first, &value)
            && view.last_seq() > kept_through
        {
            crate::mark::hit("repair_reframes_the_batch_with_the_first_bad_record");
            let good: Vec<(Timestamp, Vec<u8>)> = view
                .records()
                .map_while(Result::ok)
                .take_while(|r| r.seq <= kept_through)
                .map(|r| (r.at, r.payload.to_vec()))
                .collect();
            let mut buf = Vec::new();
            let mut enc = BatchEncoder::begin(&mut buf, FORMAT_VERSION, first);
            for (at, payload) in &good {
                enc.push(*at, payload);
            }
            enc.finish();
            tree.insert(seq_key(first), buf)
                .map_err(JournalError::storage("rewriting the last kept batch"))?;
        }
        break;
    }
    let snapshots = db
        .open_tree(TREE_SNAPSHOTS)
        .map_err(JournalError::storage("opening a tree"))?;
    let mut snapshots_removed = Vec::new();
    for key in snapshots.iter().keys() {
        let key = key.map_err(JournalError::storage("listing snapshots"))?;
        let seq = key_seq(&key, 0)?;
        if seq > kept_through || seq < retired_through {
            snapshots
                .remove(&key)
                .map_err(JournalError::storage("removing a snapshot"))?;
            snapshots_removed.push(seq);
        }
    }
    write_meta(&meta, false)?;
    db.flush()
        .map_err(JournalError::storage("flushing the repair"))?;
    let digest = if kept_through > retired_through {
        commit::digest_range(&chunks, retired_through + 1, kept_through).map_err(|reason| {
            JournalError::RecordsDamaged {
                first: retired_through + 1,
                last: kept_through,
                reason,
            }
        })?
    } else {
        0
    };
    commit::rewrite(dir, retired, kept_through, digest)?;
    Ok(RepairReport {
        kept_through,
        first_problem,
        committed_before,
        batches_removed,
        snapshots_removed,
        retired_through,
    })
}
