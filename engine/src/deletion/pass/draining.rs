//! The drain's action: cordon, evict what the plan says, report what blocks it, and say when
//! it is over. What it acts on was found by [`super::assess`].

use super::assess::DrainFinding;
use super::plan::Record;
use super::{API_RETRY_INTERVAL, Pass, attempt_due};
use crate::command::{Action, EventType, Target};
use crate::deletion::gates;
use crate::deletion::pods::CachedPod;
use crate::deletion::status::{legacy, legacy_false, legacy_true, reason};
use crate::deletion::{Attempt, DeletionTimer};
use crate::drain::{self, DrainPlan, EvictionAttempt};
use crate::model::{Condition, Severity};

impl<'p, 'a> Pass<'p, 'a> {
    pub(super) fn drain(&mut self, node_name: &str, found: DrainFinding<'_>) {
        if let DrainFinding::Skipped(skipped) = &found {
            tracing::debug!(machine = %self.key, "Skipping drain: {skipped}");
            return;
        }
        let timeout = self.m.node_drain_timeout;
        let start = self.start(|d| &mut d.node_drain_start);
        if let Some(at) = gates::deadline(Some(start), timeout) {
            self.wake_at(at, DeletionTimer::DrainTimeout, None);
        }
        if !self.legacy_exists(legacy::DRAINING_SUCCEEDED) {
            self.set_legacy(legacy_false(
                legacy::DRAINING_SUCCEEDED,
                legacy::DRAINING,
                Severity::Info,
                "Draining the node before deletion",
            ));
        }
        let header = if self.conditions_in_flight {
            String::new()
        } else {
            drain::condition_header(start)
        };
        self.set_deleting(reason::DRAINING_NODE, header.clone());
        match found {
            DrainFinding::Skipped(_) => {}
            DrainFinding::NodeNotCached => self.set_deleting(
                reason::DRAINING_NODE,
                format!("Waiting for Node {node_name} to appear in the workload cluster's cache"),
            ),
            DrainFinding::NodeGone => self.drain_completed(node_name),
            DrainFinding::Schedulable => self.cordon(node_name),
            DrainFinding::UnreadablePod(key, problem) => {
                self.tracked.memo.cordon = None;
                self.wait_for_readable(&key, &problem);
            }
            DrainFinding::RulesFailed(error) => {
                self.tracked.memo.cordon = None;
                self.drain_failed(node_name, error);
            }
            DrainFinding::Planned {
                plan,
                cached,
                grace_period_seconds,
            } => {
                self.tracked.memo.cordon = None;
                self.drain_pods(node_name, header, &plan, cached, grace_period_seconds);
            }
        }
    }

    pub(super) fn drain_failed(&mut self, node: &str, error: String) {
        tracing::error!(machine = %self.key, node, "Error draining Node: {error}");
        self.set_legacy(legacy_false(
            legacy::DRAINING_SUCCEEDED,
            legacy::DRAINING_FAILED,
            Severity::Warning,
            &error,
        ));
        self.set_deleting(
            reason::DRAINING_NODE,
            "Error draining Node, please check controller logs for errors",
        );
        self.event(
            EventType::Warning,
            "FailedDrainNode",
            format!("error draining Machine's node {node:?}: {error}"),
            format!("FailedDrainNode:{error}"),
        );
    }

    /// The eviction plan for the Node's classified pods, and what follows from it.
    pub(super) fn drain_pods(
        &mut self,
        node_name: &str,
        header: String,
        plan: &DrainPlan<'_>,
        cached: &[CachedPod],
        grace_period_seconds: Option<i64>,
    ) {
        if let Some(error) = plan.error() {
            return self.drain_failed(node_name, error);
        }
        // Forget pods that are gone or deleting: their evictions are over. Pods still on the
        // Node are found in `cached` (both in key order: one walk) rather than in the store.
        let store = self.store;
        let mut on_node = cached.iter().peekable();
        self.tracked.memo.evictions.retain(|k, _| {
            while on_node.next_if(|c| c.key < *k).is_some() {}
            match on_node.next_if(|c| c.key == *k) {
                Some(c) => c.deletion_timestamp.is_none(),
                None => store.pod(k).is_some_and(|p| !p.meta.is_deleting()),
            }
        });
        if let Some((at, pod)) = plan.next_eviction_retry {
            self.wake_at(at, DeletionTimer::EvictionRetry, Some(pod));
        }
        if let Some((at, pod)) = plan.next_skip {
            self.wake_at(at, DeletionTimer::SkipDeletedPod, Some(pod));
        }
        self.evict(node_name, plan, grace_period_seconds);
        if plan.is_complete() {
            return self.drain_completed(node_name);
        }
        self.report_blocked_drain(node_name, plan);
        tracing::debug!(
            machine = %self.key,
            node = node_name,
            remaining = plan.deletion_timestamp_set.len() + plan.awaiting_answer.len(),
            failed = plan.failed.len(),
            "Drain not completed yet, requeuing in {}",
            drain::EVICTION_RETRY_INTERVAL
        );
        if self.conditions_in_flight {
            return;
        }
        let message = drain::condition_message_after(header, plan);
        self.set_legacy(legacy_false(
            legacy::DRAINING_SUCCEEDED,
            legacy::DRAINING,
            Severity::Info,
            &message,
        ));
        self.set_deleting(reason::DRAINING_NODE, message);
    }

