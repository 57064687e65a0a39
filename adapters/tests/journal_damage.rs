//! The differential damage sweep: a real controller journal (from a run over HTTP against
//! `sim serve`, restarted once so sled has written its snapshot file, with an engine snapshot)
//! is copied and damaged in every file, in every form, and `lifecycle run` is restarted on
//! it twice in a row, as Kubernetes restarts a pod. The property, per case:
//!
//! * **recovered**: both restarts start and every committed record reads back unchanged; or
//! * **refused durably**: both restarts refuse with the same error, which names the damaged
//!   file or the records, and the journal's files (names, modes, bytes) are exactly as the
//!   damage left them. `log repair --dry-run` then changes nothing, and `log repair
//!   --truncate` brings the journal back to a state a restart accepts.
//!
//! Anything else is a violation: a restart that comes back with fewer or different records
//! and no error (silent loss), a refusal that changed the files (destructive), or a refusal
//! that does not last. Run as root, the restarts run as `nobody` (setpriv), so a file with
//! mode 000 is really unreadable, as it is for the controller's own user in a pod.
//!
//! `JOURNAL_DAMAGE_LIFECYCLE=PATH` runs the restarts with another build of `lifecycle` (an
//! older release, to see the sweep catch what it got wrong).

use engine::journal::{Journal, JournalOptions};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unprivileged user restarts run as when the test runs as root.
const NOBODY: u32 = 65534;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Form {
    /// One bit flipped at this fraction (in quarters) of the file; 4 = its last byte.
    Flip(u8),
    /// Cut to half its length.
    TruncateHalf,
    /// Its last byte cut.
    TruncateLastByte,
    Delete,
    /// 512 bytes of garbage appended.
    Append,
    ZeroLength,
    /// Mode 000: unreadable to the controller's user.
    Chmod000,
}

impl Form {
    const ALL: [Form; 10] = [
        Form::Flip(1),
        Form::Flip(2),
        Form::Flip(3),
        Form::Flip(4),
        Form::TruncateHalf,
        Form::TruncateLastByte,
        Form::Delete,
        Form::Append,
        Form::ZeroLength,
        Form::Chmod000,
    ];

    fn name(self) -> String {
        match self {
            Form::Flip(q) => format!("flip@{q}/4"),
            Form::TruncateHalf => "truncate/2".into(),
            Form::TruncateLastByte => "truncate-1".into(),
            Form::Delete => "delete".into(),
            Form::Append => "append".into(),
            Form::ZeroLength => "zero-length".into(),
            Form::Chmod000 => "chmod-000".into(),
        }
    }

    fn apply(self, path: &Path) {
        let mut bytes = std::fs::read(path).unwrap();
        match self {
            Form::Flip(q) => {
                if bytes.is_empty() {
                    return;
                }
                let at = if q == 4 {
                    bytes.len() - 1
                } else {
                    bytes.len() * usize::from(q) / 4
                };
                bytes[at] ^= 0x10;
            }
            Form::TruncateHalf => bytes.truncate(bytes.len() / 2),
            Form::TruncateLastByte => {
                bytes.pop();
            }
            Form::Delete => return std::fs::remove_file(path).unwrap(),
            Form::Append => bytes.extend_from_slice(&[0xa5; 512]),
            Form::ZeroLength => bytes.clear(),
            Form::Chmod000 => {
                return std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o000))
                    .unwrap();
            }
        }
        std::fs::write(path, bytes).unwrap();
    }
}

/// The kind of file, for the table (every blob is one row).
fn kind(file: &Path) -> String {
    let name = file.to_string_lossy();
    if name.starts_with("blobs/") {
        "blobs/*".into()
    } else if name.starts_with("snap.") {
        "snap.*".into()
    } else {
        name.into_owned()
    }
}

