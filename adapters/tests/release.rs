//! `lifecycle run --mode takeover` hooks the MachineSet's worker Machine (and not the control
//! plane's) over HTTP; `lifecycle release` removes exactly those hooks and nothing else; a
//! controller killed mid-takeover leaves the Machine waiting at its hooks until a release hands
//! it back to CAPI's manager, which finishes it.

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

/// The value of the unlabelled metric `name` served on `port`; `None` when nothing answers
/// there (what Prometheus sees of a process that is gone).
fn metric(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let mut page = String::new();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .and_then(|()| s.read_to_string(&mut page))
        .ok()?;
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Deleting Machines at this controller's hooks that this process finishes.
const HELD: &str = "lifecycle_hooked_machines{deleting=\"true\",served=\"true\"}";
/// Deleting Machines in this controller's own drain.
const OWN_DRAIN: &str = "lifecycle_machines_deleting{phase=\"DrainingNode\"}";

/// The reason of Machine `name`'s condition `type_`, if it has one.
async fn reason(api: &Api<DynamicObject>, name: &str, type_: &str) -> Option<String> {
    let machine = api.get_opt(name).await.unwrap()?;
    machine.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["reason"].as_str())
        .map(str::to_string)
}

/// The controller killed mid-takeover: Cluster API's manager (the simulator's model of it) waits
/// at this controller's hooks while no controller runs (what `LifecycleDeletionHeldByNobody`
/// alerts on, from kube-state-metrics: this controller's own gauges are gone with it). While it
/// runs, its gauges count the Machine under its own phase, `DrainingNode`, not CAPI's
/// `WaitingForPreDrainHook`, and its own hook as nobody else's holding the deletion.
/// `lifecycle release --all` hands the Machine back, and CAPI's manager finishes the deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_takeover_the_machine_waits_at_the_hooks_until_release_then_capi_finishes() {
    let dir = tempfile::tempdir().unwrap();
    // m1 is deleted 1 min in (12 s here); its pods take 30 s to shut down (6 s here), the
    // window in which the controller is killed.
    const SPEED: u32 = 5;
    let (_server, kubeconfig, clock) =
        serve(dir.path(), "takeover-controller-killed-mid-drain", SPEED);
    assert!(clock.join(" ").contains("--mode takeover"), "{clock:?}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut controller = common::Child(
        lifecycle()
            .args(["run", "--metrics-addr", &format!("127.0.0.1:{port}")])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--journal")
            .arg(dir.path().join("journal"))
            .args(&clock)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let api = machines(&kubeconfig).await;
    let started = std::time::Instant::now();
    // Mid-drain, and counted by the gauge (`/metrics` reads the engine once a second).
    while reason(&api, "m1", "LifecycleDeleting").await.as_deref() != Some("DrainingNode")
        || metric(port, HELD) != Some(1.0)
        || metric(port, OWN_DRAIN) != Some(1.0)
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "never mid-drain and counted: {:?}, held {:?}, draining {:?}",
            reason(&api, "m1", "LifecycleDeleting").await,
            metric(port, HELD),
            metric(port, OWN_DRAIN)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        reason(&api, "m1", "LifecycleDeleting").await.as_deref(),
        Some("DrainingNode"),
        "killed mid-drain"
    );
    assert_eq!(
        metric(
            port,
            "lifecycle_machines_deleting{phase=\"WaitingForPreDrainHook\"}"
        ),
        Some(0.0),
        "CAPI's reason is not this controller's phase"
    );
    assert_eq!(
        metric(
            port,
            "lifecycle_hooks_waiting{stage=\"pre-drain\",hook=\"lifecycle\"}"
        ),
        None,
        "its own hook is not someone else's holding the deletion"
    );
    controller.0.kill().unwrap();
    controller.0.wait().unwrap();
    assert_eq!(metric(port, HELD), None, "nothing serves the gauges now");

    // A minute later (simulated) nothing moved: CAPI's manager waits at the pre-drain hook.
    tokio::time::sleep(std::time::Duration::from_secs(60 / u64::from(SPEED))).await;
    let hooks = annotations(&api, "m1").await;
    assert!(
        hooks.contains(&PRE_DRAIN.to_string()) && hooks.contains(&PRE_TERMINATE.to_string()),
        "{hooks:?}"
    );
    assert_eq!(
        reason(&api, "m1", "Deleting").await.as_deref(),
        Some("WaitingForPreDrainHook")
    );

    let (code, stdout, stderr) = release(&kubeconfig, &["--all"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("default/m1: removed {PRE_DRAIN}, {PRE_TERMINATE}")),
        "{stdout}"
    );
    let released = std::time::Instant::now();
    while api.get_opt("m1").await.unwrap().is_some() {
        assert!(
            released.elapsed() < std::time::Duration::from_secs(60),
            "CAPI's manager did not finish: {:?}",
            reason(&api, "m1", "Deleting").await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    println!(
        "m1 gone {:.1} s after the release ({:.0} s simulated)",
        released.elapsed().as_secs_f64(),
        released.elapsed().as_secs_f64() * f64::from(SPEED)
    );
}
