//! Engine-level tests: drive `Engine::handle` with a tiny fake API that applies the health
//! controller's writes, and assert the exact commands.

use crate::Engine;
use crate::command::{Action, Command};
use crate::input::{ApiOutcome, Input};
use crate::model::*;
use crate::testing::{self, drain_commands, synced_engine, workload};
use crate::time::{Duration, Timestamp};

/// 2024-01-01T00:00:00Z.
const T0: Timestamp = Timestamp(1_704_067_200_000);

fn at(offset: Duration) -> Timestamp {
    T0.saturating_add(offset)
}

fn mins(m: i64) -> Duration {
    Duration::from_mins(m)
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(s)
}

/// A Node whose `Ready` condition has `status` since `since`.
fn node(name: &str, status: ConditionStatus, since: Timestamp) -> Node {
    let mut n = testing::node(name);
    n.conditions = vec![NodeCondition {
        type_: "Ready".to_string(),
        status,
        reason: if status == ConditionStatus::True {
            "KubeletReady"
        } else {
            "KubeletDown"
        }
        .to_string(),
        message: String::new(),
        last_transition_time: Some(since),
    }];
    n
}

fn machine(name: &str) -> Machine {
    testing::machine("c1", name, Some(name))
}

fn owned_machine(name: &str, created: Timestamp) -> Machine {
    let mut m = machine(name);
    m.meta.creation_timestamp = Some(created);
    testing::controlled_by(&mut m.meta, "MachineSet", "ms");
    m
}

fn objects(
    mhc: MachineHealthCheck,
    machines: Vec<Machine>,
    nodes: Vec<Node>,
) -> Vec<(Scope, Object)> {
    let mut out = vec![
        (
            Scope::Management,
            Object::Cluster(testing::ready_cluster("c1")),
        ),
        (Scope::Management, Object::MachineHealthCheck(mhc)),
    ];
    out.extend(
        machines
            .into_iter()
            .map(|m| (Scope::Management, Object::Machine(m))),
    );
    out.extend(nodes.into_iter().map(|n| (workload("c1"), Object::Node(n))));
    // A Node no Machine names, so the workload cluster is relisted (synced) in every test.
    out.push((
        workload("c1"),
        Object::Node(node("spare", ConditionStatus::True, T0)),
    ));
    out
}

/// `controller Action Target detail`, without the command id.
fn line(c: &Command) -> String {
    let s = c.to_string();
    s.split_once(' ')
        .map(|(_, rest)| rest.to_string())
        .unwrap_or(s)
}

fn lines(cs: &[Command]) -> Vec<String> {
    cs.iter().map(line).collect()
}

fn bump(meta: &mut ObjectMeta) {
    meta.resource_version += 1;
}

/// The fake API's answer to one command (and the object it changed).
fn answer(engine: &Engine, now: Timestamp, c: &Command) -> (ApiOutcome, Option<ObjectKey>) {
    let store = engine.store();
    let ok = |o: Object| ApiOutcome::Ok {
        object: Some(Box::new(o)),
    };
    match &c.action {
        Action::SetCondition {
            target, conditions, ..
        } => match store.get(&target.key).cloned() {
            Some(Object::Machine(mut m)) => {
                m.conditions = conditions.clone();
                bump(&mut m.meta);
                (ok(Object::Machine(m)), None)
            }
            Some(Object::MachineHealthCheck(mut h)) => {
                h.conditions = conditions.clone();
                bump(&mut h.meta);
                (ok(Object::MachineHealthCheck(h)), None)
            }
            _ => (ApiOutcome::NotFound, None),
        },
        Action::PatchStatus { target, merge, .. } => match store.get(&target.key).cloned() {
            Some(Object::MachineHealthCheck(mut h)) => {
                let v = merge.to_value();
                let s = &v["status"];
                let int = |k: &str, old: Option<i32>| {
                    s.get(k).and_then(|x| x.as_i64()).map(|x| x as i32).or(old)
                };
                h.status.expected_machines = int("expectedMachines", h.status.expected_machines);
                h.status.current_healthy = int("currentHealthy", h.status.current_healthy);
                h.status.remediations_allowed =
                    int("remediationsAllowed", h.status.remediations_allowed);
                if let Some(t) = s.get("targets").and_then(|t| t.as_array()) {
                    h.status.targets = t
                        .iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect();
                }
                bump(&mut h.meta);
                (ok(Object::MachineHealthCheck(h)), None)
            }
            // The deletion controller's status writes on a Machine: accepted, not modelled here.
            Some(_) => (ApiOutcome::Ok { object: None }, None),
            None => (ApiOutcome::NotFound, None),
        },
        Action::DeleteMachine { target } => match store.get(&target.key).cloned() {
            Some(Object::Machine(mut m)) => {
                m.meta.deletion_timestamp.get_or_insert(now);
                bump(&mut m.meta);
                (ok(Object::Machine(m)), None)
            }
            _ => (ApiOutcome::NotFound, None),
        },
        Action::CreateRemediation { target, object } => {
            let v = object.to_value();
            let Kind::External(gk) = target.key.kind.clone() else {
                unreachable!()
            };
            let mut e =
                testing::external(&gk.group, &gk.kind, v["metadata"]["name"].as_str().unwrap());
            e.api_version = v["apiVersion"].as_str().unwrap().to_string();
            (ok(Object::External(e)), None)
        }
        Action::DeleteRemediation { target } => {
            (ApiOutcome::Ok { object: None }, Some(target.key.clone()))
        }
        _ => (ApiOutcome::Ok { object: None }, None),
    }
}

/// Executes `commands` against the fake API until the engine issues nothing more; returns
/// every command executed, in order.
fn settle(engine: &mut Engine, now: Timestamp, mut commands: Vec<Command>) -> Vec<Command> {
    let mut all = Vec::new();
    for _ in 0..50 {
        if commands.is_empty() {
            return all;
        }
        let mut next = Vec::new();
        for c in commands {
            let (outcome, gone) = answer(engine, now, &c);
            engine.handle(
                now,
                Input::ApiResult {
                    command: c.id,
                    outcome,
                },
            );
            if let Some(key) = gone {
                engine.handle(now, Input::Delete { key });
            }
            next.extend(drain_commands(engine));
            all.push(c);
        }
        commands = next;
    }
    panic!("the engine did not settle: {:#?}", lines(&commands));
}

fn machine_of(engine: &Engine, name: &str) -> Machine {
    match engine
        .store()
        .get(&ObjectKey::management(Kind::Machine, "default", name))
    {
        Some(Object::Machine(m)) => m.clone(),
        other => panic!("no machine {name}: {other:?}"),
    }
}

fn mhc_of(engine: &Engine) -> MachineHealthCheck {
    match engine.store().get(&ObjectKey::management(
        Kind::MachineHealthCheck,
        "default",
        "mhc",
    )) {
        Some(Object::MachineHealthCheck(m)) => m.clone(),
        other => panic!("no mhc: {other:?}"),
    }
}

fn upsert(engine: &mut Engine, now: Timestamp, scope: Scope, object: Object) -> Vec<Command> {
    engine.handle(
        now,
        Input::Upsert {
            scope,
            object: Box::new(object),
        },
    );
    drain_commands(engine)
}

#[test]
fn healthy_targets_are_marked_and_counted() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let world = objects(
        mhc,
        vec![machine("m1"), machine("m2")],
        vec![
            node("m1", ConditionStatus::True, T0),
            node("m2", ConditionStatus::True, T0),
        ],
    );
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    assert_eq!(
        lines(&first),
        [
            "health SetCondition Machine default/m1 HealthCheckSucceeded=True (HealthCheckSucceeded), HealthCheckSucceeded=True",
            "health SetCondition Machine default/m2 HealthCheckSucceeded=True (HealthCheckSucceeded), HealthCheckSucceeded=True",
            "health PatchStatus MachineHealthCheck default/mhc expectedMachines=2 currentHealthy=2 remediationsAllowed=2",
            "health SetCondition MachineHealthCheck default/mhc RemediationAllowed=True (RemediationAllowed), RemediationAllowed=True",
        ]
    );
    let PatchStatusJson(status) = patch_status(&first[2]);
    assert_eq!(
        status,
        serde_json::json!({"status": {"expectedMachines": 2, "currentHealthy": 2, "remediationsAllowed": 2, "targets": ["m1", "m2"]}})
    );
    let executed = settle(&mut engine, at(mins(1)), first);
    assert_eq!(executed.len(), 4, "writes land once and bring nothing new");
    assert_eq!(
        engine.next_deadline(),
        None,
        "healthy targets need no timer"
    );
    // Idempotent: a Tick with nothing due and a repeated observation issue nothing.
    engine.handle(at(mins(2)), Input::Tick);
    assert!(drain_commands(&mut engine).is_empty());
    let again = machine_of(&engine, "m1");
    assert!(
        upsert(
            &mut engine,
            at(mins(2)),
            Scope::Management,
            Object::Machine(again)
        )
        .is_empty()
    );
}

struct PatchStatusJson(serde_json::Value);

