//! The `deployment.apps.k8s.io` interceptor on a real kube-apiserver with kube-controller-manager
//! (deployment, replicaset and disruption controllers): draining a node never lowers a
//! Deployment's available replicas, and the Deployment ends at its replicas on another node.
//! Also the SDK's example interceptor (`examples/surge_log.rs`) against the same control plane.

mod support;

#[path = "../examples/surge_log.rs"]
#[allow(dead_code)]
mod surge_log;

use std::time::Duration;

use evictord::api::EvictionRequest;
use evictord::interceptor::{Runner, Settings};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::pod;
use support::surge::{FLAGS, Scenario};
use support::wait::until;

async fn setup(prefix: &str) -> (Client, String) {
    let c = support::control_plane::cluster_with_controller_manager().await;
    support::evictord::shared(FLAGS).await;
    (c.client().await, c.namespace(prefix).await)
}

async fn drain_keeps_available(replicas: i32, max_surge: i32, prefix: &str) {
    let (client, ns) = setup(prefix).await;
    let s = Scenario::start(client, &ns, replicas, max_surge).await;
    let sampler = s.sample();
    s.drain().await;
    s.wait_drained(Duration::from_secs(180)).await;
    s.wait_settled_on(
        &s.b.clone(),
        "the Deployment back at its replicas on node b",
    )
    .await;
    let (min, samples) = sampler.stop().await;
    assert!(samples > 20, "only {samples} samples");
    assert!(
        min >= replicas,
        "the Deployment had only {min} available replicas during the drain (want ≥ {replicas})"
    );
}

#[tokio::test]
async fn one_replica_drains_without_downtime() {
    drain_keeps_available(1, 1, "surge-one").await;
}

#[tokio::test]
async fn three_replicas_surge_one_at_a_time() {
    drain_keeps_available(3, 1, "surge-three").await;
}

#[tokio::test]
async fn the_sdk_example_interceptor_completes_its_turn() {
    let (client, ns) = setup("sdk-example").await;
    let p = pod("p")
        .interceptors(&["log.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let settings = Settings {
        min_heartbeat_interval: Duration::from_secs(1),
        default_deadline: Duration::from_secs(40),
        poll_interval: Duration::from_secs(1),
    };
    let interceptor = surge_log::LogInterceptor {
        work: Duration::from_secs(3),
    };
    let runner = Runner::new(client.clone(), settings).namespaced(&ns);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(runner.run(interceptor, async move {
        let _ = stop_rx.await;
    }));
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "p", "uid": uid}}, "requesters": [{"name": "test.example.com"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &er).await.unwrap();
    let entry = until(Duration::from_secs(60), "the request Evicted", || async {
        let s = api.get(&uid).await.ok()?.status?;
        let e = s.interceptor("log.example.com")?.clone();
        s.is_true("Evicted").then_some(e)
    })
    .await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert_eq!(entry.message.as_deref(), Some("connections of p drained"));
    let (start, done) = (
        entry.start_time.unwrap().0,
        entry.completion_time.unwrap().0,
    );
    assert!(
        done.duration_since(start).as_secs() >= 3,
        "{start} → {done}"
    );
    assert!(entry.heartbeat_time.is_some());
}
