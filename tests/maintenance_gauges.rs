//! The node maintenance gauges on a real kube-apiserver: a node drained by two maintenances
//! counts its pods once in `nodemaintenance_controller_pods_evacuating`. This binary has its own
//! control plane and a single evictord, so no other test's maintenances are in the gauges.

mod support;

use std::time::Duration;

use evictord::api::NodeMaintenance;
use kube::Api;
use kube::api::PostParams;
use support::Evictord;
use support::evictord::install_crds;
use support::fixtures::{draining_maintenance, node, pod};
use support::wait::until;

const LABEL: &str = "gauges.evictord.dev/pool";

#[tokio::test]
async fn a_node_drained_by_two_maintenances_counts_its_pods_once() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("gauges").await;
    let e = Evictord::start(c, support::evictord::FAST).await;
    e.register_webhooks(c, "evictord").await;

    node("shared").label(LABEL, "shared").create(&client).await;
    // Ten interceptors that never answer: with the 6 s deadline of the fast flags the pod stays
    // evacuating for about a minute.
    let silent: Vec<String> = (1..=10)
        .map(|i| format!("silent-{i}.example.com"))
        .collect();
    let silent: Vec<&str> = silent.iter().map(String::as_str).collect();
    pod("stays")
        .on_node("shared")
        .interceptors(&silent)
        .create(&client, &ns)
        .await;

    let api: Api<NodeMaintenance> = Api::all(client.clone());
    for name in ["gauges-a", "gauges-b"] {
        let nm = draining_maintenance(name, LABEL, "shared", "gauge test");
        api.create(&PostParams::default(), &nm)
            .await
            .expect("create NodeMaintenance");
    }
    let api = &api;
    until(
        Duration::from_secs(30),
        "both maintenances record the pod as evacuating",
        move || async move {
            let mut both = true;
            for name in ["gauges-a", "gauges-b"] {
                let nm = api.get(name).await.ok()?;
                let evacuating = nm
                    .status?
                    .node_statuses
                    .iter()
                    .find(|s| s.node_ref.name == "shared")
                    .map(|s| s.pods_evacuating);
                both &= evacuating == Some(1);
            }
            both.then_some(())
        },
    )
    .await;
    // The gauges are refreshed by each reconcile: give the last status write's reconcile time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        e.metric("nodemaintenance_controller_pods_evacuating ")
            .await,
        1.0,
        "one pod evacuating on a node two maintenances drain"
    );
    assert_eq!(
        e.metric("nodemaintenance_controller_pods_pending_evacuation ")
            .await,
        0.0
    );
}
