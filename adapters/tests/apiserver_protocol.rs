//! The fake API server's protocol, exercised with an unmodified kube-rs client over HTTP on
//! 127.0.0.1.

use adapters::apiserver::{ApiServer, ServerOptions, SharedCluster};
use adapters::kube::client_for_url;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, GroupVersionKind, ListParams,
    Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sim::api::ClusterStore;
use std::time::Duration;

/// Every test finishes within this, or fails.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);

async fn serve(store: ClusterStore) -> (ApiServer, Client) {
    let options = ServerOptions {
        bookmark_interval: Duration::from_millis(200),
        controllers_interval: None,
        ..Default::default()
    };
    let server = ApiServer::start(
        SharedCluster::new(store),
        "127.0.0.1:0".parse().unwrap(),
        options,
    )
    .await
    .unwrap();
    let client = client_for_url(&server.url()).unwrap();
    (server, client)
}

fn now() -> engine::Timestamp {
    adapters::clock::wall_now()
}

fn pod(name: &str, node: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "app", "labels": labels},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}],
                    "terminationGracePeriodSeconds": 30},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
}

fn machines(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

/// A v1beta2 Machine spec the CRD schema accepts.
fn valid_machine_spec() -> Value {
    json!({"clusterName": "c1", "bootstrap": {"dataSecretName": "boot"},
           "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                 "kind": "DockerMachine", "name": "d1"}})
}

fn api_status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test timed out")
}

#[tokio::test]
async fn list_carries_its_resource_version_and_pages_with_continue() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        for i in 0..5 {
            store
                .create(pod(&format!("p{i}"), "n1", json!({"app": "web"})), now())
                .unwrap();
        }
        store
            .create(pod("other", "n2", json!({"app": "db"})), now())
            .unwrap();
        let (server, client) = serve(store).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "app");
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        let mut rvs = Vec::new();
        for _ in 0..10 {
            let mut lp = ListParams::default().limit(2).labels("app=web");
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = pods.list(&lp).await.unwrap();
            assert!(page.items.len() <= 2);
            names.extend(page.items.iter().map(|p| p.metadata.name.clone().unwrap()));
            rvs.push(page.metadata.resource_version.clone().unwrap());
            token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
        }
        assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"]);
        assert_eq!(rvs.len(), 3);
        assert!(
            rvs.iter().all(|rv| *rv == "6"),
            "one list RV for every page: {rvs:?}"
        );
        let on_n2 = pods
            .list(&ListParams::default().fields("spec.nodeName=n2"))
            .await
            .unwrap();
        assert_eq!(on_n2.items.len(), 1);
        let bad = pods
            .list(&ListParams::default().fields("spec.bogus=x"))
            .await
            .unwrap_err();
        assert_eq!(api_status(bad).code, 400);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn watch_from_a_resource_version_sees_added_modified_deleted_in_order() {
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let rv = nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let mut stream = nodes
            .watch(&WatchParams::default().timeout(10), &rv)
            .await
            .unwrap()
            .boxed();
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(node("n1")).unwrap(),
            )
            .await
            .unwrap();
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .unwrap();
        nodes.delete("n1", &DeleteParams::default()).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 3 {
            match stream
                .try_next()
                .await
                .unwrap()
                .expect("stream ended early")
            {
                WatchEvent::Added(n) => seen.push(("ADDED", n.metadata.resource_version.unwrap())),
                WatchEvent::Modified(n) => {
                    assert_eq!(n.spec.unwrap().unschedulable, Some(true));
                    seen.push(("MODIFIED", n.metadata.resource_version.unwrap()))
                }
                WatchEvent::Deleted(n) => {
                    seen.push(("DELETED", n.metadata.resource_version.unwrap()))
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("unexpected error event {e:?}"),
            }
        }
        assert_eq!(
            seen,
            [
                ("ADDED", "1".into()),
                ("MODIFIED", "2".into()),
                ("DELETED", "3".into())
            ]
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn too_old_resource_version_is_an_in_stream_410_and_the_watcher_relists() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store.create(node("n0"), now()).unwrap();
        let (server, client) = serve(store).await;
        let nodes: Api<Node> = Api::all(client.clone());
        // Writes before the server started are not in its change log: RV 0 < 1 is too old.
        let mut stream = nodes
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        // "0" means "any": that one starts with the current objects.
        assert!(matches!(
            stream.try_next().await.unwrap(),
            Some(WatchEvent::Added(_))
        ));
        drop(stream);
        server.cluster().expire_watches(|store| {
            store.create(node("n9"), now()).unwrap();
        });
        let mut stream = nodes
            .watch(&WatchParams::default(), "1")
            .await
            .unwrap()
            .boxed();
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Error(status)) => {
                assert_eq!(status.code, 410);
                assert_eq!(status.reason, "Expired");
            }
            other => panic!("expected an ERROR event, got {other:?}"),
        }
        assert!(
            stream.try_next().await.unwrap().is_none(),
            "the stream ends after the ERROR"
        );

        let mut events = watcher(nodes.clone(), watcher::Config::default()).boxed();
        let mut inits = 0;
        let mut init_names: Vec<Vec<String>> = Vec::new();
        let mut gone = 0;
        while inits < 2 {
            let event = match events.next().await.expect("the watcher never ends") {
                Ok(e) => e,
                Err(watcher::Error::WatchError(s)) if s.code == 410 => {
                    gone += 1;
                    continue;
                }
                Err(e) => panic!("unexpected watcher error {e:?}"),
            };
            match event {
                watcher::Event::Init => init_names.push(Vec::new()),
                watcher::Event::InitApply(n) => init_names
                    .last_mut()
                    .unwrap()
                    .push(n.metadata.name.unwrap()),
                watcher::Event::InitDone => {
                    inits += 1;
                    if inits == 1 {
                        // The watcher now watches from the list RV; make that RV too old and
                        // drop its connection: it must get the 410 and relist.
                        server.cluster().expire_watches(|store| {
                            store.create(node("n1"), now()).unwrap();
                        });
                    }
                }
                watcher::Event::Apply(_) | watcher::Event::Delete(_) => {}
            }
        }
        assert_eq!(gone, 1, "the watcher saw the 410 once, then relisted");
        assert_eq!(
            init_names,
            [
                vec!["n0".to_string(), "n9".into()],
                vec!["n0".into(), "n1".into(), "n9".into()]
            ]
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn merge_patch_and_status_subresource_are_separate() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                           "metadata": {"name": "m1", "namespace": "default"},
                           "spec": valid_machine_spec(), "status": {"phase": "Running"}}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let api = machines(&client);
        let m = api
            .patch(
                "m1",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"providerID": "p://1"}, "status": {"phase": "Failed"}}),
                ),
            )
            .await
            .unwrap();
        assert_eq!(m.data["spec"]["providerID"], "p://1");
        assert_eq!(
            m.data["status"]["phase"], "Running",
            "main writes ignore status"
        );
        assert_eq!(m.metadata.generation, Some(2));
        let m = api
            .patch_status(
                "m1",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"providerID": "x"}, "status": {"phase": "Deleting"}}),
                ),
            )
            .await
            .unwrap();
        assert_eq!(m.data["status"]["phase"], "Deleting");
        assert_eq!(
            m.data["spec"]["providerID"], "p://1",
            "status writes ignore spec"
        );
        assert_eq!(
            m.metadata.generation,
            Some(2),
            "status writes do not bump generation"
        );
        // A stale resourceVersion in a merge patch is a precondition: 409.
        let stale = api
            .patch(
                "m1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})),
            )
            .await
            .unwrap_err();
        let s = api_status(stale);
        assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
        // Strategic merge patch is not for custom resources; server-side apply is not served.
        let sm = api
            .patch(
                "m1",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {}})),
            )
            .await
            .unwrap_err();
        assert_eq!(api_status(sm).code, 415);
        // A JSON patch whose test fails is 422.
        let jp: json_patch_ops::Ops = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["x"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "y"}]))
        .unwrap();
        let req =
            http::Request::patch("/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines/m1")
                .header("content-type", "application/json-patch+json")
                .body(serde_json::to_vec(&jp).unwrap())
                .unwrap();
        let err = client.request_text(req).await.unwrap_err();
        let s = api_status(err);
        assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
        server.shutdown().await;
    })
    .await;
}

