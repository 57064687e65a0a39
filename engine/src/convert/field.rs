//! Typed, path-tracking reads from a JSON object.
//!
//! Every read knows the dotted path it is at (`spec.deletion.nodeDrainTimeoutSeconds`,
//! `status.conditions[2].status`), so a value of the wrong type becomes a [`ConvertError`]
//! naming the field. Absent and `null` are the same thing, as in Kubernetes.

use super::ConvertError;
use crate::model::IntOrString;
use crate::time::{Duration, Timestamp, parse_go_duration};
use serde_json::Value;
use std::collections::BTreeMap;

/// A position in a JSON document: the value there (if any) and its path.
#[derive(Clone, Debug)]
pub(crate) struct At<'a> {
    value: Option<&'a Value>,
    path: Path,
}

/// The path to a position, spelled out only when an error names it: a read descends through
/// many fields per object and most objects have no error, so the steps are kept inline (no
/// allocation per step) and joined only for a message.
#[derive(Clone, Copy, Debug)]
struct Path {
    len: u8,
    /// Steps below [`MAX_DEPTH`] are counted but not kept (the message ends in `…`).
    steps: [To; MAX_DEPTH],
}

/// Deeper than any field this crate reads (`spec.template.spec.…` is six).
const MAX_DEPTH: usize = 12;

#[derive(Clone, Copy, Debug)]
enum To {
    Key(&'static str),
    Index(usize),
}

impl Default for Path {
    fn default() -> Self {
        Path {
            len: 0,
            steps: [To::Index(0); MAX_DEPTH],
        }
    }
}

impl Path {
    fn then(&self, to: To) -> Path {
        let mut next = *self;
        if let Some(slot) = next.steps.get_mut(usize::from(self.len)) {
            *slot = to;
        }
        next.len = self.len.saturating_add(1);
        next
    }

    /// `spec.deletion.nodeDrainTimeoutSeconds`, `status.conditions[2].status`.
    fn spelled(&self) -> String {
        let kept = usize::from(self.len).min(MAX_DEPTH);
        let mut out = String::new();
        for to in &self.steps[..kept] {
            match to {
                To::Key(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                To::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        if kept < usize::from(self.len) {
            out.push('…');
        }
        out
    }
}

impl<'a> At<'a> {
    pub(crate) fn root(value: &'a Value) -> Self {
        At {
            value: Some(value),
            path: Path::default(),
        }
    }

    pub(crate) fn path(&self) -> String {
        self.path.spelled()
    }

    pub(crate) fn error(&self, message: impl Into<String>) -> ConvertError {
        ConvertError::new(&self.path.spelled(), message)
    }

    /// The value here, `None` when absent or `null`.
    pub(crate) fn value(&self) -> Option<&'a Value> {
        self.value.filter(|v| !v.is_null())
    }

    pub(crate) fn is_present(&self) -> bool {
        self.value().is_some()
    }

    /// The child `name` of an object (absent when this is absent; an error is raised by the typed
    /// reads, so that `spec: 5` reports `spec`, not a child).
    pub(crate) fn get(&self, name: &'static str) -> At<'a> {
        At {
            value: self.value().and_then(|v| super::member(v, name)),
            path: self.path.then(To::Key(name)),
        }
    }

    /// Walks a dotted path of object keys: `at.at("spec.deletion.nodeDrainTimeoutSeconds")`.
    pub(crate) fn at(&self, dotted: &'static str) -> At<'a> {
        super::split_ascii(dotted, b'.').fold(self.clone(), |at, name| at.get(name))
    }

    /// Checks that this is an object (or absent) before reading children of it.
    pub(crate) fn object(&self) -> Result<Self, ConvertError> {
        match self.value() {
            None | Some(Value::Object(_)) => Ok(self.clone()),
            Some(other) => Err(self.error(format!("expected an object, got {}", show(other)))),
        }
    }

    /// The items of a list, each with its indexed path (empty when absent).
    pub(crate) fn items(&self) -> Result<Vec<At<'a>>, ConvertError> {
        match self.value() {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, v)| At {
                    value: Some(v),
                    path: self.path.then(To::Index(i)),
                })
                .collect()),
            Some(other) => Err(self.error(format!("expected a list, got {}", show(other)))),
        }
    }

    pub(crate) fn opt_str(&self) -> Result<Option<String>, ConvertError> {
        match self.value() {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(format!("expected a string, got {}", show(other)))),
        }
    }

    /// A string, `""` when absent.
    pub(crate) fn str_or_empty(&self) -> Result<String, ConvertError> {
        Ok(self.opt_str()?.unwrap_or_default())
    }

