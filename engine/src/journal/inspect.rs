//! Checking a journal in place, read-only, before anything may write to it.
//!
//! sled's recovery writes: it truncates and zeroes its log past the first unreadable point,
//! deletes every blob file after it and writes a new `snap.*` file, so a damaged or merely
//! unreadable journal opened read-write loses data for good. Every open therefore inspects
//! the files as they are first: sled's own settings (`conf`) and newest snapshot file are
//! checked, every file must be readable, and sled is opened read-only (the vendored sled's
//! `read_only` mode: no recovery writes, see `engine/vendor/sled/PATCHED.md`). Every committed
//! record must then be in the store and match its commit entry. Only a journal that passes
//! is opened for writing; a journal that fails is left exactly as it was found, so its
//! refusal lasts across restarts until an operator runs `lifecycle log repair`.

use super::TruncatedTail;
use super::chunks::Chunks;
use super::commit::{self, Reconciled};
use super::{
    DamagedFile, JOURNAL_FORMAT_VERSION, JOURNAL_FORMAT_VERSION_LEGACY,
    JOURNAL_FORMAT_VERSION_NO_IDENTITY, JOURNAL_FORMAT_VERSION_NO_MIRROR,
    JOURNAL_FORMAT_VERSION_NO_RETENTION, JournalError, JournalOptions, TREE_META, TREE_SNAPSHOTS,
    batch::BatchView, read_meta_version,
};
use std::path::{Path, PathBuf};

/// sled's settings file and data file.
pub const CONF_FILE: &str = "conf";
pub const DB_FILE: &str = "db";
pub(crate) const BLOBS_DIR: &str = "blobs";

/// What is in a journal directory, before anything is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Presence {
    /// No sled files: a new journal may be created (if no commit record vouches for records).
    Fresh,
    /// sled's files are there.
    Store,
}

pub(crate) fn presence(dir: &Path) -> Result<Presence, JournalError> {
    let conf = dir.join(CONF_FILE);
    let db = dir.join(DB_FILE);
    match (exists(&conf)?, exists(&db)?) {
        (false, false) => Ok(Presence::Fresh),
        (true, true) => Ok(Presence::Store),
        (true, false) => Err(JournalError::StoreDamaged {
            path: db,
            reason: "is missing (sled's settings file conf is there)".into(),
        }),
        (false, true) => Err(JournalError::ConfDamaged {
            path: conf,
            reason: "is missing (sled's data file db is there): see `lifecycle log repair`".into(),
        }),
    }
}

fn exists(path: &Path) -> Result<bool, JournalError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(JournalError::FileUnreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// sled's settings as its `conf` file records them, checked (sled itself only warns on a
/// failed checksum and rewrites a short file).
pub(crate) fn read_conf(dir: &Path) -> Result<usize, JournalError> {
    let path = dir.join(CONF_FILE);
    let damaged = |reason: String| JournalError::ConfDamaged {
        path: path.clone(),
        reason,
    };
    let bytes = std::fs::read(&path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => damaged("is missing".into()),
        _ => JournalError::FileUnreadable {
            path: path.clone(),
            source,
        },
    })?;
    if bytes.len() <= 8 {
        return Err(damaged(format!("is {} bytes long", bytes.len())));
    }
    let (text, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(text).to_le_bytes() != crc {
        return Err(damaged("fails its checksum".into()));
    }
    let text = std::str::from_utf8(text).map_err(|_| damaged("is not text".into()))?;
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
    };
    let segment_bytes: usize = value("segment_size")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| damaged("has no readable segment_size".into()))?;
    if !segment_bytes.is_power_of_two() || !(256..=1 << 24).contains(&segment_bytes) {
        return Err(damaged(format!(
            "names segment_size {segment_bytes}, which sled never writes"
        )));
    }
    if value("use_compression") != Some("false") {
        return Err(damaged("does not say use_compression: false".into()));
    }
    if value("version") != Some("0.34") {
        return Err(damaged(format!(
            "names sled version {:?}, this build reads 0.34",
            value("version").unwrap_or("none")
        )));
    }
    Ok(segment_bytes)
}

