//! Two damages at once: what no single crash leaves is refused with nothing written, never
//! read back shorter with `ok`; a single damage to the identity file is repaired.

use super::commit::{COMMITS_FILE, COMMITS_MIRROR_FILE, ENTRY_BYTES};
use super::identity::{self, IDENTITY_FILE};
use super::tests::{append_n, dir_state, open};
use super::*;

fn cut_both_copies_to(dir: &Path, whole: &[u8], len: usize) {
    for name in [COMMITS_FILE, COMMITS_MIRROR_FILE] {
        std::fs::write(dir.join(name), &whole[..len]).unwrap();
    }
}

fn refused_twice_unchanged(dir: &Path) -> JournalError {
    let before = dir_state(dir);
    let mut last = None;
    for start in 0..2 {
        let err = Journal::open(dir, JournalOptions::default()).unwrap_err();
        assert!(err.is_damage(), "start {start}: {err:?}");
        assert_eq!(dir_state(dir), before, "a refused start writes nothing");
        last = Some(err);
    }
    last.unwrap()
}

/// Both copies cut back the same way: one entry is what a crash between sled's flush and the
/// commit record leaves (committed again on open); more is damage, refused, and `verify`
/// says so too.
#[test]
fn both_commit_copies_cut_back_by_more_than_one_append_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 10, 1);
    drop(j);
    let whole = std::fs::read(tmp.path().join(COMMITS_FILE)).unwrap();
    cut_both_copies_to(tmp.path(), &whole, whole.len() - ENTRY_BYTES);
    let (j, report) = open(tmp.path());
    assert_eq!((report.committed_through, report.next_seq), (10, 11));
    drop(j);

    for kept_entries in [0usize, 8] {
        cut_both_copies_to(tmp.path(), &whole, ENTRY_BYTES * (1 + kept_entries));
        let err = refused_twice_unchanged(tmp.path());
        assert!(
            matches!(err, JournalError::UncommittedAppends { committed, stored_last: 10, .. } if committed == kept_entries as u64),
            "{err:?}"
        );
        let (ro, _) = Journal::open_read_only(tmp.path(), JournalOptions::default()).unwrap();
        assert!(!ro.verify().is_clean(), "verify predicts the refusal");
    }
}

/// A buffered writer acknowledges appends before they are durable: whatever of them sled
/// holds beyond the commit record is kept on the next open, not taken for damage.
#[test]
fn a_buffered_writers_uncommitted_appends_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = JournalOptions {
        durability: Durability::Buffered,
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(tmp.path(), opts.clone()).unwrap();
    append_n(&mut j, 10, 1);
    drop(j);
    let (j, report) = Journal::open(tmp.path(), opts).unwrap();
    assert_eq!(report.next_seq, 11);
    assert!(j.verify().is_clean());
}

/// The identity file is the one witness of a finished creation: lost or damaged beside an
/// intact store and commit record, it is written again; a newer format is refused.
#[test]
fn a_lost_or_damaged_identity_beside_an_intact_journal_is_written_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 5, 1);
    drop(j);
    let path = tmp.path().join(IDENTITY_FILE);
    let good = std::fs::read(&path).unwrap();
    let damages: [&dyn Fn(); 3] = [
        &|| std::fs::remove_file(&path).unwrap(),
        &|| std::fs::write(&path, b"").unwrap(),
        &|| {
            let mut b = good.clone();
            b[6] ^= 1;
            std::fs::write(&path, b).unwrap()
        },
    ];
    for (i, damage) in damages.iter().enumerate() {
        damage();
        let (ro, _) = Journal::open_read_only(tmp.path(), JournalOptions::default()).unwrap();
        assert!(
            ro.verify().is_clean(),
            "damage {i}: the records are all there"
        );
        drop(ro);
        let (j, report) = open(tmp.path());
        assert_eq!(report.committed_through, 5, "damage {i}");
        drop(j);
        assert!(
            matches!(
                identity::load(tmp.path()),
                identity::Found::Read {
                    format: JOURNAL_FORMAT_VERSION,
                    stage: Stage::Created,
                    committed_through: 5,
                    ..
                }
            ),
            "damage {i}: written again, witnessing the commit record it checked"
        );
    }
    identity::write(
        tmp.path(),
        JOURNAL_FORMAT_VERSION + 1,
        Stage::Created,
        identity::Witness::default(),
    )
    .unwrap();
    let before = dir_state(tmp.path());
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(err, JournalError::UnknownFormat { found, .. } if found == JOURNAL_FORMAT_VERSION + 1),
        "{err:?}"
    );
    assert_eq!(dir_state(tmp.path()), before);
}

