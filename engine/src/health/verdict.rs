//! Per-target health: upstream's `needsRemediation` (`engine/docs/capi.md` §2.2), plus the product's
//! failure-field check (Part 1, decision 3).
//!
//! The verdict is a pure function of the Machine, its Node as observed, the Cluster's gates,
//! the MHC's checks and `now`. Deadlines are absolute: a condition that started at `t` with
//! timeout `d` is unhealthy once `t + d` is strictly before now, so the target is looked at
//! again at `t + d + 1s` (upstream's `+1s` next-check rule).

use crate::model::{
    Condition, ConditionStatus, Machine, Node, REMEDIATE_MACHINE_ANNOTATION, Severity,
    UnhealthyCondition,
};
use crate::time::{Duration, Timestamp};

/// The default `nodeStartupTimeout` (upstream `DefaultNodeStartupTimeoutSeconds`).
pub const NODE_STARTUP_TIMEOUT_DEFAULT: Duration = Duration::from_mins(10);
/// Upstream looks again one second after a timeout would expire (comparisons are strict).
pub const NEXT_CHECK_MARGIN: Duration = Duration::from_secs(1);

pub use crate::shared::HEALTH_CHECK_SUCCEEDED;

/// One Cluster condition the health check is gated on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gate {
    pub is_true: bool,
    /// Last transition time, when the condition is present.
    pub since: Option<Timestamp>,
}

impl Gate {
    /// Reads `type_` from whichever condition list carries it (Part 1, decision 12): the v1beta2
    /// list first, then the v1beta1 one.
    pub fn read(conditions: &crate::model::Conditions, type_: &str) -> Gate {
        let found = conditions
            .current(type_)
            .or_else(|| conditions.legacy(type_));
        match found {
            Some(c) => Gate {
                is_true: c.status == ConditionStatus::True,
                since: c.last_transition_time,
            },
            None => Gate::default(),
        }
    }

    /// The transition time, only when the condition is True.
    fn true_since(&self) -> Option<Timestamp> {
        if self.is_true { self.since } else { None }
    }
}

/// The Cluster conditions that decide whether targets are judged at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClusterGates {
    pub control_plane_initialized: Gate,
    pub infrastructure_ready: Gate,
}

/// The MHC's checks, with defaults applied.
#[derive(Clone, Copy, Debug)]
pub struct Checks<'a> {
    pub unhealthy_node_conditions: &'a [UnhealthyCondition],
    pub unhealthy_machine_conditions: &'a [UnhealthyCondition],
    /// Zero disables the startup check.
    pub node_startup_timeout: Duration,
}

impl Checks<'_> {
    /// A timeout is negative: an invalid spec, whose checks judge nothing by it.
    pub fn has_invalid_timeout(&self) -> bool {
        self.node_startup_timeout < Duration::ZERO
            || (self.unhealthy_node_conditions.iter())
                .chain(self.unhealthy_machine_conditions)
                .any(|c| c.timeout < Duration::ZERO)
    }
}

/// What the workload cluster says about the target's Node.
#[derive(Clone, Copy, Debug)]
pub enum NodeObservation<'a> {
    /// No `status.nodeRef` yet, or no workload client (control plane not initialized).
    NotRead,
    /// `status.nodeRef` names a Node the workload cluster does not have.
    Missing,
    /// The Node exists but cannot be read: unknown, so nothing is judged by it.
    Unreadable,
    Found(&'a Node),
}

/// One reason a target is unhealthy. Findings are collected in upstream's order: machine
/// conditions, then (product decision 3) failure fields, then the node check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    RemediateAnnotation,
    MachineCondition {
        type_: String,
        status: String,
        reason: String,
        timeout: Duration,
    },
    FailureReason(String),
    FailureMessage(String),
    NodeDeleted {
        node: String,
    },
    NodeStartupTimeout {
        timeout: Duration,
    },
    NodeCondition {
        type_: String,
        status: String,
        reason: String,
        timeout: Duration,
    },
}

