//! `lifecycle release [--all | NAMESPACE/NAME]`: hands worker Machines back to Cluster API's
//! manager by removing this controller's deletion hooks (`--mode takeover`). The uninstall path:
//! once the hooks are gone CAPI's manager deletes those Machines itself, from wherever their
//! deletion stands (a drained Node is not drained again; what is already deleted counts as
//! deleted).
//!
//! Stop `lifecycle run --mode takeover` first (or run it `--mode shadow`): a running takeover
//! puts its hooks back on the Machines it owns that are not being deleted.

use super::run::{RunFailure, management_client};
use clap::Args;
use engine::ownership::{
    OWN_CONDITION, OWN_PRE_DRAIN_HOOK, OWN_PRE_TERMINATE_HOOK, release_patch, released_conditions,
};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use std::path::PathBuf;

const EXIT_INPUT: u8 = 2;
const EXIT_UNABLE: u8 = 3;

#[derive(Args)]
#[command(after_help = "\
Removes the annotations pre-drain.delete.hook.machine.cluster.x-k8s.io/lifecycle,
pre-terminate.delete.hook.machine.cluster.x-k8s.io/lifecycle and lifecycle.x-k8s.io/hooks-held-by
(which names their holder), and nothing else. Hooks of other
owners, and hooks Cluster API propagates from a MachineDeployment's template, stay. A Machine's
LifecycleDeleting condition that still tells a deletion under way becomes False,
ReleasedToClusterAPI.

Exit codes: 0 released (or nothing to release); 2 bad input (neither --all nor a Machine, a
malformed NAMESPACE/NAME, a Machine that does not exist, the kubeconfig); 3 the API refused or
could not be reached (the Machines listed before the failure are released).")]
pub struct ReleaseArgs {
    /// Every Machine that carries this controller's hooks, in every namespace.
    #[arg(long, conflicts_with = "machine")]
    all: bool,
    /// One Machine, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/NAME")]
    machine: Option<String>,
    /// The management cluster's kubeconfig (default: the usual lookup, in-cluster included).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Print what would be released; change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Which Machines to release.
enum Selection {
    All,
    One { namespace: String, name: String },
}

fn selection(args: &ReleaseArgs) -> Result<Selection, String> {
    match (&args.machine, args.all) {
        (None, true) => Ok(Selection::All),
        (Some(m), false) => match m.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Selection::One {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(format!(
                "{m:?} is not NAMESPACE/NAME (for example default/worker-abc12)"
            )),
        },
        _ => Err("name a Machine as NAMESPACE/NAME, or pass --all".to_string()),
    }
}

pub fn main(args: ReleaseArgs) -> u8 {
    let selection = match selection(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lifecycle release: {e}");
            return EXIT_INPUT;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle release: starting the runtime: {e}");
            return EXIT_UNABLE;
        }
    };
    match runtime.block_on(release(&args, selection)) {
        Ok(()) => 0,
        Err(RunFailure::Input(e)) => {
            eprintln!("lifecycle release: {e}");
            EXIT_INPUT
        }
        Err(RunFailure::Unable(e)) => {
            eprintln!("lifecycle release: {e}");
            EXIT_UNABLE
        }
        Err(RunFailure::Restart) => EXIT_UNABLE,
    }
}

/// A CAPI kind in the first version the server serves (the annotations are the same in every
/// version).
pub(super) async fn served(client: &kube::Client, kind: &str) -> Result<ApiResource, RunFailure> {
    let plural = engine::convert::plural(kind);
    let mut last = None;
    for version in ["v1beta2", "v1beta1"] {
        let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", version, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(resource),
            Err(kube::Error::Api(s)) if s.code == 404 => last = Some(version),
            Err(e) => return Err(RunFailure::Unable(format!("listing {kind}s: {e}"))),
        }
    }
    Err(RunFailure::Unable(format!(
        "the server serves no Cluster API {kind}s (cluster.x-k8s.io v1beta2 or {})",
        last.unwrap_or("v1beta1")
    )))
}

