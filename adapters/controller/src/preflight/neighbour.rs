//! Is Cluster API's own manager running in this management cluster? `--mode alone` would act
//! on the Machines, MachineHealthChecks and MachinePools it acts on, so `alone` starts only when
//! nothing says it runs and everything that could say so was read (unknown is not absent).
//!
//! The signs, each read cluster-wide (a mistyped `--capi-namespace`, or CAPI installed
//! elsewhere, hides nothing):
//! - a Lease named [`CAPI_LEASE_NAME`] renewed within [`CAPI_ACTIVE_WITHIN`], in any namespace
//!   (listed by name, which RBAC can grant by `resourceNames`);
//! - a Deployment labelled [`PROVIDER_LABEL`]`=cluster-api` with ready replicas (CAPI run with
//!   `--leader-elect=false` holds no Lease);
//! - a write within [`CAPI_ACTIVE_WITHIN`] of the Machine status only CAPI's Machine controller
//!   writes, by a field manager other than this controller's ([`super::status_writes`]; the
//!   Machines of `--namespace` when given): its Lease and Deployment may both be out of sight
//!   (a namespace this identity may not read, another cluster's manager pointed at this one).

use crate::kube::lease::{CAPI_ACTIVE_WITHIN, CAPI_LEASE_NAME};
use engine::Timestamp;
use kube::Client;
use serde_json::Value;
use std::time::Duration;

/// The label CAPI's provider Deployments carry; the core provider's value is `cluster-api`.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";

/// What was read about CAPI's manager.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Neighbour {
    /// Each sign that it runs.
    pub running: Vec<String>,
    /// Each sign that could not be read: what, why, and whether asking again may help.
    pub unread: Vec<Unread>,
    /// What was read and says it does not run.
    pub quiet: Vec<String>,
    /// The Deployments labelled as CAPI's core provider, (namespace, name), running or not.
    pub deployments: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unread {
    pub what: String,
    pub why: String,
    pub transient: bool,
    pub forbidden: bool,
}

impl Neighbour {
    /// Nothing says it runs, and every sign was read.
    pub fn absent(&self) -> bool {
        self.running.is_empty() && self.unread.is_empty()
    }
}

/// Reads every sign as of `now` (Machines in `namespace` only, when given).
pub async fn read(client: &Client, now: Timestamp, namespace: Option<&str>) -> Neighbour {
    let mut found = Neighbour::default();
    leases(client, now, &mut found).await;
    deployments(client, &mut found).await;
    machine_status_writes(client, now, namespace, &mut found).await;
    found
}

/// Machines read per request while looking for CAPI's status writes.
const MACHINES_PER_PAGE: usize = 500;

/// Every Machine (in `namespace`), page by page.
async fn machines(client: &Client, namespace: Option<&str>) -> Result<Vec<Value>, kube::Error> {
    let base = match namespace {
        Some(ns) => format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/machines"),
        None => "/apis/cluster.x-k8s.io/v1beta2/machines".to_string(),
    };
    let mut all = Vec::new();
    let mut next = String::new();
    loop {
        let path = if next.is_empty() {
            format!("{base}?limit={MACHINES_PER_PAGE}")
        } else {
            format!("{base}?limit={MACHINES_PER_PAGE}&continue={next}")
        };
        let page = super::get_json(client, &path).await?;
        all.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page.pointer("/metadata/continue").and_then(Value::as_str) {
            Some(token) if !token.is_empty() => next = query_value(token),
            _ => return Ok(all),
        }
    }
}

/// A continue token as a query value (tokens are base64: `+`, `/` and `=` are escaped).
fn query_value(token: &str) -> String {
    token
        .chars()
        .map(|c| match c {
            '+' => "%2B".to_string(),
            '/' => "%2F".to_string(),
            '=' => "%3D".to_string(),
            c => c.to_string(),
        })
        .collect()
}

async fn machine_status_writes(
    client: &Client,
    now: Timestamp,
    namespace: Option<&str>,
    found: &mut Neighbour,
) {
    let place = namespace.map_or("every namespace".to_string(), |ns| {
        format!("namespace {ns}")
    });
    let what = format!("the managedFields of Machines (cluster.x-k8s.io/v1beta2) in {place}");
    let items = match machines(client, namespace).await {
        Ok(items) => items,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return found
                .quiet
                .push("cluster.x-k8s.io/v1beta2 Machines are not served".to_string());
        }
        Err(e) => return found.unread.push(unread(&what, &e)),
    };
    let writes: Vec<_> = items
        .iter()
        .flat_map(|m| super::status_writes::writes_of(m, now))
        .collect();
    let (recent, old): (Vec<_>, Vec<_>) = writes
        .into_iter()
        .partition(|w| w.recent(CAPI_ACTIVE_WITHIN));
    // The most recent first (a time that does not read before any).
    if let Some(latest) = recent.iter().min_by_key(|w| w.ago) {
        let others = recent.len() - 1;
        let more = if others > 0 {
            format!(
                " (and {others} more such write(s) within {}s)",
                CAPI_ACTIVE_WITHIN.as_secs()
            )
        } else {
            String::new()
        };
        found.running.push(format!(
            "{}{more}: only Cluster API's Machine controller writes those",
            latest.describe()
        ));
        return;
    }
    let own = crate::kube::client::FIELD_MANAGER;
    match old.iter().min_by_key(|w| w.ago) {
        Some(last) => found.quiet.push(format!(
            "the last write of Machine status by another field manager than {own:?} is older than {}s: {}",
            CAPI_ACTIVE_WITHIN.as_secs(),
            last.describe()
        )),
        None => found.quiet.push(format!(
            "no Machine status written by another field manager than {own:?} ({} Machines in {place})",
            items.len()
        )),
    }
}

