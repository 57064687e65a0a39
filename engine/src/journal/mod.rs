//! The journal: an append-only, checksummed log of engine inputs in sled.
//!
//! *Expected flow:* [`Journal::open`] (check [`OpenReport`]), load [`Journal::latest_snapshot`],
//! replay the tail with [`Journal::for_each_record`], then [`Journal::append_batch`] each step's
//! inputs before applying them, and [`Journal::write_snapshot`] now and then.
//!
//! *Layout:* sled trees in one directory. Batch trees (`batches.<seq>`, see `chunks.rs`) map
//! the big-endian first seq of a batch to many framed records (see `batch.rs`): one sled value
//! and one flush per [`Journal::append_batch`] (group commit). `snapshots` holds the newest
//! [`JournalOptions::snapshots_kept`] snapshots. `meta` holds the format version
//! ([`JOURNAL_FORMAT_VERSION`]). Beside sled, the `commits` file (see `commit.rs`) records what
//! was acknowledged durable; every open checks sled against it, because sled's own recovery
//! treats damage as a torn tail and would silently return a shorter journal.
//!
//! *Retention* (`retention.rs`, [`JournalOptions::retire_records`]): once the kept snapshots
//! exist, whole chunk trees at or before the oldest kept snapshot are dropped and the commit
//! record starts with a retention entry "records 1..N retired". Readers start at N + 1
//! ([`Journal::first_kept_seq`]); asking for a retired record is [`JournalError::Retired`],
//! never "missing"; a record after N that is missing is still an error.
//!
//! *Guarantees:* sequence numbers are dense and start at 1; every record and batch header is
//! checksummed when written and checked again when read; a failed check is an error naming the
//! seq, and nothing after it is returned. Payloads are opaque bytes. A committed record that is
//! missing or different is an error on open; only an unacknowledged torn tail is truncated.

mod batch;
mod chunks;
mod commit;
mod creation;
#[cfg(test)]
mod creation_tests;
#[cfg(any(test, feature = "testing"))]
#[cfg(any(test, feature = "testing"))]
mod damage;
#[cfg(test)]
mod double_fault_tests;
mod durable;
mod error;
mod identity;
mod inspect;
mod read;
mod repair;
mod retention;
#[cfg(test)]
mod retention_tests;
mod snapshot;
#[cfg(test)]
mod tests;
mod writable;

pub use batch::{FORMAT_VERSION, RecordRef};
pub use commit::{COMMIT_COPIES, COMMITS_FILE, COMMITS_MIRROR_FILE};
#[cfg(any(test, feature = "testing"))]
#[cfg(any(test, feature = "testing"))]
pub use damage::Damage;
pub use durable::probe_space;
pub use error::{DamagedFile, JournalError};
pub use identity::{IDENTITY_FILE, Stage};
/// sled's files: a directory holding either holds a journal, or the start of one.
pub use inspect::{CONF_FILE, DB_FILE};
pub use read::Records;
pub use repair::{DISCARDED_DIR, RepairMode, RepairReport};
pub use retention::Retired;
pub use snapshot::{SNAPSHOTS_KEPT_LIMIT, SNAPSHOTS_KEPT_MAX, Snapshot, SnapshotProblem};

use crate::time::Timestamp;
use batch::{BatchEncoder, BatchFlags, BatchView, key_seq, seq_key};
use chunks::Chunks;
use inspect::StoreMode;
use std::ops::{ControlFlow, RangeInclusive};
use std::path::{Path, PathBuf};

const TREE_SNAPSHOTS: &str = "snapshots";
const TREE_META: &str = "meta";
const META_FORMAT_VERSION: &str = "format_version";
const META_CREATED_BY: &str = "created_by";
/// The journal's format (in `meta`): 2 adds the commit record, 3 retention entries in it
/// (records retired; a build that reads only 2 would take them for damage), 4 keeps the
/// commit record in two copies, each starting with a header, 5 adds the identity file
/// (`identity.rs`: a creation cut short is known by evidence written first) and writes the
/// two copies one after the other. Batches keep [`FORMAT_VERSION`]. Older journals are read
/// as they are and upgraded to 5 by the first writable open.
pub const JOURNAL_FORMAT_VERSION: u16 = 5;
/// The format before the identity file.
pub const JOURNAL_FORMAT_VERSION_NO_IDENTITY: u16 = 4;
/// The format before the second copy of the commit record.
pub const JOURNAL_FORMAT_VERSION_NO_MIRROR: u16 = 3;
/// The format before retention: read as is.
pub const JOURNAL_FORMAT_VERSION_NO_RETENTION: u16 = 2;
/// The previous release's journals (no commit record): read, and upgraded on open.
pub const JOURNAL_FORMAT_VERSION_LEGACY: u16 = 1;
/// sled's segment size, fixed when a journal is created (sled refuses to reopen with another).
///
/// Why so small: batches are larger than a quarter segment, so sled stores each in its own blob
/// file, and it deletes the blobs that tree-node rewrites made stale only when the log segment
/// recording the rewrite fills up. Small segments fill after a few appends, which keeps disk
/// use near the payload size (512 KiB segments measured 3x the payload bytes).
pub const SLED_SEGMENT_BYTES: usize = 4096;
/// `verify` stops collecting problems after this many (the first ones matter most).
pub const VERIFY_PROBLEMS_MAX: usize = 1000;

/// When [`Journal::append_batch`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// After sled has written and fsynced the batch: an acknowledged batch survives a process
    /// crash and a power loss.
    #[default]
    Flush,
    /// As soon as the batch is in sled's in-memory log buffer; sled writes it out in the
    /// background (about every 500 ms) or on [`Journal::flush`] / drop. A crash of the process
    /// or the machine may lose a *suffix* of acknowledged batches (never a record in the
    /// middle). For simulations and benchmarks only.
    Buffered,
}

/// How to open a journal. Limits carry their unit in the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalOptions {
    pub durability: Durability,
    /// Records per sled value; a larger `append_batch` is split (still one flush).
    pub batch_records_max: usize,
    /// Framed bytes per sled value (records are never split).
    pub batch_bytes_max: usize,
    /// Largest accepted payload.
    pub record_bytes_max: usize,
    /// sled's page cache.
    pub cache_bytes: u64,
    /// sled's segment size for a journal created now ([`SLED_SEGMENT_BYTES`] by default); an
    /// existing journal keeps the size it was created with. Simulations use large segments so
    /// small frequent batches stay in sled's log instead of a file each.
    pub segment_bytes: usize,
    /// Snapshots kept (the newest ones; at least 1, at most [`SNAPSHOTS_KEPT_LIMIT`]).
    pub snapshots_kept: usize,
    /// Retention: once `snapshots_kept` snapshots exist, retire (drop) whole chunks of records
    /// at or before the oldest kept snapshot. Off: every record is kept forever.
    pub retire_records: bool,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            durability: Durability::Flush,
            batch_records_max: 4096,
            batch_bytes_max: 4 << 20,
            // A relist of a large management cluster is one input: allow what the codec decodes.
            record_bytes_max: crate::codec::DECODE_BYTES_MAX,
            cache_bytes: 64 << 20,
            segment_bytes: SLED_SEGMENT_BYTES,
            snapshots_kept: SNAPSHOTS_KEPT_MAX,
            retire_records: false,
        }
    }
}

