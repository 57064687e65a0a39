//! `lifecycle sim run`: replay a scenario and print its timeline.

use clap::{Subcommand, ValueEnum};
use sim::scenario;
use std::path::{Path, PathBuf};

/// The scenario replayed when `sim run` is given no file.
pub const DEFAULT_SCENARIO: (&str, &str) = (
    "scenarios/pre-drain-hook-holds-drain.yaml",
    include_str!("../../../scenarios/pre-drain-hook-holds-drain.yaml"),
);

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum SimCommand {
    /// Replay one scenario: timeline, then failed expectations. Exit 0 ok, 1 failed, 2 invalid.
    Run {
        /// Scenario file (default: the embedded pre-drain-hook scenario).
        file: Option<PathBuf>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Also write the timeline as one self-contained HTML page (a lane per object,
        /// phases as bars, actions as marks; no network needed to view it).
        #[arg(long, value_name = "OUT.html")]
        html: Option<PathBuf>,
        /// Keep the run's sled journal in this directory (a run that fails removes what it
        /// created there, the directory too if it made it).
        #[arg(long)]
        journal: Option<PathBuf>,
        /// Inject the faults a sweep draws for this seed (`all`, `none` or `kind,kind`):
        /// reproduces a sweep's failing seed. Expectations are not checked then; invariants are.
        #[arg(long)]
        faults: Option<String>,
        /// Feed each instant's inputs as batches, as `lifecycle run` feeds a backlog under
        /// load: each Machine is reconciled once per batch, so intermediate writes may not
        /// appear. Expectations are checked as written.
        #[arg(long)]
        batch: bool,
        /// How the controller runs, overriding the scenario's `mode`: `alone` (it owns the
        /// objects) or `shadow` (it decides and sends nothing; each command is a `NOT SENT`
        /// timeline line, not an action).
        #[arg(long, value_name = "alone|shadow")]
        mode: Option<engine::runtime::Mode>,
        /// Run end to end over real HTTP: serve the world, run the `lifecycle run` binary
        /// against it as a child process, play the timeline in real time (scaled by
        /// --speed); the fake API servers play the faults of API calls and deliveries.
        /// Exit 3 when the run could not happen.
        #[arg(long, conflicts_with_all = ["batch"])]
        over_http: bool,
        /// With --over-http: simulated seconds per real second (1..=100).
        #[arg(long, default_value_t = 1, requires = "over_http")]
        speed: u32,
        /// With --over-http: port of the management cluster's server (0 = free ports).
        #[arg(long, default_value_t = 0, requires = "over_http")]
        port: u16,
        /// Test only: append each distinct request the controller sends (cluster, verb,
        /// group, resource, subresource; tab-separated) to this file.
        #[arg(long, hide = true, requires = "over_http")]
        record_requests: Option<PathBuf>,
        /// Test only (`sim sweep --over-http`): write the run's outcome (verdict, violations,
        /// faults fired) to this file as JSON.
        #[arg(long, hide = true, requires = "over_http")]
        outcome: Option<PathBuf>,
    },
    /// Print a generated fleet as a scenario file (for `sim serve` and benchmarks): CLUSTERS
    /// workload clusters of MACHINES Machines each (one control plane), PODS pods per Node, and
    /// a seeded churn of Machine deletions and Node failures over the duration.
    Generate {
        #[arg(long, default_value_t = 10)]
        clusters: usize,
        /// Machines per cluster, the control-plane Machine included.
        #[arg(long, default_value_t = 10)]
        machines: usize,
        #[arg(long, default_value_t = 10)]
        pods: usize,
        /// Share of worker Machines deleted during the run.
        #[arg(long, default_value_t = 0.05)]
        delete_fraction: f64,
        /// Share of Nodes whose Ready condition turns False during the run.
        #[arg(long, default_value_t = 0.0)]
        fail_fraction: f64,
        /// Length of the run, in minutes.
        #[arg(long, default_value_t = 10)]
        minutes: i64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Run every scenario under many seeds with randomized faults, checking invariants.
    /// Exit 1 if any seed breaks one; each failure is printed with the command that reproduces it.
    Sweep {
        /// Scenario files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Seeds per scenario.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 1)]
        first_seed: u64,
        /// Worker threads (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Fault kinds to draw from: `all`, `none`, or a comma-separated list.
        #[arg(long, default_value = "all")]
        faults: String,
        /// Shrink each failing scenario (its first failing seed) to a minimal scenario file.
        #[arg(long)]
        shrink: bool,
        /// Where shrunk scenarios are written.
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Feed each instant's inputs as batches (see `sim run --batch`).
        #[arg(long, conflicts_with = "over_http")]
        batch: bool,
        /// Run each seed end to end over HTTP (`sim run FILE --over-http --seed N --faults
        /// ...` as a child process: a served world and a `lifecycle run` of its own), judging
        /// invariants; --jobs runs at once (default: twice the cores: the runs mostly wait).
        #[arg(long, conflicts_with = "shrink")]
        over_http: bool,
        /// With --over-http: simulated seconds per real second (1..=100).
        #[arg(long, default_value_t = 20, requires = "over_http")]
        speed: u32,
    },
    /// Serve a scenario's starting world over HTTP: a fake API server for the management
    /// cluster (on PORT) and one per workload cluster (PORT+1, ...), until Ctrl-C.
    Serve {
        /// Scenario file.
        file: PathBuf,
        /// Port of the management cluster's server (0 = pick free ports).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Where to write the kubeconfig files.
        #[arg(long, default_value = ".lifecycle-serve")]
        kubeconfig_dir: PathBuf,
        /// Simulated seconds per real second (1..=100); a controller pointed at the world
        /// must run with the same clock (the flags are printed).
        #[arg(long, default_value_t = 1)]
        speed: u32,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Test only: append each distinct request served (see `sim run --record-requests`).
        #[arg(long, hide = true)]
        record_requests: Option<PathBuf>,
    },
}

pub fn main(command: SimCommand) -> u8 {
    match command {
        SimCommand::Run {
            file,
            seed,
            format,
            html,
            journal,
            faults,
            batch,
            mode,
            over_http,
            speed,
            port,
            record_requests,
            outcome,
        } => {
            let scenario = match load(file.as_ref(), mode) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{e}");
                    return 2;
                }
            };
            if over_http {
                let setup = super::overhttp::OverHttp {
                    speed,
                    port,
                    journal,
                    seed,
                    record_requests,
                };
                let extra = OverHttpExtra { faults, outcome };
                run_over_http(scenario, format, html.as_deref(), &setup, &extra)
            } else {
                run(
                    scenario,
                    seed,
                    format,
                    html.as_deref(),
                    journal,
                    faults,
                    batch,
                )
            }
        }
        SimCommand::Sweep {
            files,
            seeds,
            first_seed,
            jobs,
            faults,
            shrink,
            out,
            batch,
            over_http,
            speed,
        } => {
            let args = super::sweep::SweepArgs {
                files,
                seeds,
                first_seed,
                jobs,
                faults,
                shrink,
                out,
                batch,
            };
            if over_http {
                super::sweep::over_http(&args, speed)
            } else {
                super::sweep::main(args)
            }
        }
        SimCommand::Generate {
            clusters,
            machines,
            pods,
            delete_fraction,
            fail_fraction,
            minutes,
            seed,
        } => {
            let spec = sim::generate::FleetSpec {
                clusters,
                machines_per_cluster: machines,
                pods_per_node: pods,
                delete_fraction: delete_fraction.clamp(0.0, 1.0),
                fail_fraction: fail_fraction.clamp(0.0, 1.0),
                duration: engine::Duration::from_secs(minutes.max(1) * 60),
                seed,
            };
            print!("{}", sim::scenario::to_yaml(&sim::generate::fleet(&spec)));
            0
        }
        SimCommand::Serve {
            file,
            port,
            kubeconfig_dir,
            speed,
            seed,
            record_requests,
        } => serve(&file, port, &kubeconfig_dir, speed, seed, record_requests),
    }
}

