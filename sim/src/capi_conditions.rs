//! The v1beta2 conditions CAPI's reconcilers write, as the model's controllers share them
//! (`capi_health`, `capi_paused`, `capi_remediation`).

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, json};
use crate::env::Env;
use engine::model::Scope;
use engine::time::Timestamp;
use serde_json::{Value, json};

/// The conditions a CAPI object carries in v1beta2 form (a v1beta1 object keeps them under
/// `status.v1beta2`), then its v1beta1 ones.
pub(crate) fn conditions(obj: &Value) -> impl Iterator<Item = &Value> {
    let v1beta1 = json::api_version(obj).ends_with("v1beta1");
    let (current, legacy) = if v1beta1 {
        ("/status/v1beta2/conditions", "/status/conditions")
    } else {
        (
            "/status/conditions",
            "/status/deprecated/v1beta1/conditions",
        )
    };
    [current, legacy]
        .into_iter()
        .filter_map(|p| obj.at_pointer(p).and_then(Value::as_array))
        .flatten()
}

/// A v1beta2 condition that changed now.
pub(crate) fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": now.to_rfc3339()})
}

/// Sets `written` in the object's v1beta2 conditions where they differ (a condition whose
/// status holds keeps its transition time), as CAPI's patch helper does for the conditions it
/// owns; the other conditions stay. Returns whether it wrote.
pub(crate) fn set_conditions(
    env: &mut Env<'_>,
    actor: &str,
    key: &ObjKey,
    machine: &Value,
    written: &[Value],
) -> bool {
    let v1beta1 = json::api_version(machine).ends_with("v1beta1");
    let mut list: Vec<Value> = machine
        .at_pointer(if v1beta1 {
            "/status/v1beta2/conditions"
        } else {
            "/status/conditions"
        })
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for new in written {
        match list.iter_mut().find(|c| c["type"] == new["type"]) {
            Some(old)
                if old["status"] == new["status"]
                    && old["reason"] == new["reason"]
                    && old["message"] == new["message"] => {}
            Some(old) => {
                let mut new = new.clone();
                if old["status"] == new["status"] {
                    new["lastTransitionTime"] = old["lastTransitionTime"].clone();
                }
                *old = new;
                changed = true;
            }
            None => {
                list.push(new.clone());
                changed = true;
            }
        }
    }
    if !changed {
        return false;
    }
    let summary: Vec<String> = written
        .iter()
        .map(|c| {
            format!(
                "{}={} ({})",
                c["type"].as_str().unwrap_or_default(),
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default()
            )
        })
        .collect();
    write_list(
        env,
        actor,
        key,
        v1beta1,
        list,
        "SetCondition",
        summary.join(", "),
    )
}

/// Writes `list` as the object's v1beta2 conditions (under `status.v1beta2` for a v1beta1
/// object), with a timeline line `action` saying `summary`. Whether it was written.
pub(crate) fn write_list(
    env: &mut Env<'_>,
    actor: &str,
    key: &ObjKey,
    v1beta1: bool,
    list: Vec<Value>,
    action: &str,
    summary: String,
) -> bool {
    let patch = if v1beta1 {
        json!({"status": {"v1beta2": {"conditions": list}}})
    } else {
        json!({"status": {"conditions": list}})
    };
    let now = env.clock.now;
    let Ok(w) = env.api.store_mut(&Scope::Management).patch_by(
        key,
        &patch,
        Part::Status,
        &crate::capi_writer::writer(Part::Status),
        now,
    ) else {
        return false;
    };
    env.line(
        actor,
        action,
        crate::api::describe(&Scope::Management, key),
        summary,
    );
    env.changed(&Scope::Management, w);
    true
}
