//! What the engine asks the outside world to do.

use crate::model::{Conditions, ObjectKey};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The registered controllers, in the order the engine reconciles them: one variant per
/// registry slot ([`ControllerId::slot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ControllerId {
    Deletion,
    /// MachineSet owner remediation. Before the health check: within one input a MachineSet
    /// decides before the MHCs write (the order they had when they shared a slot).
    Remediation,
    Health,
    Pool,
}

impl ControllerId {
    pub const COUNT: usize = 4;

    /// The controller's registry slot (its place in [`crate::Controllers`]).
    pub fn slot(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ControllerId::Deletion => "deletion",
            ControllerId::Remediation => "remediation",
            ControllerId::Health => "health",
            ControllerId::Pool => "pool",
        }
    }
}

/// An object a command writes to, with the apiVersion to address it by.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Target {
    pub key: ObjectKey,
    pub api_version: String,
}

impl Target {
    /// A CAPI object, written in the version it was read in.
    pub fn capi(key: ObjectKey, version: crate::model::ApiVersion) -> Self {
        Target {
            key,
            api_version: version.capi().to_string(),
        }
    }
}

/// JSON text carried inside commands (kept as text so records encode compactly and canonically).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonText(pub String);

impl JsonText {
    pub fn from_value(v: &serde_json::Value) -> Self {
        JsonText(v.to_string())
    }
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The action vocabulary of the scenario contract (`Cordon`, `Evict`, ...), plus `AddFinalizer`
/// and `RecordEvent` (Kubernetes Events).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    Cordon {
        node: Target,
    },
    Evict {
        pod: Target,
        grace_period_seconds: Option<i64>,
    },
    DeleteInfrastructure {
        target: Target,
    },
    DeleteBootstrap {
        target: Target,
    },
    DeleteNode {
        node: Target,
    },
    AddFinalizer {
        target: Target,
        finalizer: String,
    },
    RemoveFinalizer {
        target: Target,
        finalizer: String,
    },
    /// Write the object's full condition lists (both API versions' lists).
    SetCondition {
        target: Target,
        conditions: Conditions,
        /// What changed, for timelines: `DrainingSucceeded=False (Draining)`.
        summary: String,
    },
    /// A JSON merge patch on the status subresource.
    PatchStatus {
        target: Target,
        merge: JsonText,
        summary: String,
    },
    /// A JSON merge patch on the main resource (spec or metadata).
    PatchSpec {
        target: Target,
        merge: JsonText,
        summary: String,
    },
    /// A JSON merge patch adding owner references (and labels that go with them).
    SetOwnerReference {
        target: Target,
        merge: JsonText,
        summary: String,
    },
    CreateRemediation {
        target: Target,
        object: JsonText,
    },
    DeleteRemediation {
        target: Target,
    },
    DeleteMachine {
        target: Target,
    },
    CreateMachine {
        target: Target,
        object: JsonText,
    },
    RecordEvent {
        regarding: Target,
        type_: EventType,
        reason: String,
        message: String,
    },
    /// Write the object's condition lists as read at `resource_version`, with this controller's
    /// own condition changed: a precondition, so a list that CAPI's manager wrote meanwhile is
    /// never overwritten (takeover, [`crate::ownership`]).
    SetOwnCondition {
        target: Target,
        conditions: Conditions,
        resource_version: u64,
        summary: String,
    },
}

/// What an [`Action`] does, without its arguments: the name of its contract.
///
/// The kinds of state version 4 are declared in the order of their names, so that the derived
/// order is the one in-flight intents had when they were keyed by name, and iteration over them
/// is unchanged; later kinds follow them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ActionKind {
    AddFinalizer,
    Cordon,
    CreateMachine,
    CreateRemediation,
    DeleteBootstrap,
    DeleteInfrastructure,
    DeleteMachine,
    DeleteNode,
    DeleteRemediation,
    Evict,
    PatchSpec,
    PatchStatus,
    RecordEvent,
    RemoveFinalizer,
    SetCondition,
    SetOwnerReference,
    SetOwnCondition,
}

