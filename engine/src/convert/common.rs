//! Pieces shared by every kind: metadata, condition lists, references, label selectors.

use super::ConvertError;
use super::field::At;
use crate::model::{
    ApiVersion, Condition, ConditionStatus, Conditions, LabelSelector, ObjectMeta, ObjectRef,
    OwnerReference, SelectorOperator, SelectorRequirement, Severity, is_valid_label_value,
    label_key_problem,
};

pub(crate) fn object_meta(root: &At) -> Result<ObjectMeta, ConvertError> {
    let m = root.get("metadata").object()?;
    let owner_references = m
        .get("ownerReferences")
        .items()?
        .iter()
        .map(owner_reference)
        .collect::<Result<_, _>>()?;
    Ok(ObjectMeta {
        name: m.get("name").required_str()?,
        namespace: m.get("namespace").str_or_empty()?,
        uid: m.get("uid").str_or_empty()?,
        resource_version: resource_version(&m.get("resourceVersion")),
        generation: m.get("generation").opt_i64()?.unwrap_or(0),
        labels: m.get("labels").str_map()?,
        annotations: m.get("annotations").str_map()?,
        finalizers: m.get("finalizers").str_list()?,
        owner_references,
        creation_timestamp: m.get("creationTimestamp").opt_timestamp()?,
        deletion_timestamp: m.get("deletionTimestamp").opt_timestamp()?,
    })
}

