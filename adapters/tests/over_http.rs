//! Every scenario end to end over real HTTP through the real `lifecycle run` process:
//! `lifecycle sim run FILE --over-http --speed 10` serves the world, plays it live (the fake
//! API servers injecting the faults of API calls and deliveries), runs the binary as a child
//! against it (killing it with SIGKILL and restarting it from its journal where the scenario
//! restarts the controller), and judges the same expectations and invariants as in-process,
//! with the stated tolerance. A scenario that passes in process must pass over HTTP, unless
//! `over_http_allowlist.txt` names it with the reason.

mod common;
mod rbac;

use adapters::apiserver::record::{self, Request};
use rbac::Grant;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// Simulated seconds per real second: the Lease, HTTP round trips and scheduling jitter stay
/// well inside the scenarios' windows (the tolerance is one real second, 10 s simulated).
const SPEED: &str = "10";

/// How many scenarios run at once: each is two mostly idle processes (about 2 s of CPU per
/// real minute), but the controller's lateness must stay within the tolerance on a busy
/// machine. The set lasts about its scenarios' total time over this (112 real minutes at 10x:
/// 7 minutes), and at least its longest scenario (60 simulated minutes: 6 real minutes). At 20
/// at once, with a build beside it, a drain started late on the 2-core CI machine.
const PARALLEL: usize = 16;

/// Killed with SIGKILL mid-drain (twice) and restarted from its journal each time.
const RESTARTS: &str = "faults-controller-restart-and-torn-journal";

/// The scenarios that may fail over HTTP although they pass in process, each with its reason.
const ALLOWLIST: &str = include_str!("over_http_allowlist.txt");

fn scenarios_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios"))
}

fn scenario(name: &str) -> PathBuf {
    scenarios_dir().join(format!("{name}.yaml"))
}

/// Every scenario file, by name, the longest first (so that the set ends soon after its
/// longest scenario).
fn all_scenarios() -> Vec<(String, sim::scenario::Scenario)> {
    let mut all: Vec<(String, sim::scenario::Scenario)> = std::fs::read_dir(scenarios_dir())
        .expect("the scenarios directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let s = sim::scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            (name, s)
        })
        .collect();
    all.sort_by(|a, b| b.1.duration.cmp(&a.1.duration).then(a.0.cmp(&b.0)));
    all
}

/// `name: reason` lines (`#` comments and blank lines aside).
fn allowlist(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut list = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) = line
            .split_once(':')
            .ok_or_else(|| format!("line {}: `name: reason` expected: {line}", i + 1))?;
        let (name, reason) = (name.trim(), reason.trim());
        if reason.is_empty() {
            return Err(format!("line {}: {name} has no reason", i + 1));
        }
        if list.insert(name.to_string(), reason.to_string()).is_some() {
            return Err(format!("line {}: {name} is listed twice", i + 1));
        }
    }
    Ok(list)
}

fn lifecycle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .args(args)
        .output()
        .expect("the lifecycle binary runs")
}

fn over_http(name: &str, record: &Path) -> Output {
    let file = scenario(name);
    lifecycle(&[
        "sim",
        "run",
        file.to_str().expect("a UTF-8 path"),
        "--over-http",
        "--speed",
        SPEED,
        "--record-requests",
        record.to_str().expect("a UTF-8 path"),
    ])
}

fn passed_over_http(out: &Output) -> bool {
    let stdout = String::from_utf8_lossy(&out.stdout);
    out.status.code() == Some(0)
        && stdout.contains("\nok: seed")
        && stdout.contains("over HTTP: speed 10x")
}

