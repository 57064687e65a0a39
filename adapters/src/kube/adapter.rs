//! The adapter loop: the tokio and HTTP driver of [`engine::intake`], the sans-IO piece that
//! decides what becomes an engine input and when (the simulator drives the same piece). One
//! task owns the core (the engine), the intake and the input log; watchers, command executors
//! and workload-cluster connectors are tasks that talk to it through one channel.
//!
//! Expected flow: [`Adapter::run`] carries out the intake's outputs (watches to start, clusters
//! to connect), then loops: drain `poll_command()` (each command runs in its own task, at most
//! `commands_in_flight_max` at once per cluster, every request through that cluster's
//! [`super::throttle`]), then wait for the next event or `next_deadline()`. Every input is
//! appended to the [`InputLog`] before the core handles it. A connector reads a Cluster's
//! `<name>-kubeconfig` Secret (key `value`). [`Adapter::shutdown`] ends it gracefully.
//!
//! *Journal unwritable* (a full disk): no input is applied unless journaled. On an append (or
//! snapshot) error the loop stops acting: the input is held, nothing more is taken from the
//! intake or the channel (watchers wait), no Tick, no command; `/readyz` answers 503 and
//! `lifecycle_journal_writable` is 0; the error is logged once. Every `journal_retry` it asks
//! the log to [`InputLog::recover`] (reopen); once that works it applies what the journal
//! holds beyond the last acknowledged append, then the held inputs, and carries on. When only
//! a new process can reopen it ([`InputLog::needs_restart`]: sled cannot be closed after some
//! I/O errors), `run` returns and [`Adapter::restart_required`] says so.

use super::bucket::RateLimit;
use super::client::client_from_kubeconfig;
use super::core::{Core, InputLog};
use super::execute::{EventStamp, execute};
use super::gate::Priority;
use super::kubeconfigs::Kubeconfigs;
use super::metrics::{EngineView, Metrics};
use super::streams::{StreamSpec, run_stream};
use super::throttle::{Throttle, throttled};
use crate::clock::{until, wall_now};
use engine::intake::mirror::StreamEvent;
use engine::intake::streams::stream_id;
use engine::intake::{Arrival, Intake, Output};
use engine::model::{ObjectKey, Scope};
use engine::{Action, ApiOutcome, BATCH_INPUTS_MAX, Command, Input, Timestamp};
use kube::Client;
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

/// Messages to the adapter loop.
pub enum Event {
    /// A watch event or an answer, for the intake.
    Arrival(Arrival),
    /// A workload cluster's client is ready (the intake hears of it as `Arrival::Connected`).
    Connected { scope: Scope, client: Client },
}

/// An [`Event`] on its way to the loop, with when it was sent (how long it waits is
/// `workqueue_queue_duration_seconds`).
pub struct Queued {
    pub(super) event: Event,
    at: std::time::Instant,
}

impl From<Event> for Queued {
    fn from(event: Event) -> Self {
        Queued {
            event,
            at: std::time::Instant::now(),
        }
    }
}

/// Knobs of the loop.
#[derive(Clone, Debug)]
pub struct AdapterOptions {
    /// Per cluster: commands started and not answered yet (the most urgent start first).
    pub commands_in_flight_max: usize,
    /// Per cluster, on the controller's clock: every request to a cluster (watches and lists
    /// too) takes a token from that cluster's bucket.
    pub rate_limit: RateLimit,
    /// How often a connector retries reading a missing or bad kubeconfig Secret.
    pub connect_retry: Duration,
    /// Shortest wait between two `Tick`s, so a deadline the core keeps in the past cannot spin.
    pub tick_spacing_min: Duration,
    /// This process, as its Events name it (`reportingInstance`).
    pub instance: String,
    /// How often an unwritable journal is reopened.
    pub journal_retry: Duration,
    /// Workload clusters' first lists in flight at once, over all clusters.
    pub workload_lists_max: usize,
}

impl Default for AdapterOptions {
    fn default() -> Self {
        AdapterOptions {
            commands_in_flight_max: 32,
            rate_limit: RateLimit::CAPI_DEFAULT,
            connect_retry: Duration::from_secs(5),
            tick_spacing_min: Duration::from_millis(10),
            instance: "lifecycle".to_string(),
            journal_retry: Duration::from_secs(1),
            workload_lists_max: 64,
        }
    }
}

