//! A log of every request's arrival, for tests of a client's manners (its rate limit, the
//! order of its writes): when it arrived, at which server, the method and the path.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct Arrival {
    pub at: Instant,
    pub server: SocketAddr,
    pub method: String,
    pub path: String,
}

/// Shared by the servers that record into it (see `ServerOptions::arrivals`).
#[derive(Debug, Default)]
pub struct Arrivals(Mutex<Vec<Arrival>>);

impl Arrivals {
    pub fn record<B>(&self, server: SocketAddr, request: &hyper::Request<B>) {
        let arrival = Arrival {
            at: Instant::now(),
            server,
            method: request.method().to_string(),
            path: request.uri().path().to_string(),
        };
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(arrival);
    }

    /// Everything recorded so far, in order of arrival.
    pub fn all(&self) -> Vec<Arrival> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