/// JSON patch bodies without the `jsonpatch` feature of kube.
mod json_patch_ops {
    pub type Ops = Vec<serde_json::Value>;
}

#[tokio::test]
async fn delete_with_finalizers_sets_deletion_timestamp_until_the_last_one_goes() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                           "metadata": {"name": "m1", "namespace": "default",
                                        "finalizers": ["machine.cluster.x-k8s.io"]},
                           "spec": {"clusterName": "c1"}}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let api = machines(&client);
        let deleted = api.delete("m1", &DeleteParams::default()).await.unwrap();
        let m = deleted
            .left()
            .expect("the object comes back while finalizers hold it");
        assert!(m.metadata.deletion_timestamp.is_some());
        // New finalizers cannot be added any more.
        let add = api
            .patch(
                "m1",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"finalizers": ["machine.cluster.x-k8s.io", "x"]}}),
                ),
            )
            .await
            .unwrap_err();
        assert_eq!(api_status(add).code, 422);
        let rv = m.metadata.resource_version.clone().unwrap();
        let mut stream = api
            .watch(&WatchParams::default().timeout(10), &rv)
            .await
            .unwrap()
            .boxed();
        api.patch(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        loop {
            match stream
                .try_next()
                .await
                .unwrap()
                .expect("stream ended early")
            {
                WatchEvent::Deleted(o) => {
                    assert_eq!(o.metadata.name.as_deref(), Some("m1"));
                    break;
                }
                WatchEvent::Bookmark(_) => {}
                other => panic!("expected DELETED, got {other:?}"),
            }
        }
        let gone = api.get("m1").await.unwrap_err();
        let s = api_status(gone);
        assert_eq!(s.code, 404);
        assert_eq!(s.message, "machines.cluster.x-k8s.io \"m1\" not found");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn eviction_answers_201_404_and_429_with_the_pdb_status_body() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        for name in ["web-0", "web-1"] {
            store.create(pod(name, "n1", json!({"app": "web"})), now()).unwrap();
        }
        store.create(pod("solo", "n1", json!({"app": "solo"})), now()).unwrap();
        store
            .create(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": "web", "namespace": "app"},
                           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}), now())
            .unwrap();
        let (server, client) = serve(store).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "app");
        // kube's EvictParams body shape.
        let ok = pods.evict("solo", &EvictParams::default()).await.unwrap();
        assert_eq!(ok.code, 201);
        assert!(pods.get("solo").await.unwrap().metadata.deletion_timestamp.is_some());
        let missing = api_status(pods.evict("nope", &EvictParams::default()).await.unwrap_err());
        assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
        // The policy/v1 Eviction body shape, with a grace period.
        let eviction = k8s_openapi::api::policy::v1::Eviction {
            metadata: kube::api::ObjectMeta { name: Some("web-0".into()), namespace: Some("app".into()), ..Default::default() },
            delete_options: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
                grace_period_seconds: Some(5),
                ..Default::default()
            }),
        };
        let refused = pods
            .create_subresource::<_, kube::core::Status>("eviction", "web-0", &PostParams::default(), &eviction)
            .await
            .unwrap_err();
        let s = api_status(refused);
        assert_eq!(s.code, 429);
        assert_eq!(s.reason, "TooManyRequests");
        assert_eq!(s.message, "Cannot evict pod as it would violate the pod's disruption budget.");
        let causes = s.details.unwrap().causes;
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].reason, "DisruptionBudget");
        assert_eq!(causes[0].message, "The disruption budget web needs 2 healthy pods and has 2 currently");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn create_of_an_existing_name_is_409_and_terminating_namespaces_forbid_new_content() {
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let n: Node = serde_json::from_value(node("n1")).unwrap();
        let created = nodes.create(&PostParams::default(), &n).await.unwrap();
        assert_eq!(created.metadata.generation, Some(1));
        assert!(created.metadata.uid.is_some());
        let s = api_status(nodes.create(&PostParams::default(), &n).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
        assert_eq!(s.message, "nodes \"n1\" already exists");
        // PUT with a stale resourceVersion is a conflict too.
        let mut stale = created.clone();
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
            )
            .await
            .unwrap();
        stale.metadata.labels = Some([("c".to_string(), "d".to_string())].into());
        let s = api_status(
            nodes
                .replace("n1", &PostParams::default(), &stale)
                .await
                .unwrap_err(),
        );
        assert_eq!(s.code, 409);

        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "app"}})).unwrap(),
            )
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "app");
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod("p", "n1", json!({}))).unwrap(),
        )
        .await
        .unwrap();
        namespaces
            .delete("app", &DeleteParams::default())
            .await
            .unwrap();
        let s = api_status(
            pods.create(
                &PostParams::default(),
                &serde_json::from_value(pod("q", "n1", json!({}))).unwrap(),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(s.code, 403);
        assert_eq!(s.details.unwrap().causes[0].reason, "NamespaceTerminating");
        let s = api_status(pods.evict("p", &EvictParams::default()).await.unwrap_err());
        assert_eq!(s.code, 403);
        assert!(
            s.message.contains("because it is being terminated"),
            "{}",
            s.message
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn dry_run_answers_what_would_be_stored_and_stores_nothing() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                       "metadata": {"name": "m1", "namespace": "default"},
                       "spec": {"clusterName": "c1"}}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let api = machines(&client);
        let list_rv = |api: Api<DynamicObject>| async move {
            api.list(&ListParams::default())
                .await
                .unwrap()
                .metadata
                .resource_version
                .unwrap()
        };
        let rv_before = list_rv(api.clone()).await;
        let dry_post = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let new: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m-dry", "namespace": "default"},
            "spec": valid_machine_spec()}))
        .unwrap();
        let created = api.create(&dry_post, &new).await.unwrap();
        assert_eq!(created.metadata.name.as_deref(), Some("m-dry"));
        assert!(created.metadata.uid.is_some(), "defaulting ran");
        assert_eq!(api_status(api.get("m-dry").await.unwrap_err()).code, 404);

        let patched = api
            .patch(
                "m1",
                &PatchParams::default().dry_run(),
                &Patch::Merge(json!({"metadata": {"labels": {"dry": "yes"}}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.labels().get("dry").map(String::as_str), Some("yes"));
        let mut replaced = api.get("m1").await.unwrap();
        assert!(replaced.labels().is_empty(), "the dry patch was not stored");
        replaced.labels_mut().insert("put".into(), "yes".into());
        let answer = api.replace("m1", &dry_post, &replaced).await.unwrap();
        assert_eq!(answer.labels().get("put").map(String::as_str), Some("yes"));

        let dry_delete = DeleteParams {
            dry_run: true,
            ..Default::default()
        };
        api.delete("m1", &dry_delete).await.unwrap();
        let kept = api.get("m1").await.unwrap();
        assert!(kept.labels().is_empty());
        assert!(kept.metadata.deletion_timestamp.is_none());
        assert_eq!(list_rv(api.clone()).await, rv_before, "nothing was written");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_body_over_3_mib_is_413_and_version_is_complete() {
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let big: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "big", "namespace": "default",
                         "annotations": {"a": "x".repeat(3 << 20)}}}))
        .unwrap();
        let err = machines(&client)
            .create(&PostParams::default(), &big)
            .await
            .unwrap_err();
        let s = api_status(err);
        assert_eq!((s.code, s.reason.as_str()), (413, "RequestEntityTooLarge"));
        let v = client.apiserver_version().await.unwrap();
        assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "32"));
        assert!(!v.build_date.is_empty() && !v.git_commit.is_empty());
        assert_eq!(v.git_tree_state, "clean");
        server.shutdown().await;
    })
    .await;
}

