//! `lifecycle run --mode takeover` hooks the MachineSet's worker Machine (and not the control
//! plane's) over HTTP; `lifecycle release` removes exactly those hooks and nothing else; a
//! controller killed mid-takeover leaves the Machine waiting at its hooks until a release hands
//! it back to CAPI's manager, which finishes it.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
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
    let held_by = api.get("m1").await.unwrap().metadata.annotations;
    assert_eq!(
        held_by
            .as_ref()
            .and_then(|a| a.get(engine::ownership::HOOKS_HELD_BY_ANNOTATION))
            .map(String::as_str),
        Some(engine::ownership::hooks_held_by("default", "m1").as_str()),
        "`kubectl describe machine` names the holder and the command that lets it go"
    );
    let cp = annotations(&api, "cp-1").await;
    assert!(!cp.iter().any(|a| a.ends_with("/lifecycle")), "{cp:?}");
    assert!(
        !cp.iter()
            .any(|a| a == engine::ownership::HOOKS_HELD_BY_ANNOTATION),
        "never on a Machine without the hooks: {cp:?}"
    );

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
    assert_eq!(
        annotations(&api, "m1").await,
        [OTHERS.to_string()],
        "the hooks and the annotation naming their holder removed, the third party's hook left"
    );

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

/// This controller's Lease as a leader in `mode` writes it, renewed `ago` seconds before now.
async fn our_lease(api: &Api<Lease>, mode: &str, ago: i64) {
    let renewed = adapters::clock::wall_now().as_millis() - 1000 * ago;
    let time = k8s_openapi::jiff::Timestamp::from_millisecond(renewed).unwrap();
    let name = adapters::kube::lease::DEFAULT_LEASE_NAME;
    let mut lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name,
            "annotations": {adapters::kube::lease::MODE_ANNOTATION: mode}},
        "spec": {"holderIdentity": "lifecycle-0_1", "leaseDurationSeconds": 15,
            "renewTime": MicroTime(time)},
    }))
    .unwrap();
    match api.get_opt(name).await.unwrap() {
        Some(old) => {
            lease.metadata.resource_version = old.metadata.resource_version;
            api.replace(name, &PostParams::default(), &lease)
                .await
                .unwrap();
        }
        None => {
            api.create(&PostParams::default(), &lease).await.unwrap();
        }
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

    // Nobody leads, then a shadow leader, then a takeover leader gone quiet: adopting would
    // leave the MHC to nobody, so it is refused and the MHC left as it was.
    let leases: Api<Lease> = Api::namespaced(common::client(&kubeconfig).await, "lifecycle-system");
    for leader in [None, Some(("shadow", 0)), Some(("takeover", 45))] {
        if let Some((mode, ago)) = leader {
            our_lease(&leases, mode, ago).await;
        }
        let (code, out) = adopt(&kubeconfig, &["mhc", "default/md-1-unhealthy"]);
        assert_eq!(code, 3, "{leader:?}: {out}");
        assert!(out.contains("no takeover controller leads"), "{out}");
        assert!(annotations(&mhcs, "md-1-unhealthy").await.is_empty());
    }
    // Said loudly, the operator may go on without one.
    let (code, out) = adopt(
        &kubeconfig,
        &["mhc", "default/md-1-unhealthy", "--without-takeover-leader"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("WARNING") && out.contains("adopting anyway"),
        "{out}"
    );
    assert_eq!(annotations(&mhcs, "md-1-unhealthy").await, [paused, marker]);
    let (code, out) = adopt(
        &kubeconfig,
        &["mhc", "default/md-1-unhealthy", "--give-back"],
    );
    assert_eq!(code, 0, "giving back needs no leader: {out}");
    assert!(annotations(&mhcs, "md-1-unhealthy").await.is_empty());

    our_lease(&leases, "takeover", 3).await;
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

/// `lifecycle run` against `kubeconfig` with its journal in `dir` and `/metrics` on a free port.
fn controller_with_metrics(
    kubeconfig: &Path,
    dir: &Path,
    clock: &[String],
) -> (common::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = common::Child(
        lifecycle()
            .args(["run", "--metrics-addr", &format!("127.0.0.1:{port}")])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--journal")
            .arg(dir.join("journal"))
            .args(clock)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    (child, port)
}

/// Patches the image of CAPI's manager Deployment to name `release`, as an upgrade does.
async fn upgrade_capi(kubeconfig: &Path, release: &str) {
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        common::client(kubeconfig).await,
        "capi-system",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
    );
    let image = serde_json::json!({"spec": {"template": {"spec": {"containers": [{
        "name": "manager",
        "image": format!("registry.k8s.io/cluster-api/cluster-api-controller:{release}")}]}}}});
    deployments
        .patch(
            "capi-controller-manager",
            &PatchParams::default(),
            &Patch::Strategic(&image),
        )
        .await
        .unwrap();
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
    let (mut controller, port) = controller_with_metrics(&kubeconfig, dir.path(), &clock);
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

    // Whoever looks finds the Machine, that nobody serves it, and what lets it go.
    let out = lifecycle()
        .args(["preflight", "--mode", "shadow", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let own = text
        .lines()
        .skip_while(|l| !l.contains("own-hooks"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    for says in [
        "warn",
        "1 deleting Machine(s) wait at its hooks: Machine default/m1",
        "nobody holds this controller's Lease",
        "lifecycle release --all",
    ] {
        assert!(own.contains(says), "{says}: {text}");
    }
    // CAPI upgraded past what this build knows: a takeover start is refused, and says what it
    // leaves waiting and how to let it go.
    upgrade_capi(&kubeconfig, "v1.15.0").await;
    let (code, err) =
        common::run_controller(&kubeconfig, &dir.path().join("journal"), &clock, 0, &[]);
    assert_eq!(code, 3, "{err}");
    for says in [
        "preflight failed, not taking over",
        "v1.15.0",
        "Meanwhile nothing serves what this controller holds: 1 deleting Machine(s) wait at its hooks: Machine default/m1",
        "`lifecycle release --all`",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }

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

/// The whole `/metrics` page served on `port` (empty when nothing answers).
fn page(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let mut page = String::new();
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .and_then(|()| s.read_to_string(&mut page));
    page
}

/// Waits up to `within` (real time) for `done`, describing what it waited for with `what`.
async fn until<F, Fut>(within: std::time::Duration, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while !done().await {
        assert!(started.elapsed() < within, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// CAPI's manager upgraded under a running takeover controller, mid-drain: a release it does
/// not know is served and warned about and changes nothing; one it knows it cannot run beside
/// makes it finish the deletion it holds (never handed back mid-drain) and take its hooks off
/// every other Machine, so CAPI's manager deletes those alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capi_upgrade_mid_drain_is_followed_at_runtime() {
    let dir = tempfile::tempdir().unwrap();
    const SPEED: u32 = 5;
    let (_server, kubeconfig, clock) =
        serve(dir.path(), "takeover-controller-killed-mid-drain", SPEED);
    let (_controller, port) = controller_with_metrics(&kubeconfig, dir.path(), &clock);
    let api = machines(&kubeconfig).await;
    let m2: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "m2", "namespace": "default",
            "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                "name": "ms1", "uid": "u-ms1", "controller": true}]},
        "spec": {"clusterName": "c1",
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "m2"}},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "m2"}},
    }))
    .unwrap();
    api.create(&kube::api::PostParams::default(), &m2)
        .await
        .unwrap();
    let minute = std::time::Duration::from_secs(60);
    until(minute, "m2 hooked", || async {
        annotations(&api, "m2")
            .await
            .contains(&PRE_DRAIN.to_string())
    })
    .await;
    until(minute, "the supported release served", || async {
        page(port).contains(r#"lifecycle_capi_release{release="v1.12.0",support="supported"} 1"#)
    })
    .await;
    until(minute, "m1 mid-drain", || async {
        reason(&api, "m1", "LifecycleDeleting").await.as_deref() == Some("DrainingNode")
    })
    .await;

    upgrade_capi(&kubeconfig, "v1.15.0").await;
    until(minute, "the unknown release served", || async {
        page(port).contains(r#"lifecycle_capi_release{release="v1.15.0",support="unknown"} 1"#)
    })
    .await;
    assert!(
        annotations(&api, "m2")
            .await
            .contains(&PRE_DRAIN.to_string()),
        "an unknown release keeps what it holds"
    );

    upgrade_capi(&kubeconfig, "v1.10.0").await;
    until(minute, "the unsupported release served", || async {
        page(port).contains(r#"lifecycle_capi_release{release="v1.10.0",support="unsupported"} 1"#)
    })
    .await;
    until(minute, "m2 handed back", || async {
        !annotations(&api, "m2")
            .await
            .iter()
            .any(|a| a == PRE_DRAIN || a == PRE_TERMINATE)
    })
    .await;
    until(
        minute,
        "m1's deletion finished and CAPI's manager removed it",
        || async { api.get_opt("m1").await.unwrap().is_none() },
    )
    .await;
}

/// What `clusterctl move` does to one object: the target gets it whole (annotations such as
/// hooks, the pause and the adoption marker as they are; status is not written), then the
/// source's annotations are replaced by `delete-for-move`, its finalizers stripped, and it is
/// deleted.
async fn move_object(from: &Api<DynamicObject>, to: &Api<DynamicObject>, name: &str) {
    let mut object = from.get(name).await.unwrap();
    let mut copy = object.clone();
    copy.metadata.uid = None;
    copy.metadata.resource_version = None;
    copy.metadata.creation_timestamp = None;
    copy.metadata.managed_fields = None;
    if let Some(data) = copy.data.as_object_mut() {
        data.remove("status");
    }
    to.create(&kube::api::PostParams::default(), &copy)
        .await
        .unwrap();
    object.metadata.annotations = Some(
        [(
            "clusterctl.cluster.x-k8s.io/delete-for-move".to_string(),
            String::new(),
        )]
        .into(),
    );
    object.metadata.finalizers = None;
    object.metadata.managed_fields = None;
    from.replace(name, &kube::api::PostParams::default(), &object)
        .await
        .unwrap();
    from.delete(name, &Default::default()).await.unwrap();
}

fn own_hooks_line(kubeconfig: &Path) -> String {
    let out = lifecycle()
        .args(["preflight", "--mode", "shadow", "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip_while(|l| !l.contains("own-hooks"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `clusterctl move` carries this controller's hooks and adoptions to the target cluster as
/// they are, where no controller serves them: `lifecycle preflight` there finds them, says
/// nobody serves them and names the command that lets them go; the source keeps nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusterctl_move_carries_hooks_and_adoptions_that_preflight_finds_unserved() {
    let source_dir = tempfile::tempdir().unwrap();
    let (_source, source, _) = serve(source_dir.path(), "takeover-adopted-mhc", 1);
    let target_dir = tempfile::tempdir().unwrap();
    let empty = target_dir.path().join("empty.yaml");
    std::fs::write(
        &empty,
        "name: move-target\nworld: {capiManager: true}\nmanagement: []\n",
    )
    .unwrap();
    let (_target, target, _) = common::serve_file(target_dir.path(), empty.to_str().unwrap(), 1);

    let (from, to) = (machines(&source).await, machines(&target).await);
    // As a takeover controller left them: its hooks on the workers.
    let hooks = serde_json::json!({"metadata": {"annotations": {PRE_DRAIN: "lifecycle", PRE_TERMINATE: "lifecycle"}}});
    for name in ["w1", "w2"] {
        from.patch(name, &PatchParams::default(), &Patch::Merge(&hooks))
            .await
            .unwrap();
    }
    let mhc = |kubeconfig: &Path| {
        let kubeconfig = kubeconfig.to_path_buf();
        async move {
            let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachineHealthCheck");
            Api::<DynamicObject>::namespaced_with(
                common::client(&kubeconfig).await,
                "default",
                &ApiResource::from_gvk_with_plural(&gvk, "machinehealthchecks"),
            )
        }
    };
    let source_line = own_hooks_line(&source);
    assert!(
        source_line
            .contains("2 more Machine(s) carry them: Machine default/w1, Machine default/w2")
            && source_line.contains("adopted: MachineHealthCheck default/md-0-unhealthy"),
        "{source_line}"
    );

    for name in ["w1", "w2"] {
        move_object(&from, &to, name).await;
    }
    move_object(&mhc(&source).await, &mhc(&target).await, "md-0-unhealthy").await;

    let moved = annotations(&to, "w1").await;
    assert!(
        moved.contains(&PRE_DRAIN.to_string()) && moved.contains(&PRE_TERMINATE.to_string()),
        "the hooks travel as they are: {moved:?}"
    );
    let target_line = own_hooks_line(&target);
    for says in [
        "warn",
        "2 more Machine(s) carry them: Machine default/w1, Machine default/w2",
        "adopted: MachineHealthCheck default/md-0-unhealthy",
        "nobody holds this controller's Lease",
        "lifecycle release --all",
    ] {
        assert!(target_line.contains(says), "{says}: {target_line}");
    }
    let source_line = own_hooks_line(&source);
    assert!(
        source_line.contains("no Machine carries this controller's hooks and nothing is adopted"),
        "{source_line}"
    );
}
