//! Counters, `/metrics` (Prometheus text format), `/healthz` and `/livez` (the process runs) and
//! `/readyz` (503 while the journal cannot be written) on a small hyper server.

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the adapter counts. Shared by the loop, the executors and the HTTP server.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Inputs applied, counting each input of a batch.
    pub inputs: AtomicU64,
    /// Journal records (a batch of queued inputs is one).
    pub records: AtomicU64,
    /// Commands issued, by action name (`Cordon`, `Evict`, ...).
    commands: Mutex<BTreeMap<String, u64>>,
    /// Non-2xx answers and unreachable clusters, by code (`429`, `unreachable`).
    api_errors: Mutex<BTreeMap<String, u64>>,
    pub leader: AtomicBool,
    /// The journal cannot be written (a full disk): nothing is applied or done; `/readyz`
    /// answers 503 until it is writable again.
    pub journal_unwritable: AtomicBool,
    /// Times the journal became unwritable.
    pub journal_failures: AtomicU64,
    /// Requests sent to the clusters, through their throttles.
    pub api_requests: AtomicU64,
    /// Time requests waited for their cluster's token bucket, in total.
    pub api_throttled_ms: AtomicU64,
    /// Answers by (code, method, cluster), as controller-runtime's REST client counts them.
    rest_requests: Mutex<BTreeMap<(String, String, String), u64>>,
    /// Arrivals waiting for the loop (the adapter's work queue) and arrivals ever queued.
    pub queue_depth: AtomicU64,
    pub queue_adds: AtomicU64,
    /// Unix time of the last journal append.
    pub last_commit_seconds: AtomicU64,
    /// What the engine last reported (refreshed at most once a second).
    engine: Mutex<EngineView>,
}

/// The engine's counters and gauges, as last read by the loop.
#[derive(Debug, Default, Clone)]
pub struct EngineView {
    pub counters: engine::metrics::Counters,
    pub gauges: engine::metrics::Gauges,
}

/// The phases whose deleting-Machine gauges are always exported (0 when none), so an alert
/// on them has a series to read.
const DELETING_PHASES: [&str; 5] = [
    "WaitingForPreDrainHook",
    "DrainingNode",
    "WaitingForVolumeDetach",
    "WaitingForPreTerminateHook",
    "WaitingForInfrastructureDeletion",
];

