//! Label and field selectors as the API server parses them from `labelSelector` and
//! `fieldSelector` query parameters.
//!
//! Label selectors are a comma-separated AND of `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//! `k notin (a,b)`, `k` and `!k` (`!=` and `notin` also match objects without the key).
//! Field selectors are a comma-separated AND of `path=v`, `path==v`, `path!=v` over the fields
//! [`FieldSelector::parse`] accepts for the kind; anything else is a 400, as on a real server.

use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
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

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn set_values(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    /// Parses the query form; the error is the message of the 400 answer.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let bad = || format!("unable to parse requirement: {part:?}");
            let (key, op) = if let Some(key) = part.strip_prefix('!') {
                (key.trim().to_string(), LabelOp::DoesNotExist)
            } else if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), LabelOp::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==") {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once('=') {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                (
                    k.trim().to_string(),
                    LabelOp::NotIn(set_values(rest).ok_or_else(bad)?),
                )
            } else if let Some((k, rest)) = part.split_once(" in ") {
                (
                    k.trim().to_string(),
                    LabelOp::In(set_values(rest).ok_or_else(bad)?),
                )
            } else {
                (part.to_string(), LabelOp::Exists)
            };
            if !valid_key(&key) {
                return Err(bad());
            }
            requirements.push((key, op));
        }
        Ok(LabelSelector { requirements })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|(key, op)| {
            let v = labels.get(key);
            match op {
                LabelOp::Eq(want) => v == Some(want),
                LabelOp::NotEq(want) => v != Some(want),
                LabelOp::In(set) => v.is_some_and(|v| set.contains(v)),
                LabelOp::NotIn(set) => v.is_none_or(|v| !set.contains(v)),
                LabelOp::Exists => v.is_some(),
                LabelOp::DoesNotExist => v.is_none(),
            }
        })
    }
}

/// A parsed `fieldSelector`; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// `(dotted path, equal?, value)`.
    requirements: Vec<(String, bool, String)>,
}

/// Fields a kind may be selected by, beyond `metadata.name` and `metadata.namespace`.
fn kind_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "status.phase",
            "spec.restartPolicy",
            "spec.schedulerName",
        ],
        "Node" => &["spec.unschedulable"],
        "Namespace" => &["status.phase"],
        "Secret" => &["type"],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses the query form for objects of `kind`; unknown fields are an error, as the API
    /// server answers `field label not supported` with 400.
    pub fn parse(s: &str, kind: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (path, equal, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: {part:?}; can't understand it"));
            };
            let path = path.trim();
            if !matches!(path, "metadata.name" | "metadata.namespace")
                && !kind_fields(kind).contains(&path)
            {
                return Err(format!("field label not supported: {path}"));
            }
            requirements.push((path.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector { requirements })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|(path, equal, want)| {
            let got = sim::api::json::get_path(object, path);
            let got = match got {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let yes = [
            "",
            "app=web",
            "app==web,tier",
            "app in (web, db)",
            "tier notin (back)",
            "!missing",
            "missing!=x",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&l), "{s}");
        }
        let no = [
            "app=db",
            "app!=web",
            "app notin (web)",
            "!app",
            "missing",
            "x in (a)",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&l), "{s}");
        }
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selector_paths_and_unsupported_fields() {
        let pod =
            json!({"metadata": {"name": "p", "namespace": "app"}, "spec": {"nodeName": "n1"}});
        let s = FieldSelector::parse("spec.nodeName=n1,metadata.namespace!=kube-system", "Pod");
        assert!(s.unwrap().matches(&pod));
        assert!(
            !FieldSelector::parse("spec.nodeName=n2", "Pod")
                .unwrap()
                .matches(&pod)
        );
        assert!(FieldSelector::parse("spec.nodeName=n1", "Node").is_err());
        assert!(FieldSelector::parse("bogus", "Pod").is_err());
    }
}
