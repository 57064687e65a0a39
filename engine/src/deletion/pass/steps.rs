//! The actions of the deletion's steps other than the drain. Each takes what the assessment
//! found ([`super::assess`]) and acts on it: passed steps leave their conditions and events,
//! the step that holds says why and asks the API for what it waits on.

use super::assess::{NodeDeletionFinding, NodeOutcome, VolumeFinding};
use super::plan::Record;
use super::{API_RETRY_INTERVAL, ExternalRole, Pass, attempt_due};
use crate::command::{Action, EventType, Target};
use crate::deletion::gates;
use crate::deletion::phase::Step;
use crate::deletion::status::{legacy, legacy_false, legacy_true, reason};
use crate::deletion::{Attempt, DeletionTimer, NodeDeletion, NodeDeletionOutcome};
use crate::model::{
    ApiVersion, Condition, Object, ObjectKey, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX,
    Severity,
};

impl<'p, 'a> Pass<'p, 'a> {
    /// A negative drain, volume detach or Node deletion timeout is an invalid spec (upstream's
    /// webhook rejects it): it times nothing (no wait is cut short, no Node deletion given up),
    /// and a Warning event says so once.
    pub(super) fn report_invalid_timeouts(&mut self) {
        let v1beta2 = self.m.version == ApiVersion::V1Beta2;
        let fields = [
            (self.m.node_drain_timeout, "nodeDrainTimeout"),
            (self.m.node_volume_detach_timeout, "nodeVolumeDetachTimeout"),
            (self.m.node_deletion_timeout, "nodeDeletionTimeout"),
        ];
        for (value, name) in fields {
            let Some(value) = value.filter(|v| *v < crate::time::Duration::ZERO) else {
                continue;
            };
            let field = if v1beta2 {
                format!("spec.deletion.{name}Seconds")
            } else {
                format!("spec.{name}")
            };
            let message = format!(
                "{field} is {value}: a negative timeout is invalid and times nothing (no wait is cut short, no Node deletion given up)"
            );
            self.event(
                EventType::Warning,
                "InvalidTimeout",
                message,
                format!("InvalidTimeout:{field}"),
            );
        }
    }

    /// Stops the pass until `key` reads again: the `Deleting` condition and a Warning event
    /// say which object and what is wrong with it.
    pub(super) fn wait_for_readable(&mut self, key: &ObjectKey, problem: &str) {
        let message = format!(
            "{}; the deletion waits until it can be read",
            crate::store::unreadable_message(key, problem)
        );
        tracing::warn!(machine = %self.key, "{message}");
        self.event(
            EventType::Warning,
            reason::OBJECT_UNREADABLE,
            message.clone(),
            format!("ObjectUnreadable:{key}:{problem}"),
        );
        self.set_deleting(reason::OBJECT_UNREADABLE, message);
    }

    /// The workload cluster's cache is needed and its connector cannot connect: the
    /// `Deleting` condition and a Warning event (once per reason) say why, and what it needs.
    pub(super) fn wait_for_workload_cluster(&mut self, why: &crate::connection::Unreachable) {
        let cluster = &self.tracked.cluster;
        let message = format!(
            "{}; the deletion waits until it can be reached (the Node's drain and deletion need its API)",
            why.message(cluster)
        );
        tracing::warn!(machine = %self.key, "{message}");
        self.event(
            EventType::Warning,
            reason::WORKLOAD_CLUSTER_UNREACHABLE,
            message.clone(),
            format!("{}:{}", reason::WORKLOAD_CLUSTER_UNREACHABLE, why.code()),
        );
        self.set_deleting(reason::WORKLOAD_CLUSTER_UNREACHABLE, message);
    }

    /// The workload cluster connected and its cache is not synced yet: a `Deleting` condition
    /// that said it could not be reached says so no longer (the relist that follows moves the
    /// deletion on; until then this is what it waits for).
    pub(super) fn connected_not_synced(&mut self) {
        let said_unreachable = self
            .conditions
            .current(crate::deletion::status::DELETING)
            .is_some_and(|c| c.reason == reason::WORKLOAD_CLUSTER_UNREACHABLE);
        if !said_unreachable {
            return;
        }
        let cluster = &self.tracked.cluster;
        self.set_deleting(
            reason::DELETING,
            format!(
                "Waiting for the cache of workload cluster {}/{} to sync",
                cluster.namespace, cluster.name
            ),
        );
        self.flush_conditions();
    }

