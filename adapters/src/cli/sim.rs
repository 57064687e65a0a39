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
    },
}

pub fn main(command: SimCommand) -> u8 {
    match command {
        SimCommand::Run {
            file,
            seed,
            format,
            journal,
        } => run(file, seed, format, journal),
    }
}

fn run(file: Option<PathBuf>, seed: Option<u64>, format: Format, journal: Option<PathBuf>) -> u8 {
    let parsed = match &file {
        Some(path) => scenario::load(path),
        None => scenario::parse(DEFAULT_SCENARIO.0, DEFAULT_SCENARIO.1),
    };
    let scenario = match parsed {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let options = sim::RunOptions {
        seed,
        journal_dir: journal,
        no_journal: false,
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
    if report.passed() { 0 } else { 1 }
}
