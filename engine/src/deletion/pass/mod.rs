//! One deletion pass over one Machine, in three moves: the facts of every step of upstream's
//! `reconcileDelete`, in order ([`assess`]); the [`DeletionPhase`] they put the Machine in,
//! computed once; and one `match` on that phase that runs the steps' actions ([`steps`],
//! [`draining`]) — passed steps leave their conditions and events, the step that holds sets the
//! `Deleting` reason and message it shows and asks the API for what it waits on — and writes
//! what differs.

mod assess;
mod draining;
mod plan;
mod steps;
mod takeover;

use super::phase::{DeletionPhase, PhaseFacts};
use super::status::{self, DELETING, StatusFields, condition_summary, reason, set_condition};
use super::{
    API_RETRY_INTERVAL, Attempt, DeletionTimer, PHASE_STALL_WARNING_AFTER, Pending, Phase, Tracked,
};
use crate::command::{Action, ControllerId, EventType, Target};
use crate::controller::{Cx, Issued};
use crate::drain;
use crate::model::{
    Cluster, Condition, ConditionStatus, Conditions, Kind, MACHINE_FINALIZER, Machine,
    MachineDrainRule, Node, Object, ObjectKey, Scope,
};
use crate::store::Store;
use crate::time::Timestamp;
use assess::{Findings, NodeOutcome};
use plan::{Plan, Record};
use std::borrow::Cow;

