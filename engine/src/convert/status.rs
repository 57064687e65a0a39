//! Condition lists written back where the object's API version keeps them.

use super::object;
use crate::model::{ApiVersion, Condition, Conditions, Severity};
use serde_json::{Map, Value};

/// The CAPI API version of a `Target::api_version` such as `cluster.x-k8s.io/v1beta1`
/// (v1beta2 for anything else: it is the storage version and the engine's default).
pub fn capi_version_of(api_version: &str) -> ApiVersion {
    match api_version.rsplit_once('/') {
        Some((_, "v1beta1")) => ApiVersion::V1Beta1,
        _ => ApiVersion::V1Beta2,
    }
}

/// One condition as the API prints it: `type`, `status`, `reason` (left out when empty),
/// `message`, `severity` when `with_severity` and it is set (v1beta1-type conditions only),
/// `lastTransitionTime` when known. `message` is always written for v1beta2-type conditions
/// (`metav1.Condition`, whose schema requires it, empty or not) and left out when empty for
/// v1beta1-type ones (whose schema wants at least one character).
pub fn condition_json(c: &Condition, with_severity: bool) -> Value {
    // Sized for every member: the map would otherwise grow (and rehash) twice on the way.
    let mut out = Map::with_capacity(6);
    out.insert("type".to_string(), Value::from(c.type_.as_str()));
    out.insert("status".to_string(), Value::from(c.status.as_str()));
    if with_severity && c.severity != Severity::None {
        out.insert("severity".to_string(), Value::from(c.severity.as_str()));
    }
    if let Some(t) = c.last_transition_time {
        out.insert(
            "lastTransitionTime".to_string(),
            Value::String(t.to_rfc3339()),
        );
    }
    if !c.reason.is_empty() {
        out.insert("reason".to_string(), Value::from(c.reason.as_str()));
    }
    if !with_severity || !c.message.is_empty() {
        out.insert("message".to_string(), Value::from(c.message.as_str()));
    }
    Value::Object(out)
}

fn list(conditions: &[Condition], with_severity: bool) -> Value {
    Value::Array(
        conditions
            .iter()
            .map(|c| condition_json(c, with_severity))
            .collect(),
    )
}

/// The `status` fragment holding both condition lists (`engine/docs/capi.md` decision 1):
/// v1beta1 `{"conditions": legacy, "v1beta2": {"conditions": current}}`, v1beta2
/// `{"conditions": current, "deprecated": {"v1beta1": {"conditions": legacy}}}`.
/// Lists are always written whole: a merge patch replaces arrays.
pub fn conditions_json(version: ApiVersion, c: &Conditions) -> Value {
    match version {
        ApiVersion::V1Beta1 => object([
            ("conditions", list(&c.legacy, true)),
            ("v1beta2", object([("conditions", list(&c.current, false))])),
        ]),
        ApiVersion::V1Beta2 => object([
            ("conditions", list(&c.current, false)),
            (
                "deprecated",
                object([("v1beta1", object([("conditions", list(&c.legacy, true))]))]),
            ),
        ]),
    }
}
