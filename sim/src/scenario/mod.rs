//! Scenario files (`scenarios/*.yaml`): loading and validation.
pub mod yaml;
