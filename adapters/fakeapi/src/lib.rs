//! A fake Kubernetes API server over real HTTP serving the simulator's clusters ([`apiserver`]),
//! a scenario's world served by such servers ([`serve`]) and played in scaled real time
//! ([`play`]): what `lifecycle sim serve` and the tests over HTTP run the controller against.

#![deny(unsafe_code)]

pub use wallclock as clock;
pub mod apiserver;
pub mod play;
pub mod serve;
