//! `sim/docs/scenario-format.md` cannot rot: its examples are run through the parser (and its
//! complete scenarios through the simulator), its invalid examples must fail with the message
//! they quote, and every key, action, fault kind and damage kind the parser accepts must be
//! named in it (top-level keys, world knobs, step actions and fault kinds each in a table row of
//! its own).
//!
//! The doc's fenced blocks, by info string: ` ```yaml ` a complete scenario (parses, runs,
//! passes); ` ```yaml steps ` / ` ```yaml expect ` / ` ```yaml world ` a fragment, put into
//! [`SKELETON`] (parses); ` ```yaml invalid ` a scenario whose first line is `# error: TEXT`
//! (rejected, and the error contains TEXT).

use sim::scenario::{self, CONTROLLER_ACTIONS, FaultKind};

const DOC_PATH: &str = "docs/scenario-format.md";

fn doc() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC_PATH);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fenced block: its info string after `yaml` (empty for a complete scenario), its text and
/// the doc line it starts on.
struct Block {
    role: String,
    text: String,
    line: usize,
}

/// Every ` ```yaml… ` block of the doc; other fences are skipped.
fn yaml_blocks(doc: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        match &mut open {
            None => {
                if let Some(info) = line.trim_start().strip_prefix("```") {
                    let mut words = info.split_whitespace();
                    if words.next() == Some("yaml") {
                        open = Some(Block {
                            role: words.collect::<Vec<_>>().join(" "),
                            text: String::new(),
                            line: i + 2,
                        });
                    }
                }
            }
            Some(block) => {
                if line.trim_start().starts_with("```") {
                    blocks.extend(open.take());
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
            }
        }
    }
    assert!(
        open.is_none(),
        "{DOC_PATH}: a ```yaml block is never closed"
    );
    blocks
}

/// The scenario a fragment is put into: one workload cluster `c1` (so steps may leave
/// `cluster:` out) with a Node.
const SKELETON: &str = "\
name: doc-fragment
management:
  - {apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, metadata: {name: c1}}
workload:
  c1:
    - {apiVersion: v1, kind: Node, metadata: {name: n1}}
";

