//! Safety and liveness rules checked on every run, whatever the scenario expects.
//!
//! Safety is checked when a command is issued, against the world as it is then: hooks are never
//! bypassed, infrastructure is not deleted before its Node is drained, nothing destructive is
//! done to a cluster whose cache has not synced or twice for the same object, skipped or paused
//! Machines are never remediated, and remediation respects maxInFlight and a short-circuited MHC.
//! Liveness is checked at the end: a Machine still deleting long after it started must say why.

use crate::api::json::Pointer as _;
use crate::api::{FakeApi, ObjKey, json};
use engine::model::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, DRAIN_LABEL, EXCLUDE_DRAIN_ANNOTATION, Kind,
    ObjectKey, PAUSED_ANNOTATION, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX,
    SKIP_REMEDIATION_ANNOTATION, Scope,
};
use engine::store::Store;
use engine::time::{Duration, Timestamp};
use engine::{Action, Command};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A Machine deleting longer than this at the end of a run must explain itself.
pub const DELETION_EXPLAINED_AFTER: Duration = Duration::from_mins(10);

/// Deleting reasons that name what a deletion waits for.
const BLOCKING_REASONS: [&str; 8] = [
    "WaitingForPreDrainHook",
    "DrainingNode",
    "WaitingForVolumeDetach",
    "WaitingForPreTerminateHook",
    "WaitingForInfrastructureDeletion",
    "WaitingForBootstrapDeletion",
    "DeletingNode",
    "InternalError",
];

#[derive(Clone, Debug, Default)]
pub struct Checker {
    pub violations: Vec<String>,
    /// Machines still deleting at the end, with what holds them (not violations).
    pub stuck: Vec<String>,
    /// How many checks were made (so a report can show they ran).
    pub checks: u64,
    /// Destructive commands and what the controller saw of their success.
    pub(crate) repeats: crate::repeats::Repeats,
    /// Machines whose deletion completed, for the "finalizer released" rule.
    pub(crate) release: crate::release::Release,
    /// When the API changed, for the MHC status differential.
    pub(crate) differential: crate::differential::Differential,
    /// What the controllers last decided, for the status convergence rule.
    pub(crate) convergence: crate::convergence::Convergence,
    /// Clusters whose cache the controller has listed since it last started.
    pub synced: BTreeSet<Scope>,
    /// Each MHC's latest `RemediationAllowed` decision as the controller wrote it (whether or
    /// not the write got through), and when: `(namespace, name) -> (allowed, at)`.
    pub mhc_allowed: BTreeMap<(String, String), (bool, engine::Timestamp)>,
}

impl Checker {
    pub fn violate(&mut self, message: String) {
        self.violations.push(message);
    }
}

/// The deletion hooks of others: the controller's own (takeover) hold CAPI's manager, not it.
fn has_prefix_annotation(obj: &Value, prefix: &str) -> Vec<String> {
    json::annotations(obj)
        .into_keys()
        .filter(|k| engine::ownership::is_foreign_hook(k, prefix))
        .collect()
}

fn uid(obj: Option<&Value>) -> String {
    obj.and_then(|o| json::str_at(o, "metadata.uid"))
        .unwrap_or_default()
        .to_string()
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.at_pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .chain(
            obj.at_pointer("/status/v1beta2/conditions")
                .and_then(Value::as_array),
        )
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// The object a command writes to, as the fake API has it.
fn target_object<'a>(api: &'a FakeApi, command: &Command) -> (ObjKey, Option<&'a Value>) {
    let t = command.action.target();
    let key = ObjKey::new(
        json::group_of(&t.api_version),
        t.key.kind.name(),
        &t.key.namespace,
        &t.key.name,
    );
    let obj = api.get(&t.key.scope, &key);
    (key, obj)
}

/// What the rules read when a command is checked: the fake API, the controller's own store
/// (what it knows it cannot read), the time, and the MHCs' latest decisions.
pub(crate) struct Seen<'a> {
    pub api: &'a FakeApi,
    pub store: &'a Store,
    pub now: Timestamp,
    mhc_allowed: &'a BTreeMap<(String, String), (bool, Timestamp)>,
}