/// The scenario `file` (the embedded default without one), its mode overridden by `mode`.
fn load(
    file: Option<&PathBuf>,
    mode: Option<engine::runtime::Mode>,
) -> Result<scenario::Scenario, String> {
    let parsed = match file {
        Some(path) => scenario::load(path),
        None => scenario::parse(DEFAULT_SCENARIO.0, DEFAULT_SCENARIO.1),
    };
    let mut scenario = parsed.map_err(|e| e.to_string())?;
    if let Some(mode) = mode {
        scenario.mode = mode;
    }
    Ok(scenario)
}

/// Writes the HTML page when asked to; false (and a message) when it could not be written.
fn write_html(out: Option<&Path>, report: &sim::run::Report, file: &str) -> bool {
    let Some(out) = out else {
        return true;
    };
    let page = sim::html::render(file, &report.timeline);
    match std::fs::write(out, page) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("--html {}: {e}", out.display());
            false
        }
    }
}

fn print_report(report: &sim::run::Report, file: &str, format: Format) {
    match format {
        Format::Text => print!("{}", report.timeline.render_text()),
        Format::Json => print!("{}", report.timeline.render_json()),
    }
    print!("{}", report.render_verdict(file));
}

/// What `sim run --over-http` takes besides the run's setup.
struct OverHttpExtra {
    /// `--faults`: the faults a sweep draws for the seed.
    faults: Option<String>,
    /// `--outcome`: where to write the outcome as JSON.
    outcome: Option<PathBuf>,
}

