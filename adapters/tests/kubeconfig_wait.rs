//! Issue 26: a workload cluster whose kubeconfig Secret is missing, over HTTP, through the real
//! connector: `lifecycle sim serve` serves the world, the Secret is deleted before `lifecycle
//! run` starts, and the Machine deleted meanwhile says why it waits (its `Deleting` condition
//! and a Warning event); once the Secret is back the deletion goes on. The journal holds the
//! same input the simulator's connector gives for a missing Secret.

use adapters::serve::kubeconfig_secret;
use engine::connection::Unreachable;
use engine::model::{ClusterName, Scope};
use k8s_openapi::api::core::v1::{Event, Node, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::ApiResource;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;
use common::{Child, lifecycle, serve};

const WITHIN: Duration = Duration::from_secs(60);

async fn client(kubeconfig: &std::path::Path) -> kube::Client {
    let yaml = std::fs::read_to_string(kubeconfig).expect("sim serve wrote the kubeconfig");
    adapters::kube::client_from_kubeconfig(&yaml)
        .await
        .expect("a client for the served cluster")
}

fn machines(c: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    Api::namespaced_with(c.clone(), "default", &ApiResource::from_gvk(&gvk))
}

/// m1's `Deleting` condition (reason, message), if it has one.
async fn deleting(api: &Api<DynamicObject>) -> Option<(String, String)> {
    let m1 = api.get_opt("m1").await.ok()??;
    let conditions = m1.data.pointer("/status/conditions")?.as_array()?.clone();
    let c = conditions.iter().find(|c| c["type"] == "Deleting")?;
    Some((
        c["reason"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut probe: impl FnMut() -> F,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(started.elapsed() < WITHIN, "{what}: not within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_kubeconfig_secret_is_said_on_the_machine_and_the_deletion_goes_on_once_it_is_back()
 {
    let dir = tempfile::tempdir().unwrap();
    // m1 is deleted at 1m of the scenario: 6 s of real time at 10x.
    let (_server, kubeconfig, clock) = serve(dir.path(), "deletion-order-of-actions", 10);
    let management = client(&kubeconfig).await;
    let secrets: Api<Secret> = Api::namespaced(management.clone(), "default");
    secrets
        .delete("c1-kubeconfig", &DeleteParams::default())
        .await
        .expect("the served world has the Secret");
    let journal = dir.path().join("journal");
    let mut controller = Child(
        lifecycle()
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--journal")
            .arg(&journal)
            .args(&clock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lifecycle run starts"),
    );

    let api = machines(&management);
    let missing = "cannot reach workload cluster default/c1: its kubeconfig Secret \
                   default/c1-kubeconfig is missing";
    let (reason, message) = until("m1 says the Secret is missing", || async {
        deleting(&api)
            .await
            .filter(|(reason, _)| reason == "WorkloadClusterUnreachable")
    })
    .await;
    assert_eq!(reason, "WorkloadClusterUnreachable");
    assert!(message.starts_with(missing), "{message}");
    let events: Api<Event> = Api::namespaced(management.clone(), "default");
    let warned = until("the Warning event on m1", || async {
        let list = events.list(&Default::default()).await.ok()?;
        let warned: Vec<Event> = list
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("WorkloadClusterUnreachable")
                    && e.involved_object.name.as_deref() == Some("m1")
            })
            .collect();
        (!warned.is_empty()).then_some(warned)
    })
    .await;
    assert_eq!(warned.len(), 1, "one Warning event: {warned:?}");
    assert_eq!(warned[0].type_.as_deref(), Some("Warning"));
    assert!(
        warned[0]
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(missing)),
        "{warned:?}"
    );
    // Nothing reached the workload cluster: n1 is not cordoned.
    let workload = client(&dir.path().join("c1.kubeconfig")).await;
    let n1 = Api::<Node>::all(workload).get("n1").await.unwrap();
    assert_ne!(n1.spec.and_then(|s| s.unschedulable), Some(true));

    // The Secret is back (as CAPI's control plane provider writes it): the connector, retrying
    // every 5 s, connects, and the deletion goes on to its end.
    let yaml = std::fs::read_to_string(dir.path().join("c1.kubeconfig")).unwrap();
    let secret: Secret = serde_json::from_value(kubeconfig_secret("default", "c1", &yaml)).unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    until("m1 gone", || async {
        matches!(api.get_opt("m1").await, Ok(None)).then_some(())
    })
    .await;
    controller.sigterm();
    assert!(controller.exited(Duration::from_secs(30)).await.success());

    // The journal holds the input the simulator's connector gives for a missing Secret, once,
    // and the connection after it.
    let c1 = Scope::Workload(ClusterName::new("default", "c1"));
    let unreachable = engine::Input::ClusterUnreachable {
        scope: c1.clone(),
        reason: Some(Unreachable::SecretMissing),
    }
    .describe();
    let connected = engine::Input::ClusterUnreachable {
        scope: c1,
        reason: None,
    }
    .describe();
    let shown = lifecycle()
        .args(["log", "show", "--journal"])
        .arg(&journal)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    // Records, not the commands listed under them (`-> #1 ...`), which quote the reason too.
    let in_records = |text: &str| -> usize {
        shown
            .lines()
            .filter(|l| !l.trim_start().starts_with("->"))
            .map(|l| l.matches(text).count())
            .sum()
    };
    assert_eq!(
        in_records(&unreachable),
        1,
        "the reason journaled once, not every retry:\n{shown}"
    );
    assert_eq!(in_records(&connected), 1, "{shown}");
    let simulated = sim::run(
        &sim::scenario::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/faults-kubeconfig-missing.yaml"
        )))
        .unwrap(),
        &sim::RunOptions {
            no_journal: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        simulated.timeline.render_text().contains(&unreachable),
        "the simulator journals the same input"
    );
}
