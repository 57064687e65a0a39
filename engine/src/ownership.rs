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

/// What a takeover says when it gives Machine `name` back for a fight (`why`: the hold's signs),
/// `unhooking` when the hooks come off with it (else another writer took them off already).
pub fn fight_hand_back_message(name: &str, why: &str, unhooking: bool) -> String {
    format!(
        "Another writer keeps undoing this controller's writes to Machine {name} ({why}): this controller gives it back to Cluster API's manager{} and does not hook it again for {}h; find the other writer (a second controller, a tool re-applying the Machine)",
        if unhooking {
            " (its hooks go, in one write)"
        } else {
            " (its hooks are gone already)"
        },
        crate::fight::GIVEN_BACK_FOR.as_secs() / 3600
    )
}

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

    /// Both hooks (`true`) or none.
    pub fn all(on: bool) -> OwnHooks {
        OwnHooks {
            pre_drain: on,
            pre_terminate: on,
        }
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

/// On a Machine carrying this controller's hooks, who holds them and the command that lets it
/// go: `kubectl describe machine` shows it beside CAPI's `Deleting` condition, which names only
/// the hook, when no controller runs. Set and removed in the writes that add and remove the
/// hooks ([`hooks_patch`]), never on a Machine without them.
pub const HOOKS_HELD_BY_ANNOTATION: &str = "lifecycle.x-k8s.io/hooks-held-by";

/// [`HOOKS_HELD_BY_ANNOTATION`]'s value but the Machine's `NAMESPACE/NAME`.
const HELD_BY_PREFIX: &str = "lifecycle controller (--mode takeover); to hand this Machine back to Cluster API: lifecycle release ";

/// [`HOOKS_HELD_BY_ANNOTATION`]'s value on Machine `namespace/name`.
pub fn hooks_held_by(namespace: &str, name: &str) -> String {
    format!("{HELD_BY_PREFIX}{namespace}/{name}")
}

/// Whether `meta` carries exactly the hooks `want`, with [`HOOKS_HELD_BY_ANNOTATION`] naming it
/// while it carries one and absent otherwise (nothing allocated: asked for every Machine change).
pub fn hooks_settled(meta: &ObjectMeta, want: OwnHooks) -> bool {
    let held_by = meta.annotations.get(HOOKS_HELD_BY_ANNOTATION).map(|v| {
        v.strip_prefix(HELD_BY_PREFIX)
            .and_then(|rest| rest.strip_prefix(meta.namespace.as_str()))
            .and_then(|rest| rest.strip_prefix('/'))
            == Some(meta.name.as_str())
    });
    OwnHooks::of(meta) == want && held_by == want.any().then_some(true)
}

/// A merge patch of a Machine's annotations, and what it does, for a command's summary.
#[derive(Clone, Debug, PartialEq)]
pub struct HooksPatch {
    pub merge: serde_json::Value,
    pub summary: String,
}

/// The merge patch that takes `meta` to the hooks `want`, with [`HOOKS_HELD_BY_ANNOTATION`] on
/// while one of them is and off with the last; `None` when it is there already.
pub fn hooks_patch(meta: &ObjectMeta, want: OwnHooks) -> Option<HooksPatch> {
    if hooks_settled(meta, want) {
        return None;
    }
    let has = OwnHooks::of(meta);
    let held_by = hooks_held_by(&meta.namespace, &meta.name);
    let mut annotations = serde_json::Map::new();
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    for (key, had, wanted) in [
        (OWN_PRE_DRAIN_HOOK, has.pre_drain, want.pre_drain),
        (
            OWN_PRE_TERMINATE_HOOK,
            has.pre_terminate,
            want.pre_terminate,
        ),
    ] {
        match (had, wanted) {
            (false, true) => {
                annotations.insert(key.into(), HOOK_OWNER.into());
                added.push(key);
            }
            (true, false) => {
                annotations.insert(key.into(), serde_json::Value::Null);
                removed.push(key);
            }
            _ => {}
        }
    }
    let current = meta
        .annotations
        .get(HOOKS_HELD_BY_ANNOTATION)
        .map(String::as_str);
    match (current, want.any()) {
        (Some(v), true) if v == held_by => {}
        (_, true) => {
            annotations.insert(HOOKS_HELD_BY_ANNOTATION.into(), held_by.into());
            added.push(HOOKS_HELD_BY_ANNOTATION);
        }
        (Some(_), false) => {
            annotations.insert(HOOKS_HELD_BY_ANNOTATION.into(), serde_json::Value::Null);
            removed.push(HOOKS_HELD_BY_ANNOTATION);
        }
        (None, false) => {}
    }
    let summary = [("add", added), ("remove", removed)]
        .into_iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(verb, keys)| format!("{verb} {}", annotation_list(&keys)))
        .collect::<Vec<_>>()
        .join("; ");
    Some(HooksPatch {
        merge: annotations_patch(annotations),
        summary,
    })
}