async fn list(client: &Client, path: &str) -> Result<Vec<Value>, kube::Error> {
    let list = super::get_json(client, path).await?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

fn unread(what: &str, e: &kube::Error) -> Unread {
    Unread {
        what: what.to_string(),
        why: e.to_string(),
        transient: super::is_transient(e),
        forbidden: matches!(e, kube::Error::Api(s) if s.code == 403),
    }
}

fn namespaced_name(o: &Value) -> String {
    format!(
        "{}/{}",
        o.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        o.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    )
}

async fn leases(client: &Client, now: Timestamp, found: &mut Neighbour) {
    let path = format!(
        "/apis/coordination.k8s.io/v1/leases?fieldSelector=metadata.name%3D{CAPI_LEASE_NAME}"
    );
    let what = format!("Leases {CAPI_LEASE_NAME} in every namespace");
    let items = match list(client, &path).await {
        Ok(items) => items,
        Err(e) => return found.unread.push(unread(&what, &e)),
    };
    if items.is_empty() {
        found
            .quiet
            .push(format!("no Lease {CAPI_LEASE_NAME} in any namespace"));
    }
    for lease in &items {
        let name = namespaced_name(lease);
        let holder = lease
            .pointer("/spec/holderIdentity")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let renewed = lease
            .pointer("/spec/renewTime")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let ago = renewed.map(|t| {
            Duration::from_millis(u64::try_from(now.as_millis() - t.as_millisecond()).unwrap_or(0))
        });
        match ago {
            Some(ago) if !holder.is_empty() && ago <= CAPI_ACTIVE_WITHIN => {
                found.running.push(format!(
                    "its Lease {name} was renewed {}s ago by {holder}",
                    ago.as_secs()
                ))
            }
            Some(ago) => found.quiet.push(format!(
                "its Lease {name} was last renewed {}s ago",
                ago.as_secs()
            )),
            None => found
                .quiet
                .push(format!("its Lease {name} was never renewed")),
        }
    }
}

async fn deployments(client: &Client, found: &mut Neighbour) {
    let path = format!("/apis/apps/v1/deployments?labelSelector={PROVIDER_LABEL}%3Dcluster-api");
    let what = format!("Deployments labelled {PROVIDER_LABEL}=cluster-api in every namespace");
    let items = match list(client, &path).await {
        Ok(items) => items,
        Err(e) => return found.unread.push(unread(&what, &e)),
    };
    if items.is_empty() {
        found.quiet.push(format!(
            "no Deployment labelled {PROVIDER_LABEL}=cluster-api"
        ));
    }
    for deployment in &items {
        let name = namespaced_name(deployment);
        if let Some((ns, n)) = name.split_once('/') {
            found.deployments.push((ns.to_string(), n.to_string()));
        }
        let ready = deployment
            .pointer("/status/readyReplicas")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if ready > 0 {
            found.running.push(format!(
                "its Deployment {name} has {ready} ready replica(s)"
            ));
        } else {
            found
                .quiet
                .push(format!("its Deployment {name} has no ready replica"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::client::Body;
    use serde_json::json;
    use std::task::{Context, Poll};

    /// An API server whose Machines may not be listed: 403 for them, empty lists otherwise.
    #[derive(Clone)]
    struct MachinesForbidden;

    impl tower_service::Service<http::Request<Body>> for MachinesForbidden {
        type Response = http::Response<Body>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            let (code, body) = if request.uri().path().ends_with("/machines") {
                (
                    403,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "Forbidden", "code": 403,
                           "message": "machines.cluster.x-k8s.io is forbidden: User \"u\" cannot list resource \"machines\""}),
                )
            } else {
                (
                    200,
                    json!({"kind": "List", "apiVersion": "v1", "items": []}),
                )
            };
            let response = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(body.to_string().into_bytes()))
                .expect("a valid response");
            std::future::ready(Ok(response))
        }
    }

    #[tokio::test]
    async fn machines_that_cannot_be_listed_leave_it_unknown_and_alone_refused() {
        let client = Client::new(MachinesForbidden, "default");
        let found = read(&client, Timestamp(0), None).await;
        assert!(found.running.is_empty());
        assert!(!found.absent(), "unknown is not absent");
        assert_eq!(found.unread.len(), 1, "{found:?}");
        assert!(found.unread[0].forbidden && found.unread[0].what.contains("Machines"));
        let options = super::super::Options {
            mode: engine::runtime::Mode::Alone,
            capi_namespace: "capi-system".to_string(),
            capi_version: None,
            namespace: None,
            capi_manager_stopped: false,
            leader_lease: None,
            service_account: None,
        };
        let check = super::super::capi_manager(&options, &found);
        assert_eq!(check.verdict, super::super::Verdict::Fail);
        assert!(
            check
                .fix
                .as_deref()
                .unwrap_or_default()
                .contains("list on machines"),
            "{check:?}"
        );
    }
}