fn indented(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn fragment_scenario(role: &str, text: &str) -> String {
    let key = match role {
        "steps" => "timeline",
        "expect" => "expect",
        "world" => "world",
        other => panic!("{DOC_PATH}: unknown block kind ```yaml {other}"),
    };
    format!("{SKELETON}{key}:\n{}", indented(text))
}

#[test]
fn every_example_parses_and_every_complete_one_passes() {
    let doc = doc();
    let blocks = yaml_blocks(&doc);
    let (mut complete, mut fragments, mut invalid) = (0, 0, 0);
    for b in &blocks {
        let file = format!("{DOC_PATH}:{}", b.line);
        match b.role.as_str() {
            "" => {
                complete += 1;
                let s = scenario::parse(&file, &b.text).unwrap_or_else(|e| panic!("{e}"));
                let report = sim::run(&s, &sim::RunOptions::default())
                    .unwrap_or_else(|e| panic!("{file}: {e}"));
                assert!(
                    report.passed(),
                    "{file}: the example scenario fails:\n{}{}",
                    report.timeline.render_text(),
                    report.render_verdict(&file)
                );
            }
            "invalid" => {
                invalid += 1;
                let (first, _) = b.text.split_once('\n').unwrap_or((&b.text, ""));
                let expected = first.strip_prefix("# error: ").unwrap_or_else(|| {
                    panic!("{file}: an invalid example starts with `# error: `")
                });
                match scenario::parse(&file, &b.text) {
                    Ok(_) => panic!("{file}: the invalid example parses"),
                    Err(e) => assert!(
                        e.to_string().contains(expected),
                        "{file}: expected an error containing {expected:?}, got: {e}"
                    ),
                }
            }
            role => {
                fragments += 1;
                let text = fragment_scenario(role, &b.text);
                if let Err(e) = scenario::parse(&file, &text) {
                    panic!("{e}\n(the fragment starting at {file}, put into a scenario:\n{text})");
                }
            }
        }
    }
    assert!(
        complete >= 2 && fragments >= 4 && invalid >= 5,
        "{DOC_PATH}: fewer examples than expected ({complete} complete, {fragments} fragments, \
         {invalid} invalid): are the fences still ```yaml?"
    );
}

/// The skeleton itself is a valid scenario, and a fragment error points into it.
#[test]
fn a_broken_fragment_is_caught() {
    let text = fragment_scenario("steps", "- {at: 30, kubelet: {node: n1, state: stopped}}\n");
    let e = scenario::parse("doc", &text).expect_err("a bare integer is not a duration");
    assert!(e.to_string().contains("timeline[0].at"), "{e}");
    scenario::parse("doc", SKELETON).unwrap_or_else(|e| panic!("{e}"));
}

/// The names the parser lists in its "expected one of: …" message for `text`.
fn accepted(text: &str, after: &str) -> Vec<String> {
    let e = scenario::parse("probe", text).expect_err("the probe is invalid");
    let message = e.to_string();
    let list = message
        .split_once(after)
        .unwrap_or_else(|| panic!("{message:?} does not contain {after:?}"))
        .1;
    let list = list.split(')').next().unwrap_or(list);
    list.split(", ").map(str::to_string).collect()
}

#[test]
fn every_name_the_parser_accepts_is_documented() {
    let doc = doc();
    let one_of = "expected one of: ";
    // Top-level keys, world knobs, step actions and fault kinds each have a table row of their
    // own (`| `name` | …`); the other names must appear in backticks or as `name:`.
    let row = |name: &str| doc.lines().any(|l| l.starts_with(&format!("| `{name}` |")));
    let mut missing = Vec::new();
    let tables: [(&str, &str, &str); 3] = [
        ("top-level keys", "name: x\nbogus: 1\n", one_of),
        ("world knobs", "name: x\nworld: {bogus: 1}\n", one_of),
        (
            "step actions",
            "name: x\ntimeline: [{at: 1s, bogus: 1}]\n",
            "expected at, cluster and one of: ",
        ),
    ];
    for (what, probe, after) in tables {
        let names = accepted(probe, after);
        assert!(names.len() > 1, "{what}: read {names:?} from the parser");
        for name in names {
            if !row(&name) {
                missing.push(format!("{what}: a table row for {name}"));
            }
        }
    }
    for kind in FaultKind::ALL {
        if !row(kind.as_str()) {
            missing.push(format!("fault kinds: a table row for {}", kind.as_str()));
        }
    }
    missing.extend(over_http_column_misreports(&doc));
    let probes: [(&str, &str, &str); 9] = [
        (
            "reference keys",
            "name: x\nexpect: [{at: 1s, gone: {kind: A, name: b, bogus: 1}}]\n",
            one_of,
        ),
        (
            "patch keys",
            "name: x\ntimeline: [{at: 1s, patch: {kind: A, name: b, merge: {}, bogus: 1}}]\n",
            one_of,
        ),
        (
            "nodeCondition keys",
            "name: x\nworkload: {c1: []}\ntimeline: [{at: 1s, nodeCondition: {node: n, bogus: 1}}]\n",
            one_of,
        ),
        (
            "kubelet keys",
            "name: x\nworkload: {c1: []}\ntimeline: [{at: 1s, kubelet: {node: n, bogus: 1}}]\n",
            one_of,
        ),
        (
            "api-errors parameters",
            "name: x\ntimeline: [{at: 1s, fault: {kind: api-errors, bogus: 1}}]\n",
            one_of,
        ),
        (
            "object expectation keys",
            "name: x\nexpect: [{at: 1s, object: {kind: A, name: b}, bogus: 1}]\n",
            one_of,
        ),
        (
            "condition keys",
            "name: x\nexpect: [{at: 1s, object: {kind: A, name: b}, condition: {type: T, bogus: 1}}]\n",
            one_of,
        ),
        (
            "action expectation keys",
            "name: x\nexpect: [{action: Evict, bogus: 1}]\n",
            one_of,
        ),
        (
            "event expectation keys",
            "name: x\nexpect: [{event: E, bogus: 1}]\n",
            one_of,
        ),
    ];
    for (what, probe, after) in probes {
        let names = accepted(probe, after);
        assert!(names.len() > 1, "{what}: read {names:?} from the parser");
        for name in names {
            if !doc.contains(&format!("`{name}")) && !doc.contains(&format!("{name}:")) {
                missing.push(format!("{what}: {name}"));
            }
        }
    }
    let named = |name: &str| doc.contains(&format!("`{name}`"));
    for damage in sim::journal_damage::DAMAGE_KINDS {
        if !named(damage) {
            missing.push(format!("journal-damage kind: {damage}"));
        }
    }
    for action in CONTROLLER_ACTIONS {
        if !named(action) {
            missing.push(format!("controller action: {action}"));
        }
    }
    for key in [
        "gone",
        "exists",
        "order",
        "during",
        "within",
        "notBefore",
        "never",
    ] {
        if !named(key) && !doc.contains(&format!("{key}:")) {
            missing.push(format!("expectation key: {key}"));
        }
    }
    assert!(
        missing.is_empty(),
        "{DOC_PATH} does not name what the parser accepts:\n  {}",
        missing.join("\n  ")
    );
}

/// The fault table's last column ("over HTTP") against what the code plays over HTTP
/// (`sim::wire::plays_over_http`): `yes…` for a kind it plays, `no…` for one it does not.
fn over_http_column_misreports(doc: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for kind in FaultKind::ALL {
        let prefix = format!("| `{}` |", kind.as_str());
        let Some(line) = doc.lines().find(|l| l.starts_with(&prefix)) else {
            continue;
        };
        let last = line
            .trim_end_matches('|')
            .rsplit(" | ")
            .next()
            .unwrap_or_default()
            .trim();
        let says = last.starts_with("yes");
        if says != sim::wire::plays_over_http(kind) || !(says || last.starts_with("no")) {
            wrong.push(format!(
                "fault kinds: the over-HTTP column of {} says {last:?}; it is {}played over HTTP",
                kind.as_str(),
                if sim::wire::plays_over_http(kind) {
                    ""
                } else {
                    "not "
                }
            ));
        }
    }
    wrong
}

#[test]
fn a_wrong_over_http_column_is_caught() {
    let doc = doc();
    assert!(over_http_column_misreports(&doc).is_empty());
    let lied = doc.replace("| no (the simulator damages its own journal) |", "| yes |");
    assert_eq!(over_http_column_misreports(&lied).len(), 1);
    let api = doc
        .lines()
        .find(|l| l.starts_with("| `api-errors` |"))
        .expect("a row");
    let (head, _) = api.trim_end_matches('|').rsplit_once(" | ").expect("cells");
    let lied = doc.replace(api, &format!("{head} | no |"));
    assert_eq!(over_http_column_misreports(&lied).len(), 1);
}
