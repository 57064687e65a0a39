//! `metadata.managedFields` as kube-apiserver keeps them for writes that are not server-side
//! apply (operation `Update`; its field manager over structured-merge-diff):
//!
//! * one entry per (manager, operation, apiVersion, subresource), `fieldsType: FieldsV1`;
//! * a write that adds or changes fields gives them to its manager (added to what it owned)
//!   and takes them from every other manager; fields it removes leave every manager; an
//!   entry left with no field goes; the writer's `time` (RFC 3339, seconds) is set only when
//!   it changed something;
//! * the fields are leaves and the nodes created on the way (`.` in FieldsV1); lists follow
//!   their schema: `listType=map` elements by their keys (`k:{"type":"Ready"}`),
//!   `listType=set` by value (`v:"a"`), any other list is one field;
//! * `apiVersion`, `kind` and the server's metadata (name, namespace, uid, resourceVersion,
//!   generation, creationTimestamp, selfLink, managedFields) are never owned;
//! * entries are sorted as the server sorts them (operation, time, manager, apiVersion,
//!   subresource).
//!
//! * what a write to the main resource sends in `metadata.managedFields` ([`Sent`]): `[{}]`
//!   resets them (the write's own fields are then all that is kept), a list that reads as
//!   entries replaces them, anything else (none, `[]`, entries that do not read) keeps the
//!   stored ones; a subresource write's are ignored.
//!
//! Not kept: server-side apply (the fake server answers it 415) and the cap of ten `Update`
//! entries (`ancient-changes`).

use engine::time::Timestamp;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// How a list merges, from its schema (`x-kubernetes-list-type`, `-list-map-keys`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole: one field.
    Atomic,
    /// Scalars, each a field of its own (`v:<value>`).
    Set,
    /// Objects told apart by these keys (`k:{"type":"Ready"}`).
    Map(Vec<String>),
}

/// The type of the list at `path` (field names from the object's root) in an object of
/// `api_version` and `kind`.
pub type ListTypes = fn(api_version: &str, kind: &str, path: &[&str]) -> ListType;

/// What the simulator knows without a schema: `metadata.finalizers` is a set,
/// `metadata.ownerReferences` a map keyed by uid, any list named `conditions` a map keyed by
/// type; every other list is atomic.
pub fn known_list_type(_api_version: &str, _kind: &str, path: &[&str]) -> ListType {
    match path {
        ["metadata", "finalizers"] => ListType::Set,
        ["metadata", "ownerReferences"] => ListType::Map(vec!["uid".to_string()]),
        [.., "conditions"] => ListType::Map(vec!["type".to_string()]),
        _ => ListType::Atomic,
    }
}

/// The subresource a write went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subresource {
    Status,
    Scale,
}

impl Subresource {
    pub fn as_str(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
        }
    }
}

/// Who writes, as `managedFields` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    /// The request's `fieldManager`, else its User-Agent up to the first `/`.
    pub manager: String,
    /// `None` for the main resource.
    pub subresource: Option<Subresource>,
    /// What the request's body said of `managedFields`.
    pub sent: Sent,
}

impl Writer {
    pub fn new(manager: &str, subresource: Option<Subresource>) -> Writer {
        Writer {
            manager: manager.to_string(),
            subresource,
            sent: Sent::Keep,
        }
    }

    /// With what the request's object says of `managedFields` ([`Sent::of`]).
    pub fn sending(mut self, sent: Sent) -> Writer {
        self.sent = sent;
        self
    }
}

/// What a write's object says of `managedFields`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Nothing the server takes: the stored ones stay.
    Keep,
    /// `[{}]`: forget them all.
    Reset,
    /// Entries that replace the stored ones.
    Replace(Vec<Entry>),
}

impl Sent {
    /// From the object a request would store (its `metadata.managedFields`).
    pub fn of(object: &Value) -> Sent {
        let Some(list) = object
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
        else {
            return Sent::Keep;
        };
        if let [only] = list.as_slice()
            && only.as_object().is_some_and(|o| o.is_empty())
        {
            return Sent::Reset;
        }
        let entries: Option<Vec<Entry>> = list.iter().map(Entry::sent).collect();
        match entries {
            Some(entries) if !entries.is_empty() => Sent::Replace(entries),
            _ => Sent::Keep,
        }
    }
}

