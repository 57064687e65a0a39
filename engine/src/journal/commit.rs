//! The commit record: an append-only file beside sled that says which records were
//! acknowledged durable, so sled's recovery (which treats any damage as a torn tail and
//! silently drops everything after it) can never make the journal shorter without an error.
//!
//! ```text
//! entry  = tag "LJC1" | first_seq u64 | last_seq u64 | digest u64 | chain u64 | crc u32
//! digest = crc32(stored batch values of first..=last, in order) << 32 | their byte count (mod 2^32)
//! chain  = fnv1a64(previous chain | first_seq | last_seq | digest)
//! crc    = crc32 of the 36 bytes before it                            (integers little-endian)
//! ```
//!
//! One entry per flush that made new records durable, written and fsynced *after* sled's flush.
//! Entries are dense (`first_seq` = previous `last_seq` + 1). A last entry that is short or
//! fails its crc is a torn write of a batch that was never acknowledged: it is ignored (and cut
//! off by the next writable open). A bad entry before the last one is corruption.
//!
//! *Retention* (see `retention.rs`): once records `1..=N` are retired, the file is rewritten
//! (new file, fsync, rename) to start with a retention entry, tag `LJR1`, `first_seq` 1,
//! `last_seq` N, digest 0 and the chain of the entry that ended at N, followed by the entries
//! after N unchanged (their chain still links). Only the first entry may be a retention entry.
//!
//! *Two copies* (journal format 4): the record is kept twice, in `commits` and
//! `commits.mirror`, each written and fsynced before an append is acknowledged, so the loss of
//! either file (deleted, emptied, truncated, damaged) is detected and repaired from the other
//! (see [`reconcile`]). Each copy starts with a header entry (tag `LJH1`, `first_seq` the
//! format, the rest 0): a copy of 0 bytes is damage, never "nothing committed yet". Copies
//! written by format 2 and 3 have no header and no mirror.

use super::JournalError;
use super::batch::BatchView;
use super::chunks::Chunks;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const COMMITS_FILE: &str = "commits";
/// The second copy of the commit record.
pub const COMMITS_MIRROR_FILE: &str = "commits.mirror";
/// The copies, primary first (the order they are written in).
pub const COMMIT_COPIES: [&str; 2] = [COMMITS_FILE, COMMITS_MIRROR_FILE];
pub(crate) const ENTRY_BYTES: usize = 40;
const TAG: [u8; 4] = *b"LJC1";
const TAG_RETIRED: [u8; 4] = *b"LJR1";
const TAG_HEADER: [u8; 4] = *b"LJH1";
/// The format a header names (`first_seq` of the header entry).
const HEADER_FORMAT: u64 = 4;
const CHAIN_START: u64 = 0xcbf2_9ce4_8422_2325;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommitEntry {
    pub first_seq: u64,
    pub last_seq: u64,
    pub digest: u64,
    pub chain: u64,
}

