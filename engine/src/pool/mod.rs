//! Placeholder registry entry; the controller lands with its issue.

use crate::command::{Command, ControllerId};
use crate::controller::{Controller, Cx};
use crate::input::ApiOutcome;
use crate::model::ObjectKey;
use crate::store::{Change, Store};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pools {}

impl Controller for Pools {
    fn id(&self) -> ControllerId {
        ControllerId::Pool
    }
    fn affected(&self, _store: &Store, _change: &Change, _out: &mut Vec<ObjectKey>) {}
    fn reconcile(&mut self, _key: &ObjectKey, _cx: &mut Cx<'_>) {}
    fn on_result(&mut self, _command: &Command, _outcome: &ApiOutcome, _now: Timestamp) {}
    fn take_due(&mut self, _now: Timestamp, _out: &mut Vec<ObjectKey>) {}
    fn next_deadline(&self) -> Option<Timestamp> {
        None
    }
}
