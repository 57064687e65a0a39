//! `lifecycle log verify|show|stats --journal DIR`: read a journal, change nothing.

use clap::{Subcommand, ValueEnum};
use engine::journal::{Journal, JournalOptions};
use engine::recovery;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum LogCommand {
    /// Check every checksum, replay from the first record and from the latest snapshot, and
    /// compare state hashes. Exit 1 on any problem.
    Verify {
        #[arg(long)]
        journal: PathBuf,
    },
    /// Print the journaled inputs, one per line.
    Show {
        #[arg(long)]
        journal: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// First sequence number to print.
        #[arg(long, default_value_t = 1)]
        from: u64,
    },
    /// Counts, sizes and snapshots.
    Stats {
        #[arg(long)]
        journal: PathBuf,
    },
}

pub fn main(command: LogCommand) -> u8 {
    let result = match command {
        LogCommand::Verify { journal } => verify(&journal),
        LogCommand::Show {
            journal,
            format,
            from,
        } => show(&journal, format, from),
        LogCommand::Stats { journal } => stats(&journal),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Opens an existing journal (a missing one is an error, not a new empty journal).
fn open(dir: &Path) -> Result<Journal, String> {
    if !dir.join("conf").exists() && !dir.join("db").exists() {
        return Err(format!("{}: no journal here", dir.display()));
    }
    let (journal, report) = Journal::open(dir, JournalOptions::default())
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Some(t) = report.truncated_tail {
        eprintln!(
            "{}: a torn last batch from record {} ({} bytes) was removed on open: {}",
            dir.display(),
            t.from_seq,
            t.bytes,
            t.reason
        );
    }
    Ok(journal)
}

fn verify(dir: &Path) -> Result<u8, String> {
    let journal = open(dir)?;
    let v = recovery::verify(&journal);
    println!(
        "{}: {} records, last seq {}",
        dir.display(),
        v.records,
        v.last_seq.map_or("-".to_string(), |s| s.to_string())
    );
    if let Some(h) = v.full_replay_hash {
        println!("replayed from record 1: state {h:016x}");
    }
    if let Some(h) = v.restored_hash {
        match v.snapshot_seq {
            Some(s) => println!("restored from snapshot through {s}: state {h:016x}"),
            None => println!("restored without a snapshot: state {h:016x}"),
        }
    }
    for p in &v.problems {
        println!("PROBLEM {p}");
    }
    if v.is_clean() {
        println!("ok");
        Ok(0)
    } else {
        println!("FAILED: {} problem(s)", v.problems.len());
        Ok(1)
    }
}

/// Prints each input and, by replaying the engine, the commands it caused (with their reasons):
/// the journal answers "why" long after the fact.
fn show(dir: &Path, format: Format, from: u64) -> Result<u8, String> {
    let journal = open(dir)?;
    let mut failure = None;
    let mut engine = engine::Engine::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    journal
        .for_each_record(1, |r| {
            use std::io::Write;
            let input = match recovery::decode_input(r.seq, r.payload) {
                Ok(input) => input,
                Err(e) => {
                    failure = Some(e.to_string());
                    return ControlFlow::Break(());
                }
            };
            let shown = r.seq >= from;
            let described = if shown {
                input.describe()
            } else {
                String::new()
            };
            engine.handle(r.at, input);
            let commands: Vec<engine::Command> =
                std::iter::from_fn(|| engine.poll_command()).collect();
            if !shown {
                return ControlFlow::Continue(());
            }
            let text = match format {
                Format::Text => {
                    let mut t = format!("{:>8}  {}  {described}", r.seq, r.at);
                    for c in &commands {
                        t.push_str(&format!(
                            "\n          -> {c}  ({})",
                            c.reason.replace('\n', " / ")
                        ));
                    }
                    t
                }
                Format::Json => serde_json::json!({
                    "seq": r.seq, "at": r.at.to_rfc3339(), "at_ms": r.at.as_millis(),
                    "input": described,
                    "commands": commands.iter().map(|c| serde_json::json!({
                        "id": c.id, "controller": c.controller.as_str(), "action": c.action.name(),
                        "object": c.action.target().key.to_string(), "detail": c.action.detail(),
                        "reason": c.reason,
                    })).collect::<Vec<_>>(),
                })
                .to_string(),
            };
            if writeln!(out, "{text}").is_err() {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| e.to_string())?;
    match failure {
        Some(e) => Err(e),
        None => Ok(0),
    }
}

fn stats(dir: &Path) -> Result<u8, String> {
    let journal = open(dir)?;
    let s = journal.stats().map_err(|e| e.to_string())?;
    println!("records        {}", s.records);
    println!("batches        {}", s.batches);
    println!(
        "seq range      {}..{}",
        s.first_seq.map_or("-".into(), |v| v.to_string()),
        s.last_seq.map_or("-".into(), |v| v.to_string())
    );
    println!("payload bytes  {}", s.payload_bytes);
    println!("disk bytes     {}", s.disk_bytes);
    if s.payload_bytes > 0 {
        println!(
            "space ratio    {:.3}",
            s.disk_bytes as f64 / s.payload_bytes as f64
        );
    }
    for (seq, bytes) in &s.snapshots {
        println!("snapshot       through {seq} ({bytes} bytes)");
    }
    Ok(0)
}
