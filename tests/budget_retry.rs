//! A refused eviction is retried as soon as the PodDisruptionBudget allows it, not after its whole
//! backoff, and not every second or two while it still refuses: evictord watches the budgets
//! (policy/v1beta1 on the 1.20 test server, chosen from discovery), holds the retry while one
//! selecting the pod allows no disruption, and is woken when it allows one again.

mod support;

use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::Evictord;
use support::evictord::install_crds;
use support::fixtures::pod;
use support::wait::until;

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_budget_that_allows_again_cuts_the_backoff_short() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("budget-retry").await;
    let p = pod("guarded")
        .label("app", "guarded")
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let pdbs = support::fixtures::pdb_api(&client, &ns);
    let pdb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    // The test plays the disruption controller: the budget computed, allowing nothing.
    let allowed = |n: i32| json!({"status": {"observedGeneration": 1, "currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": n, "expectedPods": 1}});
    pdbs.patch_status("guard", &PatchParams::default(), &Patch::Merge(&allowed(0)))
        .await
        .unwrap();

    // The default backoff (1 s doubling, cap 1000 s), as installed.
    let e = Evictord::start(
        c,
        &["--interceptor-deadline=6s", "--min-heartbeat-interval=1s"],
    )
    .await;
    e.register_webhooks(c, "evictord").await;
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "guarded", "uid": uid}}, "requesters": [{"name": "test.example.com"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &er).await.unwrap();
    let counter = |r: &EvictionRequest| r.status.as_ref().map_or(0, |s| s.failed_evictions());
    // Three refusals. The backoff alone would make them 1 and 2 s apart; while the watched budget
    // still refuses, each retry is held 10 s (the budget's change to allow wakes it sooner).
    let blocked = until(
        Duration::from_secs(90),
        "three failed evictions",
        || async { api.get(&uid).await.ok().filter(|r| counter(r) >= 3) },
    )
    .await;
    let n = counter(&blocked);
    let last = blocked
        .status
        .as_ref()
        .and_then(|s| s.pod_eviction_status.as_ref())
        .and_then(|p| p.last_failure_time.clone())
        .expect("a recorded failure time");
    let created = blocked.metadata.creation_timestamp.clone().unwrap();
    // The documented hold (a literal: the test must fail if the constant shrinks).
    let held = Duration::from_secs(10);
    let spent = Duration::from_secs(last.0.duration_since(created.0).as_secs().max(0) as u64);
    // Times are whole seconds: one second of rounding either way.
    assert!(
        spent + Duration::from_secs(1) >= held * (n - 1) as u32,
        "refusal {n} came {spent:?} after the request: retries under a refusing budget were not held {held:?}"
    );
    let due = last
        .0
        .checked_add(evictord::controller::eviction_request::retry_wait(
            n,
            Duration::from_secs(1),
            Duration::from_secs(1000),
            evictord::cluster::Allowance::Refuses,
        ))
        .unwrap();

    // The budget allows one disruption: evictord retries at once instead of at `due`.
    pdbs.patch_status("guard", &PatchParams::default(), &Patch::Merge(&allowed(1)))
        .await
        .unwrap();
    let evicted = until(T, "Evicted", || async {
        api.get(&uid)
            .await
            .ok()
            .filter(|r| r.status.as_ref().is_some_and(|s| s.is_true("Evicted")))
    })
    .await;
    let status = evicted.status.unwrap();
    let at = status.condition("Evicted").unwrap().last_transition_time.0;
    assert!(
        at < due,
        "evicted at {at}, not before the backoff's next try at {due} (failure {n} at {})",
        last.0
    );
    assert_eq!(
        status.failed_evictions(),
        n,
        "the first retry once the budget allowed succeeded"
    );
    assert!(
        Api::<Pod>::namespaced(client.clone(), &ns)
            .get_opt("guarded")
            .await
            .unwrap()
            .is_none()
    );
    let logs = e.logs();
    assert!(!logs.contains("Forbidden"), "{logs}");
    c.delete_namespace(&ns).await;
}
