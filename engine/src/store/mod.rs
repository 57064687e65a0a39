//! The engine's cache of observed objects, with the indexes the controllers need.

mod table;

use crate::connection::Unreachable;
use crate::model::{CLUSTER_NAME_LABEL, Kind, Machine, Object, ObjectKey, Pod, Scope};
use crate::time::{Duration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One observed change, borrowed: the object before and after (either may be absent).
/// Nothing is cloned to describe a change: `after` is the stored object, `before` the one it
/// replaced ([`Replaced`]).
#[derive(Clone, Copy, Debug)]
pub struct Change<'a> {
    pub key: &'a ObjectKey,
    pub before: Option<&'a Object>,
    pub after: Option<&'a Object>,
}

impl<'a> Change<'a> {
    /// The object as it is now, or as it was last seen when it is gone.
    pub fn latest(&self) -> Option<&'a Object> {
        self.after.or(self.before)
    }
}

/// What an accepted write replaced: the object's previous version, moved out of the store,
/// and where the object is now. [`Store::change`] turns it into the [`Change`] controllers
/// see; use it before the next write.
#[derive(Debug)]
pub struct Replaced {
    pub before: Option<Box<Object>>,
    now: Now,
}

#[derive(Debug)]
enum Now {
    /// Stored in this table slot (its key is the stored one: nothing is cloned).
    Stored(u32),
    Removed(ObjectKey),
}

/// Observed objects of every cluster, keyed canonically, plus secondary indexes.
///
/// Guarantees: iteration order is the key order (deterministic); an upsert with an older
/// `resourceVersion` than the cached one is ignored (a stale watch event or API answer).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Encoded")]
pub struct Store {
    objects: table::Table,
    /// Counts accepted changes (upserts that changed something, removals).
    changes: u64,
    indexes: Indexes,
    synced: BTreeSet<Scope>,
    /// Objects the API delivered in a form the controllers cannot read, with the problem.
    /// Their last good reading (if any) stays in `objects`; the decisions that depend on them
    /// wait ([`Store::unreadable`]).
    unreadable: BTreeMap<ObjectKey, String>,
    /// Kinds the API would not list, per cluster, with the problem: every object of such a
    /// kind there is unknown ([`Store::unreadable`]) until a list succeeds.
    unlisted: BTreeMap<(Scope, Kind), String>,
    /// Kinds listed on their own ([`Input::RelistKind`](crate::Input::RelistKind)) since the
    /// scope's last full relist: a drain kind is known in a workload cluster only while it is
    /// here ([`Store::kind_listed`]).
    listed_kinds: BTreeSet<(Scope, Kind)>,
    /// Workload clusters whose connector could not connect, and why
    /// ([`crate::Input::ClusterUnreachable`]); an entry goes when the cluster connects or its
    /// Cluster is gone. Not in the store's own encoding: the engine's state carries it after
    /// everything else, and only when there is one (see [`crate::engine::STATE_VERSION`]).
    #[serde(skip)]
    unreachable: BTreeMap<Scope, Unreachable>,
}

/// The store's secondary indexes (a separate field so that they can be updated while the
/// stored object is borrowed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Indexes {
    /// Pods by cluster and node name, each with the value of `changes` when it last changed:
    /// a drain keeps what it derived from a pod until that number moves. Nested so that a
    /// lookup borrows its keys instead of building them.
    pods_by_node: BTreeMap<Scope, BTreeMap<String, BTreeMap<ObjectKey, u64>>>,
    /// Nodes by (cluster, providerID).
    nodes_by_provider_id: BTreeMap<(Scope, String), BTreeSet<ObjectKey>>,
    /// Machines by (management, `<namespace>/<spec.clusterName>`).
    machines_by_cluster: BTreeMap<(Scope, String), BTreeSet<ObjectKey>>,
    /// The subset of `machines_by_cluster` that [`is_active_control_plane`]: the deletion of
    /// every Machine counts them, so the count must not cost a lookup per Machine.
    active_control_plane_by_cluster: BTreeMap<(Scope, String), BTreeSet<ObjectKey>>,
    /// MachineHealthChecks by (management, `<namespace>/<spec.clusterName>`): a Machine change
    /// finds the MHCs that may cover it without walking every MHC.
    health_checks_by_cluster: BTreeMap<(Scope, String), BTreeSet<ObjectKey>>,
    /// Machines by namespace and `cluster.x-k8s.io/cluster-name` label: the only Machines an
    /// MHC can select. Derived from the objects: not encoded, rebuilt when a store is decoded.
    #[serde(skip)]
    machines_by_cluster_label: MachinesByLabel,
    #[serde(skip)]
    namespace_changes: NamespaceChanges,
    /// Nodes and provider objects seen removed, while that is news to something (see
    /// [`Store::node_seen_gone`]).
    tombstones: Tombstones,
    /// The change number at each cluster's last relist.
    relisted_at: BTreeMap<Scope, u64>,
    /// Per Machine with a `status.nodeRef`, the change number when that nodeRef was stored.
    node_ref_since: BTreeMap<ObjectKey, u64>,
    /// Per Machine and MachinePool, the change number when it was first stored (their provider
    /// references are immutable, so this is also when they were).
    referrer_since: BTreeMap<ObjectKey, u64>,
}

/// Nodes and provider objects seen removed (a watch deletion, a relist without them, an API
/// answer that they are gone): their absence is news to whatever refers to them
/// ([`Store::seen_gone`]). One goes with its cluster's next relist, when the object comes
/// back, or once nothing refers to it after it has been news for a whole
/// [`TOMBSTONE_WINDOW`]: a Machine that reaches the cache after its Node's removal (another
/// watch stream) still finds the removal seen, and a fleet that churns for months keeps the
/// tombstones of its last windows and of its referred objects only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Tombstones {
    /// Seen removed in the current window.
    recent: BTreeSet<ObjectKey>,
    /// Seen removed before it: the next window's end drops those nothing refers to.
    #[serde(deserialize_with = "crate::codec::added_in_11")]
    older: BTreeSet<ObjectKey>,
}

/// How long a tombstone nothing refers to is kept at least (at most twice this): longer than a
/// watch stream lags another.
pub const TOMBSTONE_WINDOW: Duration = Duration::from_mins(10);

impl Tombstones {
    fn contains(&self, key: &ObjectKey) -> bool {
        self.recent.contains(key) || self.older.contains(key)
    }

