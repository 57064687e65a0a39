//! When the pool deletes one of its Nodes on pool deletion (Part 1, decisions 9 and 10): the
//! first attempt is always made; failed attempts are retried for
//! [`NODE_DELETION_RETRY_WINDOW`] after the first one, and after that only while
//! `nodeDeletionTimeout` (counted from the pool's `deletionTimestamp`) has not passed.

pub use crate::node_deletion::{NODE_DELETION_RETRY_WINDOW, POOL_NODE_DELETION_RETRY_INTERVAL};
use crate::time::Timestamp;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeDeleteFacts {
    /// The Node already has a `deletionTimestamp`.
    pub node_deleting: bool,
    /// When the first attempt was queued.
    pub first_try: Option<Timestamp>,
    /// An attempt came back 2xx or 404.
    pub succeeded: bool,
    /// After a failed attempt: not before this.
    pub retry_not_before: Option<Timestamp>,
    pub timeout_passed: bool,
    pub now: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeDeleteStep {
    /// Issue (or re-issue) the deletion.
    Delete,
    /// A failed attempt is paced: try again at this time.
    WaitUntil(Timestamp),
    /// Deleted, or on its way out.
    Done,
    /// The timeout passed after the first real try: leave the Node.
    GiveUp,
}

pub fn node_delete_step(f: &NodeDeleteFacts) -> NodeDeleteStep {
    if f.succeeded || f.node_deleting {
        return NodeDeleteStep::Done;
    }
    let Some(first_try) = f.first_try else {
        // Decision 10: one real try, whatever the timeout says.
        return NodeDeleteStep::Delete;
    };
    let within_window = f.now < first_try + NODE_DELETION_RETRY_WINDOW;
    match (within_window || !f.timeout_passed, f.retry_not_before) {
        (false, _) => NodeDeleteStep::GiveUp,
        (true, Some(at)) if at > f.now => NodeDeleteStep::WaitUntil(at),
        // Retry due, or an attempt whose answer was lost (restart): issue again; an attempt
        // still in flight is deduplicated by the engine.
        (true, Some(_) | None) => NodeDeleteStep::Delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> NodeDeleteFacts {
        NodeDeleteFacts {
            node_deleting: false,
            first_try: None,
            succeeded: false,
            retry_not_before: None,
            timeout_passed: false,
            now: Timestamp(100_000),
        }
    }

    #[test]
    fn node_deletion_gets_one_real_try_even_after_the_timeout() {
        let f = NodeDeleteFacts {
            timeout_passed: true,
            ..facts()
        };
        assert_eq!(node_delete_step(&f), NodeDeleteStep::Delete);
    }

    #[test]
    fn failed_attempts_retry_within_the_window_then_stop_once_timed_out() {
        let failed = NodeDeleteFacts {
            first_try: Some(Timestamp(95_000)),
            retry_not_before: Some(Timestamp(101_000)),
            timeout_passed: true,
            ..facts()
        };
        assert_eq!(
            node_delete_step(&failed),
            NodeDeleteStep::WaitUntil(Timestamp(101_000))
        );
        let due = NodeDeleteFacts {
            now: Timestamp(101_000),
            ..failed
        };
        assert_eq!(node_delete_step(&due), NodeDeleteStep::Delete);
        let late = NodeDeleteFacts {
            now: Timestamp(105_000),
            ..failed
        };
        assert_eq!(node_delete_step(&late), NodeDeleteStep::GiveUp);
        let forever = NodeDeleteFacts {
            timeout_passed: false,
            ..late
        };
        assert_eq!(node_delete_step(&forever), NodeDeleteStep::Delete);
    }

    #[test]
    fn success_or_a_deleting_node_is_done() {
        for f in [
            NodeDeleteFacts {
                succeeded: true,
                first_try: Some(Timestamp(0)),
                ..facts()
            },
            NodeDeleteFacts {
                node_deleting: true,
                ..facts()
            },
        ] {
            assert_eq!(node_delete_step(&f), NodeDeleteStep::Done);
        }
    }
}
