//! Walking the journal in sequence order, checking continuity between batches.

use super::batch::{BatchView, CursorState, key_seq};
use super::chunks::{ChunkIter, Chunks};
use super::{JournalError, Record};

/// Yields stored batches from the one holding `from_seq` onward, checking that they join up.
///
/// *Guarantees:* every batch returned by [`BatchWalk::next_batch`] passed its header checks and
/// starts exactly where the previous one ended (or, for the first, at or before `from_seq`).
/// After the first error the walk is over.
pub(crate) struct BatchWalk {
    iter: ChunkIter,
    from_seq: u64,
    /// `None` until the first batch is seen.
    expected_seq: Option<u64>,
    done: bool,
}

impl BatchWalk {
    pub(crate) fn new(chunks: &Chunks, from_seq: u64) -> Result<Self, JournalError> {
        let from_seq = from_seq.max(1);
        Ok(BatchWalk {
            iter: chunks.iter_from(from_seq)?,
            from_seq,
            expected_seq: None,
            done: false,
        })
    }

    /// The seq the next batch must start at (or the start seq before the first batch).
    pub(crate) fn expected_seq(&self) -> u64 {
        self.expected_seq.unwrap_or(self.from_seq)
    }

    /// The next batch's bytes, after checking its header and continuity.
    pub(crate) fn next_batch(&mut self) -> Option<Result<sled::IVec, JournalError>> {
        if self.done {
            return None;
        }
        let result = self.step();
        if !matches!(result, Some(Ok(_))) {
            self.done = true;
        }
        result
    }

    fn step(&mut self) -> Option<Result<sled::IVec, JournalError>> {
        let near = self.expected_seq();
        let (key, value) = match self.iter.next()? {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e)),
        };
        let result = key_seq(&key, near).and_then(|seq| {
            let view = BatchView::parse(seq, &value)?;
            self.check_continuity(&view)?;
            Ok(())
        });
        Some(result.map(|()| value))
    }

    fn check_continuity(&mut self, view: &BatchView<'_>) -> Result<(), JournalError> {
        match self.expected_seq {
            None if view.first_seq > self.from_seq => Err(JournalError::Corrupt {
                seq: self.from_seq,
                reason: format!(
                    "records {}..{} are missing (the next batch starts at seq {})",
                    self.from_seq, view.first_seq, view.first_seq
                ),
            }),
            Some(expected) if view.first_seq != expected => Err(JournalError::Corrupt {
                seq: expected,
                reason: if view.first_seq > expected {
                    format!(
                        "records {expected}..{} are missing (the next batch starts at seq {})",
                        view.first_seq, view.first_seq
                    )
                } else {
                    format!(
                        "batch at seq {} overlaps records before {expected}",
                        view.first_seq
                    )
                },
            }),
            _ => {
                self.expected_seq = Some(view.last_seq() + 1);
                Ok(())
            }
        }
    }
}

/// Calls `visit` for every record with `seq >= from_seq`, in order, without allocating per
/// record. Returns how many records were visited.
pub(crate) fn for_each(
    batches: &Chunks,
    from_seq: u64,
    mut visit: impl FnMut(super::RecordRef<'_>) -> std::ops::ControlFlow<()>,
) -> Result<u64, JournalError> {
    let mut walk = BatchWalk::new(batches, from_seq)?;
    let from_seq = from_seq.max(1);
    let mut visited = 0u64;
    while let Some(value) = walk.next_batch() {
        let value = value?;
        let view = BatchView::parse(key_of(&value), &value)?;
        for record in view.records() {
            let record = record?;
            if record.seq < from_seq {
                continue;
            }
            visited += 1;
            if visit(record).is_break() {
                return Ok(visited);
            }
        }
    }
    Ok(visited)
}

/// The first seq a batch's header names (the header was checked by `BatchWalk`).
fn key_of(value: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&value[4..12]);
    u64::from_le_bytes(a)
}

/// Iterator over owned records from a start seq; see `Journal::records`.
///
/// *Guarantees:* records come in dense seq order, each checksum-verified. The first error is
/// yielded once and ends the iteration: nothing after a corrupt record is returned.
pub struct Records<'j> {
    walk: Option<BatchWalk>,
    pending_error: Option<JournalError>,
    from_seq: u64,
    current: Option<(sled::IVec, CursorState)>,
    _journal: std::marker::PhantomData<&'j super::Journal>,
}

impl Records<'_> {
    pub(crate) fn new(batches: &Chunks, from_seq: u64) -> Self {
        let (walk, pending_error) = match BatchWalk::new(batches, from_seq) {
            Ok(w) => (Some(w), None),
            Err(e) => (None, Some(e)),
        };
        Records {
            walk,
            pending_error,
            from_seq: from_seq.max(1),
            current: None,
            _journal: std::marker::PhantomData,
        }
    }

    /// An iterator that yields `e` and ends.
    pub(crate) fn failed(e: JournalError) -> Self {
        Records {
            walk: None,
            pending_error: Some(e),
            from_seq: 1,
            current: None,
            _journal: std::marker::PhantomData,
        }
    }

    fn fail(&mut self, e: JournalError) -> Option<Result<Record, JournalError>> {
        self.walk = None;
        self.current = None;
        Some(Err(e))
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Record, JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending_error.take() {
            return Some(Err(e));
        }
        loop {
            if let Some((value, cursor)) = &mut self.current {
                let body = &value[super::batch::BATCH_HEADER_BYTES..];
                match cursor.next(body) {
                    Some(Ok(r)) if r.seq < self.from_seq => continue,
                    Some(Ok(r)) => {
                        return Some(Ok(Record {
                            seq: r.seq,
                            at: r.at,
                            payload: r.payload.to_vec(),
                        }));
                    }
                    Some(Err(e)) => return self.fail(e),
                    None => self.current = None,
                }
            }
            let value = match self.walk.as_mut()?.next_batch()? {
                Ok(v) => v,
                Err(e) => return self.fail(e),
            };
            let cursor = match BatchView::parse(key_of(&value), &value) {
                Ok(view) => CursorState::start(&view),
                Err(e) => return self.fail(e),
            };
            self.current = Some((value, cursor));
        }
    }
}
