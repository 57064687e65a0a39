//! `lifecycle sim run`: replay a scenario and print its timeline.

use clap::{Subcommand, ValueEnum};
use sim::scenario;
use std::path::PathBuf;

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
        /// Keep the run's sled journal in this directory.
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
        #[arg(long)]
        batch: bool,
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
    },
}

pub fn main(command: SimCommand) -> u8 {
    match command {
        SimCommand::Run {
            file,
            seed,
            format,
            journal,
            faults,
            batch,
        } => run(file, seed, format, journal, faults, batch),
        SimCommand::Sweep {
            files,
            seeds,
            first_seed,
            jobs,
            faults,
            shrink,
            out,
            batch,
        } => super::sweep::main(super::sweep::SweepArgs {
            files,
            seeds,
            first_seed,
            jobs,
            faults,
            shrink,
            out,
            batch,
        }),
        SimCommand::Serve {
            file,
            port,
            kubeconfig_dir,
        } => serve(&file, port, &kubeconfig_dir),
    }
}

fn run(
    file: Option<PathBuf>,
    seed: Option<u64>,
    format: Format,
    journal: Option<PathBuf>,
    faults: Option<String>,
    batch: bool,
) -> u8 {
    let parsed = match &file {
        Some(path) => scenario::load(path),
        None => scenario::parse(DEFAULT_SCENARIO.0, DEFAULT_SCENARIO.1),
    };
    let mut scenario = match parsed {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
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
    match format {
        Format::Text => print!("{}", report.timeline.render_text()),
        Format::Json => print!("{}", report.timeline.render_json()),
    }
    print!("{}", report.render_verdict(&scenario.file));
    println!("engine state {:016x}", report.engine_state_hash);
    if report.passed() { 0 } else { 1 }
}

fn serve(file: &std::path::Path, port: u16, kubeconfig_dir: &std::path::Path) -> u8 {
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
            return 1;
        }
    };
    runtime.block_on(async {
        let options = adapters::apiserver::ServerOptions::default();
        let world = match adapters::serve::ServedWorld::start(&scenario, port, options).await {
            Ok(w) => w,
            Err(e) => {
                eprintln!("serving {}: {e}", file.display());
                return 1;
            }
        };
        match world.write_kubeconfigs(kubeconfig_dir) {
            Ok(paths) => {
                for (name, path) in paths {
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
            }
            Err(e) => {
                eprintln!("writing kubeconfigs to {}: {e}", kubeconfig_dir.display());
                return 1;
            }
        }
        println!("serving {} until Ctrl-C", scenario.file);
        let _ = tokio::signal::ctrl_c().await;
        world.shutdown().await;
        0
    })
}
