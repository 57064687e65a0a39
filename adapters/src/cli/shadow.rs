//! `lifecycle shadow report --journal DIR`: what a controller run in `--mode shadow` decided
//! against what the objects show someone else (CAPI's manager) did, replayed from a copy of
//! its journal through the same comparison the running controller counts in
//! `lifecycle_shadow_disagreements_total`.

use super::log::{EXIT_OK, Failure, Format};
use clap::{Args, Subcommand};
use engine::shadow::{AGREEMENT_WINDOW, Comparator, Disagreement};
use std::ops::ControlFlow;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ShadowCommand {
    /// List the disagreements of a shadow run, each with both sides' evidence.
    Report(ReportArgs),
}

#[derive(Args)]
#[command(after_help = "\
A step of a deleting Machine (Cordon, Evict, DeleteInfrastructure, DeleteBootstrap, DeleteNode,
RemoveFinalizer) agrees when this controller decided it (not sent) and the objects show it done
within 30 s of each other; otherwise one side took it alone: only-ours (decided, nobody did it)
or only-theirs (done by someone else, this controller would not have). Evictions are seen as a
Pod's deletionTimestamp, so refused evictions are invisible to both sides.

A disagreement a product decision explains (decision 3: a Machine's failureReason makes it
unhealthy at once, upstream no longer marks it) is listed as a known deviation, not a surprise.

Exit codes: 0 no disagreement but known deviations; 1 a surprise listed, or the journal is damaged; 2 the journal
is not a shadow run's (no command was withheld); 3 the tool could not do its job (no journal,
copy failed, journal unusable).")]
pub struct ReportArgs {
    /// The journal directory (read from a copy; never written).
    #[arg(long)]
    journal: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

pub fn main(command: ShadowCommand) -> u8 {
    match command {
        ShadowCommand::Report(args) => report(&args).unwrap_or_else(Failure::report),
    }
}

fn report(args: &ReportArgs) -> Result<u8, Failure> {
    let mut comparator = Comparator::new();
    let mut found: Vec<Disagreement> = Vec::new();
    let mut last = None;
    let mut withheld_any = false;
    super::log::replay_records(&args.journal, |r, store| {
        comparator.observe(r.at, &r.input, store);
        for c in &r.commands {
            if r.withheld.contains_key(&c.id) {
                withheld_any = true;
                comparator.withheld(r.at, c);
            }
        }
        found.extend(comparator.take());
        last = Some(r.at);
        ControlFlow::Continue(())
    })?;
    if !withheld_any {
        return Err(Failure::Invalid(format!(
            "{}: no command of this journal was withheld: it is not from `lifecycle run --mode shadow`",
            args.journal.display()
        )));
    }
    if let Some(at) = last {
        comparator.finish(at);
        found.extend(comparator.take());
    }
    match args.format {
        Format::Text => {
            for d in &found {
                println!(
                    "{:<12} {:<20} {}  {}",
                    d.side.as_str(),
                    d.step.as_str(),
                    d.machine,
                    d.describe()
                );
            }
            println!(
                "{} disagreement(s), {} of them known deviation(s) (window {}s)",
                found.len(),
                found.iter().filter(|d| d.deviation.is_some()).count(),
                AGREEMENT_WINDOW.as_secs()
            );
        }
        Format::Json => {
            let rows: Vec<serde_json::Value> = found
                .iter()
                .map(|d| {
                    serde_json::json!({
                        "machine": d.machine.to_string(),
                        "step": d.step.as_str(),
                        "target": d.target.to_string(),
                        "side": d.side.as_str(),
                        "ours": d.ours.map(|t| t.to_rfc3339()),
                        "theirs": d.theirs.map(|t| t.to_rfc3339()),
                        "controller": d.controller,
                        "deviation": d.deviation.map(|v| v.decision()),
                        "text": d.describe(),
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({"windowSeconds": AGREEMENT_WINDOW.as_secs(), "disagreements": rows})
            );
        }
    }
    // Known deviations are expected: only a surprise fails.
    Ok(if found.iter().all(|d| d.deviation.is_some()) {
        EXIT_OK
    } else {
        1
    })
}
