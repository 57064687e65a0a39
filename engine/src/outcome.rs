//! How the API answered a command ([`ApiOutcome`]), with the typed reason of a refusal
//! ([`Refusal`]) read from the answer's `Status` `details.causes`.
//!
//! *Journal compatibility:* records written before refusals were typed hold 429 and 403
//! answers as `TooManyRequests { message }` and `Forbidden { message, namespace_terminating }`.
//! They keep their places in the encoding ([`Wire`]) and decode into [`ApiOutcome::Refused`]
//! by the rule those builds applied to the text ([`Refusal::of_v4_429`]).

use crate::model::Object;
use serde::{Deserialize, Serialize};

/// How the API answered a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiOutcome {
    /// 2xx; the object as the API returned it, when it returned one.
    Ok {
        object: Option<Box<Object>>,
    },
    NotFound,
    Conflict {
        message: String,
    },
    /// 429 or 403: refused for the reason its `Status` gives. `message` is what upstream's
    /// `err.Error()` reads: the Status message, and for a 429 its causes' messages after it
    /// joined by ",".
    Refused {
        refusal: Refusal,
        message: String,
    },
    /// Any other HTTP error.
    Error {
        code: u16,
        message: String,
    },
    /// The cluster's API could not be reached at all.
    Unreachable {
        message: String,
    },
    /// Never sent: the controller runs in a mode that writes nothing ([`Withheld`]). Every
    /// controller's bookkeeping takes it as an answered call (pacing and "never twice" stay as
    /// they would be); the cache learns nothing from it.
    NotSent {
        why: Withheld,
    },
}

/// Why the API refused a request it understood. Its JSON (`log show`) names fields as the
/// API does (`retryAfterSeconds`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum Refusal {
    /// 429 to an eviction: a PodDisruptionBudget allows no disruption now (cause
    /// `DisruptionBudget`). Its numbers when the cause states them ("The disruption budget web
    /// needs 2 healthy pods and has 2 currently"); none while the server is still processing
    /// the budget.
    DisruptionBudget { budget: Option<BudgetShortfall> },
    /// 403 with the cause `NamespaceTerminating`: nothing new may be created in the namespace.
    NamespaceTerminating,
    /// Any other 429: the server sheds load or rate-limits, and may say when to come back.
    TooManyRequests { retry_after_seconds: Option<u32> },
    /// Any other 403 (RBAC, an admission webhook).
    Forbidden,
}

/// What a PodDisruptionBudget's refusal states about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetShortfall {
    pub name: String,
    pub healthy_needed: u32,
    pub healthy_current: u32,
}

/// One of a `Status`'s `details.causes`.
#[derive(Clone, Copy, Debug)]
pub struct Cause<'a> {
    pub reason: &'a str,
    pub message: &'a str,
}

/// The `details.causes[].reason` of a PodDisruptionBudget's refusal of an eviction.
pub const CAUSE_DISRUPTION_BUDGET: &str = "DisruptionBudget";
/// The `details.causes[].reason` of a refusal in a terminating namespace.
pub const CAUSE_NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
/// How the API server begins its answer to an eviction a PodDisruptionBudget refuses.
pub const PDB_PHRASE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

impl Refusal {
    /// The HTTP status code of the answer.
    pub fn code(&self) -> u16 {
        match self {
            Refusal::DisruptionBudget { .. } | Refusal::TooManyRequests { .. } => 429,
            Refusal::NamespaceTerminating | Refusal::Forbidden => 403,
        }
    }

    /// A 429's refusal, from its causes and `retryAfterSeconds`.
    fn of_429(causes: &[Cause<'_>], retry_after_seconds: Option<u32>) -> Refusal {
        match causes.iter().find(|c| c.reason == CAUSE_DISRUPTION_BUDGET) {
            Some(cause) => Refusal::DisruptionBudget {
                budget: BudgetShortfall::parse(cause.message),
            },
            None => Refusal::TooManyRequests {
                retry_after_seconds,
            },
        }
    }

    /// A 429 recorded as text only (records written before refusals were typed): a
    /// PodDisruptionBudget's refusal begins with [`PDB_PHRASE`] and its cause follows it.
    pub fn of_v4_429(message: &str) -> Refusal {
        match message.strip_prefix(PDB_PHRASE) {
            Some(cause) => Refusal::DisruptionBudget {
                budget: BudgetShortfall::parse(cause.trim_start()),
            },
            None => Refusal::TooManyRequests {
                retry_after_seconds: None,
            },
        }
    }
}

impl BudgetShortfall {
    /// Reads "The disruption budget NAME needs N healthy pods and has M currently".
    fn parse(cause: &str) -> Option<BudgetShortfall> {
        let rest = cause.strip_prefix("The disruption budget ")?;
        let (name, rest) = rest.split_once(" needs ")?;
        let (needed, rest) = rest.split_once(" healthy pods and has ")?;
        let current = rest.strip_suffix(" currently")?;
        Some(BudgetShortfall {
            name: name.to_string(),
            healthy_needed: needed.parse().ok()?,
            healthy_current: current.parse().ok()?,
        })
    }
}

impl ApiOutcome {
    /// A 429 or 403 answer from its `Status`: its message, causes and `retryAfterSeconds`.
    /// Any other code is an [`ApiOutcome::Error`].
    pub fn refused(
        code: u16,
        message: String,
        causes: &[Cause<'_>],
        retry_after_seconds: Option<u32>,
    ) -> ApiOutcome {
        match code {
            429 => {
                let refusal = Refusal::of_429(causes, retry_after_seconds);
                let message = if causes.is_empty() {
                    message
                } else {
                    let joined: Vec<&str> = causes.iter().map(|c| c.message).collect();
                    format!("{message} {}", joined.join(","))
                };
                ApiOutcome::Refused { refusal, message }
            }
            403 => {
                let terminating = causes
                    .iter()
                    .any(|c| c.reason == CAUSE_NAMESPACE_TERMINATING);
                ApiOutcome::Refused {
                    refusal: if terminating {
                        Refusal::NamespaceTerminating
                    } else {
                        Refusal::Forbidden
                    },
                    message,
                }
            }
            code => ApiOutcome::Error { code, message },
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, ApiOutcome::Ok { .. })
    }

    /// The refusal, when the API refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            ApiOutcome::Refused { refusal, .. } => Some(refusal),
            _ => None,
        }
    }

