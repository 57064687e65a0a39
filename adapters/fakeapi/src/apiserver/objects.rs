//! Single-object verbs: GET, POST (create), PUT (replace), PATCH, DELETE and the pod eviction
//! subresource. Every write is a `ClusterStore` call (create, patch, delete, mark_deleting,
//! remove, or `eviction::evict`), so the server has the simulator's semantics: finalizers and
//! `deletionTimestamp`, status subresource separation, generation bumps.
//!
//! PUT and JSON patch are applied to a copy of the stored object and handed to the store as
//! the merge patch between the two ([`super::patch::merge_diff`]); server-managed metadata
//! (uid, resourceVersion, generation, timestamps) is never taken from a client; what it sends
//! in `managedFields` is judged as the real server judges it ([`sim::api::managed::Sent`]),
//! and every write is recorded there under its field manager.

use super::Query;
use super::labels;
use super::patch::{
    SERVER_FIELDS, apply_json_patch, keep_server_fields, merge_diff, strip_directives,
};
use super::resources::ResourceType;
use super::secrets;
use super::state::SharedCluster;
use super::status::{Failure, success};
use super::validate::{self, FieldValidation};
use engine::Timestamp;
use serde_json::{Value, json};
use sim::api::managed::{Sent, Subresource, Writer};
use sim::api::{ClusterStore, ObjKey, Part, Written, eviction, json as sjson};

/// The object a request addresses.
pub struct ObjectRef<'a> {
    pub t: &'a ResourceType,
    pub group_version: String,
    /// The namespace of the path (empty for cluster-scoped types).
    pub namespace: String,
    pub name: String,
}

impl ObjectRef<'_> {
    pub(super) fn key(&self) -> ObjKey {
        ObjKey::new(&self.t.group, &self.t.kind, &self.namespace, &self.name)
    }
}

/// A successful answer: HTTP code, body and `Warning` header texts.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub code: u16,
    pub body: Value,
    pub warnings: Vec<String>,
}

impl From<(u16, Value)> for Reply {
    fn from((code, body): (u16, Value)) -> Self {
        Reply {
            code,
            body,
            warnings: Vec::new(),
        }
    }
}

/// The answer of a verb.
pub type Answer = Result<Reply, Failure>;

/// How a write was asked to run (`?dryRun=All`, `?fieldValidation=`), by whom and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// Its field manager (`?fieldManager=`, else from the User-Agent), as `managedFields`
    /// name it.
    pub manager: String,
    pub now: Timestamp,
}

impl WriteOptions {
    /// The writer of `subresource` (`None`: the main resource).
    pub(super) fn writer(&self, subresource: Option<Subresource>) -> Writer {
        Writer::new(&self.manager, subresource)
    }
}

/// Validates `candidate` (the object as the write would store it): its labels and annotations,
/// and for a custom resource its CRD schema, which also prunes its unknown fields in place.
/// `old` is the stored object an update replaces. Returns the `Warning` texts (unknown fields,
/// with `fieldValidation=Warn`).
fn admit(
    r: &ObjectRef,
    candidate: &mut Value,
    old: Option<&Value>,
    field_validation: FieldValidation,
) -> Result<Vec<String>, Failure> {
    let mut causes = labels::causes(candidate, old);
    let mut unknown = Vec::new();
    let api_version = sjson::api_version(candidate).to_string();
    let version = api_version.rsplit('/').next().unwrap_or_default();
    if let Some(schema) =
        validate::schema_for(&r.t.group, &r.t.kind, version).filter(|_| r.t.custom)
    {
        let outcome = validate::check(schema, candidate, old);
        unknown = outcome
            .unknown
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect();
        if field_validation == FieldValidation::Strict && !unknown.is_empty() {
            let kind = &r.t.kind;
            return Err(Failure::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                unknown.join(", ")
            )));
        }
        causes.extend(outcome.causes);
    }
    causes.truncate(validate::CAUSES_MAX);
    if !causes.is_empty() {
        return Err(Failure::invalid_fields(r.t, &r.name, &causes));
    }
    Ok(match field_validation {
        FieldValidation::Warn => unknown,
        FieldValidation::Ignore | FieldValidation::Strict => Vec::new(),
    })
}