/// What [`Journal::open`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenReport {
    /// The directory held no journal; an empty one was created.
    pub created: bool,
    /// A last batch failed its checks (a write torn by a crash) and was removed.
    pub truncated_tail: Option<TruncatedTail>,
    /// The seq the next appended record will get.
    pub next_seq: u64,
    /// The last seq the commit record vouches for (checked against the store on open).
    pub committed_through: u64,
    /// The journal was written by this older format and has been upgraded (commit record
    /// written for every record it held).
    pub upgraded_from: Option<u16>,
    /// Records `1..=retired_through` were retired (0: none); the journal starts after them.
    pub retired_through: u64,
    /// Copies of the commit record found missing or damaged and taken from the other copy
    /// (a writable open rewrote them): `"<file> <what was wrong>"`.
    pub recovered_commit_copies: Vec<String>,
    /// An engine snapshot the journal held when it was last sealed is gone from the store.
    pub lost_snapshot: Option<LostSnapshot>,
}

/// An engine snapshot the identity file saw the store hold, and that it no longer holds (nor
/// any newer one): damage at the end of sled's log, which sled drops as a torn write. No
/// committed record is lost with it (the commit record checks every one): recovery replays
/// from `newest_left`, or from the first kept record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostSnapshot {
    pub through_seq: u64,
    pub newest_left: Option<u64>,
}

impl LostSnapshot {
    fn of(witnessed: u64, newest_left: Option<u64>) -> Option<LostSnapshot> {
        (witnessed > newest_left.unwrap_or(0)).then_some(LostSnapshot {
            through_seq: witnessed,
            newest_left,
        })
    }
}

impl std::fmt::Display for LostSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the engine snapshot through record {} is gone from the store (damage at the end of sled's log, which sled drops as if a write were torn); every committed record is kept, so recovery replays from ",
            self.through_seq
        )?;
        match self.newest_left {
            Some(seq) => write!(f, "the snapshot through record {seq} instead"),
            None => f.write_str("the first kept record instead"),
        }
    }
}

/// The batch removed from the end of the journal on open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruncatedTail {
    /// First seq of the removed batch; the journal now ends at `from_seq - 1`.
    pub from_seq: u64,
    /// Stored size of the removed batch.
    pub bytes: usize,
    /// Why the batch failed its checks.
    pub reason: String,
}

/// One record, owned. Use [`Journal::for_each_record`] to replay without allocating.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub at: Timestamp,
    pub payload: Vec<u8>,
}

/// Sizes of a journal, for operators and benchmarks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalStats {
    pub records: u64,
    pub batches: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Sum of payload lengths (what the caller asked to store).
    pub payload_bytes: u64,
    /// Sum of the lengths of all files in the journal directory.
    pub disk_bytes: u64,
    /// Blocks actually allocated to those files.
    pub disk_allocated_bytes: u64,
    /// `(through_seq, stored bytes)` of each snapshot, oldest first.
    pub snapshots: Vec<(u64, u64)>,
    /// Records `1..=retired_through` were retired by retention (0: none).
    pub retired_through: u64,
}

/// A problem found by [`Journal::verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyProblem {
    pub seq: u64,
    pub reason: String,
}

/// Result of a full check of every batch, record and snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub batches_checked: u64,
    pub records_checked: u64,
    pub last_seq: Option<u64>,
    /// The last seq the commit record vouches for.
    pub committed_through: u64,
    /// Records `1..=retired_through` were retired by retention (not a loss; 0: none).
    pub retired_through: u64,
    /// At most [`VERIFY_PROBLEMS_MAX`], in seq order.
    pub problems: Vec<VerifyProblem>,
    pub snapshot_problems: Vec<SnapshotProblem>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.snapshot_problems.is_empty()
    }
}

/// An open journal. Holds sled's exclusive lock on the directory until dropped.
///
/// *Guarantees:* appends are dense (`next_seq` grows by the number of records appended) and,
/// with [`Durability::Flush`], durable when `append_batch` returns.
/// *Errors:* see [`JournalError`]; a storage error during an append leaves `next_seq` re-read
/// from disk, so a retry never leaves a gap.
pub struct Journal {
    dir: PathBuf,
    db: sled::Db,
    chunks: Chunks,
    /// `None` only read-only, when the journal never stored a snapshot.
    snapshots: Option<sled::Tree>,
    opts: JournalOptions,
    next_seq: u64,
    encode_buf: Vec<u8>,
    /// `None`: opened read-only ([`Journal::open_read_only`]).
    writer: Option<Writer>,
    /// The commit record trusted at open (read-only `verify` checks the store against it).
    commit_record: commit::Loaded,
    /// Read-only: why no commit record could be trusted (`verify` reports it).
    commit_problem: Option<String>,
    /// Read-only view of a format-1 journal, which has no commit record by design.
    legacy: bool,
    /// Records `1..=retired_through` were retired (the commit record says so).
    retired_through: u64,
}

