//! `lifecycle run`: the controllers against a management cluster (and, through its
//! `<cluster>-kubeconfig` Secrets, its workload clusters).

use adapters::kube::bucket::RateLimit;
use adapters::kube::journal_log::Retention;
use adapters::kube::kubeconfigs::KubeconfigSecret;
use adapters::kube::lease::{self, LeaseConfig};
use adapters::kube::serving::{self, auth::Authorizer, tls};
use adapters::kube::streams::WatchScope;
use adapters::kube::{Adapter, AdapterOptions, Metrics, SledLog};
use clap::Args;
use engine::model::LabelSelector;
use engine::runtime::{LoopOptions, Mode};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
#[command(
    after_help = "Environment:\n  RUST_LOG   what to log, as tracing's EnvFilter reads it (default: info; e.g. \
RUST_LOG=info,engine=debug)\n  NO_COLOR   set to anything to keep colour out of text logs (they are coloured only on a \
terminal)"
)]
pub struct RunArgs {
    /// Log line format on stderr: `text`, or `json` (one object per line, for log collectors).
    #[arg(long, value_enum, default_value_t = super::logging::LogFormat::Text)]
    pub log_format: super::logging::LogFormat,
    /// Kubeconfig of the management cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Journal directory: every input is made durable here before it is applied, and the
    /// engine is rebuilt from it on start.
    #[arg(long, default_value = "lifecycle-journal")]
    pub journal: PathBuf,
    /// Retention: engine snapshots the journal keeps (one is written every 10 000 inputs).
    /// Records after the oldest kept snapshot are kept; older ones are retired (their sled
    /// trees dropped, "records 1..N retired" in the commit record).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub journal_keep_snapshots: u64,
    /// Keep every journal record forever (no retention; the journal grows without bound).
    #[arg(long)]
    pub journal_keep_all: bool,
    /// Address of the plain-HTTP, unauthenticated `/metrics`, `/healthz`, `/livez` and
    /// `/readyz` server (`/readyz` is 503 while the journal cannot be written, e.g. a full
    /// disk: the controller then acts on nothing and reopens the journal every second until it
    /// can). Keep it on loopback where others can reach the pod: see --metrics-secure-addr.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_addr: SocketAddr,
    /// Address of a server of `/healthz`, `/livez` and `/readyz` alone (CAPI's probes use
    /// `:9440`).
    #[arg(long)]
    pub health_addr: Option<SocketAddr>,
    /// Address of `/metrics` over HTTPS (e.g. 0.0.0.0:8443), as controller-runtime serves it:
    /// each request's Bearer token is checked with a TokenReview and its user with a
    /// SubjectAccessReview for `get` on the non-resource URL `/metrics` (401 without a valid
    /// token, 403 when not allowed; verdicts cached 10 s).
    #[arg(long)]
    pub metrics_secure_addr: Option<SocketAddr>,
    /// Directory holding `tls.crt` and `tls.key` for --metrics-secure-addr (re-read when they
    /// change); without it a self-signed certificate is made at start.
    #[arg(long, requires = "metrics_secure_addr")]
    pub metrics_cert_dir: Option<PathBuf>,
    /// How it runs beside Cluster API's own manager (`capi-controller-manager`): `alone` (it
    /// owns the Machines, MHCs and MachinePools; it refuses to start, exit 3, while CAPI's
    /// manager is active, i.e. a Lease `controller-leader-election-capi` in any namespace was
    /// renewed within 5 minutes, a Deployment labelled `cluster.x-k8s.io/provider=cluster-api`
    /// has ready replicas, or another field manager than `lifecycle` wrote a Machine's
    /// `status.phase`, conditions or `status.deletion` within 5 minutes (its managedFields),
    /// and while any of them cannot be read) or `shadow` (it
    /// watches, journals and decides as usual and sends nothing: no write reaches any cluster
    /// but its own leader Lease) or `takeover` (beside CAPI's manager, it owns worker Machines'
    /// deletion through its own pre-drain and pre-terminate hooks; CAPI's manager keeps the
    /// finalizer, the MachineHealthChecks and the MachinePools).
    #[arg(long, default_value_t = Mode::Alone, value_name = "alone|shadow|takeover")]
    pub mode: Mode,
    /// With `--mode takeover`: the Machines it owns, a label selector as `kubectl -l` takes
    /// (`pool=blue`, `tier in (a,b)`, `!spot`). Default: every Machine a MachineSet owns. A
    /// control plane's Machine is never owned. Hooks on a Machine it no longer owns are removed
    /// unless the Machine is being deleted.
    #[arg(long, value_name = "SELECTOR", value_parser = own_machines)]
    pub own_machines: Option<LabelSelector>,
    /// Only this namespace of the management cluster: its Clusters' objects, kubeconfig
    /// Secrets and providers' objects (CAPI's `--namespace`). Default: every namespace.
    #[arg(long, value_name = "NAMESPACE", value_parser = namespace)]
    pub namespace: Option<String>,
    /// Only the Machines, MachineHealthChecks and MachinePools labelled
    /// `cluster.x-k8s.io/watch-filter=VALUE` (CAPI's `--watch-filter`, its multi-instance
    /// contract: label a Cluster's objects alike). Default: no label needed.
    #[arg(long, value_name = "VALUE", value_parser = watch_filter)]
    pub watch_filter: Option<String>,
    /// With `--mode takeover`: the release Cluster API's manager runs (`v1.12.3`), when its
    /// Deployment `capi-controller-manager` cannot be read (the preflight at start refuses an
    /// unknown release; while running, the Deployment is read every 30 s and this stands in
    /// whenever it cannot be).
    #[arg(long, value_name = "RELEASE", value_parser = adapters::preflight::Release::parse)]
    pub capi_version: Option<adapters::preflight::Release>,
    /// Namespace of CAPI's manager Deployment `capi-controller-manager`, whose image names
    /// its release (the checks at start look for its Lease and Deployment in every namespace).
    #[arg(long, default_value = "capi-system")]
    pub capi_namespace: String,
    /// With `--mode alone`: start although Cluster API's manager looks active, or cannot be
    /// told to be stopped (its Lease renewed within 5 minutes, its Deployment with ready
    /// replicas, its Machine status writes within 5 minutes, any of them unreadable). Only for a manager you know is stopped for good: two
    /// managers act on the same Machines. Logged at WARN and journaled.
    #[arg(long)]
    pub capi_manager_stopped: bool,
    /// Test only: how long (real seconds) the checks at start keep trying through transient
    /// failures (5xx, 429, no connection) before it refuses to start.
    #[arg(long, hide = true, default_value_t = 30)]
    pub capi_lease_patience_seconds: u64,
    /// The workload clusters' credentials: the Secret `<cluster>SUFFIX` (key `value`) in each
    /// Cluster's namespace. Default: CAPI's own `-kubeconfig`, an admin credential; another
    /// suffix names one the operator issued for this controller's identity (read-only for
    /// shadow: `adapters/deploy/shadow/workload`, `adapters/deploy/workload`).
    #[arg(long, value_name = "SUFFIX", default_value = KubeconfigSecret::CAPI_SUFFIX, value_parser = KubeconfigSecret::with_suffix)]
    pub kubeconfig_secret_suffix: KubeconfigSecret,
    /// Act only while holding the coordination.k8s.io Lease.
    #[arg(long)]
    pub leader_elect: bool,
    #[arg(long, default_value = "kube-system")]
    pub leader_election_namespace: String,
    /// The Lease's name (never CAPI's `controller-leader-election-capi`).
    #[arg(long, default_value = lease::DEFAULT_LEASE_NAME)]
    pub leader_election_id: String,
    /// Stop after this many seconds (demos and tests).
    #[arg(long)]
    pub run_for: Option<u64>,
    /// Requests per second to each cluster (the management cluster and every workload cluster
    /// has its own token bucket; watches and lists count). Default as CAPI's.
    #[arg(long, default_value_t = 20.0, value_parser = positive_qps)]
    pub kube_api_qps: f64,
    /// Requests to a cluster that may go at once after a quiet spell.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_api_burst: u32,
    /// On SIGTERM or Ctrl-C: how long commands already sent may take to finish before the
    /// journal is closed, the Lease released and the process exits 0.
    #[arg(long, default_value_t = 10)]
    pub shutdown_timeout_seconds: u64,
    /// Test only: from this instant (ms since the epoch) the clock runs `--clock-speed` times
    /// fast, as the simulator's served world does (`lifecycle sim run --over-http`).
    #[arg(long, hide = true, requires = "clock_speed")]
    pub clock_origin_ms: Option<i64>,
    #[arg(long, hide = true, requires = "clock_origin_ms")]
    pub clock_speed: Option<u32>,
}

