//! `lifecycle sim sweep`: swarm testing with progress, reproduction commands and shrinking.

use indicatif::{ProgressBar, ProgressStyle};
use sim::scenario;
use sim::sweep::{FaultChoice, Feeding, shrink, sweep};
use std::path::PathBuf;

/// Runs a shrink may spend per failing scenario.
const SHRINK_RUNS_MAX: usize = 400;

pub struct SweepArgs {
    pub files: Vec<PathBuf>,
    pub seeds: u64,
    pub first_seed: u64,
    pub jobs: Option<usize>,
    pub faults: String,
    pub shrink: bool,
    pub out: PathBuf,
    pub batch: bool,
}

pub fn main(args: SweepArgs) -> u8 {
    let choice = match FaultChoice::parse(&args.faults) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("--faults: {e}");
            return 2;
        }
    };
    let feeding = Feeding {
        batch: args.batch,
        ..Feeding::default()
    };
    let mut scenarios = Vec::new();
    for f in &args.files {
        match scenario::load(f) {
            Ok(s) => scenarios.push(s),
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        }
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let total = scenarios.len() as u64 * args.seeds;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs  {per_sec}  {elapsed_precise}  {msg}",
        )
        .expect("a valid template"),
    );
    let started = std::time::Instant::now();
    let report = sweep(
        &scenarios,
        args.first_seed,
        args.seeds,
        jobs,
        &choice,
        feeding,
        &|done, failures| {
            bar.set_position(done);
            bar.set_message(format!("{failures} failing"));
        },
    );
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    for f in &report.failures {
        println!("FAIL {} seed {}:", f.file, f.seed);
        for v in &f.violations {
            println!("  {v}");
        }
        println!(
            "  reproduce: lifecycle sim run {} --seed {} --faults {}{}",
            f.file,
            f.seed,
            choice.as_arg(),
            if args.batch { " --batch" } else { "" }
        );
    }
    println!(
        "{} runs ({} scenarios x {} seeds) in {secs:.1} s ({:.0} runs/s) on {jobs} threads; {} invariant checks; {} failing",
        report.runs,
        scenarios.len(),
        args.seeds,
        report.runs as f64 / secs.max(1e-9),
        report.checks,
        report.failures.len()
    );
    println!("faults fired:");
    for kind in sim::scenario::FaultKind::ALL {
        let n = report.fired.get(kind.as_str()).copied().unwrap_or(0);
        println!("  {:<24} {n}", kind.as_str());
    }
    println!(
        "journal damage at restarts (kinds applied; outcomes: recovered every committed record or refused to start):"
    );
    for (name, n) in report
        .fired
        .iter()
        .filter(|(k, _)| k.starts_with("journal-damage:"))
    {
        println!("  {name:<32} {n}");
    }
    println!("answers read relative to their write's watch event:");
    for order in sim::sweep::DELIVERY_ORDERS {
        let n = report.fired.get(order).copied().unwrap_or(0);
        println!("  {order:<24} {n}");
    }
    if args.shrink {
        let mut shrunk_files = std::collections::BTreeSet::new();
        for f in &report.failures {
            if !shrunk_files.insert(f.file.clone()) {
                continue;
            }
            let Some(s) = scenarios.iter().find(|s| s.file == f.file) else {
                continue;
            };
            match shrink(s, f.seed, &choice, feeding, SHRINK_RUNS_MAX) {
                Some((minimal, violation)) => {
                    let path = args.out.join(format!("{}.yaml", minimal.name));
                    match std::fs::write(&path, scenario::to_yaml(&minimal)) {
                        Ok(()) => println!(
                            "shrunk {} seed {} to {} step(s): {} ({violation})",
                            f.file,
                            f.seed,
                            minimal.timeline.len(),
                            path.display()
                        ),
                        Err(e) => eprintln!("{}: {e}", path.display()),
                    }
                }
                None => println!(
                    "{} seed {}: the failure did not reproduce for shrinking",
                    f.file, f.seed
                ),
            }
        }
    }
    if report.failures.is_empty() { 0 } else { 1 }
}
