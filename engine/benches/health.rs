//! MachineHealthCheck cost at fleet scale: a full evaluation of one MHC over 10 000 targets
//! (from the targets' views, and from the store), and the incremental re-evaluation after one
//! Node changes (at 1 000 and 10 000 targets, to show it does not grow with the fleet).
//!
//! `cargo bench -p engine --bench health`

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use engine::health::HealthChecks;
use engine::model::*;
use engine::store::Store;
use engine::testing;
use engine::time::{Duration, Timestamp};
use engine::{Engine, Input};
use std::hint::black_box;

const NOW: Timestamp = Timestamp(1_704_067_200_000);

fn name(i: usize) -> String {
    format!("m{i:05}")
}

/// A steady fleet: every Machine already carries the conditions the MHC would write, and the
/// MHC's status is up to date, so an evaluation that finds nothing new issues nothing.
fn fleet(n: usize) -> (Vec<Object>, Vec<Object>, ObjectKey) {
    let mut mgmt = vec![Object::Cluster(testing::ready_cluster("c1"))];
    let mut nodes = Vec::with_capacity(n);
    let mut mhc = testing::machine_health_check("c1", "mhc");
    mhc.status = MachineHealthCheckStatus {
        expected_machines: Some(n as i32),
        current_healthy: Some(n as i32),
        remediations_allowed: Some(n as i32),
        targets: (0..n).map(name).collect(),
    };
    mhc.conditions.current.push(Condition::new(
        "RemediationAllowed",
        ConditionStatus::True,
        "RemediationAllowed",
        "",
    ));
    mhc.conditions.legacy.push(Condition::new(
        "RemediationAllowed",
        ConditionStatus::True,
        "",
        "",
    ));
    mgmt.push(Object::MachineHealthCheck(mhc));
    for i in 0..n {
        let mut m = testing::machine("c1", &name(i), Some(&name(i)));
        m.conditions.current.push(Condition::new(
            "HealthCheckSucceeded",
            ConditionStatus::True,
            "HealthCheckSucceeded",
            "",
        ));
        m.conditions.legacy.push(Condition::new(
            "HealthCheckSucceeded",
            ConditionStatus::True,
            "",
            "",
        ));
        mgmt.push(Object::Machine(m));
        nodes.push(Object::Node(testing::node(&name(i))));
    }
    let key = ObjectKey::management(Kind::MachineHealthCheck, "default", "mhc");
    (mgmt, nodes, key)
}

/// Runs `setup` then times `run`, 200 times; prints the minimum and median.
fn print_min_median<S, T>(
    label: &str,
    s: &mut S,
    setup: impl Fn(&mut S),
    run: impl Fn(&mut S) -> T,
) {
    let mut samples: Vec<std::time::Duration> = (0..200)
        .map(|_| {
            setup(s);
            let start = std::time::Instant::now();
            black_box(run(s));
            start.elapsed()
        })
        .collect();
    samples.sort();
    println!(
        "{label}: min {:?}, median {:?} over {} runs",
        samples[0],
        samples[samples.len() / 2],
        samples.len()
    );
}

fn full_evaluation(c: &mut Criterion) {
    let (mgmt, nodes, key) = fleet(10_000);
    let mut store = Store::default();
    store.replace_scope(&Scope::Management, mgmt);
    store.replace_scope(&testing::workload("c1"), nodes);
    let mut health = HealthChecks::default();
    let first = testing::reconcile(&mut health, &store, &key, NOW);
    assert!(first.is_empty(), "steady fleet: {first:?}");
    // Criterion's mean suffers on a shared machine; the minimum over many runs is printed too.
    let reconcile = |h: &mut HealthChecks| testing::reconcile(h, &store, &key, NOW);
    print_min_median(
        "mhc full evaluation, 10000 targets",
        &mut health,
        |h| h.invalidate(&key),
        reconcile,
    );
    print_min_median(
        "mhc full evaluation from the store, 10000 targets",
        &mut health,
        |h| {
            h.invalidate(&key);
            h.forget_views(&key);
        },
        reconcile,
    );
    c.bench_function("mhc full evaluation, 10000 targets", |b| {
        b.iter(|| {
            health.invalidate(&key);
            let commands = testing::reconcile(&mut health, &store, &key, NOW);
            debug_assert!(commands.is_empty());
            black_box(commands)
        })
    });
    // The same pass without the targets' views, as after a change of the selector or of the
    // checked condition types, or on the first pass of a decoded engine: every Machine and
    // Node is read from the store.
    c.bench_function("mhc full evaluation from the store, 10000 targets", |b| {
        b.iter(|| {
            health.invalidate(&key);
            health.forget_views(&key);
            let commands = testing::reconcile(&mut health, &store, &key, NOW);
            debug_assert!(commands.is_empty());
            black_box(commands)
        })
    });
}

/// One Node flips Ready True -> False -> True (pending, then healthy again): each flip is an
/// `Engine::handle` of one Node upsert, through routing, the Machine mark and the MHC's
/// incremental reconcile (which patches `currentHealthy`).
fn node_change(c: &mut Criterion) {
    for n in [1_000, 10_000] {
        let (mgmt, nodes, _) = fleet(n);
        let (mut engine, first) = testing::synced_engine(
            NOW,
            mgmt.into_iter()
                .map(|o| (Scope::Management, o))
                .chain(nodes.into_iter().map(|o| (testing::workload("c1"), o)))
                .collect(),
        );
        assert!(first.is_empty(), "steady fleet");
        let target = name(n / 2);
        let mut flip = 0_i64;
        c.bench_function(&format!("mhc one node change, {n} targets"), |b| {
            b.iter_batched(
                || {
                    flip += 1;
                    let mut node = testing::node(&target);
                    node.meta.resource_version = 0;
                    let status = if flip % 2 == 0 {
                        ConditionStatus::True
                    } else {
                        ConditionStatus::False
                    };
                    node.conditions = vec![testing::ready_condition(
                        status,
                        NOW.saturating_add(Duration::from_secs(flip)),
                    )];
                    let input = Input::Upsert {
                        scope: testing::workload("c1"),
                        object: Box::new(Object::Node(node)),
                    };
                    (NOW.saturating_add(Duration::from_secs(flip)), input)
                },
                |(now, input)| {
                    engine.handle(now, input);
                    black_box(testing::drain_commands(&mut engine))
                },
                BatchSize::SmallInput,
            )
        });
        black_box(Engine::state_hash(&engine));
    }
}

criterion_group!(benches, full_evaluation, node_change);
criterion_main!(benches);
