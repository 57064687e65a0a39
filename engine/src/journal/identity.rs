//! The journal's identity file: evidence, written before anything else, that a journal was
//! created here, and whether its creation finished.
//!
//! ```text
//! identity = tag "LJI2" | format u16 | stage u8 | reserved [u8; 5] (0)
//!          | committed_through u64 | snapshot_through u64 | crc u32
//! crc      = crc32 of the 28 bytes before it                      (integers little-endian)
//! ```
//!
//! Identities written before the engine snapshot's witness are 24 bytes, tag "LJI1", without
//! `snapshot_through` (read as 0: none witnessed).
//!
//! A creation writes it first, stage [`Stage::Creating`], durable before any sled file exists;
//! once both copies of the commit record are durable it is replaced (new file, fsync, rename)
//! by stage [`Stage::Created`]. So a creation cut short is known by what was written, never by
//! what is missing: files of a journal whose identity says `Created` are never created again
//! over, whatever else is gone. Journals of formats 1–4 have no identity file; the first
//! writable open of this build writes one.
//!
//! `committed_through` witnesses the commit record outside it and outside sled: a writer that
//! closes cleanly (or writes an engine snapshot) records how far the commit record reached.
//! Both copies of the commit record cut back below it, with the store cut back too, are then
//! refused rather than read back shorter. `snapshot_through` is the newest engine snapshot the
//! store held at that moment: one gone from the store later (damage at the end of sled's log,
//! which sled drops as if it were a torn write) is then known and said, not passed over.

use super::JournalError;
use std::path::Path;

pub const IDENTITY_FILE: &str = "identity";
const IDENTITY_BYTES: usize = 32;
const TAG: [u8; 4] = *b"LJI2";
/// Identities without `snapshot_through`.
const IDENTITY_BYTES_V1: usize = 24;
const TAG_V1: [u8; 4] = *b"LJI1";

/// How far the journal's creation got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Written before any other file: the creation may have been cut short.
    Creating,
    /// Written once the commit record's copies were durable.
    Created,
}

/// The identity file as found on disk.
#[derive(Debug)]
pub(crate) enum Found {
    /// No identity file: a fresh directory, or a journal of format 1–4.
    Absent,
    Read {
        format: u16,
        stage: Stage,
        committed_through: u64,
        snapshot_through: u64,
    },
    /// Unreadable or failing its checks: the stage is unknown (never taken for `Creating`).
    Damaged(JournalError),
}

impl Found {
    /// A journal was created here for sure (a damaged identity counts: something wrote it).
    pub(crate) fn says_created(&self) -> bool {
        matches!(
            self,
            Found::Read {
                stage: Stage::Created,
                ..
            } | Found::Damaged(_)
        )
    }

    pub(crate) fn is_creating(&self) -> bool {
        matches!(
            self,
            Found::Read {
                stage: Stage::Creating,
                ..
            }
        )
    }

    /// Whether a writable open must (re)write it as `Created` at `format`.
    pub(crate) fn needs_writing(&self, format: u16) -> bool {
        !matches!(self, Found::Read { format: f, stage: Stage::Created, .. } if *f == format)
    }

    /// How far a clean close saw the commit record reach (0: never witnessed).
    pub(crate) fn committed_through(&self) -> u64 {
        match self {
            Found::Read {
                committed_through, ..
            } => *committed_through,
            _ => 0,
        }
    }

    /// The newest engine snapshot the store held when the journal was last sealed (0: none
    /// witnessed).
    pub(crate) fn snapshot_through(&self) -> u64 {
        match self {
            Found::Read {
                snapshot_through, ..
            } => *snapshot_through,
            _ => 0,
        }
    }

    /// A newer build's journal is refused before anything else is read.
    pub(crate) fn check_format(&self, supported: u16) -> Result<(), JournalError> {
        match self {
            Found::Read { format, .. } if *format > supported => Err(JournalError::UnknownFormat {
                found: *format,
                supported,
                seq: None,
            }),
            _ => Ok(()),
        }
    }
}

