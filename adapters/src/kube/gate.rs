//! One cluster's admission, sans-IO: command slots (bounded commands in flight) and request
//! tokens (the [`TokenBucket`]), each handed to the most urgent waiter first, then in order of
//! asking. Time is passed in, as in [`TokenBucket`].
//!
//! Expected flow: `want_slot` / `want_start` / `want_token` queue a waiter (any handle `W`);
//! after every change (a new waiter, `release_slot`, `retry_after`, time passing) call
//! `poll_grant` until `None`, then wait until `token_wait` has passed or something changes.
//!
//! A command takes a slot, then a token for its first request ([`Gate::want_start`]): from
//! then on it is in flight. Closing the gate (shutting down) refuses both to every command not
//! in flight yet, while commands in flight still get tokens for their further requests.

use super::bucket::{RateLimit, TokenBucket};
pub use engine::runtime::Priority;
use std::collections::BTreeMap;
use std::time::Duration;

/// What `poll_grant` hands out.
#[derive(Debug, PartialEq, Eq)]
pub enum Grant<W> {
    /// A command may start (it holds the slot until `release_slot`).
    Slot(W),
    /// A request may be sent.
    Token(W),
}

pub struct Gate<W> {
    bucket: TokenBucket,
    slots_free: usize,
    /// No more slots once closed (shutting down): queued and later slot waiters are refused.
    closed: bool,
    slot_waiters: BTreeMap<(Priority, u64), W>,
    /// With whether the token starts a command.
    token_waiters: BTreeMap<(Priority, u64), (W, bool)>,
    asked: u64,
}

impl<W> Gate<W> {
    pub fn new(limit: RateLimit, slots: usize) -> Gate<W> {
        Gate {
            bucket: TokenBucket::new(limit),
            slots_free: slots.max(1),
            closed: false,
            slot_waiters: BTreeMap::new(),
            token_waiters: BTreeMap::new(),
            asked: 0,
        }
    }

    pub fn want_slot(&mut self, priority: Priority, waiter: W) {
        if self.closed {
            return;
        }
        self.asked += 1;
        self.slot_waiters.insert((priority, self.asked), waiter);
    }

    /// A token for a request (of a command in flight, a watch, a list).
    pub fn want_token(&mut self, priority: Priority, waiter: W) {
        self.asked += 1;
        self.token_waiters
            .insert((priority, self.asked), (waiter, false));
    }

    /// The token for a command's first request (refused once closed).
    pub fn want_start(&mut self, priority: Priority, waiter: W) {
        if self.closed {
            return;
        }
        self.asked += 1;
        self.token_waiters
            .insert((priority, self.asked), (waiter, true));
    }

    pub fn release_slot(&mut self) {
        self.slots_free += 1;
    }

    /// The server answered 429 with `Retry-After: wait`: no request before `now + wait`.
    pub fn retry_after(&mut self, now: Duration, wait: Duration) {
        self.bucket.hold_until(now + wait);
    }

    /// Refuses every queued and later command not in flight yet (those queued are returned,
    /// to be told); commands in flight still get tokens, to finish.
    pub fn close(&mut self) -> Vec<W> {
        self.closed = true;
        let mut refused: Vec<W> = std::mem::take(&mut self.slot_waiters)
            .into_values()
            .collect();
        let tokens = std::mem::take(&mut self.token_waiters);
        for (key, (waiter, starts)) in tokens {
            if starts {
                refused.push(waiter);
            } else {
                self.token_waiters.insert(key, (waiter, starts));
            }
        }
        refused
    }

