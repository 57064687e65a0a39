//! The eviction plan: upstream's `EvictPods` buckets, computed from the classified pods and
//! what the controller remembers of earlier evictions.

use super::EVICTION_RETRY_INTERVAL;
use super::filter::{DrainBehavior, PodDeleteStatus, StatusReason};
use super::refusal::{EvictionFailure, EvictionRefusal};
use crate::input::ApiOutcome;
use crate::model::ObjectKey;
use crate::outcome::Refusal;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API's answer to an eviction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvictionOutcome {
    /// Accepted: the pod gets a deletionTimestamp (observed later).
    Evicted,
    /// The pod was already gone (does not block the drain).
    NotFound,
    /// Refused or failed, with the message the condition shows.
    Failed(EvictionFailure),
}

/// The pods whose evictions failed with one message, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedPods<'a> {
    pub refusal: EvictionRefusal,
    pub pods: Vec<&'a ObjectKey>,
}

/// The last eviction of one pod: when it was issued and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvictionAttempt {
    /// Issued, no answer yet. A retry after a failure keeps that failure so the condition
    /// keeps showing why the pod is still there.
    Requested {
        at: Timestamp,
        previous_failure: Option<EvictionFailure>,
    },
    Evicted {
        at: Timestamp,
    },
    NotFound {
        at: Timestamp,
    },
    Failed {
        at: Timestamp,
        failure: EvictionFailure,
    },
}

impl EvictionAttempt {
    /// The eviction issued at `now`, after `previous` (whose failure it keeps showing).
    pub fn requested(previous: Option<&EvictionAttempt>, now: Timestamp) -> Self {
        EvictionAttempt::Requested {
            at: now,
            previous_failure: previous.and_then(|a| a.failure()).cloned(),
        }
    }

    /// The attempt once `outcome` answers it.
    pub fn answer(&mut self, outcome: EvictionOutcome) {
        let at = self.at();
        *self = match outcome {
            EvictionOutcome::Evicted => EvictionAttempt::Evicted { at },
            EvictionOutcome::NotFound => EvictionAttempt::NotFound { at },
            EvictionOutcome::Failed(failure) => EvictionAttempt::Failed { at, failure },
        };
    }

    pub fn at(&self) -> Timestamp {
        match self {
            EvictionAttempt::Requested { at, .. }
            | EvictionAttempt::Evicted { at }
            | EvictionAttempt::NotFound { at }
            | EvictionAttempt::Failed { at, .. } => *at,
        }
    }

    /// The failure to show: the answer's, or the previous one while a retry is unanswered.
    pub fn failure(&self) -> Option<&EvictionFailure> {
        match self {
            EvictionAttempt::Requested {
                previous_failure, ..
            } => previous_failure.as_ref(),
            EvictionAttempt::Evicted { .. } | EvictionAttempt::NotFound { .. } => None,
            EvictionAttempt::Failed { failure, .. } => Some(failure),
        }
    }

    /// The earliest time this pod may be evicted again.
    pub fn retry_at(&self) -> Timestamp {
        self.at().saturating_add(EVICTION_RETRY_INTERVAL)
    }
}

/// An eviction answer as upstream records it, with the failure message it shows.
pub fn eviction_failure_message(outcome: &ApiOutcome) -> EvictionOutcome {
    match outcome {
        ApiOutcome::Ok { .. } | ApiOutcome::NotSent { .. } => EvictionOutcome::Evicted,
        ApiOutcome::NotFound => EvictionOutcome::NotFound,
        ApiOutcome::Refused {
            refusal: Refusal::NamespaceTerminating,
            ..
        } => EvictionOutcome::Failed(EvictionFailure::of(
            outcome,
            super::NAMESPACE_TERMINATING_FAILURE.to_string(),
        )),
        // A 429 already carries "<status message> <causes joined by ','>".
        ApiOutcome::Refused { message, .. }
        | ApiOutcome::Conflict { message }
        | ApiOutcome::Error { message, .. }
        | ApiOutcome::Unreachable { message } => {
            EvictionOutcome::Failed(EvictionFailure::of(outcome, message.clone()))
        }
    }
}

