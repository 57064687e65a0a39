//! The workload clusters' kubeconfigs (`<cluster>-kubeconfig`, key `value`), read for many
//! clusters at once: the first connects share one paginated LIST of the Secrets of type
//! `cluster.x-k8s.io/secret` instead of a GET each. At 1,000 workload clusters the GETs alone
//! were 1,000 requests through the management cluster's rate limit (50 s at 20 QPS before the
//! last cluster could even be watched); the list is two.
//!
//! What the list gives is used once per cluster and only while fresh ([`LISTED_FRESH`]): a
//! cluster that appears later, a retry after a failed connect (the kubeconfig may have been
//! rotated) or a list the API refuses (RBAC without `list secrets`) reads its Secret with a GET.

use super::adapter::Event;
use super::client::client_from_kubeconfig;
use engine::connection::Unreachable;
use engine::intake::Arrival;
use engine::model::ClusterName;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// The type CAPI gives the Secrets it writes (kubeconfigs among them).
const CAPI_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// Secrets per page of the list.
const PAGE: u32 = 500;
/// How long a listed kubeconfig may stand in for a GET.
pub const LISTED_FRESH: Duration = Duration::from_secs(30);

/// The listed kubeconfigs by (namespace, Secret name), and when they were listed.
#[derive(Debug)]
struct Listed {
    at: Instant,
    values: Mutex<BTreeMap<(String, String), Vec<u8>>>,
}

/// Which Secret holds a workload cluster's kubeconfig: `<cluster><suffix>` in the Cluster's
/// namespace, key `value`. By default CAPI's own, `<cluster>-kubeconfig` (an admin credential);
/// another suffix names a credential the operator issued (a narrower identity, read-only for
/// shadow: `adapters/deploy/workload/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeconfigSecret {
    suffix: String,
}

impl KubeconfigSecret {
    /// CAPI's suffix.
    pub const CAPI_SUFFIX: &str = "-kubeconfig";

    /// Secrets named `<cluster><suffix>`. The suffix must keep the name a valid Secret name
    /// (lower-case letters, digits, `-` and `.`) and must end as a name may (a letter or digit).
    pub fn with_suffix(suffix: &str) -> Result<KubeconfigSecret, String> {
        let allowed =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
        let ends_well = suffix
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !(suffix.chars().all(allowed) && ends_well) {
            return Err(format!(
                "kubeconfig Secret suffix {suffix:?}: lower-case letters, digits, '-' and '.', ending with a letter or digit (e.g. -lifecycle-kubeconfig)"
            ));
        }
        Ok(KubeconfigSecret {
            suffix: suffix.to_string(),
        })
    }

    pub fn suffix(&self) -> &str {
        &self.suffix
    }

    /// The Secret's name for `cluster`.
    pub fn name_for(&self, cluster: &ClusterName) -> String {
        format!("{}{}", cluster.name, self.suffix)
    }

    /// CAPI's own Secrets: of CAPI's type, so one list can serve every first connect.
    fn is_capis(&self) -> bool {
        self.suffix == Self::CAPI_SUFFIX
    }
}

impl Default for KubeconfigSecret {
    fn default() -> Self {
        KubeconfigSecret {
            suffix: Self::CAPI_SUFFIX.to_string(),
        }
    }
}

/// Where the connectors get kubeconfigs; shared by all of them.
pub struct Kubeconfigs {
    management: Client,
    /// `--namespace`: the Secrets are listed there only.
    namespace: Option<String>,
    /// Which Secret of a cluster's namespace holds its kubeconfig.
    secret: KubeconfigSecret,
    /// `None` when the list failed: every cluster reads its own Secret.
    listed: OnceCell<Option<Listed>>,
}

/// The kubeconfig bytes a Secret holds under `value` (`data`, else `stringData`).
pub fn kubeconfig_value(secret: &Secret) -> Option<Vec<u8>> {
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map(|b| b.0.clone());
    data.or_else(|| {
        secret
            .string_data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(|s| s.clone().into_bytes())
    })
}

/// A kubeconfig is text: bytes that are not UTF-8 are no kubeconfig.
fn utf8(value: Vec<u8>) -> Result<String, Unreachable> {
    String::from_utf8(value).map_err(|e| Unreachable::Unparsable {
        error: format!("not UTF-8 text: {e}"),
    })
}

impl Kubeconfigs {
    pub fn new(management: Client, namespace: Option<String>) -> Self {
        Kubeconfigs {
            management,
            namespace,
            secret: KubeconfigSecret::default(),
            listed: OnceCell::new(),
        }
    }

    /// The kubeconfigs the connectors of an adapter with `options` share: the Secrets of
    /// `options.watch.namespace` (all namespaces without), named by `options.kubeconfig_secret`.
    pub fn shared(management: Client, options: &super::AdapterOptions) -> std::sync::Arc<Self> {
        let kubeconfigs = Kubeconfigs::new(management, options.watch.namespace.clone());
        std::sync::Arc::new(kubeconfigs.with_secret(options.kubeconfig_secret.clone()))
    }

