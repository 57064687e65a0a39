//! Folds replayed records into a [`Story`]: one pass, in sequence order.

use super::{Cause, ControllerRecord, Entry, ExplainError, Now, Phase, Span, Story, Subject};
use engine::connection::Unreachable;
use engine::model::{ClusterName, Condition, Kind, Object, ObjectKey, Scope};
use engine::{Action, ApiOutcome, Command, Input, Timestamp};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The v1beta2 condition a Machine's deletion writes; its reasons name the phases.
pub(super) const DELETING: &str = "Deleting";

pub(super) fn input_concerns(
    input: &Input,
    subject: &Subject,
    issued: &BTreeMap<u64, Command>,
) -> bool {
    match input {
        Input::Upsert { scope, object } => subject.matches(&object.key(scope)),
        Input::Delete { key } => subject.matches(key),
        Input::Relist { scope, objects } | Input::RelistKind { scope, objects, .. } => {
            objects.iter().any(|o| subject.matches(&o.key(scope)))
        }
        Input::ApiResult { command, .. } => issued
            .get(command)
            .is_some_and(|c| command_concerns(c, subject)),
        Input::Batch { inputs } => inputs.iter().any(|i| input_concerns(i, subject, issued)),
        Input::Tick
        | Input::Restarted
        | Input::Unlisted { .. }
        | Input::Unwatched { .. }
        | Input::ClusterUnreachable { .. }
        | Input::Ownership(_)
        | Input::OwnMachines(_) => false,
        // Who decided to act beside what bears on every object's story.
        Input::Overridden { .. } | Input::CapiRelease(_) => true,
    }
}

pub(super) fn command_concerns(c: &Command, subject: &Subject) -> bool {
    subject.matches(&c.action.target().key) || subject.matches(&c.owner)
}

/// `Type=Status (Reason)`, as timelines write a condition.
pub(super) fn condition_label(c: &Condition) -> String {
    if c.reason.is_empty() {
        format!("{}={}", c.type_, c.status.as_str())
    } else {
        format!("{}={} ({})", c.type_, c.status.as_str(), c.reason)
    }
}

/// A condition with its message, each further message line indented by the renderer.
pub(super) fn condition_text(c: &Condition) -> String {
    if c.message.is_empty() {
        condition_label(c)
    } else {
        format!("{}: {}", condition_label(c), c.message)
    }
}

/// Descriptions of the latest records kept to cite as causes: a command's cause is the record
/// that produced it, so a few suffice and a long journal does not grow the story's memory.
const RECENT_CAUSES_MAX: usize = 4096;

/// The longest cycle of lines folded into one: a command, the refusal it met and the Warning
/// event that told it.
const REPEAT_PERIOD_MAX: usize = 3;

/// What the pass keeps while it reads the records.
pub(super) struct Teller {
    pub subject: Subject,
    recent: VecDeque<Cause>,
    first: Option<(u64, Timestamp)>,
    last: Option<(u64, Timestamp)>,
    /// Commands issued and not answered yet.
    issued: BTreeMap<u64, Command>,
    /// The last `current` condition list written to each object.
    pub conditions: BTreeMap<ObjectKey, Vec<Condition>>,
    /// Every object observed, with the last version seen (`None` once observed deleted).
    pub objects: BTreeMap<ObjectKey, Option<Object>>,
    pub first_seen: Option<Cause>,
    pub gone: Option<Cause>,
    /// When it was observed gone, at the journal's precision (a cause carries it rounded).
    gone_at: Option<engine::Timestamp>,
    pub entries: Vec<Entry>,
    /// Phase boundaries: (name, reason, when, cause).
    pub marks: Vec<(String, String, Timestamp, Cause)>,
    /// The time the story is told as at (set when it is finished).
    pub now_at: Timestamp,
    /// Workload clusters that cannot be reached, and why, as the journal last said.
    pub unreachable: BTreeMap<Scope, Unreachable>,
}

/// `DeleteNode Node n1@c1` of `DeleteNode Node n1@c1 answered 500: …`.
fn refused_command(text: &str) -> &str {
    text.split_once(" answered ")
        .map_or(text, |(command, _)| command)
}

