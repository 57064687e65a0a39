//! `lifecycle explain` and `lifecycle log show --object`, as an operator runs them on the
//! journal a simulated run kept: each story pinned line by line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lifecycle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lifecycle"))
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(format!("{name}.yaml"))
}

/// The journal of `lifecycle sim run scenarios/<name>.yaml --journal DIR`.
fn journal(dir: &Path, name: &str) -> PathBuf {
    let journal = dir.join(name);
    let run = lifecycle()
        .args(["sim", "run"])
        .arg(scenario(name))
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    journal
}

fn run(args: &[&str], journal: &Path) -> Output {
    lifecycle()
        .args(args)
        .arg("--journal")
        .arg(journal)
        .output()
        .unwrap()
}

/// stdout of a command that must succeed.
fn ok(args: &[&str], journal: &Path) -> String {
    let out = run(args, journal);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_drain_blocked_by_a_pdb_names_the_pdb_its_numbers_and_the_retry() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pdb-blocks-until-rescheduled");
    // Record 16: web-0 is gone, web-1's eviction was refused and waits for its retry.
    let held = ok(&["explain", "machine", "default/m1", "--until", "16"], &j);
    insta::assert_snapshot!("pdb_blocked_drain_held", held);
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let indented: Vec<String> = held
        .lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("    {l}")
            }
        })
        .collect();
    assert!(
        readme.contains(&indented.join("\n")),
        "the README's example is this output"
    );
    let whole = ok(&["explain", "machine", "default/m1"], &j);
    insta::assert_snapshot!("pdb_blocked_drain_whole", whole);
}

#[test]
fn a_held_pre_terminate_hook_names_the_annotation_and_its_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pre-terminate-hook");
    // 00:05: the drain is done and the hook annotation is still there (removed at 00:08).
    let held = ok(
        &[
            "explain",
            "machine",
            "default/m1",
            "--at",
            "2024-01-01T00:05:00Z",
        ],
        &j,
    );
    insta::assert_snapshot!("pre_terminate_hook_held", held);
    let whole = ok(&["explain", "machine", "default/m1"], &j);
    insta::assert_snapshot!("pre_terminate_hook_whole", whole);
}

#[test]
fn an_mhc_remediation_chains_verdict_owner_deletion_and_replacement() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "mhc-full-loop-node-failure");
    let mhc = ok(&["explain", "mhc", "default/md-0-unhealthy"], &j);
    insta::assert_snapshot!("mhc_remediation_replaced", mhc);
    let machine = ok(&["explain", "machine", "default/w1"], &j);
    insta::assert_snapshot!("mhc_remediated_machine", machine);
}

#[test]
fn a_short_circuited_mhc_says_since_when_why_and_what_would_resume_it() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "mhc-unhealthy-range");
    let mhc = ok(&["explain", "mhc", "default/md-0-unhealthy"], &j);
    insta::assert_snapshot!("mhc_short_circuited", mhc);
    // A judged Machine says who holds its remediation.
    let machine = ok(&["explain", "machine", "default/w1"], &j);
    let now = &machine[machine.find("\nNow ").unwrap() + 1..];
    insta::assert_snapshot!("mhc_short_circuited_machine_now", now);
}

#[test]
fn a_pool_story_has_its_phases_and_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "pool-scale-up");
    let pool = ok(&["explain", "pool", "default/pool"], &j);
    let phases: Vec<&str> = pool
        .lines()
        .skip_while(|l| *l != "Phases")
        .take_while(|l| !l.is_empty())
        .collect();
    insta::assert_snapshot!("pool_phases", phases.join("\n"));
    assert!(
        pool.ends_with(
            "  phase Running, replicas 4, readyReplicas 4, availableReplicas 4, upToDateReplicas 4\n"
        ),
        "{pool}"
    );
}

#[test]
fn json_tells_the_same_story_as_text() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pdb-blocks-until-rescheduled");
    let text = ok(&["explain", "machine", "default/m1", "--until", "16"], &j);
    let json = ok(
        &[
            "explain",
            "machine",
            "default/m1",
            "--until",
            "16",
            "--format",
            "json",
        ],
        &j,
    );
    let story: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(story["object"], "Machine default/m1");
    assert_eq!(story["journal"]["last_seq"], 16);
    let phases = story["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 1, "{phases:?}");
    assert_eq!(phases[0]["reason"], "DrainingNode");
    assert_eq!(phases[0]["end"], serde_json::Value::Null);
    assert_eq!(phases[0]["duration_ms"], 5000);
    // The drain starts once its kinds are listed (record 4, their lists in one batch), not at
    // the deletion (record 3).
    assert_eq!(phases[0]["cause"]["seq"], 4);
    let entries = story["entries"].as_array().unwrap();
    assert_eq!(
        entries.len(),
        text.lines()
            .skip_while(|l| *l != "Story")
            .filter(|l| l.starts_with("  00:"))
            .count(),
        "one entry per story line"
    );
    for u in story["now"]["unblock"].as_array().unwrap() {
        assert!(
            text.contains(&format!("    - {}", u.as_str().unwrap())),
            "{u} in {text}"
        );
    }
}

