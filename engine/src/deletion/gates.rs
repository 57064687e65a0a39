//! The decisions that gate deletion phases, each an exhaustive match over a small fact struct:
//! `isDeleteNodeAllowed`, `isNodeDrainAllowed` / `isNodeVolumeDetachingAllowed`, the inclusive
//! timeout rule, and whether a failed Node deletion is tried again.

pub use crate::node_deletion::{
    MACHINE_NODE_DELETION_RETRY_INTERVAL, NODE_DELETION_RETRY_WINDOW, NODE_DELETION_TIMEOUT_DEFAULT,
};
use crate::time::{Duration, Timestamp};
use std::fmt;

/// What is known about the Cluster's control plane object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlPlaneFact {
    /// No `spec.controlPlaneRef`, or the object is not found: the check is skipped.
    Absent,
    Deleting,
    ExternallyManaged,
    Managed,
}

/// The facts `isDeleteNodeAllowed` looks at, in the order it looks at them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeDeletionFacts {
    pub cluster_deleting: bool,
    /// `status.nodeRef` is set, or a Node was found by providerID.
    pub has_node_ref: bool,
    pub control_plane: ControlPlaneFact,
    /// Control-plane Machines of the Cluster without a deletionTimestamp.
    pub active_control_plane_machines: usize,
}

/// Why node operations (pre-drain hooks, drain, volume wait, Node deletion) are skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeDeletionBlocked {
    ClusterIsBeingDeleted,
    NilNodeRef,
    ControlPlaneIsBeingDeleted,
    NoControlPlaneNodes,
}

impl fmt::Display for NodeDeletionBlocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeDeletionBlocked::ClusterIsBeingDeleted => "cluster is being deleted",
            NodeDeletionBlocked::NilNodeRef => "noderef is nil",
            NodeDeletionBlocked::ControlPlaneIsBeingDeleted => "control plane is being deleted",
            NodeDeletionBlocked::NoControlPlaneNodes => "no control plane members",
        })
    }
}

/// Upstream's `isDeleteNodeAllowed`.
pub fn is_delete_node_allowed(f: &NodeDeletionFacts) -> Result<(), NodeDeletionBlocked> {
    if f.cluster_deleting {
        return Err(NodeDeletionBlocked::ClusterIsBeingDeleted);
    }
    if !f.has_node_ref {
        return Err(NodeDeletionBlocked::NilNodeRef);
    }
    match f.control_plane {
        ControlPlaneFact::Deleting => return Err(NodeDeletionBlocked::ControlPlaneIsBeingDeleted),
        ControlPlaneFact::ExternallyManaged => return Ok(()),
        ControlPlaneFact::Absent | ControlPlaneFact::Managed => {}
    }
    if f.active_control_plane_machines == 0 {
        return Err(NodeDeletionBlocked::NoControlPlaneNodes);
    }
    Ok(())
}

/// Whether a drain or volume-detach timeout has expired: only with a start time and a timeout
/// of at least one whole second (v1beta1 durations are truncated to seconds, as conversion
/// does), and then inclusively (`now - start >= timeout`).
pub fn timeout_exceeded(
    start: Option<Timestamp>,
    timeout: Option<Duration>,
    now: Timestamp,
) -> bool {
    match deadline(start, timeout) {
        Some(at) => now >= at,
        None => false,
    }
}

/// When the timeout expires, if it can.
pub fn deadline(start: Option<Timestamp>, timeout: Option<Duration>) -> Option<Timestamp> {
    let seconds = timeout.map_or(0, Duration::as_secs);
    match start {
        Some(start) if seconds > 0 => Some(start.saturating_add(Duration::from_secs(seconds))),
        _ => None,
    }
}

/// The facts behind `isNodeDrainAllowed` and `isNodeVolumeDetachingAllowed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitGateFacts {
    /// `exclude-node-draining` / `exclude-wait-for-node-volume-detach` is present.
    pub excluded: bool,
    pub pre_terminate_hooks_started: bool,
    pub infrastructure: InfrastructureFact,
    pub timed_out: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfrastructureFact {
    Present,
    Deleting,
    Gone,
}

/// Why a drain or volume-detach wait is skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitSkipped {
    Excluded,
    PreTerminateHooksStarted,
    InfrastructureGone,
    InfrastructureDeleting,
    TimedOut,
}

impl fmt::Display for WaitSkipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WaitSkipped::Excluded => "excluded by annotation",
            WaitSkipped::PreTerminateHooksStarted => "pre-terminate hooks already started",
            WaitSkipped::InfrastructureGone => "InfrastructureMachine is gone",
            WaitSkipped::InfrastructureDeleting => "InfrastructureMachine is being deleted",
            WaitSkipped::TimedOut => "timeout exceeded",
        })
    }
}

/// `isNodeDrainAllowed` / `isNodeVolumeDetachingAllowed`.
pub fn wait_allowed(f: &WaitGateFacts) -> Result<(), WaitSkipped> {
    if f.excluded {
        return Err(WaitSkipped::Excluded);
    }
    if f.pre_terminate_hooks_started {
        return Err(WaitSkipped::PreTerminateHooksStarted);
    }
    match f.infrastructure {
        InfrastructureFact::Gone => return Err(WaitSkipped::InfrastructureGone),
        InfrastructureFact::Deleting => return Err(WaitSkipped::InfrastructureDeleting),
        InfrastructureFact::Present => {}
    }
    if f.timed_out {
        return Err(WaitSkipped::TimedOut);
    }
    Ok(())
}

