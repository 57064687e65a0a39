//! Pod classification: upstream's drain filters, applied in upstream's order.

use crate::model::{
    DRAIN_LABEL, Kind, LabelSelector, MachineDrainRule, Namespace, Object, ObjectKey, Pod, Scope,
};
use crate::store::Store;
use crate::time::Timestamp;
use std::cell::Cell;
use std::collections::BTreeMap;

/// What the drain does with a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DrainBehavior {
    /// Evict it (respecting PDBs) and wait until it is gone.
    Drain,
    /// Leave it alone; it does not block the drain.
    Skip,
    /// Do not evict it, but wait until it is gone from the Node.
    WaitCompleted,
}

/// Upstream's `PodDeleteStatus` reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusReason {
    Okay,
    Skip,
    Warning,
    Error,
}

/// The verdict on one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDeleteStatus {
    pub behavior: DrainBehavior,
    /// Drain order (MachineDrainRule `spec.drain.order`); `None` counts as 0.
    pub order: Option<i32>,
    pub reason: StatusReason,
    pub message: String,
}

impl PodDeleteStatus {
    fn okay() -> Self {
        PodDeleteStatus {
            behavior: DrainBehavior::Drain,
            order: None,
            reason: StatusReason::Okay,
            message: String::new(),
        }
    }
    fn skip() -> Self {
        PodDeleteStatus {
            behavior: DrainBehavior::Skip,
            order: None,
            reason: StatusReason::Skip,
            message: String::new(),
        }
    }
    fn wait_completed() -> Self {
        PodDeleteStatus {
            behavior: DrainBehavior::WaitCompleted,
            order: Some(0),
            reason: StatusReason::Okay,
            message: String::new(),
        }
    }
    fn warning(behavior: DrainBehavior, message: &str) -> Self {
        PodDeleteStatus {
            behavior,
            order: None,
            reason: StatusReason::Warning,
            message: message.to_string(),
        }
    }
    fn error(message: String) -> Self {
        PodDeleteStatus {
            behavior: DrainBehavior::Drain,
            order: None,
            reason: StatusReason::Error,
            message,
        }
    }
    /// Whether the drain waits for this pod (Drain or WaitCompleted).
    pub fn blocks(&self) -> bool {
        match self.behavior {
            DrainBehavior::Drain | DrainBehavior::WaitCompleted => true,
            DrainBehavior::Skip => false,
        }
    }
}

/// A MachineDrainRule in the Machine's namespace has a selector that cannot be parsed: the
/// whole drain fails (upstream refuses to guess which rule applies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainRuleError {
    pub rule: String,
}

impl std::fmt::Display for DrainRuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "failed to get matching MachineDrainRules: invalid selectors in MachineDrainRule {}",
            self.rule
        )
    }
}

fn selector_ok(s: &Option<LabelSelector>) -> bool {
    s.as_ref().is_none_or(|s| s.invalid.is_none())
}

fn selector_matches(s: &Option<LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    s.as_ref().is_none_or(|s| s.matches(labels))
}

/// The MachineDrainRules of `rules` (one namespace) that apply to a Machine with
/// `machine_labels` in a Cluster with `cluster_labels`, sorted by name (the first matching
/// rule wins for a pod). Any invalid selector in any rule fails the whole lookup.
pub fn matching_drain_rules<'a>(
    rules: impl IntoIterator<Item = &'a MachineDrainRule>,
    machine_labels: &BTreeMap<String, String>,
    cluster_labels: &BTreeMap<String, String>,
) -> Result<Vec<&'a MachineDrainRule>, DrainRuleError> {
    let mut all: Vec<&MachineDrainRule> = rules.into_iter().collect();
    all.sort_by(|a, b| a.meta.name.cmp(&b.meta.name));
    for rule in &all {
        let valid = rule
            .machines
            .iter()
            .all(|m| selector_ok(&m.selector) && selector_ok(&m.cluster_selector))
            && rule
                .pods
                .iter()
                .all(|p| selector_ok(&p.selector) && selector_ok(&p.namespace_selector));
        if !valid {
            return Err(DrainRuleError {
                rule: rule.meta.name.clone(),
            });
        }
    }
    Ok(all
        .into_iter()
        .filter(|rule| {
            rule.machines.is_empty()
                || rule.machines.iter().any(|m| {
                    selector_matches(&m.selector, machine_labels)
                        && selector_matches(&m.cluster_selector, cluster_labels)
                })
        })
        .collect())
}

