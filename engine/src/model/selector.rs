use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A `metav1.LabelSelector`. An invalid one keeps the reason so the controller that uses it
/// can report it (and must not act on a guess).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<SelectorRequirement>,
    /// Why the selector cannot be used, when it is malformed.
    pub invalid: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` satisfy every requirement. An empty selector matches everything;
    /// callers with other rules (a PDB's empty selector matches nothing) check `is_empty` first.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.invalid.is_some() {
            return false;
        }
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl SelectorRequirement {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn expressions_follow_kubernetes_rules() {
        let sel = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                SelectorRequirement {
                    key: "tier".into(),
                    operator: SelectorOperator::NotIn,
                    values: vec!["db".into()],
                },
                SelectorRequirement {
                    key: "zone".into(),
                    operator: SelectorOperator::Exists,
                    values: vec![],
                },
            ],
            invalid: None,
        };
        assert!(sel.matches(&labels(&[("app", "web"), ("zone", "a")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("zone", "a"), ("tier", "db")])));
        assert!(!sel.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn invalid_selector_matches_nothing() {
        let sel = LabelSelector {
            invalid: Some("bad operator".into()),
            ..Default::default()
        };
        assert!(!sel.matches(&labels(&[])));
    }
}