/// `Warning FailedDeleteNode on Machine default/m1` of the same with `: <message>`.
fn event_kind(text: &str) -> &str {
    text.split_once(": ").map_or(text, |(kind, _)| kind)
}

/// A refusal's code: `500` of `… answered 500: …`, `404` of `… answered 404 not found`.
fn refused_code(text: &str) -> Option<&str> {
    let (_, answer) = text.split_once(" answered ")?;
    answer.split([':', ' ']).next()
}

/// A retry loop refused with other answers than its first says which: `…; also 500, 503`.
fn note_other_answer(text: &mut String, other: &str) {
    let (Some(first), Some(new)) = (refused_code(text), refused_code(other)) else {
        return;
    };
    if new == first {
        return;
    }
    let new = new.to_string();
    match text.split_once("; also ") {
        Some((_, also)) if also.split(", ").any(|c| c == new) => {}
        Some(_) => {
            text.push_str(", ");
            text.push_str(&new);
        }
        None => {
            text.push_str("; also ");
            text.push_str(&new);
        }
    }
}

impl Teller {
    pub fn cause(&self, seq: u64) -> Cause {
        match self.recent.iter().rev().find(|c| c.seq == seq) {
            Some(c) => c.clone(),
            None => Cause {
                seq,
                at: String::new(),
                input: format!("record #{seq}"),
            },
        }
    }

    pub fn entry(
        &mut self,
        at: Timestamp,
        what: &'static str,
        text: String,
        command: Option<&Command>,
        cause_seq: u64,
    ) {
        let controller = command.map(|c| c.actor());
        // A retry loop (one line, or a command and its refusal, again and again) is told once,
        // with how often and until when; condition changes are always told.
        if matches!(what, "command" | "refused" | "event") {
            let n = self.entries.len();
            let repeated = (1..=REPEAT_PERIOD_MAX)
                .filter(|back| *back <= n)
                .map(|back| n - back)
                .find(|i| {
                    let e = &self.entries[*i];
                    e.what == what
                        && e.controller == controller
                        && match what {
                            // A loop refused with varying answers (500, 503, 429) is one loop,
                            // and so are the Warning events that tell each answer.
                            "refused" => refused_command(&e.text) == refused_command(&text),
                            "event" => event_kind(&e.text) == event_kind(&text),
                            _ => e.text == text,
                        }
                });
            if let Some(i) = repeated {
                let e = &mut self.entries[i];
                e.repeats += 1;
                e.last_at = Some(at.to_rfc3339());
                if what == "refused" {
                    note_other_answer(&mut e.text, &text);
                }
                return;
            }
        }
        let cause = self.cause(cause_seq);
        self.entries.push(Entry {
            at: at.to_rfc3339(),
            what,
            text,
            command: command.map(|c| c.id),
            controller,
            cause,
            repeats: 0,
            last_at: None,
        });
    }

    pub fn mark(&mut self, name: &str, reason: &str, at: Timestamp, cause_seq: u64) {
        if self.marks.last().is_some_and(|m| m.1 == reason) {
            return;
        }
        let cause = self.cause(cause_seq);
        self.marks
            .push((name.to_string(), reason.to_string(), at, cause));
    }

    /// The last phase's name and start.
    pub fn phases_last(&self) -> Option<(&str, Timestamp)> {
        self.marks.last().map(|m| (m.0.as_str(), m.2))
    }

    /// The subject's last observed object, if it still exists.
    pub fn subject_object(&self) -> Option<&Object> {
        self.objects
            .iter()
            .find(|(k, _)| self.subject.matches(k))
            .and_then(|(_, o)| o.as_ref())
    }

    /// The workload cluster of the subject (a Machine, MHC or MachinePool names it).
    pub fn subject_cluster(&self) -> Option<ClusterName> {
        let (namespace, cluster) = match self.subject_object()? {
            Object::Machine(m) => (&m.meta.namespace, &m.cluster_name),
            Object::MachineHealthCheck(h) => (&h.meta.namespace, &h.cluster_name),
            Object::MachinePool(p) => (&p.meta.namespace, &p.cluster_name),
            _ => return None,
        };
        Some(ClusterName::new(namespace.as_str(), cluster.as_str()))
    }