fn patch_status(c: &Command) -> PatchStatusJson {
    match &c.action {
        Action::PatchStatus { merge, .. } => PatchStatusJson(merge.to_value()),
        other => panic!("not a PatchStatus: {other:?}"),
    }
}

fn set_condition(c: &Command) -> &Conditions {
    match &c.action {
        Action::SetCondition { conditions, .. } => conditions,
        other => panic!("not a SetCondition: {other:?}"),
    }
}

#[test]
fn node_condition_timeout_is_remediated_within_one_second_of_expiry() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let mut m1 = owned_machine("m1", T0);
    m1.version = ApiVersion::V1Beta1;
    let world = objects(
        mhc,
        vec![m1, machine("m2")],
        vec![
            node("m1", ConditionStatus::False, at(mins(1))),
            node("m2", ConditionStatus::True, T0),
        ],
    );
    let (mut engine, first) = synced_engine(at(mins(2)), world);
    // m1 is pending: not healthy, no verdict yet; the MHC wakes at 1m + 5m + 1s.
    assert_eq!(
        lines(&first),
        [
            "health SetCondition Machine default/m2 HealthCheckSucceeded=True (HealthCheckSucceeded), HealthCheckSucceeded=True",
            "health PatchStatus MachineHealthCheck default/mhc expectedMachines=2 currentHealthy=1 remediationsAllowed=1",
            "health SetCondition MachineHealthCheck default/mhc RemediationAllowed=True (RemediationAllowed), RemediationAllowed=True",
        ]
    );
    settle(&mut engine, at(mins(2)), first);
    let deadline = at(mins(6) + secs(1));
    assert_eq!(engine.next_deadline(), Some(deadline));
    engine.handle(deadline, Input::Tick);
    let tick = drain_commands(&mut engine);
    assert_eq!(
        lines(&tick),
        [
            "health SetCondition Machine default/m1 HealthCheckSucceeded=False (UnhealthyNode), OwnerRemediated=False (WaitingForRemediation)",
            "health RecordEvent Machine default/m1 Normal MachineMarkedUnhealthy: Machine default/m1 has been marked as unhealthy by default/mhc",
        ],
        "counts are unchanged (pending and unhealthy both count against currentHealthy)"
    );
    assert_eq!(
        tick[0].action.target().api_version,
        "cluster.x-k8s.io/v1beta1"
    );
    let c = set_condition(&tick[0]);
    let hcs = c.current("HealthCheckSucceeded").unwrap();
    assert_eq!(
        hcs.message,
        "Health check failed:\n  * Condition Ready on Node is reporting status False with reason KubeletDown for more than 5m0s"
    );
    assert_eq!(hcs.last_transition_time, Some(deadline));
    let legacy = c.legacy("HealthCheckSucceeded").unwrap();
    assert_eq!(
        (
            legacy.reason.as_str(),
            legacy.message.as_str(),
            legacy.severity
        ),
        (
            "UnhealthyNode",
            "Condition Ready on Node is reporting status False with reason KubeletDown for more than 5m0s",
            Severity::Warning
        )
    );
    let owner = c.current("OwnerRemediated").unwrap();
    assert_eq!(
        (owner.reason.as_str(), owner.message.as_str()),
        ("WaitingForRemediation", "Waiting for remediation")
    );
    assert_eq!(
        c.legacy("OwnerRemediated").unwrap().severity,
        Severity::Warning
    );
}

#[test]
fn owner_remediation_closes_the_loop_through_the_machine_set() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let world = {
        let mut w = objects(
            mhc,
            vec![owned_machine("m1", T0), owned_machine("m2", T0)],
            vec![node("m2", ConditionStatus::True, T0)],
        );
        w.push((
            Scope::Management,
            Object::MachineSet(testing::machine_set("c1", "ms", 2)),
        ));
        w
    };
    // m1's Node is gone: unhealthy at once.
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    let executed = settle(&mut engine, at(mins(1)), first);
    let executed = lines(&executed);
    let expected = [
        "health SetCondition Machine default/m1 HealthCheckSucceeded=False (NodeDeleted), HealthCheckSucceeded=False (NodeNotFound), OwnerRemediated=False (WaitingForRemediation)",
        "health RecordEvent Machine default/m1 Normal MachineMarkedUnhealthy: Machine default/m1 has been marked as unhealthy by default/mhc",
        "remediation SetCondition Machine default/m1 OwnerRemediated=False (MachineDeleting), OwnerRemediated=True",
        "remediation DeleteMachine Machine default/m1",
    ];
    for e in expected {
        assert!(
            executed.iter().any(|l| l == e),
            "missing {e:?} in {executed:#?}"
        );
    }
    let pos = |s: &str| executed.iter().position(|l| l == s).unwrap();
    assert!(pos(expected[2]) < pos(expected[3]), "marked before deleted");
    let m1 = machine_of(&engine, "m1");
    assert!(m1.meta.is_deleting());
    assert_eq!(
        m1.conditions.current("OwnerRemediated").unwrap().message,
        "Machine is deleting"
    );
    assert_eq!(
        executed
            .iter()
            .filter(|l| l.contains("DeleteMachine"))
            .count(),
        1,
        "deleted exactly once"
    );
}

#[test]
fn max_in_flight_defers_remediations_beyond_the_limit() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.max_unhealthy = Some(IntOrString::Int(3));
    let mut ms = testing::machine_set("c1", "ms", 3);
    testing::controlled_by(&mut ms.meta, "MachineDeployment", "md");
    let mut md = testing::machine_deployment("c1", "md", 3);
    md.remediation_max_in_flight = Some(IntOrString::Int(1));
    let mut w = objects(
        mhc,
        vec![
            owned_machine("m1", T0),
            owned_machine("m2", at(secs(5))),
            owned_machine("m3", T0),
        ],
        vec![node("m3", ConditionStatus::True, T0)],
    );
    w.push((Scope::Management, Object::MachineSet(ms)));
    w.push((Scope::Management, Object::MachineDeployment(md)));
    let (mut engine, first) = synced_engine(at(mins(1)), w);
    let executed = lines(&settle(&mut engine, at(mins(1)), first));
    // The newest (m2) goes first; m1 waits.
    assert!(
        executed.contains(&"remediation DeleteMachine Machine default/m2".to_string()),
        "{executed:#?}"
    );
    assert!(
        !executed
            .iter()
            .any(|l| l == "remediation DeleteMachine Machine default/m1"),
        "{executed:#?}"
    );
    let m1 = machine_of(&engine, "m1");
    let c = m1.conditions.current("OwnerRemediated").unwrap();
    assert_eq!(c.reason, "RemediationDeferred");
    assert_eq!(
        c.message,
        "Waiting because there are already too many remediations in progress (spec.strategy.remediation.maxInFlight is 1)"
    );
    // Once m2 is gone, m1's turn comes.
    engine.handle(
        at(mins(2)),
        Input::Delete {
            key: ObjectKey::management(Kind::Machine, "default", "m2"),
        },
    );
    let next = drain_commands(&mut engine);
    let executed = lines(&settle(&mut engine, at(mins(2)), next));
    assert!(
        executed.contains(&"remediation DeleteMachine Machine default/m1".to_string()),
        "{executed:#?}"
    );
}

#[test]
fn short_circuit_reports_once_writes_only_health_and_keeps_its_clock() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.max_unhealthy = Some(IntOrString::String("40%".to_string()));
    let world = objects(
        mhc,
        vec![
            owned_machine("m1", T0),
            owned_machine("m2", T0),
            machine("m3"),
            machine("m4"),
        ],
        vec![
            node("m1", ConditionStatus::False, T0),
            node("m2", ConditionStatus::False, T0),
            node("m3", ConditionStatus::True, T0),
            node("m4", ConditionStatus::False, at(mins(8))),
        ],
    );
    let (mut engine, first) = synced_engine(at(mins(10)), world);
    let message = "Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy (total: 4, unhealthy: 2, maxUnhealthy: 40%)";
    assert_eq!(
        lines(&first),
        [
            "health SetCondition Machine default/m1 HealthCheckSucceeded=False (UnhealthyNode)".to_string(),
            "health SetCondition Machine default/m2 HealthCheckSucceeded=False (UnhealthyNode)".to_string(),
            "health SetCondition Machine default/m3 HealthCheckSucceeded=True (HealthCheckSucceeded), HealthCheckSucceeded=True".to_string(),
            "health PatchStatus MachineHealthCheck default/mhc expectedMachines=4 currentHealthy=1 remediationsAllowed=0".to_string(),
            "health SetCondition MachineHealthCheck default/mhc RemediationAllowed=False (TooManyUnhealthy)".to_string(),
            format!("health RecordEvent MachineHealthCheck default/mhc Warning RemediationRestricted: {message}"),
        ]
    );
    let c = set_condition(&first[4]);
    assert_eq!(c.current("RemediationAllowed").unwrap().message, message);
    assert_eq!(
        c.legacy("RemediationAllowed").unwrap().severity,
        Severity::Warning
    );
    settle(&mut engine, at(mins(10)), first);
    // m4 (Ready=False since 8m) is due at 13m1s even though remediation is not allowed.
    assert_eq!(engine.next_deadline(), Some(at(mins(13) + secs(1))));
    engine.handle(at(mins(13) + secs(1)), Input::Tick);
    let tick = lines(&drain_commands(&mut engine));
    assert_eq!(
        tick,
        [
            "health SetCondition Machine default/m4 HealthCheckSucceeded=False (UnhealthyNode)",
            "health SetCondition MachineHealthCheck default/mhc RemediationAllowed=False (TooManyUnhealthy)",
        ],
        "the verdict is written, the restriction is not reported again"
    );
}

