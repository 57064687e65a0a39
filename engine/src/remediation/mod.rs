//! Remediation of Machines an MHC found unhealthy.
//!
//! Two halves: [`owner`] is the MachineSet side of the default, condition-based remediation
//! (CAPI-SEMANTICS §2.7: a MachineSet deletes its Machines whose `OwnerRemediated` is False);
//! [`external`] builds and names the external remediation requests an MHC with a
//! `remediationTemplate` creates (§2.5). Both run inside the `HealthChecks` controller slot;
//! their commands carry [`crate::ControllerId::Remediation`].

pub mod external;
pub mod owner;

use crate::command::Target;
use crate::model::{ApiVersion, ObjectKey};

/// `OwnerRemediated` (same type name in both API versions).
pub const OWNER_REMEDIATED: &str = "OwnerRemediated";
/// `ExternallyRemediated` (v1beta2 only).
pub const EXTERNALLY_REMEDIATED: &str = "ExternallyRemediated";

pub fn capi_target(key: ObjectKey, version: ApiVersion) -> Target {
    Target {
        key,
        api_version: version.capi().to_string(),
    }
}