/// Every file of the journal can be opened for reading (a blob with mode 000 is unreadable,
/// and sled's recovery would take it for the end of its log).
pub(crate) fn check_readable(dir: &Path) -> Result<(), JournalError> {
    for path in files(dir)? {
        if let Err(source) = std::fs::File::open(&path) {
            return Err(JournalError::FileUnreadable { path, source });
        }
    }
    Ok(())
}

/// The journal's files: those in `dir` and in `blobs/`.
pub(crate) fn files(dir: &Path) -> Result<Vec<PathBuf>, JournalError> {
    let list = |d: &Path| -> Result<Vec<PathBuf>, JournalError> {
        let unreadable = |source| JournalError::FileUnreadable {
            path: d.to_path_buf(),
            source,
        };
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d != dir => return Ok(out),
            Err(e) => return Err(unreadable(e)),
        };
        for entry in entries {
            let entry = entry.map_err(unreadable)?;
            let kind = entry.file_type().map_err(unreadable)?;
            if kind.is_file() {
                out.push(entry.path());
            } else if kind.is_dir() && d == dir && entry.file_name() != BLOBS_DIR {
                continue;
            }
        }
        out.sort();
        Ok(out)
    };
    let mut all = list(dir)?;
    all.extend(list(&dir.join(BLOBS_DIR))?);
    Ok(all)
}

/// sled's newest finished snapshot file passes its checksum (sled reports a failure without
/// naming the file). Unfinished `.generating` files are not read by sled: ignored here too.
pub(crate) fn check_store_snapshot(dir: &Path) -> Result<(), JournalError> {
    let Some(path) = newest_store_snapshot(dir)? else {
        return Ok(());
    };
    let bytes = std::fs::read(&path).map_err(|source| JournalError::FileUnreadable {
        path: path.clone(),
        source,
    })?;
    let damaged = |reason: String| JournalError::StoreSnapshotDamaged {
        path: path.clone(),
        reason,
    };
    if bytes.len() <= 12 {
        return Err(damaged(format!("it is {} bytes long", bytes.len())));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 12);
    if crc32fast::hash(body).to_le_bytes() != trailer[8..12] {
        return Err(damaged("it fails its checksum".into()));
    }
    Ok(())
}

/// The `snap.*` file sled would read (the largest name, unfinished ones aside).
pub(crate) fn newest_store_snapshot(dir: &Path) -> Result<Option<PathBuf>, JournalError> {
    Ok(store_snapshots(dir)?.pop())
}

/// sled's finished snapshot files, by name.
pub(crate) fn store_snapshots(dir: &Path) -> Result<Vec<PathBuf>, JournalError> {
    Ok(files(dir)?
        .into_iter()
        .filter(|p| {
            p.parent() == Some(dir)
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("snap.") && !n.ends_with(".generating"))
        })
        .collect())
}

/// sled's unfinished snapshot files (left by a full disk or a crash while writing one).
pub(crate) fn unfinished_store_snapshots(dir: &Path) -> Result<Vec<PathBuf>, JournalError> {
    Ok(files(dir)?
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snap.") && n.ends_with(".generating"))
        })
        .collect())
}

/// How sled is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreMode {
    /// Read-only, with sled's snapshot file (what a start checks).
    Inspect,
    /// Read-only, recovering from sled's log alone (a repair checking that its damaged
    /// snapshot file can go).
    InspectLogOnly,
    /// Read-write (sled's recovery may write).
    Write,
}

pub(crate) fn sled_config(
    dir: &Path,
    opts: &JournalOptions,
    segment_bytes: usize,
    mode: StoreMode,
) -> sled::Config {
    sled::Config::new()
        .path(dir)
        .cache_capacity(opts.cache_bytes)
        .mode(sled::Mode::HighThroughput)
        .segment_size(segment_bytes)
        .use_compression(false)
        .flush_every_ms(Some(500))
        .read_only(mode != StoreMode::Write)
        .ignore_snapshot_files(mode == StoreMode::InspectLogOnly)
        .sync_blobs(mode == StoreMode::Write && opts.durability == super::Durability::Flush)
}