/// kubectl writes the whole body before it reads the answer: the server must read (and
/// discard) the excess so the client sees the 413, not a broken pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_still_writing_a_refused_body_reads_the_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    bounded(async {
        let (server, _client) = serve(ClusterStore::new("t")).await;
        let body = vec![b'x'; 16 << 20];
        let mut conn = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let head = format!(
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        for chunk in body.chunks(64 << 10) {
            conn.write_all(chunk)
                .await
                .expect("the server reads a refused body to its end");
        }
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("RequestEntityTooLarge") {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "closed before the status: {}",
                String::from_utf8_lossy(&answer)
            );
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(
            answer.starts_with(b"HTTP/1.1 413"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        server.shutdown().await;
    })
    .await;
}

/// A chunked body (no `Content-Length`) is refused as soon as it passes 3 MiB, while the
/// client is still sending it: the 413 comes at once, not when the body ends (this one never
/// does) or the request times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_3_mib_is_413_before_it_ends() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    bounded(async {
        let (server, _client) = serve(ClusterStore::new("t")).await;
        let mut conn = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        conn.write_all(
            b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\
              Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .await
        .unwrap();
        let chunk = vec![b' '; 64 << 10];
        for _ in 0..(3 << 20) / chunk.len() + 1 {
            conn.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await
                .unwrap();
            conn.write_all(&chunk).await.unwrap();
            conn.write_all(b"\r\n").await.unwrap();
        }
        let started = std::time::Instant::now();
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(5), async {
            while !String::from_utf8_lossy(&answer).contains("RequestEntityTooLarge") {
                let n = conn.read(&mut buf).await.unwrap();
                assert!(
                    n > 0,
                    "closed before the status: {}",
                    String::from_utf8_lossy(&answer)
                );
                answer.extend_from_slice(&buf[..n]);
            }
        })
        .await;
        assert!(
            read.is_ok(),
            "no 413 within {:?} of the body passing 3 MiB",
            started.elapsed()
        );
        assert!(
            answer.starts_with(b"HTTP/1.1 413"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn updates_that_rename_or_change_kind_are_400() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                       "metadata": {"name": "m1", "namespace": "default"},
                       "spec": {"clusterName": "c1"}}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let api = machines(&client);
        for (patch, message) in [
            (
                json!({"metadata": {"name": "m2"}}),
                "the name of the object (m2) does not match the name on the URL (m1)",
            ),
            (
                json!({"metadata": {"namespace": "other"}}),
                "the namespace of the object (other) does not match the namespace on the URL (default)",
            ),
            (
                json!({"kind": "Secret"}),
                "the kind of the object (Secret) does not match the kind on the URL (Machine)",
            ),
        ] {
            let err = api
                .patch("m1", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap_err();
            let s = api_status(err);
            assert_eq!((s.code, s.message.as_str()), (400, message));
        }
        let kept = api.get("m1").await.unwrap();
        assert_eq!(kept.metadata.namespace.as_deref(), Some("default"));
        server.shutdown().await;
    })
    .await;
}

