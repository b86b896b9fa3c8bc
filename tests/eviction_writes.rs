//! The eviction request controller's write economy on a real kube-apiserver: evicting pods
//! without interceptors costs each request two status writes (first sight, which activates the
//! imperative interceptor and starts its turn before the Eviction API call; `Evicted=True` when
//! the pod is gone) — seeing the pod terminating in between costs none — and none is refused
//! because the controller decided on a cached copy older than its own previous write. Counted from
//! kube-apiserver's own request counters and evictord's retry counter; this binary has its own
//! control plane and a single evictord, so nothing else writes the requests. The selection of the
//! imperative interceptor is told in the event of the eviction it made in the same pass, not in
//! an `InterceptorSelected` event of its own.

mod support;

use std::time::Duration;

use evictord::api::EvictionRequest;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::Evictord;
use support::evictord::install_crds;
use support::fixtures::pod;
use support::wait::until;

const PODS: usize = 60;

/// kube-apiserver's count of `PATCH evictionrequests/status` answered with each of `codes`.
async fn status_patches(client: &Client, codes: &[&str]) -> f64 {
    let counters = support::apiserver::counters(client)
        .await
        .expect("apiserver /metrics");
    codes
        .iter()
        .filter_map(|code| {
            counters
                .get(&format!(
                    "{}|PATCH evictionrequests/status {code}",
                    support::apiserver::REQUESTS
                ))
                .copied()
        })
        .sum()
}

#[tokio::test]
async fn evictions_without_interceptors_take_two_status_writes_and_none_refused() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("writes").await;
    // Default heartbeat settings (60 s minimum step): within this test the controller has no
    // reason to heartbeat again, so every status write is one of the two.
    let e = Evictord::start(c, &[]).await;
    e.register_webhooks(c, "evictord").await;

    let pods: Vec<_> = futures::stream::iter(0..PODS)
        .map(|i| {
            let (client, ns) = (client.clone(), ns.clone());
            async move { pod(&format!("p{i:03}")).create(&client, &ns).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let ok_before = status_patches(&client, &["200"]).await;
    let refused_before = status_patches(&client, &["409", "422"]).await;

    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    futures::stream::iter(&pods)
        .for_each_concurrent(8, |p| {
            let api = api.clone();
            async move {
                let (name, uid) = (p.metadata.name.clone().unwrap(), p.metadata.uid.clone().unwrap());
                let er: EvictionRequest = serde_json::from_value(json!({
                    "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
                    "metadata": {"name": uid},
                    "spec": {"target": {"pod": {"name": name, "uid": uid}}, "requesters": [{"name": "test.example.com"}]}
                }))
                .unwrap();
                api.create(&PostParams::default(), &er).await.unwrap();
            }
        })
        .await;

    until(
        Duration::from_secs(120),
        "every request Evicted",
        || async {
            let list = api.list(&ListParams::default()).await.ok()?;
            let evicted = list
                .items
                .iter()
                .filter(|r| r.status.as_ref().is_some_and(|s| s.is_true("Evicted")))
                .count();
            (evicted == PODS).then_some(())
        },
    )
    .await;
    // A write still in flight when the last condition was read would be missed: let it land.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let ok = status_patches(&client, &["200"]).await - ok_before;
    let refused = status_patches(&client, &["409", "422"]).await - refused_before;
    let retries = e
        .metric("evictord_reconcile_retries_total{controller=\"evictionrequest\"}")
        .await;
    assert_eq!(
        refused, 0.0,
        "status writes refused as conflicts: {refused} (controller retries: {retries})"
    );
    // kube-apiserver deletes an evicted pod in two steps (deletionTimestamp, then gone) even with
    // a zero grace period; a reconcile that falls between them sees the pod terminating, which
    // is no reason for a write of its own (its message rides along with a write made anyway).
    let messages: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|r| r.status.unwrap_or_default().interceptors)
        .filter_map(|i| i.message)
        .collect();
    assert!(
        messages.is_empty(),
        "interceptor messages written: {messages:?}"
    );
    assert_eq!(
        ok,
        2.0 * PODS as f64,
        "status writes for {PODS} requests: {ok}, expected 2 each"
    );
    assert_eq!(retries, 0.0, "controller retries");

    // Events are written in the background: wait for one on every request.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let by_kind = ListParams::default().fields("involvedObject.kind=EvictionRequest");
    let stored = until(
        Duration::from_secs(60),
        "an event on every request",
        || async {
            let list = events.list(&by_kind).await.ok()?.items;
            let told = |e: &&Event| {
                e.reason.as_deref() == Some("Evicted")
                    && e.message.as_deref().is_some_and(|m| {
                        m.starts_with(
                            "Interceptor imperative-eviction.k8s.io selected (1 of 1); pod ",
                        )
                    })
            };
            let mut names: Vec<_> = list
                .iter()
                .filter(told)
                .filter_map(|e| e.involved_object.name.clone())
                .collect();
            names.sort();
            names.dedup();
            (names.len() == PODS).then_some(list)
        },
    )
    .await;
    let selected = stored
        .iter()
        .filter(|e| e.reason.as_deref() == Some("InterceptorSelected"))
        .count();
    assert_eq!(selected, 0, "InterceptorSelected events of their own");
}
