//! One cluster's objects with the API server's write semantics: resourceVersion, uid,
//! generation, `deletionTimestamp` + finalizers, status subresource, merge patch.

use super::json::{self, group_of};
use super::managed::{self, Writer};
use crate::api::json::Pointer as _;
use engine::intake::mirror::Reading;
use engine::model::Name;
use engine::time::Timestamp;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};

/// `(group, kind, namespace, name)`; namespace is empty for cluster-scoped kinds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// Group, kind and namespace repeat across most keys: shared ([`Name::interned`]), they
    /// compare by pointer in the store's map instead of reading a heap copy per key.
    pub group: Name,
    pub kind: Name,
    pub namespace: Name,
    pub name: String,
}

impl ObjKey {
    pub fn new(group: &str, kind: &str, namespace: &str, name: &str) -> Self {
        let namespace = if is_cluster_scoped(kind) {
            ""
        } else {
            namespace
        };
        ObjKey {
            group: Name::interned(group),
            kind: Name::interned(kind),
            namespace: Name::interned(namespace),
            name: name.to_string(),
        }
    }

    /// The smallest key of a (group, kind): where a range over its objects starts.
    fn first_of(group: &str, kind: &str) -> Self {
        ObjKey::new(group, kind, "", "")
    }

    pub fn of(obj: &Value) -> Self {
        ObjKey::new(
            group_of(json::api_version(obj)),
            json::kind(obj),
            json::namespace(obj),
            json::name(obj),
        )
    }
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ", self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, "{}/", self.namespace)?;
        }
        f.write_str(&self.name)
    }
}

pub fn is_cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Node"
            | "Namespace"
            | "PersistentVolume"
            | "VolumeAttachment"
            | "ClusterRole"
            | "ClusterRoleBinding"
    )
}

/// An API error as the server would return it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiError {
    NotFound(String),
    AlreadyExists(String),
    Conflict(String),
    Invalid(String),
    TooManyRequests {
        message: String,
        causes: Vec<String>,
    },
    Forbidden {
        message: String,
        namespace_terminating: bool,
    },
    Internal(String),
}

impl ApiError {
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound(_) => 404,
            ApiError::AlreadyExists(_) | ApiError::Conflict(_) => 409,
            ApiError::Invalid(_) => 422,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::Forbidden { .. } => 403,
            ApiError::Internal(_) => 500,
        }
    }
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main resource: `.status` is left as stored.
    Main,
    /// The status subresource: only `.status` changes.
    Status,
    /// Everything (scenario steps play providers and users, status included).
    Whole,
}

/// What a write did, as a watch would report it. The objects are shared with the store, not
/// copied: a write's answer, its watch events and later lists hand out the one stored JSON.
#[derive(Clone, Debug)]
pub struct Written {
    pub key: ObjKey,
    /// The object now, or `None` when the write removed it.
    pub object: Option<Arc<Value>>,
    /// The object as it was last, when the write removed it.
    pub removed: Option<Arc<Value>>,
}

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    /// The watch event type as the API spells it (`ADDED`, `MODIFIED`, `DELETED`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One write as a watch reports it: the resourceVersion the write got and the object after it
/// (for a deletion, the object's last state stamped with the deletion's resourceVersion).
#[derive(Clone, Debug)]
pub struct Change {
    pub resource_version: u64,
    pub type_: ChangeType,
    pub key: ObjKey,
    pub object: Arc<Value>,
}

/// A watch asked for changes after a resourceVersion the change log no longer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooOld {
    /// The requested resourceVersion.
    pub requested: u64,
    /// The newest resourceVersion whose change was dropped (watches must start at or after it).
    pub compacted: u64,
}

/// The bounded log of recent writes, off unless [`ClusterStore::record_changes`] turned it on.
#[derive(Clone, Debug, Default)]
struct ChangeLog {
    capacity: usize,
    entries: VecDeque<Change>,
    /// Every change with a resourceVersion up to this one is gone from `entries`.
    compacted_rv: u64,
}

/// A stored object and what the engine reads of it, converted once, on first use (every write
/// stores a new entry): the simulator's MHC differential lists every cluster again and again.
#[derive(Clone, Debug)]
struct Stored {
    value: Arc<Value>,
    /// Boxed: a reading is 850 bytes, and the store's map moves its values on every insert.
    read: OnceLock<Box<Reading>>,
}

