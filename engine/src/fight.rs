//! Another writer fighting this controller over an object: what it wrote is undone again and
//! again (a second manager of the same Machines, such as Cluster API's beside a `--mode alone`
//! controller, or a tool re-applying old values). A level-based controller would write back
//! for ever; here a fight holds the controller's writes to that object for [`HOLD`], with a
//! Warning Event, and is served as a metric for an alert. Never a write loop: at most
//! [`UNDONE_MAX`] writes of one object a fight undoes per [`WINDOW`] and [`HOLD`].
//!
//! Undone, per object within [`WINDOW`]: a write is wanted again with the same content as the
//! last write of its kind to the object, which landed at a resourceVersion, and the object is
//! now seen at a newer one (the controllers only write what the object does not show: someone
//! wrote after them and changed it back). A stale read (an older version served again) or a
//! write that never landed is no sign.
//!
//! 409 Conflicts in a row on one object are told in a Warning Event ([`CONFLICT_REASON`]) but
//! hold nothing: the API refuses a guarded write whenever anyone wrote in between, and the
//! write's backoff already paces the retries.
//!
//! Only writes to the object itself are held (its conditions, status, metadata, finalizer, a
//! Node's cordon): evictions and deletions of other objects go on, so a deletion is slowed,
//! never stopped for good.
//!
//! In takeover a fought-over Machine is given back to Cluster API's manager
//! ([`Fights::give_back`]) and is not taken again for [`GIVEN_BACK_FOR`]: the writes that hand
//! it back pass its hold, each once ([`Fights::pass`], [`HandBackWrite`]), so the hand-back
//! cannot become the loop.