/// What only a writable journal has.
struct Writer {
    /// `None` with [`Durability::Flush`]: sled fsyncs each blob file as it writes it.
    blob_sync: Option<durable::BlobSync>,
    commits: commit::CommitLog,
    /// Digest of the values appended since the last commit entry.
    pending: commit::Digest,
    /// `pending` is unknown (a failed append, or records found uncommitted on open): recompute
    /// it from the store before committing.
    pending_dirty: bool,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.dir)
            .field("next_seq", &self.next_seq)
            .field("read_only", &self.writer.is_none())
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Opens (or creates, with mode 0700) the journal in `dir` for appending.
    ///
    /// The journal is first checked in place, read-only ([`inspect`]): a journal that fails is
    /// refused with nothing written, so it stays refused across restarts until `log repair`.
    /// Only then is it opened for writing, which removes an unacknowledged torn last batch,
    /// rewrites a lost or lagging copy of the commit record from the other, and commits
    /// records sled holds beyond the commit record (a crash between the two writes).
    ///
    /// *Errors:* [`JournalError::Locked`] if it is open elsewhere;
    /// [`JournalError::UnknownFormat`] for a journal from another format version; the damage
    /// errors ([`JournalError::is_damage`]) naming the file and records.
    pub fn open(dir: &Path, opts: JournalOptions) -> Result<(Journal, OpenReport), JournalError> {
        let opts = clamp_options(opts);
        // sled panics on some damaged files; that is an error about the journal, not a crash.
        contain_panics(dir, || Journal::open_writable(dir, opts))
    }

    /// Opens an existing journal for reading only: nothing in `dir` is written, created or
    /// removed (its files may be read-only and owned by another user, as long as they are
    /// readable). It refuses only what keeps the journal from being read at all; missing or
    /// damaged committed records are for the reader to meet (readers stop with an error at
    /// the first) and for [`Journal::verify`] to list. Appends fail with
    /// [`JournalError::ReadOnly`]. A torn, unacknowledged last batch is passed over.
    ///
    /// *Errors:* as [`Journal::open`], and [`JournalError::NoJournal`] when `dir` holds none.
    pub fn open_read_only(
        dir: &Path,
        opts: JournalOptions,
    ) -> Result<(Journal, OpenReport), JournalError> {
        let opts = clamp_options(opts);
        contain_panics(dir, || {
            Journal::open_inspected(dir, opts, StoreMode::Inspect)
        })
    }

    /// [`Journal::open_read_only`] with sled recovering from its log alone, its `snap.*` files
    /// ignored: whether a damaged sled snapshot file can be removed without losing records.
    pub fn open_read_only_without_store_snapshot(
        dir: &Path,
        opts: JournalOptions,
    ) -> Result<(Journal, OpenReport), JournalError> {
        let opts = clamp_options(opts);
        contain_panics(dir, || {
            Journal::open_inspected(dir, opts, StoreMode::InspectLogOnly)
        })
    }

    fn open_inspected(
        dir: &Path,
        opts: JournalOptions,
        mode: StoreMode,
    ) -> Result<(Journal, OpenReport), JournalError> {
        let identity = identity::load(dir);
        identity.check_format(JOURNAL_FORMAT_VERSION)?;
        if identity.is_creating() {
            return Err(JournalError::CreationCutShort {
                dir: dir.to_path_buf(),
            });
        }
        if matches!(identity, identity::Found::Absent)
            && let Some(why) = creation::interrupted(dir, &opts)?
        {
            tracing::debug!(dir = %dir.display(), %why, "a creation cut short by a release before format 5");
            return Err(JournalError::CreationCutShort {
                dir: dir.to_path_buf(),
            });
        }
        match inspect::presence(dir) {
            Ok(inspect::Presence::Store) => {}
            Ok(inspect::Presence::Fresh) => {
                refuse_fresh_if_created(dir, identity)?;
                check_fresh(dir)?;
                return Err(JournalError::NoJournal {
                    dir: dir.to_path_buf(),
                });
            }
            Err(JournalError::FileUnreadable { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(JournalError::NoJournal {
                    dir: dir.to_path_buf(),
                });
            }
            Err(e) => return Err(e),
        }
        let mut found = inspect::inspect(dir, &opts, mode, inspect::Strictness::Read)?;
        if let Some(t) = &found.torn_tail {
            found.chunks.hide_from(t.from_seq);
            tracing::debug!(from_seq = t.from_seq, bytes = t.bytes, reason = %t.reason, "passing over a torn, unacknowledged last batch");
        }
        let newest_snapshot = newest_key(found.snapshots.as_ref())?;
        let report = OpenReport {
            created: false,
            truncated_tail: found.torn_tail.clone(),
            next_seq: found.stored_last + 1,
            committed_through: found.commits.committed_through(),
            upgraded_from: found.legacy.then_some(JOURNAL_FORMAT_VERSION_LEGACY),
            retired_through: found.commits.retired_through(),
            recovered_commit_copies: recovered_copies(&found.commits),
            lost_snapshot: LostSnapshot::of(
                identity::load(dir).snapshot_through(),
                newest_snapshot,
            ),
        };
        let journal = Journal {
            dir: dir.to_path_buf(),
            db: found.db,
            chunks: found.chunks,
            snapshots: found.snapshots,
            opts,
            next_seq: found.stored_last + 1,
            encode_buf: Vec::new(),
            writer: None,
            retired_through: found.commits.retired_through(),
            commit_record: found.commits.loaded.unwrap_or_default(),
            commit_problem: found.commit_problem,
            legacy: found.legacy,
        };
        Ok((journal, report))
    }

    fn open_writable(
        dir: &Path,
        opts: JournalOptions,
    ) -> Result<(Journal, OpenReport), JournalError> {
        let identity = identity::load(dir);
        identity.check_format(JOURNAL_FORMAT_VERSION)?;
        if identity.is_creating() {
            tracing::warn!(dir = %dir.display(), "the journal's creation was cut short (its identity file still says so): it holds no record; creating it again");
            creation::clear(dir)?;
            return Journal::create(dir, opts, None);
        }
        if matches!(identity, identity::Found::Absent)
            && let Some(why) = creation::interrupted(dir, &opts)?
        {
            tracing::warn!(dir = %dir.display(), %why, "the journal's creation was cut short (a kill or crash while a release before format 5 created it): creating it again");
            creation::clear(dir)?;
            return Journal::create(dir, opts, None);
        }
        let presence = if dir.is_dir() {
            inspect::presence(dir)?
        } else {
            inspect::Presence::Fresh
        };
        if presence == inspect::Presence::Fresh {
            refuse_fresh_if_created(dir, identity)?;
            check_fresh(dir)?;
            create_private_dir(dir)?;
            identity::remove_unfinished(dir)?;
            return Journal::create(dir, opts, None);
        }
        let found = inspect::inspect(dir, &opts, StoreMode::Inspect, inspect::Strictness::Start)?;
        let checked_last = found.stored_last;
        let format = found.format;
        let legacy = found.legacy;
        let commits = found.commits;
        // sled's lock: the read-only view must be gone before the writable open.
        drop((found.db, found.chunks, found.snapshots));
        let segment_bytes = inspect::read_conf(dir)?;
        writable::check(dir)?;
        let db = open_sled(
            dir,
            &inspect::sled_config(dir, &opts, segment_bytes, StoreMode::Write),
        )?;
        // After sled's open: its recovery writes a new snapshot file with the umask's mode.
        make_private(dir).map_err(|source| JournalError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let tree = |name: &'static str| {
            db.open_tree(name)
                .map_err(JournalError::storage("opening a tree"))
        };
        // sled's writable open recovers its log anew: what it reads may fail where the
        // read-only inspection did not, and is named as the inspection's would be.
        let named = |e| inspect::name_store_damage(dir, e);
        let chunks = Chunks::load(&db).map_err(named)?;
        let snapshots = tree(TREE_SNAPSHOTS).map_err(named)?;
        let meta = tree(TREE_META).map_err(named)?;
        let committed = commits.committed_through();
        let retired_through = commits.retired_through();
        let trusted = commits.loaded.clone().unwrap_or_default();
        let upgrading = format < JOURNAL_FORMAT_VERSION;
        let rewrite: Vec<&'static str> = if format < JOURNAL_FORMAT_VERSION_NO_IDENTITY {
            commit::COMMIT_COPIES.to_vec()
        } else {
            commits.stale.iter().map(|c| c.file).collect()
        };
        for c in commits.recovered_copies() {
            tracing::warn!(file = c.file, why = %c.why, "a copy of the commit record is damaged: rewriting it from the other copy");
        }
        let blob_sync = durable::BlobSync::for_durability(dir, opts.durability)?;
        let mut journal = Journal {
            dir: dir.to_path_buf(),
            db,
            chunks,
            snapshots: Some(snapshots),
            opts,
            next_seq: 1,
            encode_buf: Vec::new(),
            writer: Some(Writer {
                blob_sync,
                commits: commit::CommitLog::open_for_append(dir, &trusted, &rewrite)?,
                pending: commit::Digest::default(),
                pending_dirty: true,
            }),
            commit_record: trusted,
            commit_problem: None,
            legacy: false,
            retired_through,
        };
        // A crash between the commit record's retention entry and dropping the chunks.
        let finished = journal.chunks.retire_through(retired_through)?;
        let truncated_tail = journal.truncate_torn_tail(committed)?;
        journal.next_seq = journal.read_next_seq()?;
        let stored_last = journal.next_seq - 1;
        // Checked twice: the writable view must be the one the read-only check passed.
        if stored_last != checked_last || stored_last < committed {
            return Err(JournalError::RecordsMissing {
                first: stored_last.min(checked_last) + 1,
                last: checked_last.max(committed),
                stored_last,
                file: inspect::damaged_file(dir, None),
            });
        }
        if let Some(last) = journal.commit_record.last() {
            match commit::digest_range(&journal.chunks, last.first_seq, last.last_seq) {
                Ok(d) if d == last.digest => {}
                Ok(_) => {
                    return Err(JournalError::RecordsDamaged {
                        first: last.first_seq,
                        last: last.last_seq,
                        reason: format!(
                            "they differ from what the commit record says was written ({})",
                            inspect::damaged_file(dir, None)
                        ),
                    });
                }
                Err(damage) => {
                    return Err(JournalError::RecordsDamaged {
                        first: last.first_seq,
                        last: last.last_seq,
                        reason: format!(
                            "{damage} ({})",
                            inspect::damaged_file(dir, damage.blob.as_deref())
                        ),
                    });
                }
            }
        }
        if stored_last > committed && !legacy {
            // Passed the check: one append of a durable writer, or a buffered writer's appends.
            tracing::warn!(
                dir = %dir.display(),
                first = committed + 1,
                last = stored_last,
                "records were stored but never committed (a crash between sled's flush and the commit record, or a buffered writer's background flush): they pass their checks and are committed now"
            );
        }
        if truncated_tail.is_some() || upgrading || stored_last > committed || finished > 0 {
            journal.flush()?;
        }
        let newest_snapshot = journal.newest_snapshot_seq()?;
        let lost_snapshot = LostSnapshot::of(identity.snapshot_through(), newest_snapshot);
        if let Some(lost) = &lost_snapshot {
            tracing::warn!(dir = %dir.display(), through_seq = lost.through_seq, "{lost}");
        }
        if identity.needs_writing(JOURNAL_FORMAT_VERSION) || lost_snapshot.is_some() {
            match &identity {
                identity::Found::Damaged(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "the journal's identity file is damaged: writing it again (the store and the commit record passed their checks)");
                }
                identity::Found::Absent if !upgrading => {
                    tracing::warn!(dir = %dir.display(), "the journal's identity file is missing: writing it again (the store and the commit record passed their checks)");
                }
                _ => {}
            }
            identity::remove_unfinished(dir)?;
            identity::write(
                dir,
                JOURNAL_FORMAT_VERSION,
                identity::Stage::Created,
                identity::Witness {
                    committed_through: committed.max(identity.committed_through()),
                    snapshot_through: newest_snapshot.unwrap_or(0),
                },
            )?;
        }
        if upgrading {
            write_meta(&meta, false)?;
            journal
                .db
                .flush()
                .map_err(JournalError::storage("flushing after an upgrade"))?;
            tracing::info!(dir = %dir.display(), from = format, to = JOURNAL_FORMAT_VERSION, "upgraded the journal's format (an identity file; the commit record kept in two copies written one after the other)");
        }
        let report = OpenReport {
            created: false,
            truncated_tail,
            next_seq: journal.next_seq,
            committed_through: journal.writer()?.commits.committed_through(),
            upgraded_from: upgrading.then_some(if legacy {
                JOURNAL_FORMAT_VERSION_LEGACY
            } else {
                format
            }),
            retired_through,
            recovered_commit_copies: recovered_copies(&commits),
            lost_snapshot,
        };
        Ok((journal, report))
    }

    /// A new, empty journal in `dir` (which holds no sled files). With `retired`, it starts
    /// after the records that entry retires (a repair rebuilding a journal with retention).
    pub(crate) fn create(
        dir: &Path,
        opts: JournalOptions,
        retired: Option<commit::CommitEntry>,
    ) -> Result<(Journal, OpenReport), JournalError> {
        identity::write(
            dir,
            JOURNAL_FORMAT_VERSION,
            identity::Stage::Creating,
            identity::Witness::default(),
        )?;
        let db = open_sled(
            dir,
            &inspect::sled_config(dir, &opts, opts.segment_bytes, StoreMode::Write),
        )?;
        make_private(dir).map_err(|source| JournalError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let tree = |name: &'static str| {
            db.open_tree(name)
                .map_err(JournalError::storage("opening a tree"))
        };
        let chunks = Chunks::load(&db)?;
        let snapshots = tree(TREE_SNAPSHOTS)?;
        write_meta(&tree(TREE_META)?, true)?;
        db.flush()
            .map_err(JournalError::storage("flushing a new journal"))?;
        commit::replace(dir, retired, &[])?;
        let witnessed = retired.map_or(0, |r| r.last_seq);
        identity::write(
            dir,
            JOURNAL_FORMAT_VERSION,
            identity::Stage::Created,
            identity::Witness::committed(witnessed),
        )?;
        let trusted = commit::Loaded {
            retired,
            ..commit::Loaded::default()
        };
        let retired_through = trusted.retired_through();
        let blob_sync = durable::BlobSync::for_durability(dir, opts.durability)?;
        let journal = Journal {
            dir: dir.to_path_buf(),
            db,
            chunks,
            snapshots: Some(snapshots),
            opts,
            next_seq: retired_through + 1,
            encode_buf: Vec::new(),
            writer: Some(Writer {
                blob_sync,
                commits: commit::CommitLog::open_for_append(dir, &trusted, &[])?,
                pending: commit::Digest::default(),
                pending_dirty: false,
            }),
            commit_record: trusted,
            commit_problem: None,
            legacy: false,
            retired_through,
        };
        let report = OpenReport {
            created: true,
            truncated_tail: None,
            next_seq: retired_through + 1,
            committed_through: retired_through,
            upgraded_from: None,
            retired_through,
            recovered_commit_copies: Vec::new(),
            lost_snapshot: None,
        };
        Ok((journal, report))
    }

    fn writer(&self) -> Result<&Writer, JournalError> {
        self.writer.as_ref().ok_or_else(|| JournalError::ReadOnly {
            dir: self.dir.clone(),
        })
    }

    fn writer_mut(&mut self) -> Result<&mut Writer, JournalError> {
        self.writer.as_mut().ok_or_else(|| JournalError::ReadOnly {
            dir: self.dir.clone(),
        })
    }

    /// Whether the journal was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    /// The snapshot entries, oldest first (none when a read-only journal has no tree).
    /// The seq of the newest engine snapshot stored, whether or not it passes its checks.
    fn newest_snapshot_seq(&self) -> Result<Option<u64>, JournalError> {
        newest_key(self.snapshots.as_ref())
    }

    fn snapshot_entries(
        &self,
    ) -> impl DoubleEndedIterator<Item = sled::Result<(sled::IVec, sled::IVec)>> {
        self.snapshots.iter().flat_map(sled::Tree::iter)
    }

    fn meta_tree(&self) -> Result<sled::Tree, JournalError> {
        self.db
            .open_tree(TREE_META)
            .map_err(JournalError::storage("opening a tree"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The seq the next appended record will get (1 for an empty journal).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The seq of the last record, `None` when empty.
    pub fn last_seq(&self) -> Option<u64> {
        (self.next_seq > 1).then(|| self.next_seq - 1)
    }

    /// Records `1..=retired_through()` were retired by retention (0: none); readers start after.
    pub fn retired_through(&self) -> u64 {
        self.retired_through
    }

    /// The first record the journal still holds (`retired_through() + 1`).
    pub fn first_kept_seq(&self) -> u64 {
        self.retired_through + 1
    }

    /// Refuses to read retired records.
    fn check_kept(&self, from_seq: u64) -> Result<(), JournalError> {
        if self.retired_through > 0 && from_seq <= self.retired_through {
            return Err(JournalError::Retired {
                from_seq: from_seq.max(1),
                retired_through: self.retired_through,
            });
        }
        Ok(())
    }

    /// Appends `entries` as consecutive records and returns their seqs.
    ///
    /// *Guarantees:* all-or-nothing per sled value; with [`Durability::Flush`] the records are on
    /// disk when this returns. One flush however many values the entries need. An empty slice
    /// returns the empty range `next_seq..=next_seq - 1` and writes nothing.
    /// *Errors:* [`JournalError::RecordTooLarge`] (nothing written), storage errors.
    pub fn append_batch(
        &mut self,
        entries: &[(Timestamp, &[u8])],
    ) -> Result<RangeInclusive<u64>, JournalError> {
        let first_seq = self.next_seq;
        if let Some((_, p)) = entries
            .iter()
            .find(|(_, p)| p.len() > self.opts.record_bytes_max)
        {
            return Err(JournalError::RecordTooLarge {
                bytes: p.len(),
                max: self.opts.record_bytes_max,
            });
        }
        self.writer()?;
        if entries.is_empty() {
            #[allow(clippy::reversed_empty_ranges)]
            return Ok(first_seq..=first_seq - 1);
        }
        // What a failed append stored is committed before anything more is written, so a crash
        // leaves at most one append beyond the commit record (the rule `inspect` holds it to).
        let writer = self.writer()?;
        if self.opts.durability == Durability::Flush
            && writer.pending_dirty
            && first_seq - 1 > writer.commits.committed_through()
        {
            self.flush()?;
        }
        match self
            .write_values(entries)
            .and_then(|()| self.flush_per_durability())
        {
            Ok(()) => {
                let last_seq = first_seq + entries.len() as u64 - 1;
                assert_eq!(self.next_seq, last_seq + 1, "appends must stay dense");
                Ok(first_seq..=last_seq)
            }
            Err(e) => {
                // Some values may be stored; learn where the journal really ends.
                if let Some(w) = self.writer.as_mut() {
                    w.pending_dirty = true;
                }
                if let Ok(next) = self.read_next_seq() {
                    self.next_seq = next;
                }
                Err(e)
            }
        }
    }

    /// Appends one record; prefer [`Journal::append_batch`] (one flush per call).
    pub fn append(&mut self, at: Timestamp, payload: &[u8]) -> Result<u64, JournalError> {
        self.append_batch(&[(at, payload)]).map(|r| *r.start())
    }

    /// Makes everything appended so far durable (useful with [`Durability::Buffered`]).
    ///
    /// Blob files sled wrote are fsynced before sled's log, so a durable pointer never
    /// points at lost bytes (see `durable.rs`): by sled as it writes each with
    /// [`Durability::Flush`], by a scan of `blobs/` here with [`Durability::Buffered`].
    pub fn flush(&mut self) -> Result<(), JournalError> {
        if let Some(blob_sync) = &mut self.writer_mut()?.blob_sync {
            blob_sync.sync_new().map_err(|e| JournalError::Storage {
                op: "syncing blob files",
                source: e.into(),
            })?;
        }
        self.db.flush().map_err(JournalError::storage("flushing"))?;
        self.commit_durable()
    }

    /// Makes everything appended durable ([`Journal::flush`]), then records in the identity
    /// file how far the commit record reaches: a later open refuses a commit record cut back
    /// below it. Call it on a clean close and now and then (it costs two fsyncs and a rename).
    pub fn seal(&mut self) -> Result<(), JournalError> {
        self.flush()?;
        let witness = identity::Witness {
            committed_through: self.writer()?.commits.committed_through(),
            snapshot_through: self.newest_snapshot_seq()?.unwrap_or(0),
        };
        identity::write(
            &self.dir,
            JOURNAL_FORMAT_VERSION,
            identity::Stage::Created,
            witness,
        )
    }

    /// Writes the commit entry for the records sled has just made durable.
    fn commit_durable(&mut self) -> Result<(), JournalError> {
        let last = self.next_seq - 1;
        let Some(writer) = self.writer.as_mut() else {
            return Err(JournalError::ReadOnly {
                dir: self.dir.clone(),
            });
        };
        let committed = writer.commits.committed_through();
        if last <= committed {
            return Ok(());
        }
        let digest = if writer.pending_dirty {
            commit::digest_range(&self.chunks, committed + 1, last).map_err(|damage| {
                JournalError::RecordsDamaged {
                    first: committed + 1,
                    last,
                    reason: format!(
                        "{damage} ({})",
                        inspect::damaged_file(&self.dir, damage.blob.as_deref())
                    ),
                }
            })?
        } else {
            std::mem::take(&mut writer.pending).finish()
        };
        writer.commits.commit(committed + 1, last, digest)?;
        writer.pending = commit::Digest::default();
        writer.pending_dirty = false;
        Ok(())
    }

    fn flush_per_durability(&mut self) -> Result<(), JournalError> {
        match self.opts.durability {
            Durability::Flush => self.flush(),
            Durability::Buffered => Ok(()),
        }
    }

    fn write_values(&mut self, entries: &[(Timestamp, &[u8])]) -> Result<(), JournalError> {
        let mut rest = entries;
        while !rest.is_empty() {
            let first_seq = self.next_seq;
            let mut buf = std::mem::take(&mut self.encode_buf);
            let mut enc = BatchEncoder::begin(&mut buf, FORMAT_VERSION, first_seq);
            let mut taken = 0;
            for (at, payload) in rest {
                let framed = batch::RECORD_HEADER_BYTES + payload.len();
                let full = taken == self.opts.batch_records_max
                    || (taken > 0 && enc.bytes() + framed > self.opts.batch_bytes_max);
                if full {
                    break;
                }
                enc.push(*at, payload);
                taken += 1;
            }
            let count = enc.finish(BatchFlags {
                append_end: taken == rest.len(),
                buffered: self.opts.durability == Durability::Buffered,
            });
            debug_assert!(
                BatchView::parse(first_seq, &buf).is_ok_and(|v| v.records().all(|r| r.is_ok())),
                "a batch must decode as it was encoded"
            );
            let stored = self.chunks.insert_new(first_seq, &buf);
            if stored.is_ok()
                && let Some(w) = self.writer.as_mut()
            {
                w.pending.update(&buf);
            }
            self.encode_buf = buf;
            stored?;
            self.next_seq += u64::from(count);
            rest = &rest[taken..];
        }
        Ok(())
    }

    /// Owned records from `from_seq` on; see [`Records`] for the guarantees.
    /// *Errors:* [`JournalError::Retired`] (yielded first) if `from_seq` was retired.
    pub fn records(&self, from_seq: u64) -> Records<'_> {
        match self.check_kept(from_seq) {
            Ok(()) => Records::new(&self.chunks, from_seq),
            Err(e) => Records::failed(e),
        }
    }

    /// Replays records from `from_seq` on, borrowing each payload (no allocation per record).
    /// Return [`ControlFlow::Break`] to stop early. Returns how many records were visited.
    ///
    /// *Errors:* [`JournalError::Corrupt`] naming the first bad seq (or the first missing
    /// one); records before it have been visited, none after. [`JournalError::Retired`] if
    /// `from_seq` was retired (nothing visited).
    pub fn for_each_record(
        &self,
        from_seq: u64,
        visit: impl FnMut(RecordRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64, JournalError> {
        self.check_kept(from_seq)?;
        read::for_each(&self.chunks, from_seq, visit)
    }

    /// Stores `state` as of `through_seq`, keeps only the newest
    /// [`JournalOptions::snapshots_kept`] and, with [`JournalOptions::retire_records`], retires
    /// the records the oldest kept one covers (see [`Journal::retire`]).
    ///
    /// *Errors:* [`JournalError::SnapshotBeyondEnd`] if `through_seq` is 0 or after the last
    /// record, or before the first kept one; storage errors. Durable per the journal's
    /// [`Durability`] (always durable when it retired records).
    pub fn write_snapshot(
        &mut self,
        through_seq: u64,
        at: Timestamp,
        state: &[u8],
    ) -> Result<(), JournalError> {
        let last_seq = self.last_seq().unwrap_or(0);
        if through_seq == 0 || through_seq > last_seq || through_seq < self.retired_through {
            return Err(JournalError::SnapshotBeyondEnd {
                through_seq,
                last_seq,
            });
        }
        self.writer()?;
        let value = snapshot::encode(through_seq, at, state);
        debug_assert!(snapshot::decode(through_seq, &value).is_ok());
        let snapshots = self
            .snapshots
            .as_ref()
            .expect("a writable journal has the tree");
        snapshots
            .insert(seq_key(through_seq), value)
            .map_err(JournalError::storage("storing a snapshot"))?;
        let keys: Vec<sled::IVec> = snapshots
            .iter()
            .keys()
            .collect::<Result<_, _>>()
            .map_err(JournalError::storage("listing snapshots"))?;
        let excess = keys.len().saturating_sub(self.opts.snapshots_kept);
        for key in &keys[..excess] {
            snapshots
                .remove(key)
                .map_err(JournalError::storage("removing an old snapshot"))?;
        }
        if self.retire()?.is_none() {
            self.flush_per_durability()?;
        }
        Ok(())
    }

    /// The newest snapshot that passes its checks and lies within the journal.
    ///
    /// *Guarantees:* a newer snapshot that fails is listed in [`Snapshot::skipped`] (and logged).
    /// *Errors:* [`JournalError::CorruptSnapshot`] naming the newest snapshot when none is
    /// usable; the caller may then replay from seq 1. `Ok(None)` when there is no snapshot.
    pub fn latest_snapshot(&self) -> Result<Option<Snapshot>, JournalError> {
        let last_seq = self.last_seq().unwrap_or(0);
        let mut skipped: Vec<SnapshotProblem> = Vec::new();
        for entry in self.snapshot_entries().rev().take(SNAPSHOTS_KEPT_LIMIT + 1) {
            let (key, value) = entry.map_err(JournalError::storage("reading a snapshot"))?;
            let seq = key_seq(&key, last_seq)?;
            let problem = match snapshot::decode(seq, &value) {
                Ok(_) if seq > last_seq => {
                    format!("snapshot is beyond the journal's last seq {last_seq}")
                }
                Ok(_) if seq < self.retired_through => format!(
                    "snapshot is before the first kept record {} (records 1..{} were retired)",
                    self.retired_through + 1,
                    self.retired_through
                ),
                Ok((at, state_version, state)) => {
                    for p in &skipped {
                        tracing::warn!(through_seq = p.through_seq, reason = %p.reason, "skipping unusable snapshot");
                    }
                    return Ok(Some(Snapshot {
                        through_seq: seq,
                        state_version,
                        at,
                        state: state.to_vec(),
                        skipped,
                    }));
                }
                Err(e) => e.to_string(),
            };
            skipped.push(SnapshotProblem {
                through_seq: seq,
                reason: problem,
            });
        }
        match skipped.into_iter().next() {
            None => Ok(None),
            Some(newest) => Err(JournalError::CorruptSnapshot {
                through_seq: newest.through_seq,
                reason: newest.reason,
            }),
        }
    }

    /// Counts and sizes. Reads every batch header (not the records).
    pub fn stats(&self) -> Result<JournalStats, JournalError> {
        let mut stats = JournalStats {
            records: 0,
            batches: 0,
            first_seq: None,
            last_seq: None,
            payload_bytes: 0,
            disk_bytes: 0,
            disk_allocated_bytes: 0,
            snapshots: Vec::new(),
            retired_through: self.retired_through,
        };
        let mut walk = read::BatchWalk::new(&self.chunks, self.first_kept_seq())?;
        while let Some(value) = walk.next_batch() {
            let value = value?;
            let view = BatchView::parse(header_first_seq(&value), &value)?;
            stats.first_seq.get_or_insert(view.first_seq);
            stats.last_seq = Some(view.last_seq());
            stats.records += u64::from(view.count);
            stats.batches += 1;
            stats.payload_bytes += view.payload_bytes();
        }
        for entry in self.snapshot_entries() {
            let (key, value) = entry.map_err(JournalError::storage("reading a snapshot"))?;
            stats
                .snapshots
                .push((key_seq(&key, 0)?, value.len() as u64));
        }
        let (len, allocated) = dir_bytes(&self.dir).map_err(|e| JournalError::Storage {
            op: "sizing the directory",
            source: e.into(),
        })?;
        stats.disk_bytes = len;
        stats.disk_allocated_bytes = allocated;
        Ok(stats)
    }

    /// Checks every batch header, record checksum and the continuity of seqs, then every
    /// snapshot. Unlike readers it carries on after a problem to list them all.
    pub fn verify(&self) -> VerifyReport {
        let mut report = VerifyReport {
            retired_through: self.retired_through,
            ..VerifyReport::default()
        };
        let first_kept = self.first_kept_seq();
        let mut expected: Option<u64> = Some(first_kept);
        let problem = |report: &mut VerifyReport, seq: u64, reason: String| {
            if report.problems.len() < VERIFY_PROBLEMS_MAX {
                report.problems.push(VerifyProblem { seq, reason });
            }
        };
        let batches = match self.chunks.iter_from(first_kept) {
            Ok(iter) => iter,
            Err(e) => {
                problem(&mut report, first_kept, e.to_string());
                return report;
            }
        };
        for entry in batches {
            let near = expected.unwrap_or(0);
            let (key, value) = match entry {
                Ok(kv) => kv,
                Err(e) => {
                    problem(&mut report, near, format!("storage error: {e}"));
                    break;
                }
            };
            report.batches_checked += 1;
            let view = match key_seq(&key, near).and_then(|seq| BatchView::parse(seq, &value)) {
                Ok(view) => view,
                Err(e) => {
                    let seq = key_seq(&key, near).unwrap_or(near);
                    problem(&mut report, seq, e.to_string());
                    expected = None; // unknown length: resume continuity at the next batch
                    continue;
                }
            };
            match expected {
                Some(exp) if view.first_seq > exp => problem(
                    &mut report,
                    exp,
                    format!("records {exp}..{} are missing", view.first_seq),
                ),
                Some(exp) if view.first_seq < exp => problem(
                    &mut report,
                    view.first_seq,
                    format!("batch overlaps records before {exp}"),
                ),
                _ => {}
            }
            for record in view.records() {
                match record {
                    Ok(_) => report.records_checked += 1,
                    Err(e) => {
                        let seq = match &e {
                            JournalError::Corrupt { seq, .. } => *seq,
                            _ => view.first_seq,
                        };
                        problem(&mut report, seq, e.to_string());
                        break;
                    }
                }
            }
            expected = Some(view.last_seq() + 1);
            report.last_seq = Some(view.last_seq());
        }
        self.verify_commits(&mut report);
        for entry in self.snapshot_entries() {
            match entry {
                Ok((key, value)) => {
                    let seq = key_seq(&key, 0).unwrap_or(0);
                    if let Err(e) = snapshot::decode(seq, &value) {
                        report.snapshot_problems.push(SnapshotProblem {
                            through_seq: seq,
                            reason: e.to_string(),
                        });
                    }
                }
                Err(e) => {
                    // sled's iterator yields the same error forever (a blob file it refers to
                    // is gone): one problem, then stop.
                    report.snapshot_problems.push(SnapshotProblem {
                        through_seq: 0,
                        reason: e.to_string(),
                    });
                    break;
                }
            }
        }
        report
    }

    /// Checks every commit entry against the store: the record trusted at open, or for a
    /// writable journal the copy it keeps writing.
    fn verify_commits(&self, report: &mut VerifyReport) {
        let stored_last = report.last_seq.unwrap_or(0);
        if let Some(reason) = &self.commit_problem {
            report.problems.push(VerifyProblem {
                seq: 0,
                reason: reason.clone(),
            });
            return;
        }
        let loaded = match &self.writer {
            None if self.commit_record == commit::Loaded::default()
                && stored_last >= self.first_kept_seq()
                && !self.legacy =>
            {
                Err(format!(
                    "records {}..{stored_last} have no commit record",
                    self.first_kept_seq()
                ))
            }
            None => Ok(self.commit_record.clone()),
            Some(_) => match commit::load_copy(&self.dir.join(COMMITS_FILE)) {
                commit::CopyState::Read(l) => Ok(l),
                other => Err(format!("{COMMITS_FILE} {}", other.describe())),
            },
        };
        let loaded = match loaded {
            Ok(l) => l,
            Err(reason) => {
                report.problems.push(VerifyProblem { seq: 0, reason });
                return;
            }
        };
        report.committed_through = loaded.committed_through();
        let mut problems = Vec::new();
        for e in &loaded.entries {
            if problems.len() >= VERIFY_PROBLEMS_MAX {
                break;
            }
            if e.last_seq > stored_last {
                let first = e.first_seq.max(stored_last + 1);
                problems.push(VerifyProblem {
                    seq: first,
                    reason: format!(
                        "records {first}..{} are missing: committed but not in the store",
                        e.last_seq
                    ),
                });
                continue;
            }
            match commit::digest_range(&self.chunks, e.first_seq, e.last_seq) {
                Ok(d) if d == e.digest => {}
                Ok(_) => problems.push(VerifyProblem {
                    seq: e.first_seq,
                    reason: format!(
                        "records {}..{} differ from what the commit record says was written",
                        e.first_seq, e.last_seq
                    ),
                }),
                Err(damage) => problems.push(VerifyProblem {
                    seq: e.first_seq,
                    reason: format!(
                        "committed records {}..{} are damaged: {damage} ({})",
                        e.first_seq,
                        e.last_seq,
                        inspect::damaged_file(&self.dir, damage.blob.as_deref())
                    ),
                }),
            }
        }
        for p in problems {
            if report.problems.len() < VERIFY_PROBLEMS_MAX {
                report.problems.push(p);
            }
        }
    }

    /// Removes the last batch if it fails its checks (a torn write) and lies beyond
    /// `committed` (an acknowledged batch is never dropped: that is an error).
    fn truncate_torn_tail(
        &mut self,
        committed: u64,
    ) -> Result<Option<TruncatedTail>, JournalError> {
        let Some((tree, seq, value)) = self.chunks.last_batch()? else {
            return Ok(None);
        };
        let checked = BatchView::parse(seq, &value)
            .and_then(|view| view.records().try_for_each(|r| r.map(|_| ())));
        match checked {
            Ok(()) => Ok(None),
            Err(JournalError::Corrupt { reason, .. }) if seq <= committed => {
                Err(JournalError::RecordsDamaged {
                    first: seq,
                    last: committed,
                    reason,
                })
            }
            Err(JournalError::Corrupt { reason, .. }) => {
                tracing::warn!(from_seq = seq, bytes = value.len(), %reason, "removing torn last batch of the journal");
                self.chunks.remove_batch(&tree, seq)?;
                Ok(Some(TruncatedTail {
                    from_seq: seq,
                    bytes: value.len(),
                    reason,
                }))
            }
            Err(other) => Err(other),
        }
    }

    fn read_next_seq(&self) -> Result<u64, JournalError> {
        match self.chunks.last_batch()? {
            None => Ok(1),
            Some((_, seq, value)) => Ok(BatchView::parse(seq, &value)?.last_seq() + 1),
        }
    }
}

/// Refuses a directory without sled's files whose identity says a journal was created there
/// (or cannot be read): its records are gone, and creating a journal over it would hide that.
fn refuse_fresh_if_created(dir: &Path, identity: identity::Found) -> Result<(), JournalError> {
    match identity {
        identity::Found::Damaged(e) => Err(e),
        identity::Found::Read {
            stage: identity::Stage::Created,
            ..
        } => Err(JournalError::CreatedButGone {
            dir: dir.to_path_buf(),
            missing: format!(
                "sled's files {} and {} are missing",
                inspect::CONF_FILE,
                inspect::DB_FILE
            ),
        }),
        _ => Ok(()),
    }
}

/// The newest key of the engine snapshots' tree, as a seq.
fn newest_key(tree: Option<&sled::Tree>) -> Result<Option<u64>, JournalError> {
    let Some(tree) = tree else {
        return Ok(None);
    };
    match tree.last() {
        Ok(Some((key, _))) => key_seq(&key, 0).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(JournalError::storage("reading the newest snapshot")(e)),
    }
}

/// A new journal may be created in `dir` (it holds no sled files): refused when a commit
/// record there vouches for records, which are then lost.
fn check_fresh(dir: &Path) -> Result<(), JournalError> {
    let copies = commit::load_copies(dir);
    let commits = commit::reconcile(dir, &copies, JOURNAL_FORMAT_VERSION)
        .or_else(|_| commit::reconcile(dir, &copies, JOURNAL_FORMAT_VERSION_NO_MIRROR))?;
    let committed = commits.committed_through();
    if committed > 0 {
        return Err(JournalError::RecordsMissing {
            first: if committed > commits.retired_through() {
                commits.retired_through() + 1
            } else {
                1
            },
            last: committed,
            stored_last: 0,
            file: DamagedFile {
                path: dir.join(DB_FILE),
                why: Some("sled's data file is gone".into()),
            },
        });
    }
    Ok(())
}

fn recovered_copies(commits: &commit::Reconciled) -> Vec<String> {
    commits
        .recovered_copies()
        .map(|c| format!("{} {}", c.file, c.why))
        .collect()
}

fn header_first_seq(value: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&value[4..12]);
    u64::from_le_bytes(a)
}

/// Runs `f`, turning a sled panic into [`JournalError::StorePanicked`]. The panic is told in
/// one line (the error); its backtrace only at debug level.
fn contain_panics<T>(
    dir: &Path,
    f: impl FnOnce() -> Result<T, JournalError>,
) -> Result<T, JournalError> {
    quiet_panics::install();
    let result = quiet_panics::QUIET.with(|q| {
        q.set(true);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        q.set(false);
        r
    });
    result.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(JournalError::StorePanicked {
            dir: dir.to_path_buf(),
            files: sled_log_files(dir),
            message,
        })
    })
}