/// One pod on the Node with its classification and the one pod field the plan reads (so a
/// plan can be built from classifications kept between passes, without the pods).
#[derive(Clone, Debug)]
pub struct PodDrain<'a> {
    pub key: &'a ObjectKey,
    pub deletion_timestamp: Option<Timestamp>,
    pub status: PodDeleteStatus,
}

/// What a plan reads of one pod: implemented by [`PodDrain`] and by the classifications a
/// deletion keeps between passes, so a plan is built from those without copying them.
pub trait PodFacts {
    fn key(&self) -> &ObjectKey;
    fn deletion_timestamp(&self) -> Option<Timestamp>;
    fn status(&self) -> &PodDeleteStatus;
}

impl PodFacts for PodDrain<'_> {
    fn key(&self) -> &ObjectKey {
        self.key
    }
    fn deletion_timestamp(&self) -> Option<Timestamp> {
        self.deletion_timestamp
    }
    fn status(&self) -> &PodDeleteStatus {
        &self.status
    }
}

/// Upstream's eviction buckets. Pod lists keep the input order (namespace/name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainPlan<'a> {
    /// Evict these now (no eviction in flight, none tried within the retry interval).
    pub evict_now: Vec<&'a ObjectKey>,
    /// Evictions issued (now or earlier) whose answer has not come back, with no earlier
    /// failure to show: reported like an accepted eviction.
    pub awaiting_answer: Vec<&'a ObjectKey>,
    pub deletion_timestamp_set: Vec<&'a ObjectKey>,
    /// Failure message → why and which pods, messages sorted.
    pub failed: BTreeMap<String, FailedPods<'a>>,
    pub not_found: Vec<&'a ObjectKey>,
    pub trigger_eviction_later: Vec<&'a ObjectKey>,
    pub wait_completed_now: Vec<&'a ObjectKey>,
    pub wait_completed_later: Vec<&'a ObjectKey>,
    pub ignored: Vec<&'a ObjectKey>,
    /// Classification errors: message → pods. Any entry fails the whole drain.
    pub errors: BTreeMap<String, Vec<&'a ObjectKey>>,
    /// When something in the plan changes by the clock alone, and for which pod: the first
    /// eviction retry to become due, and the first deleted pod on an unreachable Node to
    /// start being skipped.
    pub next_eviction_retry: Option<(Timestamp, &'a ObjectKey)>,
    pub next_skip: Option<(Timestamp, &'a ObjectKey)>,
}

/// Keeps the earliest (deadline, pod) in `slot`; the first pod of a tie.
fn wake<'a>(slot: &mut Option<(Timestamp, &'a ObjectKey)>, at: Timestamp, pod: &'a ObjectKey) {
    if slot.is_none_or(|(w, _)| at < w) {
        *slot = Some((at, pod));
    }
}

