//! Faults during a large drain on the real control plane (`make chaos`; ignored by `make test`,
//! it takes minutes): the leader is SIGKILLed in the middle of a NodeMaintenance draining 1000
//! pods. The standby must take over within its lease duration plus 15 s, every pod must be
//! evicted exactly once (kube-apiserver counts one successful `pods/eviction` per pod and no
//! call answered otherwise: no call after a pod was evicted), and every EvictionRequest must end
//! with a condition. The figures are printed for docs/src/reliability.md.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use support::apiserver::{REQUESTS, counters};
use support::chaos::{
    LEADING, every_request_ended, evicted, kubelet_finishing_deletions, leader_and_standby,
    pods_on_node, remaining, start_drain, until_remaining_at_most,
};
use support::cluster;
use support::evictord::install_crds;
use support::wait::until;

const PODS: usize = 1000;
const LEASE: Duration = Duration::from_secs(15);

/// kube-apiserver's `pods/eviction` POSTs by status code.
async fn eviction_calls(client: &Client) -> std::collections::BTreeMap<String, f64> {
    let prefix = format!("{REQUESTS}|POST pods/eviction ");
    counters(client)
        .await
        .expect("kube-apiserver metrics")
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|code| (code.to_string(), v)))
        .collect()
}

#[tokio::test]
#[ignore = "minutes long: run by `make chaos`"]
async fn leader_sigkilled_mid_drain_of_1000_pods() {
    let c = cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("chaos-drain").await;
    // kube-apiserver calls the standby's webhook, which outlives the leader.
    let (mut leader, standby) = leader_and_standby(c, &ns, LEASE, "evictord-chaos").await;

    let created = Instant::now();
    pods_on_node(&client, &ns, "chaos-n1", ("chaos", "drain"), PODS).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert_eq!(remaining(&pods).await, PODS);
    let finished_by_kubelet = Arc::new(AtomicUsize::new(0));
    let kubelet = kubelet_finishing_deletions(pods.clone(), finished_by_kubelet.clone());
    println!("created {PODS} pods in {:?}", created.elapsed());
    let before = eviction_calls(&client).await;

    let drain_started = start_drain(
        &client,
        "chaos-drain",
        ("chaos", "drain"),
        "chaos: leader SIGKILL",
    )
    .await;

    // Mid-drain: about a third of the pods evicted.
    until_remaining_at_most(
        &pods,
        PODS * 2 / 3,
        Duration::from_secs(600),
        "a third of the pods evicted",
    )
    .await;
    let left_at_kill = remaining(&pods).await;
    let at_kill = eviction_calls(&client).await;
    leader.kill();
    let killed = Instant::now();
    until(
        LEASE + Duration::from_secs(15),
        "the standby to take over",
        || async { standby.logs().contains(LEADING).then_some(()) },
    )
    .await;
    let takeover = killed.elapsed();

    until_remaining_at_most(&pods, 0, Duration::from_secs(900), "every pod evicted").await;
    let drained_after = drain_started.elapsed();
    kubelet.abort();

    // Every request ended with a condition.
    let all = every_request_ended(&client, &ns, PODS, Duration::from_secs(120)).await;
    let evicted = evicted(&all);

    // Before the kill no Eviction API call failed. The SIGKILL cuts the calls in flight short
    // (kube-apiserver answers them 500 "context canceled", or 504): some had removed the pod,
    // some only marked it deleted (the kubelet finishes those), some had done nothing and the new
    // leader calls again. Every pod is accounted for by a successful call or a cut one, and no
    // call is made for a pod already evicted (404, or 409 on the UID precondition).
    let after = eviction_calls(&client).await;
    let delta = |counts: &std::collections::BTreeMap<String, f64>, code: &str| {
        counts.get(code).unwrap_or(&0.0) - before.get(code).unwrap_or(&0.0)
    };
    let failed = |counts: &std::collections::BTreeMap<String, f64>| -> Vec<(String, f64)> {
        counts
            .keys()
            .filter(|code| code.as_str() != "201")
            .map(|code| (code.clone(), delta(counts, code)))
            .filter(|(_, n)| *n > 0.0)
            .collect()
    };
    let finished = finished_by_kubelet.load(Ordering::SeqCst);
    println!(
        "RELIABILITY leader-sigkill: {PODS} pods, leader killed with {left_at_kill} left, standby \
         led after {takeover:?} (lease {LEASE:?}), drain done in {drained_after:?}; Eviction API \
         calls answered 201: {}, otherwise before the kill: {:?}, otherwise in all (cut by the kill): \
         {:?}; pods left terminating by a cut call (finished by the test's kubelet): {finished}; \
         requests Evicted: {evicted}/{}",
        delta(&after, "201"),
        failed(&at_kill),
        failed(&after),
        all.len()
    );
    assert!(
        failed(&at_kill).is_empty(),
        "failed Eviction API calls before the kill"
    );
    for code in ["404", "409", "429"] {
        assert_eq!(
            delta(&after, code),
            0.0,
            "Eviction API calls answered {code}"
        );
    }
    let cut: f64 = failed(&after).iter().map(|(_, n)| n).sum();
    assert!(
        delta(&after, "201") + cut >= PODS as f64 && delta(&after, "201") <= PODS as f64,
        "every pod evicted once"
    );
    assert_eq!(evicted, PODS, "every request Evicted");
    c.delete_namespace(&ns).await;
}
