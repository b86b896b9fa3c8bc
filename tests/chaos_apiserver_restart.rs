//! kube-apiserver restarted in the middle of a NodeMaintenance draining 500 pods (`make chaos`;
//! ignored by `make test`, it takes a minute or more): SIGTERM (SIGKILL after 30 s), then the same
//! binary with the same arguments, port, certificates and etcd. evictord (leader and standby)
//! must reconnect and finish the drain: Drained=True, every pod gone, every EvictionRequest
//! ended. kube-apiserver's request counters restart at zero with it, so the proof that no pod
//! was evicted twice comes from its audit log, which does not: per pod, no call after a call
//! answered 2xx and no 404/409 that a cut call does not explain. The figures are printed for
//! docs/src/reliability.md.

mod support;

use support::audit::first_eviction_received_after;
use support::chaos::{FAULT_PODS, drain_through_fault, seconds};

#[tokio::test]
#[ignore = "a minute or more: run by `make chaos`"]
async fn apiserver_restarted_mid_drain() {
    let (run, restart) =
        drain_through_fault("chaos-restart", "chaos: kube-apiserver restart", |c| {
            c.restart_apiserver()
        })
        .await;
    let resumed = first_eviction_received_after(&run.calls, restart.started)
        .map(|call| seconds(restart.answering, call.answered));
    println!(
        "RELIABILITY apiserver-restart: {FAULT_PODS} pods, kube-apiserver stopped with {} left: \
         exited {:.1} s after SIGTERM{}, the new one answering {:.1} s and ready {:.1} s after its \
         start ({:.1} s without an answer in all); first eviction {} after it answered; {}; \
         evictord running {:?}, ready {:?}",
        run.left_at_fault,
        restart.stop_took.as_secs_f64(),
        if restart.killed { " (SIGKILL)" } else { "" },
        seconds(restart.started, restart.answering),
        seconds(restart.started, restart.ready),
        seconds(restart.stopping, restart.answering),
        resumed.map_or("never".into(), |s| format!("{s:.2} s")),
        run.figures(),
        run.running,
        run.ready,
    );
    assert!(
        resumed.is_some(),
        "an eviction by the restarted kube-apiserver"
    );
    run.assert_recovered("restarted").await;
}
