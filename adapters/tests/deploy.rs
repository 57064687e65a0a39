//! The deploy manifests (`adapters/deploy/`): the kustomize base renders with kubectl 1.32 and
//! every rendered object validates against the Kubernetes 1.32 schemas (PyPI's
//! `kubernetes-validate`, strict, without a network); a broken manifest is rejected; the
//! Deployment is hardened as documented; and its `lifecycle run` arguments, run against a served world,
//! use exactly the leader-election Role. A missing kubectl or validator fails, never skips.

mod common;
mod rbac;

use adapters::apiserver::record;
use common::{render, required_tool};
use rbac::Grant;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const INSTALL: &str = ".ci/install-clients (run by the tests themselves) did not install it";

/// The Kubernetes version the manifests are validated against: kubectl's.
const KUBERNETES_VERSION: &str = "1.32.0";

/// `$KUBERNETES_VALIDATE`, else the virtualenv `.ci/install-clients` makes.
fn validator() -> PathBuf {
    let path = std::env::var_os("KUBERNETES_VALIDATE").map_or_else(
        || common::clients_dir().join("validate/bin/kubernetes-validate"),
        PathBuf::from,
    );
    let works = Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        works,
        "kubernetes-validate is required at {}: {INSTALL}",
        path.display()
    );
    path
}

