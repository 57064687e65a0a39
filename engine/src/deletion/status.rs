//! The Machine status a deletion pass wants: conditions (both lists), `status.phase`,
//! `status.deletion.*StartTime`, and `status.nodeRef` when it was found by providerID; and the
//! commands that write only what differs from what is observed.

use crate::command::JsonText;
use crate::model::{ApiVersion, Condition, ConditionStatus, Conditions, DeletionTimes, Severity};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

// v1beta2 condition type and reasons (§1.9).
pub const DELETING: &str = "Deleting";
pub mod reason {
    pub const DELETING: &str = "Deleting";
    pub const INTERNAL_ERROR: &str = "InternalError";
    pub const WAITING_FOR_PRE_DRAIN_HOOK: &str = "WaitingForPreDrainHook";
    pub const DRAINING_NODE: &str = "DrainingNode";
    pub const WAITING_FOR_VOLUME_DETACH: &str = "WaitingForVolumeDetach";
    pub const WAITING_FOR_PRE_TERMINATE_HOOK: &str = "WaitingForPreTerminateHook";
    pub const WAITING_FOR_INFRASTRUCTURE_DELETION: &str = "WaitingForInfrastructureDeletion";
    pub const WAITING_FOR_BOOTSTRAP_DELETION: &str = "WaitingForBootstrapDeletion";
    pub const DELETING_NODE: &str = "DeletingNode";
    pub const DELETION_COMPLETED: &str = "DeletionCompleted";
    /// An object the deletion depends on cannot be read (this product's reason; CAPI relies
    /// on its webhooks to keep such objects out).
    pub const OBJECT_UNREADABLE: &str = crate::store::OBJECT_UNREADABLE;
    /// The workload cluster the Node's drain and deletion need cannot be reached (its
    /// kubeconfig Secret is missing or bad): this product's reason, as for the event.
    pub const WORKLOAD_CLUSTER_UNREACHABLE: &str = crate::connection::EVENT_REASON;
}

// v1beta1 condition types and reasons touched during deletion.
pub mod legacy {
    pub const PRE_DRAIN_DELETE_HOOK_SUCCEEDED: &str = "PreDrainDeleteHookSucceeded";
    pub const DRAINING_SUCCEEDED: &str = "DrainingSucceeded";
    pub const VOLUME_DETACH_SUCCEEDED: &str = "VolumeDetachSucceeded";
    pub const PRE_TERMINATE_DELETE_HOOK_SUCCEEDED: &str = "PreTerminateDeleteHookSucceeded";
    pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
    pub const BOOTSTRAP_READY: &str = "BootstrapReady";
    pub const NODE_HEALTHY: &str = "NodeHealthy";
    pub const WAITING_EXTERNAL_HOOK: &str = "WaitingExternalHook";
    pub const DRAINING: &str = "Draining";
    pub const DRAINING_FAILED: &str = "DrainingFailed";
    pub const WAITING_FOR_VOLUME_DETACH: &str = "WaitingForVolumeDetach";
    pub const DELETED: &str = "Deleted";
    pub const DELETION_FAILED: &str = "DeletionFailed";
}

pub use crate::model::set_condition;

/// Whether the deletion writes this condition (in `current`: the v1beta2 list).
pub fn is_deletions(current: bool, type_: &str) -> bool {
    if current {
        return type_ == DELETING;
    }
    [
        legacy::PRE_DRAIN_DELETE_HOOK_SUCCEEDED,
        legacy::DRAINING_SUCCEEDED,
        legacy::VOLUME_DETACH_SUCCEEDED,
        legacy::PRE_TERMINATE_DELETE_HOOK_SUCCEEDED,
        legacy::INFRASTRUCTURE_READY,
        legacy::BOOTSTRAP_READY,
        legacy::NODE_HEALTHY,
    ]
    .contains(&type_)
}
#[cfg(test)]
use crate::time::Timestamp;

/// A v1beta1 condition: True without severity, False with one.
pub fn legacy_true(type_: &str) -> Condition {
    Condition::new(type_, ConditionStatus::True, "", "")
}

pub fn legacy_false(type_: &str, reason: &str, severity: Severity, message: &str) -> Condition {
    Condition::new(type_, ConditionStatus::False, reason, message).with_severity(severity)
}

/// `Type=Status (Reason)` for every condition that differs, for timelines.
pub fn condition_summary(before: &Conditions, after: &Conditions) -> String {
    let mut parts = Vec::new();
    for (old, new) in [
        (&before.current, &after.current),
        (&before.legacy, &after.legacy),
    ] {
        for c in new {
            let prev = old.iter().find(|o| o.type_ == c.type_);
            if prev != Some(c) {
                if c.reason.is_empty() {
                    parts.push(format!("{}={}", c.type_, c.status.as_str()));
                } else {
                    parts.push(format!("{}={} ({})", c.type_, c.status.as_str(), c.reason));
                }
            }
        }
    }
    parts.join(", ")
}

