//! Which command may be sent now: at most `slots` commands of a cluster in flight (sent and
//! not answered), the most urgent waiting command first when a slot frees up (in the order
//! they were issued while slots are free), and a drain's evictions one at a time in the order
//! the drain issued them, as upstream's drain sends them (a PDB then refuses the pod the drain
//! named last, not whichever request the network delivered last).

use super::Priority;
use crate::command::{Action, Command};
use crate::model::{ObjectKey, Scope};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Default)]
pub(crate) struct Admission {
    slots_max: usize,
    clusters: BTreeMap<Scope, Cluster>,
    /// Commands sent and not answered: their cluster, and the drain they evict for.
    in_flight: BTreeMap<u64, (Scope, Option<ObjectKey>)>,
    /// Each drain's evictions not answered yet, in the order issued: only the first may be
    /// in flight.
    evictions: BTreeMap<ObjectKey, VecDeque<u64>>,
    /// Issue order of the waiting commands.
    issued: u64,
    /// Shutting down: nothing more is sent.
    closed: bool,
}

#[derive(Debug, Default)]
struct Cluster {
    in_flight: usize,
    waiting: BTreeMap<(Priority, u64), Command>,
}

impl Admission {
    pub(crate) fn new(slots_max: usize) -> Self {
        Admission {
            slots_max: slots_max.max(1),
            ..Admission::default()
        }
    }

    /// A command the engine issued. Returns the commands that may be sent now, in order: it
    /// and nothing else when a slot of its cluster is free and it is not an eviction waiting
    /// for the one before it (so commands go in the order issued while slots are free).
    pub(crate) fn admit(&mut self, command: Command) -> Vec<Command> {
        if self.closed {
            return Vec::new();
        }
        let scope = command.action.target().key.scope.clone();
        if let Some(owner) = evicting_for(&command) {
            self.evictions
                .entry(owner)
                .or_default()
                .push_back(command.id);
        }
        self.issued += 1;
        self.clusters
            .entry(scope.clone())
            .or_default()
            .waiting
            .insert((Priority::of(&command), self.issued), command);
        self.grant(&scope)
    }

    /// A command's answer arrived: its slot is free, and the next eviction of its drain may go.
    /// Returns the commands that may be sent now, in order.
    pub(crate) fn answered(&mut self, command: u64) -> Vec<Command> {
        let Some((scope, drain)) = self.in_flight.remove(&command) else {
            return Vec::new();
        };
        if let Some(c) = self.clusters.get_mut(&scope) {
            c.in_flight = c.in_flight.saturating_sub(1);
        }
        // A drain's evictions are all of its Machine's cluster: its next one is granted here.
        if let Some(owner) = drain
            && let Some(queue) = self.evictions.get_mut(&owner)
        {
            queue.retain(|id| *id != command);
            if queue.is_empty() {
                self.evictions.remove(&owner);
            }
        }
        self.grant(&scope)
    }

    /// Grants `scope`'s waiting commands while its slots are free: the most urgent first,
    /// evictions only in their drain's turn.
    fn grant(&mut self, scope: &Scope) -> Vec<Command> {
        let mut sent = Vec::new();
        let Some(cluster) = self.clusters.get_mut(scope).filter(|_| !self.closed) else {
            return sent;
        };
        let mut passed_over = Vec::new();
        while cluster.in_flight < self.slots_max {
            let Some((key, command)) = cluster.waiting.pop_first() else {
                break;
            };
            let drain = evicting_for(&command);
            let turn = drain
                .as_ref()
                .is_none_or(|o| self.evictions.get(o).and_then(|q| q.front()) == Some(&command.id));
            if !turn {
                passed_over.push((key, command));
                continue;
            }
            cluster.in_flight += 1;
            self.in_flight.insert(command.id, (scope.clone(), drain));
            sent.push(command);
        }
        cluster.waiting.extend(passed_over);
        sent
    }

    /// A workload cluster is gone: its waiting commands will never be sent (they are answered
    /// as unreachable by the caller), and its commands in flight no longer hold anything.
    pub(crate) fn drop_cluster(&mut self, scope: &Scope) -> Vec<Command> {
        let Some(cluster) = self.clusters.remove(scope) else {
            return Vec::new();
        };
        self.in_flight.retain(|_, (s, _)| s != scope);
        let dropped: Vec<Command> = cluster.waiting.into_values().collect();
        for command in &dropped {
            if let Some(owner) = evicting_for(command)
                && let Some(queue) = self.evictions.get_mut(&owner)
            {
                queue.retain(|id| *id != command.id);
                if queue.is_empty() {
                    self.evictions.remove(&owner);
                }
            }
        }
        dropped
    }

    /// Shutting down: nothing more is sent; the waiting commands are dropped (whoever acts next
    /// relists and sees what was done).
    pub(crate) fn close(&mut self) -> usize {
        self.closed = true;
        self.clusters
            .values_mut()
            .map(|c| std::mem::take(&mut c.waiting).len())
            .sum()
    }

    /// Commands sent and not answered.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Commands waiting to be sent.
    pub(crate) fn waiting(&self) -> usize {
        self.clusters.values().map(|c| c.waiting.len()).sum()
    }
}

/// The Machine whose drain an eviction belongs to.
fn evicting_for(command: &Command) -> Option<ObjectKey> {
    matches!(command.action, Action::Evict { .. }).then(|| command.owner.clone())
}
