//! What the controllers decided an object's conditions should be, whether or not the write
//! went out: a report of each input (like the timers it fired), not state. The simulator folds
//! them into what the controllers last decided and checks the API converges on it.

use crate::command::{Action, ControllerId};
use crate::model::{Condition, Conditions, Object, ObjectKey};

/// Conditions one controller set on one object in one reconcile (only those it set), and the
/// types it removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub controller: ControllerId,
    pub target: ObjectKey,
    pub conditions: Conditions,
    pub removed: Removed,
}

/// Condition types decided absent, per list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub current: Vec<String>,
    pub legacy: Vec<String>,
}

impl Removed {
    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.legacy.is_empty()
    }
}

/// The types of `observed` that `written` leaves out.
fn removed(written: &[Condition], observed: &[Condition]) -> Vec<String> {
    observed
        .iter()
        .filter(|c| crate::model::find_condition(written, &c.type_).is_none())
        .map(|c| c.type_.clone())
        .collect()
}

/// What a condition write decides: its conditions that differ from `observed`, and the types
/// of `observed` it leaves out.
pub fn of_write(action: &Action, observed: Option<&Conditions>) -> Option<(Conditions, Removed)> {
    let written = match action {
        Action::SetCondition { conditions, .. } | Action::SetOwnCondition { conditions, .. } => {
            conditions
        }
        _ => return None,
    };
    let empty = Conditions::default();
    let observed = observed.unwrap_or(&empty);
    let changed = |list: &[Condition], seen: &[Condition]| -> Vec<Condition> {
        list.iter()
            .filter(|c| crate::model::find_condition(seen, &c.type_) != Some(*c))
            .cloned()
            .collect()
    };
    let set = Conditions {
        current: changed(&written.current, &observed.current),
        legacy: changed(&written.legacy, &observed.legacy),
    };
    let gone = Removed {
        current: removed(&written.current, &observed.current),
        legacy: removed(&written.legacy, &observed.legacy),
    };
    Some((set, gone))
}

/// The conditions of an object that has them.
pub fn conditions_of(object: &Object) -> Option<&Conditions> {
    match object {
        Object::Cluster(c) => Some(&c.conditions),
        Object::Machine(m) => Some(&m.conditions),
        Object::MachineHealthCheck(m) => Some(&m.conditions),
        Object::MachinePool(p) => Some(&p.conditions),
        _ => None,
    }
}

/// Puts `c` in `list` as it is, replacing the condition of its type.
pub fn put(list: &mut Vec<Condition>, c: Condition) {
    match list.iter_mut().find(|x| x.type_ == c.type_) {
        Some(existing) => *existing = c,
        None => list.push(c),
    }
}

/// The decisions of the last input; equal whatever they hold, so a rebuilt engine equals the
/// live one.
#[derive(Clone, Debug, Default)]
pub(crate) struct Decided(pub Vec<Decision>);

impl PartialEq for Decided {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Decided {}
