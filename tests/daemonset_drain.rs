//! `daemonset.apps.k8s.io` on a real kube-apiserver with kube-controller-manager's DaemonSet
//! controller (SPEC 5.3, issue acceptance): a NodeMaintenance removes the plain pods first and the
//! DaemonSet pods after them; while it stays in Drain no pod of that DaemonSet runs on the node
//! again; a DaemonSet that tolerates everything keeps its pod (no churn); the other node is
//! untouched; after Complete the pod is back, the taint gone and the node schedulable. With two
//! intersecting maintenances the taint stays until the last one completes. A DaemonSet pod no
//! maintenance targets completes at once and stays.

mod support;

use std::time::Duration;

use evictord::api::EvictionRequest;
use kube::api::ListParams;
use kube::{Api, Client};
use support::daemonset::DaemonSetScenario;
use support::fixtures::{create_eviction_request, event_reasons, pod};
use support::wait::until;

/// Fast heartbeats and retries; a deadline no loaded machine reaches.
const FLAGS: &[&str] = &[
    "--interceptor-deadline=60s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
];

async fn setup(prefix: &str) -> (Client, String) {
    // Every request in kube-apiserver's audit log: a test counts its own namespace's reads.
    support::control_plane::cluster_with_request_audit().await;
    let c = support::control_plane::cluster_with_controller_manager().await;
    support::evictord::shared(FLAGS).await;
    (c.client().await, c.namespace(prefix).await)
}

