//! `lifecycle preflight`: the checks `adapters::preflight` makes, printed for an operator
//! before installing next to Cluster API's manager.

use super::log::Format;
use super::run::{RunFailure, management_client};
use adapters::preflight::{self, Check, Options, Release, ServiceAccount, Verdict};
use clap::Args;
use engine::runtime::Mode;
use std::path::PathBuf;

const EXIT_FAILED: u8 = 1;
const EXIT_INPUT: u8 = 2;
const EXIT_UNABLE: u8 = 3;

#[derive(Args)]
#[command(after_help = "\
Checks, reading only (and asking access reviews): whether Cluster API's own
manager runs (a Lease controller-leader-election-capi renewed within 5 minutes, or a Deployment
labelled cluster.x-k8s.io/provider=cluster-api with ready replicas, in any namespace, or a
Machine's status.phase, conditions or status.deletion written within 5 minutes by another field
manager than lifecycle, from its managedFields: --mode alone fails while it runs or cannot be
told, the other modes warn when it does not); the API versions of
cluster.x-k8s.io (v1beta2 is read); the release of Cluster API's manager (the image tag of its
Deployment capi-controller-manager, or --capi-version) against the supported releases; its
MachinePool feature gate; the RBAC the mode needs (the caller's, or with --service-account that
ServiceAccount's); other owners' deletion hooks, control-plane
Machines and Machines already deleting; Machines carrying this controller's hooks and objects it
adopted, with whether a takeover leader serves them (its Lease's lifecycle.x-k8s.io/mode, renewed
within 30 s) and the command that lets them go; hooks that MachineDeployment or MachineSet templates
propagate. `lifecycle run` runs the same checks for its mode first and refuses to start on a
FAIL.

Exit codes: 0 nothing failed (warnings may be listed); 1 a check failed: the mode would be
refused or would not work; 2 bad input (the kubeconfig); 3 the tool could not run.")]
pub struct PreflightArgs {
    /// The mode to check for.
    #[arg(long, default_value_t = Mode::Takeover, value_name = "alone|shadow|takeover")]
    mode: Mode,
    /// The management cluster's kubeconfig (default: the usual lookup, in-cluster included).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where Cluster API's manager runs (its Deployment capi-controller-manager).
    #[arg(long, default_value = "capi-system")]
    capi_namespace: String,
    /// The release Cluster API's manager runs (`v1.12.3`), when its Deployment cannot be read.
    #[arg(long, value_name = "RELEASE", value_parser = Release::parse)]
    capi_version: Option<Release>,
    /// As `run --namespace`: permissions are asked there, Machines listed there.
    #[arg(long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// As `run --capi-manager-stopped`: Cluster API's manager is known to be stopped for good
    /// (the capi-manager check of --mode alone warns instead of failing).
    #[arg(long)]
    capi_manager_stopped: bool,
    /// The namespace of this controller's leader Lease, which says whether a takeover leader
    /// serves its hooks and adoptions (as `run --leader-election-namespace` was given).
    #[arg(long, default_value = "lifecycle-system")]
    leader_election_namespace: String,
    #[arg(long, default_value = adapters::kube::lease::DEFAULT_LEASE_NAME)]
    leader_election_id: String,
    /// The ServiceAccount the controller runs as (`lifecycle-system/lifecycle-controller` in
    /// the shipped manifests): the rbac check asks SubjectAccessReviews for its grants instead
    /// of the caller's (the caller then needs create on subjectaccessreviews; refused, it asks
    /// for the caller's own and warns). Default: the caller's grants.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = ServiceAccount::parse)]
    service_account: Option<ServiceAccount>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

pub fn main(args: PreflightArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle preflight: starting the runtime: {e}");
            return EXIT_UNABLE;
        }
    };
    let checks = match runtime.block_on(run(&args)) {
        Ok(checks) => checks,
        Err(RunFailure::Input(e)) => {
            eprintln!("lifecycle preflight: {e}");
            return EXIT_INPUT;
        }
        Err(RunFailure::Unable(e)) => {
            eprintln!("lifecycle preflight: {e}");
            return EXIT_UNABLE;
        }
        Err(RunFailure::Restart) => return EXIT_UNABLE,
    };
    match args.format {
        Format::Json => {
            let all: Vec<_> = checks.iter().map(Check::to_json).collect();
            println!(
                "{}",
                serde_json::json!({"mode": args.mode.as_str(), "checks": all})
            );
        }
        Format::Text => print!("{}", text(args.mode, &checks)),
    }
    if preflight::worst(&checks) == Verdict::Fail {
        EXIT_FAILED
    } else {
        0
    }
}

async fn run(args: &PreflightArgs) -> Result<Vec<Check>, RunFailure> {
    let client = management_client(args.kubeconfig.as_ref()).await?;
    let options = Options {
        mode: args.mode,
        capi_namespace: args.capi_namespace.clone(),
        capi_version: args.capi_version.clone(),
        namespace: args.namespace.clone(),
        capi_manager_stopped: args.capi_manager_stopped,
        leader_lease: Some(preflight::LeaderLease {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_id.clone(),
        }),
        service_account: args.service_account.clone(),
    };
    Ok(preflight::examine(&client, &options).await)
}

/// One line per check, what unblocks it under it, and a summary.
pub(super) fn text(mode: Mode, checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!(
            "{:<5} {:<17} {}\n",
            c.verdict.as_str(),
            c.name,
            c.detail
        ));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("{:<23} → {fix}\n", ""));
        }
    }
    let count = |v| checks.iter().filter(|c| c.verdict == v).count();
    out.push_str(&format!(
        "preflight for --mode {mode}: {} failed, {} warning(s)\n",
        count(Verdict::Fail),
        count(Verdict::Warn)
    ));
    out
}
