//! `lifecycle adopt mhc|pool NAMESPACE/NAME`: beside Cluster API's manager (`run --mode
//! takeover`), hands one MachineHealthCheck or MachinePool to this controller by pausing it for
//! CAPI (`cluster.x-k8s.io/paused`) with this controller's marker
//! (`lifecycle.x-k8s.io/adopted: lifecycle`). `--give-back` removes both. `lifecycle release
//! --all` gives every adopted object back.

use super::release::served;
use super::run::{RunFailure, management_client};
use adapters::kube::lease;
use clap::{Args, ValueEnum};
use engine::model::PAUSED_ANNOTATION;
use engine::ownership::{ADOPTED_ANNOTATION, adopted, adoption_patch};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use std::path::PathBuf;

const EXIT_INPUT: u8 = 2;
const EXIT_UNABLE: u8 = 3;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Adoptable {
    /// A MachineHealthCheck.
    Mhc,
    /// A MachinePool.
    Pool,
}

impl Adoptable {
    pub const ALL: [Adoptable; 2] = [Adoptable::Mhc, Adoptable::Pool];

    pub fn kind(self) -> &'static str {
        match self {
            Adoptable::Mhc => "MachineHealthCheck",
            Adoptable::Pool => "MachinePool",
        }
    }
}

#[derive(Args)]
#[command(after_help = "\
While adopted, CAPI's manager does not reconcile the object (it still writes its Paused
condition) and `lifecycle run --mode takeover` does: health checks and remediation through the
owner (OwnerRemediated=False, which CAPI's MachineSet acts on) or the external template; a
MachinePool's status, nodeRefs, replicas and deletion. An object paused by someone else is not
adopted. The Cluster's spec.paused pauses both managers. Anything that removes the pause gives
the object back to CAPI.

An object is adopted only while a takeover controller leads: its Lease (--leader-election-namespace,
--leader-election-id, as `run` was given them) names mode takeover and was renewed within 30
seconds. Otherwise adopting would pause CAPI's reconcile of it with nobody to take over;
--without-takeover-leader adopts anyway, said loudly. Giving back needs no leader.

Exit codes: 0 adopted or given back (or already so); 2 bad input (not NAMESPACE/NAME, an object
that does not exist, one paused by someone else); 3 the API refused or could not be reached, or
no takeover controller leads.")]
pub struct AdoptArgs {
    #[arg(value_enum)]
    kind: Adoptable,
    /// The object, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/NAME")]
    object: String,
    /// Give it back to CAPI: remove the pause and the marker.
    #[arg(long)]
    give_back: bool,
    /// The management cluster's kubeconfig (default: the usual lookup, in-cluster included).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where the controller's leader Lease is (the manifests run it in lifecycle-system).
    #[arg(long, default_value = "lifecycle-system")]
    leader_election_namespace: String,
    #[arg(long, default_value = lease::DEFAULT_LEASE_NAME)]
    leader_election_id: String,
    /// Adopt although no takeover controller leads: nobody reconciles the object until one
    /// does (CAPI's manager leaves it paused).
    #[arg(long, conflicts_with = "give_back")]
    without_takeover_leader: bool,
    /// Test only: the clock `sim serve` prints for the controller (the Lease's renewals are
    /// read on it).
    #[arg(long, hide = true, requires = "clock_speed")]
    clock_origin_ms: Option<i64>,
    #[arg(long, hide = true, requires = "clock_origin_ms")]
    clock_speed: Option<u32>,
}

/// Refuses unless a takeover controller leads (or the operator said to go on without one).
async fn takeover_leader(args: &AdoptArgs, client: &kube::Client) -> Result<(), RunFailure> {
    let lease_name = format!(
        "{}/{}",
        args.leader_election_namespace, args.leader_election_id
    );
    let api: Api<Lease> = Api::namespaced(client.clone(), &args.leader_election_namespace);
    let leads =
        match lease::leader(&api, &args.leader_election_id, adapters::clock::wall_now()).await {
            Ok(Some(leader)) if adapters::preflight::serves(&leader) => return Ok(()),
            Ok(Some(leader)) => format!("the Lease {lease_name} is {leader}"),
            Ok(None) => format!("nobody holds the Lease {lease_name}"),
            Err(e) => format!("the Lease {lease_name} cannot be read: {e}"),
        };
    let why = format!(
        "no takeover controller leads ({leads}): adopting would pause Cluster API's reconcile of it with nobody to reconcile it"
    );
    if args.without_takeover_leader {
        eprintln!(
            "lifecycle adopt: WARNING: {why}; adopting anyway (--without-takeover-leader): start `lifecycle run --mode takeover` or give it back with --give-back"
        );
        return Ok(());
    }
    Err(RunFailure::Unable(format!(
        "{why}. Start `lifecycle run --mode takeover --leader-elect` (adapters/deploy/takeover), point --leader-election-namespace/--leader-election-id at its Lease, or pass --without-takeover-leader"
    )))
}

pub fn main(args: AdoptArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle adopt: starting the runtime: {e}");
            return EXIT_UNABLE;
        }
    };
    match runtime.block_on(adopt(&args)) {
        Ok(done) => {
            println!("{done}");
            0
        }
        Err(RunFailure::Input(e)) => {
            eprintln!("lifecycle adopt: {e}");
            EXIT_INPUT
        }
        Err(RunFailure::Unable(e)) => {
            eprintln!("lifecycle adopt: {e}");
            EXIT_UNABLE
        }
        Err(RunFailure::Restart) => EXIT_UNABLE,
    }
}

