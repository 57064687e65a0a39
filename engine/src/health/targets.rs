//! Which Machines an MHC looks at (`engine/docs/capi.md` §2.1 step 4, decision 7).

use crate::model::{
    CLUSTER_NAME_LABEL, Machine, MachineHealthCheck, PAUSED_ANNOTATION, SKIP_REMEDIATION_ANNOTATION,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    Target,
    /// Outside the MHC's namespace, cluster or selector.
    NotSelected,
    /// Selected but excluded entirely (not counted in `expectedMachines`), with why.
    Skipped(&'static str),
}

/// Whether `machine` is a target of `mhc`: same namespace, `selector` plus
/// `cluster.x-k8s.io/cluster-name=<clusterName>`, and neither skip-remediation nor paused.
pub fn select(mhc: &MachineHealthCheck, machine: &Machine) -> Selection {
    crate::work::selection();
    if machine.meta.namespace != mhc.meta.namespace
        || machine.meta.labels.get(CLUSTER_NAME_LABEL) != Some(&mhc.cluster_name)
        || selector_problem(mhc).is_some()
        || !mhc.selector.matches(&machine.meta.labels)
    {
        return Selection::NotSelected;
    }
    if machine.meta.has_annotation(SKIP_REMEDIATION_ANNOTATION) {
        return Selection::Skipped(
            "the Machine has the cluster.x-k8s.io/skip-remediation annotation",
        );
    }
    if machine.meta.has_annotation(PAUSED_ANNOTATION) {
        return Selection::Skipped("the Machine has the cluster.x-k8s.io/paused annotation");
    }
    Selection::Target
}

/// Why the selector cannot select anything (upstream's webhook rejects both cases).
pub fn selector_problem(mhc: &MachineHealthCheck) -> Option<String> {
    if let Some(why) = &mhc.selector.invalid {
        return Some(why.clone());
    }
    if mhc.selector.is_empty() {
        return Some("selector must not be empty".to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    /// Mirrors upstream's `TestGetTargetsFromMHC` / `TestMachineToMachineHealthCheck` cases.
    #[test]
    fn target_selection_table() {
        let mut mhc = testing::machine_health_check("c1", "mhc");
        mhc.selector
            .match_labels
            .insert("role".into(), "worker".into());
        let selected = || {
            let mut m = testing::machine("c1", "m1", Some("n1"));
            m.meta.labels.insert("role".into(), "worker".into());
            m
        };
        let other_cluster = {
            let mut m = selected();
            m.meta.labels.insert(CLUSTER_NAME_LABEL.into(), "c2".into());
            m
        };
        let other_namespace = {
            let mut m = selected();
            m.meta.namespace = "other".into();
            m
        };
        let other_labels = {
            let mut m = selected();
            m.meta.labels.remove("role");
            m
        };
        let skip = {
            let mut m = selected();
            m.meta
                .annotations
                .insert(SKIP_REMEDIATION_ANNOTATION.into(), String::new());
            m
        };
        let paused = {
            let mut m = selected();
            m.meta
                .annotations
                .insert(PAUSED_ANNOTATION.into(), String::new());
            m
        };
        assert_eq!(select(&mhc, &selected()), Selection::Target);
        assert_eq!(select(&mhc, &other_cluster), Selection::NotSelected);
        assert_eq!(select(&mhc, &other_namespace), Selection::NotSelected);
        assert_eq!(select(&mhc, &other_labels), Selection::NotSelected);
        assert!(matches!(select(&mhc, &skip), Selection::Skipped(_)));
        assert!(matches!(select(&mhc, &paused), Selection::Skipped(_)));
    }

    #[test]
    fn invalid_or_empty_selector_selects_nothing() {
        let m = testing::machine("c1", "m1", Some("n1"));
        let mut mhc = testing::machine_health_check("c1", "mhc");
        mhc.selector = Default::default();
        assert_eq!(select(&mhc, &m), Selection::NotSelected);
        assert_eq!(
            selector_problem(&mhc).as_deref(),
            Some("selector must not be empty")
        );
        mhc.selector.invalid = Some("bad operator \"Foo\"".into());
        assert_eq!(select(&mhc, &m), Selection::NotSelected);
    }
}
