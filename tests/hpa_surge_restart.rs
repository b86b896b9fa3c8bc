//! The `horizontalpodautoscaler.autoscaling.k8s.io` interceptor survives a SIGKILL while an
//! autoscaler's floor is raised: the restarted evictord (same webhook port and certificates)
//! finishes the surge from the record on the autoscaler, the drain completes and the floor goes
//! back. Its own binary: it starts and kills its own evictord.

mod support;

use std::time::Duration;

use support::Evictord;
use support::evictord::{SpawnOptions, install_crds};
use support::hpa::{start, wait_limits, wait_moved_to};
use support::surge::FLAGS;

#[tokio::test]
async fn a_killed_evictord_puts_the_floor_back_after_restart() {
    let c = support::control_plane::cluster_with_controller_manager().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("hpa-restart").await;
    let mut first = Evictord::start(c, FLAGS).await;
    first.register_webhooks(c, "evictord").await;

    let s = start(client, &ns, 1, 1, 3).await;
    // New pods stay unready, so the surge cannot finish before the kill.
    s.kubelet.set_ready(false);
    let sampler = s.sample();
    s.drain().await;
    wait_limits(&s, 2, 3, true).await;
    first.kill();
    s.kubelet.set_ready(true);

    let second = Evictord::spawn(c, FLAGS, SpawnOptions::in_place_of(&first));
    second.ready().await;
    s.wait_drained(Duration::from_secs(180)).await;
    wait_moved_to(&s, &s.b.clone()).await;
    wait_limits(&s, 1, 3, false).await;
    let (min, _) = sampler.stop().await;
    assert!(min >= 1, "only {min} available replicas during the drain");
    assert!(
        second.logs().contains("SurgeFinished"),
        "the restarted evictord did not finish the surge:\n{}",
        support::control_plane::tail(&second.logs(), 40)
    );
}
