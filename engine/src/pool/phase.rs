//! `status.phase` of a MachinePool: upstream's rule table (`engine/docs/capi.md` §3.5) plus the product's
//! terminal `Failed` (Part 1, decision 5).

use std::fmt;

/// The phases a MachinePool reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPhase {
    Pending,
    Provisioning,
    Provisioned,
    Running,
    ScalingUp,
    ScalingDown,
    Scaling,
    Deleting,
    Failed,
}

impl PoolPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolPhase::Pending => "Pending",
            PoolPhase::Provisioning => "Provisioning",
            PoolPhase::Provisioned => "Provisioned",
            PoolPhase::Running => "Running",
            PoolPhase::ScalingUp => "ScalingUp",
            PoolPhase::ScalingDown => "ScalingDown",
            PoolPhase::Scaling => "Scaling",
            PoolPhase::Deleting => "Deleting",
            PoolPhase::Failed => "Failed",
        }
    }
}

impl fmt::Display for PoolPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the phase rules look at, after the rest of the reconcile has computed the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseFacts<'a> {
    /// The phase as last written (any string: an unknown one is kept when no rule fires).
    pub previous: Option<&'a str>,
    pub bootstrap_data_secret_created: bool,
    pub infrastructure_provisioned: bool,
    pub node_refs: usize,
    pub spec_replicas: Option<i32>,
    /// v1beta1 `readyReplicas` (0 when unset).
    pub legacy_ready_replicas: i32,
    /// The `cluster.x-k8s.io/replicas-managed-by` annotation is truthy.
    pub replicas_managed_externally: bool,
    pub deleting: bool,
    /// `failureReason` or `failureMessage` is set on the pool.
    pub failure_surfaced: bool,
}

/// Runs the rules in upstream's order, later rules overwriting earlier ones. Returns the phase
/// string to write: when no rule fires the previous phase stays (sticky), whatever it was.
pub fn next_phase(f: &PhaseFacts<'_>) -> String {
    // Failed is terminal: once written it never changes, even on deletion.
    if f.failure_surfaced || f.previous == Some(PoolPhase::Failed.as_str()) {
        return PoolPhase::Failed.to_string();
    }
    let mut phase: Option<PoolPhase> = None;
    if f.previous.is_none_or(str::is_empty) {
        phase = Some(PoolPhase::Pending);
    }
    if f.bootstrap_data_secret_created && !f.infrastructure_provisioned {
        phase = Some(PoolPhase::Provisioning);
    }
    if f.node_refs != 0 {
        phase = Some(PoolPhase::Provisioned);
    }
    if f.infrastructure_provisioned
        && let Some(desired) = f.spec_replicas
    {
        let ready = f.legacy_ready_replicas;
        let scaling = f.replicas_managed_externally;
        phase = Some(match (desired.cmp(&ready), scaling) {
            (std::cmp::Ordering::Equal, _) => PoolPhase::Running,
            (std::cmp::Ordering::Greater, false) => PoolPhase::ScalingUp,
            (std::cmp::Ordering::Less, false) => PoolPhase::ScalingDown,
            (std::cmp::Ordering::Greater | std::cmp::Ordering::Less, true) => PoolPhase::Scaling,
        });
    }
    if f.deleting {
        phase = Some(PoolPhase::Deleting);
    }
    match phase {
        Some(p) => p.to_string(),
        None => f.previous.unwrap_or_default().to_string(),
    }
}

