//! The intake: everything that decides what becomes an engine input, and when, between the API
//! servers and the engine. Sans-IO: `lifecycle run` drives it with tokio and HTTP (watch tasks,
//! request tasks, connectors), tests and the simulator drive it directly.
//!
//! *Expected flow:* [`Intake::push`] every [`Arrival`] (a watch event, a request's answer, a
//! workload cluster connected) as it comes; [`Intake::next_input`] turns what has arrived into
//! one input (a backlog is one batch, so under load the engine reconciles each key once per
//! batch); [`Intake::dispatch`] each command the engine issues (a command for a cluster with no
//! connection is answered at once, as unreachable); [`Intake::poll_output`] says which watches
//! to start and which clusters to connect to or drop.
//!
//! *Watches:* the management kinds from the start; the provider kinds management objects
//! refer to when first seen; a workload cluster's Nodes once a Cluster names it and its
//! connection is up, and its drain kinds ([`Kind::DRAIN_ONLY`]) while one of its Machines is
//! being deleted: when the last such Machine is gone they are unwatched and the engine forgets
//! them ([`Input::Unwatched`]), so a fleet at rest holds no pods. The [`mirror`] turns kube
//! `watcher` events into inputs: the first list of a cluster waits for every stream registered
//! for it, and any later list of one stream (its watch ended with 410 Gone and kube's `watcher`
//! listed again) relists that stream's kind.

pub mod mirror;
pub mod refs;
pub mod streams;

use crate::command::Command;
use crate::connection::Unreachable;
use crate::input::{ApiOutcome, Input};
use crate::model::{ClusterName, Kind, Scope};
use crate::store::Store;
use mirror::{Mirror, StreamEvent};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use streams::{StreamKey, drain_streams, management_streams, stream_id, workload_streams};

/// Something that reached the controller.
#[derive(Clone, Debug)]
pub enum Arrival {
    Watch {
        scope: Scope,
        stream: String,
        event: StreamEvent,
    },
    Result {
        command: u64,
        outcome: ApiOutcome,
    },
    /// A workload cluster's connection is up.
    Connected {
        scope: Scope,
    },
    /// A workload cluster's connector could not connect (it retries on its own): pushed on
    /// every failure or on a change of reason only, as the driver likes; the engine hears of
    /// each change of reason once.
    ConnectFailed {
        scope: Scope,
        reason: Unreachable,
    },
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Start watching a resource type.
    Watch(StreamKey),
    /// Stop watching a resource type (a drain kind no deletion needs any more).
    Unwatch(StreamKey),
    /// Watch a provider kind of the management cluster (`version: None`: ask discovery).
    WatchProvider {
        group: String,
        version: Option<String>,
        kind: String,
    },
    /// Connect to a workload cluster (its kubeconfig Secret names the server).
    Connect(Scope),
    /// Stop connecting to and watching a workload cluster: its Cluster is gone.
    Disconnect(Scope),
}

#[derive(Debug)]
pub struct Intake {
    mirror: Mirror,
    backlog: VecDeque<Arrival>,
    connected: BTreeSet<Scope>,
    /// Workload clusters a Cluster names (connecting or connected).
    clusters: BTreeSet<Scope>,
    /// `(group, kind)` of provider kinds watched.
    providers: BTreeSet<(String, String)>,
    /// Machines being deleted, by workload cluster.
    deleting: Deleting,
    /// Workload clusters whose drain kinds are watched.
    draining: BTreeSet<Scope>,
    /// Workload clusters not connected, with the last reason the engine was told: a connector
    /// retrying for the same reason tells it nothing new. One entry per such cluster.
    unreachable: BTreeMap<Scope, Unreachable>,
    outputs: VecDeque<Output>,
}

/// Machines being deleted (`namespace/name`), by the workload cluster they belong to.
#[derive(Debug, Default)]
struct Deleting {
    machines: BTreeMap<Scope, BTreeSet<String>>,
    /// While the Machine stream lists: what the list shows so far (it replaces `machines`).
    listing: Option<BTreeMap<Scope, BTreeSet<String>>>,
}

