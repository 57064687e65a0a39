//! The fake world played live, for a controller that runs outside the simulator (a
//! `lifecycle run` process talking HTTP to the fake API servers).
//!
//! [`Live`] is sans-IO: its driver hands it the clusters' stores and the time, and it plays
//! the scenario's steps and the world's duties (kubelet, providers, MachineSets, pools) up to
//! that time, reacting to what the controller wrote since the last call (read from each
//! store's change log). It never feeds the in-process engine. At the end, the controller's
//! commands (replayed from its journal by the driver) become the run's actions, so the same
//! expectations and invariants as in-process are checked.

use crate::api::json::Pointer as _;
use crate::api::store::ChangeType;
use crate::api::{ClusterStore, Written, json};
use crate::event::Event;
use crate::run::Report;
use crate::scenario::{Check, ExpectKind, Scenario, StepAction};
use crate::sim::{External, Sim};
use engine::model::ObjectKey;
use engine::model::Scope;
use engine::time::{Duration, Timestamp};
use engine::{Command, Input};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::controller_record::ControllerRecord;

/// What the world asks of the driver after a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// The controller process is to be killed (SIGKILL) and restarted from its journal, this
    /// many times.
    pub restarts: u32,
}

pub struct Live {
    sim: Sim,
    /// The resourceVersion of each store after the world's last step: later changes are the
    /// controller's.
    seen: BTreeMap<Scope, u64>,
    restarts_reported: u32,
    /// Objects whose drain or deletion write was already checked as it landed.
    landed: std::collections::BTreeSet<(Scope, crate::api::ObjKey)>,
    /// The management objects' conditions over the run, for the status convergence rule.
    served: crate::convergence::Served,
}

impl Live {
    /// The scenario's world starting at `start` (manifest timestamps moved by the same amount
    /// as the start), judged with `tolerance` for the controller's lateness.
    pub fn new(scenario: &Scenario, seed: u64, start: Timestamp, tolerance: Duration) -> Live {
        let mut scenario = scenario.clone();
        let shift = start.since(scenario.world.start);
        scenario.world.start = start;
        rebase_scenario(&mut scenario, shift);
        let mut sim = Sim::new(scenario, seed, crate::feed::Feeder::new(None));
        sim.process.external = Some(External::default());
        sim.checks.expect.tolerance = tolerance;
        sim.setup();
        // Every cluster is served from the start: the release rule's clock runs from there.
        sim.checks.invariants.synced = sim.api.scopes().into_iter().collect();
        for at in crate::expect::checkpoints(&sim.scenario) {
            sim.schedule(start + at + tolerance, Event::Checkpoint);
        }
        Live {
            sim,
            seen: BTreeMap::new(),
            restarts_reported: 0,
            landed: Default::default(),
            served: Default::default(),
        }
    }

    pub fn start(&self) -> Timestamp {
        self.sim.clock.start
    }

    pub fn end(&self) -> Timestamp {
        self.sim.clock.end
    }

    /// What the world and the scenario did so far.
    pub fn timeline(&self) -> &crate::timeline::Timeline {
        &self.sim.timeline
    }

    pub fn scenario(&self) -> &Scenario {
        &self.sim.scenario
    }

    /// The faults of API calls and deliveries the scenario's timeline opens, for the fake API
    /// servers to play on the world's clock with the run's seed (see [`crate::wire`]).
    pub fn wire(&self) -> crate::wire::Wire {
        let windows = crate::wire::windows(
            &self.sim.scenario,
            self.sim.clock.start,
            &self.sim.api.workloads,
        );
        crate::wire::Wire::new(self.sim.seed, windows)
    }

    /// Workload clusters by the name the scenario gives them.
    pub fn workloads(&self) -> &BTreeMap<String, Scope> {
        &self.sim.api.workloads
    }

