//! Another writer fighting this controller over an object: what it wrote is undone again and
//! again (a second manager of the same Machines, a tool re-applying old values), or its
//! guarded writes keep meeting 409. A level-based controller would write back for ever; here a
//! fight holds the controller's writes to that object for [`HOLD`], with a Warning Event, and
//! is counted for an alert. Never a write loop: at most [`UNDONE_MAX`] writes of one object a
//! fight undoes per [`WINDOW`] and [`HOLD`].
//!
//! The signs, per object, within [`WINDOW`]:
//! - undone: a write is wanted again with the same content as the last write of its kind to
//!   the object, which landed (the controllers only write what the object does not show, and
//!   nothing they wrote since replaced it: someone else changed it back);
//! - refused: a write of the object answered 409 Conflict, with no write of it landing between.
//!
//! The [`UNDONE_MAX`]th sign holds the object. Only writes to the object itself are held (its
//! conditions, status, metadata, finalizer, a Node's cordon): evictions and deletions of other
//! objects go on, so a deletion is slowed, never stopped for good.

use crate::command::{Action, JsonText};
use crate::model::ObjectKey;
use crate::time::{Duration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How far back the signs count.
pub const WINDOW: Duration = Duration::from_secs(300);
/// Signs within [`WINDOW`] that make a fight.
pub const UNDONE_MAX: usize = 3;
/// How long a fight holds the controller's writes to the object.
pub const HOLD: Duration = Duration::from_secs(600);

/// What the controller wrote lately, and the objects it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fights {
    recent: BTreeMap<ObjectKey, Recent>,
    held: BTreeMap<ObjectKey, Hold>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Recent {
    /// The content of the last write of each kind that landed, with when.
    landed: Vec<(crate::command::ActionKind, u64, Timestamp)>,
    /// Each sign, with when.
    signs: Vec<(Timestamp, Sign)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sign {
    Undone,
    Refused,
}

/// A held object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub since: Timestamp,
    pub until: Timestamp,
    /// The signs, said for an operator.
    pub why: String,
    /// Its Warning Event was issued.
    pub told: bool,
}

/// The reason of the Warning Event a hold starts with.
pub const EVENT_REASON: &str = "WritesHeld";

/// The Event's message for a hold `why`.
pub fn message(why: &str) -> String {
    format!(
        "This controller holds its writes to this object for {}m: {why}. Another manager is acting on it: is Cluster API's manager running beside a --mode alone controller, or a second copy of this controller? Stop one of them (--mode shadow or takeover run beside Cluster API's manager)",
        HOLD.as_secs() / 60
    )
}

/// Whether a refused or held write of `action` is one a fight is about (a write of its target
/// object itself), and its content: the action without what changes between two writes of the
/// same thing (transition times, the resourceVersion read).
fn content(action: &Action) -> Option<u64> {
    let normal = match action {
        Action::Cordon { .. }
        | Action::AddFinalizer { .. }
        | Action::RemoveFinalizer { .. } => action.clone(),
        Action::SetCondition {
            target,
            conditions,
            summary,
        }
        | Action::SetOwnCondition {
            target,
            conditions,
            summary,
            ..
        } => {
            let mut conditions = conditions.clone();
            for c in conditions.current.iter_mut().chain(conditions.legacy.iter_mut()) {
                c.last_transition_time = None;
            }
            Action::SetCondition {
                target: target.clone(),
                conditions,
                summary: summary.clone(),
            }
        }
        Action::PatchStatus { merge, .. }
        | Action::PatchSpec { merge, .. }
        | Action::SetOwnerReference { merge, .. } => {
            let mut value = merge.to_value();
            if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("resourceVersion");
            }
            let mut normal = action.clone();
            if let Action::PatchStatus { merge, .. }
            | Action::PatchSpec { merge, .. }
            | Action::SetOwnerReference { merge, .. } = &mut normal
            {
                *merge = JsonText::from_value(&value);
            }
            normal
        }
        Action::Evict { .. }
        | Action::DeleteInfrastructure { .. }
        | Action::DeleteBootstrap { .. }
        | Action::DeleteNode { .. }
        | Action::CreateRemediation { .. }
        | Action::DeleteRemediation { .. }
        | Action::DeleteMachine { .. }
        | Action::CreateMachine { .. }
        | Action::RecordEvent { .. } => return None,
    };
    Some(crate::controller::fingerprint(&normal))
}