impl Stored {
    fn read(&self) -> &Reading {
        self.read
            .get_or_init(|| Box::new(engine::convert::object_from_json(&self.value)))
    }
}

#[derive(Clone, Debug, Default)]
pub struct ClusterStore {
    objects: BTreeMap<ObjKey, Stored>,
    /// How many objects of each (group, kind) are stored at each version: what a served
    /// type's versions are, without a walk over every object per request.
    versions: BTreeMap<(Name, Name), BTreeMap<String, usize>>,
    resource_version: u64,
    uid_counter: u64,
    /// Prefix of generated uids, so uids differ between clusters.
    pub uid_prefix: String,
    changes: Option<ChangeLog>,
    /// Whether writes that name their writer keep `metadata.managedFields`, and how lists
    /// merge ([`ClusterStore::keep_managed_fields`]).
    managed_fields: Option<managed::ListTypes>,
}

impl ClusterStore {
    pub fn new(uid_prefix: &str) -> Self {
        ClusterStore {
            uid_prefix: uid_prefix.to_string(),
            ..Default::default()
        }
    }

    pub fn get(&self, key: &ObjKey) -> Option<&Value> {
        self.objects.get(key).map(|s| &*s.value)
    }

    /// The stored object, shared (the caller keeps it without copying the JSON).
    pub fn get_shared(&self, key: &ObjKey) -> Option<&Arc<Value>> {
        self.objects.get(key).map(|s| &s.value)
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ObjKey, &Value)> {
        self.objects.iter().map(|(k, s)| (k, &*s.value))
    }

    /// The objects whose key `keep` keeps, with what the engine reads of each (only those are
    /// read).
    pub fn iter_read(
        &self,
        keep: impl Fn(&ObjKey) -> bool,
    ) -> impl Iterator<Item = (&ObjKey, &Value, &Reading)> {
        self.objects
            .iter()
            .filter(move |(k, _)| keep(k))
            .map(|(k, s)| (k, &*s.value, s.read()))
    }

    /// The objects whose key `keep` keeps, each with what the engine reads of it, owned: a
    /// reading already made is taken, any other is made; neither is kept (a list that only
    /// lends them gives them back with [`ClusterStore::give_back_reading`]).
    pub fn read_owned(
        &mut self,
        keep: impl Fn(&ObjKey) -> bool,
    ) -> impl Iterator<Item = (&ObjKey, &Value, Reading)> {
        self.objects
            .iter_mut()
            .filter(move |(k, _)| keep(k))
            .map(|(k, s)| {
                let read = s
                    .read
                    .take()
                    .map_or_else(|| engine::convert::object_from_json(&s.value), |read| *read);
                (k, &*s.value, read)
            })
    }

    /// Every (group, version, kind) some stored object has, in order.
    pub fn versions_stored(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.versions.iter().flat_map(|((group, kind), versions)| {
            versions
                .keys()
                .map(move |v| (group.as_str(), v.as_str(), kind.as_str()))
        })
    }

    fn put(&mut self, key: ObjKey, obj: Arc<Value>) {
        let version = json::api_version(&obj);
        match self.objects.get(&key).map(|s| json::api_version(&s.value)) {
            // Only a create or a change of apiVersion moves a count, not every write.
            Some(stored) if stored == version => {}
            stored => {
                let stored = stored.map(str::to_string);
                self.count_version(&key, version, true);
                if let Some(stored) = stored {
                    self.count_version(&key, &stored, false);
                }
            }
        }
        self.objects.insert(
            key,
            Stored {
                value: obj,
                read: OnceLock::new(),
            },
        );
    }

    fn take(&mut self, key: &ObjKey) -> Option<Arc<Value>> {
        let old = self.objects.remove(key)?.value;
        self.count_version(key, json::api_version(&old), false);
        Some(old)
    }