    /// Reads each cluster's kubeconfig from `secret` instead of CAPI's `<cluster>-kubeconfig`.
    /// Another suffix than CAPI's reads one Secret per cluster (a GET): the shared list selects
    /// CAPI's Secret type, which a Secret the operator issued need not have.
    pub fn with_secret(mut self, secret: KubeconfigSecret) -> Self {
        self.secret = secret;
        self
    }

    /// The kubeconfig YAML of `cluster`: from the shared list on a first attempt while it is
    /// fresh, else from a GET of its Secret; or what is wrong with that Secret.
    pub async fn get(
        &self,
        cluster: &ClusterName,
        first_attempt: bool,
    ) -> Result<String, Unreachable> {
        if first_attempt && let Some(value) = self.take_listed(cluster).await {
            return utf8(value);
        }
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), &cluster.namespace);
        let secret = match secrets.get(&self.secret.name_for(cluster)).await {
            Ok(secret) => secret,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(Unreachable::SecretMissing);
            }
            Err(e) => {
                return Err(Unreachable::SecretUnreadable {
                    error: e.to_string(),
                });
            }
        };
        utf8(kubeconfig_value(&secret).ok_or(Unreachable::NoValue)?)
    }

    async fn take_listed(&self, cluster: &ClusterName) -> Option<Vec<u8>> {
        if !self.secret.is_capis() {
            return None;
        }
        let listed = self
            .listed
            .get_or_init(|| async { self.list().await })
            .await
            .as_ref()?;
        if listed.at.elapsed() > LISTED_FRESH {
            return None;
        }
        let key = (cluster.namespace.to_string(), self.secret.name_for(cluster));
        listed
            .values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
    }

    /// Every CAPI Secret's `value`, all namespaces, page by page.
    async fn list(&self) -> Option<Listed> {
        let at = Instant::now();
        let secrets: Api<Secret> = match &self.namespace {
            Some(namespace) => Api::namespaced(self.management.clone(), namespace),
            None => Api::all(self.management.clone()),
        };
        let mut params = ListParams::default()
            .fields(&format!("type={CAPI_SECRET_TYPE}"))
            .limit(PAGE);
        let mut values = BTreeMap::new();
        loop {
            let page = match secrets.list(&params).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(
                        "cannot list the kubeconfig Secrets ({e}): reading one Secret per workload cluster"
                    );
                    return None;
                }
            };
            for secret in &page.items {
                let (Some(namespace), Some(name)) =
                    (&secret.metadata.namespace, &secret.metadata.name)
                else {
                    continue;
                };
                if let (true, Some(value)) = (
                    name.ends_with(self.secret.suffix()),
                    kubeconfig_value(secret),
                ) {
                    values.insert((namespace.clone(), name.clone()), value);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        tracing::info!(
            secrets = values.len(),
            "listed the workload clusters' kubeconfigs"
        );
        Some(Listed {
            at,
            values: Mutex::new(values),
        })
    }
}