impl Deleting {
    /// Applies one Machine event; the clusters whose set may have changed.
    fn on_event(&mut self, event: &StreamEvent) -> Vec<Scope> {
        match event {
            StreamEvent::Init => {
                self.listing = Some(BTreeMap::new());
                Vec::new()
            }
            StreamEvent::InitApply(machine) => {
                if let (Some(listing), Some((scope, name, true))) =
                    (self.listing.as_mut(), machine_deletion(&machine.value))
                {
                    listing.entry(scope).or_default().insert(name);
                }
                Vec::new()
            }
            StreamEvent::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let before = std::mem::replace(&mut self.machines, listed);
                before
                    .into_keys()
                    .chain(self.machines.keys().cloned())
                    .collect()
            }
            StreamEvent::Apply(machine) | StreamEvent::Delete(machine) => {
                let Some((scope, name, deleting)) = machine_deletion(&machine.value) else {
                    return Vec::new();
                };
                let gone = matches!(event, StreamEvent::Delete(_));
                let set = self.machines.entry(scope.clone()).or_default();
                if deleting && !gone {
                    set.insert(name);
                } else {
                    set.remove(&name);
                }
                if set.is_empty() {
                    self.machines.remove(&scope);
                }
                vec![scope]
            }
            StreamEvent::Unavailable(_) => Vec::new(),
        }
    }

    fn any(&self, scope: &Scope) -> bool {
        self.machines.contains_key(scope)
    }
}

/// A Machine's workload cluster, `namespace/name`, and whether it is being deleted.
fn machine_deletion(machine: &Value) -> Option<(Scope, String, bool)> {
    let text = |pointer: &str| crate::convert::pointer(machine, pointer).and_then(Value::as_str);
    let namespace = text("/metadata/namespace").unwrap_or_default();
    let cluster = text("/spec/clusterName")?;
    let name = text("/metadata/name")?;
    let deleting = crate::convert::pointer(machine, "/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    Some((
        Scope::Workload(ClusterName::new(namespace, cluster)),
        format!("{namespace}/{name}"),
        deleting,
    ))
}

impl Default for Intake {
    fn default() -> Self {
        Self::new()
    }
}

impl Intake {
    /// An intake whose first outputs are the management watches.
    pub fn new() -> Self {
        let mut intake = Intake {
            mirror: Mirror::default(),
            backlog: VecDeque::new(),
            connected: BTreeSet::from([Scope::Management]),
            clusters: BTreeSet::new(),
            providers: BTreeSet::new(),
            deleting: Deleting::default(),
            draining: BTreeSet::new(),
            unreachable: BTreeMap::new(),
            outputs: VecDeque::new(),
        };
        for key in management_streams() {
            intake.watch(key);
        }
        intake
    }

    /// What the engine already knows of a cluster's connection (a restarted process, its
    /// engine rebuilt from the journal): a connect that now succeeds clears it, the same
    /// failure again is not news.
    pub fn note_unreachable(&mut self, scope: &Scope, reason: &Unreachable) {
        self.unreachable.insert(scope.clone(), reason.clone());
    }

    fn watch(&mut self, key: StreamKey) {
        self.mirror.register(&key.scope, &key.id());
        self.outputs.push_back(Output::Watch(key));
    }

    pub fn push(&mut self, arrival: Arrival) {
        self.backlog.push_back(arrival);
    }

    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Arrivals not yet turned into inputs.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// What has arrived, up to `max` inputs, as one input (`None` when nothing arrived that
    /// the engine must see).
    pub fn next_input(&mut self, max: usize) -> Option<Input> {
        self.next_input_for(max, None)
    }

    /// [`Intake::next_input`] for an engine whose store is `cache`: what it already holds at
    /// the version a watch event reports is left out ([`Store::holds`]).
    pub fn next_input_for(&mut self, max: usize, cache: Option<&Store>) -> Option<Input> {
        let mut inputs = Vec::new();
        while inputs.len() < max.max(1) {
            let Some(arrival) = self.backlog.pop_front() else {
                break;
            };
            self.read(arrival, cache, &mut inputs);
        }
        (!inputs.is_empty()).then(|| Input::batch(inputs))
    }

    fn read(&mut self, arrival: Arrival, cache: Option<&Store>, inputs: &mut Vec<Input>) {
        match arrival {
            Arrival::Result { command, outcome } => {
                inputs.push(Input::ApiResult { command, outcome })
            }
            Arrival::Connected { scope } => {
                if self.clusters.contains(&scope) && self.connected.insert(scope.clone()) {
                    if self.unreachable.remove(&scope).is_some() {
                        inputs.push(Input::ClusterUnreachable {
                            scope: scope.clone(),
                            reason: None,
                        });
                    }
                    for key in workload_streams(&scope) {
                        self.outputs.push_back(Output::Watch(key));
                    }
                    self.watch_drain_kinds(&scope, inputs);
                }
            }
            Arrival::ConnectFailed { scope, reason } => {
                // A report from a connector of a cluster no longer named, or already connected
                // (it raced its own success), is stale.
                let reason = reason.bounded();
                let wanted = self.clusters.contains(&scope) && !self.connected.contains(&scope);
                if wanted && self.unreachable.get(&scope) != Some(&reason) {
                    tracing::warn!(cluster = %crate::store::scope_name(&scope), reason = reason.code(), "cannot connect to the workload cluster");
                    self.unreachable.insert(scope.clone(), reason.clone());
                    inputs.push(Input::ClusterUnreachable {
                        scope,
                        reason: Some(reason),
                    });
                }
            }
            Arrival::Watch {
                scope,
                stream,
                event,
            } => {
                // Compared by parts: every management event passes here.
                let machines = scope == Scope::Management
                    && stream.split_once('/') == Some((crate::convert::CAPI_GROUP, "Machine"));
                let changed = if machines {
                    self.deleting.on_event(&event)
                } else {
                    Vec::new()
                };
                if scope == Scope::Management {
                    self.follow_references(&event);
                }
                inputs.extend(self.mirror.on_event(&scope, &stream, event, cache));
                for scope in changed {
                    self.watch_drain_kinds(&scope, inputs);
                }
            }
        }
    }

