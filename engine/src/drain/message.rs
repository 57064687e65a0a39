//! The condition message of an unfinished drain (upstream's `EvictionResult.ConditionMessage`).

use super::plan::DrainPlan;
use super::{CONDITION_FAILURE_MESSAGES_MAX, CONDITION_POD_NAMES_MAX};
use crate::model::ObjectKey;
use crate::time::Timestamp;
use std::fmt::Write;

use super::refusal::{EvictionRefusal, PDB_PHRASE};

const PDB_PHRASE_LOWER: &str = "cannot evict pod as it would violate the pod's disruption budget.";

/// Upstream's `ListToString`: the first `max` entries, then `... (K more)`, joined by ", ".
pub fn list_to_string<S: AsRef<str>>(items: &[S], max: usize) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().take(max).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(item.as_ref());
    }
    if items.len() > max {
        let _ = write!(out, ", ... ({} more)", items.len() - max);
    }
    out
}

fn push_pod_name(out: &mut String, key: &ObjectKey) {
    if !key.namespace.is_empty() {
        out.push_str(&key.namespace);
        out.push('/');
    }
    out.push_str(&key.name);
}

/// `a, b, c, ... (K more)` for a list of `total` pods whose first names are `shown`.
fn pods_of<'k>(shown: impl Iterator<Item = &'k ObjectKey>, total: usize) -> String {
    let mut out = String::new();
    for (i, key) in shown.take(CONDITION_POD_NAMES_MAX).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_pod_name(&mut out, key);
    }
    if total > CONDITION_POD_NAMES_MAX {
        let _ = write!(out, ", ... ({} more)", total - CONDITION_POD_NAMES_MAX);
    }
    out
}

fn pods(keys: &[&ObjectKey]) -> String {
    pods_of(keys.iter().copied(), keys.len())
}

/// The first `n` keys of the sorted union of two sorted, disjoint lists: only the names shown
/// are merged, so a drain of thousands of pods does not sort them on every pass.
fn merged_head<'k>(a: &[&'k ObjectKey], b: &[&'k ObjectKey], n: usize) -> Vec<&'k ObjectKey> {
    debug_assert!(a.is_sorted() && b.is_sorted());
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x <= y => {
                i += 1;
                x
            }
            (_, Some(y)) => {
                j += 1;
                y
            }
            (Some(x), None) => {
                i += 1;
                x
            }
            (None, None) => break,
        };
        out.push(*next);
    }
    out
}

fn pod_word(n: usize) -> &'static str {
    if n == 1 { "Pod" } else { "Pods" }
}

/// The multi-line `DrainingSucceeded` / `Deleting` message of a drain that is not finished.
/// Evictions still unanswered (with no earlier failure) are shown as having their
/// deletionTimestamp set, which is what upstream reports for an accepted eviction in the same
/// pass.
pub fn condition_message(plan: &DrainPlan<'_>, drain_started: Timestamp) -> String {
    condition_message_after(condition_header(drain_started), plan)
}

/// The first line of the message: all it says before the pods are known.
pub fn condition_header(drain_started: Timestamp) -> String {
    format!(
        "Drain not completed yet (started at {}):",
        drain_started.to_rfc3339()
    )
}

/// [`condition_message`] continuing a [`condition_header`] already made.
pub fn condition_message_after(header: String, plan: &DrainPlan<'_>) -> String {
    let mut msg = header;
    let deleting = plan.deletion_timestamp_set.len() + plan.awaiting_answer.len();
    if deleting > 0 {
        let shown = merged_head(
            &plan.deletion_timestamp_set,
            &plan.awaiting_answer,
            CONDITION_POD_NAMES_MAX,
        );
        let _ = write!(
            msg,
            "\n* {} {}: deletionTimestamp set, but still not removed from the Node",
            pod_word(deleting),
            pods_of(shown.into_iter(), deleting)
        );
    }
    // BTreeMap keys are already sorted lexicographically, as upstream sorts them.
    for (failure, failed) in plan.failed.iter().take(CONDITION_FAILURE_MESSAGES_MAX) {
        let keys = &failed.pods;
        let text = match failed.refusal {
            EvictionRefusal::DisruptionBudget => failure.replace(PDB_PHRASE, PDB_PHRASE_LOWER),
            _ => format!("failed to evict Pod, {failure}"),
        };
        let _ = write!(msg, "\n* {} {}: {text}", pod_word(keys.len()), pods(keys));
    }
    if plan.failed.len() > CONDITION_FAILURE_MESSAGES_MAX {
        let others: usize = plan
            .failed
            .values()
            .skip(CONDITION_FAILURE_MESSAGES_MAX)
            .map(|f| f.pods.len())
            .sum();
        let _ = write!(msg, "\n* {others} {} with other issues", pod_word(others));
    }
    if !plan.wait_completed_now.is_empty() {
        let _ = write!(
            msg,
            "\n* {} {}: waiting for completion",
            pod_word(plan.wait_completed_now.len()),
            pods(&plan.wait_completed_now)
        );
    }
    if !plan.trigger_eviction_later.is_empty() {
        let _ = write!(
            msg,
            "\nAfter above Pods have been removed from the Node, the following Pods will be evicted: {}",
            pods(&plan.trigger_eviction_later)
        );
    }
    if !plan.wait_completed_later.is_empty() {
        let _ = write!(
            msg,
            "\nAfter above Pods have been removed from the Node, waiting for the following Pods to complete without eviction: {}",
            pods(&plan.wait_completed_later)
        );
    }
    msg
}