impl Finding {
    /// The line upstream writes for this finding (also used in logs).
    pub fn message(&self) -> String {
        match self {
            Finding::RemediateAnnotation => {
                "marked for remediation via cluster.x-k8s.io/remediate-machine annotation"
                    .to_string()
            }
            Finding::MachineCondition {
                type_,
                status,
                reason,
                timeout,
            } => condition_line("Machine", type_, status, reason, *timeout),
            Finding::FailureReason(r) => format!("FailureReason: {r}"),
            Finding::FailureMessage(m) => format!("FailureMessage: {m}"),
            Finding::NodeDeleted { node } => format!("Node {node} has been deleted"),
            Finding::NodeStartupTimeout { timeout } => {
                format!("Node failed to report startup in {timeout}")
            }
            Finding::NodeCondition {
                type_,
                status,
                reason,
                timeout,
            } => condition_line("Node", type_, status, reason, *timeout),
        }
    }
}

/// `Condition <Type> on <Object> is reporting status <Status> with reason <Reason> for more
/// than <timeout>`; the reason clause is left out when the condition has no reason.
fn condition_line(
    object: &str,
    type_: &str,
    status: &str,
    reason: &str,
    timeout: Duration,
) -> String {
    if reason.is_empty() {
        format!(
            "Condition {type_} on {object} is reporting status {status} for more than {timeout}"
        )
    } else {
        format!(
            "Condition {type_} on {object} is reporting status {status} with reason {reason} for more than {timeout}"
        )
    }
}

/// The outcome of one health check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Empty when the target is not unhealthy.
    pub findings: Vec<Finding>,
    /// When the verdict may change by the passage of time alone (only for targets that are not
    /// unhealthy): the earliest `expiry + 1s` of the conditions still within their timeouts.
    pub next_check: Option<Timestamp>,
    /// A check applies whose timeout is invalid (negative): whether the target is past it is
    /// unknown, so it is not healthy either.
    pub unknown: bool,
}

impl Verdict {
    pub fn is_unhealthy(&self) -> bool {
        !self.findings.is_empty()
    }
}

/// How a target counts (`engine/docs/capi.md` §2.3).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum TargetClass {
    Healthy,
    Unhealthy,
    /// A timeout is running: neither healthy nor unhealthy (counts against `currentHealthy`).
    Pending,
    /// Not judged: deleting, no Node with the startup check disabled, or gated by the Cluster.
    Unevaluated,
}

impl TargetClass {
    pub fn of(verdict: &Verdict, machine: &Machine, node: NodeObservation<'_>) -> TargetClass {
        if verdict.is_unhealthy() {
            TargetClass::Unhealthy
        } else if verdict.next_check.is_some() {
            TargetClass::Pending
        } else if !verdict.unknown
            && !machine.meta.is_deleting()
            && matches!(node, NodeObservation::Found(_))
        {
            TargetClass::Healthy
        } else {
            TargetClass::Unevaluated
        }
    }
}

pub(super) fn earliest(a: Option<Timestamp>, b: Timestamp) -> Option<Timestamp> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Where a condition stands against one unhealthy-condition check.
pub(super) enum Held {
    /// Not in the checked status: the check does not apply.
    NotInStatus,
    /// Held past the timeout (strictly after it): unhealthy.
    Past,
    /// Held, but not past the timeout: check again at this time (expiry + 1 s).
    Until(Timestamp),
    /// Held, against a negative timeout (an invalid spec): neither past it nor within it.
    Unknown,
}

pub(super) fn held(
    check: &UnhealthyCondition,
    status: ConditionStatus,
    since: Option<Timestamp>,
    now: Timestamp,
) -> Held {
    if status.as_str() != check.status {
        return Held::NotInStatus;
    }
    if check.timeout < Duration::ZERO {
        return Held::Unknown;
    }
    let expiry = since.unwrap_or_default().saturating_add(check.timeout);
    if expiry < now {
        Held::Past
    } else {
        Held::Until(expiry.saturating_add(NEXT_CHECK_MARGIN))
    }
}

