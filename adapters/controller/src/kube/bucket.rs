//! A token bucket, sans-IO: time is an offset from an origin the caller picks, passed in.
//!
//! Kept as the time at which the bucket is full again (the generic cell rate algorithm), in
//! whole nanoseconds, so no rounding accumulates: in every window of length `T` at most
//! `burst + qps·T` takes succeed.

use std::time::Duration;

/// Requests per second and how many may go at once after a quiet spell (client-go's QPS and
/// Burst; CAPI's defaults for a cluster are 20 and 30).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub qps: f64,
    pub burst: u32,
}

impl RateLimit {
    pub const CAPI_DEFAULT: RateLimit = RateLimit {
        qps: 20.0,
        burst: 30,
    };

    /// The same limit on a clock that runs `speed` times fast, in real time: `qps` per clock
    /// second is `qps·speed` per real second (the burst is a count and stays).
    pub fn scaled(self, speed: u32) -> RateLimit {
        RateLimit {
            qps: self.qps * f64::from(speed.max(1)),
            burst: self.burst,
        }
    }
}

#[derive(Clone, Debug)]
pub struct TokenBucket {
    /// Time one token takes to come back.
    interval: Duration,
    burst: u32,
    /// When the bucket holds `burst` tokens again (at or before now: it is full).
    full_at: Duration,
}

impl TokenBucket {
    /// A full bucket. `qps` must be positive and finite, `burst` at least 1.
    pub fn new(limit: RateLimit) -> TokenBucket {
        assert!(
            limit.qps.is_finite() && limit.qps > 0.0,
            "qps must be positive"
        );
        assert!(limit.burst >= 1, "burst must be at least 1");
        let interval_ns = (1e9 / limit.qps).ceil().max(1.0);
        TokenBucket {
            interval: Duration::from_nanos(interval_ns as u64),
            burst: limit.burst,
            full_at: Duration::ZERO,
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Duration) -> Result<(), Duration> {
        let full_at = self.full_at.max(now) + self.interval;
        let depth = self.interval * self.burst;
        if full_at - now <= depth {
            self.full_at = full_at;
            Ok(())
        } else {
            Err(full_at - now - depth)
        }
    }

    /// The server said "Retry-After": no token before `until`, and then one, refilling at the
    /// steady rate (no burst right after the server asked us to back off).
    pub fn hold_until(&mut self, until: Duration) {
        let one_left = until + self.interval * (self.burst - 1);
        self.full_at = self.full_at.max(one_left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn bucket(qps: f64, burst: u32) -> TokenBucket {
        TokenBucket::new(RateLimit { qps, burst })
    }

    #[test]
    fn a_full_bucket_gives_its_burst_at_once_then_one_token_per_interval() {
        let mut b = bucket(20.0, 3);
        for _ in 0..3 {
            assert_eq!(b.take(ms(1000)), Ok(()));
        }
        assert_eq!(b.take(ms(1000)), Err(ms(50)));
        assert_eq!(b.take(ms(1049)), Err(ms(1)));
        assert_eq!(b.take(ms(1050)), Ok(()));
        assert_eq!(b.take(ms(1050)), Err(ms(50)));
    }

    #[test]
    fn a_quiet_spell_refills_up_to_the_burst_only() {
        let mut b = bucket(10.0, 2);
        assert_eq!(b.take(ms(0)), Ok(()));
        assert_eq!(b.take(ms(0)), Ok(()));
        // An hour later: two tokens, not 36 000.
        let later = ms(3_600_000);
        assert_eq!(b.take(later), Ok(()));
        assert_eq!(b.take(later), Ok(()));
        assert_eq!(b.take(later), Err(ms(100)));
    }

    #[test]
    fn retry_after_holds_every_token_until_then_and_resumes_at_the_steady_rate() {
        let mut b = bucket(20.0, 30);
        assert_eq!(b.take(ms(0)), Ok(()));
        b.hold_until(ms(2000));
        assert_eq!(b.take(ms(10)), Err(ms(1990)));
        assert_eq!(b.take(ms(2000)), Ok(()));
        assert_eq!(b.take(ms(2000)), Err(ms(50)), "no burst after a 429");
        // A shorter Retry-After never shortens a longer hold.
        b.hold_until(ms(100));
        assert_eq!(b.take(ms(2049)), Err(ms(1)));
    }

    /// The property the issue asks the server to observe: in every window of length T, at most
    /// burst + qps·T tokens, whatever the pattern of asking.
    #[test]
    fn no_window_holds_more_than_burst_plus_qps_times_its_length() {
        let (qps, burst) = (20.0, 30u32);
        let mut b = bucket(qps, burst);
        let mut granted = Vec::new();
        // Greedy asking every millisecond for 5 s, with quiet spells.
        let mut now = ms(0);
        while now < ms(5000) {
            let quiet = (now.as_millis() / 1000) % 2 == 1 && now.as_millis() % 1000 < 600;
            if !quiet && b.take(now).is_ok() {
                granted.push(now);
            }
            now += ms(1);
        }
        assert!(granted.len() > 100, "{}", granted.len());
        for (i, start) in granted.iter().enumerate() {
            for (j, end) in granted.iter().enumerate().skip(i) {
                let count = (j - i + 1) as f64;
                let bound = f64::from(burst) + qps * (*end - *start).as_secs_f64();
                assert!(count <= bound + 1e-9, "{count} in {:?}", *end - *start);
            }
        }
    }

    #[test]
    fn scaled_limits_count_clock_seconds() {
        let limit = RateLimit::CAPI_DEFAULT.scaled(10);
        assert_eq!(limit.qps, 200.0);
        assert_eq!(limit.burst, 30);
        assert_eq!(RateLimit::CAPI_DEFAULT.scaled(1), RateLimit::CAPI_DEFAULT);
    }
}
