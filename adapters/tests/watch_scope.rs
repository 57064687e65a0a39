//! `lifecycle run --watch-filter` and `--namespace` (CAPI's multi-instance contract): a
//! controller never acts on what lies outside them. Two teams' Clusters share a served
//! management cluster (`tests/worlds/two-tenants.yaml`); both workers are deleted and nobody
//! else acts, so whatever happens to a worker is the controller's doing.

use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use std::path::Path;
use std::time::Duration;

mod common;
use common::{lifecycle, serve_file};

const WORLD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/worlds/two-tenants.yaml");

async fn worker(client: &kube::Client, team: &str) -> Option<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &format!("team-{team}"),
        &ApiResource::from_gvk_with_plural(&gvk, "machines"),
    );
    api.get_opt(&format!("{team}-worker")).await.unwrap()
}

/// Runs the controller for `seconds` with `extra` flags; panics unless it exits 0.
fn run(kubeconfig: &Path, journal: &Path, clock: &[String], seconds: u64, extra: &[&str]) {
    let (code, err) = common::run_controller(kubeconfig, journal, clock, seconds, extra);
    assert_eq!(code, 0, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_acts_only_within_its_watch_filter_and_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve_file(dir.path(), WORLD, 10);
    let client = common::client(&kubeconfig).await;

    // Both deleted at 5 s simulated; a deletion takes 25 s simulated, 2.5 s here.
    run(
        &kubeconfig,
        &dir.path().join("blue"),
        &clock,
        6,
        &["--watch-filter", "blue"],
    );
    assert!(
        worker(&client, "blue").await.is_none(),
        "team-blue's worker carries the filter label: deleted"
    );
    let red = worker(&client, "red")
        .await
        .expect("team-red's worker is not ours");
    assert!(red.metadata.deletion_timestamp.is_some());
    assert!(
        red.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"machine.cluster.x-k8s.io".to_string()),
        "its finalizer stays: nothing was done to it"
    );
    assert!(
        red.data["status"].get("deletion").is_none()
            && red.data["status"].get("conditions").is_none(),
        "not even a condition: {}",
        red.data["status"]
    );

    run(
        &kubeconfig,
        &dir.path().join("red"),
        &clock,
        6,
        &["--namespace", "team-red"],
    );
    let started = std::time::Instant::now();
    while worker(&client, "red").await.is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "team-red's worker stays"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_bad_namespace_or_filter_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    for (flag, value, says) in [
        ("--namespace", "Team_Red", "is not a namespace name"),
        ("--watch-filter", "", "is not a label value"),
        ("--watch-filter", "blue team", "is not a label value"),
    ] {
        let out = lifecycle()
            .args(["run", "--run-for", "0", flag, value, "--journal"])
            .arg(&journal)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value:?}: {err}");
        assert!(err.contains(says), "{flag} {value:?}: {err}");
        assert!(!journal.exists(), "a refused start writes nothing");
    }
}