#[test]
fn remediation_resumes_for_every_unhealthy_target_when_the_count_allows() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.max_unhealthy = Some(IntOrString::Int(1));
    let world = objects(
        mhc,
        vec![machine("m1"), machine("m2"), machine("m3")],
        vec![
            node("m1", ConditionStatus::False, T0),
            node("m2", ConditionStatus::False, T0),
            node("m3", ConditionStatus::True, T0),
        ],
    );
    let (mut engine, first) = synced_engine(at(mins(10)), world);
    settle(&mut engine, at(mins(10)), first);
    assert!(
        machine_of(&engine, "m1")
            .conditions
            .current("OwnerRemediated")
            .is_none()
    );
    // m2's node recovers: one unhealthy left, within maxUnhealthy. m1 was not touched by this
    // change, but is remediated now.
    let changed = upsert(
        &mut engine,
        at(mins(11)),
        workload("c1"),
        Object::Node(node("m2", ConditionStatus::True, at(mins(11)))),
    );
    let changed = lines(&changed);
    assert!(
        changed.contains(
            &"health SetCondition Machine default/m1 OwnerRemediated=False (WaitingForRemediation)"
                .to_string()
        ),
        "{changed:#?}"
    );
    assert!(changed.contains(
        &"health SetCondition Machine default/m2 HealthCheckSucceeded=True (HealthCheckSucceeded), HealthCheckSucceeded=True".to_string()
    ));
}

#[test]
fn invalid_max_unhealthy_is_reported_and_never_remediates() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.max_unhealthy = Some(IntOrString::String("abcdef".to_string()));
    let world = objects(mhc, vec![machine("m1")], vec![]);
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    let message = "Remediation is not allowed: maxUnhealthy \"abcdef\" is invalid (invalid value for IntOrString: invalid type: string is not a percentage); fix spec.remediation.triggerIf.unhealthyLessThanOrEqualTo (v1beta1 spec.maxUnhealthy)";
    assert_eq!(
        lines(&first),
        [
            "health SetCondition Machine default/m1 HealthCheckSucceeded=False (NodeDeleted), HealthCheckSucceeded=False (NodeNotFound)".to_string(),
            "health PatchStatus MachineHealthCheck default/mhc expectedMachines=1 currentHealthy=0 remediationsAllowed=0".to_string(),
            "health SetCondition MachineHealthCheck default/mhc RemediationAllowed=False (InvalidMaxUnhealthy)".to_string(),
            format!("health RecordEvent MachineHealthCheck default/mhc Warning InvalidMaxUnhealthy: {message}"),
        ]
    );
    let executed = settle(&mut engine, at(mins(1)), first);
    assert!(
        !lines(&executed)
            .iter()
            .any(|l| l.contains("OwnerRemediated") || l.contains("DeleteMachine"))
    );
    // Fixing it lets remediation proceed.
    let mut fixed = mhc_of(&engine);
    fixed.max_unhealthy = Some(IntOrString::Int(1));
    fixed.meta.resource_version += 1;
    let after = lines(&upsert(
        &mut engine,
        at(mins(2)),
        Scope::Management,
        Object::MachineHealthCheck(fixed),
    ));
    assert!(
        after.contains(
            &"health SetCondition Machine default/m1 OwnerRemediated=False (WaitingForRemediation)"
                .to_string()
        ),
        "{after:#?}"
    );
}

#[test]
fn invalid_unhealthy_range_is_reported() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.unhealthy_range = Some("[2-1]".to_string());
    let world = objects(
        mhc,
        vec![machine("m1")],
        vec![node("m1", ConditionStatus::True, T0)],
    );
    let (_, first) = synced_engine(at(mins(1)), world);
    let c = first
        .iter()
        .find(|c| line(c).starts_with("health SetCondition MachineHealthCheck"))
        .map(set_condition)
        .unwrap();
    let r = c.current("RemediationAllowed").unwrap();
    assert_eq!(r.reason, "InvalidUnhealthyRange");
    assert!(
        r.message
            .contains("max value 1 cannot be less than min value 2 for unhealthyRange"),
        "{}",
        r.message
    );
}

#[test]
fn external_remediation_requests_every_unhealthy_target_and_withdraws_when_healthy() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.remediation_template = Some(ObjectRef {
        api_group: "infrastructure.cluster.x-k8s.io".to_string(),
        api_version: Some("infrastructure.cluster.x-k8s.io/v1beta2".to_string()),
        kind: "DockerRemediationTemplate".to_string(),
        name: "tmpl".to_string(),
        namespace: String::new(),
    });
    let mut template = testing::external(
        "infrastructure.cluster.x-k8s.io",
        "DockerRemediationTemplate",
        "tmpl",
    );
    template.template_json = Some(r#"{"spec":{"strategy":"Reboot"}}"#.to_string());
    let mut w = objects(
        mhc,
        vec![machine("m1"), machine("m2"), machine("m3")],
        vec![node("m3", ConditionStatus::True, T0)],
    );
    w.push((Scope::Management, Object::External(template)));
    let (mut engine, first) = synced_engine(at(mins(1)), w);
    let created: Vec<String> = lines(&first)
        .into_iter()
        .filter(|l| l.contains("CreateRemediation"))
        .collect();
    assert_eq!(
        created,
        [
            "remediation CreateRemediation DockerRemediation default/m1",
            "remediation CreateRemediation DockerRemediation default/m2",
        ],
        "every unhealthy target in one pass (decision 5)"
    );
    let m1_conditions = first
        .iter()
        .find(|c| line(c).starts_with("health SetCondition Machine default/m1"))
        .map(set_condition)
        .unwrap();
    assert_eq!(
        m1_conditions
            .current("ExternallyRemediated")
            .unwrap()
            .reason,
        "WaitingForRemediation"
    );
    assert!(m1_conditions.current("OwnerRemediated").is_none());
    settle(&mut engine, at(mins(1)), first);
    // m1's Node comes back: its request is withdrawn.
    let back = upsert(
        &mut engine,
        at(mins(2)),
        workload("c1"),
        Object::Node(node("m1", ConditionStatus::True, at(mins(2)))),
    );
    let withdraw = back
        .iter()
        .find(|c| line(c) == "remediation DeleteRemediation DockerRemediation default/m1")
        .unwrap_or_else(|| panic!("{:#?}", lines(&back)));
    // Its deletion is accepted, and m1 is deleted before the cache shows the request gone:
    // nothing is kept of the request of a Machine the MHC no longer checks.
    let requests_deleted = |e: &Engine| {
        crate::census::Census::of(e).entries("controllers.health.mhcs[].requests_deleted")
    };
    engine.handle(
        at(mins(2)),
        Input::ApiResult {
            command: withdraw.id,
            outcome: ApiOutcome::Ok { object: None },
        },
    );
    drain_commands(&mut engine);
    assert_eq!(requests_deleted(&engine), 1);
    let m1 = ObjectKey::management(Kind::Machine, "default", "m1");
    engine.handle(at(mins(3)), Input::Delete { key: m1 });
    drain_commands(&mut engine);
    assert_eq!(requests_deleted(&engine), 0);
}

#[test]
fn missing_remediation_template_blocks_external_remediation() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.remediation_template = Some(ObjectRef {
        api_group: "infrastructure.cluster.x-k8s.io".to_string(),
        api_version: None,
        kind: "DockerRemediationTemplate".to_string(),
        name: "missing".to_string(),
        namespace: String::new(),
    });
    let (_, first) = synced_engine(at(mins(1)), objects(mhc, vec![machine("m1")], vec![]));
    assert!(
        !lines(&first)
            .iter()
            .any(|l| l.contains("CreateRemediation"))
    );
    let m1 = set_condition(&first[0]);
    let c = m1.current("ExternallyRemediated").unwrap();
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        (
            "RemediationTemplateNotFound",
            "Error retrieving remediation template DockerRemediationTemplate default/missing"
        )
    );
}

#[test]
fn paused_cluster_or_mhc_does_nothing() {
    let mut paused_mhc = testing::machine_health_check("c1", "mhc");
    paused_mhc
        .meta
        .annotations
        .insert(PAUSED_ANNOTATION.into(), String::new());
    let (_, first) = synced_engine(
        at(mins(1)),
        objects(paused_mhc, vec![machine("m1")], vec![]),
    );
    assert!(first.is_empty(), "{:#?}", lines(&first));

    let mut w = objects(
        testing::machine_health_check("c1", "mhc"),
        vec![machine("m1")],
        vec![],
    );
    if let (_, Object::Cluster(c)) = &mut w[0] {
        c.paused = true;
    }
    let (_, first) = synced_engine(at(mins(1)), w);
    assert!(first.is_empty(), "{:#?}", lines(&first));
}

