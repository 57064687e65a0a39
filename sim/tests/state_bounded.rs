//! The engine's state stays bounded however long it runs (issue 44 item 6): the soak's
//! churning world (`sim::generate::churn`: a Machine created and one deleted every 2 minutes, a
//! worker remediated and replaced every 10, two Nodes flapping), with API errors and conflicts
//! besides, played for 12 simulated hours. Every map and list of the engine's state (its
//! census) and its encoded size must be no larger in the last hour than in the third, but for
//! the churn's phase: whatever the state keeps of an object that is gone shows as a count that
//! grows with every hour.

use engine::Engine;
use engine::census::Census;
use engine::time::Duration;
use sim::scenario::{FaultKind, FaultSpec, Step, StepAction};
use std::collections::BTreeMap;

const HOUR_MINUTES: i64 = 60;
/// The warm-up ends with this hour (`N`); the run with hour `4N`.
const WARM_UP_HOURS: i64 = 3;
const END_HOURS: i64 = 4 * WARM_UP_HOURS;
const SAMPLE_EVERY_MINUTES: i64 = 10;
/// Entries a map may hold beyond its most in the warm-up's last hour: what is alive at one
/// moment of the churn and not at another (a deletion in flight, a tombstone in its window).
const ENTRIES_SLACK: usize = 4;
/// The encoded state may be this much larger (longer generated names: `churn-99`, then
/// `churn-100`).
const BYTES_GROWTH_MAX: f64 = 1.10;

/// The most each census path and the encoded state held over one hour's samples.
#[derive(Default)]
struct Peak {
    entries: BTreeMap<String, usize>,
    bytes: usize,
}

impl Peak {
    fn sample(&mut self, engine: &Engine) {
        for (path, n) in Census::of(engine).0 {
            let most = self.entries.entry(path).or_default();
            *most = (*most).max(n);
        }
        self.bytes = self.bytes.max(engine.encode_state().len());
    }

    fn entries(&self, path: &str) -> usize {
        self.entries.get(path).copied().unwrap_or(0)
    }
}

/// The churn with 10 % of the calls to each cluster failing and 10 % of the updates conflicting.
fn churn_with_api_faults() -> sim::scenario::Scenario {
    let mut scenario = sim::generate::churn(Duration::from_mins((END_HOURS + 1) * HOUR_MINUTES));
    let faults = [FaultKind::ApiErrors, FaultKind::Conflicts];
    for cluster in [None, Some("c1".to_string())] {
        for kind in faults {
            let fault = FaultSpec {
                kind,
                rate: Some(0.1),
                for_: Some(scenario.duration),
                extra: BTreeMap::new(),
            };
            scenario.timeline.insert(
                0,
                Step {
                    at: Duration::ZERO,
                    line: 0,
                    cluster: cluster.clone(),
                    action: StepAction::Fault(fault),
                },
            );
        }
    }
    scenario
}

#[test]
fn the_engine_state_stays_bounded_while_the_world_churns_for_12_hours() {
    let mut sim = sim::sim::Sim::new(churn_with_api_faults(), 0, sim::feed::Feeder::new(None));
    sim.setup();
    let (mut warm, mut end) = (Peak::default(), Peak::default());
    for minute in
        (SAMPLE_EVERY_MINUTES..=END_HOURS * HOUR_MINUTES).step_by(SAMPLE_EVERY_MINUTES as usize)
    {
        sim.run_to(Duration::from_mins(minute));
        let hour = (minute - 1) / HOUR_MINUTES + 1;
        if hour == WARM_UP_HOURS {
            warm.sample(sim.engine());
        } else if hour == END_HOURS {
            end.sample(sim.engine());
        }
    }
    let released = sim
        .timeline
        .actions
        .iter()
        .filter(|a| a.name == "RemoveFinalizer")
        .count();
    assert!(
        released as i64 >= 30 * END_HOURS,
        "the world churned: {released} Machines released in {END_HOURS} hours"
    );

    let grown: Vec<String> = end
        .entries
        .iter()
        .filter(|(path, n)| **n > warm.entries(path) + ENTRIES_SLACK)
        .map(|(path, n)| format!("{path}: {} -> {n}", warm.entries(path)))
        .collect();
    assert!(
        grown.is_empty(),
        "maps of the engine's state grew from hour {WARM_UP_HOURS} to hour {END_HOURS} \
         (most entries in each): {grown:#?}"
    );
    assert!(
        end.bytes as f64 <= warm.bytes as f64 * BYTES_GROWTH_MAX,
        "the encoded state grew from {} bytes at hour {WARM_UP_HOURS} to {} at hour {END_HOURS}",
        warm.bytes,
        end.bytes
    );
    eprintln!(
        "encoded state: {} bytes at hour {WARM_UP_HOURS}, {} at hour {END_HOURS}",
        warm.bytes, end.bytes
    );
}
