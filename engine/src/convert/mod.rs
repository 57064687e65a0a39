//! The one mapping between Kubernetes JSON and the engine: objects in, API requests out.
//!
//! The simulator and the kube adapter both use it, so a field read one way in tests is read the
//! same way against a real cluster. Pure functions, no I/O.
//!
//! * [`object_from_json`] reads an object as `kubectl get -o json` prints it (CAPI kinds in
//!   `cluster.x-k8s.io/v1beta1` or `v1beta2`) into the version-neutral [`crate::model`].
//!   Kinds the engine does not model are `Ok(None)`; a malformed object is a [`ConvertError`]
//!   naming the field, never a panic. Content the controllers must judge (a label selector with
//!   an unknown operator, a `maxUnhealthy` of `abc`) is not an error: it is kept for them.
//! * [`conditions_json`] writes both condition lists where the object's API version keeps them.
//! * [`request_for`] turns a [`crate::Command`] into one concrete [`ApiRequest`].

mod capi;
mod common;
mod core;
mod external;
mod field;
mod request;
mod status;

#[cfg(test)]
mod tests_capi;
#[cfg(test)]
mod tests_core;
#[cfg(test)]
mod tests_request;

pub use request::{
    ApiRequest, FinalizerChange, Subresource, api_path, collection_path, eviction_body,
    finalizer_json_patch, plural, request_for,
};
pub use status::{capi_version_of, condition_json, conditions_json};

use crate::model::{ApiVersion, Kind, Object, ObjectKey, ObjectMeta, Scope, Unreadable};
use field::At;
use serde_json::Value;
use std::fmt;

/// A JSON object of `members`, in their order, the values moved in: `json!` would copy each
/// value it is given through `serde_json::to_value` (a whole condition list, twice per write).
pub fn object<const N: usize>(members: [(&str, Value); N]) -> Value {
    Value::Object(
        members
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect(),
    )
}

/// Up to how many members an object is searched by a scan rather than through its index.
const SCAN_UP_TO: usize = 16;

/// The member `name` of a JSON object (`None` when absent or not an object). Kubernetes
/// objects are small maps, a handful of members per level: comparing lengths and then bytes
/// along their entries is cheaper than hashing `name` (SipHash) and three dependent loads
/// through the map's index.
pub fn member<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    let map = value.as_object()?;
    if map.len() <= SCAN_UP_TO {
        map.iter().find(|(k, _)| same_name(k, name)).map(|(_, v)| v)
    } else {
        map.get(name)
    }
}

/// [`member`], to change.
pub fn member_mut<'a>(value: &'a mut Value, name: &str) -> Option<&'a mut Value> {
    let map = value.as_object_mut()?;
    if map.len() <= SCAN_UP_TO {
        map.iter_mut()
            .find(|(k, _)| same_name(k, name))
            .map(|(_, v)| v)
    } else {
        map.get_mut(name)
    }
}

/// Member names of one length often differ in their first byte (`kind`, `spec`, `name`):
/// compared first, it spares most calls to `memcmp`.
fn same_name(key: &str, name: &str) -> bool {
    key.len() == name.len() && key.as_bytes().first() == name.as_bytes().first() && key == name
}

/// The value a JSON pointer (RFC 6901: `/spec/infrastructureRef/kind`, `/items/0`) refers
/// to, as [`Value::pointer`] finds it, with members found by [`member`] and no allocation for
/// a token without escapes.
pub fn pointer<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(value);
    }
    split_ascii(pointer.strip_prefix('/')?, b'/').try_fold(value, |target, token| {
        let token: std::borrow::Cow<str> = if token.as_bytes().contains(&b'~') {
            token.replace("~1", "/").replace("~0", "~").into()
        } else {
            token.into()
        };
        match target {
            Value::Object(_) => member(target, &token),
            Value::Array(items) => array_index(&token).and_then(|i| items.get(i)),
            _ => None,
        }
    })
}