/// `metadata.resourceVersion` is opaque to clients; the fake API and etcd both use decimal
/// counters, so a number is kept and anything else reads as 0 (never an error: it only orders).
pub(super) fn resource_version(at: &At) -> u64 {
    match at.value() {
        Some(serde_json::Value::String(s)) => s.parse().unwrap_or(0),
        Some(serde_json::Value::Number(n)) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn owner_reference(at: &At) -> Result<OwnerReference, ConvertError> {
    let at = at.object()?;
    Ok(OwnerReference {
        api_version: at.get("apiVersion").str_or_empty()?,
        kind: at.get("kind").str_or_empty()?,
        name: at.get("name").str_or_empty()?,
        uid: at.get("uid").str_or_empty()?,
        controller: at.get("controller").bool_or_false()?,
    })
}

/// A condition list (CAPI v1beta1 `Condition` with `severity`, or `metav1.Condition`).
pub(crate) fn condition_list(at: &At) -> Result<Vec<Condition>, ConvertError> {
    at.items()?.iter().map(condition).collect()
}

fn condition(at: &At) -> Result<Condition, ConvertError> {
    let at = at.object()?;
    Ok(Condition {
        type_: at.get("type").required_str()?,
        status: condition_status(&at.get("status"))?,
        reason: at.get("reason").str_or_empty()?,
        message: at.get("message").str_or_empty()?,
        severity: severity(&at.get("severity"))?,
        last_transition_time: at.get("lastTransitionTime").opt_timestamp()?,
    })
}

pub(crate) fn condition_status(at: &At) -> Result<ConditionStatus, ConvertError> {
    let text = at.required_str()?;
    ConditionStatus::parse(&text).ok_or_else(|| {
        at.error(format!(
            "{text:?} is not a condition status (use True, False or Unknown)"
        ))
    })
}

fn severity(at: &At) -> Result<Severity, ConvertError> {
    match at.opt_str()?.as_deref() {
        None | Some("") => Ok(Severity::None),
        Some("Info") => Ok(Severity::Info),
        Some("Warning") => Ok(Severity::Warning),
        Some("Error") => Ok(Severity::Error),
        Some(other) => Err(at.error(format!(
            "{other:?} is not a condition severity (use Info, Warning or Error)"
        ))),
    }
}

/// Both condition lists of a CAPI object, from where its API version keeps them
/// (`engine/docs/capi.md` decision 1): v1beta1 `status.conditions` are the legacy list and
/// `status.v1beta2.conditions` the current one; v1beta2 `status.conditions` are the current
/// list and `status.deprecated.v1beta1.conditions` the legacy one.
pub(crate) fn capi_conditions(root: &At, version: ApiVersion) -> Result<Conditions, ConvertError> {
    let status = root.get("status").object()?;
    match version {
        ApiVersion::V1Beta1 => Ok(Conditions {
            legacy: condition_list(&status.get("conditions"))?,
            current: condition_list(&status.at("v1beta2.conditions"))?,
        }),
        ApiVersion::V1Beta2 => Ok(Conditions {
            current: condition_list(&status.get("conditions"))?,
            legacy: condition_list(&status.at("deprecated.v1beta1.conditions"))?,
        }),
    }
}

/// The part of an `apiVersion` before the `/` (`""` for the core group `v1`).
pub(crate) fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map_or("", |(group, _version)| group)
}

/// A v1beta1 `ObjectReference` (`apiVersion`, `kind`, `name`, `namespace`); an empty
/// namespace is the referrer's.
pub(crate) fn object_reference(
    at: &At,
    referrer_namespace: &str,
) -> Result<Option<ObjectRef>, ConvertError> {
    if !at.is_present() {
        return Ok(None);
    }
    let at = at.object()?;
    let api_version = at.get("apiVersion").str_or_empty()?;
    let namespace = at.get("namespace").str_or_empty()?;
    Ok(Some(ObjectRef {
        api_group: group_of(&api_version).to_string(),
        api_version: (!api_version.is_empty()).then_some(api_version),
        kind: at.get("kind").str_or_empty()?,
        name: at.get("name").str_or_empty()?,
        namespace: if namespace.is_empty() {
            referrer_namespace.to_string()
        } else {
            namespace
        },
    }))
}

/// A v1beta2 contract reference (`apiGroup`, `kind`, `name`), always in the referrer's namespace.
pub(crate) fn contract_reference(
    at: &At,
    referrer_namespace: &str,
) -> Result<Option<ObjectRef>, ConvertError> {
    if !at.is_present() {
        return Ok(None);
    }
    let at = at.object()?;
    Ok(Some(ObjectRef {
        api_group: at.get("apiGroup").str_or_empty()?,
        api_version: None,
        kind: at.get("kind").str_or_empty()?,
        name: at.get("name").str_or_empty()?,
        namespace: referrer_namespace.to_string(),
    }))
}

/// A provider reference in whichever shape the object's API version uses.
pub(crate) fn provider_reference(
    at: &At,
    version: ApiVersion,
    referrer_namespace: &str,
) -> Result<Option<ObjectRef>, ConvertError> {
    match version {
        ApiVersion::V1Beta1 => object_reference(at, referrer_namespace),
        ApiVersion::V1Beta2 => contract_reference(at, referrer_namespace),
    }
}

/// A `metav1.LabelSelector`, `None` when absent. A malformed requirement is not an error: the
/// selector keeps `invalid` so the controller that owns it can report it (as upstream does when
/// `metav1.LabelSelectorAsSelector` fails).
pub(crate) fn opt_label_selector(at: &At) -> Result<Option<LabelSelector>, ConvertError> {
    if !at.is_present() {
        return Ok(None);
    }
    let at = at.object()?;
    let mut selector = LabelSelector {
        match_labels: at.get("matchLabels").str_map()?,
        ..LabelSelector::default()
    };
    for (key, value) in &selector.match_labels {
        if selector.invalid.is_some() {
            break;
        }
        if let Some(problem) = label_key_problem(key) {
            selector.invalid = Some(format!("{}.matchLabels: {problem}", at.path()));
        } else if !is_valid_label_value(value) {
            selector.invalid = Some(format!(
                "{}.matchLabels: {value:?} is not a valid label value for {key:?}",
                at.path()
            ));
        }
    }
    for item in at.get("matchExpressions").items()? {
        let item = item.object()?;
        let key = item.get("key").str_or_empty()?;
        let operator = item.get("operator").str_or_empty()?;
        let values = item.get("values").str_list()?;
        match requirement(key, &operator, values) {
            Ok(r) => selector.match_expressions.push(r),
            Err(reason) => {
                if selector.invalid.is_none() {
                    selector.invalid = Some(format!("{}: {reason}", item.path()));
                }
            }
        }
    }
    Ok(Some(selector))
}

/// A `metav1.LabelSelector`, the empty selector when absent.
pub(crate) fn label_selector(at: &At) -> Result<LabelSelector, ConvertError> {
    Ok(opt_label_selector(at)?.unwrap_or_default())
}

/// One requirement, checked as `metav1.LabelSelectorAsSelector` checks it (messages are
/// apimachinery's).
fn requirement(
    key: String,
    operator: &str,
    values: Vec<String>,
) -> Result<SelectorRequirement, String> {
    if key.is_empty() {
        return Err("key: required".to_string());
    }
    if let Some(problem) = label_key_problem(&key) {
        return Err(format!("key: {problem}"));
    }
    let operator = match operator {
        "In" => SelectorOperator::In,
        "NotIn" => SelectorOperator::NotIn,
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        other => return Err(format!("{other:?} is not a valid label selector operator")),
    };
    match operator {
        SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => {
            Err("for 'in', 'notin' operators, values set can't be empty".to_string())
        }
        SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => {
            Err("values set must be empty for exists and does not exist".to_string())
        }
        SelectorOperator::In
        | SelectorOperator::NotIn
        | SelectorOperator::Exists
        | SelectorOperator::DoesNotExist => Ok(SelectorRequirement {
            key,
            operator,
            values,
        }),
    }
}
