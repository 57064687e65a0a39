//! `lifecycle preflight`: what an operator must know before this controller acts next to
//! Cluster API's manager, read from the management cluster (reads and SelfSubjectAccessReviews
//! only, nothing written). `lifecycle run --mode takeover` runs it first and refuses to start on
//! a failure.
//!
//! Each check answers: what was found, whether the mode can run with it, what unblocks it.

pub mod follow;
mod holdings;
mod neighbour;
mod permissions;

pub use holdings::{LEADER_RENEWED_WITHIN, LeaderLease, meta, serves};
pub use neighbour::{Neighbour, PROVIDER_LABEL, Unread};

pub use engine::release::{Release, SUPPORTED_MINORS, Support, supported_text};
pub use permissions::{Permission, needed};

use engine::model::{PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX};
use engine::ownership::{OWN_PRE_DRAIN_HOOK, OWN_PRE_TERMINATE_HOOK};
use engine::runtime::Mode;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The name of CAPI's manager Deployment in upstream's manifests.
pub const CAPI_DEPLOYMENT: &str = "capi-controller-manager";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        }
    }
}

/// One check's answer.
#[derive(Clone, Debug)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// What unblocks it, when it is not ok.
    pub fix: Option<String>,
    /// The answer may change on its own (no connection, a 5xx, 429): worth asking again.
    pub transient: bool,
    /// A failure the operator overrode: what it found (journaled by `lifecycle run`).
    pub overridden: Option<String>,
    /// What this controller holds in the cluster and what lets it go, for a refused start to
    /// repeat (its hooks on Machines, its adoptions).
    pub held: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: String) -> Check {
        Check {
            name,
            verdict: Verdict::Ok,
            detail,
            fix: None,
            transient: false,
            overridden: None,
            held: None,
        }
    }

    fn not_ok(name: &'static str, verdict: Verdict, detail: String, fix: String) -> Check {
        Check {
            name,
            verdict,
            detail,
            fix: Some(fix),
            transient: false,
            overridden: None,
            held: None,
        }
    }

    fn transient(mut self, transient: bool) -> Check {
        self.transient = transient;
        self
    }

    fn overridden(mut self, found: String) -> Check {
        self.overridden = Some(found);
        self
    }

    pub fn to_json(&self) -> Value {
        json!({"check": self.name, "verdict": self.verdict.as_str().to_lowercase(),
               "detail": self.detail, "fix": self.fix})
    }
}

/// What to check, as `lifecycle run` would be started.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// Where CAPI's manager runs (its Deployment [`CAPI_DEPLOYMENT`]).
    pub capi_namespace: String,
    /// The release CAPI's manager runs, when its Deployment cannot be read.
    pub capi_version: Option<Release>,
    /// `--namespace`: permissions are asked there, Machines listed there.
    pub namespace: Option<String>,
    /// `--capi-manager-stopped`: the operator knows CAPI's manager is stopped, whatever its
    /// Lease and Deployment say (an `alone` start then warns instead of refusing).
    pub capi_manager_stopped: bool,
    /// This controller's leader Lease, which tells whether a takeover leader serves its hooks
    /// and adoptions (`None`: not known, as for `run` without `--leader-elect`).
    pub leader_lease: Option<LeaderLease>,
}

/// Every check for `options.mode`, in a fixed order.
pub async fn examine(client: &Client, options: &Options) -> Vec<Check> {
    let manager = read_manager(client, &options.capi_namespace).await;
    let neighbour = neighbour::read(client, crate::clock::wall_now()).await;
    let mut checks = vec![
        capi_manager(options, &neighbour),
        api_versions(client).await,
        release_check(options, &manager, &neighbour),
        machine_pool_gate(&manager),
        rbac(client, options).await,
    ];
    checks.extend(hooks(client, options).await);
    checks
}

