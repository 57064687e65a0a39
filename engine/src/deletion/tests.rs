//! Engine-level tests of Machine deletion: inputs in, exact commands out.

use crate::command::{Action, Command, EventType};
use crate::input::{ApiOutcome, Input};
use crate::model::*;
use crate::testing::*;
use crate::time::{Duration, Timestamp};
use crate::{Engine, Target};
use std::collections::BTreeMap;

/// 2024-01-01T00:00:00Z
const T0: Timestamp = Timestamp(1_704_067_200_000);

fn at(secs: i64) -> Timestamp {
    T0.saturating_add(Duration::from_secs(secs))
}

fn mgmt() -> Scope {
    Scope::Management
}

/// Cluster c1 with an active control-plane Machine cp-1, worker m1 on node n1 with pods
/// app/web-0 and app/web-1.
fn world(m1: Machine) -> Vec<(Scope, Object)> {
    let w = workload("c1");
    vec![
        (mgmt(), Object::Cluster(cluster("c1"))),
        (
            mgmt(),
            Object::Machine(control_plane_machine("c1", "cp-1", Some("cp-1"))),
        ),
        (mgmt(), Object::External(infra_machine("cp-1"))),
        (mgmt(), Object::External(bootstrap_config("cp-1"))),
        (mgmt(), Object::Machine(m1)),
        (mgmt(), Object::External(infra_machine("m1"))),
        (mgmt(), Object::External(bootstrap_config("m1"))),
        (w.clone(), Object::Node(node("cp-1"))),
        (w.clone(), Object::Node(node("n1"))),
        (w.clone(), Object::Namespace(namespace("app"))),
        (w.clone(), Object::Pod(pod("app", "web-0", "n1"))),
        (w, Object::Pod(pod("app", "web-1", "n1"))),
    ]
}

fn deleting_m1() -> Machine {
    let mut m = machine("c1", "m1", Some("n1"));
    m.meta.deletion_timestamp = Some(T0);
    m
}

/// Drives the engine and plays the API's part for status writes.
struct Harness {
    engine: Engine,
    now: Timestamp,
    rv: u64,
}

impl Harness {
    fn start(objects: Vec<(Scope, Object)>) -> (Harness, Vec<Command>) {
        let (engine, commands) = synced_engine(T0, objects);
        (
            Harness {
                engine,
                now: T0,
                rv: 100,
            },
            commands,
        )
    }

    fn input(&mut self, now: Timestamp, input: Input) -> Vec<Command> {
        self.now = now;
        self.engine.handle(now, input);
        drain_commands(&mut self.engine)
    }

    fn answer(&mut self, command: &Command, outcome: ApiOutcome) -> Vec<Command> {
        self.input(
            self.now,
            Input::ApiResult {
                command: command.id,
                outcome,
            },
        )
    }

    fn ok(&mut self, command: &Command) -> Vec<Command> {
        self.answer(command, ApiOutcome::Ok { object: None })
    }

    fn get(&self, key: &ObjectKey) -> Object {
        self.engine
            .store()
            .get(key)
            .cloned()
            .expect("object observed")
    }

    fn machine(&self) -> Machine {
        match self.get(&machine_key("m1")) {
            Object::Machine(m) => m,
            other => panic!("not a machine: {other:?}"),
        }
    }

    /// Observes a changed object (as a watch event would deliver it).
    fn observe(&mut self, scope: Scope, mut object: Object) -> Vec<Command> {
        self.rv += 1;
        set_rv(&mut object, self.rv);
        self.input(
            self.now,
            Input::Upsert {
                scope,
                object: Box::new(object),
            },
        )
    }

    fn gone(&mut self, key: ObjectKey) -> Vec<Command> {
        self.input(self.now, Input::Delete { key })
    }

    fn tick(&mut self, now: Timestamp) -> Vec<Command> {
        self.input(now, Input::Tick)
    }

    /// Applies status writes until none is left; returns m1's conditions and the other
    /// commands issued on the way.
    fn settle(&mut self, commands: &[Command]) -> (Conditions, Vec<Command>) {
        let mut pending: Vec<Command> = commands.to_vec();
        let mut others = Vec::new();
        for _ in 0..10 {
            let next = self.apply_status(&pending);
            others.extend(
                next.iter()
                    .filter(|c| {
                        !matches!(
                            c.action,
                            Action::SetCondition { .. } | Action::PatchStatus { .. }
                        )
                    })
                    .cloned(),
            );
            if next.is_empty() {
                return (self.machine().conditions, others);
            }
            pending = next;
        }
        panic!("status writes do not settle");
    }

    /// Answers the status writes among `commands` with Ok and observes their effect on m1;
    /// returns everything issued on the way, other commands included.
    fn apply_status(&mut self, commands: &[Command]) -> Vec<Command> {
        let mut out = Vec::new();
        for c in commands {
            let mut m = self.machine();
            match &c.action {
                Action::SetCondition { conditions, .. } => m.conditions = conditions.clone(),
                Action::PatchStatus { merge, .. } => apply_patch(&mut m, &merge.to_value()),
                _ => continue,
            }
            out.extend(self.ok(c));
            out.extend(self.observe(mgmt(), Object::Machine(m)));
        }
        out
    }
}

fn set_rv(object: &mut Object, rv: u64) {
    let meta = match object {
        Object::Machine(o) => &mut o.meta,
        Object::Node(o) => &mut o.meta,
        Object::Pod(o) => &mut o.meta,
        Object::External(o) => &mut o.meta,
        Object::Cluster(o) => &mut o.meta,
        _ => return,
    };
    meta.resource_version = rv;
}

fn apply_patch(m: &mut Machine, patch: &serde_json::Value) {
    let status = &patch["status"];
    if let Some(phase) = status["phase"].as_str() {
        m.phase = Some(phase.to_string());
    }
    let t = |f: &str| {
        status["deletion"][f]
            .as_str()
            .map(|s| Timestamp::parse_rfc3339(s).expect("rfc3339"))
    };
    let d = &mut m.deletion;
    d.node_drain_start = t("nodeDrainStartTime").or(d.node_drain_start);
    d.wait_for_node_volume_detach_start =
        t("waitForNodeVolumeDetachStartTime").or(d.wait_for_node_volume_detach_start);
    d.wait_for_pre_drain_hook_start =
        t("waitForPreDrainHookStartTime").or(d.wait_for_pre_drain_hook_start);
    d.wait_for_pre_terminate_hook_start =
        t("waitForPreTerminateHookStartTime").or(d.wait_for_pre_terminate_hook_start);
    if let Some(name) = status["nodeRef"]["name"].as_str() {
        m.node_ref = Some(name.to_string());
    }
}

fn machine_key(name: &str) -> ObjectKey {
    ObjectKey::management(Kind::Machine, "default", name)
}

fn node_key(name: &str) -> ObjectKey {
    ObjectKey::new(workload("c1"), Kind::Node, "", name)
}

fn pod_key(name: &str) -> ObjectKey {
    ObjectKey::new(workload("c1"), Kind::Pod, "app", name)
}

fn infra_key(name: &str) -> ObjectKey {
    ObjectKey::management(
        Kind::External(GroupKind {
            group: "infrastructure.cluster.x-k8s.io".into(),
            kind: "DockerMachine".into(),
        }),
        "default",
        name,
    )
}

fn bootstrap_key(name: &str) -> ObjectKey {
    ObjectKey::management(
        Kind::External(GroupKind {
            group: "bootstrap.cluster.x-k8s.io".into(),
            kind: "KubeadmConfig".into(),
        }),
        "default",
        name,
    )
}

/// `controller Action Target` for every command (events show their reason).
fn lines(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .map(|c| match &c.action {
            Action::RecordEvent { reason, .. } => {
                format!("{} RecordEvent {reason}", c.actor())
            }
            a => format!("{} {} {}", c.actor(), a.name(), a.target().key),
        })
        .collect()
}

fn find<'c>(commands: &'c [Command], name: &str) -> &'c Command {
    commands
        .iter()
        .find(|c| c.action.name() == name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", lines(commands)))
}

fn all<'c>(commands: &'c [Command], name: &str) -> Vec<&'c Command> {
    commands
        .iter()
        .filter(|c| c.action.name() == name)
        .collect()
}

fn last_conditions(commands: &[Command]) -> Conditions {
    match &all(commands, "SetCondition")
        .last()
        .unwrap_or_else(|| panic!("no SetCondition in {:#?}", lines(commands)))
        .action
    {
        Action::SetCondition { conditions, .. } => conditions.clone(),
        _ => unreachable!(),
    }
}

fn deleting(c: &Conditions) -> (String, String) {
    let d = c.current("Deleting").expect("Deleting condition");
    assert_eq!(d.status, ConditionStatus::True);
    (d.reason.clone(), d.message.clone())
}

fn legacy(c: &Conditions, type_: &str) -> (ConditionStatus, String, String) {
    let l = c.legacy(type_).unwrap_or_else(|| panic!("no {type_}"));
    (l.status, l.reason.clone(), l.message.clone())
}

fn deleting_pod(name: &str, since: Timestamp) -> Object {
    let mut p = pod("app", name, "n1");
    p.meta.deletion_timestamp = Some(since);
    Object::Pod(p)
}

/// Runs m1 through hooks (none) and the first drain pass; returns the harness with n1
/// cordoned and the eviction commands.
fn drained_start(m1: Machine, extra: Vec<(Scope, Object)>) -> (Harness, Vec<Command>) {
    let mut objects = world(m1);
    objects.extend(extra);
    let (mut h, first) = Harness::start(objects);
    let mut cmds = h.apply_status(&first);
    cmds.extend(first);
    let cordon = find(&cmds, "Cordon").clone();
    let mut out = h.ok(&cordon);
    let mut n1 = match h.get(&node_key("n1")) {
        Object::Node(n) => n,
        _ => unreachable!(),
    };
    n1.unschedulable = true;
    out.extend(h.observe(workload("c1"), Object::Node(n1)));
    (h, out)
}

#[test]
fn pre_drain_hooks_hold_the_drain_and_list_sorted_hooks() {
    let mut m1 = deleting_m1();
    for hook in ["b-hook", "a-hook"] {
        m1.meta
            .annotations
            .insert(format!("{PRE_DRAIN_HOOK_PREFIX}/{hook}"), "owner".into());
    }
    let (mut h, first) = Harness::start(world(m1));
    assert_eq!(
        lines(&first),
        [
            "deletion PatchStatus Machine default/m1",
            "deletion SetCondition Machine default/m1"
        ]
    );
    match &first[0].action {
        Action::PatchStatus { merge, .. } => assert_eq!(
            merge.0,
            r#"{"status":{"phase":"Deleting","deletion":{"waitForPreDrainHookStartTime":"2024-01-01T00:00:00Z"}}}"#
        ),
        _ => unreachable!(),
    }
    let c = last_conditions(&first);
    assert_eq!(
        deleting(&c),
        (
            "WaitingForPreDrainHook".into(),
            "Waiting for pre-drain hooks to succeed (hooks: \
             pre-drain.delete.hook.machine.cluster.x-k8s.io/a-hook,\
             pre-drain.delete.hook.machine.cluster.x-k8s.io/b-hook)"
                .into()
        )
    );
    assert_eq!(
        legacy(&c, "PreDrainDeleteHookSucceeded"),
        (
            ConditionStatus::False,
            "WaitingExternalHook".into(),
            String::new()
        )
    );
    assert_eq!(
        c.legacy("PreDrainDeleteHookSucceeded").unwrap().severity,
        Severity::Info
    );
    let settled = h.apply_status(&first);
    assert!(settled.is_empty(), "{:#?}", lines(&settled));

    // The hook owner removes its annotations: the drain starts in that same input.
    let mut m = h.machine();
    m.meta.annotations.clear();
    let cmds = h.observe(mgmt(), Object::Machine(m));
    assert_eq!(
        lines(&cmds),
        [
            "deletion PatchStatus Machine default/m1",
            "drain Cordon Node n1@c1",
            "deletion SetCondition Machine default/m1"
        ]
    );
    let c = last_conditions(&cmds);
    assert_eq!(
        deleting(&c),
        (
            "DrainingNode".into(),
            "Drain not completed yet (started at 2024-01-01T00:00:00Z):".into()
        )
    );
    assert_eq!(
        legacy(&c, "DrainingSucceeded"),
        (
            ConditionStatus::False,
            "Draining".into(),
            "Draining the node before deletion".into()
        )
    );
    assert_eq!(
        legacy(&c, "PreDrainDeleteHookSucceeded").0,
        ConditionStatus::True
    );
    assert!(find(&cmds, "Cordon").reason.contains("cordoning Node n1"));
}

