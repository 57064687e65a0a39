//! Running a scenario end to end and reporting the result.

use crate::expect::Failure;
use crate::feed::Feeder;
use crate::scenario::Scenario;
use crate::sim::Sim;
use std::path::PathBuf;

/// How to run a scenario.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Overrides the scenario's seed.
    pub seed: Option<u64>,
    /// Keep the journal in this directory (a temporary one otherwise).
    pub journal_dir: Option<PathBuf>,
    /// Skip the journal entirely (benchmarks of the simulator itself).
    pub no_journal: bool,
    /// Changes every input before the engine sees it (tests that plant a bug).
    pub input_filter: Option<fn(&mut engine::Input)>,
    /// Feed each instant's inputs as batches, as the adapter feeds a backlog under load
    /// (`Input::Batch`): timelines differ (a Machine is reconciled once per batch).
    pub batch_inputs: bool,
    /// A bug planted in the controller's loop (tests that show a sweep finds one).
    pub loop_bug: Option<engine::runtime::PlantedBug>,
    /// A bug planted in the API: writes it picks are answered and lost.
    pub lost_writes: Option<crate::LostWrites>,
}

/// What a run produced.
pub struct Report {
    pub seed: u64,
    pub timeline: crate::timeline::Timeline,
    pub failures: Vec<Failure>,
    pub violations: Vec<String>,
    /// Machines still deleting at the end, with what holds them.
    pub stuck: Vec<String>,
    pub inputs: u64,
    pub engine_state_hash: u64,
    pub simulated_ms: i64,
    pub faults_fired: std::collections::BTreeMap<&'static str, u64>,
    pub invariant_checks: u64,
    /// A digest of which objects exist (and which are deleting) in every cluster at the end.
    pub final_world: u64,
    /// Every destructive action (and cordon) issued: `(action, target)`.
    pub destructive: std::collections::BTreeSet<(&'static str, String)>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.violations.is_empty()
    }

    /// The text after the timeline: each failed expectation and violation, then a verdict.
    pub fn render_verdict(&self, file: &str) -> String {
        let mut out = String::new();
        for f in &self.failures {
            out.push_str(&format!("FAIL {file}:{}: {}\n", f.line, f.message));
        }
        for v in &self.violations {
            out.push_str(&format!("VIOLATION {v}\n"));
        }
        for s in &self.stuck {
            out.push_str(&format!("STUCK {s}\n"));
        }
        let verdict = if self.passed() { "ok" } else { "FAILED" };
        out.push_str(&format!(
            "{verdict}: seed {}, {} inputs journaled, {} expectation(s) failed, {} invariant violation(s)\n",
            self.seed,
            self.inputs,
            self.failures.len(),
            self.violations.len(),
        ));
        out
    }
}

/// Runs `scenario` once.
pub fn run(scenario: &Scenario, options: &RunOptions) -> Result<Report, String> {
    run_owned(scenario.clone(), options)
}

/// Runs `scenario` once, consuming it: its manifests become the starting world instead of
/// being copied (a large generated fleet is then held once, not twice). A run that fails
/// removes what it made in [`RunOptions::journal_dir`], and only that.
pub fn run_owned(scenario: Scenario, options: &RunOptions) -> Result<Report, String> {
    let dir = options
        .journal_dir
        .as_deref()
        .filter(|_| !options.no_journal);
    let before = dir.map(crate::journaling::JournalDirBefore::note);
    match (run_journaled(scenario, options), before) {
        (Err(e), Some(before)) => Err(match before.remove_created() {
            Ok(()) => e,
            Err(cleanup) => format!("{e}; {cleanup}"),
        }),
        (result, _) => result,
    }
}

