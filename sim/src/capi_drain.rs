//! Which pods CAPI's drain evicts, waits for or leaves alone, and in which order, as upstream
//! decides it for the model of its manager (`sim/src/capi.rs`). Written from upstream's
//! behaviour, not from this product's drain (`engine::drain`), so that shadow mode compares two
//! independent readings.
//!
//! | model | upstream (`internal/controllers/machine/drain`) |
//! |---|---|
//! | filters in order, the first Skip or WaitCompleted final, else the last one's status | `GetPodsForEviction`: skipDeleted, daemonSet, mirrorPod, localStorage, unreplicated, drainLabel, machineDrainRules |
//! | skipDeleted: deleting for over 1 s on an unreachable Node | `SkipWaitForDeleteTimeoutSeconds=1` |
//! | daemonSet: Skip while the DaemonSet exists and the pod runs; an orphan is drained | `daemonSetFilter` |
//! | mirrorPod: `kubernetes.io/config.mirror` → Skip | `mirrorPodFilter` |
//! | drainLabel `cluster.x-k8s.io/drain`: `skip` → Skip, `wait-completed` (first `-` removed, any case) → WaitCompleted | `drainLabelFilter` |
//! | MachineDrainRules of the Machine's namespace, by name, the first matching wins: Drain with its order, Skip, WaitCompleted; no rule: Drain, order 0; a pod without its Namespace, an unknown behavior: an error | `machineDrainRulesFilter` |
//! | the lowest order among pods waited for is evicted (or waited for) now, the others later | `EvictPods` `minOrder` |
//! | an invalid selector in any rule of the namespace fails the drain | `GetMachineDrainRules` |

use crate::api::json::Pointer as _;
use crate::api::{ClusterStore, ObjKey, json};
use engine::model::DRAIN_LABEL;
use engine::time::{Duration, Timestamp};
use serde_json::Value;
use std::collections::BTreeMap;

/// What the drain does with a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Behavior {
    Drain,
    Skip,
    WaitCompleted,
}

/// One pod's verdict: its behavior and order, or why it cannot be decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Decided { behavior: Behavior, order: i32 },
    Error(String),
}

/// The MachineDrainRules that apply to one Machine, sorted by name.
pub(crate) struct Rules(Vec<Rule>);

struct Rule {
    name: String,
    behavior: Option<Behavior>,
    behavior_text: String,
    order: Option<i32>,
    pods: Vec<(Value, Value)>,
}

type Labels = BTreeMap<String, String>;

impl Rules {
    /// The rules of `machine`'s namespace that apply to it; `Err` (upstream's message) when
    /// any rule of the namespace has an invalid selector.
    pub(crate) fn for_machine(
        management: &ClusterStore,
        machine: &Value,
        cluster_labels: &Labels,
    ) -> Result<Rules, String> {
        let namespace = json::namespace(machine);
        let machine_labels = json::labels(machine);
        let mut rules = Vec::new();
        for (key, rule) in management.list("cluster.x-k8s.io", "MachineDrainRule") {
            if key.namespace != namespace {
                continue;
            }
            let entries = |field: &str, first: &str, second: &str| -> Vec<(Value, Value)> {
                json::get_path(rule, field)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|e| (e[first].clone(), e[second].clone()))
                    .collect()
            };
            let machines = entries("spec.machines", "selector", "clusterSelector");
            let pods = entries("spec.pods", "selector", "namespaceSelector");
            let invalid = || {
                format!(
                    "failed to get matching MachineDrainRules: invalid selectors in MachineDrainRule {}",
                    key.name
                )
            };
            let mut applies = machines.is_empty();
            for (selector, cluster_selector) in &machines {
                let m = matches(selector, &machine_labels).ok_or_else(invalid)?;
                let c = matches(cluster_selector, cluster_labels).ok_or_else(invalid)?;
                applies |= m && c;
            }
            for (selector, namespace_selector) in &pods {
                matches(selector, &Labels::new()).ok_or_else(invalid)?;
                matches(namespace_selector, &Labels::new()).ok_or_else(invalid)?;
            }
            if !applies {
                continue;
            }
            let behavior_text = json::str_at(rule, "spec.drain.behavior")
                .unwrap_or_default()
                .to_string();
            rules.push(Rule {
                name: key.name.clone(),
                behavior: match behavior_text.as_str() {
                    "Drain" => Some(Behavior::Drain),
                    "Skip" => Some(Behavior::Skip),
                    "WaitCompleted" => Some(Behavior::WaitCompleted),
                    _ => None,
                },
                behavior_text,
                order: json::get_path(rule, "spec.drain.order")
                    .and_then(Value::as_i64)
                    .and_then(|o| i32::try_from(o).ok()),
                pods,
            });
        }
        rules.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Rules(rules))
    }

    fn verdict(&self, pod_labels: &Labels, namespace_labels: &Labels) -> Verdict {
        let matching = self.0.iter().find(|rule| {
            rule.pods.is_empty()
                || rule.pods.iter().any(|(selector, namespace_selector)| {
                    matches(selector, pod_labels) == Some(true)
                        && matches(namespace_selector, namespace_labels) == Some(true)
                })
        });
        let Some(rule) = matching else {
            return drain(0);
        };
        match rule.behavior {
            Some(Behavior::Drain) => drain(rule.order.unwrap_or(0)),
            Some(behavior @ (Behavior::Skip | Behavior::WaitCompleted)) => {
                Verdict::Decided { behavior, order: 0 }
            }
            None => Verdict::Error(format!(
                "MachineDrainRule {:?} has unknown spec.drain.behavior: {:?}",
                rule.name, rule.behavior_text
            )),
        }
    }
}

