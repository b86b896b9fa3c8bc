//! How often the node maintenance controller writes a maintenance's status (issue 44), refereed
//! by kube-apiserver's audit log: while a node's pods leave one by one, the maintenance's
//! progress (the counts of pods pending and evacuating, the drain message) is written at most
//! about once per `PROGRESS_INTERVAL` (5 s), not once per pod. Every maintenance in Drain is woken by each such write,
//! and the webhook reviews each. And maintenances queued by a budget as they are created have no
//! status write refused (the admission waits for the cache to show the controller's own writes),
//! and no event of theirs is refused for its namespace. Each pod's EvictionRequest is created
//! once, not again by a reconcile before the watch shows it.

mod support;

use std::time::{Duration, SystemTime};

use evictord::api::{CONDITION_DRAINED, EvictionRequest, NodeMaintenance, Stage};
use evictord::controller::node_maintenance::pacing::PROGRESS_INTERVAL;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::{node, pod};

const TIMEOUT: Duration = Duration::from_secs(60);
/// Pods on the node.
const PODS: usize = 16;
/// Between two of the test's deletions: longer than the controller's debounce (100 ms), so each
/// deletion is a reconcile of its own that finds a new count; the deletions span about two
/// `PROGRESS_INTERVAL`s.
const GAP: Duration = Duration::from_millis(600);

/// Interceptors nobody serves: with `--interceptor-deadline=6s` (FAST) a pod waiting for four
/// of them stays with its request for about 24 s, longer than the test takes to delete them all.
const SILENT: [&str; 4] = [
    "silent-1.example.com",
    "silent-2.example.com",
    "silent-3.example.com",
    "silent-4.example.com",
];

async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let evictord = support::evictord::shared(support::evictord::FAST).await;
    support::wait::until_logged(TIMEOUT, what, || evictord.logs(), f).await
}

async fn maintenance(client: &Client, name: &str, node: &str) {
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            "stage": "Drain",
            "reason": "test",
        }
    }))
    .unwrap();
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap_or_else(|e| panic!("creating maintenance {name}: {e}"));
}

#[tokio::test]
async fn a_drain_writes_its_progress_at_most_once_per_interval() {
    let c = support::control_plane::cluster_with_request_audit().await;
    support::evictord::shared(support::evictord::FAST).await;
    let log = c.request_audit.clone().expect("audit log");
    let client = c.client().await;
    let ns = c.namespace("nm-pace").await;
    let n = format!("{ns}-a");
    node(&n).create(&client).await;
    for i in 0..PODS {
        pod(&format!("p{i}"))
            .on_node(&n)
            .interceptors(&SILENT)
            .create(&client, &ns)
            .await;
    }
    let name = ns.clone();
    maintenance(&client, &name, &n).await;
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    // Every pod has its request, and the status says so.
    eventually("every pod evacuating", || async {
        let listed = requests.list(&ListParams::default()).await.ok()?;
        let nm = nms.get(&name).await.ok()?;
        let line = nm.status.as_ref()?.node_statuses.first()?.clone();
        (listed.items.len() == PODS && line.pods_evacuating == PODS as i32).then_some(())
    })
    .await;
    // The pods leave one by one (as their interceptors would let them go).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let started = SystemTime::now();
    for i in 0..PODS {
        pods.delete(&format!("p{i}"), &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting p{i}: {e}"));
        tokio::time::sleep(GAP).await;
    }
    let deleted = SystemTime::now();
    eventually("the maintenance drained", || async {
        let nm = nms.get(&name).await.ok()?;
        nm.status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_DRAINED && c.status == "True")
            .then_some(())
    })
    .await;
    // The write held back after the last deletion has had its second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let window = deleted.duration_since(started).unwrap() + Duration::from_millis(1500);
    let path = format!("/apis/evictord.dev/v1alpha1/nodemaintenances/{name}/status");
    let writes: Vec<f64> = support::audit::requests(&log)
        .iter()
        .filter(|r| {
            support::audit::client_of(&r.user_agent) == "evictord"
                && r.verb == "patch"
                && r.uri.starts_with(&path)
        })
        .filter_map(|r| r.received.duration_since(started).ok())
        .filter(|d| *d <= window)
        .map(|d| d.as_secs_f64())
        .collect();
    // One progress write per interval of the window, at most, and the Drained condition's own.
    let budget = (window.as_secs_f64() / PROGRESS_INTERVAL.as_secs_f64()).ceil() as usize + 1;
    println!(
        "status writes while {PODS} pods left over {:.1} s: {} at {writes:.1?} s (budget {budget})",
        window.as_secs_f64(),
        writes.len()
    );
    assert!(
        writes.len() <= budget,
        "{} status writes of maintenance {name} while its {PODS} pods left over {:.1} s (at \
         {writes:.1?} s): its progress is written more than once per {PROGRESS_INTERVAL:?}",
        writes.len(),
        window.as_secs_f64()
    );
    // Each pod's request created once: no create repeated by a reconcile that ran before the
    // watch showed the controller's own creations (each refused, 409).
    let creates: Vec<u16> = support::audit::requests(&log)
        .iter()
        .filter(|r| {
            support::audit::client_of(&r.user_agent) == "evictord"
                && r.verb == "create"
                && r.uri.starts_with(&format!(
                    "/apis/evictord.dev/v1alpha1/namespaces/{ns}/evictionrequests"
                ))
        })
        .map(|r| r.code)
        .collect();
    println!("creates of the {PODS} pods' EvictionRequests: {creates:?}");
    assert_eq!(
        creates.len(),
        PODS,
        "evictord created the {PODS} pods' EvictionRequests with these answers: {creates:?}"
    );
    let _ = nms.delete(&name, &DeleteParams::default()).await;
}

