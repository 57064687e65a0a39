//! `lifecycle run --mode`: `alone` refuses to start beside an active CAPI manager (and when it
//! cannot tell), writing nothing; `shadow` starts there, and sends nothing but reads.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use std::path::Path;

mod common;
use common::{lifecycle, serve};

/// `lifecycle run --run-for 0` with `extra`: its exit code and stderr.
fn run_once(kubeconfig: &Path, journal: &Path, clock: &[String], extra: &[&str]) -> (i32, String) {
    common::run_controller(kubeconfig, journal, clock, 0, extra)
}

/// CAPI's manager's Lease in `capi-system`, renewed `ago` before now by `capi-manager-0`.
async fn capi_lease(kubeconfig: &Path, ago: std::time::Duration) {
    let api: Api<Lease> = Api::namespaced(common::client(kubeconfig).await, "capi-system");
    let renewed = adapters::clock::wall_now().as_millis() - ago.as_millis() as i64;
    let time = MicroTime(k8s_openapi::jiff::Timestamp::from_millisecond(renewed).unwrap());
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(adapters::kube::lease::CAPI_LEASE_NAME.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("capi-manager-0".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(time),
            ..Default::default()
        }),
    };
    match api
        .get_opt(adapters::kube::lease::CAPI_LEASE_NAME)
        .await
        .unwrap()
    {
        Some(old) => {
            let mut lease = lease;
            lease.metadata.resource_version = old.metadata.resource_version;
            api.replace(
                adapters::kube::lease::CAPI_LEASE_NAME,
                &PostParams::default(),
                &lease,
            )
            .await
            .unwrap();
        }
        None => {
            api.create(&PostParams::default(), &lease).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_refuses_beside_an_active_capi_manager_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "deletion-order-of-actions", 1);
    let journal = dir.path().join("journal");

    // No CAPI Lease at all: alone starts.
    let (code, err) = run_once(&kubeconfig, &dir.path().join("first"), &clock, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("Cluster API's own manager is not active"),
        "{err}"
    );

    capi_lease(&kubeconfig, std::time::Duration::from_secs(3)).await;
    for _ in 0..2 {
        let (code, err) = run_once(&kubeconfig, &journal, &clock, &[]);
        assert_eq!(code, 3, "{err}");
        assert!(
            err.contains("Cluster API's own manager is active")
                && err.contains("capi-system/controller-leader-election-capi")
                && err.contains("capi-manager-0")
                && err.contains("--mode shadow"),
            "{err}"
        );
        assert!(!journal.exists(), "a refused start writes nothing");
    }
    // A mistyped --capi-namespace hides nothing: the Lease is looked for in every namespace.
    let (code, err) = run_once(
        &kubeconfig,
        &journal,
        &clock,
        &["--capi-namespace", "cluster-api"],
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("capi-system/controller-leader-election-capi"),
        "{err}"
    );
    assert!(!journal.exists(), "a refused start writes nothing");
    // The operator's override starts it, said at WARN and journaled.
    started_past_the_check(&kubeconfig, &journal, &clock, "capi-manager-0");
    std::fs::remove_dir_all(&journal).unwrap();

    let (code, err) = run_once(&kubeconfig, &journal, &clock, &["--mode", "shadow"]);
    assert_eq!(code, 0, "{err}");
    assert!(journal.exists());

    // A Lease not renewed for 10 minutes: CAPI's manager is gone.
    capi_lease(&kubeconfig, std::time::Duration::from_secs(600)).await;
    let (code, err) = run_once(&kubeconfig, &journal, &clock, &[]);
    assert_eq!(code, 0, "{err}");

    // CAPI run with --leader-elect=false holds no Lease: its Deployment's ready replicas tell.
    let client = common::client(&kubeconfig).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "cluster-api"}}));
    namespaces
        .create(&PostParams::default(), &namespace.unwrap())
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client, "cluster-api");
    let mut deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "capi-controller-manager",
            "labels": {"cluster.x-k8s.io/provider": "cluster-api"}},
        "spec": {"selector": {"matchLabels": {"app": "capi"}},
            "template": {"metadata": {"labels": {"app": "capi"}},
                "spec": {"containers": [{"name": "manager", "image": "capi:v1.12.0"}]}}},
    }))
    .unwrap();
    deployment = deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let (code, err) = run_once(&kubeconfig, &journal, &clock, &[]);
    assert_eq!(code, 0, "no ready replica yet: {err}");
    deployment.status = serde_json::from_value(serde_json::json!({"readyReplicas": 1})).unwrap();
    deployments
        .replace_status(
            "capi-controller-manager",
            &PostParams::default(),
            &deployment,
        )
        .await
        .unwrap();
    let (code, err) = run_once(&kubeconfig, &journal, &clock, &[]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("its Deployment cluster-api/capi-controller-manager has 1 ready replica"),
        "{err}"
    );
}

