//! The kube adapter end to end over HTTP: fake API servers for a scenario's management and
//! workload clusters (the `c1-kubeconfig` Secret points at the workload server), the adapter
//! loop with its watchers and executors, and a deleting Machine whose Node must be cordoned
//! and whose pod must be evicted through the API.

use adapters::apiserver::ServerOptions;
use adapters::kube::{Adapter, AdapterOptions, Core, MemoryLog, Metrics, client_for_url};
use adapters::serve::ServedWorld;
use engine::model::{ClusterName, Kind, Object, ObjectKey, Scope};
use engine::{Action, ApiOutcome, Command, ControllerId, Input, Target, Timestamp};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde_json::{Value, json};
use sim::api::ObjKey;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// How long the adapter gets to cordon and evict.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(20);

fn scenario() -> sim::scenario::Scenario {
    load("pre-drain-hook-holds-drain")
}

fn load(name: &str) -> sim::scenario::Scenario {
    let path = format!("{}/../scenarios/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    sim::scenario::load(std::path::Path::new(&path)).expect("the scenario loads")
}

fn client(url: &str) -> Client {
    client_for_url(url).unwrap()
}

fn workload() -> Scope {
    Scope::Workload(ClusterName::new("default", "c1"))
}

/// A stand-in for the engine: once it has seen Machine m1 deleting and the workload cluster
/// relisted, its pods too (listed once a deletion needs them: evicted before, web-0 could be
/// gone before the list, which then never shows it), it cordons n1 and evicts app/web-0 (or, with `evict_both`, evicts app/web-0 then
/// app/web-1), and records what it was fed.
#[derive(Default)]
struct Scripted {
    evict_both: bool,
    relisted: BTreeSet<Scope>,
    machine_deleting: bool,
    pods_listed: bool,
    workload_objects: Vec<String>,
    issued: bool,
    queue: VecDeque<Command>,
    results: Vec<(u64, ApiOutcome)>,
    /// How many answers it has been fed, for the test to wait on (the world can show a write
    /// before its answer reaches the loop).
    answered: Arc<std::sync::atomic::AtomicUsize>,
}

impl Scripted {
    fn command(id: u64, action: Action) -> Command {
        Command {
            id,
            cause: 0,
            controller: ControllerId::Deletion,
            owner: ObjectKey::new(Scope::Management, Kind::Machine, "default", "m1"),
            action,
            reason: "scripted drain".into(),
            series: None,
        }
    }

    fn see(&mut self, object: &Object) {
        if let Object::Machine(m) = object
            && m.meta.name == "m1"
            && m.meta.deletion_timestamp.is_some()
        {
            self.machine_deleting = true;
        }
    }
}

impl Scripted {
    fn observe(&mut self, input: &Input) {
        match input {
            Input::Relist { scope, objects } => {
                self.relisted.insert(scope.clone());
                if *scope == workload() {
                    self.workload_objects =
                        objects.iter().map(|o| o.key(scope).to_string()).collect();
                }
                objects.iter().for_each(|o| self.see(o));
            }
            Input::Upsert { object, .. } => self.see(object),
            Input::ApiResult { command, outcome } => {
                self.results.push((*command, outcome.clone()));
                self.answered
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Input::RelistKind {
                scope,
                kind,
                objects,
            } => {
                if *scope == workload() {
                    self.pods_listed |= *kind == Kind::Pod;
                    let listed = objects.iter().map(|o| o.key(scope).to_string());
                    self.workload_objects.extend(listed);
                }
                objects.iter().for_each(|o| self.see(o))
            }
            Input::Batch { inputs } => inputs.iter().for_each(|i| self.observe(i)),
            Input::Delete { .. }
            | Input::Tick
            | Input::Restarted
            | Input::Unlisted { .. }
            | Input::Unwatched { .. }
            | Input::ClusterUnreachable { .. }
            | Input::Ownership(_)
            | Input::OwnMachines(_)
            | Input::Overridden { .. }
            | Input::CapiRelease(_) => {}
        }
    }
}

impl Core for Scripted {
    fn handle(&mut self, _now: Timestamp, input: Input) {
        self.observe(&input);
        if self.machine_deleting
            && self.relisted.contains(&workload())
            && self.pods_listed
            && !self.issued
        {
            self.issued = true;
            let node = Target {
                key: ObjectKey::new(workload(), Kind::Node, "", "n1"),
                api_version: "v1".into(),
            };
            let pod = Target {
                key: ObjectKey::new(workload(), Kind::Pod, "app", "web-0"),
                api_version: "v1".into(),
            };
            let evict = |name: &str| Action::Evict {
                pod: Target {
                    key: ObjectKey::new(workload(), Kind::Pod, "app", name),
                    ..pod.clone()
                },
                grace_period_seconds: Some(1),
            };
            if self.evict_both {
                self.queue.push_back(Self::command(1, evict("web-0")));
                self.queue.push_back(Self::command(2, evict("web-1")));
            } else {
                self.queue
                    .push_back(Self::command(1, Action::Cordon { node }));
                self.queue.push_back(Self::command(2, evict("web-0")));
            }
        }
    }
    fn poll_command(&mut self) -> Option<Command> {
        self.queue.pop_front()
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        None
    }
    fn engine(&self) -> Option<&engine::Engine> {
        None
    }
}

fn options() -> ServerOptions {
    ServerOptions {
        bookmark_interval: Duration::from_millis(500),
        ..Default::default()
    }
}

/// Whether n1 is cordoned and web-0 is being (or has been) deleted in the workload store.
fn drained(world: &ServedWorld) -> (bool, bool) {
    world.workloads["c1"].cluster().read(|s| {
        let node = s.store.get(&ObjKey::new("", "Node", "", "n1"));
        let cordoned = node.and_then(|n| n.pointer("/spec/unschedulable")) == Some(&json!(true));
        let pod = s.store.get(&ObjKey::new("", "Pod", "app", "web-0"));
        let evicted = pod.is_none_or(|p| p.pointer("/metadata/deletionTimestamp").is_some());
        (cordoned, evicted)
    })
}

async fn wait_drained(world: &ServedWorld) -> bool {
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        if drained(world) == (true, true) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Every input the journal holds, batches opened (the loop batches what arrives together, so
/// the number of entries depends on timing; the inputs do not).
fn journaled_inputs(log: &MemoryLog) -> Vec<&Input> {
    fn open<'a>(input: &'a Input, into: &mut Vec<&'a Input>) {
        match input {
            Input::Batch { inputs } => inputs.iter().for_each(|i| open(i, into)),
            other => into.push(other),
        }
    }
    let mut inputs = Vec::new();
    log.entries
        .iter()
        .for_each(|(_, _, i)| open(i, &mut inputs));
    inputs
}

fn machines(c: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    Api::namespaced_with(c.clone(), "default", &ApiResource::from_gvk(&gvk))
}

/// The adapter's task: the adapter and how its loop ended.
type Running<C> = tokio::task::JoinHandle<(Adapter<C, MemoryLog>, Result<(), String>)>;

/// Starts the adapter over `core` in a task; returns the stop signal and the task.
fn start<C: Core + Send + 'static>(
    core: C,
    world: &ServedWorld,
    metrics: Arc<Metrics>,
) -> (tokio::sync::oneshot::Sender<()>, Running<C>) {
    let options = AdapterOptions {
        connect_retry: Duration::from_millis(200),
        ..Default::default()
    };
    let mut adapter = Adapter::new(
        core,
        MemoryLog::new(100_000),
        client(&world.management.url()),
        metrics,
        options,
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = adapter
            .run(async {
                let _ = stopped.await;
            })
            .await;
        (adapter, result)
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_cordons_and_evicts_through_http_for_a_deleting_machine() {
    let world = ServedWorld::start(&scenario(), 0, options()).await.unwrap();
    let metrics = Arc::new(Metrics::default());
    let scripted = Scripted::default();
    let answered = scripted.answered.clone();
    let (stop, task) = start(scripted, &world, metrics.clone());
    let management = client(&world.management.url());
    machines(&management)
        .delete("m1", &DeleteParams::default())
        .await
        .unwrap();

    let converged = wait_drained(&world).await;
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    while answered.load(std::sync::atomic::Ordering::SeqCst) < 2
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    let (adapter, result) = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    result.unwrap();
    assert!(
        converged,
        "not cordoned and evicted in time: {:?}",
        drained(&world)
    );
    let core = adapter.core();
    assert!(core.relisted.contains(&Scope::Management));
    assert!(
        core.workload_objects
            .contains(&"Pod app/web-0@c1".to_string()),
        "{:?}",
        core.workload_objects
    );
    let mut results = core.results.clone();
    results.sort_by_key(|(id, _)| *id);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        matches!(&results[0], (1, ApiOutcome::Ok { object: Some(node) }) if matches!(**node, Object::Node(_)))
    );
    assert_eq!(results[1], (2, ApiOutcome::Ok { object: None }));
    assert_eq!(metrics.commands("Cordon"), 1);
    assert_eq!(metrics.commands("Evict"), 1);
    let journaled = journaled_inputs(adapter.log());
    let relisted: BTreeSet<&Scope> = journaled
        .iter()
        .filter_map(|i| match i {
            Input::Relist { scope, .. } => Some(scope),
            _ => None,
        })
        .collect();
    let answers = journaled
        .iter()
        .filter(|i| matches!(i, Input::ApiResult { .. }))
        .count();
    assert_eq!(
        (relisted.len(), answers),
        (2, 2),
        "both relists and both results are journaled: {journaled:?}"
    );
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_drains_a_deleting_machine_through_http() {
    let scenario = scenario();
    let simulated = sim::run(
        &scenario,
        &sim::RunOptions {
            no_journal: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        simulated.timeline.render_text().contains("Cordon"),
        "the simulator's run of {} issues no Cordon: the test below would prove nothing",
        scenario.file
    );
    let world = ServedWorld::start(&scenario, 0, options()).await.unwrap();
    let metrics = Arc::new(Metrics::default());
    let (stop, task) = start(engine::Engine::new(), &world, metrics.clone());
    let management = client(&world.management.url());
    let api = machines(&management);
    api.delete("m1", &DeleteParams::default()).await.unwrap();
    // The scenario's hook controller: release the pre-drain hook.
    let hook: Value = json!({"metadata": {"annotations": {"pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate-app": null}}});
    api.patch("m1", &PatchParams::default(), &Patch::Merge(hook))
        .await
        .unwrap();
    let converged = wait_drained(&world).await;
    let _ = stop.send(());
    let (_adapter, result) = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    result.unwrap();
    assert!(
        converged,
        "not cordoned and evicted in time: {:?}\n{}",
        drained(&world),
        metrics.render()
    );
    assert!(
        metrics.commands("Cordon") >= 1 && metrics.commands("Evict") >= 1,
        "{}",
        metrics.render()
    );
    world.shutdown().await;
}

/// Upstream's drain evicts one pod after the other; the adapter sends a drain's evictions in
/// the order issued, one at a time, so with a PDB that allows one more disruption the first
/// pod named is evicted and the second refused, every time (concurrent requests let either
/// win: seen over HTTP as the simulator's timeline and the real run disagreeing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drains_evictions_reach_the_server_in_the_order_issued() {
    for round in 0..5 {
        let world =
            ServedWorld::start(&load("deletion-pdb-blocks-until-rescheduled"), 0, options())
                .await
                .unwrap();
        let scripted = Scripted {
            evict_both: true,
            ..Default::default()
        };
        let answered = scripted.answered.clone();
        let (stop, task) = start(scripted, &world, Arc::new(Metrics::default()));
        machines(&client(&world.management.url()))
            .delete("m1", &DeleteParams::default())
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
        while answered.load(std::sync::atomic::Ordering::SeqCst) < 2
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(());
        let (adapter, result) = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        result.unwrap();
        let mut results = adapter.core().results.clone();
        results.sort_by_key(|(id, _)| *id);
        assert_eq!(results.len(), 2, "round {round}: {results:?}");
        assert_eq!(
            results[0],
            (1, ApiOutcome::Ok { object: None }),
            "round {round}"
        );
        assert!(
            matches!(
                results[1],
                (
                    2,
                    ApiOutcome::Refused {
                        refusal: engine::Refusal::DisruptionBudget { budget: Some(_) },
                        ..
                    }
                )
            ),
            "round {round}: web-1 should be refused by the PDB: {results:?}"
        );
        world.shutdown().await;
    }
}

/// A Machine in the management cluster whose infrastructure kind the API does not serve.
fn machine_with_unserved_infrastructure(name: &str, group: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                     "finalizers": ["machine.cluster.x-k8s.io"]},
        "spec": {"clusterName": "c1",
                 "bootstrap": {"dataSecretName": "none"},
                 "infrastructureRef": {"apiGroup": group, "kind": "FooMachine", "name": name}}
    }))
    .unwrap()
}