/// Every file of the journal deleted but the identity: its records are gone, said loudly.
#[test]
fn a_journal_whose_identity_outlived_its_files_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 5, 1);
    drop(j);
    for name in ["db", "conf", COMMITS_FILE, COMMITS_MIRROR_FILE] {
        std::fs::remove_file(tmp.path().join(name)).unwrap();
    }
    let err = refused_twice_unchanged(tmp.path());
    assert!(
        matches!(err, JournalError::CreatedButGone { .. }),
        "{err:?}"
    );
    let err = Journal::open_read_only(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(err, JournalError::CreatedButGone { .. }),
        "{err:?}"
    );
}

/// Backup: a point-in-time copy of the volume of a journal still open for appending (what a
/// VolumeSnapshot takes) opens as after a crash, with every acknowledged record.
#[test]
fn a_point_in_time_copy_of_an_open_journal_opens_as_after_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let (mut j, _) = open(&live);
    append_n(&mut j, 30, 3);
    let copy = super::tests::copy_dir(&live, tmp.path(), "backup");
    append_n(&mut j, 5, 1);
    drop(j);
    let (restored, report) = open(&copy);
    assert_eq!(report.committed_through, 30);
    assert_eq!(super::tests::read_all(&restored, 1).0.len(), 30);
    assert!(restored.verify().is_clean());
}

/// sled's iterator yields the same error forever when a blob it refers to is gone: `verify`
/// once looped on an engine snapshot's lost blob, growing without bound (found by the pair
/// sweep: a commit copy and that blob damaged together).
#[test]
fn verify_stops_at_an_engine_snapshot_whose_blob_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 5, 1);
    j.write_snapshot(5, Timestamp(50), &vec![7u8; 256 << 10])
        .unwrap();
    drop(j);
    // A restart: sled writes its `snap.*` file, which now points at the snapshot's blob.
    drop(open(tmp.path()));
    let blobs: Vec<_> = std::fs::read_dir(tmp.path().join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!blobs.is_empty(), "the snapshot is a blob");
    for b in blobs {
        std::fs::remove_file(b).unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = tmp.path().to_path_buf();
    std::thread::spawn(move || {
        let verdict = Journal::open_read_only(&dir, JournalOptions::default())
            .map(|(j, _)| j.verify().is_clean());
        let _ = tx.send(verdict.is_ok_and(|clean| clean));
    });
    let clean = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("verify returns");
    assert!(!clean, "a lost snapshot blob is reported");
}

/// A journal closed cleanly (`seal`) whose commit copies are both cut back the same way and
/// whose store lost its tail too: each damage alone looks like a crash, together they would
/// read back shorter with `ok`. The identity file's witness refuses it.
#[test]
fn both_copies_cut_back_below_what_a_clean_close_witnessed_are_refused() {
    let opts = JournalOptions {
        durability: Durability::Buffered,
        ..JournalOptions::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(tmp.path(), opts.clone()).unwrap();
    append_n(&mut j, 10, 1);
    j.seal().unwrap();
    drop(j);
    let whole = std::fs::read(tmp.path().join(COMMITS_FILE)).unwrap();
    cut_both_copies_to(tmp.path(), &whole, ENTRY_BYTES);
    let err = refused_twice_unchanged(tmp.path());
    assert!(
        matches!(
            err,
            JournalError::CommitCutBack {
                witnessed: 10,
                committed: 0
            }
        ),
        "{err:?}"
    );
    let (ro, _) = Journal::open_read_only(tmp.path(), opts).unwrap();
    assert!(!ro.verify().is_clean(), "verify predicts the refusal");
}

/// The way out of a commit record cut back: a dry run says what is lost, a repair that keeps
/// everything refuses, `--truncate` rewrites the commit record over the records the store
/// holds, and the next start accepts it.
#[test]
fn a_commit_record_cut_back_is_repaired_with_truncate_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = open(tmp.path());
    append_n(&mut j, 10, 1);
    j.seal().unwrap();
    drop(j);
    let whole = std::fs::read(tmp.path().join(COMMITS_FILE)).unwrap();
    cut_both_copies_to(tmp.path(), &whole, ENTRY_BYTES);
    refused_twice_unchanged(tmp.path());
    let before = dir_state(tmp.path());
    let dry = Journal::repair(tmp.path(), JournalOptions::default(), RepairMode::DryRun).unwrap();
    assert!(dry.discards_records(), "{dry:?}");
    assert!(
        dry.first_problem
            .as_deref()
            .is_some_and(|p| p.contains("1..10")),
        "{dry:?}"
    );
    assert_eq!(dir_state(tmp.path()), before, "a dry run changes nothing");
    let err = Journal::repair(tmp.path(), JournalOptions::default(), RepairMode::Keep).unwrap_err();
    assert!(
        matches!(err, JournalError::RepairDiscards { .. }),
        "{err:?}"
    );
    let done = Journal::repair_truncate(tmp.path(), JournalOptions::default()).unwrap();
    assert_eq!(done.kept_through, 10);
    let (j, report) = open(tmp.path());
    assert_eq!(report.committed_through, 10);
    assert_eq!(super::tests::read_all(&j, 1).0.len(), 10);
}
