//! What in an MHC's spec upstream's webhook would reject. Each invalid field is a problem of its
//! own, so fixing one still shows the others; while any is left the MHC remediates nothing
//! (Part 1: no destructive action on a guess).

use super::targets::selector_problem;
use super::trigger::{self, TriggerError};
use crate::model::{ApiVersion, MachineHealthCheck};
use crate::time::Duration;

/// Shortest `nodeStartupTimeout` upstream's webhook accepts (0 disables the check).
pub const NODE_STARTUP_TIMEOUT_MIN: Duration = Duration::from_secs(30);

/// How every message about an invalid spec starts.
const NOT_ALLOWED: &str = "Remediation is not allowed: ";

/// Which field is invalid; its reason in conditions and events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidField {
    Selector,
    NodeStartupTimeout,
    UnhealthyConditionTimeout,
    MaxUnhealthy,
    UnhealthyRange,
}

impl InvalidField {
    pub fn reason(self) -> &'static str {
        match self {
            InvalidField::Selector => "InvalidSelector",
            InvalidField::NodeStartupTimeout => "InvalidNodeStartupTimeout",
            InvalidField::UnhealthyConditionTimeout => "InvalidUnhealthyConditionTimeout",
            InvalidField::MaxUnhealthy => "InvalidMaxUnhealthy",
            InvalidField::UnhealthyRange => "InvalidUnhealthyRange",
        }
    }
}

/// One invalid field and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecProblem {
    pub field: InvalidField,
    what: String,
}

impl SpecProblem {
    /// Its Warning event's message.
    pub fn message(&self) -> String {
        format!("{NOT_ALLOWED}{}", self.what)
    }
}

impl From<TriggerError> for SpecProblem {
    fn from(e: TriggerError) -> SpecProblem {
        let field = match e {
            TriggerError::InvalidMaxUnhealthy { .. } => InvalidField::MaxUnhealthy,
            TriggerError::InvalidRange { .. } => InvalidField::UnhealthyRange,
        };
        SpecProblem {
            field,
            what: e.what(),
        }
    }
}

/// The invalid fields of a spec, in the order of the spec (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecProblems(Vec<SpecProblem>);

impl SpecProblems {
    /// Every invalid field of `mhc`'s spec; `None` when it has none.
    pub fn of(mhc: &MachineHealthCheck) -> Option<SpecProblems> {
        let mut problems: Vec<SpecProblem> = selector_problem(mhc)
            .map(|why| SpecProblem {
                field: InvalidField::Selector,
                what: format!("the selector is invalid ({why})"),
            })
            .into_iter()
            .collect();
        problems.extend(startup_timeout_problem(mhc));
        problems.extend(condition_timeout_problems(mhc));
        let limits =
            trigger::limit_problems(mhc.max_unhealthy.as_ref(), mhc.unhealthy_range.as_deref());
        problems.extend(limits.into_iter().map(SpecProblem::from));
        (!problems.is_empty()).then_some(SpecProblems(problems))
    }

    pub fn iter(&self) -> impl Iterator<Item = &SpecProblem> {
        self.0.iter()
    }

    /// The condition's reason: the first problem's.
    pub fn reason(&self) -> &'static str {
        self.0[0].field.reason()
    }

    /// The condition's message: every problem, in order.
    pub fn message(&self) -> String {
        let whats: Vec<&str> = self.0.iter().map(|p| p.what.as_str()).collect();
        format!("{NOT_ALLOWED}{}", whats.join("; "))
    }
}

impl From<TriggerError> for SpecProblems {
    /// The gate's own error, for a limit [`trigger::limit_problems`] let through.
    fn from(e: TriggerError) -> SpecProblems {
        SpecProblems(vec![e.into()])
    }
}

/// A startup timeout that is negative, or positive but under [`NODE_STARTUP_TIMEOUT_MIN`].
fn startup_timeout_problem(mhc: &MachineHealthCheck) -> Option<SpecProblem> {
    let t = mhc.node_startup_timeout?;
    let valid = t.is_zero() || t >= NODE_STARTUP_TIMEOUT_MIN;
    (!valid).then(|| SpecProblem {
        field: InvalidField::NodeStartupTimeout,
        what: format!(
            "nodeStartupTimeout must be at least {NODE_STARTUP_TIMEOUT_MIN}, or 0 to disable the check (got {t})"
        ),
    })
}

/// One problem per unhealthy condition with a negative timeout, named as the MHC's version
/// names its list.
fn condition_timeout_problems(mhc: &MachineHealthCheck) -> impl Iterator<Item = SpecProblem> + '_ {
    let node_conditions = match mhc.version {
        ApiVersion::V1Beta1 => "unhealthyConditions",
        ApiVersion::V1Beta2 => "unhealthyNodeConditions",
    };
    let lists = [
        (node_conditions, &mhc.unhealthy_node_conditions),
        (
            "unhealthyMachineConditions",
            &mhc.unhealthy_machine_conditions,
        ),
    ];
    lists.into_iter().flat_map(|(field, list)| {
        list.iter()
            .enumerate()
            .filter(|(_, c)| c.timeout < Duration::ZERO)
            .map(move |(i, c)| SpecProblem {
                field: InvalidField::UnhealthyConditionTimeout,
                what: format!(
                    "{field}[{i}] ({}={}) has a negative timeout ({})",
                    c.type_, c.status, c.timeout
                ),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IntOrString;
    use crate::testing;

    #[test]
    fn every_invalid_field_is_listed_in_the_order_of_the_spec() {
        let mut mhc = testing::machine_health_check("c1", "mhc");
        assert_eq!(SpecProblems::of(&mhc), None);
        mhc.selector = Default::default();
        mhc.node_startup_timeout = Some(Duration::from_secs(-1));
        mhc.unhealthy_node_conditions[0].timeout = Duration::from_secs(-1);
        mhc.unhealthy_node_conditions[1].timeout = Duration::from_secs(-2);
        mhc.max_unhealthy = Some(IntOrString::String("abcdef".into()));
        mhc.unhealthy_range = Some("[2-1]".into());
        let problems = SpecProblems::of(&mhc).unwrap();
        let fields: Vec<InvalidField> = problems.iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                InvalidField::Selector,
                InvalidField::NodeStartupTimeout,
                InvalidField::UnhealthyConditionTimeout,
                InvalidField::UnhealthyConditionTimeout,
                InvalidField::MaxUnhealthy,
                InvalidField::UnhealthyRange,
            ]
        );
        assert_eq!(problems.reason(), "InvalidSelector");
        let message = problems.message();
        for p in problems.iter() {
            assert!(message.contains(&p.what), "{message} lacks {}", p.what);
        }
        assert!(
            message
                .contains("unhealthyNodeConditions[1] (Ready=False) has a negative timeout (-2s)")
        );
    }

    #[test]
    fn startup_timeouts_under_the_minimum_are_invalid_but_zero_disables() {
        let mut mhc = testing::machine_health_check("c1", "mhc");
        for (t, valid) in [(0, true), (30, true), (600, true), (29, false), (-1, false)] {
            mhc.node_startup_timeout = Some(Duration::from_secs(t));
            assert_eq!(SpecProblems::of(&mhc).is_none(), valid, "{t}s");
        }
    }
}