    /// Starts the drain kinds' watches of a connected cluster with a Machine being deleted;
    /// stops them once it has none (the engine forgets those kinds there).
    fn watch_drain_kinds(&mut self, scope: &Scope, inputs: &mut Vec<Input>) {
        let wanted = self.connected.contains(scope) && self.deleting.any(scope);
        if wanted == self.draining.contains(scope) {
            return;
        }
        for key in drain_streams(scope) {
            let id = key.id();
            if wanted {
                self.mirror.register_on_demand(scope, &id);
                self.outputs.push_back(Output::Watch(key));
            } else {
                self.mirror.unregister(scope, &id);
                inputs.push(Input::Unwatched {
                    scope: scope.clone(),
                    kind: Kind::from_group_kind(&key.group, &key.kind),
                });
                self.outputs.push_back(Output::Unwatch(key));
            }
        }
        let cluster = crate::store::scope_name(scope);
        if wanted {
            tracing::info!(%cluster, "a Machine is being deleted: watching its cluster's drain kinds");
            self.draining.insert(scope.clone());
        } else {
            tracing::info!(%cluster, "no Machine is being deleted any more: its cluster's drain kinds are unwatched and forgotten");
            self.draining.remove(scope);
        }
    }

    /// A command about to be sent: `Some(answer)` when its cluster has no connection yet.
    pub fn dispatch(&mut self, command: &Command) -> Option<Input> {
        let scope = &command.action.target().key.scope;
        if self.connected.contains(scope) {
            return None;
        }
        Some(Input::ApiResult {
            command: command.id,
            outcome: ApiOutcome::Unreachable {
                message: format!("no connection to the API of {scope:?} yet"),
            },
        })
    }

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Whether [`Intake::poll_output`] has something.
    pub fn has_outputs(&self) -> bool {
        !self.outputs.is_empty()
    }

    /// Objects delivered that the controllers cannot read, since the last call, oldest first
    /// (the newest [`mirror::UNREADABLE_OBJECTS_RETAINED_MAX`]).
    pub fn take_unreadable(&mut self) -> VecDeque<mirror::Unreadable> {
        self.mirror.take_unreadable()
    }

    /// Unreadable objects not taken yet.
    pub fn unreadable_retained(&self) -> usize {
        self.mirror.unreadable_retained()
    }

    /// Unreadable objects dropped untaken since the start.
    pub fn unreadable_dropped(&self) -> u64 {
        self.mirror.unreadable_dropped()
    }

    /// Provider watches and workload connections for what a management object names.
    fn follow_references(&mut self, event: &StreamEvent) {
        let (object, deleted) = match event {
            StreamEvent::InitApply(o) | StreamEvent::Apply(o) => (&o.value, false),
            StreamEvent::Delete(o) => (&o.value, true),
            StreamEvent::Init | StreamEvent::InitDone | StreamEvent::Unavailable(_) => return,
        };
        if object.get("kind").and_then(Value::as_str) == Some("Cluster") {
            let meta = |f: &str| {
                object
                    .pointer(&format!("/metadata/{f}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            let scope = Scope::Workload(ClusterName::new(meta("namespace"), meta("name")));
            if deleted {
                if self.clusters.remove(&scope) {
                    self.connected.remove(&scope);
                    self.draining.remove(&scope);
                    // The engine forgets it with its Cluster.
                    self.unreachable.remove(&scope);
                    self.mirror.remove_scope(&scope);
                    self.outputs.push_back(Output::Disconnect(scope));
                }
            } else if self.clusters.insert(scope.clone()) {
                // The cluster's first list waits for all its streams.
                for key in workload_streams(&scope) {
                    self.mirror.register(&scope, &key.id());
                }
                self.outputs.push_back(Output::Connect(scope));
            }
            return;
        }
        for (group, version, kind) in refs::provider_refs(object) {
            if self.providers.insert((group.clone(), kind.clone())) {
                self.mirror
                    .register(&Scope::Management, &stream_id(&group, &kind));
                self.outputs.push_back(Output::WatchProvider {
                    group,
                    version,
                    kind,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
