//! What the interceptors' reads cost kube-apiserver (issue 44, reads from caches), refereed by
//! its audit log of every request: during a surged Deployment drain (3 replicas, maxSurge 1,
//! a PodDisruptionBudget allowing none to go), the `deployment.apps.k8s.io` interceptor and its
//! settler (evictord's `interceptor` user agent) read the pods from the SDK runner's watch cache,
//! with a live GET only where the cache misses; the old code GOT the pod on every look at a
//! request and every 2 s per covered pod in the settler. And the Deployment interceptor reads the
//! pod's ReplicaSet, the Deployment and the readiness of its pods from watch caches too, within a
//! budget of GETs and LISTs per surged pod, and writes each request's status at most three times.
//! Nothing but evictord calls the Eviction API here, so its bridge writes none of the requests.

mod support;

use std::time::Duration;

use support::audit::requests;
use support::surge::{FLAGS, Scenario};

/// evictord's interceptor component, whatever its version and replica identity.
fn is_interceptor(user_agent: &str) -> bool {
    user_agent.starts_with("evictord/") && user_agent.contains("(interceptor")
}

/// GETs of pods per EvictionRequest the interceptor may make in a drain: its first look at a
/// request reads the pod from the watch of the node evictord's cluster cache says it runs on,
/// and the settler's confirmation that a pod the cache lost is gone comes from that watch's
/// delete event; a GET only where a cache misses (one per request at most). (Before the cache,
/// 3 requests cost about 30 GETs of their pods; before the node hint and the delete events, 6.)
const POD_GETS_PER_REQUEST: usize = 1;

/// Status writes of its EvictionRequests per request by the interceptor, refused ones included:
/// its start, at most one state that lasts, its completion. (Before the runner held quick
/// changes of its message and read its own last write over a cache behind it: 23 for 3
/// requests, 5 of them refused as concurrent.)
const STATUS_WRITES_PER_REQUEST: usize = 3;

/// GETs of EvictionRequests per request: the settlers read them from the runner's watch cache
/// and confirm live only one the cache does not hold.
const REQUEST_GETS_PER_REQUEST: usize = 1;

/// GETs of ReplicaSets per surged pod by the Deployment interceptor: a pod's ReplicaSet comes
/// from a watch cache, read live only when the cache lacks it. (Before the cache, every look at
/// a request GOT it: 36 for 3 surged pods at dfecc97.)
const REPLICASET_GETS_PER_SURGED_POD: usize = 1;

/// GETs of Deployments per surged pod: the Deployment comes from the shared watch cache, read
/// live only to resolve a write conflict (a cache behind the guarded patch) or while the cache
/// has not listed yet. (Before: every look, 38 for 3 surged pods at dfecc97.)
const DEPLOYMENT_GETS_PER_SURGED_POD: usize = 1;

/// LISTs of the namespace's pods for the whole drain: the readiness of a surged Deployment's pods
/// comes from a watch of its namespace's pods (its first list, and one more should the watch have
/// to list again).
/// (Before: a LIST at every look that found the surge available, 3 at dfecc97.)
const POD_LISTS_PER_SURGED_DEPLOYMENT: usize = 2;