/// Upstream's "truthy": present with any value but the exact string `false` (empty counts).
pub fn replicas_managed_externally(annotation: Option<&str>) -> bool {
    annotation.is_some_and(|v| v != "false")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> PhaseFacts<'static> {
        PhaseFacts {
            previous: None,
            bootstrap_data_secret_created: false,
            infrastructure_provisioned: false,
            node_refs: 0,
            spec_replicas: Some(1),
            legacy_ready_replicas: 0,
            replicas_managed_externally: false,
            deleting: false,
            failure_surfaced: false,
        }
    }

    /// Mirrors upstream's `TestReconcileMachinePoolPhases` expectations, one row per case.
    #[test]
    fn phase_rule_table_matches_upstream() {
        let cases: Vec<(&str, PhaseFacts<'static>, &str)> = vec![
            ("new MachinePool is Pending", facts(), "Pending"),
            (
                "bootstrap ready, infra not: Provisioning",
                PhaseFacts {
                    bootstrap_data_secret_created: true,
                    ..facts()
                },
                "Provisioning",
            ),
            (
                "nodeRef but infra not ready: Provisioned",
                PhaseFacts {
                    bootstrap_data_secret_created: true,
                    node_refs: 1,
                    ..facts()
                },
                "Provisioned",
            ),
            (
                "bootstrap, infra ready and ready == spec: Running",
                PhaseFacts {
                    bootstrap_data_secret_created: true,
                    infrastructure_provisioned: true,
                    node_refs: 1,
                    legacy_ready_replicas: 1,
                    ..facts()
                },
                "Running",
            ),
            (
                "spec above ready: ScalingUp",
                PhaseFacts {
                    infrastructure_provisioned: true,
                    spec_replicas: Some(5),
                    legacy_ready_replicas: 1,
                    ..facts()
                },
                "ScalingUp",
            ),
            (
                "spec below ready: ScalingDown",
                PhaseFacts {
                    infrastructure_provisioned: true,
                    spec_replicas: Some(1),
                    legacy_ready_replicas: 4,
                    ..facts()
                },
                "ScalingDown",
            ),
            (
                "externally managed, spec above ready: Scaling",
                PhaseFacts {
                    infrastructure_provisioned: true,
                    spec_replicas: Some(5),
                    legacy_ready_replicas: 1,
                    replicas_managed_externally: true,
                    ..facts()
                },
                "Scaling",
            ),
            (
                "externally managed, spec below ready: Scaling",
                PhaseFacts {
                    infrastructure_provisioned: true,
                    spec_replicas: Some(0),
                    legacy_ready_replicas: 1,
                    replicas_managed_externally: true,
                    ..facts()
                },
                "Scaling",
            ),
            (
                "externally managed but equal: Running",
                PhaseFacts {
                    infrastructure_provisioned: true,
                    legacy_ready_replicas: 1,
                    replicas_managed_externally: true,
                    ..facts()
                },
                "Running",
            ),
            (
                "nil spec.replicas never Running",
                PhaseFacts {
                    previous: Some("Provisioning"),
                    infrastructure_provisioned: true,
                    spec_replicas: None,
                    ..facts()
                },
                "Provisioning",
            ),
            (
                "deletionTimestamp: Deleting",
                PhaseFacts {
                    infrastructure_provisioned: true,
                    legacy_ready_replicas: 1,
                    deleting: true,
                    ..facts()
                },
                "Deleting",
            ),
            (
                "sticky: Running stays Running when no rule fires",
                PhaseFacts {
                    previous: Some("Running"),
                    ..facts()
                },
                "Running",
            ),
            (
                "sticky keeps an unknown string",
                PhaseFacts {
                    previous: Some("Whatever"),
                    ..facts()
                },
                "Whatever",
            ),
            (
                "failure surfaces: Failed",
                PhaseFacts {
                    infrastructure_provisioned: true,
                    legacy_ready_replicas: 1,
                    failure_surfaced: true,
                    ..facts()
                },
                "Failed",
            ),
            (
                "Failed is terminal even when deleting and failure cleared",
                PhaseFacts {
                    previous: Some("Failed"),
                    infrastructure_provisioned: true,
                    deleting: true,
                    ..facts()
                },
                "Failed",
            ),
        ];
        for (name, f, want) in cases {
            assert_eq!(next_phase(&f), want, "{name}");
        }
    }

    #[test]
    fn replicas_managed_by_is_truthy_unless_exactly_false() {
        assert!(replicas_managed_externally(Some("")));
        assert!(replicas_managed_externally(Some("cluster-autoscaler")));
        assert!(replicas_managed_externally(Some("False")));
        assert!(!replicas_managed_externally(Some("false")));
        assert!(!replicas_managed_externally(None));
    }
}
