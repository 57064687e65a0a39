//! The controller process as the world sees it ([`Process`]).

use crate::api::ObjKey;
use engine::model::Scope;
use engine::time::Timestamp;
use std::collections::BTreeSet;

/// The controller process as the world sees it: how its inputs are journaled, what it
/// watches and connects to, how it takes a backlog, and whether it runs in this process.
pub struct Process {
    pub feeder: crate::feed::Feeder,
    /// Streams `(cluster, group/Kind)` the controller watches.
    pub(crate) watched: BTreeSet<(Scope, String)>,
    /// Streams whose first list waits for a cluster's cache to sync (a fault).
    pub(crate) deferred_watches: BTreeSet<(Scope, String)>,
    /// Workload clusters the loop asked to connect to whose connector cannot (a `kubeconfig`
    /// fault): connected when the fault ends.
    pub(crate) connecting: BTreeSet<Scope>,
    /// Objects the controllers could not read (malformed), reported once each.
    pub(crate) malformed: BTreeSet<(Scope, ObjKey)>,
    /// Poll the loop only when the instant's work runs dry, so what arrived meanwhile is one
    /// batch, as `lifecycle run` takes a backlog under load.
    pub batching: bool,
    /// Ticks in a row after which the engine's deadline was still due (a deadline kept in the
    /// past), and the deadline they were for.
    pub(crate) ticks_stuck: (Option<Timestamp>, u32),
    /// Set when the controllers run outside the simulator (a `lifecycle run` process over
    /// HTTP): the world is played, the in-process engine is not fed.
    pub(crate) external: Option<External>,
    /// A planted bug: the controller's requests it picks are answered as written and lost.
    pub lost_writes: Option<LostWrites>,
}

/// Picks the requests whose write the API loses after answering it (tests that show the
/// status convergence rule catches a lost write).
pub type LostWrites = fn(&engine::convert::ApiRequest) -> bool;

impl Process {
    /// The streams `scope` is watched by.
    pub(crate) fn streams_of(&self, scope: &Scope) -> Vec<String> {
        self.watched
            .range((scope.clone(), String::new())..)
            .take_while(|(s, _)| s == scope)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

/// What the world asks of a controller that runs outside the simulator.
#[derive(Clone, Debug, Default)]
pub(crate) struct External {
    /// Process restarts the scenario's faults asked for so far.
    pub restarts: u32,
}