#[tokio::test]
async fn a_surged_drain_reads_its_pods_from_the_cache() {
    let c = support::control_plane::cluster_with_request_audit().await;
    support::control_plane::cluster_with_controller_manager().await;
    support::evictord::shared(FLAGS).await;
    let log = c.request_audit.clone().expect("audit log");
    let client = c.client().await;
    let ns = c.namespace("reads").await;
    let replicas = 3;
    let s = Scenario::start(client, &ns, replicas, 1).await;
    let started = std::time::SystemTime::now();
    s.drain().await;
    s.wait_drained(Duration::from_secs(180)).await;
    s.wait_settled_on(
        &s.b.clone(),
        "the Deployment back at its replicas on node b",
    )
    .await;
    // The settler's last looks after the Deployment settled.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let pods_path = format!("/api/v1/namespaces/{ns}/pods/");
    let audit = requests(&log);
    let mine: Vec<_> = audit
        .iter()
        .filter(|r| is_interceptor(&r.user_agent) && r.uri.starts_with(&pods_path))
        .collect();
    let gets = mine
        .iter()
        .filter(|r| r.verb == "get" && r.resource == "pods")
        .count();
    let per_request = gets as f64 / f64::from(replicas);
    println!(
        "interceptor GETs of pods: {gets} for {replicas} EvictionRequests ({per_request:.1} per request)"
    );
    let requests_path = format!("/apis/evictord.dev/v1alpha1/namespaces/{ns}/evictionrequests/");
    let request_gets: Vec<_> = audit
        .iter()
        .filter(|r| {
            is_interceptor(&r.user_agent) && r.verb == "get" && r.uri.starts_with(&requests_path)
        })
        .collect();
    println!(
        "interceptor GETs of EvictionRequests: {} for {replicas} EvictionRequests",
        request_gets.len()
    );
    // The Deployment interceptor's reads: the ReplicaSet, the Deployment and the readiness of
    // the Deployment's pods.
    let by_interceptor = |verb: &str, prefix: &str| {
        audit
            .iter()
            .filter(|r| {
                is_interceptor(&r.user_agent) && r.verb == verb && r.uri.starts_with(prefix)
            })
            .count()
    };
    let apps = format!("/apis/apps/v1/namespaces/{ns}");
    let replicaset_gets = by_interceptor("get", &format!("{apps}/replicasets/"));
    let deployment_gets = by_interceptor("get", &format!("{apps}/deployments/"));
    let deployment_patches = by_interceptor("patch", &format!("{apps}/deployments/"));
    // A LIST of the namespace's pods (the cluster-wide lists by node are the pod cache's,
    // counted above).
    let pod_lists = by_interceptor("list", &format!("/api/v1/namespaces/{ns}/pods"));
    let status_writes = by_interceptor("patch", &requests_path);
    println!(
        "Deployment interceptor, for {replicas} surged pods: GETs of ReplicaSets {replicaset_gets}, \
         GETs of Deployments {deployment_gets}, LISTs of pods {pod_lists}, PATCHes of the \
         Deployment {deployment_patches}, status writes of EvictionRequests {status_writes}"
    );
    // The interceptor's requests on the Deployment, in order, for the record.
    let mut on_deployment: Vec<_> = audit
        .iter()
        .filter(|r| {
            is_interceptor(&r.user_agent) && r.uri.starts_with(&format!("{apps}/deployments/"))
        })
        .collect();
    on_deployment.sort_by_key(|r| r.received);
    for r in &on_deployment {
        let at = r
            .received
            .duration_since(started)
            .map_or(0.0, |d| d.as_secs_f64());
        println!("  {at:6.2} s {} {} {}", r.verb, r.uri, r.code);
    }
    // The watch caches' own requests, for the record (a watch is logged once it ends).
    for r in audit.iter().filter(|r| {
        is_interceptor(&r.user_agent)
            && r.resource == "pods"
            && r.uri.contains("fieldSelector")
            && r.received >= started
    }) {
        println!("  {} {} {}", r.verb, r.uri, r.code);
    }
    // Every evictord request in the drain, by component, verb and resource, for the record.
    let counts = support::audit::count_by_client(&audit, started, std::time::SystemTime::now());
    for (kind, n) in &counts.evictord_by_request {
        println!("  evictord {kind}: {n}");
    }
    assert!(
        gets <= POD_GETS_PER_REQUEST * replicas as usize,
        "the interceptor GOT its pods {gets} times for {replicas} EvictionRequests \
         (budget {POD_GETS_PER_REQUEST} per request): {:#?}",
        mine.iter()
            .map(|r| format!("{} {} {}", r.verb, r.uri, r.code))
            .collect::<Vec<_>>()
    );
    assert!(
        request_gets.len() <= REQUEST_GETS_PER_REQUEST * replicas as usize,
        "the interceptor GOT its EvictionRequests {} times for {replicas} of them \
         (budget {REQUEST_GETS_PER_REQUEST} per request): {:#?}",
        request_gets.len(),
        request_gets
            .iter()
            .map(|r| format!("{} {} {}", r.verb, r.uri, r.code))
            .collect::<Vec<_>>()
    );
    assert!(
        status_writes <= STATUS_WRITES_PER_REQUEST * replicas as usize,
        "the interceptor wrote the status of its EvictionRequests {status_writes} times for \
         {replicas} of them (budget {STATUS_WRITES_PER_REQUEST} per request)"
    );
    // Nothing but evictord calls the Eviction API here: its bridge lets its own calls through.
    support::audit::assert_own_evictions_not_bridged(&audit, &ns, started, "a surged drain");
    let surged = replicas as usize;
    assert!(
        replicaset_gets <= REPLICASET_GETS_PER_SURGED_POD * surged,
        "the Deployment interceptor GOT ReplicaSets {replicaset_gets} times for {surged} surged pods \
         (budget {REPLICASET_GETS_PER_SURGED_POD} per pod)"
    );
    assert!(
        deployment_gets <= DEPLOYMENT_GETS_PER_SURGED_POD * surged,
        "the Deployment interceptor GOT the Deployment {deployment_gets} times for {surged} surged \
         pods (budget {DEPLOYMENT_GETS_PER_SURGED_POD} per pod)"
    );
    assert!(
        pod_lists <= POD_LISTS_PER_SURGED_DEPLOYMENT,
        "the Deployment interceptor LISTed the Deployment's pods {pod_lists} times for one surged \
         Deployment (budget {POD_LISTS_PER_SURGED_DEPLOYMENT})"
    );
}
