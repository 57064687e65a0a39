//! What the deletion controller remembers about one deleting Machine ([`Memo`]): each request
//! it made as an enum of the states that request can be in.

use super::phase::DeletionPhase;
use super::status::StatusFields;
use crate::drain::EvictionAttempt;
use crate::input::ApiOutcome;
use crate::model::{Conditions, DeletionTimes, ObjectKey};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The deletion phase in progress, since when, and whether its stall was reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Phase {
    pub phase: DeletionPhase,
    pub since: Timestamp,
    pub stall_reported: bool,
}

/// State version 5 keeps the [`DeletionPhase`]; version 4 kept the `Deleting` reason its pass
/// wrote, which names the phase for every phase that can stall ([`DeletionPhase::of_v4_reason`]).
/// A reason that names none (a phase that never stalls) starts its phase afresh: the memo is
/// dropped and the next pass begins it at that pass's time.
fn phase_of_layout<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Phase>, D::Error> {
    #[derive(Deserialize)]
    struct Current {
        phase: DeletionPhase,
        since: Timestamp,
        stall_reported: bool,
    }
    #[derive(Deserialize)]
    struct ByReason {
        reason: String,
        since: Timestamp,
        stall_reported: bool,
    }
    if crate::codec::layout_before(5) {
        let v4 = Option::<ByReason>::deserialize(d)?;
        return Ok(v4.and_then(|p| {
            DeletionPhase::of_v4_reason(&p.reason).map(|phase| Phase {
                phase,
                since: p.since,
                stall_reported: p.stall_reported,
            })
        }));
    }
    Ok(Option::<Current>::deserialize(d)?.map(|c| Phase {
        phase: c.phase,
        since: c.since,
        stall_reported: c.stall_reported,
    }))
}

/// The last request of one kind (cordon, infrastructure or bootstrap deletion): when it was
/// issued and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attempt {
    /// Issued, not answered yet (or its answer was lost); a re-issue after a failure keeps
    /// showing that failure until it is answered.
    Requested {
        at: Timestamp,
        previous_failure: Option<String>,
    },
    Succeeded {
        at: Timestamp,
    },
    Failed {
        at: Timestamp,
        failure: String,
    },
}

impl Attempt {
    /// The attempt issued at `now`, after `previous` (whose failure it keeps showing).
    pub fn requested(previous: Option<&Attempt>, now: Timestamp) -> Self {
        Attempt::Requested {
            at: now,
            previous_failure: previous.and_then(|a| a.failure()).map(str::to_string),
        }
    }

    /// Its answer: success (`None`) or the failure's text.
    pub fn answer(&mut self, failure: Option<String>) {
        let at = self.at();
        *self = match failure {
            None => Attempt::Succeeded { at },
            Some(failure) => Attempt::Failed { at, failure },
        };
    }

    pub fn at(&self) -> Timestamp {
        match self {
            Attempt::Requested { at, .. }
            | Attempt::Succeeded { at }
            | Attempt::Failed { at, .. } => *at,
        }
    }

    pub fn is_answered(&self) -> bool {
        match self {
            Attempt::Requested { .. } => false,
            Attempt::Succeeded { .. } | Attempt::Failed { .. } => true,
        }
    }

    /// The failure to show: the answer's, or the previous one while a re-issue is unanswered.
    pub fn failure(&self) -> Option<&str> {
        match self {
            Attempt::Requested {
                previous_failure, ..
            } => previous_failure.as_deref(),
            Attempt::Succeeded { .. } => None,
            Attempt::Failed { failure, .. } => Some(failure),
        }
    }
}

/// Node deletion attempts (Part 1 decision 10).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDeletion {
    pub first_at: Timestamp,
    pub last_at: Timestamp,
    pub outcome: NodeDeletionOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeDeletionOutcome {
    Pending,
    Deleted,
    Failed(String),
    /// `nodeDeletionTimeout` expired: continuing without Node deletion.
    GaveUp(String),
}

/// A status write issued whose effect may not be observed yet. It stands for the observed
/// value until the cache shows the Machine at (or after) the write, so a stale cache does not
/// make the same write twice; it never outlives that, so a value the API server stores in its
/// own form cannot hold the Machine back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending<T> {
    pub value: T,
    pub landing: Landing,
}

