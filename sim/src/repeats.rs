//! The "never twice" rule: no destructive or finalizer command is issued again for an object
//! after the controller has *observed* its success: an ok answer to the command, or a watch
//! event (or list) showing its effect on the same object (uid): the object gone, being deleted,
//! or without the finalizer. A success the controller could not see (the answer timed out and
//! the watch missed the change) may be retried: that is what a controller must do.

use engine::model::{Object, ObjectKey};
use engine::{Action, ApiOutcome, Command, Input};
use std::collections::{BTreeMap, BTreeSet};

/// One destructive intent: what, on which object (key and uid), and for a finalizer removal
/// which finalizer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Intent {
    action: &'static str,
    key: ObjectKey,
    uid: String,
    finalizer: Option<String>,
}

impl Intent {
    fn of(command: &Command, uid: &str) -> Option<Intent> {
        let action = &command.action;
        // Not evictions: upstream evicts a pod still on the Node again at every drain retry.
        let once = matches!(
            action,
            Action::RemoveFinalizer { .. }
                | Action::DeleteMachine { .. }
                | Action::DeleteNode { .. }
                | Action::DeleteInfrastructure { .. }
                | Action::DeleteBootstrap { .. }
                | Action::DeleteRemediation { .. }
        );
        if !once || uid.is_empty() {
            return None;
        }
        let finalizer = match action {
            Action::RemoveFinalizer { finalizer, .. } => Some(finalizer.clone()),
            _ => None,
        };
        Some(Intent {
            action: action.name(),
            key: action.target().key.clone(),
            uid: uid.to_string(),
            finalizer,
        })
    }

