//! Errors of the journal: I/O failures and corrupt data, each naming where it happened.

use std::fmt;
use std::path::PathBuf;

/// The file of the store where damage lies, and what is wrong with it when that is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedFile {
    pub path: PathBuf,
    pub why: Option<String>,
}

impl fmt::Display for DamagedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in {}", self.path.display())?;
        match &self.why {
            Some(why) => write!(f, ": {why}"),
            None => Ok(()),
        }
    }
}

/// Why a journal operation failed.
///
/// *Errors that name a `seq`* point at the first record that cannot be trusted; nothing at or
/// after it is returned by readers. Corruption is never skipped silently.
#[derive(Debug)]
pub enum JournalError {
    /// Another process (or another `Journal` in this process) holds the journal open.
    Locked { dir: PathBuf },
    /// The journal directory could not be created.
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// The underlying sled database failed (`op` says what the journal was doing).
    Storage {
        op: &'static str,
        source: sled::Error,
    },
    /// Data written by a format this build does not understand. `seq` is `None` when the
    /// journal's meta record (not a batch) carries the version.
    UnknownFormat {
        found: u16,
        supported: u16,
        seq: Option<u64>,
    },
    /// A record (or the batch holding it, or a gap before it) failed its checks.
    Corrupt { seq: u64, reason: String },
    /// A snapshot failed its checks and no older valid snapshot exists.
    CorruptSnapshot { through_seq: u64, reason: String },
    /// A snapshot holds engine state in a layout this build does not read (another release
    /// wrote it); recovery passes it over.
    OtherStateVersion {
        through_seq: u64,
        found: u16,
        supported: u16,
    },
    /// A payload larger than `JournalOptions::record_bytes_max` was offered.
    RecordTooLarge { bytes: usize, max: usize },
    /// A snapshot was offered for records the journal does not hold.
    SnapshotBeyondEnd { through_seq: u64, last_seq: u64 },
    /// The commit record (`commits` file) could not be read or written.
    CommitIo {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An entry of the commit record before its last one fails its checks.
    CommitCorrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The journal holds records but has no commit record to account for them.
    CommitMissing { dir: PathBuf, last_seq: u64 },
    /// Committed records `first..=last` are not in the store (sled dropped them on recovery);
    /// `file` is where the damage that lost them lies.
    RecordsMissing {
        first: u64,
        last: u64,
        stored_last: u64,
        file: DamagedFile,
    },
    /// Committed records `first..=last` are stored but differ from what was committed.
    RecordsDamaged {
        first: u64,
        last: u64,
        reason: String,
    },
    /// sled panicked while opening the journal (damaged files it does not check): it reads its
    /// log and snapshots (`files`, those present: `db`, `snap.*`) and cannot tell which is
    /// damaged, nor whether a snapshot it needs is missing.
    StorePanicked {
        dir: PathBuf,
        files: Vec<String>,
        message: String,
    },
    /// Records from `from_seq` were asked for but `1..=retired_through` were retired by
    /// retention (not damage: the journal keeps only what its snapshots need).
    Retired { from_seq: u64, retired_through: u64 },
    /// sled's `conf` file is missing, empty or fails its checks (sled would silently rewrite
    /// it with whatever settings it was opened with).
    ConfDamaged { path: PathBuf, reason: String },
    /// A file of the journal cannot be read (its mode, its owner, an I/O error).
    FileUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// sled's newest `snap.*` file fails its checksum.
    StoreSnapshotDamaged { path: PathBuf, reason: String },
    /// sled found damaged data in one of its files while opening the journal.
    StoreDamaged { path: PathBuf, reason: String },
    /// A write was asked of a journal opened read-only (for inspection).
    ReadOnly { dir: PathBuf },
    /// The directory holds no journal (a read-only open never creates one).
    NoJournal { dir: PathBuf },
    /// Records `committed + 1..=stored_last` are stored but not committed, written by more
    /// appends than a crash leaves uncommitted: the commit record was cut back.
    UncommittedAppends {
        committed: u64,
        stored_last: u64,
        appends: u64,
    },
    /// Both copies of the commit record vouch for less than the identity file saw them reach
    /// when the journal was last closed cleanly: they were cut back.
    CommitCutBack { witnessed: u64, committed: u64 },
    /// A start cannot write to the journal (its mode, its owner, a full disk): refused before
    /// anything was written.
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The journal's identity file could not be written.
    IdentityIo {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The journal's identity file fails its checks.
    IdentityDamaged { path: PathBuf, reason: String },
    /// The identity file says a journal was created here, but sled's files are gone.
    CreatedButGone { dir: PathBuf, missing: String },
    /// The journal's creation was cut short (its identity file still says so): nothing was
    /// ever committed; a writable open creates it again.
    CreationCutShort { dir: PathBuf },
    /// A repair would discard records from `first` on and was not allowed to.
    RepairDiscards {
        dir: PathBuf,
        first: u64,
        reason: String,
    },
}

impl JournalError {
    pub(crate) fn storage(op: &'static str) -> impl FnOnce(sled::Error) -> JournalError {
        move |source| JournalError::Storage { op, source }
    }

    /// The blob file sled failed to open or read, when that is what failed.
    pub(crate) fn blob_file(&self) -> Option<&std::path::Path> {
        match self {
            JournalError::Storage {
                source: sled::Error::Io(io),
                ..
            } => io
                .get_ref()
                .and_then(|e| e.downcast_ref::<sled::BlobFileError>())
                .map(sled::BlobFileError::path),
            _ => None,
        }
    }

    /// Whether this is damage to the journal's data (as opposed to a failure to do the job:
    /// a lock held, an I/O error, a full disk). `log` commands exit 1 on damage, 3 otherwise.
    pub fn is_damage(&self) -> bool {
        match self {
            JournalError::Locked { .. }
            | JournalError::CreateDir { .. }
            | JournalError::Storage { .. }
            | JournalError::CommitIo { .. }
            | JournalError::RecordTooLarge { .. }
            | JournalError::Retired { .. }
            | JournalError::SnapshotBeyondEnd { .. }
            | JournalError::OtherStateVersion { .. }
            | JournalError::FileUnreadable { .. }
            | JournalError::ReadOnly { .. }
            | JournalError::IdentityIo { .. }
            | JournalError::NotWritable { .. }
            | JournalError::CreationCutShort { .. }
            | JournalError::NoJournal { .. } => false,
            JournalError::RepairDiscards { .. } => true,
            JournalError::UnknownFormat { .. }
            | JournalError::Corrupt { .. }
            | JournalError::CorruptSnapshot { .. }
            | JournalError::CommitCorrupt { .. }
            | JournalError::CommitMissing { .. }
            | JournalError::RecordsMissing { .. }
            | JournalError::RecordsDamaged { .. }
            | JournalError::StorePanicked { .. }
            | JournalError::ConfDamaged { .. }
            | JournalError::StoreSnapshotDamaged { .. }
            | JournalError::IdentityDamaged { .. }
            | JournalError::UncommittedAppends { .. }
            | JournalError::CommitCutBack { .. }
            | JournalError::CreatedButGone { .. }
            | JournalError::StoreDamaged { .. } => true,
        }
    }
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Locked { dir } => write!(
                f,
                "journal {} is locked by another process (is another lifecycle instance running?)",
                dir.display()
            ),
            JournalError::CreateDir { dir, source } => {
                write!(
                    f,
                    "cannot create journal directory {}: {source}",
                    dir.display()
                )
            }
            JournalError::Storage { op, source } => {
                write!(f, "journal storage failed while {op}: {source}")
            }
            JournalError::UnknownFormat {
                found,
                supported,
                seq,
            } => match seq {
                Some(seq) => write!(
                    f,
                    "journal batch at seq {seq} has format version {found}; this build supports {supported}"
                ),
                None => write!(
                    f,
                    "journal has format version {found}; this build reads formats {} to {supported} (upgrading older ones)",
                    super::JOURNAL_FORMAT_VERSION_LEGACY
                ),
            },
            JournalError::Corrupt { seq, reason } => {
                write!(f, "journal corrupt at seq {seq}: {reason}")
            }
            JournalError::CorruptSnapshot {
                through_seq,
                reason,
            } => {
                write!(f, "snapshot through seq {through_seq} is corrupt: {reason}")
            }
            JournalError::OtherStateVersion {
                through_seq,
                found,
                supported,
            } => write!(
                f,
                "snapshot through seq {through_seq} holds engine state version {found}; this \
                 build reads version {supported}"
            ),
            JournalError::RecordTooLarge { bytes, max } => {
                write!(
                    f,
                    "journal record of {bytes} bytes exceeds record_bytes_max {max}"
                )
            }
            JournalError::SnapshotBeyondEnd {
                through_seq,
                last_seq,
            } => write!(
                f,
                "snapshot through seq {through_seq} is beyond the journal's last seq {last_seq}"
            ),
            JournalError::CommitIo { path, source } => {
                write!(f, "journal commit record {}: {source}", path.display())
            }
            JournalError::CommitCorrupt {
                path,
                offset,
                reason,
            } => write!(
                f,
                "journal commit record {} is corrupt at byte {offset}: {reason}",
                path.display()
            ),
            JournalError::CommitMissing { dir, last_seq } => write!(
                f,
                "journal {} holds records 1..{last_seq} but its commit record ({} and {}) is missing: cannot tell whether records were lost",
                dir.display(),
                super::commit::COMMITS_FILE,
                super::commit::COMMITS_MIRROR_FILE
            ),
            JournalError::RecordsMissing {
                first,
                last,
                stored_last,
                file,
            } => write!(
                f,
                "records {first}..{last} are missing: damage at record {first} {file} (the commit record says 1..{last} are committed, the store holds {})",
                if *stored_last == 0 {
                    "none".to_string()
                } else {
                    format!("1..{stored_last}")
                }
            ),
            JournalError::RecordsDamaged {
                first,
                last,
                reason,
            } => write!(f, "committed records {first}..{last} are damaged: {reason}"),
            JournalError::Retired {
                from_seq,
                retired_through,
            } => write!(
                f,
                "record {from_seq} was retired: records 1..{retired_through} were retired (kept from {})",
                retired_through + 1
            ),
            JournalError::StorePanicked {
                dir,
                files,
                message,
            } => write!(
                f,
                "journal {}: sled panicked while reading its log and snapshots ({}): one of them is damaged, or a snapshot it needs is missing: {message}",
                dir.display(),
                files.join(", ")
            ),
            JournalError::ConfDamaged { path, reason } => {
                write!(f, "journal settings file {} {reason}", path.display())
            }
            JournalError::FileUnreadable { path, source } => {
                write!(
                    f,
                    "journal file {} cannot be read: {source}",
                    path.display()
                )
            }
            JournalError::StoreSnapshotDamaged { path, reason } => write!(
                f,
                "sled snapshot file {} is damaged: {reason} (sled can rebuild it from its log: see `log repair`)",
                path.display()
            ),
            JournalError::StoreDamaged { path, reason } => {
                write!(f, "journal file {} is damaged: {reason}", path.display())
            }
            JournalError::NoJournal { dir } => write!(f, "{}: no journal here", dir.display()),
            JournalError::UncommittedAppends {
                committed,
                stored_last,
                appends,
            } => write!(
                f,
                "records {}..{stored_last} are stored, but the commit record ({} and {}) vouches only for 1..{committed}: they were written by {appends} appends, and a crash leaves at most one uncommitted, so the commit record was cut back and committed records may be lost (see `lifecycle log repair --dry-run`)",
                committed + 1,
                super::commit::COMMITS_FILE,
                super::commit::COMMITS_MIRROR_FILE
            ),
            JournalError::CommitCutBack {
                witnessed,
                committed,
            } => write!(
                f,
                "the commit record ({} and {}) vouches for records 1..{committed}, but when the journal was last closed it reached 1..{witnessed} (its identity file says so): both copies were cut back, and committed records may be lost (see `lifecycle log repair --dry-run`)",
                super::commit::COMMITS_FILE,
                super::commit::COMMITS_MIRROR_FILE
            ),
            JournalError::NotWritable { path, source } => write!(
                f,
                "journal {} cannot be written by this process: {source} (its owner, its mode or a full disk; nothing was written)",
                path.display()
            ),
            JournalError::IdentityIo { path, source } => {
                write!(f, "journal identity file {}: {source}", path.display())
            }
            JournalError::IdentityDamaged { path, reason } => {
                write!(f, "journal identity file {} {reason}", path.display())
            }
            JournalError::CreatedButGone { dir, missing } => write!(
                f,
                "journal {}: its identity file says a journal was created here, but {missing}: its records are gone (restore the directory from a backup, or move it aside to start a new journal)",
                dir.display()
            ),
            JournalError::CreationCutShort { dir } => write!(
                f,
                "journal {}: its creation was cut short (a kill or crash while it was created); it holds no record, and the next start creates it again",
                dir.display()
            ),
            JournalError::RepairDiscards { dir, first, reason } => write!(
                f,
                "repairing journal {} would discard records from {first} on ({reason}): run `lifecycle log repair --dry-run` to see what, then `--truncate` to do it",
                dir.display()
            ),
            JournalError::ReadOnly { dir } => write!(
                f,
                "journal {} is open read-only (for inspection): nothing may be written",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JournalError::CreateDir { source, .. } => Some(source),
            JournalError::Storage { source, .. } => Some(source),
            JournalError::CommitIo { source, .. } => Some(source),
            JournalError::IdentityIo { source, .. } => Some(source),
            JournalError::NotWritable { source, .. } => Some(source),
            JournalError::FileUnreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}