pub(super) struct Pass<'p, 'a> {
    key: &'p ObjectKey,
    m: &'a Machine,
    cluster: &'a Cluster,
    store: &'a Store,
    scope: Scope,
    tracked: &'p mut Tracked,
    cx: &'p mut Cx<'a>,
    now: Timestamp,
    target: Target,
    /// What is observed (borrowed from the Machine) or stands for it (a write in flight).
    base_conditions: Cow<'a, Conditions>,
    conditions: Conditions,
    /// The conditions this pass set (a report of what it decided, [`crate::decision`]).
    set: Conditions,
    base_status: StatusFields,
    status: StatusFields,
    /// The `Deleting` reason and message; `None` keeps what is observed (a Node deletion in
    /// flight shows nothing new until it is answered).
    deleting: Option<(&'static str, String)>,
    /// The clock-driven changes this pass knows of: (timer, when, the object it is about
    /// when not the Machine).
    pub wakes: Vec<(DeletionTimer, Timestamp, Option<ObjectKey>)>,
    /// The Node's key and object, looked up once: drain, volume wait and Node deletion all
    /// need them.
    /// The Node's name and, when it exists, its stored key and object.
    node_seen: Option<(&'a str, Option<(&'a ObjectKey, &'a Node)>)>,
    /// A condition write of this Machine is unanswered: nothing is written until its answer
    /// reconciles the Machine again, so messages that only feed conditions are not built.
    conditions_in_flight: bool,
    /// The commands the steps ask for, issued by [`Pass::apply`].
    plan: Plan,
    /// Beside CAPI's manager, holding it at this controller's hooks ([`takeover`]).
    takeover: bool,
    /// The steps after the volume detach wait are CAPI's to reach first (takeover, while this
    /// controller's pre-drain hook holds it).
    stop_after_volumes: bool,
    /// Taken over, why this deletion is handed back as it ends ([`takeover`]).
    pub handing_back: Option<HandingBack>,
}

/// Why a takeover hands back a deletion it holds, as the unsupported release stops it: it
/// finishes what it started (never a Node half drained) and hands the Machine back with its
/// last hook, saying so in its condition and an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandingBack {
    /// Cluster API's manager runs this release, which this build does not support.
    Release(String),
    /// Another writer keeps undoing this controller's writes to the Machine (the hold's
    /// signs): only the writes that hand it back pass the hold ([`crate::fight`]).
    Fight(String),
}

/// Whether a request of this kind may be (re)issued now: never while one is in flight, at once
/// when none was made or its answer was lost, otherwise after [`API_RETRY_INTERVAL`].
fn attempt_due(attempt: &Option<Attempt>, in_flight: bool, now: Timestamp) -> bool {
    match attempt {
        None => true,
        Some(_) if in_flight => false,
        Some(a) if !a.is_answered() => true,
        Some(a) => now >= a.at().saturating_add(API_RETRY_INTERVAL),
    }
}

impl<'p, 'a> Pass<'p, 'a> {
    pub fn new(
        key: &'p ObjectKey,
        m: &'a Machine,
        cluster: &'a Cluster,
        tracked: &'p mut Tracked,
        cx: &'p mut Cx<'a>,
        ownership: crate::ownership::Ownership,
    ) -> Self {
        let takeover = ownership == crate::ownership::Ownership::Takeover;
        let store: &'a Store = cx.store;
        let now = cx.now;
        let scope = Scope::Workload(tracked.cluster.clone());
        let mut base_conditions = Cow::Borrowed(&m.conditions);
        let mut base_status = StatusFields {
            phase: m.phase.clone(),
            deletion: m.deletion.clone(),
            node_ref: m.node_ref.clone().map(|n| (n, String::new())),
        };
        let rv = m.meta.resource_version;
        let memo = &mut tracked.memo;
        let stands = memo
            .pending_conditions
            .as_mut()
            .is_some_and(|p| p.stands(&base_conditions, rv));
        match (&memo.pending_conditions, stands) {
            (Some(p), true) => base_conditions = Cow::Owned(p.value.clone()),
            _ => memo.pending_conditions = None,
        }
        let stands = memo
            .pending_status
            .as_mut()
            .is_some_and(|p| p.stands(&base_status, rv));
        match (&memo.pending_status, stands) {
            (Some(p), true) => base_status = p.value.clone(),
            _ => memo.pending_status = None,
        }
        let mut status = base_status.clone();
        status.phase = Some("Deleting".to_string());
        if takeover {
            // CAPI's manager writes these times for its own steps: this controller's live in
            // its memory (and the drain's start in its own condition).
            status.deletion = takeover::own_start_times(m, &tracked.memo.started);
        }
        let (d, memo) = (&mut status.deletion, &tracked.memo.started);
        d.node_drain_start = d.node_drain_start.or(memo.node_drain_start);
        d.wait_for_node_volume_detach_start = d
            .wait_for_node_volume_detach_start
            .or(memo.wait_for_node_volume_detach_start);
        d.wait_for_pre_drain_hook_start = d
            .wait_for_pre_drain_hook_start
            .or(memo.wait_for_pre_drain_hook_start);
        d.wait_for_pre_terminate_hook_start = d
            .wait_for_pre_terminate_hook_start
            .or(memo.wait_for_pre_terminate_hook_start);
        let mut conditions = Conditions::clone(&base_conditions);
        if !takeover {
            let unobserved = &tracked.memo.unobserved;
            for c in &unobserved.current {
                crate::decision::put(&mut conditions.current, c.clone());
            }
            for c in &unobserved.legacy {
                crate::decision::put(&mut conditions.legacy, c.clone());
            }
        }
        // Another controller's condition write (the MHC's) brings this Machine back too.
        let conditions_in_flight =
            cx.wait_if_in_flight(ControllerId::Deletion, crate::ActionKind::SetCondition, key);
        Pass {
            key,
            m,
            cluster,
            store,
            scope,
            tracked,
            cx,
            now,
            target: Target::capi(key.clone(), m.version),
            conditions,
            set: Conditions::default(),
            base_conditions,
            base_status,
            status,
            deleting: None,
            wakes: Vec::new(),
            node_seen: None,
            conditions_in_flight,
            plan: Plan::default(),
            takeover,
            stop_after_volumes: false,
            handing_back: None,
        }
    }

    pub fn run(&mut self) {
        // The pod cache leaves `tracked` for the pass: the drain plan borrows its keys.
        let mut pods = std::mem::take(&mut self.tracked.pods.0);
        let (facts, found) = self.assess(&mut pods);
        let phase = DeletionPhase::of(&facts);
        tracing::trace!(machine = %self.key, ?phase, "deletion phase");
        self.act(phase, &facts, found);
        self.tracked.pods.0 = pods;
    }

