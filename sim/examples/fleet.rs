//! One seeded run of a large generated fleet, timed, with peak memory:
//! `cargo run --release -p sim --example fleet -- [clusters] [machines_per_cluster] [seed] [--no-journal]`
//! (defaults: 1000 clusters x 10 machines, 5% deleted, 5% of nodes failing, one simulated hour).

use engine::time::Duration;

/// The `lifecycle` binary's allocator: this measures the simulator as `lifecycle sim run` runs it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
use sim::generate::{FleetSpec, fleet};

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let no_journal = std::env::args().any(|a| a == "--no-journal");
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let spec = FleetSpec {
        clusters: args.first().copied().unwrap_or(1000) as usize,
        machines_per_cluster: args.get(1).copied().unwrap_or(10) as usize,
        pods_per_node: 2,
        delete_fraction: 0.05,
        fail_fraction: 0.05,
        duration: Duration::from_mins(60),
        seed: args.get(2).copied().unwrap_or(1),
    };
    let build = std::time::Instant::now();
    let scenario = fleet(&spec);
    let built = build.elapsed();
    let start = std::time::Instant::now();
    let options = sim::RunOptions {
        no_journal,
        ..Default::default()
    };
    let report = sim::run_owned(scenario, &options).expect("fleet runs");
    let wall = start.elapsed();
    println!(
        "{} machines in {} clusters, seed {}: generated in {:.2?}, ran 1h simulated in {:.2?} wall ({} inputs journaled, {} timeline lines, {} violations); peak RSS {:.0} MiB",
        spec.clusters * spec.machines_per_cluster,
        spec.clusters,
        spec.seed,
        built,
        wall,
        report.inputs,
        report.timeline.lines.len(),
        report.violations.len(),
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    for v in report.violations.iter().take(5) {
        println!("violation: {v}");
    }
}