/// Sets the Machine's own condition to `ReleasedToClusterAPI` when it told a deletion under
/// way, with the resourceVersion read as a precondition (CAPI's manager writes its conditions
/// too): a conflict reads the Machine again, a few times.
async fn tell_released(api: &Api<DynamicObject>, mut m: DynamicObject) -> Result<(), String> {
    let name = m.metadata.name.clone().unwrap_or_default();
    for _ in 0..3 {
        let value = serde_json::to_value(&m).map_err(|e| e.to_string())?;
        let machine = match engine::convert::object_from_json(&value) {
            Ok(Some(engine::model::Object::Machine(machine))) => machine,
            Ok(_) => return Err("not readable as a Machine".to_string()),
            Err(e) => return Err(e.to_string()),
        };
        let Some(conditions) = released_conditions(&machine, adapters::clock::wall_now()) else {
            return Ok(());
        };
        let version = engine::convert::capi_version_of(
            m.types.as_ref().map_or("", |t| t.api_version.as_str()),
        );
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": m.metadata.resource_version},
            "status": engine::convert::conditions_json(version, &conditions),
        });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                m = api.get(&name).await.map_err(|e| e.to_string())?;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("the Machine kept changing (409 Conflict three times)".to_string())
}

fn own_hooks(m: &DynamicObject) -> Vec<&'static str> {
    let annotations = m.metadata.annotations.as_ref();
    [OWN_PRE_DRAIN_HOOK, OWN_PRE_TERMINATE_HOOK]
        .into_iter()
        .filter(|h| annotations.is_some_and(|a| a.contains_key(*h)))
        .collect()
}

async fn release(args: &ReleaseArgs, selection: Selection) -> Result<(), RunFailure> {
    let client = management_client(args.kubeconfig.as_ref()).await?;
    let resource = served(&client, "Machine").await?;
    let found: Vec<DynamicObject> = match &selection {
        Selection::All => Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&ListParams::default())
            .await
            .map_err(|e| RunFailure::Unable(format!("listing Machines: {e}")))?
            .items
            .into_iter()
            .filter(|m| !own_hooks(m).is_empty())
            .collect(),
        Selection::One { namespace, name } => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            match api.get_opt(name).await {
                Ok(Some(m)) => vec![m],
                Ok(None) => {
                    return Err(RunFailure::Input(format!(
                        "Machine {namespace}/{name} does not exist"
                    )));
                }
                Err(e) => {
                    return Err(RunFailure::Unable(format!(
                        "reading Machine {namespace}/{name}: {e}"
                    )));
                }
            }
        }
    };
    let mut released = 0;
    for m in &found {
        let (ns, name) = (
            m.metadata.namespace.clone().unwrap_or_default(),
            m.metadata.name.clone().unwrap_or_default(),
        );
        let hooks = own_hooks(m);
        if hooks.is_empty() {
            println!("{ns}/{name}: carries none of this controller's hooks; nothing to release");
            continue;
        }
        if args.dry_run {
            println!("{ns}/{name}: would remove {}", hooks.join(", "));
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
        let unhooked = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(release_patch()),
            )
            .await
            .map_err(|e| {
                RunFailure::Unable(format!(
                    "removing the hooks of Machine {ns}/{name}: {e} ({released} released before it)"
                ))
            })?;
        released += 1;
        println!(
            "{ns}/{name}: removed {}; Cluster API's manager takes it back",
            hooks.join(", ")
        );
        if let Err(e) = tell_released(&api, unhooked).await {
            // The hooks are off, which is what hands the Machine back: a stale condition is
            // worth a warning, not a failure.
            eprintln!(
                "lifecycle release: {ns}/{name}: its {OWN_CONDITION} condition still tells the deletion as it stood: {e}"
            );
        }
    }
    if matches!(selection, Selection::All) {
        let given_back = super::adopt::give_back_all(&client, args.dry_run).await?;
        if found.is_empty() && given_back.is_empty() {
            println!(
                "no Machine carries this controller's hooks and no MachineHealthCheck or MachinePool is adopted; nothing to release"
            );
        }
        for line in given_back {
            println!("{line}");
        }
    }
    Ok(())
}
