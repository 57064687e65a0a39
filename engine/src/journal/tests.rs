//! Journal behaviour against a real sled directory.

use super::*;
use proptest::prelude::*;

pub(super) fn open(dir: &Path) -> (Journal, OpenReport) {
    Journal::open(dir, JournalOptions::default()).expect("open journal")
}

pub(super) fn payload(seq: u64) -> Vec<u8> {
    format!("input #{seq} ")
        .repeat((seq % 5) as usize + 1)
        .into_bytes()
}

/// Appends records `next..next+n` with `payload(seq)`, in batches of `per_batch`.
pub(super) fn append_n(j: &mut Journal, n: u64, per_batch: usize) {
    let mut left = n;
    while left > 0 {
        let take = left.min(per_batch as u64);
        let start = j.next_seq();
        let owned: Vec<Vec<u8>> = (start..start + take).map(payload).collect();
        let entries: Vec<(Timestamp, &[u8])> = owned
            .iter()
            .zip(start..)
            .map(|(p, s)| (Timestamp(s as i64 * 10), &p[..]))
            .collect();
        let range = j.append_batch(&entries).unwrap();
        assert_eq!(range, start..=start + take - 1);
        left -= take;
    }
}

pub(super) fn read_all(j: &Journal, from: u64) -> (Vec<Record>, Option<JournalError>) {
    let mut out = Vec::new();
    for r in j.records(from) {
        match r {
            Ok(r) => out.push(r),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

pub(super) fn assert_intact(records: &[Record], from: u64) {
    for (r, seq) in records.iter().zip(from..) {
        assert_eq!(r.seq, seq);
        assert_eq!(r.at, Timestamp(seq as i64 * 10));
        assert_eq!(r.payload, payload(seq));
    }
}

#[test]
fn round_trip_and_reopen_keep_sequence_continuity() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    {
        let (mut j, report) = open(&dir);
        assert!(report.created);
        assert_eq!((j.next_seq(), j.last_seq()), (1, None));
        append_n(&mut j, 25, 10);
        assert_eq!(j.last_seq(), Some(25));
        let (all, err) = read_all(&j, 1);
        assert!(err.is_none());
        assert_eq!(all.len(), 25);
        assert_intact(&all, 1);
    }
    let (mut j, report) = open(&dir);
    assert_eq!(
        report,
        OpenReport {
            created: false,
            truncated_tail: None,
            next_seq: 26,
            committed_through: 25,
            upgraded_from: None,
            retired_through: 0,
            recovered_commit_copies: Vec::new(),
            lost_snapshot: None,
        }
    );
    assert_eq!(j.append(Timestamp(260), &payload(26)).unwrap(), 26);
    let (all, err) = read_all(&j, 1);
    assert!(err.is_none());
    assert_intact(&all, 1);
    assert_eq!(all.len(), 26);
    // Reading from the middle of a batch and past the end.
    let (tail, _) = read_all(&j, 14);
    assert_eq!(tail.first().map(|r| r.seq), Some(14));
    assert_intact(&tail, 14);
    assert!(read_all(&j, 27).0.is_empty());
    assert!(j.verify().is_clean());
}

#[test]
fn visitor_sees_the_same_records_and_can_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 100, 33);
    let mut seen = Vec::new();
    let n = j
        .for_each_record(40, |r| {
            assert_eq!(r.payload, &payload(r.seq)[..]);
            seen.push(r.seq);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(n, 61);
    assert_eq!(seen, (40..=100).collect::<Vec<_>>());
    let stopped = j.for_each_record(1, |r| {
        if r.seq == 5 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    assert_eq!(stopped.unwrap(), 5);
}

#[test]
fn large_appends_are_split_into_values_but_stay_dense() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = JournalOptions {
        batch_records_max: 7,
        batch_bytes_max: 200,
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(tmp.path(), opts).unwrap();
    append_n(&mut j, 50, 50);
    let stats = j.stats().unwrap();
    assert_eq!(stats.records, 50);
    assert!(stats.batches >= 8, "{stats:?}");
    assert_eq!((stats.first_seq, stats.last_seq), (Some(1), Some(50)));
    assert_eq!(
        stats.payload_bytes,
        (1..=50).map(|s| payload(s).len() as u64).sum::<u64>()
    );
    assert!(stats.disk_bytes > 0);
    let (all, err) = read_all(&j, 1);
    assert!(err.is_none());
    assert_intact(&all, 1);
}

#[test]
fn oversized_record_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = JournalOptions {
        record_bytes_max: 8,
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(tmp.path(), opts).unwrap();
    let err = j
        .append_batch(&[(Timestamp(1), b"ok"), (Timestamp(2), b"far too long")])
        .unwrap_err();
    assert!(matches!(
        err,
        JournalError::RecordTooLarge { bytes: 12, max: 8 }
    ));
    assert_eq!(j.next_seq(), 1);
    assert!(j.append_batch(&[]).unwrap().is_empty());
}

#[test]
fn corrupt_record_in_the_middle_is_refused_and_a_reader_stops_at_its_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 30, 10); // batches 1..=10, 11..=20, 21..=30
    j.damage_for_test(Damage::FlipRecord { seq: 15 }).unwrap();
    drop(j);
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::RecordsDamaged {
                first: 11,
                last: 20,
                ..
            }
        ),
        "a start refuses any committed record that fails: {err:?}"
    );
    let (j, report) = Journal::open_read_only(tmp.path(), JournalOptions::default()).unwrap();
    assert_eq!(
        report.truncated_tail, None,
        "damage before the tail is not a torn tail"
    );
    let (good, err) = read_all(&j, 1);
    assert_eq!(good.len(), 14);
    assert_intact(&good, 1);
    assert!(
        matches!(err, Some(JournalError::Corrupt { seq: 15, .. })),
        "{err:?}"
    );
    let mut visited = 0;
    let err = j.for_each_record(1, |_| {
        visited += 1;
        ControlFlow::Continue(())
    });
    assert!(matches!(err, Err(JournalError::Corrupt { seq: 15, .. })));
    assert_eq!(visited, 14);
    let report = j.verify();
    assert_eq!(report.problems[0].seq, 15);
    assert!(
        report.problems[1..]
            .iter()
            .all(|p| p.seq == 11 && p.reason.contains("records 11..20")),
        "{report:?}"
    );
    assert_eq!(report.last_seq, Some(30));
    assert_eq!(report.committed_through, 30);
}

