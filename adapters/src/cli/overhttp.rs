//! `lifecycle sim run FILE --over-http`: the scenario end to end over real HTTP. The world is
//! served by the fake API servers and played live ([`adapters::play`]); the real `lifecycle
//! run` binary runs as a child process against it, with its clock scaled like the world's;
//! the scenario's controller restarts kill it (SIGKILL) and start it again on its journal. At
//! the end the child's journal is replayed to count its actions, and the same expectations and
//! invariants as in-process are judged, with point expectations and windows widened by a
//! tolerance for the controller's real-time lateness.

use adapters::apiserver::ServerOptions;
use adapters::apiserver::record::Recorder;
use adapters::clock;
use adapters::play::Player;
use adapters::serve::ServedWorld;
use engine::{Duration, Timestamp};
use sim::live::Live;
use sim::run::Report;
use sim::scenario::Scenario;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::process::{Child, Command};

/// Set (to anything), an over-HTTP run keeps its directory: the kubeconfigs, the controller's
/// log (`controller.log`) and its journal.
pub const KEEP_ENV: &str = "LIFECYCLE_OVER_HTTP_KEEP";

/// Exit code when the run itself could not happen (port in use, the controller could not
/// start or crashed, its journal unreadable).
pub const EXIT_COULD_NOT_RUN: u8 = 3;

/// How late, in real time, the controller may be against the scenario's times (scheduling,
/// HTTP round trips, its start and restarts); multiplied by the speed in simulated time.
pub const TOLERANCE_REAL_MS: i64 = 1_000;

/// How one over-HTTP run is set up.
pub struct OverHttp {
    pub speed: u32,
    /// Port of the management cluster's server (0 = free ports).
    pub port: u16,
    /// Keep the controller's journal here (a temporary directory otherwise).
    pub journal: Option<PathBuf>,
    pub seed: Option<u64>,
    /// Append the controller's distinct requests here (see [`adapters::apiserver::record`]).
    pub record_requests: Option<PathBuf>,
}

/// The recorder writing to `path`, if one is asked for.
pub fn recorder(path: Option<&Path>) -> Result<Option<Recorder>, String> {
    path.map(|p| Recorder::append_to(p).map_err(|e| format!("{}: {e}", p.display())))
        .transpose()
}

/// The summary line of what fired: `faults fired: api-errors 12, partition 3` (`none`), the
/// scenario's fault kinds in their order, then the orders answers took.
pub fn fired_line(fired: &std::collections::BTreeMap<&'static str, u64>) -> String {
    let kinds = sim::scenario::FaultKind::ALL
        .iter()
        .map(|k| k.as_str())
        .chain(sim::sweep::DELIVERY_ORDERS);
    let named: Vec<String> = kinds
        .filter_map(|k| fired.get(k).map(|n| format!("{k} {n}")))
        .chain(
            fired
                .iter()
                .filter(|(k, _)| k.starts_with("journal-damage:"))
                .map(|(k, n)| format!("{k} {n}")),
        )
        .collect();
    if named.is_empty() {
        "faults fired: none".to_string()
    } else {
        format!("faults fired: {}", named.join(", "))
    }
}

/// A run's outcome as `sim run --over-http --outcome FILE` writes it for a sweep: whether it
/// passed, its violations and failed expectations, what fired, how many processes, wall time.
pub fn outcome_json(played: &Played) -> serde_json::Value {
    let report = &played.report;
    serde_json::json!({
        "passed": report.passed(),
        "violations": report.violations,
        "failures": report.failures.iter().map(|f| format!("line {}: {}", f.line, f.message)).collect::<Vec<_>>(),
        "fired": report.faults_fired,
        "checks": report.invariant_checks,
        "processes": played.processes,
        "wall_s": played.wall.as_secs_f64(),
    })
}

/// What the run was, besides its verdict.
pub struct Played {
    pub report: Report,
    pub tolerance: Duration,
    pub processes: u32,
    pub wall: std::time::Duration,
}

/// Runs the scenario over HTTP: `Err` when the run itself could not happen.
pub fn run(scenario: &Scenario, setup: &OverHttp) -> Result<Played, String> {
    let runtime =
        tokio::runtime::Runtime::new().map_err(|e| format!("starting the runtime: {e}"))?;
    runtime.block_on(play(scenario, setup))
}

/// The clock's origin: the next whole second, so the world's timestamps keep the API's
/// precision.
pub fn origin() -> Timestamp {
    Timestamp((clock::wall_now().as_millis() / 1000 + 1) * 1000)
}

/// How long, in real time, the world's clock waits for the controller it spawns: the process
/// starts, checks and opens its journal, connects and lists before t=0, so that a window at 0s
/// judges the controller and not its start on a busy machine (16 debug-build controllers
/// starting at once on 2 cores took about 3 s). What it does before t=0 counts at t=0.
pub const CONTROLLER_START_REAL_MS: i64 = 4_000;

