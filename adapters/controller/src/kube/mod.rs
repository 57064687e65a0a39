//! The kube adapter: watch events in, API calls out, around one sans-IO [`Core`] (the engine).
//!
//! * [`streams`]: one `kube::runtime::watcher` per resource type and cluster.
//! * `engine::intake` (sans-IO, shared with the simulator): watch events and answers → inputs,
//!   which watches to start, which clusters to connect.
//! * [`execute`]: `Command` → HTTP request (`engine::convert::request_for`) → `ApiOutcome`.
//! * [`adapter`]: the tokio driver of `engine::runtime::Loop`, the sans-IO loop (batching,
//!   journal every input before `handle`, in-flight caps, priority and eviction order, ticks).
//! * [`bucket`], [`gate`] (sans-IO) and [`throttle`]: per cluster, a token bucket, the most
//!   urgent request first; every request of a cluster goes through its throttle.
//! * [`client`]: the settings every kube client is built with (no kube retries, no trust
//!   store loaded for a plain-HTTP server).
//! * [`kubeconfigs`]: the workload clusters' kubeconfig Secrets, listed once for the first
//!   connects.
//! * [`lease`]: leader election on a coordination.k8s.io Lease.
//! * [`metrics`]: what is counted, written for `/metrics`.
//! * [`serving`]: the plain, health and secure (TLS, TokenReview + SubjectAccessReview)
//!   servers of `/metrics` and the probes.
//!
//! Wall-clock time is read here only ([`crate::clock`]) and handed to the core as values.

pub mod adapter;
pub mod bucket;
pub mod channel;
pub mod client;
pub mod core;
pub mod execute;
pub mod gate;
pub mod journal_log;
pub mod kubeconfigs;
pub mod lease;
pub mod metrics;
mod process;
pub mod serving;
pub mod streams;
mod tasks;
pub mod throttle;

pub use adapter::{Adapter, AdapterOptions};
pub use client::{client_for_url, client_from_config, client_from_kubeconfig};
pub use core::{Core, InputLog, MemoryLog};
pub use journal_log::SledLog;
pub use metrics::Metrics;
