//! Who owns a worker Machine's deletion: this controller alone, or Cluster API's manager with
//! this controller holding it at upstream's deletion hooks (takeover).
//!
//! In takeover, this controller puts its own pre-drain and pre-terminate hook on the Machines
//! it owns (Machines of a MachineSet, never a control plane's). While CAPI's manager waits at
//! them it performs the deletion's steps itself; once the drain and the volume detach are over
//! it removes its pre-drain hook (CAPI's drain then finds nothing to evict), and once the
//! infrastructure, bootstrap and Node are gone it removes its pre-terminate hook, so CAPI's
//! manager releases the finalizer. It writes no condition or status CAPI owns: its progress is
//! its own condition, [`OWN_CONDITION`].
//!
//! The ownership is an input ([`crate::Input::Ownership`]), journaled when the process starts
//! in another mode than the state it resumes, so a replay decides as the process did.

use crate::model::{
    CONTROL_PLANE_LABEL, Condition, ConditionStatus, Conditions, LabelSelector, Machine,
    ObjectMeta, set_condition,
};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// This controller's hooks' name (after the prefix's `/`) and owner (the annotation's value,
/// as upstream's convention asks: who removes it).
pub const HOOK_NAME: &str = "lifecycle";
pub const HOOK_OWNER: &str = "lifecycle";
/// This controller's pre-drain hook annotation.
pub const OWN_PRE_DRAIN_HOOK: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io/lifecycle";
/// This controller's pre-terminate hook annotation.
pub const OWN_PRE_TERMINATE_HOOK: &str =
    "pre-terminate.delete.hook.machine.cluster.x-k8s.io/lifecycle";
/// The condition type that tells a taken-over deletion's progress (CAPI's own `Deleting` is
/// never written in takeover).
pub const OWN_CONDITION: &str = "LifecycleDeleting";

/// The reasons of CAPI's `Deleting` condition while it waits at a hook: the only times a
/// taken-over deletion acts.
pub const CAPI_WAITING_FOR_PRE_DRAIN_HOOK: &str = "WaitingForPreDrainHook";
pub const CAPI_WAITING_FOR_PRE_TERMINATE_HOOK: &str = "WaitingForPreTerminateHook";

/// Marks a MachineHealthCheck or MachinePool this controller adopted in takeover (value
/// [`HOOK_OWNER`]), always beside `cluster.x-k8s.io/paused`, which stops CAPI's reconcile of it.
pub const ADOPTED_ANNOTATION: &str = "lifecycle.x-k8s.io/adopted";

/// Whether an MHC or MachinePool is this controller's beside CAPI's manager: paused with this
/// controller's marker. Paused without it is paused, for this controller too.
pub fn adopted(meta: &ObjectMeta) -> bool {
    meta.has_annotation(crate::model::PAUSED_ANNOTATION)
        && meta.annotations.get(ADOPTED_ANNOTATION).map(String::as_str) == Some(HOOK_OWNER)
}

/// Whether the object's own annotation pauses this controller's reconcile of it: paused, and
/// not by this controller's adoption (the Cluster's `spec.paused` is checked apart: it always
/// pauses).
pub fn paused_for_us(meta: &ObjectMeta) -> bool {
    meta.has_annotation(crate::model::PAUSED_ANNOTATION) && !adopted(meta)
}

/// The merge patch that adopts (`true`: pause for CAPI, this controller's marker) or gives back
/// (`false`: both removed) an MHC or MachinePool.
pub fn adoption_patch(adopt: bool) -> serde_json::Value {
    let value = |v: &str| {
        if adopt {
            serde_json::Value::from(v)
        } else {
            serde_json::Value::Null
        }
    };
    serde_json::json!({"metadata": {"annotations": {
        crate::model::PAUSED_ANNOTATION: value(""),
        ADOPTED_ANNOTATION: value(HOOK_OWNER),
    }}})
}

/// This controller's own reasons in takeover, besides the deletion's.
pub mod own_reason {
    /// CAPI's manager is not (yet, or no longer) waiting at one of this controller's hooks.
    pub const WAITING_FOR_CLUSTER_API: &str = "WaitingForClusterAPI";
    /// Drained and volumes detached: the pre-drain hook goes, CAPI's drain finds nothing left.
    pub const DRAIN_HANDED_BACK: &str = "DrainHandedBack";
    /// Everything deleted (or `lifecycle release` ran): its hooks are gone, CAPI's manager does
    /// the rest.
    pub const RELEASED_TO_CLUSTER_API: &str = "ReleasedToClusterAPI";
}

