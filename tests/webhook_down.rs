//! evictord's webhook is down (the process stopped after registering its webhooks): the
//! failurePolicy of each webhook decides. Pods (registered with `Ignore`) are still created,
//! un-annotated, annotated and in excluded namespaces alike, so an evictord outage never stops
//! workloads; writes of EvictionRequests and NodeMaintenances (registered with `Fail`) fail
//! closed, with kube-apiserver's message naming the webhook that could not be called. (Its own
//! test binary: the stopped server would fail every other test's writes.)

mod support;

use std::time::Duration;

use evictord::api::{EvictionRequest, NodeMaintenance};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use support::evictord::SpawnOptions;
use support::fixtures::{draining_maintenance, eviction_request, node, pod};
use support::{Evictord, cluster};

#[tokio::test]
async fn with_the_webhook_down_pods_are_created_and_evictord_writes_fail_closed() {
    let c = cluster().await;
    support::evictord::install_crds(c).await;
    let mut e = Evictord::start(c, &[]).await;
    e.register_webhooks(c, "evictord").await;
    let client = c.client().await;
    let ns = c.namespace("webhook-down").await;
    node("down-n1").label("chaos", "down").create(&client).await;
    let stopped = e.stop();
    assert!(stopped.is_some(), "evictord was running");

    // Pods: created whatever they carry (failurePolicy Ignore).
    let plain = pod("plain").on_node("down-n1").create(&client, &ns).await;
    pod("annotated")
        .interceptors(&["db.example.com"])
        .create(&client, &ns)
        .await;
    pod("bad-annotation")
        .interceptors(&["not-a-domain"])
        .create(&client, &ns)
        .await;
    pod("system").create(&client, "kube-system").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for name in ["plain", "annotated", "bad-annotation"] {
        assert!(
            pods.get_opt(name).await.unwrap().is_some(),
            "{name} created"
        );
    }

    // EvictionRequests and NodeMaintenances: refused (failurePolicy Fail), and the message says
    // which webhook could not be reached.
    let uid = plain.metadata.uid.clone().unwrap();
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let err = requests
        .create(
            &PostParams::default(),
            &eviction_request("plain", &uid, &["down.example.com"]),
        )
        .await
        .expect_err("an EvictionRequest must not be written unreviewed");
    let message = err.to_string();
    assert!(
        message.contains("failed calling webhook")
            && message.contains("evictionrequests.validate.evictord.dev"),
        "{message}"
    );
    assert!(requests.get_opt(&uid).await.unwrap().is_none());

    let maintenances: Api<NodeMaintenance> = Api::all(client.clone());
    let err = maintenances
        .create(
            &PostParams::default(),
            &draining_maintenance("down-nm", "chaos", "down", "webhook down"),
        )
        .await
        .expect_err("a NodeMaintenance must not be written unreviewed");
    let message = err.to_string();
    assert!(
        message.contains("failed calling webhook") && message.contains("nodemaintenances"),
        "{message}"
    );
    assert!(maintenances.get_opt("down-nm").await.unwrap().is_none());

    // Back up on the same port and certificates: the same write goes through.
    let back = Evictord::spawn(
        c,
        &[],
        SpawnOptions {
            webhook_port: Some(e.webhook_port),
            cert_dir: Some(e.cert_dir.clone()),
            ..Default::default()
        },
    );
    back.ready().await;
    support::wait::until(Duration::from_secs(30), "EvictionRequest accepted", || {
        let (requests, uid) = (requests.clone(), uid.clone());
        async move {
            requests
                .create(
                    &PostParams::default(),
                    &eviction_request("plain", &uid, &["down.example.com"]),
                )
                .await
                .ok()
        }
    })
    .await;
    c.delete_namespace(&ns).await;
}
