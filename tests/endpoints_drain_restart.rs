//! The `endpoints.evictord.dev` interceptor survives a SIGKILL in the middle of a pod's
//! deregistration delay (SPEC 6.4: restart-safe, the record is on the pod): the restarted
//! evictord (same webhook port and certificates) reads the pod's `evictord.dev/serving`
//! condition back, neither puts the pod back in its endpoints nor starts the delay again, and
//! lets the eviction go once the recorded delay has passed. Its own binary: it starts and kills
//! its own evictord.

mod support;

use std::time::Duration;

use kube::ResourceExt;
use support::Evictord;
use support::endpoints::{
    Scenario, Timeline, assert_out_for_the_delay, conditions, message_containing, pods, request,
    uid, unsurged,
};
use support::evictord::{SpawnOptions, install_crds};
use support::wait::until;

/// The pod's own delay: long enough for the kill and the restart to fall inside it.
const DELAY: &str = "30s";

const FLAGS: &[&str] = &[
    "--interceptor-deadline=60s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
    "--endpoints-wait-timeout=90s",
];

/// The pod's `evictord.dev/serving` condition as (status, reason, lastProbeTime).
async fn record(s: &Scenario, name: &str) -> Option<(String, Option<String>, Option<String>)> {
    let p = s.pods().get_opt(name).await.ok()??;
    let c = evictord::serving::condition_of(&p)?;
    Some((
        c.status.clone(),
        c.reason.clone(),
        c.last_probe_time.as_ref().map(|t| t.0.to_string()),
    ))
}

#[tokio::test]
async fn a_killed_evictord_keeps_the_pod_out_and_its_delay_where_it_was() {
    let c = support::control_plane::cluster_with_endpoint_controllers().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("endpoints-restart").await;
    let mut first = Evictord::start(c, FLAGS).await;
    first.register_webhooks(c, "evictord").await;

    let timeline = Timeline::start(&client, &ns, "web").await;
    let s = Scenario::start(client, &ns, unsurged(Some(DELAY)), &timeline).await;
    let p = pods(&s).await.remove(0);
    let (name, u) = (p.name_any(), uid(&p));
    let api = request(&s, &p).await;
    message_containing(&api, &u, "waiting the deregistration delay").await;
    let before = record(&s, &name).await.expect("the pod's record");
    assert_eq!(
        (before.0.as_str(), before.1.as_deref()),
        ("False", Some("Deregistering")),
        "{before:?}"
    );
    first.kill();
    // Heartbeats have whole seconds: one written after this was written by the restarted one.
    let killed = jiff::Timestamp::now();

    let second = Evictord::spawn(c, FLAGS, SpawnOptions::in_place_of(&first));
    second.ready().await;
    // The restarted evictord picks the request up again (a heartbeat of its own): while the delay runs, the pod's record is the one written before the kill,
    // and the pod stays out of its endpoints.
    until(
        Duration::from_secs(60),
        "the restarted evictord's heartbeat on the request",
        || async {
            let st = api.get(&u).await.ok()?.status?;
            let e = st.interceptor("endpoints.evictord.dev")?;
            let beat = e.heartbeat_time.as_ref()?.0;
            (beat.as_second() > killed.as_second()).then_some(())
        },
    )
    .await;
    let (serving, ready, deleting) = conditions(&s, &name).await;
    assert!(
        !deleting,
        "the pod went before the restarted evictord was seen at work (a restart longer than the \
         {DELAY} delay?)"
    );
    assert_eq!(serving.as_deref(), Some("False"), "put back after restart");
    assert_eq!(ready.as_deref(), Some("False"), "Ready again after restart");
    assert_eq!(
        record(&s, &name).await.as_ref(),
        Some(&before),
        "the restarted evictord wrote the record again (the delay restarted)"
    );
    assert!(
        !timeline.ready_now(&u),
        "back in the endpoints after restart"
    );
    // The eviction follows once the recorded delay has passed, never earlier.
    assert_out_for_the_delay(&timeline, std::slice::from_ref(&p), 30.0).await;
    until(Duration::from_secs(60), "the pod gone", || async {
        conditions(&s, &name).await.2.then_some(())
    })
    .await;
}