/// The files sled recovers its pages from, as found in `dir`: its log `db` and its snapshots
/// `snap.*`, sorted.
fn sled_log_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name == "db" || name.starts_with("snap."))
        .collect();
    files.sort();
    files
}

/// A panic hook that stays silent (but for a debug line) while the journal contains a sled
/// panic on this thread, and leaves every other panic to the hook installed before it.
mod quiet_panics {
    use std::cell::Cell;
    use std::sync::Once;

    thread_local! {
        pub(super) static QUIET: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if QUIET.with(Cell::get) {
                    tracing::debug!(
                        backtrace = %std::backtrace::Backtrace::force_capture(),
                        "sled panicked (contained): {info}"
                    );
                } else {
                    previous(info);
                }
            }));
        });
    }
}

fn clamp_options(mut opts: JournalOptions) -> JournalOptions {
    opts.snapshots_kept = opts.snapshots_kept.clamp(1, SNAPSHOTS_KEPT_LIMIT);
    opts.batch_records_max = opts
        .batch_records_max
        .clamp(1, batch::BATCH_RECORDS_LIMIT as usize);
    opts.batch_bytes_max = opts.batch_bytes_max.clamp(1, batch::BATCH_BYTES_LIMIT / 2);
    opts.record_bytes_max = opts
        .record_bytes_max
        .min(batch::RECORD_BYTES_LIMIT)
        .min(batch::BATCH_BYTES_LIMIT / 2 - batch::RECORD_HEADER_BYTES);
    opts
}

