//! The lifecycle of EvictionRequests on a real control plane: ended requests (`Evicted`,
//! `Canceled`) are deleted after `--ended-request-retention`, and the requests evictord creates
//! carry an ownerReference to their pod (the garbage collector of a real cluster removes them
//! with the pod; this control plane runs no garbage collector, so that part is checked on the
//! object).

mod support;

use std::time::Duration;

use evictord::api::{EvictionRequest, NodeMaintenance};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::{draining_maintenance, eviction_request, node, pod};
use support::wait::until;

const T: Duration = Duration::from_secs(60);
const RETENTION: Duration = Duration::from_secs(4);

async fn setup(prefix: &str) -> (Client, String) {
    support::evictord::shared(&[
        "--interceptor-deadline=120s",
        "--min-heartbeat-interval=1s",
        "--ended-request-retention=4s",
    ])
    .await;
    let c = support::cluster().await;
    (c.client().await, c.namespace(prefix).await)
}

async fn request(api: &Api<EvictionRequest>, name: &str, uid: &str) {
    let er = eviction_request(name, uid, &["tool.example.com"]);
    api.create(&PostParams::default(), &er).await.unwrap();
}

/// Waits for `condition`, then for the request to be deleted; returns how long it existed after
/// the condition's `lastTransitionTime` (the time retention counts from). That time has whole
/// seconds, rounded down, and the deletion is seen at the next poll, so the figure can only be
/// larger than the true retention, never smaller: no allowance for a slow poll is needed.
async fn ended_then_deleted(api: &Api<EvictionRequest>, uid: &str, condition: &str) -> Duration {
    let ended = until(T, &format!("{condition}=True"), || async {
        let s = api.get(uid).await.unwrap().status.unwrap_or_default();
        s.condition(condition)
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0)
    })
    .await;
    until(T, "the ended request deleted", || async {
        api.get_opt(uid).await.unwrap().is_none().then_some(())
    })
    .await;
    let ms = jiff::Timestamp::now().as_millisecond() - ended.as_millisecond();
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[tokio::test]
async fn evicted_and_canceled_requests_are_deleted_after_the_retention() {
    let (client, ns) = setup("retention").await;
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);

    let evicted = pod("evicted").create(&client, &ns).await;
    let uid = evicted.metadata.uid.clone().unwrap();
    request(&api, "evicted", &uid).await;
    let kept = ended_then_deleted(&api, &uid, "Evicted").await;
    assert!(kept >= RETENTION, "kept only {kept:?}");

    let canceled = pod("canceled")
        .interceptors(&["slow.example.com"])
        .create(&client, &ns)
        .await;
    let uid = canceled.metadata.uid.clone().unwrap();
    request(&api, "canceled", &uid).await;
    until(T, "first interceptor active", || async {
        let s = api.get(&uid).await.unwrap().status.unwrap_or_default();
        (!s.active_interceptors.is_empty()).then_some(())
    })
    .await;
    api.patch(
        &uid,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"requesters": []}})),
    )
    .await
    .unwrap();
    let kept = ended_then_deleted(&api, &uid, "Canceled").await;
    assert!(kept >= RETENTION, "kept only {kept:?}");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    assert!(
        pods.get_opt("canceled").await.unwrap().is_some(),
        "a canceled request leaves the pod"
    );
}

#[tokio::test]
async fn requests_of_a_node_maintenance_are_owned_by_their_pod() {
    let (client, ns) = setup("owned").await;
    node("owned-n1")
        .label("retention-test", "owned")
        .create(&client)
        .await;
    let p = pod("db")
        .on_node("owned-n1")
        .interceptors(&["slow.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    nms.create(
        &PostParams::default(),
        &draining_maintenance("owned", "retention-test", "owned", "retention test"),
    )
    .await
    .unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let r = until(T, "the maintenance's request", || async {
        api.get_opt(&uid).await.unwrap()
    })
    .await;
    let owners = r.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str()
        ),
        ("Pod", "db", uid.as_str())
    );
    assert_eq!(
        owners[0].block_owner_deletion, None,
        "never holds the pod's deletion up"
    );
    nms.patch(
        "owned",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": "Complete"}})),
    )
    .await
    .unwrap();
}
