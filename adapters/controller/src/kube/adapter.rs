//! The adapter loop: the tokio and HTTP driver of [`engine::runtime::Loop`], the sans-IO loop
//! that decides what is journaled, applied and sent, and when (the simulator drives the same
//! loop). One task owns the loop and the input log; watchers, command executors and
//! workload-cluster connectors are tasks that talk to it through one channel.
//!
//! Expected flow: [`Adapter::run`] carries out the loop's outputs until it says wait: an
//! `Append` goes to the [`InputLog`] (durable before the loop applies it), a `Reopen` reopens
//! it after a failure, a `Send` runs in a task of its own through its cluster's
//! [`super::throttle`] (the request rate; the loop holds the in-flight caps), a watch or a
//! connection starts a task. Then it waits for the next event (taking whatever else is queued
//! with it: one batch) or the loop's deadline. A connector reads a Cluster's
//! `<name>-kubeconfig` Secret (key `value`). [`Adapter::shutdown`] ends it gracefully.
//!
//! *Journal unwritable* (a full disk): the loop holds every input and command until the log
//! reopens; meanwhile this driver reads nothing more from the channel (watchers wait),
//! `/readyz` answers 503 and `lifecycle_journal_writable` is 0. When only a new process can
//! reopen the log ([`InputLog::needs_restart`]: sled cannot be closed after some I/O errors),
//! `run` returns and [`Adapter::restart_required`] says so.

use super::bucket::RateLimit;
use super::channel::CHANNEL_CAPACITY;
pub use super::channel::{Event, Queued};
use super::core::{Core, InputLog};
use super::execute::EventStamp;
use super::kubeconfigs::{KubeconfigSecret, Kubeconfigs};
use super::metrics::Metrics;
use super::streams::{StreamSpec, WatchScope, run_stream};
use super::tasks::Tasks;
use super::throttle::{Throttle, throttled};
use crate::clock::{until, wall_now};
use engine::intake::Arrival;
use engine::model::Scope;
use engine::runtime::{Loop, LoopOptions, Output};
use engine::{ApiOutcome, BATCH_INPUTS_MAX, Command, Input, Timestamp};
use kube::Client;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

/// Knobs of the driver, and of the loop it drives.
#[derive(Clone, Debug)]
pub struct AdapterOptions {
    /// The loop's: commands in flight per cluster, tick spacing, journal retry, batch size
    /// (on the controller's clock).
    pub loop_options: LoopOptions,
    /// Per cluster, on the controller's clock: every request to a cluster (watches and lists
    /// too) takes a token from that cluster's bucket.
    pub rate_limit: RateLimit,
    /// How often a connector retries reading a missing or bad kubeconfig Secret.
    pub connect_retry: Duration,
    /// This process, as its Events name it (`reportingInstance`).
    pub instance: String,
    /// Workload clusters' first lists in flight at once, over all clusters.
    pub workload_lists_max: usize,
    /// The part of the management cluster it sees (`--namespace`, `--watch-filter`).
    pub watch: WatchScope,
    /// Which Secret holds each workload cluster's kubeconfig (CAPI's by default).
    pub kubeconfig_secret: KubeconfigSecret,
}

impl Default for AdapterOptions {
    fn default() -> Self {
        AdapterOptions {
            loop_options: LoopOptions::default(),
            rate_limit: RateLimit::CAPI_DEFAULT,
            connect_retry: Duration::from_secs(5),
            instance: "lifecycle".to_string(),
            workload_lists_max: 64,
            watch: WatchScope::default(),
            kubeconfig_secret: KubeconfigSecret::default(),
        }
    }
}