#[test]
fn missing_batch_is_a_gap_not_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 30, 10);
    j.damage_for_test(Damage::RemoveBatch { seq: 11 }).unwrap();
    let (good, err) = read_all(&j, 1);
    assert_eq!(good.len(), 10);
    assert!(
        matches!(err, Some(JournalError::Corrupt { seq: 11, .. })),
        "{err:?}"
    );
    assert!(matches!(
        read_all(&j, 15).1,
        Some(JournalError::Corrupt { seq: 11, .. })
    ));
    let report = j.verify();
    assert_eq!(report.problems[0].seq, 11);
}

#[test]
fn torn_tail_is_truncated_on_open_and_appends_continue() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 30, 10);
    j.damage_for_test(Damage::TearBatch { seq: 25 }).unwrap();
    j.damage_for_test(Damage::UncommitFrom { seq: 21 }).unwrap();
    drop(j);
    let (mut j, report) = open(tmp.path());
    let tail = report.truncated_tail.expect("torn tail reported");
    assert_eq!(tail.from_seq, 21);
    assert!(tail.bytes > 0);
    assert_eq!(report.next_seq, 21);
    append_n(&mut j, 5, 5);
    let (all, err) = read_all(&j, 1);
    assert!(err.is_none());
    assert_eq!(all.len(), 25);
    assert_intact(&all, 1);
    assert!(j.verify().is_clean());
}

#[test]
fn flipped_bit_in_last_batch_is_treated_as_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 20, 10);
    j.damage_for_test(Damage::FlipRecord { seq: 20 }).unwrap();
    j.damage_for_test(Damage::UncommitFrom { seq: 11 }).unwrap();
    drop(j);
    let (_j, report) = open(tmp.path());
    assert_eq!(report.truncated_tail.map(|t| t.from_seq), Some(11));
    assert_eq!(report.next_seq, 11);
}

#[test]
fn unknown_format_version_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 3, 3);
    j.damage_for_test(Damage::MetaFormatVersion { version: 9 })
        .unwrap();
    drop(j);
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::UnknownFormat {
                found: 9,
                supported: JOURNAL_FORMAT_VERSION,
                seq: None
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("format version 9"), "{err}");
}

