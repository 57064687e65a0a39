//! The reconcile budget and the checks of `Engine::handle`, each made to fire.

use super::checks::Before;
use super::*;
use crate::command::ControllerId;
use crate::controller::Intent;
use crate::model::{Kind, Object};
use crate::testing::{bootstrap_config, cluster, drain_commands, infra_machine, machine};
use crate::time::Duration;

/// A test's reconcile budget: lower than the real one, and whether running out is expected
/// (it is a bug otherwise, and a debug build stops).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Budget {
    max: Option<usize>,
    exhaustion_expected: bool,
}

impl Engine {
    pub(super) fn reconciles_per_input_max(&self) -> usize {
        self.budget.max.unwrap_or(RECONCILES_PER_INPUT_MAX)
    }

    pub(super) fn budget_exhaustion_expected(&self) -> bool {
        self.budget.exhaustion_expected
    }

    /// For tests that corrupt a controller's memory to make its checks fire.
    pub(crate) fn controllers_mut(&mut self) -> &mut Controllers {
        &mut self.controllers
    }
}

const T0: Timestamp = Timestamp(1_704_067_200_000);

/// Cluster c1 with `n` deleting Machines (no Nodes), each with its providers; both caches
/// synced.
fn deleting_machines(n: usize) -> Input {
    let mut objects = vec![Object::Cluster(cluster("c1"))];
    for i in 0..n {
        let name = format!("m{i}");
        let mut m = machine("c1", &name, None);
        m.meta.deletion_timestamp = Some(T0);
        objects.push(Object::Machine(m));
        objects.push(Object::External(infra_machine(&name)));
        objects.push(Object::External(bootstrap_config(&name)));
    }
    let workload = Input::Relist {
        scope: crate::testing::workload("c1"),
        objects: Vec::new(),
    };
    let management = Input::Relist {
        scope: Scope::Management,
        objects,
    };
    Input::Batch {
        inputs: vec![workload, management],
    }
}

/// What the commands do, without their ids and causes (which differ between the runs).
fn actions(commands: &[Command]) -> BTreeSet<String> {
    commands
        .iter()
        .map(|c| format!("{:?} {:?}", c.controller, c.action))
        .collect()
}

#[test]
fn keys_left_when_the_budget_runs_out_are_reconciled_by_the_next_inputs() {
    let _mark = crate::mark::check("reconcile_budget_exhausted");
    let mut unlimited = Engine::new();
    unlimited.handle(T0, deleting_machines(5));
    let expected = actions(&drain_commands(&mut unlimited));
    assert!(expected.len() >= 5, "{expected:?}");
    let reconciles: u64 = unlimited.counters().reconciles.iter().sum();
    assert!(reconciles > 4, "{reconciles} reconciles");

    let mut engine = Engine::new();
    engine.budget = Budget {
        max: Some(2),
        exhaustion_expected: true,
    };
    engine.handle(T0, deleting_machines(5));
    let mut commands = drain_commands(&mut engine);
    assert_eq!(engine.counters().reconcile_budget_exhausted, 1);
    assert_eq!(engine.counters().reconciles.iter().sum::<u64>(), 2);
    assert_eq!(
        engine.next_deadline(),
        Some(T0),
        "the rest is wanted at once"
    );
    let mut ticks = 0;
    while engine.carried.iter().any(|keys| !keys.is_empty()) {
        engine.handle(T0, Input::Tick);
        commands.extend(drain_commands(&mut engine));
        ticks += 1;
        assert!(ticks < 100, "the carried keys never ran out");
    }
    assert_eq!(
        engine.counters().reconciles.iter().sum::<u64>(),
        reconciles,
        "each key reconciled once"
    );
    assert_eq!(actions(&commands), expected);
}

#[test]
#[should_panic(expected = "reconcile budget exhausted for input #1 with")]
fn running_out_of_the_budget_stops_a_debug_build() {
    let mut engine = Engine::new();
    engine.budget.max = Some(2);
    engine.handle(T0, deleting_machines(5));
}