/// What the filters need besides the pod.
pub struct DrainContext<'a> {
    pub store: &'a Store,
    /// The workload cluster the pods live in.
    pub scope: &'a Scope,
    pub now: Timestamp,
    /// Pods deleted more than this many whole seconds ago are skipped; 0 disables.
    pub skip_wait_for_delete_timeout_seconds: i64,
    /// The rules that apply to the Machine, sorted by name (see [`matching_drain_rules`]).
    pub rules: &'a [&'a MachineDrainRule],
    /// The last Namespace looked up: pods come in key order, so grouped by namespace.
    last_namespace: Cell<Option<(&'a str, Option<&'a Namespace>)>>,
}

impl<'a> DrainContext<'a> {
    pub fn new(
        store: &'a Store,
        scope: &'a Scope,
        now: Timestamp,
        skip_wait_for_delete_timeout_seconds: i64,
        rules: &'a [&'a MachineDrainRule],
    ) -> Self {
        DrainContext {
            store,
            scope,
            now,
            skip_wait_for_delete_timeout_seconds,
            rules,
            last_namespace: Cell::new(None),
        }
    }

    /// The workload cluster's Namespace `name`.
    pub fn namespace(&self, name: &str) -> Option<&'a Namespace> {
        if let Some((last, found)) = self.last_namespace.get()
            && last == name
        {
            return found;
        }
        let (key, found) = match self.store.get_parts(self.scope, &Kind::Namespace, "", name) {
            Some((key, Object::Namespace(n))) => (key, Some(n)),
            _ => return None,
        };
        self.last_namespace.set(Some((&key.name, found)));
        found
    }
}

/// Whether this controller's drain of `machine`'s Node leaves `pod` alone because someone
/// chose so (its `cluster.x-k8s.io/drain: skip` label or a MachineDrainRule's `Skip`), as the
/// objects read in `store` now. `None` when that cannot be told (the pod, the Machine or its
/// Cluster not stored, the rules failing).
pub fn skipped_by_choice(
    store: &Store,
    machine: &ObjectKey,
    pod: &ObjectKey,
    now: Timestamp,
) -> Option<bool> {
    let Some(Object::Pod(p)) = store.get(pod) else {
        return None;
    };
    let Some(Object::Machine(m)) = store.get(machine) else {
        return None;
    };
    let cluster = match store.get_parts(
        &Scope::Management,
        &Kind::Cluster,
        &machine.namespace,
        &m.cluster_name,
    ) {
        Some((_, Object::Cluster(c))) => c,
        _ => return None,
    };
    let rules = store
        .iter_kind(&Scope::Management, &Kind::MachineDrainRule)
        .filter_map(|(k, o)| match o {
            Object::MachineDrainRule(r) if k.namespace == machine.namespace => Some(r),
            _ => None,
        });
    let rules = matching_drain_rules(rules, &m.meta.labels, &cluster.meta.labels).ok()?;
    let cx = DrainContext::new(store, &pod.scope, now, 0, &rules);
    let chosen: [Filter; 2] = [drain_label, machine_drain_rules];
    Some(
        chosen
            .iter()
            .any(|f| f(p, &cx).is_some_and(|s| s.behavior == DrainBehavior::Skip)),
    )
}

