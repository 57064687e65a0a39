//! Leader election on a `coordination.k8s.io/v1` Lease, hand-rolled (kube has no lease helper).
//!
//! Expected flow: [`acquire`] until it returns, then [`hold`] until it returns (leadership
//! lost), then stop acting; or, on a graceful exit, stop acting, then [`release`]. A Lease is
//! free when it has no holder or its holder has not renewed within `leaseDurationSeconds`.
//! Every write is a resourceVersion-guarded create or replace: a 409 means another candidate
//! won the race. A candidate waiting for the Lease watches it, so a release is taken at once
//! (not at the next retry).

use crate::clock::wall_now;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::time::Duration;

/// The Lease `lifecycle run --leader-elect` takes by default: its own, never CAPI's
/// [`CAPI_LEASE_NAME`] (sharing one would make this controller and CAPI's manager take turns).
pub const DEFAULT_LEASE_NAME: &str = "lifecycle-controller-leader-election";

/// The Lease CAPI's `capi-controller-manager` holds in its namespace.
pub const CAPI_LEASE_NAME: &str = "controller-leader-election-capi";

/// The annotation on this controller's Lease naming the leader's `--mode`: who may tell
/// whether a takeover controller serves adopted objects and its hooks (`lifecycle adopt`,
/// kube-state-metrics' alert rules) read it.
pub const MODE_ANNOTATION: &str = "lifecycle.x-k8s.io/mode";

/// Attempts at a release that meets a concurrent write (our own last renewal, say).
const RELEASE_ATTEMPTS_MAX: usize = 3;

/// Lease timing (CAPI's defaults: 15 s lease; we renew every 10 s, retry every 2 s).
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub identity: String,
    /// Written on the Lease with each acquisition and renewal ([`MODE_ANNOTATION`]).
    pub mode: Option<engine::runtime::Mode>,
    pub lease_duration: Duration,
    pub renew_interval: Duration,
    pub retry_interval: Duration,
}

impl LeaseConfig {
    pub fn new(name: &str, identity: &str) -> Self {
        LeaseConfig {
            name: name.to_string(),
            identity: identity.to_string(),
            mode: None,
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(10),
            retry_interval: Duration::from_secs(2),
        }
    }
}

fn micro(at: engine::Timestamp) -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::from_millisecond(at.as_millis()).unwrap_or_default())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// One attempt: `Ok(true)` when we hold the lease afterwards, `Ok(false)` when someone else
/// does (or won a race), `Err` when the API could not be asked.
pub async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
) -> Result<bool, kube::Error> {
    try_acquire_or_renew_at(api, config, wall_now()).await
}

/// [`try_acquire_or_renew`] as of `now` (tests pass a clock instead of waiting for expiry).
pub async fn try_acquire_or_renew_at(
    api: &Api<Lease>,
    config: &LeaseConfig,
    now: engine::Timestamp,
) -> Result<bool, kube::Error> {
    let now = micro(now);
    let duration_s = i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                annotations: mode_annotation(config, None),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(duration_s),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        };
    };
    let mut spec = lease.spec.clone().unwrap_or_default();
    let ours = spec.holder_identity.as_deref() == Some(config.identity.as_str());
    let held = spec
        .holder_identity
        .as_deref()
        .is_some_and(|h| !h.is_empty());
    let expires_ms = spec.renew_time.as_ref().map_or(0, |t| t.0.as_millisecond())
        + 1000 * i64::from(spec.lease_duration_seconds.unwrap_or(duration_s));
    if held && !ours && expires_ms > now.0.as_millisecond() {
        return Ok(false);
    }
    if !ours {
        spec.acquire_time = Some(now.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + i32::from(held));
        spec.holder_identity = Some(config.identity.clone());
    }
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(duration_s);
    lease.spec = Some(spec);
    lease.metadata.annotations = mode_annotation(config, lease.metadata.annotations.take());
    // `lease.metadata.resourceVersion` is what we read: a concurrent write makes this a 409.
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `annotations` with [`MODE_ANNOTATION`] set to the config's mode (left as they are without).
fn mode_annotation(
    config: &LeaseConfig,
    annotations: Option<std::collections::BTreeMap<String, String>>,
) -> Option<std::collections::BTreeMap<String, String>> {
    let Some(mode) = config.mode else {
        return annotations;
    };
    let mut annotations = annotations.unwrap_or_default();
    annotations.insert(MODE_ANNOTATION.to_string(), mode.as_str().to_string());
    Some(annotations)
}

