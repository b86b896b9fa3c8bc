//! The eviction request controller on a real control plane, with the webhook on and short
//! deadlines: interceptor hand-off by completion and by silence, the API-eviction fallback with
//! backoff behind a PodDisruptionBudget, cancellation, and requests for pods that never existed.

mod support;

use std::time::Duration;

use evictord::api::{EvictionRequest, EvictionRequestStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::{create_eviction_request, pod};
use support::interceptor::{now, write_entry};
use support::wait::until;

const T: Duration = Duration::from_secs(60);

async fn setup(prefix: &str) -> (Client, String) {
    support::evictord::shared(support::evictord::FAST).await;
    let c = support::cluster().await;
    (c.client().await, c.namespace(prefix).await)
}

async fn request(
    client: &Client,
    ns: &str,
    pod: &Pod,
    requesters: &[&str],
) -> Api<EvictionRequest> {
    let uid = pod.metadata.uid.clone().unwrap();
    let name = pod.metadata.name.clone().unwrap();
    create_eviction_request(client, ns, &name, &uid, requesters).await
}

async fn status(api: &Api<EvictionRequest>, name: &str) -> EvictionRequestStatus {
    api.get(name).await.expect("get").status.unwrap_or_default()
}

async fn wait_condition(
    api: &Api<EvictionRequest>,
    name: &str,
    type_: &str,
) -> EvictionRequestStatus {
    until(T, &format!("{type_}=True on {name}"), || async {
        let s = status(api, name).await;
        s.is_true(type_).then_some(s)
    })
    .await
}

async fn pod_gone(client: &Client, ns: &str, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    until(T, &format!("pod {name} deleted"), || async {
        pods.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn no_interceptors_ends_evicted_and_pod_gone() {
    let (client, ns) = setup("er-plain").await;
    let p = pod("p").create(&client, &ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = request(&client, &ns, &p, &["test.example.com"]).await;
    let s = wait_condition(&api, &uid, "Evicted").await;
    assert_eq!(
        s.target_interceptors
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["imperative-eviction.k8s.io"]
    );
    assert!(s.active_interceptors.is_empty());
    pod_gone(&client, &ns, "p").await;
    // Labels of the pod are copied to the request.
    let p2 = pod("labelled")
        .label("app", "db")
        .create(&client, &ns)
        .await;
    let uid2 = p2.metadata.uid.clone().unwrap();
    let api = request(&client, &ns, &p2, &["test.example.com"]).await;
    until(T, "pod labels copied", || async {
        api.get(&uid2).await.ok().and_then(|r| {
            (r.metadata
                .labels
                .unwrap_or_default()
                .get("app")
                .map(String::as_str)
                == Some("db"))
            .then_some(())
        })
    })
    .await;
}

#[tokio::test]
async fn interceptors_hand_off_on_completion_and_on_silence() {
    let (client, ns) = setup("er-handoff").await;
    let p = pod("p")
        .interceptors(&["first.example.com", "second.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = request(&client, &ns, &p, &["test.example.com"]).await;

    until(T, "first interceptor active", || async {
        (status(&api, &uid).await.active_interceptors == ["first.example.com"]).then_some(())
    })
    .await;
    // The first interceptor starts, heartbeats, then completes.
    write_entry(&api, &uid, "first.example.com", |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
        e.message = Some("surging a replacement".into());
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    write_entry(&api, &uid, "first.example.com", |e| {
        e.heartbeat_time = Some(now())
    })
    .await;
    write_entry(&api, &uid, "first.example.com", |e| {
        e.completion_time = Some(now())
    })
    .await;
    until(
        T,
        "second interceptor active after the first completed",
        || async {
            (status(&api, &uid).await.active_interceptors == ["second.example.com"]).then_some(())
        },
    )
    .await;
    // The second stays silent: after the (6 s) deadline it is timed out, the controller evicts.
    let s = wait_condition(&api, &uid, "Evicted").await;
    assert_eq!(
        s.processed_interceptors,
        [
            "first.example.com",
            "second.example.com",
            "imperative-eviction.k8s.io"
        ],
        "processed in order"
    );
    pod_gone(&client, &ns, "p").await;
}

#[tokio::test]
async fn pod_disruption_budget_blocks_until_deleted() {
    let (client, ns) = setup("er-pdb").await;
    let p = pod("guarded")
        .label("app", "guarded")
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .unwrap();
    // The 1.20 test server serves PodDisruptionBudgets as policy/v1beta1 only.
    let pdbs: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource {
            group: "policy".into(),
            version: "v1beta1".into(),
            api_version: "policy/v1beta1".into(),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
        },
    );
    let mut obj: kube::api::DynamicObject =
        serde_json::from_value(serde_json::to_value(&pdb).unwrap()).unwrap();
    obj.types = Some(kube::api::TypeMeta {
        api_version: "policy/v1beta1".into(),
        kind: "PodDisruptionBudget".into(),
    });
    pdbs.create(&PostParams::default(), &obj)
        .await
        .expect("create PDB");
    // The disruption controller is not running: mark the budget as computed, allowing nothing.
    let pdb_status = json!({"status": {"observedGeneration": 1, "currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1}});
    pdbs.patch_status("guard", &PatchParams::default(), &Patch::Merge(&pdb_status))
        .await
        .expect("PDB status");

    let api = request(&client, &ns, &p, &["test.example.com"]).await;
    let s = until(T, "three failed evictions", || async {
        let s = status(&api, &uid).await;
        (s.failed_evictions() >= 3).then_some(s)
    })
    .await;
    let entry = s.interceptor("imperative-eviction.k8s.io").unwrap();
    assert!(
        entry
            .message
            .as_deref()
            .unwrap_or("")
            .contains("Could not evict a pod due to failing eviction requests, number of retries:"),
        "{entry:?}"
    );
    assert!(
        Api::<Pod>::namespaced(client.clone(), &ns)
            .get_opt("guarded")
            .await
            .unwrap()
            .is_some(),
        "no eviction while the PDB blocks"
    );
    assert!(!s.is_true("Evicted"));

    pdbs.delete("guard", &Default::default())
        .await
        .expect("delete PDB");
    wait_condition(&api, &uid, "Evicted").await;
    pod_gone(&client, &ns, "guarded").await;
}

/// A pod with one silent interceptor and a request for it, once that interceptor is active.
async fn request_with_active_interceptor(
    client: &Client,
    ns: &str,
    name: &str,
) -> (String, Api<EvictionRequest>) {
    let p = pod(name)
        .interceptors(&["slow.example.com"])
        .create(client, ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = request(client, ns, &p, &["test.example.com"]).await;
    until(T, "interceptor active", || async {
        (!status(&api, &uid).await.active_interceptors.is_empty()).then_some(())
    })
    .await;
    (uid, api)
}

#[tokio::test]
async fn cancellation_and_forbid() {
    let (client, ns) = setup("er-cancel").await;
    let (uid, api) = request_with_active_interceptor(&client, &ns, "p").await;
    api.patch(
        &uid,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"requesters": []}})),
    )
    .await
    .expect("remove requesters");
    let s = wait_condition(&api, &uid, "Canceled").await;
    assert_eq!(s.condition("Canceled").unwrap().reason, "NoRequesters");
    until(T, "active cleared", || async {
        status(&api, &uid)
            .await
            .active_interceptors
            .is_empty()
            .then_some(())
    })
    .await;

    // With Forbid (set by the interceptor), removing requesters is refused and the request goes on.
    let (uid, api) = request_with_active_interceptor(&client, &ns, "q").await;
    api.patch_status(
        &uid,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"evictionRequestCancellationPolicy": "Forbid"}})),
    )
    .await
    .expect("set Forbid");
    let err = api
        .patch(
            &uid,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"requesters": []}})),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("rule U3"), "{err}");
    // The silent interceptor times out and the pod is evicted all the same.
    wait_condition(&api, &uid, "Evicted").await;
}

#[tokio::test]
async fn pod_that_never_existed_is_canceled() {
    let (client, ns) = setup("er-ghost").await;
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "ghost-uid"},
        "spec": {"target": {"pod": {"name": "ghost", "uid": "ghost-uid"}}, "requesters": [{"name": "test.example.com"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &er).await.unwrap();
    let s = wait_condition(&api, "ghost-uid", "Canceled").await;
    let c = s.condition("Canceled").unwrap();
    assert_eq!(c.reason, "ValidationFailed");
    assert!(c.message.contains("was not found"), "{}", c.message);
}
