//! Disk use of a controller's journal with retention, for a 1 000-machine fleet over 24 h
//! simulated (100 clusters x 10 machines, 3 pods per node, 20% of workers deleted and 10% of
//! Nodes failing over the day).
//!
//! `cargo bench -p sim --bench journal_disk` first simulates the day (records as `lifecycle run`
//! journals them: each instant's inputs one `Input::Batch` record), then appends those records
//! to a journal opened as `lifecycle run` opens it (durable appends, 4 KiB segments, a snapshot
//! of the engine's size every `SNAPSHOT_EVERY_INPUTS` records, the newest 2 kept, older records
//! retired), one group commit per simulated instant, and prints the disk use after every
//! snapshot against the bound in BENCHMARKS.md; the same without retention for comparison.
//! A steady fleet journals few records a day (the first run measured 5 746), fewer than one
//! snapshot interval, so retention never starts in a day: the day's records are then appended
//! again `LIFECYCLE_BENCH_DAYS` times (default 20: twenty such days, or one day at 20x the churn)
//! to show the bound holding where retention works and the journal growing without it.
//! Criterion then times one retention pass (snapshot + retiring) on that journal.
//! `LIFECYCLE_BENCH_HOURS=N` simulates N hours instead of 24.

use criterion::{Criterion, criterion_group, criterion_main};
use engine::journal::{Durability, Journal, JournalOptions};
use engine::time::{Duration, Timestamp};
use sim::generate::{FleetSpec, fleet};
use std::ops::ControlFlow;
use std::path::Path;

/// As `adapters::kube::journal_log::SNAPSHOT_EVERY_INPUTS` (one record per input or batch).
const SNAPSHOT_EVERY_RECORDS: u64 = 10_000;
const SNAPSHOTS_KEPT: usize = 2;