#[test]
fn skip_remediation_and_paused_machines_are_not_targets() {
    let mut skip = machine("m1");
    skip.meta
        .annotations
        .insert(SKIP_REMEDIATION_ANNOTATION.into(), String::new());
    let mut paused = machine("m2");
    paused
        .meta
        .annotations
        .insert(PAUSED_ANNOTATION.into(), String::new());
    let world = objects(
        testing::machine_health_check("c1", "mhc"),
        vec![skip, paused, machine("m3")],
        vec![node("m3", ConditionStatus::True, T0)],
    );
    let (_, first) = synced_engine(at(mins(1)), world);
    let PatchStatusJson(status) = patch_status(
        first
            .iter()
            .find(|c| matches!(c.action, Action::PatchStatus { .. }))
            .unwrap(),
    );
    assert_eq!(status["status"]["expectedMachines"], 1);
    assert_eq!(status["status"]["targets"], serde_json::json!(["m3"]));
    assert!(
        !lines(&first)
            .iter()
            .any(|l| l.contains("default/m1") || l.contains("default/m2"))
    );
}

#[test]
fn unsynced_workload_cache_never_reports_a_deleted_node() {
    let world = vec![
        (
            Scope::Management,
            Object::Cluster(testing::ready_cluster("c1")),
        ),
        (
            Scope::Management,
            Object::MachineHealthCheck(testing::machine_health_check("c1", "mhc")),
        ),
        (Scope::Management, Object::Machine(machine("m1"))),
    ];
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    assert!(first.is_empty(), "{:#?}", lines(&first));
    // The workload relist brings the Node: now the check runs.
    engine.handle(
        at(mins(1)),
        Input::Relist {
            scope: workload("c1"),
            objects: vec![Object::Node(node("m1", ConditionStatus::True, T0))],
        },
    );
    let after = lines(&drain_commands(&mut engine));
    assert_eq!(
        after[0],
        "health SetCondition Machine default/m1 HealthCheckSucceeded=True (HealthCheckSucceeded), HealthCheckSucceeded=True"
    );
}

#[test]
fn node_startup_timeout_counts_from_creation_and_is_disabled_by_zero() {
    let mut young = machine("m1");
    young.node_ref = None;
    young.meta.creation_timestamp = Some(T0);
    let world = objects(
        testing::machine_health_check("c1", "mhc"),
        vec![young.clone()],
        vec![],
    );
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    settle(&mut engine, at(mins(1)), first);
    assert_eq!(engine.next_deadline(), Some(at(mins(10) + secs(1))));
    engine.handle(at(mins(10) + secs(1)), Input::Tick);
    let tick = drain_commands(&mut engine);
    let c = set_condition(&tick[0]);
    assert_eq!(
        c.current("HealthCheckSucceeded").unwrap().reason,
        "NodeStartupTimeout"
    );
    assert_eq!(
        c.legacy("HealthCheckSucceeded").unwrap().message,
        "Node failed to report startup in 10m0s"
    );

    let mut disabled = testing::machine_health_check("c1", "mhc");
    disabled.node_startup_timeout = Some(Duration::ZERO);
    let (engine, first) = synced_engine(at(mins(30)), objects(disabled, vec![young], vec![]));
    assert!(
        !lines(&first)
            .iter()
            .any(|l| l.contains("Machine default/m1")),
        "{:#?}",
        lines(&first)
    );
    assert_eq!(engine.next_deadline(), None);
}

#[test]
fn cluster_owner_reference_and_label_are_ensured() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.meta.labels.clear();
    mhc.meta.owner_references.clear();
    let (_, first) = synced_engine(at(mins(1)), objects(mhc, vec![], vec![]));
    let c = first
        .iter()
        .find(|c| matches!(c.action, Action::SetOwnerReference { .. }))
        .unwrap();
    let Action::SetOwnerReference { merge, .. } = &c.action else {
        unreachable!()
    };
    assert_eq!(
        merge.to_value(),
        serde_json::json!({"metadata": {
            "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "uid-default-c1"}]
        }})
    );
}

#[test]
fn remediate_machine_annotation_marks_a_target_unhealthy_at_once() {
    let mut m1 = machine("m1");
    m1.meta
        .annotations
        .insert(REMEDIATE_MACHINE_ANNOTATION.into(), String::new());
    let world = objects(
        testing::machine_health_check("c1", "mhc"),
        vec![m1],
        vec![node("m1", ConditionStatus::True, T0)],
    );
    let (_, first) = synced_engine(at(mins(1)), world);
    assert_eq!(
        line(&first[0]),
        "health SetCondition Machine default/m1 HealthCheckSucceeded=False (HasRemediateAnnotation), HealthCheckSucceeded=False (HasRemediateMachineAnnotation), OwnerRemediated=False (WaitingForRemediation)"
    );
}

#[test]
fn machines_leaving_the_selection_are_dropped_from_the_targets() {
    let world = objects(
        testing::machine_health_check("c1", "mhc"),
        vec![machine("m1"), machine("m2")],
        vec![
            node("m1", ConditionStatus::True, T0),
            node("m2", ConditionStatus::True, T0),
        ],
    );
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    settle(&mut engine, at(mins(1)), first);
    let mut m2 = machine_of(&engine, "m2");
    m2.meta
        .annotations
        .insert(SKIP_REMEDIATION_ANNOTATION.into(), String::new());
    bump(&mut m2.meta);
    let out = upsert(
        &mut engine,
        at(mins(2)),
        Scope::Management,
        Object::Machine(m2),
    );
    let PatchStatusJson(status) = patch_status(&out[0]);
    assert_eq!(
        status,
        serde_json::json!({"status": {"expectedMachines": 1, "currentHealthy": 1, "remediationsAllowed": 1, "targets": ["m1"]}})
    );
}

/// An MHC with external remediation, m1 unhealthy, everything landed but the request's
/// creation, which is returned unanswered.
fn external_remediation_requested(now: Timestamp) -> (Engine, Command) {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.remediation_template = Some(ObjectRef {
        api_group: "infrastructure.cluster.x-k8s.io".to_string(),
        api_version: Some("infrastructure.cluster.x-k8s.io/v1beta2".to_string()),
        kind: "DockerRemediationTemplate".to_string(),
        name: "tmpl".to_string(),
        namespace: String::new(),
    });
    let template = testing::external(
        "infrastructure.cluster.x-k8s.io",
        "DockerRemediationTemplate",
        "tmpl",
    );
    let mut w = objects(mhc, vec![machine("m1")], vec![]);
    w.push((Scope::Management, Object::External(template)));
    let (mut engine, first) = synced_engine(now, w);
    // Land everything but the creation.
    let mut create = None;
    for c in first {
        if matches!(c.action, Action::CreateRemediation { .. }) {
            create = Some(c);
            continue;
        }
        settle(&mut engine, now, vec![c]);
    }
    (engine, create.expect("a request is created"))
}

#[test]
fn failed_remediation_request_is_reported_and_retried_after_the_interval() {
    let now = at(mins(1));
    let (mut engine, create) = external_remediation_requested(now);
    engine.handle(
        now,
        Input::ApiResult {
            command: create.id,
            outcome: ApiOutcome::Error {
                code: 500,
                message: "boom".to_string(),
            },
        },
    );
    let after = drain_commands(&mut engine);
    let after_lines = lines(&after);
    assert!(
        after_lines.contains(
            &"health SetCondition Machine default/m1 ExternallyRemediated=False (RemediationRequestCreationFailed)".to_string()
        ),
        "{after_lines:#?}"
    );
    assert!(
        after_lines.contains(
            &"health SetCondition MachineHealthCheck default/mhc ExternalRemediationRequestAvailable=False (ExternalRemediationRequestCreationFailed)".to_string()
        ),
        "{after_lines:#?}"
    );
    assert!(
        !after_lines.iter().any(|l| l.contains("CreateRemediation")),
        "no retry before the interval"
    );
    settle(&mut engine, now, after);
    assert_eq!(
        engine.next_deadline(),
        Some(now.saturating_add(super::REMEDIATION_REQUEST_RETRY_INTERVAL))
    );
    engine.handle(now.saturating_add(secs(10)), Input::Tick);
    let retry = lines(&drain_commands(&mut engine));
    assert!(
        retry.contains(&"remediation CreateRemediation DockerRemediation default/m1".to_string()),
        "{retry:#?}"
    );
}

