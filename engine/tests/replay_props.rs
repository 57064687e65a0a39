//! Property: any sequence of inputs, journaled and replayed (from scratch or from a snapshot),
//! rebuilds an engine with the same state hash as the live one.

use engine::journal::{Durability, Journal, JournalOptions};
use engine::model::{ConditionStatus, Object, PRE_DRAIN_HOOK_PREFIX, Scope};
use engine::recovery;
use engine::testing::*;
use engine::{ApiOutcome, Engine, Input, Timestamp};
use proptest::prelude::*;
use std::collections::VecDeque;

/// What the world does next; the driver turns it into an input against the live engine.
#[derive(Clone, Debug)]
enum Op {
    DeleteMachine(u8),
    ToggleHook(u8),
    NodeReady(u8, bool),
    PodGone(u8),
    Answer(u8),
    Advance(u16),
    Restart,
    Snapshot,
    /// Starts collecting inputs into one `Input::Batch`, or feeds the batch collected so far.
    ToggleBatch,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3).prop_map(Op::DeleteMachine),
        (0u8..3).prop_map(Op::ToggleHook),
        (0u8..3, any::<bool>()).prop_map(|(n, r)| Op::NodeReady(n, r)),
        (0u8..6).prop_map(Op::PodGone),
        (0u8..5).prop_map(Op::Answer),
        (1u16..600).prop_map(Op::Advance),
        Just(Op::Restart),
        Just(Op::Snapshot),
        Just(Op::ToggleBatch),
    ]
}

fn starting_world() -> Vec<(Scope, Object)> {
    let w = workload("c1");
    let mut objects = vec![
        (Scope::Management, Object::Cluster(cluster("c1"))),
        (
            Scope::Management,
            Object::Machine(control_plane_machine("c1", "cp", Some("cp"))),
        ),
        (w.clone(), Object::Node(node("cp"))),
        (w.clone(), Object::Namespace(namespace("app"))),
    ];
    for i in 0..3 {
        let name = format!("m{i}");
        objects.push((
            Scope::Management,
            Object::Machine(machine("c1", &name, Some(&format!("n{i}")))),
        ));
        objects.push((Scope::Management, Object::External(infra_machine(&name))));
        objects.push((Scope::Management, Object::External(bootstrap_config(&name))));
        objects.push((w.clone(), Object::Node(node(&format!("n{i}")))));
        for p in 0..2 {
            objects.push((
                w.clone(),
                Object::Pod(pod("app", &format!("p{i}{p}"), &format!("n{i}"))),
            ));
        }
    }
    objects
}

struct Live {
    engine: Engine,
    journal: Journal,
    now: Timestamp,
    outstanding: VecDeque<u64>,
    objects: Vec<(Scope, Object)>,
    batch: Option<Vec<Input>>,
}

impl Live {
    fn feed(&mut self, input: Input) {
        match &mut self.batch {
            Some(batch) => batch.push(input),
            None => self.handle(input),
        }
    }

    fn toggle_batch(&mut self) {
        match self.batch.take() {
            Some(inputs) => self.handle(Input::Batch { inputs }),
            None => self.batch = Some(Vec::new()),
        }
    }

    fn handle(&mut self, input: Input) {
        let payload = recovery::encode_input(&input);
        self.journal.append(self.now, &payload).unwrap();
        self.engine.handle(self.now, input);
        while let Some(c) = self.engine.poll_command() {
            self.outstanding.push_back(c.id);
        }
    }

    fn upsert(&mut self, index: usize, change: impl FnOnce(&mut Object)) {
        let (scope, mut object) = self.objects[index].clone();
        change(&mut object);
        bump(&mut object);
        self.objects[index] = (scope.clone(), object.clone());
        self.feed(Input::Upsert {
            scope,
            object: Box::new(object),
        });
    }
}

fn bump(o: &mut Object) {
    let meta = match o {
        Object::Machine(m) => &mut m.meta,
        Object::Node(n) => &mut n.meta,
        Object::Pod(p) => &mut p.meta,
        _ => return,
    };
    meta.resource_version += 1;
}

fn find(objects: &[(Scope, Object)], name: &str) -> Option<usize> {
    objects.iter().position(|(_, o)| o.meta().name == name)
}

