//! The MHC's own writes: its status counters and target list, its conditions
//! (`RemediationAllowed`, the external remediation ones, `ObjectsReadable`), and the Warning
//! events that go with a short circuit or a spec problem.

use super::memo::MhcMemo;
use super::reconcile::{Decision, SyncCx};
use super::trigger::{self, restricted_message};
use crate::command::{Action, ControllerId, EventType, JsonText, Target};
use crate::controller::Cx;
use crate::model::{ConditionStatus, Severity};
use crate::shared::capi_target;
use crate::shared::conditions::{Edit, List, apply, decided, legacy};
use crate::store::unreadable_message;
use serde_json::{Map, json};
use std::collections::BTreeSet;

const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
const TEMPLATE_AVAILABLE: &str = "ExternalRemediationTemplateAvailable";
const REQUEST_AVAILABLE: &str = "ExternalRemediationRequestAvailable";

/// Warning events to record on the MHC: (reason, message).
type Warnings = Vec<(&'static str, String)>;

impl SyncCx<'_> {
    /// Writes what differs in the MHC's status and conditions, and the event the gate calls
    /// for.
    pub(super) fn sync_mhc(&self, memo: &mut MhcMemo, decision: &Decision, cx: &mut Cx<'_>) {
        let target = capi_target(self.mhc_key.clone(), self.mhc.version);
        self.sync_status(memo, decision, &target, cx);
        let mut edits = Vec::new();
        let events = self.gate_edits(memo, decision, &mut edits);
        self.template_edits(&mut edits);
        self.request_edits(memo, &mut edits);
        edits.push(readable_edit(memo));
        // Judging again: its workload cluster is reached.
        edits.push(Edit::Remove(
            List::Current,
            crate::connection::REACHABLE_CONDITION,
        ));
        let written = apply(&self.mhc.conditions, &edits, self.now);
        let (set, absent) = decided(
            written.as_ref().map_or(&self.mhc.conditions, |(c, _)| c),
            &edits,
        );
        cx.report(crate::decision::Decision::whole(
            ControllerId::Health,
            self.mhc_key.clone(),
            set,
            absent,
        ));
        if let Some((conditions, summary)) = written {
            cx.issue(
                ControllerId::Health,
                Action::SetCondition {
                    target: target.clone(),
                    conditions,
                    summary: summary.clone(),
                },
                format!("MachineHealthCheck {}: {summary}", self.mhc_name()),
            );
        }
        for (reason, message) in events {
            cx.issue(
                ControllerId::Health,
                Action::RecordEvent {
                    regarding: target.clone(),
                    type_: EventType::Warning,
                    reason: reason.to_string(),
                    message: message.clone(),
                },
                message,
            );
        }
    }

    /// Status counters, and the target list when it may have changed.
    fn sync_status(
        &self,
        memo: &mut MhcMemo,
        decision: &Decision,
        target: &Target,
        cx: &mut Cx<'_>,
    ) {
        let mhc = self.mhc;
        let Decision {
            expected, healthy, ..
        } = *decision;
        let to_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        let remediations_allowed = decision.gate.as_ref().map_or(0, |g| g.remediations_allowed);
        let mut status = Map::new();
        if mhc.status.expected_machines != Some(to_i32(expected)) {
            status.insert("expectedMachines".into(), json!(expected));
        }
        if mhc.status.current_healthy != Some(to_i32(healthy)) {
            status.insert("currentHealthy".into(), json!(healthy));
        }
        if mhc.status.remediations_allowed != Some(remediations_allowed) {
            status.insert("remediationsAllowed".into(), json!(remediations_allowed));
        }
        if decision.full
            || !memo.tally.status_targets_match
            || mhc.status.targets.len() != memo.targets.len()
        {
            memo.tally.status_targets_match = mhc
                .status
                .targets
                .iter()
                .map(String::as_str)
                .eq(memo.targets.keys().map(String::as_str));
            if !memo.tally.status_targets_match {
                status.insert(
                    "targets".into(),
                    json!(memo.targets.keys().collect::<Vec<_>>()),
                );
            }
        }
        if status.is_empty() {
            return;
        }
        let summary = format!(
            "expectedMachines={expected} currentHealthy={healthy} remediationsAllowed={remediations_allowed}"
        );
        cx.issue(
            ControllerId::Health,
            Action::PatchStatus {
                target: target.clone(),
                merge: JsonText::from_value(&crate::convert::object([(
                    "status",
                    serde_json::Value::Object(status),
                )])),
                summary: summary.clone(),
            },
            format!("MachineHealthCheck {}: {summary}", self.mhc_name()),
        );
    }

    /// `RemediationAllowed` per the gate; a short circuit, and each invalid field of the spec,
    /// is reported once.
    fn gate_edits(
        &self,
        memo: &mut MhcMemo,
        decision: &Decision,
        edits: &mut Vec<Edit>,
    ) -> Warnings {
        match &decision.gate {
            Ok(g) if g.allowed => {
                edits.push(Edit::set(
                    List::Current,
                    REMEDIATION_ALLOWED,
                    ConditionStatus::True,
                    "RemediationAllowed",
                    "",
                ));
                edits.push(Edit::set(
                    List::Legacy,
                    REMEDIATION_ALLOWED,
                    ConditionStatus::True,
                    "",
                    "",
                ));
                memo.restriction_reported = false;
                memo.problems_reported.clear();
                Vec::new()
            }
            Ok(g) => self
                .restricted(memo, g, decision, edits)
                .into_iter()
                .collect(),
            Err(problems) => {
                push_not_allowed(edits, problems.reason(), &problems.message());
                memo.restriction_reported = false;
                let current: BTreeSet<String> = problems.iter().map(|p| p.message()).collect();
                let new = problems
                    .iter()
                    .map(|p| (p.field.reason(), p.message()))
                    .filter(|(_, message)| !memo.problems_reported.contains(message))
                    .inspect(|(_, message)| tracing::error!(mhc = %self.mhc_key, "{message}"))
                    .collect();
                memo.problems_reported = current;
                new
            }
        }
    }

    /// Short-circuited: too many unhealthy (reported once per spell, when any is listed).
    fn restricted(
        &self,
        memo: &mut MhcMemo,
        gate: &trigger::Gate,
        decision: &Decision,
        edits: &mut Vec<Edit>,
    ) -> Option<(&'static str, String)> {
        let message = restricted_message(&gate.limit, decision.expected, decision.listed);
        push_not_allowed(edits, "TooManyUnhealthy", &message);
        memo.problems_reported.clear();
        if decision.listed == 0 || memo.restriction_reported {
            return None;
        }
        tracing::warn!(mhc = %self.mhc_key, "{message}");
        memo.restriction_reported = true;
        Some(("RemediationRestricted", message))
    }

    /// v1beta1 `ExternalRemediationTemplateAvailable`: False while the template is missing,
    /// True again once it is there (written only if it was ever written).
    fn template_edits(&self, edits: &mut Vec<Edit>) {
        let Some((tref, t)) = self.template else {
            return;
        };
        let mhc = self.mhc;
        match t {
            None => edits.push(Edit::set_with(
                List::Legacy,
                legacy(
                    TEMPLATE_AVAILABLE,
                    ConditionStatus::False,
                    "ExternalRemediationTemplateNotFound",
                    &format!(
                        "Error retrieving remediation template {} {}/{}",
                        tref.kind, mhc.meta.namespace, tref.name
                    ),
                    Severity::Error,
                ),
            )),
            Some(_) if mhc.conditions.legacy(TEMPLATE_AVAILABLE).is_some() => {
                edits.push(Edit::set(
                    List::Legacy,
                    TEMPLATE_AVAILABLE,
                    ConditionStatus::True,
                    "",
                    "",
                ))
            }
            Some(_) => {}
        }
    }

    /// v1beta1 `ExternalRemediationRequestAvailable`: False while a request creation waits for
    /// its retry, True again after.
    fn request_edits(&self, memo: &MhcMemo, edits: &mut Vec<Edit>) {
        match (&memo.request_error, memo.request_retry_at.is_empty()) {
            (Some(err), false) => edits.push(Edit::set_with(
                List::Legacy,
                legacy(
                    REQUEST_AVAILABLE,
                    ConditionStatus::False,
                    "ExternalRemediationRequestCreationFailed",
                    err,
                    Severity::Error,
                ),
            )),
            _ if self.mhc.conditions.legacy(REQUEST_AVAILABLE).is_some() => edits.push(Edit::set(
                List::Legacy,
                REQUEST_AVAILABLE,
                ConditionStatus::True,
                "",
                "",
            )),
            _ => {}
        }
    }
}