#[test]
fn alone_refuses_when_it_cannot_tell_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let journal = dir.path().join("journal");
    let started = std::time::Instant::now();
    let patience = ["--capi-lease-patience-seconds", "2"];
    let (code, err) = run_once(&kubeconfig, &journal, &[], &patience);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("cannot tell whether Cluster API's own manager is active"),
        "{err}"
    );
    // No connection may be brief (an API server restarting): it tried again, for as long as
    // it was told.
    assert!(err.contains("trying again"), "{err}");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "{err}"
    );
    assert!(!journal.exists(), "a refused start writes nothing");

    // A takeover's preflight is as patient, then refuses the same way.
    let started = std::time::Instant::now();
    let takeover = ["--capi-lease-patience-seconds", "2", "--mode", "takeover"];
    let (code, err) = run_once(&kubeconfig, &journal, &[], &takeover);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("preflight failed, not taking over"), "{err}");
    assert!(err.contains("trying again"), "{err}");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "{err}"
    );
    assert!(!journal.exists(), "a refused start writes nothing");
}

/// The shadow run over HTTP, recorded request by request: it reads (get, list, watch) and
/// writes nothing to any cluster, while its timeline shows what it would have done.
#[test]
fn a_shadow_run_over_http_only_reads() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = dir.path().join("requests.tsv");
    let out = lifecycle()
        .args(["sim", "run"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/shadow-deletion-writes-nothing.yaml"
        ))
        .args(["--over-http", "--speed", "20", "--record-requests"])
        .arg(&recorded)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for would in [
        "Cordon        Node n1@c1          NOT SENT (shadow)",
        "Evict         Pod app/web-0@c1    NOT SENT (shadow)",
    ] {
        assert!(stdout.contains(would), "{would}:\n{stdout}");
    }
    let requests = adapters::apiserver::record::read(&recorded).unwrap();
    let verbs: std::collections::BTreeSet<&str> =
        requests.iter().map(|r| r.verb.as_str()).collect();
    // An access review is a question (its checks at start ask what it may do), not a write.
    let writes: Vec<_> = requests
        .iter()
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .filter(|r| !(r.verb == "create" && r.resource == "selfsubjectaccessreviews"))
        .collect();
    assert!(writes.is_empty(), "shadow wrote: {writes:?}");
    assert!(
        verbs.contains("watch") && verbs.contains("list"),
        "{verbs:?}"
    );
    assert!(
        requests.iter().any(|r| r.cluster == "workload"),
        "it read the workload cluster too: {requests:?}"
    );
}