/// Six maintenances created at once under a budget of one node: the controller writes each one's
/// first status (its stage, "waiting for the first admission decision") and the admission loop
/// then queues five of them. The admission decides on the shared cache, which can still be behind
/// the reconciler's write: a status write over that copy is refused (422, its resourceVersion
/// test fails) and retried. It waits for the cache to show the controller's own writes instead.
/// Their events are not refused either: the namespace of a cluster-scoped object's events comes
/// from the server's version.
#[tokio::test]
async fn maintenances_queued_at_creation_are_written_without_a_refused_write() {
    const MAINTENANCES: usize = 6;
    let c = support::control_plane::cluster_with_request_audit().await;
    support::evictord::shared(support::evictord::FAST).await;
    let log = c.request_audit.clone().expect("audit log");
    let client = c.client().await;
    let prefix = c.namespace("nm-queue").await;
    let nodes = support::budget::pool(&client, &prefix, MAINTENANCES).await;
    support::budget::budget(&client, &prefix, &prefix, json!(1), json!([])).await;
    let from = SystemTime::now();
    let names: Vec<String> = (1..=MAINTENANCES)
        .map(|i| format!("{prefix}-m{i}"))
        .collect();
    futures::future::join_all(
        names.iter().zip(&nodes).map(|(name, node)| {
            let client = client.clone();
            async move {
                support::budget::maintenance(&client, name, &[node.as_str()], Stage::Drain).await
            }
        }),
    )
    .await;
    eventually("one maintenance admitted, five queued", || async {
        let mut admitted = 0;
        for name in &names {
            let nm = support::budget::get(&client, name).await?;
            match support::budget::admitted(&nm)? {
                (s, _, _) if s == "True" => admitted += 1,
                (s, reason, _) if s == "False" && reason == "BudgetExhausted" => {}
                _ => return None,
            }
        }
        (admitted == 1).then_some(())
    })
    .await;
    let paths: Vec<String> = names
        .iter()
        .map(|n| format!("/apis/evictord.dev/v1alpha1/nodemaintenances/{n}/status"))
        .collect();
    let writes: Vec<(String, u16)> = support::audit::requests(&log)
        .into_iter()
        .filter(|r| {
            r.received >= from
                && support::audit::client_of(&r.user_agent) == "evictord"
                && r.verb == "patch"
                && paths.iter().any(|p| r.uri.starts_with(p.as_str()))
        })
        .map(|r| (r.uri, r.code))
        .collect();
    let refused: Vec<&(String, u16)> = writes.iter().filter(|(_, code)| *code >= 400).collect();
    println!(
        "{} status writes of {MAINTENANCES} maintenances, {} refused",
        writes.len(),
        refused.len()
    );
    assert!(
        refused.is_empty(),
        "status writes of maintenances refused while they were queued at creation: {refused:#?}"
    );
    // The maintenances' events go to the namespace this kube-apiserver (v1.20) takes them in,
    // known from its version: none is refused first.
    let events: Vec<(String, u16)> = support::audit::requests(&log)
        .into_iter()
        .filter(|r| {
            support::audit::client_of(&r.user_agent) == "evictord"
                && r.verb == "create"
                && r.resource == "events"
        })
        .map(|r| (r.uri, r.code))
        .collect();
    assert!(
        !events.is_empty() && events.iter().all(|(_, code)| *code < 400),
        "evictord's events: {events:#?}"
    );
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    for name in &names {
        let _ = nms.delete(name, &DeleteParams::default()).await;
    }
}
