//! A MachineHealthCheck's story: verdicts per target, short-circuit decisions, owner or
//! external remediation, and the replacement Machine.

use super::build::{
    Chapter, Teller, command_concerns, command_text, condition_label, condition_text,
    controller_owner,
};
use super::{ControllerRecord, Now, Target};
use engine::model::{Condition, ConditionStatus, Kind, Object, ObjectKey, find_condition};
use engine::{Action, Command};
use std::collections::BTreeMap;

const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
const TOO_MANY_UNHEALTHY: &str = "TooManyUnhealthy";

#[derive(Default)]
struct Judged {
    verdict: String,
    unhealthy: bool,
    remediation: Option<String>,
    /// The owner that deleted it for remediation (`MachineSet default/md-0`).
    deleted_by: Option<String>,
    replacement: Option<String>,
    /// The external remediation request standing for it.
    external: Option<String>,
    gone: bool,
}

impl Judged {
    /// What would end the wait of an unhealthy Machine, in one sentence.
    fn unblock(&self, machine: &ObjectKey) -> String {
        if let Some(owner) = &self.deleted_by {
            format!(
                "{machine} is being deleted by its owner {owner}: `lifecycle explain machine {}/{}` says what holds it",
                machine.namespace, machine.name
            )
        } else if let Some(request) = &self.external {
            format!(
                "the external remediation {request} must act on {machine} (its controller reboots or replaces it); the request is deleted once the Machine is healthy again"
            )
        } else if let Some(r) = &self.remediation {
            format!("{machine}: {r}")
        } else {
            format!("{machine}: waiting for its owner or an external remediation to act")
        }
    }
}

#[derive(Default)]
pub(super) struct Health {
    judged: BTreeMap<ObjectKey, Judged>,
    last_status: Option<String>,
}

impl Chapter for Health {
    fn observed(
        &mut self,
        t: &mut Teller,
        r: &ControllerRecord,
        key: &ObjectKey,
        object: Option<&Object>,
    ) {
        if key.kind != Kind::Machine {
            return;
        }
        match object {
            None => {
                if let Some(j) = self.judged.get_mut(key) {
                    j.gone = true;
                    t.entry(r.at, "observed", format!("{key} is gone"), None, r.seq);
                }
            }
            Some(o) if !t.objects.contains_key(key) => {
                let owner = controller_owner(o);
                let replaced = self.judged.iter_mut().find(|(_, j)| {
                    j.replacement.is_none() && j.deleted_by.is_some() && j.deleted_by == owner
                });
                if let Some((old, j)) = replaced {
                    j.replacement = Some(key.to_string());
                    let text = format!(
                        "replacement: {key} (created by {}) replaces {old}",
                        owner.unwrap_or_default()
                    );
                    t.entry(r.at, "replacement", text, None, r.seq);
                }
            }
            Some(_) => {}
        }
    }

    fn command(
        &mut self,
        t: &mut Teller,
        r: &ControllerRecord,
        c: &Command,
        changed: &[Condition],
    ) {
        let target = c.action.target().key.clone();
        let ours = command_concerns(c, &t.subject);
        let remediating =
            c.actor() == "remediation" && self.judged.get(&target).is_some_and(|j| j.unhealthy);
        if !ours && !remediating {
            return;
        }
        let on_subject = t.subject.matches(&target);
        match &c.action {
            Action::SetCondition { .. } if on_subject => {
                for ch in changed {
                    if ch.type_ == REMEDIATION_ALLOWED {
                        let name = match ch.status {
                            ConditionStatus::True => "remediation allowed".to_string(),
                            _ => {
                                format!("short-circuited: remediation not allowed ({})", ch.reason)
                            }
                        };
                        t.mark(&name, &condition_label(ch), r.at, c.cause);
                    }
                    t.entry(r.at, "condition", condition_text(ch), Some(c), c.cause);
                }
            }
            Action::SetCondition { .. } => {
                let judged = self.judged.entry(target.clone()).or_default();
                for ch in changed {
                    // The verdict that led to remediation stays: later ones judge a Machine
                    // already going.
                    let settled = judged.deleted_by.is_some() || judged.gone;
                    if ch.type_ == HEALTH_CHECK_SUCCEEDED && !settled {
                        judged.verdict = condition_text(ch);
                        judged.unhealthy = ch.status == ConditionStatus::False;
                    } else if ch.type_.ends_with("Remediated") {
                        judged.remediation = Some(condition_text(ch));
                    }
                    let what = if remediating {
                        "remediation"
                    } else {
                        "verdict"
                    };
                    t.entry(
                        r.at,
                        what,
                        format!("{target}: {}", condition_text(ch)),
                        Some(c),
                        c.cause,
                    );
                }
            }
            Action::PatchStatus { summary, .. } if on_subject => {
                if self.last_status.as_deref() != Some(summary) {
                    self.last_status = Some(summary.clone());
                    t.entry(r.at, "status", summary.clone(), Some(c), c.cause);
                }
            }
            action => {
                let what = match action {
                    Action::RecordEvent { .. } => "event",
                    Action::DeleteMachine { .. } | Action::CreateRemediation { .. } => {
                        "remediation"
                    }
                    _ => "command",
                };
                match action {
                    Action::DeleteMachine { .. } => {
                        let owner = t
                            .objects
                            .get(&target)
                            .and_then(|o| o.as_ref())
                            .and_then(controller_owner);
                        let j = self.judged.entry(target.clone()).or_default();
                        j.remediation = Some(format!(
                            "deleted by its owner {}",
                            owner.as_deref().unwrap_or("(unknown)")
                        ));
                        j.deleted_by = owner;
                    }
                    Action::CreateRemediation {
                        target: created, ..
                    } => {
                        if let Some((_, j)) = self
                            .judged
                            .iter_mut()
                            .find(|(k, _)| k.name == created.key.name)
                        {
                            j.remediation = Some(format!("external: {} created", created.key));
                            j.external = Some(created.key.to_string());
                        }
                    }
                    Action::DeleteRemediation { target: deleted } => {
                        if let Some((_, j)) = self
                            .judged
                            .iter_mut()
                            .find(|(k, _)| k.name == deleted.key.name)
                        {
                            j.remediation =
                                Some(format!("external: {} deleted ({})", deleted.key, c.reason));
                            j.external = None;
                        }
                    }
                    _ => {}
                }
                t.entry(r.at, what, command_text(c), Some(c), c.cause);
            }
        }
    }

