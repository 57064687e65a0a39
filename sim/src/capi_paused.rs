//! The v1beta2 `Paused` condition CAPI's reconcilers write on the objects they reconcile
//! (upstream's `paused.EnsurePausedCondition`, `util/paused/paused.go`): `True`, reason `Paused`,
//! when the object's Cluster has `spec.paused` or the object the `cluster.x-k8s.io/paused`
//! annotation (the message says which: `Cluster spec.paused is set to true`, `<Kind> has the
//! cluster.x-k8s.io/paused annotation`, joined by `, `), else `False`, reason `NotPaused`.
//! Written only when it changed; a paused object's reconcile stops there.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, json};
use crate::capi_conditions::{condition, set_conditions};
use crate::env::Env;
use engine::model::{PAUSED_ANNOTATION, Scope};
use serde_json::Value;

/// Writes the object's `Paused` condition when it changed. Upstream's reconcile returns when
/// the object is paused or the condition changed (its own write brings it back): `true` then.
pub(crate) fn ensure(env: &mut Env<'_>, actor: &str, key: &ObjKey, object: &Value) -> bool {
    let cluster = json::str_at(object, "spec.clusterName").unwrap_or_default();
    let cluster_paused = env
        .api
        .get(
            &Scope::Management,
            &ObjKey::new("cluster.x-k8s.io", "Cluster", &key.namespace, cluster),
        )
        .is_some_and(|c| c.at_pointer("/spec/paused").and_then(Value::as_bool) == Some(true));
    let mut messages = Vec::new();
    if cluster_paused {
        messages.push("Cluster spec.paused is set to true".to_string());
    }
    if json::annotations(object).contains_key(PAUSED_ANNOTATION) {
        messages.push(format!(
            "{} has the cluster.x-k8s.io/paused annotation",
            key.kind
        ));
    }
    let paused = !messages.is_empty();
    let (status, reason) = if paused {
        ("True", "Paused")
    } else {
        ("False", "NotPaused")
    };
    let wanted = condition(
        "Paused",
        status,
        reason,
        &messages.join(", "),
        env.clock.now,
    );
    let changed = set_conditions(env, actor, key, object, std::slice::from_ref(&wanted));
    paused || changed
}
