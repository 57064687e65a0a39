//! `/metrics` as Prometheus reads it: `lifecycle run` against `sim serve` deletes a Machine,
//! the page is parsed with the Python `prometheus_client` OpenMetrics parser (a real and strict
//! parser of the format served), and its values are checked against the scenario's own actions; the shipped alert
//! rules pass `promtool check rules` and use only series the page serves. A missing parser or
//! promtool fails the test (`.ci/install-clients` installs them).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Child, clients_dir, lifecycle, serve};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../scenarios/deletion-order-of-actions.yaml"
);
const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/alerts/lifecycle.rules.yaml"
);

/// Sample name → its (labels, value) pairs, as the parser reads them; a family's name is there
/// too (with no samples when it has none, as a gauge of hooks when no hook waits).
type Families = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What `/metrics` is asked for as (`Accept`).
const OPENMETRICS: &str =
    "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// The body of `GET path` with `accept`, if the server answered.
fn get(port: u16, path: &str, accept: Option<&str>) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{accept}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

/// Which of `prometheus_client`'s parsers reads a page.
#[derive(Clone, Copy, Debug)]
enum Parser {
    /// `prometheus_client.openmetrics.parser`.
    OpenMetrics,
    /// `prometheus_client.parser`, the text format 0.0.4.
    Text,
}

/// A page as a parser read it: the samples, and each family's type.
struct Parsed {
    families: Families,
    types: BTreeMap<String, String>,
}

/// `text` as `prometheus_client`'s `parser` reads it.
fn parse_with(text: &str, parser: Parser) -> Parsed {
    let python = clients_dir().join("py/bin/python");
    let module = match parser {
        Parser::OpenMetrics => "prometheus_client.openmetrics.parser",
        Parser::Text => "prometheus_client.parser",
    };
    let script = format!(
        "import json,sys\n\
        from {module} import text_string_to_metric_families as parse\n\
        out, types = {{}}, {{}}\n\
        for f in parse(sys.stdin.read()):\n\
        \x20   out.setdefault(f.name, [])\n\
        \x20   types[f.name] = f.type\n\
        \x20   for s in f.samples:\n\
        \x20       out.setdefault(s.name, []).append([s.labels, s.value])\n\
        print(json.dumps([out, types]))\n"
    );
    let mut child = Command::new(&python)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (run .ci/install-clients)", python.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {parser:?} parser refused the page: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (families, types): (Families, BTreeMap<String, String>) =
        serde_json::from_slice(&out.stdout).unwrap();
    Parsed { families, types }
}

/// `{family: [(labels, value)]}` as `prometheus_client` parses the OpenMetrics `text`.
fn parse(text: &str) -> Families {
    parse_with(text, Parser::OpenMetrics).families
}

fn value(families: &Families, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families.get(name)?.iter().find_map(|(l, v)| {
        labels
            .iter()
            .all(|(k, want)| l.get(*k).map(String::as_str) == Some(*want))
            .then_some(*v)
    })
}

/// The scenario's own count of `action`, from the simulator's run of it.
fn simulated(action: &str) -> f64 {
    let scenario = sim::scenario::load(Path::new(SCENARIO)).unwrap();
    let report = sim::run(
        &scenario,
        &sim::RunOptions {
            no_journal: true,
            ..Default::default()
        },
    )
    .unwrap();
    report
        .timeline
        .lines
        .iter()
        .filter(|l| l.action == action && l.actor != "api")
        .count() as f64
}