/// Upstream's `needsRemediation`, evaluated at `now`.
pub fn evaluate(
    machine: &Machine,
    node: NodeObservation<'_>,
    gates: &ClusterGates,
    checks: &Checks<'_>,
    now: Timestamp,
) -> Verdict {
    // The annotation beats every other check, the cluster gates included.
    if machine.meta.has_annotation(REMEDIATE_MACHINE_ANNOTATION) {
        return Verdict {
            findings: vec![Finding::RemediateAnnotation],
            ..Verdict::default()
        };
    }
    // Nothing is penalised before the control plane exists, except control-plane Machines
    // (so that the first one can be remediated); a Cluster update brings a new reconcile.
    if !gates.control_plane_initialized.is_true && !machine.is_control_plane() {
        return Verdict::default();
    }
    if !gates.infrastructure_ready.is_true {
        return Verdict::default();
    }

    let mut findings = Vec::new();
    let mut next_check = None;
    let mut unknown = false;

    for check in checks.unhealthy_machine_conditions {
        let Some(c) = machine.conditions.current(&check.type_) else {
            continue;
        };
        match held(check, c.status, c.last_transition_time, now) {
            Held::Past => findings.push(Finding::MachineCondition {
                type_: check.type_.clone(),
                status: check.status.clone(),
                reason: c.reason.clone(),
                timeout: check.timeout,
            }),
            Held::Until(t) => next_check = earliest(next_check, t),
            Held::Unknown => unknown = true,
            Held::NotInStatus => {}
        }
    }

    if let Some(reason) = &machine.failure_reason {
        findings.push(Finding::FailureReason(reason.clone()));
    }
    if let Some(message) = &machine.failure_message {
        findings.push(Finding::FailureMessage(message.clone()));
    }

    match node {
        NodeObservation::Missing => findings.push(Finding::NodeDeleted {
            node: machine.node_ref.clone().unwrap_or_default(),
        }),
        NodeObservation::Unreadable => {}
        NodeObservation::NotRead => {
            let timeout = checks.node_startup_timeout;
            if timeout < Duration::ZERO {
                unknown = true;
            } else if !timeout.is_zero() {
                let since = startup_reference(machine, gates);
                let expiry = since.saturating_add(timeout);
                if expiry < now {
                    findings.push(Finding::NodeStartupTimeout { timeout });
                } else {
                    next_check = earliest(next_check, expiry.saturating_add(NEXT_CHECK_MARGIN));
                }
            }
        }
        NodeObservation::Found(n) => {
            for check in checks.unhealthy_node_conditions {
                let Some(c) = n.condition(&check.type_) else {
                    continue;
                };
                match held(check, c.status, c.last_transition_time, now) {
                    Held::Past => findings.push(Finding::NodeCondition {
                        type_: check.type_.clone(),
                        status: check.status.clone(),
                        reason: c.reason.clone(),
                        timeout: check.timeout,
                    }),
                    Held::Until(t) => next_check = earliest(next_check, t),
                    Held::Unknown => unknown = true,
                    Held::NotInStatus => {}
                }
            }
        }
    }

    if !findings.is_empty() {
        next_check = None;
    }
    Verdict {
        findings,
        next_check,
        unknown,
    }
}

/// The time the startup timeout counts from: the latest of the Machine's creation and the
/// True transitions of Cluster `ControlPlaneInitialized`, Cluster `InfrastructureReady` and
/// Machine `InfrastructureReady`.
pub fn startup_reference(machine: &Machine, gates: &ClusterGates) -> Timestamp {
    startup_reference_of(startup_base_of(machine), gates)
}

/// The Machine's part of [`startup_reference`]: the later of its creation and the True
/// transition of its `InfrastructureReady`.
pub(super) fn startup_base_of(machine: &Machine) -> Timestamp {
    let infrastructure_ready = Gate::read(&machine.conditions, "InfrastructureReady");
    infrastructure_ready.true_since().into_iter().fold(
        machine.meta.creation_timestamp.unwrap_or_default(),
        Timestamp::max,
    )
}

/// [`startup_reference`] from the Machine's part ([`startup_base_of`]) and the Cluster's gates.
pub(super) fn startup_reference_of(machine_base: Timestamp, gates: &ClusterGates) -> Timestamp {
    [
        gates.control_plane_initialized.true_since(),
        gates.infrastructure_ready.true_since(),
    ]
    .into_iter()
    .flatten()
    .fold(machine_base, Timestamp::max)
}