/// Connects to a workload cluster through its kubeconfig Secret (retried every `retry` while
/// it is missing or bad) and hands the client to the loop. A failure reaches the loop as
/// [`Arrival::ConnectFailed`] when its reason changes (the loop journals it, and the
/// controllers waiting on the cluster say why); a retry for the same reason is only logged
/// at debug.
pub async fn connect(
    kubeconfigs: std::sync::Arc<Kubeconfigs>,
    cluster: ClusterName,
    tx: tokio::sync::mpsc::Sender<super::adapter::Queued>,
    retry: Duration,
) {
    let scope = engine::model::Scope::Workload(cluster.clone());
    let mut first_attempt = true;
    let mut reported: Option<Unreachable> = None;
    loop {
        let client = match kubeconfigs.get(&cluster, first_attempt).await {
            Ok(yaml) => client_from_kubeconfig(&yaml).await,
            Err(e) => Err(e),
        };
        first_attempt = false;
        match client {
            Ok(client) => {
                let _ = tx.send(Event::Connected { scope, client }.into()).await;
                return;
            }
            Err(reason) => {
                let reason = reason.bounded();
                if reported.as_ref() == Some(&reason) {
                    tracing::debug!(cluster = %cluster.name, "still cannot connect to the workload cluster: {}", reason.detail(&cluster));
                } else {
                    tracing::warn!(cluster = %cluster.name, "{}", reason.message(&cluster));
                    reported = Some(reason.clone());
                    let failed = Arrival::ConnectFailed {
                        scope: scope.clone(),
                        reason,
                    };
                    if tx.send(Event::Arrival(failed).into()).await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(retry).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakeapi::apiserver::{ApiServer, ServerOptions, SharedCluster, kubeconfig_yaml};
    use fakeapi::serve::kubeconfig_secret;
    use serde_json::json;
    use sim::api::ClusterStore;
    use std::sync::Arc;

    /// What the connector sent, waiting up to `within` for the next one.
    async fn next(
        rx: &mut tokio::sync::mpsc::Receiver<super::super::adapter::Queued>,
        within: Duration,
    ) -> Option<String> {
        let queued = tokio::time::timeout(within, rx.recv()).await.ok()??;
        Some(match queued.event {
            Event::Arrival(Arrival::ConnectFailed { reason, .. }) => reason.code().to_string(),
            Event::Arrival(_) => "another arrival".to_string(),
            Event::Connected { .. } => "connected".to_string(),
            Event::Input(_) => "an input".to_string(),
        })
    }

    /// The real connector against a fake management API: each reason it meets is sent once
    /// (retries every 20 ms meanwhile), then the connection.
    #[tokio::test]
    async fn the_connector_reports_each_reason_once_then_connects() {
        let server = ApiServer::start(
            SharedCluster::new(ClusterStore::new("mgmt")),
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::default(),
        )
        .await
        .unwrap();
        let client = crate::kube::client_for_url(&server.url()).unwrap();
        let kubeconfigs = Arc::new(Kubeconfigs::new(client, None));
        let cluster = ClusterName::new("default", "c1");
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let task = tokio::spawn(connect(
            kubeconfigs,
            cluster.clone(),
            tx,
            Duration::from_millis(20),
        ));
        let quiet = Duration::from_millis(200);
        let soon = Duration::from_secs(10);
        assert_eq!(next(&mut rx, soon).await.as_deref(), Some("SecretMissing"));
        assert_eq!(next(&mut rx, quiet).await, None, "retries say nothing new");
        let write = |secret: serde_json::Value| {
            server.cluster().write(|store| {
                store
                    .apply(secret, engine::Timestamp(0))
                    .expect("the Secret is stored")
            });
        };
        let secret = |data: serde_json::Value| {
            json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
                   "metadata": {"name": "c1-kubeconfig", "namespace": "default"}, "data": data})
        };
        write(secret(json!({"other": "eA=="})));
        assert_eq!(next(&mut rx, soon).await.as_deref(), Some("NoValue"));
        assert_eq!(next(&mut rx, quiet).await, None);
        // base64 of "not a kubeconfig"
        write(secret(json!({"value": "bm90IGEga3ViZWNvbmZpZw=="})));
        assert_eq!(next(&mut rx, soon).await.as_deref(), Some("Unparsable"));
        write(kubeconfig_secret(
            "default",
            "c1",
            &kubeconfig_yaml("c1", "http://127.0.0.1:9"),
        ));
        assert_eq!(next(&mut rx, soon).await.as_deref(), Some("connected"));
        task.await.unwrap();
        server.shutdown().await;
    }

    #[test]
    fn a_kubeconfig_secret_suffix_keeps_secret_names_valid() {
        let c1 = ClusterName::new("default", "c1");
        assert_eq!(KubeconfigSecret::default().name_for(&c1), "c1-kubeconfig");
        let own = KubeconfigSecret::with_suffix("-lifecycle-kubeconfig").unwrap();
        assert_eq!(own.name_for(&c1), "c1-lifecycle-kubeconfig");
        for bad in [
            "",
            "-Kubeconfig",
            "-kubeconfig-",
            "_kubeconfig",
            "-kube config",
        ] {
            assert!(KubeconfigSecret::with_suffix(bad).is_err(), "{bad:?}");
        }
    }

    /// With another suffix the connector reads that Secret (an operator's, not of CAPI's type)
    /// and never CAPI's admin kubeconfig, which is there too.
    #[tokio::test]
    async fn another_suffix_connects_through_the_operators_secret_not_capis() {
        let server = ApiServer::start(
            SharedCluster::new(ClusterStore::new("mgmt")),
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::default(),
        )
        .await
        .unwrap();
        let client = crate::kube::client_for_url(&server.url()).unwrap();
        let write = |secret: serde_json::Value| {
            server.cluster().write(|store| {
                store
                    .apply(secret, engine::Timestamp(0))
                    .expect("the Secret is stored")
            });
        };
        // CAPI's: points nowhere useful, and must not be read.
        write(kubeconfig_secret(
            "default",
            "c1",
            &kubeconfig_yaml("c1", "http://127.0.0.1:9"),
        ));
        let cluster = ClusterName::new("default", "c1");
        let options = crate::kube::AdapterOptions {
            kubeconfig_secret: KubeconfigSecret::with_suffix("-lifecycle-kubeconfig").unwrap(),
            ..Default::default()
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let task = tokio::spawn(connect(
            Kubeconfigs::shared(client, &options),
            cluster.clone(),
            tx,
            Duration::from_millis(20),
        ));
        let soon = Duration::from_secs(10);
        assert_eq!(
            next(&mut rx, soon).await.as_deref(),
            Some("SecretMissing"),
            "CAPI's Secret is not the one asked for"
        );
        let mut own = kubeconfig_secret(
            "default",
            "c1",
            &kubeconfig_yaml("c1", "http://127.0.0.1:9"),
        );
        own["metadata"]["name"] = json!("c1-lifecycle-kubeconfig");
        own["type"] = json!("Opaque");
        write(own);
        assert_eq!(next(&mut rx, soon).await.as_deref(), Some("connected"));
        task.await.unwrap();
        server.shutdown().await;
    }
}