#[test]
fn the_metrics_page_parses_and_counts_what_the_controller_did() {
    // Installed before the clock below starts: a first install takes a while.
    clients_dir();
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "deletion-order-of-actions", 10);
    let port = free_port();
    let _controller = Child(
        lifecycle()
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--journal")
            .arg(dir.path().join("journal"))
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(&clock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lifecycle run starts"),
    );
    // m1 is deleted at 1m (6 s at 10x); wait until no Machine is deleting any more and every
    // command the run needs has been counted.
    let started = Instant::now();
    let families = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the Machine was not deleted in time"
        );
        std::thread::sleep(Duration::from_millis(500));
        let Some(page) = get(port, "/metrics", Some(OPENMETRICS)) else {
            continue;
        };
        let families = parse(&page);
        let finalized = value(
            &families,
            "lifecycle_commands_total",
            &[("action", "RemoveFinalizer")],
        );
        let deleting: f64 = families
            .get("lifecycle_machines_deleting")
            .map_or(1.0, |s| s.iter().map(|(_, v)| v).sum());
        if finalized.is_some() && deleting == 0.0 {
            break families;
        }
    };
    for action in [
        "Cordon",
        "Evict",
        "DeleteInfrastructure",
        "DeleteBootstrap",
        "DeleteNode",
    ] {
        assert_eq!(
            value(&families, "lifecycle_commands_total", &[("action", action)]),
            Some(simulated(action)),
            "{action}"
        );
    }
    let at_least_one = [
        (
            "controller_runtime_reconcile_total",
            vec![("controller", "machine")],
        ),
        (
            "rest_client_requests_total",
            vec![("host", "management"), ("method", "PATCH")],
        ),
        (
            "rest_client_requests_total",
            vec![("host", "default/c1"), ("method", "POST")],
        ),
        ("workqueue_adds_total", vec![]),
        (
            "controller_runtime_reconcile_time_seconds_count",
            vec![("controller", "machine")],
        ),
        ("workqueue_queue_duration_seconds_count", vec![]),
        ("leader_election_master_status", vec![]),
        ("process_resident_memory_bytes", vec![]),
        ("lifecycle_journal_last_commit_timestamp_seconds", vec![]),
    ];
    for (name, labels) in &at_least_one {
        let v = value(&families, name, labels);
        assert!(v.is_some_and(|v| v >= 1.0), "{name}{labels:?} = {v:?}");
    }
    assert_eq!(
        value(
            &families,
            "lifecycle_machine_deleting_oldest_seconds",
            &[("phase", "DrainingNode")]
        ),
        Some(0.0),
        "no Machine deleting: the age gauge is back to 0"
    );
    let blocked: f64 = families["lifecycle_drain_blocked_pods"]
        .iter()
        .map(|(_, v)| v)
        .sum();
    assert_eq!(blocked, 0.0, "the drain is over: no pod counts as blocked");
    // Every reconcile is timed: the histogram counts what the reconcile counter counts (the
    // counter is read from the engine at most once a second, so it may lag).
    let timed = value(
        &families,
        "controller_runtime_reconcile_time_seconds_count",
        &[("controller", "machine")],
    )
    .unwrap();
    let counted = value(
        &families,
        "controller_runtime_reconcile_total",
        &[("controller", "machine")],
    )
    .unwrap();
    assert!(
        timed >= counted && counted > 0.0,
        "{timed} timed, {counted} counted"
    );

    // The process says its mode; it finishes what its hooks hold (alone, leading); families
    // with nothing counted yet are declared all the same (the parser lists them, no samples).
    assert_eq!(
        value(&families, "lifecycle_info", &[("mode", "alone")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &families,
            "lifecycle_hooked_machines",
            &[("deleting", "true"), ("served", "true")]
        ),
        Some(0.0)
    );
    for declared in [
        "lifecycle_shadow_disagreements",
        "lifecycle_commands_withheld",
        "lifecycle_api_errors",
    ] {
        assert!(families.contains_key(declared), "{declared} not declared");
    }

    // Reconciles by result: the error series is served (none failed here).
    assert_eq!(
        value(
            &families,
            "controller_runtime_reconcile_total",
            &[("controller", "machine"), ("result", "error")]
        ),
        Some(0.0)
    );

    // Without Accept, the text format 0.0.4: its parser types every family as the
    // OpenMetrics parser does, counters as counters.
    let text = get(port, "/metrics", None).expect("the page again");
    assert!(!text.contains("# EOF"), "{text}");
    let read = parse_with(&text, Parser::Text);
    let open = parse_with(
        &get(port, "/metrics", Some(OPENMETRICS)).expect("the page again"),
        Parser::OpenMetrics,
    );
    let counters: Vec<&String> = open
        .types
        .iter()
        .filter(|(_, t)| *t == "counter")
        .map(|(n, _)| n)
        .collect();
    assert!(
        counters.len() >= 10
            && counters.contains(&&"controller_runtime_reconcile".to_string())
            && counters.contains(&&"lifecycle_commands".to_string()),
        "{counters:?}"
    );
    assert_eq!(
        read.types, open.types,
        "the two formats type the families alike"
    );
    assert!(
        !read
            .types
            .values()
            .any(|t| t == "untyped" || t == "unknown"),
        "{:?}",
        read.types
    );
    assert_eq!(
        value(
            &read.families,
            "lifecycle_commands_total",
            &[("action", "Evict")]
        ),
        Some(simulated("Evict"))
    );

    // The shipped alert rules: valid for promtool, and built on series this page serves.
    let promtool = clients_dir().join("prometheus/usr/bin/promtool");
    let checked = Command::new(&promtool)
        .args(["check", "rules", RULES])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run .ci/install-clients)", promtool.display()));
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stdout)
    );
    let served_by_ksm = ksm_served();
    let alerts = alert_rules();
    assert_eq!(alerts.len(), 13, "{alerts:?}");
    for rule in &alerts {
        let expr = rule["expr"].as_str().unwrap();
        for name in series_read(expr) {
            assert!(
                families.contains_key(&name) || served_by_ksm.contains_key(&name),
                "the rule `{expr}` reads {name}, which neither /metrics nor kube-state-metrics serves"
            );
            // The labels it selects on kube-state-metrics' series are ones its configuration makes.
            if let Some(labels) = served_by_ksm.get(&name) {
                for selected in selected_labels(expr, &name) {
                    assert!(
                        labels.contains(&selected),
                        "`{expr}` selects {name}{{{selected}}}: not a label it has ({labels:?})"
                    );
                }
            }
        }
    }
}

