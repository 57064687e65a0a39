//! The watch streams: the task that runs one `kube::runtime::watcher` for a resource type the
//! intake chose (`engine::intake::streams`) and forwards its events to the adapter loop.

use super::adapter::{Event, Queued};
use engine::intake::Arrival;
use engine::intake::mirror::StreamEvent;
use engine::intake::streams::{StreamKey, stream_id};
use engine::model::Scope;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc};

/// The label of CAPI's multi-instance contract: a manager run with `--watch-filter=V`
/// reconciles only objects labelled `cluster.x-k8s.io/watch-filter=V`.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

/// The kinds `--watch-filter` narrows: those this controller reconciles. What it only reads
/// (Clusters, MachineSets, provider objects, drain rules) is narrowed by `--namespace` alone,
/// so an unlabelled one reads as it is, never as absent.
const FILTERED_KINDS: [&str; 3] = ["Machine", "MachineHealthCheck", "MachinePool"];

/// Which part of the management cluster this controller sees (`--namespace`, `--watch-filter`):
/// objects outside it never reach the engine, so nothing is decided or done about them.
/// Workload clusters are not narrowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchScope {
    pub namespace: Option<String>,
    pub watch_filter: Option<String>,
}

impl WatchScope {
    /// The label selector of a management stream of `kind`, if any.
    fn labels(&self, kind: &str) -> Option<String> {
        let value = self.watch_filter.as_ref()?;
        FILTERED_KINDS
            .contains(&kind)
            .then(|| format!("{WATCH_FILTER_LABEL}={value}"))
    }
}

/// One watched resource type in one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    pub scope: Scope,
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Within the management cluster: `--namespace`.
    pub namespace: Option<String>,
    /// Within the management cluster: `--watch-filter`'s selector.
    pub labels: Option<String>,
}

impl StreamSpec {
    pub fn new(scope: &Scope, group: &str, version: &str, kind: &str) -> Self {
        StreamSpec {
            scope: scope.clone(),
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            namespace: None,
            labels: None,
        }
    }

    /// Narrowed to `within` when it watches the management cluster.
    pub fn within(mut self, within: &WatchScope) -> Self {
        if self.scope == Scope::Management {
            self.namespace = within.namespace.clone();
            self.labels = within.labels(&self.kind);
        }
        self
    }

    /// The stream's name within its scope (`cluster.x-k8s.io/Machine`).
    pub fn id(&self) -> String {
        format!("{}/{}", self.group, self.kind)
    }

    pub fn api_resource(&self) -> ApiResource {
        let api_version = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version,
            kind: self.kind.clone(),
            plural: engine::convert::plural(&self.kind),
        }
    }
}

impl From<&StreamKey> for StreamSpec {
    fn from(key: &StreamKey) -> Self {
        StreamSpec::new(&key.scope, &key.group, &key.version, &key.kind)
    }
}

/// An object as the API sent it, whatever it holds: the watcher needs only its name, namespace
/// and resourceVersion, read leniently, and the engine reads the rest (`engine::convert`,
/// which keeps what does not read as an unreadable object). kube's `DynamicObject` types its
/// metadata, so one whose creation time does not parse or whose label is a number fails to
/// decode, and its watch events would be lost: the controller would never learn it cannot read
/// it.
#[derive(Clone, Debug)]
pub struct RawObject {
    meta: ObjectMeta,
    json: Value,
}

impl<'de> serde::Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let json = Value::deserialize(d)?;
        let text = |key: &str| {
            json.pointer(&format!("/metadata/{key}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let meta = ObjectMeta {
            name: text("name"),
            namespace: text("namespace"),
            resource_version: text("resourceVersion"),
            uid: text("uid"),
            ..ObjectMeta::default()
        };
        Ok(RawObject { meta, json })
    }
}

impl kube::Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

