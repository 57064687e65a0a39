//! What the MachinePool controller keeps consistent, checked in debug builds: a pool's memory
//! when it is read (before a reconcile) and once it is written (after it, after an answer),
//! and the counts of the Nodes it matched.

use super::noderefs::NodeRefsResult;
use super::{PoolMemory, Pools};
use crate::model::ObjectKey;
use crate::time::Timestamp;

impl PoolMemory {
    /// The first broken invariant, if any: a Node deletion was first tried no later than now;
    /// a retry comes after the first try.
    pub(super) fn violation(&self, now: Timestamp) -> Option<String> {
        self.node_deletions.iter().find_map(|(node, d)| {
            let retry_in_order = d.retry_not_before().is_none_or(|at| at > d.first_try());
            (d.first_try() > now || !retry_in_order)
                .then(|| format!("Node {node} deletion: {d:?}, now {now:?}"))
        })
    }
}

impl Pools {
    pub(super) fn check(&self, key: &ObjectKey, now: Timestamp) {
        let violation = || self.memory.get(key).and_then(|m| m.violation(now));
        debug_assert!(
            violation().is_none(),
            "MachinePool {key}: {}",
            violation().unwrap_or_default()
        );
    }
}

impl NodeRefsResult<'_> {
    /// Counts that cannot be: more available Nodes than ready ones, more ready than matched,
    /// references and Nodes apart.
    pub(super) fn violation(&self) -> Option<String> {
        let matched = self.references.len();
        let fits = usize::try_from(self.ready).is_ok_and(|ready| ready <= matched);
        (self.available < 0 || self.available > self.ready || !fits || self.nodes.len() != matched)
            .then(|| {
                format!(
                    "{} references, {} Nodes, {} ready, {} available",
                    matched,
                    self.nodes.len(),
                    self.ready,
                    self.available
                )
            })
    }
}
