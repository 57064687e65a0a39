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

use super::JournalError;
use super::batch::BatchView;
use super::chunks::Chunks;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const COMMITS_FILE: &str = "commits";
pub(crate) const ENTRY_BYTES: usize = 40;
const TAG: [u8; 4] = *b"LJC1";
const TAG_RETIRED: [u8; 4] = *b"LJR1";
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

    /// The entry and whether it is a retention entry (`LJR1`).
    fn decode(b: &[u8; ENTRY_BYTES]) -> Result<(CommitEntry, bool), String> {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let crc = u32::from_le_bytes([b[36], b[37], b[38], b[39]]);
        let retired = b[0..4] == TAG_RETIRED;
        if b[0..4] != TAG && !retired {
            return Err("entry has no LJC1 or LJR1 tag".into());
        }
        if crc32fast::hash(&b[..36]) != crc {
            return Err("entry fails its checksum".into());
        }
        let entry = CommitEntry {
            first_seq: u64_at(4),
            last_seq: u64_at(12),
            digest: u64_at(20),
            chain: u64_at(28),
        };
        Ok((entry, retired))
    }
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

/// Digest of the stored batches holding exactly `first..=last`, or why they do not.
pub(crate) fn digest_range(chunks: &Chunks, first: u64, last: u64) -> Result<u64, String> {
    let mut digest = Digest::default();
    let mut expected = first;
    let iter = chunks.iter_from(first).map_err(|e| e.to_string())?;
    for entry in iter {
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
        digest.update(&value);
        expected = view.last_seq() + 1;
    }
    if expected <= last {
        return Err(format!("records {expected}..{last} are missing"));
    }
    if expected != last + 1 {
        return Err(format!(
            "a stored batch ends at {} but the commit entry at {last}",
            expected - 1
        ));
    }
    Ok(digest.finish())
}

/// The commit file as read: its valid entries end at `valid_bytes`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Loaded {
    /// Commit entries (not counting a retention entry).
    pub entries: u64,
    /// The last commit entry (`None`: none after the retention entry, if any).
    pub last: Option<CommitEntry>,
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
        self.last.or(self.retired)
    }
}

/// Reads and checks every entry, calling `visit` on each. `Ok(None)` when the file is absent.
pub(crate) fn load(
    dir: &Path,
    mut visit: impl FnMut(&CommitEntry),
) -> Result<Option<Loaded>, JournalError> {
    let path = dir.join(COMMITS_FILE);
    let mut file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(JournalError::CommitIo { path, source }),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| JournalError::CommitIo {
            path: path.clone(),
            source,
        })?;
    let mut loaded = Loaded::default();
    let whole = bytes.len() / ENTRY_BYTES;
    for (i, raw) in bytes.chunks_exact(ENTRY_BYTES).enumerate() {
        let offset = (i * ENTRY_BYTES) as u64;
        let mut b = [0u8; ENTRY_BYTES];
        b.copy_from_slice(raw);
        let corrupt = |reason: String| JournalError::CommitCorrupt {
            path: path.clone(),
            offset,
            reason,
        };
        let (entry, retired) = match CommitEntry::decode(&b) {
            Ok(e) => e,
            // Only the last entry may be torn, and only if nothing follows it.
            Err(_) if i + 1 == whole && bytes.len() % ENTRY_BYTES == 0 => break,
            Err(reason) => return Err(corrupt(reason)),
        };
        if retired {
            // A retention entry is written only as the first of a rewritten file.
            if i != 0 || entry.first_seq != 1 || entry.last_seq == 0 || entry.digest != 0 {
                return Err(corrupt(format!(
                    "retention entry for records {}..{} is not the first entry of the file",
                    entry.first_seq, entry.last_seq
                )));
            }
            loaded.retired = Some(entry);
            loaded.valid_bytes = ENTRY_BYTES as u64;
            continue;
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
        visit(&entry);
        loaded.entries += 1;
        loaded.last = Some(entry);
        loaded.valid_bytes = offset + ENTRY_BYTES as u64;
    }
    loaded.torn_bytes = bytes.len() as u64 - loaded.valid_bytes;
    Ok(Some(loaded))
}

/// The commit file open for appending.
pub(crate) struct CommitLog {
    path: PathBuf,
    file: File,
    last: Option<CommitEntry>,
}

impl CommitLog {
    /// Opens (creating with mode 0600) and cuts off a torn last entry.
    pub(crate) fn open_for_append(dir: &Path, loaded: &Loaded) -> Result<CommitLog, JournalError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(COMMITS_FILE);
        let io = |source| JournalError::CommitIo {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        if loaded.torn_bytes > 0 {
            file.set_len(loaded.valid_bytes).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        if let Some(parent) = path.parent() {
            File::open(parent).and_then(|d| d.sync_all()).map_err(io)?;
        }
        Ok(CommitLog {
            path,
            file,
            last: loaded.tip(),
        })
    }

    pub(crate) fn committed_through(&self) -> u64 {
        self.last.map_or(0, |e| e.last_seq)
    }

    /// Reopens the file after [`replace`] renamed a new one over it.
    pub(crate) fn reopen(&mut self, dir: &Path) -> Result<(), JournalError> {
        let loaded = load(dir, |_| {})?.unwrap_or_default();
        *self = CommitLog::open_for_append(dir, &loaded)?;
        Ok(())
    }

    /// Appends and fsyncs the entry for `first..=last` (the caller has flushed sled).
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
        let io = |source| JournalError::CommitIo {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&entry.encode()).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.last = Some(entry);
        Ok(())
    }
}

/// Replaces the commit record with the retention entry `retired` (if any) and one entry for
/// `retired + 1..=last` (none when there are no such records): see [`replace`].
pub(crate) fn rewrite(
    dir: &Path,
    retired: Option<CommitEntry>,
    last: u64,
    digest: u64,
) -> Result<(), JournalError> {
    let (first, prev_chain) = retired.map_or((1, CHAIN_START), |r| (r.last_seq + 1, r.chain));
    let mut entries = Vec::new();
    if last >= first {
        entries.push(CommitEntry {
            first_seq: first,
            last_seq: last,
            digest,
            chain: chain_next(prev_chain, first, last, digest),
        });
    }
    replace(dir, retired, &entries)
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

/// Every commit entry of the file (not the retention entry), in order.
pub(crate) fn entries(dir: &Path) -> Result<Vec<CommitEntry>, JournalError> {
    let mut all = Vec::new();
    load(dir, |e| all.push(*e))?;
    Ok(all)
}

/// Writes a new commit record: `retired` (as the retention entry) then `entries`, to a new
/// file, fsynced, then renamed over the old one (a crash leaves the old or the new file).
pub(crate) fn replace(
    dir: &Path,
    retired: Option<CommitEntry>,
    entries: &[CommitEntry],
) -> Result<(), JournalError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(COMMITS_FILE);
    let fresh = dir.join(format!("{COMMITS_FILE}.new"));
    let io = |source| JournalError::CommitIo {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&fresh)
        .map_err(io)?;
    let mut bytes = Vec::with_capacity((entries.len() + 1) * ENTRY_BYTES);
    if let Some(r) = retired {
        bytes.extend_from_slice(&r.encode_tagged(TAG_RETIRED));
    }
    for e in entries {
        bytes.extend_from_slice(&e.encode());
    }
    file.write_all(&bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&fresh, &path).map_err(io)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}
