//! The model of CAPI's MachineHealthCheck controller (`capiManager: true`), as upstream
//! behaves (`machinehealthcheck_targets.go` `needsRemediation`, `machinehealthcheck_controller.go`),
//! for an MHC that is not paused (its annotation, or its Cluster's `spec.paused`):
//!
//! | step | upstream |
//! |---|---|
//! | targets: the selector's Machines of its Cluster, but paused and `skip-remediation` ones | §2.1 4 |
//! | `remediate-machine` annotation: unhealthy at once (`HasRemediateAnnotation`) | §2.2 1 |
//! | Cluster not `ControlPlaneInitialized` (but control-plane Machines) or not `InfrastructureReady`: not judged | §2.2 2, 3 |
//! | `unhealthyMachineConditions`, a deleted Node, `nodeStartupTimeout` (600 s by default, from the latest of the Machine's creation and the gates' transitions), `unhealthyNodeConditions` (strictly past the timeout) | §2.2 4, 5 |
//! | a timeout still running: neither healthy nor unhealthy | §2.3 |
//! | `maxUnhealthy` / `unhealthyRange` (either API version): short-circuited, only the marks | §2.3, §2.4 |
//! | owner remediation `OwnerRemediated=False` (not over one in progress, not on a deleting Machine) | §2.5 |
//! | external remediation: a request from the template named after the Machine, `ExternallyRemediated=False`; a request that exists ends the unhealthy targets' pass (upstream's quirk, decision 5 differs); a healthy Machine's request deleted | §2.5, §2.6 |
//! | `expectedMachines`, `currentHealthy`, `remediationsAllowed` | §2.1 5, 7, 9 |
//!
//! Not modelled: matchExpressions selectors, the MHC's own conditions and events.

use crate::api::json::Pointer as _;
use crate::api::{ObjKey, Part, json};
use crate::capi_conditions::{condition, conditions, set_conditions};
use crate::env::Env;
use engine::model::{
    CONTROL_PLANE_LABEL, PAUSED_ANNOTATION, REMEDIATE_MACHINE_ANNOTATION,
    SKIP_REMEDIATION_ANNOTATION, Scope,
};
use engine::time::{Duration, Timestamp};
use serde_json::{Value, json};

/// A target's verdict (`needsRemediation` and the bucket `healthCheckTargets` puts it in).
enum Health {
    Healthy {
        recheck: Option<Timestamp>,
    },
    /// Judged later (a timeout still running): neither healthy nor unhealthy.
    Pending {
        recheck: Timestamp,
    },
    /// Not judged (Cluster gates, no Node and no startup timeout).
    Unjudged,
    Unhealthy {
        reason: &'static str,
        message: String,
    },
}

/// The MHCs of `namespace`.
pub(crate) fn mhcs_of(env: &Env<'_>, namespace: &str) -> Vec<ObjKey> {
    env.api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "MachineHealthCheck")
                .filter(|(k, _)| k.namespace == namespace)
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// An MHC's checks, from either API version (CAPI reads the stored v1beta1 through conversion).
struct Checks {
    node_conditions: Vec<(String, String, Duration)>,
    machine_conditions: Vec<(String, String, Duration)>,
    /// `None`: disabled (0).
    startup: Option<Duration>,
    /// Remediation allowed for this many unhealthy targets out of `expected`: `None` when the
    /// value cannot be read (upstream's reconcile then errors: nothing allowed).
    trigger: Trigger,
}

enum Trigger {
    MaxUnhealthy(String),
    Range(String),
}

