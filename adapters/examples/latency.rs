//! Event → request latency of the production path (issue 14 item 6): a generated fleet served
//! by the fake API servers of this process, `lifecycle run` (the release binary) against them
//! with the rate limit raised out of the way, and Machines deleted one by one through the API.
//! For each deletion: from the instant the DELETE is sent (the server sets the
//! deletionTimestamp and emits the watch event while answering it) to the arrival of the
//! controller's first request about that Machine (its status patch), journal fsync included.
//!
//!     cargo build --release -p adapters --bin lifecycle
//!     cargo run --release -p adapters --example latency -- CLUSTERS MACHINES PODS DELETIONS SECONDS
//!
//! Prints p50/p99/max, the requests per second the controller sent during the churn, and the
//! CPU seconds of the servers (this process) and of the controller over the churn.

use adapters::apiserver::ServerOptions;
use adapters::apiserver::arrivals::Arrivals;
use adapters::serve::ServedWorld;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// User + system CPU seconds of a process, from `/proc/PID/stat`.
fn cpu_seconds(pid: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<f64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) / 100.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let clusters = arg(1, 100) as usize;
    let machines = arg(2, 10) as usize;
    let pods = arg(3, 10) as usize;
    let deletions = arg(4, 50) as usize;
    let seconds = arg(5, 120);
    let fleet = sim::generate::fleet(&sim::generate::FleetSpec {
        clusters,
        machines_per_cluster: machines,
        pods_per_node: pods,
        delete_fraction: 0.0,
        fail_fraction: 0.0,
        duration: engine::Duration::from_secs(600),
        seed: 1,
    });
    let arrivals = Arc::new(Arrivals::default());
    let options = ServerOptions {
        arrivals: Some(arrivals.clone()),
        ..Default::default()
    };
    let world = ServedWorld::start(&fleet, 0, options)
        .await
        .expect("servers start");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfigs = world.write_kubeconfigs(dir.path()).expect("kubeconfigs");
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/lifecycle");
    let log = dir.path().join("run.log");
    let mut child = std::process::Command::new(&binary)
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfigs[0].1)
        .arg("--journal")
        .arg(dir.path().join("journal"))
        .args(["--kube-api-qps", "100000", "--kube-api-burst", "100000"])
        .args(["--metrics-addr", "127.0.0.1:0", "--log-format", "json"])
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release first)", binary.display()));
    let pid = child.id().to_string();
    let started = Instant::now();
    // Deletions start once every cluster's cache has synced (one `info` line each).
    let synced = |log: &str| log.matches("cache synced").count() > clusters;
    while !synced(&std::fs::read_to_string(&log).unwrap_or_default()) {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "not synced in 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("synced after {:.1} s", started.elapsed().as_secs_f64());
    // Let the start's burst of work settle before measuring.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let client = adapters::kube::client_for_url(&world.management.url()).expect("client");
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, "default", &ApiResource::from_gvk(&gvk));
    let workers: Vec<String> = (0..clusters)
        .flat_map(|c| (1..machines).map(move |m| format!("c{c}-m{m}")))
        .collect();
    let step = workers.len() / deletions.max(1);
    let interval = Duration::from_secs(seconds) / deletions.max(1) as u32;
    let (server_cpu0, controller_cpu0) = (cpu_seconds("self"), cpu_seconds(&pid));
    let from = arrivals.all().len();
    let churn_start = Instant::now();
    let mut deleted = Vec::new();
    for i in 0..deletions {
        let name = &workers[(i * step.max(1)) % workers.len()];
        let t0 = Instant::now();
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete");
        deleted.push((name.clone(), t0));
        tokio::time::sleep(interval).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let churn = churn_start.elapsed();
    let (server_cpu, controller_cpu) = (
        cpu_seconds("self") - server_cpu0,
        cpu_seconds(&pid) - controller_cpu0,
    );
    let all = arrivals.all();
    let window = &all[from..];
    let mut latencies = Vec::new();
    for (name, t0) in &deleted {
        let needle = format!("/machines/{name}");
        let first = window.iter().find(|a| {
            a.at > *t0
                && a.server == world.management.addr()
                && a.method != "DELETE"
                && a.path.contains(&needle)
        });
        match first {
            Some(a) => latencies.push(a.at - *t0),
            None => eprintln!("no request about {name}"),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    latencies.sort();
    let sent = window.len() - deleted.len();
    println!(
        "fleet {} Machines ({clusters} clusters x {machines}, {pods} pods per Node); {} deletions over {:.0} s",
        clusters * machines,
        deleted.len(),
        churn.as_secs_f64()
    );
    if !latencies.is_empty() {
        println!(
            "event -> first request: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} measured)",
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            latencies.last().unwrap().as_secs_f64() * 1e3,
            latencies.len()
        );
    }
    println!(
        "requests sent by the controller: {sent} ({:.1}/s); CPU over the churn: servers {:.1} s ({:.0} %), controller {:.1} s ({:.0} %)",
        sent as f64 / churn.as_secs_f64(),
        server_cpu,
        100.0 * server_cpu / churn.as_secs_f64(),
        controller_cpu,
        100.0 * controller_cpu / churn.as_secs_f64()
    );
}
