//! Leader election against the fake API server: one holder at a time, takeover after expiry,
//! and the old holder learns it lost.

use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
use adapters::kube::lease::{LeaseConfig, release, try_acquire_or_renew, try_acquire_or_renew_at};
use adapters::kube::{client_for_url, client_from_config};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, Config};
use sim::api::ClusterStore;
use std::time::Duration;

mod common;
use common::{Child, lifecycle, serve};

#[tokio::test]
async fn one_holder_at_a_time_and_takeover_after_expiry() {
    let server = ApiServer::start(
        SharedCluster::new(ClusterStore::new("t")),
        "127.0.0.1:0".parse().unwrap(),
        ServerOptions::default(),
    )
    .await
    .unwrap();
    let client = client_for_url(&server.url()).unwrap();
    let api: Api<Lease> = Api::namespaced(client, "kube-system");
    let mut a = LeaseConfig::new("lifecycle", "a");
    let mut b = LeaseConfig::new("lifecycle", "b");
    a.lease_duration = Duration::from_secs(1);
    b.lease_duration = Duration::from_secs(1);
    a.mode = Some(engine::runtime::Mode::Shadow);
    b.mode = Some(engine::runtime::Mode::Takeover);
    // The candidates' clock is passed in: expiry is 1.1 s later on it, not a wait.
    let t0 = adapters::clock::wall_now();
    let later = t0.saturating_add(engine::Duration::from_millis(1100));
    let step = |c: &LeaseConfig, now: engine::Timestamp| {
        let (api, c) = (api.clone(), c.clone());
        async move {
            tokio::time::timeout(
                Duration::from_secs(10),
                try_acquire_or_renew_at(&api, &c, now),
            )
            .await
            .unwrap()
            .unwrap()
        }
    };
    assert!(step(&a, t0).await, "a creates the lease");
    let leader = |now| {
        let api = api.clone();
        async move {
            adapters::kube::lease::leader(&api, "lifecycle", now)
                .await
                .unwrap()
                .unwrap()
        }
    };
    assert_eq!(
        leader(t0).await.mode.as_deref(),
        Some("shadow"),
        "the leader names its mode"
    );
    assert!(!step(&b, t0).await, "b sees a live holder");
    assert!(step(&a, t0).await, "a renews");
    assert!(
        !step(&b, t0.saturating_add(engine::Duration::from_millis(900))).await,
        "not expired yet"
    );
    assert!(step(&b, later).await, "b takes over an expired lease");
    assert!(!step(&a, later).await, "a has lost it");
    let spec = api.get("lifecycle").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    let now = leader(later).await;
    assert_eq!(
        (now.holder.as_str(), now.mode.as_deref()),
        ("b", Some("takeover"))
    );
    assert_eq!(now.renewed_ago, Some(Duration::ZERO));
    server.shutdown().await;
}

/// A release (holderIdentity "", leaseDurationSeconds 1, as client-go) lets another candidate
/// take the Lease at once, long before it would expire; only the holder can release.
#[tokio::test]
async fn a_released_lease_is_taken_at_once_and_only_the_holder_releases() {
    let server = ApiServer::start(
        SharedCluster::new(ClusterStore::new("t")),
        "127.0.0.1:0".parse().unwrap(),
        ServerOptions::default(),
    )
    .await
    .unwrap();
    let client = client_for_url(&server.url()).unwrap();
    let api: Api<Lease> = Api::namespaced(client, "kube-system");
    let a = LeaseConfig::new("lifecycle", "a");
    let b = LeaseConfig::new("lifecycle", "b");
    assert!(try_acquire_or_renew(&api, &a).await.unwrap());
    assert!(!try_acquire_or_renew(&api, &b).await.unwrap(), "15 s left");
    assert!(!release(&api, &b).await.unwrap(), "b does not hold it");
    assert!(release(&api, &a).await.unwrap());
    let spec = api.get("lifecycle").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert!(
        try_acquire_or_renew(&api, &b).await.unwrap(),
        "taken at once"
    );
    assert!(!release(&api, &a).await.unwrap(), "a no longer holds it");
    server.shutdown().await;
}

/// `lifecycle run --leader-elect` as `host` (its Lease identity is `host_PID`).
fn controller(
    kubeconfig: &std::path::Path,
    journal: &std::path::Path,
    host: &str,
    clock: &[String],
) -> Child {
    let child = lifecycle()
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--journal")
        .arg(journal)
        .args(["--metrics-addr", "127.0.0.1:0", "--leader-elect"])
        .args(clock)
        .env("HOSTNAME", host)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("lifecycle run starts");
    Child(child)
}

