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

/// One seed's run over HTTP, as `sim run --over-http --outcome` reported it.
#[derive(Debug, Default)]
struct HttpOutcome {
    file: String,
    seed: u64,
    /// Broken invariants (and, when the run could not happen, why).
    violations: Vec<String>,
    fired: std::collections::BTreeMap<String, u64>,
    wall_s: f64,
}

/// Runs one seed over HTTP as a child process (`sim run FILE --over-http ... --outcome F`).
fn run_over_http_seed(
    exe: &std::path::Path,
    file: &std::path::Path,
    seed: u64,
    choice: &FaultChoice,
    speed: u32,
) -> HttpOutcome {
    let mut outcome = HttpOutcome {
        file: file.display().to_string(),
        seed,
        ..HttpOutcome::default()
    };
    let dir = match tempfile::Builder::new()
        .prefix("lifecycle-sweep-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            outcome
                .violations
                .push(format!("could not run: a temporary directory: {e}"));
            return outcome;
        }
    };
    let report = dir.path().join("outcome.json");
    let run = std::process::Command::new(exe)
        .args(["sim", "run"])
        .arg(file)
        .args(["--over-http", "--speed", &speed.to_string()])
        .args(["--seed", &seed.to_string(), "--faults", &choice.as_arg()])
        .arg("--outcome")
        .arg(&report)
        .stdin(std::process::Stdio::null())
        .output();
    let run = match run {
        Ok(r) => r,
        Err(e) => {
            outcome.violations.push(format!("could not run: {e}"));
            return outcome;
        }
    };
    let parsed: Option<serde_json::Value> = std::fs::read(&report)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(v) = parsed else {
        let stderr = String::from_utf8_lossy(&run.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        outcome.violations.push(format!(
            "the run could not happen (exit {:?}): {}",
            run.status.code(),
            tail.join("\n    ")
        ));
        return outcome;
    };
    outcome.violations = v["violations"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    outcome.wall_s = v["wall_s"].as_f64().unwrap_or(0.0);
    if let Some(fired) = v["fired"].as_object() {
        for (k, n) in fired {
            outcome.fired.insert(k.clone(), n.as_u64().unwrap_or(0));
        }
    }
    outcome
}

/// `sim sweep --over-http`: every seed of every scenario end to end over HTTP, `--jobs` at
/// once; invariants judged (a faulted run drops its expectations, as in process). Prints each
/// failing seed with the command that reproduces it, then per fault kind how often it fired,
/// in how many runs, and how many of those broke an invariant.
pub fn over_http(args: &SweepArgs, speed: u32) -> u8 {
    let choice = match FaultChoice::parse(&args.faults) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("--faults: {e}");
            return 2;
        }
    };
    for f in &args.files {
        if let Err(e) = scenario::load(f) {
            eprintln!("{e}");
            return 2;
        }
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("finding the lifecycle binary: {e}");
            return super::overhttp::EXIT_COULD_NOT_RUN;
        }
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| 2 * std::thread::available_parallelism().map_or(1, |n| n.get()));
    let work: Vec<(&PathBuf, u64)> = args
        .files
        .iter()
        .flat_map(|f| (args.first_seed..args.first_seed + args.seeds).map(move |s| (f, s)))
        .collect();
    let bar = ProgressBar::new(work.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs over HTTP  {elapsed_precise}  {msg}",
        )
        .expect("a valid template"),
    );
    let started = std::time::Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(file, seed)) = work.get(i) else {
                        break;
                    };
                    let outcome = run_over_http_seed(&exe, file, seed, &choice, speed);
                    let mut all = results.lock().expect("no panics hold the lock");
                    all.push(outcome);
                    let failing = all.iter().filter(|o| !o.violations.is_empty()).count();
                    bar.set_position(all.len() as u64);
                    bar.set_message(format!("{failing} failing"));
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut outcomes = results.into_inner().expect("no panics hold the lock");
    outcomes.sort_by(|a, b| (&a.file, a.seed).cmp(&(&b.file, b.seed)));
    let secs = started.elapsed().as_secs_f64();
    let failing: Vec<&HttpOutcome> = outcomes
        .iter()
        .filter(|o| !o.violations.is_empty())
        .collect();
    for f in &failing {
        println!("FAIL {} seed {} (over HTTP):", f.file, f.seed);
        for v in &f.violations {
            println!("  {v}");
        }
        println!(
            "  reproduce: lifecycle sim run {} --seed {} --faults {} --over-http --speed {speed}",
            f.file,
            f.seed,
            choice.as_arg()
        );
    }
    let slowest = outcomes.iter().map(|o| o.wall_s).fold(0.0, f64::max);
    println!(
        "{} runs over HTTP ({} scenarios x {} seeds) in {secs:.1} s on {jobs} jobs at {speed}x (slowest run {slowest:.1} s); {} failing",
        outcomes.len(),
        args.files.len(),
        args.seeds,
        failing.len()
    );
    println!("faults fired over HTTP (fired, runs it fired in, of those runs failing):");
    let names = sim::scenario::FaultKind::ALL
        .iter()
        .map(|k| k.as_str())
        .chain(sim::sweep::DELIVERY_ORDERS);
    for name in names {
        let fired: u64 = outcomes.iter().filter_map(|o| o.fired.get(name)).sum();
        let runs = outcomes
            .iter()
            .filter(|o| o.fired.get(name).is_some_and(|n| *n > 0));
        let violations = runs.clone().filter(|o| !o.violations.is_empty()).count();
        println!(
            "  {name:<24} fired {fired:<6} runs {:<4} violations {violations}",
            runs.count()
        );
    }
    if failing.is_empty() { 0 } else { 1 }
}
