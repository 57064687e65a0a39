//! `lifecycle explain machine|mhc|pool NAMESPACE/NAME --journal DIR`: one object's story,
//! from a replayed copy of the journal (so a running controller's journal can be read).

use super::log::{EXIT_OK, Failure, Format};
use adapters::explain::{self, ExplainError, Subject};
use clap::{Args, ValueEnum};
use engine::Timestamp;
use engine::model::Kind;
use std::ops::ControlFlow;
use std::path::PathBuf;

const EXPLAIN_HELP: &str = "\
The story is built by replaying every journaled input through the engine, as `log show` does:
  Phases      each phase with its start and duration, from the conditions the engine wrote
              (a Machine's Deleting reasons: WaitingForPreDrainHook, DrainingNode,
              WaitingForVolumeDetach, WaitingForPreTerminateHook, WaitingForInfrastructureDeletion,
              WaitingForBootstrapDeletion, DeletingNode, DeletionCompleted; an MHC's
              RemediationAllowed; a MachinePool's status.phase)
  Targets     for an MHC: each Machine's verdict, its remediation and its replacement
  Story       each decision with its cause: [after #N: input] names the journal record
              (a timer by what fired: [after #15: timer EvictionRetry Pod app/web-1@c1])
  Now         what holds the object at the last record and what would unblock it
Times are the journal's recorded times (simulated time for `sim run --journal`). The journal is
read from a copy, so a running controller's journal can be explained.

Example: lifecycle explain machine default/m1 --journal /var/lib/lifecycle/journal
         lifecycle explain machine default/m1 --journal J --html m1.html   (a timeline page)
         lifecycle log show --journal /var/lib/lifecycle/journal --object Machine/default/m1

Exit codes: 0 ok; 1 the journal is damaged (records missing or failing their checks); 2 invalid
input (not NAMESPACE/NAME, or the journal never observed the object); 3 the tool could not do its
job (no journal, copy failed, journal unusable, open timed out).";

#[derive(Clone, Copy, ValueEnum)]
pub enum ExplainKind {
    Machine,
    Mhc,
    Pool,
}

#[derive(Args)]
#[command(after_help = EXPLAIN_HELP)]
pub struct ExplainArgs {
    /// What to explain: a Machine, a MachineHealthCheck (mhc) or a MachinePool (pool).
    #[arg(value_enum)]
    kind: ExplainKind,
    /// The object, as NAMESPACE/NAME.
    name: String,
    /// The journal directory (read from a copy; never written).
    #[arg(long)]
    journal: PathBuf,
    /// text for a terminal; json gives the same story as one object.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Tell the story as it stood after this journal record (what was known then).
    #[arg(long, value_name = "SEQ", conflicts_with = "at")]
    until: Option<u64>,
    /// Tell the story as it stood at this time (RFC 3339, the journal's time): the records
    /// up to it, and durations up to it.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    at: Option<Timestamp>,
    /// Also write the story as one self-contained HTML timeline (lanes, phase bars, marks
    /// whose hover tells the cause).
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,
}

fn parse_time(s: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(s)
}

pub fn main(args: ExplainArgs) -> u8 {
    run(args).unwrap_or_else(Failure::report)
}

fn run(args: ExplainArgs) -> Result<u8, Failure> {
    let kind = match args.kind {
        ExplainKind::Machine => Kind::Machine,
        ExplainKind::Mhc => Kind::MachineHealthCheck,
        ExplainKind::Pool => Kind::MachinePool,
    };
    let subject = Subject::management(&kind, &args.name).map_err(Failure::Invalid)?;
    let mut explainer = explain::Explainer::new(subject);
    super::log::replay_records(&args.journal, |r, store| {
        if args.until.is_some_and(|u| r.seq > u) || args.at.is_some_and(|at| r.at > at) {
            return ControlFlow::Break(());
        }
        explainer.record(&r, store);
        ControlFlow::Continue(())
    })?;
    let story = explainer.finish(args.at).map_err(|e| match e {
        ExplainError::Unknown(_) => Failure::Invalid(e.to_string()),
        ExplainError::Empty => Failure::Unusable(format!("{}: {e}", args.journal.display())),
    })?;
    if let Some(out) = &args.html {
        std::fs::write(out, explain::html::page(&story))
            .map_err(|e| Failure::Unusable(format!("--html {}: {e}", out.display())))?;
    }
    match args.format {
        Format::Text => print!("{}", explain::render::text(&story)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&story).expect("a story serializes")
        ),
    }
    Ok(EXIT_OK)
}