impl<'a> DrainPlan<'a> {
    /// Builds the plan. `pods` must be sorted by namespace/name (the store's key order);
    /// `in_flight(pod)` says whether an eviction of that pod is still unanswered;
    /// `skip_wait_for_delete_timeout_seconds` is the skipDeleted threshold in use (0 = off).
    pub fn build<P: PodFacts>(
        pods: &'a [P],
        attempts: &BTreeMap<ObjectKey, EvictionAttempt>,
        now: Timestamp,
        skip_wait_for_delete_timeout_seconds: i64,
        in_flight: impl Fn(&ObjectKey) -> bool,
    ) -> DrainPlan<'a> {
        debug_assert!(pods.windows(2).all(|w| w[0].key() <= w[1].key()));
        let mut plan = DrainPlan::default();
        let min_order = pods
            .iter()
            .filter(|p| p.status().blocks())
            .map(|p| p.status().order.unwrap_or(0))
            .min()
            .unwrap_or(0);
        // Pods and attempts are both in key order: walk them together instead of searching.
        let mut attempts = attempts.iter().peekable();
        let mut attempt_of = |key: &ObjectKey| {
            while attempts.next_if(|(k, _)| *k < key).is_some() {}
            attempts.next_if(|(k, _)| *k == key).map(|(_, a)| a)
        };
        for p in pods {
            let (key, status) = (p.key(), p.status());
            if status.reason == StatusReason::Error {
                let message = if status.message.is_empty() {
                    "unexpected error".to_string()
                } else {
                    status.message.clone()
                };
                plan.errors.entry(message).or_default().push(key);
                continue;
            }
            let order = status.order.unwrap_or(0);
            match (status.behavior, p.deletion_timestamp()) {
                (DrainBehavior::Drain, None) if order == min_order => {
                    plan.place_eviction(key, attempt_of(key), now, &in_flight);
                }
                (DrainBehavior::Drain, None) => plan.trigger_eviction_later.push(key),
                (DrainBehavior::WaitCompleted, _) if order == min_order => {
                    plan.wait_completed_now.push(key)
                }
                (DrainBehavior::WaitCompleted, _) => plan.wait_completed_later.push(key),
                (DrainBehavior::Drain, Some(at)) => {
                    plan.deletion_timestamp_set.push(key);
                    if skip_wait_for_delete_timeout_seconds > 0 {
                        // Skipped once whole seconds since deletion exceed the threshold.
                        let skip_at = at.saturating_add(crate::time::Duration::from_secs(
                            skip_wait_for_delete_timeout_seconds + 1,
                        ));
                        wake(&mut plan.next_skip, skip_at, key);
                    }
                }
                (DrainBehavior::Skip, _) => plan.ignored.push(key),
            }
        }
        plan
    }

    fn place_eviction(
        &mut self,
        key: &'a ObjectKey,
        attempt: Option<&EvictionAttempt>,
        now: Timestamp,
        in_flight: &impl Fn(&ObjectKey) -> bool,
    ) {
        let Some(attempt) = attempt else {
            self.evict_now.push(key);
            self.awaiting_answer.push(key);
            return;
        };
        let due = now >= attempt.retry_at();
        let unanswered = match attempt {
            EvictionAttempt::Requested { .. } if in_flight(key) => true,
            // Issued before a restart and never answered: try again.
            EvictionAttempt::Requested { .. } => {
                crate::mark::hit("eviction_issued_again_after_a_restart");
                self.evict_now.push(key);
                true
            }
            _ if due => {
                if matches!(attempt, EvictionAttempt::Failed { .. }) {
                    crate::mark::hit("eviction_retried_after_a_failure");
                }
                self.evict_now.push(key);
                true
            }
            EvictionAttempt::Evicted { .. } => {
                self.deletion_timestamp_set.push(key);
                wake(&mut self.next_eviction_retry, attempt.retry_at(), key);
                false
            }
            EvictionAttempt::NotFound { .. } => {
                self.not_found.push(key);
                wake(&mut self.next_eviction_retry, attempt.retry_at(), key);
                false
            }
            EvictionAttempt::Failed { failure, .. } => {
                self.fail(failure, key);
                wake(&mut self.next_eviction_retry, attempt.retry_at(), key);
                false
            }
        };
        if unanswered {
            match attempt.failure() {
                Some(failure) => self.fail(failure, key),
                None => self.awaiting_answer.push(key),
            }
        }
    }

    fn fail(&mut self, failure: &EvictionFailure, key: &'a ObjectKey) {
        self.failed
            .entry(failure.message.clone())
            .or_insert_with(|| FailedPods {
                refusal: failure.refusal,
                pods: Vec::new(),
            })
            .pods
            .push(key);
    }

    /// The earliest clock-driven change of the plan.
    pub fn next_wake(&self) -> Option<Timestamp> {
        [self.next_eviction_retry, self.next_skip]
            .into_iter()
            .flatten()
            .map(|(at, _)| at)
            .min()
    }

    /// Upstream's completion rule: nothing evicted now, nothing failed, nothing waited for.
    pub fn is_complete(&self) -> bool {
        self.evict_now.is_empty()
            && self.awaiting_answer.is_empty()
            && self.deletion_timestamp_set.is_empty()
            && self.failed.is_empty()
            && self.trigger_eviction_later.is_empty()
            && self.wait_completed_now.is_empty()
            && self.wait_completed_later.is_empty()
    }

    /// The aggregated classification error, as upstream's drain returns it.
    pub fn error(&self) -> Option<String> {
        if self.errors.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .errors
            .iter()
            .map(|(msg, pods)| {
                let names: Vec<String> = pods
                    .iter()
                    .map(|k| format!("{}/{}", k.namespace, k.name))
                    .collect();
                format!("Pods with error {msg:?}: {}", names.join(", "))
            })
            .collect();
        let joined = if parts.len() == 1 {
            parts.into_iter().next().unwrap_or_default()
        } else {
            format!("[{}]", parts.join(", "))
        };
        Some(format!("failed to get Pods for eviction: {joined}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, Pod};
    use crate::testing::{pod, workload};
    use crate::time::Duration;

    const NOW: Timestamp = Timestamp(100_000);

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(workload("c1"), Kind::Pod, "app", name)
    }

    fn status(behavior: DrainBehavior, order: Option<i32>) -> PodDeleteStatus {
        PodDeleteStatus {
            behavior,
            order,
            reason: StatusReason::Okay,
            message: String::new(),
        }
    }

    struct Fixture {
        keys: Vec<ObjectKey>,
        pods: Vec<Pod>,
        statuses: Vec<PodDeleteStatus>,
    }

    impl Fixture {
        fn new(rows: &[(&str, DrainBehavior, Option<i32>, bool)]) -> Fixture {
            let mut f = Fixture {
                keys: vec![],
                pods: vec![],
                statuses: vec![],
            };
            for (name, behavior, order, deleting) in rows {
                f.keys.push(key(name));
                let mut p = pod("app", name, "n1");
                if *deleting {
                    p.meta.deletion_timestamp = Some(Timestamp(NOW.0 - 500));
                }
                f.pods.push(p);
                f.statuses.push(status(*behavior, *order));
            }
            f
        }
        fn drains(&self) -> Vec<PodDrain<'_>> {
            (0..self.keys.len())
                .map(|i| PodDrain {
                    key: &self.keys[i],
                    deletion_timestamp: self.pods[i].meta.deletion_timestamp,
                    status: self.statuses[i].clone(),
                })
                .collect()
        }
    }

    fn names(keys: &[&ObjectKey]) -> Vec<String> {
        keys.iter().map(|k| k.name.to_string()).collect()
    }

    #[test]
    fn buckets_follow_the_minimum_order() {
        use DrainBehavior::*;
        let f = Fixture::new(&[
            ("a-now", Drain, None, false),
            ("b-later", Drain, Some(10), false),
            ("c-deleting", Drain, Some(10), true),
            ("d-wait-now", WaitCompleted, Some(0), false),
            ("e-wait-later", WaitCompleted, Some(0), false),
            ("f-skip", Skip, None, false),
            ("g-neg", Drain, Some(-5), false),
        ]);
        let mut drains = f.drains();
        // Rule-assigned order for the WaitCompleted pod that is "later".
        drains[4].status.order = Some(3);
        let plan = DrainPlan::build(&drains, &BTreeMap::new(), NOW, 0, |_| false);
        assert_eq!(names(&plan.evict_now), ["g-neg"]);
        assert_eq!(names(&plan.trigger_eviction_later), ["a-now", "b-later"]);
        assert_eq!(names(&plan.deletion_timestamp_set), ["c-deleting"]);
        assert!(plan.wait_completed_now.is_empty());
        assert_eq!(
            names(&plan.wait_completed_later),
            ["d-wait-now", "e-wait-later"]
        );
        assert_eq!(names(&plan.ignored), ["f-skip"]);
        assert!(!plan.is_complete());
    }

    #[test]
    fn deleting_pods_count_towards_the_minimum_order() {
        use DrainBehavior::*;
        let f = Fixture::new(&[("a", Drain, Some(1), true), ("b", Drain, Some(2), false)]);
        let drains = f.drains();
        let plan = DrainPlan::build(&drains, &BTreeMap::new(), NOW, 0, |_| false);
        assert!(plan.evict_now.is_empty());
        assert_eq!(names(&plan.trigger_eviction_later), ["b"]);
    }

    #[test]
    fn only_skipped_pods_means_complete() {
        use DrainBehavior::*;
        let f = Fixture::new(&[("ds", Skip, None, false)]);
        let drains = f.drains();
        let plan = DrainPlan::build(&drains, &BTreeMap::new(), NOW, 0, |_| false);
        assert!(plan.is_complete());
    }

    #[test]
    fn eviction_outcomes_are_bucketed_and_retried_only_after_the_interval() {
        use DrainBehavior::*;
        let f = Fixture::new(&[
            ("a-ok", Drain, None, false),
            ("b-404", Drain, None, false),
            ("c-pdb", Drain, None, false),
            ("d-flight", Drain, None, false),
            ("e-old", Drain, None, false),
        ]);
        let recent = Timestamp(NOW.0 - 19_999);
        let old = Timestamp(NOW.0 - 20_000);
        let pdb = || EvictionFailure::from("pdb");
        let attempts: BTreeMap<ObjectKey, EvictionAttempt> = [
            ("a-ok", EvictionAttempt::Evicted { at: recent }),
            ("b-404", EvictionAttempt::NotFound { at: recent }),
            (
                "c-pdb",
                EvictionAttempt::Failed {
                    at: recent,
                    failure: pdb(),
                },
            ),
            (
                "d-flight",
                EvictionAttempt::Requested {
                    at: recent,
                    previous_failure: None,
                },
            ),
            (
                "e-old",
                EvictionAttempt::Failed {
                    at: old,
                    failure: pdb(),
                },
            ),
        ]
        .into_iter()
        .map(|(n, attempt)| (key(n), attempt))
        .collect();
        let drains = f.drains();
        let plan = DrainPlan::build(&drains, &attempts, NOW, 0, |k| k.name == "d-flight");
        assert_eq!(names(&plan.deletion_timestamp_set), ["a-ok"]);
        assert_eq!(names(&plan.not_found), ["b-404"]);
        // A retried pod keeps showing its last failure until the retry is answered.
        assert_eq!(names(&plan.failed["pdb"].pods), ["c-pdb", "e-old"]);
        assert_eq!(names(&plan.awaiting_answer), ["d-flight"]);
        assert_eq!(names(&plan.evict_now), ["e-old"]);
        assert_eq!(plan.next_wake(), Some(Timestamp(NOW.0 + 1)));
    }

    #[test]
    fn an_eviction_attempt_keeps_its_failure_until_a_retry_is_answered() {
        let t = |ms| Timestamp(NOW.0 + ms);
        let mut first = EvictionAttempt::requested(None, t(0));
        assert_eq!(first.failure(), None);
        first.answer(EvictionOutcome::Failed("pdb".into()));
        assert_eq!(
            first,
            EvictionAttempt::Failed {
                at: t(0),
                failure: "pdb".into()
            }
        );
        assert_eq!(first.retry_at(), t(20_000));

        let mut retry = EvictionAttempt::requested(Some(&first), t(20_000));
        assert_eq!(retry.failure(), Some(&"pdb".into()));
        assert_eq!(retry.at(), t(20_000));
        retry.answer(EvictionOutcome::Evicted);
        assert_eq!(retry, EvictionAttempt::Evicted { at: t(20_000) });
        assert_eq!(retry.failure(), None);

        let mut after_success = EvictionAttempt::requested(Some(&retry), t(40_000));
        assert_eq!(after_success.failure(), None);
        after_success.answer(EvictionOutcome::NotFound);
        assert_eq!(after_success, EvictionAttempt::NotFound { at: t(40_000) });
    }

    #[test]
    fn not_found_alone_does_not_block_completion() {
        use DrainBehavior::*;
        let f = Fixture::new(&[("gone", Drain, None, false)]);
        let attempts = [(key("gone"), EvictionAttempt::NotFound { at: NOW })]
            .into_iter()
            .collect();
        let drains = f.drains();
        let plan = DrainPlan::build(&drains, &attempts, NOW, 0, |_| false);
        assert!(plan.is_complete());
    }

    #[test]
    fn an_unanswered_eviction_from_before_a_restart_is_issued_again() {
        let _mark = crate::mark::check("eviction_issued_again_after_a_restart");
        use DrainBehavior::*;
        let f = Fixture::new(&[("a", Drain, None, false)]);
        let attempts = [(
            key("a"),
            EvictionAttempt::Requested {
                at: NOW,
                previous_failure: None,
            },
        )]
        .into_iter()
        .collect();
        let drains = f.drains();
        let plan = DrainPlan::build(&drains, &attempts, NOW, 0, |_| false);
        assert_eq!(names(&plan.evict_now), ["a"]);
    }

    #[test]
    fn deleting_pods_on_an_unreachable_node_wake_the_drain_when_they_become_skippable() {
        use DrainBehavior::*;
        let f = Fixture::new(&[("a", Drain, None, true)]);
        let drains = f.drains();
        let plan = DrainPlan::build(&drains, &BTreeMap::new(), NOW, 1, |_| false);
        // Deleted at NOW-500ms; skipped once 2 whole seconds have passed.
        assert_eq!(plan.next_wake(), Some(Timestamp(NOW.0 - 500 + 2_000)));
        let _ = Duration::ZERO;
    }

    #[test]
    fn classification_errors_are_aggregated_like_upstream() {
        use DrainBehavior::*;
        let f = Fixture::new(&[("a", Drain, None, false), ("b", Drain, None, false)]);
        let mut drains = f.drains();
        for d in &mut drains {
            d.status.reason = StatusReason::Error;
            d.status.message = "Pod Namespace does not exist".into();
        }
        drains[1].status.message.clear();
        let plan = DrainPlan::build(&drains, &BTreeMap::new(), NOW, 0, |_| false);
        assert_eq!(
            plan.error().unwrap(),
            "failed to get Pods for eviction: [Pods with error \"Pod Namespace does not exist\": \
             app/a, Pods with error \"unexpected error\": app/b]"
        );
    }

    #[test]
    fn eviction_answers_map_to_upstream_messages() {
        let failed = |refusal, message: &str| {
            EvictionOutcome::Failed(EvictionFailure {
                refusal,
                message: message.to_string(),
            })
        };
        assert_eq!(
            eviction_failure_message(&crate::testing::forbidden("x", true)),
            failed(
                EvictionRefusal::NamespaceTerminating,
                "Cannot evict pod from terminating namespace: unable to create eviction \
                 (kube-controller-manager should set deletionTimestamp)"
            )
        );
        let pdb = "Cannot evict pod as it would violate the pod's disruption budget. \
                   The disruption budget web needs 1 healthy pods";
        assert_eq!(
            eviction_failure_message(&crate::testing::too_many_requests(pdb)),
            failed(EvictionRefusal::DisruptionBudget, pdb)
        );
        assert_eq!(
            eviction_failure_message(&ApiOutcome::NotFound),
            EvictionOutcome::NotFound
        );
        assert_eq!(
            eviction_failure_message(&ApiOutcome::Ok { object: None }),
            EvictionOutcome::Evicted
        );
        assert_eq!(
            eviction_failure_message(&ApiOutcome::Error {
                code: 500,
                message: "etcd down".into()
            }),
            failed(EvictionRefusal::Other, "etcd down")
        );
    }
}
