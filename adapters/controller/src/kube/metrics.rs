//! What the adapter counts, written for `/metrics` (OpenMetrics through `prometheus-client`,
//! or the text format derived from it: [`super::serving::exposition`]), and what `/readyz`
//! answers. The servers are in [`super::serving`].

use super::serving::exposition::{Format, text_from_openmetrics};
use engine::intake::streams::{management_streams, workload_streams};
use engine::metrics::{CONTROLLER_NAMES, DRAIN_BLOCKED_REASONS, ReconcileObserver};
use engine::runtime::Mode;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A sample's labels, in the order they are written.
pub type Labels = Vec<(&'static str, String)>;

/// One family read at scrape time: name (counters without `_total`), type, help, samples.
pub(super) type ScrapedFamily = (&'static str, MetricType, &'static str, Vec<(Labels, f64)>);

type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// The work queue's name label (controller-runtime names one queue per controller; the
/// adapter has one).
const QUEUE: &str = "lifecycle";

/// The phases whose deleting-Machine gauges are always exported (0 when none), so an alert
/// on them has a series to read.
const DELETING_PHASES: [&str; 5] = [
    "WaitingForPreDrainHook",
    "DrainingNode",
    "WaitingForVolumeDetach",
    "WaitingForPreTerminateHook",
    "WaitingForInfrastructureDeletion",
];

/// 10 µs to 2.6 s: a reconcile is a pure pass over the cache, usually well under a millisecond.
fn reconcile_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 4.0, 10))
}

/// 100 µs to 105 s: an arrival waits for the journal's fsync and the batch before it.
fn queue_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 4.0, 11))
}

/// What the adapter counts. Shared by the loop, the executors and the HTTP server.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Inputs applied, counting each input of a batch.
    inputs: Counter,
    /// Journal records (a batch of queued inputs is one).
    records: Counter,
    journal_failures: Counter,
    /// Commands issued, by action name (`Cordon`, `Evict`, ...).
    commands: Family<Labels, Counter>,
    /// Commands decided and not sent (`--mode shadow`), by action name.
    commands_withheld: Family<Labels, Counter>,
    /// Shadow mode's disagreements with what was done, by controller, step and side.
    shadow_disagreements: Family<Labels, Counter>,
    /// Objects delivered that the controllers cannot read, by kind (each delivery counted).
    unreadable_objects: Family<Labels, Counter>,
    /// Of those, dropped unreported: more arrived at once than the loop keeps.
    unreadable_dropped: Counter,
    /// Non-2xx answers and unreachable clusters, by code (`429`, `unreachable`).
    api_errors: Family<Labels, Counter>,
    /// Requests sent to the clusters, through their throttles.
    api_requests: Counter,
    api_throttled: Counter<f64, AtomicU64>,
    /// Answers by (code, method, cluster), as controller-runtime's REST client counts them.
    rest_requests: Family<Labels, Counter>,
    queue_depth: Family<Labels, Gauge>,
    queue_adds: Family<Labels, Counter>,
    /// The release CAPI's manager runs and its judgement: one series, 1.
    capi_release: Family<Labels, Gauge>,
    queue_duration: Histograms,
    reconcile_time: Histograms,
    /// What is read when scraped: leadership, the journal's state, the engine's view.
    state: Arc<State>,
}

/// The part of [`Metrics`] read at scrape time.
#[derive(Debug, Default)]
struct State {
    leader: AtomicBool,
    /// The mode this process runs in (`None` until told).
    mode: Mutex<Option<Mode>>,
    /// The journal cannot be written (a full disk): nothing is applied or done; `/readyz`
    /// answers 503 until it is writable again.
    journal_unwritable: AtomicBool,
    /// Unix time of the last journal append.
    last_commit_seconds: AtomicU64,
    /// What the engine last reported (refreshed at most once a second).
    engine: Mutex<EngineView>,
    /// When it was last refreshed.
    engine_view_at: Mutex<Option<std::time::Instant>>,
}

/// How often `/metrics` gets the engine's counters and gauges.
pub const ENGINE_VIEW_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The engine's counters and gauges, as last read by the loop.
#[derive(Debug, Default, Clone)]
pub struct EngineView {
    pub counters: engine::metrics::Counters,
    pub gauges: engine::metrics::Gauges,
}

/// The kinds whose writes a fight can hold ([`engine::fight`]): the objects the controllers
/// write to.
const WRITES_HELD_KINDS: [&str; 4] = ["Machine", "Node", "MachineHealthCheck", "MachinePool"];

