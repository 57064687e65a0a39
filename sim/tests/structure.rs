//! The simulator's shape, checked on its source: `Sim` is a driver of a few owned parts (at
//! most 12 fields), no file but `sim.rs` implements methods on it, and its modules form no
//! import cycle (what a module names with `crate::…` outside its tests).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SIM_FIELDS_MAX: usize = 12;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every source file under `dir`, with its path relative to `src/`.
fn files(dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// The code of a file without its test module and comments.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module a file belongs to: `api/store.rs` → `api`, `sim.rs` → `sim`.
fn module_of(rel: &str) -> String {
    let first = rel.split('/').next().unwrap();
    first.trim_end_matches(".rs").to_string()
}

/// Module → the modules it names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in &all {
        let module = module_of(rel);
        if module == "lib" || rel.ends_with("/tests.rs") {
            continue;
        }
        let code = code(text);
        let named = graph.entry(module.clone()).or_default();
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                named.insert(name);
            }
        }
    }
    graph
}

/// A cycle through `graph`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if graph.contains_key(next)
                && let Some(c) = visit(next, graph, path, done)
            {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

/// Whether `line` opens an `impl` block of `Sim` (inherent or of a trait, by any path).
fn implements_sim(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix("impl") else {
        return false;
    };
    let rest = match rest.strip_prefix('<') {
        Some(generics) => generics.split_once('>').map_or("", |(_, r)| r),
        None if rest.starts_with(' ') => rest,
        None => return false,
    };
    let target = rest.split_once(" for ").map_or(rest, |(_, t)| t);
    let ty = target
        .trim_start()
        .split([' ', '{', '<'])
        .next()
        .unwrap_or_default();
    ty.rsplit("::").next() == Some("Sim")
}

#[test]
fn an_impl_of_sim_is_recognised_by_any_path() {
    for line in [
        "impl Sim {",
        "impl crate::sim::Sim {",
        "    impl<'a> Drop for Sim {",
        "impl std::fmt::Debug for crate::sim::Sim {",
    ] {
        assert!(implements_sim(line), "{line}");
    }
    for line in [
        "impl SimJournal {",
        "impl Simulator for World {",
        "// impl Sim {",
    ] {
        assert!(!implements_sim(line), "{line}");
    }
}

#[test]
fn the_simulator_modules_form_no_import_cycle() {
    let graph = imports();
    assert!(graph.contains_key("sim") && graph["sim"].contains("world"));
    assert_eq!(cycle(&graph), None, "{graph:#?}");
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let mut graph = imports();
    graph.get_mut("api").unwrap().insert("sim".into());
    let found = cycle(&graph).expect("api → sim → … → api");
    assert_eq!(found.first(), found.last());
    assert!(found.contains(&"sim".to_string()), "{found:?}");
}

#[test]
fn only_sim_rs_implements_methods_on_sim_and_sim_has_few_fields() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    for (rel, text) in &all {
        let code = code(text);
        let implements = code.lines().any(implements_sim);
        assert!(
            !implements || rel == "sim.rs",
            "{rel} implements methods on Sim"
        );
    }
    let sim = &all.iter().find(|(rel, _)| rel == "sim.rs").unwrap().1;
    let start = sim
        .find("pub struct Sim {")
        .expect("Sim is defined in sim.rs");
    let body = &sim[start..start + sim[start..].find("\n}\n").unwrap()];
    let fields = body
        .lines()
        .skip(1)
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with("//") && l.contains(": ") && l.ends_with(',')
        })
        .count();
    assert!(
        (1..=SIM_FIELDS_MAX).contains(&fields),
        "Sim has {fields} fields"
    );
}
