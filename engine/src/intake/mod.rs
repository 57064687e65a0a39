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
//! refer to when first seen; a workload cluster's kinds once a Cluster names it and its
//! connection is up. The [`mirror`] turns kube `watcher` events into inputs: the first list of
//! a cluster waits for every stream registered for it, and any later list of one stream (its
//! watch ended with 410 Gone and kube's `watcher` listed again) relists that stream's kind.

pub mod mirror;
pub mod refs;
pub mod streams;

use crate::command::Command;
use crate::input::{ApiOutcome, Input};
use crate::model::{ClusterName, Scope};
use mirror::{Mirror, StreamEvent};
use serde_json::Value;
use std::collections::{BTreeSet, VecDeque};
use streams::{StreamKey, management_streams, stream_id, workload_streams};

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
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Start watching a resource type.
    Watch(StreamKey),
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
    outputs: VecDeque<Output>,
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
            outputs: VecDeque::new(),
        };
        for key in management_streams() {
            intake.watch(key);
        }
        intake
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
        let mut inputs = Vec::new();
        while inputs.len() < max.max(1) {
            let Some(arrival) = self.backlog.pop_front() else {
                break;
            };
            self.read(arrival, &mut inputs);
        }
        (!inputs.is_empty()).then(|| Input::batch(inputs))
    }

    fn read(&mut self, arrival: Arrival, inputs: &mut Vec<Input>) {
        match arrival {
            Arrival::Result { command, outcome } => {
                inputs.push(Input::ApiResult { command, outcome })
            }
            Arrival::Connected { scope } => {
                if self.clusters.contains(&scope) && self.connected.insert(scope.clone()) {
                    for key in workload_streams(&scope) {
                        self.outputs.push_back(Output::Watch(key));
                    }
                }
            }
            Arrival::Watch {
                scope,
                stream,
                event,
            } => {
                if scope == Scope::Management {
                    self.follow_references(&event);
                }
                inputs.extend(self.mirror.on_event(&scope, &stream, event));
            }
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

    /// Objects delivered that the controllers cannot read, since the last call.
    pub fn take_unreadable(&mut self) -> Vec<mirror::Unreadable> {
        self.mirror.take_unreadable()
    }

    /// Provider watches and workload connections for what a management object names.
    fn follow_references(&mut self, event: &StreamEvent) {
        let (object, deleted) = match event {
            StreamEvent::InitApply(o) | StreamEvent::Apply(o) => (o, false),
            StreamEvent::Delete(o) => (o, true),
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