/// Who leads, as this controller's Lease tells: `None` when nobody holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    pub holder: String,
    /// [`MODE_ANNOTATION`]'s value (`None`: a build that did not write it).
    pub mode: Option<String>,
    /// Since its last renewal (`None`: never renewed).
    pub renewed_ago: Option<Duration>,
}

impl std::fmt::Display for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "held by {} in mode {}, renewed ",
            self.holder,
            self.mode.as_deref().unwrap_or("unknown")
        )?;
        match self.renewed_ago {
            Some(ago) => write!(f, "{}s ago", ago.as_secs()),
            None => write!(f, "never"),
        }
    }
}

/// Reads the Lease `name` as of `now`: `Ok(None)` when it does not exist or nobody holds it.
pub async fn leader(
    api: &Api<Lease>,
    name: &str,
    now: engine::Timestamp,
) -> Result<Option<Leader>, kube::Error> {
    let Some(lease) = api.get_opt(name).await? else {
        return Ok(None);
    };
    let spec = lease.spec.unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    if holder.is_empty() {
        return Ok(None);
    }
    let renewed_ago = spec.renew_time.map(|t| {
        Duration::from_millis(u64::try_from(now.as_millis() - t.0.as_millisecond()).unwrap_or(0))
    });
    let mode = lease
        .metadata
        .annotations
        .and_then(|mut a| a.remove(MODE_ANNOTATION));
    Ok(Some(Leader {
        holder,
        mode,
        renewed_ago,
    }))
}

/// Waits until we hold the lease, trying every `retry_interval` and whenever the Lease changes.
pub async fn acquire(api: &Api<Lease>, config: &LeaseConfig) {
    let fields = format!("metadata.name={}", config.name);
    let mut changes = watcher(api.clone(), watcher::Config::default().fields(&fields))
        .default_backoff()
        .boxed();
    loop {
        match try_acquire_or_renew(api, config).await {
            Ok(true) => {
                tracing::info!(lease = %config.name, identity = %config.identity, "became leader");
                return;
            }
            Ok(false) => tracing::debug!("lease held by another candidate"),
            Err(e) => tracing::warn!("leader election: {e}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(config.retry_interval) => {}
            _ = changed(&mut changes) => {}
        }
    }
}

/// Ends when the watched Lease is written or deleted (or the watch fails: then try anyway);
/// never when the watch stream is over.
async fn changed<S>(changes: &mut S)
where
    S: Stream<Item = Result<watcher::Event<Lease>, watcher::Error>> + Unpin,
{
    loop {
        match changes.next().await {
            Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) | Err(_)) => return,
            Some(Ok(_)) => {}
            None => std::future::pending().await,
        }
    }
}

/// Gives the lease up if we hold it, as client-go does when it releases on a clean exit:
/// `holderIdentity` "" and `leaseDurationSeconds` 1, so a waiting candidate takes it at once.
/// `Ok(true)` when released, `Ok(false)` when it was not ours (any more).
pub async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, kube::Error> {
    for _ in 0..RELEASE_ATTEMPTS_MAX {
        let Some(mut lease) = api.get_opt(&config.name).await? else {
            return Ok(false);
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
            return Ok(false);
        }
        let now = micro(wall_now());
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        lease.spec = Some(spec);
        match api
            .replace(&config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => return Ok(true),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Renews every `renew_interval` while we hold the lease; returns when it is lost: another
/// holder (409 or a renewal answered "not ours"), or no successful renewal for a whole
/// `lease_duration`.
pub async fn hold(api: &Api<Lease>, config: &LeaseConfig) -> String {
    let mut last_renewal = tokio::time::Instant::now();
    let mut wait = config.renew_interval;
    loop {
        tokio::time::sleep(wait).await;
        match try_acquire_or_renew(api, config).await {
            Ok(true) => {
                last_renewal = tokio::time::Instant::now();
                wait = config.renew_interval;
            }
            Ok(false) => return "another candidate holds the lease".to_string(),
            Err(e) => {
                if last_renewal.elapsed() >= config.lease_duration {
                    return format!(
                        "could not renew the lease for {:?}: {e}",
                        config.lease_duration
                    );
                }
                tracing::warn!("lease renewal failed, retrying: {e}");
                wait = config.retry_interval;
            }
        }
    }
}

/// How recently CAPI's manager must have renewed its Lease to count as running: longer than
/// its 15 s lease, so a manager restarting (a rollout, a crash loop) still counts.
pub const CAPI_ACTIVE_WITHIN: Duration = Duration::from_secs(300);
