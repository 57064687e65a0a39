//! Pre- and postconditions of [`Engine::handle`], checked in debug builds (tests, the
//! simulator): what handling an input assumes is checked again once it is handled.

use super::Engine;
use crate::time::Timestamp;

/// What a postcondition compares with.
pub(super) struct Before {
    pub(super) applied_seq: u64,
    pub(super) now: Timestamp,
}

impl Engine {
    pub(super) fn check_preconditions(&self) -> Before {
        debug_assert!(
            self.applied_seq < u64::MAX,
            "input sequence numbers exhausted"
        );
        // The message repeats the check: it is built only when the check has failed.
        debug_assert!(
            self.effects.violation().is_none(),
            "before input #{}: {}",
            self.applied_seq + 1,
            self.effects.violation().unwrap_or_default()
        );
        Before {
            applied_seq: self.applied_seq,
            now: self.now,
        }
    }

    pub(super) fn check_postconditions(&self, before: &Before, after_tick: bool) {
        debug_assert!(
            self.violation(before, after_tick).is_none(),
            "after input #{}: {}",
            self.applied_seq,
            self.violation(before, after_tick).unwrap_or_default()
        );
    }

    /// The first broken postcondition, if any: one more input applied, time not gone back,
    /// commands in flight consistent, and after a Tick nothing due left waiting (a deadline
    /// at or before now would have the caller Tick again at once, for ever) unless a pass
    /// carried keys over.
    pub(super) fn violation(&self, before: &Before, after_tick: bool) -> Option<String> {
        if self.applied_seq != before.applied_seq + 1 || self.now < before.now {
            return Some(format!(
                "input #{} at {:?} after #{} at {:?}",
                self.applied_seq, self.now, before.applied_seq, before.now
            ));
        }
        if let Some(v) = self.effects.violation() {
            return Some(v);
        }
        let carrying = self.carried.iter().any(|keys| !keys.is_empty());
        if after_tick
            && !carrying
            && let Some(due) = self.next_deadline().filter(|at| *at <= self.now)
        {
            let mut holders: Vec<String> = self
                .controllers
                .all()
                .iter()
                .filter(|c| c.next_deadline().is_some_and(|at| at <= self.now))
                .map(|c| c.id().as_str().to_string())
                .collect();
            if self.effects.next_retry().is_some_and(|at| at <= self.now) {
                holders.push("write retries".to_string());
            }
            return Some(format!(
                "a deadline at {due:?} is still due at {:?} (held by {})",
                self.now,
                holders.join(", ")
            ));
        }
        None
    }
}