/// Runs `ops`; with `retention`, the journal keeps one snapshot and retires the records before
/// it. Returns the records retired.
fn run(ops: &[Op], retention: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        durability: Durability::Buffered,
        snapshots_kept: 1,
        retire_records: retention,
        ..Default::default()
    };
    let (journal, _) = Journal::open(dir.path(), options.clone()).unwrap();
    let mut live = Live {
        engine: Engine::new(),
        journal,
        now: Timestamp(1_704_067_200_000),
        outstanding: VecDeque::new(),
        objects: starting_world(),
        batch: None,
    };
    let mut by_scope: std::collections::BTreeMap<Scope, Vec<Object>> = Default::default();
    for (s, o) in &live.objects {
        by_scope.entry(s.clone()).or_default().push(o.clone());
    }
    for (scope, objects) in by_scope {
        live.feed(Input::Relist { scope, objects });
    }
    for op in ops {
        match op {
            Op::DeleteMachine(i) => {
                if let Some(ix) = find(&live.objects, &format!("m{i}")) {
                    let now = live.now;
                    live.upsert(ix, |o| {
                        if let Object::Machine(m) = o {
                            m.meta.deletion_timestamp.get_or_insert(now);
                        }
                    });
                }
            }
            Op::ToggleHook(i) => {
                if let Some(ix) = find(&live.objects, &format!("m{i}")) {
                    live.upsert(ix, |o| {
                        if let Object::Machine(m) = o {
                            let key = format!("{PRE_DRAIN_HOOK_PREFIX}/test");
                            if m.meta.annotations.remove(&key).is_none() {
                                m.meta.annotations.insert(key, "owner".into());
                            }
                        }
                    });
                }
            }
            Op::NodeReady(i, ready) => {
                if let Some(ix) = find(&live.objects, &format!("n{i}")) {
                    let now = live.now;
                    live.upsert(ix, |o| {
                        if let Object::Node(n) = o {
                            let status = if *ready {
                                ConditionStatus::True
                            } else {
                                ConditionStatus::Unknown
                            };
                            n.conditions = vec![ready_condition(status, now)];
                        }
                    });
                }
            }
            Op::PodGone(i) => {
                let name = format!("p{}{}", i / 2, i % 2);
                if let Some(ix) = find(&live.objects, &name) {
                    let (scope, object) = live.objects.remove(ix);
                    live.feed(Input::Delete {
                        key: object.key(&scope),
                    });
                }
            }
            Op::Answer(kind) => {
                if let Some(id) = live.outstanding.pop_front() {
                    let outcome = match kind {
                        0 | 1 => ApiOutcome::Ok { object: None },
                        2 => ApiOutcome::NotFound,
                        3 => engine::testing::too_many_requests("pdb"),
                        _ => ApiOutcome::Unreachable {
                            message: "down".into(),
                        },
                    };
                    live.feed(Input::ApiResult {
                        command: id,
                        outcome,
                    });
                }
            }
            Op::Advance(secs) => {
                live.now = live.now + engine::Duration::from_secs(i64::from(*secs));
                if live.engine.next_deadline().is_some_and(|d| d <= live.now) {
                    live.feed(Input::Tick);
                }
            }
            Op::Restart => {
                live.outstanding.clear();
                live.feed(Input::Restarted);
            }
            Op::ToggleBatch => live.toggle_batch(),
            Op::Snapshot => {
                let seq = live.engine.applied_seq();
                live.journal
                    .write_snapshot(seq, live.now, &live.engine.encode_state())
                    .unwrap();
            }
        }
    }
    let live_hash = live.engine.state_hash();
    let restored = recovery::restore(&live.journal).unwrap();
    assert_eq!(
        restored.engine.state_hash(),
        live_hash,
        "restore from the latest snapshot"
    );
    let retired = live.journal.retired_through();
    if retired == 0 {
        let mut scratch = Engine::new();
        recovery::replay_into(&mut scratch, &live.journal).unwrap();
        assert_eq!(
            scratch.state_hash(),
            live_hash,
            "replay from the first record"
        );
        assert_eq!(scratch, live.engine);
    } else {
        let verified = recovery::verify(&live.journal);
        assert!(verified.is_clean(), "{:?}", verified.problems);
        assert_eq!(verified.retired_through, retired);
        // A restart: the journal reopened from disk rebuilds the same engine.
        live.journal.flush().unwrap();
        drop(live.journal);
        let (journal, report) = Journal::open(dir.path(), options).unwrap();
        assert_eq!(report.retired_through, retired);
        let restored = recovery::restore(&journal).unwrap();
        assert_eq!(restored.engine, live.engine, "restore after a restart");
    }
    retired
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn replay_rebuilds_the_live_engine_exactly(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops, false);
    }

    /// Retention never changes what a restart rebuilds.
    #[test]
    fn replay_with_retention_rebuilds_the_live_engine_exactly(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        run(&ops, true);
    }
}

/// The same inputs with and without retention restore the same engine, and retention did
/// retire records (so the property above is not vacuous).
#[test]
fn retention_retires_records_and_restores_the_same_engine() {
    let mut ops = Vec::new();
    for round in 0..40u8 {
        ops.extend([
            Op::NodeReady(round % 3, round % 2 == 0),
            Op::Advance(30),
            Op::ToggleHook(round % 3),
            Op::Answer(round % 5),
        ]);
        if round % 5 == 4 {
            ops.push(Op::Snapshot);
        }
    }
    ops.push(Op::DeleteMachine(1));
    ops.push(Op::Snapshot);
    ops.push(Op::Advance(5));
    assert_eq!(run(&ops, false), 0);
    assert!(run(&ops, true) > 0, "nothing was retired");
}