/// The longest field manager name the server keeps (`validation.FieldManagerMaxLength`).
pub const MANAGER_BYTES_MAX: usize = 128;

/// The manager kube-apiserver names for a request without `fieldManager`: its User-Agent up
/// to the first `/`, without unprintable characters, at most [`MANAGER_BYTES_MAX`] bytes.
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let mut out = String::new();
    for c in user_agent.split('/').next().unwrap_or_default().chars() {
        if c.is_control() {
            continue;
        }
        if out.len() + c.len_utf8() > MANAGER_BYTES_MAX {
            break;
        }
        out.push(c);
    }
    out
}

/// One path element as FieldsV1 spells it: `f:name`, `k:{"type":"Ready"}`, `v:"a"`.
type FieldPath = Vec<String>;

/// A set of fields: each path is a member.
pub type FieldSet = BTreeSet<FieldPath>;

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    fn of(value: &Value) -> Option<Entry> {
        let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_string);
        Some(Entry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation")?,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource").filter(|s| !s.is_empty()),
            fields: value.get("fieldsV1").map(parse_fields).unwrap_or_default(),
        })
    }

    /// An entry a client sent, when it reads as one the server would decode.
    fn sent(value: &Value) -> Option<Entry> {
        let entry = Entry::of(value)?;
        let operation_ok = entry.operation == "Update" || entry.operation == "Apply";
        let fields_type = value.get("fieldsType").and_then(Value::as_str);
        let fields_ok = value.get("fieldsV1").is_none_or(Value::is_object);
        (operation_ok && matches!(fields_type, None | Some("FieldsV1")) && fields_ok)
            .then_some(entry)
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("apiVersion".into(), json!(self.api_version));
        out.insert("fieldsType".into(), json!("FieldsV1"));
        out.insert("fieldsV1".into(), fields_json(&self.fields));
        out.insert("manager".into(), json!(self.manager));
        out.insert("operation".into(), json!(self.operation));
        if let Some(s) = &self.subresource {
            out.insert("subresource".into(), json!(s));
        }
        if let Some(t) = &self.time {
            out.insert("time".into(), json!(t));
        }
        Value::Object(out)
    }
}

/// The entries of an object's `metadata.managedFields` (entries that do not read as one are
/// dropped).
pub fn entries(object: &Value) -> Vec<Entry> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|all| all.iter().filter_map(Entry::of).collect())
        .unwrap_or_default()
}

/// A FieldsV1 trie as a set: a node is a member when it holds `.` or nothing.
pub fn parse_fields(trie: &Value) -> FieldSet {
    fn walk(node: &Value, path: &mut FieldPath, out: &mut FieldSet) {
        let Some(children) = node.as_object() else {
            return;
        };
        let named: Vec<_> = children.iter().filter(|(k, _)| *k != ".").collect();
        if (named.is_empty() || children.contains_key(".")) && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, child) in named {
            path.push(k.clone());
            walk(child, path, out);
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(trie, &mut Vec::new(), &mut out);
    out
}

/// A set as a FieldsV1 trie.
pub fn fields_json(fields: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut node = &mut root;
        for element in path {
            node = node
                .entry(element.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("trie nodes are objects");
        }
        node.insert(".".into(), json!({}));
    }
    // A member without children is `{}`, not `{".": {}}`.
    fn tidy(node: &mut Map<String, Value>) {
        if node.len() == 1 && node.contains_key(".") {
            node.clear();
            return;
        }
        for (k, child) in node.iter_mut() {
            if k != "."
                && let Some(child) = child.as_object_mut()
            {
                tidy(child);
            }
        }
    }
    tidy(&mut root);
    sort(Value::Object(root))
}

/// Keys in order (`.` first, then `f:`, `k:`, `v:`), whatever the map's own order.
fn sort(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut pairs: Vec<(String, Value)> = map.into_iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(pairs.into_iter().map(|(k, v)| (k, sort(v))).collect())
        }
        other => other,
    }
}

/// What a write changed: fields added or modified, and fields removed.
#[derive(Debug, Default)]
struct Compared {
    changed: FieldSet,
    removed: FieldSet,
}

struct Schema<'a> {
    api_version: &'a str,
    kind: &'a str,
    list_types: ListTypes,
}