#[test]
#[should_panic(expected = "before input #2: ")]
fn a_reconcile_waiting_on_an_intent_not_in_flight_stops_the_next_input() {
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(1));
    let key = ObjectKey::management(Kind::Machine, "default", "gone");
    let intent = Intent {
        action: crate::ActionKind::PatchStatus,
        target: key.clone(),
    };
    engine
        .effects
        .corrupt_wait(intent, (ControllerId::Deletion, key));
    engine.handle(T0, Input::Tick);
}

#[test]
#[should_panic(expected = "input sequence numbers exhausted")]
fn sequence_numbers_run_out_in_a_debug_build_only_by_corruption() {
    let mut engine = Engine::new();
    engine.applied_seq = u64::MAX;
    engine.handle(T0, Input::Tick);
}

#[test]
fn a_deadline_still_due_after_a_tick_is_a_violation() {
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(1));
    let first = drain_commands(&mut engine).remove(0);
    // A failed write is retried after its backoff: a deadline.
    engine.handle(
        T0,
        Input::ApiResult {
            command: first.id,
            outcome: crate::ApiOutcome::Unreachable {
                message: "down".into(),
            },
        },
    );
    let due = engine.next_deadline().expect("a retry after the backoff");
    assert!(due > T0);
    let before = Before {
        applied_seq: engine.applied_seq - 1,
        now: T0,
    };
    assert_eq!(engine.violation(&before, true), None);
    // As if a Tick at `due` had left the timer in place.
    engine.now = due;
    let violation = engine.violation(&before, true).unwrap_or_default();
    assert!(violation.contains("still due"), "{violation:?}");
    assert_eq!(engine.violation(&before, false), None, "only a Tick takes");
}

#[test]
fn a_lost_input_or_time_going_back_is_a_violation() {
    let mut engine = Engine::new();
    engine.handle(T0, Input::Tick);
    let at = |applied_seq: u64, now: Timestamp| Before { applied_seq, now };
    assert_eq!(engine.violation(&at(0, T0), false), None);
    for before in [at(1, T0), at(0, T0.saturating_add(Duration::from_secs(1)))] {
        let violation = engine.violation(&before, false).unwrap_or_default();
        assert!(violation.contains("input #1 at"), "{violation:?}");
    }
}

#[test]
fn an_answer_to_a_command_forgotten_at_a_restart_changes_nothing() {
    let _mark = crate::mark::check("result_for_a_command_not_in_flight");
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(1));
    let first = drain_commands(&mut engine).remove(0);
    engine.handle(T0, Input::Restarted);
    assert_eq!(engine.in_flight_len(), 0);
    let store = engine.store().clone();
    engine.handle(
        T0,
        Input::ApiResult {
            command: first.id,
            outcome: crate::ApiOutcome::Ok { object: None },
        },
    );
    assert_eq!(engine.store(), &store);
    assert_eq!(engine.in_flight_len(), 0);
}

/// A restart forgets which caches are synced: nothing destructive goes out until the relists.
#[test]
fn after_a_restart_destructive_commands_wait_for_the_relists() {
    let Input::Batch { mut inputs } = deleting_machines(1) else {
        unreachable!("a batch")
    };
    let Some(Input::Relist { objects, .. }) = inputs.last_mut() else {
        unreachable!("the management relist last")
    };
    for object in objects.iter_mut() {
        if let Object::Machine(m) = object {
            m.provider_id = None;
        }
    }
    let destructive = |commands: Vec<Command>| {
        commands
            .into_iter()
            .filter(|c| c.action.is_destructive())
            .count()
    };
    let mut engine = Engine::new();
    engine.handle(
        T0,
        Input::Batch {
            inputs: inputs.clone(),
        },
    );
    assert!(destructive(drain_commands(&mut engine)) > 0);
    engine.handle(T0, Input::Restarted);
    assert_eq!(destructive(drain_commands(&mut engine)), 0, "held");
    engine.handle(T0, Input::Batch { inputs });
    assert!(
        destructive(drain_commands(&mut engine)) > 0,
        "issued after the relist"
    );
}

#[test]
fn each_controller_sits_in_the_slot_of_its_id() {
    let mut controllers = Controllers::default();
    for (slot, controller) in controllers.all_mut().into_iter().enumerate() {
        assert_eq!(controller.id().slot(), slot, "{:?}", controller.id());
    }
}

