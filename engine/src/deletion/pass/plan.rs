//! What a pass asks of the API, as data (the pool's shape): step actions push [`Intent`]s
//! into the pass's [`Plan`], and [`Pass::apply`] issues them in order and, for each one the
//! API queue takes, records what the Machine's memory keeps of it.

use super::Pass;
use crate::command::{Action, ControllerId};
use crate::controller::Issued;
use crate::deletion::{Attempt, NodeDeletion};

/// One command to issue and what to remember once it is queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Intent {
    pub action: Action,
    pub why: String,
    pub on_queued: Record,
}

/// The memo update of a queued [`Intent`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Record {
    InfrastructureDelete(Attempt),
    BootstrapDelete(Attempt),
    NodeDeletion(NodeDeletion),
    /// Remembered by nobody: the finalizer's removal ends the deletion.
    Nothing,
}

/// The intents of a pass, in the order they are issued.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    pub intents: Vec<Intent>,
}

impl Plan {
    pub fn push(&mut self, action: Action, why: String, on_queued: Record) {
        self.intents.push(Intent {
            action,
            why,
            on_queued,
        });
    }
}

impl Pass<'_, '_> {
    /// Issues the planned intents and records the memo updates of those queued.
    pub(super) fn apply(&mut self) {
        for intent in std::mem::take(&mut self.plan.intents) {
            let Intent {
                action,
                why,
                on_queued,
            } = intent;
            let target = action.target().key.name.clone();
            let issued = self.cx.issue(ControllerId::Deletion, action, why);
            if !matches!(issued, Issued::Queued(_)) {
                continue;
            }
            let memo = &mut self.tracked.memo;
            match on_queued {
                Record::InfrastructureDelete(attempt) => {
                    let kind = &self.m.infrastructure_ref.kind;
                    tracing::info!(machine = %self.key, "Deleting {kind} {target}");
                    memo.infrastructure_delete = Some(attempt);
                }
                Record::BootstrapDelete(attempt) => {
                    let kind = self.m.bootstrap_config_ref.as_ref().map(|r| &r.kind);
                    let kind = kind.map_or("", String::as_str);
                    tracing::info!(machine = %self.key, "Deleting {kind} {target}");
                    memo.bootstrap_delete = Some(attempt);
                }
                Record::NodeDeletion(deletion) => {
                    tracing::info!(machine = %self.key, node = %target, "Deleting node");
                    memo.node_deletion = Some(deletion);
                }
                Record::Nothing => {
                    tracing::info!(machine = %self.key, "Deletion completed, removing finalizer");
                }
            }
        }
    }
}