impl Checker {
    /// Checks a command against the world as it is when the command is issued; returns the
    /// rules it breaks.
    pub(crate) fn before(
        &mut self,
        api: &FakeApi,
        store: &Store,
        now: Timestamp,
        command: &Command,
    ) -> Vec<String> {
        self.checks += 1;
        let mut broken = Vec::new();
        let target_scope = command.action.target().key.scope.clone();
        if command.action.is_destructive() {
            if !self.synced.contains(&target_scope) {
                broken.push(format!(
                    "unsynced cache: {} on {} before the controller listed that cluster",
                    command.action.name(),
                    command.action.target().key
                ));
            }
            let (_, obj) = target_object(api, command);
            let uid = uid(obj);
            if let Some(repeated) = self.repeats.issued(command, &uid) {
                broken.push(repeated);
            }
        }
        let seen = self.seen(api, store, now);
        broken.extend(seen.machine_rules(command));
        broken.extend(seen.remediation_rules(command));
        broken.extend(seen.guess_rule(command));
        self.note_decision(command, now);
        broken
    }

    /// The hook and drain-order rules for a drain or infrastructure deletion seen landing in the
    /// API (a controller outside the simulator issued it): the world as the write finds it.
    pub(crate) fn landed(
        &mut self,
        api: &FakeApi,
        store: &Store,
        now: Timestamp,
        command: &Command,
    ) -> Vec<String> {
        self.checks += 1;
        self.seen(api, store, now).machine_rules(command)
    }

