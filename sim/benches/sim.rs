//! Simulated time per wall time on a 100-machine, 10-cluster fleet with churn (one simulated hour).
//! `cargo bench -p sim --bench sim`; the ratio is printed once before criterion's timing.

use criterion::{Criterion, criterion_group, criterion_main};
use engine::time::Duration;
use sim::generate::{FleetSpec, fleet};

fn spec() -> FleetSpec {
    FleetSpec {
        clusters: 10,
        machines_per_cluster: 10,
        pods_per_node: 3,
        delete_fraction: 0.2,
        fail_fraction: 0.1,
        duration: Duration::from_mins(60),
        seed: 7,
    }
}

fn run_once(journal: bool) -> sim::Report {
    let scenario = fleet(&spec());
    let options = sim::RunOptions {
        no_journal: !journal,
        ..Default::default()
    };
    sim::run(&scenario, &options).expect("fleet runs")
}

fn bench(c: &mut Criterion) {
    for journal in [false, true] {
        let start = std::time::Instant::now();
        let report = run_once(journal);
        let wall = start.elapsed().as_secs_f64();
        println!(
            "fleet 100 machines / 10 clusters, 1h simulated, journal={journal}: {:.3} s wall, {} inputs, {:.0}x real time, {} timeline lines",
            wall,
            report.inputs,
            report.simulated_ms as f64 / 1000.0 / wall,
            report.timeline.lines.len()
        );
    }
    let mut group = c.benchmark_group("sim");
    group.sample_size(10);
    group.bench_function("fleet_100_machines_1h_no_journal", |b| {
        b.iter(|| run_once(false))
    });
    group.bench_function("fleet_100_machines_1h_journal", |b| {
        b.iter(|| run_once(true))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