fn to_json(spec: &StreamSpec, object: RawObject) -> Value {
    let mut v = object.json;
    if let Some(map) = v.as_object_mut() {
        let ar = spec.api_resource();
        map.entry("apiVersion").or_insert(json!(ar.api_version));
        map.entry("kind").or_insert(json!(ar.kind));
    }
    v
}

/// kube's default watcher backoff (0.8 s doubling to 30 s, with jitter) on the controller's
/// clock: a clock run N times fast (`--clock-speed`, simulated runs) waits N times less, so a
/// watcher reconnects after the same simulated time as it would in production.
pub struct ClockBackoff {
    inner: watcher::DefaultBackoff,
    speed: u32,
}

impl Default for ClockBackoff {
    fn default() -> Self {
        ClockBackoff {
            inner: watcher::DefaultBackoff::default(),
            speed: crate::clock::speed().max(1),
        }
    }
}

impl Iterator for ClockBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|d| d / self.speed)
    }
}

impl kube::runtime::utils::Backoff for ClockBackoff {
    fn reset(&mut self) {
        self.inner.reset();
    }
}

/// Runs the watcher of `spec` until the receiver is gone (or the task is aborted). Watch
/// errors are logged and retried with kube's default backoff on the controller's clock
/// ([`ClockBackoff`]); a 410 makes it relist.
///
/// With `lists`, the first list waits for a permit and holds it until it is done (or fails):
/// a thousand clusters connected at once would otherwise hold every list response in memory
/// at the same time (330 MiB of the peak at 10,000 Machines, BENCHMARKS.md).
pub async fn run_stream(
    client: Client,
    spec: StreamSpec,
    tx: mpsc::Sender<Queued>,
    lists: Option<Arc<Semaphore>>,
) {
    let mut listing = match lists {
        Some(lists) => lists.acquire_owned().await.ok(),
        None => None,
    };
    let api: Api<RawObject> = match &spec.namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, &spec.api_resource()),
        None => Api::all_with(client, &spec.api_resource()),
    };
    let mut config = watcher::Config::default();
    if let Some(labels) = &spec.labels {
        config = config.labels(labels);
    }
    let mut events = watcher(api, config)
        .backoff(ClockBackoff::default())
        .boxed();
    let stream = spec.id();
    while let Some(item) = events.next().await {
        if !matches!(
            item,
            Ok(watcher::Event::Init | watcher::Event::InitApply(_))
        ) {
            drop(listing.take());
        }
        let event = match item {
            Ok(watcher::Event::Init) => StreamEvent::Init,
            Ok(watcher::Event::InitApply(o)) => StreamEvent::InitApply(to_json(&spec, o).into()),
            Ok(watcher::Event::InitDone) => StreamEvent::InitDone,
            Ok(watcher::Event::Apply(o)) => StreamEvent::Apply(to_json(&spec, o).into()),
            Ok(watcher::Event::Delete(o)) => StreamEvent::Delete(to_json(&spec, o).into()),
            Err(watcher::Error::InitialListFailed(e)) if refusal(&e).is_some() => {
                let problem = list_refused(&spec, &e);
                tracing::warn!(stream = %stream, scope = ?spec.scope, "{problem}");
                StreamEvent::Unavailable(problem)
            }
            Err(e) => {
                tracing::warn!(stream = %stream, scope = ?spec.scope, "watch: {e}");
                continue;
            }
        };
        let message = Event::Arrival(Arrival::Watch {
            scope: spec.scope.clone(),
            stream: stream.clone(),
            event,
        });
        if tx.send(message.into()).await.is_err() {
            return;
        }
    }
}

/// The API's answer when it is a refusal that retrying will not change soon: 404 (it does not
/// serve the resource) or 403 (it does not let us).
pub fn refusal(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(status) if matches!(status.code, 403 | 404) => Some(status),
        _ => None,
    }
}