impl Checks {
    fn read(mhc: &Value) -> Checks {
        let v1beta1 = json::api_version(mhc).ends_with("v1beta1");
        let entries = |pointer: &str, timeout: &dyn Fn(&Value) -> Option<Duration>| {
            mhc.at_pointer(pointer)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    Some((
                        c["type"].as_str()?.to_string(),
                        c["status"].as_str()?.to_string(),
                        timeout(c)?,
                    ))
                })
                .collect::<Vec<_>>()
        };
        let seconds = |c: &Value| {
            c["timeoutSeconds"]
                .as_i64()
                .filter(|s| *s >= 0)
                .map(Duration::from_secs)
        };
        let go = |c: &Value| c["timeout"].as_str().and_then(json::go_duration);
        if v1beta1 {
            Checks {
                node_conditions: entries("/spec/unhealthyConditions", &go),
                machine_conditions: Vec::new(),
                startup: match json::str_at(mhc, "spec.nodeStartupTimeout") {
                    Some(t) => json::go_duration(t),
                    None => Some(DEFAULT_STARTUP),
                },
                trigger: match json::str_at(mhc, "spec.unhealthyRange") {
                    Some(r) if !r.is_empty() => Trigger::Range(r.to_string()),
                    _ => Trigger::MaxUnhealthy(int_or_string(mhc.at_pointer("/spec/maxUnhealthy"))),
                },
            }
        } else {
            Checks {
                node_conditions: entries("/spec/checks/unhealthyNodeConditions", &seconds),
                machine_conditions: entries("/spec/checks/unhealthyMachineConditions", &seconds),
                startup: match mhc
                    .at_pointer("/spec/checks/nodeStartupTimeoutSeconds")
                    .and_then(Value::as_i64)
                {
                    Some(s) if s > 0 => Some(Duration::from_secs(s)),
                    Some(_) => None,
                    None => Some(DEFAULT_STARTUP),
                },
                trigger: match json::str_at(mhc, "spec.remediation.triggerIf.unhealthyInRange") {
                    Some(r) if !r.is_empty() => Trigger::Range(r.to_string()),
                    _ => Trigger::MaxUnhealthy(int_or_string(
                        mhc.at_pointer("/spec/remediation/triggerIf/unhealthyLessThanOrEqualTo"),
                    )),
                },
            }
        }
    }

    /// `isAllowedRemediation`: how many more may be remediated, or `None` when none may.
    fn allowed(&self, expected: u64, unhealthy: u64) -> Option<u64> {
        match &self.trigger {
            Trigger::Range(r) => {
                let inner = r.get(1..r.len().checked_sub(1)?)?;
                let (min, max) = inner.split_once('-')?;
                let (min, max): (u64, u64) = (min.parse().ok()?, max.parse().ok()?);
                (max >= min && (min..=max).contains(&unhealthy)).then(|| max - unhealthy)
            }
            Trigger::MaxUnhealthy(v) => {
                let max = match v.strip_suffix('%') {
                    Some(p) => p.parse::<u64>().ok()? * expected / 100,
                    None => v.parse().ok()?,
                };
                (unhealthy <= max).then(|| max - unhealthy)
            }
        }
    }
}

/// `nodeStartupTimeoutSeconds` when unset.
const DEFAULT_STARTUP: Duration = Duration::from_secs(600);

/// An IntOrString as text (`"100%"` when unset).
fn int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "100%".into(),
    }
}

/// A Cluster gate: `None` unless True, then since when (if the condition says).
type Gate = Option<Option<Timestamp>>;

/// The first condition of `type_` (v1beta2 form first) when True: its transition time.
fn true_since(obj: &Value, type_: &str) -> Gate {
    let c = conditions(obj).find(|c| c["type"] == type_)?;
    (c["status"] == "True").then(|| {
        c["lastTransitionTime"]
            .as_str()
            .and_then(|t| Timestamp::parse_rfc3339(t).ok())
    })
}