#[test]
fn log_show_object_follows_one_object() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pdb-blocks-until-rescheduled");
    let followed = ok(&["log", "show", "--object", "Machine/default/m1"], &j);
    insta::assert_snapshot!("log_show_object_machine", followed);
    // A workload object, its kind in any case: its observations, and the commands on it.
    let pod = ok(&["log", "show", "--object", "pod/app/web-1@c1"], &j);
    insta::assert_snapshot!("log_show_object_pod", pod);
}

#[test]
fn an_unknown_object_or_a_bad_name_is_invalid_input_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pre-terminate-hook");
    let cases: [(&[&str], &str); 5] = [
        (
            &["explain", "machine", "default/nope"],
            "Machine/default/nope: the journal never observed this object (check the kind, namespace and name; `lifecycle log show` lists what it holds)\n",
        ),
        (
            &["explain", "mhc", "m1"],
            "\"m1\" is not NAMESPACE/NAME (for example default/m1)\n",
        ),
        (
            &["explain", "pool", "default/m1"],
            "MachinePool/default/m1: the journal never observed this object (check the kind, namespace and name; `lifecycle log show` lists what it holds)\n",
        ),
        (
            &["log", "show", "--object", "Machine/default/nope"],
            "Machine/default/nope: no record from 1 on concerns this object (check the kind, namespace and name)\n",
        ),
        (
            &["log", "show", "--object", "Machine:m1"],
            "\"Machine:m1\" is not an object reference: use Kind/namespace/name (Machine/default/m1), Kind/name@cluster for a cluster-scoped kind (Node/n1@c1)\n",
        ),
    ];
    for (args, err) in cases {
        let out = run(args, &j);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), err, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_missing_journal_exits_3_and_a_damaged_one_exits_1_as_log_verify_does() {
    let missing = run(
        &["explain", "machine", "default/m1"],
        Path::new("/nonexistent/journal"),
    );
    assert_eq!(missing.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr),
        "/nonexistent/journal: no journal here\n"
    );
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pdb-blocks-until-rescheduled");
    let db = j.join("db");
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[5000] ^= 0xff;
    std::fs::write(&db, &bytes).unwrap();
    let verify = run(&["log", "verify"], &j);
    assert_eq!(verify.status.code(), Some(1));
    for args in [
        &["explain", "machine", "default/m1"][..],
        &["log", "show", "--object", "Machine/default/m1"][..],
    ] {
        let out = run(args, &j);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(out.stderr, verify.stderr, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// What holds a Machine mid-deletion, taken at a time within each waiting phase.
fn now_at(scenario: &str, at: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), scenario);
    let story = ok(&["explain", "machine", "default/m1", "--at", at], &j);
    story[story.find("\nNow ").unwrap() + 1..].to_string()
}

#[test]
fn a_held_pre_drain_hook_and_a_volume_wait_say_what_would_release_them() {
    insta::assert_snapshot!(
        "pre_drain_hook_now",
        now_at("pre-drain-hook-holds-drain", "2024-01-01T00:03:00Z")
    );
    insta::assert_snapshot!(
        "volume_detach_now",
        now_at("deletion-volume-detach-wait", "2024-01-01T00:01:08Z")
    );
}

#[test]
fn an_mhc_names_the_external_remediation_and_the_owner_deletion_it_waits_for() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "mhc-external-remediation");
    let external = ok(&["explain", "mhc", "default/md-0-unhealthy"], &j);
    let targets: Vec<&str> = external
        .lines()
        .skip_while(|l| *l != "Targets")
        .take_while(|l| !l.is_empty())
        .collect();
    let now = &external[external.find("\nNow ").unwrap()..];
    let targets_and_now = format!("{}\n{now}", targets.join("\n"));
    insta::assert_snapshot!("mhc_external_remediation", targets_and_now);
    let j = journal(tmp.path(), "mhc-full-loop-node-failure");
    // 00:06:10: the owner deleted w1, whose drain and provider deletion are under way.
    let owner = ok(
        &[
            "explain",
            "mhc",
            "default/md-0-unhealthy",
            "--at",
            "2024-01-01T00:06:10Z",
        ],
        &j,
    );
    insta::assert_snapshot!(
        "mhc_owner_remediation_under_way_now",
        &owner[owner.find("\nNow ").unwrap() + 1..]
    );
}

/// The whole chain: a storm short-circuits the MHC (maxUnhealthy), w3 recovers, remediation
/// resumes, the owner deletes w1 and w2, and the MachineSet's replacements come up healthy.
#[test]
fn a_storm_held_by_max_unhealthy_then_remediated_is_one_story() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "mhc-max-unhealthy-holds-storm");
    let mhc = ok(&["explain", "mhc", "default/md-0-unhealthy"], &j);
    insta::assert_snapshot!("mhc_storm_short_circuit_then_remediation", mhc);
}