    fn count_version(&mut self, key: &ObjKey, api_version: &str, added: bool) {
        let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
        let kind = (key.group.clone(), key.kind.clone());
        if added {
            // Looked up before inserting: most objects of a kind share one version, and
            // `entry` would allocate its name on every create.
            let versions = self.versions.entry(kind).or_default();
            match versions.get_mut(version) {
                Some(count) => *count += 1,
                None => {
                    versions.insert(version.to_string(), 1);
                }
            }
            return;
        }
        let Some(versions) = self.versions.get_mut(&kind) else {
            return;
        };
        if let Some(count) = versions.get_mut(version) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                versions.remove(version);
            }
        }
        if versions.is_empty() {
            self.versions.remove(&kind);
        }
    }

    /// What the stored object reads as, read once and kept (until the object is written).
    pub fn read(&self, key: &ObjKey) -> Option<&Reading> {
        self.objects.get(key).map(Stored::read)
    }

    /// What the stored object reads as, when `value` is that object: the same resourceVersion
    /// (every write that changes an object gives it a new one).
    #[cfg(test)]
    pub fn reading_of(&self, key: &ObjKey, value: &Value) -> Option<&Reading> {
        let stored = self.objects.get(key)?;
        same_version(&stored.value, value).then(|| stored.read())
    }

    /// The reading of the stored object, if one is made and kept.
    #[cfg(test)]
    pub fn kept_reading(&self, key: &ObjKey) -> Option<&Reading> {
        self.objects.get(key)?.read.get().map(|read| &**read)
    }

    /// The reading of the stored object already made (by a list), handed over rather than
    /// copied, when `value` is that object; `None` when none was made: reading it is then the
    /// receiver's work, done once either way. A later list reads it again.
    pub fn take_reading(&mut self, key: &ObjKey, value: &Value) -> Option<Box<Reading>> {
        let stored = self.objects.get_mut(key)?;
        if !same_version(&stored.value, value) {
            return None;
        }
        stored.read.take()
    }

    /// Gives back the reading of the stored object that [`ClusterStore::read_owned`] took, once
    /// its borrower is done with it: the next list need not read the object again. Kept only
    /// while the object is still the one read (the same resourceVersion) and no reading was
    /// made since.
    pub fn give_back_reading(&mut self, key: &ObjKey, object: engine::model::Object) {
        let Some(stored) = self.objects.get_mut(key) else {
            return;
        };
        let stored_version = resource_version(&stored.value).and_then(|v| v.parse::<u64>().ok());
        if stored_version == Some(object.meta().resource_version) {
            let _ = stored.read.set(Box::new(Ok(Some(object))));
        }
    }

    /// Objects of one kind as a list hands them out: each one's JSON and, when a list of the
    /// simulator already read it, that reading, handed over (see [`ClusterStore::take_reading`]).
    pub fn list_handed(
        &mut self,
        group: &str,
        kind: &str,
    ) -> Vec<(Arc<Value>, Option<Box<Reading>>)> {
        let start = ObjKey::first_of(group, kind);
        self.objects
            .range_mut(start..)
            .take_while(|(k, _)| k.group == group && k.kind == kind)
            .map(|(_, s)| (s.value.clone(), s.read.take()))
            .collect()
    }

    fn list_stored<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Stored)> + 'a {
        let start = ObjKey::first_of(group, kind);
        self.objects
            .range(start..)
            .take_while(move |(k, _)| k.group == group && k.kind == kind)
    }

    /// Objects of one kind (any group with that kind name when `group` is None).
    pub fn list<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        self.list_stored(group, kind).map(|(k, s)| (k, &*s.value))
    }

    /// Objects of one kind, shared (see [`ClusterStore::get_shared`]).
    pub fn list_shared<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a {
        self.list_stored(group, kind).map(|(k, s)| (k, &s.value))
    }

    /// Starts keeping the last `capacity` writes for watches (the fake API server's change
    /// feed). Writes made before this call are not in the log: a watch from an older
    /// resourceVersion is [`TooOld`]. The simulator itself never turns it on.
    pub fn record_changes(&mut self, capacity: usize) {
        self.changes = Some(ChangeLog {
            capacity: capacity.max(1),
            entries: VecDeque::new(),
            compacted_rv: self.resource_version,
        });
    }

    /// Drops every logged change, as an etcd compaction would: watches from any
    /// resourceVersion older than the current one become [`TooOld`].
    pub fn compact_changes(&mut self) {
        let rv = self.resource_version;
        if let Some(log) = &mut self.changes {
            log.entries.clear();
            log.compacted_rv = rv;
        }
    }

    /// The logged changes with a resourceVersion greater than `rv`, oldest first; [`TooOld`]
    /// when some of them were dropped (or the log is off).
    pub fn changes_since(&self, rv: u64) -> Result<impl Iterator<Item = &Change>, TooOld> {
        let too_old = |compacted| TooOld {
            requested: rv,
            compacted,
        };
        let log = self
            .changes
            .as_ref()
            .ok_or_else(|| too_old(self.resource_version))?;
        if rv < log.compacted_rv {
            return Err(too_old(log.compacted_rv));
        }
        let start = log.entries.partition_point(|c| c.resource_version <= rv);
        Ok(log.entries.range(start..))
    }

    fn log_change(&mut self, type_: ChangeType, key: &ObjKey, object: &Arc<Value>) {
        let rv = self.resource_version;
        let Some(log) = &mut self.changes else {
            return;
        };
        if log.entries.len() == log.capacity
            && let Some(dropped) = log.entries.pop_front()
        {
            log.compacted_rv = dropped.resource_version;
        }
        log.entries.push_back(Change {
            resource_version: rv,
            type_,
            key: key.clone(),
            object: object.clone(),
        });
    }

    fn bump(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn stamp(&mut self, obj: &mut Value) {
        let rv = self.bump();
        set_resource_version(obj, rv);
    }

    /// Creates an object; 409 when it exists.
    pub fn create(&mut self, mut obj: Value, now: Timestamp) -> Result<Written, ApiError> {
        let key = ObjKey::of(&obj);
        if key.name.is_empty() {
            return Err(ApiError::Invalid("metadata.name: Required value".into()));
        }
        if self.objects.contains_key(&key) {
            return Err(ApiError::AlreadyExists(format!(
                "{} {:?} already exists",
                key.kind.to_lowercase(),
                key.name
            )));
        }
        self.uid_counter += 1;
        let uid = format!("{}-{:06}", self.uid_prefix, self.uid_counter);
        let meta = json::object_at(&mut obj, &["metadata"]);
        meta.entry("uid").or_insert(json!(uid));
        meta.entry("creationTimestamp")
            .or_insert(json!(now.to_rfc3339()));
        meta.insert("generation".into(), json!(1));
        if is_cluster_scoped(&key.kind) {
            meta.remove("namespace");
        }
        self.stamp(&mut obj);
        let obj = Arc::new(obj);
        self.log_change(ChangeType::Added, &key, &obj);
        self.put(key.clone(), obj.clone());
        Ok(Written {
            key,
            object: Some(obj),
            removed: None,
        })
    }

    /// From now on, writes that name their writer ([`ClusterStore::create_by`],
    /// [`ClusterStore::patch_by`]) keep `metadata.managedFields` as kube-apiserver does, lists
    /// merging as `list_types` says. Off by default: the simulator's own runs never read them.
    pub fn keep_managed_fields(&mut self, list_types: managed::ListTypes) {
        self.managed_fields = Some(list_types);
    }

    /// [`ClusterStore::create`] by `writer`, recorded in `managedFields` when they are kept.
    pub fn create_by(
        &mut self,
        mut obj: Value,
        now: Timestamp,
        writer: &Writer,
    ) -> Result<Written, ApiError> {
        if let Some(list_types) = self.managed_fields {
            managed::record(None, &mut obj, writer, now, list_types);
        }
        self.create(obj, now)
    }

    /// [`ClusterStore::patch`] by `writer` at `now`, recorded in `managedFields` when they
    /// are kept.
    pub fn patch_by(
        &mut self,
        key: &ObjKey,
        patch: &Value,
        part: Part,
        writer: &Writer,
        now: Timestamp,
    ) -> Result<Written, ApiError> {
        let Some(list_types) = self.managed_fields else {
            return self.patch(key, patch, part);
        };
        let current = self.get(key).ok_or_else(|| not_found(key))?;
        check_precondition(key, current, patch)?;
        self.patch_copy(key, patch, part, Some((writer, now, list_types)))
    }

    /// Creates or replaces (a scenario `apply`): a replacement keeps uid and creation time.
    pub fn apply(&mut self, mut obj: Value, now: Timestamp) -> Result<Written, ApiError> {
        let key = ObjKey::of(&obj);
        let Some(existing) = self.get(&key) else {
            return self.create(obj, now);
        };
        for field in ["uid", "creationTimestamp", "deletionTimestamp"] {
            if let Some(v) = existing.at_pointer(&format!("/metadata/{field}")).cloned() {
                json::object_at(&mut obj, &["metadata"])
                    .entry(field)
                    .or_insert(v);
            }
        }
        self.finish_write(key, obj, false)
    }

    /// A JSON merge patch on `part` of the object. Unless the write may be refused (a change
    /// to the metadata of an object being deleted), the object is changed where it is stored,
    /// copied first only when a watch event or a list still holds it; the merge tells what
    /// changed.
    pub fn patch(&mut self, key: &ObjKey, patch: &Value, part: Part) -> Result<Written, ApiError> {
        let current = self.get(key).ok_or_else(|| not_found(key))?;
        check_precondition(key, current, patch)?;
        // On an object being deleted, only a change of its metadata can be refused.
        let refusable = json::is_deleting(current)
            && part != Part::Status
            && engine::convert::member(patch, "metadata").is_some();
        let in_place = !refusable
            && current.is_object()
            && patch.is_object()
            && engine::convert::member(patch, "apiVersion").is_none();
        if !in_place {
            return self.patch_copy(key, patch, part, None);
        }
        let had_finalizers = json::has_finalizers(current);
        let stored = self.objects.get_mut(key).expect("read above");
        let value = Arc::make_mut(&mut stored.value);
        let (changed, spec_changed) = merge_part(value, patch, part);
        if !changed {
            return Ok(Written {
                key: key.clone(),
                object: Some(stored.value.clone()),
                removed: None,
            });
        }
        stored.read = OnceLock::new();
        if spec_changed {
            bump_generation(value);
        }
        if had_finalizers && json::is_deleting(value) && !json::has_finalizers(value) {
            return Ok(self.remove(key));
        }
        // `stored` borrows the objects only: the version counter moves beside it.
        self.resource_version += 1;
        set_resource_version(value, self.resource_version);
        let object = stored.value.clone();
        self.log_change(ChangeType::Modified, key, &object);
        Ok(Written {
            key: key.clone(),
            object: Some(object),
            removed: None,
        })
    }

    /// [`ClusterStore::patch`] on a copy of the stored object, checked before it replaces it.
    /// `by`: the writer, when `managedFields` are kept.
    fn patch_copy(
        &mut self,
        key: &ObjKey,
        patch: &Value,
        part: Part,
        by: Option<(&Writer, Timestamp, managed::ListTypes)>,
    ) -> Result<Written, ApiError> {
        let current = self.get(key).ok_or_else(|| not_found(key))?;
        let mut next = Value::clone(current);
        let (changed, spec_changed) = if current.is_object() && patch.is_object() {
            merge_part(&mut next, patch, part)
        } else if part == Part::Status {
            // A patch that is no object has no status to merge.
            (false, false)
        } else {
            // A patch that is no object replaces the whole object, status included.
            json::merge_patch(&mut next, patch);
            (&next != current, spec_changed(current, &next))
        };
        if json::is_deleting(current) && !json::is_deleting(&next) {
            return Err(ApiError::Invalid(
                "metadata.deletionTimestamp: field is immutable".into(),
            ));
        }
        if json::is_deleting(current) {
            let before = json::finalizers(current);
            if json::finalizers(&next).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::Invalid(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted".into(),
                ));
            }
        }
        let mut changed = changed;
        if let Some((writer, now, list_types)) = by {
            managed::record(Some(current), &mut next, writer, now, list_types);
            // A write may change managedFields alone (a reset the client sent).
            changed |= next.pointer("/metadata/managedFields")
                != current.pointer("/metadata/managedFields");
        }
        if !changed {
            return Ok(Written {
                key: key.clone(),
                object: self.get_shared(key).cloned(),
                removed: None,
            });
        }
        if spec_changed {
            bump_generation(&mut next);
        }
        let had_finalizers = json::has_finalizers(current);
        self.finish_write(key.clone(), next, had_finalizers)
    }

    /// Deletes: with finalizers the object stays with a `deletionTimestamp`; otherwise it is
    /// removed at once. Graceful pod deletion is the world's business (see `mark_deleting`).
    pub fn delete(&mut self, key: &ObjKey, now: Timestamp) -> Result<Written, ApiError> {
        let current = self.get_shared(key).ok_or_else(|| not_found(key))?;
        if json::is_deleting(current) {
            return Ok(Written {
                key: key.clone(),
                object: Some(current.clone()),
                removed: None,
            });
        }
        if json::finalizers(current).is_empty() {
            return Ok(self.remove(key));
        }
        self.mark_deleting(key, now, None)
    }

    /// Sets `deletionTimestamp` (and `deletionGracePeriodSeconds`) without removing.
    pub fn mark_deleting(
        &mut self,
        key: &ObjKey,
        now: Timestamp,
        grace_seconds: Option<i64>,
    ) -> Result<Written, ApiError> {
        let current = self.get_shared(key).ok_or_else(|| not_found(key))?;
        if json::is_deleting(current) {
            return Ok(Written {
                key: key.clone(),
                object: Some(current.clone()),
                removed: None,
            });
        }
        let mut next = Value::clone(current);
        let meta = json::object_at(&mut next, &["metadata"]);
        meta.insert("deletionTimestamp".into(), json!(now.to_rfc3339()));
        meta.insert(
            "deletionGracePeriodSeconds".into(),
            json!(grace_seconds.unwrap_or(0)),
        );
        self.finish_write(key.clone(), next, false)
    }

    /// Removes the object outright (the kubelet confirming a pod is gone, GC, a provider).
    pub fn remove(&mut self, key: &ObjKey) -> Written {
        let mut removed = self.take(key);
        if let Some(last) = &mut removed {
            // The deletion is a change of its own: the last state carries its version.
            self.stamp(Arc::make_mut(last));
            if self.changes.is_some() {
                self.log_change(ChangeType::Deleted, key, last);
            }
        }
        Written {
            key: key.clone(),
            object: None,
            removed,
        }
    }

    /// Stores a write; an object that is deleting and just lost its last finalizer is removed.
    fn finish_write(
        &mut self,
        key: ObjKey,
        mut next: Value,
        had_finalizers: bool,
    ) -> Result<Written, ApiError> {
        if had_finalizers && json::is_deleting(&next) && json::finalizers(&next).is_empty() {
            // Gone with its last finalizer; the write's answer and the watch's DELETED event
            // carry this last state.
            self.put(key.clone(), Arc::new(next));
            return Ok(self.remove(&key));
        }
        self.stamp(&mut next);
        let next = Arc::new(next);
        self.log_change(ChangeType::Modified, &key, &next);
        self.put(key.clone(), next.clone());
        Ok(Written {
            key,
            object: Some(next),
            removed: None,
        })
    }
}