async fn play(scenario: &Scenario, setup: &OverHttp) -> Result<Played, String> {
    let started = std::time::Instant::now();
    let origin = Timestamp(origin().as_millis() + CONTROLLER_START_REAL_MS);
    clock::scale(origin, setup.speed)?;
    let tolerance = Duration::from_millis(TOLERANCE_REAL_MS * i64::from(setup.speed));
    let seed = setup.seed.unwrap_or(scenario.seed);
    let mut live = Live::new(scenario, seed, origin, tolerance);
    let options = ServerOptions {
        // The live world plays the kubelet and the other cluster controllers.
        controllers_interval: None,
        record: recorder(setup.record_requests.as_deref())?,
        ..ServerOptions::default()
    };
    let world = ServedWorld::start_live(&mut live, setup.port, options)
        .await
        .map_err(|e| format!("serving the world on port {}: {e}", setup.port))?;
    let mut dir = tempfile::Builder::new()
        .prefix("lifecycle-over-http-")
        .tempdir()
        .map_err(|e| format!("a temporary directory: {e}"))?;
    if std::env::var_os(KEEP_ENV).is_some() {
        // Debugging a run: the kubeconfigs, the controller's log and journal stay.
        dir.disable_cleanup(true);
        eprintln!("{KEEP_ENV}: keeping {}", dir.path().display());
    }
    let kubeconfigs = world
        .write_kubeconfigs(dir.path())
        .map_err(|e| format!("writing kubeconfigs: {e}"))?;
    let management = kubeconfigs
        .iter()
        .find(|(name, _)| name == "management")
        .map(|(_, p)| p.clone())
        .ok_or("no management kubeconfig")?;
    let journal = setup
        .journal
        .clone()
        .unwrap_or_else(|| dir.path().join("journal"));
    let controller = Controller {
        kubeconfig: management,
        journal: journal.clone(),
        log: dir.path().join("controller.log"),
        origin,
        speed: setup.speed,
        mode: scenario.mode,
        // A world that runs CAPI's manager beside a controller in mode alone plays the
        // operator who overrode the start's check (which refuses it) by mistake.
        capi_manager_stopped: scenario.mode == engine::runtime::Mode::Alone
            && scenario.world.capi_manager,
    };
    let mut player = Player::start(live, world.clusters());
    let mut child = controller.spawn()?;
    let mut processes = 1;
    while !player.is_finished() {
        let exited = tokio::select! {
            Some(n) = player.restarts.recv() => {
                for _ in 0..n {
                    kill(&mut child).await;
                    child = controller.spawn()?;
                    processes += 1;
                }
                None
            }
            status = child.wait() => Some(status),
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => None,
        };
        if let Some(status) = exited {
            let _ = player.stop().await;
            world.shutdown().await;
            return Err(format!(
                "the controller exited unexpectedly ({}); the end of its log:\n{}",
                status.map_or_else(|e| e.to_string(), |s| s.to_string()),
                controller.log_tail()
            ));
        }
    }
    let live = player.finished().await?;
    // Every input is durable before it is applied: killing loses nothing the journal vouches for.
    kill(&mut child).await;
    let fired = world.faults_fired();
    let stores = world.take_stores();
    world.shutdown().await;
    let records = super::log::controller_records(&journal)?;
    let end = live.end();
    let records: Vec<_> = records.into_iter().filter(|r| r.at <= end).collect();
    let mut report = live.finish(&records, stores);
    for (kind, n) in fired {
        *report.faults_fired.entry(kind).or_default() += n;
    }
    Ok(Played {
        report,
        tolerance,
        processes,
        wall: started.elapsed(),
    })
}

/// How to start the controller process.
struct Controller {
    kubeconfig: PathBuf,
    journal: PathBuf,
    log: PathBuf,
    origin: Timestamp,
    speed: u32,
    mode: engine::runtime::Mode,
    /// Passes `--capi-manager-stopped`.
    capi_manager_stopped: bool,
}

impl Controller {
    fn spawn(&self) -> Result<Child, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("finding the lifecycle binary: {e}"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        Command::new(&exe)
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--journal")
            .arg(&self.journal)
            .args(["--metrics-addr", "127.0.0.1:0"])
            .arg("--clock-origin-ms")
            .arg(self.origin.as_millis().to_string())
            .arg("--clock-speed")
            .arg(self.speed.to_string())
            .args(["--mode", self.mode.as_str()])
            .args(
                self.capi_manager_stopped
                    .then_some("--capi-manager-stopped"),
            )
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {} run: {e}", exe.display()))
    }

    /// The last lines of the controller's log, for a failure message.
    fn log_tail(&self) -> String {
        tail(&self.log, 20)
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

async fn kill(child: &mut Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}