/// `(seq, crc of time and payload)` of every record, read in place read-only.
fn fingerprints(dir: &Path) -> Result<Vec<(u64, u32)>, String> {
    let (journal, _) =
        Journal::open_read_only(dir, JournalOptions::default()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    journal
        .for_each_record(journal.first_kept_seq(), |r| {
            let mut h = crc32fast::Hasher::new();
            h.update(&r.at.0.to_le_bytes());
            h.update(r.payload);
            out.push((r.seq, h.finalize()));
            ControlFlow::Continue(())
        })
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// Every file's path, mode and bytes.
fn state(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let md = entry.metadata().unwrap();
            let rel = entry.path().strip_prefix(dir).unwrap().to_path_buf();
            if md.is_dir() {
                dirs.push(entry.path());
                out.push((rel, md.permissions().mode(), Vec::new()));
            } else {
                out.push((
                    rel,
                    md.permissions().mode(),
                    std::fs::read(entry.path()).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn journal_files(dir: &Path) -> Vec<PathBuf> {
    state(dir)
        .into_iter()
        .filter(|(_, mode, _)| mode & 0o170000 == 0o100000)
        .map(|(p, _, _)| p)
        .collect()
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
    std::fs::set_permissions(dst, std::fs::metadata(src).unwrap().permissions()).unwrap();
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Runs `lifecycle` as the controller's user: `nobody` when the test is root.
struct Runner {
    binary: PathBuf,
    /// `JOURNAL_DAMAGE_LIFECYCLE` names another build.
    other_build: bool,
    as_nobody: bool,
    kubeconfig: PathBuf,
}

impl Runner {
    fn new(dir: &Path) -> Runner {
        let as_nobody = is_root();
        // The build directory may not be reachable by `nobody` (CI keeps it under $HOME).
        let binary = dir.join("lifecycle");
        let other = std::env::var_os("JOURNAL_DAMAGE_LIFECYCLE");
        let other_build = other.is_some();
        let built = other.map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_lifecycle")),
            PathBuf::from,
        );
        if std::fs::hard_link(&built, &binary).is_err() {
            std::fs::copy(&built, &binary).unwrap();
        }
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        // Nothing listens on port 9: the restart opens its journal, then fails to list (in
        // `--mode shadow`: `alone` would first refuse, unable to read CAPI's Lease).
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
        )
        .unwrap();
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644)).unwrap();
        Runner {
            binary,
            other_build,
            as_nobody,
            kubeconfig,
        }
    }

    fn command(&self) -> Command {
        if self.as_nobody {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
            ])
            .arg(&self.binary);
            c
        } else {
            Command::new(&self.binary)
        }
    }

    /// Gives the journal to the user the restarts run as.
    fn own(&self, dir: &Path) {
        if self.as_nobody {
            let chown = Command::new("chown")
                .arg("-R")
                .arg(format!("{NOBODY}:{NOBODY}"))
                .arg(dir)
                .status()
                .unwrap();
            assert!(chown.success());
        }
    }

    /// A restart of the controller on `journal`: `Ok` if it started, the error otherwise.
    fn restart(&self, journal: &Path) -> Result<(), String> {
        let out = self
            .command()
            .args(["run", "--run-for", "0", "--metrics-addr", "127.0.0.1:0"])
            .args(["--mode", "shadow"])
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--journal")
            .arg(journal)
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        // The verdict, without sled's own timestamped log lines.
        let err = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("lifecycle run:"))
            .collect::<Vec<_>>()
            .join("\n");
        match out.status.code() {
            Some(0) => Ok(()),
            Some(3) => Err(err),
            other => Err(format!("(exit {other:?}, 3 expected) {err}")),
        }
    }

    fn log(&self, args: &[&str], journal: &Path) -> (i32, String) {
        let out = self
            .command()
            .arg("log")
            .args(args)
            .arg("--journal")
            .arg(journal)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

/// The source: a controller's journal from a run over HTTP, restarted once (sled writes its
/// snapshot file on open), with an engine snapshot of its state.
fn controller_journal(root: &Path, runner: &Runner) -> PathBuf {
    let journal = root.join("source");
    let run = Command::new(&runner.binary)
        .args(["sim", "run"])
        .arg(format!(
            "{}/../scenarios/deletion-order-of-actions.yaml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(["--over-http", "--speed", "100", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    // Another build's journal is left as that build wrote it (this one would upgrade it).
    if !runner.other_build {
        let (mut j, _) = Journal::open(&journal, JournalOptions::default()).unwrap();
        let restored = engine::recovery::restore(&j).unwrap();
        let e = restored.engine;
        j.write_snapshot(e.applied_seq(), e.now(), &e.encode_state())
            .unwrap();
    }
    runner.own(&journal);
    runner.restart(&journal).unwrap();
    journal
}

#[derive(Debug, Default)]
struct Tally {
    recovered: usize,
    refused: usize,
    violations: Vec<String>,
}

#[test]
fn every_damage_to_a_controller_journal_recovers_every_record_or_refuses_durably() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let runner = Runner::new(tmp.path());
    let source = controller_journal(tmp.path(), &runner);
    let committed = fingerprints(&source).unwrap();
    assert!(committed.len() > 20, "{committed:?}");
    let files = journal_files(&source);
    let needed: &[&str] = if runner.other_build {
        &["conf", "db", "commits"]
    } else {
        &["conf", "db", "commits", "commits.mirror"]
    };
    for needed in needed {
        assert!(files.iter().any(|f| f == Path::new(*needed)), "{files:?}");
    }
    assert!(files.iter().any(|f| f.starts_with("blobs")), "{files:?}");
    assert!(
        files
            .iter()
            .any(|f| f.to_string_lossy().starts_with("snap.")),
        "{files:?}"
    );
    /// A damage: the form's name and the file's kind (the table's row), and what to do
    /// (`None`: leave an unfinished sled snapshot file).
    type Case = (String, String, Option<(PathBuf, Form)>);
    let mut cases: Vec<Case> = files
        .iter()
        .flat_map(|f| {
            Form::ALL
                .iter()
                .map(move |&form| (form.name(), kind(f), Some((f.clone(), form))))
        })
        .collect();
    cases.push(("leftover .generating".into(), "snap.*".into(), None));
    let mut table: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for (i, (form_name, file_kind, damage)) in cases.into_iter().enumerate() {
        let case = tmp.path().join(format!("case-{i}"));
        copy_dir(&source, &case);
        runner.own(&case);
        let what = match &damage {
            Some((file, form)) => {
                form.apply(&case.join(file));
                format!("{} {}", form.name(), file.display())
            }
            None => {
                let leftover = case.join("snap.FFFFFFFFFFFFFFFF.generating");
                std::fs::write(&leftover, b"").unwrap();
                std::fs::set_permissions(&leftover, std::fs::Permissions::from_mode(0o644))
                    .unwrap();
                "leftover snap.*.generating".to_string()
            }
        };
        let tally = table.entry((form_name, file_kind)).or_default();
        let before = state(&case);
        let first = runner.restart(&case);
        let after_first = state(&case);
        let second = runner.restart(&case);
        let after_second = state(&case);
        match (&first, &second) {
            (Ok(()), Ok(())) => match fingerprints(&case) {
                Ok(read)
                    if read.len() >= committed.len()
                        && read[..committed.len()] == committed[..] =>
                {
                    tally.recovered += 1;
                }
                Ok(read) => tally.violations.push(format!(
                    "{what}: silent loss: {} of {} committed records read back after two restarts",
                    read.len(),
                    committed.len()
                )),
                Err(e) => tally.violations.push(format!(
                    "{what}: restarts succeeded but the journal reads back with {e}"
                )),
            },
            (Err(e1), Err(e2)) => {
                let named = damage.as_ref().is_none_or(|(file, _)| {
                    let name = file.to_string_lossy();
                    e1.contains(&*name) || (name.starts_with("blobs/") && e1.contains("blobs"))
                });
                if before != after_first || before != after_second {
                    tally.violations.push(format!(
                        "{what}: a refusing start changed the journal's files: {e1}"
                    ));
                } else if e1 != e2 {
                    tally
                        .violations
                        .push(format!("{what}: two refusals differ: {e1} / {e2}"));
                } else if !named {
                    tally
                        .violations
                        .push(format!("{what}: the refusal names no file or record: {e1}"));
                } else if let Err(problem) = repair_then_restart(&runner, &case, e1, &committed) {
                    tally.violations.push(format!("{what}: {problem}"));
                } else {
                    tally.refused += 1;
                }
            }
            (first, second) => tally.violations.push(format!(
                "{what}: the two restarts disagree: {first:?} then {second:?}"
            )),
        }
        std::fs::remove_dir_all(&case).unwrap();
    }
    let mut report =
        String::from("form                  file             recovered  refused  violations\n");
    let mut violations = Vec::new();
    for ((form, file), t) in &table {
        report.push_str(&format!(
            "{form:<21} {file:<16} {:>9} {:>8} {:>11}\n",
            t.recovered,
            t.refused,
            t.violations.len()
        ));
        violations.extend(t.violations.iter().cloned());
    }
    println!("{report}");
    assert!(violations.is_empty(), "{report}\n{}", violations.join("\n"));
    let leftover = &table[&("leftover .generating".to_string(), "snap.*".to_string())];
    assert_eq!(
        leftover.recovered, 1,
        "an unfinished sled snapshot file is never fatal"
    );
}

/// After a durable refusal: a dry run lists what a repair does and changes nothing; the
/// repair (with `--truncate` where records must go) leaves a journal a restart accepts. A file
/// that cannot be read is the operator's to fix (its mode): once fixed, every record is back.
fn repair_then_restart(
    runner: &Runner,
    journal: &Path,
    refusal: &str,
    committed: &[(u64, u32)],
) -> Result<(), String> {
    let before = state(journal);
    if refusal.contains("cannot be read") {
        let (code, text) = runner.log(&["repair", "--dry-run"], journal);
        if code != 3 || !text.contains("cannot be read") || state(journal) != before {
            return Err(format!(
                "log repair --dry-run on an unreadable file: exit {code}, {text}"
            ));
        }
        for (path, mode, _) in &before {
            if mode & 0o777 == 0 {
                std::fs::set_permissions(
                    journal.join(path),
                    std::fs::Permissions::from_mode(0o600),
                )
                .unwrap();
            }
        }
        runner
            .restart(journal)
            .map_err(|e| format!("its mode fixed, a restart still refuses: {e}"))?;
        return match fingerprints(journal) {
            Ok(read) if read.len() >= committed.len() && read[..committed.len()] == *committed => {
                Ok(())
            }
            other => Err(format!(
                "its mode fixed, the journal reads back {:?} of {} records",
                other.map(|r| r.len()),
                committed.len()
            )),
        };
    }
    let (code, text) = runner.log(&["repair", "--dry-run"], journal);
    if code != 0 {
        return Err(format!("log repair --dry-run exited {code}: {text}"));
    }
    if state(journal) != before {
        return Err(format!("log repair --dry-run changed the journal: {text}"));
    }
    let (code, text) = runner.log(&["repair", "--truncate"], journal);
    if code != 0 {
        return Err(format!("log repair --truncate exited {code}: {text}"));
    }
    runner
        .restart(journal)
        .map_err(|e| format!("after log repair --truncate ({text}) a restart refuses: {e}"))
}

/// `lifecycle run` killed (SIGKILL) at points spread over its journal's creation, each time on
/// a new directory, then restarted twice: every restart starts. A kill between sled creating
/// its files and the commit record being written once left a journal no start would open again
/// ("no sled database to open read-only (its meta page is missing)"), a pod in a crash loop
/// for good. The states each kill point leaves are pinned one by one in the engine's
/// `journal::creation_tests`; this runs the real binary through them.
#[test]
fn a_controller_killed_while_creating_its_journal_starts_again() {
    let tmp = tempfile::tempdir().unwrap();
    let runner = Runner::new(tmp.path());
    let root = tmp.path().join("kills");
    std::fs::create_dir(&root).unwrap();
    runner.own(&root);
    let mut cut_short = 0;
    for step in 0..30u64 {
        let journal = root.join(format!("j{step}"));
        let mut child = runner
            .command()
            .args(["run", "--run-for", "0", "--metrics-addr", "127.0.0.1:0"])
            .args(["--mode", "shadow"])
            .arg("--kubeconfig")
            .arg(&runner.kubeconfig)
            .arg("--journal")
            .arg(&journal)
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_micros(step * 700));
        // setpriv execs the binary: the pid is the controller's.
        let _ = child.kill();
        let _ = child.wait();
        if journal.join("conf").exists() && !journal.join("commits").exists() {
            cut_short += 1;
        }
        for restart in 1..=2 {
            if let Err(e) = runner.restart(&journal) {
                panic!("killed after {} µs, restart {restart}: {e}", step * 700);
            }
        }
    }
    eprintln!("{cut_short} of 30 kills cut the journal's creation short");
}

/// The pair sweep's name for both commit copies damaged the same way.
const BOTH_COPIES: &str = "commits*";

/// A damage of the pair sweep: a single-file form, or one only a commit copy has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PairForm {
    Single(Form),
    /// Cut back to its header entry: nothing committed.
    CutToHeader,
    /// Its last entry removed whole.
    DropLastEntry,
}

impl PairForm {
    /// Chmod is the operator's to fix and root reads through it in process: left to the
    /// single-file sweep, which runs the restarts as `nobody`.
    fn for_file(file: &Path) -> Vec<PairForm> {
        let mut forms: Vec<PairForm> = Form::ALL
            .into_iter()
            .filter(|f| *f != Form::Chmod000)
            .map(PairForm::Single)
            .collect();
        if file.to_string_lossy().starts_with("commits") {
            forms.extend([PairForm::CutToHeader, PairForm::DropLastEntry]);
        }
        forms
    }

    fn name(self) -> String {
        match self {
            PairForm::Single(f) => f.name(),
            PairForm::CutToHeader => "header-only".into(),
            PairForm::DropLastEntry => "drop-last-entry".into(),
        }
    }

    /// Applies to `file` in `journal`, or to both commit copies for [`BOTH_COPIES`].
    fn apply_to(self, journal: &Path, file: &Path) {
        if file == Path::new(BOTH_COPIES) {
            self.apply(&journal.join("commits"));
            self.apply(&journal.join("commits.mirror"));
        } else {
            self.apply(&journal.join(file));
        }
    }

    fn apply(self, path: &Path) {
        const ENTRY_BYTES: usize = 40;
        let cut = |keep: fn(usize) -> usize| {
            let bytes = std::fs::read(path).unwrap();
            std::fs::write(path, &bytes[..keep(bytes.len()).min(bytes.len())]).unwrap();
        };
        match self {
            PairForm::Single(f) => f.apply(path),
            PairForm::CutToHeader => cut(|_| ENTRY_BYTES),
            PairForm::DropLastEntry => cut(|n| n.saturating_sub(ENTRY_BYTES).max(ENTRY_BYTES)),
        }
    }
}

/// `f` on a thread of its own, given at most a minute: sled spins on some damage, and a
/// sweep case that never ends is a finding, not a hung CI.
fn bounded<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .map_err(|_| format!("{what} did not finish within 60 s"))
}

