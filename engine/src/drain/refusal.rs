//! What a refused eviction's failure message says, told in one place: the drain's condition
//! message and the metrics' blocked reasons read it here.

/// How the API server begins its answer to an eviction a PodDisruptionBudget refuses.
pub const PDB_PHRASE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// The failure upstream records for an eviction refused because its namespace is terminating.
pub const NAMESPACE_TERMINATING_FAILURE: &str = "Cannot evict pod from terminating namespace: \
     unable to create eviction (kube-controller-manager should set deletionTimestamp)";

/// Why an eviction was refused, as its failure message tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionRefusal {
    DisruptionBudget,
    NamespaceTerminating,
    Other,
}

impl EvictionRefusal {
    pub fn of(failure: &str) -> Self {
        if failure.starts_with(PDB_PHRASE) {
            EvictionRefusal::DisruptionBudget
        } else if failure == NAMESPACE_TERMINATING_FAILURE {
            EvictionRefusal::NamespaceTerminating
        } else {
            EvictionRefusal::Other
        }
    }

    /// The reason a drain blocked by it is counted under (`lifecycle_drain_blocked_pods`).
    pub fn blocked_reason(self) -> &'static str {
        match self {
            EvictionRefusal::DisruptionBudget => "PodDisruptionBudget",
            EvictionRefusal::NamespaceTerminating => "NamespaceTerminating",
            EvictionRefusal::Other => "EvictionFailed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::{EvictionOutcome, eviction_failure_message};
    use crate::input::ApiOutcome;

    fn refusal(outcome: ApiOutcome) -> EvictionRefusal {
        match eviction_failure_message(&outcome) {
            EvictionOutcome::Failed(failure) => EvictionRefusal::of(&failure),
            other => panic!("not a failure: {other:?}"),
        }
    }

    #[test]
    fn each_refusal_is_told_by_the_failure_the_drain_records() {
        let pdb = format!(
            "{PDB_PHRASE} The disruption budget web needs 2 healthy pods and has 2 currently"
        );
        assert_eq!(
            refusal(ApiOutcome::TooManyRequests { message: pdb }),
            EvictionRefusal::DisruptionBudget
        );
        assert_eq!(
            refusal(ApiOutcome::Forbidden {
                message: "pods \"p\" is forbidden: unable to create new content".into(),
                namespace_terminating: true,
            }),
            EvictionRefusal::NamespaceTerminating
        );
        // A 429 of the API's own rate limit is no budget's refusal.
        assert_eq!(
            refusal(ApiOutcome::TooManyRequests {
                message: "Too many requests, please try again later.".into()
            }),
            EvictionRefusal::Other
        );
        assert_eq!(
            refusal(ApiOutcome::Error {
                code: 500,
                message: "the disruption budget controller is down".into()
            }),
            EvictionRefusal::Other
        );
    }
}
