//! Matching workload Nodes to a pool's `spec.providerIDList` (`engine/docs/capi.md` §3.4), and the
//! metadata the pool puts on its Nodes.

use crate::model::{ConditionStatus, Node, NodeReference, Taint, UNINITIALIZED_TAINT};
use crate::time::{Duration, Timestamp};
use serde_json::{Map, Value, json};

pub const CLUSTER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cluster-name";
pub const CLUSTER_NAMESPACE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-namespace";
pub const OWNER_KIND_ANNOTATION: &str = "cluster.x-k8s.io/owner-kind";
pub const OWNER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/owner-name";

/// What `getNodeReferences` finds: refs in providerID-list order and the counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRefsResult<'a> {
    pub references: Vec<NodeReference>,
    /// The matched Nodes, parallel to `references`.
    pub nodes: Vec<&'a Node>,
    pub ready: i32,
    pub available: i32,
    /// The earliest moment a ready-but-not-yet-available Node becomes available.
    pub next_available_at: Option<Timestamp>,
}

/// No Node matches any providerID of a non-empty list (upstream's `errNoAvailableNodes`,
/// logged, not an error: a Node event retriggers the reconcile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoAvailableNodes;

/// Matches each non-empty providerID, in list order, to the Node `node_of` returns for it
/// (exact match). A Node counts ready when `Ready=True`, and available when also
/// `min_ready` is zero or its Ready transition time plus `min_ready` is strictly before `now`.
pub fn node_references<'a>(
    provider_ids: &[String],
    min_ready: Duration,
    now: Timestamp,
    mut node_of: impl FnMut(&str) -> Option<&'a Node>,
) -> Result<NodeRefsResult<'a>, NoAvailableNodes> {
    let mut out = NodeRefsResult {
        references: Vec::with_capacity(provider_ids.len()),
        nodes: Vec::with_capacity(provider_ids.len()),
        ..Default::default()
    };
    for provider_id in provider_ids.iter().filter(|p| !p.is_empty()) {
        let Some(node) = node_of(provider_id) else {
            continue;
        };
        if let Some(ready) = node
            .condition("Ready")
            .filter(|c| c.status == ConditionStatus::True)
        {
            out.ready += 1;
            match available_at(ready.last_transition_time, min_ready) {
                Availability::Now => out.available += 1,
                Availability::At(at) if at < now => out.available += 1,
                Availability::At(at) => {
                    // Available once `now` is strictly after `at`.
                    let wake = at + Duration::from_millis(1);
                    out.next_available_at =
                        Some(out.next_available_at.map_or(wake, |t| t.min(wake)));
                }
                Availability::Never => {}
            }
        }
        out.references.push(NodeReference {
            name: node.meta.name.clone(),
            uid: node.meta.uid.clone(),
        });
        out.nodes.push(node);
    }
    if out.references.is_empty() && !provider_ids.is_empty() {
        return Err(NoAvailableNodes);
    }
    debug_assert!(
        out.violation().is_none(),
        "nodeRefs of {} providerIDs: {}",
        provider_ids.len(),
        out.violation().unwrap_or_default()
    );
    Ok(out)
}

enum Availability {
    Now,
    /// Available when `now` is strictly after this.
    At(Timestamp),
    /// A zero Ready transition time never satisfies a non-zero `minReadySeconds`.
    Never,
}

fn available_at(ready_since: Option<Timestamp>, min_ready: Duration) -> Availability {
    if min_ready.is_zero() {
        return Availability::Now;
    }
    match ready_since {
        Some(t) if t.0 != 0 => Availability::At(t + min_ready),
        Some(_) | None => Availability::Never,
    }
}

/// The merge patch that gives `node` the pool's annotations and drops the uninitialized taint,
/// or `None` when it already has them. A merge patch replaces `spec.taints` as a whole, so the
/// patch carries the full remaining list (`null` when none remain).
pub fn node_patch(node: &Node, cluster: &str, namespace: &str, pool: &str) -> Option<Value> {
    let desired = [
        (CLUSTER_NAME_ANNOTATION, cluster),
        (CLUSTER_NAMESPACE_ANNOTATION, namespace),
        (OWNER_KIND_ANNOTATION, "MachinePool"),
        (OWNER_NAME_ANNOTATION, pool),
    ];
    let annotations_ok = desired
        .iter()
        .all(|(k, v)| node.meta.annotations.get(*k).map(String::as_str) == Some(*v));
    let tainted = node.taints.iter().any(is_uninitialized_taint);
    if annotations_ok && !tainted {
        return None;
    }
    let mut patch = Map::new();
    if !annotations_ok {
        let annotations: Map<String, Value> = desired
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        patch.insert(
            "metadata".into(),
            crate::convert::object([("annotations", Value::Object(annotations))]),
        );
    }
    if tainted {
        let kept: Vec<Value> = node
            .taints
            .iter()
            .filter(|t| !is_uninitialized_taint(t))
            .map(taint_json)
            .collect();
        let taints = if kept.is_empty() {
            Value::Null
        } else {
            Value::Array(kept)
        };
        patch.insert("spec".into(), json!({ "taints": taints }));
    }
    Some(Value::Object(patch))
}