#[test]
fn batch_from_another_format_version_is_not_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 20, 10);
    j.damage_for_test(Damage::BatchFormatVersion {
        seq: 15,
        version: 2,
    })
    .unwrap();
    drop(j);
    // The last batch has a valid checksum but a newer format: refuse, never truncate.
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::UnknownFormat {
                found: 2,
                seq: Some(11),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn directory_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a").join("journal");
    let _j = open(&dir);
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

fn assert_private(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir), PRIVATE_DIR_MODE);
    for file in journal_files(dir) {
        assert_eq!(mode(&dir.join(&file)), PRIVATE_FILE_MODE, "{file:?}");
        if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
            assert_eq!(mode(&dir.join(parent)), PRIVATE_DIR_MODE, "{parent:?}");
        }
    }
}

#[test]
fn every_file_is_private_and_a_wider_existing_journal_is_narrowed_on_open() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    {
        // Batches larger than a quarter segment go to blob files.
        let (mut j, _) = open(&dir);
        let big = vec![7u8; 4096];
        j.append_batch(&[(Timestamp(1), &big[..])]).unwrap();
        assert!(
            journal_files(&dir).iter().any(|f| f.starts_with("blobs")),
            "a blob file was written"
        );
        assert_private(&dir);
    }
    let wide = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(&dir, wide.clone()).unwrap();
    std::fs::set_permissions(dir.join("blobs"), wide).unwrap();
    for file in journal_files(&dir) {
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let _j = open(&dir);
    assert_private(&dir);
}

#[test]
fn second_open_in_process_is_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let _j = open(tmp.path());
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(&err, JournalError::Locked { dir } if dir == tmp.path()),
        "{err:?}"
    );
}

#[test]
fn snapshots_keep_two_and_fall_back_when_newest_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    assert_eq!(j.latest_snapshot().unwrap(), None);
    assert!(matches!(
        j.write_snapshot(1, Timestamp(0), b"s"),
        Err(JournalError::SnapshotBeyondEnd {
            through_seq: 1,
            last_seq: 0
        })
    ));
    append_n(&mut j, 30, 10);
    for seq in [10, 20, 30] {
        j.write_snapshot(
            seq,
            Timestamp(seq as i64),
            format!("state@{seq}").as_bytes(),
        )
        .unwrap();
    }
    let seqs: Vec<u64> = j.stats().unwrap().snapshots.iter().map(|s| s.0).collect();
    assert_eq!(seqs, vec![20, 30]);
    let latest = j.latest_snapshot().unwrap().unwrap();
    assert_eq!(
        (
            latest.through_seq,
            latest.state.as_slice(),
            latest.skipped.len()
        ),
        (30, &b"state@30"[..], 0)
    );

    j.damage_for_test(Damage::FlipSnapshot { through_seq: 30 })
        .unwrap();
    let fallback = j.latest_snapshot().unwrap().unwrap();
    assert_eq!(fallback.through_seq, 20);
    assert_eq!(fallback.state, b"state@20");
    assert_eq!(fallback.skipped.len(), 1);
    assert_eq!(fallback.skipped[0].through_seq, 30);
    assert_eq!(j.verify().snapshot_problems.len(), 1);

    j.damage_for_test(Damage::FlipSnapshot { through_seq: 20 })
        .unwrap();
    let err = j.latest_snapshot().unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::CorruptSnapshot {
                through_seq: 30,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn snapshot_beyond_a_truncated_tail_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 20, 10);
    j.write_snapshot(10, Timestamp(1), b"ten").unwrap();
    j.write_snapshot(20, Timestamp(2), b"twenty").unwrap();
    j.damage_for_test(Damage::TearBatch { seq: 20 }).unwrap();
    j.damage_for_test(Damage::UncommitFrom { seq: 11 }).unwrap();
    drop(j);
    let (j, report) = open(tmp.path());
    assert_eq!(report.next_seq, 11);
    let snap = j.latest_snapshot().unwrap().unwrap();
    assert_eq!(snap.through_seq, 10);
    assert_eq!(snap.skipped[0].through_seq, 20);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_batches_survive_reopen(
        batches in proptest::collection::vec(
            proptest::collection::vec((any::<i64>(), proptest::collection::vec(any::<u8>(), 0..300)), 1..40),
            1..12,
        ),
        batch_records_max in 1usize..64,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let opts = JournalOptions { batch_records_max, ..JournalOptions::default() };
        let mut expected = Vec::new();
        {
            let (mut j, _) = Journal::open(tmp.path(), opts.clone()).unwrap();
            for batch in &batches {
                let entries: Vec<(Timestamp, &[u8])> = batch.iter().map(|(t, p)| (Timestamp(*t), &p[..])).collect();
                let range = j.append_batch(&entries).unwrap();
                prop_assert_eq!(*range.start(), expected.len() as u64 + 1);
                for ((t, p), seq) in batch.iter().zip(range) {
                    expected.push(Record { seq, at: Timestamp(*t), payload: p.clone() });
                }
            }
        }
        let (j, report) = Journal::open(tmp.path(), opts).unwrap();
        prop_assert_eq!(report.truncated_tail, None);
        prop_assert_eq!(report.next_seq, expected.len() as u64 + 1);
        let got: Vec<Record> = j.records(1).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&got, &expected);
        let report = j.verify();
        prop_assert!(report.is_clean());
        prop_assert_eq!(report.records_checked, expected.len() as u64);
    }
}