/// The status fields (other than conditions) a deletion writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusFields {
    pub phase: Option<String>,
    pub deletion: DeletionTimes,
    /// `(name, uid)` of a Node found by providerID.
    pub node_ref: Option<(String, String)>,
}

/// A merge patch of the fields of `desired` that differ from `observed`, in the field paths
/// of `version` (the `status.deletion` and `status.phase` paths are the same in both), with a
/// timeline summary. `None` when nothing differs.
pub fn status_patch(
    version: ApiVersion,
    observed: &StatusFields,
    desired: &StatusFields,
) -> Option<(JsonText, String)> {
    let mut status = Map::new();
    let mut summary = Vec::new();
    if desired.phase.is_some() && desired.phase != observed.phase {
        let phase = desired.phase.clone().unwrap_or_default();
        summary.push(format!("status.phase={phase}"));
        status.insert("phase".into(), Value::String(phase));
    }
    let mut deletion = Map::new();
    let (d, o) = (&desired.deletion, &observed.deletion);
    for (field, want, have) in [
        ("nodeDrainStartTime", d.node_drain_start, o.node_drain_start),
        (
            "waitForNodeVolumeDetachStartTime",
            d.wait_for_node_volume_detach_start,
            o.wait_for_node_volume_detach_start,
        ),
        (
            "waitForPreDrainHookStartTime",
            d.wait_for_pre_drain_hook_start,
            o.wait_for_pre_drain_hook_start,
        ),
        (
            "waitForPreTerminateHookStartTime",
            d.wait_for_pre_terminate_hook_start,
            o.wait_for_pre_terminate_hook_start,
        ),
    ] {
        if let Some(at) = want
            && have != want
        {
            summary.push(format!("status.deletion.{field}={}", at.to_rfc3339()));
            deletion.insert(field.into(), Value::String(at.to_rfc3339()));
        }
    }
    if !deletion.is_empty() {
        status.insert("deletion".into(), Value::Object(deletion));
    }
    if let Some((name, uid)) = &desired.node_ref
        && observed.node_ref.as_ref().map(|n| &n.0) != Some(name)
    {
        summary.push(format!("status.nodeRef.name={name}"));
        let node_ref = match version {
            ApiVersion::V1Beta1 => {
                json!({"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid})
            }
            ApiVersion::V1Beta2 => json!({"name": name}),
        };
        status.insert("nodeRef".into(), node_ref);
    }
    if status.is_empty() {
        return None;
    }
    let patch = json!({ "status": Value::Object(status) });
    Some((JsonText::from_value(&patch), summary.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_transition_time_moves_only_when_the_status_changes() {
        let mut list = Vec::new();
        set_condition(
            &mut list,
            legacy_false(
                legacy::DRAINING_SUCCEEDED,
                legacy::DRAINING,
                Severity::Info,
                "a",
            ),
            Timestamp(1_000),
        );
        set_condition(
            &mut list,
            legacy_false(
                legacy::DRAINING_SUCCEEDED,
                legacy::DRAINING,
                Severity::Info,
                "b",
            ),
            Timestamp(2_000),
        );
        assert_eq!(list[0].last_transition_time, Some(Timestamp(1_000)));
        assert_eq!(list[0].message, "b");
        set_condition(
            &mut list,
            legacy_true(legacy::DRAINING_SUCCEEDED),
            Timestamp(3_000),
        );
        assert_eq!(list[0].last_transition_time, Some(Timestamp(3_000)));
        assert_eq!(list[0].severity, Severity::None);
    }

    #[test]
    fn status_patch_writes_only_what_differs_in_the_objects_version() {
        let observed = StatusFields {
            phase: Some("Running".into()),
            ..Default::default()
        };
        let mut desired = StatusFields {
            phase: Some("Deleting".into()),
            node_ref: Some(("n1".into(), "uid-n1".into())),
            ..Default::default()
        };
        desired.deletion.node_drain_start = Some(Timestamp(1_704_067_260_000));
        let (patch, summary) = status_patch(ApiVersion::V1Beta1, &observed, &desired).unwrap();
        assert_eq!(
            patch.0,
            r#"{"status":{"phase":"Deleting","deletion":{"nodeDrainStartTime":"2024-01-01T00:01:00Z"},"nodeRef":{"apiVersion":"v1","kind":"Node","name":"n1","uid":"uid-n1"}}}"#
        );
        assert_eq!(
            summary,
            "status.phase=Deleting status.deletion.nodeDrainStartTime=2024-01-01T00:01:00Z status.nodeRef.name=n1"
        );
        let (patch, _) = status_patch(ApiVersion::V1Beta2, &observed, &desired).unwrap();
        assert!(patch.0.ends_with(r#""nodeRef":{"name":"n1"}}}"#));
        assert_eq!(status_patch(ApiVersion::V1Beta2, &desired, &desired), None);
    }
}
