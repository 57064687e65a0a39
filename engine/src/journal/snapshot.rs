//! Snapshot framing: engine state as of a sequence number, checksummed.
//!
//! ```text
//! snapshot = format_version u16 | state_version u16 | through_seq u64 | at i64
//!          | state_bytes u32 | crc u32 (crc32 of the 24 bytes before it and the state) | state
//! ```
//! Stored in the `snapshots` tree under big-endian `through_seq`. `state_version` is
//! [`crate::engine::STATE_VERSION`] of the build that wrote it (0 before it was kept): a
//! snapshot of a layout this build does not read is passed over rather than decoded into the
//! wrong meaning; an older one it reads is decoded as that layout ([`crate::codec::decode_layout`]).

use super::JournalError;
use super::batch::FORMAT_VERSION;
use crate::engine::{STATE_VERSION, STATE_VERSION_OLDEST_READ};
use crate::time::Timestamp;

pub(crate) const SNAPSHOT_HEADER_BYTES: usize = 28;
/// How many snapshots the journal keeps by default: the newest, and one to fall back to
/// ([`super::JournalOptions::snapshots_kept`]).
pub const SNAPSHOTS_KEPT_MAX: usize = 2;
/// The most snapshots a journal may be asked to keep.
pub const SNAPSHOTS_KEPT_LIMIT: usize = 64;

/// Engine state as of `through_seq` (records `1..=through_seq` are folded into `state`).
///
/// *Guarantees:* `state` passed its checksum and `through_seq` is within the journal.
/// `skipped` lists newer snapshots that failed their checks (the caller may log them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub through_seq: u64,
    /// The [`crate::engine::STATE_VERSION`] `state` was written in (one this build reads).
    pub state_version: u16,
    pub at: Timestamp,
    pub state: Vec<u8>,
    pub skipped: Vec<SnapshotProblem>,
}

/// A snapshot that could not be used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotProblem {
    pub through_seq: u64,
    pub reason: String,
}

pub(crate) fn encode(through_seq: u64, at: Timestamp, state: &[u8]) -> Vec<u8> {
    encode_version(STATE_VERSION, through_seq, at, state)
}

fn encode_version(state_version: u16, through_seq: u64, at: Timestamp, state: &[u8]) -> Vec<u8> {
    assert!(state.len() <= u32::MAX as usize);
    let mut buf = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + state.len());
    buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    buf.extend_from_slice(&state_version.to_le_bytes());
    buf.extend_from_slice(&through_seq.to_le_bytes());
    buf.extend_from_slice(&at.0.to_le_bytes());
    buf.extend_from_slice(&(state.len() as u32).to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&buf);
    hasher.update(state);
    buf.extend_from_slice(&hasher.finalize().to_le_bytes());
    buf.extend_from_slice(state);
    buf
}

/// Checks and decodes the snapshot stored under key `key_seq`.
/// The state is returned with the state version it was written in (one this build reads).
pub(crate) fn decode(key_seq: u64, bytes: &[u8]) -> Result<(Timestamp, u16, &[u8]), JournalError> {
    let corrupt = |reason: String| JournalError::CorruptSnapshot {
        through_seq: key_seq,
        reason,
    };
    if bytes.len() < SNAPSHOT_HEADER_BYTES {
        return Err(corrupt(format!("snapshot is only {} bytes", bytes.len())));
    }
    let word = |i: usize, n: usize| -> u64 {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&bytes[i..i + n]);
        u64::from_le_bytes(a)
    };
    let version = word(0, 2) as u16;
    let state_version = word(2, 2) as u16;
    let through_seq = word(4, 8);
    let at = Timestamp(word(12, 8) as i64);
    let state_bytes = word(20, 4) as usize;
    let stored_crc = word(24, 4) as u32;
    let state = &bytes[SNAPSHOT_HEADER_BYTES..];
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..24]);
    hasher.update(state);
    if hasher.finalize() != stored_crc {
        return Err(corrupt("snapshot checksum mismatch".into()));
    }
    if version != FORMAT_VERSION {
        return Err(JournalError::UnknownFormat {
            found: version,
            supported: FORMAT_VERSION,
            seq: Some(key_seq),
        });
    }
    if !(STATE_VERSION_OLDEST_READ..=STATE_VERSION).contains(&state_version) {
        return Err(JournalError::OtherStateVersion {
            through_seq: key_seq,
            found: state_version,
            supported: STATE_VERSION,
        });
    }
    if through_seq != key_seq {
        return Err(corrupt(format!(
            "snapshot stored under seq {key_seq} says {through_seq}"
        )));
    }
    if state.len() != state_bytes {
        return Err(corrupt(format!(
            "snapshot state is {} bytes but its header says {state_bytes}",
            state.len()
        )));
    }
    Ok((at, state_version, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_of_another_state_version_is_refused_not_decoded() {
        for other in [0, STATE_VERSION_OLDEST_READ - 1, STATE_VERSION + 1] {
            let buf = encode_version(other, 7, Timestamp(1), b"state");
            let refused = decode(7, &buf);
            assert!(
                matches!(refused, Err(JournalError::OtherStateVersion { through_seq: 7, found, supported })
                    if found == other && supported == STATE_VERSION),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn snapshot_round_trips_and_flips_are_caught() {
        let buf = encode(42, Timestamp(9), b"state");
        assert_eq!(
            decode(42, &buf).unwrap(),
            (Timestamp(9), STATE_VERSION, &b"state"[..])
        );
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x80;
            assert!(decode(42, &bad).is_err(), "flip at {i} unnoticed");
        }
        assert!(decode(43, &buf).is_err());
    }
}