/// `HealthCheckSucceeded` as written for an unhealthy target: (v1beta2, v1beta1).
pub fn failed_conditions(findings: &[Finding]) -> (Condition, Condition) {
    debug_assert!(!findings.is_empty(), "an unhealthy verdict has findings");
    if findings.first() == Some(&Finding::RemediateAnnotation) {
        return (
            Condition::new(
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::False,
                "HasRemediateAnnotation",
                "Health check failed: marked for remediation via cluster.x-k8s.io/remediate-machine annotation",
            ),
            Condition::new(
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::False,
                "HasRemediateMachineAnnotation",
                "Marked for remediation via remediate-machine annotation",
            )
            .with_severity(Severity::Warning),
        );
    }
    let (mut reason, mut legacy_reason) = ("UnhealthyNode", "UnhealthyNode");
    for f in findings {
        match f {
            Finding::NodeDeleted { .. } => {
                (reason, legacy_reason) = ("NodeDeleted", "NodeNotFound")
            }
            Finding::NodeStartupTimeout { .. } => {
                (reason, legacy_reason) = ("NodeStartupTimeout", "NodeStartupTimeout")
            }
            Finding::NodeCondition { .. }
            | Finding::RemediateAnnotation
            | Finding::MachineCondition { .. }
            | Finding::FailureReason(_)
            | Finding::FailureMessage(_) => {}
        }
    }
    let has = |p: fn(&Finding) -> bool| findings.iter().any(p);
    if has(|f| matches!(f, Finding::MachineCondition { .. })) {
        (reason, legacy_reason) = ("UnhealthyMachine", "UnhealthyMachine");
    }
    if has(|f| matches!(f, Finding::FailureReason(_) | Finding::FailureMessage(_))) {
        (reason, legacy_reason) = ("MachineHasFailure", "MachineHasFailure");
    }
    let lines: Vec<String> = findings.iter().map(Finding::message).collect();
    let mut message = String::from("Health check failed:");
    for line in &lines {
        message.push_str("\n  * ");
        message.push_str(line);
    }
    let legacy_message = if legacy_reason == "NodeNotFound" {
        String::new()
    } else {
        lines.join("; ")
    };
    (
        Condition::new(
            HEALTH_CHECK_SUCCEEDED,
            ConditionStatus::False,
            reason,
            &message,
        ),
        Condition::new(
            HEALTH_CHECK_SUCCEEDED,
            ConditionStatus::False,
            legacy_reason,
            &legacy_message,
        )
        .with_severity(Severity::Warning),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConditionStatus as S, NodeCondition};
    use crate::testing;

    const T0: Timestamp = Timestamp(1_000_000_000);

    fn at(offset: Duration) -> Timestamp {
        T0.saturating_add(offset)
    }

    fn secs(s: i64) -> Duration {
        Duration::from_secs(s)
    }

    fn ready_gates() -> ClusterGates {
        ClusterGates {
            control_plane_initialized: Gate {
                is_true: true,
                since: Some(Timestamp(0)),
            },
            infrastructure_ready: Gate {
                is_true: true,
                since: Some(Timestamp(0)),
            },
        }
    }

    fn check(type_: &str, status: &str, timeout: Duration) -> UnhealthyCondition {
        UnhealthyCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            timeout,
        }
    }

    fn node_with(type_: &str, status: S, reason: &str, since: Timestamp) -> Node {
        let mut n = testing::node("node1");
        n.conditions = vec![NodeCondition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: String::new(),
            last_transition_time: Some(since),
        }];
        n
    }

    fn machine_created(at: Timestamp) -> Machine {
        let mut m = testing::machine("c1", "machine1", Some("node1"));
        m.meta.creation_timestamp = Some(at);
        m
    }

    /// Mirrors upstream's `TestHealthCheckTargets`: healthy, startup-pending, startup-expired,
    /// condition pending, condition expired, node gone, with their next-check durations.
    #[test]
    fn target_health_table_with_next_check_durations() {
        let node_checks = [
            check("Ready", "Unknown", secs(300)),
            check("Ready", "False", secs(300)),
        ];
        let machine_checks = [check("EtcdPodHealthy", "False", secs(300))];
        let checks = Checks {
            unhealthy_node_conditions: &node_checks,
            unhealthy_machine_conditions: &machine_checks,
            node_startup_timeout: Duration::from_mins(10),
        };
        let now = T0;
        let healthy_node = node_with("Ready", S::True, "", Timestamp(0));
        let unknown_200 = node_with("Ready", S::Unknown, "NodeStatusUnknown", at(secs(-200)));
        let unknown_400 = node_with("Ready", S::Unknown, "NodeStatusUnknown", at(secs(-400)));
        let mut etcd_200 = machine_created(Timestamp(0));
        etcd_200.conditions.current.push(Condition {
            last_transition_time: Some(at(secs(-200))),
            ..Condition::new("EtcdPodHealthy", S::False, "PodFailed", "")
        });
        let mut etcd_400 = etcd_200.clone();
        etcd_400.conditions.current[0].last_transition_time = Some(at(secs(-400)));

        struct Case<'a> {
            name: &'a str,
            machine: Machine,
            node: NodeObservation<'a>,
            unhealthy: bool,
            next_check: Option<Duration>,
            lines: Vec<&'a str>,
        }
        let cases = [
            Case {
                name: "healthy node",
                machine: machine_created(Timestamp(0)),
                node: NodeObservation::Found(&healthy_node),
                unhealthy: false,
                next_check: None,
                lines: vec![],
            },
            Case {
                name: "no node yet, created 5m ago: check again in 5m1s",
                machine: machine_created(at(secs(-300))),
                node: NodeObservation::NotRead,
                unhealthy: false,
                next_check: Some(secs(301)),
                lines: vec![],
            },
            Case {
                name: "no node after 10m1s",
                machine: machine_created(at(secs(-601))),
                node: NodeObservation::NotRead,
                unhealthy: true,
                next_check: None,
                lines: vec!["Node failed to report startup in 10m0s"],
            },
            Case {
                name: "node gone",
                machine: machine_created(Timestamp(0)),
                node: NodeObservation::Missing,
                unhealthy: true,
                next_check: None,
                lines: vec!["Node node1 has been deleted"],
            },
            Case {
                name: "Ready=Unknown for 200s of 300s: check again in 101s",
                machine: machine_created(Timestamp(0)),
                node: NodeObservation::Found(&unknown_200),
                unhealthy: false,
                next_check: Some(secs(101)),
                lines: vec![],
            },
            Case {
                name: "Ready=Unknown for 400s",
                machine: machine_created(Timestamp(0)),
                node: NodeObservation::Found(&unknown_400),
                unhealthy: true,
                next_check: None,
                lines: vec![
                    "Condition Ready on Node is reporting status Unknown with reason NodeStatusUnknown for more than 5m0s",
                ],
            },
            Case {
                name: "machine condition for 200s of 300s",
                machine: etcd_200.clone(),
                node: NodeObservation::Found(&healthy_node),
                unhealthy: false,
                next_check: Some(secs(101)),
                lines: vec![],
            },
            Case {
                name: "machine condition for 400s plus node condition for 400s",
                machine: etcd_400.clone(),
                node: NodeObservation::Found(&unknown_400),
                unhealthy: true,
                next_check: None,
                lines: vec![
                    "Condition EtcdPodHealthy on Machine is reporting status False with reason PodFailed for more than 5m0s",
                    "Condition Ready on Node is reporting status Unknown with reason NodeStatusUnknown for more than 5m0s",
                ],
            },
        ];
        for case in cases {
            let v = evaluate(&case.machine, case.node, &ready_gates(), &checks, now);
            assert_eq!(v.is_unhealthy(), case.unhealthy, "{}", case.name);
            assert_eq!(
                v.next_check.map(|t| t.since(now)),
                case.next_check,
                "{}",
                case.name
            );
            let lines: Vec<String> = v.findings.iter().map(Finding::message).collect();
            assert_eq!(lines, case.lines, "{}", case.name);
        }
    }

    #[test]
    fn timeout_comparison_is_strict() {
        let node_checks = [check("Ready", "False", secs(300))];
        let checks = Checks {
            unhealthy_node_conditions: &node_checks,
            unhealthy_machine_conditions: &[],
            node_startup_timeout: Duration::from_mins(10),
        };
        let n = node_with("Ready", S::False, "KubeletDown", at(secs(-300)));
        let m = machine_created(Timestamp(0));
        let exactly = evaluate(&m, NodeObservation::Found(&n), &ready_gates(), &checks, T0);
        assert!(!exactly.is_unhealthy());
        assert_eq!(exactly.next_check, Some(at(secs(1))));
        let after = evaluate(
            &m,
            NodeObservation::Found(&n),
            &ready_gates(),
            &checks,
            at(secs(1)),
        );
        assert!(after.is_unhealthy());
    }

    #[test]
    fn remediate_annotation_beats_the_cluster_gates() {
        let mut m = machine_created(Timestamp(0));
        m.meta
            .annotations
            .insert(REMEDIATE_MACHINE_ANNOTATION.to_string(), String::new());
        let checks = Checks {
            unhealthy_node_conditions: &[],
            unhealthy_machine_conditions: &[],
            node_startup_timeout: Duration::from_mins(10),
        };
        let v = evaluate(
            &m,
            NodeObservation::NotRead,
            &ClusterGates::default(),
            &checks,
            T0,
        );
        assert_eq!(v.findings, vec![Finding::RemediateAnnotation]);
        let (current, legacy) = failed_conditions(&v.findings);
        assert_eq!(current.reason, "HasRemediateAnnotation");
        assert_eq!(
            current.message,
            "Health check failed: marked for remediation via cluster.x-k8s.io/remediate-machine annotation"
        );
        assert_eq!(legacy.reason, "HasRemediateMachineAnnotation");
        assert_eq!(
            legacy.message,
            "Marked for remediation via remediate-machine annotation"
        );
        assert_eq!(legacy.severity, Severity::Warning);
    }

    #[test]
    fn cluster_gates_hold_back_workers_but_not_control_plane_machines() {
        let checks = Checks {
            unhealthy_node_conditions: &[],
            unhealthy_machine_conditions: &[],
            node_startup_timeout: Duration::from_mins(10),
        };
        let cp_not_initialized = ClusterGates {
            control_plane_initialized: Gate::default(),
            infrastructure_ready: ready_gates().infrastructure_ready,
        };
        let worker = machine_created(Timestamp(0));
        let v = evaluate(
            &worker,
            NodeObservation::NotRead,
            &cp_not_initialized,
            &checks,
            T0,
        );
        assert_eq!(v, Verdict::default());
        let mut cp = testing::control_plane_machine("c1", "cp", None);
        cp.meta.creation_timestamp = Some(Timestamp(0));
        let v = evaluate(
            &cp,
            NodeObservation::NotRead,
            &cp_not_initialized,
            &checks,
            T0,
        );
        assert!(
            v.is_unhealthy(),
            "the first control-plane Machine can be remediated"
        );
        let infra_not_ready = ClusterGates {
            control_plane_initialized: ready_gates().control_plane_initialized,
            infrastructure_ready: Gate::default(),
        };
        let v = evaluate(&cp, NodeObservation::NotRead, &infra_not_ready, &checks, T0);
        assert_eq!(v, Verdict::default());
    }

    #[test]
    fn startup_timeout_counts_from_the_latest_reference_time() {
        let checks = Checks {
            unhealthy_node_conditions: &[],
            unhealthy_machine_conditions: &[],
            node_startup_timeout: Duration::from_mins(10),
        };
        let mut gates = ready_gates();
        gates.control_plane_initialized.since = Some(at(secs(-100)));
        gates.infrastructure_ready.since = Some(at(secs(-200)));
        let mut m = machine_created(at(secs(-3000)));
        m.conditions.current.push(Condition {
            last_transition_time: Some(at(secs(-50))),
            ..Condition::new("InfrastructureReady", S::True, "", "")
        });
        let v = evaluate(&m, NodeObservation::NotRead, &gates, &checks, T0);
        assert_eq!(v.next_check, Some(at(secs(600 - 50 + 1))));
        // A False Machine InfrastructureReady does not count.
        m.conditions.current[0].status = S::False;
        let v = evaluate(&m, NodeObservation::NotRead, &gates, &checks, T0);
        assert_eq!(v.next_check, Some(at(secs(600 - 100 + 1))));
        // Zero disables the check: no verdict, no next check.
        let disabled = Checks {
            node_startup_timeout: Duration::ZERO,
            ..checks
        };
        let old = machine_created(Timestamp(0));
        assert_eq!(
            evaluate(&old, NodeObservation::NotRead, &gates, &disabled, T0),
            Verdict::default()
        );
    }

    #[test]
    fn failure_fields_are_unhealthy_at_once_with_machine_has_failure() {
        let node_checks = [check("Ready", "False", secs(300))];
        let checks = Checks {
            unhealthy_node_conditions: &node_checks,
            unhealthy_machine_conditions: &[],
            node_startup_timeout: Duration::from_mins(10),
        };
        let mut m = machine_created(Timestamp(0));
        m.failure_reason = Some("UpdateError".to_string());
        m.failure_message = Some("disk gone".to_string());
        let n = node_with("Ready", S::False, "KubeletDown", at(secs(-400)));
        let v = evaluate(&m, NodeObservation::Found(&n), &ready_gates(), &checks, T0);
        let (current, legacy) = failed_conditions(&v.findings);
        assert_eq!(current.reason, "MachineHasFailure");
        assert_eq!(
            current.message,
            "Health check failed:\n  * FailureReason: UpdateError\n  * FailureMessage: disk gone\n  * Condition Ready on Node is reporting status False with reason KubeletDown for more than 5m0s"
        );
        assert_eq!(legacy.reason, "MachineHasFailure");
        assert_eq!(
            legacy.message,
            "FailureReason: UpdateError; FailureMessage: disk gone; Condition Ready on Node is reporting status False with reason KubeletDown for more than 5m0s"
        );
    }

    #[test]
    fn condition_messages_in_both_api_versions() {
        let gone = [Finding::NodeDeleted {
            node: "n1".to_string(),
        }];
        let (current, legacy) = failed_conditions(&gone);
        assert_eq!(
            (current.reason.as_str(), current.message.as_str()),
            (
                "NodeDeleted",
                "Health check failed:\n  * Node n1 has been deleted"
            )
        );
        assert_eq!(
            (legacy.reason.as_str(), legacy.message.as_str()),
            ("NodeNotFound", ""),
            "v1beta1 NodeNotFound carries no message"
        );
        let startup = [Finding::NodeStartupTimeout {
            timeout: Duration::from_mins(10),
        }];
        let (current, legacy) = failed_conditions(&startup);
        assert_eq!(current.reason, "NodeStartupTimeout");
        assert_eq!(legacy.message, "Node failed to report startup in 10m0s");
        let machine_and_gone = [
            Finding::MachineCondition {
                type_: "EtcdPodHealthy".to_string(),
                status: "False".to_string(),
                reason: String::new(),
                timeout: secs(300),
            },
            Finding::NodeDeleted {
                node: "n1".to_string(),
            },
        ];
        let (current, legacy) = failed_conditions(&machine_and_gone);
        assert_eq!(current.reason, "UnhealthyMachine");
        assert_eq!(legacy.reason, "UnhealthyMachine");
        assert_eq!(
            legacy.message,
            "Condition EtcdPodHealthy on Machine is reporting status False for more than 5m0s; Node n1 has been deleted"
        );
    }

    #[test]
    fn classification_follows_upstream_buckets() {
        let m = machine_created(Timestamp(0));
        let n = testing::node("node1");
        let healthy = Verdict::default();
        let pending = Verdict {
            next_check: Some(T0),
            ..Verdict::default()
        };
        let unknown = Verdict {
            unknown: true,
            ..Verdict::default()
        };
        assert_eq!(
            TargetClass::of(&unknown, &m, NodeObservation::Found(&n)),
            TargetClass::Unevaluated,
            "a check that cannot be judged leaves the target neither healthy nor unhealthy"
        );
        assert_eq!(
            TargetClass::of(&healthy, &m, NodeObservation::Found(&n)),
            TargetClass::Healthy
        );
        assert_eq!(
            TargetClass::of(&pending, &m, NodeObservation::Found(&n)),
            TargetClass::Pending
        );
        assert_eq!(
            TargetClass::of(&healthy, &m, NodeObservation::NotRead),
            TargetClass::Unevaluated
        );
        let mut deleting = m.clone();
        deleting.meta.deletion_timestamp = Some(T0);
        assert_eq!(
            TargetClass::of(&healthy, &deleting, NodeObservation::Found(&n)),
            TargetClass::Unevaluated
        );
    }
}
