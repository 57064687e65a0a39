//! Journal benchmarks with ~350-byte payloads (the size of an encoded engine input).
//!
//! `cargo bench -p engine --bench journal` — prints the space ratio once, then measures durable
//! group-commit appends per batch size, buffered appends, the commit record's own cost per
//! flush (one 40-byte entry written and fdatasynced), replay (visitor and owned iterator) and
//! restart (open + latest snapshot + replay of a 10 000-record tail) on a 1 M-record journal.
//! The 10 M-record restart is `examples/journal_restart.rs`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use engine::journal::{Durability, Journal, JournalOptions};
use engine::time::Timestamp;
use std::hint::black_box;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

const PAYLOAD_BYTES: usize = 350;
const REPLAY_RECORDS: u64 = 1_000_000;
const RESTART_TAIL_RECORDS: u64 = 10_000;

fn payloads(n: usize) -> Vec<Vec<u8>> {
    (0..n as u64)
        .map(|i| {
            let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut p = Vec::with_capacity(PAYLOAD_BYTES + 8);
            while p.len() < PAYLOAD_BYTES {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p.extend_from_slice(&x.to_le_bytes());
            }
            p.truncate(PAYLOAD_BYTES);
            p
        })
        .collect()
}

fn fill(journal: &mut Journal, records: u64, batch: usize, payloads: &[Vec<u8>]) {
    let mut left = records;
    while left > 0 {
        let n = left.min(batch as u64) as usize;
        let at = Timestamp(journal.next_seq() as i64);
        let entries: Vec<(Timestamp, &[u8])> = payloads[..n].iter().map(|p| (at, &p[..])).collect();
        journal.append_batch(&entries).unwrap();
        left -= n as u64;
    }
}

fn open(dir: &Path, durability: Durability) -> Journal {
    let opts = JournalOptions {
        durability,
        ..JournalOptions::default()
    };
    Journal::open(dir, opts).unwrap().0
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("journal_append");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (durability, batches) in [
        (Durability::Flush, &[1024usize, 4096, 8192][..]),
        (Durability::Buffered, &[4096][..]),
    ] {
        for &batch in batches {
            let tmp = tempfile::tempdir().unwrap();
            let mut journal = open(tmp.path(), durability);
            let payloads = payloads(batch);
            let entries: Vec<(Timestamp, &[u8])> =
                payloads.iter().map(|p| (Timestamp(0), &p[..])).collect();
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("{durability:?}"), batch),
                &batch,
                |b, _| b.iter(|| black_box(journal.append_batch(&entries).unwrap())),
            );
        }
    }
    group.finish();
}

fn replay_and_restart(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let payloads = payloads(4096);
    {
        let mut journal = open(tmp.path(), Durability::Flush);
        fill(
            &mut journal,
            REPLAY_RECORDS - RESTART_TAIL_RECORDS,
            4096,
            &payloads,
        );
        let through = journal.last_seq().unwrap();
        journal
            .write_snapshot(through, Timestamp(0), &vec![0x5a; 1 << 20])
            .unwrap();
        fill(&mut journal, RESTART_TAIL_RECORDS, 4096, &payloads);
        let stats = journal.stats().unwrap();
        println!(
            "journal space: {} records, payload {} bytes, disk {} bytes, ratio {:.3} (with a 1 MiB snapshot)",
            stats.records,
            stats.payload_bytes,
            stats.disk_bytes,
            stats.disk_bytes as f64 / stats.payload_bytes as f64
        );
    }
    let journal = open(tmp.path(), Durability::Flush);
    let mut group = c.benchmark_group("journal_replay");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(REPLAY_RECORDS));
    group.bench_function("for_each_record", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            let n = journal
                .for_each_record(1, |r| {
                    sum = sum.wrapping_add(u64::from(r.payload[0]) + r.seq);
                    ControlFlow::Continue(())
                })
                .unwrap();
            assert_eq!(n, REPLAY_RECORDS);
            black_box(sum)
        })
    });
    group.bench_function("records_iter", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for r in journal.records(1) {
                sum = sum.wrapping_add(u64::from(r.unwrap().payload[0]));
            }
            black_box(sum)
        })
    });
    group.finish();
    drop(journal);

    let mut group = c.benchmark_group("journal_restart");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("open_snapshot_tail_1m", |b| {
        b.iter(|| {
            let journal = open(tmp.path(), Durability::Flush);
            let snapshot = journal.latest_snapshot().unwrap().unwrap();
            let tail = journal
                .for_each_record(snapshot.through_seq + 1, |_| ControlFlow::Continue(()))
                .unwrap();
            assert_eq!(tail, RESTART_TAIL_RECORDS);
            black_box(snapshot.state.len())
        })
    });
    group.finish();
}

/// What the commit record adds to every durable flush: one 40-byte entry appended to the
/// `commits` file and fdatasynced (`commit.rs` does exactly this after sled's flush). Per
/// record it is this divided by the records per `append_batch`.
fn commit_record(c: &mut Criterion) {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(tmp.path().join(engine::journal::COMMITS_FILE))
        .unwrap();
    let entry = [0x5au8; 40];
    let mut group = c.benchmark_group("journal_commit_record");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4));
    group.bench_function("entry_write_and_fdatasync", |b| {
        b.iter(|| {
            file.write_all(&entry).unwrap();
            file.sync_data().unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, append, commit_record, replay_and_restart);
criterion_main!(benches);
