//! What holds a Machine now, and one short, specific sentence per thing that would release it.

use super::Now;
use super::build::{DELETING, Teller, condition_label};
use engine::deletion::reason as r;
use engine::model::{
    Condition, ConditionStatus, Object, ObjectKey, PAUSED_ANNOTATION, find_condition,
};
use std::collections::BTreeMap;

pub(super) struct MachineContext {
    pub hooks: BTreeMap<String, String>,
    pub infrastructure: Option<String>,
    pub bootstrap: Option<String>,
    pub node_delete_refused: Option<String>,
    pub replacement: Option<String>,
    pub deletion_requested: bool,
    pub judged_by: Option<ObjectKey>,
}

pub(super) fn machine_now(t: &Teller, m: &MachineContext) -> Now {
    if let Some(gone) = &t.gone {
        let mut summary = format!("gone since {} (record #{})", gone.at, gone.seq);
        if let Some(r) = &m.replacement {
            summary.push_str(&format!("; replaced by {r}"));
        }
        return Now {
            summary,
            held_by: Vec::new(),
            unblock: Vec::new(),
        };
    }
    let conditions = t.subject_conditions();
    if let Some(deleting) = find_condition(conditions, DELETING)
        .filter(|c| c.status == ConditionStatus::True && c.reason != r::DELETION_COMPLETED)
    {
        let phase = t.phases_last();
        let summary = match phase {
            Some((name, since)) => format!(
                "deleting: {name} ({}) for {} (since {})",
                deleting.reason,
                t.now_at.since(since),
                since.to_rfc3339()
            ),
            None => format!("deleting ({})", deleting.reason),
        };
        return Now {
            summary,
            held_by: message_lines(deleting),
            unblock: deletion_unblock(t, deleting, m),
        };
    }
    if let Some(done) = find_condition(conditions, DELETING)
        .filter(|c| c.status == ConditionStatus::True && c.reason == r::DELETION_COMPLETED)
    {
        let finalizers = t
            .subject_object()
            .map(|o| o.meta().finalizers.join(", "))
            .unwrap_or_default();
        return Now {
            summary: format!("{}; the Machine is not gone yet", condition_label(done)),
            held_by: vec![format!("finalizers: [{finalizers}]")],
            unblock: vec![
                "this controller releases machine.cluster.x-k8s.io last; any other finalizer listed is another controller's to remove".into(),
            ],
        };
    }
    if m.deletion_requested {
        return Now {
            summary: "deletion requested; no deletion pass recorded yet".into(),
            held_by: Vec::new(),
            unblock: vec![paused(t).unwrap_or_else(|| {
                "the controller must be running with its caches synced (see `lifecycle log show` for its latest inputs)".into()
            })],
        };
    }
    health_now(t, conditions, m)
}

/// What pauses the Machine's reconcile, as what would lift it.
fn paused(t: &Teller) -> Option<String> {
    let Some(Object::Machine(machine)) = t.subject_object() else {
        return None;
    };
    if let Some(v) = machine.meta.annotations.get(PAUSED_ANNOTATION) {
        return Some(format!(
            "the Machine is paused: remove its annotation {PAUSED_ANNOTATION} (value {v:?})"
        ));
    }
    let cluster = ObjectKey::management(
        engine::model::Kind::Cluster,
        &machine.meta.namespace,
        &machine.cluster_name,
    );
    match t.objects.get(&cluster) {
        Some(Some(Object::Cluster(c))) if c.paused => {
            Some(format!("{cluster} is paused: set its spec.paused to false"))
        }
        Some(Some(Object::Cluster(c))) if c.meta.annotations.contains_key(PAUSED_ANNOTATION) => {
            Some(format!(
                "{cluster} is paused: remove its annotation {PAUSED_ANNOTATION}"
            ))
        }
        _ => None,
    }
}

fn health_now(t: &Teller, conditions: &[Condition], m: &MachineContext) -> Now {
    let health = find_condition(conditions, "HealthCheckSucceeded");
    let Some(h) = health.filter(|h| h.status == ConditionStatus::False) else {
        return Now {
            summary: match health {
                Some(h) => format!("present, not deleting; {}", condition_label(h)),
                None => "present, not deleting".into(),
            },
            held_by: Vec::new(),
            unblock: Vec::new(),
        };
    };
    let mut held_by = vec![super::build::condition_text(h)];
    let mut unblock = Vec::new();
    if let Some(o) = find_condition(conditions, "OwnerRemediated") {
        held_by.push(super::build::condition_text(o));
    }
    let mhc_allowed = m
        .judged_by
        .as_ref()
        .and_then(|k| t.conditions.get(k))
        .and_then(|c| find_condition(c, "RemediationAllowed").cloned());
    if let (Some(mhc), Some(allowed)) = (&m.judged_by, mhc_allowed)
        && allowed.status == ConditionStatus::False
    {
        held_by.push(format!("{mhc}: {}", super::build::condition_text(&allowed)));
        unblock.push(if allowed.reason == "TooManyUnhealthy" {
            format!(
                "{mhc} short-circuits remediation: fewer of its Machines must be unhealthy, or its maxUnhealthy / unhealthyRange be widened"
            )
        } else {
            format!("{mhc} remediates nothing until its spec is fixed ({})", allowed.reason)
        });
    } else {
        unblock.push(
            "remediation is under way: the owner (MachineSet) deletes the Machine, or the external remediation acts"
                .into(),
        );
    }
    Now {
        summary: "unhealthy, not deleting".into(),
        held_by,
        unblock,
    }
}