/// A cluster's first relist is when its cache is synced: worth a line at `info`.
fn log_first_relists(input: &Input) {
    match input {
        Input::Relist { scope, objects } => tracing::info!(
            cluster = %engine::store::scope_name(scope),
            objects = objects.len(),
            "cache synced"
        ),
        Input::Batch { inputs } => inputs.iter().for_each(log_first_relists),
        _ => {}
    }
}

/// Events waiting for the loop; a backlog is fed as one batch, so a full channel is one batch.
const CHANNEL_CAPACITY: usize = BATCH_INPUTS_MAX;

pub struct Adapter<C: Core, L: InputLog> {
    core: C,
    log: L,
    intake: Intake,
    management: Client,
    /// The workload clusters' kubeconfigs, read through the (throttled) management client.
    kubeconfigs: Arc<Kubeconfigs>,
    /// Permits for workload clusters' first lists ([`AdapterOptions::workload_lists_max`]).
    workload_lists: Arc<Semaphore>,
    /// Throttled, one per cluster.
    clients: BTreeMap<Scope, Client>,
    throttles: BTreeMap<Scope, Throttle>,
    metrics: Arc<Metrics>,
    options: AdapterOptions,
    tx: mpsc::Sender<Queued>,
    rx: mpsc::Receiver<Queued>,
    /// When each event taken into the intake and not applied yet was sent.
    queued_at: Vec<std::time::Instant>,
    connectors: BTreeMap<Scope, JoinHandle<()>>,
    /// Watches of the intake's choosing, by cluster and stream: stopped when it unwatches
    /// them or disconnects their cluster.
    streams: BTreeMap<(Scope, String), JoinHandle<()>>,
    /// Provider discovery and watches.
    tasks: Vec<JoinHandle<()>>,
    /// One per command until it has been answered.
    commands: Vec<JoinHandle<()>>,
    last_tick: Option<tokio::time::Instant>,
    /// When `/metrics` last got the engine's view.
    engine_view_at: Option<std::time::Instant>,
    /// For each Machine draining, the end of its last eviction sent: evictions go out one at a
    /// time in the order the drain issued them, as upstream's drain sends them, so a PDB refuses
    /// the pod the drain named last, not whichever request the network delivered last.
    evictions: BTreeMap<ObjectKey, oneshot::Receiver<()>>,
    /// Set while the journal cannot be written.
    down: Option<JournalDown>,
    /// The journal can only be reopened by a new process: `run` returned for that.
    restart_required: bool,
}

/// How [`Adapter::shutdown`] went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shutdown {
    /// Commands that finished (or had not started and never will).
    pub commands_ended: usize,
    /// Commands still running at the bound, aborted.
    pub commands_abandoned: usize,
}

/// The loop has stopped acting because the journal cannot be written.
struct JournalDown {
    since: tokio::time::Instant,
    error: String,
    /// Inputs not journaled yet, oldest first (the one whose append failed first).
    held: std::collections::VecDeque<Input>,
}

impl<C: Core, L: InputLog> Drop for Adapter<C, L> {
    fn drop(&mut self) {
        let all = self.tasks.iter().chain(&self.commands);
        let all = all.chain(self.streams.values());
        for t in all.chain(self.connectors.values()) {
            t.abort();
        }
    }
}

/// How often `/metrics` gets the engine's counters and gauges.
const ENGINE_VIEW_INTERVAL: Duration = Duration::from_secs(1);

/// The group's preferred version; `Err((problem, refused))`, `refused` when the API will not
/// serve the group to us (404, 403) rather than failed to answer.
async fn preferred_version(client: &Client, group: &str) -> Result<String, (String, bool)> {
    let request = http::Request::get(format!("/apis/{group}"))
        .body(Vec::new())
        .map_err(|e| (e.to_string(), false))?;
    let v: Value = client.request(request).await.map_err(|e| {
        let refused = super::streams::refusal(&e).map(|s| s.code);
        match refused {
            Some(404) => (
                format!("the API does not serve the group {group} (404 on /apis/{group}): are its CRDs installed?"),
                true,
            ),
            Some(_) => (format!("the API refuses discovery of the group {group} (403): {e}"), true),
            None => (e.to_string(), false),
        }
    })?;
    v.pointer("/preferredVersion/version")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| (format!("no preferred version for {group}"), false))
}