    /// The next waiter that may go at `now`, most urgent first. Waiters that gave up (`gone`)
    /// are dropped as they come up, so that nothing is granted to nobody.
    pub fn poll_grant(&mut self, now: Duration, gone: impl Fn(&W) -> bool) -> Option<Grant<W>> {
        while let Some(entry) = self.slot_waiters.first_entry() {
            if gone(entry.get()) {
                entry.remove();
            } else if self.slots_free > 0 {
                self.slots_free -= 1;
                return Some(Grant::Slot(entry.remove()));
            } else {
                break;
            }
        }
        while let Some(entry) = self.token_waiters.first_entry() {
            if gone(&entry.get().0) {
                entry.remove();
                continue;
            }
            self.bucket.take(now).ok()?;
            return Some(Grant::Token(entry.remove().0));
        }
        None
    }

    /// How long until the first token waiter can go (`None`: nobody waits for a token).
    pub fn token_wait(&mut self, now: Duration) -> Option<Duration> {
        if self.token_waiters.is_empty() {
            return None;
        }
        // Probing a copy: asking must not spend a token.
        let mut probe = self.bucket.clone();
        Some(probe.take(now).err().unwrap_or_default())
    }

    pub fn waiting(&self) -> usize {
        self.slot_waiters.len() + self.token_waiters.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::{ConditionStatus, Conditions};
    use engine::shared::HEALTH_CHECK_SUCCEEDED;
    use engine::{Action, Command, ControllerId};

    const LIMIT: RateLimit = RateLimit {
        qps: 10.0,
        burst: 1,
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn drain(gate: &mut Gate<&'static str>, now: Duration) -> Vec<Grant<&'static str>> {
        std::iter::from_fn(|| gate.poll_grant(now, |_| false)).collect()
    }

    /// The proof (b), in the sans-IO unit: evictions queued for tokens, then a finalizer
    /// removal; the next token goes to the finalizer removal.
    #[test]
    fn a_finalizer_removal_overtakes_queued_evictions() {
        let mut gate = Gate::new(LIMIT, 32);
        for pod in ["evict-1", "evict-2", "evict-3"] {
            gate.want_token(Priority::Bulk, pod);
        }
        assert_eq!(drain(&mut gate, ms(0)), [Grant::Token("evict-1")]);
        gate.want_token(Priority::Unblocking, "remove-finalizer");
        gate.want_token(Priority::Normal, "watch");
        assert_eq!(drain(&mut gate, ms(50)), []);
        assert_eq!(gate.token_wait(ms(50)), Some(ms(50)));
        assert_eq!(
            drain(&mut gate, ms(100)),
            [Grant::Token("remove-finalizer")]
        );
        assert_eq!(drain(&mut gate, ms(200)), [Grant::Token("watch")]);
        assert_eq!(drain(&mut gate, ms(300)), [Grant::Token("evict-2")]);
        assert_eq!(drain(&mut gate, ms(400)), [Grant::Token("evict-3")]);
        assert_eq!(gate.token_wait(ms(400)), None);
    }

    fn set_condition(controller: ControllerId, healthy: ConditionStatus) -> Command {
        let key = engine::model::ObjectKey::new(
            engine::model::Scope::Management,
            engine::model::Kind::Machine,
            "default",
            "m1",
        );
        let condition = engine::model::Condition::new(HEALTH_CHECK_SUCCEEDED, healthy, "", "");
        Command {
            id: 1,
            cause: 0,
            controller,
            owner: key.clone(),
            action: Action::SetCondition {
                target: engine::Target {
                    key,
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                conditions: Conditions {
                    current: vec![condition],
                    legacy: Vec::new(),
                },
                summary: String::new(),
            },
            reason: String::new(),
            series: None,
        }
    }

    /// A fleet's first start has its health checks write a healthy verdict on every Machine; a
    /// deletion's writes go before them, an unhealthy verdict (remediation waits on it) with the
    /// deletion's status.
    #[test]
    fn a_health_checks_reports_wait_behind_a_deletions_writes_but_not_its_verdicts() {
        use ConditionStatus::{False, True};
        assert_eq!(
            Priority::of(&set_condition(ControllerId::Deletion, True)),
            Priority::Unblocking
        );
        assert_eq!(
            Priority::of(&set_condition(ControllerId::Health, True)),
            Priority::Bulk
        );
        assert_eq!(
            Priority::of(&set_condition(ControllerId::Health, False)),
            Priority::Unblocking
        );
        let mut gate = Gate::new(LIMIT, 32);
        gate.want_token(Priority::Unblocking, "first");
        assert_eq!(drain(&mut gate, ms(0)), [Grant::Token("first")]);
        for report in ["healthy-1", "healthy-2"] {
            gate.want_token(
                Priority::of(&set_condition(ControllerId::Health, True)),
                report,
            );
        }
        let phase = set_condition(ControllerId::Deletion, True);
        let mut infrastructure = phase.clone();
        infrastructure.action = Action::DeleteInfrastructure {
            target: engine::Target {
                key: phase.owner.clone(),
                api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
            },
        };
        gate.want_token(Priority::of(&infrastructure), "delete-infrastructure");
        gate.want_token(Priority::of(&phase), "deleting-phase");
        assert_eq!(drain(&mut gate, ms(100)), [Grant::Token("deleting-phase")]);
        assert_eq!(
            drain(&mut gate, ms(200)),
            [Grant::Token("delete-infrastructure")]
        );
        assert_eq!(drain(&mut gate, ms(300)), [Grant::Token("healthy-1")]);
    }

    #[test]
    fn slots_bound_commands_in_flight_and_go_to_the_most_urgent_first() {
        let mut gate = Gate::new(RateLimit { qps: 1.0, burst: 1 }, 2);
        gate.want_slot(Priority::Bulk, "evict-1");
        gate.want_slot(Priority::Bulk, "evict-2");
        gate.want_slot(Priority::Bulk, "evict-3");
        gate.want_slot(Priority::Unblocking, "status");
        assert_eq!(
            drain(&mut gate, ms(0)),
            [Grant::Slot("status"), Grant::Slot("evict-1")]
        );
        gate.release_slot();
        assert_eq!(drain(&mut gate, ms(0)), [Grant::Slot("evict-2")]);
        assert_eq!(gate.waiting(), 1);
    }

    #[test]
    fn closing_refuses_commands_not_in_flight_but_those_in_flight_finish() {
        let mut gate = Gate::new(LIMIT, 2);
        gate.want_slot(Priority::Normal, "in flight");
        gate.want_slot(Priority::Normal, "has a slot");
        assert_eq!(
            drain(&mut gate, ms(0)),
            [Grant::Slot("in flight"), Grant::Slot("has a slot")]
        );
        gate.want_start(Priority::Normal, "in flight");
        assert_eq!(drain(&mut gate, ms(0)), [Grant::Token("in flight")]);
        gate.want_start(Priority::Normal, "has a slot");
        gate.want_slot(Priority::Normal, "queued");
        assert_eq!(gate.close(), ["queued", "has a slot"]);
        gate.release_slot();
        gate.want_slot(Priority::Unblocking, "late");
        gate.want_start(Priority::Unblocking, "late");
        gate.want_token(Priority::Normal, "in flight's second request");
        assert_eq!(
            drain(&mut gate, ms(100)),
            [Grant::Token("in flight's second request")]
        );
        assert_eq!(gate.waiting(), 0);
    }

    #[test]
    fn retry_after_holds_the_cluster_and_waiters_that_gave_up_get_nothing() {
        let mut gate = Gate::new(
            RateLimit {
                qps: 100.0,
                burst: 5,
            },
            4,
        );
        gate.retry_after(ms(0), ms(1000));
        gate.want_token(Priority::Unblocking, "gave up");
        gate.want_token(Priority::Normal, "patient");
        assert_eq!(drain(&mut gate, ms(999)), []);
        assert_eq!(gate.token_wait(ms(999)), Some(ms(1)));
        let grant = gate.poll_grant(ms(1000), |w| *w == "gave up");
        assert_eq!(grant, Some(Grant::Token("patient")));
        assert_eq!(gate.waiting(), 0);
    }
}