/// After a failed Node deletion: whether to keep trying (Part 1 decisions 2 and 10). Attempts
/// continue within 10 s of the first one, and after that while `nodeDeletionTimeout` (counted
/// from the Machine's deletionTimestamp; unset = 10 s, 0 = forever) has not expired.
pub fn keep_deleting_node(
    first_attempt: Timestamp,
    machine_deleted_at: Timestamp,
    node_deletion_timeout: Option<Duration>,
    now: Timestamp,
) -> bool {
    if now < first_attempt.saturating_add(NODE_DELETION_RETRY_WINDOW) {
        return true;
    }
    let timeout = node_deletion_timeout.unwrap_or(NODE_DELETION_TIMEOUT_DEFAULT);
    match timeout.as_millis() {
        // Negative is an invalid spec (decision 14): nothing is given up on its account.
        ..=0 => true,
        _ => now < machine_deleted_at.saturating_add(timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(
        cluster_deleting: bool,
        has_node_ref: bool,
        control_plane: ControlPlaneFact,
        active: usize,
    ) -> NodeDeletionFacts {
        NodeDeletionFacts {
            cluster_deleting,
            has_node_ref,
            control_plane,
            active_control_plane_machines: active,
        }
    }

    #[test]
    fn is_delete_node_allowed_table() {
        use ControlPlaneFact::*;
        use NodeDeletionBlocked::*;
        let cases = [
            (
                "cluster deleting wins",
                facts(true, false, Deleting, 0),
                Err(ClusterIsBeingDeleted),
            ),
            (
                "no nodeRef",
                facts(false, false, Managed, 3),
                Err(NilNodeRef),
            ),
            (
                "control plane deleting",
                facts(false, true, Deleting, 3),
                Err(ControlPlaneIsBeingDeleted),
            ),
            (
                "externally managed, no machines",
                facts(false, true, ExternallyManaged, 0),
                Ok(()),
            ),
            (
                "no active control-plane machine",
                facts(false, true, Managed, 0),
                Err(NoControlPlaneNodes),
            ),
            (
                "control plane object not found: counted",
                facts(false, true, Absent, 0),
                Err(NoControlPlaneNodes),
            ),
            (
                "one active control-plane machine",
                facts(false, true, Managed, 1),
                Ok(()),
            ),
            (
                "no controlPlaneRef, machines exist",
                facts(false, true, Absent, 2),
                Ok(()),
            ),
        ];
        for (name, f, want) in cases {
            assert_eq!(is_delete_node_allowed(&f), want, "{name}");
        }
    }

    #[test]
    fn timeouts_are_inclusive_and_zero_or_unset_means_no_limit() {
        let start = Some(Timestamp(10_000));
        let t = |s: i64| Some(Duration::from_secs(s));
        let cases = [
            (start, t(5), 14_999, false),
            (start, t(5), 15_000, true), // inclusive
            (start, t(0), 1_000_000, false),
            (start, None, 1_000_000, false),
            (None, t(5), 1_000_000, false), // never started
            (start, Some(Duration::from_millis(1_500)), 11_000, true), // v1beta1 1.5s -> 1s
            (start, Some(Duration::from_millis(900)), 1_000_000, false), // truncates to 0
        ];
        for (start, timeout, now, want) in cases {
            assert_eq!(
                timeout_exceeded(start, timeout, Timestamp(now)),
                want,
                "start {start:?} timeout {timeout:?} now {now}"
            );
        }
    }

    #[test]
    fn drain_and_volume_gates_table() {
        use InfrastructureFact::*;
        let base = WaitGateFacts {
            excluded: false,
            pre_terminate_hooks_started: false,
            infrastructure: Present,
            timed_out: false,
        };
        let cases = [
            (base, Ok(())),
            (
                WaitGateFacts {
                    excluded: true,
                    ..base
                },
                Err(WaitSkipped::Excluded),
            ),
            (
                WaitGateFacts {
                    pre_terminate_hooks_started: true,
                    ..base
                },
                Err(WaitSkipped::PreTerminateHooksStarted),
            ),
            (
                WaitGateFacts {
                    infrastructure: Gone,
                    ..base
                },
                Err(WaitSkipped::InfrastructureGone),
            ),
            (
                WaitGateFacts {
                    infrastructure: Deleting,
                    ..base
                },
                Err(WaitSkipped::InfrastructureDeleting),
            ),
            (
                WaitGateFacts {
                    timed_out: true,
                    ..base
                },
                Err(WaitSkipped::TimedOut),
            ),
        ];
        for (f, want) in cases {
            assert_eq!(wait_allowed(&f), want, "{f:?}");
        }
    }

    #[test]
    fn node_deletion_timeouts_table() {
        let deleted_at = Timestamp(0);
        let s = |x: i64| Timestamp(x * 1000);
        let d = |x: i64| Some(Duration::from_secs(x));
        let cases = [
            // (first attempt, timeout, now, keep trying)
            ("inside the 10s retry window", s(100), d(10), s(109), true),
            (
                "window over, default timeout long expired",
                s(100),
                None,
                s(110),
                false,
            ),
            (
                "window over, explicit 10s expired",
                s(100),
                d(10),
                s(110),
                false,
            ),
            ("zero means forever", s(100), d(0), s(100_000), true),
            ("long timeout not yet expired", s(100), d(600), s(599), true),
            ("long timeout expired", s(100), d(600), s(600), false),
            (
                "fast infra: default timeout still running",
                s(3),
                None,
                s(9),
                true,
            ),
        ];
        for (name, first, timeout, now, want) in cases {
            assert_eq!(
                keep_deleting_node(first, deleted_at, timeout, now),
                want,
                "{name}"
            );
        }
    }
}