/// What the read-only check found: the facts an open (or an inspection) goes on from.
pub(crate) struct Inspection {
    pub db: sled::Db,
    pub chunks: Chunks,
    /// `None` when the tree does not exist (a read-only open cannot create it).
    pub snapshots: Option<sled::Tree>,
    pub format: u16,
    pub commits: Reconciled,
    /// The last record stored that passes its checks (0: none).
    pub stored_last: u64,
    /// The last batch fails its checks and lies after every committed record: a torn,
    /// unacknowledged write, removed by a writable open.
    pub torn_tail: Option<TruncatedTail>,
    /// The journal predates the commit record (format 1): a writable open writes one.
    pub legacy: bool,
    /// Why no commit record could be trusted ([`Strictness::Read`] only; a start refuses).
    pub commit_problem: Option<String>,
}

/// How much [`inspect`] refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strictness {
    /// Every check a start makes: any committed record missing or damaged is an error.
    Start,
    /// What keeps the journal from being read at all (its files, sled's settings and
    /// snapshot) or would let it be read back shorter (committed records the store does not
    /// hold); a committed record that is stored but damaged is left for readers to meet and
    /// for [`super::Journal::verify`] to list with every other.
    Read,
}

/// Checks the journal in `dir` (which has sled files) without writing anything.
pub(crate) fn inspect(
    dir: &Path,
    opts: &JournalOptions,
    mode: StoreMode,
    strictness: Strictness,
) -> Result<Inspection, JournalError> {
    debug_assert!(mode != StoreMode::Write);
    let segment_bytes = read_conf(dir)?;
    check_readable(dir)?;
    if mode == StoreMode::Inspect {
        check_store_snapshot(dir)?;
    }
    for p in unfinished_store_snapshots(dir)? {
        tracing::info!(file = %p.display(), "ignoring an unfinished sled snapshot file (a full disk or a crash while writing it); a writable open removes it");
    }
    let db = super::open_sled(dir, &sled_config(dir, opts, segment_bytes, mode))?;
    inspect_store(dir, db, strictness).map_err(|e| name_store_damage(dir, e))
}

/// An error sled gave while reading, naming where the damage is when it can be told.
pub(crate) fn name_store_damage(dir: &Path, e: JournalError) -> JournalError {
    match e {
        JournalError::Storage {
            op,
            source: sled::Error::Io(io),
        } => match damaged_blob(dir) {
            Some((path, reason)) => JournalError::StoreDamaged { path, reason },
            None if io.kind() == std::io::ErrorKind::NotFound => JournalError::StoreDamaged {
                path: dir.join(BLOBS_DIR),
                reason: format!("a blob file sled refers to is missing (while {op})"),
            },
            None if io.kind() == std::io::ErrorKind::UnexpectedEof => JournalError::StoreDamaged {
                path: dir.join(DB_FILE),
                reason: format!(
                    "ends before what sled's log says is there: it is cut short (while {op}: {io})"
                ),
            },
            None => JournalError::Storage {
                op,
                source: sled::Error::Io(io),
            },
        },
        JournalError::Storage {
            source: source @ sled::Error::Corruption { .. },
            ..
        } => store_error(dir, source),
        other => other,
    }
}

