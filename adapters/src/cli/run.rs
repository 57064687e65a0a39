//! `lifecycle run`: the controllers against a real management cluster.

use clap::Args;

#[derive(Args)]
pub struct RunArgs {
    /// Journal directory.
    #[arg(long, default_value = "/var/lib/lifecycle/journal")]
    pub journal: std::path::PathBuf,
}

pub fn main(args: RunArgs) -> u8 {
    let _ = args;
    eprintln!("lifecycle run: the kube adapter is not built yet");
    1
}