fn message_lines(c: &Condition) -> Vec<String> {
    let mut lines = vec![condition_label(c)];
    lines.extend(
        c.message
            .lines()
            .map(|l| l.trim_start_matches("* ").to_string())
            .filter(|l| !l.is_empty()),
    );
    lines
}

fn deletion_unblock(t: &Teller, deleting: &Condition, m: &MachineContext) -> Vec<String> {
    let hooks = |prefix: &str| -> Vec<String> {
        let listed: Vec<String> = m
            .hooks
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| format!("remove the annotation {k} (owner: {v}) once its owner is done"))
            .collect();
        if listed.is_empty() {
            vec![format!(
                "remove the {prefix}/* annotations named above once their owners are done"
            )]
        } else {
            listed
        }
    };
    let node = t
        .subject_object()
        .and_then(|o| match o {
            Object::Machine(m) => m.node_ref.clone(),
            _ => None,
        })
        .unwrap_or_else(|| "of the Machine".into());
    match deleting.reason.as_str() {
        r::WAITING_FOR_PRE_DRAIN_HOOK => hooks(engine::model::PRE_DRAIN_HOOK_PREFIX),
        r::WAITING_FOR_PRE_TERMINATE_HOOK => {
            hooks(engine::model::PRE_TERMINATE_HOOK_PREFIX)
        }
        r::DRAINING_NODE => deleting
            .message
            .lines()
            .filter_map(|l| l.strip_prefix("* "))
            .map(|l| drain_unblock(l, &node))
            .collect(),
        r::WAITING_FOR_VOLUME_DETACH => vec![format!(
            "the volumes listed must detach from Node {node} (their CSI driver removes the VolumeAttachments), or set spec.deletion.nodeVolumeDetachTimeoutSeconds on the Machine"
        )],
        r::WAITING_FOR_INFRASTRUCTURE_DELETION => vec![format!(
            "the infrastructure provider must finish deleting {} (it still exists: check its controller, its finalizers and the resources behind it)",
            m.infrastructure.as_deref().unwrap_or("the InfrastructureMachine")
        )],
        r::WAITING_FOR_BOOTSTRAP_DELETION => vec![format!(
            "the bootstrap provider must finish deleting {} (it still exists: check its controller and finalizers)",
            m.bootstrap.as_deref().unwrap_or("the BootstrapConfig")
        )],
        r::DELETING_NODE => vec![match &m.node_delete_refused {
            Some(answer) => format!(
                "deleting Node {node} must succeed (last answer: {answer}); it is retried until spec.deletion.nodeDeletionTimeoutSeconds"
            ),
            None => format!("deleting Node {node} must succeed"),
        }],
        r::OBJECT_UNREADABLE => vec![
            "the object named above must become readable: grant the controller get/list on its kind, or fix the object".into(),
        ],
        r::WORKLOAD_CLUSTER_UNREACHABLE => vec![t.unreachable_unblock().unwrap_or_else(|| {
            "the controller must connect to the workload cluster: fix its kubeconfig Secret <namespace>/<cluster>-kubeconfig (key \"value\") as the message above says".into()
        })],
        _ => vec!["see the message above; the controller retries on its own".into()],
    }
}

/// One line of a drain message (`Pod app/web-1: cannot evict ...`) as what would unblock it.
fn drain_unblock(line: &str, node: &str) -> String {
    let pdb = regex::Regex::new(
        r"^Pods? (\S+?)(?:,.*)?: cannot evict pod as it would violate the pod's disruption budget\. The disruption budget (\S+) needs (\d+) healthy pods and has (\d+) currently",
    )
    .expect("a valid pattern");
    if let Some(c) = pdb.captures(line) {
        let namespace = c[1].split_once('/').map_or("", |(ns, _)| ns);
        let needs: i64 = c[3].parse().unwrap_or(0);
        let has: i64 = c[4].parse().unwrap_or(0);
        return format!(
            "the PDB {namespace}/{} allows {} disruptions (needs {needs} healthy pods, has {has}): another replica must become Ready elsewhere, or the PDB be relaxed; the eviction is retried every 20s",
            &c[2],
            (has - needs).max(0)
        );
    }
    let (pods, what) = line.split_once(": ").unwrap_or((line, ""));
    if what.starts_with("deletionTimestamp set") {
        format!(
            "{pods} must finish terminating on Node {node} (the kubelet stops them; check their grace period and finalizers, and that the kubelet is up)"
        )
    } else if what == "waiting for completion" {
        format!("{pods} must run to completion (a MachineDrainRule says WaitCompleted)")
    } else if let Some(error) = what.strip_prefix("failed to evict Pod, ") {
        format!("evicting {pods} must succeed (last error: {error}); it is retried every 20s")
    } else {
        format!("the drain goes on once this is resolved: {line}")
    }
}

#[cfg(test)]
mod tests {
    use super::drain_unblock;

    #[test]
    fn a_pdb_line_names_the_budget_its_numbers_and_what_releases_it() {
        assert_eq!(
            drain_unblock(
                "Pod app/web-1: cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 2 healthy pods and has 2 currently",
                "n1"
            ),
            "the PDB app/web allows 0 disruptions (needs 2 healthy pods, has 2): another replica must become Ready elsewhere, or the PDB be relaxed; the eviction is retried every 20s"
        );
        assert_eq!(
            drain_unblock(
                "Pods app/web-0, app/web-1: deletionTimestamp set, but still not removed from the Node",
                "n1"
            ),
            "Pods app/web-0, app/web-1 must finish terminating on Node n1 (the kubelet stops them; check their grace period and finalizers, and that the kubelet is up)"
        );
    }
}