fn inspect_store(
    dir: &Path,
    db: sled::Db,
    strictness: Strictness,
) -> Result<Inspection, JournalError> {
    let chunks = Chunks::load_read_only(&db)?;
    let names = db.tree_names();
    let has_tree = |name: &str| names.iter().any(|n| n.as_ref() == name.as_bytes());
    let snapshots = if has_tree(TREE_SNAPSHOTS) {
        Some(
            db.open_tree(TREE_SNAPSHOTS)
                .map_err(JournalError::storage("opening a tree"))?,
        )
    } else {
        None
    };
    let format = if has_tree(TREE_META) {
        let meta = db
            .open_tree(TREE_META)
            .map_err(JournalError::storage("opening a tree"))?;
        read_meta_version(&meta)?
    } else {
        None
    };
    let copies = commit::load_copies(dir);
    // From format 5 on a journal is created with both copies before its identity says so.
    let identity = super::identity::load(dir);
    let copies_gone = identity.says_created()
        && copies
            .iter()
            .all(|c| matches!(c, commit::CopyState::Absent));
    let format = match format {
        Some(f) => f,
        None if chunks.starts().is_empty() => {
            // Created, but nothing stored yet: anything the commit record vouches for is lost.
            let commits = commit::reconcile(dir, &copies, JOURNAL_FORMAT_VERSION)
                .or_else(|_| commit::reconcile(dir, &copies, JOURNAL_FORMAT_VERSION_NO_MIRROR))?;
            let committed = commits.committed_through();
            if committed > commits.retired_through() {
                return Err(JournalError::RecordsMissing {
                    first: commits.retired_through() + 1,
                    last: committed,
                    stored_last: 0,
                    file: damaged_file(dir, None),
                });
            }
            JOURNAL_FORMAT_VERSION
        }
        None => {
            return Err(JournalError::Corrupt {
                seq: chunks.starts().first().copied().unwrap_or(1),
                reason: "journal has batches but no meta record".into(),
            });
        }
    };
    match format {
        JOURNAL_FORMAT_VERSION_LEGACY
        | JOURNAL_FORMAT_VERSION_NO_RETENTION
        | JOURNAL_FORMAT_VERSION_NO_MIRROR
        | JOURNAL_FORMAT_VERSION_NO_IDENTITY
        | JOURNAL_FORMAT_VERSION => {}
        found => {
            return Err(JournalError::UnknownFormat {
                found,
                supported: JOURNAL_FORMAT_VERSION,
                seq: None,
            });
        }
    }
    let reconciled = match copies_gone {
        true => Err(JournalError::CreatedButGone {
            dir: dir.to_path_buf(),
            missing: format!(
                "both copies of its commit record ({} and {}) are missing",
                commit::COMMITS_FILE,
                commit::COMMITS_MIRROR_FILE
            ),
        }),
        false => commit::reconcile(dir, &copies, format).and_then(|c| {
            let witnessed = identity.committed_through();
            match c.committed_through() < witnessed {
                true => Err(JournalError::CommitCutBack {
                    witnessed,
                    committed: c.committed_through(),
                }),
                false => Ok(c),
            }
        }),
    };
    let (commits, commit_problem) = match reconciled {
        Ok(c) => (c, None),
        Err(e) if strictness == Strictness::Read => (Reconciled::default(), Some(e.to_string())),
        Err(e) => return Err(e),
    };
    let legacy = format == JOURNAL_FORMAT_VERSION_LEGACY && commits.loaded.is_none();
    let retired_through = commits.retired_through();
    if format == JOURNAL_FORMAT_VERSION_NO_RETENTION && retired_through > 0 {
        return Err(JournalError::Corrupt {
            seq: retired_through,
            reason: format!(
                "the commit record says records 1..{retired_through} were retired but the journal's format ({JOURNAL_FORMAT_VERSION_NO_RETENTION}) has no retention"
            ),
        });
    }
    let committed = commits.committed_through();
    let (stored_last, torn_tail) = match stored_end(&chunks, committed) {
        Err(JournalError::RecordsDamaged { .. }) if strictness == Strictness::Read => {
            (committed, None)
        }
        other => other?,
    };
    let uncommitted = match format >= JOURNAL_FORMAT_VERSION {
        true => check_uncommitted(&chunks, committed, stored_last),
        false => Ok(()),
    };
    let (commits, commit_problem) = match uncommitted {
        Ok(()) => (commits, commit_problem),
        // The first problem is the one a start meets.
        Err(e) if strictness == Strictness::Read => (
            Reconciled::default(),
            commit_problem.or(Some(e.to_string())),
        ),
        Err(e) => return Err(e),
    };
    let kept_first = chunks
        .starts()
        .iter()
        .copied()
        .find(|&s| s > retired_through || chunk_reaches_past(&chunks, s, retired_through));
    if let Some(first) = kept_first
        && first > retired_through + 1
        && retired_through < committed
    {
        return Err(JournalError::RecordsMissing {
            first: retired_through + 1,
            last: (first - 1).min(committed),
            stored_last,
            file: damaged_file(dir, None),
        });
    }
    if stored_last < committed {
        return Err(JournalError::RecordsMissing {
            first: stored_last.max(retired_through) + 1,
            last: committed,
            stored_last,
            file: damaged_file(dir, None),
        });
    }
    // Readers meet damaged records where they lie and `verify` lists them all; but a committed
    // record the store does not hold at all, no reader would notice: refused even for them.
    if strictness == Strictness::Read {
        return Ok(Inspection {
            db,
            chunks,
            snapshots,
            format,
            commits,
            stored_last,
            torn_tail,
            legacy,
            commit_problem,
        });
    }
    if commits.loaded.is_none() && stored_last > retired_through && !legacy {
        return Err(JournalError::CommitMissing {
            dir: dir.to_path_buf(),
            last_seq: stored_last,
        });
    }
    if let Some(loaded) = &commits.loaded {
        for e in &loaded.entries {
            match commit::digest_range(&chunks, e.first_seq, e.last_seq) {
                Ok(d) if d == e.digest => {}
                Ok(_) => {
                    return Err(JournalError::RecordsDamaged {
                        first: e.first_seq,
                        last: e.last_seq,
                        reason: format!(
                            "they differ from what the commit record says was written ({})",
                            damaged_file(dir, None)
                        ),
                    });
                }
                Err(reason) => {
                    return Err(JournalError::RecordsDamaged {
                        first: e.first_seq,
                        last: e.last_seq,
                        reason: format!("{reason} ({})", damaged_file(dir, reason.blob.as_deref())),
                    });
                }
            }
        }
    }
    if let Some(tree) = &snapshots {
        check_engine_snapshots(dir, tree)?;
    }
    Ok(Inspection {
        db,
        chunks,
        snapshots,
        format,
        commits,
        stored_last,
        torn_tail,
        legacy,
        commit_problem,
    })
}

