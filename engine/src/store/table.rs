//! The store's objects, nested by scope, kind, namespace and name.
//!
//! Why nested: keyed by whole [`ObjectKey`]s, a lookup compared ~20 keys, and every comparison
//! of two keys of one workload cluster began with two `memcmp`s of that cluster's namespace and
//! name (equal in all its keys, each a separate heap string): that was most of the cost of a
//! deletion pass. Nested, each part is compared once per level, and lookups borrow their keys.
//!
//! Guarantees: iteration is in [`ObjectKey`] order (scope, kind, namespace, name), the order
//! of the flat map this replaces; empty levels are removed, so equal contents mean equal tables.

use crate::model::{Kind, Name, Object, ObjectKey, Scope};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Objects of one namespace (and kind, and scope) by name, with their full keys (iteration
/// hands out `&ObjectKey`s). Boxed: an entry is about 1 KB, and B-tree inserts and removals
/// shift entries within a node.
type Names = BTreeMap<Name, Box<(ObjectKey, Object)>>;
type Namespaces = BTreeMap<Name, Names>;
type Kinds = BTreeMap<Kind, Namespaces>;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Table {
    scopes: BTreeMap<Scope, Kinds>,
    len: usize,
}

impl Table {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        let (_, object) = &**self
            .scopes
            .get(&key.scope)?
            .get(&key.kind)?
            .get(&key.namespace)?
            .get(&key.name)?;
        Some(object)
    }

    /// The stored key and object at (scope, kind, namespace, name), found without building
    /// a key.
    pub fn entry_mut<'t>(
        &'t mut self,
        scope: &Scope,
        kind: &Kind,
        namespace: &str,
        name: &str,
    ) -> Option<&'t mut (ObjectKey, Object)> {
        let entry = self
            .scopes
            .get_mut(scope)?
            .get_mut(kind)?
            .get_mut(namespace)?
            .get_mut(name)?;
        Some(&mut **entry)
    }

    /// Inserts or replaces; returns the replaced object.
    pub fn insert(&mut self, key: ObjectKey, object: Object) -> Option<Object> {
        let names = self.names_mut(&key);
        if let Some((_, existing)) = names.get_mut(&key.name).map(|e| &mut **e) {
            return Some(std::mem::replace(existing, object));
        }
        names.insert(key.name.clone(), Box::new((key, object)));
        self.len += 1;
        None
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Object> {
        let kinds = self.scopes.get_mut(&key.scope)?;
        let namespaces = kinds.get_mut(&key.kind)?;
        let names = namespaces.get_mut(&key.namespace)?;
        let (_, object) = *names.remove(&key.name)?;
        self.len -= 1;
        if names.is_empty() {
            namespaces.remove(&key.namespace);
            if namespaces.is_empty() {
                kinds.remove(&key.kind);
                if kinds.is_empty() {
                    self.scopes.remove(&key.scope);
                }
            }
        }
        Some(object)
    }

    /// Every object of `kind` in `scope`, in key order.
    pub fn iter_kind<'a>(
        &'a self,
        scope: &Scope,
        kind: &Kind,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Object)> + use<'a> {
        self.scopes
            .get(scope)
            .and_then(|kinds| kinds.get(kind))
            .into_iter()
            .flat_map(in_namespaces)
    }

    /// Every object in `scope`, in key order.
    pub fn iter_scope<'a>(
        &'a self,
        scope: &Scope,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Object)> + use<'a> {
        self.scopes
            .get(scope)
            .into_iter()
            .flat_map(|kinds| kinds.values().flat_map(in_namespaces))
    }

    /// The names level for `key`, created if missing (without building owned keys for the
    /// levels that exist: inserts into an existing namespace allocate nothing here).
    fn names_mut(&mut self, key: &ObjectKey) -> &mut Names {
        if !self.scopes.contains_key(&key.scope) {
            self.scopes.insert(key.scope.clone(), Kinds::new());
        }
        let kinds = self
            .scopes
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

fn in_namespaces(namespaces: &Namespaces) -> impl Iterator<Item = (&ObjectKey, &Object)> {
    namespaces
        .values()
        .flat_map(|names| names.values().map(|e| (&e.0, &e.1)))
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

    proptest! {
        /// The table answers like the flat map keyed by `ObjectKey` it replaces.
        #[test]
        fn table_behaves_like_a_flat_map(
            ops in proptest::collection::vec((any::<bool>(), 0u8..3, 0u8..4, 0u8..3, 0u8..12), 1..120)
        ) {
            let mut table = Table::default();
            let mut model: BTreeMap<ObjectKey, Object> = BTreeMap::new();
            for (i, (insert, s, k, ns, n)) in ops.into_iter().enumerate() {
                let key = key(s, k, ns, n);
                if insert {
                    let object = Object::Namespace(namespace(&format!("v{i}")));
                    prop_assert_eq!(table.insert(key.clone(), object.clone()), model.insert(key, object));
                } else {
                    prop_assert_eq!(table.remove(&key), model.remove(&key));
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for s in 0..3 {
                let scope = key(s, 0, 0, 0).scope.clone();
                let got: Vec<_> = table.iter_scope(&scope).collect();
                let want: Vec<_> = model.iter().filter(|(k, _)| k.scope == scope).collect();
                prop_assert_eq!(got, want);
                for k in 0..4 {
                    let kind = key(s, k, 0, 0).kind.clone();
                    let got: Vec<_> = table.iter_kind(&scope, &kind).collect();
                    let want: Vec<_> = model
                        .iter()
                        .filter(|(key, _)| key.scope == scope && key.kind == kind)
                        .collect();
                    prop_assert_eq!(got, want);
                }
            }
            for key in model.keys() {
                prop_assert_eq!(table.get(key), model.get(key));
            }
            // Empty levels are pruned: removing everything leaves the empty table.
            for key in model.keys() {
                table.remove(key);
            }
            prop_assert_eq!(table, Table::default());
        }
    }
}