/// Within one input the dirty keys reconcile slot by slot: Machines (deletion), then
/// MachineSets (owner remediation), then MHCs, then MachinePools. A MachineSet decides on the
/// Machines as this input left them, before an MHC writes; the order is the slots', not a
/// derived order of kinds.
#[test]
fn machines_reconcile_before_machine_sets_and_mhcs_within_an_input() {
    let mut controllers = Controllers::default();
    let order: Vec<ControllerId> = controllers.all_mut().iter().map(|c| c.id()).collect();
    assert_eq!(
        order,
        [
            ControllerId::Deletion,
            ControllerId::Remediation,
            ControllerId::Health,
            ControllerId::Pool
        ]
    );
}

/// A reconcile that handles its command's API error counts as an error, once per failed
/// answer; one that handles a success, a 404 or a PDB's refusal of an eviction does not.
#[test]
fn a_reconcile_handling_a_failed_command_counts_as_an_error() {
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(2));
    let mut commands = drain_commands(&mut engine);
    assert!(commands.len() >= 2, "{commands:?}");
    let errors = |e: &Engine| e.counters().errors.iter().sum::<u64>();
    let reconciles = |e: &Engine| e.counters().reconciles.iter().sum::<u64>();
    assert_eq!(errors(&engine), 0);
    let answer = |engine: &mut Engine, command: &Command, outcome: crate::ApiOutcome| {
        let before = reconciles(engine);
        engine.handle(
            T0,
            Input::ApiResult {
                command: command.id,
                outcome,
            },
        );
        assert!(reconciles(engine) > before, "the answer is reconciled");
    };
    let failed = commands.remove(0);
    answer(
        &mut engine,
        &failed,
        crate::ApiOutcome::Error {
            code: 500,
            message: "etcd timeout".into(),
        },
    );
    assert_eq!(errors(&engine), 1, "{:?}", failed.action);
    let slot = failed.controller.slot();
    assert_eq!(engine.counters().errors[slot], 1);
    assert!(engine.counters().failing.iter().all(BTreeSet::is_empty));
    let ok = commands.remove(0);
    answer(&mut engine, &ok, crate::ApiOutcome::Ok { object: None });
    assert_eq!(errors(&engine), 1, "a success is no error");
    engine.handle(T0, Input::Tick);
    assert_eq!(errors(&engine), 1, "counted once");
}

#[test]
fn which_answers_are_reconcile_errors() {
    use crate::ApiOutcome;
    use crate::metrics::is_reconcile_error;
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(1));
    let commands = drain_commands(&mut engine);
    let other = &commands[0].action;
    assert!(!matches!(other, Action::Evict { .. }), "{other:?}");
    let evict = Action::Evict {
        pod: crate::command::Target {
            key: ObjectKey::management(Kind::Machine, "app", "web-1"),
            api_version: "v1".into(),
        },
        grace_period_seconds: None,
    };
    let refused = crate::testing::too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    let terminating = crate::testing::forbidden("namespace app is terminating", true);
    let forbidden = crate::testing::forbidden("RBAC", false);
    let conflict = ApiOutcome::Conflict {
        message: "the object has been modified".into(),
    };
    for (action, outcome, error) in [
        (other, ApiOutcome::Ok { object: None }, false),
        (other, ApiOutcome::NotFound, false),
        (other, refused.clone(), true),
        (&evict, refused, false),
        (&evict, terminating.clone(), false),
        (other, terminating, true),
        (&evict, forbidden.clone(), true),
        (other, forbidden, true),
        (other, conflict, true),
        (
            other,
            ApiOutcome::Unreachable {
                message: "connection refused".into(),
            },
            true,
        ),
    ] {
        assert_eq!(
            is_reconcile_error(action, &outcome),
            error,
            "{action:?} {outcome:?}"
        );
    }
}

fn unreachable_c1(reason: Option<crate::connection::Unreachable>) -> Input {
    Input::ClusterUnreachable {
        scope: crate::testing::workload("c1"),
        reason,
    }
}

/// Everything but the table of unreachable clusters, in the order the state encodes it:
/// the layout every snapshot had before the table existed.
#[derive(Serialize)]
struct WithoutTable<'a> {
    applied_seq: u64,
    now: Timestamp,
    store: &'a Store,
    controllers: &'a Controllers,
    effects: &'a Effects,
    carried: &'a [BTreeSet<ObjectKey>; ControllerId::COUNT],
}