/// Whether Cluster API's manager runs, as the mode needs it: `alone` fails while it runs or
/// while that cannot be told; `shadow` and `takeover` warn when it does not run (nobody
/// would remove the finalizer of a Machine they finish, or take the steps shadow compares).
fn capi_manager(options: &Options, found: &Neighbour) -> Check {
    const NAME: &str = "capi-manager";
    let choose = "run it with --mode shadow (it watches and decides, and writes nothing) or --mode takeover (it owns worker Machines' deletion through its hooks)";
    let stopped = "or, if you know Cluster API's manager is stopped for good, pass --capi-manager-stopped (logged and journaled)";
    let running = found.running.join("; ");
    let unread: Vec<String> = found
        .unread
        .iter()
        .map(|u| format!("{}: {}", u.what, u.why))
        .collect();
    if options.mode != Mode::Alone {
        return if !found.running.is_empty() {
            Check::ok(
                NAME,
                format!("Cluster API's own manager is active: {running}"),
            )
        } else if !found.unread.is_empty() {
            Check::not_ok(
                NAME,
                Verdict::Warn,
                format!("cannot tell whether Cluster API's own manager is active: {}", unread.join("; ")),
                "grant list on leases controller-leader-election-capi and on deployments (the shipped lifecycle-capi-reader role does)".to_string(),
            )
        } else {
            Check::not_ok(
                NAME,
                Verdict::Warn,
                format!(
                    "Cluster API's own manager does not seem to run: {}",
                    found.quiet.join("; ")
                ),
                format!(
                    "--mode {} works beside Cluster API's manager: start it (or run --mode alone once it is gone for good)",
                    options.mode
                ),
            )
        };
    }
    let (verdict, detail, fix, transient) = if !found.running.is_empty() {
        (
            Verdict::Fail,
            format!(
                "Cluster API's own manager is active ({running}): running alone beside it, both would act on the same Machines, MachineHealthChecks and MachinePools"
            ),
            format!(
                "{choose}, or stop Cluster API's manager first (scale its Deployment to 0; its Lease expires 5 minutes after its last renewal), {stopped}"
            ),
            false,
        )
    } else if !found.unread.is_empty() {
        let forbidden = found.unread.iter().any(|u| u.forbidden);
        let grant = if forbidden {
            "grant list on leases named controller-leader-election-capi and on deployments, cluster-wide (the shipped ClusterRole lifecycle-capi-reader does)"
        } else {
            "check that the API server answers"
        };
        (
            Verdict::Fail,
            format!(
                "cannot tell whether Cluster API's own manager is active: {}",
                unread.join("; ")
            ),
            format!("{grant}; or {choose}, {stopped}"),
            found.unread.iter().all(|u| u.transient),
        )
    } else {
        return Check::ok(
            NAME,
            format!(
                "Cluster API's own manager is not active: {}",
                found.quiet.join("; ")
            ),
        );
    };
    if options.capi_manager_stopped {
        return Check::not_ok(
            NAME,
            Verdict::Warn,
            format!("overridden by --capi-manager-stopped: {detail}"),
            "make sure Cluster API's manager is stopped for good: two managers would fight over every Machine".to_string(),
        )
        .overridden(detail);
    }
    Check::not_ok(NAME, verdict, detail, fix).transient(transient)
}

/// GET `path` as JSON.
async fn get_json(client: &Client, path: &str) -> Result<Value, kube::Error> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request::<Value>(request).await
}