    /// Takes the starting stores out, to be served; [`Live::step`] gets them back each time.
    /// What is in a store when the world first steps on it (the starting objects and what the
    /// server added, such as kubeconfig Secrets) is the starting state, not a write to react to.
    pub fn take_stores(&mut self) -> BTreeMap<Scope, ClusterStore> {
        std::mem::take(&mut self.sim.api.clusters)
    }

    /// When the world next has something to do on its own.
    pub fn next_event_at(&self) -> Option<Timestamp> {
        self.sim.next_event_at()
    }

    /// Plays the world up to `now` on `stores` (every served cluster): first what is scheduled
    /// until then, then the reactions to the controller's writes since the last step.
    pub fn step(
        &mut self,
        now: Timestamp,
        stores: &mut BTreeMap<Scope, &mut ClusterStore>,
    ) -> Requests {
        // What is in a store when the world steps on it was written by the controller since
        // the last step (or is the starting state); what the world writes from here on is its
        // own, not the controller's.
        let mut external = BTreeMap::new();
        for (scope, store) in stores.iter_mut() {
            self.seen
                .entry(scope.clone())
                .or_insert_with(|| store.resource_version());
            external.insert(scope.clone(), store.resource_version());
            let slot = self.sim.api.clusters.entry(scope.clone()).or_default();
            std::mem::swap(slot, &mut **store);
        }
        let now = now.min(self.sim.clock.end);
        self.sim.run_until(now);
        if now > self.sim.clock.now {
            self.sim.clock.now = now;
        }
        self.ingest_external_writes(&external);
        let now = self.sim.clock.now;
        for (scope, store) in &self.sim.api.clusters {
            if *scope == Scope::Management {
                self.served.sample(now, store);
            }
            self.served.sample_events(now, scope, store);
        }
        self.sim.check_release();
        for (scope, store) in stores.iter_mut() {
            if let Some(slot) = self.sim.api.clusters.get_mut(scope) {
                self.seen.insert(scope.clone(), slot.resource_version());
                std::mem::swap(slot, &mut **store);
            }
        }
        let restarts = self.sim.process.external.as_ref().map_or(0, |e| e.restarts);
        let new = restarts - self.restarts_reported;
        self.restarts_reported = restarts;
        Requests { restarts: new }
    }

    /// The controller's writes since the world last looked (up to resourceVersion `until` of
    /// each cluster: later ones are the world's own, already reacted to), as watch events the
    /// world reacts to.
    fn ingest_external_writes(&mut self, until: &BTreeMap<Scope, u64>) {
        let scopes: Vec<Scope> = self.sim.api.clusters.keys().cloned().collect();
        for scope in scopes {
            let since = self.seen.get(&scope).copied().unwrap_or(0);
            let until = until.get(&scope).copied().unwrap_or(u64::MAX);
            let Some(store) = self.sim.api.clusters.get(&scope) else {
                continue;
            };
            let changes: Vec<Written> = match store.changes_since(since) {
                Ok(changes) => changes
                    .filter(|c| c.resource_version <= until)
                    .map(written_of)
                    .collect(),
                Err(too_old) => {
                    let message = format!(
                        "the world lost track of writes to {} (change log compacted at {})",
                        crate::api::scope_name(&scope),
                        too_old.compacted
                    );
                    self.sim.checks.invariants.violate(message);
                    Vec::new()
                }
            };
            let rv = store.resource_version();
            self.seen.insert(scope.clone(), rv);
            for written in changes {
                self.check_landed(&scope, &written);
                self.sim.changed(&scope, written);
            }
            self.sim.settle();
            if let Some(store) = self.sim.api.clusters.get(&scope) {
                self.seen.insert(scope.clone(), store.resource_version());
            }
        }
        self.sim.observe_expectations();
    }