fn drain(order: i32) -> Verdict {
    Verdict::Decided {
        behavior: Behavior::Drain,
        order,
    }
}

fn decided(behavior: Behavior) -> Verdict {
    Verdict::Decided { behavior, order: 0 }
}

/// Upstream's filters on one pod of the Node being drained (`unreachable`: its Ready is
/// Unknown).
pub(crate) fn classify(
    workload: &ClusterStore,
    pod: &Value,
    rules: &Rules,
    unreachable: bool,
    now: Timestamp,
) -> Verdict {
    let deleting_since = json::str_at(pod, "metadata.deletionTimestamp")
        .and_then(|t| Timestamp::parse_rfc3339(t).ok());
    if unreachable && deleting_since.is_some_and(|t| now.since(t) > Duration::from_secs(1)) {
        return decided(Behavior::Skip);
    }
    let finished = matches!(
        json::str_at(pod, "status.phase"),
        Some("Succeeded" | "Failed")
    );
    let daemonset = pod
        .at_pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r["kind"] == "DaemonSet" && r["controller"] == true)
        .and_then(|r| r["name"].as_str());
    let namespace = json::namespace(pod);
    if let Some(name) = daemonset
        && !finished
        && workload
            .get(&ObjKey::new("apps", "DaemonSet", namespace, name))
            .is_some()
    {
        return decided(Behavior::Skip);
    }
    if json::annotations(pod).contains_key("kubernetes.io/config.mirror") {
        return decided(Behavior::Skip);
    }
    let labels = json::labels(pod);
    if let Some(value) = labels.get(DRAIN_LABEL) {
        if value.eq_ignore_ascii_case("skip") {
            return decided(Behavior::Skip);
        }
        if value
            .replacen('-', "", 1)
            .eq_ignore_ascii_case("waitcompleted")
        {
            return decided(Behavior::WaitCompleted);
        }
    }
    let Some(ns) = workload.get(&ObjKey::new("", "Namespace", "", namespace)) else {
        return Verdict::Error("Pod Namespace does not exist".into());
    };
    rules.verdict(&labels, &json::labels(ns))
}

