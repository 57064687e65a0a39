//! What the simulation schedules ([`Event`]), what one instant produces ([`Work`]), and what
//! travels to the controller ([`Delivery`]).

use crate::api::{ObjKey, Written};
use engine::ApiOutcome;
use engine::model::Scope;
use engine::time::{Duration, Timestamp};

/// Something scheduled at a simulated time.
#[derive(Clone, Debug)]
pub enum Event {
    /// Timeline step `index` of the scenario.
    Step(usize),
    /// CAPI's own manager reconciles a Machine (`capiManager: true`).
    CapiReconcile { machine: ObjKey },
    /// CAPI's own manager checks a MachineHealthCheck's targets (`capiManager: true`).
    CapiHealthCheck { mhc: ObjKey },
    /// CAPI's manager reconciles a MachinePool (`sim/src/capi_pools.rs`).
    CapiPoolReconcile { pool: ObjKey },
    /// CAPI's MachineSet controller reconciles a MachineSet: owner remediation
    /// (`sim/src/capi_remediation.rs`), then its replicas.
    CapiMachineSetReconcile { ms: ObjKey },
    /// CAPI's MachineDeployment controller reconciles a MachineDeployment
    /// (`sim/src/capi_deployments.rs`).
    CapiDeploymentReconcile { md: ObjKey },
    /// CAPI's own manager renews its leader Lease.
    CapiLeaseRenew,
    /// The engine asked to be woken.
    EngineTick,
    /// The kubelet finished shutting a pod down.
    PodGone { scope: Scope, pod: ObjKey },
    /// A rescheduled pod became Ready.
    PodReady { scope: Scope, pod: ObjKey },
    /// A stopped kubelet's node turns `Ready=Unknown` (if it is still stopped).
    NodeUnreachable { scope: Scope, node: String },
    /// The node's volumes detached.
    VolumesDetached { scope: Scope, node: String },
    /// Pod garbage collection for pods bound to a Node that is gone.
    PodGc { scope: Scope, node: String },
    /// A provider object being deleted goes away.
    ProviderGone { key: ObjKey },
    /// A Machine's infrastructure became ready.
    InfraReady { machine: ObjKey },
    /// A Machine's Node joined its workload cluster.
    NodeJoin { machine: ObjKey },
    /// The fake pool provider finished provisioning (or resizing) an InfraMachinePool.
    PoolProvisioned { pool: ObjKey },
    /// A pool instance's Node joins.
    PoolNodeJoin { pool: ObjKey, index: u32 },
    /// A fault window ends.
    FaultEnds { fault: usize },
    /// A cluster's cache, held unsynced after a restart, syncs.
    CacheSynced { scope: Scope },
    /// A kubelet stopped by a fault comes back.
    KubeletResume { scope: Scope, node: String },
    /// An object corrupted by a fault reads again (`restore`: the merge patch that undoes it).
    Uncorrupt {
        scope: Scope,
        key: crate::api::ObjKey,
        restore: serde_json::Value,
    },
    /// A `kubeconfig` fault ends: the cluster's kubeconfig Secret is restored (`original`,
    /// when the store held one to damage) and its connector connects.
    KubeconfigRestored {
        scope: Scope,
        original: Option<serde_json::Value>,
    },
    /// A flapping node changes its Ready condition.
    NodeFlap {
        scope: Scope,
        node: String,
        period: Duration,
        until: Timestamp,
        ready: bool,
    },
    /// A command held back by a slow API.
    DelayedCommand { command: Box<engine::Command> },
    /// A checkpoint for `{at: T}` expectations (evaluated after everything at T).
    Checkpoint,
    /// A watch event, result or relist reaches the controller (under delivery faults).
    Arrive { epoch: u64, delivery: Box<Delivery> },
}

/// Work produced at one instant, handled in order.
#[derive(Clone, Debug)]
pub(crate) enum Work {
    Changed { scope: Scope, written: Written },
    Command(engine::Command),
}

/// Something on its way to the controller.
#[derive(Clone, Debug)]
pub enum Delivery {
    Watch {
        scope: Scope,
        written: Box<Written>,
    },
    Result {
        command: u64,
        outcome: ApiOutcome,
    },
    /// A watch that ended with 410 lists again.
    Relist {
        scope: Scope,
        stream: String,
    },
    /// A slow consumer's held events of one scope are read.
    Coalesced {
        scope: Scope,
    },
    /// A busy controller loop gets round to its backlog.
    Wake,
}
