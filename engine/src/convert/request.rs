//! Commands → concrete API requests, so the simulator and the kube adapter execute the same
//! operation for every [`Action`].

use super::status::{capi_version_of, conditions_json};
use crate::command::{Action, Command, EventSeries, JsonText, Target};
use crate::model::{Kind, ObjectKey};
use serde_json::{Value, json};

/// A subresource a request addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Status,
    Eviction,
}

impl Subresource {
    pub fn as_str(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Eviction => "eviction",
        }
    }
}

/// One API operation on one object.
///
/// Executors: `method()`, `path()`, `content_type()` and `body()` give the HTTP request for
/// every variant except the finalizer ones, which are read-modify-write: GET the object, build
/// the RFC 6902 patch with [`finalizer_json_patch`] (a `test` guards against a concurrent
/// change, answered with 422 and retried by the engine on its next reconcile), and PATCH it;
/// when the patch is `None` nothing needs doing and the command succeeded.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiRequest {
    /// `PATCH` with `application/merge-patch+json` (RFC 7386: arrays are replaced whole).
    MergePatch {
        target: Target,
        subresource: Option<Subresource>,
        patch: Value,
    },
    /// `POST` of `body` to the target's collection.
    Create {
        target: Target,
        body: Value,
    },
    /// `DELETE` of the target.
    Delete {
        target: Target,
    },
    /// `POST .../pods/{name}/eviction` with a `policy/v1` Eviction ([`eviction_body`]).
    Evict {
        pod: Target,
        grace_period_seconds: Option<i64>,
    },
    AddFinalizer {
        target: Target,
        finalizer: String,
    },
    RemoveFinalizer {
        target: Target,
        finalizer: String,
    },
}

impl ApiRequest {
    pub fn target(&self) -> &Target {
        match self {
            ApiRequest::MergePatch { target, .. }
            | ApiRequest::Create { target, .. }
            | ApiRequest::Delete { target }
            | ApiRequest::AddFinalizer { target, .. }
            | ApiRequest::RemoveFinalizer { target, .. } => target,
            ApiRequest::Evict { pod, .. } => pod,
        }
    }

    /// The HTTP method of the (final) request.
    pub fn method(&self) -> &'static str {
        match self {
            ApiRequest::MergePatch { .. }
            | ApiRequest::AddFinalizer { .. }
            | ApiRequest::RemoveFinalizer { .. } => "PATCH",
            ApiRequest::Create { .. } | ApiRequest::Evict { .. } => "POST",
            ApiRequest::Delete { .. } => "DELETE",
        }
    }

    /// The request path (a collection for `Create`).
    pub fn path(&self) -> String {
        match self {
            ApiRequest::MergePatch {
                target,
                subresource,
                ..
            } => api_path(target, subresource.map(Subresource::as_str)),
            ApiRequest::Create { target, .. } => collection_path(target),
            ApiRequest::Delete { target }
            | ApiRequest::AddFinalizer { target, .. }
            | ApiRequest::RemoveFinalizer { target, .. } => api_path(target, None),
            ApiRequest::Evict { pod, .. } => api_path(pod, Some(Subresource::Eviction.as_str())),
        }
    }

    /// The `Content-Type` of the body, when there is one.
    pub fn content_type(&self) -> Option<&'static str> {
        match self {
            ApiRequest::MergePatch { .. } => Some("application/merge-patch+json"),
            ApiRequest::AddFinalizer { .. } | ApiRequest::RemoveFinalizer { .. } => {
                Some("application/json-patch+json")
            }
            ApiRequest::Create { .. } | ApiRequest::Evict { .. } => Some("application/json"),
            ApiRequest::Delete { .. } => None,
        }
    }

    /// The body; `None` for `Delete` and for the finalizer requests (built from the object read).
    pub fn body(&self) -> Option<Value> {
        match self {
            ApiRequest::MergePatch { patch, .. } => Some(patch.clone()),
            ApiRequest::Create { body, .. } => Some(body.clone()),
            ApiRequest::Evict {
                pod,
                grace_period_seconds,
            } => Some(eviction_body(pod, *grace_period_seconds)),
            ApiRequest::Delete { .. }
            | ApiRequest::AddFinalizer { .. }
            | ApiRequest::RemoveFinalizer { .. } => None,
        }
    }
}