/// One metric family: name, `counter` or `gauge`, help text, and its samples (labels as
/// written between the name and the value, then the value).
pub(super) type Family = (&'static str, &'static str, &'static str, Vec<(String, f64)>);

/// `{a="x",b="y"}` with label values escaped as the text format wants.
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn one(value: f64) -> Vec<(String, f64)> {
    vec![(String::new(), value)]
}

fn bump(map: &Mutex<BTreeMap<String, u64>>, key: &str) {
    *map.lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_default() += 1;
}

impl Metrics {
    /// One journal record holding `inputs` inputs.
    pub fn record(&self, inputs: usize) {
        self.records.fetch_add(1, Ordering::Relaxed);
        self.inputs.fetch_add(inputs as u64, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_commit_seconds.store(now, Ordering::Relaxed);
    }
    pub fn command(&self, action: &str) {
        bump(&self.commands, action);
    }
    pub fn api_error(&self, code: &str) {
        bump(&self.api_errors, code);
    }
    /// A request went out.
    pub fn api_request(&self) {
        self.api_requests.fetch_add(1, Ordering::Relaxed);
    }
    /// A request waited `waited` for its cluster's token bucket.
    pub fn api_throttled(&self, waited: std::time::Duration) {
        let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        self.api_throttled_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// An answer from the API server of `cluster`.
    pub fn rest_request(&self, code: u16, method: &str, cluster: &str) {
        *self
            .rest_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((code.to_string(), method.to_string(), cluster.to_string()))
            .or_default() += 1;
    }

    /// What the engine reports now.
    pub fn engine_view(&self, view: EngineView) {
        *self.engine.lock().unwrap_or_else(|e| e.into_inner()) = view;
    }

    /// The journal became unwritable (`true`) or writable again.
    pub fn journal_unwritable(&self, unwritable: bool) {
        if unwritable && !self.journal_unwritable.swap(true, Ordering::Relaxed) {
            self.journal_failures.fetch_add(1, Ordering::Relaxed);
        }
        if !unwritable {
            self.journal_unwritable.store(false, Ordering::Relaxed);
        }
    }

    /// What `/readyz` answers: ready unless the journal is unwritable.
    pub fn readiness(&self) -> (u16, &'static str) {
        if self.journal_unwritable.load(Ordering::Relaxed) {
            (
                503,
                "not ready: the journal cannot be written (is the disk full?); not acting\n",
            )
        } else {
            (200, "ok\n")
        }
    }

    pub fn commands(&self, action: &str) -> u64 {
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(action)
            .copied()
            .unwrap_or(0)
    }

    /// The Prometheus text exposition of every metric, each family with its `# HELP` and
    /// `# TYPE`.
    pub fn render(&self) -> String {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64;
        let labelled = |m: &Mutex<BTreeMap<String, u64>>, label: &str| -> Vec<(String, f64)> {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(k, n)| (labels(&[(label, k)]), *n as f64))
                .collect()
        };
        let leader = f64::from(u8::from(self.leader.load(Ordering::Relaxed)));
        let mut families: Vec<Family> = vec![
            (
                "lifecycle_inputs_total",
                "counter",
                "Inputs the engine applied (watch events, answers, ticks), each batch member counted.",
                one(load(&self.inputs)),
            ),
            (
                "lifecycle_journal_records_total",
                "counter",
                "Records appended to the journal.",
                one(load(&self.records)),
            ),
            (
                "lifecycle_journal_last_commit_timestamp_seconds",
                "gauge",
                "Unix time of the last journal append (alert on its age while inputs arrive).",
                one(load(&self.last_commit_seconds)),
            ),
            (
                "lifecycle_commands_total",
                "counter",
                "Commands the controllers issued, by action.",
                labelled(&self.commands, "action"),
            ),
            (
                "lifecycle_api_errors_total",
                "counter",
                "API requests that did not succeed, by HTTP status (or unreachable).",
                labelled(&self.api_errors, "code"),
            ),
            (
                "lifecycle_api_requests_total",
                "counter",
                "Requests sent to the API servers (watches and lists included), all clusters.",
                one(load(&self.api_requests)),
            ),
            (
                "lifecycle_api_throttled_milliseconds_total",
                "counter",
                "Time requests waited for their cluster's rate limit (--kube-api-qps/--kube-api-burst), in total.",
                one(load(&self.api_throttled_ms)),
            ),
            (
                "lifecycle_journal_writable",
                "gauge",
                "1 while the journal takes appends; 0 while it cannot (a full disk): nothing is applied or done then.",
                one(f64::from(u8::from(
                    !self.journal_unwritable.load(Ordering::Relaxed),
                ))),
            ),
            (
                "lifecycle_journal_failures_total",
                "counter",
                "Journal appends or snapshots that failed.",
                one(load(&self.journal_failures)),
            ),
            (
                "lifecycle_leader",
                "gauge",
                "1 while this process holds the leader Lease (or runs without leader election).",
                one(leader),
            ),
            (
                "leader_election_master_status",
                "gauge",
                "controller-runtime's name: 1 while this process is the leader.",
                vec![(labels(&[("name", "lifecycle-controller")]), leader)],
            ),
            (
                "rest_client_requests_total",
                "counter",
                "Answers from the API servers by HTTP code, method and cluster (host: `management` or the workload cluster's namespace/name).",
                self.rest_requests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|((code, method, host), n)| {
                        (
                            labels(&[("code", code), ("method", method), ("host", host)]),
                            *n as f64,
                        )
                    })
                    .collect(),
            ),
            (
                "workqueue_depth",
                "gauge",
                "Arrivals (watch events, answers) waiting for the loop.",
                vec![(labels(&[("name", "lifecycle")]), load(&self.queue_depth))],
            ),
            (
                "workqueue_adds_total",
                "counter",
                "Arrivals queued for the loop.",
                vec![(labels(&[("name", "lifecycle")]), load(&self.queue_adds))],
            ),
        ];
        families.extend(self.engine_families());
        families.extend(super::process::families());
        let mut out = String::new();
        for (name, kind, help, samples) in families {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, value) in samples {
                out.push_str(&format!("{name}{labels} {value}\n"));
            }
        }
        out
    }

    /// Reconciles per controller, deleting Machines by phase, each MHC's counts.
    fn engine_families(&self) -> Vec<Family> {
        let view = self
            .engine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let per_controller = |counts: &[u64; 3], extra: &[(&str, &str)]| -> Vec<(String, f64)> {
            engine::metrics::CONTROLLER_NAMES
                .iter()
                .zip(counts)
                .map(|(name, n)| {
                    let mut pairs = vec![("controller", *name)];
                    pairs.extend_from_slice(extra);
                    (labels(&pairs), *n as f64)
                })
                .collect()
        };
        let mut phases: BTreeMap<String, engine::metrics::PhaseGauge> = DELETING_PHASES
            .iter()
            .map(|p| (p.to_string(), Default::default()))
            .collect();
        phases.extend(view.gauges.deleting.clone());
        let by_phase = |f: &dyn Fn(&engine::metrics::PhaseGauge) -> f64| -> Vec<(String, f64)> {
            phases
                .iter()
                .map(|(p, g)| (labels(&[("phase", p)]), f(g)))
                .collect()
        };
        let by_mhc = |f: &dyn Fn(&engine::metrics::MhcGauge) -> i64| -> Vec<(String, f64)> {
            view.gauges
                .mhcs
                .iter()
                .map(|m| (labels(&[("mhc", &m.name)]), f(m) as f64))
                .collect()
        };
        vec![
            (
                "controller_runtime_reconcile_total",
                "counter",
                "Reconciles: one controller pass over one object key, by controller.",
                per_controller(&view.counters.reconciles, &[("result", "success")]),
            ),
            (
                "controller_runtime_reconcile_errors_total",
                "counter",
                "Commands whose API call failed, by the controller that issued them.",
                per_controller(&view.counters.errors, &[]),
            ),
            (
                "lifecycle_machines_deleting",
                "gauge",
                "Machines being deleted, by phase (the Deleting condition's reason; Pending before the first).",
                by_phase(&|g| g.machines as f64),
            ),
            (
                "lifecycle_machine_deleting_oldest_seconds",
                "gauge",
                "Seconds since the oldest Machine in each deletion phase started deleting (0 when none).",
                by_phase(&|g| g.oldest_seconds as f64),
            ),
            (
                "lifecycle_mhc_expected_machines",
                "gauge",
                "MachineHealthCheck status.expectedMachines, by MHC (namespace/name).",
                by_mhc(&|m| m.expected),
            ),
            (
                "lifecycle_mhc_current_healthy",
                "gauge",
                "MachineHealthCheck status.currentHealthy, by MHC.",
                by_mhc(&|m| m.healthy),
            ),
            (
                "lifecycle_mhc_remediations_allowed",
                "gauge",
                "MachineHealthCheck status.remediationsAllowed, by MHC (0 while short-circuited).",
                by_mhc(&|m| m.remediations_allowed),
            ),
        ]
    }
}

