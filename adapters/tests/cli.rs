//! The `lifecycle` binary as users run it: exit codes, messages, and the journal round trip.

use std::path::Path;
use std::process::Command;

fn lifecycle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lifecycle"))
}

fn scenarios() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

#[test]
fn the_embedded_default_scenario_replays_and_passes() {
    let out = lifecycle().args(["sim", "run"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("drain     Cordon"), "{text}");
    assert!(text.contains("ok: seed 0"), "{text}");
}

#[test]
fn a_simulated_run_keeps_a_journal_that_verifies_and_explains_itself() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j");
    let file = scenarios().join("deletion-pdb-blocks-until-rescheduled.yaml");
    let run = lifecycle()
        .args(["sim", "run"])
        .arg(&file)
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0));
    let verify = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(0), "{text}");
    assert!(text.contains("ok"), "{text}");
    let show = lifecycle()
        .args(["log", "show", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.contains("-> #") && text.contains("drain Evict Pod app/web-1@c1"),
        "{text}"
    );
    // The budget's refusal is journaled typed, with its numbers, and shown so.
    let show = lifecycle()
        .args(["log", "show", "--format", "json", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let refusals: Vec<serde_json::Value> = String::from_utf8_lossy(&show.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .flat_map(|r| r["refusals"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(!refusals.is_empty(), "no refusal journaled");
    for r in &refusals {
        assert_eq!(r["code"], 429, "{r}");
        let budget = &r["refusal"]["DisruptionBudget"]["budget"];
        assert_eq!(budget["name"], "web", "{r}");
        assert!(budget["healthyNeeded"].as_u64().is_some(), "{r}");
    }
}

#[test]
fn an_invalid_scenario_exits_2_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "name: bad\ntimeline:\n  - {at: 30, delete: {kind: Machine, name: m1}}\n",
    )
    .unwrap();
    let out = lifecycle()
        .args(["sim", "run"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml:3: timeline[0].at: \"30\" is not a duration (use 30s)"),
        "{err}"
    );
}

#[test]
fn a_failed_expectation_exits_1_and_says_what_was_seen() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wrong.yaml");
    let mut text =
        std::fs::read_to_string(scenarios().join("pre-drain-hook-holds-drain.yaml")).unwrap();
    text.push_str("  - {at: 10m, exists: {kind: Machine, name: m1}}\n");
    std::fs::write(&file, text).unwrap();
    let out = lifecycle()
        .args(["sim", "run"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Machine default/m1 exists; saw: it does not exist"),
        "{stdout}"
    );
}

#[test]
fn log_verify_on_a_missing_journal_is_a_clear_error() {
    let out = lifecycle()
        .args(["log", "verify", "--journal", "/nonexistent/journal"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no journal here"));
}

/// Records in [`simulated_journal`]: 53 when issue 12 was filed; the DrainBlocked event added
/// one, watching the drain kinds from the deletion on seven (their lists) and the status
/// phase written while they are listed two (the write, its answer): 57. The watch events of
/// objects the engine already held at their version, no longer journaled, were 17 of them.
const SIMULATED_RECORDS: u64 = 40;

/// A [`SIMULATED_RECORDS`]-record simulator journal.
fn simulated_journal(dir: &Path) -> std::path::PathBuf {
    let journal = dir.join("j");
    let run = lifecycle()
        .args(["sim", "run"])
        .arg(scenarios().join("deletion-pdb-blocks-until-rescheduled.yaml"))
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0));
    journal
}

fn files_with_mtimes(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let md = entry.metadata().unwrap();
            if md.is_dir() {
                dirs.push(entry.path());
            } else {
                let bytes = std::fs::read(entry.path()).unwrap();
                out.push((entry.path(), bytes, md.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn log_verify_names_records_lost_to_a_flipped_byte_and_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = simulated_journal(tmp.path());
    let db = journal.join("db");
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[5000] ^= 0xff;
    std::fs::write(&db, &bytes).unwrap();
    let out = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let missing = format!("..{SIMULATED_RECORDS} are missing: damage at record");
    assert!(err.contains(&missing), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ok"));
}

/// The user inspection runs as: `nobody` when the tests run as root (root reads any file
/// whatever its mode), so the journal's read-only modes are really in force. The binary is
/// linked into `dir` (the build directory may be unreachable for `nobody`).
fn as_another_user(dir: &Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    let binary = dir.join("lifecycle");
    if !binary.exists() {
        if std::fs::hard_link(env!("CARGO_BIN_EXE_lifecycle"), &binary).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_lifecycle"), &binary).unwrap();
        }
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&binary);
        c
    } else {
        Command::new(binary)
    }
}

#[test]
fn log_commands_read_a_read_only_journal_of_another_user_and_change_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let journal = simulated_journal(tmp.path());
    let before = files_with_mtimes(&journal);
    for (path, _, _) in &before {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    std::fs::set_permissions(
        journal.join("blobs"),
        std::fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o555)).unwrap();
    for command in ["verify", "stats", "show"] {
        let out = as_another_user(tmp.path())
            .args(["log", command, "--journal"])
            .arg(&journal)
            .env("TMPDIR", tmp.path().join("no-such-dir"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{command}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if command == "verify" {
            assert!(
                text.contains(&format!(
                    "checked in place, read-only; its commit record covers records 1..{SIMULATED_RECORDS}"
                )),
                "{text}"
            );
        }
    }
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(files_with_mtimes(&journal), before);
}

/// The reproduction in one step: `: > commits; truncate -s N db; lifecycle log
/// verify`. The other copy of the commit record still vouches for every record, so the
/// records sled lost are named and verify fails; two starts in a row refuse and change
/// nothing; a dry-run repair says what would be lost.
#[test]
fn an_emptied_commit_record_and_a_cut_store_are_never_read_back_as_ok() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = simulated_journal(tmp.path());
    std::fs::write(journal.join("commits"), b"").unwrap();
    let db = journal.join("db");
    let len = std::fs::metadata(&db).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(len / 3)
        .unwrap();
    let verify = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert_eq!(verify.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("..{SIMULATED_RECORDS} are missing")),
        "{text}"
    );
    let before = files_with_mtimes(&journal);
    let kubeconfig = unreachable_kubeconfig(tmp.path());
    for _ in 0..2 {
        let run = lifecycle()
            .args(["run", "--run-for", "0", "--metrics-addr", "127.0.0.1:0"])
            .args(["--mode", "shadow"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--journal")
            .arg(&journal)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(3), "{err}");
        assert!(
            err.contains(&format!("..{SIMULATED_RECORDS} are missing")),
            "{err}"
        );
        assert!(err.contains("log repair --journal"), "{err}");
        assert_eq!(
            files_with_mtimes(&journal),
            before,
            "a refused start writes nothing"
        );
    }
    let dry = lifecycle()
        .args(["log", "repair", "--dry-run", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dry.stdout);
    assert_eq!(dry.status.code(), Some(0), "{text}");
    assert!(text.contains("would lose committed records"), "{text}");
    assert_eq!(
        files_with_mtimes(&journal),
        before,
        "a dry run writes nothing"
    );
}

fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    kubeconfig
}

/// `lifecycle run`'s exit codes: 2 for bad input, 3 when it cannot do its job.
#[test]
fn run_exits_2_on_a_bad_kubeconfig_and_3_on_a_locked_journal_or_a_port_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |kubeconfig: &Path, journal: &Path, metrics: &str| {
        let out = lifecycle()
            .args(["run", "--run-for", "0", "--metrics-addr", metrics])
            // Shadow: nothing answers, so `alone` would refuse before the journal (see modes.rs).
            .args(["--mode", "shadow"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--journal")
            .arg(journal)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let bad = tmp.path().join("bad-kubeconfig");
    std::fs::write(&bad, "this: [is not a kubeconfig").unwrap();
    let (code, err) = run(&bad, &tmp.path().join("j1"), "127.0.0.1:0");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("kubeconfig"), "{err}");
    let (code, err) = run(
        &tmp.path().join("missing"),
        &tmp.path().join("j1"),
        "127.0.0.1:0",
    );
    assert_eq!(code, Some(2), "{err}");
    let good = unreachable_kubeconfig(tmp.path());
    // A kubeconfig Secret suffix no Secret name can end with: refused before anything is read.
    let out = lifecycle()
        .args([
            "run",
            "--run-for",
            "0",
            "--kubeconfig-secret-suffix=-Lifecycle_",
        ])
        .arg("--kubeconfig")
        .arg(&good)
        .arg("--journal")
        .arg(tmp.path().join("j-suffix"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("kubeconfig Secret suffix"), "{err}");
    assert!(!tmp.path().join("j-suffix").exists());
    let held = tmp.path().join("held");
    let (_journal, _) =
        engine::journal::Journal::open(&held, engine::journal::JournalOptions::default()).unwrap();
    let (code, err) = run(&good, &held, "127.0.0.1:0");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("locked"), "{err}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = run(&good, &tmp.path().join("j2"), &addr);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("metrics server"), "{err}");
}

/// "N inputs journaled" from a run's verdict line.
fn journaled(text: &str) -> u64 {
    let verdict = text
        .lines()
        .rev()
        .find(|l| l.starts_with("ok: "))
        .expect("verdict");
    verdict
        .split(", ")
        .find_map(|part| part.strip_suffix(" inputs journaled"))
        .expect("journaled count")
        .parse()
        .expect("a number")
}

#[test]
fn a_batched_run_feeds_each_instants_inputs_as_batches_and_still_passes() {
    let file = scenarios().join("deletion-pdb-blocks-until-rescheduled.yaml");
    let run = |batch: bool| {
        let mut cmd = lifecycle();
        cmd.args(["sim", "run"]).arg(&file);
        if batch {
            cmd.arg("--batch");
        }
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (plain, batched) = (run(false), run(true));
    assert!(batched.contains("[after #"), "{batched}");
    assert!(batched.contains(": batch of "), "{batched}");
    assert!(journaled(&batched) < journaled(&plain), "{batched}");
}

#[test]
fn log_repair_truncate_keeps_the_good_records_and_verify_is_ok_after() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = simulated_journal(tmp.path());
    let db = journal.join("db");
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[11100] ^= 0xff;
    std::fs::write(&db, &bytes).unwrap();
    let refused = lifecycle()
        .args(["log", "repair", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(3));
    let out = lifecycle()
        .args(["log", "repair", "--truncate", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("lost: committed records ")
            && text.contains(&format!("..{SIMULATED_RECORDS}")),
        "{text}"
    );
    let verify = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(0), "{text}");
}

/// `lifecycle run` for two seconds against an API that refuses connections: it logs (the
/// metrics server, the failing lists) and stops on `--run-for`.
fn run_briefly(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let out = lifecycle()
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--journal")
        .arg(dir.path().join("journal"))
        .args(["--metrics-addr", "127.0.0.1:0", "--run-for", "2"])
        // Shadow: nothing answers, so `alone` would refuse before logging (see modes.rs).
        .args(["--mode", "shadow"])
        .args(extra)
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("serving /metrics, /healthz"), "{stderr}");
    stderr
}

#[test]
fn logs_written_to_a_file_carry_no_colour_codes() {
    let stderr = run_briefly(&[]);
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let stderr = run_briefly(&["--log-format", "json"]);
    for line in stderr.lines().filter(|l| !l.is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
    }
}

/// A journal of real engine inputs and states that retired records 1..16: 40 Ticks, one per
/// batch (chunks of 8), snapshots through 20 and 40, the newest 2 kept. With `flip`, record
/// 30 (kept) is damaged afterwards.
fn retained_journal(dir: &Path, flip: bool) -> std::path::PathBuf {
    use engine::journal::{Damage, Durability, Journal, JournalOptions};
    let path = dir.join("retained");
    let options = JournalOptions {
        durability: Durability::Buffered,
        snapshots_kept: 2,
        retire_records: true,
        ..JournalOptions::default()
    };
    let (mut journal, _) = Journal::open(&path, options).unwrap();
    let mut engine = engine::Engine::new();
    for i in 1..=40i64 {
        let at = engine::Timestamp(1_704_067_200_000 + i * 1000);
        let input = engine::Input::Tick;
        journal
            .append(at, &engine::recovery::encode_input(&input))
            .unwrap();
        engine.handle(at, input);
        if i % 20 == 0 {
            journal
                .write_snapshot(engine.applied_seq(), at, &engine.encode_state())
                .unwrap();
        }
    }
    assert_eq!(journal.retired_through(), 16);
    if flip {
        journal
            .damage_for_test(Damage::FlipRecord { seq: 30 })
            .unwrap();
    } else {
        journal.flush().unwrap();
    }
    path
}

#[test]
fn log_commands_say_which_records_were_retired_and_verify_is_ok() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = retained_journal(tmp.path(), false);
    let verify = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(0), "{text}");
    assert!(
        text.contains(": records 1..16 retired (kept from 17)")
            && text.contains("replayed from the oldest kept snapshot (through 20)")
            && text.contains("restored from snapshot through 40")
            && text.ends_with("ok\n"),
        "{text}"
    );
    let stats = lifecycle()
        .args(["log", "stats", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(
        text.contains("history        records 1..16 retired (kept from 17)")
            && text.contains("seq range      17..40"),
        "{text}"
    );
    let show = lifecycle()
        .args(["log", "show", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&show.stdout),
        String::from_utf8_lossy(&show.stderr),
    );
    assert_eq!(show.status.code(), Some(0), "{err}");
    assert!(
        err.contains("records 1..16 retired (kept from 17)"),
        "{err}"
    );
    assert!(out.trim_start().starts_with("21 "), "{out}");
}

#[test]
fn log_verify_still_names_damage_in_a_journal_with_retired_records() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = retained_journal(tmp.path(), true);
    let verify = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert_eq!(verify.status.code(), Some(1), "{text}");
    assert!(
        text.contains("committed records 17..40 are damaged") || text.contains("record 30"),
        "{text}"
    );
    assert!(!text.contains("\nok\n"), "{text}");
}

/// `sim generate` prints a fleet that loads as a scenario and runs: CLUSTERS x MACHINES
/// Machines, PODS pods per Node.
#[test]
fn sim_generate_prints_a_fleet_scenario_that_runs() {
    let out = lifecycle()
        .args([
            "sim",
            "generate",
            "--clusters",
            "2",
            "--machines",
            "3",
            "--pods",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("fleet.yaml");
    std::fs::write(&file, &out.stdout).unwrap();
    let scenario = sim::scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("\"kind\":\"Machine\",").count(), 6, "{text}");
    assert_eq!(scenario.workload.len(), 2);
    let run = lifecycle()
        .args(["sim", "run"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}

/// A scenario whose `management` list nests 15,000 levels deep, written in `style`.
fn too_deep_scenario(style: &str) -> String {
    const DEPTH: usize = 15_000;
    let nested = match style {
        "flow" => format!("{}{}\n", "[".repeat(DEPTH), "]".repeat(DEPTH)),
        "block" => format!("\n{}x\n", "- ".repeat(DEPTH)),
        "mapping" => (1..=DEPTH)
            .map(|level| format!("\n{}k:", " ".repeat(level)))
            .collect::<String>(),
        other => panic!("no style {other}"),
    };
    format!("name: deep\nmanagement: {nested}\n")
}

/// 15,000 nested lists or maps, in flow or block style, are refused as an invalid file (exit 2,
/// the file and line named) by `sim run` and `sim serve` alike, before the YAML loader could
/// overflow the stack.
#[test]
fn a_scenario_nested_too_deep_exits_2_from_run_and_serve() {
    let dir = tempfile::tempdir().unwrap();
    let max = sim::scenario::yaml::NESTING_DEPTH_MAX;
    for (style, line) in [("block", 3), ("mapping", max + 2), ("flow", 2)] {
        let file = dir.path().join(format!("{style}.yaml"));
        std::fs::write(&file, too_deep_scenario(style)).unwrap();
        let mut run = lifecycle();
        run.args(["sim", "run"]).arg(&file);
        let mut serve = lifecycle();
        serve.args(["sim", "serve"]).arg(&file);
        serve
            .arg("--kubeconfig-dir")
            .arg(dir.path().join("kubeconfigs"));
        for mut command in [run, serve] {
            let out = command.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{style} {command:?}: {err}");
            let expected = format!(
                "{style}.yaml:{line}: the YAML nests too deep (more than {max} levels of lists and maps)"
            );
            assert!(err.contains(&expected), "{style} {command:?}: {err}");
        }
    }
}

/// A scenario nesting exactly [`NESTING_DEPTH_MAX`] levels deep (a Cluster's spec holding a
/// deep list) runs, and `sim serve` serves it.
///
/// [`NESTING_DEPTH_MAX`]: sim::scenario::yaml::NESTING_DEPTH_MAX
#[test]
fn a_scenario_nested_to_the_limit_runs_and_is_served() {
    let dir = tempfile::tempdir().unwrap();
    // The scenario, `management`, the Cluster and its spec are four levels.
    let lists = sim::scenario::yaml::NESTING_DEPTH_MAX - 4;
    let deep = format!("{}1{}", "[".repeat(lists), "]".repeat(lists));
    let file = dir.path().join("deep.yaml");
    std::fs::write(
        &file,
        format!(
            "name: deep\nduration: 1m\nmanagement:\n  - apiVersion: cluster.x-k8s.io/v1beta2\n    \
             kind: Cluster\n    metadata: {{name: c1, namespace: default}}\n    spec: {{x: {deep}}}\n"
        ),
    )
    .unwrap();
    let run = lifecycle()
        .args(["sim", "run"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    let mut serve = lifecycle()
        .args(["sim", "serve"])
        .arg(&file)
        .arg("--kubeconfig-dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(serve.stdout.take().unwrap());
    let playing = std::io::BufRead::lines(stdout)
        .map_while(Result::ok)
        .any(|l| l.starts_with("playing"));
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(playing, "sim serve did not start serving the scenario");
}
