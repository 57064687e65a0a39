//! The driver over a scripted core: what it takes, journals and applies.

use super::*;
use engine::intake::mirror::StreamEvent;

/// Records what it is fed.
#[derive(Default)]
struct Recorder(Vec<Input>);

impl Core for Recorder {
    fn handle(&mut self, _now: Timestamp, input: Input) {
        self.0.push(input);
    }
    fn poll_command(&mut self) -> Option<engine::Command> {
        None
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        None
    }
    fn engine(&self) -> Option<&engine::Engine> {
        None
    }
}

fn result(command: u64) -> Event {
    Event::Arrival(Arrival::Result {
        command,
        outcome: ApiOutcome::NotFound,
    })
}

fn adapter() -> Adapter<Recorder, crate::kube::MemoryLog> {
    Adapter::new(
        Recorder::default(),
        crate::kube::MemoryLog::new(10_000),
        crate::kube::client_for_url("http://127.0.0.1:9").unwrap(),
        Arc::new(Metrics::default()),
        AdapterOptions::default(),
    )
}

/// The driver takes what is queued with the event in hand (one batch of at most the cap),
/// journals each input before the loop applies it, and counts them.
#[tokio::test]
async fn queued_events_are_journaled_as_one_batch_and_applied_as_journaled() {
    let mut a = adapter();
    a.step().unwrap();
    let cap = BATCH_INPUTS_MAX as u64;
    for id in 2..=cap + 1 {
        a.tx.try_send(result(id).into()).unwrap();
    }
    a.take_backlog(result(1).into());
    a.step().unwrap();
    for id in cap + 2..=cap + 10 {
        a.tx.try_send(result(id).into()).unwrap();
    }
    let next = a.rx.try_recv().unwrap();
    a.take_backlog(next);
    a.step().unwrap();
    let sizes: Vec<usize> = a
        .core()
        .0
        .iter()
        .map(|i| match i {
            Input::Batch { inputs } => inputs.len(),
            _ => 1,
        })
        .collect();
    assert_eq!(sizes, [BATCH_INPUTS_MAX, 10]);
    let logged: Vec<&Input> = a.log.entries.iter().map(|(_, _, i)| i).collect();
    assert_eq!(logged, a.core().0.iter().collect::<Vec<_>>());
    let metrics = a.metrics.render();
    assert!(
        metrics.contains(&format!(
            "lifecycle_inputs_total {}\n",
            BATCH_INPUTS_MAX + 10
        )),
        "{metrics}"
    );
}

/// A log that fails while `full` is set, as a full disk does.
#[derive(Default)]
struct FullDisk {
    full: bool,
    stored: Vec<Input>,
}

impl InputLog for FullDisk {
    fn append(&mut self, _now: Timestamp, input: &Input) -> Result<u64, String> {
        if self.full {
            return Err("No space left on device".into());
        }
        self.stored.push(input.clone());
        Ok(self.stored.len() as u64)
    }
    fn recover(&mut self) -> Result<Vec<(Timestamp, Input)>, String> {
        if self.full {
            return Err("No space left on device".into());
        }
        Ok(Vec::new())
    }
}

/// While the journal cannot be written the driver is NotReady and applies nothing; once it
/// reopens, every input is applied once, in order, the journal and the core agreeing.
#[tokio::test]
async fn an_unwritable_journal_is_not_ready_until_it_reopens() {
    let mut a = Adapter::new(
        Recorder::default(),
        FullDisk::default(),
        crate::kube::client_for_url("http://127.0.0.1:9").unwrap(),
        Arc::new(Metrics::default()),
        AdapterOptions {
            loop_options: LoopOptions {
                journal_retry: engine::Duration::from_millis(20),
                ..LoopOptions::default()
            },
            ..AdapterOptions::default()
        },
    );
    a.step().unwrap();
    a.take_backlog(result(1).into());
    a.step().unwrap();
    a.log.full = true;
    a.take_backlog(result(2).into());
    a.step().unwrap();
    assert!(a.journal_down());
    assert_eq!(a.metrics.readiness().0, 503);
    assert_eq!(a.core().0.len(), 1);
    a.log.full = false;
    let stop = tokio::time::sleep(Duration::from_millis(300));
    a.run(stop).await.unwrap();
    assert!(!a.journal_down());
    assert_eq!(a.metrics.readiness(), (200, "ok\n"));
    assert_eq!(a.log.stored, a.core().0, "journal and core agree");
    assert_eq!(a.core().0.len(), 2);
}