impl CommitEntry {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        self.encode_tagged(TAG)
    }

    fn encode_tagged(&self, tag: [u8; 4]) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        b[0..4].copy_from_slice(&tag);
        b[4..12].copy_from_slice(&self.first_seq.to_le_bytes());
        b[12..20].copy_from_slice(&self.last_seq.to_le_bytes());
        b[20..28].copy_from_slice(&self.digest.to_le_bytes());
        b[28..36].copy_from_slice(&self.chain.to_le_bytes());
        let crc = crc32fast::hash(&b[..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn header() -> [u8; ENTRY_BYTES] {
        CommitEntry {
            first_seq: HEADER_FORMAT,
            last_seq: 0,
            digest: 0,
            chain: 0,
        }
        .encode_tagged(TAG_HEADER)
    }

    /// The entry and its kind.
    fn decode(b: &[u8; ENTRY_BYTES]) -> Result<(CommitEntry, EntryKind), String> {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let crc = u32::from_le_bytes([b[36], b[37], b[38], b[39]]);
        let kind = match [b[0], b[1], b[2], b[3]] {
            TAG => EntryKind::Commit,
            TAG_RETIRED => EntryKind::Retired,
            TAG_HEADER => EntryKind::Header,
            _ => return Err("entry has no LJC1, LJR1 or LJH1 tag".into()),
        };
        if crc32fast::hash(&b[..36]) != crc {
            return Err("entry fails its checksum".into());
        }
        let entry = CommitEntry {
            first_seq: u64_at(4),
            last_seq: u64_at(12),
            digest: u64_at(20),
            chain: u64_at(28),
        };
        Ok((entry, kind))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EntryKind {
    Commit,
    Retired,
    Header,
}

fn chain_next(prev: u64, first_seq: u64, last_seq: u64, digest: u64) -> u64 {
    let mut h = prev;
    for word in [first_seq, last_seq, digest] {
        for byte in word.to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Digest of the stored batch values of one commit entry.
#[derive(Clone, Default)]
pub(crate) struct Digest {
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl Digest {
    pub(crate) fn update(&mut self, value: &[u8]) {
        self.crc.update(value);
        self.bytes += value.len() as u64;
    }

    pub(crate) fn finish(self) -> u64 {
        (u64::from(self.crc.finalize()) << 32) | (self.bytes & 0xffff_ffff)
    }
}

/// Why stored batches do not digest: what is wrong, and the blob file sled could not read
/// when that is what failed (sled's own error names no file).
#[derive(Debug)]
pub(crate) struct RangeDamage {
    pub(crate) reason: String,
    pub(crate) blob: Option<PathBuf>,
}

impl RangeDamage {
    fn unreadable(e: JournalError) -> RangeDamage {
        RangeDamage {
            blob: e.blob_file().map(Path::to_path_buf),
            reason: format!("storage error: {e}"),
        }
    }
}

impl From<String> for RangeDamage {
    fn from(reason: String) -> RangeDamage {
        RangeDamage { reason, blob: None }
    }
}

impl std::fmt::Display for RangeDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Digest of the stored batches holding exactly `first..=last`, or why they do not.
pub(crate) fn digest_range(chunks: &Chunks, first: u64, last: u64) -> Result<u64, RangeDamage> {
    let mut digest = Digest::default();
    let mut expected = first;
    let iter = chunks.iter_from(first).map_err(RangeDamage::unreadable)?;
    for entry in iter {
        if expected > last {
            break;
        }
        let (_, value) = entry.map_err(RangeDamage::unreadable)?;
        let view = BatchView::parse(expected, &value)
            .map_err(|e| RangeDamage::from(format!("at record {expected}: {e}")))?;
        if view.first_seq != expected {
            return Err(format!("records {expected}..{} are missing", view.first_seq).into());
        }
        if let Some(Err(e)) = view.records().find(|r| r.is_err()) {
            return Err(e.to_string().into());
        }
        digest.update(&value);
        expected = view.last_seq() + 1;
    }
    if expected <= last {
        return Err(format!("records {expected}..{last} are missing").into());
    }
    if expected != last + 1 {
        return Err(format!(
            "a stored batch ends at {} but the commit entry at {last}",
            expected - 1
        )
        .into());
    }
    Ok(digest.finish())
}

/// One copy of the commit record as read: its valid entries end at `valid_bytes`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Loaded {
    /// The copy starts with a header entry (format 4).
    pub header: bool,
    /// Commit entries (not the header or a retention entry), in order.
    pub entries: Vec<CommitEntry>,
    /// The retention entry: records `1..=retired.last_seq` were retired.
    pub retired: Option<CommitEntry>,
    pub valid_bytes: u64,
    /// Bytes after the last valid entry (a torn write of an unacknowledged entry).
    pub torn_bytes: u64,
}

impl Loaded {
    pub(crate) fn committed_through(&self) -> u64 {
        self.tip().map_or(0, |e| e.last_seq)
    }

    pub(crate) fn retired_through(&self) -> u64 {
        self.retired.map_or(0, |e| e.last_seq)
    }

    /// The entry the next one chains from: the last commit entry, else the retention entry.
    pub(crate) fn tip(&self) -> Option<CommitEntry> {
        self.entries.last().copied().or(self.retired)
    }

    pub(crate) fn last(&self) -> Option<CommitEntry> {
        self.entries.last().copied()
    }

    /// Whether this copy vouches for `e` (an entry ending where `e` ends, with its chain) or
    /// retired past it.
    fn agrees_with(&self, e: &CommitEntry) -> bool {
        let retired_past = self.retired.is_some_and(|r| {
            r.last_seq > e.last_seq || (r.last_seq == e.last_seq && r.chain == e.chain)
        });
        retired_past
            || self
                .entries
                .iter()
                .any(|x| x.last_seq == e.last_seq && x.chain == e.chain)
    }
}

/// One copy of the commit record, as found on disk.
#[derive(Clone, Debug)]
pub(crate) enum CopyState {
    Absent,
    /// 0 bytes: damage for a format-4 copy (it always holds its header); "nothing committed
    /// yet" for a copy written by format 2 or 3.
    Empty,
    Read(Loaded),
    /// Unreadable or failing its checks (the error names the file and the offset).
    Damaged(std::sync::Arc<JournalError>),
}

impl CopyState {
    pub(crate) fn describe(&self) -> String {
        match self {
            CopyState::Absent => "is missing".into(),
            CopyState::Empty => "is empty".into(),
            CopyState::Read(l) => format!("covers records 1..{}", l.committed_through()),
            CopyState::Damaged(e) => format!("is damaged ({e})"),
        }
    }
}

/// Reads and checks every entry of the copy at `path`.
pub(crate) fn load_copy(path: &Path) -> CopyState {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return CopyState::Absent,
        Err(source) => {
            return CopyState::Damaged(std::sync::Arc::new(JournalError::CommitIo {
                path: path.to_path_buf(),
                source,
            }));
        }
    };
    let mut bytes = Vec::new();
    if let Err(source) = file.read_to_end(&mut bytes) {
        return CopyState::Damaged(std::sync::Arc::new(JournalError::CommitIo {
            path: path.to_path_buf(),
            source,
        }));
    }
    if bytes.is_empty() {
        return CopyState::Empty;
    }
    match parse(path, &bytes) {
        Ok(l) => CopyState::Read(l),
        Err(e) => CopyState::Damaged(std::sync::Arc::new(e)),
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Loaded, JournalError> {
    let mut loaded = Loaded::default();
    let whole = bytes.len() / ENTRY_BYTES;
    for (i, raw) in bytes.chunks_exact(ENTRY_BYTES).enumerate() {
        let offset = (i * ENTRY_BYTES) as u64;
        let mut b = [0u8; ENTRY_BYTES];
        b.copy_from_slice(raw);
        let corrupt = |reason: String| JournalError::CommitCorrupt {
            path: path.to_path_buf(),
            offset,
            reason,
        };
        let (entry, kind) = match CommitEntry::decode(&b) {
            Ok(e) => e,
            // Only the last entry may be torn, and only if nothing follows it.
            Err(_) if i + 1 == whole && bytes.len().is_multiple_of(ENTRY_BYTES) => break,
            Err(reason) => return Err(corrupt(reason)),
        };
        let at_start = i == usize::from(loaded.header);
        match kind {
            EntryKind::Header => {
                if i != 0 || entry.first_seq != HEADER_FORMAT {
                    return Err(corrupt(format!(
                        "header entry (format {}) is not the first entry of the file",
                        entry.first_seq
                    )));
                }
                loaded.header = true;
                loaded.valid_bytes = ENTRY_BYTES as u64;
                continue;
            }
            EntryKind::Retired => {
                // A retention entry is written only first in a rewritten file (after a header).
                if !at_start || entry.first_seq != 1 || entry.last_seq == 0 || entry.digest != 0 {
                    return Err(corrupt(format!(
                        "retention entry for records {}..{} is not the first entry of the file",
                        entry.first_seq, entry.last_seq
                    )));
                }
                loaded.retired = Some(entry);
                loaded.valid_bytes = offset + ENTRY_BYTES as u64;
                continue;
            }
            EntryKind::Commit => {}
        }
        let (prev_last, prev_chain) = loaded
            .tip()
            .map_or((0, CHAIN_START), |p| (p.last_seq, p.chain));
        if entry.first_seq != prev_last + 1 || entry.last_seq < entry.first_seq {
            return Err(corrupt(format!(
                "entry covers {}..{} but the previous one ends at {prev_last}",
                entry.first_seq, entry.last_seq
            )));
        }
        if entry.chain != chain_next(prev_chain, entry.first_seq, entry.last_seq, entry.digest) {
            return Err(corrupt("entry breaks the hash chain".into()));
        }
        loaded.entries.push(entry);
        loaded.valid_bytes = offset + ENTRY_BYTES as u64;
    }
    loaded.torn_bytes = bytes.len() as u64 - loaded.valid_bytes;
    Ok(loaded)
}

/// Both copies of the commit record as found in `dir`, primary first.
pub(crate) fn load_copies(dir: &Path) -> [CopyState; 2] {
    COMMIT_COPIES.map(|name| load_copy(&dir.join(name)))
}

/// The commit record a journal trusts, from its two copies.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reconciled {
    /// The copy trusted (`None`: no copy exists, or only empty format-2/3 ones).
    pub loaded: Option<Loaded>,
    /// Copies that must be rewritten from the trusted one: file name and what was wrong.
    /// `benign` copies lag by the one entry a crash between the two writes leaves behind.
    pub stale: Vec<StaleCopy>,
}

impl Reconciled {
    pub(crate) fn committed_through(&self) -> u64 {
        self.loaded.as_ref().map_or(0, Loaded::committed_through)
    }

    pub(crate) fn retired_through(&self) -> u64 {
        self.loaded.as_ref().map_or(0, Loaded::retired_through)
    }

    /// A repair of a damaged copy (not the benign lag of a crash between the two writes).
    pub(crate) fn recovered_copies(&self) -> impl Iterator<Item = &StaleCopy> {
        self.stale.iter().filter(|s| !s.benign)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StaleCopy {
    pub file: &'static str,
    pub why: String,
    pub benign: bool,
}

/// Which copy to trust. `format` is the journal's (from `meta`): from 4 on both copies must
/// hold their header, and a missing, empty or damaged one is repaired from the other; before
/// 4 only `commits` exists and an empty one means "nothing committed yet".
///
/// *Errors:* [`JournalError::CommitCorrupt`] (or the copy's own error) when the copies
/// disagree (neither can be trusted) or no copy is usable. Both copies absent is `Ok` with no
/// record: the caller decides whether the store's records make that damage.
pub(crate) fn reconcile(
    dir: &Path,
    copies: &[CopyState; 2],
    format: u16,
) -> Result<Reconciled, JournalError> {
    let headed = format >= 4;
    let usable = |c: &CopyState| match c {
        CopyState::Read(l) if l.header == headed || !headed => Some(l.clone()),
        _ => None,
    };
    let [primary, mirror] = copies;
    if !headed {
        return match primary {
            CopyState::Absent => Ok(Reconciled::default()),
            CopyState::Empty => Ok(Reconciled {
                loaded: Some(Loaded::default()),
                stale: Vec::new(),
            }),
            CopyState::Read(l) => Ok(Reconciled {
                loaded: Some(l.clone()),
                stale: vec![StaleCopy {
                    file: COMMITS_MIRROR_FILE,
                    why: "is written from this release on".into(),
                    benign: true,
                }],
            }),
            CopyState::Damaged(e) => Err(clone_error(e)),
        };
    }
    let (a, b) = (usable(primary), usable(mirror));
    let why_unusable = |c: &CopyState| match c {
        CopyState::Read(_) => "has no header (it was not written by format 4)".to_string(),
        other => other.describe(),
    };
    let chosen = match (a, b) {
        (None, None) => {
            return match (primary, mirror) {
                (CopyState::Absent, CopyState::Absent) => Ok(Reconciled::default()),
                (CopyState::Damaged(e), _) | (_, CopyState::Damaged(e)) => Err(clone_error(e)),
                _ => Err(JournalError::CommitCorrupt {
                    path: dir.join(COMMITS_FILE),
                    offset: 0,
                    reason: format!(
                        "it {} and {} {}: no copy of the commit record is usable",
                        why_unusable(primary),
                        COMMITS_MIRROR_FILE,
                        why_unusable(mirror)
                    ),
                }),
            };
        }
        (Some(l), None) => Reconciled {
            loaded: Some(l),
            stale: vec![StaleCopy {
                file: COMMITS_MIRROR_FILE,
                why: why_unusable(mirror),
                benign: false,
            }],
        },
        (None, Some(l)) => Reconciled {
            loaded: Some(l),
            stale: vec![StaleCopy {
                file: COMMITS_FILE,
                why: why_unusable(primary),
                benign: false,
            }],
        },
        (Some(p), Some(m)) => {
            if format >= SEQUENTIAL_COPIES_FORMAT {
                one_crash_at_most(dir, &p, &m)?;
            }
            let p_ahead = (p.committed_through(), p.retired_through())
                >= (m.committed_through(), m.retired_through());
            let (ahead, behind, behind_file) = if p_ahead {
                (p, m, COMMITS_MIRROR_FILE)
            } else {
                (m, p, COMMITS_FILE)
            };
            if let Some(tip) = behind.tip()
                && !ahead.agrees_with(&tip)
            {
                return Err(JournalError::CommitCorrupt {
                    path: dir.join(behind_file),
                    offset: 0,
                    reason: format!(
                        "it and the other copy of the commit record disagree about records 1..{}: neither can be trusted",
                        tip.last_seq
                    ),
                });
            }
            let lag = ahead.entries.len() as i64 - behind.entries.len() as i64;
            let mut stale = Vec::new();
            if ahead.valid_bytes != behind.valid_bytes || ahead.retired != behind.retired {
                // From format 5 on the mirror is written after `commits`: only it may lag.
                let benign = lag == 1
                    && ahead.retired == behind.retired
                    && (format < SEQUENTIAL_COPIES_FORMAT || behind_file == COMMITS_MIRROR_FILE);
                stale.push(StaleCopy {
                    file: behind_file,
                    why: format!(
                        "covers records 1..{} and the other copy 1..{}",
                        behind.committed_through(),
                        ahead.committed_through()
                    ),
                    benign,
                });
            }
            Reconciled {
                loaded: Some(ahead),
                stale,
            }
        }
    };
    Ok(chosen)
}

/// The journal format from which the copies are written one after the other (each fsynced
/// before the next is touched); before it both were written, then both fsynced.
pub(crate) const SEQUENTIAL_COPIES_FORMAT: u16 = 5;

/// Refuses two readable copies that no single crash can leave: both ending in a torn entry, or
/// the mirror torn at an entry `commits` (written first) does not hold.
fn one_crash_at_most(dir: &Path, primary: &Loaded, mirror: &Loaded) -> Result<(), JournalError> {
    let corrupt = |file: &str, offset: u64, reason: String| JournalError::CommitCorrupt {
        path: dir.join(file),
        offset,
        reason,
    };
    if primary.torn_bytes > 0 && mirror.torn_bytes > 0 {
        return Err(corrupt(
            COMMITS_FILE,
            primary.valid_bytes,
            format!(
                "it and {COMMITS_MIRROR_FILE} both end in an entry that fails its checks: the copies are written one after the other, so a crash tears at most one; this is damage, not a torn write"
            ),
        ));
    }
    if mirror.torn_bytes > 0 && primary.valid_bytes <= mirror.valid_bytes {
        return Err(corrupt(
            COMMITS_MIRROR_FILE,
            mirror.valid_bytes,
            format!(
                "it ends in an entry that fails its checks and {COMMITS_FILE}, written before it, does not hold that entry: {COMMITS_FILE} was cut back"
            ),
        ));
    }
    Ok(())
}

fn clone_error(e: &JournalError) -> JournalError {
    match e {
        JournalError::CommitIo { path, source } => JournalError::CommitIo {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        JournalError::CommitCorrupt {
            path,
            offset,
            reason,
        } => JournalError::CommitCorrupt {
            path: path.clone(),
            offset: *offset,
            reason: reason.clone(),
        },
        other => JournalError::Corrupt {
            seq: 0,
            reason: other.to_string(),
        },
    }
}

/// The commit record open for appending: both copies, written in order.
pub(crate) struct CommitLog {
    files: [(PathBuf, File); 2],
    last: Option<CommitEntry>,
}

impl CommitLog {
    /// Opens both copies for appending. A copy that is stale (missing, damaged, lagging) is
    /// first rewritten from `trusted`; torn bytes after the last valid entry are cut off.
    pub(crate) fn open_for_append(
        dir: &Path,
        trusted: &Loaded,
        rewrite_copies: &[&'static str],
    ) -> Result<CommitLog, JournalError> {
        for name in rewrite_copies {
            write_copy(dir, name, trusted.retired, &trusted.entries)?;
        }
        let open = |name: &str, torn: bool| -> Result<(PathBuf, File), JournalError> {
            use std::os::unix::fs::OpenOptionsExt;
            let path = dir.join(name);
            let io = |source| JournalError::CommitIo {
                path: path.clone(),
                source,
            };
            let file = OpenOptions::new()
                .append(true)
                .mode(0o600)
                .open(&path)
                .map_err(io)?;
            if torn {
                file.set_len(trusted.valid_bytes).map_err(io)?;
                file.sync_all().map_err(io)?;
            }
            Ok((path, file))
        };
        let torn = trusted.torn_bytes > 0;
        if torn {
            tracing::warn!(
                dir = %dir.display(),
                bytes = trusted.torn_bytes,
                after_record = trusted.committed_through(),
                "dropping a commit entry torn by a crash while it was written: the other copy does not hold it, so its append was never acknowledged"
            );
        }
        let files = [
            open(
                COMMITS_FILE,
                torn && !rewrite_copies.contains(&COMMITS_FILE),
            )?,
            open(
                COMMITS_MIRROR_FILE,
                torn && !rewrite_copies.contains(&COMMITS_MIRROR_FILE),
            )?,
        ];
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| JournalError::CommitIo {
                path: dir.to_path_buf(),
                source,
            })?;
        Ok(CommitLog {
            files,
            last: trusted.tip(),
        })
    }

    pub(crate) fn committed_through(&self) -> u64 {
        self.last.map_or(0, |e| e.last_seq)
    }

    /// Reopens both copies after [`replace`] renamed new ones over them.
    pub(crate) fn reopen(&mut self, dir: &Path) -> Result<(), JournalError> {
        *self = CommitLog::open_for_append(dir, &load_written(dir)?, &[])?;
        Ok(())
    }

    /// Appends the entry for `first..=last` to both copies and fsyncs them (the caller has
    /// flushed sled).
    pub(crate) fn commit(
        &mut self,
        first: u64,
        last: u64,
        digest: u64,
    ) -> Result<(), JournalError> {
        let prev_chain = self.last.map_or(CHAIN_START, |p| p.chain);
        assert_eq!(first, self.committed_through() + 1, "commits stay dense");
        let entry = CommitEntry {
            first_seq: first,
            last_seq: last,
            digest,
            chain: chain_next(prev_chain, first, last, digest),
        };
        let encoded = entry.encode();
        // One copy is durable before the other is touched: a crash tears at most one, so the
        // same damage in both is never taken for a torn write (see [`reconcile`]).
        for (path, file) in &mut self.files {
            let io = |source| JournalError::CommitIo {
                path: path.clone(),
                source,
            };
            file.write_all(&encoded).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        self.last = Some(entry);
        Ok(())
    }
}

/// The primary copy as a writer of this journal keeps it (both copies are written alike).
pub(crate) fn load_written(dir: &Path) -> Result<Loaded, JournalError> {
    match load_copy(&dir.join(COMMITS_FILE)) {
        CopyState::Read(l) => Ok(l),
        CopyState::Damaged(e) => Err(clone_error(&e)),
        other => Err(JournalError::CommitCorrupt {
            path: dir.join(COMMITS_FILE),
            offset: 0,
            reason: format!("it {} although this journal writes it", other.describe()),
        }),
    }
}

/// The commit record after retiring records `1..=retired_through`: the retention entry and
/// the entries after it. `entries` are the current commit entries (checked by [`load`]); the
/// one holding `retired_through` is split there, its two halves' digests computed from the
/// store and their concatenation checked against the entry's digest first (a damaged record
/// is never re-vouched for). Entries after a split are re-chained.
pub(crate) fn after_retiring(
    chunks: &Chunks,
    entries: &[CommitEntry],
    retired_before: Option<CommitEntry>,
    retired_through: u64,
) -> Result<(CommitEntry, Vec<CommitEntry>), JournalError> {
    let Some(idx) = entries
        .iter()
        .position(|e| e.first_seq <= retired_through && retired_through <= e.last_seq)
    else {
        return Err(JournalError::Corrupt {
            seq: retired_through,
            reason: format!(
                "no commit entry holds record {retired_through}, the retention point asked for"
            ),
        });
    };
    let e = entries[idx];
    let prev_chain = match idx {
        0 => retired_before.map_or(CHAIN_START, |r| r.chain),
        _ => entries[idx - 1].chain,
    };
    if e.last_seq == retired_through {
        let retention = CommitEntry {
            first_seq: 1,
            last_seq: retired_through,
            digest: 0,
            chain: e.chain,
        };
        return Ok((retention, entries[idx + 1..].to_vec()));
    }
    let damaged = |reason: String| JournalError::RecordsDamaged {
        first: e.first_seq,
        last: e.last_seq,
        reason,
    };
    let (head, tail, whole) =
        split_digest(chunks, e.first_seq, retired_through, e.last_seq).map_err(damaged)?;
    if whole != e.digest {
        return Err(damaged(
            "they differ from what the commit record says was written".into(),
        ));
    }
    let retention = CommitEntry {
        first_seq: 1,
        last_seq: retired_through,
        digest: 0,
        chain: chain_next(prev_chain, e.first_seq, retired_through, head),
    };
    let mut kept = Vec::with_capacity(entries.len() - idx);
    let mut chain = retention.chain;
    let rest = std::iter::once((retired_through + 1, e.last_seq, tail)).chain(
        entries[idx + 1..]
            .iter()
            .map(|x| (x.first_seq, x.last_seq, x.digest)),
    );
    for (first_seq, last_seq, digest) in rest {
        chain = chain_next(chain, first_seq, last_seq, digest);
        kept.push(CommitEntry {
            first_seq,
            last_seq,
            digest,
            chain,
        });
    }
    Ok((retention, kept))
}

/// Digests of `first..=mid`, `mid+1..=last` and `first..=last` (batches end at `mid`).
fn split_digest(
    chunks: &Chunks,
    first: u64,
    mid: u64,
    last: u64,
) -> Result<(u64, u64, u64), String> {
    let mut head = Digest::default();
    let mut tail = Digest::default();
    let mut whole = Digest::default();
    let mut expected = first;
    for entry in chunks.iter_from(first).map_err(|e| e.to_string())? {
        if expected > last {
            break;
        }
        let (_, value) = entry.map_err(|e| format!("storage error: {e}"))?;
        let view =
            BatchView::parse(expected, &value).map_err(|e| format!("at record {expected}: {e}"))?;
        if view.first_seq != expected {
            return Err(format!(
                "records {expected}..{} are missing",
                view.first_seq
            ));
        }
        if let Some(Err(e)) = view.records().find(|r| r.is_err()) {
            return Err(e.to_string());
        }
        if expected <= mid && view.last_seq() > mid {
            return Err(format!("a stored batch spans the retention point {mid}"));
        }
        if expected <= mid {
            &mut head
        } else {
            &mut tail
        }
        .update(&value);
        whole.update(&value);
        expected = view.last_seq() + 1;
    }
    if expected != last + 1 {
        return Err(format!("records {expected}..{last} are missing"));
    }
    Ok((head.finish(), tail.finish(), whole.finish()))
}

/// A retention entry for `1..=retired_through` starting a new chain (repair, when the old
/// commit record is unreadable).
pub(crate) fn fresh_retention_entry(retired_through: u64) -> CommitEntry {
    CommitEntry {
        first_seq: 1,
        last_seq: retired_through,
        digest: 0,
        chain: chain_next(CHAIN_START, 1, retired_through, 0),
    }
}

/// Writes a new commit record to both copies, primary first: see [`write_copy`].
pub(crate) fn replace(
    dir: &Path,
    retired: Option<CommitEntry>,
    entries: &[CommitEntry],
) -> Result<(), JournalError> {
    for name in COMMIT_COPIES {
        write_copy(dir, name, retired, entries)?;
    }
    Ok(())
}

/// Writes the copy `name`: its header, `retired` (as the retention entry) then `entries`, to
/// a new file, fsynced, then renamed over the old one (a crash leaves the old or the new file).
fn write_copy(
    dir: &Path,
    name: &str,
    retired: Option<CommitEntry>,
    entries: &[CommitEntry],
) -> Result<(), JournalError> {
    let mut bytes = Vec::with_capacity((entries.len() + 2) * ENTRY_BYTES);
    bytes.extend_from_slice(&CommitEntry::header());
    if let Some(r) = retired {
        bytes.extend_from_slice(&r.encode_tagged(TAG_RETIRED));
    }
    for e in entries {
        bytes.extend_from_slice(&e.encode());
    }
    super::durable::replace_file(dir, name, &bytes).map_err(|source| JournalError::CommitIo {
        path: dir.join(name),
        source,
    })
}
