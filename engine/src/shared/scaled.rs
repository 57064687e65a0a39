//! Int-or-percent values scaled against a total, as upstream's
//! `GetScaledValueFromIntOrPercent` does: the MHC's `maxUnhealthy` rounds down, a
//! MachineDeployment's remediation `maxInFlight` rounds up.

use crate::model::IntOrString;

/// An int, or a percentage of `total` rounded down (upstream `GetScaledValueFromIntOrPercent`
/// with `roundUp=false`).
pub fn scaled_round_down(value: &IntOrString, total: u32) -> Result<i64, String> {
    scaled(value, total, false)
}

/// As [`scaled_round_down`], rounding up (MachineDeployment `maxInFlight`).
pub fn scaled_round_up(value: &IntOrString, total: u32) -> Result<i64, String> {
    scaled(value, total, true)
}

fn scaled(value: &IntOrString, total: u32, round_up: bool) -> Result<i64, String> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let not_percent = || {
                "invalid value for IntOrString: invalid type: string is not a percentage"
                    .to_string()
            };
            let digits = s.strip_suffix('%').ok_or_else(not_percent)?;
            let pct: i64 = digits
                .parse()
                .map_err(|_| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let product = pct.saturating_mul(i64::from(total));
            Ok(if round_up {
                product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0)
            } else {
                product.div_euclid(100)
            })
        }
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

    #[test]
    fn percentages_scale_like_upstream() {
        assert_eq!(scaled_round_down(&s("40%"), 7), Ok(2));
        assert_eq!(scaled_round_up(&s("40%"), 7), Ok(3));
        assert_eq!(scaled_round_up(&s("50%"), 4), Ok(2));
        assert_eq!(scaled_round_up(&int(2), 10), Ok(2));
    }
}
