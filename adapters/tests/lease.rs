//! Leader election against the fake API server: one holder at a time, takeover after expiry,
//! and the old holder learns it lost.

use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
use adapters::kube::lease::{LeaseConfig, release, try_acquire_or_renew};
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
    let mut config = Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    let api: Api<Lease> = Api::namespaced(Client::try_from(config).unwrap(), "kube-system");
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

/// A `lifecycle` child process, killed if still running when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lifecycle() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_lifecycle"))
}

/// `lifecycle sim serve` on a scenario that stays quiet for a minute; returns the server and
/// the management kubeconfig it wrote.
fn serve(dir: &std::path::Path) -> (Child, std::path::PathBuf) {
    use std::io::BufRead;
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/deletion-order-of-actions.yaml"
    );
    let mut serve = lifecycle()
        .args(["sim", "serve", file, "--kubeconfig-dir"])
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sim serve starts");
    let stdout = serve.stdout.take().expect("piped");
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if line.expect("sim serve prints").starts_with("playing ") {
            break;
        }
    }
    // Keep reading so that the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (Child(serve), dir.join("management.kubeconfig"))
}

/// `lifecycle run --leader-elect` as `host` (its Lease identity is `host_PID`).
fn controller(kubeconfig: &std::path::Path, journal: &std::path::Path, host: &str) -> Child {
    let child = lifecycle()
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--journal")
        .arg(journal)
        .args(["--metrics-addr", "127.0.0.1:0", "--leader-elect"])
        .env("HOSTNAME", host)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("lifecycle run starts");
    Child(child)
}

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get_opt("lifecycle-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The measurement: on SIGTERM the leader finishes, flushes its journal, releases the
/// Lease and exits 0; the standby takes over within 2 s (16 s when the Lease had to expire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_within_2s_of_the_leaders_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig) = serve(dir.path());
    let kube = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let mut config =
        Config::from_custom_kubeconfig(kube, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.default_retry = false;
    let api: Api<Lease> = Api::namespaced(Client::try_from(config).unwrap(), "kube-system");
    let journals = [dir.path().join("journal-a"), dir.path().join("journal-b")];
    let mut a = controller(&kubeconfig, &journals[0], "a");
    let mut b = controller(&kubeconfig, &journals[1], "b");
    let ids = [format!("a_{}", a.0.id()), format!("b_{}", b.0.id())];
    let started = std::time::Instant::now();
    let first = loop {
        if let Some(h) = holder(&api).await {
            break h;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nobody became leader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let leader = ids
        .iter()
        .position(|id| *id == first)
        .expect("a or b leads");
    let (leading, standby) = if leader == 0 {
        (&mut a, &ids[1])
    } else {
        (&mut b, &ids[0])
    };
    // Let the leader settle into its loop (caches synced, journal written).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = std::time::Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &leading.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let takeover = loop {
        if holder(&api).await.as_ref() == Some(standby) {
            break sent.elapsed();
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "the standby did not take over within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!("takeover after SIGTERM: {} ms", takeover.as_millis());
    let exited = loop {
        if let Some(status) = leading.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "the leader did not exit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        takeover <= Duration::from_secs(2),
        "takeover took {takeover:?}"
    );
    assert_eq!(
        exited.code(),
        Some(0),
        "the leader exits 0 on SIGTERM: {exited}"
    );
    let verify = lifecycle()
        .args(["log", "verify", "--journal"])
        .arg(&journals[leader])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}
