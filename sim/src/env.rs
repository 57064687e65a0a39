//! What the world's parts act through ([`Env`]): the clock, the fake API, the timeline, and
//! what follows every write (its watch event queued, the indexes and checks told).

use crate::api::json::Pointer as _;
use crate::api::{FakeApi, ObjKey, Part, Written};
use crate::checks::Checks;
use crate::clock::Clock;
use crate::event::{Event, Work};
use crate::timeline::{Line, Timeline};
use engine::model::Scope;
use engine::time::{Duration, Timestamp};
use serde_json::{Value, json};

pub(crate) struct Env<'a> {
    pub clock: &'a mut Clock,
    pub api: &'a mut FakeApi,
    pub timeline: &'a mut Timeline,
    pub checks: &'a mut Checks,
}

impl Env<'_> {
    pub fn schedule(&mut self, at: Timestamp, event: Event) {
        self.clock.schedule(at, event);
    }

    pub fn schedule_in(&mut self, after: Duration, event: Event) {
        self.clock.schedule_in(after, event);
    }

    /// Records a timeline line at the current time.
    pub fn line(&mut self, actor: &str, action: &str, object: String, detail: String) {
        self.timeline.push(Line {
            at_ms: self.clock.now.since(self.clock.start).as_millis(),
            actor: actor.to_string(),
            action: action.to_string(),
            object,
            detail,
            cause: None,
            command: None,
        });
    }

    /// A write to the API: its watch event is queued; the API's indexes, the Machines the
    /// release invariant watches and the differential's quiet clock follow it.
    pub fn changed(&mut self, scope: &Scope, written: Written) {
        self.checks
            .invariants
            .differential
            .note_change(self.clock.now);
        if *scope == Scope::Management {
            self.index(&written);
        }
        self.clock.work.push_back(Work::Changed {
            scope: scope.clone(),
            written,
        });
    }

    /// Follows a write to the management cluster without a watch event (the initial state).
    pub fn index(&mut self, written: &Written) {
        self.api.index(written);
        if written.key.group == "cluster.x-k8s.io" && written.key.kind == "Machine" {
            self.checks.invariants.release.machine_changed(
                &written.key,
                written.object.as_deref(),
                self.clock.now,
            );
        }
    }

    /// Sets a Node condition; `lastTransitionTime` moves only when the status changes.
    pub fn set_node_condition(
        &mut self,
        scope: &Scope,
        node: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
        message: Option<&str>,
    ) {
        let key = ObjKey::new("", "Node", "", node);
        let Some(current) = self.api.get(scope, &key).cloned() else {
            let object = crate::api::describe(scope, &key);
            self.line("world", "NodeCondition", object, "no such Node".into());
            return;
        };
        let mut conditions: Vec<Value> = current
            .at_pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let now = self.clock.now.to_rfc3339();
        let pos = conditions
            .iter()
            .position(|c| c.get("type").and_then(Value::as_str) == Some(type_));
        let mut cond = pos
            .map(|i| conditions[i].clone())
            .unwrap_or_else(|| json!({"type": type_}));
        let changed = cond.get("status").and_then(Value::as_str) != Some(status);
        cond["status"] = json!(status);
        if changed || cond.get("lastTransitionTime").is_none() {
            cond["lastTransitionTime"] = json!(now);
        }
        if let Some(r) = reason {
            cond["reason"] = json!(r);
        }
        if let Some(m) = message {
            cond["message"] = json!(m);
        }
        match pos {
            Some(i) => conditions[i] = cond,
            None => conditions.push(cond),
        }
        if let Ok(w) = self.api.store_mut(scope).patch(
            &key,
            &json!({"status": {"conditions": conditions}}),
            Part::Status,
        ) {
            let object = crate::api::describe(scope, &key);
            let why = reason.map(|r| format!(" ({r})")).unwrap_or_default();
            self.line(
                "world",
                "NodeCondition",
                object,
                format!("{type_}={status}{why}"),
            );
            self.changed(scope, w);
        }
    }
}
