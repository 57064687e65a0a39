//! Carrying out controller commands against the fake API, through the engine's shared
//! command → request mapping ([`apply`]), and telling them on the timeline.

use crate::api::{ApiError, FakeApi, ObjKey, Part, Written, eviction, json};
use crate::timeline::{ActionRecord, EventRecord, Line, Timeline};
use engine::convert::{ApiRequest, Subresource};
use engine::model::Scope;
use engine::outcome::{CAUSE_DISRUPTION_BUDGET, CAUSE_NAMESPACE_TERMINATING, Cause};
use engine::time::Timestamp;
use engine::{Action, ApiOutcome, Command, Target, Withheld};
use serde_json::json;

pub(crate) fn obj_key(target: &Target) -> ObjKey {
    ObjKey::new(
        json::group_of(&target.api_version),
        target.key.kind.name(),
        &target.key.namespace,
        &target.key.name,
    )
}

fn outcome_of(err: ApiError) -> ApiOutcome {
    match err {
        ApiError::NotFound(_) => ApiOutcome::NotFound,
        ApiError::AlreadyExists(m) | ApiError::Conflict(m) => ApiOutcome::Conflict { message: m },
        // The store refuses with 429 for a PodDisruptionBudget only (`api/eviction.rs`).
        ApiError::TooManyRequests { message, causes } => {
            let causes: Vec<Cause> = causes
                .iter()
                .map(|message| Cause {
                    reason: CAUSE_DISRUPTION_BUDGET,
                    message,
                })
                .collect();
            ApiOutcome::refused(429, message, &causes, None)
        }
        ApiError::Forbidden {
            message,
            namespace_terminating,
        } => {
            let terminating = Cause {
                reason: CAUSE_NAMESPACE_TERMINATING,
                message: "",
            };
            let causes: &[Cause] = if namespace_terminating {
                &[terminating]
            } else {
                &[]
            };
            ApiOutcome::refused(403, message, causes, None)
        }
        e @ (ApiError::Invalid(_) | ApiError::Internal(_)) => ApiOutcome::Error {
            code: e.code(),
            message: match e {
                ApiError::Invalid(m) | ApiError::Internal(m) => m,
                _ => unreachable!("matched above"),
            },
        },
    }
}

impl Timeline {
    /// Adds a controller command to the timeline, as issued at `at` after the input described
    /// by `cause`; one that was sent is also an action (or an Event) the expectations count,
    /// one `withheld` is neither.
    pub(crate) fn record_command(
        &mut self,
        start: Timestamp,
        command: &Command,
        at: Timestamp,
        cause: &str,
        withheld: Option<Withheld>,
    ) {
        let target = command.action.target();
        let mut detail = command.action.detail();
        if let Some(series) = command.series {
            detail.push_str(&format!(" (count {})", series.count));
        }
        let is_event = matches!(command.action, Action::RecordEvent { .. });
        if !command.reason.is_empty() && !is_event {
            if !detail.is_empty() {
                detail.push_str(" | ");
            }
            detail.push_str(&command.reason);
        }
        if let Some(why) = withheld {
            detail = format!("NOT SENT ({}) | {detail}", why.as_str());
        }
        detail.push_str(&format!(" [after #{}: {cause}]", command.cause));
        let (action, object) = match &command.action {
            Action::RecordEvent { .. } if withheld.is_some() => ("Event", target.key.to_string()),
            other if withheld.is_some() => (other.name(), target.key.to_string()),
            Action::RecordEvent { reason, .. } => {
                self.events.push(EventRecord {
                    at,
                    reason: reason.clone(),
                    object: target.key.clone(),
                });
                ("Event", target.key.to_string())
            }
            other => {
                self.actions.push(ActionRecord {
                    at,
                    name: other.name(),
                    target: target.key.clone(),
                    command: command.id,
                });
                (other.name(), target.key.to_string())
            }
        };
        self.push(Line {
            at_ms: at.since(start).as_millis(),
            actor: command.actor().to_string(),
            action: action.to_string(),
            object,
            detail,
            cause: Some(command.cause),
            command: Some(command.id),
        });
    }
}

/// Carries out a command's request: what it wrote, and whether the answer may be the object
/// the write removed (a DELETE of an object gone at once answers with none the controller
/// could keep; another write answers with the object it stored even when it released the
/// last finalizer), or the refusal.
pub(crate) fn apply(
    api: &mut FakeApi,
    scope: &Scope,
    request: ApiRequest,
    now: Timestamp,
) -> Result<(Option<Written>, bool), ApiOutcome> {
    let key = obj_key(request.target());
    let answers_removed = !matches!(request, ApiRequest::Delete { .. });
    let result: Result<Option<Written>, ApiError> = match request {
        ApiRequest::MergePatch {
            subresource, patch, ..
        } => {
            let part = match subresource {
                Some(Subresource::Status) => Part::Status,
                _ => Part::Main,
            };
            api.store_mut(scope).patch(&key, &patch, part).map(Some)
        }
        ApiRequest::Create { mut body, .. } => {
            crate::defaults::apply_defaults(&mut body);
            if json::kind(&body) == "Event" {
                api.events.record(scope, body, now).map(|()| None)
            } else {
                api.store_mut(scope).create(body, now).map(Some)
            }
        }
        ApiRequest::Delete { .. } => {
            if key.kind == "Pod" {
                Err(ApiError::Invalid(
                    "the simulator refuses direct pod deletion".into(),
                ))
            } else {
                api.store_mut(scope).delete(&key, now).map(Some)
            }
        }
        ApiRequest::Evict {
            grace_period_seconds,
            ..
        } => eviction::evict(api.store_mut(scope), &key, grace_period_seconds, now)
            .map(|eviction::Evicted::Deleting(w)| Some(w)),
        ApiRequest::AddFinalizer { finalizer, .. } => {
            set_finalizer(api, scope, &key, finalizer, true)
        }
        ApiRequest::RemoveFinalizer { finalizer, .. } => {
            set_finalizer(api, scope, &key, finalizer, false)
        }
    };
    result
        .map(|written| (written, answers_removed))
        .map_err(outcome_of)
}

/// Adds (`add`) or removes a finalizer: no write when the list already says so.
fn set_finalizer(
    api: &mut FakeApi,
    scope: &Scope,
    key: &ObjKey,
    finalizer: String,
    add: bool,
) -> Result<Option<Written>, ApiError> {
    let Some(obj) = api.get(scope, key) else {
        return Err(crate::api::store::not_found(key));
    };
    let mut list = json::finalizers(obj);
    if add == list.contains(&finalizer) {
        return Ok(None);
    }
    if add {
        list.push(finalizer);
    } else {
        list.retain(|f| *f != finalizer);
    }
    api.store_mut(scope)
        .patch(key, &json!({"metadata": {"finalizers": list}}), Part::Main)
        .map(Some)
}
