//! The `endpoints.evictord.dev` interceptor (SPEC 6.4) on a real kube-apiserver with
//! kube-controller-manager: the workload and disruption controllers, and the endpoint and
//! endpointslice controllers in a process of their own (paused by one test). A Service selects a
//! Deployment's pods, which declare `deployment.apps.k8s.io,endpoints.evictord.dev`; the played
//! kubelet computes Ready from every readiness gate. The Endpoints, EndpointSlices and pods are
//! watched from the test.
//!
//! - A plain `kubectl drain` through the bridge, and a NodeMaintenance: every evicted pod is out
//!   of the Service's ready addresses (Endpoints and EndpointSlice) for at least its deregistration
//!   delay before its deletion starts; the Deployment never has fewer available replicas than
//!   its replicas; the new pods become Ready through the gate and serve.
//! - With the endpoint controllers paused, the interceptor waits for the endpoints, not only for
//!   the delay.
//! - A canceled request gives the pod back: Ready again, and back in the endpoints.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::endpoints::{
    Available, Scenario, Source, Timeline, assert_out_for_the_delay, conditions,
    message_containing, pods, request, surged, uid, unsurged,
};
use support::fixtures::{draining_maintenance, event_reasons};
use support::surge::POOL;
use support::wait::until;
use tokio::sync::RwLock;

/// The default deregistration delay of these tests (`--deregistration-delay`).
const DELAY: f64 = 2.0;

/// The surge tests' flags, a short default delay and a wait for the endpoints that a paused
/// controller never reaches.
const FLAGS: &[&str] = &[
    "--interceptor-deadline=60s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
    "--deregistration-delay=2s",
    "--endpoints-wait-timeout=90s",
];

/// Held shared by every test, exclusively by the one that pauses the endpoint controllers they
/// all depend on.
static ENDPOINT_CONTROLLERS: RwLock<()> = RwLock::const_new(());

async fn setup(prefix: &str) -> (Client, String, Timeline) {
    let c = support::control_plane::cluster_with_endpoint_controllers().await;
    support::evictord::shared(FLAGS).await;
    let ns = c.namespace(prefix).await;
    let client = c.client().await;
    let timeline = Timeline::start(&client, &ns, "web").await;
    (client, ns, timeline)
}

/// The pods' events carry these reasons (repeated events are folded into one).
async fn assert_events(s: &Scenario, reasons: &[&str]) {
    let seen = event_reasons(&s.client, Some(&s.ns), "Pod").await;
    for reason in reasons {
        assert!(
            seen.iter().any(|r| r == reason),
            "no {reason} event: {seen:?}"
        );
    }
}

/// Runs the real `kubectl drain` of `node` (bounded by its own 180 s timeout); returns its output.
async fn kubectl_drain(node: &str) -> String {
    let c = support::control_plane::cluster_with_controller_manager().await;
    let mut drain = support::tools::kubectl_command(
        c,
        &[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("kubectl drain");
    let mut status = None;
    for _ in 0..2000 {
        status = drain.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if status.is_none() {
        let _ = drain.kill();
    }
    let out = drain.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "kubectl drain failed or hung:\n{text}"
    );
    text
}

/// The new pods serve through the gate: `evictord.dev/serving` set `True` by evictord
/// (reason `Serving`), Ready, and ready addresses of the Service (checked by `wait_serving`).
fn assert_gated_and_serving(pods: &[Pod]) {
    for p in pods {
        let gates: Vec<&str> = p
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|g| g.condition_type.as_str())
            .collect();
        assert_eq!(
            gates,
            ["evictord.dev/serving"],
            "the webhook's gate (rule P9)"
        );
        let c = evictord::serving::condition_of(p).expect("the condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("Serving"))
        );
    }
}

/// `kubectl drain` through the Eviction API bridge: the pod leaves the Service's ready addresses
/// at least its delay before it is deleted, with no replica lost, and its replacement serves.
#[tokio::test]
async fn kubectl_drain_takes_the_pod_out_of_its_endpoints_first() {
    let _shared = ENDPOINT_CONTROLLERS.read().await;
    let (client, ns, timeline) = setup("endpoints-kubectl").await;
    let s = Scenario::start(client, &ns, surged(1, None), &timeline).await;
    let before = pods(&s).await;
    assert_gated_and_serving(&before);
    let available = Available::sample(s.deployments(), &s.name);
    let out = kubectl_drain(&s.a).await;
    assert!(
        out.contains("Eviction triggered"),
        "the bridge answered:\n{out}"
    );
    let after = s.wait_serving(&s.b.clone(), &timeline).await;
    assert_gated_and_serving(&after);
    assert_out_for_the_delay(&timeline, &before, DELAY).await;
    let (least, samples) = available.stop();
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        least >= s.replicas,
        "the Deployment had {least} available replicas during the drain"
    );
    assert_events(&s, &["LeavingEndpoints", "OutOfEndpoints"]).await;
    let e = support::evictord::shared(FLAGS).await;
    for series in [
        "evictord_endpoints_interceptor_pods_total{result=\"left\"}",
        "evictord_endpoints_interceptor_time_to_leave_seconds_count",
        "evictord_serving_gate_writes_total{result=\"serving\"}",
    ] {
        assert!(e.metric(series).await >= 1.0, "{series}");
    }
}

