//! Faults from timeline `fault:` steps: API errors, partitions, watch gaps, controller restarts.

use crate::scenario::{FaultKind, FaultSpec};
use crate::sim::{Event, Sim};
use engine::model::Scope;
use engine::time::Timestamp;
use engine::{ApiOutcome, Input};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
pub struct ActiveFault {
    pub kind: FaultKind,
    pub scope: Scope,
    pub rate: f64,
    pub until: Timestamp,
}

#[derive(Clone, Debug, Default)]
pub struct Faults {
    pub active: BTreeMap<usize, ActiveFault>,
    next_id: usize,
    /// How often each kind fired (an API call failed, a watch event was lost, a restart happened).
    pub fired: BTreeMap<&'static str, u64>,
    /// Clusters whose watch missed events and must be relisted when the fault ends.
    needs_relist: BTreeSet<Scope>,
}

impl Faults {
    fn fire(&mut self, kind: FaultKind) {
        *self.fired.entry(kind.as_str()).or_default() += 1;
    }

    fn active_for(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> Option<&ActiveFault> {
        self.active
            .values()
            .find(|f| f.kind == kind && &f.scope == scope && now < f.until)
    }

    /// The outcome a fault imposes on an API call to `scope`, if any.
    pub fn intercept(
        &mut self,
        scope: &Scope,
        now: Timestamp,
        rng: &mut ChaCha8Rng,
    ) -> Option<ApiOutcome> {
        if self.active_for(scope, now, FaultKind::Partition).is_some() {
            self.fire(FaultKind::Partition);
            return Some(ApiOutcome::Unreachable {
                message: "simulated partition: the cluster's API cannot be reached".into(),
            });
        }
        let rate = self.active_for(scope, now, FaultKind::ApiErrors)?.rate;
        if rng.random_bool(rate.clamp(0.0, 1.0)) {
            self.fire(FaultKind::ApiErrors);
            return Some(ApiOutcome::Error {
                code: 500,
                message: "simulated API error".into(),
            });
        }
        None
    }

    pub fn hides_watch(&self, scope: &Scope, now: Timestamp) -> bool {
        self.active_for(scope, now, FaultKind::WatchGap).is_some()
            || self.active_for(scope, now, FaultKind::Partition).is_some()
    }

    pub fn missed_watch(&mut self, scope: &Scope) {
        self.needs_relist.insert(scope.clone());
        self.fire(FaultKind::WatchGap);
    }
}

impl Sim {
    pub(crate) fn start_fault(&mut self, spec: &FaultSpec, cluster: Option<&str>) {
        let scope = cluster.map_or(Scope::Management, |c| self.workload_scope(c));
        match spec.kind {
            FaultKind::ControllerRestart => self.restart_controller(),
            FaultKind::ApiErrors | FaultKind::Partition | FaultKind::WatchGap => {
                let until = self.now + spec.for_.unwrap_or_default();
                let id = self.faults.next_id;
                self.faults.next_id += 1;
                self.faults.active.insert(
                    id,
                    ActiveFault {
                        kind: spec.kind,
                        scope,
                        rate: spec.rate.unwrap_or(1.0),
                        until,
                    },
                );
                self.schedule(until, Event::FaultEnds { fault: id });
            }
            other => {
                self.line(
                    "scenario",
                    "Fault",
                    String::new(),
                    format!(
                        "fault kind {} is not simulated yet; ignored",
                        other.as_str()
                    ),
                );
            }
        }
    }

    pub(crate) fn fault_ends(&mut self, id: usize) {
        let Some(fault) = self.faults.active.remove(&id) else {
            return;
        };
        let scope_name = Sim::scope_name(&fault.scope);
        self.line(
            "world",
            "FaultEnds",
            scope_name,
            format!("{} is over", fault.kind.as_str()),
        );
        if matches!(fault.kind, FaultKind::WatchGap | FaultKind::Partition)
            && self.faults.needs_relist.remove(&fault.scope)
        {
            self.relist(&fault.scope);
        }
    }

    /// The controller process dies and restarts: the engine is rebuilt from its journal, told it
    /// restarted, and relists every cluster.
    pub(crate) fn restart_controller(&mut self) {
        self.faults.fire(FaultKind::ControllerRestart);
        let before = self.engine.state_hash();
        match self.feeder.rebuild(&self.engine) {
            Ok(engine) => self.engine = engine,
            Err(e) => {
                self.invariants.violate(format!(
                    "recovery: the engine cannot be rebuilt from its journal: {e}"
                ));
                return;
            }
        }
        let after = self.engine.state_hash();
        if before != after {
            self.invariants.violate(format!(
                "recovery: the engine rebuilt from its journal differs from the live one ({before:016x} vs {after:016x})"
            ));
        }
        self.line(
            "world",
            "ControllerRestart",
            String::new(),
            format!("engine rebuilt from the journal (state {after:016x}); relisting"),
        );
        self.feed(Input::Restarted);
        for scope in self.scopes() {
            self.relist(&scope);
        }
    }
}