    fn act(&mut self, phase: DeletionPhase, facts: &PhaseFacts, found: Findings<'_>) {
        self.set_deleting(reason::DELETING, "Deletion started");
        match phase {
            DeletionPhase::Released => {}
            DeletionPhase::WaitingForWorkloadCache => {
                // A cluster that cannot be reached may keep the deletion waiting for long: the
                // Machine says why, and what to fix.
                if let Some(why) = self.store.unreachable(&self.scope) {
                    self.wait_for_workload_cluster(why);
                    self.flush(phase);
                // Once the cluster's Nodes are listed, the phase is news while the drain kinds
                // are listed (their watches start with this deletion). The conditions wait for
                // the drain: a condition write in flight would hold back the drain's first one.
                // Before the cluster's first relist nothing is written: the relist reconciles
                // this Machine again.
                } else if self.store.is_synced(&self.scope) {
                    let cluster = &self.tracked.cluster.name;
                    tracing::debug!(machine = %self.key, %cluster, "waiting for the drain kinds to be listed");
                    self.flush_status();
                } else {
                    self.connected_not_synced();
                }
            }
            DeletionPhase::WaitingForReadable => {
                self.report_invalid_timeouts();
                if let Some((key, problem)) = &found.unreadable {
                    self.wait_for_readable(key, problem);
                    // The Machine's own status is not written from a reading it distrusts.
                    if key != self.key {
                        self.flush(phase);
                    }
                }
            }
            DeletionPhase::RemovingFinalizer if !self.takeover => {
                self.report_invalid_timeouts();
                self.run_steps(facts, found);
                self.set_deleting(reason::DELETION_COMPLETED, "Deletion completed");
                self.flush(phase);
                self.remove_finalizer();
            }
            // Taken over, the finalizer is CAPI's: the last step hands back a hook instead.
            DeletionPhase::WaitingForPreDrainHooks
            | DeletionPhase::Draining
            | DeletionPhase::WaitingForVolumeDetach
            | DeletionPhase::WaitingForPreTerminateHooks
            | DeletionPhase::DeletingInfrastructure
            | DeletionPhase::DeletingBootstrap
            | DeletionPhase::DeletingNode
            | DeletionPhase::RemovingFinalizer => {
                self.report_invalid_timeouts();
                if self.takeover {
                    self.act_taken_over(phase, facts, found);
                } else {
                    self.run_steps(facts, found);
                }
                self.flush(phase);
            }
        }
        self.apply();
    }

    /// Every step's action up to the one that holds (the steps after it were not reached and
    /// have nothing to act on), then what they asked of the API.
    fn run_steps(&mut self, facts: &PhaseFacts, found: Findings<'_>) {
        self.plan_steps(facts, found);
    }

    fn plan_steps(&mut self, facts: &PhaseFacts, found: Findings<'_>) {
        let node_outcome = found.node_outcome();
        let node = found.node.ok();
        self.pre_drain_hooks(facts.pre_drain_hooks);
        if let (Some(node), Some(drain)) = (&node, found.drain) {
            self.drain(node, drain);
        }
        if let (Some(node), Some(volumes)) = (&node, found.volumes) {
            self.volume_detach(node, volumes);
        }
        if self.stop_after_volumes {
            return;
        }
        self.pre_terminate_hooks(facts.pre_terminate_hooks);
        self.infrastructure(facts.infrastructure, node_outcome);
        self.bootstrap(facts.bootstrap);
        if let (Some(node), Some(deletion)) = (&node, found.node_deletion) {
            self.delete_node(node, deletion);
        }
    }

    fn remove_finalizer(&mut self) {
        if self.conditions != self.m.conditions {
            // Upstream writes `DeletionCompleted` before the finalizer goes: wait until the
            // condition write has landed (its answer reconciles this Machine again).
            return;
        }
        self.plan.push(
            Action::RemoveFinalizer {
                target: self.target.clone(),
                finalizer: MACHINE_FINALIZER.to_string(),
            },
            format!(
                "deletion of Machine {} completed: releasing finalizer {MACHINE_FINALIZER}",
                self.m.meta.name
            ),
            Record::FinalizerRemoval,
        );
    }

    fn set_deleting(&mut self, reason: &'static str, message: impl Into<String>) {
        self.deleting = Some((reason, message.into()));
    }

