//! Watch events of many streams → engine inputs.
//!
//! The adapter runs one watcher per resource type. The first [`Input::Relist`] of a scope (one
//! cluster) waits until every stream registered for it has listed once; until then the mirror
//! keeps what each stream reported, and that relist takes it (the engine's store is then the
//! only copy of every object). Afterwards events flow as `Upsert`/`Delete`, and a stream that
//! lists again (its watch ended with 410 Gone) relists its own kind: [`Input::RelistKind`].
//! A stream registered *on demand* (a drain kind, watched only while a Machine of its cluster
//! is being deleted) always reports as [`Input::RelistKind`]: right after the first relist,
//! in the same input, when it was registered before it (a restart in the middle of a drain
//! shows the drain its kinds at once, never a cluster without them), and on its own after.
//!
//! Guarantees: objects the engine does not model (`Ok(None)` from `object_from_json`) never
//! reach it; an object that does not convert is delivered as unreadable (a DELETE still
//! removes it by key); relist contents are sorted by key, so they are deterministic.

use crate::Input;
use crate::convert::{ConvertError, object_from_json, object_key_of_json, unreadable_of_json};
use crate::model::{Kind, Object, ObjectKey, Scope};
use crate::store::Store;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// One event of one watch stream, as kube's `watcher` reports it.
#[derive(Clone, Debug)]
pub enum StreamEvent {
    Init,
    InitApply(Delivered),
    InitDone,
    Apply(Delivered),
    Delete(Delivered),
    /// The stream cannot list its kind: the API does not serve it or refuses us (404, 403).
    /// The stream counts as listed, so the rest of its cluster is not held back, and its kind
    /// is unknown there until a list succeeds.
    Unavailable(String),
}

/// What `object_from_json` makes of an object.
pub type Reading = Result<Option<Object>, ConvertError>;

/// An object a stream delivered: its JSON as the API sent it and, when the sender has already
/// read it, that reading. The simulator's fake API reads each write once, for its own checks as
/// well; a watch over HTTP delivers JSON only, read here. The JSON is shared, not copied, with
/// the sender that keeps it (the fake API's stored object).
#[derive(Clone, Debug)]
pub struct Delivered {
    pub value: Arc<Value>,
    reading: Option<Box<Reading>>,
}

impl Delivered {
    /// `value` with what `object_from_json(&value)` returned for it.
    pub fn read(value: Arc<Value>, reading: impl Into<Box<Reading>>) -> Self {
        Delivered {
            value,
            reading: Some(reading.into()),
        }
    }
}

impl From<Value> for Delivered {
    fn from(value: Value) -> Self {
        Arc::new(value).into()
    }
}

impl From<Arc<Value>> for Delivered {
    fn from(value: Arc<Value>) -> Self {
        Delivered {
            value,
            reading: None,
        }
    }
}

#[derive(Debug, Default)]
struct Stream {
    /// What the stream reported before its scope's first relist (empty after it).
    objects: BTreeMap<ObjectKey, Object>,
    /// Objects of a list in progress (between `Init` and `InitDone`).
    pending: Option<BTreeMap<ObjectKey, Object>>,
    listed: bool,
    /// Why the last list failed, until one succeeds.
    unavailable: Option<String>,
    /// Started on demand: not part of the scope's first relist.
    on_demand: bool,
}

#[derive(Debug, Default)]
struct ScopeMirror {
    streams: BTreeMap<String, Stream>,
    /// A `Relist` went out; events now flow as `Upsert`/`Delete`.
    relisted: bool,
}

/// Unreadable objects kept for the driver between two [`Mirror::take_unreadable`]: one list
/// of a cluster full of them is read in one go, and only its newest are kept.
pub const UNREADABLE_OBJECTS_RETAINED_MAX: usize = 1024;