/// Top-level fields and metadata no manager owns.
fn stripped(path: &[String]) -> bool {
    match path {
        [top] => top == "f:apiVersion" || top == "f:kind" || top == "f:metadata",
        [meta, field, ..] if meta == "f:metadata" => matches!(
            field.as_str(),
            "f:name"
                | "f:namespace"
                | "f:uid"
                | "f:resourceVersion"
                | "f:generation"
                | "f:creationTimestamp"
                | "f:selfLink"
                | "f:managedFields"
                | "f:deletionTimestamp"
                | "f:deletionGracePeriodSeconds"
        ),
        _ => false,
    }
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// The elements of a keyed or set list by their path element, or `None` when the list does
/// not hold what its type says (it is then compared whole).
fn elements<'v>(list: &'v [Value], list_type: &ListType) -> Option<Vec<(String, &'v Value)>> {
    let mut out: Vec<(String, &Value)> = Vec::with_capacity(list.len());
    for item in list {
        let element = match list_type {
            ListType::Atomic => return None,
            ListType::Set => {
                if item.is_object() || item.is_array() {
                    return None;
                }
                format!("v:{item}")
            }
            ListType::Map(keys) => {
                let mut key = Map::new();
                for k in keys {
                    key.insert(k.clone(), item.get(k)?.clone());
                }
                format!("k:{}", sort(Value::Object(key)))
            }
        };
        if out.iter().any(|(e, _)| *e == element) {
            return None;
        }
        out.push((element, item));
    }
    Some(out)
}

