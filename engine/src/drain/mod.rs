//! Node drain, as CAPI's machine controller does it: pod classification (the kubectl-drain
//! filters plus the `cluster.x-k8s.io/drain` label and MachineDrainRules), the eviction plan
//! (who is evicted now, who waits, who is ignored), and the `DrainingSucceeded` message.
//!
//! Everything here is pure: the deletion controller gathers the pods and rules from the store,
//! asks [`classify`] about each pod, builds a [`DrainPlan`] with what it remembers of earlier
//! evictions, and issues the plan's evictions as commands.
//!
//! One upstream limit does not carry over: CAPI gives its whole eviction loop a 10 s budget
//! (`eviction timeout of 10s reached, eviction will be retried`). Here each eviction is its own
//! command whose answer comes back as an input, so there is no loop to time out.

mod filter;
mod message;
mod plan;
mod refusal;

pub use filter::{
    DrainBehavior, DrainContext, DrainRuleError, PodDeleteStatus, StatusReason, classify,
    matching_drain_rules, skipped_by_choice,
};
pub use message::{
    blocked_by_disruption_budget, condition_header, condition_message, condition_message_after,
    list_to_string,
};
pub use plan::{
    DrainPlan, EvictionAttempt, EvictionOutcome, FailedPods, PodDrain, PodFacts,
    eviction_failure_message,
};
pub use refusal::{EvictionFailure, EvictionRefusal, NAMESPACE_TERMINATING_FAILURE, PDB_PHRASE};

use crate::time::Duration;

/// How long a failed (or unanswered) eviction waits before it is tried again (upstream's
/// `drainRetryInterval`). Other events never make a pod's retry come earlier.
pub const EVICTION_RETRY_INTERVAL: Duration = Duration::from_secs(20);

/// On an unreachable Node, pods deleted more than this long ago (in whole seconds, strictly
/// greater) are skipped: their kubelet will never confirm their termination.
pub const UNREACHABLE_SKIP_WAIT_FOR_DELETE_TIMEOUT_SECONDS: i64 = 1;

/// Grace period given to evictions on an unreachable Node.
pub const UNREACHABLE_GRACE_PERIOD_SECONDS: i64 = 1;

/// Pods named per line of a condition message (`a, b, c, ... (4 more)`).
pub const CONDITION_POD_NAMES_MAX: usize = 3;

/// Distinct eviction failure messages shown in a condition message.
pub const CONDITION_FAILURE_MESSAGES_MAX: usize = 5;
