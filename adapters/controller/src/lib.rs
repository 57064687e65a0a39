//! The production controller process: the kube adapter (watch events in, API calls out) that
//! drives `engine::runtime::Loop` with tokio, and the preflight checks run before it acts next
//! to Cluster API's manager. `lifecycle run` is built on this crate alone (with `engine`); it
//! links no simulator code, which its manifest pins: `sim` and `fakeapi` are only
//! dev-dependencies, for tests against the fake API server.

#![deny(unsafe_code)]

pub use wallclock as clock;
pub mod kube;
pub mod preflight;
