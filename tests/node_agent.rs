//! `evictord node-agent` on a real control plane: the agent process against kube-apiserver and
//! evictord (webhook and controllers), a temporary directory as the kubelet's static pod
//! directory and a played kubelet that keeps a mirror pod per manifest
//! ([`support::static_kubelet`]). A NodeMaintenance in Drain reaches the Static stage, the agent
//! moves the manifest out, the mirror pod goes; Complete puts it back. SIGKILLed while a
//! manifest is held, the agent loses nothing and starts nothing early; a manifest put at the
//! original path by someone else is never overwritten. (The chart's DaemonSet and RBAC for the
//! agent: `tests/node_agent_chart.rs`.)
//!
//! The manifests declare no interceptor: the eviction request controller gives the mirror pods of
//! a node whose agent announced itself `kubelet.k8s.io` (SPEC 2.3 step 5).

mod support;

use std::time::Duration;

use evictord::api::{CONDITION_DRAINED, NODE_AGENT_ANNOTATION, NodeMaintenance};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use support::fixtures::create_eviction_request;
use support::node_agent::{Agent, TIMEOUT, world};
use support::static_kubelet::StaticKubelet;
use support::wait::until;

#[tokio::test]
async fn a_drain_holds_the_static_pod_until_complete() {
    let w = world("agent-drain").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;

    // The agent announces itself on its node.
    let nodes: Api<Node> = Api::all(w.client.clone());
    let n = nodes.get(&w.node).await.unwrap();
    assert_eq!(
        n.metadata
            .annotations
            .unwrap_or_default()
            .get(NODE_AGENT_ANNOTATION),
        Some(&format!("agent-{}", w.node))
    );

    let maintenance = w.hold_etcd().await;
    let note = w.wait_event("StaticPodManifestHeld").await;
    assert!(
        note.contains("etcd.yaml") && note.contains(&maintenance),
        "{note}"
    );
    // The maintenance counts the static pod as gone.
    until(TIMEOUT, "the maintenance Drained", || async {
        let m = Api::<NodeMaintenance>::all(w.client.clone())
            .get(&maintenance)
            .await
            .unwrap();
        let drained = m
            .status?
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_DRAINED && c.status == "True");
        drained.then_some(())
    })
    .await;
    w.stays_down(&kubelet, 1).await;

    w.complete(&maintenance).await;
    w.wait_restored(&etcd).await;
    w.wait_mirror_pod("etcd").await;
    assert_eq!(kubelet.started("etcd"), 2);
    let note = w.wait_event("StaticPodManifestRestored").await;
    assert!(note.contains("etcd.yaml"), "{note}");
    assert_eq!(
        agent
            .metric("evictord_node_agent_moves_total{result=\"held\"}")
            .await,
        1.0
    );
    until(TIMEOUT, "the restore counted", || async {
        (agent
            .metric("evictord_node_agent_moves_total{result=\"restored\"}")
            .await
            == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        agent.metric("evictord_node_agent_held_manifests").await,
        0.0
    );
    assert_eq!(
        agent.metric("evictord_node_agent_conflicts").await,
        0.0,
        "{}",
        agent.logs()
    );
}

#[tokio::test]
async fn a_killed_agent_loses_nothing_and_starts_nothing_early() {
    let w = world("agent-kill").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let mut agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    let maintenance = w.hold_etcd().await;

    agent.kill();
    w.stays_down(&kubelet, 1).await;
    assert_eq!(
        std::fs::read_to_string(w.held_copy("etcd.yaml")).unwrap(),
        etcd,
        "the held copy is intact"
    );

    // A new agent reads the held directory and carries on: still held while in Drain.
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    w.stays_down(&kubelet, 1).await;
    assert_eq!(
        agent.metric("evictord_node_agent_held_manifests").await,
        1.0
    );

    w.complete(&maintenance).await;
    w.wait_restored(&etcd).await;
    w.wait_mirror_pod("etcd").await;
    assert_eq!(kubelet.started("etcd"), 2, "{}", agent.logs());
}

#[tokio::test]
async fn a_manifest_put_back_by_someone_else_is_not_overwritten() {
    let w = world("agent-conflict").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    let maintenance = w.hold_etcd().await;

    // The administrator puts a new version in place during the maintenance: it runs.
    let theirs = w.manifest("etcd", "registry.invalid/etcd:2");
    std::fs::write(w.dir.join("etcd.yaml"), &theirs).unwrap();
    w.wait_mirror_pod("etcd").await;
    let note = w.wait_event("HeldStaticPodManifestConflict").await;
    assert!(
        note.contains("etcd.yaml") && note.contains("remove"),
        "{note}"
    );

    w.complete(&maintenance).await;
    until(TIMEOUT, "the conflict counted", || async {
        (agent.metric("evictord_node_agent_conflicts").await == 1.0).then_some(())
    })
    .await;
    // Several checks after Complete: theirs stays, ours stays held, nothing is restored.
    for _ in 0..10 {
        assert_eq!(
            std::fs::read_to_string(w.dir.join("etcd.yaml")).unwrap(),
            theirs
        );
        assert_eq!(
            std::fs::read_to_string(w.held_copy("etcd.yaml")).unwrap(),
            etcd
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(kubelet.started("etcd"), 2);
    assert_eq!(
        agent
            .metric("evictord_node_agent_moves_total{result=\"restored\"}")
            .await,
        0.0
    );
}

#[tokio::test]
async fn a_mirror_pod_no_maintenance_targets_is_left_running() {
    let w = world("agent-untargeted").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let _kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    let pod = w.wait_mirror_pod("etcd").await;
    let uid = pod.metadata.uid.unwrap();
    create_eviction_request(
        &w.client,
        &w.ns,
        &w.mirror_name("etcd"),
        &uid,
        &["test.example.com"],
    )
    .await;
    let entry = w
        .wait_kubelet_message(&uid, "no NodeMaintenance in stage Drain targets static pod")
        .await;
    assert!(entry.completion_time.is_some(), "{entry:?}");
    assert_eq!(
        std::fs::read_to_string(w.dir.join("etcd.yaml")).unwrap(),
        etcd
    );
    assert!(w.mirror_pod("etcd").await.is_some());
    assert_eq!(agent.metric("evictord_node_agent_moves_total").await, 0.0);
}
