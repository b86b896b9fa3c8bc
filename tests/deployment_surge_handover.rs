//! The Deployment interceptor hands a surge's place from a pod that left to the next pod of the
//! same Deployment waiting for it, on a real kube-apiserver with kube-controller-manager: a node
//! holding three pods of a Deployment of maxSurge 1 is drained with no replica lost, and the
//! ReplicaSet starts one pod per evicted pod plus one surge, stopping at most one — not a
//! replacement started and stopped per pod, as when every surge came down before the next went
//! up. Counted from kube-apiserver's audit log by kube-controller-manager's controller.

mod support;

use std::time::SystemTime;

use support::audit::controller_manager_controller;
use support::surge::{FLAGS, Scenario};

/// The Deployment's replicas, all on the drained node.
const REPLICAS: i32 = 3;

#[tokio::test]
async fn a_surge_goes_from_pod_to_pod_without_a_replacement_stopped_each_time() {
    // The audit log first: it is set when the control plane starts.
    support::control_plane::cluster_with_request_audit().await;
    let c = support::control_plane::cluster_with_controller_manager().await;
    let log = c.request_audit.clone().expect("audit log");
    support::evictord::shared(FLAGS).await;
    let (client, ns) = (c.client().await, c.namespace("surge-handover").await);
    let s = Scenario::start(client, &ns, REPLICAS, 1).await;
    let from = SystemTime::now();
    let ((min, samples), most) = s.drain_sampled().await;
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        min >= REPLICAS,
        "the Deployment had only {min} available replicas during the drain (want ≥ {REPLICAS})"
    );
    assert!(
        most <= REPLICAS + 1,
        "surged to {most} replicas, beyond maxSurge 1"
    );

    // The ReplicaSet's pod writes in the namespace since the drain began.
    let pods_path = format!("/api/v1/namespaces/{ns}/pods");
    let writes = |verb: &str| {
        support::audit::requests(&log)
            .into_iter()
            .filter(|r| r.received >= from && r.verb == verb && r.resource == "pods")
            .filter(|r| {
                controller_manager_controller(&r.user_agent) == Some("replicaset-controller")
            })
            .filter(|r| r.uri.starts_with(&pods_path))
            .count()
    };
    let (created, deleted) = (writes("create"), writes("delete"));
    // One surge pod, one replacement per evicted pod; only the last replacement may be
    // stopped when the surge comes down. Handed over neither, each pod after the first
    // costs a replacement started and stopped (6 and 3 here).
    assert!(
        created <= REPLICAS as usize + 1 && deleted <= 1,
        "the ReplicaSet created {created} pods and deleted {deleted} (want ≤ {} and ≤ 1)",
        REPLICAS + 1
    );

    let reasons = s.deployment_event_reasons().await;
    for reason in ["SurgeStarted", "SurgeHandedOver", "SurgeFinished"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event: {reasons:?}"
        );
    }
}