/// Found by the MHC differential of the simulator: a creation that timed out although the
/// request was created left the MHC saying `ExternalRemediationRequestAvailable=False` until
/// the Machine was healthy again. Seeing the request exists clears the failure.
#[test]
fn a_request_created_although_its_creation_timed_out_clears_the_failure() {
    let now = at(mins(1));
    let (mut engine, create) = external_remediation_requested(now);
    engine.handle(
        now,
        Input::ApiResult {
            command: create.id,
            outcome: ApiOutcome::Unreachable {
                message: "operation timed out".to_string(),
            },
        },
    );
    let after = drain_commands(&mut engine);
    settle(&mut engine, now, after);
    let request = testing::external("infrastructure.cluster.x-k8s.io", "DockerRemediation", "m1");
    engine.handle(
        now.saturating_add(secs(1)),
        Input::Upsert {
            scope: Scope::Management,
            object: Box::new(Object::External(request)),
        },
    );
    let seen = drain_commands(&mut engine);
    engine.handle(now.saturating_add(secs(10)), Input::Tick);
    let mut later = seen;
    later.extend(drain_commands(&mut engine));
    let later = lines(&later);
    assert!(
        !later.iter().any(|l| l.contains("CreateRemediation")),
        "{later:#?}"
    );
    assert!(
        later.contains(
            &"health SetCondition MachineHealthCheck default/mhc ExternalRemediationRequestAvailable=True".to_string()
        ),
        "{later:#?}"
    );
}

#[test]
fn deleted_mhc_forgets_its_targets_and_timers() {
    let world = objects(
        testing::machine_health_check("c1", "mhc"),
        vec![machine("m1")],
        vec![node("m1", ConditionStatus::False, T0)],
    );
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    settle(&mut engine, at(mins(1)), first);
    assert!(engine.next_deadline().is_some());
    engine.handle(
        at(mins(2)),
        Input::Delete {
            key: ObjectKey::management(Kind::MachineHealthCheck, "default", "mhc"),
        },
    );
    assert!(drain_commands(&mut engine).is_empty());
    assert_eq!(engine.next_deadline(), None);
    assert!(engine.controllers().health.is_empty());
}

/// Applies `input` to `engine` and to a copy decoded from its encoding (which has no target
/// views, so its full evaluations read the store), settles both against the fake API, and
/// checks that they issue the same commands and end in the same state.
fn step_both(engine: &mut Engine, now: Timestamp, input: Input) -> Vec<String> {
    let mut fresh = Engine::decode_state(&engine.encode_state()).expect("state decodes");
    let run = |e: &mut Engine| {
        e.handle(now, input.clone());
        let first = drain_commands(e);
        lines(&settle(e, now, first))
    };
    let (with_views, from_store) = (run(engine), run(&mut fresh));
    assert_eq!(with_views, from_store, "after {input:?}");
    assert_eq!(
        engine.encode_state(),
        fresh.encode_state(),
        "state after {input:?}"
    );
    with_views
}

/// [`step_both`] with the upsert of `object`.
fn step_upsert(engine: &mut Engine, now: Timestamp, scope: Scope, object: Object) -> Vec<String> {
    step_both(
        engine,
        now,
        Input::Upsert {
            scope,
            object: Box::new(object),
        },
    )
}

/// A view that no longer matches its Machine and Node (two targets' views swapped: a healthy
/// one's and one without a Node) is caught by the next full evaluation from the views, in a
/// debug build.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "judges unlike its Machine and Node")]
fn a_view_that_judges_unlike_the_store_is_caught() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let machines = vec![machine("m1"), testing::machine("c1", "m2", None)];
    let nodes = vec![node("m1", ConditionStatus::True, T0)];
    let (mut engine, first) = synced_engine(at(mins(1)), objects(mhc, machines, nodes));
    settle(&mut engine, at(mins(1)), first);
    let key = ObjectKey::management(Kind::MachineHealthCheck, "default", "mhc");
    engine.controllers_mut().health.swap_views(&key, "m1", "m2");
    // A moved gate transition: every verdict is stale, and the views are used.
    let mut cluster = testing::ready_cluster("c1");
    cluster.meta.resource_version = 100;
    cluster.conditions.current[1].last_transition_time = Some(Timestamp(1));
    upsert(
        &mut engine,
        at(mins(2)),
        Scope::Management,
        Object::Cluster(cluster),
    );
}

/// A full evaluation from the targets' views decides exactly what one from the store decides,
/// after every kind of change: Node condition, Machine label, Machine condition, annotation,
/// Node and Machine deletion, a new Machine and Node, time passing past a timeout (with no
/// Tick between), and spec changes (timeouts keep the views; a new check type does not).
#[test]
fn full_evaluation_from_views_matches_the_store_after_every_kind_of_change() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.selector
        .match_labels
        .insert("role".into(), "worker".into());
    mhc.unhealthy_machine_conditions = vec![UnhealthyCondition {
        type_: "Ready".into(),
        status: "False".into(),
        timeout: mins(10),
    }];
    let worker = |name: &str, node_ref: Option<&str>| {
        let mut m = testing::machine("c1", name, node_ref);
        m.meta.labels.insert("role".into(), "worker".into());
        m.meta.creation_timestamp = Some(T0);
        m
    };
    let machines = vec![
        worker("m1", Some("m1")),
        worker("m2", Some("m2")),
        worker("m3", Some("m3")),
        worker("m4", Some("m4")),
        worker("m5", None),
        worker("m6", Some("m6")),
    ];
    let nodes = ["m1", "m2", "m3", "m4"]
        .map(|n| node(n, ConditionStatus::True, T0))
        .to_vec();
    let (mut engine, first) = synced_engine(at(mins(1)), objects(mhc, machines, nodes));
    settle(&mut engine, at(mins(1)), first);
    let key = ObjectKey::management(Kind::MachineHealthCheck, "default", "mhc");
    let views_used = |e: &Engine| e.controllers().health.passes_from_views(&key);

    // Moving the Cluster's InfrastructureReady transition (still long before any Machine was
    // created, so no deadline moves) changes the gates: every verdict is stale and the MHC
    // evaluates all targets, each from its view unless it changed.
    let mut gate_moves = 0;
    let mut force_full = |engine: &mut Engine, now: Timestamp| {
        let before = views_used(engine);
        gate_moves += 1;
        let mut cluster = testing::ready_cluster("c1");
        cluster.meta.resource_version = 100 + gate_moves;
        cluster.conditions.current[1].last_transition_time = Some(Timestamp(gate_moves as i64));
        let cluster = Object::Cluster(cluster);
        let out = step_upsert(engine, now, Scope::Management, cluster);
        assert_eq!(views_used(engine), before + 1, "the pass read the views");
        out
    };
    force_full(&mut engine, at(mins(2)));

    let mut t = at(mins(3));
    let put_node = |engine: &mut Engine, t: Timestamp, n: Node| {
        step_upsert(engine, t, workload("c1"), Object::Node(n))
    };
    // Node condition change.
    let mut n1 = node("m1", ConditionStatus::False, t);
    n1.meta.resource_version = 10;
    put_node(&mut engine, t, n1);
    force_full(&mut engine, t);

    // Machine label change: out of the selection, and back.
    let mut m2 = machine_of(&engine, "m2");
    m2.meta.labels.remove("role");
    bump(&mut m2.meta);
    step_upsert(
        &mut engine,
        t,
        Scope::Management,
        Object::Machine(m2.clone()),
    );
    force_full(&mut engine, t);
    assert!(!mhc_of(&engine).status.targets.contains(&"m2".to_string()));
    m2.meta.labels.insert("role".into(), "worker".into());
    bump(&mut m2.meta);
    step_upsert(&mut engine, t, Scope::Management, Object::Machine(m2));
    force_full(&mut engine, t);

    // Machine condition change (the Machine check), then time past its timeout, m1's Node
    // timeout and m5's startup timeout, with no Tick in between: the full pass finds them.
    let mut m2 = machine_of(&engine, "m2");
    m2.conditions.current.push(Condition {
        last_transition_time: Some(t),
        ..Condition::new("Ready", ConditionStatus::False, "NotReady", "")
    });
    bump(&mut m2.meta);
    step_upsert(&mut engine, t, Scope::Management, Object::Machine(m2));
    force_full(&mut engine, t);
    t = at(mins(20));
    let late = force_full(&mut engine, t);
    for m in ["m1", "m2", "m5"] {
        assert!(
            late.iter().any(|l| l.starts_with(&format!(
                "health SetCondition Machine default/{m} HealthCheckSucceeded=False"
            ))),
            "{m} is found unhealthy by the full pass: {late:#?}"
        );
    }

    // Node deleted; Machine deleted.
    step_both(
        &mut engine,
        t,
        Input::Delete {
            key: ObjectKey::new(workload("c1"), Kind::Node, "", "m3"),
        },
    );
    force_full(&mut engine, t);
    step_both(
        &mut engine,
        t,
        Input::Delete {
            key: ObjectKey::management(Kind::Machine, "default", "m4"),
        },
    );
    force_full(&mut engine, t);

    // A new Machine and its Node; the missing Node of m6 appears; m1's Node recovers.
    step_upsert(
        &mut engine,
        t,
        Scope::Management,
        Object::Machine(worker("m7", Some("m7"))),
    );
    put_node(&mut engine, t, node("m7", ConditionStatus::Unknown, t));
    // m6's Node appears, and the gates move before its HealthCheckSucceeded=True lands: the
    // full pass sees a healthy target whose condition is not written yet.
    let mut fresh = Engine::decode_state(&engine.encode_state()).expect("state decodes");
    let appears = Input::Upsert {
        scope: workload("c1"),
        object: Box::new(Object::Node(node("m6", ConditionStatus::True, T0))),
    };
    let mut held = Vec::new();
    for e in [&mut engine, &mut fresh] {
        e.handle(t, appears.clone());
        held.push(drain_commands(e));
    }
    assert_eq!(held[0], held[1]);
    assert_eq!(engine.encode_state(), fresh.encode_state());
    let held = held.swap_remove(0);
    assert!(!held.is_empty(), "m6 is written healthy");
    force_full(&mut engine, t);
    for c in held {
        let (outcome, _) = answer(&engine, t, &c);
        step_both(
            &mut engine,
            t,
            Input::ApiResult {
                command: c.id,
                outcome,
            },
        );
    }
    let mut n1 = node("m1", ConditionStatus::True, t);
    n1.meta.resource_version = 11;
    put_node(&mut engine, t, n1);
    force_full(&mut engine, t);
    // A shorter timeout for m7's pending Node condition: its deadline moves (from the view).
    let mut spec = mhc_of(&engine);
    spec.unhealthy_node_conditions[0].timeout = mins(3);
    bump(&mut spec.meta);
    let before = views_used(&engine);
    step_upsert(
        &mut engine,
        t,
        Scope::Management,
        Object::MachineHealthCheck(spec),
    );
    assert_eq!(
        views_used(&engine),
        before + 1,
        "a timeout change keeps the views"
    );
    assert_eq!(
        engine.next_deadline(),
        Some(t.saturating_add(mins(3) + secs(1)))
    );

    // A relist that changes a Machine and the gates at once: the full pass reads the changed
    // (dirty) target from the store and the others from their views.
    let mut relisted: Vec<Object> = engine
        .store()
        .iter_scope(&Scope::Management)
        .map(|(_, o)| o.clone())
        .collect();
    for o in &mut relisted {
        match o {
            Object::Machine(m) if m.meta.name == "m6" => {
                m.conditions.current.push(Condition {
                    last_transition_time: Some(T0),
                    ..Condition::new("Ready", ConditionStatus::False, "NotReady", "")
                });
                bump(&mut m.meta);
            }
            Object::Cluster(c) => {
                c.conditions.current[1].last_transition_time = Some(Timestamp(1));
                bump(&mut c.meta);
            }
            _ => {}
        }
    }
    let before = views_used(&engine);
    let relist = step_both(
        &mut engine,
        t,
        Input::Relist {
            scope: Scope::Management,
            objects: relisted,
        },
    );
    assert_eq!(
        views_used(&engine),
        before + 1,
        "the relist's pass read the views"
    );
    assert!(
        relist
            .iter()
            .any(|l| l.contains("Machine default/m6 HealthCheckSucceeded=False (UnhealthyMachine)")),
        "{relist:#?}"
    );

    // The remediate-machine annotation.
    let mut m1 = machine_of(&engine, "m1");
    m1.meta
        .annotations
        .insert(REMEDIATE_MACHINE_ANNOTATION.into(), String::new());
    bump(&mut m1.meta);
    step_upsert(&mut engine, t, Scope::Management, Object::Machine(m1));
    t = at(mins(30));
    force_full(&mut engine, t);

    // Spec changes: a timeout (views kept), then a new check type (views read again).
    let mut spec = mhc_of(&engine);
    spec.unhealthy_node_conditions[0].timeout = mins(1);
    bump(&mut spec.meta);
    let before = views_used(&engine);
    step_upsert(
        &mut engine,
        t,
        Scope::Management,
        Object::MachineHealthCheck(spec.clone()),
    );
    assert_eq!(
        views_used(&engine),
        before + 1,
        "a timeout change keeps the views"
    );
    spec.unhealthy_node_conditions.push(UnhealthyCondition {
        type_: "DiskPressure".into(),
        status: "True".into(),
        timeout: mins(1),
    });
    bump(&mut spec.meta);
    step_upsert(
        &mut engine,
        t,
        Scope::Management,
        Object::MachineHealthCheck(spec),
    );
    assert_eq!(
        views_used(&engine),
        before + 1,
        "a new check type reads the store"
    );
    t = at(mins(40));
    force_full(&mut engine, t);
    let mhc = mhc_of(&engine);
    assert_eq!(mhc.status.targets, ["m1", "m2", "m3", "m5", "m6", "m7"]);
}

