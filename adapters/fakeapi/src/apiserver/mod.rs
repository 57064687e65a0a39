//! A fake Kubernetes API server over real HTTP (plain HTTP/1.1 on 127.0.0.1), serving one
//! simulator [`sim::api::ClusterStore`], faithful enough for unmodified kube-rs clients
//! (`Api`, `kube::runtime::watcher`), kubectl (1.32 and 1.20) and the Python client.
//!
//! What it serves: discovery (`/api`, `/apis`, resource lists), OpenAPI v3
//! ([`openapi`]) and v2 (protobuf, for kubectl before 1.27), LIST with resourceVersion, `limit`/`continue` and selectors, WATCH as
//! newline-delimited events with bookmarks and the in-stream 410, GET (also as a Table,
//! [`table`]), POST, PUT, PATCH (merge, JSON patch, strategic merge for built-in kinds;
//! server-side apply is 415), DELETE with finalizers and graceful pod deletion, `dryRun=All`,
//! the status and scale subresources, pod eviction with PDBs and `events.k8s.io/v1` as a view
//! of the core Events. Custom resources are validated against their vendored CRDs
//! ([`crds`], [`validate`]). Failures are `metav1.Status` bodies. Writes go through
//! `ClusterStore` methods, so the semantics are the simulator's. A background task plays
//! kubelet, namespace and disruption controllers (`kubelet`). The real server's limits
//! (in-flight requests, request timeout, idle connections) are in `limits`.
//!
//! TokenReview answers from a fixed table of tokens ([`auth`]); SubjectAccessReview and
//! SelfSubjectAccessReview by the RBAC objects stored ([`rbac`]).
//!
//! Every write is recorded in `metadata.managedFields` as the real server records a write
//! that is not server-side apply ([`sim::api::managed`]): its manager is the `fieldManager`
//! parameter, else the User-Agent up to the first `/`.
//!
//! Not served (see the README for the whole list): authentication of requests, server-side apply,
//! protobuf request bodies, version conversion, `deletecollection`.

pub mod arrivals;
pub mod auth;
mod builtin_schemas;
pub mod crds;
mod events;
pub mod faults;
mod kubelet;
mod labels;
mod limits;
mod list;
mod managed;
mod names;
mod objects;
pub mod openapi;
mod openapi_v2;
pub mod patch;
pub mod rbac;
pub mod record;
pub mod resources;
mod router;
mod scale;
mod secrets;
pub mod selector;
mod state;
pub mod status;
pub mod table;
pub mod validate;
mod watch;

pub use state::{CHANGE_LOG_CAPACITY, ClusterState, SharedCluster, StoreLock};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;
use tokio::task::JoinSet;

/// Response bodies: a whole JSON document or a watch stream.
pub type Body = BoxBody<Bytes, Infallible>;

/// Knobs of a fake server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// How often an idle watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// How often the fake kubelet / namespace / disruption controllers run; `None` = never.
    pub controllers_interval: Option<Duration>,
    /// Cap on a pod's grace period before the fake kubelet removes it.
    pub pod_shutdown_max: Duration,
    /// Longest a non-watch request may take (504 after; the real server's `--request-timeout`).
    pub request_timeout: Duration,
    /// Non-mutating requests in progress at once (429 beyond; watches do not count).
    pub max_requests_inflight: usize,
    /// Mutating requests in progress at once (429 beyond).
    pub max_mutating_requests_inflight: usize,
    /// A connection with no request in progress and no bytes for this long is closed.
    pub idle_timeout: Duration,
    /// A request whose headers have not all arrived within this is dropped with its connection.
    pub header_read_timeout: Duration,
    /// Where to log every request's arrival (tests; `None`: not logged).
    pub arrivals: Option<Arc<arrivals::Arrivals>>,
    /// Where each request's authorization tuple is recorded (`None`: nowhere).
    pub record: Option<record::Recorder>,
    /// The faults a served world's scenario injects into this cluster's API calls and watch
    /// streams (`None`: none).
    pub faults: Option<faults::ServedFaults>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            bookmark_interval: Duration::from_secs(30),
            controllers_interval: Some(Duration::from_millis(200)),
            pod_shutdown_max: Duration::from_secs(2),
            // The real kube-apiserver's defaults.
            request_timeout: Duration::from_secs(60),
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            idle_timeout: Duration::from_secs(90),
            header_read_timeout: Duration::from_secs(32),
            arrivals: None,
            record: None,
            faults: None,
        }
    }
}

/// Query parameters (the last value wins for repeated keys).
#[derive(Clone, Debug, Default)]
pub struct Query(BTreeMap<String, String>);

