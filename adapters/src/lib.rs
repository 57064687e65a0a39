//! The kube adapter (watch events in, API calls out), a fake Kubernetes API server over real
//! HTTP for tests and demos, and the pieces of the `lifecycle` binary built on them.

#![deny(unsafe_code)]

pub mod apiserver;
pub mod clock;
pub mod explain;
pub mod kube;
pub mod play;
pub mod preflight;
pub mod serve;