/// [`run_owned`]; its journal is closed when it returns.
fn run_journaled(scenario: Scenario, options: &RunOptions) -> Result<Report, String> {
    let seed = options.seed.unwrap_or(scenario.seed);
    let journal = if options.no_journal {
        None
    } else {
        Some(crate::journaling::SimJournal::open(
            options.journal_dir.as_deref(),
        )?)
    };
    let mut feeder = Feeder::new(journal);
    feeder.filter = options.input_filter;
    let mode = scenario.mode;
    let mut sim = Sim::new(scenario, seed, feeder);
    sim.process.batching = options.batch_inputs;
    sim.process.lost_writes = options.lost_writes;
    sim.set_loop_options(engine::runtime::LoopOptions {
        mode,
        planted: options.loop_bug,
        ..Default::default()
    });
    sim.setup();
    sim.run();
    // Encoded once, for the report's hash and the journal's last snapshot.
    let state = sim.engine().encode_state();
    let engine_state_hash = engine::Engine::hash_of_state(&state);
    if let Some(j) = &mut sim.process.feeder.journal {
        j.finish(sim.lp.core(), &state)?;
    }
    let inputs = sim.process.feeder.inputs;
    Ok(report(&mut sim, inputs, engine_state_hash))
}

/// The actions the corruption differential compares: what destroys, and cordons.
fn is_destructive(action: &str) -> bool {
    matches!(
        action,
        "Cordon"
            | "Evict"
            | "DeleteInfrastructure"
            | "DeleteBootstrap"
            | "DeleteNode"
            | "RemoveFinalizer"
            | "DeleteRemediation"
            | "DeleteMachine"
    )
}

/// The report of a finished run.
pub(crate) fn report(sim: &mut Sim, inputs: u64, engine_state_hash: u64) -> Report {
    let mut violations = sim.checks.invariants.violations.clone();
    violations.dedup();
    let destructive = sim
        .timeline
        .actions
        .iter()
        .filter(|a| is_destructive(a.name))
        .map(|a| (a.name, a.target.to_string()))
        .collect();
    Report {
        seed: sim.seed,
        timeline: std::mem::take(&mut sim.timeline),
        failures: sim.checks.expect.failures.clone(),
        violations,
        stuck: sim.checks.invariants.stuck.clone(),
        inputs,
        engine_state_hash,
        simulated_ms: sim.clock.end.since(sim.clock.start).as_millis(),
        faults_fired: sim.faults.fired.clone(),
        invariant_checks: sim.checks.invariants.checks,
        final_world: final_world(sim),
        destructive,
    }
}