    fn set_legacy(&mut self, c: Condition) {
        let type_ = c.type_.clone();
        set_condition(&mut self.conditions.legacy, c, self.now);
        if let Some(c) = self.conditions.legacy(&type_) {
            crate::decision::put(&mut self.set.legacy, c.clone());
        }
    }

    /// Reports what this pass decided and keeps what the Machine does not show yet, for the
    /// passes after it.
    fn decided(&mut self) {
        let observed = &self.m.conditions;
        let unobserved = &mut self.tracked.memo.unobserved;
        for c in &self.set.current {
            crate::decision::put(&mut unobserved.current, c.clone());
        }
        for c in &self.set.legacy {
            crate::decision::put(&mut unobserved.legacy, c.clone());
        }
        unobserved
            .current
            .retain(|c| observed.current(&c.type_) != Some(c));
        unobserved
            .legacy
            .retain(|c| observed.legacy(&c.type_) != Some(c));
        // What a write in flight carries is not waiting on this pass.
        self.tracked.memo.carried(&self.base_conditions);
        let set = std::mem::take(&mut self.set);
        self.cx
            .decide(ControllerId::Deletion, self.key.clone(), set);
    }

    fn legacy_exists(&self, type_: &str) -> bool {
        self.conditions.legacy(type_).is_some()
    }

    fn wake_at(&mut self, at: Timestamp, timer: DeletionTimer, about: Option<&ObjectKey>) {
        self.wakes.push((timer, at, about.cloned()));
    }

    /// Writes the status fields and conditions that differ from what is observed (taken
    /// over: only this controller's own condition).
    fn flush(&mut self, phase: DeletionPhase) {
        self.watch_phase(phase);
        if self.takeover {
            self.flush_own_condition();
            return;
        }
        self.flush_status();
        self.flush_conditions();
    }

    /// Writes `status.phase`, `status.deletion.*` and `status.nodeRef` where they differ.
    fn flush_status(&mut self) {
        // Taken over, status is CAPI's manager's to write.
        if self.takeover
            || self.status == self.base_status
            || self.cx.wait_if_in_flight(
                ControllerId::Deletion,
                crate::ActionKind::PatchStatus,
                self.key,
            )
        {
            return;
        }
        if let Some((merge, summary)) =
            status::status_patch(self.m.version, &self.base_status, &self.status)
        {
            let issued = self.issue_now(
                Action::PatchStatus {
                    target: self.target.clone(),
                    merge,
                    summary,
                },
                format!("Machine {} is being deleted", self.m.meta.name),
            );
            if let Issued::Queued(_) = issued {
                self.base_status = self.status.clone();
                self.tracked.memo.pending_status = Some(Pending::new(self.status.clone()));
            }
        }
    }

    fn flush_conditions(&mut self) {
        if let Some((reason, message)) = &self.deleting {
            let c = Condition::new(DELETING, ConditionStatus::True, reason, message);
            set_condition(&mut self.conditions.current, c, self.now);
            // With a condition write out, its message was not built: no decision of this pass.
            if let Some(c) = self
                .conditions
                .current(DELETING)
                .filter(|_| !self.conditions_in_flight)
            {
                crate::decision::put(&mut self.set.current, c.clone());
            }
        }
        self.decided();
        if self.conditions != *self.base_conditions {
            // Same outcome as `issue` answering `InFlight`, without the summary and the clone.
            if self.cx.wait_if_in_flight(
                ControllerId::Deletion,
                crate::ActionKind::SetCondition,
                self.key,
            ) {
                return;
            }
            let summary = condition_summary(&self.base_conditions, &self.conditions);
            let why = match &self.deleting {
                // The whole message: for a drain it lists the pods that hold it and why.
                Some((_, message)) => message.clone(),
                None => "deletion in progress".to_string(),
            };
            let issued = self.issue_now(
                Action::SetCondition {
                    target: self.target.clone(),
                    conditions: self.conditions.clone(),
                    summary,
                },
                why,
            );
            if let Issued::Queued(_) = issued {
                self.base_conditions = Cow::Owned(self.conditions.clone());
                self.tracked.memo.pending_conditions = Some(Pending::new(self.conditions.clone()));
            }
        }
        // Observed, or carried by the write just queued or one in flight.
        self.tracked.memo.carried(&self.base_conditions);
    }