/// Whose hands a worker Machine's deletion is in.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Ownership {
    /// This controller is the only manager: it holds the finalizer and does every step.
    #[default]
    Alone,
    /// Beside CAPI's manager: it owns worker Machines' deletion through its hooks.
    Takeover,
}

impl Ownership {
    pub fn as_str(self) -> &'static str {
        match self {
            Ownership::Alone => "alone",
            Ownership::Takeover => "takeover",
        }
    }
}

/// The release Cluster API's manager runs, as this controller judges it against the releases it
/// was built for ([`crate::Input::CapiRelease`], journaled when the driver reads a change).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapiRelease {
    /// As its image names it (`v1.12.3`), or why it is not known.
    pub release: String,
    pub support: ReleaseSupport,
}

impl CapiRelease {
    /// Whether `next` is news to a controller that judged `self` last: its support changed,
    /// or its release once one was known (a first reading of a supported release changes
    /// nothing, and is not journaled).
    pub fn is_news(&self, next: &CapiRelease) -> bool {
        self.support != next.support || (!self.release.is_empty() && self.release != next.release)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseSupport {
    /// A release this build supports (or none read yet: a takeover starts only beside one).
    #[default]
    Supported,
    /// Not among the releases this build knows (newer, or a digest-pinned or mirrored image):
    /// current and new deletions go on; the driver warns and alerts.
    Unknown,
    /// Known not to work beside this build: a takeover hooks no new Machine, finishes the
    /// deletions it holds, and hands every other Machine back (its hooks go).
    Unsupported,
}

impl ReleaseSupport {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseSupport::Supported => "supported",
            ReleaseSupport::Unknown => "unknown",
            ReleaseSupport::Unsupported => "unsupported",
        }
    }
}

/// The reason of the Warning Event on a Machine a takeover hands back because Cluster API's
/// manager runs a release this build does not support.
pub const HANDED_BACK_EVENT: &str = "HandedBackToClusterAPI";

/// Which of this controller's hooks a Machine carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnHooks {
    pub pre_drain: bool,
    pub pre_terminate: bool,
}

impl OwnHooks {
    pub fn of(meta: &ObjectMeta) -> OwnHooks {
        OwnHooks {
            pre_drain: meta.has_annotation(OWN_PRE_DRAIN_HOOK),
            pre_terminate: meta.has_annotation(OWN_PRE_TERMINATE_HOOK),
        }
    }

    pub fn any(self) -> bool {
        self.pre_drain || self.pre_terminate
    }

    pub fn both(self) -> bool {
        self.pre_drain && self.pre_terminate
    }
}

/// Whether an annotation is a deletion hook of someone else's: this controller never waits for
/// its own (left behind by a takeover, they would hold an `alone` deletion forever).
pub fn is_foreign_hook(annotation: &str, prefix: &str) -> bool {
    annotation.starts_with(prefix)
        && annotation != OWN_PRE_DRAIN_HOOK
        && annotation != OWN_PRE_TERMINATE_HOOK
}

