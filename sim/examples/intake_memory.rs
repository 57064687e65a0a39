//! Where the production path's memory goes: a generated fleet's objects go through the same
//! intake `lifecycle run` drives (watch lists → mirror → inputs) into an engine, and a counting
//! allocator reports the bytes each part keeps alive.
//! `cargo run --release -p sim --example intake_memory -- [clusters] [machines_per_cluster] [pods_per_node]`
//! (defaults: 1000 × 10 × 10, the 10 000-Machine fleet of BENCHMARKS.md).

use engine::intake::mirror::StreamEvent;
use engine::intake::streams::stream_id;
use engine::intake::{Arrival, Intake, Output};
use engine::model::{ClusterName, Scope};
use engine::time::{Duration, Timestamp};
use engine::{BATCH_INPUTS_MAX, Engine};
use serde_json::Value;
use sim::generate::{FleetSpec, fleet};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts live bytes and forwards every call to the system allocator. `unsafe` because a
/// global allocator can only be written as an `unsafe impl GlobalAlloc` (the crates' roots deny
/// unsafe code; this example is its own crate).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_mib() -> f64 {
    LIVE.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0)
}

type Streams = BTreeMap<(Scope, String), Vec<Value>>;

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn by_stream(scope: &Scope, objects: Vec<Value>, out: &mut Streams) {
    for v in objects {
        let group = group_of(v["apiVersion"].as_str().unwrap_or_default()).to_string();
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        out.entry((scope.clone(), stream_id(&group, &kind)))
            .or_default()
            .push(v);
    }
}

fn list(intake: &mut Intake, streams: &mut Streams, scope: &Scope, stream: String) {
    let objects = streams
        .remove(&(scope.clone(), stream.clone()))
        .unwrap_or_default();
    let mut push = |event| {
        intake.push(Arrival::Watch {
            scope: scope.clone(),
            stream: stream.clone(),
            event,
        })
    };
    push(StreamEvent::Init);
    for o in objects {
        push(StreamEvent::InitApply(o.into()));
    }
    push(StreamEvent::InitDone);
}

fn main() {
    let base = live_mib();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let spec = FleetSpec {
        clusters: args.first().copied().unwrap_or(1000),
        machines_per_cluster: args.get(1).copied().unwrap_or(10),
        pods_per_node: args.get(2).copied().unwrap_or(10),
        delete_fraction: 0.0,
        fail_fraction: 0.0,
        duration: Duration::from_mins(1),
        seed: 1,
    };
    let scenario = fleet(&spec);
    let mut streams = Streams::new();
    by_stream(
        &Scope::Management,
        scenario.management.into_iter().map(|m| m.value).collect(),
        &mut streams,
    );
    for (cluster, objects) in scenario.workload {
        let scope = Scope::Workload(ClusterName::new("default", &cluster));
        by_stream(
            &scope,
            objects.into_iter().map(|m| m.value).collect(),
            &mut streams,
        );
    }
    let mut intake = Intake::new();
    let mut engine = Engine::new();
    let now = Timestamp::from_millis(1_700_000_000_000);
    loop {
        while let Some(input) = intake.next_input(BATCH_INPUTS_MAX) {
            engine.handle(now, input);
            while engine.poll_command().is_some() {}
        }
        let Some(output) = intake.poll_output() else {
            break;
        };
        match output {
            Output::Watch(key) => list(&mut intake, &mut streams, &key.scope, key.id()),
            Output::WatchProvider { group, kind, .. } => list(
                &mut intake,
                &mut streams,
                &Scope::Management,
                stream_id(&group, &kind),
            ),
            Output::Connect(scope) => intake.push(Arrival::Connected { scope }),
            Output::Unwatch(_) | Output::Disconnect(_) => {}
        }
    }
    drop(streams);
    let both = live_mib() - base;
    drop(intake);
    let engine_only = live_mib() - base;
    println!(
        "{} Machines, {} clusters, {} pods: intake + engine {both:.0} MiB live, engine {engine_only:.0} MiB, intake (mirror) {:.0} MiB; {} objects in the engine's store",
        spec.clusters * spec.machines_per_cluster,
        spec.clusters,
        spec.clusters * spec.machines_per_cluster * spec.pods_per_node,
        both - engine_only,
        engine.store().len(),
    );
}