/// Serves `/healthz` and `/metrics` on `addr` until the task is aborted; returns the bound
/// address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let metrics = metrics.clone();
                    async move {
                        let (code, body) = match req.uri().path() {
                            "/healthz" | "/livez" => (200, "ok\n".to_string()),
                            "/readyz" => {
                                let (code, body) = metrics.readiness();
                                (code, body.to_string())
                            }
                            "/metrics" => (200, metrics.render()),
                            _ => (404, "not found\n".to_string()),
                        };
                        Ok::<_, Infallible>(
                            hyper::Response::builder()
                                .status(code)
                                .header("content-type", "text/plain; version=0.0.4")
                                .body(Full::new(Bytes::from(body)))
                                .expect("static headers are valid"),
                        )
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let metrics = Metrics::default();
        metrics.command("Evict");
        metrics.api_error("429");
        let text = metrics.render();
        let mut described = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                assert!(!help.is_empty(), "{line}");
                described.insert(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(described.contains(name), "TYPE before HELP: {line}");
                assert!(["counter", "gauge"].contains(&kind), "{line}");
            } else {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(described.contains(name), "a sample without HELP: {line}");
            }
        }
        assert!(
            text.contains("lifecycle_commands_total{action=\"Evict\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("lifecycle_api_errors_total{code=\"429\"} 1\n"),
            "{text}"
        );
        for name in [
            "lifecycle_commands_total",
            "controller_runtime_reconcile_total",
            "controller_runtime_reconcile_errors_total",
            "rest_client_requests_total",
            "workqueue_depth",
            "workqueue_adds_total",
            "leader_election_master_status",
            "lifecycle_machines_deleting",
            "lifecycle_machine_deleting_oldest_seconds",
            "lifecycle_mhc_remediations_allowed",
            "process_resident_memory_bytes",
        ] {
            assert!(described.contains(name), "{name} missing:\n{text}");
        }
        // Every deletion phase an alert reads has a series, 0 when no Machine is in it.
        assert!(
            text.contains("lifecycle_machines_deleting{phase=\"DrainingNode\"} 0\n"),
            "{text}"
        );
    }

    /// `/readyz` is 503 while the journal cannot be written; `/healthz` stays 200 (the process
    /// is alive and must not be killed for a full disk); the gauge and counter say so.
    #[tokio::test]
    async fn readyz_is_503_while_the_journal_cannot_be_written() {
        let metrics = Arc::new(Metrics::default());
        let (addr, server) = serve("127.0.0.1:0".parse().unwrap(), metrics.clone())
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
}
