//! The `deployment.apps.k8s.io` interceptor on a real kube-apiserver with kube-controller-manager
//! (deployment, replicaset and disruption controllers): draining a node never lowers a
//! Deployment's available replicas, and the Deployment ends at its replicas on another node.
//! No surge for paused, Recreate, autoscaled Deployments and bare pods; a user's scale wins; a
//! canceled request undoes the surge. Also the SDK's example interceptor
//! (`crates/evictord-interceptor/examples/surge_log.rs`) against the same control plane, and
//! the SDK's wakes (`Runner::run_woken`).

mod support;

#[path = "../crates/evictord-interceptor/examples/surge_log.rs"]
#[allow(dead_code)]
mod surge_log;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use evictord::api::EvictionRequest;
use evictord::interceptor::{BoxError, Interceptor, Progress, Runner, Settings};
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::fixtures::{create_eviction_request, pod};
use support::surge::{FLAGS, INTERCEPTOR, Scenario};
use support::wait::until;

async fn setup(prefix: &str) -> (Client, String) {
    let c = support::control_plane::cluster_with_controller_manager().await;
    support::evictord::shared(FLAGS).await;
    (c.client().await, c.namespace(prefix).await)
}

async fn drain_keeps_available(replicas: i32, max_surge: i32, prefix: &str) {
    let most = drain_keeps_available_at_most(replicas, max_surge, prefix).await;
    assert!(
        most <= replicas + max_surge,
        "surged to {most} replicas, beyond maxSurge {max_surge}"
    );
}

/// The drain scenario; returns the most `spec.replicas` seen.
async fn drain_keeps_available_at_most(replicas: i32, max_surge: i32, prefix: &str) -> i32 {
    let (client, ns) = setup(prefix).await;
    let s = Scenario::start(client, &ns, replicas, max_surge).await;
    let ((min, samples), most) = s.drain_sampled().await;
    // The sampler ran before, through and after the drain (which the wakes made short: a second or two).
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        min >= replicas,
        "the Deployment had only {min} available replicas during the drain (want ≥ {replicas})"
    );
    // Events on the Deployment and the metrics (other tests of this binary add to the counters).
    let reasons = s.deployment_event_reasons().await;
    for reason in ["SurgeStarted", "SurgeFinished"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event: {reasons:?}"
        );
    }
    let e = support::evictord::shared(FLAGS).await;
    for series in [
        "evictord_deployment_interceptor_surges_total{result=\"started\"}",
        "evictord_deployment_interceptor_surges_total{result=\"finished\"}",
        "evictord_deployment_interceptor_time_to_available_seconds_count",
    ] {
        assert!(e.metric(series).await >= replicas as f64, "{series}");
    }
    most
}

#[tokio::test]
async fn one_replica_drains_without_downtime() {
    drain_keeps_available(1, 1, "surge-one").await;
}

#[tokio::test]
async fn three_replicas_surge_one_at_a_time() {
    drain_keeps_available(3, 1, "surge-three").await;
}

#[tokio::test]
async fn several_pods_surge_together_within_max_surge() {
    drain_keeps_available(3, 2, "surge-together").await;
    let most = drain_keeps_available_at_most(3, 3, "surge-all").await;
    assert!(
        most > 4,
        "the three pods never surged together (at most {most} replicas)"
    );
}

