//! The wall clock. Only the adapter reads it; the engine is handed `Timestamp`s.
//!
//! A process may run its clock fast ([`scale`], for simulated runs over HTTP): from an origin on,
//! every real millisecond counts as `speed` milliseconds, and waits shrink by the same factor.
//! The fake API server and the controller it drives share one origin and speed, so their
//! timestamps agree. Production never scales (speed 1).

use engine::Timestamp;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Origin (ms since the epoch) and speed of the scaled clock; speed 1 = the real clock.
static ORIGIN_MS: AtomicI64 = AtomicI64::new(0);
static SPEED: AtomicI64 = AtomicI64::new(1);

/// The largest speed a process accepts: beyond it, scheduling jitter of a few milliseconds
/// becomes seconds of simulated time.
pub const SPEED_MAX: u32 = 100;

fn real_now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Timestamp(ms)
}

/// From `origin` on, time runs `speed` times faster in this process. Before `origin` the clock
/// reads as the real one.
pub fn scale(origin: Timestamp, speed: u32) -> Result<(), String> {
    if speed == 0 || speed > SPEED_MAX {
        return Err(format!("clock speed {speed}: must be 1..={SPEED_MAX}"));
    }
    ORIGIN_MS.store(origin.as_millis(), Ordering::SeqCst);
    SPEED.store(i64::from(speed), Ordering::SeqCst);
    Ok(())
}

/// The speed set by [`scale`] (1 unless scaled).
pub fn speed() -> u32 {
    u32::try_from(SPEED.load(Ordering::SeqCst)).unwrap_or(1)
}

/// Now, in milliseconds since the Unix epoch (a clock before 1970 reads as 0), scaled.
pub fn wall_now() -> Timestamp {
    scaled(
        real_now(),
        ORIGIN_MS.load(Ordering::SeqCst),
        SPEED.load(Ordering::SeqCst),
    )
}

/// The clock reading at real time `real` for a clock running `speed` times fast from `origin_ms`.
fn scaled(real: Timestamp, origin_ms: i64, speed: i64) -> Timestamp {
    if speed == 1 || real.as_millis() <= origin_ms {
        return real;
    }
    let elapsed = real.as_millis() - origin_ms;
    Timestamp(origin_ms.saturating_add(elapsed.saturating_mul(speed)))
}

/// Real time for `d` of (scaled) clock time.
pub fn real_duration(d: std::time::Duration) -> std::time::Duration {
    d / speed()
}

/// How long (in real time) from now until the clock reads `at` (zero when it has passed).
pub fn until(at: Timestamp) -> std::time::Duration {
    let ms = at.since(wall_now()).as_millis().max(0);
    real_duration(std::time::Duration::from_millis(
        u64::try_from(ms).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scaled_clock_runs_fast_from_its_origin() {
        let origin = 1_000_000;
        assert_eq!(
            scaled(Timestamp(1_001_000), origin, 1),
            Timestamp(1_001_000)
        );
        assert_eq!(
            scaled(Timestamp(1_001_000), origin, 10),
            Timestamp(1_010_000)
        );
        assert_eq!(scaled(Timestamp(999_000), origin, 10), Timestamp(999_000));
    }

    #[test]
    fn speeds_out_of_range_are_refused() {
        assert!(scale(Timestamp(0), 0).is_err());
        assert!(scale(Timestamp(0), SPEED_MAX + 1).is_err());
        assert_eq!(speed(), 1, "a refused speed changes nothing");
    }
}
