//! Issue 44, item 8, played in process: the drain of
//! `faults-restarts-mid-drain-status-converges` ends as its last six pods go, each a condition
//! write; with `reordered-delivery` around that moment (a seed whose draws do it) the last
//! pod's watch event is read while the write for the one before it is still out, so the pass
//! that finds the drain over holds its condition write back, and has chosen the pre-terminate
//! hooks' start, which makes every later pass skip the drain. Its `DrainingSucceeded=True` and
//! `VolumeDetachSucceeded=True` must still reach the Machine (the expectations at 7m, and the
//! status convergence invariant).

use engine::time::Duration;
use sim::scenario::{FaultKind, FaultSpec, Scenario, Step, StepAction};

const FILE: &str = "faults-restarts-mid-drain-status-converges";
/// A seed whose delivery draws hold the drain's last condition write back (found with the
/// fix taken out: this seed then fails).
const SEED: u64 = 0;

fn with_reordering_at_the_drains_end() -> Scenario {
    let path = format!("{}/../scenarios/{FILE}.yaml", env!("CARGO_MANIFEST_DIR"));
    let mut scenario = sim::scenario::load(std::path::Path::new(&path)).expect("loads");
    scenario.timeline.push(Step {
        at: Duration::from_secs(5 * 60 + 5),
        line: 0,
        cluster: None,
        action: StepAction::Fault(FaultSpec {
            kind: FaultKind::ReorderedDelivery,
            rate: None,
            for_: Some(Duration::from_secs(30)),
            extra: Default::default(),
        }),
    });
    scenario.timeline.sort_by_key(|s| s.at);
    scenario
}

/// The journal sequence number a timeline line names as its cause (`[after #N: ...]`).
fn cause(line: &str) -> Option<&str> {
    let (_, after) = line.split_once("[after #")?;
    after.split_once(':').map(|(n, _)| n)
}

#[test]
fn a_drains_success_decided_while_a_condition_write_is_out_reaches_the_machine() {
    let scenario = with_reordering_at_the_drains_end();
    let options = sim::RunOptions {
        seed: Some(SEED),
        ..Default::default()
    };
    let report = sim::run(&scenario, &options).expect("runs");
    let text = report.timeline.render_text();
    assert!(
        report.passed(),
        "{text}{}",
        report.render_verdict(&scenario.file)
    );
    // The interleaving happened: the pass that found the drain over (its event) did not write
    // the conditions; a later pass did.
    let drained = text.lines().find(|l| l.contains("SuccessfulDrainNode"));
    let written = text
        .lines()
        .find(|l| l.contains("SetCondition") && l.contains("DrainingSucceeded=True"));
    assert_ne!(
        drained.and_then(cause),
        written.and_then(cause),
        "the seed no longer holds the drain's condition write back:\n{text}"
    );
    let again = sim::run(&scenario, &options).expect("runs");
    assert_eq!(
        text,
        again.timeline.render_text(),
        "same seed, same timeline"
    );
}
