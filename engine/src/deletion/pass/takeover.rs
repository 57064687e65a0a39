//! A deletion taken over beside CAPI's manager ([`crate::ownership`]): the same steps, acted on
//! only while CAPI's manager waits at this controller's hooks, handed back through them, and
//! told in this controller's own condition.

use super::{HandingBack, Pass, PhaseFacts};
use crate::command::Action;
use crate::deletion::DeletionPhase;
use crate::deletion::gates::NodeDeletionBlocked;
use crate::deletion::pass::assess::Findings;
use crate::deletion::status::{DELETING, reason};
use crate::fight::HandBackWrite;
use crate::model::{Condition, ConditionStatus, DeletionTimes, Machine, set_condition};
use crate::ownership::{
    CAPI_WAITING_FOR_PRE_DRAIN_HOOK, CAPI_WAITING_FOR_PRE_TERMINATE_HOOK, HANDED_BACK_EVENT,
    OWN_CONDITION, OWN_PRE_DRAIN_HOOK, OWN_PRE_TERMINATE_HOOK, OwnHooks, hooks_patch, own_reason,
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
        if let Some(note) = self.handing_back_note() {
            let message = format!("Machine {}: {note}", self.m.meta.name);
            self.event(
                crate::command::EventType::Warning,
                HANDED_BACK_EVENT,
                message,
                HANDED_BACK_EVENT.to_string(),
            );
        }
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

    /// What this controller's condition adds while it hands this deletion back.
    fn handing_back_note(&self) -> Option<String> {
        Some(match self.handing_back.as_ref()? {
            HandingBack::Release(release) => format!(
                "Cluster API's manager runs {release}, a release this build of the controller does not support: this controller takes no new Machine; it finishes this deletion's steps (never handing a Node back half drained) and hands it back with its last hook"
            ),
            HandingBack::Fight(why) => format!(
                "another writer keeps undoing this controller's writes to it ({why}): this controller finishes this deletion's steps (never handing a Node back half drained) and hands it back with its last hook; meanwhile only the writes that hand it back reach it"
            ),
        })
    }

    /// Removes one of this controller's hooks: CAPI's manager takes the deletion on from there.
    /// The last one takes the annotation that names their holder with it.
    fn hand_back(&mut self, hook: Hook, reason: &'static str, message: String) {
        let has = OwnHooks::of(&self.m.meta);
        let (want, hook) = match hook {
            Hook::PreDrain => (
                OwnHooks {
                    pre_drain: false,
                    ..has
                },
                OWN_PRE_DRAIN_HOOK,
            ),
            Hook::PreTerminate => (
                OwnHooks {
                    pre_terminate: false,
                    ..has
                },
                OWN_PRE_TERMINATE_HOOK,
            ),
        };
        self.set_deleting(reason, message.clone());
        let Some(patch) = hooks_patch(&self.m.meta, want) else {
            return;
        };
        self.plan.push(
            Action::PatchSpec {
                target: self.target.clone(),
                merge: crate::command::JsonText::from_value(&patch.merge),
                summary: patch.summary,
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
        let message = match self.handing_back_note() {
            Some(note) => format!("{message}; {note}"),
            None => message.clone(),
        };
        let mut c = Condition::new(OWN_CONDITION, ConditionStatus::True, reason, &message);
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
        let action = Action::SetOwnCondition {
            target: self.target.clone(),
            conditions: desired.clone(),
            resource_version: self.m.meta.resource_version,
            summary,
        };
        // Fought over, the condition that tells a hook handed back passes the hold with it.
        let fought = matches!(self.handing_back, Some(HandingBack::Fight(_)));
        let giving_back = match *reason {
            own_reason::DRAIN_HANDED_BACK if fought => Some(HandBackWrite::PreDrainHookTold),
            own_reason::RELEASED_TO_CLUSTER_API if fought => Some(HandBackWrite::LastHookTold),
            _ => None,
        };
        // Ahead of the planned writes: they name no resourceVersion, and this one would find
        // theirs.
        let issued = match giving_back {
            Some(write) => {
                self.cx
                    .issue_giving_back(ControllerId::Deletion, action, message, write)
            }
            None => self.cx.issue(ControllerId::Deletion, action, message),
        };
        if let crate::controller::Issued::Queued(_) = issued {
            self.tracked.memo.pending_conditions =
                Some(crate::deletion::Pending::new(desired.clone()));
            self.base_conditions = std::borrow::Cow::Owned(desired);
        }
    }
}
