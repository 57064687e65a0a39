//! The MachineHealthCheck's timers: an MHC wakes at its earliest target deadline, or to look
//! again at a workload cache that has not synced.

use crate::command::ControllerId;
use crate::timer::TimerKind;
use serde::{Deserialize, Serialize};

/// Why an MHC asked to be woken (the closed set of health timers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HealthTimer {
    /// A target without a Node reaches `nodeStartupTimeout`.
    NodeStartupTimeout,
    /// An unhealthy condition of a target (or its Node) has held for its timeout.
    UnhealthyConditionTimeout,
    /// A refused remediation request may be created again.
    RemediationRequestRetry,
    /// The workload cluster's cache has not synced: look again.
    WorkloadSyncRecheck,
}

impl TimerKind for HealthTimer {
    fn name(self) -> &'static str {
        match self {
            HealthTimer::NodeStartupTimeout => "NodeStartupTimeout",
            HealthTimer::UnhealthyConditionTimeout => "UnhealthyConditionTimeout",
            HealthTimer::RemediationRequestRetry => "RemediationRequestRetry",
            HealthTimer::WorkloadSyncRecheck => "WorkloadSyncRecheck",
        }
    }

    fn controller(self) -> ControllerId {
        ControllerId::Health
    }
}
