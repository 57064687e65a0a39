//! The settings every kube client of ours is built with, management and workload alike.

use engine::connection::Unreachable;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A client for a workload cluster from its kubeconfig YAML; what is wrong when there is
/// none: YAML that is no kubeconfig ([`Unreachable::Unparsable`]), or a kubeconfig no client
/// can be built from ([`Unreachable::ClientFailed`]: no current context, a certificate that
/// does not load, an auth plugin that fails).
pub async fn client_from_kubeconfig(yaml: &str) -> Result<Client, Unreachable> {
    let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|e| Unreachable::Unparsable {
        error: e.to_string(),
    })?;
    let failed = |error: String| Unreachable::ClientFailed { error };
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| failed(e.to_string()))?;
    client_from_config(config).map_err(failed)
}

/// A client from a kube [`Config`], after [`prepare`].
pub fn client_from_config(config: Config) -> Result<Client, String> {
    Client::try_from(prepare(config)).map_err(|e| e.to_string())
}

/// A client for a server's URL, without credentials (tests, the simulator's own API servers).
pub fn client_for_url(url: &str) -> Result<Client, String> {
    let url = url.parse().map_err(|e| format!("{url}: {e}"))?;
    client_from_config(Config::new(url))
}

/// The field manager this controller's writes carry: the API server names it from the
/// User-Agent (up to its first `/`), as it names CAPI's `manager`. `lifecycle preflight` tells
/// its own Machine status writes from CAPI's by it.
pub const FIELD_MANAGER: &str = "lifecycle";

/// `lifecycle/<version>` (kube sends no User-Agent of its own).
pub fn user_agent() -> String {
    format!("{FIELD_MANAGER}/v{}", env!("CARGO_PKG_VERSION"))
}

/// What we change in kube's defaults.
pub fn prepare(mut config: Config) -> Config {
    if let Ok(agent) = http::HeaderValue::from_str(&user_agent()) {
        config
            .headers
            .retain(|(name, _)| name != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, agent));
    }
    // kube's default retry policy (429, 503 and 504 retried up to 15 times, about 160 s in
    // all) would hold a 429 eviction for minutes; the drain paces its own retries.
    config.default_retry = false;
    // A plain-HTTP server is never verified, but without a CA of its own kube builds the
    // client's TLS settings from the system's trust store, reading and parsing every file of
    // /etc/ssl/certs again for each client: 19% of `lifecycle run`'s CPU while it connected
    // 1,000 workload clusters, and ~95 KiB each (BENCHMARKS.md). No roots: nothing to load.
    if config.cluster_url.scheme() == Some(&http::uri::Scheme::HTTP) && config.root_cert.is_none() {
        config.root_cert = Some(Vec::new());
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Config {
        Config::new(url.parse().unwrap())
    }

    #[test]
    fn every_request_names_this_controller_as_its_field_manager() {
        let headers = prepare(config("https://h:6443")).headers;
        let agents: Vec<_> = headers
            .iter()
            .filter(|(n, _)| n == http::header::USER_AGENT)
            .map(|(_, v)| v.to_str().unwrap().to_string())
            .collect();
        assert_eq!(agents, [user_agent()]);
        assert!(user_agent().starts_with("lifecycle/v"));
    }

    #[test]
    fn kube_retries_are_off() {
        assert!(config("https://h:6443").default_retry);
        assert!(!prepare(config("https://h:6443")).default_retry);
    }

    #[test]
    fn a_plain_http_server_gets_no_trust_roots_loaded() {
        assert_eq!(
            prepare(config("http://127.0.0.1:8080")).root_cert,
            Some(Vec::new())
        );
    }

    #[test]
    fn an_https_server_keeps_its_own_ca_or_the_system_roots() {
        assert_eq!(prepare(config("https://h:6443")).root_cert, None);
        let mut with_ca = config("https://h:6443");
        with_ca.root_cert = Some(vec![vec![1, 2, 3]]);
        assert_eq!(prepare(with_ca).root_cert, Some(vec![vec![1, 2, 3]]));
    }

    #[tokio::test]
    async fn a_kubeconfig_that_does_not_parse_or_builds_no_client_says_which() {
        let unparsable = client_from_kubeconfig("this is not a kubeconfig").await;
        assert!(
            matches!(&unparsable, Err(Unreachable::Unparsable { error }) if !error.is_empty()),
            "{:?}",
            unparsable.map(|_| ())
        );
        // A kubeconfig without contexts parses, but names no server to build a client for.
        let empty = client_from_kubeconfig("apiVersion: v1\nkind: Config\nclusters: []\n").await;
        assert!(
            matches!(&empty, Err(Unreachable::ClientFailed { .. })),
            "{:?}",
            empty.map(|_| ())
        );
        let good = fakeapi::apiserver::kubeconfig_yaml("c1", "http://127.0.0.1:1");
        assert!(client_from_kubeconfig(&good).await.is_ok());
    }

    #[tokio::test]
    async fn a_plain_http_client_builds_without_any_system_roots() {
        // An empty root store is what kube is given; building must still succeed.
        client_from_config(config("http://127.0.0.1:1")).unwrap();
    }
}