/// The API versions of `cluster.x-k8s.io` the server serves: this controller reads v1beta2.
async fn api_versions(client: &Client) -> Check {
    const NAME: &str = "capi-api";
    match get_json(client, "/apis/cluster.x-k8s.io").await {
        Ok(group) => {
            let versions: Vec<&str> = group["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["version"].as_str())
                .collect();
            let text = format!("cluster.x-k8s.io serves {}", versions.join(", "));
            if versions.contains(&"v1beta2") {
                Check::ok(NAME, text)
            } else {
                Check::not_ok(
                    NAME,
                    Verdict::Fail,
                    text,
                    format!(
                        "this controller reads cluster.x-k8s.io/v1beta2: upgrade Cluster API to one of {}",
                        supported_text()
                    ),
                )
            }
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Check::not_ok(
            NAME,
            Verdict::Fail,
            "the API does not serve cluster.x-k8s.io".to_string(),
            "install Cluster API (clusterctl init) in this management cluster".to_string(),
        ),
        Err(e) => Check::not_ok(
            NAME,
            Verdict::Fail,
            format!("cannot read the API group cluster.x-k8s.io: {e}"),
            "check the kubeconfig and that the API server answers".to_string(),
        )
        .transient(is_transient(&e)),
    }
}

/// An answer that may change on its own: a server error, throttling, no connection.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        _ => true,
    }
}

/// CAPI's manager Deployment as read, or why it could not be (and whether that may pass).
pub(crate) type Manager = Result<Value, (String, bool)>;

pub(crate) async fn read_manager(client: &Client, namespace: &str) -> Manager {
    let path = format!("/apis/apps/v1/namespaces/{namespace}/deployments/{CAPI_DEPLOYMENT}");
    get_json(client, &path).await.map_err(|e| {
        let transient = is_transient(&e);
        let why = match e {
            kube::Error::Api(s) if s.code == 404 => {
                format!("there is no Deployment {namespace}/{CAPI_DEPLOYMENT}")
            }
            kube::Error::Api(s) if s.code == 403 => format!(
                "reading Deployment {namespace}/{CAPI_DEPLOYMENT} is not allowed ({})",
                s.message
            ),
            e => format!("reading Deployment {namespace}/{CAPI_DEPLOYMENT}: {e}"),
        };
        (why, transient)
    })
}

/// The manager container of CAPI's Deployment (`manager`, else the first).
fn manager_container(deployment: &Value) -> Option<&Value> {
    let containers = deployment
        .pointer("/spec/template/spec/containers")?
        .as_array()?;
    containers
        .iter()
        .find(|c| c["name"] == "manager")
        .or(containers.first())
}

/// The release CAPI's manager runs and where that was read, or why it is not known (and
/// whether that may pass): its Deployment's image wins over `given` (`--capi-version`), which
/// stands in when the Deployment cannot be read.
pub(crate) fn read_release(
    namespace: &str,
    given: Option<&Release>,
    manager: &Manager,
) -> Result<(Release, String), (String, bool)> {
    let read = manager.clone().and_then(|deployment| {
        let image = manager_container(&deployment)
            .and_then(|c| c["image"].as_str())
            .unwrap_or_default()
            .to_string();
        match Release::of_image(&image) {
            Some(r) => Ok((
                r,
                format!("the image {image} of {namespace}/{CAPI_DEPLOYMENT}"),
            )),
            None => Err((
                format!("the image {image:?} of {namespace}/{CAPI_DEPLOYMENT} names no release"),
                false,
            )),
        }
    });
    // What runs, when it can be read, is believed over what an operator says runs.
    match (read, given) {
        (Ok((release, from)), Some(given)) if *given != release => {
            Ok((release, format!("{from}; --capi-version {given} ignored")))
        }
        (Ok(found), _) => Ok(found),
        (Err(_), Some(given)) => Ok((given.clone(), "given by --capi-version".to_string())),
        (Err(why), None) => Err(why),
    }
}