    /// What the controllers' bookkeeping takes the answer for: a command not sent counts as
    /// answered with nothing (the store is not told).
    pub fn as_answered(&self) -> std::borrow::Cow<'_, ApiOutcome> {
        match self {
            ApiOutcome::NotSent { .. } => std::borrow::Cow::Owned(ApiOutcome::Ok { object: None }),
            other => std::borrow::Cow::Borrowed(other),
        }
    }

    /// A short label for timelines: `ok`, `404`, `429: <message>`.
    pub fn summary(&self) -> String {
        match self {
            ApiOutcome::Ok { .. } => "ok".to_string(),
            ApiOutcome::NotFound => "404 not found".to_string(),
            ApiOutcome::Conflict { message } => format!("409: {message}"),
            ApiOutcome::Refused { refusal, message } => format!("{}: {message}", refusal.code()),
            ApiOutcome::Error { code, message } => format!("{code}: {message}"),
            ApiOutcome::Unreachable { message } => format!("unreachable: {message}"),
            ApiOutcome::NotSent { why } => format!("not sent ({})", why.as_str()),
        }
    }
}

/// Why a command was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Withheld {
    /// `--mode shadow`: the controller watches and decides, and writes nothing.
    Shadow,
}

impl Withheld {
    pub fn as_str(self) -> &'static str {
        match self {
            Withheld::Shadow => "shadow",
        }
    }
}

/// The encoding of an [`ApiOutcome`]: every form it was ever journaled in, each in its place.
#[derive(Deserialize)]
enum Wire {
    Ok {
        object: Option<Box<Object>>,
    },
    NotFound,
    Conflict {
        message: String,
    },
    /// Written before refusals were typed (now [`ApiOutcome::Refused`]).
    TooManyRequests {
        message: String,
    },
    /// Written before refusals were typed (now [`ApiOutcome::Refused`]).
    Forbidden {
        message: String,
        namespace_terminating: bool,
    },
    Error {
        code: u16,
        message: String,
    },
    Unreachable {
        message: String,
    },
    NotSent {
        why: Withheld,
    },
    Refused {
        refusal: Refusal,
        message: String,
    },
}

/// [`Wire`] borrowed, for encoding without a copy (its variants in the same places).
#[derive(Serialize)]
enum WireRef<'a> {
    Ok {
        object: &'a Option<Box<Object>>,
    },
    NotFound,
    Conflict {
        message: &'a str,
    },
    /// Never written again: it holds its place, so the variants after it keep theirs.
    #[expect(dead_code)]
    TooManyRequests {
        message: &'a str,
    },
    /// Never written again: it holds its place, so the variants after it keep theirs.
    #[expect(dead_code)]
    Forbidden {
        message: &'a str,
        namespace_terminating: bool,
    },
    Error {
        code: u16,
        message: &'a str,
    },
    Unreachable {
        message: &'a str,
    },
    NotSent {
        why: Withheld,
    },
    Refused {
        refusal: &'a Refusal,
        message: &'a str,
    },
}