    /// Ends the run at the scenario's end, on the stores as the end left them: the controller's
    /// commands (from its journal) become the run's actions and timeline lines, then the
    /// end-of-run checks run.
    pub fn finish(
        mut self,
        records: &[ControllerRecord],
        stores: BTreeMap<Scope, ClusterStore>,
    ) -> Report {
        self.sim.api.clusters = stores;
        let causes: BTreeMap<u64, String> = records.iter().map(|r| (r.seq, r.describe())).collect();
        for record in records {
            // The world is served a moment before its start: what the controller did then, it
            // did to the starting state, at the start.
            let at = record.at.max(self.sim.clock.start);
            for command in &record.commands {
                let cause = causes.get(&command.cause).map_or("", String::as_str);
                let why = record.withheld.get(&command.id).copied();
                self.sim.record_command(command, at, cause, why);
            }
        }
        self.note_disagreements(records);
        self.note_refusals(records);
        self.check_repeats(records);
        self.check_convergence(records);
        self.sim.timeline.lines.sort_by_key(|l| l.at_ms);
        self.sim.finish_run();
        let inputs = records.last().map_or(0, |r| r.seq);
        crate::run::report(&mut self.sim, inputs, 0)
    }
}

impl Live {
    /// A shadow run's disagreements, found from its journal as `lifecycle shadow report`
    /// finds them, as timeline lines (actor `shadow`).
    fn note_disagreements(&mut self, records: &[ControllerRecord]) {
        if records.iter().all(|r| r.withheld.is_empty()) {
            return;
        }
        let mut comparator = engine::shadow::Comparator::new();
        // The controller's store after each record, replayed as `lifecycle shadow report` does
        // (what the records leave out reads as unknown there: no pod is then classified).
        let mut replayed = engine::Engine::new();
        let mut found = Vec::new();
        for r in records {
            replayed.handle(r.at, r.input.clone());
            while replayed.poll_command().is_some() {}
            comparator.observe(r.at, &r.input, replayed.store());
            for c in r.commands.iter().filter(|c| r.withheld.contains_key(&c.id)) {
                comparator.withheld(r.at, c);
            }
            found.extend(comparator.take().into_iter().map(|d| (r.at, d)));
        }
        comparator.finish(self.sim.clock.end);
        found.extend(
            comparator
                .take()
                .into_iter()
                .map(|d| (self.sim.clock.end, d)),
        );
        for (at, d) in found {
            self.push_line(
                at,
                "shadow",
                "Disagreement",
                d.machine.to_string(),
                d.describe(),
            );
        }
    }

    /// A write of the controller that drains or deletes infrastructure is checked against the
    /// hook and drain-order rules as it lands (once per object): a cordon (a Node marked
    /// unschedulable), an eviction (a Pod given a deletionTimestamp), an infrastructure
    /// deletion (a provider object given a deletionTimestamp).
    fn check_landed(&mut self, scope: &Scope, written: &Written) {
        let Some(obj) = &written.object else {
            return;
        };
        let key = &written.key;
        let engine_key = crate::api::engine_key(scope, key);
        let target = |api_version: &str| engine::Target {
            key: engine_key.clone(),
            api_version: api_version.to_string(),
        };
        let (machine, action) = match (scope, key.group.as_str(), key.kind.as_str()) {
            (Scope::Workload(cluster), "", "Node")
                if obj.at_pointer("/spec/unschedulable") == Some(&Value::Bool(true)) =>
            {
                let machine = self.machine_on_node(cluster, &key.name);
                (machine, engine::Action::Cordon { node: target("v1") })
            }
            (Scope::Workload(cluster), "", "Pod") if json::is_deleting(obj) => {
                let node = json::str_at(obj, "spec.nodeName").unwrap_or_default();
                let machine = self.machine_on_node(cluster, node);
                let action = engine::Action::Evict {
                    pod: target("v1"),
                    grace_period_seconds: None,
                };
                (machine, action)
            }
            (Scope::Management, group, kind)
                if group.ends_with(".cluster.x-k8s.io") && json::is_deleting(obj) =>
            {
                let machine = self.machine_with_infrastructure(&key.namespace, kind, &key.name);
                let action = engine::Action::DeleteInfrastructure {
                    target: target(json::api_version(obj)),
                };
                (machine, action)
            }
            _ => return,
        };
        let Some(machine) = machine else {
            return;
        };
        if !self.landed.insert((scope.clone(), key.clone())) {
            return;
        }
        let command = Command {
            id: 0,
            cause: 0,
            controller: engine::ControllerId::Deletion,
            owner: machine,
            action,
            reason: String::new(),
            series: None,
        };
        self.sim.check_landed(&command);
    }