/// The `Deleting` condition of Machine `name`: `(reason, message)`.
async fn deleting_condition(api: &Api<DynamicObject>, name: &str) -> Option<(String, String)> {
    let m = api.get(name).await.ok()?;
    let conditions = m.data.pointer("/status/conditions")?.as_array()?.clone();
    conditions
        .iter()
        .find(|c| c["type"] == "Deleting")
        .map(|c| {
            let text = |f: &str| c[f].as_str().unwrap_or_default().to_string();
            (text("reason"), text("message"))
        })
}

/// A provider kind whose list the API refuses (404: not served, here; 403 alike) must not keep
/// the whole management cluster from syncing: the other Machines are deleted as usual, and
/// a Machine that refers to that kind waits, saying why, instead of counting its
/// infrastructure as deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_kind_the_api_does_not_serve_holds_only_the_machines_that_refer_to_it() {
    let world = ServedWorld::start(&scenario(), 0, options()).await.unwrap();
    let management = client(&world.management.url());
    let api = machines(&management);
    // m8's group is not served at all (discovery 404s); m9's group is, but not FooMachine.
    for (name, group) in [
        ("m8", "infrastructure.nowhere.cluster.x-k8s.io"),
        ("m9", "infrastructure.cluster.x-k8s.io"),
    ] {
        api.create(
            &Default::default(),
            &machine_with_unserved_infrastructure(name, group),
        )
        .await
        .unwrap();
    }
    let metrics = Arc::new(Metrics::default());
    let (stop, task) = start(engine::Engine::new(), &world, metrics.clone());
    api.delete("m1", &DeleteParams::default()).await.unwrap();
    let hook: Value = json!({"metadata": {"annotations": {"pre-drain.delete.hook.machine.cluster.x-k8s.io/migrate-app": null}}});
    api.patch("m1", &PatchParams::default(), &Patch::Merge(hook))
        .await
        .unwrap();
    let drained = wait_drained(&world).await;
    for name in ["m8", "m9"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let mut waiting = Vec::new();
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        waiting.clear();
        for name in ["m8", "m9"] {
            waiting.push(deleting_condition(&api, name).await);
        }
        if waiting
            .iter()
            .all(|c| matches!(c, Some((r, _)) if r == "ObjectUnreadable"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(
        drained,
        "m1 was not drained: the management cluster never synced"
    );
    let [Some((r8, m8)), Some((r9, m9))] = waiting.as_slice() else {
        panic!("no Deleting condition: {waiting:?}");
    };
    assert_eq!(
        (r8.as_str(), r9.as_str()),
        ("ObjectUnreadable", "ObjectUnreadable")
    );
    assert!(
        m8.contains("FooMachine default/m8 in the management cluster cannot be read")
            && m8.contains("does not serve the group infrastructure.nowhere.cluster.x-k8s.io"),
        "{m8}"
    );
    assert!(
        m9.contains("does not serve foomachines.infrastructure.cluster.x-k8s.io"),
        "{m9}"
    );
    // Waiting, not deleted: the finalizer stays until the kind can be read.
    for name in ["m8", "m9"] {
        assert!(
            api.get(name).await.is_ok(),
            "{name} was released on a guess"
        );
    }
    world.shutdown().await;
}

/// A DELETE of a provider object the cache has not seen names its group alone (a v1beta2
/// reference carries no version): the adapter asks discovery for the preferred version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_addressed_by_group_alone_is_sent_to_the_preferred_version() {
    let world = ServedWorld::start(&scenario(), 0, options()).await.unwrap();
    let management = client(&world.management.url());
    let key = ObjectKey::management(
        Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "DockerMachine"),
        "default",
        "m1",
    );
    let delete = |api_version: &str| {
        Scripted::command(
            7,
            Action::DeleteInfrastructure {
                target: Target {
                    key: key.clone(),
                    api_version: api_version.to_string(),
                },
            },
        )
    };
    let outcome = adapters::kube::execute::execute(
        &management,
        &delete("infrastructure.cluster.x-k8s.io"),
        None,
    )
    .await;
    assert!(matches!(outcome, ApiOutcome::Ok { .. }), "{outcome:?}");
    let gone = world.management.cluster().read(|s| {
        s.store
            .get(&ObjKey::new(
                "infrastructure.cluster.x-k8s.io",
                "DockerMachine",
                "default",
                "m1",
            ))
            .is_none_or(|o| o.pointer("/metadata/deletionTimestamp").is_some())
    });
    assert!(gone, "the DockerMachine was not deleted");
    // A group the API does not serve is an answer the deletion retries, not a success.
    let outcome = adapters::kube::execute::execute(
        &management,
        &delete("infrastructure.nowhere.cluster.x-k8s.io"),
        None,
    )
    .await;
    assert!(
        !matches!(outcome, ApiOutcome::Ok { .. } | ApiOutcome::NotFound),
        "{outcome:?}"
    );
    world.shutdown().await;
}