#[tokio::test]
async fn the_sdk_example_interceptor_completes_its_turn() {
    let (client, ns) = setup("sdk-example").await;
    let p = pod("p")
        .interceptors(&["log.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let settings = Settings {
        min_heartbeat_interval: Duration::from_secs(1),
        default_deadline: Duration::from_secs(40),
        poll_interval: Duration::from_secs(1),
        ..Settings::default()
    };
    let interceptor = surge_log::LogInterceptor {
        work: Duration::from_secs(3),
    };
    let runner = Runner::new(client.clone(), settings).namespaced(&ns);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(runner.run(interceptor, async move {
        let _ = stop_rx.await;
    }));
    let api = create_eviction_request(&client, &ns, "p", &uid, &["test.example.com"]).await;
    let entry = until(Duration::from_secs(60), "the request Evicted", || async {
        let s = api.get(&uid).await.ok()?.status?;
        let e = s.interceptor("log.example.com")?.clone();
        s.is_true("Evicted").then_some(e)
    })
    .await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert_eq!(entry.message.as_deref(), Some("connections of p drained"));
    let (start, done) = (
        entry.start_time.unwrap().0,
        entry.completion_time.unwrap().0,
    );
    assert!(
        done.duration_since(start).as_secs() >= 3,
        "{start} → {done}"
    );
    assert!(entry.heartbeat_time.is_some());
}

/// An interceptor waiting until its gate opens.
struct Gate(Arc<AtomicBool>);

impl Interceptor for Gate {
    fn name(&self) -> &str {
        "gate.example.com"
    }

    async fn progress(
        &self,
        _request: &EvictionRequest,
        _pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        Ok(if self.0.load(Ordering::Acquire) {
            Progress::complete("the gate opened")
        } else {
            Progress::in_progress("waiting for the gate")
        })
    }
}

/// `Runner::run_woken`: a request is looked at again when the wake stream names it, long before
/// its next poll (an hour away: without the wake the request would wait that long).
#[tokio::test]
async fn a_wake_looks_at_the_request_before_its_poll() {
    let (client, ns) = setup("sdk-wake").await;
    let p = pod("p")
        .interceptors(&["gate.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let hour = Duration::from_secs(3600);
    let settings = Settings {
        min_heartbeat_interval: hour,
        default_deadline: 10 * hour,
        poll_interval: hour,
        ..Settings::default()
    };
    let open = Arc::new(AtomicBool::new(false));
    let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel();
    let wakes =
        futures::stream::unfold(
            wake_rx,
            |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
        );
    let runner = Runner::new(client.clone(), settings).namespaced(&ns);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(runner.run_woken(Gate(open.clone()), wakes, async move {
        let _ = stop_rx.await;
    }));
    let api = create_eviction_request(&client, &ns, "p", &uid, &["test.example.com"]).await;
    until(
        Duration::from_secs(60),
        "the gate interceptor waiting",
        || async {
            let s = api.get(&uid).await.ok()?.status?;
            let e = s.interceptor("gate.example.com")?;
            (e.message.as_deref() == Some("waiting for the gate")).then_some(())
        },
    )
    .await;
    open.store(true, Ordering::Release);
    wake_tx
        .send(ObjectRef::<EvictionRequest>::new(&uid).within(&ns))
        .unwrap();
    let entry = until(
        Duration::from_secs(60),
        "the woken request Evicted",
        || async {
            let s = api.get(&uid).await.ok()?.status?;
            let e = s.interceptor("gate.example.com")?.clone();
            s.is_true("Evicted").then_some(e)
        },
    )
    .await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert_eq!(entry.message.as_deref(), Some("the gate opened"));
}

/// Creates an EvictionRequest for one pod of the scenario's Deployment; returns its API and name.
async fn request_one(s: &Scenario) -> (Api<EvictionRequest>, String) {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let p = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    let (name, uid) = (p.name_any(), p.metadata.uid.clone().unwrap());
    let api = create_eviction_request(&s.client, &s.ns, &name, &uid, &["test.example.com"]).await;
    (api, uid)
}

/// Waits until the interceptor's entry is complete; returns its message.
async fn completed_message(api: &Api<EvictionRequest>, uid: &str) -> String {
    until(
        Duration::from_secs(60),
        "the interceptor complete",
        || async {
            let s = api.get(uid).await.ok()?.status?;
            let e = s.interceptor(INTERCEPTOR)?;
            e.completion_time.as_ref()?;
            e.message.clone()
        },
    )
    .await
}

async fn wait_replicas(s: &Scenario, replicas: i32, surged: bool) {
    until(
        Duration::from_secs(60),
        &format!("spec.replicas {replicas}, surge recorded: {surged}"),
        || async {
            let d = s.deployments().get(&s.name).await.ok()?;
            (d.spec.replicas == Some(replicas)
                && d.annotations().contains_key("evictord.dev/surge") == surged)
                .then_some(())
        },
    )
    .await;
}

/// Patches the Deployment and waits until the deployment controller observed it.
async fn change_deployment(s: &Scenario, patch: serde_json::Value) {
    let d = s
        .deployments()
        .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let generation = d.metadata.generation;
    until(Duration::from_secs(30), "the change observed", || async {
        let d = s.deployments().get(&s.name).await.ok()?;
        (d.status?.observed_generation == generation).then_some(())
    })
    .await;
}

async fn no_surge(prefix: &str, why: &str, prepare: impl AsyncFnOnce(&Scenario)) {
    let (client, ns) = setup(prefix).await;
    let s = Scenario::start(client, &ns, 1, 1).await;
    prepare(&s).await;
    let (api, uid) = request_one(&s).await;
    let message = completed_message(&api, &uid).await;
    assert!(message.contains(why), "{message:?} lacks {why:?}");
    let d = s.deployments().get(&s.name).await.unwrap();
    assert_eq!(d.spec.replicas, Some(1), "never surged");
    assert!(!d.annotations().contains_key("evictord.dev/surge"));
}

#[tokio::test]
async fn a_paused_deployment_is_not_surged() {
    no_surge("nosurge-paused", "is paused", async |s| {
        change_deployment(s, json!({"spec": {"paused": true}})).await;
    })
    .await;
}

#[tokio::test]
async fn a_recreate_deployment_is_not_surged() {
    no_surge("nosurge-recreate", "Recreate", async |s| {
        change_deployment(
            s,
            json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}}),
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn an_autoscaled_deployment_is_not_surged() {
    no_surge("nosurge-hpa", "HorizontalPodAutoscaler web-hpa", async |s| {
        let hpa = serde_json::from_value(json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web-hpa"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": s.name},
                     "minReplicas": 1, "maxReplicas": 3},
        }))
        .unwrap();
        Api::<HorizontalPodAutoscaler>::namespaced(s.client.clone(), &s.ns)
            .create(&PostParams::default(), &hpa)
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_pod_without_a_deployment_is_not_surged() {
    let (client, ns) = setup("nosurge-bare").await;
    let p = pod("bare")
        .interceptors(&[INTERCEPTOR])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = create_eviction_request(&client, &ns, "bare", &uid, &["test.example.com"]).await;
    let message = completed_message(&api, &uid).await;
    assert!(message.contains("has no controller"), "{message:?}");
}

#[tokio::test]
async fn a_users_scale_during_the_surge_wins() {
    let (client, ns) = setup("surge-user").await;
    let s = Scenario::start(client, &ns, 1, 1).await;
    s.kubelet.set_ready(false);
    let (api, uid) = request_one(&s).await;
    wait_replicas(&s, 2, true).await;
    s.deployments()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    let message = completed_message(&api, &uid).await;
    assert!(
        message.contains("changed to 4 by someone else"),
        "{message:?}"
    );
    // Once the new pods are ready the PDB lets the pod go, and the abandoned record is dropped.
    s.kubelet.set_ready(true);
    wait_replicas(&s, 4, false).await;
    // Stays at the user's value.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let d = s.deployments().get(&s.name).await.unwrap();
    assert_eq!(d.spec.replicas, Some(4));
}

#[tokio::test]
async fn a_canceled_request_undoes_the_surge() {
    let (client, ns) = setup("surge-cancel").await;
    let s = Scenario::start(client, &ns, 1, 1).await;
    s.kubelet.set_ready(false);
    let (api, uid) = request_one(&s).await;
    wait_replicas(&s, 2, true).await;
    api.patch(
        &uid,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"requesters": []}})),
    )
    .await
    .unwrap();
    wait_replicas(&s, 1, false).await;
    let st = api.get(&uid).await.unwrap().status.unwrap();
    assert!(st.is_true("Canceled"));
}

/// The headline: `kubectl drain` (the real binary, through the Eviction API bridge) of a node
/// holding a 1-replica Deployment protected by a PodDisruptionBudget `minAvailable: 1` succeeds,
/// and the Deployment never has fewer than 1 available replica — `kubectl drain` alone would
/// wait on the budget forever.
#[tokio::test]
async fn kubectl_drain_through_the_bridge_has_no_downtime() {
    let (client, ns) = setup("surge-kubectl").await;
    let s = Scenario::start(client, &ns, 1, 1).await;
    let sampler = s.sample();
    let c = support::control_plane::cluster_with_controller_manager().await;
    let mut drain = support::tools::kubectl_command(
        c,
        &[
            "drain",
            &s.a,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("kubectl drain");
    // Bounded: kubectl's own --timeout is 180 s.
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
    assert!(
        text.contains("Eviction triggered"),
        "the bridge answered:\n{text}"
    );
    s.wait_settled_on(&s.b.clone(), "the Deployment back at 1 replica on node b")
        .await;
    let (min, samples) = sampler.stop().await;
    // The sampler ran before, through and after the drain (which the wakes made short: a second or two).
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        min >= 1,
        "the Deployment had {min} available replicas during kubectl drain"
    );
}
