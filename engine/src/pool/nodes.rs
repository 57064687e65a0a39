//! A per-reconcile view of one workload cluster's Nodes, by name and by providerID.
//!
//! Why: a pool of thousands of Nodes looks each of them up several times per reconcile, and a
//! lookup in the store's ordered map chases a heap string per comparison. One pass over the
//! cluster's Nodes into hash maps with a fixed (deterministic) hasher is an order of magnitude
//! cheaper. Maps are only probed, never iterated, so their order cannot leak into decisions.

use crate::fnv::Fnv;
use crate::model::{Kind, Node, Object, Scope};
use crate::store::Store;
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

type FnvMap<'a> = HashMap<&'a str, &'a Node, BuildHasherDefault<Fnv>>;
/// A set of strings for membership tests only (never iterated).
pub type FnvSet<'a> = HashSet<&'a str, BuildHasherDefault<Fnv>>;

/// Built lazily, one map at a time: a steady reconcile only needs the providerID map.
pub struct NodeIndex<'a> {
    store: &'a Store,
    scope: &'a Scope,
    by_name: OnceCell<FnvMap<'a>>,
    by_provider_id: OnceCell<FnvMap<'a>>,
}

impl<'a> NodeIndex<'a> {
    pub fn new(store: &'a Store, scope: &'a Scope) -> Self {
        NodeIndex {
            store,
            scope,
            by_name: OnceCell::new(),
            by_provider_id: OnceCell::new(),
        }
    }

    fn nodes(&self) -> impl Iterator<Item = &'a Node> + 'a {
        self.store
            .iter_kind(self.scope, &Kind::Node)
            .filter_map(|(_, o)| match o {
                Object::Node(n) => Some(n),
                _ => None,
            })
    }

    pub fn by_name(&self, name: &str) -> Option<&'a Node> {
        self.by_name
            .get_or_init(|| self.nodes().map(|n| (n.meta.name.as_str(), n)).collect())
            .get(name)
            .copied()
    }

    /// Upstream's node map: Nodes in name order, a later one with the same providerID replaces
    /// an earlier one; empty providerIDs are skipped.
    pub fn by_provider_id(&self, provider_id: &str) -> Option<&'a Node> {
        self.by_provider_id
            .get_or_init(|| {
                self.nodes()
                    .filter_map(|n| {
                        n.provider_id
                            .as_deref()
                            .filter(|p| !p.is_empty())
                            .map(|p| (p, n))
                    })
                    .collect()
            })
            .get(provider_id)
            .copied()
    }
}
