//! The fake API server driven by unmodified clients: kubectl 1.32 (on PATH), kubectl 1.20
//! (Debian's kubernetes-client, unpacked by `.ci/install-clients`) and the Python `kubernetes`
//! client (in the virtualenv `.ci/install-clients` makes). A missing client fails the test
//! with the command that installs it; nothing here skips.
//!
//! kubectl 1.20 reads `/openapi/v2` (protobuf) for explain, validation and `--dry-run=server`.

mod common;

use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
use common::{clients_dir, required_tool};
use serde_json::{Value, json};
use sim::api::{ClusterStore, ObjKey};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a single client call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

const INSTALL: &str = ".ci/install-clients (run by the tests themselves) did not install it";

/// kubectl 1.32: `$KUBECTL_1_32`, else `kubectl` on PATH, which must be 1.32.
fn kubectl_132() -> PathBuf {
    required_tool(
        "KUBECTL_1_32",
        PathBuf::from("kubectl"),
        &["version", "--client"],
        "v1.32.",
        "it ships with this machine kind",
    )
}

/// kubectl 1.20: `$KUBECTL_1_20`, else where `.ci/install-clients` unpacks it.
fn kubectl_120() -> PathBuf {
    required_tool(
        "KUBECTL_1_20",
        clients_dir().join("kubectl-1.20/usr/bin/kubectl"),
        &["version", "--client"],
        "v1.20.",
        INSTALL,
    )
}

/// The Python with the `kubernetes` package: `$LIFECYCLE_PYTHON`, else the virtualenv.
fn python() -> PathBuf {
    let path = std::env::var_os("LIFECYCLE_PYTHON")
        .map_or_else(|| clients_dir().join("py/bin/python"), PathBuf::from);
    let ok = Command::new(&path)
        .args(["-c", "import kubernetes"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python with the kubernetes package is required at {}: {INSTALL}",
        path.display()
    );
    path
}

/// Runs a command with a time limit; returns (success, stdout, stderr).
fn run(mut cmd: Command) -> (bool, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the client starts");
    let started = Instant::now();
    while child.try_wait().expect("waiting for the client").is_none() {
        if started.elapsed() > CALL_TIMEOUT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("client output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A v1beta2 Machine spec the CRD schema accepts.
fn machine_spec() -> Value {
    json!({"clusterName": "c1", "bootstrap": {"dataSecretName": "boot"},
           "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                 "kind": "DockerMachine", "name": "d1"}})
}

fn world() -> ClusterStore {
    let now = adapters::clock::wall_now();
    let mut store = ClusterStore::new("t");
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
               "spec": {"unschedulable": true},
               "status": {"conditions": [{"type": "Ready", "status": "True"}],
                          "nodeInfo": {"kubeletVersion": "v1.32.0", "kubeProxyVersion": "v1.32.0",
                                       "architecture": "amd64", "bootID": "b", "machineID": "m",
                                       "systemUUID": "s", "containerRuntimeVersion": "containerd://2.0.0",
                                       "kernelVersion": "6.1.0", "operatingSystem": "linux",
                                       "osImage": "Debian GNU/Linux 12"}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "app"},
               "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Running",
                          "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2}]}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web", "namespace": "app"},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
               "status": {"disruptionsAllowed": 0}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": "m1", "namespace": "default",
                            "finalizers": ["machine.cluster.x-k8s.io"]},
               "spec": machine_spec(), "status": {"phase": "Running", "nodeRef": {"name": "n1"}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
               "metadata": {"name": "mp", "namespace": "default"},
               "spec": {"clusterName": "c1", "replicas": 2, "template": {"spec": machine_spec()}}}),
    ];
    for o in objects {
        store.create(o, now).unwrap();
    }
    store
}

/// A served world and a kubeconfig for it, in a temp dir that also holds kubectl's cache.
struct Served {
    server: ApiServer,
    dir: tempfile::TempDir,
}

impl Served {
    async fn start() -> Served {
        let server = ApiServer::start(
            SharedCluster::new(world()),
            "127.0.0.1:0".parse().unwrap(),
            // No fake controllers: a test that compares resourceVersions sees only its writes.
            ServerOptions {
                controllers_interval: None,
                ..ServerOptions::default()
            },
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), server.kubeconfig("fake")).unwrap();
        Served { server, dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A kubectl command against this server with its own cache dir.
    fn kubectl(&self, binary: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary);
        cmd.arg("--kubeconfig")
            .arg(self.path("config"))
            .arg(format!("--cache-dir={}", self.path("cache").display()))
            .arg("--request-timeout=30s")
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", self.dir.path());
        cmd
    }

    async fn k(&self, binary: &Path, args: &[&str]) -> (bool, String, String) {
        let cmd = self.kubectl(binary, args);
        tokio::task::spawn_blocking(move || run(cmd)).await.unwrap()
    }

    async fn k_with_editor(
        &self,
        binary: &Path,
        args: &[&str],
        editor: &Path,
    ) -> (bool, String, String) {
        let mut cmd = self.kubectl(binary, args);
        cmd.env("KUBE_EDITOR", editor).env_remove("EDITOR");
        tokio::task::spawn_blocking(move || run(cmd)).await.unwrap()
    }

    fn object(&self, group: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.server.cluster().read(|s| {
            s.store
                .get(&ObjKey::new(group, kind, namespace, name))
                .cloned()
        })
    }

    fn machine(&self, name: &str) -> Option<Value> {
        self.object("cluster.x-k8s.io", "Machine", "default", name)
    }

    fn resource_version(&self) -> u64 {
        self.server.cluster().read(|s| s.store.resource_version())
    }
}

fn machine_yaml(name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  clusterName: c1\n  bootstrap: {{dataSecretName: boot}}\n  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: DockerMachine, name: d1}}\n{extra_spec}"
    )
}

