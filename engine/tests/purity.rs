//! The engine is sans-IO: no clock, no randomness, no async runtime, no unordered iteration
//! leaking into decisions. This test reads `engine/src` and fails on any of them outside the
//! journal (the one I/O module). Hash collections are allowed only at the sites listed in
//! [`PROBE_ONLY`], each with its reason, and only probed (never iterated) there.

use std::path::{Path, PathBuf};

const FORBIDDEN: [(&str, &str); 9] = [
    ("Instant::now", "reads the clock"),
    ("SystemTime", "reads the clock"),
    ("tokio", "uses an async runtime"),
    ("rand::", "uses randomness"),
    ("thread_rng", "uses randomness"),
    ("std::thread::sleep", "sleeps"),
    ("std::env::var", "reads the environment"),
    (
        "HashSet<",
        "iterates in hash order (use BTreeSet, or list a probe-only use in PROBE_ONLY)",
    ),
    (
        "HashMap<",
        "iterates in hash order (use BTreeMap, or list a probe-only use in PROBE_ONLY)",
    ),
];

/// A hash collection that is only probed cannot leak its order into a decision.
struct ProbeOnly {
    /// File under `engine/src`.
    file: &'static str,
    /// The lines that declare it (a field, a type alias, a binding).
    declared: &'static [&'static str],
    /// Paths through which the file reaches it: each must be followed by a probe method (or
    /// be a declaration, `name:`).
    handles: &'static [&'static str],
    why: &'static str,
}

const PROBE_ONLY: [ProbeOnly; 5] = [
    ProbeOnly {
        file: "store/table.rs",
        declared: &["by_key: HashMap<ObjectKey, u32"],
        handles: &["self.by_key"],
        why: "the store's slot of each key, one probe per lookup; iteration goes through the \
              ordered `order` map",
    },
    ProbeOnly {
        file: "pool/nodes.rs",
        declared: &[
            "type FnvMap<'a> = HashMap<",
            "by_name: OnceCell<FnvMap<'a>>",
            "by_provider_id: OnceCell<FnvMap<'a>>",
        ],
        handles: &["self.by_name", "self.by_provider_id"],
        why: "a pool's Nodes by name and providerID for one reconcile; built from the store's \
              ordered iteration (later duplicates replace earlier ones), then only looked up",
    },
    ProbeOnly {
        file: "pool/nodes.rs",
        declared: &["pub type FnvSet<'a> = HashSet<"],
        handles: &[],
        why: "membership of providerIDs in a pool's list (see the FnvSet bindings)",
    },
    ProbeOnly {
        file: "model/name.rs",
        declared: &["shared: HashSet<Name, BuildHasherDefault<crate::fnv::Fnv>>"],
        handles: &["self.shared"],
        why: "the shared name of a text, looked up or added; never listed",
    },
    ProbeOnly {
        file: "pool/replicas.rs",
        declared: &["let listed: FnvSet<"],
        handles: &["listed"],
        why: "whether a Node's providerID is still listed by its pool",
    },
];

/// Hash collections behind the aliases declared in [`PROBE_ONLY`] are hash collections too.
const ALIASES: [&str; 2] = ["FnvMap<", "FnvSet<"];

/// What may follow a probe-only handle: lookups, writes and sizes, never iteration.
const PROBES: [&str; 9] = [
    "get(",
    "get_or_init(",
    "contains(",
    "contains_key(",
    "insert(",
    "remove(",
    "len(",
    "is_empty(",
    "clear(",
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
            let code = line.split("//").next().unwrap_or_default();
            if PROBE_ONLY
                .iter()
                .any(|p| p.file == rel && p.declared.iter().any(|d| code.contains(d)))
            {
                continue;
            }
            let aliases = ALIASES
                .iter()
                .map(|a| (*a, "is a hash collection (an alias)"));
            for (pattern, why) in FORBIDDEN.into_iter().chain(aliases) {
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
    offences.extend(probe_only_offences(&src));
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

/// Each [`PROBE_ONLY`] site still exists, and its handles are only probed.
fn probe_only_offences(src: &Path) -> Vec<String> {
    let mut offences = Vec::new();
    for site in &PROBE_ONLY {
        assert!(!site.why.is_empty());
        let text = std::fs::read_to_string(src.join(site.file)).unwrap();
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        for declared in site.declared {
            if !code.contains(declared) {
                offences.push(format!(
                    "engine/src/{}: listed probe-only use `{declared}` is gone: drop it from \
                     PROBE_ONLY",
                    site.file
                ));
            }
        }
        for handle in site.handles {
            offences.extend(
                unprobed_uses(&code, handle)
                    .into_iter()
                    .map(|at| format!("engine/src/{}: `{handle}` used as `{at}`", site.file)),
            );
        }
    }
    offences
}

/// Uses of `handle` (as a whole word) in `code` followed by neither a probe nor `:`.
fn unprobed_uses(code: &str, handle: &str) -> Vec<String> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for (at, _) in code.match_indices(handle) {
        let before = code[..at].chars().next_back();
        let rest = &code[at + handle.len()..];
        if before.is_some_and(word) || rest.chars().next().is_some_and(word) {
            continue;
        }
        let rest = rest.trim_start();
        let probed = rest
            .strip_prefix('.')
            .is_some_and(|r| PROBES.iter().any(|p| r.trim_start().starts_with(p)));
        if !probed && !rest.starts_with(':') {
            out.push(format!(
                "{handle}{}",
                rest.lines().next().unwrap_or_default()
            ));
        }
    }
    out
}

#[test]
fn the_check_catches_a_clock_read() {
    // Guard the guard: the patterns match the calls they are meant to catch.
    let line = "let t = std::time::Instant::now();";
    assert!(FORBIDDEN.iter().any(|(p, _)| line.contains(p)));
}

#[test]
fn the_check_catches_a_hash_map_and_a_probe_only_map_iterated() {
    let line = "    cache: std::collections::HashMap<String, u32>,";
    assert!(FORBIDDEN.iter().any(|(p, _)| line.contains(p)));
    let code = "let a = self.by_key.get(k);\nlet n = self.by_key\n    .len();\n\
                for (k, v) in self.by_key.iter() {}\nlet all = &self.by_key;";
    assert_eq!(
        unprobed_uses(code, "self.by_key"),
        ["self.by_key.iter() {}", "self.by_key;"]
    );
    assert!(unprobed_uses("let unlisted = 1; listed: FnvSet", "listed").is_empty());
}