/// Every engine snapshot can be read from sled (its checksum is the reader's to judge: a bad
/// one is passed over for an older one). One sled cannot read (a blob file it refers to is
/// missing or damaged) would fail the start after it wrote.
pub(crate) fn check_engine_snapshots(dir: &Path, tree: &sled::Tree) -> Result<(), JournalError> {
    for entry in tree.iter() {
        if let Err(e) = entry {
            let (path, why) = damaged_blob(dir).unwrap_or_else(|| {
                (
                    dir.join(BLOBS_DIR),
                    "a blob file sled refers to is missing".to_string(),
                )
            });
            return Err(JournalError::StoreDamaged {
                path,
                reason: format!("an engine snapshot fails to load: {why} (sled: {e})"),
            });
        }
    }
    Ok(())
}

/// Records stored after the last committed one are what a crash between sled's flush and the
/// commit record's leaves: one append (each append of a writer that waits for durability has
/// its commit entry before the next begins), or appends a buffered writer acknowledged before
/// they were durable. More appends than that mean the commit record was cut back: refused,
/// never committed over. Batches of formats before 5 carry no flags and pass.
pub(crate) fn check_uncommitted(
    chunks: &Chunks,
    committed: u64,
    stored_last: u64,
) -> Result<(), JournalError> {
    if stored_last <= committed {
        return Ok(());
    }
    let mut appends = 0u64;
    let mut expected = committed + 1;
    for entry in chunks.iter_from(expected)? {
        let (_, value) = entry?;
        let Ok(view) = BatchView::parse(expected, &value) else {
            break;
        };
        if view.first_seq > stored_last {
            break;
        }
        if view.flags.append_end && !view.flags.buffered && view.last_seq() < stored_last {
            appends += 1;
        }
        expected = view.last_seq() + 1;
    }
    match appends {
        0 => Ok(()),
        n => Err(JournalError::UncommittedAppends {
            committed,
            stored_last,
            appends: n + 1,
        }),
    }
}

/// Whether the chunk starting at `start` holds records after `retired_through` (a crash
/// between the commit record's retention entry and dropping the chunks leaves such chunks
/// straddling nothing: they end at or before it).
fn chunk_reaches_past(chunks: &Chunks, start: u64, retired_through: u64) -> bool {
    let starts = chunks.starts();
    match starts.iter().position(|&s| s == start) {
        Some(i) if i + 1 < starts.len() => starts[i + 1] - 1 > retired_through,
        _ => true,
    }
}