/// `kubernetes-validate --strict` on YAML from stdin, in a network namespace of its own
/// (`unshare -rn`, no root needed): its schemas ship with it, and this proves nothing is fetched.
fn validate(yaml: &str) -> Output {
    let validator = validator();
    let offline = Command::new("unshare")
        .args(["-rn", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        offline,
        "`unshare -rn` is not allowed here: validating offline needs an unprivileged user and network namespace"
    );
    let mut child = Command::new("unshare")
        .arg("-rn")
        .arg(validator)
        .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubernetes-validate starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Renders `dir`, validates it, and returns its objects; every object must have passed.
fn rendered_and_valid(dir: &Path) -> Vec<Value> {
    let yaml = render(dir);
    let out = validate(&yaml);
    let report = text(&out);
    println!("{}:\n{report}", dir.display());
    assert!(out.status.success(), "{report}");
    let objects = rbac::documents(&yaml);
    for o in &objects {
        let name = format!(
            "{}/{}",
            o["kind"].as_str().unwrap().to_lowercase(),
            o["metadata"]["name"].as_str().unwrap()
        );
        assert!(
            report.contains(&format!("passed for resource {name} ")),
            "{name} not validated:\n{report}"
        );
    }
    objects
}

fn kinds(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn the_base_renders_and_validates_against_the_kubernetes_schemas() {
    let objects = rendered_and_valid(&rbac::deploy_dir());
    let want: BTreeSet<String> = [
        "ServiceAccount/lifecycle-controller",
        "ClusterRole/lifecycle-manager",
        "ClusterRole/lifecycle-manager-core",
        "ClusterRoleBinding/lifecycle-manager",
        "ClusterRole/lifecycle-capi-reader",
        "ClusterRoleBinding/lifecycle-capi-reader",
        "ClusterRole/lifecycle-metrics-auth",
        "ClusterRoleBinding/lifecycle-metrics-auth",
        "ClusterRole/lifecycle-metrics-reader",
        "Role/lifecycle-leader-election",
        "RoleBinding/lifecycle-leader-election",
        "Deployment/lifecycle-controller",
        "Service/lifecycle-metrics",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(kinds(&objects), want);
    for o in objects
        .iter()
        .filter(|o| o["kind"] != "Namespace" && o["metadata"].get("namespace").is_some())
    {
        assert_eq!(o["metadata"]["namespace"], "lifecycle-system", "{o}");
    }
}

#[test]
fn the_ha_overlay_provider_and_workload_roles_validate() {
    let ha = rendered_and_valid(&rbac::deploy_dir().join("ha"));
    let names = kinds(&ha);
    assert!(
        names.contains("StatefulSet/lifecycle-controller"),
        "{names:?}"
    );
    assert!(
        !names.contains("Deployment/lifecycle-controller"),
        "{names:?}"
    );
    assert!(
        !names.contains("PersistentVolumeClaim/lifecycle-journal"),
        "{names:?}"
    );
    let set = rbac::find(&ha, "StatefulSet", "lifecycle-controller");
    assert_eq!(set["spec"]["replicas"], 2, "{set}");
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        "journal"
    );
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"],
        serde_json::json!(["ReadWriteOnce"])
    );
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    let args = container["args"].to_string();
    assert!(args.contains("--leader-elect"), "{args}");
    // The replicas run as the Deployment's pod does: arguments, ports, probes, environment,
    // mounts.
    let base = rendered_and_valid(&rbac::deploy_dir());
    let single = &controller(&base)["containers"][0];
    for field in [
        "args",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "env",
        "volumeMounts",
        "securityContext",
    ] {
        assert_eq!(container[field], single[field], "{field}");
    }
    let providers = rendered_and_valid(&rbac::deploy_dir().join("providers"));
    assert_eq!(providers.len(), rbac::provider_roles().len());
    rendered_and_valid(&rbac::deploy_dir().join("workload"));
}

/// The validation can fail: a wrong type, an unknown field (strict) and a missing required
/// field are each rejected, naming the object.
#[test]
fn a_broken_manifest_is_rejected() {
    let good = render(&rbac::deploy_dir());
    let breakages = [
        ("replicas: 1", "replicas: one", "spec.replicas"),
        (
            "containerPort: 8443",
            "containerPort: 8443\n          hostPortt: 1",
            "hostPortt",
        ),
        (
            "        name: controller\n",
            "",
            "'name' is a required property",
        ),
    ];
    for (from, to, says) in breakages {
        assert!(good.contains(from), "{from:?} not in the rendered base");
        let broken = good.replacen(from, to, 1);
        let out = validate(&broken);
        let report = text(&out);
        assert!(!out.status.success(), "{to:?} was accepted:\n{report}");
        assert!(
            report.contains("deployment/lifecycle-controller"),
            "{report}"
        );
        assert!(report.contains(says), "{to:?}: {report}");
    }
}

fn controller(objects: &[Value]) -> &Value {
    &rbac::find(objects, "Deployment", "lifecycle-controller")["spec"]["template"]["spec"]
}

fn controller_args(objects: &[Value]) -> Vec<&str> {
    controller(objects)["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn the_deployment_runs_one_hardened_replica_on_its_journal() {
    let objects = rbac::documents(&render(&rbac::deploy_dir()));
    let deployment = rbac::find(&objects, "Deployment", "lifecycle-controller");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    let pod = controller(&objects);
    assert_eq!(pod["serviceAccountName"], "lifecycle-controller");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let uid = pod["securityContext"]["runAsUser"]
        .as_i64()
        .expect("a numeric uid");
    assert!(uid > 0, "{uid}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "health");
    }
    // CAPI's ports: secure metrics on 8443, the probes on 9440, each with its flag.
    let port = |name: &str| {
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no port {name}: {c}"))["containerPort"]
            .clone()
    };
    assert_eq!(port("metrics"), 8443);
    assert_eq!(port("health"), 9440);
    for r in ["requests", "limits"] {
        assert!(
            c["resources"][r]["cpu"].is_string() && c["resources"][r]["memory"].is_string(),
            "{c}"
        );
    }
    let args = c["args"].to_string();
    for arg in [
        "--leader-elect",
        "--journal=/var/lib/lifecycle/journal",
        "--metrics-secure-addr=0.0.0.0:8443",
        "--health-addr=0.0.0.0:9440",
        // Plain metrics on loopback only: no unauthenticated /metrics off the pod.
        "--metrics-addr=127.0.0.1:8080",
    ] {
        assert!(
            args.contains(&format!("\"{arg}\"")),
            "{arg} missing: {args}"
        );
    }
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/var/lib/lifecycle");
    // `lifecycle explain` and `log` copy a held journal to $TMPDIR: a writable emptyDir,
    // the root filesystem being read-only.
    let tmpdir = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "TMPDIR")
        .expect("TMPDIR set");
    assert_eq!(c["volumeMounts"][1]["mountPath"], tmpdir["value"]);
    let tmp = &pod["volumes"][1];
    assert_eq!(tmp["name"], c["volumeMounts"][1]["name"]);
    assert!(tmp["emptyDir"].is_object(), "{tmp}");
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "lifecycle-journal"
    );
    let journal = rbac::documents(&render(&rbac::deploy_dir().join("journal")));
    let pvc = rbac::find(&journal, "PersistentVolumeClaim", "lifecycle-journal");
    assert_eq!(
        pvc["spec"]["accessModes"],
        serde_json::json!(["ReadWriteOnce"])
    );
    let service = rbac::find(&objects, "Service", "lifecycle-metrics");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
    assert_eq!(service["spec"]["ports"][0]["port"], 8443);
    let labels = &rbac::find(&objects, "Deployment", "lifecycle-controller")["spec"]["template"]["metadata"]
        ["labels"];
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "the Service selects the controller's pods");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Deployment's `lifecycle run` arguments for a replica run here: the journal in `journal`,
/// every server address on a free loopback port; returns them with the (health, secure
/// metrics) ports.
fn replica_args(container: &Value, journal: &Path) -> (Vec<String>, u16, u16) {
    let (health, secure) = (free_port(), free_port());
    let args = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap().replace("$(POD_NAMESPACE)", "default");
            let (flag, _) = a.split_once('=').unwrap_or((&a, ""));
            match flag {
                "--journal" => format!("--journal={}", journal.display()),
                "--metrics-addr" => "--metrics-addr=127.0.0.1:0".to_string(),
                "--health-addr" => format!("--health-addr=127.0.0.1:{health}"),
                "--metrics-secure-addr" => format!("--metrics-secure-addr=127.0.0.1:{secure}"),
                _ => a,
            }
        })
        .collect();
    (args, health, secure)
}

