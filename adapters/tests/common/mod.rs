//! What the test binaries that run `lifecycle` as a child process share: the child (killed
//! when dropped) and `sim serve` started on a scenario. Each binary uses part of it.
#![allow(dead_code)]

use std::time::Duration;

/// A `lifecycle` child process, killed if still running when dropped.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Child {
    pub fn sigterm(&self) {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    pub async fn exited(&mut self, within: Duration) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < within, "still running after {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub fn lifecycle() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_lifecycle"))
}

/// `lifecycle sim serve` on `scenarios/<scenario>.yaml` at `speed`; returns the server, the
/// management kubeconfig it wrote and the clock flags a controller needs.
pub fn serve(
    dir: &std::path::Path,
    scenario: &str,
    speed: u32,
) -> (Child, std::path::PathBuf, Vec<String>) {
    let file = format!(
        "{}/../scenarios/{scenario}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    serve_file(dir, &file, speed)
}

/// `lifecycle sim serve` on the scenario `file`; as [`serve`].
pub fn serve_file(
    dir: &std::path::Path,
    file: &str,
    speed: u32,
) -> (Child, std::path::PathBuf, Vec<String>) {
    use std::io::BufRead;
    let mut serve = lifecycle()
        .args(["sim", "serve", file, "--speed", &speed.to_string()])
        .arg("--kubeconfig-dir")
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sim serve starts");
    let stdout = serve.stdout.take().expect("piped");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut clock = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("sim serve prints");
        if let Some((_, flags)) = line.split_once("--journal <DIR>") {
            clock = flags.split_whitespace().map(str::to_string).collect();
        }
        if line.starts_with("playing ") {
            break;
        }
    }
    // Keep reading so that the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (Child(serve), dir.join("management.kubeconfig"), clock)
}

/// Where `.ci/install-clients` unpacks the tools and virtualenvs the tests drive.
/// Where `.ci/install-clients` keeps the clients the tests drive: `clients/` in the build
/// directory (a fresh `$HOME` does not lose it). The first call in a test binary runs the
/// script, which installs what is missing (idempotent; a lock keeps test binaries running at
/// once from installing twice). A client it cannot install fails the test that needs it.
pub fn clients_dir() -> std::path::PathBuf {
    static INSTALLED: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("the build directory")
                .to_path_buf();
            let dir = target.join("clients");
            std::fs::create_dir_all(&dir).expect("the clients directory");
            let script =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/install-clients");
            let out = std::process::Command::new("flock")
                .arg(dir.join(".lock"))
                .arg("bash")
                .arg(&script)
                .env("LIFECYCLE_CLIENTS_DIR", &dir)
                .output()
                .expect("flock and bash run .ci/install-clients");
            assert!(
                out.status.success(),
                "{} failed:\n{}{}",
                script.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            dir
        })
        .clone()
}

/// A tool a test needs: `$env` if set, else `default`. Running it with `args` must print
/// `expect` on stdout, or the test fails (never skips) naming the tool and `hint`.
pub fn required_tool(
    env: &str,
    default: std::path::PathBuf,
    args: &[&str],
    expect: &str,
    hint: &str,
) -> std::path::PathBuf {
    let path = std::env::var_os(env).map_or(default, std::path::PathBuf::from);
    let printed = std::process::Command::new(&path)
        .args(args)
        .stderr(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        printed.contains(expect),
        "{expect} is required at {} (got {printed:?}): {hint}, or set {env}",
        path.display()
    );
    path
}

/// kubectl 1.32 (the manifests' Kubernetes version): `$KUBECTL_1_32`, else `kubectl` on PATH,
/// which must be 1.32.
pub fn kubectl() -> std::path::PathBuf {
    clients_dir();
    required_tool(
        "KUBECTL_1_32",
        std::path::PathBuf::from("kubectl"),
        &["version", "--client"],
        "v1.32.",
        "it ships with this machine kind",
    )
}

/// `kubectl --kubeconfig KUBECONFIG ARGS…` (kubectl 1.32, [`kubectl`]): its stdout, or a panic
/// naming the arguments and kubectl's stderr.
pub fn kubectl_at(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl kustomize DIR`: the rendered YAML.
pub fn render(dir: &std::path::Path) -> String {
    let out = std::process::Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 YAML")
}

/// A client of the served cluster `kubeconfig` names.
pub async fn client(kubeconfig: &std::path::Path) -> kube::Client {
    let kube = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kube, &Default::default())
        .await
        .unwrap();
    adapters::kube::client_from_config(config).unwrap()
}

/// `lifecycle run --run-for SECONDS` against `kubeconfig` with `clock` and `extra` flags: its
/// exit code and stderr.
pub fn run_controller(
    kubeconfig: &std::path::Path,
    journal: &std::path::Path,
    clock: &[String],
    seconds: u64,
    extra: &[&str],
) -> (i32, String) {
    let out = lifecycle()
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--run-for"])
        .arg(seconds.to_string())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--journal")
        .arg(journal)
        .args(clock)
        .args(extra)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
