//! The differential rule for MachineHealthCheck status: a controller rebuilt from a fresh list
//! of the API as it is now would write no MHC status the API does not already show. Checked
//! when the running controller is idle (no request in flight, nothing queued) and nothing in
//! the world changed for [`QUIET_FOR`], and at the end of the run: a status that stays stale
//! (`expectedMachines`, `currentHealthy`, `targets`, remediations allowed, conditions) after
//! the Machines it counts changed is what a stale cache or a lost update looks like.

use crate::scenario::FaultKind;
use crate::sim::Sim;
use engine::model::{Kind, Object, Scope};
use engine::time::{Duration, Timestamp};
use engine::{Action, Engine, Input};

/// How long the world must be quiet before the check runs.
pub const QUIET_FOR: Duration = Duration::from_secs(30);
/// At most one check per this much simulated time (a fresh engine per check).
const CHECK_EVERY: Duration = Duration::from_mins(1);

#[derive(Clone, Debug, Default)]
pub struct Differential {
    /// When the API last changed.
    pub last_change: Option<Timestamp>,
    /// Whether the quiet period after the last change has been checked.
    checked: bool,
    last_check: Option<Timestamp>,
    /// MHCs already reported (once each).
    reported: std::collections::BTreeSet<String>,
}

impl Differential {
    /// The API changed: a check follows once the world has been quiet for [`QUIET_FOR`].
    pub(crate) fn note_change(&mut self, now: Timestamp) {
        self.last_change = Some(now);
        self.checked = false;
    }
}

impl Sim {
    /// Before the world moves on to `next`: if it was quiet for [`QUIET_FOR`] before then,
    /// check at that moment (nothing changed in between, and no engine deadline fell there, or
    /// it would be the next event). No event of its own, so quiet runs stay as they were.
    pub(crate) fn quiet_check_before(&mut self, next: Timestamp) {
        let d = &self.checks.invariants.differential;
        let Some(quiet_at) = d.last_change.map(|t| t + QUIET_FOR) else {
            return;
        };
        if d.checked || quiet_at >= next || quiet_at < self.clock.now {
            return;
        }
        self.checks.invariants.differential.checked = true;
        self.clock.now = quiet_at;
        self.check_mhc_differential(false);
    }

    /// Whether the controller has listed every cluster, no watch is blind and its writes get
    /// through: otherwise a stale status is expected, and fixed when the fault ends.
    fn controller_sees_everything(&self) -> bool {
        let now = self.clock.now;
        let blind = [FaultKind::WatchGap, FaultKind::Partition]
            .iter()
            .any(|k| self.faults.any_active(now, *k));
        let watching = self.checks.invariants.synced.len() > self.api.workloads.len()
            && self.faults.unsynced.is_empty()
            && !blind
            && !self.net_relisting_any();
        let writes = [
            FaultKind::ApiErrors,
            FaultKind::Conflicts,
            FaultKind::WriteTimeout,
        ]
        .iter()
        .all(|k| !self.faults.is_active(&Scope::Management, now, *k));
        watching && writes
    }

    /// Every object of `scope` the controllers read, as a list would return them.
    fn listed(&self, scope: &Scope) -> Vec<Object> {
        self.api
            .store(scope)
            .into_iter()
            .flat_map(|s| s.iter())
            .filter_map(|(_, v)| engine::convert::object_or_unreadable(scope, v))
            .collect()
    }

    /// Runs the check when the world has been quiet long enough (`at_end`: now, regardless).
    pub(crate) fn check_mhc_differential(&mut self, at_end: bool) {
        let d = &self.checks.invariants.differential;
        let quiet = d
            .last_change
            .is_none_or(|t| self.clock.now.since(t) >= QUIET_FOR);
        let due = d
            .last_check
            .is_none_or(|t| self.clock.now.since(t) >= CHECK_EVERY);
        let idle = self.engine().in_flight_len() == 0
            && self.lp.commands_in_flight() == 0
            && self.lp.commands_waiting() == 0
            && !self.net_busy();
        if !idle || !(at_end || quiet && due) || !self.controller_sees_everything() {
            return;
        }
        let listed: Vec<(Scope, Vec<Object>)> = self
            .api
            .scopes()
            .into_iter()
            .map(|scope| {
                let objects = self.listed(&scope);
                (scope, objects)
            })
            .collect();
        // A fresh controller has no last good reading of an object that does not read, so
        // it legitimately counts differently until the object reads again.
        let unreadable = listed
            .iter()
            .any(|(_, objects)| objects.iter().any(|o| matches!(o, Object::Unreadable(_))));
        if unreadable {
            return;
        }
        self.checks.invariants.differential.last_check = Some(self.clock.now);
        let mut fresh = Engine::new();
        for (scope, objects) in listed {
            fresh.handle(self.clock.now, Input::Relist { scope, objects });
        }
        let mut stale = Vec::new();
        while let Some(command) = fresh.poll_command() {
            let status_write = matches!(
                command.action,
                Action::PatchStatus { .. } | Action::SetCondition { .. }
            );
            let target = &command.action.target().key;
            if status_write && target.kind == Kind::MachineHealthCheck {
                let detail = match &command.action {
                    Action::PatchStatus { summary, .. } | Action::SetCondition { summary, .. } => {
                        summary.clone()
                    }
                    _ => String::new(),
                };
                stale.push((target.to_string(), detail));
            }
        }
        for (mhc, detail) in stale {
            if !self
                .checks
                .invariants
                .differential
                .reported
                .insert(mhc.clone())
            {
                continue;
            }
            let message = format!(
                "stale MHC status: {mhc} is not what a controller freshly listing the API computes ({detail})"
            );
            self.line("invariant", "Violation", mhc, message.clone());
            self.checks.invariants.violate(message);
        }
    }
}
