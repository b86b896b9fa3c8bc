//! The eviction request controller restarted in the middle of a blocked eviction: the new
//! process resumes the backoff from the recorded counter and failure time, and the pod is
//! evicted exactly once when the PodDisruptionBudget goes away.

mod support;

use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::Evictord;
use support::evictord::{FAST, install_crds};
use support::fixtures::pod;
use support::wait::until;

/// The recorded time of the last failed Eviction API call.
fn last_failure(r: &EvictionRequest) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    r.status
        .as_ref()
        .and_then(|s| s.pod_eviction_status.as_ref())
        .and_then(|p| p.last_failure_time.clone())
        .expect("a recorded failure time")
}

#[tokio::test]
async fn restart_resumes_backoff_without_duplicate_eviction() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("restart").await;

    let p = pod("guarded")
        .label("app", "guarded")
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let pdbs = support::fixtures::pdb_api(&client, &ns);
    let pdb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let pdb_status = json!({"status": {"observedGeneration": 1, "currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1}});
    pdbs.patch_status("guard", &PatchParams::default(), &Patch::Merge(&pdb_status))
        .await
        .unwrap();

    let mut first = Evictord::start(c, FAST).await;
    first.register_webhooks(c, "evictord").await;
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "guarded", "uid": uid}}, "requesters": [{"name": "test.example.com"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &er).await.unwrap();
    let counter = |r: &EvictionRequest| r.status.as_ref().map_or(0, |s| s.failed_evictions());
    until(Duration::from_secs(60), "two failed evictions", || async {
        api.get(&uid)
            .await
            .ok()
            .filter(|r| counter(r) >= 2)
            .map(|_| ())
    })
    .await;

    // Kill the controller mid-backoff and start another process.
    first.kill();
    let before = api.get(&uid).await.unwrap();
    let n = counter(&before);
    let last = last_failure(&before);
    let second = Evictord::start(c, FAST).await;
    second.register_webhooks(c, "evictord").await;

    let after = until(
        Duration::from_secs(60),
        "the counter to go on from where it was",
        || async { api.get(&uid).await.ok().filter(|r| counter(r) > n) },
    )
    .await;
    // The resumed retry respects the backoff of the recorded counter (1 s doubling, cap 4 s).
    let next = last_failure(&after);
    let expected = evictord::controller::eviction_request::backoff(
        n,
        Duration::from_secs(1),
        Duration::from_secs(4),
    );
    assert!(
        next.0.as_second() - last.0.as_second() >= expected.as_secs() as i64 - 1,
        "retry at {next:?} came before the backoff {expected:?} after {last:?}"
    );
    assert_eq!(
        counter(&after),
        n + 1,
        "the counter goes on, it does not restart at 0"
    );

    pdbs.delete("guard", &Default::default()).await.unwrap();
    until(Duration::from_secs(60), "Evicted", || async {
        api.get(&uid)
            .await
            .ok()
            .filter(|r| r.status.as_ref().is_some_and(|s| s.is_true("Evicted")))
            .map(|_| ())
    })
    .await;
    assert!(
        Api::<Pod>::namespaced(client.clone(), &ns)
            .get_opt("guarded")
            .await
            .unwrap()
            .is_none()
    );
    let metrics = second.probe("/metrics").await.unwrap().1;
    let successes: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with(
                "evictionrequest_controller_imperative_evictions_total{result=\"success\"}",
            )
        })
        .collect();
    assert_eq!(
        successes,
        ["evictionrequest_controller_imperative_evictions_total{result=\"success\"} 1"],
        "exactly one eviction:\n{metrics}"
    );
}