/// What m1 issues at the input that ends its drain (nothing pending, no hooks).
const DRAINED_THEN_INFRASTRUCTURE: [&str; 5] = [
    "deletion RecordEvent SuccessfulDrainNode",
    "deletion RecordEvent NodeVolumesDetached",
    "deletion DeleteInfrastructure DockerMachine default/m1",
    "deletion PatchStatus Machine default/m1",
    "deletion SetCondition Machine default/m1",
];

#[test]
fn drain_completes_at_the_input_that_removes_the_last_pod() {
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    // The eviction pass already reports what an accepted eviction means (as upstream's pass).
    assert_eq!(
        lines(&cmds),
        [
            "drain Evict Pod app/web-0@c1",
            "drain Evict Pod app/web-1@c1",
            "deletion SetCondition Machine default/m1"
        ]
    );
    for c in all(&cmds, "Evict") {
        match &c.action {
            Action::Evict {
                grace_period_seconds,
                ..
            } => assert_eq!(*grace_period_seconds, None),
            _ => unreachable!(),
        }
        assert_eq!(c.reason, "draining Node n1: Machine m1 is being deleted");
    }
    let c = last_conditions(&cmds);
    let want = "Drain not completed yet (started at 2024-01-01T00:00:00Z):\n\
                * Pods app/web-0, app/web-1: deletionTimestamp set, but still not removed from the Node";
    assert_eq!(deleting(&c), ("DrainingNode".into(), want.into()));
    assert_eq!(
        legacy(&c, "DrainingSucceeded"),
        (ConditionStatus::False, "Draining".into(), want.into())
    );
    let mut out = h.ok(&cmds[0]);
    out.extend(h.ok(&cmds[1]));
    assert!(
        out.is_empty(),
        "accepted evictions change nothing: {:#?}",
        lines(&out)
    );
    h.apply_status(&cmds);
    // The pods terminate; nothing new to say until the last one is gone.
    assert!(
        h.observe(workload("c1"), deleting_pod("web-0", at(1)))
            .is_empty()
    );
    assert!(
        h.observe(workload("c1"), deleting_pod("web-1", at(1)))
            .is_empty()
    );
    h.now = at(3);
    let out = h.gone(pod_key("web-0"));
    let c = last_conditions(&out);
    assert_eq!(
        deleting(&c).1,
        "Drain not completed yet (started at 2024-01-01T00:00:00Z):\n\
         * Pod app/web-1: deletionTimestamp set, but still not removed from the Node"
    );
    h.apply_status(&out);

    h.now = at(7);
    let out = h.gone(pod_key("web-1"));
    assert_eq!(lines(&out), DRAINED_THEN_INFRASTRUCTURE);
    let c = last_conditions(&out);
    assert_eq!(legacy(&c, "DrainingSucceeded").0, ConditionStatus::True);
    // The eviction-retry wake-up of the accepted evictions finds nothing to do.
    h.apply_status(&out);
    assert!(all(&h.tick(at(20)), "Evict").is_empty());
    assert_eq!(legacy(&c, "VolumeDetachSucceeded").0, ConditionStatus::True);
    assert_eq!(
        legacy(&c, "PreTerminateDeleteHookSucceeded").0,
        ConditionStatus::True
    );
    assert_eq!(
        deleting(&c),
        (
            "WaitingForInfrastructureDeletion".into(),
            "Waiting for DockerMachine to be deleted".into()
        )
    );
    match &find(&out, "RecordEvent").action {
        Action::RecordEvent { type_, message, .. } => {
            assert_eq!(*type_, EventType::Normal);
            assert_eq!(message, "success draining Machine's node \"n1\"");
        }
        _ => unreachable!(),
    }
}

/// The drained world of the test above, with both evictions accepted and the status applied.
fn evicted_start() -> Harness {
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    h.ok(&cmds[0]);
    h.ok(&cmds[1]);
    h.apply_status(&cmds);
    h
}

/// The pods of n1 terminating and going away, as four watch events.
fn pods_terminate(h: &mut Harness) -> Vec<Input> {
    let mut inputs = Vec::new();
    for name in ["web-0", "web-1"] {
        let mut object = deleting_pod(name, at(1));
        h.rv += 1;
        set_rv(&mut object, h.rv);
        inputs.push(Input::Upsert {
            scope: workload("c1"),
            object: Box::new(object),
        });
    }
    inputs.push(Input::Delete {
        key: pod_key("web-0"),
    });
    inputs.push(Input::Delete {
        key: pod_key("web-1"),
    });
    inputs
}

#[test]
fn a_drain_message_held_back_by_a_write_in_flight_is_written_after_its_answer() {
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    h.ok(&cmds[0]);
    h.ok(&cmds[1]);
    let write = find(&cmds, "SetCondition").clone();
    h.observe(workload("c1"), deleting_pod("web-0", at(1)));
    h.now = at(3);
    // The first message is still being written: nothing new is said yet.
    assert!(lines(&h.gone(pod_key("web-0"))).is_empty());
    // Its answer reconciles m1, which now says what is left.
    let out = h.ok(&write);
    assert_eq!(
        deleting(&last_conditions(&out)).1,
        "Drain not completed yet (started at 2024-01-01T00:00:00Z):\n\
         * Pod app/web-1: deletionTimestamp set, but still not removed from the Node"
    );
}

#[test]
fn a_batch_is_reconciled_once_against_its_latest_state() {
    let mut one_by_one = evicted_start();
    let mut seen = Vec::new();
    for input in pods_terminate(&mut one_by_one) {
        seen.push(lines(&one_by_one.input(at(7), input)));
    }
    // One by one, the first removal writes an intermediate drain message.
    assert!(
        seen[2].contains(&"deletion SetCondition Machine default/m1".to_string()),
        "{seen:#?}"
    );

    let mut batched = evicted_start();
    let inputs = pods_terminate(&mut batched);
    let out = batched.input(at(7), Input::Batch { inputs });
    // Batched, m1 is reconciled once, with both pods gone: the drain completes and nothing
    // about the intermediate state is written.
    assert_eq!(lines(&out), DRAINED_THEN_INFRASTRUCTURE);
    // One by one, the last removal does the same (its condition write waits for the one
    // still in flight).
    assert_eq!(seen[3], lines(&out)[..4]);
    assert_eq!(batched.engine.store(), one_by_one.engine.store());
    assert_eq!(
        batched.engine.applied_seq() + 3,
        one_by_one.engine.applied_seq(),
        "a batch is one input"
    );
}

/// `/metrics` reads the gauges: a pod a PDB protects and a pod evicted but not gone yet are
/// counted by reason; a Machine a hook holds is counted by hook.
#[test]
fn the_gauges_count_blocked_pods_by_reason_and_machines_held_by_each_hook() {
    let gauges = |h: &Harness| {
        crate::metrics::gauges(h.engine.store(), &h.engine.controllers().deletion, h.now)
    };
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    h.apply_status(&cmds);
    let pdb = "Cannot evict pod as it would violate the pod's disruption budget.";
    let mut out = h.answer(&cmds[0], crate::testing::too_many_requests(pdb));
    out.extend(h.ok(&cmds[1]));
    h.settle(&out);
    assert_eq!(
        gauges(&h).drain_blocked,
        BTreeMap::from([("PodDisruptionBudget", 1), ("WaitingForDeletion", 1)])
    );
    let out = h.gone(pod_key("web-1"));
    h.settle(&out);
    assert_eq!(
        gauges(&h).drain_blocked,
        BTreeMap::from([("PodDisruptionBudget", 1)])
    );
    assert!(gauges(&h).hooks_waiting.is_empty());

    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(format!("{PRE_DRAIN_HOOK_PREFIX}/migrate"), "owner".into());
    let (mut h, first) = Harness::start(world(m1.clone()));
    h.apply_status(&first);
    assert_eq!(
        gauges(&h).hooks_waiting,
        BTreeMap::from([(("pre-drain", "migrate".to_string()), 1)])
    );
    assert_eq!(gauges(&h).own_hooked.deleting, 0, "someone else's hook");

    // This controller's own hooks left beside it (a takeover before): counted as its own,
    // never as someone else's hook holding the deletion.
    let (mut h, first) = Harness::start(world(with_own_hooks(m1)));
    h.apply_status(&first);
    assert_eq!(
        gauges(&h).hooks_waiting,
        BTreeMap::from([(("pre-drain", "migrate".to_string()), 1)])
    );
    assert_eq!(gauges(&h).own_hooked.deleting, 1);
}

#[test]
fn deleting_machines_with_this_controllers_hooks_are_counted_as_held() {
    let mut objects = world(with_own_hooks(of_machine_set(deleting_m1())));
    objects.push((
        mgmt(),
        Object::Machine(with_own_hooks(of_machine_set(machine("c1", "m2", None)))),
    ));
    let (h, _) = takeover_start(objects);
    let gauges = crate::metrics::gauges(h.engine.store(), &h.engine.controllers().deletion, h.now);
    assert_eq!(
        gauges.own_hooked,
        crate::metrics::OwnHooked {
            deleting: 1,
            not_deleting: 1
        },
        "m1 (deleting) is held; m2 is hooked, not deleting"
    );
}

/// Found beside CAPI's manager: during this controller's own drain the gauges said
/// `WaitingForPreDrainHook` (CAPI's reason: it waits at this controller's hook), so the alert on
/// `phase="DrainingNode"` could never fire, and this controller's own hook counted as a hook
/// holding the deletion. In takeover a Machine it holds is counted under its own condition's
/// reason, and its own hook is not someone else's.
#[test]
fn in_takeover_a_held_machine_is_counted_under_this_controllers_own_phase() {
    let m1 = capi_deleting(
        with_own_hooks(of_machine_set(deleting_m1())),
        "WaitingForPreDrainHook",
    );
    let (mut h, first) = takeover_start(world(m1));
    assert_eq!(destructive(&first), ["drain Cordon Node n1@c1"]);
    let gauges = |h: &Harness| {
        crate::metrics::gauges(h.engine.store(), &h.engine.controllers().deletion, h.now)
    };
    let decided = gauges(&h);
    assert_eq!(
        decided.deleting.keys().collect::<Vec<_>>(),
        ["DrainingNode"],
        "as decided, before its condition is written: {decided:?}"
    );
    assert!(decided.hooks_waiting.is_empty(), "{decided:?}");
    h.apply_status(&first);
    let written = gauges(&h);
    assert_eq!(
        written.deleting.keys().collect::<Vec<_>>(),
        ["DrainingNode"]
    );
    assert_eq!(written.deleting["DrainingNode"].machines, 1);
    assert!(written.hooks_waiting.is_empty(), "{written:?}");
}

#[test]
fn failed_eviction_is_retried_after_20s_and_never_earlier() {
    let _mark = crate::mark::check("eviction_retried_after_a_failure");
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    h.apply_status(&cmds);
    let pdb = "Cannot evict pod as it would violate the pod's disruption budget. \
               The disruption budget web needs 1 healthy pods and has 1 currently";
    let mut out = h.answer(&cmds[0], crate::testing::too_many_requests(pdb));
    out.extend(h.answer(&cmds[1], ApiOutcome::NotFound));
    let (c, _) = h.settle(&out);
    assert_eq!(
        deleting(&c).1,
        "Drain not completed yet (started at 2024-01-01T00:00:00Z):\n\
         * Pod app/web-0: cannot evict pod as it would violate the pod's disruption budget. \
         The disruption budget web needs 1 healthy pods and has 1 currently"
    );
    assert_eq!(h.engine.next_deadline(), Some(at(20)));

    // Other events do not add tries.
    h.now = at(5);
    let out = h.gone(pod_key("web-1"));
    assert!(all(&out, "Evict").is_empty(), "{:#?}", lines(&out));
    h.settle(&out);
    assert!(h.tick(at(19)).is_empty());

    let out = h.tick(at(20));
    assert_eq!(lines(&out), ["drain Evict Pod app/web-0@c1"]);
    assert!(
        out[0]
            .reason
            .starts_with("retrying eviction 20s after it failed")
    );
    // While the retry is unanswered, the condition keeps the last failure.
    let answered = h.ok(&out[0]);
    let c = last_conditions(&answered);
    assert!(
        deleting(&c).1.ends_with(
            "* Pod app/web-0: deletionTimestamp set, but still not removed from the Node"
        )
    );
}