/// FNV-1a over the sorted object keys of every cluster, each marked when it is deleting: of
/// the lines `<cluster>|<Kind> <namespace>/<name>|<deleting>`, fed part by part (one
/// formatted line per object was a tenth of a large run's report).
fn final_world(sim: &Sim) -> u64 {
    use std::hash::Hasher;
    let mut hash = engine::fnv::Fnv::default();
    let mut feed = |text: &str| hash.write(text.as_bytes());
    for (scope, store) in &sim.api.clusters {
        let cluster = crate::api::scope_name(scope);
        for (key, obj) in store.iter() {
            feed(&cluster);
            feed("|");
            feed(&key.kind);
            feed(" ");
            if !key.namespace.is_empty() {
                feed(&key.namespace);
                feed("/");
            }
            feed(&key.name);
            let deleting = crate::api::json::is_deleting(obj);
            feed(if deleting { "|true\n" } else { "|false\n" });
        }
    }
    hash.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The world's hash is FNV-1a over the lines it documents, whichever way they are fed.
    #[test]
    fn the_final_world_hashes_one_line_per_object() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/deletion-order-of-actions.yaml");
        let scenario = crate::scenario::load(&path).expect("loads");
        let mut sim = Sim::new(scenario.clone(), scenario.seed, Feeder::new(None));
        sim.setup();
        sim.run();
        let mut lines = String::new();
        for (scope, store) in &sim.api.clusters {
            for (key, obj) in store.iter() {
                let deleting = crate::api::json::is_deleting(obj);
                let cluster = crate::api::scope_name(scope);
                lines.push_str(&format!("{cluster}|{key}|{deleting}\n"));
            }
        }
        assert!(lines.contains("|Machine default/cp-1|false"), "{lines}");
        assert_eq!(
            final_world(&sim),
            engine::Engine::hash_of_state(lines.as_bytes())
        );
    }

    /// A self-hosted controller: the eviction of its own pod restarts it at that instant (the
    /// restart's rebuild equals the live engine, an invariant the run checks), and the restarted
    /// controller evicts nothing twice and finishes the deletion.
    #[test]
    fn the_eviction_of_the_controllers_own_pod_restarts_it_and_it_resumes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/takeover-self-hosted-drains-its-own-node.yaml");
        let scenario = crate::scenario::load(&path).expect("loads");
        let report = run(&scenario, &RunOptions::default()).expect("runs");
        assert!(report.passed(), "{}", report.timeline.render_text());
        let lines = &report.timeline.lines;
        let at = |action: &str| {
            lines
                .iter()
                .filter(|l| l.action == action)
                .map(|l| l.at_ms)
                .collect::<Vec<_>>()
        };
        let evicted_own: Vec<i64> = lines
            .iter()
            .filter(|l| l.action == "Evict" && l.object.contains("lifecycle-controller-0@"))
            .map(|l| l.at_ms)
            .collect();
        assert_eq!(
            evicted_own.len(),
            1,
            "evicted once, not again after the restart"
        );
        assert_eq!(at("ControllerPodTerminating"), evicted_own);
        assert_eq!(at("ControllerRestart"), evicted_own);
        assert!(at("DeleteNode").iter().all(|t| *t > evicted_own[0]));
    }

    /// `deletion-order-of-actions` with its journal kept in a new directory.
    fn kept_journal_run() -> (crate::scenario::Scenario, tempfile::TempDir, RunOptions) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/deletion-order-of-actions.yaml");
        let scenario = crate::scenario::load(&path).expect("loads");
        let dir = tempfile::tempdir().unwrap();
        let options = RunOptions {
            journal_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        };
        (scenario, dir, options)
    }

    /// A second run on a kept journal fails (it holds records) and removes nothing: the
    /// directory held a journal, not the run's to clear (sled's recovery on open may have
    /// written to it).
    #[test]
    fn a_run_refused_by_a_kept_journal_leaves_it_whole() {
        let (scenario, dir, options) = kept_journal_run();
        let first = run(&scenario, &options).expect("runs");
        let listing = |d: &std::path::Path| {
            let mut names: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        // What opening the journal alone leaves (sled's recovery adds a `snap.*` file).
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
            } else {
                std::fs::create_dir(copy.path().join(entry.file_name())).unwrap();
            }
        }
        drop(crate::journaling::SimJournal::open(Some(copy.path())).err());
        let error = run(&scenario, &options).err().expect("refused");
        assert!(error.contains("already holds"), "{error}");
        assert_eq!(listing(dir.path()), listing(copy.path()));
        let (journal, _) =
            engine::journal::Journal::open_read_only(dir.path(), crate::journaling::sim_options())
                .expect("opens");
        let restored = engine::recovery::restore(&journal).expect("restores");
        assert_eq!(restored.engine.state_hash(), first.engine_state_hash);
    }

    /// A kept journal ends with the state the report hashes: a controller restarted on it
    /// rebuilds exactly the engine the run ended with.
    #[test]
    fn a_kept_journal_rebuilds_the_state_the_report_hashes() {
        let (scenario, dir, options) = kept_journal_run();
        let report = run(&scenario, &options).expect("runs");
        let (journal, _) =
            engine::journal::Journal::open_read_only(dir.path(), crate::journaling::sim_options())
                .expect("opens");
        let restored = engine::recovery::restore(&journal).expect("restores");
        assert_eq!(restored.snapshot_seq, Some(restored.engine.applied_seq()));
        assert_eq!(restored.engine.state_hash(), report.engine_state_hash);
    }
}
