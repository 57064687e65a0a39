//! Every scenario, fed as the adapter feeds a backlog (each instant's inputs as `Input::Batch`es,
//! every affected Machine reconciled once per batch): no invariant breaks, runs stay
//! deterministic, and batching does happen. Expectations are not checked: they name
//! intermediate writes that a batch may legitimately skip.

use sim::run::{RunOptions, run};
use sim::scenario::{self, Scenario};
use std::path::Path;

fn all_scenarios() -> Vec<Scenario> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("scenarios/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| scenario::load(p).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

#[test]
fn batched_feeding_breaks_no_invariant_and_stays_deterministic() {
    let scenarios = all_scenarios();
    let mut problems = Vec::new();
    let (mut batched_records, mut plain_records) = (0, 0);
    for s in &scenarios {
        for seed in [s.seed, 1, 2] {
            let options = |batch_inputs| RunOptions {
                seed: Some(seed),
                batch_inputs,
                ..Default::default()
            };
            let batched = run(s, &options(true)).unwrap_or_else(|e| panic!("{}: {e}", s.file));
            if !batched.violations.is_empty() {
                problems.push(format!("{} seed {seed}: {:?}", s.file, batched.violations));
            }
            let again = run(s, &options(true)).unwrap_or_else(|e| panic!("{}: {e}", s.file));
            if again.timeline.lines != batched.timeline.lines
                || again.engine_state_hash != batched.engine_state_hash
            {
                problems.push(format!("{} seed {seed}: two batched runs differ", s.file));
            }
            if seed == s.seed {
                let plain = run(s, &options(false)).unwrap_or_else(|e| panic!("{}: {e}", s.file));
                batched_records += batched.inputs;
                plain_records += plain.inputs;
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        batched_records * 2 < plain_records,
        "batching happened: {batched_records} journal records batched vs {plain_records} one by one"
    );
}
