//! Subcommands of the `lifecycle` binary.

pub mod adopt;
pub mod explain;
pub mod log;
pub mod logging;
pub mod overhttp;
pub mod preflight;
pub mod release;
pub mod run;
pub mod shadow;
pub mod sim;
pub mod sweep;