    /// Why the subject's workload cluster cannot be reached, and what would fix it, while the
    /// journal says it cannot.
    pub fn unreachable_unblock(&self) -> Option<String> {
        let cluster = self.subject_cluster()?;
        let why = self.unreachable.get(&Scope::Workload(cluster.clone()))?;
        Some(why.to_unblock(&cluster))
    }

    pub fn subject_conditions(&self) -> &[Condition] {
        self.conditions
            .iter()
            .find(|(k, _)| self.subject.matches(k))
            .map_or(&[], |(_, v)| v.as_slice())
    }

    /// Records `new` as `key`'s conditions and returns those that changed.
    pub fn diff_conditions(&mut self, key: &ObjectKey, new: &[Condition]) -> Vec<Condition> {
        let old = self.conditions.insert(key.clone(), new.to_vec());
        let old = old.unwrap_or_default();
        new.iter()
            .filter(|c| {
                !old.iter().any(|o| {
                    o.type_ == c.type_
                        && o.status == c.status
                        && o.reason == c.reason
                        && o.message == c.message
                })
            })
            .cloned()
            .collect()
    }
}

/// Flattens a batch into its inputs.
fn each_input(input: &Input) -> Vec<&Input> {
    match input {
        Input::Batch { inputs } => inputs.iter().collect(),
        other => vec![other],
    }
}

/// What a story of one kind adds to the common pass.
pub(super) trait Chapter {
    /// An observation of any object (`None`: observed deleted), before it is recorded.
    fn observed(
        &mut self,
        t: &mut Teller,
        r: &ControllerRecord,
        key: &ObjectKey,
        object: Option<&Object>,
    );
    /// A command issued by any controller; for a `SetCondition`, `changed` holds the
    /// conditions it changed on its target (already recorded).
    fn command(&mut self, t: &mut Teller, r: &ControllerRecord, c: &Command, changed: &[Condition]);
    /// A failed answer to a command.
    fn refused(&mut self, t: &mut Teller, r: &ControllerRecord, c: &Command, outcome: &str);
    fn finish(self: Box<Self>, t: &mut Teller) -> (Vec<super::Target>, Now);
}

/// Reads records one at a time, in sequence order, and tells the story when finished.
pub struct Explainer {
    t: Teller,
    chapter: Box<dyn Chapter>,
    /// A shadow run's comparison, told where it concerns the subject (only once a command
    /// was withheld: in other runs the controller's own writes are not someone else's).
    shadow: engine::shadow::Comparator,
    shadow_run: bool,
}

impl Explainer {
    pub fn new(subject: Subject) -> Explainer {
        let chapter: Box<dyn Chapter> = match subject.kind.to_ascii_lowercase().as_str() {
            "machinehealthcheck" => Box::new(super::health::Health::default()),
            "machinepool" => Box::new(super::pool::Pool::default()),
            _ => Box::new(MachineChapter::default()),
        };
        Explainer {
            t: Teller {
                subject,
                recent: VecDeque::new(),
                first: None,
                last: None,
                issued: BTreeMap::new(),
                conditions: BTreeMap::new(),
                objects: BTreeMap::new(),
                first_seen: None,
                gone: None,
                gone_at: None,
                entries: Vec::new(),
                marks: Vec::new(),
                now_at: Timestamp(0),
                unreachable: BTreeMap::new(),
            },
            chapter,
            shadow: engine::shadow::Comparator::new(),
            shadow_run: false,
        }
    }

    /// Shadow mode's disagreements about the subject, as story entries.
    fn tell_disagreements(&mut self, at: Timestamp, seq: u64) {
        for d in self.shadow.take() {
            if self.shadow_run && self.t.subject.matches(&d.machine) {
                self.t.entry(at, "disagrees", d.describe(), None, seq);
            }
        }
    }

