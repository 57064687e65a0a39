//! Field selectors as the API server parses them from `fieldSelector` query parameters (label
//! selectors are the engine's [`engine::model::LabelSelector::parse`]).
//!
//! Field selectors are a comma-separated AND of `path=v`, `path==v`, `path!=v` over the fields
//! [`FieldSelector::parse`] accepts for the kind; anything else is a 400, as on a real server.

use serde_json::Value;

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
