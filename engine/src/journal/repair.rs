//! `Journal::repair`: the operator's explicit way out of a journal a start refuses.
//!
//! A repair first works out, read-only, what it would do ([`RepairMode::DryRun`] stops
//! there), each step named in [`RepairReport::actions`]:
//! * unfinished sled snapshot files (`snap.*.generating`) are removed;
//! * a lost or damaged `conf` is written again with the segment size the store reads back
//!   with the most committed records (probed: sled cannot tell);
//! * a damaged sled snapshot file (`snap.*`), or one sled panics on, is removed when sled
//!   recovers from its log alone;
//! * a lost or damaged copy of the commit record is written again from the other;
//! * records after the first one that is missing or fails its checks are removed, with the
//!   snapshots beyond them, and the commit record is rewritten to vouch for exactly what was
//!   kept. This discards records: it is done only with [`RepairMode::Truncate`].
//! * when sled cannot open the store at all, its files are moved to `discarded/` and the
//!   journal starts empty (every record discarded; also only with `Truncate`).

use super::batch::seq_key;
use super::chunks::Chunks;
use super::inspect::{self, StoreMode};
use super::{
    JOURNAL_FORMAT_VERSION, Journal, JournalError, JournalOptions, SLED_SEGMENT_BYTES, TREE_META,
    TREE_SNAPSHOTS, commit, contain_panics, create_private_dir, key_seq, open_sled, read,
    read_meta_version,
};
use crate::time::Timestamp;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// How far [`Journal::repair`] may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairMode {
    /// Work out and report what would be done; write nothing.
    DryRun,
    /// Do what discards no record (files sled rebuilds or that have a second copy); refuse
    /// with [`JournalError::RepairDiscards`] if records would have to go.
    Keep,
    /// Also discard the records after the first one that is missing or damaged.
    Truncate,
}

/// What [`Journal::repair`] found, and did or would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairReport {
    /// Records `1..=kept_through` are intact and kept.
    pub kept_through: u64,
    /// Why the record after `kept_through` is not kept (`None`: no record is discarded).
    pub first_problem: Option<String>,
    /// What the old commit record vouched for (`None`: absent or unreadable).
    pub committed_before: Option<u64>,
    /// Stored batches removed (or to remove) because they lie after the first problem.
    pub batches_removed: u64,
    /// Snapshots removed (or to remove) because they lie beyond `kept_through`.
    pub snapshots_removed: Vec<u64>,
    /// Records `1..=retired_through` were retired by retention before (0: none). When the old
    /// commit record was unreadable, the records before the first stored chunk are taken as
    /// retired if the journal's format has retention.
    pub retired_through: u64,
    /// Every step, in order, as a line for the operator.
    pub actions: Vec<String>,
    /// Nothing was written (a dry run).
    pub dry_run: bool,
}

impl RepairReport {
    /// Whether the repair discards (or would discard) records.
    pub fn discards_records(&self) -> bool {
        self.first_problem.is_some()
    }
}

/// Segment sizes probed for a journal whose `conf` is lost: the controller's, the
/// simulator's, then every size sled accepts.
fn segment_candidates() -> Vec<usize> {
    let mut sizes = vec![SLED_SEGMENT_BYTES, 8 << 20];
    sizes.extend((8..=24).map(|bits| 1usize << bits));
    sizes.dedup();
    let mut seen = std::collections::BTreeSet::new();
    sizes.retain(|s| seen.insert(*s));
    sizes
}

/// The store as a read-only view sees it, and what keeping its good records takes.
struct Salvage {
    kept_through: u64,
    first_problem: Option<String>,
    committed_before: Option<u64>,
    retired_through: u64,
    batches_after: u64,
    snapshots_beyond: Vec<u64>,
    /// Copies of the commit record to rewrite even if no record is discarded.
    stale_copies: Vec<String>,
    /// The engine snapshots cannot be read (a blob file sled refers to is gone): dropped,
    /// and the engine rebuilt by replaying every record (only when none was retired).
    unreadable_snapshots: Option<String>,
}

