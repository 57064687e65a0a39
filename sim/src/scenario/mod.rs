//! Scenario files (`scenarios/*.yaml`), as `sim/docs/scenario-format.md` specifies them.
//!
//! [`load`] / [`parse`] turn one file into a typed [`Scenario`] with every default filled in, or
//! the first [`ScenarioError`] (`file:line: key.path: message`, exit 2). Validation covers the
//! scenario's structure (keys, types, durations, step and expectation shapes, workload cluster
//! references, object identity); object *content* is left to the controllers. A file nesting
//! lists and maps deeper than [`yaml::NESTING_DEPTH_MAX`] is refused before it is loaded.

mod error;
mod model;
mod parse;
mod write;
pub mod yaml;

pub use error::ScenarioError;
pub use model::*;
pub use parse::{files, load, parse};
pub use write::to_yaml;

#[cfg(test)]
mod tests;
