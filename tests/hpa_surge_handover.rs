//! The HorizontalPodAutoscaler interceptor hands a surge's place from a pod that left to the
//! next pod of the same Deployment waiting for it, on a real kube-apiserver with
//! kube-controller-manager (its autoscaler enforces its limits, without a metrics server to
//! scale back down): a node holding three pods of an autoscaled Deployment of maxSurge 1 is
//! drained with no replica lost, the floor raised once and held from pod to pod, the Deployment
//! never beyond one surge pod, and the ReplicaSet starts one pod per evicted pod plus one surge.
//! Given back and raised again for each pod instead, each surge starts from the replicas the
//! last one left behind (an autoscaler scales back down only later, after its stabilisation
//! window), one more pod each time. Counted from kube-apiserver's audit log.

mod support;

use std::time::{Duration, SystemTime};

use support::audit::{controller_manager_controller, requests};
use support::fixtures::event_reasons;
use support::hpa::{start, wait_limits, wait_moved_to};
use support::surge::FLAGS;

/// The Deployment's replicas, all on the drained node, and the autoscaler's floor.
const REPLICAS: i32 = 3;
/// The autoscaler's ceiling.
const MAX: i32 = 6;

#[tokio::test]
async fn an_autoscaled_surge_goes_from_pod_to_pod_with_the_floor_held() {
    // The audit log first: it is set when the control plane starts.
    support::control_plane::cluster_with_request_audit().await;
    let c = support::control_plane::cluster_with_controller_manager().await;
    let log = c.request_audit.clone().expect("audit log");
    support::evictord::shared(FLAGS).await;
    let (client, ns) = (c.client().await, c.namespace("hpa-handover").await);
    let s = start(client.clone(), &ns, REPLICAS, REPLICAS, MAX).await;
    let from = SystemTime::now();
    let sampler = s.sample();
    s.drain().await;
    s.wait_drained(Duration::from_secs(180)).await;
    let replicas = wait_moved_to(&s, &s.b.clone()).await;
    wait_limits(&s, REPLICAS, MAX, false).await;
    let ((min, samples), most) = sampler.stop_all().await;
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        min >= REPLICAS,
        "the Deployment had only {min} available replicas during the drain (want ≥ {REPLICAS})"
    );
    // Surged from 3 for each pod in turn: 4 at most. Each surge from the last one's replicas:
    // 4, 5, then 6.
    assert!(
        most <= REPLICAS + 1 && replicas <= REPLICAS + 1,
        "surged to {most} replicas ({replicas} after the drain), beyond one surge pod (maxSurge 1)"
    );

    let audit = requests(&log);
    let since = audit.iter().filter(|r| r.received >= from);
    let pods_path = format!("/api/v1/namespaces/{ns}/pods");
    let created = since
        .clone()
        .filter(|r| r.verb == "create" && r.resource == "pods" && r.uri.starts_with(&pods_path))
        .filter(|r| controller_manager_controller(&r.user_agent) == Some("replicaset-controller"))
        .count();
    // One surge pod, one replacement per evicted pod (6 when each pod surged anew).
    assert!(
        created <= REPLICAS as usize + 1,
        "the ReplicaSet created {created} pods (want ≤ {})",
        REPLICAS + 1
    );
    // evictord's writes of the autoscaler: the raise, a hand-over per pod after the first, the
    // floor put back (6 when lowered and raised again for each pod).
    // In the newest autoscaling version the server serves.
    let in_ns = format!("/namespaces/{ns}/horizontalpodautoscalers/");
    // Written: the pods that looked at once on a cached copy behind the raise are refused (422).
    let patches = since
        .filter(|r| r.user_agent.starts_with("evictord/") && r.verb == "patch" && r.code == 200)
        .filter(|r| r.resource == "horizontalpodautoscalers" && r.uri.contains(&in_ns))
        .count();
    assert!(
        patches <= REPLICAS as usize + 1,
        "evictord patched the autoscaler {patches} times (want ≤ {})",
        REPLICAS + 1
    );

    let reasons = event_reasons(&client, Some(&ns), "HorizontalPodAutoscaler").await;
    for reason in ["SurgeStarted", "SurgeHandedOver", "SurgeFinished"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event: {reasons:?}"
        );
    }
}