    /// The Machine whose Node this is, in that workload cluster.
    fn machine_on_node(
        &self,
        cluster: &engine::model::ClusterName,
        node: &str,
    ) -> Option<ObjectKey> {
        self.sim
            .api
            .machines_of(&cluster.namespace, &cluster.name)
            .into_iter()
            .find(|m| json::str_at(m, "status.nodeRef.name") == Some(node))
            .map(|m| crate::api::engine_key(&Scope::Management, &crate::api::ObjKey::of(m)))
    }

    /// The Machine whose infrastructure this provider object is.
    fn machine_with_infrastructure(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Option<ObjectKey> {
        let store = self.sim.api.store(&Scope::Management)?;
        store
            .list("cluster.x-k8s.io", "Machine")
            .find(|(k, m)| {
                k.namespace == namespace
                    && json::str_at(m, "spec.infrastructureRef.kind") == Some(kind)
                    && json::str_at(m, "spec.infrastructureRef.name") == Some(name)
            })
            .map(|(k, _)| crate::api::engine_key(&Scope::Management, k))
    }

    /// The API's refusals the controller journaled (an answer other than ok: a fault's 5xx,
    /// 409, 429 or timeout, a 404), as `api Rejected` timeline lines as in process.
    fn note_refusals(&mut self, records: &[ControllerRecord]) {
        let mut issued: BTreeMap<u64, &Command> = BTreeMap::new();
        for record in records {
            let answers: Vec<(u64, &engine::ApiOutcome)> = match &record.input {
                Input::ApiResult { command, outcome } => vec![(*command, outcome)],
                Input::Batch { inputs } => inputs
                    .iter()
                    .filter_map(|i| match i {
                        Input::ApiResult { command, outcome } => Some((*command, outcome)),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (id, outcome) in answers {
                let Some(command) = issued.get(&id).filter(|_| !outcome.is_success()) else {
                    continue;
                };
                let at_ms = record
                    .at
                    .max(self.sim.clock.start)
                    .since(self.sim.clock.start)
                    .as_millis();
                self.sim.timeline.push(crate::timeline::Line {
                    at_ms,
                    actor: "api".into(),
                    action: "Rejected".into(),
                    object: command.action.target().key.to_string(),
                    detail: format!(
                        "{} #{}: {}",
                        command.action.name(),
                        command.id,
                        outcome.summary()
                    ),
                    cause: None,
                    command: None,
                });
            }
            if matches!(record.input, Input::Restarted) {
                issued.clear();
            }
            for command in &record.commands {
                issued.insert(command.id, command);
            }
        }
    }

    /// The status convergence rule over the controller's journal ([`crate::convergence`]).
    fn check_convergence(&mut self, records: &[ControllerRecord]) {
        let found = crate::convergence::judge_journal(
            self.sim.scenario.mode,
            records,
            &self.served,
            self.sim.clock.end,
        );
        for (at, object, message) in found {
            self.sim.checks.invariants.checks += 1;
            self.push_line(at, "invariant", "Violation", object, message.clone());
            self.sim.checks.invariants.violate(message);
        }
    }

    /// A timeline line at `at` (held at the run's start) that no command caused.
    fn push_line(
        &mut self,
        at: Timestamp,
        actor: &str,
        action: &str,
        object: String,
        detail: String,
    ) {
        let start = self.sim.clock.start;
        self.sim.timeline.push(crate::timeline::Line {
            at_ms: at.max(start).since(start).as_millis(),
            actor: actor.into(),
            action: action.into(),
            object,
            detail,
            cause: None,
            command: None,
        });
    }

    /// The "never twice" rule over the controller's journal: the inputs show what it observed,
    /// the commands what it issued after. The uid of a command's target is the one the
    /// controller last saw; every command counts as carried out when issued, so a watch event
    /// showing its effect counts as observing its success.
    fn check_repeats(&mut self, records: &[ControllerRecord]) {
        let mut uids: BTreeMap<ObjectKey, String> = BTreeMap::new();
        let mut repeats = crate::repeats::Repeats::default();
        for record in records {
            note_uids(&record.input, &mut uids);
            repeats.observe(&record.input, record.seq);
            for command in &record.commands {
                let target = &command.action.target().key;
                let uid = uids.get(target).map_or("", String::as_str);
                if let Some(message) = repeats.issued(command, uid) {
                    self.sim.checks.invariants.checks += 1;
                    let at_ms = record.at.since(self.sim.clock.start).as_millis();
                    self.sim.timeline.push(crate::timeline::Line {
                        at_ms,
                        actor: "invariant".into(),
                        action: "Violation".into(),
                        object: command.owner.to_string(),
                        detail: message.clone(),
                        cause: None,
                        command: None,
                    });
                    self.sim.checks.invariants.violate(message);
                }
                repeats.carried_out(command.id);
            }
        }
    }
}

/// Keeps the uid the controller last saw for each object.
fn note_uids(input: &Input, uids: &mut BTreeMap<ObjectKey, String>) {
    match input {
        Input::Upsert { scope, object } => {
            uids.insert(object.key(scope), object.meta().uid.to_string());
        }
        Input::Delete { key } => {
            uids.remove(key);
        }
        Input::Relist { .. } | Input::RelistKind { .. } => {
            if let Some(relist) = input.as_relist() {
                uids.retain(|k, _| !relist.covers(k));
                for object in relist.objects {
                    uids.insert(object.key(relist.scope), object.meta().uid.to_string());
                }
            }
        }
        Input::Unwatched { scope, kind } => {
            uids.retain(|k, _| k.scope != *scope || k.kind != *kind)
        }
        Input::Batch { inputs } => inputs.iter().for_each(|i| note_uids(i, uids)),
        Input::ApiResult { .. }
        | Input::Tick
        | Input::Restarted
        | Input::Unlisted { .. }
        | Input::ClusterUnreachable { .. }
        | Input::Ownership(_)
        | Input::OwnMachines(_)
        | Input::Overridden { .. }
        | Input::CapiRelease(_) => {}
    }
}

fn written_of(change: &crate::api::store::Change) -> Written {
    match change.type_ {
        ChangeType::Deleted => Written {
            key: change.key.clone(),
            object: None,
            removed: Some(change.object.clone()),
        },
        ChangeType::Added | ChangeType::Modified => Written {
            key: change.key.clone(),
            object: Some(change.object.clone()),
            removed: None,
        },
    }
}

/// Moves every timestamp in the scenario's manifests and patches by `shift`.
fn rebase_scenario(scenario: &mut Scenario, shift: Duration) {
    if shift.is_zero() {
        return;
    }
    let manifests = scenario
        .management
        .iter_mut()
        .chain(scenario.workload.values_mut().flatten())
        .map(|m| &mut m.value);
    for value in manifests {
        rebase(value, shift);
    }
    for step in &mut scenario.timeline {
        match &mut step.action {
            StepAction::Apply(m) => rebase(&mut m.value, shift),
            StepAction::Patch { merge, .. } => rebase(merge, shift),
            _ => {}
        }
    }
    for e in &mut scenario.expect {
        let check = match &mut e.kind {
            ExpectKind::At { check, .. } | ExpectKind::During { check, .. } => check,
            _ => continue,
        };
        match check {
            Check::Condition {
                message: Some(m), ..
            } => rebase_text(m, shift),
            Check::Fields(fields) => fields.iter_mut().for_each(|(_, v)| rebase(v, shift)),
            _ => {}
        }
    }
}

/// Moves every RFC 3339 timestamp in the strings of `value` by `shift`.
fn rebase(value: &mut Value, shift: Duration) {
    match value {
        Value::String(s) => rebase_text(s, shift),
        Value::Array(items) => items.iter_mut().for_each(|v| rebase(v, shift)),
        Value::Object(map) => map.values_mut().for_each(|v| rebase(v, shift)),
        _ => {}
    }
}

/// Moves every `YYYY-MM-DDTHH:MM:SSZ` inside `text` by `shift` (a condition message quotes
/// times, and an expectation matches messages).
fn rebase_text(text: &mut String, shift: Duration) {
    const LEN: usize = "2024-01-01T00:00:00Z".len();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut changed = false;
    while i < bytes.len() {
        let candidate = text.get(i..i + LEN).filter(|c| looks_like_time(c));
        if let Some(t) = candidate.and_then(|c| Timestamp::parse_rfc3339(c).ok()) {
            out.push_str(&(t + shift).to_rfc3339());
            i += LEN;
            changed = true;
            continue;
        }
        let ch = text[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    if changed {
        *text = out;
    }
}

fn looks_like_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z'
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjKey;
    use serde_json::json;

    /// The pre-drain-hook scenario served, with the change logs a server keeps.
    fn served(tolerance: Duration) -> (Live, BTreeMap<Scope, ClusterStore>, Timestamp) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/pre-drain-hook-holds-drain.yaml"
        );
        let scenario = crate::scenario::load(std::path::Path::new(path)).expect("loads");
        let start = Timestamp(1_800_000_000_000);
        let mut live = Live::new(&scenario, scenario.seed, start, tolerance);
        let mut stores = live.take_stores();
        for store in stores.values_mut() {
            store.record_changes(1_000);
        }
        (live, stores, start)
    }

    fn step(
        live: &mut Live,
        stores: &mut BTreeMap<Scope, ClusterStore>,
        at: Timestamp,
    ) -> Requests {
        let mut refs: BTreeMap<Scope, &mut ClusterStore> =
            stores.iter_mut().map(|(s, c)| (s.clone(), c)).collect();
        live.step(at, &mut refs)
    }

    fn c1(live: &Live) -> Scope {
        live.workloads()["c1"].clone()
    }

    #[test]
    fn the_world_plays_its_steps_and_reacts_to_the_controllers_writes() {
        let (mut live, mut stores, start) = served(Duration::from_millis(0));
        step(&mut live, &mut stores, start + Duration::from_secs(61));
        let m1 = ObjKey::new("cluster.x-k8s.io", "Machine", "default", "m1");
        let machine = stores[&Scope::Management].get(&m1).expect("m1 exists");
        assert!(
            json::is_deleting(machine),
            "the scenario's delete at 1m was played"
        );
        // The controller deletes the infrastructure; the fake provider finishes after infraDelete.
        let infra = ObjKey::new(
            "infrastructure.cluster.x-k8s.io",
            "DockerMachine",
            "default",
            "m1",
        );
        let now = start + Duration::from_secs(62);
        stores
            .get_mut(&Scope::Management)
            .unwrap()
            .delete(&infra, now)
            .unwrap();
        step(&mut live, &mut stores, now);
        assert!(
            stores[&Scope::Management].get(&infra).is_some(),
            "still being deleted"
        );
        step(&mut live, &mut stores, now + Duration::from_secs(11));
        assert!(
            stores[&Scope::Management].get(&infra).is_none(),
            "the provider deleted it"
        );
        let text = live.timeline().render_text();
        assert!(text.contains("ProviderDeleted"), "{text}");
    }

    #[test]
    fn an_eviction_landing_while_a_pre_drain_hook_holds_is_a_violation() {
        let (mut live, mut stores, start) = served(Duration::from_millis(0));
        step(&mut live, &mut stores, start + Duration::from_secs(61));
        let scope = c1(&live);
        let pod = ObjKey::new("", "Pod", "app", "web-0");
        let now = start + Duration::from_secs(62);
        stores
            .get_mut(&scope)
            .unwrap()
            .mark_deleting(&pod, now, Some(30))
            .unwrap();
        step(&mut live, &mut stores, now);
        let report = live.finish(&[], stores);
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.contains("hook bypassed")),
            "{:?}",
            report.violations
        );
    }

    #[test]
    fn an_eviction_after_the_hook_is_released_is_fine() {
        let (mut live, mut stores, start) = served(Duration::from_millis(0));
        step(&mut live, &mut stores, start + Duration::from_secs(301));
        let scope = c1(&live);
        let pod = ObjKey::new("", "Pod", "app", "web-0");
        let now = start + Duration::from_secs(302);
        stores
            .get_mut(&scope)
            .unwrap()
            .mark_deleting(&pod, now, Some(30))
            .unwrap();
        step(&mut live, &mut stores, now);
        let report = live.finish(&[], stores);
        assert!(
            !report
                .violations
                .iter()
                .any(|v| v.contains("hook bypassed")),
            "{:?}",
            report.violations
        );
    }

    fn record(seq: u64, input: Input, commands: Vec<Command>) -> ControllerRecord {
        ControllerRecord {
            seq,
            at: Timestamp(1_800_000_000_000 + seq as i64 * 1_000),
            input,
            commands,
            fired: Vec::new(),
            withheld: Default::default(),
            decisions: Vec::new(),
        }
    }

    #[test]
    fn a_finalizer_released_again_after_its_ok_answer_is_a_violation_from_the_journal() {
        use crate::repeats::tests::{m1, release};
        let ok = |id| Input::ApiResult {
            command: id,
            outcome: engine::ApiOutcome::Ok { object: None },
        };
        let records = [
            record(1, m1(&[engine::model::MACHINE_FINALIZER]), vec![release(1)]),
            record(2, ok(1), vec![]),
            record(3, m1(&[engine::model::MACHINE_FINALIZER]), vec![release(2)]),
        ];
        let (live, stores, _) = served(Duration::from_millis(0));
        let report = live.finish(&records, stores);
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.contains("repeated: RemoveFinalizer")),
            "{:?}",
            report.violations
        );
        let (live, stores, _) = served(Duration::from_millis(0));
        let report = live.finish(&records[..2], stores);
        assert!(
            !report.violations.iter().any(|v| v.contains("repeated")),
            "{:?}",
            report.violations
        );
    }

    /// A scenario served live from its text, with the change logs a server keeps.
    fn served_text(
        text: &str,
        tolerance: Duration,
    ) -> (Live, BTreeMap<Scope, ClusterStore>, Timestamp) {
        let scenario = crate::scenario::parse("inline.yaml", text).expect("parses");
        let start = Timestamp(1_800_000_000_000);
        let mut live = Live::new(&scenario, scenario.seed, start, tolerance);
        let mut stores = live.take_stores();
        for store in stores.values_mut() {
            store.record_changes(1_000);
        }
        (live, stores, start)
    }

    fn pre_drain_text() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/pre-drain-hook-holds-drain.yaml"
        ))
        .expect("reads")
    }

    #[test]
    fn the_worlds_own_deletion_of_infrastructure_is_not_the_controllers() {
        // The scenario itself deletes m1's DockerMachine while web-0 still runs on its Node:
        // no controller did it, so no drain rule is broken.
        let text = pre_drain_text();
        let cut = text.find("timeline:").expect("a timeline");
        let text = format!(
            "{}timeline:\n  - {{at: 30s, delete: {{kind: DockerMachine, name: m1}}}}\n",
            &text[..cut]
        );
        let (mut live, mut stores, start) = served_text(&text, Duration::from_millis(0));
        step(&mut live, &mut stores, start + Duration::from_secs(31));
        step(&mut live, &mut stores, start + Duration::from_secs(32));
        let report = live.finish(&[], stores);
        assert!(
            !report
                .violations
                .iter()
                .any(|v| v.contains("deleted before its Node was drained")),
            "{:?}",
            report.violations
        );
        assert!(
            report.timeline.render_text().contains("Delete"),
            "the scenario's delete was played"
        );
    }

    #[test]
    fn what_the_controller_did_before_the_worlds_start_counts_at_the_start() {
        // The controller is running a moment before the world's clock reaches its start: an
        // action it took then is judged at 0s, where a window `[0s, 0s]` expects it.
        let text = pre_drain_text();
        let cut = text.find("expect:").expect("expectations");
        let text = format!(
            "{}expect:\n  - {{action: AddFinalizer, count: 1, within: [0s, 0s]}}\n",
            &text[..cut]
        );
        let (live, stores, start) = served_text(&text, Duration::from_secs(10));
        let m1 = engine::Target {
            key: ObjectKey::new(
                Scope::Management,
                engine::model::Kind::Machine,
                "default",
                "m1",
            ),
            api_version: "cluster.x-k8s.io/v1beta1".into(),
        };
        let add = Command {
            id: 1,
            cause: 1,
            controller: engine::ControllerId::Deletion,
            owner: m1.key.clone(),
            action: engine::Action::AddFinalizer {
                target: m1,
                finalizer: engine::model::MACHINE_FINALIZER.into(),
            },
            reason: String::new(),
            series: None,
        };
        let mut early = record(1, Input::Tick, vec![add]);
        early.at = start - Duration::from_millis(400);
        let report = live.finish(&[early], stores);
        assert!(report.failures.is_empty(), "{:?}", report.failures);
    }

    #[test]
    fn the_apis_refusals_from_the_journal_are_timeline_lines() {
        use crate::repeats::tests::{m1, release};
        let answer = |id, outcome| Input::ApiResult {
            command: id,
            outcome,
        };
        let refused = engine::ApiOutcome::Error {
            code: 503,
            message: "the server is currently unable to handle the request".into(),
        };
        let records = [
            record(1, m1(&[engine::model::MACHINE_FINALIZER]), vec![release(1)]),
            record(2, answer(1, refused), vec![release(2)]),
            record(
                3,
                answer(2, engine::ApiOutcome::Ok { object: None }),
                vec![],
            ),
        ];
        let (live, stores, _) = served(Duration::from_millis(0));
        let text = live.finish(&records, stores).timeline.render_text();
        let rejected: Vec<&str> = text.lines().filter(|l| l.contains("Rejected")).collect();
        assert_eq!(rejected.len(), 1, "{text}");
        assert!(
            rejected[0].contains("RemoveFinalizer #1: 503"),
            "{}",
            rejected[0]
        );
    }

    #[test]
    fn timestamps_move_with_the_start_and_nothing_else_does() {
        let mut v = json!({"status": {"conditions": [
            {"type": "Ready", "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "2024"}
        ]}, "metadata": {"name": "2024-01-01T00:00:00"}});
        rebase(&mut v, Duration::from_secs(90));
        assert_eq!(
            v.at_pointer("/status/conditions/0/lastTransitionTime"),
            Some(&json!("2024-01-01T00:01:30Z"))
        );
        assert_eq!(
            v.at_pointer("/status/conditions/0/reason"),
            Some(&json!("2024"))
        );
        assert_eq!(
            v.at_pointer("/metadata/name"),
            Some(&json!("2024-01-01T00:00:00"))
        );
    }
}
