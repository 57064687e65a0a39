//! The MHC's writes to its targets: `HealthCheckSucceeded` and the failed conditions, the
//! `MachineMarkedUnhealthy` event, and remediation (§2.5): `OwnerRemediated=False` for the
//! owner to act on, or an external remediation request (created while unhealthy, deleted once
//! healthy again).

use super::judge::Evaluated;
use super::memo::MhcMemo;
use super::reconcile::SyncCx;
use super::verdict::{TargetClass, failed_conditions};
use crate::command::{Action, ControllerId, EventType, Target};
use crate::controller::{Cx, Issued};
use crate::model::{ConditionStatus, Conditions, Kind, Machine, Object, ObjectKey, Severity};
use crate::remediation::external::{request_key, request_object, request_target};
use crate::shared::conditions::{Edit, List, apply, legacy};
use crate::shared::{EXTERNALLY_REMEDIATED, HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED, capi_target};

/// What one target gets written: condition edits and other actions, each with why.
#[derive(Default)]
struct Writes {
    edits: Vec<Edit>,
    actions: Vec<(Action, String)>,
}

fn is_false(c: Option<&crate::model::Condition>) -> bool {
    c.is_some_and(|c| c.status == ConditionStatus::False)
}

/// Whether a healthy target's `HealthCheckSucceeded` is already written (checked in place so
/// a full evaluation of healthy targets does not allocate).
pub(super) fn healthy_written(c: &Conditions) -> bool {
    let ok = |x: Option<&crate::model::Condition>, reason: &str| {
        x.is_some_and(|x| {
            x.status == ConditionStatus::True
                && x.reason == reason
                && x.message.is_empty()
                && x.severity == Severity::None
        })
    };
    ok(c.current(HEALTH_CHECK_SUCCEEDED), "HealthCheckSucceeded")
        && ok(c.legacy(HEALTH_CHECK_SUCCEEDED), "")
}

