//! The "finalizer released" rule: a Machine whose deletion completed (its `Deleting` condition
//! says `DeletionCompleted` in the API) loses the Machine finalizer within
//! [`RELEASE_WITHIN`] of simulated time. Time the management API could not take writes or
//! its watch was blind (a partition, injected errors, a slow API, conflicts, timeouts, a
//! watch gap) does not count: the controller retries, or relists when the watch returns.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, json};
use crate::scenario::FaultKind;
use engine::model::MACHINE_FINALIZER;
use engine::time::{Duration, Timestamp};
use serde_json::Value;
use std::collections::BTreeMap;

pub const RELEASE_WITHIN: Duration = Duration::from_secs(30);

/// Faults that keep the controller's writes from the management API, or its changes from it.
pub(crate) const API_FAULTS: [FaultKind; 6] = [
    FaultKind::Partition,
    FaultKind::WatchGap,
    FaultKind::ApiErrors,
    FaultKind::SlowApi,
    FaultKind::Conflicts,
    FaultKind::WriteTimeout,
];

#[derive(Clone, Debug, Default)]
pub struct Release {
    /// Machines whose deletion completed and that still hold the finalizer, since when.
    completed: BTreeMap<ObjKey, Timestamp>,
}

fn deletion_completed(machine: &Value) -> bool {
    ["/status/conditions", "/status/v1beta2/conditions"]
        .iter()
        .filter_map(|p| machine.at_pointer(p).and_then(Value::as_array))
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Deleting")
                && c.get("reason").and_then(Value::as_str) == Some("DeletionCompleted")
        })
}

impl Release {
    /// Whether a Machine said `DeletionCompleted` and still holds the finalizer.
    pub fn waits(&self) -> bool {
        !self.completed.is_empty()
    }

    /// A Machine changed in the API (`None`: it is gone).
    pub fn machine_changed(&mut self, key: &ObjKey, machine: Option<&Value>, now: Timestamp) {
        let waiting = machine.is_some_and(|m| {
            deletion_completed(m) && json::finalizers(m).iter().any(|f| f == MACHINE_FINALIZER)
        });
        if waiting {
            self.completed.entry(key.clone()).or_insert(now);
        } else {
            self.completed.remove(key);
        }
    }
}

impl Release {
    /// The Machines past [`RELEASE_WITHIN`] (reported once each); while `faulted`, the clock of
    /// every waiting Machine starts again.
    pub fn overdue(&mut self, now: Timestamp, faulted: bool) -> Vec<(ObjKey, Duration)> {
        let mut late = Vec::new();
        for (key, since) in self.completed.iter_mut() {
            if faulted {
                *since = now;
            } else if now.since(*since) > RELEASE_WITHIN {
                late.push((key.clone(), now.since(*since)));
            }
        }
        for (key, _) in &late {
            self.completed.remove(key);
        }
        late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(reason: &str, finalizers: &[&str]) -> Value {
        json!({"metadata": {"name": "m1", "namespace": "default", "finalizers": finalizers},
               "status": {"conditions": [{"type": "Deleting", "status": "True", "reason": reason}]}})
    }

    #[test]
    fn a_completed_deletion_must_release_its_finalizer_within_30s() {
        let key = ObjKey::new("cluster.x-k8s.io", "Machine", "default", "m1");
        let t0 = Timestamp(1_000_000);
        let mut r = Release::default();
        r.machine_changed(
            &key,
            Some(&machine("DrainingNode", &[MACHINE_FINALIZER])),
            t0,
        );
        assert!(
            r.overdue(t0 + Duration::from_mins(5), false).is_empty(),
            "not completed"
        );
        r.machine_changed(
            &key,
            Some(&machine("DeletionCompleted", &[MACHINE_FINALIZER])),
            t0,
        );
        assert!(r.overdue(t0 + RELEASE_WITHIN, false).is_empty());
        // A fault keeping writes from the API restarts the clock.
        assert!(r.overdue(t0 + Duration::from_secs(40), true).is_empty());
        assert!(r.overdue(t0 + Duration::from_secs(60), false).is_empty());
        let late = r.overdue(t0 + Duration::from_secs(71), false);
        assert_eq!(late, vec![(key.clone(), Duration::from_secs(31))]);
        assert!(
            r.overdue(t0 + Duration::from_mins(9), false).is_empty(),
            "once"
        );
        r.machine_changed(
            &key,
            Some(&machine("DeletionCompleted", &[MACHINE_FINALIZER])),
            t0,
        );
        r.machine_changed(&key, None, t0 + Duration::from_secs(2));
        assert!(
            r.overdue(t0 + Duration::from_mins(9), false).is_empty(),
            "released"
        );
    }
}