/// `sim serve` of a world that plays CAPI's manager holds CAPI's Lease: `--mode alone` against
/// it refuses, `--mode shadow` runs.
#[test]
fn alone_refuses_against_a_served_world_that_plays_capis_manager() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "shadow-beside-capi-deletion", 1);
    // The served scenario's own mode (shadow) is among the printed flags: leave it out.
    let clock: Vec<String> = clock
        .chunks(2)
        .filter(|flag| flag[0] != "--mode")
        .flatten()
        .cloned()
        .collect();
    let journal = dir.path().join("journal");
    let (code, err) = run_once(&kubeconfig, &journal, &clock, &[]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("Cluster API's own manager is active")
            && err.contains("capi-controller-manager-sim"),
        "{err}"
    );
    assert!(!journal.exists());
    let (code, err) = run_once(&kubeconfig, &journal, &clock, &["--mode", "shadow"]);
    assert_eq!(code, 0, "{err}");
}

/// `lifecycle shadow report` replays a shadow run's journal: beside the world's CAPI manager
/// nothing disagrees (exit 0); alone in a world nobody acts in, every step the controller would
/// have taken is listed as only-ours with its time (exit 1), as the run's timeline shows them.
#[test]
fn shadow_report_lists_what_only_one_side_did() {
    let dir = tempfile::tempdir().unwrap();
    let report = |scenario: &str, format: &str| {
        let journal = dir.path().join(scenario);
        let run = lifecycle()
            .args(["sim", "run"])
            .arg(format!(
                "{}/../scenarios/{scenario}.yaml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg("--journal")
            .arg(&journal)
            .output()
            .unwrap();
        assert_eq!(
            run.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&run.stdout)
        );
        let out = lifecycle()
            .args(["shadow", "report", "--format", format, "--journal"])
            .arg(&journal)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&run.stdout).into_owned(),
        )
    };
    let (code, text, _) = report("shadow-beside-capi-deletion", "text");
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("0 disagreement(s)"), "{text}");
    // A run that sent its commands is not compared: its own writes are nobody else's.
    let (code, text, _) = report("deletion-order-of-actions", "text");
    assert_eq!(code, 2, "{text}");

    let (code, json, timeline) = report("shadow-deletion-writes-nothing", "json");
    assert_eq!(code, 1, "{json}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = json["disagreements"].as_array().unwrap();
    let steps: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["side"].as_str().unwrap(),
                r["step"].as_str().unwrap(),
                r["target"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("only-ours", "Cordon", "Node n1@c1"),
            ("only-ours", "Evict", "Pod app/web-0@c1"),
            ("only-ours", "Evict", "Pod app/web-1@c1"),
        ]
    );
    assert_eq!(rows[0]["ours"], "2024-01-01T00:01:00Z");
    assert!(rows[0]["theirs"].is_null());
    // The run's own timeline told the same, as it found them, and so does the Machine's story.
    let story = lifecycle()
        .args(["explain", "machine", "default/m1", "--journal"])
        .arg(dir.path().join("shadow-deletion-writes-nothing"))
        .output()
        .unwrap();
    let story = String::from_utf8_lossy(&story.stdout);
    for row in rows {
        let text = row["text"].as_str().unwrap();
        assert!(timeline.contains(text), "{timeline}");
        assert!(story.contains(text), "{story}");
    }
    assert!(story.contains("NOT SENT (shadow)"), "{story}");
    assert!(
        !story.contains("answered not sent"),
        "an answer not sent is no refusal: {story}"
    );
}

/// A world playing CAPI's manager whose Machine `m1` is deleted at 1s and held by another
/// owner's pre-drain hook: CAPI's model keeps writing its status (`Deleting`, phase) as field
/// manager `manager`.
const CAPI_WRITES_STATUS: &str = r#"name: alone-capi-status-writes
duration: 10m
mode: shadow
world:
  capiManager: true
management:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Cluster
    metadata: {name: c1, namespace: default}
    spec: {}
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Machine
    metadata:
      name: cp-1
      namespace: default
      labels: {cluster.x-k8s.io/cluster-name: c1, cluster.x-k8s.io/control-plane: ""}
      finalizers: [machine.cluster.x-k8s.io]
    spec:
      clusterName: c1
      bootstrap: {configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfig, name: cp-1}}
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DockerMachine, name: cp-1}
    status: {nodeRef: {name: cp-1}}
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Machine
    metadata:
      name: m1
      namespace: default
      labels: {cluster.x-k8s.io/cluster-name: c1}
      annotations: {pre-drain.delete.hook.machine.cluster.x-k8s.io/other: other-owner}
      finalizers: [machine.cluster.x-k8s.io]
    spec:
      clusterName: c1
      bootstrap: {configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfig, name: m1}}
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DockerMachine, name: m1}
    status: {nodeRef: {name: n1}}
