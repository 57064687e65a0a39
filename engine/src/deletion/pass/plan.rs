//! What a pass asks of the API, as data (the pool's shape): step actions push [`Intent`]s
//! into the pass's [`Plan`], and [`Pass::apply`] issues them in order and, for each one the
//! API queue takes, records what the Machine's memory keeps of it.

use super::Pass;
use crate::command::{Action, ControllerId};
use crate::controller::Issued;
use crate::deletion::{Attempt, NodeDeletion};
use crate::drain::EvictionAttempt;
use crate::fight::HandBackWrite;
use crate::model::ObjectKey;

/// One command to issue and what to remember once it is queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Intent {
    pub action: Action,
    pub why: String,
    pub on_queued: Record,
}

/// The memo update of a queued [`Intent`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Record {
    Cordon(Attempt),
    Eviction {
        pod: ObjectKey,
        attempt: EvictionAttempt,
    },
    InfrastructureDelete(Attempt),
    BootstrapDelete(Attempt),
    NodeDeletion(NodeDeletion),
    /// An event recorded once per deletion, under this key (a folded one counts).
    Event(String),
    /// Remembered by nobody: the finalizer's removal ends the deletion.
    FinalizerRemoval,
    /// Remembered by nobody: in takeover, one of this controller's hooks removed hands the
    /// deletion back to Cluster API's manager (named, so the log says which).
    HookRemoval(&'static str),
}

impl Record {
    fn holds(&self, issued: Issued) -> bool {
        match self {
            Record::Event(_) => issued.recorded(),
            _ => matches!(issued, Issued::Queued(_)),
        }
    }
}

/// The intents of a pass, in the order they are issued.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    pub intents: Vec<Intent>,
}

impl Plan {
    pub fn push(&mut self, action: Action, why: String, on_queued: Record) {
        self.intents.push(Intent {
            action,
            why,
            on_queued,
        });
    }

    /// Whether the once-per-deletion event `once_key` is planned already.
    pub fn has_event(&self, once_key: &str) -> bool {
        self.intents
            .iter()
            .any(|i| matches!(&i.on_queued, Record::Event(k) if k == once_key))
    }
}

impl Pass<'_, '_> {
    /// Issues `action` after what is planned, so no command overtakes a planned one: for
    /// the writes that stay direct (status, conditions, the stall and drain-blocked events).
    pub(super) fn issue_now(&mut self, action: Action, why: String) -> Issued {
        self.apply();
        self.cx.issue(ControllerId::Deletion, action, why)
    }