#[test]
fn a_paused_cluster_and_a_finished_deletion_say_what_is_left() {
    insta::assert_snapshot!(
        "paused_cluster_now",
        now_at("deletion-paused-cluster", "2024-01-01T00:03:00Z")
    );
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pdb-blocks-until-rescheduled");
    // Record 36: DeletionCompleted written, the finalizer not yet released.
    let done = ok(&["explain", "machine", "default/m1", "--until", "36"], &j);
    insta::assert_snapshot!(
        "deletion_completed_not_gone_now",
        &done[done.find("\nNow ").unwrap() + 1..]
    );
}

/// Node deletion refused 50 times, every 2 s, with 500, 503 and 429: the loop is told once,
/// with its count, its answers and its end.
#[test]
fn a_retry_loop_is_one_line_with_how_often_and_until_when() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-node-deletion-retries-forever");
    let story = ok(&["explain", "machine", "default/m1"], &j);
    insta::assert_snapshot!("node_deletion_retry_loop", story);
    let json = ok(
        &["explain", "machine", "default/m1", "--format", "json"],
        &j,
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let retries: Vec<(u64, &str)> = json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["repeats"].as_u64().unwrap() > 0)
        .map(|e| (e["repeats"].as_u64().unwrap(), e["what"].as_str().unwrap()))
        .collect();
    // The refusals vary (500, 503, 429) and the Warning event tells a new message once: one
    // loop all the same, its refusal line naming every answer.
    assert_eq!(retries, [(49, "command"), (48, "refused"), (1, "event")]);
    assert!(story.contains("; also "), "{story}");
}

/// A running controller holds its journal open (sled locks it): explain reads a copy, and
/// leaves every file as it was.
#[test]
fn explain_reads_a_journal_a_controller_holds_open_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "deletion-pre-terminate-hook");
    let files = |dir: &Path| {
        let mut out = Vec::new();
        let mut dirs = vec![dir.to_path_buf()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    dirs.push(entry.path());
                } else {
                    let md = entry.metadata().unwrap();
                    out.push((
                        entry.path(),
                        std::fs::read(entry.path()).unwrap(),
                        md.modified().unwrap(),
                    ));
                }
            }
        }
        out.sort();
        out
    };
    let (held, _) = adapters::kube::SledLog::open(&j).unwrap();
    let before = files(&j);
    let direct = run(&["log", "repair", "--truncate"], &j);
    assert_eq!(
        direct.status.code(),
        Some(3),
        "the journal is held: {}",
        String::from_utf8_lossy(&direct.stderr)
    );
    let story = ok(&["explain", "machine", "default/m1"], &j);
    assert!(
        story.contains("gone since 2024-01-01T00:08:20Z (record #28)"),
        "{story}"
    );
    assert_eq!(files(&j), before);
    drop(held);
}

#[test]
fn an_mhc_with_an_invalid_spec_says_to_fix_the_spec() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "mhc-invalid-max-unhealthy");
    let mhc = ok(&["explain", "mhc", "default/md-0-unhealthy"], &j);
    insta::assert_snapshot!(
        "mhc_invalid_spec_now",
        &mhc[mhc.find("\nNow ").unwrap() + 1..]
    );
    let machine = ok(&["explain", "machine", "default/w1"], &j);
    assert!(
        machine.ends_with("    - MachineHealthCheck default/md-0-unhealthy remediates nothing until its spec is fixed (InvalidMaxUnhealthy)\n"),
        "{machine}"
    );
}

/// Issue 26: a Machine held because its workload cluster's kubeconfig Secret is missing says
/// so in the story and in what would unblock it (the Secret to create); so does the MHC; once
/// the Secret is back the story says the cluster connected and the deletion went on.
#[test]
fn a_missing_kubeconfig_secret_is_told_in_the_story_and_in_what_would_unblock_it() {
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path(), "faults-kubeconfig-missing");
    // Record 23, 02:10: the Secret is still missing.
    let held = ok(&["explain", "machine", "default/m1", "--until", "23"], &j);
    assert!(
        held.contains("    - create Secret default/c1-kubeconfig (type cluster.x-k8s.io/secret)"),
        "{held}"
    );
    insta::assert_snapshot!("kubeconfig_missing_machine_held", held);
    let mhc = ok(&["explain", "mhc", "default/workers", "--until", "23"], &j);
    insta::assert_snapshot!("kubeconfig_missing_mhc_held", mhc);
    let whole = ok(&["explain", "machine", "default/m1"], &j);
    assert!(
        whole.contains("observed    workload cluster default/c1 connected again"),
        "{whole}"
    );
    assert!(whole.contains("gone      at"), "{whole}");
}
