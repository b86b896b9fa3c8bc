//! kube-apiserver restarted (about half a minute without an answer) while an interceptor,
//! heartbeating every 2 s, holds a pod under a heartbeat deadline of 15 s (`make chaos`): nobody
//! can write a heartbeat while kube-apiserver does not answer, so the outage must not count
//! against the interceptor. Once it answers again and the interceptor heartbeats, the
//! interceptor keeps its turn and the pod stays; once it stops heartbeating, it times out after
//! its deadline as before. The soak found the fault: a Deployment's pod evicted without its
//! surge after a restart longer than the interceptors' deadline.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use support::fixtures::{create_eviction_request, pod};
use support::interceptor::{now, write_when_active};
use support::wait::until;

const INTERCEPTOR: &str = "db.example.com";
/// The heartbeat deadline: shorter than the outage (about 33 s), and long enough for the test's
/// interceptor to write a heartbeat once kube-apiserver answers again (its first calls after a
/// restart may meet a dead connection or "server is starting").
const DEADLINE: Duration = Duration::from_secs(15);
const FLAGS: &[&str] = &[
    "--interceptor-deadline=15s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=4s",
];

/// Writes the interceptor's heartbeat every 2 s while `on`, whatever kube-apiserver answers.
fn heartbeat(api: Api<EvictionRequest>, uid: String, on: Arc<AtomicBool>) {
    tokio::spawn(async move {
        while on.load(Ordering::SeqCst) {
            if let Ok(Ok(mut obj)) =
                tokio::time::timeout(Duration::from_secs(5), api.get(&uid)).await
            {
                let mut s = obj.status.clone().unwrap_or_default();
                if let Some(e) = s.interceptors.iter_mut().find(|i| i.name == INTERCEPTOR) {
                    e.heartbeat_time = Some(now());
                    obj.status = Some(s);
                    obj.metadata.managed_fields = None;
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        api.replace_status(&uid, &PostParams::default(), &obj),
                    )
                    .await;
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
}

fn processed(r: &EvictionRequest) -> Vec<String> {
    r.status
        .as_ref()
        .map(|s| s.processed_interceptors.clone())
        .unwrap_or_default()
}

#[tokio::test]
#[ignore = "restarts kube-apiserver: run by make chaos"]
async fn an_outage_longer_than_the_heartbeat_deadline_times_no_interceptor_out() {
    let e = support::evictord::shared(FLAGS).await;
    let c = support::cluster().await;
    let client = c.client().await;
    let ns = c.namespace("chaos-outage").await;
    let p = pod("held")
        .interceptors(&[INTERCEPTOR])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().expect("uid");
    let api = create_eviction_request(&client, &ns, "held", &uid, &["test.example.com"]).await;
    write_when_active(&api, &uid, INTERCEPTOR, |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
        e.message = Some("moving data".into());
    })
    .await;
    let on = Arc::new(AtomicBool::new(true));
    heartbeat(api.clone(), uid.clone(), on.clone());
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        processed(&api.get(&uid).await.unwrap()).is_empty(),
        "a heartbeating interceptor keeps its turn"
    );

    let restart = c.restart_apiserver().await;
    let down = restart
        .answering
        .duration_since(restart.stopping)
        .unwrap_or_default();
    assert!(
        down > DEADLINE + Duration::from_secs(5),
        "the outage ({down:?}) must outlast the {DEADLINE:?} deadline"
    );
    // Heartbeats come again; the controller's watch is back (its next change comes through).
    tokio::time::sleep(DEADLINE + Duration::from_secs(10)).await;
    let r = api.get(&uid).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert!(
        processed(&r).is_empty(),
        "the interceptor was timed out by an outage of {down:?} during which it could not heartbeat: {:?}\nevictord log: {}",
        r.status,
        e.log.display()
    );
    assert!(
        pods.get_opt("held").await.unwrap().is_some(),
        "the pod stays while its interceptor works"
    );

    // Silent from now on: timed out after its deadline (plus the controller's look).
    on.store(false, Ordering::SeqCst);
    let timed_out = until(
        Duration::from_secs(60),
        "the silent interceptor timed out",
        || async {
            let r = api.get(&uid).await.ok()?;
            processed(&r).iter().any(|p| p == INTERCEPTOR).then_some(r)
        },
    )
    .await;
    assert_eq!(processed(&timed_out)[0], INTERCEPTOR);
    until(Duration::from_secs(60), "the pod evicted", || async {
        pods.get_opt("held").await.ok()?.is_none().then_some(())
    })
    .await;
}
