//! `lifecycle preflight` against `sim serve` with the world's model of CAPI's manager (its
//! Deployment names release v1.12.0): what passes, and each failure or warning an operator
//! must see before a takeover; `lifecycle run --mode takeover` refuses to start on a failure.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use std::path::Path;

mod common;
use common::{lifecycle, serve};

async fn api(
    kubeconfig: &Path,
    gvk: GroupVersionKind,
    plural: &str,
    ns: &str,
) -> Api<DynamicObject> {
    let client = common::client(kubeconfig).await;
    Api::namespaced_with(client, ns, &ApiResource::from_gvk_with_plural(&gvk, plural))
}

fn preflight(kubeconfig: &Path, extra: &[&str]) -> (i32, String) {
    let out = lifecycle()
        .arg("preflight")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// The line of check `name`, and the fix under it when there is one.
fn line<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text
        .lines()
        .position(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no check {name} in:\n{text}"));
    let lines: Vec<&str> = text.lines().collect();
    let end = if lines
        .get(start + 1)
        .is_some_and(|l| l.trim_start().starts_with('→'))
    {
        start + 2
    } else {
        start + 1
    };
    let from = text.find(lines[start]).unwrap();
    let to = text.find(lines[end - 1]).unwrap() + lines[end - 1].len();
    &text[from..to]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_passes_beside_a_known_release_and_names_what_blocks_a_takeover() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "takeover-worker-deletion", 1);

    let (code, text) = preflight(&kubeconfig, &[]);
    assert_eq!(code, 0, "{text}");
    assert!(line(&text, "capi-release").contains("v1.12.0"), "{text}");
    assert!(line(&text, "rbac").starts_with("ok"), "{text}");
    assert!(text.contains("0 failed, 0 warning(s)"), "{text}");

    // --mode alone beside the world's CAPI manager fails, as `run --mode alone` would, however
    // mistyped --capi-namespace is: its Lease and its Deployment are found where they are.
    for namespace in ["capi-system", "cluster-api"] {
        let (code, text) = preflight(
            &kubeconfig,
            &["--mode", "alone", "--capi-namespace", namespace],
        );
        assert_eq!(code, 1, "{text}");
        let manager = line(&text, "capi-manager");
        assert!(manager.starts_with("FAIL"), "{text}");
        if namespace == "cluster-api" {
            assert!(
                line(&text, "capi-release").contains("pass --capi-namespace capi-system"),
                "the mistyped namespace is named: {text}"
            );
        }
        for sign in [
            "its Lease capi-system/controller-leader-election-capi was renewed",
            "its Deployment capi-system/capi-controller-manager has 1 ready replica(s)",
            "--mode shadow",
            "--capi-manager-stopped",
        ] {
            assert!(manager.contains(sign), "{sign}: {manager}");
        }
    }
    let (code, text) = preflight(&kubeconfig, &["--mode", "alone", "--capi-manager-stopped"]);
    assert_eq!(code, 0, "{text}");
    assert!(line(&text, "capi-manager").starts_with("warn"), "{text}");

    // An identity without RBAC: every permission is asked, the missing ones named.
    let unprivileged = dir.path().join("unprivileged.kubeconfig");
    let admin = std::fs::read_to_string(&kubeconfig).unwrap();
    std::fs::write(
        &unprivileged,
        admin.replace(
            adapters::apiserver::auth::ADMIN_TOKEN,
            adapters::apiserver::auth::UNPRIVILEGED_TOKEN,
        ),
    )
    .unwrap();
    let (code, text) = preflight(&unprivileged, &[]);
    assert_eq!(code, 1, "{text}");
    let rbac = line(&text, "rbac");
    assert!(rbac.starts_with("FAIL"), "{text}");
    assert!(
        rbac.contains("patch machines/status (cluster.x-k8s.io)"),
        "{rbac}"
    );
    assert!(rbac.contains("adapters/deploy/takeover"), "{rbac}");

    // CAPI's manager upgraded past what this build knows: a takeover is refused, a shadow warned.
    let deployments = api(
        &kubeconfig,
        GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
        "capi-system",
    )
    .await;
    let newer = serde_json::json!({"spec": {"template": {"spec": {"containers": [{
        "name": "manager",
        "image": "registry.k8s.io/cluster-api/cluster-api-controller:v1.15.0",
        "args": ["--feature-gates=MachinePool=false"]}]}}}});
    deployments
        .patch(
            "capi-controller-manager",
            &PatchParams::default(),
            &Patch::Strategic(&newer),
        )
        .await
        .unwrap();
    let (code, text) = preflight(&kubeconfig, &[]);
    assert_eq!(code, 1, "{text}");
    let release = line(&text, "capi-release");
    assert!(
        release.starts_with("FAIL") && release.contains("v1.15.0"),
        "{text}"
    );
    assert!(
        line(&text, "machinepool-gate").starts_with("warn"),
        "{text}"
    );
    let (code, text) = preflight(&kubeconfig, &["--mode", "shadow"]);
    assert_eq!(code, 0, "{text}");
    assert!(line(&text, "capi-release").starts_with("warn"), "{text}");
    let (code, text) = preflight(&kubeconfig, &["--capi-version", "v1.12.0"]);
    assert_eq!(
        code, 1,
        "the image, when readable, wins over the flag: {text}"
    );

    let journal = dir.path().join("journal");
    let out = lifecycle()
        .args(["run", "--run-for", "1", "--metrics-addr", "127.0.0.1:0"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--journal")
        .arg(&journal)
        .args(&clock)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("preflight failed, not taking over"), "{err}");
    assert!(err.contains("capi-release"), "{err}");
    assert!(!journal.exists(), "a refused start writes nothing");

    // This controller's hook in a MachineSet's template: CAPI would put it back after release.
    let machine_sets = api(
        &kubeconfig,
        GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachineSet"),
        "machinesets",
        "default",
    )
    .await;
    let ms: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {"name": "ms-hooked", "namespace": "default"},
        "spec": {"clusterName": "c1", "selector": {"matchLabels": {"pool": "a"}},
            "template": {
                "metadata": {"labels": {"pool": "a"}, "annotations": {
                    engine::ownership::OWN_PRE_DRAIN_HOOK: "lifecycle"}},
                "spec": {"clusterName": "c1",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "t"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "t"}}}}
    }))
    .unwrap();
    machine_sets
        .create(&PostParams::default(), &ms)
        .await
        .unwrap();
    let (_, text) = preflight(
        &kubeconfig,
        &["--capi-version", "v1.12.0", "--mode", "shadow"],
    );
    let templates = line(&text, "template-hooks");
    assert!(templates.starts_with("warn"), "{text}");
    assert!(
        templates.contains("MachineSet default/ms-hooked"),
        "{templates}"
    );
    assert!(templates.contains("release"), "{templates}");
}

