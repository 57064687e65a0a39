//! The fault scenarios over HTTP under a sweep of seeds, as CI runs them: `lifecycle sim sweep
//! scenarios/faults-*.yaml --over-http` plays every seed as a served world with its own `lifecycle
//! run` child, the fake API servers injecting the faults of API calls and deliveries the seed
//! and the scenario open. No invariant may break, and every fault kind that acts on API calls
//! and deliveries must have fired (journal damage is not played over HTTP; `same-batch` is an
//! order only the controller's loop sees).
//!
//! Budget: the runs all wait at once (`--jobs` = runs), so the sweep lasts about as long as its
//! longest run: `faults-world-nodes-and-provisioning` (60 simulated minutes) at 20x, three
//! minutes; the rest of the test is parsing. Seeds 4 to 6 draw, between them, every kind the
//! scenarios' own timelines do not already open on a busy cluster (conflicts on the management
//! cluster among them).

use std::path::PathBuf;
use std::process::Command;

const FIRST_SEED: &str = "4";
const SEEDS: usize = 3;
const SPEED: &str = "20";

fn fault_scenarios() -> Vec<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the scenarios directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("faults-") && n.ends_with(".yaml"))
        })
        .collect();
    files.sort();
    files
}

/// `kind fired N runs R violations V` lines of the sweep's summary.
fn fired_table(stdout: &str) -> Vec<(String, u64, u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [kind, "fired", n, "runs", r, "violations", v] => Some((
                    kind.to_string(),
                    n.parse().ok()?,
                    r.parse().ok()?,
                    v.parse().ok()?,
                )),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn the_fault_scenarios_over_http_under_a_sweep_of_seeds_break_no_invariant_and_fire_every_fault() {
    let files = fault_scenarios();
    assert!(files.len() >= 9, "{files:?}");
    let jobs = (files.len() * SEEDS).to_string();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .args(["sim", "sweep"])
        .args(&files)
        .args(["--over-http", "--speed", SPEED, "--first-seed", FIRST_SEED])
        .args(["--seeds", &SEEDS.to_string(), "--jobs", &jobs])
        .output()
        .expect("lifecycle runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    println!("{:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("{} runs over HTTP", files.len() * SEEDS)),
        "{stdout}"
    );
    let table = fired_table(&stdout);
    let not_played = ["journal-damage", "same-batch"];
    let silent: Vec<&str> = table
        .iter()
        .filter(|(kind, fired, _, _)| *fired == 0 && !not_played.contains(&kind.as_str()))
        .map(|(kind, ..)| kind.as_str())
        .collect();
    assert!(
        silent.is_empty(),
        "never fired over HTTP: {silent:?}\n{stdout}"
    );
    assert!(
        table.iter().all(|(_, _, _, violations)| *violations == 0),
        "{stdout}"
    );
    assert_eq!(
        table.len(),
        sim::scenario::FaultKind::ALL.len() + sim::sweep::DELIVERY_ORDERS.len()
    );
}

#[test]
fn the_summary_table_reads_back() {
    let table =
        fired_table("  api-errors               fired 31     runs 5    violations 0\nother");
    assert_eq!(table, vec![("api-errors".to_string(), 31, 5, 0)]);
}