fn watch_event(scope: &Scope, stream: &str, event: StreamEvent) -> Queued {
    let stream = stream.to_string();
    let scope = scope.clone();
    Event::Arrival(Arrival::Watch {
        scope,
        stream,
        event,
    })
    .into()
}

/// A Node whose status stays malformed while its kubelet updates it: every update is an
/// unreadable object the loop hands out once and the driver counts and drops, so what the loop
/// retains stays flat however many updates come (it once kept a copy of each for good).
#[tokio::test]
async fn a_malformed_node_updated_10_000_times_leaves_nothing_retained() {
    use engine::intake::streams::{management_streams, stream_id};
    use engine::model::ClusterName;
    use serde_json::json;
    let mut a = Adapter::new(
        engine::Engine::new(),
        crate::kube::MemoryLog::new(16),
        crate::kube::client_for_url("http://127.0.0.1:9").unwrap(),
        Arc::new(Metrics::default()),
        AdapterOptions::default(),
    );
    a.step().unwrap();
    let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": "default", "uid": "u1", "resourceVersion": "1"}});
    for key in management_streams() {
        let id = key.id();
        a.take(watch_event(&Scope::Management, &id, StreamEvent::Init));
        if key.kind == "Cluster" {
            let apply = StreamEvent::InitApply(cluster.clone().into());
            a.take(watch_event(&Scope::Management, &id, apply));
        }
        a.take(watch_event(&Scope::Management, &id, StreamEvent::InitDone));
    }
    a.step().unwrap();
    let c1 = Scope::Workload(ClusterName::new("default", "c1"));
    let client = crate::kube::client_for_url("http://127.0.0.1:9").unwrap();
    a.take(
        Event::Connected {
            scope: c1.clone(),
            client,
        }
        .into(),
    );
    let nodes = stream_id("", "Node");
    a.take(watch_event(&c1, &nodes, StreamEvent::Init));
    a.take(watch_event(&c1, &nodes, StreamEvent::InitDone));
    a.step().unwrap();
    let updates = 10_000;
    let mut retained = Vec::new();
    for rv in 1..=updates {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "n1", "resourceVersion": rv.to_string()},
            "status": {"conditions": [{"type": 17, "status": "True"}]}});
        a.take(watch_event(&c1, &nodes, StreamEvent::Apply(node.into())));
        if rv % 100 == 0 {
            a.step().unwrap();
            retained.push(a.lp.unreadable_retained());
        }
    }
    let samples: Vec<_> = retained.iter().skip(9).step_by(10).collect();
    println!("retained every 1 000 updates: {samples:?}");
    assert!(
        retained.iter().all(|&n| n == 0),
        "the loop retains unreadable objects after {updates} updates of a malformed Node: {samples:?} (every 1 000)"
    );
    assert_eq!(a.lp.unreadable_dropped(), 0);
    let metrics = a.metrics.render();
    let counted = format!("lifecycle_unreadable_objects_total{{kind=\"Node\"}} {updates}\n");
    assert!(metrics.contains(&counted), "{metrics}");
}

/// The driver stays a thin tokio shell of `engine::runtime::Loop` (at most 450 lines, about
/// half its size before the loop moved out): what is journaled, applied and sent, and when,
/// is decided by the sans-IO loop, which the simulator drives too.
#[test]
fn the_driver_stays_thin() {
    let lines = include_str!("adapter.rs").lines().count();
    assert!(
        lines <= 450,
        "adapter.rs has {lines} lines: decisions belong in engine::runtime::Loop"
    );
}