pub struct Adapter<C: Core, L: InputLog> {
    lp: Loop<C>,
    log: L,
    management: Client,
    /// The workload clusters' kubeconfigs, read through the (throttled) management client.
    kubeconfigs: Arc<Kubeconfigs>,
    /// Permits for workload clusters' first lists ([`AdapterOptions::workload_lists_max`]).
    workload_lists: Arc<Semaphore>,
    /// Throttled, one per cluster, with its throttle.
    clients: BTreeMap<Scope, (Client, Throttle)>,
    metrics: Arc<Metrics>,
    options: AdapterOptions,
    tx: mpsc::Sender<Queued>,
    rx: mpsc::Receiver<Queued>,
    /// When each event pushed and not applied yet was sent.
    queued_at: Vec<std::time::Instant>,
    /// Watches, connectors, provider discovery and commands, by what they are for.
    tasks: Tasks,
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
        metrics.set_mode(options.loop_options.mode);
        let mut adapter = Adapter {
            lp: Loop::new(core, options.loop_options.clone()),
            log,
            management: management.clone(),
            kubeconfigs: Kubeconfigs::shared(management.clone(), &options),
            workload_lists: Arc::new(Semaphore::new(options.workload_lists_max.max(1))),
            clients: BTreeMap::new(),
            metrics,
            options,
            tx,
            rx,
            queued_at: Vec::new(),
            tasks: Tasks::default(),
            restart_required: false,
        };
        adapter.management = adapter.add_cluster(Scope::Management, management);
        adapter.kubeconfigs = Kubeconfigs::shared(adapter.management.clone(), &adapter.options);
        adapter
    }

    /// Puts `client` behind a throttle of its own for `scope`; returns the throttled client.
    fn add_cluster(&mut self, scope: Scope, client: Client) -> Client {
        // The limit counts clock seconds: on a fast (simulated) clock it is as many times
        // higher in real time, so the controller is as polite to the simulated world as
        // production is to a real one (production's clock is real: speed 1).
        let speed = crate::clock::speed();
        let throttle = Throttle::start(self.options.rate_limit.scaled(speed));
        let host = match &scope {
            Scope::Management => "management".to_string(),
            Scope::Workload(c) => format!("{}/{}", c.namespace, c.name),
        };
        let client = throttled(client, throttle.clone(), speed, self.metrics.clone(), host);
        self.clients.insert(scope, (client.clone(), throttle));
        client
    }

    /// `run` returned because only a new process can reopen the journal (see
    /// [`InputLog::needs_restart`]): the caller re-executes itself.
    pub fn restart_required(&self) -> bool {
        self.restart_required
    }

    /// Whether the loop has stopped acting because the journal cannot be written.
    pub fn journal_down(&self) -> bool {
        self.lp.journal_down().is_some()
    }

    pub fn core(&self) -> &C {
        self.lp.core()
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    /// Journals `input` and applies it in turn (held while the journal cannot be written): for
    /// inputs of the caller's own such as `Restarted`.
    pub fn feed_input(&mut self, input: Input) {
        self.lp.feed(input);
    }

    /// A sender of inputs for the loop, for readers of what the engine does not watch (they
    /// send [`Event::Input`]); it ends with the adapter's run like any other sender.
    pub fn input_sender(&self) -> mpsc::Sender<Queued> {
        self.tx.clone()
    }

    /// Runs until `stop` completes, the input log holds an input never fed (`Err`), or every
    /// sender is gone.
    pub async fn run(&mut self, stop: impl Future<Output = ()>) -> Result<(), String> {
        tokio::pin!(stop);
        loop {
            let deadline = self.step()?;
            if self.restart_required {
                return Ok(());
            }
            let down = self.lp.journal_down().is_some();
            let wait = deadline.map(until);
            tokio::select! {
                _ = &mut stop => return Ok(()),
                // While the journal is down nothing more is taken in: watchers wait.
                event = self.rx.recv(), if !down => match event {
                    Some(event) => self.take_backlog(event),
                    None => return Ok(()),
                },
                _ = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {
                    self.lp.handle_timeout(wall_now());
                }
                // Quiet: `/metrics` still gets the view after the last input (ages grow).
                _ = tokio::time::sleep(super::metrics::ENGINE_VIEW_INTERVAL) => self.metrics.offer_engine_view(self.lp.core().engine(), wall_now()),
            }
        }
    }

    /// Carries out the loop's outputs until it waits; returns when to wake it.
    fn step(&mut self) -> Result<Option<Timestamp>, String> {
        loop {
            let now = wall_now();
            match self.lp.poll_output(now) {
                Output::Wait(deadline) => return Ok(deadline),
                Output::Append { at, input } => self.append(at, input),
                Output::Reopen => self.reopen(now)?,
                Output::Send(command) => self.send(command),
                Output::Withheld(command) => {
                    self.metrics.command_withheld(command.action.name());
                    tracing::info!(command = %command, reason = %command.reason, mode = %self.lp.options().mode, "command not sent");
                }
                Output::Watch(key) => match self.clients.get(&key.scope) {
                    Some((client, _)) => self.start_stream(client.clone(), StreamSpec::from(&key)),
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
                    if let Some(task) = self.tasks.streams.remove(&(key.scope.clone(), key.id())) {
                        task.abort();
                    }
                }
                Output::Connect(scope) => self.connect(scope),
                Output::Disconnect(scope) => self.disconnect(&scope),
                Output::Unreadable(u) => self.metrics.unreadable(&u, self.lp.unreadable_dropped()),
            }
        }
    }

    /// Journals `input`; the loop applies it once durable.
    fn append(&mut self, at: Timestamp, input: Input) {
        let appended = self.log.append(at, &input).map(|_| ());
        let failed = appended.is_err();
        let inputs = match &input {
            Input::Batch { inputs } => inputs.len(),
            _ => 1,
        };
        if !failed {
            tracing::debug!(input = %input.describe(), "input");
        }
        self.lp.appended(at, input, appended);
        for d in self.lp.take_disagreements() {
            self.metrics.shadow_disagreement(&d);
            tracing::warn!(machine = %d.machine, step = d.step.as_str(), side = d.side.as_str(), "shadow disagreement: {}", d.describe());
        }
        if failed {
            self.metrics.journal_unwritable(true);
            return;
        }
        self.metrics.record(inputs);
        for sent in self.queued_at.drain(..) {
            self.metrics.queued_for(sent.elapsed());
        }
        self.metrics.set_queue_depth(self.lp.backlog_len());
        if let Err(e) = self.log.after_handle(self.lp.core().engine()) {
            self.lp.journal_failed(at, e);
            self.metrics.journal_unwritable(true);
        }
        self.metrics.offer_engine_view(self.lp.core().engine(), at);
    }

    /// Reopens the journal after a failure; the loop applies what it holds and carries on.
    fn reopen(&mut self, now: Timestamp) -> Result<(), String> {
        let reopened = self.log.recover();
        let ok = reopened.is_ok();
        if !ok && self.log.needs_restart() {
            tracing::warn!(
                "the disk has space again but the failed journal cannot be closed in this process: restarting to reopen it"
            );
            self.restart_required = true;
        }
        self.lp.reopened(now, reopened)?;
        if ok {
            self.metrics.journal_unwritable(false);
        }
        Ok(())
    }

    /// Pushes `first` and whatever else is already queued (up to [`BATCH_INPUTS_MAX`] events):
    /// under load the engine reconciles each affected key once per batch instead of once per
    /// event; when idle a batch is one event.
    fn take_backlog(&mut self, first: Queued) {
        self.take(first);
        for _ in 1..BATCH_INPUTS_MAX {
            match self.rx.try_recv() {
                Ok(event) => self.take(event),
                Err(_) => break,
            }
        }
    }

    fn take(&mut self, Queued { event, at }: Queued) {
        let arrival = match event {
            Event::Input(input) => return self.lp.feed(input),
            Event::Arrival(arrival) => arrival,
            Event::Connected { scope, client } => {
                tracing::info!(?scope, "connected to workload cluster");
                self.add_cluster(scope.clone(), client);
                Arrival::Connected { scope }
            }
        };
        self.queued_at.push(at);
        self.lp.push(arrival);
        self.metrics.queue_add();
    }

    /// The graceful end, after [`Adapter::run`] returned: takes no more inputs (watches and
    /// connectors stop, answers are no longer read), sends no more commands, lets the commands
    /// already sent finish within `bound` (aborting the rest: whoever acts next relists and
    /// sees what they did), then flushes and closes the journal.
    pub async fn shutdown(&mut self, bound: Duration) -> Result<Shutdown, String> {
        let dropped = self.lp.close();
        self.tasks.abort_inputs();
        self.rx.close();
        for (_, throttle) in self.clients.values() {
            throttle.close();
        }
        let deadline = tokio::time::Instant::now() + bound;
        let mut report = Shutdown {
            commands_ended: dropped,
            ..Shutdown::default()
        };
        for mut task in self.tasks.commands.drain(..) {
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

    /// Sends a command the loop admitted, in a task of its own; its answer comes back as an
    /// arrival.
    fn send(&mut self, command: Command) {
        self.metrics.command(command.action.name());
        tracing::info!(command = %command, reason = %command.reason, "command");
        let scope = &command.action.target().key.scope;
        let Some((client, throttle)) = self.clients.get(scope).cloned() else {
            self.metrics.api_error("unreachable");
            self.lp.push(Arrival::Result {
                command: command.id,
                outcome: ApiOutcome::Unreachable {
                    message: format!("no client for the API of {scope:?}"),
                },
            });
            return;
        };
        let stamp = EventStamp::of(&command, self.lp.core().engine(), &self.options.instance);
        let tx = self.tx.clone();
        let metrics = self.metrics.clone();
        self.tasks.commands.retain(|t| !t.is_finished());
        let task = super::execute::run_command(client, throttle, command, stamp, metrics, tx);
        self.tasks.commands.push(tokio::spawn(task));
    }

    fn start_stream(&mut self, client: Client, spec: StreamSpec) {
        let lists = matches!(spec.scope, Scope::Workload(_)).then(|| self.workload_lists.clone());
        let key = (spec.scope.clone(), spec.id());
        let spec = spec.within(&self.options.watch);
        let task = tokio::spawn(run_stream(client, spec, self.tx.clone(), lists));
        if let Some(replaced) = self.tasks.streams.insert(key, task) {
            replaced.abort();
        }
    }

    fn disconnect(&mut self, scope: &Scope) {
        if let Some(task) = self.tasks.connectors.remove(scope) {
            task.abort();
        }
        let streams = std::mem::take(&mut self.tasks.streams);
        let (gone, kept) = streams.into_iter().partition(|((s, _), _)| s == scope);
        self.tasks.streams = kept;
        gone.into_values().for_each(|t: JoinHandle<()>| t.abort());
        self.clients.remove(scope);
    }

    fn watch_provider(&mut self, group: String, version: Option<String>, kind: String) {
        let task = super::streams::watch_provider(
            self.management.clone(),
            self.tx.clone(),
            self.options.connect_retry,
            (group, version, kind),
            self.options.watch.clone(),
        );
        self.tasks.providers.push(tokio::spawn(task));
    }

    fn connect(&mut self, scope: Scope) {
        let Scope::Workload(cluster) = scope.clone() else {
            return;
        };
        let task = super::kubeconfigs::connect(
            self.kubeconfigs.clone(),
            cluster,
            self.tx.clone(),
            self.options.connect_retry,
        );
        self.tasks.connectors.insert(scope, tokio::spawn(task));
    }
}

#[cfg(test)]
#[path = "adapter_tests.rs"]
mod tests;
