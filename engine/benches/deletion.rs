//! Deletion benchmarks: drain planning for one Node with 500 pods, and engine throughput on a
//! deletion-heavy input stream (no journal I/O).
//!
//! `cargo bench -p engine --bench deletion`

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use engine::drain::{self, DrainContext, DrainPlan, PodDrain};
use engine::model::*;
use engine::store::Store;
use engine::testing::*;
use engine::time::Timestamp;
use engine::{Engine, Input};
use std::collections::BTreeMap;
use std::hint::black_box;

const T0: Timestamp = Timestamp(1_704_067_200_000);

fn drain_planning(c: &mut Criterion) {
    let scope = workload("c1");
    let mut store = Store::default();
    store.upsert(&scope, Object::Namespace(namespace("app")));
    for i in 0..500 {
        let mut p = pod("app", &format!("web-{i:03}"), "n1");
        if i % 10 == 0 {
            p.meta.deletion_timestamp = Some(T0);
        }
        store.upsert(&scope, Object::Pod(p));
    }
    let mut group = c.benchmark_group("drain");
    group.throughput(Throughput::Elements(500));
    group.bench_function("plan_500_pods", |b| {
        b.iter(|| {
            let cx = DrainContext::new(&store, &scope, T0, 0, &[]);
            let pods: Vec<PodDrain<'_>> = store
                .pods_on_node(&scope, "n1")
                .filter_map(|k| match store.get(k) {
                    Some(Object::Pod(p)) => Some(PodDrain {
                        key: k,
                        deletion_timestamp: p.meta.deletion_timestamp,
                        status: drain::classify(p, &cx),
                    }),
                    _ => None,
                })
                .collect();
            let plan = DrainPlan::build(&pods, &BTreeMap::new(), T0, 0, |_| false);
            black_box(drain::condition_message(&plan, T0))
        })
    });
    group.finish();
}

/// `machines` deleting workers (each on its own Node with `pods` pods) in cluster c1, their
/// evictions accepted; returns the engine and a stream in which every pod gets its
/// deletionTimestamp and then goes away, interleaved with readiness flips.
fn deletion_stream(machines: usize, pods: usize) -> (Engine, Vec<Input>) {
    let w = workload("c1");
    let mut objects = vec![
        (Scope::Management, Object::Cluster(cluster("c1"))),
        (
            Scope::Management,
            Object::Machine(control_plane_machine("c1", "cp-1", Some("cp-1"))),
        ),
        (w.clone(), Object::Node(node("cp-1"))),
        (w.clone(), Object::Namespace(namespace("app"))),
    ];
    for m in 0..machines {
        let name = format!("m{m}");
        let mut mach = machine("c1", &name, Some(&name));
        mach.meta.deletion_timestamp = Some(T0);
        objects.push((Scope::Management, Object::Machine(mach)));
        objects.push((Scope::Management, Object::External(infra_machine(&name))));
        objects.push((Scope::Management, Object::External(bootstrap_config(&name))));
        let mut n = node(&name);
        n.unschedulable = true;
        objects.push((w.clone(), Object::Node(n)));
        for p in 0..pods {
            objects.push((
                w.clone(),
                Object::Pod(pod("app", &format!("{name}-p{p}"), &name)),
            ));
        }
    }
    let (mut engine, first) = synced_engine(T0, objects);
    for c in &first {
        engine.handle(
            T0,
            Input::ApiResult {
                command: c.id,
                outcome: engine::ApiOutcome::Ok { object: None },
            },
        );
    }
    drain_commands(&mut engine);
    let mut stream = Vec::new();
    let mut rv = 10;
    for p in 0..pods {
        for m in 0..machines {
            let name = format!("m{m}");
            let mut flip = pod("app", &format!("{name}-p{p}"), &name);
            flip.ready = false;
            rv += 1;
            flip.meta.resource_version = rv;
            stream.push(Input::Upsert {
                scope: w.clone(),
                object: Box::new(Object::Pod(flip.clone())),
            });
            let mut deleting = flip;
            deleting.meta.deletion_timestamp = Some(T0);
            rv += 1;
            deleting.meta.resource_version = rv;
            stream.push(Input::Upsert {
                scope: w.clone(),
                object: Box::new(Object::Pod(deleting.clone())),
            });
            stream.push(Input::Delete {
                key: ObjectKey::new(w.clone(), Kind::Pod, "app", &deleting.meta.name),
            });
        }
    }
    (engine, stream)
}

/// Feeds `stream` in batches of `batch` inputs (one [`Input::Batch`] each; plain inputs when
/// `batch` is 1), draining commands after each.
fn feed(b: &mut criterion::Bencher<'_>, engine: &Engine, stream: &[Input], batch: usize) {
    b.iter_batched(
        || {
            let inputs: Vec<Input> = if batch == 1 {
                stream.to_vec()
            } else {
                stream
                    .chunks(batch)
                    .map(|c| Input::Batch { inputs: c.to_vec() })
                    .collect()
            };
            (engine.clone(), inputs)
        },
        |(mut e, inputs)| {
            for input in inputs {
                e.handle(T0, input);
                while let Some(c) = e.poll_command() {
                    black_box(c);
                }
            }
            e
        },
        BatchSize::LargeInput,
    )
}

fn engine_throughput(c: &mut Criterion) {
    let (engine, stream) = deletion_stream(20, 25);
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(stream.len() as u64));
    group.sample_size(10);
    // Every input reconciled on its own: the latency path, no coalescing at all.
    group.bench_function("deletion_stream", |b| feed(b, &engine, &stream, 1));
    // A backlog, fed as the adapter feeds one: up to `BATCH_INPUTS_MAX` inputs per batch.
    group.bench_function("deletion_stream_batched", |b| {
        feed(b, &engine, &stream, engine::BATCH_INPUTS_MAX)
    });
    // How much the batch size matters: a quarter of the cap.
    group.bench_function("deletion_stream_batched_256", |b| {
        feed(b, &engine, &stream, 256)
    });
    group.finish();
}

criterion_group!(benches, drain_planning, engine_throughput);
criterion_main!(benches);