fn release_check(options: &Options, manager: &Manager, neighbour: &Neighbour) -> Check {
    const NAME: &str = "capi-release";
    let found = read_release(
        &options.capi_namespace,
        options.capi_version.as_ref(),
        manager,
    );
    let takeover = options.mode == Mode::Takeover;
    let unknown_verdict = if takeover {
        Verdict::Fail
    } else {
        Verdict::Warn
    };
    let table = supported_text();
    match found {
        Ok((release, source)) => match release.support() {
            Support::Supported => Check::ok(NAME, format!("{release} ({source}): supported")),
            Support::TooOld => Check::not_ok(
                NAME,
                Verdict::Fail,
                format!("{release} ({source}) is older than every supported release ({table})"),
                format!("upgrade Cluster API to one of {table}"),
            ),
            Support::Unknown => Check::not_ok(
                NAME,
                unknown_verdict,
                format!("{release} ({source}) is not in the supported releases ({table})"),
                "run --mode shadow beside it and read `lifecycle shadow report`; a takeover refuses a release it does not know".to_string(),
            ),
        },
        Err((why, transient)) => {
            // Its Deployment, found elsewhere by its label: the namespace was mistyped.
            let elsewhere = neighbour
                .deployments
                .iter()
                .find(|(ns, name)| name == CAPI_DEPLOYMENT && *ns != options.capi_namespace);
            let fix = match elsewhere {
                Some((ns, _)) => format!(
                    "Cluster API's manager Deployment is {ns}/{CAPI_DEPLOYMENT}: pass --capi-namespace {ns}"
                ),
                None => format!(
                    "grant get on deployments {CAPI_DEPLOYMENT} in {} (pass --capi-namespace where it runs), or pass --capi-version with the release it runs",
                    options.capi_namespace
                ),
            };
            Check::not_ok(
                NAME,
                unknown_verdict,
                format!("the release of Cluster API's manager is unknown: {why}"),
                fix,
            )
            .transient(transient)
        }
    }
}

/// CAPI's `MachinePool` feature gate, from its manager's arguments.
fn machine_pool_gate(manager: &Manager) -> Check {
    const NAME: &str = "machinepool-gate";
    let Ok(deployment) = manager else {
        return Check::not_ok(
            NAME,
            Verdict::Warn,
            "unknown: CAPI's manager Deployment was not read".to_string(),
            "see capi-release".to_string(),
        );
    };
    let args: Vec<&str> = manager_container(deployment)
        .and_then(|c| c["args"].as_array())
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let off = args
        .iter()
        .filter_map(|a| a.strip_prefix("--feature-gates="))
        .flat_map(|gates| gates.split(','))
        .any(|gate| gate.trim() == "MachinePool=false");
    if off {
        Check::not_ok(
            NAME,
            Verdict::Warn,
            "CAPI's manager runs with MachinePool=false: its webhook rejects every MachinePool update, even a finalizer's removal".to_string(),
            "turn the gate on (--feature-gates=MachinePool=true) before any MachinePool is adopted or deleted".to_string(),
        )
    } else {
        Check::ok(NAME, "MachinePool is on (the default)".to_string())
    }
}

/// Each permission the mode needs, asked with a SelfSubjectAccessReview.
async fn rbac(client: &Client, options: &Options) -> Check {
    const NAME: &str = "rbac";
    let needed = needed(options.mode);
    let mut denied = Vec::new();
    for p in &needed {
        let (resource, subresource) = p.resource.split_once('/').unwrap_or((p.resource, ""));
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"group": p.group, "resource": resource,
                "subresource": subresource, "verb": p.verb, "namespace": options.namespace}},
        });
        let request = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .header("content-type", "application/json")
            .body(review.to_string().into_bytes());
        let answer = match request {
            Ok(r) => client.request::<Value>(r).await,
            Err(e) => Err(kube::Error::HttpError(e)),
        };
        match answer {
            Ok(review) if review["status"]["allowed"] == true => {}
            Ok(_) => denied.push(*p),
            Err(e) => {
                return Check::not_ok(
                    NAME,
                    Verdict::Warn,
                    format!("cannot ask the API what this identity may do: {e}"),
                    "allow create on selfsubjectaccessreviews (Kubernetes grants it to every authenticated user by default)".to_string(),
                );
            }
        }
    }
    rbac_verdict(options.mode, needed.len(), &denied)
}

