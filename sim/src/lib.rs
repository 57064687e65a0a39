//! sim
pub mod scenario;
