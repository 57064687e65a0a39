//! Upgrades: a journal written by an earlier release opens, resumes and verifies.
//!
//! `fixtures/journal-5b02b81/` was written by commit 5b02b81 (journal format 3: one copy of
//! the commit record, no header) as a controller writes it: 300 inputs appended one by one,
//! an engine snapshot every 60, two kept, records 1..240 retired by retention. Its engine state
//! after the last record hashes to `7e7d608b401f5449`.

use engine::journal::{
    COMMITS_MIRROR_FILE, IDENTITY_FILE, JOURNAL_FORMAT_VERSION_NO_IDENTITY,
    JOURNAL_FORMAT_VERSION_NO_MIRROR, Journal, JournalOptions,
};
use engine::{Input, Timestamp, recovery};
use std::path::{Path, PathBuf};

/// The restored state's hash in this build's encoding (state version 6 added the deletion
/// controller's ownership: one byte, alone; version 7 its `--own-machines` selector and the
/// effects' withheld intents: one byte each, none and empty; version 10 the deletion
/// controller's judgement of CAPI's release: an empty release and supported, two bytes;
/// version 11 the store's tombstones of an earlier window: one byte, none; version 12 the
/// writes other writers undid: none; version 13 the Machines a takeover gave back for a fight:
/// one byte, none).
const FIXTURE_STATE_HASH: u64 = 0xcdb0_c9f8_2faf_af83;

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
    assert!(dir.join(IDENTITY_FILE).exists(), "the identity is written");
    let restored = recovery::restore(&j).unwrap();
    assert_eq!(restored.snapshot_seq, Some(300));
    assert_eq!(restored.engine.state_hash(), FIXTURE_STATE_HASH);
    assert_eq!(restored.engine.controllers().deletion.own_machines(), None);
    assert_eq!(
        restored.engine.controllers().deletion.capi_release(),
        &engine::ownership::CapiRelease::default(),
        "a state before version 10 judged no release: supported, as a takeover starts"
    );
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

/// `fixtures/state-v4/<scenario>/` were written by ac0b571 (engine state version 4) from the
/// journal of `lifecycle sim run scenarios/<scenario>.yaml`: `records.bin` holds its records,
/// `states-v4.bin` the engine state after each one, and `journal/` the same records appended
/// one by one with a snapshot every 15, two kept, the records before them retired.
const STATE_V4_SCENARIOS: [&str; 2] = [
    "deletion-pdb-blocks-until-rescheduled",
    "pre-drain-hook-holds-drain",
];

fn state_v4_fixture(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/state-v4")
        .join(scenario)
}

type Records = Vec<(u64, i64, Vec<u8>)>;

fn state_v4_records(scenario: &str) -> Records {
    let bytes = std::fs::read(state_v4_fixture(scenario).join("records.bin")).unwrap();
    engine::codec::decode(&bytes).unwrap()
}

/// The engine this build makes of the records up to `through` (all when `None`).
fn replayed(records: &Records, through: Option<u64>) -> engine::Engine {
    let mut engine = engine::Engine::new();
    for (seq, at, payload) in records {
        if through.is_some_and(|t| *seq > t) {
            break;
        }
        engine.handle(
            Timestamp(*at),
            recovery::decode_input(*seq, payload).unwrap(),
        );
        while engine.poll_command().is_some() {}
    }
    engine
}

#[test]
fn every_state_version_4_engine_migrates_to_what_its_records_rebuild() {
    for scenario in STATE_V4_SCENARIOS {
        let records = state_v4_records(scenario);
        let bytes = std::fs::read(state_v4_fixture(scenario).join("states-v4.bin")).unwrap();
        let states: Vec<(u64, Vec<u8>)> = engine::codec::decode(&bytes).unwrap();
        assert_eq!(states.len(), records.len());
        let mut live = engine::Engine::new();
        let mut with_commands_in_flight = 0;
        let mut migrations = 0;
        for ((seq, at, payload), (state_seq, v4)) in records.iter().zip(&states) {
            assert_eq!(seq, state_seq);
            live.handle(
                Timestamp(*at),
                recovery::decode_input(*seq, payload).unwrap(),
            );
            while live.poll_command().is_some() {}
            // Read as the current layout, an intent or a phase would be misread.
            let misread = engine::Engine::decode_state(v4).map(|e| e.state_hash());
            migrations += usize::from(misread != Ok(live.state_hash()));
            let migrated = engine::Engine::decode_state_of(4, v4)
                .unwrap_or_else(|e| panic!("{scenario} record {seq}: {e}"));
            // A migrated state knows no write that landed before it (version 12 keeps them),
            // nor a Machine given back for a fight (version 13).
            let mut rebuilt = live.clone();
            rebuilt.forget_write_history();
            rebuilt.forget_given_back();
            assert_eq!(
                migrated.state_hash(),
                rebuilt.state_hash(),
                "{scenario} record {seq}: the migrated state differs from the rebuilt one"
            );
            with_commands_in_flight += usize::from(migrated.in_flight_len() > 0);
        }
        assert!(
            with_commands_in_flight > 0,
            "{scenario}: no intent was migrated"
        );
        assert!(
            migrations * 2 > records.len(),
            "{scenario}: {migrations} of {} states needed migrating",
            records.len()
        );
    }
}

#[test]
fn a_state_version_4_journal_with_retired_records_resumes_from_its_migrated_snapshot() {
    for scenario in STATE_V4_SCENARIOS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("journal");
        copy(&state_v4_fixture(scenario).join("journal"), &dir);
        let records = state_v4_records(scenario);
        assert!(!dir.join(IDENTITY_FILE).exists(), "{scenario}: format 4");
        let (j, report) = Journal::open(&dir, retaining()).unwrap();
        assert_eq!(
            report.upgraded_from,
            Some(JOURNAL_FORMAT_VERSION_NO_IDENTITY),
            "{scenario}"
        );
        assert!(
            dir.join(IDENTITY_FILE).exists(),
            "{scenario}: upgraded to 5"
        );
        assert!(
            report.retired_through > 0,
            "{scenario}: records were retired"
        );
        let verified = recovery::verify(&j);
        assert!(verified.is_clean(), "{scenario}: {verified:?}");
        let restored = recovery::restore(&j).unwrap();
        assert!(
            restored.skipped_snapshots.is_empty(),
            "{:?}",
            restored.skipped_snapshots
        );
        let from = restored.snapshot_seq.expect("resumed from a snapshot");
        assert!(
            restored.replayed > 0,
            "{scenario}: the tail after {from} was replayed"
        );
        // The version 4 snapshot knows no write that landed before it (version 12 keeps them).
        let without_history = |mut e: engine::Engine| {
            e.forget_write_history();
            e.state_hash()
        };
        assert_eq!(
            without_history(restored.engine),
            without_history(replayed(&records, None)),
            "{scenario}: resumed from the version 4 snapshot through {from}"
        );
        assert_eq!(
            engine::Engine::decode_state_of(4, &j.latest_snapshot().unwrap().unwrap().state)
                .unwrap()
                .state_hash(),
            without_history(replayed(&records, Some(from)))
        );
    }
}
