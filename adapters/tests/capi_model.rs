//! The world's model of CAPI's manager under `sim serve`, driven with real `kubectl`: `kubectl
//! scale machineset` makes its MachineSet controller delete the newest Machine or create one.

use std::time::{Duration, Instant};

mod common;
use common::serve;

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn kubectl_scale_machineset_makes_the_model_delete_or_create_machines() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, _) = serve(dir.path(), "takeover-machineset-scaled", 1);
    let out = common::kubectl_at(&kubeconfig, &["scale", "machineset", "ms1", "--replicas=1"]);
    assert!(out.contains("scaled"), "{out}");
    eventually("m2, the newest, is being deleted", || {
        !common::kubectl_at(
            &kubeconfig,
            &[
                "get",
                "machine",
                "m2",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
        )
        .trim()
        .is_empty()
    });
    let m1 = common::kubectl_at(
        &kubeconfig,
        &[
            "get",
            "machine",
            "m1",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    );
    assert!(m1.trim().is_empty(), "m1 stays: {m1}");
    common::kubectl_at(&kubeconfig, &["scale", "machineset", "ms1", "--replicas=2"]);
    eventually("a Machine is created for the MachineSet", || {
        common::kubectl_at(&kubeconfig, &["get", "machines", "-o", "name"])
            .contains("machine.cluster.x-k8s.io/ms1-r1")
    });
}
