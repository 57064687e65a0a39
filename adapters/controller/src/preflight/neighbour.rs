//! Is Cluster API's own manager running in this management cluster? `--mode alone` would act
//! on the Machines, MachineHealthChecks and MachinePools it acts on, so `alone` starts only when
//! nothing says it runs and everything that could say so was read (unknown is not absent).
//!
//! The signs, each read cluster-wide (a mistyped `--capi-namespace`, or CAPI installed
//! elsewhere, hides nothing):
//! - a Lease named [`CAPI_LEASE_NAME`] renewed within [`CAPI_ACTIVE_WITHIN`], in any namespace
//!   (listed by name, which RBAC can grant by `resourceNames`);
//! - a Deployment labelled [`PROVIDER_LABEL`]`=cluster-api` with ready replicas (CAPI run with
//!   `--leader-elect=false` holds no Lease).

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

/// Reads every sign as of `now`.
pub async fn read(client: &Client, now: Timestamp) -> Neighbour {
    let mut found = Neighbour::default();
    leases(client, now, &mut found).await;
    deployments(client, &mut found).await;
    found
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
