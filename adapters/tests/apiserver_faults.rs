//! The faults a served world injects, as the fake API server plays them to an unmodified kube-rs
//! client over HTTP: one test per behaviour (`adapters/fakeapi/src/apiserver/faults.rs`, `watch.rs`;
//! the draws themselves are `sim::wire`'s, tested there). Fault windows are on the clock the
//! server reads (`adapters::clock`, real time here), a few hundred milliseconds long.

use adapters::apiserver::faults::ServedFaults;
use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
use adapters::kube::client_for_url;
use engine::model::Scope;
use engine::{Duration as SimDuration, Timestamp};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sim::api::ClusterStore;
use sim::scenario::FaultKind;
use sim::wire::{Window, Wire};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every test finishes within this, or fails.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);

fn now() -> Timestamp {
    adapters::clock::wall_now()
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "app"},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A window of `kind` on the management cluster from `from_ms` to `until_ms` from now.
fn window(kind: FaultKind, rate: f64, from_ms: i64, until_ms: i64) -> Window {
    let t = now();
    Window {
        kind,
        scope: Some(Scope::Management),
        rate,
        delay: SimDuration::from_millis(400),
        from: t + SimDuration::from_millis(from_ms),
        until: t + SimDuration::from_millis(until_ms),
    }
}

struct Served {
    server: ApiServer,
    client: Client,
    faults: ServedFaults,
}

impl Served {
    fn fired(&self, name: &str) -> u64 {
        self.faults.lock().fired.get(name).copied().unwrap_or(0)
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn cluster(&self) -> &SharedCluster {
        self.server.cluster()
    }

    /// A raw request: its status, `Retry-After` and body, or the transport error.
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Option<String>, Value), String> {
        let mut request = http::Request::builder().method(method).uri(path);
        if method == "PATCH" {
            request = request.header("content-type", "application/merge-patch+json");
        } else if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let request = request.body(kube::client::Body::from(bytes)).unwrap();
        let response = self.client.send(request).await.map_err(|e| e.to_string())?;
        let code = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((
            code,
            retry_after,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        ))
    }
}

async fn serve(windows: Vec<Window>, objects: Vec<Value>) -> Served {
    let mut store = ClusterStore::new("t");
    for o in objects {
        store.apply(o, now()).unwrap();
    }
    let faults = ServedFaults::new(Arc::new(Mutex::new(Wire::new(42, windows))));
    let options = ServerOptions {
        bookmark_interval: Duration::from_secs(30),
        controllers_interval: None,
        faults: Some(faults.clone()),
        ..Default::default()
    };
    let server = ApiServer::start(
        SharedCluster::new(store),
        "127.0.0.1:0".parse().unwrap(),
        options,
    )
    .await
    .unwrap();
    let client = client_for_url(&server.url()).unwrap();
    Served {
        server,
        client,
        faults,
    }
}

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test timed out")
}

fn label(served: &Served, name: &str, value: &str) {
    let key = sim::api::ObjKey::new("", "Node", "", name);
    served
        .cluster()
        .write(|s| {
            s.patch(
                &key,
                &json!({"metadata": {"labels": {"v": value}}}),
                sim::api::Part::Whole,
            )
        })
        .unwrap();
}

/// A watch of the Nodes from the cluster's current resourceVersion.
async fn watch_from_now(
    nodes: &Api<Node>,
    served: &Served,
) -> futures::stream::BoxStream<'static, kube::Result<WatchEvent<Node>>> {
    nodes
        .watch(&WatchParams::default(), &rv_of(served))
        .await
        .expect("a watch")
        .boxed()
}

fn rv_of(served: &Served) -> String {
    served
        .cluster()
        .read(|s| s.store.resource_version())
        .to_string()
}

