//! A MachinePool's story: its phases (`status.phase`) and replicas.

use super::build::{Chapter, Teller, command_concerns, command_text, condition_text};
use super::{ControllerRecord, Now, Target};
use engine::model::{Condition, ConditionStatus, Object, ObjectKey};
use engine::{Action, Command};
use std::collections::BTreeMap;

/// The replica counts a pool's status carries, as the story shows them.
const REPLICA_FIELDS: [&str; 4] = [
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "upToDateReplicas",
];

#[derive(Default)]
pub(super) struct Pool {
    replicas: BTreeMap<&'static str, i64>,
    phase: Option<String>,
}

impl Chapter for Pool {
    fn observed(
        &mut self,
        _: &mut Teller,
        _: &ControllerRecord,
        _: &ObjectKey,
        _: Option<&Object>,
    ) {
    }

    fn command(
        &mut self,
        t: &mut Teller,
        r: &ControllerRecord,
        c: &Command,
        changed: &[Condition],
    ) {
        if !command_concerns(c, &t.subject) {
            return;
        }
        let on_subject = t.subject.matches(&c.action.target().key);
        match &c.action {
            Action::SetCondition { .. } => {
                for ch in changed {
                    let text = if on_subject {
                        condition_text(ch)
                    } else {
                        format!("{}: {}", c.action.target().key, condition_text(ch))
                    };
                    t.entry(r.at, "condition", text, Some(c), c.cause);
                }
            }
            Action::PatchStatus { merge, summary, .. } if on_subject => {
                let status = merge.to_value()["status"].clone();
                if let Some(phase) = status["phase"].as_str() {
                    self.phase = Some(phase.to_string());
                    t.mark(phase, phase, r.at, c.cause);
                }
                for field in REPLICA_FIELDS {
                    if let Some(n) = status[field].as_i64() {
                        self.replicas.insert(field, n);
                    }
                }
                t.entry(r.at, "status", summary.clone(), Some(c), c.cause);
            }
            Action::RecordEvent { .. } => t.entry(r.at, "event", command_text(c), Some(c), c.cause),
            _ => t.entry(r.at, "command", command_text(c), Some(c), c.cause),
        }
    }

    fn refused(&mut self, t: &mut Teller, r: &ControllerRecord, c: &Command, outcome: &str) {
        if command_concerns(c, &t.subject) {
            let text = format!(
                "{} {} answered {outcome}",
                c.action.name(),
                c.action.target().key,
            );
            t.entry(r.at, "refused", text, Some(c), r.seq);
        }
    }

    fn finish(self: Box<Self>, t: &mut Teller) -> (Vec<Target>, Now) {
        if let Some(gone) = &t.gone {
            return (
                Vec::new(),
                Now {
                    summary: format!("gone since {} (record #{})", gone.at, gone.seq),
                    held_by: Vec::new(),
                    unblock: Vec::new(),
                },
            );
        }
        let mut summary = format!(
            "phase {}",
            self.phase.as_deref().unwrap_or("(none written)")
        );
        for field in REPLICA_FIELDS {
            if let Some(n) = self.replicas.get(field) {
                summary.push_str(&format!(", {field} {n}"));
            }
        }
        let held_by = t
            .subject_conditions()
            .iter()
            .filter(|c| c.status == ConditionStatus::False)
            .map(condition_text)
            .collect();
        let unblock = super::build::unreachable_now(t).into_iter().collect();
        (
            Vec::new(),
            Now {
                summary,
                held_by,
                unblock,
            },
        )
    }
}
