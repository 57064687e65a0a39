//! What the controllers decided an object's conditions should be, whether or not the write
//! went out: a report of each input (like the timers it fired), not state. The simulator folds
//! them into what the controllers last decided and checks the API converges on it.
//!
//! A deletion pass decides the conditions of its steps ([`Extent::Part`]): each stands until a
//! later pass decides its type again (a step's condition is decided once, at its end). The
//! health check and the MachinePool derive their object's conditions anew on every reconcile
//! ([`Extent::Whole`]): what a reconcile leaves out is no longer decided, and a reconcile that
//! decides none (paused, waiting, an object takeover has not adopted) withdraws them all.

use crate::command::ControllerId;
use crate::model::{Condition, Conditions, Object, ObjectKey};
use crate::shared::conditions::List;

/// Conditions one controller decided for one object in one reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub controller: ControllerId,
    pub target: ObjectKey,
    /// The conditions decided present, as they would be written.
    pub conditions: Conditions,
    /// The condition types decided absent.
    pub absent: Vec<(List, &'static str)>,
    pub extent: Extent,
}

/// How a decision stands beside the same controller's earlier ones about the same object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Beside them: only the types it names change.
    Part,
    /// Instead of them: it is everything the controller now decides about the object.
    Whole,
}

impl Decision {
    /// A deletion pass's conditions ([`Extent::Part`]).
    pub fn part(controller: ControllerId, target: ObjectKey, conditions: Conditions) -> Decision {
        Decision {
            controller,
            target,
            conditions,
            absent: Vec::new(),
            extent: Extent::Part,
        }
    }

    /// Everything a reconcile decides about the object's conditions ([`Extent::Whole`]).
    pub fn whole(
        controller: ControllerId,
        target: ObjectKey,
        conditions: Conditions,
        absent: Vec<(List, &'static str)>,
    ) -> Decision {
        Decision {
            controller,
            target,
            conditions,
            absent,
            extent: Extent::Whole,
        }
    }

    /// A reconcile that decides no condition of the object (its earlier decisions withdrawn).
    pub fn none(controller: ControllerId, target: ObjectKey) -> Decision {
        Decision::whole(controller, target, Conditions::default(), Vec::new())
    }

    /// Whether it says nothing (a part with no condition).
    pub fn is_empty(&self) -> bool {
        self.extent == Extent::Part
            && self.conditions.current.is_empty()
            && self.conditions.legacy.is_empty()
            && self.absent.is_empty()
    }
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
pub(crate) struct Decisions(pub Vec<Decision>);

impl PartialEq for Decisions {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Decisions {}