#[test]
fn batches_span_chunk_trees_and_a_torn_single_batch_chunk_is_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let per_chunk = chunks::BATCHES_PER_CHUNK_MAX as u64;
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 3 * per_chunk + 1, 1); // 3 full chunks + 1 chunk holding one batch
    assert_eq!(j.chunks.starts().len(), 4);
    let (tail, err) = read_all(&j, per_chunk + 2);
    assert!(err.is_none());
    assert_eq!(tail.len() as u64, 2 * per_chunk);
    assert_intact(&tail, per_chunk + 2);
    j.damage_for_test(Damage::TearBatch {
        seq: 3 * per_chunk + 1,
    })
    .unwrap();
    j.damage_for_test(Damage::UncommitFrom {
        seq: 3 * per_chunk + 1,
    })
    .unwrap();
    drop(j);
    let (mut j, report) = open(tmp.path());
    assert_eq!(
        report.truncated_tail.map(|t| t.from_seq),
        Some(3 * per_chunk + 1)
    );
    assert_eq!(j.chunks.starts().len(), 3);
    append_n(&mut j, 2, 1);
    assert_eq!(j.chunks.starts().len(), 4);
    assert!(j.verify().is_clean());
    // A whole chunk going missing is a gap, named by its first seq.
    j.damage_for_test(Damage::RemoveBatch { seq: per_chunk + 1 })
        .unwrap();
    let report = j.verify();
    assert_eq!(report.problems[0].seq, per_chunk + 1, "{report:?}");
    assert!(
        matches!(read_all(&j, 1).1, Some(JournalError::Corrupt { seq, .. }) if seq == per_chunk + 1)
    );
}

#[test]
fn a_journal_reopens_with_the_segment_size_it_was_created_with() {
    let dir = tempfile::tempdir().unwrap();
    let big = JournalOptions {
        segment_bytes: 8 << 20,
        ..JournalOptions::default()
    };
    {
        let (mut j, _) = Journal::open(dir.path(), big).unwrap();
        append_n(&mut j, 10, 5);
        j.flush().unwrap();
    }
    // Opened with the default (smaller) segment size, as `lifecycle log verify` does.
    let (j, report) = open(dir.path());
    assert_eq!(report.next_seq, 11);
    let (records, err) = read_all(&j, 1);
    assert!(err.is_none(), "{err:?}");
    assert_intact(&records, 1);
}

/// A committed torn tail is damage, not a torn write: open refuses to drop it.
#[test]
fn a_committed_batch_that_fails_its_checks_is_never_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 30, 10);
    j.damage_for_test(Damage::TearBatch { seq: 25 }).unwrap();
    drop(j);
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::RecordsDamaged {
                first: 21,
                last: 30,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("records 21..30"), "{err}");
}

#[test]
fn a_committed_last_batch_that_is_missing_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 53, 10);
    j.damage_for_test(Damage::RemoveBatch { seq: 51 }).unwrap();
    drop(j);
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::RecordsMissing {
                first: 51,
                last: 53,
                stored_last: 50,
                ref file,
            } if file.path == tmp.path().join(DB_FILE)
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("records 51..53 are missing: damage at"),
        "{err}"
    );
}