fn namespace(s: &str) -> Result<String, String> {
    if engine::model::is_dns_label(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a namespace name (1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit)"
        ))
    }
}

fn watch_filter(s: &str) -> Result<String, String> {
    if !s.is_empty() && engine::model::is_valid_label_value(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a label value (1 to 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character)"
        ))
    }
}

fn own_machines(s: &str) -> Result<LabelSelector, String> {
    let selector = LabelSelector::parse(s)?;
    if selector.is_empty() {
        return Err("an empty selector would own every Machine: name the Machines' labels (omit the flag for the MachineSets' Machines)".to_string());
    }
    Ok(selector)
}

fn positive_qps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(q) if q.is_finite() && q > 0.0 => Ok(q),
        _ => Err(format!("{s}: must be a number above 0")),
    }
}

/// SIGTERM (how Kubernetes stops a pod) or Ctrl-C.
struct StopSignal {
    terminate: tokio::signal::unix::Signal,
}

impl StopSignal {
    /// Installs the handler: from now on SIGTERM no longer ends the process at once.
    fn install() -> Result<StopSignal, String> {
        let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| format!("installing the SIGTERM handler: {e}"))?;
        Ok(StopSignal { terminate })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: shutting down"),
        }
    }
}

/// Why `lifecycle run` stopped, deciding its exit code.
#[derive(Debug)]
pub(super) enum RunFailure {
    /// Bad input: flags, the kubeconfig (exit 2).
    Input(String),
    /// It could not do its job: the journal locked or unusable, a port in use, leadership
    /// lost, a full disk at start (exit 3).
    Unable(String),
    /// The journal must be reopened by a new process (see [`reexec`]).
    Restart,
}

