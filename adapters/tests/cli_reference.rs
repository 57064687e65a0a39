//! `adapters/docs/cli.md` cannot fall behind the binary: every subcommand `lifecycle --help`
//! lists and every flag each subcommand's `--help` shows is named in it, in the section of
//! that subcommand, with the default the binary prints.

use std::process::Command;

const DOC_PATH: &str = "docs/cli.md";

/// Every command path of the binary, top level first.
const COMMANDS: [&[&str]; 18] = [
    &[],
    &["sim"],
    &["sim", "run"],
    &["sim", "sweep"],
    &["sim", "serve"],
    &["sim", "generate"],
    &["log"],
    &["log", "verify"],
    &["log", "show"],
    &["log", "stats"],
    &["log", "repair"],
    &["explain"],
    &["run"],
    &["release"],
    &["preflight"],
    &["adopt"],
    &["shadow"],
    &["shadow", "report"],
];

fn help(path: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .args(path)
        .arg("--help")
        .output()
        .expect("lifecycle runs");
    assert_eq!(out.status.code(), Some(0), "lifecycle {path:?} --help");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags a help text shows, each with its printed default.
fn flags(help: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let flag = trimmed
            .strip_prefix("-h, ")
            .or_else(|| trimmed.strip_prefix("-V, "))
            .unwrap_or(trimmed);
        if line.starts_with("  ")
            && let Some(rest) = flag.strip_prefix("--")
        {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            out.push((format!("--{name}"), None));
        }
        if let (Some(last), Some(at)) = (out.last_mut(), line.find("[default: ")) {
            let value = &line[at + "[default: ".len()..];
            last.1 = value.split(']').next().map(str::to_string);
        }
    }
    out.retain(|(f, _)| f != "--help" && f != "--version");
    out
}

/// The doc's section about `lifecycle <path>`: from its `## ` heading to the next.
fn section<'a>(doc: &'a str, path: &[&str]) -> Option<&'a str> {
    let (group, sub) = match path {
        [group, sub] => (*group, *sub),
        [only] => (*only, ""),
        _ => return None,
    };
    let mut start = None;
    let mut offset = 0;
    for line in doc.split_inclusive('\n') {
        if line.starts_with("## ") {
            if let Some(s) = start {
                return Some(&doc[s..offset]);
            }
            let heading = line.trim_end();
            let named = heading.contains(&format!("`lifecycle {group}"))
                && (sub.is_empty() || heading.split(['`', ' ', '|']).any(|w| w == sub));
            if named {
                start = Some(offset);
            }
        }
        offset += line.len();
    }
    start.map(|s| &doc[s..])
}

#[test]
fn every_subcommand_and_flag_is_in_the_reference_with_its_default() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC_PATH);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut missing = Vec::new();
    for command in COMMANDS {
        let text = help(command);
        let listed = subcommands(&text);
        for sub in &listed {
            let mut full: Vec<&str> = command.to_vec();
            full.push(sub);
            if !COMMANDS.contains(&full.as_slice()) {
                missing.push(format!(
                    "lifecycle {}: not in this test's COMMANDS",
                    full.join(" ")
                ));
            }
            if !doc.contains(&format!("lifecycle {}", full.join(" "))) {
                missing.push(format!("subcommand `lifecycle {}`", full.join(" ")));
            }
        }
        let flags = flags(&text);
        if flags.is_empty() {
            continue;
        }
        let Some(section) = section(&doc, command) else {
            missing.push(format!("a `## `lifecycle {}` section", command.join(" ")));
            continue;
        };
        for (flag, default) in flags {
            let rows: Vec<&str> = section
                .lines()
                .filter(|l| l.contains(&format!("`{flag}")))
                .collect();
            if rows.is_empty() {
                missing.push(format!("lifecycle {} {flag}", command.join(" ")));
                continue;
            }
            if let Some(d) = default
                && !rows.iter().any(|r| r.contains(&format!("`{d}`")))
            {
                missing.push(format!(
                    "lifecycle {} {flag}: its default `{d}`",
                    command.join(" ")
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{DOC_PATH} lacks what `lifecycle --help` shows:\n  {}",
        missing.join("\n  ")
    );
}

/// The parsing above reads what clap prints (a flag, its default on a later line).
#[test]
fn the_help_parsing_reads_flags_defaults_and_subcommands() {
    let text = "Commands:\n  run   Replay\n  help  Print\n\nOptions:\n      --seed <SEED>  Override\n      \
                --format <FORMAT>\n          Output\n\n          [default: text]\n  -h, --help  Print help\n";
    assert_eq!(subcommands(text), ["run"]);
    assert_eq!(
        flags(text),
        [
            ("--seed".to_string(), None),
            ("--format".to_string(), Some("text".to_string()))
        ]
    );
    let doc = "## `lifecycle log verify|show|stats --journal DIR`\nx `--from`\n## `lifecycle log repair`\ny\n";
    assert!(section(doc, &["log", "show"]).unwrap().contains("--from"));
    assert!(!section(doc, &["log", "repair"]).unwrap().contains("--from"));
}
