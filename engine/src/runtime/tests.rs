//! The loop against a scripted core: batching, the journal-before-apply rule, the journal
//! down and back, the in-flight caps, priority and eviction order, ticks and dispatch.

use super::*;
use crate::command::{Action, ControllerId, Target};
use crate::model::{ClusterName, Kind, ObjectKey};

/// Records what it is fed; on an [`Input::ApiResult`] for command `0` (a trigger) it issues
/// the commands scripted next.
#[derive(Default)]
struct Script {
    fed: Vec<Input>,
    issue: VecDeque<Vec<Command>>,
    pending: VecDeque<Command>,
    deadline: Option<Timestamp>,
}

impl Core for Script {
    fn handle(&mut self, _now: Timestamp, input: Input) {
        let trigger = matches!(&input, Input::ApiResult { command: 0, .. });
        self.fed.push(input);
        if trigger && let Some(next) = self.issue.pop_front() {
            self.pending.extend(next);
        }
    }
    fn poll_command(&mut self) -> Option<Command> {
        self.pending.pop_front()
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.deadline
    }
    fn engine(&self) -> Option<&Engine> {
        None
    }
}

fn result(command: u64) -> Arrival {
    Arrival::Result {
        command,
        outcome: ApiOutcome::NotFound,
    }
}

fn at(ms: i64) -> Timestamp {
    Timestamp(ms)
}

fn key(kind: Kind, name: &str) -> ObjectKey {
    ObjectKey::new(Scope::Management, kind, "default", name)
}

fn command(id: u64, action: Action, owner: &str) -> Command {
    Command {
        id,
        cause: 0,
        controller: ControllerId::Deletion,
        owner: key(Kind::Machine, owner),
        action,
        reason: String::new(),
        series: None,
    }
}

fn target(kind: Kind, name: &str) -> Target {
    Target {
        key: key(kind, name),
        api_version: "v1".into(),
    }
}

fn evict(id: u64, machine: &str, pod: &str) -> Command {
    command(
        id,
        Action::Evict {
            pod: target(Kind::Pod, pod),
            grace_period_seconds: None,
        },
        machine,
    )
}

fn remove_finalizer(id: u64, machine: &str) -> Command {
    command(
        id,
        Action::RemoveFinalizer {
            target: target(Kind::Machine, machine),
            finalizer: "machine.cluster.x-k8s.io".into(),
        },
        machine,
    )
}

fn cordon(id: u64, machine: &str) -> Command {
    command(
        id,
        Action::Cordon {
            node: target(Kind::Node, machine),
        },
        machine,
    )
}

fn options(slots: usize) -> LoopOptions {
    LoopOptions {
        commands_in_flight_max: slots,
        ..LoopOptions::default()
    }
}

/// Drives the loop as a perfect journal would: every append succeeds. Returns the sends and
/// the inputs appended, in order.
fn run(lp: &mut Loop<Script>, now: Timestamp) -> (Vec<u64>, Vec<Input>) {
    let mut sent = Vec::new();
    let mut appended = Vec::new();
    for _ in 0..10_000 {
        match lp.poll_output(now) {
            Output::Append { input, .. } => {
                appended.push(input.clone());
                lp.appended(now, input, Ok(()));
            }
            Output::Send(c) => sent.push(c.id),
            Output::Wait(_) => return (sent, appended),
            _ => {}
        }
    }
    panic!("the loop never waited");
}

fn new_loop(slots: usize) -> Loop<Script> {
    let mut lp = Loop::new(Script::default(), options(slots));
    run(&mut lp, at(0));
    lp
}

#[test]
fn arrivals_pushed_before_a_poll_are_one_batch_of_at_most_the_cap() {
    let mut lp = Loop::new(
        Script::default(),
        LoopOptions {
            batch_inputs_max: 4,
            ..LoopOptions::default()
        },
    );
    run(&mut lp, at(0));
    for id in 1..=6 {
        lp.push(result(id));
    }
    let (_, appended) = run(&mut lp, at(1));
    let sizes: Vec<usize> = appended
        .iter()
        .map(|i| match i {
            Input::Batch { inputs } => inputs.len(),
            _ => 1,
        })
        .collect();
    assert_eq!(sizes, [4, 2]);
    assert_eq!(lp.core().fed, appended, "applied exactly as journaled");
    lp.push(result(7));
    let (_, appended) = run(&mut lp, at(2));
    assert!(
        matches!(appended.as_slice(), [Input::ApiResult { command: 7, .. }]),
        "a lone arrival is itself"
    );
}