/// `GET /readyz` on `port` answers 200.
fn ready(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let mut answer = String::new();
    use std::io::Read;
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .and_then(|()| s.read_to_string(&mut answer))
        .is_ok_and(|_| answer.starts_with("HTTP/1.1 200"))
}

/// The secure `/metrics` of `port` with the fake API server's admin token: its HTTP code.
fn scrape(port: u16) -> String {
    let curl = required_tool(
        "CURL",
        PathBuf::from("curl"),
        &["--version"],
        "curl",
        "install curl (Debian's package curl)",
    );
    let out = Command::new(curl)
        .args(["--silent", "--insecure", "--max-time", "10"])
        .args(["--output", "/dev/null", "--write-out", "%{http_code}"])
        .args([
            "--header",
            &format!(
                "Authorization: Bearer {}",
                adapters::apiserver::auth::ADMIN_TOKEN
            ),
        ])
        .arg(format!("https://127.0.0.1:{port}/metrics"))
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two replicas with the Deployment's own `lifecycle run` arguments against a served world
/// (`sim serve`, recording every request's authorization tuple): they accept them, one leads
/// and the other stands by, watching the Lease; both serve the secure `/metrics`, which is
/// scraped. Every tuple recorded is allowed by the shipped RBAC as the API server would decide
/// it for the ServiceAccount (its RoleBinding in the controller's namespace for the Lease, its
/// ClusterRoleBindings with the aggregated manager role and the provider rules for the rest);
/// the Lease's tuples include the standby's list and watch.
#[test]
fn a_leader_and_a_standby_with_the_deployment_args_stay_within_the_shipped_rbac() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = dir.path().join("requests.tsv");
    let scenario = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/pre-drain-hook-holds-drain.yaml"
    ));
    let mut serve = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .args(["sim", "serve", "--speed", "10"])
        .arg(&scenario)
        .arg("--kubeconfig-dir")
        .arg(dir.path())
        .arg("--record-requests")
        .arg(&recorded)
        .stdout(Stdio::piped())
        .spawn()
        .expect("sim serve starts");
    let mut lines = std::io::BufReader::new(serve.stdout.take().unwrap()).lines();
    let run_line = lines
        .by_ref()
        .map(Result::unwrap)
        .find(|l| l.starts_with("run the controller with:"))
        .expect("sim serve prints the controller's command");
    let words: Vec<&str> = run_line.split_whitespace().collect();
    let after = |flag: &str| words[words.iter().position(|w| *w == flag).unwrap() + 1];
    let objects = rbac::documents(&render(&rbac::deploy_dir()));
    let container = &controller(&objects)["containers"][0];
    // Six real seconds at 10x: the Lease is created, then renewed every simulated 10 s.
    let replicas: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            let (args, health, secure) = replica_args(container, &dir.path().join(name));
            assert_eq!(args[0], "run");
            let child = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
                .args(&args)
                .args(["--kubeconfig", after("--kubeconfig")])
                .args([
                    "--clock-origin-ms",
                    after("--clock-origin-ms"),
                    "--clock-speed",
                    "10",
                ])
                .args(["--run-for", "6"])
                .env("HOSTNAME", name)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("lifecycle run starts");
            (child, health, secure)
        })
        .collect();
    let started = std::time::Instant::now();
    for (_, health, secure) in &replicas {
        while !ready(*health) {
            assert!(started.elapsed().as_secs() < 5, "a replica is not ready");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(
            scrape(*secure),
            "200",
            "the secure /metrics with the admin token"
        );
    }
    let outs: Vec<Output> = replicas
        .into_iter()
        .map(|(child, _, _)| child.wait_with_output().unwrap())
        .collect();
    let _ = serve.kill();
    let _ = serve.wait();
    for out in &outs {
        assert_eq!(out.status.code(), Some(0), "{}", text(out));
    }
    let leaders = outs
        .iter()
        .filter(|o| text(o).contains("became leader"))
        .count();
    // One leads; the other stands by (and may take the Lease the leader releases at its end).
    assert!(leaders >= 1, "nobody led");
    let requests = record::read(&recorded).unwrap();
    let used: BTreeSet<Grant> = requests
        .iter()
        .filter(|r| r.cluster == "management" && !rbac::is_non_resource(r))
        .map(rbac::needed)
        .collect();
    let beyond_discovery: Vec<_> = requests
        .iter()
        .filter(|r| rbac::is_non_resource(r) && !rbac::is_discovery(r))
        .collect();
    assert!(beyond_discovery.is_empty(), "{beyond_discovery:?}");
    let (lease, rest): (BTreeSet<Grant>, BTreeSet<Grant>) = used
        .into_iter()
        .partition(|g| g.group == "coordination.k8s.io");
    println!("leader election:\n{}", rbac::table(&lease));
    println!("the rest:\n{}", rbac::table(&rest));
    let mut installed = objects.clone();
    installed.extend(rbac::provider_roles());
    let granted = rbac::granted_to(&installed, "lifecycle-system", "lifecycle-controller");
    let lease_grant = |verb: &str| Grant {
        group: "coordination.k8s.io".into(),
        resource: "leases".into(),
        verb: verb.into(),
    };
    for verb in ["list", "watch"] {
        assert!(
            lease.contains(&lease_grant(verb)),
            "the standby's {verb} of the Lease was not recorded:\n{}",
            rbac::table(&lease)
        );
    }
    let beyond: Vec<_> = lease.difference(&granted.namespaced).collect();
    assert!(
        beyond.is_empty(),
        "Lease requests not granted in the namespace: {beyond:?}"
    );
    let capi: BTreeSet<Grant> = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ]
    .into_iter()
    .map(lease_grant)
    .collect();
    let base = rbac::objects_in(&rbac::deploy_dir().join("base"));
    let role = rbac::granted(rbac::find(&base, "Role", "lifecycle-leader-election"));
    assert_eq!(role, capi, "the Lease Role has CAPI's verbs");
    let by_name = rbac::granted_by_name(rbac::find(&base, "ClusterRole", "lifecycle-capi-reader"));
    let beyond: Vec<_> = rest
        .difference(&granted.cluster)
        .filter(|g| !by_name.contains(g))
        .collect();
    assert!(
        beyond.is_empty(),
        "requests not granted cluster-wide: {beyond:?}"
    );
    for (group, resource) in [
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ] {
        let review = Grant {
            group: group.into(),
            resource: resource.into(),
            verb: "create".into(),
        };
        assert!(
            rest.contains(&review),
            "the scrapes' {resource} were not recorded"
        );
    }
}