    /// Reads the next record (its input and the commands it caused) with the engine's store
    /// after it.
    pub fn record(&mut self, r: &ControllerRecord, store: &engine::store::Store) {
        let t = &mut self.t;
        let chapter = &mut self.chapter;
        t.first.get_or_insert((r.seq, r.at));
        t.last = Some((r.seq, r.at));
        if t.recent.len() == RECENT_CAUSES_MAX {
            t.recent.pop_front();
        }
        t.recent.push_back(Cause {
            seq: r.seq,
            at: r.at.to_rfc3339(),
            input: r.describe(),
        });
        for input in each_input(&r.input) {
            match input {
                Input::Upsert { scope, object } => {
                    let key = object.key(scope);
                    observe(t, chapter.as_mut(), r, key, Some(object));
                }
                Input::Relist { .. } | Input::RelistKind { .. } => {
                    let Some(relist) = input.as_relist() else {
                        continue;
                    };
                    let scope = relist.scope;
                    let listed: BTreeSet<ObjectKey> =
                        relist.objects.iter().map(|o| o.key(scope)).collect();
                    for o in relist.objects {
                        observe(t, chapter.as_mut(), r, o.key(scope), Some(o));
                    }
                    // A relist drops what it no longer lists.
                    let dropped: Vec<ObjectKey> = t
                        .objects
                        .iter()
                        .filter(|(k, o)| relist.covers(k) && o.is_some() && !listed.contains(*k))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for key in dropped {
                        observe(t, chapter.as_mut(), r, key, None);
                    }
                }
                Input::Delete { key } => observe(t, chapter.as_mut(), r, key.clone(), None),
                Input::ApiResult { command, outcome } => {
                    let issued = t.issued.remove(command);
                    // The answer brings the written object into the cache as a watch event would
                    // (whose event, of the same version, is then not journaled).
                    if let (Some(c), ApiOutcome::Ok { object: Some(o) }) = (&issued, outcome) {
                        let key = o.key(&c.action.target().key.scope);
                        let cached = t.objects.get(&key).is_some_and(Option::is_some);
                        if engine::keeps_answer(&c.action, o, cached) {
                            observe(t, chapter.as_mut(), r, key, Some(o));
                        }
                    }
                    // A command not sent was told as such when decided; its answer is no refusal.
                    if let Some(c) = issued
                        && !matches!(outcome, ApiOutcome::Ok { .. } | ApiOutcome::NotSent { .. })
                    {
                        chapter.refused(t, r, &c, &outcome.summary());
                    }
                }
                // Forgotten, not deleted: the story keeps what was last seen.
                Input::Tick
                | Input::Restarted
                | Input::Unlisted { .. }
                | Input::Unwatched { .. }
                | Input::Ownership(_)
                | Input::OwnMachines(_)
                | Input::Overridden { .. }
                | Input::CapiRelease(_)
                | Input::Batch { .. } => {}
                Input::ClusterUnreachable { scope, reason } => {
                    cluster_reachability(t, r, scope, reason.as_ref())
                }
            }
        }
        for c in &r.commands {
            let told;
            let c = match r.withheld.get(&c.id) {
                Some(why) => {
                    told = not_sent(c, *why);
                    &told
                }
                None => c,
            };
            t.issued.insert(c.id, c.clone());
            let changed = match &c.action {
                Action::SetCondition {
                    target, conditions, ..
                }
                | Action::SetOwnCondition {
                    target, conditions, ..
                } => t.diff_conditions(&target.key, &conditions.current),
                _ => Vec::new(),
            };
            chapter.command(t, r, c, &changed);
        }
        self.shadow.observe(r.at, &r.input, store);
        self.shadow_run |= !r.withheld.is_empty();
        for c in r.commands.iter().filter(|c| r.withheld.contains_key(&c.id)) {
            self.shadow.withheld(r.at, c);
        }
        self.tell_disagreements(r.at, r.seq);
    }

