//! Swarm testing: every scenario under many seeds, each seed drawing its own subset and rates of
//! fault kinds; invariants checked on every run, determinism and recovery cross-checked, and a
//! failing seed shrunk to a minimal scenario file.

use crate::run::{Report, RunOptions, run};
use crate::scenario::{FaultKind, FaultSpec, Scenario, Step, StepAction};
use engine::Input;
use engine::time::Duration;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Quiet time after the last injected fault, so liveness can be judged.
pub const QUIET_AFTER_FAULTS: Duration = Duration::from_mins(15);
/// Every this-many seeds a run is repeated to check determinism.
pub const DETERMINISM_EVERY_SEEDS: u64 = 10;

pub use crate::wire::DELIVERY_ORDERS;

/// Which fault kinds a sweep may draw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultChoice {
    None,
    All,
    Only(Vec<FaultKind>),
}

impl FaultChoice {
    /// `all`, `none`, or a comma-separated list of kinds.
    pub fn parse(s: &str) -> Result<FaultChoice, String> {
        match s {
            "all" => Ok(FaultChoice::All),
            "none" => Ok(FaultChoice::None),
            list => list
                .split(',')
                .map(|k| {
                    FaultKind::from_name(k.trim()).ok_or_else(|| {
                        format!(
                            "unknown fault kind {k:?} (known: {})",
                            FaultKind::ALL.map(FaultKind::as_str).join(", ")
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(FaultChoice::Only),
        }
    }

    pub fn as_arg(&self) -> String {
        match self {
            FaultChoice::None => "none".into(),
            FaultChoice::All => "all".into(),
            FaultChoice::Only(k) => k.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(","),
        }
    }

    fn kinds(&self) -> Vec<FaultKind> {
        match self {
            FaultChoice::None => Vec::new(),
            FaultChoice::All => FaultKind::ALL.to_vec(),
            FaultChoice::Only(k) => k.clone(),
        }
    }
}

/// The fault steps seed `seed` draws for `scenario`: each allowed kind with probability 0.4, at
/// a random time in the first 60% of the run, with random duration, rate and cluster.
pub fn swarm_faults(scenario: &Scenario, seed: u64, choice: &FaultChoice) -> Vec<Step> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa17_0000_0000);
    let span = (scenario.duration.as_millis() * 6 / 10).max(1000);
    let clusters: Vec<&String> = scenario.workload.keys().collect();
    let mut steps = Vec::new();
    for kind in choice.kinds() {
        if !rng.random_bool(0.4) {
            continue;
        }
        let at = Duration(1000 * (rng.random_range(0..span) / 1000));
        let for_ = Duration::from_secs(rng.random_range(10..=180));
        let rate = f64::from(rng.random_range(1u32..=6)) / 10.0;
        let workload =
            (!clusters.is_empty()).then(|| clusters[rng.random_range(0..clusters.len())].clone());
        let cluster = match kind {
            FaultKind::ControllerRestart
            | FaultKind::TornJournal
            | FaultKind::JournalDamage
            | FaultKind::StuckHook
            | FaultKind::NodeNeverJoins
            | FaultKind::InfraProvisionFailure => None,
            FaultKind::KubeletStop
            | FaultKind::NodeFlap
            | FaultKind::Eviction429
            | FaultKind::CacheUnsynced
            | FaultKind::CorruptObject
            | FaultKind::Kubeconfig => workload.clone(),
            FaultKind::ApiErrors
            | FaultKind::Partition
            | FaultKind::WatchGap
            | FaultKind::Conflicts
            | FaultKind::SlowApi
            | FaultKind::ReorderedDelivery
            | FaultKind::CoalescedEvents
            | FaultKind::WatchExpired
            | FaultKind::RelistDuplicates
            | FaultKind::WriteTimeout
            | FaultKind::BacklogBatches => {
                if rng.random_bool(0.5) {
                    workload.clone()
                } else {
                    None
                }
            }
        };
        let (rate, for_) = match kind {
            FaultKind::ControllerRestart
            | FaultKind::TornJournal
            | FaultKind::JournalDamage
            | FaultKind::StuckHook => (None, None),
            FaultKind::ApiErrors
            | FaultKind::Conflicts
            | FaultKind::Eviction429
            | FaultKind::WriteTimeout => (Some(rate), Some(for_)),
            _ => (None, Some(for_)),
        };
        if matches!(
            kind,
            FaultKind::KubeletStop
                | FaultKind::NodeFlap
                | FaultKind::Eviction429
                | FaultKind::CacheUnsynced
                | FaultKind::CorruptObject
                | FaultKind::Kubeconfig
        ) && cluster.is_none()
        {
            continue;
        }
        steps.push(Step {
            at,
            line: 0,
            cluster,
            action: StepAction::Fault(FaultSpec {
                kind,
                rate,
                for_,
                extra: BTreeMap::new(),
            }),
        });
    }
    steps
}

/// The scenario with the seed's faults added, expectations dropped (a faulted run is judged by
/// its invariants), and its duration stretched so the world is quiet long enough afterwards.
pub fn with_faults(scenario: &Scenario, seed: u64, choice: &FaultChoice) -> Scenario {
    let mut s = scenario.clone();
    let faults = swarm_faults(scenario, seed, choice);
    let last = faults
        .iter()
        .map(|f| match &f.action {
            StepAction::Fault(spec) => f.at + spec.for_.unwrap_or_default(),
            _ => f.at,
        })
        .max();
    if let Some(last) = last {
        s.duration = s.duration.max(last + QUIET_AFTER_FAULTS);
    }
    s.timeline.extend(faults);
    s.timeline.sort_by_key(|t| t.at);
    s.expect.clear();
    s.seed = seed;
    s
}

/// Whether the run has faults that change what the controller observes (lost watch events, a
/// lost journal tail, a late cache): a restart then legitimately shows it a fresher world, so
/// with and without restarts may end differently.
fn hides_observations(s: &Scenario) -> bool {
    s.timeline.iter().any(|t| {
        matches!(&t.action, StepAction::Fault(f) if matches!(
            f.kind,
            FaultKind::WatchGap
                | FaultKind::Partition
                | FaultKind::CacheUnsynced
                | FaultKind::Kubeconfig
                | FaultKind::TornJournal
                | FaultKind::WatchExpired
                | FaultKind::CoalescedEvents
                | FaultKind::WriteTimeout
        ))
    })
}

/// The outcome of one seed.
#[derive(Clone, Debug)]
pub struct SeedOutcome {
    pub file: String,
    pub seed: u64,
    pub violations: Vec<String>,
    pub fired: BTreeMap<&'static str, u64>,
    pub checks: u64,
}

/// How a sweep feeds the engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Feeding {
    /// Changes every input before the engine sees it (a bug planted from the outside).
    pub filter: Option<fn(&mut Input)>,
    /// Each instant's inputs as batches, as `lifecycle run` feeds a backlog.
    pub batch: bool,
    /// A bug planted in the controller's loop.
    pub loop_bug: Option<engine::runtime::PlantedBug>,
}

fn run_once(s: &Scenario, feeding: Feeding) -> Result<Report, String> {
    let options = RunOptions {
        input_filter: feeding.filter,
        batch_inputs: feeding.batch,
        loop_bug: feeding.loop_bug,
        ..Default::default()
    };
    run(s, &options)
}

/// Runs one seed: invariants, plus determinism (every few seeds) and recovery (when the seed
/// drew a restart: the same seed without restarts must end in the same world).
pub fn run_seed(
    scenario: &Scenario,
    seed: u64,
    choice: &FaultChoice,
    feeding: Feeding,
) -> SeedOutcome {
    let faulted = with_faults(scenario, seed, choice);
    let mut outcome = SeedOutcome {
        file: scenario.file.clone(),
        seed,
        violations: Vec::new(),
        fired: BTreeMap::new(),
        checks: 0,
    };
    let report = match run_once(&faulted, feeding) {
        Ok(r) => r,
        Err(e) => {
            outcome.violations.push(format!("run failed: {e}"));
            return outcome;
        }
    };
    outcome.violations.extend(report.violations.iter().cloned());
    outcome.fired = report.faults_fired.clone();
    outcome.checks = report.invariant_checks;
    if seed.is_multiple_of(DETERMINISM_EVERY_SEEDS) {
        match run_once(&faulted, feeding) {
            Ok(again)
                if again.timeline.lines != report.timeline.lines
                    || again.engine_state_hash != report.engine_state_hash =>
            {
                outcome
                    .violations
                    .push("determinism: two runs of this seed differ".into());
            }
            Ok(_) => {}
            Err(e) => outcome.violations.push(format!("run failed: {e}")),
        }
    }
    let restarted = report
        .faults_fired
        .keys()
        .any(|k| FaultKind::from_name(k).is_some_and(|k| k == FaultKind::ControllerRestart));
    if restarted && !hides_observations(&faulted) {
        let mut calm = faulted.clone();
        calm.timeline
            .retain(|t| !matches!(&t.action, StepAction::Fault(f) if f.kind == FaultKind::ControllerRestart));
        if let Ok(without) = run_once(&calm, feeding)
            && without.final_world != report.final_world
        {
            outcome.violations.push(
                "recovery: with controller restarts the run ends in a different world than without"
                    .into(),
            );
        }
    }
    outcome
        .violations
        .extend(corruption_differential(&faulted, &report, feeding));
    outcome
}

/// Corrupting objects may delay destructive commands, never add one: the same seed without
/// its `corrupt-object` faults must issue every destructive command (and cordon) the corrupted
/// run issued. Judged where corruption is the only fault, so both runs draw alike.
fn corruption_differential(faulted: &Scenario, report: &Report, feeding: Feeding) -> Vec<String> {
    let corrupt = |t: &crate::scenario::Step| matches!(&t.action, StepAction::Fault(f) if f.kind == FaultKind::CorruptObject);
    let faults = faulted
        .timeline
        .iter()
        .filter(|t| matches!(t.action, StepAction::Fault(_)));
    if !report.faults_fired.contains_key("corrupt-object") || !faults.clone().all(corrupt) {
        return Vec::new();
    }
    let mut clean = faulted.clone();
    clean.timeline.retain(|t| !corrupt(t));
    let Ok(without) = run_once(&clean, feeding) else {
        return vec!["corruption differential: the run without corruption failed".into()];
    };
    report
        .destructive
        .difference(&without.destructive)
        .map(|(action, target)| {
            format!(
                "corruption added a destructive command: {action} {target} (not issued without it)"
            )
        })
        .collect()
}

/// What a sweep found.
#[derive(Debug, Default)]
pub struct SweepReport {
    pub runs: u64,
    pub failures: Vec<SeedOutcome>,
    pub fired: BTreeMap<&'static str, u64>,
    pub checks: u64,
}

/// Runs `seeds` seeds (from `first_seed`) of every scenario on `jobs` threads. `progress` is
/// called after each run with (runs done, failures so far).
pub fn sweep(
    scenarios: &[Scenario],
    first_seed: u64,
    seeds: u64,
    jobs: usize,
    choice: &FaultChoice,
    feeding: Feeding,
    progress: &(dyn Fn(u64, usize) + Sync),
) -> SweepReport {
    let work: Vec<(usize, u64)> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(i, _)| (first_seed..first_seed + seeds).map(move |s| (i, s)))
        .collect();
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let results: Mutex<Vec<SeedOutcome>> = Mutex::new(Vec::with_capacity(work.len()));
    let failures = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(si, seed)) = work.get(i) else {
                        break;
                    };
                    let outcome = run_seed(&scenarios[si], seed, choice, feeding);
                    if !outcome.violations.is_empty() {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    results
                        .lock()
                        .expect("no panics hold the lock")
                        .push(outcome);
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    progress(n, failures.load(Ordering::Relaxed));
                }
            });
        }
    });
    let mut outcomes = results.into_inner().expect("no panics hold the lock");
    outcomes.sort_by(|a, b| (&a.file, a.seed).cmp(&(&b.file, b.seed)));
    let mut report = SweepReport::default();
    for o in outcomes {
        report.runs += 1;
        report.checks += o.checks;
        for (k, n) in &o.fired {
            *report.fired.entry(k).or_default() += n;
        }
        if !o.violations.is_empty() {
            report.failures.push(o);
        }
    }
    report
}

