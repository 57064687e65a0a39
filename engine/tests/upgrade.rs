//! Upgrades: a journal written by an earlier release opens, resumes and verifies.
//!
//! `fixtures/journal-5b02b81/` was written by commit 5b02b81 (journal format 3: one copy of
//! the commit record, no header) as a controller writes it: 300 inputs appended one by one,
//! an engine snapshot every 60, two kept, records 1..240 retired by retention. Its engine state
//! after the last record hashes to `7e7d608b401f5449`.

use engine::journal::{
    COMMITS_MIRROR_FILE, JOURNAL_FORMAT_VERSION_NO_MIRROR, Journal, JournalOptions,
};
use engine::{Input, Timestamp, recovery};
use std::path::{Path, PathBuf};

const FIXTURE_STATE_HASH: u64 = 0x7e7d_608b_401f_5449;

fn fixture_copy(root: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal-5b02b81");
    let dst = root.join("journal");
    copy(&src, &dst);
    dst
}

fn copy(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy(&entry.path(), &dst.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
        }
    }
}

fn retaining() -> JournalOptions {
    JournalOptions {
        snapshots_kept: 2,
        retire_records: true,
        ..JournalOptions::default()
    }
}

#[test]
fn a_journal_written_by_5b02b81_with_retired_records_resumes_without_refusing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture_copy(tmp.path());
    // Read as it is first: nothing upgraded, nothing written.
    {
        let (j, report) = Journal::open_read_only(&dir, retaining()).unwrap();
        assert_eq!((report.retired_through, report.next_seq), (240, 301));
        assert!(j.verify().is_clean(), "{:?}", j.verify());
        assert!(!dir.join(COMMITS_MIRROR_FILE).exists());
    }
    let (mut j, report) = Journal::open(&dir, retaining()).unwrap();
    assert_eq!(report.upgraded_from, Some(JOURNAL_FORMAT_VERSION_NO_MIRROR));
    assert_eq!(
        (
            report.retired_through,
            report.committed_through,
            report.next_seq
        ),
        (240, 300, 301)
    );
    assert!(
        dir.join(COMMITS_MIRROR_FILE).exists(),
        "the second copy is written"
    );
    let restored = recovery::restore(&j).unwrap();
    assert_eq!(restored.snapshot_seq, Some(300));
    assert_eq!(restored.engine.state_hash(), FIXTURE_STATE_HASH);
    let mut engine = restored.engine;
    for i in 0..70i64 {
        let at = Timestamp(1_700_001_000_000 + i * 1_000);
        let seq = j.append(at, &recovery::encode_input(&Input::Tick)).unwrap();
        engine.handle(at, Input::Tick);
        if seq % 60 == 0 {
            j.write_snapshot(seq, engine.now(), &engine.encode_state())
                .unwrap();
        }
    }
    assert!(j.verify().is_clean(), "{:?}", j.verify());
    let hash = engine.state_hash();
    drop(j);
    let (j, report) = Journal::open(&dir, retaining()).unwrap();
    assert_eq!(report.upgraded_from, None, "upgraded once");
    assert_eq!(report.next_seq, 371);
    assert!(report.retired_through >= 240);
    assert_eq!(recovery::restore(&j).unwrap().engine.state_hash(), hash);
}