fn parse_body(body: &[u8]) -> Result<Value, Failure> {
    serde_json::from_slice(body)
        .map_err(|e| Failure::bad_request(format!("invalid JSON body: {e}")))
}

fn written_object(w: Written) -> Value {
    w.object
        .or(w.removed)
        .map_or(Value::Null, std::sync::Arc::unwrap_or_clone)
}

/// Which part of the object a write to the main resource or `/status` may change.
fn part_for(t: &ResourceType, status: bool) -> Part {
    match (status, t.status) {
        (true, _) => Part::Status,
        (false, true) => Part::Main,
        (false, false) => Part::Whole,
    }
}

pub fn get(cluster: &SharedCluster, r: &ObjectRef) -> Answer {
    cluster.read(|s| match s.store.get(&r.key()) {
        Some(o) => Ok((200, o.clone()).into()),
        None => Err(Failure::not_found(r.t, &r.name)),
    })
}

fn namespace_terminating(store: &ClusterStore, namespace: &str) -> bool {
    store
        .get(&ObjKey::new("", "Namespace", "", namespace))
        .is_some_and(|ns| {
            sjson::is_deleting(ns) || sjson::str_at(ns, "status.phase") == Some("Terminating")
        })
}

/// POST to a collection. `r.name` is ignored (taken from the body).
pub fn create(
    cluster: &SharedCluster,
    r: &ObjectRef,
    body: &[u8],
    options: &WriteOptions,
) -> Answer {
    let now = options.now;
    let mut obj = parse_body(body)?;
    if !obj.is_object() {
        return Err(Failure::bad_request("the body must be a JSON object"));
    }
    match sjson::str_at(&obj, "kind") {
        None => obj["kind"] = json!(r.t.kind),
        Some(k) if k == r.t.kind => {}
        Some(k) => {
            return Err(Failure::bad_request(format!(
                "kind {k:?} does not match the resource {}",
                r.t.qualified()
            )));
        }
    }
    // Only the URL's version is taken: nothing converts another into it.
    match sjson::str_at(&obj, "apiVersion") {
        None => obj["apiVersion"] = json!(r.group_version),
        Some(v) if v == r.group_version => {}
        Some(v) => {
            return Err(Failure::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                r.group_version
            )));
        }
    }
    secrets::fold_string_data(r.t, &mut obj)?;
    let sent = Sent::of(&obj);
    let meta = sjson::object_at(&mut obj, &["metadata"]);
    for field in SERVER_FIELDS {
        meta.remove(*field);
    }
    if r.t.namespaced {
        match meta.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("namespace".into(), json!(r.namespace));
            }
            Some(ns) if ns == r.namespace => {}
            Some(_) => {
                return Err(Failure::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
    } else {
        meta.remove("namespace");
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let generate = meta
        .get("generateName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    cluster.write_or_dry_run(options.dry_run, |store| {
        let mut obj = obj;
        let name = if name.is_empty() && !generate.is_empty() {
            let generated = format!(
                "{generate}{:05x}",
                (store.resource_version() + 1) % 0x10_0000
            );
            sjson::set_path(&mut obj, &["metadata", "name"], json!(generated));
            generated
        } else {
            name
        };
        super::names::check(r.t, &name, &r.namespace)?;
        if r.t.namespaced && namespace_terminating(store, &r.namespace) {
            return Err(Failure::namespace_terminating(r.t, &name, &r.namespace));
        }
        let named = ObjectRef {
            name: name.clone(),
            group_version: r.group_version.clone(),
            namespace: r.namespace.clone(),
            t: r.t,
        };
        let warnings = admit(&named, &mut obj, None, options.field_validation)?;
        store
            .create_by(obj, now, &options.writer(None).sending(sent))
            .map(|w| Reply {
                code: 201,
                body: written_object(w),
                warnings,
            })
            .map_err(|e| Failure::from_store(e, r.t, &name))
    })
}

