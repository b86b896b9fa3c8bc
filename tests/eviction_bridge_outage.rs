//! With evictord down, `kubectl drain` works exactly as without evictord: the Eviction API
//! bridge is registered with `failurePolicy: Ignore`, so the annotated pod is evicted by the
//! Eviction API alone. (Its own test binary: the stopped server would fail every other test's
//! EvictionRequest writes.)

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use support::fixtures::{node, pod};
use support::tools::kubectl;
use support::{Evictord, cluster};

#[tokio::test]
async fn kubectl_drain_with_evictord_down_works_as_without_it() {
    let c = cluster().await;
    support::evictord::install_crds(c).await;
    let mut e = Evictord::start(c, &[]).await;
    e.register_webhooks(c, "evictord").await;
    e.stop();

    let client = c.client().await;
    let ns = c.namespace("bridge-down").await;
    node("down-n1").create(&client).await;
    pod("db")
        .on_node("down-n1")
        .replicaset("db")
        .interceptors(&["db.example.com"])
        .create(&client, &ns)
        .await;
    let started = std::time::Instant::now();
    let out = kubectl(
        c,
        &[
            "drain",
            "down-n1",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=60s",
        ],
        None,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("pod/db evicted"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    assert!(pods.get_opt("db").await.unwrap().is_none());
}