pub(crate) fn load(dir: &Path) -> Found {
    let path = dir.join(IDENTITY_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Found::Absent,
        Err(source) => return Found::Damaged(JournalError::FileUnreadable { path, source }),
    };
    let damaged = |reason: String| {
        Found::Damaged(JournalError::IdentityDamaged {
            path: path.clone(),
            reason,
        })
    };
    let (tag, crc_at) = match bytes.len() {
        IDENTITY_BYTES => (TAG, IDENTITY_BYTES - 4),
        IDENTITY_BYTES_V1 => (TAG_V1, IDENTITY_BYTES_V1 - 4),
        n => {
            return damaged(format!(
                "is {n} bytes long, not {IDENTITY_BYTES} (or {IDENTITY_BYTES_V1} as written before)"
            ));
        }
    };
    if bytes[0..4] != tag {
        return damaged(format!(
            "does not start with its tag {}",
            String::from_utf8_lossy(&tag)
        ));
    }
    if crc32fast::hash(&bytes[..crc_at]).to_le_bytes() != bytes[crc_at..crc_at + 4] {
        return damaged("fails its checksum".into());
    }
    let format = u16::from_le_bytes([bytes[4], bytes[5]]);
    let stage = match bytes[6] {
        0 => Stage::Creating,
        1 => Stage::Created,
        other => return damaged(format!("names stage {other}, which no build writes")),
    };
    if bytes[7..12].iter().any(|&b| b != 0) {
        return damaged("has reserved bytes that are not zero".into());
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    Found::Read {
        format,
        stage,
        committed_through: u64_at(12),
        snapshot_through: if crc_at == IDENTITY_BYTES - 4 {
            u64_at(20)
        } else {
            0
        },
    }
}

/// What the identity witnesses of the journal (see the module's doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Witness {
    pub committed_through: u64,
    pub snapshot_through: u64,
}

impl Witness {
    pub(crate) fn committed(committed_through: u64) -> Witness {
        Witness {
            committed_through,
            snapshot_through: 0,
        }
    }
}

/// Writes the identity durably: a new file, fsynced, renamed over the old one, the directory
/// fsynced (a crash leaves the old or the new identity, never a mix).
pub(crate) fn write(
    dir: &Path,
    format: u16,
    stage: Stage,
    witness: Witness,
) -> Result<(), JournalError> {
    let path = dir.join(IDENTITY_FILE);
    let io = |source| JournalError::IdentityIo {
        path: path.clone(),
        source,
    };
    let mut bytes = [0u8; IDENTITY_BYTES];
    bytes[0..4].copy_from_slice(&TAG);
    bytes[4..6].copy_from_slice(&format.to_le_bytes());
    bytes[6] = match stage {
        Stage::Creating => 0,
        Stage::Created => 1,
    };
    bytes[12..20].copy_from_slice(&witness.committed_through.to_le_bytes());
    bytes[20..28].copy_from_slice(&witness.snapshot_through.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    super::durable::replace_file(dir, IDENTITY_FILE, &bytes).map_err(io)
}

/// Removes an identity write cut short before its rename (it never counted).
pub(crate) fn remove_unfinished(dir: &Path) -> Result<(), JournalError> {
    let path = dir.join(format!("{IDENTITY_FILE}.new"));
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(JournalError::IdentityIo { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_reads_back_as_written_and_any_flipped_bit_is_damage() {
        let tmp = tempfile::tempdir().unwrap();
        for stage in [Stage::Creating, Stage::Created] {
            let witness = Witness {
                committed_through: 77,
                snapshot_through: 70,
            };
            write(tmp.path(), 5, stage, witness).unwrap();
            assert!(matches!(
                load(tmp.path()),
                Found::Read { format: 5, stage: s, committed_through: 77, snapshot_through: 70 } if s == stage
            ));
        }
        let path = tmp.path().join(IDENTITY_FILE);
        let good = std::fs::read(&path).unwrap();
        for bit in 0..IDENTITY_BYTES * 8 {
            let mut bytes = good.clone();
            bytes[bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&path, &bytes).unwrap();
            assert!(matches!(load(tmp.path()), Found::Damaged(_)), "bit {bit}");
        }
        std::fs::write(&path, &good[..IDENTITY_BYTES - 1]).unwrap();
        assert!(matches!(load(tmp.path()), Found::Damaged(_)));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(load(tmp.path()), Found::Absent));
    }

    /// An identity written before the snapshot witness (24 bytes, tag LJI1) reads as one that
    /// witnessed no engine snapshot.
    #[test]
    fn an_identity_without_the_snapshot_witness_still_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let mut bytes = [0u8; IDENTITY_BYTES_V1];
        bytes[0..4].copy_from_slice(&TAG_V1);
        bytes[4..6].copy_from_slice(&5u16.to_le_bytes());
        bytes[6] = 1;
        bytes[12..20].copy_from_slice(&42u64.to_le_bytes());
        let crc = crc32fast::hash(&bytes[..20]);
        bytes[20..24].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(tmp.path().join(IDENTITY_FILE), bytes).unwrap();
        assert!(matches!(
            load(tmp.path()),
            Found::Read {
                format: 5,
                stage: Stage::Created,
                committed_through: 42,
                snapshot_through: 0
            }
        ));
    }
}