    /// Issues the planned intents and records the memo updates of those queued.
    pub(super) fn apply(&mut self) {
        for intent in std::mem::take(&mut self.plan.intents) {
            let Intent {
                action,
                why,
                on_queued,
            } = intent;
            let target = action.target().key.name.clone();
            // Fought over, a hook's removal is what hands the Machine back: it passes the hold.
            let giving_back = match on_queued {
                Record::HookRemoval(hook)
                    if matches!(self.handing_back, Some(super::HandingBack::Fight(_))) =>
                {
                    Some(if hook == crate::ownership::OWN_PRE_DRAIN_HOOK {
                        HandBackWrite::PreDrainHook
                    } else {
                        HandBackWrite::LastHook
                    })
                }
                _ => None,
            };
            let issued = match giving_back {
                Some(write) => {
                    self.cx
                        .issue_giving_back(ControllerId::Deletion, action, why, write)
                }
                None => self.cx.issue(ControllerId::Deletion, action, why),
            };
            if !on_queued.holds(issued) {
                continue;
            }
            let memo = &mut self.tracked.memo;
            match on_queued {
                Record::Cordon(attempt) => {
                    tracing::info!(machine = %self.key, node = %target, "Cordoning Node");
                    memo.cordon = Some(attempt);
                }
                Record::Eviction { pod, attempt } => {
                    memo.evictions.insert(pod, attempt);
                }
                Record::Event(once_key) => {
                    memo.events.insert(once_key);
                }
                Record::InfrastructureDelete(attempt) => {
                    let kind = &self.m.infrastructure_ref.kind;
                    tracing::info!(machine = %self.key, "Deleting {kind} {target}");
                    memo.infrastructure_delete = Some(attempt);
                }
                Record::BootstrapDelete(attempt) => {
                    let kind = self.m.bootstrap_config_ref.as_ref().map(|r| &r.kind);
                    let kind = kind.map_or("", String::as_str);
                    tracing::info!(machine = %self.key, "Deleting {kind} {target}");
                    memo.bootstrap_delete = Some(attempt);
                }
                Record::NodeDeletion(deletion) => {
                    tracing::info!(machine = %self.key, node = %target, "Deleting node");
                    memo.node_deletion = Some(deletion);
                }
                Record::FinalizerRemoval => {
                    tracing::info!(machine = %self.key, "Deletion completed, removing finalizer");
                }
                Record::HookRemoval(hook) => {
                    tracing::info!(machine = %self.key, hook, "Handing the deletion back to Cluster API's manager, removing hook");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Target;
    use crate::controller::{Cx, Effects};
    use crate::deletion::{Memo, Tracked};
    use crate::drain::EvictionFailure;
    use crate::model::{ClusterName, Kind, Object, Scope};
    use crate::store::Store;
    use crate::testing::{
        bootstrap_config, cluster, control_plane_machine, infra_machine, machine, workload,
    };
    use crate::time::Timestamp;

    const NOW: Timestamp = Timestamp(1_000_000);

    /// The intents a pass plans for Machine default/m1 (deleting, no Node, no hooks: its
    /// infrastructure is next) when it remembers `memo`, without issuing them.
    fn planned(memo: Memo) -> Vec<Intent> {
        let mut m = machine("c1", "m1", None);
        m.provider_id = None;
        let (intents, issued) = plan_of(m, Vec::new(), memo);
        assert!(issued.is_empty(), "planning issues nothing: {issued:?}");
        intents
    }

    /// The intents the steps of a pass over `m` (made deleting) plan, and the commands the
    /// pass issued directly while planning them.
    fn plan_of(
        mut m: crate::model::Machine,
        workload_objects: Vec<Object>,
        memo: Memo,
    ) -> (Vec<Intent>, Vec<String>) {
        m.meta.deletion_timestamp = Some(Timestamp(0));
        let mut store = Store::default();
        store.replace_scope(
            &Scope::Management,
            vec![
                Object::Cluster(cluster("c1")),
                // A control plane left, so the Node may be deleted.
                Object::Machine(control_plane_machine("c1", "cp-1", Some("cp-1"))),
                Object::Machine(m.clone()),
                Object::External(infra_machine("m1")),
                Object::External(bootstrap_config("m1")),
            ],
        );
        // Listed as the intake lists a cluster with a Machine being deleted.
        let (drain, rest): (Vec<Object>, Vec<Object>) = workload_objects
            .into_iter()
            .partition(|o| Kind::DRAIN_ONLY.contains(&o.kind()));
        store.replace_scope(&workload("c1"), rest);
        for kind in Kind::DRAIN_ONLY {
            let objects = drain.iter().filter(|o| o.kind() == kind).cloned().collect();
            store.replace(&workload("c1"), Some(&kind), objects);
        }
        let key = crate::model::ObjectKey::new(
            Scope::Management,
            crate::model::Kind::Machine,
            "default",
            "m1",
        );
        let mut tracked = Tracked {
            cluster: ClusterName::new("default", "c1"),
            node: m.node_ref.clone(),
            provider_id: m.provider_id.clone(),
            infrastructure: m.infrastructure_ref.key_in("default"),
            bootstrap: m.bootstrap_config_ref.as_ref().map(|r| r.key_in("default")),
            control_plane: None,
            memo,
            pods: Default::default(),
        };
        let mut effects = Effects::default();
        let mut cx = Cx {
            now: NOW,
            store: &store,
            cause: 0,
            owner: key.clone(),
            effects: &mut effects,
        };
        let c = cluster("c1");
        let mut pass = Pass::new(&key, &m, &c, &mut tracked, &mut cx, Default::default());
        let mut pods = std::mem::take(&mut pass.tracked.pods.0);
        let (facts, found) = pass.assess(&mut pods);
        pass.plan_steps(&facts, found);
        let intents = pass.plan.intents.clone();
        let issued = std::iter::from_fn(|| effects.poll())
            .map(|c| c.action.name().to_string())
            .collect();
        (intents, issued)
    }

    fn delete_infrastructure(previous_failure: Option<&str>) -> Intent {
        let infra = infra_machine("m1");
        Intent {
            action: Action::DeleteInfrastructure {
                target: Target {
                    key: machine("c1", "m1", None)
                        .infrastructure_ref
                        .key_in("default"),
                    api_version: infra.api_version,
                },
            },
            why: "Machine m1 is being deleted and it has no Node: deleting DockerMachine m1"
                .to_string(),
            on_queued: Record::InfrastructureDelete(Attempt::Requested {
                at: NOW,
                previous_failure: previous_failure.map(str::to_string),
            }),
        }
    }

    #[test]
    fn a_machine_without_a_node_plans_the_deletion_of_its_infrastructure() {
        assert_eq!(planned(Memo::default()), [delete_infrastructure(None)]);
    }

    #[test]
    fn a_schedulable_node_is_cordoned_after_the_drain_start_is_written() {
        let m = machine("c1", "m1", Some("n1"));
        let n1 = crate::testing::node("n1");
        let (intents, issued) = plan_of(m, vec![Object::Node(n1.clone())], Memo::default());
        assert_eq!(issued, ["PatchStatus"]);
        let node_key =
            crate::model::ObjectKey::new(workload("c1"), crate::model::Kind::Node, "", "n1");
        assert_eq!(
            intents,
            [Intent {
                action: Action::Cordon {
                    node: Target {
                        key: node_key,
                        api_version: "v1".to_string(),
                    },
                },
                why: "Machine m1 is being deleted: cordoning Node n1 before draining it"
                    .to_string(),
                on_queued: Record::Cordon(Attempt::Requested {
                    at: NOW,
                    previous_failure: None,
                }),
            }]
        );
    }

    #[test]
    fn a_cordoned_node_plans_the_eviction_of_its_pod_and_a_retry_keeps_the_failure() {
        let mut n1 = crate::testing::node("n1");
        n1.unschedulable = true;
        let workload_objects = || {
            vec![
                Object::Node(n1.clone()),
                Object::Namespace(crate::testing::namespace("app")),
                Object::Pod(crate::testing::pod("app", "web-0", "n1")),
            ]
        };
        let web_0 =
            crate::model::ObjectKey::new(workload("c1"), crate::model::Kind::Pod, "app", "web-0");
        let evict = |why: &str, previous_failure: Option<&str>| Intent {
            action: Action::Evict {
                pod: Target {
                    key: web_0.clone(),
                    api_version: "v1".to_string(),
                },
                grace_period_seconds: None,
            },
            why: why.to_string(),
            on_queued: Record::Eviction {
                pod: web_0.clone(),
                attempt: EvictionAttempt::Requested {
                    at: NOW,
                    previous_failure: previous_failure.map(EvictionFailure::from),
                },
            },
        };
        let m = || machine("c1", "m1", Some("n1"));
        let (intents, _) = plan_of(m(), workload_objects(), Memo::default());
        assert_eq!(
            intents,
            [evict("draining Node n1: Machine m1 is being deleted", None)]
        );

        let mut memo = Memo::default();
        memo.evictions.insert(
            web_0.clone(),
            EvictionAttempt::Failed {
                at: Timestamp(NOW.0 - crate::drain::EVICTION_RETRY_INTERVAL.as_millis()),
                failure: "pdb".into(),
            },
        );
        let (intents, _) = plan_of(m(), workload_objects(), memo);
        assert_eq!(
            intents,
            [evict(
                "retrying eviction 20s after it failed (pdb)",
                Some("pdb")
            )]
        );
    }

    #[test]
    fn a_failed_infrastructure_deletion_is_planned_again_once_due_keeping_its_failure() {
        let failed = |at| Memo {
            infrastructure_delete: Some(Attempt::Failed {
                at,
                failure: "boom".to_string(),
            }),
            ..Memo::default()
        };
        assert_eq!(
            planned(failed(Timestamp(NOW.0 - 1))),
            [],
            "not before the retry interval"
        );
        let due = Timestamp(NOW.0 - crate::deletion::API_RETRY_INTERVAL.as_millis());
        assert_eq!(planned(failed(due)), [delete_infrastructure(Some("boom"))]);
    }
}
