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

use super::faults::ServedFaults;
use super::list::Filter;
use super::state::SharedCluster;
use super::status::Failure;
use super::{Body, ServerOptions};
use crate::clock;
use bytes::Bytes;
use engine::Timestamp;
use engine::model::Scope;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use sim::scenario::FaultKind;
use sim::wire::Expiry;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
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
    /// The faults the world injects into this cluster's watch streams (`None`: none).
    pub faults: Option<WatchFaults>,
}

/// A watch's handle on its cluster's faults.
pub struct WatchFaults {
    pub served: ServedFaults,
    /// Drops the watch's connection (a cut mid-stream).
    pub cut: Arc<Notify>,
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
    let stream = engine::intake::streams::stream_id(&spec.group, &spec.kind);
    let mut faulted = spec.faults.as_ref().map(|f| Faulted::new(f, &stream));
    let mut last = match spec.start {
        Start::After(rv) => {
            if faulted.as_ref().is_some_and(|f| f.resume_expired(rv)) {
                // The server lost events after `rv` (a watch gap, a watch that expired).
                let current = cluster.read(|s| s.store.resource_version());
                let _ = tx.send(expired(rv, current)).await;
                return;
            }
            rv
        }
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
    if let Some(f) = &faulted
        && f.duplicates_now()
    {
        // `relist-duplicates`: after a list, the watch repeats objects the list carried.
        let repeats = cluster.read(|s| unchanged_since(&s.store, &spec, last));
        for object in repeats {
            f.served.lock().fire(FaultKind::RelistDuplicates);
            if tx.send(shown(&spec, "MODIFIED", &object)).await.is_err() {
                return;
            }
        }
    }
    let mut next_bookmark = Instant::now() + bookmark_every;
    loop {
        written.borrow_and_update();
        let batch = cluster.read(|s| {
            s.store.changes_since(last).map(|changes| {
                let held: Vec<Held> = changes
                    .filter(|c| c.key.group == spec.group && c.key.kind == spec.kind)
                    .filter(|c| spec.filter.matches(&c.key, &c.object))
                    .map(|c| Held {
                        type_: c.type_.as_str(),
                        resource_version: c.resource_version,
                        key: c.key.clone(),
                        object: c.object.clone(),
                    })
                    .collect();
                (held, s.store.resource_version())
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
            Ok((changes, rv)) => {
                let sent = match &mut faulted {
                    None => send_all(&spec, &tx, changes).await,
                    Some(f) => f.deliver(&spec, &tx, changes, rv).await,
                };
                match sent {
                    Sent::Ok => {}
                    Sent::Gone => return,
                }
                last = last.max(rv);
            }
        }
        let (flush_at, boundary) = match &faulted {
            Some(f) => (f.flush_at, f.next_boundary()),
            None => (None, None),
        };
        let quiet = faulted.as_ref().is_none_or(|f| f.may_bookmark());
        tokio::select! {
            changed = written.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = epoch.changed() => return,
            _ = tx.closed() => return,
            _ = sleep_until(next_bookmark), if spec.bookmarks => {
                if quiet && tx.send(bookmark(&spec, last, false)).await.is_err() {
                    return;
                }
                next_bookmark = Instant::now() + bookmark_every;
            }
            _ = sleep_until(flush_at.unwrap_or(deadline)), if flush_at.is_some() => {
                if let Some(f) = &mut faulted
                    && let Sent::Gone = f.flush(&spec, &tx).await
                {
                    return;
                }
            }
            _ = sleep_until(boundary.unwrap_or(deadline)), if boundary.is_some() => {
                if let Some(f) = &mut faulted
                    && let Sent::Gone = f.at_boundary(&spec, &tx, last).await
                {
                    return;
                }
            }
            _ = sleep_until(deadline) => {
                if spec.bookmarks && quiet {
                    let _ = tx.send(bookmark(&spec, last, false)).await;
                }
                return;
            }
        }
    }
}

/// The in-stream 410 a watch gets when it cannot resume from `requested`.
fn expired(requested: u64, current: u64) -> Bytes {
    let status = Failure::expired(format!("too old resource version: {requested} ({current})"));
    line("ERROR", &status.to_json())
}

/// One change on its way to the client.
struct Held {
    type_: &'static str,
    resource_version: u64,
    key: sim::api::ObjKey,
    object: std::sync::Arc<Value>,
}

/// Whether the stream goes on.
enum Sent {
    Ok,
    Gone,
}

async fn send_all(spec: &WatchSpec, tx: &mpsc::Sender<Bytes>, changes: Vec<Held>) -> Sent {
    for c in changes {
        if tx.send(shown(spec, c.type_, &c.object)).await.is_err() {
            return Sent::Gone;
        }
    }
    Sent::Ok
}

/// The objects a watch starting at `rv` repeats under `relist-duplicates`: the most recently
/// changed ones that have not changed since (their state is what the list carried).
fn unchanged_since(store: &sim::api::ClusterStore, spec: &WatchSpec, rv: u64) -> Vec<Value> {
    let mut objects: Vec<(u64, Value)> = store
        .list(&spec.group, &spec.kind)
        .filter(|(k, o)| spec.filter.matches(k, o))
        .filter_map(|(_, o)| {
            let at = o
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<u64>().ok())?;
            (at <= rv).then(|| (at, o.clone()))
        })
        .collect();
    objects.sort_by_key(|(at, _)| *at);
    let from = objects.len().saturating_sub(sim::wire::DUPLICATES_MAX);
    objects.drain(from..).map(|(_, o)| o).collect()
}

/// A watch stream under its cluster's faults (see [`super::faults`]).
struct Faulted {
    served: ServedFaults,
    cut: Arc<Notify>,
    /// `group/Kind`.
    stream: String,
    /// Draws made for this stream so far (each draw its own number).
    draws: u64,
    /// This stream withheld events (a watch gap): it is cut when the gap ends.
    withheld: bool,
    /// Events held back (a slow consumer's, or a stalled network's) and when they go out.
    pending: Vec<Held>,
    flush_at: Option<Instant>,
    /// Whether the held events are coalesced (the latest state of each object only).
    coalescing: bool,
    /// Fault boundaries up to here are handled.
    checked: Timestamp,
}

impl Faulted {
    fn new(f: &WatchFaults, stream: &str) -> Self {
        Faulted {
            served: f.served.clone(),
            cut: f.cut.clone(),
            stream: stream.to_string(),
            draws: 0,
            withheld: false,
            pending: Vec::new(),
            flush_at: None,
            coalescing: false,
            checked: clock::wall_now(),
        }
    }

    fn scope(&self) -> &Scope {
        &self.served.scope
    }

    fn draw(&mut self) -> u64 {
        self.draws += 1;
        self.draws - 1
    }

    fn resume_expired(&self, rv: u64) -> bool {
        self.served
            .lock()
            .resume_expired(self.scope(), &self.stream, rv)
    }

    fn duplicates_now(&self) -> bool {
        self.served
            .lock()
            .duplicates(self.scope(), clock::wall_now())
    }

    /// No bookmark may tell the client it has seen what was withheld or is held.
    fn may_bookmark(&self) -> bool {
        !self.withheld
            && self.pending.is_empty()
            && !self.served.lock().gap(self.scope(), clock::wall_now())
    }

    fn next_boundary(&self) -> Option<Instant> {
        let at = self
            .served
            .lock()
            .next_boundary(self.scope(), self.checked)?;
        Some(Instant::now() + clock::until(at))
    }

    /// Cuts the stream's connection mid-stream.
    fn cut(&self) -> Sent {
        self.cut.notify_one();
        Sent::Gone
    }

    /// Sends a batch of changes through the faults: a gap withholds them, an expiry ends the
    /// stream in their stead, a slow consumer or a stalled network holds them, a reordering
    /// network delays them (in order).
    async fn deliver(
        &mut self,
        spec: &WatchSpec,
        tx: &mpsc::Sender<Bytes>,
        changes: Vec<Held>,
        current: u64,
    ) -> Sent {
        if changes.is_empty() {
            return Sent::Ok;
        }
        let now = clock::wall_now();
        let mut out = Vec::with_capacity(changes.len());
        for c in changes {
            let n = self.draw();
            let scope = self.scope().clone();
            let name = if c.key.namespace.is_empty() {
                c.key.name.clone()
            } else {
                format!("{}/{}", c.key.namespace, c.key.name)
            };
            let fate = {
                let mut wire = self.served.lock();
                if wire.gap(&scope, now) {
                    wire.withheld(&scope, &self.stream, c.resource_version);
                    None
                } else {
                    let expiry = wire.expires_on_event(&scope, now, &self.stream, &name, n);
                    if expiry == Some(Expiry::Cut) {
                        wire.expire_below(&scope, &self.stream, c.resource_version);
                    }
                    Some(expiry)
                }
            };
            match fate {
                None => self.withheld = true,
                Some(None) => out.push(c),
                Some(Some(Expiry::InStream)) => {
                    let _ = tx.send(expired(c.resource_version - 1, current)).await;
                    return Sent::Gone;
                }
                Some(Some(Expiry::Cut)) => return self.cut(),
            }
        }
        let (coalesce, burst, latency) = {
            let n = self.draw();
            let wire = self.served.lock();
            let scope = self.scope();
            (
                wire.coalesce_hold(scope, now, &self.stream, n),
                wire.burst_hold(scope, now, &self.stream, n),
                wire.event_latency(scope, now, &self.stream, n),
            )
        };
        if let Some(hold) = coalesce.or(burst) {
            self.coalescing |= coalesce.is_some();
            for c in out {
                self.hold(c);
            }
            if self.flush_at.is_none() {
                self.flush_at = Some(Instant::now() + super::faults::real(hold));
            }
            return Sent::Ok;
        }
        self.pending.extend(out);
        if let Some(latency) = latency {
            tokio::time::sleep(super::faults::real(latency)).await;
        }
        self.flush(spec, tx).await
    }

    /// Holds a change; a slow consumer keeps only the latest state of each object.
    fn hold(&mut self, c: Held) {
        if self.coalescing
            && let Some(i) = self.pending.iter().position(|p| p.key == c.key)
        {
            self.served.lock().fire(FaultKind::CoalescedEvents);
            self.pending.remove(i);
        }
        self.pending.push(c);
    }

    /// Sends what is held, in resourceVersion order.
    async fn flush(&mut self, spec: &WatchSpec, tx: &mpsc::Sender<Bytes>) -> Sent {
        let held = std::mem::take(&mut self.pending);
        if self.flush_at.take().is_some() && !self.coalescing && held.len() > 1 {
            self.served.lock().fire(FaultKind::BacklogBatches);
        }
        self.coalescing = false;
        let top = held.iter().map(|h| h.resource_version).max();
        let sent = send_all(spec, tx, held).await;
        if let Some(top) = top {
            self.served
                .lock()
                .note_sent(&self.served.scope, &self.stream, top);
        }
        sent
    }

    /// A fault window opened or closed: a watch gap that ends cuts a stream that withheld
    /// events (its resume gets 410); `watch-expired` and `relist-duplicates` starting end the
    /// stream (in-stream 410, or a cut and a 410 on resume), so that the client relists; held
    /// events go out when their fault ends.
    async fn at_boundary(&mut self, spec: &WatchSpec, tx: &mpsc::Sender<Bytes>, last: u64) -> Sent {
        let now = clock::wall_now();
        let scope = self.scope().clone();
        let (gap_over, expire, relist) = {
            let wire = self.served.lock();
            (
                self.withheld && !wire.gap(&scope, now),
                wire.opened(&scope, FaultKind::WatchExpired, self.checked, now) > 0,
                wire.opened(&scope, FaultKind::RelistDuplicates, self.checked, now) > 0,
            )
        };
        self.checked = now;
        if gap_over {
            return self.cut();
        }
        if expire {
            let n = self.draw();
            let hit = sim::wire::watch_hit(&self.stream, "");
            let how = {
                let mut wire = self.served.lock();
                wire.fire(FaultKind::WatchExpired);
                wire.expiry(&scope, &hit, n)
            };
            return match how {
                Expiry::InStream => {
                    let _ = tx.send(expired(last, last)).await;
                    Sent::Gone
                }
                Expiry::Cut => {
                    self.served
                        .lock()
                        .expire_below(&scope, &self.stream, last + 1);
                    self.cut()
                }
            };
        }
        if relist {
            let _ = tx.send(expired(last, last)).await;
            return Sent::Gone;
        }
        let holding = {
            let wire = self.served.lock();
            wire.is_active(&scope, now, FaultKind::CoalescedEvents)
                || wire.is_active(&scope, now, FaultKind::BacklogBatches)
        };
        if !holding && !self.pending.is_empty() {
            return self.flush(spec, tx).await;
        }
        Sent::Ok
    }
}
