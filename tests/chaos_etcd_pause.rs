//! etcd paused (SIGSTOP) for 30 s in the middle of a NodeMaintenance draining 500 pods, then
//! resumed (SIGCONT) (`make chaos`; ignored by `make test`, it takes a minute or more). The
//! pause outlasts evictord's 15 s lease and its 30 s bound on an Eviction API call. evictord
//! (leader and standby) must carry on once etcd is back and finish the drain: Drained=True,
//! every pod gone, every EvictionRequest ended; kube-apiserver's audit log shows per pod that no
//! pod was evicted twice (no call after a call answered 2xx, no 404/409 that a cut call does not
//! explain). The figures are printed for docs/src/reliability.md.

mod support;

use std::time::Duration;

use support::audit::{first_eviction_answered_after, first_eviction_received_after};
use support::chaos::{FAULT_PODS, drain_through_fault, log_count, seconds};

const PAUSE: Duration = Duration::from_secs(30);

#[tokio::test]
#[ignore = "a minute or more: run by `make chaos`"]
async fn etcd_paused_30s_mid_drain() {
    let (run, (paused_at, resumed_at)) =
        drain_through_fault("chaos-etcd", "chaos: etcd paused", |c| async move {
            // Nothing in the test calls the API while etcd is stopped (the fake kubelet's calls
            // wait); the guard sends SIGCONT even if the test fails.
            let paused = c.pause_etcd();
            let paused_at = paused.paused;
            tokio::time::sleep(PAUSE).await;
            (paused_at, paused.resume())
        })
        .await;
    let in_flight = run
        .calls
        .iter()
        .filter(|call| call.received < resumed_at && call.answered >= paused_at)
        .map(|call| call.code)
        .collect::<Vec<_>>();
    let first_answered = first_eviction_answered_after(&run.calls, resumed_at)
        .map(|call| seconds(resumed_at, call.answered));
    let first_new = first_eviction_received_after(&run.calls, resumed_at)
        .map(|call| seconds(resumed_at, call.answered));
    let secs = |s: Option<f64>| s.map_or("never".to_string(), |s| format!("{s:.2} s"));
    println!(
        "RELIABILITY etcd-pause: {FAULT_PODS} pods, etcd stopped for {:.1} s with {} left; calls \
         received or answered during the pause: {} (codes {in_flight:?}); after SIGCONT first \
         eviction answered {}, first eviction requested after SIGCONT answered {}; {}; own \
         status writes denied by rule S4 (a time set over 10 s before the write arrived) {}; \
         evictord running {:?}, ready {:?}",
        seconds(paused_at, resumed_at),
        run.left_at_fault,
        in_flight.len(),
        secs(first_answered),
        secs(first_new),
        run.figures(),
        log_count(&run.leader, "(rule S4)") + log_count(&run.standby, "(rule S4)"),
        run.running,
        run.ready,
    );
    assert!(first_new.is_some(), "an eviction requested after SIGCONT");
    run.assert_recovered("paused").await;
}
