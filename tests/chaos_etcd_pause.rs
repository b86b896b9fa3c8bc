//! etcd paused (SIGSTOP) for 30 s in the middle of a NodeMaintenance draining 500 pods, then
//! resumed (SIGCONT) (`make chaos`; ignored by `make test`, it takes a minute or more). The
//! pause outlasts evictord's 15 s lease and its 30 s bound on an Eviction API call. evictord
//! (leader and standby) must carry on once etcd is back and finish the drain: Drained=True,
//! every pod gone, every EvictionRequest ended; kube-apiserver's audit log shows per pod that no
//! pod was evicted twice (no call after a call answered 2xx, no 404/409 that a cut call does not
//! explain). The figures are printed for README "Reliability".

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use support::audit::{
    EvictionLedger, eviction_calls, first_eviction_answered_after, first_eviction_received_after,
};
use support::chaos::{
    CallsOutOfLeadership, LEADING, LOST, every_request_ended, evicted, kubelet_finishing_deletions,
    leader_and_standby, log_count, pods_on_node, remaining, seconds, start_drain, until_drained,
    until_every_pod_evicted, until_remaining_at_most,
};
use support::control_plane::cluster_with_eviction_audit;
use support::evictord::{install_crds, readyz_within};

const PODS: usize = 500;
const LEASE: Duration = Duration::from_secs(15);
const PAUSE: Duration = Duration::from_secs(30);

#[tokio::test]
#[ignore = "a minute or more: run by `make chaos`"]
async fn etcd_paused_30s_mid_drain() {
    let c = cluster_with_eviction_audit().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("chaos-etcd").await;
    let (mut leader, mut standby) = leader_and_standby(c, &ns, LEASE, "evictord-chaos").await;
    let names = pods_on_node(&client, &ns, "chaos-n1", ("chaos", "drain"), PODS).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert_eq!(remaining(&pods).await, PODS);
    let finished_by_kubelet = Arc::new(AtomicUsize::new(0));
    let kubelet = kubelet_finishing_deletions(pods.clone(), finished_by_kubelet.clone());

    let drain_started = start_drain(
        &client,
        "chaos-drain",
        ("chaos", "drain"),
        "chaos: etcd paused",
    )
    .await;
    until_remaining_at_most(
        &pods,
        PODS * 2 / 3,
        Duration::from_secs(600),
        "a third of the pods evicted",
    )
    .await;
    let left_at_pause = remaining(&pods).await;
    // Nothing in the test calls the API while etcd is stopped (the fake kubelet's calls wait);
    // the guard sends SIGCONT even if the test fails.
    let paused = c.pause_etcd();
    let paused_at = paused.paused;
    tokio::time::sleep(PAUSE).await;
    let resumed_at = paused.resume();

    // A drain of this size finishes about 30 s after the fault; four minutes means it stalled.
    until_every_pod_evicted(&client, &ns, Duration::from_secs(240)).await;
    let drained_after = drain_started.elapsed();
    until_drained(&client, "chaos-drain", Duration::from_secs(120)).await;
    let requests = every_request_ended(&client, &ns, PODS, Duration::from_secs(120)).await;
    kubelet.abort();
    let requests_evicted = evicted(&requests);
    let running = (leader.running(), standby.running());
    let ready = (
        readyz_within(leader.probe_port, Duration::from_secs(60)).await,
        readyz_within(standby.probe_port, Duration::from_secs(60)).await,
    );

    let audit = c.eviction_audit.as_ref().expect("audit log");
    let calls = eviction_calls(audit, &ns);
    let ledger = EvictionLedger::of(&calls, &names);
    let in_flight = calls
        .iter()
        .filter(|call| call.received < resumed_at && call.answered >= paused_at)
        .map(|call| call.code)
        .collect::<Vec<_>>();
    let first_answered = first_eviction_answered_after(&calls, resumed_at)
        .map(|call| seconds(resumed_at, call.answered));
    let first_new = first_eviction_received_after(&calls, resumed_at)
        .map(|call| seconds(resumed_at, call.answered));
    let out_of_leadership = CallsOutOfLeadership::of(&calls, &[&leader, &standby]);
    let leadership = |needle| log_count(&leader, needle) + log_count(&standby, needle);
    let secs = |s: Option<f64>| s.map_or("never".to_string(), |s| format!("{s:.2} s"));
    println!(
        "RELIABILITY etcd-pause: {PODS} pods, etcd stopped for {:.1} s with {left_at_pause} \
         left; calls received or answered during the pause: {} (codes {in_flight:?}); after \
         SIGCONT first eviction answered {}, first eviction requested after SIGCONT answered {}; \
         drain done in {:.1} s; Eviction API calls {} by code {:?}: pods evicted by a 2xx {}, \
         by a cut call only {}, never {}, twice {}; calls after a 2xx for the pod {}, 404/409 \
         after a cut call {}, unexplained {}; pods left terminating (finished by the test's \
         kubelet): {}; requests Evicted {requests_evicted}/{}; leadership acquired {} times, \
         lost {} times; Eviction API calls by a replica while the other led {} {:?}, after it \
         had lost leadership {}; refused 429 {}; own status writes denied by rule S4 (a time set \
         over 10 s before the write arrived) {}; evictord running {running:?}, ready {ready:?}",
        seconds(paused_at, resumed_at),
        in_flight.len(),
        secs(first_answered),
        secs(first_new),
        drained_after.as_secs_f64(),
        ledger.calls,
        ledger.by_code,
        ledger.evicted,
        ledger.evicted_by_cut_call,
        ledger.never_called.len(),
        ledger.evicted_twice.len(),
        ledger.after_evicted.len(),
        ledger.gone_after_cut,
        ledger.gone_unexplained.len(),
        finished_by_kubelet.load(Ordering::SeqCst),
        requests.len(),
        leadership(LEADING),
        leadership(LOST),
        out_of_leadership.while_another_led.len(),
        out_of_leadership.while_another_led,
        out_of_leadership.after_own_loss.len(),
        ledger.refused_calls(),
        log_count(&leader, "(rule S4)") + log_count(&standby, "(rule S4)"),
    );

    assert!(
        left_at_pause < PODS && left_at_pause > 0,
        "paused mid-drain"
    );
    assert!(first_new.is_some(), "an eviction requested after SIGCONT");
    ledger.assert_each_pod_evicted_once();
    assert!(
        out_of_leadership.while_another_led.is_empty(),
        "Eviction API calls by a deposed leader while its successor led: {:?}",
        out_of_leadership.while_another_led
    );
    assert_eq!(requests_evicted, PODS, "every request Evicted");
    assert_eq!(
        running,
        (true, true),
        "both evictord processes still running"
    );
    assert_eq!(ready, (true, true), "both evictord processes ready again");
    c.delete_namespace(&ns).await;
}