const EXIT_INPUT: u8 = 2;
const EXIT_UNABLE: u8 = 3;

fn unable(e: impl std::fmt::Display) -> RunFailure {
    RunFailure::Unable(e.to_string())
}

pub(super) async fn management_client(path: Option<&PathBuf>) -> Result<Client, RunFailure> {
    let config = match path {
        Some(p) => {
            let kubeconfig = Kubeconfig::read_from(p)
                .map_err(|e| RunFailure::Input(format!("kubeconfig {}: {e}", p.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| RunFailure::Input(format!("kubeconfig {}: {e}", p.display())))?
        }
        None => Config::infer()
            .await
            .map_err(|e| RunFailure::Input(format!("no kubeconfig found: {e}")))?,
    };
    adapters::kube::client_from_config(config).map_err(RunFailure::Input)
}

/// Replaces this process with a fresh `lifecycle run` with the same arguments: `exec` closes
/// sled's files (opened close-on-exec), freeing the journal's lock; the new process rebuilds
/// the engine from the journal as any restart does. Returns only if `exec` failed.
fn reexec() -> u8 {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("lifecycle run: cannot find its own executable to restart: {e}");
            return 3;
        }
    };
    tracing::warn!(exe = %exe.display(), "re-executing to reopen the journal");
    let e = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .exec();
    eprintln!("lifecycle run: cannot restart {}: {e}", exe.display());
    3
}