fn run_over_http(
    mut scenario: scenario::Scenario,
    format: Format,
    html: Option<&Path>,
    setup: &super::overhttp::OverHttp,
    extra: &OverHttpExtra,
) -> u8 {
    if let Some(faults) = &extra.faults {
        let choice = match sim::sweep::FaultChoice::parse(faults) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("--faults: {e}");
                return 2;
            }
        };
        let seed = setup.seed.unwrap_or(scenario.seed);
        scenario = sim::sweep::with_faults(&scenario, seed, &choice);
    }
    match super::overhttp::run(&scenario, setup) {
        Ok(played) => {
            if !write_html(html, &played.report, &scenario.file) {
                return super::overhttp::EXIT_COULD_NOT_RUN;
            }
            print_report(&played.report, &scenario.file, format);
            println!(
                "{}",
                super::overhttp::fired_line(&played.report.faults_fired)
            );
            println!(
                "over HTTP: speed {}x, tolerance {}, {} controller process(es), {:.1} s wall",
                setup.speed,
                played.tolerance,
                played.processes,
                played.wall.as_secs_f64()
            );
            if let Some(path) = &extra.outcome {
                let outcome = super::overhttp::outcome_json(&played);
                if let Err(e) = std::fs::write(path, outcome.to_string()) {
                    eprintln!("--outcome {}: {e}", path.display());
                    return super::overhttp::EXIT_COULD_NOT_RUN;
                }
            }
            if played.report.passed() { 0 } else { 1 }
        }
        Err(e) => {
            eprintln!("{}: the run could not happen: {e}", scenario.file);
            super::overhttp::EXIT_COULD_NOT_RUN
        }
    }
}