/// A write of `body` with `method` and `content_type` to `path`: the Status of its refusal.
async fn refused(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> kube::core::Status {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    api_status(client.request_text(request).await.unwrap_err())
}

const MACHINE_M1: &str = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines/m1";

/// An update never changes the stored apiVersion (there is no conversion): a merge or JSON
/// patch that sets another is 400 as one changing the kind is, a PUT or POST in another version
/// than its URL's too; the v1beta2 list never holds a v1beta1 object.
#[tokio::test]
async fn updates_that_change_the_api_version_are_400() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                       "metadata": {"name": "m1", "namespace": "default"},
                       "spec": valid_machine_spec()}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let old = "cluster.x-k8s.io/v1beta1";
        let message = format!(
            "the API version in the data ({old}) does not match the expected API version (cluster.x-k8s.io/v1beta2)"
        );
        let merge = refused(&client, "PATCH", MACHINE_M1, "application/merge-patch+json",
                            json!({"apiVersion": old})).await;
        let json_patch = refused(&client, "PATCH", MACHINE_M1, "application/json-patch+json",
                                 json!([{"op": "replace", "path": "/apiVersion", "value": old}])).await;
        let mut stored = machines(&client).get("m1").await.unwrap();
        stored.types.as_mut().unwrap().api_version = old.to_string();
        let put = refused(&client, "PUT", MACHINE_M1, "application/json",
                          serde_json::to_value(&stored).unwrap()).await;
        let mut other = serde_json::to_value(&stored).unwrap();
        other["metadata"] = json!({"name": "m2", "namespace": "default"});
        let post = refused(&client, "POST", "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines",
                           "application/json", other).await;
        for (how, s) in [("merge", merge), ("json", json_patch), ("put", put), ("post", post)] {
            assert_eq!((s.code, s.reason.as_str(), s.message.as_str()), (400, "BadRequest", message.as_str()), "{how}");
        }
        let listed = machines(&client).list(&ListParams::default()).await.unwrap();
        let versions: Vec<String> = listed.items.iter().map(|m| m.types.as_ref().unwrap().api_version.clone()).collect();
        assert_eq!(versions, ["cluster.x-k8s.io/v1beta2"]);
        // Naming the version it has changes nothing and is no error.
        machines(&client)
            .patch("m1", &PatchParams::default(), &Patch::Merge(json!({"apiVersion": "cluster.x-k8s.io/v1beta2"})))
            .await
            .unwrap();
        server.shutdown().await;
    })
    .await;
}