    /// The story as at `now` (the last record's time when `None`, or when earlier).
    pub fn finish(mut self, now: Option<Timestamp>) -> Result<Story, ExplainError> {
        if let Some((seq, at)) = self.t.last {
            self.shadow.finish(at);
            self.tell_disagreements(at, seq);
        }
        let Explainer { mut t, chapter, .. } = self;
        let (Some(first), Some(last)) = (t.first, t.last) else {
            return Err(ExplainError::Empty);
        };
        t.now_at = now.unwrap_or(last.1).max(last.1);
        let (targets, now) = chapter.finish(&mut t);
        let Some(first_seen) = t.first_seen.clone() else {
            return Err(ExplainError::Unknown(t.subject.to_string()));
        };
        let object = t
            .objects
            .keys()
            .find(|k| t.subject.matches(k))
            .map_or(t.subject.to_string(), |k| k.to_string());
        Ok(Story {
            object,
            journal: Span {
                first_seq: first.0,
                last_seq: last.0,
                first_at: first.1.to_rfc3339(),
                last_at: last.1.to_rfc3339(),
            },
            at: t.now_at.to_rfc3339(),
            first_seen,
            gone: t.gone.clone(),
            phases: phases(&t),
            targets,
            entries: std::mem::take(&mut t.entries),
            now,
        })
    }
}

/// What would unblock an MHC or MachinePool that says its workload cluster cannot be reached
/// (`WorkloadClusterReachable=False`), while the journal says so too.
pub(super) fn unreachable_now(t: &Teller) -> Option<String> {
    let condition = engine::model::find_condition(
        t.subject_conditions(),
        engine::connection::REACHABLE_CONDITION,
    )?;
    if condition.status != engine::model::ConditionStatus::False || t.gone.is_some() {
        return None;
    }
    t.unreachable_unblock()
}

/// A workload cluster could not be reached (or connected again): remembered for what would
/// unblock, and told in the story of an object of that cluster.
fn cluster_reachability(
    t: &mut Teller,
    r: &ControllerRecord,
    scope: &Scope,
    reason: Option<&Unreachable>,
) {
    let before = match reason {
        Some(why) => t.unreachable.insert(scope.clone(), why.clone()),
        None => t.unreachable.remove(scope),
    };
    let Scope::Workload(cluster) = scope else {
        return;
    };
    if t.subject_cluster().as_ref() != Some(cluster) || t.gone.is_some() {
        return;
    }
    let text = match (reason, before) {
        (Some(why), _) => format!(
            "workload cluster {}/{} cannot be reached: {}",
            cluster.namespace,
            cluster.name,
            why.detail(cluster)
        ),
        (None, Some(_)) => format!(
            "workload cluster {}/{} connected again",
            cluster.namespace, cluster.name
        ),
        (None, None) => return,
    };
    t.entry(r.at, "observed", text, None, r.seq);
}

fn observe(
    t: &mut Teller,
    chapter: &mut dyn Chapter,
    r: &ControllerRecord,
    key: ObjectKey,
    object: Option<&Object>,
) {
    let known = t.objects.get(&key).is_some_and(Option::is_some);
    if object.is_none() && !known {
        return;
    }
    if t.subject.matches(&key) {
        match object {
            Some(_) if t.first_seen.is_none() => {
                t.first_seen = Some(t.cause(r.seq));
                let how = if matches!(r.input, Input::Relist { .. }) {
                    "first seen (relist)"
                } else {
                    "first seen"
                };
                t.entry(r.at, "observed", how.into(), None, r.seq);
            }
            Some(_) if t.gone.is_some() => {
                t.gone = None;
                t.gone_at = None;
                let text = "seen again after it was gone (recreated with the same name)";
                t.entry(r.at, "observed", text.into(), None, r.seq);
            }
            Some(_) => {}
            None => {
                t.gone = Some(t.cause(r.seq));
                t.gone_at = Some(r.at);
                let text = "gone: no longer in the API (deleted)";
                t.entry(r.at, "observed", text.into(), None, r.seq);
            }
        }
    }
    chapter.observed(t, r, &key, object);
    t.objects.insert(key, object.cloned());
}

/// Phases from the marks: each lasts until the next one began, the last until the object
/// was gone or, while it lasts, until the journal's last record.
fn phases(t: &Teller) -> Vec<Phase> {
    let gone_at = t.gone_at;
    let mut out = Vec::new();
    for (i, (name, reason, start, cause)) in t.marks.iter().enumerate() {
        let end = t.marks.get(i + 1).map(|m| m.2).or(gone_at);
        let until = end.unwrap_or(t.now_at);
        let d = until.since(*start);
        out.push(Phase {
            name: name.clone(),
            reason: reason.clone(),
            start: start.to_rfc3339(),
            end: end.map(|e| e.to_rfc3339()),
            duration: d.to_string(),
            duration_ms: d.as_millis(),
            cause: cause.clone(),
        });
    }
    out
}

