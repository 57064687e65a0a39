//! What a management object makes the controllers watch: the provider kinds it refers to, and
//! for a Cluster, its workload cluster.

use serde_json::Value;

/// `(group, version if known, kind)` of the provider objects a CAPI object refers to.
pub fn provider_refs(object: &Value) -> Vec<(String, Option<String>, String)> {
    let paths = [
        "/spec/infrastructureRef",
        "/spec/bootstrap/configRef",
        "/spec/template/spec/infrastructureRef",
        "/spec/template/spec/bootstrap/configRef",
        "/spec/remediationTemplate",
        "/spec/remediation/templateRef",
    ];
    // A MachinePool's template names its InfraMachinePool, which the pool controller reads; a
    // MachineSet's or MachineDeployment's names a `…Template` no controller here reads (its
    // Machines name their own objects): watching it would only need RBAC for nothing.
    let pool = object.get("kind").and_then(Value::as_str) == Some("MachinePool");
    let mut out = Vec::new();
    for path in paths {
        if path.starts_with("/spec/template/") && !pool {
            continue;
        }
        let Some(r) = crate::convert::pointer(object, path) else {
            continue;
        };
        let kind = crate::convert::member(r, "kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (group, version) = match (
            crate::convert::member(r, "apiVersion").and_then(Value::as_str),
            crate::convert::member(r, "apiGroup").and_then(Value::as_str),
        ) {
            (Some(av), _) => match av.split_once('/') {
                Some((g, v)) => (g.to_string(), Some(v.to_string())),
                None => continue,
            },
            (None, Some(g)) => (g.to_string(), None),
            (None, None) => continue,
        };
        if kind.is_empty() || !group.ends_with(".cluster.x-k8s.io") {
            continue;
        }
        out.push((group.clone(), version.clone(), kind.to_string()));
        // The external remediation object a template stamps out.
        if path.contains("emediation")
            && let Some(made) = kind.strip_suffix("Template")
        {
            out.push((group, version, made.to_string()));
        }
    }
    // An InfraMachinePool names the kind of its instances (MachinePool Machines, §3.7).
    if let Some(kind) =
        crate::convert::pointer(object, "/status/infrastructureMachineKind").and_then(Value::as_str)
        && let Some((group, version)) = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|av| av.split_once('/'))
        && group.ends_with(".cluster.x-k8s.io")
        && !kind.is_empty()
    {
        out.push((
            group.to_string(),
            Some(version.to_string()),
            kind.to_string(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn provider_refs_in_both_api_versions_and_remediation_templates() {
        let m = json!({"spec": {
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachine", "name": "a"},
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "a"}},
            "remediation": {"templateRef": {"apiVersion": "remediation.cluster.x-k8s.io/v1beta1", "kind": "RebootTemplate", "name": "r"}}}});
        let refs = provider_refs(&m);
        let names: Vec<(&str, Option<&str>, &str)> = refs
            .iter()
            .map(|(g, v, k)| (g.as_str(), v.as_deref(), k.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "infrastructure.cluster.x-k8s.io",
                    Some("v1beta1"),
                    "DockerMachine"
                ),
                ("bootstrap.cluster.x-k8s.io", None, "KubeadmConfig"),
                (
                    "remediation.cluster.x-k8s.io",
                    Some("v1beta1"),
                    "RebootTemplate"
                ),
                ("remediation.cluster.x-k8s.io", Some("v1beta1"), "Reboot"),
            ]
        );
        let pool = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachinePool",
                          "status": {"infrastructureMachineKind": "DockerMachinePoolMachine"}});
        assert_eq!(
            provider_refs(&pool),
            [(
                "infrastructure.cluster.x-k8s.io".to_string(),
                Some("v1beta1".to_string()),
                "DockerMachinePoolMachine".to_string()
            )],
            "an InfraMachinePool's instances are watched (lifecycle run missed them)"
        );
        let core = json!({"spec": {"infrastructureRef": {"apiVersion": "v1", "kind": "Secret", "name": "s"}}});
        assert!(provider_refs(&core).is_empty());
        let template = |kind: &str| {
            json!({"kind": kind, "spec": {"template": {"spec": {
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "t"}}}}})
        };
        assert!(
            provider_refs(&template("MachineSet")).is_empty(),
            "a MachineSet's template kind is read by no controller here"
        );
        assert_eq!(provider_refs(&template("MachinePool")).len(), 1);
    }
}
