//! WATCH: newline-delimited JSON events over a chunked HTTP/1.1 response, as kube-rs's watcher
//! reads them ("Semantics for watch" in
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/>).
//!
//! Guarantees: events come in resourceVersion order, each `{"type","object"}` on one line;
//! a watch from resourceVersion N sends every matching change after N; from unset or `0` it
//! first sends the current objects as ADDED. A resourceVersion older than the change log gets
//! HTTP 200 then one ERROR event (410 `Expired`) and the end of the stream. Bookmarks (when
//! `allowWatchBookmarks=true`) carry apiVersion, kind and the resourceVersion every matching
//! change up to which was sent. The stream ends at `timeoutSeconds`, when the client goes away,
//! or when [`super::SharedCluster::end_watches`] is called.
//! Selectors are applied to each event's object (a change that moves an object out of the
//! selection is not turned into a DELETED, unlike a real server).

use super::list::Filter;
use super::state::SharedCluster;
use super::status::Failure;
use super::{Body, ServerOptions};
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Unset or `0`: the current objects as ADDED, then changes.
    Now,
    /// Changes strictly after this resourceVersion.
    After(u64),
}

/// A parsed watch request.
pub struct WatchSpec {
    pub group_version: String,
    pub kind: String,
    pub group: String,
    pub filter: Filter,
    pub start: Start,
    pub timeout: Duration,
    pub bookmarks: bool,
    /// `sendInitialEvents=true`: end the initial ADDED events with a marked bookmark.
    pub initial_events_end: bool,
    /// How each event's object is shown (a Table row, another API group's view); `None` as stored.
    pub view: Option<View>,
}

/// A way to show stored objects (see [`WatchSpec::view`]).
pub type View = std::sync::Arc<dyn Fn(&Value) -> Value + Send + Sync>;

fn shown(spec: &WatchSpec, type_: &str, object: &Value) -> Bytes {
    match &spec.view {
        Some(view) => line(type_, &view(object)),
        None => line(type_, object),
    }
}

fn line(type_: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": type_, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn bookmark(spec: &WatchSpec, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"apiVersion": spec.group_version, "kind": spec.kind, "metadata": metadata}),
    )
}

/// Starts the watch and returns the streaming response (status 200).
pub fn respond(
    cluster: SharedCluster,
    spec: WatchSpec,
    options: &ServerOptions,
) -> hyper::Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let bookmark_every = options.bookmark_interval;
    tokio::spawn(async move {
        run(cluster, spec, bookmark_every, tx).await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(StreamBody::new(stream).boxed())
        .expect("static headers are valid")
}

async fn run(
    cluster: SharedCluster,
    spec: WatchSpec,
    bookmark_every: Duration,
    tx: mpsc::Sender<Bytes>,
) {
    let deadline = Instant::now() + spec.timeout;
    let (mut written, mut epoch) = cluster.subscribe();
    epoch.borrow_and_update();
    written.borrow_and_update();
    let mut last = match spec.start {
        Start::After(rv) => rv,
        Start::Now => {
            let (rv, initial): (u64, Vec<Bytes>) = cluster.read(|s| {
                let items = s
                    .store
                    .list(&spec.group, &spec.kind)
                    .filter(|(k, o)| spec.filter.matches(k, o))
                    .map(|(_, o)| shown(&spec, "ADDED", o))
                    .collect();
                (s.store.resource_version(), items)
            });
            for l in initial {
                if tx.send(l).await.is_err() {
                    return;
                }
            }
            if spec.initial_events_end && tx.send(bookmark(&spec, rv, true)).await.is_err() {
                return;
            }
            rv
        }
    };
    let mut next_bookmark = Instant::now() + bookmark_every;
    loop {
        written.borrow_and_update();
        let batch = cluster.read(|s| {
            s.store.changes_since(last).map(|changes| {
                let lines: Vec<Bytes> = changes
                    .filter(|c| c.key.group == spec.group && c.key.kind == spec.kind)
                    .filter(|c| spec.filter.matches(&c.key, &c.object))
                    .map(|c| shown(&spec, c.type_.as_str(), &c.object))
                    .collect();
                (lines, s.store.resource_version())
            })
        });
        match batch {
            Err(too_old) => {
                let status = Failure::expired(format!(
                    "too old resource version: {} ({})",
                    too_old.requested, too_old.compacted
                ));
                let _ = tx.send(line("ERROR", &status.to_json())).await;
                return;
            }
            Ok((lines, rv)) => {
                for l in lines {
                    if tx.send(l).await.is_err() {
                        return;
                    }
                }
                last = last.max(rv);
            }
        }
        tokio::select! {
            changed = written.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = epoch.changed() => return,
            _ = tx.closed() => return,
            _ = sleep_until(next_bookmark), if spec.bookmarks => {
                if tx.send(bookmark(&spec, last, false)).await.is_err() {
                    return;
                }
                next_bookmark = Instant::now() + bookmark_every;
            }
            _ = sleep_until(deadline) => {
                if spec.bookmarks {
                    let _ = tx.send(bookmark(&spec, last, false)).await;
                }
                return;
            }
        }
    }
}
