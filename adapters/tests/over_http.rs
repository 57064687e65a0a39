//! Scenarios end to end over real HTTP through the real `lifecycle run` process:
//! `lifecycle sim run FILE --over-http --speed 10` serves the world, plays it live, runs the
//! binary as a child against it (killing it with SIGKILL and restarting it from its journal
//! where the scenario restarts the controller), and judges the same expectations and
//! invariants as in-process, with the stated tolerance.

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

/// How many scenarios run at once: each is two mostly idle processes.
const PARALLEL: usize = 7;

/// Deletion, MHC, pool and fault scenarios whose faults are played over HTTP (the world's own
/// faults and controller restarts; API-call faults are injected only in process), the longest
/// first so that the set ends soon after its longest scenario.
const SET: &[&str] = &[
    "unknown-node-is-never-deleted",
    "mhc-full-loop-node-failure",
    "mhc-unhealthy-range",
    "mhc-external-remediation",
    "pre-drain-hook-holds-drain",
    "deletion-pre-terminate-hook",
    "pool-provision-and-node-refs",
    "pool-scale-down-deletes-retired-nodes",
    "pool-deletion",
    "deletion-pdb-blocks-until-rescheduled",
    "deletion-order-of-actions",
    "deletion-drain-rule-order",
    "deletion-volume-detach-wait",
    "deletion-unreachable-node",
    "world-kubelet-stop",
    "faults-kubeconfig-missing",
];

/// Killed with SIGKILL mid-drain (twice) and restarted from its journal each time; run with
/// the set, so its requests are recorded too.
const RESTARTS: &str = "faults-controller-restart-and-torn-journal";

/// Played only for the requests they make, which the RBAC test must see: MachinePool Machines
/// (creating Machines, deleting DockerMachinePoolMachines; its verdict is not judged: the
/// over-HTTP judge counts no `CreateMachine` although the server records the creates), and a
/// drain blocked for minutes (a repeated DrainBlocked updates its Event: `events patch`).
const MEASURED_ONLY: &[&str] = &[
    "pool-machines-drained-on-scale-down",
    "deletion-drain-timeout",
];

fn scenario(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios")).join(format!("{name}.yaml"))
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

/// Every over-HTTP scenario run, once for all the tests that judge them.
struct Runs {
    outputs: BTreeMap<&'static str, Output>,
    /// Every distinct request the controller sent, across all the runs.
    requests: BTreeSet<Request>,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Popped from the end: the longest first.
        let mut names = SET.to_vec();
        names.insert(1, RESTARTS);
        names.extend(MEASURED_ONLY);
        let queue = Mutex::new(names.into_iter().rev().collect::<Vec<_>>());
        let outputs = Mutex::new(BTreeMap::new());
        std::thread::scope(|s| {
            for _ in 0..PARALLEL {
                s.spawn(|| {
                    loop {
                        // Not in a `while let`: its guard would hold the queue for the whole run.
                        let next = queue.lock().unwrap().pop();
                        let Some(name) = next else { break };
                        let out = over_http(name, &dir.path().join(format!("{name}.tsv")));
                        outputs.lock().unwrap().insert(name, out);
                    }
                });
            }
        });
        let mut requests = BTreeSet::new();
        for name in SET.iter().chain([&RESTARTS]).chain(MEASURED_ONLY) {
            let file = dir.path().join(format!("{name}.tsv"));
            requests.extend(record::read(&file).unwrap_or_else(|e| panic!("{e}")));
        }
        Runs {
            outputs: outputs.into_inner().unwrap(),
            requests,
        }
    })
}