fn label(key: &'static str, value: &str) -> Labels {
    vec![(key, value.to_string())]
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            inputs: Counter::default(),
            records: Counter::default(),
            journal_failures: Counter::default(),
            commands: Family::default(),
            commands_withheld: Family::default(),
            shadow_disagreements: Family::default(),
            unreadable_objects: Family::default(),
            unreadable_dropped: Counter::default(),
            api_errors: Family::default(),
            api_requests: Counter::default(),
            api_throttled: Counter::default(),
            rest_requests: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            capi_release: Family::default(),
            queue_duration: Family::new_with_constructor(queue_buckets),
            reconcile_time: Family::new_with_constructor(reconcile_buckets),
            state: Arc::default(),
        };
        // Series an alert or dashboard reads exist from the start.
        drop(m.queue_depth.get_or_create(&label("name", QUEUE)));
        drop(m.queue_adds.get_or_create(&label("name", QUEUE)));
        drop(m.queue_duration.get_or_create(&label("name", QUEUE)));
        for name in CONTROLLER_NAMES {
            drop(m.reconcile_time.get_or_create(&label("controller", name)));
        }
        // The kinds every run watches (the management cluster's, and Nodes).
        let any_cluster = engine::model::Scope::Workload(engine::model::ClusterName::new("", ""));
        let always = management_streams()
            .into_iter()
            .chain(workload_streams(&any_cluster));
        for key in always {
            drop(
                m.unreadable_objects
                    .get_or_create(&label("kind", &key.kind)),
            );
        }
        let r = &mut m.registry;
        r.register(
            "lifecycle_inputs",
            "Inputs the engine applied (watch events, answers, ticks), each batch member counted",
            m.inputs.clone(),
        );
        r.register(
            "lifecycle_journal_records",
            "Records appended to the journal",
            m.records.clone(),
        );
        r.register(
            "lifecycle_journal_failures",
            "Journal appends or snapshots that failed",
            m.journal_failures.clone(),
        );
        declare(
            r,
            "lifecycle_commands",
            "Commands the controllers issued, by action.",
            m.commands.clone(),
        );
        declare(
            r,
            "lifecycle_shadow_disagreements",
            "Shadow mode: steps of a Machine's deletion, and Machines marked unhealthy, that only this controller decided (side only-ours) or only someone else took (only-theirs) within 30 s, by controller (machine, machinehealthcheck), kind (the step), side and deviation (the product decision that explains it, none for a surprise).",
            m.shadow_disagreements.clone(),
        );
        declare(
            r,
            "lifecycle_commands_withheld",
            "Commands the controllers decided and did not send (--mode shadow), by action.",
            m.commands_withheld.clone(),
        );
        r.register(
            "lifecycle_unreadable_objects",
            "Objects the API delivered (watch events, list items) that the controllers cannot read, by kind: each is held as unknown, its last good reading kept",
            m.unreadable_objects.clone(),
        );
        r.register(
            "lifecycle_unreadable_objects_dropped",
            "Unreadable objects not counted by kind nor reported: more were read at once than the loop keeps for its driver",
            m.unreadable_dropped.clone(),
        );
        declare(
            r,
            "lifecycle_api_errors",
            "API requests that did not succeed, by HTTP status (or unreachable).",
            m.api_errors.clone(),
        );
        r.register(
            "lifecycle_api_requests",
            "Requests sent to the API servers (watches and lists included), all clusters",
            m.api_requests.clone(),
        );
        r.register(
            "lifecycle_api_throttled_seconds",
            "Time requests waited for their cluster's rate limit (--kube-api-qps/--kube-api-burst), in total",
            m.api_throttled.clone(),
        );
        declare(
            r,
            "rest_client_requests",
            "Answers from the API servers by HTTP code, method and cluster (host: `management` or the workload cluster's namespace/name).",
            m.rest_requests.clone(),
        );
        declare(
            r,
            "lifecycle_capi_release",
            "The release Cluster API's manager runs, as read from its Deployment's image (or --capi-version), and whether this build supports it (support: supported, unknown, unsupported); 1 for the current one. Read every 30 s beside CAPI (shadow and takeover)",
            m.capi_release.clone(),
        );
        r.register(
            "workqueue_depth",
            "Arrivals (watch events, answers) waiting for the loop",
            m.queue_depth.clone(),
        );
        r.register(
            "workqueue_adds",
            "Arrivals queued for the loop",
            m.queue_adds.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long an arrival waited between its watch or answer and being applied (journal fsync included)",
            m.queue_duration.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Time of one reconcile (one controller pass over one object key), by controller",
            m.reconcile_time.clone(),
        );
        r.register_collector(Box::new(Scraped(m.state.clone())));
        m
    }

    /// One journal record holding `inputs` inputs.
    pub fn record(&self, inputs: usize) {
        self.records.inc();
        self.inputs.inc_by(inputs as u64);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.state.last_commit_seconds.store(now, Ordering::Relaxed);
    }
    pub fn command(&self, action: &str) {
        self.commands.get_or_create(&label("action", action)).inc();
    }
    pub fn shadow_disagreement(&self, d: &engine::shadow::Disagreement) {
        let deviation = d
            .deviation
            .map_or("none".to_string(), |v| v.decision().to_string());
        self.shadow_disagreements
            .get_or_create(&vec![
                ("controller", d.step.controller().to_string()),
                ("kind", d.step.as_str().to_string()),
                ("side", d.side.as_str().to_string()),
                ("deviation", deviation),
            ])
            .inc();
    }
    pub fn command_withheld(&self, action: &str) {
        self.commands_withheld
            .get_or_create(&label("action", action))
            .inc();
    }
    /// An object that does not read was delivered; `dropped_total`: those dropped unreported
    /// since the start, as the loop counts them.
    pub fn unreadable(&self, object: &engine::intake::mirror::Unreadable, dropped_total: u64) {
        self.unreadable_objects
            .get_or_create(&label("kind", object.kind.name()))
            .inc();
        let counted = self.unreadable_dropped.get();
        self.unreadable_dropped
            .inc_by(dropped_total.saturating_sub(counted));
    }
    pub fn api_error(&self, code: &str) {
        self.api_errors.get_or_create(&label("code", code)).inc();
    }
    /// A request went out.
    pub fn api_request(&self) {
        self.api_requests.inc();
    }
    /// A request waited `waited` for its cluster's token bucket.
    pub fn api_throttled(&self, waited: Duration) {
        self.api_throttled.inc_by(waited.as_secs_f64());
    }

    /// An answer from the API server of `cluster`.
    pub fn rest_request(&self, code: u16, method: &str, cluster: &str) {
        let labels = vec![
            ("code", code.to_string()),
            ("method", method.to_string()),
            ("host", cluster.to_string()),
        ];
        self.rest_requests.get_or_create(&labels).inc();
    }

    /// CAPI's manager now runs `release`, judged `support`.
    pub fn set_capi_release(&self, release: &str, support: &str) {
        self.capi_release.clear();
        let labels = vec![
            ("release", release.to_string()),
            ("support", support.to_string()),
        ];
        self.capi_release.get_or_create(&labels).set(1);
    }

    pub fn set_leader(&self, leader: bool) {
        self.state.leader.store(leader, Ordering::Relaxed);
    }

    /// Metrics of a process running in `mode` (`lifecycle_info`; whether the Machines carrying
    /// this controller's hooks are served here).
    pub fn with_mode(mode: Mode) -> Self {
        let metrics = Self::new();
        metrics.set_mode(mode);
        metrics
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.state.mode.lock().unwrap_or_else(|e| e.into_inner()) = Some(mode);
    }

    /// Arrivals waiting for the loop now.
    pub fn set_queue_depth(&self, depth: usize) {
        let depth = i64::try_from(depth).unwrap_or(i64::MAX);
        self.queue_depth
            .get_or_create(&label("name", QUEUE))
            .set(depth);
    }

    /// An arrival reached the loop's queue.
    pub fn queue_add(&self) {
        self.queue_adds.get_or_create(&label("name", QUEUE)).inc();
    }

    /// An arrival was applied `waited` after it was queued.
    pub fn queued_for(&self, waited: Duration) {
        self.queue_duration
            .get_or_create(&label("name", QUEUE))
            .observe(waited.as_secs_f64());
    }

    /// Times the engine's reconciles into `controller_runtime_reconcile_time_seconds`.
    pub fn reconcile_observer(&self) -> Arc<dyn ReconcileObserver> {
        Arc::new(ReconcileTimer {
            histograms: self.reconcile_time.clone(),
            began: Mutex::new(None),
        })
    }

    /// Takes the engine's counters and gauges for `/metrics`, at most once every
    /// [`ENGINE_VIEW_INTERVAL`] (the gauges walk every Machine).
    pub fn offer_engine_view(&self, engine: Option<&engine::Engine>, now: engine::Timestamp) {
        let Some(engine) = engine else {
            return;
        };
        {
            let mut at = self
                .state
                .engine_view_at
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if at.is_some_and(|at| at.elapsed() < ENGINE_VIEW_INTERVAL) {
                return;
            }
            *at = Some(std::time::Instant::now());
        }
        self.engine_view(EngineView {
            counters: engine.counters().clone(),
            gauges: engine.gauges(now),
        });
    }

    /// What the engine reports now.
    pub fn engine_view(&self, view: EngineView) {
        *self.state.engine.lock().unwrap_or_else(|e| e.into_inner()) = view;
    }

    /// The journal became unwritable (`true`) or writable again.
    pub fn journal_unwritable(&self, unwritable: bool) {
        if unwritable && !self.state.journal_unwritable.swap(true, Ordering::Relaxed) {
            self.journal_failures.inc();
        }
        if !unwritable {
            self.state
                .journal_unwritable
                .store(false, Ordering::Relaxed);
        }
    }

    /// What `/readyz` answers: ready unless the journal is unwritable.
    pub fn readiness(&self) -> (u16, &'static str) {
        if self.state.journal_unwritable.load(Ordering::Relaxed) {
            (
                503,
                "not ready: the journal cannot be written (is the disk full?); not acting\n",
            )
        } else {
            (200, "ok\n")
        }
    }

    /// Requests sent so far.
    pub fn api_requests(&self) -> u64 {
        self.api_requests.get()
    }

    /// Time requests waited for their token buckets so far.
    pub fn api_throttled_seconds(&self) -> f64 {
        self.api_throttled.get()
    }

    pub fn commands(&self, action: &str) -> u64 {
        self.commands.get_or_create(&label("action", action)).get()
    }

    /// The OpenMetrics text exposition of every metric, each family with its `# HELP` and
    /// `# TYPE`, ending with `# EOF`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!("cannot encode /metrics: {e}");
        }
        out
    }

    /// Every metric in `format`.
    pub fn render_as(&self, format: Format) -> String {
        match format {
            Format::OpenMetrics => self.render(),
            Format::Text => text_from_openmetrics(&self.render()),
        }
    }
}