#[tokio::test]
async fn a_partition_refuses_connections_and_cuts_open_watches_then_heals() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::Partition, 1.0, 700, 1_700)],
            vec![node("n1")],
        )
        .await;
        let nodes = served.nodes();
        nodes.get("n1").await.expect("before the partition");
        let mut stream = watch_from_now(&nodes, &served).await;
        // The watch is cut when the partition starts: an error or the end, no event.
        let ended = stream.next().await;
        assert!(
            matches!(ended, None | Some(Err(_))),
            "the watch was cut, not fed: {ended:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let refused = nodes.get("n1").await;
        assert!(
            matches!(refused, Err(ref e) if !matches!(e, kube::Error::Api(_))),
            "no answer while partitioned: {refused:?}"
        );
        assert!(served.fired("partition") >= 1);
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        nodes.get("n1").await.expect("healed");
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn injected_errors_answer_500_503_and_429_with_retry_after_and_spare_a_watchers_lists() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::ApiErrors, 1.0, 0, 60_000)],
            vec![node("n1")],
        )
        .await;
        let mut codes = std::collections::BTreeSet::new();
        for _ in 0..40 {
            let (code, retry_after, body) =
                served.send("GET", "/api/v1/nodes/n1", None).await.unwrap();
            assert_eq!(body["kind"], "Status", "{body}");
            assert_eq!(body["code"], code);
            assert_eq!(retry_after.as_deref(), (code == 429).then_some("1"));
            codes.insert(code);
        }
        assert_eq!(codes.into_iter().collect::<Vec<_>>(), vec![429, 500, 503]);
        served
            .nodes()
            .list(&ListParams::default())
            .await
            .expect("a list is not an injected error's");
        assert_eq!(served.fired("api-errors"), 40);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn conflicts_refuse_updates_and_evictions_get_429_with_retry_after() {
    bounded(async {
        let served = serve(
            vec![
                window(FaultKind::Conflicts, 1.0, 0, 60_000),
                window(FaultKind::Eviction429, 1.0, 0, 60_000),
            ],
            vec![node("n1"), pod("web-0")],
        )
        .await;
        let patch = json!({"spec": {"unschedulable": true}});
        let (code, _, body) = served
            .send("PATCH", "/api/v1/nodes/n1", Some(patch))
            .await
            .unwrap();
        assert_eq!((code, body["reason"].as_str()), (409, Some("Conflict")));
        let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                              "metadata": {"name": "web-0", "namespace": "app"}});
        let (code, retry_after, body) = served
            .send(
                "POST",
                "/api/v1/namespaces/app/pods/web-0/eviction",
                Some(eviction),
            )
            .await
            .unwrap();
        assert_eq!(code, 429, "{body}");
        assert_eq!(retry_after.as_deref(), Some("10"));
        assert_eq!(body["details"]["causes"][0]["reason"], "DisruptionBudget");
        assert_eq!(body["details"]["retryAfterSeconds"], 10);
        let web0 = served.cluster().read(|s| {
            s.store
                .get(&sim::api::ObjKey::new("", "Pod", "app", "web-0"))
                .cloned()
        });
        assert!(
            !sim::api::json::is_deleting(&web0.unwrap()),
            "a refused eviction evicts nothing"
        );
        assert_eq!(served.fired("conflicts"), 1);
        assert_eq!(served.fired("eviction-429"), 1);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_slow_api_holds_requests_but_not_a_watchers_lists() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::SlowApi, 1.0, 0, 60_000)],
            vec![node("n1")],
        )
        .await;
        let nodes = served.nodes();
        let started = Instant::now();
        nodes.get("n1").await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(390), "held");
        let started = Instant::now();
        nodes.list(&ListParams::default()).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(300), "not held");
        assert_eq!(served.fired("slow-api"), 1);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_write_that_times_out_happened_and_its_answer_is_a_504_or_lost() {
    bounded(async {
        let names: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
        let served = serve(
            vec![window(FaultKind::WriteTimeout, 1.0, 0, 60_000)],
            names.iter().map(|n| node(n)).collect(),
        )
        .await;
        let (mut answered, mut dropped) = (0, 0);
        for name in &names {
            let patch = json!({"metadata": {"labels": {"written": "yes"}}});
            match served
                .send("PATCH", &format!("/api/v1/nodes/{name}"), Some(patch))
                .await
            {
                Ok((504, _, body)) => {
                    assert_eq!(body["reason"], "Timeout");
                    answered += 1;
                }
                Ok(other) => panic!("a timeout, not {other:?}"),
                Err(_) => dropped += 1,
            }
            let stored = served.cluster().read(|s| {
                s.store
                    .get(&sim::api::ObjKey::new("", "Node", "", name))
                    .cloned()
            });
            assert_eq!(
                stored.unwrap()["metadata"]["labels"]["written"],
                "yes",
                "the write happened"
            );
        }
        assert!(
            answered > 0 && dropped > 0,
            "{answered} 504s, {dropped} lost"
        );
        assert_eq!(served.fired("write-timeout"), 8);
        served.server.shutdown().await;
    })
    .await;
}