/// A start: in process, or with `JOURNAL_PAIRS_THROUGH_BINARY=1` through `lifecycle run`
/// itself as the controller's user (the full matrix, minutes: its table goes in a note).
fn start(runner: &Runner, journal: &Path) -> Result<(), String> {
    if std::env::var_os("JOURNAL_PAIRS_THROUGH_BINARY").is_some() {
        runner.own(journal);
        return runner.restart(journal);
    }
    start_in_process(journal)
}

/// What a start in process (the path `lifecycle run` takes: [`SledLog::open`]) did.
fn start_in_process(journal: &Path) -> Result<(), String> {
    adapters::kube::journal_log::SledLog::open(journal)
        .map(drop)
        .map_err(|e| e.replace(&journal.display().to_string(), "<journal>"))
}

/// What `log verify` would say: `Ok` only when the journal opens read-only, verifies clean
/// and every record it holds reads back.
fn verify_in_process(journal: &Path) -> Result<(), String> {
    let dir = journal.to_path_buf();
    let report = bounded("verify", move || {
        Journal::open_read_only(&dir, JournalOptions::default()).map(|(j, _)| j.verify())
    })?
    .map_err(|e| e.to_string())?;
    if !report.is_clean() {
        return Err(format!("{:?}", report.problems.first()));
    }
    if report.committed_through > report.last_seq.unwrap_or(0) {
        return Err("committed records missing".into());
    }
    Ok(())
}

