//! What the deletion controller keeps consistent, checked in debug builds when a Machine's
//! memory is read (before a pass) and again once it is written (after the pass, after an
//! answer).

use super::{MachineDeletion, Memo};
use crate::model::ObjectKey;
use crate::time::Timestamp;

impl Memo {
    /// The first broken invariant, if any: nothing was asked of the API after `now`; node
    /// deletion attempts are in order (first, then last, then now).
    pub(super) fn violation(&self, now: Timestamp) -> Option<String> {
        for (pod, attempt) in &self.evictions {
            if attempt.at() > now {
                return Some(format!(
                    "eviction of {pod} issued at {:?}, after now",
                    attempt.at()
                ));
            }
        }
        let attempts = [
            ("cordon", &self.cordon),
            ("infrastructure deletion", &self.infrastructure_delete),
            ("bootstrap deletion", &self.bootstrap_delete),
        ];
        for (what, attempt) in attempts {
            if let Some(a) = attempt.as_ref().filter(|a| a.at() > now) {
                return Some(format!("{what} asked at {:?}, after now", a.at()));
            }
        }
        if let Some(d) = &self.node_deletion
            && !(d.first_at <= d.last_at && d.last_at <= now)
        {
            return Some(format!(
                "Node deletion first tried at {:?}, last at {:?}, now {now:?}",
                d.first_at, d.last_at
            ));
        }
        None
    }
}

impl MachineDeletion {
    /// Panics (in debug builds) when `key`'s memory or its routing entries are inconsistent.
    pub(super) fn check(&self, key: &ObjectKey, now: Timestamp) {
        debug_assert!(
            self.violation(key, now).is_none(),
            "deleting Machine {key}: {}",
            self.violation(key, now).unwrap_or_default()
        );
    }

    /// A tracked Machine is listed under its cluster and, once its Node is known, under it;
    /// its memory holds ([`Memo::violation`]).
    fn violation(&self, key: &ObjectKey, now: Timestamp) -> Option<String> {
        let tracked = self.machines.get(key)?;
        let listed = self
            .by_cluster
            .get(&tracked.cluster)
            .is_some_and(|keys| keys.contains(key));
        let under_node = tracked.node.as_ref().is_none_or(|node| {
            self.by_node
                .get(&tracked.cluster)
                .and_then(|nodes| nodes.get(node))
                .is_some_and(|keys| keys.contains(key))
        });
        if !listed || !under_node {
            return Some(format!(
                "not routed: under its cluster {listed}, under Node {:?} {under_node}",
                tracked.node
            ));
        }
        tracked.memo.violation(now)
    }
}