/// Every scenario run over HTTP, once for all the tests that judge them.
struct Runs {
    outputs: BTreeMap<String, Output>,
    /// Whether each scenario passes in process.
    in_process: BTreeMap<String, bool>,
    /// Every distinct request the controller sent, across the runs of each mode (`alone`,
    /// `shadow`, `takeover`: the scenario's `mode`, which `sim run --over-http` passes on).
    requests: BTreeMap<String, BTreeSet<Request>>,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let all = all_scenarios();
        let modes: BTreeMap<String, String> = all
            .iter()
            .map(|(name, s)| (name.clone(), s.mode.to_string()))
            .collect();
        let in_process = all
            .iter()
            .map(|(name, s)| {
                let report = sim::run(s, &sim::RunOptions::default());
                (name.clone(), report.is_ok_and(|r| r.passed()))
            })
            .collect();
        // Popped from the end: the longest first.
        let names: Vec<String> = all.into_iter().map(|(n, _)| n).collect();
        let queue = Mutex::new(names.iter().rev().cloned().collect::<Vec<_>>());
        let outputs = Mutex::new(BTreeMap::new());
        let started = std::time::Instant::now();
        std::thread::scope(|s| {
            for _ in 0..PARALLEL {
                s.spawn(|| {
                    loop {
                        // Not in a `while let`: its guard would hold the queue for the whole run.
                        let next = queue.lock().unwrap().pop();
                        let Some(name) = next else { break };
                        let out = over_http(&name, &dir.path().join(format!("{name}.tsv")));
                        outputs.lock().unwrap().insert(name, out);
                    }
                });
            }
        });
        println!(
            "{} scenarios over HTTP in {:.1} s",
            names.len(),
            started.elapsed().as_secs_f64()
        );
        let mut requests: BTreeMap<String, BTreeSet<Request>> = BTreeMap::new();
        for name in &names {
            let file = dir.path().join(format!("{name}.tsv"));
            requests
                .entry(modes[name].clone())
                .or_default()
                .extend(record::read(&file).unwrap_or_else(|e| panic!("{e}")));
        }
        Runs {
            outputs: outputs.into_inner().unwrap(),
            in_process,
            requests,
        }
    })
}

#[test]
fn the_allowlist_names_scenarios_with_reasons() {
    let list = allowlist(ALLOWLIST).unwrap_or_else(|e| panic!("over_http_allowlist.txt: {e}"));
    for name in list.keys() {
        assert!(
            scenario(name).exists(),
            "over_http_allowlist.txt: no scenario {name}"
        );
    }
    assert!(allowlist("a-scenario").is_err());
    assert!(allowlist("a-scenario:  ").is_err());
    assert!(allowlist("a: why\na: again").is_err());
}

