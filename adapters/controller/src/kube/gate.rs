//! One cluster's request tokens, sans-IO: the [`TokenBucket`], handed to the most urgent waiter
//! first, then in order of asking. Time is passed in, as in [`TokenBucket`]. (How many
//! commands are in flight at once is the loop's: `engine::runtime`.)
//!
//! Expected flow: `want_start` / `want_token` queue a waiter (any handle `W`); after every
//! change (a new waiter, `retry_after`, time passing) call `poll_grant` until `None`, then wait
//! until `token_wait` has passed or something changes.
//!
//! A command takes a token for its first request ([`Gate::want_start`]): from then on it is in
//! flight. Closing the gate (shutting down) refuses that token to every command not in flight
//! yet, while commands in flight still get tokens for their further requests.

use super::bucket::{RateLimit, TokenBucket};
pub use engine::runtime::Priority;
use std::collections::BTreeMap;
use std::time::Duration;

pub struct Gate<W> {
    bucket: TokenBucket,
    /// No command starts once closed (shutting down).
    closed: bool,
    /// With whether the token starts a command.
    token_waiters: BTreeMap<(Priority, u64), (W, bool)>,
    asked: u64,
}

impl<W> Gate<W> {
    pub fn new(limit: RateLimit) -> Gate<W> {
        Gate {
            bucket: TokenBucket::new(limit),
            closed: false,
            token_waiters: BTreeMap::new(),
            asked: 0,
        }
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

    /// The server answered 429 with `Retry-After: wait`: no request before `now + wait`.
    pub fn retry_after(&mut self, now: Duration, wait: Duration) {
        self.bucket.hold_until(now + wait);
    }

    /// Refuses every queued and later command not in flight yet (those queued are returned,
    /// to be told); commands in flight still get tokens, to finish.
    pub fn close(&mut self) -> Vec<W> {
        self.closed = true;
        let mut refused = Vec::new();
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

    /// The next waiter that may send a request at `now`, most urgent first. Waiters that gave
    /// up (`gone`) are dropped as they come up, so that nothing is granted to nobody.
    pub fn poll_grant(&mut self, now: Duration, gone: impl Fn(&W) -> bool) -> Option<W> {
        while let Some(entry) = self.token_waiters.first_entry() {
            if gone(&entry.get().0) {
                entry.remove();
                continue;
            }
            self.bucket.take(now).ok()?;
            return Some(entry.remove().0);
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
        self.token_waiters.len()
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

    fn drain(gate: &mut Gate<&'static str>, now: Duration) -> Vec<&'static str> {
        std::iter::from_fn(|| gate.poll_grant(now, |_| false)).collect()
    }

    /// The proof (b), in the sans-IO unit: evictions queued for tokens, then a finalizer
    /// removal; the next token goes to the finalizer removal.
    #[test]
    fn a_finalizer_removal_overtakes_queued_evictions() {
        let mut gate = Gate::new(LIMIT);
        for pod in ["evict-1", "evict-2", "evict-3"] {
            gate.want_token(Priority::Bulk, pod);
        }
        assert_eq!(drain(&mut gate, ms(0)), ["evict-1"]);
        gate.want_token(Priority::Unblocking, "remove-finalizer");
        gate.want_token(Priority::Normal, "watch");
        assert!(drain(&mut gate, ms(50)).is_empty());
        assert_eq!(gate.token_wait(ms(50)), Some(ms(50)));
        assert_eq!(drain(&mut gate, ms(100)), ["remove-finalizer"]);
        assert_eq!(drain(&mut gate, ms(200)), ["watch"]);
        assert_eq!(drain(&mut gate, ms(300)), ["evict-2"]);
        assert_eq!(drain(&mut gate, ms(400)), ["evict-3"]);
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
        let mut gate = Gate::new(LIMIT);
        gate.want_token(Priority::Unblocking, "first");
        assert_eq!(drain(&mut gate, ms(0)), ["first"]);
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
        assert_eq!(drain(&mut gate, ms(100)), ["deleting-phase"]);
        assert_eq!(drain(&mut gate, ms(200)), ["delete-infrastructure"]);
        assert_eq!(drain(&mut gate, ms(300)), ["healthy-1"]);
    }

    #[test]
    fn closing_refuses_commands_not_in_flight_but_those_in_flight_finish() {
        let mut gate = Gate::new(LIMIT);
        gate.want_start(Priority::Normal, "in flight");
        assert_eq!(drain(&mut gate, ms(0)), ["in flight"]);
        gate.want_start(Priority::Normal, "queued");
        assert_eq!(gate.close(), ["queued"]);
        gate.want_start(Priority::Unblocking, "late");
        gate.want_token(Priority::Normal, "in flight's second request");
        assert_eq!(drain(&mut gate, ms(100)), ["in flight's second request"]);
        assert_eq!(gate.waiting(), 0);
    }

    #[test]
    fn retry_after_holds_the_cluster_and_waiters_that_gave_up_get_nothing() {
        let mut gate = Gate::new(RateLimit {
            qps: 100.0,
            burst: 5,
        });
        gate.retry_after(ms(0), ms(1000));
        gate.want_token(Priority::Unblocking, "gave up");
        gate.want_token(Priority::Normal, "patient");
        assert!(drain(&mut gate, ms(999)).is_empty());
        assert_eq!(gate.token_wait(ms(999)), Some(ms(1)));
        let grant = gate.poll_grant(ms(1000), |w| *w == "gave up");
        assert_eq!(grant, Some("patient"));
        assert_eq!(gate.waiting(), 0);
    }
}