/// Journal directory mode; files in it get [`PRIVATE_FILE_MODE`], subdirectories this.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Narrows the directory, its files and subdirectories (sled's `blobs/`) to the private modes:
/// inputs hold cluster data. Never widens a narrower mode.
fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let narrow = |path: &Path, md: &std::fs::Metadata, mode: u32| {
        let current = md.permissions().mode() & 0o777;
        if current & !mode != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(current & mode))
        } else {
            Ok(())
        }
    };
    let mut dirs = vec![(dir.to_path_buf(), 0u32)];
    while let Some((d, depth)) = dirs.pop() {
        narrow(&d, &std::fs::metadata(&d)?, PRIVATE_DIR_MODE)?;
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let md = match entry.metadata() {
                Ok(md) => md,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if md.is_dir() && depth < 2 {
                dirs.push((entry.path(), depth + 1));
            } else if md.is_file() {
                match narrow(&entry.path(), &md, PRIVATE_FILE_MODE) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    other => other?,
                }
            }
        }
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> Result<(), JournalError> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return make_private(dir).map_err(|source| JournalError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        });
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| JournalError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })
}

/// How long `open` waits for a lock that may be held by a `Journal` being dropped in this
/// process (sled's background threads release it shortly after the drop).
const LOCK_WAIT_MS_MAX: u64 = 1000;
const LOCK_RETRY_MS: u64 = 20;