fn config_maps(client: &Client) -> Api<k8s_openapi::api::core::v1::ConfigMap> {
    Api::namespaced(client.clone(), "default")
}

/// Label keys and values and annotation keys the real server refuses are 422 `Invalid` with a
/// cause naming `metadata.labels` / `metadata.annotations`, on create and on update, for
/// custom and built-in kinds alike; what it accepts is stored.
#[tokio::test]
async fn invalid_labels_and_annotation_keys_are_422_naming_the_field() {
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let machine = |meta: Value| -> DynamicObject {
            let mut metadata = json!({"name": "m1", "namespace": "default"});
            sjson_merge(&mut metadata, meta);
            serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": metadata, "spec": valid_machine_spec()}))
            .unwrap()
        };
        let refused = [
            (json!({"labels": {"pool": "ü"}}), "metadata.labels", "\"ü\""),
            (json!({"labels": {"pool": "a".repeat(64)}}), "metadata.labels", "must be no more than 63 characters"),
            (json!({"labels": {"a/b/c": "x"}}), "metadata.labels", "a qualified name must consist"),
            (json!({"labels": {"Example.com/x": "x"}}), "metadata.labels", "prefix part a lowercase RFC 1123 subdomain"),
            (json!({"annotations": {"ünïcode": "x"}}), "metadata.annotations", "name part must consist"),
            (json!({"annotations": {"bad key": "x"}}), "metadata.annotations", "\"bad key\""),
        ];
        let api = machines(&client);
        for (meta, field, says) in &refused {
            let err = api.create(&PostParams::default(), &machine(meta.clone())).await.unwrap_err();
            let s = api_status(err);
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{meta}");
            assert!(s.message.starts_with("Machine.cluster.x-k8s.io \"m1\" is invalid: "), "{}", s.message);
            let causes = s.details.unwrap().causes;
            assert_eq!(causes[0].field, *field, "{meta}");
            assert!(causes[0].message.contains(says), "{meta}: {}", causes[0].message);
        }
        // Accepted: an uppercase annotation key (judged lowercased), any annotation value, an
        // empty label value; then an update adding a bad label is refused and stores nothing.
        let ok = json!({"labels": {"cluster.x-k8s.io/cluster-name": "c1", "empty": "", "My_Label": "V.1"},
                        "annotations": {"Example.com/Some-Key": "ü any value"}});
        api.create(&PostParams::default(), &machine(ok)).await.unwrap();
        let s = api_status(api.patch("m1", &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"new": "ü"}}}))).await.unwrap_err());
        assert_eq!((s.code, s.details.unwrap().causes[0].field.as_str()), (422, "metadata.labels"));
        assert!(!api.get("m1").await.unwrap().labels().contains_key("new"));

        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "cm", "annotations": {"ünïcode/x": "y"}}})).unwrap();
        let s = api_status(config_maps(&client).create(&PostParams::default(), &cm).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
        assert!(s.message.starts_with("ConfigMap \"cm\" is invalid: metadata.annotations: Invalid value: \"ünïcode/x\": prefix part"), "{}", s.message);
        server.shutdown().await;
    })
    .await;
}

/// Secret `stringData` is folded into `data` (base64; it wins over a key in both) on create,
/// merge patch and PUT, and never stored or served, as the real server does.
#[tokio::test]
async fn secret_string_data_is_stored_as_base64_data() {
    use k8s_openapi::api::core::v1::Secret;
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let api: Api<Secret> = Api::namespaced(client.clone(), "default");
        let path = "/api/v1/namespaces/default/secrets/s1";
        let raw = |p: &'static str| get_json(&client, p, "application/json");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s1"},
            "data": {"kept": "a2VwdA==", "both": "b2xk"},
            "stringData": {"both": "new", "plain": "hello ü"}}))
        .unwrap();
        api.create(&PostParams::default(), &secret).await.unwrap();
        let stored = raw(path).await;
        assert_eq!(
            stored["data"],
            json!({"kept": "a2VwdA==", "both": "bmV3", "plain": "aGVsbG8gw7w="})
        );
        assert!(stored.get("stringData").is_none(), "{stored}");

        api.patch(
            "s1",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"plain": "bye"}})),
        )
        .await
        .unwrap();
        let patched = raw(path).await;
        assert_eq!(patched["data"]["plain"], "Ynll");
        assert!(patched.get("stringData").is_none(), "{patched}");

        let mut replaced = api.get("s1").await.unwrap();
        replaced.string_data = Some([("put".to_string(), "x".to_string())].into());
        api.replace("s1", &PostParams::default(), &replaced)
            .await
            .unwrap();
        let put = raw(path).await;
        assert_eq!(put["data"]["put"], "eA==");
        assert_eq!(put["data"]["kept"], "a2VwdA==");
        assert!(put.get("stringData").is_none(), "{put}");

        let s = refused(
            &client,
            "POST",
            "/api/v1/namespaces/default/secrets",
            "application/json",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s2"},
                               "stringData": {"n": 1}}),
        )
        .await;
        assert_eq!(
            (s.code, s.reason.as_str()),
            (400, "BadRequest"),
            "{}",
            s.message
        );
        server.shutdown().await;
    })
    .await;
}