async fn management_client(kubeconfig: &std::path::Path) -> Client {
    let kube = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kube, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    client_from_config(config).unwrap()
}

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get_opt(adapters::kube::lease::DEFAULT_LEASE_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Two controllers; returns them with the index of the one that became leader.
async fn two_candidates(
    api: &Api<Lease>,
    kubeconfig: &std::path::Path,
    journals: &[std::path::PathBuf; 2],
    clock: &[String],
) -> ([Child; 2], [String; 2], usize) {
    let a = controller(kubeconfig, &journals[0], "a", clock);
    let b = controller(kubeconfig, &journals[1], "b", clock);
    let ids = [format!("a_{}", a.0.id()), format!("b_{}", b.0.id())];
    let started = std::time::Instant::now();
    loop {
        if let Some(h) = holder(api).await {
            let leader = ids.iter().position(|id| *id == h).expect("a or b leads");
            return ([a, b], ids, leader);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nobody became leader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Real time from now until `id` holds the Lease (at most 30 s).
async fn until_held_by(api: &Api<Lease>, id: &str) -> Duration {
    let sent = std::time::Instant::now();
    loop {
        if holder(api).await.as_deref() == Some(id) {
            return sent.elapsed();
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "{id} did not take over within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn verify(journal: &std::path::Path) {
    let verify = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(journal)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// The measurement: on SIGTERM the leader finishes, flushes its journal, releases the
/// Lease and exits 0; the standby takes over within 2 s (16 s when the Lease had to expire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_within_2s_of_the_leaders_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "deletion-order-of-actions", 1);
    let api: Api<Lease> = Api::namespaced(management_client(&kubeconfig).await, "kube-system");
    let journals = [dir.path().join("journal-a"), dir.path().join("journal-b")];
    let (mut children, ids, leader) = two_candidates(&api, &kubeconfig, &journals, &clock).await;
    // Let the leader settle into its loop (caches synced, journal written).
    tokio::time::sleep(Duration::from_secs(2)).await;
    children[leader].sigterm();
    let takeover = until_held_by(&api, &ids[1 - leader]).await;
    eprintln!("takeover after SIGTERM: {} ms", takeover.as_millis());
    let exited = children[leader].exited(Duration::from_secs(30)).await;
    assert!(
        takeover <= Duration::from_secs(2),
        "takeover took {takeover:?}"
    );
    assert_eq!(
        exited.code(),
        Some(0),
        "the leader exits 0 on SIGTERM: {exited}"
    );
    verify(&journals[leader]);
}

/// SIGTERM while the leader drains (the world at 10x, m1 deleted at 1m, so 6 s in): the
/// leader still exits 0 with a journal that verifies, the standby takes over within 2 s and
/// finishes the deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_mid_drain_hands_over_and_the_deletion_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "deletion-order-of-actions", 10);
    assert!(clock.iter().any(|f| f == "--clock-speed"), "{clock:?}");
    let client = management_client(&kubeconfig).await;
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let journals = [dir.path().join("journal-a"), dir.path().join("journal-b")];
    let (mut children, ids, leader) = two_candidates(&api, &kubeconfig, &journals, &clock).await;
    let gvk = kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    let machines: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client, "default", &kube::api::ApiResource::from_gvk(&gvk));
    // The drain has begun once m1 is Deleting with DrainingNode.
    let started = std::time::Instant::now();
    loop {
        let m1 = machines.get("m1").await.unwrap();
        let draining = m1
            .data
            .pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Deleting" && c["reason"] == "DrainingNode")
            });
        if draining {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no drain began"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    children[leader].sigterm();
    let takeover = until_held_by(&api, &ids[1 - leader]).await;
    eprintln!(
        "takeover after SIGTERM mid-drain: {} ms",
        takeover.as_millis()
    );
    let exited = children[leader].exited(Duration::from_secs(30)).await;
    assert!(
        takeover <= Duration::from_secs(2),
        "takeover took {takeover:?}"
    );
    assert_eq!(
        exited.code(),
        Some(0),
        "the leader exits 0 on SIGTERM: {exited}"
    );
    verify(&journals[leader]);
    let handed_over = std::time::Instant::now();
    while machines.get_opt("m1").await.unwrap().is_some() {
        assert!(
            handed_over.elapsed() < Duration::from_secs(30),
            "the standby did not finish deleting m1"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
