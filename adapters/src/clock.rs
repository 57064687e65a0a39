//! The wall clock. Only the adapter reads it; the engine is handed `Timestamp`s.

use engine::Timestamp;
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (a clock before 1970 reads as 0).
pub fn wall_now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Timestamp(ms)
}

/// How long from now until `at` (zero when it has passed).
pub fn until(at: Timestamp) -> std::time::Duration {
    let ms = at.since(wall_now()).as_millis().max(0);
    std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