impl Fights {
    /// A write of `action` landed at `now`.
    pub fn landed(&mut self, action: &Action, now: Timestamp) {
        let Some(print) = content(action) else {
            return;
        };
        let kind = action.kind();
        let recent = self
            .recent
            .entry(action.target().key.clone())
            .or_default();
        recent
            .landed
            .retain(|(k, _, at)| *k != kind && within(*at, now));
        recent.landed.push((kind, print, now));
        // A write that lands ends a run of refusals: only 409s in a row are a sign.
        recent.signs.retain(|(_, s)| *s != Sign::Refused);
        // Amortised: at each power of two from 1 024 objects, what is older than the window goes
        // (a long run keeps no record of every object it ever wrote).
        let n = self.recent.len();
        if n >= 1024 && n.is_power_of_two() {
            self.prune(now);
        }
    }

    /// A write of `action` was refused with 409 Conflict at `now`. Returns the hold it starts,
    /// if any.
    pub fn refused(&mut self, action: &Action, now: Timestamp) -> Option<&Hold> {
        content(action)?;
        self.sign(&action.target().key, Sign::Refused, now)
    }

    /// Before `action` is issued at `now`: `Err` with the hold on its target while one holds
    /// it (a hold that starts now included).
    pub fn check(&mut self, action: &Action, now: Timestamp) -> Result<(), &Hold> {
        let Some(print) = content(action) else {
            return Ok(());
        };
        let key = &action.target().key;
        if let Some(hold) = self.held.get(key)
            && now >= hold.until
        {
            self.held.remove(key);
        }
        if self.held.contains_key(key) {
            return Err(&self.held[key]);
        }
        let kind = action.kind();
        let undone = self.recent.get(key).is_some_and(|r| {
            r.landed
                .iter()
                .any(|(k, p, at)| *k == kind && *p == print && within(*at, now))
        });
        if !undone {
            return Ok(());
        }
        match self.sign(key, Sign::Undone, now) {
            Some(hold) => Err(hold),
            None => Ok(()),
        }
    }

    fn sign(&mut self, key: &ObjectKey, sign: Sign, now: Timestamp) -> Option<&Hold> {
        let recent = self.recent.entry(key.clone()).or_default();
        recent.signs.retain(|(at, _)| within(*at, now));
        recent.signs.push((now, sign));
        if recent.signs.len() < UNDONE_MAX {
            return None;
        }
        let count = |s: Sign| recent.signs.iter().filter(|(_, x)| *x == s).count();
        let why = format!(
            "within {}s its writes to {key} were undone by another writer {} time(s) and refused with 409 Conflict {} time(s)",
            WINDOW.as_secs(),
            count(Sign::Undone),
            count(Sign::Refused)
        );
        self.recent.remove(key);
        self.held.insert(
            key.clone(),
            Hold {
                since: now,
                until: now.saturating_add(HOLD),
                why,
                told: false,
            },
        );
        self.held.get(key)
    }

    /// The hold on `key` was told in a Warning Event.
    pub fn told(&mut self, key: &ObjectKey) {
        if let Some(hold) = self.held.get_mut(key) {
            hold.told = true;
        }
    }

    /// Objects held at `now`.
    pub fn held(&self, now: Timestamp) -> impl Iterator<Item = (&ObjectKey, &Hold)> {
        self.held.iter().filter(move |(_, h)| now < h.until)
    }

    /// Forgets what is older than [`WINDOW`] and holds that ended (bounded memory over a long
    /// run: called now and then).
    pub fn prune(&mut self, now: Timestamp) {
        self.held.retain(|_, h| now < h.until);
        self.recent.retain(|_, r| {
            r.landed.retain(|(_, _, at)| within(*at, now));
            r.signs.retain(|(at, _)| within(*at, now));
            !r.landed.is_empty() || !r.signs.is_empty()
        });
    }
}

fn within(at: Timestamp, now: Timestamp) -> bool {
    now < at.saturating_add(WINDOW)
}