/// One reconcile of `mhc_key`: marks its targets; returns when to reconcile again (the
/// earliest timeout still running).
pub(crate) fn reconcile(env: &mut Env<'_>, actor: &str, mhc_key: &ObjKey) -> Option<Timestamp> {
    let mhc = env.api.get(&Scope::Management, mhc_key)?.clone();
    let cluster_name = json::str_at(&mhc, "spec.clusterName")?.to_string();
    let cluster_key = ObjKey::new(
        "cluster.x-k8s.io",
        "Cluster",
        &mhc_key.namespace,
        &cluster_name,
    );
    let cluster = env.api.get(&Scope::Management, &cluster_key).cloned();
    if crate::capi_paused::ensure(env, actor, mhc_key, &mhc) {
        return None;
    }
    let selector: Vec<(String, String)> = mhc
        .at_pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    // Paused and skip-remediation Machines are no targets at all (not even counted).
    let targets: Vec<(ObjKey, Value)> = env
        .api
        .store(&Scope::Management)
        .map(|s| {
            s.list("cluster.x-k8s.io", "Machine")
                .filter(|(k, m)| {
                    let labels = json::labels(m);
                    let annotations = json::annotations(m);
                    k.namespace == mhc_key.namespace
                        && json::str_at(m, "spec.clusterName") == Some(cluster_name.as_str())
                        && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                        && !annotations.contains_key(PAUSED_ANNOTATION)
                        && !annotations.contains_key(SKIP_REMEDIATION_ANNOTATION)
                })
                .map(|(k, m)| (k.clone(), m.clone()))
                .collect()
        })
        .unwrap_or_default();
    let workload = env.api.workload_scope(&cluster_name);
    let checks = Checks::read(&mhc);
    let now = env.clock.now;
    let gates: (Gate, Gate) = cluster.as_ref().map_or((None, None), |c| {
        (
            true_since(c, "ControlPlaneInitialized"),
            true_since(c, "InfrastructureReady"),
        )
    });
    let mut healthy = 0u64;
    let mut next: Option<Timestamp> = None;
    let mut soonest = |t: Option<Timestamp>| {
        next = match (next, t) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    };
    let mut verdicts = Vec::new();
    for (key, machine) in &targets {
        let health = judge(env, &workload, machine, gates, &checks, now);
        match &health {
            Health::Healthy { recheck } => {
                healthy += 1;
                soonest(*recheck);
            }
            Health::Pending { recheck } => soonest(Some(*recheck)),
            Health::Unjudged | Health::Unhealthy { .. } => {}
        }
        verdicts.push((key, machine, health));
    }
    let expected = targets.len() as u64;
    let allowed = checks.allowed(expected, expected - healthy);
    let template = mhc.at_pointer("/spec/remediation/templateRef").cloned();
    // Unhealthy targets first, then the healthy ones (§2.5, §2.6).
    verdicts.sort_by_key(|(_, _, h)| !matches!(h, Health::Unhealthy { .. }));
    let mut unhealthy_pass_over = false;
    for (key, machine, health) in verdicts {
        let written = match health {
            Health::Healthy { .. } => {
                if let Some(t) = &template {
                    remove_request(env, actor, t, key);
                }
                vec![condition(
                    "HealthCheckSucceeded",
                    "True",
                    "HealthCheckSucceeded",
                    "",
                    now,
                )]
            }
            Health::Unhealthy { .. } if unhealthy_pass_over => continue,
            Health::Unhealthy { reason, message } => {
                let mut w = vec![condition(
                    "HealthCheckSucceeded",
                    "False",
                    reason,
                    &message,
                    now,
                )];
                match (&template, allowed) {
                    (_, None) => {}
                    (Some(t), Some(_)) => {
                        // Upstream's quirk (decision 5 differs): a request that exists ends
                        // the unhealthy targets' pass; later ones wait for the next reconcile.
                        if !request(env, actor, t, key, machine) {
                            unhealthy_pass_over = true;
                            continue;
                        }
                        w.push(condition(
                            "ExternallyRemediated",
                            "False",
                            "WaitingForRemediation",
                            "",
                            now,
                        ));
                    }
                    (None, Some(_)) => {
                        let remediating = conditions(machine)
                            .any(|c| c["type"] == "OwnerRemediated" && c["status"] == "False");
                        if !json::is_deleting(machine) && !remediating {
                            w.push(condition(
                                "OwnerRemediated",
                                "False",
                                "WaitingForRemediation",
                                "Waiting for remediation",
                                now,
                            ));
                        }
                    }
                }
                w
            }
            Health::Pending { .. } | Health::Unjudged => continue,
        };
        set_conditions(env, actor, key, machine, &written);
    }
    let counts = json!({"expectedMachines": expected, "currentHealthy": healthy,
        "remediationsAllowed": allowed.unwrap_or(0)});
    let unchanged = ["expectedMachines", "currentHealthy", "remediationsAllowed"]
        .iter()
        .all(|f| mhc.at_pointer(&format!("/status/{f}")) == counts.get(*f));
    if unchanged {
        return next;
    }
    let status = json!({"status": counts});
    if let Ok(w) = env
        .api
        .store_mut(&Scope::Management)
        .patch(mhc_key, &status, Part::Status)
    {
        env.changed(&Scope::Management, w);
    }
    next
}

