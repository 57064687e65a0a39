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
//!
//! A second client of this process watches the Machines too: the same percentiles measured
//! from the instant it receives each Machine's deletion event (the issue's "the server emits a
//! watch event") leave out the DELETE's own round trip. `LATENCY_LOG=path` keeps the
//! controller's log (with `LATENCY_RUST_LOG=debug`, every input it applied, timestamped);
//! `LATENCY_JOURNAL=path` its journal.

use adapters::apiserver::ServerOptions;
use adapters::apiserver::arrivals::Arrivals;
use adapters::serve::ServedWorld;
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, WatchEvent, WatchParams,
};
use std::collections::BTreeMap;
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

/// Prints `label: p50, p99, max` of `sorted` (nothing when it is empty).
fn report(label: &str, sorted: &[Duration]) {
    let Some(max) = sorted.last() else {
        return;
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{label}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} measured)",
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 0.99)),
        ms(*max),
        sorted.len()
    );
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
    let log = std::env::var_os("LATENCY_LOG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("run.log"));
    // `LATENCY_JOURNAL=path` puts the journal elsewhere (on tmpfs, its fsyncs cost nothing).
    let journal = std::env::var_os("LATENCY_JOURNAL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("journal"));
    let rust_log = std::env::var("LATENCY_RUST_LOG").unwrap_or_else(|_| "info".into());
    let mut child = std::process::Command::new(&binary)
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfigs[0].1)
        .arg("--journal")
        .arg(journal)
        .args(["--kube-api-qps", "100000", "--kube-api-burst", "100000"])
        .args(["--metrics-addr", "127.0.0.1:0", "--log-format", "json"])
        .env("RUST_LOG", rust_log)
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
    let seen = observe_deletions(api.clone()).await;
    let workers: Vec<String> = (0..clusters)
        .flat_map(|c| (1..machines).map(move |m| format!("c{c}-m{m}")))
        .collect();
    let step = workers.len() / deletions.max(1);
    let interval = Duration::from_secs(seconds) / deletions.max(1) as u32;
    let clock = Clock::now();
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
    let seen = seen.lock().unwrap().clone();
    let controller_log = std::fs::read_to_string(&log).unwrap_or_default();
    let marks = LogMarks::read(&controller_log, &clock);
    let mut stages: [Vec<Duration>; 4] = Default::default();
    let mut slowest: Vec<(Duration, String)> = Vec::new();
    let mut latencies = Vec::new();
    let mut from_event = Vec::new();
    for (name, t0) in &deleted {
        let needle = format!("/machines/{name}");
        let first = window.iter().find(|a| {
            a.at > *t0
                && a.server == world.management.addr()
                && a.method != "DELETE"
                && a.path.contains(&needle)
        });
        match first {
            Some(a) => {
                latencies.push(a.at - *t0);
                if let Some(event) = seen.get(name) {
                    from_event.push(a.at.saturating_duration_since(*event));
                    let cluster = name.split('-').next().unwrap_or_default();
                    let watched = marks.watching.get(cluster).copied();
                    let commanded = marks.phase_patch.get(name.as_str()).copied();
                    if let (Some(watched), Some(commanded)) = (watched, commanded) {
                        let points = [*t0, *event, watched, commanded, a.at];
                        for (i, stage) in stages.iter_mut().enumerate() {
                            stage.push(points[i + 1].saturating_duration_since(points[i]));
                        }
                        let ms = |i: usize| {
                            points[i + 1]
                                .saturating_duration_since(points[i])
                                .as_secs_f64()
                                * 1e3
                        };
                        slowest.push((
                            a.at.saturating_duration_since(*event),
                            format!(
                                "{name}: {:.2} / {:.2} / {:.2} / {:.2} ms",
                                ms(0),
                                ms(1),
                                ms(2),
                                ms(3)
                            ),
                        ));
                    }
                }
            }
            None => eprintln!("no request about {name}"),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    latencies.sort();
    from_event.sort();
    let sent = window.len() - deleted.len();
    println!(
        "fleet {} Machines ({clusters} clusters x {machines}, {pods} pods per Node); {} deletions over {:.0} s",
        clusters * machines,
        deleted.len(),
        churn.as_secs_f64()
    );
    report("DELETE sent -> first request", &latencies);
    report("watch event seen by a client -> first request", &from_event);
    const STAGES: [&str; 4] = [
        "DELETE sent -> event seen by a client",
        "event seen by a client -> the controller's intake has it (info log)",
        "intake -> command issued (journal append and fsync, engine)",
        "command issued -> request arrives",
    ];
    for (name, stage) in STAGES.iter().zip(stages.iter_mut()) {
        stage.sort();
        report(&format!("  {name}"), stage);
    }
    slowest.sort();
    println!("  slowest from the event (the four stages above, in order):");
    for (_, line) in slowest.iter().rev().take(5) {
        println!("    {line}");
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

/// Watches the Machines from now on and notes when each one's deletion event (the first event
/// showing a deletionTimestamp) arrives.
async fn observe_deletions(
    api: Api<DynamicObject>,
) -> Arc<std::sync::Mutex<BTreeMap<String, Instant>>> {
    let seen = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let version = api
        .list_metadata(&Default::default())
        .await
        .expect("list Machines")
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut events = api
        .watch(&WatchParams::default().timeout(290), &version)
        .await
        .expect("watch Machines")
        .boxed();
    let noted = seen.clone();
    tokio::spawn(async move {
        while let Some(Ok(event)) = events.next().await {
            let at = Instant::now();
            if let WatchEvent::Modified(machine) = event
                && machine.metadata.deletion_timestamp.is_some()
            {
                let name = machine.metadata.name.unwrap_or_default();
                noted.lock().unwrap().entry(name).or_insert(at);
            }
        }
    });
    seen
}

/// Maps the controller log's wall-clock timestamps onto this process's `Instant`s.
struct Clock {
    instant: Instant,
    wall_of_day: f64,
}

impl Clock {
    fn now() -> Self {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            instant: Instant::now(),
            wall_of_day: since_epoch.as_secs_f64() % 86_400.0,
        }
    }

    /// `2026-11-26T21:44:22.802003Z` as an `Instant` (within a day of the clock's reading).
    fn instant_of(&self, timestamp: &str) -> Option<Instant> {
        let time = timestamp.split_once('T')?.1.trim_end_matches('Z');
        let mut parts = time.split(':');
        let (h, m, s): (f64, f64, f64) = (
            parts.next()?.parse().ok()?,
            parts.next()?.parse().ok()?,
            parts.next()?.parse().ok()?,
        );
        let mut of_day = h * 3600.0 + m * 60.0 + s;
        if of_day + 43_200.0 < self.wall_of_day {
            of_day += 86_400.0;
        }
        let offset = of_day - self.wall_of_day;
        if offset >= 0.0 {
            self.instant.checked_add(Duration::from_secs_f64(offset))
        } else {
            self.instant.checked_sub(Duration::from_secs_f64(-offset))
        }
    }
}

/// What the controller's info log says about each deletion: when the intake saw the first
/// deleting Machine of a cluster, and when the Machine's phase patch was issued.
#[derive(Default)]
struct LogMarks {
    watching: BTreeMap<String, Instant>,
    phase_patch: BTreeMap<String, Instant>,
}

impl LogMarks {
    fn read(log: &str, clock: &Clock) -> Self {
        let mut marks = LogMarks::default();
        for line in log.lines() {
            let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let Some(at) = entry["timestamp"]
                .as_str()
                .and_then(|t| clock.instant_of(t))
            else {
                continue;
            };
            let fields = &entry["fields"];
            if let Some(cluster) = fields["cluster"].as_str()
                && fields["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("a Machine is being deleted"))
            {
                let name = cluster.rsplit('/').next().unwrap_or(cluster).to_string();
                marks.watching.entry(name).or_insert(at);
            }
            if let Some(rest) = fields["command"]
                .as_str()
                .and_then(|c| c.split("PatchStatus Machine default/").nth(1))
                && let Some(name) = rest.strip_suffix(" status.phase=Deleting")
            {
                marks.phase_patch.entry(name.to_string()).or_insert(at);
            }
        }
        marks
    }
}