/// A command never sent, as the story tells it: every text about it says so first.
fn not_sent(c: &Command, why: engine::Withheld) -> Command {
    let mut c = c.clone();
    let mark = format!("NOT SENT ({})", why.as_str());
    match &mut c.action {
        Action::RecordEvent { message, .. } => *message = format!("{mark}: {message}"),
        _ => c.reason = format!("{mark}: {}", c.reason),
    }
    c
}

/// A command as the story writes it: `drain Evict Pod app/web-0@c1: <reason>`.
pub(super) fn command_text(c: &Command) -> String {
    let mut text = format!("{} {}", c.action.name(), c.action.target().key);
    let detail = c.action.detail();
    // Summaries the reason repeats are written once.
    if !detail.is_empty()
        && !matches!(c.action, Action::RecordEvent { .. })
        && !c.reason.contains(&detail)
    {
        text.push(' ');
        text.push_str(&detail);
    }
    match &c.action {
        Action::RecordEvent {
            type_,
            reason,
            message,
            ..
        } => format!(
            "{} {reason} on {}: {message}",
            type_.as_str(),
            c.action.target().key
        ),
        _ if c.reason.is_empty() => text,
        _ => format!("{text}: {}", c.reason),
    }
}

/// The Machine's deletion phases, named after the `Deleting` reasons the engine writes.
pub(super) fn deletion_phase_name(reason: &str) -> &'static str {
    use engine::deletion::reason as r;
    match reason {
        r::WAITING_FOR_PRE_DRAIN_HOOK => "pre-drain hooks",
        r::DRAINING_NODE => "draining the Node",
        r::WAITING_FOR_VOLUME_DETACH => "waiting for volumes to detach",
        r::WAITING_FOR_PRE_TERMINATE_HOOK => "pre-terminate hooks",
        r::WAITING_FOR_INFRASTRUCTURE_DELETION => "waiting for infrastructure deletion",
        r::WAITING_FOR_BOOTSTRAP_DELETION => "waiting for bootstrap deletion",
        r::DELETING_NODE => "deleting the Node",
        r::DELETION_COMPLETED => "deletion completed; releasing the finalizer",
        r::OBJECT_UNREADABLE => "blocked: an object it depends on is unreadable",
        r::WORKLOAD_CLUSTER_UNREACHABLE => "blocked: its workload cluster cannot be reached",
        r::INTERNAL_ERROR => "blocked: internal error",
        _ => "deleting",
    }
}

/// A Machine's story: its deletion phases, health verdicts and remediation.
#[derive(Default)]
struct MachineChapter {
    deletion_requested: bool,
    /// Hook annotations on the Machine: (key, value).
    hooks: BTreeMap<String, String>,
    /// The replacement, once its owner deleted it for remediation: its owner's key.
    remediated_owner: Option<String>,
    replacement: Option<String>,
    infrastructure: Option<String>,
    bootstrap: Option<String>,
    node_delete_refused: Option<String>,
    /// The MHC that last judged the Machine.
    judged_by: Option<ObjectKey>,
}

pub(super) fn is_hook(key: &str) -> bool {
    use engine::model::{PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX};
    key.split_once('/')
        .is_some_and(|(p, _)| p == PRE_DRAIN_HOOK_PREFIX || p == PRE_TERMINATE_HOOK_PREFIX)
}

/// The controller owner reference of a Machine, as `MachineSet default/md-0`.
pub(super) fn controller_owner(object: &Object) -> Option<String> {
    let meta = object.meta();
    meta.owner_references
        .iter()
        .find(|o| o.controller)
        .map(|o| format!("{} {}/{}", o.kind, meta.namespace, o.name))
}