/// The adapter's view of what every stream last reported.
#[derive(Debug, Default)]
pub struct Mirror {
    scopes: BTreeMap<Scope, ScopeMirror>,
    /// Objects that did not convert since the last [`Mirror::take_unreadable`], newest last
    /// (at most [`UNREADABLE_OBJECTS_RETAINED_MAX`]).
    unreadable: Unreadables,
}

#[derive(Debug, Default)]
struct Unreadables {
    retained: VecDeque<Unreadable>,
    /// Dropped, oldest first, because the consumer did not take them in time.
    dropped: u64,
}

impl Unreadables {
    fn push(&mut self, u: Unreadable) {
        if self.retained.len() >= UNREADABLE_OBJECTS_RETAINED_MAX {
            self.retained.pop_front();
            self.dropped += 1;
        }
        self.retained.push_back(u);
    }
}

/// An object a watch or list delivered that the controllers cannot read.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub scope: Scope,
    /// The stream's kind.
    pub kind: Kind,
    /// As delivered (shared with the delivery, not copied).
    pub object: Arc<Value>,
    pub error: ConvertError,
}

fn convert(
    scope: &Scope,
    stream: &str,
    delivered: Delivered,
    unreadable: &mut Unreadables,
) -> Option<(ObjectKey, Object)> {
    let reading = match delivered.reading {
        Some(reading) => *reading,
        None => object_from_json(&delivered.value),
    };
    let value = &delivered.value;
    match reading {
        Ok(Some(object)) => Some((object.key(scope), object)),
        Ok(None) => None,
        Err(e) => {
            let name = value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            tracing::warn!(object = name, "cannot read object: {e}");
            // Unknown, not absent: the engine keeps the object's last good reading and holds
            // back the decisions that depend on it.
            let object = unreadable_of_json(scope, value, &e);
            unreadable.push(Unreadable {
                scope: scope.clone(),
                kind: stream_kind(stream),
                object: delivered.value,
                error: e,
            });
            let object = object?;
            Some((object.key(scope), object))
        }
    }
}

impl ScopeMirror {
    /// The scope's first `Relist`, once every stream has listed. The objects move into it:
    /// from then on the engine's store is the only copy, and a stream that lists again
    /// relists its own kind ([`Input::RelistKind`]).
    ///
    /// On-demand streams that listed before it follow it, each as its kind's relist.
    fn first_relist(&mut self, scope: &Scope) -> Vec<Input> {
        if self.relisted || self.streams.values().any(|s| !s.listed) {
            return Vec::new();
        }
        self.relisted = true;
        let mut objects = BTreeMap::new();
        for s in self.streams.values_mut().filter(|s| !s.on_demand) {
            objects.append(&mut s.objects);
        }
        let mut inputs = vec![Input::Relist {
            scope: scope.clone(),
            objects: objects.into_values().collect(),
        }];
        for (stream, s) in &mut self.streams {
            if s.on_demand && s.listed && s.unavailable.is_none() {
                inputs.push(Input::RelistKind {
                    scope: scope.clone(),
                    kind: stream_kind(stream),
                    objects: std::mem::take(&mut s.objects).into_values().collect(),
                });
            }
        }
        inputs
    }
}

fn stream_kind(stream: &str) -> Kind {
    let (group, kind) = stream.split_once('/').unwrap_or(("", stream));
    Kind::from_group_kind(group, kind)
}

fn unlisted(scope: &Scope, stream: &str, problem: Option<String>) -> Input {
    Input::Unlisted {
        scope: scope.clone(),
        kind: stream_kind(stream),
        problem,
    }
}

impl Mirror {
    /// Declares a stream of `scope`; the scope's first `Relist` waits for it.
    pub fn register(&mut self, scope: &Scope, stream: &str) {
        self.scopes
            .entry(scope.clone())
            .or_default()
            .streams
            .entry(stream.to_string())
            .or_default();
    }