impl Journal {
    /// Repairs the journal in `dir` as far as `mode` allows; see the module doc. Writes to
    /// `dir` (except [`RepairMode::DryRun`]): for operators, never on open.
    ///
    /// *Errors:* [`JournalError::Locked`], [`JournalError::FileUnreadable`] (fix the file's
    /// mode or owner first), [`JournalError::UnknownFormat`] (a newer journal is never
    /// truncated), [`JournalError::RepairDiscards`] in `Keep` mode, storage errors.
    pub fn repair(
        dir: &Path,
        opts: JournalOptions,
        mode: RepairMode,
    ) -> Result<RepairReport, JournalError> {
        contain_panics(dir, || repair(dir, &opts, mode))
    }

    /// [`Journal::repair`] in [`RepairMode::Truncate`].
    pub fn repair_truncate(dir: &Path, opts: JournalOptions) -> Result<RepairReport, JournalError> {
        Journal::repair(dir, opts, RepairMode::Truncate)
    }
}

fn repair(
    dir: &Path,
    opts: &JournalOptions,
    mode: RepairMode,
) -> Result<RepairReport, JournalError> {
    if inspect::presence(dir).is_ok_and(|p| p == inspect::Presence::Fresh) {
        return repair_without_store(dir, mode);
    }
    inspect::check_readable(dir)?;
    let mut actions = Vec::new();
    for p in inspect::unfinished_store_snapshots(dir)? {
        actions.push(format!(
            "remove {} (an unfinished sled snapshot file)",
            p.display()
        ));
    }
    let (segment_bytes, conf_problem) = match inspect::read_conf(dir) {
        Ok(size) => (Some(size), None),
        Err(e @ JournalError::ConfDamaged { .. }) => (None, Some(e.to_string())),
        Err(e) => return Err(e),
    };
    let snap_problem = inspect::check_store_snapshot(dir).err();
    if let Some(e) = &snap_problem
        && !matches!(e, JournalError::StoreSnapshotDamaged { .. })
    {
        return Err(clone_plain(e));
    }
    let sizes = match segment_bytes {
        Some(size) => vec![size],
        None => segment_candidates(),
    };
    let store_modes: &[StoreMode] = if snap_problem.is_some() {
        &[StoreMode::InspectLogOnly]
    } else {
        &[StoreMode::Inspect, StoreMode::InspectLogOnly]
    };
    // The best reading: the most records kept (ties: the first tried).
    let mut best: Option<(usize, StoreMode, Salvage)> = None;
    let mut last_error = None;
    for &size in &sizes {
        for &store in store_modes {
            match contain_panics(dir, || {
                salvage(dir, opts, size, store, conf_problem.is_some())
            }) {
                // The journal is held by a running controller, or a file cannot be read:
                // nothing may be touched (never taken for a store sled cannot open).
                Err(e @ (JournalError::Locked { .. } | JournalError::FileUnreadable { .. })) => {
                    return Err(e);
                }
                Ok(s) => {
                    if best
                        .as_ref()
                        .is_none_or(|(_, _, b)| s.kept_through > b.kept_through)
                    {
                        best = Some((size, store, s));
                    }
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        // The recorded size reads back: no need to probe further.
        if segment_bytes.is_some() && best.is_some() {
            break;
        }
    }
    let Some((size, store, found)) = best else {
        return repair_unopenable(dir, mode, actions, last_error);
    };
    if let Some(problem) = &conf_problem {
        actions.push(format!(
            "write {} again with segment_size {size} ({problem}; the store reads back with it)",
            dir.join(inspect::CONF_FILE).display()
        ));
    }
    if store == StoreMode::InspectLogOnly {
        let why = snap_problem
            .as_ref()
            .map_or("sled cannot open the store with it".to_string(), |e| {
                e.to_string()
            });
        for p in inspect::store_snapshots(dir)? {
            actions.push(format!(
                "remove {} ({why}; sled rebuilds it from its log)",
                p.display()
            ));
        }
    }
    for copy in &found.stale_copies {
        actions.push(format!("write {copy} again from the other copy"));
    }
    if let Some(why) = &found.unreadable_snapshots {
        actions.push(format!(
            "leave behind the engine snapshots sled cannot read ({why}); the engine is rebuilt by replaying the records"
        ));
    }
    if found.first_problem.is_some()
        || !found.stale_copies.is_empty()
        || found.unreadable_snapshots.is_some()
    {
        actions.push(format!(
            "rebuild sled's files from records {}..{} (in {}/, then the old files move to {}/<n>/)",
            found.retired_through + 1,
            found.kept_through,
            dir.join(REBUILD_DIR).display(),
            dir.join(DISCARDED_DIR).display()
        ));
    }
    if let Some(problem) = &found.first_problem {
        actions.push(format!(
            "discard records {}.. ({} stored batches) and the snapshots through {:?}: {problem}",
            found.kept_through + 1,
            found.batches_after,
            found.snapshots_beyond
        ));
        actions.push(format!(
            "rewrite the commit record to vouch for records {}..{}",
            found.retired_through + 1,
            found.kept_through
        ));
    }
    let mut report = RepairReport {
        kept_through: found.kept_through,
        first_problem: found.first_problem.clone(),
        committed_before: found.committed_before,
        batches_removed: found.batches_after,
        snapshots_removed: found.snapshots_beyond.clone(),
        retired_through: found.retired_through,
        actions,
        dry_run: mode == RepairMode::DryRun,
    };
    match mode {
        RepairMode::DryRun => return Ok(report),
        RepairMode::Keep if found.first_problem.is_some() => {
            return Err(JournalError::RepairDiscards {
                dir: dir.to_path_buf(),
                first: found.kept_through + 1,
                reason: found.first_problem.unwrap_or_default(),
            });
        }
        RepairMode::Keep | RepairMode::Truncate => {}
    }
    for p in inspect::unfinished_store_snapshots(dir)? {
        remove(&p)?;
    }
    if conf_problem.is_some() {
        write_conf(dir, size)?;
    }
    if store == StoreMode::InspectLogOnly {
        for p in inspect::store_snapshots(dir)? {
            remove(&p)?;
        }
    }
    if found.first_problem.is_some()
        || !found.stale_copies.is_empty()
        || found.unreadable_snapshots.is_some()
    {
        let source = Source {
            segment_bytes: size,
            store,
            skip_conf: false,
        };
        let applied = rebuild(dir, opts, &source, found.kept_through)?;
        report.snapshots_removed = applied.snapshots_removed;
    }
    // The repaired journal must pass the checks every start makes.
    drop(inspect::inspect(
        dir,
        opts,
        StoreMode::Inspect,
        inspect::Strictness::Start,
    )?);
    Ok(report)
}

/// Reads the store read-only with `segment_bytes` and `store` mode: what can be kept.
fn salvage(
    dir: &Path,
    opts: &JournalOptions,
    segment_bytes: usize,
    store: StoreMode,
    skip_conf: bool,
) -> Result<Salvage, JournalError> {
    let db = open_sled(
        dir,
        &inspect::sled_config(dir, opts, segment_bytes, store).skip_config_file(skip_conf),
    )?;
    let mut chunks = Chunks::load_read_only(&db)?;
    let names = db.tree_names();
    let tree = |name: &str| -> Result<Option<sled::Tree>, JournalError> {
        if names.iter().any(|n| n.as_ref() == name.as_bytes()) {
            db.open_tree(name)
                .map(Some)
                .map_err(JournalError::storage("opening a tree"))
        } else {
            Ok(None)
        }
    };
    let format = match tree(TREE_META)? {
        Some(meta) => read_meta_version(&meta)?,
        None => None,
    };
    if let Some(found) = format
        && found > JOURNAL_FORMAT_VERSION
    {
        return Err(JournalError::UnknownFormat {
            found,
            supported: JOURNAL_FORMAT_VERSION,
            seq: None,
        });
    }
    let copies = commit::load_copies(dir);
    let reconciled = commit::reconcile(dir, &copies, format.unwrap_or(JOURNAL_FORMAT_VERSION))
        .or_else(|_| commit::reconcile(dir, &copies, super::JOURNAL_FORMAT_VERSION_NO_MIRROR));
    let (loaded, stale_copies) = match &reconciled {
        Ok(r) => (
            r.loaded.clone(),
            r.recovered_copies().map(|c| c.file.to_string()).collect(),
        ),
        Err(_) => (None, commit::COMMIT_COPIES.map(String::from).to_vec()),
    };
    let committed_before = loaded.as_ref().map(commit::Loaded::committed_through);
    let retired_through = match &loaded {
        Some(l) => l.retired_through(),
        None if format == Some(JOURNAL_FORMAT_VERSION)
            || format == Some(super::JOURNAL_FORMAT_VERSION_NO_MIRROR) =>
        {
            chunks
                .starts()
                .first()
                .filter(|&&s| s > 1)
                .map_or(0, |&s| s - 1)
        }
        None => 0,
    };
    chunks.retire_view(retired_through);
    let (mut kept_through, mut first_problem) =
        match read::for_each(&chunks, retired_through + 1, |_| ControlFlow::Continue(())) {
            Ok(n) => (retired_through + n, None),
            Err(JournalError::Corrupt { seq, reason }) => (seq - 1, Some(reason)),
            Err(other) => return Err(other),
        };
    if let Some(committed) = committed_before
        && committed > kept_through
        && first_problem.is_none()
    {
        first_problem = Some(format!(
            "records {}..{committed} are committed but not in the store",
            kept_through + 1
        ));
    }
    // Both copies of the commit record cut back: every record the store holds passed its
    // checks and is kept, the commit record rewritten to vouch for them; what the identity
    // witnessed beyond them is gone.
    let committed = committed_before.unwrap_or(0);
    let witnessed = super::identity::load(dir).committed_through();
    let cut_back = match first_problem {
        Some(_) => None,
        None if witnessed > committed => Some(
            JournalError::CommitCutBack {
                witnessed,
                committed,
            }
            .to_string(),
        ),
        None if format >= Some(JOURNAL_FORMAT_VERSION) => {
            inspect::check_uncommitted(&chunks, committed, kept_through)
                .err()
                .map(|e| e.to_string())
        }
        None => None,
    };
    if let Some(why) = cut_back {
        first_problem = Some(match witnessed > kept_through {
            true => format!("{why}; records {}..{witnessed} are lost", kept_through + 1),
            false => why,
        });
    }
    // A torn, unacknowledged last batch is discarded by any writable open: not a loss.
    if let Some(problem) = &first_problem
        && committed_before.is_some_and(|c| c <= kept_through)
        && is_last_batch_after(&chunks, kept_through)?
    {
        tracing::debug!(%problem, "the records after {kept_through} are an unacknowledged torn tail");
        first_problem = None;
    }
    let mut batches_after = 0;
    for entry in chunks.iter_from(kept_through + 1)? {
        let (key, _) = entry?;
        if key_seq(&key, kept_through)? > kept_through {
            batches_after += 1;
        }
    }
    if first_problem.is_none() {
        batches_after = 0;
        kept_through = kept_through.max(committed_before.unwrap_or(0));
    }
    let snapshot_tree = tree(TREE_SNAPSHOTS)?;
    let unreadable_snapshots = match &snapshot_tree {
        Some(t) => match inspect::check_engine_snapshots(dir, t) {
            Ok(()) => None,
            Err(e) if retired_through == 0 => Some(e.to_string()),
            Err(e) => return Err(e),
        },
        None => None,
    };
    let snapshots_beyond = match snapshot_tree.filter(|_| unreadable_snapshots.is_none()) {
        Some(t) => t
            .iter()
            .keys()
            .map(|k| {
                k.map_err(JournalError::storage("listing snapshots"))
                    .and_then(|k| key_seq(&k, 0))
            })
            .collect::<Result<Vec<u64>, _>>()?
            .into_iter()
            .filter(|&s| first_problem.is_some() && (s > kept_through || s < retired_through))
            .collect(),
        None => Vec::new(),
    };
    Ok(Salvage {
        kept_through,
        first_problem,
        committed_before,
        retired_through,
        batches_after,
        snapshots_beyond,
        stale_copies,
        unreadable_snapshots,
    })
}

/// Whether every stored batch after `seq` is the last one (a single torn batch at the end).
fn is_last_batch_after(chunks: &Chunks, seq: u64) -> Result<bool, JournalError> {
    let Some((_, first, _)) = chunks.last_batch()? else {
        return Ok(false);
    };
    Ok(first == seq + 1)
}

/// No sled files: a commit record that vouches for records means they are all gone.
fn repair_without_store(dir: &Path, mode: RepairMode) -> Result<RepairReport, JournalError> {
    let copies = commit::load_copies(dir);
    let committed = commit::reconcile(dir, &copies, JOURNAL_FORMAT_VERSION)
        .or_else(|_| commit::reconcile(dir, &copies, super::JOURNAL_FORMAT_VERSION_NO_MIRROR))
        .map(|r| r.committed_through())
        .unwrap_or(0);
    let present: Vec<PathBuf> = commit::COMMIT_COPIES
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.exists())
        .collect();
    if present.is_empty() {
        return Err(JournalError::NoJournal {
            dir: dir.to_path_buf(),
        });
    }
    let mut report = RepairReport {
        kept_through: 0,
        first_problem: (committed > 0)
            .then(|| format!("sled's files (conf, db) are gone: records 1..{committed} are lost")),
        committed_before: Some(committed),
        batches_removed: 0,
        snapshots_removed: Vec::new(),
        retired_through: 0,
        actions: present
            .iter()
            .map(|p| format!("remove {} (the journal starts empty)", p.display()))
            .collect(),
        dry_run: mode == RepairMode::DryRun,
    };
    match mode {
        RepairMode::DryRun => return Ok(report),
        RepairMode::Keep if committed > 0 => {
            return Err(JournalError::RepairDiscards {
                dir: dir.to_path_buf(),
                first: 1,
                reason: report.first_problem.take().unwrap_or_default(),
            });
        }
        _ => {}
    }
    for p in &present {
        remove(p)?;
    }
    Ok(report)
}

/// sled cannot open the store in any way tried: move its files to `discarded/` and let the
/// journal start empty.
fn repair_unopenable(
    dir: &Path,
    mode: RepairMode,
    mut actions: Vec<String>,
    why: Option<JournalError>,
) -> Result<RepairReport, JournalError> {
    let why = why.map_or("sled cannot open it".to_string(), |e| e.to_string());
    let copies = commit::load_copies(dir);
    let committed = commit::reconcile(dir, &copies, JOURNAL_FORMAT_VERSION)
        .or_else(|_| commit::reconcile(dir, &copies, super::JOURNAL_FORMAT_VERSION_NO_MIRROR))
        .ok()
        .map(|r| r.committed_through());
    let aside = dir.join(DISCARDED_DIR);
    let files: Vec<PathBuf> = inspect::files(dir)?;
    actions.push(format!(
        "move every file of the journal ({} files) to {} and start an empty journal: the store cannot be opened ({why}); records 1..{} are discarded",
        files.len(),
        aside.display(),
        committed.map_or("?".to_string(), |c| c.to_string())
    ));
    let report = RepairReport {
        kept_through: 0,
        first_problem: Some(why.clone()),
        committed_before: committed,
        batches_removed: 0,
        snapshots_removed: Vec::new(),
        retired_through: 0,
        actions,
        dry_run: mode == RepairMode::DryRun,
    };
    match mode {
        RepairMode::DryRun => return Ok(report),
        RepairMode::Keep => {
            return Err(JournalError::RepairDiscards {
                dir: dir.to_path_buf(),
                first: 1,
                reason: why,
            });
        }
        RepairMode::Truncate => {}
    }
    let stamp = (1..)
        .map(|n| aside.join(n.to_string()))
        .find(|p| !p.exists())
        .expect("a free name");
    move_files(dir, &stamp)?;
    sync_dir(dir)?;
    Ok(report)
}

/// Where [`Journal::repair`] moves the files of a store sled cannot open.
pub const DISCARDED_DIR: &str = "discarded";

/// What a rebuild discarded besides records (the snapshots it did not carry over).
struct Applied {
    snapshots_removed: Vec<u64>,
}

/// Where [`rebuild`] builds the new store before it takes the old one's place.
const REBUILD_DIR: &str = "rebuild";

/// Rebuilds the store from its good records: a new journal in `dir/rebuild/` holds records
/// `retired + 1..=kept_through` exactly as they were (seqs, times, payloads), the engine
/// snapshots within them that sled can read, and a commit record vouching for exactly them.
/// Then the old files move to `dir/discarded/<n>/` and the new ones take their place. Works
/// whatever sled can no longer do in place (a node it cannot read, a tree it cannot drop).
fn rebuild(
    dir: &Path,
    opts: &JournalOptions,
    source: &Source,
    kept_through: u64,
) -> Result<Applied, JournalError> {
    let db = open_sled(
        dir,
        &inspect::sled_config(dir, opts, source.segment_bytes, source.store)
            .skip_config_file(source.skip_conf),
    )?;
    let mut chunks = Chunks::load_read_only(&db)?;
    let copies = commit::load_copies(dir);
    let names = db.tree_names();
    let has = |name: &str| names.iter().any(|n| n.as_ref() == name.as_bytes());
    let format = if has(TREE_META) {
        read_meta_version(
            &db.open_tree(TREE_META)
                .map_err(JournalError::storage("opening a tree"))?,
        )?
    } else {
        None
    };
    let loaded = commit::reconcile(dir, &copies, format.unwrap_or(JOURNAL_FORMAT_VERSION))
        .ok()
        .and_then(|r| r.loaded);
    let retired = match &loaded {
        Some(l) => l.retired,
        None if format >= Some(super::JOURNAL_FORMAT_VERSION_NO_MIRROR) => chunks
            .starts()
            .first()
            .filter(|&&s| s > 1)
            .map(|&s| commit::fresh_retention_entry(s - 1)),
        None => None,
    };
    let retired_through = retired.map_or(0, |r| r.last_seq);
    chunks.retire_view(retired_through);
    let target = dir.join(REBUILD_DIR);
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(|source| JournalError::CreateDir {
            dir: target.clone(),
            source,
        })?;
    }
    create_private_dir(&target)?;
    let new_opts = JournalOptions {
        segment_bytes: source.segment_bytes,
        ..opts.clone()
    };
    let (mut fresh, _) = Journal::create(&target, new_opts, retired)?;
    let mut batch: Vec<(Timestamp, Vec<u8>)> = Vec::new();
    let mut batch_bytes = 0;
    let mut failed = None;
    let flush_batch = |fresh: &mut Journal, batch: &mut Vec<(Timestamp, Vec<u8>)>| {
        let entries: Vec<(Timestamp, &[u8])> =
            batch.iter().map(|(at, p)| (*at, p.as_slice())).collect();
        let appended = fresh.append_batch(&entries);
        batch.clear();
        appended.map(|_| ())
    };
    let walked = read::for_each(&chunks, retired_through + 1, |r| {
        if r.seq > kept_through {
            return ControlFlow::Break(());
        }
        batch_bytes += r.payload.len();
        batch.push((r.at, r.payload.to_vec()));
        if batch.len() >= 1024 || batch_bytes >= 4 << 20 {
            batch_bytes = 0;
            if let Err(e) = flush_batch(&mut fresh, &mut batch) {
                failed = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    match walked {
        Ok(_) | Err(JournalError::Corrupt { .. }) => {}
        Err(e) => return Err(e),
    }
    if !batch.is_empty() {
        flush_batch(&mut fresh, &mut batch)?;
    }
    if fresh.last_seq().unwrap_or(retired_through) != kept_through {
        return Err(JournalError::RecordsMissing {
            first: fresh.next_seq(),
            last: kept_through,
            stored_last: fresh.next_seq() - 1,
            file: inspect::damaged_file(dir, None),
        });
    }
    let mut snapshots_removed = Vec::new();
    if has(TREE_SNAPSHOTS) {
        let tree = db
            .open_tree(TREE_SNAPSHOTS)
            .map_err(JournalError::storage("opening a tree"))?;
        let kept_tree = fresh.snapshots.clone().expect("a writable journal");
        let mut iter = tree.iter();
        loop {
            match iter.next() {
                None => break,
                Some(Ok((key, value))) => {
                    let seq = key_seq(&key, 0)?;
                    if seq < retired_through || seq > kept_through {
                        snapshots_removed.push(seq);
                        continue;
                    }
                    kept_tree
                        .insert(seq_key(seq), value)
                        .map_err(JournalError::storage("copying a snapshot"))?;
                }
                // The rest of the tree cannot be read: those snapshots are left behind.
                Some(Err(_)) => {
                    snapshots_removed.push(u64::MAX);
                    break;
                }
            }
        }
    }
    fresh.flush()?;
    drop(fresh);
    drop(chunks);
    drop(db);
    swap_in(dir, &target)?;
    Ok(Applied { snapshots_removed })
}

/// How the store was read when it was salvaged (the same way is used to rebuild it).
struct Source {
    segment_bytes: usize,
    store: StoreMode,
    skip_conf: bool,
}

/// Moves the journal's files in `dir` to `dir/discarded/<n>/`, then those of `new` into
/// `dir`, and removes `new`.
fn swap_in(dir: &Path, new: &Path) -> Result<(), JournalError> {
    let aside = (1..)
        .map(|n| dir.join(DISCARDED_DIR).join(n.to_string()))
        .find(|p| !p.exists())
        .expect("a free name");
    move_files(dir, &aside)?;
    move_files(new, dir)?;
    std::fs::remove_dir_all(new).map_err(|source| JournalError::CreateDir {
        dir: new.to_path_buf(),
        source,
    })?;
    sync_dir(dir)
}

/// Moves the journal's files (top level and `blobs/`) from `from` to `to`.
fn move_files(from: &Path, to: &Path) -> Result<(), JournalError> {
    std::fs::create_dir_all(to.join(inspect::BLOBS_DIR)).map_err(|source| {
        JournalError::CreateDir {
            dir: to.to_path_buf(),
            source,
        }
    })?;
    for f in inspect::files(from)? {
        let rel = f.strip_prefix(from).unwrap_or(&f).to_path_buf();
        std::fs::rename(&f, to.join(&rel)).map_err(|source| JournalError::FileUnreadable {
            path: f.clone(),
            source,
        })?;
    }
    sync_dir(to)
}

/// sled's `conf` file for `segment_bytes` (its own format: text, then a crc32).
fn write_conf(dir: &Path, segment_bytes: usize) -> Result<(), JournalError> {
    let text = format!("segment_size: {segment_bytes}\nuse_compression: false\nversion: 0.34\n");
    let mut bytes = text.into_bytes();
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let path = dir.join(inspect::CONF_FILE);
    let fresh = dir.join("conf.new");
    let io = |source| JournalError::ConfDamaged {
        path: path.clone(),
        reason: format!("cannot be written again: {source}"),
    };
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(super::PRIVATE_FILE_MODE)
            .open(&fresh)
            .map_err(io)?;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&fresh, &path).map_err(io)?;
    sync_dir(dir)
}

fn remove(path: &Path) -> Result<(), JournalError> {
    std::fs::remove_file(path).map_err(|source| JournalError::FileUnreadable {
        path: path.to_path_buf(),
        source,
    })
}

fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| JournalError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })
}

/// A copy of an error that carries no I/O source (the inspection errors a repair re-raises).
fn clone_plain(e: &JournalError) -> JournalError {
    match e {
        JournalError::StoreSnapshotDamaged { path, reason } => JournalError::StoreSnapshotDamaged {
            path: path.clone(),
            reason: reason.clone(),
        },
        JournalError::FileUnreadable { path, source } => JournalError::FileUnreadable {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        other => JournalError::Corrupt {
            seq: 0,
            reason: other.to_string(),
        },
    }
}
