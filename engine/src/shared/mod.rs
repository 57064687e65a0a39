//! What the health check and MachineSet remediation share without depending on each other:
//! the condition types they hand over between them, condition edits, how CAPI objects are
//! addressed, and int-or-percent scaling.

pub mod conditions;
pub mod scaled;

use crate::command::Target;
use crate::model::{ApiVersion, ObjectKey};

/// Written by the MHC on every target; owner remediation reads it.
pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
/// `OwnerRemediated` (same type name in both API versions): set False by the MHC, acted on and
/// cleared by the owner.
pub const OWNER_REMEDIATED: &str = "OwnerRemediated";
/// `ExternallyRemediated` (v1beta2 only).
pub const EXTERNALLY_REMEDIATED: &str = "ExternallyRemediated";

/// The apiVersion CAPI objects are written in, per the version they were read in.
pub fn capi_api_version(version: ApiVersion) -> &'static str {
    match version {
        ApiVersion::V1Beta1 => "cluster.x-k8s.io/v1beta1",
        ApiVersion::V1Beta2 => "cluster.x-k8s.io/v1beta2",
    }
}

pub fn capi_target(key: ObjectKey, version: ApiVersion) -> Target {
    Target {
        key,
        api_version: capi_api_version(version).to_string(),
    }
}
