//! Node deletion timing shared by the two controllers that delete Nodes: Machine deletion
//! (`deletion`) and MachinePool deletion (`pool`). Their retry intervals differ, as upstream's
//! two controllers do; the window and the default timeout are one.

use crate::time::Duration;

/// `nodeDeletionTimeout` when unset (Part 1 decision 2: the default the webhook would apply);
/// zero means retry forever.
pub const NODE_DELETION_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Upstream's in-reconcile retry budget: failed attempts are retried for this long after the
/// first one whatever the timeout says.
pub const NODE_DELETION_RETRY_WINDOW: Duration = Duration::from_secs(10);
/// The Machine controller tries a failed Node deletion again every 2 s.
pub const MACHINE_NODE_DELETION_RETRY_INTERVAL: Duration = Duration::from_secs(2);
/// The MachinePool controller tries a failed Node deletion again after 1 s.
pub const POOL_NODE_DELETION_RETRY_INTERVAL: Duration = Duration::from_secs(1);