const KSM_CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/alerts/kube-state-metrics.yaml"
);
const RUNBOOK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/RUNBOOK.md");
const ALERT_TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/alerts");

/// The YAML document at `path`, as JSON.
fn yaml_file(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    sim::scenario::yaml::parse_document(&text)
        .unwrap_or_else(|e| panic!("{path}: {e:?}"))
        .to_json()
}

/// Every alerting rule of the shipped rules file.
fn alert_rules() -> Vec<serde_json::Value> {
    yaml_file(RULES)["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// The series kube-state-metrics serves with the shipped configuration (prefix and name), each
/// with the labels its `labelsFromPath` make, and the one it serves itself that a rule reads.
fn ksm_served() -> BTreeMap<String, BTreeSet<String>> {
    let config = yaml_file(KSM_CONFIG);
    assert_eq!(config["kind"], "CustomResourceStateMetrics");
    let mut served = BTreeMap::new();
    for resource in config["spec"]["resources"].as_array().unwrap() {
        let prefix = resource["metricNamePrefix"].as_str().unwrap();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            v.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        for metric in resource["metrics"].as_array().unwrap() {
            let each = &metric["each"];
            let mut labels: BTreeSet<String> =
                keys(&resource["labelsFromPath"]).into_iter().collect();
            for kind in ["gauge", "info", "stateSet"] {
                labels.extend(keys(&each[kind]["labelsFromPath"]));
            }
            let name = format!("{prefix}_{}", metric["name"].as_str().unwrap());
            served.insert(name, labels);
        }
    }
    served.insert(
        "kube_lease_renew_time".to_string(),
        ["namespace", "lease"].map(String::from).into(),
    );
    served
}

/// The series an expression reads: words with an underscore, except PromQL's functions (a
/// word right before `(`), label names (before `=`, `!=` or `=~`) and values (quoted).
fn series_read(expr: &str) -> BTreeSet<String> {
    let unquoted: String = expr.split('"').step_by(2).collect::<Vec<_>>().join("\"\"");
    let mut names = BTreeSet::new();
    let words = unquoted.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    let mut rest = unquoted.as_str();
    for word in words {
        let Some(at) = rest.find(word) else { continue };
        let after = rest[at + word.len()..].trim_start();
        rest = &rest[at + word.len()..];
        let label = after.starts_with('=') || after.starts_with("!=");
        let function = after.starts_with('(');
        let keyword = ["by", "on", "unless", "and", "or", "without"].contains(&word);
        if word.contains('_')
            && !function
            && !label
            && !keyword
            && word.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        {
            names.insert(word.to_string());
        }
    }
    names
}

/// The label names `expr` selects on `name` (`name{a="x",b!=""}`: a and b).
fn selected_labels(expr: &str, name: &str) -> BTreeSet<String> {
    expr.match_indices(&format!("{name}{{"))
        .flat_map(|(at, m)| {
            let inside = &expr[at + m.len()..];
            let inside = &inside[..inside.find('}').unwrap()];
            inside
                .split(',')
                .filter_map(|m| m.split(['=', '!']).next())
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The kube-state-metrics configuration is of the form kube-state-metrics reads (each metric a
/// typed `each` with its help), reads the Machines' hook annotations this controller writes, and
/// the rules read the Lease this controller leads with.
#[test]
fn the_kube_state_metrics_configuration_reads_this_controllers_hooks_and_lease() {
    let config = yaml_file(KSM_CONFIG);
    let resources = config["spec"]["resources"].as_array().unwrap();
    for resource in resources {
        let gvk = &resource["groupVersionKind"];
        for key in ["group", "version", "kind"] {
            assert!(gvk[key].is_string(), "{resource}");
        }
        for metric in resource["metrics"].as_array().unwrap() {
            assert!(metric["help"].is_string(), "{metric}");
            let kind = metric["each"]["type"].as_str().unwrap();
            let field = match kind {
                "Gauge" => "gauge",
                "Info" => "info",
                "StateSet" => "stateSet",
                other => panic!("not a kube-state-metrics type: {other}"),
            };
            assert!(metric["each"][field].is_object(), "{metric}");
        }
    }
    let of_kind = |kind: &str| {
        resources
            .iter()
            .find(|r| r["groupVersionKind"]["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let machine = of_kind("Machine");
    assert_eq!(machine["groupVersionKind"]["group"], "cluster.x-k8s.io");
    let labels = &machine["labelsFromPath"];
    for (label, hook) in [
        (
            "lifecycle_pre_drain_hook",
            engine::ownership::OWN_PRE_DRAIN_HOOK,
        ),
        (
            "lifecycle_pre_terminate_hook",
            engine::ownership::OWN_PRE_TERMINATE_HOOK,
        ),
    ] {
        assert_eq!(
            labels[label],
            serde_json::json!(["metadata", "annotations", hook]),
            "{label}"
        );
    }
    let lease = of_kind("Lease");
    assert_eq!(lease["groupVersionKind"]["group"], "coordination.k8s.io");
    let rules = std::fs::read_to_string(RULES).unwrap();
    let lease_name = adapters::kube::lease::DEFAULT_LEASE_NAME;
    assert!(
        rules.contains(&format!("lease=\"{lease_name}\"")),
        "the rules read another Lease than {lease_name}"
    );
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every alert carries a `runbook_url` to its own section of `adapters/deploy/RUNBOOK.md`, which
/// exists and says what to do (a command to run), and every section there is an alert's.
#[test]
fn every_alert_links_to_a_runbook_section_that_exists() {
    let runbook = std::fs::read_to_string(RUNBOOK).unwrap();
    let sections: BTreeMap<String, String> = runbook
        .split("\n## ")
        .skip(1)
        .map(|s| {
            let (heading, body) = s.split_once('\n').unwrap();
            (anchor(heading), body.to_string())
        })
        .collect();
    let alerts = alert_rules();
    for rule in &alerts {
        let name = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let (path, fragment) = url.split_once('#').unwrap_or((url, ""));
        assert_eq!(path, "adapters/deploy/RUNBOOK.md", "{name}: {url}");
        assert_eq!(fragment, anchor(name), "{name}: its own section");
        let section = sections
            .get(fragment)
            .unwrap_or_else(|| panic!("{name}: no section #{fragment} in RUNBOOK.md"));
        assert!(
            section.contains("kubectl") || section.contains("lifecycle "),
            "{name}: the section says no command to run"
        );
        for key in ["summary", "description"] {
            assert!(rule["annotations"][key].is_string(), "{name}: no {key}");
        }
    }
    let alert_anchors: BTreeSet<String> = alerts
        .iter()
        .map(|r| anchor(r["alert"].as_str().unwrap()))
        .collect();
    for section in sections.keys() {
        assert!(
            alert_anchors.contains(section),
            "RUNBOOK.md: #{section} is no alert's"
        );
    }
    // The in-page links resolve too.
    for link in runbook.split("](#").skip(1) {
        let target = &link[..link.find(')').unwrap()];
        assert!(
            sections.contains_key(target),
            "RUNBOOK.md links to #{target}"
        );
    }
}

/// The rules file without its annotations: `promtool test rules` compares annotations too, and
/// the prose is checked apart ([`every_alert_links_to_a_runbook_section_that_exists`]).
fn rules_without_annotations() -> String {
    let rules = std::fs::read_to_string(RULES).unwrap();
    let mut out = Vec::new();
    let mut skipping = false;
    for line in rules.lines() {
        if skipping && (line.starts_with("         ") || line.trim().is_empty()) {
            continue;
        }
        skipping = line == "        annotations:";
        if !skipping {
            out.push(line);
        }
    }
    out.join("\n") + "\n"
}

/// Every alert played in each mode with `promtool test rules` (`adapters/tests/alerts/MODE.test.yaml`:
/// the findings of issue 43 among them: its own drain blocked in takeover, its own hook never
/// someone else's, a deletion held at its hooks while it is stopped, uninstalled without release,
/// crash-looping or switched to shadow, and nothing during the documented uninstall), each
/// mode's file naming every alert.
#[test]
fn every_alert_fires_as_played_in_each_mode() {
    let promtool = clients_dir().join("prometheus/usr/bin/promtool");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lifecycle.rules.yaml"),
        rules_without_annotations(),
    )
    .unwrap();
    let names: Vec<String> = alert_rules()
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect();
    for mode in ["alone", "shadow", "takeover"] {
        let file = format!("{mode}.test.yaml");
        let cases = std::fs::read_to_string(Path::new(ALERT_TESTS).join(&file)).unwrap();
        for name in &names {
            assert!(
                cases.contains(&format!("alertname: {name}\n")),
                "{file} does not play {name}"
            );
        }
        std::fs::write(dir.path().join(&file), cases).unwrap();
        let tested = Command::new(&promtool)
            .args(["test", "rules", &file])
            .current_dir(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e} (run .ci/install-clients)", promtool.display()));
        assert!(
            tested.status.success(),
            "{file}:\n{}{}",
            String::from_utf8_lossy(&tested.stdout),
            String::from_utf8_lossy(&tested.stderr)
        );
    }
}

/// `curl`: the HTTPS client the secure endpoint is tested with, as an operator would.
fn curl() -> std::path::PathBuf {
    common::required_tool(
        "CURL",
        std::path::PathBuf::from("curl"),
        &["--version"],
        "curl",
        "install curl (Debian's package curl)",
    )
}

/// `curl` of `https://localhost:port/metrics` (localhost resolved to 127.0.0.1) with `token`
/// and the TLS options `tls`: `Ok((HTTP code, body))`, or `Err(curl's exit code)` when no
/// answer came (60: the certificate was not trusted).
fn https_get(port: u16, token: Option<&str>, tls: &[&str]) -> Result<(u16, String), i32> {
    let mut command = Command::new(curl());
    command
        .args([
            "--silent",
            "--max-time",
            "10",
            "--write-out",
            "\n%{http_code}",
        ])
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .args(["--header", &format!("Accept: {OPENMETRICS}")])
        .args(tls);
    if let Some(token) = token {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    let out = command
        .arg(format!("https://localhost:{port}/metrics"))
        .output()
        .expect("curl runs");
    if !out.status.success() {
        return Err(out.status.code().unwrap_or(-1));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("the code last");
    Ok((code.parse().expect("an HTTP code"), body.to_string()))
}

/// `lifecycle run --leader-elect` against `kubeconfig` with its servers on `ports` (plain,
/// health, secure) and `extra` flags.
fn controller_with_servers(
    kubeconfig: &Path,
    journal: &Path,
    clock: &[String],
    ports: [u16; 3],
    extra: &[&str],
) -> Child {
    let [plain, health, secure] = ports.map(|p| format!("127.0.0.1:{p}"));
    Child(
        lifecycle()
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--journal")
            .arg(journal)
            .args(["--leader-elect", "--leader-election-namespace", "default"])
            .args(["--metrics-addr", &plain, "--health-addr", &health])
            .args(["--metrics-secure-addr", &secure])
            .args(extra)
            .args(clock)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log_of(journal)).expect("a log file"))
            .spawn()
            .expect("lifecycle run starts"),
    )
}

/// Where [`controller_with_servers`] logs, beside its journal.
fn log_of(journal: &Path) -> std::path::PathBuf {
    journal.with_extension("log")
}

/// Waits until `port` answers `/readyz` 200; fails with the controller's log if it exits or
/// takes 30 s.
fn until_ready(port: u16, controller: &mut Child, journal: &Path) {
    let started = Instant::now();
    while get(port, "/readyz", None).is_none_or(|b| !b.starts_with("ok")) {
        let exited = controller.0.try_wait().expect("a child's status");
        if exited.is_some() || started.elapsed() > Duration::from_secs(30) {
            let log = std::fs::read_to_string(log_of(journal)).unwrap_or_default();
            panic!("not ready on {port} (exit: {exited:?}):\n{log}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The secure endpoint as Prometheus meets it, against the fake API server's tokens
/// (`adapters::apiserver::auth`): over TLS only (a self-signed certificate is not trusted
/// without `-k`; one from `--metrics-cert-dir` is, for its name); 401 without a token or with
/// one the TokenReview does not authenticate, 403 for a user the SubjectAccessReview does not
/// allow `get /metrics`, 200 with the metrics for one it allows. The health port serves the
/// probes and not `/metrics`.
#[test]
fn the_secure_endpoint_serves_metrics_only_to_callers_the_api_server_allows() {
    use adapters::apiserver::auth::{ADMIN_TOKEN, UNPRIVILEGED_TOKEN};
    clients_dir();
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "deletion-order-of-actions", 10);
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(certs.join("tls.crt"), made.cert.pem()).unwrap();
    std::fs::write(certs.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
    let a = [free_port(), free_port(), free_port()];
    let b = [free_port(), free_port(), free_port()];
    let (journal_a, journal_b) = (dir.path().join("journal-a"), dir.path().join("journal-b"));
    let mut self_signed = controller_with_servers(&kubeconfig, &journal_a, &clock, a, &[]);
    let dir_arg = certs.to_str().unwrap();
    let mut from_dir = controller_with_servers(
        &kubeconfig,
        &journal_b,
        &clock,
        b,
        &["--metrics-cert-dir", dir_arg],
    );
    until_ready(a[1], &mut self_signed, &journal_a);
    until_ready(b[1], &mut from_dir, &journal_b);
    let secure = a[2];
    assert_eq!(
        https_get(secure, Some(ADMIN_TOKEN), &[]),
        Err(60),
        "a self-signed certificate is not trusted without -k"
    );
    let insecure = ["--insecure"];
    let code = |token: Option<&str>| https_get(secure, token, &insecure).unwrap().0;
    assert_eq!(code(None), 401, "no token");
    assert_eq!(
        code(Some("not-a-token")),
        401,
        "a token the API server does not know"
    );
    assert_eq!(
        code(Some(UNPRIVILEGED_TOKEN)),
        403,
        "not allowed get /metrics"
    );
    let (code, page) = https_get(secure, Some(ADMIN_TOKEN), &insecure).unwrap();
    assert_eq!(code, 200, "{page}");
    let families = parse(&page);
    assert!(families.contains_key("lifecycle_leader"), "{page}");
    // The certificate of --metrics-cert-dir is served: trusted as the CA, checked for its name.
    let ca = certs.join("tls.crt");
    let (code, page) = https_get(b[2], Some(ADMIN_TOKEN), &["--cacert", ca.to_str().unwrap()])
        .expect("the certificate of --metrics-cert-dir verifies");
    assert_eq!(code, 200, "{page}");
    assert!(page.ends_with("# EOF\n"), "{page}");
    // The health port: the probes, not /metrics.
    let health = a[1];
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(get(health, path, None).as_deref(), Some("ok\n"), "{path}");
    }
    assert_eq!(
        get(health, "/metrics", None).as_deref(),
        Some("not found\n")
    );
}

/// A verdict is reused for 10 s, keyed by the token (and path and verb): a second scrape with
/// the same token asks the API server nothing; another token, or another path, is reviewed.
#[tokio::test]
async fn verdicts_are_cached_per_token() {
    use adapters::apiserver::arrivals::Arrivals;
    use adapters::apiserver::auth::{ADMIN_TOKEN, UNPRIVILEGED_TOKEN};
    use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
    use adapters::kube::serving::auth::{Attempt, Authorizer, Verdict};
    let arrivals = std::sync::Arc::new(Arrivals::default());
    let server = ApiServer::start(
        SharedCluster::new(sim::api::ClusterStore::new("t")),
        "127.0.0.1:0".parse().unwrap(),
        ServerOptions {
            arrivals: Some(arrivals.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let authorizer = Authorizer::new(adapters::kube::client_for_url(&server.url()).unwrap());
    let reviews = || {
        let all = arrivals.all();
        let count = |kind: &str| all.iter().filter(|a| a.path.ends_with(kind)).count();
        (count("/tokenreviews"), count("/subjectaccessreviews"))
    };
    let header = |t: &str| format!("Bearer {t}");
    let (admin, unprivileged, unknown) = (
        header(ADMIN_TOKEN),
        header(UNPRIVILEGED_TOKEN),
        header("nobody"),
    );
    let check = async |authorization: Option<&str>, path: &str| {
        let attempt = Attempt {
            authorization,
            path,
            verb: "get",
        };
        authorizer.authorize(attempt).await.unwrap()
    };
    assert_eq!(check(Some(&admin), "/metrics").await, Verdict::Allowed);
    assert_eq!(check(Some(&admin), "/metrics").await, Verdict::Allowed);
    assert_eq!(
        reviews(),
        (1, 1),
        "the second scrape is answered from the cache"
    );
    let forbidden = check(Some(&unprivileged), "/metrics").await;
    assert!(
        matches!(forbidden, Verdict::Forbidden { .. }),
        "{forbidden:?}"
    );
    assert_eq!(check(Some(&unprivileged), "/metrics").await, forbidden);
    assert_eq!(reviews(), (2, 2));
    for _ in 0..2 {
        assert_eq!(
            check(Some(&unknown), "/metrics").await,
            Verdict::Unauthenticated
        );
    }
    assert_eq!(
        reviews(),
        (3, 2),
        "no access review for whom no token names"
    );
    assert_eq!(check(None, "/metrics").await, Verdict::Unauthenticated);
    assert_eq!(reviews(), (3, 2), "no token: nothing to ask");
    assert_eq!(check(Some(&admin), "/other").await, Verdict::Allowed);
    assert_eq!(reviews(), (4, 3), "another path is reviewed anew");
    server.shutdown().await;
}
