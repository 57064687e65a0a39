//! `lifecycle log verify|show|stats --journal DIR`: read a journal, change nothing.
//!
//! A journal no process holds is opened read-only in place (nothing in it is written, created
//! or removed; it may be read-only and owned by another user). A journal a running controller
//! holds is copied to a private temporary directory (`$TMPDIR`, as large as the journal) and
//! the copy opened read-only. The commit record's copies are copied first (everything they
//! vouch for was flushed to sled before they were written), so the copy is checked up to the
//! sequence the copied commit record covers. Messages name the journal's own paths.

use adapters::kube::journal_log::{Access, JOURNAL_OPEN_TIMEOUT_S, OpenFailure, open_bounded};
use clap::{Subcommand, ValueEnum};
use engine::journal::{
    COMMIT_COPIES, COMMITS_FILE, IDENTITY_FILE, JournalError, RecordRef, RepairMode,
};
use engine::journal::{Journal, JournalOptions};
use engine::recovery;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// Exit codes of `lifecycle log ...`.
pub const EXIT_OK: u8 = 0;
pub const EXIT_DAMAGE: u8 = 1;
pub const EXIT_INVALID: u8 = 2;
pub const EXIT_UNUSABLE: u8 = 3;
/// The journal's creation was cut short: it holds no record and the next start creates it.
pub const EXIT_CREATION_CUT_SHORT: u8 = 4;
const EXIT_CODES_HELP: &str = "Exit codes: 0 ok; 1 the journal is damaged (records missing or failing their checks); 3 the tool could not do its job (no journal, locked, copy failed, journal unusable, open timed out); 4 the journal's creation was cut short (it holds no record; the next start creates it again).";
const SHOW_EXIT_CODES_HELP: &str = "Exit codes: 0 ok; 1 the journal is damaged (records missing or failing their checks); 2 invalid input (a bad --object, or no record concerns it); 3 the tool could not do its job (no journal, locked, copy failed, journal unusable, open timed out); 4 the journal's creation was cut short (it holds no record; the next start creates it again).";

/// Why a command failed, deciding the exit code.
pub enum Failure {
    Damage(String),
    Invalid(String),
    Unusable(String),
    CreationCutShort(String),
}