/// Where a [`Pending`] write stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Landing {
    Unanswered,
    /// Answered with success. `landed_resource_version` is the first resourceVersion that
    /// shows the write: the written object's when the answer carries it, else (set at the
    /// first pass after the answer) anything newer than the Machine seen then.
    Answered {
        landed_resource_version: Option<u64>,
    },
}

impl<T: PartialEq> Pending<T> {
    pub fn new(value: T) -> Self {
        Pending {
            value,
            landing: Landing::Unanswered,
        }
    }

    /// The write succeeded; `written` is the resourceVersion the answer carries, if any.
    pub fn answered(&mut self, written: Option<u64>) {
        self.landing = Landing::Answered {
            landed_resource_version: written,
        };
    }

    /// Whether it still stands for the observed value, given the observed one.
    pub fn stands(&mut self, observed: &T, resource_version: u64) -> bool {
        if &self.value == observed {
            return false;
        }
        match &mut self.landing {
            Landing::Unanswered => true,
            Landing::Answered {
                landed_resource_version,
            } => {
                let landed =
                    *landed_resource_version.get_or_insert(resource_version.saturating_add(1));
                resource_version < landed
            }
        }
    }
}

/// The resourceVersion of the object a successful write returned.
pub(super) fn written_resource_version(outcome: &ApiOutcome) -> Option<u64> {
    match outcome {
        ApiOutcome::Ok {
            object: Some(object),
        } => Some(object.meta().resource_version).filter(|rv| *rv != 0),
        _ => None,
    }
}

/// What the controller remembers about one deleting Machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memo {
    /// Start times chosen by this controller: chosen once, even if the patch is not yet seen.
    pub started: DeletionTimes,
    pub evictions: BTreeMap<ObjectKey, EvictionAttempt>,
    pub cordon: Option<Attempt>,
    pub infrastructure_delete: Option<Attempt>,
    pub bootstrap_delete: Option<Attempt>,
    pub node_deletion: Option<NodeDeletion>,
    /// Events already recorded (`Reason` or `Reason:message`): events mark transitions.
    pub events: BTreeSet<String>,
    pub pending_conditions: Option<Pending<Conditions>>,
    pub pending_status: Option<Pending<StatusFields>>,
    /// The finalizer removal was answered with success: the Machine is on its way out and a
    /// cache that still shows it must not trigger more writes.
    pub finalizer_released: bool,
    #[serde(deserialize_with = "phase_of_layout")]
    pub phase: Option<Phase>,
    /// The latest eviction attempt a `DrainBlocked` event reported.
    pub drain_blocked_reported: Option<Timestamp>,
    /// Conditions a pass decided that the Machine does not show yet (a write held back by one
    /// in flight, refused, or lost): each pass starts from them, since the step that decided
    /// one (a drain's success) may never be reached again to decide it anew.
    #[serde(deserialize_with = "crate::codec::added_in_9")]
    pub unobserved: Conditions,
}

impl Memo {
    /// The conditions `written` carries are no longer unobserved: a write carries them (or
    /// carried them and landed; the API may store them in its own form, which must not have
    /// them written again and again).
    pub fn carried(&mut self, written: &Conditions) {
        let unobserved = &mut self.unobserved;
        unobserved
            .current
            .retain(|c| written.current(&c.type_) != Some(c));
        unobserved
            .legacy
            .retain(|c| written.legacy(&c.type_) != Some(c));
    }

    /// A condition write that did not land (refused, or lost with the process that sent it):
    /// the deletion's conditions in it stand until the Machine shows them.
    pub fn not_written(&mut self, conditions: &Conditions) {
        let unobserved = &mut self.unobserved;
        let ours = |current| {
            move |c: &&crate::model::Condition| super::status::is_deletions(current, &c.type_)
        };
        for c in conditions.current.iter().filter(ours(true)) {
            crate::decision::put(&mut unobserved.current, c.clone());
        }
        for c in conditions.legacy.iter().filter(ours(false)) {
            crate::decision::put(&mut unobserved.legacy, c.clone());
        }
    }

    /// A restart: the answers of the writes the old process sent never come, so they stand
    /// for nothing; the relist shows whether they landed.
    pub fn forget_unanswered(&mut self) {
        if let Some(p) = self
            .pending_conditions
            .take_if(|p| p.landing == Landing::Unanswered)
        {
            self.not_written(&p.value);
        }
        if self
            .pending_status
            .as_ref()
            .is_some_and(|p| p.landing == Landing::Unanswered)
        {
            self.pending_status = None;
        }
    }
}