#[tokio::test]
async fn daemonset_pods_leave_after_the_others_and_stay_away_until_complete() {
    let (client, ns) = setup("ds-drain").await;
    let s = DaemonSetScenario::start(client.clone(), &ns).await;
    let (one, two) = (s.one.clone(), s.two.clone());
    s.daemonset("logs", false, 0).await;
    s.daemonset("everywhere", true, 0).await;
    pod("plain").on_node(&one).create(&client, &ns).await;
    let logs_before = s.wait_running_on("logs", &[&one, &two]).await;
    let everywhere_before = s.wait_running_on("everywhere", &[&one, &two]).await;
    let timeline = s.timeline();

    let nm = format!("{ns}-nm");
    s.maintenance(&nm, &[&one]).await;
    let drained = s.wait_drained(&nm, Duration::from_secs(120)).await;
    // The DaemonSet controller keeps running: give it time to recreate the pod, if it would.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let logs_during = s.running("logs").await;
    let everywhere_during = s.running("everywhere").await;
    let (tainted, unschedulable) = s.node_state(&one).await;
    let two_state = s.node_state(&two).await;

    // The requests say what each interceptor did.
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let logs_uid = logs_before[&one].clone();
    let r = requests
        .get(&logs_uid)
        .await
        .expect("the logs pod's request");
    let st = r.status.expect("status");
    assert_eq!(
        st.target_interceptors
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["daemonset.apps.k8s.io", "imperative-eviction.k8s.io"]
    );
    assert!(st.is_true("Evicted"), "{st:?}");
    let entry = st.interceptor("daemonset.apps.k8s.io").expect("entry");
    assert!(
        entry
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(&format!("due to node maintenance {nm} (kernel upgrade)")),
        "{entry:?}"
    );
    let kept = requests
        .get(&everywhere_before[&one])
        .await
        .expect("the tolerating pod's request");
    let kept_entry = kept.status.expect("status");
    let kept_entry = kept_entry
        .interceptor("daemonset.apps.k8s.io")
        .expect("entry");
    assert!(
        kept_entry.completion_time.is_some()
            && kept_entry
                .message
                .as_deref()
                .unwrap_or_default()
                .starts_with("left running: DaemonSet everywhere tolerates"),
        "{kept_entry:?}"
    );

    let completed_at = std::time::Instant::now();
    s.complete(&nm).await;
    let logs_after = s.wait_running_on("logs", &[&one, &two]).await;
    until(Duration::from_secs(60), "node one restored", || async {
        (s.node_state(&one).await == (false, false)).then_some(())
    })
    .await;
    println!("timeline of {ns} (maintenance {nm} created at about 0 s):");
    timeline.print();
    let seen = timeline.snapshot();

    // The plain pod left first, then the DaemonSet pod of node one.
    let stop = |name_prefix: &str, node: &str| {
        seen.values()
            .find(|p| p.name.starts_with(name_prefix) && p.node == node && p.gone)
            .map(|p| p.terminating.unwrap_or(p.last))
    };
    let plain_gone = stop("plain", &one).expect("the plain pod left");
    let logs_gone = stop("logs-", &one).expect("the DaemonSet pod on node one left");
    assert!(
        plain_gone < logs_gone,
        "the DaemonSet pod left before the plain pod"
    );
    // While the maintenance was in Drain, no pod of `logs` ran on node one.
    assert!(!logs_during.contains_key(&one), "{logs_during:?}");
    let back_early: Vec<&str> = seen
        .values()
        .filter(|p| p.name.starts_with("logs-") && p.node == one)
        .filter(|p| p.first > logs_gone && p.first < completed_at)
        .map(|p| p.name.as_str())
        .collect();
    assert!(
        back_early.is_empty(),
        "pods of logs started on node one during the maintenance: {back_early:?}"
    );
    // The tolerating DaemonSet did not churn: the same pods throughout.
    assert_eq!(everywhere_during, everywhere_before);
    // Node two untouched: its pods are the same, and it is neither tainted nor cordoned.
    assert_eq!(logs_during.get(&two), logs_before.get(&two));
    assert_eq!(two_state, (false, false));
    assert!(
        tainted && unschedulable,
        "node one during Drain: tainted {tainted}, unschedulable {unschedulable}"
    );
    // Drained, and the node's message says which pod stays and why.
    let status = drained.status.expect("status");
    let message = &status.node_statuses[0].drain_message;
    assert!(
        message.starts_with("Drained; 1 pod stays: ")
            && message.contains("(its DaemonSet tolerates the evictord.dev/maintenance taint)"),
        "{message}"
    );
    // After Complete: a new pod of `logs` on node one.
    assert_ne!(logs_after.get(&one), logs_before.get(&one));

    // Events and metrics.
    let on_daemonsets = event_reasons(&client, Some(&ns), "DaemonSet").await;
    for reason in ["DaemonSetPodRemoved", "DaemonSetPodKept"] {
        assert!(
            on_daemonsets.iter().any(|r| r == reason),
            "no {reason}: {on_daemonsets:?}"
        );
    }
    let on_maintenances = event_reasons(&client, None, "NodeMaintenance").await;
    for reason in ["NodeTainted", "NodeUntainted"] {
        assert!(
            on_maintenances.iter().any(|r| r == reason),
            "no {reason}: {on_maintenances:?}"
        );
    }
    let e = support::evictord::shared(FLAGS).await;
    for series in [
        "evictord_daemonset_interceptor_pods_total{result=\"removed\"}",
        "evictord_daemonset_interceptor_pods_total{result=\"kept\"}",
    ] {
        assert!(e.metric(series).await >= 1.0, "{series}");
    }
}