/// The Lease the manifests name is the controller's own default, never CAPI's: sharing CAPI's
/// would make this controller and CAPI's manager take turns leading.
#[test]
fn the_manifests_name_their_own_lease_not_capis() {
    use adapters::kube::lease::{CAPI_LEASE_NAME, DEFAULT_LEASE_NAME};
    assert_ne!(DEFAULT_LEASE_NAME, CAPI_LEASE_NAME);
    let help = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(
        text(&help).contains(&format!("[default: {DEFAULT_LEASE_NAME}]")),
        "{}",
        text(&help)
    );
    let base = rbac::documents(&render(&rbac::deploy_dir()));
    let ha = rbac::documents(&render(&rbac::deploy_dir().join("ha")));
    let pods = [
        controller(&base),
        &rbac::find(&ha, "StatefulSet", "lifecycle-controller")["spec"]["template"]["spec"],
    ];
    for pod in pods {
        let lease = pod["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|a| a.as_str()?.strip_prefix("--leader-election-id="))
            .expect("--leader-election-id");
        assert_eq!(lease, DEFAULT_LEASE_NAME);
        assert_ne!(lease, CAPI_LEASE_NAME);
    }
}

/// The checks at start look for CAPI's Lease, by name, and for its provider Deployments, in
/// every namespace (CAPI's may be anywhere), and read the release from its manager Deployment:
/// the base grants those reads and nothing more.
#[test]
fn the_controller_may_read_capis_lease_and_deployments_and_only_those() {
    let objects = rbac::documents(&render(&rbac::deploy_dir()));
    let role = rbac::find(&objects, "ClusterRole", "lifecycle-capi-reader");
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(
        rules,
        &[
            serde_json::json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "resourceNames": [adapters::kube::lease::CAPI_LEASE_NAME], "verbs": ["list"]}),
            serde_json::json!({"apiGroups": ["apps"], "resources": ["deployments"],
                "resourceNames": [adapters::preflight::CAPI_DEPLOYMENT], "verbs": ["get"]}),
            serde_json::json!({"apiGroups": ["apps"], "resources": ["deployments"],
                "verbs": ["list"]}),
        ]
    );
    let binding = rbac::find(&objects, "ClusterRoleBinding", "lifecycle-capi-reader");
    assert_eq!(binding["roleRef"]["name"], "lifecycle-capi-reader");
    assert_eq!(binding["subjects"][0]["name"], "lifecycle-controller");
    assert_eq!(binding["subjects"][0]["namespace"], "lifecycle-system");
}

