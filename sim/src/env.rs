//! What the world's parts act through ([`Env`]): the clock, the fake API, the timeline, and
//! what follows every write (its watch event queued, the indexes and checks told).

use crate::api::{FakeApi, Written};
use crate::checks::Checks;
use crate::clock::Clock;
use crate::event::{Event, Work};
use crate::timeline::{Line, Timeline};
use engine::model::Scope;
use engine::time::{Duration, Timestamp};

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
                written.object.as_ref(),
                self.clock.now,
            );
        }
    }
}
