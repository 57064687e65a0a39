//! The engine is sans-IO: no clock, no randomness, no async runtime, no unordered iteration
//! leaking into decisions. This test reads `engine/src` and fails on any of them outside the
//! journal (the one I/O module).

use std::path::{Path, PathBuf};

const FORBIDDEN: [(&str, &str); 8] = [
    ("Instant::now", "reads the clock"),
    ("SystemTime", "reads the clock"),
    ("tokio", "uses an async runtime"),
    ("rand::", "uses randomness"),
    ("thread_rng", "uses randomness"),
    ("std::thread::sleep", "sleeps"),
    ("std::env::var", "reads the environment"),
    (
        "HashSet<",
        "iterates in hash order (use BTreeSet, or a map that is only probed)",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable dir") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn engine_src_reads_no_clock_rng_or_runtime() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 20, "found only {} files", files.len());
    let mut offences = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if rel.starts_with("journal") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            // A hash collection that is only probed cannot leak its order: say so on the line.
            if line.contains("probed only") {
                continue;
            }
            let code = line.split("//").next().unwrap_or_default();
            for (pattern, why) in FORBIDDEN {
                if code.contains(pattern) {
                    offences.push(format!(
                        "engine/src/{rel}:{}: {why}: {}",
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

#[test]
fn the_check_catches_a_clock_read() {
    // Guard the guard: the patterns match the calls they are meant to catch.
    let line = "let t = std::time::Instant::now();";
    assert!(FORBIDDEN.iter().any(|(p, _)| line.contains(p)));
}