/// Merges the keys of `extra` into `base` (one level).
fn sjson_merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
}

#[tokio::test]
async fn invalid_names_are_422_with_a_metadata_name_cause() {
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let api = machines(&client);
        for name in ["a.b..c", "UPPER", &"a".repeat(300)] {
            let m: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "namespace": "default"}}))
            .unwrap();
            let s = api_status(api.create(&PostParams::default(), &m).await.unwrap_err());
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{name}");
            let causes = s.details.unwrap().causes;
            assert_eq!(causes[0].field, "metadata.name");
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn schema_violations_are_422_with_causes_and_strict_refuses_unknown_fields() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        // Stored below validation (as a scenario would): no bootstrap, no infrastructureRef.
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                       "metadata": {"name": "old", "namespace": "default"},
                       "spec": {"clusterName": "c1"}}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let api = machines(&client);
        let bad: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"clusterName": "", "deletion": {"nodeDrainTimeoutSeconds": "soon"}}}))
        .unwrap();
        for params in [
            PostParams::default(),
            PostParams {
                dry_run: true,
                ..Default::default()
            },
        ] {
            let s = api_status(api.create(&params, &bad).await.unwrap_err());
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert!(
                s.message
                    .starts_with("Machine.cluster.x-k8s.io \"bad\" is invalid: ["),
                "{}",
                s.message
            );
            let details = s.details.unwrap();
            assert_eq!(details.kind, "Machine");
            let fields: Vec<&str> = details.causes.iter().map(|c| c.field.as_str()).collect();
            assert_eq!(
                fields,
                [
                    "spec.clusterName",
                    "spec.deletion.nodeDrainTimeoutSeconds",
                    "spec.bootstrap",
                    "spec.infrastructureRef"
                ]
            );
        }
        assert_eq!(api_status(api.get("bad").await.unwrap_err()).code, 404);

        // An update is checked where it changes the object; what it left alone is ratcheted.
        let labelled = api
            .patch(
                "old",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
            )
            .await
            .unwrap();
        assert_eq!(labelled.labels()["a"], "b");
        let s = api_status(
            api.patch(
                "old",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"deletion": {"nodeDrainTimeoutSeconds": -1}}})),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(s.code, 422);
        let fields: Vec<String> = s
            .details
            .unwrap()
            .causes
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.deletion.nodeDrainTimeoutSeconds",
                "spec.bootstrap",
                "spec.infrastructureRef"
            ],
            "a changed spec is judged whole"
        );
        assert!(
            api.get("old").await.unwrap().data["spec"]
                .get("deletion")
                .is_none()
        );
        // Status writes are checked too: a v1beta2 condition needs its message.
        let s = api_status(
            api.patch_status(
                "old",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                    "reason": "Ok", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}),
                ),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            s.details.unwrap().causes[0].field,
            "status.conditions[0].message"
        );

        // Unknown fields: Strict refuses (400), the default prunes with a Warning header.
        let unknown = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "extra", "namespace": "default"},
            "spec": valid_machine_spec()});
        let mut with_extra = unknown.clone();
        with_extra["spec"]["colour"] = json!("blue");
        let url = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines";
        let post = |query: &str| {
            http::Request::post(format!("{url}{query}"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&with_extra).unwrap())
                .unwrap()
        };
        let s = api_status(
            client
                .request::<DynamicObject>(post("?fieldValidation=Strict"))
                .await
                .unwrap_err(),
        );
        assert_eq!(s.code, 400);
        assert!(
            s.message
                .ends_with("strict decoding error: unknown field \"spec.colour\""),
            "{}",
            s.message
        );
        let response = client
            .send(post("").map(kube::client::Body::from))
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        let warning = response.headers()["warning"].to_str().unwrap().to_string();
        assert_eq!(warning, r#"299 - "unknown field \"spec.colour\"""#);
        let stored = api.get("extra").await.unwrap();
        assert!(stored.data["spec"].get("colour").is_none(), "pruned");
        let s = api_status(
            client
                .request::<DynamicObject>(post("?fieldValidation=Loose"))
                .await
                .unwrap_err(),
        );
        assert_eq!(s.code, 400);
        server.shutdown().await;
    })
    .await;
}