/// A tick reports the timers it fired, by kind and the object they are about; the report is
/// not state (the hash is the same whether or not the engine carries one).
#[test]
fn a_tick_names_the_eviction_retry_it_fired() {
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    h.apply_status(&cmds);
    let out = h.answer(&cmds[0], crate::testing::too_many_requests("budget"));
    h.settle(&out);
    assert_eq!(h.engine.next_deadline(), Some(at(20)));
    assert!(h.tick(at(19)).is_empty());
    assert!(h.engine.fired_timers().is_empty());
    let out = h.tick(at(20));
    assert_eq!(lines(&out), ["drain Evict Pod app/web-0@c1"]);
    let fired: Vec<String> = h
        .engine
        .fired_timers()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(fired, ["EvictionRetry Pod app/web-0@c1"]);
    assert_eq!(h.engine.fired_timers()[0].owner, machine_key("m1"));
    assert_eq!(
        crate::timer::describe_fired(h.engine.fired_timers()),
        "timer EvictionRetry Pod app/web-0@c1"
    );
    let rebuilt = Engine::decode_state(&h.engine.encode_state()).unwrap();
    assert!(rebuilt.fired_timers().is_empty());
    assert_eq!(rebuilt.state_hash(), h.engine.state_hash());
    // The next input replaces the report.
    h.gone(pod_key("web-1"));
    assert!(h.engine.fired_timers().is_empty());
}

#[test]
fn eviction_failures_in_a_terminating_namespace_and_other_errors_are_grouped() {
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    h.apply_status(&cmds);
    let mut out = h.answer(&cmds[0], crate::testing::forbidden("forbidden", true));
    out.extend(h.answer(
        &cmds[1],
        ApiOutcome::Error {
            code: 500,
            message: "etcdserver: request timed out".into(),
        },
    ));
    let (c, _) = h.settle(&out);
    assert_eq!(
        deleting(&c).1,
        "Drain not completed yet (started at 2024-01-01T00:00:00Z):\n\
         * Pod app/web-0: failed to evict Pod, Cannot evict pod from terminating namespace: \
         unable to create eviction (kube-controller-manager should set deletionTimestamp)\n\
         * Pod app/web-1: failed to evict Pod, etcdserver: request timed out"
    );
}

#[test]
fn unreachable_node_evicts_with_grace_1s_and_skips_pods_deleted_more_than_1s_ago() {
    let mut n1 = node("n1");
    n1.conditions = vec![ready_condition(ConditionStatus::Unknown, T0)];
    let mut objects = world(deleting_m1());
    objects.retain(|(_, o)| !matches!(o, Object::Node(n) if n.meta.name == "n1"));
    objects.push((workload("c1"), Object::Node(n1)));
    // web-0 was deleted 5 s ago: it is skipped.
    objects.retain(|(_, o)| !matches!(o, Object::Pod(p) if p.meta.name == "web-0"));
    objects.push((workload("c1"), deleting_pod("web-0", at(-5))));
    let (mut h, cmds) = drained_start_from(objects);
    assert_eq!(
        lines(&cmds),
        [
            "drain Evict Pod app/web-1@c1",
            "deletion SetCondition Machine default/m1"
        ]
    );
    match &cmds[0].action {
        Action::Evict {
            grace_period_seconds,
            ..
        } => assert_eq!(*grace_period_seconds, Some(1)),
        _ => unreachable!(),
    }
    let out = h.ok(&cmds[0]);
    h.apply_status(&out);
    h.observe(workload("c1"), deleting_pod("web-1", at(0)));
    // 1.999 s after its deletion the pod is still waited for; at 2 s it is skipped.
    assert_eq!(h.engine.next_deadline(), Some(at(2)));
    let out = h.tick(at(2));
    assert!(
        lines(&out).contains(&"deletion DeleteInfrastructure DockerMachine default/m1".to_string()),
        "{:#?}",
        lines(&out)
    );
}

fn drained_start_from(objects: Vec<(Scope, Object)>) -> (Harness, Vec<Command>) {
    let (mut h, first) = Harness::start(objects);
    let mut cmds = h.apply_status(&first);
    cmds.extend(first);
    let cordon = find(&cmds, "Cordon").clone();
    let mut out = h.ok(&cordon);
    let mut n1 = match h.get(&node_key("n1")) {
        Object::Node(n) => n,
        _ => unreachable!(),
    };
    n1.unschedulable = true;
    out.extend(h.observe(workload("c1"), Object::Node(n1)));
    (h, out)
}

#[test]
fn drain_rules_order_evictions_and_wait_completed_pods_are_not_evicted() {
    let mut rule_late = MachineDrainRule {
        meta: meta("default", "a-late"),
        behavior: "Drain".into(),
        order: Some(10),
        machines: vec![],
        pods: vec![PodSelectorEntry {
            selector: Some(LabelSelector {
                match_labels: labels(&[("tier", "db")]),
                ..Default::default()
            }),
            namespace_selector: None,
        }],
    };
    rule_late.meta.namespace = "default".into();
    let mut db = pod("app", "db-0", "n1");
    db.meta.labels = labels(&[("tier", "db")]);
    let mut job = pod("app", "job-0", "n1");
    job.meta.labels = labels(&[(DRAIN_LABEL, "wait-completed")]);
    let (mut h, cmds) = drained_start(
        deleting_m1(),
        vec![
            (mgmt(), Object::MachineDrainRule(rule_late)),
            (workload("c1"), Object::Pod(db)),
            (workload("c1"), Object::Pod(job)),
        ],
    );
    assert_eq!(
        lines(&cmds),
        [
            "drain Evict Pod app/web-0@c1",
            "drain Evict Pod app/web-1@c1",
            "deletion SetCondition Machine default/m1"
        ]
    );
    let out = cmds.clone();
    assert_eq!(
        deleting(&last_conditions(&out)).1,
        "Drain not completed yet (started at 2024-01-01T00:00:00Z):\n\
         * Pods app/web-0, app/web-1: deletionTimestamp set, but still not removed from the Node\n\
         * Pod app/job-0: waiting for completion\n\
         After above Pods have been removed from the Node, the following Pods will be evicted: app/db-0"
    );
    h.apply_status(&out);
    h.gone(pod_key("web-0"));
    let out = h.gone(pod_key("web-1"));
    assert!(
        all(&out, "Evict").is_empty(),
        "job-0 still holds the lower order"
    );
    let out = h.gone(pod_key("job-0"));
    assert_eq!(all(&out, "Evict").len(), 1);
    assert_eq!(find(&out, "Evict").action.target().key, pod_key("db-0"));
}

#[test]
fn drain_timeout_skips_the_rest_of_the_drain() {
    let mut m1 = deleting_m1();
    m1.node_drain_timeout = Some(Duration::from_secs(30));
    let (mut h, cmds) = drained_start(m1, vec![]);
    let mut out = h.answer(&cmds[0], crate::testing::too_many_requests("pdb"));
    out.extend(h.answer(&cmds[1], crate::testing::too_many_requests("pdb")));
    h.apply_status(&out);
    let retries = h.tick(at(20));
    assert_eq!(all(&retries, "Evict").len(), 2);
    for r in &retries {
        h.answer(r, crate::testing::too_many_requests("pdb"));
    }
    assert!(h.tick(at(29)).is_empty());
    let out = h.tick(at(30));
    assert!(
        lines(&out).contains(&"deletion DeleteInfrastructure DockerMachine default/m1".to_string()),
        "{:#?}",
        lines(&out)
    );
}

#[test]
fn exclude_node_draining_annotation_skips_cordon_and_eviction() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(EXCLUDE_DRAIN_ANNOTATION.into(), String::new());
    let (_h, first) = Harness::start(world(m1));
    assert!(all(&first, "Cordon").is_empty());
    assert!(all(&first, "Evict").is_empty());
    assert_eq!(all(&first, "DeleteInfrastructure").len(), 1);
}

#[test]
fn volume_detach_waits_for_attached_volumes_and_wakes_on_change() {
    let mut n1 = node("n1");
    n1.volumes_attached = vec!["kubernetes.io/csi/csi.x^h1".into()];
    n1.unschedulable = true;
    let pv = PersistentVolume {
        meta: meta("", "pv1"),
        csi: Some(("csi.x".into(), "h1".into())),
        claim_ref: Some(ClaimRef {
            kind: "PersistentVolumeClaim".into(),
            namespace: "app".into(),
            name: "data".into(),
        }),
    };
    let mut objects = world(deleting_m1());
    objects.retain(|(_, o)| {
        !matches!(o, Object::Node(n) if n.meta.name == "n1") && !matches!(o, Object::Pod(_))
    });
    objects.push((workload("c1"), Object::Node(n1.clone())));
    objects.push((workload("c1"), Object::PersistentVolume(pv)));
    let (mut h, first) = Harness::start(objects);
    let c = last_conditions(&first);
    assert_eq!(
        deleting(&c),
        (
            "WaitingForVolumeDetach".into(),
            "Waiting for Node volumes to be detached (started at 2024-01-01T00:00:00Z)\n\
             * PersistentVolumeClaims: app/data"
                .into()
        )
    );
    assert_eq!(
        legacy(&c, "VolumeDetachSucceeded"),
        (
            ConditionStatus::False,
            "WaitingForVolumeDetach".into(),
            "Waiting for node volumes to be detached".into()
        )
    );
    assert!(all(&first, "DeleteInfrastructure").is_empty());
    h.apply_status(&first);
    h.now = at(5);
    n1.volumes_attached.clear();
    let out = h.observe(workload("c1"), Object::Node(n1));
    assert!(lines(&out).contains(&"deletion RecordEvent NodeVolumesDetached".to_string()));
    assert_eq!(all(&out, "DeleteInfrastructure").len(), 1);
}

#[test]
fn full_sequence_infrastructure_then_bootstrap_then_node_then_finalizer() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(EXCLUDE_DRAIN_ANNOTATION.into(), String::new());
    let (mut h, first) = Harness::start(world(m1));
    let del_infra = find(&first, "DeleteInfrastructure").clone();
    assert_eq!(
        del_infra.action.target().api_version,
        "infrastructure.cluster.x-k8s.io/v1beta2"
    );
    h.apply_status(&first);
    let out = h.ok(&del_infra);
    assert!(out.is_empty(), "{:#?}", lines(&out));
    // The provider marks it deleting, then it goes away.
    let mut infra = infra_machine("m1");
    infra.meta.deletion_timestamp = Some(at(1));
    assert!(h.observe(mgmt(), Object::External(infra)).is_empty());
    h.now = at(10);
    let out = h.gone(infra_key("m1"));
    assert_eq!(
        lines(&out),
        [
            "deletion DeleteBootstrap KubeadmConfig default/m1",
            "deletion SetCondition Machine default/m1"
        ]
    );
    let c = last_conditions(&out);
    assert_eq!(
        deleting(&c),
        (
            "WaitingForBootstrapDeletion".into(),
            "Waiting for KubeadmConfig to be deleted".into()
        )
    );
    assert_eq!(
        legacy(&c, "InfrastructureReady"),
        (ConditionStatus::False, "Deleted".into(), String::new())
    );
    h.apply_status(&out);
    h.ok(&out[0]);
    h.now = at(20);
    let out = h.gone(bootstrap_key("m1"));
    assert_eq!(
        lines(&out),
        [
            "deletion DeleteNode Node n1@c1",
            "deletion SetCondition Machine default/m1"
        ]
    );
    assert_eq!(
        legacy(&last_conditions(&out), "BootstrapReady"),
        (ConditionStatus::False, "Deleted".into(), String::new())
    );
    // While the Node deletion is in flight the Deleting condition keeps its last stage.
    assert_eq!(
        deleting(&last_conditions(&out)).0,
        "WaitingForBootstrapDeletion"
    );
    h.apply_status(&out);
    let out = h.ok(&out[0]);
    // `DeletionCompleted` is written first; the finalizer goes once that write has landed.
    assert_eq!(lines(&out), ["deletion SetCondition Machine default/m1"]);
    assert_eq!(
        deleting(&last_conditions(&out)),
        ("DeletionCompleted".into(), "Deletion completed".into())
    );
    let out = h.apply_status(&out);
    assert_eq!(lines(&out), ["deletion RemoveFinalizer Machine default/m1"]);
    match &out[0].action {
        Action::RemoveFinalizer { finalizer, target } => {
            assert_eq!(finalizer, "machine.cluster.x-k8s.io");
            assert_eq!(
                target,
                &Target {
                    key: machine_key("m1"),
                    api_version: "cluster.x-k8s.io/v1beta2".into()
                }
            );
        }
        _ => unreachable!(),
    }
    assert!(
        h.ok(&out[0]).is_empty(),
        "a released finalizer is not removed twice while the cache still shows the Machine"
    );
    h.gone(machine_key("m1"));
    assert_eq!(h.engine.controllers().deletion.tracked().count(), 0);
}