impl Query {
    pub fn parse(query: Option<&str>) -> Self {
        Query(
            form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

/// What every handler can see.
pub struct Ctx {
    pub cluster: SharedCluster,
    pub options: ServerOptions,
    pub addr: SocketAddr,
    pub inflight: Arc<limits::Inflight>,
}

/// A running fake API server. Dropping it does not stop it; call [`ApiServer::shutdown`].
pub struct ApiServer {
    addr: SocketAddr,
    cluster: SharedCluster,
    faults: Option<faults::ServedFaults>,
    stop: signal::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ApiServer {
    /// Binds `addr` (port 0 picks a free port) and serves `cluster` until [`Self::shutdown`].
    pub async fn start(
        cluster: SharedCluster,
        addr: SocketAddr,
        options: ServerOptions,
    ) -> std::io::Result<ApiServer> {
        // The vendored CRDs parse and their patterns compile on first use (about 0.2 s in a
        // debug build): here, before anything is served, not inside the first write's answer.
        crds::preload();
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let options_faults = options.faults.clone();
        let (stop, mut stopped) = signal::channel(false);
        let ctx = Arc::new(Ctx {
            cluster: cluster.clone(),
            options: options.clone(),
            addr,
            inflight: Arc::default(),
        });
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            if let Some(every) = options.controllers_interval {
                let cluster = ctx.cluster.clone();
                let cap = engine::Duration::from_millis(
                    i64::try_from(options.pod_shutdown_max.as_millis()).unwrap_or(i64::MAX),
                );
                connections.spawn(async move {
                    let mut interval = tokio::time::interval(every);
                    let mut controllers = kubelet::Controllers::default();
                    loop {
                        interval.tick().await;
                        controllers.tick(&cluster, crate::clock::wall_now(), cap);
                    }
                });
            }
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        if let Some(faults) = &ctx.options.faults
                            && faults.partitioned(crate::clock::wall_now())
                        {
                            // Partitioned: the connection is reset at once.
                            faults.refused();
                            let _ = stream.set_zero_linger();
                            drop(stream);
                            continue;
                        }
                        let ctx = ctx.clone();
                        connections.spawn(serve_connection(ctx, stream));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
            ctx.cluster.end_watches();
            connections.abort_all();
        });
        Ok(ApiServer {
            addr,
            cluster,
            faults: options_faults,
            stop,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn cluster(&self) -> &SharedCluster {
        &self.cluster
    }

    /// The faults this server plays, if any.
    pub fn faults(&self) -> Option<&faults::ServedFaults> {
        self.faults.as_ref()
    }

    /// A kubeconfig (YAML) whose only context points at this server as `name`.
    pub fn kubeconfig(&self, name: &str) -> String {
        kubeconfig_yaml(name, &self.url())
    }

    /// Stops accepting connections and ends every open connection and watch.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Serves one connection until the client closes it or it stays idle for `idle_timeout`; a
/// fault may cut it (a partition starting, a watch stream cut mid-stream).
async fn serve_connection(ctx: Arc<Ctx>, stream: tokio::net::TcpStream) {
    let activity = Arc::new(limits::Activity::default());
    activity.touch();
    let cut = Arc::new(tokio::sync::Notify::new());
    let io = limits::Tracked {
        inner: stream,
        activity: activity.clone(),
    };
    let idle = ctx.options.idle_timeout;
    let header_read = ctx.options.header_read_timeout;
    let faults = ctx.options.faults.clone();
    let service = {
        let activity = activity.clone();
        let cut = cut.clone();
        service_fn(move |req| {
            if let Some(arrivals) = &ctx.options.arrivals {
                arrivals.record(ctx.addr, &req);
            }
            router::handle(ctx.clone(), activity.clone(), cut.clone(), req)
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let check_every = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
    let mut closing = false;
    loop {
        let partition = faults
            .as_ref()
            .and_then(|f| f.next_partition(crate::clock::wall_now()));
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            _ = cut.notified() => return,
            _ = tokio::time::sleep(partition.map_or(Duration::MAX, crate::clock::until)), if partition.is_some() => {
                if faults.as_ref().is_some_and(|f| f.partitioned(crate::clock::wall_now())) {
                    // A partition starts: every open connection drops.
                    return;
                }
            }
            _ = tokio::time::sleep(check_every), if !closing => {
                if activity.idle_for(idle) {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// A kubeconfig (YAML) with one cluster, user and context named `name`, pointing at `url`
/// with the admin's token ([`auth::ADMIN_TOKEN`]; requests are not authenticated, but a
/// TokenReview of it is).
pub fn kubeconfig_yaml(name: &str, url: &str) -> String {
    let token = auth::ADMIN_TOKEN;
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\ncurrent-context: {name}\npreferences: {{}}\n"
    )
}