    /// Seen removed now (news again if it already was), or back.
    fn set(&mut self, key: &ObjectKey, gone: bool) {
        self.older.remove(key);
        if gone {
            self.recent.insert(key.clone());
        } else {
            self.recent.remove(key);
        }
    }

    /// Forgets the tombstones of `scope` (it was listed).
    fn clear_scope(&mut self, scope: &Scope) {
        for set in [&mut self.recent, &mut self.older] {
            remove_scope(
                set,
                ObjectKey::new(scope.clone(), Kind::Cluster, "", ""),
                |k| k.scope == *scope,
            );
        }
    }

    /// A window ended: the older tombstones `referred` keeps stay, the others go, and the
    /// recent ones become older.
    fn end_window(&mut self, referred: impl FnOnce(&BTreeSet<ObjectKey>) -> BTreeSet<ObjectKey>) {
        let kept = if self.older.is_empty() {
            BTreeSet::new()
        } else {
            referred(&self.older)
        };
        self.older = std::mem::take(&mut self.recent);
        self.older.extend(kept);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.recent.len() + self.older.len()
    }
}

/// Per cluster, the change number of its last Namespace change: a drain's kept pod
/// classifications (which read Namespaces) stay valid while it does not move. A cache, not
/// state: not encoded, equal to any other; a decoded store starts at 0, as do the
/// classifications kept with it (none).
/// A number that failed to move would leave those classifications stale: debug builds check
/// every one of them against a fresh classification (`deletion::pods`), where it would show.
#[derive(Clone, Debug, Default)]
struct NamespaceChanges(BTreeMap<Scope, u64>);

impl PartialEq for NamespaceChanges {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for NamespaceChanges {}

/// The encoded form of a [`Store`]: the same fields, without the indexes that are rebuilt
/// from the objects on decoding.
#[derive(Deserialize)]
struct Encoded {
    objects: table::Table,
    changes: u64,
    indexes: Indexes,
    synced: BTreeSet<Scope>,
    unreadable: BTreeMap<ObjectKey, String>,
    unlisted: BTreeMap<(Scope, Kind), String>,
    listed_kinds: BTreeSet<(Scope, Kind)>,
}

impl From<Encoded> for Store {
    fn from(e: Encoded) -> Store {
        let mut indexes = e.indexes;
        for (key, object) in e.objects.iter_kind(&Scope::Management, &Kind::Machine) {
            if let Object::Machine(m) = object {
                indexes.machines_by_cluster_label.set(key, m, true);
            }
        }
        Store {
            objects: e.objects,
            changes: e.changes,
            indexes,
            synced: e.synced,
            unreadable: e.unreadable,
            unlisted: e.unlisted,
            listed_kinds: e.listed_kinds,
            unreachable: BTreeMap::new(),
        }
    }
}

/// Machine keys by namespace, then by cluster-name label (nested so that a lookup borrows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MachinesByLabel(BTreeMap<String, BTreeMap<String, BTreeSet<ObjectKey>>>);

impl MachinesByLabel {
    fn set(&mut self, key: &ObjectKey, m: &Machine, add: bool) {
        let Some(label) = m.meta.labels.get(CLUSTER_NAME_LABEL) else {
            return;
        };
        let namespace = m.meta.namespace.as_str();
        if add {
            let labels = match self.0.get_mut(namespace) {
                Some(labels) => labels,
                None => self.0.entry(namespace.to_string()).or_default(),
            };
            match labels.get_mut(label.as_str()) {
                Some(keys) => keys.insert(key.clone()),
                None => labels.entry(label.clone()).or_default().insert(key.clone()),
            };
        } else if let Some(labels) = self.0.get_mut(namespace) {
            if let Some(keys) = labels.get_mut(label.as_str()) {
                keys.remove(key);
                if keys.is_empty() {
                    labels.remove(label.as_str());
                }
            }
            if labels.is_empty() {
                self.0.remove(namespace);
            }
        }
    }

    fn get(&self, namespace: &str, label: &str) -> Option<&BTreeSet<ObjectKey>> {
        self.0.get(namespace)?.get(label)
    }
}

impl Store {
    /// The stored objects, taken apart: a simulator gives back what a throwaway engine read
    /// instead of copying it for the engine and dropping the engine's copies.
    #[cfg(feature = "testing")]
    pub fn into_objects(self) -> impl Iterator<Item = (ObjectKey, Object)> {
        self.objects
            .into_entries()
            .map(|(key, object)| (key, *object))
    }

    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        self.objects.get(key)
    }

    /// The stored key and object at (scope, kind, namespace, name): a lookup that builds no
    /// key.
    pub fn get_parts(
        &self,
        scope: &Scope,
        kind: &Kind,
        namespace: &str,
        name: &str,
    ) -> Option<(&ObjectKey, &Object)> {
        self.objects
            .find(scope, kind, kind.key_namespace(namespace), name)
    }

    /// The problem that keeps `key` unknown: the API shows the object, but not in a form the
    /// controllers can read. Unknown is neither absent nor healthy: whoever decides on the
    /// object waits, and a lookup that finds nothing for it must not conclude "not found".
    pub fn unreadable(&self, key: &ObjectKey) -> Option<&str> {
        if !self.has_unreadable() {
            return None;
        }
        self.unreadable
            .get(key)
            .or_else(|| self.unlisted_problem(&key.scope, &key.kind))
            .map(String::as_str)
    }

    /// Why `kind` cannot be listed in `scope`, when it cannot.
    pub fn unlisted(&self, scope: &Scope, kind: &Kind) -> Option<&str> {
        self.unlisted_problem(scope, kind).map(String::as_str)
    }

    fn unlisted_problem(&self, scope: &Scope, kind: &Kind) -> Option<&String> {
        self.unlisted
            .iter()
            .find(|((s, k), _)| s == scope && k == kind)
            .map(|(_, problem)| problem)
    }

    /// Records that `kind` cannot be listed in `scope` (`Some(problem)`) or can again
    /// (`None`); whether that changed anything.
    pub fn set_unlisted(&mut self, scope: &Scope, kind: &Kind, problem: Option<String>) -> bool {
        let key = (scope.clone(), kind.clone());
        match problem {
            Some(p) if self.unlisted.get(&key) == Some(&p) => false,
            Some(p) => {
                self.unlisted.insert(key, p);
                true
            }
            None => self.unlisted.remove(&key).is_some(),
        }
    }