/// The external remediation request of `machine` (the template's kind without `Template`).
fn request_key(template: &Value, machine: &ObjKey) -> Option<ObjKey> {
    let kind = template["kind"].as_str()?.strip_suffix("Template")?;
    let group = json::group_of(template["apiVersion"].as_str()?);
    Some(ObjKey::new(group, kind, &machine.namespace, &machine.name))
}

/// Creates the Machine's remediation request from the template (§2.5); false when one
/// already exists (upstream then ends the pass).
fn request(
    env: &mut Env<'_>,
    actor: &str,
    template: &Value,
    key: &ObjKey,
    machine: &Value,
) -> bool {
    let Some(request) = request_key(template, key) else {
        return true;
    };
    if env.api.get(&Scope::Management, &request).is_some() {
        return false;
    }
    let Some(name) = template["name"].as_str() else {
        return true;
    };
    let template_key = ObjKey::new(
        &request.group,
        &format!("{}Template", request.kind),
        &key.namespace,
        name,
    );
    let spec = env
        .api
        .get(&Scope::Management, &template_key)
        .and_then(|t| t.at_pointer("/spec/template/spec").cloned())
        .unwrap_or_else(|| json!({}));
    let object = json!({
        "apiVersion": template["apiVersion"], "kind": request.kind,
        "metadata": {"name": key.name, "namespace": key.namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": json::str_at(machine, "spec.clusterName")},
            "annotations": {"cluster.x-k8s.io/cloned-from-name": name,
                "cluster.x-k8s.io/cloned-from-groupkind": format!("{}.{}", template_key.kind, request.group)},
            "ownerReferences": [{"apiVersion": json::api_version(machine), "kind": "Machine",
                "name": key.name, "uid": json::str_at(machine, "metadata.uid")}]},
        "spec": spec,
    });
    let now = env.clock.now;
    if let Ok(w) = env.api.store_mut(&Scope::Management).create(object, now) {
        env.line(
            actor,
            "CreateRemediation",
            crate::api::describe(&Scope::Management, &request),
            format!("for Machine {key}"),
        );
        env.changed(&Scope::Management, w);
    }
    true
}

/// Deletes a healthy Machine's remediation request (§2.6).
fn remove_request(env: &mut Env<'_>, actor: &str, template: &Value, key: &ObjKey) {
    let Some(request) = request_key(template, key) else {
        return;
    };
    let deleting = match env.api.get(&Scope::Management, &request) {
        Some(r) => json::is_deleting(r),
        None => return,
    };
    let now = env.clock.now;
    if !deleting && let Ok(w) = env.api.store_mut(&Scope::Management).delete(&request, now) {
        env.line(
            actor,
            "DeleteRemediation",
            crate::api::describe(&Scope::Management, &request),
            format!("Machine {key} is healthy"),
        );
        env.changed(&Scope::Management, w);
    }
}