/// The shadow overlay runs `--mode=shadow` and may only read: in the management cluster every
/// grant is get, list or watch, but its own Lease and the metrics endpoint's reviews, even
/// with the acting provider roles installed beside it; in workload clusters list and watch.
#[test]
fn the_shadow_overlay_runs_in_shadow_mode_and_may_only_read() {
    let objects = rendered_and_valid(&rbac::deploy_dir().join("shadow"));
    let args = controller_args(&objects);
    assert!(args.contains(&"--mode=shadow"), "{args:?}");
    let mut installed = objects.clone();
    installed.extend(rbac::provider_roles());
    let granted = rbac::granted_to(&installed, "lifecycle-system", "lifecycle-controller");
    let reads = ["get", "list", "watch"];
    let writes: Vec<&Grant> = granted
        .cluster
        .iter()
        .filter(|g| !reads.contains(&g.verb.as_str()))
        .filter(|g| !(g.verb == "create" && g.resource.ends_with("reviews")))
        .collect();
    assert!(
        writes.is_empty(),
        "the shadow overlay grants writes: {writes:?}"
    );
    assert!(
        granted
            .cluster
            .iter()
            .any(|g| g.resource == "dockermachines" && g.verb == "watch"),
        "it still watches provider kinds: {}",
        rbac::table(&granted.cluster)
    );
    let beyond_lease: Vec<&Grant> = granted
        .namespaced
        .iter()
        .filter(|g| g.group != "coordination.k8s.io")
        .collect();
    assert!(beyond_lease.is_empty(), "{beyond_lease:?}");
    let workload = rendered_and_valid(&rbac::deploy_dir().join("shadow/workload"));
    let role = rbac::granted(rbac::find(
        &workload,
        "ClusterRole",
        "lifecycle-workload-shadow",
    ));
    assert!(
        role.iter().all(|g| g.verb == "list" || g.verb == "watch"),
        "{}",
        rbac::table(&role)
    );
}