    pub(super) fn pre_drain_hooks(&mut self, step: Step) {
        match step {
            Step::Skipped | Step::NotReached => {}
            Step::Done => self.set_legacy(legacy_true(legacy::PRE_DRAIN_DELETE_HOOK_SUCCEEDED)),
            Step::Holds => {
                let hooks = self.hooks(PRE_DRAIN_HOOK_PREFIX);
                let start = self.start(|d| &mut d.wait_for_pre_drain_hook_start);
                tracing::debug!(machine = %self.key, since = %start, "Waiting for pre-drain hooks to succeed");
                self.set_legacy(legacy_false(
                    legacy::PRE_DRAIN_DELETE_HOOK_SUCCEEDED,
                    legacy::WAITING_EXTERNAL_HOOK,
                    Severity::Info,
                    "",
                ));
                self.set_deleting(
                    reason::WAITING_FOR_PRE_DRAIN_HOOK,
                    format!(
                        "Waiting for pre-drain hooks to succeed (hooks: {})",
                        hooks.join(",")
                    ),
                );
            }
        }
    }

    pub(super) fn pre_terminate_hooks(&mut self, step: Step) {
        match step {
            Step::Skipped | Step::NotReached => {}
            Step::Done => self.set_legacy(legacy_true(legacy::PRE_TERMINATE_DELETE_HOOK_SUCCEEDED)),
            Step::Holds => {
                let hooks = self.hooks(PRE_TERMINATE_HOOK_PREFIX);
                self.start(|d| &mut d.wait_for_pre_terminate_hook_start);
                self.set_legacy(legacy_false(
                    legacy::PRE_TERMINATE_DELETE_HOOK_SUCCEEDED,
                    legacy::WAITING_EXTERNAL_HOOK,
                    Severity::Info,
                    "",
                ));
                self.set_deleting(
                    reason::WAITING_FOR_PRE_TERMINATE_HOOK,
                    format!(
                        "Waiting for pre-terminate hooks to succeed (hooks: {})",
                        hooks.join(",")
                    ),
                );
            }
        }
    }

    pub(super) fn volume_detach(&mut self, node_name: &str, found: VolumeFinding) {
        let wait = match found {
            VolumeFinding::Skipped(skipped) => {
                tracing::debug!(machine = %self.key, "Skipping volume detach wait: {skipped}");
                return;
            }
            VolumeFinding::Detached => None,
            VolumeFinding::Failed(error) => Some(Err(error)),
            VolumeFinding::Waiting(w) => Some(Ok(w)),
        };
        let timeout = self.m.node_volume_detach_timeout;
        let start = self.start(|d| &mut d.wait_for_node_volume_detach_start);
        if let Some(at) = gates::deadline(Some(start), timeout) {
            self.wake_at(at, DeletionTimer::VolumeDetachTimeout, None);
        }
        if !self.legacy_exists(legacy::VOLUME_DETACH_SUCCEEDED) {
            self.set_legacy(legacy_false(
                legacy::VOLUME_DETACH_SUCCEEDED,
                legacy::WAITING_FOR_VOLUME_DETACH,
                Severity::Info,
                "Waiting for node volumes to be detached",
            ));
        }
        let header = format!(
            "Waiting for Node volumes to be detached (started at {})",
            start.to_rfc3339()
        );
        self.set_deleting(reason::WAITING_FOR_VOLUME_DETACH, header);
        match wait {
            Some(Err(error)) => {
                tracing::error!(machine = %self.key, "Error waiting for volumes to be detached from Node: {error}");
                self.set_deleting(
                    reason::WAITING_FOR_VOLUME_DETACH,
                    "Error waiting for volumes to be detached from Node, please check controller logs for errors",
                );
                self.event(
                    EventType::Warning,
                    "FailedWaitForVolumeDetach",
                    format!("error waiting for node volumes detaching, Machine's node {node_name:?}: {error}"),
                    format!("FailedWaitForVolumeDetach:{error}"),
                );
            }
            None => {
                if !self
                    .conditions
                    .legacy(legacy::VOLUME_DETACH_SUCCEEDED)
                    .is_some_and(Condition::is_true)
                {
                    tracing::info!(machine = %self.key, node = node_name, "Node volumes all detached");
                }
                self.set_legacy(legacy_true(legacy::VOLUME_DETACH_SUCCEEDED));
                self.event(
                    EventType::Normal,
                    "NodeVolumesDetached",
                    format!(
                        "success waiting for node volumes detaching Machine's node {node_name:?}"
                    ),
                    "NodeVolumesDetached".to_string(),
                );
            }
            Some(Ok(w)) => {
                tracing::debug!(machine = %self.key, node = node_name, "Waiting for Node volumes to be detached");
                self.set_deleting(reason::WAITING_FOR_VOLUME_DETACH, w.message(start));
            }
        }
    }

