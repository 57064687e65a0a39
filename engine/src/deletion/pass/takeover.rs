//! A deletion taken over beside CAPI's manager ([`crate::ownership`]): the same steps, acted on
//! only while CAPI's manager waits at this controller's hooks, handed back through them, and
//! told in this controller's own condition.

use super::{Pass, PhaseFacts};
use crate::command::Action;
use crate::deletion::DeletionPhase;
use crate::deletion::gates::NodeDeletionBlocked;
use crate::deletion::pass::assess::Findings;
use crate::deletion::status::{DELETING, reason};
use crate::model::{Condition, ConditionStatus, DeletionTimes, Machine, set_condition};
use crate::ownership::{
    CAPI_WAITING_FOR_PRE_DRAIN_HOOK, CAPI_WAITING_FOR_PRE_TERMINATE_HOOK, OWN_CONDITION,
    OWN_PRE_DRAIN_HOOK, OWN_PRE_TERMINATE_HOOK, OwnHooks, hooks_patch, own_reason,
};
use crate::{ActionKind, ControllerId};

/// One of this controller's two hooks.
enum Hook {
    PreDrain,
    PreTerminate,
}

/// The reason of CAPI's own `Deleting` condition on the Machine.
fn capi_deleting_reason(m: &Machine) -> Option<&str> {
    m.conditions.current(DELETING).map(|c| c.reason.as_str())
}

/// The start times of a taken-over deletion: those it chose, and else the drain's from its own
/// condition's transition to `DrainingNode`, so a state rebuilt without them finds it too.
pub(super) fn own_start_times(m: &Machine, chosen: &DeletionTimes) -> DeletionTimes {
    let own = m.conditions.current(OWN_CONDITION);
    DeletionTimes {
        node_drain_start: chosen.node_drain_start.or_else(|| {
            own.filter(|c| c.reason == reason::DRAINING_NODE)
                .and_then(|c| c.last_transition_time)
        }),
        ..chosen.clone()
    }
}

impl Pass<'_, '_> {
    pub(super) fn act_taken_over(
        &mut self,
        phase: DeletionPhase,
        facts: &PhaseFacts,
        found: Findings<'_>,
    ) {
        let hooks = OwnHooks::of(&self.m.meta);
        let capi = capi_deleting_reason(self.m);
        let drain_over = phase > DeletionPhase::WaitingForVolumeDetach;
        match capi {
            Some(CAPI_WAITING_FOR_PRE_DRAIN_HOOK | CAPI_WAITING_FOR_PRE_TERMINATE_HOOK)
                if hooks.pre_drain =>
            {
                if drain_over {
                    self.hand_back(Hook::PreDrain, own_reason::DRAIN_HANDED_BACK, format!(
                        "Drain and volume detach over ({}): removing hook {OWN_PRE_DRAIN_HOOK}, so Cluster API's manager goes on to the pre-terminate hooks",
                        found.node_outcome()
                    ));
                } else {
                    self.stop_after_volumes = true;
                    self.run_steps(facts, found);
                }
            }
            Some(CAPI_WAITING_FOR_PRE_TERMINATE_HOOK) if hooks.pre_terminate => {
                let deleted = match &found.node {
                    Ok(_) => "Infrastructure, bootstrap and Node deleted".to_string(),
                    Err(NodeDeletionBlocked::NilNodeRef) => {
                        "Infrastructure and bootstrap deleted (no Node)".to_string()
                    }
                    Err(blocked) => format!(
                        "Infrastructure and bootstrap deleted, the Node left alone ({blocked})"
                    ),
                };
                self.run_steps(facts, found);
                if phase == DeletionPhase::RemovingFinalizer {
                    self.hand_back(Hook::PreTerminate, own_reason::RELEASED_TO_CLUSTER_API, format!(
                        "{deleted}: removing hook {OWN_PRE_TERMINATE_HOOK}, so Cluster API's manager removes the finalizer"
                    ));
                }
            }
            other => {
                let theirs = other.unwrap_or("not set");
                self.set_deleting(
                    own_reason::WAITING_FOR_CLUSTER_API,
                    format!(
                        "Waiting for Cluster API's manager to reach this controller's {} hook (its Deleting reason: {theirs})",
                        if hooks.pre_drain { "pre-drain" } else { "pre-terminate" }
                    ),
                );
            }
        }
    }

    /// Removes one of this controller's hooks: CAPI's manager takes the deletion on from there.
    fn hand_back(&mut self, hook: Hook, reason: &'static str, message: String) {
        let (patch, hook) = match hook {
            Hook::PreDrain => (hooks_patch(Some(false), None), OWN_PRE_DRAIN_HOOK),
            Hook::PreTerminate => (hooks_patch(None, Some(false)), OWN_PRE_TERMINATE_HOOK),
        };
        self.set_deleting(reason, message.clone());
        self.plan.push(
            Action::PatchSpec {
                target: self.target.clone(),
                merge: crate::command::JsonText::from_value(&patch),
                summary: format!("remove annotation {hook}"),
            },
            message,
            super::plan::Record::HookRemoval(hook),
        );
    }

    /// Writes this controller's own condition where it differs from what is observed; the
    /// rest of the lists as read, with their resourceVersion as a precondition, so CAPI's
    /// manager's writes are never overwritten.
    pub(super) fn flush_own_condition(&mut self) {
        let Some((reason, message)) = &self.deleting else {
            return;
        };
        let mut desired = crate::model::Conditions::clone(&self.base_conditions);
        let before = desired.current(OWN_CONDITION).map(|c| c.reason.clone());
        let mut c = Condition::new(OWN_CONDITION, ConditionStatus::True, reason, message);
        // A new reason is a new transition: the drain's start is found again from it.
        if before.as_deref() != Some(*reason) {
            desired.current.retain(|c| c.type_ != OWN_CONDITION);
            c.last_transition_time = None;
        }
        set_condition(&mut desired.current, c, self.now);
        if let Some(own) = desired.current(OWN_CONDITION) {
            let decided = crate::model::Conditions {
                current: vec![own.clone()],
                legacy: Vec::new(),
            };
            self.cx
                .decide(ControllerId::Deletion, self.key.clone(), decided);
        }
        if desired == *self.base_conditions
            || self.cx.wait_if_in_flight(
                ControllerId::Deletion,
                ActionKind::SetOwnCondition,
                self.key,
            )
        {
            return;
        }
        let summary = format!("{OWN_CONDITION}=True ({reason})");
        // Ahead of the planned writes: they name no resourceVersion, and this one would find
        // theirs.
        let issued = self.cx.issue(
            ControllerId::Deletion,
            Action::SetOwnCondition {
                target: self.target.clone(),
                conditions: desired.clone(),
                resource_version: self.m.meta.resource_version,
                summary,
            },
            message.clone(),
        );
        if let crate::controller::Issued::Queued(_) = issued {
            self.tracked.memo.pending_conditions =
                Some(crate::deletion::Pending::new(desired.clone()));
            self.base_conditions = std::borrow::Cow::Owned(desired);
        }
    }
}