async fn adopt(args: &AdoptArgs) -> Result<String, RunFailure> {
    let (namespace, name) = match args.object.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => (ns, name),
        _ => {
            return Err(RunFailure::Input(format!(
                "{:?} is not NAMESPACE/NAME (for example default/workers-mhc)",
                args.object
            )));
        }
    };
    let kind = args.kind.kind();
    if let (Some(origin), Some(speed)) = (args.clock_origin_ms, args.clock_speed) {
        adapters::clock::scale(engine::Timestamp(origin), speed).map_err(RunFailure::Input)?;
    }
    let client = management_client(args.kubeconfig.as_ref()).await?;
    let resource = served(&client, kind).await?;
    let api_client = client.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
    let object = match api.get_opt(name).await {
        Ok(Some(o)) => o,
        Ok(None) => {
            return Err(RunFailure::Input(format!(
                "{kind} {namespace}/{name} does not exist"
            )));
        }
        Err(e) => {
            return Err(RunFailure::Unable(format!(
                "reading {kind} {namespace}/{name}: {e}"
            )));
        }
    };
    let meta = adapters::preflight::meta(&object);
    let ours = adopted(&meta);
    let subject = format!("{kind} {namespace}/{name}");
    if !args.give_back && !ours {
        takeover_leader(args, &api_client).await?;
    }
    if args.give_back {
        if !ours && !meta.has_annotation(ADOPTED_ANNOTATION) {
            return Ok(format!("{subject} is not adopted: nothing to give back"));
        }
    } else if ours {
        return Ok(format!("{subject} is adopted already"));
    } else if meta.has_annotation(PAUSED_ANNOTATION) {
        return Err(RunFailure::Input(format!(
            "{subject} is paused by someone else ({PAUSED_ANNOTATION} without {ADOPTED_ANNOTATION}): it stays paused, for this controller too; remove the pause first if it should be adopted"
        )));
    }
    let mut patch = adoption_patch(!args.give_back);
    patch["metadata"]["resourceVersion"] = object.metadata.resource_version.clone().into();
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| RunFailure::Unable(format!("patching {subject}: {e}")))?;
    Ok(if args.give_back {
        format!(
            "{subject}: {PAUSED_ANNOTATION} and {ADOPTED_ANNOTATION} removed; Cluster API's manager reconciles it again"
        )
    } else {
        format!(
            "{subject}: {PAUSED_ANNOTATION} and {ADOPTED_ANNOTATION} set; Cluster API's manager leaves it to `lifecycle run --mode takeover`"
        )
    })
}

/// Gives back every adopted MHC and MachinePool (`release --all`): what it did, one line each.
pub(super) async fn give_back_all(
    client: &kube::Client,
    dry_run: bool,
) -> Result<Vec<String>, RunFailure> {
    let mut lines = Vec::new();
    for adoptable in Adoptable::ALL {
        let kind = adoptable.kind();
        let resource = served(client, kind).await?;
        let list = Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&ListParams::default())
            .await
            .map_err(|e| RunFailure::Unable(format!("listing {kind}s: {e}")))?;
        for o in list
            .items
            .iter()
            .filter(|o| adopted(&adapters::preflight::meta(o)))
        {
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            let name = o.metadata.name.clone().unwrap_or_default();
            if dry_run {
                lines.push(format!("{kind} {ns}/{name}: would give back"));
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(adoption_patch(false)),
            )
            .await
            .map_err(|e| RunFailure::Unable(format!("giving back {kind} {ns}/{name}: {e}")))?;
            lines.push(format!(
                "{kind} {ns}/{name}: given back; Cluster API's manager reconciles it again"
            ));
        }
    }
    Ok(lines)
}