/// `RemediationAllowed=False` in both lists.
fn push_not_allowed(edits: &mut Vec<Edit>, reason: &str, message: &str) {
    edits.push(Edit::set(
        List::Current,
        REMEDIATION_ALLOWED,
        ConditionStatus::False,
        reason,
        message,
    ));
    edits.push(Edit::set_with(
        List::Legacy,
        legacy(
            REMEDIATION_ALLOWED,
            ConditionStatus::False,
            reason,
            message,
            Severity::Warning,
        ),
    ));
}

/// `ObjectsReadable=False (ObjectUnreadable)` naming what the checks cannot read while
/// something is unknown; removed (never written True) once everything reads.
fn readable_edit(memo: &MhcMemo) -> Edit {
    let mut unknown = memo.unreadable_reported.iter();
    let Some((key, problem)) = unknown.next() else {
        return Edit::Remove(List::Current, crate::store::OBJECTS_READABLE);
    };
    let more = match unknown.len() {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    let message = format!(
        "{}{more}; the health checks that depend on it wait until it can be read",
        unreadable_message(key, problem)
    );
    Edit::set(
        List::Current,
        crate::store::OBJECTS_READABLE,
        ConditionStatus::False,
        crate::store::OBJECT_UNREADABLE,
        &message,
    )
}