/// The pods a PodDisruptionBudget keeps from being evicted, as an operator reads them (`Pod
/// app/web-1: cannot evict pod as it would violate the pod's disruption budget. The
/// disruption budget web needs 2 healthy pods and has 2 currently`), and their keys.
pub fn blocked_by_disruption_budget<'p>(
    plan: &DrainPlan<'p>,
) -> Option<(String, Vec<&'p ObjectKey>)> {
    let mut parts = Vec::new();
    let mut keys = Vec::new();
    for (failure, failed) in &plan.failed {
        if failed.refusal != EvictionRefusal::DisruptionBudget {
            continue;
        }
        let pods_refused = &failed.pods;
        let text = failure.replace(PDB_PHRASE, PDB_PHRASE_LOWER);
        parts.push(format!(
            "{} {}: {text}",
            pod_word(pods_refused.len()),
            pods(pods_refused)
        ));
        keys.extend(pods_refused.iter().copied());
    }
    (!parts.is_empty()).then(|| (parts.join("; "), keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::FailedPods;
    use crate::model::Kind;
    use crate::testing::workload;

    fn keys(names: &[&str]) -> Vec<ObjectKey> {
        names
            .iter()
            .map(|n| {
                let (ns, name) = n.split_once('/').unwrap_or(("", n));
                ObjectKey::new(workload("c1"), Kind::Pod, ns, name)
            })
            .collect()
    }

    fn refs(keys: &[ObjectKey]) -> Vec<&ObjectKey> {
        keys.iter().collect()
    }

    const START: Timestamp = Timestamp(1_704_067_260_000); // 2024-01-01T00:01:00Z

    #[test]
    fn list_to_string_truncates_like_upstream() {
        assert_eq!(list_to_string(&["a", "b", "c"], 3), "a, b, c");
        assert_eq!(
            list_to_string(&["a", "b", "c", "d", "e", "f", "g"], 3),
            "a, b, c, ... (4 more)"
        );
        assert_eq!(list_to_string::<&str>(&[], 3), "");
    }

    #[test]
    fn header_only_when_nothing_is_listed() {
        let plan = DrainPlan::default();
        assert_eq!(
            condition_message(&plan, START),
            "Drain not completed yet (started at 2024-01-01T00:01:00Z):"
        );
    }

    #[test]
    fn full_message_matches_upstream_byte_for_byte() {
        let deleting = keys(&["ns1/pod-1", "ns1/pod-2", "ns1/pod-3", "ns1/pod-4"]);
        let pdb = keys(&["ns2/pod-5"]);
        let other = keys(&["ns3/pod-6", "ns3/pod-7"]);
        let wait_now = keys(&["ns4/pod-8"]);
        let later = keys(&["ns5/pod-9", "ns5/pod-10"]);
        let wait_later = keys(&["pod-11"]);
        let mut plan = DrainPlan {
            deletion_timestamp_set: refs(&deleting),
            wait_completed_now: refs(&wait_now),
            trigger_eviction_later: refs(&later),
            wait_completed_later: refs(&wait_later),
            ..Default::default()
        };
        plan.failed.insert(
            "Cannot evict pod as it would violate the pod's disruption budget. \
             The disruption budget pdb-5 needs 1 healthy pods and has 1 currently"
                .into(),
            FailedPods {
                refusal: EvictionRefusal::DisruptionBudget,
                pods: refs(&pdb),
            },
        );
        plan.failed.insert(
            "some other error".into(),
            FailedPods {
                refusal: EvictionRefusal::Other,
                pods: refs(&other),
            },
        );
        let want = "Drain not completed yet (started at 2024-01-01T00:01:00Z):
* Pods ns1/pod-1, ns1/pod-2, ns1/pod-3, ... (1 more): deletionTimestamp set, but still not removed from the Node
* Pod ns2/pod-5: cannot evict pod as it would violate the pod's disruption budget. The disruption budget pdb-5 needs 1 healthy pods and has 1 currently
* Pods ns3/pod-6, ns3/pod-7: failed to evict Pod, some other error
* Pod ns4/pod-8: waiting for completion
After above Pods have been removed from the Node, the following Pods will be evicted: ns5/pod-9, ns5/pod-10
After above Pods have been removed from the Node, waiting for the following Pods to complete without eviction: pod-11";
        assert_eq!(condition_message(&plan, START), want);
    }

    #[test]
    fn at_most_five_failure_messages_then_a_count_of_other_pods() {
        let all = keys(&[
            "a/p1", "a/p2", "a/p3", "a/p4", "a/p5", "a/p6", "a/p7", "a/p8",
        ]);
        let mut plan = DrainPlan::default();
        for (i, k) in all.iter().enumerate().take(7) {
            let failed = FailedPods {
                refusal: EvictionRefusal::Other,
                pods: vec![k],
            };
            plan.failed.insert(format!("error {i}"), failed);
        }
        plan.failed.get_mut("error 6").unwrap().pods.push(&all[7]);
        let want = "Drain not completed yet (started at 2024-01-01T00:01:00Z):
* Pod a/p1: failed to evict Pod, error 0
* Pod a/p2: failed to evict Pod, error 1
* Pod a/p3: failed to evict Pod, error 2
* Pod a/p4: failed to evict Pod, error 3
* Pod a/p5: failed to evict Pod, error 4
* 3 Pods with other issues";
        assert_eq!(condition_message(&plan, START), want);
        plan.failed.remove("error 6");
        assert!(condition_message(&plan, START).ends_with("\n* 1 Pod with other issues"));
    }
}