/// Upstream matches the taint by key and effect (`NoSchedule`).
fn is_uninitialized_taint(t: &Taint) -> bool {
    t.key == UNINITIALIZED_TAINT && t.effect == "NoSchedule"
}

fn taint_json(t: &Taint) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), Value::String(t.key.clone()));
    if !t.value.is_empty() {
        m.insert("value".into(), Value::String(t.value.clone()));
    }
    m.insert("effect".into(), Value::String(t.effect.clone()));
    Value::Object(m)
}

/// Upstream's event message: Go's `%+v` of the `[]corev1.ObjectReference`.
pub fn node_refs_event_message(refs: &[NodeReference]) -> String {
    let items: Vec<String> = refs
        .iter()
        .map(|r| {
            format!(
                "{{Kind:Node Namespace: Name:{} UID:{} APIVersion:v1 ResourceVersion: FieldPath:}}",
                r.name, r.uid
            )
        })
        .collect();
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, ready_condition};
    use std::collections::BTreeMap;

    /// Upstream's multi-provider node map of `TestMachinePoolGetNodeReference`.
    fn node_map() -> BTreeMap<String, Node> {
        let mut nodes = Vec::new();
        for (name, pid, ready) in [
            ("node-1", "aws://us-east-1/id-node-1", true),
            ("node-2", "aws://us-west-2/id-node-2", true),
            ("node-3", "aws://us-west-2/id-node-3", false),
            ("gce-node-2", "gce://us-central1/gce-id-node-2", true),
            ("azure-node-4", "azure://westus2/id-node-4", true),
            ("azure-nodepool1-0", "azure://westus2/id-nodepool1/0", true),
            ("azure-nodepool2-0", "azure://westus2/id-nodepool2/0", true),
        ] {
            let mut n = node(name);
            n.provider_id = Some(pid.to_string());
            if ready {
                // Upstream's fixture has no transition time on Ready.
                n.conditions = vec![ready_condition(ConditionStatus::True, Timestamp(0))];
                n.conditions[0].last_transition_time = None;
            } else {
                n.conditions.clear();
            }
            nodes.push(n);
        }
        nodes
            .into_iter()
            .map(|n| (n.provider_id.clone().unwrap(), n))
            .collect()
    }

    #[test]
    fn node_references_table_mirrors_upstream() {
        let map = node_map();
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, Vec<&str>, i64, Option<(Vec<&str>, i32, i32)>)> = vec![
            (
                "valid provider id, valid aws node",
                vec!["aws://us-east-1/id-node-1"],
                0,
                Some((vec!["node-1"], 1, 1)),
            ),
            (
                "valid provider id, valid aws node (us-west-2)",
                vec!["aws://us-west-2/id-node-2"],
                0,
                Some((vec!["node-2"], 1, 1)),
            ),
            (
                "valid provider id, valid aws node, nodeReady condition set to false",
                vec!["aws://us-west-2/id-node-3"],
                0,
                Some((vec!["node-3"], 0, 0)),
            ),
            (
                "valid provider id, valid gce node",
                vec!["gce://us-central1/gce-id-node-2"],
                0,
                Some((vec!["gce-node-2"], 1, 1)),
            ),
            (
                "valid provider id, valid azure node",
                vec!["azure://westus2/id-node-4"],
                0,
                Some((vec!["azure-node-4"], 1, 1)),
            ),
            (
                "valid provider ids, valid azure and aws nodes",
                vec!["aws://us-east-1/id-node-1", "azure://westus2/id-node-4"],
                0,
                Some((vec!["node-1", "azure-node-4"], 2, 2)),
            ),
            (
                "valid provider id, no node found",
                vec!["aws:///id-node-100"],
                0,
                None,
            ),
            (
                "no provider id, no node found",
                vec![],
                0,
                Some((vec![], 0, 0)),
            ),
            (
                "valid provider id with non-unique instance id, valid azure node",
                vec!["azure://westus2/id-nodepool1/0"],
                0,
                Some((vec!["azure-nodepool1-0"], 1, 1)),
            ),
            (
                "valid provider ids with same instance ids, valid azure nodes",
                vec![
                    "azure://westus2/id-nodepool1/0",
                    "azure://westus2/id-nodepool2/0",
                ],
                0,
                Some((vec!["azure-nodepool1-0", "azure-nodepool2-0"], 2, 1 + 1)),
            ),
            (
                "valid provider id, valid aws node, with minReadySeconds",
                vec!["aws://us-east-1/id-node-1"],
                20,
                Some((vec!["node-1"], 1, 0)),
            ),
            (
                "valid provider id, valid aws node, with minReadySeconds equals 0",
                vec!["aws://us-east-1/id-node-1"],
                0,
                Some((vec!["node-1"], 1, 1)),
            ),
        ];
        for (name, ids, min_ready_secs, want) in cases {
            let ids: Vec<String> = ids.into_iter().map(str::to_string).collect();
            let got = node_references(
                &ids,
                Duration::from_secs(min_ready_secs),
                Timestamp(1_000_000),
                |p| map.get(p),
            );
            match want {
                None => assert_eq!(got, Err(NoAvailableNodes), "{name}"),
                Some((names, ready, available)) => {
                    let got = got.unwrap_or_else(|_| panic!("{name}: no nodes"));
                    let got_names: Vec<&str> =
                        got.references.iter().map(|r| r.name.as_str()).collect();
                    assert_eq!(got_names, names, "{name}");
                    assert_eq!((got.ready, got.available), (ready, available), "{name}");
                }
            }
        }
    }

    #[test]
    fn min_ready_seconds_counts_available_strictly_after_and_reports_when() {
        let mut n = node("n1");
        n.provider_id = Some("p1".into());
        n.conditions = vec![ready_condition(ConditionStatus::True, Timestamp(10_000))];
        let ids = vec!["p1".to_string()];
        let at = |now| node_references(&ids, Duration::from_secs(5), Timestamp(now), |_| Some(&n));
        let early = at(15_000).unwrap();
        assert_eq!((early.ready, early.available), (1, 0));
        assert_eq!(early.next_available_at, Some(Timestamp(15_001)));
        let later = at(15_001).unwrap();
        assert_eq!(
            (later.ready, later.available, later.next_available_at),
            (1, 1, None)
        );
    }

    #[test]
    fn patch_nodes_table_mirrors_upstream() {
        let uninit = Taint {
            key: UNINITIALIZED_TAINT.into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        };
        let other = Taint {
            key: "some-other-taint".into(),
            value: "SomeEffect".into(),
            effect: String::new(),
        };
        // Node with the uninitialized taint only: annotations added, taints removed.
        let mut n1 = node("node-1");
        n1.taints = vec![uninit.clone()];
        let p = node_patch(&n1, "cluster-1", "my-namespace", "machinepool-1").unwrap();
        assert_eq!(
            p.to_string(),
            r#"{"metadata":{"annotations":{"cluster.x-k8s.io/cluster-name":"cluster-1","cluster.x-k8s.io/cluster-namespace":"my-namespace","cluster.x-k8s.io/owner-kind":"MachinePool","cluster.x-k8s.io/owner-name":"machinepool-1"}},"spec":{"taints":null}}"#
        );
        // Annotated already, other taint kept in the full list.
        let mut n3 = node("node-3");
        for (k, v) in [
            (CLUSTER_NAME_ANNOTATION, "cluster-1"),
            (CLUSTER_NAMESPACE_ANNOTATION, "my-namespace"),
            (OWNER_KIND_ANNOTATION, "MachinePool"),
            (OWNER_NAME_ANNOTATION, "machinepool-2"),
        ] {
            n3.meta.annotations.insert(k.into(), v.into());
        }
        n3.taints = vec![other.clone(), uninit];
        let p = node_patch(&n3, "cluster-1", "my-namespace", "machinepool-2").unwrap();
        assert_eq!(
            p.to_string(),
            r#"{"spec":{"taints":[{"key":"some-other-taint","value":"SomeEffect","effect":""}]}}"#
        );
        // Nothing to do: no patch.
        n3.taints = vec![other];
        assert_eq!(
            node_patch(&n3, "cluster-1", "my-namespace", "machinepool-2"),
            None
        );
    }

    #[test]
    fn event_message_is_gos_plus_v_of_the_refs() {
        let refs = vec![
            NodeReference {
                name: "n1".into(),
                uid: "u1".into(),
            },
            NodeReference {
                name: "n2".into(),
                uid: "u2".into(),
            },
        ];
        assert_eq!(
            node_refs_event_message(&refs),
            "[{Kind:Node Namespace: Name:n1 UID:u1 APIVersion:v1 ResourceVersion: FieldPath:} {Kind:Node Namespace: Name:n2 UID:u2 APIVersion:v1 ResourceVersion: FieldPath:}]"
        );
    }
}
