//! Shadow mode beside the CAPI model (`capiManager: true`) on every deletion and
//! MachineHealthCheck scenario: every disagreement found is a known deviation (a product
//! decision that differs from upstream on purpose), never a surprise. A surprise here is a
//! difference between this product's decisions and upstream's that nobody chose, or a gap in
//! the model of upstream.

use std::path::Path;

/// The scenario's timeline lines of `actor`, run in shadow mode beside the CAPI model:
/// `(milliseconds, action, object, detail)`.
fn lines_of(stem: &str, actor: &str) -> Vec<(i64, String, String, String)> {
    all_lines(stem)
        .into_iter()
        .filter(|(a, ..)| a == actor)
        .map(|(_, at, action, object, detail)| (at, action, object, detail))
        .collect()
}

/// A timeline line: `(actor, milliseconds, action, object, detail)`.
type Line = (String, i64, String, String, String);

/// Every timeline line of the scenario run in shadow beside the CAPI model.
fn all_lines(stem: &str) -> Vec<Line> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/{stem}.yaml"));
    let text = std::fs::read_to_string(&path).expect("readable scenario");
    let mut scenario = sim::scenario::parse(stem, &text).unwrap_or_else(|e| panic!("{e}"));
    scenario.mode = engine::runtime::Mode::Shadow;
    scenario.world.capi_manager = true;
    let report = sim::run(&scenario, &sim::RunOptions::default()).expect("run");
    report
        .timeline
        .lines
        .iter()
        .map(|l| {
            (
                l.actor.clone(),
                l.at_ms,
                l.action.clone(),
                l.object.clone(),
                l.detail.clone(),
            )
        })
        .collect()
}

/// The scenario's disagreement lines in shadow mode beside the CAPI model.
fn disagreements(stem: &str) -> Vec<String> {
    lines_of(stem, "shadow")
        .into_iter()
        .map(|(_, _, object, detail)| format!("{stem}: {object} {detail}"))
        .collect()
}

/// CAPI's drain, as the model plays it, leaves pods labelled `cluster.x-k8s.io/drain: skip` or
/// `wait-completed` alone and evicts a MachineDrainRule's later order only once the earlier
/// pods are gone: the same as this controller, so these scenarios show no disagreement for
/// the right reason (a model that evicted them would be agreed with by the comparator, which
/// counts another party's eviction on a Node this controller drains as its own).
#[test]
fn the_capi_model_drains_by_the_drain_label_and_machine_drain_rules() {
    let evictions = |stem: &str| -> Vec<(i64, String)> {
        lines_of(stem, "capi")
            .into_iter()
            .filter(|(_, action, _, _)| action == "Evict")
            .map(|(at, _, object, _)| (at, object))
            .collect()
    };
    let labelled = evictions("deletion-drain-labels");
    assert!(
        labelled
            .iter()
            .all(|(_, pod)| !pod.contains("cache-0") && !pod.contains("job-0")),
        "{labelled:?}"
    );
    let ordered = evictions("deletion-drain-rule-order");
    let pods: Vec<&str> = ordered.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(pods, ["Pod app/web-0@c1", "Pod app/db-0@c1"], "{ordered:?}");
    assert!(
        ordered[1].0 >= ordered[0].0 + 20_000,
        "the database waits for the web pods and the next drain pass: {ordered:?}"
    );
}

/// Every disagreement found is tagged with the product decision that explains it.
fn assert_no_surprise(found: &[String]) {
    let surprises: Vec<&str> = found
        .iter()
        .filter(|l| !l.contains("(known deviation, decision "))
        .map(String::as_str)
        .collect();
    assert!(
        surprises.is_empty(),
        "{} disagreement(s) no product decision explains:\n{}",
        surprises.len(),
        surprises.join("\n")
    );
}

fn scenarios(prefixes: &[&str]) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut stems: Vec<String> = std::fs::read_dir(&dir)
        .expect("scenarios/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter_map(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
        .filter(|s| prefixes.iter().any(|p| s.starts_with(p)))
        .collect();
    stems.sort();
    stems
}

