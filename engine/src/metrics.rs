//! What the engine knows that an operator alerts on, read out for `/metrics`: reconciles per
//! controller, and from the cache the deleting Machines by phase and each MHC's counts. Not
//! state: counters are not encoded and compare equal, so replay equality ignores them.

use crate::model::{Kind, Object, Scope};
use crate::store::Store;
use crate::time::Timestamp;
use std::collections::BTreeMap;

/// The controllers as `controller_runtime_*` series name them (upstream's names).
pub const CONTROLLER_NAMES: [&str; 3] = ["machine", "machinehealthcheck", "machinepool"];

/// Reconciles and failed commands per controller slot ([`CONTROLLER_NAMES`] order).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub reconciles: [u64; 3],
    pub errors: [u64; 3],
}

impl PartialEq for Counters {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Counters {}

/// Deleting Machines in one phase (the `Deleting` condition's reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseGauge {
    pub machines: u64,
    /// Seconds since the oldest of them started deleting.
    pub oldest_seconds: i64,
}

/// One MHC's status as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MhcGauge {
    pub name: String,
    pub expected: i64,
    pub healthy: i64,
    pub remediations_allowed: i64,
}

/// The gauges at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    pub deleting: BTreeMap<String, PhaseGauge>,
    pub mhcs: Vec<MhcGauge>,
}

/// Reads the gauges from the cache at `now`. A deleting Machine with no `Deleting` condition
/// yet counts as phase `Pending`.
pub fn gauges(store: &Store, now: Timestamp) -> Gauges {
    let mut out = Gauges::default();
    for (_, object) in store.iter_kind(&Scope::Management, &Kind::Machine) {
        let Object::Machine(m) = object else { continue };
        let Some(since) = m.meta.deletion_timestamp else {
            continue;
        };
        let phase = m
            .conditions
            .current("Deleting")
            .map_or("Pending", |c| c.reason.as_str());
        let g = out.deleting.entry(phase.to_string()).or_default();
        g.machines += 1;
        g.oldest_seconds = g.oldest_seconds.max(now.since(since).as_millis() / 1000);
    }
    for (key, object) in store.iter_kind(&Scope::Management, &Kind::MachineHealthCheck) {
        let Object::MachineHealthCheck(h) = object else {
            continue;
        };
        let n = |v: Option<i32>| i64::from(v.unwrap_or(0));
        out.mhcs.push(MhcGauge {
            name: format!("{}/{}", key.namespace, key.name),
            expected: n(h.status.expected_machines),
            healthy: n(h.status.current_healthy),
            remediations_allowed: n(h.status.remediations_allowed),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Condition, ConditionStatus};
    use crate::testing::{cluster, machine, machine_health_check};
    use crate::time::Duration;

    #[test]
    fn deleting_machines_by_phase_with_the_oldest_age_and_each_mhcs_counts() {
        let t0 = Timestamp(1_704_067_200_000);
        let deleting = |name: &str, since: i64, phase: Option<&str>| {
            let mut m = machine("c1", name, None);
            m.meta.deletion_timestamp = Some(t0.saturating_add(Duration::from_secs(since)));
            if let Some(reason) = phase {
                m.conditions.current.push(Condition::new(
                    "Deleting",
                    ConditionStatus::True,
                    reason,
                    "",
                ));
            }
            Object::Machine(m)
        };
        let mut mhc = machine_health_check("c1", "mhc");
        mhc.status.expected_machines = Some(3);
        mhc.status.current_healthy = Some(2);
        mhc.status.remediations_allowed = Some(1);
        let objects = vec![
            Object::Cluster(cluster("c1")),
            deleting("a", 0, Some("DrainingNode")),
            deleting("b", 300, Some("DrainingNode")),
            deleting("c", 60, None),
            Object::Machine(machine("c1", "d", None)),
            Object::MachineHealthCheck(mhc),
        ];
        let mut store = Store::default();
        store.replace_scope(&Scope::Management, objects);
        let g = gauges(&store, t0.saturating_add(Duration::from_secs(600)));
        assert_eq!(
            g.deleting,
            BTreeMap::from([
                (
                    "DrainingNode".to_string(),
                    PhaseGauge {
                        machines: 2,
                        oldest_seconds: 600
                    }
                ),
                (
                    "Pending".to_string(),
                    PhaseGauge {
                        machines: 1,
                        oldest_seconds: 540
                    }
                ),
            ])
        );
        assert_eq!(
            g.mhcs,
            [MhcGauge {
                name: "default/mhc".into(),
                expected: 3,
                healthy: 2,
                remediations_allowed: 1
            }]
        );
    }
}
