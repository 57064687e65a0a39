//! The faults a served world's scenario injects into API calls and deliveries, played by its
//! fake API servers on the world's simulated clock ([`crate::clock`]) with the simulator's own
//! draws ([`sim::wire`]): per cluster, each server refuses or drops connections while it is
//! partitioned, answers 5xx, 409 and 429 (with `Retry-After`), holds answers (a slow API),
//! times out after a write happened, delays answers against their watch events, and cuts,
//! silences, coalesces, bursts, expires (410) and repeats watch streams (`watch.rs`).

use super::status::Failure;
use crate::clock;
use engine::Timestamp;
use engine::model::Scope;
use serde_json::json;
use sim::scenario::FaultKind;
use sim::wire::{Hit, Refusal, Verdict, Wire};
use std::sync::{Arc, Mutex, MutexGuard};

/// One server's handle on its world's faults: the shared [`Wire`] and the cluster it serves.
#[derive(Clone)]
pub struct ServedFaults {
    pub scope: Scope,
    wire: Arc<Mutex<Wire>>,
}

impl std::fmt::Debug for ServedFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServedFaults({:?})", self.scope)
    }
}

/// A request the server drops without an answer (the connection closes): a partition, or a
/// write that timed out by its connection dropping.
#[derive(Debug)]
pub struct Dropped(pub &'static str);

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Dropped {}

impl ServedFaults {
    /// The management cluster's handle on `wire` ([`Self::for_scope`] for the others).
    pub fn new(wire: Arc<Mutex<Wire>>) -> Self {
        ServedFaults {
            scope: Scope::Management,
            wire,
        }
    }

    pub fn for_scope(&self, scope: Scope) -> Self {
        ServedFaults {
            scope,
            wire: self.wire.clone(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Wire> {
        self.wire.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the cluster is partitioned now (connections are refused and dropped).
    pub fn partitioned(&self, now: Timestamp) -> bool {
        self.lock()
            .is_active(&self.scope, now, FaultKind::Partition)
    }

    /// A connection refused because of a partition.
    pub fn refused(&self) {
        self.lock().fire(FaultKind::Partition);
    }

    /// When the cluster's next partition starts, after `now`.
    pub fn next_partition(&self, now: Timestamp) -> Option<Timestamp> {
        self.lock()
            .windows
            .iter()
            .filter(|w| {
                w.kind == FaultKind::Partition
                    && w.scope.as_ref().is_none_or(|s| *s == self.scope)
                    && w.from > now
            })
            .map(|w| w.from)
            .min()
    }
}

/// The `Status` answer of a refusal, with its `Retry-After` header.
pub fn refusal_response(r: &Refusal) -> hyper::Response<super::Body> {
    let mut details = json!({});
    if let Some(s) = r.retry_after {
        details["retryAfterSeconds"] = json!(s);
    }
    if !r.causes.is_empty() {
        let reason = if r.kind == FaultKind::Eviction429 {
            "DisruptionBudget"
        } else {
            "Simulated"
        };
        details["causes"] = r
            .causes
            .iter()
            .map(|m| json!({"reason": reason, "message": m}))
            .collect();
    }
    let failure = Failure {
        details: Some(details),
        ..Failure::new(r.code, r.reason, r.message.clone())
    };
    let mut response = super::router::json_response(failure.code, &failure.to_json());
    if let Some(s) = r.retry_after
        && let Ok(v) = hyper::header::HeaderValue::from_str(&s.to_string())
    {
        response.headers_mut().insert("retry-after", v);
    }
    response
}

/// What the faults do to one request before it is served.
pub enum Before {
    /// Serve it (`attempt`: its number for what it hits, for the draws after it is served).
    Serve { hit: Hit, attempt: u64 },
    /// Answer this instead.
    Answer(hyper::Response<super::Body>),
    /// Drop the connection without an answer.
    Drop,
}

/// Decides a request's fate: a partition drops it, a slow API holds it (then it is decided
/// again), injected errors, conflicts and 429s answer for the server.
pub async fn before(faults: &ServedFaults, hit: Option<Hit>) -> Option<Before> {
    let hit = hit?;
    let held = faults
        .lock()
        .list_held_until(&faults.scope, clock::wall_now(), &hit);
    if let Some(until) = held {
        // `cache-unsynced`: the list answers when the cache syncs.
        tokio::time::sleep(clock::until(until)).await;
    }
    let (attempt, verdict) = {
        let mut wire = faults.lock();
        if !wire.touches(&faults.scope) {
            return None;
        }
        let attempt = wire.arrive(&faults.scope, &hit);
        let verdict = wire.decide(&faults.scope, clock::wall_now(), &hit, attempt, false);
        (attempt, verdict)
    };
    let verdict = match verdict {
        Verdict::Delay(d) => {
            tokio::time::sleep(real(d)).await;
            faults
                .lock()
                .decide(&faults.scope, clock::wall_now(), &hit, attempt, true)
        }
        other => other,
    };
    Some(match verdict {
        Verdict::Pass | Verdict::Delay(_) => Before::Serve { hit, attempt },
        Verdict::Unreachable => Before::Drop,
        Verdict::Refuse(r) => Before::Answer(refusal_response(&r)),
    })
}

/// Real time for `d` of simulated time.
pub fn real(d: engine::Duration) -> std::time::Duration {
    clock::real_duration(std::time::Duration::from_millis(
        u64::try_from(d.as_millis()).unwrap_or(0),
    ))
}

/// What the faults do to a served request's answer: a write that times out after it happened
/// (held, then a 504 or a dropped connection), or a write's answer delayed against its watch
/// event (`reordered-delivery`, counted by which arrived first).
pub async fn after(
    faults: &ServedFaults,
    hit: &Hit,
    attempt: u64,
    response: hyper::Response<super::Body>,
) -> Result<hyper::Response<super::Body>, Dropped> {
    if !hit.mutating() || !response.status().is_success() {
        return Ok(response);
    }
    let now = clock::wall_now();
    let (timeout, latency) = {
        let mut wire = faults.lock();
        let timeout = wire.write_timeout(&faults.scope, now, hit, attempt);
        let latency = wire.answer_latency(&faults.scope, now, hit, attempt);
        (timeout, latency)
    };
    if let Some(timeout) = timeout {
        // The server's request timeout fires while the answer is on its way.
        // Held 0.5 to 2 s (simulated) first.
        let hold = 500
            + (sim::wire::roll(
                faults.lock().seed,
                FaultKind::WriteTimeout,
                &faults.scope,
                hit,
                attempt,
                "hold",
            ) * 1_500.0) as i64;
        tokio::time::sleep(real(engine::Duration(hold))).await;
        return match timeout {
            sim::wire::Timeout::Dropped => Err(Dropped("the write happened; the answer was lost")),
            sim::wire::Timeout::Answered504 => {
                let failure = Failure {
                    details: Some(json!({})),
                    ..Failure::new(504, "Timeout", sim::wire::TIMEOUT_MESSAGE)
                };
                Ok(super::router::json_response(504, &failure.to_json()))
            }
        };
    }
    let Some(latency) = latency else {
        return Ok(response);
    };
    let (parts, body) = response.into_parts();
    let bytes = http_body_util::BodyExt::collect(body)
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    tokio::time::sleep(real(latency)).await;
    let written: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let rv = written
        .pointer("/metadata/resourceVersion")
        .and_then(serde_json::Value::as_str)
        .and_then(|s| s.parse::<u64>().ok());
    if let Some(rv) = rv {
        let stream = engine::intake::streams::stream_id(
            sim::api::json::group_of(sim::api::json::api_version(&written)),
            sim::api::json::kind(&written),
        );
        faults.lock().answered(&faults.scope, &stream, rv);
    }
    let body = http_body_util::Full::new(bytes);
    Ok(hyper::Response::from_parts(
        parts,
        http_body_util::BodyExt::boxed(http_body_util::BodyExt::map_err(body, |e| match e {})),
    ))
}
