//! The store's objects: in slots, found by a probe-only hash index, ordered by a nested map.
//!
//! Why: a lookup in nested B-trees by name compared ~15 names, each behind a pointer, and
//! lookups are most of what the store does (every input finds its object twice, every pass
//! finds its Machine, Cluster, Node and providers). Keys carry a precomputed hash
//! ([`key_hash`]), so a lookup is one probe; a caller that has the parts but no key probes
//! without building one ([`Table::entry_mut`]).
//!
//! Guarantees: iteration is in [`ObjectKey`] order (scope, kind, namespace, name); equality
//! and the encoding depend only on the contents (not on slots, free lists or hash order):
//! the encoding is that of the nested map of entries this replaced.

use crate::model::{Kind, Name, Object, ObjectKey, Scope, key_hash};
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Objects are boxed: one moves from its input to its slot without being copied.
type Entry = (ObjectKey, Box<Object>);
/// Slots by name, nested by scope, kind and namespace: the order of iteration.
type Names = BTreeMap<Name, u32>;
type Namespaces = BTreeMap<Name, Names>;
type Kinds = BTreeMap<Kind, Namespaces>;

#[derive(Clone, Debug, Default)]
pub(super) struct Table {
    slots: Vec<Slot>,
    /// The most recently freed slot, reused first.
    free: Option<u32>,
    /// The slot of every key (probed only, never iterated).
    by_key: HashMap<ObjectKey, u32, BuildHasherDefault<PrecomputedHash>>,
    order: BTreeMap<Scope, Kinds>,
}

/// A filled slot, or a free one linking to the next free slot (the free list needs no
/// allocation of its own).
#[derive(Clone, Debug)]
enum Slot {
    Filled(Entry),
    Free(Option<u32>),
}

impl Slot {
    fn entry(&self) -> Option<&Entry> {
        match self {
            Slot::Filled(e) => Some(e),
            Slot::Free(_) => None,
        }
    }

    fn entry_mut(&mut self) -> Option<&mut Entry> {
        match self {
            Slot::Filled(e) => Some(e),
            Slot::Free(_) => None,
        }
    }
}

/// Hashes a key by the hash it carries.
#[derive(Default)]
pub(super) struct PrecomputedHash(u64);

impl Hasher for PrecomputedHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("keys hash with write_u64 only")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A key's parts, owned ([`ObjectKey`]) or borrowed ([`Probe`]): what the index is probed by.
trait KeyView {
    fn parts(&self) -> (&Scope, &Kind, &str, &str);
    fn hash64(&self) -> u64;
}

impl KeyView for ObjectKey {
    fn parts(&self) -> (&Scope, &Kind, &str, &str) {
        (&self.scope, &self.kind, &self.namespace, &self.name)
    }
    fn hash64(&self) -> u64 {
        ObjectKey::hash64(self)
    }
}

struct Probe<'a> {
    parts: (&'a Scope, &'a Kind, &'a str, &'a str),
    hash: u64,
}

impl KeyView for Probe<'_> {
    fn parts(&self) -> (&Scope, &Kind, &str, &str) {
        self.parts
    }
    fn hash64(&self) -> u64 {
        self.hash
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for ObjectKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash64())
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.hash64() == other.hash64() && self.parts() == other.parts()
    }
}

impl Eq for dyn KeyView + '_ {}