#[test]
fn a_torn_commit_entry_is_unacknowledged_and_a_lost_copy_is_recovered_from_the_other() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 20, 10);
    drop(j);
    let copies = COMMIT_COPIES.map(|c| tmp.path().join(c));
    let bytes = std::fs::read(&copies[0]).unwrap();
    assert_eq!(
        bytes.len(),
        3 * commit::ENTRY_BYTES,
        "a header and two entries"
    );
    assert_eq!(std::fs::read(&copies[1]).unwrap(), bytes);
    // A torn last entry in `commits`, which the mirror (written after it) does not hold yet:
    // its batch was flushed by sled but never acknowledged; it is committed again on open
    // (it passes its checks). The same with the mirror torn and `commits` whole.
    let entry = commit::ENTRY_BYTES;
    for (primary, mirror) in [
        (bytes.len() - 3, bytes.len() - entry),
        (bytes.len(), bytes.len() - 3),
    ] {
        std::fs::write(&copies[0], &bytes[..primary]).unwrap();
        std::fs::write(&copies[1], &bytes[..mirror]).unwrap();
        let (j, report) = open(tmp.path());
        assert_eq!((report.next_seq, report.committed_through), (21, 20));
        assert!(report.recovered_commit_copies.is_empty(), "{report:?}");
        drop(j);
        assert_eq!(std::fs::read(&copies[0]).unwrap(), bytes);
        assert_eq!(std::fs::read(&copies[1]).unwrap(), bytes);
    }
    // No single crash leaves these: the same torn entry in both copies, or the mirror torn
    // at an entry `commits` does not hold. Refused, nothing written.
    for (primary, mirror) in [
        (bytes.len() - 3, bytes.len() - 3),
        (bytes.len() - entry, bytes.len() - 3),
    ] {
        std::fs::write(&copies[0], &bytes[..primary]).unwrap();
        std::fs::write(&copies[1], &bytes[..mirror]).unwrap();
        let before = dir_state(tmp.path());
        for _ in 0..2 {
            let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
            assert!(
                matches!(err, JournalError::CommitCorrupt { .. }) && err.is_damage(),
                "{primary}/{mirror}: {err:?}"
            );
            assert_eq!(
                dir_state(tmp.path()),
                before,
                "a refused start writes nothing"
            );
        }
    }
    for c in &copies {
        std::fs::write(c, &bytes).unwrap();
    }
    // Either copy lost, emptied or cut short: the other vouches for every record, and the
    // open writes the lost one again.
    for (i, damage) in [0, 1]
        .into_iter()
        .flat_map(|i| [(i, 0usize), (i, 1), (i, 2)])
    {
        let path = &copies[i];
        match damage {
            0 => std::fs::remove_file(path).unwrap(),
            1 => std::fs::write(path, b"").unwrap(),
            _ => std::fs::write(path, &bytes[..commit::ENTRY_BYTES]).unwrap(),
        }
        let (j, report) = open(tmp.path());
        assert_eq!(report.committed_through, 20, "copy {i}, damage {damage}");
        assert_eq!(report.recovered_commit_copies.len(), 1, "{report:?}");
        assert!(
            report.recovered_commit_copies[0].starts_with(COMMIT_COPIES[i]),
            "{report:?}"
        );
        assert!(j.verify().is_clean());
        drop(j);
        assert_eq!(
            std::fs::read(&copies[0]).unwrap(),
            std::fs::read(&copies[1]).unwrap(),
            "written again"
        );
    }
    for c in &copies {
        std::fs::remove_file(c).unwrap();
    }
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(err, JournalError::CreatedButGone { .. }) && err.is_damage(),
        "{err:?}"
    );
}

/// The reproduction: `: > commits; truncate -s N db`. The mirror still vouches for
/// every record, so the records sled lost are missing, never silently gone; and the refusal
/// writes nothing, so it lasts.
#[test]
fn an_emptied_commit_record_and_a_shortened_store_are_refused_durably() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    for i in 0..28u64 {
        j.append(Timestamp(i as i64), &vec![i as u8; 3000]).unwrap();
    }
    drop(j);
    std::fs::write(tmp.path().join(COMMITS_FILE), b"").unwrap();
    let db = tmp.path().join("db");
    let len = std::fs::metadata(&db).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    let before = dir_state(tmp.path());
    for _ in 0..2 {
        let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
        assert!(err.is_damage(), "{err}");
        assert!(
            matches!(err, JournalError::RecordsMissing { last: 28, .. }),
            "{err:?}"
        );
        assert_eq!(
            dir_state(tmp.path()),
            before,
            "a refused start writes nothing"
        );
    }
}