#[test]
fn every_deletion_and_health_scenario_in_shadow_has_no_surprise() {
    let stems = scenarios(&["deletion-", "mhc-", "pre-drain-hook"]);
    assert!(stems.len() > 30, "found only {} scenarios", stems.len());
    let lines: Vec<(String, Vec<Line>)> = stems.iter().map(|s| (s.clone(), all_lines(s))).collect();
    let found: Vec<String> = lines
        .iter()
        .flat_map(|(stem, lines)| {
            lines
                .iter()
                .filter(|(actor, ..)| actor == "shadow")
                .map(move |(_, _, _, object, detail)| format!("{stem}: {object} {detail}"))
        })
        .collect();
    assert_no_surprise(&found);
    // CAPI's MachineSet remediates (deletes) unhealthy Machines in these scenarios, and the
    // comparator agrees with each: no DeleteUnhealthy disagreement at all.
    let remediations: Vec<String> = lines
        .iter()
        .flat_map(|(stem, lines)| {
            lines
                .iter()
                .filter(|(actor, _, action, _, detail)| {
                    actor == "capi" && action == "DeleteMachine" && detail.contains("remediates")
                })
                .map(move |(_, _, _, object, _)| format!("{stem}: {object}"))
        })
        .collect();
    assert!(remediations.len() >= 10, "{remediations:#?}");
    assert!(
        found.iter().all(|l| !l.contains("DeleteUnhealthy")),
        "{found:#?}"
    );
    // Decision 3 (a failed Machine is unhealthy at once) shows as what it is: this controller
    // marks it, asks its remediation and counts it unhealthy; upstream does none of these.
    let failure: Vec<&String> = found
        .iter()
        .filter(|l| l.starts_with("mhc-machine-failure-reason: "))
        .collect();
    assert_eq!(failure.len(), 3, "{failure:#?}");
    assert!(failure.iter().all(|l| l.contains("decision 3")));
    for step in [
        "MarkUnhealthy Machine default/w2",
        "RequestRemediation Machine default/w2",
        "StatusCounts MachineHealthCheck default/md-0-unhealthy",
    ] {
        assert!(
            failure.iter().any(|l| l.contains(step)),
            "{step}: {failure:#?}"
        );
    }
    // Decision 14 (an invalid timeout is an invalid spec): this controller's counts allow no
    // remediation where upstream, ignoring the value, allows one.
    let invalid: Vec<&String> = found
        .iter()
        .filter(|l| l.starts_with("mhc-invalid-timeouts: "))
        .collect();
    assert!(!invalid.is_empty());
    assert!(
        invalid
            .iter()
            .all(|l| l.contains("StatusCounts") && l.contains("decision 14")),
        "{invalid:#?}"
    );
}

/// Every MachinePool scenario in shadow beside the CAPI model's MachinePool controller: the
/// status this controller would write (replicas, ready, available and up-to-date counts,
/// nodeRefs, phase) is what upstream writes, or a known deviation.
#[test]
fn every_pool_scenario_in_shadow_has_no_surprise() {
    let stems = scenarios(&["pool-"]);
    assert!(stems.len() >= 10, "found only {} scenarios", stems.len());
    let found: Vec<String> = stems.iter().flat_map(|s| disagreements(s)).collect();
    assert_no_surprise(&found);
    // Decision 5 (a failed provider makes the pool Failed for good) and decision 16 (a pool
    // follows its Machines) are what they are; nothing else differs.
    for (stem, decision) in [
        ("pool-infrastructure-failure-is-terminal", "decision 5"),
        ("pool-machines-drained-on-scale-down", "decision 16"),
    ] {
        let lines: Vec<&String> = found
            .iter()
            .filter(|l| l.starts_with(&format!("{stem}: ")))
            .collect();
        assert!(
            !lines.is_empty() && lines.iter().all(|l| l.contains("PoolStatus MachinePool")),
            "{stem}: {lines:#?}"
        );
        assert!(lines.iter().all(|l| l.contains(decision)), "{lines:#?}");
    }
    assert_eq!(found.len(), 2, "{found:#?}");
}

/// Every `shadow-*` scenario (shadow beside the CAPI model by design) has no surprise; one
/// started mid-deletion has no disagreement at all: the steps CAPI took before the controller
/// looked (the infrastructure already deleting) are not reported as CAPI's alone.
#[test]
fn shadow_scenarios_have_no_surprise_and_steps_before_the_start_are_nobodys() {
    let stems = scenarios(&["shadow-"]);
    assert!(stems.len() >= 4, "found only {} scenarios", stems.len());
    let found: Vec<String> = stems.iter().flat_map(|s| disagreements(s)).collect();
    assert_no_surprise(&found);
    let mid = disagreements("shadow-started-mid-deletion");
    assert_eq!(mid, Vec::<String>::new());
    let capi: Vec<String> = lines_of("shadow-started-mid-deletion", "capi")
        .into_iter()
        .map(|(_, action, object, _)| format!("{action} {object}"))
        .filter(|l| !l.starts_with("SetCondition"))
        .collect();
    assert_eq!(
        capi,
        [
            "DeleteBootstrap KubeadmConfig default/md-0-abc-r1",
            "DeleteNode Node n1@c1",
            "RemoveFinalizer Machine default/md-0-abc-r1"
        ],
        "CAPI finishes the deletion it started"
    );
}
