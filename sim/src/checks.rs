//! What a run is judged by ([`Checks`]): the scenario's expectations and the invariants.

pub struct Checks {
    pub(crate) expect: crate::expect::Tracker,
    pub invariants: crate::invariants::Checker,
}