impl Table {
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        let slot = *self.by_key.get(key)?;
        self.entry(slot).map(|(_, o)| &**o)
    }

    /// The stored key and object at (scope, kind, namespace, name), found without building
    /// a key.
    pub fn entry_mut<'t>(
        &'t mut self,
        scope: &Scope,
        kind: &Kind,
        namespace: &str,
        name: &str,
    ) -> Option<(u32, &'t mut Entry)> {
        let slot = self.slot_of(scope, kind, namespace, name)?;
        Some((slot, self.slots.get_mut(slot as usize)?.entry_mut()?))
    }

    /// The stored key and object at (scope, kind, namespace, name).
    pub fn find(
        &self,
        scope: &Scope,
        kind: &Kind,
        namespace: &str,
        name: &str,
    ) -> Option<(&ObjectKey, &Object)> {
        let slot = self.slot_of(scope, kind, namespace, name)?;
        self.entry(slot).map(|(k, o)| (k, &**o))
    }

    pub fn slot_of(&self, scope: &Scope, kind: &Kind, namespace: &str, name: &str) -> Option<u32> {
        let probe = Probe {
            parts: (scope, kind, namespace, name),
            hash: key_hash(scope, kind, namespace, name),
        };
        self.by_key.get(&probe as &dyn KeyView).copied()
    }

    /// The entry in `slot` (slots stay with their key until it is removed).
    pub fn at(&self, slot: u32) -> Option<&Entry> {
        self.entry(slot)
    }

    /// Inserts or replaces; returns the entry's slot and the replaced object.
    pub fn insert(&mut self, key: ObjectKey, object: Box<Object>) -> (u32, Option<Box<Object>>) {
        if let Some(&slot) = self.by_key.get(&key) {
            let (_, existing) = self.slots[slot as usize]
                .entry_mut()
                .expect("indexed slots are filled");
            return (slot, Some(std::mem::replace(existing, object)));
        }
        let slot = match self.free {
            Some(slot) => {
                let Slot::Free(next) = self.slots[slot as usize] else {
                    unreachable!("the free list links free slots")
                };
                self.free = next;
                slot
            }
            None => {
                self.slots.push(Slot::Free(None));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 objects")
            }
        };
        self.names_mut(&key).insert(key.name.clone(), slot);
        self.by_key.insert(key.clone(), slot);
        self.slots[slot as usize] = Slot::Filled((key, object));
        (slot, None)
    }

    /// The entries, taken apart.
    #[cfg(feature = "testing")]
    pub fn into_entries(self) -> impl Iterator<Item = Entry> {
        self.slots.into_iter().filter_map(|slot| match slot {
            Slot::Filled(entry) => Some(entry),
            Slot::Free(_) => None,
        })
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Box<Object>> {
        let slot = self.by_key.remove(key)?;
        let freed = std::mem::replace(&mut self.slots[slot as usize], Slot::Free(self.free));
        let Slot::Filled((_, object)) = freed else {
            unreachable!("indexed slots are filled")
        };
        self.free = Some(slot);
        let kinds = self.order.get_mut(&key.scope).expect("ordered");
        let namespaces = kinds.get_mut(&key.kind).expect("ordered");
        let names = namespaces.get_mut(&key.namespace).expect("ordered");
        names.remove(&key.name);
        if names.is_empty() {
            namespaces.remove(&key.namespace);
            if namespaces.is_empty() {
                kinds.remove(&key.kind);
                if kinds.is_empty() {
                    self.order.remove(&key.scope);
                }
            }
        }
        if self.by_key.is_empty() {
            // Nothing left: drop the slots too, so an emptied table is a new one.
            self.slots.clear();
            self.free = None;
        }
        Some(object)
    }

    /// Every object of `kind` in `scope`, in key order.
    pub fn iter_kind<'a>(
        &'a self,
        scope: &Scope,
        kind: &Kind,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Object)> + use<'a> {
        self.order
            .get(scope)
            .and_then(|kinds| kinds.get(kind))
            .into_iter()
            .flat_map(|namespaces| self.in_namespaces(namespaces))
    }

    /// Every object in `scope`, in key order.
    pub fn iter_scope<'a>(
        &'a self,
        scope: &Scope,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Object)> + use<'a> {
        self.order.get(scope).into_iter().flat_map(|kinds| {
            kinds
                .values()
                .flat_map(|namespaces| self.in_namespaces(namespaces))
        })
    }

    /// Every entry, in key order.
    fn iter_all(&self) -> impl Iterator<Item = &Entry> {
        self.order.values().flat_map(|kinds| {
            kinds.values().flat_map(|namespaces| {
                namespaces
                    .values()
                    .flat_map(|names| names.values().filter_map(|&s| self.entry(s)))
            })
        })
    }

    fn entry(&self, slot: u32) -> Option<&Entry> {
        self.slots.get(slot as usize)?.entry()
    }

    fn in_namespaces<'a>(
        &'a self,
        namespaces: &'a Namespaces,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Object)> + use<'a> {
        namespaces.values().flat_map(|names| {
            names
                .values()
                .filter_map(|&s| self.entry(s).map(|(k, o)| (k, &**o)))
        })
    }

    /// The names level for `key`, created if missing (without building owned keys for the
    /// levels that exist).
    fn names_mut(&mut self, key: &ObjectKey) -> &mut Names {
        if !self.order.contains_key(&key.scope) {
            self.order.insert(key.scope.clone(), Kinds::new());
        }
        let kinds = self
            .order
            .get_mut(&key.scope)
            .expect("scope inserted above");
        if !kinds.contains_key(&key.kind) {
            kinds.insert(key.kind.clone(), Namespaces::new());
        }
        let namespaces = kinds.get_mut(&key.kind).expect("kind inserted above");
        if !namespaces.contains_key(&key.namespace) {
            namespaces.insert(key.namespace.clone(), Names::new());
        }
        namespaces
            .get_mut(&key.namespace)
            .expect("namespace inserted above")
    }
}

impl PartialEq for Table {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter_all().eq(other.iter_all())
    }
}

impl Eq for Table {}

/// Scope → kind → namespace → name → value.
type Nested<S, K, N, V> = BTreeMap<S, BTreeMap<K, BTreeMap<N, BTreeMap<N, V>>>>;

/// The encoded form: entries nested by scope, kind, namespace and name, and their count.
#[derive(Serialize)]
struct Encoded<'a> {
    scopes: Nested<&'a Scope, &'a Kind, &'a Name, &'a Entry>,
    len: usize,
}

#[derive(Deserialize)]
struct Decoded {
    scopes: Nested<Scope, Kind, Name, Entry>,
    len: usize,
}

