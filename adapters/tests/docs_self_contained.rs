//! The repository is self-contained: no file in it refers to a file outside it (a notes
//! directory beside the checkout, a path on one developer's machine, a document that is not in
//! the repository), and the references its own docs make resolve.
//!
//! The walk starts at the workspace root (`CARGO_MANIFEST_DIR/..`) and reads every text file
//! except build output (`target/`), git's own files (`.git/`) and what the tools write into a
//! checkout (`.lifecycle-serve/`, insta's pending snapshots). What counts as "outside":
//!
//! - a relative path that climbs above the root (`../x` in a file at the root, `../../x` one
//!   directory down, …);
//! - the absolute path of this checkout or of the directory holding it;
//! - the notes directory beside the checkout, by name (`shared/`), and the names of the notes
//!   once kept there, unless the repository has a file of that name.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// Entries the walk skips: build output, git, what `sim serve` writes.
const SKIP_DIRS: [&str; 3] = ["target", ".git", ".lifecycle-serve"];
/// Files tools leave in a checkout (insta's snapshots awaiting review).
const SKIP_SUFFIXES: [&str; 2] = [".snap.new", ".pending-snap"];

/// Every text file under `root`: (path relative to it, with `/`, and its text).
fn text_files(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a readable directory entry"))
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let kind = entry.file_type().expect("a file type");
            // In a git worktree `.git` is a file naming the main checkout: skipped as well.
            if SKIP_DIRS.contains(&name.as_str()) {
                continue;
            }
            if kind.is_dir() {
                dirs.push(path);
                continue;
            }
            if !kind.is_file() || SKIP_SUFFIXES.iter().any(|s| name.ends_with(s)) {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let Ok(text) = String::from_utf8(bytes) else {
                continue; // images and other binary files
            };
            let rel = path.strip_prefix(root).expect("under the root");
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((rel, text));
        }
    }
    out
}

/// The notes once kept outside the repository, as files refer to them. Assembled from parts
/// so that this file does not name them itself.
fn outside_note_names() -> Vec<String> {
    [
        ["CAPI", "-SEMANTICS"],
        ["KUBE", "-NOTES"],
        ["SCENARIOS", ".md"],
        ["DESIGN", ".md"],
        ["STYLE", ".md"],
        ["capi", "-cases"],
    ]
    .iter()
    .map(|parts| parts.concat())
    .collect()
}

/// What makes a file refer outside the repository.
struct Rules {
    /// Literal strings no file may contain.
    needles: Vec<String>,
}

impl Rules {
    fn for_checkout(root: &Path, files: &[(String, String)]) -> Rules {
        let mut needles = vec![
            ["../", "shared"].concat(),
            ["shared/", "capi-crds"].concat(),
            ["/", "work/"].concat(),
        ];
        let here = root.to_string_lossy().into_owned();
        needles.push(here);
        // The directory holding the checkout, unless it is a temporary directory every machine
        // has (a clone in /tmp would ban the docs' own example paths under /tmp).
        let shared_dirs = [std::env::temp_dir(), "/tmp".into(), "/var/tmp".into()];
        if let Some(parent) = root
            .parent()
            .filter(|p| p.parent().is_some() && !shared_dirs.iter().any(|d| d == p))
        {
            needles.push(format!("{}/", parent.to_string_lossy()));
        }
        let names_in_repo: Vec<&str> = files
            .iter()
            .map(|(rel, _)| rel.rsplit('/').next().unwrap_or(rel))
            .collect();
        for name in outside_note_names() {
            let file = if name.contains('.') {
                name.clone()
            } else {
                format!("{name}.md")
            };
            if !names_in_repo.contains(&file.as_str()) {
                needles.push(name);
            }
        }
        needles.sort();
        needles.dedup();
        Rules { needles }
    }

