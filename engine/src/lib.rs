//! Sans-IO state machines for three Cluster API controllers (Machine deletion,
//! MachineHealthCheck, MachinePool), fed by inputs that are journaled in sled before they are
//! applied.
//!
//! No clock, RNG, async runtime or I/O here except the `journal` module: time is a value passed
//! to [`Engine::handle`], and commands are pulled with [`Engine::poll_command`].
//!
//! Comments cite upstream Cluster API behaviour as `§N.M` and the product's deliberate
//! differences as "decision N": both are sections of `engine/docs/capi.md`. The design's
//! properties ("property N") are those of `engine/docs/design.md`.

#![deny(unsafe_code)]

pub mod census;
pub mod codec;
pub mod command;
pub mod connection;
pub mod controller;
pub mod convert;
pub mod decision;
pub mod deletion;
pub mod drain;
mod engine;
pub mod fight;
pub mod fnv;
pub mod health;
pub mod input;
pub mod intake;
pub mod journal;
pub mod mark;
pub mod metrics;
pub mod model;
pub mod node_deletion;
pub mod outcome;
pub mod ownership;
pub mod pool;
pub mod recovery;
pub mod release;
pub mod remediation;
pub mod runtime;
pub mod shadow;
pub mod shared;
pub mod store;
pub mod testing;
pub mod time;
pub mod timer;
pub mod work;

pub use command::{Action, ActionKind, Command, ControllerId, EventSeries, EventType, Target};
pub use engine::{Controllers, Engine, keeps_answer};
pub use input::{BATCH_INPUTS_MAX, Input};
pub use outcome::{ApiOutcome, Refusal, Withheld};
pub use time::{Duration, Timestamp};
pub use timer::FiredTimer;
