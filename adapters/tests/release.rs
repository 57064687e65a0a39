//! `lifecycle run --mode takeover` hooks the MachineSet's worker Machine (and not the control
//! plane's) over HTTP; `lifecycle release` removes exactly those hooks and nothing else.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use std::path::Path;

mod common;
use common::{lifecycle, serve};

const PRE_DRAIN: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io/lifecycle";
const PRE_TERMINATE: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/lifecycle";
const OTHERS: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup";

async fn machines(kubeconfig: &Path) -> Api<DynamicObject> {
    let client = common::client(kubeconfig).await;
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    Api::namespaced_with(
        client,
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "machines"),
    )
}

async fn annotations(api: &Api<DynamicObject>, name: &str) -> Vec<String> {
    let m = api.get(name).await.unwrap();
    m.metadata
        .annotations
        .unwrap_or_default()
        .into_keys()
        .collect()
}

fn release(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let out = lifecycle()
        .arg("release")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_hooks_the_worker_and_release_removes_only_its_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "takeover-worker-deletion", 1);
    assert!(clock.join(" ").contains("--mode takeover"), "{clock:?}");
    let api = machines(&kubeconfig).await;
    // A third party's hook, which release must leave alone.
    api.patch(
        "m1",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {OTHERS: "backup"}}})),
    )
    .await
    .unwrap();
    let out = lifecycle()
        .args(["run", "--run-for", "2", "--metrics-addr", "127.0.0.1:0"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--journal")
        .arg(dir.path().join("journal"))
        .args(&clock)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m1 = annotations(&api, "m1").await;
    assert!(
        m1.contains(&PRE_DRAIN.to_string()) && m1.contains(&PRE_TERMINATE.to_string()),
        "{m1:?}"
    );
    let cp = annotations(&api, "cp-1").await;
    assert!(!cp.iter().any(|a| a.ends_with("/lifecycle")), "{cp:?}");

    let (code, stdout, stderr) = release(&kubeconfig, &["--all", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("default/m1: would remove"), "{stdout}");
    assert_eq!(
        annotations(&api, "m1").await,
        m1,
        "a dry run changes nothing"
    );

    // What a stopped takeover left: its own condition telling a drain under way.
    let left = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        {"type": "LifecycleDeleting", "status": "True", "reason": "DrainingNode",
         "message": "draining", "lastTransitionTime": "2024-01-01T00:00:00Z"},
    ]}});
    api.patch_status("m1", &PatchParams::default(), &Patch::Merge(&left))
        .await
        .unwrap();

    let (code, stdout, stderr) = release(&kubeconfig, &["default/m1"]);
    assert_eq!(code, 0, "{stderr}");
    let conditions = api.get("m1").await.unwrap().data["status"]["conditions"].clone();
    let of = |t: &str| {
        conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
            .unwrap_or_else(|| panic!("no {t} in {conditions}"))
    };
    let own = of("LifecycleDeleting");
    assert_eq!(
        (&own["status"], &own["reason"]),
        (&"False".into(), &"ReleasedToClusterAPI".into()),
        "{conditions}"
    );
    assert_eq!(
        of("Ready")["status"],
        "True",
        "others' conditions as they were"
    );
    assert!(
        stdout.contains(&format!("default/m1: removed {PRE_DRAIN}, {PRE_TERMINATE}")),
        "{stdout}"
    );
    assert_eq!(annotations(&api, "m1").await, [OTHERS.to_string()]);

    let (code, stdout, _) = release(&kubeconfig, &["--all"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("nothing to release"), "{stdout}");

    for (args, said) in [
        (&[][..], "pass --all"),
        (&["m1"][..], "is not NAMESPACE/NAME"),
        (&["default/nope"][..], "does not exist"),
    ] {
        let (code, _, stderr) = release(&kubeconfig, args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

fn takeover_run(
    kubeconfig: &Path,
    journal: &Path,
    clock: &[String],
    extra: &[&str],
) -> (i32, String) {
    common::run_controller(kubeconfig, journal, clock, 2, extra)
}

/// `--own-machines` chooses the Machines takeover hooks (a control plane's never), a narrower
/// choice on the next start takes the hooks off those it no longer owns, and a selector that
/// cannot be used, or one without takeover, is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_machines_chooses_what_takeover_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, clock) = serve(dir.path(), "takeover-worker-deletion", 1);
    let api = machines(&kubeconfig).await;
    let blue = serde_json::json!({"metadata": {"labels": {"pool": "blue"}}});
    for name in ["m1", "cp-1"] {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&blue))
            .await
            .unwrap();
    }
    let journal = dir.path().join("journal");
    let hooked = |a: &[String]| a.iter().any(|a| a.ends_with("/lifecycle"));

    let (code, err) = takeover_run(
        &kubeconfig,
        &journal,
        &clock,
        &["--own-machines", "pool=blue"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(hooked(&annotations(&api, "m1").await));
    assert!(
        !hooked(&annotations(&api, "cp-1").await),
        "a control plane's, selected or not"
    );

    let (code, err) = takeover_run(
        &kubeconfig,
        &journal,
        &clock,
        &["--own-machines", "pool=green"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !hooked(&annotations(&api, "m1").await),
        "no longer selected: its hooks are taken off"
    );

    let refused = dir.path().join("refused");
    for (extra, says) in [
        (
            &["--own-machines", ""][..],
            "an empty selector would own every Machine",
        ),
        (&["--own-machines", "pool in blue"][..], "a set is written"),
        (
            &["--mode", "alone", "--own-machines", "pool=blue"][..],
            "means nothing with --mode alone",
        ),
    ] {
        let clock: Vec<String> = clock
            .iter()
            .filter(|a| !a.starts_with("--mode") && *a != "takeover")
            .cloned()
            .collect();
        let (code, err) = takeover_run(&kubeconfig, &refused, &clock, extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(
            !refused.exists(),
            "{extra:?}: a refused start writes nothing"
        );
    }
}

fn adopt(kubeconfig: &Path, args: &[&str]) -> (i32, String) {
    let out = lifecycle()
        .arg("adopt")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `lifecycle adopt mhc` pauses an MHC for CAPI with this controller's marker; one paused by
/// someone else is refused; `release --all` gives every adopted one back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_pauses_with_the_marker_and_release_all_gives_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, _) = serve(dir.path(), "takeover-adopted-mhc", 1);
    let client = common::client(&kubeconfig).await;
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachineHealthCheck");
    let mhcs: Api<DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "machinehealthchecks"),
    );
    let paused = "cluster.x-k8s.io/paused";
    let marker = "lifecycle.x-k8s.io/adopted";

    let (code, out) = adopt(&kubeconfig, &["mhc", "default/md-1-unhealthy"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(annotations(&mhcs, "md-1-unhealthy").await, [paused, marker]);
    let (code, out) = adopt(&kubeconfig, &["mhc", "default/md-0-unhealthy"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("adopted already"), "{out}");

    let (code, stdout, _) = release(&kubeconfig, &["--all", "--dry-run"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("MachineHealthCheck default/md-0-unhealthy: would give back")
            && stdout.contains("MachineHealthCheck default/md-1-unhealthy: would give back"),
        "{stdout}"
    );
    let (code, stdout, stderr) = release(&kubeconfig, &["--all"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("given back"), "{stdout}");
    for name in ["md-0-unhealthy", "md-1-unhealthy"] {
        assert!(annotations(&mhcs, name).await.is_empty(), "{name}");
    }

    // Paused by someone else: it stays theirs.
    let pause = serde_json::json!({"metadata": {"annotations": {paused: ""}}});
    mhcs.patch(
        "md-0-unhealthy",
        &PatchParams::default(),
        &Patch::Merge(&pause),
    )
    .await
    .unwrap();
    let (code, out) = adopt(&kubeconfig, &["mhc", "default/md-0-unhealthy"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("paused by someone else"), "{out}");
    assert_eq!(annotations(&mhcs, "md-0-unhealthy").await, [paused]);
    let (code, out) = adopt(&kubeconfig, &["pool", "default/nope"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("does not exist"), "{out}");
}
