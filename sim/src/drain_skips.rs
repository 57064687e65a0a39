//! Upstream's reasons a drain is rightly skipped, for the "no infrastructure deletion before the
//! Node is drained" rule: the Node does not exist, the Cluster is being deleted, or a
//! MachineDrainRule says `Skip` for the pod. The checker decides this on its own from the API
//! objects (it does not ask the engine); where a rule is too rich to judge here (expressions,
//! namespace selectors) it assumes the pod may be skipped, so it never reports a false breach.

use crate::api::json::Pointer as _;
use crate::api::{FakeApi, json};
use engine::model::Scope;
use serde_json::Value;

/// Whether `selector` (a LabelSelector) surely matches `labels`: `None` when it cannot say.
fn matches(
    selector: Option<&Value>,
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<bool> {
    let Some(selector) = selector else {
        return Some(true);
    };
    if selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_some_and(|e| !e.is_empty())
    {
        return None;
    }
    let wanted = selector.get("matchLabels").and_then(Value::as_object);
    Some(wanted.into_iter().flatten().all(|(k, v)| {
        v.as_str()
            .is_some_and(|v| labels.get(k).is_some_and(|l| l == v))
    }))
}

/// Whether one selector term (`{selector, clusterSelector}` or `{selector, namespaceSelector}`)
/// may match: the second selector is only judged when empty.
fn term_may_match(
    term: &Value,
    second: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let second_empty = term
        .get(second)
        .is_none_or(|s| s.as_object().is_none_or(|o| o.is_empty()));
    if !second_empty {
        return true;
    }
    matches(term.get("selector"), labels).unwrap_or(true)
}

/// A list of terms: none means every object.
fn terms_may_match(
    terms: Option<&Value>,
    second: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    match terms.and_then(Value::as_array) {
        None => true,
        Some(t) if t.is_empty() => true,
        Some(t) => t.iter().any(|term| term_may_match(term, second, labels)),
    }
}

/// Whether the drain of `machine`'s Node is skipped as a whole.
pub(crate) fn drain_skipped(api: &FakeApi, machine: &Value, node: &str) -> bool {
    let Some(cluster) = json::str_at(machine, "spec.clusterName") else {
        return true;
    };
    let ns = json::namespace(machine);
    let cluster_deleting = api
        .find(&Scope::Management, "Cluster", ns, cluster)
        .is_some_and(|(_, c)| json::is_deleting(c));
    let scope = api.workload_scope(cluster);
    let node_missing = api.find(&scope, "Node", "", node).is_none();
    cluster_deleting || node_missing
}

/// Whether a MachineDrainRule in the Machine's namespace may say `Skip` for `pod`.
pub(crate) fn drain_rule_may_skip(api: &FakeApi, machine: &Value, pod: &Value) -> bool {
    let Some(store) = api.store(&Scope::Management) else {
        return false;
    };
    let ns = json::namespace(machine);
    let machine_labels = json::labels(machine);
    let pod_labels = json::labels(pod);
    store
        .list("cluster.x-k8s.io", "MachineDrainRule")
        .filter(|(k, _)| k.namespace == ns)
        .any(|(_, rule)| {
            json::str_at(rule, "spec.drain.behavior") == Some("Skip")
                && terms_may_match(
                    rule.at_pointer("/spec/machines"),
                    "clusterSelector",
                    &machine_labels,
                )
                && terms_may_match(
                    rule.at_pointer("/spec/pods"),
                    "namespaceSelector",
                    &pod_labels,
                )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_labels_and_say_so_when_they_cannot_judge() {
        let app_db = labels(&[("app", "db")]);
        assert_eq!(
            matches(Some(&json!({"matchLabels": {"app": "db"}})), &app_db),
            Some(true)
        );
        assert_eq!(
            matches(Some(&json!({"matchLabels": {"app": "web"}})), &app_db),
            Some(false)
        );
        assert_eq!(matches(Some(&json!({})), &app_db), Some(true));
        let expr = json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]});
        assert_eq!(matches(Some(&expr), &app_db), None);
        let pods = json!([{"selector": {"matchLabels": {"app": "web"}}, "namespaceSelector": {}}]);
        assert!(!terms_may_match(Some(&pods), "namespaceSelector", &app_db));
        let by_namespace = json!([{"selector": {"matchLabels": {"app": "web"}},
                                   "namespaceSelector": {"matchLabels": {"team": "x"}}}]);
        assert!(terms_may_match(
            Some(&by_namespace),
            "namespaceSelector",
            &app_db
        ));
        assert!(terms_may_match(None, "namespaceSelector", &app_db));
    }
}