    /// Whether `object` (the same key) shows this intent carried out.
    fn shown_by(&self, object: &Object) -> bool {
        if matches!(object, Object::Unreadable(_)) {
            // Unknown shows nothing: the controller cannot tell what the write did.
            return false;
        }
        let meta = object.meta();
        if meta.uid != self.uid {
            // Another object under the same name: the one we acted on is gone.
            return true;
        }
        match &self.finalizer {
            Some(f) => !meta.finalizers.contains(f),
            None => meta.deletion_timestamp.is_some(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Repeats {
    /// Destructive commands sent, by id.
    sent: BTreeMap<u64, Intent>,
    /// Carried out by the API, not yet seen by the controller, by target.
    unseen: BTreeMap<ObjectKey, BTreeSet<Intent>>,
    /// Seen by the controller to have succeeded, with the input that showed it.
    seen: BTreeMap<Intent, u64>,
}

impl Repeats {
    /// A command is issued against the object with `uid`: a violation message if the
    /// controller had already seen the same intent succeed.
    pub fn issued(&mut self, command: &Command, uid: &str) -> Option<String> {
        let intent = Intent::of(command, uid)?;
        let repeated = self.seen.contains_key(&intent);
        self.sent.insert(command.id, intent.clone());
        repeated.then(|| {
            format!(
                "repeated: {} on {} again after its success was observed",
                intent.action, intent.key
            )
        })
    }

    /// The API carried the command out (whether or not the controller will hear of it).
    pub fn carried_out(&mut self, command: u64) {
        if let Some(intent) = self.sent.get(&command) {
            self.unseen
                .entry(intent.key.clone())
                .or_default()
                .insert(intent.clone());
        }
    }

    /// Input `seq` reaches the controller: answers and watch events it shows.
    pub fn observe(&mut self, input: &Input, seq: u64) {
        match input {
            Input::ApiResult { command, outcome } => {
                let Some(intent) = self.sent.remove(command) else {
                    return;
                };
                if matches!(outcome, ApiOutcome::Ok { .. } | ApiOutcome::NotFound) {
                    if let Some(unseen) = self.unseen.get_mut(&intent.key) {
                        unseen.remove(&intent);
                    }
                    self.seen.insert(intent, seq);
                }
            }
            Input::Upsert { scope, object } => {
                let key = object.key(scope);
                self.see(&key, seq, |i| i.shown_by(object));
            }
            Input::Delete { key } => self.see(key, seq, |_| true),
            Input::Relist { .. } | Input::RelistKind { .. } => {
                let Some(relist) = input.as_relist() else {
                    return;
                };
                let listed: BTreeMap<ObjectKey, &Object> = relist
                    .objects
                    .iter()
                    .map(|o| (o.key(relist.scope), o))
                    .collect();
                let keys: Vec<ObjectKey> = self
                    .unseen
                    .keys()
                    .filter(|k| relist.covers(k))
                    .cloned()
                    .collect();
                for key in keys {
                    match listed.get(&key) {
                        Some(object) => self.see(&key, seq, |i| i.shown_by(object)),
                        None => self.see(&key, seq, |_| true),
                    }
                }
            }
            Input::Batch { inputs } => inputs.iter().for_each(|i| self.observe(i, seq)),
            Input::Tick
            | Input::Restarted
            | Input::Unlisted { .. }
            | Input::Unwatched { .. }
            | Input::ClusterUnreachable { .. }
            | Input::Ownership(_)
            | Input::OwnMachines(_)
            | Input::Overridden { .. }
            | Input::CapiRelease(_) => {}
        }
    }

    fn see(&mut self, key: &ObjectKey, seq: u64, shown: impl Fn(&Intent) -> bool) {
        let Some(unseen) = self.unseen.get_mut(key) else {
            return;
        };
        let now_seen: Vec<Intent> = unseen.iter().filter(|i| shown(i)).cloned().collect();
        for intent in now_seen {
            unseen.remove(&intent);
            self.seen.insert(intent, seq);
        }
        if unseen.is_empty() {
            self.unseen.remove(key);
        }
    }

    /// A crash lost the journal from `seq + 1` on: what those inputs showed is unseen again.
    pub fn forget_after(&mut self, seq: u64) {
        let lost: Vec<Intent> = self
            .seen
            .iter()
            .filter(|(_, s)| **s > seq)
            .map(|(i, _)| i.clone())
            .collect();
        for intent in lost {
            self.seen.remove(&intent);
            self.unseen
                .entry(intent.key.clone())
                .or_default()
                .insert(intent);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use engine::model::{MACHINE_FINALIZER, Scope};
    use engine::{ControllerId, Target, testing};

    pub(crate) fn release(id: u64) -> Command {
        let key = ObjectKey::management(engine::model::Kind::Machine, "default", "m1");
        Command {
            id,
            cause: 1,
            controller: ControllerId::Deletion,
            owner: key.clone(),
            action: Action::RemoveFinalizer {
                target: Target {
                    key,
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                finalizer: MACHINE_FINALIZER.into(),
            },
            reason: String::new(),
            series: None,
        }
    }

    pub(crate) fn m1(finalizers: &[&str]) -> Input {
        let mut m = testing::machine("c1", "m1", None);
        m.meta.uid = "uid-1".into();
        m.meta.finalizers = finalizers.iter().map(|f| f.to_string()).collect();
        Input::Upsert {
            scope: Scope::Management,
            object: Box::new(Object::Machine(m)),
        }
    }

    #[test]
    fn again_after_an_ok_answer_is_a_repeat() {
        let mut r = Repeats::default();
        assert_eq!(r.issued(&release(1), "uid-1"), None);
        r.carried_out(1);
        r.observe(
            &Input::ApiResult {
                command: 1,
                outcome: ApiOutcome::Ok { object: None },
            },
            5,
        );
        assert!(r.issued(&release(2), "uid-1").is_some());
        // Another object under the same name is a new intent.
        assert_eq!(r.issued(&release(3), "uid-2"), None);
    }

    #[test]
    fn again_after_a_watch_event_showing_the_effect_is_a_repeat() {
        let mut r = Repeats::default();
        r.issued(&release(1), "uid-1");
        r.carried_out(1);
        r.observe(&m1(&[MACHINE_FINALIZER]), 5);
        assert_eq!(r.issued(&release(2), "uid-1"), None, "effect not shown yet");
        r.carried_out(2);
        r.observe(&m1(&[]), 6);
        assert!(r.issued(&release(3), "uid-1").is_some());
    }

    #[test]
    fn a_success_the_controller_never_saw_may_be_retried() {
        let mut r = Repeats::default();
        r.issued(&release(1), "uid-1");
        r.carried_out(1);
        let timeout = ApiOutcome::Unreachable {
            message: "operation timed out".into(),
        };
        r.observe(
            &Input::ApiResult {
                command: 1,
                outcome: timeout,
            },
            5,
        );
        assert_eq!(r.issued(&release(2), "uid-1"), None);
    }

    #[test]
    fn what_a_torn_journal_lost_is_unseen_again() {
        let mut r = Repeats::default();
        r.issued(&release(1), "uid-1");
        r.carried_out(1);
        r.observe(&m1(&[]), 9);
        r.forget_after(8);
        assert_eq!(r.issued(&release(2), "uid-1"), None);
    }
}