use crate::command::{Action, ActionKind, JsonText};
use crate::model::ObjectKey;
use crate::time::{Duration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How far back undone writes count.
pub const WINDOW: Duration = Duration::from_secs(300);
/// Undone writes within [`WINDOW`] that make a fight.
pub const UNDONE_MAX: usize = 3;
/// How long a fight holds the controller's writes to the object.
pub const HOLD: Duration = Duration::from_secs(600);
/// 409 Conflicts in a row on one object that are told in a Warning Event.
pub const CONFLICTS_TOLD: u32 = 3;
/// The reason of the Warning Event a hold starts with.
pub const EVENT_REASON: &str = "WritesHeld";
/// The reason of the Warning Event that tells 409 Conflicts in a row.
pub const CONFLICT_REASON: &str = "WriteConflicts";
/// How long a Machine a takeover gave back after a fight stays Cluster API's manager's: not
/// hooked again meanwhile, so a writer that keeps undoing this controller's writes meets one
/// hand-back a day at most, never hooks put on and taken off in turn.
pub const GIVEN_BACK_FOR: Duration = Duration::from_secs(24 * 3600);

/// What the controller wrote lately, and the objects it holds. Nothing older than [`WINDOW`]
/// (a hold: than its end) is kept once an input at a later time is handled ([`Fights::expire`]),
/// so a replay from any snapshot meets the same state once the window has passed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "Encoded")]
pub struct Fights {
    recent: BTreeMap<ObjectKey, Recent>,
    held: BTreeMap<ObjectKey, Hold>,
    /// Machines a takeover gave back to Cluster API's manager for a fight (state version 13).
    given_back: BTreeMap<ObjectKey, GivenBack>,
    /// No later than when the first record kept expires (`None`: nothing kept). A cache, not
    /// state: not encoded (computed on decoding), not compared.
    #[serde(skip)]
    next_expiry: Option<Timestamp>,
}

impl PartialEq for Fights {
    fn eq(&self, other: &Self) -> bool {
        self.recent == other.recent
            && self.held == other.held
            && self.given_back == other.given_back
    }
}

impl Eq for Fights {}

/// The encoded form of [`Fights`].
#[derive(Deserialize)]
struct Encoded {
    recent: BTreeMap<ObjectKey, Recent>,
    held: BTreeMap<ObjectKey, Hold>,
    #[serde(deserialize_with = "crate::codec::added_in_13")]
    given_back: BTreeMap<ObjectKey, GivenBack>,
}

impl From<Encoded> for Fights {
    fn from(e: Encoded) -> Fights {
        let mut fights = Fights {
            recent: e.recent,
            held: e.held,
            given_back: e.given_back,
            next_expiry: None,
        };
        fights.next_expiry = fights.first_expiry();
        fights
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Recent {
    /// The last write of each kind that landed.
    landed: Vec<Landed>,
    /// When each of its writes was seen undone.
    undone: Vec<Timestamp>,
    /// 409 Conflicts since a write of it last landed, the last one's time, and whether they
    /// were told.
    conflicts: u32,
    last_conflict: Option<Timestamp>,
    conflicts_told: bool,
}

impl Recent {
    /// When the last of what it keeps expires.
    fn expiries(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.landed
            .iter()
            .map(|l| l.at)
            .chain(self.undone.iter().copied())
            .chain(self.last_conflict)
            .map(|at| at.saturating_add(WINDOW))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Landed {
    kind: ActionKind,
    content: u64,
    /// The object's resourceVersion the write left.
    version: u64,
    at: Timestamp,
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

/// A Machine a takeover gave back to Cluster API's manager because of a fight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GivenBack {
    pub since: Timestamp,
    /// The hold's signs, said for an operator.
    pub why: String,
    /// The writes that passed its hold and landed: each lands once.
    passed: Vec<HandBackWrite>,
    /// Those passed and not answered yet, by command id: a refused one (a 409 as the other
    /// writer wrote in between) may pass again, paced by the write's backoff.
    sending: Vec<(u64, HandBackWrite)>,
}

impl GivenBack {
    pub fn until(&self) -> Timestamp {
        self.since.saturating_add(GIVEN_BACK_FOR)
    }
}

/// The Event's message for a hold `why`.
pub fn message(why: &str) -> String {
    format!(
        "This controller holds its writes to this object for {}m: {why}. Another manager is acting on it: is Cluster API's manager running beside a --mode alone controller, or a second copy of this controller? Stop one of them (--mode shadow or takeover run beside Cluster API's manager)",
        HOLD.as_secs() / 60
    )
}

/// The Event's message for `conflicts` 409s in a row.
pub fn conflict_message(conflicts: u32) -> String {
    format!(
        "{conflicts} writes to this object in a row were refused with 409 Conflict: another writer changed it each time between this controller's read and its write (retried with backoff). If it goes on, look for a second manager of this object"
    )
}

/// Whether `action` writes its target object itself (what a fight holds), as [`content`] has
/// it, without fingerprinting it.
fn fightable(action: &Action) -> bool {
    matches!(
        action,
        Action::Cordon { .. }
            | Action::AddFinalizer { .. }
            | Action::RemoveFinalizer { .. }
            | Action::SetCondition { .. }
            | Action::SetOwnCondition { .. }
            | Action::PatchStatus { .. }
            | Action::PatchSpec { .. }
            | Action::SetOwnerReference { .. }
    )
}

/// Whether a refused or held write of `action` is one a fight is about (a write of its target
/// object itself), and its content: the action without what changes between two writes of the
/// same thing (transition times, the resourceVersion read).
fn content(action: &Action) -> Option<u64> {
    let normal = match action {
        Action::Cordon { .. } | Action::AddFinalizer { .. } | Action::RemoveFinalizer { .. } => {
            action.clone()
        }
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
            for c in conditions
                .current
                .iter_mut()
                .chain(conditions.legacy.iter_mut())
            {
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

/// A write that hands a fought-over Machine back ([`Fights::pass`]): each passes the hold on
/// it once per hand-back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandBackWrite {
    /// A deletion's pre-drain hook taken off, its drain over.
    PreDrainHook,
    /// The condition that tells it.
    PreDrainHookTold,
    /// This controller's last hook taken off, with the annotation that names their holder.
    LastHook,
    /// The condition that tells it (a deletion's).
    LastHookTold,
}

impl Fights {
    /// A write of `action` landed at `now`, leaving the object at resourceVersion `version`.
    pub fn landed(&mut self, action: &Action, version: u64, now: Timestamp) {
        let Some(content) = content(action) else {
            return;
        };
        let kind = action.kind();
        let recent = self.recent.entry(action.target().key.clone()).or_default();
        recent
            .landed
            .retain(|l| l.kind != kind && within(l.at, now));
        recent.landed.push(Landed {
            kind,
            content,
            version,
            at: now,
        });
        recent.conflicts = 0;
        recent.last_conflict = None;
        recent.conflicts_told = false;
        self.expires_at(now.saturating_add(WINDOW));
    }

    /// A write of `action` was refused with 409 Conflict at `now`.
    pub fn refused(&mut self, action: &Action, now: Timestamp) {
        if !fightable(action) {
            return;
        }
        let recent = self.recent.entry(action.target().key.clone()).or_default();
        recent.conflicts += 1;
        recent.last_conflict = Some(now);
        self.expires_at(now.saturating_add(WINDOW));
    }

    /// The 409 Conflicts in a row on `key`, once they reach [`CONFLICTS_TOLD`] and were not
    /// told yet (they count as told from now on).
    pub fn conflicts_to_tell(&mut self, key: &ObjectKey) -> Option<u32> {
        let recent = self.recent.get_mut(key)?;
        if recent.conflicts < CONFLICTS_TOLD || recent.conflicts_told {
            return None;
        }
        recent.conflicts_told = true;
        Some(recent.conflicts)
    }

    /// Before `action` is issued at `now`, with its target seen at resourceVersion `seen`:
    /// `Err` with the hold on its target while one holds it (a hold that starts now included).
    pub fn check(&mut self, action: &Action, seen: u64, now: Timestamp) -> Result<(), &Hold> {
        if !fightable(action) {
            return Ok(());
        }
        let key = &action.target().key;
        if self.held.get(key).is_some_and(|h| now < h.until) {
            return Err(&self.held[key]);
        }
        let kind = action.kind();
        let Some(recent) = self.recent.get_mut(key) else {
            return Ok(());
        };
        // The content is fingerprinted only when a write of its kind landed and was overtaken.
        let mut overtaken = recent
            .landed
            .iter()
            .filter(|l| l.kind == kind && l.version < seen && within(l.at, now))
            .peekable();
        if overtaken.peek().is_none() {
            return Ok(());
        }
        let content = content(action);
        if !overtaken.any(|l| Some(l.content) == content) {
            return Ok(());
        }
        recent.undone.retain(|at| within(*at, now));
        recent.undone.push(now);
        let undone = recent.undone.len();
        if undone < UNDONE_MAX {
            self.expires_at(now.saturating_add(WINDOW));
            return Ok(());
        }
        let why = format!(
            "within {}m another writer undid its writes to {key} {undone} times",
            WINDOW.as_secs() / 60,
        );
        self.recent.remove(key);
        let until = now.saturating_add(HOLD);
        self.held.insert(
            key.clone(),
            Hold {
                since: now,
                until,
                why,
                told: false,
            },
        );
        self.expires_at(until);
        Err(&self.held[key])
    }

    /// The hold on `key` was told in a Warning Event.
    pub fn told(&mut self, key: &ObjectKey) {
        if let Some(hold) = self.held.get_mut(key) {
            hold.told = true;
        }
    }

    /// Why a takeover gives Machine `key` back at `now`: a hold on it, or it was given back
    /// within [`GIVEN_BACK_FOR`] (the hold's signs either way).
    pub fn fought_over(&self, key: &ObjectKey, now: Timestamp) -> Option<&str> {
        if let Some(given) = self.given_back.get(key).filter(|g| now < g.until()) {
            return Some(&given.why);
        }
        self.held
            .get(key)
            .filter(|h| now < h.until)
            .map(|h| h.why.as_str())
    }

    /// The Machine `key`, fought over, is given back to Cluster API's manager from `now` (kept
    /// from the first time) for [`GIVEN_BACK_FOR`]. Whether it was given back now (not before).
    pub fn give_back(&mut self, key: &ObjectKey, now: Timestamp) -> bool {
        if self.given_back.get(key).is_some_and(|g| now < g.until()) {
            return false;
        }
        let why = self.fought_over(key, now).unwrap_or_default().to_string();
        self.given_back.insert(
            key.clone(),
            GivenBack {
                since: now,
                why,
                passed: Vec::new(),
                sending: Vec::new(),
            },
        );
        self.expires_at(now.saturating_add(GIVEN_BACK_FOR));
        true
    }

    /// Whether `write`, which gives Machine `key` back, passes the hold on it: only when the
    /// Machine was given back ([`Fights::give_back`]) and that write neither landed nor is on
    /// its way: once landed, never again, whatever the other writer does meanwhile.
    pub fn pass(&self, key: &ObjectKey, write: HandBackWrite, now: Timestamp) -> bool {
        self.given_back
            .get(key)
            .filter(|g| now < g.until())
            .is_some_and(|g| {
                !g.passed.contains(&write) && !g.sending.iter().any(|(_, w)| *w == write)
            })
    }

    /// The `write` that passed the hold on `key` went out as command `id`.
    pub fn sending(&mut self, key: &ObjectKey, write: HandBackWrite, id: u64) {
        if let Some(given) = self.given_back.get_mut(key) {
            given.sending.push((id, write));
        }
    }

    /// Command `id`, sent to `key`, was answered: a hand-back write that landed is on record
    /// for good; a refused one may pass again.
    pub fn answered(&mut self, key: &ObjectKey, id: u64, landed: bool) {
        let Some(given) = self.given_back.get_mut(key) else {
            return;
        };
        let Some(at) = given.sending.iter().position(|(sent, _)| *sent == id) else {
            return;
        };
        let (_, write) = given.sending.remove(at);
        if landed && !given.passed.contains(&write) {
            given.passed.push(write);
        }
    }

    /// No answer to a command sent before a restart will come: hand-back writes on their way
    /// may pass again.
    pub fn forget_sending(&mut self) {
        for given in self.given_back.values_mut() {
            given.sending.clear();
        }
    }

    /// Forgets the Machines given back (a state migrated from before version 13 knows none).
    pub fn forget_given_back(&mut self) {
        self.given_back.clear();
        self.next_expiry = self.first_expiry();
    }

    /// Whether a hold stands on `key` at `now`.
    pub fn is_held(&self, key: &ObjectKey, now: Timestamp) -> bool {
        self.held.get(key).is_some_and(|h| now < h.until)
    }

    /// Objects held at `now`.
    pub fn held(&self, now: Timestamp) -> impl Iterator<Item = (&ObjectKey, &Hold)> {
        self.held.iter().filter(move |(_, h)| now < h.until)
    }

    /// Forgets what expired by `now`: writes, undos and 409s older than [`WINDOW`], holds that
    /// ended. Called for every input, so what is kept never depends on when it last ran (a
    /// replay from any snapshot meets the same state); cheap when nothing expired.
    pub fn expire(&mut self, now: Timestamp) {
        if self.next_expiry.is_none_or(|at| now < at) {
            return;
        }
        self.held.retain(|_, h| now < h.until);
        self.given_back.retain(|_, g| now < g.until());
        self.recent.retain(|_, r| {
            r.landed.retain(|l| within(l.at, now));
            r.undone.retain(|at| within(*at, now));
            if r.last_conflict.is_some_and(|at| !within(at, now)) {
                r.conflicts = 0;
                r.last_conflict = None;
                r.conflicts_told = false;
            }
            !r.landed.is_empty() || !r.undone.is_empty() || r.last_conflict.is_some()
        });
        self.next_expiry = self.first_expiry();
    }

    fn first_expiry(&self) -> Option<Timestamp> {
        self.recent
            .values()
            .flat_map(Recent::expiries)
            .chain(self.held.values().map(|h| h.until))
            .chain(self.given_back.values().map(GivenBack::until))
            .min()
    }

    fn expires_at(&mut self, at: Timestamp) {
        self.next_expiry = Some(self.next_expiry.map_or(at, |n| n.min(at)));
    }
}

fn within(at: Timestamp, now: Timestamp) -> bool {
    now < at.saturating_add(WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Target;
    use crate::model::{Kind, Scope};

    fn cordon() -> Action {
        Action::Cordon {
            node: Target {
                key: ObjectKey::new(Scope::Management, Kind::Node, "", "n1"),
                api_version: "v1".into(),
            },
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_millis(secs * 1000)
    }

    /// Written, then seen at a newer version that lacks it, three times within the window:
    /// the third holds the object for [`HOLD`], and the hold ends.
    #[test]
    fn a_write_undone_three_times_holds_the_object_then_lets_go() {
        let mut fights = Fights::default();
        let action = cordon();
        for (i, t) in [0, 60, 120].into_iter().enumerate() {
            fights.landed(&action, 10 * (i as u64 + 1), at(t));
            let undone = fights.check(&action, 10 * (i as u64 + 1) + 1, at(t + 1));
            assert_eq!(undone.is_err(), i == 2, "undone {} times", i + 1);
        }
        let (_, hold) = fights.held(at(122)).next().expect("held");
        assert_eq!(hold.until, at(121).saturating_add(HOLD));
        assert!(hold.why.contains("3 times"), "{}", hold.why);
        assert!(fights.check(&action, 99, at(500)).is_err(), "still held");
        assert!(
            fights.check(&action, 99, at(121 + 600)).is_ok(),
            "the hold ended"
        );
    }

    /// A stale read (an older version served again) or a write that never landed is no sign,
    /// however often the write is wanted again; so is an undo older than the window.
    #[test]
    fn stale_reads_and_old_undos_hold_nothing() {
        let mut fights = Fights::default();
        let action = cordon();
        fights.landed(&action, 10, at(0));
        for t in 1..50 {
            assert!(fights.check(&action, 9, at(t)).is_ok(), "stale read at {t}");
        }
        let mut never = Fights::default();
        for t in 1..50 {
            assert!(never.check(&action, 100 + t as u64, at(t)).is_ok());
        }
        let mut slow = Fights::default();
        for (i, t) in [0, 400, 800, 1200].into_iter().enumerate() {
            slow.landed(&action, 10 * (i as u64 + 1), at(t));
            assert!(
                slow.check(&action, 10 * (i as u64 + 1) + 1, at(t + 1))
                    .is_ok(),
                "an undo every 400 s is not a fight"
            );
        }
    }

    /// 409s in a row are told once a streak, and hold nothing.
    #[test]
    fn conflicts_in_a_row_are_told_once_and_hold_nothing() {
        let mut fights = Fights::default();
        let action = cordon();
        let key = action.target().key.clone();
        for _ in 0..CONFLICTS_TOLD - 1 {
            fights.refused(&action, at(0));
        }
        assert_eq!(fights.conflicts_to_tell(&key), None);
        fights.refused(&action, at(0));
        assert_eq!(fights.conflicts_to_tell(&key), Some(CONFLICTS_TOLD));
        fights.refused(&action, at(0));
        assert_eq!(fights.conflicts_to_tell(&key), None, "told once");
        assert!(fights.check(&action, 1, at(1)).is_ok());
        fights.landed(&action, 5, at(2));
        for _ in 0..CONFLICTS_TOLD {
            fights.refused(&action, at(0));
        }
        assert_eq!(
            fights.conflicts_to_tell(&key),
            Some(CONFLICTS_TOLD),
            "a new streak"
        );
    }

    /// What is kept does not depend on when it was last expired: a record expired input by
    /// input and one expired once at the end are the same state (a replay from a snapshot
    /// meets the full replay's state).
    #[test]
    fn the_state_does_not_depend_on_when_it_expired() {
        let action = cordon();
        let play = |expire_each: bool| {
            let mut fights = Fights::default();
            for t in (0..3000).step_by(37) {
                if expire_each {
                    fights.expire(at(t));
                }
                match t % 5 {
                    0 => fights.landed(&action, t as u64, at(t)),
                    1 => fights.refused(&action, at(t)),
                    _ => {
                        let _ = fights.check(&action, t as u64 + 1, at(t));
                    }
                }
            }
            fights.expire(at(3010));
            fights
        };
        let (each, once) = (play(true), play(false));
        assert_eq!(each, once);
        assert_eq!(
            crate::codec::encode(&each).unwrap(),
            crate::codec::encode(&once).unwrap()
        );
        let decoded: Fights = crate::codec::decode(&crate::codec::encode(&each).unwrap()).unwrap();
        assert_eq!(
            decoded.next_expiry,
            decoded.first_expiry(),
            "computed on decoding"
        );
        assert!(!each.recent.is_empty() || !each.held.is_empty(), "{each:?}");
    }

    /// [`fightable`] and [`content`] name the same writes.
    #[test]
    fn fightable_is_what_has_content() {
        let target = Target {
            key: ObjectKey::new(Scope::Management, Kind::Machine, "default", "m1"),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
        };
        let json = JsonText("{}".into());
        let actions = [
            cordon(),
            Action::AddFinalizer {
                target: target.clone(),
                finalizer: "f".into(),
            },
            Action::RemoveFinalizer {
                target: target.clone(),
                finalizer: "f".into(),
            },
            Action::PatchStatus {
                target: target.clone(),
                merge: json.clone(),
                summary: String::new(),
            },
            Action::DeleteMachine {
                target: target.clone(),
            },
            Action::RecordEvent {
                regarding: target,
                type_: crate::command::EventType::Warning,
                reason: "R".into(),
                message: String::new(),
            },
        ];
        for action in &actions {
            assert_eq!(fightable(action), content(action).is_some(), "{action:?}");
        }
    }

    /// Held in a fight, then given back: each write that hands the Machine back passes the
    /// hold once, only once given back; the Machine counts as fought over for
    /// [`GIVEN_BACK_FOR`], not [`HOLD`], and nothing is kept after.
    #[test]
    fn a_machine_given_back_passes_each_hand_back_write_once_and_stays_given_back_a_day() {
        let mut fights = Fights::default();
        let write = cordon();
        let key = write.target().key.clone();
        let last = HandBackWrite::LastHook;
        assert!(
            !fights.pass(&key, last, at(0)),
            "not given back: nothing passes"
        );
        for (i, t) in [0, 60, 120].into_iter().enumerate() {
            fights.landed(&write, 10 * (i as u64 + 1), at(t));
            let _ = fights.check(&write, 10 * (i as u64 + 1) + 1, at(t + 1));
        }
        assert!(fights.is_held(&key, at(122)));
        assert!(!fights.pass(&key, last, at(122)), "held is not given back");
        assert!(fights.give_back(&key, at(122)));
        assert!(!fights.give_back(&key, at(130)), "given back once");
        assert!(fights.pass(&key, last, at(130)));
        fights.sending(&key, last, 1);
        assert!(!fights.pass(&key, last, at(130)), "on its way");
        fights.answered(&key, 1, false);
        assert!(
            fights.pass(&key, last, at(131)),
            "refused (a 409): may pass again"
        );
        fights.sending(&key, last, 2);
        fights.answered(&key, 2, true);
        assert!(!fights.pass(&key, last, at(131)), "landed: never twice");
        assert!(fights.pass(&key, HandBackWrite::LastHookTold, at(133)));
        let hold_over = at(121).saturating_add(HOLD);
        assert!(!fights.is_held(&key, hold_over));
        assert!(
            fights
                .fought_over(&key, hold_over)
                .is_some_and(|why| why.contains("3 times")),
            "given back outlasts the hold"
        );
        let day = at(122).saturating_add(GIVEN_BACK_FOR);
        assert!(
            fights
                .fought_over(&key, day.saturating_add(Duration(-1)))
                .is_some()
        );
        assert_eq!(fights.fought_over(&key, day), None);
        fights.expire(day);
        assert_eq!(fights, Fights::default(), "nothing kept after a day");
    }

    /// A state of version 12 (no Machine given back) reads as none given back; version 13
    /// reads what it wrote.
    #[test]
    fn fights_of_version_12_read_with_none_given_back() {
        let mut fights = Fights::default();
        let action = cordon();
        fights.landed(&action, 10, at(0));
        #[derive(Serialize)]
        struct V12<'a> {
            recent: &'a BTreeMap<ObjectKey, Recent>,
            held: &'a BTreeMap<ObjectKey, Hold>,
        }
        let v12 = crate::codec::encode(&V12 {
            recent: &fights.recent,
            held: &fights.held,
        })
        .unwrap();
        let read: Fights = crate::codec::decode_layout(&v12, 12).unwrap();
        assert_eq!(read, fights);
        fights.given_back.insert(
            action.target().key.clone(),
            GivenBack {
                since: at(1),
                why: "w".into(),
                passed: vec![HandBackWrite::PreDrainHook],
                sending: vec![(9, HandBackWrite::LastHook)],
            },
        );
        let v13 = crate::codec::encode(&fights).unwrap();
        let read: Fights = crate::codec::decode_layout(&v13, 13).unwrap();
        assert_eq!(read, fights);
        assert_eq!(read.next_expiry, read.first_expiry());
    }

    /// Evictions and deletions of other objects are never held.
    #[test]
    fn evictions_are_never_held() {
        let mut fights = Fights::default();
        let evict = Action::Evict {
            pod: Target {
                key: ObjectKey::new(Scope::Management, Kind::Pod, "app", "web-0"),
                api_version: "v1".into(),
            },
            grace_period_seconds: None,
        };
        for t in 0..10 {
            fights.landed(&evict, t as u64, at(t));
            assert!(fights.check(&evict, 100, at(t)).is_ok());
        }
        assert_eq!(fights.held(at(10)).count(), 0);
    }
}