/// The journals the pair sweep damages: one `sim run` writes (buffered, small) and one a
/// controller wrote (durable, with blob and `snap.*` files and an engine snapshot).
fn pair_sources(root: &Path, runner: &Runner) -> Vec<(&'static str, PathBuf)> {
    let sim = root.join("sim-run");
    let run = Command::new(&runner.binary)
        .args(["sim", "run"])
        .arg(format!(
            "{}/../scenarios/deletion-pdb-blocks-until-rescheduled.yaml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg("--journal")
        .arg(&sim)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    vec![
        ("sim run", sim),
        ("lifecycle run", controller_journal(root, runner)),
    ]
}

/// Two damages at once, in process. The property, per case: both starts recover every
/// committed record, or both refuse with the same error and every file byte-identical (size
/// and mode included); and `verify` predicts the start (`ok` never where the start refuses or
/// comes back shorter). Pairs: both commit copies, a commit copy with `db`, with a blob, with
/// `snap.*`, and `db` with `snap.*`, every form on each side.
#[test]
fn every_pair_of_damages_recovers_every_record_or_refuses_without_writing() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let runner = Runner::new(tmp.path());
    let mut table: BTreeMap<(String, String), Tally> = BTreeMap::new();
    let mut cases_run = 0;
    for (source_name, source) in pair_sources(tmp.path(), &runner) {
        let committed = fingerprints(&source).unwrap();
        let files = journal_files(&source);
        let find =
            |p: &dyn Fn(&str) -> bool| files.iter().find(|f| p(&f.to_string_lossy())).cloned();
        let commits = PathBuf::from("commits");
        let mirror = PathBuf::from("commits.mirror");
        let db = PathBuf::from("db");
        let blob = find(&|f| f.starts_with("blobs/"));
        let snap = find(&|f| f.starts_with("snap."));
        // `commits*`: the same damage to both copies (one mistake, a script or a bad restore,
        // cut both back alike), beside a second damage.
        let both = PathBuf::from(BOTH_COPIES);
        let mut pairs = vec![
            (commits.clone(), mirror.clone()),
            (commits.clone(), db.clone()),
            (mirror, db.clone()),
            (both.clone(), db.clone()),
        ];
        pairs.extend(blob.clone().map(|b| (commits.clone(), b)));
        pairs.extend(blob.map(|b| (both.clone(), b)));
        pairs.extend(snap.clone().map(|s| (commits.clone(), s)));
        pairs.extend(snap.clone().map(|s| (both.clone(), s)));
        pairs.extend(snap.map(|s| (db.clone(), s)));
        for (a, b) in pairs {
            for fa in PairForm::for_file(&a) {
                for fb in PairForm::for_file(&b) {
                    let what = format!(
                        "{source_name}: {} {} + {} {}",
                        fa.name(),
                        a.display(),
                        fb.name(),
                        b.display()
                    );
                    let row = (
                        format!("{source_name}: {} + {}", kind(&a), kind(&b)),
                        String::new(),
                    );
                    let tally = table.entry(row).or_default();
                    let case = tmp.path().join(format!("pair-{cases_run}"));
                    cases_run += 1;
                    copy_dir(&source, &case);
                    fa.apply_to(&case, &a);
                    fb.apply_to(&case, &b);
                    let predicted = verify_in_process(&case);
                    let before = state(&case);
                    let first = start(&runner, &case);
                    let after_first = state(&case);
                    let second = start(&runner, &case);
                    let after_second = state(&case);
                    match (&first, &second) {
                        (Ok(()), Ok(())) => match bounded("reading back", {
                            let case = case.clone();
                            move || fingerprints(&case)
                        })
                        .and_then(|r| r)
                        {
                            Ok(read) if read.len() >= committed.len() && read[..committed.len()] == committed[..] => {
                                tally.recovered += 1
                            }
                            other => tally.violations.push(format!(
                                "{what}: silent loss: {:?} of {} committed records read back after two starts",
                                other.map(|r| r.len()),
                                committed.len()
                            )),
                        },
                        (Err(e1), Err(e2)) => {
                            if before != after_first || before != after_second {
                                tally.violations.push(format!("{what}: a refusing start changed the journal's files: {e1}"));
                            } else if e1 != e2 {
                                tally.violations.push(format!("{what}: two refusals differ: {e1} / {e2}"));
                            } else if predicted.is_ok() {
                                tally.violations.push(format!("{what}: verify said ok but the start refused: {e1}"));
                            } else if !names_either(e1, &a, &b) {
                                tally.violations.push(format!("{what}: the refusal names neither damaged file: {e1}"));
                            } else {
                                if std::env::var_os("JOURNAL_PAIRS_VERBOSE").is_some() {
                                    println!("{what}: refused: {e1}");
                                }
                                tally.refused += 1;
                            }
                        }
                        (first, second) => tally.violations.push(format!(
                            "{what}: the two starts disagree: {first:?} then {second:?}"
                        )),
                    }
                    std::fs::remove_dir_all(&case).unwrap();
                }
            }
        }
    }
    let mut report = String::from(
        "pair                                        recovered  refused  violations\n",
    );
    let mut violations = Vec::new();
    for ((pair, _), t) in &table {
        report.push_str(&format!(
            "{pair:<43} {:>9} {:>8} {:>11}\n",
            t.recovered,
            t.refused,
            t.violations.len()
        ));
        violations.extend(t.violations.iter().cloned());
    }
    println!("{cases_run} cases\n{report}");
    assert!(violations.is_empty(), "{report}\n{}", violations.join("\n"));
}

/// Whether a refusal names one of the two files damaged (`commits*` is either copy; a blob
/// file or `blobs/`, a `snap.*` file by its name).
fn names_either(refusal: &str, a: &Path, b: &Path) -> bool {
    let names = |file: &Path| {
        let name = file.to_string_lossy();
        if name == BOTH_COPIES {
            refusal.contains("commits")
        } else if name.starts_with("blobs/") {
            refusal.contains("blobs")
        } else {
            refusal.contains(&*name)
        }
    };
    names(a) || names(b)
}

/// A journal the controller's user can read but not write (a volume mounted with the wrong
/// owner): the start is refused naming the path, and nothing grows (sled's writable open once
/// zero-extended `db` from 15 741 to 1 048 575 bytes before failing without a path).
#[test]
fn a_journal_the_controller_cannot_write_is_refused_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let runner = Runner::new(tmp.path());
    if !runner.as_nobody {
        eprintln!("not root: the journal's own user can always write it; nothing to check");
        return;
    }
    let journal = controller_journal(tmp.path(), &runner);
    let chown = Command::new("chown")
        .args(["-R", "0:0"])
        .arg(&journal)
        .status()
        .unwrap();
    assert!(chown.success());
    for (path, mode, _) in state(&journal) {
        let readable = if mode & 0o170000 == 0o040000 {
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(
            journal.join(path),
            std::fs::Permissions::from_mode(readable),
        )
        .unwrap();
    }
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = state(&journal);
    for start in 0..2 {
        let err = runner.restart(&journal).expect_err("refused");
        assert!(
            err.contains("cannot be written") && err.contains(&*journal.to_string_lossy()),
            "start {start}: {err}"
        );
        assert_eq!(state(&journal), before, "start {start}: nothing grows");
    }
}