/// One of upstream's filters: `None` is its `MakePodDeleteStatusOkay()` (the common answer,
/// returned without building a status: classifying is per pod and per pass).
type Filter = fn(&Pod, &DrainContext<'_>) -> Option<PodDeleteStatus>;

/// Classifies one pod with upstream's filters in upstream's order: skipDeleted, daemonSet,
/// mirrorPod, localStorage, unreplicated, drainLabel, machineDrainRules. The first Skip or
/// WaitCompleted is final; otherwise the last filter's status wins, and collected warnings
/// turn an Okay/Warning Drain into a Warning joining them.
pub fn classify(pod: &Pod, cx: &DrainContext<'_>) -> PodDeleteStatus {
    const FILTERS: [Filter; 7] = [
        skip_deleted,
        daemon_set,
        mirror_pod,
        local_storage,
        unreplicated,
        drain_label,
        machine_drain_rules,
    ];
    let mut warnings: Vec<String> = Vec::new();
    let mut last = None;
    for filter in FILTERS {
        last = filter(pod, cx);
        let Some(status) = &last else { continue };
        if status.reason == StatusReason::Warning {
            warnings.push(status.message.clone());
        }
        match status.behavior {
            DrainBehavior::Skip | DrainBehavior::WaitCompleted => {
                return last.expect("matched Some");
            }
            DrainBehavior::Drain => {}
        }
    }
    let mut status = last.unwrap_or_else(PodDeleteStatus::okay);
    if matches!(status.reason, StatusReason::Okay | StatusReason::Warning) && !warnings.is_empty() {
        status.reason = StatusReason::Warning;
        status.message = warnings.join(", ");
    }
    status
}

fn skip_deleted(pod: &Pod, cx: &DrainContext<'_>) -> Option<PodDeleteStatus> {
    let threshold = cx.skip_wait_for_delete_timeout_seconds;
    match pod.meta.deletion_timestamp {
        Some(at) if threshold > 0 && cx.now.since(at).as_secs() > threshold => {
            Some(PodDeleteStatus::skip())
        }
        _ => None,
    }
}

fn daemon_set(pod: &Pod, cx: &DrainContext<'_>) -> Option<PodDeleteStatus> {
    let owner = pod.meta.controller()?;
    if owner.kind != "DaemonSet" || pod.is_finished() {
        return None;
    }
    // The cache stands for upstream's GET: absent means NotFound (an orphaned pod).
    let key = ObjectKey::new(
        cx.scope.clone(),
        Kind::DaemonSet,
        &pod.meta.namespace,
        &owner.name,
    );
    Some(match cx.store.get(&key) {
        Some(_) => PodDeleteStatus::warning(DrainBehavior::Skip, "ignoring DaemonSet-managed Pod"),
        None => PodDeleteStatus::warning(
            DrainBehavior::Drain,
            "evicting orphaned DaemonSet-managed Pod",
        ),
    })
}

fn mirror_pod(pod: &Pod, _cx: &DrainContext<'_>) -> Option<PodDeleteStatus> {
    pod.is_mirror().then(PodDeleteStatus::skip)
}

fn local_storage(pod: &Pod, _cx: &DrainContext<'_>) -> Option<PodDeleteStatus> {
    (pod.has_empty_dir && !pod.is_finished())
        .then(|| PodDeleteStatus::warning(DrainBehavior::Drain, "evicting Pod with local storage"))
}

fn unreplicated(pod: &Pod, _cx: &DrainContext<'_>) -> Option<PodDeleteStatus> {
    (!pod.is_finished() && pod.meta.controller().is_none()).then(|| {
        PodDeleteStatus::warning(DrainBehavior::Drain, "evicting Pod that has no controller")
    })
}

fn drain_label(pod: &Pod, _cx: &DrainContext<'_>) -> Option<PodDeleteStatus> {
    let value = pod.meta.labels.get(DRAIN_LABEL)?;
    if value.eq_ignore_ascii_case("skip") {
        Some(PodDeleteStatus::skip())
    } else if value
        .replacen('-', "", 1)
        .eq_ignore_ascii_case("waitcompleted")
    {
        Some(PodDeleteStatus::wait_completed())
    } else {
        tracing::debug!(
            pod = %pod.meta.name,
            value = %value,
            "ignoring unknown value of label {DRAIN_LABEL}"
        );
        None
    }
}

fn machine_drain_rules(pod: &Pod, cx: &DrainContext<'_>) -> Option<PodDeleteStatus> {
    let Some(namespace) = cx.namespace(&pod.meta.namespace) else {
        return Some(PodDeleteStatus::error(
            "Pod Namespace does not exist".to_string(),
        ));
    };
    for rule in cx.rules {
        let applies = rule.pods.is_empty()
            || rule.pods.iter().any(|p| {
                selector_matches(&p.selector, &pod.meta.labels)
                    && selector_matches(&p.namespace_selector, &namespace.meta.labels)
            });
        if !applies {
            continue;
        }
        return match rule.behavior.as_str() {
            "Drain" => rule.order.map(|order| PodDeleteStatus {
                order: Some(order),
                ..PodDeleteStatus::okay()
            }),
            "Skip" => Some(PodDeleteStatus::skip()),
            "WaitCompleted" => Some(PodDeleteStatus::wait_completed()),
            other => Some(PodDeleteStatus::error(format!(
                "MachineDrainRule {:?} has unknown spec.drain.behavior: {:?}",
                rule.meta.name, other
            ))),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        DaemonSet, MachineSelectorEntry, OwnerReference, PodSelectorEntry, SelectorOperator,
        SelectorRequirement,
    };
    use crate::testing::{labels, meta, namespace, pod, workload};

    const NOW: Timestamp = Timestamp(1_000_000);

    fn store_with(objects: Vec<Object>) -> Store {
        let mut store = Store::default();
        store.upsert(&workload("c1"), Object::Namespace(namespace("app")));
        for o in objects {
            store.upsert(&workload("c1"), o);
        }
        store
    }

    fn run(p: &Pod, store: &Store, skip_secs: i64, rules: &[&MachineDrainRule]) -> PodDeleteStatus {
        let scope = workload("c1");
        let cx = DrainContext::new(store, &scope, NOW, skip_secs, rules);
        classify(p, &cx)
    }

    fn owned_by(mut p: Pod, kind: &str, name: &str) -> Pod {
        p.meta.owner_references = vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: true,
        }];
        p
    }

    fn rule(name: &str, behavior: &str, order: Option<i32>) -> MachineDrainRule {
        MachineDrainRule {
            meta: meta("default", name),
            behavior: behavior.into(),
            order,
            machines: vec![],
            pods: vec![],
        }
    }

    fn sel(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: labels(pairs),
            ..Default::default()
        })
    }

    fn status(behavior: DrainBehavior, reason: StatusReason, message: &str) -> PodDeleteStatus {
        PodDeleteStatus {
            behavior,
            order: None,
            reason,
            message: message.into(),
        }
    }

    #[test]
    fn a_replicated_running_pod_is_drained() {
        let store = store_with(vec![]);
        let got = run(&pod("app", "web", "n1"), &store, 0, &[]);
        assert_eq!(got, status(DrainBehavior::Drain, StatusReason::Okay, ""));
    }

    #[test]
    fn skip_deleted_uses_whole_seconds_strictly_greater_than_the_threshold() {
        let store = store_with(vec![]);
        let cases = [
            (1, 1_999, DrainBehavior::Drain),  // 1 s elapsed: not > 1
            (1, 2_000, DrainBehavior::Skip),   // 2 s elapsed
            (0, 60_000, DrainBehavior::Drain), // threshold 0 disables the filter
        ];
        for (threshold, ago_ms, want) in cases {
            let mut p = pod("app", "web", "n1");
            p.meta.deletion_timestamp = Some(Timestamp(NOW.0 - ago_ms));
            assert_eq!(
                run(&p, &store, threshold, &[]).behavior,
                want,
                "threshold {threshold}s, deleted {ago_ms}ms ago"
            );
        }
    }

    #[test]
    fn daemon_set_pods_are_skipped_orphans_evicted_finished_ones_drained() {
        let ds = DaemonSet {
            meta: meta("app", "ds"),
        };
        let store = store_with(vec![Object::DaemonSet(ds)]);
        let managed = owned_by(pod("app", "a", "n1"), "DaemonSet", "ds");
        assert_eq!(
            run(&managed, &store, 0, &[]),
            status(
                DrainBehavior::Skip,
                StatusReason::Warning,
                "ignoring DaemonSet-managed Pod"
            )
        );
        let orphan = owned_by(pod("app", "b", "n1"), "DaemonSet", "gone");
        assert_eq!(
            run(&orphan, &store, 0, &[]),
            status(
                DrainBehavior::Drain,
                StatusReason::Warning,
                "evicting orphaned DaemonSet-managed Pod"
            )
        );
        let mut finished = managed.clone();
        finished.phase = "Succeeded".into();
        assert_eq!(
            run(&finished, &store, 0, &[]),
            status(DrainBehavior::Drain, StatusReason::Okay, "")
        );
    }

    #[test]
    fn mirror_pods_are_skipped() {
        let store = store_with(vec![]);
        let mut p = pod("app", "static", "n1");
        p.meta
            .annotations
            .insert(crate::model::MIRROR_POD_ANNOTATION.into(), "x".into());
        assert_eq!(
            run(&p, &store, 0, &[]),
            status(DrainBehavior::Skip, StatusReason::Skip, "")
        );
    }

    #[test]
    fn local_storage_and_unreplicated_warnings_are_joined() {
        let store = store_with(vec![]);
        let mut p = pod("app", "bare", "n1");
        p.meta.owner_references.clear();
        p.has_empty_dir = true;
        assert_eq!(
            run(&p, &store, 0, &[]),
            status(
                DrainBehavior::Drain,
                StatusReason::Warning,
                "evicting Pod with local storage, evicting Pod that has no controller"
            )
        );
        p.phase = "Failed".into();
        assert_eq!(
            run(&p, &store, 0, &[]),
            status(DrainBehavior::Drain, StatusReason::Okay, "")
        );
    }

    #[test]
    fn drain_label_values_follow_upstream_matching() {
        let store = store_with(vec![]);
        let cases = [
            ("skip", DrainBehavior::Skip),
            ("SKIP", DrainBehavior::Skip),
            ("wait-completed", DrainBehavior::WaitCompleted),
            ("WaitCompleted", DrainBehavior::WaitCompleted),
            ("Wait-Completed", DrainBehavior::WaitCompleted),
            ("wait--completed", DrainBehavior::Drain), // only the first '-' is removed
            ("something", DrainBehavior::Drain),
        ];
        for (value, want) in cases {
            let mut p = pod("app", "web", "n1");
            p.meta.labels.insert(DRAIN_LABEL.into(), value.into());
            let got = run(&p, &store, 0, &[]);
            assert_eq!(got.behavior, want, "label value {value:?}");
            if want == DrainBehavior::WaitCompleted {
                assert_eq!(got.order, Some(0));
            }
        }
    }

    #[test]
    fn first_skip_wins_over_later_filters() {
        let store = store_with(vec![]);
        let mut p = pod("app", "web", "n1");
        p.meta
            .annotations
            .insert(crate::model::MIRROR_POD_ANNOTATION.into(), "x".into());
        p.meta
            .labels
            .insert(DRAIN_LABEL.into(), "wait-completed".into());
        assert_eq!(run(&p, &store, 0, &[]).behavior, DrainBehavior::Skip);
    }

    #[test]
    fn missing_namespace_is_an_error() {
        let store = Store::default();
        let got = run(&pod("app", "web", "n1"), &store, 0, &[]);
        assert_eq!(
            got,
            status(
                DrainBehavior::Drain,
                StatusReason::Error,
                "Pod Namespace does not exist"
            )
        );
    }

    #[test]
    fn drain_rules_first_by_name_wins_and_sets_order() {
        let store = store_with(vec![]);
        let mut b = rule("b-skip", "Skip", None);
        b.pods = vec![PodSelectorEntry {
            selector: sel(&[("app", "web")]),
            namespace_selector: None,
        }];
        let a = rule("a-drain", "Drain", Some(5));
        let c = rule("c-wait", "WaitCompleted", None);
        let owned = [c, b, a];
        let rules = matching_drain_rules(owned.iter(), &labels(&[]), &labels(&[])).unwrap();
        let names: Vec<&str> = rules.iter().map(|r| r.meta.name.as_str()).collect();
        assert_eq!(names, ["a-drain", "b-skip", "c-wait"]);
        let mut web = pod("app", "web", "n1");
        web.meta.labels = labels(&[("app", "web")]);
        let got = run(&web, &store, 0, &rules);
        assert_eq!(got.behavior, DrainBehavior::Drain);
        assert_eq!(got.order, Some(5));
        // Without the first rule, the pod selector of the second decides.
        let got = run(&web, &store, 0, &rules[1..]);
        assert_eq!(got.behavior, DrainBehavior::Skip);
        let mut other = pod("app", "db", "n1");
        other.meta.labels = labels(&[("app", "db")]);
        assert_eq!(
            run(&other, &store, 0, &rules[1..]).behavior,
            DrainBehavior::WaitCompleted
        );
    }

    #[test]
    fn drain_rule_with_unknown_behavior_is_an_error() {
        let store = store_with(vec![]);
        let r = rule("weird", "Evaporate", None);
        let got = run(&pod("app", "web", "n1"), &store, 0, &[&r]);
        assert_eq!(got.reason, StatusReason::Error);
        assert_eq!(
            got.message,
            "MachineDrainRule \"weird\" has unknown spec.drain.behavior: \"Evaporate\""
        );
    }

    #[test]
    fn drain_rules_select_machines_by_machine_and_cluster_labels() {
        let mut r = rule("r", "Skip", None);
        r.machines = vec![MachineSelectorEntry {
            selector: sel(&[("role", "worker")]),
            cluster_selector: sel(&[("env", "prod")]),
        }];
        let rules = [r];
        let hit = matching_drain_rules(
            rules.iter(),
            &labels(&[("role", "worker")]),
            &labels(&[("env", "prod")]),
        )
        .unwrap();
        assert_eq!(hit.len(), 1);
        let miss = matching_drain_rules(
            rules.iter(),
            &labels(&[("role", "worker")]),
            &labels(&[("env", "dev")]),
        )
        .unwrap();
        assert!(miss.is_empty());
    }

    #[test]
    fn an_invalid_selector_in_any_rule_fails_the_lookup() {
        let mut bad = rule("bad", "Drain", None);
        bad.pods = vec![PodSelectorEntry {
            selector: Some(LabelSelector {
                match_expressions: vec![SelectorRequirement {
                    key: "k".into(),
                    operator: SelectorOperator::In,
                    values: vec![],
                }],
                invalid: Some("values must be non-empty".into()),
                ..Default::default()
            }),
            namespace_selector: None,
        }];
        let rules = [rule("good", "Drain", None), bad];
        let err = matching_drain_rules(rules.iter(), &labels(&[]), &labels(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to get matching MachineDrainRules: invalid selectors in MachineDrainRule bad"
        );
    }
}
