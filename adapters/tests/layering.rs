//! The crate layering: `lifecycle run`'s code (`controller`, the kube adapter and preflight)
//! links no simulator code. `sim` and `fakeapi` (the fake API server, `serve`, `play`) are
//! only its dev-dependencies, for tests against the fake server.

use std::process::Command;

/// The packages `package` links in a normal build (no dev-dependencies, no build scripts'),
/// by name, as `cargo tree` resolves them from the lock file.
fn linked(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_controller_links_no_simulator_code() {
    let controller = linked("controller");
    assert!(
        controller.iter().any(|p| p == "engine") && controller.iter().any(|p| p == "kube"),
        "the tree lists what the controller links: {controller:?}"
    );
    for simulated in ["sim", "fakeapi", "saphyr", "rand_chacha"] {
        assert!(
            !controller.iter().any(|p| p == simulated),
            "`controller` links `{simulated}`: the production path must not"
        );
    }
}

#[test]
fn the_fake_api_server_and_the_binary_sit_above_the_simulator() {
    let fakeapi = linked("fakeapi");
    assert!(fakeapi.iter().any(|p| p == "sim"), "{fakeapi:?}");
    assert!(!fakeapi.iter().any(|p| p == "controller"), "{fakeapi:?}");
    let binary = linked("adapters");
    for part in ["controller", "fakeapi", "sim", "wallclock"] {
        assert!(binary.iter().any(|p| p == part), "{part}: {binary:?}");
    }
}