    /// Records a Kubernetes Event once per deletion (events mark transitions).
    fn event(&mut self, type_: EventType, reason: &str, message: String, once_key: String) {
        if self.tracked.memo.events.contains(&once_key) || self.plan.has_event(&once_key) {
            return;
        }
        self.plan.push(
            Action::RecordEvent {
                regarding: self.target.clone(),
                type_,
                reason: reason.to_string(),
                message: message.clone(),
            },
            message,
            Record::Event(once_key),
        );
    }

    /// Follows the phase the pass found the deletion in; one that lasts
    /// [`PHASE_STALL_WARNING_AFTER`] gets a Warning event saying what holds it, once.
    fn watch_phase(&mut self, current: DeletionPhase) {
        let Some((reason, message)) = self.deleting.clone() else {
            return;
        };
        let now = self.now;
        let memo = &mut self.tracked.memo.phase;
        let (since, stall_reported) = match memo {
            Some(p) if p.phase == current => (p.since, p.stall_reported),
            _ => {
                *memo = Some(Phase {
                    phase: current,
                    since: now,
                    stall_reported: false,
                });
                (now, false)
            }
        };
        let Some(event) = current.stall_event() else {
            return;
        };
        let due = since.saturating_add(PHASE_STALL_WARNING_AFTER);
        if stall_reported {
            return;
        }
        if now < due {
            self.wake_at(due, DeletionTimer::PhaseStalled, None);
            return;
        }
        let waited = now.since(since);
        let text = format!(
            "Machine {} has been in {reason} for {}: {}",
            self.m.meta.name,
            waited,
            message.replace('\n', " ")
        );
        let issued = self.issue_now(
            Action::RecordEvent {
                regarding: self.target.clone(),
                type_: EventType::Warning,
                reason: event.to_string(),
                message: text.clone(),
            },
            text,
        );
        if issued.recorded()
            && let Some(phase) = &mut self.tracked.memo.phase
        {
            phase.stall_reported = true;
        }
    }

    /// The start time of a phase: observed, or chosen by this controller, or now.
    fn start(
        &mut self,
        field: impl Fn(&mut crate::model::DeletionTimes) -> &mut Option<Timestamp>,
    ) -> Timestamp {
        let now = self.now.to_api_precision();
        let at = *field(&mut self.status.deletion).get_or_insert(now);
        field(&mut self.tracked.memo.started).get_or_insert(at);
        at
    }

    fn node(&mut self, name: &str) -> Option<&'a Node> {
        self.node_entry(name).map(|(_, n)| n)
    }

    /// The key of an existing Node (callers looked it up first).
    fn node_key(&mut self, name: &str) -> ObjectKey {
        match self.node_entry(name) {
            Some((key, _)) => key.clone(),
            None => ObjectKey::new(self.scope.clone(), Kind::Node, "", name),
        }
    }

    /// Looked up once per pass, without building a key.
    fn node_entry(&mut self, name: &str) -> Option<(&'a ObjectKey, &'a Node)> {
        if let Some((seen, entry)) = self.node_seen
            && seen == name
        {
            return entry;
        }
        let store: &'a Store = self.store;
        let entry = match store.get_parts(&self.scope, &Kind::Node, "", name) {
            Some((key, Object::Node(n))) => Some((key, n)),
            _ => None,
        };
        let name: &'a str = match entry {
            Some((key, _)) => &key.name,
            None => return None,
        };
        self.node_seen = Some((name, entry));
        entry
    }

    fn drain_rules(&self) -> Result<Vec<&'a MachineDrainRule>, drain::DrainRuleError> {
        let ns = &self.m.meta.namespace;
        let rules = self
            .store
            .iter_kind(&Scope::Management, &Kind::MachineDrainRule)
            .filter_map(|(k, o)| match o {
                Object::MachineDrainRule(r) if &k.namespace == ns => Some(r),
                _ => None,
            });
        drain::matching_drain_rules(rules, &self.m.meta.labels, &self.cluster.meta.labels)
    }
}

#[derive(Clone, Copy)]
enum ExternalRole {
    /// With what became of the Machine's Node, for the deletion's reason.
    Infrastructure(NodeOutcome),
    Bootstrap,
}
