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

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn value(v: &str, part: &str) -> Result<String, String> {
    let v = v.trim();
    if super::is_valid_label_value(v) {
        Ok(v.to_string())
    } else {
        Err(format!(
            "{part:?}: {v:?} is not a label value (at most 63 alphanumeric characters, '-', '_' or '.')"
        ))
    }
}

fn set_values(rest: &str, part: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("{part:?}: a set is written (a, b)"))?;
    let values: Vec<String> = inner
        .split(',')
        .map(|v| value(v, part))
        .collect::<Result<_, _>>()?;
    if values.iter().all(String::is_empty) {
        return Err(format!("{part:?}: the set is empty"));
    }
    Ok(values)
}

impl LabelSelector {
    /// Parses the text form `kubectl -l` and a `labelSelector` query take: a comma-separated
    /// AND of `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k` (`!=` and
    /// `notin` also match objects without the key). The empty text is the empty selector.
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut match_expressions = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (key, operator, values) = if let Some(key) = part.strip_prefix('!') {
                (key, SelectorOperator::DoesNotExist, vec![])
            } else if let Some((k, v)) = part.split_once("!=") {
                (k, SelectorOperator::NotIn, vec![value(v, part)?])
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, SelectorOperator::In, vec![value(v, part)?])
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                (k, SelectorOperator::NotIn, set_values(rest, part)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                (k, SelectorOperator::In, set_values(rest, part)?)
            } else {
                (part, SelectorOperator::Exists, vec![])
            };
            let key = key.trim();
            if let Some(problem) = super::label_key_problem(key) {
                return Err(format!("{part:?}: {problem}"));
            }
            match_expressions.push(SelectorRequirement {
                key: key.to_string(),
                operator,
                values,
            });
        }
        Ok(LabelSelector {
            match_expressions,
            ..LabelSelector::default()
        })
    }
}

impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let labels = self.match_labels.iter().map(|(k, v)| format!("{k}={v}"));
        let expressions = self.match_expressions.iter().map(|r| {
            let key = &r.key;
            match (r.operator, r.values.as_slice()) {
                (SelectorOperator::In, [v]) => format!("{key}={v}"),
                (SelectorOperator::NotIn, [v]) => format!("{key}!={v}"),
                (SelectorOperator::In, values) => format!("{key} in ({})", values.join(",")),
                (SelectorOperator::NotIn, values) => format!("{key} notin ({})", values.join(",")),
                (SelectorOperator::Exists, _) => key.clone(),
                (SelectorOperator::DoesNotExist, _) => format!("!{key}"),
            }
        });
        let all: Vec<String> = labels.chain(expressions).collect();
        f.write_str(&all.join(","))
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
    fn the_text_form_parses_every_operator_and_prints_back() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        for yes in [
            "",
            "app=web",
            "app==web,tier",
            "app in (web, db)",
            "tier notin (back)",
            "!missing",
            "missing!=x",
        ] {
            assert!(LabelSelector::parse(yes).unwrap().matches(&l), "{yes}");
        }
        for no in [
            "app=db",
            "app!=web",
            "app notin (web)",
            "!app",
            "missing",
            "x in (a)",
        ] {
            assert!(!LabelSelector::parse(no).unwrap().matches(&l), "{no}");
        }
        let text = "app=web,tier!=db,zone in (a,b),pool notin (x,y),gpu,!spot";
        assert_eq!(LabelSelector::parse(text).unwrap().to_string(), text);
    }

    #[test]
    fn malformed_text_is_refused_with_the_part_named() {
        for (bad, says) in [
            ("a in b", "a set is written"),
            ("bad key!!=x", "name part"),
            ("app=a b", "not a label value"),
            ("app in ()", "the set is empty"),
            ("=x", "name part"),
        ] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
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
