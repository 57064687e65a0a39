//! The tasks the adapter's driver starts (watches, connectors, provider discovery, commands),
//! aborted when it ends.

use engine::model::Scope;
use std::collections::BTreeMap;
use tokio::task::JoinHandle;

/// The tasks the driver started, aborted when it ends.
#[derive(Default)]
pub(super) struct Tasks {
    /// Watches of the loop's choosing, by cluster and stream.
    pub(super) streams: BTreeMap<(Scope, String), JoinHandle<()>>,
    pub(super) connectors: BTreeMap<Scope, JoinHandle<()>>,
    /// Provider discovery and watches.
    pub(super) providers: Vec<JoinHandle<()>>,
    /// One per command until it has been answered.
    pub(super) commands: Vec<JoinHandle<()>>,
}

impl Tasks {
    /// Aborts the tasks that bring inputs in: watches, connectors and provider discovery.
    pub(super) fn abort_inputs(&mut self) {
        let streams = std::mem::take(&mut self.streams).into_values();
        let connectors = std::mem::take(&mut self.connectors).into_values();
        for t in self.providers.drain(..).chain(streams).chain(connectors) {
            t.abort();
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.abort_inputs();
        self.commands.iter().for_each(JoinHandle::abort);
    }
}