/// Whether a label selector (absent, `null` or `{}`: everything) matches `labels`; `None` when
/// it is invalid (an unknown operator, values where none belong or none where some must).
fn matches(selector: &Value, labels: &Labels) -> Option<bool> {
    if selector.is_null() {
        return Some(true);
    }
    let selector = selector.as_object()?;
    let mut all = true;
    if let Some(wanted) = selector.get("matchLabels") {
        for (k, v) in wanted.as_object()? {
            all &= labels.get(k).map(String::as_str) == Some(v.as_str()?);
        }
    }
    if let Some(expressions) = selector.get("matchExpressions") {
        for e in expressions.as_array()? {
            let key = e["key"].as_str()?;
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str())
                .collect::<Option<_>>()?;
            let value = labels.get(key).map(String::as_str);
            all &= match (e["operator"].as_str()?, values.is_empty()) {
                ("In", false) => value.is_some_and(|v| values.contains(&v)),
                ("NotIn", false) => value.is_none_or(|v| !values.contains(&v)),
                ("Exists", true) => value.is_some(),
                ("DoesNotExist", true) => value.is_none(),
                _ => return None,
            };
        }
    }
    Some(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_as_kubernetes_does() {
        let l = labels(&[("app", "db"), ("tier", "x")]);
        assert_eq!(matches(&Value::Null, &l), Some(true));
        assert_eq!(matches(&json!({}), &l), Some(true));
        assert_eq!(
            matches(&json!({"matchLabels": {"app": "db"}}), &l),
            Some(true)
        );
        assert_eq!(
            matches(&json!({"matchLabels": {"app": "web"}}), &l),
            Some(false)
        );
        let expr = |op: &str, values: Value| json!({"matchExpressions": [{"key": "app", "operator": op, "values": values}]});
        assert_eq!(matches(&expr("In", json!(["db", "web"])), &l), Some(true));
        assert_eq!(matches(&expr("NotIn", json!(["db"])), &l), Some(false));
        assert_eq!(matches(&expr("Exists", json!([])), &l), Some(true));
        assert_eq!(matches(&expr("DoesNotExist", json!([])), &l), Some(false));
        assert_eq!(matches(&expr("Near", json!(["db"])), &l), None);
        assert_eq!(matches(&expr("In", json!([])), &l), None);
    }

    fn store(objects: Vec<Value>) -> ClusterStore {
        let mut s = ClusterStore::new("t");
        for o in objects {
            s.create(o, Timestamp(0)).unwrap();
        }
        s
    }

    fn pod(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "app", "labels": labels},
               "spec": {"nodeName": "n1"}})
    }

    fn rule(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDrainRule",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    }

    fn machine() -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": "m1", "namespace": "default", "labels": {"pool": "a"}}})
    }

    #[test]
    fn the_drain_label_and_the_first_matching_rule_by_name_decide() {
        let workload = store(vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
            pod("skip", json!({DRAIN_LABEL: "Skip"})),
        ]);
        let management = store(vec![
            rule(
                "b-db-last",
                json!({"drain": {"behavior": "Drain", "order": 10},
                       "pods": [{"selector": {"matchLabels": {"app": "db"}}}]}),
            ),
            rule(
                "a-db-wait",
                json!({"drain": {"behavior": "WaitCompleted"},
                       "machines": [{"selector": {"matchLabels": {"pool": "b"}}}],
                       "pods": [{"selector": {"matchLabels": {"app": "db"}}}]}),
            ),
            rule(
                "c-web-skip",
                json!({"drain": {"behavior": "Skip"},
                       "pods": [{"selector": {"matchLabels": {"app": "web"}}}]}),
            ),
        ]);
        let rules = Rules::for_machine(&management, &machine(), &Labels::new()).unwrap();
        let verdict =
            |labels: Value| classify(&workload, &pod("p", labels), &rules, false, Timestamp(0));
        // a-db-wait is for Machines labelled pool=b: b-db-last decides.
        assert_eq!(verdict(json!({"app": "db"})), drain(10));
        assert_eq!(verdict(json!({"app": "web"})), decided(Behavior::Skip));
        assert_eq!(verdict(json!({"app": "other"})), drain(0));
        // The label comes before the rules.
        assert_eq!(
            verdict(json!({"app": "db", DRAIN_LABEL: "Wait-Completed"})),
            decided(Behavior::WaitCompleted)
        );
        assert_eq!(
            verdict(json!({DRAIN_LABEL: "skip"})),
            decided(Behavior::Skip)
        );
        assert_eq!(verdict(json!({DRAIN_LABEL: "later"})), drain(0));
    }

    #[test]
    fn a_pod_without_its_namespace_and_an_invalid_rule_are_errors() {
        let workload = store(vec![pod("p", json!({}))]);
        let rules = Rules::for_machine(&store(vec![]), &machine(), &Labels::new()).unwrap();
        assert_eq!(
            classify(&workload, &pod("p", json!({})), &rules, false, Timestamp(0)),
            Verdict::Error("Pod Namespace does not exist".into())
        );
        let bad = store(vec![rule(
            "bad",
            json!({"drain": {"behavior": "Skip"},
                   "pods": [{"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]}),
        )]);
        let err = Rules::for_machine(&bad, &machine(), &Labels::new())
            .err()
            .unwrap();
        assert!(
            err.ends_with("invalid selectors in MachineDrainRule bad"),
            "{err}"
        );
    }
}
