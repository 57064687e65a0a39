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

use super::JournalError;
use super::batch::BatchView;
use super::chunks::Chunks;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const COMMITS_FILE: &str = "commits";
pub(crate) const ENTRY_BYTES: usize = 40;
const TAG: [u8; 4] = *b"LJC1";
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
        let mut b = [0u8; ENTRY_BYTES];
        b[0..4].copy_from_slice(&TAG);
        b[4..12].copy_from_slice(&self.first_seq.to_le_bytes());
        b[12..20].copy_from_slice(&self.last_seq.to_le_bytes());
        b[20..28].copy_from_slice(&self.digest.to_le_bytes());
        b[28..36].copy_from_slice(&self.chain.to_le_bytes());
        let crc = crc32fast::hash(&b[..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8; ENTRY_BYTES]) -> Result<CommitEntry, String> {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let crc = u32::from_le_bytes([b[36], b[37], b[38], b[39]]);
        if b[0..4] != TAG {
            return Err("entry has no LJC1 tag".into());
        }
        if crc32fast::hash(&b[..36]) != crc {
            return Err("entry fails its checksum".into());
        }
        Ok(CommitEntry {
            first_seq: u64_at(4),
            last_seq: u64_at(12),
            digest: u64_at(20),
            chain: u64_at(28),
        })
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
    pub entries: u64,
    pub last: Option<CommitEntry>,
    pub valid_bytes: u64,
    /// Bytes after the last valid entry (a torn write of an unacknowledged entry).
    pub torn_bytes: u64,
}

impl Loaded {
    pub(crate) fn committed_through(&self) -> u64 {
        self.last.map_or(0, |e| e.last_seq)
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
        let entry = match CommitEntry::decode(&b) {
            Ok(e) => e,
            // Only the last entry may be torn, and only if nothing follows it.
            Err(_) if i + 1 == whole && bytes.len() % ENTRY_BYTES == 0 => break,
            Err(reason) => return Err(corrupt(reason)),
        };
        let (prev_last, prev_chain) = loaded
            .last
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
            last: loaded.last,
        })
    }

    pub(crate) fn committed_through(&self) -> u64 {
        self.last.map_or(0, |e| e.last_seq)
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

/// Replaces the commit record with one entry for `1..=last` (nothing when `last` is 0):
/// written to a new file, fsynced, then renamed over the old one.
pub(crate) fn rewrite(dir: &Path, last: u64, digest: u64) -> Result<(), JournalError> {
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
    if last > 0 {
        let entry = CommitEntry {
            first_seq: 1,
            last_seq: last,
            digest,
            chain: chain_next(CHAIN_START, 1, last, digest),
        };
        file.write_all(&entry.encode()).map_err(io)?;
    }
    file.sync_all().map_err(io)?;
    std::fs::rename(&fresh, &path).map_err(io)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}