impl<C: Core, L: InputLog> Adapter<C, L> {
    /// An adapter over `core` for the management cluster of `management` (build the client
    /// with `default_retry = false`; the adapter throttles it). Call within a tokio runtime.
    pub fn new(
        core: C,
        log: L,
        management: Client,
        metrics: Arc<Metrics>,
        options: AdapterOptions,
    ) -> Self {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let mut adapter = Adapter {
            core,
            log,
            intake: Intake::new(),
            management: management.clone(),
            kubeconfigs: Arc::new(Kubeconfigs::new(management.clone())),
            workload_lists: Arc::new(Semaphore::new(options.workload_lists_max.max(1))),
            clients: BTreeMap::new(),
            throttles: BTreeMap::new(),
            metrics,
            options,
            tx,
            queued_at: Vec::new(),
            rx,
            connectors: BTreeMap::new(),
            streams: BTreeMap::new(),
            tasks: Vec::new(),
            commands: Vec::new(),
            last_tick: None,
            engine_view_at: None,
            evictions: BTreeMap::new(),
            down: None,
            restart_required: false,
        };
        adapter.management = adapter.add_cluster(Scope::Management, management);
        adapter.kubeconfigs = Arc::new(Kubeconfigs::new(adapter.management.clone()));
        adapter
    }

    /// Puts `client` behind a throttle of its own for `scope`; returns the throttled client.
    fn add_cluster(&mut self, scope: Scope, client: Client) -> Client {
        // The limit counts clock seconds: on a fast (simulated) clock it is as many times
        // higher in real time, so the controller is as polite to the simulated world as
        // production is to a real one (production's clock is real: speed 1).
        let speed = crate::clock::speed();
        let throttle = Throttle::start(
            self.options.rate_limit.scaled(speed),
            self.options.commands_in_flight_max,
        );
        let host = match &scope {
            Scope::Management => "management".to_string(),
            Scope::Workload(c) => format!("{}/{}", c.namespace, c.name),
        };
        let client = throttled(client, throttle.clone(), speed, self.metrics.clone(), host);
        self.throttles.insert(scope.clone(), throttle);
        self.clients.insert(scope, client.clone());
        client
    }

    /// `run` returned because only a new process can reopen the journal (see
    /// [`InputLog::needs_restart`]): the caller re-executes itself.
    pub fn restart_required(&self) -> bool {
        self.restart_required
    }

    /// Whether the loop has stopped acting because the journal cannot be written.
    pub fn journal_down(&self) -> bool {
        self.down.is_some()
    }