    /// `node_outcome`: what became of the Node, for the deletion's reason.
    pub(super) fn infrastructure(&mut self, step: Step, node_outcome: NodeOutcome) {
        let key = self.tracked.infrastructure.clone();
        let kind = self.m.infrastructure_ref.kind.clone();
        self.external(
            step,
            &key,
            &kind,
            ExternalRole::Infrastructure(node_outcome),
        );
    }

    pub(super) fn bootstrap(&mut self, step: Step) {
        let (Some(key), Some(r)) = (self.tracked.bootstrap.clone(), &self.m.bootstrap_config_ref)
        else {
            return;
        };
        let kind = r.kind.clone();
        self.external(step, &key, &kind, ExternalRole::Bootstrap);
    }

    pub(super) fn external(&mut self, step: Step, key: &ObjectKey, kind: &str, role: ExternalRole) {
        let ready_type = match role {
            ExternalRole::Infrastructure(_) => legacy::INFRASTRUCTURE_READY,
            ExternalRole::Bootstrap => legacy::BOOTSTRAP_READY,
        };
        match step {
            Step::Skipped | Step::NotReached => {}
            Step::Done => self.set_legacy(legacy_false(
                ready_type,
                legacy::DELETED,
                Severity::Info,
                "",
            )),
            Step::Holds => self.delete_external(key, kind, role),
        }
    }

    pub(super) fn delete_external(&mut self, key: &ObjectKey, kind: &str, role: ExternalRole) {
        let waiting_reason = match role {
            ExternalRole::Infrastructure(_) => reason::WAITING_FOR_INFRASTRUCTURE_DELETION,
            ExternalRole::Bootstrap => reason::WAITING_FOR_BOOTSTRAP_DELETION,
        };
        let object = self.store.get(key);
        // `None` here: not in the cache yet. Deleting it through the API settles it either way
        // (gone, or deleted as it should be), where upstream would read it live.
        let deleting = object.is_some_and(|o| o.meta().is_deleting());
        let action_name = match role {
            ExternalRole::Infrastructure(_) => crate::ActionKind::DeleteInfrastructure,
            ExternalRole::Bootstrap => crate::ActionKind::DeleteBootstrap,
        };
        let attempt = match role {
            ExternalRole::Infrastructure(_) => self.tracked.memo.infrastructure_delete.clone(),
            ExternalRole::Bootstrap => self.tracked.memo.bootstrap_delete.clone(),
        };
        if !deleting {
            let in_flight = self.cx.is_in_flight(action_name, key);
            if attempt_due(&attempt, in_flight, self.now) {
                let target = Target {
                    key: key.clone(),
                    api_version: match object {
                        Some(Object::External(e)) => e.api_version.clone(),
                        Some(_) => String::new(),
                        None => self.unseen_api_version(key, role),
                    },
                };
                let (action, why) = match role {
                    ExternalRole::Infrastructure(node_outcome) => (
                        Action::DeleteInfrastructure { target },
                        format!(
                            "Machine {} is being deleted and {node_outcome}: deleting {kind} {}",
                            self.m.meta.name, key.name
                        ),
                    ),
                    ExternalRole::Bootstrap => (
                        Action::DeleteBootstrap { target },
                        format!(
                            "{} of Machine {} is gone: deleting {kind} {}",
                            self.m.infrastructure_ref.kind, self.m.meta.name, key.name
                        ),
                    ),
                };
                let fresh = Attempt::requested(attempt.as_ref(), self.now);
                let record = match role {
                    ExternalRole::Infrastructure(_) => Record::InfrastructureDelete(fresh),
                    ExternalRole::Bootstrap => Record::BootstrapDelete(fresh),
                };
                self.plan.push(action, why, record);
            } else if let Some(a) = attempt
                .as_ref()
                .filter(|a| a.failure().is_some() && !in_flight)
            {
                self.wake_at(
                    a.at().saturating_add(API_RETRY_INTERVAL),
                    DeletionTimer::ApiRetry,
                    Some(key),
                );
            }
        }
        let failed = match role {
            ExternalRole::Infrastructure(_) => &self.tracked.memo.infrastructure_delete,
            ExternalRole::Bootstrap => &self.tracked.memo.bootstrap_delete,
        }
        .as_ref()
        .is_some_and(|a| a.failure().is_some());
        if failed && !deleting {
            self.set_deleting(
                reason::INTERNAL_ERROR,
                format!("Failed to delete {kind}, please check controller logs for errors"),
            );
        } else if object.is_none() {
            self.set_deleting(
                waiting_reason,
                format!(
                    "Waiting for {kind} to be deleted ({kind} {} has not reached the cache yet; \
                     the API was asked to delete it)",
                    key.name
                ),
            );
        } else {
            self.set_deleting(waiting_reason, format!("Waiting for {kind} to be deleted"));
        }
    }