/// The metrics reader role is for Prometheus to bind: `get` on `/metrics`, bound to nobody here.
#[test]
fn the_metrics_reader_role_grants_get_on_metrics_and_is_not_bound() {
    let objects = rbac::documents(&render(&rbac::deploy_dir()));
    let reader = rbac::find(&objects, "ClusterRole", "lifecycle-metrics-reader");
    assert_eq!(
        reader["rules"],
        serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let bound = objects
        .iter()
        .any(|o| o["roleRef"]["name"] == "lifecycle-metrics-reader");
    assert!(
        !bound,
        "lifecycle-metrics-reader is for the operator to bind"
    );
}

/// The image's numeric USER is the pod's runAsUser:runAsGroup, so runAsNonRoot holds without an
/// /etc/passwd and the journal volume's fsGroup matches.
#[test]
fn the_image_runs_as_the_pods_uid() {
    let containerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Containerfile")).unwrap();
    let user = containerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    let objects = rbac::documents(&render(&rbac::deploy_dir()));
    let sc = &controller(&objects)["securityContext"];
    assert_eq!(
        user,
        format!("{}:{}", sc["runAsUser"], sc["runAsGroup"]),
        "{sc}"
    );
    assert_eq!(sc["fsGroup"], sc["runAsGroup"]);
    assert!(containerfile.contains("FROM scratch"));
    assert!(containerfile.contains("ENTRYPOINT [\"/lifecycle\"]"));
}

/// The takeover overlays run `--mode=takeover`, the single replica and the HA StatefulSet
/// alike, with the same grants: it patches Machines (its hooks) and their status (its own
/// condition), and deletes provider objects; it neither gets nor deletes a Machine (CAPI's
/// manager removes the finalizer and remediates), which the base may.
#[test]
fn the_takeover_overlays_run_in_takeover_mode_and_may_patch_machines() {
    let mut grants = Vec::new();
    for overlay in ["takeover", "ha-takeover"] {
        let objects = rendered_and_valid(&rbac::deploy_dir().join(overlay));
        let pod = objects
            .iter()
            .find(|o| {
                (o["kind"] == "Deployment" || o["kind"] == "StatefulSet")
                    && o["metadata"]["name"] == "lifecycle-controller"
            })
            .expect("the controller");
        let args: Vec<&str> = pod["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.contains(&"--mode=takeover"), "{overlay}: {args:?}");
        assert!(args.contains(&"--leader-elect"), "{overlay}: {args:?}");
        assert!(!args.contains(&"--mode=shadow"), "{overlay}: {args:?}");
        let mut installed = objects.clone();
        installed.extend(rbac::provider_roles());
        let granted = rbac::granted_to(&installed, "lifecycle-system", "lifecycle-controller");
        let has = |resource: &str, verb: &str| {
            granted
                .cluster
                .iter()
                .any(|g| g.resource == resource && g.verb == verb)
        };
        for (resource, verb) in [
            ("machines", "patch"),
            ("machines/status", "patch"),
            ("dockermachines", "delete"),
        ] {
            assert!(
                has(resource, verb),
                "{overlay}: {verb} {resource}: {}",
                rbac::table(&granted.cluster)
            );
        }
        for verb in ["get", "delete"] {
            assert!(!has("machines", verb), "{overlay}: {verb} machines");
        }
        grants.push(granted.cluster);
    }
    assert_eq!(
        grants[0], grants[1],
        "takeover and ha-takeover grant the same"
    );
    let ha = rbac::documents(&render(&rbac::deploy_dir().join("ha-takeover")));
    let set = rbac::find(&ha, "StatefulSet", "lifecycle-controller");
    assert_eq!(set["spec"]["replicas"], 2, "{set}");
}

/// `lifecycle preflight` asks for what each mode needs; the shipped ClusterRoles grant it:
/// `alone` needs exactly the base's core rules, a shadow exactly the shadow overlay's (each but
/// the review it asks with), a takeover the takeover overlay's but what it writes for an object
/// it adopted.
#[test]
fn preflights_permissions_are_the_shipped_core_rules() {
    use adapters::preflight::needed;
    use engine::runtime::Mode;
    let grants = |mode: Mode| -> BTreeSet<Grant> {
        needed(mode)
            .into_iter()
            .map(|p| Grant {
                group: p.group.to_string(),
                resource: p.resource.to_string(),
                verb: p.verb.to_string(),
            })
            .collect()
    };
    let core = |overlay: &str| {
        let objects = rbac::documents(&render(&rbac::deploy_dir().join(overlay)));
        rbac::granted(rbac::find(
            &objects,
            "ClusterRole",
            "lifecycle-manager-core",
        ))
    };
    let review = Grant {
        group: "authorization.k8s.io".into(),
        resource: "selfsubjectaccessreviews".into(),
        verb: "create".into(),
    };
    let with_review = |mode: Mode| {
        let mut g = grants(mode);
        g.insert(review.clone());
        g
    };
    let base = core("base");
    let alone = with_review(Mode::Alone);
    assert_eq!(alone, base, "{}", rbac::difference(&base, &alone));
    let shadow = core("shadow");
    let asked = with_review(Mode::Shadow);
    assert_eq!(asked, shadow, "{}", rbac::difference(&shadow, &asked));
    let takeover = core("takeover");
    let asked = with_review(Mode::Takeover);
    assert!(
        asked.is_subset(&takeover),
        "{}",
        rbac::difference(&takeover, &asked)
    );
    let adoption: BTreeSet<&str> = takeover
        .difference(&asked)
        .map(|g| g.resource.as_str())
        .collect();
    assert_eq!(
        adoption,
        BTreeSet::from([
            "machinehealthchecks",
            "machinehealthchecks/status",
            "machinepools",
            "machinepools/status",
            "machines",
        ]),
        "beyond what preflight asks, a takeover may write only for what it adopted"
    );
    assert!(
        takeover.is_subset(&base),
        "{}",
        rbac::difference(&takeover, &base)
    );
}

/// What `kubectl delete -k DIR` deletes: the objects DIR renders, by kind, namespace and name.
fn deleted_by(dir: &str) -> BTreeSet<String> {
    rbac::documents(&render(&rbac::deploy_dir().join(dir)))
        .iter()
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// Found beside CAPI's manager: `kubectl delete -k adapters/deploy/shadow` deleted the
/// `lifecycle-system` Namespace and the journal's PVC with it. They live in `journal/`, which no
/// mode's overlay includes: the sequence shadow → takeover → uninstall, each step a `kubectl
/// delete -k` of the overlay before, keeps them; the HA StatefulSet keeps its replicas' PVCs
/// (Retain, explicitly).
#[test]
fn uninstalling_any_mode_keeps_the_journal() {
    let journal = rendered_and_valid(&rbac::deploy_dir().join("journal"));
    let kept: BTreeSet<String> = [
        "Namespace//lifecycle-system",
        "PersistentVolumeClaim/lifecycle-system/lifecycle-journal",
    ]
    .map(String::from)
    .into();
    assert_eq!(deleted_by("journal"), kept, "the journal kustomization");
    for overlay in [".", "base", "shadow", "takeover", "ha", "ha-takeover"] {
        let deleted = deleted_by(overlay);
        for object in &kept {
            assert!(
                !deleted.contains(object),
                "kubectl delete -k {overlay} deletes {object}"
            );
        }
        assert!(
            !deleted
                .iter()
                .any(|o| o.starts_with("Namespace/") || o.starts_with("PersistentVolumeClaim/")),
            "{overlay} renders a Namespace or a PVC: {deleted:?}"
        );
    }
    // Installed once, then shadow, shadow deleted, takeover, takeover deleted.
    let mut live: BTreeSet<String> = deleted_by("journal");
    for overlay in ["shadow", "takeover"] {
        let applied = deleted_by(overlay);
        live.extend(applied.iter().cloned());
        live.retain(|o| !applied.contains(o));
    }
    assert_eq!(
        live, kept,
        "what is left after shadow -> takeover -> uninstall"
    );
    // The Deployment mounts that PVC, in that namespace.
    let base = rbac::documents(&render(&rbac::deploy_dir()));
    let pod = controller(&base);
    let claim = pod["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str();
    let pvc = rbac::find(&journal, "PersistentVolumeClaim", "lifecycle-journal");
    assert_eq!(claim, pvc["metadata"]["name"].as_str());
    assert_eq!(
        rbac::find(&base, "Deployment", "lifecycle-controller")["metadata"]["namespace"],
        pvc["metadata"]["namespace"]
    );
    let ha = rbac::documents(&render(&rbac::deploy_dir().join("ha")));
    let set = rbac::find(&ha, "StatefulSet", "lifecycle-controller");
    assert_eq!(
        set["spec"]["persistentVolumeClaimRetentionPolicy"],
        serde_json::json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
        "{set}"
    );
}

/// One rule as the permission tables of `adapters/deploy/README.md` list it: the role that
/// grants it, API group, resource, verb, and the one object it is limited to (`resourceNames`).
type Permission = (String, String, String, String, Option<String>);

/// What an overlay binds to the controller, rule by rule, each under the role that carries it
/// (an aggregated ClusterRole's rules under each member it collects): in the management
/// cluster its ServiceAccount `lifecycle-system/lifecycle-controller`, in a workload cluster the
/// User `lifecycle-controller` the shipped bindings name.
fn bound_permissions(objects: &[Value]) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        let bound = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                let account = s["kind"] == "ServiceAccount" && s["namespace"] == "lifecycle-system";
                (account || s["kind"] == "User") && s["name"] == "lifecycle-controller"
            });
        if !bound {
            continue;
        }
        let role_ref = &binding["roleRef"];
        let role = rbac::find(
            objects,
            role_ref["kind"].as_str().unwrap(),
            role_ref["name"].as_str().unwrap(),
        );
        let mut carriers = vec![role];
        if let Some(rule) = role.get("aggregationRule") {
            carriers.extend(
                objects
                    .iter()
                    .filter(|o| o["kind"] == "ClusterRole" && rbac::aggregated_by(rule, o)),
            );
        }
        for carrier in carriers {
            let name = carrier["metadata"]["name"].as_str().unwrap();
            for rule in carrier["rules"].as_array().into_iter().flatten() {
                let names = strings(&rule["resourceNames"]);
                let names: Vec<Option<String>> = if names.is_empty() {
                    vec![None]
                } else {
                    names.into_iter().map(Some).collect()
                };
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            for object in &names {
                                out.insert((
                                    name.to_string(),
                                    group.clone(),
                                    resource.clone(),
                                    verb.clone(),
                                    object.clone(),
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The permission tables of the README's "Management cluster": each `#### Granted by …`
/// heading's overlays (in backquotes) with the rules of the table under it.
fn readme_permission_tables() -> Vec<(Vec<String>, BTreeSet<Permission>)> {
    let readme = std::fs::read_to_string(rbac::deploy_dir().join("README.md")).unwrap();
    let unquote = |cell: &str| cell.trim().trim_matches('`').to_string();
    readme
        .split("\n#### Granted by ")
        .skip(1)
        .map(|section| {
            let (heading, body) = section.split_once('\n').unwrap();
            // The overlays are named before any parenthesis, which says what they are for.
            let overlays = heading
                .split(" (")
                .next()
                .unwrap()
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            let mut rules = BTreeSet::new();
            let rows = body
                .lines()
                .skip_while(|l| !l.starts_with('|'))
                .take_while(|l| l.starts_with('|'))
                .skip(2);
            for row in rows {
                let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
                let role = unquote(cells[0].split(" (").next().unwrap());
                let group = match unquote(cells[1]).as_str() {
                    "\"\"" => String::new(),
                    g => g.to_string(),
                };
                let (resources, object) = match cells[2].split_once(" (name ") {
                    Some((r, name)) => (r, Some(unquote(name.trim_end_matches(')')))),
                    None => (cells[2], None),
                };
                for resource in resources.split(", ") {
                    for verb in cells[3].split(", ") {
                        rules.insert((
                            role.clone(),
                            group.clone(),
                            resource.trim().to_string(),
                            verb.trim().to_string(),
                            object.clone(),
                        ));
                    }
                }
            }
            (overlays, rules)
        })
        .collect()
}

/// Found beside CAPI's manager: the deploy README's permission table omitted `events patch`,
/// `selfsubjectaccessreviews create` and the `lifecycle-capi-reader` role. Each table is now
/// the rendered RBAC of the overlays its heading names, exactly: every rule listed is granted,
/// every rule granted is listed; and every overlay has its table, the workload clusters' too.
#[test]
fn the_readme_permission_tables_are_what_the_overlays_grant() {
    let tables = readme_permission_tables();
    let covered: BTreeSet<&str> = tables
        .iter()
        .flat_map(|(overlays, _)| overlays.iter().map(String::as_str))
        .collect();
    let all = [".", "base", "shadow", "takeover", "ha", "ha-takeover"];
    let workloads = ["workload", "shadow/workload"];
    let every: BTreeSet<&str> = all.into_iter().chain(workloads).collect();
    assert_eq!(covered, every, "an overlay without its table");
    for (overlays, listed) in &tables {
        assert!(listed.len() >= 4, "{overlays:?}: {listed:?}");
        for overlay in overlays {
            let granted =
                bound_permissions(&rbac::documents(&render(&rbac::deploy_dir().join(overlay))));
            let unlisted: Vec<_> = granted.difference(listed).collect();
            let not_granted: Vec<_> = listed.difference(&granted).collect();
            assert!(
                unlisted.is_empty() && not_granted.is_empty(),
                "{overlay}: granted, not in the README's table: {unlisted:#?}\nin the table, not granted: {not_granted:#?}"
            );
        }
    }
}

/// `to` relative to the directory `from` (both absolute): kustomize takes no absolute path.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path: PathBuf = from[common..].iter().map(|_| "..").collect();
    path.extend(to[common..].iter());
    path
}

/// The component `components/kubeconfig-secrets-by-name` added to each mode's overlay, as an
/// operator's kustomization does: it renders and validates; nothing bound to the
/// ServiceAccount reads Secrets cluster-wide any more, the Role it adds reads them only by name
/// (`get`, `resourceNames`), and every other grant is the overlay's own.
#[test]
fn kubeconfig_secrets_by_name_grants_no_cluster_wide_secrets() {
    let component = rbac::deploy_dir().join("components/kubeconfig-secrets-by-name");
    let secret = |g: &Grant| g.group.is_empty() && g.resource == "secrets";
    for overlay in [".", "shadow", "takeover", "ha-takeover"] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let overlay_dir = rbac::deploy_dir().join(overlay);
        std::fs::write(
            dir.path().join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- {}\ncomponents:\n- {}\n",
                relative(dir.path(), &overlay_dir).display(),
                relative(dir.path(), &component).display()
            ),
        )
        .unwrap();
        let objects = rendered_and_valid(dir.path());
        let mut installed = objects.clone();
        installed.extend(rbac::provider_roles());
        let granted = rbac::granted_to(&installed, "lifecycle-system", "lifecycle-controller");
        let cluster_wide: Vec<&Grant> = granted
            .cluster
            .iter()
            .chain(&granted.by_name)
            .filter(|g| secret(g))
            .collect();
        assert!(cluster_wide.is_empty(), "{overlay}: {cluster_wide:?}");
        let namespaced: Vec<&Grant> = granted.namespaced.iter().filter(|g| secret(g)).collect();
        assert!(namespaced.is_empty(), "{overlay}: {namespaced:?}");
        let role = rbac::find(&objects, "Role", "lifecycle-kubeconfigs");
        assert_ne!(role["metadata"]["namespace"], "lifecycle-system");
        assert_eq!(
            role["rules"],
            serde_json::json!([{"apiGroups": [""], "resources": ["secrets"],
                "resourceNames": ["c1-kubeconfig"], "verbs": ["get"]}]),
            "{overlay}"
        );
        let binding = rbac::find(&objects, "RoleBinding", "lifecycle-kubeconfigs");
        assert_eq!(
            binding["metadata"]["namespace"],
            role["metadata"]["namespace"]
        );
        assert_eq!(binding["roleRef"]["name"], "lifecycle-kubeconfigs");
        assert_eq!(binding["subjects"][0]["name"], "lifecycle-controller");
        assert_eq!(binding["subjects"][0]["namespace"], "lifecycle-system");
        // Nothing else changed.
        let mut plain = rbac::documents(&render(&overlay_dir));
        plain.extend(rbac::provider_roles());
        let plain = rbac::granted_to(&plain, "lifecycle-system", "lifecycle-controller");
        let without: BTreeSet<Grant> = plain.cluster.into_iter().filter(|g| !secret(g)).collect();
        assert_eq!(granted.cluster, without, "{overlay}");
    }
}