fn without_table(e: &Engine) -> Vec<u8> {
    codec::encode(&WithoutTable {
        applied_seq: e.applied_seq,
        now: e.now,
        store: &e.store,
        controllers: &e.controllers,
        effects: &e.effects,
        carried: &e.carried,
    })
    .unwrap()
}

#[test]
fn the_unreachable_table_is_encoded_after_everything_else_and_only_when_it_has_an_entry() {
    use crate::connection::Unreachable;
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(1));
    // None: the same bytes as before the table existed (snapshots written so far decode).
    let before = engine.encode_state();
    assert_eq!(before, without_table(&engine));
    assert_eq!(
        Engine::decode_state(&before).unwrap().encode_state(),
        before
    );

    engine.handle(T0, unreachable_c1(Some(Unreachable::SecretMissing)));
    let with = engine.encode_state();
    let prefix = without_table(&engine);
    assert_eq!(&with[..prefix.len()], &prefix[..], "the table comes last");
    assert!(with.len() > prefix.len());
    let decoded = Engine::decode_state(&with).unwrap();
    assert_eq!(decoded.encode_state(), with);
    assert_eq!(
        decoded.store().unreachable(&crate::testing::workload("c1")),
        Some(&Unreachable::SecretMissing)
    );
    assert_ne!(
        engine.state_hash(),
        Engine::decode_state(&prefix).unwrap().state_hash()
    );
    // A table cut short, or behind another mark, is refused, never read as no table.
    assert!(Engine::decode_state(&with[..with.len() - 1]).is_err());
    assert!(Engine::decode_state(&with[..prefix.len() + 1]).is_err());
    let mut marked = with.clone();
    marked[prefix.len()] = 2;
    assert!(Engine::decode_state(&marked).is_err());

    engine.handle(T0, unreachable_c1(None));
    assert_eq!(engine.encode_state(), without_table(&engine));
}

#[test]
fn an_unreachable_cluster_is_forgotten_when_it_connects_or_its_cluster_is_gone() {
    use crate::connection::Unreachable;
    let c1 = crate::testing::workload("c1");
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(0));
    engine.handle(T0, unreachable_c1(Some(Unreachable::NoValue)));
    assert_eq!(engine.store().unreachable(&c1), Some(&Unreachable::NoValue));
    engine.handle(T0, unreachable_c1(None));
    assert_eq!(engine.store().unreachable(&c1), None);

    engine.handle(T0, unreachable_c1(Some(Unreachable::NoValue)));
    // A cluster nobody names any more: nothing waits on it, and it is not kept.
    engine.handle(
        T0,
        Input::Delete {
            key: ObjectKey::management(Kind::Cluster, "default", "c1"),
        },
    );
    assert!(engine.store().unreachable_clusters().is_empty());
    // Nor is a report about a Cluster the engine never saw.
    let c2 = Input::ClusterUnreachable {
        scope: crate::testing::workload("c2"),
        reason: Some(Unreachable::SecretMissing),
    };
    engine.handle(T0, c2);
    assert!(engine.store().unreachable_clusters().is_empty());
}

/// A failed write's backoff paces the next try at its target; the target's removal ends it
/// (nothing writes to it again), so a fleet that churns keeps none of the Machines gone.
#[test]
fn the_backoff_of_a_failed_write_goes_with_its_target() {
    let backoffs = |e: &Engine| crate::census::Census::of(e).entries("effects.backoffs");
    let mut engine = Engine::new();
    engine.handle(T0, deleting_machines(1));
    let failed = drain_commands(&mut engine).remove(0);
    engine.handle(
        T0,
        Input::ApiResult {
            command: failed.id,
            outcome: crate::ApiOutcome::Error {
                code: 500,
                message: "etcd timeout".into(),
            },
        },
    );
    assert_eq!(backoffs(&engine), 1, "{:?}", failed.action);
    let key = failed.action.target().key.clone();
    engine.handle(T0, Input::Delete { key });
    assert_eq!(backoffs(&engine), 0);
}
