//! `metav1.Status` failure bodies, as the Kubernetes API sends them: HTTP status = `code`, with `reason`,
//! `message` and `details` as a real API server words them.

use super::resources::ResourceType;
use super::validate::Cause;
use serde_json::{Value, json};
use sim::api::ApiError;

/// A failed request, rendered as a `Status` object.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` (`name`, `group`, `kind`, `causes`); `None` leaves it out.
    pub details: Option<Value>,
}

fn details(t: &ResourceType, name: &str) -> Value {
    json!({"name": name, "group": t.group, "kind": t.plural})
}

impl Failure {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Failure {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Failure::new(400, "BadRequest", message)
    }

    pub fn not_found(t: &ResourceType, name: &str) -> Self {
        Failure {
            details: Some(details(t, name)),
            ..Failure::new(
                404,
                "NotFound",
                format!("{} {name:?} not found", t.qualified()),
            )
        }
    }

    /// 404 for a path that names no served resource.
    pub fn no_route() -> Self {
        Failure::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn already_exists(t: &ResourceType, name: &str) -> Self {
        Failure {
            details: Some(details(t, name)),
            ..Failure::new(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", t.qualified()),
            )
        }
    }

    pub fn conflict(t: &ResourceType, name: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
            t.qualified()
        );
        Failure {
            details: Some(details(t, name)),
            ..Failure::new(409, "Conflict", message)
        }
    }

    pub fn invalid(t: &ResourceType, name: &str, message: impl Into<String>) -> Self {
        let message = format!("{} {name:?} is invalid: {}", t.qualified(), message.into());
        Failure {
            details: Some(details(t, name)),
            ..Failure::new(422, "Invalid", message)
        }
    }

    /// 422 for a custom resource its schema refuses: the real server's message
    /// (`Machine.cluster.x-k8s.io "m1" is invalid: [spec.x: …, …]`) and one cause per problem.
    pub fn invalid_fields(t: &ResourceType, name: &str, causes: &[Cause]) -> Self {
        let qualified = if t.group.is_empty() {
            t.kind.clone()
        } else {
            format!("{}.{}", t.kind, t.group)
        };
        let each: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let list = match each.as_slice() {
            [one] => one.clone(),
            _ => format!("[{}]", each.join(", ")),
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        Failure {
            details: Some(
                json!({"name": name, "group": t.group, "kind": t.kind, "causes": causes}),
            ),
            ..Failure::new(
                422,
                "Invalid",
                format!("{qualified} {name:?} is invalid: {list}"),
            )
        }
    }

    pub fn method_not_allowed(method: &str) -> Self {
        Failure::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        if content_type == "application/apply-patch+yaml" {
            return Failure::new(
                415,
                "UnsupportedMediaType",
                "server-side apply (application/apply-patch+yaml) is not supported by this server: use client-side apply (kubectl apply without --server-side)",
            );
        }
        Failure::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json"
            ),
        )
    }

    /// 410 for a resourceVersion the server no longer has (watch ERROR events, lists).
    pub fn expired(message: impl Into<String>) -> Self {
        Failure::new(410, "Expired", message)
    }

    /// The namespace is being deleted: nothing new may be created in it.
    pub fn namespace_terminating(t: &ResourceType, name: &str, namespace: &str) -> Self {
        let message = format!(
            "{} {name:?} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
            t.qualified()
        );
        let mut d = details(t, name);
        d["causes"] = json!([{"reason": "NamespaceTerminating",
                              "message": format!("namespace {namespace} is being terminated"),
                              "field": "metadata.namespace"}]);
        Failure {
            details: Some(d),
            ..Failure::new(403, "Forbidden", message)
        }
    }

    /// A `ClusterStore` refusal, worded for `t`/`name`.
    pub fn from_store(err: ApiError, t: &ResourceType, name: &str) -> Self {
        match err {
            ApiError::NotFound(_) => Failure::not_found(t, name),
            ApiError::AlreadyExists(_) => Failure::already_exists(t, name),
            ApiError::Conflict(m) => Failure {
                details: Some(details(t, name)),
                ..Failure::new(409, "Conflict", m)
            },
            ApiError::Invalid(m) => Failure::invalid(t, name, m),
            ApiError::TooManyRequests { message, causes } => {
                let causes: Vec<Value> = causes
                    .into_iter()
                    .map(|c| json!({"reason": "DisruptionBudget", "message": c}))
                    .collect();
                Failure {
                    details: Some(json!({"causes": causes})),
                    ..Failure::new(429, "TooManyRequests", message)
                }
            }
            ApiError::Forbidden {
                message,
                namespace_terminating,
            } => {
                let mut f = Failure::new(403, "Forbidden", message);
                if namespace_terminating {
                    let namespace = f.message.rsplit("namespace ").next().unwrap_or("");
                    let namespace = namespace.split(' ').next().unwrap_or("").to_string();
                    f.details = Some(json!({"name": name, "kind": t.plural, "causes": [
                        {"reason": "NamespaceTerminating",
                         "message": format!("namespace {namespace} is being terminated"),
                         "field": "metadata.namespace"}]}));
                }
                f
            }
            ApiError::Internal(m) => Failure::new(500, "InternalError", m),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "message": self.message,
                           "reason": self.reason, "code": self.code});
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

/// The `Status` a successful eviction (or deletion answered with a Status) returns.
pub fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}
