//! On-disk framing of a batch: many records in one sled value.
//!
//! ```text
//! batch  = header record*                      (all integers little-endian)
//! header = format_version u16 | flags u16 | first_seq u64 | record_count u32
//!        | body_bytes u32 | header_crc u32     (crc32 of the 20 bytes before it)
//! record = payload_bytes u32 | at i64 | record_crc u32 | payload
//! record_crc = crc32(format_version u16 | seq u64 | at i64 | payload_bytes u32 | payload)
//! ```
//!
//! `flags` (journal format 5; 0 before): bit 0 marks the last value of one
//! `Journal::append_batch` (an append split into several values sets it on the last only),
//! bit 1 a value written by a buffered writer (acknowledged before it was durable). Other bits
//! are damage. They bound what a crash can leave beyond the commit record: one append.
//!
//! A record's sequence number is not stored: it is `first_seq + index`, and it is part of the
//! record's checksum, so a record read at the wrong position fails its check. The batch's sled
//! key (big-endian `first_seq`) must agree with the header. Overhead: 24 bytes per batch plus
//! 16 bytes per record.

use super::JournalError;
use crate::time::Timestamp;

/// The only format version this build reads and writes.
pub const FORMAT_VERSION: u16 = 1;
pub(crate) const BATCH_HEADER_BYTES: usize = 24;
pub(crate) const RECORD_HEADER_BYTES: usize = 16;
/// Format limits every reader enforces, whatever options the writer had.
pub(crate) const BATCH_RECORDS_LIMIT: u32 = 1 << 20;
pub(crate) const RECORD_BYTES_LIMIT: usize = 64 << 20;
pub(crate) const BATCH_BYTES_LIMIT: usize = 256 << 20;

/// What a batch's header says of the append that wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BatchFlags {
    /// The last value of its append.
    pub append_end: bool,
    /// Written by a writer that acknowledges appends before they are durable.
    pub buffered: bool,
}

const FLAG_APPEND_END: u16 = 1;
const FLAG_BUFFERED: u16 = 2;

impl BatchFlags {
    fn encode(self) -> u16 {
        u16::from(self.append_end) * FLAG_APPEND_END + u16::from(self.buffered) * FLAG_BUFFERED
    }

    fn decode(bits: u16) -> Option<BatchFlags> {
        (bits & !(FLAG_APPEND_END | FLAG_BUFFERED) == 0).then_some(BatchFlags {
            append_end: bits & FLAG_APPEND_END != 0,
            buffered: bits & FLAG_BUFFERED != 0,
        })
    }
}

/// One record as stored, borrowed from the batch that holds it (no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub seq: u64,
    pub at: Timestamp,
    pub payload: &'a [u8],
}

pub(crate) fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Decodes a big-endian sequence-number key; `near_seq` names the place for the error.
pub(crate) fn key_seq(key: &[u8], near_seq: u64) -> Result<u64, JournalError> {
    let arr: [u8; 8] = key.try_into().map_err(|_| JournalError::Corrupt {
        seq: near_seq,
        reason: format!("batch key is {} bytes, expected 8", key.len()),
    })?;
    Ok(u64::from_be_bytes(arr))
}

fn record_crc(version: u16, seq: u64, at: Timestamp, payload: &[u8]) -> u32 {
    let mut head = [0u8; 22];
    head[0..2].copy_from_slice(&version.to_le_bytes());
    head[2..10].copy_from_slice(&seq.to_le_bytes());
    head[10..18].copy_from_slice(&at.0.to_le_bytes());
    head[18..22].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&head);
    hasher.update(payload);
    hasher.finalize()
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

/// Builds one batch in a reusable buffer.
///
/// *Expected flow:* `begin`, `push` each record (the caller has checked sizes against the
/// limits), `finish`, then store `buf`.
pub(crate) struct BatchEncoder<'b> {
    buf: &'b mut Vec<u8>,
    version: u16,
    first_seq: u64,
    count: u32,
}

impl<'b> BatchEncoder<'b> {
    pub(crate) fn begin(buf: &'b mut Vec<u8>, version: u16, first_seq: u64) -> Self {
        assert!(first_seq >= 1, "sequence numbers start at 1");
        buf.clear();
        buf.resize(BATCH_HEADER_BYTES, 0);
        BatchEncoder {
            buf,
            version,
            first_seq,
            count: 0,
        }
    }

