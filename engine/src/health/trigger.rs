//! The remediation gate: `maxUnhealthy` / `unhealthyRange` (`engine/docs/capi.md` §2.3, §2.4).
//!
//! "Unhealthy" here is upstream's count `expected − healthy`: pending, deleting and unjudged
//! targets count against the limit. A value the controller cannot parse is an error that
//! blocks remediation until it is fixed (property 6 of `engine/docs/design.md`).

use crate::model::IntOrString;
use crate::shared::scaled::scaled_round_down;

/// Which limit decided, kept as written so messages can quote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    MaxUnhealthy(String),
    Range(String),
}

/// The gate's answer for one evaluation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    pub allowed: bool,
    /// `status.remediationsAllowed` (0 when not allowed).
    pub remediations_allowed: i32,
    pub limit: Limit,
}

/// Why the limit cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerError {
    InvalidMaxUnhealthy { value: String, why: String },
    InvalidRange { value: String, why: String },
}

impl TriggerError {
    /// The condition (and event) reason.
    pub fn reason(&self) -> &'static str {
        match self {
            TriggerError::InvalidMaxUnhealthy { .. } => "InvalidMaxUnhealthy",
            TriggerError::InvalidRange { .. } => "InvalidUnhealthyRange",
        }
    }

    pub fn message(&self) -> String {
        format!("Remediation is not allowed: {}", self.what())
    }

    /// What is wrong, without the lead of [`TriggerError::message`].
    pub fn what(&self) -> String {
        match self {
            TriggerError::InvalidMaxUnhealthy { value, why } => format!(
                "maxUnhealthy {value:?} is invalid ({why}); fix spec.remediation.triggerIf.unhealthyLessThanOrEqualTo (v1beta1 spec.maxUnhealthy)"
            ),
            TriggerError::InvalidRange { value, why } => format!(
                "unhealthyRange {value:?} is invalid ({why}); fix spec.remediation.triggerIf.unhealthyInRange (v1beta1 spec.unhealthyRange)"
            ),
        }
    }
}

/// Each of `maxUnhealthy` and `unhealthyRange` that is written and invalid, whether or not it
/// is the one that decides (upstream's webhook rejects either).
pub fn limit_problems(
    max_unhealthy: Option<&IntOrString>,
    unhealthy_range: Option<&str>,
) -> Vec<TriggerError> {
    let max = max_unhealthy.and_then(|written| {
        let why = scaled_round_down(written, 0).err()?;
        Some(TriggerError::InvalidMaxUnhealthy {
            value: written.to_string(),
            why,
        })
    });
    let range = unhealthy_range.filter(|r| !r.is_empty()).and_then(|range| {
        let why = parse_range(range).err()?;
        Some(TriggerError::InvalidRange {
            value: range.to_string(),
            why,
        })
    });
    max.into_iter().chain(range).collect()
}

/// Decides whether remediation may proceed with `unhealthy` of `expected` targets not healthy.
/// A non-empty range takes precedence over `maxUnhealthy`, which defaults to `100%`.
pub fn decide(
    max_unhealthy: Option<&IntOrString>,
    unhealthy_range: Option<&str>,
    expected: u32,
    unhealthy: u32,
) -> Result<Gate, TriggerError> {
    let unhealthy = i64::from(unhealthy);
    if let Some(range) = unhealthy_range.filter(|r| !r.is_empty()) {
        let (min, max) = parse_range(range).map_err(|why| TriggerError::InvalidRange {
            value: range.to_string(),
            why,
        })?;
        let allowed = min <= unhealthy && unhealthy <= max;
        return Ok(Gate {
            allowed,
            remediations_allowed: if allowed {
                clamp_i32(max - unhealthy)
            } else {
                0
            },
            limit: Limit::Range(range.to_string()),
        });
    }
    let written = max_unhealthy
        .cloned()
        .unwrap_or_else(|| IntOrString::String("100%".to_string()));
    let max =
        scaled_round_down(&written, expected).map_err(|why| TriggerError::InvalidMaxUnhealthy {
            value: written.to_string(),
            why,
        })?;
    let allowed = unhealthy <= max;
    Ok(Gate {
        allowed,
        remediations_allowed: if allowed {
            clamp_i32(max - unhealthy)
        } else {
            0
        },
        limit: Limit::MaxUnhealthy(written.to_string()),
    })
}

fn clamp_i32(v: i64) -> i32 {
    v.clamp(0, i64::from(i32::MAX)) as i32
}

/// `[min-max]` (the CRD pattern `^\[[0-9]+-[0-9]+\]$`), both unsigned 32-bit, max ≥ min.
pub fn parse_range(range: &str) -> Result<(i64, i64), String> {
    let shape = "expected [min-max], e.g. [1-3]";
    let inner = range
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| shape.to_string())?;
    let (min, max) = inner.split_once('-').ok_or_else(|| shape.to_string())?;
    let parse = |s: &str| -> Result<i64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(shape.to_string());
        }
        s.parse::<u32>()
            .map(i64::from)
            .map_err(|_| format!("{s} is out of range for an unsigned 32-bit value"))
    };
    let (min, max) = (parse(min)?, parse(max)?);
    if max < min {
        return Err(format!(
            "max value {max} cannot be less than min value {min} for unhealthyRange"
        ));
    }
    Ok((min, max))
}

