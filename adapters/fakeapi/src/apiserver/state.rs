//! One served cluster: a `ClusterStore` behind a mutex, plus the signals watches wait on.
//!
//! Contract: every write goes through [`SharedCluster::write`], which wakes the open watches
//! when the store's resourceVersion moved. The lock is never held across an `.await`.

use super::resources::{self, ResourceType};
use sim::api::ClusterStore;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// How many recent writes a watch can resume from; older resourceVersions get 410.
pub const CHANGE_LOG_CAPACITY: usize = 10_000;

/// The store and the provider kinds registered for discovery.
pub struct ClusterState {
    pub store: ClusterStore,
    /// `(group, version, kind)` served even while the store holds none of them.
    registered: BTreeSet<(String, String, String)>,
}

impl ClusterState {
    /// Every resource type served right now.
    pub fn types(&self) -> Vec<ResourceType> {
        resources::served_types(&self.store, &self.registered)
    }
}

/// A cheap handle to one served cluster, shared by the HTTP handlers, the watches, the fake
/// kubelet and tests.
#[derive(Clone)]
pub struct SharedCluster {
    state: Arc<Mutex<ClusterState>>,
    /// The store's resourceVersion after the last write.
    written: Arc<watch::Sender<u64>>,
    /// Bumped to end every open watch (as an API server restart would).
    epoch: Arc<watch::Sender<u64>>,
}

impl SharedCluster {
    /// Serves `store`, turning on its change log (writes made before this call cannot be
    /// watched from: a watch from an older resourceVersion gets 410) and its
    /// `managedFields` (writes made before carry none).
    pub fn new(mut store: ClusterStore) -> Self {
        store.record_changes(CHANGE_LOG_CAPACITY);
        store.keep_managed_fields(super::managed::list_type);
        let rv = store.resource_version();
        SharedCluster {
            state: Arc::new(Mutex::new(ClusterState {
                store,
                registered: BTreeSet::new(),
            })),
            written: Arc::new(watch::channel(rv).0),
            epoch: Arc::new(watch::channel(0).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ClusterState> {
        // A handler that panicked mid-write leaves a store that is still well-formed JSON.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads under the lock.
    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        f(&self.lock())
    }

    /// Writes under the lock and wakes the watches if anything was written.
    pub fn write<R>(&self, f: impl FnOnce(&mut ClusterStore) -> R) -> R {
        let (out, rv) = {
            let mut state = self.lock();
            let out = f(&mut state.store);
            (out, state.store.resource_version())
        };
        self.notify(rv);
        out
    }

    /// Holds the lock until the guard drops, then wakes the watches if anything was written.
    /// For a driver that writes to several clusters at once (the live world): it must take
    /// the locks in one fixed order.
    pub fn lock_store(&self) -> StoreLock<'_> {
        StoreLock {
            state: Some(self.lock()),
            cluster: self,
        }
    }

    fn notify(&self, rv: u64) {
        self.written.send_if_modified(|current| {
            let moved = *current != rv;
            *current = rv;
            moved
        });
    }

    /// [`Self::write`], or with `dry_run` the same write on a copy of the store that is then
    /// dropped: the answer is what would be stored, nothing is stored, no watch wakes.
    pub fn write_or_dry_run<R>(&self, dry_run: bool, f: impl FnOnce(&mut ClusterStore) -> R) -> R {
        if dry_run {
            let mut copy = self.lock().store.clone();
            f(&mut copy)
        } else {
            self.write(f)
        }
    }

    /// Serves `kind` of `api_version` even before the store holds one (a provider kind).
    pub fn register_kind(&self, api_version: &str, kind: &str) {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.lock()
            .registered
            .insert((group.to_string(), version.to_string(), kind.to_string()));
    }

    /// Ends every open watch stream; clients reconnect from the last resourceVersion they saw.
    pub fn end_watches(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Drops the change log, writes `touch` first so the clients' last resourceVersion is
    /// older than the log, and ends every watch: reconnecting watches get the 410 ERROR event
    /// and must relist. For tests of the relist path.
    pub fn expire_watches(&self, touch: impl FnOnce(&mut ClusterStore)) {
        self.write(|store| {
            touch(store);
            store.compact_changes();
        });
        self.end_watches();
    }

    pub(crate) fn subscribe(&self) -> (watch::Receiver<u64>, watch::Receiver<u64>) {
        (self.written.subscribe(), self.epoch.subscribe())
    }
}

/// A served cluster's store, locked; see [`SharedCluster::lock_store`].
pub struct StoreLock<'a> {
    state: Option<MutexGuard<'a, ClusterState>>,
    cluster: &'a SharedCluster,
}

impl std::ops::Deref for StoreLock<'_> {
    type Target = ClusterStore;
    fn deref(&self) -> &ClusterStore {
        &self.state.as_ref().expect("held until drop").store
    }
}

impl std::ops::DerefMut for StoreLock<'_> {
    fn deref_mut(&mut self) -> &mut ClusterStore {
        &mut self.state.as_mut().expect("held until drop").store
    }
}

impl Drop for StoreLock<'_> {
    fn drop(&mut self) {
        let rv = self.state.as_ref().map(|s| s.store.resource_version());
        // Unlock before waking the watches, which lock to read.
        self.state = None;
        if let Some(rv) = rv {
            self.cluster.notify(rv);
        }
    }
}
