//! What the controllers decided an object's conditions should be, whether or not the write
//! went out: a report of each input (like the timers it fired), not state. The simulator folds
//! them into what the controllers last decided and checks the API converges on it. The
//! deletion reports every pass's (its conditions include ones a step decides once, at its
//! end); the health check and the MachinePool, whose conditions each reconcile derives anew
//! from what they observe, report none yet.

use crate::command::ControllerId;
use crate::model::{Condition, Conditions, Object, ObjectKey};

/// Conditions one controller set on one object in one reconcile (only those it set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub controller: ControllerId,
    pub target: ObjectKey,
    pub conditions: Conditions,
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