/// Issue 12: timeouts upstream's webhook rejects (a negative one, a startup timeout under 30 s)
/// never time a remediation: the MHC says why and remediates nothing, and no timer is set in
/// the past over and over.
#[test]
fn timeouts_the_webhook_rejects_remediate_nothing_and_say_why() {
    let unhealthy_since = T0;
    type Spoil = fn(&mut MachineHealthCheck);
    let cases: [(&str, Spoil); 3] = [
        ("InvalidNodeStartupTimeout", |m| {
            m.node_startup_timeout = Some(Duration::from_mins(-10))
        }),
        ("InvalidNodeStartupTimeout", |m| {
            m.node_startup_timeout = Some(Duration::from_secs(10))
        }),
        ("InvalidUnhealthyConditionTimeout", |m| {
            m.unhealthy_node_conditions[0].timeout = Duration::from_secs(-300)
        }),
    ];
    for (reason, spoil) in cases {
        let mut mhc = testing::machine_health_check("c1", "mhc");
        spoil(&mut mhc);
        // m1 has no Node yet (a brand-new Machine); m2's Node is not Ready.
        let world = objects(
            mhc,
            vec![testing::machine("c1", "m1", None), machine("m2")],
            vec![node("m2", ConditionStatus::False, unhealthy_since)],
        );
        let now = at(mins(1));
        let (mut engine, first) = synced_engine(now, world);
        let mut all = settle(&mut engine, now, first);
        for minute in 2..30 {
            let now = at(mins(minute));
            engine.handle(now, Input::Tick);
            let issued = drain_commands(&mut engine);
            all.extend(settle(&mut engine, now, issued));
        }
        let all = lines(&all);
        assert!(
            !all.iter()
                .any(|l| l.contains("DeleteMachine") || l.contains("OwnerRemediated")),
            "{reason}: {all:#?}"
        );
        assert!(
            all.iter()
                .any(|l| l.contains(&format!("RemediationAllowed=False ({reason})"))),
            "{reason}: {all:#?}"
        );
        assert!(
            engine.next_deadline().is_none_or(|d| d > at(mins(29))),
            "{reason}: no timer left in the past"
        );
    }
}

/// Issue 25: a negative unhealthy-condition timeout (v1beta1 `timeout: "-1s"`) is invalid, not
/// zero: a target whose condition is in the checked status is neither unhealthy "for more than
/// -1s" nor healthy, and nothing is remediated. Fixed, the check judges again.
#[test]
fn a_negative_condition_timeout_judges_no_target_by_it() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.version = ApiVersion::V1Beta1;
    mhc.unhealthy_node_conditions[1].timeout = secs(-1);
    let world = objects(
        mhc,
        vec![owned_machine("m1", T0), machine("m2")],
        vec![
            node("m1", ConditionStatus::False, T0),
            node("m2", ConditionStatus::True, T0),
        ],
    );
    let now = at(mins(10));
    let (mut engine, first) = synced_engine(now, world);
    let executed = lines(&settle(&mut engine, now, first));
    assert!(
        !executed.iter().any(|l| l.contains("Machine default/m1")
            || l.contains("DeleteMachine")
            || l.contains("OwnerRemediated")),
        "m1 is not judged by the invalid check: {executed:#?}"
    );
    assert!(
        executed.contains(
            &"health SetCondition MachineHealthCheck default/mhc RemediationAllowed=False (InvalidUnhealthyConditionTimeout)".to_string()
        ),
        "{executed:#?}"
    );
    let status = mhc_of(&engine).status;
    assert_eq!(
        (status.expected_machines, status.current_healthy),
        (Some(2), Some(1)),
        "m1 is unknown, not healthy"
    );

    let mut fixed = mhc_of(&engine);
    fixed.unhealthy_node_conditions[1].timeout = mins(5);
    bump(&mut fixed.meta);
    let now = at(mins(11));
    let out = upsert(
        &mut engine,
        now,
        Scope::Management,
        Object::MachineHealthCheck(fixed),
    );
    let executed = lines(&settle(&mut engine, now, out));
    assert!(
        executed.iter().any(|l| l.starts_with(
            "health SetCondition Machine default/m1 HealthCheckSucceeded=False (UnhealthyNode)"
        )),
        "{executed:#?}"
    );
    let m1 = machine_of(&engine, "m1");
    let failed = m1.conditions.current("HealthCheckSucceeded").unwrap();
    assert!(failed.message.contains("for more than 5m0s"), "{failed:?}");
}