/// The API request that carries out `command`.
pub fn request_for(command: &Command) -> ApiRequest {
    match &command.action {
        Action::Cordon { node } => ApiRequest::MergePatch {
            target: node.clone(),
            subresource: None,
            patch: json!({"spec": {"unschedulable": true}}),
        },
        Action::Evict {
            pod,
            grace_period_seconds,
        } => ApiRequest::Evict {
            pod: pod.clone(),
            grace_period_seconds: *grace_period_seconds,
        },
        Action::DeleteInfrastructure { target }
        | Action::DeleteBootstrap { target }
        | Action::DeleteRemediation { target }
        | Action::DeleteMachine { target }
        | Action::DeleteNode { node: target } => ApiRequest::Delete {
            target: target.clone(),
        },
        Action::AddFinalizer { target, finalizer } => ApiRequest::AddFinalizer {
            target: target.clone(),
            finalizer: finalizer.clone(),
        },
        Action::RemoveFinalizer { target, finalizer } => ApiRequest::RemoveFinalizer {
            target: target.clone(),
            finalizer: finalizer.clone(),
        },
        Action::SetCondition {
            target, conditions, ..
        } => ApiRequest::MergePatch {
            target: target.clone(),
            subresource: Some(Subresource::Status),
            patch: super::object([(
                "status",
                conditions_json(capi_version_of(&target.api_version), conditions),
            )]),
        },
        Action::SetOwnCondition {
            target,
            conditions,
            resource_version,
            ..
        } => ApiRequest::MergePatch {
            target: target.clone(),
            subresource: Some(Subresource::Status),
            patch: super::object([
                (
                    "metadata",
                    super::object([(
                        "resourceVersion",
                        Value::String(resource_version.to_string()),
                    )]),
                ),
                (
                    "status",
                    conditions_json(capi_version_of(&target.api_version), conditions),
                ),
            ]),
        },
        Action::PatchStatus { target, merge, .. } => ApiRequest::MergePatch {
            target: target.clone(),
            subresource: Some(Subresource::Status),
            patch: merge_patch(merge, command),
        },
        Action::PatchSpec { target, merge, .. }
        | Action::SetOwnerReference { target, merge, .. } => ApiRequest::MergePatch {
            target: target.clone(),
            subresource: None,
            patch: merge_patch(merge, command),
        },
        Action::CreateRemediation { target, object } | Action::CreateMachine { target, object } => {
            ApiRequest::Create {
                target: target.clone(),
                body: object.to_value(),
            }
        }
        Action::RecordEvent {
            regarding,
            type_,
            reason,
            message,
        } => {
            let namespace = if regarding.key.namespace.is_empty() {
                // Events about cluster-scoped objects live in `default`, as kubectl looks there.
                "default"
            } else {
                regarding.key.namespace.as_str()
            };
            // A repeat names its series' Event, which the adapter updates (`count`).
            let series = command.series.unwrap_or(EventSeries {
                first: command.id,
                count: 1,
            });
            let name = event_name(&regarding.key.name, reason, series.first);
            let mut involved = json!({
                "apiVersion": regarding.api_version,
                "kind": regarding.key.kind.name(),
                "name": regarding.key.name,
            });
            if !regarding.key.namespace.is_empty() {
                involved["namespace"] = json!(regarding.key.namespace);
            }
            ApiRequest::Create {
                target: Target {
                    key: ObjectKey::new(
                        regarding.key.scope.clone(),
                        Kind::from_group_kind("", "Event"),
                        namespace,
                        &name,
                    ),
                    api_version: "v1".to_string(),
                },
                body: json!({
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": name, "namespace": namespace},
                    "involvedObject": involved,
                    "reason": reason,
                    "message": message,
                    "type": type_.as_str(),
                    "source": {"component": "lifecycle"},
                    "count": series.count,
                }),
            }
        }
    }
}

/// A merge patch from the engine. The engine builds it from a JSON value, so it always parses;
/// if it ever does not, `{}` (a no-op) is sent rather than `null`, which would wipe the object.
fn merge_patch(merge: &JsonText, command: &Command) -> Value {
    match serde_json::from_str::<Value>(&merge.0) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) | Err(_) => {
            tracing::error!(command = %command, patch = %merge.0, "merge patch is not a JSON object; sending an empty patch");
            json!({})
        }
    }
}

/// `<object>.<16 hex digits>`, the object part cut so the name stays a valid DNS subdomain
/// (at most 253 characters).
fn event_name(object: &str, reason: &str, command_id: u64) -> String {
    const NAME_MAX: usize = 253;
    let suffix = format!(".{:016x}", event_hash(reason, command_id));
    let mut cut = object.len().min(NAME_MAX - suffix.len());
    while !object.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", object[..cut].trim_end_matches(['.', '-']))
}