/// The `rbac` check's answer once `denied` of the `needed` permissions were refused. The
/// kubeconfig Secrets alone refused is a warning, not a failure: a Role per namespace may grant
/// them by name (`adapters/deploy/components/kubeconfig-secrets-by-name`), which a review of
/// the whole cluster cannot see; a cluster whose Secret cannot be read is then reported
/// unreachable (`SecretUnreadable`).
fn rbac_verdict(mode: Mode, needed: usize, denied: &[Permission]) -> Check {
    const NAME: &str = "rbac";
    let overlay = match mode {
        Mode::Shadow => "adapters/deploy/shadow",
        Mode::Takeover => "adapters/deploy/takeover",
        Mode::Alone => "adapters/deploy/base",
    };
    let list = |ps: &[&Permission]| {
        ps.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (secrets, others): (Vec<&Permission>, Vec<&Permission>) = denied
        .iter()
        .partition(|p| p.group.is_empty() && p.resource == "secrets");
    if !others.is_empty() {
        let denied: Vec<&Permission> = denied.iter().collect();
        return Check::not_ok(
            NAME,
            Verdict::Fail,
            format!("not granted: {}", list(&denied)),
            format!(
                "apply the RBAC of {overlay} (its ClusterRole lifecycle-manager-core) to this identity"
            ),
        );
    }
    if !secrets.is_empty() {
        return Check::not_ok(
            NAME,
            Verdict::Warn,
            format!(
                "not granted in every namespace: {} (the kubeconfig Secrets)",
                list(&secrets)
            ),
            format!(
                "with adapters/deploy/components/kubeconfig-secrets-by-name, make sure each namespace holding Clusters has its Role listing their kubeconfig Secrets; otherwise apply the RBAC of {overlay}"
            ),
        );
    }
    Check::ok(
        NAME,
        format!("the {needed} permissions --mode {mode} needs are granted"),
    )
}

fn capi_api(
    client: &Client,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Deletion hooks in `annotations`: (hook annotation, owner).
fn hooks_in(annotations: Option<&BTreeMap<String, String>>) -> Vec<(String, String)> {
    annotations
        .into_iter()
        .flatten()
        .filter(|(k, _)| {
            k.starts_with(PRE_DRAIN_HOOK_PREFIX) || k.starts_with(PRE_TERMINATE_HOOK_PREFIX)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn is_own(hook: &str) -> bool {
    hook == OWN_PRE_DRAIN_HOOK || hook == OWN_PRE_TERMINATE_HOOK
}

/// Other owners' hooks and the control planes on Machines; hooks that templates propagate.
async fn hooks(client: &Client, options: &Options) -> Vec<Check> {
    let ns = options.namespace.as_deref();
    let machines = match capi_api(client, "Machine", "machines", ns)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            return vec![Check::not_ok(
                "hook-owners",
                Verdict::Warn,
                format!("cannot list Machines: {e}"),
                "see rbac".to_string(),
            )];
        }
    };
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    let (mut control_planes, mut deleting_unhooked) = (0, 0);
    for m in &machines {
        let hooks = hooks_in(m.metadata.annotations.as_ref());
        for (hook, owner) in hooks.iter().filter(|(h, _)| !is_own(h)) {
            *owners
                .entry(format!("{hook} (owner {owner:?})"))
                .or_default() += 1;
        }
        let control_plane = m
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(engine::model::CONTROL_PLANE_LABEL));
        control_planes += usize::from(control_plane);
        let deleting = m.metadata.deletion_timestamp.is_some();
        deleting_unhooked += usize::from(deleting && !hooks.iter().any(|(h, _)| is_own(h)));
    }
    let others = if owners.is_empty() {
        "no other owner's deletion hook".to_string()
    } else {
        let listed: Vec<String> = owners.iter().map(|(h, n)| format!("{h} on {n}")).collect();
        format!("other owners' hooks, waited for: {}", listed.join("; "))
    };
    let own = holdings::check(client, options, &machines).await;
    let mut checks = vec![Check::ok(
        "hook-owners",
        format!(
            "{} Machines; {control_planes} of a control plane (left to Cluster API: KCP removes its kcp-cleanup hook only when no other is present); {deleting_unhooked} already deleting without this controller's hooks (left to Cluster API); {others}",
            machines.len()
        ),
    )];
    checks.push(own);
    checks.push(template_hooks(client, ns).await);
    checks
}

/// Hooks in MachineDeployments' and MachineSets' templates: Cluster API propagates them to the
/// Machines, so `lifecycle release` cannot take this controller's off for good.
async fn template_hooks(client: &Client, ns: Option<&str>) -> Check {
    const NAME: &str = "template-hooks";
    let mut own = Vec::new();
    let mut others = Vec::new();
    for (kind, plural) in [
        ("MachineDeployment", "machinedeployments"),
        ("MachineSet", "machinesets"),
    ] {
        let list = match capi_api(client, kind, plural, ns)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => list.items,
            Err(e) => {
                return Check::not_ok(
                    NAME,
                    Verdict::Warn,
                    format!("cannot list {kind}s: {e}"),
                    "see rbac".to_string(),
                );
            }
        };
        for o in &list {
            let annotations: Option<BTreeMap<String, String>> = o
                .data
                .pointer("/spec/template/metadata/annotations")
                .and_then(|a| serde_json::from_value(a.clone()).ok());
            let name = format!(
                "{kind} {}/{}",
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default()
            );
            for (hook, _) in hooks_in(annotations.as_ref()) {
                if is_own(&hook) {
                    own.push(format!("{name}: {hook}"));
                } else {
                    others.push(format!("{name}: {hook}"));
                }
            }
        }
    }
    if !own.is_empty() {
        return Check::not_ok(
            NAME,
            Verdict::Warn,
            format!("this controller's hooks are in templates, which Cluster API propagates to their Machines: {}", own.join("; ")),
            "remove them from spec.template.metadata.annotations; `lifecycle release` cannot take off what a template puts back".to_string(),
        );
    }
    let detail = if others.is_empty() {
        "no template propagates a deletion hook".to_string()
    } else {
        format!(
            "templates propagate other owners' hooks (waited for like any): {}",
            others.join("; ")
        )
    };
    Check::ok(NAME, detail)
}

/// The worst verdict (`Ok` for none).
pub fn worst(checks: &[Check]) -> Verdict {
    checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(mode: Mode, resources: &[&str]) -> Vec<Permission> {
        needed(mode)
            .into_iter()
            .filter(|p| resources.contains(&p.resource))
            .collect()
    }

    /// The kubeconfig Secrets refused alone warn (a Role per namespace may grant them by name);
    /// anything else refused fails, naming every refusal.
    #[test]
    fn secrets_refused_alone_warn_and_anything_else_fails() {
        let n = needed(Mode::Takeover).len();
        assert_eq!(rbac_verdict(Mode::Takeover, n, &[]).verdict, Verdict::Ok);
        let secrets = rbac_verdict(Mode::Takeover, n, &denied(Mode::Takeover, &["secrets"]));
        assert_eq!(secrets.verdict, Verdict::Warn, "{secrets:?}");
        assert!(secrets.detail.contains("get secrets"), "{secrets:?}");
        assert!(
            secrets
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("kubeconfig-secrets-by-name")),
            "{secrets:?}"
        );
        let both = rbac_verdict(
            Mode::Takeover,
            n,
            &denied(Mode::Takeover, &["secrets", "machines"]),
        );
        assert_eq!(both.verdict, Verdict::Fail, "{both:?}");
        assert!(
            both.detail.contains("list secrets") && both.detail.contains("patch machines"),
            "{both:?}"
        );
    }
}