    pub(crate) fn push(&mut self, at: Timestamp, payload: &[u8]) {
        assert!(payload.len() <= RECORD_BYTES_LIMIT);
        assert!(self.count < BATCH_RECORDS_LIMIT);
        let seq = self.first_seq + u64::from(self.count);
        let crc = record_crc(self.version, seq, at, payload);
        self.buf
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&at.0.to_le_bytes());
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.buf.extend_from_slice(payload);
        self.count += 1;
    }

    pub(crate) fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Writes the header; returns the number of records in the batch.
    pub(crate) fn finish(self, flags: BatchFlags) -> u32 {
        assert!(self.count >= 1, "a batch holds at least one record");
        assert!(self.buf.len() <= BATCH_BYTES_LIMIT);
        let body_bytes = (self.buf.len() - BATCH_HEADER_BYTES) as u32;
        let h = &mut self.buf[..BATCH_HEADER_BYTES];
        h[0..2].copy_from_slice(&self.version.to_le_bytes());
        h[2..4].copy_from_slice(&flags.encode().to_le_bytes());
        h[4..12].copy_from_slice(&self.first_seq.to_le_bytes());
        h[12..16].copy_from_slice(&self.count.to_le_bytes());
        h[16..20].copy_from_slice(&body_bytes.to_le_bytes());
        let crc = crc32fast::hash(&h[..20]);
        h[20..24].copy_from_slice(&crc.to_le_bytes());
        self.count
    }
}

/// A batch whose header has been checked; records are checked as they are read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchView<'a> {
    pub first_seq: u64,
    pub flags: BatchFlags,
    pub count: u32,
    pub body: &'a [u8],
}

impl<'a> BatchView<'a> {
    /// Checks the header of the batch stored under key `key_seq`.
    pub(crate) fn parse(key_seq: u64, bytes: &'a [u8]) -> Result<Self, JournalError> {
        let corrupt = |reason: String| JournalError::Corrupt {
            seq: key_seq,
            reason,
        };
        if bytes.len() < BATCH_HEADER_BYTES {
            return Err(corrupt(format!(
                "batch is {} bytes, shorter than its {BATCH_HEADER_BYTES}-byte header (torn write?)",
                bytes.len()
            )));
        }
        let stored_crc = u32_at(bytes, 20);
        if crc32fast::hash(&bytes[..20]) != stored_crc {
            return Err(corrupt("batch header checksum mismatch".into()));
        }
        let version = u16_at(bytes, 0);
        if version != FORMAT_VERSION {
            return Err(JournalError::UnknownFormat {
                found: version,
                supported: FORMAT_VERSION,
                seq: Some(key_seq),
            });
        }
        let Some(flags) = BatchFlags::decode(u16_at(bytes, 2)) else {
            return Err(corrupt(format!(
                "batch header flags {:#06x} name bits no build writes",
                u16_at(bytes, 2)
            )));
        };
        let first_seq = u64_at(bytes, 4);
        let count = u32_at(bytes, 12);
        let body_bytes = u32_at(bytes, 16) as usize;
        if first_seq != key_seq {
            return Err(corrupt(format!(
                "batch stored under seq {key_seq} says it starts at seq {first_seq}"
            )));
        }
        if count == 0 || count > BATCH_RECORDS_LIMIT {
            return Err(corrupt(format!(
                "batch claims {count} records (1..={BATCH_RECORDS_LIMIT} allowed)"
            )));
        }
        if first_seq.checked_add(u64::from(count)).is_none() {
            return Err(corrupt("batch sequence numbers overflow u64".into()));
        }
        let body = &bytes[BATCH_HEADER_BYTES..];
        if body.len() != body_bytes {
            return Err(corrupt(format!(
                "batch body is {} bytes but its header says {body_bytes} (torn write?)",
                body.len()
            )));
        }
        if body.len() < count as usize * RECORD_HEADER_BYTES {
            return Err(corrupt(format!(
                "batch body of {} bytes cannot hold {count} records",
                body.len()
            )));
        }
        Ok(BatchView {
            first_seq,
            flags,
            count,
            body,
        })
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.first_seq + u64::from(self.count) - 1
    }

    /// Sum of the payload lengths, known from the header alone.
    pub(crate) fn payload_bytes(&self) -> u64 {
        (self.body.len() - self.count as usize * RECORD_HEADER_BYTES) as u64
    }

    pub(crate) fn records(&self) -> RecordCursor<'a> {
        RecordCursor {
            body: self.body,
            state: CursorState::start(self),
        }
    }
}

/// Position inside a batch body; kept apart from the body so an owner of the batch bytes can
/// store it next to them (see `Records`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CursorState {
    offset: usize,
    next_seq: u64,
    remaining: u32,
    first_seq: u64,
    failed: bool,
}

