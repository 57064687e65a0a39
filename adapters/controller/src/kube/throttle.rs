//! A cluster's [`Gate`] (its request tokens) driven by a tokio task, and the client wrapper that
//! sends every request of that cluster through it (watches and lists as well as commands, as
//! client-go's rate limiter does). How many commands are in flight is the loop's
//! (`engine::runtime`). Tokio time drives it, so tests can pause and advance time.
//!
//! A request's [`Priority`] rides in its `http::Extensions` (none: `Normal`), and [`Prepaid`]
//! when its token was taken before (a command's first request). A 429 with
//! `Retry-After` holds the whole cluster that long, except on the eviction subresource, where
//! 429 is a PodDisruptionBudget's answer about one pod (the drain retries it after 20 s).

use super::bucket::RateLimit;
use super::gate::{Gate, Priority};
use super::metrics::Metrics;
use futures::future::BoxFuture;
use kube::Client;
use kube::client::Body;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The longest `Retry-After` honoured: a bigger one is read as this.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

enum Ask {
    Start(Priority, oneshot::Sender<()>),
    Token(Priority, oneshot::Sender<()>),
    RetryAfter(Duration),
    Close,
}

/// In a request's extensions: its token was taken already ([`Throttle::first_request`]).
#[derive(Clone, Copy, Debug)]
pub struct Prepaid;

/// A handle on one cluster's gate; cheap to clone. The task behind it ends with its last handle.
#[derive(Clone)]
pub struct Throttle {
    asks: mpsc::UnboundedSender<Ask>,
}

impl Throttle {
    /// Starts the gate's task (call within a tokio runtime).
    pub fn start(limit: RateLimit) -> Throttle {
        let (asks, rx) = mpsc::unbounded_channel();
        tokio::spawn(drive(Gate::new(limit), rx));
        Throttle { asks }
    }

    /// Waits for the token of a command's first request (the command is then in flight);
    /// `false` once the gate is closed. Send that request with [`Prepaid`].
    pub async fn first_request(&self, priority: Priority) -> bool {
        let (tx, rx) = oneshot::channel();
        self.asks.send(Ask::Start(priority, tx)).is_ok() && rx.await.is_ok()
    }

    /// Waits for a request token (immediately if the gate's task is gone).
    pub async fn token(&self, priority: Priority) {
        let (tx, rx) = oneshot::channel();
        if self.asks.send(Ask::Token(priority, tx)).is_ok() {
            let _ = rx.await;
        }
    }

    pub fn retry_after(&self, wait: Duration) {
        let _ = self.asks.send(Ask::RetryAfter(wait.min(RETRY_AFTER_MAX)));
    }

    /// Refuses commands not in flight yet; those in flight still get their tokens.
    pub fn close(&self) {
        let _ = self.asks.send(Ask::Close);
    }
}

async fn drive(mut gate: Gate<oneshot::Sender<()>>, mut asks: mpsc::UnboundedReceiver<Ask>) {
    let origin = Instant::now();
    loop {
        let now = origin.elapsed();
        // A token for a waiter that just left is spent: erring on the polite side.
        while let Some(tx) = gate.poll_grant(now, oneshot::Sender::is_closed) {
            let _ = tx.send(());
        }
        let wait = gate.token_wait(now);
        let ask = tokio::select! {
            ask = asks.recv() => ask,
            _ = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => continue,
        };
        match ask {
            None => return,
            Some(Ask::Start(p, tx)) => gate.want_start(p, tx),
            Some(Ask::Token(p, tx)) => gate.want_token(p, tx),
            Some(Ask::RetryAfter(wait)) => gate.retry_after(origin.elapsed(), wait),
            Some(Ask::Close) => drop(gate.close()),
        }
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not sent by the API server).
fn retry_after(response: &http::Response<Body>) -> Option<Duration> {
    let value = response.headers().get(http::header::RETRY_AFTER)?;
    let seconds: u64 = value.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds))
}

/// `client`, with every request first taking a token from `throttle` (counted in `metrics`).
/// `clock_speed`: the controller's clock runs that many times fast (simulated runs), so a
/// `Retry-After` the (simulated) server sends is that many times shorter in real time.
/// `host` names the cluster in `rest_client_requests_total`.
pub fn throttled(
    client: Client,
    throttle: Throttle,
    clock_speed: u32,
    metrics: Arc<Metrics>,
    host: String,
) -> Client {
    let namespace = client.default_namespace().to_string();
    Client::new(
        Throttled {
            client,
            throttle,
            clock_speed: clock_speed.max(1),
            metrics,
            host: Arc::from(host),
        },
        namespace,
    )
}

#[derive(Clone)]
struct Throttled {
    client: Client,
    throttle: Throttle,
    clock_speed: u32,
    metrics: Arc<Metrics>,
    host: Arc<str>,
}

impl tower_service::Service<http::Request<Body>> for Throttled {
    type Response = http::Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<http::Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let priority = request
                .extensions()
                .get::<Priority>()
                .copied()
                .unwrap_or(Priority::Normal);
            let eviction = request.uri().path().ends_with("/eviction");
            if request.extensions().get::<Prepaid>().is_none() {
                let asked = Instant::now();
                this.throttle.token(priority).await;
                this.metrics.api_throttled(asked.elapsed());
            }
            this.metrics.api_request();
            let method = request.method().to_string();
            let response = this.client.send(request).await?;
            this.metrics
                .rest_request(response.status().as_u16(), &method, &this.host);
            if response.status() == http::StatusCode::TOO_MANY_REQUESTS
                && !eviction
                && let Some(wait) = retry_after(&response)
            {
                tracing::warn!(
                    retry_after_s = wait.as_secs(),
                    "the API server asked us to back off (429)"
                );
                this.throttle.retry_after(wait / this.clock_speed);
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The async driver hands tokens out on the bucket's schedule (never early), the most
    /// urgent waiter first. Paused tokio time: it advances only when every task waits.
    #[tokio::test(start_paused = true)]
    async fn the_driver_grants_by_priority_and_never_early() {
        let throttle = Throttle::start(RateLimit { qps: 5.0, burst: 1 });
        let start = Instant::now();
        throttle.token(Priority::Bulk).await;
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for (name, p) in [
            ("evict-1", Priority::Bulk),
            ("evict-2", Priority::Bulk),
            ("finalizer", Priority::Unblocking),
        ] {
            let (throttle, order) = (throttle.clone(), order.clone());
            let (asked_tx, asked) = oneshot::channel();
            waiting.push(tokio::spawn(async move {
                let token = throttle.token(p);
                let _ = asked_tx.send(());
                token.await;
                order.lock().unwrap().push((name, start.elapsed()));
            }));
            let _ = asked.await;
        }
        for w in waiting {
            w.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let names: Vec<_> = order.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["finalizer", "evict-1", "evict-2"]);
        for (i, (_, at)) in order.iter().enumerate() {
            let due = Duration::from_millis(200 * (i as u64 + 1));
            assert!(*at >= due, "early: {order:?}");
            assert!(*at < due + Duration::from_millis(5), "late: {order:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_throttle_starts_no_command_but_serves_those_in_flight() {
        let throttle = Throttle::start(RateLimit {
            qps: 10.0,
            burst: 1,
        });
        assert!(throttle.first_request(Priority::Normal).await);
        throttle.close();
        assert!(!throttle.first_request(Priority::Unblocking).await);
        throttle.token(Priority::Normal).await;
    }
}