    /// Each place `text` (of the file at `rel`) refers outside: `rel:line: why`.
    fn offences(&self, rel: &str, text: &str) -> Vec<String> {
        let depth = rel.matches('/').count();
        let mut found = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let at = |why: String| format!("{rel}:{}: {why}: {}", i + 1, line.trim());
            for needle in &self.needles {
                if line.contains(needle.as_str()) {
                    found.push(at(format!("names {needle:?}")));
                }
            }
            if let Some(up) = climbs_above(line, depth) {
                found.push(at(format!("{up} `../` climb above the repository")));
            }
        }
        found
    }
}

/// The most `../` a run in `line` climbs, if more than `depth` (the file's directory depth
/// below the root): such a relative path leaves the repository.
fn climbs_above(line: &str, depth: usize) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut most = 0;
    let mut i = 0;
    while i + 3 <= bytes.len() {
        // A run starts at `../` not preceded by another dot (`.../` is not a path step).
        if &bytes[i..i + 3] == b"../" && (i == 0 || bytes[i - 1] != b'.') {
            let mut n = 0;
            let mut j = i;
            while j + 3 <= bytes.len() && &bytes[j..j + 3] == b"../" {
                n += 1;
                j += 3;
            }
            most = most.max(n);
            i = j;
        } else {
            i += 1;
        }
    }
    (most > depth).then_some(most)
}

#[test]
fn no_file_refers_outside_the_repository() {
    let root = root();
    let files = text_files(&root);
    assert!(
        files.iter().any(|(rel, _)| rel == "README.md") && files.len() > 100,
        "walked {} files from {}: not the workspace?",
        files.len(),
        root.display()
    );
    let rules = Rules::for_checkout(&root, &files);
    let offences: Vec<String> = files
        .iter()
        .flat_map(|(rel, text)| rules.offences(rel, text))
        .collect();
    assert!(
        offences.is_empty(),
        "files refer outside the repository (cite the repository's own docs instead: \
         sim/docs/scenario-format.md, adapters/docs/cli.md, engine/docs/design.md, \
         engine/docs/capi.md, adapters/fakeapi/src/apiserver/crds/):\n  {}",
        offences.join("\n  ")
    );
}

/// A checkout cloned into a temporary directory may name example paths under it.
#[test]
fn a_clone_in_tmp_may_name_example_paths_under_tmp() {
    // Built, not written out: this file must not name a checkout where CI may clone it.
    let clone = ["/tmp/", "some-", "clone"].concat();
    let root = Path::new(&clone);
    let files = vec![("README.md".to_string(), String::new())];
    let rules = Rules::for_checkout(root, &files);
    assert!(
        rules
            .offences("README.md", "lifecycle log verify --journal /tmp/j")
            .is_empty()
    );
    assert!(
        !rules
            .offences("README.md", &format!("built in {clone}/target"))
            .is_empty()
    );
}

/// The check itself catches each kind of outside reference, and lets the inside ones be.
#[test]
fn the_check_catches_each_kind_of_outside_reference() {
    let root = Path::new("/srv/checkouts/lifecycle");
    let files = vec![("README.md".to_string(), String::new())];
    let rules = Rules::for_checkout(root, &files);
    let notes = outside_note_names();
    let up = |n: usize| "../".repeat(n);
    let bad = [
        (
            "README.md",
            format!("format: `{}shared/{}`", up(1), notes[2]),
        ),
        (
            "sim/src/scenario/mod.rs",
            format!("//! as `/{}/shared/{}` says", "work", notes[2]),
        ),
        (
            "engine/src/convert/capi.rs",
            format!("//! the CRDs in `shared/{}`", "capi-crds"),
        ),
        (
            "engine/src/health/trigger.rs",
            format!("//! ({} §2.3)", notes[0]),
        ),
        (
            "adapters/controller/src/kube/client.rs",
            format!("// {} §1.4", notes[1]),
        ),
        (
            "engine/src/health/trigger.rs",
            format!("//! ({} property 6)", notes[3]),
        ),
        ("README.md", format!("see [notes]({}notes/x.md)", up(1))),
        (
            "adapters/tests/x.rs",
            format!("include_str!(\"{}outside.txt\")", up(3)),
        ),
        (
            "BENCHMARKS.md",
            "measured in /srv/checkouts/lifecycle/target".to_string(),
        ),
        (
            "BENCHMARKS.md",
            "the notes in /srv/checkouts/notes.md".to_string(),
        ),
    ];
    for (rel, text) in bad {
        assert!(
            !rules.offences(rel, &text).is_empty(),
            "{rel}: {text:?} was not caught"
        );
    }
    let good = [
        (
            "adapters/tests/cli.rs",
            format!(
                "Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"{}scenarios\")",
                up(1)
            ),
        ),
        (
            "adapters/src/cli/sim.rs",
            format!("include_str!(\"{}scenarios/x.yaml\")", up(3)),
        ),
        (
            "sim/docs/scenario-format.md",
            format!("[cli]({}adapters/docs/cli.md)", up(2)),
        ),
        (
            "engine/src/shared/mod.rs",
            "use crate::shared::conditions;".to_string(),
        ),
        (
            "BENCHMARKS.md",
            "--dir /tmp/journal-10m ... and so on .../x".to_string(),
        ),
        (
            "engine/docs/capi.md",
            "decision 10 of `engine/docs/capi.md` §2.3".to_string(),
        ),
    ];
    for (rel, text) in good {
        let found = rules.offences(rel, &text);
        assert!(found.is_empty(), "{rel}: {text:?} was flagged: {found:?}");
    }
}

