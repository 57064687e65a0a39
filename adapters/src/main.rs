//! `lifecycle`: run the controllers against a cluster, replay scenarios, inspect journals.

#![deny(unsafe_code)]

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cli;

/// jemalloc instead of the C library's malloc (BENCHMARKS.md, "The allocator"): glibc's spent
/// a fifth of a large replay merging its fast bins, and musl's (the static image) is slower.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "lifecycle",
    version,
    about = "Cluster API machine lifecycle controllers, replayable"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay scenarios in the deterministic simulator.
    Sim {
        #[command(subcommand)]
        command: cli::sim::SimCommand,
    },
    /// Inspect a journal.
    Log {
        #[command(subcommand)]
        command: cli::log::LogCommand,
    },
    /// Tell one object's story from a journal: its phases, each decision and its cause, what
    /// holds it now and what would unblock it.
    Explain(cli::explain::ExplainArgs),
    /// Run the controllers against the management cluster of the current kubeconfig.
    Run(Box<cli::run::RunArgs>),
    /// Hand worker Machines back to Cluster API's manager: remove this controller's deletion
    /// hooks (the uninstall path of `run --mode takeover`).
    Release(cli::release::ReleaseArgs),
    /// Beside Cluster API's manager: adopt one MachineHealthCheck or MachinePool (pause it for
    /// CAPI with this controller's marker), or give it back.
    Adopt(cli::adopt::AdoptArgs),
    /// Check the management cluster before running next to Cluster API's manager: its release,
    /// the RBAC a mode needs, other hook owners, hooks that templates propagate.
    Preflight(cli::preflight::PreflightArgs),
    /// Compare a shadow run's decisions with what was done (`run --mode shadow`).
    Shadow {
        #[command(subcommand)]
        command: cli::shadow::ShadowCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Sim { command } => cli::sim::main(command),
        Command::Log { command } => cli::log::main(command),
        Command::Explain(args) => cli::explain::main(args),
        Command::Run(args) => cli::run::main(*args),
        Command::Release(args) => cli::release::main(args),
        Command::Preflight(args) => cli::preflight::main(args),
        Command::Adopt(args) => cli::adopt::main(args),
        Command::Shadow { command } => cli::shadow::main(command),
    };
    ExitCode::from(code)
}
