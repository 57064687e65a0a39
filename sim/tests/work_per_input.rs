//! A guard on the simulator's and the engine's work per input, run in CI. Wall time does not
//! carry between machines; heap allocations do (the same seed allocates the same way), and
//! they are about a quarter of a run's time. Two fleets of the same shape, one five times the
//! other, run without a journal (its flusher threads allocate on their own clock):
//!
//! * the allocations per input stay within [`ALLOCATIONS_PER_INPUT_MAX`]: a change that
//!   makes each input cost more fails here, and raising the bound is a reviewed change with
//!   its A/B in BENCHMARKS.md;
//! * the larger fleet costs no more per input than the smaller one, within 10 %: work that
//!   grows with the fleet fails here long before it shows in a benchmark. Planted in
//!   `Engine::handle`, one allocation per five stored objects per input fails it; a scan that
//!   allocates nothing does not show here.

use engine::time::Duration;
use sim::generate::{FleetSpec, fleet};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts every allocation of the process (this file holds one test, so nothing else runs).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Measured (10 clusters: 512 per input of 369; 50 clusters: 486 of 2 244; 536 and 507 before
/// paths were split by a byte scan and a path's members found without allocating their names;
/// 594 and 560 before keys shared their group, kind and namespace). The count of
/// inputs fell by 38 % when the watch events of objects the cache already holds at their
/// version stopped being journaled, the allocations by 6 % (219 186 against 232 830 at 10
/// clusters): the same work per run is spread over fewer inputs. Before that, 390 and 376
/// per input; 409 and 394 before a command's request was built once; 593 and 575 before
/// patches were made in place, condition patches without json!'s copies and the MHC
/// differential lent its readings; 906 and 868 before the fake API shared its stored JSON
/// instead of copying it and the loop stopped copying each input, 1 033 and 986 before field
/// paths and key namespaces stopped allocating. The bound leaves headroom for noise between
/// compilers, not for new work.
const ALLOCATIONS_PER_INPUT_MAX: u64 = 590;

/// Allocations per input of a fleet of `clusters` clusters of 10 Machines, 20 simulated
/// minutes, its generation not counted.
fn per_input(clusters: usize) -> (u64, u64) {
    let scenario = fleet(&FleetSpec {
        clusters,
        machines_per_cluster: 10,
        pods_per_node: 2,
        delete_fraction: 0.05,
        fail_fraction: 0.05,
        duration: Duration::from_mins(20),
        seed: 1,
    });
    let options = sim::RunOptions {
        no_journal: true,
        ..Default::default()
    };
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let report = sim::run_owned(scenario, &options).expect("the fleet runs");
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(report.inputs > 0);
    (allocations / report.inputs, report.inputs)
}

#[test]
fn work_per_input_stays_bounded_and_does_not_grow_with_the_fleet() {
    let (small, small_inputs) = per_input(10);
    let (large, large_inputs) = per_input(50);
    eprintln!(
        "allocations per input: {small} ({small_inputs} inputs), {large} ({large_inputs} inputs)"
    );
    assert!(
        large_inputs > 4 * small_inputs,
        "the larger fleet has more to do"
    );
    for (clusters, per) in [(10, small), (50, large)] {
        assert!(
            per <= ALLOCATIONS_PER_INPUT_MAX,
            "{clusters} clusters: {per} allocations per input, more than {ALLOCATIONS_PER_INPUT_MAX}"
        );
    }
    assert!(
        large * 10 <= small * 11,
        "per input, 5x the fleet costs {large} allocations against {small}: work grows with the fleet"
    );
}
