//! `lifecycle log verify|show|stats --journal DIR`.

use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum LogCommand {
    /// Check every checksum, replay, and compare state hashes. Exit 1 on any problem.
    Verify {
        #[arg(long)]
        journal: PathBuf,
    },
    /// Print the journaled inputs.
    Show {
        #[arg(long)]
        journal: PathBuf,
        #[arg(long, default_value = "text")]
        format: String,
    },
    /// Counts, sizes and snapshots.
    Stats {
        #[arg(long)]
        journal: PathBuf,
    },
}

pub fn main(command: LogCommand) -> u8 {
    let _ = command;
    eprintln!("the journal commands land with the journal");
    1
}
