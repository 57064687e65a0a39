//! One deletion pass over one Machine: the phases of upstream's `reconcileDelete`, in order.
//! Each phase either lets the pass continue or stops it (waiting for the world), after setting
//! the `Deleting` reason and message it shows.

use super::gates::{self, ControlPlaneFact, InfrastructureFact, NodeDeletionFacts, WaitGateFacts};
use super::pods::CachedPod;
use super::status::{
    self, DELETING, StatusFields, condition_summary, legacy, legacy_false, legacy_true, reason,
    set_condition,
};
use super::volumes::volumes_to_wait_for;
use super::{
    API_RETRY_INTERVAL, Attempt, DeletionTimer, NodeDeletion, NodeDeletionOutcome,
    PHASE_STALL_WARNING_AFTER, Pending, Phase, Tracked,
};
use crate::command::{Action, ControllerId, EventType, Target};
use crate::controller::{Cx, Issued};
use crate::drain::{
    self, DrainBehavior, DrainContext, DrainPlan, EvictionAttempt, EvictionOutcome,
};
use crate::model::{
    ApiVersion, Cluster, Condition, ConditionStatus, Conditions, EXCLUDE_DRAIN_ANNOTATION,
    EXCLUDE_VOLUME_DETACH_ANNOTATION, Kind, MACHINE_FINALIZER, Machine, MachineDrainRule, Node,
    Object, ObjectKey, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, Scope, Severity,
};
use crate::store::Store;
use crate::time::Timestamp;
use std::borrow::Cow;
use std::collections::BTreeSet;