impl Chapter for MachineChapter {
    fn observed(
        &mut self,
        t: &mut Teller,
        r: &ControllerRecord,
        key: &ObjectKey,
        object: Option<&Object>,
    ) {
        if t.subject.matches(key)
            && let Some(o) = object
        {
            let meta = o.meta();
            if let Some(ts) = meta.deletion_timestamp
                && !self.deletion_requested
            {
                self.deletion_requested = true;
                t.entry(
                    r.at,
                    "observed",
                    format!("deletion requested (deletionTimestamp {})", ts.to_rfc3339()),
                    None,
                    r.seq,
                );
            }
            let hooks: BTreeMap<String, String> = meta
                .annotations
                .iter()
                .filter(|(k, _)| is_hook(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, v) in &hooks {
                if !self.hooks.contains_key(k) {
                    t.entry(
                        r.at,
                        "observed",
                        format!("hook annotation {k} set (owner: {v})"),
                        None,
                        r.seq,
                    );
                }
            }
            for k in self.hooks.keys() {
                if !hooks.contains_key(k) {
                    t.entry(
                        r.at,
                        "observed",
                        format!("hook annotation {k} removed"),
                        None,
                        r.seq,
                    );
                }
            }
            self.hooks = hooks;
        }
        if key.kind == Kind::Machine
            && self.replacement.is_none()
            && let (Some(owner), Some(o)) = (&self.remediated_owner, object)
            && !t.objects.contains_key(key)
            && controller_owner(o).as_ref() == Some(owner)
        {
            let text = format!("replaced by {key} (created by {owner})");
            self.replacement = Some(key.to_string());
            t.entry(r.at, "replacement", text, None, r.seq);
        }
    }

    fn command(
        &mut self,
        t: &mut Teller,
        r: &ControllerRecord,
        c: &Command,
        changed: &[Condition],
    ) {
        if !command_concerns(c, &t.subject) {
            return;
        }
        let target = &c.action.target().key;
        if c.controller == engine::ControllerId::Health && t.subject.matches(target) {
            self.judged_by = Some(c.owner.clone());
        }
        match &c.action {
            Action::SetCondition { .. } => {
                for changed in changed {
                    if t.subject.matches(target) && changed.type_ == DELETING {
                        t.mark(
                            deletion_phase_name(&changed.reason),
                            &changed.reason,
                            r.at,
                            c.cause,
                        );
                    }
                    t.entry(r.at, "condition", condition_text(changed), Some(c), c.cause);
                }
            }
            // Bookkeeping (phase, start times): the conditions say the same in words.
            Action::PatchStatus { .. } if t.subject.matches(target) => {}
            _ => {
                match &c.action {
                    Action::DeleteInfrastructure { .. } => {
                        self.infrastructure = Some(target.to_string())
                    }
                    Action::DeleteBootstrap { .. } => self.bootstrap = Some(target.to_string()),
                    Action::DeleteMachine { .. } => {
                        self.remediated_owner = t.subject_object().and_then(controller_owner)
                    }
                    _ => {}
                }
                let what = if matches!(c.action, Action::RecordEvent { .. }) {
                    "event"
                } else {
                    "command"
                };
                t.entry(r.at, what, command_text(c), Some(c), c.cause);
            }
        }
    }

    fn refused(&mut self, t: &mut Teller, r: &ControllerRecord, c: &Command, outcome: &str) {
        if !command_concerns(c, &t.subject) {
            return;
        }
        if matches!(c.action, Action::DeleteNode { .. }) {
            self.node_delete_refused = Some(outcome.to_string());
        }
        let text = format!(
            "{} {} answered {outcome}",
            c.action.name(),
            c.action.target().key,
        );
        t.entry(r.at, "refused", text, Some(c), r.seq);
    }

    fn finish(self: Box<Self>, t: &mut Teller) -> (Vec<super::Target>, Now) {
        let context = super::unblock::MachineContext {
            hooks: self.hooks,
            infrastructure: self.infrastructure,
            bootstrap: self.bootstrap,
            node_delete_refused: self.node_delete_refused,
            replacement: self.replacement,
            deletion_requested: self.deletion_requested,
            judged_by: self.judged_by,
        };
        (Vec::new(), super::unblock::machine_now(t, &context))
    }
}
