//! Carrying out controller commands against the fake API, through the engine's shared
//! command → request mapping, and feeding the answers back.

use crate::api::{ApiError, ObjKey, Part, Written, eviction, json};
use crate::faults::Intercept;
use crate::sim::Sim;
use crate::timeline::Line;
use crate::timeline::{ActionRecord, EventRecord};
use engine::convert::{ApiRequest, Subresource, request_for};
use engine::model::Scope;
use engine::outcome::{CAUSE_DISRUPTION_BUDGET, CAUSE_NAMESPACE_TERMINATING, Cause};
use engine::time::Timestamp;
use engine::{Action, ApiOutcome, Command, Target, Withheld};
use serde_json::json;

fn obj_key(target: &Target) -> ObjKey {
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

impl Sim {
    pub(crate) fn execute(&mut self, command: Command) {
        self.record(&command);
        self.invariants_before(&command);
        self.carry_out(command, false);
    }

    /// A command a slow API held back reaches the server now.
    pub(crate) fn execute_after_delay(&mut self, command: Command) {
        self.carry_out(command, true);
    }

    fn carry_out(&mut self, command: Command, delayed: bool) {
        let target = command.action.target().clone();
        let scope = target.key.scope.clone();
        let hit = crate::wire::Hit::of_request(&request_for(&command));
        let attempt = self.faults.attempt(&scope, &hit, delayed);
        let intercept = self
            .faults
            .intercept(&scope, &hit, attempt, self.clock.now, delayed);
        let (outcome, wrote) = match intercept {
            Intercept::Pass => {
                let outcome = self.apply_request(&scope, &command);
                let wrote = outcome.is_success();
                (outcome, wrote)
            }
            Intercept::Fail(outcome) => (outcome, false),
            Intercept::Delay(delay) => {
                let command = Box::new(command);
                self.schedule_in(delay, crate::event::Event::DelayedCommand { command });
                return;
            }
        };
        self.checks.invariants.after(&command, wrote);
        if !outcome.is_success() {
            let object = target.key.to_string();
            let detail = format!(
                "{} #{}: {}",
                command.action.name(),
                command.id,
                outcome.summary()
            );
            self.line("api", "Rejected", object, detail);
        }
        let timeout = if wrote {
            self.faults
                .write_timeout(&scope, &hit, attempt, self.clock.now)
        } else {
            None
        };
        if let Some(outcome) =
            self.send_result(&scope, &obj_key(&target), command.id, outcome, timeout)
        {
            self.push_result(command.id, outcome);
            self.pump();
        }
    }

    fn record(&mut self, command: &Command) {
        let cause = self.process.feeder.cause(command.cause).to_string();
        self.record_command(command, self.clock.now, &cause, None);
    }

    /// A command the loop did not send (shadow mode): a timeline line, not an action.
    pub(crate) fn record_withheld(&mut self, command: &Command, why: Withheld) {
        let cause = self.process.feeder.cause(command.cause).to_string();
        self.record_command(command, self.clock.now, &cause, Some(why));
    }

    /// Adds a controller command to the timeline, as issued at `at` after the input described
    /// by `cause`; one that was sent is also an action (or an Event) the expectations count,
    /// one `withheld` is neither.
    pub(crate) fn record_command(
        &mut self,
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
                self.timeline.events.push(EventRecord {
                    at,
                    reason: reason.clone(),
                    object: target.key.clone(),
                });
                ("Event", target.key.to_string())
            }
            other => {
                self.timeline.actions.push(ActionRecord {
                    at,
                    name: other.name(),
                    target: target.key.clone(),
                    command: command.id,
                });
                (other.name(), target.key.to_string())
            }
        };
        self.timeline.push(Line {
            at_ms: at.since(self.clock.start).as_millis(),
            actor: command.actor().to_string(),
            action: action.to_string(),
            object,
            detail,
            cause: Some(command.cause),
            command: Some(command.id),
        });
    }

    /// Executes the request; returns the outcome, queuing the watch events of what it wrote.
    fn apply_request(&mut self, scope: &Scope, command: &Command) -> ApiOutcome {
        let now = self.clock.now;
        let request = request_for(command);
        let key = obj_key(request.target());
        let result: Result<Option<Written>, ApiError> = match &request {
            ApiRequest::MergePatch {
                subresource, patch, ..
            } => {
                let part = match subresource {
                    Some(Subresource::Status) => Part::Status,
                    _ => Part::Main,
                };
                self.api.store_mut(scope).patch(&key, patch, part).map(Some)
            }
            ApiRequest::Create { body, .. } => {
                let mut body = body.clone();
                crate::defaults::apply_defaults(&mut body);
                if json::kind(&body) == "Event" {
                    Ok(None)
                } else {
                    self.api.store_mut(scope).create(body, now).map(Some)
                }
            }
            ApiRequest::Delete { .. } => {
                if key.kind == "Pod" {
                    Err(ApiError::Invalid(
                        "the simulator refuses direct pod deletion".into(),
                    ))
                } else {
                    self.api.store_mut(scope).delete(&key, now).map(Some)
                }
            }
            ApiRequest::Evict {
                grace_period_seconds,
                ..
            } => eviction::evict(self.api.store_mut(scope), &key, *grace_period_seconds, now)
                .map(|eviction::Evicted::Deleting(w)| Some(w)),
            ApiRequest::AddFinalizer { finalizer, .. }
            | ApiRequest::RemoveFinalizer { finalizer, .. } => {
                let add = matches!(request, ApiRequest::AddFinalizer { .. });
                match self.api.get(scope, &key) {
                    None => Err(crate::api::store::not_found(&key)),
                    Some(obj) => {
                        let mut list = json::finalizers(obj);
                        let has = list.contains(finalizer);
                        if add == has {
                            Ok(None)
                        } else {
                            if add {
                                list.push(finalizer.clone());
                            } else {
                                list.retain(|f| f != finalizer);
                            }
                            self.api
                                .store_mut(scope)
                                .patch(&key, &json!({"metadata": {"finalizers": list}}), Part::Main)
                                .map(Some)
                        }
                    }
                }
            }
        };
        match result {
            Ok(written) => {
                // A real server answers a write with the object it stored, even when the write
                // released the last finalizer and the object is gone; a DELETE of an object
                // that is gone at once answers with no object the controller could keep.
                let answered = written.as_ref().and_then(|w| match &request {
                    ApiRequest::Delete { .. } => w.object.as_ref(),
                    _ => w.object.as_ref().or(w.removed.as_ref()),
                });
                let object = answered
                    .and_then(|o| self.convert(scope, &key, o))
                    .map(Box::new);
                if let Some(w) = written {
                    self.changed(scope, w);
                }
                ApiOutcome::Ok { object }
            }
            Err(e) => outcome_of(e),
        }
    }
}