    fn refused(&mut self, t: &mut Teller, r: &ControllerRecord, c: &Command, outcome: &str) {
        let judged_gone = self
            .judged
            .get(&c.action.target().key)
            .is_some_and(|j| j.gone);
        // A write to a Machine already deleted is answered 404: expected, not a story.
        if command_concerns(c, &t.subject) && !judged_gone {
            let text = format!(
                "{} {} answered {outcome}",
                c.action.name(),
                c.action.target().key,
            );
            t.entry(r.at, "refused", text, Some(c), r.seq);
        }
    }

    fn finish(self: Box<Self>, t: &mut Teller) -> (Vec<Target>, Now) {
        let targets: Vec<Target> = self
            .judged
            .iter()
            .map(|(k, j)| Target {
                machine: k.to_string(),
                verdict: j.verdict.clone(),
                remediation: j.remediation.clone(),
                replacement: j.replacement.clone(),
            })
            .collect();
        let mut held_by = Vec::new();
        let mut unblock = Vec::new();
        let allowed = find_condition(t.subject_conditions(), REMEDIATION_ALLOWED).cloned();
        let mut summary = if t.gone.is_some() {
            "gone".to_string()
        } else {
            self.last_status
                .clone()
                .unwrap_or_else(|| "no status written".into())
        };
        if let Some(a) = &allowed {
            summary.push_str(&format!("; {}", condition_label(a)));
        }
        let waiting: Vec<&ObjectKey> = self
            .judged
            .iter()
            .filter(|(_, j)| j.unhealthy && !j.gone)
            .map(|(k, _)| k)
            .collect();
        if let Some(a) = allowed.filter(|a| a.status == ConditionStatus::False) {
            if let Some((_, since)) = t.phases_last() {
                summary = format!(
                    "short-circuited for {} (since {}); {summary}",
                    t.now_at.since(since),
                    since.to_rfc3339()
                );
            }
            held_by.push(condition_text(&a));
            for k in &waiting {
                held_by.push(format!("{k}: {}", self.judged[*k].verdict));
            }
            unblock.push(if a.reason == TOO_MANY_UNHEALTHY {
                "remediation resumes once the unhealthy Machines are within maxUnhealthy / unhealthyRange (numbers above): recover their Nodes, or widen the limit".into()
            } else {
                format!(
                    "the MachineHealthCheck's spec is invalid ({}): fix it as the message above says; nothing is remediated until then",
                    a.reason
                )
            });
        } else {
            for k in &waiting {
                let j = &self.judged[*k];
                held_by.push(format!("{k}: {}", j.verdict));
                unblock.push(j.unblock(k));
            }
        }
        if let Some(fix) = super::build::unreachable_now(t) {
            let reachable = find_condition(
                t.subject_conditions(),
                engine::connection::REACHABLE_CONDITION,
            );
            held_by.extend(reachable.map(condition_text));
            unblock.push(fix);
        }
        (
            targets,
            Now {
                summary,
                held_by,
                unblock,
            },
        )
    }
}
