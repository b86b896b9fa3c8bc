//! Faults during a large drain on the real control plane (`make chaos`; ignored by `make test`,
//! it takes minutes): the leader is SIGKILLed in the middle of a NodeMaintenance draining 1000
//! pods. The standby must take over within its lease duration plus 15 s, every pod must be
//! evicted exactly once (kube-apiserver counts one successful `pods/eviction` per pod and no
//! call answered otherwise: no call after a pod was evicted), and every EvictionRequest must end
//! with a condition. The figures are printed for README "Reliability".

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use evictord::api::{EvictionRequest, NodeMaintenance};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use support::apiserver::{REQUESTS, counters};
use support::evictord::{FAST, SpawnOptions, install_crds};
use support::fixtures::{draining_maintenance, node, pod};
use support::wait::until;
use support::{Evictord, cluster};

const PODS: usize = 1000;
const LEASE: Duration = Duration::from_secs(15);
const LEADING: &str = "acquired leadership";

/// What the kubelet does for an evicted pod once its containers stopped: the final delete
/// (grace period 0). Without it a pod whose eviction was cut short (the evicting client died
/// between kube-apiserver setting the deletion timestamp and removing the object) stays
/// terminating forever on this control plane, which has no kubelet. No Eviction API call.
/// Counts the pods it finished.
fn kubelet_finishing_deletions(
    pods: Api<Pod>,
    finished: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Ok(list) = pods.list_metadata(&ListParams::default()).await {
                for p in list.items {
                    if p.metadata.deletion_timestamp.is_some() {
                        let name = p.metadata.name.unwrap_or_default();
                        let params = DeleteParams::default().grace_period(0);
                        if pods.delete(&name, &params).await.is_ok() {
                            finished.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

async fn remaining(pods: &Api<Pod>) -> usize {
    pods.list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(usize::MAX)
}

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
    let lease_ns = format!("--leader-election-namespace={ns}");
    let lease = format!("--lease-duration={}s", LEASE.as_secs());
    let mut args = FAST.to_vec();
    args.extend([
        "--leader-election",
        lease.as_str(),
        "--leader-election-id=evictord-controllers",
        &lease_ns,
    ]);
    let a = Evictord::spawn(c, &args, SpawnOptions::default());
    let b = Evictord::spawn(c, &args, SpawnOptions::default());
    a.ready().await;
    b.ready().await;
    let a_leads = until(Duration::from_secs(60), "a leader", || async {
        match (a.logs().contains(LEADING), b.logs().contains(LEADING)) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            _ => None,
        }
    })
    .await;
    let (mut leader, standby) = if a_leads { (a, b) } else { (b, a) };
    // kube-apiserver calls the standby's webhook, which outlives the leader.
    standby.register_webhooks(c, "evictord-chaos").await;

    node("chaos-n1")
        .label("chaos", "drain")
        .create(&client)
        .await;
    let created = Instant::now();
    futures::stream::iter(0..PODS)
        .for_each_concurrent(32, |i| {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                pod(&format!("p{i:04}"))
                    .on_node("chaos-n1")
                    .create(&client, &ns)
                    .await;
            }
        })
        .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert_eq!(remaining(&pods).await, PODS);
    let finished_by_kubelet = Arc::new(AtomicUsize::new(0));
    let kubelet = kubelet_finishing_deletions(pods.clone(), finished_by_kubelet.clone());
    println!("created {PODS} pods in {:?}", created.elapsed());
    let before = eviction_calls(&client).await;

    let maintenances: Api<NodeMaintenance> = Api::all(client.clone());
    maintenances
        .create(
            &PostParams::default(),
            &draining_maintenance("chaos-drain", "chaos", "drain", "chaos: leader SIGKILL"),
        )
        .await
        .expect("NodeMaintenance");
    let drain_started = Instant::now();

    // Mid-drain: about a third of the pods evicted.
    until(
        Duration::from_secs(600),
        "a third of the pods evicted",
        || {
            let pods = pods.clone();
            async move { (remaining(&pods).await <= PODS * 2 / 3).then_some(()) }
        },
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

    until(Duration::from_secs(900), "every pod evicted", || {
        let pods = pods.clone();
        async move { (remaining(&pods).await == 0).then_some(()) }
    })
    .await;
    let drained_after = drain_started.elapsed();
    kubelet.abort();

    // Every request ended with a condition.
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let all = until(Duration::from_secs(120), "every request Evicted", || {
        let requests = requests.clone();
        async move {
            let list = requests.list(&ListParams::default()).await.ok()?;
            (list.items.len() == PODS
                && list.items.iter().all(|r| {
                    r.status
                        .as_ref()
                        .is_some_and(|s| s.is_true("Evicted") || s.is_true("Canceled"))
                }))
            .then_some(list.items)
        }
    })
    .await;
    let evicted = all
        .iter()
        .filter(|r| r.status.as_ref().is_some_and(|s| s.is_true("Evicted")))
        .count();

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
