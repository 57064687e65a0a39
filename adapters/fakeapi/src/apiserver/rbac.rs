//! The RBAC authorizer over the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings stored
//! in the served cluster, as kube-apiserver's answers a SubjectAccessReview: a ClusterRoleBinding
//! grants its role's rules everywhere, a RoleBinding in the request's namespace only; subjects
//! are Users, Groups and ServiceAccounts (`system:serviceaccount:NS:NAME`); rules match on verbs,
//! API groups, resources (`machines/status`, `*`, `*/status`), resource names and non-resource
//! URLs (`/metrics`, `/api/*`), `*` everywhere; an aggregated ClusterRole
//! (`aggregationRule.clusterRoleSelectors`) has the rules of every ClusterRole its selectors
//! match, as the aggregation controller would have written them. The group `system:masters`
//! is allowed everything, as the real server's superuser authorizer allows it.
//!
//! Not kept: the bootstrap roles a real cluster has from the start (`system:basic-user`,
//! `system:discovery`, …): only what was stored grants anything.

use serde_json::Value;
use sim::api::{ClusterStore, ObjKey};

pub const MASTERS: &str = "system:masters";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Who asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub user: String,
    pub groups: Vec<String>,
}

/// What is asked (a SubjectAccessReview's `resourceAttributes` or `nonResourceAttributes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attributes {
    Resource {
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        name: String,
        namespace: String,
    },
    NonResource {
        verb: String,
        path: String,
    },
}

impl Attributes {
    /// From a review's `spec`; `None` when it names neither.
    pub fn of(spec: &Value) -> Option<Attributes> {
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
            return Some(Attributes::Resource {
                verb: text(r, "verb"),
                group: text(r, "group"),
                resource: text(r, "resource"),
                subresource: text(r, "subresource"),
                name: text(r, "name"),
                namespace: text(r, "namespace"),
            });
        }
        let n = spec
            .get("nonResourceAttributes")
            .filter(|n| n.is_object())?;
        Some(Attributes::NonResource {
            verb: text(n, "verb"),
            path: text(n, "path"),
        })
    }

    fn namespace(&self) -> &str {
        match self {
            Attributes::Resource { namespace, .. } => namespace,
            Attributes::NonResource { .. } => "",
        }
    }
}

/// An answer: allowed or not, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    super::crds::strings(v.get(key))
}

fn has(list: &[String], wanted: &str) -> bool {
    list.iter().any(|x| x == "*" || x == wanted)
}

fn rule_allows(rule: &Value, attributes: &Attributes) -> bool {
    let verbs = strings(rule, "verbs");
    match attributes {
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let resources = strings(rule, "resources");
            let resource_ok = resources.iter().any(|r| {
                r == "*"
                    || *r == combined
                    || (!subresource.is_empty() && *r == format!("*/{subresource}"))
            });
            let names = strings(rule, "resourceNames");
            has(&verbs, verb)
                && has(&strings(rule, "apiGroups"), group)
                && resource_ok
                && (names.is_empty() || (!name.is_empty() && names.contains(name)))
        }
        Attributes::NonResource { verb, path } => {
            has(&verbs, verb)
                && strings(rule, "nonResourceURLs").iter().any(|u| {
                    u == "*"
                        || u == path
                        || u.strip_suffix('*')
                            .is_some_and(|prefix| path.starts_with(prefix))
                })
        }
    }
}

