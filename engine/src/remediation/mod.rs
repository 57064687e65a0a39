//! Remediation of Machines an MHC found unhealthy.
//!
//! Two halves: [`owner`] is the MachineSet side of the default, condition-based remediation
//! (`engine/docs/capi.md` §2.7: a MachineSet deletes its Machines whose `OwnerRemediated` is False),
//! registered as its own controller, [`OwnerRemediation`]; [`external`] builds and names the
//! external remediation requests an MHC with a `remediationTemplate` creates (§2.5), which the
//! health controller issues. What this shares with the health check (condition names and
//! edits, scaling) lives in [`crate::shared`], so neither imports the other.

pub mod external;
pub mod owner;

use crate::command::{Command, ControllerId};
use crate::controller::{Controller, Cx};
use crate::input::ApiOutcome;
use crate::model::{Kind, ObjectKey};
use crate::store::{Change, Store};
use crate::time::Timestamp;
use crate::timer::FiredTimer;
use serde::{Deserialize, Serialize};

/// MachineSet owner remediation as a controller. It keeps no state: every decision is read
/// from the cache, and a write in flight holds the MachineSet until its answer (which the
/// engine follows with a reconcile of the MachineSet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRemediation;

impl Controller for OwnerRemediation {
    fn id(&self) -> ControllerId {
        ControllerId::Remediation
    }

    fn affected(&self, store: &Store, change: &Change, out: &mut Vec<ObjectKey>) {
        owner::affected(store, change, out);
    }

    fn reconcile(&mut self, key: &ObjectKey, cx: &mut Cx<'_>) {
        if key.kind == Kind::MachineSet {
            owner::reconcile(key, cx);
        }
    }

    fn on_result(&mut self, _command: &Command, _outcome: &ApiOutcome, _now: Timestamp) {}

    fn take_due(&mut self, _now: Timestamp, _fired: &mut Vec<FiredTimer>) {}

    fn next_deadline(&self) -> Option<Timestamp> {
        None
    }
}
