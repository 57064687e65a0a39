//! External remediation requests (`engine/docs/capi.md` §2.5): an object cloned from the MHC's
//! `remediationTemplate`, named after the unhealthy Machine, for a provider's controller to act on.

use crate::command::{JsonText, Target};
use crate::model::{
    CLUSTER_NAME_LABEL, External, GroupKind, Kind, Machine, MachineHealthCheck, ObjectKey,
    ObjectRef,
};
use serde_json::{Map, Value, json};

pub const CLONED_FROM_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-name";
pub const CLONED_FROM_GROUP_KIND_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-groupkind";

/// The API group of a reference: `apiGroup` (v1beta2), or the group part of `apiVersion`.
pub fn ref_group(r: &ObjectRef) -> String {
    if !r.api_group.is_empty() {
        return r.api_group.clone();
    }
    match r.api_version.as_deref().and_then(|v| v.rsplit_once('/')) {
        Some((group, _version)) => group.to_string(),
        None => String::new(),
    }
}

/// Where the MHC's template lives: always in the MHC's namespace.
pub fn template_key(mhc: &MachineHealthCheck, template: &ObjectRef) -> ObjectKey {
    ObjectKey::management(
        Kind::External(GroupKind {
            group: ref_group(template),
            kind: template.kind.clone(),
        }),
        &mhc.meta.namespace,
        &template.name,
    )
}

/// The request's kind: the template's with the `Template` suffix removed (upstream
/// `TrimSuffix`, so a kind without the suffix is used as is).
pub fn request_group_kind(template: &ObjectRef) -> GroupKind {
    let kind = template
        .kind
        .strip_suffix("Template")
        .unwrap_or(&template.kind);
    GroupKind {
        group: ref_group(template),
        kind: kind.to_string(),
    }
}

/// Where the request for `machine` lives: named after it, in its namespace.
pub fn request_key(template: &ObjectRef, machine: &Machine) -> ObjectKey {
    ObjectKey::management(
        Kind::External(request_group_kind(template)),
        &machine.meta.namespace,
        &machine.meta.name,
    )
}

/// The target of a request command, addressed by the template's apiVersion.
pub fn request_target(template_ref: &ObjectRef, template: &External, machine: &Machine) -> Target {
    Target {
        key: request_key(template_ref, machine),
        api_version: template.api_version.clone(),
    }
}

/// The full request object: `spec` from the template's `spec.template.spec`, labels and
/// annotations from its `spec.template.metadata`, plus the cluster-name label, the cloned-from
/// annotations and a (non-controller) owner reference to the Machine.
pub fn request_object(
    template_ref: &ObjectRef,
    template: &External,
    machine: &Machine,
) -> JsonText {
    let body: Value = template
        .template_json
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null);
    let string_map = |field: &str| -> Map<String, Value> {
        body.get("metadata")
            .and_then(|m| m.get(field))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut labels = string_map("labels");
    labels.insert(
        CLUSTER_NAME_LABEL.to_string(),
        Value::String(machine.cluster_name.clone()),
    );
    let mut annotations = string_map("annotations");
    annotations.insert(
        CLONED_FROM_NAME_ANNOTATION.to_string(),
        Value::String(template.meta.name.clone()),
    );
    annotations.insert(
        CLONED_FROM_GROUP_KIND_ANNOTATION.to_string(),
        Value::String(format!(
            "{}.{}",
            template.group_kind.kind, template.group_kind.group
        )),
    );
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let object = json!({
        "apiVersion": template.api_version,
        "kind": request_group_kind(template_ref).kind,
        "metadata": {
            "name": machine.meta.name,
            "namespace": machine.meta.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine",
                "name": machine.meta.name,
                "uid": machine.meta.uid,
            }],
        },
        "spec": spec,
    });
    JsonText::from_value(&object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn template_ref() -> ObjectRef {
        ObjectRef {
            api_group: String::new(),
            api_version: Some("infrastructure.cluster.x-k8s.io/v1beta1".to_string()),
            kind: "DockerRemediationTemplate".to_string(),
            name: "remediate".to_string(),
            namespace: String::new(),
        }
    }

    #[test]
    fn request_is_named_after_the_machine_with_the_kind_minus_template() {
        let m = testing::machine("c1", "m1", Some("n1"));
        let key = request_key(&template_ref(), &m);
        assert_eq!(key.to_string(), "DockerRemediation default/m1");
        assert_eq!(
            key.kind,
            Kind::External(GroupKind {
                group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "DockerRemediation".into()
            })
        );
    }

    #[test]
    fn request_object_clones_the_template() {
        let m = testing::machine("c1", "m1", Some("n1"));
        let mut t = testing::external(
            "infrastructure.cluster.x-k8s.io",
            "DockerRemediationTemplate",
            "remediate",
        );
        t.api_version = "infrastructure.cluster.x-k8s.io/v1beta1".to_string();
        t.template_json = Some(
            r#"{"metadata":{"labels":{"team":"infra"}},"spec":{"strategy":"Reboot","retryLimit":2}}"#
                .to_string(),
        );
        let object = request_object(&template_ref(), &t, &m).to_value();
        assert_eq!(
            object,
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "DockerRemediation",
                "metadata": {
                    "name": "m1",
                    "namespace": "default",
                    "labels": {"team": "infra", "cluster.x-k8s.io/cluster-name": "c1"},
                    "annotations": {
                        "cluster.x-k8s.io/cloned-from-name": "remediate",
                        "cluster.x-k8s.io/cloned-from-groupkind": "DockerRemediationTemplate.infrastructure.cluster.x-k8s.io"
                    },
                    "ownerReferences": [{
                        "apiVersion": "cluster.x-k8s.io/v1beta2",
                        "kind": "Machine",
                        "name": "m1",
                        "uid": "uid-default-m1"
                    }]
                },
                "spec": {"strategy": "Reboot", "retryLimit": 2}
            })
        );
    }
}