/// `preflight --service-account` asks SubjectAccessReviews for the controller's ServiceAccount,
/// answered by the RBAC stored in the cluster: nothing before the manifests are applied, every
/// permission a takeover needs once the shipped takeover overlay is, and exactly the one taken
/// out of its ClusterRole after that.
#[test]
fn preflight_checks_the_service_accounts_grants_by_the_shipped_rbac() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, _) = serve(dir.path(), "takeover-worker-deletion", 1);
    let account = [
        "--mode",
        "takeover",
        "--service-account",
        "lifecycle-system/lifecycle-controller",
    ];
    let (code, text) = preflight(&kubeconfig, &account);
    assert_eq!(code, 1, "{text}");
    assert!(
        line(&text, "rbac").starts_with(
            "FAIL  rbac              not granted to the ServiceAccount lifecycle-system/lifecycle-controller: "
        ),
        "{text}"
    );

    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
    // The fake server's OpenAPI does not describe the RBAC kinds: kubectl's schema check would
    // look for them among CRDs, which it does not serve.
    for overlay in ["journal", "takeover"] {
        let dir = format!("{deploy}/{overlay}");
        common::kubectl_at(&kubeconfig, &["apply", "--validate=false", "-k", &dir]);
    }
    let (code, text) = preflight(&kubeconfig, &account);
    assert_eq!(code, 0, "{text}");
    assert!(
        line(&text, "rbac").contains(
            "permissions --mode takeover needs are granted to the ServiceAccount lifecycle-system/lifecycle-controller"
        ),
        "{text}"
    );

    // lifecycle-manager-core's rule on machines without `patch`.
    let rules = common::kubectl_at(
        &kubeconfig,
        &[
            "get",
            "clusterrole",
            "lifecycle-manager-core",
            "-o",
            "jsonpath={.rules[3].resources}",
        ],
    );
    assert_eq!(rules, r#"["machines"]"#);
    common::kubectl_at(
        &kubeconfig,
        &[
            "patch",
            "clusterrole",
            "lifecycle-manager-core",
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/rules/3/verbs", "value": ["get", "list", "watch", "create", "delete"]}]"#,
        ],
    );
    let (code, text) = preflight(&kubeconfig, &account);
    assert_eq!(code, 1, "{text}");
    assert!(
        line(&text, "rbac").starts_with(
            "FAIL  rbac              not granted to the ServiceAccount lifecycle-system/lifecycle-controller: patch machines (cluster.x-k8s.io)\n"
        ),
        "exactly that permission: {text}"
    );
    // The caller (the admin) may still: without --service-account its own grants are asked.
    let (code, text) = preflight(&kubeconfig, &["--mode", "takeover"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        line(&text, "rbac").contains("granted to the caller"),
        "{text}"
    );
}

/// `lifecycle run --mode alone` and `lifecycle preflight --mode alone` run the same checks
/// (both call `adapters::preflight::examine`): the names `run` logs at start are the names
/// `preflight` prints.
#[test]
fn run_and_preflight_run_the_same_checks() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "deletion-order-of-actions", 1);
    let (code, err) = common::run_controller(&kubeconfig, &dir.path().join("j"), &clock, 0, &[]);
    assert_eq!(code, 0, "{err}");
    let logged: std::collections::BTreeSet<&str> = err
        .split("check=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    let out = lifecycle()
        .args([
            "preflight",
            "--mode",
            "alone",
            "--format",
            "json",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let printed: std::collections::BTreeSet<&str> = printed["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(logged, printed, "{err}");
    assert!(printed.contains("capi-manager") && printed.contains("rbac"));
}