/// What an operator reads when a stream's list is refused: what, why, what unblocks it.
pub fn list_refused(spec: &StreamSpec, e: &kube::Error) -> String {
    let ar = spec.api_resource();
    let resource = if ar.group.is_empty() {
        format!("{}/{}", ar.plural, ar.version)
    } else {
        format!("{}.{}/{}", ar.plural, ar.group, ar.version)
    };
    match refusal(e) {
        Some(s) if s.code == 404 => {
            format!("the API does not serve {resource} (404 on list): is its CRD installed?")
        }
        Some(s) => format!(
            "the API refuses to list {resource} (403: {}): the controller's ClusterRole must allow \
             get, list and watch on it",
            s.message
        ),
        None => format!("listing {resource} failed: {e}"),
    }
}

/// The group's preferred version; `Err((problem, refused))`, `refused` when the API will not
/// serve the group to us (404, 403) rather than failed to answer.
async fn preferred_version(client: &Client, group: &str) -> Result<String, (String, bool)> {
    let request = http::Request::get(format!("/apis/{group}"))
        .body(Vec::new())
        .map_err(|e| (e.to_string(), false))?;
    let v: Value = client.request(request).await.map_err(|e| {
        let refused = super::streams::refusal(&e).map(|s| s.code);
        match refused {
            Some(404) => (
                format!("the API does not serve the group {group} (404 on /apis/{group}): are its CRDs installed?"),
                true,
            ),
            Some(_) => (format!("the API refuses discovery of the group {group} (403): {e}"), true),
            None => (e.to_string(), false),
        }
    })?;
    v.pointer("/preferredVersion/version")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| (format!("no preferred version for {group}"), false))
}

