//! The HTTP servers of `lifecycle run`, as controller-runtime's manager has them:
//!
//! * plain ([`serve_plain`], `--metrics-addr`): `/metrics`, `/healthz`, `/livez`, `/readyz`,
//!   unauthenticated (for a loopback address, tests and the simulator);
//! * health ([`serve_health`], `--health-addr`, CAPI's `:9440`): the probes alone;
//! * secure metrics ([`serve_secure`], `--metrics-secure-addr`, `:8443`): `/metrics` over
//!   TLS ([`tls`]) to callers the API server authenticates and authorizes ([`auth`]).
//!
//! `/metrics` is written in the format `Accept` asks for ([`exposition`]); `/readyz` is 503
//! while the journal cannot be written.

pub mod auth;
pub mod exposition;
pub mod tls;

use super::metrics::Metrics;
use auth::{Attempt, Authorizer, Verdict};
use bytes::Bytes;
use exposition::Format;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// A TLS handshake not done in this long is dropped with its connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a server answers besides 404.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pages {
    /// `/metrics` and the probes.
    All,
    /// The probes.
    Health,
    /// `/metrics`.
    Metrics,
}

type Response = hyper::Response<Full<Bytes>>;

const PLAIN: &str = "text/plain; charset=utf-8";

fn response(code: u16, kind: &str, body: String) -> Response {
    hyper::Response::builder()
        .status(code)
        .header("content-type", kind)
        .body(Full::new(Bytes::from(body)))
        .expect("static headers are valid")
}

/// The answer to a request for `path` (already authorized where that is needed).
fn page(metrics: &Metrics, pages: Pages, path: &str, accept: Option<&str>) -> Response {
    let health = pages != Pages::Metrics;
    match path {
        "/healthz" | "/livez" if health => response(200, PLAIN, "ok\n".to_string()),
        "/readyz" if health => {
            let (code, body) = metrics.readiness();
            response(code, PLAIN, body.to_string())
        }
        "/metrics" if pages != Pages::Health => {
            let format = Format::negotiate(accept);
            response(200, format.content_type(), metrics.render_as(format))
        }
        _ => response(404, PLAIN, "not found\n".to_string()),
    }
}

fn header<'a>(req: &'a hyper::Request<hyper::body::Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Serves HTTP/1.1 on `io` with `answer`.
async fn serve_connection<I, F, Fut>(io: I, answer: F)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Response> + Send + 'static,
{
    let service = service_fn(move |req| {
        let answered = answer(req);
        async move { Ok::<_, Infallible>(answered.await) }
    });
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// Binds `addr` (port 0 picks one) and hands each accepted connection to `connection` in a
/// task of its own, until the returned task is aborted; returns the bound address.
async fn listen<F, Fut>(
    addr: SocketAddr,
    connection: F,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)>
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(connection(stream));
        }
    });
    Ok((bound, task))
}

async fn serve_pages(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    pages: Pages,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    listen(addr, move |stream| {
        let metrics = metrics.clone();
        serve_connection(stream, move |req| {
            let answer = page(&metrics, pages, req.uri().path(), header(&req, "accept"));
            async move { answer }
        })
    })
    .await
}

/// `/metrics` and the probes over plain HTTP, to anyone (`--metrics-addr`).
pub async fn serve_plain(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    serve_pages(addr, metrics, Pages::All).await
}

/// `/healthz`, `/livez` and `/readyz` alone, over plain HTTP (`--health-addr`).
pub async fn serve_health(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    serve_pages(addr, metrics, Pages::Health).await
}

/// `/metrics` over TLS, to callers `authorizer` lets read it (`--metrics-secure-addr`): 401
/// without a token the API server authenticates, 403 when its user may not `get` the path,
/// 500 when the API server could not be asked.
pub async fn serve_secure(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    tls: TlsAcceptor,
    authorizer: Arc<Authorizer>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    listen(addr, move |stream| {
        let (metrics, tls, authorizer) = (metrics.clone(), tls.clone(), authorizer.clone());
        async move {
            let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await
            else {
                return;
            };
            serve_connection(stream, move |req| {
                let (metrics, authorizer) = (metrics.clone(), authorizer.clone());
                async move { secure_page(&metrics, &authorizer, &req).await }
            })
            .await;
        }
    })
    .await
}

async fn secure_page(
    metrics: &Metrics,
    authorizer: &Authorizer,
    req: &hyper::Request<hyper::body::Incoming>,
) -> Response {
    let path = req.uri().path();
    let verb = req.method().as_str().to_ascii_lowercase();
    let attempt = Attempt {
        authorization: header(req, "authorization"),
        path,
        verb: &verb,
    };
    match authorizer.authorize(attempt).await {
        Ok(Verdict::Allowed) => page(metrics, Pages::Metrics, path, header(req, "accept")),
        Ok(Verdict::Unauthenticated) => response(401, PLAIN, "Unauthorized\n".to_string()),
        Ok(Verdict::Forbidden { user }) => response(
            403,
            PLAIN,
            format!("Forbidden: user {user:?} may not {verb} {path}\n"),
        ),
        Err(e) => {
            tracing::warn!("authorizing a /metrics request: {e}");
            response(
                500,
                PLAIN,
                "Internal Server Error: the request could not be authorized\n".to_string(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    /// `/readyz` is 503 while the journal cannot be written; `/healthz` stays 200 (the process
    /// is alive and must not be killed for a full disk); the gauge and counter say so.
    #[tokio::test]
    async fn readyz_is_503_while_the_journal_cannot_be_written() {
        let metrics = Arc::new(Metrics::default());
        let (addr, server) = serve_plain("127.0.0.1:0".parse().unwrap(), metrics.clone())
            .await
            .unwrap();
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        metrics.journal_unwritable(true);
        metrics.journal_unwritable(true);
        let ready = get(addr, "/readyz").await;
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        assert!(ready.contains("the journal cannot be written"), "{ready}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let text = get(addr, "/metrics").await;
        assert!(
            text.contains("lifecycle_journal_writable 0\n")
                && text.contains("lifecycle_journal_failures_total 1\n"),
            "{text}"
        );
        metrics.journal_unwritable(false);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        server.abort();
    }

    /// The health server answers the probes and nothing else; the plain one both.
    #[tokio::test]
    async fn the_health_server_serves_the_probes_alone() {
        let metrics = Arc::new(Metrics::default());
        let (health, h) = serve_health("127.0.0.1:0".parse().unwrap(), metrics.clone())
            .await
            .unwrap();
        for path in ["/healthz", "/livez", "/readyz"] {
            let answer = get(health, path).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
        }
        let answer = get(health, "/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        metrics.journal_unwritable(true);
        assert!(get(health, "/readyz").await.starts_with("HTTP/1.1 503"));
        h.abort();
    }

    /// Without `Accept` the page is the text format: counters described as `_total`, no EOF.
    #[tokio::test]
    async fn metrics_without_accept_are_the_text_format() {
        let metrics = Arc::new(Metrics::default());
        let (addr, server) = serve_plain("127.0.0.1:0".parse().unwrap(), metrics)
            .await
            .unwrap();
        let answer = get(addr, "/metrics").await;
        assert!(
            answer.contains("content-type: text/plain; version=0.0.4"),
            "{answer}"
        );
        assert!(answer.contains("# TYPE lifecycle_inputs_total counter\n"));
        assert!(!answer.contains("# EOF"));
        server.abort();
    }
}