/// Infra and bootstrap gone already; m1 deleted at `deleted_at`; node deletion fails.
fn node_deletion_world(
    timeout: Option<Duration>,
    deleted_at: Timestamp,
) -> (Harness, Vec<Command>) {
    let mut m1 = deleting_m1();
    m1.meta.deletion_timestamp = Some(deleted_at);
    m1.node_deletion_timeout = timeout;
    m1.meta
        .annotations
        .insert(EXCLUDE_DRAIN_ANNOTATION.into(), String::new());
    let mut objects = world(m1);
    objects.retain(|(_, o)| !matches!(o, Object::External(e) if e.meta.name == "m1"));
    Harness::start(objects)
}

#[test]
fn node_deletion_gets_a_first_try_and_retries_every_2s_for_10s_with_the_default_timeout() {
    // Deleted an hour ago: the 10 s default timeout expired long before the Node's turn.
    let (mut h, first) = node_deletion_world(None, at(-3600));
    let del = find(&first, "DeleteNode").clone();
    h.apply_status(&first);
    let fail = || ApiOutcome::Error {
        code: 500,
        message: "connection refused".into(),
    };
    let out = h.answer(&del, fail());
    assert_eq!(
        lines(&out),
        [
            "deletion RecordEvent FailedDeleteNode",
            "deletion SetCondition Machine default/m1"
        ]
    );
    let c = last_conditions(&out);
    assert_eq!(
        deleting(&c),
        (
            "DeletingNode".into(),
            "Error deleting Node, please check controller logs for errors".into()
        )
    );
    assert_eq!(
        legacy(&c, "NodeHealthy"),
        (
            ConditionStatus::False,
            "DeletionFailed".into(),
            String::new()
        )
    );
    assert_eq!(c.legacy("NodeHealthy").unwrap().severity, Severity::Warning);
    h.apply_status(&out);
    let mut attempts = 1;
    for s in [2, 4, 6, 8] {
        assert_eq!(h.engine.next_deadline(), Some(at(s)));
        let out = h.tick(at(s));
        assert_eq!(lines(&out), ["deletion DeleteNode Node n1@c1"], "at {s}s");
        attempts += 1;
        assert!(
            h.answer(&out[0], fail()).is_empty(),
            "event once, same condition"
        );
    }
    let out = h.tick(at(10));
    assert_eq!(attempts, 5);
    assert!(all(&out, "DeleteNode").is_empty());
    let out = h.apply_status(&out);
    assert_eq!(all(&out, "RemoveFinalizer").len(), 1, "{:#?}", lines(&out));
}

#[test]
fn node_deletion_timeout_zero_retries_forever() {
    let (mut h, first) = node_deletion_world(Some(Duration::ZERO), at(-3600));
    let del = find(&first, "DeleteNode").clone();
    h.apply_status(&first);
    let out = h.answer(
        &del,
        ApiOutcome::Unreachable {
            message: "timeout".into(),
        },
    );
    h.apply_status(&out);
    let mut last = None;
    for s in (2..=60).step_by(2) {
        let out = h.tick(at(s));
        assert_eq!(lines(&out), ["deletion DeleteNode Node n1@c1"], "at {s}s");
        h.answer(
            &out[0],
            ApiOutcome::Unreachable {
                message: "timeout".into(),
            },
        );
        last = Some(s);
    }
    assert_eq!(last, Some(60));
}

#[test]
fn node_deletion_404_counts_as_success() {
    let _mark = crate::mark::check("not_found_answer_removes_the_object");
    let (mut h, first) = node_deletion_world(None, T0);
    let del = find(&first, "DeleteNode").clone();
    h.apply_status(&first);
    let out = h.answer(&del, ApiOutcome::NotFound);
    let out = h.apply_status(&out);
    assert_eq!(all(&out, "RemoveFinalizer").len(), 1);
}

/// The Machine as a real API server stores a condition write: times in whole seconds, a new
/// resourceVersion.
fn stored_by_the_server(h: &mut Harness, write: &Command) -> Machine {
    let Action::SetCondition { conditions, .. } = &write.action else {
        panic!("not a condition write: {write:?}");
    };
    let mut m = h.machine();
    m.conditions = conditions.clone();
    for c in m
        .conditions
        .current
        .iter_mut()
        .chain(&mut m.conditions.legacy)
    {
        c.last_transition_time = c.last_transition_time.map(Timestamp::to_api_precision);
    }
    h.rv += 1;
    m.meta.resource_version = h.rv;
    m
}

/// Bug 1 of the adapter-in-the-simulator issue: at a wall-clock time (milliseconds), the
/// `DeletionCompleted` write's watch event and its answer arrive together, in either order, or
/// the event first; the finalizer must go at once, not when something else touches the Machine.
#[test]
fn the_finalizer_goes_whatever_order_the_completed_write_and_its_event_arrive_in() {
    let orders: [&[&str]; 4] = [
        &["event", "result"],
        &["result", "event"],
        &["event+result"],
        &["result+event"],
    ];
    for order in orders {
        let (mut h, first) = node_deletion_world(None, T0);
        let del = find(&first, "DeleteNode").clone();
        h.apply_status(&first);
        h.now = T0.saturating_add(Duration(1_437));
        let out = h.answer(&del, ApiOutcome::NotFound);
        let completed = find(&out, "SetCondition").clone();
        assert_eq!(deleting(&last_conditions(&out)).0, "DeletionCompleted");
        let stored = stored_by_the_server(&mut h, &completed);
        h.now = T0.saturating_add(Duration(1_452));
        let event = || Input::Upsert {
            scope: mgmt(),
            object: Box::new(Object::Machine(stored.clone())),
        };
        let result = || Input::ApiResult {
            command: completed.id,
            outcome: ApiOutcome::Ok {
                object: Some(Box::new(Object::Machine(stored.clone()))),
            },
        };
        let mut issued = Vec::new();
        for step in order {
            let input = match *step {
                "event" => event(),
                "result" => result(),
                "event+result" => Input::batch(vec![event(), result()]),
                _ => Input::batch(vec![result(), event()]),
            };
            issued.extend(h.input(h.now, input));
        }
        assert_eq!(
            lines(&issued),
            ["deletion RemoveFinalizer Machine default/m1"],
            "order {order:?}"
        );
    }
}

/// Bug 2 of the adapter-in-the-simulator issue: the watch reports the Machine deleted before
/// the answer to the finalizer removal (or to an older write) arrives; an answer carrying the
/// Machine as it was must not bring it back, nor make the finalizer go twice.
#[test]
fn an_answer_arriving_after_the_deletion_was_observed_brings_nothing_back() {
    let _mark = crate::mark::check("released_object_not_brought_back");
    for stale_finalizers in [vec![MACHINE_FINALIZER.to_string()], vec![]] {
        let (mut h, first) = node_deletion_world(None, T0);
        let del = find(&first, "DeleteNode").clone();
        h.apply_status(&first);
        let out = h.answer(&del, ApiOutcome::NotFound);
        let out = h.apply_status(&out);
        let release = find(&out, "RemoveFinalizer").clone();
        let mut last_state = h.machine();
        last_state.meta.finalizers = stale_finalizers.clone();
        assert!(h.gone(machine_key("m1")).is_empty());
        let out = h.answer(
            &release,
            ApiOutcome::Ok {
                object: Some(Box::new(Object::Machine(last_state))),
            },
        );
        assert!(
            out.is_empty(),
            "finalizers {stale_finalizers:?}: {:#?}",
            lines(&out)
        );
        assert!(h.engine.store().get(&machine_key("m1")).is_none());
        assert_eq!(h.engine.controllers().deletion.tracked().count(), 0);
    }
}

#[test]
fn worker_without_an_active_control_plane_machine_skips_node_operations() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(format!("{PRE_DRAIN_HOOK_PREFIX}/x"), String::new());
    let mut objects = world(m1);
    objects.retain(|(_, o)| !matches!(o, Object::Machine(m) if m.meta.name == "cp-1"));
    let (_h, first) = Harness::start(objects);
    assert!(all(&first, "Cordon").is_empty());
    let infra = all(&first, "DeleteInfrastructure");
    assert_eq!(infra.len(), 1);
    // The reason says the Node was left alone and why, never that it was drained.
    assert_eq!(
        infra[0].reason,
        "Machine m1 is being deleted and its Node is neither drained nor deleted \
         (no control plane members): deleting DockerMachine m1"
    );
    let c = last_conditions(&first);
    assert!(
        c.legacy("PreDrainDeleteHookSucceeded").is_none(),
        "pre-drain hooks not consulted"
    );
}

#[test]
fn externally_managed_control_plane_allows_node_deletion_without_machines() {
    let mut cp = external(
        "controlplane.cluster.x-k8s.io",
        "AWSManagedControlPlane",
        "cp",
    );
    cp.external_managed_control_plane = true;
    let mut c1 = cluster("c1");
    c1.control_plane_ref = Some(ObjectRef {
        api_group: "controlplane.cluster.x-k8s.io".into(),
        api_version: None,
        kind: "AWSManagedControlPlane".into(),
        name: "cp".into(),
        namespace: String::new(),
    });
    let mut objects = world(deleting_m1());
    objects.retain(|(_, o)| {
        !matches!(o, Object::Machine(m) if m.meta.name == "cp-1")
            && !matches!(o, Object::Cluster(_))
    });
    objects.push((mgmt(), Object::Cluster(c1)));
    objects.push((mgmt(), Object::External(cp.clone())));
    let (mut h, first) = Harness::start(objects);
    assert_eq!(all(&first, "Cordon").len(), 1);
    // The control plane starts deleting: node operations stop (cordon already issued).
    h.apply_status(&first);
    cp.meta.deletion_timestamp = Some(at(1));
    let out = h.observe(mgmt(), Object::External(cp));
    assert_eq!(
        all(&out, "DeleteInfrastructure").len(),
        1,
        "{:#?}",
        lines(&out)
    );
}

#[test]
fn node_ref_is_found_by_provider_id_and_written_back() {
    let mut m1 = deleting_m1();
    m1.node_ref = None;
    m1.version = ApiVersion::V1Beta1;
    let mut objects = world(m1);
    for (_, o) in objects.iter_mut() {
        if let Object::Node(n) = o
            && n.meta.name == "n1"
        {
            n.provider_id = Some("sim://c1/m1".into());
        }
    }
    let (_h, first) = Harness::start(objects);
    let patch = find(&first, "PatchStatus");
    assert_eq!(
        patch.action.target().api_version,
        "cluster.x-k8s.io/v1beta1"
    );
    match &patch.action {
        Action::PatchStatus { merge, .. } => assert!(
            merge.0.contains(
                r#""nodeRef":{"apiVersion":"v1","kind":"Node","name":"n1","uid":"uid--n1"}"#
            ),
            "{}",
            merge.0
        ),
        _ => unreachable!(),
    }
    assert_eq!(find(&first, "Cordon").action.target().key, node_key("n1"));
}

#[test]
fn pre_terminate_hooks_hold_infrastructure_deletion_even_when_node_operations_are_skipped() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(format!("{PRE_TERMINATE_HOOK_PREFIX}/keep"), String::new());
    let mut c1 = cluster("c1");
    c1.meta.deletion_timestamp = Some(T0);
    let mut objects = world(m1);
    objects.retain(|(_, o)| !matches!(o, Object::Cluster(_)));
    objects.push((mgmt(), Object::Cluster(c1)));
    let (mut h, first) = Harness::start(objects);
    assert!(all(&first, "Cordon").is_empty());
    assert!(all(&first, "DeleteInfrastructure").is_empty());
    assert_eq!(
        deleting(&last_conditions(&first)),
        (
            "WaitingForPreTerminateHook".into(),
            "Waiting for pre-terminate hooks to succeed (hooks: \
             pre-terminate.delete.hook.machine.cluster.x-k8s.io/keep)"
                .into()
        )
    );
    h.apply_status(&first);
    let mut m = h.machine();
    m.meta.annotations.clear();
    let out = h.observe(mgmt(), Object::Machine(m));
    assert_eq!(all(&out, "DeleteInfrastructure").len(), 1);
}

