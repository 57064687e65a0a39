//! The work per input must not grow with the fleet (issue 14 item 7): a generated fleet of
//! 100 Machines and one of 2 000 (10 per cluster, same churn rates) are run with the real
//! engine, and the MHC work each does per input is compared. A walk over every Machine of the
//! namespace per MHC evaluation, or over every MHC per routed change, makes the larger fleet's
//! counts per input grow with its size (20x here); work proportional to what changed keeps
//! them level.

use engine::time::Duration;
use engine::work::{WorkCounts, counts};
use sim::generate::{FleetSpec, fleet};

/// Work per input may differ by this factor between the two fleets (churn lands differently).
const PER_INPUT_GROWTH_MAX: f64 = 1.5;

struct PerInput {
    selections: f64,
    mhcs_examined: f64,
    inputs: u64,
}

fn run(clusters: usize) -> PerInput {
    let spec = FleetSpec {
        clusters,
        machines_per_cluster: 10,
        pods_per_node: 1,
        delete_fraction: 0.05,
        fail_fraction: 0.05,
        duration: Duration::from_mins(10),
        seed: 7,
    };
    let scenario = fleet(&spec);
    let options = sim::RunOptions {
        no_journal: true,
        ..Default::default()
    };
    let before = counts();
    let report = sim::run(&scenario, &options).expect("the fleet runs");
    let work: WorkCounts = counts().since(before);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let inputs = report.inputs.max(1);
    PerInput {
        selections: work.selections as f64 / inputs as f64,
        mhcs_examined: work.mhcs_examined as f64 / inputs as f64,
        inputs,
    }
}

#[test]
fn mhc_work_per_input_does_not_grow_with_the_fleet() {
    let small = run(10);
    let large = run(200);
    eprintln!(
        "per input: selections {:.2} / {:.2}, MHCs examined {:.2} / {:.2} (100 / 2000 Machines)",
        small.selections, large.selections, small.mhcs_examined, large.mhcs_examined
    );
    for (what, s, l) in [
        ("target selections", small.selections, large.selections),
        ("MHCs examined", small.mhcs_examined, large.mhcs_examined),
    ] {
        assert!(
            l <= s * PER_INPUT_GROWTH_MAX + 1.0,
            "{what} per input grew with the fleet: {s:.2} at 100 Machines ({} inputs), \
             {l:.2} at 2000 Machines ({} inputs)",
            small.inputs,
            large.inputs
        );
    }
}
