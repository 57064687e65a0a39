//! Builds a large journal, then measures a restart: open + latest snapshot + replay of the tail.
//!
//! ```text
//! cargo run --release -p engine --example journal_restart -- \
//!     --records 10000000 --batch 4096 --snapshot-every 1000000 --dir /tmp/journal-10m
//! ```
//! Flags: `--records N` (default 1 000 000), `--batch N` records per `append_batch` (4096),
//! `--payload-bytes N` (350), `--snapshot-every N` (1 000 000), `--state-bytes N` (1 MiB),
//! `--buffered` (Durability::Buffered), `--dir PATH` (a temp dir, removed at the end),
//! `--keep` (reuse an existing journal in `--dir`: skip building).

use engine::journal::{Durability, Journal, JournalOptions};
use engine::time::Timestamp;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

struct Args {
    records: u64,
    batch: usize,
    payload_bytes: usize,
    snapshot_every: u64,
    state_bytes: usize,
    buffered: bool,
    dir: Option<PathBuf>,
    keep: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        records: 1_000_000,
        batch: 4096,
        payload_bytes: 350,
        snapshot_every: 1_000_000,
        state_bytes: 1 << 20,
        buffered: false,
        dir: None,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut num = || {
            it.next()
                .and_then(|v| v.replace('_', "").parse::<u64>().ok())
                .expect("number after flag")
        };
        match flag.as_str() {
            "--records" => a.records = num(),
            "--batch" => a.batch = num() as usize,
            "--payload-bytes" => a.payload_bytes = num() as usize,
            "--snapshot-every" => a.snapshot_every = num(),
            "--state-bytes" => a.state_bytes = num() as usize,
            "--buffered" => a.buffered = true,
            "--keep" => a.keep = true,
            "--dir" => a.dir = Some(PathBuf::from(it.next().expect("path after --dir"))),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// A payload that looks like an encoded input: mostly varied bytes, not one repeated byte.
fn payload(seq: u64, bytes: usize, buf: &mut Vec<u8>) {
    buf.clear();
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while buf.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf.extend_from_slice(&x.to_le_bytes());
    }
    buf.truncate(bytes);
}

fn main() {
    let args = parse_args();
    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().unwrap();
            tmp.path().join("journal")
        }
    };
    let durability = if args.buffered {
        Durability::Buffered
    } else {
        Durability::Flush
    };
    let opts = JournalOptions {
        durability,
        batch_records_max: args.batch,
        ..JournalOptions::default()
    };

    if !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
        let (mut journal, _) = Journal::open(&dir, opts.clone()).unwrap();
        let payloads: Vec<Vec<u8>> = (0..args.batch as u64)
            .map(|i| {
                let mut b = Vec::new();
                payload(i, args.payload_bytes, &mut b);
                b
            })
            .collect();
        let state = vec![0x5au8; args.state_bytes];
        let started = Instant::now();
        let mut next_snapshot = args.snapshot_every;
        let mut appended = 0u64;
        while appended < args.records {
            let n = (args.records - appended).min(args.batch as u64) as usize;
            let entries: Vec<(Timestamp, &[u8])> = payloads[..n]
                .iter()
                .map(|p| (Timestamp(appended as i64), &p[..]))
                .collect();
            let range = journal.append_batch(&entries).unwrap();
            appended = *range.end();
            if appended >= next_snapshot {
                journal
                    .write_snapshot(appended, Timestamp(appended as i64), &state)
                    .unwrap();
                next_snapshot += args.snapshot_every;
            }
        }
        journal.flush().unwrap();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "append: {} records in {:.2} s = {:.0} records/s ({:?}, {} records per append_batch)",
            args.records,
            secs,
            args.records as f64 / secs,
            durability,
            args.batch
        );
    }

    let started = Instant::now();
    let (journal, report) = Journal::open(&dir, opts).unwrap();
    let open_s = started.elapsed().as_secs_f64();
    let snap_started = Instant::now();
    let snapshot = journal.latest_snapshot().unwrap();
    let snap_s = snap_started.elapsed().as_secs_f64();
    let from = snapshot.as_ref().map_or(1, |s| s.through_seq + 1);
    let tail_started = Instant::now();
    let mut checksum = 0u64;
    let tail = journal
        .for_each_record(from, |r| {
            checksum = checksum.wrapping_add(r.payload.len() as u64);
            ControlFlow::Continue(())
        })
        .unwrap();
    let tail_s = tail_started.elapsed().as_secs_f64();
    let restart_s = started.elapsed().as_secs_f64();
    println!(
        "restart: open {:.3} s + snapshot through {:?} ({} bytes) {:.3} s + replay {} tail records {:.3} s = {:.3} s (next_seq {})",
        open_s,
        snapshot.as_ref().map(|s| s.through_seq),
        snapshot.as_ref().map_or(0, |s| s.state.len()),
        snap_s,
        tail,
        tail_s,
        restart_s,
        report.next_seq
    );

    let replay_started = Instant::now();
    let all = journal
        .for_each_record(1, |r| {
            checksum = checksum.wrapping_add(r.payload[0] as u64);
            ControlFlow::Continue(())
        })
        .unwrap();
    let replay_s = replay_started.elapsed().as_secs_f64();
    println!(
        "replay: {all} records in {replay_s:.2} s = {:.0} records/s (checksum {checksum})",
        all as f64 / replay_s
    );

    let stats = journal.stats().unwrap();
    println!(
        "space: payload {} bytes, disk {} bytes (allocated {}), ratio {:.3} (allocated {:.3}), {} batches, snapshots {:?}",
        stats.payload_bytes,
        stats.disk_bytes,
        stats.disk_allocated_bytes,
        stats.disk_bytes as f64 / stats.payload_bytes as f64,
        stats.disk_allocated_bytes as f64 / stats.payload_bytes as f64,
        stats.batches,
        stats.snapshots
    );
}
