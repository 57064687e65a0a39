//! Writes one `#[test]` per scenario file into `OUT_DIR/scenario_tests.rs` (included by
//! `tests/scenarios.rs`), so each scenario passes or fails on its own and can be picked by
//! name: `cargo test -p sim --test scenarios -- mhc_`. A new file in `scenarios/` is covered
//! with no new code.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    // The directory changes when a file is added, removed or renamed.
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut stems: Vec<String> = std::fs::read_dir(&dir)
        .expect("scenarios/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            p.file_stem()
                .expect("a file name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    stems.sort();
    let mut out = String::new();
    for stem in &stems {
        let name: String = stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        writeln!(
            out,
            "#[test]\nfn {name}() {{\n    check_scenario({stem:?});\n}}\n"
        )
        .expect("writes to a String");
    }
    writeln!(out, "const SCENARIOS: [&str; {}] = {stems:?};", stems.len()).expect("writes");
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("scenario_tests.rs");
    std::fs::write(target, out).expect("OUT_DIR is writable");
}
