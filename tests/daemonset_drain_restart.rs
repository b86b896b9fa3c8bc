//! `daemonset.apps.k8s.io` survives a SIGKILL while a DaemonSet pod's removal is in flight: the
//! pod is terminating (a 20 s grace period), evictord is killed, a new one starts (same webhook
//! port and certificates). Nothing is lost and nothing starts early: the taint stays on the node,
//! no pod of the DaemonSet runs there again during the maintenance, the drain finishes, and
//! Complete restores the taint and the cordon and brings the pod back. Its own binary: it starts
//! and kills its own evictord.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use support::Evictord;
use support::daemonset::DaemonSetScenario;
use support::evictord::{SpawnOptions, install_crds};
use support::wait::until;

const FLAGS: &[&str] = &[
    "--interceptor-deadline=60s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
];

#[tokio::test]
async fn a_killed_evictord_finishes_the_daemonset_drain_after_restart() {
    let c = support::control_plane::cluster_with_controller_manager().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("ds-restart").await;
    let mut first = Evictord::start(c, FLAGS).await;
    first.register_webhooks(c, "evictord").await;

    let s = DaemonSetScenario::start(client.clone(), &ns).await;
    let one = s.one.clone();
    s.daemonset("logs", false, 20).await;
    s.wait_running_on("logs", &[&one, &s.two]).await;
    let timeline = s.timeline();
    let nm = format!("{ns}-nm");
    s.maintenance(&nm, &[&one]).await;

    // The removal in flight: the pod on node one terminating through its grace period.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    until(
        Duration::from_secs(90),
        "the DaemonSet pod on node one terminating",
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=logs"))
                .await
                .ok()?;
            list.items
                .iter()
                .any(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(one.as_str())
                        && p.metadata.deletion_timestamp.is_some()
                })
                .then_some(())
        },
    )
    .await;
    first.kill();
    let killed_at = Instant::now();
    // Down for a while: the pod finishes terminating meanwhile, the DaemonSet controller runs on.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        s.node_state(&one).await,
        (true, true),
        "the taint and cordon stay while evictord is down"
    );

    let second = Evictord::spawn(c, FLAGS, SpawnOptions::in_place_of(&first));
    second.ready().await;
    s.wait_drained(&nm, Duration::from_secs(180)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let completed_at = Instant::now();
    s.complete(&nm).await;
    s.wait_running_on("logs", &[&one, &s.two]).await;
    until(Duration::from_secs(60), "node one restored", || async {
        (s.node_state(&one).await == (false, false)).then_some(())
    })
    .await;
    println!(
        "timeline of {ns} (evictord killed at {:.1}s):",
        killed_at.duration_since(timeline.start).as_secs_f64()
    );
    timeline.print();
    let early: Vec<String> = timeline
        .snapshot()
        .into_values()
        .filter(|p| p.name.starts_with("logs-") && p.node == one)
        .filter(|p| p.first > timeline.start + Duration::from_millis(200) && p.first < completed_at)
        .map(|p| p.name)
        .collect();
    assert!(
        early.is_empty(),
        "pods of logs started on node one during the maintenance: {early:?}"
    );
}