/// Times each reconcile: the engine reports its start and end on the loop's thread, one at a
/// time.
#[derive(Debug)]
struct ReconcileTimer {
    histograms: Histograms,
    began: Mutex<Option<Instant>>,
}

impl ReconcileObserver for ReconcileTimer {
    fn began(&self, _controller: usize) {
        *self.began.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
    fn ended(&self, controller: usize) {
        let began = self.began.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (Some(began), Some(name)) = (began, CONTROLLER_NAMES.get(controller)) else {
            return;
        };
        self.histograms
            .get_or_create(&label("controller", name))
            .observe(began.elapsed().as_secs_f64());
    }
}

/// Registers `metric` so its `# HELP` and `# TYPE` are written even while it has no sample (a
/// labelled family before its first count): the registry leaves an empty family out, and a
/// dashboard or alert should find every family from the start.
fn declare<M>(registry: &mut Registry, name: &'static str, help: &'static str, metric: M)
where
    M: EncodeMetric + std::fmt::Debug + Send + Sync + 'static,
{
    registry.register_collector(Box::new(Declared { name, help, metric }));
}

#[derive(Debug)]
struct Declared<M> {
    name: &'static str,
    help: &'static str,
    metric: M,
}

impl<M: EncodeMetric + std::fmt::Debug + Send + Sync + 'static> Collector for Declared<M> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family =
            encoder.encode_descriptor(self.name, self.help, None, self.metric.metric_type())?;
        self.metric.encode(family)
    }
}

