//! Where a deleting Machine stands: the [`DeletionPhase`] a pass computes once from
//! [`PhaseFacts`], one fact per step of upstream's `reconcileDelete`, in its order.

use super::status::reason;
use serde::{Deserialize, Serialize};

/// What one step of the deletion shows at the start of a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The step does not apply (a wait skipped by its gate, no bootstrap config, no Node).
    Skipped,
    /// The step is over: the pass goes on to the next one.
    Done,
    /// The step waits for the world: the pass stops here.
    Holds,
    /// Not assessed because an earlier step holds (a drain or volume assessment costs a walk
    /// of the Node's pods). Never passed.
    NotReached,
}

impl Step {
    /// Whether the pass stops at this step.
    pub fn stops(self) -> bool {
        match self {
            Step::Skipped | Step::Done => false,
            Step::Holds | Step::NotReached => true,
        }
    }
}

/// One fact per step, in the order the steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseFacts {
    /// The finalizer removal was answered with success.
    pub finalizer_released: bool,
    /// Holds while the workload cluster's cache is needed and not synced.
    pub workload_cache: Step,
    /// Holds while an object the deletion decides on cannot be read.
    pub dependencies_readable: Step,
    pub pre_drain_hooks: Step,
    pub drain: Step,
    pub volume_detach: Step,
    pub pre_terminate_hooks: Step,
    pub infrastructure: Step,
    pub bootstrap: Step,
    pub node: Step,
}

/// The phase of a deleting Machine: the first step that holds. Persisted in the deletion's
/// memo (state version 5): append new phases at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DeletionPhase {
    /// The finalizer is gone (as far as the API answered): nothing is left to do.
    Released,
    WaitingForWorkloadCache,
    WaitingForReadable,
    WaitingForPreDrainHooks,
    Draining,
    WaitingForVolumeDetach,
    WaitingForPreTerminateHooks,
    DeletingInfrastructure,
    DeletingBootstrap,
    DeletingNode,
    /// Every step is over: `DeletionCompleted` is written, then the finalizer removed.
    RemovingFinalizer,
}

impl DeletionPhase {
    /// The phases in the order a deletion goes through them.
    #[cfg(test)]
    pub const ALL: [DeletionPhase; 11] = [
        DeletionPhase::Released,
        DeletionPhase::WaitingForWorkloadCache,
        DeletionPhase::WaitingForReadable,
        DeletionPhase::WaitingForPreDrainHooks,
        DeletionPhase::Draining,
        DeletionPhase::WaitingForVolumeDetach,
        DeletionPhase::WaitingForPreTerminateHooks,
        DeletionPhase::DeletingInfrastructure,
        DeletionPhase::DeletingBootstrap,
        DeletionPhase::DeletingNode,
        DeletionPhase::RemovingFinalizer,
    ];