/// The merge patch that removes this controller's hooks and [`HOOKS_HELD_BY_ANNOTATION`]
/// whatever the Machine carries (`lifecycle release`).
pub fn release_patch() -> serde_json::Value {
    annotations_patch(
        [
            OWN_PRE_DRAIN_HOOK,
            OWN_PRE_TERMINATE_HOOK,
            HOOKS_HELD_BY_ANNOTATION,
        ]
        .into_iter()
        .map(|k| (k.to_string(), serde_json::Value::Null))
        .collect(),
    )
}

fn annotations_patch(annotations: serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    crate::convert::object([(
        "metadata",
        crate::convert::object([("annotations", serde_json::Value::Object(annotations))]),
    )])
}

/// "annotation a", "annotations a and b", "annotations a, b and c".
fn annotation_list(keys: &[&str]) -> String {
    match keys {
        [one] => format!("annotation {one}"),
        [rest @ .., last] => format!("annotations {} and {last}", rest.join(", ")),
        [] => String::new(),
    }
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

    fn machine_meta(annotations: &[(&str, &str)]) -> ObjectMeta {
        let mut m = ObjectMeta {
            namespace: "team-a".into(),
            name: "md-0-abc-r3".into(),
            ..ObjectMeta::default()
        };
        for (k, v) in annotations {
            m.annotations.insert(k.to_string(), v.to_string());
        }
        m
    }

    const BOTH: OwnHooks = OwnHooks {
        pre_drain: true,
        pre_terminate: true,
    };
    const NONE: OwnHooks = OwnHooks {
        pre_drain: false,
        pre_terminate: false,
    };

    /// The hooks come with the annotation naming the holder and the command for this very
    /// Machine, in the same patch; it goes with the last hook; never on a Machine without them.
    #[test]
    fn the_hooks_patch_names_the_holder_while_a_hook_is_on() {
        let held_by = "lifecycle controller (--mode takeover); to hand this Machine back to Cluster API: lifecycle release team-a/md-0-abc-r3";
        assert_eq!(hooks_held_by("team-a", "md-0-abc-r3"), held_by);
        let bare = machine_meta(&[]);
        let added = hooks_patch(&bare, BOTH).expect("hooks to add");
        assert_eq!(
            added.merge,
            serde_json::json!({"metadata": {"annotations": {
                OWN_PRE_DRAIN_HOOK: "lifecycle", OWN_PRE_TERMINATE_HOOK: "lifecycle",
                HOOKS_HELD_BY_ANNOTATION: held_by}}})
        );
        assert_eq!(
            added.summary,
            format!(
                "add annotations {OWN_PRE_DRAIN_HOOK}, {OWN_PRE_TERMINATE_HOOK} and {HOOKS_HELD_BY_ANNOTATION}"
            )
        );
        let hooked = machine_meta(&[
            (OWN_PRE_DRAIN_HOOK, HOOK_OWNER),
            (OWN_PRE_TERMINATE_HOOK, HOOK_OWNER),
            (HOOKS_HELD_BY_ANNOTATION, held_by),
        ]);
        assert!(hooks_settled(&hooked, BOTH));
        assert_eq!(hooks_patch(&hooked, BOTH), None, "nothing to write");
        let pre_drain_off = hooks_patch(
            &hooked,
            OwnHooks {
                pre_drain: false,
                ..BOTH
            },
        )
        .expect("one hook goes");
        assert_eq!(
            pre_drain_off.merge,
            serde_json::json!({"metadata": {"annotations": {OWN_PRE_DRAIN_HOOK: null}}}),
            "a hook stays: so does the holder"
        );
        let all_off = hooks_patch(&hooked, NONE).expect("both go");
        assert_eq!(
            all_off.merge,
            serde_json::json!({"metadata": {"annotations": {
                OWN_PRE_DRAIN_HOOK: null, OWN_PRE_TERMINATE_HOOK: null,
                HOOKS_HELD_BY_ANNOTATION: null}}})
        );
        assert_eq!(
            hooks_patch(&bare, NONE),
            None,
            "never on a Machine without hooks"
        );
        let stray = machine_meta(&[(HOOKS_HELD_BY_ANNOTATION, held_by)]);
        assert!(!hooks_settled(&stray, NONE));
        // Hooked by an earlier build, or another Machine's value copied: the annotation alone.
        for found in [
            "",
            "lifecycle controller (--mode takeover); to hand this Machine back to Cluster API: lifecycle release team-a/other",
        ] {
            let mut old = machine_meta(&[
                (OWN_PRE_DRAIN_HOOK, HOOK_OWNER),
                (OWN_PRE_TERMINATE_HOOK, HOOK_OWNER),
            ]);
            if !found.is_empty() {
                old.annotations
                    .insert(HOOKS_HELD_BY_ANNOTATION.into(), found.into());
            }
            assert_eq!(
                hooks_patch(&old, BOTH).map(|p| p.merge),
                Some(serde_json::json!({"metadata": {"annotations": {
                    HOOKS_HELD_BY_ANNOTATION: held_by}}}))
            );
        }
        assert_eq!(
            release_patch(),
            serde_json::json!({"metadata": {"annotations": {
                OWN_PRE_DRAIN_HOOK: null, OWN_PRE_TERMINATE_HOOK: null,
                HOOKS_HELD_BY_ANNOTATION: null}}})
        );
    }
}