impl ActionKind {
    pub const ALL: [ActionKind; 17] = [
        ActionKind::AddFinalizer,
        ActionKind::Cordon,
        ActionKind::CreateMachine,
        ActionKind::CreateRemediation,
        ActionKind::DeleteBootstrap,
        ActionKind::DeleteInfrastructure,
        ActionKind::DeleteMachine,
        ActionKind::DeleteNode,
        ActionKind::DeleteRemediation,
        ActionKind::Evict,
        ActionKind::PatchSpec,
        ActionKind::PatchStatus,
        ActionKind::RecordEvent,
        ActionKind::RemoveFinalizer,
        ActionKind::SetCondition,
        ActionKind::SetOwnerReference,
        ActionKind::SetOwnCondition,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::AddFinalizer => "AddFinalizer",
            ActionKind::Cordon => "Cordon",
            ActionKind::CreateMachine => "CreateMachine",
            ActionKind::CreateRemediation => "CreateRemediation",
            ActionKind::DeleteBootstrap => "DeleteBootstrap",
            ActionKind::DeleteInfrastructure => "DeleteInfrastructure",
            ActionKind::DeleteMachine => "DeleteMachine",
            ActionKind::DeleteNode => "DeleteNode",
            ActionKind::DeleteRemediation => "DeleteRemediation",
            ActionKind::Evict => "Evict",
            ActionKind::PatchSpec => "PatchSpec",
            ActionKind::PatchStatus => "PatchStatus",
            ActionKind::RecordEvent => "RecordEvent",
            ActionKind::RemoveFinalizer => "RemoveFinalizer",
            ActionKind::SetCondition => "SetCondition",
            ActionKind::SetOwnerReference => "SetOwnerReference",
            ActionKind::SetOwnCondition => "SetOwnCondition",
        }
    }

    /// The kind named `name` ([`ActionKind::as_str`]).
    pub fn from_name(name: &str) -> Option<ActionKind> {
        ActionKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl Action {
    /// A write of an object's condition lists: with `guard` (the resourceVersion read) a
    /// [`Action::SetOwnCondition`] that a concurrent writer's change refuses, else a
    /// [`Action::SetCondition`].
    pub fn conditions_write(
        target: Target,
        conditions: crate::model::Conditions,
        summary: String,
        guard: Option<u64>,
    ) -> Action {
        match guard {
            Some(resource_version) => Action::SetOwnCondition {
                target,
                conditions,
                resource_version,
                summary,
            },
            None => Action::SetCondition {
                target,
                conditions,
                summary,
            },
        }
    }

    /// The contract name (`Cordon`, `Evict`, ...).
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    pub fn kind(&self) -> ActionKind {
        match self {
            Action::Cordon { .. } => ActionKind::Cordon,
            Action::Evict { .. } => ActionKind::Evict,
            Action::DeleteInfrastructure { .. } => ActionKind::DeleteInfrastructure,
            Action::DeleteBootstrap { .. } => ActionKind::DeleteBootstrap,
            Action::DeleteNode { .. } => ActionKind::DeleteNode,
            Action::AddFinalizer { .. } => ActionKind::AddFinalizer,
            Action::RemoveFinalizer { .. } => ActionKind::RemoveFinalizer,
            Action::SetCondition { .. } => ActionKind::SetCondition,
            Action::PatchStatus { .. } => ActionKind::PatchStatus,
            Action::PatchSpec { .. } => ActionKind::PatchSpec,
            Action::SetOwnerReference { .. } => ActionKind::SetOwnerReference,
            Action::CreateRemediation { .. } => ActionKind::CreateRemediation,
            Action::DeleteRemediation { .. } => ActionKind::DeleteRemediation,
            Action::DeleteMachine { .. } => ActionKind::DeleteMachine,
            Action::CreateMachine { .. } => ActionKind::CreateMachine,
            Action::RecordEvent { .. } => ActionKind::RecordEvent,
            Action::SetOwnCondition { .. } => ActionKind::SetOwnCondition,
        }
    }

    /// The object the action writes to.
    pub fn target(&self) -> &Target {
        match self {
            Action::Cordon { node } | Action::DeleteNode { node } => node,
            Action::Evict { pod, .. } => pod,
            Action::DeleteInfrastructure { target }
            | Action::DeleteBootstrap { target }
            | Action::AddFinalizer { target, .. }
            | Action::RemoveFinalizer { target, .. }
            | Action::SetCondition { target, .. }
            | Action::SetOwnCondition { target, .. }
            | Action::PatchStatus { target, .. }
            | Action::PatchSpec { target, .. }
            | Action::SetOwnerReference { target, .. }
            | Action::CreateRemediation { target, .. }
            | Action::DeleteRemediation { target }
            | Action::DeleteMachine { target }
            | Action::CreateMachine { target, .. } => target,
            Action::RecordEvent { regarding, .. } => regarding,
        }
    }

    /// Whether the action destroys something (eviction, deletion, finalizer removal).
    pub fn is_destructive(&self) -> bool {
        matches!(
            self,
            Action::Evict { .. }
                | Action::DeleteInfrastructure { .. }
                | Action::DeleteBootstrap { .. }
                | Action::DeleteNode { .. }
                | Action::RemoveFinalizer { .. }
                | Action::DeleteRemediation { .. }
                | Action::DeleteMachine { .. }
        )
    }

    /// Details for timelines (the part after the action name and target).
    pub fn detail(&self) -> String {
        match self {
            Action::Cordon { .. } => "spec.unschedulable=true".to_string(),
            Action::Evict {
                grace_period_seconds,
                ..
            } => match grace_period_seconds {
                Some(g) => format!("gracePeriodSeconds={g}"),
                None => String::new(),
            },
            Action::AddFinalizer { finalizer, .. } | Action::RemoveFinalizer { finalizer, .. } => {
                finalizer.clone()
            }
            Action::SetCondition { summary, .. }
            | Action::SetOwnCondition { summary, .. }
            | Action::PatchStatus { summary, .. }
            | Action::PatchSpec { summary, .. }
            | Action::SetOwnerReference { summary, .. } => summary.clone(),
            Action::RecordEvent {
                type_,
                reason,
                message,
                ..
            } => format!("{} {reason}: {message}", type_.as_str()),
            Action::DeleteInfrastructure { .. }
            | Action::DeleteBootstrap { .. }
            | Action::DeleteNode { .. }
            | Action::CreateRemediation { .. }
            | Action::DeleteRemediation { .. }
            | Action::DeleteMachine { .. }
            | Action::CreateMachine { .. } => String::new(),
        }
    }
}

/// One command: an action, who decided it, and the journal sequence number of the input that
/// caused it (so a timeline can answer "why").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub id: u64,
    pub cause: u64,
    pub controller: ControllerId,
    /// The object whose reconcile decided this (a Machine, an MHC, a MachinePool).
    pub owner: ObjectKey,
    pub action: Action,
    /// Why, in words an operator understands.
    pub reason: String,
    /// For an event that repeats an earlier one (same object, same reason, within
    /// [`crate::controller::EVENT_SERIES_WINDOW`]): the series it joins, whose Event is updated
    /// rather than a new one created.
    pub series: Option<EventSeries>,
}