    pub fn core(&self) -> &C {
        &self.core
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    fn start_stream(&mut self, client: Client, spec: StreamSpec) {
        let lists = matches!(spec.scope, Scope::Workload(_)).then(|| self.workload_lists.clone());
        let key = (spec.scope.clone(), spec.id());
        let task = tokio::spawn(run_stream(client, spec, self.tx.clone(), lists));
        if let Some(replaced) = self.streams.insert(key, task) {
            replaced.abort();
        }
    }

    /// Carries out what the intake asks for: watches, provider discovery, connections.
    fn carry_out_outputs(&mut self) {
        while let Some(output) = self.intake.poll_output() {
            match output {
                Output::Watch(key) => match self.clients.get(&key.scope).cloned() {
                    Some(client) => self.start_stream(client, StreamSpec::from(&key)),
                    None => {
                        tracing::warn!(scope = ?key.scope, "no client to watch {} with", key.id())
                    }
                },
                Output::WatchProvider {
                    group,
                    version,
                    kind,
                } => self.watch_provider(group, version, kind),
                Output::Unwatch(key) => {
                    if let Some(task) = self.streams.remove(&(key.scope.clone(), key.id())) {
                        task.abort();
                    }
                }
                Output::Connect(scope) => self.connect(scope),
                Output::Disconnect(scope) => {
                    if let Some(task) = self.connectors.remove(&scope) {
                        task.abort();
                    }
                    self.streams.retain(|(s, _), task| {
                        let keep = *s != scope;
                        if !keep {
                            task.abort();
                        }
                        keep
                    });
                    self.clients.remove(&scope);
                    self.throttles.remove(&scope);
                }
            }
        }
    }

    /// Runs until `stop` completes, the input log fails (`Err`), or every sender is gone.
    pub async fn run(&mut self, stop: impl Future<Output = ()>) -> Result<(), String> {
        self.carry_out_outputs();
        tokio::pin!(stop);
        loop {
            if self.down.is_some() {
                tokio::select! {
                    _ = &mut stop => return Ok(()),
                    _ = tokio::time::sleep(self.options.journal_retry) => self.try_recover()?,
                }
                if self.restart_required {
                    return Ok(());
                }
                continue;
            }
            self.drain_commands()?;
            let deadline = self.core.next_deadline();
            let wait = deadline.map(|d| {
                let spacing = self
                    .last_tick
                    .map(|t| self.options.tick_spacing_min.saturating_sub(t.elapsed()))
                    .unwrap_or_default();
                until(d).max(spacing)
            });
            tokio::select! {
                _ = &mut stop => return Ok(()),
                event = self.rx.recv() => match event {
                    Some(event) => self.on_backlog(event)?,
                    None => return Ok(()),
                },
                _ = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {
                    self.last_tick = Some(tokio::time::Instant::now());
                    self.feed(wall_now(), Input::Tick)?;
                }
                // Quiet: `/metrics` still gets the view after the last input (ages grow).
                _ = tokio::time::sleep(ENGINE_VIEW_INTERVAL) => self.refresh_engine_view(wall_now()),
            }
        }
    }

    /// Hands `first` and whatever else is already queued (up to [`BATCH_INPUTS_MAX`] events) to
    /// the intake and feeds what it makes of them: under load the engine reconciles each
    /// affected key once per batch instead of once per event; when idle a batch is one event.
    fn on_backlog(&mut self, first: Queued) -> Result<(), String> {
        self.on_event(first);
        let mut queued = 1;
        while queued < BATCH_INPUTS_MAX {
            match self.rx.try_recv() {
                Ok(event) => self.on_event(event),
                Err(_) => break,
            }
            queued += 1;
        }
        // Left in the intake while the journal is down: taken once it is writable again.
        while self.down.is_none() {
            let Some(input) = self.intake.next_input(BATCH_INPUTS_MAX) else {
                break;
            };
            self.feed(wall_now(), input)?;
        }
        if self.down.is_none() {
            for at in self.queued_at.drain(..) {
                self.metrics.queued_for(at.elapsed());
            }
        }
        let depth = self.intake.backlog_len();
        self.metrics.set_queue_depth(depth);
        self.carry_out_outputs();
        Ok(())
    }

    /// Journals `input` and applies it (held while the journal cannot be written), as the
    /// loop does with what arrives; for inputs of the caller's own such as `Restarted`.
    pub fn feed_input(&mut self, now: Timestamp, input: Input) -> Result<(), String> {
        self.feed(now, input)
    }

    /// Journals `input`, then applies it; while the journal is down, holds it.
    fn feed(&mut self, now: Timestamp, input: Input) -> Result<(), String> {
        if let Some(down) = &mut self.down {
            down.held.push_back(input);
            return Ok(());
        }
        if let Err(e) = self.log.append(now, &input) {
            self.journal_failed(e, Some(input));
            return Ok(());
        }
        self.apply(now, input);
        Ok(())
    }

    /// Applies a journaled input.
    fn apply(&mut self, now: Timestamp, input: Input) {
        self.metrics.record(match &input {
            Input::Batch { inputs } => inputs.len(),
            _ => 1,
        });
        tracing::debug!(input = %input.describe(), "input");
        log_first_relists(&input);
        self.core.handle(now, input);
        if let Err(e) = self.log.after_handle(&self.core) {
            self.journal_failed(e, None);
        }
        self.refresh_engine_view(now);
    }

    /// Hands the engine's counters and gauges to `/metrics`, at most once a second (the
    /// gauges walk every Machine).
    fn refresh_engine_view(&mut self, now: Timestamp) {
        if self
            .engine_view_at
            .is_some_and(|at| at.elapsed() < ENGINE_VIEW_INTERVAL)
        {
            return;
        }
        let Some(engine) = self.core.engine() else {
            return;
        };
        self.engine_view_at = Some(std::time::Instant::now());
        self.metrics.engine_view(EngineView {
            counters: engine.counters().clone(),
            gauges: engine::metrics::gauges(engine.store(), &engine.controllers().deletion, now),
        });
    }

    /// The journal cannot be written: stop acting (logged once, until it recovers).
    fn journal_failed(&mut self, error: String, held: Option<Input>) {
        tracing::error!(%error, "the journal cannot be written: not acting (NotReady) until it can be reopened");
        self.metrics.journal_unwritable(true);
        self.down = Some(JournalDown {
            since: tokio::time::Instant::now(),
            error,
            held: held.into_iter().collect(),
        });
    }

    /// Tries to reopen the journal; on success applies what it holds beyond the last
    /// acknowledged append, then the held inputs. `Err` only if the journal holds an input this
    /// loop never fed (it must not be applied blindly).
    fn try_recover(&mut self) -> Result<(), String> {
        let Some(down) = &self.down else {
            return Ok(());
        };
        let unapplied = match self.log.recover() {
            Ok(unapplied) => unapplied,
            Err(e) => {
                tracing::debug!(error = %e, first_error = %down.error, "the journal is still unwritable");
                if self.log.needs_restart() {
                    tracing::warn!(error = %e, "the disk has space again but the failed journal cannot be closed in this process: restarting to reopen it");
                    self.restart_required = true;
                }
                return Ok(());
            }
        };
        let down = self.down.take().expect("checked above");
        let mut held = down.held;
        tracing::info!(
            after_ms = down.since.elapsed().as_millis() as u64,
            held = held.len(),
            journaled_unapplied = unapplied.len(),
            "the journal is writable again: acting again"
        );
        self.metrics.journal_unwritable(false);
        for (at, input) in unapplied {
            if held.front() != Some(&input) {
                return Err(format!(
                    "the reopened journal holds an input that was never fed: {}",
                    input.describe()
                ));
            }
            held.pop_front();
            self.apply(at, input);
        }
        for input in held {
            self.feed(wall_now(), input)?;
        }
        Ok(())
    }

    /// The graceful end, after [`Adapter::run`] returned: takes no more inputs (watches and
    /// connectors stop, answers are no longer read), starts no more commands, lets the
    /// commands already started finish within `bound` (aborting the rest: whoever acts next
    /// relists and sees what they did), then flushes and closes the journal.
    pub async fn shutdown(&mut self, bound: Duration) -> Result<Shutdown, String> {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        for (_, task) in std::mem::take(&mut self.streams) {
            task.abort();
        }
        for (_, task) in std::mem::take(&mut self.connectors) {
            task.abort();
        }
        self.rx.close();
        for throttle in self.throttles.values() {
            throttle.close();
        }
        let deadline = tokio::time::Instant::now() + bound;
        let mut report = Shutdown::default();
        for mut task in self.commands.drain(..) {
            if tokio::time::timeout_at(deadline, &mut task).await.is_ok() {
                report.commands_ended += 1;
            } else {
                task.abort();
                report.commands_abandoned += 1;
            }
        }
        self.log.close()?;
        Ok(report)
    }

    /// For an Event: the regarded object's uid and version as the cache has them, and now.
    fn event_stamp(&self, command: &Command) -> Option<EventStamp> {
        let Action::RecordEvent { regarding, .. } = &command.action else {
            return None;
        };
        let meta = self
            .core
            .engine()
            .and_then(|e| e.store().get(&regarding.key))
            .map(|o| o.meta());
        Some(EventStamp {
            uid: meta.map(|m| m.uid.clone()).unwrap_or_default(),
            resource_version: meta.map_or(0, |m| m.resource_version),
            at: wall_now(),
            instance: self.options.instance.clone(),
        })
    }

    fn drain_commands(&mut self) -> Result<(), String> {
        let mut answered = Vec::new();
        while let Some(command) = self.core.poll_command() {
            self.metrics.command(command.action.name());
            tracing::info!(command = %command, reason = %command.reason, "command");
            if let Some(answer) = self.intake.dispatch(&command) {
                answered.push(answer);
                continue;
            }
            let scope = &command.action.target().key.scope;
            let (Some(client), Some(throttle)) = (
                self.clients.get(scope).cloned(),
                self.throttles.get(scope).cloned(),
            ) else {
                answered.push(Input::ApiResult {
                    command: command.id,
                    outcome: ApiOutcome::Unreachable {
                        message: format!("no client for the API of {scope:?}"),
                    },
                });
                continue;
            };
            let stamp = self.event_stamp(&command);
            let tx = self.tx.clone();
            let metrics = self.metrics.clone();
            let (after, done) = self.eviction_turn(&command);
            self.commands.retain(|t| !t.is_finished());
            self.commands.push(tokio::spawn(async move {
                // Dropped when this task ends: the next eviction of the drain may go.
                let _done = done;
                if let Some(previous) = after {
                    // Ends (Err) when the previous eviction's task is done, whatever its outcome.
                    let _ = previous.await;
                }
                // Refused: shutting down before this command was in flight.
                let priority = Priority::of(&command);
                let Some(_slot) = throttle.slot(priority).await else {
                    return;
                };
                let asked = tokio::time::Instant::now();
                if !throttle.first_request(priority).await {
                    return;
                }
                metrics.api_throttled(asked.elapsed());
                let outcome = execute(&client, &command, stamp.as_ref()).await;
                match &outcome {
                    ApiOutcome::Ok { .. } => {}
                    ApiOutcome::Unreachable { .. } => metrics.api_error("unreachable"),
                    ApiOutcome::NotFound => metrics.api_error("404"),
                    ApiOutcome::Conflict { .. } => metrics.api_error("409"),
                    ApiOutcome::TooManyRequests { .. } => metrics.api_error("429"),
                    ApiOutcome::Forbidden { .. } => metrics.api_error("403"),
                    ApiOutcome::Error { code, .. } => metrics.api_error(&code.to_string()),
                }
                let result = Arrival::Result {
                    command: command.id,
                    outcome,
                };
                let _ = tx.send(Event::Arrival(result).into()).await;
            }));
        }
        for answer in answered {
            self.metrics.api_error("unreachable");
            self.feed(wall_now(), answer)?;
        }
        Ok(())
    }

    /// For an eviction: the previous eviction of the same drain to wait for, and the signal
    /// whose drop (when this command's task ends) lets the next one go.
    fn eviction_turn(
        &mut self,
        command: &engine::Command,
    ) -> (Option<oneshot::Receiver<()>>, Option<oneshot::Sender<()>>) {
        if !matches!(command.action, engine::Action::Evict { .. }) {
            return (None, None);
        }
        self.evictions
            .retain(|_, rx| matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
        let (done, next) = oneshot::channel();
        let previous = self.evictions.insert(command.owner.clone(), next);
        (previous, Some(done))
    }

    fn on_event(&mut self, Queued { event, at }: Queued) {
        self.queued_at.push(at);
        let arrival = match event {
            Event::Arrival(arrival) => arrival,
            Event::Connected { scope, client } => {
                tracing::info!(?scope, "connected to workload cluster");
                self.add_cluster(scope.clone(), client);
                Arrival::Connected { scope }
            }
        };
        self.intake.push(arrival);
        self.metrics.queue_add();
    }

    fn watch_provider(&mut self, group: String, version: Option<String>, kind: String) {
        let client = self.management.clone();
        let tx = self.tx.clone();
        let retry = self.options.connect_retry;
        self.tasks.push(tokio::spawn(async move {
            let version = match version {
                Some(v) => v,
                None => loop {
                    match preferred_version(&client, &group).await {
                        Ok(v) => break v,
                        Err((problem, refused)) => {
                            tracing::warn!(%group, "discovery: {problem}");
                            if refused {
                                let unavailable = Event::Arrival(Arrival::Watch {
                                    scope: Scope::Management,
                                    stream: stream_id(&group, &kind),
                                    event: StreamEvent::Unavailable(problem),
                                });
                                if tx.send(unavailable.into()).await.is_err() {
                                    return;
                                }
                            }
                            tokio::time::sleep(retry).await;
                        }
                    }
                },
            };
            run_stream(
                client,
                StreamSpec::new(&Scope::Management, &group, &version, &kind),
                tx,
                None,
            )
            .await;
        }));
    }

    fn connect(&mut self, scope: Scope) {
        let Scope::Workload(cluster) = scope.clone() else {
            return;
        };
        let kubeconfigs = self.kubeconfigs.clone();
        let tx = self.tx.clone();
        let retry = self.options.connect_retry;
        let key = scope.clone();
        let task = tokio::spawn(async move {
            let mut first_attempt = true;
            loop {
                let client = match kubeconfigs.get(&cluster, first_attempt).await {
                    Ok(yaml) => client_from_kubeconfig(&yaml).await,
                    Err(e) => Err(e),
                };
                first_attempt = false;
                match client {
                    Ok(client) => {
                        let _ = tx.send(Event::Connected { scope, client }.into()).await;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(cluster = %cluster.name, "cannot connect to the workload cluster: {e}");
                        tokio::time::sleep(retry).await;
                    }
                }
            }
        });
        self.connectors.insert(key, task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it is fed.
    #[derive(Default)]
    struct Recorder(Vec<Input>);

    impl crate::kube::SnapshotSource for Recorder {
        fn engine(&self) -> Option<&engine::Engine> {
            None
        }
    }

    impl Core for Recorder {
        fn handle(&mut self, _now: Timestamp, input: Input) {
            self.0.push(input);
        }
        fn poll_command(&mut self) -> Option<engine::Command> {
            None
        }
        fn next_deadline(&self) -> Option<Timestamp> {
            None
        }
    }

    fn result(command: u64) -> Event {
        Event::Arrival(Arrival::Result {
            command,
            outcome: ApiOutcome::NotFound,
        })
    }

    fn adapter() -> Adapter<Recorder, crate::kube::MemoryLog> {
        Adapter::new(
            Recorder::default(),
            crate::kube::MemoryLog::new(10_000),
            crate::kube::client_for_url("http://127.0.0.1:9").unwrap(),
            Arc::new(Metrics::default()),
            AdapterOptions::default(),
        )
    }

    #[tokio::test]
    async fn queued_events_are_fed_as_one_batch_of_at_most_the_cap() {
        let mut a = adapter();
        let cap = BATCH_INPUTS_MAX as u64;
        // A full channel behind the event in hand: one more than a batch holds.
        for id in 2..=cap + 1 {
            a.tx.try_send(result(id).into()).unwrap();
        }
        a.on_backlog(result(1).into()).unwrap();
        for id in cap + 2..=cap + 10 {
            a.tx.try_send(result(id).into()).unwrap();
        }
        let next = a.rx.try_recv().unwrap();
        a.on_backlog(next).unwrap();
        let sizes: Vec<usize> = a
            .core
            .0
            .iter()
            .map(|i| match i {
                Input::Batch { inputs } => inputs.len(),
                _ => 1,
            })
            .collect();
        assert_eq!(sizes, [BATCH_INPUTS_MAX, 10]);
        let metrics = a.metrics.render();
        assert!(
            metrics.contains(&format!(
                "lifecycle_inputs_total {}\n",
                BATCH_INPUTS_MAX + 10
            )),
            "{metrics}"
        );
        assert!(
            metrics.contains("lifecycle_journal_records_total 2\n"),
            "{metrics}"
        );
        // Journaled exactly as fed, in order.
        let logged: Vec<&Input> = a.log.entries.iter().map(|(_, _, i)| i).collect();
        assert_eq!(logged, a.core.0.iter().collect::<Vec<_>>());
        let Input::Batch { inputs } = &a.core.0[0] else {
            unreachable!()
        };
        assert!(matches!(inputs[0], Input::ApiResult { command: 1, .. }));
        let last = BATCH_INPUTS_MAX - 1;
        assert!(
            matches!(inputs[last], Input::ApiResult { command, .. } if command == last as u64 + 1)
        );
    }

    /// A log that fails while `full` is set, as a full disk does; `reaches_disk` makes the
    /// failing append land anyway (a flush error after the write), as sled can.
    #[derive(Default)]
    struct FullDisk {
        full: bool,
        reaches_disk: bool,
        closed: bool,
        stored: Vec<Input>,
        acked: usize,
    }

    impl InputLog for FullDisk {
        fn append(&mut self, _now: Timestamp, input: &Input) -> Result<u64, String> {
            if self.closed {
                return Err("closed".into());
            }
            if self.full {
                if self.reaches_disk {
                    self.stored.push(input.clone());
                }
                self.closed = true;
                return Err("No space left on device".into());
            }
            self.stored.push(input.clone());
            self.acked = self.stored.len();
            Ok(self.acked as u64)
        }
        fn recover(&mut self) -> Result<Vec<(Timestamp, Input)>, String> {
            if self.full {
                return Err("No space left on device".into());
            }
            self.closed = false;
            let unapplied = self.stored[self.acked..]
                .iter()
                .map(|i| (Timestamp(0), i.clone()))
                .collect();
            self.acked = self.stored.len();
            Ok(unapplied)
        }
    }

    fn full_disk_adapter(reaches_disk: bool) -> Adapter<Recorder, FullDisk> {
        Adapter::new(
            Recorder::default(),
            FullDisk {
                reaches_disk,
                ..FullDisk::default()
            },
            crate::kube::client_for_url("http://127.0.0.1:9").unwrap(),
            Arc::new(Metrics::default()),
            AdapterOptions::default(),
        )
    }

    /// Nothing is applied unless journaled: while the journal cannot be written the loop
    /// holds inputs, is NotReady, counts one failure; once it can, it applies every input
    /// once, in order, the journal and the core agreeing.
    #[tokio::test]
    async fn an_unwritable_journal_stops_the_loop_until_it_recovers() {
        for reaches_disk in [false, true] {
            let mut a = full_disk_adapter(reaches_disk);
            a.on_backlog(result(1).into()).unwrap();
            a.log.full = true;
            a.on_backlog(result(2).into()).unwrap();
            assert!(a.journal_down());
            a.on_backlog(result(3).into()).unwrap();
            a.intake.push(Arrival::Result {
                command: 4,
                outcome: ApiOutcome::NotFound,
            });
            a.on_backlog(result(5).into()).unwrap();
            assert_eq!(a.core.0.len(), 1, "only the journaled input was applied");
            assert_eq!(a.metrics.readiness().0, 503);
            a.try_recover().unwrap();
            assert!(a.journal_down(), "still full");
            let metrics = a.metrics.render();
            assert!(
                metrics.contains("lifecycle_journal_writable 0\n"),
                "{metrics}"
            );
            assert!(
                metrics.contains("lifecycle_journal_failures_total 1\n"),
                "{metrics}"
            );
            a.log.full = false;
            a.try_recover().unwrap();
            assert!(!a.journal_down());
            assert_eq!(a.metrics.readiness(), (200, "ok\n"));
            // Whatever the intake kept is taken at the next backlog.
            a.on_backlog(result(6).into()).unwrap();
            let commands: Vec<u64> = a
                .core
                .0
                .iter()
                .flat_map(|i| match i {
                    Input::Batch { inputs } => inputs.clone(),
                    other => vec![other.clone()],
                })
                .map(|i| match i {
                    Input::ApiResult { command, .. } => command,
                    _ => 0,
                })
                .collect();
            assert_eq!(commands, [1, 2, 3, 4, 5, 6], "reaches_disk={reaches_disk}");
            assert_eq!(a.log.stored, a.core.0, "journal and core agree");
            assert!(
                a.metrics
                    .render()
                    .contains("lifecycle_journal_writable 1\n")
            );
        }
    }

    #[tokio::test]
    async fn a_lone_event_is_fed_as_itself() {
        let mut a = adapter();
        a.on_backlog(result(7).into()).unwrap();
        assert!(matches!(
            a.core.0.as_slice(),
            [Input::ApiResult { command: 7, .. }]
        ));
    }
}
