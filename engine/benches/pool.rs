//! Reconciling one MachinePool of 5 000 providerIDs against 5 000 workload Nodes.
//!
//! `steady`: a Node change wakes a settled pool; the reconcile recomputes nodeRefs, counters,
//! phase and conditions and issues nothing (the common case). `adopt`: a new pool over 5 000
//! joined Nodes, which issues the status patch, the event and 5 000 Node patches.
//! Run: `cargo bench -p engine --bench pool`.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use engine::model::*;
use engine::testing::*;
use engine::{Engine, Input, Timestamp};
use std::hint::black_box;

const NODES: usize = 5_000;
const T0: Timestamp = Timestamp(1_700_000_000_000);

fn pool_node(i: usize, annotated: bool) -> Node {
    let name = format!("p1-{i}");
    let mut n = node(&name);
    n.meta.uid = format!("uid-{name}");
    n.provider_id = Some(format!("sim://c1/{name}"));
    n.kubelet_version = Some("v1.33.0".into());
    if annotated {
        for (k, v) in [
            ("cluster.x-k8s.io/cluster-name", "c1"),
            ("cluster.x-k8s.io/cluster-namespace", "default"),
            ("cluster.x-k8s.io/owner-kind", "MachinePool"),
            ("cluster.x-k8s.io/owner-name", "p1"),
        ] {
            n.meta.annotations.insert(k.into(), v.into());
        }
    }
    n
}

fn settled_pool(ids: &[String]) -> MachinePool {
    let n = ids.len() as i32;
    let mut mp = machine_pool("c1", "p1", n);
    mp.bootstrap_data_secret_name = Some("p1-bootstrap".into());
    mp.provider_id_list = ids.to_vec();
    mp.status = MachinePoolStatus {
        replicas: Some(n),
        legacy_ready_replicas: Some(n),
        legacy_available_replicas: Some(n),
        legacy_unavailable_replicas: Some(0),
        ready_replicas: Some(n),
        available_replicas: Some(n),
        up_to_date_replicas: Some(n),
        node_refs: (0..ids.len())
            .map(|i| NodeReference {
                name: format!("p1-{i}"),
                uid: format!("uid-p1-{i}"),
            })
            .collect(),
        phase: Some("Running".into()),
        bootstrap_data_secret_created: true,
        infrastructure_provisioned: true,
        failure_reason: None,
        failure_message: None,
        versions: vec![("v1.33.0".into(), n)],
    };
    mp
}

fn world(annotated: bool) -> (Vec<(Scope, Object)>, MachinePool) {
    let ids: Vec<String> = (0..NODES).map(|i| format!("sim://c1/p1-{i}")).collect();
    let owned = |mut e: External| {
        e.meta.labels.insert(CLUSTER_NAME_LABEL.into(), "c1".into());
        e.meta.owner_references.push(OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "MachinePool".into(),
            name: "p1".into(),
            uid: "uid-default-p1".into(),
            controller: true,
        });
        e
    };
    let mut config = owned(bootstrap_config("p1"));
    config.data_secret_name = Some("p1-bootstrap".into());
    let mut infra = owned(infra_machine_pool("p1"));
    infra.provider_id_list = Some(ids.clone());
    infra.status_replicas = Some(NODES as i32);
    let mut objects = vec![
        (Scope::Management, Object::Cluster(cluster("c1"))),
        (Scope::Management, Object::External(config)),
        (Scope::Management, Object::External(infra)),
    ];
    for i in 0..NODES {
        objects.push((workload("c1"), Object::Node(pool_node(i, annotated))));
    }
    (objects, settled_pool(&ids))
}

fn bench_pool(c: &mut Criterion) {
    // Steady state: settle the pool once (conditions written by the engine itself).
    let (mut objects, pool) = world(true);
    objects.push((Scope::Management, Object::MachinePool(pool)));
    let (mut engine, first) = synced_engine(T0, objects);
    assert!(
        first.iter().all(|c| c.action.name() == "SetCondition"),
        "a settled pool only writes its conditions once"
    );
    // Apply the condition writes as the API would, until the pool is quiet.
    let key = ObjectKey::management(Kind::MachinePool, "default", "p1");
    let mut pending = first;
    for rv in 2.. {
        let Some(cmd) = pending.pop() else { break };
        assert!(pending.is_empty() && rv < 10, "pool does not settle");
        let mut settled = engine.store().get(&key).cloned();
        if let (Some(Object::MachinePool(mp)), engine::Action::SetCondition { conditions, .. }) =
            (&mut settled, &cmd.action)
        {
            mp.conditions = conditions.clone();
            mp.meta.resource_version = rv;
        }
        let outcome = engine::ApiOutcome::Ok {
            object: settled.map(Box::new),
        };
        engine.handle(
            T0,
            Input::ApiResult {
                command: cmd.id,
                outcome,
            },
        );
        pending = drain_commands(&mut engine);
    }

    let mut toggle = 0u64;
    c.bench_function("pool_reconcile_steady_5000_nodes", |b| {
        b.iter(|| {
            toggle += 1;
            let mut n = pool_node(17, true);
            n.meta.resource_version = 0;
            n.meta
                .labels
                .insert("bench".into(), (toggle % 2).to_string());
            engine.handle(
                T0,
                Input::Upsert {
                    scope: workload("c1"),
                    object: Box::new(Object::Node(n)),
                },
            );
            let commands = drain_commands(&mut engine);
            assert!(commands.is_empty());
            black_box(commands);
        })
    });

    // Adoption: a new pool over 5 000 joined, unannotated Nodes.
    let (objects, mut pool) = world(false);
    pool.status = MachinePoolStatus::default();
    pool.provider_id_list.clear();
    pool.bootstrap_data_secret_name = None;
    let (base, _) = synced_engine(T0, objects);
    c.bench_function("pool_reconcile_adopt_5000_nodes", |b| {
        b.iter_batched(
            || base.clone(),
            |mut engine: Engine| {
                engine.handle(
                    T0,
                    Input::Upsert {
                        scope: Scope::Management,
                        object: Box::new(Object::MachinePool(pool.clone())),
                    },
                );
                let commands = drain_commands(&mut engine);
                assert!(commands.len() > NODES);
                black_box(commands)
            },
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, bench_pool);
criterion_main!(benches);