impl CursorState {
    pub(crate) fn start(view: &BatchView<'_>) -> Self {
        CursorState {
            offset: 0,
            next_seq: view.first_seq,
            remaining: view.count,
            first_seq: view.first_seq,
            failed: false,
        }
    }

    /// Decodes and checks the next record of `body`; `None` at a clean end. After an error
    /// the cursor yields nothing more.
    pub(crate) fn next<'a>(
        &mut self,
        body: &'a [u8],
    ) -> Option<Result<RecordRef<'a>, JournalError>> {
        if self.failed {
            return None;
        }
        if self.remaining == 0 {
            if self.offset != body.len() {
                self.failed = true;
                return Some(Err(JournalError::Corrupt {
                    seq: self.first_seq,
                    reason: format!(
                        "batch has {} bytes after its last record",
                        body.len() - self.offset
                    ),
                }));
            }
            return None;
        }
        let seq = self.next_seq;
        match decode_record(body, self.offset, seq) {
            Ok((record, next_offset)) => {
                self.offset = next_offset;
                self.next_seq += 1;
                self.remaining -= 1;
                Some(Ok(record))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

pub(crate) struct RecordCursor<'a> {
    body: &'a [u8],
    state: CursorState,
}

impl<'a> Iterator for RecordCursor<'a> {
    type Item = Result<RecordRef<'a>, JournalError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.state.next(self.body)
    }
}

/// Returns the record at `offset` and the offset of the one after it.
fn decode_record(
    body: &[u8],
    offset: usize,
    seq: u64,
) -> Result<(RecordRef<'_>, usize), JournalError> {
    let corrupt = |reason: String| JournalError::Corrupt { seq, reason };
    let rest = &body[offset..];
    if rest.len() < RECORD_HEADER_BYTES {
        return Err(corrupt(format!(
            "record header truncated ({} of {RECORD_HEADER_BYTES} bytes)",
            rest.len()
        )));
    }
    let payload_bytes = u32_at(rest, 0) as usize;
    let at = Timestamp(u64_at(rest, 4) as i64);
    let stored_crc = u32_at(rest, 12);
    if payload_bytes > rest.len() - RECORD_HEADER_BYTES {
        return Err(corrupt(format!(
            "record claims {payload_bytes} payload bytes but only {} remain in its batch",
            rest.len() - RECORD_HEADER_BYTES
        )));
    }
    let payload = &rest[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + payload_bytes];
    if record_crc(FORMAT_VERSION, seq, at, payload) != stored_crc {
        return Err(corrupt("record checksum mismatch".into()));
    }
    Ok((
        RecordRef { seq, at, payload },
        offset + RECORD_HEADER_BYTES + payload_bytes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(first_seq: u64, records: &[(i64, &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut enc = BatchEncoder::begin(&mut buf, FORMAT_VERSION, first_seq);
        for (at, p) in records {
            enc.push(Timestamp(*at), p);
        }
        enc.finish(BatchFlags::default());
        buf
    }

    #[test]
    fn batch_round_trips_with_dense_seqs() {
        let buf = encode(7, &[(1, b"a"), (-2, b""), (3, b"ccc")]);
        assert_eq!(buf.len(), BATCH_HEADER_BYTES + 3 * RECORD_HEADER_BYTES + 4);
        let view = BatchView::parse(7, &buf).unwrap();
        assert_eq!((view.first_seq, view.count, view.last_seq()), (7, 3, 9));
        assert_eq!(view.payload_bytes(), 4);
        let got: Vec<_> = view.records().map(Result::unwrap).collect();
        assert_eq!(
            got[1],
            RecordRef {
                seq: 8,
                at: Timestamp(-2),
                payload: b""
            }
        );
        assert_eq!(got[2].payload, b"ccc");
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let buf = encode(1, &[(10, b"hello"), (11, b"world")]);
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x01;
            let ok = BatchView::parse(1, &bad)
                .map(|v| v.records().all(|r| r.is_ok()))
                .unwrap_or(false);
            assert!(!ok, "flip at byte {i} went unnoticed");
        }
    }

    #[test]
    fn wrong_key_and_truncation_are_corrupt() {
        let buf = encode(5, &[(1, b"x")]);
        assert!(matches!(
            BatchView::parse(6, &buf),
            Err(JournalError::Corrupt { seq: 6, .. })
        ));
        for len in 0..buf.len() {
            assert!(matches!(
                BatchView::parse(5, &buf[..len]),
                Err(JournalError::Corrupt { seq: 5, .. })
            ));
        }
    }
}