    /// The Warning event reason for this phase when it lasts too long; phases that are not
    /// waits have none.
    pub fn stall_event(self) -> Option<&'static str> {
        Some(match self {
            DeletionPhase::WaitingForPreDrainHooks => "PreDrainHookWaiting",
            DeletionPhase::Draining => "DrainStalled",
            DeletionPhase::WaitingForVolumeDetach => "VolumeDetachStalled",
            DeletionPhase::WaitingForPreTerminateHooks => "PreTerminateHookWaiting",
            DeletionPhase::DeletingInfrastructure => "InfrastructureDeletionStalled",
            DeletionPhase::DeletingBootstrap => "BootstrapDeletionStalled",
            DeletionPhase::Released
            | DeletionPhase::WaitingForWorkloadCache
            | DeletionPhase::WaitingForReadable
            | DeletionPhase::DeletingNode
            | DeletionPhase::RemovingFinalizer => return None,
        })
    }

    /// The phase a state-version-4 memo meant by the `Deleting` reason it kept; `None` for
    /// `Deleting` itself, which several phases that never stall leave in place.
    pub fn of_v4_reason(deleting_reason: &str) -> Option<DeletionPhase> {
        Some(match deleting_reason {
            reason::WAITING_FOR_PRE_DRAIN_HOOK => DeletionPhase::WaitingForPreDrainHooks,
            reason::DRAINING_NODE => DeletionPhase::Draining,
            reason::WAITING_FOR_VOLUME_DETACH => DeletionPhase::WaitingForVolumeDetach,
            reason::WAITING_FOR_PRE_TERMINATE_HOOK => DeletionPhase::WaitingForPreTerminateHooks,
            reason::WAITING_FOR_INFRASTRUCTURE_DELETION => DeletionPhase::DeletingInfrastructure,
            reason::WAITING_FOR_BOOTSTRAP_DELETION => DeletionPhase::DeletingBootstrap,
            reason::DELETING_NODE => DeletionPhase::DeletingNode,
            reason::DELETION_COMPLETED => DeletionPhase::RemovingFinalizer,
            reason::OBJECT_UNREADABLE => DeletionPhase::WaitingForReadable,
            reason::WORKLOAD_CLUSTER_UNREACHABLE => DeletionPhase::WaitingForWorkloadCache,
            _ => return None,
        })
    }

    pub fn of(f: &PhaseFacts) -> DeletionPhase {
        if f.finalizer_released {
            return DeletionPhase::Released;
        }
        let steps = [
            (f.workload_cache, DeletionPhase::WaitingForWorkloadCache),
            (f.dependencies_readable, DeletionPhase::WaitingForReadable),
            (f.pre_drain_hooks, DeletionPhase::WaitingForPreDrainHooks),
            (f.drain, DeletionPhase::Draining),
            (f.volume_detach, DeletionPhase::WaitingForVolumeDetach),
            (
                f.pre_terminate_hooks,
                DeletionPhase::WaitingForPreTerminateHooks,
            ),
            (f.infrastructure, DeletionPhase::DeletingInfrastructure),
            (f.bootstrap, DeletionPhase::DeletingBootstrap),
            (f.node, DeletionPhase::DeletingNode),
        ];
        steps
            .into_iter()
            .find(|(step, _)| step.stops())
            .map_or(DeletionPhase::RemovingFinalizer, |(_, phase)| phase)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts of a Machine whose every step is over.
    fn all_done() -> PhaseFacts {
        PhaseFacts {
            finalizer_released: false,
            workload_cache: Step::Done,
            dependencies_readable: Step::Done,
            pre_drain_hooks: Step::Done,
            drain: Step::Done,
            volume_detach: Step::Done,
            pre_terminate_hooks: Step::Done,
            infrastructure: Step::Done,
            bootstrap: Step::Done,
            node: Step::Done,
        }
    }

    /// Picks one step's field out of the facts.
    type Field = fn(&mut PhaseFacts) -> &mut Step;

    /// The step fields in order, each with the phase it holds the Machine in.
    fn fields() -> [(Field, DeletionPhase); 9] {
        [
            (
                |f| &mut f.workload_cache,
                DeletionPhase::WaitingForWorkloadCache,
            ),
            (
                |f| &mut f.dependencies_readable,
                DeletionPhase::WaitingForReadable,
            ),
            (
                |f| &mut f.pre_drain_hooks,
                DeletionPhase::WaitingForPreDrainHooks,
            ),
            (|f| &mut f.drain, DeletionPhase::Draining),
            (
                |f| &mut f.volume_detach,
                DeletionPhase::WaitingForVolumeDetach,
            ),
            (
                |f| &mut f.pre_terminate_hooks,
                DeletionPhase::WaitingForPreTerminateHooks,
            ),
            (
                |f| &mut f.infrastructure,
                DeletionPhase::DeletingInfrastructure,
            ),
            (|f| &mut f.bootstrap, DeletionPhase::DeletingBootstrap),
            (|f| &mut f.node, DeletionPhase::DeletingNode),
        ]
    }

    #[test]
    fn every_phase_is_reached_from_some_facts() {
        let mut reached = std::collections::BTreeSet::new();
        reached.insert(DeletionPhase::of(&all_done()));
        reached.insert(DeletionPhase::of(&PhaseFacts {
            finalizer_released: true,
            ..all_done()
        }));
        for (field, phase) in fields() {
            let mut f = all_done();
            *field(&mut f) = Step::Holds;
            assert_eq!(DeletionPhase::of(&f), phase);
            reached.insert(phase);
        }
        assert_eq!(reached, DeletionPhase::ALL.into_iter().collect());
    }

    #[test]
    fn the_phase_is_the_first_step_that_holds_whatever_follows() {
        // Exhaustive over the four values of three consecutive steps (the others done), at
        // every position: skipped and done steps are passed, the first holding or unassessed
        // one is the phase, and nothing after it matters.
        let values = [Step::Skipped, Step::Done, Step::Holds, Step::NotReached];
        let fields = fields();
        for start in 0..fields.len() - 2 {
            for a in values {
                for b in values {
                    for c in values {
                        let mut f = all_done();
                        let window = [a, b, c];
                        for (i, v) in window.iter().enumerate() {
                            *(fields[start + i].0)(&mut f) = *v;
                        }
                        let expected = window
                            .iter()
                            .position(|s| matches!(s, Step::Holds | Step::NotReached))
                            .map_or(DeletionPhase::RemovingFinalizer, |i| fields[start + i].1);
                        assert_eq!(DeletionPhase::of(&f), expected, "{window:?} at {start}");
                        let released = PhaseFacts {
                            finalizer_released: true,
                            ..f
                        };
                        assert_eq!(DeletionPhase::of(&released), DeletionPhase::Released);
                    }
                }
            }
        }
    }
}
