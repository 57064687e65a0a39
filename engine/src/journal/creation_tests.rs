//! A creation cut short is created again; anything that may hold a record is still refused.
//! From format 5 on a creation cut short is known by its identity file (stage `Creating`);
//! a journal whose identity says `Created` is never created again over, whatever is gone.

use super::commit::{COMMITS_FILE, COMMITS_MIRROR_FILE};
use super::tests::{append_n, dir_state, open, read_all};
use super::*;
use identity::IDENTITY_FILE;

/// A named change to a journal directory.
type Cut = (&'static str, Box<dyn Fn(&Path)>);

/// Who created the journal whose creation a kill cut short.
#[derive(Clone, Copy, Debug)]
enum Creator {
    /// This build: the identity file, written first, still says `Creating`.
    ThisBuild,
    /// A release before format 5: no identity file.
    Legacy,
}

/// A journal created in `dir` and closed, then changed by `cut` into what a kill during its
/// creation leaves.
fn created_then(dir: &Path, creator: Creator, cut: impl FnOnce(&Path)) {
    drop(open(dir));
    for name in [COMMITS_FILE, COMMITS_MIRROR_FILE] {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    match creator {
        Creator::ThisBuild => identity::write(
            dir,
            JOURNAL_FORMAT_VERSION,
            Stage::Creating,
            identity::Witness::default(),
        )
        .unwrap(),
        Creator::Legacy => std::fs::remove_file(dir.join(IDENTITY_FILE)).unwrap(),
    }
    cut(dir);
}

fn set_len(path: &Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(0).unwrap();
    f.set_len(len).unwrap();
}

/// What each kill point leaves: sled's files before its first flush (an empty or zeroed `db`,
/// `conf` alone after a cut-short clear), and sled flushed but no commit record (with or
/// without the primary copy's unrenamed `commits.new`).
fn kill_points() -> Vec<Cut> {
    vec![
        ("db empty", Box::new(|d: &Path| set_len(&d.join("db"), 0))),
        (
            "db zeroed",
            Box::new(|d: &Path| set_len(&d.join("db"), 8192)),
        ),
        (
            "conf alone",
            Box::new(|d: &Path| std::fs::remove_file(d.join("db")).unwrap()),
        ),
        ("no commit record", Box::new(|_: &Path| {})),
        (
            "commits.new unrenamed",
            Box::new(|d: &Path| {
                std::fs::write(d.join("commits.new"), b"partial").unwrap();
            }),
        ),
    ]
}

#[test]
fn a_creation_cut_short_at_any_point_is_created_again_and_survives_restarts() {
    let cases = [Creator::ThisBuild, Creator::Legacy]
        .into_iter()
        .flat_map(|c| kill_points().into_iter().map(move |k| (c, k)));
    for (creator, (point, cut)) in cases {
        let point = format!("{creator:?}, {point}");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("j");
        created_then(&dir, creator, cut);
        let before = dir_state(&dir);
        let err = Journal::open_read_only(&dir, JournalOptions::default()).unwrap_err();
        assert!(
            matches!(err, JournalError::CreationCutShort { .. }),
            "{point}: {err}"
        );
        assert_eq!(
            dir_state(&dir),
            before,
            "{point}: inspection writes nothing"
        );

        let (mut j, report) = Journal::open(&dir, JournalOptions::default())
            .unwrap_or_else(|e| panic!("{point}: the start after the kill: {e}"));
        assert!(report.created, "{point}");
        append_n(&mut j, 3, 2);
        drop(j);
        for restart in 0..2 {
            let (j, report) = open(&dir);
            assert!(!report.created, "{point}, restart {restart}");
            assert_eq!(report.committed_through, 3, "{point}, restart {restart}");
            let (records, err) = read_all(&j, 1);
            assert!(err.is_none() && records.len() == 3, "{point}: {err:?}");
            assert!(j.verify().is_clean(), "{point}");
        }
        assert!(!dir.join("commits.new").exists(), "{point}: leftovers go");
        assert!(
            matches!(
                identity::load(&dir),
                identity::Found::Read {
                    stage: Stage::Created,
                    ..
                }
            ),
            "{point}: the identity says the creation finished"
        );
    }
}

/// Two damages at once on a journal of this format with no blob or `snap.*` file (every
/// ordinary `sim run` journal): `db` and both commit copies deleted, emptied or zeroed. Before
/// the identity file, each was taken for a creation cut short and created again over: every
/// record lost with a WARN.
fn created_journal_losses() -> Vec<Cut> {
    let mut cases: Vec<Cut> = Vec::new();
    for (form, damage) in [("deleted", 0u8), ("emptied", 1), ("zeroed", 2)] {
        let what: &'static str =
            Box::leak(format!("db and both commit copies {form}").into_boxed_str());
        cases.push((
            what,
            Box::new(move |d: &Path| {
                let (mut j, _) = open(d);
                append_n(&mut j, 40, 1);
                drop(j);
                let blobs = std::fs::read_dir(d.join("blobs"));
                assert!(
                    blobs.is_err() || blobs.unwrap().next().is_none(),
                    "no blob file"
                );
                for name in ["db", COMMITS_FILE, COMMITS_MIRROR_FILE] {
                    let path = d.join(name);
                    match damage {
                        0 => std::fs::remove_file(&path).unwrap(),
                        1 => set_len(&path, 0),
                        _ => {
                            let len = std::fs::metadata(&path).unwrap().len();
                            set_len(&path, len)
                        }
                    }
                }
            }),
        ));
    }
    cases
}

/// Each case: what damage leaves, which must be refused by every start, unchanged.
#[test]
fn files_that_may_hold_a_record_are_never_taken_for_a_cut_short_creation() {
    let cases: Vec<Cut> = vec![
        (
            "records stored, commit record gone",
            Box::new(|d: &Path| {
                let (mut j, _) = open(d);
                append_n(&mut j, 5, 5);
                drop(j);
                for name in [COMMITS_FILE, COMMITS_MIRROR_FILE] {
                    std::fs::remove_file(d.join(name)).unwrap();
                }
            }),
        ),
        (
            "an emptied commits beside an empty store",
            Box::new(|d: &Path| {
                drop(open(d));
                std::fs::write(d.join(COMMITS_FILE), b"").unwrap();
                std::fs::remove_file(d.join(COMMITS_MIRROR_FILE)).unwrap();
            }),
        ),
        (
            "garbage in db, no commit record",
            Box::new(|d: &Path| {
                created_then(d, Creator::Legacy, |d| {
                    std::fs::write(d.join("db"), [0x5au8; 4096]).unwrap()
                })
            }),
        ),
        (
            "blob files, db emptied, no commit record",
            Box::new(|d: &Path| {
                let (mut j, _) = open(d);
                append_n(&mut j, 60, 30);
                drop(j);
                assert!(std::fs::read_dir(d.join("blobs")).unwrap().next().is_some());
                for name in [COMMITS_FILE, COMMITS_MIRROR_FILE] {
                    std::fs::remove_file(d.join(name)).unwrap();
                }
                set_len(&d.join("db"), 0);
            }),
        ),
    ];
    let cases = cases.into_iter().chain(created_journal_losses());
    for (what, make) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("j");
        make(&dir);
        let before = dir_state(&dir);
        for start in 0..2 {
            let err = Journal::open(&dir, JournalOptions::default())
                .map(|_| ())
                .expect_err(what);
            assert!(err.is_damage(), "{what}, start {start}: {err:?}");
            assert_eq!(
                dir_state(&dir),
                before,
                "{what}: a refused start writes nothing"
            );
        }
    }
}