#[test]
fn the_over_http_set_holds_every_expectation_and_invariant() {
    let runs = runs();
    let mut failures = Vec::new();
    for name in SET {
        let out = &runs.outputs[name];
        let stdout = String::from_utf8_lossy(&out.stdout);
        let passed = out.status.code() == Some(0)
            && stdout.contains("\nok: seed")
            && stdout.contains("over HTTP: speed 10x");
        if !passed {
            failures.push(format!(
                "{name}: exit {:?}\n{stdout}\n{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
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

/// The scenarios played only for their requests did run (exit 0 or 1, not "could not run").
#[test]
fn the_measured_only_scenarios_ran_over_http() {
    for name in MEASURED_ONLY {
        let out = &runs().outputs[name];
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            matches!(out.status.code(), Some(0 | 1)) && stdout.contains("over HTTP: speed 10x"),
            "{name}: exit {:?}\n{stdout}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Least privilege, measured: the manager's ClusterRole aggregates by one label; the core and
/// CAPI rule grants exactly what the controller used on the management cluster, the example
/// provider rules (each for its own API group, carrying the label) exactly the provider kinds
/// it used, and the workload-cluster role exactly what it used there. Discovery needs no rule
/// (`system:discovery`); Leases are the leader-election Role's (`deploy.rs`).
/// Core rules the over-HTTP runs never need, and the test whose requests need them: a Secret
/// read alone (a cluster that appears after the first list of kubeconfig Secrets, one the list
/// does not show, a retry) — every run here connects its clusters from the list.
const EXERCISED_ELSEWHERE: [(&str, &str, &str, &str); 1] = [(
    "",
    "secrets",
    "get",
    "adapter_e2e::workload_clusters_connect_from_one_list_of_kubeconfig_secrets",
)];

#[test]
fn the_deploy_cluster_roles_grant_exactly_what_the_over_http_runs_used() {
    let requests = &runs().requests;
    let base = rbac::objects_in(&rbac::deploy_dir().join("base"));
    let manager = rbac::find(&base, "ClusterRole", "lifecycle-manager");
    assert_eq!(
        manager["aggregationRule"]["clusterRoleSelectors"],
        json!([{"matchLabels": {rbac::AGGREGATE_LABEL: "true"}}]),
        "{manager}"
    );
    let core = rbac::find(&base, "ClusterRole", "lifecycle-manager-core");
    let workloads = rbac::objects_in(&rbac::deploy_dir().join("workload"));
    let workload = rbac::find(&workloads, "ClusterRole", "lifecycle-workload");
    let providers = rbac::provider_roles();
    let mut granted_provider = BTreeSet::new();
    for role in providers.iter().chain([core]) {
        assert_eq!(
            role["metadata"]["labels"][rbac::AGGREGATE_LABEL],
            "true",
            "{role}"
        );
    }
    for role in &providers {
        let grants = rbac::granted(role);
        let groups: BTreeSet<&str> = grants.iter().map(|g| g.group.as_str()).collect();
        assert!(
            groups.len() == 1 && groups.iter().all(|g| rbac::is_provider_group(g)),
            "a provider's rule covers its own API group: {groups:?}"
        );
        granted_provider.extend(grants);
    }
    let (non_resource, requests): (Vec<&Request>, Vec<&Request>) =
        requests.iter().partition(|r| rbac::is_non_resource(r));
    let beyond_discovery: Vec<_> = non_resource
        .iter()
        .filter(|r| !rbac::is_discovery(r))
        .collect();
    assert!(beyond_discovery.is_empty(), "{beyond_discovery:?}");
    let used = |cluster: &str, keep: &dyn Fn(&Grant) -> bool| -> BTreeSet<Grant> {
        requests
            .iter()
            .filter(|r| r.cluster == cluster)
            .map(|r| rbac::needed(r))
            .filter(|g| keep(g))
            .collect()
    };
    let lease = |g: &Grant| g.group == "coordination.k8s.io";
    let mut used_core = used("management", &|g| {
        !rbac::is_provider_group(&g.group) && !lease(g)
    });
    // Granted for what these runs do not reach, each proven by the test named.
    for (group, resource, verb, proof) in EXERCISED_ELSEWHERE {
        println!("granted for {proof}: {group}/{resource} {verb}");
        used_core.insert(Grant {
            group: group.to_string(),
            resource: resource.to_string(),
            verb: verb.to_string(),
        });
    }
    let used_provider = used("management", &|g| rbac::is_provider_group(&g.group));
    let used_workload = used("workload", &|_| true);
    println!("management, core and CAPI:\n{}", rbac::table(&used_core));
    println!(
        "management, provider kinds:\n{}",
        rbac::table(&used_provider)
    );
    println!("workload clusters:\n{}", rbac::table(&used_workload));
    let discovery: BTreeSet<String> = non_resource
        .iter()
        .map(|r| format!("  {} {} {}\n", r.cluster, r.verb, r.resource))
        .collect();
    println!(
        "non-resource (system:discovery):\n{}",
        discovery.into_iter().collect::<String>()
    );
    assert!(
        used("management", &lease).is_empty(),
        "no --leader-elect over HTTP"
    );
    for (what, granted, used) in [
        ("lifecycle-manager-core", rbac::granted(core), &used_core),
        ("the provider rules", granted_provider, &used_provider),
        (
            "lifecycle-workload",
            rbac::granted(workload),
            &used_workload,
        ),
    ] {
        assert_eq!(
            &granted,
            used,
            "{what}:\n{}",
            rbac::difference(&granted, used)
        );
    }
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