/// A run of one (object, reason) event: the command that wrote its Event first, and how many
/// times it has happened so far (this one included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSeries {
    pub first: u64,
    pub count: u32,
}

impl Command {
    /// Who timelines say acted: the controller, except for two roles inside one: a
    /// deletion's cordon and evictions are its `drain`, and an MHC's external remediation
    /// requests are `remediation`.
    pub fn actor(&self) -> &'static str {
        match (self.controller, &self.action) {
            (ControllerId::Deletion, Action::Cordon { .. } | Action::Evict { .. }) => "drain",
            (
                ControllerId::Health,
                Action::CreateRemediation { .. } | Action::DeleteRemediation { .. },
            ) => "remediation",
            (controller, _) => controller.as_str(),
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} {} {}",
            self.id,
            self.actor(),
            self.action.name(),
            self.action.target().key
        )?;
        let detail = self.action.detail();
        if !detail.is_empty() {
            write!(f, " {detail}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ActionKind;

    /// Intents were ordered by their action's name before they were keyed by kind (state
    /// version 4): the kinds keep that order, so the engine visits in-flight intents as it did.
    #[test]
    fn action_kinds_are_ordered_as_their_names_and_found_by_them() {
        // The kinds of state version 4: in the order of their names; later ones after them.
        const OF_V4: usize = 16;
        let mut by_name = ActionKind::ALL;
        by_name[..OF_V4].sort_by_key(|k| k.as_str());
        assert_eq!(by_name, ActionKind::ALL);
        let mut by_kind = ActionKind::ALL;
        by_kind.sort();
        assert_eq!(by_kind, ActionKind::ALL);
        for kind in ActionKind::ALL {
            assert_eq!(ActionKind::from_name(kind.as_str()), Some(kind));
        }
        assert_eq!(ActionKind::from_name("Delete"), None);
    }
}