impl SyncCx<'_> {
    /// Writes what one judged target needs; a write that cannot be issued now leaves the
    /// target dirty, so the next reconcile tries again.
    pub(super) fn sync_target(&self, e: &Evaluated<'_>, memo: &mut MhcMemo, cx: &mut Cx<'_>) {
        let m = e.machine;
        let name = m.meta.name.as_str();
        let mut writes = Writes::default();
        let mut mark = false;
        // Fast path: nothing to write for a target that is not judged, or healthy and already
        // marked so (most of a fleet, most of the time).
        let why = match e.class {
            TargetClass::Pending | TargetClass::Unevaluated => return,
            TargetClass::Healthy if self.template.is_none() && healthy_written(&m.conditions) => {
                memo.set_written(name, true);
                return;
            }
            TargetClass::Healthy => self.healthy(m, memo, &mut writes),
            TargetClass::Unhealthy => {
                let why = self.unhealthy(e, memo, &mut writes);
                mark = self.allowed && !memo.is_marked(name);
                why
            }
        };
        let mkey = ObjectKey::management(Kind::Machine, &m.meta.namespace, name);
        if let Some((conditions, summary)) = apply(&m.conditions, &writes.edits, self.now) {
            let target = capi_target(mkey.clone(), m.version);
            // An adopted MHC's Machines are still CAPI's, which writes their other conditions:
            // the lists as read, with their resourceVersion as a precondition.
            let guard =
                crate::ownership::adopted(&self.mhc.meta).then_some(m.meta.resource_version);
            let action = Action::conditions_write(target, conditions, summary, guard);
            let issued = cx.issue(ControllerId::Health, action, why);
            if !matches!(issued, Issued::Queued(_)) {
                memo.mark_dirty(name);
            }
        }
        for (action, why) in writes.actions {
            if !matches!(
                cx.issue(ControllerId::Health, action, why),
                Issued::Queued(_)
            ) {
                memo.mark_dirty(name);
            }
        }
        if mark {
            self.mark_unhealthy(m, mkey, cx);
            memo.set_marked(name);
        }
    }

    /// A healthy target: `HealthCheckSucceeded=True`, and its remediation request withdrawn.
    fn healthy(&self, m: &Machine, memo: &mut MhcMemo, writes: &mut Writes) -> String {
        let machine = format!("{}/{}", m.meta.namespace, m.meta.name);
        if !healthy_written(&m.conditions) {
            writes.edits.push(Edit::set(
                List::Current,
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::True,
                "HealthCheckSucceeded",
                "",
            ));
            writes.edits.push(Edit::set(
                List::Legacy,
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::True,
                "",
                "",
            ));
        }
        if let Some((tref, _)) = self.template {
            let rkey = request_key(tref, m);
            let request = self.store.get(&rkey);
            if request.is_none() {
                memo.requests_deleted.remove(&m.meta.name);
            }
            if let Some(Object::External(r)) = request
                && !r.meta.is_deleting()
                && !memo.requests_deleted.contains(&m.meta.name)
            {
                writes.actions.push((
                    Action::DeleteRemediation {
                        target: Target {
                            key: rkey,
                            api_version: r.api_version.clone(),
                        },
                    },
                    format!("Machine {machine} is healthy again; its remediation request is no longer needed"),
                ));
            }
        }
        format!(
            "Machine {machine} passed MachineHealthCheck {}",
            self.mhc_name()
        )
    }

    /// An unhealthy target: the failed conditions, and remediation when it is allowed.
    fn unhealthy(&self, e: &Evaluated<'_>, memo: &mut MhcMemo, writes: &mut Writes) -> String {
        let m = e.machine;
        let machine = format!("{}/{}", m.meta.namespace, m.meta.name);
        let (current, legacy_c) = failed_conditions(&e.verdict.findings);
        writes.edits.push(Edit::set_with(List::Current, current));
        writes.edits.push(Edit::set_with(List::Legacy, legacy_c));
        let first = e
            .verdict
            .findings
            .first()
            .map(|f| f.message())
            .unwrap_or_default();
        if !self.allowed {
            return format!(
                "Machine {machine} is unhealthy ({first}); remediation by MachineHealthCheck {} is not allowed now",
                self.mhc_name()
            );
        }
        match self.template {
            None => owner_remediation(m, &mut writes.edits),
            Some((tref, None)) => {
                let message = format!(
                    "Error retrieving remediation template {} {}/{}",
                    tref.kind, self.mhc.meta.namespace, tref.name
                );
                tracing::warn!(mhc = %self.mhc_key, machine, "{message}");
                writes.edits.push(Edit::set(
                    List::Current,
                    EXTERNALLY_REMEDIATED,
                    ConditionStatus::False,
                    "RemediationTemplateNotFound",
                    &message,
                ));
            }
            Some((tref, Some(template))) => {
                self.request_remediation(m, tref, template, memo, writes)
            }
        }
        format!(
            "Machine {machine} is unhealthy ({first}); MachineHealthCheck {} remediates it",
            self.mhc_name()
        )
    }

    /// External remediation: a request from the template, unless one exists or its creation
    /// failed and waits for its retry.
    fn request_remediation(
        &self,
        m: &Machine,
        tref: &crate::model::ObjectRef,
        template: &crate::model::External,
        memo: &mut MhcMemo,
        writes: &mut Writes,
    ) {
        let name = m.meta.name.as_str();
        let rkey = request_key(tref, m);
        let exists = self.store.get(&rkey).is_some();
        if exists && memo.request_retry_at.contains_key(name) {
            // A create that failed, or timed out, made it after all: the request is there,
            // so the failure no longer stands.
            memo.request_created(name);
        }
        let retry_at = memo
            .request_retry_at
            .get(name)
            .copied()
            .filter(|t| *t > self.now);
        if !exists && retry_at.is_some() {
            writes.edits.push(Edit::set(
                List::Current,
                EXTERNALLY_REMEDIATED,
                ConditionStatus::False,
                "RemediationRequestCreationFailed",
                "Please check controller logs for errors",
            ));
            return;
        }
        if !exists {
            memo.request_retry_at.remove(name);
            writes.actions.push((
                Action::CreateRemediation {
                    target: request_target(tref, template, m),
                    object: request_object(tref, template, m),
                },
                format!(
                    "Machine {}/{name} is unhealthy; requesting external remediation from {} {}",
                    m.meta.namespace, tref.kind, tref.name
                ),
            ));
        }
        writes.edits.push(Edit::set(
            List::Current,
            EXTERNALLY_REMEDIATED,
            ConditionStatus::False,
            "WaitingForRemediation",
            "",
        ));
    }

    /// `MachineMarkedUnhealthy`, once per unhealthy spell.
    fn mark_unhealthy(&self, m: &Machine, mkey: ObjectKey, cx: &mut Cx<'_>) {
        let message = format!(
            "Machine {}/{} has been marked as unhealthy by {}",
            m.meta.namespace,
            m.meta.name,
            self.mhc_name()
        );
        cx.issue(
            ControllerId::Health,
            Action::RecordEvent {
                regarding: capi_target(mkey, m.version),
                type_: EventType::Normal,
                reason: "MachineMarkedUnhealthy".to_string(),
                message: message.clone(),
            },
            message,
        );
    }
}

/// Owner remediation: `OwnerRemediated=False` for the owner to act on. A False one means the
/// owner is on it already, in either API version (so its `MachineDeleting` mark is never taken
/// back).
fn owner_remediation(m: &Machine, edits: &mut Vec<Edit>) {
    if m.meta.is_deleting() || is_false(m.conditions.current(OWNER_REMEDIATED)) {
        return;
    }
    edits.push(Edit::set(
        List::Current,
        OWNER_REMEDIATED,
        ConditionStatus::False,
        "WaitingForRemediation",
        "Waiting for remediation",
    ));
    if !is_false(m.conditions.legacy(OWNER_REMEDIATED)) {
        edits.push(Edit::set_with(
            List::Legacy,
            legacy(
                OWNER_REMEDIATED,
                ConditionStatus::False,
                "WaitingForRemediation",
                "",
                Severity::Warning,
            ),
        ));
    }
}