/// The RemediationAllowed condition of the MHC, as last written.
fn remediation_allowed(engine: &Engine) -> Condition {
    mhc_of(engine)
        .conditions
        .current("RemediationAllowed")
        .cloned()
        .expect("RemediationAllowed is written")
}

/// Issue 25: each invalid field of the spec is reported on its own (an event with its reason,
/// and a line in the condition's message), so fixing one still shows the others; none is
/// hidden behind another, and the MHC remediates nothing until all are fixed.
#[test]
fn every_invalid_field_is_reported_on_its_own() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.max_unhealthy = Some(IntOrString::String("abcdef".to_string()));
    mhc.unhealthy_node_conditions[1].timeout = secs(-1);
    mhc.node_startup_timeout = Some(secs(10));
    let world = objects(
        mhc,
        vec![owned_machine("m1", T0)],
        vec![node("m1", ConditionStatus::True, T0)],
    );
    let now = at(mins(1));
    let (mut engine, first) = synced_engine(now, world);
    let executed = lines(&settle(&mut engine, now, first));
    let events: Vec<&str> = executed
        .iter()
        .filter_map(|l| {
            l.strip_prefix("health RecordEvent MachineHealthCheck default/mhc Warning ")
        })
        .map(|l| l.split_once(':').unwrap().0)
        .collect();
    assert_eq!(
        events,
        [
            "InvalidNodeStartupTimeout",
            "InvalidUnhealthyConditionTimeout",
            "InvalidMaxUnhealthy"
        ],
        "{executed:#?}"
    );
    let condition = remediation_allowed(&engine);
    assert_eq!(condition.status, ConditionStatus::False);
    assert_eq!(condition.reason, "InvalidNodeStartupTimeout");
    assert_eq!(
        condition.message,
        "Remediation is not allowed: nodeStartupTimeout must be at least 30s, or 0 to disable the check (got 10s); unhealthyNodeConditions[1] (Ready=False) has a negative timeout (-1s); maxUnhealthy \"abcdef\" is invalid (invalid value for IntOrString: invalid type: string is not a percentage); fix spec.remediation.triggerIf.unhealthyLessThanOrEqualTo (v1beta1 spec.maxUnhealthy)"
    );

    // Each fix leaves the others reported, and records no event again.
    type Fix = fn(&mut MachineHealthCheck);
    let fixes: [(Fix, Option<&str>); 3] = [
        (
            |m| m.max_unhealthy = Some(IntOrString::Int(1)),
            Some("InvalidNodeStartupTimeout"),
        ),
        (
            |m| m.node_startup_timeout = None,
            Some("InvalidUnhealthyConditionTimeout"),
        ),
        (|m| m.unhealthy_node_conditions[1].timeout = mins(5), None),
    ];
    for (minute, (fix, reason)) in (2..).zip(fixes) {
        let mut fixed = mhc_of(&engine);
        fix(&mut fixed);
        bump(&mut fixed.meta);
        let now = at(mins(minute));
        let out = upsert(
            &mut engine,
            now,
            Scope::Management,
            Object::MachineHealthCheck(fixed),
        );
        let executed = lines(&settle(&mut engine, now, out));
        assert!(
            !executed.iter().any(|l| l.contains("RecordEvent")),
            "{executed:#?}"
        );
        let condition = remediation_allowed(&engine);
        match reason {
            Some(reason) => assert_eq!(
                (condition.status, condition.reason.as_str()),
                (ConditionStatus::False, reason),
                "{condition:?}"
            ),
            None => assert_eq!(condition.status, ConditionStatus::True, "{condition:?}"),
        }
    }
}

/// A valid `unhealthyRange` decides, but an invalid `maxUnhealthy` written beside it is still
/// an invalid spec (upstream's webhook rejects it): reported, and nothing is remediated.
#[test]
fn an_invalid_max_unhealthy_beside_a_range_is_reported() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.max_unhealthy = Some(IntOrString::String("abcdef".to_string()));
    mhc.unhealthy_range = Some("[0-5]".to_string());
    let world = objects(
        mhc,
        vec![owned_machine("m1", T0)],
        vec![node("m1", ConditionStatus::False, T0)],
    );
    let now = at(mins(10));
    let (mut engine, first) = synced_engine(now, world);
    let executed = lines(&settle(&mut engine, now, first));
    assert!(
        !executed.iter().any(|l| l.contains("OwnerRemediated")),
        "{executed:#?}"
    );
    assert_eq!(remediation_allowed(&engine).reason, "InvalidMaxUnhealthy");
}

const BAD_TYPE: &str = "status.conditions[0].type: expected a string";

fn unreadable_node(name: &str) -> Object {
    testing::unreadable(Kind::Node, "", name, BAD_TYPE)
}

#[test]
fn an_unreadable_node_is_unknown_never_deleted() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let mut world = objects(mhc, vec![owned_machine("m1", T0)], vec![]);
    world.push((workload("c1"), unreadable_node("m1")));
    world.push((
        Scope::Management,
        Object::MachineSet(testing::machine_set("c1", "ms", 1)),
    ));
    let (mut engine, first) = synced_engine(at(mins(20)), world);
    let executed = lines(&settle(&mut engine, at(mins(20)), first));
    assert!(
        !executed
            .iter()
            .any(|l| l.contains("HealthCheckSucceeded=False")
                || l.contains("DeleteMachine")
                || l.contains("NodeStartupTimeout")),
        "{executed:#?}"
    );
    let warning = "health RecordEvent MachineHealthCheck default/mhc Warning ObjectUnreadable: Node m1 in cluster default/c1 cannot be read: status.conditions[0].type: expected a string; the health checks that depend on it wait until it can be read";
    assert_eq!(
        executed.iter().filter(|l| *l == warning).count(),
        1,
        "{executed:#?}"
    );
    assert_eq!(mhc_of(&engine).status.current_healthy, Some(0));

    // Readable again: judged by what it says.
    let out = upsert(
        &mut engine,
        at(mins(21)),
        workload("c1"),
        Object::Node(node("m1", ConditionStatus::True, T0)),
    );
    let executed = lines(&settle(&mut engine, at(mins(21)), out));
    assert!(
        executed
            .iter()
            .any(|l| l
                .starts_with("health SetCondition Machine default/m1 HealthCheckSucceeded=True")),
        "{executed:#?}"
    );
}

#[test]
fn a_node_that_turns_unreadable_keeps_its_last_reading_and_only_a_deletion_removes_it() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let mut world = objects(
        mhc,
        vec![owned_machine("m1", T0)],
        vec![node("m1", ConditionStatus::True, T0)],
    );
    world.push((
        Scope::Management,
        Object::MachineSet(testing::machine_set("c1", "ms", 1)),
    ));
    let (mut engine, first) = synced_engine(at(mins(1)), world.clone());
    settle(&mut engine, at(mins(1)), first);
    // A relist (as after a restart) shows the Node in a form that does not read.
    let objects: Vec<Object> = world
        .iter()
        .filter(|(s, _)| *s == workload("c1"))
        .map(|(_, o)| match o {
            Object::Node(n) if n.meta.name == "m1" => unreadable_node("m1"),
            o => o.clone(),
        })
        .collect();
    engine.handle(
        at(mins(2)),
        Input::Relist {
            scope: workload("c1"),
            objects,
        },
    );
    let out = drain_commands(&mut engine);
    let executed = lines(&settle(&mut engine, at(mins(2)), out));
    assert!(
        !executed.iter().any(|l| l.contains("DeleteMachine")
            || (l.contains("=False") && !l.contains("ObjectsReadable=False"))),
        "{executed:#?}"
    );
    assert!(
        executed.iter().any(|l| l
            == "health SetCondition MachineHealthCheck default/mhc ObjectsReadable=False (ObjectUnreadable)"),
        "the MHC says what it cannot read: {executed:#?}"
    );
    let key = ObjectKey::new(workload("c1"), Kind::Node, "", "m1");
    assert!(
        matches!(engine.store().get(&key), Some(Object::Node(_))),
        "last good reading kept"
    );
    assert_eq!(engine.store().unreadable(&key), Some(BAD_TYPE));
    assert!(
        executed.iter().any(|l| l.contains("ObjectUnreadable")),
        "{executed:#?}"
    );

    // Hours pass: unknown never expires into a verdict.
    engine.handle(at(mins(300)), Input::Tick);
    let out = drain_commands(&mut engine);
    assert!(
        lines(&out).iter().all(|l| !l.contains("DeleteMachine")),
        "{:#?}",
        lines(&out)
    );

    // An observed deletion is what makes it gone.
    engine.handle(at(mins(301)), Input::Delete { key: key.clone() });
    let out = drain_commands(&mut engine);
    let executed = lines(&settle(&mut engine, at(mins(301)), out));
    assert!(engine.store().unreadable(&key).is_none());
    assert!(
        executed
            .iter()
            .any(|l| l == "remediation DeleteMachine Machine default/m1"),
        "{executed:#?}"
    );
}