    /// Whether the cache speaks for `kind` in `scope` as a list of its own does: it was
    /// listed since the scope's last full relist (or cannot be, which makes its objects
    /// unknown rather than absent).
    pub fn kind_listed(&self, scope: &Scope, kind: &Kind) -> bool {
        let key = (scope.clone(), kind.clone());
        self.listed_kinds.contains(&key) || self.unlisted.contains_key(&key)
    }

    /// Forgets every object of `kind` in `scope` (its watch stopped): not deleted, unknown
    /// until it is listed again. Nothing is routed: what reads that kind waits for the list.
    pub fn forget_kind(&mut self, scope: &Scope, kind: &Kind) {
        let keys: Vec<ObjectKey> = self
            .iter_kind(scope, kind)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            self.unreadable.remove(key);
            if let Some(before) = self.objects.remove(key) {
                self.changes += 1;
                self.indexes.index(key, &before, false, self.changes);
            }
        }
        let key = (scope.clone(), kind.clone());
        self.listed_kinds.remove(&key);
        self.unlisted.remove(&key);
    }

    /// Whether the absence of `node` from the cache is news the cache has had time to learn,
    /// for `machine` whose `status.nodeRef` names it: the Node was seen removed, or its
    /// cluster was listed after that nodeRef was stored. Otherwise the Node may simply not have
    /// reached the cache yet (the Machine's watch and the Node's are separate streams, from
    /// separate clusters), and a Node never seen is not a deleted Node.
    pub fn node_seen_gone(&self, node: &ObjectKey, machine: &ObjectKey) -> bool {
        let since = self.indexes.node_ref_since.get(machine);
        self.absence_is_news(node, since, |listed, since| listed > since)
    }

    /// Whether the absence of provider object `key` from the cache is news the cache has had
    /// time to learn, for `referrer` (a Machine or MachinePool) that refers to it: it was seen
    /// removed (a watch deletion, a relist without it, an API answer that it is gone), or its
    /// cluster was listed since the referrer was first stored. Otherwise it may not have reached the cache
    /// yet (each kind is its own watch), and an object never seen is not a deleted one.
    pub fn seen_gone(&self, key: &ObjectKey, referrer: &ObjectKey) -> bool {
        // The referrer's own list counts: it lists the referred object too.
        let since = self.indexes.referrer_since.get(referrer);
        self.absence_is_news(key, since, |listed, since| listed >= since)
    }

    /// `key` was seen removed, or its cluster was listed after `since` (by `listed_after`; no
    /// `since` recorded: any list).
    fn absence_is_news(
        &self,
        key: &ObjectKey,
        since: Option<&u64>,
        listed_after: fn(u64, u64) -> bool,
    ) -> bool {
        let i = &self.indexes;
        if i.tombstones.contains(key) {
            return true;
        }
        match (i.relisted_at.get(&key.scope), since) {
            (Some(listed), Some(since)) => listed_after(*listed, *since),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Time moved from `before` to `now`: at the end of each [`TOMBSTONE_WINDOW`] (counted
    /// from the epoch) between them the tombstones nothing refers to that were news for a whole
    /// window go.
    pub(crate) fn pass_time(&mut self, before: Timestamp, now: Timestamp) {
        let window = |t: Timestamp| t.0.div_euclid(TOMBSTONE_WINDOW.as_millis());
        let ended = (window(now) - window(before)).clamp(0, 2);
        for _ in 0..ended {
            let objects = &self.objects;
            self.indexes
                .tombstones
                .end_window(|older| referred(objects, older));
        }
    }

    /// The API answered that `key` is gone (a NotFound, or a DELETE that removed it at once).
    pub fn note_gone(&mut self, key: &ObjectKey) {
        if matches!(key.kind, Kind::Node | Kind::External(_)) && self.objects.get(key).is_none() {
            self.indexes.mark_gone(key, true);
        }
    }

    /// The apiVersion a stored object of `kind` in `scope` is served in, if any is stored.
    pub fn api_version_of_kind(&self, scope: &Scope, kind: &Kind) -> Option<&str> {
        self.iter_scope(scope).find_map(|(k, o)| match o {
            Object::External(e) if k.kind == *kind => Some(e.api_version.as_str()),
            _ => None,
        })
    }

    /// Whether any object is unknown (a cheap test before building keys to look up).
    pub fn has_unreadable(&self) -> bool {
        !self.unreadable.is_empty() || !self.unlisted.is_empty()
    }

    /// Every unknown object of `scope` whose kind is `kind`, with its problem.
    pub fn unreadable_of_kind<'a>(
        &'a self,
        scope: &'a Scope,
        kind: &'a Kind,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a str)> + 'a {
        self.unreadable
            .iter()
            .filter(move |(k, _)| k.scope == *scope && k.kind == *kind)
            .map(|(k, p)| (k, p.as_str()))
    }

    /// Marks `key` unknown with `problem`; the object it had stays. Returns whether the mark
    /// changed, and the kept object as the change to route (its readers must look again).
    fn mark_unreadable(&mut self, key: ObjectKey, problem: String) -> Option<Replaced> {
        if self.unreadable.get(&key) == Some(&problem) {
            return None;
        }
        let kept = self.kept_as_change(&key);
        self.unreadable.insert(key, problem);
        kept
    }

    /// Clears the unknown mark of `key`; the change to route when there was one.
    fn clear_unreadable(&mut self, key: &ObjectKey) -> Option<Replaced> {
        if self.unreadable.is_empty() || self.unreadable.remove(key).is_none() {
            return None;
        }
        self.kept_as_change(key)
    }

    /// The stored object of `key` as a change from itself to itself.
    fn kept_as_change(&self, key: &ObjectKey) -> Option<Replaced> {
        let slot = self
            .objects
            .slot_of(&key.scope, &key.kind, &key.namespace, &key.name)?;
        Some(Replaced {
            before: self.objects.get(key).cloned().map(Box::new),
            now: Now::Stored(slot),
        })
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.len() == 0
    }

    pub fn is_synced(&self, scope: &Scope) -> bool {
        self.synced.contains(scope)
    }

    pub fn mark_unsynced_all(&mut self) {
        self.synced.clear();
    }

    /// Why workload cluster `scope` cannot be reached, while its connector says it cannot.
    pub fn unreachable(&self, scope: &Scope) -> Option<&Unreachable> {
        if self.unreachable.is_empty() {
            return None;
        }
        self.unreachable.get(scope)
    }

    /// Every workload cluster that cannot be reached, with why, in scope order.
    pub fn unreachable_clusters(&self) -> &BTreeMap<Scope, Unreachable> {
        &self.unreachable
    }

    /// Records why `scope` cannot be reached (`Some`) or that it connected (`None`); whether
    /// that changed anything. The management cluster is never recorded.
    pub fn set_unreachable(&mut self, scope: &Scope, reason: Option<Unreachable>) -> bool {
        match reason {
            _ if *scope == Scope::Management => false,
            Some(r) if self.unreachable.get(scope) == Some(&r) => false,
            Some(r) => {
                self.unreachable.insert(scope.clone(), r);
                true
            }
            None => self.unreachable.remove(scope).is_some(),
        }
    }

    /// Forgets the clusters whose Cluster object is not stored once the management cluster is
    /// listed: nothing waits on them, and the table stays as small as the fleet. Before that
    /// list (a process starting) an entry is kept: the connector of a Cluster the watch just
    /// reported may fail before that watch's list is complete, and the list will carry it.
    pub fn forget_unreachable_without_cluster(&mut self) {
        if self.unreachable.is_empty() || !self.is_synced(&Scope::Management) {
            return;
        }
        let objects = &self.objects;
        self.unreachable.retain(|scope, _| match scope {
            Scope::Workload(c) => objects
                .find(&Scope::Management, &Kind::Cluster, &c.namespace, &c.name)
                .is_some(),
            Scope::Management => false,
        });
    }

    /// Replaces the table of unreachable clusters (a decoded engine state hands it over).
    pub(crate) fn restore_unreachable(&mut self, table: BTreeMap<Scope, Unreachable>) {
        self.unreachable = table;
    }

    /// Every object of `kind` in `scope`, in key order.
    pub fn iter_kind<'a>(
        &'a self,
        scope: &Scope,
        kind: &Kind,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Object)> + use<'a> {
        self.objects.iter_kind(scope, kind)
    }

    /// Every object in a scope, in key order.
    pub fn iter_scope<'a>(
        &'a self,
        scope: &Scope,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Object)> + use<'a> {
        self.objects.iter_scope(scope)
    }

    /// Keys of the pods bound to `node` in `scope`.
    pub fn pods_on_node(&self, scope: &Scope, node: &str) -> impl Iterator<Item = &ObjectKey> {
        self.pods_on_node_versions(scope, node).map(|(k, _)| k)
    }

    /// Keys of the pods bound to `node` in `scope`, in key order, each with a number that
    /// changes whenever the pod changes (and only then).
    pub fn pods_on_node_versions(
        &self,
        scope: &Scope,
        node: &str,
    ) -> impl Iterator<Item = (&ObjectKey, u64)> {
        self.indexes
            .pods_by_node
            .get(scope)
            .and_then(|nodes| nodes.get(node))
            .into_iter()
            .flatten()
            .map(|(k, v)| (k, *v))
    }

    /// The change number of the last change to a Namespace of `scope` (0 when none was seen
    /// since this store was built or decoded).
    pub fn namespaces_changed_at(&self, scope: &Scope) -> u64 {
        self.indexes
            .namespace_changes
            .0
            .get(scope)
            .copied()
            .unwrap_or(0)
    }

    /// Nodes in `scope` whose `spec.providerID` is `provider_id`.
    pub fn nodes_by_provider_id(
        &self,
        scope: &Scope,
        provider_id: &str,
    ) -> impl Iterator<Item = &ObjectKey> {
        self.indexes
            .nodes_by_provider_id
            .get(&(scope.clone(), provider_id.to_string()))
            .into_iter()
            .flatten()
    }

    /// Keys of the Machines of the Cluster `namespace/cluster`.
    pub fn machines_of_cluster(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> impl Iterator<Item = &ObjectKey> {
        self.indexes
            .machines_by_cluster
            .get(&cluster_slot(namespace, cluster))
            .into_iter()
            .flatten()
    }

    /// Keys of the Machines of `namespace` labelled `cluster.x-k8s.io/cluster-name=<cluster>`,
    /// in key (name) order: every Machine an MHC of that cluster can select.
    pub fn machines_labelled_for_cluster(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> impl Iterator<Item = &ObjectKey> {
        self.indexes
            .machines_by_cluster_label
            .get(namespace, cluster)
            .into_iter()
            .flatten()
    }

    /// Keys of the MachineHealthChecks of the Cluster `namespace/cluster`.
    pub fn health_checks_of_cluster(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> impl Iterator<Item = &ObjectKey> {
        self.indexes
            .health_checks_by_cluster
            .get(&cluster_slot(namespace, cluster))
            .into_iter()
            .flatten()
    }

    /// How many Machines of the Cluster `namespace/cluster` are [`is_active_control_plane`].
    pub fn active_control_plane_machines(&self, namespace: &str, cluster: &str) -> usize {
        self.indexes
            .active_control_plane_by_cluster
            .get(&cluster_slot(namespace, cluster))
            .map_or(0, BTreeSet::len)
    }

    /// The change a write made, as controllers see it.
    pub fn change<'a>(&'a self, replaced: &'a Replaced) -> Change<'a> {
        let before = replaced.before.as_deref();
        match &replaced.now {
            Now::Stored(slot) => {
                let (key, after) = self.objects.at(*slot).expect("a write's slot is filled");
                Change {
                    key,
                    before,
                    after: Some(after),
                }
            }
            Now::Removed(key) => Change {
                key,
                before,
                after: None,
            },
        }
    }

    /// Whether the cache already holds `value`'s object at its resourceVersion or a later one:
    /// then a watch event of it can change nothing (most often it reports the controllers' own
    /// write, whose answer brought the object), so it need not be read, journaled nor applied.
    /// Resource versions are the API server's, so one version is one content. Never while an
    /// object is unreadable: a readable event then must reach [`Store::upsert`].
    pub fn holds(&self, scope: &Scope, value: &serde_json::Value) -> bool {
        if !self.unreadable.is_empty() {
            return false;
        }
        let Some(id) = crate::convert::identity(value) else {
            return false;
        };
        let namespace = id.kind.key_namespace(id.namespace);
        self.objects
            .find(scope, &id.kind, namespace, id.name)
            .is_some_and(|(_, stored)| stored.meta().resource_version >= id.resource_version)
    }

    /// Inserts or replaces an object. Returns what it replaced, or `None` when nothing changed
    /// or the update is older than what is cached.
    pub fn upsert(&mut self, scope: &Scope, object: impl Into<Box<Object>>) -> Option<Replaced> {
        let object: Box<Object> = object.into();
        if let Object::Unreadable(u) = *object {
            let key = ObjectKey::new(scope.clone(), u.kind, &u.meta.namespace, &u.meta.name);
            return self.mark_unreadable(key, u.problem);
        }
        let readable_again = if self.unreadable.is_empty() {
            None
        } else {
            self.clear_unreadable(&object.key(scope))
        };
        let kind = object.kind();
        let meta = object.meta();
        let namespace = kind.key_namespace(&meta.namespace);
        let Some((slot, (stored, existing))) =
            self.objects.entry_mut(scope, &kind, namespace, &meta.name)
        else {
            let key = object.key(scope);
            self.changes += 1;
            self.indexes.update(&key, None, &object, self.changes);
            let (slot, _) = self.objects.insert(key, object);
            return Some(Replaced {
                before: None,
                now: Now::Stored(slot),
            });
        };
        let (old_rv, new_rv) = (
            existing.meta().resource_version,
            object.meta().resource_version,
        );
        if (new_rv != 0 && old_rv > new_rv) || **existing == *object {
            return readable_again;
        }
        self.changes += 1;
        let before = std::mem::replace(existing, object);
        self.indexes
            .update(stored, Some(&before), existing, self.changes);
        Some(Replaced {
            before: Some(before),
            now: Now::Stored(slot),
        })
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Replaced> {
        if !self.unreadable.is_empty() {
            self.unreadable.remove(key);
        }
        let Some(before) = self.objects.remove(key) else {
            // Gone before it reached the cache: that it is gone is news all the same.
            self.note_gone(key);
            return None;
        };
        self.indexes.referrer_since.remove(key);
        self.changes += 1;
        self.indexes.index(key, &before, false, self.changes);
        Some(Replaced {
            before: Some(before),
            now: Now::Removed(key.clone()),
        })
    }

    /// Replaces everything in `scope` with `objects` (a relist) and marks the scope synced.
    /// Returns what changed, in order: removals first, then insertions and replacements. They
    /// stay valid together: only the removals free slots, and they own their keys.
    ///
    /// An unreadable object in the relist keeps its last good reading, marked unknown; marks
    /// of the scope that the relist does not repeat are cleared.
    pub fn replace_scope(&mut self, scope: &Scope, objects: Vec<Object>) -> Vec<Replaced> {
        self.replace(scope, None, objects)
    }

    /// [`Store::replace_scope`] for the objects of one `kind` of the scope (all, with `None`):
    /// the others stay as they are. The scope counts as listed now either way: what the
    /// watches kept of its other kinds is as current as a list of them.
    pub fn replace(
        &mut self,
        scope: &Scope,
        kind: Option<&Kind>,
        objects: Vec<Object>,
    ) -> Vec<Replaced> {
        let covered = |k: &ObjectKey| k.scope == *scope && kind.is_none_or(|kind| k.kind == *kind);
        let keyed: Vec<(ObjectKey, Object)> =
            objects.into_iter().map(|o| (o.key(scope), o)).collect();
        let incoming: BTreeSet<&ObjectKey> = keyed.iter().map(|(k, _)| k).collect();
        let stale: Vec<ObjectKey> = self
            .iter_scope(scope)
            .map(|(k, _)| k)
            .filter(|k| covered(k) && !incoming.contains(k))
            .cloned()
            .collect();
        drop(incoming);
        let mut changes: Vec<Replaced> = stale.iter().filter_map(|k| self.remove(k)).collect();
        let marked: Vec<ObjectKey> = self
            .unreadable
            .keys()
            .filter(|k| covered(k))
            .cloned()
            .collect();
        let mut still_marked = BTreeSet::new();
        for (key, object) in keyed {
            if let Object::Unreadable(u) = object {
                still_marked.insert(key.clone());
                changes.extend(self.mark_unreadable(key, u.problem));
            } else {
                changes.extend(self.upsert_unordered(key, object));
            }
        }
        for key in marked.iter().filter(|k| !still_marked.contains(*k)) {
            let cleared = self.clear_unreadable(key);
            if !changes.iter().any(|c| self.replaced_key(c) == key) {
                changes.extend(cleared);
            }
        }
        self.synced.insert(scope.clone());
        match kind {
            Some(kind) => {
                self.listed_kinds.insert((scope.clone(), kind.clone()));
            }
            None => remove_scope(
                &mut self.listed_kinds,
                (scope.clone(), Kind::Cluster),
                |(s, _)| s == scope,
            ),
        }
        self.indexes.relisted_at.insert(scope.clone(), self.changes);
        self.indexes.tombstones.clear_scope(scope);
        changes
    }

    /// A relist answer is authoritative: it replaces the cached object whatever its version.
    fn upsert_unordered(&mut self, key: ObjectKey, object: Object) -> Option<Replaced> {
        if self.objects.get(&key) == Some(&object) {
            return None;
        }
        self.changes += 1;
        let (slot, before) = self.objects.insert(key, Box::new(object));
        let (key, after) = self.objects.at(slot).expect("inserted above");
        self.indexes
            .update(key, before.as_deref(), after, self.changes);
        Some(Replaced {
            before,
            now: Now::Stored(slot),
        })
    }

    /// The key of the object a write concerned.
    pub fn replaced_key<'a>(&'a self, replaced: &'a Replaced) -> &'a ObjectKey {
        self.change(replaced).key
    }
}

/// Removes the members of `set` from `first` on while they are `in_scope`: the members of one
/// scope, which sort together (by scope first) from `first`, the least of them. A relist of a
/// cluster reads those alone, not every other cluster's.
fn remove_scope<T: Ord + Clone>(set: &mut BTreeSet<T>, first: T, in_scope: impl Fn(&T) -> bool) {
    debug_assert!(set.iter().take_while(|t| **t < first).all(|t| !in_scope(t)));
    let gone: Vec<T> = set
        .range(first..)
        .take_while(|t| in_scope(t))
        .cloned()
        .collect();
    for t in &gone {
        set.remove(t);
    }
}

/// The key of the per-Cluster indexes, `(management, "<namespace>/<cluster>")`, built without
/// the formatting machinery: every Machine change looks one up.
fn cluster_slot(namespace: &str, cluster: &str) -> (Scope, String) {
    let mut slot = String::with_capacity(namespace.len() + 1 + cluster.len());
    slot.push_str(namespace);
    slot.push('/');
    slot.push_str(cluster);
    (Scope::Management, slot)
}

/// The members of `keys` that a stored Machine or MachinePool refers to: the objects whose
/// absence [`Store::seen_gone`] and [`Store::node_seen_gone`] are asked about.
fn referred(objects: &table::Table, keys: &BTreeSet<ObjectKey>) -> BTreeSet<ObjectKey> {
    let machines = objects.iter_kind(&Scope::Management, &Kind::Machine);
    let pools = objects.iter_kind(&Scope::Management, &Kind::MachinePool);
    machines
        .chain(pools)
        .flat_map(|(_, object)| referents(object))
        .filter(|key| keys.contains(key))
        .collect()
}

/// The Node and provider objects a Machine or MachinePool refers to.
fn referents(object: &Object) -> Vec<ObjectKey> {
    let (namespace, infrastructure, bootstrap) = match object {
        Object::Machine(m) => (
            &m.meta.namespace,
            &m.infrastructure_ref,
            &m.bootstrap_config_ref,
        ),
        Object::MachinePool(p) => (
            &p.meta.namespace,
            &p.infrastructure_ref,
            &p.bootstrap_config_ref,
        ),
        _ => return Vec::new(),
    };
    let mut keys = vec![infrastructure.key_in(namespace)];
    keys.extend(bootstrap.as_ref().map(|r| r.key_in(namespace)));
    if let Object::Machine(m) = object
        && let Some(node) = &m.node_ref
    {
        let cluster = Scope::Workload(crate::model::ClusterName::new(namespace, &m.cluster_name));
        keys.push(ObjectKey::new(cluster, Kind::Node, "", node));
    }
    keys
}

impl Indexes {
    /// Keeps the tombstone of a Node or provider object: set while it is seen gone.
    fn mark_gone(&mut self, key: &ObjectKey, gone: bool) {
        self.tombstones.set(key, gone);
    }

    /// Moves `key` from where `before` sat to where `after` sits.
    fn update(&mut self, key: &ObjectKey, before: Option<&Object>, after: &Object, change: u64) {
        match before {
            // Most updates (a pod's status) leave every index entry where it is.
            Some(b) if IndexSlots::of(b) == IndexSlots::of(after) => self.touch(key, after, change),
            Some(b) => {
                self.index(key, b, false, change);
                self.index(key, after, true, change);
            }
            None => self.index(key, after, true, change),
        }
    }

    fn index(&mut self, key: &ObjectKey, object: &Object, add: bool, change: u64) {
        match object {
            Object::Namespace(_) => self.namespace_changed(key, change),
            Object::Pod(p) => {
                let Some(n) = &p.node_name else { return };
                if add {
                    let pods = self
                        .pods_by_node
                        .entry(key.scope.clone())
                        .or_default()
                        .entry(n.clone())
                        .or_default();
                    pods.insert(key.clone(), change);
                } else if let Some(nodes) = self.pods_by_node.get_mut(&key.scope) {
                    if let Some(pods) = nodes.get_mut(n.as_str()) {
                        pods.remove(key);
                        if pods.is_empty() {
                            nodes.remove(n.as_str());
                        }
                    }
                    if nodes.is_empty() {
                        self.pods_by_node.remove(&key.scope);
                    }
                }
            }
            Object::Node(n) => {
                if let Some(p) = &n.provider_id {
                    let at = (key.scope.clone(), p.clone());
                    set_membership(&mut self.nodes_by_provider_id, at, key, add);
                }
                self.mark_gone(key, !add);
            }
            Object::External(_) => self.mark_gone(key, !add),
            Object::Machine(m) => {
                if add {
                    self.referrer_since.entry(key.clone()).or_insert(change);
                }
                match (&m.node_ref, add) {
                    (Some(_), true) => {
                        self.node_ref_since.insert(key.clone(), change);
                    }
                    _ => {
                        self.node_ref_since.remove(key);
                    }
                }
                let at = cluster_slot(&m.meta.namespace, &m.cluster_name);
                if is_active_control_plane(m) {
                    set_membership(
                        &mut self.active_control_plane_by_cluster,
                        at.clone(),
                        key,
                        add,
                    );
                }
                set_membership(&mut self.machines_by_cluster, at, key, add);
                self.machines_by_cluster_label.set(key, m, add);
            }
            Object::MachinePool(_) if add => {
                self.referrer_since.entry(key.clone()).or_insert(change);
            }
            Object::MachineHealthCheck(h) => {
                let at = cluster_slot(&h.meta.namespace, &h.cluster_name);
                set_membership(&mut self.health_checks_by_cluster, at, key, add);
            }
            _ => {}
        }
    }

    fn namespace_changed(&mut self, key: &ObjectKey, change: u64) {
        match self.namespace_changes.0.get_mut(&key.scope) {
            Some(at) => *at = change,
            None => {
                self.namespace_changes.0.insert(key.scope.clone(), change);
            }
        }
    }

    /// Records a change of an object whose index entries stay where they are.
    fn touch(&mut self, key: &ObjectKey, object: &Object, change: u64) {
        if let Object::Namespace(_) = object {
            return self.namespace_changed(key, change);
        }
        if let Object::Pod(Pod {
            node_name: Some(n), ..
        }) = object
            && let Some(version) = self
                .pods_by_node
                .get_mut(&key.scope)
                .and_then(|nodes| nodes.get_mut(n.as_str()))
                .and_then(|pods| pods.get_mut(key))
        {
            *version = change;
        }
    }
}

/// Where an object sits in the indexes: two versions of an object with equal slots need no
/// re-indexing (only a pod's change number moves).
#[derive(PartialEq, Eq)]
enum IndexSlots<'o> {
    Pod(Option<&'o str>),
    Node(Option<&'o str>),
    Machine(&'o str, &'o str, bool, Option<&'o str>, Option<&'o str>),
    HealthCheck(&'o str, &'o str),
    None,
}

impl<'o> IndexSlots<'o> {
    fn of(object: &'o Object) -> Self {
        match object {
            Object::Pod(p) => IndexSlots::Pod(p.node_name.as_deref()),
            Object::Node(n) => IndexSlots::Node(n.provider_id.as_deref()),
            Object::Machine(m) => IndexSlots::Machine(
                &m.meta.namespace,
                &m.cluster_name,
                is_active_control_plane(m),
                m.node_ref.as_deref(),
                m.meta.labels.get(CLUSTER_NAME_LABEL).map(String::as_str),
            ),
            Object::MachineHealthCheck(h) => {
                IndexSlots::HealthCheck(&h.meta.namespace, &h.cluster_name)
            }
            _ => IndexSlots::None,
        }
    }
}

/// A control-plane Machine of its Cluster that is not being deleted: what upstream's
/// `isDeleteNodeAllowed` counts (it also requires the cluster-name label to name the Cluster).
pub fn is_active_control_plane(m: &Machine) -> bool {
    !m.meta.is_deleting()
        && m.is_control_plane()
        && m.meta.labels.get(CLUSTER_NAME_LABEL) == Some(&m.cluster_name)
}

fn set_membership(
    index: &mut BTreeMap<(Scope, String), BTreeSet<ObjectKey>>,
    at: (Scope, String),
    key: &ObjectKey,
    add: bool,
) {
    if add {
        index.entry(at).or_default().insert(key.clone());
    } else if let Some(set) = index.get_mut(&at) {
        set.remove(key);
        if set.is_empty() {
            index.remove(&at);
        }
    }
}

/// The v1beta2 condition (ours, decision 13) on an MHC or a MachinePool whose decisions wait
/// for an object that cannot be read: `False (ObjectUnreadable)` naming it, removed (never
/// written True) once everything reads.
pub const OBJECTS_READABLE: &str = "ObjectsReadable";

/// The reason of every condition and Warning event about an object that cannot be read.
pub const OBJECT_UNREADABLE: &str = "ObjectUnreadable";

/// What an operator reads about an unknown object: which object, in which cluster, and what
/// cannot be read (`Node n1 in cluster default/c1 cannot be read: status.conditions[0].type:
/// expected a string`).
pub fn unreadable_message(key: &ObjectKey, problem: &str) -> String {
    let kind = key.kind.name();
    let name = if key.namespace.is_empty() {
        key.name.to_string()
    } else {
        format!("{}/{}", key.namespace, key.name)
    };
    format!(
        "{kind} {name} in {} cannot be read: {problem}",
        scope_name(&key.scope)
    )
}

/// `the management cluster` or `cluster <namespace>/<name>`.
pub fn scope_name(scope: &Scope) -> String {
    match scope {
        Scope::Management => "the management cluster".to_string(),
        Scope::Workload(c) => format!("cluster {}/{}", c.namespace, c.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{control_plane_machine, machine, workload};
    use crate::time::Timestamp;

    fn labelled(store: &Store, cluster: &str) -> Vec<String> {
        store
            .machines_labelled_for_cluster("default", cluster)
            .map(|k| k.name.to_string())
            .collect()
    }

    /// A relist of a cluster ends what was known of that cluster alone: its tombstones (of
    /// every kind, provider objects sorting before Nodes, recent or older) and, for a whole
    /// relist, its listed kinds; those of the clusters sorting before and after it stay.
    #[test]
    fn a_relist_clears_the_tombstones_and_listed_kinds_of_its_cluster_only() {
        let mut store = Store::default();
        let (c1, c2, c3) = (workload("c1"), workload("c2"), workload("c3"));
        let infra = crate::testing::infra_machine("m1");
        let gone = [
            ObjectKey::new(c1.clone(), Kind::Node, "", "n1"),
            Object::External(infra.clone()).key(&c2),
            ObjectKey::new(c2.clone(), Kind::Node, "", "n2"),
            ObjectKey::new(c3.clone(), Kind::Node, "", "n3"),
        ];
        for key in &gone {
            store.note_gone(key);
        }
        for scope in [&c1, &c2, &c3] {
            store.replace(scope, Some(&Kind::Node), Vec::new());
        }
        for key in &gone {
            store.note_gone(key);
        }
        assert_eq!(store.indexes.tombstones.len(), 4);

        store.pass_time(Timestamp(0), minutes(10));
        store.note_gone(&gone[2]);

        store.replace(&c2, None, Vec::new());
        let tombstones = &store.indexes.tombstones;
        let left: Vec<&ObjectKey> = tombstones.older.iter().chain(&tombstones.recent).collect();
        assert_eq!(left, [&gone[0], &gone[3]]);
        assert!(!store.kind_listed(&c2, &Kind::Node));
        assert!(store.kind_listed(&c1, &Kind::Node) && store.kind_listed(&c3, &Kind::Node));
    }

    fn minutes(m: i64) -> Timestamp {
        Timestamp(Duration::from_mins(m).as_millis())
    }

    /// A tombstone nothing refers to stays while its removal is recent news (a Machine that
    /// reaches the cache after its Node's removal still learns it), then goes; one a Machine
    /// refers to stays as long as that Machine does.
    #[test]
    fn a_tombstone_goes_once_it_was_news_for_a_window_and_nothing_refers_to_it() {
        let mut store = Store::default();
        let c1 = workload("c1");
        let node = |name: &str| ObjectKey::new(c1.clone(), Kind::Node, "", name);
        let m1 = machine("c1", "m1", Some("n1"));
        let m1_key = Object::Machine(m1.clone()).key(&Scope::Management);
        let infra = Object::External(crate::testing::infra_machine("m1")).key(&Scope::Management);
        store.upsert(&Scope::Management, Object::Machine(m1));
        for gone in [node("n1"), node("n2"), infra.clone()] {
            store.note_gone(&gone);
        }
        // m2 reaches the cache after its Node was seen removed: that is news to it too. It
        // goes again, leaving nothing that refers to n2.
        let late = machine("c1", "m2", Some("n2"));
        let late_key = Object::Machine(late.clone()).key(&Scope::Management);
        store.upsert(&Scope::Management, Object::Machine(late));
        assert!(store.node_seen_gone(&node("n2"), &late_key));
        store.remove(&late_key);

        store.pass_time(minutes(3), minutes(19));
        assert!(store.node_seen_gone(&node("n2"), &late_key), "one window");
        store.pass_time(minutes(19), minutes(20));
        assert!(!store.node_seen_gone(&node("n2"), &late_key), "two: gone");
        assert!(
            store.node_seen_gone(&node("n1"), &m1_key),
            "m1 refers to it"
        );
        assert!(store.seen_gone(&infra, &m1_key), "and to its DockerMachine");
        store.pass_time(minutes(20), minutes(600));
        assert_eq!(store.indexes.tombstones.len(), 2);

        store.remove(&m1_key);
        store.pass_time(minutes(600), minutes(610));
        assert_eq!(
            store.indexes.tombstones.len(),
            0,
            "m1 is gone: nothing refers to them"
        );
    }

    #[test]
    fn machines_by_label_follow_relabelling_and_removal_and_survive_decoding() {
        let mut store = Store::default();
        let mut b = machine("c1", "b", None);
        for name in ["c", "a"] {
            store.upsert(
                &Scope::Management,
                Object::Machine(machine("c1", name, None)),
            );
        }
        store.upsert(&Scope::Management, Object::Machine(b.clone()));
        assert_eq!(labelled(&store, "c1"), ["a", "b", "c"]);

        b.meta.resource_version += 1;
        b.meta.labels.insert(CLUSTER_NAME_LABEL.into(), "c2".into());
        store.upsert(&Scope::Management, Object::Machine(b.clone()));
        assert_eq!(labelled(&store, "c1"), ["a", "c"]);
        assert_eq!(labelled(&store, "c2"), ["b"]);

        let decoded: Store = crate::codec::decode(&crate::codec::encode(&store).unwrap()).unwrap();
        assert_eq!(labelled(&decoded, "c2"), ["b"]);
        assert_eq!(decoded, store, "the index is rebuilt as it was");

        let key = Object::Machine(b).key(&Scope::Management);
        store.remove(&key);
        let index = &store.indexes.machines_by_cluster_label;
        assert!(
            index.get("default", "c2").is_none(),
            "empty sets are dropped"
        );
    }

    #[test]
    fn active_control_plane_count_follows_label_deletion_and_removal() {
        let mut store = Store::default();
        let cp = control_plane_machine("c1", "cp-1", Some("cp-1"));
        let key = Object::Machine(cp.clone()).key(&Scope::Management);
        store.upsert(&Scope::Management, Object::Machine(cp.clone()));
        store.upsert(
            &Scope::Management,
            Object::Machine(machine("c1", "worker", None)),
        );
        assert_eq!(store.active_control_plane_machines("default", "c1"), 1);
        assert_eq!(store.active_control_plane_machines("default", "c2"), 0);

        let mut deleting = cp.clone();
        deleting.meta.resource_version += 1;
        deleting.meta.deletion_timestamp = Some(Timestamp(1));
        store.upsert(&Scope::Management, Object::Machine(deleting));
        assert_eq!(store.active_control_plane_machines("default", "c1"), 0);

        // A relist may bring an older version back: the index follows the object.
        store.replace_scope(&Scope::Management, vec![Object::Machine(cp.clone())]);
        assert_eq!(store.active_control_plane_machines("default", "c1"), 1);

        let mut mislabelled = cp;
        mislabelled.meta.resource_version += 2;
        mislabelled
            .meta
            .labels
            .insert(CLUSTER_NAME_LABEL.to_string(), "other".to_string());
        store.upsert(&Scope::Management, Object::Machine(mislabelled));
        assert_eq!(store.active_control_plane_machines("default", "c1"), 0);

        store.remove(&key);
        assert_eq!(store.active_control_plane_machines("default", "c1"), 0);
        assert!(store.indexes.active_control_plane_by_cluster.is_empty());
        assert!(store.indexes.machines_by_cluster.is_empty());
    }

    #[test]
    fn a_kind_relist_replaces_that_kind_only() {
        let scope = crate::testing::workload("c1");
        let mut store = Store::default();
        let node = |n: &str| Object::Node(crate::testing::node(n));
        let pod = |n: &str| Object::Pod(crate::testing::pod("app", n, "n1"));
        let bad = || crate::testing::unreadable(Kind::Pod, "app", "p3", "spec: bad");
        store.replace_scope(&scope, vec![node("n1"), node("n2"), pod("p1"), bad()]);
        let key = |o: Object| o.key(&scope);
        let p3 = ObjectKey::new(scope.clone(), Kind::Pod, "app", "p3");
        assert!(store.unreadable(&p3).is_some());

        store.replace(&scope, Some(&Kind::Pod), vec![pod("p2")]);
        assert!(store.get(&key(pod("p1"))).is_none());
        assert!(store.get(&key(pod("p2"))).is_some());
        assert!(store.unreadable(&p3).is_none(), "no longer listed");
        for n in ["n1", "n2"] {
            assert!(store.get(&key(node(n))).is_some(), "other kinds stay");
        }
        // The same with `None` is a relist of the whole scope.
        store.replace(&scope, None, vec![pod("p2")]);
        assert!(store.get(&key(node("n1"))).is_none());
    }

    #[test]
    fn an_unreadable_object_keeps_its_last_reading_until_a_deletion_or_a_relist_without_it() {
        let scope = crate::testing::workload("c1");
        let mut store = Store::default();
        let n1 = Object::Node(crate::testing::node("n1"));
        store.replace_scope(&scope, vec![n1.clone()]);
        let key = n1.key(&scope);
        let bad = || crate::testing::unreadable(Kind::Node, "", "n1", "status: bad");

        // Marked: the reading stays, and the change is routed as the same object.
        let changed = store.upsert(&scope, bad()).expect("a mark is a change");
        assert_eq!(store.change(&changed).before, Some(&n1));
        assert_eq!(store.get(&key), Some(&n1));
        assert_eq!(store.unreadable(&key), Some("status: bad"));
        assert!(
            store.upsert(&scope, bad()).is_none(),
            "the same problem again"
        );

        // A relist that still shows it unreadable keeps it; one that lacks it removes it.
        store.replace_scope(&scope, vec![bad()]);
        assert_eq!(store.get(&key), Some(&n1));
        store.replace_scope(&scope, vec![]);
        assert_eq!(store.get(&key), None);
        assert_eq!(store.unreadable(&key), None);

        // Readable again with the very same content: the mark goes, and that is a change.
        store.replace_scope(&scope, vec![n1.clone(), bad()]);
        assert!(store.unreadable(&key).is_some());
        assert!(store.upsert(&scope, n1.clone()).is_some());
        assert_eq!(store.unreadable(&key), None);

        // Never read at all: nothing stored, but known to exist.
        let n2 = ObjectKey::new(scope.clone(), Kind::Node, "", "n2");
        store.upsert(
            &scope,
            crate::testing::unreadable(Kind::Node, "", "n2", "spec: bad"),
        );
        assert_eq!(store.get(&n2), None);
        assert_eq!(store.unreadable(&n2), Some("spec: bad"));
        store.remove(&n2);
        assert_eq!(store.unreadable(&n2), None);
        assert_eq!(
            unreadable_message(&key, "spec: bad"),
            "Node n1 in cluster default/c1 cannot be read: spec: bad"
        );
    }
}
