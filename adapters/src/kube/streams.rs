//! The watch streams: the task that runs one `kube::runtime::watcher` for a resource type the
//! intake chose (`engine::intake::streams`) and forwards its events to the adapter loop.

use super::adapter::{Event, Queued};
use engine::intake::Arrival;
use engine::intake::mirror::StreamEvent;
use engine::intake::streams::StreamKey;
use engine::model::Scope;
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// One watched resource type in one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    pub scope: Scope,
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl StreamSpec {
    pub fn new(scope: &Scope, group: &str, version: &str, kind: &str) -> Self {
        StreamSpec {
            scope: scope.clone(),
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        }
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

fn to_json(spec: &StreamSpec, object: &DynamicObject) -> Value {
    let mut v = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        let ar = spec.api_resource();
        map.entry("apiVersion").or_insert(json!(ar.api_version));
        map.entry("kind").or_insert(json!(ar.kind));
    }
    v
}

/// Runs the watcher of `spec` until the receiver is gone (or the task is aborted). Watch
/// errors are logged and retried with kube's default backoff; a 410 makes it relist.
pub async fn run_stream(client: Client, spec: StreamSpec, tx: mpsc::Sender<Queued>) {
    let api: Api<DynamicObject> = Api::all_with(client, &spec.api_resource());
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let stream = spec.id();
    while let Some(item) = events.next().await {
        let event = match item {
            Ok(watcher::Event::Init) => StreamEvent::Init,
            Ok(watcher::Event::InitApply(o)) => StreamEvent::InitApply(to_json(&spec, &o)),
            Ok(watcher::Event::InitDone) => StreamEvent::InitDone,
            Ok(watcher::Event::Apply(o)) => StreamEvent::Apply(to_json(&spec, &o)),
            Ok(watcher::Event::Delete(o)) => StreamEvent::Delete(to_json(&spec, &o)),
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