    /// The apiVersion to address a provider object the cache has not seen: the reference's,
    /// else that of a cached object of its kind, else its group alone (the adapter asks
    /// discovery for the preferred version).
    pub(super) fn unseen_api_version(&self, key: &ObjectKey, role: ExternalRole) -> String {
        let reference = match role {
            ExternalRole::Infrastructure(_) => Some(&self.m.infrastructure_ref),
            ExternalRole::Bootstrap => self.m.bootstrap_config_ref.as_ref(),
        };
        reference
            .and_then(|r| r.api_version.clone())
            .or_else(|| {
                self.store
                    .api_version_of_kind(&key.scope, &key.kind)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| reference.map(|r| r.api_group.clone()).unwrap_or_default())
    }

    pub(super) fn delete_node(&mut self, node_name: &str, found: NodeDeletionFinding) {
        let previous = match found {
            NodeDeletionFinding::Absent | NodeDeletionFinding::Over => return,
            NodeDeletionFinding::GiveUp { error } => {
                self.node_deletion_failed(&error);
                tracing::info!(
                    machine = %self.key,
                    node = node_name,
                    "Timeout for Node deletion exceeded, continuing without Node deletion"
                );
                if let Some(d) = &mut self.tracked.memo.node_deletion {
                    d.outcome = NodeDeletionOutcome::GaveUp(error);
                }
                return;
            }
            NodeDeletionFinding::InFlight => {
                // First attempt in flight: keep showing the previous stage until it is answered.
                self.deleting = None;
                return;
            }
            NodeDeletionFinding::Paced { error, due } => {
                self.node_deletion_failed(&error);
                let node_key = self.node_key(node_name);
                self.wake_at(due, DeletionTimer::NodeDeletionRetry, Some(&node_key));
                return;
            }
            NodeDeletionFinding::Retry { error, previous } => {
                self.node_deletion_failed(&error);
                Some(previous)
            }
            NodeDeletionFinding::Request { previous } => previous,
        };
        let node_key = self.node_key(node_name);
        let why = match &previous {
            None => format!(
                "{} and {} of Machine {} are gone: deleting Node {node_name}",
                self.m.infrastructure_ref.kind,
                self.m
                    .bootstrap_config_ref
                    .as_ref()
                    .map_or("bootstrap", |r| r.kind.as_str()),
                self.m.meta.name
            ),
            Some(_) => format!(
                "retrying deletion of Node {node_name} (every {})",
                gates::MACHINE_NODE_DELETION_RETRY_INTERVAL
            ),
        };
        let first_at = previous.as_ref().map_or(self.now, |d| d.first_at);
        self.plan.push(
            Action::DeleteNode {
                node: Target {
                    key: node_key,
                    api_version: "v1".to_string(),
                },
            },
            why,
            Record::NodeDeletion(NodeDeletion {
                first_at,
                last_at: self.now,
                outcome: NodeDeletionOutcome::Pending,
            }),
        );
        if previous.is_none() {
            self.deleting = None;
        }
    }

    pub(super) fn node_deletion_failed(&mut self, error: &str) {
        self.set_legacy(legacy_false(
            legacy::NODE_HEALTHY,
            legacy::DELETION_FAILED,
            Severity::Warning,
            "",
        ));
        self.set_deleting(
            reason::DELETING_NODE,
            "Error deleting Node, please check controller logs for errors",
        );
        self.event(
            EventType::Warning,
            "FailedDeleteNode",
            format!("error deleting Machine's node: {error}"),
            format!("FailedDeleteNode:{error}"),
        );
    }
}