impl Failure {
    /// Prints the failure and gives its exit code.
    pub fn report(self) -> u8 {
        let (message, code) = match self {
            Failure::Damage(e) => (e, EXIT_DAMAGE),
            Failure::Invalid(e) => (e, EXIT_INVALID),
            Failure::Unusable(e) => (e, EXIT_UNUSABLE),
            Failure::CreationCutShort(e) => (e, EXIT_CREATION_CUT_SHORT),
        };
        eprintln!("{message}");
        code
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum LogCommand {
    /// Check every checksum and the commit record, replay from the first record and from the
    /// latest snapshot, and compare state hashes. Reads a copy; never writes the journal.
    #[command(after_help = EXIT_CODES_HELP)]
    Verify {
        #[arg(long)]
        journal: PathBuf,
    },
    /// Print the journaled inputs, one per line. Reads a copy; never writes the journal.
    #[command(after_help = SHOW_EXIT_CODES_HELP)]
    Show {
        #[arg(long)]
        journal: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// First sequence number to print.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Follow one object: print only the records whose input observes it (alone, in a
        /// relist or a batch) or answers a command about it, and of their commands those that
        /// target it or that its reconcile decided. REF is Kind/namespace/name
        /// (Machine/default/m1), Kind/name for a cluster-scoped kind, and @cluster for an
        /// object of a workload cluster (Pod/app/web-0@c1, Node/n1@c1).
        #[arg(long, value_name = "REF")]
        object: Option<String>,
    },
    /// Counts, sizes and snapshots. Reads a copy; never writes the journal.
    #[command(after_help = EXIT_CODES_HELP)]
    Stats {
        #[arg(long)]
        journal: PathBuf,
    },
    /// Repair what a start refuses: unfinished sled snapshot files, a lost or damaged `conf`
    /// (written again with the segment size the store reads back with), a damaged sled
    /// snapshot file (sled rebuilds it from its log), a lost copy of the commit record
    /// (written from the other). With --truncate also discard the records after the first
    /// missing or damaged one (and snapshots beyond it) and rewrite the commit record; when
    /// sled cannot open the store at all, its files are moved to DIR/discarded/ and the
    /// journal starts empty. Writes the journal: stop the controller first. Exit codes: 0
    /// repaired, intact, or (--dry-run) listed; 3 not done (records would be discarded
    /// without --truncate, no journal, locked, a file unreadable).
    Repair {
        #[arg(long)]
        journal: PathBuf,
        /// List what would be done, and what would be discarded; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Confirms that records after the last good one may be discarded.
        #[arg(long, conflicts_with = "dry_run")]
        truncate: bool,
    },
}

pub fn main(command: LogCommand) -> u8 {
    let result = match command {
        LogCommand::Verify { journal } => verify(&journal),
        LogCommand::Show {
            journal,
            format,
            from,
            object,
        } => show(&journal, format, from, object.as_deref()),
        LogCommand::Stats { journal } => stats(&journal),
        LogCommand::Repair {
            journal,
            dry_run,
            truncate,
        } => repair(
            &journal,
            match (dry_run, truncate) {
                (true, _) => RepairMode::DryRun,
                (false, true) => RepairMode::Truncate,
                (false, false) => RepairMode::Keep,
            },
        ),
    };
    result.unwrap_or_else(Failure::report)
}

/// A journal open read-only: in place, or a copy (removed when this is dropped, journal
/// first).
struct JournalCopy {
    journal: Journal,
    committed_through: u64,
    _dir: Option<tempfile::TempDir>,
}

/// Copies the journal's files (the commit record's copies first), skipping files sled removes
/// meanwhile.
fn copy_journal(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let skip_gone = |r: std::io::Result<u64>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        other => other,
    };
    for name in COMMIT_COPIES {
        skip_gone(std::fs::copy(from.join(name), to.join(name)))?;
    }
    let mut dirs = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = dirs.pop() {
        for entry in std::fs::read_dir(&src)? {
            let entry = entry?;
            let name = entry.file_name();
            if src == from && COMMIT_COPIES.iter().any(|c| name == *c) {
                continue;
            }
            let target = dst.join(&name);
            if entry.file_type()?.is_dir() {
                std::fs::create_dir_all(&target)?;
                dirs.push((entry.path(), target));
            } else {
                skip_gone(std::fs::copy(entry.path(), &target))?;
            }
        }
    }
    Ok(())
}

/// Copies attempted when the commit record is replaced during a copy, or a copy fails its
/// checks.
const COPY_ATTEMPTS_MAX: u32 = 3;

/// The identity of the commit record file: retention replaces it (a new file renamed over it).
fn commits_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir.join(COMMITS_FILE))
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// `copy`, again if a running controller retired records meanwhile: the copied
/// commit record would then vouch for records the copied store no longer holds (a false
/// "missing"). Retiring happens once per snapshot, so a second copy settles it.
fn copy_consistent(
    from: &Path,
    to: &Path,
    mut copy: impl FnMut(&Path, &Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut attempt = 1;
    loop {
        let before = commits_identity(from);
        copy(from, to)?;
        if commits_identity(from) == before || attempt == COPY_ATTEMPTS_MAX {
            return Ok(());
        }
        std::fs::remove_dir_all(to)?;
        attempt += 1;
    }
}

/// Opens an existing journal read-only (a missing one is an error, not a new empty journal):
/// in place, or a private copy when a running controller holds it; within
/// [`JOURNAL_OPEN_TIMEOUT_S`].
fn open(dir: &Path) -> Result<JournalCopy, Failure> {
    if !dir.join("conf").exists()
        && !dir.join("db").exists()
        && !dir.join(IDENTITY_FILE).exists()
        && !COMMIT_COPIES.iter().any(|c| dir.join(c).exists())
    {
        return Err(Failure::Unusable(format!(
            "{}: no journal here",
            dir.display()
        )));
    }
    match open_at(dir, dir) {
        Err(OpenError::Locked) => {}
        Err(OpenError::Failed(f)) => return Err(f),
        Ok((journal, committed_through)) => {
            return Ok(JournalCopy {
                journal,
                committed_through,
                _dir: None,
            });
        }
    }
    open_copy(dir, copy_journal)
}

/// Opens a private copy of the journal a running controller holds. sled moves live data
/// between its segments as it writes, so a copy taken meanwhile can look damaged where the
/// journal is not: a copy that fails its checks is taken again, and damage is reported only
/// when every one of [`COPY_ATTEMPTS_MAX`] copies shows it.
fn open_copy(
    dir: &Path,
    mut copy: impl FnMut(&Path, &Path) -> std::io::Result<()>,
) -> Result<JournalCopy, Failure> {
    let unusable = |what: &str, e: std::io::Error| {
        Failure::Unusable(format!("{}: {what}: {e}", dir.display()))
    };
    let mut attempt = 1;
    loop {
        let tmp = tempfile::Builder::new()
            .prefix("lifecycle-log-")
            .tempdir()
            .map_err(|e| unusable("held by a running controller, and a temporary directory to copy it to cannot be created ($TMPDIR)", e))?;
        let copied = tmp.path().join("journal");
        copy_consistent(dir, &copied, &mut copy).map_err(|e| {
            unusable(
                "held by a running controller, and copying it to a temporary directory ($TMPDIR) failed",
                e,
            )
        })?;
        match open_at(&copied, dir) {
            Ok((journal, committed_through)) => {
                return Ok(JournalCopy {
                    journal,
                    committed_through,
                    _dir: Some(tmp),
                });
            }
            Err(OpenError::Locked) => {
                return Err(Failure::Unusable(format!(
                    "{}: its private copy is locked",
                    dir.display()
                )));
            }
            Err(OpenError::Failed(Failure::Damage(_))) if attempt < COPY_ATTEMPTS_MAX => {
                attempt += 1;
            }
            Err(OpenError::Failed(Failure::Damage(e))) => {
                return Err(Failure::Damage(format!(
                    "{e} (seen in each of {COPY_ATTEMPTS_MAX} copies taken while a running controller holds the journal)"
                )));
            }
            Err(OpenError::Failed(f)) => return Err(f),
        }
    }
}

enum OpenError {
    Locked,
    Failed(Failure),
}

/// Opens `path` read-only; messages name `shown` (the journal, not a copy of it).
fn open_at(path: &Path, shown: &Path) -> Result<(Journal, u64), OpenError> {
    let name = |e: &dyn std::fmt::Display| {
        let text = e.to_string();
        let text = text.replace(&path.display().to_string(), &shown.display().to_string());
        if text.starts_with(&shown.display().to_string()) {
            text
        } else {
            format!("{}: {text}", shown.display())
        }
    };
    let opened = match open_bounded(
        path,
        JournalOptions::default(),
        JOURNAL_OPEN_TIMEOUT_S,
        Access::Read,
    ) {
        Err(OpenFailure::TimedOut { after_s }) => {
            eprintln!(
                "{}: opening the journal did not finish within {after_s} s (sled is stuck on damaged files); giving up",
                shown.display()
            );
            // The spinning sled thread cannot be stopped: only exiting ends it.
            std::process::exit(i32::from(EXIT_UNUSABLE));
        }
        Err(OpenFailure::Journal(JournalError::Locked { .. })) => return Err(OpenError::Locked),
        Err(OpenFailure::Journal(e)) => Err(e),
        Ok(opened) => Ok(opened),
    };
    let (journal, report) = opened.map_err(|e| {
        OpenError::Failed(match &e {
            JournalError::CreationCutShort { .. } => Failure::CreationCutShort(name(&e)),
            e if e.is_damage() => Failure::Damage(name(e)),
            e => Failure::Unusable(name(e)),
        })
    })?;
    if let Some(t) = report.truncated_tail {
        eprintln!(
            "{}: a torn, unacknowledged last batch from record {} ({} bytes) is ignored: {}",
            shown.display(),
            t.from_seq,
            t.bytes,
            t.reason
        );
    }
    for copy in &report.recovered_commit_copies {
        eprintln!(
            "{}: the commit record's copy {} (the other copy vouches for every record; the controller's next start writes it again)",
            shown.display(),
            name(copy)
        );
    }
    if let Some(lost) = report.lost_snapshot {
        eprintln!("{}: {lost}", shown.display());
    }
    if let Some(v) = report.upgraded_from {
        eprintln!(
            "{}: written by journal format {v} (no commit record); read as such",
            shown.display()
        );
    }
    Ok((journal, report.committed_through))
}

fn verify(dir: &Path) -> Result<u8, Failure> {
    let copy = open(dir)?;
    let journal = &copy.journal;
    let v = recovery::verify(journal);
    println!(
        "{}: {}; its commit record covers records 1..{}",
        dir.display(),
        if copy._dir.is_some() {
            "held by a running controller: checked a copy"
        } else {
            "checked in place, read-only"
        },
        copy.committed_through
    );
    if v.retired_through > 0 {
        println!(
            "{}: records 1..{} retired (kept from {})",
            dir.display(),
            v.retired_through,
            v.retired_through + 1
        );
    }
    println!(
        "{}: {} records, last seq {}",
        dir.display(),
        v.records,
        v.last_seq.map_or("-".to_string(), |s| s.to_string())
    );
    if let Some(h) = v.full_replay_hash {
        match v.replay_base {
            Some(base) => {
                println!("replayed from the oldest kept snapshot (through {base}): state {h:016x}")
            }
            None => println!("replayed from record 1: state {h:016x}"),
        }
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
        Ok(EXIT_OK)
    } else {
        println!("FAILED: {} problem(s)", v.problems.len());
        Ok(EXIT_DAMAGE)
    }
}

/// Replays a copy of the journal with a fresh engine, handing each record, its input and
/// the commands it caused to `each` (which may stop the replay).
fn replay(
    dir: &Path,
    mut each: impl FnMut(
        &RecordRef<'_>,
        &engine::Input,
        Vec<engine::Command>,
        Vec<engine::FiredTimer>,
        Withheld,
        &engine::Engine,
    ) -> ControlFlow<()>,
) -> Result<(), Failure> {
    let copy = open(dir)?;
    let mut failure = None;
    let retired = copy.journal.retired_through();
    let (engine, base) =
        recovery::oldest_base(&copy.journal).map_err(|e| Failure::Damage(e.to_string()))?;
    let mut engine = engine.unwrap_or_default();
    let withheld = withheld_commands(&copy.journal, engine.applied_seq() + 1)?;
    if retired > 0 {
        let base = base.unwrap_or(retired);
        eprintln!(
            "{}: records 1..{retired} retired (kept from {}); replaying from the oldest kept snapshot (through {base}), so inputs are shown from {}",
            dir.display(),
            retired + 1,
            base + 1
        );
    }
    copy.journal
        .for_each_record(engine.applied_seq() + 1, |r| {
            let input = match recovery::decode_input(r.seq, r.payload) {
                Ok(input) => input,
                Err(e) => {
                    failure = Some(e.to_string());
                    return ControlFlow::Break(());
                }
            };
            engine.handle(r.at, input.clone());
            let commands: Vec<engine::Command> =
                std::iter::from_fn(|| engine.poll_command()).collect();
            let not_sent = commands
                .iter()
                .filter_map(|c| Some((c.id, *withheld.get(&c.id)?)))
                .collect();
            each(
                &r,
                &input,
                commands,
                engine.fired_timers().to_vec(),
                not_sent,
                &engine,
            )
        })
        .map_err(|e| Failure::Damage(e.to_string()))?;
    match failure {
        Some(e) => Err(Failure::Damage(e)),
        None => Ok(()),
    }
}

/// The commands a journal's answers say were never sent (shadow mode), from record `from` on.
type Withheld = std::collections::BTreeMap<u64, engine::Withheld>;

/// One pass over the inputs before a replay: a command's answer comes after it, and a command
/// never sent must never be shown as sent.
fn withheld_commands(journal: &engine::journal::Journal, from: u64) -> Result<Withheld, Failure> {
    let mut out = Withheld::new();
    let mut failure = None;
    journal
        .for_each_record(from, |r| match recovery::decode_input(r.seq, r.payload) {
            Ok(input) => {
                out.extend(input.withheld());
                ControlFlow::Continue(())
            }
            Err(e) => {
                failure = Some(e.to_string());
                ControlFlow::Break(())
            }
        })
        .map_err(|e| Failure::Damage(e.to_string()))?;
    match failure {
        Some(e) => Err(Failure::Damage(e)),
        None => Ok(out),
    }
}

/// Every journaled input of a controller with the commands it caused, replayed from a copy
/// (the controller may still hold the journal). An error says what is wrong and where.
pub fn controller_records(
    dir: &Path,
) -> Result<Vec<sim::controller_record::ControllerRecord>, String> {
    let mut out = Vec::new();
    replay_records(dir, |r, _| {
        out.push(r);
        ControlFlow::Continue(())
    })
    .map_err(|f| match f {
        Failure::Damage(e)
        | Failure::Invalid(e)
        | Failure::Unusable(e)
        | Failure::CreationCutShort(e) => e,
    })?;
    Ok(out)
}

/// Replays a copy of the journal, handing each record with the commands it caused to `each`
/// (which may stop the replay); a failure carries its exit code.
pub fn replay_records(
    dir: &Path,
    mut each: impl FnMut(
        sim::controller_record::ControllerRecord,
        &engine::store::Store,
    ) -> ControlFlow<()>,
) -> Result<(), Failure> {
    replay(dir, |r, input, commands, fired, withheld, engine| {
        each(
            sim::controller_record::ControllerRecord {
                seq: r.seq,
                at: r.at,
                input: input.clone(),
                commands,
                fired,
                withheld,
                decisions: engine.decisions().to_vec(),
            },
            engine.store(),
        )
    })
}

/// Prints each input and, by replaying the engine, the commands it caused (with their reasons):
/// the journal answers "why" long after the fact.
fn show(dir: &Path, format: Format, from: u64, object: Option<&str>) -> Result<u8, Failure> {
    let subject = object
        .map(|o| adapters::explain::Subject::parse(o).map_err(Failure::Invalid))
        .transpose()?;
    let mut issued = std::collections::BTreeMap::new();
    let mut shown = 0u64;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    replay(dir, |r, input, mut commands, fired, withheld, _| {
        use std::io::Write;
        let described = match input {
            engine::Input::Tick => engine::timer::describe_fired(&fired),
            other => other.describe(),
        };
        let refusals: Vec<serde_json::Value> = input
            .refusals()
            .into_iter()
            .map(|(command, refusal)| {
                serde_json::json!({"command": command, "code": refusal.code(), "refusal": refusal})
            })
            .collect();
        if let Some(subject) = &subject {
            let record = sim::controller_record::ControllerRecord {
                seq: r.seq,
                at: r.at,
                input: input.clone(),
                commands,
                fired,
                withheld: withheld.clone(),
                decisions: Vec::new(),
            };
            let concerns = adapters::explain::concerns(&record, subject, &issued);
            // Only commands about the object: all an answer needs to be matched.
            issued.extend(
                record
                    .commands
                    .iter()
                    .filter(|c| adapters::explain::command_concerns(c, subject))
                    .map(|c| (c.id, c.clone())),
            );
            if !concerns {
                return ControlFlow::Continue(());
            }
            commands = record.commands;
            commands.retain(|c| adapters::explain::command_concerns(c, subject));
        }
        if r.seq < from {
            return ControlFlow::Continue(());
        }
        shown += 1;
        let text = match format {
            Format::Text => {
                let mut t = format!("{:>8}  {}  {described}", r.seq, r.at);
                for c in &commands {
                    match withheld.get(&c.id) {
                        Some(why) => {
                            t.push_str(&format!("\n          -> NOT SENT ({}) {c}", why.as_str()))
                        }
                        None => t.push_str(&format!("\n          -> {c}")),
                    }
                    // An event's reason is its message, already shown.
                    if !matches!(c.action, engine::Action::RecordEvent { .. }) {
                        t.push_str(&format!("  ({})", c.reason.replace('\n', " / ")));
                    }
                }
                t
            }
            Format::Json => serde_json::json!({
                "seq": r.seq, "at": r.at.to_rfc3339(), "at_ms": r.at.as_millis(),
                "input": described,
                "refusals": refusals,
                "commands": commands.iter().map(|c| serde_json::json!({
                    "id": c.id, "controller": c.actor(), "action": c.action.name(),
                    "object": c.action.target().key.to_string(), "detail": c.action.detail(),
                    "reason": c.reason,
                    "sent": !withheld.contains_key(&c.id),
                    "notSent": withheld.get(&c.id).map(|w| w.as_str()),
                })).collect::<Vec<_>>(),
            })
            .to_string(),
        };
        if writeln!(out, "{text}").is_err() {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    if let Some(subject) = subject
        && shown == 0
    {
        return Err(Failure::Invalid(format!(
            "{subject}: no record from {from} on concerns this object (check the kind, namespace and name)"
        )));
    }
    Ok(EXIT_OK)
}

fn stats(dir: &Path) -> Result<u8, Failure> {
    let copy = open(dir)?;
    let s = copy.journal.stats().map_err(|e| {
        if e.is_damage() {
            Failure::Damage(e.to_string())
        } else {
            Failure::Unusable(e.to_string())
        }
    })?;
    println!("committed      1..{}", copy.committed_through);
    if s.retired_through > 0 {
        println!(
            "history        records 1..{} retired (kept from {}); replay starts at the oldest kept snapshot",
            s.retired_through,
            s.retired_through + 1
        );
    } else {
        println!("history        every record kept (from 1)");
    }
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
    Ok(EXIT_OK)
}

fn repair(dir: &Path, mode: RepairMode) -> Result<u8, Failure> {
    if !dir.join("conf").exists()
        && !dir.join("db").exists()
        && !dir.join(IDENTITY_FILE).exists()
        && !COMMIT_COPIES.iter().any(|c| dir.join(c).exists())
    {
        return Err(Failure::Unusable(format!(
            "{}: no journal here",
            dir.display()
        )));
    }
    let r = Journal::repair(dir, JournalOptions::default(), mode).map_err(|e| match &e {
        JournalError::RepairDiscards { .. } => Failure::Unusable(e.to_string()),
        _ => Failure::Unusable(format!("{}: {e}", dir.display())),
    })?;
    let kept = r.kept_through;
    let would = if r.dry_run { "would " } else { "" };
    if r.retired_through > 0 {
        println!(
            "{}: records 1..{} retired before (kept from {})",
            dir.display(),
            r.retired_through,
            r.retired_through + 1
        );
    }
    if r.actions.is_empty() {
        println!(
            "{}: nothing to repair: records 1..{kept} are intact",
            dir.display()
        );
        return Ok(EXIT_OK);
    }
    for action in &r.actions {
        println!("{would}{action}");
    }
    if let Some(problem) = &r.first_problem {
        println!("first problem: {problem}");
        match r.committed_before {
            Some(c) if c > kept && r.dry_run => {
                println!("would lose committed records {}..{c}", kept + 1)
            }
            Some(c) if c > kept => println!("lost: committed records {}..{c}", kept + 1),
            Some(_) => {}
            None => println!("the old commit record is missing or unreadable"),
        }
    }
    println!(
        "{}: {}records 1..{kept} {}",
        dir.display(),
        if r.dry_run { "a repair keeps " } else { "" },
        if r.dry_run { "" } else { "kept" }
    );
    if r.dry_run && r.discards_records() {
        println!("run again with --truncate to do it (stop the controller first)");
    } else if r.dry_run {
        println!(
            "run again without --dry-run to do it (stop the controller first); no record is discarded"
        );
    }
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::journal::DB_FILE;

    /// A controller retiring records while the journal is copied replaces its commit record:
    /// the copy is made again, so the copied commit record matches the copied store.
    #[test]
    fn a_commit_record_replaced_during_the_copy_is_copied_again() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("j");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join(COMMITS_FILE), b"old").unwrap();
        std::fs::write(src.join("db"), b"store").unwrap();
        let dst = tmp.path().join("copy");
        let mut copies = 0;
        copy_consistent(&src, &dst, |from, to| {
            copies += 1;
            copy_journal(from, to)?;
            if copies == 1 {
                // Retention: a new commit record renamed over the old one.
                std::fs::write(from.join("commits.new"), b"new")?;
                std::fs::rename(from.join("commits.new"), from.join(COMMITS_FILE))?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(copies, 2);
        assert_eq!(std::fs::read(dst.join(COMMITS_FILE)).unwrap(), b"new");
    }

    fn journal_of(records: u64) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let (mut journal, _) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
        for i in 0..records {
            journal
                .append(
                    engine::time::Timestamp::from_millis(i as i64 * 1000),
                    &[7u8; 64],
                )
                .unwrap();
        }
        journal.seal().unwrap();
        tmp
    }

    /// Copies the journal, its `db` cut to half its length when `cut`: a copy torn by the
    /// controller's writes.
    fn copy_cut_short(from: &Path, to: &Path, cut: bool) -> std::io::Result<()> {
        copy_journal(from, to)?;
        if cut {
            let db = std::fs::OpenOptions::new()
                .write(true)
                .open(to.join(DB_FILE))?;
            db.set_len(db.metadata()?.len() / 2)?;
        }
        Ok(())
    }

    /// A copy torn by the controller's own writes (cut short here) is taken again: the
    /// journal is whole, and `log` says so.
    #[test]
    fn a_copy_that_raced_the_controller_is_taken_again() {
        let source = journal_of(20);
        let mut copies = 0;
        let opened = open_copy(source.path(), |from, to| {
            copies += 1;
            copy_cut_short(from, to, copies == 1)
        });
        let opened = opened.unwrap_or_else(|f| panic!("{}", failure_text(f)));
        assert_eq!((copies, opened.committed_through), (2, 20));
    }

    /// Damage every copy shows is damage: reported, saying it was seen in each copy.
    #[test]
    fn damage_in_every_copy_is_reported() {
        let source = journal_of(20);
        let mut copies = 0;
        let opened = open_copy(source.path(), |from, to| {
            copies += 1;
            copy_cut_short(from, to, true)
        });
        match opened {
            Err(Failure::Damage(e)) => {
                assert!(e.contains("seen in each of 3 copies"), "{e}");
                assert!(e.contains(&source.path().display().to_string()), "{e}");
            }
            Err(f) => panic!("not damage: {}", failure_text(f)),
            Ok(_) => panic!("a journal damaged in every copy opened"),
        }
        assert_eq!(copies, COPY_ATTEMPTS_MAX);
    }

    fn failure_text(f: Failure) -> String {
        match f {
            Failure::Damage(e)
            | Failure::Invalid(e)
            | Failure::Unusable(e)
            | Failure::CreationCutShort(e) => e,
        }
    }
}