fn identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "lifecycle".to_string());
    format!("{host}_{}", std::process::id())
}

/// The names a self-signed metrics certificate is made for.
fn certificate_names() -> Vec<String> {
    let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
    names.extend(std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()));
    names
}

/// Stops following CAPI's release when dropped.
struct FollowTask(tokio::task::JoinHandle<()>);

impl Drop for FollowTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Stops the servers when dropped.
struct Servers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Servers {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// The plain metrics server, and the health and secure metrics servers where asked for.
async fn start_servers(
    args: &RunArgs,
    metrics: &Arc<Metrics>,
    client: &Client,
) -> Result<Servers, RunFailure> {
    let in_use = |what: &'static str, addr: SocketAddr| {
        move |e: std::io::Error| unable(format!("{what} server on {addr}: {e}"))
    };
    let mut tasks = Vec::new();
    let (bound, task) = serving::serve_plain(args.metrics_addr, metrics.clone())
        .await
        .map_err(in_use("metrics", args.metrics_addr))?;
    tasks.push(task);
    tracing::info!(%bound, "serving /metrics, /healthz, /livez and /readyz over HTTP");
    if let Some(addr) = args.health_addr {
        let (bound, task) = serving::serve_health(addr, metrics.clone())
            .await
            .map_err(in_use("health", addr))?;
        tasks.push(task);
        tracing::info!(%bound, "serving /healthz, /livez and /readyz");
    }
    if let Some(addr) = args.metrics_secure_addr {
        let source = match &args.metrics_cert_dir {
            Some(dir) => tls::Source::Dir(dir.clone()),
            None => tls::Source::SelfSigned(certificate_names()),
        };
        let acceptor = tls::acceptor(&source).map_err(RunFailure::Input)?;
        let authorizer = Arc::new(Authorizer::new(client.clone()));
        let (bound, task) = serving::serve_secure(addr, metrics.clone(), acceptor, authorizer)
            .await
            .map_err(in_use("secure metrics", addr))?;
        tasks.push(task);
        tracing::info!(%bound, certificate = ?source, "serving /metrics over HTTPS to authorized callers");
    }
    Ok(Servers(tasks))
}

/// `alone` and `takeover` start only when nothing `lifecycle preflight --mode <mode>` checks
/// fails (warnings are logged): `alone` refuses while Cluster API's manager runs, or while
/// that cannot be told; `takeover` refuses a release it does not know. A failure that may pass
/// on its own (no connection, a 5xx) is asked again for `--capi-lease-patience-seconds`.
/// `shadow`, which writes nothing, logs the same checks once and starts whatever they say.
/// Returns the checks the operator overrode, to be journaled once the journal is open.
async fn preflight(args: &RunArgs, client: &Client) -> Result<Vec<engine::Input>, RunFailure> {
    use adapters::preflight::{Options, Verdict, examine};
    let options = Options {
        mode: args.mode,
        capi_namespace: args.capi_namespace.clone(),
        capi_version: args.capi_version.clone(),
        namespace: args.namespace.clone(),
        capi_manager_stopped: args.capi_manager_stopped,
        leader_lease: args.leader_elect.then(|| adapters::preflight::LeaderLease {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_id.clone(),
        }),
        // It asks for its own grants: it runs as the identity it asks about.
        service_account: None,
    };
    let patience = Duration::from_secs(args.capi_lease_patience_seconds);
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(200);
    let checks = loop {
        let checks = examine(client, &options).await;
        let failed: Vec<_> = checks
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .collect();
        let may_pass = !failed.is_empty() && failed.iter().all(|c| c.transient);
        if args.mode == Mode::Shadow || !may_pass || started.elapsed() + pause >= patience {
            break checks;
        }
        for c in failed {
            tracing::warn!(check = c.name, "preflight: {}: trying again", c.detail);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    };
    for c in checks.iter().filter(|c| c.verdict == Verdict::Ok) {
        tracing::info!(check = c.name, "preflight: {}", c.detail);
    }
    let warned = |c: &&adapters::preflight::Check| {
        c.verdict == Verdict::Warn || (args.mode == Mode::Shadow && c.verdict == Verdict::Fail)
    };
    for c in checks.iter().filter(warned) {
        tracing::warn!(
            check = c.name,
            fix = c.fix.as_deref().unwrap_or_default(),
            "preflight: {}",
            c.detail
        );
    }
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail && args.mode != Mode::Shadow)
        .map(|c| {
            format!(
                "{}: {} → {}",
                c.name,
                c.detail,
                c.fix.as_deref().unwrap_or_default()
            )
        })
        .collect();
    if failed.is_empty() {
        tracing::info!("preflight passed");
        Ok(checks
            .iter()
            .filter_map(|c| {
                Some(engine::Input::Overridden {
                    check: c.name.to_string(),
                    found: c.overridden.clone()?,
                })
            })
            .collect())
    } else {
        let refused = match args.mode {
            Mode::Takeover => "not taking over",
            Mode::Alone => "not starting alone",
            Mode::Shadow => "not starting in shadow",
        };
        // Refused, it serves none of what it holds: say what waits on it and what lets it go.
        let held: String = checks
            .iter()
            .filter_map(|c| c.held.as_deref())
            .map(|h| format!("\nMeanwhile nothing serves what this controller holds: {h}"))
            .collect();
        Err(unable(format!(
            "preflight failed, {refused}:\n  {}{held}\n(`lifecycle preflight --mode {}` prints every check)",
            failed.join("\n  "),
            args.mode
        )))
    }
}