fn check_rv(
    t: &ResourceType,
    name: &str,
    current: &Value,
    wanted: Option<&str>,
) -> Result<(), Failure> {
    match wanted {
        Some(rv)
            if !rv.is_empty() && Some(rv) != sjson::str_at(current, "metadata.resourceVersion") =>
        {
            Err(Failure::conflict(t, name))
        }
        _ => Ok(()),
    }
}

/// An update may not move the object: its name, namespace, kind and apiVersion stay those of
/// the URL (a missing kind or apiVersion is taken from the URL).
fn check_identity(r: &ObjectRef, desired: &mut Value) -> Result<(), Failure> {
    if !desired.is_object() {
        return Err(Failure::bad_request("the body must be a JSON object"));
    }
    let name = sjson::name(desired);
    if name != r.name {
        return Err(Failure::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            r.name
        )));
    }
    let namespace = sjson::str_at(desired, "metadata.namespace").unwrap_or_default();
    if r.t.namespaced && !namespace.is_empty() && namespace != r.namespace {
        return Err(Failure::bad_request(format!(
            "the namespace of the object ({namespace}) does not match the namespace on the URL ({})",
            r.namespace
        )));
    }
    match sjson::str_at(desired, "kind") {
        None => desired["kind"] = json!(r.t.kind),
        Some(k) if k == r.t.kind => {}
        Some(k) => {
            return Err(Failure::bad_request(format!(
                "the kind of the object ({k}) does not match the kind on the URL ({})",
                r.t.kind
            )));
        }
    }
    match sjson::str_at(desired, "apiVersion") {
        None => desired["apiVersion"] = json!(r.group_version),
        Some(v) if sjson::group_of(v) == r.t.group => {}
        Some(v) => {
            return Err(Failure::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                r.group_version
            )));
        }
    }
    Ok(())
}

/// How an update came: a PUT sends a whole object, a PATCH (or a scale) changes the stored one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Update {
    Replace,
    Patch,
}

/// An update keeps the stored apiVersion (there is no conversion that would make the object
/// mean the same in another): a patch that changes it is 400, as one that changes the kind is.
/// A PUT may also send the object in its URL's version, the one the real server expects.
fn check_version(
    r: &ObjectRef,
    current: &Value,
    desired: &Value,
    update: Update,
) -> Result<(), Failure> {
    let stored = sjson::api_version(current);
    let sent = sjson::api_version(desired);
    let expected = match update {
        Update::Patch => stored,
        Update::Replace => r.group_version.as_str(),
    };
    if sent == stored || sent == expected {
        return Ok(());
    }
    Err(Failure::bad_request(format!(
        "the API version in the data ({sent}) does not match the expected API version ({expected})"
    )))
}

/// Hands `desired` (a full object) to the store as the merge patch from `current`.
pub(super) fn write_desired(
    store: &mut ClusterStore,
    r: &ObjectRef,
    current: &Value,
    mut desired: Value,
    subresource: Option<Subresource>,
    update: Update,
    options: &WriteOptions,
) -> Answer {
    let status = subresource == Some(Subresource::Status);
    let writer = options.writer(subresource).sending(Sent::of(&desired));
    check_identity(r, &mut desired)?;
    check_version(r, current, &desired, update)?;
    secrets::fold_string_data(r.t, &mut desired)?;
    keep_server_fields(current, &mut desired);
    let part = part_for(r.t, status);
    // What would be stored: the main write keeps the stored status, a status write keeps
    // everything else. That is what is validated (and pruned).
    let (mut candidate, keep) = match part {
        Part::Status => (current.clone(), desired.get("status").cloned()),
        Part::Main => (desired, current.get("status").cloned()),
        Part::Whole => (desired, None),
    };
    if part != Part::Whole
        && let Some(obj) = candidate.as_object_mut()
    {
        match keep {
            Some(status) => obj.insert("status".to_string(), status),
            None => obj.remove("status"),
        };
    }
    let warnings = admit(r, &mut candidate, Some(current), options.field_validation)?;
    let desired = candidate;
    let diff = merge_diff(current, &desired);
    let patch = match part {
        Part::Status => json!({"status": diff.get("status").cloned().unwrap_or(json!({}))}),
        Part::Main | Part::Whole => diff,
    };
    if part == Part::Status && patch["status"] == json!({}) {
        return Ok(Reply {
            code: 200,
            body: current.clone(),
            warnings,
        });
    }
    store
        .patch_by(&r.key(), &patch, part, &writer, options.now)
        .map(|w| Reply {
            code: 200,
            body: written_object(w),
            warnings,
        })
        .map_err(|e| Failure::from_store(e, r.t, &r.name))
}