/// FNV-1a (64 bit) of the event's reason and the id of the command that started its series: a
/// stable, deterministic event name suffix (the same series always names the same Event, so a
/// retry is a 409 and a repeat an update).
fn event_hash(reason: &str, command_id: u64) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    reason
        .as_bytes()
        .iter()
        .chain(&[0])
        .chain(&command_id.to_le_bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The `policy/v1` Eviction body for `pod`: its `metadata.name` must equal the pod's (the API
/// answers 400 otherwise), and `deleteOptions.gracePeriodSeconds` is sent only when set.
pub fn eviction_body(pod: &Target, grace_period_seconds: Option<i64>) -> Value {
    let mut body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.key.name, "namespace": pod.key.namespace},
    });
    if let Some(g) = grace_period_seconds {
        body["deleteOptions"] = json!({"gracePeriodSeconds": g});
    }
    body
}

/// Which way a finalizer changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerChange {
    Add,
    Remove,
}

/// The RFC 6902 patch that adds or removes `finalizer` on `object` (the object as just read),
/// guarded by a `test` of what was read, as kube's finalizer helper does.
/// `None` when the finalizer is already present (add) or absent (remove).
pub fn finalizer_json_patch(
    object: &Value,
    finalizer: &str,
    change: FinalizerChange,
) -> Option<Value> {
    let current = object
        .pointer("/metadata/finalizers")
        .filter(|v| !v.is_null());
    let list: Vec<&str> = current
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let index = list.iter().position(|f| *f == finalizer);
    match (change, index) {
        (FinalizerChange::Add, Some(_)) | (FinalizerChange::Remove, None) => None,
        (FinalizerChange::Add, None) => Some(match current {
            None => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ]),
            Some(current) => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ]),
        }),
        (FinalizerChange::Remove, Some(i)) => {
            let path = format!("/metadata/finalizers/{i}");
            Some(json!([
                {"op": "test", "path": path, "value": finalizer},
                {"op": "remove", "path": path},
            ]))
        }
    }
}

/// The resource name of a kind: lower case, plural by English rules (`Node` → `nodes`,
/// `Policy` → `policies`, `Ingress` → `ingresses`, `Gateway` → `gateways`).
pub fn plural(kind: &str) -> String {
    let mut out = String::with_capacity(kind.len() + 3);
    push_plural(&mut out, kind);
    out
}

/// Appends [`plural`] of `kind` to `out`: a request path is built in one string.
fn push_plural(out: &mut String, kind: &str) {
    let start = out.len();
    out.extend(kind.chars().map(|c| c.to_ascii_lowercase()));
    let lower = &out[start..];
    let consonant_y = lower.strip_suffix('y').is_some_and(|stem| {
        stem.chars()
            .last()
            .is_some_and(|c| !matches!(c, 'a' | 'e' | 'i' | 'o' | 'u'))
    });
    if consonant_y {
        out.pop();
        out.push_str("ies");
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|suffix| lower.ends_with(suffix))
    {
        out.push_str("es");
    } else {
        out.push('s');
    }
}

/// The path of the target's collection: `/api/v1/namespaces/{ns}/pods`, `/api/v1/nodes`,
/// `/apis/{group}/{version}/namespaces/{ns}/{plural}`. An empty namespace means cluster-scoped.
/// Built in one string (every request builds one).
pub fn collection_path(target: &Target) -> String {
    let key = &target.key;
    let mut path = String::with_capacity(64 + key.namespace.len() + key.name.len());
    match target.api_version.split_once('/') {
        Some((group, version)) => path.extend(["/apis/", group, "/", version]),
        None => path.extend(["/api/", &target.api_version]),
    }
    if !key.namespace.is_empty() {
        path.extend(["/namespaces/", &key.namespace]);
    }
    path.push('/');
    push_plural(&mut path, key.kind.name());
    path
}

/// The path of the target object, optionally of one of its subresources:
/// `/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines/m1/status`.
pub fn api_path(target: &Target, subresource: Option<&str>) -> String {
    let mut path = collection_path(target);
    path.push('/');
    path.push_str(&target.key.name);
    if let Some(sub) = subresource {
        path.push('/');
        path.push_str(sub);
    }
    path
}
