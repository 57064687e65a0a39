//! Simulated time ([`Clock`]): the scenario's span, the current instant, the events scheduled
//! after it in order, and the work one instant produces.

use crate::event::{Event, Work};
use engine::time::{Duration, Timestamp};
use std::collections::{BTreeMap, VecDeque};

pub struct Clock {
    pub start: Timestamp,
    pub now: Timestamp,
    pub end: Timestamp,
    /// Events by `(due, sequence)`: equal times keep the order they were scheduled in.
    queue: BTreeMap<(Timestamp, u64), Event>,
    scheduled: u64,
    /// Work produced at this instant, handled in order.
    pub(crate) work: VecDeque<Work>,
}

impl Clock {
    pub fn new(start: Timestamp, end: Timestamp) -> Self {
        Clock {
            start,
            now: start,
            end,
            queue: BTreeMap::new(),
            scheduled: 0,
            work: VecDeque::new(),
        }
    }

    pub fn schedule(&mut self, at: Timestamp, event: Event) {
        self.scheduled += 1;
        self.queue.insert((at, self.scheduled), event);
    }

    pub fn schedule_in(&mut self, after: Duration, event: Event) {
        self.schedule(self.now + after, event);
    }

    /// When the next scheduled event is due.
    pub fn next_at(&self) -> Option<Timestamp> {
        self.queue.keys().next().map(|(t, _)| *t)
    }

    /// Takes the next event due at or before `until`, and moves the clock to its time.
    pub fn advance(&mut self, until: Timestamp) -> Option<Event> {
        let (&(at, seq), _) = self.queue.first_key_value()?;
        if at > until {
            return None;
        }
        self.now = at;
        self.queue.remove(&(at, seq))
    }

    /// Whether another event is due at this instant.
    pub fn more_now(&self) -> bool {
        self.next_at() == Some(self.now)
    }

    /// Whether `matches` holds for an event already scheduled at `at`.
    pub fn has_at(&self, at: Timestamp, matches: impl Fn(&Event) -> bool) -> bool {
        self.queue
            .range((at, 0)..=(at, u64::MAX))
            .any(|(_, e)| matches(e))
    }

    /// How far into the scenario `t` is.
    pub fn offset_of(&self, t: Timestamp) -> Duration {
        t.since(self.start)
    }
}