    pub(crate) fn seen<'a>(
        &'a self,
        api: &'a FakeApi,
        store: &'a Store,
        now: Timestamp,
    ) -> Seen<'a> {
        Seen {
            api,
            store,
            now,
            mhc_allowed: &self.mhc_allowed,
        }
    }

    /// Remembers an MHC's `RemediationAllowed` decision when the controller writes it.
    fn note_decision(&mut self, command: &Command, now: Timestamp) {
        if let Action::SetCondition {
            target, conditions, ..
        } = &command.action
            && target.key.kind == Kind::MachineHealthCheck
            && let Some(c) = conditions.current("RemediationAllowed")
        {
            let allowed = c.status == engine::model::ConditionStatus::True;
            let key = (
                target.key.namespace.to_string(),
                target.key.name.to_string(),
            );
            if self.mhc_allowed.get(&key).map(|(a, _)| *a) != Some(allowed) {
                self.mhc_allowed.insert(key, (allowed, now));
            }
        }
    }

    /// Records a destructive command the API carried out, for the "not twice" rule.
    pub(crate) fn after(&mut self, command: &Command, succeeded: bool) {
        if succeeded {
            self.repeats.carried_out(command.id);
        }
    }

    /// At the end of a run: every Machine deleting for longer than the bound must say what holds
    /// it; those that do are reported as stuck, those that don't are violations.
    /// At the end of a run: every Machine deleting for longer than the bound must say what
    /// holds it; those that do are stuck, those that don't are violations. Returns the
    /// timeline lines to write: `(object, action, detail)`.
    pub(crate) fn liveness(
        &mut self,
        api: &FakeApi,
        now: Timestamp,
        mode: engine::runtime::Mode,
    ) -> Vec<(String, &'static str, String)> {
        // In shadow mode the controller writes no condition: saying why is not its job there.
        if mode == engine::runtime::Mode::Shadow {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (key, m) in api
            .store(&Scope::Management)
            .into_iter()
            .flat_map(|s| s.list("cluster.x-k8s.io", "Machine"))
        {
            let Some(since) = m
                .at_pointer("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| engine::Timestamp::parse_rfc3339(t).ok())
            else {
                continue;
            };
            if now.since(since) < DELETION_EXPLAINED_AFTER {
                continue;
            }
            let deleting = ["/status/conditions", "/status/v1beta2/conditions"]
                .iter()
                .filter_map(|p| m.at_pointer(p).and_then(Value::as_array))
                .flatten()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Deleting"));
            let reason = deleting
                .and_then(|c| c.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let message = deleting
                .and_then(|c| c.get("message"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let paused = json::annotations(m).contains_key(PAUSED_ANNOTATION);
            let explained = BLOCKING_REASONS.contains(&reason);
            found.push((
                key.clone(),
                since,
                reason.to_string(),
                message.to_string(),
                explained || paused,
            ));
        }
        let mut lines = Vec::new();
        for (key, since, reason, message, explained) in found {
            let age = now.since(since);
            if explained || cluster_paused_for(api, &key) {
                let line = format!(
                    "{key} deleting for {age}: {reason}: {}",
                    message.lines().next().unwrap_or_default()
                );
                lines.push((
                    key.to_string(),
                    "Stuck",
                    format!("still deleting after {age}: {reason}: {message}"),
                ));
                self.stuck.push(line);
            } else {
                let v = format!(
                    "liveness: {key} has been deleting for {age} and no condition says why (Deleting reason {reason:?})"
                );
                lines.push((key.to_string(), "Violation", v.clone()));
                self.violate(v);
            }
        }
        lines
    }
}

impl Seen<'_> {
    /// No destructive command on a guess: none may depend on an object the controller knows it
    /// cannot read (the target, the Node a Pod is on, the Machine whose deletion issues it and
    /// that Machine's Node). A remediation's DeleteMachine depends on its Machine only: a verdict
    /// from the Machine's own fields (failureReason, the remediate annotation) stands without
    /// its Node.
    fn guess_rule(&self, command: &Command) -> Vec<String> {
        let store = self.store;
        let disruptive =
            command.action.is_destructive() || matches!(command.action, Action::Cordon { .. });
        if !disruptive || !store.has_unreadable() {
            return Vec::new();
        }
        let target = &command.action.target().key;
        let mut depends = vec![target.clone()];
        let node_of = |scope: &Scope, name: &str| {
            engine::model::ObjectKey::new(scope.clone(), Kind::Node, "", name)
        };
        let (_, target_obj) = target_object(self.api, command);
        if target.kind == Kind::Pod
            && let Some(node) = target_obj.and_then(|p| json::str_at(p, "spec.nodeName"))
        {
            depends.push(node_of(&target.scope, node));
        }
        let machine = &command.owner;
        if machine.kind == Kind::Machine {
            depends.push(machine.clone());
            let key = ObjKey::new(
                "cluster.x-k8s.io",
                "Machine",
                &machine.namespace,
                &machine.name,
            );
            if let Some(m) = self.api.get(&Scope::Management, &key)
                && let (Some(cluster), Some(node)) = (
                    json::str_at(m, "spec.clusterName"),
                    json::str_at(m, "status.nodeRef.name"),
                )
            {
                depends.push(node_of(&self.api.workload_scope(cluster), node));
            }
        }
        depends.sort();
        depends.dedup();
        depends
            .iter()
            .filter_map(|k| store.unreadable(k).map(|p| (k, p)))
            .map(|(k, p)| {
                format!(
                    "acted on a guess: {} on {} while {k} cannot be read ({p})",
                    command.action.name(),
                    target
                )
            })
            .collect()
    }

    /// Whether the controller could have known of `hooks` on Machine `owner` (`machine` as the
    /// API holds it): its store shows one of them, or it has seen the Machine at the version
    /// the API holds, so a hook there reached it (or a bug hid it). A hook added after the
    /// version it last saw (a partition of the management cluster, a watch event on its way)
    /// is not one it bypassed: it acts on what it saw, as every controller does.
    fn could_see(&self, owner: &ObjectKey, machine: &Value, hooks: &[String]) -> bool {
        // A store without the Machine (a controller outside the simulator, judged as its
        // writes land) tells nothing of what it saw: judged by the API alone, as before.
        let Some(seen) = self.store.get(owner) else {
            return true;
        };
        let meta = seen.meta();
        let held = json::str_at(machine, "metadata.resourceVersion")
            .and_then(|rv| rv.parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        hooks.iter().any(|h| meta.has_annotation(h)) || meta.resource_version >= held
    }

    /// Hooks and drain order for commands a Machine's deletion issues.
    fn machine_rules(&self, command: &Command) -> Vec<String> {
        let owner = &command.owner;
        if owner.kind != Kind::Machine {
            return Vec::new();
        }
        let key = ObjKey::new("cluster.x-k8s.io", "Machine", &owner.namespace, &owner.name);
        let Some(machine) = self.api.get(&Scope::Management, &key) else {
            return Vec::new();
        };
        let mut broken = Vec::new();
        match &command.action {
            Action::Cordon { .. } | Action::Evict { .. } => {
                let hooks = has_prefix_annotation(machine, PRE_DRAIN_HOOK_PREFIX);
                if !hooks.is_empty() && self.could_see(owner, machine, &hooks) {
                    broken.push(format!(
                        "hook bypassed: {} on {} while pre-drain hooks {hooks:?} are present",
                        command.action.name(),
                        command.action.target().key
                    ));
                }
            }
            Action::DeleteInfrastructure { .. } => {
                let hooks = has_prefix_annotation(machine, PRE_TERMINATE_HOOK_PREFIX);
                if !hooks.is_empty() && self.could_see(owner, machine, &hooks) {
                    broken.push(format!(
                        "hook bypassed: infrastructure of {owner} deleted while pre-terminate hooks {hooks:?} are present"
                    ));
                }
                if let Some(pods) = self.undrained_pods(machine) {
                    broken.push(format!(
                        "infrastructure of {owner} deleted before its Node was drained: {} still running",
                        pods.join(", ")
                    ));
                }
            }
            _ => {}
        }
        broken
    }

    /// Remediation never touches skipped or paused Machines, never runs while its MHC is
    /// short-circuited, and stays within maxInFlight.
    fn remediation_rules(&self, command: &Command) -> Vec<String> {
        if command.actor() != "remediation" {
            return Vec::new();
        }
        let machine_name = match &command.action {
            Action::DeleteMachine { target } | Action::CreateRemediation { target, .. } => {
                target.key.name.clone()
            }
            _ => return Vec::new(),
        };
        let ns = &command.action.target().key.namespace;
        let key = ObjKey::new("cluster.x-k8s.io", "Machine", ns, &machine_name);
        let Some(machine) = self.api.get(&Scope::Management, &key) else {
            return Vec::new();
        };
        let mut broken = Vec::new();
        let annotations = json::annotations(machine);
        for a in [SKIP_REMEDIATION_ANNOTATION, PAUSED_ANNOTATION] {
            if annotations.contains_key(a) {
                broken.push(format!("remediated a Machine annotated {a}: {key}"));
            }
        }
        let cluster = json::str_at(machine, "spec.clusterName").unwrap_or_default();
        let cluster_key = ObjKey::new("cluster.x-k8s.io", "Cluster", ns, cluster);
        if self
            .api
            .get(&Scope::Management, &cluster_key)
            .and_then(|c| c.at_pointer("/spec/paused"))
            .and_then(Value::as_bool)
            == Some(true)
        {
            broken.push(format!("remediated {key} while its Cluster is paused"));
        }
        let labels = json::labels(machine);
        for mhc in self.api.mhcs_of(ns, cluster) {
            let selects = json::namespace(mhc) == ns
                && mhc
                    .at_pointer("/spec/selector/matchLabels")
                    .and_then(Value::as_object)
                    .is_some_and(|m| {
                        m.iter()
                            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
                    });
            if !selects {
                continue;
            }
            let decided = self.mhc_allowed.get(&(
                json::namespace(mhc).to_string(),
                json::name(mhc).to_string(),
            ));
            // Decided at an earlier instant: a decision at this instant may have been taken on
            // the counts that lifted it. A Machine the MHC marked for its owner before it
            // short-circuited stays marked, and its MachineSet remediates it, as upstream's does.
            // A mark at the decision's own instant came before it: a short-circuited MHC marks
            // nothing.
            let marked_since = condition(machine, "OwnerRemediated")
                .filter(|c| c.get("status").and_then(Value::as_str) == Some("False"))
                .and_then(|c| c.get("lastTransitionTime").and_then(Value::as_str))
                .and_then(|t| engine::time::Timestamp::parse_rfc3339(t).ok());
            let marked_before = |at: &engine::time::Timestamp| {
                matches!(command.action, Action::DeleteMachine { .. })
                    && marked_since.is_some_and(|m| m <= *at)
            };
            if decided.is_some_and(|(allowed, at)| !allowed && *at < self.now && !marked_before(at))
            {
                broken.push(format!(
                    "remediated {key} while MachineHealthCheck {} is short-circuited",
                    json::name(mhc)
                ));
            }
        }
        if let Some(limit) = self.max_in_flight(machine) {
            let in_flight = self.remediations_in_flight(ns, cluster);
            if in_flight >= limit && matches!(command.action, Action::DeleteMachine { .. }) {
                broken.push(format!(
                    "remediation beyond maxInFlight {limit}: {in_flight} already deleting when {key} was deleted"
                ));
            }
        }
        broken
    }

    /// `maxInFlight` of the MachineDeployment that owns the Machine's MachineSet, as a count.
    fn max_in_flight(&self, machine: &Value) -> Option<usize> {
        let owner = |o: &Value, kind: &str| -> Option<String> {
            o.at_pointer("/metadata/ownerReferences")?
                .as_array()?
                .iter()
                .find(|r| r.get("kind").and_then(Value::as_str) == Some(kind))
                .and_then(|r| r.get("name").and_then(Value::as_str))
                .map(str::to_string)
        };
        let ns = json::namespace(machine);
        let ms = owner(machine, "MachineSet")?;
        let ms = self.api.get(
            &Scope::Management,
            &ObjKey::new("cluster.x-k8s.io", "MachineSet", ns, &ms),
        )?;
        let md = owner(ms, "MachineDeployment")?;
        let md = self.api.get(
            &Scope::Management,
            &ObjKey::new("cluster.x-k8s.io", "MachineDeployment", ns, &md),
        )?;
        let limit = md
            .at_pointer("/spec/remediation/maxInFlight")
            .or_else(|| md.at_pointer("/spec/strategy/remediation/maxInFlight"))?;
        let replicas = md
            .at_pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        match limit {
            Value::Number(n) => n.as_u64().map(|n| n as usize),
            Value::String(s) => {
                let p: i64 = s.strip_suffix('%')?.parse().ok()?;
                Some(((p * replicas + 99) / 100) as usize)
            }
            _ => None,
        }
    }

    fn remediations_in_flight(&self, ns: &str, cluster: &str) -> usize {
        self.api
            .machines_of(ns, cluster)
            .into_iter()
            .filter(|m| {
                json::is_deleting(m)
                    && condition(m, "OwnerRemediated")
                        .and_then(|c| c.get("reason"))
                        .and_then(Value::as_str)
                        == Some("MachineDeleting")
            })
            .count()
    }

    /// Pods a drain would still have to evict from the Machine's Node, when the drain applies
    /// (not excluded, no timeout configured, an active control-plane Machine exists).
    fn undrained_pods(&self, machine: &Value) -> Option<Vec<String>> {
        if json::annotations(machine).contains_key(EXCLUDE_DRAIN_ANNOTATION)
            || machine.at_pointer("/spec/nodeDrainTimeout").is_some()
            || machine
                .at_pointer("/spec/deletion/nodeDrainTimeoutSeconds")
                .and_then(Value::as_i64)
                .is_some_and(|s| s > 0)
        {
            return None;
        }
        let cluster = json::str_at(machine, "spec.clusterName")?;
        let ns = json::namespace(machine);
        let active_cp = self.api.machines_of(ns, cluster).into_iter().any(|m| {
            !json::is_deleting(m)
                && m.at_pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
        });
        if !active_cp {
            return None;
        }
        let node = json::str_at(machine, "status.nodeRef.name")?;
        if crate::drain_skips::drain_skipped(self.api, machine, node) {
            return None;
        }
        let scope = self.api.workload_scope(cluster);
        let node_key = ObjKey::new("", "Node", "", node);
        // An unreachable Node's pods never finish terminating; the drain skips them.
        if self
            .api
            .get(&scope, &node_key)
            .and_then(|n| condition(n, "Ready"))
            .and_then(|c| c.get("status"))
            .and_then(Value::as_str)
            == Some("Unknown")
        {
            return None;
        }
        let pods: Vec<String> = self
            .api
            .store(&scope)?
            .list("", "Pod")
            .filter(|(_, p)| json::str_at(p, "spec.nodeName") == Some(node))
            .filter(|(_, p)| !json::is_deleting(p))
            .filter(|(_, p)| {
                !matches!(
                    json::str_at(p, "status.phase"),
                    Some("Succeeded" | "Failed")
                )
            })
            .filter(|(_, p)| !json::annotations(p).contains_key("kubernetes.io/config.mirror"))
            .filter(|(_, p)| {
                json::labels(p)
                    .get(DRAIN_LABEL)
                    .is_none_or(|v| !v.eq_ignore_ascii_case("skip"))
            })
            .filter(|(_, p)| !crate::drain_skips::drain_rule_may_skip(self.api, machine, p))
            .filter(|(_, p)| {
                !p.at_pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|o| {
                        o.iter()
                            .any(|o| o.get("kind").and_then(Value::as_str) == Some("DaemonSet"))
                    })
            })
            .map(|(k, _)| format!("{}/{}", k.namespace, k.name))
            .collect();
        (!pods.is_empty()).then_some(pods)
    }
}

fn cluster_paused_for(api: &FakeApi, machine: &ObjKey) -> bool {
    let Some(m) = api.get(&Scope::Management, machine) else {
        return false;
    };
    let cluster = json::labels(m)
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .or_else(|| json::str_at(m, "spec.clusterName").map(str::to_string))
        .unwrap_or_default();
    api.get(
        &Scope::Management,
        &ObjKey::new("cluster.x-k8s.io", "Cluster", &machine.namespace, &cluster),
    )
    .and_then(|c| c.at_pointer("/spec/paused"))
    .and_then(Value::as_bool)
        == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Sim;
    use engine::ControllerId;
    use engine::model::ObjectKey;

    /// The unknown-node scenario run to 27m: Node w2 is unreadable and Machine w2 deleting.
    fn sim_at_27m() -> Sim {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/unknown-node-is-never-deleted.yaml"
        );
        let scenario = crate::scenario::load(std::path::Path::new(path)).expect("loads");
        let start = scenario.world.start;
        let mut sim = Sim::new(scenario, 0, crate::feed::Feeder::new(None));
        sim.setup();
        sim.run_until(start + Duration::from_mins(27));
        sim
    }

    fn command(action: Action, owner: ObjectKey) -> Command {
        Command {
            id: 999,
            controller: ControllerId::Deletion,
            owner,
            action,
            cause: 0,
            reason: String::new(),
            series: None,
        }
    }

    #[test]
    fn a_destructive_command_that_depends_on_an_unreadable_object_is_a_guess() {
        let sim = sim_at_27m();
        let c1 = sim.api.workload_scope("c1");
        let node = |name: &str| engine::Target {
            key: ObjectKey::new(c1.clone(), Kind::Node, "", name),
            api_version: "v1".into(),
        };
        let machine = |name: &str| ObjectKey::management(Kind::Machine, "default", name);
        let cordon_w2 = command(Action::Cordon { node: node("w2") }, machine("w2"));
        let seen = sim
            .checks
            .invariants
            .seen(&sim.api, sim.engine().store(), sim.clock.now);
        let broken = seen.guess_rule(&cordon_w2);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(
            broken[0].starts_with(
                "acted on a guess: Cordon on Node w2@c1 while Node w2@c1 cannot be read"
            ),
            "{broken:?}"
        );
        // Owned by w2's deletion, even a command on a readable object depends on w2's Node.
        let cordon_w3 = command(Action::Cordon { node: node("w3") }, machine("w2"));
        assert_eq!(seen.guess_rule(&cordon_w3).len(), 1);
        let cordon_w3 = command(Action::Cordon { node: node("w3") }, machine("w3"));
        assert_eq!(seen.guess_rule(&cordon_w3), Vec::<String>::new());
    }
}