fn subject_matches(subject: &Value, who: &Subject, binding_namespace: &str) -> bool {
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    match subject.get("kind").and_then(Value::as_str) {
        Some("User") => name == who.user,
        Some("Group") => who.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let ns = subject
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_namespace);
            who.user == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_value = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k).is_some() && label(k) == v.as_str());
    let by_expression = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let values = strings(e, "values");
            match e.get("operator").and_then(Value::as_str) {
                Some("In") => label(key).is_some_and(|v| values.iter().any(|x| x == v)),
                Some("NotIn") => label(key).is_none_or(|v| !values.iter().any(|x| x == v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    by_value && by_expression
}

/// A ClusterRole's rules, with those it aggregates.
fn cluster_role_rules(store: &ClusterStore, role: &Value) -> Vec<Value> {
    let mut rules: Vec<Value> = role
        .get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let selectors = role
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array);
    if let Some(selectors) = selectors {
        let name = role.pointer("/metadata/name");
        for (key, other) in store.iter() {
            if key.group.as_str() != RBAC_GROUP
                || key.kind.as_str() != "ClusterRole"
                || other.pointer("/metadata/name") == name
            {
                continue;
            }
            let labels = other.pointer("/metadata/labels").unwrap_or(&Value::Null);
            if selectors.iter().any(|s| labels_match(s, labels)) {
                rules.extend(
                    other
                        .get("rules")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
        }
    }
    rules
}

/// The rules a binding's `roleRef` names (none when it names nothing stored).
fn role_rules(store: &ClusterStore, binding: &Value, namespace: &str) -> Vec<Value> {
    let name = binding
        .pointer("/roleRef/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    match binding.pointer("/roleRef/kind").and_then(Value::as_str) {
        Some("ClusterRole") => store
            .get(&ObjKey::new(RBAC_GROUP, "ClusterRole", "", name))
            .map(|role| cluster_role_rules(store, role))
            .unwrap_or_default(),
        Some("Role") => store
            .get(&ObjKey::new(RBAC_GROUP, "Role", namespace, name))
            .and_then(|role| role.get("rules").and_then(Value::as_array).cloned())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Whether `who` may do what `attributes` say, by the RBAC objects in `store`.
pub fn authorize(store: &ClusterStore, who: &Subject, attributes: &Attributes) -> Decision {
    if who.groups.iter().any(|g| g == MASTERS) {
        return Decision {
            allowed: true,
            reason: format!("the user is in {MASTERS}"),
        };
    }
    let namespace = attributes.namespace();
    for (key, binding) in store.iter() {
        let kind = key.kind.as_str();
        let applies = key.group.as_str() == RBAC_GROUP
            && (kind == "ClusterRoleBinding"
                || (kind == "RoleBinding"
                    && !namespace.is_empty()
                    && key.namespace.as_str() == namespace));
        if !applies {
            continue;
        }
        let bound = binding
            .get("subjects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|s| subject_matches(s, who, &key.namespace));
        if !bound {
            continue;
        }
        if role_rules(store, binding, &key.namespace)
            .iter()
            .any(|rule| rule_allows(rule, attributes))
        {
            let role = binding
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let role_kind = binding
                .pointer("/roleRef/kind")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Decision {
                allowed: true,
                reason: format!(
                    "RBAC: allowed by {kind} {:?} of {role_kind} {role:?} to {}",
                    key.name, who.user
                ),
            };
        }
    }
    Decision {
        allowed: false,
        reason: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Timestamp;
    use serde_json::json;

    const SA: &str = "system:serviceaccount:lifecycle-system:lifecycle-controller";

    fn store(objects: Vec<Value>) -> ClusterStore {
        let mut s = ClusterStore::new("t");
        for o in objects {
            s.create(o, Timestamp(0)).unwrap();
        }
        s
    }

    fn cluster_role(name: &str, labels: Value, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    fn binding(
        kind: &str,
        name: &str,
        namespace: &str,
        role_kind: &str,
        role: &str,
        subjects: Value,
    ) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
               "metadata": {"name": name, "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
               "subjects": subjects})
    }

    fn sa() -> Subject {
        Subject {
            user: SA.into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
        }
    }

    fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        name: &str,
        ns: &str,
    ) -> Attributes {
        Attributes::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: ns.into(),
        }
    }

    fn shipped() -> ClusterStore {
        store(vec![
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "agg"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"to-agg": "true"}}]},
                   "rules": []}),
            cluster_role(
                "core",
                json!({"to-agg": "true"}),
                json!([
                {"apiGroups": ["cluster.x-k8s.io"], "resources": ["machines", "machines/status"], "verbs": ["get", "patch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["capi"], "verbs": ["list"]}]),
            ),
            cluster_role(
                "other",
                json!({}),
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
            ),
            cluster_role(
                "metrics",
                json!({}),
                json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
            ),
            binding(
                "ClusterRoleBinding",
                "agg",
                "",
                "ClusterRole",
                "agg",
                json!([
                {"kind": "ServiceAccount", "name": "lifecycle-controller", "namespace": "lifecycle-system"}]),
            ),
            binding(
                "RoleBinding",
                "other",
                "apps",
                "ClusterRole",
                "other",
                json!([
                {"kind": "ServiceAccount", "name": "lifecycle-controller", "namespace": "lifecycle-system"}]),
            ),
            binding(
                "ClusterRoleBinding",
                "metrics",
                "",
                "ClusterRole",
                "metrics",
                json!([
                {"kind": "Group", "name": "monitoring"}, {"kind": "User", "name": "prom"}]),
            ),
        ])
    }

    #[test]
    fn a_service_account_has_what_its_aggregated_role_grants_and_nothing_else() {
        let s = shipped();
        let allowed = |a: Attributes| authorize(&s, &sa(), &a).allowed;
        assert!(allowed(resource(
            "patch",
            "cluster.x-k8s.io",
            "machines",
            "status",
            "",
            ""
        )));
        assert!(allowed(resource(
            "get",
            "cluster.x-k8s.io",
            "machines",
            "",
            "m1",
            "default"
        )));
        assert!(!allowed(resource(
            "delete",
            "cluster.x-k8s.io",
            "machines",
            "",
            "",
            ""
        )));
        assert!(!allowed(resource(
            "patch",
            "cluster.x-k8s.io",
            "machinesets",
            "",
            "",
            ""
        )));
        // resourceNames: that name only, and never a list of everything.
        assert!(allowed(resource(
            "list",
            "coordination.k8s.io",
            "leases",
            "",
            "capi",
            ""
        )));
        assert!(!allowed(resource(
            "list",
            "coordination.k8s.io",
            "leases",
            "",
            "",
            ""
        )));
        // A RoleBinding grants in its namespace only.
        assert!(allowed(resource(
            "delete",
            "apps",
            "deployments",
            "",
            "x",
            "apps"
        )));
        assert!(!allowed(resource(
            "delete",
            "apps",
            "deployments",
            "",
            "x",
            "default"
        )));
        assert!(!allowed(resource(
            "delete",
            "apps",
            "deployments",
            "",
            "x",
            ""
        )));
    }

    #[test]
    fn users_groups_masters_and_non_resource_urls() {
        let s = shipped();
        let metrics = Attributes::NonResource {
            verb: "get".into(),
            path: "/metrics".into(),
        };
        let who = |user: &str, groups: &[&str]| Subject {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        assert!(authorize(&s, &who("prom", &[]), &metrics).allowed);
        assert!(authorize(&s, &who("x", &["monitoring"]), &metrics).allowed);
        assert!(!authorize(&s, &who("x", &["system:authenticated"]), &metrics).allowed);
        assert!(authorize(&s, &who("x", &[MASTERS]), &metrics).allowed);
        assert!(
            !authorize(&store(vec![]), &sa(), &metrics).allowed,
            "no RBAC: nothing granted"
        );
    }

    #[test]
    fn wildcards_and_subresources_match_as_rbac_does() {
        let s = store(vec![
            cluster_role(
                "r",
                json!({}),
                json!([{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"]}]),
            ),
            binding(
                "ClusterRoleBinding",
                "b",
                "",
                "ClusterRole",
                "r",
                json!([{"kind": "User", "name": "u"}]),
            ),
        ]);
        let u = Subject {
            user: "u".into(),
            groups: vec![],
        };
        assert!(
            authorize(
                &s,
                &u,
                &resource("patch", "apps", "deployments", "status", "", "")
            )
            .allowed
        );
        assert!(
            !authorize(
                &s,
                &u,
                &resource("patch", "apps", "deployments", "", "", "")
            )
            .allowed
        );
        assert!(
            !authorize(
                &s,
                &u,
                &resource("patch", "apps", "deployments", "scale", "", "")
            )
            .allowed
        );
    }
}