    /// Declares a stream of `scope` started on demand: the scope's first `Relist` does not
    /// wait for it, and its lists reach the engine as `RelistKind`.
    pub fn register_on_demand(&mut self, scope: &Scope, stream: &str) {
        let s = self.scopes.entry(scope.clone()).or_default();
        s.streams.insert(
            stream.to_string(),
            Stream {
                on_demand: true,
                ..Stream::default()
            },
        );
    }

    /// Forgets a stream that was stopped: events it still delivers are dropped.
    pub fn unregister(&mut self, scope: &Scope, stream: &str) {
        if let Some(s) = self.scopes.get_mut(scope) {
            s.streams.remove(stream);
        }
    }

    /// Forgets a scope (its cluster is gone or unreachable for good).
    pub fn remove_scope(&mut self, scope: &Scope) {
        self.scopes.remove(scope);
    }

    /// The objects that did not convert since the last call, oldest first.
    pub fn take_unreadable(&mut self) -> VecDeque<Unreadable> {
        std::mem::take(&mut self.unreadable.retained)
    }

    /// Objects not taken yet.
    pub fn unreadable_retained(&self) -> usize {
        self.unreadable.retained.len()
    }

    /// Objects dropped since the start because [`UNREADABLE_OBJECTS_RETAINED_MAX`] were
    /// waiting already.
    pub fn unreadable_dropped(&self) -> u64 {
        self.unreadable.dropped
    }

    pub fn is_relisted(&self, scope: &Scope) -> bool {
        self.scopes.get(scope).is_some_and(|s| s.relisted)
    }