/// Reads the next watch event, `None` when nothing comes within `within`.
async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Node>>> + Unpin),
    within: Duration,
) -> Option<Option<kube::Result<WatchEvent<Node>>>> {
    tokio::time::timeout(within, stream.next()).await.ok()
}

fn is_gone(event: &Option<kube::Result<WatchEvent<Node>>>) -> bool {
    matches!(event, Some(Ok(WatchEvent::Error(e))) if e.code == 410)
}

#[tokio::test]
async fn a_watch_gap_withholds_events_then_cuts_the_stream_and_its_resume_gets_410() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::WatchGap, 1.0, 0, 800)],
            vec![node("n1")],
        )
        .await;
        let nodes = served.nodes();
        let from = rv_of(&served);
        let mut stream = nodes
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        label(&served, "n1", "lost");
        assert!(
            next_event(&mut stream, Duration::from_millis(500))
                .await
                .is_none(),
            "withheld while the gap lasts"
        );
        let ended = next_event(&mut stream, Duration::from_secs(2))
            .await
            .expect("the stream ends when the gap does");
        assert!(
            matches!(ended, None | Some(Err(_))),
            "cut, not fed: {ended:?}"
        );
        let mut resumed = nodes
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        let first = next_event(&mut resumed, Duration::from_secs(2))
            .await
            .expect("an answer");
        assert!(is_gone(&first), "a resume from before the gap: {first:?}");
        // Listed again, the watch goes on from the list.
        let list = nodes.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items[0].labels()["v"], "lost");
        let mut fresh = nodes
            .watch(
                &WatchParams::default(),
                list.metadata.resource_version.as_deref().unwrap(),
            )
            .await
            .unwrap()
            .boxed();
        label(&served, "n1", "seen");
        let event = next_event(&mut fresh, Duration::from_secs(2)).await;
        assert!(
            matches!(event, Some(Some(Ok(WatchEvent::Modified(ref n)))) if n.labels()["v"] == "seen"),
            "{event:?}"
        );
        assert_eq!(served.fired("watch-gap"), 1);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn watches_expire_with_410_when_watch_expired_starts() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::WatchExpired, 1.0, 500, 60_000)],
            vec![node("n1")],
        )
        .await;
        let nodes = served.nodes();
        let from = rv_of(&served);
        let mut stream = nodes
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        let ended = next_event(&mut stream, Duration::from_secs(3))
            .await
            .expect("the watch ends");
        if !is_gone(&ended) {
            // Cut mid-stream: the resume is what gets 410.
            assert!(matches!(ended, None | Some(Err(_))), "{ended:?}");
            let mut resumed = nodes
                .watch(&WatchParams::default(), &from)
                .await
                .unwrap()
                .boxed();
            let first = next_event(&mut resumed, Duration::from_secs(2))
                .await
                .expect("an answer");
            assert!(is_gone(&first), "{first:?}");
        }
        assert_eq!(served.fired("watch-expired"), 1);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn after_a_list_the_watch_repeats_what_the_list_carried_under_relist_duplicates() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::RelistDuplicates, 1.0, 0, 60_000)],
            vec![node("n1"), node("n2")],
        )
        .await;
        let nodes = served.nodes();
        let list = nodes.list(&ListParams::default()).await.unwrap();
        let mut stream = nodes
            .watch(
                &WatchParams::default(),
                list.metadata.resource_version.as_deref().unwrap(),
            )
            .await
            .unwrap()
            .boxed();
        let mut repeated = Vec::new();
        for _ in 0..2 {
            match next_event(&mut stream, Duration::from_secs(2)).await {
                Some(Some(Ok(WatchEvent::Modified(n)))) => repeated.push(n.name_any()),
                other => panic!("a repeat: {other:?}"),
            }
        }
        repeated.sort();
        assert_eq!(repeated, ["n1", "n2"]);
        assert_eq!(served.fired("relist-duplicates"), 2);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_slow_consumer_sees_only_the_latest_state_of_an_object() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::CoalescedEvents, 1.0, 0, 60_000)],
            vec![node("n1")],
        )
        .await;
        let nodes = served.nodes();
        let mut stream = watch_from_now(&nodes, &served).await;
        for v in ["1", "2", "3"] {
            label(&served, "n1", v);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let event = next_event(&mut stream, Duration::from_secs(3)).await;
        assert!(
            matches!(event, Some(Some(Ok(WatchEvent::Modified(ref n)))) if n.labels()["v"] == "3"),
            "only the latest state: {event:?}"
        );
        assert!(
            next_event(&mut stream, Duration::from_millis(300))
                .await
                .is_none(),
            "nothing else"
        );
        assert_eq!(served.fired("coalesced-events"), 2);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_stalled_network_delivers_every_event_in_one_burst() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::BacklogBatches, 1.0, 0, 60_000)],
            vec![node("n1"), node("n2"), node("n3")],
        )
        .await;
        let nodes = served.nodes();
        let mut stream = watch_from_now(&nodes, &served).await;
        let first_write = Instant::now();
        for n in ["n1", "n2", "n3"] {
            label(&served, n, "x");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut arrivals = Vec::new();
        for _ in 0..3 {
            let event = next_event(&mut stream, Duration::from_secs(3)).await;
            assert!(
                matches!(event, Some(Some(Ok(WatchEvent::Modified(_))))),
                "{event:?}"
            );
            arrivals.push(first_write.elapsed());
        }
        assert!(
            arrivals[0] >= Duration::from_millis(45),
            "held: {arrivals:?}"
        );
        assert!(
            arrivals[2] - arrivals[0] < Duration::from_millis(30),
            "in one burst: {arrivals:?}"
        );
        assert_eq!(served.fired("backlog-batches"), 1);
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn reordered_delivery_delays_answers_and_counts_which_came_first() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::ReorderedDelivery, 1.0, 0, 60_000)],
            vec![node("n1")],
        )
        .await;
        let nodes = served.nodes();
        let mut stream = watch_from_now(&nodes, &served).await;
        let drain = tokio::spawn(async move { while let Some(Ok(_)) = stream.next().await {} });
        for i in 0..20 {
            let patch = json!({"metadata": {"labels": {"v": i.to_string()}}});
            nodes
                .patch("n1", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
        let [before, after, _] = sim::sweep::DELIVERY_ORDERS;
        assert_eq!(served.fired(before) + served.fired(after), 20);
        assert_eq!(served.fired("reordered-delivery"), served.fired(after));
        drain.abort();
        served.server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn an_unsynced_cache_holds_a_watchers_lists_until_the_fault_ends() {
    bounded(async {
        let served = serve(
            vec![window(FaultKind::CacheUnsynced, 1.0, 0, 600)],
            vec![node("n1")],
        )
        .await;
        let nodes = served.nodes();
        let started = Instant::now();
        nodes.get("n1").await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "a get is not held"
        );
        nodes.list(&ListParams::default()).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(550),
            "a list answers when the cache syncs"
        );
        served.server.shutdown().await;
    })
    .await;
}
