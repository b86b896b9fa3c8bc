//! kube-apiserver restarted in the middle of a NodeMaintenance draining 500 pods (`make chaos`;
//! ignored by `make test`, it takes a minute or more): SIGTERM (SIGKILL after 30 s), then the same
//! binary with the same arguments, port, certificates and etcd. evictord (leader and standby)
//! must reconnect and finish the drain: Drained=True, every pod gone, every EvictionRequest
//! ended. kube-apiserver's request counters restart at zero with it, so the proof that no pod
//! was evicted twice comes from its audit log, which does not: per pod, no call after a call
//! answered 2xx and no 404/409 that a cut call does not explain. The figures are printed for
//! README "Reliability".

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use support::audit::{EvictionLedger, eviction_calls, first_eviction_received_after};
use support::chaos::{
    CallsOutOfLeadership, LEADING, LOST, every_request_ended, evicted, kubelet_finishing_deletions,
    leader_and_standby, log_count, pods_on_node, remaining, seconds, start_drain, until_drained,
    until_every_pod_evicted, until_remaining_at_most,
};
use support::control_plane::cluster_with_eviction_audit;
use support::evictord::{install_crds, readyz_within};

const PODS: usize = 500;
const LEASE: Duration = Duration::from_secs(15);

#[tokio::test]
#[ignore = "a minute or more: run by `make chaos`"]
async fn apiserver_restarted_mid_drain() {
    let c = cluster_with_eviction_audit().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("chaos-restart").await;
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
        "chaos: kube-apiserver restart",
    )
    .await;
    until_remaining_at_most(
        &pods,
        PODS * 2 / 3,
        Duration::from_secs(600),
        "a third of the pods evicted",
    )
    .await;
    let left_at_restart = remaining(&pods).await;
    let restart = c.restart_apiserver().await;

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
    let resumed = first_eviction_received_after(&calls, restart.started)
        .map(|call| seconds(restart.answering, call.answered));
    let out_of_leadership = CallsOutOfLeadership::of(&calls, &[&leader, &standby]);
    let leadership = |needle| log_count(&leader, needle) + log_count(&standby, needle);
    println!(
        "RELIABILITY apiserver-restart: {PODS} pods, kube-apiserver stopped with \
         {left_at_restart} left: exited {:.1} s after SIGTERM{}, the new one answering {:.1} s \
         and ready {:.1} s after its start ({:.1} s without an answer in all); first eviction \
         {} after it answered; drain done in {:.1} s; Eviction \
         API calls {} by code {:?}: pods evicted by a 2xx {}, by a cut call only {}, never {}, \
         twice {}; calls after a 2xx for the pod {}, 404/409 after a cut call {}, unexplained \
         {}; pods left terminating (finished by the test's kubelet): {}; requests Evicted \
         {requests_evicted}/{}; leadership acquired {} times, lost {} times; Eviction API calls by a replica while the other led {} \
         {:?}, after it had lost leadership {}; refused 429 {}; evictord running \
         {running:?}, ready {ready:?}",
        restart.stop_took.as_secs_f64(),
        if restart.killed { " (SIGKILL)" } else { "" },
        seconds(restart.started, restart.answering),
        seconds(restart.started, restart.ready),
        seconds(restart.stopping, restart.answering),
        resumed.map_or("never".into(), |s| format!("{s:.2} s")),
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
    );

    assert!(
        left_at_restart < PODS && left_at_restart > 0,
        "restarted mid-drain"
    );
    assert!(
        resumed.is_some(),
        "an eviction by the restarted kube-apiserver"
    );
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