#[tokio::test]
async fn the_taint_stays_until_the_last_intersecting_maintenance_completes() {
    let (client, ns) = setup("ds-two").await;
    let s = DaemonSetScenario::start(client.clone(), &ns).await;
    let one = s.one.clone();
    s.daemonset("logs", false, 0).await;
    s.wait_running_on("logs", &[&one, &s.two]).await;
    let (first, second) = (format!("{ns}-first"), format!("{ns}-second"));
    s.maintenance(&first, &[&one]).await;
    s.maintenance(&second, &[&one]).await;
    s.wait_drained(&first, Duration::from_secs(120)).await;
    s.wait_drained(&second, Duration::from_secs(120)).await;
    assert!(!s.running("logs").await.contains_key(&one));

    s.complete(&first).await;
    // The first maintenance's Complete work is done once it has withdrawn its requests; the
    // node stays held by the second one.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        s.node_state(&one).await,
        (true, true),
        "still held by {second}"
    );
    assert!(
        !s.running("logs").await.contains_key(&one),
        "the DaemonSet pod came back while {second} holds the node"
    );

    s.complete(&second).await;
    s.wait_running_on("logs", &[&one, &s.two]).await;
    until(Duration::from_secs(60), "node one restored", || async {
        (s.node_state(&one).await == (false, false)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_daemonset_pod_no_maintenance_targets_stays() {
    let (client, ns) = setup("ds-untargeted").await;
    let s = DaemonSetScenario::start(client.clone(), &ns).await;
    s.daemonset("logs", false, 0).await;
    let running = s.wait_running_on("logs", &[&s.one, &s.two]).await;
    let uid = running[&s.one].clone();
    let name = {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
            .map(|p| p.metadata.name.unwrap())
            .unwrap()
    };
    let api = create_eviction_request(&client, &ns, &name, &uid, &["test.example.com"]).await;
    let st = until(
        Duration::from_secs(60),
        "the imperative interceptor active",
        || async {
            let st = api.get(&uid).await.ok()?.status?;
            (st.active_interceptors == ["imperative-eviction.k8s.io"]).then_some(st)
        },
    )
    .await;
    let entry = st.interceptor("daemonset.apps.k8s.io").expect("entry");
    assert!(
        entry
            .message
            .as_deref()
            .unwrap_or_default()
            .starts_with(&format!(
                "no NodeMaintenance in Drain targets pod {ns}/{name} on node {}",
                s.one
            )),
        "{entry:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.running("logs").await.get(&s.one),
        Some(&uid),
        "the pod stays"
    );
}

/// The GETs of namespace `ns`'s DaemonSets that kube-apiserver received from evictord (by its
/// user agent, from the audit log) since `from`. Other clients are not counted:
/// kube-controller-manager GETs a DaemonSet itself, to retry a status update that conflicted
/// (its DaemonSet controller) or to check an owner its graph has not seen yet (its garbage
/// collector). The other tests of this binary, running beside, create DaemonSets of their own and
/// drain at once; a look at a pod whose DaemonSet the cache has not seen yet reads it live, as it
/// should, hence the count in this test's own namespace.
async fn daemonset_gets(ns: &str, from: std::time::SystemTime) -> Vec<String> {
    let c = support::cluster().await;
    let log = c.request_audit.as_ref().expect("the request audit log");
    let path = format!("/namespaces/{ns}/daemonsets/");
    support::audit::requests(log)
        .into_iter()
        .filter(|r| {
            r.verb == "get"
                && r.resource == "daemonsets"
                && r.uri.contains(&path)
                && r.received >= from
                && support::audit::client_of(&r.user_agent) == "evictord"
        })
        .map(|r| format!("{} {} ({})", r.uri, r.code, r.user_agent))
        .collect()
}

/// The interceptor reads DaemonSets (and NodeMaintenances and nodes) from watch caches, not once
/// per look: a drain that removes one DaemonSet pod and keeps another costs kube-apiserver no
/// `GET` of one of its DaemonSets from evictord (counted in its own namespace: the other tests of
/// this binary, running beside, drain through the same interceptor).
#[tokio::test]
async fn the_interceptor_reads_daemonsets_from_its_cache() {
    let (client, ns) = setup("ds-reads").await;
    let s = DaemonSetScenario::start(client.clone(), &ns).await;
    let one = s.one.clone();
    s.daemonset("logs", false, 0).await;
    s.daemonset("everywhere", true, 0).await;
    s.wait_running_on("logs", &[&one, &s.two]).await;
    let everywhere = s.wait_running_on("everywhere", &[&one, &s.two]).await;
    let before = std::time::SystemTime::now();

    let nm = format!("{ns}-nm");
    s.maintenance(&nm, &[&one]).await;
    s.wait_drained(&nm, Duration::from_secs(120)).await;
    assert!(
        !s.running("logs").await.contains_key(&one),
        "the logs pod removed"
    );
    assert_eq!(
        s.running("everywhere").await.get(&one),
        everywhere.get(&one),
        "the tolerating pod kept"
    );
    let gets = daemonset_gets(&ns, before).await;
    assert!(
        gets.is_empty(),
        "evictord's GETs of this test's DaemonSets during the drain: {gets:#?}"
    );

    s.complete(&nm).await;
    s.wait_running_on("logs", &[&one, &s.two]).await;
}
