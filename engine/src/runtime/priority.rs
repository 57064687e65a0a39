//! How urgent a command is: the order commands waiting for a cluster's slots and request
//! tokens are let through, most urgent first.

use crate::command::{Action, Command, ControllerId};
use crate::model::{ConditionStatus, Conditions};
use crate::shared::HEALTH_CHECK_SUCCEEDED;

/// How urgent a request is; the most urgent first when requests queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Writes whose absence holds progress back: finalizer removal, status and conditions.
    Unblocking,
    /// Everything else, watches and lists included.
    Normal,
    /// Many of a kind that can wait their turn: evictions, Events, a health check's reports.
    Bulk,
}

impl Priority {
    pub fn of(command: &Command) -> Priority {
        match &command.action {
            Action::SetCondition { conditions, .. }
                if command.controller == ControllerId::Health && !unhealthy_verdict(conditions) =>
            {
                Priority::Bulk
            }
            Action::PatchStatus { .. } if command.controller == ControllerId::Health => {
                Priority::Bulk
            }
            // A taken-over deletion's hook removal is what lets CAPI's manager go on.
            Action::PatchSpec { .. } if command.controller == ControllerId::Deletion => {
                Priority::Unblocking
            }
            Action::RemoveFinalizer { .. }
            | Action::SetCondition { .. }
            | Action::PatchStatus { .. } => Priority::Unblocking,
            Action::Cordon { .. }
            | Action::DeleteInfrastructure { .. }
            | Action::DeleteBootstrap { .. }
            | Action::DeleteNode { .. }
            | Action::AddFinalizer { .. }
            | Action::PatchSpec { .. }
            | Action::SetOwnerReference { .. }
            | Action::CreateRemediation { .. }
            | Action::DeleteRemediation { .. }
            | Action::DeleteMachine { .. }
            | Action::CreateMachine { .. } => Priority::Normal,
            // It only reports a taken-over deletion's progress.
            Action::Evict { .. } | Action::RecordEvent { .. } | Action::SetOwnCondition { .. } => {
                Priority::Bulk
            }
        }
    }
}

/// A health check's conditions that find the Machine unhealthy: its remediation waits on them.
/// The rest of what a health check writes (a healthy verdict, its own status) only reports, and
/// a fleet's first start writes it for every Machine: at CAPI's 20 requests per second that is
/// 50 s for 1 000 Machines, which must not hold a deletion's writes back.
fn unhealthy_verdict(conditions: &Conditions) -> bool {
    conditions
        .current(HEALTH_CHECK_SUCCEEDED)
        .is_some_and(|c| c.status != ConditionStatus::True)
}