#[test]
fn owner_remediation_goes_on_when_the_watch_shows_the_mark_before_its_answer() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let mut world = objects(
        mhc,
        vec![owned_machine("m1", T0), owned_machine("m2", T0)],
        vec![node("m2", ConditionStatus::True, T0)],
    );
    world.push((
        Scope::Management,
        Object::MachineSet(testing::machine_set("c1", "ms", 2)),
    ));
    let now = at(mins(1));
    let (mut engine, first) = synced_engine(now, world);
    let mark = first
        .iter()
        .find(|c| line(c).starts_with("health SetCondition Machine default/m1"))
        .unwrap_or_else(|| panic!("{:#?}", lines(&first)))
        .clone();
    let others: Vec<Command> = first.into_iter().filter(|c| c.id != mark.id).collect();
    settle(&mut engine, now, others);
    // The watch event of the mark arrives first (a real API server may deliver it before the
    // response to the request that caused it).
    let (outcome, _) = answer(&engine, now, &mark);
    let ApiOutcome::Ok {
        object: Some(marked),
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    let out = upsert(&mut engine, now, Scope::Management, *marked);
    assert!(
        lines(&out).iter().all(|l| !l.contains("DeleteMachine")),
        "{:#?}",
        lines(&out)
    );
    // Then the answer, with no object: the MachineSet must decide now, not at a later event.
    engine.handle(
        now,
        Input::ApiResult {
            command: mark.id,
            outcome: ApiOutcome::Ok { object: None },
        },
    );
    let out = drain_commands(&mut engine);
    let executed = lines(&settle(&mut engine, now, out));
    assert!(
        executed
            .iter()
            .any(|l| l == "remediation DeleteMachine Machine default/m1"),
        "{executed:#?}"
    );
}

#[test]
fn a_node_ref_that_arrives_before_its_node_is_not_a_deleted_node() {
    let mhc = testing::machine_health_check("c1", "mhc");
    let mut world = objects(
        mhc,
        vec![owned_machine("m1", T0)],
        vec![node("m1", ConditionStatus::True, T0)],
    );
    world.push((
        Scope::Management,
        Object::MachineSet(testing::machine_set("c1", "ms", 2)),
    ));
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    settle(&mut engine, at(mins(1)), first);
    // The replacement's nodeRef is watched in the management cluster before the workload
    // cluster's watch delivers its Node.
    let out = upsert(
        &mut engine,
        at(mins(2)),
        Scope::Management,
        Object::Machine(owned_machine("r1", at(mins(1)))),
    );
    let executed = lines(&settle(&mut engine, at(mins(2)), out));
    assert!(
        !executed
            .iter()
            .any(|l| l.contains("NodeDeleted") || l.contains("DeleteMachine")),
        "{executed:#?}"
    );
    let out = upsert(
        &mut engine,
        at(mins(2)),
        workload("c1"),
        Object::Node(node("r1", ConditionStatus::True, T0)),
    );
    let executed = lines(&settle(&mut engine, at(mins(2)), out));
    assert!(
        executed
            .iter()
            .any(|l| l
                .starts_with("health SetCondition Machine default/r1 HealthCheckSucceeded=True")),
        "{executed:#?}"
    );
    // Seen deleted: gone.
    engine.handle(
        at(mins(3)),
        Input::Delete {
            key: ObjectKey::new(workload("c1"), Kind::Node, "", "r1"),
        },
    );
    let out = drain_commands(&mut engine);
    let executed = lines(&settle(&mut engine, at(mins(3)), out));
    assert!(
        executed
            .iter()
            .any(|l| l.contains("HealthCheckSucceeded=False (NodeDeleted)")),
        "{executed:#?}"
    );
}

fn c1_unreachable(reason: Option<crate::connection::Unreachable>) -> Input {
    Input::ClusterUnreachable {
        scope: workload("c1"),
        reason,
    }
}

fn warnings(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .filter_map(|c| match &c.action {
            Action::RecordEvent {
                reason, message, ..
            } => Some(format!("{reason}: {message}")),
            _ => None,
        })
        .collect()
}

/// Found by the kubeconfig wait (issue 26): an MHC whose workload cluster cannot be reached
/// judged nothing and said nothing.
#[test]
fn an_mhc_waiting_for_an_unreachable_cluster_says_why_once_and_stops_once_it_is_reached() {
    use crate::connection::Unreachable;
    let world = vec![
        (
            Scope::Management,
            Object::Cluster(testing::ready_cluster("c1")),
        ),
        (
            Scope::Management,
            Object::MachineHealthCheck(testing::machine_health_check("c1", "mhc")),
        ),
        (Scope::Management, Object::Machine(machine("m1"))),
    ];
    let now = at(mins(1));
    let (mut engine, first) = synced_engine(now, world);
    assert!(first.is_empty(), "{:#?}", lines(&first));
    engine.handle(now, c1_unreachable(Some(Unreachable::SecretMissing)));
    let issued = drain_commands(&mut engine);
    let out = settle(&mut engine, now, issued);
    let message = "cannot reach workload cluster default/c1: its kubeconfig Secret \
                   default/c1-kubeconfig is missing; the health checks of its Nodes wait until it \
                   can be reached";
    assert_eq!(
        lines(&out),
        [
            "health SetCondition MachineHealthCheck default/mhc WorkloadClusterReachable=False (WorkloadClusterUnreachable)",
            &format!(
                "health RecordEvent MachineHealthCheck default/mhc Warning WorkloadClusterUnreachable: {message}"
            )
        ]
    );
    assert_eq!(
        warnings(&out),
        [format!("WorkloadClusterUnreachable: {message}")]
    );
    let reachable = mhc_of(&engine);
    let c = reachable
        .conditions
        .current("WorkloadClusterReachable")
        .unwrap();
    assert_eq!(
        (c.status, c.message.as_str()),
        (ConditionStatus::False, message)
    );
    // Its recheck while it waits says nothing again.
    engine.handle(at(mins(2)), Input::Tick);
    assert!(lines(&drain_commands(&mut engine)).is_empty());
    // Connected, then listed: the condition goes, and the checks run.
    engine.handle(at(mins(2)), c1_unreachable(None));
    let issued = drain_commands(&mut engine);
    let out = settle(&mut engine, at(mins(2)), issued);
    assert_eq!(
        lines(&out),
        ["health SetCondition MachineHealthCheck default/mhc WorkloadClusterReachable removed"]
    );
    engine.handle(
        at(mins(2)),
        Input::Relist {
            scope: workload("c1"),
            objects: vec![Object::Node(node("m1", ConditionStatus::True, T0))],
        },
    );
    let issued = drain_commands(&mut engine);
    let out = settle(&mut engine, at(mins(2)), issued);
    assert!(
        lines(&out)[0]
            .starts_with("health SetCondition Machine default/m1 HealthCheckSucceeded=True"),
        "{:#?}",
        lines(&out)
    );
    assert!(
        mhc_of(&engine)
            .conditions
            .current("WorkloadClusterReachable")
            .is_none()
    );
}

/// A `WorkloadClusterReachable=False` left on an MHC whose cluster is reached (written before a
/// restart, or while its control plane was not up) goes at the first judging pass.
#[test]
fn a_reachable_condition_left_behind_goes_once_the_checks_run() {
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.conditions.current.push(Condition::new(
        "WorkloadClusterReachable",
        ConditionStatus::False,
        "WorkloadClusterUnreachable",
        "cannot reach workload cluster default/c1: its kubeconfig Secret default/c1-kubeconfig is missing",
    ));
    let world = objects(
        mhc,
        vec![machine("m1")],
        vec![node("m1", ConditionStatus::True, T0)],
    );
    let (mut engine, first) = synced_engine(at(mins(1)), world);
    let out = settle(&mut engine, at(mins(1)), first);
    assert!(
        lines(&out).iter().any(|l| l
            .starts_with("health SetCondition MachineHealthCheck default/mhc")
            && l.contains("WorkloadClusterReachable removed")),
        "{:#?}",
        lines(&out)
    );
    assert!(
        mhc_of(&engine)
            .conditions
            .current("WorkloadClusterReachable")
            .is_none()
    );
}

/// The health check's registry slot holds Machine keys (which mark targets dirty) and MHC keys
/// (which reconcile them), and a pass visits a slot's keys in their order: every Machine key
/// must come before every MHC key, whatever their namespaces and names, or an MHC would decide
/// on targets a Machine change of the same input has not marked yet.
#[test]
fn every_machine_key_orders_before_every_mhc_key() {
    let names = ["", "a", "m", "zz"];
    for (machine_ns, machine) in names.iter().flat_map(|n| names.map(|m| (*n, m))) {
        for (mhc_ns, mhc) in names.iter().flat_map(|n| names.map(|m| (*n, m))) {
            let m = ObjectKey::management(Kind::Machine, machine_ns, machine);
            let h = ObjectKey::management(Kind::MachineHealthCheck, mhc_ns, mhc);
            assert!(m < h, "{m} orders after {h}");
        }
    }
}