async fn run(args: RunArgs) -> Result<(), RunFailure> {
    let mut stop_signal = StopSignal::install().map_err(unable)?;
    if let (Some(origin), Some(speed)) = (args.clock_origin_ms, args.clock_speed) {
        adapters::clock::scale(engine::Timestamp(origin), speed).map_err(RunFailure::Input)?;
    }
    if args.own_machines.is_some() && args.mode != Mode::Takeover {
        return Err(RunFailure::Input(format!(
            "--own-machines chooses the Machines --mode takeover owns; it means nothing with --mode {}",
            args.mode
        )));
    }
    let client = management_client(args.kubeconfig.as_ref()).await?;
    match args.mode {
        Mode::Alone => {}
        Mode::Shadow => {
            tracing::info!(mode = %args.mode, "not sending any command: every decision is journaled as not sent")
        }
        Mode::Takeover => {
            tracing::info!(mode = %args.mode, "owning worker Machines' deletion through this controller's hooks, beside Cluster API's manager")
        }
    }
    // Before the journal is opened: a refused start writes nothing.
    let overridden = preflight(&args, &client).await?;
    let retention = Retention {
        snapshots_kept: args.journal_keep_snapshots as usize,
        retire_records: !args.journal_keep_all,
    };
    let (log, restored) = SledLog::open_with(&args.journal, retention).map_err(unable)?;
    let mut engine = restored.engine;
    // Commands in flight when the last process stopped may never have run: the engine forgets
    // them and the relists that follow show what did happen.
    // The mode is served from the start: a standby's lifecycle_info says it too.
    let metrics = Arc::new(Metrics::with_mode(args.mode));
    engine.observe_reconciles(metrics.reconcile_observer());
    let _servers = start_servers(&args, &metrics, &client).await?;
    let deadline = async {
        match args.run_for {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => std::future::pending().await,
        }
    };
    // A standby waiting for the Lease stops at the deadline too.
    tokio::pin!(deadline);
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<String>();
    // Without leader election nobody reports a loss; the sender lives until the end.
    let mut _no_election = None;
    // The Lease has a client of its own, unthrottled (as controller-runtime gives leader
    // election its own client): renewals never queue behind a drain's evictions.
    let mut election = None;
    if args.leader_elect {
        let api: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), &args.leader_election_namespace);
        let mut config = LeaseConfig::new(&args.leader_election_id, &identity());
        config.mode = Some(args.mode);
        // The Lease's duration is read on the (possibly scaled) clock; its timers run in real time.
        config.renew_interval = adapters::clock::real_duration(config.renew_interval);
        config.retry_interval = adapters::clock::real_duration(config.retry_interval);
        tokio::select! {
            _ = lease::acquire(&api, &config) => {}
            _ = stop_signal.recv() => return Ok(()),
            _ = &mut deadline => return Ok(()),
        }
        metrics.set_leader(true);
        let leader = metrics.clone();
        let holding = {
            let (api, config) = (api.clone(), config.clone());
            tokio::spawn(async move {
                let why = lease::hold(&api, &config).await;
                leader.set_leader(false);
                let _ = lost_tx.send(why);
            })
        };
        election = Some((api, config, holding));
    } else {
        metrics.set_leader(true);
        _no_election = Some(lost_tx);
    }
    let options = AdapterOptions {
        loop_options: LoopOptions {
            mode: args.mode,
            own_machines: args.own_machines.clone(),
            ..LoopOptions::default()
        },
        instance: identity(),
        rate_limit: RateLimit {
            qps: args.kube_api_qps,
            burst: args.kube_api_burst,
        },
        watch: WatchScope {
            namespace: args.namespace.clone(),
            watch_filter: args.watch_filter.clone(),
        },
        kubeconfig_secret: args.kubeconfig_secret_suffix.clone(),
        ..AdapterOptions::default()
    };
    let judged = engine.controllers().deletion.capi_release().clone();
    let mut adapter = Adapter::new(engine, log, client.clone(), metrics.clone(), options);
    // Beside CAPI's manager, its upgrades are followed while this runs.
    let _follow = (args.mode != Mode::Alone).then(|| {
        FollowTask(tokio::spawn(adapters::preflight::follow::follow(
            client,
            args.capi_namespace.clone(),
            args.capi_version.clone(),
            judged,
            adapter.input_sender(),
            metrics,
        )))
    });
    // Held like any input if the journal cannot be written yet.
    adapter.feed_input(engine::Input::Restarted);
    for input in overridden {
        adapter.feed_input(input);
    }
    let mut lost = None;
    let stop = async {
        tokio::select! {
            _ = &mut deadline => {}
            _ = stop_signal.recv() => {}
            why = lost_rx => lost = why.ok(),
        }
    };
    adapter.run(stop).await.map_err(unable)?;
    if adapter.restart_required() {
        drop(adapter);
        return Err(RunFailure::Restart);
    }
    if let Some(why) = lost {
        // Someone else acts now: stop at once, nothing to finish or give back.
        return Err(unable(format!("leadership lost: {why}")));
    }
    let started = std::time::Instant::now();
    let bound = Duration::from_secs(args.shutdown_timeout_seconds);
    let shut = adapter.shutdown(bound).await;
    drop(adapter);
    if let Some((api, config, holding)) = election {
        // No renewal may land after the release.
        holding.abort();
        let _ = holding.await;
        match lease::release(&api, &config).await {
            Ok(released) => tracing::info!(released, "leader Lease given up"),
            Err(e) => tracing::warn!("releasing the leader Lease: {e} (it expires on its own)"),
        }
    }
    // Released whatever became of the journal: a standby rebuilds from its own.
    let report = shut.map_err(unable)?;
    tracing::info!(
        commands_ended = report.commands_ended,
        commands_abandoned = report.commands_abandoned,
        took_ms = started.elapsed().as_millis() as u64,
        "shut down: journal closed"
    );
    Ok(())
}

pub fn main(args: RunArgs) -> u8 {
    super::logging::init(args.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle run: starting the runtime: {e}");
            return EXIT_UNABLE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => 0,
        Err(RunFailure::Restart) => reexec(),
        Err(RunFailure::Input(e)) => {
            eprintln!("lifecycle run: {e}");
            EXIT_INPUT
        }
        Err(RunFailure::Unable(e)) => {
            eprintln!("lifecycle run: {e}");
            EXIT_UNABLE
        }
    }
}
