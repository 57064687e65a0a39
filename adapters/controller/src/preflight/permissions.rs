//! What each mode needs of the management cluster's RBAC, asked with
//! SelfSubjectAccessReviews (as `kubectl auth can-i` does). `adapters/tests/deploy.rs` holds
//! these against the shipped ClusterRoles, so neither can change alone.

use engine::runtime::Mode;

/// One permission in the management cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    pub group: &'static str,
    /// With its subresource: `machines/status`.
    pub resource: &'static str,
    pub verb: &'static str,
}

impl Permission {
    const fn new(group: &'static str, resource: &'static str, verb: &'static str) -> Self {
        Permission {
            group,
            resource,
            verb,
        }
    }
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        write!(f, "{} {} ({group})", self.verb, self.resource)
    }
}

const CAPI: &str = "cluster.x-k8s.io";

/// What every mode reads: the CAPI objects it watches and the kubeconfig Secrets.
const READS: [Permission; 16] = [
    Permission::new("", "secrets", "get"),
    Permission::new("", "secrets", "list"),
    Permission::new(CAPI, "clusters", "list"),
    Permission::new(CAPI, "clusters", "watch"),
    Permission::new(CAPI, "machinedeployments", "list"),
    Permission::new(CAPI, "machinedeployments", "watch"),
    Permission::new(CAPI, "machinedrainrules", "list"),
    Permission::new(CAPI, "machinedrainrules", "watch"),
    Permission::new(CAPI, "machinesets", "list"),
    Permission::new(CAPI, "machinesets", "watch"),
    Permission::new(CAPI, "machinehealthchecks", "list"),
    Permission::new(CAPI, "machinehealthchecks", "watch"),
    Permission::new(CAPI, "machines", "list"),
    Permission::new(CAPI, "machines", "watch"),
    Permission::new(CAPI, "machinepools", "list"),
    Permission::new(CAPI, "machinepools", "watch"),
];

/// What a takeover writes: its hooks (a merge patch, no read first) and its own condition on
/// Machines, its Events. What it writes for an object it adopted is not asked for: adoption is
/// the operator's choice, after the start.
const TAKEOVER_WRITES: [Permission; 4] = [
    Permission::new("", "events", "create"),
    Permission::new("", "events", "patch"),
    Permission::new(CAPI, "machines", "patch"),
    Permission::new(CAPI, "machines/status", "patch"),
];

/// What `alone` writes beyond a takeover's: the finalizer (a get, then a guarded patch),
/// MachineSet remediation (deleting Machines), MachinePool Machines, the MHCs' and
/// MachinePools' status.
const ALONE_WRITES: [Permission; 8] = [
    Permission::new(CAPI, "machines", "get"),
    Permission::new(CAPI, "machines", "create"),
    Permission::new(CAPI, "machines", "delete"),
    Permission::new(CAPI, "machinepools", "get"),
    Permission::new(CAPI, "machinepools", "patch"),
    Permission::new(CAPI, "machinehealthchecks", "patch"),
    Permission::new(CAPI, "machinepools/status", "patch"),
    Permission::new(CAPI, "machinehealthchecks/status", "patch"),
];

/// What `mode` needs of the management cluster, sorted, without duplicates (providers' kinds
/// and the leader Lease aside: the first are known only once a Machine names them, the second
/// only with `--leader-elect`).
pub fn needed(mode: Mode) -> Vec<Permission> {
    let mut all: Vec<Permission> = READS.to_vec();
    match mode {
        Mode::Shadow => {}
        Mode::Takeover => all.extend(TAKEOVER_WRITES),
        Mode::Alone => {
            all.extend(TAKEOVER_WRITES);
            all.extend(ALONE_WRITES);
        }
    }
    all.sort();
    all.dedup();
    all
}