/// Whether the pass goes on to the next phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Wait,
}

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
    ) -> Self {
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
        // Another controller's condition write (the MHC's) brings this Machine back too.
        let conditions_in_flight =
            cx.wait_if_in_flight(ControllerId::Deletion, "SetCondition", key);
        Pass {
            key,
            m,
            cluster,
            store,
            scope,
            tracked,
            cx,
            now,
            target: Target {
                key: key.clone(),
                api_version: m.version.capi().to_string(),
            },
            conditions: Conditions::clone(&base_conditions),
            base_conditions,
            base_status,
            status,
            deleting: None,
            wakes: Vec::new(),
            node_seen: None,
            conditions_in_flight,
        }
    }

    pub fn run(&mut self) {
        if self.tracked.memo.finalizer_released {
            return;
        }
        self.set_deleting(reason::DELETING, "Deletion started");
        let needs_workload = !self.cluster.meta.is_deleting()
            && (self.m.node_ref.is_some() || self.provider_id().is_some());
        if needs_workload && !self.store.is_synced(&self.scope) {
            // Node operations (and the providerID lookup) need the workload cluster's cache.
            tracing::debug!(machine = %self.key, "waiting for the workload cluster cache to sync");
            return;
        }
        let node = self.node_deletion_allowed();
        if node.is_ok() && !self.store.is_synced(&self.scope) {
            // A Node or pod missing from an unsynced cache proves nothing: wait for the relist.
            // Nothing is written either: the relist reconciles this Machine again.
            tracing::debug!(machine = %self.key, "waiting for the workload cluster cache to sync");
            return;
        }
        self.report_invalid_timeouts();
        if let Some((key, problem)) = self.unreadable_dependency() {
            self.wait_for_readable(&key, &problem);
            // The Machine's own status is not written from a reading it distrusts.
            if key != *self.key {
                self.flush();
            }
            return;
        }
        if let Ok(node) = &node
            && (self.pre_drain_hooks() == Flow::Wait
                || self.drain(node) == Flow::Wait
                || self.volume_detach(node) == Flow::Wait)
        {
            return self.flush();
        }
        if self.pre_terminate_hooks() == Flow::Wait
            || self.infrastructure() == Flow::Wait
            || self.bootstrap() == Flow::Wait
        {
            return self.flush();
        }
        if let Ok(node) = &node
            && self.delete_node(node) == Flow::Wait
        {
            return self.flush();
        }
        self.set_deleting(reason::DELETION_COMPLETED, "Deletion completed");
        self.flush();
        if self.conditions != self.m.conditions {
            // Upstream writes `DeletionCompleted` before the finalizer goes: wait until the
            // condition write has landed (its answer reconciles this Machine again).
            return;
        }
        let issued = self.cx.issue(
            ControllerId::Deletion,
            Action::RemoveFinalizer {
                target: self.target.clone(),
                finalizer: MACHINE_FINALIZER.to_string(),
            },
            format!(
                "deletion of Machine {} completed: releasing finalizer {MACHINE_FINALIZER}",
                self.m.meta.name
            ),
        );
        if let Issued::Queued(_) = issued {
            tracing::info!(machine = %self.key, "Deletion completed, removing finalizer");
        }
    }

    // ---- status ----

    fn set_deleting(&mut self, reason: &'static str, message: impl Into<String>) {
        self.deleting = Some((reason, message.into()));
    }

    fn set_legacy(&mut self, c: Condition) {
        set_condition(&mut self.conditions.legacy, c, self.now);
    }

    fn legacy_exists(&self, type_: &str) -> bool {
        self.conditions.legacy(type_).is_some()
    }

    fn wake_at(&mut self, at: Timestamp, timer: DeletionTimer, about: Option<&ObjectKey>) {
        self.wakes.push((timer, at, about.cloned()));
    }

    /// Writes the status fields and conditions that differ from what is observed.
    fn flush(&mut self) {
        self.watch_phase();
        self.flush_status();
        self.flush_conditions();
    }

    /// Writes `status.phase`, `status.deletion.*` and `status.nodeRef` where they differ.
    fn flush_status(&mut self) {
        if self.status == self.base_status
            || self
                .cx
                .wait_if_in_flight(ControllerId::Deletion, "PatchStatus", self.key)
        {
            return;
        }
        if let Some((merge, summary)) =
            status::status_patch(self.m.version, &self.base_status, &self.status)
        {
            let issued = self.cx.issue(
                ControllerId::Deletion,
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
        }
        if self.conditions != *self.base_conditions {
            // Same outcome as `issue` answering `InFlight`, without the summary and the clone.
            if self
                .cx
                .wait_if_in_flight(ControllerId::Deletion, "SetCondition", self.key)
            {
                return;
            }
            let summary = condition_summary(&self.base_conditions, &self.conditions);
            let why = match &self.deleting {
                // The whole message: for a drain it lists the pods that hold it and why.
                Some((_, message)) => message.clone(),
                None => "deletion in progress".to_string(),
            };
            let issued = self.cx.issue(
                ControllerId::Deletion,
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
    }

    /// Records a Kubernetes Event once per deletion (events mark transitions).
    fn event(&mut self, type_: EventType, reason: &str, message: String, once_key: String) {
        if self.tracked.memo.events.contains(&once_key) {
            return;
        }
        let issued = self.cx.issue(
            ControllerId::Deletion,
            Action::RecordEvent {
                regarding: self.target.clone(),
                type_,
                reason: reason.to_string(),
                message: message.clone(),
            },
            message,
        );
        if issued.recorded() {
            self.tracked.memo.events.insert(once_key);
        }
    }

    /// Follows the phase the `Deleting` condition names; one that lasts
    /// [`PHASE_STALL_WARNING_AFTER`] gets a Warning event saying what holds it, once.
    fn watch_phase(&mut self) {
        let Some((reason, message)) = self.deleting.clone() else {
            return;
        };
        let now = self.now;
        let phase = self.tracked.memo.phase.get_or_insert_with(|| Phase {
            reason: reason.to_string(),
            since: now,
            stall_reported: false,
        });
        if phase.reason != reason {
            *phase = Phase {
                reason: reason.to_string(),
                since: now,
                stall_reported: false,
            };
        }
        let Some(event) = stall_event(reason) else {
            return;
        };
        let due = phase.since.saturating_add(PHASE_STALL_WARNING_AFTER);
        if phase.stall_reported {
            return;
        }
        if now < due {
            self.wake_at(due, DeletionTimer::PhaseStalled, None);
            return;
        }
        let waited = now.since(phase.since);
        let text = format!(
            "Machine {} has been in {reason} for {}: {}",
            self.m.meta.name,
            waited,
            message.replace('\n', " ")
        );
        let issued = self.cx.issue(
            ControllerId::Deletion,
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

    /// A Warning event when a drain's evictions are refused by a PodDisruptionBudget (once
    /// per round of eviction attempts; repeats join one Event's count).
    fn report_blocked_drain(&mut self, node_name: &str, plan: &DrainPlan<'_>) {
        let Some((blocked, pods)) = drain::blocked_by_disruption_budget(plan) else {
            return;
        };
        let latest = pods
            .iter()
            .filter_map(|k| self.tracked.memo.evictions.get(*k).map(|a| a.at))
            .max();
        if latest.is_none() || latest <= self.tracked.memo.drain_blocked_reported {
            return;
        }
        let message = format!(
            "Drain of Node {node_name} (Machine {}) is blocked by a PodDisruptionBudget: {blocked}",
            self.m.meta.name
        );
        let issued = self.cx.issue(
            ControllerId::Deletion,
            Action::RecordEvent {
                regarding: self.target.clone(),
                type_: EventType::Warning,
                reason: "DrainBlocked".to_string(),
                message: message.clone(),
            },
            message,
        );
        if issued.recorded() {
            self.tracked.memo.drain_blocked_reported = latest;
        }
    }

    /// A negative drain, volume detach or Node deletion timeout is an invalid spec (upstream's
    /// webhook rejects it): it times nothing (no wait is cut short, no Node deletion given up),
    /// and a Warning event says so once.
    fn report_invalid_timeouts(&mut self) {
        let v1beta2 = self.m.version == ApiVersion::V1Beta2;
        let fields = [
            (self.m.node_drain_timeout, "nodeDrainTimeout"),
            (self.m.node_volume_detach_timeout, "nodeVolumeDetachTimeout"),
            (self.m.node_deletion_timeout, "nodeDeletionTimeout"),
        ];
        for (value, name) in fields {
            let Some(value) = value.filter(|v| *v < crate::time::Duration::ZERO) else {
                continue;
            };
            let field = if v1beta2 {
                format!("spec.deletion.{name}Seconds")
            } else {
                format!("spec.{name}")
            };
            let message = format!(
                "{field} is {value}: a negative timeout is invalid and times nothing (no wait is cut short, no Node deletion given up)"
            );
            self.event(
                EventType::Warning,
                "InvalidTimeout",
                message,
                format!("InvalidTimeout:{field}"),
            );
        }
    }

    // ---- unknown objects ----

    /// The first object this deletion decides on that the API shows but the controllers
    /// cannot read: the Machine, its Cluster, Node, provider objects and control plane.
    fn unreadable_dependency(&self) -> Option<(ObjectKey, String)> {
        let store = self.store;
        if !store.has_unreadable() {
            return None;
        }
        let cluster = ObjectKey::management(
            Kind::Cluster,
            &self.cluster.meta.namespace,
            &self.cluster.meta.name,
        );
        let node = self
            .tracked
            .node
            .as_ref()
            .map(|n| ObjectKey::new(self.scope.clone(), Kind::Node, "", n));
        let t = &*self.tracked;
        [
            Some(self.key.clone()),
            Some(cluster),
            node,
            Some(t.infrastructure.clone()),
        ]
        .into_iter()
        .chain([t.bootstrap.clone(), t.control_plane.clone()])
        .flatten()
        .find_map(|k| store.unreadable(&k).map(|p| (k.clone(), p.to_string())))
    }

    /// A pod the drain of `node_name` cannot judge: unreadable, and last seen on that Node or
    /// never read at all (it may be on it).
    fn unreadable_pod(&self, node_name: &str) -> Option<(ObjectKey, String)> {
        let store = self.store;
        if !store.has_unreadable() {
            return None;
        }
        store
            .unreadable_of_kind(&self.scope, &Kind::Pod)
            .find(|(k, _)| match store.get(k) {
                Some(Object::Pod(p)) => p.node_name.as_deref() == Some(node_name),
                _ => true,
            })
            .map(|(k, p)| (k.clone(), p.to_string()))
    }

    /// Stops the pass until `key` reads again: the `Deleting` condition and a Warning event
    /// say which object and what is wrong with it.
    fn wait_for_readable(&mut self, key: &ObjectKey, problem: &str) {
        let message = format!(
            "{}; the deletion waits until it can be read",
            crate::store::unreadable_message(key, problem)
        );
        tracing::warn!(machine = %self.key, "{message}");
        self.event(
            EventType::Warning,
            reason::OBJECT_UNREADABLE,
            message.clone(),
            format!("ObjectUnreadable:{key}:{problem}"),
        );
        self.set_deleting(reason::OBJECT_UNREADABLE, message);
    }

    // ---- isDeleteNodeAllowed ----

    fn node_deletion_allowed(&mut self) -> Result<String, gates::NodeDeletionBlocked> {
        let cluster_deleting = self.cluster.meta.is_deleting();
        let mut node_name = self.m.node_ref.clone();
        if !cluster_deleting && node_name.is_none() {
            node_name = self.node_by_provider_id();
        }
        self.tracked.node = node_name.clone();
        self.tracked.provider_id = self.provider_id();
        let control_plane = match &self.tracked.control_plane {
            None => ControlPlaneFact::Absent,
            Some(key) => match self.store.get(key) {
                None => ControlPlaneFact::Absent,
                Some(o) if o.meta().is_deleting() => ControlPlaneFact::Deleting,
                Some(Object::External(e)) if e.external_managed_control_plane => {
                    ControlPlaneFact::ExternallyManaged
                }
                Some(_) => ControlPlaneFact::Managed,
            },
        };
        let facts = NodeDeletionFacts {
            cluster_deleting,
            has_node_ref: node_name.is_some(),
            control_plane,
            active_control_plane_machines: self.active_control_plane_machines(),
        };
        let verdict = gates::is_delete_node_allowed(&facts);
        match (verdict, node_name) {
            (Ok(()), Some(name)) => Ok(name),
            (Ok(()), None) => Err(gates::NodeDeletionBlocked::NilNodeRef),
            (Err(blocked), _) => {
                tracing::debug!(machine = %self.key, "Skipping node deletion: {blocked}");
                Err(blocked)
            }
        }
    }

    fn provider_id(&self) -> Option<String> {
        self.m
            .provider_id
            .clone()
            .or_else(|| match self.store.get(&self.tracked.infrastructure) {
                Some(Object::External(e)) => e.provider_id.clone(),
                _ => None,
            })
    }

    /// Upstream's best-effort lookup of the Node by providerID when `status.nodeRef` is unset.
    fn node_by_provider_id(&mut self) -> Option<String> {
        let provider_id = self.provider_id()?;
        let key = self
            .store
            .nodes_by_provider_id(&self.scope, &provider_id)
            .next()?
            .clone();
        let uid = self
            .store
            .get(&key)
            .map(|o| o.meta().uid.clone())
            .unwrap_or_default();
        self.status.node_ref = Some((key.name.to_string(), uid));
        Some(key.name.to_string())
    }

    fn active_control_plane_machines(&self) -> usize {
        let c = &self.cluster.meta;
        self.store
            .active_control_plane_machines(&c.namespace, &c.name)
    }

    // ---- hooks ----

    fn hooks(&self, prefix: &str) -> Vec<&'a str> {
        self.m
            .meta
            .annotations
            .keys()
            .filter(|k| k.starts_with(prefix))
            .map(String::as_str)
            .collect()
    }

    fn pre_drain_hooks(&mut self) -> Flow {
        let hooks = self.hooks(PRE_DRAIN_HOOK_PREFIX);
        if hooks.is_empty() {
            self.set_legacy(legacy_true(legacy::PRE_DRAIN_DELETE_HOOK_SUCCEEDED));
            return Flow::Continue;
        }
        let start = self.start(|d| &mut d.wait_for_pre_drain_hook_start);
        tracing::debug!(machine = %self.key, since = %start, "Waiting for pre-drain hooks to succeed");
        self.set_legacy(legacy_false(
            legacy::PRE_DRAIN_DELETE_HOOK_SUCCEEDED,
            legacy::WAITING_EXTERNAL_HOOK,
            Severity::Info,
            "",
        ));
        self.set_deleting(
            reason::WAITING_FOR_PRE_DRAIN_HOOK,
            format!(
                "Waiting for pre-drain hooks to succeed (hooks: {})",
                hooks.join(",")
            ),
        );
        Flow::Wait
    }

    fn pre_terminate_hooks(&mut self) -> Flow {
        let hooks = self.hooks(PRE_TERMINATE_HOOK_PREFIX);
        if hooks.is_empty() {
            self.set_legacy(legacy_true(legacy::PRE_TERMINATE_DELETE_HOOK_SUCCEEDED));
            return Flow::Continue;
        }
        self.start(|d| &mut d.wait_for_pre_terminate_hook_start);
        self.set_legacy(legacy_false(
            legacy::PRE_TERMINATE_DELETE_HOOK_SUCCEEDED,
            legacy::WAITING_EXTERNAL_HOOK,
            Severity::Info,
            "",
        ));
        self.set_deleting(
            reason::WAITING_FOR_PRE_TERMINATE_HOOK,
            format!(
                "Waiting for pre-terminate hooks to succeed (hooks: {})",
                hooks.join(",")
            ),
        );
        Flow::Wait
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

    // ---- drain ----

    fn infrastructure_fact(&self) -> InfrastructureFact {
        let key = &self.tracked.infrastructure;
        match self.store.get(key) {
            None if self.store.seen_gone(key, self.key) => InfrastructureFact::Gone,
            // Not in the cache yet is not gone: nothing is skipped on that guess.
            None => InfrastructureFact::Present,
            Some(o) if o.meta().is_deleting() => InfrastructureFact::Deleting,
            Some(_) => InfrastructureFact::Present,
        }
    }

    fn wait_gate(
        &self,
        exclude_annotation: &str,
        start: Option<Timestamp>,
        timeout: Option<crate::time::Duration>,
    ) -> Result<(), gates::WaitSkipped> {
        gates::wait_allowed(&WaitGateFacts {
            excluded: self.m.meta.has_annotation(exclude_annotation),
            pre_terminate_hooks_started: self
                .status
                .deletion
                .wait_for_pre_terminate_hook_start
                .is_some(),
            infrastructure: self.infrastructure_fact(),
            timed_out: gates::timeout_exceeded(start, timeout, self.now),
        })
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

    fn drain_failed(&mut self, node: &str, error: String) -> Flow {
        tracing::error!(machine = %self.key, node, "Error draining Node: {error}");
        self.set_legacy(legacy_false(
            legacy::DRAINING_SUCCEEDED,
            legacy::DRAINING_FAILED,
            Severity::Warning,
            &error,
        ));
        self.set_deleting(
            reason::DRAINING_NODE,
            "Error draining Node, please check controller logs for errors",
        );
        self.event(
            EventType::Warning,
            "FailedDrainNode",
            format!("error draining Machine's node {node:?}: {error}"),
            format!("FailedDrainNode:{error}"),
        );
        Flow::Wait
    }

    fn drain(&mut self, node_name: &str) -> Flow {
        let timeout = self.m.node_drain_timeout;
        let started = self.status.deletion.node_drain_start;
        if let Err(skipped) = self.wait_gate(EXCLUDE_DRAIN_ANNOTATION, started, timeout) {
            tracing::debug!(machine = %self.key, "Skipping drain: {skipped}");
            return Flow::Continue;
        }
        let start = self.start(|d| &mut d.node_drain_start);
        if let Some(at) = gates::deadline(Some(start), timeout) {
            self.wake_at(at, DeletionTimer::DrainTimeout, None);
        }
        if !self.legacy_exists(legacy::DRAINING_SUCCEEDED) {
            self.set_legacy(legacy_false(
                legacy::DRAINING_SUCCEEDED,
                legacy::DRAINING,
                Severity::Info,
                "Draining the node before deletion",
            ));
        }
        let header = if self.conditions_in_flight {
            String::new()
        } else {
            drain::condition_header(start)
        };
        self.set_deleting(reason::DRAINING_NODE, header.clone());
        let Some(node) = self.node(node_name) else {
            let node_key = ObjectKey::new(self.scope.clone(), Kind::Node, "", node_name);
            if !self.store.node_seen_gone(&node_key, self.key) {
                // A nodeRef newer than the workload cluster's cache: a Node never seen is
                // not a deleted Node, and skipping its drain would be a guess.
                self.set_deleting(
                    reason::DRAINING_NODE,
                    format!(
                        "Waiting for Node {node_name} to appear in the workload cluster's cache"
                    ),
                );
                return Flow::Wait;
            }
            return self.drain_completed(node_name);
        };
        if !node.unschedulable {
            return self.cordon(node_name);
        }
        self.tracked.memo.cordon = None;
        if let Some((key, problem)) = self.unreadable_pod(node_name) {
            self.wait_for_readable(&key, &problem);
            return Flow::Wait;
        }

        let rules = match self.drain_rules() {
            Ok(r) => r,
            Err(e) => {
                return self
                    .drain_failed(node_name, format!("failed to get Pods for eviction: {e}"));
            }
        };
        let unreachable = node.is_unreachable();
        let skip_seconds = if unreachable {
            drain::UNREACHABLE_SKIP_WAIT_FOR_DELETE_TIMEOUT_SECONDS
        } else {
            0
        };
        let grace_period_seconds = unreachable.then_some(drain::UNREACHABLE_GRACE_PERIOD_SECONDS);
        let dcx = DrainContext::new(self.store, &self.scope, self.now, skip_seconds, &rules);
        // The cache leaves `tracked` for the rest of the phase: the plan borrows its keys.
        let mut cache = std::mem::take(&mut self.tracked.pods.0);
        let cached = cache.sync(self.store, &self.scope, node_name, &dcx, &rules);
        let flow = self.drain_pods(
            node_name,
            header,
            cached,
            skip_seconds,
            grace_period_seconds,
        );
        self.tracked.pods.0 = cache;
        flow
    }

    /// The eviction plan for the Node's classified pods, and what follows from it.
    fn drain_pods(
        &mut self,
        node_name: &str,
        header: String,
        cached: &[CachedPod],
        skip_seconds: i64,
        grace_period_seconds: Option<i64>,
    ) -> Flow {
        let effects_view = &*self.cx;
        let plan = DrainPlan::build(
            cached,
            &self.tracked.memo.evictions,
            self.now,
            skip_seconds,
            |k| effects_view.is_in_flight("Evict", k),
        );
        if let Some(error) = plan.error() {
            return self.drain_failed(node_name, error);
        }
        // Forget pods that are gone or deleting: their evictions are over. Pods still on the
        // Node are found in `cached` (both in key order: one walk) rather than in the store.
        let store = self.store;
        let mut on_node = cached.iter().peekable();
        self.tracked.memo.evictions.retain(|k, _| {
            while on_node.next_if(|c| c.key < *k).is_some() {}
            match on_node.next_if(|c| c.key == *k) {
                Some(c) => c.deletion_timestamp.is_none(),
                None => matches!(store.get(k), Some(Object::Pod(p)) if !p.meta.is_deleting()),
            }
        });
        if let Some((at, pod)) = plan.next_eviction_retry {
            self.wake_at(at, DeletionTimer::EvictionRetry, Some(pod));
        }
        if let Some((at, pod)) = plan.next_skip {
            self.wake_at(at, DeletionTimer::SkipDeletedPod, Some(pod));
        }
        self.evict(node_name, &plan, grace_period_seconds);
        if plan.is_complete() {
            return self.drain_completed(node_name);
        }
        self.report_blocked_drain(node_name, &plan);
        tracing::debug!(
            machine = %self.key,
            node = node_name,
            remaining = plan.deletion_timestamp_set.len() + plan.awaiting_answer.len(),
            failed = plan.failed.len(),
            "Drain not completed yet, requeuing in {}",
            drain::EVICTION_RETRY_INTERVAL
        );
        if self.conditions_in_flight {
            return Flow::Wait;
        }
        let message = drain::condition_message_after(header, &plan);
        self.set_legacy(legacy_false(
            legacy::DRAINING_SUCCEEDED,
            legacy::DRAINING,
            Severity::Info,
            &message,
        ));
        self.set_deleting(reason::DRAINING_NODE, message);
        Flow::Wait
    }

    fn cordon(&mut self, node_name: &str) -> Flow {
        let node_key = self.node_key(node_name);
        let in_flight = self.cx.is_in_flight("Cordon", &node_key);
        let attempt = self.tracked.memo.cordon.clone();
        if attempt_due(&attempt, in_flight, self.now) {
            // Upstream patches the Machine before draining, so the start time is visible.
            self.flush_status();
            let issued = self.cx.issue(
                ControllerId::Deletion,
                Action::Cordon {
                    node: Target {
                        key: node_key,
                        api_version: "v1".to_string(),
                    },
                },
                format!(
                    "Machine {} is being deleted: cordoning Node {node_name} before draining it",
                    self.m.meta.name
                ),
            );
            if let Issued::Queued(_) = issued {
                tracing::info!(machine = %self.key, node = node_name, "Cordoning Node");
                self.tracked.memo.cordon = Some(Attempt::requested(attempt.as_ref(), self.now));
            }
        } else if let Some(a) = attempt
            .as_ref()
            .filter(|a| a.failure().is_some() && !in_flight)
        {
            // In flight, its answer reconciles the Machine; a wake-up now would be in the past
            // and have the caller tick at once, for as long as the request is out.
            let node_key = self.node_key(node_name);
            self.wake_at(
                a.at().saturating_add(API_RETRY_INTERVAL),
                DeletionTimer::ApiRetry,
                Some(&node_key),
            );
        }
        match self
            .tracked
            .memo
            .cordon
            .as_ref()
            .and_then(|a| a.failure().map(str::to_string))
        {
            Some(f) => self.drain_failed(node_name, format!("failed to cordon Node: {f}")),
            None => Flow::Wait,
        }
    }

    fn evict(&mut self, node_name: &str, plan: &DrainPlan<'_>, grace_period_seconds: Option<i64>) {
        if plan.evict_now.is_empty() {
            return;
        }
        self.flush_status();
        tracing::info!(
            machine = %self.key,
            node = node_name,
            pods = %drain::list_to_string(
                &plan.evict_now.iter().map(|k| format!("{}/{}", k.namespace, k.name)).collect::<Vec<_>>(),
                5
            ),
            "Draining Node"
        );
        for key in &plan.evict_now {
            let previous = self.tracked.memo.evictions.get(*key).cloned();
            let why = match previous.as_ref().and_then(|a| a.last_failure.as_deref()) {
                Some(f) => format!(
                    "retrying eviction {} after it failed ({f})",
                    drain::EVICTION_RETRY_INTERVAL
                ),
                None => format!(
                    "draining Node {node_name}: Machine {} is being deleted",
                    self.m.meta.name
                ),
            };
            let issued = self.cx.issue(
                ControllerId::Deletion,
                Action::Evict {
                    pod: Target {
                        key: (*key).clone(),
                        api_version: "v1".to_string(),
                    },
                    grace_period_seconds,
                },
                why,
            );
            if let Issued::Queued(_) = issued {
                self.tracked.memo.evictions.insert(
                    (*key).clone(),
                    EvictionAttempt {
                        at: self.now,
                        outcome: EvictionOutcome::Pending,
                        last_failure: previous.and_then(|a| a.last_failure),
                    },
                );
            }
        }
    }

    fn drain_completed(&mut self, node_name: &str) -> Flow {
        if !self
            .conditions
            .legacy(legacy::DRAINING_SUCCEEDED)
            .is_some_and(Condition::is_true)
        {
            tracing::info!(machine = %self.key, node = node_name, "Drain completed");
        }
        self.set_legacy(legacy_true(legacy::DRAINING_SUCCEEDED));
        self.event(
            EventType::Normal,
            "SuccessfulDrainNode",
            format!("success draining Machine's node {node_name:?}"),
            "SuccessfulDrainNode".to_string(),
        );
        Flow::Continue
    }

    // ---- volume detach ----

    fn volume_detach(&mut self, node_name: &str) -> Flow {
        let timeout = self.m.node_volume_detach_timeout;
        let started = self.status.deletion.wait_for_node_volume_detach_start;
        if let Err(skipped) = self.wait_gate(EXCLUDE_VOLUME_DETACH_ANNOTATION, started, timeout) {
            tracing::debug!(machine = %self.key, "Skipping volume detach wait: {skipped}");
            return Flow::Continue;
        }
        let start = self.start(|d| &mut d.wait_for_node_volume_detach_start);
        if let Some(at) = gates::deadline(Some(start), timeout) {
            self.wake_at(at, DeletionTimer::VolumeDetachTimeout, None);
        }
        if !self.legacy_exists(legacy::VOLUME_DETACH_SUCCEEDED) {
            self.set_legacy(legacy_false(
                legacy::VOLUME_DETACH_SUCCEEDED,
                legacy::WAITING_FOR_VOLUME_DETACH,
                Severity::Info,
                "Waiting for node volumes to be detached",
            ));
        }
        let header = format!(
            "Waiting for Node volumes to be detached (started at {})",
            start.to_rfc3339()
        );
        self.set_deleting(reason::WAITING_FOR_VOLUME_DETACH, header);
        let wait = match self.node(node_name) {
            // NotFound, or unreachable: nothing will ever report the volumes detached.
            None => Ok(Default::default()),
            Some(node) if node.is_unreachable() => Ok(Default::default()),
            Some(node) => self
                .ignored_claims(node_name)
                .and_then(|ignored| volumes_to_wait_for(self.store, &self.scope, node, &ignored)),
        };
        match wait {
            Err(error) => {
                tracing::error!(machine = %self.key, "Error waiting for volumes to be detached from Node: {error}");
                self.set_deleting(
                    reason::WAITING_FOR_VOLUME_DETACH,
                    "Error waiting for volumes to be detached from Node, please check controller logs for errors",
                );
                self.event(
                    EventType::Warning,
                    "FailedWaitForVolumeDetach",
                    format!("error waiting for node volumes detaching, Machine's node {node_name:?}: {error}"),
                    format!("FailedWaitForVolumeDetach:{error}"),
                );
                Flow::Wait
            }
            Ok(w) if w.is_empty() => {
                if !self
                    .conditions
                    .legacy(legacy::VOLUME_DETACH_SUCCEEDED)
                    .is_some_and(Condition::is_true)
                {
                    tracing::info!(machine = %self.key, node = node_name, "Node volumes all detached");
                }
                self.set_legacy(legacy_true(legacy::VOLUME_DETACH_SUCCEEDED));
                self.event(
                    EventType::Normal,
                    "NodeVolumesDetached",
                    format!(
                        "success waiting for node volumes detaching Machine's node {node_name:?}"
                    ),
                    "NodeVolumesDetached".to_string(),
                );
                Flow::Continue
            }
            Ok(w) => {
                tracing::debug!(machine = %self.key, node = node_name, "Waiting for Node volumes to be detached");
                self.set_deleting(reason::WAITING_FOR_VOLUME_DETACH, w.message(start));
                Flow::Wait
            }
        }
    }

    /// Claims (`ns/name`) of pods the drain would skip: their volumes may stay attached.
    /// Pods merely being deleted are not skipped here (upstream uses no skip threshold).
    fn ignored_claims(&self, node_name: &str) -> Result<BTreeSet<String>, String> {
        let rules = self.drain_rules().map_err(|e| e.to_string())?;
        let dcx = DrainContext::new(self.store, &self.scope, self.now, 0, &rules);
        let mut ignored = BTreeSet::new();
        for key in self.store.pods_on_node(&self.scope, node_name) {
            let Some(Object::Pod(pod)) = self.store.get(key) else {
                continue;
            };
            if pod.pvc_names.is_empty() {
                continue;
            }
            if drain::classify(pod, &dcx).behavior == DrainBehavior::Skip {
                for claim in &pod.pvc_names {
                    ignored.insert(format!("{}/{claim}", pod.meta.namespace));
                }
            }
        }
        Ok(ignored)
    }

    // ---- infrastructure and bootstrap ----

    fn infrastructure(&mut self) -> Flow {
        let key = self.tracked.infrastructure.clone();
        let kind = self.m.infrastructure_ref.kind.clone();
        self.delete_external(&key, &kind, ExternalRole::Infrastructure)
    }

    fn bootstrap(&mut self) -> Flow {
        let (Some(key), Some(r)) = (self.tracked.bootstrap.clone(), &self.m.bootstrap_config_ref)
        else {
            return Flow::Continue;
        };
        let kind = r.kind.clone();
        self.delete_external(&key, &kind, ExternalRole::Bootstrap)
    }

    fn delete_external(&mut self, key: &ObjectKey, kind: &str, role: ExternalRole) -> Flow {
        let (ready_type, waiting_reason) = match role {
            ExternalRole::Infrastructure => (
                legacy::INFRASTRUCTURE_READY,
                reason::WAITING_FOR_INFRASTRUCTURE_DELETION,
            ),
            ExternalRole::Bootstrap => (
                legacy::BOOTSTRAP_READY,
                reason::WAITING_FOR_BOOTSTRAP_DELETION,
            ),
        };
        let object = self.store.get(key);
        if object.is_none() && self.store.seen_gone(key, self.key) {
            self.set_legacy(legacy_false(
                ready_type,
                legacy::DELETED,
                Severity::Info,
                "",
            ));
            return Flow::Continue;
        }
        // `None` here: not in the cache yet. Deleting it through the API settles it either way
        // (gone, or deleted as it should be), where upstream would read it live.
        let deleting = object.is_some_and(|o| o.meta().is_deleting());
        let action_name = match role {
            ExternalRole::Infrastructure => "DeleteInfrastructure",
            ExternalRole::Bootstrap => "DeleteBootstrap",
        };
        let attempt = match role {
            ExternalRole::Infrastructure => self.tracked.memo.infrastructure_delete.clone(),
            ExternalRole::Bootstrap => self.tracked.memo.bootstrap_delete.clone(),
        };
        if !deleting {
            let in_flight = self.cx.is_in_flight(action_name, key);
            if attempt_due(&attempt, in_flight, self.now) {
                let target = Target {
                    key: key.clone(),
                    api_version: match object {
                        Some(Object::External(e)) => e.api_version.clone(),
                        Some(_) => String::new(),
                        None => self.unseen_api_version(key, role),
                    },
                };
                let (action, why) = match role {
                    ExternalRole::Infrastructure => (
                        Action::DeleteInfrastructure { target },
                        format!(
                            "Machine {} is being deleted and its Node is drained: deleting {kind} {}",
                            self.m.meta.name, key.name
                        ),
                    ),
                    ExternalRole::Bootstrap => (
                        Action::DeleteBootstrap { target },
                        format!(
                            "{} of Machine {} is gone: deleting {kind} {}",
                            self.m.infrastructure_ref.kind, self.m.meta.name, key.name
                        ),
                    ),
                };
                if let Issued::Queued(_) = self.cx.issue(ControllerId::Deletion, action, why) {
                    tracing::info!(machine = %self.key, "Deleting {kind} {}", key.name);
                    let fresh = Some(Attempt::requested(attempt.as_ref(), self.now));
                    match role {
                        ExternalRole::Infrastructure => {
                            self.tracked.memo.infrastructure_delete = fresh
                        }
                        ExternalRole::Bootstrap => self.tracked.memo.bootstrap_delete = fresh,
                    }
                }
            } else if let Some(a) = attempt
                .as_ref()
                .filter(|a| a.failure().is_some() && !in_flight)
            {
                self.wake_at(
                    a.at().saturating_add(API_RETRY_INTERVAL),
                    DeletionTimer::ApiRetry,
                    Some(key),
                );
            }
        }
        let failed = match role {
            ExternalRole::Infrastructure => &self.tracked.memo.infrastructure_delete,
            ExternalRole::Bootstrap => &self.tracked.memo.bootstrap_delete,
        }
        .as_ref()
        .is_some_and(|a| a.failure().is_some());
        if failed && !deleting {
            self.set_deleting(
                reason::INTERNAL_ERROR,
                format!("Failed to delete {kind}, please check controller logs for errors"),
            );
        } else if object.is_none() {
            self.set_deleting(
                waiting_reason,
                format!(
                    "Waiting for {kind} to be deleted ({kind} {} has not reached the cache yet; \
                     the API was asked to delete it)",
                    key.name
                ),
            );
        } else {
            self.set_deleting(waiting_reason, format!("Waiting for {kind} to be deleted"));
        }
        Flow::Wait
    }

    /// The apiVersion to address a provider object the cache has not seen: the reference's,
    /// else that of a cached object of its kind, else its group alone (the adapter asks
    /// discovery for the preferred version).
    fn unseen_api_version(&self, key: &ObjectKey, role: ExternalRole) -> String {
        let reference = match role {
            ExternalRole::Infrastructure => Some(&self.m.infrastructure_ref),
            ExternalRole::Bootstrap => self.m.bootstrap_config_ref.as_ref(),
        };
        reference
            .and_then(|r| r.api_version.clone())
            .or_else(|| {
                self.store
                    .api_version_of_kind(&key.scope, &key.kind)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| reference.map(|r| r.api_group.clone()).unwrap_or_default())
    }

    // ---- Node ----

    fn delete_node(&mut self, node_name: &str) -> Flow {
        if self.node(node_name).is_none() {
            return Flow::Continue;
        }
        let node_key = self.node_key(node_name);
        let deleted_at = self.m.meta.deletion_timestamp.unwrap_or(self.now);
        let state = self.tracked.memo.node_deletion.clone();
        let in_flight = self.cx.is_in_flight("DeleteNode", &node_key);
        let retry = match &state {
            None => true,
            Some(d) => match &d.outcome {
                NodeDeletionOutcome::Deleted | NodeDeletionOutcome::GaveUp(_) => {
                    return Flow::Continue;
                }
                NodeDeletionOutcome::Pending => !in_flight,
                NodeDeletionOutcome::Failed(error) => {
                    let error = error.clone();
                    self.node_deletion_failed(&error);
                    if !gates::keep_deleting_node(
                        d.first_at,
                        deleted_at,
                        self.m.node_deletion_timeout,
                        self.now,
                    ) {
                        tracing::info!(
                            machine = %self.key,
                            node = node_name,
                            "Timeout for Node deletion exceeded, continuing without Node deletion"
                        );
                        if let Some(d) = &mut self.tracked.memo.node_deletion {
                            d.outcome = NodeDeletionOutcome::GaveUp(error);
                        }
                        return Flow::Continue;
                    }
                    let due = d
                        .last_at
                        .saturating_add(gates::MACHINE_NODE_DELETION_RETRY_INTERVAL);
                    if self.now < due {
                        self.wake_at(due, DeletionTimer::NodeDeletionRetry, Some(&node_key));
                        return Flow::Wait;
                    }
                    true
                }
            },
        };
        if !retry {
            // First attempt in flight: keep showing the previous stage until it is answered.
            self.deleting = None;
            return Flow::Wait;
        }
        let why = match &state {
            None => format!(
                "{} and {} of Machine {} are gone: deleting Node {node_name}",
                self.m.infrastructure_ref.kind,
                self.m
                    .bootstrap_config_ref
                    .as_ref()
                    .map_or("bootstrap", |r| r.kind.as_str()),
                self.m.meta.name
            ),
            Some(_) => format!(
                "retrying deletion of Node {node_name} (every {})",
                gates::MACHINE_NODE_DELETION_RETRY_INTERVAL
            ),
        };
        let issued = self.cx.issue(
            ControllerId::Deletion,
            Action::DeleteNode {
                node: Target {
                    key: node_key,
                    api_version: "v1".to_string(),
                },
            },
            why,
        );
        if let Issued::Queued(_) = issued {
            tracing::info!(machine = %self.key, node = node_name, "Deleting node");
            let first_at = state.as_ref().map_or(self.now, |d| d.first_at);
            self.tracked.memo.node_deletion = Some(NodeDeletion {
                first_at,
                last_at: self.now,
                outcome: NodeDeletionOutcome::Pending,
            });
        }
        if state.is_none() {
            self.deleting = None;
        }
        Flow::Wait
    }

    fn node_deletion_failed(&mut self, error: &str) {
        self.set_legacy(legacy_false(
            legacy::NODE_HEALTHY,
            legacy::DELETION_FAILED,
            Severity::Warning,
            "",
        ));
        self.set_deleting(
            reason::DELETING_NODE,
            "Error deleting Node, please check controller logs for errors",
        );
        self.event(
            EventType::Warning,
            "FailedDeleteNode",
            format!("error deleting Machine's node: {error}"),
            format!("FailedDeleteNode:{error}"),
        );
    }
}

#[derive(Clone, Copy)]
enum ExternalRole {
    Infrastructure,
    Bootstrap,
}

/// The Warning event reason for a deletion phase that lasts too long, by its `Deleting`
/// reason (phases that are not waits have none).
fn stall_event(deleting_reason: &str) -> Option<&'static str> {
    Some(match deleting_reason {
        reason::WAITING_FOR_PRE_DRAIN_HOOK => "PreDrainHookWaiting",
        reason::DRAINING_NODE => "DrainStalled",
        reason::WAITING_FOR_VOLUME_DETACH => "VolumeDetachStalled",
        reason::WAITING_FOR_PRE_TERMINATE_HOOK => "PreTerminateHookWaiting",
        reason::WAITING_FOR_INFRASTRUCTURE_DELETION => "InfrastructureDeletionStalled",
        reason::WAITING_FOR_BOOTSTRAP_DELETION => "BootstrapDeletionStalled",
        _ => return None,
    })
}