/// `needsRemediation` (§2.2) and the bucket it puts the target in (§2.3).
fn judge(
    env: &Env<'_>,
    workload: &Scope,
    machine: &Value,
    (control_plane, infrastructure): (Gate, Gate),
    checks: &Checks,
    now: Timestamp,
) -> Health {
    if json::annotations(machine).contains_key(REMEDIATE_MACHINE_ANNOTATION) {
        return Health::Unhealthy {
            reason: "HasRemediateAnnotation",
            message: "Health check failed: marked for remediation via cluster.x-k8s.io/remediate-machine annotation".into(),
        };
    }
    let is_control_plane = json::labels(machine).contains_key(CONTROL_PLANE_LABEL);
    if (control_plane.is_none() && !is_control_plane) || infrastructure.is_none() {
        return Health::Unjudged;
    }
    let mut messages = Vec::new();
    let mut recheck: Option<Timestamp> = None;
    let mut soonest = |due: Timestamp| {
        recheck = Some(recheck.map_or(due, |r: Timestamp| r.min(due)));
    };
    check_conditions(
        conditions(machine),
        &checks.machine_conditions,
        "Machine",
        now,
        &mut messages,
        &mut soonest,
    );
    let machine_unhealthy = !messages.is_empty();
    let node_name = json::str_at(machine, "status.nodeRef.name");
    let node = node_name.and_then(|n| env.api.get(workload, &ObjKey::new("", "Node", "", n)));
    let mut node_reason = "UnhealthyNode";
    match (node_name, node) {
        (Some(name), None) => {
            node_reason = "NodeDeleted";
            messages.push(format!("Node {name} has been deleted"));
        }
        (None, _) => {
            let Some(timeout) = checks.startup else {
                return if machine_unhealthy {
                    unhealthy(node_reason, true, &messages)
                } else {
                    Health::Unjudged
                };
            };
            let created = json::str_at(machine, "metadata.creationTimestamp")
                .and_then(|t| Timestamp::parse_rfc3339(t).ok());
            let infra_ready = true_since(machine, "InfrastructureReady").flatten();
            let from = [
                created,
                control_plane.flatten(),
                infrastructure.flatten(),
                infra_ready,
            ]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(now);
            if from + timeout < now {
                node_reason = "NodeStartupTimeout";
                messages.push(format!(
                    "Node failed to report startup in {}",
                    go_duration(timeout)
                ));
            } else if !machine_unhealthy {
                return Health::Pending {
                    recheck: from + timeout + Duration::from_secs(1),
                };
            }
        }
        (Some(_), Some(node)) => {
            let node_conditions = node
                .at_pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            check_conditions(
                node_conditions,
                &checks.node_conditions,
                "Node",
                now,
                &mut messages,
                &mut soonest,
            );
        }
    }
    if messages.is_empty() {
        if json::is_deleting(machine) {
            return Health::Unjudged;
        }
        return match recheck {
            Some(r) if r > now => Health::Pending { recheck: r },
            _ => Health::Healthy { recheck },
        };
    }
    unhealthy(node_reason, machine_unhealthy, &messages)
}

fn unhealthy(node_reason: &'static str, machine_unhealthy: bool, messages: &[String]) -> Health {
    let mut message = "Health check failed:".to_string();
    for m in messages {
        message.push_str(&format!("\n  * {m}"));
    }
    Health::Unhealthy {
        reason: if machine_unhealthy {
            "UnhealthyMachine"
        } else {
            node_reason
        },
        message,
    }
}

/// One object's conditions against the MHC's `(type, status, timeout)` checks: a message for
/// each held strictly past its timeout, else when to look again (a second after it).
fn check_conditions<'a>(
    observed: impl Iterator<Item = &'a Value>,
    checks: &[(String, String, Duration)],
    subject: &str,
    now: Timestamp,
    messages: &mut Vec<String>,
    soonest: &mut impl FnMut(Timestamp),
) {
    for c in observed {
        for (type_, status, timeout) in checks {
            if c["type"] != type_.as_str() || c["status"] != status.as_str() {
                continue;
            }
            let due = transition(c, now) + *timeout;
            if due < now {
                messages.push(format!(
                    "Condition {type_} on {subject} is reporting status {status} for more than {}",
                    go_duration(*timeout)
                ));
            } else {
                soonest(due + Duration::from_secs(1));
            }
        }
    }
}

/// A condition's transition time (now when it has none).
fn transition(c: &Value, now: Timestamp) -> Timestamp {
    c["lastTransitionTime"]
        .as_str()
        .and_then(|t| Timestamp::parse_rfc3339(t).ok())
        .unwrap_or(now)
}

/// A duration as Go prints it (`5m0s`).
fn go_duration(d: Duration) -> String {
    let s = d.as_millis() / 1000;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}