fn run(
    mut scenario: scenario::Scenario,
    seed: Option<u64>,
    format: Format,
    html: Option<&Path>,
    journal: Option<PathBuf>,
    faults: Option<String>,
    batch: bool,
) -> u8 {
    if let Some(faults) = faults {
        let choice = match sim::sweep::FaultChoice::parse(&faults) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("--faults: {e}");
                return 2;
            }
        };
        let seed = seed.unwrap_or(scenario.seed);
        scenario = sim::sweep::with_faults(&scenario, seed, &choice);
    }
    let options = sim::RunOptions {
        seed,
        journal_dir: journal,
        batch_inputs: batch,
        ..Default::default()
    };
    let report = match sim::run(&scenario, &options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: {e}", scenario.file);
            return 1;
        }
    };
    if !write_html(html, &report, &scenario.file) {
        return 1;
    }
    print_report(&report, &scenario.file, format);
    println!("engine state {:016x}", report.engine_state_hash);
    if report.passed() { 0 } else { 1 }
}

fn serve(
    file: &std::path::Path,
    port: u16,
    kubeconfig_dir: &std::path::Path,
    speed: u32,
    seed: Option<u64>,
    record_requests: Option<PathBuf>,
) -> u8 {
    let record = match super::overhttp::recorder(record_requests.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return super::overhttp::EXIT_COULD_NOT_RUN;
        }
    };
    let scenario = match scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("starting the runtime: {e}");
            return super::overhttp::EXIT_COULD_NOT_RUN;
        }
    };
    runtime.block_on(async {
        let origin = super::overhttp::origin();
        if let Err(e) = adapters::clock::scale(origin, speed) {
            eprintln!("--speed: {e}");
            return 2;
        }
        let seed = seed.unwrap_or(scenario.seed);
        let mut live = sim::live::Live::new(&scenario, seed, origin, engine::Duration::from_millis(0));
        let options = adapters::apiserver::ServerOptions {
            controllers_interval: None,
            record,
            ..Default::default()
        };
        let world = match adapters::serve::ServedWorld::start_live(&mut live, port, options).await {
            Ok(w) => w,
            Err(e) => {
                eprintln!("serving {} on port {port}: {e}", file.display());
                return super::overhttp::EXIT_COULD_NOT_RUN;
            }
        };
        let management = match world.write_kubeconfigs(kubeconfig_dir) {
            Ok(paths) => {
                for (name, path) in &paths {
                    let url = match name.as_str() {
                        "management" => world.management.url(),
                        other => world
                            .workloads
                            .get(other)
                            .map(|s| s.url())
                            .unwrap_or_default(),
                    };
                    println!("{name}: {url} kubeconfig {}", path.display());
                }
                paths
                    .into_iter()
                    .find(|(n, _)| n == "management")
                    .map(|(_, p)| p)
                    .unwrap_or_default()
            }
            Err(e) => {
                eprintln!("writing kubeconfigs to {}: {e}", kubeconfig_dir.display());
                return super::overhttp::EXIT_COULD_NOT_RUN;
            }
        };
        let mut clock_flags = if speed == 1 {
            String::new()
        } else {
            format!(
                " --clock-origin-ms {} --clock-speed {speed}",
                origin.as_millis()
            )
        };
        if scenario.mode != engine::runtime::Mode::Alone {
            clock_flags.push_str(&format!(" --mode {}", scenario.mode));
        }
        println!(
            "run the controller with: lifecycle run --kubeconfig {} --journal <DIR>{clock_flags}",
            management.display()
        );
        println!(
            "playing {} ({} at {speed}x) until its end, then serving until Ctrl-C",
            scenario.file, scenario.duration
        );
        let mut player = adapters::play::Player::start(live, world.clusters());
        let mut ended = false;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                Some(_) = player.restarts.recv() => {
                    let at = adapters::clock::wall_now().since(origin);
                    println!("{at}: the scenario restarts the controller here: kill and restart `lifecycle run` to play it");
                }
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)), if !ended => {
                    if player.is_finished() {
                        ended = true;
                        println!("{}: the scenario's timeline ended; the world stands still", scenario.duration);
                    }
                }
            }
        }
        if let Ok(live) = player.stop().await {
            print!("{}", live.timeline().render_text());
        }
        world.shutdown().await;
        0
    })
}