#[test]
fn paused_cluster_or_machine_does_nothing() {
    let mut c1 = cluster("c1");
    c1.paused = true;
    let mut objects = world(deleting_m1());
    objects.retain(|(_, o)| !matches!(o, Object::Cluster(_)));
    objects.push((mgmt(), Object::Cluster(c1.clone())));
    let (mut h, first) = Harness::start(objects);
    assert!(first.is_empty(), "{:#?}", lines(&first));
    // Unpausing starts the deletion.
    c1.paused = false;
    let out = h.observe(mgmt(), Object::Cluster(c1));
    assert_eq!(all(&out, "Cordon").len(), 1);

    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(PAUSED_ANNOTATION.into(), "true".into());
    let (_h, first) = Harness::start(world(m1));
    assert!(first.is_empty(), "{:#?}", lines(&first));
}

#[test]
fn reconciling_again_with_nothing_changed_issues_nothing() {
    let (mut h, cmds) = drained_start(deleting_m1(), vec![]);
    let mut out = h.ok(&cmds[0]);
    out.extend(h.ok(&cmds[1]));
    h.apply_status(&out);
    // Unrelated inputs (a readiness flip, a Tick, a relist of the same objects).
    let mut web0 = pod("app", "web-0", "n1");
    web0.ready = false;
    assert!(h.observe(workload("c1"), Object::Pod(web0)).is_empty());
    assert!(h.tick(at(1)).is_empty());
    let objects: Vec<Object> = h
        .engine
        .store()
        .iter_scope(&workload("c1"))
        .map(|(_, o)| o.clone())
        .collect();
    let out = h.input(at(2), crate::testing::listed(workload("c1"), objects));
    assert!(out.is_empty(), "{:#?}", lines(&out));
}

#[test]
fn invalid_drain_rule_selector_fails_the_drain_with_upstream_messages() {
    let rule = MachineDrainRule {
        meta: meta("default", "broken"),
        behavior: "Drain".into(),
        order: None,
        machines: vec![MachineSelectorEntry {
            selector: Some(LabelSelector {
                invalid: Some("bad".into()),
                ..Default::default()
            }),
            cluster_selector: None,
        }],
        pods: vec![],
    };
    let (_h, out) = drained_start(
        deleting_m1(),
        vec![(mgmt(), Object::MachineDrainRule(rule))],
    );
    assert!(all(&out, "Evict").is_empty());
    let c = last_conditions(&out);
    assert_eq!(
        deleting(&c),
        (
            "DrainingNode".into(),
            "Error draining Node, please check controller logs for errors".into()
        )
    );
    assert_eq!(
        legacy(&c, "DrainingSucceeded"),
        (
            ConditionStatus::False,
            "DrainingFailed".into(),
            "failed to get Pods for eviction: failed to get matching MachineDrainRules: \
             invalid selectors in MachineDrainRule broken"
                .into()
        )
    );
    assert!(lines(&out).contains(&"deletion RecordEvent FailedDrainNode".to_string()));
}

#[test]
fn a_machine_that_is_not_deleting_is_left_alone() {
    let (h, first) = Harness::start(world(machine("c1", "m1", Some("n1"))));
    assert!(first.is_empty());
    assert_eq!(h.engine.controllers().deletion.tracked().count(), 0);
}

#[test]
fn a_machine_without_the_finalizer_gets_it_first_unless_paused() {
    let mut m1 = machine("c1", "m1", Some("n1"));
    m1.meta.finalizers.clear();
    let (_, first) = Harness::start(world(m1.clone()));
    assert_eq!(lines(&first), ["deletion AddFinalizer Machine default/m1"]);
    match &first[0].action {
        Action::AddFinalizer { finalizer, .. } => assert_eq!(finalizer, MACHINE_FINALIZER),
        _ => unreachable!(),
    }
    m1.meta
        .annotations
        .insert(PAUSED_ANNOTATION.into(), String::new());
    let (_, paused) = Harness::start(world(m1));
    assert!(paused.is_empty(), "{:#?}", lines(&paused));
}

#[test]
fn reference_keys_are_kept_while_they_match_and_rebuilt_when_the_reference_changes() {
    let r = ObjectRef {
        api_group: String::new(),
        api_version: Some("infrastructure.cluster.x-k8s.io/v1beta1".into()),
        kind: "DockerMachine".into(),
        name: "m1".into(),
        namespace: String::new(),
    };
    let mut key = r.key_in("default");
    let kept = key.clone();
    super::refresh_ref_key(&mut key, &r, "default");
    assert!(
        std::ptr::eq(&*key, &*kept),
        "an unchanged reference keeps its key"
    );
    for changed in [
        ObjectRef {
            name: "m2".into(),
            ..r.clone()
        },
        ObjectRef {
            kind: "AWSMachine".into(),
            ..r.clone()
        },
        ObjectRef {
            api_version: Some("other.example.com/v1".into()),
            ..r.clone()
        },
        ObjectRef {
            namespace: "elsewhere".into(),
            ..r.clone()
        },
    ] {
        let mut k = kept.clone();
        super::refresh_ref_key(&mut k, &changed, "default");
        assert_eq!(k, changed.key_in("default"));
        assert_ne!(k, kept);
    }
    // Kind::is agrees with from_group_kind for known and provider kinds.
    for (group, kind) in [
        ("", "Node"),
        ("cluster.x-k8s.io", "Machine"),
        ("infrastructure.cluster.x-k8s.io", "DockerMachine"),
    ] {
        let k = Kind::from_group_kind(group, kind);
        assert!(k.is(group, kind));
        assert!(!k.is("elsewhere.io", kind));
    }
}

const BAD_TIME: &str = "status.conditions[0].lastTransitionTime: \"yesterday\" is not a time";

fn replace_with_unreadable(objects: &mut [(Scope, Object)], kind: Kind, name: &str) {
    for (_, o) in objects.iter_mut() {
        if o.kind() == kind && o.meta().name == name {
            let namespace = o.meta().namespace.clone();
            *o = unreadable(kind.clone(), &namespace, name, BAD_TIME);
        }
    }
}

fn destructive(commands: &[Command]) -> Vec<String> {
    lines(commands)
        .into_iter()
        .filter(|l| {
            [
                "Cordon",
                "Evict",
                "DeleteInfrastructure",
                "DeleteBootstrap",
                "DeleteNode",
                "RemoveFinalizer",
            ]
            .iter()
            .any(|a| l.contains(&format!(" {a} ")))
        })
        .collect()
}

#[test]
fn an_unreadable_node_holds_the_deletion_with_a_condition_and_a_warning() {
    let mut objects = world(deleting_m1());
    replace_with_unreadable(&mut objects, Kind::Node, "n1");
    let (mut h, first) = Harness::start(objects);
    assert_eq!(destructive(&first), Vec::<String>::new());
    let message = "Node n1 in cluster default/c1 cannot be read: status.conditions[0].lastTransitionTime: \"yesterday\" is not a time; the deletion waits until it can be read";
    let warning = find(&first, "RecordEvent");
    match &warning.action {
        Action::RecordEvent {
            type_,
            reason,
            message: m,
            ..
        } => {
            assert_eq!(
                (*type_, reason.as_str(), m.as_str()),
                (EventType::Warning, "ObjectUnreadable", message)
            );
        }
        _ => unreachable!(),
    }
    let c = last_conditions(&first);
    assert_eq!(deleting(&c), ("ObjectUnreadable".into(), message.into()));
    let (_, later) = h.settle(&first);
    assert_eq!(destructive(&later), Vec::<String>::new());
    // Time alone changes nothing, and the warning is not repeated.
    let out = h.tick(at(3600));
    assert!(
        destructive(&out).is_empty() && all(&out, "RecordEvent").is_empty(),
        "{:#?}",
        lines(&out)
    );

    // Readable again: the drain starts where it would have.
    let out = h.observe(workload("c1"), Object::Node(node("n1")));
    assert_eq!(destructive(&out), ["drain Cordon Node n1@c1"]);
}

#[test]
fn an_unreadable_machine_or_provider_object_holds_the_deletion() {
    for (kind, name) in [
        (Kind::Machine, "m1"),
        (infra_key("m1").kind.clone(), "m1"),
        (bootstrap_key("m1").kind.clone(), "m1"),
    ] {
        let mut m1 = deleting_m1();
        m1.meta
            .annotations
            .insert(EXCLUDE_DRAIN_ANNOTATION.into(), String::new());
        let (mut h, first) = Harness::start(world(m1));
        assert!(!destructive(&first).is_empty(), "{:#?}", lines(&first));
        h.settle(&first);
        let out = h.observe(mgmt(), unreadable(kind.clone(), "default", name, BAD_TIME));
        assert!(destructive(&out).is_empty(), "{kind:?}: {:#?}", lines(&out));
        assert_eq!(
            all(&out, "RecordEvent").len(),
            1,
            "{kind:?}: {:#?}",
            lines(&out)
        );
        if kind == Kind::Machine {
            // Its own status is not written from a reading it distrusts: the event says it.
            assert!(all(&out, "SetCondition").is_empty(), "{:#?}", lines(&out));
        } else {
            assert_eq!(
                deleting(&last_conditions(&out)).0,
                "ObjectUnreadable",
                "{kind:?}"
            );
        }
        // Time alone changes nothing.
        let out = h.tick(at(3600));
        assert!(destructive(&out).is_empty(), "{kind:?}: {:#?}", lines(&out));
    }
}

#[test]
fn an_unreadable_pod_holds_the_drain_of_its_node() {
    let mut objects = world(deleting_m1());
    replace_with_unreadable(&mut objects, Kind::Pod, "web-1");
    let mut n1 = node("n1");
    n1.unschedulable = true;
    for (_, o) in objects.iter_mut() {
        if let Object::Node(n) = o
            && n.meta.name == "n1"
        {
            *n = n1.clone();
        }
    }
    let (mut h, first) = Harness::start(objects);
    let (c, later) = h.settle(&first);
    let all_commands: Vec<Command> = first.iter().cloned().chain(later).collect();
    assert!(
        all(&all_commands, "DeleteInfrastructure").is_empty(),
        "{:#?}",
        lines(&all_commands)
    );
    let (reason, message) = deleting(&c);
    assert_eq!(reason, "ObjectUnreadable");
    assert!(
        message.starts_with("Pod app/web-1 in cluster default/c1 cannot be read"),
        "{message}"
    );
}

#[test]
fn a_node_never_seen_holds_the_drain_until_it_is_seen_or_listed() {
    let mut objects = world(machine("c1", "m1", Some("n1")));
    objects.push((mgmt(), Object::External(infra_machine("m2"))));
    let (mut h, first) = Harness::start(objects);
    h.settle(&first);
    // m2's nodeRef (and its deletion) arrive before the workload watch delivers Node n2.
    let mut m2 = machine("c1", "m2", Some("n2"));
    m2.meta.deletion_timestamp = Some(at(1));
    let out = h.observe(mgmt(), Object::Machine(m2));
    assert_eq!(destructive(&out), Vec::<String>::new());
    let (reason, message) = deleting(&last_conditions(&out));
    assert_eq!(
        (reason.as_str(), message.as_str()),
        (
            "DrainingNode",
            "Waiting for Node n2 to appear in the workload cluster's cache"
        )
    );
    let out = h.observe(workload("c1"), Object::Node(node("n2")));
    assert_eq!(destructive(&out), ["drain Cordon Node n2@c1"]);
}