    /// Applies one event; returns the inputs to feed (in order).
    /// Events of a stream that is not registered (stopped, or its cluster forgotten) are
    /// dropped: they would bring back what was forgotten.
    pub fn on_event(
        &mut self,
        scope: &Scope,
        stream: &str,
        event: StreamEvent,
        cache: Option<&Store>,
    ) -> Vec<Input> {
        let Some(mirror) = self.scopes.get_mut(scope) else {
            return Vec::new();
        };
        let Some(s) = mirror.streams.get_mut(stream) else {
            return Vec::new();
        };
        match event {
            StreamEvent::Init => {
                s.pending = Some(BTreeMap::new());
                Vec::new()
            }
            StreamEvent::InitApply(v) => {
                if let Some((key, object)) = convert(scope, stream, v, &mut self.unreadable) {
                    s.pending
                        .get_or_insert_with(BTreeMap::new)
                        .insert(key, object);
                }
                Vec::new()
            }
            StreamEvent::InitDone => {
                let listed = s.pending.take().unwrap_or_default();
                s.listed = true;
                let mut inputs = Vec::new();
                if s.unavailable.take().is_some() {
                    inputs.push(unlisted(scope, stream, None));
                }
                if mirror.relisted {
                    inputs.push(Input::RelistKind {
                        scope: scope.clone(),
                        kind: stream_kind(stream),
                        objects: listed.into_values().collect(),
                    });
                } else {
                    s.objects = listed;
                    inputs.extend(mirror.first_relist(scope));
                }
                inputs
            }
            StreamEvent::Unavailable(problem) => {
                s.pending = None;
                if s.unavailable.as_ref() == Some(&problem) {
                    return Vec::new();
                }
                s.unavailable = Some(problem.clone());
                let first = !s.listed;
                s.listed = true;
                let mut inputs = vec![unlisted(scope, stream, Some(problem))];
                if first {
                    inputs.extend(mirror.first_relist(scope));
                }
                inputs
            }
            StreamEvent::Apply(v) => {
                if mirror.relisted && cache.is_some_and(|c| c.holds(scope, &v.value)) {
                    return Vec::new();
                }
                let Some((key, object)) = convert(scope, stream, v, &mut self.unreadable) else {
                    return Vec::new();
                };
                if mirror.relisted {
                    return vec![Input::Upsert {
                        scope: scope.clone(),
                        object: Box::new(object),
                    }];
                }
                s.objects.insert(key, object);
                Vec::new()
            }
            StreamEvent::Delete(v) => {
                let key = match object_key_of_json(scope, &v.value) {
                    Ok(Some(key)) => key,
                    Ok(None) => return Vec::new(),
                    Err(e) => {
                        tracing::warn!("cannot read deleted object: {e}");
                        return Vec::new();
                    }
                };
                if mirror.relisted {
                    return vec![Input::Delete { key }];
                }
                s.objects.remove(&key);
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    impl Mirror {
        /// [`Mirror::on_event`] with no engine cache to hold events against: every readable
        /// event is read, as before the cache was consulted.
        fn event(&mut self, scope: &Scope, stream: &str, event: StreamEvent) -> Vec<Input> {
            self.on_event(scope, stream, event, None)
        }
    }

    fn node(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    }

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "a"},
               "spec": {"nodeName": "n1"}})
    }

    const NODES: &str = "/Node";
    const PODS: &str = "/Pod";

    fn relist_names(inputs: &[Input]) -> Vec<String> {
        match inputs {
            [Input::Relist { objects, .. }] => {
                objects.iter().map(|o| o.meta().name.clone()).collect()
            }
            other => panic!("expected one relist, got {other:?}"),
        }
    }

    #[test]
    fn the_first_relist_waits_for_every_stream_and_unites_them() {
        let scope = Scope::Management;
        let mut m = Mirror::default();
        m.register(&scope, NODES);
        m.register(&scope, PODS);
        assert!(m.event(&scope, NODES, StreamEvent::Init).is_empty());
        m.event(&scope, NODES, StreamEvent::InitApply(node("n1").into()));
        assert!(m.event(&scope, NODES, StreamEvent::InitDone).is_empty());
        // Not relisted yet: an event only updates the mirror.
        assert!(
            m.event(&scope, NODES, StreamEvent::Apply(node("n2").into()))
                .is_empty()
        );
        m.event(&scope, PODS, StreamEvent::Init);
        m.event(&scope, PODS, StreamEvent::InitApply(pod("p1").into()));
        let inputs = m.event(&scope, PODS, StreamEvent::InitDone);
        assert_eq!(relist_names(&inputs), ["n1", "n2", "p1"]);
        // Now events flow; a secret (not modelled) never reaches the engine.
        assert!(matches!(
            m.event(&scope, PODS, StreamEvent::Apply(pod("p2").into()))
                .as_slice(),
            [Input::Upsert { .. }]
        ));
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "a"}});
        assert!(
            m.event(&scope, PODS, StreamEvent::Apply(secret.into()))
                .is_empty()
        );
        assert!(matches!(
            m.event(&scope, NODES, StreamEvent::Delete(node("n2").into()))
                .as_slice(),
            [Input::Delete { .. }]
        ));
        // A relist of one stream (after a 410) relists its kind; the mirror kept no copies.
        assert!(
            m.scopes[&scope]
                .streams
                .values()
                .all(|s| s.objects.is_empty())
        );
        m.event(&scope, NODES, StreamEvent::Init);
        m.event(&scope, NODES, StreamEvent::InitApply(node("n3").into()));
        let inputs = m.event(&scope, NODES, StreamEvent::InitDone);
        match inputs.as_slice() {
            [Input::RelistKind { kind, objects, .. }] => {
                assert_eq!(*kind, Kind::Node);
                let names: Vec<&str> = objects.iter().map(|o| o.meta().name.as_str()).collect();
                assert_eq!(names, ["n3"]);
            }
            other => panic!("expected one kind relist, got {other:?}"),
        }
    }

    #[test]
    fn an_object_that_does_not_read_is_delivered_as_unknown_not_left_out() {
        let scope = Scope::Management;
        let mut m = Mirror::default();
        m.register(&scope, "nodes");
        let mut bad = node("n2");
        bad["status"] = json!({"conditions": [{"type": 17, "status": "True"}]});
        m.event(&scope, "nodes", StreamEvent::Init);
        m.event(&scope, "nodes", StreamEvent::InitApply(node("n1").into()));
        m.event(&scope, "nodes", StreamEvent::InitApply(bad.clone().into()));
        let inputs = m.event(&scope, "nodes", StreamEvent::InitDone);
        assert_eq!(relist_names(&inputs), ["n1", "n2"]);
        let [Input::Relist { objects, .. }] = inputs.as_slice() else {
            unreachable!()
        };
        match &objects[1] {
            Object::Unreadable(u) => {
                assert_eq!(u.kind, crate::model::Kind::Node);
                assert!(
                    u.problem.starts_with("status.conditions[0].type"),
                    "{}",
                    u.problem
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(m.take_unreadable().len(), 1);
        let inputs = m.event(&scope, "nodes", StreamEvent::Apply(bad.into()));
        assert!(
            matches!(inputs.as_slice(), [Input::Upsert { object, .. }] if matches!(**object, Object::Unreadable(_))),
            "{inputs:?}"
        );
    }

    /// A consumer that takes nothing keeps the newest unreadable objects only, and the rest
    /// are counted.
    #[test]
    fn unreadable_objects_not_taken_are_bounded_dropping_the_oldest() {
        let scope = Scope::Management;
        let mut m = Mirror::default();
        m.register(&scope, NODES);
        m.event(&scope, NODES, StreamEvent::Init);
        m.event(&scope, NODES, StreamEvent::InitDone);
        let extra = 5;
        for i in 0..UNREADABLE_OBJECTS_RETAINED_MAX + extra {
            let mut bad = node(&format!("n{i}"));
            bad["metadata"]["creationTimestamp"] = json!("yesterday");
            m.event(&scope, NODES, StreamEvent::Apply(bad.into()));
        }
        assert_eq!(m.unreadable_retained(), UNREADABLE_OBJECTS_RETAINED_MAX);
        assert_eq!(m.unreadable_dropped(), extra as u64);
        let taken = m.take_unreadable();
        assert_eq!(taken[0].object["metadata"]["name"], format!("n{extra}"));
        assert_eq!(taken[0].kind, Kind::Node);
        assert_eq!(m.unreadable_retained(), 0);
    }

    #[test]
    fn a_stream_whose_list_is_refused_does_not_hold_its_cluster_back_and_marks_its_kind() {
        let scope = Scope::Management;
        let mut m = Mirror::default();
        m.register(&scope, "cluster.x-k8s.io/Machine");
        m.register(&scope, "infrastructure.cluster.x-k8s.io/FooMachine");
        m.event(&scope, "cluster.x-k8s.io/Machine", StreamEvent::Init);
        assert!(
            m.event(&scope, "cluster.x-k8s.io/Machine", StreamEvent::InitDone)
                .is_empty()
        );
        let foo = "infrastructure.cluster.x-k8s.io/FooMachine";
        let refused = || StreamEvent::Unavailable("404".to_string());
        let inputs = m.event(&scope, foo, refused());
        let kind = Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "FooMachine");
        assert!(
            matches!(inputs.as_slice(), [
                Input::Unlisted { kind: k, problem: Some(p), .. },
                Input::Relist { .. },
            ] if *k == kind && p == "404"),
            "{inputs:?}"
        );
        // The same refusal again (kube's watcher retries) is no news.
        assert!(m.event(&scope, foo, refused()).is_empty());
        // A list that succeeds clears the mark, then relists the kind with its objects.
        m.event(&scope, foo, StreamEvent::Init);
        let inputs = m.event(&scope, foo, StreamEvent::InitDone);
        assert!(
            matches!(
                inputs.as_slice(),
                [Input::Unlisted { problem: None, .. }, Input::RelistKind { kind: k, .. },] if *k == kind
            ),
            "{inputs:?}"
        );
    }
}