/// Watches a provider kind of the management cluster, asking discovery for its version first
/// when the reference named none (retried every `retry`; a group the API refuses to serve is
/// told to the loop as unavailable).
pub async fn watch_provider(
    client: Client,
    tx: mpsc::Sender<Queued>,
    retry: std::time::Duration,
    (group, version, kind): (String, Option<String>, String),
    within: WatchScope,
) {
    let version = match version {
        Some(v) => v,
        None => loop {
            match preferred_version(&client, &group).await {
                Ok(v) => break v,
                Err((problem, refused)) => {
                    tracing::warn!(%group, "discovery: {problem}");
                    if refused {
                        let unavailable = Event::Arrival(Arrival::Watch {
                            scope: Scope::Management,
                            stream: stream_id(&group, &kind),
                            event: StreamEvent::Unavailable(problem),
                        });
                        if tx.send(unavailable.into()).await.is_err() {
                            return;
                        }
                    }
                    tokio::time::sleep(retry).await;
                }
            }
        },
    };
    run_stream(
        client,
        StreamSpec::new(&Scope::Management, &group, &version, &kind).within(&within),
        tx,
        None,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakeapi::apiserver::{ApiServer, ServerOptions, SharedCluster};
    use sim::api::ClusterStore;
    use std::time::Duration;

    fn node(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    }

    async fn next_event(rx: &mut mpsc::Receiver<Queued>, within: Duration) -> Option<StreamEvent> {
        match tokio::time::timeout(within, rx.recv()).await {
            Ok(Some(Queued {
                event: Event::Arrival(Arrival::Watch { event, .. }),
                ..
            })) => Some(event),
            Ok(_) => panic!("the stream ended or sent something else"),
            Err(_) => None,
        }
    }

    #[test]
    fn the_watch_filter_narrows_what_is_reconciled_and_the_namespace_every_management_stream() {
        let within = WatchScope {
            namespace: Some("team-blue".into()),
            watch_filter: Some("blue".into()),
        };
        let m = Scope::Management;
        let machines =
            StreamSpec::new(&m, "cluster.x-k8s.io", "v1beta2", "Machine").within(&within);
        assert_eq!(
            (machines.namespace.as_deref(), machines.labels.as_deref()),
            (
                Some("team-blue"),
                Some("cluster.x-k8s.io/watch-filter=blue")
            )
        );
        for kind in ["Cluster", "MachineSet", "MachineDrainRule"] {
            let read_only =
                StreamSpec::new(&m, "cluster.x-k8s.io", "v1beta2", kind).within(&within);
            assert_eq!(
                (read_only.namespace.as_deref(), read_only.labels),
                (Some("team-blue"), None),
                "{kind}: read as it is, never as absent"
            );
        }
        let workload = Scope::Workload(engine::model::ClusterName::new("team-blue", "blue"));
        let nodes = StreamSpec::new(&workload, "", "v1", "Node").within(&within);
        assert_eq!((nodes.namespace, nodes.labels), (None, None));
    }

    #[tokio::test]
    async fn a_first_list_waits_for_a_permit_and_gives_it_back_when_done() {
        let mut store = ClusterStore::new("t");
        store.create(node("n0"), crate::clock::wall_now()).unwrap();
        let server = ApiServer::start(
            SharedCluster::new(store),
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::default(),
        )
        .await
        .unwrap();
        let client = crate::kube::client_for_url(&server.url()).unwrap();
        let scope = Scope::Workload(engine::model::ClusterName::new("default", "c1"));
        let spec = StreamSpec::new(&scope, "", "v1", "Node");
        let lists = Arc::new(Semaphore::new(0));
        let (tx, mut rx) = mpsc::channel(16);
        let task = tokio::spawn(run_stream(client, spec, tx, Some(lists.clone())));

        let waiting = next_event(&mut rx, Duration::from_millis(300)).await;
        assert!(waiting.is_none(), "listed without a permit: {waiting:?}");

        lists.add_permits(1);
        let mut events = Vec::new();
        while let Some(event) = next_event(&mut rx, Duration::from_secs(10)).await {
            let done = matches!(event, StreamEvent::InitDone);
            events.push(event);
            if done {
                break;
            }
        }
        assert!(
            matches!(events.last(), Some(StreamEvent::InitDone)),
            "{events:?}"
        );
        assert_eq!(events.len(), 3, "Init, the node, InitDone: {events:?}");
        assert_eq!(
            lists.available_permits(),
            1,
            "the permit is back once listed"
        );
        task.abort();
    }

    #[tokio::test]
    async fn an_object_kube_cannot_type_still_reaches_the_engine_as_sent() {
        // A creation time that does not parse and a label that is a number: kube's typed
        // metadata cannot decode them, the engine must see them to call the object unreadable.
        let mut bad = node("n1");
        bad["metadata"]["creationTimestamp"] = json!("yesterday");
        let mut store = ClusterStore::new("t");
        store.create(node("n0"), crate::clock::wall_now()).unwrap();
        let cluster = SharedCluster::new(store);
        let server = ApiServer::start(
            cluster.clone(),
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::default(),
        )
        .await
        .unwrap();
        let client = crate::kube::client_for_url(&server.url()).unwrap();
        let scope = Scope::Workload(engine::model::ClusterName::new("default", "c1"));
        let spec = StreamSpec::new(&scope, "", "v1", "Node");
        let (tx, mut rx) = mpsc::channel(16);
        let task = tokio::spawn(run_stream(client, spec, tx, None));
        while let Some(event) = next_event(&mut rx, Duration::from_secs(10)).await {
            if matches!(event, StreamEvent::InitDone) {
                break;
            }
        }
        cluster.write(|s| {
            s.create(bad, crate::clock::wall_now()).unwrap();
            let key = sim::api::ObjKey::new("", "Node", "", "n0");
            s.patch(
                &key,
                &json!({"metadata": {"labels": {"x": 17}}}),
                sim::api::Part::Whole,
            )
            .unwrap();
        });
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match next_event(&mut rx, Duration::from_secs(10)).await {
                Some(StreamEvent::Apply(o)) => seen.push(o.value),
                other => panic!("an Apply, not {other:?}"),
            }
        }
        assert_eq!(seen[0]["metadata"]["creationTimestamp"], "yesterday");
        assert_eq!(seen[1]["metadata"]["labels"]["x"], 17);
        assert_eq!(seen[1]["kind"], "Node");
        task.abort();
        server.shutdown().await;
    }
}