#[test]
fn every_scenario_that_passes_in_process_passes_over_http_unless_allowlisted() {
    let runs = runs();
    let list = allowlist(ALLOWLIST).unwrap_or_else(|e| panic!("over_http_allowlist.txt: {e}"));
    let mut problems = Vec::new();
    let mut passing = 0;
    for (name, out) in &runs.outputs {
        let passed = passed_over_http(out);
        passing += usize::from(passed);
        let in_process = runs.in_process[name];
        let stdout = String::from_utf8_lossy(&out.stdout);
        let verdict = stdout
            .lines()
            .filter(|l| l.starts_with("FAIL ") || l.starts_with("  ") && l.contains("violation"))
            .collect::<Vec<_>>()
            .join("\n");
        match (in_process, passed, list.get(name)) {
            (_, false, _) if out.status.code() == Some(3) => problems.push(format!(
                "{name}: the run could not happen:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )),
            (true, false, None) => problems.push(format!(
                "{name} passes in process but fails over HTTP (exit {:?}):\n{verdict}\n{}",
                out.status.code(),
                stdout
                    .lines()
                    .filter(|l| !l.starts_with("00:") && !l.starts_with(' '))
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
            (true, true, Some(_)) => problems.push(format!(
                "{name} passes over HTTP now: remove it from over_http_allowlist.txt"
            )),
            (false, _, Some(_)) => problems.push(format!(
                "{name} fails in process: over_http_allowlist.txt need not excuse it"
            )),
            _ => {}
        }
    }
    println!(
        "{passing}/{} scenarios pass over HTTP; {} allowlisted",
        runs.outputs.len(),
        list.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Killed with SIGKILL mid-drain (twice) and restarted from its journal each time.
#[test]
fn a_controller_killed_mid_drain_restarts_from_its_journal() {
    let out = &runs().outputs[RESTARTS];
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // Two restarts in the scenario: three processes, one journal.
    assert!(stdout.contains("3 controller process(es)"), "{stdout}");
    assert_eq!(
        stdout
            .matches("the controller process is killed (SIGKILL)")
            .count(),
        2,
        "{stdout}"
    );
}

/// The faults of API calls and deliveries the scenarios open are played, and say so.
#[test]
fn the_fault_scenarios_say_what_fired_over_http() {
    let runs = runs();
    for (name, kinds) in [
        ("faults-api-errors-and-conflicts", &["api-errors"][..]),
        (
            "faults-partition-and-watch-gap",
            &["partition", "watch-gap"][..],
        ),
        ("faults-eviction-429-and-stuck-hook", &["eviction-429"][..]),
        (
            "faults-slow-api-and-unsynced-cache",
            &["slow-api", "cache-unsynced"][..],
        ),
        (
            "faults-delivery-orders",
            &["reordered-delivery", "relist-duplicates", "write-timeout"][..],
        ),
    ] {
        let stdout = String::from_utf8_lossy(&runs.outputs[name].stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("faults fired: "))
            .unwrap_or_else(|| panic!("{name}: no summary of what fired\n{stdout}"));
        for kind in kinds {
            assert!(
                line.contains(&format!("{kind} ")),
                "{name}: {kind} did not fire: {line}"
            );
        }
        assert!(!stdout.contains("not played over HTTP"), "{name}: {stdout}");
    }
}

/// Each mode, the overlays that run it, and the workload-cluster kustomization for the identity
/// its kubeconfig Secrets authenticate as.
const MODES: [(&str, &[&str], &str); 3] = [
    ("alone", &[".", "base", "ha"], "workload"),
    ("shadow", &["shadow"], "shadow/workload"),
    ("takeover", &["takeover", "ha-takeover"], "workload"),
];

/// Granted to a mode for what its over-HTTP runs do not reach, each with the test whose
/// requests need it: (modes, API group, resource, verb, proof).
const EXERCISED_ELSEWHERE: [(&[&str], &str, &str, &str, &str); 4] = [
    // A Secret read alone (a cluster that appears after the first list of kubeconfig Secrets,
    // one the list does not show, a retry): every run here connects its clusters from the list.
    (
        &["alone", "shadow", "takeover"],
        "",
        "secrets",
        "get",
        "adapter_e2e::workload_clusters_connect_from_one_list_of_kubeconfig_secrets",
    ),
    // The secure /metrics' reviews of its scrapers (no run here scrapes it).
    (
        &["alone", "shadow", "takeover"],
        "authentication.k8s.io",
        "tokenreviews",
        "create",
        "deploy::a_leader_and_a_standby_with_the_deployment_args_stay_within_the_shipped_rbac",
    ),
    (
        &["alone", "shadow", "takeover"],
        "authorization.k8s.io",
        "subjectaccessreviews",
        "create",
        "deploy::a_leader_and_a_standby_with_the_deployment_args_stay_within_the_shipped_rbac",
    ),
    // The provider's one rule serves every acting mode: a takeover deletes a MachinePool
    // Machine's infrastructure only when `--own-machines` selects such Machines (by default it
    // takes over a MachineSet's only), which no scenario can set; the deletion is the one
    // `alone` runs here.
    (
        &["takeover"],
        "infrastructure.cluster.x-k8s.io",
        "dockermachinepoolmachines",
        "delete",
        "over_http: pool-machines-drained-on-scale-down (alone), the same deletion",
    ),
];

/// Least privilege, measured per mode: every overlay of a mode binds to the ServiceAccount, in
/// the management cluster, exactly what that mode's over-HTTP runs sent there (core and CAPI
/// rules, the provider rules it aggregates, what it reads by name of CAPI's manager), and its
/// workload-cluster role grants exactly what they sent to workload clusters; a grant no run of
/// the mode used fails, as does a request not granted. The acting modes aggregate the example
/// provider rules (each for its own API group, carrying the label); shadow aggregates its
/// read-only ones, even with those installed. Discovery needs no rule (`system:discovery`); the
/// leader-election Lease is the Role's, measured with a leader and a standby by `deploy.rs`.
#[test]
fn each_modes_overlays_grant_exactly_what_its_over_http_runs_used() {
    let runs = runs();
    let base = rbac::objects_in(&rbac::deploy_dir().join("base"));
    let manager = rbac::find(&base, "ClusterRole", "lifecycle-manager");
    assert_eq!(
        manager["aggregationRule"]["clusterRoleSelectors"],
        json!([{"matchLabels": {rbac::AGGREGATE_LABEL: "true"}}]),
        "{manager}"
    );
    let providers = rbac::provider_roles();
    for role in &providers {
        assert_eq!(
            role["metadata"]["labels"][rbac::AGGREGATE_LABEL],
            "true",
            "{role}"
        );
        let groups: BTreeSet<String> = rbac::granted(role).into_iter().map(|g| g.group).collect();
        assert!(
            groups.len() == 1 && groups.iter().all(|g| rbac::is_provider_group(g)),
            "a provider's rule covers its own API group: {groups:?}"
        );
    }
    let mut problems = Vec::new();
    for (mode, overlays, workload_dir) in MODES {
        let requests = runs
            .requests
            .get(mode)
            .unwrap_or_else(|| panic!("no over-HTTP run in mode {mode}"));
        let (non_resource, requests): (Vec<&Request>, Vec<&Request>) =
            requests.iter().partition(|r| rbac::is_non_resource(r));
        let beyond_discovery: Vec<_> = non_resource
            .iter()
            .filter(|r| !rbac::is_discovery(r))
            .collect();
        assert!(beyond_discovery.is_empty(), "{mode}: {beyond_discovery:?}");
        let used = |cluster: &str| -> BTreeSet<Grant> {
            requests
                .iter()
                .filter(|r| r.cluster == cluster)
                .map(|r| rbac::needed(r))
                .collect()
        };
        let mut used_management = used("management");
        // Granted for what these runs do not reach, each proven by the test named.
        for (modes, group, resource, verb, proof) in EXERCISED_ELSEWHERE {
            if modes.contains(&mode) {
                println!("{mode}: granted for {proof}: {group}/{resource} {verb}");
                used_management.insert(Grant {
                    group: group.to_string(),
                    resource: resource.to_string(),
                    verb: verb.to_string(),
                });
            }
        }
        let used_workload = used("workload");
        println!(
            "{mode}, management cluster (core, CAPI, providers, CAPI's manager read by name):\n{}",
            rbac::table(&used_management)
        );
        println!(
            "{mode}, workload clusters:\n{}",
            rbac::table(&used_workload)
        );
        for overlay in overlays {
            let mut installed = rbac::documents(&common::render(&rbac::deploy_dir().join(overlay)));
            installed.extend(providers.iter().cloned());
            let granted = rbac::granted_to(&installed, "lifecycle-system", "lifecycle-controller");
            let mut bound: BTreeSet<Grant> = granted.cluster;
            bound.extend(granted.by_name);
            if bound != used_management {
                problems.push(format!(
                    "{mode}: the overlay {overlay} in the management cluster:\n{}",
                    rbac::difference(&bound, &used_management)
                ));
            }
        }
        let workload = rbac::documents(&common::render(&rbac::deploy_dir().join(workload_dir)));
        let roles: Vec<&serde_json::Value> = workload
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .collect();
        assert_eq!(roles.len(), 1, "{workload_dir}: one ClusterRole");
        let granted = rbac::granted(roles[0]);
        if granted != used_workload {
            problems.push(format!(
                "{mode}: {workload_dir} in workload clusters:\n{}",
                rbac::difference(&granted, &used_workload)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_port_in_use_means_the_run_could_not_happen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = taken.local_addr().unwrap().port().to_string();
    let file = scenario("deletion-node-already-gone");
    let out = lifecycle(&[
        "sim",
        "run",
        file.to_str().unwrap(),
        "--over-http",
        "--speed",
        SPEED,
        "--port",
        &port,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("the run could not happen"), "{stderr}");
    assert!(stderr.contains(&format!("port {port}")), "{stderr}");
}

#[test]
fn a_controller_that_cannot_start_means_the_run_could_not_happen() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the journal directory should be: `lifecycle run` exits at once.
    let journal = dir.path().join("journal");
    std::fs::write(&journal, b"not a journal").unwrap();
    let file = scenario("deletion-node-already-gone");
    let out = lifecycle(&[
        "sim",
        "run",
        file.to_str().unwrap(),
        "--over-http",
        "--speed",
        SPEED,
        "--journal",
        journal.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("the controller exited unexpectedly"),
        "{stderr}"
    );
}

/// `sim serve --speed 10` plays the scenario's timeline live: the Machine the scenario deletes
/// at 1m is being deleted about 6 real seconds after the start, and the printed controller
/// command carries the clock the served world runs on.
#[test]
fn sim_serve_plays_the_timeline_at_its_speed() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("pre-drain-hook-holds-drain");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .args(["sim", "serve", file.to_str().unwrap(), "--speed", SPEED])
        .arg("--kubeconfig-dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sim serve starts");
    let mut lines = std::io::BufReader::new(serve.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.starts_with("playing ");
        printed.push(line);
        if done {
            break;
        }
    }
    let url = printed
        .iter()
        .find_map(|l| l.strip_prefix("management: "))
        .and_then(|l| l.split_whitespace().next())
        .expect("the management URL is printed")
        .to_string();
    let run_line = printed
        .iter()
        .find(|l| l.starts_with("run the controller with:"))
        .expect("the controller command is printed");
    assert!(run_line.contains("--clock-speed 10"), "{run_line}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let deleting_after = runtime.block_on(async {
        let client = adapters::kube::client_for_url(&url).unwrap();
        let gvk = kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
        let machines: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(client, "default", &kube::api::ApiResource::from_gvk(&gvk));
        let started = std::time::Instant::now();
        loop {
            let m1 = machines.get("m1").await.expect("m1 is served");
            if m1.metadata.deletion_timestamp.is_some() {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the scenario's delete at 1m was not played"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    let _ = serve.kill();
    let _ = serve.wait();
    // 1m at 10x is 6 s after the start; the start itself was a moment before the first GET.
    assert!(
        deleting_after > std::time::Duration::from_secs(3)
            && deleting_after < std::time::Duration::from_secs(9),
        "deleted after {deleting_after:?}"
    );
}
