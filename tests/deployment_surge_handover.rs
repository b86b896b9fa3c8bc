//! The Deployment interceptor hands a surge's place from a pod that left to the next pod of the
//! same Deployment waiting for it, on a real kube-apiserver with kube-controller-manager: a node
//! holding three pods of a Deployment of maxSurge 1 is drained with no replica lost, and the
//! ReplicaSet starts one pod per evicted pod plus one surge, stopping at most one — not a
//! replacement started and stopped per pod, as when every surge came down before the next went
//! up. Counted from kube-apiserver's audit log by kube-controller-manager's controller.
//!
//! Under `kubectl drain`, which cordons every node first and evicts one node's pods after
//! another's, no pod waits for the place yet when a surged pod leaves: the place is kept while
//! another pod of the Deployment is on a cordoned node, and handed to it when its eviction
//! comes; given back once none is.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use support::audit::controller_manager_controller;
use support::fixtures::create_eviction_request;
use support::surge::{FLAGS, Scenario};
use support::wait::until;

/// The Deployment's replicas, all on the drained node.
const REPLICAS: i32 = 3;

#[tokio::test]
async fn a_surge_goes_from_pod_to_pod_without_a_replacement_stopped_each_time() {
    let (s, log) = start("surge-handover", REPLICAS).await;
    let ns = s.ns.clone();
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

    let (created, deleted) = replicaset_pod_writes(&log, &ns, from);
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

/// The control plane with kube-apiserver's audit log and kube-controller-manager, evictord, and
/// a [`Scenario`] of `replicas` (maxSurge 1) in a namespace named after `prefix`; the audit
/// log's path.
async fn start(prefix: &str, replicas: i32) -> (Scenario, PathBuf) {
    // The audit log first: it is set when the control plane starts.
    support::control_plane::cluster_with_request_audit().await;
    let c = support::control_plane::cluster_with_controller_manager().await;
    let log = c.request_audit.clone().expect("audit log");
    support::evictord::shared(FLAGS).await;
    let (client, ns) = (c.client().await, c.namespace(prefix).await);
    (Scenario::start(client, &ns, replicas, 1).await, log)
}

/// The ReplicaSet controller's pod creates and deletes in namespace `ns` since `from`, from
/// kube-apiserver's audit log at `log`.
fn replicaset_pod_writes(log: &Path, ns: &str, from: SystemTime) -> (usize, usize) {
    let pods_path = format!("/api/v1/namespaces/{ns}/pods");
    let writes = |verb: &str| {
        support::audit::requests(log)
            .into_iter()
            .filter(|r| r.received >= from && r.verb == verb && r.resource == "pods")
            .filter(|r| {
                controller_manager_controller(&r.user_agent) == Some("replicaset-controller")
            })
            .filter(|r| r.uri.starts_with(&pods_path))
            .count()
    };
    (writes("create"), writes("delete"))
}

/// Cordons node `name` (`on`) or uncordons it, as `kubectl cordon` and `uncordon` do.
async fn cordon(client: &Client, name: &str, on: bool) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": on}})),
        )
        .await
        .unwrap_or_else(|e| panic!("cordoning node {name} ({on}): {e}"));
}

/// The scenario's pods, by name.
async fn pods_of(s: &Scenario) -> Vec<Pod> {
    let mut pods = Api::<Pod>::namespaced(s.client.clone(), &s.ns)
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items;
    pods.sort_by_key(|p| p.name_any());
    pods
}

/// Asks for pod `p`'s eviction (an EvictionRequest, as the bridge writes for `kubectl drain`)
/// and waits until it is gone.
async fn evict(s: &Scenario, p: &Pod) {
    let (name, uid) = (p.name_any(), p.metadata.uid.clone().expect("uid"));
    create_eviction_request(&s.client, &s.ns, &name, &uid, &["test.example.com"]).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    until(
        Duration::from_secs(90),
        &format!("pod {name} gone"),
        || async {
            match pods.get_opt(&name).await {
                Ok(None) => Some(()),
                Ok(Some(p)) if p.metadata.uid.as_deref() != Some(uid.as_str()) => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

/// Checks, over `seconds` seconds, that the Deployment keeps `replicas` and its surge record:
/// the settler looks every 2 s, so a place given back would show within that.
async fn kept_for(s: &Scenario, replicas: i32, seconds: u64) {
    for second in 0..seconds {
        let d = s.deployments().get(&s.name).await.expect("get Deployment");
        assert!(
            d.spec.replicas == Some(replicas) && d.annotations().contains_key("evictord.dev/surge"),
            "{second} s after the pod left: spec.replicas {:?}, surge recorded {} (want {replicas}, kept)",
            d.spec.replicas,
            d.annotations().contains_key("evictord.dev/surge")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn a_surges_place_is_kept_for_the_next_pod_on_a_cordoned_node() {
    let (s, log) = start("surge-hold", 2).await;
    let (client, ns) = (s.client.clone(), s.ns.clone());
    // `kubectl drain` cordons the node, then evicts its pods; here one pod first, the other
    // later, as when the two were on two nodes drained one after the other.
    cordon(&client, &s.a, true).await;
    let pods = pods_of(&s).await;
    let sampler = s.sample();
    let from = SystemTime::now();
    evict(&s, &pods[0]).await;
    // The other pod is still on the cordoned node: the first one's place (spec.replicas 3) is
    // kept for it.
    kept_for(&s, 3, 8).await;
    evict(&s, &pods[1]).await;
    s.wait_settled_on(&s.b, "the Deployment back at its 2 replicas on node b")
        .await;
    let ((min, samples), most) = sampler.stop_all().await;
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        min >= 2,
        "only {min} available replicas during the drain (want ≥ 2)"
    );
    assert!(most <= 3, "surged to {most} replicas, beyond maxSurge 1");
    let (created, deleted) = replicaset_pod_writes(&log, &ns, from);
    // The surge pod and one replacement per evicted pod; only the last replacement may be
    // stopped. A place given back and raised again costs a pod started and stopped more per
    // pod after the first (4 and 2 here).
    assert!(
        created <= 3 && deleted <= 1,
        "the ReplicaSet created {created} pods and deleted {deleted} (want ≤ 3 and ≤ 1)"
    );
    let reasons = s.deployment_event_reasons().await;
    assert!(
        reasons.iter().any(|r| r == "SurgeHandedOver"),
        "no SurgeHandedOver event: {reasons:?}"
    );
}

#[tokio::test]
async fn a_kept_place_is_given_back_once_no_pod_is_on_a_cordoned_node() {
    let (s, _) = start("surge-hold-back", 2).await;
    let client = s.client.clone();
    cordon(&client, &s.a, true).await;
    let pods = pods_of(&s).await;
    evict(&s, &pods[0]).await;
    kept_for(&s, 3, 4).await;
    // The node given back before its other pod was asked for: nothing is due to take the place.
    cordon(&client, &s.a, false).await;
    until(
        Duration::from_secs(60),
        "spec.replicas back at 2 without a surge record",
        || async {
            let d = s.deployments().get(&s.name).await.ok()?;
            (d.spec.replicas == Some(2) && !d.annotations().contains_key("evictord.dev/surge"))
                .then_some(())
        },
    )
    .await;
}