/// The kind of a violation (the text before the first colon), which shrinking preserves.
fn violation_kind(v: &str) -> &str {
    v.split(':').next().unwrap_or(v)
}

/// Delta-debugs the timeline (faults included) of a failing seed down to a minimal scenario
/// that still breaks the same invariant. Returns the scenario and the violation it shows.
pub fn shrink(
    scenario: &Scenario,
    seed: u64,
    choice: &FaultChoice,
    feeding: Feeding,
    runs_max: usize,
) -> Option<(Scenario, String)> {
    let faulted = with_faults(scenario, seed, choice);
    let first = run_once(&faulted, feeding).ok()?;
    let target = violation_kind(first.violations.first()?).to_string();
    let runs = std::cell::Cell::new(1usize);
    let fails = |steps: &[Step]| -> Option<String> {
        runs.set(runs.get() + 1);
        let mut s = faulted.clone();
        s.timeline = steps.to_vec();
        let r = run_once(&s, feeding).ok()?;
        r.violations
            .into_iter()
            .find(|v| violation_kind(v) == target)
    };
    let mut steps = faulted.timeline.clone();
    let mut found = first.violations[0].clone();
    let mut n = 2;
    while steps.len() >= 2 && runs.get() < runs_max {
        let chunk = steps.len().div_ceil(n);
        let mut reduced = false;
        for start in (0..steps.len()).step_by(chunk) {
            let mut rest = steps.clone();
            rest.drain(start..(start + chunk).min(steps.len()));
            if let Some(v) = fails(&rest) {
                steps = rest;
                found = v;
                n = (n - 1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if n >= steps.len() {
                break;
            }
            n = (n * 2).min(steps.len());
        }
    }
    if steps.len() == 1
        && let Some(v) = fails(&[])
    {
        steps.clear();
        found = v;
    }
    let mut minimal = faulted;
    minimal.timeline = steps;
    minimal.name = format!("{}-seed{seed}-shrunk", scenario.name);
    minimal.description = format!(
        "Shrunk by `lifecycle sim sweep --shrink` from {} seed {seed}: {found}",
        scenario.file
    );
    Some((minimal, found))
}