impl Schema<'_> {
    fn list_type(&self, names: &[&str]) -> ListType {
        (self.list_types)(self.api_version, self.kind, names)
    }

    /// `path` and everything under `value` into `out`.
    fn all<'v>(
        &self,
        value: &'v Value,
        path: &mut FieldPath,
        names: &mut Vec<&'v str>,
        out: &mut FieldSet,
    ) {
        if !path.is_empty() {
            out.insert(path.clone());
        }
        match value {
            Value::Object(map) => {
                for (k, child) in map.iter().filter(|(_, v)| !v.is_null()) {
                    path.push(format!("f:{k}"));
                    names.push(k);
                    self.all(child, path, names, out);
                    names.pop();
                    path.pop();
                }
            }
            Value::Array(list) => {
                let list_type = self.list_type(names);
                for (element, item) in elements(list, &list_type).unwrap_or_default() {
                    path.push(element);
                    self.all(item, path, names, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }

    fn compare<'v>(
        &self,
        before: Option<&'v Value>,
        after: Option<&'v Value>,
        path: &mut FieldPath,
        names: &mut Vec<&'v str>,
        out: &mut Compared,
    ) {
        match (present(before), present(after)) {
            (None, None) => {}
            (Some(b), None) => self.all(b, path, names, &mut out.removed),
            (None, Some(a)) => self.all(a, path, names, &mut out.changed),
            (Some(Value::Object(b)), Some(Value::Object(a))) => {
                let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
                for k in keys {
                    path.push(format!("f:{k}"));
                    names.push(k);
                    self.compare(b.get(k), a.get(k), path, names, out);
                    names.pop();
                    path.pop();
                }
            }
            (Some(Value::Array(b)), Some(Value::Array(a))) => {
                let list_type = self.list_type(names);
                match (elements(b, &list_type), elements(a, &list_type)) {
                    (Some(b), Some(a)) => {
                        let keys: BTreeSet<&String> =
                            b.iter().chain(a.iter()).map(|(e, _)| e).collect();
                        for k in keys {
                            let find = |l: &[(String, &'v Value)]| {
                                l.iter().find(|(e, _)| e == k).map(|(_, v)| *v)
                            };
                            path.push(k.clone());
                            self.compare(find(&b), find(&a), path, names, out);
                            path.pop();
                        }
                    }
                    _ if b != a => {
                        out.changed.insert(path.clone());
                    }
                    _ => {}
                }
            }
            (Some(b), Some(a)) if b != a => {
                if a.is_object() || a.is_array() {
                    self.all(a, path, names, &mut out.changed);
                } else {
                    out.changed.insert(path.clone());
                }
            }
            _ => {}
        }
    }
}

/// Sets `after`'s `managedFields` for a write by `writer` at `now` that turned `before` (none:
/// a create) into `after`; `list_types` says how its lists merge.
pub fn record(
    before: Option<&Value>,
    after: &mut Value,
    writer: &Writer,
    now: Timestamp,
    list_types: ListTypes,
) {
    let stored = || before.map(entries).unwrap_or_default();
    let mut managed = match (&writer.sent, writer.subresource) {
        (Sent::Reset, None) => Vec::new(),
        (Sent::Replace(sent), None) => sent.clone(),
        _ => stored(),
    };
    let api_version = after
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = after
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let schema = Schema {
        api_version: &api_version,
        kind: &kind,
        list_types,
    };
    let mut compared = Compared::default();
    schema.compare(
        before,
        Some(&*after),
        &mut Vec::new(),
        &mut Vec::new(),
        &mut compared,
    );
    compared.changed.retain(|p| !stripped(p));
    compared.removed.retain(|p| !stripped(p));
    let subresource = writer.subresource.map(|s| s.as_str().to_string());
    let is_writer = |e: &Entry| {
        e.manager == writer.manager
            && e.operation == "Update"
            && e.api_version == api_version
            && e.subresource == subresource
    };
    for e in &mut managed {
        e.fields.retain(|p| !compared.removed.contains(p));
        if !is_writer(e) {
            e.fields.retain(|p| !compared.changed.contains(p));
        }
    }
    if !compared.changed.is_empty() {
        let time = Some(now.to_rfc3339());
        match managed.iter_mut().find(|e| is_writer(e)) {
            Some(e) => {
                e.fields.extend(compared.changed);
                e.time = time;
            }
            None => managed.push(Entry {
                manager: writer.manager.clone(),
                operation: "Update".to_string(),
                api_version: api_version.clone(),
                time,
                subresource,
                fields: compared.changed,
            }),
        }
    }
    managed.retain(|e| !e.fields.is_empty());
    managed.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = after
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if managed.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(managed.iter().map(Entry::to_json).collect()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_704_067_200_000);

    fn later(minutes: i64) -> Timestamp {
        Timestamp(T0.0 + minutes * 60_000)
    }

    fn machine() -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": "m", "namespace": "default", "uid": "u", "resourceVersion": "1",
                            "labels": {"a": "1"}},
               "spec": {"clusterName": "c"}})
    }

    fn write(
        before: Option<&Value>,
        mut after: Value,
        manager: &str,
        sub: Option<Subresource>,
        at: Timestamp,
    ) -> Value {
        record(
            before,
            &mut after,
            &Writer::new(manager, sub),
            at,
            known_list_type,
        );
        after
    }

    fn entry<'a>(o: &'a Value, manager: &str) -> Option<&'a Value> {
        o["metadata"]["managedFields"]
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager)
    }

    #[test]
    fn a_create_owns_what_it_set_but_the_server_metadata() {
        let created = write(None, machine(), "kubectl-create", None, T0);
        let e = entry(&created, "kubectl-create").unwrap();
        assert_eq!(e["operation"], "Update");
        assert_eq!(e["apiVersion"], "cluster.x-k8s.io/v1beta2");
        assert_eq!(e["fieldsType"], "FieldsV1");
        assert_eq!(e["time"], "2024-01-01T00:00:00Z");
        assert!(e.get("subresource").is_none());
        assert_eq!(
            e["fieldsV1"],
            json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                   "f:spec": {".": {}, "f:clusterName": {}}})
        );
    }

    #[test]
    fn a_status_write_owns_conditions_by_type_and_takes_them_from_others() {
        let created = write(None, machine(), "kubectl", None, T0);
        let mut next = created.clone();
        next["status"] = json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Deleting", "status": "False"}]});
        let by_capi = write(
            Some(&created),
            next,
            "manager",
            Some(Subresource::Status),
            later(1),
        );
        let e = entry(&by_capi, "manager").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["time"], "2024-01-01T00:01:00Z");
        assert_eq!(
            e["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"Ready\"}"],
            json!({".": {}, "f:status": {}, "f:type": {}})
        );
        assert_eq!(e["fieldsV1"]["f:status"]["f:phase"], json!({}));
        // Another manager changes Ready's status: it owns that field now, CAPI keeps the rest.
        let mut next = by_capi.clone();
        next["status"]["conditions"][0]["status"] = json!("False");
        let by_us = write(
            Some(&by_capi),
            next,
            "lifecycle",
            Some(Subresource::Status),
            later(2),
        );
        let capi = entry(&by_us, "manager").unwrap();
        assert_eq!(
            capi["time"], "2024-01-01T00:01:00Z",
            "untouched: its time stays"
        );
        assert_eq!(
            capi["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"Ready\"}"],
            json!({".": {}, "f:type": {}})
        );
        let ours = entry(&by_us, "lifecycle").unwrap();
        assert_eq!(
            ours["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {"f:status": {}}}}})
        );
        // Entries sort by time: the older first.
        let managers: Vec<_> = by_us["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["kubectl", "manager", "lifecycle"]);
    }

    #[test]
    fn a_write_that_changes_nothing_leaves_the_entries_and_times() {
        let created = write(None, machine(), "kubectl", None, T0);
        let same = write(Some(&created), created.clone(), "other", None, later(3));
        assert_eq!(
            same["metadata"]["managedFields"],
            created["metadata"]["managedFields"]
        );
    }

    #[test]
    fn removed_fields_leave_their_owner_and_an_empty_entry_goes() {
        let created = write(None, machine(), "kubectl", None, T0);
        let mut next = created.clone();
        next["metadata"]["labels"]["b"] = json!("2");
        let labelled = write(Some(&created), next, "kubectl-label", None, later(1));
        assert_eq!(
            entry(&labelled, "kubectl-label").unwrap()["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:b": {}}}})
        );
        let mut next = labelled.clone();
        next["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("b");
        let unlabelled = write(Some(&labelled), next, "kubectl-label", None, later(2));
        assert!(entry(&unlabelled, "kubectl-label").is_none());
    }

    #[test]
    fn finalizers_are_a_set_and_other_lists_are_atomic() {
        let mut m = machine();
        m["metadata"]["finalizers"] = json!(["a", "b"]);
        m["spec"]["taints"] = json!([{"key": "k"}]);
        let created = write(None, m, "x", None, T0);
        let f = &entry(&created, "x").unwrap()["fieldsV1"];
        assert_eq!(
            f["f:metadata"]["f:finalizers"],
            json!({".": {}, "v:\"a\"": {}, "v:\"b\"": {}})
        );
        assert_eq!(f["f:spec"]["f:taints"], json!({}));
    }

    #[test]
    fn what_a_main_write_sends_resets_or_replaces_and_a_status_write_sends_nothing() {
        let created = write(None, machine(), "kubectl", None, T0);
        let mut reset = created.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        assert_eq!(Sent::of(&reset), Sent::Reset);
        let mut after = created.clone();
        after["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        let with = |sent: Sent, sub| {
            let mut out = after.clone();
            let writer = Writer::new("editor", sub).sending(sent);
            record(Some(&created), &mut out, &writer, later(1), known_list_type);
            out
        };
        // Reset, nothing else changed: none left.
        assert!(
            with(Sent::Reset, None)["metadata"]
                .get("managedFields")
                .is_none()
        );
        // Through a subresource what is sent is ignored.
        assert_eq!(
            with(Sent::Reset, Some(Subresource::Status))["metadata"]["managedFields"],
            created["metadata"]["managedFields"]
        );
        let mut edited = created.clone();
        edited["metadata"]["managedFields"][0]["manager"] = json!("renamed");
        let sent = Sent::of(&edited);
        assert!(matches!(&sent, Sent::Replace(e) if e[0].manager == "renamed"));
        assert!(entry(&with(sent, None), "renamed").is_some());
        // `[]`, or entries that do not read, keep what is stored.
        for kept in [
            json!([]),
            json!([{"manager": "x", "operation": "Delete"}]),
            json!("x"),
        ] {
            let mut o = created.clone();
            o["metadata"]["managedFields"] = kept;
            assert_eq!(Sent::of(&o), Sent::Keep);
        }
    }

    #[test]
    fn a_fields_trie_reads_back_as_it_was_written() {
        let trie = json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                          "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}}}});
        assert_eq!(fields_json(&parse_fields(&trie)), trie);
    }

    #[test]
    fn the_manager_is_the_user_agent_up_to_the_first_slash() {
        assert_eq!(
            manager_from_user_agent("kubectl/v1.32.0 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(manager_from_user_agent("manager/v1.12.3"), "manager");
        assert_eq!(manager_from_user_agent(""), "");
        assert_eq!(
            manager_from_user_agent(&"x".repeat(300)).len(),
            MANAGER_BYTES_MAX
        );
    }
}
