//! Who the CAPI model writes as: the field manager of CAPI's controllers. A file of its own so
//! that the model's parts (`capi`, `capi_conditions`) name it without importing each other.

use crate::api::Part;

/// The field manager CAPI's controllers write as: controller-runtime names it after the
/// binary from its User-Agent, and upstream's binary is `manager`.
pub const FIELD_MANAGER: &str = "manager";

/// CAPI's manager writing `part` of an object, as `managedFields` name it.
pub(crate) fn writer(part: Part) -> crate::api::managed::Writer {
    let subresource = (part == Part::Status).then_some(crate::api::managed::Subresource::Status);
    crate::api::managed::Writer::new(FIELD_MANAGER, subresource)
}