#[test]
fn a_negative_timeout_is_reported_once_and_times_nothing() {
    let mut m1 = deleting_m1();
    m1.node_drain_timeout = Some(Duration::from_secs(-600));
    m1.node_deletion_timeout = Some(Duration::from_secs(-1));
    let (mut h, first) = Harness::start(world(m1));
    let warnings: Vec<String> = first
        .iter()
        .filter_map(|c| match &c.action {
            Action::RecordEvent {
                type_: EventType::Warning,
                reason,
                message,
                ..
            } => Some(format!("{reason}: {message}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        warnings,
        [
            "InvalidTimeout: spec.deletion.nodeDrainTimeoutSeconds is -10m0s: a negative timeout is invalid and times nothing (no wait is cut short, no Node deletion given up)",
            "InvalidTimeout: spec.deletion.nodeDeletionTimeoutSeconds is -1s: a negative timeout is invalid and times nothing (no wait is cut short, no Node deletion given up)",
        ]
    );
    // The drain is not skipped as timed out.
    assert_eq!(destructive(&first), ["drain Cordon Node n1@c1"]);
    let (_, later) = h.settle(&first);
    assert!(all(&later, "RecordEvent").iter().all(|c| !matches!(
        &c.action,
        Action::RecordEvent { reason, .. } if reason == "InvalidTimeout"
    )));
    assert!(crate::deletion::gates::keep_deleting_node(
        T0,
        T0,
        Some(Duration::from_secs(-1)),
        at(3600)
    ));
}

/// Found over the management watches: a Machine can reach the cache before its
/// infrastructure object (each kind is its own watch). Not in the cache is not gone: the
/// deletion asks the API to delete it and goes on only when the API says it is gone.
#[test]
fn an_infrastructure_object_not_yet_in_the_cache_is_deleted_through_the_api_not_counted_gone() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(EXCLUDE_DRAIN_ANNOTATION.into(), String::new());
    let listed: Vec<(Scope, Object)> = world(m1.clone())
        .into_iter()
        .filter(|(_, o)| o.meta().name != "m1")
        .collect();
    let (mut h, _) = Harness::start(listed);
    // m1 arrives after the list; its DockerMachine has not arrived (yet).
    let mut others = h.observe(mgmt(), Object::Machine(m1));
    let (conditions, later) = h.settle(&others);
    others.extend(later);
    let delete = find(&others, "DeleteInfrastructure").clone();
    assert_eq!(delete.action.target().key, infra_key("m1"));
    assert_eq!(
        delete.action.target().api_version,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "the version of the cached DockerMachines"
    );
    assert_eq!(
        deleting(&conditions),
        (
            "WaitingForInfrastructureDeletion".into(),
            "Waiting for DockerMachine to be deleted (DockerMachine m1 has not reached the cache \
             yet; the API was asked to delete it)"
                .into()
        )
    );
    assert!(
        all(&others, "DeleteBootstrap").is_empty() && all(&others, "RemoveFinalizer").is_empty(),
        "{:#?}",
        lines(&others)
    );
    // The API says it is gone: now it is, and the deletion goes on.
    let out = h.answer(&delete, ApiOutcome::NotFound);
    assert_eq!(
        lines(&out),
        [
            "deletion DeleteBootstrap KubeadmConfig default/m1",
            "deletion SetCondition Machine default/m1"
        ]
    );
}

/// The same absence after a list of the management cluster that followed the Machine is
/// news: the object is gone, as upstream's live read would say.
#[test]
fn an_infrastructure_object_a_later_list_does_not_show_is_gone() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(EXCLUDE_DRAIN_ANNOTATION.into(), String::new());
    let objects: Vec<(Scope, Object)> = world(m1)
        .into_iter()
        .filter(|(_, o)| !(o.meta().name == "m1" && matches!(o, Object::External(_))))
        .collect();
    let (mut h, mut others) = Harness::start(objects);
    let (_, later) = h.settle(&others.clone());
    others.extend(later);
    assert!(
        all(&others, "DeleteInfrastructure").is_empty(),
        "{:#?}",
        lines(&others)
    );
    assert_eq!(
        all(&others, "DeleteNode").len(),
        1,
        "infrastructure and bootstrap are gone: on to the Node {:#?}",
        lines(&others)
    );
}

/// A phase that lasts 10 minutes gets one Warning event naming what holds it (here the hooks),
/// at the 10-minute mark by its own timer, not before and not again.
#[test]
fn a_hook_held_for_ten_minutes_gets_one_warning_naming_it() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(format!("{PRE_DRAIN_HOOK_PREFIX}/migrate"), "owner".into());
    let (mut h, first) = Harness::start(world(m1));
    h.settle(&first);
    let warnings = |out: &[Command]| -> Vec<String> {
        out.iter()
            .filter_map(|c| match &c.action {
                Action::RecordEvent {
                    type_: EventType::Warning,
                    reason,
                    message,
                    ..
                } => Some(format!("{reason}: {message}")),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        h.engine.next_deadline(),
        Some(at(600)),
        "the stall has its own timer"
    );
    assert!(warnings(&h.tick(at(599))).is_empty());
    assert_eq!(
        warnings(&h.tick(at(600))),
        [
            "PreDrainHookWaiting: Machine m1 has been in WaitingForPreDrainHook for 10m0s: \
          Waiting for pre-drain hooks to succeed (hooks: pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate)"
        ]
    );
    assert!(warnings(&h.tick(at(1800))).is_empty(), "once per phase");
}

/// The stall clock runs for the phase, not for its condition's reason: an infrastructure
/// deletion that keeps failing (its `Deleting` reason turns `InternalError`) is the phase that
/// stalls, and gets its Warning ten minutes after the phase began.
#[test]
fn a_failing_infrastructure_deletion_is_a_phase_that_stalls() {
    let mut m1 = deleting_m1();
    m1.meta
        .annotations
        .insert(EXCLUDE_DRAIN_ANNOTATION.into(), String::new());
    let (mut h, first) = Harness::start(world(m1));
    let del_infra = find(&first, "DeleteInfrastructure").clone();
    h.settle(&first);
    h.now = at(30);
    let failed = ApiOutcome::Error {
        code: 500,
        message: "the provider's webhook is down".into(),
    };
    let out = h.answer(&del_infra, failed);
    let (conditions, _) = h.settle(&out);
    assert_eq!(deleting(&conditions).0, "InternalError");
    let warnings = |out: &[Command]| -> Vec<String> {
        out.iter()
            .filter_map(|c| match &c.action {
                Action::RecordEvent {
                    type_: EventType::Warning,
                    reason,
                    ..
                } => Some(reason.clone()),
                _ => None,
            })
            .collect()
    };
    assert!(!warnings(&h.tick(at(599))).contains(&"InfrastructureDeletionStalled".into()));
    assert!(
        warnings(&h.tick(at(600))).contains(&"InfrastructureDeletionStalled".into()),
        "the phase began at 0"
    );
}

/// A deleting Machine whose clusterName is corrected is tracked under its real cluster: the
/// old (never synced) cluster's cache no longer holds its deletion back.
#[test]
fn a_machine_whose_cluster_name_is_corrected_is_deleted_in_its_real_cluster() {
    let mut wrong = deleting_m1();
    wrong.cluster_name = "c2".into();
    let (mut h, first) = Harness::start(world(wrong));
    assert!(destructive(&first).is_empty(), "{:#?}", lines(&first));
    let out = h.observe(mgmt(), Object::Machine(deleting_m1()));
    assert_eq!(destructive(&out), ["drain Cordon Node n1@c1"]);
}

/// The drained world with m1's memory bent by `corrupt`; the next input touching m1 (its
/// watch event) checks it.
fn corrupted(corrupt: impl FnOnce(&mut super::MachineDeletion)) {
    let mut h = evicted_start();
    corrupt(&mut h.engine.controllers_mut().deletion);
    let m1 = h.machine();
    h.observe(mgmt(), Object::Machine(m1));
}

fn m1_memo(deletion: &mut super::MachineDeletion) -> &mut super::Memo {
    &mut deletion
        .machines
        .get_mut(&machine_key("m1"))
        .expect("m1 is tracked")
        .memo
}

#[test]
fn the_checks_pass_on_an_uncorrupted_deletion() {
    corrupted(|_| {});
}

#[test]
#[should_panic(expected = "deleting Machine Machine default/m1: eviction of")]
fn an_eviction_remembered_as_issued_in_the_future_fails_the_check() {
    corrupted(|d| {
        for attempt in m1_memo(d).evictions.values_mut() {
            *attempt = crate::drain::EvictionAttempt::Evicted { at: at(3600) };
        }
    });
}

#[test]
#[should_panic(expected = "Node deletion first tried at")]
fn node_deletion_attempts_out_of_order_fail_the_check() {
    corrupted(|d| {
        m1_memo(d).node_deletion = Some(super::NodeDeletion {
            first_at: at(2),
            last_at: at(1),
            outcome: super::NodeDeletionOutcome::Pending,
        });
    });
}

#[test]
#[should_panic(expected = "asked at")]
fn a_cordon_asked_in_the_future_fails_the_check() {
    corrupted(|d| {
        m1_memo(d).cordon = Some(super::Attempt::Succeeded { at: at(3600) });
    });
}

#[test]
#[should_panic(expected = "not routed: under its cluster true, under Node Some(\"n1\") false")]
fn a_machine_missing_from_its_nodes_routing_fails_the_check() {
    corrupted(|d| d.by_node.clear());
}

#[test]
fn an_attempt_keeps_its_failure_while_it_is_retried() {
    use super::Attempt;
    let first = Attempt::requested(None, at(1));
    assert_eq!(
        (first.at(), first.is_answered(), first.failure()),
        (at(1), false, None)
    );
    let mut failed = first.clone();
    failed.answer(Some("forbidden".to_string()));
    assert_eq!(
        failed,
        Attempt::Failed {
            at: at(1),
            failure: "forbidden".to_string()
        }
    );
    assert!(failed.is_answered());
    // The retry shows the last failure until its own answer comes back.
    let mut retry = Attempt::requested(Some(&failed), at(6));
    assert_eq!(
        (retry.at(), retry.is_answered(), retry.failure()),
        (at(6), false, Some("forbidden"))
    );
    retry.answer(None);
    assert_eq!(retry, Attempt::Succeeded { at: at(6) });
    assert_eq!(retry.failure(), None);
    assert_eq!(
        Attempt::requested(Some(&retry), at(7)).failure(),
        None,
        "a success leaves no failure to show"
    );
}

#[test]
fn a_pending_write_stands_until_the_cache_shows_it() {
    use super::{Landing, Pending};
    let mut unanswered = Pending::new(2_u32);
    assert!(unanswered.stands(&1, 10), "not answered: still on its way");
    assert!(
        !unanswered.stands(&2, 10),
        "observed: nothing stands for it"
    );
    assert_eq!(unanswered.landing, Landing::Unanswered);

    let mut with_version = Pending::new(2_u32);
    with_version.answered(Some(12));
    assert!(
        with_version.stands(&1, 11),
        "the cache is older than the write"
    );
    assert!(
        !with_version.stands(&1, 12),
        "the cache shows the write's version"
    );

    let mut without_version = Pending::new(2_u32);
    without_version.answered(None);
    assert!(
        without_version.stands(&1, 20),
        "first look after the answer"
    );
    assert_eq!(
        without_version.landing,
        Landing::Answered {
            landed_resource_version: Some(21)
        }
    );
    assert!(!without_version.stands(&1, 21), "anything newer shows it");
}

/// m1 deleting in a world whose drain kinds were never listed: the first list of c1 as
/// the intake delivers it while no Machine of c1 was being deleted (Nodes only).
fn drain_kinds_unlisted() -> (Harness, Vec<Command>) {
    let objects: Vec<(Scope, Object)> = world(deleting_m1())
        .into_iter()
        .filter(|(_, o)| !Kind::DRAIN_ONLY.contains(&o.kind()))
        .collect();
    let mut engine = Engine::new();
    let mut by_scope: BTreeMap<Scope, Vec<Object>> = BTreeMap::new();
    for (scope, object) in objects {
        by_scope.entry(scope).or_default().push(object);
    }
    for (scope, objects) in by_scope {
        engine.handle(T0, Input::Relist { scope, objects });
    }
    let commands = drain_commands(&mut engine);
    let h = Harness {
        engine,
        now: T0,
        rv: 100,
    };
    (h, commands)
}

#[test]
fn a_drain_waits_for_its_kinds_to_be_listed_and_their_absence_is_not_an_empty_node() {
    let (mut h, first) = drain_kinds_unlisted();
    // No pod listed is not "no pod": nothing is cordoned, evicted or deleted yet. The phase is
    // written; the conditions wait for the drain (a condition in flight would hold its first).
    assert_eq!(destructive(&first), Vec::<String>::new());
    let written: Vec<&str> = first.iter().map(|c| c.action.name()).collect();
    assert_eq!(written, ["PatchStatus"], "{:?}", lines(&first));
    let (_, first) = h.settle(&first);
    assert!(first.is_empty(), "{:?}", lines(&first));
    let mut out = Vec::new();
    for kind in Kind::DRAIN_ONLY {
        let objects = world(deleting_m1())
            .into_iter()
            .filter(|(_, o)| o.kind() == kind)
            .map(|(_, o)| o)
            .collect();
        assert_eq!(destructive(&out), Vec::<String>::new(), "before {kind:?}");
        out = h.input(
            T0,
            Input::RelistKind {
                scope: workload("c1"),
                kind,
                objects,
            },
        );
    }
    assert_eq!(destructive(&out), ["drain Cordon Node n1@c1"]);
}

#[test]
fn an_unwatched_kind_is_forgotten_not_deleted() {
    let (mut h, _) = Harness::start(world(machine("c1", "m1", Some("n1"))));
    let w = workload("c1");
    assert!(h.engine.store().kind_listed(&w, &Kind::Pod));
    let out = h.input(
        T0,
        Input::Unwatched {
            scope: w.clone(),
            kind: Kind::Pod,
        },
    );
    assert!(out.is_empty(), "{:?}", lines(&out));
    let store = h.engine.store();
    assert!(!store.kind_listed(&w, &Kind::Pod));
    assert_eq!(store.iter_kind(&w, &Kind::Pod).count(), 0);
    assert_eq!(store.pods_on_node(&w, "n1").count(), 0);
    // The other kinds stay as they were.
    assert!(store.kind_listed(&w, &Kind::Namespace));
    assert_eq!(store.iter_kind(&w, &Kind::Node).count(), 2);
    // Deleted now, m1 waits for the pods to be listed again.
    let out = h.observe(mgmt(), Object::Machine(deleting_m1()));
    assert_eq!(destructive(&out), Vec::<String>::new());
    let pods = world(deleting_m1())
        .into_iter()
        .filter(|(_, o)| o.kind() == Kind::Pod)
        .map(|(_, o)| o)
        .collect();
    let out = h.input(
        T0,
        Input::RelistKind {
            scope: w,
            kind: Kind::Pod,
            objects: pods,
        },
    );
    assert_eq!(destructive(&out), ["drain Cordon Node n1@c1"]);
}

fn c1_unreachable(reason: Option<crate::connection::Unreachable>) -> Input {
    Input::ClusterUnreachable {
        scope: workload("c1"),
        reason,
    }
}

fn events(commands: &[Command]) -> Vec<(String, String)> {
    commands
        .iter()
        .filter_map(|c| match &c.action {
            Action::RecordEvent {
                type_: EventType::Warning,
                reason,
                message,
                ..
            } => Some((reason.clone(), message.clone())),
            _ => None,
        })
        .collect()
}

/// Found by the kubeconfig wait (issue 26): a deletion held for a workload cluster whose
/// kubeconfig Secret is missing said nothing at all (a log line every 5 s).
#[test]
fn a_deletion_waiting_for_an_unreachable_cluster_says_why_once_per_reason_then_goes_on() {
    use crate::connection::Unreachable;
    let (management, workload_objects): (Vec<_>, Vec<_>) = world(deleting_m1())
        .into_iter()
        .partition(|(s, _)| *s == mgmt());
    // Only the management cluster is listed: c1 never connected.
    let (mut h, first) = Harness::start(management);
    assert_eq!(lines(&first), Vec::<String>::new(), "nothing to say yet");

    let out = h.input(T0, c1_unreachable(Some(Unreachable::SecretMissing)));
    let message = "cannot reach workload cluster default/c1: its kubeconfig Secret \
                   default/c1-kubeconfig is missing; the deletion waits until it can be reached \
                   (the Node's drain and deletion need its API)";
    assert_eq!(
        events(&out),
        [(
            "WorkloadClusterUnreachable".to_string(),
            message.to_string()
        )]
    );
    let (conditions, others) = h.settle(&out);
    assert_eq!(
        deleting(&conditions),
        ("WorkloadClusterUnreachable".into(), message.into())
    );
    assert_eq!(h.machine().phase.as_deref(), Some("Deleting"));
    assert!(events(&others).is_empty(), "{:#?}", lines(&others));
    // Nothing destructive, and nothing again while the reason stays: not at a later pass of
    // the Machine (a change of its own), not at a tick.
    assert!(out.iter().all(|c| !c.action.is_destructive()));
    let mut m1 = h.machine();
    m1.meta.labels.insert("touched".into(), "yes".into());
    let again = h.observe(mgmt(), Object::Machine(m1));
    assert_eq!(lines(&again), Vec::<String>::new());
    let again = h.tick(at(600));
    assert_eq!(lines(&again), Vec::<String>::new());

    // A new reason: the condition and one more event say so.
    let out = h.input(at(601), c1_unreachable(Some(Unreachable::NoValue)));
    assert_eq!(events(&out).len(), 1);
    let (conditions, _) = h.settle(&out);
    assert!(
        deleting(&conditions).1.contains("has no key \"value\""),
        "{conditions:?}"
    );

    // Connected: the condition no longer blames the Secret while the cache syncs.
    let out = h.input(at(602), c1_unreachable(None));
    let (conditions, others) = h.settle(&out);
    assert_eq!(
        deleting(&conditions),
        (
            "Deleting".into(),
            "Waiting for the cache of workload cluster default/c1 to sync".into()
        )
    );
    assert!(events(&others).is_empty());
    // Listed: the drain starts.
    let out = h.input(
        at(603),
        listed(
            workload("c1"),
            workload_objects.into_iter().map(|(_, o)| o).collect(),
        ),
    );
    let mut all = out.clone();
    all.extend(h.apply_status(&out));
    find(&all, "Cordon");
}

/// A Machine that does not need the workload cluster (no Node, no providerID) is not held by
/// it, and says nothing of it.
#[test]
fn a_deletion_that_needs_no_workload_cluster_says_nothing_of_it() {
    use crate::connection::Unreachable;
    let mut m1 = machine("c1", "m1", None);
    m1.provider_id = None;
    m1.meta.deletion_timestamp = Some(T0);
    let mut infra = infra_machine("m1");
    infra.provider_id = None;
    let objects = vec![
        (mgmt(), Object::Cluster(cluster("c1"))),
        (mgmt(), Object::Machine(m1)),
        (mgmt(), Object::External(infra)),
        (mgmt(), Object::External(bootstrap_config("m1"))),
    ];
    let (mut h, first) = Harness::start(objects);
    find(&first, "DeleteInfrastructure");
    let out = h.input(T0, c1_unreachable(Some(Unreachable::SecretMissing)));
    assert!(events(&out).is_empty(), "{:#?}", lines(&out));
}

/// Found over HTTP: at a start, the connector of a Cluster the watch has just reported fails
/// before the management list is complete, so the reason is journaled before the Cluster and
/// the Machine are in the cache. It is kept, and the Machine the list brings says why.
#[test]
fn a_reason_journaled_before_the_management_list_is_kept_for_what_the_list_brings() {
    use crate::connection::Unreachable;
    let mut engine = Engine::new();
    engine.handle(T0, Input::Restarted);
    engine.handle(T0, c1_unreachable(Some(Unreachable::SecretMissing)));
    assert_eq!(drain_commands(&mut engine), Vec::<Command>::new());
    let management = world(deleting_m1())
        .into_iter()
        .filter(|(s, _)| *s == mgmt())
        .map(|(_, o)| o)
        .collect();
    engine.handle(
        T0,
        Input::Relist {
            scope: mgmt(),
            objects: management,
        },
    );
    let out = drain_commands(&mut engine);
    assert_eq!(
        events(&out).first().map(|(reason, _)| reason.as_str()),
        Some("WorkloadClusterUnreachable"),
        "{:#?}",
        lines(&out)
    );
    assert_eq!(
        engine.store().unreachable(&workload("c1")),
        Some(&Unreachable::SecretMissing)
    );
}

/// Takeover: the engine told first that it runs beside CAPI's manager, then the world listed.
fn takeover_start(objects: Vec<(Scope, Object)>) -> (Harness, Vec<Command>) {
    let mut engine = Engine::new();
    engine.handle(T0, Input::Ownership(crate::ownership::Ownership::Takeover));
    let (engine, commands) = synced(engine, T0, objects);
    let h = Harness {
        engine,
        now: T0,
        rv: 100,
    };
    (h, commands)
}

fn of_machine_set(mut m: Machine) -> Machine {
    m.meta.owner_references.push(OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "MachineSet".into(),
        name: "ms1".into(),
        uid: "u-ms1".into(),
        controller: true,
    });
    m
}

/// Hooked as this build hooks a Machine: both hooks and the annotation naming their holder.
fn with_own_hooks(mut m: Machine) -> Machine {
    for hook in [
        crate::ownership::OWN_PRE_DRAIN_HOOK,
        crate::ownership::OWN_PRE_TERMINATE_HOOK,
    ] {
        m.meta.annotations.insert(hook.into(), "lifecycle".into());
    }
    let held_by = crate::ownership::hooks_held_by(&m.meta.namespace, &m.meta.name);
    m.meta
        .annotations
        .insert(crate::ownership::HOOKS_HELD_BY_ANNOTATION.into(), held_by);
    m
}

fn capi_deleting(mut m: Machine, reason: &str) -> Machine {
    set_condition(
        &mut m.conditions.current,
        Condition::new("Deleting", ConditionStatus::True, reason, ""),
        T0,
    );
    m
}

/// Hooks left behind by a takeover hold CAPI's manager, never this controller: alone, it
/// drains as if they were not there.
#[test]
fn an_alone_deletion_never_waits_for_this_controllers_own_hooks() {
    let (_, first) = Harness::start(world(with_own_hooks(deleting_m1())));
    assert_eq!(destructive(&first), ["drain Cordon Node n1@c1"]);
}

/// Taken over, a deletion waits until CAPI's manager waits at one of this controller's hooks,
/// then drains; it writes neither CAPI's conditions nor its status nor the finalizer.
#[test]
fn a_taken_over_deletion_acts_only_while_capi_waits_at_its_hooks() {
    let m1 = with_own_hooks(of_machine_set(deleting_m1()));
    let (mut h, first) = takeover_start(world(m1.clone()));
    assert!(destructive(&first).is_empty(), "{:#?}", lines(&first));
    let own = find(&first, "SetOwnCondition");
    let Action::SetOwnCondition { conditions, .. } = &own.action else {
        unreachable!()
    };
    let reason = &conditions
        .current(crate::ownership::OWN_CONDITION)
        .unwrap()
        .reason;
    assert_eq!(reason, "WaitingForClusterAPI");
    let out = h.observe(
        mgmt(),
        Object::Machine(capi_deleting(m1, "WaitingForPreDrainHook")),
    );
    assert_eq!(destructive(&out), ["drain Cordon Node n1@c1"]);
    for c in first.iter().chain(&out) {
        assert!(
            !matches!(
                c.action,
                Action::SetCondition { .. }
                    | Action::PatchStatus { .. }
                    | Action::RemoveFinalizer { .. }
                    | Action::AddFinalizer { .. }
            ),
            "CAPI's to write: {c}"
        );
    }
}

/// Takeover hooks MachineSets' Machines before they are deleted: never a control plane's,
/// never one already deleting (left to CAPI's manager).
#[test]
fn takeover_hooks_only_machine_sets_machines_not_yet_deleting() {
    let mut objects = world(of_machine_set(deleting_m1()));
    let mut m2 = of_machine_set(machine("c1", "m2", None));
    m2.meta.resource_version = 7;
    objects.push((mgmt(), Object::Machine(m2)));
    let (_, first) = takeover_start(objects);
    let hooked: Vec<String> = all(&first, "PatchSpec")
        .iter()
        .map(|c| c.action.target().key.name.to_string())
        .collect();
    assert_eq!(hooked, ["m2"]);
    let Action::PatchSpec { merge, .. } = &find(&first, "PatchSpec").action else {
        unreachable!()
    };
    assert_eq!(
        merge.to_value()["metadata"]["resourceVersion"],
        "7",
        "a Machine deleted meanwhile is not hooked"
    );
    assert!(destructive(&first).is_empty(), "{:#?}", lines(&first));
}

#[test]
fn own_machines_selects_what_takeover_hooks_and_unhooks_what_it_no_longer_owns() {
    let labelled = |mut m: Machine, pool: &str| {
        m.meta.labels.insert("pool".into(), pool.into());
        m
    };
    let mut objects = world(with_own_hooks(of_machine_set(labelled(
        deleting_m1(),
        "green",
    ))));
    for m in [
        labelled(machine("c1", "standalone-blue", None), "blue"),
        of_machine_set(labelled(machine("c1", "ms-green", None), "green")),
        with_own_hooks(of_machine_set(labelled(
            machine("c1", "was-ours", None),
            "green",
        ))),
        labelled(control_plane_machine("c1", "cp-blue", None), "blue"),
    ] {
        objects.push((mgmt(), Object::Machine(m)));
    }
    let mut engine = Engine::new();
    engine.handle(T0, Input::Ownership(crate::ownership::Ownership::Takeover));
    let blue = crate::model::LabelSelector::parse("pool=blue").unwrap();
    engine.handle(T0, Input::OwnMachines(Some(blue)));
    let (_, commands) = synced(engine, T0, objects);
    let patches: Vec<(String, serde_json::Value)> = all(&commands, "PatchSpec")
        .iter()
        .map(|c| {
            let Action::PatchSpec { merge, .. } = &c.action else {
                unreachable!()
            };
            let annotations = merge.to_value()["metadata"]["annotations"].clone();
            (c.action.target().key.name.to_string(), annotations)
        })
        .collect();
    let hooks = |value: serde_json::Value, held_by: serde_json::Value| {
        serde_json::json!({
            crate::ownership::OWN_PRE_DRAIN_HOOK: value,
            crate::ownership::OWN_PRE_TERMINATE_HOOK: value,
            crate::ownership::HOOKS_HELD_BY_ANNOTATION: held_by,
        })
    };
    let blue_held_by = crate::ownership::hooks_held_by("default", "standalone-blue");
    assert_eq!(
        patches,
        [
            (
                "standalone-blue".to_string(),
                hooks("lifecycle".into(), blue_held_by.into())
            ),
            (
                "was-ours".to_string(),
                hooks(serde_json::Value::Null, serde_json::Value::Null)
            ),
        ],
        "selected without a MachineSet: hooked; a MachineSet's unselected: left to CAPI, its old \
         hooks removed; a control plane's: never; a deleting Machine keeps its hooks"
    );
}

#[test]
fn a_released_machine_own_condition_says_capi_has_it_and_nothing_else_changes() {
    use crate::ownership::{OWN_CONDITION, own_reason, released_conditions};
    let mut m = capi_deleting(deleting_m1(), "WaitingForPreDrainHook");
    assert_eq!(
        released_conditions(&m, T0),
        None,
        "no own condition: nothing to say"
    );
    set_condition(
        &mut m.conditions.current,
        Condition::new(
            OWN_CONDITION,
            ConditionStatus::True,
            "DrainingNode",
            "draining",
        ),
        T0,
    );
    let later = T0 + Duration::from_secs(90);
    let released = released_conditions(&m, later).expect("it told a deletion under way");
    let own = released.current(OWN_CONDITION).unwrap();
    assert_eq!(
        (own.status, own.reason.as_str(), own.last_transition_time),
        (
            ConditionStatus::False,
            own_reason::RELEASED_TO_CLUSTER_API,
            Some(later.to_api_precision())
        )
    );
    assert_eq!(
        released.current("Deleting"),
        m.conditions.current("Deleting"),
        "CAPI's own condition as read"
    );
    m.conditions = released;
    assert_eq!(released_conditions(&m, later), None, "released once");
}

#[test]
fn an_unsupported_capi_release_stops_takeover_hooking_and_hands_back_what_is_not_deleting() {
    use crate::ownership::{CapiRelease, ReleaseSupport};
    let mut objects = world(with_own_hooks(of_machine_set(deleting_m1())));
    for m in [
        of_machine_set(machine("c1", "new", None)),
        with_own_hooks(of_machine_set(machine("c1", "held", None))),
    ] {
        objects.push((mgmt(), Object::Machine(m)));
    }
    let release = |support| {
        Input::CapiRelease(CapiRelease {
            release: "v1.15.0".to_string(),
            support,
        })
    };
    let hook_patches = |commands: &[Command]| -> Vec<(String, serde_json::Value, String)> {
        all(commands, "PatchSpec")
            .iter()
            .map(|c| {
                let Action::PatchSpec { merge, .. } = &c.action else {
                    unreachable!()
                };
                let value = merge.to_value()["metadata"]["annotations"]
                    [crate::ownership::OWN_PRE_DRAIN_HOOK]
                    .clone();
                (
                    c.action.target().key.name.to_string(),
                    value,
                    c.reason.clone(),
                )
            })
            .collect()
    };
    for (support, expected) in [
        (
            ReleaseSupport::Unknown,
            vec![("new", serde_json::json!("lifecycle"))],
        ),
        (
            ReleaseSupport::Unsupported,
            vec![("held", serde_json::Value::Null)],
        ),
    ] {
        let mut engine = Engine::new();
        engine.handle(T0, Input::Ownership(crate::ownership::Ownership::Takeover));
        engine.handle(T0, release(support));
        let (_, commands) = synced(engine, T0, objects.clone());
        let patches = hook_patches(&commands);
        let found: Vec<(&str, serde_json::Value)> = patches
            .iter()
            .map(|(name, value, _)| (name.as_str(), value.clone()))
            .collect();
        assert_eq!(
            found, expected,
            "{support:?}: an unknown release changes nothing; an unsupported one hooks nothing \
             new, takes the hooks off a Machine not deleting, and leaves the deleting m1's on \
             (it finishes it)"
        );
        if support == ReleaseSupport::Unsupported {
            assert!(
                patches[0].2.contains(
                    "runs v1.15.0, a release this build of the controller does not support"
                ),
                "{}",
                patches[0].2
            );
            let told: Vec<&str> = all(&commands, "RecordEvent")
                .iter()
                .filter_map(|c| match &c.action {
                    Action::RecordEvent {
                        regarding, reason, ..
                    } if regarding.key.name == "held" => Some(reason.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(
                told,
                [crate::ownership::HANDED_BACK_EVENT],
                "said on the Machine"
            );
            let m1 = commands
                .iter()
                .filter(|c| c.action.target().key.name == "m1")
                .count();
            assert!(m1 > 0, "the deletion it holds goes on: {commands:#?}");
            let told_m1: Vec<&str> = commands
                .iter()
                .filter(|c| c.action.target().key.name == "m1")
                .filter_map(|c| match &c.action {
                    Action::SetOwnCondition { conditions, .. } => conditions
                        .current(crate::ownership::OWN_CONDITION)
                        .map(|own| own.message.as_str()),
                    Action::RecordEvent {
                        reason, message, ..
                    } if reason == crate::ownership::HANDED_BACK_EVENT => Some(message.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(told_m1.len(), 2, "its condition and an Event: {told_m1:?}");
            for told in told_m1 {
                assert!(
                    told.contains(
                        "runs v1.15.0, a release this build of the controller does not support"
                    ) && told.contains("hands it back with its last hook"),
                    "the deletion it finishes says why and what comes: {told}"
                );
            }
        }
    }
}

/// What `lifecycle run` logs, captured from the `tracing` lines of `f`.
fn logged(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
}

/// Found beside CAPI's manager: handing a deletion back (its pre-drain hook removed) was logged
/// as `Deletion completed, removing finalizer`, which it is not: CAPI's manager keeps the
/// finalizer. The log says which hook goes.
#[test]
fn a_hook_removed_in_takeover_is_logged_as_a_hook_removed_not_a_finalizer() {
    let mut m1 = machine("c1", "m1", None);
    m1.meta.deletion_timestamp = Some(T0);
    let m1 = capi_deleting(with_own_hooks(of_machine_set(m1)), "WaitingForPreDrainHook");
    let mut first = Vec::new();
    let log = logged(|| first = takeover_start(world(m1)).1);
    let removal = find(&first, "PatchSpec");
    assert!(
        removal
            .to_string()
            .contains(crate::ownership::OWN_PRE_DRAIN_HOOK),
        "no Node to drain: the pre-drain hook goes at once: {removal}"
    );
    assert!(!log.contains("removing finalizer"), "{log}");
    assert!(
        log.lines().any(
            |l| l.contains("removing hook") && l.contains(crate::ownership::OWN_PRE_DRAIN_HOOK)
        ),
        "{log}"
    );
}

/// Takeover, an idle worker fought over: another writer takes its pre-drain hook off each time
/// this controller puts it back. The third undo within five minutes holds the writes to it and
/// gives it back at once: its other hook and the holder annotation go in one write, the one
/// that passes the hold, with a Warning `HandedBackToClusterAPI`. Nothing more is written while
/// the hold stands, even when the other writer puts this controller's hooks back (a stale
/// manifest; that the same hand-back never passes twice is
/// `controller::tests::a_write_giving_back_a_held_machine_passes_the_hold_once`), and without
/// hooks it is never hooked again over 40 minutes however the other writer changes it.
#[test]
fn a_worker_fought_over_in_takeover_is_handed_back_once_and_not_hooked_again() {
    let m1 = with_own_hooks(of_machine_set(machine("c1", "m1", None)));
    let (mut h, first) = takeover_start(world(m1.clone()));
    assert!(all(&first, "PatchSpec").is_empty(), "hooked already");
    let patches = |commands: &[Command]| -> Vec<serde_json::Value> {
        all(commands, "PatchSpec")
            .iter()
            .map(|c| match &c.action {
                Action::PatchSpec { merge, .. } => {
                    merge.to_value()["metadata"]["annotations"].clone()
                }
                _ => unreachable!(),
            })
            .collect()
    };
    let stripped = |m: &Machine| {
        let mut m = m.clone();
        m.meta
            .annotations
            .remove(crate::ownership::OWN_PRE_DRAIN_HOOK);
        m
    };
    let mut t = 0;
    let mut hand_back = Vec::new();
    // The first strip undoes no write of this controller's (the hooks were there before it):
    // the second, third and fourth undo one each.
    for strip in 1..=4 {
        t += 20;
        h.now = at(t);
        let commands = h.observe(mgmt(), Object::Machine(stripped(&m1)));
        if strip < 4 {
            let put_back = all(&commands, "PatchSpec");
            assert_eq!(patches(&commands).len(), 1, "strip {strip}: put back");
            let mut landed = m1.clone();
            h.rv += 1;
            landed.meta.resource_version = h.rv;
            h.answer(
                put_back[0],
                ApiOutcome::Ok {
                    object: Some(Box::new(Object::Machine(landed))),
                },
            );
        } else {
            hand_back = commands;
        }
    }
    let held_by = crate::ownership::hooks_held_by("default", "m1");
    assert_eq!(
        patches(&hand_back),
        [serde_json::json!({
            crate::ownership::OWN_PRE_TERMINATE_HOOK: null,
            crate::ownership::HOOKS_HELD_BY_ANNOTATION: null,
        })],
        "the third undo holds and gives it back in one write: {:#?}",
        lines(&hand_back)
    );
    let told: Vec<&str> = all(&hand_back, "RecordEvent")
        .iter()
        .filter_map(|c| match &c.action {
            Action::RecordEvent { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        told,
        [
            crate::fight::EVENT_REASON,
            crate::ownership::HANDED_BACK_EVENT
        ]
    );
    let given_back = all(&hand_back, "PatchSpec");
    h.ok(given_back[0]);
    // The other writer puts the old manifest back, hooks and all, while the hold stands.
    let mut stale = m1.clone();
    stale.meta.annotations.insert(
        crate::ownership::HOOKS_HELD_BY_ANNOTATION.into(),
        held_by.clone(),
    );
    h.now = at(t + 30);
    let again = h.observe(mgmt(), Object::Machine(stale));
    assert!(patches(&again).is_empty(), "{:#?}", lines(&again));
    // Given back, with neither hook: never hooked again, whatever changes, for 40 minutes.
    let mut unhooked = stripped(&m1);
    unhooked
        .meta
        .annotations
        .remove(crate::ownership::OWN_PRE_TERMINATE_HOOK);
    unhooked
        .meta
        .annotations
        .remove(crate::ownership::HOOKS_HELD_BY_ANNOTATION);
    for minute in 2..=42 {
        h.now = at(t + 60 * minute);
        let mut later = h.tick(at(t + 60 * minute));
        unhooked
            .meta
            .labels
            .insert("tick".into(), minute.to_string());
        later.extend(h.observe(mgmt(), Object::Machine(unhooked.clone())));
        assert!(
            patches(&later).is_empty(),
            "minute {minute}: {:#?}",
            lines(&later)
        );
    }
}