/// Whether two states of an object have the same resourceVersion.
fn same_version(a: &Value, b: &Value) -> bool {
    resource_version(a).is_some_and(|a| Some(a) == resource_version(b))
}

/// `metadata.resourceVersion`, as stored.
fn resource_version(object: &Value) -> Option<&str> {
    object
        .at_pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

/// Whether anything outside `metadata` and `status` differs (what bumps `generation`).
fn spec_changed(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a != b;
    };
    let outside = |k: &str| k != "metadata" && k != "status";
    let count = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| outside(k)).count();
    count(a) != count(b)
        || a.iter()
            .filter(|(k, _)| outside(k))
            .any(|(k, v)| b.get(k) != Some(v))
}

/// Merges `patch` into `part` of `object` (both objects): whether the object changed, and
/// whether what changed lies outside `metadata` and `status` (what bumps `generation`).
fn merge_part(object: &mut Value, patch: &Value, part: Part) -> (bool, bool) {
    let Some(members) = patch.as_object() else {
        return (false, false);
    };
    if part == Part::Status {
        let Some(status) = members.get("status") else {
            return (false, false);
        };
        let changed = match engine::convert::member_mut(object, "status") {
            Some(stored) => json::merge_patch_changed(stored, status),
            None => {
                let mut added = Value::Null;
                json::merge_patch_changed(&mut added, status);
                object
                    .as_object_mut()
                    .map(|o| o.insert("status".to_string(), added));
                true
            }
        };
        return (changed, false);
    }
    let (mut changed, mut spec) = (false, false);
    for (k, v) in members {
        if part == Part::Main && k == "status" {
            continue;
        }
        let member_changed = json::merge_member(object, k, v);
        changed |= member_changed;
        spec |= member_changed && k != "metadata" && k != "status";
    }
    (changed, spec)
}

