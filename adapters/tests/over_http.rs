//! Scenarios end to end over real HTTP through the real `lifecycle run` process:
//! `lifecycle sim run FILE --over-http --speed 10` serves the world, plays it live, runs the
//! binary as a child against it (killing it with SIGKILL and restarting it from its journal
//! where the scenario restarts the controller), and judges the same expectations and
//! invariants as in-process, with the stated tolerance.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

/// Simulated seconds per real second: the Lease, HTTP round trips and scheduling jitter stay
/// well inside the scenarios' windows (the tolerance is one real second, 10 s simulated).
const SPEED: &str = "10";

/// How many scenarios run at once: each is two mostly idle processes.
const PARALLEL: usize = 6;

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
    "deletion-pdb-blocks-until-rescheduled",
    "deletion-order-of-actions",
    "deletion-drain-rule-order",
    "deletion-volume-detach-wait",
    "deletion-unreachable-node",
    "world-kubelet-stop",
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

fn over_http(name: &str) -> Output {
    let file = scenario(name);
    lifecycle(&[
        "sim",
        "run",
        file.to_str().expect("a UTF-8 path"),
        "--over-http",
        "--speed",
        SPEED,
    ])
}

#[test]
fn the_over_http_set_holds_every_expectation_and_invariant() {
    // Popped from the end: the longest first.
    let queue = Mutex::new(SET.iter().rev().copied().collect::<Vec<_>>());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..PARALLEL {
            s.spawn(|| {
                loop {
                    // Not in a `while let`: its guard would hold the queue for the whole run.
                    let next = queue.lock().unwrap().pop();
                    let Some(name) = next else { break };
                    let out = over_http(name);
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    let passed = out.status.code() == Some(0)
                        && stdout.contains("\nok: seed")
                        && stdout.contains("over HTTP: speed 10x");
                    if !passed {
                        failures.lock().unwrap().push(format!(
                            "{name}: exit {:?}\n{stdout}\n{}",
                            out.status.code(),
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Killed with SIGKILL mid-drain (twice) and restarted from its journal each time.
#[test]
fn a_controller_killed_mid_drain_restarts_from_its_journal() {
    let out = over_http("faults-controller-restart-and-torn-journal");
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
        let mut config = kube::Config::new(url.parse().unwrap());
        config.default_retry = false;
        let client = kube::Client::try_from(config).unwrap();
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