/// The short-circuit message (`engine/docs/capi.md` §2.4): `unhealthy_listed` is the number of
/// targets whose verdict is unhealthy, not the count that decided.
pub fn restricted_message(limit: &Limit, expected: u32, unhealthy_listed: u32) -> String {
    match limit {
        Limit::MaxUnhealthy(v) => format!(
            "Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy (total: {expected}, unhealthy: {unhealthy_listed}, maxUnhealthy: {v})"
        ),
        Limit::Range(r) => format!(
            "Remediation is not allowed, the number of not started or unhealthy machines does not fall within the range (total: {expected}, unhealthy: {unhealthy_listed}, unhealthyRange: {r})"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> IntOrString {
        IntOrString::Int(i)
    }
    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.to_string())
    }

    /// Mirrors upstream's `TestIsAllowedRemediation`.
    #[test]
    fn max_unhealthy_and_range_table() {
        struct Case {
            name: &'static str,
            max: Option<IntOrString>,
            range: Option<&'static str>,
            expected: u32,
            unhealthy: u32,
            allowed: bool,
            count: i32,
        }
        let cases = [
            Case {
                name: "unset maxUnhealthy is 100%",
                max: None,
                range: None,
                expected: 3,
                unhealthy: 3,
                allowed: true,
                count: 0,
            },
            Case {
                name: "int, below",
                max: Some(int(3)),
                range: None,
                expected: 5,
                unhealthy: 2,
                allowed: true,
                count: 1,
            },
            Case {
                name: "int, equal",
                max: Some(int(2)),
                range: None,
                expected: 5,
                unhealthy: 2,
                allowed: true,
                count: 0,
            },
            Case {
                name: "int, above",
                max: Some(int(2)),
                range: None,
                expected: 5,
                unhealthy: 3,
                allowed: false,
                count: 0,
            },
            Case {
                name: "percentage rounds down",
                max: Some(s("40%")),
                range: None,
                expected: 7,
                unhealthy: 2,
                allowed: true,
                count: 0,
            },
            Case {
                name: "percentage rounds down, above",
                max: Some(s("40%")),
                range: None,
                expected: 7,
                unhealthy: 3,
                allowed: false,
                count: 0,
            },
            Case {
                name: "60% of 5",
                max: Some(s("60%")),
                range: None,
                expected: 5,
                unhealthy: 2,
                allowed: true,
                count: 1,
            },
            Case {
                name: "0% allows none",
                max: Some(s("0%")),
                range: None,
                expected: 5,
                unhealthy: 1,
                allowed: false,
                count: 0,
            },
            Case {
                name: "range within",
                max: None,
                range: Some("[1-3]"),
                expected: 5,
                unhealthy: 2,
                allowed: true,
                count: 1,
            },
            Case {
                name: "range below min",
                max: None,
                range: Some("[3-5]"),
                expected: 5,
                unhealthy: 2,
                allowed: false,
                count: 0,
            },
            Case {
                name: "range above max",
                max: None,
                range: Some("[3-5]"),
                expected: 10,
                unhealthy: 6,
                allowed: false,
                count: 0,
            },
            Case {
                name: "range takes precedence",
                max: Some(int(0)),
                range: Some("[0-3]"),
                expected: 5,
                unhealthy: 3,
                allowed: true,
                count: 0,
            },
            Case {
                name: "empty range falls back to maxUnhealthy",
                max: Some(int(1)),
                range: Some(""),
                expected: 5,
                unhealthy: 2,
                allowed: false,
                count: 0,
            },
        ];
        for c in cases {
            let gate = decide(c.max.as_ref(), c.range, c.expected, c.unhealthy).expect(c.name);
            assert_eq!(
                (gate.allowed, gate.remediations_allowed),
                (c.allowed, c.count),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn invalid_values_are_errors_not_guesses() {
        let err = decide(Some(&s("abcdef")), None, 5, 0).unwrap_err();
        assert_eq!(err.reason(), "InvalidMaxUnhealthy");
        assert!(
            err.message().contains("string is not a percentage"),
            "{}",
            err.message()
        );
        let err = decide(Some(&s("5")), None, 5, 0).unwrap_err();
        assert_eq!(err.reason(), "InvalidMaxUnhealthy");
        let err = decide(None, Some("[2-1]"), 5, 0).unwrap_err();
        assert_eq!(err.reason(), "InvalidUnhealthyRange");
        assert!(
            err.message()
                .contains("max value 1 cannot be less than min value 2 for unhealthyRange"),
            "{}",
            err.message()
        );
        for bad in ["2-3", "[2]", "[a-3]", "[-3]", "[1-99999999999]"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }

    /// Both limits are checked whatever decides: an invalid `maxUnhealthy` beside a valid
    /// range, and one beside an invalid range, are each reported.
    #[test]
    fn each_invalid_limit_is_a_problem_of_its_own() {
        let reasons = |max: Option<&IntOrString>, range: Option<&str>| -> Vec<&str> {
            limit_problems(max, range)
                .iter()
                .map(TriggerError::reason)
                .collect()
        };
        let bad = s("abcdef");
        assert_eq!(
            reasons(Some(&bad), Some("[2-1]")),
            ["InvalidMaxUnhealthy", "InvalidUnhealthyRange"]
        );
        assert_eq!(reasons(Some(&bad), Some("[0-5]")), ["InvalidMaxUnhealthy"]);
        assert_eq!(
            reasons(Some(&s("40%")), Some("[2-1]")),
            ["InvalidUnhealthyRange"]
        );
        assert!(reasons(Some(&int(-1)), Some("")).is_empty());
        assert!(reasons(None, None).is_empty());
    }

    #[test]
    fn restricted_messages_quote_the_limit_as_written() {
        assert_eq!(
            restricted_message(&Limit::MaxUnhealthy("40%".into()), 5, 3),
            "Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy (total: 5, unhealthy: 3, maxUnhealthy: 40%)"
        );
        assert_eq!(
            restricted_message(&Limit::Range("[3-5]".into()), 5, 1),
            "Remediation is not allowed, the number of not started or unhealthy machines does not fall within the range (total: 5, unhealthy: 1, unhealthyRange: [3-5])"
        );
    }
}
