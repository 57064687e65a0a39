//! Deterministic simulation: a fake clock and event queue, fake clusters and providers, the
//! scenario loader, invariant checks, and the timeline renderer.
//!
//! Same scenario and seed give byte-identical timelines: time only moves when the next event
//! is due, all randomness comes from one `rand_chacha` stream, and every collection is ordered.

#![deny(unsafe_code)]

pub mod api;
mod capi;
mod capi_conditions;
mod capi_deployments;
mod capi_drain;
mod capi_health;
mod capi_paused;
mod capi_pools;
mod capi_remediation;
mod capi_writer;
mod checks;
mod clock;
pub mod controller_record;
pub mod convergence;
pub mod defaults;
mod differential;
mod drain_skips;
mod env;
pub mod event;
mod exec;
pub mod expect;
mod faults;
pub mod feed;
pub mod generate;
pub mod html;
pub mod invariants;
pub mod journal_damage;
pub mod journaling;
pub mod live;
mod machine_sets;
mod network;
mod pools;
mod process;
mod release;
mod repeats;
pub mod run;
pub mod scenario;
mod setup;
pub mod sim;
mod steps;
pub mod sweep;
pub mod timeline;
pub mod wire;
mod world;

pub use process::LostWrites;
pub use run::{Report, RunOptions, run, run_owned};