/// Every file's name, mode and bytes.
pub(super) fn dir_state(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    journal_files(dir)
        .into_iter()
        .map(|f| {
            let p = dir.join(&f);
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            (f, mode, std::fs::read(&p).unwrap())
        })
        .collect()
}

#[test]
fn a_journal_of_the_previous_format_is_upgraded_with_a_commit_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 20, 10);
    j.damage_for_test(Damage::MetaFormatVersion {
        version: JOURNAL_FORMAT_VERSION_LEGACY,
    })
    .unwrap();
    drop(j);
    std::fs::remove_file(tmp.path().join(COMMITS_FILE)).unwrap();
    let (mut j, report) = open(tmp.path());
    assert_eq!(report.upgraded_from, Some(JOURNAL_FORMAT_VERSION_LEGACY));
    assert_eq!(report.committed_through, 20);
    append_n(&mut j, 5, 5);
    assert!(j.verify().is_clean());
    drop(j);
    let (_j, report) = open(tmp.path());
    assert_eq!((report.upgraded_from, report.committed_through), (None, 25));
}

/// Copies `src` into a fresh directory under `root` named `name`.
pub(super) fn copy_dir(src: &Path, root: &Path, name: &str) -> PathBuf {
    let dst = root.join(name);
    let mut dirs = vec![(src.to_path_buf(), dst.clone())];
    while let Some((from, to)) = dirs.pop() {
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                dirs.push((entry.path(), target));
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    dst
}

/// Every file of the journal, relative to it.
pub(super) fn journal_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            } else {
                out.push(entry.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Open + verify + full read of a damaged copy: either an error, or every committed record
/// intact (from `first`, the first record the undamaged journal keeps). Returns whether the
/// damage was reported.
fn open_damaged(dir: &Path, first: u64, committed: u64, what: &str) -> bool {
    let opened = std::panic::catch_unwind(|| Journal::open(dir, JournalOptions::default()));
    let Ok(opened) = opened else {
        panic!("{what}: open panicked");
    };
    let (j, _) = match opened {
        Err(_) => return true,
        Ok(j) => j,
    };
    let (records, err) = read_all(&j, j.first_kept_seq());
    let verify = j.verify();
    if err.is_some() || !verify.is_clean() {
        return true;
    }
    let from = records.iter().position(|r| r.seq == first);
    assert!(
        j.first_kept_seq() <= first
            && from.is_some_and(|i| records.len() - i >= (committed - first + 1) as usize),
        "{what}: silently lost records: {} read from {} with no error, {first}..{committed} committed",
        records.len(),
        j.first_kept_seq()
    );
    let from = from.unwrap_or_default();
    assert_intact(
        &records[from..from + (committed - first + 1) as usize],
        first,
    );
    false
}

/// The damage matrix, on a small scale: byte flips at many offsets in every file,
/// truncations, and each file deleted. Never fewer committed records without an error.
#[test]
fn damaged_files_never_lose_committed_records_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let committed = 53;
    {
        let opts = JournalOptions {
            segment_bytes: 8 << 20,
            ..JournalOptions::default()
        };
        let (mut j, _) = Journal::open(&src, opts).unwrap();
        append_n(&mut j, committed, 3);
        j.write_snapshot(40, Timestamp(1), b"forty").unwrap();
    }
    damage_matrix(&src, tmp.path(), 1, committed, 24);
}

/// The same on a controller's journal (durable appends, small segments, blob files) copied as
/// a kill -9 leaves it: sled never shut down, so it has no clean snapshot of its own.
#[test]
fn damage_to_a_journal_left_by_kill_9_is_never_a_silent_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let committed = 90;
    let (mut j, _) = open(&live);
    // Batches above a quarter of sled's 4 KiB segment go to blob files.
    append_n(&mut j, committed, 30);
    assert!(journal_files(&live).iter().any(|f| f.starts_with("blobs")));
    let src = copy_dir(&live, tmp.path(), "killed");
    drop(j);
    damage_matrix(&src, tmp.path(), 1, committed, 12);
}

