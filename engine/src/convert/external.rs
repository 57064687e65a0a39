//! Provider objects (`*.cluster.x-k8s.io`): read only through the CAPI contract fields.

use super::ConvertError;
use super::common::object_meta;
use super::field::{At, canonical_json};
use crate::model::{External, GroupKind};

pub(crate) fn external(
    root: &At,
    group: &str,
    kind: &str,
    api_version: &str,
) -> Result<External, ConvertError> {
    let spec = root.get("spec").object()?;
    let status = root.get("status").object()?;
    let initialization = status.get("initialization").object()?;
    let provider_id_list = spec.get("providerIDList");
    // Templates are copied into remediation requests verbatim; canonical text keeps the
    // engine state identical whichever order the API wrote the keys in.
    let template_json = if kind.ends_with("Template") {
        let template = spec.get("template").object()?;
        template.value().map(canonical_json)
    } else {
        None
    };
    Ok(External {
        meta: object_meta(root)?,
        group_kind: GroupKind {
            group: group.to_string(),
            kind: kind.to_string(),
        },
        api_version: api_version.to_string(),
        provider_id: spec.get("providerID").opt_str()?,
        ready: status.get("ready").opt_bool()?,
        provisioned: initialization.get("provisioned").opt_bool()?,
        data_secret_created: initialization.get("dataSecretCreated").opt_bool()?,
        data_secret_name: status.get("dataSecretName").opt_str()?,
        provider_id_list: if provider_id_list.is_present() {
            Some(provider_id_list.str_list()?)
        } else {
            None
        },
        status_replicas: status.get("replicas").opt_i32()?,
        infrastructure_machine_kind: status.get("infrastructureMachineKind").opt_str()?,
        failure_reason: status.get("failureReason").opt_str()?,
        failure_message: status.get("failureMessage").opt_str()?,
        external_managed_control_plane: status
            .get("externalManagedControlPlane")
            .bool_or_false()?,
        template_json,
    })
}
