//! Commands → HTTP requests → [`ApiOutcome`]s, through `engine::convert::request_for`, so the
//! adapter sends exactly what the simulator executes.
//!
//! Answers: 2xx → `Ok` with the returned object converted (none for a `Status` body, and none
//! for a DELETE whose object is already gone); 404 → `NotFound`; 409 → `Conflict`; 429
//! and 403 → `Refused`, typed by the `Status` `details.causes` and `retryAfterSeconds`
//! (`ApiOutcome::refused`); any other code → `Error`;
//! no HTTP answer at all → `Unreachable`. Finalizer commands are a GET then a guarded JSON
//! patch ([`finalizer_json_patch`]); nothing to change is a success with the object read.

use super::gate::Priority;
use super::throttle::Prepaid;
use engine::convert::{
    ApiRequest, FinalizerChange, finalizer_json_patch, object_from_json, request_for,
    unreadable_of_json,
};
use engine::model::Scope;
use engine::outcome::Cause;
use engine::{Action, ApiOutcome, Command};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// How a command's request goes through its cluster's throttle.
#[derive(Clone, Copy)]
struct Manners {
    priority: Priority,
    /// The command's first request: its token was taken before ([`Prepaid`]).
    first: bool,
}

/// One HTTP exchange: the status code and the body read as JSON (`Null` when it is not JSON).
async fn send(
    client: &Client,
    manners: Manners,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .extension(manners.priority);
    if manners.first {
        builder = builder.extension(Prepaid);
    }
    if let Some(ct) = content_type {
        builder = builder.header("content-type", ct);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let request = builder.body(Body::from(bytes)).map_err(|e| e.to_string())?;
    let response = client.send(request).await.map_err(|e| e.to_string())?;
    let code = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((code, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

fn status_message(body: &Value, code: u16) -> String {
    body.get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {code}"))
}

fn causes(body: &Value) -> Vec<&Value> {
    body.pointer("/details/causes")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}

/// The outcome of an HTTP answer from the cluster `scope`. `deleted`: the request was a
/// DELETE, so a returned object without `deletionTimestamp` is its last state, not a live
/// object. A returned object that does not read is handed on as unreadable: the API says it is
/// there, so it is unknown, never absent.
pub fn outcome_of(scope: &Scope, code: u16, body: &Value, deleted: bool) -> ApiOutcome {
    match code {
        200..=299 => {
            let live = !deleted
                || body
                    .pointer("/metadata/deletionTimestamp")
                    .is_some_and(|v| !v.is_null());
            let is_object =
                body.is_object() && body.get("kind").and_then(Value::as_str) != Some("Status");
            let object = if live && is_object {
                match object_from_json(body) {
                    Ok(o) => o.map(Box::new),
                    Err(e) => {
                        tracing::warn!("cannot read the object the API returned: {e}");
                        unreadable_of_json(scope, body, &e).map(Box::new)
                    }
                }
            } else {
                None
            };
            ApiOutcome::Ok { object }
        }
        404 => ApiOutcome::NotFound,
        409 => ApiOutcome::Conflict {
            message: status_message(body, code),
        },
        429 | 403 => {
            let causes: Vec<Cause> = causes(body)
                .iter()
                .map(|c| Cause {
                    reason: c.get("reason").and_then(Value::as_str).unwrap_or(""),
                    message: c.get("message").and_then(Value::as_str).unwrap_or(""),
                })
                .collect();
            let retry_after = body
                .pointer("/details/retryAfterSeconds")
                .and_then(Value::as_u64)
                .and_then(|s| u32::try_from(s).ok());
            ApiOutcome::refused(code, status_message(body, code), &causes, retry_after)
        }
        _ => ApiOutcome::Error {
            code,
            message: status_message(body, code),
        },
    }
}

/// What an Event needs that only the running adapter knows: the regarded object's uid and
/// resourceVersion as its cache has them, and the time (kubectl's `describe` finds Events by
/// the uid, and `LAST SEEN` reads the timestamps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventStamp {
    pub uid: String,
    pub resource_version: u64,
    pub at: engine::Timestamp,
    /// `reportingInstance`: this process.
    pub instance: String,
}

impl EventStamp {
    /// For an Event: the regarded object's uid and version as the cache has them, and now.
    pub fn of(command: &Command, engine: Option<&engine::Engine>, instance: &str) -> Option<Self> {
        let Action::RecordEvent { regarding, .. } = &command.action else {
            return None;
        };
        let meta = engine
            .and_then(|e| e.store().get(&regarding.key))
            .map(|o| o.meta());
        Some(EventStamp {
            uid: meta.map(|m| m.uid.clone()).unwrap_or_default(),
            resource_version: meta.map_or(0, |m| m.resource_version),
            at: crate::clock::wall_now(),
            instance: instance.to_string(),
        })
    }

    /// Completes a `v1` Event body built by `request_for`.
    pub fn apply(&self, event: &mut Value) {
        let Some(body) = event.as_object_mut() else {
            return;
        };
        if let Some(involved) = body
            .get_mut("involvedObject")
            .and_then(Value::as_object_mut)
        {
            if !self.uid.is_empty() {
                involved.insert("uid".into(), Value::from(self.uid.clone()));
            }
            if self.resource_version > 0 {
                involved.insert(
                    "resourceVersion".into(),
                    Value::from(self.resource_version.to_string()),
                );
            }
        }
        let at = Value::from(self.at.to_rfc3339());
        body.insert("firstTimestamp".into(), at.clone());
        body.insert("lastTimestamp".into(), at);
        body.insert("reportingComponent".into(), Value::from("lifecycle"));
        body.insert(
            "reportingInstance".into(),
            Value::from(self.instance.clone()),
        );
    }
}

/// Executes `command` against `client` (the client of the command's target cluster); an Event
/// gets `stamp`. The caller has taken the token of its first request
/// ([`super::throttle::Throttle::first_request`]).
pub async fn execute(client: &Client, command: &Command, stamp: Option<&EventStamp>) -> ApiOutcome {
    let mut first = Manners {
        priority: Priority::of(command),
        first: true,
    };
    let next = Manners {
        first: false,
        ..first
    };
    let resolved;
    let command = match versioned(client, first, command).await {
        Ok(None) => command,
        Ok(Some(c)) => {
            // Discovery spent the first request's token.
            first = next;
            resolved = c;
            &resolved
        }
        Err(message) => return ApiOutcome::Unreachable { message },
    };
    let mut request = request_for(command);
    if let (Some(stamp), ApiRequest::Create { body, .. }) = (stamp, &mut request) {
        stamp.apply(body);
    }
    let path = request.path();
    let result = match &request {
        ApiRequest::AddFinalizer { finalizer, .. }
        | ApiRequest::RemoveFinalizer { finalizer, .. } => {
            let change = if matches!(request, ApiRequest::AddFinalizer { .. }) {
                FinalizerChange::Add
            } else {
                FinalizerChange::Remove
            };
            match send(client, first, "GET", &path, None, None).await {
                Ok((code, current)) if (200..300).contains(&code) => {
                    match finalizer_json_patch(&current, finalizer, change) {
                        None => Ok((code, current)),
                        Some(patch) => {
                            send(
                                client,
                                next,
                                request.method(),
                                &path,
                                request.content_type(),
                                Some(&patch),
                            )
                            .await
                        }
                    }
                }
                other => other,
            }
        }
        ApiRequest::Create { target, body } if is_repeat_event(body) => {
            // A repeat updates its series' Event; one that is gone (expired) is written anew.
            let update = json!({
                "count": body["count"],
                "message": body["message"],
                "lastTimestamp": body["lastTimestamp"],
            });
            let path = engine::convert::api_path(target, None);
            let merge = Some("application/merge-patch+json");
            match send(client, first, "PATCH", &path, merge, Some(&update)).await {
                Ok((404, _)) => {
                    let json = request.content_type();
                    send(client, next, "POST", &request.path(), json, Some(body)).await
                }
                other => other,
            }
        }
        _ => {
            let body = request.body();
            send(
                client,
                first,
                request.method(),
                &path,
                request.content_type(),
                body.as_ref(),
            )
            .await
        }
    };
    match result {
        Ok((code, body)) => outcome_of(
            &command.action.target().key.scope,
            code,
            &body,
            request.method() == "DELETE",
        ),
        Err(message) => ApiOutcome::Unreachable { message },
    }
}

/// `command` addressed with a full apiVersion, when it names only a group (a provider object
/// the cache has not seen, referred to by group): the group's preferred version, from
/// discovery. `Ok(None)`: it already has one.
async fn versioned(
    client: &Client,
    manners: Manners,
    command: &Command,
) -> Result<Option<Command>, String> {
    let group = match &command.action {
        Action::DeleteInfrastructure { target } | Action::DeleteBootstrap { target }
            if is_group_only(&target.api_version) =>
        {
            target.api_version.clone()
        }
        _ => return Ok(None),
    };
    let discovery = format!("/apis/{group}");
    let (code, body) = send(client, manners, "GET", &discovery, None, None).await?;
    let version = body
        .pointer("/preferredVersion/version")
        .and_then(Value::as_str)
        .filter(|_| (200..300).contains(&code))
        .ok_or_else(|| format!("discovery of {group} answered {code}"))?;
    let mut command = command.clone();
    if let Action::DeleteInfrastructure { target } | Action::DeleteBootstrap { target } =
        &mut command.action
    {
        target.api_version = format!("{group}/{version}");
    }
    Ok(Some(command))
}

/// An Event body that repeats an earlier one of its series.
fn is_repeat_event(body: &Value) -> bool {
    body["kind"] == "Event" && body["count"].as_u64().is_some_and(|c| c > 1)
}

/// `infrastructure.cluster.x-k8s.io`, not `v1` nor `apps/v1`.
fn is_group_only(api_version: &str) -> bool {
    !api_version.contains('/') && api_version.contains('.')
}

/// A command the loop admitted, carried out: the token for its first request (its cluster's
/// request rate, most urgent first), the requests, and its answer sent back to the loop.
pub async fn run_command(
    client: Client,
    throttle: super::throttle::Throttle,
    command: Command,
    stamp: Option<EventStamp>,
    metrics: std::sync::Arc<super::metrics::Metrics>,
    tx: tokio::sync::mpsc::Sender<super::adapter::Queued>,
) {
    let priority = Priority::of(&command);
    let asked = tokio::time::Instant::now();
    // Refused: shutting down before this command was in flight.
    if !throttle.first_request(priority).await {
        return;
    }
    metrics.api_throttled(asked.elapsed());
    let outcome = execute(&client, &command, stamp.as_ref()).await;
    match &outcome {
        ApiOutcome::Ok { .. } | ApiOutcome::NotSent { .. } => {}
        ApiOutcome::Unreachable { .. } => metrics.api_error("unreachable"),
        ApiOutcome::NotFound => metrics.api_error("404"),
        ApiOutcome::Conflict { .. } => metrics.api_error("409"),
        ApiOutcome::Refused { refusal, .. } => metrics.api_error(&refusal.code().to_string()),
        ApiOutcome::Error { code, .. } => metrics.api_error(&code.to_string()),
    }
    let result = engine::intake::Arrival::Result {
        command: command.id,
        outcome,
    };
    let _ = tx.send(super::adapter::Event::Arrival(result).into()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Refusal;
    use engine::outcome::BudgetShortfall;
    use serde_json::json;

    #[test]
    fn an_event_gets_the_uid_version_and_times_kubectl_reads() {
        let mut event = json!({"apiVersion": "v1", "kind": "Event",
            "involvedObject": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1", "namespace": "default"},
            "reason": "SuccessfulDrainNode", "count": 1});
        EventStamp {
            uid: "uid-m1".into(),
            resource_version: 42,
            at: engine::Timestamp::parse_rfc3339("2026-11-25T09:00:00Z").unwrap(),
            instance: "host_1".into(),
        }
        .apply(&mut event);
        assert_eq!(event["involvedObject"]["uid"], "uid-m1");
        assert_eq!(event["involvedObject"]["resourceVersion"], "42");
        assert_eq!(event["firstTimestamp"], "2026-11-25T09:00:00Z");
        assert_eq!(event["lastTimestamp"], "2026-11-25T09:00:00Z");
        assert_eq!(event["reportingComponent"], "lifecycle");
        assert_eq!(event["reportingInstance"], "host_1");
    }

    #[test]
    fn answers_map_to_outcomes() {
        let pdb = json!({"kind": "Status", "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                         "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
                         "code": 429});
        assert_eq!(
            outcome_of(&Scope::Management, 429, &pdb, false),
            ApiOutcome::Refused {
                refusal: Refusal::DisruptionBudget {
                    budget: Some(BudgetShortfall {
                        name: "web".into(),
                        healthy_needed: 2,
                        healthy_current: 2
                    })
                },
                message: "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 2 healthy pods and has 2 currently".into()
            }
        );
        let shed = json!({"message": "Too many requests, please try again later.",
                          "details": {"retryAfterSeconds": 1}, "code": 429});
        assert_eq!(
            outcome_of(&Scope::Management, 429, &shed, false).refusal(),
            Some(&Refusal::TooManyRequests {
                retry_after_seconds: Some(1)
            })
        );
        let ns = json!({"message": "forbidden", "details": {"causes": [{"reason": "NamespaceTerminating"}]}});
        assert_eq!(
            outcome_of(&Scope::Management, 403, &ns, false).refusal(),
            Some(&Refusal::NamespaceTerminating)
        );
        let rbac = json!({"message": "forbidden: User cannot create resource"});
        assert_eq!(
            outcome_of(&Scope::Management, 403, &rbac, false).refusal(),
            Some(&Refusal::Forbidden)
        );
        assert_eq!(
            outcome_of(&Scope::Management, 404, &Value::Null, false),
            ApiOutcome::NotFound
        );
        assert_eq!(
            outcome_of(&Scope::Management, 500, &Value::Null, false),
            ApiOutcome::Error {
                code: 500,
                message: "HTTP 500".into()
            }
        );
        assert_eq!(
            outcome_of(
                &Scope::Management,
                201,
                &json!({"kind": "Status", "code": 201}),
                false
            ),
            ApiOutcome::Ok { object: None }
        );
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
        assert!(matches!(
            outcome_of(&Scope::Management, 200, &node, false),
            ApiOutcome::Ok { object: Some(_) }
        ));
        assert_eq!(
            outcome_of(&Scope::Management, 200, &node, true),
            ApiOutcome::Ok { object: None },
            "a deleted object is gone"
        );
        let corrupt = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                             "kind": "DockerMachine",
                             "metadata": {"name": "m1", "namespace": "default",
                                          "creationTimestamp": "yesterday",
                                          "deletionTimestamp": "2026-11-25T09:00:00Z"}});
        assert!(
            matches!(
                outcome_of(&Scope::Management, 200, &corrupt, true),
                ApiOutcome::Ok { object: Some(o) } if matches!(*o, engine::model::Object::Unreadable(_))
            ),
            "an answer that does not read is unknown, not absent"
        );
    }
}