/// Flips a byte at `offsets_per_file` offsets of every file, truncates there, and deletes each
/// file, each on a fresh copy of `src`; see [`open_damaged`].
pub(super) fn damage_matrix(
    src: &Path,
    tmp: &Path,
    first: u64,
    committed: u64,
    offsets_per_file: u64,
) {
    let files = journal_files(src);
    assert!(files.iter().any(|f| f == Path::new(COMMITS_FILE)));
    let mut case = 0;
    let mut reported = 0;
    for file in &files {
        let len = std::fs::metadata(src.join(file)).unwrap().len();
        let offsets: Vec<u64> = (0..offsets_per_file)
            .map(|i| i * len / offsets_per_file)
            .collect();
        for &at in &offsets {
            case += 1;
            let dir = copy_dir(src, tmp, &format!("c{case}"));
            let path = dir.join(file);
            let mut bytes = std::fs::read(&path).unwrap();
            if bytes.is_empty() {
                continue;
            }
            bytes[at as usize] ^= 0x5a;
            std::fs::write(&path, &bytes).unwrap();
            reported += usize::from(open_damaged(
                &dir,
                first,
                committed,
                &format!("flip {file:?}@{at}"),
            ));
            case += 1;
            let dir = copy_dir(src, tmp, &format!("c{case}"));
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(file))
                .unwrap();
            f.set_len(at).unwrap();
            reported += usize::from(open_damaged(
                &dir,
                first,
                committed,
                &format!("cut {file:?}@{at}"),
            ));
        }
        case += 1;
        let dir = copy_dir(src, tmp, &format!("c{case}"));
        std::fs::remove_file(dir.join(file)).unwrap();
        reported += usize::from(open_damaged(
            &dir,
            first,
            committed,
            &format!("delete {file:?}"),
        ));
    }
    assert!(reported > 0);
}

#[test]
fn repair_truncates_to_the_last_good_record_and_rewrites_the_commit_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 30, 10);
    j.write_snapshot(20, Timestamp(1), b"twenty").unwrap();
    j.damage_for_test(Damage::FlipRecord { seq: 15 }).unwrap();
    drop(j);
    let report = Journal::repair_truncate(tmp.path(), JournalOptions::default()).unwrap();
    assert_eq!(report.kept_through, 14);
    assert_eq!(report.committed_before, Some(30));
    assert_eq!(report.batches_removed, 1);
    assert_eq!(report.snapshots_removed, vec![20]);
    assert!(report.first_problem.is_some());
    let (mut j, open_report) = open(tmp.path());
    assert_eq!(
        (open_report.next_seq, open_report.committed_through),
        (15, 14)
    );
    let (records, err) = read_all(&j, 1);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(records.len(), 14);
    assert_intact(&records, 1);
    assert!(j.verify().is_clean(), "{:?}", j.verify());
    append_n(&mut j, 3, 3);
    assert!(j.verify().is_clean());
    drop(j);
    assert!(
        tmp.path().join(DISCARDED_DIR).join("1").join("db").exists(),
        "the old store is kept aside"
    );
}

#[test]
fn repair_accounts_for_records_the_store_lost_and_opens_clean_after() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 30, 10);
    j.damage_for_test(Damage::RemoveBatch { seq: 21 }).unwrap();
    drop(j);
    assert!(matches!(
        Journal::open(tmp.path(), JournalOptions::default()),
        Err(JournalError::RecordsMissing {
            first: 21,
            last: 30,
            ..
        })
    ));
    let report = Journal::repair_truncate(tmp.path(), JournalOptions::default()).unwrap();
    assert_eq!(
        (
            report.kept_through,
            report.committed_before,
            report.batches_removed
        ),
        (20, Some(30), 0)
    );
    let (j, _) = open(tmp.path());
    assert!(j.verify().is_clean());
    assert_eq!(j.last_seq(), Some(20));
}

/// Buffered appends are acknowledged only by `flush`: records sled wrote before it are an
/// unacknowledged tail (kept when intact, committed on the next open), never an error.
#[test]
fn buffered_records_never_flushed_are_an_unacknowledged_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let buffered = JournalOptions {
        durability: Durability::Buffered,
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(tmp.path(), buffered.clone()).unwrap();
    append_n(&mut j, 12, 4);
    j.damage_for_test(Damage::TearBatch { seq: 12 }).unwrap();
    drop(j);
    let (j, report) = Journal::open(tmp.path(), buffered).unwrap();
    assert_eq!(report.truncated_tail.map(|t| t.from_seq), Some(9));
    assert_eq!((report.next_seq, report.committed_through), (9, 8));
    assert!(j.verify().is_clean());
}