    pub(super) fn cordon(&mut self, node_name: &str) {
        let node_key = self.node_key(node_name);
        let in_flight = self.cx.is_in_flight(crate::ActionKind::Cordon, &node_key);
        let attempt = self.tracked.memo.cordon.clone();
        if attempt_due(&attempt, in_flight, self.now) {
            // Upstream patches the Machine before draining, so the start time is visible.
            self.flush_status();
            self.plan.push(
                Action::Cordon {
                    node: Target {
                        key: node_key,
                        api_version: "v1".to_string(),
                    },
                },
                format!(
                    "Machine {} is being deleted: cordoning Node {node_name} before draining it",
                    self.m.meta.name
                ),
                Record::Cordon(Attempt::requested(attempt.as_ref(), self.now)),
            );
        } else if let Some(a) = attempt
            .as_ref()
            .filter(|a| a.failure().is_some() && !in_flight)
        {
            // In flight, its answer reconciles the Machine; a wake-up now would be in the past
            // and have the caller tick at once, for as long as the request is out.
            let node_key = self.node_key(node_name);
            self.wake_at(
                a.at().saturating_add(API_RETRY_INTERVAL),
                DeletionTimer::ApiRetry,
                Some(&node_key),
            );
        }
        if let Some(f) = self
            .tracked
            .memo
            .cordon
            .as_ref()
            .and_then(|a| a.failure().map(str::to_string))
        {
            self.drain_failed(node_name, format!("failed to cordon Node: {f}"));
        }
    }

    pub(super) fn evict(
        &mut self,
        node_name: &str,
        plan: &DrainPlan<'_>,
        grace_period_seconds: Option<i64>,
    ) {
        if plan.evict_now.is_empty() {
            return;
        }
        self.flush_status();
        tracing::info!(
            machine = %self.key,
            node = node_name,
            pods = %drain::list_to_string(
                &plan.evict_now.iter().map(|k| format!("{}/{}", k.namespace, k.name)).collect::<Vec<_>>(),
                5
            ),
            "Draining Node"
        );
        for key in &plan.evict_now {
            let previous = self.tracked.memo.evictions.get(*key);
            let why = match previous.and_then(EvictionAttempt::failure) {
                Some(f) => format!(
                    "retrying eviction {} after it failed ({f})",
                    drain::EVICTION_RETRY_INTERVAL
                ),
                None => format!(
                    "draining Node {node_name}: Machine {} is being deleted",
                    self.m.meta.name
                ),
            };
            let attempt = EvictionAttempt::requested(previous, self.now);
            self.plan.push(
                Action::Evict {
                    pod: Target {
                        key: (*key).clone(),
                        api_version: "v1".to_string(),
                    },
                    grace_period_seconds,
                },
                why,
                Record::Eviction {
                    pod: (*key).clone(),
                    attempt,
                },
            );
        }
    }

    pub(super) fn drain_completed(&mut self, node_name: &str) {
        if !self
            .conditions
            .legacy(legacy::DRAINING_SUCCEEDED)
            .is_some_and(Condition::is_true)
        {
            tracing::info!(machine = %self.key, node = node_name, "Drain completed");
        }
        self.set_legacy(legacy_true(legacy::DRAINING_SUCCEEDED));
        self.event(
            EventType::Normal,
            "SuccessfulDrainNode",
            format!("success draining Machine's node {node_name:?}"),
            "SuccessfulDrainNode".to_string(),
        );
    }

    /// A Warning event when a drain's evictions are refused by a PodDisruptionBudget (once
    /// per round of eviction attempts; repeats join one Event's count).
    pub(super) fn report_blocked_drain(&mut self, node_name: &str, plan: &DrainPlan<'_>) {
        let Some((blocked, pods)) = drain::blocked_by_disruption_budget(plan) else {
            return;
        };
        // The evictions just planned count as tried now.
        self.apply();
        let latest = pods
            .iter()
            .filter_map(|k| self.tracked.memo.evictions.get(*k).map(EvictionAttempt::at))
            .max();
        if latest.is_none() || latest <= self.tracked.memo.drain_blocked_reported {
            return;
        }
        let message = format!(
            "Drain of Node {node_name} (Machine {}) is blocked by a PodDisruptionBudget: {blocked}",
            self.m.meta.name
        );
        let issued = self.issue_now(
            Action::RecordEvent {
                regarding: self.target.clone(),
                type_: EventType::Warning,
                reason: "DrainBlocked".to_string(),
                message: message.clone(),
            },
            message,
        );
        if issued.recorded() {
            self.tracked.memo.drain_blocked_reported = latest;
        }
    }
}