    /// A string that must be present and non-empty.
    pub(crate) fn required_str(&self) -> Result<String, ConvertError> {
        match self.opt_str()? {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(self.error("required")),
        }
    }

    pub(crate) fn opt_bool(&self) -> Result<Option<bool>, ConvertError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.error(format!("expected true or false, got {}", show(other)))),
        }
    }

    /// A boolean, `false` when absent.
    pub(crate) fn bool_or_false(&self) -> Result<bool, ConvertError> {
        Ok(self.opt_bool()?.unwrap_or(false))
    }

    pub(crate) fn opt_i64(&self) -> Result<Option<i64>, ConvertError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) => Ok(Some(i)),
                None => Err(self.error(format!("expected an integer, got {n}"))),
            },
            Some(other) => Err(self.error(format!("expected an integer, got {}", show(other)))),
        }
    }

    pub(crate) fn opt_i32(&self) -> Result<Option<i32>, ConvertError> {
        match self.opt_i64()? {
            None => Ok(None),
            Some(i) => i32::try_from(i)
                .map(Some)
                .map_err(|_| self.error(format!("{i} is out of range for an int32"))),
        }
    }

    /// A Go duration string (`10m`, `1h30m`), as v1beta1 fields hold them.
    pub(crate) fn opt_go_duration(&self) -> Result<Option<Duration>, ConvertError> {
        match self.opt_str()? {
            None => Ok(None),
            Some(s) => parse_go_duration(&s).map(Some).map_err(|e| self.error(e)),
        }
    }

    /// A whole number of seconds (`...TimeoutSeconds`), as v1beta2 fields hold them.
    pub(crate) fn opt_seconds(&self) -> Result<Option<Duration>, ConvertError> {
        Ok(self.opt_i64()?.map(Duration::from_secs))
    }

    pub(crate) fn opt_timestamp(&self) -> Result<Option<Timestamp>, ConvertError> {
        match self.opt_str()? {
            None => Ok(None),
            Some(s) => Timestamp::parse_rfc3339(&s)
                .map(Some)
                .map_err(|e| self.error(e)),
        }
    }

    pub(crate) fn opt_int_or_string(&self) -> Result<Option<IntOrString>, ConvertError> {
        match self.value() {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(IntOrString::String(s.clone()))),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) => Ok(Some(IntOrString::Int(i))),
                None => Err(self.error(format!("expected an integer or a string, got {n}"))),
            },
            Some(other) => Err(self.error(format!(
                "expected an integer or a string, got {}",
                show(other)
            ))),
        }
    }

    /// A list of strings (empty when absent).
    pub(crate) fn str_list(&self) -> Result<Vec<String>, ConvertError> {
        self.items()?
            .iter()
            .map(|item| item.opt_str().map(Option::unwrap_or_default))
            .collect()
    }

    /// A map of strings (labels, annotations, matchLabels); empty when absent.
    pub(crate) fn str_map(&self) -> Result<BTreeMap<String, String>, ConvertError> {
        match self.value() {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    Value::Null => Ok((k.clone(), String::new())),
                    other => {
                        let path = match self.path() {
                            parent if parent.is_empty() => k.clone(),
                            parent => format!("{parent}.{k}"),
                        };
                        let message = format!("expected a string, got {}", show(other));
                        Err(ConvertError::new(&path, message))
                    }
                })
                .collect(),
            Some(other) => {
                Err(self.error(format!("expected a map of strings, got {}", show(other))))
            }
        }
    }
}

/// A short description of a JSON value for error messages: strings quoted, containers by kind.
fn show(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// JSON text with object keys sorted at every level, so equal documents give equal text
/// whatever order the API (or a scenario file) wrote them in.
pub(crate) fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_error_names_the_path_with_indexes() {
        let doc = json!({"status": {"conditions": [{}, {"status": 5}]}});
        let items = At::root(&doc).at("status.conditions").items().unwrap();
        let err = items[1].get("status").opt_str().unwrap_err();
        assert_eq!(
            err.to_string(),
            "status.conditions[1].status: expected a string, got 5"
        );
    }

    #[test]
    fn a_path_deeper_than_kept_ends_in_an_ellipsis() {
        let doc = json!({});
        let deep = (0..MAX_DEPTH + 2).fold(At::root(&doc), |at, _| at.get("a"));
        let kept = ["a"; MAX_DEPTH].join(".");
        assert_eq!(deep.path(), format!("{kept}…"));
    }
}