impl Serialize for Table {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut scopes: Encoded<'_> = Encoded {
            scopes: BTreeMap::new(),
            len: self.len(),
        };
        for entry in self.iter_all() {
            let k = &entry.0;
            scopes
                .scopes
                .entry(&k.scope)
                .or_default()
                .entry(&k.kind)
                .or_default()
                .entry(&k.namespace)
                .or_default()
                .insert(&k.name, entry);
        }
        scopes.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Table {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let decoded = Decoded::deserialize(deserializer)?;
        let mut table = Table::default();
        for (key, object) in decoded
            .scopes
            .into_values()
            .flat_map(BTreeMap::into_values)
            .flat_map(BTreeMap::into_values)
            .flat_map(BTreeMap::into_values)
        {
            table.insert(key, object);
        }
        if table.len() != decoded.len {
            return Err(serde::de::Error::custom(format!(
                "store table says {} objects but holds {}",
                decoded.len,
                table.len()
            )));
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterName, GroupKind};
    use crate::testing::namespace;
    use proptest::prelude::*;

    fn key(scope: u8, kind: u8, namespace: u8, name: u8) -> ObjectKey {
        let scope = match scope % 3 {
            0 => Scope::Management,
            1 => Scope::Workload(ClusterName::new("default", "c1")),
            _ => Scope::Workload(ClusterName::new("default", "c10")),
        };
        let kind = match kind % 4 {
            0 => Kind::Pod,
            1 => Kind::Node,
            2 => Kind::External(GroupKind {
                group: "g".into(),
                kind: "K".into(),
            }),
            _ => Kind::Machine,
        };
        let namespace = ["", "a", "ab"][usize::from(namespace % 3)];
        ObjectKey::new(scope, kind, namespace, &format!("n{name}"))
    }

    #[test]
    fn equality_and_encoding_depend_on_contents_not_on_history() {
        let object = |v: &str| Box::new(Object::Namespace(namespace(v)));
        let mut direct = Table::default();
        direct.insert(key(1, 0, 1, 2), object("b"));
        direct.insert(key(0, 3, 1, 1), object("a"));
        let mut churned = Table::default();
        for n in 0..5 {
            churned.insert(key(1, 1, 2, n), object("x"));
        }
        churned.insert(key(0, 3, 1, 1), object("old"));
        churned.insert(key(1, 0, 1, 2), object("b"));
        for n in 0..5 {
            churned.remove(&key(1, 1, 2, n));
        }
        churned.insert(key(0, 3, 1, 1), object("a"));
        assert_eq!(direct, churned);
        let bytes = crate::codec::encode(&direct).unwrap();
        assert_eq!(bytes, crate::codec::encode(&churned).unwrap());
        let mut decoded: Table = crate::codec::decode(&bytes).unwrap();
        assert_eq!(decoded, direct);
        assert_eq!(decoded.get(&key(0, 3, 1, 1)), Some(&*object("a")));
        assert_eq!(
            decoded
                .entry_mut(&key(1, 0, 0, 0).scope.clone(), &Kind::Pod, "a", "n2")
                .map(|(_, e)| e.1.clone()),
            Some(object("b"))
        );
    }

    proptest! {
        /// The table answers like the flat map keyed by `ObjectKey` it replaces.
        #[test]
        fn table_behaves_like_a_flat_map(
            ops in proptest::collection::vec((any::<bool>(), 0u8..3, 0u8..4, 0u8..3, 0u8..12), 1..120)
        ) {
            let mut table = Table::default();
            let mut model: BTreeMap<ObjectKey, Box<Object>> = BTreeMap::new();
            for (i, (insert, s, k, ns, n)) in ops.into_iter().enumerate() {
                let key = key(s, k, ns, n);
                if insert {
                    let object = Box::new(Object::Namespace(namespace(&format!("v{i}"))));
                    prop_assert_eq!(table.insert(key.clone(), object.clone()).1, model.insert(key, object));
                } else {
                    prop_assert_eq!(table.remove(&key), model.remove(&key));
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for s in 0..3 {
                let scope = key(s, 0, 0, 0).scope.clone();
                let got: Vec<_> = table.iter_scope(&scope).collect();
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.scope == scope)
                    .map(|(k, o)| (k, &**o))
                    .collect();
                prop_assert_eq!(got, want);
                for k in 0..4 {
                    let kind = key(s, k, 0, 0).kind.clone();
                    let got: Vec<_> = table.iter_kind(&scope, &kind).collect();
                    let want: Vec<_> = model
                        .iter()
                        .filter(|(key, _)| key.scope == scope && key.kind == kind)
                        .map(|(k, o)| (k, &**o))
                        .collect();
                    prop_assert_eq!(got, want);
                }
            }
            for key in model.keys() {
                prop_assert_eq!(table.get(key), model.get(key).map(|o| &**o));
            }
            // Empty levels are pruned: removing everything leaves the empty table.
            for key in model.keys() {
                table.remove(key);
            }
            prop_assert_eq!(table, Table::default());
        }
    }
}
