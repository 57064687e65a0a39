//! Leader election against the fake API server: one holder at a time, takeover after expiry,
//! and the old holder learns it lost.

use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
use adapters::kube::lease::{LeaseConfig, try_acquire_or_renew};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, Config};
use sim::api::ClusterStore;
use std::time::Duration;

#[tokio::test]
async fn one_holder_at_a_time_and_takeover_after_expiry() {
    let server = ApiServer::start(
        SharedCluster::new(ClusterStore::new("t")),
        "127.0.0.1:0".parse().unwrap(),
        ServerOptions::default(),
    )
    .await
    .unwrap();
    let mut config = Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    let api: Api<Lease> = Api::namespaced(Client::try_from(config).unwrap(), "kube-system");
    let mut a = LeaseConfig::new("lifecycle", "a");
    let mut b = LeaseConfig::new("lifecycle", "b");
    a.lease_duration = Duration::from_secs(1);
    b.lease_duration = Duration::from_secs(1);
    let step = |c: &LeaseConfig| {
        let (api, c) = (api.clone(), c.clone());
        async move {
            tokio::time::timeout(Duration::from_secs(10), try_acquire_or_renew(&api, &c))
                .await
                .unwrap()
                .unwrap()
        }
    };
    assert!(step(&a).await, "a creates the lease");
    assert!(!step(&b).await, "b sees a live holder");
    assert!(step(&a).await, "a renews");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(step(&b).await, "b takes over an expired lease");
    assert!(!step(&a).await, "a has lost it");
    let spec = api.get("lifecycle").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    server.shutdown().await;
}