fn open_sled(dir: &Path, config: &sled::Config) -> Result<sled::Db, JournalError> {
    let mut waited_ms = 0;
    loop {
        match config.open().map_err(|e| inspect::store_error(dir, e)) {
            Err(JournalError::Locked { .. }) if waited_ms < LOCK_WAIT_MS_MAX => {
                std::thread::sleep(std::time::Duration::from_millis(LOCK_RETRY_MS));
                waited_ms += LOCK_RETRY_MS;
            }
            other => return other,
        }
    }
}

/// The journal format version stored in `meta`, `None` when there is none.
fn read_meta_version(meta: &sled::Tree) -> Result<Option<u16>, JournalError> {
    let stored = meta
        .get(META_FORMAT_VERSION)
        .map_err(JournalError::storage("reading meta"))?;
    stored
        .map(|v| {
            <[u8; 2]>::try_from(&v[..])
                .map(u16::from_le_bytes)
                .map_err(|_| JournalError::Corrupt {
                    seq: 0,
                    reason: format!(
                        "journal meta format_version is {} bytes, expected 2",
                        v.len()
                    ),
                })
        })
        .transpose()
}

fn write_meta(meta: &sled::Tree, created: bool) -> Result<(), JournalError> {
    meta.insert(META_FORMAT_VERSION, &JOURNAL_FORMAT_VERSION.to_le_bytes())
        .map_err(JournalError::storage("writing meta"))?;
    if created {
        meta.insert(
            META_CREATED_BY,
            concat!("engine ", env!("CARGO_PKG_VERSION")),
        )
        .map_err(JournalError::storage("writing meta"))?;
    }
    Ok(())
}

/// `(sum of file lengths, sum of allocated blocks)` under `dir`, two levels deep (sled keeps
/// `blobs/` one level down).
fn dir_bytes(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut len = 0;
    let mut allocated = 0;
    let mut dirs = vec![(dir.to_path_buf(), 0u32)];
    while let Some((d, depth)) = dirs.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let md = entry.metadata()?;
            if md.is_dir() && depth < 2 {
                dirs.push((entry.path(), depth + 1));
            } else if md.is_file() {
                len += md.len();
                allocated += md.blocks() * 512;
            }
        }
    }
    Ok((len, allocated))
}