#[test]
fn an_input_is_applied_only_once_journaled() {
    let mut lp = new_loop(8);
    lp.push(result(1));
    let Output::Append { input, .. } = lp.poll_output(at(1)) else {
        panic!("an append first");
    };
    assert!(
        lp.core().fed.is_empty(),
        "not applied before it is journaled"
    );
    lp.appended(at(1), input.clone(), Ok(()));
    assert_eq!(lp.core().fed, [input]);
}

#[test]
fn a_journal_that_fails_holds_every_input_and_command_until_it_is_reopened() {
    for journaled_anyway in [false, true] {
        let mut lp = new_loop(8);
        lp.core_mut().issue.push_back(vec![cordon(10, "m1")]);
        lp.push(result(1));
        run(&mut lp, at(1));
        // The next append fails: it and everything after it are held.
        lp.push(result(0));
        let Output::Append { at: t, input } = lp.poll_output(at(2)) else {
            panic!("an append");
        };
        lp.appended(at(2), input.clone(), Err("No space left on device".into()));
        assert_eq!(lp.journal_down(), Some("No space left on device"));
        lp.push(result(3));
        lp.handle_timeout(at(5));
        assert_eq!(lp.poll_output(at(5)), Output::Wait(Some(at(1002))));
        assert_eq!(lp.core().fed.len(), 1, "nothing applied while down");
        assert_eq!(lp.poll_output(at(1002)), Output::Reopen);
        assert_eq!(lp.poll_output(at(1003)), Output::Wait(None));
        lp.reopened(at(1003), Err("still full".into())).unwrap();
        assert_eq!(lp.poll_output(at(2003)), Output::Reopen);
        let unapplied = if journaled_anyway {
            vec![(t, input.clone())]
        } else {
            Vec::new()
        };
        lp.reopened(at(2003), Ok(unapplied)).unwrap();
        assert_eq!(lp.journal_down(), None);
        let (sent, appended) = run(&mut lp, at(2003));
        assert_eq!(sent, [10], "the command of the held input, once applied");
        let fed: Vec<u64> = lp
            .core()
            .fed
            .iter()
            .map(|i| match i {
                Input::ApiResult { command, .. } => *command,
                _ => 99,
            })
            .collect();
        assert_eq!(fed, [1, 0, 3], "every input once, in order");
        assert_eq!(
            appended.len(),
            if journaled_anyway { 1 } else { 2 },
            "what the journal held is not appended again"
        );
    }
}

#[test]
fn a_reopened_journal_holding_an_input_never_fed_is_refused() {
    let mut lp = new_loop(8);
    lp.push(result(1));
    let Output::Append { input, .. } = lp.poll_output(at(1)) else {
        panic!()
    };
    lp.appended(at(1), input, Err("full".into()));
    assert_eq!(lp.poll_output(at(1001)), Output::Reopen);
    let stranger = vec![(at(1), Input::Tick)];
    assert!(lp.reopened(at(1001), Ok(stranger)).is_err());
}

#[test]
fn at_most_the_cap_is_in_flight_and_the_most_urgent_waiting_command_goes_first() {
    let mut lp = new_loop(2);
    lp.core_mut().issue.push_back(vec![
        evict(10, "m1", "a"),
        cordon(11, "m2"),
        evict(12, "m3", "b"),
        cordon(13, "m4"),
        remove_finalizer(14, "m5"),
    ]);
    lp.push(result(0));
    let (sent, _) = run(&mut lp, at(1));
    assert_eq!(sent, [10, 11], "in the order issued while slots are free");
    assert_eq!((lp.commands_in_flight(), lp.commands_waiting()), (2, 3));
    lp.push(result(10));
    let (sent, _) = run(&mut lp, at(2));
    assert_eq!(sent, [14], "the finalizer removal overtakes");
    lp.push(result(11));
    lp.push(result(14));
    let (sent, _) = run(&mut lp, at(3));
    assert_eq!(sent, [13, 12], "then Normal before Bulk");
}

