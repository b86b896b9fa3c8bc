//! The `deployment.apps.k8s.io` interceptor survives a SIGKILL while a Deployment is surged: the
//! restarted evictord (same webhook port and certificates) finishes the surge, the drain
//! completes and the Deployment returns to its replicas. Its own binary: it starts and kills its
//! own evictord.

mod support;

use std::time::Duration;

use kube::ResourceExt;
use support::Evictord;
use support::evictord::{SpawnOptions, install_crds};
use support::surge::{FLAGS, Scenario};
use support::wait::until;

#[tokio::test]
async fn a_killed_evictord_finishes_the_surge_after_restart() {
    let c = support::control_plane::cluster_with_controller_manager().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("surge-restart").await;
    let mut first = Evictord::start(c, FLAGS).await;
    first.register_webhooks(c, "evictord").await;

    let s = Scenario::start(client, &ns, 1, 1).await;
    // New pods stay unready, so the surge cannot finish before the kill.
    s.kubelet.set_ready(false);
    let sampler = s.sample();
    s.drain().await;
    until(
        Duration::from_secs(60),
        "the Deployment surged to 2",
        || async {
            let d = s.deployments().get(&s.name).await.ok()?;
            (d.spec.replicas == Some(2) && d.annotations().contains_key("evictord.dev/surge"))
                .then_some(())
        },
    )
    .await;
    first.kill();
    s.kubelet.set_ready(true);

    let second = Evictord::spawn(c, FLAGS, SpawnOptions::in_place_of(&first));
    second.ready().await;
    s.wait_drained(Duration::from_secs(180)).await;
    s.wait_settled_on(&s.b.clone(), "the Deployment back at 1 replica on node b")
        .await;
    let (min, _) = sampler.stop().await;
    assert!(min >= 1, "only {min} available replicas during the drain");
    assert!(
        second.logs().contains("SurgeFinished"),
        "the restarted evictord did not finish the surge:\n{}",
        support::control_plane::tail(&second.logs(), 40)
    );
}
