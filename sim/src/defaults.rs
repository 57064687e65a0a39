//! Defaults the API server (and CAPI's webhooks, per the product decisions) apply on create.

use crate::api::json;
use crate::api::json::Pointer as _;
use serde_json::{Value, json};

pub const PROVIDER_FINALIZER: &str = "sim.lifecycle.x-k8s.io/provider";

fn is_v1beta1(obj: &Value) -> bool {
    json::api_version(obj).ends_with("/v1beta1")
}

/// Applies Kubernetes and CAPI defaults to an object about to be created.
pub fn apply_defaults(obj: &mut Value) {
    let group = json::group_of(json::api_version(obj)).to_string();
    match (group.as_str(), json::kind(obj)) {
        ("", "Pod") => {
            let spec = json::object_at(obj, &["spec"]);
            spec.entry("terminationGracePeriodSeconds")
                .or_insert(json!(30));
            if obj.at_pointer("/status/phase").is_none()
                && obj.at_pointer("/spec/nodeName").is_some()
            {
                let status = json::object_at(obj, &["status"]);
                status.insert("phase".into(), json!("Running"));
                status
                    .entry("conditions")
                    .or_insert(json!([{"type": "Ready", "status": "True"}]));
            }
        }
        ("cluster.x-k8s.io", "Machine") => {
            cluster_name_label(obj, "/spec/clusterName");
            if is_v1beta1(obj) {
                json::object_at(obj, &["spec"])
                    .entry("nodeDeletionTimeout")
                    .or_insert(json!("10s"));
            } else {
                json::object_at(obj, &["spec", "deletion"])
                    .entry("nodeDeletionTimeoutSeconds")
                    .or_insert(json!(10));
            }
        }
        ("cluster.x-k8s.io", "MachineHealthCheck") => {
            cluster_name_label(obj, "/spec/clusterName");
            if is_v1beta1(obj) {
                let spec = json::object_at(obj, &["spec"]);
                spec.entry("nodeStartupTimeout").or_insert(json!("10m0s"));
                if !spec.contains_key("unhealthyRange") {
                    spec.entry("maxUnhealthy").or_insert(json!("100%"));
                }
            } else {
                json::object_at(obj, &["spec", "checks"])
                    .entry("nodeStartupTimeoutSeconds")
                    .or_insert(json!(600));
            }
        }
        ("cluster.x-k8s.io", "MachinePool") => {
            cluster_name_label(obj, "/spec/clusterName");
            if is_v1beta1(obj) {
                json::object_at(obj, &["spec", "template", "spec"])
                    .entry("nodeDeletionTimeout")
                    .or_insert(json!("10s"));
            } else {
                json::object_at(obj, &["spec", "template", "spec", "deletion"])
                    .entry("nodeDeletionTimeoutSeconds")
                    .or_insert(json!(10));
            }
        }
        _ => {}
    }
}

fn cluster_name_label(obj: &mut Value, path: &str) {
    let Some(cluster) = obj
        .at_pointer(path)
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    json::object_at(obj, &["metadata", "labels"])
        .entry(engine::model::CLUSTER_NAME_LABEL)
        .or_insert(json!(cluster));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_a_grace_period_and_run_once_bound() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                             "spec": {"nodeName": "n1"}});
        apply_defaults(&mut pod);
        assert_eq!(
            pod.at_pointer("/spec/terminationGracePeriodSeconds"),
            Some(&json!(30))
        );
        assert_eq!(pod.at_pointer("/status/phase"), Some(&json!("Running")));
    }

    #[test]
    fn machines_get_the_node_deletion_timeout_default_in_their_version() {
        let mut v1 = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                            "metadata": {"name": "m"}, "spec": {"clusterName": "c1"}});
        apply_defaults(&mut v1);
        assert_eq!(
            v1.at_pointer("/spec/nodeDeletionTimeout"),
            Some(&json!("10s"))
        );
        assert_eq!(
            v1.at_pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name"),
            Some(&json!("c1"))
        );
        let mut v2 = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                            "metadata": {"name": "m"}, "spec": {"clusterName": "c1",
                            "deletion": {"nodeDeletionTimeoutSeconds": 0}}});
        apply_defaults(&mut v2);
        assert_eq!(
            v2.at_pointer("/spec/deletion/nodeDeletionTimeoutSeconds"),
            Some(&json!(0))
        );
    }
}