/// GET `path` with `accept` and parses the JSON answer.
async fn get_json(client: &Client, path: &str, accept: &str) -> Value {
    let request = http::Request::get(path)
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    serde_json::from_str(&text).unwrap()
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

#[tokio::test]
async fn tables_carry_printer_columns_and_kubectl_columns() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                       "metadata": {"name": "m1", "namespace": "default"},
                       "spec": valid_machine_spec(),
                       "status": {"phase": "Running", "nodeRef": {"name": "n1"}}}),
                now(),
            )
            .unwrap();
        let mut n1 = node("n1");
        n1["spec"]["unschedulable"] = json!(true);
        n1["metadata"]["labels"] = json!({"node-role.kubernetes.io/control-plane": ""});
        store.create(n1, now()).unwrap();
        store
            .create(pod("p1", "n1", json!({"app": "web"})), now())
            .unwrap();
        let (server, client) = serve(store).await;
        let t = get_json(
            &client,
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines",
            TABLE,
        )
        .await;
        assert_eq!(
            (t["kind"].as_str(), t["apiVersion"].as_str()),
            (Some("Table"), Some("meta.k8s.io/v1"))
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        let at = |n: &str| names.iter().position(|c| *c == n).unwrap();
        let row = &t["rows"][0];
        assert_eq!(row["cells"][at("Name")], "m1");
        assert_eq!(row["cells"][at("Cluster")], "c1");
        assert_eq!(row["cells"][at("Node Name")], "n1");
        assert_eq!(row["cells"][at("Phase")], "Running");
        assert!(row["cells"][at("Age")].as_str().unwrap().ends_with('s'));
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["metadata"]["namespace"], "default");
        assert!(t["metadata"]["resourceVersion"].is_string());

        let t = get_json(&client, "/api/v1/nodes/n1?includeObject=Object", TABLE).await;
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "control-plane");
        assert_eq!(t["rows"][0]["object"]["kind"], "Node");
        let t = get_json(
            &client,
            "/api/v1/namespaces/app/pods?includeObject=None",
            TABLE,
        )
        .await;
        let defs: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(&defs[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
        assert_eq!(t["rows"][0]["cells"][2], "Running");
        assert!(t["rows"][0].get("object").is_none());
        // Without the Table media type the answer is the list.
        let list = get_json(&client, "/api/v1/nodes", "application/json").await;
        assert_eq!(list["kind"], "NodeList");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn openapi_v3_serves_crd_schemas_and_v2_is_protobuf() {
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let index = get_json(&client, "/openapi/v3", "application/json").await;
        let url = index["paths"]["apis/cluster.x-k8s.io/v1beta2"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .to_string();
        let doc = get_json(&client, &url, "application/json").await;
        let machine = &doc["components"]["schemas"]["io.x-k8s.cluster.v1beta2.Machine"];
        assert_eq!(
            machine["x-kubernetes-group-version-kind"],
            json!([{"group": "cluster.x-k8s.io", "version": "v1beta2", "kind": "Machine"}])
        );
        assert!(machine["properties"]["spec"]["required"].is_array());
        let core = index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .to_string();
        let doc = get_json(&client, &core, "application/json").await;
        assert!(
            doc["components"]["schemas"]["io.k8s.api.core.v1.Node"]["properties"]["spec"]
                .is_object()
        );
        // OpenAPI v2 is the gnostic protobuf Document: field 1 (swagger) is "2.0".
        let response = client
            .send(
                http::Request::get("/openapi/v2")
                    .body(kube::client::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(
            response.headers()["content-type"],
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        );
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..5], b"\x0a\x032.0");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("io.x-k8s.cluster.v1beta2.Machine") && text.contains("dryRun"));
        server.shutdown().await;
    })
    .await;
}

