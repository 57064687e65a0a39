//! An eviction's failure as the drain keeps it ([`EvictionFailure`]): the message its condition
//! shows and why the API refused it, read from the answer's typed [`Refusal`]. The drain's
//! condition message and the metrics' blocked reasons match on the refusal, never on the text.

use crate::input::ApiOutcome;
use crate::outcome::Refusal;
use serde::{Deserialize, Serialize};

pub use crate::outcome::PDB_PHRASE;

/// The failure upstream records for an eviction refused because its namespace is terminating.
pub const NAMESPACE_TERMINATING_FAILURE: &str = "Cannot evict pod from terminating namespace: \
     unable to create eviction (kube-controller-manager should set deletionTimestamp)";

/// Why an eviction was refused, as far as the drain tells refusals apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvictionRefusal {
    DisruptionBudget,
    NamespaceTerminating,
    Other,
}

impl EvictionRefusal {
    pub fn of(outcome: &ApiOutcome) -> Self {
        match outcome.refusal() {
            Some(Refusal::DisruptionBudget { .. }) => EvictionRefusal::DisruptionBudget,
            Some(Refusal::NamespaceTerminating) => EvictionRefusal::NamespaceTerminating,
            Some(Refusal::TooManyRequests { .. } | Refusal::Forbidden) | None => {
                EvictionRefusal::Other
            }
        }
    }

    /// The refusal a state-version-4 memo meant by the failure text it kept (the rule those
    /// builds applied to it).
    fn of_v4_failure(failure: &str) -> Self {
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

/// A failed eviction: why, and the message upstream shows for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EvictionFailure {
    pub refusal: EvictionRefusal,
    pub message: String,
}

impl EvictionFailure {
    /// The failure of an eviction answered with `outcome` (not a success).
    pub fn of(outcome: &ApiOutcome, message: String) -> Self {
        EvictionFailure {
            refusal: EvictionRefusal::of(outcome),
            message,
        }
    }
}

/// A failure that is no refusal, with `message` (tests build memos with it).
#[cfg(test)]
impl From<&str> for EvictionFailure {
    fn from(message: &str) -> Self {
        EvictionFailure {
            refusal: EvictionRefusal::Other,
            message: message.to_string(),
        }
    }
}

impl std::fmt::Display for EvictionFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// State version 5 keeps the refusal; version 4 kept the message alone.
impl<'de> Deserialize<'de> for EvictionFailure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Current {
            refusal: EvictionRefusal,
            message: String,
        }
        if crate::codec::layout_before(5) {
            let message = String::deserialize(d)?;
            return Ok(EvictionFailure {
                refusal: EvictionRefusal::of_v4_failure(&message),
                message,
            });
        }
        let c = Current::deserialize(d)?;
        Ok(EvictionFailure {
            refusal: c.refusal,
            message: c.message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::{EvictionOutcome, eviction_failure_message};
    use crate::outcome::{CAUSE_DISRUPTION_BUDGET, CAUSE_NAMESPACE_TERMINATING, Cause};

    fn refusal(outcome: ApiOutcome) -> EvictionRefusal {
        match eviction_failure_message(&outcome) {
            EvictionOutcome::Failed(failure) => failure.refusal,
            other => panic!("not a failure: {other:?}"),
        }
    }

    #[test]
    fn each_refusal_is_told_by_the_answers_causes() {
        let pdb = Cause {
            reason: CAUSE_DISRUPTION_BUDGET,
            message: "The disruption budget web needs 2 healthy pods and has 2 currently",
        };
        assert_eq!(
            refusal(ApiOutcome::refused(429, PDB_PHRASE.into(), &[pdb], None)),
            EvictionRefusal::DisruptionBudget
        );
        let terminating = Cause {
            reason: CAUSE_NAMESPACE_TERMINATING,
            message: "namespace app is being terminated",
        };
        assert_eq!(
            refusal(ApiOutcome::refused(
                403,
                "pods \"p\" is forbidden: unable to create new content".into(),
                &[terminating],
                None
            )),
            EvictionRefusal::NamespaceTerminating
        );
        // A 429 of the API's own rate limit is no budget's refusal, whatever its text says.
        assert_eq!(
            refusal(ApiOutcome::refused(429, PDB_PHRASE.into(), &[], Some(1))),
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

    #[test]
    fn a_version_4_failure_is_classified_by_its_text() {
        let v4 = |text: &str| -> EvictionFailure {
            crate::codec::decode_layout(&crate::codec::encode(text).unwrap(), 4).unwrap()
        };
        let pdb = format!("{PDB_PHRASE} The disruption budget web needs 2 healthy pods");
        assert_eq!(v4(&pdb).refusal, EvictionRefusal::DisruptionBudget);
        assert_eq!(v4(&pdb).message, pdb);
        assert_eq!(
            v4(NAMESPACE_TERMINATING_FAILURE).refusal,
            EvictionRefusal::NamespaceTerminating
        );
        assert_eq!(v4("connection reset").refusal, EvictionRefusal::Other);
    }
}
