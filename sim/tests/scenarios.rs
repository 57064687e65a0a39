//! Every scenario in `scenarios/` runs twice with identical bytes, passes its expectations and
//! invariants, and has its timeline pinned by an insta snapshot in `snapshots/`.
//! A new scenario file is covered without new code.

use std::path::{Path, PathBuf};

fn scenario_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("scenarios/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn render(path: &Path) -> (String, bool) {
    let text = std::fs::read_to_string(path).expect("readable scenario");
    let name = format!("scenarios/{}", path.file_name().unwrap().to_string_lossy());
    let scenario = sim::scenario::parse(&name, &text).unwrap_or_else(|e| panic!("{e}"));
    let report = sim::run(&scenario, &sim::RunOptions::default()).expect("run");
    let out = format!(
        "{}{}",
        report.timeline.render_text(),
        report.render_verdict(&scenario.file)
    );
    (out, report.passed())
}

#[test]
fn every_scenario_is_deterministic_passes_and_matches_its_snapshot() {
    let files = scenario_files();
    assert!(!files.is_empty(), "no scenarios found");
    let mut failed = Vec::new();
    for path in &files {
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let (first, passed) = render(path);
        let (second, _) = render(path);
        assert_eq!(first, second, "{stem}: two runs of the same seed differ");
        if !passed {
            failed.push(format!("{stem}:\n{first}"));
        }
        insta::with_settings!({
            snapshot_path => Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(stem, first);
        });
    }
    assert!(
        failed.is_empty(),
        "scenarios failed:\n{}",
        failed.join("\n")
    );
}