/// A number the real server does not take as an integer (`1e+99`, beyond 64 bits, a
/// fraction) in a `type: integer` field is 422 `Invalid` naming the field, on create and on
/// patch; an integral float within ±(2^53 - 1) is an integer.
#[tokio::test]
async fn a_non_integer_number_in_an_integer_field_is_422() {
    bounded(async {
        let (server, client) = serve(ClusterStore::new("t")).await;
        let pools = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machinepools";
        let pool = |name: &str, replicas: Value| {
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"clusterName": "c1", "replicas": replicas,
                            "template": {"spec": valid_machine_spec()}}})
        };
        for replicas in [
            json!(1e99),
            json!(-1e99),
            json!(u64::MAX),
            json!(1.5),
            json!(9.007_199_254_740_992e15),
        ] {
            let s = refused(
                &client,
                "POST",
                pools,
                "application/json",
                pool("mp", replicas.clone()),
            )
            .await;
            assert_eq!(
                (s.code, s.reason.as_str()),
                (422, "Invalid"),
                "{replicas}: {}",
                s.message
            );
            let causes = s.details.unwrap().causes;
            assert_eq!(
                (causes[0].field.as_str(), causes[0].reason.as_str()),
                ("spec.replicas", "FieldValueTypeInvalid"),
                "{replicas}"
            );
        }
        let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachinePool");
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
        let created: DynamicObject = serde_json::from_value(pool("mp", json!(3.0))).unwrap();
        api.create(&PostParams::default(), &created).await.unwrap();
        let s = refused(
            &client,
            "PATCH",
            &format!("{pools}/mp"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 1e99}}),
        )
        .await;
        assert_eq!(
            (s.code, s.details.unwrap().causes[0].field.as_str()),
            (422, "spec.replicas")
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn machine_pools_scale_through_the_scale_subresource() {
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
                       "metadata": {"name": "mp", "namespace": "default"},
                       "spec": {"clusterName": "c1", "replicas": 2,
                                "template": {"spec": valid_machine_spec()}},
                       "status": {"replicas": 1}}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachinePool");
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
        let scale = api.get_scale("mp").await.unwrap();
        assert_eq!(scale.spec.unwrap().replicas, Some(2));
        assert_eq!(scale.status.unwrap().replicas, 1);
        let scaled = api
            .patch_scale(
                "mp",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 4}})),
            )
            .await
            .unwrap();
        assert_eq!(
            scaled.spec.unwrap().replicas,
            Some(4),
            "the answer is the stored Scale"
        );
        let mp = api.get("mp").await.unwrap();
        assert_eq!(mp.data["spec"]["replicas"], 4);
        assert_eq!(mp.metadata.generation, Some(2));
        let s = api_status(
            api.patch_scale(
                "mp",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": -1}})),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            (s.code, s.details.unwrap().causes[0].field.as_str()),
            (422, "spec.replicas")
        );
        let discovery = get_json(
            &client,
            "/apis/cluster.x-k8s.io/v1beta2",
            "application/json",
        )
        .await;
        let scale_resource = discovery["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "machinepools/scale")
            .cloned()
            .unwrap();
        assert_eq!(scale_resource["kind"], "Scale");
        assert!(
            !discovery["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "machines/scale"),
            "Machines have no scale subresource"
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn events_k8s_io_v1_is_a_view_of_the_core_events() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    bounded(async {
        let mut store = ClusterStore::new("t");
        store
            .create(
                json!({"apiVersion": "v1", "kind": "Event",
                       "metadata": {"name": "e1", "namespace": "default"},
                       "involvedObject": {"kind": "Machine", "name": "m1", "namespace": "default"},
                       "reason": "Drained", "message": "drained n1", "type": "Normal", "count": 3}),
                now(),
            )
            .unwrap();
        let (server, client) = serve(store).await;
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
        let listed = events.list(&ListParams::default()).await.unwrap();
        let e1 = &listed.items[0];
        assert_eq!(e1.note.as_deref(), Some("drained n1"));
        assert_eq!(e1.regarding.as_ref().unwrap().name.as_deref(), Some("m1"));
        assert_eq!(e1.deprecated_count, Some(3));

        let new: Event = serde_json::from_value(json!({
            "metadata": {"name": "e2", "namespace": "default"},
            "regarding": {"kind": "Node", "name": "n1"}, "reason": "Cordoned",
            "note": "cordoned n1", "type": "Normal", "reportingController": "lifecycle",
            "reportingInstance": "lifecycle-0", "action": "Cordon",
            "eventTime": "2025-01-01T00:00:00.000000Z"}))
        .unwrap();
        let created = events.create(&PostParams::default(), &new).await.unwrap();
        assert_eq!(created.note.as_deref(), Some("cordoned n1"));
        let stored = core.get("e2").await.unwrap();
        assert_eq!(stored.message.as_deref(), Some("cordoned n1"));
        assert_eq!(stored.involved_object.name.as_deref(), Some("n1"));
        assert_eq!(stored.reporting_component.as_deref(), Some("lifecycle"));

        let patched = events
            .patch(
                "e2",
                &PatchParams::default(),
                &Patch::Merge(json!({"note": "again"})),
            )
            .await
            .unwrap();
        assert_eq!(patched.note.as_deref(), Some("again"));
        assert_eq!(
            core.get("e2").await.unwrap().message.as_deref(),
            Some("again")
        );

        // A watch of the view sees the core write converted.
        let rv = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let mut stream = events
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        core.patch(
            "e1",
            &PatchParams::default(),
            &Patch::Merge(json!({"message": "later"})),
        )
        .await
        .unwrap();
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Modified(e) => assert_eq!(e.note.as_deref(), Some("later")),
            other => panic!("expected MODIFIED, got {other:?}"),
        }
        let discovery = get_json(&client, "/apis/events.k8s.io/v1", "application/json").await;
        assert_eq!(discovery["resources"][0]["name"], "events");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_429_slow_requests_504_and_idle_connections_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    bounded(async {
        let options = ServerOptions {
            controllers_interval: None,
            request_timeout: Duration::from_millis(300),
            max_requests_inflight: 1,
            idle_timeout: Duration::from_millis(300),
            header_read_timeout: Duration::from_millis(300),
            ..Default::default()
        };
        let mut store = ClusterStore::new("t");
        store.create(node("n1"), now()).unwrap();
        let server = ApiServer::start(
            SharedCluster::new(store),
            "127.0.0.1:0".parse().unwrap(),
            options,
        )
        .await
        .unwrap();
        let client = client_for_url(&server.url()).unwrap();
        let nodes: Api<Node> = Api::all(client.clone());

        // Something holds the store (a live world mid-step): the request in progress times
        // out; one more beyond the limit is refused at once.
        let held = server.cluster().clone();
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let _lock = held.lock_store();
            locked_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(1000));
        });
        locked_rx.recv().unwrap();
        let slow = tokio::spawn({
            let nodes = nodes.clone();
            async move { nodes.get("n1").await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let refused = client
            .send(
                http::Request::get("/api/v1/nodes/n1")
                    .body(kube::client::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers()["retry-after"], "1");
        let s = api_status(slow.await.unwrap().unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (504, "Timeout"));
        holder.join().unwrap();
        assert_eq!(
            nodes.get("n1").await.unwrap().metadata.name.as_deref(),
            Some("n1")
        );

        // A connection that never sends a whole request, and one left idle after a request,
        // are closed by the server.
        let mut silent = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        silent
            .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(3), silent.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "a half-sent request's connection is closed");
        let mut idle = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        idle.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 12];
        idle.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(3), idle.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "an idle keep-alive connection is closed");
        server.shutdown().await;
    })
    .await;
}
