//! Counts of the work whose amount per input must not grow with the fleet: MHC target
//! selections, and MHCs looked at to route a change. A test runs fleets of two sizes and
//! compares the counts per input (`sim/tests/fleet_scaling.rs`); a walk over every Machine of
//! a namespace, or over every MHC, shows up as counts that grow with the fleet.
//!
//! Why thread-local: the counts must exist in release builds too (the simulator's tests and
//! benchmarks) at the cost of an increment, and an engine runs on one thread, so a test
//! reading its own thread's counts sees only its own engines. They never change a decision.

use std::cell::Cell;

/// Work done on this thread since it started (never reset: compare two readings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCounts {
    /// Machines tested against an MHC's selection ([`crate::health::targets::select`]).
    pub selections: u64,
    /// MHCs looked at to find those a change concerns.
    pub mhcs_examined: u64,
}

impl WorkCounts {
    /// The work done between `earlier` and `self`.
    pub fn since(self, earlier: WorkCounts) -> WorkCounts {
        WorkCounts {
            selections: self.selections - earlier.selections,
            mhcs_examined: self.mhcs_examined - earlier.mhcs_examined,
        }
    }
}

thread_local! {
    static COUNTS: Cell<WorkCounts> = const {
        Cell::new(WorkCounts { selections: 0, mhcs_examined: 0 })
    };
}

/// This thread's counts so far.
pub fn counts() -> WorkCounts {
    COUNTS.with(Cell::get)
}

fn add(f: impl FnOnce(&mut WorkCounts)) {
    COUNTS.with(|c| {
        let mut counts = c.get();
        f(&mut counts);
        c.set(counts);
    });
}

pub(crate) fn selection() {
    add(|c| c.selections += 1);
}

pub(crate) fn mhcs_examined(n: usize) {
    add(|c| c.mhcs_examined += n as u64);
}