/// The families read when scraped: leadership, the journal, the engine's view, the process.
#[derive(Debug)]
struct Scraped(Arc<State>);

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, kind, help, samples) in self.families() {
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            match samples.as_slice() {
                [(labels, value)] if labels.is_empty() => encode_value(kind, *value, family)?,
                _ => {
                    for (labels, value) in &samples {
                        encode_value(kind, *value, family.encode_family(labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn encode_value(
    kind: MetricType,
    value: f64,
    sample: prometheus_client::encoding::MetricEncoder,
) -> Result<(), std::fmt::Error> {
    // Whole numbers (counts, ages in seconds) are written as integers.
    let whole = value.fract() == 0.0 && value.abs() < 9.0e15;
    match kind {
        MetricType::Counter if whole && value >= 0.0 => {
            ConstCounter::new(value as u64).encode(sample)
        }
        MetricType::Counter => ConstCounter::new(value).encode(sample),
        _ if whole => ConstGauge::new(value as i64).encode(sample),
        _ => ConstGauge::new(value).encode(sample),
    }
}

impl Scraped {
    fn mode(&self) -> Option<Mode> {
        *self.0.mode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this process finishes the deletions its hooks hold: the leader in takeover, or
    /// alone (which never waits for its own hooks and removes the finalizer itself); never a
    /// shadow, which sends nothing.
    fn serves_own_hooks(&self) -> bool {
        let finishes = matches!(self.mode(), Some(Mode::Takeover | Mode::Alone));
        finishes && self.0.leader.load(Ordering::Relaxed)
    }

    fn families(&self) -> Vec<ScrapedFamily> {
        let state = &self.0;
        let leader = f64::from(u8::from(state.leader.load(Ordering::Relaxed)));
        let one = |v: f64| vec![(Labels::new(), v)];
        let mut families: Vec<ScrapedFamily> = vec![
            (
                "lifecycle_journal_last_commit_timestamp_seconds",
                MetricType::Gauge,
                "Unix time of the last journal append (alert on its age while inputs arrive).",
                one(state.last_commit_seconds.load(Ordering::Relaxed) as f64),
            ),
            (
                "lifecycle_journal_writable",
                MetricType::Gauge,
                "1 while the journal takes appends; 0 while it cannot (a full disk): nothing is applied or done then.",
                one(f64::from(u8::from(
                    !state.journal_unwritable.load(Ordering::Relaxed),
                ))),
            ),
            (
                "lifecycle_leader",
                MetricType::Gauge,
                "1 while this process holds the leader Lease (or runs without leader election).",
                one(leader),
            ),
            (
                "leader_election_master_status",
                MetricType::Gauge,
                "controller-runtime's name: 1 while this process is the leader.",
                vec![(label("name", "lifecycle-controller"), leader)],
            ),
            (
                "lifecycle_info",
                MetricType::Gauge,
                "1, labelled with the mode this process runs in (alone, shadow, takeover) and its version.",
                self.mode().map_or_else(Vec::new, |mode| {
                    let labels = vec![
                        ("mode", mode.as_str().to_string()),
                        ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ];
                    vec![(labels, 1.0)]
                }),
            ),
        ];
        families.extend(self.engine_families());
        families.extend(super::process::families());
        families
    }

    /// Reconciles per controller, deleting Machines by phase, blocked pods, hooks, each MHC.
    fn engine_families(&self) -> Vec<ScrapedFamily> {
        let view = self
            .0
            .engine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let per_controller = |counts: &[u64], extra: &[(&'static str, &str)]| {
            CONTROLLER_NAMES
                .iter()
                .zip(counts)
                .map(|(name, n)| {
                    let mut labels = label("controller", name);
                    labels.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
                    (labels, *n as f64)
                })
                .collect()
        };
        let mut phases: BTreeMap<String, engine::metrics::PhaseGauge> = DELETING_PHASES
            .iter()
            .map(|p| (p.to_string(), Default::default()))
            .collect();
        phases.extend(view.gauges.deleting.clone());
        let by_phase = |f: &dyn Fn(&engine::metrics::PhaseGauge) -> f64| {
            phases
                .iter()
                .map(|(p, g)| (label("phase", p), f(g)))
                .collect()
        };
        let by_mhc = |f: &dyn Fn(&engine::metrics::MhcGauge) -> i64| {
            view.gauges
                .mhcs
                .iter()
                .map(|m| (label("mhc", &m.name), f(m) as f64))
                .collect()
        };
        let blocked = DRAIN_BLOCKED_REASONS
            .iter()
            .map(|reason| {
                let n = view.gauges.drain_blocked.get(reason).copied().unwrap_or(0);
                (label("reason", reason), n as f64)
            })
            .collect();
        let hooks = view
            .gauges
            .hooks_waiting
            .iter()
            .map(|((stage, name), n)| {
                (
                    vec![("stage", stage.to_string()), ("hook", name.clone())],
                    *n as f64,
                )
            })
            .collect();
        // Every kind a fight can hold, 0 included: the alert reads the series, not its absence.
        let held = WRITES_HELD_KINDS
            .iter()
            .map(|kind| {
                let n = view.gauges.writes_held.get(*kind).copied().unwrap_or(0);
                (label("kind", kind), n as f64)
            })
            .collect();
        let served = self.serves_own_hooks().to_string();
        let own = view.gauges.own_hooked;
        let hooked = [("true", own.deleting), ("false", own.not_deleting)]
            .into_iter()
            .map(|(deleting, n)| {
                let labels = vec![
                    ("deleting", deleting.to_string()),
                    ("served", served.clone()),
                ];
                (labels, n as f64)
            })
            .collect();
        let counters = &view.counters;
        let successes: Vec<u64> = counters
            .reconciles
            .iter()
            .zip(&counters.errors)
            .map(|(all, errors)| all.saturating_sub(*errors))
            .collect();
        let mut reconciles: Vec<(Labels, f64)> =
            per_controller(&successes, &[("result", "success")]);
        reconciles.extend(per_controller(&counters.errors, &[("result", "error")]));
        vec![
            (
                "controller_runtime_reconcile",
                MetricType::Counter,
                "Reconciles: one controller pass over one object key, by controller and result (error: the pass handled a command of its own that failed with an API error).",
                reconciles,
            ),
            (
                "controller_runtime_reconcile_errors",
                MetricType::Counter,
                "Reconciles that handled a command of their own that failed with an API error, by controller (as result=\"error\").",
                per_controller(&counters.errors, &[]),
            ),
            (
                "lifecycle_reconcile_budget_exhausted",
                MetricType::Counter,
                "Inputs whose reconciles ran out of the per-input budget (a bug): the keys left were carried to the next input.",
                vec![(
                    Labels::new(),
                    view.counters.reconcile_budget_exhausted as f64,
                )],
            ),
            (
                "lifecycle_machines_deleting",
                MetricType::Gauge,
                "Machines being deleted, by phase (the Deleting condition's reason; Pending before the first).",
                by_phase(&|g| g.machines as f64),
            ),
            (
                "lifecycle_machine_deleting_oldest_seconds",
                MetricType::Gauge,
                "Seconds since the oldest Machine in each deletion phase started deleting (0 when none).",
                by_phase(&|g| g.oldest_seconds as f64),
            ),
            (
                "lifecycle_drain_blocked_pods",
                MetricType::Gauge,
                "Pods on draining Nodes that cannot be evicted now, by reason (PodDisruptionBudget, NamespaceTerminating, EvictionFailed; WaitingForDeletion: evicted, not gone yet).",
                blocked,
            ),
            (
                "lifecycle_hooks_waiting",
                MetricType::Gauge,
                "Deleting Machines a lifecycle hook holds now, by stage (pre-drain, pre-terminate) and hook name (the annotation's suffix).",
                hooks,
            ),
            (
                "lifecycle_hooked_machines",
                MetricType::Gauge,
                "Machines carrying this controller's own deletion hooks, by deleting (true: Cluster API's manager waits at a hook) and served (true: this process is the leader in takeover or alone and finishes them; false in shadow, or a standby). deleting=\"true\",served=\"false\" above 0 is the alert LifecycleHookedMachinesNotServed.",
                hooked,
            ),
            (
                "lifecycle_writes_held",
                MetricType::Gauge,
                "Objects this controller holds its writes to because another writer undid them 3 times within 5 minutes (a second manager: Cluster API's beside --mode alone, or a second copy of this controller), by kind. Above 0 is the alert LifecycleWritesHeld.",
                held,
            ),
            (
                "lifecycle_mhc_expected_machines",
                MetricType::Gauge,
                "MachineHealthCheck status.expectedMachines, by MHC (namespace/name).",
                by_mhc(&|m| m.expected),
            ),
            (
                "lifecycle_mhc_current_healthy",
                MetricType::Gauge,
                "MachineHealthCheck status.currentHealthy, by MHC.",
                by_mhc(&|m| m.healthy),
            ),
            (
                "lifecycle_mhc_remediations_allowed",
                MetricType::Gauge,
                "MachineHealthCheck status.remediationsAllowed, by MHC (0 while short-circuited).",
                by_mhc(&|m| m.remediations_allowed),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The family a sample belongs to: its name without the suffix its type adds.
    fn family_of<'a>(sample: &'a str, described: &BTreeMap<String, String>) -> Option<&'a str> {
        let name = sample.split(['{', ' ']).next()?;
        let suffixes = ["", "_total", "_bucket", "_sum", "_count"];
        suffixes.iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            let kind = described.get(base)?;
            let fits = match *suffix {
                "" => kind == "gauge",
                "_total" => kind == "counter",
                _ => kind == "histogram",
            };
            fits.then_some(base)
        })
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let metrics = Metrics::default();
        metrics.command("Evict");
        metrics.api_error("429");
        metrics.rest_request(200, "GET", "management");
        let timer = metrics.reconcile_observer();
        timer.began(0);
        timer.ended(0);
        metrics.queued_for(Duration::from_millis(3));
        let text = metrics.render();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let mut helped = std::collections::BTreeSet::new();
        let mut described = BTreeMap::new();
        for line in text.lines().filter(|l| *l != "# EOF") {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                assert!(!help.is_empty(), "{line}");
                helped.insert(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(helped.contains(name), "TYPE before HELP: {line}");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                described.insert(name.to_string(), kind.to_string());
            } else {
                assert!(
                    family_of(line, &described).is_some(),
                    "a sample without HELP and TYPE: {line}"
                );
            }
        }
        for line in [
            "lifecycle_commands_total{action=\"Evict\"} 1",
            "lifecycle_api_errors_total{code=\"429\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"machine\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"machinepool\"} 0",
            "workqueue_queue_duration_seconds_count{name=\"lifecycle\"} 1",
            "workqueue_queue_duration_seconds_bucket{le=\"0.0064\",name=\"lifecycle\"} 1",
            "workqueue_queue_duration_seconds_bucket{le=\"0.0016\",name=\"lifecycle\"} 0",
            // Every deletion phase and blocked-pod reason an alert reads has a series.
            "lifecycle_machines_deleting{phase=\"DrainingNode\"} 0",
            "lifecycle_drain_blocked_pods{reason=\"PodDisruptionBudget\"} 0",
            "lifecycle_reconcile_budget_exhausted_total 0",
            "lifecycle_unreadable_objects_total{kind=\"Node\"} 0",
            "lifecycle_unreadable_objects_total{kind=\"MachineHealthCheck\"} 0",
            "lifecycle_unreadable_objects_dropped_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        for name in [
            "lifecycle_commands",
            "controller_runtime_reconcile",
            "controller_runtime_reconcile_errors",
            "controller_runtime_reconcile_time_seconds",
            "rest_client_requests",
            "workqueue_depth",
            "workqueue_adds",
            "workqueue_queue_duration_seconds",
            "leader_election_master_status",
            "lifecycle_machines_deleting",
            "lifecycle_machine_deleting_oldest_seconds",
            "lifecycle_drain_blocked_pods",
            "lifecycle_hooks_waiting",
            "lifecycle_hooked_machines",
            "lifecycle_writes_held",
            "lifecycle_info",
            "lifecycle_shadow_disagreements",
            "lifecycle_commands_withheld",
            "lifecycle_mhc_remediations_allowed",
            "process_resident_memory_bytes",
            "process_cpu_seconds",
        ] {
            assert!(described.contains_key(name), "{name} missing:\n{text}");
        }
    }

    /// Each unreadable object counts under its stream's kind; the loop's dropped total is
    /// carried over as it grows, never counted twice.
    #[test]
    fn unreadable_objects_are_counted_by_kind_and_drops_once() {
        let metrics = Metrics::default();
        let kind =
            engine::model::Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "FooMachine");
        let u = engine::intake::mirror::Unreadable {
            scope: engine::model::Scope::Management,
            kind,
            object: Arc::new(serde_json::json!({})),
            error: engine::convert::ConvertError::new("spec", "missing"),
        };
        metrics.unreadable(&u, 3);
        metrics.unreadable(&u, 3);
        metrics.unreadable(&u, 5);
        let text = metrics.render();
        for line in [
            "lifecycle_unreadable_objects_total{kind=\"FooMachine\"} 3",
            "lifecycle_unreadable_objects_dropped_total 5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }

    /// Reconciles by result: errors are the engine's reconcile errors, successes the rest;
    /// `controller_runtime_reconcile_errors_total` counts the errors too.
    #[test]
    fn reconciles_are_counted_by_result() {
        let metrics = Metrics::default();
        let mut view = EngineView::default();
        view.counters.reconciles[0] = 7;
        view.counters.errors[0] = 2;
        metrics.engine_view(view);
        let text = metrics.render();
        for line in [
            "controller_runtime_reconcile_total{controller=\"machine\",result=\"success\"} 5",
            "controller_runtime_reconcile_total{controller=\"machine\",result=\"error\"} 2",
            "controller_runtime_reconcile_total{controller=\"machinepool\",result=\"error\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"machine\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }

    /// The `# TYPE` lines of `text`: family name → type.
    fn declared(text: &str) -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(name, kind)| (name.to_string(), kind.to_string()))
            .collect()
    }

    /// The metric names README.md's "Metrics" section lists (in backquotes, labels and a
    /// counter's `_total` dropped): what an operator is promised to find.
    fn readme_families() -> BTreeSet<String> {
        let readme = include_str!("../../../../README.md");
        let section = readme
            .split("\n## Metrics\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README.md has a Metrics section");
        let prefixes = [
            "lifecycle_",
            "controller_runtime_",
            "workqueue_",
            "rest_client_",
            "leader_election_",
            "process_",
        ];
        section
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|quoted| quoted.split('{').next().unwrap_or(quoted))
            .filter(|name| prefixes.iter().any(|p| name.starts_with(p)))
            .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .filter(|name| !name.ends_with('_'))
            .map(|name| name.strip_suffix("_total").unwrap_or(name).to_string())
            .collect()
    }

    /// Found beside CAPI's manager: `lifecycle_shadow_disagreements_total` was absent from a
    /// fresh controller's page, not even its HELP and TYPE, until the first disagreement. Every
    /// family README.md lists is declared by a controller that has counted nothing yet (scraped
    /// within a tokio runtime, as `/metrics` is).
    #[tokio::test]
    async fn every_family_the_readme_lists_is_declared_from_the_start() {
        let listed = readme_families();
        assert!(listed.len() >= 25, "{listed:?}");
        let fresh = declared(&Metrics::with_mode(Mode::Shadow).render());
        let missing: Vec<&String> = listed
            .iter()
            .filter(|name| !fresh.contains_key(*name))
            .collect();
        assert!(
            missing.is_empty(),
            "not declared from the start: {missing:?}"
        );
        let unlisted: Vec<&String> = fresh
            .keys()
            .filter(|name| !listed.contains(*name) && !name.starts_with("process_"))
            .filter(|name| !NOT_FOR_OPERATORS.contains(&name.as_str()))
            .collect();
        assert!(
            unlisted.is_empty(),
            "served, not in README.md: {unlisted:?}"
        );
    }

    /// Served for diagnosis and not documented as an operator's: the loop's own counts.
    const NOT_FOR_OPERATORS: [&str; 6] = [
        "lifecycle_inputs",
        "lifecycle_journal_records",
        "lifecycle_journal_failures",
        "lifecycle_api_requests",
        "lifecycle_leader",
        "lifecycle_unreadable_objects_dropped",
    ];

    /// `lifecycle_info` names the mode; the Machines carrying this controller's hooks are served
    /// only by a leader in takeover or alone (alone deletes them without waiting for its own
    /// hooks): a shadow or a standby process says it will not finish them.
    #[test]
    fn hooked_machines_are_served_only_by_a_leader_that_finishes_them() {
        let view = EngineView {
            gauges: engine::metrics::Gauges {
                own_hooked: engine::metrics::OwnHooked {
                    deleting: 2,
                    not_deleting: 5,
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let page = |mode: Mode, leader: bool| {
            let metrics = Metrics::with_mode(mode);
            metrics.set_leader(leader);
            metrics.engine_view(view.clone());
            metrics.render()
        };
        let has = |text: &str, line: &str| text.lines().any(|l| l == line);
        let version = env!("CARGO_PKG_VERSION");
        for mode in [Mode::Takeover, Mode::Alone] {
            let text = page(mode, true);
            let line = "lifecycle_hooked_machines{deleting=\"true\",served=\"true\"} 2";
            assert!(has(&text, line), "{mode}: {line} missing:\n{text}");
        }
        let takeover = page(Mode::Takeover, true);
        for line in [
            "lifecycle_hooked_machines{deleting=\"true\",served=\"true\"} 2".to_string(),
            "lifecycle_hooked_machines{deleting=\"false\",served=\"true\"} 5".to_string(),
            format!("lifecycle_info{{mode=\"takeover\",version=\"{version}\"}} 1"),
        ] {
            assert!(has(&takeover, &line), "{line} missing:\n{takeover}");
        }
        for (mode, leader) in [
            (Mode::Takeover, false),
            (Mode::Shadow, true),
            (Mode::Alone, false),
        ] {
            let text = page(mode, leader);
            let line = "lifecycle_hooked_machines{deleting=\"true\",served=\"false\"} 2";
            assert!(
                has(&text, line),
                "{mode} leader={leader}: {line} missing:\n{text}"
            );
            let info = format!("lifecycle_info{{mode=\"{mode}\",version=\"{version}\"}} 1");
            assert!(has(&text, &info), "{info} missing:\n{text}");
        }
    }
}