fn hours() -> i64 {
    std::env::var("LIFECYCLE_BENCH_HOURS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(24)
}

fn days() -> i64 {
    std::env::var("LIFECYCLE_BENCH_DAYS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(20)
}

fn spec() -> FleetSpec {
    FleetSpec {
        clusters: 100,
        machines_per_cluster: 10,
        pods_per_node: 3,
        delete_fraction: 0.2,
        fail_fraction: 0.1,
        duration: Duration::from_mins(60 * hours()),
        seed: 7,
    }
}

/// The simulated day's records, grouped by instant, and the engine state's size at the end.
struct Day {
    instants: Vec<Vec<(Timestamp, Vec<u8>)>>,
    records: u64,
    payload_bytes: u64,
    state_bytes: usize,
}

fn simulate(dir: &Path) -> Day {
    let start = std::time::Instant::now();
    let options = sim::RunOptions {
        journal_dir: Some(dir.to_path_buf()),
        batch_inputs: true,
        ..Default::default()
    };
    let report = sim::run(&fleet(&spec()), &options).expect("fleet runs");
    let (journal, _) = Journal::open(dir, JournalOptions::default()).expect("sim journal");
    let mut instants: Vec<Vec<(Timestamp, Vec<u8>)>> = Vec::new();
    let mut payload_bytes = 0;
    journal
        .for_each_record(1, |r| {
            payload_bytes += r.payload.len() as u64;
            match instants.last_mut() {
                Some(last) if last[0].0 == r.at => last.push((r.at, r.payload.to_vec())),
                _ => instants.push(vec![(r.at, r.payload.to_vec())]),
            }
            ControlFlow::Continue(())
        })
        .expect("sim journal reads back");
    let state_bytes = journal
        .latest_snapshot()
        .expect("snapshot")
        .map_or(0, |s| s.state.len());
    let records: u64 = instants.iter().map(|i| i.len() as u64).sum();
    println!(
        "simulated {} h of a 1 000-machine fleet in {:.1} s: {} inputs, {records} journal records in {} instants, {payload_bytes} payload bytes ({:.0} B/record), engine state {state_bytes} bytes",
        hours(),
        start.elapsed().as_secs_f64(),
        report.inputs,
        instants.len(),
        payload_bytes as f64 / records.max(1) as f64,
    );
    Day {
        instants,
        records,
        payload_bytes,
        state_bytes,
    }
}

/// What a journal took on disk while the day was appended.
struct DiskUse {
    max_bytes: u64,
    max_allocated_bytes: u64,
    final_bytes: u64,
    retired_through: u64,
    records: u64,
}

/// Appends the day's records `days` times (each repetition a day later).
fn append_days(dir: &Path, day: &Day, days: i64, retire: bool) -> DiskUse {
    let options = JournalOptions {
        durability: Durability::Flush,
        snapshots_kept: SNAPSHOTS_KEPT,
        retire_records: retire,
        ..JournalOptions::default()
    };
    let (mut journal, _) = Journal::open(dir, options).expect("open");
    let state = vec![0x5a; day.state_bytes];
    let mut since_snapshot = 0;
    let mut usage = DiskUse {
        max_bytes: 0,
        max_allocated_bytes: 0,
        final_bytes: 0,
        retired_through: 0,
        records: 0,
    };
    let day_ms = Duration::from_mins(60 * hours()).as_millis();
    let repeated = (0..days).flat_map(|d| day.instants.iter().map(move |i| (d, i)));
    for (d, instant) in repeated {
        let shift = d * day_ms;
        let entries: Vec<(Timestamp, &[u8])> = instant
            .iter()
            .map(|(at, p)| (Timestamp(at.0 + shift), p.as_slice()))
            .collect();
        journal.append_batch(&entries).expect("append");
        since_snapshot += entries.len() as u64;
        if since_snapshot >= SNAPSHOT_EVERY_RECORDS {
            let through = journal.last_seq().expect("records");
            journal
                .write_snapshot(through, entries[0].0, &state)
                .expect("snapshot");
            since_snapshot = 0;
            let stats = journal.stats().expect("stats");
            usage.max_bytes = usage.max_bytes.max(stats.disk_bytes);
            usage.max_allocated_bytes = usage.max_allocated_bytes.max(stats.disk_allocated_bytes);
        }
    }
    let stats = journal.stats().expect("stats");
    usage.max_bytes = usage.max_bytes.max(stats.disk_bytes);
    usage.max_allocated_bytes = usage.max_allocated_bytes.max(stats.disk_allocated_bytes);
    usage.final_bytes = stats.disk_bytes;
    usage.retired_through = stats.retired_through;
    usage.records = stats.records;
    usage
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let day = simulate(&tmp.path().join("sim"));
    let mean_record = day.payload_bytes as f64 / day.records.max(1) as f64;
    let mut max_retained = 0;
    for (days, retire) in [(1, true), (days(), true), (days(), false)] {
        let start = std::time::Instant::now();
        let dir = tmp.path().join(format!("{days}-{retire}"));
        let u = append_days(&dir, &day, days, retire);
        if retire {
            max_retained = max_retained.max(u.max_bytes);
        }
        println!(
            "{days} day(s), retention {}: {} records appended in {:.1} s; {} kept (retired 1..{}); disk max {} bytes (allocated {}), at the end {} bytes",
            if retire { "on (2 snapshots)" } else { "off" },
            day.records * days as u64,
            start.elapsed().as_secs_f64(),
            u.records,
            u.retired_through,
            u.max_bytes,
            u.max_allocated_bytes,
            u.final_bytes,
        );
    }
    // The bound (BENCHMARKS.md): records kept are at most K snapshot intervals plus two chunks
    // (the head and the one not yet whole), stored at most 1.25x their payload (sled's
    // transient stale copies), plus K + 1 snapshots and 4 MiB of sled's own files.
    let batch_max = day.instants.iter().map(Vec::len).max().unwrap_or(1) as f64;
    let kept_records_max =
        SNAPSHOTS_KEPT as f64 * SNAPSHOT_EVERY_RECORDS as f64 + 2.0 * 8.0 * batch_max;
    let bound = 1.25 * kept_records_max * (mean_record + 20.0)
        + (SNAPSHOTS_KEPT as f64 + 1.0) * day.state_bytes as f64
        + 4.0 * 1024.0 * 1024.0;
    println!(
        "bound: 1.25 * (K*E + 2*8*b) * (r + 20) + (K+1)*S + 4 MiB = 1.25 * ({SNAPSHOTS_KEPT}*{SNAPSHOT_EVERY_RECORDS} + 16*{batch_max}) * ({mean_record:.0} + 20) + {}*{} + 4 MiB = {bound:.0} bytes",
        SNAPSHOTS_KEPT + 1,
        day.state_bytes
    );
    println!(
        "largest disk use with retention: {max_retained} bytes, {} the bound",
        if (max_retained as f64) <= bound {
            "within"
        } else {
            "OVER"
        }
    );

    let dir = tmp.path().join(format!("{}-true", days()));
    let (mut journal, _) = Journal::open(
        &dir,
        JournalOptions {
            snapshots_kept: SNAPSHOTS_KEPT,
            retire_records: true,
            ..JournalOptions::default()
        },
    )
    .unwrap();
    let state = vec![0x5a; day.state_bytes];
    let payload = vec![0xa5u8; mean_record as usize];
    let mut group = c.benchmark_group("journal_retention");
    group.sample_size(10);
    group.bench_function("snapshot_and_retire_after_10000_records", |b| {
        b.iter(|| {
            for _ in 0..SNAPSHOT_EVERY_RECORDS / 100 {
                let at = Timestamp(0);
                let entries: Vec<(Timestamp, &[u8])> =
                    (0..100).map(|_| (at, payload.as_slice())).collect();
                journal.append_batch(&entries).unwrap();
            }
            let through = journal.last_seq().unwrap();
            journal
                .write_snapshot(through, Timestamp(0), &state)
                .unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