impl Serialize for ApiOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ApiOutcome::Ok { object } => WireRef::Ok { object },
            ApiOutcome::NotFound => WireRef::NotFound,
            ApiOutcome::Conflict { message } => WireRef::Conflict { message },
            ApiOutcome::Refused { refusal, message } => WireRef::Refused { refusal, message },
            ApiOutcome::Error { code, message } => WireRef::Error {
                code: *code,
                message,
            },
            ApiOutcome::Unreachable { message } => WireRef::Unreachable { message },
            ApiOutcome::NotSent { why } => WireRef::NotSent { why: *why },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ApiOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Wire::deserialize(d)? {
            Wire::Ok { object } => ApiOutcome::Ok { object },
            Wire::NotFound => ApiOutcome::NotFound,
            Wire::Conflict { message } => ApiOutcome::Conflict { message },
            Wire::TooManyRequests { message } => ApiOutcome::Refused {
                refusal: Refusal::of_v4_429(&message),
                message,
            },
            Wire::Forbidden {
                message,
                namespace_terminating,
            } => ApiOutcome::Refused {
                refusal: if namespace_terminating {
                    Refusal::NamespaceTerminating
                } else {
                    Refusal::Forbidden
                },
                message,
            },
            Wire::Error { code, message } => ApiOutcome::Error { code, message },
            Wire::Unreachable { message } => ApiOutcome::Unreachable { message },
            Wire::NotSent { why } => ApiOutcome::NotSent { why },
            Wire::Refused { refusal, message } => ApiOutcome::Refused { refusal, message },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    const PDB_CAUSE: &str = "The disruption budget web needs 2 healthy pods and has 2 currently";

    fn web_short() -> Refusal {
        Refusal::DisruptionBudget {
            budget: Some(BudgetShortfall {
                name: "web".into(),
                healthy_needed: 2,
                healthy_current: 2,
            }),
        }
    }

    #[test]
    fn a_refusal_is_read_from_the_status_causes() {
        let pdb = ApiOutcome::refused(
            429,
            PDB_PHRASE.into(),
            &[Cause {
                reason: CAUSE_DISRUPTION_BUDGET,
                message: PDB_CAUSE,
            }],
            None,
        );
        assert_eq!(
            pdb,
            ApiOutcome::Refused {
                refusal: web_short(),
                message: format!("{PDB_PHRASE} {PDB_CAUSE}"),
            }
        );
        let processing = ApiOutcome::refused(
            429,
            PDB_PHRASE.into(),
            &[Cause {
                reason: CAUSE_DISRUPTION_BUDGET,
                message: "The disruption budget web is still being processed by the server.",
            }],
            Some(10),
        );
        assert_eq!(
            processing.refusal(),
            Some(&Refusal::DisruptionBudget { budget: None })
        );
        // The message alone decides nothing: a 429 without the cause is load shedding.
        let shed = ApiOutcome::refused(429, PDB_PHRASE.into(), &[], Some(3));
        assert_eq!(
            shed.refusal(),
            Some(&Refusal::TooManyRequests {
                retry_after_seconds: Some(3)
            })
        );
        let terminating = Cause {
            reason: CAUSE_NAMESPACE_TERMINATING,
            message: "namespace app is being terminated",
        };
        let refused = ApiOutcome::refused(403, "forbidden".into(), &[terminating], None);
        assert_eq!(refused.refusal(), Some(&Refusal::NamespaceTerminating));
        assert_eq!(refused.summary(), "403: forbidden");
        let rbac = ApiOutcome::refused(403, "no".into(), &[], None);
        assert_eq!(rbac.refusal(), Some(&Refusal::Forbidden));
        assert_eq!(
            ApiOutcome::refused(500, "boom".into(), &[], None),
            ApiOutcome::Error {
                code: 500,
                message: "boom".into()
            }
        );
    }

    /// Answers journaled before refusals were typed decode into the typed form.
    #[test]
    fn answers_journaled_as_text_decode_typed() {
        #[derive(Serialize)]
        enum V4 {
            _Ok,
            _NotFound,
            _Conflict,
            TooManyRequests {
                message: String,
            },
            Forbidden {
                message: String,
                namespace_terminating: bool,
            },
        }
        let decoded = |v: V4| codec::decode::<ApiOutcome>(&codec::encode(&v).unwrap()).unwrap();
        let text = format!("{PDB_PHRASE} {PDB_CAUSE}");
        assert_eq!(
            decoded(V4::TooManyRequests {
                message: text.clone()
            }),
            ApiOutcome::Refused {
                refusal: web_short(),
                message: text
            }
        );
        assert_eq!(
            decoded(V4::TooManyRequests {
                message: "slow down".into()
            })
            .refusal(),
            Some(&Refusal::TooManyRequests {
                retry_after_seconds: None
            })
        );
        for (namespace_terminating, refusal) in [
            (true, Refusal::NamespaceTerminating),
            (false, Refusal::Forbidden),
        ] {
            let outcome = decoded(V4::Forbidden {
                message: "no".into(),
                namespace_terminating,
            });
            assert_eq!(outcome.refusal(), Some(&refusal));
        }
    }

    #[test]
    fn every_outcome_round_trips() {
        for outcome in [
            ApiOutcome::Ok { object: None },
            ApiOutcome::NotFound,
            ApiOutcome::Conflict {
                message: "c".into(),
            },
            ApiOutcome::Refused {
                refusal: web_short(),
                message: "m".into(),
            },
            ApiOutcome::Error {
                code: 500,
                message: "e".into(),
            },
            ApiOutcome::Unreachable {
                message: "u".into(),
            },
            ApiOutcome::NotSent {
                why: Withheld::Shadow,
            },
        ] {
            let bytes = codec::encode(&outcome).unwrap();
            assert_eq!(codec::decode::<ApiOutcome>(&bytes).unwrap(), outcome);
        }
    }
}