/// PUT of the main resource or `/status`, guarded by `metadata.resourceVersion` when given.
pub fn replace(
    cluster: &SharedCluster,
    r: &ObjectRef,
    body: &[u8],
    status: bool,
    options: &WriteOptions,
) -> Answer {
    let mut desired = parse_body(body)?;
    check_identity(r, &mut desired)?;
    cluster.write_or_dry_run(options.dry_run, |store| {
        let current = store
            .get(&r.key())
            .cloned()
            .ok_or_else(|| Failure::not_found(r.t, &r.name))?;
        check_rv(
            r.t,
            &r.name,
            &current,
            sjson::str_at(&desired, "metadata.resourceVersion"),
        )?;
        write_desired(
            store,
            r,
            &current,
            desired,
            status.then_some(Subresource::Status),
            Update::Replace,
            options,
        )
    })
}

/// PATCH of the main resource or `/status`: merge, JSON patch, or strategic merge (built-in
/// kinds only, applied as a merge patch without its directives). Server-side apply is 415.
pub fn patch(
    cluster: &SharedCluster,
    r: &ObjectRef,
    content_type: &str,
    body: &[u8],
    status: bool,
    options: &WriteOptions,
) -> Answer {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let patch = parse_body(body)?;
    let merge = match media {
        "application/merge-patch+json" => true,
        "application/strategic-merge-patch+json" if !r.t.custom => true,
        "application/json-patch+json" => false,
        other => return Err(Failure::unsupported_media_type(other)),
    };
    cluster.write_or_dry_run(options.dry_run, |store| {
        let current = store
            .get(&r.key())
            .cloned()
            .ok_or_else(|| Failure::not_found(r.t, &r.name))?;
        if merge {
            let mut patch = patch;
            if !patch.is_object() {
                return Err(Failure::bad_request("a merge patch must be a JSON object"));
            }
            strip_directives(&mut patch);
            check_rv(
                r.t,
                &r.name,
                &current,
                sjson::str_at(&patch, "metadata.resourceVersion"),
            )?;
            // managedFields sent are the server's to judge (`Sent`), not dropped here.
            if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                for field in SERVER_FIELDS.iter().filter(|f| **f != "managedFields") {
                    meta.remove(*field);
                }
            }
            let mut desired = current.clone();
            sjson::merge_patch(&mut desired, &patch);
            write_desired(
                store,
                r,
                &current,
                desired,
                status.then_some(Subresource::Status),
                Update::Patch,
                options,
            )
        } else {
            let mut desired = current.clone();
            apply_json_patch(&mut desired, &patch)
                .map_err(|m| Failure::invalid(r.t, &r.name, m))?;
            write_desired(
                store,
                r,
                &current,
                desired,
                status.then_some(Subresource::Status),
                Update::Patch,
                options,
            )
        }
    })
}

/// `DeleteOptions` from the body and the query.
struct DeleteOptions {
    grace_seconds: Option<i64>,
    uid: Option<String>,
    resource_version: Option<String>,
    dry_run: bool,
}

