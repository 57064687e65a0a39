//! The real server's limits: max-requests-inflight (non-mutating and mutating counted apart;
//! watches are long-running and exempt) answered with 429 and `Retry-After`, the request
//! timeout answered with 504, the randomized default watch length, and connection idleness
//! (a connection with no request in progress and no bytes for `idle_timeout` is closed).

use super::status::Failure;
use serde_json::json;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The shortest default watch (the real server's `--min-request-timeout`, 1800 s); a watch that
/// names no `timeoutSeconds` lasts between this and twice this.
pub const WATCH_LENGTH_MIN: Duration = Duration::from_secs(1800);

/// A default watch length in `[WATCH_LENGTH_MIN, 2 × WATCH_LENGTH_MIN)`, spread so that
/// clients do not all reconnect at once (the real server draws it at random too).
pub fn watch_length_default() -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let fraction = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    WATCH_LENGTH_MIN.mul_f64(1.0 + fraction)
}

/// Requests in progress, counted against the two limits.
#[derive(Default)]
pub struct Inflight {
    reading: AtomicUsize,
    mutating: AtomicUsize,
}

/// Holds one slot until dropped.
pub struct Slot {
    inflight: Arc<Inflight>,
    mutating: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.inflight
            .counter(self.mutating)
            .fetch_sub(1, Ordering::AcqRel);
    }
}

impl Inflight {
    fn counter(&self, mutating: bool) -> &AtomicUsize {
        if mutating {
            &self.mutating
        } else {
            &self.reading
        }
    }

    /// A slot, or `None` when `max` requests of that kind are already in progress.
    pub fn try_take(self: &Arc<Self>, mutating: bool, max: usize) -> Option<Slot> {
        let counter = self.counter(mutating);
        let mut now = counter.load(Ordering::Acquire);
        loop {
            if now >= max {
                return None;
            }
            match counter.compare_exchange(now, now + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return Some(Slot {
                        inflight: self.clone(),
                        mutating,
                    });
                }
                Err(seen) => now = seen,
            }
        }
    }
}

/// 429 as the real server answers when overloaded (with `Retry-After: 1`).
pub fn too_many_requests() -> Failure {
    Failure {
        details: Some(json!({"retryAfterSeconds": 1})),
        ..Failure::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
    }
}

/// 504 for a request that did not finish within its timeout.
pub fn timed_out() -> Failure {
    Failure {
        details: Some(json!({})),
        ..Failure::new(
            504,
            "Timeout",
            "Timeout: request did not complete within requested timeout - context deadline exceeded",
        )
    }
}

/// One connection's activity: when bytes last moved, and how many requests are in progress
/// (a watch counts until its stream ends).
#[derive(Default)]
pub struct Activity {
    last_ms: AtomicU64,
    active: AtomicUsize,
    started: std::sync::OnceLock<Instant>,
}

impl Activity {
    fn now_ms(&self) -> u64 {
        let started = self.started.get_or_init(Instant::now);
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Release);
    }

    /// Whether the connection has been idle (no request in progress, no bytes) for `idle`.
    pub fn idle_for(&self, idle: Duration) -> bool {
        let quiet_ms = self
            .now_ms()
            .saturating_sub(self.last_ms.load(Ordering::Acquire));
        self.active.load(Ordering::Acquire) == 0 && u128::from(quiet_ms) >= idle.as_millis()
    }

    /// Marks a request in progress until the returned guard drops.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.active.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }
}

/// A request in progress on a connection (see [`Activity::begin`]).
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
        self.0.touch();
    }
}

/// A stream that records its activity.
pub struct Tracked<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lengths_are_spread_over_30_to_60_minutes() {
        for _ in 0..50 {
            let d = watch_length_default();
            assert!(d >= WATCH_LENGTH_MIN && d < WATCH_LENGTH_MIN * 2, "{d:?}");
        }
    }

    #[test]
    fn slots_are_limited_and_given_back() {
        let inflight = Arc::new(Inflight::default());
        let a = inflight.try_take(false, 1).unwrap();
        assert!(inflight.try_take(false, 1).is_none());
        assert!(inflight.try_take(true, 1).is_some(), "counted apart");
        drop(a);
        assert!(inflight.try_take(false, 1).is_some());
    }
}