#[test]
fn a_drains_evictions_go_one_at_a_time_in_order_and_hold_nothing_else_back() {
    let mut lp = new_loop(8);
    lp.core_mut().issue.push_back(vec![
        evict(10, "m1", "a"),
        evict(11, "m1", "b"),
        evict(12, "m2", "c"),
        evict(13, "m1", "d"),
        cordon(14, "m3"),
    ]);
    lp.push(result(0));
    let (sent, _) = run(&mut lp, at(1));
    assert_eq!(
        sent,
        [10, 12, 14],
        "one eviction per drain; the cordon is not held"
    );
    lp.push(result(11)); // not sent: no effect
    lp.push(result(10));
    let (sent, _) = run(&mut lp, at(2));
    assert_eq!(sent, [11]);
    lp.push(result(11));
    let (sent, _) = run(&mut lp, at(3));
    assert_eq!(sent, [13]);
}

#[test]
fn ticks_are_spaced_even_when_the_deadline_stays_in_the_past() {
    let mut lp = new_loop(8);
    lp.core_mut().deadline = Some(at(0));
    let mut ticks = Vec::new();
    let mut now = at(100);
    for _ in 0..5 {
        lp.handle_timeout(now);
        let (_, appended) = run(&mut lp, now);
        if appended.contains(&Input::Tick) {
            ticks.push(now.as_millis());
        }
        match lp.poll_output(now) {
            Output::Wait(Some(t)) => now = t.max(now + Duration::from_millis(1)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ticks, [100, 110, 120, 130, 140]);
}

#[test]
fn a_command_for_a_cluster_not_connected_is_answered_unreachable_through_the_journal() {
    let mut lp = new_loop(8);
    let workload = Scope::Workload(ClusterName::new("default", "c1"));
    let mut c = cordon(10, "m1");
    c.action = Action::Cordon {
        node: Target {
            key: ObjectKey::new(workload, Kind::Node, "", "n1"),
            api_version: "v1".into(),
        },
    };
    lp.core_mut().issue.push_back(vec![c]);
    lp.push(result(0));
    let (sent, appended) = run(&mut lp, at(1));
    assert!(sent.is_empty());
    assert!(
        appended.iter().any(|i| matches!(
            i,
            Input::ApiResult {
                command: 10,
                outcome: ApiOutcome::Unreachable { .. }
            }
        )),
        "{appended:?}"
    );
}

#[test]
fn a_closed_loop_sends_nothing_more() {
    let mut lp = new_loop(1);
    lp.core_mut()
        .issue
        .push_back(vec![cordon(10, "m1"), cordon(11, "m2")]);
    lp.push(result(0));
    let (sent, _) = run(&mut lp, at(1));
    assert_eq!(sent, [10]);
    assert_eq!(lp.close(), 1);
    lp.push(result(10));
    let (sent, _) = run(&mut lp, at(2));
    assert!(sent.is_empty());
}

/// Drives a loop over a real engine as a perfect journal would; returns the inputs appended.
fn appended_by(lp: &mut Loop<Engine>, now: Timestamp) -> Vec<Input> {
    let mut appended = Vec::new();
    for _ in 0..10_000 {
        match lp.poll_output(now) {
            Output::Append { input, .. } => {
                appended.push(input.clone());
                lp.appended(now, input, Ok(()));
            }
            Output::Wait(_) => return appended,
            _ => {}
        }
    }
    panic!("the loop never waited");
}

fn unreachable_of(inputs: &[Input]) -> Vec<Option<crate::connection::Unreachable>> {
    let mut out = Vec::new();
    for input in inputs {
        match input {
            Input::ClusterUnreachable { reason, .. } => out.push(reason.clone()),
            Input::Batch { inputs } => out.extend(unreachable_of(inputs)),
            _ => {}
        }
    }
    out
}

/// Every management stream lists: the Cluster stream with `cluster`, the others nothing.
fn list_management_with(lp: &mut Loop<Engine>, cluster: serde_json::Value) {
    use crate::intake::mirror::StreamEvent;
    for key in crate::intake::streams::management_streams() {
        let mut push = |event| {
            lp.push(Arrival::Watch {
                scope: Scope::Management,
                stream: key.id(),
                event,
            })
        };
        push(StreamEvent::Init);
        if key.kind == "Cluster" {
            push(StreamEvent::InitApply(cluster.clone().into()));
        }
        push(StreamEvent::InitDone);
    }
}

/// A restarted process: the engine rebuilt from its journal knows c1 could not be reached.
/// Its connector failing the same way again is not news; connecting clears it.
#[test]
fn a_loop_over_a_rebuilt_engine_starts_from_what_it_knew_of_each_connection() {
    use crate::connection::Unreachable;
    let c1 = Scope::Workload(ClusterName::new("default", "c1"));
    let mut engine = Engine::new();
    engine.handle(
        at(0),
        Input::Relist {
            scope: Scope::Management,
            objects: vec![crate::model::Object::Cluster(crate::testing::cluster("c1"))],
        },
    );
    engine.handle(
        at(0),
        Input::ClusterUnreachable {
            scope: c1.clone(),
            reason: Some(Unreachable::SecretMissing),
        },
    );
    let mut lp = Loop::new(engine, LoopOptions::default());
    let cluster = serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": "default", "uid": "uid-default-c1", "resourceVersion": "1"}});
    list_management_with(&mut lp, cluster);
    appended_by(&mut lp, at(1));
    let failed = |reason| Arrival::ConnectFailed {
        scope: c1.clone(),
        reason,
    };
    lp.push(failed(Unreachable::SecretMissing));
    assert_eq!(unreachable_of(&appended_by(&mut lp, at(2))), []);
    lp.push(Arrival::Connected { scope: c1.clone() });
    assert_eq!(unreachable_of(&appended_by(&mut lp, at(3))), [None]);
    assert_eq!(lp.core().store().unreachable(&c1), None);
}

/// A process started in another ownership than the state it resumes journals the change
/// first, so a replay decides as the process did; one that resumes its own journals nothing.
#[test]
fn a_change_of_ownership_is_journaled_before_anything_else() {
    use crate::ownership::Ownership;
    let takeover = LoopOptions {
        mode: super::Mode::Takeover,
        ..LoopOptions::default()
    };
    let mut lp = Loop::new(Engine::new(), takeover.clone());
    let appended = appended_by(&mut lp, at(1));
    assert!(
        matches!(
            appended.first(),
            Some(Input::Ownership(Ownership::Takeover))
        ),
        "{appended:?}"
    );
    assert_eq!(
        lp.core().controllers().deletion.ownership(),
        Ownership::Takeover
    );
    let mut resumed = Loop::new(lp.core().clone(), takeover);
    assert!(
        !appended_by(&mut resumed, at(2))
            .iter()
            .any(|i| matches!(i, Input::Ownership(_))),
        "the state already runs in takeover"
    );
    let shadow = LoopOptions {
        mode: super::Mode::Shadow,
        ..LoopOptions::default()
    };
    let mut back = Loop::new(resumed.core().clone(), shadow);
    let appended = appended_by(&mut back, at(3));
    assert!(
        matches!(appended.first(), Some(Input::Ownership(Ownership::Alone))),
        "a shadow decides as if alone: {appended:?}"
    );
}

/// `--own-machines` is state like the ownership: journaled when it changes, not on a resume.
#[test]
fn a_change_of_owned_machines_is_journaled_at_start() {
    let blue = crate::model::LabelSelector::parse("pool=blue").unwrap();
    let takeover = LoopOptions {
        mode: super::Mode::Takeover,
        own_machines: Some(blue.clone()),
        ..LoopOptions::default()
    };
    let mut lp = Loop::new(Engine::new(), takeover.clone());
    let appended = appended_by(&mut lp, at(1));
    assert!(
        appended
            .iter()
            .any(|i| matches!(i, Input::OwnMachines(Some(s)) if *s == blue)),
        "{appended:?}"
    );
    assert_eq!(lp.core().controllers().deletion.own_machines(), Some(&blue));
    let mut resumed = Loop::new(lp.core().clone(), takeover.clone());
    assert!(
        !appended_by(&mut resumed, at(2))
            .iter()
            .any(|i| matches!(i, Input::OwnMachines(_))),
        "the state already owns those"
    );
    let default = LoopOptions {
        own_machines: None,
        ..takeover
    };
    let mut back = Loop::new(resumed.core().clone(), default);
    let appended = appended_by(&mut back, at(3));
    assert!(
        appended
            .iter()
            .any(|i| matches!(i, Input::OwnMachines(None))),
        "{appended:?}"
    );
    assert_eq!(back.core().controllers().deletion.own_machines(), None);
}

fn upserted_names(inputs: &[Input]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for input in inputs {
        match input {
            Input::Upsert { object, .. } => {
                out.push((object.meta().name.clone(), object.meta().resource_version))
            }
            Input::Batch { inputs } => out.extend(upserted_names(inputs)),
            _ => {}
        }
    }
    out
}

/// A watch event reporting an object at the version the cache holds (the answer to the
/// controllers' own write brought it) changes nothing: it is neither read nor journaled. A
/// newer version is, and so is every event while an object is unreadable.
#[test]
fn a_watch_event_of_a_version_the_cache_holds_is_not_journaled() {
    use crate::intake::mirror::StreamEvent;
    use crate::intake::streams::management_streams;
    let cluster = |rv: &str| {
        serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "default", "uid": "uid-default-c1", "resourceVersion": rv}})
    };
    let mut lp = Loop::new(Engine::new(), LoopOptions::default());
    let stream = |kind: &str| {
        management_streams()
            .into_iter()
            .find(|k| k.kind == kind)
            .unwrap()
            .id()
    };
    list_management_with(&mut lp, cluster("5"));
    appended_by(&mut lp, at(1));
    let event = |lp: &mut Loop<Engine>, value: serde_json::Value| {
        lp.push(Arrival::Watch {
            scope: Scope::Management,
            stream: stream("Cluster"),
            event: StreamEvent::Apply(value.into()),
        })
    };
    event(&mut lp, cluster("5"));
    event(&mut lp, cluster("4"));
    assert_eq!(upserted_names(&appended_by(&mut lp, at(2))), []);
    let mut bad = cluster("6");
    bad["spec"] = serde_json::json!({"paused": "yes"});
    event(&mut lp, bad);
    appended_by(&mut lp, at(3));
    assert!(lp.core().store().has_unreadable());
    event(&mut lp, cluster("5"));
    assert_eq!(
        upserted_names(&appended_by(&mut lp, at(4))),
        [("c1".to_string(), 5)],
        "while an object is unreadable every event reaches the store"
    );
    assert!(!lp.core().store().has_unreadable());
    event(&mut lp, cluster("7"));
    assert_eq!(
        upserted_names(&appended_by(&mut lp, at(5))),
        [("c1".to_string(), 7)]
    );
    // A version that is not a number orders nothing: read as before.
    event(&mut lp, cluster("six"));
    assert_eq!(
        upserted_names(&appended_by(&mut lp, at(6))),
        [("c1".to_string(), 0)]
    );
}

