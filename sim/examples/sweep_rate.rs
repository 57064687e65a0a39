//! Sweep throughput, for A/B comparisons: every scenario file of a directory (default
//! `scenarios/`) × `SEEDS` seeds with every fault kind, on one thread; prints runs per second.
//!
//! `cargo run --release -p sim --example sweep_rate -- SEEDS [DIR]`

use sim::sweep::{FaultChoice, Feeding, sweep};
use std::path::PathBuf;

/// The `lifecycle` binary's allocator: this measures the simulator as `lifecycle sim run` runs it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let seeds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios")));
    let paths = sim::scenario::files(&dir).expect("the scenario directory reads");
    let scenarios: Vec<_> = paths
        .iter()
        .map(|p| sim::scenario::load(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect();
    let started = std::time::Instant::now();
    let report = sweep(
        &scenarios,
        1,
        seeds,
        1,
        &FaultChoice::All,
        Feeding::default(),
        &|_, _| {},
    );
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} runs ({} scenarios x {seeds} seeds) in {secs:.2} s: {:.1} runs/s; {} failing",
        report.runs,
        scenarios.len(),
        report.runs as f64 / secs,
        report.failures.len()
    );
}
