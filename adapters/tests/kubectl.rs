//! Real `kubectl` against the fake API server (fails when `kubectl` is not on PATH):
//! discovery, get, get -o json, patch (strategic and merge), managedFields shown only with
//! `--show-managed-fields`, delete. The wider client suite
//! (kubectl 1.32 and 1.20, the Python client) is `clients.rs`.

use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
use serde_json::{Value, json};
use sim::api::{ClusterStore, ObjKey};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a single kubectl call may take.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(30);

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs kubectl with the kubeconfig; returns (success, stdout, stderr). Killed after the timeout.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("waiting for kubectl").is_some() {
            break;
        }
        if started.elapsed() > KUBECTL_TIMEOUT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("kubectl output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), stdout, stderr)
}

fn world() -> ClusterStore {
    let now = adapters::clock::wall_now();
    let mut store = ClusterStore::new("t");
    for name in ["n1", "n2"] {
        store
            .create(
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}}),
                now,
            )
            .unwrap();
    }
    store
        .create(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
            now,
        )
        .unwrap();
    store
        .create(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                       "metadata": {"name": "m1", "namespace": "default",
                                    "finalizers": ["machine.cluster.x-k8s.io"]},
                       "spec": {"clusterName": "c1"}}),
            now,
        )
        .unwrap();
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_patches_and_deletes_through_the_fake_server() {
    assert!(
        kubectl_available(),
        "kubectl is not on PATH (it ships with this machine kind; a missing client fails, it never skips)"
    );
    let server = ApiServer::start(
        SharedCluster::new(world()),
        "127.0.0.1:0".parse().unwrap(),
        ServerOptions::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(&kubeconfig, server.kubeconfig("fake")).unwrap();
    // kubectl caches discovery under $HOME/.kube/cache; keep it inside the temp dir.
    let cache = dir.path().join("cache");
    let cache_arg = format!("--cache-dir={}", cache.display());
    let cluster = server.cluster().clone();
    let k = move |args: Vec<String>| {
        let kubeconfig = kubeconfig.clone();
        let cache_arg = cache_arg.clone();
        tokio::task::spawn_blocking(move || {
            let mut all: Vec<&str> = vec![cache_arg.as_str()];
            all.extend(args.iter().map(String::as_str));
            kubectl(&kubeconfig, &all)
        })
    };
    let args = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();

    let (ok, out, err) = k(args(&["get", "nodes"])).await.unwrap();
    assert!(ok, "kubectl get nodes failed: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{out}");
    assert!(
        lines[1].starts_with("n1") && lines[2].starts_with("n2"),
        "{out}"
    );

    let (ok, out, err) = k(args(&[
        "get",
        "machines.cluster.x-k8s.io",
        "-A",
        "-o",
        "json",
    ]))
    .await
    .unwrap();
    assert!(ok, "kubectl get machines failed: {err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "m1");
    assert_eq!(list["items"][0]["spec"]["clusterName"], "c1");

    let (ok, out, err) = k(args(&[
        "patch",
        "node",
        "n1",
        "-p",
        r#"{"spec":{"unschedulable":true}}"#,
    ]))
    .await
    .unwrap();
    assert!(ok, "kubectl patch node failed: {err}");
    assert_eq!(out.trim(), "node/n1 patched");
    let n1 = cluster
        .read(|s| s.store.get(&ObjKey::new("", "Node", "", "n1")).cloned())
        .unwrap();
    assert_eq!(n1.pointer("/spec/unschedulable"), Some(&json!(true)));

    let (ok, out, err) = k(args(&[
        "patch",
        "machines.cluster.x-k8s.io",
        "m1",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"tier":"gold"}}}"#,
    ]))
    .await
    .unwrap();
    assert!(ok, "kubectl patch machine failed: {err}");
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io/m1 patched");

    // The server keeps managedFields; kubectl hides them unless asked.
    let get_yaml = ["get", "machines.cluster.x-k8s.io", "m1", "-o", "yaml"];
    let (ok, out, err) = k(args(&get_yaml)).await.unwrap();
    assert!(ok, "{err}");
    assert!(!out.contains("managedFields"), "{out}");
    let mut shown = get_yaml.to_vec();
    shown.push("--show-managed-fields");
    let (ok, out, err) = k(args(&shown)).await.unwrap();
    assert!(ok, "{err}");
    for field in [
        "managedFields:",
        "manager: kubectl-patch",
        "operation: Update",
        "fieldsType: FieldsV1",
        "f:tier: {}",
    ] {
        assert!(out.contains(field), "{field}:\n{out}");
    }
    // `[{}]` resets them, as the real server documents.
    let reset = r#"{"metadata":{"managedFields":[{}]}}"#;
    let (ok, _, err) = k(args(&[
        "patch",
        "machines.cluster.x-k8s.io",
        "m1",
        "--type",
        "merge",
        "-p",
        reset,
    ]))
    .await
    .unwrap();
    assert!(ok, "{err}");
    let (ok, out, err) = k(args(&shown)).await.unwrap();
    assert!(ok, "{err}");
    assert!(!out.contains("managedFields"), "{out}");

    let (ok, out, err) = k(args(&[
        "get",
        "machines.cluster.x-k8s.io",
        "-l",
        "tier=gold",
        "-o",
        "name",
    ]))
    .await
    .unwrap();
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io/m1");

    let (ok, out, err) = k(args(&["delete", "node", "n2"])).await.unwrap();
    assert!(ok, "kubectl delete node failed: {err}");
    assert_eq!(out.trim(), "node \"n2\" deleted");
    assert!(cluster.read(|s| s.store.get(&ObjKey::new("", "Node", "", "n2")).is_none()));

    let (ok, out, err) = k(args(&[
        "delete",
        "machines.cluster.x-k8s.io",
        "m1",
        "--wait=false",
    ]))
    .await
    .unwrap();
    assert!(ok, "kubectl delete machine failed: {err}");
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io \"m1\" deleted");
    let m1 = cluster
        .read(|s| {
            s.store
                .get(&ObjKey::new("cluster.x-k8s.io", "Machine", "default", "m1"))
                .cloned()
        })
        .expect("the finalizer holds the Machine");
    assert!(m1.pointer("/metadata/deletionTimestamp").is_some());

    let (ok, _, err) = k(args(&["get", "pods", "nope", "-n", "app"]))
        .await
        .unwrap();
    assert!(!ok);
    assert!(err.contains("pods \"nope\" not found"), "{err}");
    server.shutdown().await;
}