/// `s` split at every `separator` (an ASCII byte) as `str::split` splits it, by a byte scan:
/// the paths split here are a few short tokens, for which `split(char)`'s searcher (set up per
/// token, then `memchr`) cost several times the scan.
pub fn split_ascii(s: &str, separator: u8) -> impl Iterator<Item = &str> {
    debug_assert!(
        separator.is_ascii(),
        "a byte of a multi-byte character is no boundary"
    );
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.bytes().position(|b| b == separator) {
            Some(i) => {
                rest = Some(&r[i + 1..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// An array index as a JSON pointer spells it: digits, no sign, no leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// A field of an object that cannot be read: `spec.nodeDrainTimeout: "10x" is not a duration`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertError {
    /// Dotted path of the field (`status.conditions[1].status`); empty for the whole object.
    pub path: String,
    pub message: String,
}

impl ConvertError {
    pub fn new(path: &str, message: impl Into<String>) -> Self {
        ConvertError {
            path: path.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConvertError {}

/// The CAPI core group; its kinds are modelled one by one, other kinds in it and every
/// `*.cluster.x-k8s.io` group (infrastructure, bootstrap, controlplane, ...) are provider objects.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";

fn is_capi_group(group: &str) -> bool {
    group == CAPI_GROUP || group.ends_with(".cluster.x-k8s.io")
}

/// What `apiVersion` and `kind` say about an object.
struct TypeInfo<'a> {
    api_version: &'a str,
    group: &'a str,
    version: &'a str,
    kind_name: &'a str,
    /// The model kind; `External` also for kinds outside the CAPI groups (not modelled).
    kind: Kind,
    /// The `apiVersion` field, for errors about it.
    api_version_at: At<'a>,
}

impl TypeInfo<'_> {
    fn is_modelled(&self) -> bool {
        match &self.kind {
            Kind::External(_) => is_capi_group(self.group),
            _ => true,
        }
    }

    /// The CAPI API version of a core CAPI kind.
    fn capi_version(&self) -> Result<ApiVersion, ConvertError> {
        match self.version {
            "v1beta1" => Ok(ApiVersion::V1Beta1),
            "v1beta2" => Ok(ApiVersion::V1Beta2),
            other => Err(self.api_version_at.error(format!(
                "{other:?} is not a supported version of {} (use v1beta1 or v1beta2)",
                self.group
            ))),
        }
    }
}

fn type_info<'a>(root: &At<'a>) -> Result<TypeInfo<'a>, ConvertError> {
    let api_version_at = root.get("apiVersion");
    let kind_at = root.get("kind");
    let Some(Value::String(api_version)) = api_version_at.value() else {
        return Err(api_version_at.error("required"));
    };
    let Some(Value::String(kind_name)) = kind_at.value() else {
        return Err(kind_at.error("required"));
    };
    if api_version.is_empty() {
        return Err(api_version_at.error("required"));
    }
    if kind_name.is_empty() {
        return Err(kind_at.error("required"));
    }
    let (group, version) = api_version
        .rsplit_once('/')
        .unwrap_or(("", api_version.as_str()));
    Ok(TypeInfo {
        api_version,
        group,
        version,
        kind_name,
        kind: Kind::from_group_kind(group, kind_name),
        api_version_at,
    })
}

/// Reads one Kubernetes object. `Ok(None)` for kinds the engine does not model (Secrets,
/// ReplicaSets, Events, ...).
///
/// Errors name the field: `spec.nodeDrainTimeout: "10x" is not a duration: unknown unit "x"`.
/// Namespaces are taken as written (the API server always fills them in); references without a
/// namespace get the referrer's.
pub fn object_from_json(value: &Value) -> Result<Option<Object>, ConvertError> {
    let root = At::root(value).object()?;
    if !root.is_present() {
        return Err(root.error("expected an object, got null"));
    }
    let info = type_info(&root)?;
    if !info.is_modelled() {
        return Ok(None);
    }
    let object = match &info.kind {
        Kind::Cluster => Object::Cluster(capi::cluster(&root, info.capi_version()?)?),
        Kind::Machine => Object::Machine(capi::machine(&root, info.capi_version()?)?),
        Kind::MachineSet => Object::MachineSet(capi::machine_set(&root, info.capi_version()?)?),
        Kind::MachineDeployment => {
            Object::MachineDeployment(capi::machine_deployment(&root, info.capi_version()?)?)
        }
        Kind::MachineHealthCheck => {
            Object::MachineHealthCheck(capi::machine_health_check(&root, info.capi_version()?)?)
        }
        Kind::MachinePool => Object::MachinePool(capi::machine_pool(&root, info.capi_version()?)?),
        Kind::MachineDrainRule => {
            info.capi_version()?;
            Object::MachineDrainRule(capi::machine_drain_rule(&root)?)
        }
        Kind::External(_) => Object::External(external::external(
            &root,
            info.group,
            info.kind_name,
            info.api_version,
        )?),
        Kind::Node => Object::Node(core::node(&root)?),
        Kind::Pod => Object::Pod(core::pod(&root)?),
        Kind::PodDisruptionBudget => {
            Object::PodDisruptionBudget(core::pod_disruption_budget(&root)?)
        }
        Kind::DaemonSet => Object::DaemonSet(core::daemon_set(&root)?),
        Kind::Namespace => Object::Namespace(core::namespace(&root)?),
        Kind::PersistentVolume => Object::PersistentVolume(core::persistent_volume(&root)?),
        Kind::PersistentVolumeClaim => {
            Object::PersistentVolumeClaim(core::persistent_volume_claim(&root)?)
        }
        Kind::VolumeAttachment => Object::VolumeAttachment(core::volume_attachment(&root)?),
    };
    Ok(Some(object))
}

/// The object as the engine sees it: converted, [`Object::Unreadable`] when it does not
/// convert but its key reads, `None` for kinds the engine does not model (or no key at all).
pub fn object_or_unreadable(scope: &Scope, value: &Value) -> Option<Object> {
    match object_from_json(value) {
        Ok(object) => object,
        Err(e) => unreadable_of_json(scope, value, &e),
    }
}

/// What is known of an object that did not convert ([`object_from_json`] failed with
/// `problem`): its kind, name, namespace, uid and resourceVersion where those read, so the
/// store can keep it as existing but unknown. `None` when not even its key reads (or its kind
/// is not modelled).
pub fn unreadable_of_json(scope: &Scope, value: &Value, problem: &ConvertError) -> Option<Object> {
    let key = object_key_of_json(scope, value).ok()??;
    let meta = value.get("metadata");
    let text = |field: &str| {
        meta.and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let resource_version = text("resourceVersion").parse().unwrap_or(0);
    Some(Object::Unreadable(Unreadable {
        meta: ObjectMeta {
            name: key.name.to_string(),
            namespace: key.namespace.to_string(),
            uid: text("uid"),
            resource_version,
            ..ObjectMeta::default()
        },
        kind: key.kind.clone(),
        problem: problem.to_string(),
    }))
}

/// Which object a JSON object is and at which resourceVersion, read without converting it:
/// `None` for what [`object_from_json`] would not model or could not name, and for a
/// resourceVersion that is not a number (it then orders nothing).
pub struct Identity<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub resource_version: u64,
}

pub fn identity(value: &Value) -> Option<Identity<'_>> {
    let root = At::root(value).object().ok()?;
    let info = type_info(&root).ok()?;
    if !info.is_modelled() {
        return None;
    }
    let metadata = root.get("metadata").object().ok()?;
    let resource_version = common::resource_version(&metadata.get("resourceVersion"));
    if resource_version == 0 {
        return None;
    }
    Some(Identity {
        namespace: metadata
            .get("namespace")
            .value()
            .map_or(Some(""), Value::as_str)?,
        name: metadata.get("name").value()?.as_str()?,
        kind: info.kind,
        resource_version,
    })
}

/// The key an object would be stored under in `scope`, read from `apiVersion`, `kind` and
/// `metadata` only, so a watch DELETE of an object whose body no longer converts can still
/// remove it. `Ok(None)` for kinds the engine does not model.
pub fn object_key_of_json(scope: &Scope, value: &Value) -> Result<Option<ObjectKey>, ConvertError> {
    let root = At::root(value).object()?;
    let info = type_info(&root)?;
    if !info.is_modelled() {
        return Ok(None);
    }
    let metadata = root.get("metadata").object()?;
    let name = metadata.get("name").required_str()?;
    let namespace = metadata.get("namespace").str_or_empty()?;
    Ok(Some(ObjectKey::new(
        scope.clone(),
        info.kind,
        &namespace,
        &name,
    )))
}
