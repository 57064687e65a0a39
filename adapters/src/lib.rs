//! The pieces of the `lifecycle` binary: its commands (`src/cli`) and `lifecycle explain`
//! ([`explain`]), over the crates beside it. The layering, from the production path out:
//!
//! * `controller` (`adapters/controller`): the kube adapter and preflight, what `lifecycle run`
//!   runs; no simulator code.
//! * `fakeapi` (`adapters/fakeapi`): the fake API server, `serve` and `play`, over the
//!   simulator's clusters.
//! * `wallclock` (`adapters/clock`): the process's clock, shared by both.
//!
//! They are re-exported under their old paths (`adapters::kube`, `adapters::apiserver`, …).

#![deny(unsafe_code)]

pub use controller::{kube, preflight};
pub use fakeapi::{apiserver, play, serve};
pub use wallclock as clock;
pub mod explain;