/// A NodeMaintenance drains two pods whose own annotation asks for a 3 s delay.
#[tokio::test]
async fn a_node_maintenance_takes_the_pods_out_of_their_endpoints_first() {
    let _shared = ENDPOINT_CONTROLLERS.read().await;
    let (client, ns, timeline) = setup("endpoints-nm").await;
    let s = Scenario::start(client, &ns, surged(2, Some("3s")), &timeline).await;
    let before = pods(&s).await;
    let available = Available::sample(s.deployments(), &s.name);
    let nm = draining_maintenance(&ns, POOL, &s.a, "endpoints test");
    Api::<evictord::api::NodeMaintenance>::all(s.client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .expect("create NodeMaintenance");
    let after = s.wait_serving(&s.b.clone(), &timeline).await;
    assert_gated_and_serving(&after);
    assert_out_for_the_delay(&timeline, &before, 3.0).await;
    let (least, _) = available.stop();
    assert!(
        least >= s.replicas,
        "the Deployment had {least} available replicas during the drain"
    );
}

/// With the endpoint controllers paused the unready pod stays a ready address: the interceptor
/// waits for the endpoints, well past the delay, and the eviction follows only once they
/// dropped the pod and the delay passed.
#[tokio::test]
async fn the_interceptor_waits_for_the_endpoints_not_only_the_delay() {
    let _exclusive = ENDPOINT_CONTROLLERS.write().await;
    let (client, ns, timeline) = setup("endpoints-paused").await;
    let s = Scenario::start(client, &ns, unsurged(None), &timeline).await;
    let p = pods(&s).await.remove(0);
    let (name, u) = (p.name_any(), uid(&p));
    let paused = support::control_plane::pause_endpoint_controllers();
    let api = request(&s, &p).await;
    until(Duration::from_secs(30), "the pod unready", || async {
        let (serving, ready, _) = conditions(&s, &name).await;
        (serving.as_deref() == Some("False") && ready.as_deref() == Some("False")).then_some(())
    })
    .await;
    // Twice the delay with the controllers paused: still listed, still waited for.
    tokio::time::sleep(Duration::from_secs_f64(2.0 * DELAY + 1.0)).await;
    assert!(
        timeline.ready_now(&u),
        "the paused controllers kept the pod listed"
    );
    assert!(
        !conditions(&s, &name).await.2,
        "evicted while its Service still listed it"
    );
    let entry = api.get(&u).await.unwrap().status.unwrap();
    let entry = entry.interceptor("endpoints.evictord.dev").unwrap();
    assert!(
        entry.completion_time.is_none(),
        "completed while still listed: {entry:?}"
    );
    message_containing(&api, &u, "waiting until Service web drop it").await;
    let resumed = std::time::Instant::now();
    paused.resume();
    assert_out_for_the_delay(&timeline, std::slice::from_ref(&p), DELAY).await;
    for source in [Source::Endpoints, Source::Slices] {
        let left = timeline.left(&u, source).expect("left");
        assert!(left >= resumed, "{source:?} dropped the pod while paused");
    }
}

/// A request canceled after the pod left its endpoints gives it back: `evictord.dev/serving`
/// `True` again, Ready, and a ready address of the Service again.
#[tokio::test]
async fn a_canceled_request_puts_the_pod_back_in_its_endpoints() {
    let _shared = ENDPOINT_CONTROLLERS.read().await;
    let (client, ns, timeline) = setup("endpoints-cancel").await;
    let s = Scenario::start(client, &ns, unsurged(None), &timeline).await;
    let p = pods(&s).await.remove(0);
    let (name, u) = (p.name_any(), uid(&p));
    let api = request(&s, &p).await;
    message_containing(&api, &u, "deregistration delay").await;
    until(
        Duration::from_secs(30),
        "the pod out of its endpoints",
        || async { timeline.out_now(&u).then_some(()) },
    )
    .await;
    api.patch(
        &u,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"requesters": []}})),
    )
    .await
    .unwrap();
    until(Duration::from_secs(60), "the pod serving again", || async {
        let (serving, ready, deleting) = conditions(&s, &name).await;
        (serving.as_deref() == Some("True")
            && ready.as_deref() == Some("True")
            && !deleting
            && timeline.ready_now(&u))
        .then_some(())
    })
    .await;
    let r = api.get(&u).await.unwrap().status.unwrap();
    assert!(r.is_true("Canceled"));
    let back = evictord::serving::condition_of(&s.pods().get(&name).await.unwrap())
        .cloned()
        .unwrap();
    assert_eq!(back.reason.as_deref(), Some("EvictionCanceled"));
    for source in [Source::Endpoints, Source::Slices] {
        assert!(
            timeline.entered(&u, source) > timeline.left(&u, source),
            "{source:?}: back after it left"
        );
    }
    assert_events(
        &s,
        &["LeavingEndpoints", "OutOfEndpoints", "ServingRestored"],
    )
    .await;
}
