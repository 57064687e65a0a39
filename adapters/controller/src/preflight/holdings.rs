//! What this controller holds in the cluster, and whether a controller serves it: Machines
//! carrying its deletion hooks (CAPI's manager waits at them) and MachineHealthChecks and
//! MachinePools it adopted (CAPI's manager leaves them paused). Only a takeover leader serves
//! them; anything else holds them for nobody, so every mode's start and `lifecycle preflight`
//! name them with the holder and the command that lets them go.

use super::{Check, Options, Verdict, capi_api};
use crate::kube::lease::{self, Leader};
use engine::model::ObjectMeta;
use engine::ownership::{OWN_PRE_DRAIN_HOOK, OWN_PRE_TERMINATE_HOOK, adopted};
use engine::runtime::Mode;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use std::time::Duration;

const NAME: &str = "own-hooks";

/// How many objects a line names before it says how many more.
const NAMED_MAX: usize = 10;

/// How recently a takeover leader must have renewed to count as serving (twice its renewal
/// period).
pub const LEADER_RENEWED_WITHIN: Duration = Duration::from_secs(30);

/// The takeover leader's Lease (`--leader-election-namespace`, `--leader-election-id`).
#[derive(Clone, Debug)]
pub struct LeaderLease {
    pub namespace: String,
    pub name: String,
}

/// Whether `leader` is a takeover controller that renewed lately.
pub fn serves(leader: &Leader) -> bool {
    leader.mode.as_deref() == Some(Mode::Takeover.as_str())
        && leader
            .renewed_ago
            .is_some_and(|ago| ago <= LEADER_RENEWED_WITHIN)
}

/// An object's annotations as the engine's metadata (what `adopted` and the pause rules read).
pub fn meta(o: &DynamicObject) -> ObjectMeta {
    ObjectMeta {
        annotations: o
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

fn name_of(kind: &str, o: &DynamicObject) -> String {
    format!(
        "{kind} {}/{}",
        o.metadata.namespace.as_deref().unwrap_or_default(),
        o.metadata.name.as_deref().unwrap_or_default()
    )
}

fn named(list: &[String]) -> String {
    let mut out = list
        .iter()
        .take(NAMED_MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > NAMED_MAX {
        out.push_str(&format!(" and {} more", list.len() - NAMED_MAX));
    }
    out
}

/// This controller's holdings, as `options.mode` would treat them.
pub async fn check(client: &Client, options: &Options, machines: &[DynamicObject]) -> Check {
    let mut deleting = Vec::new();
    let mut waiting = Vec::new();
    for m in machines {
        let annotations = m.metadata.annotations.as_ref();
        let hooked = annotations.is_some_and(|a| {
            a.contains_key(OWN_PRE_DRAIN_HOOK) || a.contains_key(OWN_PRE_TERMINATE_HOOK)
        });
        if !hooked {
            continue;
        }
        if m.metadata.deletion_timestamp.is_some() {
            deleting.push(name_of("Machine", m));
        } else {
            waiting.push(name_of("Machine", m));
        }
    }
    let mut adoptions = Vec::new();
    for (kind, plural) in [
        ("MachineHealthCheck", "machinehealthchecks"),
        ("MachinePool", "machinepools"),
    ] {
        match capi_api(client, kind, plural, options.namespace.as_deref())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => adoptions.extend(
                list.items
                    .iter()
                    .filter(|o| adopted(&meta(o)))
                    .map(|o| name_of(kind, o)),
            ),
            // A cluster without MachinePools (the gate off) has nothing adopted there.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Check::not_ok(
                    NAME,
                    Verdict::Warn,
                    format!("cannot list {kind}s to find what this controller adopted: {e}"),
                    "see rbac".to_string(),
                );
            }
        }
    }
    if deleting.is_empty() && waiting.is_empty() && adoptions.is_empty() {
        return Check::ok(
            NAME,
            "no Machine carries this controller's hooks and nothing is adopted".to_string(),
        );
    }
    let leader = read_leader(client, options).await;
    let mut held = Vec::new();
    if !deleting.is_empty() {
        held.push(format!(
            "{} deleting Machine(s) wait at its hooks: {}",
            deleting.len(),
            named(&deleting)
        ));
    }
    if !waiting.is_empty() {
        held.push(format!(
            "{} more Machine(s) carry them: {}",
            waiting.len(),
            named(&waiting)
        ));
    }
    if !adoptions.is_empty() {
        held.push(format!("adopted: {}", named(&adoptions)));
    }
    let held = held.join("; ");
    let release = "`lifecycle release --all` removes every hook of this controller and gives every adoption back (`lifecycle release NAMESPACE/NAME` one Machine)";
    let (served, holder) = match &leader {
        Ok(Some(l)) if serves(l) => (true, format!("served by the takeover leader {}", l.holder)),
        Ok(Some(l)) => (
            false,
            format!("no takeover leader serves them: the Lease is {l}"),
        ),
        Ok(None) => (
            false,
            "no takeover leader serves them: nobody holds this controller's Lease".to_string(),
        ),
        Err(why) => (
            false,
            format!("whether a takeover leader serves them is unknown: {why}"),
        ),
    };
    let detail = format!("{held} ({holder})");
    let check = match options.mode {
        Mode::Takeover => Check::ok(
            NAME,
            format!("{detail}: a takeover start resumes them from its journal"),
        ),
        Mode::Alone => Check::not_ok(
            NAME,
            Verdict::Warn,
            format!(
                "{detail}: --mode alone does not wait for its own hooks, and leaves adopted objects paused for Cluster API"
            ),
            release.to_string(),
        ),
        Mode::Shadow if served => Check::ok(
            NAME,
            format!("{detail}: --mode shadow leaves them to that leader"),
        ),
        Mode::Shadow => Check::not_ok(
            NAME,
            Verdict::Warn,
            format!(
                "{detail}: --mode shadow does not serve them, so Cluster API's manager waits at the hooks and leaves the adopted objects paused"
            ),
            format!("start `lifecycle run --mode takeover`, or {release}"),
        ),
    };
    Check {
        held: Some(format!("{held}; {release}")),
        ..check
    }
}

async fn read_leader(client: &Client, options: &Options) -> Result<Option<Leader>, String> {
    let Some(at) = &options.leader_lease else {
        return Err("no leader Lease to read (run with --leader-elect)".to_string());
    };
    let api: Api<Lease> = Api::namespaced(client.clone(), &at.namespace);
    lease::leader(&api, &at.name, crate::clock::wall_now())
        .await
        .map_err(|e| format!("reading the Lease {}/{}: {e}", at.namespace, at.name))
}