/// A repeat of an event updates its series' Event (`count`, `lastTimestamp`, `message`); one
/// whose Event is gone (expired) is written anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_updates_its_series_event_and_recreates_an_expired_one() {
    use adapters::kube::execute::{EventStamp, execute};
    let world = ServedWorld::start(&scenario(), 0, options()).await.unwrap();
    let management = client(&world.management.url());
    let event = |id: u64, series: Option<(u64, u32)>, message: &str| {
        let mut c = Scripted::command(
            id,
            Action::RecordEvent {
                regarding: Target {
                    key: ObjectKey::management(Kind::Machine, "default", "m1"),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                type_: engine::EventType::Warning,
                reason: "DrainBlocked".into(),
                message: message.into(),
            },
        );
        c.series = series.map(|(first, count)| engine::EventSeries { first, count });
        c
    };
    let stamp = |secs: i64| EventStamp {
        uid: "uid-m1".into(),
        resource_version: 1,
        at: Timestamp::parse_rfc3339("2026-11-25T09:00:00Z")
            .unwrap()
            .saturating_add(engine::Duration::from_secs(secs)),
        instance: "test".into(),
    };
    let events: Api<DynamicObject> = Api::namespaced_with(
        management.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Event")),
    );
    let ours = || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|e| e.data["reason"] == "DrainBlocked")
            .map(|e| {
                (
                    e.data["count"].as_u64().unwrap_or(0),
                    e.data["message"].as_str().unwrap_or("").to_string(),
                    e.data["lastTimestamp"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let first = event(40, None, "blocked for 0s");
    assert!(matches!(
        execute(&management, &first, Some(&stamp(0))).await,
        ApiOutcome::Ok { .. }
    ));
    let repeat = event(41, Some((40, 3)), "blocked for 90s");
    assert!(matches!(
        execute(&management, &repeat, Some(&stamp(90))).await,
        ApiOutcome::Ok { .. }
    ));
    assert_eq!(
        ours().await,
        [(
            3,
            "blocked for 90s".to_string(),
            "2026-11-25T09:01:30Z".to_string()
        )]
    );
    // The series' Event expired: the repeat writes it anew, count and all.
    for e in events.list(&Default::default()).await.unwrap().items {
        let name = e.metadata.name.clone().unwrap();
        events
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let late = event(42, Some((40, 4)), "blocked for 150s");
    assert!(matches!(
        execute(&management, &late, Some(&stamp(150))).await,
        ApiOutcome::Ok { .. }
    ));
    assert_eq!(ours().await.iter().map(|e| e.0).collect::<Vec<_>>(), [4]);
    world.shutdown().await;
}

/// Issues `evictions` evictions (each of its own drain, so none waits for another) to the
/// management cluster once it is listed, then, when the first is answered (the others queued
/// by then), one finalizer removal.
struct Flood {
    evictions: u64,
    queue: VecDeque<Command>,
    issued: bool,
    finalizer_issued: bool,
    answered: Arc<std::sync::atomic::AtomicUsize>,
}

impl Flood {
    fn new(evictions: u64) -> Self {
        Flood {
            evictions,
            queue: VecDeque::new(),
            issued: false,
            finalizer_issued: false,
            answered: Arc::default(),
        }
    }
}

/// The scenario's world, its servers logging each request's arrival.
async fn world_logging_arrivals() -> (ServedWorld, Arc<adapters::apiserver::arrivals::Arrivals>) {
    let arrivals = Arc::new(adapters::apiserver::arrivals::Arrivals::default());
    let options = ServerOptions {
        arrivals: Some(arrivals.clone()),
        ..options()
    };
    let world = ServedWorld::start(&scenario(), 0, options).await.unwrap();
    (world, arrivals)
}

impl Flood {
    fn see(&mut self, input: &Input) {
        match input {
            Input::Relist { scope, .. } if *scope == Scope::Management && !self.issued => {
                self.issued = true;
                for i in 1..=self.evictions {
                    let pod =
                        ObjectKey::new(Scope::Management, Kind::Pod, "default", &format!("p-{i}"));
                    self.queue.push_back(Command {
                        owner: ObjectKey::new(
                            Scope::Management,
                            Kind::Machine,
                            "default",
                            &format!("m-{i}"),
                        ),
                        ..Scripted::command(
                            i,
                            Action::Evict {
                                pod: Target {
                                    key: pod,
                                    api_version: "v1".into(),
                                },
                                grace_period_seconds: None,
                            },
                        )
                    });
                }
            }
            Input::ApiResult { .. } => {
                self.answered
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if !self.finalizer_issued {
                    self.finalizer_issued = true;
                    let m1 = ObjectKey::new(Scope::Management, Kind::Machine, "default", "m1");
                    self.queue.push_back(Scripted::command(
                        self.evictions + 1,
                        Action::RemoveFinalizer {
                            target: Target {
                                key: m1,
                                api_version: "cluster.x-k8s.io/v1beta2".into(),
                            },
                            finalizer: "machine.cluster.x-k8s.io".into(),
                        },
                    ));
                }
            }
            Input::Batch { inputs } => inputs.iter().for_each(|i| self.see(i)),
            _ => {}
        }
    }
}

impl Core for Flood {
    fn handle(&mut self, _now: Timestamp, input: Input) {
        self.see(&input);
    }
    fn poll_command(&mut self) -> Option<Command> {
        self.queue.pop_front()
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        None
    }
    fn engine(&self) -> Option<&engine::Engine> {
        None
    }
}

/// The proof (b): with 40 evictions queued for one cluster (20 requests per second,
/// burst 1; 32 commands in flight) a finalizer removal issued after the first eviction was
/// answered reaches the server before nearly all the others (first in line for a command slot
/// and for a token); in the order issued it would come after all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_removal_overtakes_queued_evictions() {
    const EVICTIONS: u64 = 40;
    let (world, arrivals) = world_logging_arrivals().await;
    let flood = Flood::new(EVICTIONS);
    let answered = flood.answered.clone();
    let mut adapter = Adapter::new(
        flood,
        MemoryLog::new(10_000),
        client(&world.management.url()),
        Arc::new(Metrics::default()),
        AdapterOptions {
            rate_limit: adapters::kube::bucket::RateLimit {
                qps: 20.0,
                burst: 1,
            },
            ..Default::default()
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = adapter.run(async {
            let _ = stopped.await;
        });
        result.await
    });
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    while answered.load(std::sync::atomic::Ordering::SeqCst) < EVICTIONS as usize + 1 {
        assert!(tokio::time::Instant::now() < deadline, "not all answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    let management = world.management.addr();
    let order: Vec<String> = arrivals
        .all()
        .into_iter()
        .filter(|a| a.server == management)
        .map(|a| format!("{} {}", a.method, a.path))
        .filter(|r| r.ends_with("/eviction") || r.ends_with("/machines/m1"))
        .collect();
    let finalizer = order
        .iter()
        .position(|r| r.starts_with("GET ") && r.ends_with("/machines/m1"))
        .expect("the finalizer removal reads m1");
    let evictions_after = order[finalizer..]
        .iter()
        .filter(|r| r.ends_with("/eviction"))
        .count();
    eprintln!("the finalizer removal arrived before {evictions_after} of {EVICTIONS} evictions");
    assert!(
        evictions_after >= 30,
        "the finalizer removal waited behind the evictions:\n{}",
        order.join("\n")
    );
    assert!(
        order.iter().any(|r| r.starts_with("PATCH ")),
        "m1's finalizer was removed"
    );
    world.shutdown().await;
}

/// A log that remembers being closed.
#[derive(Default)]
struct ClosingLog {
    inner: MemoryLog,
    closed: bool,
}

impl adapters::kube::InputLog for ClosingLog {
    fn append(&mut self, now: Timestamp, input: &Input) -> Result<u64, String> {
        self.inner.append(now, input)
    }
    fn close(&mut self) -> Result<(), String> {
        self.closed = true;
        Ok(())
    }
}

/// Graceful shutdown: commands already sending finish and are answered, commands not yet in
/// flight (evictions waiting for their turn at 5 requests per second) never go, and the
/// journal is closed; nothing is abandoned, and it does not wait for the queue to drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_commands_in_flight_and_starts_no_more() {
    const EVICTIONS: u64 = 20;
    let (world, arrivals) = world_logging_arrivals().await;
    let flood = Flood::new(EVICTIONS);
    let answered = flood.answered.clone();
    let mut adapter = Adapter::new(
        flood,
        ClosingLog::default(),
        client(&world.management.url()),
        Arc::new(Metrics::default()),
        AdapterOptions {
            rate_limit: adapters::kube::bucket::RateLimit { qps: 5.0, burst: 1 },
            ..Default::default()
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = adapter
            .run(async {
                let _ = stopped.await;
            })
            .await;
        (adapter, result)
    });
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    while answered.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "nothing answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(());
    let (mut adapter, result) = task.await.unwrap();
    result.unwrap();
    let started = std::time::Instant::now();
    let report = adapter.shutdown(Duration::from_secs(10)).await.unwrap();
    let took = started.elapsed();
    let evicted = arrivals
        .all()
        .iter()
        .filter(|a| a.path.ends_with("/eviction"))
        .count();
    eprintln!("shutdown in {took:?}: {report:?}; {evicted} of {EVICTIONS} evictions were sent");
    assert_eq!(report.commands_abandoned, 0, "{report:?}");
    assert!(adapter.log().closed, "the journal is closed");
    // At 5 per second the rest of the queue would take seconds: none of it went.
    assert!(evicted < EVICTIONS as usize / 2, "{evicted} evictions sent");
    assert!(took < Duration::from_secs(1), "shutdown took {took:?}");
    world.shutdown().await;
}

/// A 429 with `Retry-After: 1` (the fake server's answer when too many writes are in progress;
/// here every write is too many) holds every request to that cluster for a second; a 429 from
/// the eviction subresource (a PDB's answer about one pod) holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_holds_the_cluster_except_for_evictions() {
    use adapters::kube::bucket::RateLimit;
    use adapters::kube::throttle::{Throttle, throttled};
    let arrivals = Arc::new(adapters::apiserver::arrivals::Arrivals::default());
    let world = ServedWorld::start(
        &scenario(),
        0,
        ServerOptions {
            arrivals: Some(arrivals.clone()),
            max_mutating_requests_inflight: 0,
            ..options()
        },
    )
    .await
    .unwrap();
    let limit = RateLimit {
        qps: 1000.0,
        burst: 100,
    };
    let polite = throttled(
        client(&world.management.url()),
        Throttle::start(limit),
        1,
        Arc::new(Metrics::default()),
        "management".into(),
    );
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(polite.clone(), "default");
    let evicted = pods.evict("p", &Default::default()).await;
    assert!(
        matches!(&evicted, Err(kube::Error::Api(s)) if s.code == 429),
        "{evicted:?}"
    );
    machines(&polite).get("m1").await.unwrap();
    let patched = machines(&polite)
        .patch("m1", &PatchParams::default(), &Patch::Merge(json!({})))
        .await;
    assert!(
        matches!(&patched, Err(kube::Error::Api(s)) if s.code == 429),
        "{patched:?}"
    );
    machines(&polite).get("m1").await.unwrap();
    let at: Vec<_> = arrivals.all().iter().map(|a| a.at).collect();
    assert_eq!(at.len(), 4);
    let after_eviction = at[1] - at[0];
    let after_patch = at[3] - at[2];
    eprintln!(
        "after the eviction's 429: {after_eviction:?}; after the patch's 429: {after_patch:?}"
    );
    assert!(
        after_eviction < Duration::from_millis(500),
        "{after_eviction:?}"
    );
    assert!(after_patch >= Duration::from_secs(1), "{after_patch:?}");
    world.shutdown().await;
}

/// Workload clusters connect from one LIST of the kubeconfig Secrets (type
/// `cluster.x-k8s.io/secret`), not a GET each: at 1,000 clusters the GETs were 1,000 requests
/// through the management cluster's rate limit. A Secret the list does not show (here one
/// re-created as `Opaque`) is read with a GET, and its cluster connects too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_clusters_connect_from_one_list_of_kubeconfig_secrets() {
    use k8s_openapi::api::core::v1::Secret;
    let arrivals = Arc::new(adapters::apiserver::arrivals::Arrivals::default());
    let fleet = sim::generate::fleet(&sim::generate::FleetSpec {
        clusters: 6,
        machines_per_cluster: 2,
        pods_per_node: 1,
        delete_fraction: 0.0,
        fail_fraction: 0.0,
        duration: engine::Duration::from_secs(60),
        seed: 1,
    });
    let server_options = ServerOptions {
        arrivals: Some(arrivals.clone()),
        ..options()
    };
    let world = ServedWorld::start(&fleet, 0, server_options).await.unwrap();
    let management = client(&world.management.url());
    let secrets: Api<Secret> = Api::namespaced(management, "default");
    let mut opaque = secrets.get("c3-kubeconfig").await.unwrap();
    secrets
        .delete("c3-kubeconfig", &DeleteParams::default())
        .await
        .unwrap();
    opaque.type_ = Some("Opaque".into());
    opaque.metadata.resource_version = None;
    opaque.metadata.uid = None;
    secrets.create(&Default::default(), &opaque).await.unwrap();
    let before = arrivals.all().len();

    let (stop, task) = start(engine::Engine::new(), &world, Arc::new(Metrics::default()));
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    let connected = |arrived: &[adapters::apiserver::arrivals::Arrival]| {
        world
            .workloads
            .values()
            .filter(|w| arrived.iter().any(|a| a.server == w.addr()))
            .count()
    };
    while connected(&arrivals.all()) < world.workloads.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} workload clusters were connected",
            connected(&arrivals.all()),
            world.workloads.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(());
    let _ = task.await;
    let secret_requests: Vec<(String, String)> = arrivals.all()[before..]
        .iter()
        .filter(|a| a.server == world.management.addr() && a.path.contains("/secrets"))
        .map(|a| (a.method.clone(), a.path.clone()))
        .collect();
    assert_eq!(
        secret_requests,
        [
            ("GET".to_string(), "/api/v1/secrets".to_string()),
            (
                "GET".to_string(),
                "/api/v1/namespaces/default/secrets/c3-kubeconfig".to_string()
            ),
        ]
    );
}