/// Whether takeover owns this Machine's deletion: one `own` selects (`--own-machines`), by
/// default a MachineSet's, and never one of a control plane (KCP removes its own pre-terminate
/// hook only when no other is present).
pub fn takes_over(m: &Machine, own: Option<&LabelSelector>) -> bool {
    let owned_by = |kind: &str| {
        m.meta
            .owner_references
            .iter()
            .any(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
    };
    let control_plane_owner = m
        .meta
        .owner_references
        .iter()
        .any(|o| o.api_version.starts_with("controlplane.cluster.x-k8s.io/"));
    let selected = match own {
        Some(selector) => selector.matches(&m.meta.labels),
        None => owned_by("MachineSet"),
    };
    selected && !m.meta.has_label(CONTROL_PLANE_LABEL) && !control_plane_owner
}

/// A Machine's conditions once `lifecycle release` took its hooks off: its own condition, when
/// it has one that still tells a deletion under way, says that CAPI's manager has it (`False`,
/// [`own_reason::RELEASED_TO_CLUSTER_API`]); every other condition as read. `None`: nothing to
/// change.
pub fn released_conditions(m: &Machine, now: Timestamp) -> Option<Conditions> {
    let own = m.conditions.current(OWN_CONDITION)?;
    if own.status == ConditionStatus::False && own.reason == own_reason::RELEASED_TO_CLUSTER_API {
        return None;
    }
    let mut conditions = m.conditions.clone();
    let released = Condition::new(
        OWN_CONDITION,
        ConditionStatus::False,
        own_reason::RELEASED_TO_CLUSTER_API,
        "released by `lifecycle release`: Cluster API's manager performs the rest of the deletion, from where it stands",
    );
    set_condition(&mut conditions.current, released, now);
    Some(conditions)
}

/// The merge patch that adds (`true`) or removes (`false`) hooks on a Machine.
pub fn hooks_patch(pre_drain: Option<bool>, pre_terminate: Option<bool>) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    for (key, set) in [
        (OWN_PRE_DRAIN_HOOK, pre_drain),
        (OWN_PRE_TERMINATE_HOOK, pre_terminate),
    ] {
        match set {
            Some(true) => annotations.insert(key.into(), HOOK_OWNER.into()),
            Some(false) => annotations.insert(key.into(), serde_json::Value::Null),
            None => None,
        };
    }
    crate::convert::object([(
        "metadata",
        crate::convert::object([("annotations", serde_json::Value::Object(annotations))]),
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX};

    #[test]
    fn own_hooks_are_upstreams_prefixes_with_this_controllers_name() {
        assert_eq!(
            OWN_PRE_DRAIN_HOOK,
            format!("{PRE_DRAIN_HOOK_PREFIX}/{HOOK_NAME}")
        );
        assert_eq!(
            OWN_PRE_TERMINATE_HOOK,
            format!("{PRE_TERMINATE_HOOK_PREFIX}/{HOOK_NAME}")
        );
        assert!(!is_foreign_hook(OWN_PRE_DRAIN_HOOK, PRE_DRAIN_HOOK_PREFIX));
        assert!(is_foreign_hook(
            "pre-drain.delete.hook.machine.cluster.x-k8s.io/backup",
            PRE_DRAIN_HOOK_PREFIX
        ));
        assert!(!is_foreign_hook(
            "pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup",
            PRE_DRAIN_HOOK_PREFIX
        ));
    }

    #[test]
    fn adopted_means_paused_with_this_controllers_marker_and_nothing_else() {
        let meta = |annotations: &[(&str, &str)]| {
            let mut m = ObjectMeta::default();
            for (k, v) in annotations {
                m.annotations.insert(k.to_string(), v.to_string());
            }
            m
        };
        let paused = (crate::model::PAUSED_ANNOTATION, "");
        let marker = (ADOPTED_ANNOTATION, HOOK_OWNER);
        let ours = meta(&[paused, marker]);
        assert!(adopted(&ours) && !paused_for_us(&ours));
        let someone_elses = meta(&[paused]);
        assert!(!adopted(&someone_elses) && paused_for_us(&someone_elses));
        let marker_only = meta(&[marker]);
        assert!(
            !adopted(&marker_only) && !paused_for_us(&marker_only),
            "CAPI's, not paused"
        );
        let other_owner = meta(&[paused, (ADOPTED_ANNOTATION, "someone")]);
        assert!(!adopted(&other_owner) && paused_for_us(&other_owner));
        assert_eq!(
            adoption_patch(false),
            serde_json::json!({"metadata": {"annotations": {
                crate::model::PAUSED_ANNOTATION: null, ADOPTED_ANNOTATION: null}}})
        );
    }

    #[test]
    fn the_hooks_patch_sets_or_removes_only_what_it_names() {
        assert_eq!(
            hooks_patch(Some(true), Some(true)),
            serde_json::json!({"metadata": {"annotations": {
                OWN_PRE_DRAIN_HOOK: "lifecycle", OWN_PRE_TERMINATE_HOOK: "lifecycle"}}})
        );
        assert_eq!(
            hooks_patch(Some(false), None),
            serde_json::json!({"metadata": {"annotations": {OWN_PRE_DRAIN_HOOK: null}}})
        );
    }
}