workload:
  c1:
    - apiVersion: v1
      kind: Node
      metadata: {name: cp-1}
      spec: {taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]}
      status: {conditions: [{type: Ready, status: "True"}]}
    - apiVersion: v1
      kind: Node
      metadata: {name: n1}
      status: {conditions: [{type: Ready, status: "True"}]}
timeline:
  - {at: 1s, delete: {kind: Machine, name: m1}}
"#;

/// CAPI's manager out of sight (no Lease, no Deployment: an identity that may not read its
/// namespace, or CAPI run elsewhere against this cluster) still gives itself away by the
/// Machine status only it writes: `--mode alone` refuses, naming a Machine and the writer,
/// and writes nothing; `lifecycle preflight --mode alone` fails the same check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_refuses_when_only_capis_machine_status_writes_give_it_away() {
    use kube::api::{ApiResource, DynamicObject};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alone-capi-status-writes.yaml");
    std::fs::write(&file, CAPI_WRITES_STATUS).unwrap();
    let (_server, kubeconfig, clock) = common::serve_file(dir.path(), file.to_str().unwrap(), 1);
    let clock: Vec<String> = clock
        .chunks(2)
        .filter(|flag| flag[0] != "--mode")
        .flatten()
        .cloned()
        .collect();
    let client = common::client(&kubeconfig).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "capi-system");
    leases
        .delete(adapters::kube::lease::CAPI_LEASE_NAME, &Default::default())
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "capi-system");
    deployments
        .delete("capi-controller-manager", &Default::default())
        .await
        .unwrap();
    // CAPI's model writes m1's status once it sees the deletion.
    let gvk = kube::core::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client, "default", &ApiResource::from_gvk(&gvk));
    let mut written = false;
    for _ in 0..100 {
        let m1 = machines.get("m1").await.unwrap();
        written = m1.metadata.managed_fields.iter().flatten().any(|e| {
            e.manager.as_deref() == Some("manager") && e.subresource.as_deref() == Some("status")
        });
        if written {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        written,
        "CAPI's model wrote m1's status as field manager manager"
    );

    let journal = dir.path().join("journal");
    let (code, err) = run_once(&kubeconfig, &journal, &clock, &[]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("Cluster API's own manager is active")
            && err.contains("had its status (")
            && err.contains("by field manager \"manager\"")
            && err.contains("--mode shadow")
            && err.contains("--capi-manager-stopped"),
        "{err}"
    );
    assert!(!journal.exists(), "a refused start writes nothing");

    let out = lifecycle()
        .args(["preflight", "--mode", "alone", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL  capi-manager") && stdout.contains("by field manager \"manager\""),
        "{stdout}"
    );

    // The operator's override covers this sign as the others: said at WARN, journaled.
    started_past_the_check(
        &kubeconfig,
        &journal,
        &clock,
        "by field manager \"manager\"",
    );
}

/// `--capi-manager-stopped` starts `alone` past the check, saying at WARN what it found
/// (`found`), and journals the override with it.
fn started_past_the_check(kubeconfig: &Path, journal: &Path, clock: &[String], found: &str) {
    let (code, err) = run_once(kubeconfig, journal, clock, &["--capi-manager-stopped"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("WARN")
            && err.contains("overridden by --capi-manager-stopped")
            && err.contains(found),
        "{err}"
    );
    let shown = lifecycle()
        .args(["log", "show", "--journal"])
        .arg(journal)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("started past the check capi-manager by the operator's override")
            && shown.contains(found),
        "{shown}"
    );
}
