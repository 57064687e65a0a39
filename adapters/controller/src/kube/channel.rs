//! What the driver's tasks (watches, connectors, commands) send its loop, on one channel.

use engine::BATCH_INPUTS_MAX;
use engine::intake::Arrival;
use engine::model::Scope;
use kube::Client;

/// Messages to the adapter loop.
pub enum Event {
    /// A watch event or an answer, for the loop.
    Arrival(Arrival),
    /// A workload cluster's client is ready (the loop hears of it as `Arrival::Connected`).
    Connected { scope: Scope, client: Client },
    /// An input the driver's own readers made (CAPI's release changed), fed to the loop as
    /// it is: journaled, then applied.
    Input(engine::Input),
}

/// An [`Event`] on its way to the loop, with when it was sent (how long it waits is
/// `workqueue_queue_duration_seconds`).
pub struct Queued {
    pub(super) event: Event,
    pub(super) at: std::time::Instant,
}

impl From<Event> for Queued {
    fn from(event: Event) -> Self {
        Queued {
            event,
            at: std::time::Instant::now(),
        }
    }
}

/// Events waiting for the loop; a backlog is fed as one batch, so a full channel is one batch.
pub(super) const CHANNEL_CAPACITY: usize = BATCH_INPUTS_MAX;