fn delete_options(body: &[u8], q: &Query) -> Result<DeleteOptions, Failure> {
    let v = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_body(body)?
    };
    let grace = v
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| q.get("gracePeriodSeconds").and_then(|s| s.parse().ok()));
    let dry_run = v
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
        || q.get("dryRun").is_some_and(|s| !s.is_empty());
    Ok(DeleteOptions {
        grace_seconds: grace,
        uid: sjson::str_at(&v, "preconditions.uid").map(str::to_string),
        resource_version: sjson::str_at(&v, "preconditions.resourceVersion").map(str::to_string),
        dry_run,
    })
}

/// DELETE: objects with finalizers get a `deletionTimestamp`; pods bound to a node are
/// deleted gracefully (the fake kubelet removes them); namespaces turn `Terminating` and the
/// fake namespace controller empties them. Answers 200 with the object (its last state when
/// it is gone).
pub fn delete(
    cluster: &SharedCluster,
    r: &ObjectRef,
    body: &[u8],
    q: &Query,
    now: Timestamp,
) -> Answer {
    let options = delete_options(body, q)?;
    cluster.write_or_dry_run(options.dry_run, |store| {
        let key = r.key();
        let current = store
            .get(&key)
            .cloned()
            .ok_or_else(|| Failure::not_found(r.t, &r.name))?;
        if let Some(uid) = &options.uid
            && Some(uid.as_str()) != sjson::str_at(&current, "metadata.uid")
        {
            return Err(Failure {
                details: None,
                ..Failure::conflict(r.t, &r.name)
            });
        }
        check_rv(r.t, &r.name, &current, options.resource_version.as_deref())?;
        let deleting = sjson::is_deleting(&current);
        let result = match r.t.kind.as_str() {
            "Namespace" if !deleting => store.mark_deleting(&key, now, None).and_then(|_| {
                store.patch(
                    &key,
                    &json!({"status": {"phase": "Terminating"}}),
                    Part::Status,
                )
            }),
            "Pod" => {
                let bound = sjson::str_at(&current, "spec.nodeName").is_some_and(|n| !n.is_empty());
                let grace = options.grace_seconds.unwrap_or_else(|| {
                    current
                        .pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                        .unwrap_or(30)
                });
                let finalizers = !sjson::finalizers(&current).is_empty();
                if bound && grace > 0 && !deleting {
                    store.mark_deleting(&key, now, Some(grace))
                } else if grace == 0 && !finalizers {
                    Ok(store.remove(&key))
                } else {
                    store.delete(&key, now)
                }
            }
            _ => store.delete(&key, now),
        };
        result
            .map(|w| (200, written_object(w)).into())
            .map_err(|e| Failure::from_store(e, r.t, &r.name))
    })
}

/// POST `pods/{name}/eviction`: the PDB-enforcing eviction of the simulator. Accepts the
/// `policy/v1` Eviction body (`deleteOptions`) and kube-rs's `EvictParams` body
/// (`delete_options`); answers 201 with a Success Status.
pub fn evict(
    cluster: &SharedCluster,
    r: &ObjectRef,
    body: &[u8],
    dry_run: bool,
    now: Timestamp,
) -> Answer {
    let v = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_body(body)?
    };
    if let Some(name) = sjson::str_at(&v, "metadata.name")
        && !name.is_empty()
        && name != r.name
    {
        return Err(Failure::bad_request(format!(
            "name in URL does not match name in Eviction object: {name:?}"
        )));
    }
    let options = v.get("deleteOptions").or_else(|| v.get("delete_options"));
    let grace = options.and_then(|o| {
        o.get("gracePeriodSeconds")
            .or_else(|| o.get("grace_period_seconds"))
            .and_then(Value::as_i64)
    });
    let dry_run = dry_run
        || options
            .and_then(|o| o.get("dryRun").or_else(|| o.get("dry_run")))
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
    cluster.write_or_dry_run(dry_run, |store| {
        eviction::evict(store, &r.key(), grace, now)
            .map(|_| (201, success(201)).into())
            .map_err(|e| Failure::from_store(e, r.t, &r.name))
    })
}