/// `metadata.generation` one higher (from 1 when unset): the spec changed.
fn bump_generation(object: &mut Value) {
    let generation = engine::convert::pointer(object, "/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    json::set_path(object, &["metadata", "generation"], json!(generation + 1));
}

fn set_resource_version(object: &mut Value, rv: u64) {
    json::set_path(
        object,
        &["metadata", "resourceVersion"],
        json!(rv.to_string()),
    );
}

/// A patch naming a resourceVersion is a precondition, as the API server holds it.
fn check_precondition(key: &ObjKey, current: &Value, patch: &Value) -> Result<(), ApiError> {
    match resource_version(patch) {
        Some(rv) if resource_version(current) != Some(rv) => Err(ApiError::Conflict(format!(
            "Operation cannot be fulfilled on {} {:?}: the object has been modified; please apply your changes to the latest version and try again",
            key.kind, key.name
        ))),
        _ => Ok(()),
    }
}

pub fn not_found(key: &ObjKey) -> ApiError {
    ApiError::NotFound(format!(
        "{} {:?} not found",
        super::plural(&key.kind),
        key.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: Timestamp = Timestamp(1_704_067_200_000);

    /// Values of a merge patch or an object: members named as Kubernetes objects name them
    /// (so that patches meet what is stored), `null` among them.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            (0u8..3).prop_map(|n| json!(n)),
            prop::sample::select(vec!["a", "b"]).prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec!["x", "y", "spec", "status", "labels"]),
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    /// A stored object, its finalizers and spec drawn, and a patch on any part of it.
    fn object_and_patch() -> impl Strategy<Value = (Value, Value, Part)> {
        let finalizers = prop::collection::vec(prop::sample::select(vec!["f1", "f2"]), 0..3);
        let deleting = any::<bool>();
        let patch_meta = prop_oneof![
            Just(None),
            Just(Some(json!({"finalizers": null}))),
            Just(Some(json!({"finalizers": ["f1"]}))),
            Just(Some(json!({"labels": {"l": "v"}}))),
            Just(Some(json!({"deletionTimestamp": "2024-01-01T00:00:00Z"}))),
            Just(Some(
                json!({"deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": []})
            )),
            Just(Some(Value::Null)),
        ];
        let part = prop::sample::select(vec![Part::Main, Part::Status, Part::Whole]);
        (
            finalizers,
            deleting,
            value(),
            value(),
            value(),
            patch_meta,
            part,
        )
            .prop_map(
                |(finalizers, deleting, spec, status, patch, patch_meta, part)| {
                    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "o", "namespace": "ns", "finalizers": finalizers},
                    "spec": spec, "status": status});
                    if deleting {
                        object["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
                    }
                    let mut patch = match patch {
                        Value::Object(m) => Value::Object(m),
                        other => json!({"spec": other}),
                    };
                    if let Some(meta) = patch_meta {
                        patch["metadata"] = meta;
                    }
                    (object, patch, part)
                },
            )
    }

    /// The patch as the API server's semantics read: the whole object copied, merged, checked
    /// and compared with what is stored.
    fn reference_patch(
        store: &mut ClusterStore,
        key: &ObjKey,
        patch: &Value,
        part: Part,
    ) -> Result<Written, ApiError> {
        let current = store.get(key).ok_or_else(|| not_found(key))?;
        check_precondition(key, current, patch)?;
        let mut next = Value::clone(current);
        match part {
            Part::Whole => json::merge_patch(&mut next, patch),
            Part::Main => {
                let mut p = patch.clone();
                if let Some(m) = p.as_object_mut() {
                    m.remove("status");
                }
                json::merge_patch(&mut next, &p);
            }
            Part::Status => {
                if let Some(status) = patch.get("status") {
                    let slot = next.as_object_mut().unwrap().entry("status");
                    json::merge_patch(slot.or_insert(Value::Null), status);
                }
            }
        }
        let deleting = json::is_deleting(current);
        if deleting && !json::is_deleting(&next) {
            return Err(ApiError::Invalid(
                "metadata.deletionTimestamp: field is immutable".into(),
            ));
        }
        let before = json::finalizers(current);
        if deleting && json::finalizers(&next).iter().any(|f| !before.contains(f)) {
            return Err(ApiError::Invalid(
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted".into(),
            ));
        }
        if &next == current {
            return Ok(Written {
                key: key.clone(),
                object: store.get_shared(key).cloned(),
                removed: None,
            });
        }
        if part != Part::Status && spec_changed(current, &next) {
            bump_generation(&mut next);
        }
        let had_finalizers = !before.is_empty();
        store.finish_write(key.clone(), next, had_finalizers)
    }

    proptest! {
        /// A patch applied in place leaves the store, the answer and the watch's change as
        /// the reference semantics do.
        #[test]
        fn a_patch_is_what_the_reference_semantics_make_of_it((object, patch, part) in object_and_patch()) {
            let mut store = ClusterStore::new("t");
            store.record_changes(8);
            let key = store.create(object, NOW).expect("creates").key;
            let mut copied = store.clone();
            let in_place = store.patch(&key, &patch, part);
            let by_copy = reference_patch(&mut copied, &key, &patch, part);
            match (&in_place, &by_copy) {
                (Ok(a), Ok(b)) => {
                    prop_assert_eq!(a.object.as_deref(), b.object.as_deref());
                    prop_assert_eq!(a.removed.as_deref(), b.removed.as_deref());
                }
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                _ => prop_assert!(false, "{:?} against {:?}", in_place, by_copy),
            }
            prop_assert_eq!(store.get(&key), copied.get(&key));
            prop_assert_eq!(store.resource_version(), copied.resource_version());
            let changes = |s: &ClusterStore| -> Vec<(u64, Value)> {
                s.changes_since(0).expect("kept").map(|c| (c.resource_version, Value::clone(&c.object))).collect()
            };
            prop_assert_eq!(changes(&store), changes(&copied));
        }
    }

    /// What the engine reads of an object follows a patch made in place.
    #[test]
    fn a_patch_in_place_renews_what_the_object_reads_as() {
        let mut store = ClusterStore::new("t");
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                          "spec": {"unschedulable": false}});
        let key = store.create(node, NOW).expect("creates").key;
        let unschedulable = |store: &ClusterStore| match store.iter_read(|_| true).next() {
            Some((_, _, Ok(Some(engine::model::Object::Node(n))))) => n.unschedulable,
            other => panic!("{other:?}"),
        };
        assert!(!unschedulable(&store));
        store
            .patch(&key, &json!({"spec": {"unschedulable": true}}), Part::Main)
            .expect("patches");
        assert!(unschedulable(&store));
    }

    /// A reading given back is kept only for the object it was read from, not for a later
    /// state of it.
    #[test]
    fn a_reading_given_back_is_kept_only_for_the_state_it_read() {
        let mut store = ClusterStore::new("t");
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
        let key = store.create(node, NOW).expect("creates").key;
        let lent = |store: &mut ClusterStore| {
            let (_, _, read) = store.read_owned(|_| true).next().expect("stored");
            read.expect("reads").expect("a Node")
        };
        let before = lent(&mut store);
        store
            .patch(&key, &json!({"spec": {"unschedulable": true}}), Part::Main)
            .expect("patches");
        store.give_back_reading(&key, before);
        assert_eq!(store.kept_reading(&key), None, "an earlier state's reading");
        let now = lent(&mut store);
        store.give_back_reading(&key, now.clone());
        assert_eq!(store.kept_reading(&key), Some(&Ok(Some(now))));
    }

    /// An object nothing else holds is patched where it is stored, not copied.
    #[test]
    fn a_patch_of_an_object_nothing_else_holds_copies_nothing() {
        let mut store = ClusterStore::new("t");
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "o", "namespace": "ns"}, "spec": {"a": 1}});
        let key = store.create(object, NOW).expect("creates").key;
        let before = Arc::as_ptr(store.get_shared(&key).expect("stored"));
        let written = store
            .patch(&key, &json!({"spec": {"a": 2}}), Part::Main)
            .expect("patches");
        let after = written.object.expect("kept");
        assert_eq!(Arc::as_ptr(&after), before);
        assert_eq!(after["spec"]["a"], 2);
        assert_eq!(after["metadata"]["generation"], 2);
    }
}