/// A markdown link target or a backticked repository path in the docs, resolved.
fn doc_references(rel: &str, text: &str) -> Vec<(usize, String, PathBuf)> {
    let dir = Path::new(rel).parent().unwrap_or(Path::new(""));
    let top = [
        "engine/",
        "sim/",
        "adapters/",
        "scenarios/",
        "snapshots/",
        ".ci/",
    ];
    let mut refs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for link in line.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or_default();
            let target = target.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            refs.push((i + 1, target.to_string(), dir.join(target)));
        }
        for (n, span) in line.split('`').enumerate() {
            let path = span.split("::").next().unwrap_or_default();
            // A file (it has an extension) or a directory (it ends with `/`): not a benchmark
            // or module name that merely looks like a path.
            let last = path.rsplit('/').next().unwrap_or_default();
            let plain = !path.contains(['*', '<', '…', ' ', '{', '$'])
                && (path.ends_with('/') || last.contains('.'));
            if n % 2 == 1 && plain && top.iter().any(|t| path.starts_with(t)) {
                refs.push((i + 1, path.to_string(), PathBuf::from(path)));
            }
        }
    }
    refs
}

/// The docs' links and the repository paths they name exist, and the tests and functions the
/// docs/ pages cite exist.
#[test]
fn what_the_docs_name_exists() {
    let root = root();
    let files = text_files(&root);
    let docs: Vec<&(String, String)> = files
        .iter()
        .filter(|(rel, _)| {
            rel.ends_with(".md")
                && (rel.contains("/docs/")
                    || !rel.contains('/')
                    || rel == "adapters/deploy/README.md")
        })
        .collect();
    assert!(docs.len() >= 5, "found the docs {docs:?}");
    let mut missing = Vec::new();
    for (rel, text) in &docs {
        for (line, shown, path) in doc_references(rel, text) {
            if !root.join(&path).exists() {
                missing.push(format!("{rel}:{line}: {shown} does not exist"));
            }
        }
    }
    let sources: String = files
        .iter()
        .filter(|(rel, _)| rel.ends_with(".rs"))
        .map(|(_, text)| text.as_str())
        .collect();
    // A backticked snake_case name with two underscores or more in a docs/ page is a test or a
    // function the page cites (`drain_completes_at_the_input_that_removes_the_last_pod`).
    for (rel, text) in docs.iter().filter(|(rel, _)| rel.contains("/docs/")) {
        for (n, span) in text.split('`').enumerate() {
            let fn_like = span.matches('_').count() >= 2
                && span
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if n % 2 == 1 && fn_like && !sources.contains(&format!("fn {span}")) {
                missing.push(format!("{rel}: no function {span}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name what does not exist:\n  {}",
        missing.join("\n  ")
    );
}