/// An editor script for `kubectl edit`: runs `sed -i EXPR` on the file the first time it is
/// called, and leaves it alone after (so a refused edit ends the session).
fn editor(served: &Served, name: &str, sed: &str) -> PathBuf {
    let marker = served.path(&format!("{name}.ran"));
    let script = format!(
        "#!/bin/sh\nif [ -e '{m}' ]; then exit 0; fi\ntouch '{m}'\nsed -i '{sed}' \"$1\"\n",
        m = marker.display()
    );
    let p = served.write(name, &script);
    let mut perms = std::fs::metadata(&p).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&p, perms).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_132_explain_apply_edit_and_diff_validate_against_the_crds() {
    let k = kubectl_132();
    let s = Served::start().await;

    let (ok, out, err) = s.k(&k, &["explain", "machine.spec.deletion"]).await;
    assert!(ok, "explain: {err}");
    assert!(
        out.contains("KIND:       Machine") && out.contains("nodeDrainTimeoutSeconds"),
        "{out}"
    );
    let (ok, out, err) = s.k(&k, &["explain", "pods.spec"]).await;
    assert!(ok && out.contains("nodeName"), "explain pods: {out}{err}");

    // Client-side apply: create, then nothing to change.
    let new = s.write("m-new.yaml", &machine_yaml("m-new", ""));
    let (ok, out, err) = s.k(&k, &["apply", "-f", new.to_str().unwrap()]).await;
    assert!(ok, "apply: {err}");
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io/m-new created");
    let (ok, out, _) = s.k(&k, &["apply", "-f", new.to_str().unwrap()]).await;
    assert!(ok);
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io/m-new unchanged");

    // Validation: an unknown field (kubectl asks for Strict) and a schema violation.
    let unknown = s.write("unknown.yaml", &machine_yaml("m-new", "  colour: blue\n"));
    let (ok, _, err) = s.k(&k, &["apply", "-f", unknown.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        err.contains("strict decoding error: unknown field \"spec.colour\""),
        "{err}"
    );
    let invalid = s.write(
        "invalid.yaml",
        &machine_yaml("m-new", "  deletion: {nodeDrainTimeoutSeconds: -5}\n"),
    );
    let (ok, _, err) = s.k(&k, &["apply", "-f", invalid.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        err.contains("spec.deletion.nodeDrainTimeoutSeconds: Invalid value: -5"),
        "{err}"
    );
    let stored = s.machine("m-new").unwrap();
    assert!(stored["spec"].get("colour").is_none() && stored["spec"].get("deletion").is_none());

    // Server-side apply is not served: a clear 415.
    let (ok, _, err) = s
        .k(&k, &["apply", "--server-side", "-f", new.to_str().unwrap()])
        .await;
    assert!(!ok);
    assert!(
        err.contains("server-side apply (application/apply-patch+yaml) is not supported"),
        "{err}"
    );

    // edit: a refused edit leaves the object alone; an accepted one lands.
    let bad = editor(
        &s,
        "bad-editor",
        "s/^  clusterName: c1/  clusterName: \"\"/",
    );
    let (ok, _, err) = s
        .k_with_editor(&k, &["edit", "machine", "m-new", "-n", "default"], &bad)
        .await;
    assert!(!ok, "the refused edit fails");
    assert!(err.contains("is invalid"), "{err}");
    assert_eq!(s.machine("m-new").unwrap()["spec"]["clusterName"], "c1");
    let good = editor(
        &s,
        "good-editor",
        "s/^  clusterName: c1/  clusterName: c1\\n  providerID: docker:\\/\\/m-new/",
    );
    let (ok, out, err) = s
        .k_with_editor(&k, &["edit", "machine", "m-new", "-n", "default"], &good)
        .await;
    assert!(ok, "edit: {err}");
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io/m-new edited");
    assert_eq!(
        s.machine("m-new").unwrap()["spec"]["providerID"],
        "docker://m-new"
    );

    // diff: shows the change, changes nothing (a dry-run patch and a dry-run create).
    let rv = s.resource_version();
    let changed = s.write(
        "changed.yaml",
        &machine_yaml("m-new", "  providerID: docker://other\n"),
    );
    let (ok, out, err) = s.k(&k, &["diff", "-f", changed.to_str().unwrap()]).await;
    assert!(!ok, "diff exits 1 when there are differences: {err}");
    assert!(out.contains("+  providerID: docker://other"), "{out}");
    let fresh = s.write("fresh.yaml", &machine_yaml("m-diff", ""));
    let (ok, out, err) = s.k(&k, &["diff", "-f", fresh.to_str().unwrap()]).await;
    assert!(!ok, "{err}");
    assert!(out.contains("+  name: m-diff"), "{out}");
    assert_eq!(s.resource_version(), rv, "diff wrote nothing");
    assert!(s.machine("m-diff").is_none());
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_132_server_dry_runs_change_nothing() {
    let k = kubectl_132();
    let s = Served::start().await;
    let rv = s.resource_version();
    let m1 = s.machine("m1").unwrap();
    let new = s.write("m-dry.yaml", &machine_yaml("m-dry", ""));
    let (ok, out, err) = s
        .k(
            &k,
            &["create", "--dry-run=server", "-f", new.to_str().unwrap()],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "machine.cluster.x-k8s.io/m-dry created (server dry run)"
    );
    let (ok, out, err) = s
        .k(
            &k,
            &["label", "--dry-run=server", "machine", "m1", "tier=gold"],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "machine.cluster.x-k8s.io/m1 labeled (server dry run)"
    );
    let (ok, out, err) = s.k(&k, &["delete", "--dry-run=server", "node", "n1"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "node \"n1\" deleted (server dry run)");
    let (ok, _, err) = s
        .k(
            &k,
            &[
                "delete",
                "--dry-run=server",
                "machine",
                "m1",
                "--wait=false",
            ],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(s.resource_version(), rv, "no write happened");
    assert!(s.machine("m-dry").is_none());
    assert_eq!(s.machine("m1").unwrap(), m1);
    assert!(s.object("", "Node", "", "n1").is_some());
    s.server.shutdown().await;
}

/// The column headers and first row of `kubectl get` output.
fn table(out: &str) -> (Vec<String>, Vec<String>) {
    let mut lines = out.lines();
    let split = |l: &str| {
        l.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    (
        split(lines.next().unwrap_or_default()),
        split(lines.next().unwrap_or_default()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_132_get_prints_columns_and_scale_scales() {
    let k = kubectl_132();
    let s = Served::start().await;
    let (ok, out, err) = s.k(&k, &["get", "machines"]).await;
    assert!(ok, "{err}");
    let (head, row) = table(&out);
    assert_eq!(head[..3], ["NAME", "CLUSTER", "NODE NAME"], "{out}");
    assert!(
        head.contains(&"PHASE".to_string()) && head.contains(&"AGE".to_string()),
        "{out}"
    );
    assert_eq!(row[..3], ["m1", "c1", "n1"], "{out}");
    assert!(row.contains(&"Running".to_string()), "{out}");
    let (ok, out, err) = s.k(&k, &["get", "nodes"]).await;
    assert!(ok, "{err}");
    let (head, row) = table(&out);
    assert_eq!(head, ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], "{out}");
    assert_eq!(
        row[..3],
        ["n1", "Ready,SchedulingDisabled", "worker"],
        "{out}"
    );
    assert_eq!(row[4], "v1.32.0");
    let (ok, out, err) = s.k(&k, &["get", "pods", "-n", "app"]).await;
    assert!(ok, "{err}");
    let (head, row) = table(&out);
    assert_eq!(
        head,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    assert_eq!(row[..4], ["web-0", "1/1", "Running", "2"], "{out}");
    let (ok, out, err) = s.k(&k, &["get", "pdb", "-n", "app"]).await;
    assert!(ok, "{err}");
    let (head, row) = table(&out);
    assert_eq!(
        head,
        [
            "NAME",
            "MIN AVAILABLE",
            "MAX UNAVAILABLE",
            "ALLOWED DISRUPTIONS",
            "AGE"
        ],
        "{out}"
    );
    assert_eq!(row[..4], ["web", "1", "N/A", "0"], "{out}");

    // The CRDs' category and short names come through discovery.
    let (ok, out, err) = s.k(&k, &["get", "cluster-api", "-o", "name"]).await;
    assert!(ok, "{err}");
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(
        names,
        [
            "machine.cluster.x-k8s.io/m1",
            "machinepool.cluster.x-k8s.io/mp"
        ],
        "{out}"
    );
    let (ok, out, err) = s.k(&k, &["get", "mhcs", "-A"]).await;
    assert!(
        ok && out.is_empty() && err.contains("No resources found"),
        "{out}{err}"
    );

    let (ok, out, err) = s
        .k(&k, &["scale", "machinepool", "mp", "--replicas=4"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "machinepool.cluster.x-k8s.io/mp scaled");
    let mp = s
        .object("cluster.x-k8s.io", "MachinePool", "default", "mp")
        .unwrap();
    assert_eq!(mp["spec"]["replicas"], 4);
    let (ok, _, err) = s
        .k(
            &k,
            &[
                "scale",
                "machinepool",
                "mp",
                "--current-replicas=3",
                "--replicas=5",
            ],
        )
        .await;
    assert!(
        !ok && err.contains("Expected replicas to be 3, was 4"),
        "{err}"
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_132_renames_bad_names_and_big_bodies_are_refused() {
    let k = kubectl_132();
    let s = Served::start().await;
    let (ok, _, err) = s
        .k(
            &k,
            &[
                "patch",
                "machine",
                "m1",
                "--type=merge",
                "-p",
                r#"{"metadata":{"name":"m2"}}"#,
            ],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("the name of the object (m2) does not match the name on the URL (m1)"),
        "{err}"
    );
    let (ok, _, err) = s
        .k(
            &k,
            &[
                "patch",
                "machine",
                "m1",
                "--type=merge",
                "-p",
                r#"{"kind":"Secret"}"#,
            ],
        )
        .await;
    assert!(!ok && err.contains("BadRequest"), "{err}");
    assert!(s.machine("m1").is_some() && s.machine("m2").is_none());

    for (name, field) in [("Bad_Name", "metadata.name"), ("a..b", "metadata.name")] {
        let f = s.write("bad-name.yaml", &machine_yaml(name, ""));
        let (ok, _, err) = s.k(&k, &["create", "-f", f.to_str().unwrap()]).await;
        assert!(!ok);
        assert!(
            err.contains(&format!("{field}: Invalid value: \"{name}\"")),
            "{err}"
        );
    }
    let ns = s.write(
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: BAD_NS\n",
    );
    let (ok, _, err) = s.k(&k, &["create", "-f", ns.to_str().unwrap()]).await;
    assert!(
        !ok && err.contains("metadata.name: Invalid value: \"BAD_NS\""),
        "{err}"
    );
    // Typed generators (`kubectl create namespace`) send protobuf, which is not served.
    let (ok, _, err) = s.k(&k, &["create", "namespace", "good-ns"]).await;
    assert!(!ok && err.contains("protobuf"), "{err}");

    let big = s.write(
        "big.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n  namespace: default\ndata:\n  blob: {}\n",
            "x".repeat(4 << 20)
        ),
    );
    let (ok, _, err) = s.k(&k, &["create", "-f", big.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        err.contains("RequestEntityTooLarge") || err.contains("larger than"),
        "{err}"
    );
    assert!(s.object("", "ConfigMap", "default", "big").is_none());

    // Removing the last finalizer of a deleting Machine answers with the object after the
    // write (kubectl would say "patched (no change)" if it got the object before).
    let (ok, _, err) = s.k(&k, &["delete", "machine", "m1", "--wait=false"]).await;
    assert!(ok, "{err}");
    let (ok, out, err) = s
        .k(
            &k,
            &[
                "patch",
                "machine",
                "m1",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers/0"}]"#,
            ],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io/m1 patched");
    assert!(s.machine("m1").is_none(), "gone with its last finalizer");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_120_gets_explains_validates_and_dry_runs_with_openapi_v2() {
    let k = kubectl_120();
    let s = Served::start().await;
    let (ok, out, err) = s.k(&k, &["get", "machines"]).await;
    assert!(ok, "{err}");
    let (head, row) = table(&out);
    assert_eq!(head[..2], ["NAME", "CLUSTER"], "{out}");
    assert_eq!(row[..2], ["m1", "c1"], "{out}");
    let (ok, out, err) = s.k(&k, &["get", "nodes"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        table(&out).0,
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{out}"
    );

    // kubectl 1.20 reads /openapi/v2 (protobuf) for explain and client-side validation.
    let (ok, out, err) = s.k(&k, &["explain", "machine.spec"]).await;
    assert!(ok, "explain: {err}");
    assert!(
        out.contains("infrastructureRef") && out.contains("-required-"),
        "{out}"
    );
    let unknown = s.write("unknown.yaml", &machine_yaml("m-old", "  colour: blue\n"));
    let (ok, _, err) = s.k(&k, &["apply", "-f", unknown.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        err.contains("unknown field \"colour\" in io.x-k8s.cluster.v1beta2.Machine.spec"),
        "{err}"
    );
    let new = s.write("m-old.yaml", &machine_yaml("m-old", ""));
    let (ok, out, err) = s.k(&k, &["apply", "-f", new.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "machine.cluster.x-k8s.io/m-old created");
    // Built-in kinds are described in part: fields the subset does not name pass.
    let pod = s.write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p2, namespace: app}\nspec:\n  restartPolicy: Always\n  containers: [{name: c, image: i}]\n",
    );
    let (ok, out, err) = s.k(&k, &["apply", "-f", pod.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "pod/p2 created");
    // What the v2 schema leaves out (minimum, …) the server still refuses.
    let invalid = s.write(
        "invalid.yaml",
        &machine_yaml("m-old", "  deletion: {nodeDrainTimeoutSeconds: -5}\n"),
    );
    let (ok, _, err) = s
        .k(
            &k,
            &["apply", "--validate=false", "-f", invalid.to_str().unwrap()],
        )
        .await;
    assert!(
        !ok && err.contains("spec.deletion.nodeDrainTimeoutSeconds"),
        "the server still validates: {err}"
    );

    // --dry-run=server: kubectl 1.20 finds the dryRun parameter in /openapi/v2 first.
    let rv = s.resource_version();
    let (ok, _, err) = s
        .k(
            &k,
            &["label", "--dry-run=server", "machine", "m1", "tier=gold"],
        )
        .await;
    assert!(ok, "{err}");
    let fresh = s.write("m-dry.yaml", &machine_yaml("m-dry", ""));
    let (ok, out, err) = s
        .k(
            &k,
            &["create", "--dry-run=server", "-f", fresh.to_str().unwrap()],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "machine.cluster.x-k8s.io/m-dry created (server dry run)"
    );
    let (ok, _, err) = s.k(&k, &["delete", "--dry-run=server", "node", "n1"]).await;
    assert!(ok, "{err}");
    assert_eq!(s.resource_version(), rv, "no write happened");
    assert!(s.machine("m-dry").is_none());

    let (ok, out, err) = s
        .k(&k, &["scale", "machinepool", "mp", "--replicas=3"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "machinepool.cluster.x-k8s.io/mp scaled");
    let mp = s
        .object("cluster.x-k8s.io", "MachinePool", "default", "mp")
        .unwrap();
    assert_eq!(mp["spec"]["replicas"], 3);
    s.server.shutdown().await;
}

const PYTHON_SCRIPT: &str = r#"
import json, sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
out = {}
out["version"] = client.VersionApi().get_code().to_dict()
core = client.CoreV1Api()
out["nodes"] = [n.metadata.name for n in core.list_node().items]
crd = client.CustomObjectsApi()
g, v = "cluster.x-k8s.io", "v1beta2"
out["machines"] = [m["metadata"]["name"] for m in crd.list_namespaced_custom_object(g, v, "default", "machines")["items"]]
spec = {"clusterName": "c1", "bootstrap": {"dataSecretName": "boot"},
        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "d1"}}
body = {"apiVersion": f"{g}/{v}", "kind": "Machine", "metadata": {"name": "m-py", "namespace": "default"}, "spec": spec}
out["dry_run"] = crd.create_namespaced_custom_object(g, v, "default", "machines", body, dry_run="All")["metadata"]["name"]
out["created"] = crd.create_namespaced_custom_object(g, v, "default", "machines", body)["metadata"]["name"]
patched = crd.patch_namespaced_custom_object(g, v, "default", "machines", "m-py", {"metadata": {"labels": {"by": "python"}}})
out["labels"] = patched["metadata"]["labels"]
try:
    crd.create_namespaced_custom_object(g, v, "default", "machines",
        {**body, "metadata": {"name": "m-bad", "namespace": "default"}, "spec": {"clusterName": ""}})
    out["invalid"] = None
except ApiException as e:
    status = json.loads(e.body)
    out["invalid"] = {"code": e.status, "fields": [c["field"] for c in status["details"]["causes"]]}
scale = crd.patch_namespaced_custom_object_scale(g, v, "default", "machinepools", "mp", {"spec": {"replicas": 6}})
out["scale"] = scale["spec"]["replicas"]
events = client.EventsV1Api()
ev = client.EventsV1Event(metadata=client.V1ObjectMeta(name="e-py", namespace="default"),
    regarding=client.V1ObjectReference(kind="Machine", name="m-py"), reason="Tested", note="from python",
    type="Normal", action="Test", reporting_controller="py", reporting_instance="py-0",
    event_time="2025-01-01T00:00:00.000000Z")
events.create_namespaced_event("default", ev)
out["events_v1"] = [e.note for e in events.list_namespaced_event("default").items]
out["core_events"] = [e.message for e in core.list_namespaced_event("default").items]
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kubernetes_client_reads_writes_and_sees_validation() {
    let py = python();
    let s = Served::start().await;
    let script = s.write("client.py", PYTHON_SCRIPT);
    let mut cmd = Command::new(&py);
    cmd.arg(&script).arg(s.path("config"));
    let (ok, out, err) = tokio::task::spawn_blocking(move || run(cmd)).await.unwrap();
    assert!(ok, "the python client failed: {err}");
    let got: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(got["version"]["minor"], "32");
    assert!(
        got["version"]["build_date"]
            .as_str()
            .is_some_and(|d| !d.is_empty())
    );
    assert_eq!(got["nodes"], json!(["n1"]));
    assert_eq!(got["machines"], json!(["m1"]));
    assert_eq!(got["dry_run"], "m-py");
    assert_eq!(got["created"], "m-py");
    assert_eq!(got["labels"], json!({"by": "python"}));
    assert_eq!(
        got["invalid"],
        json!({"code": 422, "fields": ["spec.clusterName", "spec.bootstrap", "spec.infrastructureRef"]})
    );
    assert_eq!(got["scale"], 6);
    assert_eq!(got["events_v1"], json!(["from python"]));
    assert_eq!(got["core_events"], json!(["from python"]));
    assert!(s.machine("m-py").is_some() && s.machine("m-bad").is_none());
    s.server.shutdown().await;
}