/// The last good stored record, and the last batch if it is a torn, unacknowledged write
/// (it fails its checks and lies after `committed`). A committed last batch that fails is
/// damage.
fn stored_end(
    chunks: &Chunks,
    committed: u64,
) -> Result<(u64, Option<TruncatedTail>), JournalError> {
    let Some((_, seq, value)) = chunks.last_batch()? else {
        return Ok((0, None));
    };
    let checked = BatchView::parse(seq, &value).and_then(|view| {
        view.records()
            .try_for_each(|r| r.map(|_| ()))
            .map(|()| view.last_seq())
    });
    match checked {
        Ok(last) => Ok((last, None)),
        Err(JournalError::Corrupt { reason, .. }) if seq <= committed => {
            Err(JournalError::RecordsDamaged {
                first: seq,
                last: committed,
                reason,
            })
        }
        Err(JournalError::Corrupt { reason, .. }) => Ok((
            seq - 1,
            Some(TruncatedTail {
                from_seq: seq,
                bytes: value.len(),
                reason,
            }),
        )),
        Err(other) => Err(other),
    }
}

/// Where damaged records lie, for an error that names records: the blob file sled could not
/// read (`failed`), else the first blob that fails sled's own check, else sled's data file.
pub(crate) fn damaged_file(dir: &Path, failed: Option<&Path>) -> DamagedFile {
    if let Some(path) = failed {
        return DamagedFile {
            path: path.to_path_buf(),
            why: Some("sled cannot read this blob file".into()),
        };
    }
    match damaged_blob(dir) {
        Some((path, why)) => DamagedFile {
            path,
            why: Some(why),
        },
        None => DamagedFile {
            path: dir.join(DB_FILE),
            why: None,
        },
    }
}

/// The first blob file that fails sled's own check (`crc32 | kind | data`, the crc over kind
/// and data): sled reports damage it met while recovering as "corruption in its log" or "in
/// its snapshot file", and a blob is where it most often is.
fn damaged_blob(dir: &Path) -> Option<(PathBuf, String)> {
    let blobs = files(dir).ok()?;
    blobs
        .into_iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with(BLOBS_DIR)))
        .find_map(|path| {
            let reason = match std::fs::read(&path) {
                Err(e) => format!("cannot be read: {e}"),
                Ok(b) if b.len() < 5 => {
                    format!("is {} bytes long, shorter than its header", b.len())
                }
                Ok(b) if crc32fast::hash(&b[4..]).to_le_bytes() != b[..4] => {
                    "fails its checksum".to_string()
                }
                Ok(_) => return None,
            };
            Some((path, format!("sled's blob file {reason}")))
        })
}

/// A sled error while opening, naming the file where sled says the damage is.
pub(crate) fn store_error(dir: &Path, e: sled::Error) -> JournalError {
    match &e {
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            JournalError::Locked {
                dir: dir.to_path_buf(),
            }
        }
        // sled's log ends before what it says is there: a file cut short (a blob, else `db`).
        sled::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            let (path, reason) = damaged_blob(dir).unwrap_or_else(|| {
                (
                    dir.join(DB_FILE),
                    format!("ends before what sled's log says is there: it is cut short ({io})"),
                )
            });
            JournalError::StoreDamaged { path, reason }
        }
        sled::Error::Corruption { at, .. } => {
            if let Some((path, reason)) = damaged_blob(dir) {
                return JournalError::StoreDamaged { path, reason };
            }
            let (path, reason) = match at {
                Some(sled::DiskPtr::Blob(_, lsn)) => (
                    dir.join(BLOBS_DIR).join(lsn.to_string()),
                    "sled found damaged data in it".to_string(),
                ),
                Some(sled::DiskPtr::Inline(offset)) => (
                    dir.join(DB_FILE),
                    format!("sled found damaged data at byte {offset}"),
                ),
                None => (
                    dir.join(DB_FILE),
                    "sled found damaged data in its log".to_string(),
                ),
            };
            JournalError::StoreDamaged { path, reason }
        }
        // The vendored sled's read-only open found nothing it wrote (an emptied or foreign `db`).
        sled::Error::Unsupported(why) if why.starts_with("no sled database") => {
            JournalError::StoreDamaged {
                path: dir.join(DB_FILE),
                reason: format!(
                    "holds no sled database {}",
                    why.trim_start_matches("no sled database to open read-only ")
                ),
            }
        }
        _ => JournalError::Storage {
            op: "opening the journal",
            source: e,
        },
    }
}