/// An object that does not read is handed out once, right after the append of the input that
/// read it (before the commands that input causes), and the loop keeps nothing of it.
#[test]
fn an_unreadable_object_is_handed_out_once_after_the_append_that_read_it() {
    use crate::intake::mirror::StreamEvent;
    let cluster = serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": "default", "uid": "u1", "resourceVersion": "5"}});
    let mut lp = Loop::new(Engine::new(), LoopOptions::default());
    list_management_with(&mut lp, cluster.clone());
    appended_by(&mut lp, at(1));
    let mut bad = cluster;
    bad["metadata"]["resourceVersion"] = "6".into();
    bad["spec"] = serde_json::json!({"paused": "yes"});
    lp.push(Arrival::Watch {
        scope: Scope::Management,
        stream: crate::intake::streams::stream_id(crate::convert::CAPI_GROUP, "Cluster"),
        event: StreamEvent::Apply(bad.into()),
    });
    let Output::Append { input, .. } = lp.poll_output(at(2)) else {
        panic!("the event is journaled first");
    };
    assert_eq!(lp.unreadable_retained(), 1);
    lp.appended(at(2), input, Ok(()));
    match lp.poll_output(at(2)) {
        Output::Unreadable(u) => {
            assert_eq!(
                (u.kind, u.error.path.as_str()),
                (Kind::Cluster, "spec.paused")
            );
            assert_eq!(u.object["metadata"]["resourceVersion"], "6");
        }
        other => panic!("expected the unreadable Cluster, got {other:?}"),
    }
    assert!(matches!(lp.poll_output(at(2)), Output::Wait(_)));
    assert_eq!(lp.unreadable_retained(), 0);
}