/// A sled panic while opening is an error naming the journal, not a crash (and the panic hook
/// before it still reports other panics).
#[test]
fn a_contained_panic_is_an_error_and_later_panics_still_reach_the_previous_hook() {
    let tmp = tempfile::tempdir().unwrap();
    for file in ["db", "snap.000000000000232E", "conf", "commits"] {
        std::fs::write(tmp.path().join(file), b"x").unwrap();
    }
    let err = contain_panics(tmp.path(), || -> Result<(), JournalError> {
        panic!("sled says no")
    })
    .unwrap_err();
    assert!(
        matches!(&err, JournalError::StorePanicked { message, files, .. }
            if message == "sled says no" && files == &["db", "snap.000000000000232E"]),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("(db, snap.000000000000232E)"),
        "the refusal names the files sled was reading: {err}"
    );
    assert!(err.is_damage());
    let outside = std::panic::catch_unwind(|| panic!("not sled"));
    assert!(outside.is_err());
}

/// A repair of a journal a running controller holds touches nothing (it is never taken for a
/// store sled cannot open, whose files a repair moves aside).
#[test]
fn a_repair_of_a_held_journal_is_refused_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 20, 5);
    j.flush().unwrap();
    let before = dir_state(tmp.path());
    for mode in [RepairMode::DryRun, RepairMode::Keep, RepairMode::Truncate] {
        let err = Journal::repair(tmp.path(), JournalOptions::default(), mode).unwrap_err();
        assert!(
            matches!(err, JournalError::Locked { .. }),
            "{mode:?}: {err:?}"
        );
        assert_eq!(dir_state(tmp.path()), before, "{mode:?}");
    }
    drop(j);
}

/// sled meeting the end of a file it expected more of (a `db` cut short, found by the
/// controller-journal damage sweep) is named as damage to that file, never a bare I/O error.
#[test]
fn a_log_cut_short_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let eof = std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "failed to fill whole buffer",
    );
    match inspect::store_error(tmp.path(), sled::Error::Io(eof)) {
        JournalError::StoreDamaged { path, reason } => {
            assert_eq!(path, tmp.path().join("db"));
            assert!(reason.contains("cut short"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The same end met while reading after the open (counting a chunk's batches).
    let eof = std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "failed to fill whole buffer",
    );
    let read = JournalError::storage("counting a chunk's batches")(sled::Error::Io(eof));
    match inspect::name_store_damage(tmp.path(), read) {
        JournalError::StoreDamaged { path, reason } => {
            assert_eq!(path, tmp.path().join("db"));
            assert!(reason.contains("cut short"), "{reason}");
            assert!(reason.contains("counting a chunk's batches"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// The engine snapshot a seal witnessed, then gone from the store (as sled drops damage at
/// the end of its log): every open says so, with the snapshot recovery falls back to, and a
/// writable open witnesses what is left, so the next start is quiet.
#[test]
fn an_engine_snapshot_gone_from_the_store_is_reported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 20, 10);
    j.write_snapshot(10, Timestamp(1), b"ten").unwrap();
    j.write_snapshot(20, Timestamp(2), b"twenty").unwrap();
    j.seal().unwrap();
    let newest = j.snapshots.as_ref().unwrap();
    newest.remove(seq_key(20)).unwrap();
    j.db.flush().unwrap();
    drop(j);
    let lost_snapshot = LostSnapshot {
        through_seq: 20,
        newest_left: Some(10),
    };
    let lost = Some(lost_snapshot);
    let (j, report) = Journal::open_read_only(tmp.path(), JournalOptions::default()).unwrap();
    assert_eq!(report.lost_snapshot, lost);
    drop(j);
    let (j, report) = open(tmp.path());
    assert_eq!(report.lost_snapshot, lost);
    assert!(
        lost_snapshot
            .to_string()
            .contains("replays from the snapshot through record 10"),
        "{lost_snapshot}"
    );
    assert_eq!(j.latest_snapshot().unwrap().unwrap().through_seq, 10);
    drop(j);
    let (_, report) = open(tmp.path());
    assert_eq!(report.lost_snapshot, None, "said once");
}

/// A seal with no engine snapshot stored witnesses none: nothing is reported lost.
#[test]
fn a_journal_without_engine_snapshots_reports_none_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 5, 5);
    j.seal().unwrap();
    drop(j);
    let (_, report) = open(tmp.path());
    assert_eq!(report.lost_snapshot, None);
}
